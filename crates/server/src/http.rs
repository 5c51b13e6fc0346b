//! The daemon's HTTP surface, as an axum [`Router`] built by [`app`] so that tests can call
//! it without a socket: `/healthz` (the process runs), `/readyz` (the control plane has
//! been read), `/metrics` (Prometheus), `/status` (JSON: each environment's last result, its
//! last failure and when it is polled next), and `POST /webhook` (a push event of GitHub,
//! GitLab, Gitea/Forgejo or an Azure DevOps service hook makes every environment poll at
//! once; when a secret is configured, GitHub's or Gitea's HMAC signature, GitLab's token or
//! Azure DevOps' Basic credentials are checked first).

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
    /// The environment's progressive rollout, when it has a RolloutPolicy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutView>,
}

/// An environment's progressive rollout, as `/status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutView {
    /// The RolloutPolicy.
    pub policy: String,
    /// `progressing`, `paused`, `complete`, `halted`, `rolled-back`.
    pub status: String,
    /// The environment-branch commit of the change rolled out.
    pub change: String,
    /// The waves that run the change.
    pub delivered: usize,
    /// The policy's waves, in order.
    pub waves: Vec<String>,
    /// What the last poll did or waits for.
    pub message: String,
    /// Why it failed (the wave, the clusters, Flux's messages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
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

/// Who sent a webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sender {
    GitHub,
    GitLab,
    Gitea,
    AzureDevOps,
}

impl Sender {
    fn name(self) -> &'static str {
        match self {
            Sender::GitHub => "github",
            Sender::GitLab => "gitlab",
            Sender::Gitea => "gitea",
            Sender::AzureDevOps => "azure-devops",
        }
    }
}

/// Whether `body` is an Azure DevOps service hook notification (`"publisherId": "tfs"`).
fn is_service_hook(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("publisherId").and_then(|p| p.as_str()).map(|p| p == "tfs"))
        .unwrap_or(false)
}

/// The password of an HTTP Basic `Authorization` header.
fn basic_password(authorization: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let encoded = authorization.strip_prefix("Basic ")?.trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
    let colon = decoded.iter().position(|b| *b == b':')?;
    Some(decoded[colon + 1..].to_vec())
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
    // Who sent it, from headers only: nothing is read from the body before the request is
    // authenticated. Gitea and Forgejo name themselves (and send GitHub's headers too, so
    // they are asked first); GitLab names itself; Azure DevOps service hooks name nobody and
    // authenticate with HTTP Basic; anything else is GitHub.
    let sender = if headers.contains_key("x-gitea-event") || headers.contains_key("x-forgejo-event") {
        Sender::Gitea
    } else if headers.contains_key("x-gitlab-event") {
        Sender::GitLab
    } else if !headers.contains_key("x-github-event")
        && (header("authorization").starts_with("Basic ")
            // With no secret to check, nothing is authenticated: the body may say who it is.
            || (state.0.webhook_secret.is_none() && is_service_hook(&body)))
    {
        Sender::AzureDevOps
    } else {
        Sender::GitHub
    };
    if let Some(secret) = &state.0.webhook_secret {
        let secret = secret.expose().as_bytes();
        let (authentic, what) = match sender {
            // GitLab sends the secret itself (X-Gitlab-Token).
            Sender::GitLab => (
                kalypso_git::signature::token_matches(secret, header("x-gitlab-token").as_bytes()),
                "token",
            ),
            // GitHub signs the body (X-Hub-Signature-256: sha256=HEX).
            Sender::GitHub => (
                kalypso_git::signature::verify(secret, &body, header("x-hub-signature-256")),
                "signature",
            ),
            // Gitea signs the body too, as bare hex (X-Gitea-Signature; Forgejo also sends
            // X-Forgejo-Signature).
            Sender::Gitea => {
                let signature = match header("x-gitea-signature") {
                    "" => header("x-forgejo-signature"),
                    signature => signature,
                };
                (
                    kalypso_git::signature::verify_hex(secret, &body, signature),
                    "signature",
                )
            }
            // An Azure DevOps service hook sends the secret as the Basic password (any user).
            Sender::AzureDevOps => (
                basic_password(header("authorization"))
                    .is_some_and(|password| kalypso_git::signature::token_matches(secret, &password)),
                "credentials",
            ),
        };
        if !authentic {
            count("rejected");
            tracing::warn!(
                forge = sender.name(),
                "webhook rejected: missing or invalid {what}"
            );
            return (
                StatusCode::UNAUTHORIZED,
                match what {
                    "token" => "invalid token\n",
                    "credentials" => "invalid credentials\n",
                    _ => "invalid signature\n",
                },
            );
        }
    }
    let payload = || serde_json::from_slice::<serde_json::Value>(&body).ok();
    let field = |payload: &Option<serde_json::Value>, name: &str| {
        payload
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(|k| k.as_str())
            .map(str::to_owned)
    };
    let push = match sender {
        Sender::GitLab => header("x-gitlab-event") == "Push Hook",
        Sender::GitHub => match header("x-github-event") {
            "ping" => {
                count("ignored");
                return (StatusCode::OK, "pong\n");
            }
            event => event == "push",
        },
        Sender::Gitea => match header("x-gitea-event") {
            "" => header("x-forgejo-event") == "push",
            event => event == "push",
        },
        // Service hooks say what happened in the body.
        Sender::AzureDevOps => field(&payload(), "eventType").as_deref() == Some("git.push"),
    };
    if !push {
        count("ignored");
        return (StatusCode::OK, "event ignored\n");
    }
    let payload = payload();
    if sender == Sender::GitLab && field(&payload, "object_kind").as_deref() != Some("push") {
        count("invalid");
        tracing::warn!("GitLab push webhook without a push event payload: ignored");
        return (StatusCode::BAD_REQUEST, "not a push event payload\n");
    }
    count("accepted");
    // Azure DevOps puts the pushed branches under resource.refUpdates.
    let reference = match sender {
        Sender::AzureDevOps => payload
            .as_ref()
            .and_then(|v| v.pointer("/resource/refUpdates/0/name"))
            .and_then(|r| r.as_str())
            .map(str::to_owned),
        _ => field(&payload, "ref"),
    }
    .unwrap_or_default();
    tracing::info!(
        forge = sender.name(),
        reference = %kalypso_git::redact(&reference),
        "push webhook: polling now"
    );
    state.trigger();
    (StatusCode::ACCEPTED, "poll scheduled\n")
}
