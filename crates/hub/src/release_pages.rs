//! The dashboard's release pages over the hub's promotion state ([`kalypso_dashboard::release`]
//! renders them): `/releases` (every environment's freezes and the requirements of the
//! promotion waiting to go in), `/environments/{env}/promotion` (one environment, with the
//! approve, freeze and unfreeze forms for the people who may), the forms' targets
//! (`POST /environments/{env}/approve|freeze|unfreeze`) and `/audit`.
//!
//! The pages sit behind the dashboard's read check ([`crate::dashboard`]); each form is checked
//! again as the API's action is ([`crate::auth::authenticate_change`] with the form's CSRF token,
//! then the right in the environment) and then does exactly what the API does
//! ([`crate::actions`]), so that the audit log names the signed-in person.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use kalypso_dashboard::release::{self, AuditPage, AuditRow, EnvironmentRelease, Pending, Requirement};
use kalypso_hub_api::{ApprovalRequest, FreezeRequest, UnfreezeRequest};

use crate::actions::{self, ActionRequest};
use crate::auth::routes::{form, message, see_other};
use crate::auth::{Action, PrincipalKind, authenticate_change, authorize};
use crate::http::{ApiError, DEFAULT_GATE_LIMIT, HubState, now_ms};
use crate::model::format_time;
use crate::{audit, policy, query};

/// The audit page's size.
const AUDIT_PAGE: i64 = 100;

/// The release pages' router (to be put behind the dashboard's read check).
pub fn router(state: HubState) -> Router {
    Router::new()
        .route("/releases", get(releases))
        .route("/environments/{env}/promotion", get(environment))
        .route("/environments/{env}/approve", post(approve))
        .route("/environments/{env}/freeze", post(freeze))
        .route("/environments/{env}/unfreeze", post(unfreeze))
        .route("/audit", get(audit_log))
        .with_state(state)
}

fn error_page(e: &ApiError, back: &str) -> Response {
    let title = match e.status() {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Not done",
        _ => "Something went wrong",
    };
    message(e.status(), title, e.message(), (back, "Back"))
}

fn state_word(state: kalypso_hub_api::RequirementState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "not-yet".to_owned())
}

/// What environment `env`'s release page shows; `csrf` is the person's CSRF token when they
/// may act on it.
async fn environment_release(
    state: &HubState,
    env: &str,
    csrf: Option<String>,
) -> Result<EnvironmentRelease, ApiError> {
    let db = state.db();
    let now = now_ms();
    let (policy_name, problem, from) = match policy::stored_policy(db, env).await? {
        policy::StoredPolicy::None => (None, None, None),
        policy::StoredPolicy::Invalid(name, problems) => (
            Some(name.clone()),
            Some(format!(
                "PromotionPolicy {name:?} is invalid: {}",
                problems.replace('\n', "; ")
            )),
            None,
        ),
        policy::StoredPolicy::Valid(p) => (Some(p.name.clone()), None, Some(p.from.clone())),
    };
    let freezes = policy::active_freezes(db, env, now)
        .await?
        .into_iter()
        .map(|f| release::Freeze {
            actor: f.actor,
            since: format_time(f.frozen_at),
            reason: f.reason,
            until: f.until.map(format_time),
        })
        .collect();
    let mut pending = None;
    if let Some(from) = from
        && let Some(source) = query::environment(db, &from, state.staleness()).await?
        && let Some(latest) = source.latest
        && let Some(commit) = latest.control_plane_commit
    {
        let into_runs = query::environment(db, env, state.staleness())
            .await?
            .and_then(|e| e.latest)
            .and_then(|l| l.control_plane_commit);
        if into_runs.as_deref() != Some(commit.as_str()) {
            let gate = query::gate(db, &from, &latest.commit, state.staleness(), DEFAULT_GATE_LIMIT).await?;
            let promotion = policy::evaluate(db, &gate, env, state.stale_before(), now).await?;
            pending = Some(Pending {
                from,
                commit,
                may_promote: promotion.may_promote,
                requirements: promotion
                    .requirements
                    .into_iter()
                    .map(|r| Requirement {
                        state: state_word(r.state),
                        summary: r.summary,
                    })
                    .collect(),
            });
        }
    }
    Ok(EnvironmentRelease {
        name: env.to_owned(),
        policy: policy_name,
        problem,
        freezes,
        pending,
        csrf,
    })
}

/// `GET /releases`.
async fn releases(State(state): State<HubState>, headers: HeaderMap) -> Response {
    let result = async {
        authorize(&state, &headers, Action::Read)?;
        let list = query::environments(state.db(), state.staleness()).await?;
        let mut out = Vec::new();
        for env in list.environments {
            out.push(environment_release(&state, &env.name, None).await?);
        }
        Ok::<_, ApiError>(out)
    }
    .await;
    match result {
        Ok(list) => kalypso_dashboard::page(StatusCode::OK, release::releases_page(&list)),
        Err(e) => error_page(&e, "/"),
    }
}

/// `GET /environments/{env}/promotion`.
async fn environment(State(state): State<HubState>, headers: HeaderMap, Path(env): Path<String>) -> Response {
    let result = async {
        let reader = authorize(&state, &headers, Action::Read)?;
        actions::check_environment_name("environment", &env)?;
        if query::environment(state.db(), &env, state.staleness())
            .await?
            .is_none()
        {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                None,
                format!("the hub knows no environment {env:?}"),
            ));
        }
        // The forms are for a signed-in person who may act here (their session's CSRF token).
        let csrf = (reader.kind == PrincipalKind::Person
            && reader.grants.allow(Action::Approve(&env))
            && reader.grants.allow(Action::Freeze(&env)))
        .then(|| state.auth().sessions().read(&headers, now_ms() / 1000))
        .flatten()
        .map(|s| s.csrf);
        environment_release(&state, &env, csrf).await
    }
    .await;
    match result {
        Ok(page) => kalypso_dashboard::page(StatusCode::OK, release::environment_page(&page)),
        Err(e) => error_page(&e, "/releases"),
    }
}

/// Checks a form's caller (CSRF, then the right in the environment) and does `act`; back to
/// the environment's page, or a page saying why not.
async fn act<T: ActionRequest, F>(
    state: &HubState,
    headers: &HeaderMap,
    fields: &std::collections::BTreeMap<String, String>,
    request: T,
    action: for<'a> fn(&'a str) -> Action<'a>,
    act: impl FnOnce(crate::auth::Principal, T) -> F,
) -> Response
where
    F: Future<Output = Result<(), ApiError>>,
{
    let back = release::environment_url(request.environment());
    let result = async {
        let caller = authenticate_change(state, headers, fields.get("csrf").map(String::as_str))?;
        let who = actions::allowed(state, caller, &request, action).await?;
        act(who, request).await
    }
    .await;
    match result {
        Ok(()) => see_other(&back, &[]),
        Err(e) => error_page(&e, &back),
    }
}

fn field(fields: &std::collections::BTreeMap<String, String>, name: &str) -> Option<String> {
    fields
        .get(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `POST /environments/{env}/approve` (`csrf`, `commit`, `comment`).
async fn approve(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(env): Path<String>,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let request = ApprovalRequest {
        environment: env,
        commit: field(&fields, "commit").unwrap_or_default(),
        comment: field(&fields, "comment"),
    };
    act(
        &state,
        &headers,
        &fields,
        request,
        |env| Action::Approve(env),
        |who, request| async { actions::approve_as(&state, who, request).await.map(|_| ()) },
    )
    .await
}

/// `POST /environments/{env}/freeze` (`csrf`, `reason`, `until`).
async fn freeze(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(env): Path<String>,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let request = FreezeRequest {
        environment: env,
        reason: field(&fields, "reason").unwrap_or_default(),
        until: field(&fields, "until"),
    };
    act(
        &state,
        &headers,
        &fields,
        request,
        |env| Action::Freeze(env),
        |who, request| async { actions::freeze_as(&state, who, request).await.map(|_| ()) },
    )
    .await
}

/// `POST /environments/{env}/unfreeze` (`csrf`, `reason`).
async fn unfreeze(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(env): Path<String>,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let request = UnfreezeRequest {
        environment: env,
        reason: field(&fields, "reason"),
    };
    act(
        &state,
        &headers,
        &fields,
        request,
        |env| Action::Freeze(env),
        |who, request| async { actions::unfreeze_as(&state, who, request).await.map(|_| ()) },
    )
    .await
}

/// `GET /audit?environment=&page=`.
async fn audit_log(
    State(state): State<HubState>,
    headers: HeaderMap,
    Query(params): Query<std::collections::BTreeMap<String, String>>,
) -> Response {
    let result = async {
        authorize(&state, &headers, Action::Read)?;
        let environment = params.get("environment").filter(|s| !s.is_empty()).cloned();
        let page = crate::http::int_param(&params, "page", 1, i64::MAX / AUDIT_PAGE / 2)?.max(1);
        let list = audit::list(
            state.db(),
            &audit::Filter {
                environment: environment.clone(),
                kind: None,
                actor: None,
                limit: AUDIT_PAGE,
                offset: (page - 1) * AUDIT_PAGE,
            },
        )
        .await?;
        Ok::<_, ApiError>(AuditPage {
            environment,
            total: list.total,
            entries: list
                .entries
                .into_iter()
                .map(|e| AuditRow {
                    at: e.at,
                    actor: e.actor,
                    kind: e.kind.as_str().to_owned(),
                    environment: e.environment,
                    commit: e.commit,
                    reason: e.reason,
                    detail: e.detail,
                })
                .collect(),
        })
    }
    .await;
    match result {
        Ok(page) => kalypso_dashboard::page(StatusCode::OK, release::audit_page(&page)),
        Err(e) => error_page(&e, "/"),
    }
}
