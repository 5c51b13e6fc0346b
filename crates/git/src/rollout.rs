//! Progressive rollout in `sync` and `serve`: an environment with a RolloutPolicy gets a
//! change wave by wave, as [`kalypso_core::rollout`] decides, in commits that carry the
//! rollout's state beside `Promoted_Commit_Id` (so any process continues it, and a kill between
//! two steps loses nothing: content and state change in one commit).
//!
//! Each run reads the state from the (first) GitOps branch's head, finds the commit that
//! delivered the last wave (the oldest commit of the first-parent history whose state names
//! the same wave), asks the Deployment Observability Hub how the delivered waves' clusters run
//! that commit ([`WaveGate`]), and delivers the next step with [`Pass::deliver_scoped`]: the
//! reached cluster types from the change, the others kept as the branch has them, and on a
//! rollback the delivered ones rendered from the control-plane commits they ran before.

use std::collections::BTreeSet;

use git2::Oid;
use kalypso_core::rollout::{
    self, ROLLOUT_STATE_PATH, Revision, RolloutState, Status, Step, WaveHealth, Waves,
};

use crate::control_plane::{EnvironmentRef, Resolved, Revisions};
use crate::repo::Repo;
use crate::sync::{EnvReport, Error, Pass, Scope};

/// The name of the state file under `.github/tracking/`.
fn state_file_name() -> &'static str {
    ROLLOUT_STATE_PATH
        .rsplit('/')
        .next()
        .unwrap_or(ROLLOUT_STATE_PATH)
}

/// How many first-parent commits are walked back to find the commit that delivered a wave.
const MAX_WALK: usize = 10_000;

/// What the hub says about the delivered waves' clusters.
pub trait WaveGate {
    /// How the clusters of each of `waves` (cluster types) run GitOps commit `commit` of
    /// `environment` or a later one; `Err` with a message when the hub cannot answer (the
    /// rollout then waits).
    fn health(
        &self,
        environment: &str,
        commit: &str,
        waves: &[BTreeSet<String>],
    ) -> Result<GateAnswer, String>;
}

/// The hub's answer for the delivered waves.
#[derive(Clone, Debug, Default)]
pub struct GateAnswer {
    /// One per wave asked about, in order; `None` when the hub does not know the commit yet.
    pub waves: Option<Vec<WaveHealth>>,
    /// The environment is frozen (who, since when, why): no next wave.
    pub frozen: Option<String>,
}

/// What a rollout run did.
#[derive(Debug)]
pub struct RolloutReport {
    /// The environment.
    pub environment: String,
    /// The state after the run (as on the branch).
    pub state: Option<RolloutState>,
    /// What happened, for people.
    pub message: String,
    /// Cluster types of the delivered waves with no registered cluster (nothing checks them).
    pub unchecked: Vec<String>,
    /// Whether the run delivered.
    pub delivered: bool,
    /// The issue that reports the rollout's failure (`pr` mode, in the run that failed it).
    pub issue: Option<crate::issues::IssueReport>,
}

impl RolloutReport {
    /// Whether the rollout failed (halted or rolled back).
    pub fn failed(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| matches!(s.status, Status::Halted | Status::RolledBack))
    }
}

/// What `kalypso rollout pause|resume|abort` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Stop delivering waves (a progressing rollout).
    Pause,
    /// Go on delivering waves (a paused rollout).
    Resume,
    /// Give the delivered waves their previous content back now (a progressing, paused or
    /// halted rollout).
    Abort,
}

/// The rollout of an environment (`kalypso rollout status`).
#[derive(Debug)]
pub struct RolloutStatus {
    /// The environment.
    pub environment: String,
    /// Its RolloutPolicy.
    pub policy: String,
    /// The state its GitOps branch tracks (`None`: no rollout yet).
    pub state: Option<RolloutState>,
    /// The GitOps commit that delivered the last wave.
    pub wave_commit: Option<String>,
    /// Whether the control plane holds a change the rollout does not run yet (the next sync
    /// starts a new rollout, unless the rollout is paused).
    pub newer_change: bool,
    /// How each delivered wave's clusters run the change (known with the hub, while the
    /// rollout progresses).
    pub health: Option<Vec<WaveHealth>>,
    /// Cluster types of the delivered waves with no registered cluster.
    pub unchecked: Vec<String>,
    /// What the next sync would do, for people.
    pub next: String,
}

/// What the next step of a rollout is, and what it was decided from.
struct Plan {
    waves: Waves,
    branch: BranchState,
    health: Option<Vec<WaveHealth>>,
    step: Step,
    unchecked: Vec<String>,
}

/// A run of an environment that may have a RolloutPolicy.
#[derive(Debug)]
pub struct RolloutRun {
    /// The delivery, when there was one.
    pub report: Option<EnvReport>,
    /// The rollout, when the environment has a RolloutPolicy.
    pub rollout: Option<RolloutReport>,
}

/// The revision of `revisions` as the rollout state writes it.
pub fn revision(revisions: &Revisions) -> Revision {
    Revision {
        main: revisions.main.clone(),
        environment: revisions.environment.clone(),
        bases: revisions.bases.clone(),
        workloads: revisions.workloads.clone(),
    }
}

fn revisions(revision: &Revision) -> Revisions {
    Revisions {
        main: revision.main.clone(),
        environment: revision.environment.clone(),
        workloads: revision.workloads.clone(),
        bases: revision.bases.clone(),
    }
}

/// The environment's RolloutPolicy, if its own branch defines one (`Some(None)`: an invalid
/// one). The namespace is loaded once for this and the run that follows
/// ([`Resolved::with_namespace`]).
pub fn policy_of(resolved: &Resolved) -> Option<Option<Waves>> {
    resolved.with_namespace(|namespace| {
        if !rollout::defined_by_environment(namespace) {
            return None;
        }
        let mut scratch = kalypso_core::Diagnostics::new();
        Some(rollout::waves(namespace, &mut scratch))
    })
}

/// The rollout state of a GitOps branch: at its head, and the commit that delivered the
/// wave the head's state names (with its time, Unix ms).
#[derive(Debug, Default)]
pub struct BranchState {
    /// The state at the head.
    pub state: Option<RolloutState>,
    /// The commit that delivered its last wave.
    pub wave_commit: Option<Oid>,
    /// When that commit was made (Unix ms).
    pub wave_time: Option<i64>,
    /// When the wave's progress deadline started: the wave's delivery, or the last
    /// `kalypso rollout resume` of it (a pause stops the deadline's clock).
    pub deadline_from: Option<i64>,
}

/// Reads the rollout's state from `branch` of `repo` (fetched).
pub fn read_state(repo: &Repo, branch: &str) -> Result<BranchState, crate::repo::Error> {
    let Some(head) = repo.branch(branch)? else {
        return Ok(BranchState::default());
    };
    let read = |commit: Oid| -> Result<Option<RolloutState>, crate::repo::Error> {
        Ok(repo
            .read_file(commit, ROLLOUT_STATE_PATH)?
            .and_then(|bytes| RolloutState::parse(&bytes)))
    };
    let Some(state) = read(head)? else {
        return Ok(BranchState::default());
    };
    let key = state.wave_key();
    let mut wave_commit = head;
    // The oldest commit of the run of not-paused states that ends at the head.
    let mut running_since = (state.status != Status::Paused).then_some(head);
    let mut walked = 0;
    while let Some(parent) = repo.parent_of(wave_commit)? {
        walked += 1;
        if walked > MAX_WALK {
            break;
        }
        let Some(earlier) = read(parent)? else { break };
        if earlier.wave_key() != key {
            break;
        }
        if earlier.status == Status::Paused {
            // Stops the run: the deadline counts from the resume after it.
        } else if running_since == Some(wave_commit) {
            running_since = Some(parent);
        }
        wave_commit = parent;
    }
    let wave_time = repo.commit_time(wave_commit)?.saturating_mul(1000);
    let deadline_from = match running_since {
        Some(commit) => Some(repo.commit_time(commit)?.saturating_mul(1000)),
        None => Some(wave_time),
    };
    Ok(BranchState {
        state: Some(state),
        wave_commit: Some(wave_commit),
        wave_time: Some(wave_time),
        deadline_from,
    })
}

impl Pass<'_> {
    /// Resolves `env` and delivers it: whole when it has no RolloutPolicy (as [`Pass::sync`]),
    /// else the next step of its rollout, asking `gate` (the hub) about the delivered waves;
    /// `now` is the time (Unix ms).
    pub fn sync_rollout(
        &mut self,
        env: &EnvironmentRef,
        gate: Option<&dyn WaveGate>,
        now: i64,
    ) -> Result<RolloutRun, Error> {
        let resolved = self.resolve(env)?;
        self.deliver_rollout(&resolved, gate, now)
    }

    /// [`Pass::sync_rollout`] of an environment resolved.
    pub fn deliver_rollout(
        &mut self,
        resolved: &Resolved,
        gate: Option<&dyn WaveGate>,
        now: i64,
    ) -> Result<RolloutRun, Error> {
        let name = resolved.environment.name.clone();
        let Some(plan) = self.plan_rollout(resolved, gate, now, true)? else {
            return Ok(RolloutRun {
                report: Some(self.deliver(resolved)?),
                rollout: None,
            });
        };
        let failing = matches!(&plan.step, Step::Deliver { state, .. }
            if matches!(state.status, Status::Halted | Status::RolledBack));
        let completing =
            matches!(&plan.step, Step::Deliver { state, .. } if state.status == Status::Complete);
        let mut run = self.carry_out(resolved, plan.step, plan.branch.state, plan.unchecked)?;
        // The run that fails the rollout reports it (in `pr` mode, as an issue). In `pr` mode
        // that run repeats until its pull request is merged; the issue is opened once.
        if failing
            && let Some(rollout) = run.rollout.as_mut()
            && rollout.delivered
            && let Some(state) = &rollout.state
        {
            rollout.issue = self.report_rollout_failure(resolved, state)?;
        }
        // The run that completes a rollout closes the issues of the environment's earlier
        // failed ones (in `pr` mode; it repeats until its pull request is merged, closing
        // nothing more).
        if completing
            && let Some(rollout) = run.rollout.as_mut()
            && rollout.delivered
        {
            rollout.issue = self.close_rollout_failures(resolved)?;
        }
        // A rollout in progress goes on without any input moving: the next sync must not
        // answer "nothing moved" from the delivery state.
        let progressing = run
            .rollout
            .as_ref()
            .and_then(|r| r.state.as_ref())
            .is_some_and(|s| s.status == Status::Progressing);
        if progressing {
            self.mark_rollout_in_progress(&name);
        }
        Ok(run)
    }

    /// What the rollout of `resolved` does next: `None` when the environment has no (valid,
    /// non-empty) RolloutPolicy. With `require_gate`, an environment with a policy and no
    /// `gate` is an error (nothing is delivered, not even the first wave); without, its health
    /// is unknown (`kalypso rollout status` without `--hub`).
    fn plan_rollout(
        &mut self,
        resolved: &Resolved,
        gate: Option<&dyn WaveGate>,
        now: i64,
        require_gate: bool,
    ) -> Result<Option<Plan>, Error> {
        let name = resolved.environment.name.clone();
        // An invalid policy: the run reports its errors and delivers nothing.
        let Some(Some(waves)) = policy_of(resolved) else {
            return Ok(None);
        };
        if waves.waves.is_empty() {
            return Ok(None);
        }
        let refuse = |reason: String| Error::Rollout {
            environment: name.clone(),
            reason,
        };
        if require_gate && gate.is_none() {
            return Err(refuse(no_gate(&waves.policy)));
        }
        let (repo, branch) = self.rollout_branch(resolved)?;
        let at = read_state(&repo, &branch).map_err(|error| Error::Delivery {
            environment: name.clone(),
            error: crate::deliver::Error::Repo(error),
        })?;
        let change = revision(&resolved.revisions);
        let mut unchecked = Vec::new();
        let mut frozen = None;
        let health = match (&at.state, at.wave_commit) {
            (Some(state), Some(commit)) if state.change == change && state.status == Status::Progressing => {
                match gate {
                    None => None,
                    Some(gate) => {
                        let asked: Vec<BTreeSet<String>> = state
                            .waves
                            .iter()
                            .take(state.delivered)
                            .map(|w| w.cluster_types.clone())
                            .collect();
                        match gate.health(&name, &commit.to_string(), &asked) {
                            Ok(answer) => {
                                frozen = answer.frozen;
                                if let Some(waves) = &answer.waves {
                                    unchecked =
                                        waves.iter().flat_map(|w| w.without_clusters.clone()).collect();
                                }
                                answer.waves
                            }
                            Err(message) => {
                                return Err(refuse(format!(
                                    "cannot ask the hub about the rollout: {message}"
                                )));
                            }
                        }
                    }
                }
            }
            _ => None,
        };
        for ct in &unchecked {
            tracing::warn!(environment = %name, cluster_type = %ct, "cluster type of a delivered wave has no registered cluster: nothing checks it");
        }
        let mut step = rollout::next_step(
            &waves,
            &change,
            at.state.as_ref(),
            health.as_deref(),
            at.deadline_from,
            now,
        );
        // A freeze stops the line: the next wave waits (a rollback still goes out).
        if let (Some(frozen), Step::Deliver { state, .. }) = (&frozen, &step)
            && state.status != Status::RolledBack
        {
            let next = state.delivered;
            step = Step::Wait {
                reason: format!("wave {next} waits: the environment is frozen ({frozen})"),
            };
        }
        Ok(Some(Plan {
            waves,
            branch: at,
            health,
            step,
            unchecked,
        }))
    }

    /// The rollout of `env` as its GitOps branch tracks it, with (given the hub) how the
    /// delivered waves' clusters run it and what the next sync would do. Writes nothing.
    pub fn rollout_status(
        &mut self,
        env: &EnvironmentRef,
        gate: Option<&dyn WaveGate>,
        now: i64,
    ) -> Result<RolloutStatus, Error> {
        let resolved = self.resolve(env)?;
        let name = resolved.environment.name.clone();
        let Some(plan) = self.plan_rollout(&resolved, gate, now, false)? else {
            return Err(Error::Rollout {
                environment: name,
                reason: "it has no RolloutPolicy (or an invalid one: kalypso validate names its problems)"
                    .to_owned(),
            });
        };
        let next = match &plan.step {
            Step::Wait { reason } => reason.clone(),
            Step::Stopped { state } => match state.status {
                Status::Paused => {
                    "nothing: the rollout is paused (kalypso rollout resume continues it)".to_owned()
                }
                status => format!("nothing: the rollout is {}", status.as_str()),
            },
            Step::Deliver { summary, .. } => summary.clone(),
        };
        let change = revision(&resolved.revisions);
        Ok(RolloutStatus {
            environment: name,
            policy: plan.waves.policy.clone(),
            newer_change: plan.branch.state.as_ref().is_some_and(|s| s.change != change),
            wave_commit: plan.branch.wave_commit.map(|c| c.to_string()),
            state: plan.branch.state,
            health: plan.health,
            unchecked: plan.unchecked,
            next,
        })
    }

    /// Pauses, resumes or aborts the rollout of `env`, in a commit on its GitOps branch as a
    /// sync delivers (the content of the change's waves as it is, the state changed; an abort
    /// gives the delivered waves their previous content back).
    pub fn control_rollout(&mut self, env: &EnvironmentRef, control: Control) -> Result<RolloutRun, Error> {
        let resolved = self.resolve(env)?;
        let name = resolved.environment.name.clone();
        let refuse = |reason: String| Error::Rollout {
            environment: name.clone(),
            reason,
        };
        if !matches!(policy_of(&resolved), Some(Some(_))) {
            return Err(refuse(
                "it has no RolloutPolicy (or an invalid one: kalypso validate names its problems)".to_owned(),
            ));
        }
        let (repo, branch) = self.rollout_branch(&resolved)?;
        let at = read_state(&repo, &branch).map_err(|error| Error::Delivery {
            environment: name.clone(),
            error: crate::deliver::Error::Repo(error),
        })?;
        let Some(state) = at.state.clone() else {
            return Err(refuse(format!(
                "its GitOps branch {branch} tracks no rollout yet (a sync starts one)"
            )));
        };
        let step = match (control, state.status) {
            (Control::Pause, Status::Progressing) | (Control::Resume, Status::Paused) => {
                let mut next = state.clone();
                next.status = if control == Control::Pause {
                    Status::Paused
                } else {
                    Status::Progressing
                };
                Step::Deliver {
                    render_new: next.reached(),
                    restore: std::collections::BTreeMap::new(),
                    summary: format!(
                        "rollout of {}: {} at {} of {} waves",
                        short(&state.change.environment),
                        if control == Control::Pause {
                            "paused"
                        } else {
                            "resumed"
                        },
                        state.delivered,
                        state.waves.len()
                    ),
                    state: next,
                }
            }
            (Control::Abort, Status::Progressing | Status::Paused | Status::Halted) => {
                rollout::abort(&state, "aborted (kalypso rollout abort)".to_owned())
            }
            (_, status) => {
                let what = match control {
                    Control::Pause => "paused",
                    Control::Resume => "resumed",
                    Control::Abort => "aborted",
                };
                let how = match status {
                    Status::Halted => {
                        "; a newer change starts a new rollout, kalypso rollout abort rolls it back"
                    }
                    Status::Paused => "; kalypso rollout resume continues it, abort rolls it back",
                    Status::Progressing => "; kalypso rollout pause stops it",
                    _ => "",
                };
                return Err(refuse(format!(
                    "the rollout of {} is {}: it cannot be {what}{how}",
                    short(&state.change.environment),
                    status.as_str()
                )));
            }
        };
        // The content of the change's waves as the rollout delivered it, whatever the control
        // plane holds now (a newer change is for the next sync to start).
        let change = self.resolve_pinned(&resolved.environment, &revisions(&state.change))?;
        let run = self.carry_out(&change, step, Some(state), Vec::new());
        // The delivery state recorded the pinned inputs: the next sync reads everything.
        self.mark_rollout_in_progress(&name);
        run
    }

    /// Carries `step` out for `resolved` (the state before: `before`).
    fn carry_out(
        &mut self,
        resolved: &Resolved,
        step: Step,
        before: Option<RolloutState>,
        unchecked: Vec<String>,
    ) -> Result<RolloutRun, Error> {
        let name = resolved.environment.name.clone();
        match step {
            Step::Wait { reason } => Ok(RolloutRun {
                report: None,
                rollout: Some(RolloutReport {
                    environment: name,
                    state: before,
                    message: reason,
                    unchecked,
                    delivered: false,
                    issue: None,
                }),
            }),
            Step::Stopped { state } => {
                let message = match state.status {
                    Status::Paused => {
                        "the rollout is paused (kalypso rollout resume continues it)".to_owned()
                    }
                    _ => format!(
                        "the rollout of {} stopped ({}): {}",
                        short(&state.change.environment),
                        state.status.as_str(),
                        state.failure.clone().unwrap_or_default()
                    ),
                };
                Ok(RolloutRun {
                    report: None,
                    rollout: Some(RolloutReport {
                        environment: name,
                        state: Some(state),
                        message,
                        unchecked,
                        delivered: false,
                        issue: None,
                    }),
                })
            }
            Step::Deliver {
                state,
                render_new,
                restore,
                summary,
            } => {
                let every: BTreeSet<String> = state
                    .waves
                    .iter()
                    .flat_map(|w| w.cluster_types.iter().cloned())
                    .collect();
                let mut previous = Vec::new();
                for (revision, cluster_types) in restore {
                    let at = self.resolve_pinned(&resolved.environment, &revisions(&revision))?;
                    previous.push((at, cluster_types));
                }
                let restored: BTreeSet<String> =
                    previous.iter().flat_map(|(_, cts)| cts.iter().cloned()).collect();
                let keep: Vec<String> = every
                    .iter()
                    .filter(|ct| !render_new.contains(*ct) && !restored.contains(*ct))
                    .cloned()
                    .collect();
                let mut scope = Scope::default()
                    .keeping(keep)
                    .tracking(state_file_name(), state.to_bytes())
                    .rollout_in_progress(state.status == Status::Progressing);
                for (at, cluster_types) in &previous {
                    scope = scope.rendering_from(cluster_types.clone(), at);
                }
                let report = self.deliver_scoped(resolved, &scope)?;
                let delivered = report.is_success();
                Ok(RolloutRun {
                    report: Some(report),
                    rollout: Some(RolloutReport {
                        environment: name,
                        state: Some(state),
                        message: summary,
                        unchecked,
                        delivered,
                        issue: None,
                    }),
                })
            }
        }
    }
}

/// Why an environment with RolloutPolicy `policy` is not delivered without the hub.
fn no_gate(policy: &str) -> String {
    format!(
        "it has RolloutPolicy {policy:?}: its waves advance on the clusters' reports, so give the Deployment \
         Observability Hub (sync: --hub URL --hub-token-file FILE; serve: `hub` in its configuration or --hub; \
         the operator: --hub); nothing was delivered"
    )
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
