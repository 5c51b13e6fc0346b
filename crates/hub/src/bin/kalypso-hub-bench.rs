//! The hub's benchmark (not a test): a hub in a child process (this binary with `serve`, so
//! that its RSS and CPU are its own) is driven over HTTP on loopback from this process, as a
//! fleet drives it, and the answers a promotion waits on are timed as a user meets them.
//!
//! ```text
//! cargo run --release -p kalypso-hub --bin kalypso-hub-bench -- [--clusters 100000]
//!     [--updates N] [--connections 32] [--dir DIR] [--postgres | --database URL] [--keep]
//!     [--writers N]
//! ```
//!
//! 1. Seeds three environments (`dev`, `stage`, `prod`) with a GitOps history (dev: c0..c2
//!    promoting P0..P2, stage: c0, c1, prod: c0) and 100 cluster types of 5 deployment targets
//!    each, straight into the database.
//! 2. **Registration**: `--clusters` distinct clusters of `dev` post their first Flux event
//!    (compliant at c1) from `--connections` keep-alive connections; 1% as many register in
//!    `stage` and `prod` each. Every cluster must be listed afterwards.
//! 3. **Updates**: `--updates` state changes (default: half the clusters) — a cluster goes
//!    progressing, then compliant (or, one in fifty, failed) at c2.
//! 4. The gate of `dev` by GitOps commit (c2) and by control-plane commit (P2) as
//!    `kalypso check-promote` asks it (`limit=100`; and once with the default list), the environment
//!    status, the dashboard's fleet map, promotions page, environment and cluster-type pages,
//!    and a progressive rollout's wave gate (10 and 100 cluster types): each timed on its first
//!    load, then the median of five more.
//! 5. The hub's peak RSS, and the load average of the machine during each phase.
//!
//! Without `--database`, a SQLite file in `--dir` (default: a fresh folder in the temporary
//! folder; use `/dev/shm` for a million clusters), deleted at the end unless `--keep`; with
//! `--postgres`, a fresh database on the server `KALYPSO_TEST_POSTGRES_URL` names, dropped at
//! the end unless `--keep`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kalypso_hub::client::Client;
use kalypso_hub::{Db, DbOptions, HubConfig};
use sqlx::Connection;

// The allocator the `kalypso` binary ships with, so that the hub is measured as it runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ENVIRONMENTS: [&str; 3] = ["dev", "stage", "prod"];
/// GitOps commits per environment (the head is the last).
const HISTORY: [usize; 3] = [3, 2, 1];
const CLUSTER_TYPES: usize = 100;
const TARGETS_PER_TYPE: usize = 5;
/// Event times start here (Unix ms).
const EPOCH: i64 = 1_764_000_000_000;

/// The GitOps commit at `position` of environment `env`.
fn sha(env: usize, position: usize) -> String {
    format!("{:040x}", (env as u128 + 1) * 1_000_000 + position as u128)
}

/// The control-plane commit promoted at `position`.
fn promoted(position: usize) -> String {
    format!("{:040x}", 9_000_000 + position)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if args.get(1).map(String::as_str) == Some("serve") {
        let writers = args.get(3).map_or(0, |w| w.parse().unwrap());
        runtime.block_on(serve(&args[2], writers));
    } else {
        runtime.block_on(drive(&args));
    }
}

/// The hub on `database`, with `writers` writer tasks (0: the hub's default).
async fn serve(database: &str, writers: usize) {
    tracing_subscriber::fmt()
        .with_env_filter("warn,sqlx::query=error")
        .with_writer(std::io::stderr)
        .init();
    let mut config = HubConfig::new(database);
    config.stale_after = Duration::from_secs(3600);
    config.writers = writers;
    config.dashboard = kalypso_hub::DashboardMode::Public;
    // The hub as `kalypso hub` serves it: its accept loop, limits and per-cluster rate.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    kalypso_hub::serve_on(&config, listener, std::future::pending())
        .await
        .unwrap();
}

async fn postgres_admin(base: &str, sql: &str) {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(base).await.unwrap();
    sqlx::query(sql).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

/// The GitOps histories and 100 cluster types of 5 deployment targets each.
async fn seed(db: &Db) {
    let mut tx = db.pool().begin().await.unwrap();
    for (e, env) in ENVIRONMENTS.iter().enumerate() {
        sqlx::query(
            "INSERT INTO environments (name, gitops_repo, branch, refreshed_at) VALUES ($1, $2, $3, 0)",
        )
        .bind(*env)
        .bind("https://github.com/contoso/kalypso-gitops")
        .bind(*env)
        .execute(&mut *tx)
        .await
        .unwrap();
        for n in 0..HISTORY[e] {
            sqlx::query(
                "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(*env)
            .bind(sha(e, n))
            .bind(if n == 0 { None } else { Some(sha(e, n - 1)) })
            .bind(n as i64)
            .bind(EPOCH - 3_600_000 + (n as i64 + e as i64) * 60_000)
            .bind(promoted(n))
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        for t in 0..CLUSTER_TYPES {
            let ct = format!("type-{t:03}");
            for d in 0..=TARGETS_PER_TYPE {
                let dt = if d == 0 {
                    String::new()
                } else {
                    format!("workload-{d}-{env}")
                };
                sqlx::query(
                    "INSERT INTO placements (environment, cluster_type, deployment_target, workload, source, from_position, from_sha) VALUES ($1, $2, $3, $4, $5, 0, $6)",
                )
                .bind(*env)
                .bind(&ct)
                .bind(&dt)
                .bind(if d == 0 { None } else { Some(format!("workload-{d}")) })
                .bind(if d == 0 { None } else { Some(r#"{"kind":"flux","url":"https://github.com/contoso/app-gitops","branch":"dev","revision":null,"path":"./dev"}"#.to_owned()) })
                .bind(sha(e, 0))
                .execute(&mut *tx)
                .await
                .unwrap();
            }
        }
    }
    tx.commit().await.unwrap();
}

/// What a Flux event says.
#[derive(Clone, Copy)]
enum Kind {
    Progressing,
    Compliant,
    Failed,
}

/// A Flux Kustomization event of cluster `cluster` of `env` applying its commit at `position`.
fn event(env: usize, cluster: usize, position: usize, kind: Kind, millis: i64) -> Vec<u8> {
    let (severity, reason) = match kind {
        Kind::Failed => ("error", "HealthCheckFailed"),
        Kind::Progressing => ("info", "Progressing"),
        Kind::Compliant => ("info", "ReconciliationSucceeded"),
    };
    let time = kalypso_hub::model::format_time(EPOCH + millis);
    // Formatted directly: the load generator shares the cores with the hub.
    format!(
        r#"{{"involvedObject":{{"kind":"Kustomization","namespace":"flux-system","name":"platform","uid":"5c2d4d4a-7c0e-4e3b-9a37-0d7f0b1f8a11","apiVersion":"kustomize.toolkit.fluxcd.io/v1"}},"severity":"{severity}","timestamp":"{time}","message":"Applied revision {commit}","reason":"{reason}","metadata":{{"revision":"{env_name}@sha1:{commit}","cluster":"cluster-{cluster:07}","clusterType":"type-{ct:03}","environment":"{env_name}"}},"reportingController":"kustomize-controller"}}"#,
        env_name = ENVIRONMENTS[env],
        commit = sha(env, position),
        ct = cluster % CLUSTER_TYPES,
    )
    .into_bytes()
}

/// What a phase of load gave.
struct Rate {
    events: usize,
    per_second: f64,
    errors: u64,
}

/// Sends `total` events from `connections` keep-alive connections; `make(i)` builds event
/// `i`. A response other than 200, or a connection error, is an error (not retried).
async fn blast(
    addr: SocketAddr,
    connections: usize,
    total: usize,
    make: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
) -> Rate {
    let next = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let next = next.clone();
        let errors = errors.clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(addr);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    break;
                }
                let body = make(i);
                let failure = match client.post("/api/v1/events/flux", &[], &body).await {
                    Ok(r) if r.status == 200 => None,
                    Ok(r) => Some(format!("{} {}", r.status, String::from_utf8_lossy(&r.body))),
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = failure
                    && errors.fetch_add(1, Ordering::Relaxed) < 5
                {
                    eprintln!("event {i} failed: {why}");
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Rate {
        events: total,
        per_second: total as f64 / start.elapsed().as_secs_f64(),
        errors: errors.load(Ordering::Relaxed),
    }
}

/// A query's latency: its first load, then the median of five more (ms).
struct Timing {
    first: f64,
    median: f64,
    bytes: usize,
}

async fn timed(addr: SocketAddr, path: &str) -> Timing {
    let mut client = Client::new(addr);
    // Connect first, so that the first load measures the answer, not the handshake.
    client.get("/healthz", &[]).await.unwrap();
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..6 {
        let start = Instant::now();
        let r = client.get(path, &[]).await.unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
        bytes = r.body.len();
    }
    let first = times[0];
    let mut rest = times[1..].to_vec();
    rest.sort_by(|a, b| a.total_cmp(b));
    Timing {
        first,
        median: rest[rest.len() / 2],
        bytes,
    }
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds (user + system) `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces); utime and stime are the
    // 14th and 15th fields overall.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The 1-minute load average.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_owned()
}

/// Cleans up what the run created, also when it panics.
struct Cleanup {
    hub: Option<std::process::Child>,
    dir: Option<PathBuf>,
    postgres: Option<(String, String)>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut hub) = self.hub.take() {
            let _ = hub.kill();
            let _ = hub.wait();
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        if let Some((base, name)) = self.postgres.take() {
            // A runtime of its own: this may run while the bench's runtime unwinds.
            let dropped = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(drop_database(&base, &name))
            })
            .join();
            match dropped {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("could not drop the bench database: {e}"),
                Err(_) => eprintln!("could not drop the bench database"),
            }
        }
    }
}

/// Drops the bench's database once the hub is gone. Not `WITH (FORCE)`: that must be allowed
/// to terminate every session on it, and the server's own autovacuum workers (busy on a
/// freshly written database) are not the bench role's to terminate, so it failed ("must be a
/// member of the role whose process is being terminated"); a plain drop cancels them itself.
/// Sessions of the bench's own role still on it (the killed hub's, if the server has not seen
/// them close yet) are terminated first, and the drop is retried meanwhile.
async fn drop_database(base: &str, name: &str) -> Result<(), sqlx::Error> {
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(base).await?;
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        sqlx::query(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = $1 AND usename = current_user AND pid <> pg_backend_pid()",
        )
        .bind(name)
        .fetch_one(&mut conn)
        .await?;
        match sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
            .execute(&mut conn)
            .await
        {
            Err(e) if attempt < 30 => {
                if attempt == 1 {
                    eprintln!("dropping the bench database: {e}; retrying");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            other => break other.map(|_| ()),
        }
    };
    conn.close().await?;
    result
}

async fn drive(args: &[String]) {
    let clusters: usize = arg(args, "--clusters").map_or(100_000, |s| s.parse().unwrap());
    let updates: usize = arg(args, "--updates").map_or(clusters / 2, |s| s.parse().unwrap());
    let connections: usize = arg(args, "--connections").map_or(32, |s| s.parse().unwrap());
    let keep = args.iter().any(|a| a == "--keep");
    let writers: usize = arg(args, "--writers").map_or(0, |s| s.parse().unwrap());
    let mut cleanup = Cleanup {
        hub: None,
        dir: None,
        postgres: None,
    };
    let database = match arg(args, "--database") {
        Some(url) => url,
        None if args.iter().any(|a| a == "--postgres") => {
            let base = std::env::var("KALYPSO_TEST_POSTGRES_URL").expect("KALYPSO_TEST_POSTGRES_URL");
            let name = format!("kalypso_hub_bench_{}", std::process::id());
            postgres_admin(&base, &format!("CREATE DATABASE {name}")).await;
            let url =
                kalypso_hub::db::with_database(&base, &name).expect("KALYPSO_TEST_POSTGRES_URL is a URL");
            if !keep {
                cleanup.postgres = Some((base, name));
            }
            url
        }
        None => {
            let parent = arg(args, "--dir").map_or_else(std::env::temp_dir, PathBuf::from);
            let dir = parent.join(format!("kalypso-hub-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let url = format!("sqlite://{}", dir.join("hub.db").display());
            if !keep {
                cleanup.dir = Some(dir);
            }
            url
        }
    };
    let backend = if database.starts_with("sqlite") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    let db = Db::connect(&database, &DbOptions::default()).await.unwrap();
    seed(&db).await;
    db.close().await;

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["serve", &database, &writers.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line.trim().parse().unwrap();
    let pid = child.id();
    cleanup.hub = Some(child);
    let small = (clusters / 100).max(1);
    println!(
        "{backend}: {clusters} clusters in dev ({small} in stage and prod each), {CLUSTER_TYPES} cluster types; \
         {connections} connections; load average {}",
        load_average()
    );

    // Registration: every cluster's first event (compliant at the environment's head, c1 for
    // dev), stage's and prod's few first.
    let cpu = cpu_seconds(pid);
    let total = clusters + 2 * small;
    let registration = blast(
        addr,
        connections,
        total,
        Arc::new(move |i| {
            if i < 2 * small {
                let env = 1 + i / small;
                event(env, i % small, HISTORY[env] - 1, Kind::Compliant, 0)
            } else {
                event(0, i - 2 * small, 1, Kind::Compliant, 0)
            }
        }),
    )
    .await;
    let used = cpu_seconds(pid) - cpu;
    let registration_load = load_average();
    println!(
        "registration: {} events, {:.0} events/s, {} errors; hub CPU {:.0} us/event; load average {registration_load}",
        registration.events,
        registration.per_second,
        registration.errors,
        used * 1e6 / total as f64
    );
    let mut client = Client::new(addr);
    let listed = client
        .get("/api/v1/clusters?environment=dev&limit=1", &[])
        .await
        .unwrap()
        .json()["total"]
        .as_u64()
        .unwrap_or_default();
    println!(
        "registered in dev: {listed} of {clusters}{}",
        if listed == clusters as u64 {
            ""
        } else {
            " (MISSING CLUSTERS)"
        }
    );

    // Updates: cluster k goes progressing, then compliant (failed: one in fifty) at c2.
    let cpu = cpu_seconds(pid);
    let update = blast(
        addr,
        connections,
        updates,
        Arc::new(move |i| {
            let cluster = (i / 2) % clusters;
            let kind = match i % 2 {
                0 => Kind::Progressing,
                _ if cluster.is_multiple_of(50) => Kind::Failed,
                _ => Kind::Compliant,
            };
            event(0, cluster, 2, kind, 60_000 + i as i64)
        }),
    )
    .await;
    let used = cpu_seconds(pid) - cpu;
    let update_load = load_average();
    println!(
        "updates: {} events, {:.0} events/s, {} errors; hub CPU {:.0} us/event; load average {update_load}",
        update.events,
        update.per_second,
        update.errors,
        used * 1e6 / updates.max(1) as f64
    );

    let wave = |types: usize| {
        let names: Vec<String> = (0..types).map(|t| format!("type-{t:03}")).collect();
        format!(
            "/api/v1/environments/dev/waves?commit={}&clusterTypes={}",
            sha(0, 2),
            names.join(",")
        )
    };
    // The gate as `kalypso check-promote` and `promote --from` ask it: the verdict, the counts
    // and the first 100 clusters that block it (the CLI's `GATE_LISTED`).
    let queries = [
        (
            "gate by GitOps commit (dev), as check-promote asks",
            format!("/api/v1/environments/dev/gate?commit={}&limit=100", sha(0, 2)),
        ),
        (
            "gate by control-plane commit (dev), as check-promote asks",
            format!("/api/v1/environments/dev/gate?commit={}&limit=100", promoted(2)),
        ),
        (
            "environment status API (dev)",
            "/api/v1/environments/dev".to_owned(),
        ),
        ("fleet map (/)", "/".to_owned()),
        ("promotions page", "/promotions".to_owned()),
        (
            "environment page (/?environment=dev)",
            "/?environment=dev".to_owned(),
        ),
        (
            "cluster-type page (dev/type-001)",
            "/environments/dev/cluster-types/type-001".to_owned(),
        ),
        (
            "cluster page",
            "/environments/dev/clusters/cluster-0000050".to_owned(),
        ),
        (
            "cluster list API (compliant, offset 5000)",
            "/api/v1/clusters?environment=dev&state=compliant&limit=100&offset=5000".to_owned(),
        ),
        ("rollout wave gate, 10 cluster types (dev)", wave(10)),
        (
            "rollout wave gate, all 100 cluster types (dev)",
            wave(CLUSTER_TYPES),
        ),
        (
            "gate by GitOps commit (dev), default list of 1000 clusters",
            format!("/api/v1/environments/dev/gate?commit={}", sha(0, 2)),
        ),
    ];
    let mut timings = Vec::new();
    for (label, path) in &queries {
        let t = timed(addr, path).await;
        println!(
            "{label}: first load {:.1} ms, then median {:.1} ms ({} bytes)",
            t.first, t.median, t.bytes
        );
        timings.push(t);
    }
    let query_load = load_average();
    let peak = rss_kib(pid, "VmHWM:") / 1024;
    println!(
        "hub RSS: {} MiB now, {peak} MiB peak; load average {query_load}",
        rss_kib(pid, "VmRSS:") / 1024
    );
    println!();
    println!(
        "| backend | clusters | registration | updates | gate (GitOps / control-plane commit) | environment status | fleet map | promotions | environment page | cluster-type page | hub peak RSS | load average (registration / updates / queries) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let ms = |t: &Timing| format!("{:.0} ms", t.first);
    let gate_ms = |t: &Timing| format!("{:.1} ms (first {:.0})", t.median, t.first);
    println!(
        "| {backend} | {clusters} | {:.0} events/s, {} errors | {:.0} events/s, {} errors | {} / {} | {} | {} | {} | {} | {} | {peak} MiB | {registration_load} / {update_load} / {query_load} |",
        registration.per_second,
        registration.errors,
        update.per_second,
        update.errors,
        gate_ms(&timings[0]),
        gate_ms(&timings[1]),
        ms(&timings[2]),
        ms(&timings[3]),
        ms(&timings[4]),
        ms(&timings[5]),
        ms(&timings[6]),
    );
    drop(cleanup);
}
