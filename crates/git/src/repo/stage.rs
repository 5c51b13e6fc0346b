//! New objects: trees and commits written through a [`Staging`], the rendered tree's objects
//! streamed into a pack in the cache, and everything stored before a push names it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use git2::{ObjectType, Oid, Repository, Signature};
use kalypso_core::tree::{Blob, Tree};

use super::{Author, Error, FILE_MODE, GitFailure, OpenError, Repo, Snapshot, git_error};
use crate::treewrite::Hashed;
use crate::url::RepoUrl;

/// Writing new objects failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// libgit2 could not write or store an object.
    #[error(transparent)]
    Git(#[from] GitFailure),
    /// A path is not usable inside a tree.
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

impl StageError {
    /// Whether retrying may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, StageError::Git(g) if g.is_transient())
    }
}

impl Repo {
    /// Runs `f` with an in-memory object store on top of this repository: objects written
    /// through the [`Staging`] live in memory until [`Staging::persist`] stores them (but
    /// [`Staging::write_content`] streams the rendered tree's objects into a pack on disk).
    pub fn staging<T, E: From<Error>>(&self, f: impl FnOnce(&Staging<'_>) -> Result<T, E>) -> Result<T, E> {
        // A separate handle, so that the in-memory backend never outlives this call.
        let opened = |action| {
            let url = &self.url;
            move |e| E::from(Error::Open(OpenError::Git(git_error(action, url)(e))))
        };
        let git = Repository::open(self.git.path()).map_err(opened("cannot open"))?;
        let odb = git.odb().map_err(opened("cannot open the cache of"))?;
        let mempack = odb
            .add_new_mempack_backend(1000)
            .map_err(opened("cannot open the cache of"))?;
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
    pub(super) git: &'r Repository,
    odb: &'r git2::Odb<'r>,
    mempack: git2::Mempack<'r>,
    pub(super) url: &'r RepoUrl,
    /// Whether the repository is read in place (no mirror: pushes go through libgit2).
    pub(super) in_place: bool,
    /// The objects written so far (to be stored by [`Staging::persist`]).
    written: RefCell<Vec<Oid>>,
    /// The objects [`Staging::write_content`] stored, with their content, sorted by id,
    /// when the repository is a `file://` mirror: what a local push sends is taken from here
    /// rather than read back from the pack.
    pub(super) built: RefCell<Vec<(ObjectType, Oid, Blob)>>,
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
    pub fn write_tree(&self, base: &Snapshot, files: &Tree) -> Result<Oid, StageError> {
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
            insert_node(&mut root, path, oid, mode).map_err(|reason| StageError::InvalidPath {
                path: path.clone(),
                repo: self.url.redacted(),
                reason,
            })?;
        }
        Ok(self.write_dir(&root).map_err(fail)?)
    }

    /// Writes the tree of `content` put on top of tree `base` (the branch head's; `None` for
    /// a new branch) with the original's update rules, incrementally: only the folders whose
    /// files changed are read, hashed and written (see [`crate::treewrite`]). The new
    /// objects go straight into a pack in the repository (also in a dry run or when the
    /// push is then rejected: objects no reference names, which cost only their space).
    pub fn write_content(&self, base: Option<Oid>, content: &Hashed<'_>) -> Result<Written, StageError> {
        let fail = git_error("cannot write a tree for", self.url);
        let built = crate::treewrite::build(self.git, base, content).map_err(|e| match e {
            crate::treewrite::BuildError::Git(e) => StageError::Git(fail(e)),
            crate::treewrite::BuildError::Conflict(path) => StageError::InvalidPath {
                path,
                repo: self.url.redacted(),
                reason: "a file and a folder have the same path",
            },
            crate::treewrite::BuildError::Missing(path) => StageError::NotDelivered {
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
    ) -> Result<Oid, StageError> {
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
    pub fn tree_of(&self, commit: Oid) -> Result<Oid, StageError> {
        let c = self
            .git
            .find_commit(commit)
            .map_err(git_error(format!("cannot read commit {commit} of"), self.url))?;
        Ok(c.tree_id())
    }

    /// Stores the objects written so far in the repository, as one pack of those objects
    /// alone (not of every object their commits reach, as libgit2's mempack dump would),
    /// written by kalypso's own pack writer as the rendered tree's objects are.
    pub fn persist(&self) -> Result<(), StageError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::Cache;

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
            .staging(|s| -> Result<_, Error> { Ok(s.write_tree(&snapshot, &files)?) })
            .unwrap();
        assert_eq!(again, tree);
        let source = repo.source_tree(commit, "./d/", "x").unwrap();
        assert_eq!(source.files().len(), 1);
        assert_eq!(source.files()[0].path, "e/f.yaml");
        assert!(matches!(
            repo.source_tree(commit, "missing", "x"),
            Err(crate::repo::ReadError::NotFound { .. })
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
            Ok(s.persist()?)
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

    #[test]
    fn refuses_conflicting_paths() {
        let mut root = BTreeMap::new();
        insert_node(&mut root, "a/b", Oid::ZERO_SHA1, FILE_MODE).unwrap();
        assert!(insert_node(&mut root, "a", Oid::ZERO_SHA1, FILE_MODE).is_err());
        assert!(insert_node(&mut root, "a/b/c", Oid::ZERO_SHA1, FILE_MODE).is_err());
        assert!(insert_node(&mut root, "x/../y", Oid::ZERO_SHA1, FILE_MODE).is_err());
    }
}
