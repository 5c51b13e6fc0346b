//! The Deployment Observability Hub (`kalypso hub`).
//!
//! Clusters report whether they applied their platform GitOps commits — Flux's
//! notification-controller posts its events, other agents (Argo CD notifications) post a small
//! JSON report — and the hub correlates those commits with the platform GitOps history that
//! kalypso wrote, environment by environment. It answers "which clusters run commit X",
//! "where does workload W run, since when", and the promotion gate `kalypso check-promote`
//! asks before moving a control-plane commit on to the next environment.
//!
//! The hub keeps no state outside its database (SQLite by default, PostgreSQL for several
//! replicas); a local git cache holds the GitOps repositories it reads. Modules:
//!
//! - [`model`]: the report payloads, parsed and validated;
//! - [`db`]: the connection, migrations and error classes; [`ingest`]: group commit;
//! - [`counts`]: the incremental aggregates every count is read from, their staleness sweep
//!   and their check on start;
//! - [`gitops`]: reading the GitOps branches' history; [`control_plane`]: the cluster types'
//!   labels and platform config, the RolloutPolicy and the rollout at the commits each
//!   environment runs; [`oci`]: the history of environments
//!   delivered to OCI registries, and what their clusters' artifact digests stand for;
//!   [`query`]: the correlation queries; [`rollout`]: the gate of a progressive rollout's waves;
//! - [`auth`]: who a request comes from and what it may do (API tokens, OIDC sign-in,
//!   sessions); [`config`]: the configuration file (`--config`);
//! - [`http`]: the API ([`app`]); [`openapi`]: its OpenAPI document, generated from the
//!   types of `kalypso-hub-api`; [`client`]: a minimal HTTP client for tests and the bench;
//! - [`fleet_source`], [`dashboard`]: the fleet dashboard at `/`, over the same database;
//!   [`release_pages`]: its release pages (promotion requirements, the approve/freeze/unfreeze
//!   forms, the audit log);
//! - [`policy`]: the promotion gate with reasons (PromotionPolicy, freezes, verification);
//!   [`actions`]: approvals, freezes, promotion reports and the audit log's API; [`audit`]: the
//!   append-only log; [`notify`]: Slack, Teams and signed webhook notifications.

pub mod audit;
pub mod auth;
pub mod client;
pub mod config;
pub mod control_plane;
pub mod counts;
pub mod dashboard;
pub mod db;
pub mod fleet_source;
pub mod gitops;
pub mod http;
pub use http::actions;
pub mod ingest;
pub mod listen;
pub mod model;
pub mod notify;
pub mod oci;
pub mod openapi;
#[cfg(test)]
mod plans;
pub mod policy;
pub mod query;
pub mod release_pages;
pub mod rollout;
#[cfg(test)]
mod test_databases;
pub mod throttle;

use std::net::SocketAddr;
use std::time::Duration;

pub use dashboard::DashboardMode;
pub use db::{Backend, DEFAULT_DATABASE, Db, DbError, DbOptions};
pub use gitops::{GitSettings, Refresher};
pub use http::HubState;
use kalypso_git::redact::Secret;
pub use listen::Limits;

/// The API's router: reports, queries, health ([`http::app`]) and the OpenAPI document
/// ([`openapi::router`]).
pub fn app(state: HubState) -> axum::Router {
    http::app(state).merge(openapi::router())
}

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8090";

/// Everything the hub is started with.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// The database URL (`sqlite://PATH` or `postgres://...`).
    pub database: String,
    /// Connection settings.
    pub db_options: DbOptions,
    /// The control plane to read environments and GitOps repositories from.
    pub git: Option<GitSettings>,
    /// Reports must be signed with this secret.
    pub webhook_secret: Option<Secret>,
    /// Queries must carry this bearer token (`--api-token-file`; it may do everything).
    pub api_token: Option<Secret>,
    /// What the configuration file says about sign-in, tokens and roles (`--config`).
    pub auth: config::AuthFile,
    /// The OIDC client secret (read from `oidc.clientSecretFile`).
    pub oidc_client_secret: Option<Secret>,
    /// The key session cookies are signed with (read from `session.secretFile`).
    pub session_secret: Option<Secret>,
    /// A cluster silent for longer is stale.
    pub stale_after: Duration,
    /// How often the GitOps history is refreshed.
    pub refresh: Duration,
    /// Writer tasks (0: one for SQLite, four for PostgreSQL).
    pub writers: usize,
    /// Whether and how the fleet dashboard is served at `/`.
    pub dashboard: DashboardMode,
    /// Where notifications go (`--notifications FILE`).
    pub notifications: notify::NotificationsConfig,
    /// Connection and request limits.
    pub limits: Limits,
    /// Each cluster's report rate.
    pub cluster_rate: throttle::Rate,
}

impl HubConfig {
    /// A configuration with defaults for everything but the database.
    pub fn new(database: impl Into<String>) -> HubConfig {
        HubConfig {
            database: database.into(),
            db_options: DbOptions::default(),
            git: None,
            webhook_secret: None,
            api_token: None,
            auth: config::AuthFile::default(),
            oidc_client_secret: None,
            session_secret: None,
            stale_after: Duration::from_secs(30 * 60),
            refresh: Duration::from_secs(30),
            writers: 0,
            dashboard: DashboardMode::Protected,
            notifications: notify::NotificationsConfig::default(),
            limits: Limits::default(),
            cluster_rate: throttle::Rate::default(),
        }
    }
}

/// Why the hub cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The listening socket.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The notifications configuration.
    #[error("notifications: {0}")]
    Notifications(String),
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(std::io::Error),
}

/// Connects to the database (applying migrations), starts the writers and, with a control
/// plane, the GitOps refresher. Must run inside a tokio runtime.
pub async fn start(config: &HubConfig) -> Result<HubState, Error> {
    let db = Db::connect(&config.database, &config.db_options).await?;
    let stale_after = i64::try_from(config.stale_after.as_millis()).unwrap_or(i64::MAX);
    let now = http::now_ms();
    let check = counts::check(&db, now).await?;
    if check.repaired > 0 {
        tracing::warn!(
            groups = check.groups,
            repaired = check.repaired,
            "cluster counts differed from the clusters table and were repaired"
        );
    }
    counts::sweep_all(
        &db,
        counts::Staleness {
            now,
            after: stale_after,
        },
    )
    .await?;
    spawn_sweeper(db.clone(), stale_after);
    let writers = match (config.writers, db.backend()) {
        (0, Backend::Sqlite) => 1,
        (0, Backend::Postgres) => 4,
        (n, _) => n,
    };
    let notifier = notify::Notifier::start(&config.notifications).map_err(Error::Notifications)?;
    let ingest = ingest::Ingest::start(&db, writers);
    let refresher = Refresher::new(config.git.is_some());
    if let Some(git) = &config.git {
        refresher.spawn(db.clone(), git.clone(), config.refresh, notifier.clone());
    }
    Ok(HubState::new(
        db,
        ingest,
        refresher,
        auth::Auth::new(&auth::AuthSettings {
            api_token: config.api_token.clone(),
            webhook_secret: config.webhook_secret.clone(),
            file: config.auth.clone(),
            oidc_client_secret: config.oidc_client_secret.clone(),
            session_secret: config.session_secret.clone(),
        }),
        config.stale_after,
    )
    .with(notifier)
    .with_cluster_rate(config.cluster_rate))
}

/// How often clusters whose silence crossed `--stale-after` are moved to the stale counts.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// How often (in sweeps) the empty groups no answer needs are dropped.
const PRUNE_EVERY: u32 = 60;

/// Sweeps stale clusters every [`SWEEP_INTERVAL`] until the database is closed.
fn spawn_sweeper(db: Db, stale_after: i64) {
    tokio::spawn(async move {
        let mut ticks = 0u32;
        while !db.pool().is_closed() {
            tokio::time::sleep(SWEEP_INTERVAL).await;
            let staleness = counts::Staleness {
                now: http::now_ms(),
                after: stale_after,
            };
            loop {
                match counts::sweep(&db, staleness, counts::SWEEP_BATCH).await {
                    Ok(n) if n > 0 => tokio::task::yield_now().await,
                    Ok(_) => break,
                    Err(e) => {
                        if !db.pool().is_closed() {
                            tracing::warn!(error = %e, "staleness sweep failed");
                        }
                        break;
                    }
                }
            }
            ticks += 1;
            if ticks.is_multiple_of(PRUNE_EVERY)
                && let Err(e) = counts::prune(&db).await
                && !db.pool().is_closed()
            {
                tracing::warn!(error = %e, "pruning the cluster counts failed");
            }
        }
    });
}

/// Runs the hub on `listen` until `shutdown` completes, then finishes the requests in
/// flight and closes the database.
pub async fn serve(
    config: &HubConfig,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|error| Error::Listen { addr: listen, error })?;
    serve_on(config, listener, shutdown).await
}

/// [`serve`] on a listener the caller bound (a test's port 0).
pub async fn serve_on(
    config: &HubConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let state = start(config).await?;
    tracing::info!(
        listen = %listener.local_addr().map_err(Error::Serve)?,
        database = %db::redact_url(&config.database),
        max_connections = config.limits.max_connections,
        "observability hub listening"
    );
    let db = state.db().clone();
    let app = dashboard::app(state, config.dashboard, kalypso_dashboard::Options::default());
    listen::serve(listener, app, config.limits, shutdown)
        .await
        .map_err(Error::Serve)?;
    db.close().await;
    tracing::info!("observability hub stopped");
    Ok(())
}
