//! The hub's benchmark (not a test): registers `--clusters` clusters in each of three
//! environments through the Flux endpoint, then measures sustained ingest, the gate's and the
//! environment status's latency, the fleet dashboard's pages (served by the hub from its
//! database), and the hub's memory. The hub runs in a child process (this
//! binary with `serve`), so that its RSS is its own.
//!
//! ```text
//! cargo run --release -p kalypso-hub --bin kalypso-hub-bench -- [--clusters 100000] [--events 100000]
//!     [--connections 64] [--database sqlite://PATH | postgres://...]
//! ```
//!
//! Without `--database`, a SQLite file in a temporary folder; with `KALYPSO_TEST_POSTGRES_URL`
//! set and `--postgres`, a fresh PostgreSQL database on that server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::net::SocketAddr;
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
const CLUSTER_TYPES: usize = 100;
const TARGETS_PER_TYPE: usize = 5;

fn sha(env: usize, n: usize) -> String {
    format!("{:040x}", (env as u128 + 1) * 1_000_000 + n as u128)
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
        runtime.block_on(serve(&args[2]));
    } else {
        runtime.block_on(drive(&args));
    }
}

async fn serve(database: &str) {
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let mut config = HubConfig::new(database);
    config.stale_after = Duration::from_secs(3600);
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    let app = kalypso_hub::dashboard::app(
        state,
        kalypso_hub::DashboardMode::Public,
        kalypso_dashboard::Options::default(),
    );
    axum::serve(listener, app).await.unwrap();
}

async fn fresh_postgres(base: &str) -> String {
    sqlx::any::install_default_drivers();
    let name = format!("kalypso_hub_bench_{}", std::process::id());
    let mut conn = sqlx::AnyConnection::connect(base).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let (head, tail) = base.split_once("://").unwrap();
    let host = tail.split('/').next().unwrap();
    format!("{head}://{host}/{name}")
}

/// Three GitOps commits per environment, 100 cluster types of 5 deployment targets each.
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
        for n in 0..3 {
            sqlx::query(
                "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(*env)
            .bind(sha(e, n))
            .bind(if n == 0 { None } else { Some(sha(e, n - 1)) })
            .bind(n as i64)
            .bind(1_700_000_000_000i64 + n as i64 * 60_000)
            .bind(format!("{:040x}", 9_000_000 + n))
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

fn event(env: usize, cluster: usize, commit: &str, reason: &str, second: u64) -> Vec<u8> {
    let (severity, state_reason) = match reason {
        "failed" => ("error", "HealthCheckFailed"),
        "progressing" => ("info", "Progressing"),
        _ => ("info", "ReconciliationSucceeded"),
    };
    let time = kalypso_hub::model::format_time(1_764_000_000_000 + second as i64 * 1000);
    // Formatted directly: the load generator shares the cores with the hub.
    format!(
        r#"{{"involvedObject":{{"kind":"Kustomization","namespace":"flux-system","name":"platform","uid":"5c2d4d4a-7c0e-4e3b-9a37-0d7f0b1f8a11","apiVersion":"kustomize.toolkit.fluxcd.io/v1"}},"severity":"{severity}","timestamp":"{time}","message":"Applied revision","reason":"{state_reason}","metadata":{{"revision":"{env_name}@sha1:{commit}","cluster":"cluster-{cluster:06}","clusterType":"type-{ct:03}","environment":"{env_name}"}},"reportingController":"kustomize-controller"}}"#,
        env_name = ENVIRONMENTS[env],
        ct = cluster % CLUSTER_TYPES,
    )
    .into_bytes()
}

/// Sends `total` events from `connections` connections; `make(i)` builds event `i`.
async fn blast(
    addr: SocketAddr,
    connections: usize,
    total: usize,
    make: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
) -> f64 {
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let next = next.clone();
        let failures = failures.clone();
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::new(addr);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    break;
                }
                let body = make(i);
                let r = client.post("/api/v1/events/flux", &[], &body).await.unwrap();
                if r.status != 200 && failures.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("first failure: {} {}", r.status, String::from_utf8_lossy(&r.body));
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(failures.load(Ordering::Relaxed), 0, "every event stored");
    total as f64 / elapsed
}

async fn latency(addr: SocketAddr, path: &str, runs: usize) -> (f64, f64, usize) {
    let mut client = Client::new(addr);
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let r = client.get(path, &[]).await.unwrap();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(r.status, 200, "{path}: {}", String::from_utf8_lossy(&r.body));
        size = r.body.len();
    }
    times.sort_by(|a, b| a.total_cmp(b));
    (times[runs / 2], times[(runs * 95 / 100).min(runs - 1)], size)
}

/// CPU seconds (user + system) `pid` has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is the 3rd field overall.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
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

async fn drive(args: &[String]) {
    let clusters: usize = arg(args, "--clusters").map_or(100_000, |s| s.parse().unwrap());
    let events: usize = arg(args, "--events").map_or(100_000, |s| s.parse().unwrap());
    let connections: usize = arg(args, "--connections").map_or(64, |s| s.parse().unwrap());
    let tmp = std::env::temp_dir().join(format!("kalypso-hub-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let database = match arg(args, "--database") {
        Some(url) => url,
        None if args.iter().any(|a| a == "--postgres") => {
            let base = std::env::var("KALYPSO_TEST_POSTGRES_URL").expect("KALYPSO_TEST_POSTGRES_URL");
            fresh_postgres(&base).await
        }
        None => format!("sqlite://{}", tmp.join("bench.db").display()),
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
        .args(["serve", &database])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line.trim().parse().unwrap();
    let pid = child.id();
    println!(
        "backend: {backend}; {clusters} clusters x {} environments; {connections} connections",
        ENVIRONMENTS.len()
    );

    // Registration: every cluster reports compliant at the first commit.
    let n = clusters;
    let cpu = cpu_seconds(pid);
    let rate = blast(
        addr,
        connections,
        n * ENVIRONMENTS.len(),
        Arc::new(move |i| {
            let (env, cluster) = (i / n, i % n);
            event(env, cluster, &sha(env, 0), "compliant", 1)
        }),
    )
    .await;
    let used = cpu_seconds(pid) - cpu;
    println!(
        "register {} clusters: {rate:.0} events/s; hub CPU {:.0} us/event ({:.0} events per CPU-second)",
        n * ENVIRONMENTS.len(),
        used * 1e6 / (n * ENVIRONMENTS.len()) as f64,
        (n * ENVIRONMENTS.len()) as f64 / used
    );
    let cpu = cpu_seconds(pid);

    // Sustained ingest: state changes (progressing, then compliant or failed at the second
    // commit) spread over every cluster of `dev`.
    let rate = blast(
        addr,
        connections,
        events,
        Arc::new(move |i| {
            let cluster = i % n;
            let round = i / n;
            let kind = match round % 3 {
                0 => "progressing",
                1 if cluster.is_multiple_of(50) => "failed",
                _ => "compliant",
            };
            event(0, cluster, &sha(0, 1 + (round / 3) % 2), kind, 10 + i as u64)
        }),
    )
    .await;
    let used = cpu_seconds(pid) - cpu;
    println!(
        "sustained ingest: {rate:.0} events/s ({events} events); hub CPU {:.0} us/event ({:.0} events per CPU-second)",
        used * 1e6 / events as f64,
        events as f64 / used
    );
    println!(
        "load average during the run: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );

    let gate = format!("/api/v1/environments/dev/gate?commit={}", sha(0, 1));
    let (median, p95, size) = latency(addr, &gate, 20).await;
    println!("gate (dev, {n} clusters): median {median:.1} ms, p95 {p95:.1} ms ({size} bytes)");
    let gate_cp = format!("/api/v1/environments/stage/gate?commit={:040x}", 9_000_000);
    let (median, p95, _) = latency(addr, &gate_cp, 20).await;
    println!("gate by control-plane commit (stage): median {median:.1} ms, p95 {p95:.1} ms");
    let (median, p95, size) = latency(addr, "/api/v1/environments/dev", 20).await;
    println!("environment status (dev): median {median:.1} ms, p95 {p95:.1} ms ({size} bytes)");
    let (median, p95, _) = latency(
        addr,
        "/api/v1/clusters?environment=prod&state=compliant&limit=100&offset=5000",
        20,
    )
    .await;
    println!("cluster list page: median {median:.1} ms, p95 {p95:.1} ms");
    for (label, path) in [
        ("dashboard fleet map (/)", "/".to_owned()),
        (
            "dashboard fleet map, page 2, failed only",
            "/?state=failed&page=2&size=20".to_owned(),
        ),
        ("dashboard fleet map, prod only", "/?environment=prod".to_owned()),
        ("dashboard promotions", "/promotions".to_owned()),
        (
            "dashboard cluster type (dev/type-001, failed first)",
            "/environments/dev/cluster-types/type-001".to_owned(),
        ),
        (
            "dashboard cluster page",
            "/environments/dev/clusters/cluster-000050".to_owned(),
        ),
        ("dashboard workload", "/workloads/workload-1".to_owned()),
    ] {
        let (median, p95, size) = latency(addr, &path, 20).await;
        println!("{label}: median {median:.1} ms, p95 {p95:.1} ms ({size} bytes)");
    }
    println!(
        "hub RSS: {} MiB now, {} MiB peak",
        rss_kib(pid, "VmRSS:") / 1024,
        rss_kib(pid, "VmHWM:") / 1024
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&tmp);
}
