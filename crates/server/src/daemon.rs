//! The poll loop: every `interval` (or at once when a push webhook arrives) fetch the
//! control plane, resolve each environment's input commits, and render and deliver only the
//! environments whose inputs changed since they were last handled.
//!
//! An environment's inputs are remembered after a delivery, and after a render failure too
//! (the same commits would fail the same way; the failure is already reported); they are
//! not remembered after an infrastructure error, so the next poll tries again. Git and
//! GitHub calls block, so each pass runs on a blocking thread. On shutdown the pass under
//! way finishes (a push is never cut in half), then the HTTP server drains and stops.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kalypso_git::control_plane::short;
use kalypso_git::sync::TargetReport;
use kalypso_git::{Delivery, Outcome, RepoUrl, Revisions, Syncer};
use tokio::net::TcpListener;
use tokio::runtime::Handle;

use crate::config::Config;
use crate::http::{AppState, EnvStatus, app};
use crate::metrics::Metrics;

/// Why the daemon cannot run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    /// The control plane location is invalid.
    #[error("controlPlane: {0}")]
    ControlPlane(#[from] kalypso_git::url::Error),
    /// Credentials cannot be loaded.
    #[error(transparent)]
    Sync(#[from] kalypso_git::sync::Error),
    /// The listen address cannot be bound.
    #[error("cannot listen on {address}: {error}")]
    Bind {
        /// The address.
        address: std::net::SocketAddr,
        /// Why (its message is part of this error's).
        error: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("HTTP server failed: {0}")]
    Server(std::io::Error),
}

/// What one poll did to one environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvPoll {
    /// Its inputs did not change: nothing rendered.
    Unchanged,
    /// Rendered and delivered.
    Delivered(Vec<TargetReport>),
    /// Rendering failed (reported; not retried until the inputs change).
    RenderFailed(usize),
    /// Reading or delivering failed (retried next poll).
    Error(String),
}

/// What one poll did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Why the control plane could not be read, if it could not.
    pub error: Option<String>,
    /// Each environment, in order.
    pub environments: Vec<(String, EnvPoll)>,
}

struct Poller {
    syncer: Syncer,
    last: HashMap<String, Revisions>,
}

/// The daemon.
pub struct Daemon {
    control_plane: RepoUrl,
    environments: Vec<String>,
    interval: Duration,
    state: AppState,
    poller: Arc<Mutex<Poller>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("control_plane", &self.control_plane)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Daemon {
    /// A daemon for `config`; GitHub calls run on `runtime`.
    pub fn new(config: &Config, runtime: Handle) -> Result<Daemon, Error> {
        let control_plane = RepoUrl::parse(&config.control_plane)?;
        let syncer = Syncer::new(config.settings(), runtime)?;
        let secret = config.webhook_secret()?;
        if secret.is_none() {
            tracing::warn!("no webhook secret configured: webhook requests are not authenticated");
        }
        Ok(Daemon {
            control_plane,
            environments: config.environments.clone(),
            interval: config.interval,
            state: AppState::new(secret),
            poller: Arc::new(Mutex::new(Poller {
                syncer,
                last: HashMap::new(),
            })),
        })
    }

    /// The state the HTTP handlers see.
    pub fn state(&self) -> AppState {
        self.state.clone()
    }

    /// Runs one poll.
    pub async fn poll_once(&self) -> PollReport {
        let poller = self.poller.clone();
        let state = self.state.clone();
        let url = self.control_plane.clone();
        let names = self.environments.clone();
        let report = tokio::task::spawn_blocking(move || {
            let mut poller = poller.lock().unwrap_or_else(PoisonError::into_inner);
            poller.poll(&url, &names, &state)
        })
        .await
        .unwrap_or_else(|e| PollReport {
            error: Some(format!("the poll failed: {e}")),
            environments: vec![],
        });
        self.state.pass_done();
        report
    }

    /// Polls until `shutdown` completes, serving HTTP on `listener` meanwhile.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let router = app(self.state.clone());
        let mut server_stop = stopped.clone();
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = server_stop.wait_for(|s| *s).await;
                })
                .await
        });
        tokio::pin!(shutdown);
        loop {
            let pass = self.poll_once();
            tokio::pin!(pass);
            let finished = tokio::select! {
                _ = &mut pass => false,
                () = &mut shutdown => {
                    tracing::info!("shutdown requested: finishing the current poll");
                    pass.await;
                    true
                }
            };
            if finished {
                break;
            }
            let stop_now = tokio::select! {
                () = &mut shutdown => true,
                () = tokio::time::sleep(self.interval) => false,
                () = self.state.triggered() => false,
            };
            if stop_now {
                break;
            }
        }
        tracing::info!("shutting down");
        let _ = stop.send(true);
        match server.await {
            Ok(result) => result.map_err(Error::Server),
            Err(e) => Err(Error::Server(std::io::Error::other(e.to_string()))),
        }
    }
}

/// Binds `config.listen` and runs the daemon until `shutdown` completes.
pub async fn serve(config: Config, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
    let daemon = Daemon::new(&config, Handle::current())?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|error| Error::Bind {
            address: config.listen,
            error,
        })?;
    tracing::info!(
        address = %config.listen,
        control_plane = %daemon.control_plane,
        interval = %kalypso_core::duration::format(config.interval),
        "kalypso serve started"
    );
    daemon.run(listener, shutdown).await
}

/// Completes on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {},
        () = terminate => {},
    }
}

impl Poller {
    fn poll(&mut self, url: &RepoUrl, names: &[String], state: &AppState) -> PollReport {
        let metrics = state.metrics();
        metrics.polls.inc();
        let mut report = PollReport::default();
        let mut pass = match self.syncer.pass(url) {
            Ok(pass) => pass,
            Err(e) => {
                metrics.poll_errors.inc();
                tracing::error!(control_plane = %url, error = %e, "cannot read the control plane");
                report.error = Some(e.to_string());
                return report;
            }
        };
        let environments = match pass.environments(names) {
            Ok(envs) => envs,
            Err(e) => {
                metrics.poll_errors.inc();
                tracing::error!(control_plane = %url, error = %e, "cannot list environments");
                report.error = Some(e.to_string());
                metrics.retries.inc_by(u64::from(pass.retries()));
                return report;
            }
        };
        state.set_ready();
        for env in &environments {
            let name = env.name.as_str();
            let labels = Metrics::env(name);
            let resolved = match pass.resolve(env) {
                Ok(r) => r,
                Err(e) => {
                    metrics
                        .failures
                        .get_or_create(&Metrics::env_result(name, "input"))
                        .inc();
                    tracing::error!(environment = name, error = %e, "cannot read the environment's inputs");
                    state.set_status(name, error_status(state, name, "", &e.to_string()));
                    report
                        .environments
                        .push((name.to_owned(), EnvPoll::Error(e.to_string())));
                    continue;
                }
            };
            if self.last.get(name) == Some(&resolved.revisions) {
                tracing::debug!(environment = name, revisions = %resolved.revisions, "inputs unchanged");
                report.environments.push((name.to_owned(), EnvPoll::Unchanged));
                continue;
            }
            let started = Instant::now();
            let result = pass.deliver(&resolved);
            metrics
                .duration
                .get_or_create(&labels)
                .observe(started.elapsed().as_secs_f64());
            let revisions = resolved.revisions.to_string();
            match result {
                Ok(env_report) => {
                    metrics.renders.get_or_create(&labels).inc();
                    metrics
                        .assignments
                        .get_or_create(&labels)
                        .set(i64::try_from(env_report.assignments).unwrap_or(i64::MAX));
                    for d in env_report.diagnostics.warnings() {
                        tracing::warn!(environment = name, diagnostic = %d, "warning");
                    }
                    match env_report.outcome {
                        Outcome::Delivered(targets) => {
                            let now = now_unix();
                            metrics.last_success.get_or_create(&labels).set(now as f64);
                            let mut details = Vec::new();
                            for t in &targets {
                                let (result, detail) = describe(&t.delivery);
                                metrics
                                    .deliveries
                                    .get_or_create(&Metrics::env_result(name, result))
                                    .inc();
                                tracing::info!(
                                    environment = name,
                                    repo = %t.repo,
                                    branch = %t.branch,
                                    result,
                                    detail = %detail,
                                    revisions = %resolved.revisions,
                                    "delivered"
                                );
                                details.push(format!("{} {}: {detail}", t.repo, t.branch));
                            }
                            state.set_status(
                                name,
                                EnvStatus {
                                    revisions,
                                    result: "delivered".to_owned(),
                                    detail: details.join("; "),
                                    last_success: Some(now),
                                    diagnostics: Vec::new(),
                                },
                            );
                            self.last.insert(name.to_owned(), resolved.revisions.clone());
                            report
                                .environments
                                .push((name.to_owned(), EnvPoll::Delivered(targets)));
                        }
                        Outcome::Failed { failures, issues } => {
                            metrics
                                .failures
                                .get_or_create(&Metrics::env_result(name, "render"))
                                .inc();
                            for d in env_report.diagnostics.errors() {
                                tracing::error!(environment = name, diagnostic = %d, "error");
                            }
                            if let Some(issues) = &issues {
                                tracing::info!(
                                    environment = name,
                                    created = ?issues.created,
                                    updated = ?issues.updated,
                                    closed = ?issues.closed,
                                    "failures reported as issues"
                                );
                            }
                            let detail = format!("{} failure(s); nothing delivered", failures.len());
                            tracing::error!(environment = name, revisions = %resolved.revisions, "{detail}");
                            let mut status = error_status(state, name, &revisions, &detail);
                            status.result = "render_failed".to_owned();
                            status.diagnostics =
                                env_report.diagnostics.errors().map(|d| d.to_string()).collect();
                            state.set_status(name, status);
                            self.last.insert(name.to_owned(), resolved.revisions.clone());
                            report
                                .environments
                                .push((name.to_owned(), EnvPoll::RenderFailed(failures.len())));
                        }
                    }
                }
                Err(e) => {
                    metrics
                        .failures
                        .get_or_create(&Metrics::env_result(name, "delivery"))
                        .inc();
                    tracing::error!(environment = name, error = %e, "delivery failed; retrying next poll");
                    state.set_status(name, error_status(state, name, &revisions, &e.to_string()));
                    report
                        .environments
                        .push((name.to_owned(), EnvPoll::Error(e.to_string())));
                }
            }
        }
        metrics.retries.inc_by(u64::from(pass.retries()));
        report
    }
}

fn error_status(state: &AppState, name: &str, revisions: &str, detail: &str) -> EnvStatus {
    EnvStatus {
        revisions: revisions.to_owned(),
        result: "error".to_owned(),
        detail: detail.to_owned(),
        last_success: state.status(name).and_then(|s| s.last_success),
        diagnostics: Vec::new(),
    }
}

/// A metric label and a sentence for a delivery.
fn describe(delivery: &Delivery) -> (&'static str, String) {
    match delivery {
        Delivery::UpToDate { head, closed } => (
            "up_to_date",
            format!(
                "up to date at {}{}",
                head.map(|h| short(&h.to_string()).to_owned())
                    .unwrap_or_else(|| "(empty)".into()),
                if closed.is_empty() {
                    String::new()
                } else {
                    format!(", closed pull requests {closed:?}")
                }
            ),
        ),
        Delivery::Committed { commit, changes } => (
            "committed",
            format!("commit {} ({changes})", short(&commit.to_string())),
        ),
        Delivery::PullRequest {
            number,
            url,
            commit,
            created,
            changes,
            ..
        } => (
            "pull_request",
            format!(
                "pull request #{number} {url} {} (commit {}, {changes})",
                if *created { "opened" } else { "already open" },
                short(&commit.to_string())
            ),
        ),
        Delivery::DryRun { mode, changes } => ("dry_run", format!("would deliver in {mode} mode: {changes}")),
    }
}
