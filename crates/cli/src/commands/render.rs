//! `kalypso render`: one environment's GitOps tree, written into a folder.
//!
//! Rendering is incremental: assignments whose inputs and files are unchanged since the last
//! render into the same folder (see [`crate::render_cache`]) are neither rendered nor
//! rewritten; the update rules are applied folder by folder, so unchanged files are never
//! read. Everything else is rendered in parallel and only files whose bytes differ are
//! written.

use std::collections::HashSet;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kalypso_core::tree::{PROMOTED_COMMIT_PATH, README, Rules, promotes, readme};
use kalypso_core::{Diagnostics, Environment, Job, prepare};
use kalypso_template::Engine;
use rayon::prelude::*;

use super::report;
use crate::control_plane::{check_output, read_inputs};
use crate::fsio::write_update;
use crate::progress::Progress;
use crate::render_cache::{CachedAssignment, CachedFile, RenderCache, Stamp, cache_file, default_cache_dir};
use crate::{GlobalArgs, RenderArgs};

pub(crate) fn render(args: &RenderArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let progress = Progress::start(global.quiet);
    progress.stage("reading the control plane");
    let inputs = read_inputs(&args.control_plane, &args.env)?;
    check_output(&args.control_plane, &args.env, &args.out)?;
    let mut diagnostics = Diagnostics::new();
    progress.stage("parsing the control plane");
    let namespace = kalypso_core::load_namespace(&args.env, &inputs, &mut diagnostics);
    progress.stage("scheduling");
    let environment = Environment::new(namespace, &mut diagnostics);
    let engine = Engine::new();
    progress.stage("merging configs and fingerprinting");
    let prepared = prepare(&environment, &engine, &mut diagnostics);

    let cache_path = if args.no_cache {
        None
    } else {
        args.cache_dir
            .clone()
            .or_else(default_cache_dir)
            .map(|dir| cache_file(&dir, &args.out, &args.env))
    };
    progress.stage("loading the render cache");
    let mut cache = cache_path.as_deref().map(RenderCache::load).unwrap_or_default();
    progress.stage("checking the output folder");
    // Jobs come in tree order: each cluster type's jobs are one run.
    let by_cluster_type: Vec<&[Job<'_>]> = prepared
        .jobs()
        .chunk_by(|a, b| a.assignment.cluster_type == b.assignment.cluster_type)
        .collect();
    let clean: HashSet<(&str, &str)> = by_cluster_type
        .par_iter()
        .flat_map_iter(|jobs| {
            let cluster_type = jobs[0].assignment.cluster_type.as_str();
            cache
                .clean_targets(
                    &args.out,
                    cluster_type,
                    jobs.iter()
                        .map(|job| (job.assignment.deployment_target.as_str(), job.fingerprint)),
                )
                .into_iter()
                .map(move |target| (cluster_type, target))
        })
        .collect();
    progress.rendering(prepared.jobs().len() - clean.len());
    let rendered = prepared.render(&engine, &mut diagnostics, |job| {
        let selected = !clean.contains(&(
            job.assignment.cluster_type.as_str(),
            job.assignment.deployment_target.as_str(),
        ));
        if selected {
            progress.rendered_one();
        }
        selected
    });
    progress.stage("laying out the tree");
    report(&diagnostics, global);
    if diagnostics.has_errors() {
        eprintln!(
            "error: environment {:?} has {} problem(s); nothing was written to {}",
            args.env,
            diagnostics.errors().count(),
            args.out.display()
        );
        progress.finish();
        return Ok(ExitCode::FAILURE);
    }

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
    );
    let mut files = Vec::new();
    let readme = readme();
    for ct in &content.cluster_types {
        files.push((format!("{ct}/{README}"), readme.clone()));
    }
    // The promoted commit, when one is pinned (like every file, written only if it differs).
    if let Some(blob) = promotes(None, content) {
        files.push((PROMOTED_COMMIT_PATH.to_owned(), blob));
    }
    for ((ct, dt), package) in &content.packages {
        for (name, blob) in package.files() {
            files.push((format!("{ct}/{dt}/{name}"), blob.clone()));
        }
    }
    progress.stage("writing");
    let mut stats = write_update(&args.out, &rules, &files)
        .with_context(|| format!("writing the new tree into {}", args.out.display()))?;

    // Remember what is on disk now: the assignments of this render (the scheduled ones of the
    // layout rules), with new entries for the re-rendered ones; only the cluster types whose
    // entries changed are saved.
    progress.stage("saving the render cache");
    if let Some(path) = &cache_path {
        let entries: Vec<(String, String, CachedAssignment)> = content
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
                        let stamp = Stamp::of(&args.out.join(ct).join(dt).join(name))?;
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
            .collect();
        let changed = cache.update(|ct, dt| rules.is_scheduled(ct, dt), entries);
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
            args.out.display(),
            stats.added,
            stats.modified,
            stats.deleted,
            stats.unchanged,
            content.packages.len(),
        );
    }
    Ok(ExitCode::SUCCESS)
}
