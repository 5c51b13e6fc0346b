//! What the hub learns from the control plane itself, beside the GitOps trees: each
//! environment's cluster types with their labels (what a RolloutPolicy's waves select on) and
//! platform config values with the ConfigMap that set each, its RolloutPolicy, and the
//! progressive rollout its GitOps branch tracks.
//!
//! The GitOps tree carries none of the first three, so the hub reads the control plane through
//! the same driver as `kalypso sync` ([`ControlPlane::resolve_pinned`], read-only: the hub never
//! writes the control plane) at the control-plane commits the environment runs: the rollout's
//! change when the branch tracks one (`.github/tracking/Rollout_State` names every commit),
//! else the `Promoted_Commit_Id` of the head with the environment branch's tip. Each reading is
//! kept per commit ([`Observed`]), so a refresh that finds nothing new reads nothing again.
//!
//! The refresher ([`crate::gitops`]) calls [`observe_git`] for every environment on each pass,
//! before it stores the new GitOps commits, so a page that the stored commits make out of date
//! already finds what the control plane says about them.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kalypso_core::explain::ClusterTypeConfig;
use kalypso_core::rollout::{RolloutState, Waves};
use kalypso_core::tree as layout;
use kalypso_git::Cache;
use kalypso_git::control_plane::{ControlPlane, EnvironmentRef, Revisions, WorkloadRepos};
use kalypso_git::repo::{Repo, Transport};

/// What the hub says instead of a cluster type's labels and platform config when no control
/// plane is configured.
pub const NO_CONTROL_PLANE: &str = "Not known to the hub: it reads no control plane \
     (start it with --control-plane REPO to see the cluster types' labels and platform config).";

/// The most control-plane readings kept (each is one environment at one set of commits).
const MAX_MODELS: usize = 256;

/// A cluster type as the control plane defines it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterTypeModel {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its platform config values on their own, with their ConfigMaps
    /// ([`kalypso_core::explain::cluster_type_config`]).
    pub config: Vec<ClusterTypeConfig>,
}

/// An environment as the control plane defines it at some commits.
#[derive(Clone, Debug)]
pub struct EnvModel {
    /// The control-plane `main` commit read.
    pub main_commit: String,
    /// The environment branch's commit read.
    pub environment_commit: String,
    /// Its cluster types.
    pub cluster_types: BTreeMap<String, ClusterTypeModel>,
    /// Its RolloutPolicy, when it has a valid one.
    pub waves: Option<Waves>,
}

/// A reading of the control plane: the model, or why it could not be read.
pub type ModelRead = Result<EnvModel, String>;

/// The rollout a GitOps branch tracks at its head.
#[derive(Clone, Debug)]
pub struct RolloutRead {
    /// The state at the head.
    pub state: RolloutState,
    /// The GitOps commit that delivered the last wave the state names.
    pub wave_commit: Option<String>,
    /// When the wave's progress deadline started (Unix ms): its delivery, or the last resume.
    pub deadline_from: Option<i64>,
}

/// What the hub knows of one environment from its GitOps branch's head and the control plane.
#[derive(Clone, Debug, Default)]
pub struct EnvView {
    /// The head of the GitOps branch read.
    pub head: Option<String>,
    /// The rollout the head tracks.
    pub rollout: Option<RolloutRead>,
    /// The control plane at the commits the environment runs; `None` when no commit is known
    /// (no `Promoted_Commit_Id`).
    pub model: Option<Arc<ModelRead>>,
}

#[derive(Debug, Default)]
struct Inner {
    envs: HashMap<String, EnvView>,
    models: HashMap<String, Arc<ModelRead>>,
}

/// The environments' views, as the last refresh read them, and the control-plane readings
/// by commit.
#[derive(Debug, Default)]
pub struct Observed {
    inner: Mutex<Inner>,
}

impl Observed {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the last refresh read of `environment` (`None`: not read).
    pub fn get(&self, environment: &str) -> Option<EnvView> {
        self.lock().envs.get(environment).cloned()
    }

    fn set(&self, environment: &str, view: EnvView) {
        self.lock().envs.insert(environment.to_owned(), view);
    }

    fn model(&self, key: &str) -> Option<Arc<ModelRead>> {
        self.lock().models.get(key).cloned()
    }

    fn keep_model(&self, key: String, model: Arc<ModelRead>) {
        let mut inner = self.lock();
        if inner.models.len() >= MAX_MODELS {
            // The readings in use stay; the others are read again when asked for.
            let in_use: Vec<*const ModelRead> = inner
                .envs
                .values()
                .filter_map(|v| v.model.as_ref().map(Arc::as_ptr))
                .collect();
            inner.models.retain(|_, m| in_use.contains(&Arc::as_ptr(m)));
        }
        inner.models.insert(key, model);
    }
}

/// Reads `env` of `cp` at `pins` (an empty commit: the branch's tip) into a model.
fn read_model(
    cp: &ControlPlane,
    env: &EnvironmentRef,
    pins: &Revisions,
    cache: &Cache,
    transport: &Transport<'_>,
) -> ModelRead {
    let mut sources = WorkloadRepos::new(cache.clone());
    let resolved = cp
        .resolve_pinned(env, pins, &mut sources, transport)
        .map_err(|e| kalypso_git::redact(&e.to_string()))?;
    let mut diagnostics = kalypso_core::Diagnostics::new();
    let namespace = kalypso_core::load_namespace(&env.name, &resolved.inputs, &mut diagnostics);
    let cluster_types = namespace
        .cluster_types
        .iter()
        .map(|(name, ct)| {
            (
                name.clone(),
                ClusterTypeModel {
                    labels: ct.labels().clone().into_iter().collect(),
                    config: kalypso_core::explain::cluster_type_config(&namespace, ct),
                },
            )
        })
        .collect();
    let waves = kalypso_core::rollout::waves(&namespace, &mut diagnostics);
    Ok(EnvModel {
        main_commit: resolved.revisions.main.clone(),
        environment_commit: resolved.revisions.environment.clone(),
        cluster_types,
        waves,
    })
}

/// The key of a reading of `env` at `pins`.
fn model_key(env: &EnvironmentRef, pins: &Revisions) -> String {
    let mut key = format!("{}\0{}\0{}", env.name, pins.main, pins.environment);
    for (name, commit) in pins.bases.iter().chain(&pins.workloads) {
        key.push('\0');
        key.push_str(name);
        key.push('=');
        key.push_str(commit);
    }
    key
}

/// The model of `env` at `pins`, read once per set of commits.
fn model_at(
    cp: &ControlPlane,
    env: &EnvironmentRef,
    mut pins: Revisions,
    cache: &Cache,
    transport: &Transport<'_>,
    observed: &Observed,
) -> Arc<ModelRead> {
    if pins.environment.is_empty() {
        // The environment branch's tip: its commit is part of what is read.
        match cp.repo().branch(&env.branch) {
            Ok(Some(tip)) => pins.environment = tip.to_string(),
            Ok(None) => {
                return Arc::new(Err(format!(
                    "the control plane has no branch {:?} (environment {})",
                    env.branch, env.name
                )));
            }
            Err(e) => return Arc::new(Err(kalypso_git::redact(&e.to_string()))),
        }
    }
    let key = model_key(env, &pins);
    if let Some(model) = observed.model(&key) {
        return model;
    }
    let model = Arc::new(read_model(cp, env, &pins, cache, transport).map_err(|e| {
        format!(
            "the control plane at main {} could not be read: {e}",
            kalypso_git::control_plane::short(&pins.main)
        )
    }));
    if let Err(e) = model.as_ref() {
        tracing::warn!(environment = %env.name, error = %e, "cannot read the control plane at the commit the environment runs");
    }
    observed.keep_model(key, model.clone());
    model
}

/// Reads what the head of `branch` of `gitops` (fetched) says of environment `env` — the
/// rollout it tracks, the control-plane commit it runs — and the control plane `cp` at those
/// commits, into `observed`. Blocking (git); nothing fails: what cannot be read is said in the
/// view.
pub fn observe_git(
    cp: &ControlPlane,
    env: &EnvironmentRef,
    gitops: &Repo,
    branch: &str,
    cache: &Cache,
    transport: &Transport<'_>,
    observed: &Observed,
) {
    let Ok(Some(head)) = gitops.branch(branch) else {
        observed.set(&env.name, EnvView::default());
        return;
    };
    let rollout = match kalypso_git::rollout::read_state(gitops, branch) {
        Ok(at) => at.state.map(|state| RolloutRead {
            state,
            wave_commit: at.wave_commit.map(|c| c.to_string()),
            deadline_from: at.deadline_from,
        }),
        Err(e) => {
            tracing::warn!(environment = %env.name, error = %kalypso_git::redact(&e.to_string()), "cannot read the rollout state");
            None
        }
    };
    let promoted = gitops
        .read_file(head, layout::PROMOTED_COMMIT_PATH)
        .ok()
        .flatten()
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .filter(|s| !s.is_empty());
    let pins = match (&rollout, promoted) {
        (Some(r), _) => Some(Revisions {
            main: r.state.change.main.clone(),
            environment: r.state.change.environment.clone(),
            workloads: r.state.change.workloads.clone(),
            bases: r.state.change.bases.clone(),
        }),
        (None, Some(main)) => Some(Revisions {
            main,
            ..Revisions::default()
        }),
        (None, None) => None,
    };
    let model = pins.map(|pins| model_at(cp, env, pins, cache, transport, observed));
    observed.set(
        &env.name,
        EnvView {
            head: Some(head.to_string()),
            rollout,
            model,
        },
    );
}

/// For an environment delivered to an OCI registry (no rollout: an artifact is delivered
/// whole): the control plane at `promoted`, the control-plane commit its newest index carries
/// (`None`: keep what was read).
pub fn observe_promoted(
    cp: &ControlPlane,
    env: &EnvironmentRef,
    head: Option<&str>,
    promoted: Option<&str>,
    cache: &Cache,
    transport: &Transport<'_>,
    observed: &Observed,
) {
    let Some(main) = promoted else { return };
    let pins = Revisions {
        main: main.to_owned(),
        ..Revisions::default()
    };
    let model = model_at(cp, env, pins, cache, transport, observed);
    observed.set(
        &env.name,
        EnvView {
            head: head.map(str::to_owned),
            rollout: None,
            model: Some(model),
        },
    );
}
