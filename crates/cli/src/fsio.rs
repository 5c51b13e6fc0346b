//! File-system edges: reading control-plane folders into source trees, reading a GitOps
//! folder into a tree, and writing a new tree over it safely.
//!
//! Writing is all or nothing for the whole tree as kalypso sees it, whatever happens to the
//! process:
//!
//! - a missing or empty output folder is built beside its destination
//!   (`.<name>.kalypso-new-<pid>`, see [`FreshTree`]) and renamed into place;
//! - an existing tree is updated through a journal ([`write_update`], [`write_tree`]): the
//!   new and changed files are staged in a folder beside it, the update is written down
//!   ([`crate::output::Journal`]: the paths to delete, the files to move in, the folders to
//!   prune), and only then is the tree changed, by deletions and one rename per file.
//!   Unchanged files, root files, dot-folders and `.git` are not touched, so an update costs
//!   what the change does; a tree that does not change is not touched at all.
//!
//! A failure before the journal is written removes the staging folder and leaves the output
//! as it was; after it, the update is carried out to the end: by this render, or after a
//! kill by the next kalypso command that touches the folder (a render, or a reader such as
//! `plan --against`), which finishes it under the lock before anything else
//! ([`crate::output::recover`], [`crate::output::settle_for_reading`]). The carrying out is
//! not atomic for other programs: while it runs, and after a kill during it until then, the
//! folder holds some new files and some old (a whole new version per update, switched by
//! one rename, would be; it was measured and rejected, see the README's "Writing the output
//! folder"). A name that is not UTF-8 among the paths to delete (the
//! journal cannot hold it) falls back to staging the whole tree as hard links and swapping
//! it in with `renameat2(RENAME_EXCHANGE)`. Durability against power loss is the file
//! system's: nothing is `fsync`ed. No write ever follows a symbolic link out of the output
//! folder, and the files of `.git` are never read or written.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use kalypso_core::source::{SourceFile, SourceTree};
use kalypso_core::tree::{Blob, Change, Rules, Tree, diff};
use rayon::prelude::*;
use rustix::fs::{self as rfs, Mode, OFlags};
use rustix::io::Errno;

use crate::output;

/// Errors of reading and writing folders; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A file or folder could not be read.
    #[error("cannot read {path}: {cause}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause (part of the message, so not also reported as the error's source).
        cause: io::Error,
    },
    /// A file or folder could not be written or removed.
    #[error("cannot write {path}: {cause}")]
    Write {
        /// The path.
        path: PathBuf,
        /// The cause (part of the message, so not also reported as the error's source).
        cause: io::Error,
    },
    /// A path inside the output folder is a symbolic link; writing through it could escape
    /// the folder.
    #[error("refusing to write through symbolic link {0}")]
    Symlink(PathBuf),
    /// A path of the tree is not a plain relative path.
    #[error("refusing to write unsafe path {0:?}")]
    UnsafePath(String),
    /// The output path exists but is not a folder (nor a link to one).
    #[error("{0} is not a folder")]
    NotAFolder(PathBuf),
    /// The output folder is read-only: the new tree, which takes over its permissions,
    /// could not be written either.
    #[error("{0} is read-only (no write permission); make it writable (chmod u+w) to render into it")]
    ReadOnly(PathBuf),
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |cause| FsError::Read {
        path: path.to_owned(),
        cause,
    }
}

fn write_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |cause| FsError::Write {
        path: path.to_owned(),
        cause,
    }
}

/// Every regular file under `dir` (recursively, not following symbolic links, skipping
/// `.git`), as `/`-separated relative paths, sorted.
fn walk(dir: &Path) -> Result<Vec<(String, PathBuf)>, FsError> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        for entry in fs::read_dir(&path).map_err(read_err(&path))? {
            let entry = entry.map_err(read_err(&path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let file_type = entry.file_type().map_err(read_err(&entry.path()))?;
            if file_type.is_dir() {
                if name != ".git" {
                    stack.push((entry.path(), child_rel));
                }
            } else if file_type.is_file() {
                out.push((child_rel, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a folder into a source tree labelled `label`.
pub fn read_source_tree(dir: &Path, label: &str) -> Result<SourceTree, FsError> {
    let files = walk(dir)?
        .into_par_iter()
        .map(|(rel, path)| {
            fs::read(&path)
                .map(|bytes| SourceFile::new(rel, bytes))
                .map_err(read_err(&path))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SourceTree::new(label, files))
}

/// Reads a GitOps folder into a tree (empty if the folder does not exist).
pub fn read_tree(dir: &Path) -> Result<Tree, FsError> {
    if !dir.exists() {
        return Ok(Tree::new());
    }
    walk(dir)?
        .into_iter()
        .map(|(rel, path)| {
            fs::read(&path)
                .map(|bytes| (rel, Blob::from(bytes)))
                .map_err(read_err(&path))
        })
        .collect()
}

/// What [`write_tree`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Files created.
    pub added: usize,
    /// Files whose content changed.
    pub modified: usize,
    /// Files removed.
    pub deleted: usize,
    /// Files left untouched.
    pub unchanged: usize,
    /// Whether the untouched files were carried into a new tree as hard links (which
    /// changes their change times), rather than left where they were.
    pub relinked: bool,
}

fn check_relative(rel: &str) -> Result<(), FsError> {
    if output::is_plain_relative(rel) {
        Ok(())
    } else {
        Err(FsError::UnsafePath(rel.to_owned()))
    }
}

/// A plain name: one safe path segment (see [`check_relative`]).
fn check_name(name: &str) -> Result<(), FsError> {
    if output::is_plain_name(name) {
        Ok(())
    } else {
        Err(FsError::UnsafePath(name.to_owned()))
    }
}

/// Fails if any existing component of `rel` below `root` (including `rel` itself) is a
/// symbolic link. Folders already known to be real folders are skipped.
fn check_no_symlinks(root: &Path, rel: &str, known_dirs: &mut HashSet<String>) -> Result<(), FsError> {
    let mut prefix = String::new();
    let segments: Vec<&str> = rel.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(segment);
        let is_last = i + 1 == segments.len();
        if !is_last && known_dirs.contains(&prefix) {
            continue;
        }
        let path = root.join(&prefix);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(FsError::Symlink(path)),
            Ok(meta) => {
                if meta.is_dir() {
                    known_dirs.insert(prefix.clone());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(FsError::Read { path, cause: e }),
        }
    }
    Ok(())
}

/// The folders that must exist for `paths`, parents before children.
fn parent_dirs<'a>(paths: impl Iterator<Item = &'a str>) -> BTreeSet<&'a str> {
    let mut dirs = BTreeSet::new();
    for path in paths {
        let mut end = path.len();
        while let Some(slash) = path[..end].rfind('/') {
            if !dirs.insert(&path[..slash]) {
                break;
            }
            end = slash;
        }
    }
    dirs
}

/// Makes the folder at `dir` hold `new` instead of `old` (which must be what
/// [`read_tree`] read from it): only changed files are written, removed files are deleted,
/// and folders left empty by deletions are removed.
///
/// A missing or empty `dir` is built beside it and renamed into place in one step; an
/// existing tree is updated through a journal (see the module's documentation). Either way,
/// a failure leaves `dir` as it was.
pub fn write_tree(dir: &Path, old: &Tree, new: &Tree) -> Result<WriteStats, FsError> {
    let changes = diff(old, new);
    let mut stats = WriteStats {
        unchanged: new.len(),
        ..WriteStats::default()
    };
    for (path, change) in &changes {
        check_relative(path)?;
        match change {
            Change::Added => stats.added += 1,
            Change::Modified => stats.modified += 1,
            Change::Deleted => stats.deleted += 1,
        }
    }
    stats.unchanged -= stats.added + stats.modified;
    if changes.is_empty() {
        return Ok(stats);
    }
    if old.is_empty() && is_missing_or_empty_dir(dir)? {
        let files: Vec<(&str, &[u8])> = new.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
        write_fresh(dir, &files)?;
    } else {
        let mut known_dirs = HashSet::new();
        for (path, _) in &changes {
            check_no_symlinks(dir, path, &mut known_dirs)?;
        }
        let delete: Vec<String> = changes
            .iter()
            .filter(|(_, c)| *c == Change::Deleted)
            .map(|(p, _)| p.clone())
            .collect();
        let writes: Vec<(&str, &[u8])> = changes
            .iter()
            .filter(|(_, c)| *c != Change::Deleted)
            .filter_map(|(p, _)| new.get(p).map(|b| (p.as_str(), &b[..])))
            .collect();
        update_in_place(dir, delete, &writes, true)?;
    }
    Ok(stats)
}

fn is_missing_or_empty_dir(dir: &Path) -> Result<bool, FsError> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(FsError::Read {
            path: dir.to_owned(),
            cause: e,
        }),
        Ok(meta) if meta.is_dir() => Ok(fs::read_dir(dir).map_err(read_err(dir))?.next().is_none()),
        Ok(_) if !dir.is_dir() => Err(FsError::NotAFolder(dir.to_owned())),
        Ok(_) => Ok(false),
    }
}

/// Writes `files` into a new folder beside `dir`, then renames it to `dir`.
fn write_fresh(dir: &Path, files: &[(&str, &[u8])]) -> Result<(), FsError> {
    let tree = FreshTree::create(dir, [])?;
    let mut by_folder: BTreeMap<&str, Vec<(&str, &[u8])>> = BTreeMap::new();
    for (rel, bytes) in files {
        let (folder, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        by_folder.entry(folder).or_default().push((name, bytes));
    }
    // Folders are made as needed (missing parents too), so they can all be written at once.
    let by_folder: Vec<_> = by_folder.into_iter().collect();
    by_folder
        .par_iter()
        .try_for_each(|(folder, files)| tree.write_folder(folder, files.iter().copied(), false).map(drop))?;
    tree.commit()
}

/// A new output folder, built beside its destination while its files are produced and then
/// renamed into place in one step ([`FreshTree::commit`]). Dropped without a commit (because
/// a render or a write failed), the half-built folder is removed and the destination is as it
/// was.
///
/// Files are created relative to open folder handles (`openat`), so that the kernel does not
/// walk the whole path again for each of a fleet's tens of thousands of files; every name is
/// checked to be a plain relative path, and nothing is ever opened through a symbolic link.
#[derive(Debug)]
pub struct FreshTree {
    dir: PathBuf,
    staging: PathBuf,
    made_parents: Vec<PathBuf>,
    root: OwnedFd,
    /// Handles of the top-level folders made by [`FreshTree::create`].
    folders: foldhash::HashMap<String, OwnedFd>,
    committed: bool,
}

/// Removes each of `dirs` (in order) that is an empty folder.
fn remove_empty(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = fs::remove_dir(dir);
    }
}

/// Handle flags for a folder that files are created in.
fn folder_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl FreshTree {
    /// Starts a fresh tree for `dir` with the top-level `folders` made up front; `dir` must
    /// be missing or an empty folder.
    pub fn create<'a>(dir: &Path, folders: impl IntoIterator<Item = &'a str>) -> Result<FreshTree, FsError> {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        // The parent folders made here, deepest first: a failed render leaves none behind.
        let mut made_parents = Vec::new();
        let mut missing = parent.as_path();
        while !missing.exists() {
            made_parents.push(missing.to_owned());
            match missing.parent() {
                Some(p) if !p.as_os_str().is_empty() => missing = p,
                _ => break,
            }
        }
        fs::create_dir_all(&parent).map_err(write_err(&parent))?;
        let staging = output::staging_path(dir);
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(write_err(&staging))?;
        }
        let made = crate::interrupt::make_staging(&staging, || {
            fs::create_dir(&staging)
                .map_err(write_err(&staging))
                .and_then(|()| {
                    rfs::openat(rfs::CWD, &staging, folder_flags(), Mode::empty()).map_err(|e| {
                        FsError::Write {
                            path: staging.clone(),
                            cause: e.into(),
                        }
                    })
                })
        });
        let root = match made {
            Ok(fd) => fd,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                remove_empty(&made_parents);
                crate::interrupt::staged(&staging);
                return Err(e);
            }
        };
        let mut tree = FreshTree {
            dir: dir.to_owned(),
            staging,
            made_parents,
            root,
            folders: foldhash::HashMap::default(),
            committed: false,
        };
        for folder in folders {
            check_name(folder)?;
            let fd = tree.make_folder(&tree.root, folder)?;
            tree.folders.insert(folder.to_owned(), fd);
        }
        Ok(tree)
    }

    /// Whether `dir` can be written fresh: it is missing or an empty folder.
    pub fn fits(dir: &Path) -> Result<bool, FsError> {
        is_missing_or_empty_dir(dir)
    }

    /// Makes folder `rel` (relative to `base`) and opens it.
    fn make_folder(&self, base: &OwnedFd, rel: &str) -> Result<OwnedFd, FsError> {
        match rfs::mkdirat(base, rel, Mode::from_raw_mode(0o777)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(Errno::NOENT) => {
                // A parent is missing: make the folders one by one.
                let mut end = 0;
                for segment in rel.split('/') {
                    end += segment.len();
                    match rfs::mkdirat(base, &rel[..end], Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(self.error(&rel[..end], e)),
                    }
                    end += 1;
                }
            }
            Err(e) => return Err(self.error(rel, e)),
        }
        rfs::openat(base, rel, folder_flags(), Mode::empty()).map_err(|e| self.error(rel, e))
    }

    fn error(&self, rel: &str, cause: Errno) -> FsError {
        FsError::Write {
            path: self.staging.join(rel),
            cause: cause.into(),
        }
    }

    /// Writes `files` (plain names) into folder `folder` of the tree (`""` for its root),
    /// making the folder and its parents first if needed. With `stat`, returns each file's
    /// metadata as it was right after writing (else nothing).
    pub fn write_folder<'f>(
        &self,
        folder: &str,
        files: impl IntoIterator<Item = (&'f str, &'f [u8])>,
        stat: bool,
    ) -> Result<Vec<fs::Metadata>, FsError> {
        if !folder.is_empty() {
            check_relative(folder)?;
        }
        // Relative to the top-level folder's handle when there is one.
        let (base, rel) = match folder.split_once('/') {
            Some((top, rest)) => match self.folders.get(top) {
                Some(fd) => (fd, rest),
                None => (&self.root, folder),
            },
            None => match self.folders.get(folder) {
                Some(fd) => (fd, ""),
                None => (&self.root, folder),
            },
        };
        let opened;
        let base = if rel.is_empty() {
            base
        } else {
            opened = self.make_folder(base, rel)?;
            &opened
        };
        let mut metadata = Vec::new();
        for (name, bytes) in files {
            check_name(name).map_err(|_| FsError::UnsafePath(format!("{folder}/{name}")))?;
            let failed = |cause: io::Error| FsError::Write {
                path: self.staging.join(folder).join(name),
                cause,
            };
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd =
                rfs::openat(base, name, flags, Mode::from_raw_mode(0o666)).map_err(|e| failed(e.into()))?;
            let mut file = fs::File::from(fd);
            file.write_all(bytes).map_err(failed)?;
            if stat {
                metadata.push(file.metadata().map_err(failed)?);
            }
        }
        Ok(metadata)
    }

    /// Writes one file at the relative path `rel`.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), FsError> {
        let (folder, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        self.write_folder(folder, [(name, bytes)], false).map(drop)
    }

    /// Renames the finished tree into place (replacing `dir` if it is an empty folder).
    pub fn commit(mut self) -> Result<(), FsError> {
        crate::interrupt::uninterrupted(|_| fs::rename(&self.staging, &self.dir))
            .map_err(write_err(&self.dir))?;
        self.committed = true;
        crate::interrupt::staged(&self.staging);
        Ok(())
    }
}

impl Drop for FreshTree {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.staging);
            remove_empty(&self.made_parents);
            crate::interrupt::staged(&self.staging);
        }
    }
}

/// Replaces the tree at `dir` by a new one in one step: every file and folder of `dir`
/// except those in `leave_out` (relative paths) is hard-linked (folders re-made) into a
/// staging folder beside it, `writes` are written there, and the staging folder is swapped
/// with `dir` by one `renameat2(RENAME_EXCHANGE)`; the old tree is then removed. A failure before the swap
/// removes the staging folder and leaves `dir` as it was; a kill at any instant leaves `dir`
/// holding the old tree or the new one (the next render removes what is left beside it:
/// [`crate::output::recover`]).
fn swap_in(dir: &Path, leave_out: &HashSet<String>, writes: &[(&str, &[u8])]) -> Result<(), FsError> {
    // The new tree takes over the folder's permissions: a read-only folder says "do not
    // write here", and its copy could not be written either.
    if rfs::access(dir, rfs::Access::WRITE_OK).is_err_and(|e| e == Errno::ACCESS || e == Errno::ROFS) {
        return Err(FsError::ReadOnly(dir.to_owned()));
    }
    let staging = output::staging_path(dir);
    output::remove_all(&staging).map_err(write_err(&staging))?;
    let meta = fs::metadata(dir).map_err(read_err(dir))?;
    let guard = Staging::make(staging.clone())?;
    fs::set_permissions(&staging, meta.permissions()).map_err(write_err(&staging))?;
    link_tree(dir, &staging, "", leave_out)?;
    write_new_files(&staging, writes)?;
    crate::interrupt::uninterrupted(|_| {
        match rfs::renameat_with(rfs::CWD, &staging, rfs::CWD, dir, rfs::RenameFlags::EXCHANGE) {
            Ok(()) => Ok(()),
            Err(Errno::INVAL | Errno::NOSYS | Errno::NOTSUP) => {
                // No RENAME_EXCHANGE on this file system: park the old tree, move the new one
                // in. A kill in between leaves `dir` missing, and the next render puts the
                // parked tree back (`output::recover`).
                let parked = output::parked_path(dir);
                fs::rename(dir, &parked).map_err(write_err(dir))?;
                if let Err(e) = fs::rename(&staging, dir) {
                    let _ = fs::rename(&parked, dir);
                    return Err(FsError::Write {
                        path: dir.to_owned(),
                        cause: e,
                    });
                }
                fs::rename(&parked, &staging).map_err(write_err(&parked))
            }
            Err(e) => Err(FsError::Write {
                path: dir.to_owned(),
                cause: e.into(),
            }),
        }
    })?;
    // `staging` now holds the old tree; the guard removes it.
    drop(guard);
    Ok(())
}

/// Writes `files` (paths relative to `root`, which exists) as new files, making their
/// folders; folder by folder in parallel.
fn write_new_files(root: &Path, files: &[(&str, &[u8])]) -> Result<(), FsError> {
    let mut by_folder: BTreeMap<&str, Vec<(&str, &[u8])>> = BTreeMap::new();
    for (rel, bytes) in files {
        let (folder, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        by_folder.entry(folder).or_default().push((name, bytes));
    }
    let by_folder: Vec<_> = by_folder.into_iter().collect();
    by_folder.par_iter().try_for_each(|(folder, files)| {
        let target = root.join(folder);
        if !folder.is_empty() {
            make_folder_below(root, folder)?;
        }
        for (name, bytes) in files {
            let path = target.join(name);
            let mut file = fs::File::create_new(&path).map_err(write_err(&path))?;
            file.write_all(bytes).map_err(write_err(&path))?;
        }
        Ok::<(), FsError>(())
    })
}

/// Makes folder `rel` below `root` and its missing parents, but never `root` itself: a
/// staging folder removed meanwhile (by an interrupt's clean-up) is not made again.
fn make_folder_below(root: &Path, rel: &str) -> Result<(), FsError> {
    let target = root.join(rel);
    match fs::create_dir(&target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => match rel.rsplit_once('/') {
            Some((parent, _)) => {
                make_folder_below(root, parent)?;
                match fs::create_dir(&target) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(FsError::Write {
                        path: target,
                        cause: e,
                    }),
                    _ => Ok(()),
                }
            }
            None => Err(FsError::Write {
                path: target,
                cause: e,
            }),
        },
        Err(e) => Err(FsError::Write {
            path: target,
            cause: e,
        }),
    }
}

/// Updates the tree at `dir` in place, through a journal: the new files (`writes`) are
/// staged beside `dir` at their paths, the journal of the update (which paths go, which
/// files move in, which emptied folders are pruned) is written beside it, and only then is
/// `dir` changed, by deletions and one rename per new file. A failure before the journal is
/// written leaves `dir` as it was; once it is written, the update is carried out to the end,
/// now or, after a kill, by the next render ([`crate::output::recover`]). Its cost is that
/// of the change, not of the tree.
fn update_in_place(
    dir: &Path,
    delete: Vec<String>,
    writes: &[(&str, &[u8])],
    prune: bool,
) -> Result<(), FsError> {
    if rfs::access(dir, rfs::Access::WRITE_OK).is_err_and(|e| e == Errno::ACCESS || e == Errno::ROFS) {
        return Err(FsError::ReadOnly(dir.to_owned()));
    }
    let staging = output::staging_path(dir);
    output::remove_all(&staging).map_err(write_err(&staging))?;
    let guard = Staging::make(staging.clone())?;
    write_new_files(&staging, writes)?;
    let prune = if prune {
        let mut emptied: Vec<String> = parent_dirs(delete.iter().map(String::as_str))
            .into_iter()
            .map(str::to_owned)
            .collect();
        emptied.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        emptied
    } else {
        Vec::new()
    };
    let journal = output::Journal {
        staging: staging
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        delete,
        write: writes.iter().map(|(rel, _)| (*rel).to_owned()).collect(),
        prune,
    };
    // Committed and carried out to the end even if an interrupt comes meanwhile (a kill is
    // carried out by the next kalypso command on `dir`).
    let mut guard = Some(guard);
    let applied = crate::interrupt::uninterrupted(|_| {
        journal
            .commit(dir)
            .map_err(write_err(&output::journal_path(dir)))?;
        // Committed: the staging folder now belongs to the journal.
        std::mem::forget(guard.take());
        journal.apply(dir).map_err(write_err(dir))
    });
    // Not committed: the staging folder goes (outside the step, which holds the registry).
    drop(guard);
    crate::interrupt::staged(&staging);
    applied
}

/// Removes a staging folder when dropped (after a failure, or the old tree after a swap).
struct Staging(PathBuf);

impl Staging {
    /// Makes the staging folder at `path`, removed when dropped or interrupted.
    fn make(path: PathBuf) -> Result<Staging, FsError> {
        let made = crate::interrupt::make_staging(&path, || fs::create_dir(&path));
        // Dropped on failure too: it forgets the path it noted.
        let guard = Staging(path);
        made.map_err(write_err(&guard.0))?;
        Ok(guard)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // A fleet's tree has hundreds of cluster-type folders: removed in parallel.
        if let Ok(entries) = fs::read_dir(&self.0) {
            let paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            paths.par_iter().for_each(|path| {
                let _ = output::remove_all(path);
            });
        }
        let _ = output::remove_all(&self.0);
        crate::interrupt::staged(&self.0);
    }
}

/// Whether `name` is a temporary file that kalypso versions before 0.2 left beside the files
/// they replaced when killed; one goes when the file beside it is written again, or with its
/// cluster-type folder's stray files.
fn is_old_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".kalypso-tmp")
}

/// Re-creates the tree at `src` (below relative path `rel`) in `dst`: folders made with the
/// same permissions, everything else hard-linked (a regular file that cannot be linked is
/// copied), except the paths in `leave_out`.
fn link_tree(src: &Path, dst: &Path, rel: &str, leave_out: &HashSet<String>) -> Result<(), FsError> {
    let entries: Vec<fs::DirEntry> = fs::read_dir(src)
        .map_err(read_err(src))?
        .collect::<Result<_, _>>()
        .map_err(read_err(src))?;
    entries.par_iter().try_for_each(|entry| {
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        let child_rel = if rel.is_empty() {
            name_str.clone().into_owned()
        } else {
            format!("{rel}/{name_str}")
        };
        if leave_out.contains(&child_rel) || is_old_temporary(&name_str) {
            return Ok(());
        }
        let from = entry.path();
        let to = dst.join(&name);
        let kind = entry.file_type().map_err(read_err(&from))?;
        if kind.is_dir() {
            let meta = fs::symlink_metadata(&from).map_err(read_err(&from))?;
            fs::create_dir(&to).map_err(write_err(&to))?;
            link_tree(&from, &to, &child_rel, leave_out)?;
            // After the content: a read-only folder is made read-only last.
            fs::set_permissions(&to, meta.permissions()).map_err(write_err(&to))
        } else {
            match fs::hard_link(&from, &to) {
                Ok(()) => Ok(()),
                // Another user's file under `fs.protected_hardlinks`, or too many links.
                Err(e)
                    if kind.is_file()
                        && matches!(Errno::from_io_error(&e), Some(Errno::PERM | Errno::MLINK)) =>
                {
                    fs::copy(&from, &to).map(drop).map_err(write_err(&to))
                }
                Err(e) => Err(FsError::Write { path: to, cause: e }),
            }
        }
    })
}

/// Brings the folder at `dir` up to date with a layout without reading it whole: applies the
/// update rules (`rules`) folder by folder, and writes each of `files` whose content differs
/// from what is on disk. Files not listed are not read: an unchanged assignment's files are
/// left alone, as are stale files inside scheduled folders, root files and dot-folders.
///
/// A missing or empty `dir` is written fresh (beside it, then renamed into place); otherwise
/// the update goes through a journal (see the module's documentation), so a failure or a kill
/// leaves the folder as it was or, once finished, as it should be.
pub fn write_update(dir: &Path, rules: &Rules<'_>, files: &[(String, Blob)]) -> Result<WriteStats, FsError> {
    for (path, _) in files {
        check_relative(path)?;
    }
    if is_missing_or_empty_dir(dir)? {
        let fresh: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
        write_fresh(dir, &fresh)?;
        return Ok(WriteStats {
            added: files.len(),
            ..WriteStats::default()
        });
    }

    // What the rules remove: folders of unknown cluster types and unscheduled targets, and
    // stray files in cluster type folders.
    // Cluster type folders are listed in parallel: a fleet has hundreds, with thousands of
    // deployment target folders.
    let mut doomed_files: Vec<PathBuf> = Vec::new();
    let mut doomed_dirs: Vec<PathBuf> = Vec::new();
    let mut cluster_types: Vec<(String, PathBuf)> = Vec::new();
    for entry in fs::read_dir(dir).map_err(read_err(dir))? {
        let entry = entry.map_err(read_err(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().map_err(read_err(&entry.path()))?;
        if !kind.is_dir() || name.starts_with('.') {
            continue;
        }
        if rules.is_cluster_type(&name) {
            cluster_types.push((name, entry.path()));
        } else {
            doomed_dirs.push(entry.path());
        }
    }
    let doomed_inside: Vec<(Vec<PathBuf>, Vec<PathBuf>)> = cluster_types
        .par_iter()
        .map(|(name, path)| {
            let (mut files, mut dirs) = (Vec::new(), Vec::new());
            for inner in fs::read_dir(path).map_err(read_err(path))? {
                let inner = inner.map_err(read_err(path))?;
                let inner_name = inner.file_name();
                let inner_name = inner_name.to_string_lossy();
                let inner_kind = inner.file_type().map_err(read_err(&inner.path()))?;
                if inner_kind.is_dir() {
                    if !rules.keeps_folder(name, &inner_name) {
                        dirs.push(inner.path());
                    }
                } else if !rules.keeps(&format!("{name}/{inner_name}")) || is_old_temporary(&inner_name) {
                    files.push(inner.path());
                }
            }
            Ok((files, dirs))
        })
        .collect::<Result<_, FsError>>()?;
    for (files, dirs) in doomed_inside {
        doomed_files.extend(files);
        doomed_dirs.extend(dirs);
    }

    // Which files change.
    let mut known_dirs = HashSet::new();
    let mut stats = WriteStats::default();
    let mut writes: Vec<(&str, &Blob)> = Vec::new();
    for (path, _) in files {
        check_no_symlinks(dir, path, &mut known_dirs)?;
    }
    let existing: Vec<Option<Vec<u8>>> = files
        .par_iter()
        .map(|(path, _)| match fs::read(dir.join(path)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::Read {
                path: dir.join(path),
                cause: e,
            }),
        })
        .collect::<Result<_, _>>()?;
    for ((path, blob), current) in files.iter().zip(existing) {
        match current {
            Some(bytes) if bytes[..] == blob[..] => stats.unchanged += 1,
            Some(_) => {
                stats.modified += 1;
                writes.push((path, blob));
            }
            None => {
                stats.added += 1;
                writes.push((path, blob));
            }
        }
    }
    for d in &doomed_dirs {
        stats.deleted += walk(d)?.len();
    }
    stats.deleted += doomed_files.len();
    // What an older version left beside a file it was replacing when killed goes when the
    // file is replaced again (counted as nothing: it was never part of the tree).
    for (path, _) in &writes {
        let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
        let temporary = dir.join(folder).join(format!(".{name}.kalypso-tmp"));
        if fs::symlink_metadata(&temporary).is_ok() {
            doomed_files.push(temporary);
        }
    }

    if writes.is_empty() && doomed_files.is_empty() && doomed_dirs.is_empty() {
        return Ok(stats);
    }
    let writes: Vec<(&str, &[u8])> = writes.iter().map(|(p, b)| (*p, &b[..])).collect();
    let doomed: Vec<&PathBuf> = doomed_files.iter().chain(&doomed_dirs).collect();
    let relative: Option<Vec<String>> = doomed
        .iter()
        .map(|path| path.strip_prefix(dir).ok()?.to_str().map(str::to_owned))
        .collect();
    match relative {
        Some(delete) => update_in_place(dir, delete, &writes, false)?,
        None => {
            // A name that is not UTF-8 cannot be written into the journal: the whole tree is
            // staged and swapped instead (its cost is the tree's), leaving those names out.
            let mut leave_out: HashSet<String> = doomed
                .iter()
                .map(|path| {
                    path.strip_prefix(dir)
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect();
            leave_out.extend(writes.iter().map(|(p, _)| (*p).to_owned()));
            swap_in(dir, &leave_out, &writes)?;
            stats.relinked = true;
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of_texts(files)
    }

    #[test]
    fn writes_only_changes_and_prunes_empty_folders() {
        let dir = tempfile::tempdir().unwrap();
        let old = tree(&[("a/x.yaml", "1"), ("b/c/y.yaml", "1"), ("keep.txt", "k")]);
        write_tree(dir.path(), &Tree::new(), &old).unwrap();
        assert_eq!(read_tree(dir.path()).unwrap(), old);
        let new = tree(&[("a/x.yaml", "2"), ("keep.txt", "k"), ("d/z.yaml", "3")]);
        let stats = write_tree(dir.path(), &old, &new).unwrap();
        assert_eq!(
            stats,
            WriteStats {
                added: 1,
                modified: 1,
                deleted: 1,
                unchanged: 1,
                relinked: false,
            }
        );
        assert_eq!(read_tree(dir.path()).unwrap(), new);
        assert!(!dir.path().join("b").exists(), "emptied folders are removed");
    }

    #[test]
    fn never_writes_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("large")).unwrap();
        let err = write_tree(
            dir.path(),
            &Tree::new(),
            &tree(&[("large/t/reconciler.yaml", "x")]),
        )
        .unwrap_err();
        assert!(matches!(err, FsError::Symlink(_)), "{err}");
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn fresh_trees_are_renamed_into_place() {
        let parent = tempfile::tempdir().unwrap();
        let out = parent.path().join("out");
        let t = tree(&[("a/b/x.yaml", "1"), ("c.yaml", "2")]);
        write_tree(&out, &Tree::new(), &t).unwrap();
        assert_eq!(read_tree(&out).unwrap(), t);
        fs::create_dir(parent.path().join("empty")).unwrap();
        write_tree(&parent.path().join("empty"), &Tree::new(), &t).unwrap();
        assert_eq!(read_tree(&parent.path().join("empty")).unwrap(), t);
        let leftovers: Vec<_> = fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("kalypso"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn fresh_trees_are_written_relative_to_their_folders() {
        let parent = tempfile::tempdir().unwrap();
        let out = parent.path().join("out");
        let fresh = FreshTree::create(&out, ["large", "small"]).unwrap();
        let written = fresh
            .write_folder("large/t", [("a.yaml", &b"1"[..]), ("b.yaml", &b"22"[..])], true)
            .unwrap();
        assert_eq!(written.iter().map(fs::Metadata::len).collect::<Vec<_>>(), [1, 2]);
        fresh.write("small/README.md", b"r").unwrap();
        fresh.write("other/deep/x.txt", b"x").unwrap();
        fresh.write(".github/tracking/id", b"c").unwrap();
        fresh.write("root.txt", b"root").unwrap();
        assert!(!out.exists(), "nothing is in place before the commit");
        fresh.commit().unwrap();
        assert_eq!(
            read_tree(&out).unwrap(),
            tree(&[
                (".github/tracking/id", "c"),
                ("large/t/a.yaml", "1"),
                ("large/t/b.yaml", "22"),
                ("other/deep/x.txt", "x"),
                ("root.txt", "root"),
                ("small/README.md", "r"),
            ])
        );
        assert_eq!(
            fs::read_dir(parent.path()).unwrap().count(),
            1,
            "no staging folder is left"
        );
    }

    #[test]
    fn fresh_trees_dropped_before_commit_leave_nothing() {
        let parent = tempfile::tempdir().unwrap();
        let out = parent.path().join("new/parents/out");
        let tree = FreshTree::create(&out, ["large"]).unwrap();
        tree.write_folder("large/t", [("a.yaml", &b"1"[..])], false)
            .unwrap();
        drop(tree);
        assert!(
            fs::read_dir(parent.path()).unwrap().next().is_none(),
            "the staging folder and the parents made for it are removed"
        );
    }

    #[test]
    fn fresh_trees_reject_unsafe_names_and_existing_files() {
        let parent = tempfile::tempdir().unwrap();
        let out = parent.path().join("out");
        assert!(matches!(
            FreshTree::create(&out, ["a/b"]).unwrap_err(),
            FsError::UnsafePath(_)
        ));
        assert!(matches!(
            FreshTree::create(&out, [".."]).unwrap_err(),
            FsError::UnsafePath(_)
        ));
        let tree = FreshTree::create(&out, ["large"]).unwrap();
        for bad in ["large/../x", "/etc/x", "large//x", "large/t/.."] {
            assert!(
                matches!(tree.write(bad, b"x").unwrap_err(), FsError::UnsafePath(_)),
                "{bad}"
            );
        }
        let err = tree
            .write_folder("large", [("t/x", &b"x"[..])], false)
            .unwrap_err();
        assert!(matches!(err, FsError::UnsafePath(_)), "{err}");
        tree.write("large/x", b"1").unwrap();
        let err = tree.write("large/x", b"2").unwrap_err();
        assert!(err.to_string().contains("large/x"), "{err}");
        let err = tree.write("large/x/y", b"2").unwrap_err();
        assert!(
            matches!(err, FsError::Write { .. }),
            "a file where a folder is needed: {err}"
        );
    }

    #[test]
    fn failed_staging_leaves_the_tree_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let old = tree(&[("blocker", "a file where a folder is needed"), ("keep.yaml", "1")]);
        write_tree(dir.path(), &Tree::new(), &old).unwrap();
        let new = tree(&[
            ("blocker", "a file where a folder is needed"),
            ("keep.yaml", "2"),
            ("new/x.yaml", "3"),
            ("blocker/y.yaml", "4"),
        ]);
        assert!(write_tree(dir.path(), &old, &new).is_err());
        assert_eq!(read_tree(dir.path()).unwrap(), old, "nothing changed");
        assert!(
            !dir.path().join("new").exists(),
            "created folders are removed again"
        );
    }

    #[test]
    fn updates_apply_the_rules_without_reading_untouched_files() {
        let dir = tempfile::tempdir().unwrap();
        let before = tree(&[
            ("root.txt", "r"),
            (".github/x", "dot"),
            ("gone/README.md", "x"),
            ("large/README.md", "old"),
            ("large/stray.txt", "s"),
            ("large/t/reconciler.yaml", "same"),
            ("large/t/stale.yaml", "stale"),
            ("large/u/reconciler.yaml", "old"),
            ("large/unscheduled/reconciler.yaml", "x"),
        ]);
        write_tree(dir.path(), &Tree::new(), &before).unwrap();
        let rules = Rules::new(["large", "small"], [("large", "t"), ("large", "u")]);
        let files = vec![
            ("large/README.md".to_owned(), Blob::from(&b"new"[..])),
            ("small/README.md".to_owned(), Blob::from(&b"new"[..])),
            ("large/t/reconciler.yaml".to_owned(), Blob::from(&b"same"[..])),
            ("large/u/reconciler.yaml".to_owned(), Blob::from(&b"changed"[..])),
        ];
        let stats = write_update(dir.path(), &rules, &files).unwrap();
        assert_eq!(
            stats,
            WriteStats {
                added: 1,
                modified: 2,
                deleted: 3,
                unchanged: 1,
                relinked: false,
            }
        );
        assert_eq!(
            read_tree(dir.path()).unwrap(),
            tree(&[
                ("root.txt", "r"),
                (".github/x", "dot"),
                ("large/README.md", "new"),
                ("large/t/reconciler.yaml", "same"),
                ("large/t/stale.yaml", "stale"),
                ("large/u/reconciler.yaml", "changed"),
                ("small/README.md", "new"),
            ])
        );
    }

    /// An update through the journal, interrupted at every step: the journal written and
    /// nothing done, the deletions done, half of the new files moved in. Each time the next
    /// render's recovery finishes it, and no unchanged file is touched.
    #[test]
    fn an_interrupted_update_is_finished_by_recovery() {
        use std::os::unix::fs::MetadataExt;
        for stop_after in 0..3 {
            let root = tempfile::tempdir().unwrap();
            let out = root.path().join("out");
            let old = tree(&[
                ("a/x.yaml", "1"),
                ("a/y.yaml", "1"),
                ("b/z.yaml", "1"),
                ("c/w.yaml", "1"),
            ]);
            write_tree(&out, &Tree::new(), &old).unwrap();
            let kept_inode = fs::metadata(out.join("c/w.yaml")).unwrap().ino();
            let staging = output::staging_path(&out);
            fs::create_dir(&staging).unwrap();
            write_new_files(&staging, &[("a/x.yaml", b"2"), ("d/new.yaml", b"3")]).unwrap();
            let journal = output::Journal {
                staging: staging.file_name().unwrap().to_string_lossy().into_owned(),
                delete: vec!["b/z.yaml".to_owned(), "a/y.yaml".to_owned()],
                write: vec!["a/x.yaml".to_owned(), "d/new.yaml".to_owned()],
                prune: vec!["b".to_owned()],
            };
            journal.commit(&out).unwrap();
            if stop_after >= 1 {
                fs::remove_file(out.join("b/z.yaml")).unwrap();
                fs::remove_file(out.join("a/y.yaml")).unwrap();
            }
            if stop_after >= 2 {
                fs::rename(staging.join("a/x.yaml"), out.join("a/x.yaml")).unwrap();
                // A file written where a deleted one was must survive the repeat.
                fs::create_dir_all(out.join("b")).unwrap();
            }
            output::recover(&out).unwrap();
            let expected = tree(&[("a/x.yaml", "2"), ("c/w.yaml", "1"), ("d/new.yaml", "3")]);
            assert_eq!(
                read_tree(&out).unwrap(),
                expected,
                "stopped after step {stop_after}"
            );
            assert_eq!(fs::metadata(out.join("c/w.yaml")).unwrap().ino(), kept_inode);
            assert!(!output::journal_path(&out).exists());
            assert!(!staging.exists());
        }
    }

    #[test]
    fn updates_leave_unchanged_files_where_they_are() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let old = tree(&[("a/x.yaml", "1"), ("b/y.yaml", "1"), ("c/z.yaml", "1")]);
        write_tree(dir.path(), &Tree::new(), &old).unwrap();
        let inode = |p: &str| fs::metadata(dir.path().join(p)).unwrap().ino();
        let kept = inode("c/z.yaml");
        let new = tree(&[("a/x.yaml", "2"), ("c/z.yaml", "1")]);
        let stats = write_tree(dir.path(), &old, &new).unwrap();
        assert!(!stats.relinked);
        assert_eq!(read_tree(dir.path()).unwrap(), new);
        assert_eq!(inode("c/z.yaml"), kept, "an unchanged file is not replaced");
        assert!(!dir.path().join("b").exists());
        let parent = dir.path().parent().unwrap();
        let name = dir.path().file_name().unwrap().to_string_lossy().into_owned();
        let left: Vec<String> = fs::read_dir(parent)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!(".{name}.kalypso-")))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A folder to delete whose name is not UTF-8 cannot be written into the journal: the
    /// update stages and swaps the whole tree instead, and the folder goes.
    #[test]
    fn a_name_that_is_not_utf8_falls_back_to_the_swap() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        write_tree(
            dir.path(),
            &Tree::new(),
            &tree(&[("large/t/reconciler.yaml", "old")]),
        )
        .unwrap();
        let odd = dir.path().join(std::ffi::OsStr::from_bytes(b"stray\xff"));
        fs::create_dir(&odd).unwrap();
        fs::write(odd.join("f"), "x").unwrap();
        let rules = Rules::new(["large"], [("large", "t")]);
        let files = vec![("large/t/reconciler.yaml".to_owned(), Blob::from(&b"new"[..]))];
        let stats = write_update(dir.path(), &rules, &files).unwrap();
        assert!(stats.relinked);
        assert!(!odd.exists());
        assert_eq!(
            read_tree(dir.path()).unwrap(),
            tree(&[("large/t/reconciler.yaml", "new")])
        );
    }

    #[test]
    fn rejects_unsafe_paths() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_tree(dir.path(), &Tree::new(), &tree(&[("../escape", "x")])).unwrap_err();
        assert!(matches!(err, FsError::UnsafePath(_)));
    }

    #[test]
    fn skips_git_folder() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        fs::write(dir.path().join("a"), "1").unwrap();
        assert_eq!(read_tree(dir.path()).unwrap(), tree(&[("a", "1")]));
    }
}
