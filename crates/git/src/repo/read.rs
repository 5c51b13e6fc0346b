//! Reading a repository: branches, commits, source trees, files and whole GitOps trees,
//! straight from git objects.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use git2::{ErrorCode, ObjectType, Oid, TreeWalkMode, TreeWalkResult};
use kalypso_core::placement::{CurrentAssignment, add_folder};
use kalypso_core::source::{SOURCEIGNORE, SourceFile, SourceTree};
use kalypso_core::tree::{Blob, Tree};

use super::{GitFailure, Repo, TRACKING, git_error, normalize_path};

/// Reading failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// libgit2 could not read an object or a reference.
    #[error(transparent)]
    Git(#[from] GitFailure),
    /// A revision or a path does not exist.
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
}

impl ReadError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, ReadError::Git(g) if g.is_transient())
    }
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
    pub(super) entries: HashMap<String, (Oid, i32)>,
}

impl Repo {
    /// The head of `branch`, if the branch exists. In place: the local branch, else the
    /// remote-tracking one; in a mirror: the fetched one.
    pub fn branch(&self, branch: &str) -> Result<Option<Oid>, ReadError> {
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
                Err(e) => {
                    return Err(git_error(format!("cannot read branch {branch} of"), &self.url)(e).into());
                }
            }
        }
        Ok(None)
    }

    /// Branches under `prefix` (names without `refs/heads/`), with their heads.
    pub fn branches_under(&self, prefix: &str) -> Result<BTreeMap<String, Oid>, ReadError> {
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
    pub fn find_commit(&self, rev: &str) -> Result<Oid, ReadError> {
        let not_found = || ReadError::NotFound {
            what: format!("commit {rev}"),
            repo: self.url.redacted(),
        };
        if rev.len() < 4 || rev.len() > 40 || !rev.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(not_found());
        }
        match self.git.find_commit_by_prefix(rev) {
            Ok(c) => Ok(c.id()),
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::Ambiguous) => Err(not_found()),
            Err(e) => Err(git_error(format!("cannot read commit {rev} of"), &self.url)(e).into()),
        }
    }

    /// Whether `commit` is `ancestor` or one of its descendants.
    pub fn descends_from(&self, commit: Oid, ancestor: Oid) -> Result<bool, ReadError> {
        if commit == ancestor {
            return Ok(true);
        }
        Ok(self
            .git
            .graph_descendant_of(commit, ancestor)
            .map_err(git_error("cannot walk the history of", &self.url))?)
    }

    /// The tree id of `commit`.
    pub fn tree_of(&self, commit: Oid) -> Result<Oid, ReadError> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.tree_id())
    }

    /// When `commit` was made: its committer time, Unix seconds.
    pub fn commit_time(&self, commit: Oid) -> Result<i64, ReadError> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.committer().when().seconds())
    }

    /// The first parent of `commit`.
    pub fn parent_of(&self, commit: Oid) -> Result<Option<Oid>, ReadError> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), &self.url))?;
        Ok(c.parent_ids().next())
    }

    /// The YAML files (and `.sourceignore` files) under `path` at `commit`, with `path`
    /// stripped, as a source tree shown as `label`. Only these files matter to the
    /// pipeline, so nothing else is read.
    pub fn source_tree(&self, commit: Oid, path: &str, label: &str) -> Result<SourceTree, ReadError> {
        let path = normalize_path(path).map_err(|reason| ReadError::InvalidPath {
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
    pub fn read_file(&self, commit: Oid, path: &str) -> Result<Option<Vec<u8>>, ReadError> {
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

    /// Where the GitOps tree of `commit` has each deployment target: its folders two levels
    /// deep (cluster type, deployment target), without reading any file. Dot-folders are left
    /// out.
    pub fn target_folders(&self, commit: Oid) -> Result<CurrentAssignment, ReadError> {
        let root = self.subtree(commit, "")?;
        let mut current = CurrentAssignment::new();
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
                    add_folder(&mut current, first, second);
                }
            }
        }
        Ok(current)
    }

    /// Every file of `commit` (`None`: an empty tree).
    pub fn snapshot(&self, commit: Option<Oid>) -> Result<Snapshot, ReadError> {
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

    fn subtree(&self, commit: Oid, path: &str) -> Result<git2::Tree<'_>, ReadError> {
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
        let not_found = || ReadError::NotFound {
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
}
