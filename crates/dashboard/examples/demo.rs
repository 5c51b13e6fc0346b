//! Serves the dashboard over the demo fleet: `cargo run -p kalypso-dashboard --example demo
//! [-- ADDR]` (default `127.0.0.1:8080`). Every 10 seconds a drone in `stage` flips between
//! failed and compliant, so the pages can be watched updating themselves.

use std::sync::Arc;
use std::time::Duration;

use kalypso_dashboard::demo::{DEMO_NOW, demo_fleet};
use kalypso_dashboard::model::{ClusterState, Report};
use kalypso_dashboard::{MemorySource, router};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let source = Arc::new(MemorySource::new(demo_fleet()));
    let flipper = Arc::clone(&source);
    tokio::spawn(async move {
        let mut tick = 0u64;
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            tick += 1;
            let failed = tick % 2 == 1;
            flipper.report(
                "stage",
                "drone-stage-3",
                Report {
                    at: DEMO_NOW + tick * 10,
                    revision: None,
                    state: Some(if failed {
                        ClusterState::Failed
                    } else {
                        ClusterState::Compliant
                    }),
                    message: Some(if failed {
                        "Health check failed after 5m0s: timeout waiting for deployment/prometheus".to_owned()
                    } else {
                        "Applied revision".to_owned()
                    }),
                },
            );
        }
    });
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("kalypso dashboard demo on http://{}", listener.local_addr()?);
    axum::serve(listener, router(source)).await
}
