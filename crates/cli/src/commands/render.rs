//! `kalypso render`: one environment's GitOps tree, written into a folder.
//!
//! Settings → the core's driver ([`kalypso_core::run::run`]) with the folder sink
//! ([`crate::folder`], which holds the folder's lock, its render cache and the writing) →
//! report. Rendering is incremental: assignments whose inputs and files are unchanged since
//! the last render into the same folder are neither rendered nor rewritten.

use std::process::ExitCode;

use anyhow::Result;
use kalypso_core::run::{Observer, Request, Run, RunContext, Stage};
use kalypso_git::extenders::HttpExtenders;

use super::report;
use crate::control_plane::{check_output, check_outside_clone};
use crate::folder::{FolderSink, Written};
use crate::progress::Progress;
use crate::render_cache::default_cache_dir;
use crate::settings::{Global, Render};
use crate::source::{ControlPlaneSource, GitAccess};

pub(crate) fn render(settings: &Render, global: &Global) -> Result<ExitCode> {
    let progress = Progress::start(global.quiet);
    progress.stage("reading the control plane");
    let git = GitAccess::new(&settings.git)?;
    // Held until the end: a git control plane's cache is not written by another command
    // meanwhile.
    let mut source = ControlPlaneSource::open(&settings.control_plane, &git, global.quiet)?;
    let inputs = source.inputs(&settings.env)?;
    match &source {
        ControlPlaneSource::Folder(dir) => check_output(dir, &settings.env, &settings.out)?,
        ControlPlaneSource::Git { .. } => {
            if let Some(workdir) = source.local_dir() {
                check_outside_clone(workdir, &settings.out)?;
            }
        }
    }
    let cache_dir = settings
        .render_cache
        .then(|| {
            settings
                .git
                .cache_dir_given()
                .map(ToOwned::to_owned)
                .or_else(default_cache_dir)
        })
        .flatten();
    let mut folder = FolderSink::open(
        &settings.out,
        &settings.env,
        settings.force,
        cache_dir,
        settings.isolation,
        &progress,
        global.quiet,
    )?;

    let engine = global.engine();
    let extenders = HttpExtenders::new();
    let observer = Stages(&progress);
    let context = RunContext {
        extenders: &extenders,
        isolation: settings.isolation,
        observer: &observer,
        ..RunContext::new(&engine)
    };
    let (run, written) = kalypso_core::run::run(Request::new(&settings.env, &inputs), &context, &mut folder);

    let code = report_run(settings, global, &run, written, &progress);
    folder.close();
    // The process ends with this command: the system takes back a fleet's worth of small
    // allocations at once, much faster than freeing them one by one (a tenth of a fleet
    // render's time).
    std::mem::forget(run);
    std::mem::forget(inputs);
    code
}

/// The diagnostics, then what was written, or why nothing was.
fn report_run(
    settings: &Render,
    global: &Global,
    run: &Run,
    written: Result<Written>,
    progress: &Progress,
) -> Result<ExitCode> {
    report(&run.diagnostics, global);
    let stats = match written? {
        Written::Tree(stats) => stats,
        Written::Nothing => {
            eprintln!(
                "error: environment {:?} has {} problem(s); nothing was written to {}",
                settings.env,
                run.diagnostics.errors().count(),
                settings.out.display()
            );
            progress.finish();
            return Ok(ExitCode::FAILURE);
        }
    };
    progress.finish();
    let rendered = &run.rendered;
    if !global.quiet {
        println!(
            "rendered environment {}: {} assignment(s) on {} cluster type(s) into {} ({} added, {} changed, {} deleted, {} unchanged; {} assignment(s) re-rendered)",
            settings.env,
            rendered.records.len(),
            rendered.content.cluster_types.len(),
            settings.out.display(),
            stats.added,
            stats.modified,
            stats.deleted,
            stats.unchanged,
            run.rendered_now,
        );
    }
    if run.isolated.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "error: environment {:?}: the workloads of {} failed; their folders in {} were kept as they were",
        settings.env,
        run.isolated
            .iter()
            .map(|r| format!("{r:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        settings.out.display()
    );
    Ok(ExitCode::FAILURE)
}

/// The driver's steps on the progress display (and in `KALYPSO_TIMINGS`).
struct Stages<'p>(&'p Progress);

impl Observer for Stages<'_> {
    fn stage(&self, stage: Stage) {
        match stage {
            Stage::Scheduling => self.0.stage("loading and scheduling"),
            Stage::Preparing => self.0.stage("merging configs and fingerprinting"),
            Stage::CheckingMemo => self.0.stage("checking the output folder"),
            Stage::Rendering { assignments } => self.0.rendering(assignments),
            Stage::Finishing => self.0.stage("laying out the tree"),
            Stage::Delivering => self.0.stage("writing"),
        }
    }

    fn rendered(&self) {
        self.0.rendered_one();
    }
}
