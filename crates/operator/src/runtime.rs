//! The process around [`crate::run()`]: logging, the tokio runtime, the git publisher and the
//! shutdown signal — what `kalypso operator` calls, so that the command line needs no async
//! code of its own.

use std::path::PathBuf;
use std::sync::Arc;

use kalypso_git::AuthSettings;
use kalypso_git::deliver::{DeliverySettings, Mode};
use tracing_subscriber::EnvFilter;

use crate::git::GitPublisher;
use crate::run::{Backends, Config, Source, run};

/// How the operator delivers to GitOps repositories.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// `pr`, `push` or `auto`.
    pub mode: String,
    /// Where repositories are mirrored (default: the user cache).
    pub cache_dir: Option<PathBuf>,
    /// Environment variable holding the GitHub token.
    pub token_env: String,
    /// File holding the GitHub token.
    pub token_file: Option<PathBuf>,
    /// The GitHub API URL.
    pub github_api_url: Option<String>,
}

/// Log output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable.
    Text,
}

/// Why the operator could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is invalid.
    #[error("invalid setting: {0}")]
    Setting(String),
    /// The runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The publisher could not start.
    #[error(transparent)]
    Git(#[from] crate::git::Error),
    /// The git syncer could not start.
    #[error("cannot start reading control planes from git: {0}")]
    Sync(#[source] kalypso_git::sync::Error),
    /// The operator failed.
    #[error(transparent)]
    Run(#[from] crate::run::Error),
}

/// Installs the global log subscriber (`RUST_LOG` wins over `level`).
pub fn init_logging(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .map_err(|e| format!("invalid log level: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    }
    .map_err(|e| e.to_string())
}

/// Resolves when the process gets SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
    tracing::info!("shutting down");
}

/// The delivery settings of `delivery`.
pub fn delivery_settings(delivery: &Delivery) -> Result<(DeliverySettings, AuthSettings, PathBuf), Error> {
    let mode: Mode = delivery.mode.parse().map_err(Error::Setting)?;
    let mut settings = DeliverySettings {
        mode,
        ..DeliverySettings::default()
    };
    if let Some(url) = &delivery.github_api_url {
        settings.github_api_url = url.clone();
    }
    let auth = AuthSettings {
        token_env: Some(delivery.token_env.clone()),
        token_file: delivery.token_file.clone(),
        ..AuthSettings::default()
    };
    let cache = delivery
        .cache_dir
        .clone()
        .unwrap_or_else(kalypso_git::Cache::default_dir);
    Ok((settings, auth, cache))
}

/// Runs the operator on a new multi-threaded runtime until SIGTERM/SIGINT.
pub fn block_on(config: Config, delivery: Delivery) -> Result<(), Error> {
    let (settings, auth, cache) = delivery_settings(&delivery)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kalypso-operator")
        .build()
        .map_err(Error::Runtime)?;
    let publisher = GitPublisher::new(cache.clone(), &auth, settings.clone(), runtime.handle().clone())?;
    let syncer = match config.source {
        Source::Git => {
            let sync_settings = kalypso_git::Settings {
                cache_dir: cache,
                auth,
                delivery: settings,
                ..kalypso_git::Settings::default()
            };
            Some(Arc::new(
                kalypso_git::Syncer::new(sync_settings, runtime.handle().clone()).map_err(Error::Sync)?,
            ))
        }
        Source::Flux | Source::External => None,
    };
    let backends = Backends {
        publisher: Arc::new(publisher),
        syncer,
    };
    runtime.block_on(run(config, backends, shutdown_signal()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_settings_follow_the_flags() {
        let d = Delivery {
            mode: "push".into(),
            cache_dir: Some("/tmp/c".into()),
            token_env: "TOKEN".into(),
            token_file: None,
            github_api_url: Some("https://ghe.example/api/v3".into()),
        };
        let (settings, auth, cache) = delivery_settings(&d).expect("valid");
        assert_eq!(settings.mode, Mode::Push);
        assert_eq!(settings.github_api_url, "https://ghe.example/api/v3");
        assert_eq!(auth.token_env.as_deref(), Some("TOKEN"));
        assert_eq!(cache, PathBuf::from("/tmp/c"));
        let bad = Delivery {
            mode: "fax".into(),
            ..d
        };
        assert!(matches!(delivery_settings(&bad), Err(Error::Setting(_))));
    }
}
