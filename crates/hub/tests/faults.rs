//! The hub under faults, over real HTTP on 127.0.0.1: the database goes away (a private
//! PostgreSQL server stopped and started mid-ingest) or runs out of room (SQLite on a full
//! filesystem: a small tmpfs filled up). While the fault lasts, reports get 503 with
//! `Retry-After`; every report acknowledged (200) is stored; when the fault ends, the same hub
//! process stores reports again, without a restart.
//!
//! Both need root (to mount a tmpfs; to run PostgreSQL's own binaries as the `postgres` user):
//! without it they say so and skip, or fail with `KALYPSO_TEST_REQUIRE_SERVICES=1` (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kalypso_hub::client::{Client, Response};
use kalypso_hub::{DbOptions, HubConfig};
use serde_json::json;

const COMMIT: &str = "6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5";

/// A test that cannot run here: a failure when services are required, else one line.
fn unavailable(what: &str) {
    assert!(
        !kalypso_testkit::services_required(),
        "{what} (KALYPSO_TEST_REQUIRE_SERVICES is set)"
    );
    kalypso_testkit::skipped(what);
}

async fn start(database: &str) -> SocketAddr {
    let mut config = HubConfig::new(database);
    // A lost server is noticed within a second, not the default five.
    config.db_options = DbOptions {
        acquire_timeout: Duration::from_secs(1),
        busy_timeout: Duration::from_secs(1),
        ..DbOptions::default()
    };
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, kalypso_hub::app(state)).await });
    addr
}

/// A compliance report of cluster `name` (a long message, so that reports fill pages).
fn report(name: &str) -> Vec<u8> {
    json!({"cluster": name, "clusterType": "large", "environment": "dev", "commit": COMMIT,
        "state": "compliant", "message": "x".repeat(2000), "time": "2026-11-26T08:00:00Z"})
    .to_string()
    .into_bytes()
}

/// Posts cluster `name`'s report: whether it was acknowledged. Anything but 200 must be a
/// 503 with `Retry-After`.
async fn post(addr: SocketAddr, name: &str) -> bool {
    let response: Response = match Client::new(addr)
        .post("/api/v1/compliance", &[], &report(name))
        .await
    {
        Ok(r) => r,
        Err(e) => panic!("{name}: no answer: {e}"),
    };
    match response.status {
        200 => true,
        503 => {
            assert!(
                response.headers.iter().any(|(k, _)| k == "retry-after"),
                "{name}: 503 without Retry-After"
            );
            false
        }
        other => panic!("{name}: {other} {}", String::from_utf8_lossy(&response.body)),
    }
}

/// The names of the clusters the hub has.
async fn stored(addr: SocketAddr) -> BTreeSet<String> {
    let r = Client::new(addr)
        .get("/api/v1/clusters?limit=10000", &[])
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect()
}

fn run(command: &mut Command) -> bool {
    command.output().is_ok_and(|o| o.status.success())
}

// ---------------------------------------------------------------------------------------
// SQLite on a full disk

/// A tmpfs of `size` at `dir`, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn new(dir: &Path, size: &str) -> Option<Mount> {
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir))
        .then(|| Mount(dir.to_owned()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the filesystem of `dir` with `filler` until it has no room left.
fn fill(filler: &Path) {
    use std::io::Write;
    let mut file = std::fs::File::create(filler).unwrap();
    let block = vec![0u8; 4096];
    while file.write_all(&block).and_then(|()| file.flush()).is_ok() {}
    let _ = file.sync_all();
}

// SQLite keeps a transaction's fate to itself after SQLITE_FULL: the ingest writer never uses
// the connection of a failed batch again (crates/hub/src/ingest.rs, `store`), which this test
// found missing (the hub answered 200 to reports no other connection ever saw).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_answers_503_loses_nothing_acknowledged_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = Mount::new(dir.path(), "4m") else {
        unavailable("the hub's full-disk test (mounting a tmpfs needs root)");
        return;
    };
    let addr = start(&format!("sqlite://{}", dir.path().join("hub.db").display())).await;
    let mut acknowledged = BTreeSet::new();
    for i in 0..20 {
        let name = format!("before-{i:03}");
        assert!(post(addr, &name).await, "{name}: room left");
        acknowledged.insert(name);
    }

    let filler = dir.path().join("filler");
    fill(&filler);
    let mut refused = 0;
    for i in 0..300 {
        let name = format!("full-{i:03}");
        if post(addr, &name).await {
            acknowledged.insert(name);
        } else {
            refused += 1;
        }
    }
    assert!(refused > 0, "the disk never filled up");

    // Room again: the same process stores reports again.
    std::fs::remove_file(&filler).unwrap();
    for i in 0..20 {
        let name = format!("after-{i:03}");
        assert!(post(addr, &name).await, "{name}: the hub did not recover");
        acknowledged.insert(name);
    }
    let have = stored(addr).await;
    let lost: Vec<&String> = acknowledged.difference(&have).collect();
    assert!(lost.is_empty(), "acknowledged but not stored: {lost:?}");
}

// ---------------------------------------------------------------------------------------
// PostgreSQL stopped and started mid-ingest

const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A private PostgreSQL server in a temporary folder (never the shared one), run as the
/// `postgres` user; stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
}

impl Postgres {
    fn pg_ctl(&self, args: &[&str]) -> bool {
        let data = self.dir.path().join("data");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        run(Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{PG_BIN}/pg_ctl"), "-D"])
            .arg(&data)
            .args(["-o", &options, "-l"])
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "30"])
            .args(args))
    }

    fn new() -> Option<Postgres> {
        if !Path::new(PG_BIN).join("initdb").exists() {
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        if !run(Command::new("chown").args(["-R", "postgres"]).arg(dir.path())) {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let initdb = run(Command::new("runuser")
            .args([
                "-u",
                "postgres",
                "--",
                &format!("{PG_BIN}/initdb"),
                "-A",
                "trust",
                "-U",
                "kalypso",
                "-D",
            ])
            .arg(dir.path().join("data")));
        let pg = Postgres { dir, port };
        (initdb && pg.pg_ctl(&["start"])).then_some(pg)
    }

    fn url(&self) -> String {
        format!("postgres://kalypso@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_mid_ingest_answers_503_loses_nothing_acknowledged_and_recovers() {
    let Some(pg) = Postgres::new() else {
        unavailable(
            "the hub's PostgreSQL outage test (needs root, the postgres user and PostgreSQL 15's binaries)",
        );
        return;
    };
    let addr = start(&pg.url()).await;
    let mut acknowledged = BTreeSet::new();
    // Reports keep coming while the server stops and starts.
    let sender = tokio::spawn(async move {
        let mut acknowledged = BTreeSet::new();
        let mut refused = 0;
        for i in 0..400 {
            let name = format!("during-{i:03}");
            if post(addr, &name).await {
                acknowledged.insert(name);
            } else {
                refused += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        (acknowledged, refused)
    });
    for i in 0..10 {
        let name = format!("before-{i:03}");
        assert!(post(addr, &name).await);
        acknowledged.insert(name);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(pg.pg_ctl(&["-m", "fast", "stop"]), "stopping the private server");
    // Down: refused with 503.
    assert!(
        !post(addr, "while-down").await,
        "a report was acknowledged with the server down"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(pg.pg_ctl(&["start"]), "starting the private server again");
    let (during, refused) = sender.await.unwrap();
    assert!(refused > 0, "no report was refused while the server was down");
    acknowledged.extend(during);

    // Up again: the same process stores reports.
    let mut recovered = false;
    for _ in 0..50 {
        if post(addr, "after").await {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(recovered, "the hub did not recover without a restart");
    acknowledged.insert("after".to_owned());
    let have = stored(addr).await;
    let lost: Vec<&String> = acknowledged.difference(&have).collect();
    assert!(lost.is_empty(), "acknowledged but not stored: {lost:?}");
}
