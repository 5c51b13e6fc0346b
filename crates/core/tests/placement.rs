//! Placement, as properties over generated fleets (a small seeded generator: the workspace has
//! no property-testing crate) and as cases with an in-memory extender client.
//!
//! Properties: a target never gets more than `numberOfClusterTypes` cluster types from a
//! policy; the chosen set never exceeds `maxSkew` between a domain and any domain that still had
//! candidates; the result does not depend on the order objects are read in; a re-render with
//! `Steady` and the previous result as the current assignment is identical.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

mod support;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use support::Rng;

use kalypso_api::{
    ClusterTypeSelector, ClusterTypeSpec, DeploymentTargetSelector, DeploymentTargetSpec, ExtenderRef,
    FailurePolicy, LabelSelector, LabelValue, Labels, Prioritizer, SchedulerExtenderSpec,
    SchedulingPolicySpec, SpreadConstraint,
};
use kalypso_core::model::{AnyObject, Kustomization, Namespace, Object};
use kalypso_core::placement::{CurrentAssignment, ExtenderCall, ExtenderClient, PlacementInput};
use kalypso_core::schedule::{Schedule, schedule_with};
use kalypso_core::unfold::deployment_targets;
use kalypso_core::{Diagnostics, Origin};

fn labels(pairs: &[(&str, String)]) -> Labels {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()
}

fn origin(file: &str) -> Origin {
    Origin::new(file, 1)
}

/// A generated fleet: cluster types with `region` and `capacity` labels, declared deployment
/// targets, and policies with random placement fields. Returns the objects and, per policy,
/// (numberOfClusterTypes, maxSkew).
/// Per policy: (numberOfClusterTypes, maxSkew).
type Limits = BTreeMap<String, (Option<usize>, Option<usize>)>;

fn fleet(rng: &mut Rng) -> (Vec<AnyObject>, Limits) {
    let mut objects = Vec::new();
    let cluster_types = 2 + rng.below(12);
    for i in 0..cluster_types {
        let mut l = vec![("capacity", rng.below(100).to_string())];
        if rng.below(8) != 0 {
            l.push(("region", format!("r{}", rng.below(4))));
        }
        if rng.below(2) == 0 {
            l.push(("tier", "gold".to_owned()));
        }
        let mut o = Object::new(
            format!("ct{i:02}"),
            ClusterTypeSpec::default(),
            origin("dev/ct.yaml"),
        );
        o.meta.labels = labels(&l);
        objects.push(AnyObject::ClusterType(o));
    }
    for i in 0..1 + rng.below(8) {
        let mut o = Object::new(
            format!("w-t{i}"),
            DeploymentTargetSpec {
                environment: "dev".into(),
                ..Default::default()
            },
            origin("dev/dt.yaml"),
        );
        o.meta.labels = labels(&[("workload", "w".into()), ("zone", format!("z{}", rng.below(2)))]);
        objects.push(AnyObject::DeploymentTarget(o));
    }
    let mut limits = BTreeMap::new();
    for p in 0..1 + rng.below(3) {
        let limit = (rng.below(4) != 0).then(|| 1 + rng.below(5) as usize);
        let skew = (rng.below(3) != 0).then(|| 1 + rng.below(2) as usize);
        let mut prioritizers = Vec::new();
        for (i, kind) in ["Steady", "Balance", "capacity"].iter().enumerate() {
            if rng.below(2) == 0 {
                let weight = Some(rng.below(4) as i64);
                prioritizers.push(if i == 2 {
                    Prioritizer {
                        label_value: Some(LabelValue { key: (*kind).into() }),
                        weight,
                        ..Default::default()
                    }
                } else {
                    Prioritizer {
                        built_in: Some((*kind).into()),
                        weight,
                        ..Default::default()
                    }
                });
            }
        }
        let ct_selector = if rng.below(3) == 0 {
            labels(&[("tier", "gold".into())])
        } else {
            Labels::new()
        };
        let dt_selector = if rng.below(3) == 0 {
            labels(&[("zone", "z0".into())])
        } else {
            Labels::new()
        };
        let spec = SchedulingPolicySpec {
            deployment_target_selector: DeploymentTargetSelector {
                workspace: String::new(),
                label_selector: LabelSelector {
                    match_labels: dt_selector,
                    ..Default::default()
                },
            },
            cluster_type_selector: ClusterTypeSelector {
                label_selector: LabelSelector {
                    match_labels: ct_selector,
                    ..Default::default()
                },
            },
            number_of_cluster_types: limit.map(|n| n as i64),
            prioritizers,
            spread_constraints: skew
                .map(|s| SpreadConstraint {
                    topology_key: "region".into(),
                    max_skew: s as i64,
                })
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let name = format!("p{p}");
        limits.insert(name.clone(), (limit, skew));
        objects.push(AnyObject::SchedulingPolicy(Object::new(
            name,
            spec,
            origin("dev/p.yaml"),
        )));
    }
    (objects, limits)
}

fn namespace(objects: Vec<AnyObject>) -> Namespace {
    let mut ns = Namespace::new("dev");
    let mut d = Diagnostics::new();
    ns.apply(&Kustomization::Environment, objects, &mut d);
    assert!(!d.has_errors(), "{d}");
    ns
}

fn run(ns: &Namespace, current: &CurrentAssignment, client: &dyn ExtenderClient) -> (Schedule, Diagnostics) {
    let mut d = Diagnostics::new();
    let targets = deployment_targets(ns, &mut d);
    let decisions = BTreeMap::new();
    let input = PlacementInput {
        current,
        extenders: client,
        decisions: &decisions,
    };
    let schedule = schedule_with(ns, &targets, &input, &mut d);
    (schedule, d)
}

fn assignment(s: &Schedule) -> CurrentAssignment {
    let mut out = CurrentAssignment::new();
    for a in s.iter() {
        out.entry(a.deployment_target.clone())
            .or_default()
            .insert(a.cluster_type.clone());
    }
    out
}

#[test]
fn generated_fleets_keep_limits_and_skew_and_do_not_depend_on_order() {
    for seed in 1..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (objects, limits) = fleet(&mut rng);
        let ns = namespace(objects.clone());
        let (s, d) = run(
            &ns,
            &CurrentAssignment::new(),
            &kalypso_core::placement::NoExtenders,
        );
        assert!(!d.has_errors(), "seed {seed}: {d}");

        for ((policy, target), decision) in &s.decisions {
            let (limit, skew) = limits[policy];
            let chosen: Vec<&str> = decision.chosen().collect();
            if let Some(n) = limit {
                assert!(
                    chosen.len() <= n,
                    "seed {seed}: {policy}/{target} chose {chosen:?}, limit {n}"
                );
            }
            let region = |ct: &str| ns.cluster_types[ct].meta.labels.get("region").cloned();
            if let Some(skew) = skew {
                // Domains over the candidates that passed: chosen count and capacity.
                let mut domains: BTreeMap<String, (usize, usize)> = BTreeMap::new();
                for c in &decision.ranked {
                    let r = region(&c.name).expect("candidates have the spread label");
                    let e = domains.entry(r).or_default();
                    e.1 += 1;
                    e.0 += usize::from(c.chosen);
                }
                for (a, (ca, _)) in &domains {
                    for (b, (cb, capb)) in &domains {
                        if cb < capb {
                            assert!(
                                *ca <= cb + skew,
                                "seed {seed}: {policy}/{target}: {a}={ca} vs {b}={cb} (maxSkew {skew})"
                            );
                        }
                    }
                }
                // The pick only stops short of the limit when nothing else was left.
                let wanted = limit.unwrap_or(usize::MAX).min(decision.ranked.len());
                assert_eq!(chosen.len(), wanted, "seed {seed}: {policy}/{target}");
            } else {
                let wanted = limit.unwrap_or(usize::MAX).min(decision.feasible.len());
                assert_eq!(chosen.len(), wanted, "seed {seed}: {policy}/{target}");
                // Without a spread constraint the chosen ones are the best ranked.
                assert!(
                    decision.ranked.iter().take(wanted).all(|c| c.chosen),
                    "seed {seed}"
                );
            }
        }

        // The order objects are read in does not matter.
        let mut shuffled = objects.clone();
        rng.shuffle(&mut shuffled);
        let (again, _) = run(
            &namespace(shuffled),
            &CurrentAssignment::new(),
            &kalypso_core::placement::NoExtenders,
        );
        assert_eq!(again.assignments, s.assignments, "seed {seed}");
        assert_eq!(again.decisions, s.decisions, "seed {seed}");
    }
}

#[test]
fn steady_rerenders_are_identical() {
    for seed in 1..300u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1);
        let (mut objects, _) = fleet(&mut rng);
        // Every policy gets a dominant Steady.
        for o in &mut objects {
            if let AnyObject::SchedulingPolicy(p) = o {
                p.spec
                    .prioritizers
                    .retain(|p| p.built_in.as_deref() != Some("Steady"));
                p.spec.prioritizers.push(Prioritizer {
                    built_in: Some("Steady".into()),
                    weight: Some(100),
                    ..Default::default()
                });
            }
        }
        let ns = namespace(objects);
        let (first, d) = run(
            &ns,
            &CurrentAssignment::new(),
            &kalypso_core::placement::NoExtenders,
        );
        assert!(!d.has_errors(), "{d}");
        let current = assignment(&first);
        let (second, _) = run(&ns, &current, &kalypso_core::placement::NoExtenders);
        assert_eq!(assignment(&second), current, "seed {seed}");
        let (third, _) = run(&ns, &assignment(&second), &kalypso_core::placement::NoExtenders);
        assert_eq!(third.assignments, second.assignments, "seed {seed}");
    }
}

#[test]
fn steady_keeps_a_target_where_it_is_when_a_better_cluster_type_appears() {
    let mut rng = Rng(7);
    let _ = rng.next();
    let ct = |name: &str, capacity: &str| {
        let mut o = Object::new(name, ClusterTypeSpec::default(), origin("dev/ct.yaml"));
        o.meta.labels = labels(&[("capacity", capacity.into())]);
        AnyObject::ClusterType(o)
    };
    let target = AnyObject::DeploymentTarget(Object::new(
        "w-t",
        DeploymentTargetSpec {
            environment: "dev".into(),
            ..Default::default()
        },
        origin("dev/dt.yaml"),
    ));
    let policy = |steady: bool| {
        let mut prioritizers = vec![Prioritizer {
            label_value: Some(LabelValue {
                key: "capacity".into(),
            }),
            ..Default::default()
        }];
        if steady {
            prioritizers.push(Prioritizer {
                built_in: Some("Steady".into()),
                weight: Some(2),
                ..Default::default()
            });
        }
        AnyObject::SchedulingPolicy(Object::new(
            "p",
            SchedulingPolicySpec {
                number_of_cluster_types: Some(1),
                prioritizers,
                ..Default::default()
            },
            origin("dev/p.yaml"),
        ))
    };
    let current: CurrentAssignment = [("w-t".to_owned(), BTreeSet::from(["small".to_owned()]))].into();
    let chosen = |steady: bool| {
        let ns = namespace(vec![
            ct("small", "10"),
            ct("big", "90"),
            target.clone(),
            policy(steady),
        ]);
        let (s, d) = run(&ns, &current, &kalypso_core::placement::NoExtenders);
        assert!(!d.has_errors(), "{d}");
        assignment(&s)["w-t"].clone()
    };
    assert_eq!(chosen(false), BTreeSet::from(["big".to_owned()]));
    assert_eq!(chosen(true), BTreeSet::from(["small".to_owned()]));
}

/// An extender client answering from a function of (extender, request), recording the calls.
struct Fake<F: Fn(&ExtenderCall) -> Result<String, String> + Sync> {
    answer: F,
    calls: Mutex<Vec<ExtenderCall>>,
}

impl<F: Fn(&ExtenderCall) -> Result<String, String> + Sync> ExtenderClient for Fake<F> {
    fn call(&self, calls: &[ExtenderCall]) -> Vec<Result<Vec<u8>, String>> {
        self.calls.lock().unwrap().extend(calls.iter().cloned());
        calls
            .iter()
            .map(|c| (self.answer)(c).map(String::into_bytes))
            .collect()
    }
}

fn extender_fleet(failure_policy: FailurePolicy) -> Namespace {
    let mut objects = Vec::new();
    for (name, region) in [
        ("east-1", "east"),
        ("east-2", "east"),
        ("west-1", "west"),
        ("west-2", "west"),
    ] {
        let mut o = Object::new(name, ClusterTypeSpec::default(), origin("dev/ct.yaml"));
        o.meta.labels = labels(&[("region", region.into())]);
        objects.push(AnyObject::ClusterType(o));
    }
    for t in ["w-a", "w-b"] {
        objects.push(AnyObject::DeploymentTarget(Object::new(
            t,
            DeploymentTargetSpec {
                environment: "dev".into(),
                ..Default::default()
            },
            origin("dev/dt.yaml"),
        )));
    }
    objects.push(AnyObject::SchedulerExtender(Object::new(
        "capacity",
        SchedulerExtenderSpec {
            url: "http://127.0.0.1:1/x".into(),
            filter: true,
            prioritize: true,
            timeout: "1s".into(),
            failure_policy,
        },
        origin("dev/extender.yaml"),
    )));
    // Two policies with the same selectors: their requests are identical and sent once.
    for p in ["p1", "p2"] {
        objects.push(AnyObject::SchedulingPolicy(Object::new(
            p,
            SchedulingPolicySpec {
                number_of_cluster_types: Some(2),
                extenders: vec!["capacity".into()],
                prioritizers: vec![Prioritizer {
                    extender: Some(ExtenderRef {
                        name: "capacity".into(),
                    }),
                    ..Default::default()
                }],
                spread_constraints: vec![SpreadConstraint {
                    topology_key: "region".into(),
                    max_skew: 1,
                }],
                ..Default::default()
            },
            origin("dev/p.yaml"),
        )));
    }
    namespace(objects)
}

#[test]
fn extender_verdicts_and_scores_decide_and_calls_are_deduplicated() {
    let ns = extender_fleet(FailurePolicy::Fail);
    let fake = Fake {
        answer: |c: &ExtenderCall| {
            let request: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
            assert_eq!(request["environment"], "dev");
            let target = request["deploymentTarget"]["name"].as_str().unwrap();
            // w-a may not go to east-1; scores prefer the "-2"s for w-a, the "-1"s for w-b.
            Ok(if target == "w-a" {
                r#"{"clusterTypes": ["east-2", "west-1", "west-2"], "failed": {"east-1": "full"},
                    "scores": {"east-2": 90, "west-1": 80, "west-2": 95}}"#
                    .to_owned()
            } else {
                r#"{"clusterTypes": ["east-1", "east-2", "west-1", "west-2"],
                    "scores": {"east-1": 70, "east-2": 10, "west-1": 60, "west-2": 50}}"#
                    .to_owned()
            })
        },
        calls: Mutex::new(Vec::new()),
    };
    let (s, d) = run(&ns, &CurrentAssignment::new(), &fake);
    assert!(d.is_empty(), "{d}");
    let got = assignment(&s);
    // w-a: west-2 (95) then, for the spread, east-2 (90) rather than west-1 (80).
    assert_eq!(
        got["w-a"],
        BTreeSet::from(["east-2".to_owned(), "west-2".to_owned()])
    );
    assert_eq!(
        got["w-b"],
        BTreeSet::from(["east-1".to_owned(), "west-1".to_owned()])
    );
    // Two targets, two policies with the same request each: two calls, not four.
    assert_eq!(fake.calls.lock().unwrap().len(), 2);
    let decision = &s.decisions[&("p1".to_owned(), "w-a".to_owned())];
    assert_eq!(decision.feasible.len(), 4);
    assert_eq!(decision.ranked.len(), 3);
    assert_eq!(decision.ranked[0].name, "west-2");
    assert_eq!(decision.ranked[0].scores, [95]);
}

#[test]
fn broken_extenders_fail_or_are_ignored_by_their_failure_policy() {
    let bad: [(&str, Result<String, String>); 5] = [
        ("garbage", Ok("<html>".into())),
        (
            "unknown name",
            Ok(r#"{"clusterTypes": ["mars-1"], "scores": {}}"#.into()),
        ),
        (
            "score out of range",
            Ok(r#"{"clusterTypes": ["east-1"], "scores": {"east-1": 101}}"#.into()),
        ),
        ("no clusterTypes", Ok(r#"{"scores": {"east-1": 1}}"#.into())),
        ("timeout", Err("timed out after 1s".into())),
    ];
    for (what, answer) in bad {
        for policy in [FailurePolicy::Fail, FailurePolicy::Ignore] {
            let ns = extender_fleet(policy);
            let fake = Fake {
                answer: |_: &ExtenderCall| answer.clone(),
                calls: Mutex::new(Vec::new()),
            };
            let (s, d) = run(&ns, &CurrentAssignment::new(), &fake);
            let shown = d.to_string();
            assert!(
                shown.contains("SchedulerExtender \"capacity\""),
                "{what}: names the extender: {shown}"
            );
            match policy {
                FailurePolicy::Fail => assert!(d.has_errors(), "{what}: {shown}"),
                FailurePolicy::Ignore => {
                    assert!(!d.has_errors(), "{what}: {shown}");
                    assert!(d.warnings().count() > 0, "{what}");
                    // Skipped: the placement goes on without it (2 per target, spread).
                    assert_eq!(assignment(&s)["w-a"].len(), 2, "{what}");
                }
            }
        }
    }
}

#[test]
fn policies_without_placement_fields_choose_every_feasible_cluster_type() {
    let mut rng = Rng(99);
    let (mut objects, _) = fleet(&mut rng);
    for o in &mut objects {
        if let AnyObject::SchedulingPolicy(p) = o {
            p.spec = SchedulingPolicySpec {
                deployment_target_selector: p.spec.deployment_target_selector.clone(),
                cluster_type_selector: p.spec.cluster_type_selector.clone(),
                ..Default::default()
            };
        }
    }
    let ns = namespace(objects);
    let (s, _) = run(
        &ns,
        &CurrentAssignment::new(),
        &kalypso_core::placement::NoExtenders,
    );
    assert!(s.decisions.is_empty());
    let mut d = Diagnostics::new();
    let targets = deployment_targets(&ns, &mut d);
    let plain = kalypso_core::schedule::schedule(&ns, &targets, &mut d);
    assert_eq!(plain.assignments, s.assignments);
}
