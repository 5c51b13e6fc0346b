//! The hub's OpenAPI 3 document, generated from the API's types (`kalypso-hub-api`) and the
//! handlers' annotations in [`crate::http`], served at `GET /api/v1/openapi.json` and
//! committed as `docs/hub-openapi.json` (a test fails when the two differ).
//!
//! What every operation shares is added here once rather than on each handler: the error
//! answers (400, 401 with `WWW-Authenticate`, 413, 429 and 503 with `Retry-After`, all an
//! [`ErrorBody`]) and the security requirements of its kind — an HMAC signature of the body
//! (`X-Signature`) or a bearer token with the report scope for reports, a bearer token or the
//! dashboard's session cookie for queries — which apply when the hub has such credentials
//! (see [`crate::auth`]).

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kalypso_hub_api::ErrorBody;
use utoipa::openapi::path::{HttpMethod, OperationBuilder};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{ContentBuilder, HeaderBuilder, OpenApi as Document, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use crate::http;

/// The operations' tags.
pub const REPORTS: &str = "reports";
/// Queries and the gate.
pub const QUERIES: &str = "queries";
/// What people and `kalypso promote` do: approvals, freezes, promotion reports.
pub const ACTIONS: &str = "actions";
/// Health and the document itself.
pub const SERVICE: &str = "service";
/// The dashboard's machine-readable endpoint.
pub const DASHBOARD: &str = "dashboard";

/// The security scheme of reports.
const HMAC: &str = "hmacSignature";
/// The security scheme of queries (and of reports from agents that cannot sign).
const BEARER: &str = "bearerToken";
/// The dashboard's session, which reads too.
const SESSION: &str = "sessionCookie";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "kalypso Deployment Observability Hub",
        description = "Clusters report whether they applied their platform GitOps commits; the hub correlates \
                       them with the GitOps history kalypso wrote and answers where commits and workloads \
                       run, and the promotion gate. See docs/hub.md.",
        license(name = "MIT"),
    ),
    paths(
        http::flux_event,
        http::compliance,
        http::list_clusters,
        http::get_cluster,
        http::list_environments,
        http::get_environment,
        http::get_gate,
        http::waves::get_waves,
        http::waves::get_rollout,
        http::get_commit,
        http::get_workload,
        crate::http::actions::approve,
        crate::http::actions::freeze,
        crate::http::actions::unfreeze,
        crate::http::actions::report_promotion,
        crate::http::actions::audit,
        http::healthz,
        http::readyz,
        openapi_json,
    ),
    tags(
        (name = "reports", description = "What clusters post: Flux events and generic compliance reports."),
        (name = "queries", description = "Clusters, environments, commits, workloads and the promotion gate."),
        (name = "actions", description = "Approvals, freezes and promotion reports: each validated, then recorded in the audit log."),
        (name = "service", description = "Health, readiness and this document."),
        (name = "dashboard", description = "The fleet dashboard's live-update stream (its pages are HTML, at `/`)."),
    ),
    modifiers(&Shared),
)]
struct ApiDoc;

/// The document.
pub fn document() -> Document {
    ApiDoc::openapi()
}

/// The document as the hub serves it and `docs/hub-openapi.json` holds it: pretty JSON, keys
/// in a stable order, a final newline.
pub fn document_json() -> String {
    let mut text = document().to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

/// `GET /api/v1/openapi.json`.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "service",
    summary = "This document",
    description = "Readable without a token: it describes the API, not the fleet.",
    responses((status = 200, description = "The OpenAPI 3 document of this API.", content_type = "application/json", body = Object)))]
pub(crate) async fn openapi_json() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let text = DOCUMENT.get_or_init(document_json).clone();
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        text,
    )
        .into_response()
}

/// The route of the document, for the hub's router.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/api/v1/openapi.json", get(openapi_json))
}

/// Adds the security schemes, and each operation's shared error answers and security.
struct Shared;

fn error_response(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        "application/json",
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(ErrorBody::name())))
            .build(),
    )
}

/// `GET /events`, served by the dashboard (crates/dashboard) when the hub serves it.
fn dashboard_events() -> OperationBuilder {
    let text = |description: &str| {
        ResponseBuilder::new().description(description).content(
            "text/plain",
            ContentBuilder::new().schema(Some(String::schema())).build(),
        )
    };
    OperationBuilder::new()
        .tag(DASHBOARD)
        .operation_id(Some("dashboard_events"))
        .summary(Some("The dashboard's live updates"))
        .description(Some(
            "A server-sent event stream that does not end: an event `version` at once and whenever the fleet \
             data changes (its `data` is a number that only says \"changed\"); the pages re-fetch themselves \
             when it does. Served with the dashboard (not with --no-dashboard); it needs a bearer token that \
             reads, or a session, when the hub has credentials, unless the hub runs with --dashboard-public.",
        ))
        .response(
            "200",
            ResponseBuilder::new().description("The stream.").content(
                "text/event-stream",
                ContentBuilder::new().schema(Some(String::schema())).build(),
            ),
        )
        .response(
            "401",
            text("No valid credentials (bearer token or session).").header(
                "WWW-Authenticate",
                HeaderBuilder::new().schema(String::schema()).build(),
            ),
        )
        .response("403", text("The credentials do not allow reading."))
        .securities(Some([
            SecurityRequirement::new(BEARER, Vec::<String>::new()),
            SecurityRequirement::new(SESSION, Vec::<String>::new()),
        ]))
}

impl Modify for Shared {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            HMAC,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-Signature",
                "`sha256=<hex HMAC-SHA256 of the body>` with the hub's webhook secret (Flux's generic-hmac \
                 Provider sends exactly this); required when the hub runs with --webhook-secret-file.",
            ))),
        );
        components.add_security_scheme(
            BEARER,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token: the one of --api-token-file (allowed everything), or a named token of the \
                         hub's configuration file, allowed its scopes (`read` for queries, `report` for reports, \
                         `approve`, `approve:ENV`, `admin`). Queries need one (or a session) once the hub has a \
                         credential that reads; a token without the scope is answered 403.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            SESSION,
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::session::SESSION_COOKIE,
                "The dashboard's session of a person signed in with OpenID Connect (`/auth/sign-in`), \
                 whose role reads (viewer, approver or admin). State-changing requests of a session also \
                 carry its CSRF token (`X-CSRF-Token`, or the `csrf` field of a form).",
            ))),
        );
        let retry_after = HeaderBuilder::new()
            .schema(u32::schema())
            .description(Some("Seconds to wait before trying again."))
            .build();
        let www_authenticate = HeaderBuilder::new()
            .schema(String::schema())
            .description(Some("`Bearer`, on a query without the right token."))
            .build();
        doc.paths
            .add_path_operation("/events", vec![HttpMethod::Get], dashboard_events());
        for item in doc.paths.paths.values_mut() {
            for operation in [&mut item.get, &mut item.post].into_iter().flatten() {
                let tags = operation.tags.clone().unwrap_or_default();
                let responses = &mut operation.responses.responses;
                let mut add = |status: &str, response: ResponseBuilder| {
                    responses
                        .entry(status.to_owned())
                        .or_insert_with(|| response.build().into());
                };
                let forbidden = || {
                    error_response(
                        "The credentials are valid but do not allow this: a token without the scope, a person \
                         without the role (the message names them).",
                    )
                };
                if tags.iter().any(|t| t == REPORTS) {
                    operation.security = Some(vec![
                        SecurityRequirement::new(HMAC, Vec::<String>::new()),
                        SecurityRequirement::new(BEARER, Vec::<String>::new()),
                    ]);
                    add(
                        "400",
                        error_response(
                            "Malformed JSON, a missing or bad field, a revision that is not a git commit, an \
                             unknown state: `field` names it. Nothing is stored.",
                        ),
                    );
                    add(
                        "401",
                        error_response(
                            "`X-Signature` is missing or wrong (`field`: `X-Signature`), or the bearer token is \
                             not valid (`field`: `Authorization`). Nothing is stored.",
                        ),
                    );
                    add("403", forbidden());
                    add(
                        "413",
                        error_response("The body is over 1 MiB. Nothing is stored."),
                    );
                    add(
                        "429",
                        error_response(
                            "The cluster is over its report rate (`--cluster-rate`) and this report changes no \
                             state or commit the hub holds: not stored; send it again after `Retry-After` \
                             seconds. A report that changes a state or commit is never refused.",
                        )
                        .header("Retry-After", retry_after.clone()),
                    );
                }
                if tags.iter().any(|t| t == ACTIONS) {
                    add(
                        "400",
                        error_response(
                            "Malformed JSON, a missing or bad field (`field` names it). Nothing is stored.",
                        ),
                    );
                    add(
                        "413",
                        error_response("The body is over 1 MiB. Nothing is stored."),
                    );
                }
                if tags.iter().any(|t| t == QUERIES || t == ACTIONS) {
                    operation.security = Some(vec![
                        SecurityRequirement::new(BEARER, Vec::<String>::new()),
                        SecurityRequirement::new(SESSION, Vec::<String>::new()),
                    ]);
                    add(
                        "401",
                        error_response("No valid credentials: the bearer token is missing or wrong, and no session (`field`: `Authorization`).")
                            .header("WWW-Authenticate", www_authenticate.clone()),
                    );
                    add("403", forbidden());
                }
                if tags.iter().any(|t| t == REPORTS || t == QUERIES || t == ACTIONS) {
                    add(
                        "503",
                        error_response("The database is down, locked or shutting down: retry later.")
                            .header("Retry-After", retry_after.clone()),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_route_of_the_api_is_described() {
        let doc = document();
        let mut paths: Vec<&str> = doc.paths.paths.keys().map(String::as_str).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "/api/v1/approvals",
                "/api/v1/audit",
                "/api/v1/clusters",
                "/api/v1/clusters/{environment}/{name}",
                "/api/v1/commits/{sha}",
                "/api/v1/compliance",
                "/api/v1/environments",
                "/api/v1/environments/{environment}",
                "/api/v1/environments/{environment}/gate",
                "/api/v1/environments/{environment}/rollout",
                "/api/v1/environments/{environment}/waves",
                "/api/v1/events/flux",
                "/api/v1/freezes",
                "/api/v1/openapi.json",
                "/api/v1/promotions",
                "/api/v1/unfreezes",
                "/api/v1/workloads/{name}",
                "/events",
                "/healthz",
                "/readyz",
            ]
        );
        let gate = doc.paths.paths["/api/v1/environments/{environment}/gate"]
            .get
            .as_ref()
            .unwrap();
        let statuses: Vec<&str> = gate.responses.responses.keys().map(String::as_str).collect();
        assert_eq!(statuses, ["200", "400", "401", "403", "503"]);
    }
}
