//! The settings a command runs with: the command line, validated once.
//!
//! The command line has two layers, as ripgrep's `LowArgs` and `HiArgs`: [`crate::args`] is
//! what clap parses (text as typed, with the help and environment variables), and
//! [`Settings::from_cli`] turns it, before anything is read or written, into typed settings:
//! durations, limits, addresses, URLs, the output mode, what `--keep-going` or `--json`
//! mean. A value that cannot be used is refused here with an error naming its flag, so no
//! command starts work it cannot finish, and the commands take these settings, never clap's
//! types. Pure: no IO, no clock; the environment variables are clap's to read, and defaults
//! that depend on the home folder (the caches) are resolved where they are used.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap_complete::Shell;
use kalypso_core::limits::{LimitError, Limits};
use kalypso_core::run::Isolation;
use kalypso_git::{AuthSettings, Author, DeliverySettings, RepoUrl, RetryPolicy};
use kalypso_hub::DashboardMode;

use crate::args::{self, Cli, ColorChoice, Command, LogFormat, OutputFormat};
use kalypso_template::{Engine, SprigVersion};

/// A command-line value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SettingsError {
    /// The value of a flag (or argument), and why.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag, as typed (`--timeout`), or the argument's name.
        flag: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// A `--limit` (or `KALYPSO_LIMITS`) setting; the message names the limit.
    #[error("{0}")]
    Limit(LimitError),
    /// `KALYPSO_SPRIG` names no Sprig version; the message names the variable.
    #[error("{0}")]
    Sprig(String),
}

fn flag_error(flag: &'static str, message: impl Into<String>) -> SettingsError {
    SettingsError::Flag {
        flag,
        message: message.into(),
    }
}

/// `--flag`'s duration (`500ms`, `30s`, `1h30m`).
fn duration(flag: &'static str, text: &str) -> Result<Duration, SettingsError> {
    kalypso_core::duration::parse(text).map_err(|e| flag_error(flag, e))
}

/// `--flag`'s duration, which must not be zero.
fn positive(flag: &'static str, text: &str) -> Result<Duration, SettingsError> {
    let value = duration(flag, text)?;
    if value.is_zero() {
        return Err(flag_error(
            flag,
            format!("{text:?} is zero; give a positive duration"),
        ));
    }
    Ok(value)
}

/// `--flag`'s address: `HOST:PORT`, or Go's `:PORT` for every interface.
#[cfg(feature = "operator")]
fn address(flag: &'static str, text: &str) -> Result<SocketAddr, SettingsError> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    full.parse()
        .map_err(|e| flag_error(flag, format!("invalid address {text:?}: {e}")))
}

/// The whole command line, validated.
#[derive(Debug)]
pub(crate) struct Settings {
    /// What every command takes.
    pub(crate) global: Global,
    /// The command and its settings.
    pub(crate) command: CommandSettings,
}

impl Settings {
    /// Validates `cli`: every flag value is parsed and checked here, once.
    pub(crate) fn from_cli(cli: &Cli) -> Result<Settings, SettingsError> {
        let command = CommandSettings::from_args(&cli.command)?;
        Ok(Settings {
            global: Global::from_args(&cli.global)?,
            command,
        })
    }
}

/// What every command takes: threads, verbosity, limits, colour, log format, the Sprig
/// version templates run with.
#[derive(Debug)]
pub(crate) struct Global {
    /// Worker threads (`None`: one per CPU).
    pub(crate) threads: Option<usize>,
    /// Print only errors.
    pub(crate) quiet: bool,
    /// The limits on templates and YAML, the defaults with `--limit` applied.
    pub(crate) limits: Limits,
    /// When to colour output and logs.
    pub(crate) color: ColorChoice,
    /// `--log-format`, when given (each command has its default).
    log_format: Option<LogFormat>,
    /// The Sprig version `KALYPSO_SPRIG` selects. A value that names no version is refused
    /// when kalypso starts, whatever the command, as a bad flag is: one decision for
    /// `render`, `validate`, `sync`, `serve` and `operator` alike.
    pub(crate) sprig: SprigVersion,
}

impl Global {
    fn from_args(args: &args::GlobalArgs) -> Result<Global, SettingsError> {
        let mut limits = Limits::default();
        limits
            .apply(args.limits.iter().map(String::as_str))
            .map_err(SettingsError::Limit)?;
        Ok(Global {
            threads: args.threads,
            quiet: args.quiet,
            limits,
            color: args.color,
            log_format: args.log_format,
            sprig: kalypso_template::sprig_from_env().map_err(SettingsError::Sprig)?,
        })
    }

    /// The template engine of the Sprig version of the settings.
    pub(crate) fn engine(&self) -> Engine {
        Engine::with_sprig(self.sprig)
    }

    /// The log format: `--log-format`, else the command's `default`.
    pub(crate) fn log_format(&self, default: LogFormat) -> LogFormat {
        self.log_format.unwrap_or(default)
    }
}

/// A control plane as named on the command line: a folder or a git repository.
#[derive(Clone, Debug)]
pub(crate) struct ControlPlane {
    /// As typed (it may hold credentials: redact it before showing it).
    pub(crate) text: String,
    /// Where it is.
    pub(crate) url: RepoUrl,
}

impl ControlPlane {
    fn parse(text: &str) -> Result<ControlPlane, SettingsError> {
        let url = RepoUrl::parse(text).map_err(|e| flag_error("control plane", e.to_string()))?;
        Ok(ControlPlane {
            text: text.to_owned(),
            url,
        })
    }
}

/// Git access: caches, credentials, retries, the main branch.
#[derive(Clone, Debug)]
pub(crate) struct Git {
    /// `--cache-dir`, when given.
    cache_dir: Option<PathBuf>,
    /// Where credentials come from.
    pub(crate) auth: AuthSettings,
    /// How network operations are retried.
    pub(crate) retry: RetryPolicy,
    /// The control plane's main branch.
    pub(crate) main_branch: String,
}

impl Git {
    fn from_args(args: &args::GitArgs) -> Result<Git, SettingsError> {
        let backoff = duration("--backoff", &args.backoff)?;
        Ok(Git {
            cache_dir: args.cache_dir.clone(),
            auth: AuthSettings {
                token_env: Some(args.token_env.clone()),
                token_file: args.token_file.clone(),
                ssh_key: args.ssh_key.clone(),
                ..AuthSettings::default()
            },
            retry: RetryPolicy {
                attempts: args.retries.max(1),
                initial_backoff: backoff,
                max_backoff: backoff.max(Duration::from_secs(30)),
            },
            main_branch: args.main_branch.clone(),
        })
    }

    /// The folder of git mirrors: `--cache-dir`, else the user's cache.
    pub(crate) fn cache_dir(&self) -> PathBuf {
        self.cache_dir
            .clone()
            .unwrap_or_else(kalypso_git::Cache::default_dir)
    }

    /// The folder `--cache-dir` names, if given.
    pub(crate) fn cache_dir_given(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }
}

/// Registry access for `oci://` GitOps repositories (`--registry-*`).
fn registry(args: &args::RegistryArgs) -> kalypso_git::oci::AuthSettings {
    kalypso_git::oci::AuthSettings {
        docker_config: args.registry_config.clone(),
        username: args.registry_username.clone(),
        token_file: args.registry_token_file.clone(),
        insecure: args.insecure_registry.clone(),
        ..kalypso_git::oci::AuthSettings::default()
    }
}

/// Each command's settings.
#[derive(Debug)]
pub(crate) enum CommandSettings {
    Render(Box<Render>),
    Validate(Box<Validate>),
    Plan(Box<Plan>),
    Diff(Box<Comparison>),
    Explain(Box<Explain>),
    Sync(Box<Sync>),
    Serve(Serve),
    Promote(Box<Promote>),
    CheckPromote(Box<CheckPromote>),
    HubAction(Box<HubAction>),
    Rollout(Box<Rollout>),
    Hub(Box<Hub>),
    /// `kalypso hub hash-token`: the token's file (none: standard input).
    HashToken(Option<PathBuf>),
    Completions(Shell),
    Man(Man),
    #[cfg(feature = "operator")]
    Crds(Crds),
    #[cfg(feature = "operator")]
    Operator(Box<Operator>),
}

impl CommandSettings {
    fn from_args(command: &Command) -> Result<CommandSettings, SettingsError> {
        Ok(match command {
            Command::Render(a) => CommandSettings::Render(Box::new(Render::from_args(a)?)),
            Command::Validate(a) => CommandSettings::Validate(Box::new(Validate::from_args(a)?)),
            Command::Plan(a) => CommandSettings::Plan(Box::new(Plan {
                source: Comparison::from_args(&a.source)?,
                output: a.output,
            })),
            Command::Diff(a) => CommandSettings::Diff(Box::new(Comparison::from_args(&a.source)?)),
            Command::Explain(a) => CommandSettings::Explain(Box::new(Explain::from_args(a)?)),
            Command::Sync(a) => CommandSettings::Sync(Box::new(Sync::from_args(a)?)),
            Command::Serve(a) => CommandSettings::Serve(Serve {
                config: a.config.clone(),
                listen: a.listen,
                hub: a.hub.as_ref().map(|url| HubAccess {
                    url: url.clone(),
                    token_file: a.hub_token_file.clone(),
                }),
            }),
            Command::Promote(a) => CommandSettings::Promote(Box::new(Promote::from_args(a)?)),
            Command::CheckPromote(a) => CommandSettings::CheckPromote(Box::new(CheckPromote::from_args(a)?)),
            Command::Approve(a) => CommandSettings::HubAction(Box::new(HubAction::new(
                &a.hub,
                Action::Approve {
                    commit: a.commit.trim().to_owned(),
                    comment: a.comment.clone(),
                },
            )?)),
            Command::Freeze(a) => CommandSettings::HubAction(Box::new(HubAction::new(
                &a.hub,
                Action::Freeze {
                    reason: a.reason.clone(),
                    until: a.until.as_deref().map(until).transpose()?,
                },
            )?)),
            Command::Unfreeze(a) => CommandSettings::HubAction(Box::new(HubAction::new(
                &a.hub,
                Action::Unfreeze {
                    reason: a.reason.clone(),
                },
            )?)),
            Command::Rollout(c) => CommandSettings::Rollout(Box::new(Rollout::from_command(c)?)),
            Command::Hub(a) => match &a.command {
                Some(args::HubCommand::HashToken(h)) => CommandSettings::HashToken(h.token_file.clone()),
                None => CommandSettings::Hub(Box::new(Hub::from_args(a)?)),
            },
            Command::Completions(a) => CommandSettings::Completions(a.shell),
            Command::Man(a) => CommandSettings::Man(Man { out: a.out.clone() }),
            #[cfg(feature = "operator")]
            Command::Crds(a) => CommandSettings::Crds(Crds { out: a.out.clone() }),
            #[cfg(feature = "operator")]
            Command::Operator(a) => CommandSettings::Operator(Box::new(Operator::from_args(a)?)),
        })
    }

    /// Whether the command is a daemon, which logs as it is configured rather than as the
    /// one-shot commands do.
    pub(crate) fn is_daemon(&self) -> bool {
        match self {
            CommandSettings::Serve(_) | CommandSettings::Hub(_) => true,
            #[cfg(feature = "operator")]
            CommandSettings::Operator(_) => true,
            _ => false,
        }
    }
}

/// `kalypso render`.
#[derive(Debug)]
pub(crate) struct Render {
    pub(crate) control_plane: ControlPlane,
    pub(crate) env: String,
    /// The folder written.
    pub(crate) out: PathBuf,
    /// Whether the render cache is read and written (not `--no-cache`).
    pub(crate) render_cache: bool,
    /// `--force`: write into a folder that is not a GitOps tree.
    pub(crate) force: bool,
    /// What an error blocks: the environment, or with `--keep-going` its registration.
    pub(crate) isolation: Isolation,
    pub(crate) git: Git,
}

impl Render {
    fn from_args(args: &args::RenderArgs) -> Result<Render, SettingsError> {
        Ok(Render {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            env: args.env.clone(),
            out: args.out.clone(),
            render_cache: !args.no_cache,
            force: args.force,
            isolation: if args.keep_going {
                Isolation::Registration
            } else {
                Isolation::Environment
            },
            git: Git::from_args(&args.git)?,
        })
    }
}

/// `kalypso validate`.
#[derive(Debug)]
pub(crate) struct Validate {
    pub(crate) control_plane: ControlPlane,
    /// The environments named (none: every environment found).
    pub(crate) environments: Vec<String>,
    /// Warnings count as errors.
    pub(crate) strict: bool,
    pub(crate) git: Git,
}

impl Validate {
    fn from_args(args: &args::ValidateArgs) -> Result<Validate, SettingsError> {
        Ok(Validate {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            environments: args.env.clone(),
            strict: args.strict,
            git: Git::from_args(&args.git)?,
        })
    }
}

/// What `plan` and `diff` compare: a control plane's environment and the current GitOps tree.
#[derive(Debug)]
pub(crate) struct Comparison {
    pub(crate) control_plane: ControlPlane,
    pub(crate) env: String,
    /// The current GitOps tree (`--against`), as typed: a folder or `<REPO>#<BRANCH>`.
    pub(crate) against: Option<String>,
    /// The environment whose main commit is promoted (`--promote-from`), never `env`.
    pub(crate) promote_from: Option<String>,
    pub(crate) git: Git,
    /// Registry access, for `--against oci://…`.
    pub(crate) registry: kalypso_git::oci::AuthSettings,
}

impl Comparison {
    fn from_args(args: &args::ComparisonArgs) -> Result<Comparison, SettingsError> {
        if args.promote_from.as_ref() == Some(&args.env) {
            return Err(flag_error(
                "--promote-from",
                format!(
                    "{} is --env too: the environment promoted from must differ",
                    args.env
                ),
            ));
        }
        Ok(Comparison {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            env: args.env.clone(),
            against: args.against.clone(),
            promote_from: args.promote_from.clone(),
            git: Git::from_args(&args.git)?,
            registry: registry(&args.registry),
        })
    }
}

/// `kalypso plan`.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) source: Comparison,
    /// Text, Markdown or JSON.
    pub(crate) output: OutputFormat,
}

/// `kalypso explain`.
#[derive(Debug)]
pub(crate) struct Explain {
    pub(crate) control_plane: ControlPlane,
    pub(crate) env: String,
    /// The deployment target explained.
    pub(crate) target: String,
    /// Only this cluster type.
    pub(crate) cluster_type: Option<String>,
    /// The config key explained, instead of the placement.
    pub(crate) config: Option<String>,
    /// JSON instead of text (`--output markdown` prints text).
    pub(crate) json: bool,
    /// The current GitOps tree, as typed.
    pub(crate) against: Option<String>,
    pub(crate) git: Git,
}

impl Explain {
    fn from_args(args: &args::ExplainArgs) -> Result<Explain, SettingsError> {
        Ok(Explain {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            env: args.env.clone(),
            target: args.target.clone(),
            cluster_type: args.cluster_type.clone(),
            config: args.config.clone(),
            json: args.output == OutputFormat::Json,
            against: args.against.clone(),
            git: Git::from_args(&args.git)?,
        })
    }
}

/// `kalypso sync`.
#[derive(Debug)]
pub(crate) struct Sync {
    pub(crate) control_plane: ControlPlane,
    /// The environments named (none: every Environment).
    pub(crate) environments: Vec<String>,
    /// How and as whom to deliver.
    pub(crate) delivery: DeliverySettings,
    /// Deliver here instead of each GitOpsRepo's repository.
    pub(crate) gitops_repo: Option<String>,
    /// Print the result as JSON.
    pub(crate) json: bool,
    /// Also print the input commits.
    pub(crate) verbose: bool,
    pub(crate) git: Git,
    /// Registry access for `oci://` GitOpsRepos.
    pub(crate) registry: kalypso_git::oci::AuthSettings,
    /// When a delivery that removes deployment targets is held, and whether it may.
    pub(crate) mass_deletion: kalypso_git::MassDeletionSettings,
    /// The hub that gates the waves of progressive rollouts.
    pub(crate) hub: Option<HubAccess>,
}

/// The sentence that ends a held delivery's error under `kalypso sync`.
const HOW_TO_ALLOW_MASS_DELETION: &str = "run the sync again with --allow-mass-deletion.";

impl Sync {
    fn from_args(args: &args::SyncArgs) -> Result<Sync, SettingsError> {
        Ok(Sync {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            environments: args.env.clone(),
            delivery: DeliverySettings {
                mode: args.mode,
                author: author(&args.commit),
                message: args.message.clone(),
                branch_prefix: args.branch_prefix.clone(),
                github_api_url: args.github_api_url.clone(),
                provider: args.provider.provider,
                provider_api_url: args.provider.provider_api_url.clone(),
                dry_run: args.dry_run,
            },
            gitops_repo: args.gitops_repo.clone(),
            json: args.json,
            verbose: args.verbose,
            git: Git::from_args(&args.git)?,
            registry: registry(&args.registry),
            mass_deletion: kalypso_git::MassDeletionSettings {
                limit: args.mass_deletion_limit,
                allowed: if args.allow_mass_deletion {
                    kalypso_git::AllowedDeletions::All
                } else {
                    kalypso_git::AllowedDeletions::None
                },
                how_to_allow: HOW_TO_ALLOW_MASS_DELETION,
            },
            hub: args.hub.as_ref().map(|url| HubAccess {
                url: url.clone(),
                token_file: args.hub_token_file.clone(),
            }),
        })
    }
}

/// What `kalypso rollout` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RolloutAction {
    Status,
    Control(kalypso_git::rollout::Control),
}

/// `kalypso rollout`: the action, and the environment with the settings a sync of it has.
#[derive(Debug)]
pub(crate) struct Rollout {
    pub(crate) action: RolloutAction,
    pub(crate) env: String,
    /// Delivery (of `pause`, `resume`, `abort`), as a sync of the one environment.
    pub(crate) sync: Sync,
}

impl Rollout {
    fn from_command(command: &args::RolloutCommand) -> Result<Rollout, SettingsError> {
        use kalypso_git::rollout::Control;
        let (action, args) = match command {
            args::RolloutCommand::Status(a) => (RolloutAction::Status, a),
            args::RolloutCommand::Pause(a) => (RolloutAction::Control(Control::Pause), a),
            args::RolloutCommand::Resume(a) => (RolloutAction::Control(Control::Resume), a),
            args::RolloutCommand::Abort(a) => (RolloutAction::Control(Control::Abort), a),
        };
        let message = match action {
            RolloutAction::Status => kalypso_git::deliver::DEFAULT_MESSAGE.to_owned(),
            RolloutAction::Control(Control::Pause) => format!("Pause the rollout of {}", args.env),
            RolloutAction::Control(Control::Resume) => format!("Resume the rollout of {}", args.env),
            RolloutAction::Control(Control::Abort) => format!("Abort the rollout of {}", args.env),
        };
        Ok(Rollout {
            action,
            env: args.env.clone(),
            sync: Sync {
                control_plane: ControlPlane::parse(&args.control_plane)?,
                environments: vec![args.env.clone()],
                delivery: DeliverySettings {
                    mode: args.mode,
                    author: author(&args.commit),
                    message,
                    branch_prefix: args.branch_prefix.clone(),
                    github_api_url: args.github_api_url.clone(),
                    provider: args.provider.provider,
                    provider_api_url: args.provider.provider_api_url.clone(),
                    dry_run: false,
                },
                gitops_repo: args.gitops_repo.clone(),
                json: args.json,
                verbose: false,
                git: Git::from_args(&args.git)?,
                registry: kalypso_git::oci::AuthSettings::default(),
                mass_deletion: kalypso_git::MassDeletionSettings {
                    limit: kalypso_core::run::DeletionLimit::default(),
                    allowed: kalypso_git::AllowedDeletions::None,
                    how_to_allow: "run kalypso sync --allow-mass-deletion.",
                },
                hub: args.hub.as_ref().map(|url| HubAccess {
                    url: url.clone(),
                    token_file: args.hub_token_file.clone(),
                }),
            },
        })
    }
}

fn author(args: &args::CommitArgs) -> Author {
    Author {
        name: args.author_name.clone(),
        email: args.author_email.clone(),
    }
}

/// `kalypso serve`.
#[derive(Debug)]
pub(crate) struct Serve {
    /// The configuration file.
    pub(crate) config: PathBuf,
    /// The listen address, instead of the configured one.
    pub(crate) listen: Option<SocketAddr>,
    /// `--hub`, instead of the configured one.
    pub(crate) hub: Option<HubAccess>,
}

/// `kalypso promote`.
#[derive(Debug)]
pub(crate) struct Promote {
    pub(crate) control_plane: ControlPlane,
    /// The environment promoted to.
    pub(crate) env: String,
    /// Which main commit.
    pub(crate) commit: PromotedCommit,
    /// `--override-gate`: promote although the hub's gate refuses, for this reason.
    pub(crate) override_gate: Option<String>,
    /// The commit message (`{commit}` and `{environment}` replaced).
    pub(crate) message: String,
    pub(crate) author: Author,
    pub(crate) git: Git,
}

/// The main commit a promotion pins.
#[derive(Debug)]
pub(crate) enum PromotedCommit {
    /// `--commit`, else (`None`) the tip of the main branch.
    Given(Option<String>),
    /// `--from`: what another environment runs.
    From(PromoteFrom),
}

/// `promote --from SRC`: the control-plane commit SRC's GitOps branch was rendered from.
#[derive(Debug)]
pub(crate) struct PromoteFrom {
    /// SRC.
    pub(crate) env: String,
    /// `--hub`: the hub whose gate must find SRC compliant.
    pub(crate) hub: Option<HubAccess>,
    /// `--gitops-repo`: read SRC's GitOps branch from here.
    pub(crate) gitops_repo: Option<RepoUrl>,
}

/// A hub and the file holding its API token.
#[derive(Clone, Debug)]
pub(crate) struct HubAccess {
    pub(crate) url: String,
    pub(crate) token_file: Option<PathBuf>,
}

impl Promote {
    fn from_args(args: &args::PromoteArgs) -> Result<Promote, SettingsError> {
        let commit = match &args.from {
            None => PromotedCommit::Given(args.commit.clone()),
            Some(from) if *from == args.env => {
                return Err(flag_error(
                    "--from",
                    format!("{from} is the environment being promoted to"),
                ));
            }
            Some(from) => PromotedCommit::From(PromoteFrom {
                env: from.clone(),
                hub: args.hub.as_ref().map(|url| HubAccess {
                    url: url.clone(),
                    token_file: args.hub_token_file.clone(),
                }),
                gitops_repo: args
                    .gitops_repo
                    .as_deref()
                    .map(RepoUrl::parse)
                    .transpose()
                    .map_err(|e| flag_error("--gitops-repo", e.to_string()))?,
            }),
        };
        Ok(Promote {
            control_plane: ControlPlane::parse(&args.control_plane)?,
            env: args.env.clone(),
            commit,
            override_gate: args
                .override_gate
                .as_deref()
                .map(str::trim)
                .map(|r| {
                    if r.is_empty() {
                        Err(flag_error(
                            "--override-gate",
                            "give the reason for overriding the gate",
                        ))
                    } else {
                        Ok(r.to_owned())
                    }
                })
                .transpose()?,
            message: args.message.clone(),
            author: author(&args.author),
            git: Git::from_args(&args.git)?,
        })
    }
}

/// `kalypso approve`, `freeze`, `unfreeze`: an action sent to the hub.
#[derive(Debug)]
pub(crate) struct HubAction {
    pub(crate) hub: HubAccess,
    pub(crate) env: String,
    pub(crate) action: Action,
}

/// What a [`HubAction`] does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Approve `commit`.
    Approve { commit: String, comment: Option<String> },
    /// Freeze, until an RFC 3339 time or unfrozen.
    Freeze { reason: String, until: Option<String> },
    /// Unfreeze.
    Unfreeze { reason: Option<String> },
}

impl HubAction {
    fn new(args: &args::HubActionArgs, action: Action) -> Result<HubAction, SettingsError> {
        if args.env.trim().is_empty() {
            return Err(flag_error("--env", "is empty"));
        }
        if let Action::Freeze { reason, .. } = &action
            && reason.trim().is_empty()
        {
            return Err(flag_error("--reason", "give the reason for the freeze"));
        }
        Ok(HubAction {
            hub: HubAccess {
                url: args.hub.clone(),
                token_file: args.hub_token_file.clone(),
            },
            env: args.env.trim().to_owned(),
            action,
        })
    }
}

/// `--until`: an RFC 3339 time as given, or a duration from now as an RFC 3339 time.
fn until(text: &str) -> Result<String, SettingsError> {
    let text = text.trim();
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return Ok(text.to_owned());
    }
    let d = kalypso_core::duration::parse(text).map_err(|e| {
        flag_error(
            "--until",
            format!("{text:?} is neither an RFC 3339 time (2026-12-01T09:00:00Z) nor a duration (8h): {e}"),
        )
    })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let at = chrono::DateTime::from_timestamp(i64::try_from((now + d).as_secs()).unwrap_or(i64::MAX), 0)
        .ok_or_else(|| flag_error("--until", format!("{text:?} is too far away")))?;
    Ok(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// `kalypso check-promote`.
#[derive(Debug)]
pub(crate) struct CheckPromote {
    pub(crate) hub: HubAccess,
    /// The environment whose clusters must run the commit.
    pub(crate) env: String,
    /// The GitOps commit, or the control-plane commit it carries.
    pub(crate) commit: String,
    /// `--into`: the environment it would be promoted into.
    pub(crate) into: Option<String>,
    /// How long to wait.
    pub(crate) timeout: Duration,
    /// How often to ask the hub.
    pub(crate) interval: Duration,
    /// `--commit-status`: where the commit status goes.
    pub(crate) commit_status: Option<CommitStatus>,
    pub(crate) git: Git,
}

/// Where `check-promote --commit-status` sets its status.
#[derive(Debug)]
pub(crate) struct CommitStatus {
    /// The control-plane repository.
    pub(crate) url: RepoUrl,
    /// Its owner and name on GitHub (empty on the other forges, which [`Self::providers`]
    /// locates from the URL).
    pub(crate) owner: String,
    pub(crate) repo: String,
    /// The status's context, `{environment}` replaced.
    pub(crate) context: String,
    /// The GitHub API.
    pub(crate) github_api_url: String,
    /// Which forge, and its API.
    pub(crate) providers: kalypso_git::forge::ProviderSettings,
}

impl CheckPromote {
    fn from_args(args: &args::CheckPromoteArgs) -> Result<CheckPromote, SettingsError> {
        let commit_status = if args.commit_status {
            let text = args
                .control_plane
                .as_deref()
                .ok_or_else(|| flag_error("--commit-status", "needs --control-plane"))?;
            let url = RepoUrl::parse(text).map_err(|e| flag_error("--control-plane", e.to_string()))?;
            let providers = kalypso_git::forge::ProviderSettings {
                provider: args.provider.provider,
                github_api_url: args.github_api_url.clone(),
                api_url: args.provider.provider_api_url.clone(),
            };
            let provider = providers.provider_of(&url);
            let (owner, repo) = match url.forge_repo() {
                Some(slug) if provider == kalypso_git::forge::Provider::GitHub => slug,
                _ if provider != kalypso_git::forge::Provider::GitHub && !url.is_local() => {
                    Default::default()
                }
                _ => {
                    return Err(flag_error(
                        "--control-plane",
                        format!("{}: not a {provider} repository URL", url.redacted()),
                    ));
                }
            };
            Some(CommitStatus {
                url,
                owner,
                repo,
                context: args.status_context.replace("{environment}", &args.env),
                github_api_url: args.github_api_url.clone(),
                providers,
            })
        } else {
            None
        };
        Ok(CheckPromote {
            hub: HubAccess {
                url: args.hub.clone(),
                token_file: args.hub_token_file.clone(),
            },
            env: args.env.clone(),
            commit: args.commit.clone(),
            into: match &args.into {
                Some(into) if *into == args.env => {
                    return Err(flag_error(
                        "--into",
                        format!("{into} is the environment checked (--env)"),
                    ));
                }
                other => other.clone(),
            },
            timeout: duration("--timeout", &args.timeout)?,
            interval: duration("--interval", &args.interval)?,
            commit_status,
            git: Git::from_args(&args.git)?,
        })
    }
}

/// `kalypso hub`.
#[derive(Debug)]
pub(crate) struct Hub {
    pub(crate) listen: SocketAddr,
    /// The database URL.
    pub(crate) database: String,
    /// The control plane the hub follows, if any.
    pub(crate) control_plane: Option<String>,
    pub(crate) webhook_secret_file: Option<PathBuf>,
    pub(crate) api_token_file: Option<PathBuf>,
    /// The configuration file (`--config`).
    pub(crate) config: Option<PathBuf>,
    pub(crate) dashboard: DashboardMode,
    /// A cluster silent for longer is stale.
    pub(crate) stale_after: Duration,
    /// How often the GitOps branches are read again (at least every second).
    pub(crate) refresh: Duration,
    pub(crate) git: Git,
    /// Registry access for `oci://` GitOpsRepos.
    pub(crate) registry: kalypso_git::oci::AuthSettings,
    /// `--notifications`: the receivers file.
    pub(crate) notifications: Option<PathBuf>,
    /// `--max-connections`, `--idle-timeout`, `--body-timeout`.
    pub(crate) limits: kalypso_hub::Limits,
    /// `--cluster-rate`, `--cluster-burst`.
    pub(crate) cluster_rate: kalypso_hub::throttle::Rate,
}

impl Hub {
    fn from_args(args: &args::HubArgs) -> Result<Hub, SettingsError> {
        Ok(Hub {
            listen: args.listen,
            database: args.database.clone(),
            control_plane: args.control_plane.clone(),
            webhook_secret_file: args.webhook_secret_file.clone(),
            api_token_file: args.api_token_file.clone(),
            config: args.config.clone(),
            dashboard: if args.no_dashboard {
                DashboardMode::Off
            } else if args.dashboard_public {
                DashboardMode::Public
            } else {
                DashboardMode::Protected
            },
            stale_after: duration("--stale-after", &args.stale_after)?,
            refresh: duration("--refresh", &args.refresh)?.max(Duration::from_secs(1)),
            git: Git::from_args(&args.git)?,
            registry: registry(&args.registry),
            notifications: args.notifications.clone(),
            limits: kalypso_hub::Limits {
                max_connections: args.max_connections,
                idle_timeout: positive("--idle-timeout", &args.idle_timeout)?,
                body_timeout: positive("--body-timeout", &args.body_timeout)?,
            },
            cluster_rate: kalypso_hub::throttle::Rate {
                per_second: if args.cluster_rate.is_finite() && args.cluster_rate >= 0.0 {
                    args.cluster_rate
                } else {
                    return Err(flag_error(
                        "--cluster-rate",
                        format!(
                            "{} is not a number of reports a second (0 or more)",
                            args.cluster_rate
                        ),
                    ));
                },
                burst: args.cluster_burst,
            },
        })
    }
}

/// `kalypso man`.
#[derive(Debug)]
pub(crate) struct Man {
    /// Write every page into this folder instead of printing `kalypso.1`.
    pub(crate) out: Option<PathBuf>,
}

/// `kalypso crds`.
#[cfg(feature = "operator")]
#[derive(Debug)]
pub(crate) struct Crds {
    /// Write one file per CRD into this folder instead of printing them.
    pub(crate) out: Option<PathBuf>,
}

/// `kalypso operator`.
#[cfg(feature = "operator")]
#[derive(Debug)]
pub(crate) struct Operator {
    pub(crate) source: kalypso_operator::ControlPlaneFeed,
    pub(crate) health_addr: SocketAddr,
    pub(crate) metrics_addr: SocketAddr,
    /// `--leader-elect`: the Lease's name and namespace.
    pub(crate) lease: Option<(String, String)>,
    /// The leader-election timings: lease duration, renew deadline, retry period.
    pub(crate) lease_timings: (Duration, Duration, Duration),
    /// This instance's name, when given (else the host name).
    pub(crate) pod_name: Option<String>,
    pub(crate) flux: kalypso_operator::flux::FluxSettings,
    /// Write Assignment and AssignmentPackage objects.
    pub(crate) assignments: bool,
    pub(crate) debounce: Duration,
    pub(crate) resync: Duration,
    pub(crate) poll: Duration,
    /// Environments reconciled at once (at least one).
    pub(crate) concurrency: u16,
    /// When a delivery that removes deployment targets is held.
    pub(crate) mass_deletion_limit: kalypso_core::run::DeletionLimit,
    pub(crate) publisher: kalypso_operator::runtime::PublisherSettings,
    /// The log level or filter (default `info`).
    pub(crate) log_level: Option<String>,
    /// `--hub`: the gate of progressive rollouts (git source).
    pub(crate) hub: Option<HubAccess>,
}

#[cfg(feature = "operator")]
impl Operator {
    fn from_args(args: &args::OperatorArgs) -> Result<Operator, SettingsError> {
        use kalypso_operator::ControlPlaneFeed;
        Ok(Operator {
            source: match args.source {
                args::FeedArg::Flux => ControlPlaneFeed::Flux,
                args::FeedArg::External => ControlPlaneFeed::External,
                args::FeedArg::Git => ControlPlaneFeed::Git,
            },
            health_addr: address("--health-probe-bind-address", &args.health_probe_bind_address)?,
            metrics_addr: address("--metrics-bind-address", &args.metrics_bind_address)?,
            lease: args.leader_elect.then(|| {
                (
                    args.leader_election_id.clone(),
                    args.leader_election_namespace.clone(),
                )
            }),
            lease_timings: {
                let timings = (
                    duration("--leader-elect-lease-duration", &args.leader_elect_lease_duration)?,
                    duration("--leader-elect-renew-deadline", &args.leader_elect_renew_deadline)?,
                    duration("--leader-elect-retry-period", &args.leader_elect_retry_period)?,
                );
                let check = kalypso_operator::leader::LeaseSettings {
                    lease_duration: timings.0,
                    renew_deadline: timings.1,
                    retry_period: timings.2,
                    ..kalypso_operator::leader::LeaseSettings::new("", "", "")
                }
                .check();
                if let Err(message) = check {
                    return Err(flag_error("--leader-elect-renew-deadline", message));
                }
                timings
            },
            pod_name: args.pod_name.clone(),
            flux: kalypso_operator::flux::FluxSettings {
                namespace: args.flux_namespace.clone(),
                secret: Some(args.flux_secret.clone()).filter(|s| !s.is_empty()),
                interval: args.flux_interval.clone(),
                source_api_version: args.flux_source_api_version.clone(),
                kustomize_api_version: args.flux_kustomize_api_version.clone(),
            },
            assignments: args.assignments,
            debounce: duration("--debounce", &args.debounce)?,
            resync: duration("--resync", &args.resync)?,
            poll: duration("--poll", &args.poll)?,
            concurrency: args.concurrency.max(1),
            mass_deletion_limit: args.mass_deletion_limit,
            publisher: kalypso_operator::runtime::PublisherSettings {
                mode: args.delivery,
                cache_dir: args.cache_dir.clone(),
                token_env: args.token_env.clone(),
                token_file: args.token_file.clone(),
                github_api_url: args.github_api_url.clone(),
                provider: args.provider,
                provider_api_url: args.provider_api_url.clone(),
            },
            log_level: args.log_level.clone(),
            hub: args.hub.as_ref().map(|url| HubAccess {
                url: url.clone(),
                token_file: args.hub_token_file.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::{CommandFactory, FromArgMatches};

    use super::*;

    /// The settings of `kalypso <argv>`, with no environment variable read (so the defaults
    /// are the flags' own, whatever the environment of the test).
    fn settings(argv: &[&str]) -> Result<Settings, SettingsError> {
        fn without_env(command: clap::Command) -> clap::Command {
            command.mut_args(|a| a.env(None)).mut_subcommands(without_env)
        }
        let matches = without_env(Cli::command())
            .try_get_matches_from(std::iter::once("kalypso").chain(argv.iter().copied()))
            .unwrap();
        Settings::from_cli(&Cli::from_arg_matches(&matches).unwrap())
    }

    fn parse(argv: &[&str]) -> CommandSettings {
        settings(argv).unwrap().command
    }

    fn error(argv: &[&str]) -> String {
        settings(argv).unwrap_err().to_string()
    }

    const CHECK: [&str; 7] = [
        "check-promote",
        "--hub",
        "http://hub",
        "--env",
        "dev",
        "--commit",
        "abc",
    ];

    fn check_promote(more: &[&str]) -> Vec<&'static str> {
        let mut argv = CHECK.to_vec();
        argv.extend(
            more.iter()
                .map(|s| -> &'static str { Box::leak(s.to_string().into_boxed_str()) }),
        );
        argv
    }

    #[test]
    fn a_bad_value_is_refused_naming_its_flag() {
        let cases: Vec<(Vec<&str>, &str)> = vec![
            (
                check_promote(&["--timeout", "5x"]),
                r#"--timeout: invalid duration "5x": unknown unit "x" (use ms, s, m or h)"#,
            ),
            (check_promote(&["--interval", ""]), "--interval: empty duration"),
            (
                vec!["hub", "--stale-after", "soon"],
                r#"--stale-after: invalid duration "soon": expected a number at "soon""#,
            ),
            (
                vec!["hub", "--refresh", "1d"],
                r#"--refresh: invalid duration "1d": unknown unit "d" (use ms, s, m or h)"#,
            ),
            (
                vec!["render", "cp", "--env", "dev", "--out", "o", "--backoff", "2x"],
                r#"--backoff: invalid duration "2x": unknown unit "x" (use ms, s, m or h)"#,
            ),
            (
                vec!["sync", "cp", "--backoff=-1s"],
                r#"--backoff: invalid duration "-1s": expected a number at "-1s""#,
            ),
            (
                vec!["plan", "cp", "--env", "dev", "--promote-from", "dev"],
                "--promote-from: dev is --env too: the environment promoted from must differ",
            ),
            (
                vec!["promote", "--env", "dev", "--from", "dev"],
                "--from: dev is the environment being promoted to",
            ),
            (
                vec![
                    "promote",
                    "--env",
                    "dev",
                    "--from",
                    "stage",
                    "--gitops-repo",
                    "ftp://host/x",
                ],
                r#"--gitops-repo: invalid repository URL ftp://host/x: unsupported scheme "ftp""#,
            ),
            (
                check_promote(&["--commit-status", "--control-plane", "/srv/control-plane"]),
                "--control-plane: /srv/control-plane: not a GitHub repository URL",
            ),
            (vec!["validate", " "], "control plane: empty repository location"),
            (
                vec!["--limit", "nope=1", "validate", "cp"],
                "unknown limit \"nope\"; the limits are template-output, template-alloc, template-steps, \
                 template-depth, data-depth, render-output, yaml-depth, yaml-document-size, yaml-alias-nodes",
            ),
            (
                vec!["--limit", "yaml-depth", "validate", "cp"],
                r#"limit "yaml-depth" is not NAME=VALUE (e.g. template-output=128M)"#,
            ),
        ];
        #[cfg(feature = "operator")]
        let cases = {
            let mut cases = cases;
            cases.push((
                vec!["operator", "--health-probe-bind-address", "nope"],
                r#"--health-probe-bind-address: invalid address "nope": invalid socket address syntax"#,
            ));
            cases.push((
                vec!["operator", "--metrics-bind-address", ":http"],
                r#"--metrics-bind-address: invalid address ":http": invalid socket address syntax"#,
            ));
            cases.push((
                vec!["operator", "--poll", "often"],
                r#"--poll: invalid duration "often": expected a number at "often""#,
            ));
            cases
        };
        for (argv, expected) in cases {
            assert_eq!(error(&argv), expected, "kalypso {}", argv.join(" "));
        }
    }

    /// What clap says about `kalypso <argv>` (values typed in `args`, refused before settings).
    fn refused(argv: &[&str]) -> String {
        Cli::command()
            .try_get_matches_from(std::iter::once("kalypso").chain(argv.iter().copied()))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn typed_flags_refuse_unknown_values_naming_the_flag() {
        let error = refused(&["--log-format", "xml", "validate", "cp"]);
        assert!(
            error.contains("'xml'") && error.contains("--log-format"),
            "{error}"
        );
        assert!(error.contains("[possible values: text, json]"), "{error}");
        #[cfg(feature = "operator")]
        {
            // The operator's delivery mode is typed as sync's is (it was a string checked at start).
            let error = refused(&["operator", "--delivery", "fax"]);
            assert!(
                error.contains("'fax'")
                    && error.contains("--delivery")
                    && error.contains("unknown delivery mode"),
                "{error}"
            );
        }
    }

    #[test]
    fn defaults() {
        let Settings { global, command } = settings(&["render", "cp", "--env", "dev", "--out", "o"]).unwrap();
        assert_eq!(global.threads, None);
        assert!(!global.quiet);
        assert_eq!(global.limits, Limits::default());
        assert_eq!(global.color, ColorChoice::Auto);
        assert_eq!(global.log_format(LogFormat::Json), LogFormat::Json);
        let CommandSettings::Render(render) = command else {
            panic!("not render: {command:?}");
        };
        assert_eq!(render.control_plane.text, "cp");
        assert_eq!(render.control_plane.url.plain_path(), Some(Path::new("cp")));
        assert_eq!(render.out, PathBuf::from("o"));
        assert!(render.render_cache);
        assert!(!render.force);
        assert_eq!(render.isolation, Isolation::Environment);
        let git = &render.git;
        assert_eq!(git.cache_dir_given(), None);
        assert_eq!(git.main_branch, "main");
        assert_eq!(git.auth.token_env.as_deref(), Some("GITHUB_AUTH_TOKEN"));
        assert_eq!(
            git.retry,
            RetryPolicy {
                attempts: 5,
                initial_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(30),
            }
        );

        let CommandSettings::CheckPromote(check) = parse(&CHECK) else {
            panic!("not check-promote");
        };
        assert_eq!(check.timeout, Duration::from_secs(30 * 60));
        assert_eq!(check.interval, Duration::from_secs(10));
        assert!(check.commit_status.is_none());

        let CommandSettings::Hub(hub) = parse(&["hub"]) else {
            panic!("not hub");
        };
        assert_eq!(hub.stale_after, Duration::from_secs(30 * 60));
        assert_eq!(hub.refresh, Duration::from_secs(30));
        assert_eq!(hub.dashboard, DashboardMode::Protected);
        assert_eq!(hub.listen.to_string(), kalypso_hub::DEFAULT_LISTEN);
        assert_eq!(hub.limits, kalypso_hub::Limits::default());
        let CommandSettings::Hub(hub) = parse(&["hub", "--max-connections", "10", "--idle-timeout", "5s"])
        else {
            panic!("not hub");
        };
        assert_eq!(hub.limits.max_connections, 10);
        assert_eq!(hub.limits.idle_timeout, Duration::from_secs(5));
        assert_eq!(hub.cluster_rate, kalypso_hub::throttle::Rate::default());
        let negative = error(&["hub", "--cluster-rate=-1"]);
        assert!(negative.contains("--cluster-rate"), "{negative}");
        let zero = error(&["hub", "--body-timeout", "0s"]);
        assert!(
            zero.contains("--body-timeout") && zero.contains("positive"),
            "{zero}"
        );

        let CommandSettings::Plan(plan) = parse(&["plan", "cp", "--env", "dev"]) else {
            panic!("not plan");
        };
        assert_eq!(plan.output, OutputFormat::Text);
        assert_eq!(plan.source.against, None);
        assert_eq!(plan.source.promote_from, None);
    }

    #[cfg(feature = "operator")]
    #[test]
    fn operator_defaults_are_the_original_deployment_s() {
        let CommandSettings::Operator(operator) = parse(&["operator"]) else {
            panic!("not operator");
        };
        assert_eq!(operator.health_addr, SocketAddr::from(([0, 0, 0, 0], 8081)));
        assert_eq!(operator.metrics_addr, SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert_eq!(operator.source, kalypso_operator::ControlPlaneFeed::Flux);
        assert_eq!(operator.lease, None);
        assert_eq!(operator.debounce, Duration::from_secs(3));
        assert_eq!(operator.resync, Duration::from_secs(300));
        assert_eq!(operator.poll, Duration::from_secs(60));
        assert_eq!(operator.concurrency, 4);
        assert_eq!(operator.flux.secret.as_deref(), Some("gh-repo-secret"));
        assert!(operator.assignments);

        let CommandSettings::Operator(operator) = parse(&[
            "operator",
            "--health-probe-bind-address",
            "127.0.0.1:9",
            "--leader-elect",
            "--concurrency",
            "0",
            "--flux-secret",
            "",
            "--assignments",
            "false",
        ]) else {
            panic!("not operator");
        };
        assert_eq!(operator.health_addr, SocketAddr::from(([127, 0, 0, 1], 9)));
        assert_eq!(
            operator.lease,
            Some(("kalypso-scheduler".to_owned(), "default".to_owned()))
        );
        assert_eq!(operator.concurrency, 1);
        assert_eq!(operator.flux.secret, None);
        assert!(!operator.assignments);
    }

    #[test]
    fn flags_become_settings() {
        let Settings { global, command } = settings(&[
            "--quiet",
            "--threads",
            "3",
            "--color",
            "never",
            "--log-format",
            "json",
            "--limit",
            "template-output=1K, yaml-depth=5",
            "--limit",
            "data-depth=7",
            "render",
            "cp",
            "--env",
            "dev",
            "--out",
            "o",
            "--no-cache",
            "--force",
            "--keep-going",
            "--retries",
            "0",
            "--backoff",
            "500ms",
            "--cache-dir",
            "/c",
            "--main-branch",
            "trunk",
        ])
        .unwrap();
        assert!(global.quiet);
        assert_eq!(global.threads, Some(3));
        assert_eq!(global.color, ColorChoice::Never);
        assert_eq!(global.log_format(LogFormat::Text), LogFormat::Json);
        assert_eq!(global.limits.template_output, 1024);
        assert_eq!(global.limits.yaml_depth, 5);
        assert_eq!(global.limits.data_depth, 7);
        let CommandSettings::Render(render) = command else {
            panic!("not render");
        };
        assert!(!render.render_cache);
        assert!(render.force);
        assert_eq!(render.isolation, Isolation::Registration);
        assert_eq!(render.git.retry.attempts, 1, "at least one attempt");
        assert_eq!(render.git.retry.initial_backoff, Duration::from_millis(500));
        assert_eq!(render.git.retry.max_backoff, Duration::from_secs(30));
        assert_eq!(render.git.cache_dir_given(), Some(Path::new("/c")));
        assert_eq!(render.git.cache_dir(), PathBuf::from("/c"));
        assert_eq!(render.git.main_branch, "trunk");

        let CommandSettings::Validate(validate) = parse(&[
            "validate",
            "cp",
            "--env",
            "a",
            "--env",
            "b",
            "--strict",
            "--backoff",
            "1m",
        ]) else {
            panic!("not validate");
        };
        assert_eq!(validate.environments, ["a", "b"]);
        assert!(validate.strict);
        assert_eq!(
            validate.git.retry.max_backoff,
            Duration::from_secs(60),
            "a long backoff is its own cap"
        );

        for (output, json) in [("text", false), ("markdown", false), ("json", true)] {
            let CommandSettings::Explain(explain) = parse(&[
                "explain", "cp", "--env", "dev", "--target", "t", "--output", output,
            ]) else {
                panic!("not explain");
            };
            assert_eq!(explain.json, json, "--output {output}");
        }

        let CommandSettings::Sync(sync) = parse(&[
            "sync",
            "https://github.com/org/cp",
            "--env",
            "dev",
            "--mode",
            "push",
            "--dry-run",
            "--json",
            "--author-name",
            "bot",
        ]) else {
            panic!("not sync");
        };
        assert_eq!(sync.environments, ["dev"]);
        assert_eq!(sync.delivery.mode, kalypso_git::Mode::Push);
        assert!(sync.delivery.dry_run);
        assert_eq!(sync.delivery.author.name, "bot");
        assert!(sync.json);
        assert!(!sync.verbose);

        let CommandSettings::CheckPromote(check) = parse(&check_promote(&[
            "--timeout",
            "1h30m",
            "--commit-status",
            "--control-plane",
            "https://github.com/org/cp",
            "--status-context",
            "deployed/{environment}",
        ])) else {
            panic!("not check-promote");
        };
        assert_eq!(check.timeout, Duration::from_secs(5400));
        let status = check.commit_status.as_ref().unwrap();
        assert_eq!((status.owner.as_str(), status.repo.as_str()), ("org", "cp"));
        assert_eq!(status.context, "deployed/dev");

        let CommandSettings::Hub(hub) = parse(&["hub", "--refresh", "100ms", "--no-dashboard"]) else {
            panic!("not hub");
        };
        assert_eq!(hub.refresh, Duration::from_secs(1), "at least a second");
        assert_eq!(hub.dashboard, DashboardMode::Off);
        let CommandSettings::Hub(hub) = parse(&["hub", "--dashboard-public"]) else {
            panic!("not hub");
        };
        assert_eq!(hub.dashboard, DashboardMode::Public);

        let CommandSettings::Promote(promote) = parse(&[
            "promote",
            "--env",
            "prod",
            "--from",
            "stage",
            "--hub",
            "http://hub",
            "--gitops-repo",
            "/srv/gitops",
        ]) else {
            panic!("not promote");
        };
        let PromotedCommit::From(from) = &promote.commit else {
            panic!("not --from");
        };
        assert_eq!(from.env, "stage");
        assert_eq!(from.hub.as_ref().map(|h| h.url.as_str()), Some("http://hub"));
        assert!(from.gitops_repo.as_ref().is_some_and(RepoUrl::is_local));
        assert_eq!(promote.control_plane.text, ".");
        let CommandSettings::Promote(promote) = parse(&["promote", "--env", "prod", "--commit", "abc"])
        else {
            panic!("not promote");
        };
        assert!(matches!(&promote.commit, PromotedCommit::Given(Some(c)) if c == "abc"));

        assert!(parse(&["serve"]).is_daemon());
        assert!(parse(&["hub"]).is_daemon());
        assert!(!parse(&["validate", "cp"]).is_daemon());
    }

    /// Every environment variable the command line reads, by command and flag: the settings
    /// take whatever clap read from them, so this list is the whole of it.
    #[test]
    fn environment_variables_are_the_documented_ones() {
        fn collect(command: &clap::Command, path: &str, out: &mut Vec<String>) {
            for arg in command.get_arguments() {
                // Global flags are listed once, at the top.
                if let Some(env) = arg.get_env()
                    && (path.is_empty() || !arg.is_global_set())
                {
                    out.push(format!("{path} --{} {}", arg.get_id(), env.to_string_lossy()));
                }
            }
            for sub in command.get_subcommands() {
                collect(sub, sub.get_name(), out);
            }
        }
        let mut found = Vec::new();
        collect(&Cli::command(), "", &mut found);
        let git = ["cache_dir KALYPSO_CACHE_DIR"];
        let mut expected: Vec<String> = [
            " --threads KALYPSO_THREADS",
            " --limits KALYPSO_LIMITS",
            " --log_format KALYPSO_LOG_FORMAT",
            "serve --config KALYPSO_CONFIG",
            "sync --github_api_url KALYPSO_GITHUB_API_URL",
            "sync --provider KALYPSO_PROVIDER",
            "sync --provider_api_url KALYPSO_PROVIDER_API_URL",
            "check-promote --hub KALYPSO_HUB_URL",
            "approve --hub KALYPSO_HUB_URL",
            "freeze --hub KALYPSO_HUB_URL",
            "unfreeze --hub KALYPSO_HUB_URL",
            "check-promote --github_api_url KALYPSO_GITHUB_API_URL",
            "check-promote --provider KALYPSO_PROVIDER",
            "check-promote --provider_api_url KALYPSO_PROVIDER_API_URL",
            "hub --database KALYPSO_HUB_DATABASE",
            "hub --config KALYPSO_HUB_CONFIG",
            "sync --hub KALYPSO_HUB_URL",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for command in [
            "render",
            "validate",
            "plan",
            "diff",
            "explain",
            "sync",
            "promote",
            "check-promote",
            "hub",
        ] {
            expected.extend(git.iter().map(|g| format!("{command} --{g}")));
        }
        // `kalypso rollout status|pause|resume|abort`: a sync's git, forge and hub settings.
        for command in ["status", "pause", "resume", "abort"] {
            expected.extend(git.iter().map(|g| format!("{command} --{g}")));
            expected.extend(
                [
                    "github_api_url KALYPSO_GITHUB_API_URL",
                    "provider KALYPSO_PROVIDER",
                    "provider_api_url KALYPSO_PROVIDER_API_URL",
                    "hub KALYPSO_HUB_URL",
                ]
                .iter()
                .map(|e| format!("{command} --{e}")),
            );
        }
        // Registry access for oci:// GitOps repositories (the token's own variable,
        // KALYPSO_REGISTRY_TOKEN, is read by kalypso-oci, not by clap: its value is never shown).
        let registry = [
            "registry_config KALYPSO_REGISTRY_CONFIG",
            "registry_username KALYPSO_REGISTRY_USERNAME",
        ];
        for command in ["plan", "diff", "sync", "hub"] {
            expected.extend(registry.iter().map(|r| format!("{command} --{r}")));
        }
        if cfg!(feature = "operator") {
            expected.extend(
                [
                    "operator --source KALYPSO_SOURCE",
                    "operator --leader_election_namespace POD_NAMESPACE",
                    "operator --pod_name POD_NAME",
                    "operator --cache_dir KALYPSO_CACHE_DIR",
                    "operator --log_level KALYPSO_LOG_LEVEL",
                ]
                .iter()
                .map(|s| (*s).to_owned()),
            );
        }
        found.sort();
        expected.sort();
        assert_eq!(found, expected);
    }
}
