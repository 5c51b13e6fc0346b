//! `kalypso render`: one environment's GitOps tree, written into a folder.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kalypso_core::Diagnostics;
use kalypso_core::tree::apply;

use super::{report, run_pipeline};
use crate::control_plane::read_inputs;
use crate::fsio::{read_tree, write_tree};
use crate::{GlobalArgs, RenderArgs};

pub(crate) fn render(args: &RenderArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let inputs = read_inputs(&args.control_plane, &args.env)?;
    let mut diagnostics = Diagnostics::new();
    let (environment, rendered) = run_pipeline(&inputs, &args.env, &mut diagnostics);
    report(&diagnostics, global);
    if diagnostics.has_errors() {
        eprintln!(
            "error: environment {:?} has {} problem(s); nothing was written to {}",
            args.env,
            diagnostics.errors().count(),
            args.out.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    let base = read_tree(&args.out)
        .with_context(|| format!("reading the current tree in {}", args.out.display()))?;
    let applied = apply(&base, &rendered.content);
    let stats = write_tree(&args.out, &base, &applied.tree)
        .with_context(|| format!("writing the new tree into {}", args.out.display()))?;
    if !global.quiet {
        println!(
            "rendered environment {}: {} assignment(s) on {} cluster type(s) into {} ({} added, {} changed, {} deleted, {} unchanged)",
            environment.name(),
            rendered.records.len(),
            rendered.content.cluster_types.len(),
            args.out.display(),
            stats.added,
            stats.modified,
            stats.deleted,
            stats.unchanged,
        );
    }
    Ok(ExitCode::SUCCESS)
}
