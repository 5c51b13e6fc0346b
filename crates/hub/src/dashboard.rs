//! The fleet dashboard served by the hub: [`kalypso_dashboard::router`] over a
//! [`HubSource`], merged with the API's router so that one
//! port serves the pages at `/`, the API under `/api/v1` and `/healthz`, `/readyz`.
//!
//! The pages are read-only, but they show what the API shows, so they are protected the same
//! way: when the hub has an API token, every dashboard request (pages, `/events`, assets)
//! must carry `Authorization: Bearer <token>` — typically added by an authenticating reverse
//! proxy in front of the hub — unless the hub was started with `--dashboard-public`, which
//! serves the dashboard without a token (the API keeps requiring it). The token is never
//! written into a page.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::fleet_source::HubSource;
use crate::http::HubState;

/// How the dashboard is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DashboardMode {
    /// Served, behind the API token when there is one.
    #[default]
    Protected,
    /// Served without a token even when the API has one.
    Public,
    /// Not served.
    Off,
}

/// The dashboard's data source over the hub's state.
pub fn source(state: &HubState) -> HubSource {
    HubSource::new(state.db().clone(), state.stale_after())
}

/// The dashboard's router over `state` with `options`, behind the API token unless `mode`
/// is [`DashboardMode::Public`]; `None` when it is [`DashboardMode::Off`].
pub fn router(state: &HubState, mode: DashboardMode, options: kalypso_dashboard::Options) -> Option<Router> {
    let dashboard = kalypso_dashboard::router_with(std::sync::Arc::new(source(state)), options);
    match mode {
        DashboardMode::Off => None,
        DashboardMode::Public => Some(dashboard),
        DashboardMode::Protected => {
            Some(dashboard.layer(middleware::from_fn_with_state(state.clone(), require_token)))
        }
    }
}

/// The API's router with the dashboard merged in (the API's routes win; the dashboard's
/// fallback answers every other path with its 404 page).
pub fn app(state: HubState, mode: DashboardMode, options: kalypso_dashboard::Options) -> Router {
    let api = crate::app(state.clone());
    match router(&state, mode, options) {
        Some(dashboard) => api.merge(dashboard),
        None => api,
    }
}

async fn require_token(State(state): State<HubState>, request: Request, next: Next) -> Response {
    if state.authorized(request.headers()) {
        return next.run(request).await;
    }
    let mut response = (
        StatusCode::UNAUTHORIZED,
        "the dashboard needs the hub's API token (Authorization: Bearer), or a hub started with --dashboard-public\n",
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}
