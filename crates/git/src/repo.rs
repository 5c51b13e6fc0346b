//! Repositories: opened in place (a local path) or as a cached mirror (anything else),
//! fetched, read straight from git objects, written to in memory and pushed.
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
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use git2::{
    AutotagOption, ErrorClass, ErrorCode, FetchOptions, FetchPrune, ObjectType, Oid, ProxyOptions,
    PushOptions, Repository, Signature, TreeWalkMode, TreeWalkResult,
};
use kalypso_core::source::{SOURCEIGNORE, SourceFile, SourceTree};
use kalypso_core::tree::{Blob, Tree};

use crate::auth::Credentials;
use crate::local_push::Failure;
use crate::redact::redact;
use crate::retry::RetryPolicy;
use crate::treewrite::{Hashed, UnknownFiles};
use crate::url::RepoUrl;

/// The file mode of regular files (the original writes every file with it).
const FILE_MODE: i32 = 0o100_644;
/// Where fetched branches are kept in a mirror.
const TRACKING: &str = "refs/remotes/origin/";

/// A failure of a git operation, with the repository it concerns (redacted).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cache folder cannot be created.
    #[error("cannot create the git cache {path}: {error}")]
    Cache {
        /// The folder.
        path: PathBuf,
        /// Why (its message is part of this error's).
        error: std::io::Error,
    },
    /// A git operation failed.
    #[error("{action} {repo}: {cause}")]
    Git {
        /// What was being done (`cannot fetch`, `cannot read commit 1a2b… of`…).
        action: String,
        /// The repository, redacted.
        repo: String,
        /// libgit2's message, redacted.
        cause: GitCause,
    },
    /// The remote refused a reference update (someone else pushed first).
    #[error("{repo} rejected the update of {reference}: {message}")]
    Rejected {
        /// The repository, redacted.
        repo: String,
        /// The reference.
        reference: String,
        /// The server's reason.
        message: String,
    },
    /// The remote could not update a branch because its lock file exists: another process
    /// is writing the branch, or one was interrupted while writing it.
    #[error("{repo} could not update {detail}")]
    Locked {
        /// The repository, redacted.
        repo: String,
        /// The reference, the remote's message, and for a repository on this machine which
        /// file to remove once no process writes.
        detail: String,
        /// Whether the repository is on this machine (the lock then stays until removed).
        local: bool,
    },
    /// A revision does not exist.
    #[error("{what} not found in {repo}")]
    NotFound {
        /// What (`commit 1a2b…`, `path workloads/ at commit 1a2b…`).
        what: String,
        /// The repository, redacted.
        repo: String,
    },
    /// A path is not usable inside a repository.
    #[error("invalid path {path:?} in {repo}: {reason}")]
    InvalidPath {
        /// The path.
        path: String,
        /// The repository, redacted.
        repo: String,
        /// Why.
        reason: &'static str,
    },
    /// A file of an earlier delivery, put on a branch by its id, is not in the repository
    /// (see [`crate::delivered`]): the environment is rendered in full instead.
    #[error("{path}: the file delivered before is not in the cache of {repo}")]
    NotDelivered {
        /// The file's path in the tree.
        path: String,
        /// The repository, redacted.
        repo: String,
    },
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

impl Error {
    /// Whether the failure is worth retrying (network trouble).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Git { cause, .. } => cause.is_transient(),
            // A remote server's lock is another push under way; a local one stays.
            Error::Locked { local, .. } => !local,
            _ => false,
        }
    }

    /// Whether the failure looks like a damaged repository on disk (a broken reference, a
    /// missing, truncated or garbled object) rather than the network or the input: for a
    /// mirror, fetching it afresh repairs it.
    pub fn is_damage(&self) -> bool {
        match self {
            Error::Git { cause, .. } => {
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
            _ => false,
        }
    }

    /// The error of a delivery to `repo` (redacted) that cannot put the folder of `unknown`
    /// on its branch: the environment is rendered in full instead.
    pub fn not_delivered(unknown: UnknownFiles, repo: String) -> Error {
        let (cluster_type, target) = unknown.assignment;
        Error::NotDelivered {
            path: format!("{cluster_type}/{target}"),
            repo,
        }
    }

    /// Whether the remote refused an update because its branch moved.
    pub fn is_rejection(&self) -> bool {
        matches!(self, Error::Rejected { .. })
    }
}

fn git_error(action: impl Into<String>, repo: &RepoUrl) -> impl FnOnce(git2::Error) -> Error {
    let action = action.into();
    let repo = repo.redacted();
    move |e| Error::Git {
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

    fn run<T>(&self, what: &dyn Fn() -> String, op: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
        let mut retries = self.retries.borrow_mut();
        self.retry.run(what, &mut retries, Error::is_transient, op)
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
    pub fn hold(&self) -> Result<CacheHold, Error> {
        let io = |error| Error::Cache {
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

/// The files of a GitOps branch, with the git ids needed to rewrite it cheaply.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The branch head (`None`: the branch does not exist yet).
    pub commit: Option<Oid>,
    /// The head's tree.
    pub tree_id: Option<Oid>,
    /// Every file.
    pub files: Tree,
    entries: HashMap<String, (Oid, i32)>,
}

/// One reference update of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUpdate {
    /// The branch (without `refs/heads/`).
    pub branch: String,
    /// The new head, or `None` to delete the branch.
    pub target: Option<Oid>,
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
    pub fn open_source(url: &RepoUrl, cache: &Cache) -> Result<Repo, Error> {
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
    pub fn open_mirror(url: &RepoUrl, cache: &Cache) -> Result<Repo, Error> {
        std::fs::create_dir_all(&cache.dir).map_err(|error| Error::Cache {
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

    /// Fetches every branch (pruning deleted ones). Nothing to do in place.
    pub fn fetch_all(&self, transport: &Transport<'_>) -> Result<(), Error> {
        self.fetch(transport, &[format!("+refs/heads/*:{TRACKING}*")])
    }

    /// Fetches `branches`, and every branch under each of `prefixes` (e.g. `kalypso/dev/`),
    /// pruning those that no longer exist. Afterwards [`Repo::branch`] answers `None` for a
    /// branch the remote does not have.
    pub fn fetch_branches(
        &self,
        transport: &Transport<'_>,
        branches: &[&str],
        prefixes: &[&str],
    ) -> Result<(), Error> {
        let mut refspecs: Vec<String> = branches
            .iter()
            .map(|b| format!("+refs/heads/{b}:{TRACKING}{b}"))
            .collect();
        refspecs.extend(
            prefixes
                .iter()
                .map(|p| format!("+refs/heads/{p}*:{TRACKING}{p}*")),
        );
        self.fetch(transport, &refspecs)
    }

    fn fetch(&self, transport: &Transport<'_>, refspecs: &[String]) -> Result<(), Error> {
        if self.in_place {
            return Ok(());
        }
        let span = tracing::debug_span!("fetch", repo = %self.url);
        let _enter = span.enter();
        // The mirror's copies of the branches stay in place while fetching: they are what
        // the negotiation offers as already here (without them the remote sends the whole
        // history again). A branch fetched by name that the remote deleted is pruned: libgit2
        // prunes the destination of an exact refspec whose source the remote does not list.
        // A copy whose commit or tree cannot be read (garbled packs) would be offered as had
        // and never sent again: it goes first, and its branch is fetched whole.
        self.drop_unreadable_branches()?;
        transport.run(&|| format!("fetch {}", self.url), || {
            let mut remote = self
                .git
                .remote_anonymous(self.url.for_git())
                .map_err(git_error("cannot fetch", &self.url))?;
            let mut options = FetchOptions::new();
            options
                .remote_callbacks(transport.credentials.callbacks())
                .proxy_options(auto_proxy())
                .prune(FetchPrune::On)
                .download_tags(AutotagOption::None)
                .update_fetchhead(false);
            remote
                .fetch(refspecs, Some(&mut options), None)
                .map_err(git_error("cannot fetch", &self.url))
        })
    }

    /// Deletes the mirror's branches whose commit or root tree cannot be read.
    fn drop_unreadable_branches(&self) -> Result<(), Error> {
        let fail = || git_error("cannot update the cache of", &self.url);
        let glob = format!("{TRACKING}*");
        let mut unreadable = Vec::new();
        for r in self.git.references_glob(&glob).map_err(fail())? {
            let r = r.map_err(fail())?;
            let readable = r.peel_to_commit().and_then(|c| c.tree().map(|_| ())).is_ok();
            if !readable && let Ok(name) = r.name() {
                unreadable.push(name.to_owned());
            }
        }
        for name in unreadable {
            tracing::warn!(repo = %self.url, reference = name, "the cache's copy of a branch cannot be read; fetching it whole");
            if let Ok(mut r) = self.git.find_reference(&name) {
                r.delete().map_err(fail())?;
            }
        }
        Ok(())
    }

    /// Whether the mirror's copy of every branch in `heads` is at the head the remote
    /// listed (so fetching them would bring nothing). Always true in place.
    pub fn is_at(&self, heads: &BTreeMap<String, Oid>, branches: &[&str]) -> bool {
        if self.in_place {
            return true;
        }
        branches.iter().all(|b| {
            let local = self.git.refname_to_id(&format!("{TRACKING}{b}")).ok();
            local == heads.get(*b).copied()
        })
    }

    /// Whether the mirror holds exactly the branches `heads` lists, at those heads.
    pub fn mirrors(&self, heads: &BTreeMap<String, Oid>) -> bool {
        if self.in_place {
            return true;
        }
        self.branches_under("").is_ok_and(|local| &local == heads)
    }

    /// The head of `branch`, if the branch exists. In place: the local branch, else the
    /// remote-tracking one; in a mirror: the fetched one.
    pub fn branch(&self, branch: &str) -> Result<Option<Oid>, Error> {
        let mut names = vec![format!("{TRACKING}{branch}")];
        if self.in_place {
            names.insert(0, format!("refs/heads/{branch}"));
        }
        for name in names {
            match self.git.find_reference(&name) {
                Ok(r) => {
                    let commit = r
                        .peel_to_commit()
                        .map_err(git_error(format!("cannot read branch {branch} of"), &self.url))?;
                    return Ok(Some(commit.id()));
                }
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(git_error(format!("cannot read branch {branch} of"), &self.url)(e)),
            }
        }
        Ok(None)
    }

    /// Branches under `prefix` (names without `refs/heads/`), with their heads.
    pub fn branches_under(&self, prefix: &str) -> Result<BTreeMap<String, Oid>, Error> {
        let mut out = BTreeMap::new();
        let glob = format!("{TRACKING}{prefix}*");
        let refs = self
            .git
            .references_glob(&glob)
            .map_err(git_error("cannot list branches of", &self.url))?;
        for r in refs {
            let r = r.map_err(git_error("cannot list branches of", &self.url))?;
            if let (Ok(name), Some(target)) = (r.name(), r.target()) {
                out.insert(name.trim_start_matches(TRACKING).to_owned(), target);
            }
        }
        Ok(out)
    }

    /// The commit `rev` names: a full or abbreviated hexadecimal id.
    pub fn find_commit(&self, rev: &str) -> Result<Oid, Error> {
        let not_found = || Error::NotFound {
            what: format!("commit {rev}"),
            repo: self.url.redacted(),
        };
        if rev.len() < 4 || rev.len() > 40 || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(not_found());
        }
        match self.git.find_commit_by_prefix(rev) {
            Ok(c) => Ok(c.id()),
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::Ambiguous) => Err(not_found()),
            Err(e) => Err(git_error(format!("cannot read commit {rev} of"), &self.url)(e)),
        }
    }

    /// Whether `commit` is `ancestor` or one of its descendants.
    pub fn descends_from(&self, commit: Oid, ancestor: Oid) -> Result<bool, Error> {
        if commit == ancestor {
            return Ok(true);
        }
        self.git
            .graph_descendant_of(commit, ancestor)
            .map_err(git_error("cannot walk the history of", &self.url))
    }

    /// The tree id of `commit`.
    pub fn tree_of(&self, commit: Oid) -> Result<Oid, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.tree_id())
    }

    /// When `commit` was made: its committer time, Unix seconds.
    pub fn commit_time(&self, commit: Oid) -> Result<i64, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.committer().when().seconds())
    }

    /// The first parent of `commit`.
    pub fn parent_of(&self, commit: Oid) -> Result<Option<Oid>, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.parent_ids().next())
    }

    /// The YAML files (and `.sourceignore` files) under `path` at `commit`, with `path`
    /// stripped, as a source tree shown as `label`. Only these files matter to the
    /// pipeline, so nothing else is read.
    pub fn source_tree(&self, commit: Oid, path: &str, label: &str) -> Result<SourceTree, Error> {
        let path = normalize_path(path).map_err(|reason| Error::InvalidPath {
            path: path.to_owned(),
            repo: self.url.redacted(),
            reason,
        })?;
        let tree = self.subtree(commit, &path)?;
        let mut files = Vec::new();
        self.walk_blobs(&tree, |file_path, oid, _mode| {
            let name = file_path.rsplit('/').next().unwrap_or_default();
            if file_path.ends_with(".yaml") || file_path.ends_with(".yml") || name == SOURCEIGNORE {
                let blob = self.git.find_blob(oid)?;
                files.push(SourceFile::new(file_path, Arc::<[u8]>::from(blob.content())));
            }
            Ok(())
        })
        .map_err(git_error(
            format!("cannot read {label} at {commit} of"),
            &self.url,
        ))?;
        Ok(SourceTree::new(label, files))
    }

    /// The content of the file at `path` in `commit`, or `None` when there is no such file.
    pub fn read_file(&self, commit: Oid, path: &str) -> Result<Option<Vec<u8>>, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        let root = c
            .tree()
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        let Ok(entry) = root.get_path(Path::new(path)) else {
            return Ok(None);
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Ok(None);
        }
        let blob = self
            .git
            .find_blob(entry.id())
            .map_err(git_error(format!("cannot read {path} at {commit} of"), &self.url))?;
        Ok(Some(blob.content().to_vec()))
    }

    /// The folders two levels deep in `commit` (in a GitOps tree: cluster type, deployment
    /// target), without reading any file. Dot-folders are left out.
    pub fn target_folders(&self, commit: Oid) -> Result<Vec<(String, String)>, Error> {
        let root = self.subtree(commit, "")?;
        let mut out = Vec::new();
        for outer in root.iter() {
            let Some(first) = outer.name().ok().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            if outer.kind() != Some(ObjectType::Tree) {
                continue;
            }
            let inner = self
                .git
                .find_tree(outer.id())
                .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
            for entry in inner.iter() {
                if entry.kind() == Some(ObjectType::Tree)
                    && let Ok(second) = entry.name()
                {
                    out.push((first.to_owned(), second.to_owned()));
                }
            }
        }
        Ok(out)
    }

    /// Every file of `commit` (`None`: an empty tree).
    pub fn snapshot(&self, commit: Option<Oid>) -> Result<Snapshot, Error> {
        let Some(commit) = commit else {
            return Ok(Snapshot::default());
        };
        let tree = self.subtree(commit, "")?;
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        self.walk_blobs(&tree, |path, oid, mode| {
            let blob = self.git.find_blob(oid)?;
            files.push((path.to_owned(), Blob::from(blob.content())));
            entries.insert(path.to_owned(), (oid, mode));
            Ok(())
        })
        .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(Snapshot {
            commit: Some(commit),
            tree_id: Some(tree.id()),
            files: files.into_iter().collect(),
            entries,
        })
    }

    fn subtree(&self, commit: Oid, path: &str) -> Result<git2::Tree<'_>, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        let root = c
            .tree()
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        if path.is_empty() {
            return Ok(root);
        }
        let not_found = || Error::NotFound {
            what: format!("folder {path:?} at commit {commit}"),
            repo: self.url.redacted(),
        };
        let entry = root.get_path(Path::new(path)).map_err(|_| not_found())?;
        if entry.kind() != Some(ObjectType::Tree) {
            return Err(not_found());
        }
        self.git.find_tree(entry.id()).map_err(|_| not_found())
    }

    /// Calls `f(path, blob id, mode)` for every blob under `tree` (symbolic links and
    /// submodules are skipped: they are not files a reconciler applies).
    fn walk_blobs(
        &self,
        tree: &git2::Tree<'_>,
        mut f: impl FnMut(&str, Oid, i32) -> Result<(), git2::Error>,
    ) -> Result<(), git2::Error> {
        let mut failure = None;
        tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() != Some(ObjectType::Blob) || entry.filemode() == 0o120_000 {
                return TreeWalkResult::Ok;
            }
            let Ok(name) = entry.name() else {
                return TreeWalkResult::Ok;
            };
            let path = format!("{dir}{name}");
            match f(&path, entry.id(), entry.filemode()) {
                Ok(()) => TreeWalkResult::Ok,
                Err(e) => {
                    failure = Some(e);
                    TreeWalkResult::Abort
                }
            }
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Runs `f` with an in-memory object store on top of this repository: objects written
    /// through the [`Staging`] live in memory until [`Staging::persist`] stores them (but
    /// [`Staging::write_content`] streams the rendered tree's objects into a pack on disk).
    pub fn staging<T, E: From<Error>>(&self, f: impl FnOnce(&Staging<'_>) -> Result<T, E>) -> Result<T, E> {
        // A separate handle, so that the in-memory backend never outlives this call.
        let git = Repository::open(self.git.path()).map_err(git_error("cannot open", &self.url))?;
        let odb = git
            .odb()
            .map_err(git_error("cannot open the cache of", &self.url))?;
        let mempack = odb
            .add_new_mempack_backend(1000)
            .map_err(git_error("cannot open the cache of", &self.url))?;
        let staging = Staging {
            git: &git,
            odb: &odb,
            mempack,
            url: &self.url,
            in_place: self.in_place,
            written: RefCell::new(Vec::new()),
            built: RefCell::new(Vec::new()),
        };
        f(&staging)
    }
}

/// Objects being prepared for a push, held in memory.
pub struct Staging<'r> {
    git: &'r Repository,
    odb: &'r git2::Odb<'r>,
    mempack: git2::Mempack<'r>,
    url: &'r RepoUrl,
    /// Whether the repository is read in place (no mirror: pushes go through libgit2).
    in_place: bool,
    /// The objects written so far (to be stored by [`Staging::persist`]).
    written: RefCell<Vec<Oid>>,
    /// The objects [`Staging::write_content`] stored, with their content, sorted by id,
    /// when the repository is a `file://` mirror: what a local push sends is taken from here
    /// rather than read back from the pack.
    built: RefCell<Vec<(ObjectType, Oid, Blob)>>,
}

impl std::fmt::Debug for Staging<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staging").field("url", self.url).finish()
    }
}

/// A folder being assembled into a git tree.
enum Node {
    File(Oid, i32),
    Dir(BTreeMap<String, Node>),
}

impl Staging<'_> {
    /// Writes `files` as a git tree, reusing the blobs of `base` whose content is unchanged
    /// (and their file modes); new or changed files get mode 100644.
    pub fn write_tree(&self, base: &Snapshot, files: &Tree) -> Result<Oid, Error> {
        let fail = git_error("cannot write a tree for", self.url);
        let mut root = BTreeMap::new();
        for (path, content) in files.iter() {
            let reused = base
                .files
                .get(path)
                .filter(|old| old[..] == content[..])
                .and_then(|_| base.entries.get(path).copied());
            let (oid, mode) = match reused {
                Some(entry) => entry,
                None => {
                    let oid = self
                        .git
                        .blob(content)
                        .map_err(git_error("cannot write a tree for", self.url))?;
                    self.written.borrow_mut().push(oid);
                    (oid, FILE_MODE)
                }
            };
            insert_node(&mut root, path, oid, mode).map_err(|reason| Error::InvalidPath {
                path: path.clone(),
                repo: self.url.redacted(),
                reason,
            })?;
        }
        self.write_dir(&root).map_err(fail)
    }

    /// Writes the tree of `content` put on top of tree `base` (the branch head's; `None` for
    /// a new branch) with the original's update rules, incrementally: only the folders whose
    /// files changed are read, hashed and written (see [`crate::treewrite`]). The new
    /// objects go straight into a pack in the repository (also in a dry run or when the
    /// push is then rejected: objects no reference names, which cost only their space).
    pub fn write_content(&self, base: Option<Oid>, content: &Hashed<'_>) -> Result<Written, Error> {
        let fail = git_error("cannot write a tree for", self.url);
        let built = crate::treewrite::build(self.git, base, content).map_err(|e| match e {
            crate::treewrite::BuildError::Git(e) => fail(e),
            crate::treewrite::BuildError::Conflict(path) => Error::InvalidPath {
                path,
                repo: self.url.redacted(),
                reason: "a file and a folder have the same path",
            },
            crate::treewrite::BuildError::Missing(path) => Error::NotDelivered {
                path,
                repo: self.url.redacted(),
            },
        })?;
        let fail = || git_error("cannot write a tree for", self.url);
        // Straight into a pack on disk, not through memory: the fleet's new objects are
        // not held a second time (they are stored before any reference names them, as
        // `push` needs anyway).
        crate::pack::store_pack(self.git, &built.objects).map_err(fail())?;
        debug_assert!(
            built.objects.iter().all(|(_, oid, _)| self.odb.exists(*oid)),
            "kalypso hashes objects as git does"
        );
        // Kept for a local push to send (see `pushed_locally`); libgit2's push reads them
        // back from the mirror.
        if self.url.local_path().is_some() && !self.in_place {
            let mut held = self.built.borrow_mut();
            held.extend(built.objects);
            held.sort_unstable_by_key(|(_, oid, _)| *oid);
            held.dedup_by_key(|(_, oid, _)| *oid);
        }
        let tree = match built.root {
            Some(root) => root,
            None => {
                let empty = self.odb.write(ObjectType::Tree, &[]).map_err(fail())?;
                self.written.borrow_mut().push(empty);
                empty
            }
        };
        Ok(Written {
            tree,
            added: built.added,
            modified: built.modified,
            deleted: built.deleted,
            folders: built.folders,
            promoted: built.promoted,
        })
    }

    fn write_dir(&self, dir: &BTreeMap<String, Node>) -> Result<Oid, git2::Error> {
        let mut builder = self.git.treebuilder(None)?;
        for (name, node) in dir {
            match node {
                Node::File(oid, mode) => builder.insert(name, *oid, *mode)?,
                Node::Dir(children) => {
                    let oid = self.write_dir(children)?;
                    builder.insert(name, oid, 0o040_000)?
                }
            };
        }
        let oid = builder.write()?;
        self.written.borrow_mut().push(oid);
        Ok(oid)
    }

    /// Creates a commit of `tree` on top of `parent` (no branch moves).
    pub fn commit(
        &self,
        tree: Oid,
        parent: Option<Oid>,
        author: &Author,
        message: &str,
    ) -> Result<Oid, Error> {
        let fail = || git_error("cannot write a commit for", self.url);
        let sig = Signature::now(&author.name, &author.email).map_err(fail())?;
        let tree = self.git.find_tree(tree).map_err(fail())?;
        let parent = parent
            .map(|p| self.git.find_commit(p))
            .transpose()
            .map_err(fail())?;
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        let commit = self
            .git
            .commit(None, &sig, &sig, message, &tree, &parents)
            .map_err(fail())?;
        self.written.borrow_mut().push(commit);
        Ok(commit)
    }

    /// The tree of a commit.
    pub fn tree_of(&self, commit: Oid) -> Result<Oid, Error> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), self.url))?;
        Ok(c.tree_id())
    }

    /// Pushes `updates` without forcing: a branch that moved since it was fetched is
    /// rejected ([`Error::Rejected`]) and the caller starts again from a fresh fetch.
    /// Transient network failures are retried (pushing the same update again is harmless).
    /// On success the mirror's branches are moved too. The new objects are stored in the
    /// mirror first, whether the push succeeds or not.
    pub fn push(&self, transport: &Transport<'_>, updates: &[RefUpdate]) -> Result<(), Error> {
        let span = tracing::debug_span!("push", repo = %self.url);
        let _enter = span.enter();
        // The new objects are stored before any reference of the mirror names them: a
        // process killed from here on leaves a usable mirror (objects no reference names at
        // worst), never a reference to an object it does not have.
        self.persist()?;
        if !self.pushed_locally(updates)? {
            self.push_with_libgit2(transport, updates)?;
        }
        for update in updates {
            let tracking = format!("{TRACKING}{}", update.branch);
            match update.target {
                Some(target) => {
                    self.git
                        .reference(&tracking, target, true, "kalypso push")
                        .map_err(git_error("cannot update the cache of", self.url))?;
                }
                None => {
                    if let Ok(mut r) = self.git.find_reference(&tracking) {
                        r.delete()
                            .map_err(git_error("cannot update the cache of", self.url))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Pushes to a bare repository on this machine by writing the new objects into it and
    /// moving its branches with a compare-and-swap ([`crate::local_push`]). `Ok(false)`:
    /// not such a push (a network remote, a deletion, a merge...), nothing done.
    fn pushed_locally(&self, updates: &[RefUpdate]) -> Result<bool, Error> {
        let Some(path) = self.url.local_path().filter(|_| !self.in_place) else {
            return Ok(false);
        };
        let targets: Option<Vec<(&str, Oid)>> = updates
            .iter()
            .map(|u| u.target.map(|t| (u.branch.as_str(), t)))
            .collect();
        let Some(targets) = targets else {
            return Ok(false);
        };
        match crate::local_push::push(self.git, path, &targets, &self.built.borrow()) {
            Ok(pushed) => Ok(pushed),
            Err(Failure::Refused { reference, message }) => Err(Error::Rejected {
                repo: self.url.redacted(),
                reference,
                message: redact(&message),
            }),
            Err(Failure::Locked { reference, message }) => Err(self.locked(&reference, &redact(&message))),
            Err(Failure::Git(e)) => Err(git_error("cannot push to", self.url)(e)),
        }
    }

    /// The error of a push that found `reference` locked.
    fn locked(&self, reference: &str, message: &str) -> Error {
        Error::Locked {
            repo: self.url.redacted(),
            detail: format!(
                "{reference}: it is locked ({message}); another process is writing it, or one was \
                 interrupted while writing it{}",
                match self.url.local_path() {
                    Some(path) => format!(
                        " (if no process is, remove {}.lock)",
                        path.join(reference).display()
                    ),
                    None => String::new(),
                }
            ),
            local: self.url.is_local(),
        }
    }

    /// Pushes through libgit2 (any transport), with retries of transient failures.
    fn push_with_libgit2(&self, transport: &Transport<'_>, updates: &[RefUpdate]) -> Result<(), Error> {
        let mut refspecs = Vec::new();
        let mut temp_refs = Vec::new();
        for (i, update) in updates.iter().enumerate() {
            match update.target {
                Some(target) => {
                    let temp = format!("refs/kalypso/push/{i}");
                    self.git
                        .reference(&temp, target, true, "kalypso push")
                        .map_err(git_error("cannot prepare a push to", self.url))?;
                    refspecs.push(format!("{temp}:refs/heads/{}", update.branch));
                    temp_refs.push(temp);
                }
                None => refspecs.push(format!(":refs/heads/{}", update.branch)),
            }
        }
        let result = transport.run(&|| format!("push to {}", self.url), || {
            let mut remote = self
                .git
                .remote_anonymous(self.url.for_git())
                .map_err(git_error("cannot push to", self.url))?;
            let rejected: RefCell<Vec<(String, String)>> = RefCell::new(Vec::new());
            let mut callbacks = transport.credentials.callbacks();
            callbacks.push_update_reference(|reference, status| {
                if let Some(message) = status {
                    rejected
                        .borrow_mut()
                        .push((reference.to_owned(), redact(message)));
                }
                Ok(())
            });
            let mut options = PushOptions::new();
            options.remote_callbacks(callbacks).proxy_options(auto_proxy());
            let pushed = remote.push(&refspecs, Some(&mut options));
            drop(options);
            match pushed {
                Ok(()) => match rejected.into_inner().into_iter().next() {
                    Some((reference, message)) if message.contains("lock") => {
                        Err(self.locked(&reference, &message))
                    }
                    Some((reference, message)) => Err(Error::Rejected {
                        repo: self.url.redacted(),
                        reference,
                        message,
                    }),
                    None => Ok(()),
                },
                Err(e) => {
                    let cause = GitCause::from(e);
                    if cause.is_rejection() {
                        Err(Error::Rejected {
                            repo: self.url.redacted(),
                            reference: updates
                                .iter()
                                .map(|u| u.branch.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            message: cause.message,
                        })
                    } else {
                        Err(Error::Git {
                            action: "cannot push to".to_owned(),
                            repo: self.url.redacted(),
                            cause,
                        })
                    }
                }
            }
        });
        for temp in temp_refs {
            if let Ok(mut r) = self.git.find_reference(&temp) {
                let _ = r.delete();
            }
        }
        result
    }

    /// Moves local branch `branch` from `expected` to `target` (a repository read in place),
    /// persisting the objects first. Fails with [`Error::Rejected`] if the branch moved
    /// meanwhile. A branch that only exists as `refs/remotes/origin/<branch>` is created.
    pub fn update_local_branch(&self, branch: &str, target: Oid, expected: Oid) -> Result<(), Error> {
        self.persist()?;
        let name = format!("refs/heads/{branch}");
        let message = "kalypso promote";
        let result = match self.git.find_reference(&name) {
            Ok(_) => self
                .git
                .reference_matching(&name, target, true, expected, message),
            Err(_) => self.git.reference(&name, target, false, message),
        };
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::Modified | ErrorCode::Exists | ErrorCode::Locked
                ) =>
            {
                Err(Error::Rejected {
                    repo: self.url.redacted(),
                    reference: name,
                    message: redact(e.message()),
                })
            }
            Err(e) => Err(git_error(format!("cannot update branch {branch} of"), self.url)(
                e,
            )),
        }
    }

    /// Stores the objects written so far in the repository, as one pack of those objects
    /// alone (not of every object their commits reach, as libgit2's mempack dump would),
    /// written by kalypso's own pack writer as the rendered tree's objects are.
    pub fn persist(&self) -> Result<(), Error> {
        let mut written = self.written.borrow_mut();
        if written.is_empty() {
            return Ok(());
        }
        let fail = || git_error("cannot store objects in the cache of", self.url);
        written.sort_unstable();
        written.dedup();
        let count = u32::try_from(written.len())
            .map_err(|_| fail()(git2::Error::from_str("too many objects for one pack")))?;
        let mut pack = crate::pack::PackStream::new(self.git, count).map_err(fail())?;
        for oid in written.iter() {
            let object = self.odb.read(*oid).map_err(fail())?;
            pack.put(object.kind(), *oid, object.data()).map_err(fail())?;
        }
        pack.finish().map_err(fail())?;
        self.mempack.reset().map_err(fail())?;
        written.clear();
        Ok(())
    }
}

/// Branch names (without `refs/heads/`) and their heads.
pub type Heads = BTreeMap<String, Oid>;

/// The branches of each repository in `urls` with their heads, as `git ls-remote --heads`
/// shows them: one connection per remote and no object transferred, `parallel` remotes at a
/// time. A plain local path is read in place (its local branches over its remote-tracking
/// ones, as [`Repo::branch`] reads them). One attempt each: a failure is returned for that
/// repository alone.
pub fn list_heads(urls: &[RepoUrl], credentials: &Credentials, parallel: usize) -> Vec<Result<Heads, Error>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Heads, Error>>>> =
        urls.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let workers = parallel.clamp(1, urls.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(url) = urls.get(i) else { break };
                    let listed = list_one(url, credentials);
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(listed);
                    }
                }
            });
        }
    });
    results
        .into_iter()
        .zip(urls)
        .map(|(slot, url)| {
            slot.into_inner().ok().flatten().unwrap_or_else(|| {
                Err(Error::NotFound {
                    what: "the branch listing".to_owned(),
                    repo: url.redacted(),
                })
            })
        })
        .collect()
}

fn list_one(url: &RepoUrl, credentials: &Credentials) -> Result<Heads, Error> {
    let fail = || git_error("cannot list the branches of", url);
    let mut heads = BTreeMap::new();
    if let Some(path) = url.plain_path() {
        let git = Repository::open(path).map_err(fail())?;
        for (glob, strip) in [
            (format!("{TRACKING}*"), TRACKING),
            ("refs/heads/*".to_owned(), "refs/heads/"),
        ] {
            for r in git.references_glob(&glob).map_err(fail())? {
                let r = r.map_err(fail())?;
                if let (Ok(name), Ok(commit)) = (r.name(), r.peel_to_commit()) {
                    heads.insert(name.trim_start_matches(strip).to_owned(), commit.id());
                }
            }
        }
        return Ok(heads);
    }
    let mut remote = git2::Remote::create_detached(url.for_git()).map_err(fail())?;
    let connection = remote
        .connect_auth(
            git2::Direction::Fetch,
            Some(credentials.callbacks()),
            Some(auto_proxy()),
        )
        .map_err(fail())?;
    for head in connection.list().map_err(fail())? {
        if let Some(branch) = head.name().strip_prefix("refs/heads/") {
            heads.insert(branch.to_owned(), head.oid());
        }
    }
    Ok(heads)
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

fn insert_node(
    root: &mut BTreeMap<String, Node>,
    path: &str,
    oid: Oid,
    mode: i32,
) -> Result<(), &'static str> {
    let mut segments: Vec<&str> = path.split('/').collect();
    let Some(name) = segments.pop() else {
        return Err("empty path");
    };
    if name.is_empty() || segments.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return Err("not a normalized relative path");
    }
    let mut dir = root;
    for segment in segments {
        let node = dir
            .entry(segment.to_owned())
            .or_insert_with(|| Node::Dir(BTreeMap::new()));
        dir = match node {
            Node::Dir(children) => children,
            Node::File(..) => return Err("a file and a folder have the same path"),
        };
    }
    if dir.insert(name.to_owned(), Node::File(oid, mode)).is_some() {
        return Err("a file and a folder have the same path");
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

/// A tree written by [`Staging::write_content`], and what it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The tree.
    pub tree: Oid,
    /// Files added.
    pub added: usize,
    /// Files whose content changed.
    pub modified: usize,
    /// Files deleted.
    pub deleted: usize,
    /// The top-level folders (cluster types) with a changed file.
    pub folders: BTreeSet<String>,
    /// Whether `Promoted_Commit_Id` is written.
    pub promoted: bool,
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
    fn a_missing_local_repository_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::parse(&format!("file://{}/missing.git", dir.path().display())).unwrap();
        let repo = Repo::open_mirror(&url, &Cache::new(dir.path().join("cache"))).unwrap();
        let credentials = Credentials::default();
        let retry = RetryPolicy {
            attempts: 5,
            initial_backoff: std::time::Duration::from_secs(30),
            max_backoff: std::time::Duration::from_secs(30),
        };
        let error = repo.fetch_all(&Transport::new(&credentials, retry)).unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("missing.git"), "{error}");
    }

    #[test]
    fn writes_and_reads_back_trees_with_reused_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::from_path(&dir.path().join("remote.git"));
        let repo = Repo::open_mirror(&url, &Cache::new(dir.path().join("cache"))).unwrap();
        let files: Tree = [
            ("a.txt".to_owned(), Blob::from(&b"a"[..])),
            ("d/e/f.yaml".to_owned(), Blob::from(&b"f"[..])),
        ]
        .into_iter()
        .collect();
        let author = Author {
            name: "t".into(),
            email: "t@e".into(),
        };
        let (tree, commit) = repo
            .staging(|s| -> Result<_, Error> {
                let tree = s.write_tree(&Snapshot::default(), &files)?;
                let commit = s.commit(tree, None, &author, "m")?;
                s.persist()?;
                Ok((tree, commit))
            })
            .unwrap();
        let snapshot = repo.snapshot(Some(commit)).unwrap();
        assert_eq!(snapshot.files, files);
        assert_eq!(snapshot.tree_id, Some(tree));
        // Writing the same files again reuses everything and gives the same tree.
        let again = repo
            .staging(|s| -> Result<_, Error> { s.write_tree(&snapshot, &files) })
            .unwrap();
        assert_eq!(again, tree);
        let source = repo.source_tree(commit, "./d/", "x").unwrap();
        assert_eq!(source.files().len(), 1);
        assert_eq!(source.files()[0].path, "e/f.yaml");
        assert!(matches!(
            repo.source_tree(commit, "missing", "x"),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn stores_packs_without_deltas() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::from_path(&dir.path().join("remote.git"));
        let cache = Cache::new(dir.path().join("cache"));
        let repo = Repo::open_mirror(&url, &cache).unwrap();
        // Two large, nearly identical files: libgit2 would store one as a delta of the other.
        let text: String = (0..200).map(|i| format!("key{i}: value{i}\n")).collect();
        let files: Tree = [
            ("a.yaml".to_owned(), Blob::from(text.as_bytes())),
            (
                "b.yaml".to_owned(),
                Blob::from(format!("{text}x: y\n").as_bytes()),
            ),
        ]
        .into_iter()
        .collect();
        repo.staging(|s| -> Result<_, Error> {
            s.write_tree(&Snapshot::default(), &files)?;
            s.persist()
        })
        .unwrap();
        let objects = kalypso_testkit::git(
            &dir.path().join("cache").join(url.cache_name()),
            &[
                "cat-file",
                "--batch-all-objects",
                "--batch-check=%(objecttype) %(deltabase)",
            ],
        );
        let lines: Vec<&str> = objects.lines().collect();
        assert_eq!(lines.len(), 3, "{objects}");
        assert!(
            lines.iter().all(|l| l.ends_with(&Oid::ZERO_SHA1.to_string())),
            "no object is stored as a delta: {objects}"
        );
    }

    /// Objects in the packs of the repository at `git_dir` (a mirror keeps no loose ones).
    fn packed_objects(git_dir: &Path) -> usize {
        let count = kalypso_testkit::git(git_dir, &["count-objects", "-v"]);
        count
            .lines()
            .find_map(|l| l.strip_prefix("in-pack: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no in-pack count in {count}"))
    }

    #[test]
    fn a_moved_branch_fetches_only_what_is_new_and_a_deleted_one_is_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let (work, remote) = (dir.path().join("work"), dir.path().join("remote.git"));
        std::fs::create_dir_all(work.join("files")).unwrap();
        kalypso_testkit::git(dir.path(), &["init", "-q", "--bare", "remote.git"]);
        kalypso_testkit::git(dir.path(), &["init", "-q", "work"]);
        for i in 0..40 {
            std::fs::write(work.join(format!("files/{i}.yaml")), format!("n: {i}\n")).unwrap();
        }
        let remote_path = remote.display().to_string();
        for args in [
            &["add", "-A"][..],
            &["commit", "-qm", "first"],
            &[
                "push",
                "-q",
                &remote_path,
                "HEAD:refs/heads/dev",
                "HEAD:refs/heads/gone",
            ],
        ] {
            kalypso_testkit::git(&work, args);
        }
        let url = RepoUrl::from_path(&remote);
        let cache = Cache::new(dir.path().join("cache"));
        let repo = Repo::open_mirror(&url, &cache).unwrap();
        let credentials = Credentials::default();
        let transport = Transport::new(&credentials, RetryPolicy::default());
        repo.fetch_branches(&transport, &["dev", "gone"], &[]).unwrap();
        let mirror = dir.path().join("cache").join(url.cache_name());
        let first = packed_objects(&mirror);
        assert!(first >= 42, "the first fetch brings every file: {first}");

        // One file changes: the next fetch brings its blob, two trees and the commit, not
        // the branch's whole history again (the mirror's copy is offered as what it has).
        std::fs::write(work.join("files/7.yaml"), "n: changed\n").unwrap();
        kalypso_testkit::git(&work, &["commit", "-qam", "second"]);
        kalypso_testkit::git(&work, &["push", "-q", &remote_path, "HEAD:refs/heads/dev"]);
        kalypso_testkit::git(&remote, &["branch", "-D", "gone"]);
        repo.fetch_branches(&transport, &["dev", "gone"], &[]).unwrap();
        let new = packed_objects(&mirror) - first;
        assert_eq!(new, 4, "a commit, two trees and a blob");
        let head = kalypso_testkit::git(&remote, &["rev-parse", "dev"]);
        assert_eq!(
            repo.branch("dev").unwrap().map(|o| o.to_string()),
            Some(head.trim().to_owned())
        );
        assert_eq!(
            repo.branch("gone").unwrap(),
            None,
            "a branch the remote deleted is gone"
        );
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

    #[test]
    fn refuses_conflicting_paths() {
        let mut root = BTreeMap::new();
        insert_node(&mut root, "a/b", Oid::ZERO_SHA1, FILE_MODE).unwrap();
        assert!(insert_node(&mut root, "a", Oid::ZERO_SHA1, FILE_MODE).is_err());
        assert!(insert_node(&mut root, "a/b/c", Oid::ZERO_SHA1, FILE_MODE).is_err());
        assert!(insert_node(&mut root, "x/../y", Oid::ZERO_SHA1, FILE_MODE).is_err());
    }
}
