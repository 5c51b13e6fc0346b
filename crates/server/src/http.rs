//! The daemon's HTTP surface, as an axum [`Router`] built by [`app`] so that tests can call
//! it without a socket: `/healthz` (the process runs), `/readyz` (the control plane has
//! been read), `/metrics` (Prometheus), `/status` (JSON: each environment's last result, its
//! last failure and when it is polled next), and `POST /webhook` (a GitHub or GitLab push
//! event makes every environment poll at once; when a secret is configured, GitHub's HMAC
//! signature or GitLab's token is checked first).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kalypso_git::redact::Secret;
use serde::Serialize;
use tokio::sync::{Notify, watch};

use crate::metrics::{Metrics, WebhookLabels};

/// The latest result of one environment, as `/status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvStatus {
    /// The commits it was last built from.
    pub revisions: String,
    /// `delivered`, `up_to_date`, `render_failed`, `error`.
    pub result: String,
    /// What was delivered, or what went wrong.
    pub detail: String,
    /// Unix time of the last successful delivery.
    pub last_success: Option<u64>,
    /// When the last render failed: every error, as `render` prints it (code, file, line,
    /// object, field and message), so that `/status` says why, not only that.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
    /// Polls of this environment so far.
    pub polls: u64,
    /// Polls in a row that ended in an error (0 after a success): the environment backs off
    /// for `initialBackoff × 2^(n-1)`, at most `maxBackoff`.
    #[serde(skip_serializing_if = "is_zero")]
    pub consecutive_failures: u32,
    /// Unix time of the next poll (a webhook push makes it sooner).
    pub next_poll: Option<u64>,
    /// While failing: the wait before the next attempt, as `4s` or `1m30s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in: Option<String>,
    /// The last failure, kept after later successes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<LastFailure>,
}

/// An environment's last failure, as `/status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LastFailure {
    /// Unix time it happened.
    pub at: u64,
    /// `error` (reading or delivering failed, retried with backoff) or `render_failed`
    /// (the control plane has errors; not retried until its commits change).
    pub result: String,
    /// What went wrong.
    pub detail: String,
    /// Every render error, as `render` prints it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

struct Shared {
    metrics: Metrics,
    ready: AtomicBool,
    trigger: Notify,
    triggers: watch::Sender<u64>,
    webhook_secret: Option<Secret>,
    passes: watch::Sender<u64>,
    status: Mutex<BTreeMap<String, EnvStatus>>,
}

/// What the HTTP handlers and the poll loop share.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("ready", &self.is_ready())
            .field("webhook_secret", &self.0.webhook_secret)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// A fresh state; webhooks must be signed with `webhook_secret` when one is given.
    pub fn new(webhook_secret: Option<Secret>) -> AppState {
        AppState(Arc::new(Shared {
            metrics: Metrics::new(),
            ready: AtomicBool::new(false),
            trigger: Notify::new(),
            triggers: watch::channel(0).0,
            webhook_secret,
            passes: watch::channel(0).0,
            status: Mutex::new(BTreeMap::new()),
        }))
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// Marks the daemon ready (the control plane has been read once).
    pub fn set_ready(&self) {
        self.0.ready.store(true, Ordering::SeqCst);
    }

    /// Whether the daemon is ready.
    pub fn is_ready(&self) -> bool {
        self.0.ready.load(Ordering::SeqCst)
    }

    /// Asks every environment to poll now (kept if one is busy: its next wait ends at once).
    pub fn trigger(&self) {
        self.0.trigger.notify_one();
        self.0.triggers.send_modify(|n| *n += 1);
    }

    /// Completes when a poll was asked for (one waiter; a request made before the call
    /// counts).
    pub async fn triggered(&self) {
        self.0.trigger.notified().await;
    }

    /// Poll requests, for each environment's task to wait on: `changed()` completes at the
    /// next request, or at once if one came since the receiver last looked.
    pub fn triggers(&self) -> watch::Receiver<u64> {
        self.0.triggers.subscribe()
    }

    /// The number of completed polls of any environment, to wait on.
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.0.passes.subscribe()
    }

    /// Records a completed poll of an environment.
    pub fn pass_done(&self) {
        self.0.passes.send_modify(|n| *n += 1);
    }

    /// Records an environment's latest result.
    pub fn set_status(&self, environment: &str, status: EnvStatus) {
        self.0
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(environment.to_owned(), status);
    }

    /// Changes an environment's latest result in place (a default one if it has none).
    pub fn update_status(&self, environment: &str, f: impl FnOnce(&mut EnvStatus)) {
        let mut all = self.0.status.lock().unwrap_or_else(PoisonError::into_inner);
        f(all.entry(environment.to_owned()).or_default());
    }

    /// Forgets an environment (it is no longer in the control plane).
    pub fn remove_status(&self, environment: &str) {
        self.0
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(environment);
    }

    /// An environment's latest result.
    pub fn status(&self, environment: &str) -> Option<EnvStatus> {
        self.0
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(environment)
            .cloned()
    }

    fn all_status(&self) -> BTreeMap<String, EnvStatus> {
        self.0
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The router.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .route("/webhook", post(webhook))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the control plane has not been read yet\n",
        )
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let mut response = state.metrics().encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

async fn status(State(state): State<AppState>) -> Response {
    axum::Json(serde_json::json!({
        "ready": state.is_ready(),
        "environments": state.all_status(),
    }))
    .into_response()
}

async fn webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let count = |result: &str| {
        state
            .metrics()
            .webhooks
            .get_or_create(&WebhookLabels {
                result: result.to_owned(),
            })
            .inc();
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    // GitLab says who it is with X-Gitlab-Event and authenticates with the secret itself
    // (X-Gitlab-Token); GitHub signs the body (X-Hub-Signature-256). Nothing is read from
    // the body before the request is authenticated.
    let gitlab = headers.contains_key("x-gitlab-event");
    if let Some(secret) = &state.0.webhook_secret {
        let (authentic, what) = if gitlab {
            let token = header("x-gitlab-token");
            (
                kalypso_git::signature::token_matches(secret.expose().as_bytes(), token.as_bytes()),
                "token",
            )
        } else {
            let signature = header("x-hub-signature-256");
            (
                kalypso_git::signature::verify(secret.expose().as_bytes(), &body, signature),
                "signature",
            )
        };
        if !authentic {
            count("rejected");
            tracing::warn!(
                forge = if gitlab { "gitlab" } else { "github" },
                "webhook rejected: missing or invalid {what}"
            );
            return (
                StatusCode::UNAUTHORIZED,
                if gitlab {
                    "invalid token\n"
                } else {
                    "invalid signature\n"
                },
            );
        }
    }
    let push = if gitlab {
        match header("x-gitlab-event") {
            "Push Hook" => true,
            _ => {
                count("ignored");
                return (StatusCode::OK, "event ignored\n");
            }
        }
    } else {
        match header("x-github-event") {
            "ping" => {
                count("ignored");
                return (StatusCode::OK, "pong\n");
            }
            "push" => true,
            _ => false,
        }
    };
    if !push {
        count("ignored");
        return (StatusCode::OK, "event ignored\n");
    }
    let payload = serde_json::from_slice::<serde_json::Value>(&body).ok();
    if gitlab
        && payload
            .as_ref()
            .and_then(|v| v.get("object_kind"))
            .and_then(|k| k.as_str())
            != Some("push")
    {
        count("invalid");
        tracing::warn!("GitLab push webhook without a push event payload: ignored");
        return (StatusCode::BAD_REQUEST, "not a push event payload\n");
    }
    count("accepted");
    let reference = payload
        .as_ref()
        .and_then(|v| v.get("ref").and_then(|r| r.as_str()).map(str::to_owned))
        .unwrap_or_default();
    tracing::info!(
        forge = if gitlab { "gitlab" } else { "github" },
        reference = %kalypso_git::redact(&reference),
        "push webhook: polling now"
    );
    state.trigger();
    (StatusCode::ACCEPTED, "poll scheduled\n")
}
