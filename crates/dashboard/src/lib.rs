//! The fleet dashboard of the Deployment Observability Hub: a web UI that shows where every
//! control-plane commit got to and which clusters comply with it.
//!
//! The crate is separate from the hub so that the UI can be built, tested in a browser and
//! benchmarked without a database: it owns the view models ([`model`]), the HTML ([`render`]),
//! its CSS and JavaScript (served under `/assets/`, embedded in the binary) and an axum
//! [`Router`] ([`router`]); it reads its data through the [`FleetSource`] trait, which the hub
//! implements over its storage and [`MemorySource`] implements in memory.
//!
//! Pages (all server-rendered; each has a stable URL whose query string holds its filters):
//!
//! - `/`: the fleet map, environments × cluster types (`?environment=`, `?state=`,
//!   `?cluster-type=`, `?page=`);
//! - `/promotions`: control-plane commits × environments, with lead times and blockers;
//! - `/environments/{env}/cluster-types/{name}`: labels, deployment targets, platform config
//!   with provenance, clusters (`?state=`, `?page=`);
//! - `/workloads/{name}`: where a workload runs;
//! - `/environments/{env}/clusters/{name}`: a cluster's reports;
//! - `/environments/{env}/rollout`: the environment's progressive rollout ([`rollout`]): its
//!   waves, their cluster types and clusters, the soak and what blocks.
//!
//! The hub adds the release pages ([`release`]: `/releases`, `/environments/{env}/promotion`,
//! `/audit`), rendered here from view models it builds.
//!
//! `/events` is a server-sent event stream of [`FleetSource::version`]; the pages' script
//! re-fetches the page when it changes and swaps its `#live` part in place.

#![warn(missing_docs)]

pub mod account;
pub mod demo;
pub mod memory;
pub mod model;
pub mod release;
pub mod render;
pub mod rollout;

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, RawQuery, State as AxumState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use futures::Stream;
use maud::Markup;

pub use account::{Account, AccountAction, SignedIn};
pub use memory::MemorySource;
pub use model::{
    ClusterPage, ClusterQuery, ClusterState, ClusterTypePage, FleetColumn, FleetFilter, FleetMap,
    FleetSource, Page, PromotionFilter, PromotionView, SourceError, State, WorkloadPage,
};

/// How the router behaves.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// How often `/events` asks the source for its version.
    pub poll_interval: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            poll_interval: Duration::from_secs(2),
        }
    }
}

struct App<S> {
    source: Arc<S>,
    options: Options,
    /// The last version read for `/events` and when: however many pages are open, the source
    /// is asked about twice per poll interval, not once per page.
    last_version: Mutex<Option<(Instant, u64)>>,
}

impl<S: FleetSource> App<S> {
    async fn shared_version(&self) -> Result<u64, SourceError> {
        let fresh_for = self.options.poll_interval / 2;
        if let Some((at, version)) = *self.last_version.lock().unwrap_or_else(PoisonError::into_inner)
            && at.elapsed() < fresh_for
        {
            return Ok(version);
        }
        let version = self.source.version().await?;
        *self.last_version.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), version));
        Ok(version)
    }

    /// Whether the source knows environment `name` (to say which name of a path is unknown).
    async fn has_environment(&self, name: &str) -> bool {
        let filter = FleetFilter {
            environment: Some(name.to_owned()),
            state: None,
            cluster_type: None,
            page: Some(Page::new(1, 1)),
        };
        self.source
            .fleet(&filter)
            .await
            .is_ok_and(|map| map.all_environments.iter().any(|e| e == name))
    }
}

type Shared<S> = Arc<App<S>>;

/// The dashboard's router with default [`Options`], to serve at `/` (or to merge into the
/// hub's router).
pub fn router<S: FleetSource>(source: Arc<S>) -> Router {
    router_with(source, Options::default())
}

/// The dashboard's router.
pub fn router_with<S: FleetSource>(source: Arc<S>, options: Options) -> Router {
    Router::new()
        .route("/", get(fleet::<S>))
        .route("/promotions", get(promotions::<S>))
        .route("/environments/{env}", get(environment))
        .route("/environments/{env}/cluster-types/{name}", get(cluster_type::<S>))
        .route("/environments/{env}/clusters/{name}", get(cluster::<S>))
        .route("/environments/{env}/rollout", get(rollout_page::<S>))
        .route("/workloads/{name}", get(workload::<S>))
        .route("/events", get(events::<S>))
        .route("/assets/dashboard.css", get(css))
        .route("/assets/dashboard.js", get(js))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(account::fill))
        .with_state(Arc::new(App {
            source,
            options,
            last_version: Mutex::new(None),
        }))
}

const CSS: &str = include_str!("../assets/dashboard.css");
const JS: &str = include_str!("../assets/dashboard.js");

/// No inline script or style is ever needed: a markup injection that escaped escaping still
/// could not run.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// An HTML answer with the dashboard's headers (its content security policy, no caching).
pub fn page(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn not_found_page(message: &str) -> Response {
    page(StatusCode::NOT_FOUND, render::error_page("Not found", message))
}

fn bad_request(message: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        render::error_page("Bad request", message),
    )
}

fn source_error(error: &SourceError) -> Response {
    match error {
        SourceError::Unavailable(_) => page(
            StatusCode::SERVICE_UNAVAILABLE,
            render::error_page(
                "Fleet data unavailable",
                &format!("{error}. Try again in a moment."),
            ),
        ),
        SourceError::Internal(_) => page(
            StatusCode::INTERNAL_SERVER_ERROR,
            render::error_page("Something went wrong", &error.to_string()),
        ),
    }
}

async fn not_found() -> Response {
    not_found_page("There is no page at this address.")
}

/// The query string's parameters.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(raw: Option<&str>) -> Query {
        Query(
            raw.map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }

    /// The last non-empty value of `key`, trimmed.
    fn get(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
    }

    /// The `state` filter; the error is the bad-request message.
    fn state(&self) -> Result<Option<State>, String> {
        self.get("state")
            .map(|s| s.parse::<State>())
            .transpose()
            .map_err(|e| e.to_string())
    }

    /// The `page` and `size`; the error is the bad-request message.
    fn page(&self, default_size: u64) -> Result<Page, String> {
        let number = |key: &str, default: u64| {
            self.get(key).map_or(Ok(default), |v| {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{key} must be a positive number, not {v:?}"))
            })
        };
        Ok(Page::new(number("page", 1)?, number("size", default_size)?))
    }
}

async fn version<S: FleetSource>(app: &App<S>) -> Result<u64, Response> {
    app.source.version().await.map_err(|e| source_error(&e))
}

async fn fleet<S: FleetSource>(AxumState(app): AxumState<Shared<S>>, RawQuery(raw): RawQuery) -> Response {
    let query = Query::parse(raw.as_deref());
    let filter = match query.state().and_then(|state| {
        Ok(FleetFilter {
            environment: query.get("environment"),
            state,
            cluster_type: query.get("cluster-type"),
            page: Some(query.page(memory::DEFAULT_PAGE_SIZE)?),
        })
    }) {
        Ok(filter) => filter,
        Err(message) => return bad_request(&message),
    };
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match app.source.fleet(&filter).await {
        Ok(map) => {
            if let Some(env) = &filter.environment
                && !map.all_environments.contains(env)
            {
                return not_found_page(&format!("There is no environment {env:?}."));
            }
            page(StatusCode::OK, render::fleet_page(&map, &filter, version))
        }
        Err(e) => source_error(&e),
    }
}

async fn promotions<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = Query::parse(raw.as_deref());
    let filter = match query.page(20) {
        Ok(page) => PromotionFilter { page: Some(page) },
        Err(message) => return bad_request(&message),
    };
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match app.source.promotions(&filter).await {
        Ok(view) => page(StatusCode::OK, render::promotions_page(&view, version)),
        Err(e) => source_error(&e),
    }
}

async fn environment(Path(env): Path<String>) -> Redirect {
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("environment", &env)
        .finish();
    Redirect::to(&format!("/?{query}"))
}

async fn cluster_type<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
    Path((env, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = Query::parse(raw.as_deref());
    let (state, page_wanted) = match (query.state(), query.page(memory::DEFAULT_PAGE_SIZE)) {
        (Ok(state), Ok(page)) => (state, page),
        (Err(message), _) | (_, Err(message)) => return bad_request(&message),
    };
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let cluster_query = ClusterQuery {
        state,
        page: Some(page_wanted),
    };
    match app.source.cluster_type(&env, &name, &cluster_query).await {
        Ok(Some(ct)) => page(StatusCode::OK, render::cluster_type_page(&ct, state, version)),
        Ok(None) if !app.has_environment(&env).await => {
            not_found_page(&format!("There is no environment {env:?}."))
        }
        Ok(None) => not_found_page(&format!(
            "There is no cluster type {name:?} in environment {env:?}."
        )),
        Err(e) => source_error(&e),
    }
}

async fn workload<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let page_wanted = match Query::parse(raw.as_deref()).page(memory::DEFAULT_PAGE_SIZE) {
        Ok(page) => page,
        Err(message) => return bad_request(&message),
    };
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match app.source.workload(&name, page_wanted).await {
        Ok(Some(w)) => page(StatusCode::OK, render::workload_page(&w, version)),
        Ok(None) => not_found_page(&format!("There is no workload {name:?}.")),
        Err(e) => source_error(&e),
    }
}

async fn cluster<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
    Path((env, name)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> Response {
    let page_wanted = match Query::parse(raw.as_deref()).page(memory::DEFAULT_PAGE_SIZE) {
        Ok(page) => page,
        Err(message) => return bad_request(&message),
    };
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match app.source.cluster(&env, &name, page_wanted).await {
        Ok(Some(c)) => page(StatusCode::OK, render::cluster_page(&c, version)),
        Ok(None) if !app.has_environment(&env).await => {
            not_found_page(&format!("There is no environment {env:?}."))
        }
        Ok(None) => not_found_page(&format!("There is no cluster {name:?} in environment {env:?}.")),
        Err(e) => source_error(&e),
    }
}

async fn rollout_page<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
    Path(env): Path<String>,
) -> Response {
    let version = match version(&app).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match app.source.rollout(&env).await {
        Ok(Some(view)) => page(StatusCode::OK, rollout::rollout_page(&view, version)),
        Ok(None) => not_found_page(&format!("There is no environment {env:?}.")),
        Err(e) => source_error(&e),
    }
}

/// `/events`: a `version` event at once and whenever the source's version changes.
async fn events<S: FleetSource>(
    AxumState(app): AxumState<Shared<S>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = futures::stream::unfold((app, None::<u64>, true), |(app, last, first)| async move {
        let mut first = first;
        loop {
            if !first {
                tokio::time::sleep(app.options.poll_interval).await;
            }
            first = false;
            if let Ok(version) = app.shared_version().await
                && Some(version) != last
            {
                let event = Event::default().event("version").data(version.to_string());
                return Some((Ok(event), (app, Some(version), false)));
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", JS)
}

#[cfg(test)]
mod tests;
