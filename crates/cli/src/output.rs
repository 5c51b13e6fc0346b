//! Output-folder safety for `kalypso render --out OUT`: what may be written over, who may
//! write, and what an interrupted render left behind.
//!
//! A render changes OUT all or nothing as kalypso sees it (see [`crate::fsio`]): a new tree
//! is built in a sibling folder `.<name>.kalypso-new-<pid>` and renamed into place; an update
//! stages its new files there and is carried out through a journal
//! (`.<name>.kalypso-journal`, [`Journal`]), by renames that other programs can see half
//! done. Three things make that safe for kalypso's own readers and writers, and live here:
//!
//! - **A lock**: `.<name>.kalypso-lock` beside OUT, held with an exclusive `flock` for the
//!   whole render and holding the writer's process id, so that a second render into the same
//!   folder fails at once ("another kalypso is writing to OUT (pid N)") instead of racing the
//!   first. The kernel releases it when the process ends, however it ends, so a killed render
//!   never leaves a stale lock (its file stays until the next kalypso command takes the lock);
//!   the file itself is removed by the command that held it. Readers of OUT (`plan`, `diff`,
//!   `explain` with `--against OUT`) take the same lock ([`settle_for_reading`]), so that they
//!   never read a tree a render is changing. The render cache of OUT is locked the same way
//!   ([`OutputLock::acquire_cache`]).
//! - **Recovery**: under the lock, [`recover`] finishes an update whose journal a killed
//!   render wrote, removes the staging folders it left beside OUT, and puts the old tree back
//!   if a render was killed between the two renames of the fallback swap (file systems
//!   without `RENAME_EXCHANGE`). After a kill at any instant, OUT holds the old tree, or a mix
//!   that the next render or reader turns into the new tree before anything else.
//! - **Recognition**: the update rules delete every folder of OUT that is not a scheduled
//!   cluster type, so [`check_gitops_tree`] refuses an OUT that is neither empty nor a GitOps
//!   tree as kalypso or the original scheduler write it (unless `--force`).
//!
//! The lock, the staging folder and the journal live beside OUT rather than inside it so that
//! OUT stays a plain GitOps tree (usually a git clone's root, whose `.git`, root files and
//! dot-folders an update never touches).

pub use crate::remove::{remove_all, remove_empty};
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use kalypso_core::tree;
use rayon::prelude::*;

/// The files a deployment-target folder of a GitOps tree holds (kalypso's and the original's,
/// including the original's `config.yaml` before 2023-03-31).
pub const TARGET_FILES: [&str; 5] = [
    tree::RECONCILER_FILE,
    tree::NAMESPACE_FILE,
    tree::CONFIG_FILE,
    tree::SHELL_CONFIG_FILE,
    tree::LEGACY_CONFIG_FILE,
];

/// Problems with the output folder itself (as opposed to writing its files).
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Another process holds the lock.
    #[error(
        "another kalypso is {doing} {out} ({holder}); wait for it to finish (the lock is released when \
         that process ends)"
    )]
    Locked {
        /// The output folder (or render cache) as the user named it.
        out: String,
        /// `pid N`, or what is known of the holder.
        holder: String,
        /// What the holder does: `writing to`, `reading` (a `plan --against` that
        /// finishes an interrupted update before it reads), or `using` (a holder that has
        /// not written its note yet).
        doing: &'static str,
    },
    /// The folder a lock file (and a staging folder) go into cannot be written.
    #[error("{0}")]
    ReadOnly(String),
    /// The folder is not a GitOps tree.
    #[error(
        "refusing to render into {out}: it is not empty and is not a GitOps tree written by kalypso or the \
         Kalypso Scheduler ({why}); render into a new or empty folder, or pass --force to replace its content \
         by the GitOps tree (root files and dot-folders are kept, every other folder is deleted)"
    )]
    NotGitOps {
        /// The output folder as the user named it.
        out: String,
        /// What is wrong with it.
        why: String,
    },
    /// The folder is a mount point: it cannot be replaced by a rename.
    #[error(
        "cannot render into {out}: it is a mount point, which kalypso cannot replace atomically (the new \
         tree is staged beside it and swapped in by a rename); render into a folder inside it"
    )]
    MountPoint {
        /// The output folder as the user named it.
        out: String,
    },
    /// The output path is a symbolic link to nothing.
    #[error("cannot render into {out}: it is a symbolic link to {target}, which does not exist")]
    DanglingLink {
        /// The output folder as the user named it.
        out: String,
        /// Where the link points.
        target: String,
    },
    /// Any other file-system failure, naming the path.
    #[error("{what} {path}: {cause}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        cause: io::Error,
    },
}

fn io_err<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> OutputError + 'p {
    move |cause| OutputError::Io {
        what,
        path: path.to_owned(),
        cause,
    }
}

/// The parent folder and the file name of `path` (`.` and `out` when it has none).
fn split(path: &Path) -> (PathBuf, OsString) {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(OsString::from)
        .unwrap_or_else(|| OsString::from("out"));
    (parent, name)
}

/// The sibling of `path` named `.<name>.kalypso-<suffix>`.
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let (parent, name) = split(path);
    let mut file = OsString::from(".");
    file.push(&name);
    file.push(".kalypso-");
    file.push(suffix);
    parent.join(file)
}

/// The staging folder of this process for `out`.
pub fn staging_path(out: &Path) -> PathBuf {
    sibling(out, &format!("new-{}", std::process::id()))
}

/// Where the fallback swap parks the old tree of `out`.
pub fn parked_path(out: &Path) -> PathBuf {
    sibling(out, &format!("old-{}", std::process::id()))
}

/// `path` with symbolic links resolved when it exists (so that the lock, the swap and the
/// cache all act on the real folder and a link to it stays a link), else as given. A link to
/// nothing is an error.
pub fn real_path(path: &Path, shown: &str) -> Result<PathBuf, OutputError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match fs::canonicalize(path) {
            Ok(real) => Ok(real),
            Err(_) => Err(OutputError::DanglingLink {
                out: shown.to_owned(),
                target: fs::read_link(path)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default(),
            }),
        },
        _ => Ok(path.to_owned()),
    }
}

/// An exclusive lock on an output folder (or a render cache), held until dropped.
#[derive(Debug)]
pub struct OutputLock {
    file: File,
    path: PathBuf,
    /// Parent folders made for the lock, deepest first; removed again if still empty.
    made_parents: Vec<PathBuf>,
}

impl OutputLock {
    /// Locks the output folder `out` (`shown` is how the user named it) to write it; fails
    /// at once if another process holds the lock. Missing parent folders are made (and
    /// removed on drop if nothing was put in them).
    pub fn acquire(out: &Path, shown: &str) -> Result<OutputLock, OutputError> {
        OutputLock::lock(&sibling(out, "lock"), shown, Purpose::Write)
    }

    /// Locks the render cache folder `cache`.
    pub fn acquire_cache(cache: &Path) -> Result<OutputLock, OutputError> {
        let shown = format!("the render cache {}", cache.display());
        OutputLock::lock(&sibling(cache, "lock"), &shown, Purpose::Cache)
    }

    fn lock(path: &Path, shown: &str, purpose: Purpose) -> Result<OutputLock, OutputError> {
        // From here on, an interrupted process removes its lock file and staging folders.
        crate::interrupt::watch();
        let (parent, _) = split(path);
        let mut made_parents = Vec::new();
        let mut missing = parent.as_path();
        while fs::symlink_metadata(missing).is_err() {
            made_parents.push(missing.to_owned());
            match missing.parent() {
                Some(p) if !p.as_os_str().is_empty() => missing = p,
                _ => break,
            }
        }
        let made = |e| {
            remove_empty(&made_parents);
            e
        };
        // The folder the lock goes into (or the nearest one that exists) must be writable:
        // said as such, rather than as a failure to create the lock file.
        let existing = made_parents
            .last()
            .and_then(|p| p.parent())
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(&parent);
        if let Err(cause) = rustix::fs::access(existing, rustix::fs::Access::WRITE_OK)
            && matches!(
                cause,
                rustix::io::Errno::ACCESS | rustix::io::Errno::ROFS | rustix::io::Errno::PERM
            )
        {
            return Err(made(purpose.read_only(
                shown,
                existing,
                existing != parent,
                cause == rustix::io::Errno::ROFS,
            )));
        }
        fs::create_dir_all(&parent)
            .map_err(io_err("cannot create", &parent))
            .map_err(made)?;
        // A lock file can be removed by its holder between our open and our lock: then we
        // hold a lock on a file nobody else sees, so check that the path is still our file.
        // Taken and noted at once: a process stopped meanwhile removes it if it is ours.
        let file = crate::interrupt::uninterrupted(|pending| {
            loop {
                let mut file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .custom_flags(libc_nofollow())
                    .mode(0o644)
                    .open(path)
                    .map_err(io_err("cannot open the lock file", path))
                    .map_err(made)?;
                match file.try_lock() {
                    Ok(()) => {}
                    Err(fs::TryLockError::WouldBlock) => {
                        // The holder writes its note (pid, and whether it reads) just after
                        // taking the lock: an empty file is a holder that has not yet, so it
                        // is read again a few times before being called unknown.
                        let mut text = String::new();
                        for _ in 0..10 {
                            text.clear();
                            let _ = file.rewind().and_then(|()| file.read_to_string(&mut text));
                            if !text.trim().is_empty() {
                                break;
                            }
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                        let (pid, doing) = match text.trim().strip_suffix(READING) {
                            Some(pid) => (pid.trim(), "reading"),
                            None if text.trim().is_empty() => ("", "using"),
                            None => (text.trim(), "writing to"),
                        };
                        let holder = match pid.parse::<u32>() {
                            Ok(pid) => format!("pid {pid}"),
                            Err(_) => "pid unknown".to_owned(),
                        };
                        // Not ours: leave the file and the folders alone.
                        return Err(OutputError::Locked {
                            out: shown.to_owned(),
                            holder,
                            doing,
                        });
                    }
                    Err(fs::TryLockError::Error(e)) => {
                        return Err(made(OutputError::Io {
                            what: "cannot lock",
                            path: path.to_owned(),
                            cause: e,
                        }));
                    }
                }
                let ours = file.metadata().map(|m| (m.dev(), m.ino())).ok();
                let there = fs::symlink_metadata(path).map(|m| (m.dev(), m.ino())).ok();
                if ours.is_some() && ours == there {
                    let suffix = if purpose == Purpose::Read { READING } else { "" };
                    file.set_len(0)
                        .and_then(|()| file.rewind())
                        .and_then(|()| write!(file, "{}{suffix}", std::process::id()))
                        .map_err(io_err("cannot write the lock file", path))
                        .map_err(made)?;
                    pending.locked(path, shown, &made_parents);
                    break Ok(file);
                }
            }
        })?;
        Ok(OutputLock {
            file,
            path: path.to_owned(),
            made_parents,
        })
    }
}

/// What a lock is taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    /// To write an output folder (`render`).
    Write,
    /// To read an output folder, finishing an interrupted update first (`plan --against`).
    Read,
    /// To use a render cache.
    Cache,
}

/// What a lock file holds after the process id when its holder only reads.
const READING: &str = " reading";

impl Purpose {
    /// The error for `folder`, where the lock of `shown` goes (or, if `above`, where the
    /// missing folders it goes into would be made), being read-only (on a read-only file
    /// system if `file_system`).
    fn read_only(self, shown: &str, folder: &Path, above: bool, file_system: bool) -> OutputError {
        let folder = if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder
        };
        let why = if file_system {
            "is on a read-only file system"
        } else {
            "is read-only (no write permission)"
        };
        let fix = if file_system {
            "render into a folder on a writable file system"
        } else {
            "make it writable (chmod u+w), or render into a folder in a writable place"
        };
        let place = if above {
            "the folder its missing parent folders would be made in"
        } else {
            "the folder it is in"
        };
        let folder = folder.display();
        OutputError::ReadOnly(match self {
            Purpose::Write => format!(
                "cannot render into {shown}: {place}, {folder}, {why}, and a render writes there beside it (its \
                 lock file, and the new tree or the changed files before they move in); {fix}"
            ),
            Purpose::Read => {
                format!("cannot read {shown} safely: {place}, {folder}, {why}, so its lock cannot be taken")
            }
            Purpose::Cache => format!(
                "cannot use {shown}: {place}, {folder}, {why}; choose another with --cache-dir, or render \
                 without it (--no-cache)"
            ),
        })
    }
}

/// `O_NOFOLLOW`: the lock file is never opened through a link.
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

impl Drop for OutputLock {
    fn drop(&mut self) {
        // Removed while still held, so nobody can take a lock on a file about to vanish.
        crate::interrupt::uninterrupted(|pending| {
            let _ = fs::remove_file(&self.path);
            pending.unlocked(&self.path);
        });
        let _ = self.file.unlock();
        remove_empty(&self.made_parents);
    }
}

/// Whether `rel` is a plain relative path that stays below the folder it is joined to: not
/// empty, not absolute, no `.`, `..` or empty segments, no backslash or NUL.
pub fn is_plain_relative(rel: &str) -> bool {
    // One pass over the bytes (every file a render writes is checked).
    let bytes = rel.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\\' | 0 => return false,
            b'/' => {
                if !is_plain_segment(&bytes[start..i]) {
                    return false;
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    is_plain_segment(&bytes[start..])
}

/// Whether `name` is one plain path segment: [`is_plain_relative`] without a `/`.
pub fn is_plain_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.iter().any(|&b| matches!(b, b'/' | b'\\' | 0)) && is_plain_segment(bytes)
}

fn is_plain_segment(segment: &[u8]) -> bool {
    !segment.is_empty() && segment != b"." && segment != b".."
}

/// Where the journal of an update of `out` in progress is kept.
pub fn journal_path(out: &Path) -> PathBuf {
    sibling(out, "journal")
}

/// An update of an existing tree, written down (beside OUT, see [`journal_path`]) after its
/// new files are staged and before anything in OUT changes: writing the journal is the
/// update's commit point. [`Journal::apply`] carries it out, and carries out again, to the
/// end, one that a killed render began ([`recover`]); every step can be repeated.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Journal {
    /// The folder beside OUT holding the new files at their paths in the tree.
    pub staging: String,
    /// Paths of OUT removed (files or folders), before any new file moves in.
    pub delete: Vec<String>,
    /// Paths of the new files, moved from the staging folder into OUT.
    pub write: Vec<String>,
    /// Folders of OUT removed if the deletions left them empty, deepest first.
    pub prune: Vec<String>,
}

impl Journal {
    /// Writes the journal of `out` (to a temporary name, then renamed: it appears whole).
    pub fn commit(&self, out: &Path) -> io::Result<()> {
        let path = journal_path(out);
        let temporary = sibling(out, &format!("journal-{}", std::process::id()));
        let text = serde_json::to_vec(self).map_err(io::Error::other)?;
        fs::write(&temporary, text)?;
        fs::rename(&temporary, &path)
    }

    /// The journal of `out`'s unfinished update, if there is one. A journal whose paths
    /// would leave `out` (or whose staging folder is not one of `out`'s) is refused: kalypso
    /// never writes one.
    pub fn read(out: &Path) -> Result<Option<Journal>, OutputError> {
        let path = journal_path(out);
        let refused = |why: String| {
            io_err("cannot use the journal of an interrupted render", &path)(io::Error::other(why))
        };
        match fs::read(&path) {
            Ok(text) => {
                let journal: Journal = serde_json::from_slice(&text).map_err(|e| refused(e.to_string()))?;
                let (_, name) = split(out);
                let staging_prefix = format!(".{}.kalypso-new-", name.to_string_lossy());
                let staging_ok = journal
                    .staging
                    .strip_prefix(&staging_prefix)
                    .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
                if !staging_ok {
                    return Err(refused(format!(
                        "{:?} is not a staging folder of this output",
                        journal.staging
                    )));
                }
                let paths = journal.delete.iter().chain(&journal.write).chain(&journal.prune);
                if let Some(bad) = paths.into_iter().find(|rel| !is_plain_relative(rel)) {
                    return Err(refused(format!("{bad:?} is not a path inside the output folder")));
                }
                Ok(Some(journal))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read the journal of an interrupted render", &path)(
                e,
            )),
        }
    }

    /// Carries out the update on `out` and removes the staging folder and the journal. The
    /// deletions come first; once a new file has moved in they are done, so a repeat after a
    /// kill does not delete what the update wrote.
    pub fn apply(&self, out: &Path) -> io::Result<()> {
        let (parent, _) = split(out);
        let staging = parent.join(&self.staging);
        let staged: Vec<&String> = self
            .write
            .iter()
            .filter(|rel| fs::symlink_metadata(staging.join(rel)).is_ok())
            .collect();
        if staged.len() == self.write.len() {
            self.delete
                .par_iter()
                .try_for_each(|rel| remove_all(&out.join(rel)))?;
        }
        let mut by_folder: std::collections::BTreeMap<&str, Vec<&String>> = std::collections::BTreeMap::new();
        for rel in staged {
            by_folder
                .entry(rel.rsplit_once('/').map_or("", |(folder, _)| folder))
                .or_default()
                .push(rel);
        }
        let by_folder: Vec<_> = by_folder.into_iter().collect();
        by_folder.par_iter().try_for_each(|(folder, files)| {
            fs::create_dir_all(out.join(folder))?;
            for rel in files {
                let to = out.join(rel);
                // A folder where the new file goes (a stray one) makes way.
                if fs::symlink_metadata(&to).is_ok_and(|m| m.is_dir()) {
                    remove_all(&to)?;
                }
                fs::rename(staging.join(rel), to)?;
            }
            Ok::<(), io::Error>(())
        })?;
        for rel in &self.prune {
            let folder = out.join(rel);
            if fs::read_dir(&folder).is_ok_and(|mut d| d.next().is_none()) {
                fs::remove_dir(&folder)?;
            }
        }
        remove_all(&staging)?;
        match fs::remove_file(journal_path(out)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// What [`recover`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Whether it finished an update a killed render had begun (`out` changed).
    pub finished_update: bool,
    /// How many leftovers (staging folders, a parked tree) it removed beside `out`.
    pub leftovers: usize,
}

/// Cleans up after renders of `out` that were killed: finishes an update whose journal was
/// written, removes their staging folders beside it, and puts a parked old tree back when
/// `out` is missing (a kill between the two renames of the fallback swap). Call it holding
/// the lock.
pub fn recover(out: &Path) -> Result<Recovered, OutputError> {
    let mut recovered = Recovered::default();
    if let Some(journal) = Journal::read(out)? {
        journal.apply(out).map_err(io_err(
            "cannot finish the update an interrupted render began in",
            out,
        ))?;
        recovered.finished_update = true;
    }
    let (parent, name) = split(out);
    let Ok(entries) = fs::read_dir(&parent) else {
        return Ok(recovered);
    };
    let mut prefix = OsString::from(".");
    prefix.push(&name);
    prefix.push(".kalypso-");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut staged = Vec::new();
    let mut parked = Vec::new();
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file.strip_prefix(&prefix) else {
            continue;
        };
        let is_pid = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if rest.strip_prefix("new-").is_some_and(is_pid) || rest.strip_prefix("journal-").is_some_and(is_pid)
        {
            staged.push(entry.path());
        } else if rest.strip_prefix("old-").is_some_and(is_pid) {
            parked.push(entry.path());
        }
    }
    parked.sort();
    if fs::symlink_metadata(out).is_err()
        && let Some(old) = parked.pop()
    {
        fs::rename(&old, out).map_err(io_err("cannot restore the previous tree from", &old))?;
    }
    recovered.leftovers = staged.len() + parked.len();
    for path in staged.iter().chain(&parked) {
        remove_all(path).map_err(io_err(
            "cannot remove the leftover of an interrupted render",
            path,
        ))?;
    }
    Ok(recovered)
}

/// [`recover`], saying on standard error (unless `quiet`) when it finished an update that a
/// killed render had begun in `out` (`shown` as the user named it).
pub fn recover_noting(out: &Path, shown: &str, quiet: bool) -> Result<Recovered, OutputError> {
    let recovered = recover(out)?;
    if recovered.finished_update && !quiet {
        eprintln!(
            "note: {shown} held an update that an interrupted kalypso render had begun; it was finished first"
        );
    }
    Ok(recovered)
}

/// Before the GitOps folder `dir` (`shown` as the user named it) is read as a current tree
/// (`plan`, `diff` and `explain` with `--against DIR`): takes its lock, so that no render
/// changes it while it is read, and finishes an update that a killed render began in it
/// (saying so unless `quiet`), as `render` does before it writes; the reader sees the old
/// tree or the new one, never a mix. Hold the lock returned until the tree is read.
///
/// When the folder holding `dir` cannot be written, no render can be writing `dir` either
/// (a render needs its lock file there): it is read without the lock, and refused if an
/// interrupted update is pending, which only a render that can write there can finish.
pub fn settle_for_reading(dir: &Path, shown: &str, quiet: bool) -> Result<Option<OutputLock>, OutputError> {
    let real = real_path(dir, shown)?;
    match OutputLock::lock(&sibling(&real, "lock"), shown, Purpose::Read) {
        Ok(lock) => {
            recover_noting(&real, shown, quiet)?;
            Ok(Some(lock))
        }
        Err(OutputError::ReadOnly(_)) => match fs::symlink_metadata(journal_path(&real)) {
            Ok(_) => Err(OutputError::ReadOnly(format!(
                "cannot read {shown}: it holds an update that an interrupted kalypso render began and did not \
                 finish ({} is beside it), so some of its files are new and some old; the folder it is in is \
                 read-only, so it cannot be finished here: run `kalypso render` into {shown} where that folder \
                 can be written (it finishes the update first), then read it",
                journal_path(&real)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ))),
            Err(_) => Ok(None),
        },
        Err(e) => Err(e),
    }
}

/// Whether `out` is on another file system than its parent folder.
pub fn is_mount_point(out: &Path) -> bool {
    let (parent, _) = split(out);
    match (fs::metadata(out), fs::metadata(&parent)) {
        (Ok(o), Ok(p)) => o.dev() != p.dev(),
        _ => false,
    }
}

/// Refuses an existing, non-empty `out` that is not a GitOps tree: a folder whose non-dot
/// folders are all cluster-type folders (holding the cluster type's `README.md` or
/// deployment-target folders, each of which holds a `reconciler.yaml`, `namespace.yaml` or
/// `platform-config.yaml` or is empty), with at least one of them, or the original's
/// `.github/tracking/Promoted_Commit_Id`, or a `.git` (a GitOps repository that has no
/// cluster types yet: there is nothing a render could delete). Root files, dot-folders and
/// links are never deleted by a render, so they do not count against it.
pub fn check_gitops_tree(out: &Path, shown: &str) -> Result<(), OutputError> {
    let entries = match fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(OutputError::Io {
                what: "cannot read",
                path: out.to_owned(),
                cause: e,
            });
        }
    };
    let mut folders = Vec::new();
    let mut any = false;
    let mut has_git = false;
    for entry in entries {
        let entry = entry.map_err(io_err("cannot read", out))?;
        any = true;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().map_err(io_err("cannot read", &entry.path()))?;
        if name == ".git" {
            has_git = true;
        }
        if kind.is_dir() && !name.starts_with('.') {
            folders.push((name, entry.path()));
        }
    }
    if !any {
        return Ok(());
    }
    folders.sort();
    let foreign: Vec<String> = folders
        .par_iter()
        .map(|(name, path)| foreign_in_cluster_type(name, path))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let refuse = |why: String| {
        Err(OutputError::NotGitOps {
            out: shown.to_owned(),
            why,
        })
    };
    if !foreign.is_empty() {
        let mut shown: Vec<String> = foreign.iter().take(3).map(|f| format!("{f}/")).collect();
        let listed = match foreign.len() {
            n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
            1 => shown.join(""),
            _ => {
                let last = shown.pop().unwrap_or_default();
                format!("{} and {last}", shown.join(", "))
            }
        };
        let verb = if foreign.len() == 1 {
            "is a folder"
        } else {
            "are folders"
        };
        return refuse(format!(
            "{listed} {verb} of neither a cluster type nor a deployment target, which a render would delete"
        ));
    }
    let promoted = fs::symlink_metadata(out.join(tree::PROMOTED_COMMIT_PATH)).is_ok_and(|m| m.is_file());
    if folders.is_empty() && !promoted && !has_git {
        return refuse(format!(
            "it holds no cluster-type folder, no {} and no .git",
            tree::PROMOTED_COMMIT_PATH
        ));
    }
    Ok(())
}

/// What in the top-level folder `name` (at `path`) is not part of a GitOps tree: the folder
/// itself when it is neither a cluster type's folder nor empty, else its sub-folders that are
/// not deployment targets (as `name/sub`).
fn foreign_in_cluster_type(name: &str, path: &Path) -> Result<Vec<String>, OutputError> {
    let mut readme = false;
    let mut targets = 0usize;
    let mut foreign = Vec::new();
    let mut empty = true;
    for entry in fs::read_dir(path).map_err(io_err("cannot read", path))? {
        let entry = entry.map_err(io_err("cannot read", path))?;
        empty = false;
        let inner = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().map_err(io_err("cannot read", &entry.path()))?;
        if inner == tree::README && kind.is_file() {
            readme = true;
        } else if kind.is_dir() {
            if is_target_folder(&entry.path())? {
                targets += 1;
            } else {
                foreign.push(format!("{name}/{inner}"));
            }
        }
    }
    if empty {
        return Ok(Vec::new());
    }
    if !readme && targets == 0 {
        return Ok(vec![name.to_owned()]);
    }
    Ok(foreign)
}

/// Whether `path` is a deployment-target folder: it holds one of [`TARGET_FILES`] or is empty.
fn is_target_folder(path: &Path) -> Result<bool, OutputError> {
    for file in TARGET_FILES {
        if fs::symlink_metadata(path.join(file)).is_ok() {
            return Ok(true);
        }
    }
    Ok(fs::read_dir(path)
        .map_err(io_err("cannot read", path))?
        .next()
        .is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass checks against their definition, segment by segment.
    #[test]
    fn plain_paths_and_names_are_what_their_definition_says() {
        fn by_definition(rel: &str) -> bool {
            !rel.is_empty()
                && !rel.starts_with('/')
                && rel
                    .split('/')
                    .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\\') && !s.contains('\0'))
        }
        let paths = [
            "",
            "/",
            "a",
            "a/b",
            "a/b/c.yaml",
            "/a",
            "a/",
            "a//b",
            ".",
            "..",
            "./a",
            "a/.",
            "a/..",
            "../a",
            "a/../b",
            ".a",
            "a..",
            "..a/b",
            "a\\b",
            "a/b\\",
            "a\0b",
            "\0",
            "a/\0",
            "é/ü",
            "a b/c",
        ];
        for rel in paths {
            assert_eq!(is_plain_relative(rel), by_definition(rel), "{rel:?}");
            assert_eq!(
                is_plain_name(rel),
                !rel.contains('/') && by_definition(rel),
                "{rel:?}"
            );
        }
    }

    fn files(root: &Path, paths: &[&str]) {
        for p in paths {
            let path = root.join(p);
            if let Some(stripped) = p.strip_suffix('/') {
                fs::create_dir_all(root.join(stripped)).unwrap();
            } else {
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, "x").unwrap();
            }
        }
    }

    fn verdict(paths: &[&str]) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        files(dir.path(), paths);
        check_gitops_tree(dir.path(), "OUT").map_err(|e| e.to_string())
    }

    #[test]
    fn recognises_gitops_trees_and_refuses_the_rest() {
        for ok in [
            &[][..],
            &["large/README.md"],
            &[
                "large/app-t/reconciler.yaml",
                "small/app-u/namespace.yaml",
                "README.md",
            ],
            &["old/app-t/config.yaml", ".github/workflows/x.yaml"],
            &["notes.txt", ".github/tracking/Promoted_Commit_Id"],
            &[".git/HEAD", "README.md"],
            &["large/README.md", "large/app-t/", "empty/"],
        ] {
            assert_eq!(verdict(ok), Ok(()), "{ok:?}");
        }
        for (bad, why) in [
            (&["notes.txt"][..], "holds no cluster-type folder"),
            (&["Documents/a.txt", ".bashrc"], "Documents/ is a folder"),
            (&["src/main.rs", "Cargo.toml", ".git/HEAD"], "src/ is a folder"),
            (
                &["large/README.md", "large/photos/cat.jpg"],
                "large/photos/ is a folder",
            ),
            (
                &["a/x", "b/x", "c/x", "d/x", "large/README.md"],
                "a/, b/, c/ and 1 more are folders",
            ),
        ] {
            let err = verdict(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.starts_with("refusing to render into OUT"), "{err}");
        }
    }

    #[test]
    fn a_second_lock_fails_naming_the_holder_and_the_file_goes_with_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new/out");
        let first = OutputLock::acquire(&out, "OUT").unwrap();
        let lock_file = dir.path().join("new/.out.kalypso-lock");
        assert_eq!(
            fs::read_to_string(&lock_file).unwrap(),
            std::process::id().to_string()
        );
        let err = OutputLock::acquire(&out, "OUT").unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "another kalypso is writing to OUT (pid {})",
                std::process::id()
            )),
            "{err}"
        );
        assert!(
            lock_file.exists(),
            "a failed attempt leaves the holder's file alone"
        );
        drop(first);
        assert!(
            !dir.path().join("new").exists(),
            "the lock file and the parent made for it are gone"
        );
        drop(OutputLock::acquire(&out, "OUT").unwrap());
    }

    #[test]
    fn a_journal_that_would_leave_the_output_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        fs::create_dir(&out).unwrap();
        let outside = root.path().join("precious");
        fs::write(&outside, "keep").unwrap();
        let staging = staging_path(&out)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let journals = [
            (staging.clone(), "../precious"),
            (staging.clone(), "/etc/passwd"),
            ("..".to_owned(), "a"),
            (".other.kalypso-new-1".to_owned(), "a"),
        ];
        for (staging, path) in journals {
            let journal = Journal {
                staging,
                delete: vec![path.to_owned()],
                write: Vec::new(),
                prune: Vec::new(),
            };
            journal.commit(&out).unwrap();
            let err = recover(&out).unwrap_err().to_string();
            assert!(
                err.contains("cannot use the journal of an interrupted render"),
                "{err}"
            );
            assert!(outside.exists());
        }
    }

    #[test]
    fn recovery_removes_staging_folders_and_restores_a_parked_tree() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        files(
            dir.path(),
            &[
                ".out.kalypso-new-12/large/README.md",
                ".out.kalypso-old-13/large/README.md",
                ".out.kalypso-lock",
                ".other.kalypso-new-12/x",
                ".out.kalypso-new-x/keep",
            ],
        );
        assert_eq!(
            recover(&out).unwrap(),
            Recovered {
                finished_update: false,
                leftovers: 1
            }
        );
        assert!(out.join("large/README.md").exists(), "the parked tree is back");
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".other.kalypso-new-12",
                ".out.kalypso-lock",
                ".out.kalypso-new-x",
                "out"
            ]
        );
    }
}
