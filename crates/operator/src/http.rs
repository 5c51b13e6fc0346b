//! `/healthz`, `/readyz` and `/metrics`.
//!
//! The same stack as `kalypso serve` (axum and prometheus-client): the router is built by
//! [`app`] so that tests call it without a socket. `/readyz` turns ready once the operator
//! has checked its CRDs and either leads with warm caches or stands by as a follower.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    ready: AtomicBool,
    registry: Registry,
}

impl Health {
    /// Health reporting the metrics in `registry`.
    pub fn new(registry: Registry) -> Health {
        Health {
            ready: AtomicBool::new(false),
            registry,
        }
    }

    /// Marks the operator ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the operator is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

/// The router.
pub fn app(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, &'static str) {
    if health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics(State(health): State<Arc<Health>>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &health.registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {e}\n"),
        )
            .into_response();
    }
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

/// Why the endpoints could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve HTTP on {addr}: {source}")]
pub struct Error {
    /// The address.
    pub addr: SocketAddr,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Serves `router` on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error { addr, source })?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error { addr, source })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use crate::metrics::Metrics;

    async fn get(app: Router, path: &str) -> (StatusCode, String) {
        let response = app
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn endpoints() {
        let metrics = Metrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.delivery("pushed");
        let health = Arc::new(Health::new(registry));
        assert_eq!(get(app(health.clone()), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(app(health.clone()), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.set_ready(true);
        assert_eq!(get(app(health.clone()), "/readyz").await.0, StatusCode::OK);
        let (status, text) = get(app(health), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            text.contains("kalypso_operator_deliveries_total{result=\"pushed\"} 1"),
            "{text}"
        );
    }
}
