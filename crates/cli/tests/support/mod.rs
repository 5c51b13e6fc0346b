//! The `kalypso` command in a child process, for the CLI tests that must see its exit code,
//! standard output and standard error as a user does, or kill it, or cap its memory: the test
//! binary re-executes itself into its ignored `cli_child` test, which runs the CLI with the
//! arguments passed in [`CHILD_ARGS`].
//!
//! A test file using it declares `mod support;` and the entry point
//! `#[test] #[ignore = "..."] fn cli_child() { support::run_cli_child() }`.

use std::process::{Command, ExitCode};

use clap::Parser;
use kalypso_cli::{Cli, run};

/// The environment variable that turns the test binary into the `kalypso` command: a JSON
/// array of its arguments.
const CHILD_ARGS: &str = "KALYPSO_CLI_CHILD_ARGS";

/// The body of a test binary's `cli_child` entry point: runs the CLI with the arguments in
/// [`CHILD_ARGS`] and exits with its code (0, 1, 2 for a usage error, 3 otherwise). Without
/// [`CHILD_ARGS`] (a plain `cargo test --ignored`) it does nothing.
pub fn run_cli_child() {
    let Ok(args) = std::env::var(CHILD_ARGS) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("the child's arguments as JSON");
    let code = match Cli::try_parse_from(std::iter::once("kalypso".to_owned()).chain(args)) {
        Ok(cli) => run(cli),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(2)
        }
    };
    let status = if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::FAILURE {
        1
    } else if code == ExitCode::from(2) {
        2
    } else {
        3
    };
    std::process::exit(status);
}

/// Makes `command` (this test binary, or a wrapper such as `prlimit` that runs it: add the
/// binary's path first) run `kalypso args` in the child.
pub fn as_cli_child<'c>(command: &'c mut Command, args: &[String]) -> &'c mut Command {
    command
        .args([
            "--ignored",
            "--exact",
            "cli_child",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(
            CHILD_ARGS,
            serde_json::to_string(args).expect("arguments as JSON"),
        )
}
