//! Fleets to fill a [`MemorySource`](crate::MemorySource) with: [`demo_fleet`], a small fleet
//! shaped like the example control plane (three environments, clusters in every state, a
//! blocked promotion, config provenance), and [`synthetic_fleet`], a large generated one for
//! benchmarks.
//!
//! They live in the library, not in the tests, so that the browser tests, the benchmark and
//! the `demo` example all look at the same fleets.

use std::collections::BTreeMap;

use crate::memory::{
    ClusterData, ClusterTypeData, CommitData, DeploymentTargetData, EnvironmentData, FleetData, PromotionData,
};
use crate::model::{ClusterState, ConfigValue, DeploymentTargetInfo, ReconcilerSource, Report, Timestamp};

/// 2026-11-26 08:00 UTC: the demo fleet's "now".
pub const DEMO_NOW: Timestamp = 1_795_680_000;

/// A Flux message with markup in it, as a hostile or careless cluster could send: the pages
/// must show it as text.
pub const HOSTILE_MESSAGE: &str = "<script>window.__kalypsoXss = 1; document.title = 'pwned';</script><img src=x onerror=\"window.__kalypsoXss = 2\">";

/// A deterministic 40-hex-digit commit id made from `seed`.
pub fn fake_sha(seed: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = String::with_capacity(48);
    for _ in 0..3 {
        // splitmix64, so that similar seeds give unlike ids.
        hash = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = hash;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.push_str(&format!("{:016x}", z ^ (z >> 31)));
    }
    out.truncate(40);
    out
}

fn minutes(n: u64) -> u64 {
    n * 60
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn config(entries: &[(&str, &str, &str, &[&str])]) -> Vec<ConfigValue> {
    entries
        .iter()
        .map(|(key, value, config_map, overridden)| ConfigValue {
            key: (*key).to_owned(),
            value: (*value).to_owned(),
            config_map: (*config_map).to_owned(),
            overridden: overridden.iter().map(|s| (*s).to_owned()).collect(),
        })
        .collect()
}

fn target(workload: &str, target: &str, env: &str, since: Timestamp) -> DeploymentTargetData {
    let name = format!("{workload}-{target}");
    let (repo, path) = if workload.starts_with("observability") {
        (
            "https://github.com/contoso/kalypso-svc-gitops",
            format!("./{workload}"),
        )
    } else {
        (
            "https://github.com/contoso/kalypso-app-gitops",
            format!("./{target}"),
        )
    };
    DeploymentTargetData {
        info: DeploymentTargetInfo {
            namespace: Some(format!("{env}-{name}")),
            name,
            workload: workload.to_owned(),
            source: ReconcilerSource {
                repo: repo.to_owned(),
                branch: env.to_owned(),
                path,
            },
        },
        version: Some(fake_sha(&format!("{workload}/{target}/{env}"))[..12].to_owned()),
        since: Some(since),
    }
}

/// `n` clusters of a cluster type, all compliant with `revision` and reporting at `at`.
fn clusters(prefix: &str, n: usize, revision: &str, at: Timestamp) -> Vec<ClusterData> {
    (1..=n)
        .map(|i| {
            let report = Report {
                at,
                revision: Some(revision.to_owned()),
                state: Some(ClusterState::Compliant),
                message: Some(format!(
                    "Applied revision: {}@sha1:{revision}",
                    prefix.split('-').nth(1).unwrap_or("main")
                )),
            };
            ClusterData {
                name: format!("{prefix}-{i}"),
                state: ClusterState::Compliant,
                revision: report.revision.clone(),
                message: report.message.clone(),
                last_report_at: Some(at),
                reports: vec![
                    Report {
                        at: at - minutes(30),
                        state: Some(ClusterState::Reconciling),
                        message: Some("Reconciliation in progress".to_owned()),
                        ..report.clone()
                    },
                    report,
                ],
            }
        })
        .collect()
}

/// Sets the state of cluster `name` in `clusters` as its latest report.
fn set(
    clusters: &mut [ClusterData],
    name: &str,
    state: ClusterState,
    revision: &str,
    message: &str,
    at: Timestamp,
) {
    if let Some(cluster) = clusters.iter_mut().find(|c| c.name == name) {
        let report = Report {
            at,
            revision: Some(revision.to_owned()),
            state: Some(state),
            message: Some(message.to_owned()),
        };
        // A report from before the history's end replaces the history after it.
        cluster.reports.retain(|r| r.at < at);
        cluster.state = state;
        cluster.revision = report.revision.clone();
        cluster.message = report.message.clone();
        cluster.last_report_at = Some(at);
        cluster.reports.push(report);
    }
}

struct TypeSpec {
    name: &'static str,
    labels: &'static [(&'static str, &'static str)],
    reconciler: &'static str,
    config: &'static [(&'static str, &'static str, &'static str, &'static [&'static str])],
}

const TYPES: &[TypeSpec] = &[
    TypeSpec {
        name: "command-center",
        labels: &[("region", "east-us"), ("restricted", "true"), ("size", "large")],
        reconciler: "arc-flux",
        config: &[
            ("CLUSTER_NAME", "Command Center", "command-center-config", &[]),
            (
                "DATABASE_URL",
                "mysql://restricted-host:3306/mysqlrty123",
                "restricted-config",
                &["east-us-config"],
            ),
            ("REGION", "east-us", "east-us-config", &[]),
        ],
    },
    TypeSpec {
        name: "drone",
        labels: &[("region", "east-us"), ("restricted", "true"), ("size", "small")],
        reconciler: "arc-flux",
        config: &[
            ("CLUSTER_NAME", "Drone", "drone-config", &[]),
            (
                "DATABASE_URL",
                "mysql://restricted-host:3306/mysqlrty123",
                "restricted-config",
                &["east-us-config"],
            ),
            ("REGION", "east-us", "east-us-config", &[]),
        ],
    },
    TypeSpec {
        name: "edge-lab",
        labels: &[("region", "west-us"), ("size", "small")],
        reconciler: "arc-flux",
        config: &[
            ("CLUSTER_NAME", "Edge lab", "edge-lab-config", &[]),
            ("REGION", "west-us", "west-us-config", &[]),
        ],
    },
    TypeSpec {
        name: "large",
        labels: &[("region", "west-us"), ("size", "large")],
        reconciler: "argocd",
        config: &[
            ("CLUSTER_NAME", "Large", "large-config", &[]),
            (
                "DATABASE_URL",
                "mysql://west-host:3306/mysqlredis",
                "west-us-config",
                &[],
            ),
            ("REGION", "west-us", "west-us-config", &[]),
        ],
    },
    TypeSpec {
        name: "small",
        labels: &[("region", "west-us"), ("size", "small")],
        reconciler: "arc-flux",
        config: &[
            ("CLUSTER_NAME", "Small", "small-config", &[]),
            (
                "DATABASE_URL",
                "mysql://west-host:3306/mysqlredis",
                "west-us-config",
                &[],
            ),
            ("REGION", "west-us", "west-us-config", &[]),
        ],
    },
];

fn cluster_type(
    spec: &TypeSpec,
    env: &str,
    targets: Vec<DeploymentTargetData>,
    clusters: Vec<ClusterData>,
) -> ClusterTypeData {
    let mut config = config(spec.config);
    config.insert(
        0,
        ConfigValue {
            key: "ENVIRONMENT".to_owned(),
            value: env.to_owned(),
            config_map: format!("{env}-config"),
            overridden: Vec::new(),
        },
    );
    ClusterTypeData {
        name: spec.name.to_owned(),
        labels: labels(spec.labels),
        reconciler: Some(spec.reconciler.to_owned()),
        deployment_targets: targets,
        config,
        clusters,
    }
}

fn spec(name: &str) -> &'static TypeSpec {
    TYPES.iter().find(|t| t.name == name).unwrap_or(&TYPES[0])
}

/// A small fleet like the example control plane's: `dev`, `stage` and `prod`; cluster types
/// `command-center`, `drone`, `edge-lab` (no clusters), `large` and `small`; clusters in every
/// state; five control-plane commits, the latest reconciling in `dev`, the one before blocked
/// in `stage` by a failed drone (whose neighbour reports [`HOSTILE_MESSAGE`]), an older one
/// compliant in `prod`.
pub fn demo_fleet() -> FleetData {
    let t = DEMO_NOW;
    let commits: Vec<CommitData> = [
        (
            "Raise prometheus retention to 15d",
            "ana@contoso.com",
            minutes(50),
        ),
        (
            "Restricted clusters read the database from restricted-host",
            "bo@contoso.com",
            minutes(180),
        ),
        (
            "Schedule performance tests on large cluster types",
            "ana@contoso.com",
            minutes(60 * 20),
        ),
        (
            "Add the edge-lab cluster type",
            "chen@contoso.com",
            minutes(60 * 30),
        ),
        ("Initial fleet model", "chen@contoso.com", minutes(60 * 48)),
    ]
    .iter()
    .enumerate()
    .map(|(i, (subject, author, ago))| CommitData {
        id: fake_sha(&format!("main-{i}")),
        subject: (*subject).to_owned(),
        author: Some((*author).to_owned()),
        at: Some(t - ago),
    })
    .collect();
    let id = |i: usize| commits[i].id.clone();
    let gitops = |env: &str, i: usize| fake_sha(&format!("{env}-gitops-{i}"));
    // (env, commits pinned oldest first, minutes after the commit each step took, compliant)
    let promotion = |env: &str, i: usize, compliant: bool, base: Timestamp| PromotionData {
        commit: id(i),
        pinned_at: Some(base + minutes(2)),
        gitops_commit: Some(gitops(env, i)),
        rendered_at: Some(base + minutes(3)),
        delivered_at: Some(base + minutes(9)),
        compliant_at: compliant.then_some(base + minutes(27)),
    };
    let commit_at = |i: usize| commits[i].at.unwrap_or(t);

    // dev: the latest commit, delivered, its drones still reconciling and one gone stale.
    let dev_rev = gitops("dev", 0);
    let mut dev_types = Vec::new();
    for (name, n) in [
        ("command-center", 2),
        ("drone", 6),
        ("edge-lab", 0),
        ("large", 3),
        ("small", 2),
    ] {
        let mut cs = clusters(&format!("{name}-dev"), n, &dev_rev, t - minutes(20));
        let mut targets = vec![target("observability-prometheus", "dev", "dev", t - minutes(40))];
        match name {
            "drone" => {
                set(
                    &mut cs,
                    "drone-dev-5",
                    ClusterState::Reconciling,
                    &gitops("dev", 1),
                    "Detecting drift for revision dev@sha1:… : reconciliation in progress",
                    t - minutes(4),
                );
                set(
                    &mut cs,
                    "drone-dev-6",
                    ClusterState::Stale,
                    &gitops("dev", 1),
                    "Applied revision: dev@sha1:… (no report for 3h)",
                    t - minutes(190),
                );
                targets.push(target(
                    "hello-world-app",
                    "functional-test",
                    "dev",
                    t - minutes(170),
                ));
            }
            "command-center" => {
                targets.push(target(
                    "hello-world-app",
                    "functional-test",
                    "dev",
                    t - minutes(170),
                ));
            }
            "large" => {
                targets.push(target(
                    "hello-world-app",
                    "performance-test",
                    "dev",
                    t - minutes(60 * 19),
                ));
            }
            _ => {}
        }
        dev_types.push(cluster_type(spec(name), "dev", targets, cs));
    }

    // stage: the commit before, blocked by a drone whose kustomize build fails.
    let stage_rev = gitops("stage", 1);
    let mut stage_types = Vec::new();
    for (name, n) in [("command-center", 2), ("drone", 4), ("large", 3), ("small", 3)] {
        let mut cs = clusters(&format!("{name}-stage"), n, &stage_rev, t - minutes(25));
        if name == "drone" {
            set(
                &mut cs,
                "drone-stage-1",
                ClusterState::Failed,
                &stage_rev,
                "kustomize build failed: accumulating resources: 'functional-test/service.yaml': no such file",
                t - minutes(35),
            );
            set(
                &mut cs,
                "drone-stage-2",
                ClusterState::Failed,
                &stage_rev,
                HOSTILE_MESSAGE,
                t - minutes(33),
            );
        }
        let targets = vec![
            target("observability-prometheus", "stage", "stage", t - minutes(150)),
            target("hello-world-app", "uat", "stage", t - minutes(150)),
        ];
        stage_types.push(cluster_type(spec(name), "stage", targets, cs));
    }

    // prod: an older commit, compliant except for a small cluster applying it.
    let prod_rev = gitops("prod", 2);
    let mut prod_types = Vec::new();
    for (name, n) in [("command-center", 3), ("large", 5), ("small", 4)] {
        let mut cs = clusters(&format!("{name}-prod"), n, &prod_rev, t - minutes(60 * 15));
        if name == "small" {
            set(
                &mut cs,
                "small-prod-4",
                ClusterState::Reconciling,
                &prod_rev,
                "Reconciliation in progress: waiting for 2 resources to become ready",
                t - minutes(2),
            );
        }
        let targets = vec![
            target("observability-prometheus", "prod", "prod", t - minutes(60 * 16)),
            target("hello-world-app", "prod", "prod", t - minutes(60 * 16)),
        ];
        prod_types.push(cluster_type(spec(name), "prod", targets, cs));
    }

    let environments = vec![
        EnvironmentData {
            name: "dev".to_owned(),
            control_plane_commit: Some(id(0)),
            gitops_commit: Some(dev_rev),
            gitops_commit_at: Some(commit_at(0) + minutes(3)),
            cluster_types: dev_types,
            promotions: (0..5)
                .rev()
                .map(|i| promotion("dev", i, i != 0, commit_at(i)))
                .collect(),
        },
        EnvironmentData {
            name: "stage".to_owned(),
            control_plane_commit: Some(id(1)),
            gitops_commit: Some(stage_rev),
            gitops_commit_at: Some(commit_at(1) + minutes(63)),
            cluster_types: stage_types,
            promotions: (1..5)
                .rev()
                .map(|i| promotion("stage", i, i != 1, commit_at(i) + minutes(60)))
                .collect(),
        },
        EnvironmentData {
            name: "prod".to_owned(),
            control_plane_commit: Some(id(2)),
            gitops_commit: Some(prod_rev),
            gitops_commit_at: Some(commit_at(2) + minutes(243)),
            cluster_types: prod_types,
            promotions: [4, 2]
                .into_iter()
                .map(|i| promotion("prod", i, i != 2, commit_at(i) + minutes(240)))
                .collect(),
        },
    ];
    FleetData {
        environments,
        commits,
        workload_sources: [
            ("hello-world-app", "https://github.com/contoso/kalypso-app-gitops"),
            (
                "observability-prometheus",
                "https://github.com/contoso/kalypso-svc-gitops",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    }
}

/// A generated fleet: `environments` environments of `cluster_types` cluster types with
/// `clusters_per_environment` clusters spread over them and four deployment targets each: every
/// tenth cluster type has failed clusters (1 in 25), two in ten have stale ones, three in ten
/// reconciling ones, the rest are compliant.
pub fn synthetic_fleet(
    environments: usize,
    cluster_types: usize,
    clusters_per_environment: usize,
) -> FleetData {
    let names = ["dev", "stage", "prod", "canary", "edge"];
    let per_type = clusters_per_environment / cluster_types.max(1);
    let environments = (0..environments)
        .map(|e| {
            let env = names
                .get(e)
                .map_or_else(|| format!("env-{e}"), |n| (*n).to_owned());
            let revision = fake_sha(&format!("{env}-gitops"));
            let cluster_types = (0..cluster_types)
                .map(|c| {
                    let name = format!("type-{c:04}");
                    let clusters = (0..per_type)
                        .map(|i| {
                            // A tenth of the cluster types have failures, a fifth
                            // stale clusters, three tenths clusters reconciling.
                            let state = match c % 10 {
                                0 if i % 25 == 3 => ClusterState::Failed,
                                1 | 2 if i % 40 == 5 => ClusterState::Stale,
                                3..=5 if i % 10 == 1 => ClusterState::Reconciling,
                                _ => ClusterState::Compliant,
                            };
                            ClusterData {
                                name: format!("{name}-{env}-{i:05}"),
                                state,
                                revision: Some(revision.clone()),
                                message: (state == ClusterState::Failed)
                                    .then(|| "health check failed".to_owned()),
                                last_report_at: Some(DEMO_NOW),
                                reports: Vec::new(),
                            }
                        })
                        .collect();
                    ClusterTypeData {
                        name,
                        labels: labels(&[("size", "small")]),
                        reconciler: Some("arc-flux".to_owned()),
                        deployment_targets: (0..4)
                            .map(|w| target(&format!("workload-{w}"), &env, &env, DEMO_NOW))
                            .collect(),
                        config: Vec::new(),
                        clusters,
                    }
                })
                .collect();
            EnvironmentData {
                name: env,
                control_plane_commit: Some(fake_sha("main")),
                gitops_commit: Some(revision),
                gitops_commit_at: Some(DEMO_NOW),
                cluster_types,
                promotions: Vec::new(),
            }
        })
        .collect();
    FleetData {
        environments,
        commits: Vec::new(),
        workload_sources: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_shas_are_forty_hex_digits_and_differ() {
        let a = fake_sha("a");
        assert_eq!(a.len(), 40);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, fake_sha("b"));
    }

    #[test]
    fn the_synthetic_fleet_has_the_asked_size() {
        let fleet = synthetic_fleet(3, 10, 1000);
        assert_eq!(fleet.environments.len(), 3);
        let clusters: usize = fleet.environments[0]
            .cluster_types
            .iter()
            .map(|ct| ct.clusters.len())
            .sum();
        assert_eq!(clusters, 1000);
    }
}
