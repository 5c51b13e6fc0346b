//! A progressive rollout seen from the hub (issue 28 item 5), end to end as users meet it: the
//! bundled example as local git repositories (examples/local-repos.sh) with a RolloutPolicy on
//! `dev` (canary: the `small` cluster type; rest: every other), `kalypso hub` as a child
//! process reading that control plane, `kalypso sync --hub` delivering the waves, and a
//! simulated fleet (kalypso-testkit's `fleet`) posting the Flux events of the commits its
//! clusters apply. The hub's `GET /api/v1/environments/dev/rollout` is checked over HTTP at
//! every step (waves, cluster types with their labels, counts, soak, what blocks), on SQLite
//! and, when `KALYPSO_TEST_POSTGRES_URL` names a server, on PostgreSQL; then headless Chromium
//! checks the dashboard's rollout page (live) and the cluster-type page's labels and platform
//! config with their ConfigMaps.
#![allow(clippy::unwrap_used, clippy::too_many_lines)]

mod common;

use std::time::{Duration, Instant};

use common::rollout::{Setup, git};
use kalypso_testkit::fleet::{Fleet, Rule};
use serde_json::Value;

/// The hub's API token.
const TOKEN: &str = "rollout-view-token";

/// The canary's soak: long enough to be seen soaking, short enough to wait for.
const SOAK: Duration = Duration::from_secs(8);
/// The message the failing canary cluster reports.
const FAILURE: &str = "Deployment/agent dry-run failed: field is immutable";

fn policy() -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: RolloutPolicy\nmetadata:\n  name: rings\nspec:\n  waves:\n  \
         - name: canary\n    clusterTypeSelector:\n      labelSelector:\n        matchLabels: {{size: small}}\n    \
         minSuccessTime: {}s\n  - name: rest\n    clusterTypeSelector:\n      labelSelector: {{}}\n  \
         maxFailures: 0\n  progressDeadline: 10m\n  onFailure: Halt\n",
        SOAK.as_secs()
    )
}

/// A fresh database on the PostgreSQL server at `base`.
fn fresh_postgres(base: &str) -> String {
    use sqlx::Connection;
    let name = format!(
        "kalypso_rollout_view_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        sqlx::any::install_default_drivers();
        let mut conn = sqlx::AnyConnection::connect(base).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    });
    let (head, tail) = base.split_once("://").unwrap();
    let (authority, query) = match tail.split_once('?') {
        Some((a, q)) => (a, format!("?{q}")),
        None => (tail, String::new()),
    };
    let host = authority.split('/').next().unwrap();
    format!("{head}://{host}/{name}{query}")
}

/// The example with the rings policy, and the hub on `database` (`None`: SQLite) with an API
/// token and the dashboard public.
fn start(database: Option<String>) -> Setup {
    Setup::new(&policy(), database, Some(TOKEN), &["--dashboard-public"])
}

impl Setup {
    /// `GET path` with the API token; the status and the body as JSON.
    fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut request = ureq::get(&format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.header("authorization", &format!("Bearer {token}"));
        }
        let mut response = request
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// The rollout view once the hub has read the head of dev and `ready` holds for it.
    fn rollout_when(&self, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let head = self.head();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (status, view) = self.get("/api/v1/environments/dev/rollout", Some(TOKEN));
            assert_eq!(status, 200, "{view}");
            if view["gitopsCommit"] == head.as_str() && ready(&view) {
                return view;
            }
            assert!(
                Instant::now() < deadline,
                "the rollout view never showed {what}: {view:#}\n--- hub\n{}",
                self.hub_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Changes dev's ConfigMap value ENVIRONMENT to `value` on the control plane.
    fn change(&self, value: &str) {
        let clone = self.work.join("dev-clone");
        git(&clone, &["pull", "-q", "--rebase", "origin", "dev"]);
        let path = clone.join("configs/dev-config.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let changed: String = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("ENVIRONMENT:") {
                    format!("  ENVIRONMENT: {value}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&path, changed).unwrap();
        git(
            &clone,
            &["commit", "-q", "-am", &format!("ENVIRONMENT is {value}")],
        );
        git(&clone, &["push", "-q", "origin", "dev"]);
    }

    /// Rolls the first change (everything) out to every wave.
    fn roll_out_everything(&self, fleet: &Fleet) {
        self.sync_ok();
        fleet.apply_head();
        std::thread::sleep(SOAK);
        self.sync_ok();
        fleet.apply_head();
        self.sync_ok();
        self.rollout_when("the first rollout complete", |v| {
            v["rollout"]["status"] == "complete"
        });
    }

    /// `POST path` of `body` with the API token, which must succeed.
    fn post(&self, path: &str, body: &Value) {
        let response = ureq::post(&format!("{}{path}", self.url))
            .header("authorization", &format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
            .unwrap();
        assert!(response.status().is_success(), "{path}");
    }
}

/// Headless Chromium looking at the hub's dashboard, driven from the test's thread.
struct Watcher {
    runtime: tokio::runtime::Runtime,
    browser: kalypso_testkit::browser::Browser,
}

impl Watcher {
    /// `None` without Chromium (said once; a failure where services are required).
    fn start(setup: &Setup) -> Option<Watcher> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let browser = runtime.block_on(kalypso_testkit::browser::Browser::start(
            &setup.url,
            "the rollout view's browser tests",
        ))?;
        Some(Watcher { runtime, browser })
    }

    fn goto(&self, path: &str) {
        self.runtime.block_on(self.browser.goto(path));
    }

    fn text(&self, css: &str) -> String {
        self.runtime.block_on(self.browser.text(css))
    }

    fn js(&self, script: &str) -> Value {
        self.runtime.block_on(self.browser.js(script))
    }

    fn screenshot(&self, name: &str) {
        self.runtime.block_on(self.browser.screenshot(name));
    }

    /// Waits until the text of `css` holds `wanted` (the page updating itself).
    fn wait_for(&self, css: &str, wanted: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text(css);
            if text.contains(wanted) {
                return text;
            }
            assert!(Instant::now() < deadline, "{css} never showed {wanted:?}: {text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The wave named `name` of a rollout view.
fn wave<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["rollout"]["waves"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("no wave {name} in {view:#}"))
}

fn kinds(view: &Value) -> Vec<String> {
    view["rollout"]["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// A rollout seen through the API: canary delivered, its clusters behind, one failing, a
/// freeze, the soak, the rest, complete.
fn rollout_is_seen(setup: &Setup, watcher: Option<&Watcher>) {
    // Authenticated like every read.
    let (status, _) = setup.get("/api/v1/environments/dev/rollout", None);
    assert_eq!(status, 401);
    let (status, _) = setup.get("/api/v1/environments/nowhere/rollout", Some(TOKEN));
    assert_eq!(status, 404);

    let fleet = setup.fleet();
    setup.roll_out_everything(&fleet);
    let before = setup.head();
    // A ConfigMap change: the next sync delivers it to the canary wave only.
    setup.change("Dev2");
    setup.sync_ok();
    let view = setup.rollout_when("the canary delivered", |v| v["rollout"]["delivered"] == 1);
    let rollout = &view["rollout"];
    assert_eq!(rollout["status"], "progressing", "{view:#}");
    assert_eq!(rollout["policy"], "rings");
    assert_eq!(rollout["waveCommit"], setup.head().as_str());
    assert_eq!(
        (rollout["maxFailures"].clone(), rollout["onFailure"].clone()),
        ("0".into(), "Halt".into())
    );
    assert_eq!(rollout["progressDeadlineMs"], 600_000);
    let canary = wave(&view, "canary");
    let rest = wave(&view, "rest");
    assert_eq!(canary["minSuccessMs"], SOAK.as_millis() as u64);
    // The waves select by labels: the hub shows them, read from the control plane.
    let small = &canary["clusterTypes"][0];
    assert_eq!(small["name"], "small", "{view:#}");
    assert_eq!(small["labels"]["size"], "small", "{view:#}");
    assert_eq!(small["labels"]["region"], "west-us");
    assert!(view["labelsUnavailable"].is_null(), "{view:#}");
    let rest_types: Vec<&str> = rest["clusterTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        rest_types.contains(&"large") && !rest_types.contains(&"small"),
        "{rest_types:?}"
    );
    assert_eq!(rest["status"], "waiting");

    // The canary's clusters still run the commit before: they are waited for, never
    // compliant; the others apply the new commit (their folders did not change).
    let first = setup.head();
    assert_ne!(before, first);
    fleet.apply(&first, |c| c.cluster_type != "small");
    let view = setup.rollout_when("the canary's clusters waited for", |v| {
        wave(v, "canary")["clusters"]["registered"] == 2
    });
    let canary = wave(&view, "canary");
    assert_eq!(canary["clusters"]["compliant"], 0, "{view:#}");
    assert_eq!(canary["clusters"]["waiting"], 2, "{view:#}");
    assert_eq!(canary["status"], "progressing");
    // Clusters of the rest are registered, and wait for their wave.
    assert_eq!(wave(&view, "rest")["clusters"]["waiting"], 3, "{view:#}");
    assert_eq!(kinds(&view), ["waiting"], "{view:#}");
    assert!(
        view["rollout"]["next"].as_str().unwrap().contains("waits"),
        "{view:#}"
    );
    if let Some(w) = watcher {
        // The dashboard's rollout page: the waves, their cluster types and labels.
        w.goto("/environments/dev/rollout");
        let waves = w.text("ol.waves");
        assert!(waves.contains("canary") && waves.contains("rest"), "{waves}");
        assert!(waves.contains("size=small"), "{waves}");
        assert!(w.text(".rollout-blockers").contains("not yet compliant"));
        w.js("window.__kalypsoNotReloaded = 1; return null;");
    }

    // One canary cluster fails: what blocks names it with Flux's message.
    let failing = fleet
        .clone()
        .failing(Rule::Cluster("small-1".to_owned(), FAILURE.to_owned()));
    failing.apply(&first, |c| c.cluster_type == "small");
    let view = setup.rollout_when("the failed canary cluster", |v| {
        wave(v, "canary")["clusters"]["failed"] == 1
    });
    let canary = wave(&view, "canary");
    assert_eq!(canary["status"], "failed", "{view:#}");
    assert_eq!(canary["clusterTypes"][0]["failed"][0]["message"], FAILURE);
    assert_eq!(kinds(&view), ["failed"], "{view:#}");
    let blocker = &view["rollout"]["blockers"][0];
    assert_eq!(blocker["clusters"][0]["name"], "small-1");
    assert_eq!(blocker["clusters"][0]["message"], FAILURE);
    assert!(
        blocker["summary"]
            .as_str()
            .unwrap()
            .contains("1 failed cluster(s), 0 allowed")
    );
    assert!(
        view["rollout"]["next"]
            .as_str()
            .unwrap()
            .contains("halts the rollout"),
        "{view:#}"
    );
    if let Some(w) = watcher {
        // The open page shows the failure by itself, without a reload.
        let blockers = w.wait_for(".rollout-blockers", FAILURE);
        assert!(blockers.contains("small-1"), "{blockers}");
        assert_eq!(w.js("return window.__kalypsoNotReloaded || 0;"), 1);
        w.screenshot("rollout-view-failed");
        // The cluster-type page: labels and platform config with their ConfigMaps, from the
        // control plane.
        w.goto("/environments/dev/cluster-types/small");
        let labels = w.text("ul.labels");
        assert!(
            labels.contains("size=small") && labels.contains("region=west-us"),
            "{labels}"
        );
        let config = w.text("table.config");
        assert!(
            config.contains("CLUSTER_NAME") && config.contains("small-config"),
            "{config}"
        );
        assert!(
            config.contains("REGION") && config.contains("west-us-config"),
            "{config}"
        );
        w.screenshot("rollout-view-cluster-type");
    }

    // Fixed and frozen: the canary soaks, and the freeze is said to block.
    setup.post(
        "/api/v1/freezes",
        &serde_json::json!({"environment": "dev", "reason": "incident 42"}),
    );
    fleet.apply(&first, |c| c.cluster_type == "small");
    let view = setup.rollout_when("the canary soaking, frozen", |v| {
        wave(v, "canary")["clusters"]["compliant"] == 2
    });
    let canary = wave(&view, "canary");
    let left = canary["soakRemainingMs"].as_u64();
    if let Some(left) = left {
        assert!(left <= SOAK.as_millis() as u64, "{view:#}");
        assert_eq!(canary["status"], "soaking");
        assert_eq!(kinds(&view), ["soak", "freeze"], "{view:#}");
    } else {
        // A slow machine: the soak is over already.
        assert_eq!(kinds(&view), ["freeze"], "{view:#}");
    }
    let freeze = view["rollout"]["blockers"].as_array().unwrap().last().unwrap();
    assert!(
        freeze["summary"].as_str().unwrap().contains("incident 42"),
        "{view:#}"
    );
    assert_eq!(view["freezes"].as_array().unwrap().len(), 1);

    // Soaked and unfrozen: nothing blocks, the next sync delivers the rest.
    std::thread::sleep(SOAK);
    setup.post(
        "/api/v1/unfreezes",
        &serde_json::json!({"environment": "dev", "reason": "resolved"}),
    );
    let view = setup.rollout_when("the soak over", |v| wave(v, "canary")["status"] == "done");
    assert_eq!(kinds(&view), Vec::<String>::new(), "{view:#}");
    assert_eq!(
        view["rollout"]["next"], "the next sync delivers wave 2/2 (rest)",
        "{view:#}"
    );
    setup.sync_ok();
    let view = setup.rollout_when("the rest delivered", |v| v["rollout"]["delivered"] == 2);
    assert_eq!(wave(&view, "rest")["status"], "progressing", "{view:#}");
    fleet.apply_head();
    let view = setup.rollout_when("the rest compliant", |v| wave(v, "rest")["status"] == "done");
    assert_eq!(
        view["rollout"]["next"], "the next sync marks the rollout complete",
        "{view:#}"
    );
    setup.sync_ok();
    let view = setup.rollout_when("the rollout complete", |v| v["rollout"]["status"] == "complete");
    assert_eq!(kinds(&view), Vec::<String>::new(), "{view:#}");
    assert_eq!(wave(&view, "canary")["clusters"]["compliant"], 2);
}

#[test]
fn the_hub_shows_a_rollout_on_sqlite_and_postgres() {
    let setup = start(None);
    let watcher = Watcher::start(&setup);
    rollout_is_seen(&setup, watcher.as_ref());
    if let Some(w) = watcher {
        w.runtime.block_on(w.browser.close());
    }
    drop(setup);
    if let Some(base) = kalypso_testkit::postgres_url("the rollout view on PostgreSQL") {
        let setup = start(Some(fresh_postgres(&base)));
        rollout_is_seen(&setup, None);
    }
}
