//! `--source git`: no Flux. Each Environment names its control plane (`spec.controlPlane`:
//! repository, branch, path); the operator reads it from git and delivers it with
//! `kalypso-git`'s syncer — the same code as `kalypso serve` — every poll period, and reports
//! the outcome as the Environment's `Ready` condition.
//!
//! Nothing is applied into environment namespaces in this mode: the control plane never
//! becomes Kubernetes objects, so the scheduler controller has nothing to watch and does not
//! run. What the Environment gains is Kubernetes' own leader election, status, Events and
//! scaling of the daemon.
//!
//! An Environment whose branch has a RolloutPolicy is delivered wave by wave, as `kalypso
//! serve` does ([`kalypso_git::Pass::deliver_rollout`], the hub of `--hub` as the gate): each
//! reconcile is one step, requeued every poll period while the rollout progresses; its
//! `Ready` condition says where the rollout is (`RolloutProgressing`, `RolloutPaused`,
//! `RolloutComplete`, or `RolloutFailed` naming the wave, the clusters and Flux's messages).
//! Without `--hub` such an Environment is an error (nothing is delivered).

use std::sync::Arc;
use std::time::Duration;

use kalypso_api::Environment;
use kalypso_core::rollout::Status;
use kalypso_git::hub::HubGate;
use kalypso_git::rollout::{RolloutRun, WaveGate};
use kalypso_git::sync::{Error as SyncError, Outcome, Syncer};
use kalypso_git::{EnvReport, EnvironmentRef, RepoUrl};
use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::Shared;
use crate::conditions::Desired;

/// Why an Environment could not be synchronised.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Its control-plane URL is invalid.
    #[error("Environment {name}: spec.controlPlane.repo: {message}")]
    Url {
        /// The Environment.
        name: String,
        /// Why.
        message: String,
    },
    /// Reading, rendering or delivering failed.
    #[error("Environment {name}: {source}")]
    Sync {
        /// The Environment.
        name: String,
        /// The syncer's error.
        #[source]
        source: SyncError,
    },
    /// The sync thread failed (a bug).
    #[error("Environment {name}: the sync thread failed")]
    Thread {
        /// The Environment.
        name: String,
    },
    /// The status could not be written.
    #[error("cannot write the status of Environment {name}: {source}")]
    Status {
        /// The Environment.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl Error {
    /// The variant's name, for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Url { .. } => "Url",
            Error::Sync { .. } => "Sync",
            Error::Thread { .. } => "Thread",
            Error::Status { .. } => "Status",
        }
    }
}

/// The controller's name.
pub const CONTROLLER: &str = "environment-git";

/// What the git-source controller needs.
pub struct Context {
    /// Client, events, metrics.
    pub shared: Shared,
    /// Reads control planes and delivers.
    pub syncer: Arc<Syncer>,
    /// How often each environment is synchronised.
    pub poll: Duration,
    /// How long to wait after a failure.
    pub retry_after: Duration,
    /// The gate of progressive rollouts (`--hub`).
    pub hub: Option<Arc<HubGate>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// The environment an Environment object describes (its branch defaults to its name).
pub fn environment_ref(env: &Environment) -> EnvironmentRef {
    let cp = &env.spec.control_plane;
    EnvironmentRef {
        name: env.name_any(),
        branch: if cp.branch.is_empty() {
            env.name_any()
        } else {
            cp.branch.clone()
        },
        path: cp.path.clone(),
        repo: cp.repo.clone(),
    }
}

/// The `Ready` condition that a sync's report gives: sentences, one per GitOps repository.
pub fn condition(report: &EnvReport) -> Desired {
    match &report.outcome {
        Outcome::Delivered(targets) => {
            let mut message = format!(
                "{} rendered from {}.",
                plural(report.assignments, "assignment"),
                report.revisions
            );
            for t in targets {
                message.push_str(&format!(
                    " GitOpsRepo {} ({} branch {}): {}.",
                    t.name, t.repo, t.branch, t.delivery
                ));
            }
            Desired::ready("Delivered", message)
        }
        Outcome::Failed { failures, .. } if report.is_held() => Desired::not_ready(
            crate::desired::MASS_DELETION_HELD,
            failures
                .iter()
                .map(|f| f.message.clone())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Outcome::Failed { failures, .. } => Desired::failed(
            failures
                .iter()
                .map(|f| f.message.clone())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The `Ready` condition of one step of an Environment with a RolloutPolicy, or of a whole
/// delivery without one.
pub fn run_condition(run: &RolloutRun) -> Desired {
    let Some(rollout) = &run.rollout else {
        return match &run.report {
            Some(report) => condition(report),
            None => Desired::ready("Delivered", "nothing to deliver"),
        };
    };
    // A wave whose delivery failed (a render error, a held deletion) says so.
    if let Some(report) = &run.report
        && !report.is_success()
    {
        return condition(report);
    }
    let message = kalypso_git::redact(&rollout.message);
    let status = rollout.state.as_ref().map(|s| s.status);
    let waves = rollout
        .state
        .as_ref()
        .map(|s| format!(" ({} of {} waves delivered)", s.delivered, s.waves.len()))
        .unwrap_or_default();
    let delivery = run
        .report
        .as_ref()
        .map(|r| format!(" {}", condition(r).message))
        .unwrap_or_default();
    match status {
        Some(Status::Halted | Status::RolledBack) => {
            let mut text = format!("Rollout {}{waves}: {message}", status.map_or("", Status::as_str));
            if let Some(issue) = &rollout.issue {
                for n in issue.created.iter().chain(&issue.updated) {
                    text.push_str(&format!(" (reported in issue #{n})"));
                }
            }
            Desired::not_ready("RolloutFailed", text)
        }
        Some(Status::Paused) => Desired::ready("RolloutPaused", format!("{message}{waves}.{delivery}")),
        Some(Status::Complete) => Desired::ready("RolloutComplete", format!("{message}{waves}.{delivery}")),
        _ => Desired::ready("RolloutProgressing", format!("{message}{waves}.{delivery}")),
    }
}

/// One reconcile's blocking work: read `env`'s control plane and deliver it, wave by wave
/// when it has a RolloutPolicy (asking `hub`; `now`, Unix ms, is the rollout's clock).
pub fn sync_environment(
    syncer: &Syncer,
    url: &RepoUrl,
    env: &EnvironmentRef,
    allow_mass_deletion: bool,
    hub: Option<&dyn WaveGate>,
    now: i64,
) -> Result<RolloutRun, SyncError> {
    let mut pass = syncer.pass(url)?;
    if allow_mass_deletion {
        pass.allow_mass_deletion(&env.name);
    }
    pass.sync_rollout(env, hub, now)
}

/// Synchronises one Environment.
pub async fn reconcile(env: Arc<Environment>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.shared.metrics.reconcile(CONTROLLER);
    let name = env.name_any();
    let url = RepoUrl::parse(&env.spec.control_plane.repo).map_err(|e| Error::Url {
        name: name.clone(),
        message: e.to_string(),
    })?;
    let env_ref = environment_ref(&env);
    let syncer = ctx.syncer.clone();
    let allowed = crate::desired::allows_mass_deletion(&env);
    let hub = ctx.hub.clone();
    let result = tokio::task::spawn_blocking(move || {
        let gate = hub.as_deref().map(|h| h as &dyn WaveGate);
        sync_environment(&syncer, &url, &env_ref, allowed, gate, kalypso_git::hub::now_ms())
    })
    .await
    .map_err(|_| Error::Thread { name: name.clone() })?;
    let current = env.status.clone().unwrap_or_default().conditions;
    let (desired, outcome) = match result {
        Ok(run) => {
            if let Some(rollout) = &run.rollout
                && rollout.failed()
                && rollout.delivered
            {
                tracing::error!(environment = %name, "rollout failed: {}", kalypso_git::redact(&rollout.message));
            }
            (run_condition(&run), Ok(()))
        }
        Err(source) => (
            Desired::failed(source.to_string()),
            Err(Error::Sync {
                name: name.clone(),
                source,
            }),
        ),
    };
    ctx.shared
        .set_conditions(env.as_ref(), &current, &[desired], &[])
        .await
        .map_err(|source| Error::Status {
            name: name.clone(),
            source,
        })?;
    outcome?;
    Ok(Action::requeue(ctx.poll))
}

/// After a failure: count it and try again later.
pub fn error_policy(env: Arc<Environment>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(environment = %env.name_any(), error = %error, "sync failed");
    ctx.shared.metrics.failure(CONTROLLER, error.metric_label());
    Action::requeue(ctx.retry_after)
}

#[cfg(test)]
mod tests {
    use kalypso_api::{EnvironmentSpec, RepositoryRef};
    use kalypso_core::Diagnostics;
    use kalypso_core::run::Failure;

    use super::*;

    fn report(outcome: Outcome) -> EnvReport {
        EnvReport {
            environment: "dev".into(),
            revisions: Default::default(),
            assignments: 3,
            rendered: 3,
            diagnostics: Diagnostics::new(),
            isolated: Default::default(),
            isolated_failures: Vec::new(),
            mass_deletion: None,
            outcome,
        }
    }

    #[test]
    fn outcomes_become_conditions() {
        let ok = condition(&report(Outcome::Delivered(vec![])));
        assert!(ok.status);
        assert_eq!(ok.reason, "Delivered");
        assert!(
            ok.message.starts_with("3 assignments rendered from main"),
            "{}",
            ok.message
        );
        let committed = condition(&report(Outcome::Delivered(vec![
            kalypso_git::sync::TargetReport {
                name: "dev".into(),
                repo: "https://github.com/org/gitops".into(),
                branch: "dev".into(),
                delivery: kalypso_git::Delivery::DryRun {
                    mode: kalypso_git::Mode::Push,
                    changes: kalypso_git::deliver::Changes::default(),
                },
            },
        ])));
        assert!(
            committed
                .message
                .ends_with("GitOpsRepo dev (https://github.com/org/gitops branch dev): would deliver in push mode (0 added, 0 changed, 0 deleted)."),
            "{}",
            committed.message
        );
        assert!(
            !committed.message.contains('{'),
            "no debug text: {}",
            committed.message
        );
        let failed = condition(&report(Outcome::Failed {
            failures: vec![Failure {
                assignment: None,
                message: "error[yaml]: dev/ct.yaml:3: bad".into(),
            }],
            issues: None,
        }));
        assert!(!failed.status);
        assert_eq!(failed.reason, "UpdateFailed");
        assert!(failed.message.contains("dev/ct.yaml:3"));
    }

    #[test]
    fn the_branch_defaults_to_the_environment_name() {
        let mut env = Environment::new(
            "dev",
            EnvironmentSpec {
                control_plane: RepositoryRef {
                    repo: "https://github.com/org/cp".into(),
                    branch: String::new(),
                    path: "clusters".into(),
                },
            },
        );
        assert_eq!(environment_ref(&env).branch, "dev");
        env.spec.control_plane.branch = "env/dev".into();
        let r = environment_ref(&env);
        assert_eq!((r.branch.as_str(), r.path.as_str()), ("env/dev", "clusters"));
    }
}
