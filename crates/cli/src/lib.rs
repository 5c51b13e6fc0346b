//! The `kalypso` command line, as a library so that tests can drive it in-process.
//!
//! Each command maps onto a prefix of the core pipeline: `validate` runs everything but
//! writing, `render` runs it all and writes the GitOps tree into a folder. Diagnostics go to
//! standard error, results to standard output. Exit codes: 0 success, 1 problems found or
//! an operation failed, 2 invalid command line.

mod commands;
pub mod control_plane;
pub mod fsio;

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
    Render(RenderArgs),
    /// Check a control plane without writing anything; the exit code tells the result.
    ///
    /// Runs the whole pipeline (loading, scheduling, config merging, schema validation and
    /// rendering) for each environment and reports every problem with its file, object and
    /// field. Usable as a pull-request check.
    Validate(ValidateArgs),
}

#[derive(Debug, Args)]
struct RenderArgs {
    /// The control-plane folder.
    #[arg(value_name = "DIR")]
    control_plane: PathBuf,
    /// The environment to render (a folder of DIR, e.g. `dev`).
    #[arg(long, value_name = "ENV")]
    env: String,
    /// The folder to write the GitOps tree into (created if missing).
    #[arg(long, value_name = "OUT")]
    out: PathBuf,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// The control-plane folder.
    #[arg(value_name = "DIR")]
    control_plane: PathBuf,
    /// Environments to check (repeatable; default: every environment found).
    #[arg(long, value_name = "ENV")]
    env: Vec<String>,
    /// Treat warnings as errors.
    #[arg(long)]
    strict: bool,
}

/// Parses the process arguments, runs the command and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    run(cli)
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
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
    let result = pool.install(|| match &cli.command {
        Command::Render(args) => commands::render(args, &cli.global),
        Command::Validate(args) => commands::validate(args, &cli.global),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
