//! `kalypso.yaml`: what the daemon watches, how often, where it listens, and how it
//! delivers. Every field but `controlPlane` has a default; unknown fields are errors, so a
//! misspelt option is reported instead of ignored. The format is documented in the crate's
//! README.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kalypso_core::run::DeletionLimit;
use kalypso_git::redact::Secret;
use kalypso_git::{
    AllowedDeletions, AuthSettings, Author, DeliverySettings, MassDeletionSettings, Mode, RetryPolicy,
    Settings,
};
use serde::Deserialize;

/// The environment variable holding the webhook secret when none is configured.
pub const DEFAULT_WEBHOOK_SECRET_ENV: &str = "KALYPSO_WEBHOOK_SECRET";

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (its message is part of this error's).
        error: std::io::Error,
    },
    /// The file is not a valid configuration.
    #[error("invalid configuration {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// The daemon's configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The control plane: a git URL or a local repository path.
    pub control_plane: String,
    /// Environments to deliver (default: every Environment on the main branch).
    #[serde(default)]
    pub environments: Vec<String>,
    /// Time between polls.
    #[serde(default = "default_interval", with = "kalypso_core::duration")]
    pub interval: Duration,
    /// Address of the HTTP server (health, readiness, metrics, webhook).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Where remote repositories are mirrored.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// The control plane's main branch.
    #[serde(default)]
    pub main_branch: Option<String>,
    /// Credentials.
    #[serde(default)]
    pub auth: AuthSettings,
    /// Registry access for `oci://` GitOpsRepos.
    #[serde(default)]
    pub registry: RegistryConfig,
    /// How to deliver.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// The push webhook (GitHub or GitLab).
    #[serde(default)]
    pub webhook: WebhookConfig,
    /// Each environment's backoff after an error (`initialBackoff`, `maxBackoff`; each key
    /// may be left out for its default).
    #[serde(default, deserialize_with = "retry_with_defaults")]
    pub retry: Option<RetryPolicy>,
    /// The Deployment Observability Hub, the gate of progressive rollouts: without it, an
    /// environment with a RolloutPolicy is an error.
    #[serde(default)]
    pub hub: Option<HubConfig>,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The Sprig version templates run with: not in the file, the command line's
    /// `KALYPSO_SPRIG` (checked when kalypso starts).
    #[serde(skip)]
    pub sprig: kalypso_git::SprigVersion,
}

/// The `delivery` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryConfig {
    /// `auto` (default), `pr` or `push`.
    #[serde(default)]
    pub mode: Mode,
    /// Deliver here instead of each GitOpsRepo's `spec.repo`.
    #[serde(default)]
    pub gitops_repo: Option<String>,
    /// Prefix of pull-request branches (default `kalypso/`).
    #[serde(default)]
    pub branch_prefix: Option<String>,
    /// GitHub API URL (default `https://api.github.com`).
    #[serde(default)]
    pub github_api_url: Option<String>,
    /// The forge of the GitOps repositories: `github`, `gitlab`, `azure-devops`, `gitea` or
    /// `forgejo` (default: inferred from each repository's URL).
    #[serde(default)]
    pub provider: Option<kalypso_git::forge::Provider>,
    /// The API of a GitLab, Azure DevOps or Gitea forge (default: derived from the
    /// repository URL).
    #[serde(default)]
    pub provider_api_url: Option<String>,
    /// Commit author name.
    #[serde(default)]
    pub author_name: Option<String>,
    /// Commit author e-mail.
    #[serde(default)]
    pub author_email: Option<String>,
    /// Commit message.
    #[serde(default)]
    pub message: Option<String>,
    /// When a delivery that removes deployment targets is held: a percentage of the
    /// folders a GitOps branch has (`50%`), or `default` (all of them, or more than half
    /// when there are more than ten).
    #[serde(default, deserialize_with = "deletion_limit")]
    pub mass_deletion_limit: DeletionLimit,
    /// Environments allowed to remove more deployment targets than the limit (a person
    /// adds one, restarts, and takes it out again once delivered).
    #[serde(default)]
    pub allow_mass_deletion: Vec<String>,
}

/// The sentence that ends a held delivery's error under `serve`.
pub const HOW_TO_ALLOW_MASS_DELETION: &str = "add the environment to `delivery.allowMassDeletion` in the serve \
     configuration and restart serve (and take it out again once delivered).";

/// `massDeletionLimit`: `50%`, `50` or `default`.
fn deletion_limit<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<DeletionLimit, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Number(u64),
        Text(String),
    }
    let text = match Text::deserialize(deserializer)? {
        Text::Number(n) => n.to_string(),
        Text::Text(t) => t,
    };
    text.parse().map_err(serde::de::Error::custom)
}

/// The `registry` section: credentials and plain-HTTP registries for `oci://` GitOpsRepos.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryConfig {
    /// Docker config file (default: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json`).
    #[serde(default)]
    pub docker_config: Option<PathBuf>,
    /// User name of the token (default: `KALYPSO_REGISTRY_USERNAME`).
    #[serde(default)]
    pub username: Option<String>,
    /// File holding a token for every registry (wins over the Docker config).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Environment variable holding the token (default `KALYPSO_REGISTRY_TOKEN`).
    #[serde(default)]
    pub token_env: Option<String>,
    /// Registries (`host[:port]`) reached over plain HTTP besides loopback ones.
    #[serde(default)]
    pub insecure: Vec<String>,
}

impl RegistryConfig {
    /// The registry settings of a sync.
    pub fn auth(&self) -> kalypso_git::oci::AuthSettings {
        let defaults = kalypso_git::oci::AuthSettings::default();
        kalypso_git::oci::AuthSettings {
            docker_config: self.docker_config.clone(),
            username: self.username.clone(),
            token: None,
            token_file: self.token_file.clone(),
            token_env: self.token_env.clone().or(defaults.token_env),
            insecure: self.insecure.clone(),
        }
    }
}

/// The `hub` section: the Deployment Observability Hub that gates rollouts' waves.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HubConfig {
    /// Its URL (`http://hub:8090`).
    pub url: String,
    /// File holding its API token (read at start; never logged).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

impl HubConfig {
    /// The hub as a wave gate; the error names the field and the file.
    pub fn gate(&self) -> Result<kalypso_git::hub::HubGate, String> {
        kalypso_git::hub::HubGate::new(&self.url, self.token_file.as_deref()).map_err(|e| format!("hub: {e}"))
    }
}

/// The `webhook` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WebhookConfig {
    /// Environment variable holding the secret (default `KALYPSO_WEBHOOK_SECRET`).
    #[serde(default)]
    pub secret_env: Option<String>,
    /// File holding the secret (wins over the variable).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
}

/// Log output format: `log.format` here, `--log-format` on the command line (which wins), for
/// every command that logs (`serve`, `hub`, `operator`, `sync`...).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One JSON object per line, for log collectors (the daemons' default).
    #[default]
    Json,
    /// Human-readable lines.
    Text,
}

impl LogFormat {
    /// Every format with its name, as the command line and `kalypso.yaml` spell it.
    pub const NAMES: [(LogFormat, &'static str); 2] = [(LogFormat::Text, "text"), (LogFormat::Json, "json")];

    /// The format's name.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        LogFormat::NAMES
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(format, _)| *format)
            .ok_or_else(|| format!("unknown log format {s:?} (text or json)"))
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The `log` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LogConfig {
    /// `json` or `text`.
    #[serde(default)]
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `kalypso_git=debug,info`); `RUST_LOG` wins.
    #[serde(default)]
    pub level: Option<String>,
}

/// The `retry` section as written: every key optional.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RetrySection {
    attempts: Option<u32>,
    #[serde(default, with = "optional_duration")]
    initial_backoff: Option<Duration>,
    #[serde(default, with = "optional_duration")]
    max_backoff: Option<Duration>,
}

mod optional_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "kalypso_core::duration")] Duration);
        Ok(Option::<Wrapped>::deserialize(d)?.map(|Wrapped(d)| d))
    }
}

fn retry_with_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RetryPolicy>, D::Error> {
    let Some(section) = Option::<RetrySection>::deserialize(d)? else {
        return Ok(None);
    };
    let defaults = RetryPolicy::default();
    let initial_backoff = section.initial_backoff.unwrap_or(defaults.initial_backoff);
    Ok(Some(RetryPolicy {
        attempts: section.attempts.unwrap_or(defaults.attempts).max(1),
        initial_backoff,
        max_backoff: section
            .max_backoff
            .unwrap_or(defaults.max_backoff)
            .max(initial_backoff),
    }))
}

fn default_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8080))
}

impl Config {
    /// A configuration watching `control_plane` with every default.
    pub fn new(control_plane: impl Into<String>) -> Config {
        Config {
            control_plane: control_plane.into(),
            environments: Vec::new(),
            interval: default_interval(),
            listen: default_listen(),
            cache_dir: None,
            main_branch: None,
            auth: AuthSettings::default(),
            registry: RegistryConfig::default(),
            delivery: DeliveryConfig::default(),
            webhook: WebhookConfig::default(),
            retry: None,
            hub: None,
            log: LogConfig::default(),
            sprig: kalypso_git::SprigVersion::default(),
        }
    }

    /// Reads `path`.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|error| Error::Read {
            path: path.to_owned(),
            error,
        })?;
        Config::parse(&text).map_err(|message| Error::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses the text of a configuration file.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        if config.control_plane.trim().is_empty() {
            return Err("controlPlane is empty".to_owned());
        }
        if config.interval.is_zero() {
            return Err("interval must be positive".to_owned());
        }
        if let Some(hub) = &config.hub {
            let url = hub.url.trim();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "hub.url: {:?} is not an http:// or https:// URL",
                    kalypso_git::redact(url)
                ));
            }
        }
        Ok(config)
    }

    /// The sync settings the configuration gives.
    pub fn settings(&self) -> Settings {
        let defaults = Settings::default();
        let delivery_defaults = DeliverySettings::default();
        let d = &self.delivery;
        Settings {
            cache_dir: self.cache_dir.clone().unwrap_or(defaults.cache_dir),
            auth: self.auth.clone(),
            retry: self.retry.unwrap_or(defaults.retry),
            main_branch: self.main_branch.clone().unwrap_or(defaults.main_branch),
            delivery: DeliverySettings {
                mode: d.mode,
                author: Author {
                    name: d.author_name.clone().unwrap_or(delivery_defaults.author.name),
                    email: d.author_email.clone().unwrap_or(delivery_defaults.author.email),
                },
                message: d.message.clone().unwrap_or(delivery_defaults.message),
                branch_prefix: d.branch_prefix.clone().unwrap_or(delivery_defaults.branch_prefix),
                github_api_url: d
                    .github_api_url
                    .clone()
                    .unwrap_or(delivery_defaults.github_api_url),
                provider: d.provider,
                provider_api_url: d.provider_api_url.clone(),
                dry_run: false,
            },
            gitops_repo: d.gitops_repo.clone(),
            extenders: defaults.extenders,
            registry: self.registry.auth(),
            sprig: self.sprig,
            mass_deletion: MassDeletionSettings {
                limit: d.mass_deletion_limit,
                allowed: if d.allow_mass_deletion.is_empty() {
                    AllowedDeletions::None
                } else {
                    AllowedDeletions::Environments(d.allow_mass_deletion.iter().cloned().collect())
                },
                how_to_allow: HOW_TO_ALLOW_MASS_DELETION,
            },
        }
    }

    /// The webhook secret, if one is configured.
    pub fn webhook_secret(&self) -> Result<Option<Secret>, Error> {
        if let Some(path) = &self.webhook.secret_file {
            let text = std::fs::read_to_string(path).map_err(|error| Error::Read {
                path: path.clone(),
                error,
            })?;
            return Ok(Some(Secret::new(text.trim())));
        }
        let var = self
            .webhook
            .secret_env
            .as_deref()
            .unwrap_or(DEFAULT_WEBHOOK_SECRET_ENV);
        Ok(std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| Secret::new(v.trim())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_configuration() {
        let config = Config::parse(
            r#"
controlPlane: https://github.com/contoso/control-plane
environments: [dev, stage]
interval: 2m
listen: 127.0.0.1:9090
cacheDir: /var/cache/kalypso
auth:
  tokenEnv: MY_TOKEN
delivery:
  mode: pr
  githubApiUrl: https://github.example.com/api/v3
  authorName: Bot
retry:
  attempts: 3
  initialBackoff: 500ms
  maxBackoff: 10s
log:
  format: text
  level: debug
"#,
        )
        .unwrap();
        assert_eq!(config.interval, Duration::from_secs(120));
        assert_eq!(config.listen.port(), 9090);
        let s = config.settings();
        assert_eq!(s.delivery.mode, Mode::Pr);
        assert_eq!(s.delivery.author.name, "Bot");
        assert_eq!(s.delivery.author.email, "kalypso.scheduler@email.com");
        assert_eq!(s.delivery.github_api_url, "https://github.example.com/api/v3");
        assert_eq!(s.retry.initial_backoff, Duration::from_millis(500));
        assert_eq!(s.auth.token_env.as_deref(), Some("MY_TOKEN"));
        assert_eq!(config.log.format, LogFormat::Text);
    }

    #[test]
    fn names_the_provider_of_self_hosted_forges() {
        let config = Config::parse(
            "controlPlane: https://git.contoso.com/platform/control-plane\ndelivery:\n  provider: forgejo\n  providerApiUrl: https://git.contoso.com/api/v1\n",
        )
        .unwrap();
        let s = config.settings();
        assert_eq!(s.delivery.provider, Some(kalypso_git::forge::Provider::Gitea));
        assert_eq!(
            s.delivery.provider_api_url.as_deref(),
            Some("https://git.contoso.com/api/v1")
        );
        assert_eq!(
            Config::parse("controlPlane: x\n")
                .unwrap()
                .settings()
                .delivery
                .provider,
            None
        );
        let err = Config::parse("controlPlane: x\ndelivery:\n  provider: bitbucket\n").unwrap_err();
        assert!(err.contains("bitbucket") && err.contains("azure-devops"), "{err}");
    }

    #[test]
    fn defaults_and_errors() {
        let config = Config::parse("controlPlane: /srv/control-plane\n").unwrap();
        assert_eq!(config.interval, Duration::from_secs(60));
        assert_eq!(config.settings().delivery.message, "Kalypso Scheduler commit");
        assert!(
            Config::parse("controlPlane: x\nintervall: 5m\n")
                .unwrap_err()
                .contains("intervall")
        );
        assert!(Config::parse("controlPlane: x\ninterval: soon\n").is_err());
        assert!(Config::parse("controlPlane: ''\n").is_err());
        // A retry section may give only the backoff.
        let partial = Config::parse("controlPlane: x\nretry:\n  initialBackoff: 5s\n").unwrap();
        let retry = partial.settings().retry;
        assert_eq!(
            (retry.attempts, retry.initial_backoff, retry.max_backoff),
            (5, Duration::from_secs(5), Duration::from_secs(30))
        );
        let long = Config::parse("controlPlane: x\nretry:\n  initialBackoff: 2m\n").unwrap();
        assert_eq!(
            long.settings().retry.max_backoff,
            Duration::from_secs(120),
            "the maximum is at least the first wait"
        );
        assert!(
            Config::parse("controlPlane: x\nretry:\n  initalBackoff: 5s\n")
                .unwrap_err()
                .contains("initalBackoff")
        );
    }

    #[test]
    fn the_hub_gates_rollouts_and_its_token_comes_from_a_file() {
        assert!(Config::parse("controlPlane: x\n").unwrap().hub.is_none());
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("hub-token");
        std::fs::write(&token, "hub-secret-token\n").unwrap();
        let config = Config::parse(&format!(
            "controlPlane: x\nhub:\n  url: http://hub:8090/\n  tokenFile: {}\n",
            token.display()
        ))
        .unwrap();
        let gate = config.hub.as_ref().unwrap().gate().unwrap();
        assert_eq!(gate.base(), "http://hub:8090");
        assert!(!format!("{gate:?}").contains("hub-secret-token"));
        let missing =
            Config::parse("controlPlane: x\nhub:\n  url: http://hub\n  tokenFile: /nonexistent/hub-token\n")
                .unwrap()
                .hub
                .unwrap()
                .gate()
                .unwrap_err();
        assert!(
            missing.starts_with("hub: cannot read the hub token file /nonexistent/hub-token"),
            "{missing}"
        );
        let scheme = Config::parse("controlPlane: x\nhub:\n  url: hub:8090\n").unwrap_err();
        assert!(scheme.contains("hub.url"), "{scheme}");
        assert!(Config::parse("controlPlane: x\nhub:\n  url: http://hub\n  token: x\n").is_err());
    }

    #[test]
    fn the_mass_deletion_guard_is_configured_in_delivery() {
        let guard = Config::parse("controlPlane: x\n")
            .unwrap()
            .settings()
            .mass_deletion;
        assert_eq!(guard.limit, DeletionLimit::Default);
        assert_eq!(guard.allowed, AllowedDeletions::None);
        assert!(guard.how_to_allow.contains("allowMassDeletion"));
        for (limit, expected) in [("30%", 30), ("30", 30), ("'30'", 30)] {
            let text = format!(
                "controlPlane: x\ndelivery:\n  massDeletionLimit: {limit}\n  allowMassDeletion: [dev]\n"
            );
            let guard = Config::parse(&text).unwrap().settings().mass_deletion;
            assert_eq!(guard.limit, DeletionLimit::Percent(expected), "{limit}");
            assert!(guard.allowed.allows("dev") && !guard.allowed.allows("prod"));
        }
        let error = Config::parse("controlPlane: x\ndelivery:\n  massDeletionLimit: half\n").unwrap_err();
        assert!(error.contains("not a mass-deletion limit"), "{error}");
    }
}
