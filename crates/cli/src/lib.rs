//! The `kalypso` command line, as a library so that tests can drive it in-process.
//!
//! Each command maps onto a prefix of the core pipeline: `validate` runs everything but
//! writing, `render` runs it all and writes the GitOps tree into a folder. Diagnostics go to
//! standard error, results to standard output. Exit codes: 0 success, 1 problems found or
//! an operation failed, 2 invalid command line.

mod commands;
pub mod control_plane;
mod current_assignment;
pub mod fsio;
mod hub_client;
mod local_clone;
pub mod output;
mod progress;
pub mod render_cache;
mod terminal;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    command: Command,
    #[command(flatten)]
    global: GlobalArgs,
}

/// Options every command takes.
#[derive(Debug, Args)]
struct GlobalArgs {
    /// Number of worker threads (default: one per CPU).
    #[arg(long, global = true, env = "KALYPSO_THREADS", value_name = "N")]
    threads: Option<usize>,
    /// Print only errors.
    #[arg(short, long, global = true)]
    quiet: bool,
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
    limits: Vec<String>,
    /// When to colour output and logs: `auto` on a terminal, unless `NO_COLOR` is set (or
    /// `CLICOLOR_FORCE` asks for colour anyway).
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    color: ColorChoice,
    /// Log format on standard error (default: `text`; `json` for `serve`, `hub` and
    /// `operator`, or as `serve`'s configuration says).
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        env = "KALYPSO_LOG_FORMAT"
    )]
    log_format: Option<terminal::LogFormat>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Render an environment's platform GitOps tree into a folder.
    ///
    /// If OUT already holds a GitOps tree, the original scheduler's update rules apply: root
    /// files and dot-folders are kept, folders of cluster types and deployment targets that are
    /// no longer scheduled are deleted, everything else is written. Only files whose content
    /// changes are touched. If anything fails, OUT is left exactly as it was and every problem
    /// is listed.
    ///
    /// OUT must be missing, empty or a GitOps tree (else the render is refused; `--force`
    /// overrides). The new tree is staged beside OUT and swapped in at once, so OUT always
    /// holds the old tree or the new one, even if kalypso is killed; one render at a time may
    /// write to OUT (a lock file `.<OUT>.kalypso-lock` beside it).
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
    Sync(commands::SyncArgs),
    /// Run the daemon: poll the control plane (and accept GitHub push webhooks), re-render
    /// environments whose input commits changed, and deliver them.
    ///
    /// Serves /healthz, /readyz, /metrics (Prometheus), /status (per environment: the last
    /// result, and the errors of a failed render) and /webhook; logs JSON;
    /// stops gracefully on SIGTERM or ctrl-c. Configured by a kalypso.yaml file.
    Serve(commands::ServeArgs),
    /// Promote a main-branch commit to an environment: pin it in the environment branch's
    /// BaseRepo `main` (base-repo.yaml), as the promotion workflow's CD step does.
    ///
    /// With `--from ENV` the commit is the control-plane commit that ENV's GitOps branch was
    /// rendered from (its `Promoted_Commit_Id`); with `--hub URL` as well, the promotion is
    /// refused unless every cluster of ENV runs that GitOps commit. See docs/promotion.md.
    Promote(commands::PromoteArgs),
    /// Wait until every cluster of an environment runs a GitOps commit, as reported to the
    /// hub (`kalypso hub`): the gate of the promotion flow.
    ///
    /// Asks the hub until every registered, non-stale cluster whose cluster type is in the
    /// commit reports it compliant (exit 0), a cluster reports a failure (exit 1, naming the
    /// cluster and its reconciler's message) or the timeout passes (exit 3). Prints progress
    /// (`7/9 clusters compliant, waiting for drone-2, large-1`); `--commit-status` mirrors
    /// the result as a GitHub commit status on the control-plane commit.
    CheckPromote(commands::CheckPromoteArgs),
    /// Run the Deployment Observability Hub: clusters report their GitOps compliance (Flux
    /// events, generic JSON), the hub correlates it with the platform GitOps history and
    /// answers queries and promotion gates.
    ///
    /// Stores everything in SQLite (default) or PostgreSQL; serves /api/v1, /healthz and
    /// /readyz; stops gracefully on SIGTERM or ctrl-c. See docs/hub.md.
    Hub(Box<commands::HubArgs>),
    /// Print the CustomResourceDefinitions of every scheduler.kalypso.io kind (YAML).
    ///
    /// Generated from the same Rust types the operator uses, and field-compatible with the
    /// original scheduler's CRDs. Apply them with `kalypso crds | kubectl apply --server-side -f -`.
    #[cfg(feature = "operator")]
    Crds(commands::crds::CrdsArgs),
    /// Run as a Kubernetes operator: a drop-in replacement for the original scheduler.
    ///
    /// Watches the scheduler.kalypso.io objects of every environment namespace, keeps the Flux
    /// objects of Environments, BaseRepos and WorkloadRegistrations, schedules and renders each
    /// environment in memory, writes DeploymentTargets and status conditions, and delivers the
    /// GitOps tree as pull requests or pushes. See docs/operator.md.
    #[cfg(feature = "operator")]
    Operator(Box<commands::operator::OperatorArgs>),
    /// Print the shell completion script of bash, zsh, fish, powershell or elvish.
    ///
    /// Load it in the current shell with e.g. `source <(kalypso completions bash)`, or install
    /// it where the shell looks for completions (`kalypso completions zsh > ~/.zfunc/_kalypso`,
    /// `kalypso completions fish > ~/.config/fish/completions/kalypso.fish`).
    Completions(commands::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command with `--out DIR`.
    ///
    /// Read it with `kalypso man | man -l -`; install the pages with
    /// `kalypso man --out /usr/local/share/man/man1`.
    Man(commands::ManArgs),
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
struct PlanSource {
    /// The control plane: a folder (`main/`, `<env>/`, `workloads/`), or a git repository
    /// (a local path, `file://`, `https://`, `ssh://` or `git@host:` URL) read as `sync` reads
    /// it.
    #[arg(value_name = "CONTROL_PLANE")]
    control_plane: String,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    env: String,
    /// The current GitOps tree: a folder, or `<REPO>#<BRANCH>` for a branch of a git
    /// repository (path or URL). Default: the environment's GitOpsRepo, when it is a local
    /// path or `file://` URL.
    #[arg(long, value_name = "GITOPS")]
    against: Option<String>,
    /// Plan the promotion of the main commit environment SRC has promoted (its BaseRepo
    /// `main` pin, else main's tip) to ENV. See docs/plan-and-explain.md.
    #[arg(long, value_name = "SRC")]
    promote_from: Option<String>,
    #[command(flatten, next_help_heading = "Git options")]
    git: commands::GitArgs,
}

#[derive(Debug, Args)]
struct PlanArgs {
    #[command(flatten)]
    source: PlanSource,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

#[derive(Debug, Args)]
struct DiffArgs {
    #[command(flatten)]
    source: PlanSource,
}

#[derive(Debug, Args)]
struct ExplainArgs {
    /// The control plane: a folder, or a git repository (path or URL).
    #[arg(value_name = "CONTROL_PLANE")]
    control_plane: String,
    /// The environment.
    #[arg(long, value_name = "ENV")]
    env: String,
    /// The deployment target (e.g. `hello-world-app-functional-test`).
    #[arg(long, value_name = "DT")]
    target: String,
    /// Only this cluster type.
    #[arg(long, value_name = "CT")]
    cluster_type: Option<String>,
    /// Explain this config key of one assignment: the target's only cluster type, or the one
    /// named with --cluster-type.
    #[arg(long, value_name = "KEY")]
    config: Option<String>,
    /// Output format (`markdown` prints text).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// The current GitOps tree (a folder, or `<REPO>#<BRANCH>`), which the `Steady`
    /// prioritizer keeps targets on.
    #[arg(long, value_name = "TREE")]
    against: Option<String>,
    #[command(flatten, next_help_heading = "Git options")]
    git: commands::GitArgs,
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// The control plane: a folder (`main/`, `<env>/`, `workloads/`), or a git repository
    /// (a local clone, `file://`, `https://`, `ssh://` or `git@host:` URL) read as `sync`
    /// reads it.
    #[arg(value_name = "CONTROL_PLANE")]
    control_plane: String,
    /// The environment to render (e.g. `dev`).
    #[arg(long, value_name = "ENV")]
    env: String,
    /// The folder to write the GitOps tree into (created if missing).
    #[arg(long, value_name = "OUT")]
    out: PathBuf,
    /// Render every assignment and compare every file, without reading or writing the render
    /// cache (kept in --cache-dir, default `$XDG_CACHE_HOME/kalypso` or `~/.cache/kalypso`),
    /// which lets a render skip assignments whose inputs and files are unchanged.
    #[arg(long)]
    no_cache: bool,
    /// Write into OUT even if it is neither empty nor a GitOps tree: its folders that are not
    /// scheduled cluster types are deleted (root files and dot-folders are kept).
    #[arg(long)]
    force: bool,
    /// When a WorkloadRegistration's workloads fail (their files, or the assignments of their
    /// deployment targets), write the rest of the environment anyway and keep their folders in
    /// OUT as they are, as `sync` and `serve` do; the exit code is still 1. Errors of the
    /// environment as a whole (a ClusterType, a Template, a platform ConfigMap) still write
    /// nothing.
    #[arg(long)]
    keep_going: bool,
    #[command(flatten, next_help_heading = "Git options")]
    git: commands::GitArgs,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// The control plane: a folder, or a git repository (a local clone or URL) read as `sync`
    /// reads it.
    #[arg(value_name = "CONTROL_PLANE")]
    control_plane: String,
    /// Environments to check (repeatable; default: every environment found).
    #[arg(long, value_name = "ENV")]
    env: Vec<String>,
    /// Treat warnings (such as ConfigMaps that silently override each other, or policies that
    /// select nothing) as errors.
    #[arg(long)]
    strict: bool,
    #[command(flatten, next_help_heading = "Git options")]
    git: commands::GitArgs,
}

/// Parses the process arguments, runs the command and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    run(cli)
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    if let Err(e) = kalypso_template::sprig_from_env() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let mut limits = kalypso_core::limits::Limits::default();
    if let Err(e) = limits.apply(cli.global.limits.iter().map(String::as_str)) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    kalypso_core::limits::install(limits);
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(cli.global.threads.unwrap_or(0))
        .build()
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("error: cannot start worker threads: {e}");
            return ExitCode::FAILURE;
        }
    };
    let daemon = matches!(cli.command, Command::Serve(_) | Command::Hub(_));
    #[cfg(feature = "operator")]
    let daemon = daemon || matches!(cli.command, Command::Operator(_));
    if !daemon {
        // Retries and warnings of the git commands; the daemons log as configured.
        commands::init_logs(&cli.global);
    }
    let result = pool.install(|| match &cli.command {
        Command::Render(args) => commands::render(args, &cli.global),
        Command::Validate(args) => commands::validate(args, &cli.global),
        Command::Plan(args) => commands::plan(args, &cli.global),
        Command::Diff(args) => commands::diff(args, &cli.global),
        Command::Explain(args) => commands::explain(args, &cli.global),
        Command::Sync(args) => commands::sync(args, &cli.global),
        Command::Serve(args) => commands::serve(args, &cli.global),
        Command::Promote(args) => commands::promote(args, &cli.global),
        Command::CheckPromote(args) => commands::check_promote(args, &cli.global),
        Command::Hub(args) => commands::hub(args, &cli.global),
        Command::Completions(args) => commands::completions(args, &cli.global),
        Command::Man(args) => commands::man(args, &cli.global),
        #[cfg(feature = "operator")]
        Command::Crds(args) => commands::crds::crds(args, &cli.global),
        #[cfg(feature = "operator")]
        Command::Operator(args) => commands::operator::operator(args, &cli.global),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
