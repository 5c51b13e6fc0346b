//! `kalypso serve`: the daemon (see `kalypso-server`), configured by `kalypso.yaml`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use clap::Args;
use kalypso_server::Config;

use super::sync::runtime;
use crate::GlobalArgs;
use crate::terminal::{LogFormat, init_logs};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The configuration file (see the kalypso-server README for its format).
    #[arg(
        long,
        env = "KALYPSO_CONFIG",
        value_name = "FILE",
        default_value = "kalypso.yaml"
    )]
    config: PathBuf,
    /// Listen on this address instead of the configured one (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
}

pub(crate) fn serve(args: &ServeArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let mut config = Config::load(&args.config).map_err(|e| anyhow!("{e}"))?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    let format = global.log_format.unwrap_or(match config.log.format {
        kalypso_server::config::LogFormat::Json => LogFormat::Json,
        kalypso_server::config::LogFormat::Text => LogFormat::Text,
    });
    init_logs(
        format,
        config.log.level.as_deref().unwrap_or("info"),
        global.color,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let runtime = runtime()?;
    let served = runtime.block_on(kalypso_server::serve(config, kalypso_server::shutdown_signal()));
    // A git or GitHub call the daemon abandoned at shutdown (see `kalypso_server::daemon`)
    // still runs on a blocking thread: do not wait for it.
    runtime.shutdown_background();
    served.map_err(|e| anyhow!("{}", kalypso_git::redact(&e.to_string())))?;
    Ok(ExitCode::SUCCESS)
}
