//! Tests of the pages through the router, without a socket: states, filters, escaping,
//! pagination, 404/400/503 pages, the event stream and the assets.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use crate::demo::{HOSTILE_MESSAGE, demo_fleet, synthetic_fleet};
use crate::model::{ClusterPage, ClusterTypePage, FleetMap, PromotionView, Report, WorkloadPage};

async fn get(app: &Router, uri: &str) -> (StatusCode, HeaderMap, String) {
    let response = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).expect("utf-8"))
}

fn demo() -> (Arc<MemorySource>, Router) {
    let source = Arc::new(MemorySource::new(demo_fleet()));
    let app = router(Arc::clone(&source));
    (source, app)
}

/// The `data-state` of the fleet-map cell linking to `env`/`ct`.
fn cell_state(html: &str, env: &str, ct: &str) -> Option<String> {
    let link = format!("href=\"/environments/{env}/cluster-types/{ct}\"");
    let at = html.find(&link)?;
    let before = &html[..at];
    let td = before.rfind("<td")?;
    let attrs = &before[td..];
    let start = attrs.find("data-state=\"")? + "data-state=\"".len();
    let end = attrs[start..].find('"')?;
    Some(attrs[start..start + end].to_owned())
}

#[tokio::test]
async fn the_fleet_map_shows_each_cells_state_in_words_and_colour() {
    let (_, app) = demo();
    let (status, headers, html) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/html"))
    );
    assert!(
        headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .is_ok_and(|v| v.contains("script-src 'self'"))
    );
    assert!(html.starts_with("<!DOCTYPE html><html lang=\"en\">"));
    assert!(html.contains("<title>Fleet map · Kalypso fleet</title>"));
    for (env, ct, state) in [
        ("dev", "command-center", "compliant"),
        ("dev", "drone", "stale"),
        ("dev", "edge-lab", "no-clusters"),
        ("stage", "drone", "failed"),
        ("prod", "small", "reconciling"),
        ("prod", "large", "compliant"),
    ] {
        assert_eq!(cell_state(&html, env, ct).as_deref(), Some(state), "{env}/{ct}");
    }
    // Each badge carries its word, not only its colour.
    for label in ["Compliant", "Stale", "No clusters", "Failed", "Reconciling"] {
        assert!(html.contains(&format!(" {label}</span>")), "{label}");
    }
    // The control-plane commit each environment runs.
    let dev_commit = demo_fleet().environments[0]
        .control_plane_commit
        .clone()
        .unwrap_or_default();
    assert!(html.contains(&format!("title=\"{dev_commit}\"")));
    // Filter controls have labels.
    for id in ["f-environment", "f-state", "f-cluster-type"] {
        assert!(html.contains(&format!("<label for=\"{id}\"")), "{id}");
    }
    assert!(html.contains("th scope=\"col\""));
}

#[tokio::test]
async fn filters_in_the_query_string_narrow_the_map() {
    let (_, app) = demo();
    let (status, _, html) = get(&app, "/?environment=stage&state=failed").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cell_state(&html, "stage", "drone").as_deref(), Some("failed"));
    assert!(!html.contains("/environments/dev/cluster-types/"));
    assert!(!html.contains("cluster-types/large"));
    assert!(html.contains("<option value=\"stage\" selected>"));
    assert!(html.contains("<option value=\"failed\" selected>"));

    let (_, _, html) = get(&app, "/?cluster-type=dro").await;
    assert!(html.contains("cluster-types/drone"));
    assert!(!html.contains("cluster-types/large"));

    let (_, _, html) = get(&app, "/?state=no-clusters").await;
    assert!(html.contains("cluster-types/edge-lab"));
    assert!(!html.contains("cluster-types/drone\""));
}

#[tokio::test]
async fn bad_input_gives_clear_404_and_400_pages() {
    let (_, app) = demo();
    for (uri, status, text) in [
        (
            "/?environment=qa",
            StatusCode::NOT_FOUND,
            "There is no environment &quot;qa&quot;.",
        ),
        (
            "/environments/dev/cluster-types/blimp",
            StatusCode::NOT_FOUND,
            "There is no cluster type &quot;blimp&quot; in environment &quot;dev&quot;.",
        ),
        (
            "/environments/qa/cluster-types/drone",
            StatusCode::NOT_FOUND,
            "There is no environment &quot;qa&quot;.",
        ),
        (
            "/environments/qa/clusters/drone-dev-1",
            StatusCode::NOT_FOUND,
            "There is no environment &quot;qa&quot;.",
        ),
        (
            "/environments/dev/clusters/drone-dev-99",
            StatusCode::NOT_FOUND,
            "There is no cluster &quot;drone-dev-99&quot;",
        ),
        (
            "/workloads/nope",
            StatusCode::NOT_FOUND,
            "There is no workload &quot;nope&quot;.",
        ),
        (
            "/no/such/page",
            StatusCode::NOT_FOUND,
            "There is no page at this address.",
        ),
        (
            "/?state=broken",
            StatusCode::BAD_REQUEST,
            "unknown state &quot;broken&quot;",
        ),
        (
            "/?page=zero",
            StatusCode::BAD_REQUEST,
            "page must be a positive number",
        ),
        (
            "/environments/dev/cluster-types/drone?state=x",
            StatusCode::BAD_REQUEST,
            "unknown state",
        ),
    ] {
        let (got, _, html) = get(&app, uri).await;
        assert_eq!(got, status, "{uri}");
        assert!(html.contains(text), "{uri}: {html}");
        assert!(html.contains("href=\"/\""), "{uri}: a way back");
    }
    // A name with markup in the URL is escaped in the 404 page.
    let (status, _, html) = get(&app, "/workloads/%3Cscript%3Ealert(1)%3C%2Fscript%3E").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!html.contains("<script>alert"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[tokio::test]
async fn messages_from_clusters_are_escaped_everywhere() {
    let (_, app) = demo();
    let escaped = "&lt;script&gt;window.__kalypsoXss = 1;";
    for uri in [
        "/environments/stage/clusters/drone-stage-2",
        "/environments/stage/cluster-types/drone",
        "/promotions",
    ] {
        let (status, _, html) = get(&app, uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}");
        assert!(!html.contains(HOSTILE_MESSAGE), "{uri}");
        assert!(!html.contains("<script>window"), "{uri}");
        assert!(!html.contains("<img src=x"), "{uri}");
        assert!(html.contains(escaped), "{uri}");
    }
}

#[tokio::test]
async fn names_with_markup_are_escaped_and_links_encoded() {
    let source = Arc::new(MemorySource::new(demo_fleet()));
    source.update(|data| {
        if let Some(env) = data.environment_mut("dev") {
            let mut ct = env.cluster_types[0].clone();
            ct.name = "<b>bold</b>".to_owned();
            env.put_cluster_type(ct);
        }
    });
    let app = router(source);
    let (_, _, html) = get(&app, "/").await;
    assert!(!html.contains("<b>bold</b>"));
    assert!(html.contains("&lt;b&gt;bold&lt;/b&gt;"));
    assert!(html.contains("/environments/dev/cluster-types/%3Cb%3Ebold%3C%2Fb%3E"));
    let (status, _, html) = get(&app, "/environments/dev/cluster-types/%3Cb%3Ebold%3C%2Fb%3E").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Cluster type &lt;b&gt;bold&lt;/b&gt;"));
}

#[tokio::test]
async fn the_promotion_view_says_where_each_commit_is_and_what_blocks() {
    let (_, app) = demo();
    let (status, _, html) = get(&app, "/promotions").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Raise prometheus retention to 15d"));
    assert!(html.contains("Blocked by"));
    assert!(
        html.contains("drone-stage-1</a> (drone) failed: <span class=\"message\">kustomize build failed")
    );
    assert!(html.contains("Lead time <strong>27 min</strong>"));
    assert!(html.contains("Not promoted"));
    assert!(html.contains("data-stage=\"superseded\"") || html.contains("data-stage=\"compliant\""));
}

#[tokio::test]
async fn drill_down_pages_show_provenance_placements_and_history() {
    let (_, app) = demo();
    let (status, _, html) = get(&app, "/environments/dev/cluster-types/drone").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<code>region=east-us</code>"));
    assert!(html.contains("data-key=\"DATABASE_URL\""));
    assert!(html.contains("<span class=\"configmap\">restricted-config</span>"));
    assert!(html.contains("overrides east-us-config"));
    assert!(html.contains("hello-world-app-functional-test"));
    assert!(html.contains("https://github.com/contoso/kalypso-app-gitops"));
    assert!(html.contains("href=\"/workloads/hello-world-app\""));
    // The clusters that need attention come first.
    let stale = html.find("data-cluster=\"drone-dev-6\"");
    let compliant = html.find("data-cluster=\"drone-dev-1\"");
    assert!(stale.is_some() && compliant.is_some() && stale < compliant);

    let (_, _, html) = get(&app, "/environments/dev/cluster-types/drone?state=stale").await;
    assert!(html.contains("drone-dev-6"));
    assert!(!html.contains("data-cluster=\"drone-dev-1\""));

    let (status, _, html) = get(&app, "/workloads/hello-world-app").await;
    assert_eq!(status, StatusCode::OK);
    for (env, ct) in [
        ("dev", "drone"),
        ("dev", "large"),
        ("stage", "drone"),
        ("prod", "small"),
    ] {
        assert!(
            html.contains(&format!("href=\"/environments/{env}/cluster-types/{ct}\"")),
            "{env}/{ct}"
        );
    }

    let (status, _, html) = get(&app, "/environments/dev/clusters/drone-dev-6").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("no report for 3h"));
    assert!(html.contains("1–1 of 1 reports"));
    let (_, _, html) = get(&app, "/environments/dev/clusters/drone-dev-5").await;
    assert!(html.contains("1–3 of 3 reports"));
    // Newest first.
    let newest = html.find("Detecting drift");
    let oldest = html.find("Reconciliation in progress");
    assert!(newest.is_some() && oldest.is_some() && newest < oldest);
}

#[tokio::test]
async fn a_huge_fleet_is_paged_not_listed() {
    let source = Arc::new(MemorySource::new(synthetic_fleet(3, 120, 12_000)));
    let app = router(source);
    let (status, _, html) = get(&app, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(html.matches("<th scope=\"row\">").count(), 50);
    assert!(html.contains("1–50 of 120 cluster types · page 1 of 3"));
    assert!(html.contains("href=\"/?page=2\" rel=\"next\""));
    let (_, _, html) = get(&app, "/?page=3").await;
    assert_eq!(html.matches("<th scope=\"row\">").count(), 20);
    let (_, _, html) = get(&app, "/?state=failed&size=10&page=2").await;
    assert_eq!(html.matches("<th scope=\"row\">").count(), 2);
    assert!(html.contains("11–12 of 12 cluster types"));
    assert!(html.contains("href=\"/?state=failed&amp;page=1&amp;size=10\" rel=\"prev\""));
    let (_, _, html) = get(&app, "/").await;
    assert!(html.contains("36,000 clusters in 3 environments"));
    let (_, _, html) = get(&app, "/environments/dev/cluster-types/type-0001?size=10&page=2").await;
    assert_eq!(html.matches("data-cluster=").count(), 10);
    assert!(html.contains("11–20 of 100 clusters · page 2 of 10"));
    assert!(html.contains("page=3&amp;size=10"));
    // Past the end: an empty page, not an error.
    let (status, _, _) = get(&app, "/?page=99").await;
    assert_eq!(status, StatusCode::OK);
}

struct Down;

impl FleetSource for Down {
    async fn fleet(&self, _: &FleetFilter) -> Result<FleetMap, SourceError> {
        Err(SourceError::Unavailable("database is starting".to_owned()))
    }
    async fn promotions(&self, _: &PromotionFilter) -> Result<PromotionView, SourceError> {
        Err(SourceError::Unavailable("database is starting".to_owned()))
    }
    async fn cluster_type(
        &self,
        _: &str,
        _: &str,
        _: &ClusterQuery,
    ) -> Result<Option<ClusterTypePage>, SourceError> {
        Err(SourceError::Internal("broken".to_owned()))
    }
    async fn workload(&self, _: &str, _: Page) -> Result<Option<WorkloadPage>, SourceError> {
        Err(SourceError::Unavailable("database is starting".to_owned()))
    }
    async fn cluster(&self, _: &str, _: &str, _: Page) -> Result<Option<ClusterPage>, SourceError> {
        Err(SourceError::Unavailable("database is starting".to_owned()))
    }
    async fn rollout(&self, _: &str) -> Result<Option<kalypso_hub_api::EnvironmentRollout>, SourceError> {
        Err(SourceError::Unavailable("database is starting".to_owned()))
    }
    async fn version(&self) -> Result<u64, SourceError> {
        Ok(1)
    }
}

#[tokio::test]
async fn an_unavailable_source_gives_503() {
    let app = router(Arc::new(Down));
    for uri in [
        "/",
        "/promotions",
        "/workloads/x",
        "/environments/a/clusters/b",
        "/environments/a/rollout",
    ] {
        let (status, _, html) = get(&app, uri).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        assert!(html.contains("database is starting"));
    }
    let (status, _, _) = get(&app, "/environments/a/cluster-types/b").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
}

#[tokio::test]
async fn events_announce_the_version_and_its_changes() {
    let source = Arc::new(MemorySource::new(demo_fleet()));
    let app = router_with(
        Arc::clone(&source),
        Options {
            poll_interval: Duration::from_millis(20),
        },
    );
    let response = app
        .oneshot(Request::get("/events").body(Body::empty()).expect("request"))
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/event-stream"))
    );
    let mut body = response.into_body();
    let first = body
        .frame()
        .await
        .expect("frame")
        .expect("data")
        .into_data()
        .expect("data");
    assert_eq!(String::from_utf8_lossy(&first), "event: version\ndata: 1\n\n");
    source.report(
        "dev",
        "drone-dev-1",
        Report {
            at: 1,
            revision: None,
            state: Some(ClusterState::Failed),
            message: None,
        },
    );
    let next = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("in time")
        .expect("frame")
        .expect("data")
        .into_data()
        .expect("data");
    assert_eq!(String::from_utf8_lossy(&next), "event: version\ndata: 2\n\n");
}

#[tokio::test]
async fn a_report_changes_the_cell_and_compliance_completes_a_promotion() {
    let (source, app) = demo();
    assert!(source.report(
        "prod",
        "large-prod-2",
        Report {
            at: 10,
            revision: None,
            state: Some(ClusterState::Failed),
            message: Some("Health check failed".to_owned()),
        },
    ));
    let (_, _, html) = get(&app, "/").await;
    assert_eq!(cell_state(&html, "prod", "large").as_deref(), Some("failed"));
    assert!(!source.report("prod", "nope", Report::default()));
    assert!(!source.report("qa", "large-prod-2", Report::default()));

    // Every prod cluster compliant: the current prod promotion is complete.
    for cluster in ["large-prod-2", "small-prod-4"] {
        source.report(
            "prod",
            cluster,
            Report {
                at: 20,
                state: Some(ClusterState::Compliant),
                ..Report::default()
            },
        );
    }
    let compliant = source.read(|data| {
        data.environment("prod")
            .and_then(|env| env.promotions.last())
            .and_then(|p| p.compliant_at)
    });
    assert_eq!(compliant, Some(20));
}

#[tokio::test]
async fn assets_are_served_by_the_crate() {
    let (_, app) = demo();
    let (status, headers, css) = get(&app, "/assets/dashboard.css").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/css"))
    );
    assert!(css.contains(".badge"));
    let (status, headers, js) = get(&app, "/assets/dashboard.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/javascript"))
    );
    assert!(js.contains("EventSource"));
    let (status, headers, _) = get(&app, "/environments/dev").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers[header::LOCATION], "/?environment=dev");
}

#[tokio::test]
async fn the_dashboard_merges_into_a_hub_router() {
    let (_, dashboard) = demo();
    let hub = Router::new()
        .route("/api/v1/health", axum::routing::get(|| async { "ok" }))
        .merge(dashboard);
    let (status, _, body) = get(&hub, "/api/v1/health").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
    let (status, _, html) = get(&hub, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Fleet map"));
    let (status, _, html) = get(&hub, "/api/v1/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("There is no page at this address."));
}

#[tokio::test]
async fn the_rollout_page_is_served_per_environment_and_unknown_ones_are_404() {
    let source = Arc::new(MemorySource::new(demo_fleet()));
    let app = router(source);
    let env = demo_fleet().environments[0].name.clone();
    let (status, _, html) = get(&app, &format!("/environments/{env}/rollout")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("No progressive rollout"), "{html}");
    assert!(html.contains("data-version="));
    let (status, _, html) = get(&app, "/environments/nowhere/rollout").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("nowhere"));
    // The fleet map links each environment's rollout.
    let (_, _, html) = get(&app, "/").await;
    assert!(html.contains(&format!("href=\"/environments/{env}/rollout\"")));
}
