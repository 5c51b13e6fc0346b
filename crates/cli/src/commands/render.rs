//! `kalypso render`: one environment's GitOps tree, written into a folder.
//!
//! Rendering is incremental: assignments whose inputs and files are unchanged since the last
//! render into the same folder (see [`crate::render_cache`]) are neither rendered nor
//! rewritten; the update rules are applied folder by folder, so unchanged files are never
//! read. Everything else is rendered in parallel and only files whose bytes differ are
//! written.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kalypso_core::fingerprint::digest;
use kalypso_core::tree::{PROMOTED_COMMIT_PATH, README, Rules, promotes, readme};
use kalypso_core::{Diagnostics, Environment, prepare};
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
    progress.stage("scheduling");
    let namespace = kalypso_core::load_namespace(&args.env, &inputs, &mut diagnostics);
    let environment = Environment::new(namespace, &mut diagnostics);
    let engine = Engine::new();
    let prepared = prepare(&environment, &engine, &mut diagnostics);

    let cache_path = if args.no_cache {
        None
    } else {
        args.cache_dir
            .clone()
            .or_else(default_cache_dir)
            .map(|dir| cache_file(&dir, &args.out, &args.env))
    };
    let mut cache = cache_path.as_deref().map(RenderCache::load).unwrap_or_default();
    progress.stage("checking the output folder");
    let clean: HashSet<(&str, &str)> = prepared
        .jobs()
        .par_iter()
        .filter(|job| {
            let a = job.assignment;
            cache.is_clean(&args.out, &a.cluster_type, &a.deployment_target, job.fingerprint)
        })
        .map(|job| {
            (
                job.assignment.cluster_type.as_str(),
                job.assignment.deployment_target.as_str(),
            )
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
    progress.finish();
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
    let current_commit = std::fs::read(args.out.join(PROMOTED_COMMIT_PATH)).ok();
    if let Some(blob) = promotes(current_commit.as_deref(), content) {
        files.push((PROMOTED_COMMIT_PATH.to_owned(), blob));
    }
    for ((ct, dt), package) in &content.packages {
        for (name, blob) in package.files() {
            files.push((format!("{ct}/{dt}/{name}"), blob.clone()));
        }
    }
    let mut stats = write_update(&args.out, &rules, &files)
        .with_context(|| format!("writing the new tree into {}", args.out.display()))?;

    // Remember what is on disk now.
    if let Some(path) = &cache_path {
        let entries: HashMap<(String, String), CachedAssignment> = rendered
            .records
            .par_iter()
            .filter_map(|record| {
                let (ct, dt) = (
                    &record.assignment.cluster_type,
                    &record.assignment.deployment_target,
                );
                let files = match content.packages.get(&(ct.clone(), dt.clone())) {
                    Some(package) => package
                        .files()
                        .map(|(name, blob)| {
                            let stamp = Stamp::of(&args.out.join(ct).join(dt).join(name))?;
                            Some(CachedFile {
                                name: name.to_owned(),
                                digest: digest(blob),
                                stamp,
                            })
                        })
                        .collect::<Option<Vec<_>>>()?,
                    None => cache.get(ct, dt)?.files.clone(),
                };
                Some((
                    (ct.clone(), dt.clone()),
                    CachedAssignment {
                        fingerprint: record.fingerprint,
                        files,
                    },
                ))
            })
            .collect();
        cache.replace(entries);
        if let Err(e) = cache.save(path)
            && !global.quiet
        {
            eprintln!("warning: cannot save the render cache {}: {e}", path.display());
        }
    }
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
