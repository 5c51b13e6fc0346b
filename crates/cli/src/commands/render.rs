//! `kalypso render`: one environment's GitOps tree, written into a folder.
//!
//! Rendering is incremental: assignments whose inputs and files are unchanged since the last
//! render into the same folder (see [`crate::render_cache`]) are neither rendered nor
//! rewritten; the update rules are applied folder by folder, so unchanged files are never
//! read. Everything else is rendered in parallel and only files whose bytes differ are
//! written. A missing or empty output folder is built beside its destination while rendering
//! (each package written as soon as it is rendered) and renamed into place at the end.

use std::collections::HashSet;
use std::fs;
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use kalypso_core::run::Isolation;
use kalypso_core::tree::Package;
use kalypso_core::tree::{PROMOTED_COMMIT_PATH, README, Rules, promotes, readme};
use kalypso_core::{Diagnostics, Job, prepare};
use rayon::prelude::*;

use super::report;
use crate::control_plane::{check_output, check_outside_clone};
use crate::fsio::{FreshTree, FsError, WriteStats, write_update};
use crate::output::{self, OutputError, OutputLock};
use crate::progress::Progress;
use crate::render_cache::{CachedAssignment, CachedFile, RenderCache, Stamp, cache_file, default_cache_dir};
use crate::settings::{Global, Render};
use crate::source::{ControlPlaneSource, GitAccess};

pub(crate) fn render(settings: &Render, global: &Global) -> Result<ExitCode> {
    let progress = Progress::start(global.quiet);
    progress.stage("reading the control plane");
    let git = GitAccess::new(&settings.git)?;
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
    // The output folder: locked for this render, cleaned of what killed renders left, and
    // refused unless it is a GitOps tree (see `crate::output`).
    let shown = settings.out.display().to_string();
    let out = output::real_path(&settings.out, &shown)?;
    let _lock = OutputLock::acquire(&out, &shown)?;
    output::recover_noting(&out, &shown, global.quiet)?;
    if fs::symlink_metadata(&out).is_ok() {
        if output::is_mount_point(&out) {
            return Err(OutputError::MountPoint { out: shown }.into());
        }
        if !settings.force && !FreshTree::fits(&out)? {
            output::check_gitops_tree(&out, &shown)?;
        }
    }
    let mut diagnostics = Diagnostics::new();
    progress.stage("loading and scheduling");
    let environment = super::schedule(
        &inputs,
        &settings.env,
        &|| crate::current_assignment::current_from_dir(&settings.out),
        &mut diagnostics,
    );
    let (engine, engine_error) = super::engine();
    if let Some(error) = engine_error {
        diagnostics.push(error);
    }
    progress.stage("merging configs and fingerprinting");
    let prepared = prepare(&environment, &engine, &mut diagnostics);

    let cache_path = if settings.render_cache {
        settings
            .git
            .cache_dir_given()
            .map(ToOwned::to_owned)
            .or_else(default_cache_dir)
            .map(|dir| cache_file(&dir, &settings.out, &settings.env))
    } else {
        None
    };
    // A missing or empty output folder is written while rendering; otherwise the render cache
    // says which assignments are clean.
    let _cache_lock = cache_path.as_deref().map(OutputLock::acquire_cache).transpose()?;
    // With --keep-going, what a failing registration rendered must not reach OUT: packages
    // are written once the run is finished.
    let fresh = if settings.isolation == Isolation::Environment && FreshTree::fits(&out)? {
        let cluster_types = environment.namespace.cluster_types.keys().map(String::as_str);
        Some(FreshTree::create(&out, cluster_types)?)
    } else {
        None
    };
    progress.stage("loading the render cache");
    let mut cache = cache_path.as_deref().map(RenderCache::load).unwrap_or_default();
    progress.stage("checking the output folder");
    // Jobs come in tree order: each cluster type's jobs are one run.
    let by_cluster_type: Vec<&[Job<'_>]> = prepared
        .jobs()
        .chunk_by(|a, b| a.assignment.cluster_type == b.assignment.cluster_type)
        .collect();
    let clean: HashSet<(&str, &str)> = if fresh.is_some() {
        HashSet::new()
    } else {
        by_cluster_type
            .par_iter()
            .flat_map_iter(|jobs| {
                let cluster_type = jobs[0].assignment.cluster_type.as_str();
                cache
                    .clean_targets(
                        &out,
                        cluster_type,
                        jobs.iter()
                            .map(|job| (job.assignment.deployment_target.as_str(), job.fingerprint)),
                    )
                    .into_iter()
                    .map(move |target| (cluster_type, target))
            })
            .collect()
    };
    progress.rendering(prepared.jobs().len() - clean.len());
    let writer = fresh
        .as_ref()
        .map(|tree| FreshWriter::new(tree, cache_path.is_some()));
    let re_rendered = AtomicUsize::new(0);
    let rendered = prepared.render_with(
        &engine,
        &mut diagnostics,
        |job| {
            let selected = !clean.contains(&(
                job.assignment.cluster_type.as_str(),
                job.assignment.deployment_target.as_str(),
            ));
            if selected {
                progress.rendered_one();
            }
            selected
        },
        |job, package| {
            re_rendered.fetch_add(1, Ordering::Relaxed);
            match &writer {
                Some(writer) => {
                    writer.write(job, &package);
                    None
                }
                None => Some(package),
            }
        },
    );
    progress.stage("laying out the tree");
    // The clean assignments outlive the prepared render, which borrows the environment that
    // the run takes over (it is forgotten rather than freed: see the end).
    let clean: HashSet<(String, String)> = clean
        .into_iter()
        .map(|(ct, dt)| (ct.to_owned(), dt.to_owned()))
        .collect();
    std::mem::forget(prepared);
    let mut run = kalypso_core::run::finish(environment, rendered, diagnostics, settings.isolation);
    inputs.place_fields(&mut run.diagnostics);
    report(&run.diagnostics, global);
    if run.is_blocked() {
        eprintln!(
            "error: environment {:?} has {} problem(s); nothing was written to {}",
            settings.env,
            run.diagnostics.errors().count(),
            settings.out.display()
        );
        progress.finish();
        return Ok(ExitCode::FAILURE);
    }
    let rendered = &run.rendered;
    let environment = &run.environment;

    // Everything the layout writes: each cluster type's README, the promoted commit, and the
    // files of every assignment that was rendered.
    let content = &rendered.content;
    let rules = Rules::new(
        content.cluster_types.iter().map(String::as_str),
        rendered.records.iter().map(|r| {
            (
                r.assignment.cluster_type.as_str(),
                r.assignment.deployment_target.as_str(),
            )
        }),
    )
    .keeping(content.kept.as_ref());
    let readme = readme();
    // The promoted commit, when one is pinned (like every file, written only if it differs).
    let promoted = promotes(None, content);
    progress.stage("writing");
    let written = writer.map(FreshWriter::finish);
    let writing = || format!("writing the new tree into {}", settings.out.display());
    // Whether an existing tree was replaced by a new one (the rare fallback of an update,
    // see `fsio::write_update`): the files carried over into it are new links of the same
    // inodes, whose change times the render cache must take again.
    let mut relinked = false;
    let (mut stats, entries) = match (fresh, written) {
        (Some(tree), Some(written)) => {
            let (files_written, entries) = written.with_context(writing)?;
            let finish = || {
                for ct in &content.cluster_types {
                    tree.write(&format!("{ct}/{README}"), &readme)?;
                }
                if let Some(blob) = &promoted {
                    tree.write(PROMOTED_COMMIT_PATH, blob)?;
                }
                tree.commit()
            };
            finish().with_context(writing)?;
            let stats = WriteStats {
                added: files_written + content.cluster_types.len() + usize::from(promoted.is_some()),
                ..WriteStats::default()
            };
            (stats, entries)
        }
        _ => {
            let mut files = Vec::new();
            for ct in &content.cluster_types {
                files.push((format!("{ct}/{README}"), readme.clone()));
            }
            if let Some(blob) = promoted {
                files.push((PROMOTED_COMMIT_PATH.to_owned(), blob));
            }
            for ((ct, dt), package) in &content.packages {
                for (name, blob) in package.files() {
                    files.push((format!("{ct}/{dt}/{name}"), blob.clone()));
                }
            }
            let stats = write_update(&out, &rules, &files).with_context(writing)?;
            relinked = stats.relinked;
            let entries = if cache_path.is_some() {
                stamp_packages(&out, rendered)
            } else {
                Vec::new()
            };
            (stats, entries)
        }
    };

    // Remember what is on disk now: the assignments of this render (the scheduled ones of the
    // layout rules), with new entries for the re-rendered ones; only the cluster types whose
    // entries changed are saved.
    progress.stage("saving the render cache");
    if let Some(path) = &cache_path {
        let mut changed = cache.update(|ct, dt| rules.keeps_folder(ct, dt), entries);
        if relinked {
            changed.extend(cache.restamp(&out, clean.iter().map(|(ct, dt)| (ct.as_str(), dt.as_str()))));
        }
        if let Err(e) = cache.save(path, &changed)
            && !global.quiet
        {
            eprintln!("warning: cannot save the render cache {}: {e}", path.display());
        }
    }
    progress.finish();
    let clean_files: usize = clean
        .iter()
        .filter_map(|(ct, dt)| cache.get(ct, dt))
        .map(|e| e.files.len())
        .sum();
    stats.unchanged += clean_files;
    if !global.quiet {
        println!(
            "rendered environment {}: {} assignment(s) on {} cluster type(s) into {} ({} added, {} changed, {} deleted, {} unchanged; {} assignment(s) re-rendered)",
            environment.name(),
            rendered.records.len(),
            content.cluster_types.len(),
            settings.out.display(),
            stats.added,
            stats.modified,
            stats.deleted,
            stats.unchanged,
            re_rendered.into_inner(),
        );
    }
    // The process ends with this command: the system takes back a fleet's worth of small
    // allocations at once, much faster than freeing them one by one (a tenth of a fleet
    // render's time).
    let failed = !run.isolated.is_empty();
    if failed {
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
    }
    std::mem::forget(run);
    std::mem::forget(inputs);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The render cache's entries for the packages of `rendered`, stamped from their files in
/// `out` (a package whose files cannot be stamped gets no entry, so it is rendered again next
/// time).
fn stamp_packages(out: &std::path::Path, rendered: &kalypso_core::Rendered) -> Vec<CacheEntry> {
    rendered
        .content
        .packages
        .par_iter()
        .filter_map(|((ct, dt), package)| {
            let record = rendered
                .records
                .binary_search_by(|r| {
                    (
                        r.assignment.cluster_type.as_str(),
                        r.assignment.deployment_target.as_str(),
                    )
                        .cmp(&(ct.as_str(), dt.as_str()))
                })
                .ok()
                .map(|i| &rendered.records[i])?;
            let files = package
                .files()
                .map(|(name, _)| {
                    let stamp = Stamp::of(&out.join(ct).join(dt).join(name))?;
                    Some(CachedFile {
                        name: name.to_owned(),
                        stamp,
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            Some((
                ct.clone(),
                dt.clone(),
                CachedAssignment {
                    fingerprint: record.fingerprint,
                    files,
                },
            ))
        })
        .collect()
}

/// A render cache entry: cluster type, deployment target, what was written.
type CacheEntry = (String, String, CachedAssignment);

/// Writes packages into a fresh tree on the rendering threads, as they are rendered, and
/// keeps what the render cache needs to know about them. The first failure is kept and
/// stops further writes.
struct FreshWriter<'t> {
    tree: &'t FreshTree,
    stamp: bool,
    files_written: AtomicUsize,
    entries: Mutex<Vec<CacheEntry>>,
    error: Mutex<Option<FsError>>,
}

impl<'t> FreshWriter<'t> {
    /// A writer into `tree`; with `stamp`, each file's stamp is taken for the render cache.
    fn new(tree: &'t FreshTree, stamp: bool) -> FreshWriter<'t> {
        FreshWriter {
            tree,
            stamp,
            files_written: AtomicUsize::new(0),
            entries: Mutex::new(Vec::new()),
            error: Mutex::new(None),
        }
    }

    fn write(&self, job: &Job<'_>, package: &Package) {
        if self.error.lock().is_ok_and(|e| e.is_some()) {
            return;
        }
        let (ct, dt) = (&job.assignment.cluster_type, &job.assignment.deployment_target);
        let files = package.files().map(|(name, blob)| (name, &blob[..]));
        match self.tree.write_folder(&format!("{ct}/{dt}"), files, self.stamp) {
            Ok(metadata) => {
                self.files_written
                    .fetch_add(package.files().count(), Ordering::Relaxed);
                if !self.stamp {
                    return;
                }
                let files = package
                    .files()
                    .zip(&metadata)
                    .map(|((name, _), meta)| {
                        Some(CachedFile {
                            name: name.to_owned(),
                            stamp: Stamp::from_metadata(meta)?,
                        })
                    })
                    .collect::<Option<Vec<_>>>();
                if let (Some(files), Ok(mut entries)) = (files, self.entries.lock()) {
                    let fingerprint = job.fingerprint;
                    entries.push((ct.clone(), dt.clone(), CachedAssignment { fingerprint, files }));
                }
            }
            Err(e) => {
                if let Ok(mut error) = self.error.lock() {
                    error.get_or_insert(e);
                }
            }
        }
    }

    /// How many files were written and the render cache entries, or the first failure.
    fn finish(self) -> Result<(usize, Vec<CacheEntry>), FsError> {
        if let Some(e) = self.error.into_inner().ok().flatten() {
            return Err(e);
        }
        let entries = self.entries.into_inner().unwrap_or_default();
        Ok((self.files_written.into_inner(), entries))
    }
}
