//! One synchronisation pass: fetch the control plane, and for each environment read its
//! inputs, render them, report failures, and deliver the tree to its GitOps repositories.
//!
//! [`Syncer`] holds what lasts across passes (settings, credentials, the cache); a [`Pass`]
//! holds what one pass fetched, so that a repository used by several environments is
//! fetched once. `kalypso sync` runs one pass; `kalypso serve` runs one per poll and uses
//! [`Pass::resolve`] and [`Pass::deliver`] separately, to skip environments whose input
//! commits did not change.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use git2::Oid;

use kalypso_core::Diagnostics;
use kalypso_core::placement::{CurrentAssignment, ExtenderCall, ExtenderClient};
use kalypso_core::run::{
    DeletionGuard, DeletionLimit, Failure, Input, Isolation, MassDeletion, RenderMemo, Request, Run,
    RunContext, Sink,
};
use kalypso_core::tree::Blob;
use kalypso_template::{Engine, SprigVersion};
use tokio::runtime::Handle;

use crate::auth::{self, AuthSettings, Credentials};
use crate::control_plane::{
    self, ControlPlane, DEFAULT_MAIN_BRANCH, EnvironmentRef, Resolved, Revisions, WorkloadRepos,
};
use crate::deliver::{self, Context, Delivery, DeliverySettings, Destination, Mode};
use crate::delivered::DeliveredFiles;
use crate::extenders::HttpExtenders;
use crate::forge::ProviderSettings;
use crate::issues::{self, IssueReport};
use crate::repo::{Cache, Transport};
use crate::retry::RetryPolicy;
use crate::state::{self, BranchAt, EnvState, Environments, Fingerprint, Store};
use crate::treewrite::Hashed;
use crate::url::{self as repo_url, RepoUrl};

/// A failed pass or environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Credentials cannot be loaded.
    #[error(transparent)]
    Credentials(#[from] auth::Error),
    /// The control plane or an environment's inputs cannot be read.
    #[error(transparent)]
    ControlPlane(#[from] control_plane::Error),
    /// Delivery failed.
    #[error("environment {environment}: {error}")]
    Delivery {
        /// The environment.
        environment: String,
        /// Why (its message is part of this error's).
        error: deliver::Error,
    },
    /// Reporting failures as issues failed.
    #[error("environment {environment}: cannot report failures as issues: {error}")]
    Issues {
        /// The environment.
        environment: String,
        /// Why (its message is part of this error's).
        error: crate::forge::Error,
    },
    /// The environment names no GitOps repository.
    #[error("environment {environment} has no GitOpsRepo: nothing to deliver to")]
    NoGitOpsRepo {
        /// The environment.
        environment: String,
    },
    /// Delivery to an OCI registry failed.
    #[error("environment {environment}: GitOpsRepo {name:?}: {error}")]
    Oci {
        /// The environment.
        environment: String,
        /// The GitOpsRepo.
        name: String,
        /// Why (its message is part of this error's).
        error: Box<kalypso_oci::Error>,
    },
    /// The registry client cannot be made (its credentials cannot be loaded).
    #[error("environment {environment}: cannot reach OCI registries: {reason}")]
    Registry {
        /// The environment.
        environment: String,
        /// Why.
        reason: String,
    },
    /// The environment's progressive rollout cannot go on.
    #[error("environment {environment}: {reason}")]
    Rollout {
        /// The environment.
        environment: String,
        /// Why.
        reason: String,
    },
    /// A GitOpsRepo is unusable.
    #[error("environment {environment}: GitOpsRepo {name:?}: {reason}")]
    GitOpsRepo {
        /// The environment.
        environment: String,
        /// The GitOpsRepo.
        name: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Whether the failure may go away by itself (network trouble, a busy branch).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::ControlPlane(e) => e.is_transient(),
            Error::Delivery { error, .. } => error.is_transient(),
            Error::Issues { error, .. } => error.is_transient(),
            Error::Oci { error, .. } => error.is_transient(),
            _ => false,
        }
    }

    /// Whether a file of the last delivery, put on a branch by its id, is missing from a
    /// mirror (see [`crate::delivered`]).
    fn is_not_delivered(&self) -> bool {
        matches!(
            self,
            Error::Delivery {
                error: deliver::Error::Repo(error),
                ..
            } if error.is_not_delivered()
        ) || matches!(self, Error::Oci { error, .. } if matches!(**error, kalypso_oci::Error::NotDelivered { .. }))
    }

    /// Whether a repository looks damaged on disk: for the cache's mirrors,
    /// [`Syncer::repair_cache`] and a new pass repair it.
    pub fn is_cache_damage(&self) -> bool {
        match self {
            Error::ControlPlane(e) => e.is_damage(),
            Error::Delivery { error, .. } => error.is_damage(),
            _ => false,
        }
    }
}

/// Everything a sync needs besides the control plane's location.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where remote repositories are mirrored.
    pub cache_dir: PathBuf,
    /// Credentials.
    pub auth: AuthSettings,
    /// Retrying of network failures.
    pub retry: RetryPolicy,
    /// The control plane's main branch (where Environments are defined).
    pub main_branch: String,
    /// How to deliver.
    pub delivery: DeliverySettings,
    /// Deliver to this repository instead of each GitOpsRepo's `spec.repo` (for trying a
    /// control plane against a copy of its GitOps repository).
    pub gitops_repo: Option<String>,
    /// Makes the calls to the SchedulerExtenders of policies with placement fields.
    pub extenders: Extenders,
    /// The Sprig version templates run with (the command line's `KALYPSO_SPRIG`).
    pub sprig: SprigVersion,
    /// Credentials and plain-HTTP registries for `oci://` GitOpsRepos.
    pub registry: kalypso_oci::AuthSettings,
    /// When a delivery that removes deployment targets is held.
    pub mass_deletion: MassDeletionSettings,
}

/// The mass-deletion guard of every delivery ([`kalypso_core::run::guard`]): a delivery
/// that would remove more than `limit` of the deployment-target folders a GitOps branch has
/// is held (nothing is pushed, the environment fails with a `mass-deletion` error, an issue
/// in `pr` mode) unless its environment is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MassDeletionSettings {
    /// When too many folders go.
    pub limit: DeletionLimit,
    /// The environments allowed to remove them.
    pub allowed: AllowedDeletions,
    /// How a person allows it with this front end (ends the error's message).
    pub how_to_allow: &'static str,
}

impl Default for MassDeletionSettings {
    fn default() -> MassDeletionSettings {
        MassDeletionSettings {
            limit: DeletionLimit::Default,
            allowed: AllowedDeletions::None,
            how_to_allow: "allow it (`kalypso sync --allow-mass-deletion`) and deliver again.",
        }
    }
}

/// Which environments may remove more deployment targets than the limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowedDeletions {
    /// None.
    #[default]
    None,
    /// Every environment (`kalypso sync --allow-mass-deletion`).
    All,
    /// These environments.
    Environments(BTreeSet<String>),
}

impl AllowedDeletions {
    /// Whether `environment` is allowed.
    pub fn allows(&self, environment: &str) -> bool {
        match self {
            AllowedDeletions::None => false,
            AllowedDeletions::All => true,
            AllowedDeletions::Environments(names) => names.contains(environment),
        }
    }
}

/// The client that calls scheduler extenders (HTTP by default).
#[derive(Clone)]
pub struct Extenders(pub Arc<dyn ExtenderClient + Send>);

impl Default for Extenders {
    fn default() -> Extenders {
        Extenders(Arc::new(HttpExtenders::new()))
    }
}

impl std::fmt::Debug for Extenders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extenders")
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            cache_dir: Cache::default_dir(),
            auth: AuthSettings::default(),
            retry: RetryPolicy::default(),
            main_branch: DEFAULT_MAIN_BRANCH.to_owned(),
            delivery: DeliverySettings::default(),
            gitops_repo: None,
            extenders: Extenders::default(),
            sprig: SprigVersion::default(),
            registry: kalypso_oci::AuthSettings::default(),
            mass_deletion: MassDeletionSettings::default(),
        }
    }
}

/// One GitOps repository's delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetReport {
    /// The GitOpsRepo's name.
    pub name: String,
    /// The repository, redacted.
    pub repo: String,
    /// The branch.
    pub branch: String,
    /// What happened.
    pub delivery: Delivery,
}

/// How an environment ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Rendered and delivered.
    Delivered(Vec<TargetReport>),
    /// Rendering failed: nothing was delivered.
    Failed {
        /// The failures.
        failures: Vec<Failure>,
        /// The issues opened, updated and closed for them (`pr` mode).
        issues: Option<IssueReport>,
    },
}

/// What happened to one environment.
#[derive(Debug)]
pub struct EnvReport {
    /// The environment.
    pub environment: String,
    /// The commits it was built from.
    pub revisions: Revisions,
    /// Assignments scheduled.
    pub assignments: usize,
    /// Assignments rendered by this pass; the others had the inputs of the last delivery,
    /// whose files were put on the branch as they were (see [`crate::delivered`]).
    pub rendered: usize,
    /// Every diagnostic.
    pub diagnostics: Diagnostics,
    /// The WorkloadRegistrations whose workloads failed: their folders kept what was last
    /// delivered, and the rest of the environment was delivered (see [`Isolation`]).
    pub isolated: BTreeSet<String>,
    /// The failures of the isolated registrations (reported as issues in `pr` mode).
    pub isolated_failures: Vec<Failure>,
    /// The deployment-target folders the delivery removes, when they are over the
    /// mass-deletion limit: held (the outcome is [`Outcome::Failed`]), or allowed.
    pub mass_deletion: Option<MassDeletion>,
    /// The outcome.
    pub outcome: Outcome,
}

impl EnvReport {
    /// Whether the environment was delivered, with no workload failing.
    pub fn is_success(&self) -> bool {
        matches!(self.outcome, Outcome::Delivered(_)) && self.isolated.is_empty()
    }

    /// Whether the mass-deletion guard held the delivery (nothing was delivered).
    pub fn is_held(&self) -> bool {
        self.mass_deletion.as_ref().is_some_and(|m| m.held)
    }
}

/// An environment whose inputs and GitOps branches are all where its last delivery left
/// them: rendering it again would deliver nothing, so it is neither fetched nor rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unchanged {
    /// The environment.
    pub environment: String,
    /// The commits it was built from.
    pub revisions: Revisions,
    /// Assignments scheduled at the last render.
    pub assignments: usize,
    /// Each GitOps branch, up to date at the head its last delivery left.
    pub targets: Vec<TargetReport>,
}

/// What [`Syncer::check`] found: the environments that need nothing, and the branch
/// listings it made (so that a pass for the others fetches only what moved).
#[derive(Debug, Default)]
pub struct Check {
    /// The environments asked for whose inputs did not move, in order.
    pub unchanged: Vec<Unchanged>,
    /// Whether every environment asked for is among them (nothing to fetch at all).
    pub complete: bool,
    /// The repositories whose branches were listed.
    pub remotes: usize,
    listed: Arc<HashMap<String, BTreeMap<String, Oid>>>,
}

impl Check {
    /// The check's answer for `environment`, if it did not move.
    pub fn unchanged(&self, environment: &str) -> Option<&Unchanged> {
        self.unchanged.iter().find(|u| u.environment == environment)
    }
}

/// How many remotes are listed at once.
const LISTING_PARALLELISM: usize = 8;

/// An extender client that notes whether it was called: a render that called one depends
/// on answers git does not hold, so its delivery state is not recorded.
struct Watched<'a> {
    inner: &'a dyn ExtenderClient,
    called: AtomicBool,
}

impl ExtenderClient for Watched<'_> {
    fn call(&self, calls: &[ExtenderCall]) -> Vec<Result<Vec<u8>, String>> {
        if !calls.is_empty() {
            self.called.store(true, Ordering::SeqCst);
        }
        self.inner.call(calls)
    }
}

/// What lasts across passes.
#[derive(Debug)]
pub struct Syncer {
    settings: Settings,
    credentials: Credentials,
    cache: Cache,
    runtime: Handle,
    /// The template engine of the settings' Sprig version.
    engine: Engine,
    /// The files of each environment's last delivery, so that later passes render only
    /// the assignments whose inputs changed (read from the cache on a process's first pass).
    delivered: Mutex<HashMap<String, DeliveredFiles>>,
    /// The registry client of `oci://` GitOpsRepos, made when one is first met.
    registry: crate::oci::Lazy,
}

impl Syncer {
    /// Loads credentials. GitHub calls will run on `runtime` (a multi-threaded one: calls
    /// block on it from the syncing thread).
    pub fn new(settings: Settings, runtime: Handle) -> Result<Syncer, Error> {
        let credentials = Credentials::load(&settings.auth)?;
        Ok(Syncer {
            cache: Cache::new(&settings.cache_dir),
            engine: Engine::with_sprig(settings.sprig),
            settings,
            credentials,
            runtime,
            delivered: Mutex::default(),
            registry: crate::oci::Lazy::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Starts a pass: fetches the control plane.
    pub fn pass(&self, control_plane: &RepoUrl) -> Result<Pass<'_>, Error> {
        self.pass_after(control_plane, &Check::default())
    }

    /// Starts a pass after `check`: the repositories it listed are fetched only when their
    /// branches moved.
    pub fn pass_after(&self, control_plane: &RepoUrl, check: &Check) -> Result<Pass<'_>, Error> {
        let transport = Transport::new(&self.credentials, self.settings.retry);
        let store = Store::new(&self.cache, control_plane);
        let control_plane = ControlPlane::open_listed(
            control_plane,
            &self.cache,
            &transport,
            &self.settings.main_branch,
            check.listed.get(&control_plane.cache_name()),
        )?;
        Ok(Pass {
            syncer: self,
            sources: WorkloadRepos::with_listing(self.cache.clone(), check.listed.clone()),
            transport,
            control_plane,
            store,
            fingerprint: self.fingerprint(),
            allowed_deletions: BTreeSet::new(),
        })
    }

    /// Removes every mirror of the cache (after [`Error::is_cache_damage`]), with a warning:
    /// the next pass fetches them afresh. Delivery states are kept (each is checked against
    /// the remotes anyway). Returns how many were removed.
    pub fn repair_cache(&self) -> usize {
        let mut removed = 0;
        let Ok(entries) = std::fs::read_dir(self.cache.dir()) else {
            return 0;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.join("HEAD").is_file() {
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => removed += 1,
                    Err(error) => {
                        tracing::warn!(mirror = %path.display(), %error, "cannot remove a damaged mirror")
                    }
                }
            }
        }
        tracing::warn!(
            cache = %self.cache.dir().display(),
            removed,
            "the git cache looked damaged: its mirrors were removed and are fetched afresh"
        );
        removed
    }

    /// What decides the output besides the inputs: this binary and the output settings.
    fn fingerprint(&self) -> Fingerprint {
        let s = &self.settings;
        Fingerprint::of(&format!(
            "main branch {:?}\ndelivery {:?}\ngitops repo {:?}\nsprig {:?}\n",
            s.main_branch, s.delivery, s.gitops_repo, s.sprig,
        ))
    }

    /// The environments of `control_plane` as last listed, when its main branch did not
    /// move since (one branch listing of the control plane, nothing fetched).
    pub fn environments_unchanged(&self, control_plane: &RepoUrl) -> Option<Vec<String>> {
        let listed = Store::new(&self.cache, control_plane).environments(&self.fingerprint())?;
        let heads = crate::repo::list_heads(std::slice::from_ref(control_plane), &self.credentials, 1)
            .pop()?
            .ok()?;
        (heads.get(&listed.main_branch).map(Oid::to_string) == Some(listed.main)).then_some(listed.names)
    }

    /// Which of the environments `names` of `control_plane` (all its environments when
    /// empty) did not move since their last delivery, from the delivery states in the cache
    /// and one branch listing per repository (in parallel, nothing fetched). An environment
    /// without a usable state, or whose listing failed, is not among them.
    pub fn check(&self, control_plane: &RepoUrl, names: &[String]) -> Check {
        let fingerprint = self.fingerprint();
        let store = Store::new(&self.cache, control_plane);
        let (names, listed_at) = if names.is_empty() {
            match store.environments(&fingerprint) {
                Some(l) => (l.names, Some((l.main_branch, l.main))),
                None => return Check::default(),
            }
        } else {
            (names.to_vec(), None)
        };
        let states: Vec<(String, EnvState)> = names
            .iter()
            .filter_map(|n| store.environment(n, &fingerprint).map(|s| (n.clone(), s)))
            .collect();
        if states.is_empty() {
            return Check::default();
        }
        let mut urls: Vec<RepoUrl> = vec![control_plane.clone()];
        let mut seen: BTreeSet<String> = BTreeSet::from([control_plane.cache_name()]);
        for (_, state) in &states {
            for at in state.sources.iter().chain(state.targets.values()) {
                if let Ok(url) = RepoUrl::parse(&at.url)
                    && seen.insert(url.cache_name())
                {
                    urls.push(url);
                }
            }
        }
        let listings = crate::repo::list_heads(&urls, &self.credentials, LISTING_PARALLELISM);
        let mut listed = HashMap::new();
        for (url, listing) in urls.iter().zip(listings) {
            match listing {
                Ok(heads) => {
                    listed.insert(url.cache_name(), heads);
                }
                Err(error) => tracing::debug!(%error, "cannot list the branches; syncing in full"),
            }
        }
        // OCI GitOpsRepos: the index each tag holds now (one HEAD each, see crate::oci).
        let oci_heads = crate::oci::index_heads(
            states.iter().flat_map(|(_, state)| state.targets.values()),
            || {
                self.registry
                    .get(&self.settings.registry, &self.settings.retry)
                    .ok()
            },
        );
        let remotes = urls.len() + oci_heads.len();
        let head = |url: &str, branch: &str| -> Option<Option<String>> {
            if crate::oci::is_oci(url) {
                return oci_heads.get(&(url.to_owned(), branch.to_owned())).cloned();
            }
            let url = RepoUrl::parse(url).ok()?;
            let heads = listed.get(&url.cache_name())?;
            Some(heads.get(branch).map(Oid::to_string))
        };
        let control = listed.get(&control_plane.cache_name());
        let at = |branch: &str| control.map(|heads| heads.get(branch).map(Oid::to_string));
        let main_moved = listed_at.is_some_and(|(branch, commit)| at(&branch) != Some(Some(commit)));
        let mut unchanged = Vec::new();
        for (name, state) in states {
            let still = !main_moved
                && !state.rollout_in_progress
                && state
                    .control_plane
                    .iter()
                    .all(|(branch, commit)| at(branch) == Some(Some(commit.clone())))
                && state
                    .sources
                    .iter()
                    .chain(state.targets.values())
                    .all(|b| head(&b.url, &b.branch) == Some(b.commit.clone()));
            if !still {
                continue;
            }
            let targets = state
                .targets
                .iter()
                .map(|(target, b)| TargetReport {
                    name: target.clone(),
                    repo: RepoUrl::parse(&b.url).map_or_else(|_| b.url.clone(), |u| u.redacted()),
                    branch: b.branch.clone(),
                    delivery: match crate::oci::unchanged(b) {
                        Some(report) => Delivery::Artifacts(Box::new(report)),
                        None => Delivery::UpToDate {
                            head: b.commit.as_deref().and_then(|c| Oid::from_str(c).ok()),
                            closed: Vec::new(),
                        },
                    },
                })
                .collect();
            unchanged.push(Unchanged {
                environment: name,
                revisions: Revisions {
                    main: state.main,
                    environment: state.environment,
                    workloads: state.workloads,
                    bases: state.bases,
                },
                assignments: state.assignments,
                targets,
            });
        }
        Check {
            complete: unchanged.len() == names.len(),
            unchanged,
            remotes,
            listed: Arc::new(listed),
        }
    }
}

/// Which content each cluster type of an environment gets from a delivery
/// ([`Pass::deliver_scoped`]): by default, every cluster type the content of the inputs
/// delivered. A progressive rollout gives the cluster types of the waves it has reached the new
/// inputs and keeps the others' folders as the GitOps branch has them; rolling back gives the
/// reached cluster types the inputs they had before (another control-plane commit, resolved
/// as any other).
#[derive(Debug, Default)]
pub struct Scope<'r> {
    /// Cluster types rendered from other inputs.
    others: Vec<(&'r Resolved, BTreeSet<String>)>,
    /// Cluster types whose folders stay as they are.
    keep: BTreeSet<String>,
    /// Tracking files written with the content (a rollout's state).
    tracking: BTreeMap<String, Blob>,
    /// A progressive rollout goes on after this delivery (its delivery state is recorded as
    /// one, see [`crate::state::Store::mark_rollout_in_progress`]).
    rollout_in_progress: bool,
}

impl<'r> Scope<'r> {
    /// Renders `cluster_types` from `resolved` (the environment at another commit) rather
    /// than from the inputs delivered.
    pub fn rendering_from(mut self, cluster_types: BTreeSet<String>, resolved: &'r Resolved) -> Scope<'r> {
        self.others.push((resolved, cluster_types));
        self
    }

    /// Keeps the folders of `cluster_types` on the GitOps branches exactly as they are.
    pub fn keeping(mut self, cluster_types: impl IntoIterator<Item = String>) -> Scope<'r> {
        self.keep.extend(cluster_types);
        self
    }

    /// Writes `bytes` as the tracking file `name` (under `.github/tracking/`) in the same
    /// commit as the content.
    pub fn tracking(mut self, name: &str, bytes: impl Into<Blob>) -> Scope<'r> {
        self.tracking.insert(name.to_owned(), bytes.into());
        self
    }

    /// Records the delivery as one a progressive rollout goes on from: the next sync takes
    /// the full path even though nothing moved.
    pub fn rollout_in_progress(mut self, in_progress: bool) -> Scope<'r> {
        self.rollout_in_progress = in_progress;
        self
    }

    /// Whether every cluster type gets the content of the inputs delivered.
    pub fn is_whole(&self) -> bool {
        self.others.is_empty() && self.keep.is_empty()
    }

    /// The core's request for `resolved` in this scope.
    fn request<'a>(&'a self, resolved: &'a Resolved) -> Request<'a> {
        let mut request = resolved.request();
        for (other, cluster_types) in &self.others {
            request = request.rendering_from(cluster_types.clone(), Input::Trees(&other.inputs));
        }
        request.keeping(self.keep.iter().cloned())
    }
}

/// One pass over a fetched control plane.
#[derive(Debug)]
pub struct Pass<'s> {
    syncer: &'s Syncer,
    transport: Transport<'s>,
    control_plane: ControlPlane,
    sources: WorkloadRepos,
    store: Store,
    fingerprint: Fingerprint,
    /// Environments a person allowed to remove more deployment targets than the limit, in
    /// this pass only.
    allowed_deletions: BTreeSet<String>,
}

impl Pass<'_> {
    /// Allows this pass's delivery of `environment` to remove more deployment targets than
    /// the mass-deletion limit (the operator's annotation on an Environment).
    pub fn allow_mass_deletion(&mut self, environment: &str) {
        self.allowed_deletions.insert(environment.to_owned());
    }

    /// The mass-deletion guard of `environment`'s delivery.
    fn deletion_guard(&self, environment: &str) -> DeletionGuard {
        let settings = &self.syncer.settings.mass_deletion;
        DeletionGuard {
            limit: settings.limit,
            allowed: settings.allowed.allows(environment) || self.allowed_deletions.contains(environment),
            how_to_allow: settings.how_to_allow,
        }
    }

    /// The environments named (all when `names` is empty).
    pub fn environments(&self, names: &[String]) -> Result<Vec<EnvironmentRef>, Error> {
        let selected = self.control_plane.select(names)?;
        if names.is_empty()
            && let Ok(Some(main)) = self.control_plane.repo().branch(self.control_plane.main_branch())
        {
            self.store.save_environments(&Environments {
                format: state::FORMAT,
                fingerprint: self.fingerprint.0.clone(),
                main_branch: self.control_plane.main_branch().to_owned(),
                main: main.to_string(),
                names: selected.iter().map(|e| e.name.clone()).collect(),
            });
        }
        Ok(selected)
    }

    /// Reads `env`'s inputs (fetching its workload repositories once per pass).
    pub fn resolve(&mut self, env: &EnvironmentRef) -> Result<Resolved, Error> {
        Ok(self
            .control_plane
            .resolve(env, &mut self.sources, &self.transport)?)
    }

    /// Reads `env` as it was at `revisions` (see [`ControlPlane::resolve_pinned`]).
    pub fn resolve_pinned(&mut self, env: &EnvironmentRef, revisions: &Revisions) -> Result<Resolved, Error> {
        Ok(self
            .control_plane
            .resolve_pinned(env, revisions, &mut self.sources, &self.transport)?)
    }

    /// The GitOps branch a rollout of `resolved` tracks its state on (the first git
    /// GitOpsRepo's), fetched; OCI GitOpsRepos are refused (an artifact is delivered whole).
    pub(crate) fn rollout_branch(&self, resolved: &Resolved) -> Result<(crate::repo::Repo, String), Error> {
        let name = &resolved.environment.name;
        if let Some(oci) = self.oci_targets(resolved)?.first() {
            return Err(Error::GitOpsRepo {
                environment: name.clone(),
                name: oci.name.clone(),
                reason: "a RolloutPolicy needs git GitOpsRepos: an OCI artifact is delivered whole, so some \
                         cluster types cannot keep their content while others change"
                    .to_owned(),
            });
        }
        let targets = self.targets(resolved)?;
        let GitTarget { url, branch, .. } = targets.first().ok_or_else(|| Error::NoGitOpsRepo {
            environment: name.clone(),
        })?;
        let fail = |error: crate::repo::Error| Error::Delivery {
            environment: name.clone(),
            error: deliver::Error::Repo(error),
        };
        let repo = crate::repo::Repo::open_mirror(url, &self.syncer.cache).map_err(|e| fail(e.into()))?;
        repo.fetch_branches(&self.transport, &[branch.as_str()], &[])
            .map_err(|e| fail(e.into()))?;
        Ok((repo, branch.clone()))
    }

    /// Network retries made in this pass so far.
    pub fn retries(&self) -> u32 {
        *self.transport.retries.borrow()
    }

    /// Resolves and delivers `env`.
    pub fn sync(&mut self, env: &EnvironmentRef) -> Result<EnvReport, Error> {
        let resolved = self.resolve(env)?;
        self.deliver(&resolved)
    }

    /// Renders `resolved` and delivers it, or reports why it cannot be. Only the
    /// assignments whose inputs changed since the last delivery are rendered; if a file of
    /// that delivery is missing from the cache, the environment is rendered in full.
    pub fn deliver(&self, resolved: &Resolved) -> Result<EnvReport, Error> {
        self.deliver_scoped(resolved, &Scope::default())
    }

    /// [`Pass::deliver`] with `scope` saying which cluster types get the content of
    /// `resolved`, which the content of other inputs, and which keep their folders on the
    /// GitOps branches as they are: one commit in which only some cluster types change. A
    /// delivery that is not of the whole environment records no delivery state (the next
    /// sync renders again, see [`crate::state`]).
    pub fn deliver_scoped(&self, resolved: &Resolved, scope: &Scope<'_>) -> Result<EnvReport, Error> {
        let name = resolved.environment.name.clone();
        let span = tracing::info_span!("environment", environment = %name);
        let _enter = span.enter();
        let files_path = self.store.files_path(&name);
        let last = self
            .syncer
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&name)
            .unwrap_or_else(|| {
                files_path
                    .as_deref()
                    .map(|path| DeliveredFiles::load(path, &self.fingerprint))
                    .unwrap_or_default()
            });
        let (result, last) = match self.render_and_deliver(resolved, scope, &last) {
            Err(error) if error.is_not_delivered() && !last.is_empty() => {
                tracing::warn!(%error, "rendering the environment in full");
                let none = DeliveredFiles::default();
                (self.render_and_deliver(resolved, scope, &none), none)
            }
            other => (other, last),
        };
        let (report, next) = result?;
        let keep = match next {
            Some(next) => {
                if !self.syncer.settings.delivery.dry_run
                    && let Some(path) = &files_path
                    && let Err(error) = next.save(path, &self.fingerprint)
                {
                    tracing::warn!(file = %path.display(), %error, "cannot record the files delivered");
                }
                next
            }
            None => last,
        };
        self.syncer
            .delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, keep);
        Ok(report)
    }

    /// [`Pass::deliver`] after the delivery of `last`: the core's driver with the
    /// environment's GitOps branches as its sink; the report, and the files delivered when
    /// every GitOps repository got them.
    fn render_and_deliver(
        &self,
        resolved: &Resolved,
        scope: &Scope<'_>,
        last: &DeliveredFiles,
    ) -> Result<(EnvReport, Option<DeliveredFiles>), Error> {
        let name = resolved.environment.name.clone();
        let settings = &self.syncer.settings;
        let targets = self.targets(resolved)?;
        let oci_targets = self.oci_targets(resolved)?;
        if !oci_targets.is_empty() && !scope.is_whole() {
            return Err(Error::GitOpsRepo {
                environment: name,
                name: oci_targets[0].name.clone(),
                reason: "an OCI GitOpsRepo is delivered whole: some cluster types cannot keep their \
                         artifacts while others change"
                    .to_owned(),
            });
        }
        let extenders = Watched {
            inner: &*self.syncer.settings.extenders.0,
            called: AtomicBool::new(false),
        };
        let context = RunContext {
            extenders: &extenders,
            isolation: Isolation::Registration,
            mass_deletion: Some(self.deletion_guard(&name)),
            ..RunContext::new(&self.syncer.engine)
        };
        let mut branches = Branches {
            pass: self,
            resolved,
            targets: &targets,
            oci_targets: &oci_targets,
            last,
            tracking: &scope.tracking,
            oci_index: crate::oci::IndexRead::default(),
        };
        let (run, delivered) = kalypso_core::run::run(scope.request(resolved), &context, &mut branches);
        let (outcome, next) = delivered?;
        let delivered = matches!(outcome, Outcome::Delivered(_));
        let report = EnvReport {
            environment: name,
            revisions: resolved.revisions.clone(),
            assignments: run.assignments(),
            rendered: run.rendered_now,
            diagnostics: run.diagnostics,
            isolated: if delivered { run.isolated } else { BTreeSet::new() },
            isolated_failures: if delivered { run.failures } else { Vec::new() },
            mass_deletion: run.mass_deletion,
            outcome,
        };
        let recordable = report.is_success()
            && scope.is_whole()
            && !settings.delivery.dry_run
            && !extenders.called.load(Ordering::SeqCst)
            && targets.iter().all(|t| t.mode == Mode::Push);
        if recordable {
            self.record(resolved, &report, scope.rollout_in_progress);
        }
        Ok((report, next))
    }

    /// What delivery needs from this pass.
    fn context(&self) -> Context<'_> {
        Context {
            cache: &self.syncer.cache,
            transport: &self.transport,
            credentials: &self.syncer.credentials,
            settings: &self.syncer.settings.delivery,
            runtime: &self.syncer.runtime,
        }
    }

    /// `file` with the forge of the first GitOps repository of `targets` when issues are filed
    /// there: in `pr` mode only (as the original), never in a dry run (`None` otherwise).
    fn with_issue_forge<T>(
        &self,
        name: &str,
        targets: &[GitTarget],
        file: impl FnOnce(&dyn crate::forge::Forge) -> Result<T, crate::forge::Error>,
    ) -> Result<Option<T>, Error> {
        let Some(target) = targets
            .first()
            .filter(|t| t.mode == Mode::Pr && !self.syncer.settings.delivery.dry_run)
        else {
            return Ok(None);
        };
        let forge = self
            .context()
            .forge(&target.url, &target.providers)
            .map_err(|error| Error::Delivery {
                environment: name.to_owned(),
                error,
            })?;
        file(forge.as_ref()).map(Some).map_err(|error| Error::Issues {
            environment: name.to_owned(),
            error,
        })
    }

    /// Opens, updates and closes the issues of environment `name` to match `failures`, in
    /// the first GitOps repository of `targets`, in `pr` mode only (as the original).
    fn report_issues(
        &self,
        name: &str,
        targets: &[GitTarget],
        failures: &[Failure],
    ) -> Result<Option<IssueReport>, Error> {
        self.with_issue_forge(name, targets, |forge| issues::apply(forge, name, failures))
    }

    /// Closes the issues of `resolved`'s failed rollouts in its first GitOps repository, in
    /// `pr` mode only: a later rollout completed.
    pub(crate) fn close_rollout_failures(&self, resolved: &Resolved) -> Result<Option<IssueReport>, Error> {
        let name = &resolved.environment.name;
        self.with_issue_forge(name, &self.targets(resolved)?, |forge| {
            issues::close_rollout_failures(forge, name)
        })
    }

    /// Reports the failed rollout `state` of `resolved` as an issue in its first GitOps
    /// repository, in `pr` mode only, as [`Pass::report_issues`] does for render failures.
    pub(crate) fn report_rollout_failure(
        &self,
        resolved: &Resolved,
        state: &kalypso_core::rollout::RolloutState,
    ) -> Result<Option<IssueReport>, Error> {
        let name = &resolved.environment.name;
        self.with_issue_forge(name, &self.targets(resolved)?, |forge| {
            issues::report_rollout_failure(forge, name, state)
        })
    }

    /// Makes the next sync take the full path for `environment`, listing the branches its
    /// last delivery was built from (see [`Store::mark_rollout_in_progress`]).
    pub(crate) fn mark_rollout_in_progress(&self, environment: &str) {
        self.store.mark_rollout_in_progress(environment);
    }

    /// Records what `report` delivered from `resolved`, so that the next sync can see that
    /// nothing moved (see [`crate::state`]). Nothing is recorded when a location carries
    /// credentials (they would be written to the cache) or a branch cannot be read.
    fn record(&self, resolved: &Resolved, report: &EnvReport, rollout_in_progress: bool) {
        let Outcome::Delivered(delivered) = &report.outcome else {
            return;
        };
        let plain = |url: &RepoUrl| (url.redacted() == url.for_git()).then(|| url.for_git().to_owned());
        let mut control_plane = BTreeMap::new();
        for branch in &resolved.branches {
            let Ok(Some(head)) = self.control_plane.repo().branch(branch) else {
                return;
            };
            control_plane.insert(branch.clone(), head.to_string());
        }
        let mut sources = Vec::new();
        for source in &resolved.sources {
            let Some(url) = plain(&source.url) else { return };
            sources.push(BranchAt {
                url,
                branch: source.branch.clone(),
                commit: Some(source.commit.to_string()),
            });
        }
        let (Ok(destinations), Ok(oci_destinations)) = (self.targets(resolved), self.oci_targets(resolved))
        else {
            return;
        };
        let mut targets = BTreeMap::new();
        // OCI GitOpsRepos come after the git ones in the report (see render_and_deliver).
        for (target, t) in oci_destinations
            .iter()
            .zip(delivered.iter().skip(destinations.len()))
        {
            let Some(at) = crate::oci::delivered_at(target, &t.delivery) else {
                return;
            };
            targets.insert(target.name.clone(), at);
        }
        for (
            GitTarget {
                name, url, branch, ..
            },
            t,
        ) in destinations.iter().zip(delivered)
        {
            let head = match &t.delivery {
                Delivery::Committed { commit, .. } => Some(*commit),
                Delivery::UpToDate { head, .. } => *head,
                _ => return,
            };
            let Some(url) = plain(url) else { return };
            targets.insert(
                name.clone(),
                BranchAt {
                    url,
                    branch: branch.clone(),
                    commit: head.map(|h| h.to_string()),
                },
            );
        }
        let revisions = &report.revisions;
        self.store.save_environment(
            &report.environment,
            &EnvState {
                format: state::FORMAT,
                fingerprint: self.fingerprint.0.clone(),
                control_plane,
                sources,
                targets,
                assignments: report.assignments,
                main: revisions.main.clone(),
                environment: revisions.environment.clone(),
                workloads: revisions.workloads.clone(),
                bases: revisions.bases.clone(),
                rollout_in_progress,
            },
        );
    }

    /// Where the GitOps branch `branch` of `url` has each deployment target (nothing when it
    /// cannot be read: placement then starts afresh, and says so in the log).
    fn delivered_assignment(&self, url: &RepoUrl, branch: &str) -> CurrentAssignment {
        deliver::placement(&self.syncer.cache, &self.transport, url, branch).unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read the GitOps branch for Steady placement; placing afresh");
            CurrentAssignment::new()
        })
    }

    /// The registry client, made on first use.
    fn registry(&self, environment: &str) -> Result<&kalypso_oci::Registry, Error> {
        let settings = &self.syncer.settings;
        self.syncer
            .registry
            .get(&settings.registry, &settings.retry)
            .map_err(|reason| Error::Registry {
                environment: environment.to_owned(),
                reason,
            })
    }

    /// What the artifacts of `resolved` say they come from: the control plane, the
    /// environment branch's commit (the revision, `<branch>@sha1:<commit>`) and its time.
    fn provenance(&self, resolved: &Resolved) -> kalypso_oci::Provenance {
        let repo = self.control_plane.repo();
        let commit = &resolved.revisions.environment;
        let created = Oid::from_str(commit)
            .ok()
            .and_then(|oid| repo.commit_time(oid).ok())
            .unwrap_or(0);
        kalypso_oci::Provenance {
            environment: resolved.environment.name.clone(),
            source: repo.url().redacted(),
            branch: resolved.environment.branch.clone(),
            commit: commit.clone(),
            created: kalypso_oci::deliver::rfc3339(created),
            main_commit: resolved.revisions.main.clone(),
        }
    }

    /// The GitOpsRepos of `resolved` that are OCI locations (see [`crate::oci`]).
    fn oci_targets(&self, resolved: &Resolved) -> Result<Vec<crate::oci::OciTarget>, Error> {
        let settings = &self.syncer.settings;
        crate::oci::targets(
            &resolved.gitops,
            settings.gitops_repo.as_deref(),
            settings.delivery.mode,
        )
        .map_err(|(name, reason)| Error::GitOpsRepo {
            environment: resolved.environment.name.clone(),
            name,
            reason,
        })
    }

    /// The git GitOps destinations of `resolved` (OCI ones aside): (name, repository,
    /// branch, mode).
    fn targets(&self, resolved: &Resolved) -> Result<Vec<GitTarget>, Error> {
        let environment = &resolved.environment.name;
        if resolved.gitops.is_empty() {
            return Err(Error::NoGitOpsRepo {
                environment: environment.clone(),
            });
        }
        let settings = &self.syncer.settings;
        resolved
            .gitops
            .iter()
            .filter(|g| !crate::oci::is_oci(settings.gitops_repo.as_deref().unwrap_or(&g.repo)))
            .map(|g| {
                let invalid = |reason: String| Error::GitOpsRepo {
                    environment: environment.clone(),
                    name: g.name.clone(),
                    reason,
                };
                let text = settings.gitops_repo.as_deref().unwrap_or(&g.repo);
                let url = RepoUrl::parse(text).map_err(|e: repo_url::Error| invalid(e.to_string()))?;
                if g.branch.trim().is_empty() {
                    return Err(invalid("spec.branch is empty".to_owned()));
                }
                let mode = settings.delivery.mode.resolve(&url);
                let providers = settings
                    .delivery
                    .providers()
                    .for_gitops_repo(g.provider.as_deref(), g.provider_api_url.as_deref())
                    .map_err(invalid)?;
                Ok(GitTarget {
                    name: g.name.clone(),
                    url,
                    branch: g.branch.clone(),
                    mode,
                    providers,
                })
            })
            .collect()
    }
}

/// A git GitOpsRepo of an environment, checked: where its tree goes and how.
#[derive(Clone, Debug)]
pub(crate) struct GitTarget {
    /// The GitOpsRepo's name.
    pub(crate) name: String,
    /// The repository.
    pub(crate) url: RepoUrl,
    /// The branch.
    pub(crate) branch: String,
    /// Push or pull request (resolved).
    pub(crate) mode: Mode,
    /// The forge it is on.
    pub(crate) providers: ProviderSettings,
}

/// The GitOps branches of one environment as the sink of the core's driver: placement reads
/// where they have each deployment target, the record of the last delivery's files is the
/// memo, and a finished run is hashed once and delivered to each branch (failures reported
/// as issues in `pr` mode).
struct Branches<'p> {
    pass: &'p Pass<'p>,
    resolved: &'p Resolved,
    /// The git GitOpsRepos.
    targets: &'p [GitTarget],
    /// The GitOpsRepos that are OCI locations, delivered after the git ones.
    oci_targets: &'p [crate::oci::OciTarget],
    last: &'p DeliveredFiles,
    /// Tracking files written with the content.
    tracking: &'p BTreeMap<String, Blob>,
    /// The OCI index read for placement, which the delivery starts from.
    oci_index: crate::oci::IndexRead,
}

impl Sink for Branches<'_> {
    /// How the environment ended, and the files delivered when every branch got them.
    type Delivered = (Outcome, Option<DeliveredFiles>);
    type Error = Error;

    /// Steady keeps targets where the last pass of this process placed them, or, on a
    /// process's first pass, where the (first) GitOps branch has them.
    fn current_assignment(&self) -> CurrentAssignment {
        if let Some(remembered) = self.last.placed_by_this_process() {
            return remembered;
        }
        match (self.targets.first(), self.oci_targets.first()) {
            (Some(target), _) => self.pass.delivered_assignment(&target.url, &target.branch),
            (None, Some(target)) => self
                .pass
                .registry(&self.resolved.environment.name)
                .map(|registry| crate::oci::current_assignment(registry, target, &self.oci_index))
                .unwrap_or_default(),
            (None, None) => CurrentAssignment::default(),
        }
    }

    fn memo(&self) -> &dyn RenderMemo {
        self.last
    }

    fn deliver(&mut self, run: &mut Run) -> Result<Self::Delivered, Error> {
        let (pass, resolved, targets, last) = (self.pass, self.resolved, self.targets, self.last);
        let settings = &pass.syncer.settings;
        let name = &resolved.environment.name;
        tracing::debug!(
            assignments = run.assignments(),
            rendered = run.rendered_now,
            "rendered (the other assignments are unchanged since the last pass)"
        );
        if run.is_blocked() {
            let issues = pass.report_issues(name, targets, &run.failures)?;
            let failures = std::mem::take(&mut run.failures);
            return Ok((Outcome::Failed { failures, issues }, None));
        }
        // What delivering does not need goes first: the scheduled environment.
        drop(std::mem::take(&mut run.environment));
        run.rendered.content.tracking.extend(
            self.tracking
                .iter()
                .map(|(name, blob)| (name.clone(), blob.clone())),
        );
        let content = &run.rendered.content;
        // Only a branch needs the environment's git trees; artifacts lay out their files.
        let hash = if targets.is_empty() {
            Hashed::files_only
        } else {
            Hashed::new
        };
        let hashed = hash(content, &|ct, dt| last.files(ct, dt)).map_err(|unknown| {
            let repo = targets.first().map(|t| t.url.redacted());
            Error::Delivery {
                environment: name.clone(),
                error: deliver::Error::Repo(crate::repo::Error::not_delivered(
                    unknown,
                    repo.unwrap_or_default(),
                )),
            }
        })?;
        // The record of this delivery, made now so that the assignments' records can go.
        let delivered = last.after(&run.rendered.records, &hashed);
        drop(std::mem::take(&mut run.rendered.records));
        let ctx = pass.context();
        let mut reports = Vec::new();
        for GitTarget {
            name: target_name,
            url,
            branch,
            mode,
            providers,
        } in targets
        {
            let dest = Destination {
                url,
                branch,
                mode: *mode,
                providers,
            };
            let about = deliver::Provenance {
                environment: name.clone(),
                main: resolved.revisions.main.clone(),
                environment_commit: resolved.revisions.environment.clone(),
                workloads: resolved.revisions.workloads.len(),
            };
            let delivery = deliver::deliver_with(&ctx, &dest, &hashed, Some(&about)).map_err(|error| {
                Error::Delivery {
                    environment: name.clone(),
                    error,
                }
            })?;
            reports.push(TargetReport {
                name: target_name.clone(),
                repo: url.redacted(),
                branch: branch.clone(),
                delivery,
            });
        }
        if !self.oci_targets.is_empty() {
            let registry = pass.registry(name)?;
            let provenance = pass.provenance(resolved);
            for target in self.oci_targets {
                let report = crate::oci::deliver(
                    registry,
                    target,
                    &self.oci_index,
                    &hashed,
                    last,
                    &provenance,
                    settings.delivery.dry_run,
                )
                .map_err(|error| Error::Oci {
                    environment: name.clone(),
                    name: target.name.clone(),
                    error: Box::new(error),
                })?;
                reports.push(TargetReport {
                    name: target.name.clone(),
                    repo: target.location.to_string(),
                    branch: target.tag.clone(),
                    delivery: Delivery::Artifacts(Box::new(report)),
                });
            }
        }
        drop(hashed);
        // Open or update the issues of the isolated failures, close those of earlier ones.
        pass.report_issues(name, targets, &run.failures)?;
        Ok((Outcome::Delivered(reports), Some(delivered)))
    }
}
