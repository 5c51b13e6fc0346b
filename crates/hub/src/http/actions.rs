//! What people (and `kalypso promote`) do through the API, each validated before anything is
//! stored and each written to the audit log ([`crate::audit`]): approve a commit for an
//! environment (`POST /api/v1/approvals`), freeze and unfreeze an environment
//! (`POST /api/v1/freezes`, `POST /api/v1/unfreezes`), report a promotion
//! (`POST /api/v1/promotions`); and read the log (`GET /api/v1/audit`).
//!
//! Who acts is the request's [`Principal`] ([`crate::auth`]): a signed-in person's e-mail (or
//! subject) and groups, or an API token's name — never a name the body gives. The four
//! actions share one prelude: the caller authenticated (and a session's CSRF token
//! checked), the body parsed, the caller allowed to act on the environment it names, and the
//! environment known.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use kalypso_hub_api::{
    ApprovalAnswer, ApprovalRequest, AuditKind, AuditList, ClusterState, ErrorBody, Freeze, FreezeRequest,
    Gate, IngestAnswer, IngestResult, PromotionGate, PromotionReport, RequirementKind, RequirementState,
    UnfreezeAnswer, UnfreezeRequest,
};
use serde::de::DeserializeOwned;
use sqlx::Row;

use crate::audit::{self, Entry};
use crate::auth::{Action, Caller, Principal, authenticate_change, authorize};
use crate::http::{ApiError, ApiResult, HubState, Params, body_error, int_param, now_ms, ok};
use crate::model::{Report, format_time, parse_time};
use crate::notify::{Event, EventKind};
use crate::policy;

/// The longest comment, reason or message stored.
pub const MAX_TEXT: usize = 4096;

fn bad(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, Some(field), message)
}

/// An environment name as a request gives it: 1 to 253 characters, no control characters.
pub(crate) fn check_environment_name(field: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.chars().count() > 253 || name.chars().any(char::is_control) {
        return Err(bad(
            field,
            format!("{name:?} is not an environment name (1 to 253 characters, no control characters)"),
        ));
    }
    Ok(())
}

/// Checks that `environment` is one the hub knows (when it knows any: a hub without a
/// control plane cannot tell).
async fn known_environment(state: &HubState, field: &str, environment: &str) -> Result<(), ApiError> {
    check_environment_name(field, environment)?;
    let pool = state.db().pool();
    let any: i64 = sqlx::query("SELECT COUNT(*) FROM environments")
        .fetch_one(pool)
        .await
        .map_err(crate::db::DbError::from)?
        .try_get(0)
        .map_err(crate::db::DbError::from)?;
    if any == 0 {
        return Ok(());
    }
    let here: i64 = sqlx::query("SELECT COUNT(*) FROM environments WHERE name = $1")
        .bind(environment)
        .fetch_one(pool)
        .await
        .map_err(crate::db::DbError::from)?
        .try_get(0)
        .map_err(crate::db::DbError::from)?;
    if here == 0 {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Some(field),
            format!("no environment {environment:?}"),
        ));
    }
    Ok(())
}

fn text(field: &str, value: Option<&str>, required: bool) -> Result<String, ApiError> {
    let value = value.map(str::trim).unwrap_or_default();
    if required && value.is_empty() {
        return Err(bad(field, "is missing or empty"));
    }
    if value.chars().count() > MAX_TEXT {
        return Err(bad(field, format!("is over {MAX_TEXT} characters")));
    }
    if value.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(bad(field, "holds control characters"));
    }
    Ok(value.to_owned())
}

fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        bad(if path == "." { "body" } else { &path }, e.inner().to_string())
    })
}

/// A request to act on an environment.
pub(crate) trait ActionRequest: DeserializeOwned {
    /// The environment it acts on.
    fn environment(&self) -> &str;
}

impl ActionRequest for ApprovalRequest {
    fn environment(&self) -> &str {
        &self.environment
    }
}

impl ActionRequest for FreezeRequest {
    fn environment(&self) -> &str {
        &self.environment
    }
}

impl ActionRequest for UnfreezeRequest {
    fn environment(&self) -> &str {
        &self.environment
    }
}

impl ActionRequest for PromotionReport {
    fn environment(&self) -> &str {
        &self.environment
    }
}

/// What every action does first, in this order: the caller authenticated (401; a session's
/// request needs its CSRF token, 403), the body read and parsed (413, 400), the caller allowed
/// `action` on the environment the body names (403), and the environment known (404).
/// Nothing is stored before all have passed.
async fn prelude<T: ActionRequest>(
    state: &HubState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    action: for<'a> fn(&'a str) -> Action<'a>,
) -> Result<(Principal, T), ApiError> {
    let caller = authenticate_change(state, headers, None)?;
    let body = body.map_err(|e| body_error(&e))?;
    let request: T = json_body(&body)?;
    let who = allowed(state, caller, &request, action).await?;
    Ok((who, request))
}

/// The end of the [`prelude`], for a request already read (the dashboard's forms): the
/// caller allowed `action` on the request's environment (403), the environment known (404).
pub(crate) async fn allowed<T: ActionRequest>(
    state: &HubState,
    caller: Caller,
    request: &T,
    action: for<'a> fn(&'a str) -> Action<'a>,
) -> Result<Principal, ApiError> {
    check_environment_name("environment", request.environment())?;
    let who = caller.may(action(request.environment()))?;
    known_environment(state, "environment", request.environment()).await?;
    Ok(who)
}

async fn control_plane_commit(state: &HubState, given: &str) -> Result<String, ApiError> {
    match policy::resolve_control_plane_commit(state.db(), given).await? {
        Ok(commit) => Ok(commit),
        Err(why) => Err(bad("commit", why)),
    }
}

/// `POST /api/v1/approvals`.
#[utoipa::path(post, path = "/api/v1/approvals", tag = "actions",
    summary = "Approve a commit for an environment",
    description = "The caller's identity (a signed-in person's e-mail or subject, or the API token's name) \
        approves the promotion of a control-plane commit into an environment; the caller must be an approver \
        of the environment (role, or a token with the `approve` or `approve:ENV` scope). \
        The same identity approving twice counts once (`counted: false`); both are in the audit log. When the \
        environment's PromotionPolicy names approvers, an identity that is none of them is refused (403).",
    request_body(content = ApprovalRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded.", body = ApprovalAnswer),
        (status = 403, description = "The caller may not approve for this environment.", body = ErrorBody),
        (status = 404, description = "No such environment.", body = ErrorBody),
    ))]
pub(crate) async fn approve(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let (who, request): (_, ApprovalRequest) =
        prelude(&state, &headers, body, |env| Action::Approve(env)).await?;
    ok(approve_as(&state, who, request).await?)
}

/// [`approve`] once the caller is known and allowed: shared with the dashboard's form.
pub(crate) async fn approve_as(
    state: &HubState,
    who: Principal,
    request: ApprovalRequest,
) -> Result<ApprovalAnswer, ApiError> {
    let comment = text("comment", request.comment.as_deref(), false)?;
    let commit = control_plane_commit(state, &request.commit).await?;
    if let policy::StoredPolicy::Valid(p) = policy::stored_policy(state.db(), &request.environment).await?
        && !p.may_approve(&who.identity, &who.groups)
    {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            None,
            format!(
                "{} may not approve promotions into {}: PromotionPolicy {:?} names the approvers {}",
                who.identity,
                request.environment,
                p.name,
                p.approvers
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let inserted = sqlx::query(
        "INSERT INTO approvals (environment, commit_sha, actor, groups, comment, approved_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (environment, commit_sha, actor) DO NOTHING",
    )
    .bind(&request.environment)
    .bind(&commit)
    .bind(&who.identity)
    .bind(serde_json::to_string(&who.groups).unwrap_or_else(|_| "[]".into()))
    .bind(&comment)
    .bind(now_ms())
    .execute(state.db().pool())
    .await
    .map_err(crate::db::DbError::from)?
    .rows_affected();
    let counted = inserted == 1;
    audit::record(
        state.db(),
        state.notifier(),
        Entry {
            actor: who.identity.clone(),
            kind: AuditKind::Approval,
            environment: request.environment.clone(),
            commit: Some(commit.clone()),
            reason: comment,
            detail: if counted {
                String::new()
            } else {
                "already approved by this identity: counted once".to_owned()
            },
        },
    )
    .await?;
    let approved_by = policy::approvals(state.db(), &request.environment, &commit)
        .await?
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    Ok(ApprovalAnswer {
        environment: request.environment,
        commit,
        actor: who.identity,
        counted,
        approved_by,
    })
}

pub(crate) fn freeze_answer(environment: &str, f: &policy::ActiveFreeze) -> Freeze {
    Freeze {
        id: f.id,
        environment: environment.to_owned(),
        reason: f.reason.clone(),
        actor: f.actor.clone(),
        frozen_at: format_time(f.frozen_at),
        until: f.until.map(format_time),
    }
}

/// `POST /api/v1/freezes`.
#[utoipa::path(post, path = "/api/v1/freezes", tag = "actions",
    summary = "Freeze an environment (stop the line)",
    description = "No promotion into the environment until it is unfrozen or `until` passes: its gate's \
        `promotion` lists the freeze as a requirement not met. The environment's approvers and admins may. \
        Recorded in the audit log with the caller's identity.",
    request_body(content = FreezeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Frozen.", body = Freeze),
        (status = 404, description = "No such environment.", body = ErrorBody),
    ))]
pub(crate) async fn freeze(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let (who, request): (_, FreezeRequest) =
        prelude(&state, &headers, body, |env| Action::Freeze(env)).await?;
    ok(freeze_as(&state, who, request).await?)
}

/// [`freeze`] once the caller is known and allowed: shared with the dashboard's form.
pub(crate) async fn freeze_as(
    state: &HubState,
    who: Principal,
    request: FreezeRequest,
) -> Result<Freeze, ApiError> {
    let reason = text("reason", Some(&request.reason), true)?;
    let now = now_ms();
    let until = match request.until.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(t) => {
            let at = parse_time(t).ok_or_else(|| bad("until", format!("{t:?} is not an RFC 3339 time")))?;
            if at <= now {
                return Err(bad("until", format!("{t} is not in the future")));
            }
            Some(at)
        }
    };
    let id: i64 = sqlx::query(
        "INSERT INTO freezes (environment, reason, actor, frozen_at, until_at) VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(&request.environment)
    .bind(&reason)
    .bind(&who.identity)
    .bind(now)
    .bind(until)
    .fetch_one(state.db().pool())
    .await
    .map_err(crate::db::DbError::from)?
    .try_get(0)
    .map_err(crate::db::DbError::from)?;
    audit::record(
        state.db(),
        state.notifier(),
        Entry {
            actor: who.identity.clone(),
            kind: AuditKind::Freeze,
            environment: request.environment.clone(),
            commit: None,
            reason: reason.clone(),
            detail: until
                .map(|u| format!("until {}", format_time(u)))
                .unwrap_or_else(|| "until unfrozen".to_owned()),
        },
    )
    .await?;
    Ok(freeze_answer(
        &request.environment,
        &policy::ActiveFreeze {
            id,
            actor: who.identity,
            reason,
            frozen_at: now,
            until,
        },
    ))
}

/// `POST /api/v1/unfreezes`.
#[utoipa::path(post, path = "/api/v1/unfreezes", tag = "actions",
    summary = "Unfreeze an environment",
    description = "Lifts every freeze in force. The environment's approvers and admins may. Recorded in the \
        audit log with the caller's identity (also when there was none to lift).",
    request_body(content = UnfreezeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The freezes lifted.", body = UnfreezeAnswer),
        (status = 404, description = "No such environment.", body = ErrorBody),
    ))]
pub(crate) async fn unfreeze(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let (who, request): (_, UnfreezeRequest) =
        prelude(&state, &headers, body, |env| Action::Freeze(env)).await?;
    ok(unfreeze_as(&state, who, request).await?)
}

/// [`unfreeze`] once the caller is known and allowed: shared with the dashboard's form.
pub(crate) async fn unfreeze_as(
    state: &HubState,
    who: Principal,
    request: UnfreezeRequest,
) -> Result<UnfreezeAnswer, ApiError> {
    let reason = text("reason", request.reason.as_deref(), false)?;
    let now = now_ms();
    let active = policy::active_freezes(state.db(), &request.environment, now).await?;
    for f in &active {
        sqlx::query("UPDATE freezes SET lifted_at = $1, lifted_by = $2 WHERE id = $3 AND lifted_at IS NULL")
            .bind(now)
            .bind(&who.identity)
            .bind(f.id)
            .execute(state.db().pool())
            .await
            .map_err(crate::db::DbError::from)?;
    }
    audit::record(
        state.db(),
        state.notifier(),
        Entry {
            actor: who.identity.clone(),
            kind: AuditKind::Unfreeze,
            environment: request.environment.clone(),
            commit: None,
            reason,
            detail: if active.is_empty() {
                "it was not frozen".to_owned()
            } else {
                format!(
                    "lifted {}",
                    active
                        .iter()
                        .map(|f| format!("the freeze by {} ({})", f.actor, f.reason))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        },
    )
    .await?;
    Ok(UnfreezeAnswer {
        lifted: active
            .iter()
            .map(|f| freeze_answer(&request.environment, f))
            .collect(),
        environment: request.environment,
    })
}

/// `POST /api/v1/promotions`.
#[utoipa::path(post, path = "/api/v1/promotions", tag = "actions",
    summary = "Report a promotion",
    description = "`kalypso promote` reports each promotion it pushed, so that the audit log says who promoted; \
        with `overrideReason`, the promotion went ahead although the gate refused it and is recorded as an \
        `override` naming the requirements not met. (Promotions nobody reports are recorded when the hub sees \
        the environment's GitOps branch move, with the actor `hub`.) The environment's approvers and admins \
        may (a CI token with the `approve:ENV` scope).",
    request_body(content = PromotionReport, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded.", body = IngestAnswer),
        (status = 404, description = "No such environment.", body = ErrorBody),
    ))]
pub(crate) async fn report_promotion(
    State(state): State<HubState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let (who, report): (_, PromotionReport) =
        prelude(&state, &headers, body, |env| Action::Promote(env)).await?;
    ok(report_promotion_as(&state, who, report).await?)
}

/// [`report_promotion`] once the caller is known and allowed.
pub(crate) async fn report_promotion_as(
    state: &HubState,
    who: Principal,
    report: PromotionReport,
) -> Result<IngestAnswer, ApiError> {
    if let Some(from) = &report.from {
        check_environment_name("from", from)?;
    }
    let message = text("message", report.message.as_deref(), false)?;
    let override_reason = text("overrideReason", report.override_reason.as_deref(), false)?;
    if report.unmet.len() > 100 {
        return Err(bad("unmet", "lists over 100 requirements"));
    }
    let mut unmet = Vec::new();
    for (i, u) in report.unmet.iter().enumerate() {
        unmet.push(text(&format!("unmet[{i}]"), Some(u), true)?);
    }
    let commit = control_plane_commit(state, &report.commit).await?;
    let from = report
        .from
        .as_deref()
        .map(|f| format!("from {f}"))
        .unwrap_or_default();
    let (kind, reason, detail) = if override_reason.is_empty() {
        (AuditKind::Promotion, message, from)
    } else {
        (
            AuditKind::Override,
            override_reason,
            format!(
                "{from}{}not met: {}",
                if from.is_empty() { "" } else { "; " },
                if unmet.is_empty() {
                    "(none given)".to_owned()
                } else {
                    unmet.join("; ")
                }
            ),
        )
    };
    audit::record(
        state.db(),
        state.notifier(),
        Entry {
            actor: who.identity,
            kind,
            environment: report.environment,
            commit: Some(commit),
            reason,
            detail,
        },
    )
    .await?;
    Ok(IngestAnswer {
        result: IngestResult::Stored,
    })
}

/// `GET /api/v1/audit`.
#[utoipa::path(get, path = "/api/v1/audit", tag = "queries",
    summary = "The audit log",
    description = "Approvals, freezes, unfreezes, promotions and overrides: who, when, what and why, newest \
        first. Append-only: no route changes or deletes an entry.",
    params(
        ("environment" = Option<String>, Query, description = "Only this environment."),
        ("kind" = Option<String>, Query, pattern = "^(approval|freeze|unfreeze|promotion|override)?$", description = "Only this kind."),
        ("actor" = Option<String>, Query, description = "Only this actor."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 10000, description = "Page size (default 100)."),
        ("offset" = Option<i64>, Query, minimum = 0, maximum = 4611686018427387903_i64, description = "Page start."),
    ),
    responses(
        (status = 200, description = "One page of the log.", body = AuditList),
        (status = 400, description = "A bad filter or page (`field` names it).", body = ErrorBody),
    ))]
pub(crate) async fn audit(
    State(state): State<HubState>,
    headers: HeaderMap,
    Query(params): Params,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    let kind = params
        .get("kind")
        .filter(|s| !s.is_empty())
        .map(|k| {
            k.parse::<AuditKind>().map_err(|()| {
                bad(
                    "kind",
                    format!(
                        "{k:?} is not one of {}",
                        AuditKind::ALL.map(AuditKind::as_str).join(", ")
                    ),
                )
            })
        })
        .transpose()?;
    let filter = audit::Filter {
        environment: params.get("environment").filter(|s| !s.is_empty()).cloned(),
        kind,
        actor: params.get("actor").filter(|s| !s.is_empty()).cloned(),
        limit: int_param(
            &params,
            "limit",
            crate::http::DEFAULT_LIMIT,
            crate::http::MAX_LIMIT,
        )?,
        offset: int_param(&params, "offset", 0, i64::MAX / 2)?,
    };
    let list: AuditList = audit::list(state.db(), &filter).await?;
    ok(list)
}

/// The notification a report of a failure makes, if it is one.
pub(crate) fn failure_event(report: &Report) -> Option<Event> {
    (report.drives && report.state == ClusterState::Failed).then(|| Event {
        kind: EventKind::ClusterFailed,
        environment: report.environment.clone(),
        commit: Some(report.commit.clone()).filter(|c| !c.is_empty()),
        actor: report.cluster.clone(),
        message: format!(
            "cluster {} ({}) failed to apply {}: {}",
            report.cluster,
            report.cluster_type,
            if report.revision.is_empty() {
                "its commit"
            } else {
                &report.revision
            },
            report.message
        ),
    })
}

/// Sends the failure, once stored as news (not a duplicate or an older report).
pub(crate) fn notify_failure(state: &HubState, failure: Option<Event>, answer: &IngestAnswer) {
    if let Some(event) = failure
        && answer.result == IngestResult::Stored
    {
        state.notifier().send(event);
    }
}

/// Notifies a promotion gate that refuses: `gate-blocked` (naming every requirement not met),
/// or `approval-needed` when approvals are all that is missing; each once per change.
pub(crate) fn notify_gate(state: &HubState, gate: &Gate, promotion: &PromotionGate) {
    if promotion.may_promote {
        return;
    }
    let Some(commit) = gate.control_plane_commit.clone() else {
        return;
    };
    let unmet: Vec<&kalypso_hub_api::Requirement> = promotion
        .requirements
        .iter()
        .filter(|r| r.state != RequirementState::Met)
        .collect();
    let summary = unmet
        .iter()
        .map(|r| r.summary.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if !state.news(&promotion.into, &commit, &summary) {
        return;
    }
    let only_approvals = unmet.iter().all(|r| r.kind == RequirementKind::Approvals);
    state.notifier().send(Event {
        kind: if only_approvals {
            EventKind::ApprovalNeeded
        } else {
            EventKind::GateBlocked
        },
        environment: promotion.into.clone(),
        message: format!(
            "promotion of {} from {} into {}: {summary}",
            kalypso_git::control_plane::short(&commit),
            gate.environment,
            promotion.into
        ),
        commit: Some(commit),
        actor: "hub".to_owned(),
    });
}
