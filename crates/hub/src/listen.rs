//! Serving HTTP within limits: the hub faces every cluster of a fleet, so a client that opens
//! connections and never finishes a request, or trickles a body, must cost a bounded amount
//! and never keep reports of other clusters out.
//!
//! - At most [`Limits::max_connections`] connections are served at once; the next one waits in
//!   the listen backlog until a connection closes (it is not refused).
//! - A connection must send a complete request head within [`Limits::idle_timeout`] of being
//!   accepted or of its previous answer (slow headers and idle keep-alive connections alike),
//!   or it is closed.
//! - A request body must arrive whole within [`Limits::body_timeout`] (408) and be at most
//!   [`MAX_BODY`] bytes (413, answered from `Content-Length` before any of it is read, or as
//!   soon as a chunked body passes the limit).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::http::{ApiError, MAX_BODY, too_large};

/// The connection and request limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// The time a connection may take to send a complete request head, counted from its
    /// acceptance or from its previous answer.
    pub idle_timeout: Duration,
    /// The time a request body may take to arrive whole.
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes, then stops
/// accepting, lets every connection finish the request it is serving, and returns once all
/// are closed.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app.layer(axum::middleware::from_fn_with_state(
        limits.body_timeout,
        read_body,
    ));
    let max = u32::try_from(limits.max_connections.max(1)).unwrap_or(u32::MAX);
    let slots = Arc::new(Semaphore::new(max as usize));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        let idle_timeout = limits.idle_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(idle_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stop.wait_for(|stop| *stop) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it closes: all slots back means all closed.
    let _all = slots.acquire_many(max).await;
    Ok(())
}

/// Reads the request body whole, within the body timeout and [`MAX_BODY`], before the handler
/// sees the request.
async fn read_body(State(body_timeout): State<Duration>, request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY as u64) {
        return refuse(too_large());
    }
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(body_timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) if is_over_limit(&error) => return refuse(too_large()),
        Ok(Err(error)) => {
            return refuse(ApiError::new(
                StatusCode::BAD_REQUEST,
                Some("body"),
                format!("the body could not be read: {error}"),
            ));
        }
        Err(_) => {
            return refuse(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                Some("body"),
                format!("the body did not arrive within {} s", body_timeout.as_secs_f64()),
            ));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// Whether reading stopped at [`MAX_BODY`] (rather than on a broken connection).
fn is_over_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The error answer, closing the connection: the rest of the body is never read.
fn refuse(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    response
}
