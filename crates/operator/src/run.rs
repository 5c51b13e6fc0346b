//! Wiring: the API client, the CRD check, the HTTP endpoints, leader election, the four
//! controllers, and a graceful shutdown.
//!
//! Start-up order: connect and check that the CRDs are installed (exit with an install hint
//! if not), serve `/healthz`, `/readyz` and `/metrics`, then — when elected, or at once
//! without `--leader-elect` — run the controllers. On SIGTERM/SIGINT the controllers finish
//! the reconciles in flight, the Lease is released and the endpoints stop. If leadership is
//! lost the process exits with an error, so that Kubernetes restarts it as a follower (what
//! controller-runtime does too).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kalypso_api::{BaseRepo, Environment, RolloutPolicy, WorkloadRegistration};
use kalypso_template::Engine;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::{Controller, controller, watcher};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::controller::{Shared, gitsource, scheduler, sources};
use crate::deliver::{Debouncer, Publisher};
use crate::desired::Options;
use crate::flux::FluxSettings;
use crate::http::{self, Health};
use crate::leader::{Elector, LeaseSettings};
use crate::metrics::Metrics;
use crate::stores::Stores;

/// Where the control plane comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ControlPlaneFeed {
    /// Flux applies it into environment namespaces; the operator keeps the Flux objects
    /// (the original's way).
    #[default]
    Flux,
    /// Someone else fills the namespaces (kubectl, Argo CD, a CI job): the operator keeps
    /// no Flux objects and only schedules.
    External,
    /// No Flux: each Environment's control plane is read from git and delivered by
    /// `kalypso-git` (the code of `kalypso serve`) every poll period.
    Git,
}

/// What reads and writes git.
#[derive(Clone)]
pub struct Backends {
    /// Delivers environments' content (flux and external sources).
    pub publisher: Arc<dyn Publisher>,
    /// Reads and delivers control planes (git source).
    pub syncer: Option<Arc<kalypso_git::Syncer>>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends").finish_non_exhaustive()
    }
}

/// Everything `kalypso operator` is told.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the control plane comes from.
    pub source: ControlPlaneFeed,
    /// `/healthz` and `/readyz` address.
    pub health_addr: SocketAddr,
    /// `/metrics` address (may equal `health_addr`: one server then).
    pub metrics_addr: SocketAddr,
    /// Elect a leader with a Lease (for more than one replica).
    pub leader_elect: Option<LeaseSettings>,
    /// How Flux objects are made.
    pub flux: FluxSettings,
    /// What the scheduler writes besides DeploymentTargets and conditions.
    pub options: Options,
    /// Quiet period before new content is delivered.
    pub debounce: Duration,
    /// How often idle environments are reconciled anyway.
    pub resync: Duration,
    /// How long to wait after a failed reconcile.
    pub retry_after: Duration,
    /// Environments reconciled at the same time.
    pub concurrency: u16,
    /// This instance's name (Events' reporting instance; the pod name).
    pub instance: Option<String>,
    /// How often each environment is synchronised (git source).
    pub poll: Duration,
    /// The Sprig version templates run with (the command line's `KALYPSO_SPRIG`).
    pub sprig: kalypso_template::SprigVersion,
    /// The Deployment Observability Hub, the gate of progressive rollouts (git source).
    pub hub: Option<Arc<kalypso_git::hub::HubGate>>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            source: ControlPlaneFeed::Flux,
            health_addr: SocketAddr::from(([0, 0, 0, 0], 8081)),
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            leader_elect: None,
            flux: FluxSettings::default(),
            options: Options::default(),
            debounce: Duration::from_secs(3),
            resync: Duration::from_secs(300),
            retry_after: Duration::from_secs(30),
            concurrency: 4,
            instance: None,
            poll: Duration::from_secs(60),
            sprig: kalypso_template::SprigVersion::default(),
            hub: None,
        }
    }
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No cluster to talk to.
    #[error("cannot connect to Kubernetes: {0}")]
    Connect(#[source] kube::Error),
    /// The CRDs are missing.
    #[error(
        "the scheduler.kalypso.io CRDs are not installed ({0}); install them with `kalypso crds | kubectl apply --server-side -f -` or the Helm chart"
    )]
    CrdsMissing(#[source] kube::Error),
    /// RolloutPolicies cannot be listed (their CRD is missing, or the operator may not read
    /// them), with a source that watches them.
    #[error(
        "cannot list RolloutPolicies ({0}): with --source flux or external the operator watches them (an environment whose namespace holds one is not delivered); install the CRDs with `kalypso crds | kubectl apply --server-side -f -` and let the operator get, list and watch rolloutpolicies (the Helm chart's ClusterRole does)"
    )]
    RolloutPolicies(#[source] kube::Error),
    /// The endpoints could not be served.
    #[error(transparent)]
    Http(#[from] http::Error),
    /// The Flux API versions could not be settled (no Flux, or discovery failed).
    #[error("{0}")]
    Flux(String),
    /// Another instance took over.
    #[error("lost leadership; exiting so that this instance restarts as a follower")]
    LostLeadership,
}

/// Runs the operator until `shutdown` resolves (or leadership is lost).
pub async fn run(
    config: Config,
    backends: Backends,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let engine = Arc::new(Engine::with_sprig(config.sprig));
    if let Some(warning) = kalypso_template::sprig_warning(engine.sprig()) {
        tracing::warn!("{warning}");
    }
    let client = Client::try_default().await.map_err(Error::Connect)?;
    Api::<Environment>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
        .map_err(Error::CrdsMissing)?;
    if config.source != ControlPlaneFeed::Git {
        // The scheduler watches RolloutPolicies (one stops its environment's delivery); a
        // missing definition (an install from before rollouts) would stall every reconcile.
        Api::<RolloutPolicy>::all(client.clone())
            .list(&ListParams::default().limit(1))
            .await
            .map_err(Error::RolloutPolicies)?;
    }
    let mut config = config;
    if config.source == ControlPlaneFeed::Flux {
        config.flux = crate::flux::resolve_api_versions(&client, &config.flux)
            .await
            .map_err(Error::Flux)?;
    }

    let metrics = Arc::new(Metrics::default());
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let health = Arc::new(Health::new(registry));

    // One stop signal for everything.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        stop_tx.send_replace(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let mut servers = Vec::new();
    let router = http::app(health.clone());
    servers.push(tokio::spawn(http::serve(
        config.health_addr,
        router.clone(),
        stopped(stop_rx.clone()),
    )));
    if config.metrics_addr != config.health_addr {
        servers.push(tokio::spawn(http::serve(
            config.metrics_addr,
            router,
            stopped(stop_rx.clone()),
        )));
    }

    let (leading_tx, mut leading_rx) = watch::channel(config.leader_elect.is_none());
    let elector = config.leader_elect.clone().map(|settings| {
        tokio::spawn(Elector::new(client.clone(), settings).run(leading_tx, stop_rx.clone()))
    });
    // A follower is ready: it is healthy and waits for its turn.
    health.set_ready(true);
    tokio::select! {
        _ = leading_rx.wait_for(|l| *l) => {}
        _ = stopped(stop_rx.clone()) => {}
    }
    let mut result = Ok(());
    if !*stop_rx.borrow() {
        metrics.leader.set(1);
        let elected = config.leader_elect.is_some();
        let lost = {
            let mut rx = leading_rx.clone();
            async move {
                if elected {
                    // Also when the elector is gone (its sender dropped).
                    let _ = rx.wait_for(|l| !*l).await;
                } else {
                    std::future::pending::<()>().await;
                }
            }
        };
        let stop = stopped(stop_rx.clone());
        let (end_tx, end_rx) = watch::channel(false);
        let end = stopped(end_rx);
        let mut controllers = Box::pin(controllers(
            &config,
            client,
            metrics.clone(),
            backends,
            engine.clone(),
            end.shared(),
        ));
        tokio::select! {
            _ = &mut controllers => {}
            _ = stop => {
                // Let the reconciles in flight finish.
                end_tx.send_replace(true);
                (&mut controllers).await;
            }
            _ = lost => {
                // Stop writing at once: another instance leads now.
                result = Err(Error::LostLeadership);
            }
        }
        drop(end_tx);
        metrics.leader.set(0);
    }
    // Release the Lease (the elector stops on the stop signal), then stop the endpoints.
    if let Some(e) = elector {
        if *stop_rx.borrow() {
            let _ = tokio::time::timeout(Duration::from_secs(5), e).await;
        } else {
            e.abort();
        }
    }
    for s in servers {
        s.abort();
    }
    result
}

async fn controllers(
    config: &Config,
    client: Client,
    metrics: Arc<Metrics>,
    backends: Backends,
    engine: Arc<Engine>,
    shutdown: futures::future::Shared<impl Future<Output = ()> + Send + Sync + 'static>,
) {
    let shared = Shared::new(client.clone(), config.instance.clone(), metrics);
    let controller_config = controller::Config::default()
        .concurrency(config.concurrency)
        .debounce(Duration::from_millis(500));
    let mut tasks: Vec<futures::future::BoxFuture<'static, ()>> = Vec::new();

    if config.source == ControlPlaneFeed::Flux {
        let ctx = Arc::new(sources::Context {
            shared: shared.clone(),
            flux: config.flux.clone(),
            retry_after: config.retry_after,
        });
        macro_rules! source_controller {
            ($k:ty) => {
                tasks.push(
                    Controller::new(
                        Api::<$k>::all(client.clone()),
                        watcher::Config::default().any_semantic(),
                    )
                    .with_config(controller_config.clone())
                    .graceful_shutdown_on(shutdown.clone())
                    .run(
                        sources::reconcile::<$k>,
                        sources::error_policy::<$k>,
                        ctx.clone(),
                    )
                    .for_each(|_| futures::future::ready(()))
                    .boxed(),
                )
            };
        }
        source_controller!(Environment);
        source_controller!(BaseRepo);
        source_controller!(WorkloadRegistration);
    }

    if config.source == ControlPlaneFeed::Git {
        if let Some(syncer) = backends.syncer {
            let ctx = Arc::new(gitsource::Context {
                shared,
                syncer,
                poll: config.poll,
                retry_after: config.retry_after,
                hub: config.hub.clone(),
            });
            tasks.push(
                Controller::new(
                    Api::<Environment>::all(client),
                    watcher::Config::default().any_semantic(),
                )
                .with_config(controller_config)
                .graceful_shutdown_on(shutdown)
                .run(gitsource::reconcile, gitsource::error_policy, ctx)
                .for_each(|_| futures::future::ready(()))
                .boxed(),
            );
        }
        futures::future::join_all(tasks).await;
        return;
    }

    let (stores, triggers) = Stores::new(&client);
    let ctx = Arc::new(scheduler::Context {
        shared,
        stores: Some(stores),
        engine,
        options: config.options,
        publisher: backends.publisher,
        debouncer: Mutex::new(Debouncer::new(config.debounce)),
        resync: config.resync,
        retry_after: config.retry_after,
        blocked: Mutex::default(),
        reported: Mutex::default(),
        memos: Mutex::default(),
        rollout_refused: Mutex::default(),
    });
    let trigger = futures::stream::select_all(triggers);
    tasks.push(
        Controller::new(
            Api::<Namespace>::all(client),
            watcher::Config::default().any_semantic(),
        )
        .with_config(controller_config)
        .reconcile_on(trigger)
        .graceful_shutdown_on(shutdown)
        .run(scheduler::reconcile, scheduler::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .boxed(),
    );
    futures::future::join_all(tasks).await;
}
