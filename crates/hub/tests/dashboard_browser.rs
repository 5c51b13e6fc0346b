//! The fleet dashboard on the real hub, in a real browser: the hub (SQLite, a control plane and
//! a platform GitOps repository as file:// git repositories) serves on 127.0.0.1, clusters
//! post the Flux events of `tests/fixtures/flux/`, and headless Chromium driven through
//! chromedriver checks the fleet map, its live update, the promotion view, the drill-down
//! pages, escaping and the 404 page.
//!
//! They need Debian's `chromium` and `chromium-driver` packages (or `KALYPSO_CHROMIUM` and
//! `KALYPSO_CHROMEDRIVER` pointing at the binaries). Without them the tests are skipped, and the
//! test run says so in one line; with `KALYPSO_TEST_REQUIRE_SERVICES=1` (as CI runs them) they
//! fail instead. Screenshots are saved under
//! `target/dashboard-screenshots/hub-*.png`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use kalypso_git::{AuthSettings, RetryPolicy};
use kalypso_hub::client::Client as HubClient;
use kalypso_hub::{DashboardMode, GitSettings, HubConfig, HubState};
use kalypso_testkit::browser::Browser;
use kalypso_testkit::{init_bare, write_files};
use serde_json::Value;

// ---------------------------------------------------------------------------------------
// The hub, its repositories and its clusters

const P1: &str = "1111111111111111111111111111111111111111";
const P2: &str = "2222222222222222222222222222222222222222";
const XSS: &str = "<script>window.__kalypsoXss = 1; document.title = 'pwned';</script>";

fn namespace(env: &str, workload: &str, target: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {env}-{target}\n  labels:\n    environment: {env}\n    workspace: team\n    workload: {workload}\n    deploymentTarget: {target}\n"
    )
}

fn flux_reconciler(branch: &str, path: &str) -> String {
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata:\n  name: hello\nspec:\n  url: https://github.com/contoso/app-gitops\n  ref:\n    branch: {branch}\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata:\n  name: hello\nspec:\n  path: {path}\n"
    )
}

const ARGO_RECONCILER: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: svc\nspec:\n  source:\n    repoURL: https://github.com/contoso/svc-gitops\n    targetRevision: dev\n    path: svc\n";

/// The GitOps commits of the two environments.
struct Commits {
    dev: Vec<String>,
    prod: Vec<String>,
}

/// A control plane with environments `dev` and `prod`, each delivering to the branch of its
/// name of one GitOps repository:
/// - dev: d1 (promotes P1: drone/hello-dev, large/hello-dev), d2 (P2: adds drone/svc-dev);
/// - prod: p1 (P1: drone/hello-prod, large/hello-prod).
fn repos(dir: &Path) -> (GitSettings, Commits) {
    let cp = dir.join("control-plane.git");
    let gitops = dir.join("gitops.git");
    init_bare(&cp);
    init_bare(&gitops);
    let env_yaml = |env: &str| {
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: {env}\nspec:\n  controlPlane:\n    repo: https://github.com/contoso/control-plane\n    branch: {env}\n    path: .\n"
        )
    };
    let (dev_yaml, prod_yaml) = (env_yaml("dev"), env_yaml("prod"));
    write_files(
        &cp,
        "main",
        &[
            (".environments/dev.yaml", Some(dev_yaml.as_str())),
            (".environments/prod.yaml", Some(prod_yaml.as_str())),
        ],
        "environments",
    );
    for env in ["dev", "prod"] {
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
    }
    let mut commits = Commits {
        dev: Vec::new(),
        prod: Vec::new(),
    };
    for env in ["dev", "prod"] {
        let ns = namespace(env, "hello", &format!("hello-{env}"));
        let rec = flux_reconciler(env, &format!("./{env}"));
        let dt = |ct: &str, file: &str| format!("{ct}/hello-{env}/{file}");
        let (a, b, c, d) = (
            dt("drone", "namespace.yaml"),
            dt("drone", "reconciler.yaml"),
            dt("large", "namespace.yaml"),
            dt("large", "reconciler.yaml"),
        );
        let first = write_files(
            &gitops,
            env,
            &[
                (".github/tracking/Promoted_Commit_Id", Some(P1)),
                ("drone/README.md", Some("# drone\n")),
                (a.as_str(), Some(ns.as_str())),
                (b.as_str(), Some(rec.as_str())),
                ("large/README.md", Some("# large\n")),
                (c.as_str(), Some(ns.as_str())),
                (d.as_str(), Some(rec.as_str())),
            ],
            "promote P1",
        );
        if env == "dev" {
            commits.dev.push(first);
            let ns_svc = namespace("dev", "svc", "svc-dev");
            commits.dev.push(write_files(
                &gitops,
                "dev",
                &[
                    (".github/tracking/Promoted_Commit_Id", Some(P2)),
                    ("drone/svc-dev/namespace.yaml", Some(ns_svc.as_str())),
                    ("drone/svc-dev/reconciler.yaml", Some(ARGO_RECONCILER)),
                ],
                "promote P2",
            ));
        } else {
            commits.prod.push(first);
        }
    }
    let settings = GitSettings {
        control_plane: cp.display().to_string(),
        cache_dir: dir.join("cache"),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    };
    (settings, commits)
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/flux")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A Flux fixture as cluster `cluster` of `env`/`cluster_type` sends it about `commit`,
/// `seconds_ago` seconds ago.
fn flux(name: &str, env: &str, cluster: &str, cluster_type: &str, commit: &str, seconds_ago: i64) -> Vec<u8> {
    let mut v = fixture(name);
    v["metadata"]["cluster"] = cluster.into();
    v["metadata"]["clusterType"] = cluster_type.into();
    v["metadata"]["environment"] = env.into();
    v["metadata"]["revision"] = format!("{env}@sha1:{commit}").into();
    let at = chrono::Utc::now() - chrono::Duration::seconds(seconds_ago);
    v["timestamp"] = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).into();
    serde_json::to_vec(&v).unwrap()
}

struct Hub {
    addr: SocketAddr,
    state: HubState,
}

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

async fn post(c: &mut HubClient, body: &[u8]) {
    let r = c.post("/api/v1/events/flux", &[], body).await.unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// The hub over SQLite in `dir` with the two environments read and these clusters reporting:
/// dev: drone-1, drone-2, large-1 compliant at d2; prod: drone-p1 compliant at p1, large-p1
/// progressing at p1.
async fn fleet(dir: &Path) -> (Hub, Commits) {
    let (git, commits) = repos(dir);
    let mut config = HubConfig::new(format!("sqlite://{}", dir.join("hub.db").display()));
    config.refresh = Duration::from_secs(3600);
    config.git = Some(git);
    let hub = start(config).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let mut c = HubClient::new(hub.addr);
    let (d2, p1) = (&commits.dev[1], &commits.prod[0]);
    for (cluster, ct) in [("drone-1", "drone"), ("drone-2", "drone"), ("large-1", "large")] {
        post(
            &mut c,
            &flux("kustomization-succeeded.json", "dev", cluster, ct, d2, 600),
        )
        .await;
    }
    post(
        &mut c,
        &flux(
            "kustomization-succeeded.json",
            "prod",
            "drone-p1",
            "drone",
            p1,
            600,
        ),
    )
    .await;
    post(
        &mut c,
        &flux(
            "kustomization-progressing.json",
            "prod",
            "large-p1",
            "large",
            p1,
            600,
        ),
    )
    .await;
    (hub, commits)
}

// ---------------------------------------------------------------------------------------
// The scenario

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_on_the_real_hub_shows_states_updates_live_and_drills_down() {
    let tmp = tempfile::tempdir().unwrap();
    let (hub, commits) = fleet(tmp.path()).await;
    let Some(b) = Browser::start(
        &format!("http://{}", hub.addr),
        "the hub's dashboard browser tests",
    )
    .await
    else {
        return;
    };

    // The fleet map.
    b.goto("/").await;
    assert_eq!(b.title().await, "Fleet map · Kalypso fleet");
    for (env, ct, state) in [
        ("dev", "drone", "compliant"),
        ("dev", "large", "compliant"),
        ("prod", "drone", "compliant"),
        ("prod", "large", "reconciling"),
    ] {
        assert_eq!(b.cell_state(env, ct).await.as_deref(), Some(state), "{env}/{ct}");
    }
    let header = b.text("table").await;
    assert!(header.contains("dev") && header.contains("prod"), "{header}");
    b.screenshot("hub-fleet-map").await;

    // A Flux failure while the page is open turns its cell to failed without a reload.
    let deadline = Instant::now() + Duration::from_secs(10);
    while b
        .js("return document.getElementById('live-status').dataset.state || ''")
        .await
        != "ok"
    {
        assert!(Instant::now() < deadline, "the event stream did not open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.js("window.__notReloaded = true; return null;").await;
    let mut failed = fixture("kustomization-failed.json");
    failed["metadata"]["cluster"] = "drone-2".into();
    failed["metadata"]["revision"] = format!("dev@sha1:{}", commits.dev[1]).into();
    failed["timestamp"] = chrono::Utc::now()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        .into();
    failed["message"] = format!("health check failed: {XSS}").into();
    post(
        &mut HubClient::new(hub.addr),
        &serde_json::to_vec(&failed).unwrap(),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while b.cell_state("dev", "drone").await.as_deref() != Some("failed") {
        assert!(
            Instant::now() < deadline,
            "the dev/drone cell did not turn failed without a reload"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        b.js("return window.__notReloaded === true").await,
        true,
        "the page was reloaded instead of updated"
    );
    assert_eq!(b.cell_state("prod", "drone").await.as_deref(), Some("compliant"));
    b.screenshot("hub-fleet-map-live-update").await;

    // The promotion view says what blocks: P2 in dev, failed on drone-2 with its message.
    b.goto("/promotions").await;
    let blocked = b
        .texts("table.promotions td[data-stage=blocked]")
        .await
        .join("\n---\n");
    assert!(
        blocked.contains("drone-2 (drone) failed: health check failed: <script>"),
        "{blocked}"
    );
    let table = b.text("table.promotions").await;
    let (p1_at, p2_at) = (table.find(&P1[..7]), table.find(&P2[..7]));
    assert!(
        p1_at.is_some() && p2_at.is_some() && p2_at < p1_at,
        "newest first: {table}"
    );
    // prod still waits for large-p1 at P1.
    let prod_waiting = b.texts("table.promotions td").await;
    assert!(
        prod_waiting.iter().any(|cell| cell.contains("large-p1")),
        "{prod_waiting:?}"
    );
    b.screenshot("hub-promotions").await;

    // Drill-down: the cluster type (deployment targets and reconciler sources).
    b.goto("/").await;
    b.client
        .find(Locator::Css("a[href=\"/environments/dev/cluster-types/drone\"]"))
        .await
        .expect("the drone cell")
        .click()
        .await
        .expect("click");
    assert_eq!(b.title().await, "drone in dev · Kalypso fleet");
    let targets = b.text("section[aria-labelledby=targets]").await;
    assert!(
        targets.contains("hello-dev")
            && targets.contains("svc-dev")
            && targets.contains("https://github.com/contoso/app-gitops")
            && targets.contains("https://github.com/contoso/svc-gitops"),
        "{targets}"
    );
    let body = b.js("return document.body.innerText").await;
    let body = body.as_str().unwrap_or_default();
    for name in ["drone-1", "drone-2"] {
        assert!(body.contains(name), "{name}: {body}");
    }
    let labels = b.text("section[aria-labelledby=labels]").await;
    assert!(labels.contains("Not known to the hub"), "{labels}");
    let config = b.text("section[aria-labelledby=config]").await;
    assert!(config.contains("Not known to the hub"), "{config}");
    b.screenshot("hub-cluster-type").await;

    // The workload: where it runs.
    b.goto("/workloads/hello").await;
    let placements = b.text("table.placements").await;
    for needle in ["dev", "prod", "drone", "large", "hello-dev", "hello-prod"] {
        assert!(placements.contains(needle), "{needle}: {placements}");
    }
    b.screenshot("hub-workload").await;

    // The cluster and its report history.
    b.goto("/environments/dev/clusters/drone-2").await;
    assert_eq!(b.title().await, "Cluster drone-2 · Kalypso fleet");
    let reports = b.text("table.reports").await;
    assert!(
        reports.contains("Kustomization/flux-system/platform") && reports.contains("health check failed"),
        "{reports}"
    );
    b.screenshot("hub-cluster").await;

    // The Flux message's script is shown literally and does not run, on every page showing it.
    for (path, title) in [
        (
            "/environments/dev/clusters/drone-2",
            "Cluster drone-2 · Kalypso fleet",
        ),
        (
            "/environments/dev/cluster-types/drone",
            "drone in dev · Kalypso fleet",
        ),
        ("/promotions", "Promotions · Kalypso fleet"),
    ] {
        b.goto(path).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(b.title().await, title, "{path}");
        assert_eq!(
            b.js("return typeof window.__kalypsoXss").await,
            "undefined",
            "{path}: the message's script ran"
        );
        let shown = b.js("return document.body.innerText").await;
        assert!(
            shown.as_str().unwrap_or_default().contains(XSS),
            "{path}: the message is not shown literally"
        );
    }

    // Unknown names give the 404 page.
    for (path, message) in [
        (
            "/environments/dev/cluster-types/blimp",
            "There is no cluster type \"blimp\" in environment \"dev\".",
        ),
        (
            "/environments/qa/clusters/drone-1",
            "There is no environment \"qa\".",
        ),
        (
            "/environments/dev/clusters/nope",
            "There is no cluster \"nope\" in environment \"dev\".",
        ),
        ("/workloads/nope", "There is no workload \"nope\"."),
        ("/?environment=qa", "There is no environment \"qa\"."),
    ] {
        b.goto(path).await;
        assert_eq!(b.title().await, "Not found · Kalypso fleet", "{path}");
        assert_eq!(b.text(".error-page .message").await, message, "{path}");
    }
    b.screenshot("hub-not-found").await;
    b.close().await;
}

// ---------------------------------------------------------------------------------------
// Without a browser: routing and protection

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_serves_the_dashboard_beside_its_api_and_protects_it_with_the_api_token() {
    let tmp = tempfile::tempdir().unwrap();
    let db = |name: &str| format!("sqlite://{}", tmp.path().join(name).display());

    // Without a token: pages, API and health on one port.
    let hub = start(HubConfig::new(db("open.db"))).await;
    let mut c = HubClient::new(hub.addr);
    post(
        &mut c,
        &flux(
            "kustomization-failed.json",
            "dev",
            "drone-1",
            "drone",
            &"a".repeat(40),
            60,
        ),
    )
    .await;
    for (path, status) in [
        ("/", 200),
        ("/promotions", 200),
        ("/environments/dev/clusters/drone-1", 200),
        ("/environments/dev/cluster-types/drone", 200),
        ("/assets/dashboard.js", 200),
        ("/healthz", 200),
        ("/readyz", 200),
        ("/api/v1/clusters", 200),
        ("/workloads/nope", 404),
        ("/no/such/page", 404),
    ] {
        let r = c.get(path, &[]).await.unwrap();
        assert_eq!(r.status, status, "{path}");
    }
    // Without a control plane the hub cannot tell which commit a cluster should run: its
    // platform state is unknown, shown as reconciling (the API says "unknown").
    let page = String::from_utf8(c.get("/", &[]).await.unwrap().body).unwrap();
    assert!(page.contains("data-state=\"reconciling\""), "{page}");

    // With a token: the dashboard needs it too, and never shows it.
    let token = "dashboard-s3cret-token";
    let mut config = HubConfig::new(db("protected.db"));
    config.api_token = Some(kalypso_git::redact::Secret::new(token));
    let hub = start(config.clone()).await;
    let mut c = HubClient::new(hub.addr);
    let bearer = format!("Bearer {token}");
    for path in ["/", "/promotions", "/events", "/api/v1/clusters"] {
        let r = c.get(path, &[]).await.unwrap();
        assert_eq!(r.status, 401, "{path}");
    }
    let r = c.get("/", &[("authorization", bearer.as_str())]).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(!String::from_utf8_lossy(&r.body).contains(token));
    assert_eq!(c.get("/healthz", &[]).await.unwrap().status, 200);

    // --dashboard-public: the pages without the token, the API still with it.
    config.database = db("public.db");
    config.dashboard = DashboardMode::Public;
    let hub = start(config.clone()).await;
    let mut c = HubClient::new(hub.addr);
    let r = c.get("/", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert!(!String::from_utf8_lossy(&r.body).contains(token));
    assert_eq!(c.get("/api/v1/clusters", &[]).await.unwrap().status, 401);

    // --no-dashboard: the API only.
    config.database = db("off.db");
    config.dashboard = DashboardMode::Off;
    let hub = start(config).await;
    let mut c = HubClient::new(hub.addr);
    assert_eq!(c.get("/", &[]).await.unwrap().status, 404);
    assert_eq!(c.get("/healthz", &[]).await.unwrap().status, 200);
}
