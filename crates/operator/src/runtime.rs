//! The process around [`crate::run()`]: the tokio runtime and the git publisher — what
//! `kalypso operator` calls, so that the command line needs no async code of its own (it
//! installs the logs and gives the shutdown signal, as for `serve` and `hub`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use kalypso_git::AuthSettings;
use kalypso_git::deliver::{DeliverySettings, Mode};

use crate::git::GitPublisher;
use crate::run::{Backends, Config, ControlPlaneFeed, run};

/// How the operator's git publisher reaches GitOps repositories.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PublisherSettings {
    /// Pull requests, pushes, or `auto` (push for local repositories).
    pub mode: Mode,
    /// Where repositories are mirrored (default: the user cache).
    pub cache_dir: Option<PathBuf>,
    /// Environment variable holding the GitHub token.
    pub token_env: String,
    /// File holding the GitHub token.
    pub token_file: Option<PathBuf>,
    /// The GitHub API URL.
    pub github_api_url: Option<String>,
    /// The forge of the GitOps repositories (default: inferred from each one's URL).
    pub provider: Option<kalypso_git::forge::Provider>,
    /// The API of a GitLab, Azure DevOps or Gitea forge (default: derived from the URL).
    pub provider_api_url: Option<String>,
}

/// Why the operator could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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

/// The delivery settings of `publisher`: how commits are made, the credentials, the cache.
pub fn delivery_settings(publisher: &PublisherSettings) -> (DeliverySettings, AuthSettings, PathBuf) {
    let mut settings = DeliverySettings {
        mode: publisher.mode,
        provider: publisher.provider,
        provider_api_url: publisher.provider_api_url.clone(),
        ..DeliverySettings::default()
    };
    if let Some(url) = &publisher.github_api_url {
        settings.github_api_url = url.clone();
    }
    let auth = AuthSettings {
        token_env: Some(publisher.token_env.clone()),
        token_file: publisher.token_file.clone(),
        ..AuthSettings::default()
    };
    let cache = publisher
        .cache_dir
        .clone()
        .unwrap_or_else(kalypso_git::Cache::default_dir);
    (settings, auth, cache)
}

/// Runs the operator on a new multi-threaded runtime until `shutdown` resolves (the command
/// line gives the signal every long-running command stops on: SIGTERM or SIGINT).
pub fn block_on(
    config: Config,
    publisher: PublisherSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (settings, auth, cache) = delivery_settings(&publisher);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("kalypso-operator")
        .build()
        .map_err(Error::Runtime)?;
    let publisher = GitPublisher::new(cache.clone(), &auth, settings.clone(), runtime.handle().clone())?;
    let syncer = match config.source {
        ControlPlaneFeed::Git => {
            let sync_settings = kalypso_git::Settings {
                cache_dir: cache,
                auth,
                delivery: settings,
                sprig: config.sprig,
                mass_deletion: kalypso_git::MassDeletionSettings {
                    limit: config.options.mass_deletion,
                    allowed: kalypso_git::AllowedDeletions::None,
                    how_to_allow: crate::desired::HOW_TO_ALLOW_MASS_DELETION,
                },
                ..kalypso_git::Settings::default()
            };
            Some(Arc::new(
                kalypso_git::Syncer::new(sync_settings, runtime.handle().clone()).map_err(Error::Sync)?,
            ))
        }
        ControlPlaneFeed::Flux | ControlPlaneFeed::External => None,
    };
    let backends = Backends {
        publisher: Arc::new(publisher),
        syncer,
    };
    runtime.block_on(run(config, backends, shutdown))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_settings_follow_the_flags() {
        let publisher = PublisherSettings {
            mode: Mode::Push,
            cache_dir: Some("/tmp/c".into()),
            token_env: "TOKEN".into(),
            token_file: None,
            github_api_url: Some("https://ghe.example/api/v3".into()),
            provider: None,
            provider_api_url: None,
        };
        let (settings, auth, cache) = delivery_settings(&publisher);
        assert_eq!(settings.mode, Mode::Push);
        assert_eq!(settings.github_api_url, "https://ghe.example/api/v3");
        assert_eq!(auth.token_env.as_deref(), Some("TOKEN"));
        assert_eq!(cache, PathBuf::from("/tmp/c"));
    }
}
