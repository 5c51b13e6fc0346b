//! `kalypso check-promote`: wait until every cluster that looks at an environment's GitOps
//! branch runs a commit, as the seeds' `checkpromote` workflow does before it promotes the
//! same control-plane commit to the next environment.
//!
//! The clusters report to the Deployment Observability Hub (`kalypso hub`); this command asks
//! the hub's gate until it says compliant (exit 0), a cluster failed (exit 1, naming the
//! cluster and its reconciler's message, without waiting for the others) or the timeout
//! passes (exit 3). With `--commit-status` the control-plane commit gets a commit status
//! on its forge (GitHub, GitLab, Azure DevOps or Gitea) that follows the check: pending,
//! then success, failure or error.
//!
//! With `--into ENV` the hub also evaluates the promotion into ENV (its PromotionPolicy and
//! freezes) and the check passes only when every requirement is met: a requirement that
//! failed (a cluster, a verification check, an invalid policy) fails it at once (exit 1, listing
//! every requirement not met), and one that is not met yet (soak, approvals, a window, a
//! freeze) is waited for like the clusters.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use kalypso_git::control_plane::short;
use kalypso_git::forge::{self, Forge, Provider};
use kalypso_git::github::{CommitStatus, GitHub, StatusState};
use kalypso_git::redact;
use kalypso_hub_api::{ClusterState, PromotionGate, RequirementState};

use super::sync::runtime;
use crate::hub_client::{Gate, HubClient, HubError, Verdict, unlisted_blockers};
use crate::settings::{self, CheckPromote, Global};

/// Exit code when the clusters did not all become compliant in time.
pub(crate) const EXIT_TIMEOUT: u8 = 3;

/// Where commit statuses go, once the control-plane commit is known.
struct StatusReporter {
    forge: Box<dyn Forge>,
    context: String,
    commit: Option<String>,
    last: Option<StatusState>,
    _runtime: tokio::runtime::Runtime,
}

impl StatusReporter {
    /// The reporter `--commit-status` asks for, if it does (credentials are read now).
    fn new(settings: &CheckPromote) -> Result<Option<StatusReporter>> {
        let Some(target) = &settings.commit_status else {
            return Ok(None);
        };
        let settings::CommitStatus {
            url,
            owner,
            repo,
            context,
            github_api_url,
            providers,
        } = target;
        let credentials =
            kalypso_git::auth::Credentials::load(&settings.git.auth).map_err(|e| anyhow!("{e}"))?;
        let runtime = runtime()?;
        let forge: Box<dyn Forge> = if providers.provider_of(url) == Provider::GitHub {
            Box::new(
                GitHub::new(
                    runtime.handle().clone(),
                    github_api_url,
                    credentials.token(),
                    owner,
                    repo,
                    settings.git.retry,
                )
                .map_err(|e| anyhow!("{e}"))?,
            )
        } else {
            forge::connect(
                url,
                providers,
                credentials.token(),
                settings.git.retry,
                runtime.handle(),
            )
            .map_err(|e| anyhow!("--control-plane: {e}"))?
            .ok_or_else(|| anyhow!("--control-plane: {}: not a repository on a forge", url.redacted()))?
        };
        Ok(Some(StatusReporter {
            forge,
            context: context.clone(),
            commit: None,
            last: None,
            _runtime: runtime,
        }))
    }

    /// Sets `state` on the control-plane commit, once it is known; a failure to set it is a
    /// warning, never the check's result.
    fn set(&mut self, gate: Option<&Gate>, state: StatusState, description: &str) {
        if let Some(commit) = gate.and_then(|g| g.control_plane_commit.clone()) {
            self.commit = Some(commit);
        }
        let Some(commit) = &self.commit else {
            return;
        };
        if self.last == Some(state) && state == StatusState::Pending {
            return;
        }
        let status = CommitStatus {
            state,
            context: self.context.clone(),
            description: description.to_owned(),
            target_url: None,
        };
        match self.forge.set_commit_status(commit, &status) {
            Ok(()) => self.last = Some(state),
            Err(e) => eprintln!(
                "warning: cannot set the commit status of {}: {}",
                short(commit),
                redact(&e.to_string())
            ),
        }
    }
}

pub(crate) fn check_promote(settings: &CheckPromote, global: &Global) -> Result<ExitCode> {
    let client = HubClient::new(&settings.hub.url, settings.hub.token_file.as_deref())?;
    let mut status = StatusReporter::new(settings)?;
    let started = Instant::now();
    let deadline = started + settings.timeout;
    let mut last_line = String::new();
    let mut warned_types = false;
    let mut last: Option<Gate> = None;
    loop {
        match client.gate(&settings.env, &settings.commit, settings.into.as_deref()) {
            Ok(gate) if gate.promotion.is_some() && gate.verdict != Verdict::UnknownCommit => {
                let promotion = gate
                    .promotion
                    .as_ref()
                    .map_or_else(|| unreachable!(), Clone::clone);
                if promotion.may_promote {
                    if let Some(s) = &mut status {
                        s.set(
                            Some(&gate),
                            StatusState::Success,
                            &format!("May be promoted into {}", promotion.into),
                        );
                    }
                    if !global.quiet {
                        println!(
                            "{}: may be promoted into {} ({}) after {}",
                            settings.env,
                            promotion.into,
                            summaries(&promotion, false).join(", "),
                            kalypso_core::duration::format(round_seconds(started.elapsed())),
                        );
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                if promotion
                    .requirements
                    .iter()
                    .any(|r| r.state == RequirementState::Failed)
                {
                    eprintln!(
                        "error: {} may not be promoted into {}: {}",
                        settings.env,
                        promotion.into,
                        summaries(&promotion, true).join("; ")
                    );
                    for c in gate.clusters.iter().filter(|c| c.state == ClusterState::Failed) {
                        eprintln!(
                            "error: cluster {} ({}) in {} failed: {}",
                            c.name,
                            c.cluster_type,
                            settings.env,
                            c.message().unwrap_or("(no message)")
                        );
                    }
                    if let Some(s) = &mut status {
                        s.set(
                            Some(&gate),
                            StatusState::Failure,
                            &format!("May not be promoted into {}", promotion.into),
                        );
                    }
                    return Ok(ExitCode::FAILURE);
                }
                let line = format!(
                    "{}: not yet promotable into {}: {}",
                    settings.env,
                    promotion.into,
                    summaries(&promotion, true).join("; ")
                );
                if line != last_line && !global.quiet {
                    eprintln!("{line}");
                }
                last_line = line;
                if let Some(s) = &mut status {
                    s.set(
                        Some(&gate),
                        StatusState::Pending,
                        &format!("Waiting to promote into {}", promotion.into),
                    );
                }
                last = Some(gate);
            }
            Ok(gate) => {
                if !warned_types
                    && !gate.cluster_types_without_clusters.is_empty()
                    && gate.verdict != Verdict::UnknownCommit
                {
                    eprintln!(
                        "warning: no registered cluster reports for cluster type(s) {} of {}: nothing checks them",
                        gate.cluster_types_without_clusters.join(", "),
                        settings.env
                    );
                    warned_types = true;
                }
                match gate.verdict {
                    Verdict::Compliant => {
                        let line = format!(
                            "{}: {}/{} clusters compliant with GitOps commit {}{} after {}",
                            settings.env,
                            gate.compliant,
                            gate.total,
                            short(gate.gitops_commit.as_deref().unwrap_or(&settings.commit)),
                            control_plane_note(&gate),
                            kalypso_core::duration::format(round_seconds(started.elapsed())),
                        );
                        if let Some(s) = &mut status {
                            s.set(
                                Some(&gate),
                                StatusState::Success,
                                &format!(
                                    "Deployed to {}: {}/{} clusters",
                                    settings.env, gate.compliant, gate.total
                                ),
                            );
                        }
                        if !global.quiet {
                            println!("{line}");
                        }
                        return Ok(ExitCode::SUCCESS);
                    }
                    Verdict::Failed => {
                        let failed: Vec<_> = gate
                            .clusters
                            .iter()
                            .filter(|c| c.state == ClusterState::Failed)
                            .collect();
                        for c in &failed {
                            eprintln!(
                                "error: cluster {} ({}) in {} failed to apply GitOps commit {}: {}",
                                c.name,
                                c.cluster_type,
                                settings.env,
                                short(
                                    c.revision
                                        .as_deref()
                                        .or(gate.gitops_commit.as_deref())
                                        .unwrap_or(&settings.commit)
                                ),
                                c.message().unwrap_or("(no message)")
                            );
                        }
                        if let Some(rollout) = &gate.rollout {
                            eprintln!(
                                "error: the progressive rollout of GitOps commit {} in {} is {rollout}: its later waves do not run it (`kalypso rollout status` tells more)",
                                short(gate.gitops_commit.as_deref().unwrap_or(&settings.commit)),
                                settings.env,
                            );
                        }
                        if let Some(s) = &mut status {
                            let names: Vec<&str> = failed.iter().map(|c| c.name.as_str()).collect();
                            s.set(
                                Some(&gate),
                                StatusState::Failure,
                                &format!("Failed in {}: {}", settings.env, names.join(", ")),
                            );
                        }
                        return Ok(ExitCode::FAILURE);
                    }
                    // Pending, unknown, or a verdict this kalypso does not know yet: wait.
                    _ => {
                        let line = progress_line(&settings.env, &settings.commit, &gate);
                        if line != last_line && !global.quiet {
                            eprintln!("{line}");
                        }
                        last_line = line;
                        if let Some(s) = &mut status {
                            s.set(
                                Some(&gate),
                                StatusState::Pending,
                                &format!("Waiting for the clusters of {}", settings.env),
                            );
                        }
                        last = Some(gate);
                    }
                }
            }
            Err(HubError::Transient(message)) => {
                if message != last_line {
                    eprintln!(
                        "warning: {message}; asking again in {}",
                        kalypso_core::duration::format(settings.interval)
                    );
                }
                last_line = message;
            }
            Err(HubError::Fatal(message)) => {
                if let Some(s) = &mut status {
                    s.set(
                        last.as_ref(),
                        StatusState::Error,
                        &format!("Cannot check {}", settings.env),
                    );
                }
                return Err(anyhow!("{message}"));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            let waiting = last
                .as_ref()
                .map(|g| match &g.promotion {
                    Some(p) if g.verdict != Verdict::UnknownCommit => format!(
                        "{}: not yet promotable into {}: {}",
                        settings.env,
                        p.into,
                        summaries(p, true).join("; ")
                    ),
                    _ => progress_line(&settings.env, &settings.commit, g),
                })
                .unwrap_or_else(|| format!("{}: the hub at {} never answered", settings.env, client.base()));
            eprintln!(
                "error: timed out after {}: {waiting}",
                kalypso_core::duration::format(settings.timeout)
            );
            if let Some(s) = &mut status {
                s.set(
                    last.as_ref(),
                    StatusState::Error,
                    &format!("Timed out waiting for {}", settings.env),
                );
            }
            return Ok(ExitCode::from(EXIT_TIMEOUT));
        }
        std::thread::sleep(settings.interval.min(deadline - now));
    }
}

/// `7/9 clusters compliant, waiting for drone-2, large-1`.
fn progress_line(env: &str, commit: &str, gate: &Gate) -> String {
    if gate.verdict == Verdict::UnknownCommit {
        return format!(
            "{env}: the hub does not know commit {} yet, waiting",
            short(commit)
        );
    }
    if let Some(rollout) = &gate.rollout {
        return format!(
            "{env}: the progressive rollout of {} is {rollout}, waiting until it reaches every wave",
            short(gate.gitops_commit.as_deref().unwrap_or(commit))
        );
    }
    let waiting: Vec<String> = gate
        .clusters
        .iter()
        .filter(|c| c.state != ClusterState::Compliant)
        .map(|c| match c.state {
            ClusterState::Reconciling => c.name.clone(),
            other => format!("{} ({other})", c.name),
        })
        .collect();
    let more = unlisted_blockers(gate);
    format!(
        "{env}: {}/{} clusters compliant with {}, waiting for {}{}",
        gate.compliant,
        gate.total,
        short(gate.gitops_commit.as_deref().unwrap_or(commit)),
        if waiting.is_empty() {
            "the first reports".to_owned()
        } else {
            waiting.join(", ")
        },
        if more > 0 && !waiting.is_empty() {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )
}

/// The requirements' summaries: only those not met (`unmet`), or all.
pub(crate) fn summaries(promotion: &PromotionGate, unmet: bool) -> Vec<String> {
    promotion
        .requirements
        .iter()
        .filter(|r| !unmet || r.state != RequirementState::Met)
        .map(|r| r.summary.clone())
        .collect()
}

fn control_plane_note(gate: &Gate) -> String {
    gate.control_plane_commit
        .as_deref()
        .map(|c| format!(" (control plane {})", short(c)))
        .unwrap_or_default()
}

fn round_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_hub_api::GateCluster;

    fn cluster(name: &str, state: ClusterState) -> GateCluster {
        GateCluster {
            name: name.into(),
            cluster_type: "drone".into(),
            state,
            revision: None,
            message: String::new(),
        }
    }

    #[test]
    fn progress_names_the_clusters_still_waited_for() {
        let gate = Gate {
            environment: "dev".into(),
            gitops_commit: Some("0123456789abcdef".into()),
            control_plane_commit: None,
            verdict: Verdict::Pending,
            compliant: 1,
            total: 3,
            clusters: vec![
                cluster("drone-1", ClusterState::Compliant),
                cluster("drone-2", ClusterState::Reconciling),
                cluster("large-1", ClusterState::Behind),
            ],
            cluster_types_without_clusters: vec![],
            rollout: None,
            promotion: None,
        };
        assert_eq!(
            progress_line("dev", "x", &gate),
            "dev: 1/3 clusters compliant with 0123456789ab, waiting for drone-2, large-1 (behind)"
        );
        // The hub lists the first blockers only: the others are counted.
        let gate = Gate {
            total: 2500,
            compliant: 1000,
            ..gate
        };
        assert_eq!(
            progress_line("dev", "x", &gate),
            "dev: 1000/2500 clusters compliant with 0123456789ab, waiting for drone-2, large-1 (behind) and 1498 more"
        );
    }
}
