//! `kalypso hub`: the Deployment Observability Hub (see `kalypso-hub` and docs/hub.md).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use kalypso_git::redact::{Secret, register_secret};
use kalypso_hub::{GitSettings, HubConfig};

use super::sync::runtime;
use crate::settings::{Global, Hub};
use crate::terminal::init_logs;
use kalypso_server::config::LogFormat;

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

pub(crate) fn hub(settings: &Hub, global: &Global) -> Result<ExitCode> {
    let format = global.log_format(LogFormat::Json);
    init_logs(format, "info", global.color).map_err(|e| anyhow!("{e}"))?;
    let mut config = HubConfig::new(settings.database.clone());
    config.webhook_secret = settings
        .webhook_secret_file
        .as_deref()
        .map(|p| read_secret(p, "webhook secret"))
        .transpose()?;
    config.api_token = settings
        .api_token_file
        .as_deref()
        .map(|p| read_secret(p, "API token"))
        .transpose()?;
    if let Some(file) = &settings.notifications {
        config.notifications = kalypso_hub::notify::NotificationsConfig::load(file)?;
    }
    config.dashboard = settings.dashboard;
    config.stale_after = settings.stale_after;
    config.refresh = settings.refresh;
    config.git = settings.control_plane.as_ref().map(|cp| GitSettings {
        control_plane: cp.clone(),
        cache_dir: settings.git.cache_dir(),
        auth: settings.git.auth.clone(),
        retry: settings.git.retry,
        main_branch: settings.git.main_branch.clone(),
        registry: settings.registry.clone(),
    });
    let runtime = runtime()?;
    runtime
        .block_on(kalypso_hub::serve(
            &config,
            settings.listen,
            kalypso_server::shutdown_signal(),
        ))
        .map_err(|e| anyhow!("{}", kalypso_git::redact(&e.to_string())))?;
    Ok(ExitCode::SUCCESS)
}
