//! The fleet dashboard served by the hub: [`kalypso_dashboard::router`] over a
//! [`HubSource`], merged with the API's router and the sign-in pages ([`crate::auth::routes`])
//! so that one port serves the pages at `/`, the API under `/api/v1` and `/healthz`, `/readyz`.
//!
//! The pages are read-only, but they show what the API shows, so they are protected the same
//! way ([`crate::auth::authorize`] for [`Action::Read`]): once the hub has a credential that
//! reads, every dashboard request (pages, `/events`, assets) needs a signed-in person with a
//! role, or `Authorization: Bearer <token>` (e.g. added by an authenticating reverse proxy) —
//! unless the hub was started with `--dashboard-public`, which serves the dashboard to anyone
//! (the API keeps requiring credentials). Without a session, a page asked for by a browser is
//! redirected to the sign-in when the hub has OpenID Connect, and answered 401 otherwise. The
//! header of every page says who is signed in, with the sign-out button, or links to the
//! sign-in. No token is ever written into a page.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use kalypso_dashboard::{Account, AccountAction, SignedIn};

use crate::auth::{self, Action, PrincipalKind, SIGN_IN_PATH, SIGN_OUT_PATH};
use crate::fleet_source::HubSource;
use crate::http::HubState;

/// How the dashboard is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DashboardMode {
    /// Served, behind the API's credentials when it has some.
    #[default]
    Protected,
    /// Served without credentials even when the API has some.
    Public,
    /// Not served.
    Off,
}

/// The dashboard's data source over the hub's state.
pub fn source(state: &HubState) -> HubSource {
    HubSource::new(state.db().clone(), state.stale_after()).with_control_plane(state.refresher().clone())
}

/// The dashboard's router over `state` with `options`, behind the API's credentials unless
/// `mode` is [`DashboardMode::Public`], with the sign-in pages; `None` when it is
/// [`DashboardMode::Off`].
pub fn router(state: &HubState, mode: DashboardMode, options: kalypso_dashboard::Options) -> Option<Router> {
    let releases = crate::release_pages::router(state.clone())
        .layer(middleware::from_fn(kalypso_dashboard::account::fill));
    let dashboard =
        kalypso_dashboard::router_with(std::sync::Arc::new(source(state)), options).merge(releases);
    let public = match mode {
        DashboardMode::Off => return None,
        DashboardMode::Public => true,
        DashboardMode::Protected => false,
    };
    let guarded = dashboard.layer(middleware::from_fn_with_state(
        (state.clone(), public),
        require_reader,
    ));
    Some(auth::routes::router(state.clone()).merge(guarded))
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

fn sign_in_url(path_and_query: &str) -> String {
    let next: String = url::form_urlencoded::byte_serialize(path_and_query.as_bytes()).collect();
    format!("{SIGN_IN_PATH}?next={next}")
}

/// The header's links to the release pages ([`crate::release_pages`]), for those who may read.
fn release_links() -> Vec<(String, String)> {
    vec![
        ("Releases".to_owned(), "/releases".to_owned()),
        ("Audit log".to_owned(), "/audit".to_owned()),
    ]
}

async fn require_reader(
    State((state, public)): State<(HubState, bool)>,
    mut request: Request,
    next: Next,
) -> Response {
    let auth = state.auth();
    let here = request
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let signed_out = Account {
        signed_in: None,
        sign_in_url: auth.oidc().map(|_| sign_in_url(&here)),
        links: Vec::new(),
    };
    match auth::authorize(&state, request.headers(), Action::Read) {
        Ok(principal) => {
            let session = (principal.kind == PrincipalKind::Person)
                .then(|| {
                    auth.sessions()
                        .read(request.headers(), crate::http::now_ms() / 1000)
                })
                .flatten();
            let account = match session {
                Some(session) => Account {
                    signed_in: Some(SignedIn {
                        identity: principal.identity.clone(),
                        roles: principal.describe(),
                        csrf: session.csrf,
                        sign_out_url: SIGN_OUT_PATH.to_owned(),
                        actions: if principal.grants.allow(Action::Admin) {
                            vec![AccountAction {
                                label: "Refresh now".to_owned(),
                                url: auth::routes::REFRESH_PATH.to_owned(),
                            }]
                        } else {
                            Vec::new()
                        },
                    }),
                    sign_in_url: None,
                    links: release_links(),
                },
                None => Account {
                    links: release_links(),
                    ..signed_out
                },
            };
            request.extensions_mut().insert(account);
            next.run(request).await
        }
        Err(_) if public => {
            request.extensions_mut().insert(signed_out);
            next.run(request).await
        }
        Err(e) => {
            let has_bearer = request.headers().contains_key(header::AUTHORIZATION);
            let is_page = request.method() == Method::GET
                && request.uri().path() != "/events"
                && !request.uri().path().starts_with("/assets/");
            if e.status() == StatusCode::UNAUTHORIZED && auth.oidc().is_some() && !has_bearer && is_page {
                let mut response = StatusCode::SEE_OTHER.into_response();
                if let Ok(location) = HeaderValue::from_str(&sign_in_url(&here)) {
                    response.headers_mut().insert(header::LOCATION, location);
                }
                return response;
            }
            if e.status() == StatusCode::FORBIDDEN {
                return kalypso_dashboard::page(
                    StatusCode::FORBIDDEN,
                    kalypso_dashboard::render::message_page(
                        "Not allowed",
                        e.message(),
                        (SIGN_IN_PATH, "Sign in as someone else"),
                    ),
                );
            }
            let mut response = (
                StatusCode::UNAUTHORIZED,
                if auth.oidc().is_some() {
                    "the dashboard needs a signed-in person (/auth/sign-in) or the hub's API token (Authorization: Bearer)\n"
                } else {
                    "the dashboard needs the hub's API token (Authorization: Bearer), or a hub started with --dashboard-public\n"
                },
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}
