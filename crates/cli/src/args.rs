//! The command line as clap parses it: the raw layer, with every flag, its help text and its
//! environment variable. `--help`, the shell completions and the manual pages are generated
//! from these types. Nothing here is validated beyond what clap checks: [`crate::settings`]
//! turns these into the settings the commands run with.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};
use clap_complete::Shell;
use kalypso_git::Mode;
use kalypso_git::forge::Provider;
use kalypso_git::promote;
pub(crate) use kalypso_server::config::LogFormat;

/// Turns a platform team's fleet model into the GitOps repositories that clusters pull from.
///
/// A control plane is a folder (or git repository) with a `main/` branch folder holding
/// Templates and WorkloadRegistrations, one folder per environment branch (`dev/`, `stage/`...)
/// holding ClusterTypes, SchedulingPolicies and ConfigMaps, and `workloads/<registration>/`
/// folders holding the Workloads each registration points at.
#[derive(Debug, Parser)]
#[command(name = "kalypso", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// Number of worker threads (default: one per CPU).
    #[arg(long, global = true, env = "KALYPSO_THREADS", value_name = "N")]
    pub(crate) threads: Option<usize>,
    /// Print only errors.
    #[arg(short, long, global = true)]
    pub(crate) quiet: bool,
    /// Raise (or lower) a limit on templates or YAML, e.g. `--limit template-output=256M`
    /// (repeatable; KALYPSO_LIMITS takes a comma-separated list). The limits and their
    /// defaults: template-output 64M, template-alloc 256M, template-steps 10000000,
    /// template-depth 100000, data-depth 1000, render-output 4G, yaml-depth 100,
    /// yaml-document-size 8M, yaml-alias-nodes 100000.
    #[arg(
        long = "limit",
        global = true,
        env = "KALYPSO_LIMITS",
        value_name = "NAME=VALUE",
        value_delimiter = ','
    )]
    pub(crate) limits: Vec<String>,
    /// When to colour output and logs: `auto` on a terminal, unless `NO_COLOR` is set (or
    /// `CLICOLOR_FORCE` asks for colour anyway).
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub(crate) color: ColorChoice,
    /// Log format on standard error (default: `text`; `json` for `serve`, `hub` and
    /// `operator`, or as `serve`'s configuration says).
    #[arg(
        long,
        global = true,
        value_parser = log_formats(),
        value_name = "FORMAT",
        env = "KALYPSO_LOG_FORMAT"
    )]
    pub(crate) log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Render an environment's platform GitOps tree into a folder.
    ///
    /// If OUT already holds a GitOps tree, the original scheduler's update rules apply: root
    /// files and dot-folders are kept, folders of cluster types and deployment targets that are
    /// no longer scheduled are deleted, everything else is written. Only files whose content
    /// changes are touched. If anything fails, OUT is left exactly as it was and every problem
    /// is listed.
    ///
    /// OUT must be missing, empty or a GitOps tree (else the render is refused; `--force`
    /// overrides). A new tree is built beside OUT and renamed into place; an update stages
    /// the changed files beside OUT and writes a journal (`.<OUT>.kalypso-journal`) before it
    /// moves them in, one rename per file. Killed before that, OUT is as it was; killed while
    /// moving them, OUT holds some new files and some old until the next kalypso command on
    /// OUT (`render`, or `plan`/`diff`/`explain --against OUT`) finishes the update first.
    /// Other programs should read OUT after the render has exited. One kalypso at a time may
    /// use OUT (a lock file `.<OUT>.kalypso-lock` beside it).
    Render(RenderArgs),
    /// Check a control plane without writing anything; the exit code tells the result.
    ///
    /// Runs the whole pipeline (loading, scheduling, config merging, schema validation and
    /// rendering) for each environment and reports every problem with its file, object and
    /// field. Usable as a pull-request check.
    Validate(ValidateArgs),
    /// Show what rendering would change in a GitOps tree, assignment by assignment.
    ///
    /// Compares the tree the control plane produces with the current GitOps tree: assignments
    /// added, removed, moved between cluster types and changed (which files, and for config
    /// which keys, with old and new values), assignments that changed alike grouped together.
    /// `--promote-from SRC` plans promoting SRC's main commit to ENV. `--output markdown` is
    /// meant as a pull-request comment, `--output json` for machines.
    /// Exit code 0: no change, 2: changes, 1: error.
    Plan(PlanArgs),
    /// Show what rendering would change in a GitOps tree, as a unified diff of files.
    ///
    /// Takes the same sources as `plan`. The diff is in git's format (`git apply` takes it),
    /// colored on a terminal. Exit code 0: no change, 2: changes, 1: error.
    Diff(DiffArgs),
    /// Explain why a deployment target is (or is not) on a cluster type, or where a config
    /// value comes from.
    ///
    /// For each scheduling policy: whether it selects the target and each cluster type, with
    /// the label values that made every selector term hold or fail. With `--config KEY` (and
    /// `--cluster-type`): every ConfigMap that contributed to the value, in merge order, the
    /// ones that did not apply and why, and the final value.
    Explain(ExplainArgs),
    /// Deliver environments from a control plane in git to their GitOps repositories.
    ///
    /// Reads each environment's branch, the main branch at the commit its BaseRepo `main`
    /// pins (else the tip), and the workload repositories its registrations point at; renders;
    /// and delivers the tree on top of the GitOps branch: a commit (`--mode push`, the default
    /// for local GitOps repositories) or a branch and a pull request (`--mode pr`, the default
    /// otherwise). Nothing is written when the tree is unchanged. Failures are reported (as
    /// GitHub issues in `pr` mode) and nothing is delivered; the exit code is then 1.
    Sync(SyncArgs),
    /// Run the daemon: poll the control plane (and accept GitHub push webhooks), re-render
    /// environments whose input commits changed, and deliver them.
    ///
    /// Serves /healthz, /readyz, /metrics (Prometheus), /status (per environment: the last
    /// result, and the errors of a failed render) and /webhook; logs JSON;
    /// stops gracefully on SIGTERM or ctrl-c. Configured by a kalypso.yaml file.
    Serve(ServeArgs),
    /// Promote a main-branch commit to an environment: pin it in the environment branch's
    /// BaseRepo `main` (base-repo.yaml), as the promotion workflow's CD step does.
    ///
    /// With `--from ENV` the commit is the control-plane commit that ENV's GitOps branch was
    /// rendered from (its `Promoted_Commit_Id`); with `--hub URL` as well, the promotion is
    /// refused unless every cluster of ENV runs that GitOps commit. See docs/promotion.md.
    Promote(PromoteArgs),
    /// Wait until every cluster of an environment runs a GitOps commit, as reported to the
    /// hub (`kalypso hub`): the gate of the promotion flow.
    ///
    /// Asks the hub until every registered, non-stale cluster whose cluster type is in the
    /// commit reports it compliant (exit 0), a cluster reports a failure (exit 1, naming the
    /// cluster and its reconciler's message) or the timeout passes (exit 3). Prints progress
    /// (`7/9 clusters compliant, waiting for drone-2, large-1`); `--commit-status` mirrors
    /// the result as a GitHub commit status on the control-plane commit.
    CheckPromote(CheckPromoteArgs),
    /// Approve the promotion of a control-plane commit into an environment, as the identity
    /// the hub's token gives (the same identity approving twice counts once).
    ///
    /// Needed when the environment's PromotionPolicy asks for approvals; recorded in the hub's
    /// audit log with the comment. See docs/promotion.md.
    Approve(ApproveArgs),
    /// Freeze an environment ("stop the line"): no promotion into it (`promote --from --hub`,
    /// `check-promote --into`) until it is unfrozen or --until passes.
    ///
    /// Recorded in the hub's audit log with who froze it and why.
    Freeze(FreezeArgs),
    /// Unfreeze an environment: lift every freeze in force (recorded in the hub's audit log).
    Unfreeze(UnfreezeArgs),
    /// Show or steer an environment's progressive rollout (its RolloutPolicy's waves).
    ///
    /// `status` reads the rollout's state from the environment's GitOps branch (with `--hub`,
    /// also how each delivered wave's clusters run it and what the next sync would do);
    /// `pause`, `resume` and `abort` write it there, in a commit as `sync` delivers (`abort`
    /// also gives the delivered waves their previous content back). See docs/rollout.md.
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Run the Deployment Observability Hub: clusters report their GitOps compliance (Flux
    /// events, generic JSON), the hub correlates it with the platform GitOps history and
    /// answers queries and promotion gates.
    ///
    /// Stores everything in SQLite (default) or PostgreSQL; serves /api/v1, /healthz and
    /// /readyz; stops gracefully on SIGTERM or ctrl-c. See docs/hub.md.
    Hub(Box<HubArgs>),
    /// Print the CustomResourceDefinitions of every scheduler.kalypso.io kind (YAML).
    ///
    /// Generated from the same Rust types the operator uses, and field-compatible with the
    /// original scheduler's CRDs. Apply them with `kalypso crds | kubectl apply --server-side -f -`.
    #[cfg(feature = "operator")]
    Crds(CrdsArgs),
    /// Run as a Kubernetes operator: a drop-in replacement for the original scheduler.
    ///
    /// Watches the scheduler.kalypso.io objects of every environment namespace, keeps the Flux
    /// objects of Environments, BaseRepos and WorkloadRegistrations, schedules and renders each
    /// environment in memory, writes DeploymentTargets and status conditions, and delivers the
    /// GitOps tree as pull requests or pushes. See docs/operator.md.
    #[cfg(feature = "operator")]
    Operator(Box<OperatorArgs>),
    /// Print the shell completion script of bash, zsh, fish, powershell or elvish.
    ///
    /// Load it in the current shell with e.g. `source <(kalypso completions bash)`, or install
    /// it where the shell looks for completions (`kalypso completions zsh > ~/.zfunc/_kalypso`,
    /// `kalypso completions fish > ~/.config/fish/completions/kalypso.fish`).
    Completions(CompletionsArgs),
    /// Print the manual page (roff), or write one page per command with `--out DIR`.
    ///
    /// Read it with `kalypso man | man -l -`; install the pages with
    /// `kalypso man --out /usr/local/share/man/man1`.
    Man(ManArgs),
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// For people.
    Text,
    /// For machines.
    Json,
    /// For pull-request comments.
    Markdown,
}

/// When to color output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set; also when `CLICOLOR_FORCE` is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// The control plane and GitOps tree to compare.
#[derive(Debug, Args)]
pub(crate) struct ComparisonArgs {
    /// The control plane: a folder (`main/`, `<env>/`, `workloads/`), or a git repository
    /// (a local path, `file://`, `https://`, `ssh://` or `git@host:` URL) read as `sync` reads
    /// it.
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// The current GitOps tree: a folder, or `<REPO>#<BRANCH>` for a branch of a git
    /// repository (path or URL). Default: the environment's GitOpsRepo, when it is a local
    /// path or `file://` URL. A folder is read under its render lock, after an update a
    /// killed render left unfinished in it is finished.
    #[arg(long, value_name = "GITOPS")]
    pub(crate) against: Option<String>,
    /// Plan the promotion of the main commit environment SRC has promoted (its BaseRepo
    /// `main` pin, else main's tip) to ENV; SRC `main` (the main branch) plans pinning main's
    /// tip into ENV, the flow's first step. See docs/plan-and-explain.md.
    #[arg(long, value_name = "SRC")]
    pub(crate) promote_from: Option<String>,
    #[command(flatten, next_help_heading = "Git options")]
    pub(crate) git: GitArgs,
    #[command(flatten, next_help_heading = "Registry options (oci:// GitOps repositories)")]
    pub(crate) registry: RegistryArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    #[command(flatten)]
    pub(crate) source: ComparisonArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub(crate) output: OutputFormat,
}

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    #[command(flatten)]
    pub(crate) source: ComparisonArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ExplainArgs {
    /// The control plane: a folder, or a git repository (path or URL).
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// The deployment target (e.g. `hello-world-app-functional-test`).
    #[arg(long, value_name = "DT")]
    pub(crate) target: String,
    /// Only this cluster type.
    #[arg(long, value_name = "CT")]
    pub(crate) cluster_type: Option<String>,
    /// Explain this config key of one assignment: the target's only cluster type, or the one
    /// named with --cluster-type.
    #[arg(long, value_name = "KEY")]
    pub(crate) config: Option<String>,
    /// Output format (`markdown` prints text).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub(crate) output: OutputFormat,
    /// The current GitOps tree (a folder, or `<REPO>#<BRANCH>`), which the `Steady`
    /// prioritizer keeps targets on.
    #[arg(long, value_name = "TREE")]
    pub(crate) against: Option<String>,
    #[command(flatten, next_help_heading = "Git options")]
    pub(crate) git: GitArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// The control plane: a folder (`main/`, `<env>/`, `workloads/`), or a git repository
    /// (a local clone, `file://`, `https://`, `ssh://` or `git@host:` URL) read as `sync`
    /// reads it.
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// The environment to render (e.g. `dev`).
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// The folder to write the GitOps tree into (created if missing).
    #[arg(long, value_name = "OUT")]
    pub(crate) out: PathBuf,
    /// Render every assignment and compare every file, without reading or writing the render
    /// cache (kept in --cache-dir, default `$XDG_CACHE_HOME/kalypso` or `~/.cache/kalypso`),
    /// which lets a render skip assignments whose inputs and files are unchanged.
    #[arg(long)]
    pub(crate) no_cache: bool,
    /// Write into OUT even if it is neither empty nor a GitOps tree: its folders that are not
    /// scheduled cluster types are deleted (root files and dot-folders are kept).
    #[arg(long)]
    pub(crate) force: bool,
    /// When a WorkloadRegistration's workloads fail (their files, or the assignments of their
    /// deployment targets), write the rest of the environment anyway and keep their folders in
    /// OUT as they are, as `sync` and `serve` do; the exit code is still 1. Errors of the
    /// environment as a whole (a ClusterType, a Template, a platform ConfigMap) still write
    /// nothing.
    #[arg(long)]
    pub(crate) keep_going: bool,
    #[command(flatten, next_help_heading = "Git options")]
    pub(crate) git: GitArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// The control plane: a folder, or a git repository (a local clone or URL) read as `sync`
    /// reads it.
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// Environments to check (repeatable; default: every environment found).
    #[arg(long, value_name = "ENV")]
    pub(crate) env: Vec<String>,
    /// Treat warnings (such as ConfigMaps that silently override each other, or policies that
    /// select nothing) as errors.
    #[arg(long)]
    pub(crate) strict: bool,
    #[command(flatten, next_help_heading = "Git options")]
    pub(crate) git: GitArgs,
}

/// The log formats `--log-format` takes (the type is `serve`'s configuration's, so that the
/// flag and `log.format` are one setting), each with its help.
fn log_formats() -> impl clap::builder::TypedValueParser<Value = LogFormat> {
    let help = |format: LogFormat| match format {
        LogFormat::Text => "Human-readable lines",
        LogFormat::Json => "One JSON object per line, for log collectors",
    };
    clap::builder::PossibleValuesParser::new(
        LogFormat::NAMES.map(|(format, name)| clap::builder::PossibleValue::new(name).help(help(format))),
    )
    .try_map(|name| name.parse::<LogFormat>())
}

/// Where git credentials and the cache come from.
#[derive(Debug, Args)]
pub(crate) struct GitArgs {
    /// Folder for caches reused between runs: mirrors of remote repositories (default:
    /// `~/.cache/kalypso/git`) and `render`'s render cache (default: `~/.cache/kalypso`).
    #[arg(long, env = "KALYPSO_CACHE_DIR", value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Environment variable holding the HTTPS token for git and GitHub.
    #[arg(long, value_name = "VAR", default_value = kalypso_git::auth::DEFAULT_TOKEN_ENV)]
    pub(crate) token_env: String,
    /// File holding the HTTPS token (instead of the variable).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Private SSH key for ssh:// and git@ URLs (default: the SSH agent).
    #[arg(long, value_name = "FILE")]
    pub(crate) ssh_key: Option<PathBuf>,
    /// The control plane's main branch.
    #[arg(long, value_name = "BRANCH", default_value = kalypso_git::control_plane::DEFAULT_MAIN_BRANCH)]
    pub(crate) main_branch: String,
    /// Attempts for each network operation.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) retries: u32,
    /// Wait before the first retry (doubling up to 30s): `500ms`, `2s`.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub(crate) backoff: String,
}

/// Registry access for `oci://` GitOps repositories.
#[derive(Debug, Args)]
pub(crate) struct RegistryArgs {
    /// Docker config file with registry credentials, as `docker login` writes it (default:
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`).
    #[arg(long, env = "KALYPSO_REGISTRY_CONFIG", value_name = "FILE")]
    pub(crate) registry_config: Option<PathBuf>,
    /// User name of the registry token (for every registry, instead of the Docker config).
    #[arg(long, env = kalypso_git::oci::USERNAME_ENV, value_name = "USER")]
    pub(crate) registry_username: Option<String>,
    /// File holding the registry token or password (default: the variable
    /// KALYPSO_REGISTRY_TOKEN, when set).
    #[arg(long, value_name = "FILE")]
    pub(crate) registry_token_file: Option<PathBuf>,
    /// A registry reached over plain HTTP (repeatable); registries on loopback (`localhost`,
    /// `127.0.0.1`) always are, every other one over HTTPS.
    #[arg(long, value_name = "HOST[:PORT]")]
    pub(crate) insecure_registry: Vec<String>,
}

/// Commit author and message.
#[derive(Debug, Args)]
pub(crate) struct CommitArgs {
    /// Commit author name.
    #[arg(long, value_name = "NAME", default_value = kalypso_git::deliver::DEFAULT_AUTHOR_NAME)]
    pub(crate) author_name: String,
    /// Commit author e-mail.
    #[arg(long, value_name = "EMAIL", default_value = kalypso_git::deliver::DEFAULT_AUTHOR_EMAIL)]
    pub(crate) author_email: String,
}

#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// The control plane: a git URL (https://, ssh://, git@host:..., file://) or a local
    /// repository path.
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// Environments to deliver (repeatable; default: every Environment on the main branch).
    #[arg(long, value_name = "ENV")]
    pub(crate) env: Vec<String>,
    /// `pr`: a branch and a pull request per change (as the original); `push`: a commit on
    /// the GitOps branch; `auto`: `push` for local GitOps repositories, `pr` otherwise.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub(crate) mode: Mode,
    /// Deliver to this repository instead of each GitOpsRepo's spec.repo.
    #[arg(long, value_name = "URL")]
    pub(crate) gitops_repo: Option<String>,
    /// Compute what would be delivered; write nothing, call no API.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Deliver even when the delivery removes more deployment targets than
    /// --mass-deletion-limit allows (such a delivery is otherwise held: nothing is pushed,
    /// the environment fails with a `mass-deletion` error and exit code 3).
    #[arg(long)]
    pub(crate) allow_mass_deletion: bool,
    /// When a delivery that removes deployment-target folders is held: `default` (all of
    /// them, or more than half when a GitOps branch has more than ten), or a percentage of
    /// the folders the branch has (`20%`; `100%` never holds).
    #[arg(long, value_name = "LIMIT", default_value = "default")]
    pub(crate) mass_deletion_limit: kalypso_core::run::DeletionLimit,
    /// GitHub API base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, env = "KALYPSO_GITHUB_API_URL", value_name = "URL", default_value = kalypso_git::github::DEFAULT_API_URL)]
    pub(crate) github_api_url: String,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    /// Prefix of the pull-request branches (`kalypso/` gives `kalypso/<branch>/<tree>`).
    #[arg(long, value_name = "PREFIX", default_value = kalypso_git::deliver::DEFAULT_BRANCH_PREFIX)]
    pub(crate) branch_prefix: String,
    /// Commit message.
    #[arg(long, value_name = "TEXT", default_value = kalypso_git::deliver::DEFAULT_MESSAGE)]
    pub(crate) message: String,
    /// The Deployment Observability Hub (`http://hub:8090`): environments with a
    /// RolloutPolicy get a change wave by wave, each wave once the hub reports every
    /// registered cluster of the waves before it compliant with the change (docs/rollout.md);
    /// without it, an environment with a RolloutPolicy is an error (nothing delivered).
    #[arg(long, env = "KALYPSO_HUB_URL", value_name = "URL")]
    pub(crate) hub: Option<String>,
    /// File holding the hub's API token.
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub(crate) hub_token_file: Option<PathBuf>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also print the input commits (main, environment branch, every workload repository).
    #[arg(short, long)]
    pub(crate) verbose: bool,
    #[command(flatten)]
    pub(crate) commit: CommitArgs,
    #[command(flatten)]
    pub(crate) git: GitArgs,
    #[command(flatten, next_help_heading = "Registry options (oci:// GitOps repositories)")]
    pub(crate) registry: RegistryArgs,
}

/// `kalypso rollout`'s subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum RolloutCommand {
    /// Print the rollout's state: its waves, how many run the change, and with `--hub` how
    /// their clusters run it and what blocks the next wave. Writes nothing.
    Status(RolloutArgs),
    /// Stop delivering waves: the next syncs deliver nothing for the environment (not even
    /// a newer change) until `resume`. The waves delivered keep the change.
    Pause(RolloutArgs),
    /// Go on with a paused rollout (the wave's progress deadline counts from the resume).
    Resume(RolloutArgs),
    /// Roll back now: the delivered waves get the content they ran before the rollout (a
    /// progressing, paused or halted rollout); the later waves keep theirs.
    Abort(RolloutArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RolloutArgs {
    /// The control plane: a git URL (https://, ssh://, git@host:..., file://) or a local
    /// repository path.
    #[arg(value_name = "CONTROL_PLANE")]
    pub(crate) control_plane: String,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// How `pause`, `resume` and `abort` deliver their commit, as `kalypso sync --mode`.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub(crate) mode: Mode,
    /// The GitOps repository, instead of the GitOpsRepo's spec.repo (as `kalypso sync`).
    #[arg(long, value_name = "URL")]
    pub(crate) gitops_repo: Option<String>,
    /// GitHub API base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, env = "KALYPSO_GITHUB_API_URL", value_name = "URL", default_value = kalypso_git::github::DEFAULT_API_URL)]
    pub(crate) github_api_url: String,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    /// Prefix of the pull-request branches.
    #[arg(long, value_name = "PREFIX", default_value = kalypso_git::deliver::DEFAULT_BRANCH_PREFIX)]
    pub(crate) branch_prefix: String,
    /// The Deployment Observability Hub (`status`: how the delivered waves' clusters run the
    /// change).
    #[arg(long, env = "KALYPSO_HUB_URL", value_name = "URL")]
    pub(crate) hub: Option<String>,
    /// File holding the hub's API token.
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub(crate) hub_token_file: Option<PathBuf>,
    /// Print the result as JSON on standard output.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) commit: CommitArgs,
    #[command(flatten)]
    pub(crate) git: GitArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The configuration file (see the kalypso-server README for its format).
    #[arg(
        long,
        env = "KALYPSO_CONFIG",
        value_name = "FILE",
        default_value = "kalypso.yaml"
    )]
    pub(crate) config: PathBuf,
    /// Listen on this address instead of the configured one (e.g. 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// The Deployment Observability Hub (`http://hub:8090`), instead of the configured
    /// `hub.url`: environments with a RolloutPolicy get a change wave by wave, each poll
    /// asking it whether the next wave may go (docs/rollout.md).
    #[arg(long, value_name = "URL")]
    pub(crate) hub: Option<String>,
    /// File holding the hub's API token, instead of the configured `hub.tokenFile`.
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub(crate) hub_token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The control plane: a git URL or a local repository path (a local repository's
    /// branch is updated in place; push it yourself).
    #[arg(value_name = "CONTROL_PLANE", default_value = ".")]
    pub(crate) control_plane: String,
    /// The environment to promote to.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// The main-branch commit to promote (default: the tip of the main branch).
    #[arg(long, value_name = "SHA", conflicts_with = "from")]
    pub(crate) commit: Option<String>,
    /// Promote the control-plane commit that environment SRC's GitOps branch was rendered
    /// from (its `.github/tracking/Promoted_Commit_Id`).
    #[arg(long, value_name = "SRC")]
    pub(crate) from: Option<String>,
    /// With --from: refuse to promote unless the hub reports every cluster of SRC compliant
    /// with SRC's GitOps commit.
    #[arg(long, value_name = "URL", requires = "from")]
    pub(crate) hub: Option<String>,
    /// File holding the hub's API token.
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub(crate) hub_token_file: Option<PathBuf>,
    /// With --hub: promote even though the gate refuses, recording REASON in the hub's audit
    /// log as an override (with the requirements that were not met).
    #[arg(long, value_name = "REASON", requires = "hub")]
    pub(crate) override_gate: Option<String>,
    /// With --from: read SRC's GitOps branch from this repository instead of its
    /// GitOpsRepo's spec.repo (a local clone or a mirror).
    #[arg(long, value_name = "URL", requires = "from")]
    pub(crate) gitops_repo: Option<String>,
    /// Commit message; `{commit}` and `{environment}` are replaced.
    #[arg(long, value_name = "TEXT", default_value = promote::DEFAULT_MESSAGE)]
    pub(crate) message: String,
    #[command(flatten)]
    pub(crate) author: CommitArgs,
    #[command(flatten)]
    pub(crate) git: GitArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CheckPromoteArgs {
    /// The hub's URL (`http://hub:8090`).
    #[arg(long, value_name = "URL", env = "KALYPSO_HUB_URL")]
    pub(crate) hub: String,
    /// File holding the hub's API token (its `--api-token-file`).
    #[arg(long, value_name = "FILE")]
    pub(crate) hub_token_file: Option<PathBuf>,
    /// The environment whose clusters must run the commit.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
    /// The GitOps commit (e.g. the merge of the scheduler's pull request), or the
    /// control-plane commit it carries in `Promoted_Commit_Id`.
    #[arg(long, value_name = "SHA")]
    pub(crate) commit: String,
    /// Also wait until the commit may be promoted into this environment: its PromotionPolicy
    /// (soak, approvals, windows, verification) and freezes, as the hub evaluates them. A
    /// failed requirement exits 1; one not met yet (a window, a missing approval) is waited for.
    #[arg(long, value_name = "ENV")]
    pub(crate) into: Option<String>,
    /// How long to wait for the clusters: `90s`, `30m`, `1h`.
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    pub(crate) timeout: String,
    /// How often to ask the hub.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub(crate) interval: String,
    /// Set a GitHub commit status on the control-plane commit (pending while waiting, then
    /// success, failure or error), in the repository given with --control-plane.
    #[arg(long, requires = "control_plane")]
    pub(crate) commit_status: bool,
    /// The control-plane repository on GitHub (`https://github.com/org/control-plane`), for
    /// --commit-status.
    #[arg(long, value_name = "URL")]
    pub(crate) control_plane: Option<String>,
    /// The commit status's context.
    #[arg(long, value_name = "TEXT", default_value = "kalypso/deployed/{environment}")]
    pub(crate) status_context: String,
    /// GitHub API base URL (GitHub Enterprise: https://HOST/api/v3).
    #[arg(long, env = "KALYPSO_GITHUB_API_URL", value_name = "URL", default_value = kalypso_git::github::DEFAULT_API_URL)]
    pub(crate) github_api_url: String,
    #[command(flatten)]
    pub(crate) provider: ProviderArgs,
    #[command(flatten, next_help_heading = "Git options")]
    pub(crate) git: GitArgs,
}

/// The hub an action goes to.
#[derive(Debug, Args)]
pub(crate) struct HubActionArgs {
    /// The hub's URL (`http://hub:8090`).
    #[arg(long, value_name = "URL", env = "KALYPSO_HUB_URL")]
    pub(crate) hub: String,
    /// File holding the hub's API token: the identity that acts.
    #[arg(long, value_name = "FILE")]
    pub(crate) hub_token_file: Option<PathBuf>,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    pub(crate) env: String,
}

#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    pub(crate) hub: HubActionArgs,
    /// The control-plane commit whose promotion into ENV is approved (7 to 40 hex digits).
    #[arg(long, value_name = "SHA")]
    pub(crate) commit: String,
    /// A comment recorded with the approval.
    #[arg(long, value_name = "TEXT")]
    pub(crate) comment: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct FreezeArgs {
    #[command(flatten)]
    pub(crate) hub: HubActionArgs,
    /// Why (recorded, and shown by every refused promotion).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: String,
    /// When the freeze ends by itself: an RFC 3339 time (`2026-12-01T09:00:00Z`) or a duration
    /// from now (`8h`). Default: until unfrozen.
    #[arg(long, value_name = "TIME")]
    pub(crate) until: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct UnfreezeArgs {
    #[command(flatten)]
    pub(crate) hub: HubActionArgs,
    /// Why (recorded).
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct HubArgs {
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = kalypso_hub::DEFAULT_LISTEN)]
    pub(crate) listen: SocketAddr,
    /// Database: `sqlite://PATH` (created on first start) or `postgres://USER:PASS@HOST/DB`.
    #[arg(long, env = "KALYPSO_HUB_DATABASE", value_name = "URL", default_value = kalypso_hub::DEFAULT_DATABASE)]
    pub(crate) database: String,
    /// The control plane (git URL or local repository path) whose environments and GitOps
    /// repositories the hub follows; overrides the configuration file's `controlPlane`.
    /// Without either, the hub stores reports only.
    #[arg(long, value_name = "REPO")]
    pub(crate) control_plane: Option<String>,
    /// File holding the secret reports are signed with (`X-Signature: sha256=<HMAC>`).
    #[arg(long, value_name = "FILE")]
    pub(crate) webhook_secret_file: Option<PathBuf>,
    /// File holding the bearer token every query must carry; it may do everything (named,
    /// scoped tokens are given in --config).
    #[arg(long, value_name = "FILE")]
    pub(crate) api_token_file: Option<PathBuf>,
    /// The hub's configuration file (YAML): OpenID Connect sign-in for the dashboard, named
    /// API tokens with scopes, roles, sessions. See docs/hub.md.
    #[arg(long, env = "KALYPSO_HUB_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Serve the fleet dashboard at `/` without the API token (the API still requires it).
    /// Without this flag and with `--api-token-file`, the dashboard needs the same bearer
    /// token (e.g. added by an authenticating reverse proxy).
    #[arg(long, conflicts_with = "no_dashboard")]
    pub(crate) dashboard_public: bool,
    /// Do not serve the fleet dashboard (API, health and readiness only).
    #[arg(long)]
    pub(crate) no_dashboard: bool,
    /// A cluster silent for longer is stale (and no longer required by gates).
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    pub(crate) stale_after: String,
    /// How often the GitOps branches are read again.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub(crate) refresh: String,
    /// YAML file of notification receivers (Slack, Teams, generic signed webhooks), routed by
    /// environment and event kind (see docs/hub.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) notifications: Option<PathBuf>,
    /// Connections served at once; more wait in the listen backlog until one closes.
    #[arg(long, value_name = "N", default_value_t = kalypso_hub::Limits::default().max_connections,
        value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    pub(crate) max_connections: usize,
    /// A connection that sends no complete request head for this long (after connecting or
    /// after its previous answer) is closed: slow headers and idle keep-alive alike.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub(crate) idle_timeout: String,
    /// A request body that has not arrived whole after this long is refused (408).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub(crate) body_timeout: String,
    /// Reports a second each cluster may send, sustained (0: no limit). Over it, a report
    /// that changes no state or commit the hub holds gets 429 with Retry-After; a report that
    /// changes one is always stored.
    #[arg(long, value_name = "N", default_value_t = kalypso_hub::throttle::Rate::default().per_second)]
    pub(crate) cluster_rate: f64,
    /// Reports each cluster may send at once before `--cluster-rate` applies.
    #[arg(long, value_name = "N", default_value_t = kalypso_hub::throttle::Rate::default().burst,
        value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) cluster_burst: u32,
    #[command(flatten)]
    pub(crate) git: GitArgs,
    #[command(flatten, next_help_heading = "Registry options (oci:// GitOps repositories)")]
    pub(crate) registry: RegistryArgs,
    #[command(subcommand)]
    pub(crate) command: Option<HubCommand>,
}

/// What `kalypso hub` does besides running the hub.
#[derive(Debug, Subcommand)]
pub(crate) enum HubCommand {
    /// Print the hash of an API token (`sha256:<hex>`) for the `tokens` section of the hub's
    /// configuration file, which holds hashes only. The token is read from --token-file, or
    /// from standard input (surrounding whitespace ignored); make one with e.g.
    /// `openssl rand -hex 32`.
    HashToken(HashTokenArgs),
}

#[derive(Debug, Args)]
pub(crate) struct HashTokenArgs {
    /// File holding the token (default: standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, powershell or elvish.
    #[arg(value_name = "SHELL")]
    pub(crate) shell: Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write `kalypso.1` and one page per command (`kalypso-render.1`...) into this folder
    /// (created if missing) instead of printing `kalypso.1`.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

#[cfg(feature = "operator")]
#[derive(Debug, Args)]
pub(crate) struct CrdsArgs {
    /// Write one file per CRD (`<plural>.yaml`) into this folder instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

#[cfg(feature = "operator")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FeedArg {
    /// Flux brings the control plane into environment namespaces; the operator keeps the
    /// Flux objects of Environments, BaseRepos and WorkloadRegistrations (the original's way).
    Flux,
    /// Something else fills the namespaces; the operator only schedules and delivers.
    External,
    /// No Flux: each Environment's control plane is read from git and delivered with the
    /// code of `kalypso serve`, every --poll period.
    Git,
}

#[cfg(feature = "operator")]
#[derive(Debug, Args)]
pub(crate) struct OperatorArgs {
    /// Where the control plane comes from.
    #[arg(long, env = "KALYPSO_SOURCE", value_enum, default_value = "flux")]
    pub(crate) source: FeedArg,
    /// Address of /healthz and /readyz (`:8081` means every interface).
    #[arg(long, value_name = "ADDR", default_value = ":8081")]
    pub(crate) health_probe_bind_address: String,
    /// Address of /metrics (may be the same as the health address).
    #[arg(long, value_name = "ADDR", default_value = ":8080")]
    pub(crate) metrics_bind_address: String,
    /// Elect a leader with a Lease, so that several replicas can run.
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "kalypso-scheduler")]
    pub(crate) leader_election_id: String,
    /// With --leader-elect: how long a Lease stays held without renewal (candidates wait
    /// this long before taking it over).
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub(crate) leader_elect_lease_duration: String,
    /// With --leader-elect: how long the leader keeps leading without renewing; then it
    /// stops and exits so that it restarts as a candidate (shorter than the lease duration;
    /// the defaults ride out an API-server outage of up to about 18 s).
    #[arg(long, value_name = "DURATION", default_value = "20s")]
    pub(crate) leader_elect_renew_deadline: String,
    /// With --leader-elect: how often the leader renews and candidates retry.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub(crate) leader_elect_retry_period: String,
    /// The Lease's namespace (default: the pod's, from POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS", default_value = "default")]
    pub(crate) leader_election_namespace: String,
    /// This instance's name (from POD_NAME; default: the host name).
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub(crate) pod_name: Option<String>,
    /// Namespace of the Flux objects.
    #[arg(long, value_name = "NS", default_value = "flux-system")]
    pub(crate) flux_namespace: String,
    /// Secret with git credentials for Flux (empty: none).
    #[arg(long, value_name = "NAME", default_value = "gh-repo-secret")]
    pub(crate) flux_secret: String,
    /// Reconcile interval of the Flux objects.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub(crate) flux_interval: String,
    /// apiVersion of Flux GitRepositories. `auto`: the original's
    /// (`source.toolkit.fluxcd.io/v1beta2`) when the cluster serves it, else the cluster's
    /// preferred version, with a warning.
    #[arg(long, value_name = "API", default_value = "auto")]
    pub(crate) flux_source_api_version: String,
    /// apiVersion of Flux Kustomizations (`auto` as for --flux-source-api-version).
    #[arg(long, value_name = "API", default_value = "auto")]
    pub(crate) flux_kustomize_api_version: String,
    /// Write Assignment and AssignmentPackage objects, as the original does, so that
    /// `kubectl get assignments` shows what it showed (`--assignments false`: do not).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) assignments: bool,
    /// Deliver new content only after it has not changed for this long.
    #[arg(long, value_name = "DURATION", default_value = "3s")]
    pub(crate) debounce: String,
    /// Reconcile every environment at least this often.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub(crate) resync: String,
    /// With --source git: how often each environment is read and delivered.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub(crate) poll: String,
    /// Environments reconciled at the same time.
    #[arg(long, value_name = "N", default_value = "4")]
    pub(crate) concurrency: u16,
    /// When a delivery that removes deployment-target folders is held: `default` (all of
    /// them, or more than half when a GitOps branch has more than ten), or a percentage
    /// (`20%`). A person allows a held delivery with the annotation
    /// `scheduler.kalypso.io/allow-mass-deletion: "true"` on the Environment.
    #[arg(long, value_name = "LIMIT", default_value = "default")]
    pub(crate) mass_deletion_limit: kalypso_core::run::DeletionLimit,
    /// How to deliver: `pr` (pull requests, the original's way), `push`, or `auto`.
    #[arg(long, value_name = "MODE", default_value = "pr")]
    pub(crate) delivery: Mode,
    /// Where GitOps repositories are mirrored.
    #[arg(long, env = "KALYPSO_CACHE_DIR", value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Environment variable holding the GitHub token.
    #[arg(long, value_name = "VAR", default_value = "GITHUB_AUTH_TOKEN")]
    pub(crate) token_env: String,
    /// File holding the GitHub token (wins over --token-env).
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// The GitHub API (for GitHub Enterprise).
    #[arg(long, value_name = "URL")]
    pub(crate) github_api_url: Option<String>,
    /// The forge of the GitOps repositories: github, gitlab, azure-devops, gitea (or
    /// forgejo). Default: inferred from each repository's URL.
    #[arg(long, value_name = "PROVIDER")]
    pub(crate) provider: Option<Provider>,
    /// The API of a GitLab, Azure DevOps or Gitea forge (default: derived from the
    /// repository URL).
    #[arg(long, value_name = "URL")]
    pub(crate) provider_api_url: Option<String>,
    /// Log level or filter (RUST_LOG wins).
    #[arg(long, env = "KALYPSO_LOG_LEVEL", value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// With --source git: the Deployment Observability Hub (`http://hub:8090`). Environments
    /// with a RolloutPolicy get a change wave by wave, each reconcile asking it whether the
    /// next wave may go (docs/rollout.md); without it they are an error. The Flux and
    /// external sources run no rollouts: they deliver nothing of an environment whose
    /// namespace holds a RolloutPolicy (Ready=False, reason RolloutUnsupported).
    #[arg(long, value_name = "URL")]
    pub(crate) hub: Option<String>,
    /// File holding the hub's API token (a mounted Secret).
    #[arg(long, value_name = "FILE", requires = "hub")]
    pub(crate) hub_token_file: Option<PathBuf>,
}

/// Which forge a repository is on, when its URL does not say (self-hosted hosts).
#[derive(Debug, Args)]
pub(crate) struct ProviderArgs {
    /// The forge: github, gitlab, azure-devops, gitea (or forgejo). Default: inferred from
    /// the repository URL (github.com, gitlab.com, dev.azure.com and *.visualstudio.com,
    /// codeberg.org; any other host is GitHub, reached through --github-api-url).
    #[arg(long, env = "KALYPSO_PROVIDER", value_name = "PROVIDER")]
    pub(crate) provider: Option<Provider>,
    /// The API of a GitLab (https://HOST/api/v4), Azure DevOps (the organization URL,
    /// https://dev.azure.com/ORG) or Gitea (https://HOST/api/v1) forge. Default: derived
    /// from the repository URL.
    #[arg(long, env = "KALYPSO_PROVIDER_API_URL", value_name = "URL")]
    pub(crate) provider_api_url: Option<String>,
}
