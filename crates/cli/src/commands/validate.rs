//! `kalypso validate`: the whole pipeline without writing; the exit code tells the result.

use std::process::ExitCode;

use anyhow::{Result, bail};
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::Isolation;

use super::plan::{ControlPlaneSource, GitAccess};
use super::{report, run};
use crate::{GlobalArgs, ValidateArgs};

pub(crate) fn validate(args: &ValidateArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let git = GitAccess::new(&args.git)?;
    let mut source = ControlPlaneSource::open(&args.control_plane, &git, global.quiet)?;
    let environments = if args.env.is_empty() {
        source.environments()?
    } else {
        args.env.clone()
    };
    if environments.is_empty() {
        bail!(
            "no environment found in {}; name one with --env",
            kalypso_git::redact(&args.control_plane)
        );
    }
    let mut failed = false;
    for env in &environments {
        let inputs = source.inputs(env)?;
        let run = run(&inputs, env, &CurrentAssignment::new, Isolation::Environment);
        let mut diagnostics = run.diagnostics;
        if args.strict {
            diagnostics.make_warnings_errors();
        }
        report(&diagnostics, global);
        let errors = diagnostics.errors().count();
        if errors > 0 {
            failed = true;
            eprintln!("environment {env}: {errors} error(s)");
        } else if !global.quiet {
            println!(
                "environment {env}: ok, {} assignment(s), {} warning(s)",
                run.rendered.records.len(),
                diagnostics.warnings().count()
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
