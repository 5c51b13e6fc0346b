//! `kalypso completions` and `kalypso man`: shell completion scripts and manual pages,
//! generated from the same command-line definition that parses the arguments, so they never
//! fall behind it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::args::Cli;
use crate::settings::{Global, Man};

/// Prints the completion script of `shell`.
pub(crate) fn completions(shell: Shell) -> Result<ExitCode> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "kalypso", &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write to standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the manual page, or writes every page into a folder.
pub(crate) fn man(settings: &Man, global: &Global) -> Result<ExitCode> {
    let command = Cli::command();
    match &settings.out {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut out)
                .context("cannot render the manual page")?;
            std::io::stdout()
                .write_all(&out)
                .context("cannot write to standard output")?;
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("cannot write into {}", dir.display()))?;
            if !global.quiet {
                eprintln!("manual pages written to {}", dir.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
