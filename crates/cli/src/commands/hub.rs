//! `kalypso hub`: the Deployment Observability Hub (see `kalypso-hub` and docs/hub.md).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use kalypso_git::redact::{Secret, register_secret};
use kalypso_hub::{GitSettings, HubConfig};

use super::sync::{GitArgs, runtime};
use crate::GlobalArgs;
use crate::terminal::{LogFormat, init_logs};

#[derive(Debug, Args)]
pub(crate) struct HubArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = kalypso_hub::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Database: `sqlite://PATH` (created on first start) or `postgres://USER:PASS@HOST/DB`.
    #[arg(long, env = "KALYPSO_HUB_DATABASE", value_name = "URL", default_value = kalypso_hub::DEFAULT_DATABASE)]
    database: String,
    /// The control plane (git URL or local repository path) whose environments and GitOps
    /// repositories the hub follows. Without it, the hub stores reports only.
    #[arg(long, value_name = "REPO")]
    control_plane: Option<String>,
    /// File holding the secret reports are signed with (`X-Signature: sha256=<HMAC>`).
    #[arg(long, value_name = "FILE")]
    webhook_secret_file: Option<PathBuf>,
    /// File holding the bearer token every query must carry.
    #[arg(long, value_name = "FILE")]
    api_token_file: Option<PathBuf>,
    /// Serve the fleet dashboard at `/` without the API token (the API still requires it).
    /// Without this flag and with `--api-token-file`, the dashboard needs the same bearer
    /// token (e.g. added by an authenticating reverse proxy).
    #[arg(long, conflicts_with = "no_dashboard")]
    dashboard_public: bool,
    /// Do not serve the fleet dashboard (API, health and readiness only).
    #[arg(long)]
    no_dashboard: bool,
    /// A cluster silent for longer is stale (and no longer required by gates).
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = kalypso_core::duration::parse)]
    stale_after: Duration,
    /// How often the GitOps branches are read again.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = kalypso_core::duration::parse)]
    refresh: Duration,
    #[command(flatten)]
    git: GitArgs,
}

fn read_secret(path: &Path, what: &str) -> Result<Secret> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let value = text.trim();
    if value.is_empty() {
        return Err(anyhow!("the {what} file {} is empty", path.display()));
    }
    register_secret(value);
    Ok(Secret::new(value))
}

pub(crate) fn hub(args: &HubArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let format = global.log_format.unwrap_or(LogFormat::Json);
    init_logs(format, "info", global.color).map_err(|e| anyhow!("{e}"))?;
    let mut config = HubConfig::new(args.database.clone());
    config.webhook_secret = args
        .webhook_secret_file
        .as_deref()
        .map(|p| read_secret(p, "webhook secret"))
        .transpose()?;
    config.api_token = args
        .api_token_file
        .as_deref()
        .map(|p| read_secret(p, "API token"))
        .transpose()?;
    config.dashboard = if args.no_dashboard {
        kalypso_hub::DashboardMode::Off
    } else if args.dashboard_public {
        kalypso_hub::DashboardMode::Public
    } else {
        kalypso_hub::DashboardMode::Protected
    };
    config.stale_after = args.stale_after;
    config.refresh = args.refresh.max(Duration::from_secs(1));
    config.git = args.control_plane.as_ref().map(|cp| GitSettings {
        control_plane: cp.clone(),
        cache_dir: args.git.cache_dir(),
        auth: args.git.auth(),
        retry: args.git.retry(),
        main_branch: args.git.main_branch().to_owned(),
    });
    let runtime = runtime()?;
    runtime
        .block_on(kalypso_hub::serve(
            &config,
            args.listen,
            kalypso_server::shutdown_signal(),
        ))
        .map_err(|e| anyhow!("{}", kalypso_git::redact(&e.to_string())))?;
    Ok(ExitCode::SUCCESS)
}
