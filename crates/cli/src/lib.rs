//! The `kalypso` command line, as a library so that tests can drive it in-process.
//!
//! Each command maps onto a prefix of the core pipeline: `validate` runs everything but
//! writing, `render` runs it all and writes the GitOps tree into a folder. Diagnostics go to
//! standard error, results to standard output. Exit codes: 0 success, 1 problems found, an
//! operation failed or a flag's value is unusable, 2 a command line clap cannot parse.
//!
//! The command line goes through two layers before a command runs: clap parses it into the
//! `args` types (the text as typed, with the help and environment variables), and
//! `settings::Settings::from_cli` validates that once into the settings the commands take.

mod args;
mod commands;
pub mod control_plane;
mod current_assignment;
mod folder;
pub mod fsio;
mod hub_client;
mod interrupt;
mod local_clone;
pub mod output;
mod progress;
mod remove;
pub mod render_cache;
mod settings;
mod source;
mod terminal;

use std::process::ExitCode;

use clap::Parser;

pub use args::Cli;
use settings::{CommandSettings, Settings};

/// Parses the process arguments, runs the command and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    run(cli)
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let settings = match Settings::from_cli(&cli) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Settings { global, command } = settings;
    kalypso_core::limits::install(global.limits.clone());
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(global.threads.unwrap_or(0))
        .build()
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("error: cannot start worker threads: {e}");
            return ExitCode::FAILURE;
        }
    };
    if !command.is_daemon() {
        // Retries and warnings of the git commands; the daemons log as configured.
        commands::init_logs(&global);
        without_huge_pages();
    }
    let global = &global;
    let result = pool.install(|| match command {
        CommandSettings::Render(s) => commands::render(&s, global),
        CommandSettings::Validate(s) => commands::validate(&s, global),
        CommandSettings::Plan(s) => commands::plan(&s, global),
        CommandSettings::Diff(s) => commands::diff(&s, global),
        CommandSettings::Explain(s) => commands::explain(&s, global),
        CommandSettings::Sync(s) => commands::sync(&s, global),
        CommandSettings::Serve(s) => commands::serve(&s, global),
        CommandSettings::Promote(s) => commands::promote(&s, global),
        CommandSettings::CheckPromote(s) => commands::check_promote(&s, global),
        CommandSettings::HubAction(s) => commands::hub_action(&s, global),
        CommandSettings::Rollout(s) => commands::rollout(&s, global),
        CommandSettings::Hub(s) => commands::hub(&s, global),
        CommandSettings::HashToken(file) => commands::hub::hash_token(file.as_deref()),
        CommandSettings::Completions(shell) => commands::completions(shell),
        CommandSettings::Man(s) => commands::man(&s, global),
        #[cfg(feature = "operator")]
        CommandSettings::Crds(s) => commands::crds::crds(&s, global),
        #[cfg(feature = "operator")]
        CommandSettings::Operator(s) => commands::operator::operator(&s, global),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Turns the kernel's transparent huge pages off for this process, unless
/// `MIMALLOC_ALLOW_THP` says what the allocator should do. A one-shot command touches most of
/// its memory once: with huge pages the kernel zeroes 2 MiB at each first touch, used or not,
/// which cost a one-ConfigMap sync of the M fleet half its system time
/// (docs/performance.md, "The allocator's huge pages"). A daemon reuses its pages, so it keeps
/// them.
fn without_huge_pages() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // Best effort: a kernel without the prctl leaves the process as it was.
        let _ = rustix::thread::disable_transparent_huge_pages(true);
    }
}
