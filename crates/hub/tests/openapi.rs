//! The OpenAPI document shipped in `docs/hub-openapi.json` is the one the hub generates and
//! serves: this test fails when they differ. After a change to the API, write the new one with
//!
//! ```sh
//! KALYPSO_UPDATE_OPENAPI=1 cargo test -p kalypso-hub --test openapi
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use kalypso_hub::client::Client;
use kalypso_hub::{HubConfig, openapi};

fn shipped() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/hub-openapi.json")
}

#[test]
fn the_shipped_document_is_the_generated_one() {
    let generated = openapi::document_json();
    if std::env::var_os("KALYPSO_UPDATE_OPENAPI").is_some() {
        std::fs::write(shipped(), &generated).unwrap();
    }
    let committed = std::fs::read_to_string(shipped()).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/hub-openapi.json differs from the document the hub generates: run \
         KALYPSO_UPDATE_OPENAPI=1 cargo test -p kalypso-hub --test openapi and commit it"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_serves_it_without_a_token() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", tmp.path().join("hub.db").display()));
    config.api_token = Some(kalypso_git::redact::Secret::new("t0ken"));
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::dashboard::app(state, config.dashboard, kalypso_dashboard_options());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut c = Client::new(addr);
    let r = c.get("/api/v1/openapi.json", &[]).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(String::from_utf8(r.body).unwrap(), openapi::document_json());
    // The queries it describes keep their token.
    let r = c.get("/api/v1/clusters", &[]).await.unwrap();
    assert_eq!(r.status, 401);
}

fn kalypso_dashboard_options() -> kalypso_dashboard::Options {
    kalypso_dashboard::Options::default()
}
