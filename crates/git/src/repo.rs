//! Repositories: opened in place (a local path) or as a cached mirror (anything else),
//! fetched, read straight from git objects, written to in memory and pushed — one child
//! module per operation, each with its own error: [`fetch`] (and branch listings), [`read`],
//! [`stage`] (new objects, written as packs) and [`push`]. Opening a repository and the cache
//! of mirrors are here, with [`Error`], any of the operations' errors.
//!
//! No checkout ever happens. Sources are read from commits into
//! [`kalypso_core::source::SourceTree`]s; the GitOps branch is read into a
//! [`kalypso_core::tree::Tree`] (a [`Snapshot`]) and the new tree is written as git objects
//! through a [`Staging`]: the rendered tree's objects are streamed into one pack in the
//! cache, the few others (commits, trees of `write_tree`) live in memory until they are
//! persisted, before a push names them. Remote repositories are mirrored under the
//! cache folder (`refs/remotes/origin/*`), with remotes created anonymously so that no URL,
//! and so no credential, is ever written into a repository config.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use git2::{ErrorClass, ErrorCode, ProxyOptions, Repository};

use crate::auth::Credentials;
use crate::redact::redact;
use crate::retry::RetryPolicy;
use crate::treewrite::UnknownFiles;
use crate::url::RepoUrl;

pub mod fetch;
pub mod push;
pub mod read;
pub mod stage;

pub use fetch::{FetchError, Heads, list_heads};
pub use push::{PushError, RefUpdate};
pub use read::{ReadError, Snapshot};
pub use stage::{StageError, Staging, Written};

/// The file mode of regular files (the original writes every file with it).
const FILE_MODE: i32 = 0o100_644;
/// Where fetched branches are kept in a mirror.
const TRACKING: &str = "refs/remotes/origin/";

/// A failed git operation: the error of the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Opening a repository or the cache.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Fetching or listing branches.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// Reading branches, commits, trees and files.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Writing new objects.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// Pushing, or moving a branch in place.
    #[error(transparent)]
    Push(#[from] PushError),
}

impl Error {
    /// Whether the failure is worth retrying (network trouble).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Open(e) => e.is_transient(),
            Error::Fetch(e) => e.is_transient(),
            Error::Read(e) => e.is_transient(),
            Error::Stage(e) => e.is_transient(),
            Error::Push(e) => e.is_transient(),
        }
    }

    /// Whether the failure looks like a damaged repository on disk (a broken reference, a
    /// missing, truncated or garbled object) rather than the network or the input: for a
    /// mirror, fetching it afresh repairs it.
    pub fn is_damage(&self) -> bool {
        let git = match self {
            Error::Open(OpenError::Git(g))
            | Error::Fetch(FetchError::Git(g))
            | Error::Read(ReadError::Git(g))
            | Error::Stage(StageError::Git(g))
            | Error::Push(PushError::Git(g)) => g,
            Error::Push(PushError::Store(StageError::Git(g))) => g,
            _ => return false,
        };
        git.is_damage()
    }

    /// The error of a delivery to `repo` (redacted) that cannot put the folder of `unknown`
    /// on its branch: the environment is rendered in full instead.
    pub fn not_delivered(unknown: UnknownFiles, repo: String) -> Error {
        let (cluster_type, target) = unknown.assignment;
        Error::Stage(StageError::NotDelivered {
            path: format!("{cluster_type}/{target}"),
            repo,
        })
    }

    /// Whether a file of an earlier delivery, put on a branch by its id, is not in the
    /// repository (see [`crate::delivered`]).
    pub fn is_not_delivered(&self) -> bool {
        matches!(self, Error::Stage(StageError::NotDelivered { .. }))
    }

    /// Whether the remote refused an update because its branch moved.
    pub fn is_rejection(&self) -> bool {
        matches!(self, Error::Push(PushError::Rejected { .. }))
    }
}

/// Lets `?` turn the error of each operation into `$target` through [`Error`] (for the
/// errors of callers that hold an [`Error`]).
macro_rules! operation_errors_into {
    ($target:ty) => {
        impl From<$crate::repo::OpenError> for $target {
            fn from(e: $crate::repo::OpenError) -> $target {
                <$target>::from($crate::repo::Error::from(e))
            }
        }
        impl From<$crate::repo::FetchError> for $target {
            fn from(e: $crate::repo::FetchError) -> $target {
                <$target>::from($crate::repo::Error::from(e))
            }
        }
        impl From<$crate::repo::ReadError> for $target {
            fn from(e: $crate::repo::ReadError) -> $target {
                <$target>::from($crate::repo::Error::from(e))
            }
        }
        impl From<$crate::repo::StageError> for $target {
            fn from(e: $crate::repo::StageError) -> $target {
                <$target>::from($crate::repo::Error::from(e))
            }
        }
        impl From<$crate::repo::PushError> for $target {
            fn from(e: $crate::repo::PushError) -> $target {
                <$target>::from($crate::repo::Error::from(e))
            }
        }
    };
}
pub(crate) use operation_errors_into;

/// Opening a repository, or the cache of mirrors, failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The cache folder cannot be created (or held).
    #[error("cannot create the git cache {path}: {error}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// Why (its message is part of this error's).
        error: std::io::Error,
    },
    /// libgit2 cannot open or create the repository.
    #[error(transparent)]
    Git(#[from] GitFailure),
}

impl OpenError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, OpenError::Git(g) if g.is_transient())
    }
}

/// A libgit2 failure: what was being done, to which repository (redacted), and libgit2's
/// message.
#[derive(Debug, thiserror::Error)]
#[error("{action} {repo}: {cause}")]
pub struct GitFailure {
    /// What was being done (`cannot fetch`, `cannot read commit 1a2b… of`…).
    pub action: String,
    /// The repository, redacted.
    pub repo: String,
    /// libgit2's message, redacted.
    pub cause: GitCause,
}

impl GitFailure {
    /// Whether retrying may help (see [`GitCause`]).
    pub fn is_transient(&self) -> bool {
        self.cause.is_transient()
    }

    /// Whether it looks like a damaged repository on disk (see [`Error::is_damage`]).
    fn is_damage(&self) -> bool {
        let cause = &self.cause;
        !cause.is_transient()
            && matches!(
                cause.class,
                ErrorClass::Odb
                    | ErrorClass::Object
                    | ErrorClass::Reference
                    | ErrorClass::Zlib
                    | ErrorClass::Repository
                    | ErrorClass::Indexer
                    | ErrorClass::Tree
            )
            // A reference to an object the repository lost.
            || (cause.class == ErrorClass::Invalid && cause.message.contains("cannot be peeled"))
    }
}

/// libgit2's error, reduced to what is safe to show and what decides retrying.
#[derive(Debug, Clone)]
pub struct GitCause {
    message: String,
    code: ErrorCode,
    class: ErrorClass,
}

impl std::fmt::Display for GitCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<git2::Error> for GitCause {
    fn from(e: git2::Error) -> GitCause {
        GitCause {
            message: redact(e.message()),
            code: e.code(),
            class: e.class(),
        }
    }
}

impl GitCause {
    /// Whether retrying may help: connection problems and server-side errors, not
    /// authentication failures or missing repositories.
    fn is_transient(&self) -> bool {
        if matches!(
            self.code,
            ErrorCode::Auth | ErrorCode::Certificate | ErrorCode::NotFound
        ) {
            return false;
        }
        // A local repository that is missing or unreadable stays so: no network in between.
        if self.message.contains("No such file or directory") || self.message.contains("Permission denied") {
            return false;
        }
        match self.class {
            ErrorClass::Net | ErrorClass::Os | ErrorClass::Ssh | ErrorClass::Ssl => true,
            ErrorClass::Http => match self.message.split("status code: ").nth(1) {
                Some(code) => code.starts_with('5') || code.starts_with("429") || code.starts_with("408"),
                None => !self.message.contains("authentication"),
            },
            _ => false,
        }
    }

    fn is_rejection(&self) -> bool {
        self.code == ErrorCode::NotFastForward
    }
}

/// The failure of `action` on `repo`, from libgit2's error.
fn git_error(action: impl Into<String>, repo: &RepoUrl) -> impl FnOnce(git2::Error) -> GitFailure {
    let action = action.into();
    let repo = repo.redacted();
    move |e| GitFailure {
        action,
        repo,
        cause: e.into(),
    }
}

/// How network operations are carried out: credentials, retries, and a count of the
/// retries made (reported and exported as a metric).
#[derive(Debug)]
pub struct Transport<'a> {
    /// Credentials for every remote.
    pub credentials: &'a Credentials,
    /// Retrying of transient failures.
    pub retry: RetryPolicy,
    /// Retries made so far.
    pub retries: RefCell<u32>,
}

impl<'a> Transport<'a> {
    /// A transport using `credentials` and `retry`.
    pub fn new(credentials: &'a Credentials, retry: RetryPolicy) -> Transport<'a> {
        Transport {
            credentials,
            retry,
            retries: RefCell::new(0),
        }
    }

    /// Runs `op`, retrying the failures `is_transient` says may go away.
    fn run<T, E: std::fmt::Display>(
        &self,
        what: &dyn Fn() -> String,
        is_transient: impl Fn(&E) -> bool,
        op: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut retries = self.retries.borrow_mut();
        self.retry.run(what, &mut retries, is_transient, op)
    }
}

/// Proxies as git itself finds them (`http.proxy`, `https_proxy`...).
fn auto_proxy() -> ProxyOptions<'static> {
    let mut proxy = ProxyOptions::new();
    proxy.auto();
    proxy
}

/// The folder holding mirrors of remote repositories.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache in `dir` (created when first used).
    pub fn new(dir: impl Into<PathBuf>) -> Cache {
        Cache { dir: dir.into() }
    }

    /// `$XDG_CACHE_HOME/kalypso/git`, else `~/.cache/kalypso/git`, else a folder in the
    /// system's temporary directory.
    pub fn default_dir() -> PathBuf {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("kalypso").join("git")
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Holds the cache for this process alone (waiting while another process holds it),
    /// then removes the reference and index locks a killed process left in its mirrors:
    /// with the hold taken nobody else is writing them, and a stale lock would make every
    /// later fetch of that repository fail. The hold lasts as long as the returned value.
    /// Only the mirrors directly in the folder are swept (not `serve/`, whose daemons hold
    /// their own folders).
    pub fn hold(&self) -> Result<CacheHold, OpenError> {
        let io = |error| OpenError::Cache {
            path: self.dir.clone(),
            error,
        };
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let name = self
            .dir
            .file_name()
            .map_or_else(|| "cache".into(), |n| n.to_string_lossy().into_owned());
        let path = self.dir.with_file_name(format!("{name}.lock"));
        let file = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::warn!(lock = %path.display(), "another kalypso process uses the cache: waiting for it");
                file.lock().map_err(io)?;
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        for entry in std::fs::read_dir(&self.dir).map_err(io)?.flatten() {
            let mirror = entry.path();
            if mirror.join("HEAD").is_file() {
                remove_stale_locks(&mirror).map_err(|(_, e)| io(e))?;
            }
        }
        Ok(CacheHold { _file: file })
    }
}

/// A cache held by this process (see [`Cache::hold`]).
#[derive(Debug)]
pub struct CacheHold {
    _file: std::fs::File,
}

/// Removes every `*.lock` file under `dir`, which git leaves when a write is interrupted,
/// and the temporary files of packs being written (kalypso's `tmp_pack_*` and `tmp_idx_*`,
/// libgit2's `pack_git2_*`), with a warning for each. Call it holding what keeps other
/// writers of `dir` out. A file that cannot be removed is returned with the error.
pub fn remove_stale_locks(dir: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let mut stale = Vec::new();
    find_locks(dir, &mut stale);
    for lock in stale {
        match std::fs::remove_file(&lock) {
            Ok(()) => tracing::warn!(file = %lock.display(), "removed a file left by an interrupted write"),
            Err(e) => return Err((lock, e)),
        }
    }
    Ok(())
}

/// Every `*.lock` file under `dir`, and every temporary file of a pack being written.
fn find_locks(dir: &Path, out: &mut Vec<PathBuf>) {
    let in_packs = dir.file_name().is_some_and(|n| n == "pack");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => find_locks(&path, out),
            Ok(t) if t.is_file() && path.extension().is_some_and(|e| e == "lock") => out.push(path),
            Ok(t) if t.is_file() && in_packs && is_temporary_pack(&entry.file_name()) => out.push(path),
            _ => {}
        }
    }
}

/// Whether a file of `objects/pack` is a pack or index still being written.
fn is_temporary_pack(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    ["tmp_pack_", "tmp_idx_", "pack_git2_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// A repository, either opened in place or mirrored in the cache.
pub struct Repo {
    git: Repository,
    url: RepoUrl,
    in_place: bool,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("url", &self.url)
            .field("in_place", &self.in_place)
            .finish()
    }
}

impl Repo {
    /// Opens a source: a plain local path in place (its local branches are read as they
    /// are), anything else as a mirror in `cache`.
    pub fn open_source(url: &RepoUrl, cache: &Cache) -> Result<Repo, OpenError> {
        match url.plain_path() {
            Some(path) => {
                let git = Repository::open(path).map_err(git_error("cannot open", url))?;
                Ok(Repo {
                    git,
                    url: url.clone(),
                    in_place: true,
                })
            }
            None => Repo::open_mirror(url, cache),
        }
    }

    /// Opens (creating if needed) the cached mirror of `url`. Used for every repository
    /// that is written to, local or not, so that writes always go through a push.
    pub fn open_mirror(url: &RepoUrl, cache: &Cache) -> Result<Repo, OpenError> {
        std::fs::create_dir_all(&cache.dir).map_err(|error| OpenError::Cache {
            path: cache.dir.clone(),
            error,
        })?;
        let path = cache.dir.join(url.cache_name());
        let git = match Repository::open_bare(&path) {
            Ok(git) => git,
            Err(_) => Repository::init_bare(&path).map_err(git_error("cannot create a cache for", url))?,
        };
        no_delta_search(&git).map_err(git_error("cannot configure the cache of", url))?;
        Ok(Repo {
            git,
            url: url.clone(),
            in_place: false,
        })
    }

    /// The repository's location.
    pub fn url(&self) -> &RepoUrl {
        &self.url
    }

    /// Whether the repository is read in place (nothing to fetch).
    pub fn is_in_place(&self) -> bool {
        self.in_place
    }
}

/// Packs libgit2 writes from a mirror (its pushes; kalypso writes the packs it stores
/// itself, see [`crate::pack`]) are made without a delta search: the new objects of a GitOps commit are
/// mostly small files unlike each other, and libgit2's search over a fleet's worth of them
/// costs more than the bytes it saves. libgit2 1.9 reads the size limit for delta
/// candidates from `pack.deltaCacheSize` (a slip for `pack.bigFileThreshold`), so both are
/// set: no object is a candidate.
fn no_delta_search(git: &Repository) -> Result<(), git2::Error> {
    let mut config = git.config()?;
    for key in ["pack.bigFileThreshold", "pack.deltaCacheSize"] {
        if config.get_i64(key).ok() != Some(1) {
            config.set_i64(key, 1)?;
        }
    }
    Ok(())
}

/// `path` as a tree path: `./a/b/` → `a/b`, `.` → `` (the root). `..` is refused.
pub fn normalize_path(path: &str) -> Result<String, &'static str> {
    let mut parts = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => return Err("`..` is not allowed"),
            s => parts.push(s),
        }
    }
    Ok(parts.join("/"))
}

/// Who commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Author {
    /// Name.
    pub name: String,
    /// E-mail address.
    pub email: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_paths() {
        assert_eq!(normalize_path("./workloads/"), Ok("workloads".into()));
        assert_eq!(normalize_path("."), Ok(String::new()));
        assert_eq!(normalize_path("a//b/./c"), Ok("a/b/c".into()));
        assert!(normalize_path("../x").is_err());
    }

    #[test]
    fn classifies_transient_failures() {
        let cause = |code, class, message: &str| GitCause {
            message: message.into(),
            code,
            class,
        };
        use ErrorClass as C;
        use ErrorCode as E;
        assert!(cause(E::GenericError, C::Net, "failed to connect").is_transient());
        assert!(cause(E::GenericError, C::Http, "unexpected http status code: 503").is_transient());
        assert!(!cause(E::GenericError, C::Http, "unexpected http status code: 404").is_transient());
        assert!(!cause(E::Auth, C::Http, "authentication required").is_transient());
        assert!(!cause(E::NotFound, C::Reference, "not found").is_transient());
        assert!(cause(E::NotFastForward, C::Reference, "non-ff").is_rejection());
        // A missing local repository (file://) is not worth a retry.
        let missing = "failed to resolve path '/nonexistent/cp': No such file or directory";
        assert!(!cause(E::GenericError, C::Os, missing).is_transient());
        assert!(!cause(E::GenericError, C::Os, "could not open '/x': Permission denied").is_transient());
        assert!(cause(E::GenericError, C::Os, "connection reset by peer").is_transient());
    }

    #[test]
    fn stale_locks_and_temporary_packs_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            ("refs/heads/dev.lock", false),
            ("objects/pack/tmp_pack_a1b2", false),
            ("objects/pack/tmp_idx_a1b2", false),
            ("objects/pack/pack_git2_x", false),
            ("objects/pack/pack-0123.pack", true),
            ("objects/pack/pack-0123.idx", true),
            ("refs/heads/tmp_pack_named_branch", true),
            ("HEAD", true),
        ];
        for (path, _) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x").unwrap();
        }
        remove_stale_locks(dir.path()).unwrap();
        for (path, kept) in files {
            assert_eq!(dir.path().join(path).exists(), kept, "{path}");
        }
    }
}
