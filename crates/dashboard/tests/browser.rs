//! The dashboard in a real browser: headless Chromium driven through chromedriver (WebDriver),
//! against the router served on 127.0.0.1 over the demo fleet in a `MemorySource`.
//!
//! They need Debian's `chromium` and `chromium-driver` packages (or `KALYPSO_CHROMIUM` and
//! `KALYPSO_CHROMEDRIVER` pointing at the binaries). Without them the tests are skipped, and the
//! test run says so in one line; with `KALYPSO_TEST_REQUIRE_SERVICES=1` (as CI runs them) they
//! fail instead. Nothing is downloaded. Each test
//! saves screenshots of the pages it visits under `target/dashboard-screenshots/`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use kalypso_dashboard::demo::{DEMO_NOW, demo_fleet, synthetic_fleet};
use kalypso_dashboard::memory::FleetData;
use kalypso_dashboard::model::{ClusterState, Report};
use kalypso_dashboard::{MemorySource, Options, router_with};
use kalypso_testkit::browser::Browser;

/// The dashboard served over a fleet in memory, and a browser looking at it (the browser's
/// helpers through `Deref`).
struct Harness {
    source: Arc<MemorySource>,
    browser: Browser,
}

impl std::ops::Deref for Harness {
    type Target = Browser;

    fn deref(&self) -> &Browser {
        &self.browser
    }
}

impl Harness {
    /// Starts everything over the demo fleet; `None` when the browser is missing and the tests
    /// may be skipped.
    async fn start() -> Option<Harness> {
        Harness::start_with(demo_fleet).await
    }

    /// Starts everything over the fleet `fleet` makes.
    async fn start_with(fleet: impl FnOnce() -> FleetData) -> Option<Harness> {
        let source = Arc::new(MemorySource::new(fleet()));
        let app = router_with(
            Arc::clone(&source),
            Options {
                poll_interval: Duration::from_millis(150),
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let browser = Browser::start(&format!("http://{addr}"), "the dashboard's browser tests").await?;
        Some(Harness { source, browser })
    }

    async fn close(self) {
        self.browser.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_map_shows_states_and_updates_live_and_promotions_say_what_blocks() {
    let Some(h) = Harness::start().await else {
        return;
    };
    h.goto("/").await;
    assert_eq!(
        h.client.title().await.expect("title"),
        "Fleet map · Kalypso fleet"
    );
    assert_eq!(h.js("return document.documentElement.lang").await, "en");
    for (env, ct, state) in [
        ("dev", "command-center", "compliant"),
        ("dev", "drone", "stale"),
        ("dev", "edge-lab", "no-clusters"),
        ("stage", "drone", "failed"),
        ("prod", "small", "reconciling"),
        ("prod", "large", "compliant"),
    ] {
        assert_eq!(h.cell_state(env, ct).await.as_deref(), Some(state), "{env}/{ct}");
    }
    // The word is on screen, not only the colour.
    let cell = h
        .text("td[data-state] a[href=\"/environments/stage/cluster-types/drone\"]")
        .await;
    assert!(cell.contains("Failed") && cell.contains("2 failed"), "{cell}");
    h.screenshot("fleet-map").await;

    // Wait until the page has its event stream, then break a prod cluster.
    let deadline = Instant::now() + Duration::from_secs(10);
    while h
        .js("return document.getElementById('live-status').dataset.state || ''")
        .await
        != "ok"
    {
        assert!(Instant::now() < deadline, "the event stream did not open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.js("window.__notReloaded = true;\
          document.querySelector('a[href=\"/environments/prod/cluster-types/large\"]').focus();\
          return null;")
        .await;
    assert!(h.source.report(
        "prod",
        "large-prod-2",
        Report {
            at: DEMO_NOW + 60,
            revision: None,
            state: Some(ClusterState::Failed),
            message: Some(
                "Health check failed after 5m0s: timeout waiting for deployment/prometheus".to_owned()
            ),
        },
    ));
    let deadline = Instant::now() + Duration::from_secs(15);
    while h.cell_state("prod", "large").await.as_deref() != Some("failed") {
        assert!(
            Instant::now() < deadline,
            "the prod/large cell did not turn failed without a reload"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        h.js("return window.__notReloaded === true").await,
        true,
        "the page was reloaded instead of updated"
    );
    let status = h.text("#live-status").await;
    assert!(status.starts_with("Updated"), "{status}");
    assert_eq!(
        h.js("return document.activeElement.getAttribute('href')").await,
        "/environments/prod/cluster-types/large",
        "the update moved the keyboard focus"
    );
    h.screenshot("fleet-map-live-update").await;

    // A filtered view has a URL of its own.
    h.goto("/?environment=prod&state=failed").await;
    assert_eq!(h.cell_state("prod", "large").await.as_deref(), Some("failed"));
    assert_eq!(h.cell_state("prod", "small").await, None);
    h.screenshot("fleet-map-filtered").await;

    h.goto("/promotions").await;
    let blocked = h
        .texts("table.promotions td[data-stage=blocked]")
        .await
        .join("\n---\n");
    assert!(
        blocked.contains("large-prod-2 (large) failed: Health check failed after 5m0s"),
        "{blocked}"
    );
    assert!(
        blocked.contains("drone-stage-1 (drone) failed: kustomize build failed"),
        "{blocked}"
    );
    h.screenshot("promotions").await;
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_down_pages_show_config_provenance_placements_and_history() {
    let Some(h) = Harness::start().await else {
        return;
    };
    h.goto("/").await;
    h.client
        .find(Locator::Css("a[href=\"/environments/dev/cluster-types/drone\"]"))
        .await
        .expect("the drone cell")
        .click()
        .await
        .expect("click");
    assert_eq!(
        h.client.title().await.expect("title"),
        "drone in dev · Kalypso fleet"
    );
    let row = h.text("tr[data-key=\"DATABASE_URL\"]").await;
    assert!(
        row.contains("mysql://restricted-host:3306/mysqlrty123")
            && row.contains("restricted-config")
            && row.contains("overrides east-us-config"),
        "{row}"
    );
    let targets = h.text("section[aria-labelledby=targets]").await;
    assert!(
        targets.contains("hello-world-app-functional-test")
            && targets.contains("https://github.com/contoso/kalypso-app-gitops"),
        "{targets}"
    );
    h.screenshot("cluster-type").await;

    h.goto("/workloads/hello-world-app").await;
    let placements = h.text("table.placements").await;
    for needle in ["dev", "stage", "prod", "drone", "large", "hello-world-app-uat"] {
        assert!(placements.contains(needle), "{needle}: {placements}");
    }
    h.screenshot("workload").await;

    h.goto("/environments/dev/clusters/drone-dev-5").await;
    let reports = h.text("table.reports").await;
    assert!(
        reports.contains("Detecting drift") && reports.contains("Reconciliation in progress"),
        "{reports}"
    );
    h.screenshot("cluster").await;
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_in_a_flux_message_is_shown_and_not_run() {
    let Some(h) = Harness::start().await else {
        return;
    };
    for (path, title) in [
        (
            "/environments/stage/clusters/drone-stage-2",
            "Cluster drone-stage-2 · Kalypso fleet",
        ),
        (
            "/environments/stage/cluster-types/drone",
            "drone in stage · Kalypso fleet",
        ),
        ("/promotions", "Promotions · Kalypso fleet"),
    ] {
        h.goto(path).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(h.client.title().await.expect("title"), title, "{path}");
        assert_eq!(
            h.js("return typeof window.__kalypsoXss").await,
            "undefined",
            "{path}: the message's script ran"
        );
        let shown = h.js("return document.body.innerText").await;
        assert!(
            shown
                .as_str()
                .unwrap_or_default()
                .contains("<script>window.__kalypsoXss = 1; document.title = 'pwned';</script>"),
            "{path}: the message is not shown literally"
        );
    }
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_give_the_404_page() {
    let Some(h) = Harness::start().await else {
        return;
    };
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
            "/environments/dev/clusters/drone-1",
            "There is no cluster \"drone-1\" in environment \"dev\".",
        ),
        ("/workloads/nope", "There is no workload \"nope\"."),
        ("/?environment=qa", "There is no environment \"qa\"."),
    ] {
        h.goto(path).await;
        assert_eq!(
            h.client.title().await.expect("title"),
            "Not found · Kalypso fleet"
        );
        assert_eq!(h.text("h1").await, "Not found");
        assert_eq!(h.text(".error-page .message").await, message);
    }
    h.goto("/environments/dev/cluster-types/blimp").await;
    h.screenshot("not-found").await;
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_main_links_are_reachable_by_keyboard() {
    let Some(h) = Harness::start().await else {
        return;
    };
    h.goto("/").await;
    let mut reached = Vec::new();
    for _ in 0..30 {
        let tab = KeyActions::new("keyboard".to_owned())
            .then(KeyAction::Down {
                value: Key::Tab.into(),
            })
            .then(KeyAction::Up {
                value: Key::Tab.into(),
            });
        h.client.perform_actions(tab).await.expect("tab");
        let focused = h
            .js("var e = document.activeElement;\
                 return e.tagName + ' ' + (e.getAttribute('href') || e.id || e.textContent.trim());")
            .await;
        reached.push(focused.as_str().unwrap_or_default().to_owned());
    }
    for expected in [
        "A #main",
        "A /promotions",
        "SELECT f-environment",
        "SELECT f-state",
        "INPUT f-cluster-type",
        "BUTTON Apply filters",
        "A /environments/dev/cluster-types/drone",
    ] {
        assert!(
            reached.iter().any(|r| r == expected),
            "{expected} not reached by Tab: {reached:#?}"
        );
    }
    // The skip link comes first and moves focus to the content.
    assert_eq!(reached[0], "A #main");
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_300000_clusters_is_aggregated_and_paged() {
    let Some(h) = Harness::start_with(|| synthetic_fleet(3, 500, 100_000)).await else {
        return;
    };
    h.goto("/").await;
    let rows = h
        .js("return document.querySelectorAll('table.fleet tbody tr').length")
        .await;
    assert_eq!(rows, 50);
    let lede = h.text("p.lede").await;
    assert!(lede.starts_with("300,000 clusters in 3 environments"), "{lede}");
    let pager = h.text("nav.pager").await;
    assert!(
        pager.contains("1–50 of 500 cluster types · page 1 of 10"),
        "{pager}"
    );
    h.screenshot("fleet-map-300k").await;
    h.client
        .find(Locator::Css("nav.pager a[rel=next]"))
        .await
        .expect("a next link")
        .click()
        .await
        .expect("click");
    let pager = h.text("nav.pager").await;
    assert!(pager.contains("51–100 of 500"), "{pager}");
    assert!(
        h.client
            .current_url()
            .await
            .expect("url")
            .as_str()
            .ends_with("/?page=2")
    );
    h.goto("/?environment=prod&state=failed&cluster-type=type-00")
        .await;
    let pager = h.text("nav.pager").await;
    assert!(pager.contains("1–10 of 10 cluster types"), "{pager}");
    h.close().await;
}
