//! `kalypso promote`: pin a main-branch commit on an environment branch (its BaseRepo
//! `main`'s `spec.commit`, in `base-repo.yaml`), which makes the next sync deliver that
//! commit's templates and registrations to the environment.
//!
//! `--from ENV` promotes what ENV runs: the control-plane commit its GitOps branch was
//! rendered from. With `--hub`, the hub's gate must say that every cluster of ENV runs that
//! GitOps commit, or nothing is promoted.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use kalypso_git::control_plane::short;
use kalypso_git::promote::{self, Promotion, Request};
use kalypso_git::repo::Transport;
use kalypso_git::{Cache, RepoUrl, redact};
use kalypso_hub_api::ClusterState;

use crate::hub_client::{HubClient, Verdict};
use crate::settings::{Global, Promote, PromoteFrom, PromotedCommit};

pub(crate) fn promote(settings: &Promote, global: &Global) -> Result<ExitCode> {
    let url = &settings.control_plane.url;
    let credentials = kalypso_git::auth::Credentials::load(&settings.git.auth).map_err(|e| anyhow!("{e}"))?;
    let transport = Transport::new(&credentials, settings.git.retry);
    let cache = Cache::new(settings.git.cache_dir());
    let commit = match &settings.commit {
        PromotedCommit::From(from) => Some(promoted_by(settings, from, url, &cache, &transport, global)?),
        PromotedCommit::Given(commit) => commit.clone(),
    };
    let request = Request {
        environment: settings.env.clone(),
        commit,
        author: settings.author.clone(),
        message: settings.message.clone(),
    };
    let result = promote::promote(url, &settings.git.main_branch, &cache, &transport, &request)
        .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    if !global.quiet {
        match result {
            Promotion::AlreadyPromoted { commit, file } => println!(
                "{}: already at {} ({file}); nothing to do",
                settings.env,
                short(&commit.to_string())
            ),
            Promotion::Promoted {
                commit,
                file,
                head,
                previous,
            } => println!(
                "{}: promoted {}{} in {file}; commit {} on the environment branch of {url}",
                settings.env,
                short(&commit.to_string()),
                previous
                    .map(|p| format!(" (was {})", short(&p)))
                    .unwrap_or_default(),
                short(&head.to_string()),
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The control-plane commit environment `from` delivered, checked against the hub when one
/// is given.
fn promoted_by(
    settings: &Promote,
    source: &PromoteFrom,
    url: &RepoUrl,
    cache: &Cache,
    transport: &Transport<'_>,
    global: &Global,
) -> Result<String> {
    let from = source.env.as_str();
    let delivered = promote::delivered(
        url,
        &settings.git.main_branch,
        cache,
        transport,
        from,
        source.gitops_repo.as_ref(),
    )
    .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    let gitops_commit = delivered.gitops_commit.to_string();
    let promoted = delivered.promoted.clone().ok_or_else(|| {
        anyhow!(
            "GitOps commit {} of {} (branch {}) carries no {}: nothing tells which control-plane commit {from} runs",
            short(&gitops_commit),
            delivered.gitops_repo,
            delivered.branch,
            kalypso_core::tree::PROMOTED_COMMIT_PATH
        )
    })?;
    // A progressive rollout that has not reached every wave: the environment does not run
    // the commit everywhere, whatever its clusters report.
    if let Some(rollout) = &delivered.rollout
        && rollout.status != kalypso_core::rollout::Status::Complete
    {
        anyhow::bail!(
            "refusing to promote {} from {from}: its rollout of environment commit {} is {} ({} of {} waves delivered){}; nothing was pushed",
            short(&promoted),
            short(&rollout.change.environment),
            rollout.status.as_str(),
            rollout.delivered,
            rollout.waves.len(),
            rollout
                .failure
                .as_ref()
                .map(|f| format!(": {}", redact(f)))
                .unwrap_or_default()
        );
    }
    let mut compliance = String::new();
    if let Some(hub) = &source.hub {
        let client = HubClient::new(&hub.url, hub.token_file.as_deref())?;
        let refuse = |why: String| {
            anyhow!(
                "refusing to promote {} from {from} to {}: {why}; nothing was pushed",
                short(&promoted),
                settings.env
            )
        };
        let gate = client
            .gate(from, &gitops_commit)
            .map_err(|e| refuse(e.to_string()))?;
        match gate.verdict {
            Verdict::Compliant => {
                compliance = format!(", compliant on {}/{} clusters", gate.compliant, gate.total);
            }
            Verdict::Failed => {
                let failed: Vec<String> = gate
                    .clusters
                    .iter()
                    .filter(|c| c.state == ClusterState::Failed)
                    .map(|c| format!("{} ({})", c.name, c.message().unwrap_or("no message")))
                    .collect();
                return Err(refuse(format!(
                    "clusters of {from} failed to apply GitOps commit {}: {}",
                    short(&gitops_commit),
                    failed.join("; ")
                )));
            }
            Verdict::UnknownCommit => {
                return Err(refuse(format!(
                    "the hub does not know GitOps commit {} of {from}",
                    short(&gitops_commit)
                )));
            }
            // Pending, or a verdict this kalypso does not know yet: not compliant.
            Verdict::Pending | _ => {
                let waiting: Vec<&str> = gate
                    .clusters
                    .iter()
                    .filter(|c| c.state != ClusterState::Compliant)
                    .map(|c| c.name.as_str())
                    .collect();
                return Err(refuse(format!(
                    "{from} is not compliant with GitOps commit {} yet ({}/{} clusters; waiting for {})",
                    short(&gitops_commit),
                    gate.compliant,
                    gate.total,
                    waiting.join(", ")
                )));
            }
        }
    }
    if !global.quiet {
        println!(
            "{from}: GitOps commit {} of {} carries control-plane commit {}{compliance}",
            short(&gitops_commit),
            delivered.branch,
            short(&promoted)
        );
    }
    Ok(promoted)
}
