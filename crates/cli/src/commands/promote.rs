//! `kalypso promote`: pin a main-branch commit on an environment branch (its BaseRepo
//! `main`'s `spec.commit`, in `base-repo.yaml`), which makes the next sync deliver that
//! commit's templates and registrations to the environment.
//!
//! `--from ENV` promotes what ENV runs: the control-plane commit its GitOps branch was
//! rendered from. With `--hub`, the hub's gate must say that every cluster of ENV runs that
//! GitOps commit, or nothing is promoted.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;
use kalypso_git::control_plane::short;
use kalypso_git::promote::{self, Promotion, Request};
use kalypso_git::repo::Transport;
use kalypso_git::{Cache, RepoUrl, redact};

use super::sync::{CommitArgs, GitArgs};
use crate::GlobalArgs;
use crate::hub_client::{HubClient, Verdict};

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The control plane: a git URL or a local repository path (a local repository's
    /// branch is updated in place; push it yourself).
    #[arg(value_name = "CONTROL_PLANE", default_value = ".")]
    control_plane: String,
    /// The environment to promote to.
    #[arg(long, value_name = "ENV")]
    env: String,
    /// The main-branch commit to promote (default: the tip of the main branch).
    #[arg(long, value_name = "SHA", conflicts_with = "from")]
    commit: Option<String>,
    /// Promote the control-plane commit that environment SRC's GitOps branch was rendered
    /// from (its `.github/tracking/Promoted_Commit_Id`).
    #[arg(long, value_name = "SRC")]
    from: Option<String>,
    /// With --from: refuse to promote unless the hub reports every cluster of SRC compliant
    /// with SRC's GitOps commit.
    #[arg(long, value_name = "URL", requires = "from")]
    hub: Option<String>,
    /// File holding the hub's API token.
    #[arg(long, value_name = "FILE", requires = "hub")]
    hub_token_file: Option<std::path::PathBuf>,
    /// With --from: read SRC's GitOps branch from this repository instead of its
    /// GitOpsRepo's spec.repo (a local clone or a mirror).
    #[arg(long, value_name = "URL", requires = "from")]
    gitops_repo: Option<String>,
    /// Commit message; `{commit}` and `{environment}` are replaced.
    #[arg(long, value_name = "TEXT", default_value = promote::DEFAULT_MESSAGE)]
    message: String,
    #[command(flatten)]
    author: CommitArgs,
    #[command(flatten)]
    git: GitArgs,
}

pub(crate) fn promote(args: &PromoteArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let url = RepoUrl::parse(&args.control_plane).map_err(|e| anyhow!("{e}"))?;
    let credentials = kalypso_git::auth::Credentials::load(&args.git.auth()).map_err(|e| anyhow!("{e}"))?;
    let transport = Transport::new(&credentials, args.git.retry());
    let cache = Cache::new(args.git.cache_dir());
    let commit = match &args.from {
        Some(from) => Some(promoted_by(args, from, &url, &cache, &transport, global)?),
        None => args.commit.clone(),
    };
    let request = Request {
        environment: args.env.clone(),
        commit,
        author: args.author.author(),
        message: args.message.clone(),
    };
    let result = promote::promote(&url, args.git.main_branch(), &cache, &transport, &request)
        .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    if !global.quiet {
        match result {
            Promotion::AlreadyPromoted { commit, file } => println!(
                "{}: already at {} ({file}); nothing to do",
                args.env,
                short(&commit.to_string())
            ),
            Promotion::Promoted {
                commit,
                file,
                head,
                previous,
            } => println!(
                "{}: promoted {}{} in {file}; commit {} on the environment branch of {url}",
                args.env,
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
    args: &PromoteArgs,
    from: &str,
    url: &RepoUrl,
    cache: &Cache,
    transport: &Transport<'_>,
    global: &GlobalArgs,
) -> Result<String> {
    if from == args.env {
        return Err(anyhow!("--from {from} names the environment being promoted to"));
    }
    let gitops_override = args
        .gitops_repo
        .as_deref()
        .map(RepoUrl::parse)
        .transpose()
        .map_err(|e| anyhow!("--gitops-repo: {e}"))?;
    let delivered = promote::delivered(
        url,
        args.git.main_branch(),
        cache,
        transport,
        from,
        gitops_override.as_ref(),
    )
    .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    let gitops_commit = delivered.gitops_commit.to_string();
    let promoted = delivered.promoted.clone().ok_or_else(|| {
        anyhow!(
            "GitOps commit {} of {} (branch {}) carries no .github/tracking/Promoted_Commit_Id: nothing tells which control-plane commit {from} runs",
            short(&gitops_commit),
            delivered.gitops_repo,
            delivered.branch
        )
    })?;
    let mut compliance = String::new();
    if let Some(hub) = &args.hub {
        let client = HubClient::new(hub, args.hub_token_file.as_deref())?;
        let refuse = |why: String| {
            anyhow!(
                "refusing to promote {} from {from} to {}: {why}; nothing was pushed",
                short(&promoted),
                args.env
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
                    .filter(|c| c.is_failed())
                    .map(|c| format!("{} ({})", c.name, c.message.as_deref().unwrap_or("no message")))
                    .collect();
                return Err(refuse(format!(
                    "clusters of {from} failed to apply GitOps commit {}: {}",
                    short(&gitops_commit),
                    failed.join("; ")
                )));
            }
            Verdict::Pending => {
                let waiting: Vec<&str> = gate
                    .clusters
                    .iter()
                    .filter(|c| !c.is_compliant())
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
            Verdict::UnknownCommit => {
                return Err(refuse(format!(
                    "the hub does not know GitOps commit {} of {from}",
                    short(&gitops_commit)
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
