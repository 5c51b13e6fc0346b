//! The poll loop: each environment is polled by its own task, every `interval` (or at once
//! when a push webhook arrives): list the branches of every repository the environment was
//! last delivered from (one round trip each, nothing fetched) and stop there when none
//! moved; else fetch what moved, resolve the environment's input commits, and render and
//! deliver it only when they changed since it was last handled.
//!
//! Environments are independent. Each has its own task, its own mirrors of the
//! repositories (`<cacheDir>/serve/<environment>/`, so that two environments never write
//! the same local repository at once) and its own backoff: after an error it waits
//! `initialBackoff`, then twice that, … up to `maxBackoff`, and the wait is reset by a
//! success. A broken or slow environment never delays another's delivery. Git and GitHub
//! calls are attempted once per poll (the backoff is the retry), so no thread ever sleeps
//! inside a blocking call.
//!
//! An environment's inputs are remembered after a delivery, and after a render failure too
//! (the same commits would fail the same way; the failure is already reported); they are
//! not remembered after an error, which is retried with backoff.
//!
//! An environment with a RolloutPolicy is delivered wave by wave ([`Pass::deliver_rollout`],
//! the hub of the `hub` section as the gate): while its rollout progresses (or is paused),
//! every poll reads its inputs and asks the hub, since the next wave depends on the clusters'
//! reports and the clock, not on the inputs; a poll that changes nothing writes nothing.
//! Without a hub such an environment is an error, retried with backoff. On shutdown the tasks stop
//! at once when idle or backing off; a poll under way stops before its next step (reading,
//! rendering and delivering are steps) and is given [`SHUTDOWN_GRACE`] to finish the one it
//! is in. A step still running then is abandoned: a push has happened or not (the remote
//! updates a branch in one step), the objects a fetch or delivery writes into a mirror are
//! stored before any reference names them, and a reference lock left by a killed write is
//! removed when the environment's task next starts (it holds the mirrors' lock, so no other
//! process is writing them).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kalypso_core::Diagnostics;
use kalypso_core::rollout::Status;
use kalypso_git::control_plane::{Resolved, short};
use kalypso_git::hub::HubGate;
use kalypso_git::rollout::{RolloutReport, RolloutRun, WaveGate};
use kalypso_git::sync::TargetReport;
use kalypso_git::{
    Check, Delivery, EnvReport, Outcome, Pass, RepoUrl, RetryPolicy, Revisions, Settings, Syncer, Unchanged,
};
use tokio::net::TcpListener;
use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::http::{AppState, EnvStatus, LastFailure, RolloutView, app};
use crate::metrics::Metrics;

/// How long a poll under way at shutdown may take to finish its step before it is
/// abandoned; with the HTTP server's drain, the daemon stops within a second.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(700);

/// How long the HTTP server may take to drain at shutdown.
const SERVER_DRAIN: Duration = Duration::from_millis(200);

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
    /// The mirrors' folder cannot be locked (another daemon uses it) or repaired.
    #[error("{0}")]
    Mirrors(String),
    /// The hub's section is unusable (its token file cannot be read).
    #[error("{0}")]
    Hub(String),
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
    /// Reading or delivering failed (retried with backoff).
    Error(String),
    /// The daemon is shutting down: the poll stopped before its next step.
    Stopped,
    /// A progressive rollout delivered nothing: it waits (for the clusters, a soak, a
    /// freeze), is paused, or has stopped (halted, rolled back); what it says.
    Rollout(String),
}

/// What one poll did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    /// Why the control plane's environments could not be listed, if they could not.
    pub error: Option<String>,
    /// Each environment, in order.
    pub environments: Vec<(String, EnvPoll)>,
}

/// What every environment's task shares.
struct Shared {
    control_plane: RepoUrl,
    /// The settings of every environment's syncer (its own cache folder apart); one
    /// attempt per network operation.
    settings: Settings,
    /// The backoff after failures.
    backoff: RetryPolicy,
    interval: Duration,
    runtime: Handle,
    state: AppState,
    /// The gate of progressive rollouts.
    hub: Option<HubGate>,
    /// Set at shutdown: polls stop before their next step.
    stopping: AtomicBool,
}

/// One environment: its syncer, what it last handled, and its failures in a row.
struct Worker {
    name: String,
    inner: Mutex<WorkerState>,
    /// The step a poll is in, for the shutdown log.
    step: Mutex<Option<&'static str>>,
    /// The environment left the control plane: its results are no longer published.
    retired: AtomicBool,
}

#[derive(Default)]
struct WorkerState {
    /// Made at the first poll (with the lock on its mirrors).
    syncer: Option<Syncer>,
    /// The lock on `<cacheDir>/serve/<environment>`, held while the daemon runs.
    lock: Option<File>,
    last: Option<Revisions>,
    /// The result, detail and diagnostics `/status` showed when `last` was handled, shown
    /// again when a passing error is followed by unchanged inputs.
    last_result: Option<(String, String, Vec<String>)>,
    failures: u32,
    /// The environment's rollout progresses or is paused: each poll asks the hub (or reads
    /// the GitOps branch) even when no input moved.
    rollout_active: bool,
    /// What the rollout said at the last poll (logged when it changes).
    rollout_message: Option<String>,
}

/// The daemon.
pub struct Daemon {
    shared: Arc<Shared>,
    /// The configured environments (empty: every Environment of the main branch).
    environments: Vec<String>,
    /// Lists the environments when none are configured.
    discovery: Arc<Mutex<Syncer>>,
    /// The lock on the discovery's mirrors (when it lists the environments), held while
    /// the daemon lives.
    _discovery_lock: Option<File>,
    workers: Mutex<BTreeMap<String, Arc<Worker>>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("control_plane", &self.shared.control_plane)
            .field("interval", &self.shared.interval)
            .finish_non_exhaustive()
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Whether `name` can name a folder: an Environment's name is a Kubernetes namespace name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

impl Daemon {
    /// A daemon for `config`; GitHub calls run on `runtime`.
    pub fn new(config: &Config, runtime: Handle) -> Result<Daemon, Error> {
        let control_plane = RepoUrl::parse(&config.control_plane)?;
        let configured = config.settings();
        let backoff = configured.retry;
        let settings = Settings {
            retry: RetryPolicy {
                attempts: 1,
                ..backoff
            },
            ..configured
        };
        let discovery_dir = settings.cache_dir.join("serve").join("_environments");
        let discovery_lock = if config.environments.is_empty() {
            Some(lock_mirrors(&discovery_dir).map_err(Error::Mirrors)?)
        } else {
            None
        };
        let discovery = Syncer::new(
            Settings {
                cache_dir: discovery_dir,
                ..settings.clone()
            },
            runtime.clone(),
        )?;
        let hub = config
            .hub
            .as_ref()
            .map(|h| h.gate())
            .transpose()
            .map_err(Error::Hub)?;
        let secret = config.webhook_secret()?;
        if secret.is_none() {
            tracing::warn!("no webhook secret configured: webhook requests are not authenticated");
        }
        Ok(Daemon {
            shared: Arc::new(Shared {
                control_plane,
                settings,
                backoff,
                interval: config.interval,
                runtime,
                state: AppState::new(secret),
                hub,
                stopping: AtomicBool::new(false),
            }),
            environments: config.environments.clone(),
            discovery: Arc::new(Mutex::new(discovery)),
            _discovery_lock: discovery_lock,
            workers: Mutex::new(BTreeMap::new()),
        })
    }

    /// The state the HTTP handlers see.
    pub fn state(&self) -> AppState {
        self.shared.state.clone()
    }

    /// Polls every environment once, one after the other.
    pub async fn poll_once(&self) -> PollReport {
        let mut report = PollReport::default();
        let names = if self.environments.is_empty() {
            match self.discover().await {
                Ok(names) => names,
                Err(e) => {
                    report.error = Some(e);
                    return report;
                }
            }
        } else {
            self.environments.clone()
        };
        for name in names {
            let worker = self.worker(&name);
            let (poll, _) = poll_environment(self.shared.clone(), worker).await;
            report.environments.push((name, poll));
        }
        report
    }

    /// The worker of `name`, made if new.
    fn worker(&self, name: &str) -> Arc<Worker> {
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_insert_with(|| {
                Arc::new(Worker {
                    name: name.to_owned(),
                    inner: Mutex::new(WorkerState::default()),
                    step: Mutex::new(None),
                    retired: AtomicBool::new(false),
                })
            })
            .clone()
    }

    /// Lists the control plane's environments (on a blocking thread).
    async fn discover(&self) -> Result<Vec<String>, String> {
        let discovery = self.discovery.clone();
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let syncer = discovery.lock().unwrap_or_else(PoisonError::into_inner);
            let url = &shared.control_plane;
            let metrics = shared.state.metrics();
            if let Some(names) = syncer.environments_unchanged(url) {
                shared.state.set_ready();
                return Ok(names);
            }
            let listed = syncer
                .pass(url)
                .and_then(|pass| pass.environments(&[]))
                .map(|envs| envs.into_iter().map(|e| e.name).collect::<Vec<_>>());
            match listed {
                Ok(names) => {
                    shared.state.set_ready();
                    Ok(names)
                }
                Err(e) => {
                    metrics.poll_errors.inc();
                    let error = kalypso_git::redact(&e.to_string());
                    tracing::error!(control_plane = %url, error = %error, "cannot list the environments");
                    Err(error)
                }
            }
        })
        .await
        .unwrap_or_else(|e| Err(format!("listing the environments failed: {e}")))
    }

    /// Polls until `shutdown` completes, serving HTTP on `listener` meanwhile.
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), Error> {
        let (stop, stopped) = watch::channel(false);
        let router = app(self.shared.state.clone());
        let mut server_stop = stopped.clone();
        let mut server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = server_stop.wait_for(|s| *s).await;
                })
                .await
        });
        let daemon = Arc::new(self);
        let mut tasks = JoinSet::new();
        if daemon.environments.is_empty() {
            tasks.spawn(discovery_task(daemon.clone(), stopped.clone()));
        } else {
            for name in &daemon.environments {
                let worker = daemon.worker(name);
                tasks.spawn(environment_task(daemon.shared.clone(), worker, stopped.clone()));
            }
        }
        shutdown.await;
        let asked = Instant::now();
        tracing::info!("shutdown requested: stopping every environment");
        daemon.shared.stopping.store(true, Ordering::SeqCst);
        let _ = stop.send(true);
        let finished = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            let workers: Vec<Arc<Worker>> = daemon
                .workers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .cloned()
                .collect();
            for worker in workers {
                let step = *worker.step.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(step) = step {
                    tracing::warn!(
                        environment = %worker.name,
                        step,
                        "shutting down while {step}: abandoned (a push happened or not; the mirrors are repaired at the next start)"
                    );
                }
            }
            tasks.abort_all();
        }
        let served = match tokio::time::timeout(SERVER_DRAIN, &mut server).await {
            Ok(Ok(result)) => result.map_err(Error::Server),
            Ok(Err(e)) => Err(Error::Server(std::io::Error::other(e.to_string()))),
            Err(_) => {
                server.abort();
                Ok(())
            }
        };
        tracing::info!(
            took_ms = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX),
            "shut down"
        );
        served
    }
}

/// Keeps one task per environment of the control plane: lists them every interval (or at
/// a webhook), starts a task for each new one and stops those of environments that left.
async fn discovery_task(daemon: Arc<Daemon>, mut stopped: watch::Receiver<bool>) {
    let shared = daemon.shared.clone();
    let mut triggers = shared.state.triggers();
    let mut tasks: BTreeMap<String, tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut failures = 0u32;
    loop {
        let wait = match daemon.discover().await {
            Ok(names) => {
                failures = 0;
                for name in &names {
                    if tasks.contains_key(name) {
                        continue;
                    }
                    tracing::info!(environment = %name, "watching a new environment");
                    let worker = daemon.worker(name);
                    let task = tokio::spawn(environment_task(shared.clone(), worker, stopped.clone()));
                    tasks.insert(name.clone(), task);
                }
                let gone: Vec<String> = tasks.keys().filter(|n| !names.contains(n)).cloned().collect();
                for name in gone {
                    tracing::info!(environment = %name, "the environment left the control plane: no longer watched");
                    if let Some(task) = tasks.remove(&name) {
                        task.abort();
                    }
                    if let Some(worker) = daemon
                        .workers
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&name)
                    {
                        worker.retired.store(true, Ordering::SeqCst);
                    }
                    shared.state.remove_status(&name);
                }
                shared.interval
            }
            Err(_) => {
                failures += 1;
                shared.backoff.backoff(failures)
            }
        };
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            () = tokio::time::sleep(wait) => {}
            _ = triggers.changed() => {}
        }
    }
    // Let the environments' tasks see the stop and finish their step.
    for (_, task) in tasks {
        let _ = task.await;
    }
}

/// Polls one environment until shutdown: after a success every `interval`, after an error
/// with backoff, and at once on a webhook.
async fn environment_task(shared: Arc<Shared>, worker: Arc<Worker>, mut stopped: watch::Receiver<bool>) {
    let mut triggers = shared.state.triggers();
    loop {
        let (poll, wait) = poll_environment(shared.clone(), worker.clone()).await;
        if poll == EnvPoll::Stopped || *stopped.borrow() {
            break;
        }
        tokio::select! {
            _ = stopped.wait_for(|s| *s) => break,
            () = tokio::time::sleep(wait) => {}
            _ = triggers.changed() => {}
        }
    }
}

/// One poll of `worker`'s environment on a blocking thread; the wait before the next.
async fn poll_environment(shared: Arc<Shared>, worker: Arc<Worker>) -> (EnvPoll, Duration) {
    let fallback = shared.backoff.backoff(1);
    let state = shared.state.clone();
    let result = tokio::task::spawn_blocking(move || {
        let mut inner = worker.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let poll = inner.poll(&shared, &worker);
        *worker.step.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let wait = if matches!(poll, EnvPoll::Error(_)) {
            shared.backoff.backoff(inner.failures)
        } else {
            shared.interval
        };
        if poll != EnvPoll::Stopped && !worker.retired.load(Ordering::SeqCst) {
            let next = now_unix().saturating_add(wait.as_secs_f64().ceil() as u64);
            let failures = inner.failures;
            shared.state.update_status(&worker.name, |s| {
                s.next_poll = Some(next);
                s.consecutive_failures = failures;
                s.retry_in = (failures > 0).then(|| kalypso_core::duration::format(wait));
            });
        }
        (poll, wait)
    })
    .await;
    state.pass_done();
    result.unwrap_or_else(|e| (EnvPoll::Error(format!("the poll failed: {e}")), fallback))
}

/// Takes the lock on `dir` (made if missing) and removes the reference locks a killed
/// write may have left in it: with the lock held, no other process writes there.
fn lock_mirrors(dir: &Path) -> Result<File, String> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = parent.join(format!(
        "{}.lock",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("mirrors")
    ));
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(format!(
                "another kalypso serve uses the mirrors in {} (locked: {})",
                dir.display(),
                path.display()
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", path.display()));
        }
    }
    kalypso_git::repo::remove_stale_locks(dir)
        .map_err(|(lock, e)| format!("cannot remove the stale lock {}: {e}", lock.display()))?;
    Ok(file)
}

impl WorkerState {
    /// One poll; updates the environment's status and metrics. Its steps: the syncer of the
    /// environment (made at the first poll), the branch listing that may end the poll, the
    /// inputs resolved, and the delivery, each reported as it ends.
    fn poll(&mut self, shared: &Shared, worker: &Worker) -> EnvPoll {
        let name = worker.name.as_str();
        let step = |s: &'static str| {
            *worker.step.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
            !shared.stopping.load(Ordering::SeqCst)
        };
        if !step("reading the control plane") {
            return EnvPoll::Stopped;
        }
        shared.state.metrics().polls.inc();
        shared.state.update_status(name, |s| s.polls += 1);
        if let Err(poll) = self.start(shared, name) {
            return poll;
        }
        let Some(syncer) = &self.syncer else {
            return EnvPoll::Stopped;
        };
        // One branch listing per repository: when nothing the environment was last
        // delivered from moved, the poll ends here, without a fetch.
        let check = syncer.check(&shared.control_plane, std::slice::from_ref(&worker.name));
        if let Some(unchanged) = check.unchanged(name)
            && !self.rollout_active
        {
            tracing::debug!(environment = name, remotes = check.remotes, "no branch moved");
            return self.unchanged(shared, name, Some(unchanged));
        }
        let (pass, resolved) = match resolve(syncer, &check, shared, name, &step) {
            Ok(resolved) => resolved,
            Err(Step::Stopped) => return EnvPoll::Stopped,
            Err(Step::Failed(error)) => return input_failed(&mut self.failures, shared, name, error),
        };
        if self.last.as_ref() == Some(&resolved.revisions) && !self.rollout_active {
            tracing::debug!(environment = name, revisions = %resolved.revisions, "inputs unchanged");
            return self.unchanged(shared, name, None);
        }
        if !step("rendering and delivering") {
            return EnvPoll::Stopped;
        }
        let labels = Metrics::env(name);
        let started = Instant::now();
        let mut pass = pass;
        let gate = shared.hub.as_ref().map(|h| h as &dyn WaveGate);
        let result = pass.deliver_rollout(&resolved, gate, kalypso_git::hub::now_ms());
        shared
            .state
            .metrics()
            .duration
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(RolloutRun {
                report: Some(report),
                rollout: None,
            }) => {
                self.rollout_active = false;
                self.delivered(shared, name, &resolved.revisions, report)
            }
            Ok(RolloutRun {
                report,
                rollout: Some(rollout),
            }) => self.rolled_out(shared, name, &resolved.revisions, report, rollout),
            Ok(RolloutRun {
                report: None,
                rollout: None,
            }) => self.unchanged(shared, name, None),
            Err(e) => {
                let reason = if matches!(e, kalypso_git::sync::Error::Rollout { .. }) {
                    "rollout"
                } else {
                    "delivery"
                };
                failed(
                    &mut self.failures,
                    shared,
                    name,
                    reason,
                    &resolved.revisions.to_string(),
                    e.to_string(),
                )
            }
        }
    }

    /// Records a step of the environment's progressive rollout: the delivery it made, if any
    /// (as [`WorkerState::delivered`]), the rollout's metrics, logs and `/status`.
    fn rolled_out(
        &mut self,
        shared: &Shared,
        name: &str,
        revisions: &Revisions,
        report: Option<EnvReport>,
        rollout: RolloutReport,
    ) -> EnvPoll {
        let metrics = shared.state.metrics();
        let labels = Metrics::env(name);
        let status = rollout.state.as_ref().map(|s| s.status);
        let message = kalypso_git::redact(&rollout.message);
        let failed = rollout.failed();
        // A wave whose render failed is not retried until the inputs change, as any render.
        self.rollout_active = matches!(status, Some(Status::Progressing | Status::Paused))
            && (report.is_none() || rollout.delivered);
        if let Some(state) = &rollout.state {
            metrics
                .rollout_waves_delivered
                .get_or_create(&labels)
                .set(i64::try_from(state.delivered).unwrap_or(i64::MAX));
        }
        let said_before = self.rollout_message.replace(message.clone()).as_deref() == Some(&message);
        if !said_before {
            for ct in &rollout.unchecked {
                tracing::warn!(environment = name, cluster_type = %ct, "cluster type of a delivered wave has no registered cluster: nothing checks it");
            }
        }
        let issue = rollout.issue.as_ref().map(|i| {
            i.created
                .iter()
                .chain(&i.updated)
                .map(|n| format!("#{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        });
        let poll = match report {
            Some(report) => {
                let poll = self.delivered(shared, name, revisions, report);
                // A step counts once: in `pr` mode it repeats, into the same pull request,
                // until that is merged.
                let wrote = matches!(&poll, EnvPoll::Delivered(targets) if targets.iter().any(|t| matches!(
                    t.delivery,
                    Delivery::Committed { .. } | Delivery::PullRequest { created: true, .. }
                )));
                if rollout.delivered && wrote {
                    let result = match status {
                        Some(Status::Complete) => "complete",
                        Some(Status::Halted) => "halted",
                        Some(Status::RolledBack) => "rolled-back",
                        _ => "wave",
                    };
                    metrics
                        .rollout_steps
                        .get_or_create(&Metrics::env_result(name, result))
                        .inc();
                    if failed {
                        tracing::error!(environment = name, revisions = %revisions, issue = ?issue, "rollout failed: {message}");
                    } else {
                        tracing::info!(environment = name, revisions = %revisions, "{message}");
                    }
                }
                poll
            }
            None => {
                self.failures = 0;
                self.last = Some(revisions.clone());
                if !said_before {
                    if failed {
                        tracing::error!(environment = name, revisions = %revisions, "{message}");
                    } else {
                        tracing::info!(environment = name, revisions = %revisions, "rollout: {message}");
                    }
                }
                EnvPoll::Rollout(message.clone())
            }
        };
        let view = rollout.state.as_ref().map(|s| RolloutView {
            policy: s.policy.clone(),
            status: s.status.as_str().to_owned(),
            change: s.change.environment.clone(),
            delivered: s.delivered,
            waves: s.waves.iter().map(|w| w.name.clone()).collect(),
            message: message.clone(),
            failure: s.failure.as_deref().map(kalypso_git::redact),
        });
        let now = now_unix();
        let delivered_now = matches!(poll, EnvPoll::Delivered(_));
        let result = if failed {
            let mut detail = format!("rollout {}: {message}", status.map_or("", Status::as_str));
            if let Some(issue) = &issue
                && !issue.is_empty()
            {
                detail.push_str(&format!(" (reported in issue {issue})"));
            }
            Some(("rollout_failed", detail))
        } else if delivered_now {
            None
        } else if matches!(poll, EnvPoll::Rollout(_)) {
            Some(("rollout_waiting", message.clone()))
        } else {
            None
        };
        let revisions_text = revisions.to_string();
        shared.state.update_status(name, |s| {
            s.rollout = view;
            s.revisions = revisions_text;
            if let Some((result, detail)) = &result {
                s.result = (*result).to_owned();
                s.detail = detail.clone();
                s.diagnostics = Vec::new();
                if failed && s.last_failure.as_ref().is_none_or(|f| f.detail != *detail) {
                    s.last_failure = Some(LastFailure {
                        at: now,
                        result: (*result).to_owned(),
                        detail: detail.clone(),
                        diagnostics: Vec::new(),
                    });
                }
            } else if delivered_now {
                s.detail = format!("{}; {message}", s.detail);
            }
        });
        if let Some((result, detail)) = result {
            self.last_result = Some((result.to_owned(), detail, Vec::new()));
        }
        if failed && rollout.delivered && !said_before {
            metrics
                .failures
                .get_or_create(&Metrics::env_result(name, "rollout"))
                .inc();
        }
        poll
    }

    /// Makes the environment's syncer at its first poll, with the lock on its mirrors.
    fn start(&mut self, shared: &Shared, name: &str) -> Result<(), EnvPoll> {
        if self.syncer.is_some() {
            return Ok(());
        }
        let fail = |failures: &mut u32, error: String| Err(input_failed(failures, shared, name, error));
        if !valid_name(name) {
            return fail(
                &mut self.failures,
                format!("environment name {name:?} cannot name a cache folder"),
            );
        }
        let dir = shared.settings.cache_dir.join("serve").join(name);
        let lock = match lock_mirrors(&dir) {
            Ok(lock) => lock,
            Err(e) => return fail(&mut self.failures, e),
        };
        let settings = Settings {
            cache_dir: dir,
            ..shared.settings.clone()
        };
        match Syncer::new(settings, shared.runtime.clone()) {
            Ok(syncer) => {
                self.syncer = Some(syncer);
                self.lock = Some(lock);
                Ok(())
            }
            Err(e) => fail(&mut self.failures, e.to_string()),
        }
    }

    /// Ends a poll whose environment needs nothing: no branch moved (`listed`, the check's
    /// answer), or the inputs resolved are those last handled.
    fn unchanged(&mut self, shared: &Shared, name: &str, listed: Option<&Unchanged>) -> EnvPoll {
        let state = &shared.state;
        if listed.is_some() {
            state.set_ready();
        }
        self.failures = 0;
        if let Some(unchanged) = listed
            && self.last_result.is_none()
        {
            // The first poll of this process: what the last delivery left holds.
            let detail = unchanged
                .targets
                .iter()
                .map(|t| format!("{} {}: {}", t.repo, t.branch, describe(&t.delivery).1))
                .collect::<Vec<_>>()
                .join("; ");
            self.last = Some(unchanged.revisions.clone());
            self.last_result = Some(("delivered".to_owned(), detail, Vec::new()));
            let revisions = unchanged.revisions.to_string();
            state.update_status(name, |s| s.revisions = revisions);
        }
        show_last_result(state, name, self.last_result.as_ref());
        EnvPoll::Unchanged
    }

    /// Records a delivery (or a render failure, reported and not retried until the inputs
    /// change): metrics, logs and `/status`.
    fn delivered(
        &mut self,
        shared: &Shared,
        name: &str,
        revisions: &Revisions,
        report: EnvReport,
    ) -> EnvPoll {
        let metrics = shared.state.metrics();
        let labels = Metrics::env(name);
        metrics.renders.get_or_create(&labels).inc();
        metrics
            .assignments
            .get_or_create(&labels)
            .set(i64::try_from(report.assignments).unwrap_or(i64::MAX));
        for d in report.diagnostics.warnings() {
            tracing::warn!(environment = name, diagnostic = %d, "warning");
        }
        self.failures = 0;
        self.last = Some(revisions.clone());
        let diagnostics: Vec<String> = report.diagnostics.errors().map(|d| d.to_string()).collect();
        match report.outcome {
            Outcome::Delivered(targets) => {
                let isolated = (&report.isolated, &report.diagnostics);
                self.targets_delivered(shared, name, revisions, &targets, isolated, diagnostics);
                EnvPoll::Delivered(targets)
            }
            Outcome::Failed { failures, issues } => {
                metrics
                    .failures
                    .get_or_create(&Metrics::env_result(name, "render"))
                    .inc();
                for d in report.diagnostics.errors() {
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
                tracing::error!(environment = name, revisions = %revisions, "{detail}");
                let now = now_unix();
                self.last_result = Some(("render_failed".to_owned(), detail.clone(), diagnostics.clone()));
                let revisions = revisions.to_string();
                shared.state.update_status(name, |s| {
                    s.revisions = revisions;
                    s.result = "render_failed".to_owned();
                    s.detail = detail.clone();
                    s.diagnostics = diagnostics.clone();
                    s.last_failure = Some(LastFailure {
                        at: now,
                        result: "render_failed".to_owned(),
                        detail,
                        diagnostics,
                    });
                });
                EnvPoll::RenderFailed(failures.len())
            }
        }
    }

    /// Records what each GitOps branch got: metrics, logs and `/status` (with the failing
    /// workloads that were isolated, if any).
    fn targets_delivered(
        &mut self,
        shared: &Shared,
        name: &str,
        revisions: &Revisions,
        targets: &[TargetReport],
        (isolated, all): (&BTreeSet<String>, &Diagnostics),
        diagnostics: Vec<String>,
    ) {
        let metrics = shared.state.metrics();
        let now = now_unix();
        metrics
            .last_success
            .get_or_create(&Metrics::env(name))
            .set(now as f64);
        let mut details = Vec::new();
        for t in targets {
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
                revisions = %revisions,
                "delivered"
            );
            details.push(format!("{} {}: {detail}", t.repo, t.branch));
        }
        let mut detail = details.join("; ");
        // Failing workloads were isolated: the rest went out, their errors stay visible.
        if !isolated.is_empty() {
            metrics
                .failures
                .get_or_create(&Metrics::env_result(name, "render"))
                .inc();
            for d in all.errors() {
                tracing::error!(environment = name, diagnostic = %d, "error");
            }
            let registrations: Vec<&str> = isolated.iter().map(String::as_str).collect();
            detail.push_str(&format!(
                "; the workloads of {} failed: their folders keep what was last delivered",
                registrations.join(", ")
            ));
            tracing::error!(environment = name, registrations = ?registrations, "workloads failed; the rest was delivered");
        }
        self.last_result = Some(("delivered".to_owned(), detail.clone(), diagnostics.clone()));
        let revisions = revisions.to_string();
        shared.state.update_status(name, |s| {
            s.revisions = revisions;
            s.result = "delivered".to_owned();
            s.detail = detail;
            s.last_success = Some(now);
            s.diagnostics = diagnostics;
        });
    }
}

/// Why a step ended the poll.
enum Step {
    /// The daemon is shutting down.
    Stopped,
    /// An error, retried with backoff.
    Failed(String),
}

/// Fetches what moved after `check` and resolves the environment's inputs.
fn resolve<'s>(
    syncer: &'s Syncer,
    check: &Check,
    shared: &Shared,
    name: &str,
    step: &dyn Fn(&'static str) -> bool,
) -> Result<(Pass<'s>, Resolved), Step> {
    let mut pass = syncer.pass_after(&shared.control_plane, check).map_err(|e| {
        shared.state.metrics().poll_errors.inc();
        Step::Failed(format!("cannot read the control plane: {e}"))
    })?;
    shared.state.set_ready();
    let env = pass
        .environments(&[name.to_owned()])
        .map_err(|e| Step::Failed(e.to_string()))?
        .into_iter()
        .next()
        .ok_or_else(|| Step::Failed(format!("no environment {name} in the control plane")))?;
    if !step("reading the inputs") {
        return Err(Step::Stopped);
    }
    let resolved = pass
        .resolve(&env)
        .map_err(|e| Step::Failed(format!("cannot read the environment's inputs: {e}")))?;
    Ok((pass, resolved))
}

/// Shows `last` (result, detail, diagnostics of the inputs delivered last) in `/status` again
/// when it shows an error (which has passed: the inputs did not change) or nothing yet (the
/// first poll of this process).
fn show_last_result(state: &AppState, name: &str, last: Option<&(String, String, Vec<String>)>) {
    let Some((result, detail, diagnostics)) = last else {
        return;
    };
    state.update_status(name, |s| {
        if s.result == "error" || s.result.is_empty() {
            s.result = result.clone();
            s.detail = detail.clone();
            s.diagnostics = diagnostics.clone();
        }
    });
}

/// [`failed`] with an error in reading the inputs (no revisions known yet).
fn input_failed(failures: &mut u32, shared: &Shared, name: &str, error: String) -> EnvPoll {
    failed(failures, shared, name, "input", "", error)
}

/// Records an error: counted, logged, shown in `/status`, retried with backoff.
fn failed(
    failures: &mut u32,
    shared: &Shared,
    name: &str,
    reason: &str,
    revisions: &str,
    error: String,
) -> EnvPoll {
    let error = kalypso_git::redact(&error);
    *failures = failures.saturating_add(1);
    shared
        .state
        .metrics()
        .failures
        .get_or_create(&Metrics::env_result(name, reason))
        .inc();
    let now = now_unix();
    let wait = shared.backoff.backoff(*failures);
    let next = now.saturating_add(wait.as_secs_f64().ceil() as u64);
    let count = *failures;
    // `/status` first, so that whoever reads the log line finds it there too.
    shared.state.update_status(name, |s: &mut EnvStatus| {
        if !revisions.is_empty() {
            s.revisions = revisions.to_owned();
        }
        s.result = "error".to_owned();
        s.detail = error.clone();
        s.diagnostics = Vec::new();
        s.last_failure = Some(LastFailure {
            at: now,
            result: "error".to_owned(),
            detail: error.clone(),
            diagnostics: Vec::new(),
        });
        s.consecutive_failures = count;
        s.next_poll = Some(next);
        s.retry_in = Some(kalypso_core::duration::format(wait));
    });
    tracing::error!(
        environment = name,
        reason,
        error = %error,
        consecutive_failures = count,
        retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        next_poll = next,
        "environment {name} not delivered ({}); retrying in {}",
        if count == 1 { "first failure".to_owned() } else { format!("{count} failures in a row") },
        kalypso_core::duration::format(wait)
    );
    EnvPoll::Error(error)
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
    let address = listener.local_addr().unwrap_or(config.listen);
    tracing::info!(
        address = %address,
        control_plane = %daemon.shared.control_plane,
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
        Delivery::Artifacts(report) => (
            if report.dry_run {
                "dry_run"
            } else if report.changed {
                "pushed"
            } else {
                "up_to_date"
            },
            kalypso_oci_summary(report),
        ),
    }
}

/// `3 artifacts pushed (1 new), 197 unchanged, index sha256:…` for an OCI delivery.
fn kalypso_oci_summary(report: &kalypso_git::oci::Report) -> String {
    let new = report.pushed.iter().filter(|p| p.new).count();
    let mut s = format!(
        "{} artifact(s) {} ({new} new), {} unchanged",
        report.pushed.len(),
        if report.dry_run {
            "would be pushed"
        } else {
            "pushed"
        },
        report.unchanged
    );
    if !report.retired.is_empty() {
        s.push_str(&format!(", retired {}", report.retired.join(", ")));
    }
    if let Some(index) = &report.index {
        s.push_str(&format!(", index {index}"));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_mirrors_lock_is_exclusive_and_removes_locks_left_by_a_killed_write() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("serve").join("dev");
        let stale = dir.join("mirror/refs/kalypso-tracking/dev.lock");
        std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
        std::fs::write(&stale, "").unwrap();
        std::fs::write(dir.join("mirror/HEAD"), "ref: refs/heads/main\n").unwrap();

        let held = lock_mirrors(&dir).unwrap();
        assert!(!stale.exists(), "a stale reference lock is removed");
        assert!(dir.join("mirror/HEAD").exists(), "nothing else is touched");
        std::fs::write(&stale, "").unwrap();
        let second = lock_mirrors(&dir).unwrap_err();
        assert!(
            second.contains("another kalypso serve uses the mirrors in"),
            "{second}"
        );
        assert!(stale.exists(), "a lock of the running daemon is left alone");
        drop(held);
        lock_mirrors(&dir).unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn environment_names_that_cannot_name_a_folder_are_refused() {
        for good in ["dev", "prod-eu.1"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", ".", "..", "../x", "a/b", "_environments", "Dev"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
