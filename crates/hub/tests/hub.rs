//! The hub over real HTTP on 127.0.0.1 and real git repositories: ingestion, security and
//! bad input, the GitOps history, the correlation queries and the gate. Every scenario runs
//! on SQLite, and on PostgreSQL too when `KALYPSO_TEST_POSTGRES_URL` names a server (a fresh
//! database is created for each scenario).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kalypso_git::redact::Secret;
use kalypso_git::{AuthSettings, RetryPolicy};
use kalypso_hub::client::{Client, Response};
use kalypso_hub::{GitSettings, HubConfig, HubState};
use kalypso_testkit::{init_bare, write_files};
use serde_json::{Value, json};
use sqlx::Connection;

mod common;
use common::databases;

const FIXTURE_SHA: &str = "6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/flux")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// A Flux fixture for another cluster, commit, time.
fn flux(name: &str, cluster: &str, cluster_type: &str, commit: &str, time: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    v["metadata"]["cluster"] = cluster.into();
    v["metadata"]["clusterType"] = cluster_type.into();
    v["metadata"]["revision"] = format!("dev@sha1:{commit}").into();
    v["timestamp"] = time.into();
    serde_json::to_vec(&v).unwrap()
}

struct Hub {
    addr: SocketAddr,
    state: HubState,
}

impl Hub {
    fn client(&self) -> Client {
        Client::new(self.addr)
    }
}

async fn start(config: HubConfig) -> Hub {
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::app(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Hub { addr, state }
}

async fn post(c: &mut Client, path: &str, body: &[u8]) -> Response {
    c.post(path, &[], body).await.unwrap()
}

async fn get(c: &mut Client, path: &str) -> Value {
    let r = c.get(path, &[]).await.unwrap();
    assert_eq!(r.status, 200, "GET {path}: {}", String::from_utf8_lossy(&r.body));
    r.json()
}

// ---------------------------------------------------------------------------------------
// Ingestion

async fn ingest_scenario(url: &str) {
    let hub = start(HubConfig::new(url)).await;
    let mut c = hub.client();
    for name in [
        "gitrepository-artifact.json",
        "kustomization-progressing.json",
        "kustomization-succeeded.json",
        "kustomization-failed.json",
    ] {
        let r = post(&mut c, "/api/v1/events/flux", fixture(name).as_bytes()).await;
        assert_eq!(r.status, 200, "{name}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["result"], "stored", "{name}");
    }
    let list = get(&mut c, "/api/v1/clusters").await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["clusters"][0]["name"], "drone-1");
    assert_eq!(list["clusters"][0]["clusterType"], "drone");
    assert_eq!(list["clusters"][0]["environment"], "dev");
    // The hub does not know the commit: no platform state yet.
    assert_eq!(list["clusters"][0]["state"], "unknown");
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    let objects = detail["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[0]["object"], "GitRepository/flux-system/platform");
    assert_eq!(objects[0]["state"], "reconciling");
    assert_eq!(objects[1]["object"], "Kustomization/flux-system/platform");
    assert_eq!(objects[1]["state"], "failed");
    assert_eq!(objects[1]["commit"], FIXTURE_SHA);
    assert!(
        objects[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("health check failed")
    );
    assert_eq!(detail["history"]["total"], 4);
    let states: Vec<&str> = detail["history"]["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["failed", "compliant", "reconciling", "reconciling"]);
    // Paged.
    let page = get(&mut c, "/api/v1/clusters/dev/drone-1?limit=1&offset=1").await;
    assert_eq!(page["history"]["reports"].as_array().unwrap().len(), 1);
    assert_eq!(page["history"]["reports"][0]["state"], "compliant");

    // A generic report.
    let body = json!({"cluster": "argo-1", "clusterType": "large", "environment": "dev",
        "gitopsRepo": "https://github.com/contoso/kalypso-gitops", "branch": "dev",
        "commit": FIXTURE_SHA, "state": "compliant", "message": "Synced", "time": "2026-11-26T08:00:00Z"});
    let r = post(&mut c, "/api/v1/compliance", body.to_string().as_bytes()).await;
    assert_eq!(r.status, 200);
    let list = get(&mut c, "/api/v1/clusters?environment=dev&clusterType=large").await;
    assert_eq!(list["total"], 1);
    assert_eq!(list["clusters"][0]["name"], "argo-1");
    let list = get(&mut c, "/api/v1/clusters?limit=1&offset=1").await;
    assert_eq!(list["total"], 2);
    assert_eq!(list["clusters"][0]["name"], "drone-1");
    let r = c.get("/api/v1/clusters?state=bogus", &[]).await.unwrap();
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("state")));
    let r = c.get("/api/v1/clusters?limit=x", &[]).await.unwrap();
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("limit")));
    let r = c.get("/api/v1/clusters/dev/nope", &[]).await.unwrap();
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_flux_fixture_is_ingested() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "ingest").await {
        ingest_scenario(&url).await;
    }
}

async fn duplicates_scenario(url: &str) {
    let hub = start(HubConfig::new(url)).await;
    let mut c = hub.client();
    let body = fixture("kustomization-succeeded.json");
    assert_eq!(
        post(&mut c, "/api/v1/events/flux", body.as_bytes()).await.json()["result"],
        "stored"
    );
    for _ in 0..3 {
        let r = post(&mut c, "/api/v1/events/flux", body.as_bytes()).await;
        assert_eq!((r.status, r.json()["result"].clone()), (200, json!("duplicate")));
    }
    // A repeated success at a later time changes nothing but the time: no new history row.
    let later = flux(
        "kustomization-succeeded.json",
        "drone-1",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T08:10:00Z",
    );
    assert_eq!(
        post(&mut c, "/api/v1/events/flux", &later).await.json()["result"],
        "stored"
    );
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(detail["history"]["total"], 1);
    assert_eq!(detail["objects"][0]["time"], "2026-11-26T08:10:00.000Z");

    // An older failure never overwrites the latest state, but is kept in the history.
    let older = flux(
        "kustomization-failed.json",
        "drone-1",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T07:00:00Z",
    );
    let r = post(&mut c, "/api/v1/events/flux", &older).await;
    assert_eq!(r.json()["result"], "older");
    let r = post(&mut c, "/api/v1/events/flux", &older).await;
    assert_eq!(r.json()["result"], "older");
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(detail["objects"][0]["state"], "compliant");
    assert_eq!(detail["history"]["total"], 2);
    assert_eq!(detail["history"]["reports"][1]["state"], "failed");

    // Concurrent identical deliveries store one row.
    let body = flux(
        "kustomization-failed.json",
        "drone-1",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T09:00:00Z",
    );
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let addr = hub.addr;
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Client::new(addr);
            c.post("/api/v1/events/flux", &[], &body).await.unwrap().status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(detail["history"]["total"], 3);
    assert_eq!(detail["objects"][0]["state"], "failed");

    // Flux stamps events to the second: a different report of the same second arrived later
    // and wins (a failure fixed within the second); the same report again is a retry.
    let same_second = flux(
        "kustomization-succeeded.json",
        "drone-1",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T09:00:00Z",
    );
    let r = post(&mut c, "/api/v1/events/flux", &same_second).await;
    assert_eq!(r.json()["result"], "stored");
    let r = post(&mut c, "/api/v1/events/flux", &same_second).await;
    assert_eq!(r.json()["result"], "duplicate");
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(detail["objects"][0]["state"], "compliant");
    assert_eq!(detail["history"]["total"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_are_idempotent_and_older_events_do_not_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "dup").await {
        duplicates_scenario(&url).await;
    }
}

async fn bad_input_scenario(url: &str) {
    let hub = start(HubConfig::new(url)).await;
    let mut c = hub.client();
    let mut no_cluster: Value = serde_json::from_str(&fixture("kustomization-succeeded.json")).unwrap();
    no_cluster["metadata"].as_object_mut().unwrap().remove("cluster");
    let mut bad_revision: Value = serde_json::from_str(&fixture("kustomization-succeeded.json")).unwrap();
    bad_revision["metadata"]["revision"] = "dev@sha1:1234".into();
    let mut no_kind: Value = serde_json::from_str(&fixture("kustomization-succeeded.json")).unwrap();
    no_kind["involvedObject"].as_object_mut().unwrap().remove("kind");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("/api/v1/events/flux", serde_json::to_vec(&no_cluster).unwrap(), "metadata.cluster"),
        ("/api/v1/events/flux", serde_json::to_vec(&bad_revision).unwrap(), "metadata.revision"),
        ("/api/v1/events/flux", serde_json::to_vec(&no_kind).unwrap(), "involvedObject.kind"),
        ("/api/v1/events/flux", b"{\"involvedObject\": {".to_vec(), "body"),
        ("/api/v1/events/flux", b"[]".to_vec(), "body"),
        (
            "/api/v1/compliance",
            br#"{"cluster":"c","clusterType":"t","environment":"dev","commit":"xyz","state":"compliant"}"#.to_vec(),
            "commit",
        ),
        (
            "/api/v1/compliance",
            br#"{"clusterType":"t","environment":"dev","commit":"6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5","state":"compliant"}"#
                .to_vec(),
            "cluster",
        ),
    ];
    for (path, body, field) in cases {
        let r = post(&mut c, path, &body).await;
        assert_eq!(r.status, 400, "{field}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["field"], field, "{}", String::from_utf8_lossy(&r.body));
        assert!(r.json()["error"].as_str().unwrap().contains(field));
    }
    // Over 1 MiB.
    let mut big: Value = serde_json::from_str(&fixture("kustomization-succeeded.json")).unwrap();
    big["message"] = "x".repeat(1536 * 1024).into();
    let r = post(&mut c, "/api/v1/events/flux", &serde_json::to_vec(&big).unwrap()).await;
    assert_eq!(r.status, 413);
    let list = get(&mut c, "/api/v1/clusters").await;
    assert_eq!(list["total"], 0, "nothing stored");

    // NUL, which PostgreSQL's text cannot hold (found by schemathesis): a message keeps a
    // replacement character, a name with NUL names nothing, and neither is a 5xx.
    let mut nul: Value = serde_json::from_str(&fixture("kustomization-failed.json")).unwrap();
    nul["message"] = "health check failed\u{0}".into();
    nul["involvedObject"]["namespace"] = "flux\u{0}system".into();
    let r = post(&mut c, "/api/v1/events/flux", &serde_json::to_vec(&nul).unwrap()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let detail = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(detail["objects"][0]["message"], "health check failed\u{fffd}");
    assert_eq!(
        detail["objects"][0]["object"],
        "Kustomization/flux\u{fffd}system/platform"
    );
    assert_eq!(
        get(&mut c, "/api/v1/clusters?clusterType=a%00b").await["total"],
        0
    );
    for path in ["/api/v1/clusters/dev/a%00", "/api/v1/environments/d%00"] {
        assert_eq!(c.get(path, &[]).await.unwrap().status, 404, "{path}");
    }
    let g = get(&mut c, "/api/v1/environments/d%00/gate?commit=abcd").await;
    assert_eq!(g["verdict"], "unknown-commit");
    // The environment to promote into is a name: a control character is refused, even for a
    // commit the hub does not know (found by schemathesis: `into=%0D` was trimmed away).
    for into in ["%0D", "st%00age"] {
        let r = c
            .get(
                &format!("/api/v1/environments/dev/gate?commit=abcd&into={into}"),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(r.status, 400, "{into}");
        assert_eq!(r.json()["field"], "into", "{into}");
    }
    assert_eq!(
        get(&mut c, "/api/v1/workloads/w%00").await["placements"],
        json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_naming_the_field_and_nothing_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "bad").await {
        bad_input_scenario(&url).await;
    }
}

async fn security_scenario(url: &str) {
    let mut config = HubConfig::new(url);
    config.webhook_secret = Some(Secret::new("hmac-s3cret"));
    config.api_token = Some(Secret::new("api-t0ken"));
    let hub = start(config).await;
    let mut c = hub.client();
    let body = fixture("kustomization-succeeded.json");
    let good = kalypso_git::signature::sign(b"hmac-s3cret", body.as_bytes());
    let bad = kalypso_git::signature::sign(b"other", body.as_bytes());
    let r = c.post("/api/v1/events/flux", &[], body.as_bytes()).await.unwrap();
    assert_eq!((r.status, r.json()["field"].clone()), (401, json!("X-Signature")));
    let r = c
        .post("/api/v1/events/flux", &[("X-Signature", &bad)], body.as_bytes())
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    assert!(!String::from_utf8_lossy(&r.body).contains("hmac-s3cret"));
    let r = c
        .post("/api/v1/compliance", &[("X-Signature", "sha256=00")], b"{}")
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    let auth = [("Authorization", "Bearer api-t0ken")];
    let list = c.get("/api/v1/clusters", &auth).await.unwrap();
    assert_eq!(
        list.json()["total"],
        0,
        "nothing stored without a valid signature"
    );
    let r = c
        .post("/api/v1/events/flux", &[("X-Signature", &good)], body.as_bytes())
        .await
        .unwrap();
    assert_eq!(r.status, 200);

    // Queries need the bearer token.
    for path in [
        "/api/v1/clusters",
        "/api/v1/clusters/dev/drone-1",
        "/api/v1/environments",
        "/api/v1/environments/dev",
        "/api/v1/environments/dev/gate?commit=6f1e9c2a",
        "/api/v1/environments/dev/waves?commit=6f1e9c2a&clusterTypes=drone",
        "/api/v1/environments/dev/rollout",
        "/api/v1/commits/6f1e9c2a",
        "/api/v1/workloads/hello",
    ] {
        let r = c.get(path, &[]).await.unwrap();
        assert_eq!(r.status, 401, "{path}");
        let r = c.get(path, &[("Authorization", "Bearer wrong")]).await.unwrap();
        assert_eq!(r.status, 401, "{path}");
    }
    let list = c.get("/api/v1/clusters", &auth).await.unwrap();
    assert_eq!((list.status, list.json()["total"].clone()), (200, json!(1)));
    // Health needs nothing.
    assert_eq!(c.get("/healthz", &[]).await.unwrap().status, 200);
    assert_eq!(c.get("/readyz", &[]).await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_and_bearer_tokens_are_required_when_configured() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "sec").await {
        security_scenario(&url).await;
    }
}

async fn replicas_scenario(url: &str) {
    let a = start(HubConfig::new(url)).await;
    let b = start(HubConfig::new(url)).await;
    let (mut ca, mut cb) = (a.client(), b.client());
    let r = post(
        &mut ca,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    let body = flux(
        "kustomization-succeeded.json",
        "drone-2",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T08:00:00Z",
    );
    assert_eq!(post(&mut cb, "/api/v1/events/flux", &body).await.status, 200);
    for c in [&mut ca, &mut cb] {
        let list = get(c, "/api/v1/clusters").await;
        assert_eq!(list["total"], 2);
    }
    let r = post(
        &mut cb,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    assert_eq!(r.json()["result"], "duplicate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hubs_on_one_database_see_each_others_data() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "replicas").await {
        replicas_scenario(&url).await;
    }
}

async fn unavailable_scenario(url: &str) {
    let hub = start(HubConfig::new(url)).await;
    let mut c = hub.client();
    hub.state.db().close().await;
    let r = post(
        &mut c,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());
    let r = c.get("/api/v1/clusters", &[]).await.unwrap();
    assert_eq!(r.status, 503);
    assert!(r.header("retry-after").is_some());
    assert_eq!(c.get("/readyz", &[]).await.unwrap().status, 503);
    assert_eq!(c.get("/healthz", &[]).await.unwrap().status, 200);
    // Nothing was acknowledged, and a fresh hub on the same database finds nothing stored.
    let again = start(HubConfig::new(url)).await;
    let list = get(&mut again.client(), "/api/v1/clusters").await;
    assert_eq!(list["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_database_gives_503_with_retry_after() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "down").await {
        unavailable_scenario(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_database_gives_503_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", tmp.path().join("locked.db").display());
    let mut config = HubConfig::new(&url);
    config.db_options.busy_timeout = Duration::from_millis(100);
    let hub = start(config).await;
    let mut c = hub.client();
    // Another process holds the write lock.
    let mut other = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut other).await.unwrap();
    let r = post(
        &mut c,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("retry-after").is_some());
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    let r = post(
        &mut c,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    assert_eq!((r.status, r.json()["result"].clone()), (200, json!("stored")));
}

async fn stale_scenario(url: &str) {
    // Long enough that a loaded machine answers the first questions before the cluster goes
    // stale; each "still fresh" check is made only if it really came in time.
    let stale_after = Duration::from_secs(3);
    let mut config = HubConfig::new(url);
    config.stale_after = stale_after;
    let hub = start(config).await;
    let mut c = hub.client();
    let posted = std::time::Instant::now();
    post(
        &mut c,
        "/api/v1/events/flux",
        fixture("kustomization-succeeded.json").as_bytes(),
    )
    .await;
    let list = get(&mut c, "/api/v1/clusters").await;
    let stale_now = get(&mut c, "/api/v1/clusters?state=stale").await;
    if posted.elapsed() < stale_after {
        assert_eq!(list["clusters"][0]["stale"], false);
        assert_eq!(stale_now["total"], 0);
    }
    tokio::time::sleep((stale_after + Duration::from_millis(500)).saturating_sub(posted.elapsed())).await;
    let list = get(&mut c, "/api/v1/clusters").await;
    assert_eq!(list["clusters"][0]["stale"], true);
    assert_eq!(get(&mut c, "/api/v1/clusters?state=stale").await["total"], 1);
    // A report makes it fresh again.
    let later = flux(
        "kustomization-succeeded.json",
        "drone-1",
        "drone",
        FIXTURE_SHA,
        "2026-11-26T09:00:00Z",
    );
    let reported = std::time::Instant::now();
    post(&mut c, "/api/v1/events/flux", &later).await;
    let fresh = get(&mut c, "/api/v1/clusters").await["clusters"][0]["stale"].clone();
    if reported.elapsed() < stale_after {
        assert_eq!(fresh, false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clusters_become_stale() {
    let tmp = tempfile::tempdir().unwrap();
    for url in databases(tmp.path(), "stale").await {
        stale_scenario(&url).await;
    }
}

// ---------------------------------------------------------------------------------------
// The GitOps side

const P1: &str = "1111111111111111111111111111111111111111";
const P2: &str = "2222222222222222222222222222222222222222";
const P3: &str = "3333333333333333333333333333333333333333";

fn namespace(workload: &str, target: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: dev-{target}\n  labels:\n    environment: dev\n    workspace: team\n    workload: {workload}\n    deploymentTarget: {target}\n"
    )
}

fn flux_reconciler(path: &str) -> String {
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: hello\nspec:\n  url: https://github.com/contoso/app-gitops\n  ref:\n    branch: dev\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: hello\nspec:\n  path: {path}\n"
    )
}

const ARGO_RECONCILER: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: svc\nspec:\n  source:\n    repoURL: https://github.com/contoso/svc-gitops\n    targetRevision: dev\n    path: svc\n";

struct Repos {
    control_plane: PathBuf,
    /// The GitOps commits c1, c2, c3.
    commits: Vec<String>,
    cache: PathBuf,
}

/// A control plane with environment `dev` delivering to branch `dev` of a GitOps repository
/// with three commits:
/// - c1 (promotes P1): cluster types `drone` (hello-dev: workload hello, path ./dev) and `large`;
/// - c2 (P2): adds drone/svc-dev (workload svc, Argo CD);
/// - c3 (P3): hello-dev's path becomes ./dev2, `large` goes, `small` (svc-dev) comes.
fn repos(dir: &Path) -> Repos {
    let cp = dir.join("control-plane.git");
    let gitops = dir.join("gitops.git");
    init_bare(&cp);
    init_bare(&gitops);
    write_files(
        &cp,
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
        &cp,
        "dev",
        &[("gitops-repo.yaml", Some(gitops_yaml.as_str()))],
        "gitops repo",
    );
    let ns_hello = namespace("hello", "hello-dev");
    let ns_svc = namespace("svc", "svc-dev");
    let rec1 = flux_reconciler("./dev");
    let rec3 = flux_reconciler("./dev2");
    let c1 = write_files(
        &gitops,
        "dev",
        &[
            (".github/tracking/Promoted_Commit_Id", Some(P1)),
            ("drone/README.md", Some("# drone\n")),
            ("drone/hello-dev/namespace.yaml", Some(&ns_hello)),
            ("drone/hello-dev/reconciler.yaml", Some(&rec1)),
            ("drone/hello-dev/platform-config.yaml", Some("kind: ConfigMap\n")),
            ("large/README.md", Some("# large\n")),
        ],
        "promote P1",
    );
    let c2 = write_files(
        &gitops,
        "dev",
        &[
            (".github/tracking/Promoted_Commit_Id", Some(P2)),
            ("drone/svc-dev/namespace.yaml", Some(&ns_svc)),
            ("drone/svc-dev/reconciler.yaml", Some(ARGO_RECONCILER)),
        ],
        "promote P2",
    );
    let c3 = write_files(
        &gitops,
        "dev",
        &[
            (".github/tracking/Promoted_Commit_Id", Some(P3)),
            ("drone/hello-dev/reconciler.yaml", Some(&rec3)),
            ("large/README.md", None),
            ("small/README.md", Some("# small\n")),
            ("small/svc-dev/namespace.yaml", Some(&ns_svc)),
            ("small/svc-dev/reconciler.yaml", Some(ARGO_RECONCILER)),
        ],
        "promote P3",
    );
    Repos {
        control_plane: cp,
        commits: vec![c1, c2, c3],
        cache: dir.join("cache"),
    }
}

fn git_config(url: &str, repos: &Repos) -> HubConfig {
    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.git = Some(GitSettings {
        control_plane: repos.control_plane.display().to_string(),
        cache_dir: repos.cache.clone(),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    });
    config
}

async fn history_scenario(url: &str, dir: &Path) {
    let repos = repos(dir);
    let [c1, c2, c3] = [&repos.commits[0], &repos.commits[1], &repos.commits[2]];
    let hub = start(git_config(url, &repos)).await;
    let mut c = hub.client();
    // A report that arrives before the hub has read the commit counts once it has.
    let early = flux(
        "kustomization-succeeded.json",
        "drone-1",
        "drone",
        c1,
        "2026-11-26T08:00:00Z",
    );
    post(&mut c, "/api/v1/events/flux", &early).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;

    let env = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(env["name"], "dev");
    assert_eq!(env["branch"], "dev");
    assert!(env["gitopsRepo"].as_str().unwrap().ends_with("gitops.git"));
    assert_eq!(env["latest"]["commit"], c3.as_str());
    assert_eq!(env["latest"]["controlPlaneCommit"], P3);
    let types: Vec<&str> = env["clusterTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["drone", "small"]);
    let drone = &env["clusterTypes"][0];
    assert_eq!(drone["deploymentTargets"][0]["name"], "hello-dev");
    assert_eq!(drone["deploymentTargets"][0]["workload"], "hello");
    assert_eq!(
        drone["deploymentTargets"][0]["source"],
        json!({"kind": "flux", "url": "https://github.com/contoso/app-gitops", "branch": "dev", "revision": null, "path": "./dev2"})
    );
    assert_eq!(drone["deploymentTargets"][1]["source"]["kind"], "argocd");
    assert_eq!(drone["deploymentTargets"][1]["source"]["path"], "svc");
    assert_eq!(drone["clusters"]["total"], 1);
    assert_eq!(drone["clusters"]["behind"], 1);
    assert_eq!(env["summary"]["deploymentTargets"], 3);
    let all = get(&mut c, "/api/v1/environments").await;
    assert_eq!(all["environments"].as_array().unwrap().len(), 1);

    // The early report now decides drone-1's state.
    let list = get(&mut c, "/api/v1/clusters").await;
    assert_eq!(list["clusters"][0]["state"], "compliant");
    assert_eq!(list["clusters"][0]["commit"], c1.as_str());

    // A report that arrived while a pass stored its commit (so that neither applied it) is
    // applied by the next pass, though that pass reads no new commit.
    sqlx::query("UPDATE clusters SET state = NULL, commit_sha = NULL, position = NULL, reported_at = NULL")
        .execute(hub.state.db().pool())
        .await
        .unwrap();
    assert_eq!(
        get(&mut c, "/api/v1/clusters").await["clusters"][0]["state"],
        "unknown"
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let list = get(&mut c, "/api/v1/clusters").await;
    assert_eq!(list["clusters"][0]["state"], "compliant");
    assert_eq!(list["clusters"][0]["commit"], c1.as_str());

    // Workloads: where and since when.
    let hello = get(&mut c, "/api/v1/workloads/hello").await;
    assert_eq!(hello["placements"].as_array().unwrap().len(), 1);
    assert_eq!(hello["placements"][0]["clusterType"], "drone");
    assert_eq!(hello["placements"][0]["deploymentTarget"], "hello-dev");
    assert_eq!(hello["placements"][0]["since"]["gitopsCommit"], c3.as_str());
    assert_eq!(hello["placements"][0]["since"]["controlPlaneCommit"], P3);
    assert_eq!(hello["history"][0]["since"]["gitopsCommit"], c1.as_str());
    assert_eq!(hello["history"][0]["until"]["gitopsCommit"], c3.as_str());
    let svc = get(&mut c, "/api/v1/workloads/svc").await;
    let places: Vec<(&str, &str)> = svc["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["clusterType"].as_str().unwrap(),
                p["since"]["gitopsCommit"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(places, [("drone", c2.as_str()), ("small", c3.as_str())]);
    assert_eq!(
        get(&mut c, "/api/v1/workloads/nothing").await["placements"],
        json!([])
    );

    // Commits: by GitOps commit and by control-plane commit.
    let by_cp = get(&mut c, &format!("/api/v1/commits/{P2}")).await;
    let env0 = &by_cp["environments"][0];
    assert_eq!(env0["environment"], "dev");
    assert_eq!(env0["gitopsCommits"][0]["sha"], c2.as_str());
    assert_eq!(env0["controlPlaneCommit"], P2);
    assert_eq!(env0["clusterTypes"], json!(["drone", "large"]));
    let by_gitops = get(&mut c, &format!("/api/v1/commits/{}", &c1[..10])).await;
    assert_eq!(
        by_gitops["environments"][0]["gitopsCommits"][0]["sha"],
        c1.as_str()
    );
    assert_eq!(
        by_gitops["environments"][0]["compliantClusters"],
        json!(["drone-1"])
    );
    assert!(by_gitops["environments"][0]["leadTimeSeconds"].is_number());
    assert_eq!(by_gitops["environments"][0]["verdict"], "compliant");

    // A second refresh finds nothing new; a new commit is found on demand by a gate.
    let c4 = write_files(
        &dir.join("gitops.git"),
        "dev",
        &[(
            ".github/tracking/Promoted_Commit_Id",
            Some("4444444444444444444444444444444444444444"),
        )],
        "promote P4",
    );
    let gate = get(&mut c, &format!("/api/v1/environments/dev/gate?commit={c4}")).await;
    assert_eq!(gate["gitopsCommit"], c4.as_str());
    assert_eq!(gate["verdict"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitops_history_is_read_and_correlated() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "history").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        history_scenario(&url, &dir).await;
    }
}

async fn gate_scenario(url: &str, dir: &Path) {
    let repos = repos(dir);
    let [c1, c2, c3] = [&repos.commits[0], &repos.commits[1], &repos.commits[2]];
    let hub = start(git_config(url, &repos)).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let mut c = hub.client();
    let gate = |sha: &str| format!("/api/v1/environments/dev/gate?commit={sha}");

    // Unknown commit.
    let g = get(&mut c, &gate("deadbeefdeadbeefdeadbeefdeadbeefdeadbeef")).await;
    assert_eq!(
        g,
        json!({"environment": "dev", "gitopsCommit": null, "controlPlaneCommit": null, "verdict": "unknown-commit",
               "compliant": 0, "total": 0, "clusters": [], "clusterTypesWithoutClusters": []})
    );
    let r = c.get("/api/v1/environments/dev/gate", &[]).await.unwrap();
    assert_eq!((r.status, r.json()["field"].clone()), (400, json!("commit")));

    // No cluster registered: nothing is required.
    let g = get(&mut c, &gate(c2)).await;
    assert_eq!(g["verdict"], "compliant");
    assert_eq!((g["compliant"].clone(), g["total"].clone()), (json!(0), json!(0)));
    assert_eq!(g["clusterTypesWithoutClusters"], json!(["drone", "large"]));

    // drone-1 compliant with c2, drone-2 still on c1: pending, drone-2 behind.
    let send = |cluster: &str, fixture_name: &str, commit: &str, time: &str| {
        flux(fixture_name, cluster, "drone", commit, time)
    };
    post(
        &mut c,
        "/api/v1/events/flux",
        &send(
            "drone-1",
            "kustomization-succeeded.json",
            c2,
            "2026-11-26T08:00:00Z",
        ),
    )
    .await;
    post(
        &mut c,
        "/api/v1/events/flux",
        &send(
            "drone-2",
            "kustomization-succeeded.json",
            c1,
            "2026-11-26T08:00:00Z",
        ),
    )
    .await;
    // An application's Kustomization on another repository is stored but ignored.
    let mut app: Value = serde_json::from_slice(&send(
        "drone-2",
        "kustomization-succeeded.json",
        FIXTURE_SHA,
        "2026-11-26T08:30:00Z",
    ))
    .unwrap();
    app["involvedObject"]["name"] = "hello-world-app".into();
    post(&mut c, "/api/v1/events/flux", &serde_json::to_vec(&app).unwrap()).await;
    let g = get(&mut c, &gate(c2)).await;
    assert_eq!(g["verdict"], "pending");
    assert_eq!((g["compliant"].clone(), g["total"].clone()), (json!(1), json!(2)));
    assert_eq!(g["gitopsCommit"], c2.as_str());
    assert_eq!(g["controlPlaneCommit"], P2);
    assert_eq!(g["clusterTypesWithoutClusters"], json!(["large"]));
    assert_eq!(
        g["clusters"],
        json!([
            {"name": "drone-2", "clusterType": "drone", "state": "behind", "revision": c1, "message": g["clusters"][0]["message"]},
            {"name": "drone-1", "clusterType": "drone", "state": "compliant", "revision": c2, "message": g["clusters"][1]["message"]},
        ])
    );
    // Same answer by control-plane commit.
    let by_cp = get(&mut c, &gate(P2)).await;
    assert_eq!(by_cp, g);

    // drone-2 reconciling c2: pending; then failed: failed, with the message.
    post(
        &mut c,
        "/api/v1/events/flux",
        &send(
            "drone-2",
            "kustomization-progressing.json",
            c2,
            "2026-11-26T08:10:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &gate(c2)).await;
    assert_eq!(
        (g["verdict"].clone(), g["clusters"][0]["state"].clone()),
        (json!("pending"), json!("reconciling"))
    );
    post(
        &mut c,
        "/api/v1/events/flux",
        &send("drone-2", "kustomization-failed.json", c2, "2026-11-26T08:15:00Z"),
    )
    .await;
    let g = get(&mut c, &gate(c2)).await;
    assert_eq!(g["verdict"], "failed");
    // The answer reads into the API's type, as `kalypso check-promote` reads it, and that type
    // writes it back unchanged: client and server agree on every field.
    let typed: kalypso_hub_api::Gate = serde_json::from_value(g.clone()).unwrap();
    assert_eq!(typed.verdict, kalypso_hub_api::Verdict::Failed);
    assert_eq!(serde_json::to_value(&typed).unwrap(), g);
    assert_eq!(g["clusters"][0]["name"], "drone-2");
    assert_eq!(g["clusters"][0]["state"], "failed");
    assert!(
        g["clusters"][0]["message"]
            .as_str()
            .unwrap()
            .starts_with("health check failed")
    );

    // drone-2 compliant with c3, which contains c2: c2's gate is compliant.
    post(
        &mut c,
        "/api/v1/events/flux",
        &send(
            "drone-2",
            "kustomization-succeeded.json",
            c3,
            "2026-11-26T08:20:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &gate(c2)).await;
    assert_eq!(g["verdict"], "compliant");
    assert_eq!((g["compliant"].clone(), g["total"].clone()), (json!(2), json!(2)));
    // c3's gate: drone-1 is behind; `small` has no cluster.
    let g = get(&mut c, &gate(c3)).await;
    assert_eq!(g["verdict"], "pending");
    assert_eq!(g["clusters"][0]["name"], "drone-1");
    assert_eq!(g["clusters"][0]["state"], "behind");
    assert_eq!(g["clusterTypesWithoutClusters"], json!(["small"]));
    // A generic report for drone-1 makes c3 compliant; a large cluster is not required by c3.
    let body = json!({"cluster": "drone-1", "clusterType": "drone", "environment": "dev", "commit": c3,
        "state": "compliant", "time": "2026-11-26T08:25:00Z"});
    assert_eq!(
        post(&mut c, "/api/v1/compliance", body.to_string().as_bytes())
            .await
            .status,
        200
    );
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux(
            "kustomization-failed.json",
            "large-1",
            "large",
            c1,
            "2026-11-26T08:00:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &gate(c3)).await;
    assert_eq!(g["verdict"], "compliant");
    assert_eq!(g["total"], 2);
    // …but c1's gate requires it, and it failed there.
    let g = get(&mut c, &gate(c1)).await;
    assert_eq!(g["verdict"], "failed");
    assert_eq!(g["clusters"][0]["name"], "large-1");
    let commit = get(&mut c, &format!("/api/v1/commits/{P3}")).await;
    assert!(commit["environments"][0]["leadTimeSeconds"].is_number());
    // Limit.
    let g = get(&mut c, &format!("{}&limit=1", gate(c3))).await;
    assert_eq!(g["clusters"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_gives_every_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "gate").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        gate_scenario(&url, &dir).await;
    }
}

async fn stale_gate_scenario(url: &str, dir: &Path) {
    let repos = repos(dir);
    let c2 = repos.commits[1].clone();
    let mut config = git_config(url, &repos);
    config.stale_after = Duration::from_millis(400);
    let hub = start(config).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let mut c = hub.client();
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux(
            "kustomization-progressing.json",
            "drone-9",
            "drone",
            &c2,
            "2026-11-26T08:00:00Z",
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux(
            "kustomization-succeeded.json",
            "drone-1",
            "drone",
            &c2,
            "2026-11-26T08:00:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &format!("/api/v1/environments/dev/gate?commit={c2}")).await;
    assert_eq!(g["verdict"], "compliant");
    assert_eq!(g["total"], 1);
    assert_eq!(g["clusters"][0]["name"], "drone-9");
    assert_eq!(g["clusters"][0]["state"], "stale");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_clusters_are_not_required_by_the_gate() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "stalegate").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        stale_gate_scenario(&url, &dir).await;
    }
}

async fn concurrent_refresh_scenario(url: &str, dir: &Path) {
    let repos = repos(dir);
    let a = start(git_config(url, &repos)).await;
    let b = start(git_config(url, &repos)).await;
    tokio::join!(
        a.state.refresher().refresh_now(Duration::from_secs(30)),
        b.state.refresher().refresh_now(Duration::from_secs(30))
    );
    let mut c = b.client();
    let env = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(env["summary"]["deploymentTargets"], 3);
    let hello = get(&mut c, "/api/v1/workloads/hello").await;
    assert_eq!(hello["placements"].as_array().unwrap().len(), 1);
    assert_eq!(hello["history"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_refreshing_together_store_the_history_once() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "refresh").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        concurrent_refresh_scenario(&url, &dir).await;
    }
}

// ---------------------------------------------------------------------------------------
// An environment delivered to an OCI registry

/// Syncs `dev` of `control_plane` with kalypso-git (its GitOpsRepo is an `oci://` location).
async fn sync_dev(control_plane: &Path, cache: &Path) {
    let control_plane = control_plane.to_owned();
    let cache = cache.to_owned();
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let settings = kalypso_git::Settings {
            cache_dir: cache,
            ..kalypso_git::Settings::default()
        };
        let syncer = kalypso_git::Syncer::new(settings, handle).unwrap();
        let url = kalypso_git::RepoUrl::parse(&control_plane.display().to_string()).unwrap();
        let mut pass = syncer.pass(&url).unwrap();
        let envs = pass.environments(&["dev".to_owned()]).unwrap();
        let report = pass.sync(&envs[0]).unwrap();
        assert!(report.is_success(), "{:?}", report.outcome);
    })
    .await
    .unwrap();
}

/// The manifest digest of each cluster type and the index's hex, as the registry has them.
async fn artifacts(location: &str) -> (String, std::collections::BTreeMap<String, String>) {
    let location = kalypso_oci::Location::parse(location).unwrap();
    tokio::task::spawn_blocking(move || {
        let registry = kalypso_oci::Registry::new(
            &kalypso_oci::AuthSettings::default(),
            kalypso_oci::Retry::default(),
        )
        .unwrap();
        let snapshot = kalypso_oci::read::index(&registry, &location, "dev", kalypso_oci::Access::Pull)
            .unwrap()
            .unwrap();
        let digests = snapshot
            .index
            .cluster_types
            .iter()
            .map(|(ct, e)| (ct.clone(), e.manifest.to_string()))
            .collect();
        (snapshot.digest.hex().to_owned(), digests)
    })
    .await
    .unwrap()
}

/// A Flux Kustomization event with an OCI revision (`dev@sha256:<hex>`).
fn flux_oci(name: &str, cluster: &str, cluster_type: &str, digest: &str, time: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(&fixture(name)).unwrap();
    v["metadata"]["cluster"] = cluster.into();
    v["metadata"]["clusterType"] = cluster_type.into();
    v["metadata"]["revision"] = format!("dev@{digest}").into();
    v["timestamp"] = time.into();
    serde_json::to_vec(&v).unwrap()
}

async fn oci_scenario(url: &str, dir: &Path, registry: &kalypso_testkit::TestRegistry, path: &str) {
    let repos = kalypso_testkit::ExampleRepos::create(dir);
    let location = registry.location(path);
    let mut dev = kalypso_testkit::text_files_under(&repos.folder.join("dev"));
    kalypso_testkit::replace_in(
        &mut dev,
        "gitops-repo.yaml",
        &format!("file://{}", repos.gitops.display()),
        &location,
    );
    kalypso_testkit::commit_files(&repos.control_plane, "dev", "", &dev);
    sync_dev(&repos.control_plane, &dir.join("sync-cache")).await;
    let (first_index, first) = artifacts(&location).await;

    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.git = Some(GitSettings {
        control_plane: repos.control_plane.display().to_string(),
        cache_dir: dir.join("hub-cache"),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    });
    let hub = start(config).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let mut c = hub.client();

    // The environment as its index and artifacts say: the cluster types, their targets
    // (read from the layers), the promoted control-plane commit.
    let env = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(env["gitopsRepo"], location.as_str());
    assert_eq!(env["latest"]["commit"], first_index.as_str());
    assert_eq!(env["latest"]["controlPlaneCommit"], repos.main_commit.as_str());
    let types: Vec<&str> = env["clusterTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["command-center", "drone", "large", "small"]);
    let drone = &env["clusterTypes"][1];
    assert!(
        drone["deploymentTargets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["workload"] == "hello-world-app"),
        "{drone}"
    );

    // Clusters report their own cluster type's artifact, as Flux's OCIRepository names it.
    let gate = |sha: &str| format!("/api/v1/environments/dev/gate?commit={sha}");
    for (cluster, ct) in [("drone-1", "drone"), ("large-1", "large")] {
        let r = post(
            &mut c,
            "/api/v1/events/flux",
            &flux_oci(
                "kustomization-succeeded.json",
                cluster,
                ct,
                &first[ct],
                "2026-11-26T08:00:00Z",
            ),
        )
        .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let g = get(&mut c, &gate(&repos.main_commit)).await;
    assert_eq!(g["gitopsCommit"], first_index.as_str());
    assert_eq!(g["verdict"], "compliant", "{g}");
    assert_eq!((g["compliant"].clone(), g["total"].clone()), (json!(2), json!(2)));
    let cluster = get(&mut c, "/api/v1/clusters/dev/drone-1").await;
    assert_eq!(cluster["commit"], first["drone"].as_str());
    assert_eq!(cluster["state"], "compliant");

    // large's config changes: a new index, where only large's artifact is new.
    kalypso_testkit::replace_in(
        &mut dev,
        "cluster-types/west-us/large/large-config.yaml",
        "MAX_REPLICAS: \"20\"",
        "MAX_REPLICAS: \"30\"",
    );
    kalypso_testkit::commit_files(&repos.control_plane, "dev", "", &dev);
    sync_dev(&repos.control_plane, &dir.join("sync-cache")).await;
    let (second_index, second) = artifacts(&location).await;
    assert_eq!(second["drone"], first["drone"]);
    assert_ne!(second["large"], first["large"]);
    // A cluster may report the new artifact before the hub has read the new index: it
    // counts once the refresh reads it.
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux_oci(
            "kustomization-progressing.json",
            "large-1",
            "large",
            &second["large"],
            "2026-11-26T08:05:00Z",
        ),
    )
    .await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let g = get(&mut c, &gate(&second_index)).await;
    assert_eq!(g["gitopsCommit"], second_index.as_str());
    assert_eq!(g["verdict"], "pending", "{g}");
    let states: Vec<(String, String)> = g["clusters"]
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
    // drone-1 runs drone's artifact, which the new index kept: it is at the new index.
    assert_eq!(
        states,
        [
            ("large-1".to_owned(), "reconciling".to_owned()),
            ("drone-1".to_owned(), "compliant".to_owned())
        ]
    );
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux_oci(
            "kustomization-succeeded.json",
            "large-1",
            "large",
            &second["large"],
            "2026-11-26T08:06:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &gate(&second_index)).await;
    assert_eq!(g["verdict"], "compliant", "{g}");
    // The first index is contained in the second: its gate is compliant too.
    let g = get(&mut c, &gate(&first_index)).await;
    assert_eq!(g["verdict"], "compliant", "{g}");
    let commit = get(&mut c, &format!("/api/v1/commits/{second_index}")).await;
    assert!(
        commit["environments"][0]["leadTimeSeconds"].is_number(),
        "{commit}"
    );
    // A cluster still on large's first artifact is behind the second index.
    post(
        &mut c,
        "/api/v1/events/flux",
        &flux_oci(
            "kustomization-succeeded.json",
            "large-2",
            "large",
            &first["large"],
            "2026-11-26T08:07:00Z",
        ),
    )
    .await;
    let g = get(&mut c, &gate(&second_index)).await;
    assert_eq!(g["verdict"], "pending", "{g}");
    assert_eq!(g["clusters"][0]["name"], "large-2");
    assert_eq!(g["clusters"][0]["state"], "behind");

    // The tag is moved back to the first index (a rollback by hand): the second index is off
    // the branch, and each cluster stands where its cluster type's artifact does in the first
    // index — drone-1 and large-2 at the head (their artifacts are the head's), large-1, which
    // runs large's second artifact, behind.
    let oci_path = location.trim_start_matches("oci://");
    registry
        .skopeo(&[
            "copy",
            "--all",
            "--preserve-digests",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{oci_path}@sha256:{first_index}"),
            &format!("docker://{oci_path}:dev"),
        ])
        .unwrap();
    assert_eq!(artifacts(&location).await.0, first_index);
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let env = get(&mut c, "/api/v1/environments/dev").await;
    assert_eq!(env["latest"]["commit"], first_index.as_str());
    let g = get(&mut c, &gate(&first_index)).await;
    let states: Vec<(&str, &str)> = g["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [
            ("large-1", "behind"),
            ("drone-1", "compliant"),
            ("large-2", "compliant")
        ],
        "{g}"
    );
    assert_eq!(
        get(&mut c, &gate(&second_index)).await["verdict"],
        "unknown-commit"
    );
    let settings = GitSettings {
        control_plane: repos.control_plane.display().to_string(),
        cache_dir: dir.join("hub-cache"),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    };
    let report = kalypso_hub::gitops::refresh(hub.state.db(), &settings)
        .await
        .unwrap();
    assert_eq!((report.commits, report.rewound), (0, 0), "{report:?}");
    let check = kalypso_hub::counts::check(hub.state.db(), 0).await.unwrap();
    assert_eq!(check.repaired, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_environment_is_correlated_by_artifact_digest() {
    let Some(registry) = kalypso_testkit::TestRegistry::start("the hub's OCI test") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    for (i, url) in databases(tmp.path(), "oci").await.into_iter().enumerate() {
        let dir = tmp.path().join(format!("repos{i}"));
        oci_scenario(&url, &dir, &registry, &format!("hub{i}/gitops")).await;
    }
}
