//! Scheduling: which deployment target goes to which cluster type, and why.
//!
//! Each SchedulingPolicy assigns every deployment target it selects (this environment's
//! targets, of its workspace if it names one, whose labels match) to every cluster type it
//! selects. The original creates one Assignment object per policy and pair, and when two
//! policies choose the same pair the second one fails and blocks the whole environment;
//! here the pair is one assignment that records every policy that chose it (see
//! COMPATIBILITY.md). The record is what `kalypso explain` and `plan` show.
//!
//! A policy with placement fields (`numberOfClusterTypes`, `prioritizers`...) instead assigns
//! each target to the cluster types [`crate::placement`] picks from its feasible set; those
//! policies are placed after the others, whose assignments `Balance` counts.

use std::collections::{BTreeMap, HashMap};

use kalypso_api::Kind;

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::Namespace;
use crate::placement::{self, Decision, PlacementInput, PlacementSpec, Work};
use crate::selector::Selector;
use crate::unfold::DeploymentTarget;

/// One deployment target scheduled on one cluster type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
    /// The target's workload.
    pub workload: String,
    /// Every policy that chose this pair, sorted.
    pub policies: Vec<String>,
}

/// A policy's valid selectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledPolicy {
    /// The policy's name.
    pub name: String,
    /// Only targets of this workspace (empty: any).
    pub workspace: String,
    /// Selects deployment targets.
    pub target_selector: Selector,
    /// Selects cluster types.
    pub cluster_type_selector: Selector,
}

impl CompiledPolicy {
    /// Whether the policy selects `target` (its environment must be `environment`).
    pub fn selects_target(&self, target: &DeploymentTarget, environment: &str) -> bool {
        target.spec.environment == environment
            && (self.workspace.is_empty() || self.workspace == target.workspace)
            && self.target_selector.matches(&target.labels)
    }
}

/// The result of scheduling an environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Assignments keyed by (cluster type, deployment target): the GitOps tree's order.
    pub assignments: BTreeMap<(String, String), Assignment>,
    /// The policies whose selectors are valid, by name.
    pub policies: BTreeMap<String, CompiledPolicy>,
    /// How each policy with placement fields placed each target, by (policy, target).
    pub decisions: BTreeMap<(String, String), Decision>,
}

impl Schedule {
    /// The assignments in tree order.
    pub fn iter(&self) -> impl Iterator<Item = &Assignment> {
        self.assignments.values()
    }
}

/// Compiles every policy and computes the assignments. Policies with invalid selectors are
/// reported and contribute nothing.
pub fn schedule(
    ns: &Namespace,
    targets: &BTreeMap<String, DeploymentTarget>,
    diagnostics: &mut Diagnostics,
) -> Schedule {
    schedule_with(ns, targets, &PlacementInput::default(), diagnostics)
}

/// [`schedule`] with what placement needs besides the control plane: the current assignment
/// and the extender client.
pub fn schedule_with(
    ns: &Namespace,
    targets: &BTreeMap<String, DeploymentTarget>,
    input: &PlacementInput<'_>,
    diagnostics: &mut Diagnostics,
) -> Schedule {
    let mut result = Schedule::default();
    let mut placed: Vec<(String, PlacementSpec, Vec<&str>)> = Vec::new();
    // The pairs of the policies without placement fields, gathered per cluster type (in the
    // namespace's order) and made into assignments once all policies are read
    // ([`assignments_of`]), instead of a map lookup per policy and pair.
    let slot_of: HashMap<&str, usize> = ns
        .cluster_types
        .values()
        .enumerate()
        .map(|(slot, ct)| (ct.name(), slot))
        .collect();
    let mut chosen: Vec<(&str, Vec<(&DeploymentTarget, &str)>)> = ns
        .cluster_types
        .values()
        .map(|ct| (ct.name(), Vec::new()))
        .collect();
    let extenders = placement::extenders(ns, diagnostics);
    for (name, policy) in &ns.policies {
        let mut compile = |selector, field: &str| match Selector::parse(selector) {
            Ok(s) => Some(s),
            Err(errors) => {
                for e in errors {
                    diagnostics.push(
                        Diagnostic::error(Code::InvalidSelector, e.message)
                            .at(&policy.origin)
                            .on(Kind::SchedulingPolicy, name)
                            .field(format!("{field}.{}", e.field)),
                    );
                }
                None
            }
        };
        let target_selector = compile(
            &policy.spec.deployment_target_selector.label_selector,
            "spec.deploymentTargetSelector.labelSelector",
        );
        let cluster_type_selector = compile(
            &policy.spec.cluster_type_selector.label_selector,
            "spec.clusterTypeSelector.labelSelector",
        );
        let (Some(target_selector), Some(cluster_type_selector)) = (target_selector, cluster_type_selector)
        else {
            continue;
        };
        let compiled = CompiledPolicy {
            name: name.clone(),
            workspace: policy.spec.deployment_target_selector.workspace.clone(),
            target_selector,
            cluster_type_selector,
        };
        let cluster_types: Vec<&str> = ns
            .cluster_types
            .values()
            .filter(|ct| compiled.cluster_type_selector.matches(ct.labels()))
            .map(|ct| ct.name())
            .collect();
        if policy.spec.has_placement() {
            let decided = input.decisions.contains_key(name);
            let spec = placement::compile(name, policy, ns, decided, diagnostics);
            if let Some(spec) = spec
                && placement::check_label_values(name, &spec, &cluster_types, ns, diagnostics)
            {
                placed.push((name.clone(), spec, cluster_types));
            }
        } else if !cluster_types.is_empty() {
            let slots: Vec<usize> = cluster_types.iter().map(|ct| slot_of[ct]).collect();
            for target in targets.values().filter(|t| compiled.selects_target(t, &ns.name)) {
                for &slot in &slots {
                    chosen[slot].1.push((target, name.as_str()));
                }
            }
        }
        result.policies.insert(name.clone(), compiled);
    }
    result.assignments = assignments_of(chosen);
    if !placed.is_empty() {
        let mut assigned: HashMap<String, u64> = HashMap::new();
        for a in result.assignments.values() {
            *assigned.entry(a.cluster_type.clone()).or_default() += 1;
        }
        let mut work = Vec::new();
        for (name, spec, feasible) in &placed {
            let compiled = &result.policies[name];
            for target in targets.values().filter(|t| compiled.selects_target(t, &ns.name)) {
                work.push(Work {
                    policy: name,
                    spec,
                    target,
                    feasible: feasible.clone(),
                });
            }
        }
        let decisions = placement::place(ns, &work, &extenders, &mut assigned, input, diagnostics);
        add_decisions(targets, decisions, &mut result);
    }
    result
}

/// The assignments of the pairs `chosen` gives per cluster type: each policy's targets of a
/// cluster type, policy after policy (in name order), each policy's in name order. The same
/// map as one entry per policy and pair in that order: a target's policies keep their order
/// (a stable sort, which merges the policies' runs of targets), and the map is built from the
/// pairs at once.
fn assignments_of(
    chosen: Vec<(&str, Vec<(&DeploymentTarget, &str)>)>,
) -> BTreeMap<(String, String), Assignment> {
    let mut pairs = Vec::with_capacity(chosen.iter().map(|(_, targets)| targets.len()).sum());
    for (ct, mut targets) in chosen {
        targets.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let mut targets = targets.into_iter().peekable();
        while let Some((target, policy)) = targets.next() {
            let mut policies = vec![policy.to_owned()];
            while let Some((_, other)) = targets.next_if(|(next, _)| next.name == target.name) {
                policies.push(other.to_owned());
            }
            pairs.push((
                (ct.to_owned(), target.name.clone()),
                Assignment {
                    cluster_type: ct.to_owned(),
                    deployment_target: target.name.clone(),
                    workload: target.workload.clone(),
                    policies,
                },
            ));
        }
    }
    pairs.into_iter().collect()
}

/// Adds the assignments of placement decisions, and the decisions for `explain`.
fn add_decisions(
    targets: &BTreeMap<String, DeploymentTarget>,
    decisions: Vec<Decision>,
    result: &mut Schedule,
) {
    for decision in decisions {
        let target = &targets[&decision.target];
        for ct in decision.chosen() {
            let assignment = result
                .assignments
                .entry((ct.to_owned(), target.name.clone()))
                .or_insert_with(|| Assignment {
                    cluster_type: ct.to_owned(),
                    deployment_target: target.name.clone(),
                    workload: target.workload.clone(),
                    policies: Vec::new(),
                });
            assignment.policies.push(decision.policy.clone());
            assignment.policies.sort();
        }
        result
            .decisions
            .insert((decision.policy.clone(), decision.target.clone()), decision);
    }
}

#[cfg(test)]
mod tests {
    use kalypso_api::{
        ClusterTypeSelector, ClusterTypeSpec, DeploymentTargetSelector, DeploymentTargetSpec, LabelSelector,
        Labels, SchedulingPolicySpec,
    };

    use super::*;
    use crate::diag::Origin;
    use crate::model::{AnyObject, Kustomization, Object};

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn policy(name: &str, workspace: &str, dt: &[(&str, &str)], ct: &[(&str, &str)]) -> AnyObject {
        AnyObject::SchedulingPolicy(Object::new(
            name,
            SchedulingPolicySpec {
                deployment_target_selector: DeploymentTargetSelector {
                    workspace: workspace.into(),
                    label_selector: LabelSelector {
                        match_labels: labels(dt),
                        ..Default::default()
                    },
                },
                cluster_type_selector: ClusterTypeSelector {
                    label_selector: LabelSelector {
                        match_labels: labels(ct),
                        ..Default::default()
                    },
                },
                ..Default::default()
            },
            Origin::new("dev/p.yaml", 1),
        ))
    }

    fn cluster_type(name: &str, l: &[(&str, &str)]) -> AnyObject {
        let mut o = Object::new(name, ClusterTypeSpec::default(), Origin::new("dev/ct.yaml", 1));
        o.meta.labels = labels(l);
        AnyObject::ClusterType(o)
    }

    fn target(name: &str, env: &str, workspace: &str, l: &[(&str, &str)]) -> DeploymentTarget {
        DeploymentTarget {
            name: name.into(),
            workload: "w".into(),
            workspace: workspace.into(),
            labels: labels(l),
            spec: DeploymentTargetSpec {
                environment: env.into(),
                ..Default::default()
            },
            origin: Origin::new("w.yaml", 1),
        }
    }

    #[test]
    fn same_pair_from_two_policies_is_one_assignment() {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        ns.apply(
            &Kustomization::Environment,
            vec![
                cluster_type("large", &[("size", "large")]),
                cluster_type("small", &[("size", "small")]),
                policy("a", "", &[("zone", "green")], &[]),
                policy("b", "team", &[("zone", "green")], &[("size", "large")]),
                policy("c", "other", &[], &[]),
            ],
            &mut d,
        );
        let targets: BTreeMap<String, DeploymentTarget> = [
            target("w-green", "dev", "team", &[("zone", "green")]),
            target("w-stage", "stage", "team", &[("zone", "green")]),
        ]
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
        let s = schedule(&ns, &targets, &mut d);
        assert!(d.is_empty(), "{d}");
        let pairs: Vec<(String, Vec<String>)> = s
            .iter()
            .map(|a| {
                (
                    format!("{}/{}", a.cluster_type, a.deployment_target),
                    a.policies.clone(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("large/w-green".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
                ("small/w-green".to_owned(), vec!["a".to_owned()])
            ]
        );
    }

    /// The assignments as one map entry per policy and pair, in the policies' order: what
    /// [`assignments_of`] must equal.
    fn one_entry_per_pair(
        ns: &Namespace,
        targets: &BTreeMap<String, DeploymentTarget>,
    ) -> BTreeMap<(String, String), Assignment> {
        let mut assignments: BTreeMap<(String, String), Assignment> = BTreeMap::new();
        for (name, policy) in &ns.policies {
            let (Ok(target_selector), Ok(cluster_type_selector)) = (
                Selector::parse(&policy.spec.deployment_target_selector.label_selector),
                Selector::parse(&policy.spec.cluster_type_selector.label_selector),
            ) else {
                panic!("policy {name}: invalid selectors");
            };
            let compiled = CompiledPolicy {
                name: name.clone(),
                workspace: policy.spec.deployment_target_selector.workspace.clone(),
                target_selector,
                cluster_type_selector,
            };
            for target in targets.values().filter(|t| compiled.selects_target(t, &ns.name)) {
                for ct in ns.cluster_types.values() {
                    if !compiled.cluster_type_selector.matches(ct.labels()) {
                        continue;
                    }
                    assignments
                        .entry((ct.name().to_owned(), target.name.clone()))
                        .or_insert_with(|| Assignment {
                            cluster_type: ct.name().to_owned(),
                            deployment_target: target.name.clone(),
                            workload: target.workload.clone(),
                            policies: Vec::new(),
                        })
                        .policies
                        .push(name.clone());
                }
            }
        }
        assignments
    }

    #[test]
    fn assignments_gathered_per_cluster_type_are_those_of_one_entry_per_pair() {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        let mut objects = Vec::new();
        for i in 0..12 {
            let size = ["large", "small", "edge"][i % 3];
            objects.push(cluster_type(
                &format!("ct-{i:02}"),
                &[("size", size), ("ring", &(i % 2).to_string())],
            ));
        }
        objects.extend([
            policy("all", "", &[], &[]),
            policy("green-large", "", &[("zone", "green")], &[("size", "large")]),
            policy("blue-ring", "team", &[("zone", "blue")], &[("ring", "1")]),
            policy("edge", "", &[("tier", "1")], &[("size", "edge")]),
            policy("none", "", &[("zone", "red")], &[("size", "none")]),
            policy("a-first", "", &[("tier", "1")], &[("ring", "0")]),
        ]);
        ns.apply(&Kustomization::Environment, objects, &mut d);
        let targets: BTreeMap<String, DeploymentTarget> = (0..40)
            .map(|i| {
                let zone = ["green", "blue", "red"][i % 3];
                let tier = (i % 2).to_string();
                let workspace = if i % 4 == 0 { "other" } else { "team" };
                target(
                    &format!("t-{}", 40 - i),
                    "dev",
                    workspace,
                    &[("zone", zone), ("tier", &tier)],
                )
            })
            .map(|t| (t.name.clone(), t))
            .collect();
        let s = schedule(&ns, &targets, &mut d);
        assert!(d.is_empty(), "{d}");
        let expected = one_entry_per_pair(&ns, &targets);
        assert!(expected.values().any(|a| a.policies.len() > 2));
        assert_eq!(s.assignments, expected);
    }
}
