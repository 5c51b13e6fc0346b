//! `kalypso promote`: pin a main-branch commit on an environment branch (its BaseRepo
//! `main`'s `spec.commit`, in `base-repo.yaml`), which makes the next sync deliver that
//! commit's templates and registrations to the environment.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;
use kalypso_git::control_plane::short;
use kalypso_git::promote::{self, Promotion, Request};
use kalypso_git::repo::Transport;
use kalypso_git::{Cache, RepoUrl, redact};

use super::sync::{CommitArgs, GitArgs, init_logs};
use crate::GlobalArgs;

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
    #[arg(long, value_name = "SHA")]
    commit: Option<String>,
    /// Commit message; `{commit}` and `{environment}` are replaced.
    #[arg(long, value_name = "TEXT", default_value = promote::DEFAULT_MESSAGE)]
    message: String,
    #[command(flatten)]
    author: CommitArgs,
    #[command(flatten)]
    git: GitArgs,
}

pub(crate) fn promote(args: &PromoteArgs, global: &GlobalArgs) -> Result<ExitCode> {
    init_logs(global);
    let url = RepoUrl::parse(&args.control_plane).map_err(|e| anyhow!("{e}"))?;
    let credentials = kalypso_git::auth::Credentials::load(&args.git.auth()).map_err(|e| anyhow!("{e}"))?;
    let transport = Transport::new(&credentials, args.git.retry());
    let request = Request {
        environment: args.env.clone(),
        commit: args.commit.clone(),
        author: args.author.author(),
        message: args.message.clone(),
    };
    let cache = Cache::new(args.git.cache_dir());
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
