//! One synchronisation pass: fetch the control plane, and for each environment read its
//! inputs, render them, report failures, and deliver the tree to its GitOps repositories.
//!
//! [`Syncer`] holds what lasts across passes (settings, credentials, the cache); a [`Pass`]
//! holds what one pass fetched, so that a repository used by several environments is
//! fetched once. `kalypso sync` runs one pass; `kalypso serve` runs one per poll and uses
//! [`Pass::resolve`] and [`Pass::deliver`] separately, to skip environments whose input
//! commits did not change.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use std::collections::BTreeSet;

use kalypso_core::placement::{CurrentAssignment, ExtenderClient, current_from_folders};
use kalypso_core::run::{Failure, Isolation, RenderMemo, RunContext};
use kalypso_core::{Code, Diagnostics};
use kalypso_template::Engine;
use tokio::runtime::Handle;

use crate::auth::{self, AuthSettings, Credentials};
use crate::control_plane::{
    self, ControlPlane, DEFAULT_MAIN_BRANCH, EnvironmentRef, Resolved, Revisions, Sources,
};
use crate::deliver::{self, Context, Delivery, DeliverySettings, Destination, Mode};
use crate::extenders::HttpExtenders;
use crate::issues::{self, IssueReport};
use crate::repo::{Cache, Repo, Transport};
use crate::retry::RetryPolicy;
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
        error: crate::github::Error,
    },
    /// The environment names no GitOps repository.
    #[error("environment {environment} has no GitOpsRepo: nothing to deliver to")]
    NoGitOpsRepo {
        /// The environment.
        environment: String,
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
    /// Every diagnostic.
    pub diagnostics: Diagnostics,
    /// The WorkloadRegistrations whose workloads failed: their folders kept what was last
    /// delivered, and the rest of the environment was delivered (see [`Isolation`]).
    pub isolated: BTreeSet<String>,
    /// The failures of the isolated registrations (reported as issues in `pr` mode).
    pub isolated_failures: Vec<Failure>,
    /// The outcome.
    pub outcome: Outcome,
}

impl EnvReport {
    /// Whether the environment was delivered, with no workload failing.
    pub fn is_success(&self) -> bool {
        matches!(self.outcome, Outcome::Delivered(_)) && self.isolated.is_empty()
    }
}

/// What lasts across passes.
#[derive(Debug)]
pub struct Syncer {
    settings: Settings,
    credentials: Credentials,
    cache: Cache,
    runtime: Handle,
    /// The last render of each environment, so that later passes re-render only the
    /// assignments whose inputs changed.
    memos: Mutex<HashMap<String, RenderMemo>>,
}

impl Syncer {
    /// Loads credentials. GitHub calls will run on `runtime` (a multi-threaded one: calls
    /// block on it from the syncing thread).
    pub fn new(settings: Settings, runtime: Handle) -> Result<Syncer, Error> {
        let credentials = Credentials::load(&settings.auth)?;
        Ok(Syncer {
            cache: Cache::new(&settings.cache_dir),
            settings,
            credentials,
            runtime,
            memos: Mutex::default(),
        })
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Starts a pass: fetches the control plane.
    pub fn pass(&self, control_plane: &RepoUrl) -> Result<Pass<'_>, Error> {
        let transport = Transport::new(&self.credentials, self.settings.retry);
        let control_plane =
            ControlPlane::open(control_plane, &self.cache, &transport, &self.settings.main_branch)?;
        Ok(Pass {
            syncer: self,
            sources: Sources::new(self.cache.clone()),
            transport,
            control_plane,
        })
    }
}

/// One pass over a fetched control plane.
#[derive(Debug)]
pub struct Pass<'s> {
    syncer: &'s Syncer,
    transport: Transport<'s>,
    control_plane: ControlPlane,
    sources: Sources,
}

impl Pass<'_> {
    /// The environments named (all when `names` is empty).
    pub fn environments(&self, names: &[String]) -> Result<Vec<EnvironmentRef>, Error> {
        Ok(self.control_plane.select(names)?)
    }

    /// Reads `env`'s inputs (fetching its workload repositories once per pass).
    pub fn resolve(&mut self, env: &EnvironmentRef) -> Result<Resolved, Error> {
        Ok(self
            .control_plane
            .resolve(env, &mut self.sources, &self.transport)?)
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

    /// Renders `resolved` and delivers it, or reports why it cannot be.
    pub fn deliver(&self, resolved: &Resolved) -> Result<EnvReport, Error> {
        let name = resolved.environment.name.clone();
        let span = tracing::info_span!("environment", environment = %name);
        let _enter = span.enter();
        let settings = &self.syncer.settings;
        let targets = self.targets(resolved)?;
        let run = {
            let mut memos = self.syncer.memos.lock().unwrap_or_else(PoisonError::into_inner);
            let memo = memos.entry(name.clone()).or_default();
            // Steady keeps targets where the last pass of this process placed them, or, on a
            // process's first pass, where the GitOps branch has them.
            let remembered = memo.current_assignment();
            let current = || {
                if !remembered.is_empty() {
                    return remembered.clone();
                }
                targets
                    .first()
                    .map(|(_, url, branch, _)| self.delivered_assignment(url, branch))
                    .unwrap_or_default()
            };
            let engine = Engine::from_env();
            let engine_error = engine.as_ref().err().cloned();
            let engine = engine.unwrap_or_else(|_| Engine::new());
            let context = RunContext {
                current: &current,
                extenders: &*self.syncer.settings.extenders.0,
                isolation: Isolation::Registration,
                ..RunContext::new(&engine)
            };
            let mut run = kalypso_core::run::run(&name, &resolved.inputs, &context, memo);
            if let Some(e) = engine_error {
                run.block(kalypso_core::Diagnostic::error(Code::SprigVersion, e));
            }
            run
        };
        tracing::debug!(
            assignments = run.assignments(),
            rendered = run.rendered_now,
            "rendered (the other assignments are unchanged since the last pass)"
        );
        let ctx = Context {
            cache: &self.syncer.cache,
            transport: &self.transport,
            credentials: &self.syncer.credentials,
            settings: &settings.delivery,
            runtime: &self.syncer.runtime,
        };
        // Issues go to the first GitOps repository, as in the original, in `pr` mode only.
        let issue_repo = targets
            .first()
            .filter(|(_, _, _, mode)| *mode == Mode::Pr && !settings.delivery.dry_run)
            .map(|(_, url, _, _)| url.clone());
        let report_issues = |failures: &[Failure]| -> Result<Option<IssueReport>, Error> {
            let Some(url) = &issue_repo else {
                return Ok(None);
            };
            let github = ctx.github(url).map_err(|error| Error::Delivery {
                environment: name.clone(),
                error,
            })?;
            issues::apply(&github, &name, failures)
                .map(Some)
                .map_err(|error| Error::Issues {
                    environment: name.clone(),
                    error,
                })
        };
        let assignments = run.assignments();
        if run.is_blocked() {
            let issues = report_issues(&run.failures)?;
            return Ok(EnvReport {
                environment: name.clone(),
                revisions: resolved.revisions.clone(),
                assignments,
                diagnostics: run.diagnostics,
                isolated: BTreeSet::new(),
                isolated_failures: Vec::new(),
                outcome: Outcome::Failed {
                    failures: run.failures,
                    issues,
                },
            });
        }
        let content = &run.rendered.content;
        let mut reports = Vec::new();
        for (target_name, url, branch, mode) in &targets {
            let dest = Destination {
                url,
                branch,
                mode: *mode,
            };
            let about = deliver::Provenance {
                environment: name.clone(),
                main: resolved.revisions.main.clone(),
                environment_commit: resolved.revisions.environment.clone(),
                workloads: resolved.revisions.workloads.len(),
            };
            let delivery = deliver::deliver_with(&ctx, &dest, content, Some(&about)).map_err(|error| {
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
        // Open or update the issues of the isolated failures, close those of earlier ones.
        report_issues(&run.failures)?;
        Ok(EnvReport {
            environment: name.clone(),
            revisions: resolved.revisions.clone(),
            assignments,
            diagnostics: run.diagnostics,
            isolated: run.isolated,
            isolated_failures: run.failures,
            outcome: Outcome::Delivered(reports),
        })
    }

    /// Where the GitOps branch `branch` of `url` has each deployment target (nothing when it
    /// cannot be read: placement then starts afresh, and says so in the log).
    fn delivered_assignment(&self, url: &RepoUrl, branch: &str) -> CurrentAssignment {
        let read = || -> Result<CurrentAssignment, crate::repo::Error> {
            let repo = Repo::open_mirror(url, &self.syncer.cache)?;
            repo.fetch_branches(&self.transport, &[branch], &[])?;
            let folders = match repo.branch(branch)? {
                Some(head) => repo.target_folders(head)?,
                None => Vec::new(),
            };
            Ok(current_from_folders(
                folders.iter().map(|(ct, dt)| (ct.as_str(), dt.as_str())),
            ))
        };
        read().unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot read the GitOps branch for Steady placement; placing afresh");
            CurrentAssignment::new()
        })
    }

    /// The GitOps destinations of `resolved`: (name, repository, branch, mode).
    fn targets(&self, resolved: &Resolved) -> Result<Vec<(String, RepoUrl, String, Mode)>, Error> {
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
                Ok((g.name.clone(), url, g.branch.clone(), mode))
            })
            .collect()
    }
}
