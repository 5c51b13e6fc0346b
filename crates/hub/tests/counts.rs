//! The incremental aggregates against a full recount: random report sequences (sequential and
//! concurrent, registrations in batches, duplicated, out of order, for unknown commits, for
//! commits the hub reads later and for commits a rewind of the branch abandoned, from clusters
//! that change cluster type or environment, and clusters that go stale and come back) are posted to a hub over HTTP, and after each stretch
//! every aggregate is compared with a recount of the `clusters` table: the stored counts, the
//! counts as readers correct them for staleness, every gate of every commit (counts, verdict
//! and the list of clusters), every environment's status, the cluster-type lists page by page,
//! and when each gate last became compliant. Then the counts are corrupted by hand and the
//! check on start repairs them. Runs on SQLite, and on PostgreSQL when
//! `KALYPSO_TEST_POSTGRES_URL` is set.
//!
//! The sequences come from a fixed list of seeds; a failure names its seed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kalypso_git::{AuthSettings, RetryPolicy};
use kalypso_hub::client::Client;
use kalypso_hub::counts::{self, Scope, Snapshot, Staleness};
use kalypso_hub::{Db, DbOptions, GitSettings, HubConfig, HubState, query};
use kalypso_hub_api::ClusterState;
use kalypso_testkit::{init_bare, write_files};
use serde_json::json;
use sqlx::Row;

mod common;
use common::databases;

const ENVIRONMENTS: [&str; 2] = ["dev", "prod"];
const CLUSTERS: usize = 24;
const TYPES: [&str; 4] = ["t1", "t2", "t3", "t4"];

/// SplitMix64: a small deterministic generator, so that a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A control plane with `dev` and `prod`, each delivering to the branch of its name of one
/// GitOps repository, with three commits whose cluster types change: {t1, t2}, then
/// {t1, t2, t3}, then {t1, t3, t4}.
struct Repos {
    settings: GitSettings,
    gitops: std::path::PathBuf,
    /// Per environment, its commits in order.
    commits: BTreeMap<&'static str, Vec<String>>,
}

fn readme(ct: &str) -> (String, Option<String>) {
    (format!("{ct}/README.md"), Some(format!("# {ct}\n")))
}

fn repos(dir: &Path) -> Repos {
    let cp = dir.join("control-plane.git");
    let gitops = dir.join("gitops.git");
    init_bare(&cp);
    init_bare(&gitops);
    let env_yaml = |env: &str| {
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: {env}\nspec:\n  controlPlane:\n    repo: https://github.com/contoso/control-plane\n    branch: {env}\n    path: .\n"
        )
    };
    let (dev, prod) = (env_yaml("dev"), env_yaml("prod"));
    write_files(
        &cp,
        "main",
        &[
            (".environments/dev.yaml", Some(dev.as_str())),
            (".environments/prod.yaml", Some(prod.as_str())),
        ],
        "environments",
    );
    let mut commits = BTreeMap::new();
    for env in ENVIRONMENTS {
        let gitops_yaml = format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: {env}\nspec:\n  repo: file://{}\n  branch: {env}\n  path: .\n",
            gitops.display()
        );
        write_files(
            &cp,
            env,
            &[("gitops-repo.yaml", Some(gitops_yaml.as_str()))],
            "gitops repo",
        );
        let mut list = Vec::new();
        for (n, (add, remove)) in [
            (vec!["t1", "t2"], vec![]),
            (vec!["t3"], vec![]),
            (vec!["t4"], vec!["t2"]),
        ]
        .into_iter()
        .enumerate()
        {
            let promoted = format!("{:040x}", 0x00c0_ffee_0000_u64 + n as u64);
            let mut files: Vec<(String, Option<String>)> = add.iter().map(|ct| readme(ct)).collect();
            files.extend(remove.iter().map(|ct| (format!("{ct}/README.md"), None)));
            files.push((".github/tracking/Promoted_Commit_Id".to_owned(), Some(promoted)));
            let refs: Vec<(&str, Option<&str>)> =
                files.iter().map(|(p, c)| (p.as_str(), c.as_deref())).collect();
            list.push(write_files(&gitops, env, &refs, &format!("commit {n}")));
        }
        commits.insert(env, list);
    }
    Repos {
        settings: GitSettings {
            control_plane: cp.display().to_string(),
            cache_dir: dir.join("cache"),
            auth: AuthSettings::default(),
            retry: RetryPolicy::default(),
            main_branch: "main".to_owned(),
            registry: Default::default(),
        },
        gitops,
        commits,
    }
}

struct Hub {
    addr: SocketAddr,
    state: HubState,
}

async fn start(url: &str, repos: &Repos, stale_after: Duration) -> Hub {
    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.stale_after = stale_after;
    config.git = Some(repos.settings.clone());
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::app(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    state.refresher().refresh_now(Duration::from_secs(30)).await;
    Hub { addr, state }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// What the generator knows of the fleet.
struct Fleet {
    rng: Rng,
    /// Per cluster: its usual environment and cluster type.
    homes: Vec<(usize, usize)>,
    /// Commits a report may name, per environment (the ones the hub knows, then later ones).
    commits: BTreeMap<&'static str, Vec<String>>,
    /// Bodies already posted (to send again).
    sent: Vec<(String, Vec<u8>)>,
    /// The time events are stamped around.
    clock: i64,
}

impl Fleet {
    fn new(seed: u64, commits: BTreeMap<&'static str, Vec<String>>) -> Fleet {
        let mut rng = Rng(seed);
        let homes = (0..CLUSTERS)
            .map(|_| (rng.below(ENVIRONMENTS.len()), rng.below(TYPES.len())))
            .collect();
        Fleet {
            rng,
            homes,
            commits,
            sent: Vec::new(),
            clock: 1_800_000_000_000,
        }
    }

    /// One report: (path, body).
    fn report(&mut self) -> (String, Vec<u8>) {
        let rng = &mut self.rng;
        if !self.sent.is_empty() && rng.chance(10) {
            // A retry, or the same event again.
            return self.sent[rng.below(self.sent.len())].clone();
        }
        let cluster = rng.below(CLUSTERS);
        let (mut env, mut ct) = self.homes[cluster];
        if rng.chance(5) {
            // Registered elsewhere: the same name in the other environment.
            env = 1 - env;
        }
        if rng.chance(8) {
            // Its cluster type changes (and stays changed).
            ct = rng.below(TYPES.len());
            self.homes[cluster].1 = ct;
        }
        let env_name = ENVIRONMENTS[env];
        let known = &self.commits[env_name];
        let commit = match rng.below(20) {
            0 => format!("{:040x}", rng.next()), // another repository's commit
            1 => self.commits[ENVIRONMENTS[1 - env]][0].clone(), // the other branch's
            _ => known[rng.below(known.len())].clone(),
        };
        self.clock += 1000;
        // Out of order: now and then an event from the past.
        let time = if rng.chance(15) {
            self.clock - 1000 * (1 + rng.below(20) as i64)
        } else {
            self.clock
        };
        let timestamp = chrono_like(time);
        let name = format!("c{cluster:02}");
        let body = match rng.below(10) {
            0 => {
                // A source: stored, never a platform state.
                json!({"involvedObject": {"kind": "GitRepository", "namespace": "flux-system", "name": "platform"},
                    "severity": "info", "timestamp": timestamp, "message": "stored artifact", "reason": "NewArtifact",
                    "metadata": {"revision": format!("{env_name}@sha1:{commit}"), "cluster": name,
                        "clusterType": TYPES[ct], "environment": env_name}})
            }
            1 | 2 => {
                let state = ["compliant", "failed", "reconciling"][rng.below(3)];
                let body = json!({"cluster": name, "clusterType": TYPES[ct], "environment": env_name,
                    "gitopsRepo": "https://example.com/gitops", "branch": env_name, "commit": commit,
                    "state": state, "message": format!("generic {state}"), "time": timestamp});
                let out = (
                    "/api/v1/compliance".to_owned(),
                    serde_json::to_vec(&body).unwrap(),
                );
                self.sent.push(out.clone());
                return out;
            }
            _ => {
                let (severity, reason) = [
                    ("info", "ReconciliationSucceeded"),
                    ("info", "Progressing"),
                    ("error", "HealthCheckFailed"),
                ][rng.below(3)];
                json!({"involvedObject": {"kind": "Kustomization", "namespace": "flux-system", "name": "platform"},
                    "severity": severity, "timestamp": timestamp, "message": format!("{reason} {commit}"),
                    "reason": reason, "metadata": {"revision": format!("{env_name}@sha1:{commit}"),
                        "cluster": name, "clusterType": TYPES[ct], "environment": env_name}})
            }
        };
        let out = (
            "/api/v1/events/flux".to_owned(),
            serde_json::to_vec(&body).unwrap(),
        );
        self.sent.push(out.clone());
        out
    }
}

/// Unix ms as RFC 3339 at whole seconds (as Flux stamps events).
fn chrono_like(millis: i64) -> String {
    kalypso_hub::model::format_time(millis - millis % 1000)
}

async fn post(c: &mut Client, path: &str, body: &[u8]) {
    let r = c.post(path, &[], body).await.unwrap();
    assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
}

/// A cluster as the recount reads it.
#[derive(Clone, Debug)]
struct Row_ {
    environment: String,
    name: String,
    cluster_type: String,
    stale_flag: bool,
    state: String,
    position: i64,
    last_seen: i64,
}

type Key = (String, String, bool, String, i64);

async fn rows(conn: &mut sqlx::AnyConnection) -> Vec<Row_> {
    sqlx::query(
        "SELECT environment, name, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1), last_seen \
         FROM clusters ORDER BY environment, name",
    )
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| Row_ {
        environment: r.get(0),
        name: r.get(1),
        cluster_type: r.get(2),
        stale_flag: r.get::<i64, _>(3) != 0,
        state: r.get(4),
        position: r.get(5),
        last_seen: r.get(6),
    })
    .collect()
}

fn tally(rows: &[Row_], stale: impl Fn(&Row_) -> bool) -> BTreeMap<Key, i64> {
    let mut out = BTreeMap::new();
    for r in rows {
        *out.entry((
            r.environment.clone(),
            r.cluster_type.clone(),
            stale(r),
            r.state.clone(),
            r.position,
        ))
        .or_default() += 1;
    }
    out
}

fn nonzero(groups: &[counts::Group]) -> BTreeMap<Key, i64> {
    groups
        .iter()
        .filter(|g| g.clusters != 0)
        .map(|g| {
            (
                (
                    g.environment.clone(),
                    g.cluster_type.clone(),
                    g.stale,
                    g.state.clone(),
                    g.position,
                ),
                g.clusters,
            )
        })
        .collect()
}

/// The cluster types of `environment`'s commit at `position`, from the placements.
async fn types_at(conn: &mut sqlx::AnyConnection, environment: &str, position: i64) -> BTreeSet<String> {
    sqlx::query(
        "SELECT cluster_type FROM placements WHERE environment = $1 AND deployment_target = '' \
         AND from_position <= $2 AND (to_position IS NULL OR to_position > $2)",
    )
    .bind(environment)
    .bind(position)
    .fetch_all(&mut *conn)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// Every stored commit: (environment, sha, position, promoted).
async fn stored_commits(conn: &mut sqlx::AnyConnection) -> Vec<(String, String, i64, Option<String>)> {
    sqlx::query("SELECT environment, sha, position, promoted_commit FROM gitops_commits ORDER BY environment, position")
        .fetch_all(&mut *conn)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

fn relative(r: &Row_, before: i64, target: Option<i64>) -> ClusterState {
    counts::group_state(r.last_seen < before, &r.state, r.position, target)
}

/// Compares every aggregate with a recount, as of `staleness`.
async fn check_all(db: &Db, staleness: Staleness, seed: u64, step: &str) {
    let at = format!("seed {seed}, {step}");
    let before = staleness.before();
    // One snapshot for the stored counts and the table (the sweep runs meanwhile).
    let mut tx = db.begin_read().await.unwrap();
    let all = rows(&mut tx).await;
    let snapshot = Snapshot::read(&mut tx, None, None, staleness).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        nonzero(&snapshot.stored),
        tally(&all, |r| r.stale_flag),
        "{at}: the stored counts are a recount by the stored stale flag"
    );
    assert_eq!(
        nonzero(&snapshot.groups()),
        tally(&all, |r| r.last_seen < before),
        "{at}: the counts as read are a recount by staleness now"
    );

    let mut conn = db.pool().acquire().await.unwrap();
    let commits = stored_commits(&mut conn).await;
    for (env, sha, position, promoted) in &commits {
        let types = types_at(&mut conn, env, *position).await;
        let in_env: Vec<&Row_> = all.iter().filter(|r| &r.environment == env).collect();
        let required: Vec<&Row_> = in_env
            .iter()
            .copied()
            .filter(|r| types.contains(&r.cluster_type))
            .collect();
        let mut expected: Vec<(usize, String, ClusterState)> = required
            .iter()
            .map(|r| {
                let s = relative(r, before, Some(*position));
                // The gate's order: failed, then the others not compliant, then compliant.
                let rank = match s {
                    ClusterState::Failed => 0,
                    ClusterState::Compliant => 2,
                    _ => 1,
                };
                (rank, r.name.clone(), s)
            })
            .collect();
        expected.sort();
        let fresh: Vec<ClusterState> = expected
            .iter()
            .map(|e| e.2)
            .filter(|s| *s != ClusterState::Stale)
            .collect();
        let compliant = fresh.iter().filter(|s| **s == ClusterState::Compliant).count();
        let verdict = if fresh.contains(&ClusterState::Failed) {
            "failed"
        } else if compliant == fresh.len() {
            "compliant"
        } else {
            "pending"
        };
        let without: Vec<String> = types
            .iter()
            .filter(|t| {
                !required
                    .iter()
                    .any(|r| &&r.cluster_type == t && r.last_seen >= before)
            })
            .cloned()
            .collect();
        for (asked, limit) in [(sha.as_str(), 10_000), (sha.as_str(), 3)]
            .into_iter()
            .chain(promoted.iter().map(|p| (p.as_str(), 10_000)))
        {
            let gate = query::gate(db, env, asked, staleness, limit).await.unwrap();
            let what = format!("{at}: gate of {env} at {position} asked as {asked}");
            if asked != sha && gate.gitops_commit.as_deref() != Some(sha.as_str()) {
                // A control-plane commit names the first GitOps commit carrying it.
                continue;
            }
            assert_eq!(gate.total as usize, fresh.len(), "{what}: total");
            assert_eq!(gate.compliant as usize, compliant, "{what}: compliant");
            assert_eq!(
                serde_json::to_value(gate.verdict).unwrap(),
                json!(verdict),
                "{what}: verdict"
            );
            assert_eq!(gate.cluster_types_without_clusters, without, "{what}: without");
            let listed: Vec<(String, ClusterState)> =
                gate.clusters.iter().map(|c| (c.name.clone(), c.state)).collect();
            let want: Vec<(String, ClusterState)> = expected
                .iter()
                .take(limit as usize)
                .map(|e| (e.1.clone(), e.2))
                .collect();
            assert_eq!(listed, want, "{what}: clusters");
        }
        // Since when the environment's fresh clusters are all compliant at the commit.
        let blocked = in_env.iter().any(|r| {
            let s = relative(r, before, Some(*position));
            s != ClusterState::Compliant && s != ClusterState::Stale
        });
        assert_eq!(
            snapshot.compliant_since(env, None, *position).is_none(),
            blocked,
            "{at}: compliant since, {env} at {position}"
        );
    }

    // Each environment's status, relative to its head.
    for env in ENVIRONMENTS {
        let head = commits
            .iter()
            .filter(|c| c.0 == env)
            .map(|c| c.2)
            .max()
            .unwrap_or(i64::MAX);
        let status = query::environment(db, env, staleness).await.unwrap().unwrap();
        let mut want: BTreeMap<String, BTreeMap<&'static str, u64>> = BTreeMap::new();
        for r in all.iter().filter(|r| r.environment == env) {
            let s = relative(r, before, Some(head));
            let name = if s == ClusterState::Unknown {
                "behind"
            } else {
                s.as_str()
            };
            *want
                .entry(r.cluster_type.clone())
                .or_default()
                .entry(name)
                .or_default() += 1;
        }
        for t in &status.cluster_types {
            let w = want.remove(&t.name).unwrap_or_default();
            let c = &t.clusters;
            let got: BTreeMap<&'static str, u64> = [
                ("compliant", c.compliant),
                ("reconciling", c.reconciling),
                ("failed", c.failed),
                ("behind", c.behind),
                ("stale", c.stale),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect();
            assert_eq!(got, w, "{at}: status of {env}/{}", t.name);
        }
        assert!(want.is_empty(), "{at}: {env} misses cluster types {want:?}");

        // The cluster-type lists, page by page, in the dashboard's order.
        let rank = |s: ClusterState| {
            Some(match s {
                ClusterState::Failed => 0,
                ClusterState::Stale => 1,
                ClusterState::Compliant => 3,
                _ => 2,
            })
        };
        let mut tx = db.begin_read().await.unwrap();
        for ct in TYPES {
            let snapshot = Snapshot::read(&mut tx, Some(env), Some(ct), staleness)
                .await
                .unwrap();
            let mut want: Vec<(usize, String)> = all
                .iter()
                .filter(|r| r.environment == env && r.cluster_type == ct)
                .map(|r| (rank(relative(r, before, Some(head))).unwrap(), r.name.clone()))
                .collect();
            want.sort();
            for (offset, size) in [(0, 100), (0, 2), (2, 3), (5, 4)] {
                let got: Vec<String> = counts::list(
                    &mut tx,
                    &snapshot,
                    env,
                    Scope::Type(ct),
                    Some(head),
                    &rank,
                    offset,
                    size,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.name)
                .collect();
                let expected: Vec<String> = want
                    .iter()
                    .skip(offset as usize)
                    .take(size as usize)
                    .map(|w| w.1.clone())
                    .collect();
                assert_eq!(got, expected, "{at}: {env}/{ct} page at {offset} of {size}");
            }
        }
        tx.commit().await.unwrap();
    }
}

/// Per (environment, position): whether every fresh cluster of the environment is compliant
/// at the commit (no staleness in this phase).
async fn green(db: &Db) -> BTreeMap<(String, i64), bool> {
    let mut conn = db.pool().acquire().await.unwrap();
    let all = rows(&mut conn).await;
    let mut out = BTreeMap::new();
    for (env, _, position, _) in stored_commits(&mut conn).await {
        let ok = all
            .iter()
            .filter(|r| r.environment == env)
            .all(|r| relative(r, i64::MIN, Some(position)) == ClusterState::Compliant);
        out.insert((env, position), ok);
    }
    out
}

async fn scenario(url: &str, dir: &Path, seed: u64) {
    let repos = repos(dir);
    let hour = Duration::from_secs(3600);
    let hub = start(url, &repos, hour).await;
    let db = hub.state.db().clone();
    let staleness = |after: Duration| Staleness {
        now: now_ms(),
        after: after.as_millis() as i64,
    };
    let mut fleet = Fleet::new(seed, repos.commits.clone());
    let mut c = Client::new(hub.addr);

    // 0. Registration in batches: the first reports arrive together from 12 connections, so
    //    that one group commit registers several clusters, some with several reports of one
    //    object, next to clusters it only updates.
    let bodies: Vec<(String, Vec<u8>)> = (0..96).map(|_| fleet.report()).collect();
    let mut tasks = Vec::new();
    for chunk in bodies.chunks(8) {
        let chunk = chunk.to_vec();
        let addr = hub.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::new(addr);
            for (path, body) in chunk {
                post(&mut c, &path, &body).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    check_all(&db, staleness(hour), seed, "registered concurrently").await;

    // 1. One by one; after each report, when each gate last became compliant must lie within
    //    the report's round trip if the report made it so.
    let mut was = green(&db).await;
    let mut since: BTreeMap<(String, i64), Option<(i64, i64)>> =
        was.keys().map(|k| (k.clone(), None)).collect();
    for step in 0..120 {
        let (path, body) = fleet.report();
        let sent = now_ms();
        post(&mut c, &path, &body).await;
        let acked = now_ms();
        let now = green(&db).await;
        for (key, ok) in &now {
            if *ok && !was.get(key).copied().unwrap_or(true) {
                since.insert(key.clone(), Some((sent, acked)));
            }
        }
        was = now;
        if step % 20 == 19 {
            let s = staleness(hour);
            check_all(&db, s, seed, &format!("step {step}")).await;
            let mut tx = db.begin_read().await.unwrap();
            let snapshot = Snapshot::read(&mut tx, None, None, s).await.unwrap();
            tx.commit().await.unwrap();
            for ((env, position), ok) in &was {
                let got = snapshot.compliant_since(env, None, *position);
                match (ok, since.get(&(env.clone(), *position)).copied().flatten()) {
                    (false, _) => assert_eq!(got, None, "seed {seed}: {env} at {position}"),
                    (true, Some((from, to))) => {
                        let t = got.unwrap();
                        assert!(
                            (from..=to).contains(&t),
                            "seed {seed}: {env} at {position} compliant since {t}, not in {from}..={to}"
                        );
                    }
                    (true, None) => {}
                }
            }
        }
    }

    // 2. Concurrently: batches of several reports, some of one object.
    let bodies: Vec<(String, Vec<u8>)> = (0..120).map(|_| fleet.report()).collect();
    let mut tasks = Vec::new();
    for chunk in bodies.chunks(15) {
        let chunk = chunk.to_vec();
        let addr = hub.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::new(addr);
            for (path, body) in chunk {
                post(&mut c, &path, &body).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    check_all(&db, staleness(hour), seed, "concurrent").await;

    // 3. Reports of commits the hub has not read yet count once a refresh reads them.
    for env in ENVIRONMENTS {
        let (path, content) = readme("t2");
        let sha = write_files(
            &repos.gitops,
            env,
            &[(path.as_str(), content.as_deref())],
            "t2 again",
        );
        fleet.commits.get_mut(env).unwrap().push(sha);
    }
    for _ in 0..40 {
        let (path, body) = fleet.report();
        post(&mut c, &path, &body).await;
    }
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    check_all(&db, staleness(hour), seed, "after reading new commits").await;

    // 3b. A rewind: one environment's branch is reset to its second commit and built on; the
    //     clusters on the commits it abandons move out of their groups, reports keep naming
    //     abandoned commits (the generator still knows them), and every platform position is
    //     one of the branch's.
    let rewound = ENVIRONMENTS[(seed % 2) as usize];
    let second = repos.commits[rewound][1].clone();
    kalypso_testkit::git(
        &repos.gitops,
        &["update-ref", &format!("refs/heads/{rewound}"), &second],
    );
    let (path, content) = readme("t4");
    let sha = write_files(
        &repos.gitops,
        rewound,
        &[(path.as_str(), content.as_deref())],
        "t4 after a rewind",
    );
    fleet.commits.get_mut(rewound).unwrap().push(sha);
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    check_all(&db, staleness(hour), seed, "after a rewind").await;
    for _ in 0..40 {
        let (path, body) = fleet.report();
        post(&mut c, &path, &body).await;
    }
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    check_all(&db, staleness(hour), seed, "reports after a rewind").await;
    let off_branch: i64 = sqlx::query(
        "SELECT COUNT(*) FROM clusters c WHERE c.position IS NOT NULL AND NOT EXISTS \
         (SELECT 1 FROM gitops_commits g WHERE g.environment = c.environment AND g.position = c.position)",
    )
    .fetch_one(db.pool())
    .await
    .unwrap()
    .get(0);
    assert_eq!(
        off_branch, 0,
        "seed {seed}: clusters on commits the branch no longer has"
    );

    // 4. Staleness: a replica that calls clusters stale after a second sweeps them on start,
    //    readers count the ones it has not swept yet, and a report brings one back.
    let short = Duration::from_millis(1500);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    for _ in 0..10 {
        let (path, body) = fleet.report();
        post(&mut c, &path, &body).await;
    }
    check_all(&db, staleness(short), seed, "stale, not swept").await;
    let replica = start(url, &repos, short).await;
    let mut r = Client::new(replica.addr);
    check_all(&db, staleness(short), seed, "stale, swept on start").await;
    for _ in 0..20 {
        let (path, body) = fleet.report();
        post(&mut r, &path, &body).await;
    }
    counts::sweep(&db, staleness(short), 3).await.unwrap();
    check_all(&db, staleness(short), seed, "stale, partly swept").await;
    // Counted stale, but not any more by an hour: moved back by the sweep of a replica
    // with the longer limit, and counted fresh meanwhile.
    check_all(&db, staleness(hour), seed, "stale limit grew").await;
    counts::sweep_all(&db, staleness(hour)).await.unwrap();
    check_all(&db, staleness(hour), seed, "stale limit grew, swept").await;

    // 5. Counts edited by hand (or restored from another backup than the clusters) are
    //    repaired by the check on start.
    sqlx::query("UPDATE cluster_counts SET clusters = clusters + 7 WHERE state = 'compliant'")
        .execute(db.pool())
        .await
        .unwrap();
    sqlx::query("DELETE FROM cluster_counts WHERE state = 'failed'")
        .execute(db.pool())
        .await
        .unwrap();
    let other = Db::connect(url, &DbOptions::default()).await.unwrap();
    let report = counts::check(&other, now_ms()).await.unwrap();
    assert!(report.repaired > 0, "seed {seed}: nothing repaired: {report:?}");
    check_all(&db, staleness(hour), seed, "repaired").await;
    assert_eq!(counts::check(&other, now_ms()).await.unwrap().repaired, 0);
    // A repaired cluster type's soak starts again.
    let mut tx = db.begin_read().await.unwrap();
    let snapshot = Snapshot::read(&mut tx, None, None, staleness(hour))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let just_now = now_ms() - 60_000;
    for env in ENVIRONMENTS {
        if let Some(t) = snapshot.compliant_since(env, None, 0) {
            let repaired_types = snapshot
                .stored
                .iter()
                .any(|g| g.environment == env && (g.state == "compliant" || g.state == "failed"));
            if repaired_types {
                assert!(t >= just_now, "seed {seed}: {env}'s soak did not start again");
            }
        }
    }
    other.close().await;
    replica.state.db().close().await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_equal_a_recount_after_random_report_sequences() {
    for seed in [1_u64, 2, 3] {
        let tmp = tempfile::tempdir().unwrap();
        for (i, url) in databases(tmp.path(), "counts").await.into_iter().enumerate() {
            let dir = tmp.path().join(format!("repos{i}"));
            scenario(&url, &dir, seed).await;
        }
    }
}
