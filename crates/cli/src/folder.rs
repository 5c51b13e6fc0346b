//! The folder sink: `kalypso render`'s output folder as a [`Sink`] of the core's driver.
//!
//! The folder is locked for the render, cleaned of what killed renders left, and refused
//! unless it is a GitOps tree (see [`crate::output`]). Its memo is the render cache
//! ([`crate::render_cache`]): assignments whose inputs and files are unchanged since the last
//! render into the same folder are neither rendered nor rewritten. A missing or empty folder
//! is built beside its destination while rendering (each package written by the thread that
//! rendered it, see [`FreshTree`]) and renamed into place at the end; an existing tree gets
//! the update rules folder by folder, and only the files whose bytes differ are written, all
//! or nothing ([`write_update`]).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use kalypso_core::fingerprint::Fingerprint;
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::{Isolation, NoMemo, RenderMemo, Run, Sink, Writer};
use kalypso_core::schedule::Assignment;
use kalypso_core::tree::{PROMOTED_COMMIT_PATH, Package, README, Rules, promotes, readme};
use rayon::prelude::*;

use crate::fsio::{FreshTree, FsError, WriteStats, write_update};
use crate::output::{self, OutputError, OutputLock};
use crate::progress::Progress;
use crate::render_cache::{CachedAssignment, CachedFile, FolderMemo, RenderCache, Stamp, cache_file};

/// A render cache entry: cluster type, deployment target, what was written.
type CacheEntry = (String, String, CachedAssignment);

/// What the folder sink wrote.
#[derive(Debug)]
pub(crate) enum Written {
    /// An error blocks the environment: nothing was written.
    Nothing,
    /// The tree is in the folder.
    Tree(WriteStats),
}

/// `kalypso render`'s output folder, locked while the sink lives.
#[derive(Debug)]
pub(crate) struct FolderSink<'p> {
    /// The folder, its symbolic links resolved.
    out: PathBuf,
    /// The folder as the user named it.
    given: PathBuf,
    progress: &'p Progress,
    /// Print only errors.
    quiet: bool,
    /// The render cache and where it is saved (`None`: `--no-cache`, or no cache folder).
    cache: Option<(PathBuf, FolderMemo)>,
    /// A missing or empty folder is written fresh, while rendering.
    fresh: Option<Fresh>,
    _cache_lock: Option<OutputLock>,
    _lock: OutputLock,
}

/// A fresh tree being written while rendering.
#[derive(Debug)]
struct Fresh {
    /// Made when the cluster types are known ([`Sink::begin`]).
    tree: Option<FreshTree>,
    files_written: AtomicUsize,
    /// The render cache's entries of the packages written, when there is a cache.
    entries: Option<Mutex<Vec<CacheEntry>>>,
    /// The first failure; it stops further writes.
    error: Mutex<Option<FsError>>,
}

impl<'p> FolderSink<'p> {
    /// Opens the output folder `given` for a render of environment `env`: locked, recovered,
    /// checked, with the render cache in `cache_dir` (none: no cache). With
    /// [`Isolation::Registration`] (`--keep-going`) a failing registration's packages must not
    /// reach the folder, so nothing is written before the run is finished.
    pub(crate) fn open(
        given: &Path,
        env: &str,
        force: bool,
        cache_dir: Option<PathBuf>,
        isolation: Isolation,
        progress: &'p Progress,
        quiet: bool,
    ) -> Result<FolderSink<'p>> {
        let shown = given.display().to_string();
        let out = output::real_path(given, &shown)?;
        let lock = OutputLock::acquire(&out, &shown)?;
        output::recover_noting(&out, &shown, quiet)?;
        if fs::symlink_metadata(&out).is_ok() {
            if output::is_mount_point(&out) {
                return Err(OutputError::MountPoint { out: shown }.into());
            }
            if !force && !FreshTree::fits(&out)? {
                output::check_gitops_tree(&out, &shown)?;
            }
        }
        let cache_path = cache_dir.map(|dir| cache_file(&dir, given, env));
        let cache_lock = cache_path.as_deref().map(OutputLock::acquire_cache).transpose()?;
        let fresh = (isolation == Isolation::Environment && FreshTree::fits(&out)?).then(|| Fresh {
            tree: None,
            files_written: AtomicUsize::new(0),
            entries: cache_path.is_some().then(Mutex::default),
            error: Mutex::new(None),
        });
        progress.stage("loading the render cache");
        let cache = cache_path.map(|path| {
            let memo = FolderMemo {
                cache: RenderCache::load(&path),
                out: out.clone(),
            };
            (path, memo)
        });
        Ok(FolderSink {
            out,
            given: given.to_owned(),
            progress,
            quiet,
            cache,
            fresh,
            _cache_lock: cache_lock,
            _lock: lock,
        })
    }

    /// Releases the folder; the render cache (a fleet's worth of small allocations) is left
    /// to the system, as the process ends with the command.
    pub(crate) fn close(self) {
        let FolderSink { cache, .. } = self;
        std::mem::forget(cache);
    }
}

/// Writes each package into the fresh tree as soon as it is rendered, keeping what the render
/// cache needs to know about its files.
impl Writer for Fresh {
    fn write(&self, assignment: &Assignment, fingerprint: Fingerprint, package: &Package) {
        let Some(tree) = &self.tree else { return };
        if self.error.lock().is_ok_and(|e| e.is_some()) {
            return;
        }
        let (ct, dt) = (&assignment.cluster_type, &assignment.deployment_target);
        let files = package.files().map(|(name, blob)| (name, &blob[..]));
        let stamp = self.entries.is_some();
        match tree.write_folder(&[ct.as_str(), dt.as_str()].join("/"), files, stamp) {
            Ok(metadata) => {
                self.files_written
                    .fetch_add(package.files().count(), Ordering::Relaxed);
                let Some(entries) = &self.entries else { return };
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
                if let (Some(files), Ok(mut entries)) = (files, entries.lock()) {
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
}

impl Sink for FolderSink<'_> {
    type Delivered = Written;
    type Error = anyhow::Error;

    /// Where the folder has each deployment target.
    fn current_assignment(&self) -> CurrentAssignment {
        crate::current_assignment::current_from_dir(&self.given)
    }

    fn begin(&mut self, cluster_types: &BTreeSet<String>) {
        if let Some(fresh) = &mut self.fresh {
            match FreshTree::create(&self.out, cluster_types.iter().map(String::as_str)) {
                Ok(tree) => fresh.tree = Some(tree),
                Err(e) => fresh.error = Mutex::new(Some(e)),
            }
        }
    }

    /// The render cache, unless the folder is written fresh (nothing in it is clean).
    fn memo(&self) -> &dyn RenderMemo {
        match (&self.fresh, &self.cache) {
            (None, Some((_, memo))) => memo,
            _ => &NoMemo,
        }
    }

    /// A fresh tree is written while rendering; an update once the run is finished.
    fn writer(&self) -> Option<&dyn Writer> {
        self.fresh.as_ref().map(|fresh| fresh as &dyn Writer)
    }

    fn deliver(&mut self, run: &mut Run) -> Result<Written> {
        let Some(content) = run.content() else {
            // A half-built fresh tree is removed.
            self.fresh = None;
            return Ok(Written::Nothing);
        };
        let rendered = &run.rendered;
        // Everything the layout writes: each cluster type's README, the promoted commit, and
        // the files of every assignment that was rendered.
        // Built when first needed: a fresh tree without a render cache needs none.
        let built_rules = std::cell::OnceCell::new();
        let rules = || {
            built_rules.get_or_init(|| {
                Rules::new(
                    content.cluster_types.iter().map(String::as_str),
                    rendered.records.iter().map(|r| {
                        (
                            r.assignment.cluster_type.as_str(),
                            r.assignment.deployment_target.as_str(),
                        )
                    }),
                )
                .keeping(&content.kept)
                .holding(&content.held)
            })
        };
        let readme = readme();
        // The promoted commit, when one is pinned (like every file, written only if it differs).
        let promoted = promotes(None, content);
        let writing = || format!("writing the new tree into {}", self.given.display());
        // Whether an existing tree was replaced by a new one (the rare fallback of an update,
        // see `fsio::write_update`): the files carried over into it are new links of the same
        // inodes, whose change times the render cache must take again.
        let mut relinked = false;
        let (mut stats, entries) = match self.fresh.take() {
            Some(fresh) => {
                if let Some(e) = fresh.error.into_inner().ok().flatten() {
                    return Err(anyhow::Error::new(e).context(writing()));
                }
                let Some(tree) = fresh.tree else {
                    return Ok(Written::Nothing);
                };
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
                    added: fresh.files_written.into_inner()
                        + content.cluster_types.len()
                        + usize::from(promoted.is_some()),
                    ..WriteStats::default()
                };
                let entries = fresh
                    .entries
                    .map(|e| e.into_inner().unwrap_or_default())
                    .unwrap_or_default();
                (stats, entries)
            }
            None => {
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
                let stats = write_update(&self.out, rules(), &files).with_context(writing)?;
                relinked = stats.relinked;
                let entries = if self.cache.is_some() {
                    stamp_packages(&self.out, rendered)
                } else {
                    Vec::new()
                };
                (stats, entries)
            }
        };

        // Remember what is on disk now: the assignments of this render (the scheduled ones
        // of the layout rules, the held cluster types' as they were), with new entries for
        // the rendered ones; only the cluster types whose entries changed are saved.
        self.progress.stage("saving the render cache");
        if let Some((path, memo)) = &mut self.cache {
            let cache = &mut memo.cache;
            let mut changed = cache.update(|ct, dt| rules().keeps_folder(ct, dt), entries);
            if relinked {
                let clean = content
                    .delivered
                    .iter()
                    .map(|(ct, dt)| (ct.as_str(), dt.as_str()));
                changed.extend(cache.restamp(&self.out, clean));
            }
            if let Err(e) = cache.save(path, &changed)
                && !self.quiet
            {
                eprintln!("warning: cannot save the render cache {}: {e}", path.display());
            }
            // The files of the assignments the cache held are unchanged.
            stats.unchanged += content
                .delivered
                .iter()
                .filter_map(|(ct, dt)| cache.get(ct, dt))
                .map(|e| e.files.len())
                .sum::<usize>();
        }
        Ok(Written::Tree(stats))
    }
}

/// The render cache's entries for the packages of `rendered`, stamped from their files in
/// `out` (a package whose files cannot be stamped gets no entry, so it is rendered again next
/// time).
fn stamp_packages(out: &Path, rendered: &kalypso_core::Rendered) -> Vec<CacheEntry> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use kalypso_core::run::{Input, Request, RunContext};
    use kalypso_core::tree::Tree;
    use kalypso_template::Engine;

    use super::*;
    use crate::control_plane::read_inputs;
    use crate::fsio::read_tree;

    /// The example control plane copied into `dir`, with `dev`'s name in its shared config
    /// `name` (a change that reaches every assignment).
    fn control_plane(dir: &Path, name: &str) -> kalypso_core::Inputs {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/control-plane");
        let copy = dir.join(name);
        kalypso_testkit::copy_files(&example, &copy);
        let config = copy.join("dev/configs/dev-config.yaml");
        let text = fs::read_to_string(&config).unwrap();
        fs::write(
            &config,
            text.replace("ENVIRONMENT: Dev", &format!("ENVIRONMENT: {name}")),
        )
        .unwrap();
        read_inputs(&copy, "dev").unwrap()
    }

    /// Runs `request` into `out` through the folder sink (the render cache in `cache`).
    fn render(out: &Path, cache: &Path, request: Request<'_>) -> (Run, WriteStats) {
        let progress = Progress::start(true);
        let mut sink = FolderSink::open(
            out,
            "dev",
            false,
            Some(cache.to_owned()),
            Isolation::Environment,
            &progress,
            true,
        )
        .unwrap();
        let engine = Engine::new();
        let (run, written) = kalypso_core::run::run(request, &RunContext::new(&engine), &mut sink);
        let Written::Tree(stats) = written.unwrap() else {
            panic!("nothing written: {:?}", run.diagnostics);
        };
        (run, stats)
    }

    /// The files of `tree` under cluster type folder `ct`.
    fn under<'t>(tree: &'t Tree, ct: &str) -> BTreeMap<&'t str, &'t [u8]> {
        tree.iter()
            .filter(|(path, _)| path.starts_with(&format!("{ct}/")))
            .map(|(path, blob)| (path.as_str(), &blob[..]))
            .collect()
    }

    #[test]
    fn some_cluster_types_take_new_content_the_others_keep_their_folders_and_they_roll_back() {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (
            control_plane(dir.path(), "Dev"),
            control_plane(dir.path(), "Dev2"),
        );
        let (cache, out) = (dir.path().join("cache"), dir.path().join("out"));
        let whole = |name: &str, inputs| {
            let out = dir.path().join(name);
            render(
                &out,
                &dir.path().join(format!("{name}-cache")),
                Request::new("dev", inputs),
            );
            read_tree(&out).unwrap()
        };
        let (old, new) = (whole("v1", &v1), whole("v2", &v2));
        let kept = "large".to_owned();
        let cluster_types: Vec<String> = ["command-center", "drone", "large", "small"]
            .map(String::from)
            .into();
        for ct in &cluster_types {
            assert!(!under(&old, ct).is_empty(), "{ct}");
            assert_ne!(under(&old, ct), under(&new, ct), "{ct}: the change reaches it");
        }
        let reached: BTreeSet<String> = cluster_types.iter().filter(|ct| **ct != kept).cloned().collect();

        // Version 1 everywhere, written fresh; then version 2 except on `large`.
        render(&out, &cache, Request::new("dev", &v1));
        assert_eq!(read_tree(&out).unwrap(), old);
        let (wave, _) = render(&out, &cache, Request::new("dev", &v2).keeping([kept.clone()]));
        let tree = read_tree(&out).unwrap();
        assert_eq!(under(&tree, &kept), under(&old, &kept));
        for ct in &reached {
            assert_eq!(under(&tree, ct), under(&new, ct), "{ct}");
        }
        assert_eq!(tree.len(), new.len());
        assert!(
            wave.rendered
                .records
                .iter()
                .all(|r| r.assignment.cluster_type != kept)
        );
        assert_eq!(wave.rendered_now, wave.rendered.records.len());

        // Version 2 everywhere: the render cache kept `large`'s entries while it was held and
        // took the others', so `large` alone renders.
        let (all, _) = render(&out, &cache, Request::new("dev", &v2));
        assert_eq!(read_tree(&out).unwrap(), new);
        let on_large = all
            .rendered
            .records
            .iter()
            .filter(|r| r.assignment.cluster_type == kept)
            .count();
        assert!(on_large > 0);
        assert_eq!(all.rendered_now, on_large);

        // Rolled back: the reached cluster types get version 1 again, `large` stays at 2.
        let (back, stats) = render(
            &out,
            &cache,
            Request::new("dev", &v2)
                .rendering_from(reached.clone(), Input::Trees(&v1))
                .keeping([kept.clone()]),
        );
        assert!(
            stats.modified > 0 && stats.added + stats.deleted == 0,
            "{stats:?}"
        );
        assert!(
            back.rendered
                .records
                .iter()
                .all(|r| r.assignment.cluster_type != kept)
        );
        let tree = read_tree(&out).unwrap();
        assert_eq!(under(&tree, &kept), under(&new, &kept));
        for ct in &reached {
            assert_eq!(under(&tree, ct), under(&old, ct), "{ct}");
        }

        // And version 2 everywhere again: the reached cluster types render, `large` is clean.
        let (again, _) = render(&out, &cache, Request::new("dev", &v2));
        assert_eq!(read_tree(&out).unwrap(), new);
        assert_eq!(again.rendered_now, again.rendered.records.len() - on_large);
    }
}
