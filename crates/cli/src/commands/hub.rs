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
    // The control plane: --control-plane, else the configuration file's `controlPlane`.
    let mut control_plane = settings.control_plane.clone();
    if let Some(path) = &settings.config {
        let (file, auth) = kalypso_hub::config::load(path).map_err(|e| anyhow!("{e}"))?;
        if control_plane.is_none() {
            control_plane = file.control_plane;
        }
        if let Some(notifications) = file.notifications {
            if settings.notifications.is_some() {
                return Err(anyhow!(
                    "{}: notifications: give them in the configuration file or with --notifications, not both",
                    path.display()
                ));
            }
            config.notifications = notifications;
        }
        config.oidc_client_secret = auth
            .oidc
            .as_ref()
            .and_then(|o| o.client_secret_file.as_deref())
            .map(|p| read_secret(p, "OIDC client secret"))
            .transpose()?;
        config.session_secret = auth
            .session_secret_file
            .as_deref()
            .map(|p| read_secret(p, "session key"))
            .transpose()?;
        if let Some(key) = &config.session_secret
            && key.expose().len() < 32
        {
            return Err(anyhow!(
                "{}: session.secretFile: the session key must be at least 32 characters",
                path.display()
            ));
        }
        config.auth = auth;
    }
    if let Some(file) = &settings.notifications {
        config.notifications = kalypso_hub::notify::NotificationsConfig::load(file)?;
    }
    config.dashboard = settings.dashboard;
    config.stale_after = settings.stale_after;
    config.refresh = settings.refresh;
    config.limits = settings.limits;
    config.cluster_rate = settings.cluster_rate;
    config.git = control_plane.map(|control_plane| GitSettings {
        control_plane,
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

/// `kalypso hub hash-token`: prints the hash of the token read from `file` or standard input.
pub(crate) fn hash_token(file: Option<&Path>) -> Result<ExitCode> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
                .context("cannot read the token from standard input")?;
            text
        }
    };
    if text.trim().is_empty() {
        return Err(anyhow!("the token is empty"));
    }
    println!("{}", kalypso_hub::auth::hash_token(&text));
    Ok(ExitCode::SUCCESS)
}
