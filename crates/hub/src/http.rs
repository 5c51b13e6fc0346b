//! The HTTP API, as an axum [`Router`] built by [`app`] so that tests can serve it on a
//! loopback port: report ingestion (`POST /api/v1/events/flux`, `POST /api/v1/compliance`),
//! the queries under `/api/v1`, `/healthz` and `/readyz`. Each handler answers a type of
//! `kalypso-hub-api` and carries the annotation its part of the OpenAPI document
//! ([`crate::openapi`]) is generated from.
//!
//! Every handler asks [`crate::auth`] whether the request may do what it does: reports carry
//! `X-Signature: sha256=<HMAC-SHA256 of the body>` (Flux's `generic-hmac` Provider sends
//! exactly that) or a bearer token with the report scope when the hub has a webhook secret or
//! such tokens; queries carry a bearer token or the dashboard's session once the hub has a
//! credential that reads. Every error is JSON
//! `{"error": ..., "field": ...}`; a database that is down or locked gives 503 with
//! `Retry-After`, and a report is acknowledged only after its transaction committed.

pub mod actions;
pub mod waves;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kalypso_hub_api::{
    ClusterDetail, ClusterList, ClusterState, CommitAnswer, ComplianceReport, EnvironmentList,
    EnvironmentStatus, ErrorBody, FluxEvent, Gate, IngestAnswer, WorkloadAnswer,
};
use serde::Serialize;

use crate::auth::{Action, Auth, authorize, authorize_report};
use crate::counts::Staleness;
use crate::db::{Db, DbError};
use crate::gitops::Refresher;
use crate::ingest::Ingest;
use crate::model::{self, BadInput};
use crate::query;
use crate::throttle::Verdict;

/// The largest request body accepted (413 beyond).
pub const MAX_BODY: usize = 1024 * 1024;
/// The default page size of lists.
pub const DEFAULT_LIMIT: i64 = 100;
/// The largest page size.
pub const MAX_LIMIT: i64 = 10_000;
/// The default number of clusters a gate answer lists.
pub const DEFAULT_GATE_LIMIT: i64 = 1000;

struct Shared {
    db: Db,
    ingest: Ingest,
    refresher: Refresher,
    auth: Auth,
    stale_after: Duration,
    notifier: crate::notify::Notifier,
    /// The last promotion refusal notified per (into, commit), so that a gate asked every
    /// few seconds notifies a change, not every answer.
    notified: std::sync::Mutex<std::collections::HashMap<(String, String), String>>,
    /// Each cluster's report rate.
    throttle: crate::throttle::Throttle,
}

/// What the handlers share.
#[derive(Clone)]
pub struct HubState(Arc<Shared>);

impl std::fmt::Debug for HubState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubState")
            .field("backend", &self.0.db.backend())
            .field("auth", &self.0.auth)
            .field("stale_after", &self.0.stale_after)
            .finish_non_exhaustive()
    }
}

impl HubState {
    /// A state over `db`, storing reports through `ingest`.
    pub fn new(db: Db, ingest: Ingest, refresher: Refresher, auth: Auth, stale_after: Duration) -> HubState {
        HubState(Arc::new(Shared {
            db,
            ingest,
            refresher,
            auth,
            stale_after,
            notifier: crate::notify::Notifier::none(),
            notified: std::sync::Mutex::default(),
            throttle: crate::throttle::Throttle::new(crate::throttle::Rate::default()),
        }))
    }

    /// The same state, limiting each cluster to `rate`. Only before the state is shared (else
    /// the state is returned unchanged).
    pub fn with_cluster_rate(mut self, rate: crate::throttle::Rate) -> HubState {
        if let Some(shared) = Arc::get_mut(&mut self.0) {
            shared.throttle = crate::throttle::Throttle::new(rate);
        }
        self
    }

    /// Who may do what ([`crate::auth`]).
    pub fn auth(&self) -> &Auth {
        &self.0.auth
    }

    /// The same state, sending notifications through `notifier`. Only before the state is
    /// shared (else the state is returned unchanged).
    pub fn with(mut self, notifier: crate::notify::Notifier) -> HubState {
        if let Some(shared) = Arc::get_mut(&mut self.0) {
            shared.notifier = notifier;
        }
        self
    }

    /// Where notifications go.
    pub fn notifier(&self) -> &crate::notify::Notifier {
        &self.0.notifier
    }

    /// Whether `summary` is news for (into, commit): not the last one notified.
    pub(crate) fn news(&self, into: &str, commit: &str, summary: &str) -> bool {
        let mut seen = self
            .0
            .notified
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() > 10_000 {
            seen.clear();
        }
        let key = (into.to_owned(), commit.to_owned());
        if seen.get(&key).is_some_and(|s| s == summary) {
            return false;
        }
        seen.insert(key, summary.to_owned());
        true
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.0.db
    }

    /// The GitOps refresher.
    pub fn refresher(&self) -> &Refresher {
        &self.0.refresher
    }

    /// How long a cluster may be silent before it is stale.
    pub fn stale_after(&self) -> Duration {
        self.0.stale_after
    }

    /// When clusters are stale, as of now.
    pub fn staleness(&self) -> Staleness {
        Staleness {
            now: now_ms(),
            after: i64::try_from(self.0.stale_after.as_millis()).unwrap_or(i64::MAX),
        }
    }

    pub(crate) fn stale_before(&self) -> i64 {
        self.staleness().before()
    }
}

pub use crate::model::now_ms;

/// The router.
pub fn app(state: HubState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/events/flux", post(flux_event))
        .route("/api/v1/compliance", post(compliance))
        .route("/api/v1/clusters", get(list_clusters))
        .route("/api/v1/clusters/{environment}/{name}", get(get_cluster))
        .route("/api/v1/environments", get(list_environments))
        .route("/api/v1/environments/{environment}", get(get_environment))
        .route("/api/v1/environments/{environment}/gate", get(get_gate))
        .route("/api/v1/environments/{environment}/waves", get(waves::get_waves))
        .route(
            "/api/v1/environments/{environment}/rollout",
            get(waves::get_rollout),
        )
        .route("/api/v1/commits/{sha}", get(get_commit))
        .route("/api/v1/workloads/{name}", get(get_workload))
        .route("/api/v1/approvals", post(actions::approve))
        .route("/api/v1/freezes", post(actions::freeze))
        .route("/api/v1/unfreezes", post(actions::unfreeze))
        .route("/api/v1/promotions", post(actions::report_promotion))
        .route("/api/v1/audit", get(actions::audit))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    field: Option<String>,
    message: String,
    /// Seconds for `Retry-After` (503 says 5 without it).
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error answer with `status`, naming `field` when it is at fault.
    pub fn new(status: StatusCode, field: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            field: field.map(str::to_owned),
            message: message.into(),
            retry_after: None,
        }
    }

    /// 429: a cluster over its rate, asked to come back after `seconds`.
    pub(crate) fn too_many(seconds: u64, message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(seconds),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, None, message)
        }
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<BadInput> for ApiError {
    fn from(e: BadInput) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, Some(&e.field), e.to_string())
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> ApiError {
        match e {
            DbError::Unavailable(_) => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    None,
                    "the database is unavailable: retry later",
                )
            }
            other => {
                tracing::error!(error = %other, "database error");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, None, "database error")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(ErrorBody {
                error: self.message,
                field: self.field,
            }),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        } else if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn ok(answer: impl Serialize) -> ApiResult {
    Ok(axum::Json(answer).into_response())
}

/// `GET /healthz`.
#[utoipa::path(get, path = "/healthz", tag = "service", summary = "Liveness: the process runs",
    responses((status = 200, description = "The process runs.", body = String, content_type = "text/plain", example = "ok\n")))]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`.
#[utoipa::path(get, path = "/readyz", tag = "service", summary = "Readiness: the database answers",
    responses(
        (status = 200, description = "The database answers.", body = String, content_type = "text/plain", example = "ready\n"),
        (status = 503, description = "The database does not answer.", body = String, content_type = "text/plain",
            headers(("Retry-After" = u32, description = "Seconds to wait before trying again."))),
    ))]
pub(crate) async fn readyz(State(state): State<HubState>) -> Response {
    match state.db().ping().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            let mut r = (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the database is unavailable\n",
            )
                .into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            r
        }
    }
}

async fn ingest(state: &HubState, report: model::Report, received_at: i64) -> Result<IngestAnswer, ApiError> {
    if let Verdict::Refuse { retry_after } = state.0.throttle.admit(&report, received_at) {
        return Err(ApiError::too_many(
            retry_after,
            format!(
                "cluster {:?} of environment {:?} is over its report rate and this report of {} \
                 changes nothing the hub holds: not stored, send it again after {retry_after} s \
                 (reports that change a state or commit are always stored)",
                report.cluster, report.environment, report.object
            ),
        ));
    }
    let result = state.0.ingest.submit(report.clone(), received_at).await?;
    state.0.throttle.stored(&report);
    Ok(IngestAnswer { result })
}

/// A body over [`MAX_BODY`] (or one that could not be read): 413 (or 400), as JSON.
pub(crate) fn body_error(rejection: &BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::new(rejection.status(), Some("body"), rejection.body_text())
    }
}

/// 413: a body over [`MAX_BODY`].
pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        Some("body"),
        format!("the body is over {} KiB", MAX_BODY / 1024),
    )
}

/// `POST /api/v1/events/flux`.
#[utoipa::path(post, path = "/api/v1/events/flux", tag = "reports",
    summary = "Report a Flux event",
    description = "The event Flux's notification-controller posts with a `generic` or `generic-hmac` Provider. \
        The cluster's identity comes from `metadata` (the Alert's `eventMetadata`). Answered once the report is \
        durable.",
    request_body(content = FluxEvent, content_type = "application/json"),
    responses((status = 200, description = "Stored (or a duplicate, or older than the latest state).", body = IngestAnswer)))]
pub(crate) async fn flux_event(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body = body.map_err(|e| body_error(&e))?;
    authorize_report(&state, &headers, &body)?;
    let report = model::parse_flux(&body)?;
    let failure = actions::failure_event(&report);
    let answer = ingest(&state, report, now_ms()).await?;
    actions::notify_failure(&state, failure, &answer);
    ok(answer)
}

/// `POST /api/v1/compliance`.
#[utoipa::path(post, path = "/api/v1/compliance", tag = "reports",
    summary = "Report compliance (any agent)",
    description = "A small report for agents other than Flux (Argo CD notifications, scripts). Answered once \
        the report is durable.",
    request_body(content = ComplianceReport, content_type = "application/json"),
    responses((status = 200, description = "Stored (or a duplicate, or older than the latest state).", body = IngestAnswer)))]
pub(crate) async fn compliance(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let body = body.map_err(|e| body_error(&e))?;
    authorize_report(&state, &headers, &body)?;
    let now = now_ms();
    let report = model::parse_generic(&body, now)?;
    let failure = actions::failure_event(&report);
    let answer = ingest(&state, report, now).await?;
    actions::notify_failure(&state, failure, &answer);
    ok(answer)
}

pub(crate) type Params = Query<BTreeMap<String, String>>;

pub(crate) fn int_param(
    params: &BTreeMap<String, String>,
    name: &str,
    default: i64,
    max: i64,
) -> Result<i64, ApiError> {
    match params.get(name) {
        None => Ok(default),
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|n| (0..=max).contains(n))
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    Some(name),
                    format!("{text:?} is not a number from 0 to {max}"),
                )
            }),
    }
}

pub(crate) fn not_found(what: String) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, None, what)
}

/// `GET /api/v1/clusters`.
#[utoipa::path(get, path = "/api/v1/clusters", tag = "queries",
    summary = "List clusters",
    params(
        ("environment" = Option<String>, Query, description = "Only this environment."),
        ("clusterType" = Option<String>, Query, description = "Only this cluster type."),
        ("state" = Option<String>, Query, pattern = "^(compliant|reconciling|failed|stale|unknown)?$",
            description = "Only clusters whose own platform state is this (`unknown`: no platform report yet), or `stale` ones."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 10000, description = "Page size (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, maximum = 4611686018427387903_i64, description = "Page start."),
    ),
    responses(
        (status = 200, description = "One page of clusters, by environment and name.", body = ClusterList),
        (status = 400, description = "A bad filter or page (`field` names it).", body = ErrorBody),
    ))]
pub(crate) async fn list_clusters(
    State(state): State<HubState>,
    headers: HeaderMap,
    Query(params): Params,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    let state_filter = params
        .get("state")
        .filter(|s| !s.is_empty())
        .map(|s| {
            ClusterState::parse_among(s, &ClusterState::LISTED).ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    Some("state"),
                    format!(
                        "{s:?} is not one of {}",
                        ClusterState::names(&ClusterState::LISTED)
                    ),
                )
            })
        })
        .transpose()?;
    let filter = query::ClusterFilter {
        environment: params.get("environment").filter(|s| !s.is_empty()).cloned(),
        cluster_type: params.get("clusterType").filter(|s| !s.is_empty()).cloned(),
        state: state_filter,
        limit: int_param(&params, "limit", DEFAULT_LIMIT, MAX_LIMIT)?,
        offset: int_param(&params, "offset", 0, i64::MAX / 2)?,
    };
    ok(query::clusters(state.db(), &filter, state.staleness()).await?)
}

/// `GET /api/v1/clusters/{environment}/{name}`.
#[utoipa::path(get, path = "/api/v1/clusters/{environment}/{name}", tag = "queries",
    summary = "A cluster, its objects and its history",
    params(
        ("environment" = String, Path, example = "dev", description = "The cluster's environment."),
        ("name" = String, Path, example = "drone-1", description = "The cluster's name."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 10000, description = "History page size (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, maximum = 4611686018427387903_i64, description = "History page start."),
    ),
    responses(
        (status = 200, description = "The cluster.", body = ClusterDetail),
        (status = 400, description = "A bad page (`field` names it).", body = ErrorBody),
        (status = 404, description = "No such cluster in the environment.", body = ErrorBody),
    ))]
pub(crate) async fn get_cluster(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path((environment, name)): Path<(String, String)>,
    Query(params): Params,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    let limit = int_param(&params, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let offset = int_param(&params, "offset", 0, i64::MAX / 2)?;
    match query::cluster(
        state.db(),
        &environment,
        &name,
        state.stale_before(),
        limit,
        offset,
    )
    .await?
    {
        Some(v) => ok(v),
        None => Err(not_found(format!(
            "no cluster {name:?} in environment {environment:?}"
        ))),
    }
}

/// `GET /api/v1/environments`.
#[utoipa::path(get, path = "/api/v1/environments", tag = "queries",
    summary = "Every environment's status",
    responses((status = 200, description = "The control plane's environments, by name.", body = EnvironmentList)))]
pub(crate) async fn list_environments(State(state): State<HubState>, headers: HeaderMap) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    ok(query::environments(state.db(), state.staleness()).await?)
}

/// `GET /api/v1/environments/{environment}`.
#[utoipa::path(get, path = "/api/v1/environments/{environment}", tag = "queries",
    summary = "An environment's status",
    params(("environment" = String, Path, example = "dev", description = "The environment.")),
    responses(
        (status = 200, description = "Its cluster types, deployment targets and clusters relative to its latest commit.", body = EnvironmentStatus),
        (status = 404, description = "No such environment.", body = ErrorBody),
    ))]
pub(crate) async fn get_environment(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(environment): Path<String>,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    match query::environment(state.db(), &environment, state.staleness()).await? {
        Some(v) => ok(v),
        None => Err(not_found(format!("no environment {environment:?}"))),
    }
}

/// How long a query waits for an on-demand refresh when it names an unknown commit.
pub(crate) const ON_DEMAND_REFRESH: Duration = Duration::from_secs(20);

/// `GET /api/v1/environments/{environment}/gate`.
#[utoipa::path(get, path = "/api/v1/environments/{environment}/gate", tag = "queries",
    summary = "The promotion gate: does the environment run the commit?",
    description = "Always 200 for a well-formed question: `verdict` is `compliant`, `failed`, `pending` or \
        `unknown-commit` (the hub does not know the commit even after an on-demand refresh).",
    params(
        ("environment" = String, Path, example = "dev", description = "The environment."),
        ("commit" = String, Query, example = "6f1e9c2a", pattern = "^\\s*[0-9a-fA-F]{4,40}\\s*$",
            description = "A GitOps commit of the environment's branch, or a control-plane commit carried in Promoted_Commit_Id (4 to 40 hex digits)."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 1000000, description = "Clusters listed at most (default 1000)."),
        ("into" = Option<String>, Query, example = "stage", pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]{0,253}$",
            description = "The environment the commit would be promoted into: the answer's `promotion` then lists every requirement of that environment's PromotionPolicy and freezes, and whether the promotion may go."),
    ),
    responses(
        (status = 200, description = "The verdict and the clusters (and, with `into`, the promotion's requirements).", body = Gate),
        (status = 400, description = "The commit is missing or not a commit id, or a bad limit (`field` names it).", body = ErrorBody),
    ))]
pub(crate) async fn get_gate(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(environment): Path<String>,
    Query(params): Params,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    let commit = params
        .get("commit")
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                Some("commit"),
                "the commit query parameter is missing",
            )
        })?;
    if query::commit_pattern(&commit).is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("commit"),
            format!("{commit:?} is not a commit id (4 to 64 hex digits)"),
        ));
    }
    let limit = int_param(&params, "limit", DEFAULT_GATE_LIMIT, MAX_LIMIT * 100)?;
    let db = state.db();
    if query::resolve_commit(db, &environment, &commit).await?.is_none() {
        state.refresher().refresh_now(ON_DEMAND_REFRESH).await;
    }
    let mut gate = query::gate(db, &environment, &commit, state.staleness(), limit).await?;
    // The name as sent is checked (a control character is refused, even one trimming would
    // remove); surrounding spaces are then dropped, and an empty one asks nothing.
    if let Some(raw) = params.get("into").filter(|s| !s.is_empty()) {
        actions::check_environment_name("into", raw)?;
    }
    if let Some(into) = params.get("into").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let promotion = crate::policy::evaluate(db, &gate, into, state.stale_before(), now_ms()).await?;
        actions::notify_gate(&state, &gate, &promotion);
        gate.promotion = Some(promotion);
    }
    ok(gate)
}

/// `GET /api/v1/commits/{sha}`.
#[utoipa::path(get, path = "/api/v1/commits/{sha}", tag = "queries",
    summary = "Where a commit is, and who runs it",
    params(
        ("sha" = String, Path, example = "6f1e9c2a", pattern = "^\\s*[0-9a-fA-F]{4,40}\\s*$",
            description = "A GitOps commit, or a control-plane commit carried in Promoted_Commit_Id (4 to 40 hex digits)."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 1000000, description = "Compliant clusters listed at most (default 1000)."),
    ),
    responses(
        (status = 200, description = "Each environment that has the commit.", body = CommitAnswer),
        (status = 400, description = "Not a commit id, or a bad limit (`field` names it).", body = ErrorBody),
    ))]
pub(crate) async fn get_commit(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(sha): Path<String>,
    Query(params): Params,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    if query::commit_pattern(&sha).is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("sha"),
            format!("{sha:?} is not a commit id (4 to 64 hex digits)"),
        ));
    }
    let limit = int_param(&params, "limit", DEFAULT_GATE_LIMIT, MAX_LIMIT * 100)?;
    let mut answer = query::commit(state.db(), &sha, state.staleness(), limit).await?;
    if answer.environments.is_empty() && state.refresher().enabled() {
        state.refresher().refresh_now(ON_DEMAND_REFRESH).await;
        answer = query::commit(state.db(), &sha, state.staleness(), limit).await?;
    }
    ok(answer)
}

/// `GET /api/v1/workloads/{name}`.
#[utoipa::path(get, path = "/api/v1/workloads/{name}", tag = "queries",
    summary = "Where a workload runs, and ran",
    params(("name" = String, Path, example = "hello", description = "The workload.")),
    responses((status = 200, description = "Its placements now and before (empty lists for an unknown workload).", body = WorkloadAnswer)))]
pub(crate) async fn get_workload(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    ok(query::workload(state.db(), &name).await?)
}
