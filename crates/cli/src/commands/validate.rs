//! `kalypso validate`: the whole pipeline without writing; the exit code tells the result.

use std::process::ExitCode;

use anyhow::{Result, bail};
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::Isolation;

use super::{report, run};
use crate::settings::{Global, Validate};
use crate::source::{ControlPlaneSource, GitAccess};

pub(crate) fn validate(settings: &Validate, global: &Global) -> Result<ExitCode> {
    let git = GitAccess::new(&settings.git)?;
    let mut source = ControlPlaneSource::open(&settings.control_plane, &git, global.quiet)?;
    let environments = if settings.environments.is_empty() {
        source.environments()?
    } else {
        settings.environments.clone()
    };
    if environments.is_empty() {
        bail!(
            "no environment found in {}; name one with --env",
            kalypso_git::redact(&settings.control_plane.text)
        );
    }
    let mut failed = false;
    for env in &environments {
        let inputs = source.inputs(env)?;
        let run = run(
            &inputs,
            env,
            &CurrentAssignment::new,
            Isolation::Environment,
            global,
        );
        let mut diagnostics = run.diagnostics;
        if settings.strict {
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
