//! A GitOps branch rewound under a running hub: reset to an ancestor, reset and built on
//! again, replaced by an unrelated history, and moved back and forth between commits the hub
//! has stored. The hub has stored the old history and clusters have reported its commits,
//! some of them commits the rewind abandons; after the rewind, what users see must be the
//! branch as it is: the environment's head, what each cluster type runs, where each workload
//! runs and since when, the gate (by GitOps and by control-plane commit; a commit the branch
//! no longer has is unknown), the rollout view, and a cluster that ran an abandoned commit
//! counted as behind until it reports a commit of the branch. Repeated refreshes after the
//! rewind store nothing and change nothing (the hub settles), every commit keeps a position of
//! its own, and the aggregates equal a recount.
//!
//! The cases are data ([`CASES`]): each is a list of phases, a phase a few moves of the branch
//! and what users must see after them. Every case runs on SQLite, and on PostgreSQL when
//! `KALYPSO_TEST_POSTGRES_URL` names a server (a fresh database for each case).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kalypso_git::{AuthSettings, RetryPolicy};
use kalypso_hub::client::Client;
use kalypso_hub::{GitSettings, HubConfig, HubState};
use kalypso_testkit::{git, init_bare, write_files};
use serde_json::{Value, json};
use sqlx::Row;

mod common;
use common::databases;

struct Hub {
    addr: SocketAddr,
    state: HubState,
}

/// The hub with its dashboard (whose pages carry the version they watch).
async fn start(config: HubConfig) -> Hub {
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::dashboard::app(
        state.clone(),
        config.dashboard,
        kalypso_dashboard::Options {
            poll_interval: Duration::from_millis(150),
        },
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Hub { addr, state }
}

async fn get(c: &mut Client, path: &str) -> Value {
    let r = c.get(path, &[]).await.unwrap();
    assert_eq!(r.status, 200, "GET {path}: {}", String::from_utf8_lossy(&r.body));
    r.json()
}

// ---------------------------------------------------------------------------------------
// The cases

/// A move of the environment's GitOps branch.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// Reset the branch to the commit of this name (`git push --force` of an older commit).
    Reset(&'static str),
    /// Delete the branch, so that the next commit starts an unrelated history.
    Orphan,
    /// Commit on the branch: its name, its promoted control-plane commit, and files written
    /// (`Some`) or removed (`None`), their content given by [`content`].
    Commit(
        &'static str,
        &'static str,
        &'static [(&'static str, Option<&'static str>)],
    ),
}

/// A cluster type of a commit and its deployment targets: (name, workload, Flux path).
type ClusterTypeTargets = (
    &'static str,
    &'static [(&'static str, &'static str, &'static str)],
);

/// A cluster type and its deployment targets as the hub answers them.
type SeenTargets = Vec<(String, Vec<(String, String, String)>)>;

/// What the gate of a commit answers: the commit's name (or a control-plane commit's), the
/// verdict, the compliant and required clusters, and each listed cluster's state.
#[derive(Clone, Copy, Debug)]
struct GateAnswer {
    commit: &'static str,
    verdict: &'static str,
    compliant: u64,
    total: u64,
    clusters: &'static [(&'static str, &'static str)],
}

/// What users must see after a phase's moves.
#[derive(Clone, Copy, Debug)]
struct Phase {
    moves: &'static [Move],
    /// The head's name and its control-plane commit.
    head: (&'static str, &'static str),
    /// Each cluster type of the head with its deployment targets (name, workload, path).
    cluster_types: &'static [ClusterTypeTargets],
    /// Per workload, where it runs: (cluster type, the commit it runs there since).
    workloads: &'static [(&'static str, &'static [(&'static str, &'static str)])],
    /// Gates of commits of the branch (by GitOps commit name or control-plane commit).
    gates: &'static [GateAnswer],
    /// Commits the branch no longer has (names, or control-plane commits): unknown to gates.
    gone: &'static [&'static str],
    /// Per cluster type of the head, how many of its clusters are behind the head.
    behind: &'static [(&'static str, u64)],
}

struct Case {
    name: &'static str,
    phases: &'static [Phase],
}

const P1: &str = "1111111111111111111111111111111111111111";
const P2: &str = "2222222222222222222222222222222222222222";
const P3: &str = "3333333333333333333333333333333333333333";
const P4: &str = "4444444444444444444444444444444444444444";
const P5: &str = "5555555555555555555555555555555555555555";

/// The clusters and the commit each reported (compliant) before the rewinds: drone-1 and
/// small-1 ran c3, large-1 c2, drone-2 c1.
const REPORTS: [(&str, &str, &str); 4] = [
    ("drone-1", "drone", "c3"),
    ("drone-2", "drone", "c1"),
    ("large-1", "large", "c2"),
    ("small-1", "small", "c3"),
];

/// The history every case starts from (see [`setup`]):
/// - c1 (P1): `drone` with hello-dev (workload hello, ./dev), `large`;
/// - c2 (P2): adds drone/svc-dev (workload svc, Argo CD);
/// - c3 (P3): hello-dev's path becomes ./dev2, `large` goes, `small` (svc-dev) comes.
const HISTORY: &[Move] = &[
    Move::Commit(
        "c1",
        P1,
        &[
            ("drone/README.md", Some("# drone")),
            ("drone/hello-dev/namespace.yaml", Some("ns hello hello-dev")),
            ("drone/hello-dev/reconciler.yaml", Some("flux ./dev")),
            ("large/README.md", Some("# large")),
        ],
    ),
    Move::Commit(
        "c2",
        P2,
        &[
            ("drone/svc-dev/namespace.yaml", Some("ns svc svc-dev")),
            ("drone/svc-dev/reconciler.yaml", Some("argo")),
        ],
    ),
    Move::Commit(
        "c3",
        P3,
        &[
            ("drone/hello-dev/reconciler.yaml", Some("flux ./dev2")),
            ("large/README.md", None),
            ("small/README.md", Some("# small")),
            ("small/svc-dev/namespace.yaml", Some("ns svc svc-dev")),
            ("small/svc-dev/reconciler.yaml", Some("argo")),
        ],
    ),
];

const C1_TYPES: &[ClusterTypeTargets] = &[("drone", &[("hello-dev", "hello", "./dev")]), ("large", &[])];

const CASES: &[Case] = &[
    Case {
        name: "reset to an ancestor",
        phases: &[Phase {
            moves: &[Move::Reset("c1")],
            head: ("c1", P1),
            cluster_types: C1_TYPES,
            workloads: &[("hello", &[("drone", "c1")]), ("svc", &[])],
            gates: &[
                GateAnswer {
                    commit: "c1",
                    verdict: "pending",
                    compliant: 1,
                    total: 3,
                    clusters: &[
                        ("drone-1", "behind"),
                        ("large-1", "behind"),
                        ("drone-2", "compliant"),
                    ],
                },
                GateAnswer {
                    commit: P1,
                    verdict: "pending",
                    compliant: 1,
                    total: 3,
                    clusters: &[
                        ("drone-1", "behind"),
                        ("large-1", "behind"),
                        ("drone-2", "compliant"),
                    ],
                },
            ],
            gone: &["c2", "c3", P2, P3],
            behind: &[("drone", 1), ("large", 1), ("small", 1)],
        }],
    },
    Case {
        name: "reset to an ancestor, then new commits",
        phases: &[Phase {
            moves: &[
                Move::Reset("c1"),
                Move::Commit(
                    "n2",
                    P4,
                    &[
                        ("drone/other-dev/namespace.yaml", Some("ns other other-dev")),
                        ("drone/other-dev/reconciler.yaml", Some("flux ./other")),
                    ],
                ),
                Move::Commit("n3", P5, &[("large/notes.md", Some("# notes"))]),
            ],
            head: ("n3", P5),
            cluster_types: &[
                (
                    "drone",
                    &[("hello-dev", "hello", "./dev"), ("other-dev", "other", "./other")],
                ),
                ("large", &[]),
            ],
            workloads: &[
                ("hello", &[("drone", "c1")]),
                ("other", &[("drone", "n2")]),
                ("svc", &[]),
            ],
            gates: &[
                GateAnswer {
                    commit: "n3",
                    verdict: "pending",
                    compliant: 0,
                    total: 3,
                    clusters: &[
                        ("drone-1", "behind"),
                        ("drone-2", "behind"),
                        ("large-1", "behind"),
                    ],
                },
                GateAnswer {
                    commit: P4,
                    verdict: "pending",
                    compliant: 0,
                    total: 3,
                    clusters: &[
                        ("drone-1", "behind"),
                        ("drone-2", "behind"),
                        ("large-1", "behind"),
                    ],
                },
                GateAnswer {
                    commit: "c1",
                    verdict: "pending",
                    compliant: 1,
                    total: 3,
                    clusters: &[
                        ("drone-1", "behind"),
                        ("large-1", "behind"),
                        ("drone-2", "compliant"),
                    ],
                },
            ],
            gone: &["c2", "c3", P2, P3],
            behind: &[("drone", 2), ("large", 1), ("small", 1)],
        }],
    },
    Case {
        name: "an unrelated history force-pushed",
        phases: &[Phase {
            moves: &[
                Move::Orphan,
                Move::Commit(
                    "r1",
                    P4,
                    &[
                        ("drone/hello-dev/namespace.yaml", Some("ns hello hello-dev")),
                        ("drone/hello-dev/reconciler.yaml", Some("flux ./r")),
                        ("small/README.md", Some("# small")),
                    ],
                ),
            ],
            head: ("r1", P4),
            cluster_types: &[("drone", &[("hello-dev", "hello", "./r")]), ("small", &[])],
            workloads: &[("hello", &[("drone", "r1")]), ("svc", &[])],
            gates: &[GateAnswer {
                commit: P4,
                verdict: "pending",
                compliant: 0,
                total: 3,
                clusters: &[
                    ("drone-1", "behind"),
                    ("drone-2", "behind"),
                    ("small-1", "behind"),
                ],
            }],
            gone: &["c1", "c2", "c3", P1, P2, P3],
            behind: &[("drone", 2), ("large", 1), ("small", 1)],
        }],
    },
    Case {
        name: "rewound to a stored commit, then forward to the abandoned head again",
        phases: &[
            Phase {
                moves: &[Move::Reset("c2")],
                head: ("c2", P2),
                cluster_types: &[
                    (
                        "drone",
                        &[("hello-dev", "hello", "./dev"), ("svc-dev", "svc", "")],
                    ),
                    ("large", &[]),
                ],
                workloads: &[("hello", &[("drone", "c1")]), ("svc", &[("drone", "c2")])],
                gates: &[
                    GateAnswer {
                        commit: "c2",
                        verdict: "pending",
                        compliant: 1,
                        total: 3,
                        clusters: &[
                            ("drone-1", "behind"),
                            ("drone-2", "behind"),
                            ("large-1", "compliant"),
                        ],
                    },
                    GateAnswer {
                        commit: P1,
                        verdict: "pending",
                        compliant: 2,
                        total: 3,
                        clusters: &[
                            ("drone-1", "behind"),
                            ("drone-2", "compliant"),
                            ("large-1", "compliant"),
                        ],
                    },
                ],
                gone: &["c3", P3],
                behind: &[("drone", 2), ("small", 1)],
            },
            Phase {
                moves: &[Move::Reset("c3")],
                head: ("c3", P3),
                cluster_types: &[
                    (
                        "drone",
                        &[("hello-dev", "hello", "./dev2"), ("svc-dev", "svc", "")],
                    ),
                    ("small", &[("svc-dev", "svc", "")]),
                ],
                workloads: &[
                    ("hello", &[("drone", "c3")]),
                    ("svc", &[("drone", "c2"), ("small", "c3")]),
                ],
                gates: &[GateAnswer {
                    commit: "c3",
                    verdict: "pending",
                    compliant: 2,
                    total: 3,
                    clusters: &[
                        ("drone-2", "behind"),
                        ("drone-1", "compliant"),
                        ("small-1", "compliant"),
                    ],
                }],
                gone: &[],
                behind: &[("drone", 1), ("large", 1)],
            },
        ],
    },
];

/// A file's content from its short form: `ns WORKLOAD TARGET` (a Namespace), `flux PATH`
/// (a Flux GitRepository and Kustomization), `argo` (an Argo CD Application), else the text.
fn content(short: &str) -> String {
    let words: Vec<&str> = short.split(' ').collect();
    match words.as_slice() {
        ["ns", workload, target] => format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dev-{target}\n  labels:\n    workload: {workload}\n    deploymentTarget: {target}\n"
        ),
        ["flux", path] => format!(
            "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: w\nspec:\n  url: https://github.com/contoso/app-gitops\n  ref:\n    branch: dev\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: w\nspec:\n  path: {path}\n"
        ),
        ["argo"] => "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: svc\nspec:\n  source:\n    repoURL: https://github.com/contoso/svc-gitops\n    targetRevision: dev\n    path: svc\n".to_owned(),
        _ => format!("{short}\n"),
    }
}

struct World {
    control_plane: PathBuf,
    gitops: PathBuf,
    cache: PathBuf,
    /// Commit names → ids.
    commits: BTreeMap<&'static str, String>,
}

impl World {
    /// A control plane whose environment `dev` delivers to branch `dev` of a GitOps repository.
    fn new(dir: &Path) -> World {
        let control_plane = dir.join("control-plane.git");
        let gitops = dir.join("gitops.git");
        init_bare(&control_plane);
        init_bare(&gitops);
        write_files(
            &control_plane,
            "main",
            &[(
                ".environments/dev.yaml",
                Some(
                    "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: dev\nspec:\n  controlPlane:\n    repo: https://github.com/contoso/control-plane\n    branch: dev\n    path: .\n",
                ),
            )],
            "environments",
        );
        let gitops_yaml = format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: dev\nspec:\n  repo: file://{}\n  branch: dev\n  path: .\n",
            gitops.display()
        );
        write_files(
            &control_plane,
            "dev",
            &[("gitops-repo.yaml", Some(gitops_yaml.as_str()))],
            "gitops repo",
        );
        World {
            control_plane,
            gitops,
            cache: dir.join("cache"),
            commits: BTreeMap::new(),
        }
    }

    fn apply(&mut self, m: Move) {
        match m {
            Move::Reset(name) => {
                let sha = self.commits[name].clone();
                git(&self.gitops, &["update-ref", "refs/heads/dev", &sha]);
            }
            Move::Orphan => {
                git(&self.gitops, &["update-ref", "-d", "refs/heads/dev"]);
            }
            Move::Commit(name, promoted, files) => {
                let contents: Vec<(String, Option<String>)> = files
                    .iter()
                    .map(|(path, short)| ((*path).to_owned(), short.map(content)))
                    .chain([(
                        ".github/tracking/Promoted_Commit_Id".to_owned(),
                        Some(promoted.to_owned()),
                    )])
                    .collect();
                let files: Vec<(&str, Option<&str>)> =
                    contents.iter().map(|(p, c)| (p.as_str(), c.as_deref())).collect();
                // The name in the message: two commits of the same tree and parent differ.
                let sha = write_files(&self.gitops, "dev", &files, name);
                self.commits.insert(name, sha);
            }
        }
    }

    /// A commit's id from its name, or the text itself (a control-plane commit).
    fn sha(&self, name: &str) -> String {
        self.commits.get(name).cloned().unwrap_or_else(|| name.to_owned())
    }

    fn settings(&self) -> GitSettings {
        GitSettings {
            control_plane: self.control_plane.display().to_string(),
            cache_dir: self.cache.clone(),
            auth: AuthSettings::default(),
            retry: RetryPolicy::default(),
            main_branch: "main".to_owned(),
            registry: Default::default(),
        }
    }
}

/// A Flux event: `cluster` of `cluster_type` applied `commit` at `time` (seconds).
fn flux_event(cluster: &str, cluster_type: &str, commit: &str, time: u32) -> Vec<u8> {
    let name = "kustomization-succeeded.json";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/flux")
        .join(name);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["metadata"]["cluster"] = cluster.into();
    v["metadata"]["clusterType"] = cluster_type.into();
    v["metadata"]["revision"] = format!("dev@sha1:{commit}").into();
    v["timestamp"] = format!("2026-11-26T08:{:02}:{:02}Z", time / 60, time % 60).into();
    serde_json::to_vec(&v).unwrap()
}

/// The version the dashboard's fleet page carries (what its pages watch for changes).
async fn dashboard_version(c: &mut Client) -> u64 {
    let r = c.get("/", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    let page = String::from_utf8(r.body).unwrap();
    let at = page
        .find("data-version=\"")
        .expect("the page carries its version")
        + "data-version=\"".len();
    let end = page[at..].find('"').unwrap();
    page[at..at + end].parse().unwrap()
}

/// Every row the refresh writes, as text: commits, placements, OCI artifacts, clusters and
/// their counts (without the moment a cluster last left its group).
async fn dump(hub: &Hub) -> String {
    let pool = hub.state.db().pool();
    let mut out = String::new();
    for sql in [
        "SELECT environment, sha, COALESCE(parent, ''), position, COALESCE(promoted_commit, '') FROM gitops_commits ORDER BY environment, position, sha",
        "SELECT environment, cluster_type, deployment_target, COALESCE(workload, ''), from_position, from_sha, COALESCE(to_position, -1), COALESCE(to_sha, '') FROM placements ORDER BY 1, 2, 3, 5",
        "SELECT environment, name, cluster_type, COALESCE(state, ''), COALESCE(commit_sha, ''), COALESCE(position, -1) FROM clusters ORDER BY environment, name",
        "SELECT environment, cluster_type, stale, state, position, clusters FROM cluster_counts ORDER BY 1, 2, 3, 4, 5",
    ] {
        for row in sqlx::query(sql).fetch_all(pool).await.unwrap() {
            let cells: Vec<String> = (0..row.len())
                .map(|i| {
                    row.try_get::<String, _>(i)
                        .or_else(|_| row.try_get::<i64, _>(i).map(|n| n.to_string()))
                        .unwrap()
                })
                .collect();
            out.push_str(&cells.join(" | "));
            out.push('\n');
        }
        out.push_str("--\n");
    }
    out
}

async fn run_case(case: &Case, url: &str, dir: &Path) {
    let mut world = World::new(dir);
    for m in HISTORY {
        world.apply(*m);
    }
    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.git = Some(world.settings());
    config.dashboard = kalypso_hub::DashboardMode::Public;
    let hub = start(config).await;
    let mut c = Client::new(hub.addr);
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let head = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(
        head["latest"]["commit"],
        world.sha("c3").as_str(),
        "{}",
        case.name
    );
    let mut time = 0;
    for (cluster, cluster_type, commit) in REPORTS {
        time += 1;
        let r = c
            .post(
                "/api/v1/events/flux",
                &[],
                &flux_event(cluster, cluster_type, &world.sha(commit), time),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 200);
    }

    let mut last_head = String::new();
    for (index, phase) in case.phases.iter().enumerate() {
        let at = format!("{}, phase {}", case.name, index + 1);
        let version = dashboard_version(&mut c).await;
        for m in phase.moves {
            world.apply(*m);
        }
        hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
        // The dashboard's pages see that something changed (a rewind removes rows).
        assert!(
            dashboard_version(&mut c).await > version,
            "{at}: the dashboard's version did not grow"
        );
        check_phase(&hub, &mut c, &world, phase, &at).await;

        // A cluster that reports an abandoned commit again (a late event, applied again with
        // another message) stays behind: the writers do not use the position they remembered
        // for it.
        let mut again = false;
        for (cluster, cluster_type, commit) in REPORTS {
            if phase.gone.contains(&commit) {
                time += 1;
                let mut event: Value =
                    serde_json::from_slice(&flux_event(cluster, cluster_type, &world.sha(commit), time))
                        .unwrap();
                event["message"] = "applied again".into();
                let event = serde_json::to_vec(&event).unwrap();
                let r = c.post("/api/v1/events/flux", &[], &event).await.unwrap();
                assert_eq!(r.status, 200);
                again = true;
            }
        }
        // A cluster a writer of another hub put on an abandoned commit (a position it looked
        // up before the rewind) is moved off it by the next refresh.
        if let Some((cluster, _, commit)) = REPORTS.iter().find(|(_, _, commit)| phase.gone.contains(commit))
        {
            sqlx::query(
                "UPDATE clusters SET position = (SELECT position FROM gitops_abandoned WHERE sha = $1) WHERE name = $2",
            )
            .bind(world.sha(commit))
            .bind(*cluster)
            .execute(hub.state.db().pool())
            .await
            .unwrap();
            let report = kalypso_hub::gitops::refresh(hub.state.db(), &world.settings())
                .await
                .unwrap();
            assert!(report.errors.is_empty(), "{at}: {report:?}");
            again = true;
        }
        if again {
            check_phase(
                &hub,
                &mut c,
                &world,
                phase,
                &format!("{at}, after reports of abandoned commits"),
            )
            .await;
        }

        // The hub settles: more refreshes read nothing new and change nothing.
        let before = dump(&hub).await;
        for _ in 0..2 {
            let report = kalypso_hub::gitops::refresh(hub.state.db(), &world.settings())
                .await
                .unwrap();
            assert_eq!(
                (report.commits, report.rewound, report.errors.len()),
                (0, 0, 0),
                "{at}: {report:?}"
            );
        }
        assert_eq!(
            dump(&hub).await,
            before,
            "{at}: a refresh after the rewind changed the database"
        );

        // Every commit has a position of its own.
        let shared: Vec<(String, i64)> = sqlx::query(
            "SELECT environment, position FROM gitops_commits GROUP BY environment, position HAVING COUNT(*) > 1",
        )
        .fetch_all(hub.state.db().pool())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.try_get(0).unwrap(), r.try_get(1).unwrap()))
        .collect();
        assert_eq!(shared, [], "{at}: commits sharing a position");

        // The aggregates equal a recount.
        let check = kalypso_hub::counts::check(hub.state.db(), 0).await.unwrap();
        assert_eq!(check.repaired, 0, "{at}: the counts differed from a recount");
        last_head = world.sha(phase.head.0);
    }

    // Once every cluster reports the head, its gate passes.
    let last = case.phases.last().unwrap();
    for (cluster, cluster_type, _) in REPORTS {
        if last.cluster_types.iter().any(|(t, _)| *t == cluster_type) {
            time += 1;
            let r = c
                .post(
                    "/api/v1/events/flux",
                    &[],
                    &flux_event(cluster, cluster_type, &last_head, time),
                )
                .await
                .unwrap();
            assert_eq!(r.status, 200);
        }
    }
    let gate = get(
        &mut c,
        &format!("/api/v1/environments/dev/gate?commit={last_head}"),
    )
    .await;
    assert_eq!(gate["verdict"], "compliant", "{}: {gate}", case.name);
    assert_eq!(gate["compliant"], gate["total"], "{}: {gate}", case.name);
    let env = get(&mut c, "/api/v1/environments/dev").await;
    for t in env["clusterTypes"].as_array().unwrap() {
        if last.cluster_types.iter().any(|(name, _)| t["name"] == *name) {
            assert_eq!(t["clusters"]["behind"], 0, "{}: {t}", case.name);
        }
    }
    let check = kalypso_hub::counts::check(hub.state.db(), 0).await.unwrap();
    assert_eq!(
        check.repaired, 0,
        "{}: the counts differed from a recount",
        case.name
    );
}

async fn check_phase(hub: &Hub, c: &mut Client, world: &World, phase: &Phase, at: &str) {
    let head = world.sha(phase.head.0);
    // The environment's head and what each cluster type runs.
    let env = get(c, "/api/v1/environments/dev").await;
    assert_eq!(env["latest"]["commit"], head.as_str(), "{at}: the head");
    assert_eq!(
        env["latest"]["controlPlaneCommit"], phase.head.1,
        "{at}: the head's control-plane commit"
    );
    // (The environment also lists the cluster types that only have clusters, without targets.)
    let types: SeenTargets = env["clusterTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            phase.cluster_types.iter().any(|(name, _)| t["name"] == *name)
                || !t["deploymentTargets"].as_array().unwrap().is_empty()
        })
        .map(|t| {
            let targets = t["deploymentTargets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| {
                    (
                        d["name"].as_str().unwrap().to_owned(),
                        d["workload"].as_str().unwrap_or_default().to_owned(),
                        if d["source"]["kind"] == "flux" {
                            d["source"]["path"].as_str().unwrap_or_default().to_owned()
                        } else {
                            String::new()
                        },
                    )
                })
                .collect();
            (t["name"].as_str().unwrap().to_owned(), targets)
        })
        .collect();
    let expected: SeenTargets = phase
        .cluster_types
        .iter()
        .map(|(t, targets)| {
            (
                (*t).to_owned(),
                targets
                    .iter()
                    .map(|(d, w, p)| ((*d).to_owned(), (*w).to_owned(), (*p).to_owned()))
                    .collect(),
            )
        })
        .collect();
    assert_eq!(types, expected, "{at}: the head's cluster types");
    let commit = get(c, &format!("/api/v1/commits/{head}")).await;
    let names: Vec<&str> = phase.cluster_types.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        commit["environments"][0]["clusterTypes"],
        json!(names),
        "{at}: the head's cluster types: {commit}"
    );
    let behind: Vec<(String, u64)> = env["clusterTypes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["clusters"]["behind"].as_u64().unwrap_or_default() > 0)
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["clusters"]["behind"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64)> = phase.behind.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
    assert_eq!(behind, expected, "{at}: clusters behind the head");

    // Where each workload runs, and since which commit.
    for (workload, places) in phase.workloads {
        let answer = get(c, &format!("/api/v1/workloads/{workload}")).await;
        let seen: Vec<(String, String)> = answer["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["clusterType"].as_str().unwrap().to_owned(),
                    p["since"]["gitopsCommit"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = places
            .iter()
            .map(|(t, since)| ((*t).to_owned(), world.sha(since)))
            .collect();
        assert_eq!(seen, expected, "{at}: where {workload} runs");
    }

    // The gates.
    for g in phase.gates {
        let answer = get(
            c,
            &format!("/api/v1/environments/dev/gate?commit={}", world.sha(g.commit)),
        )
        .await;
        let clusters: Vec<(String, String)> = answer["clusters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_owned(),
                    c["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(String, String)> = g
            .clusters
            .iter()
            .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
            .collect();
        assert_eq!(
            (
                answer["verdict"].clone(),
                answer["compliant"].clone(),
                answer["total"].clone(),
                clusters
            ),
            (json!(g.verdict), json!(g.compliant), json!(g.total), expected),
            "{at}: the gate of {}: {answer}",
            g.commit
        );
    }
    for gone in phase.gone {
        let answer = get(
            c,
            &format!("/api/v1/environments/dev/gate?commit={}", world.sha(gone)),
        )
        .await;
        assert_eq!(
            answer["verdict"], "unknown-commit",
            "{at}: the gate of {gone}, which the branch no longer has: {answer}"
        );
    }

    // The rollout view is of the head.
    let rollout = get(c, "/api/v1/environments/dev/rollout").await;
    assert_eq!(
        rollout["gitopsCommit"],
        head.as_str(),
        "{at}: the rollout view's head"
    );
    let _ = hub;
}

async fn run(index: usize) {
    let case = &CASES[index];
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), &format!("rewind{index}"))
        .await
        .into_iter()
        .enumerate()
    {
        let dir = tmp.path().join(format!("repos{i}"));
        run_case(case, &url, &dir).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_reset_to_an_ancestor() {
    run(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_reset_to_an_ancestor_then_built_on() {
    run(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_history_force_pushed() {
    run(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_rewound_to_a_stored_commit_and_forward_again() {
    run(3).await;
}

/// A database an earlier version stored a rewind in (a new commit at an abandoned commit's
/// position): the migration forgets the environment's history, the next refresh reads it again
/// from the branch, and the clusters' platform states are set again from their latest reports.
async fn legacy_case(url: &str, dir: &Path) {
    let mut world = World::new(dir);
    for m in HISTORY {
        world.apply(*m);
    }
    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.git = Some(world.settings());
    let hub = start(config.clone()).await;
    let mut c = Client::new(hub.addr);
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let mut time = 0;
    for (cluster, cluster_type, commit) in REPORTS {
        time += 1;
        let event = flux_event(cluster, cluster_type, &world.sha(commit), time);
        assert_eq!(
            c.post("/api/v1/events/flux", &[], &event).await.unwrap().status,
            200
        );
    }
    world.apply(Move::Reset("c1"));
    world.apply(Move::Commit("n2", P4, &[("large/notes.md", Some("# notes"))]));
    // The schema before migration 0007, and n2 stored as an earlier version stored it: at c2's
    // position.
    let mut conn = hub.state.db().pool().acquire().await.unwrap();
    for sql in [
        "DROP INDEX gitops_commits_position",
        "CREATE INDEX gitops_commits_position ON gitops_commits (environment, position)",
        "DROP TABLE gitops_abandoned",
        "ALTER TABLE environments DROP COLUMN rewinds",
        "DELETE FROM _sqlx_migrations WHERE version = 7",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit) \
         VALUES ('dev', $1, $2, 1, 0, $3)",
    )
    .bind(world.sha("n2"))
    .bind(world.sha("c1"))
    .bind(P4)
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);

    let hub = start(config).await;
    let mut c = Client::new(hub.addr);
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let env = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(env["latest"]["commit"], world.sha("n2").as_str());
    let positions: Vec<(String, i64)> =
        sqlx::query("SELECT sha, position FROM gitops_commits ORDER BY position")
            .fetch_all(hub.state.db().pool())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.try_get(0).unwrap(), r.try_get(1).unwrap()))
            .collect();
    assert_eq!(positions, [(world.sha("c1"), 0), (world.sha("n2"), 1)]);
    let gate = get(
        &mut c,
        &format!("/api/v1/environments/dev/gate?commit={}", world.sha("c1")),
    )
    .await;
    let clusters: Vec<(&str, &str)> = gate["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        clusters,
        [
            ("drone-1", "behind"),
            ("large-1", "behind"),
            ("drone-2", "compliant")
        ],
        "{gate}"
    );
    let check = kalypso_hub::counts::check(hub.state.db(), 0).await.unwrap();
    assert_eq!(check.repaired, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_an_earlier_version_stored_is_read_again() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "legacy").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        legacy_case(&url, &dir).await;
    }
}
