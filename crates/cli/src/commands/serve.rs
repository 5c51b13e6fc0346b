//! `kalypso serve`: the daemon (see `kalypso-server`), configured by `kalypso.yaml`.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use kalypso_server::Config;

use super::sync::runtime;
use crate::settings::{Global, Serve};
use crate::terminal::init_logs;

pub(crate) fn serve(args: &Serve, global: &Global) -> Result<ExitCode> {
    let mut config = Config::load(&args.config).map_err(|e| anyhow!("{e}"))?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(hub) = &args.hub {
        config.hub = Some(kalypso_server::config::HubConfig {
            url: hub.url.clone(),
            token_file: hub.token_file.clone(),
        });
    }
    config.sprig = global.sprig;
    let format = global.log_format(config.log.format);
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
