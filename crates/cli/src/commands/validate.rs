//! `kalypso validate`: the whole pipeline without writing; the exit code tells the result.

use std::process::ExitCode;

use anyhow::{Result, bail};
use kalypso_core::explain::all_conflicts;
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::{Diagnostic, Diagnostics};

use super::plan::{ControlPlaneSource, GitAccess};
use super::{report, run_pipeline};
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
        let mut diagnostics = Diagnostics::new();
        let (_, rendered) = run_pipeline(&inputs, env, CurrentAssignment::new, &mut diagnostics);
        for (conflict, assignments) in all_conflicts(&rendered.records) {
            let values: Vec<String> = conflict
                .values
                .iter()
                .map(|(source, raw)| format!("{source} gives {raw:?}"))
                .collect();
            let shown: Vec<&str> = assignments.iter().take(3).map(String::as_str).collect();
            let more = if assignments.len() > 3 {
                format!(" and {} more", assignments.len() - 3)
            } else {
                String::new()
            };
            diagnostics.push(Diagnostic::warning(
                "config-conflict",
                format!(
                    "config key {:?} gets different values from ConfigMaps that apply to the same assignments: {}; \
                     the last one silently wins (assignments: {}{more})",
                    conflict.key,
                    values.join(", "),
                    shown.join(", ")
                ),
            ));
        }
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
                rendered.records.len(),
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
