//! The GitOps commit's tree built incrementally from the previous commit's tree.
//!
//! A fleet's GitOps tree has hundreds of thousands of files. Reading them all back from the
//! branch (or checking them out) to find the few that changed costs more than rendering them,
//! so this module never reads a file of the previous tree. Instead every rendered file and
//! folder is hashed as git hashes objects (SHA-1, in parallel, one task per cluster type),
//! and a folder whose id equals the previous tree's entry is taken over unread. Only the
//! folders whose ids differ are read (their tree objects, not their files) and merged with
//! the original's update rules ([`kalypso_core::tree::Rules`], the rules
//! [`kalypso_core::tree::apply`] applies to whole file lists): root files and dot-folders
//! kept, folders of cluster types and targets no longer scheduled deleted, stale files inside
//! scheduled target folders kept, a `README.md` per cluster type, `Promoted_Commit_Id` when
//! the promoted commit changes. The result is the tree `apply` gives, and only its new
//! objects are written.
//!
//! The rendered content is hashed once per run ([`Hashed`]) and put on each GitOps branch
//! (`build`, through [`crate::repo::Staging::write_content`]). Assignments a run did not
//! render ([`RepoContent::delivered`]) enter by the ids of their files, remembered from the
//! delivery that wrote them ([`crate::delivered`]): their content is never read, and is
//! only looked for in the repository when the branch no longer has it where it belongs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use git2::{ObjectType, Oid, Repository};
use kalypso_core::tree::{
    Blob, PROMOTED_COMMIT_PATH, README, RepoContent, Rules, TRACKING_DIR, promotes, readme,
};
use rayon::prelude::*;
use sha1::{Digest, Sha1};

/// The mode of regular files.
const FILE_MODE: i32 = 0o100_644;
/// The mode of folders.
const DIR_MODE: i32 = 0o040_000;

/// The outcome of [`build`].
#[derive(Debug)]
pub(crate) struct Built {
    /// The new root tree (`None`: no file at all).
    pub root: Option<Oid>,
    /// Files added, changed and deleted.
    pub added: usize,
    /// Changed files.
    pub modified: usize,
    /// Deleted files.
    pub deleted: usize,
    /// The top-level folders with a change (cluster types, mostly).
    pub folders: BTreeSet<String>,
    /// Whether `Promoted_Commit_Id` is written.
    pub promoted: bool,
    /// New objects to store: (kind, id, content).
    pub objects: Vec<(ObjectType, Oid, Blob)>,
}

/// The git ids of an assignment's files, by file name.
pub type FileIds = Box<[(&'static str, Oid)]>;

/// Where [`Hashed::new`] finds the file ids of an assignment delivered before, by cluster
/// type and deployment target.
pub type DeliveredLookup<'c> = dyn Fn(&str, &str) -> Option<&'c [(&'static str, Oid)]> + Sync + 'c;

/// A file or folder of the rendered content, with its git id.
#[derive(Clone, Debug)]
enum Node {
    /// A file, with its content when this run rendered it (`None`: a file delivered before,
    /// whose content the repository has).
    File(Oid, Option<Blob>),
    Dir(Arc<Dir>),
}

/// A folder of the rendered content: its entries and the id of the tree they form alone.
#[derive(Debug)]
struct Dir {
    oid: Oid,
    entries: Entries,
}

/// The entries of a folder, sorted by name: a vector rather than a map, since a fleet has a
/// folder of three files per assignment (a map's smallest node holds eleven).
#[derive(Debug, Default)]
struct Entries(Vec<(String, Node)>);

impl Entries {
    fn get(&self, name: &str) -> Option<&Node> {
        self.0
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    fn iter(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.0.iter().map(|(name, node)| (name, node))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The id git gives an object.
fn object_id(kind: &str, content: &[u8]) -> Oid {
    let mut h = Sha1::new();
    h.update(kind.as_bytes());
    h.update(b" ");
    h.update(content.len().to_string().as_bytes());
    h.update([0]);
    h.update(content);
    let digest = h.finalize();
    Oid::from_bytes(&digest).unwrap_or(Oid::ZERO_SHA1)
}

/// A tree object's content: entries in git's order (a folder sorts as if its name ended
/// with `/`).
fn tree_content(entries: &mut [(&str, i32, Oid)]) -> Vec<u8> {
    entries.sort_unstable_by(|(a, a_mode, _), (b, b_mode, _)| git_order(a, *a_mode, b, *b_mode));
    let mut out = Vec::with_capacity(entries.len() * 48);
    for (name, mode, oid) in entries.iter() {
        match *mode {
            FILE_MODE => out.extend_from_slice(b"100644"),
            DIR_MODE => out.extend_from_slice(b"40000"),
            other => out.extend_from_slice(format!("{other:o}").as_bytes()),
        }
        out.push(b' ');
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(oid.as_bytes());
    }
    out
}

/// Git's order of tree entries: by name, a folder's name compared as if it ended with `/`.
fn git_order(a: &str, a_mode: i32, b: &str, b_mode: i32) -> std::cmp::Ordering {
    let common = a.len().min(b.len());
    match a.as_bytes()[..common].cmp(&b.as_bytes()[..common]) {
        std::cmp::Ordering::Equal => {}
        other => return other,
    }
    let next = |name: &str, mode: i32| match name.as_bytes().get(common) {
        Some(byte) => Some(*byte),
        None if mode == DIR_MODE => Some(b'/'),
        None => None,
    };
    next(a, a_mode).cmp(&next(b, b_mode))
}

impl Dir {
    /// The folder of `entries` (names unique).
    fn new(mut entries: Vec<(String, Node)>) -> Dir {
        entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        entries.shrink_to_fit();
        let mut list: Vec<(&str, i32, Oid)> = entries
            .iter()
            .map(|(name, node)| match node {
                Node::File(oid, _) => (name.as_str(), FILE_MODE, *oid),
                Node::Dir(d) => (name.as_str(), DIR_MODE, d.oid),
            })
            .collect();
        let oid = object_id("tree", &tree_content(&mut list));
        Dir {
            oid,
            entries: Entries(entries),
        }
    }
}

fn file(content: &Blob) -> Node {
    Node::File(object_id("blob", content), Some(content.clone()))
}

/// An assignment the run did not render has no remembered files.
#[derive(Debug)]
pub struct UnknownFiles {
    /// The assignment: (cluster type, deployment target).
    pub assignment: (String, String),
}

/// A run's rendered content as git objects, hashed once and put on any number of branches
/// (see [`crate::repo::Staging::write_content`]): a folder per cluster type with a folder
/// per deployment target and a `README.md`.
#[derive(Debug)]
pub struct Hashed<'c> {
    content: &'c RepoContent,
    /// The cluster types' folders as git trees (`None`: hashed for artifacts only, see
    /// [`Hashed::files_only`]).
    folders: Option<BTreeMap<String, Node>>,
    /// The file ids of the packages this run rendered.
    rendered: Vec<((String, String), FileIds)>,
}

impl<'c> Hashed<'c> {
    /// Hashes `content` (in parallel, one task per cluster type). The assignments in
    /// `content.delivered` take the file ids `delivered` gives for them.
    pub fn new(
        content: &'c RepoContent,
        delivered: &DeliveredLookup<'c>,
    ) -> Result<Hashed<'c>, UnknownFiles> {
        Hashed::hash(content, delivered, true)
    }

    /// [`Hashed::new`] for a delivery that puts the content on no branch (OCI artifacts
    /// only, which lay out their files themselves): the rendered files' ids, and the same
    /// check that every assignment not rendered again has remembered files, but no git tree
    /// of the environment's 93,000 folders. Such content cannot be written to a branch.
    pub fn files_only(
        content: &'c RepoContent,
        delivered: &DeliveredLookup<'c>,
    ) -> Result<Hashed<'c>, UnknownFiles> {
        Hashed::hash(content, delivered, false)
    }

    fn hash(
        content: &'c RepoContent,
        delivered: &DeliveredLookup<'c>,
        trees: bool,
    ) -> Result<Hashed<'c>, UnknownFiles> {
        let mut cluster_types: BTreeSet<&str> = content.cluster_types.iter().map(String::as_str).collect();
        cluster_types.extend(content.packages.keys().map(|(ct, _)| ct.as_str()));
        cluster_types.extend(content.delivered.iter().map(|(ct, _)| ct.as_str()));
        let readme = readme();
        let readme_id = object_id("blob", &readme);
        type Folder = (String, Node, Vec<((String, String), FileIds)>);
        let folders: Vec<Result<Folder, UnknownFiles>> = cluster_types
            .into_par_iter()
            .map(|ct| {
                let mut entries = Vec::new();
                let mut rendered = Vec::new();
                let in_ct = |key: &(String, String)| key.0 == ct;
                let start = (ct.to_owned(), String::new());
                for ((_, dt), package) in content
                    .packages
                    .range(start.clone()..)
                    .take_while(|(k, _)| in_ct(k))
                {
                    let ids: FileIds = package
                        .files()
                        .map(|(name, blob)| (name, object_id("blob", blob)))
                        .collect();
                    if !trees {
                        rendered.push(((ct.to_owned(), dt.clone()), ids));
                        continue;
                    }
                    let files: Vec<(String, Node)> = package
                        .files()
                        .zip(ids.iter())
                        .map(|((name, blob), (_, oid))| {
                            (name.to_owned(), Node::File(*oid, Some(blob.clone())))
                        })
                        .collect();
                    rendered.push(((ct.to_owned(), dt.clone()), ids));
                    entries.push((dt.clone(), Node::Dir(Arc::new(Dir::new(files)))));
                }
                for (_, dt) in content.delivered.range(start..).take_while(|k| in_ct(k)) {
                    let ids = delivered(ct, dt).ok_or_else(|| UnknownFiles {
                        assignment: (ct.to_owned(), dt.clone()),
                    })?;
                    if !trees {
                        continue;
                    }
                    let files = ids
                        .iter()
                        .map(|(name, oid)| ((*name).to_owned(), Node::File(*oid, None)))
                        .collect();
                    entries.push((dt.clone(), Node::Dir(Arc::new(Dir::new(files)))));
                }
                if content.cluster_types.contains(ct) {
                    entries.push((README.to_owned(), Node::File(readme_id, Some(readme.clone()))));
                }
                Ok((ct.to_owned(), Node::Dir(Arc::new(Dir::new(entries))), rendered))
            })
            .collect();
        let mut hashed = Hashed {
            content,
            folders: trees.then(BTreeMap::new),
            rendered: Vec::new(),
        };
        for folder in folders {
            let (ct, node, rendered) = folder?;
            if let Some(folders) = &mut hashed.folders {
                folders.insert(ct, node);
            }
            hashed.rendered.extend(rendered);
        }
        Ok(hashed)
    }

    /// The content hashed.
    pub fn content(&self) -> &'c RepoContent {
        self.content
    }

    /// The file ids of the packages this run rendered: ((cluster type, deployment target), ids).
    pub fn rendered(&self) -> &[((String, String), FileIds)] {
        &self.rendered
    }

    /// The whole tree of the rendered content with, when `promoted` is given,
    /// `Promoted_Commit_Id`, and the content's other tracking files (a rollout's state).
    ///
    /// # Panics
    /// For content hashed with [`Hashed::files_only`], which has no trees: a caller that
    /// puts content on a branch hashes it with [`Hashed::new`].
    fn root(&self, promoted: Option<&Blob>) -> Dir {
        let mut root = self
            .folders
            .clone()
            .expect("content hashed for artifacts only is put on no branch");
        let mut tracking: Vec<(String, Node)> = self
            .content
            .tracking
            .iter()
            .map(|(name, blob)| (name.clone(), file(blob)))
            .collect();
        if let Some(blob) = promoted {
            let name = PROMOTED_COMMIT_PATH
                .rsplit('/')
                .next()
                .unwrap_or(PROMOTED_COMMIT_PATH);
            tracking.push((name.to_owned(), file(blob)));
        }
        if !tracking.is_empty() {
            tracking.sort_by(|a, b| a.0.cmp(&b.0));
            let mut segments: Vec<&str> = TRACKING_DIR.split('/').collect();
            let mut node = Node::Dir(Arc::new(Dir::new(tracking)));
            while let Some(segment) = segments.pop() {
                if segments.is_empty() {
                    // A cluster type cannot be named like a dot-folder: no clash at the root.
                    root.insert(segment.to_owned(), node);
                    break;
                }
                node = Node::Dir(Arc::new(Dir::new(vec![(segment.to_owned(), node)])));
            }
        }
        Dir::new(root.into_iter().collect())
    }
}

/// Which files under a folder survive the update rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keep {
    All,
    None,
    /// Decided file by file ([`Rules::keeps`]).
    Some,
}

/// What the rules keep under folder `path` (its `/`-separated segments): the folder-level
/// form of [`Rules::keeps`].
fn keep_under(rules: &Rules<'_>, segments: &[&str]) -> Keep {
    match segments {
        [first, ..] if first.starts_with('.') => Keep::All,
        [ct] if rules.holds(ct) => Keep::All,
        [ct] if rules.is_cluster_type(ct) => Keep::Some,
        [_] => Keep::None,
        [ct, target] if rules.keeps_folder(ct, target) => Keep::All,
        [_, _] => Keep::None,
        _ => Keep::All,
    }
}

/// Why a tree cannot be built.
#[derive(Debug)]
pub(crate) enum BuildError {
    Git(git2::Error),
    /// A path in the tree names a file and a folder at once.
    Conflict(String),
    /// A file delivered before (known by its id only) is not in the repository.
    Missing(String),
}

impl From<git2::Error> for BuildError {
    fn from(e: git2::Error) -> BuildError {
        BuildError::Git(e)
    }
}

struct Merge<'a> {
    repo: &'a Repository,
    odb: git2::Odb<'a>,
    rules: Rules<'a>,
    built: Built,
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}/{name}")
    }
}

fn top(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

impl Merge<'_> {
    /// Notes a change of the file at `path` (its top-level folder, if it has one).
    fn changed(&mut self, path: &str) {
        if path.contains('/') && !self.built.folders.contains(top(path)) {
            self.built.folders.insert(top(path).to_owned());
        }
    }

    /// Every object of `dir` is new.
    fn add_all(&mut self, path: &str, dir: &Dir) -> Result<(), BuildError> {
        let mut list = Vec::with_capacity(dir.entries.len());
        for (name, node) in dir.entries.iter() {
            match node {
                Node::File(oid, blob) => {
                    self.built.added += 1;
                    let child = join(path, name);
                    self.changed(&child);
                    self.store(&child, *oid, blob.as_ref())?;
                    list.push((name.as_str(), FILE_MODE, *oid));
                }
                Node::Dir(d) => {
                    self.add_all(&join(path, name), d)?;
                    list.push((name.as_str(), DIR_MODE, d.oid));
                }
            }
        }
        let content = tree_content(&mut list);
        self.built
            .objects
            .push((ObjectType::Tree, dir.oid, Blob::from(content)));
        Ok(())
    }

    /// Notes blob `oid` at `path` as an object of the new tree: to be written when its
    /// content is at hand, else (a file delivered before) it must be in the repository.
    fn store(&mut self, path: &str, oid: Oid, blob: Option<&Blob>) -> Result<(), BuildError> {
        match blob {
            Some(blob) => self.built.objects.push((ObjectType::Blob, oid, blob.clone())),
            None if self.odb.exists(oid) => {}
            None => return Err(BuildError::Missing(path.to_owned())),
        }
        Ok(())
    }

    /// Counts the files under `tree` as deleted.
    fn delete_all(&mut self, path: &str, tree: Oid) -> Result<(), BuildError> {
        let tree = self.repo.find_tree(tree)?;
        for entry in tree.iter() {
            let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
            if entry.kind() == Some(ObjectType::Tree) {
                self.delete_all(&join(path, &name), entry.id())?;
            } else {
                self.built.deleted += 1;
                self.changed(&join(path, &name));
            }
        }
        Ok(())
    }

    /// The folder at `path`: the previous tree's folder `base` with the rules applied and
    /// `overlay` on top. `None` when nothing is left in it.
    fn merge(
        &mut self,
        path: &str,
        base: Option<Oid>,
        overlay: Option<&Dir>,
    ) -> Result<Option<Oid>, BuildError> {
        let Some(base) = base else {
            return match overlay.filter(|d| !d.entries.is_empty()) {
                Some(d) => {
                    self.add_all(path, d)?;
                    Ok(Some(d.oid))
                }
                None => Ok(None),
            };
        };
        if overlay.is_some_and(|d| d.oid == base) {
            return Ok(Some(base));
        }
        let tree = self.repo.find_tree(base)?;
        let empty = Entries::default();
        let overlay_entries = overlay.map_or(&empty, |d| &d.entries);
        let mut out: Vec<(String, i32, Oid)> = Vec::new();
        let mut seen = BTreeSet::new();
        for entry in tree.iter() {
            let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
            let child = join(path, &name);
            let is_dir = entry.kind() == Some(ObjectType::Tree);
            let (id, mode) = (entry.id(), entry.filemode());
            match overlay_entries.get(&name) {
                Some(Node::File(oid, blob)) => {
                    seen.insert(name.clone());
                    if is_dir {
                        if self.keeps_dir(&child) != Keep::None {
                            return Err(BuildError::Conflict(child));
                        }
                        self.delete_all(&child, id)?;
                        self.new_file(&child, *oid, blob.as_ref(), false)?;
                        out.push((name, FILE_MODE, *oid));
                    } else if id == *oid {
                        out.push((name, mode, id));
                    } else {
                        self.new_file(&child, *oid, blob.as_ref(), true)?;
                        out.push((name, FILE_MODE, *oid));
                    }
                }
                Some(Node::Dir(d)) => {
                    seen.insert(name.clone());
                    let base_dir = if is_dir {
                        Some(id)
                    } else {
                        if self.rules.keeps(&child) {
                            return Err(BuildError::Conflict(child));
                        }
                        self.built.deleted += 1;
                        self.changed(&child);
                        None
                    };
                    if let Some(oid) = self.merge(&child, base_dir, Some(d))? {
                        out.push((name, DIR_MODE, oid));
                    }
                }
                None if is_dir => match self.keeps_dir(&child) {
                    Keep::All => out.push((name, DIR_MODE, id)),
                    Keep::None => self.delete_all(&child, id)?,
                    Keep::Some => {
                        if let Some(oid) = self.merge(&child, Some(id), None)? {
                            out.push((name, DIR_MODE, oid));
                        }
                    }
                },
                None => {
                    if self.rules.keeps(&child) {
                        out.push((name, mode, id));
                    } else {
                        self.built.deleted += 1;
                        self.changed(&child);
                    }
                }
            }
        }
        for (name, node) in overlay_entries.iter().filter(|(n, _)| !seen.contains(*n)) {
            let child = join(path, name);
            match node {
                Node::File(oid, blob) => {
                    self.new_file(&child, *oid, blob.as_ref(), false)?;
                    out.push((name.clone(), FILE_MODE, *oid));
                }
                Node::Dir(d) => {
                    if let Some(oid) = self.merge(&child, None, Some(d))? {
                        out.push((name.clone(), DIR_MODE, oid));
                    }
                }
            }
        }
        if out.is_empty() {
            return Ok(None);
        }
        let mut list: Vec<(&str, i32, Oid)> = out.iter().map(|(n, m, o)| (n.as_str(), *m, *o)).collect();
        let content = tree_content(&mut list);
        let oid = object_id("tree", &content);
        if oid != base {
            self.built
                .objects
                .push((ObjectType::Tree, oid, Blob::from(content)));
        }
        Ok(Some(oid))
    }

    fn new_file(
        &mut self,
        path: &str,
        oid: Oid,
        blob: Option<&Blob>,
        modified: bool,
    ) -> Result<(), BuildError> {
        if modified {
            self.built.modified += 1;
        } else {
            self.built.added += 1;
        }
        self.changed(path);
        self.store(path, oid, blob)
    }

    fn keeps_dir(&self, path: &str) -> Keep {
        let segments: Vec<&str> = path.split('/').collect();
        keep_under(&self.rules, &segments)
    }
}

/// Builds the tree of the hashed content put on top of the tree `base` (the branch head's,
/// `None` for a new branch) with the original's update rules. Reads only the tree objects of
/// folders that change (and `Promoted_Commit_Id`); returns the objects to write.
pub(crate) fn build(repo: &Repository, base: Option<Oid>, hashed: &Hashed<'_>) -> Result<Built, BuildError> {
    let content = hashed.content;
    let current_promoted = match base {
        Some(base) => {
            let tree = repo.find_tree(base)?;
            match tree.get_path(std::path::Path::new(PROMOTED_COMMIT_PATH)) {
                Ok(entry) if entry.kind() == Some(ObjectType::Blob) => {
                    Some(repo.find_blob(entry.id())?.content().to_vec())
                }
                _ => None,
            }
        }
        None => None,
    };
    let promoted = promotes(current_promoted.as_deref(), content);
    let overlay = hashed.root(promoted.as_ref());
    let mut merge = Merge {
        repo,
        odb: repo.odb()?,
        rules: Rules::for_content(content),
        built: Built {
            root: None,
            added: 0,
            modified: 0,
            deleted: 0,
            folders: BTreeSet::new(),
            promoted: promoted.is_some(),
            objects: Vec::new(),
        },
    };
    let root = merge.merge("", base, Some(&overlay))?;
    merge.built.root = root;
    Ok(merge.built)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::{Author, Cache, Repo, Snapshot};
    use crate::url::RepoUrl;
    use kalypso_core::tree::{Change, Package, Tree, apply, diff};

    /// A small deterministic generator (no dependency, same cases every run).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) as usize) % n
        }
    }

    fn random_base(rng: &mut Lcg) -> Tree {
        let mut tree = Tree::new();
        let names = ["c0", "c1", "c2", "c3", ".github", "docs", "x"];
        for _ in 0..rng.next(40) {
            let top = names[rng.next(names.len())];
            let path = match rng.next(5) {
                0 => format!("root-{}.md", rng.next(3)),
                1 => format!("{top}/README.md"),
                2 => format!("{top}/t{}/reconciler.yaml", rng.next(4)),
                3 => format!("{top}/t{}/stale-{}.yaml", rng.next(4), rng.next(2)),
                _ => format!("{top}/t{}/deep/f{}.yaml", rng.next(4), rng.next(2)),
            };
            // A path that would turn an existing file into a folder (or back) is skipped:
            // a git tree cannot hold both.
            let clash = tree
                .iter()
                .any(|(p, _)| p.starts_with(&format!("{path}/")) || path.starts_with(&format!("{p}/")));
            if !clash {
                tree.insert(path, Blob::from(format!("v{}", rng.next(3)).into_bytes()));
            }
        }
        if rng.next(2) == 0 {
            tree.insert(PROMOTED_COMMIT_PATH, Blob::from(&b"abc"[..]));
        }
        tree
    }

    fn random_content(rng: &mut Lcg) -> RepoContent {
        let mut content = RepoContent::default();
        for ct in ["c0", "c1", "c2", "c3"] {
            if rng.next(3) > 0 {
                content.cluster_types.insert(ct.to_owned());
                for t in 0..4 {
                    if rng.next(2) == 0 {
                        let v = format!("v{}", rng.next(3));
                        let config: &[Vec<u8>] = &[v.clone().into_bytes()];
                        let package = Package::new(
                            &[v.clone().into_bytes()],
                            &[b"ns".to_vec()],
                            if rng.next(2) == 0 { config } else { &[] },
                            "yaml",
                        );
                        content.packages.insert((ct.to_owned(), format!("t{t}")), package);
                    }
                }
            }
        }
        content.promoted_commit = match rng.next(3) {
            0 => Some("abc".to_owned()),
            1 => Some("def".to_owned()),
            _ => None,
        };
        if rng.next(2) == 0 {
            // A rollout's state, beside Promoted_Commit_Id.
            let state = if rng.next(2) == 0 { "wave 1" } else { "wave 2" };
            content
                .tracking
                .insert("Rollout_State".to_owned(), Blob::from(state.as_bytes()));
        }
        content
    }

    /// The incremental build gives the tree (and the counts) that `apply` on whole file lists
    /// and a full write give, over many generated branch trees and renders.
    #[test]
    fn gives_the_tree_of_apply_on_whole_file_lists() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::from_path(&dir.path().join("remote.git"));
        let repo = Repo::open_mirror(&url, &Cache::new(dir.path().join("cache"))).unwrap();
        let author = Author {
            name: "t".into(),
            email: "t@e".into(),
        };
        let mut rng = Lcg(17);
        let mut conflicts = 0;
        for case in 0..150 {
            let base_files = random_base(&mut rng);
            let content = random_content(&mut rng);
            repo.staging(|s| -> Result<(), crate::repo::Error> {
                let base = if base_files.is_empty() && case % 2 == 0 {
                    None
                } else {
                    Some(s.write_tree(&Snapshot::default(), &base_files)?)
                };
                let commit = base.map(|t| s.commit(t, None, &author, "base")).transpose()?;
                s.persist()?;
                let snapshot = repo.snapshot(commit)?.files;
                let applied = apply(&snapshot, &content);
                let expected = s.write_tree(&Snapshot::default(), &applied.tree);
                let hashed = Hashed::new(&content, &|_, _| None).unwrap();
                let written = s.write_content(base, &hashed);
                match (expected, written) {
                    (Ok(expected), Ok(written)) => {
                        assert_eq!(written.tree, expected, "case {case}");
                        // The same content with some packages delivered before: known by
                        // the ids of their files alone (stored by the write above).
                        let ids: BTreeMap<(String, String), FileIds> =
                            hashed.rendered().iter().cloned().collect();
                        let mut partial = content.clone();
                        for key in ids.keys() {
                            if rng.next(2) == 0 {
                                partial.packages.remove(key);
                                partial.delivered.insert(key.clone());
                            }
                        }
                        let lookup =
                            |ct: &str, dt: &str| ids.get(&(ct.to_owned(), dt.to_owned())).map(|f| &f[..]);
                        let again = s.write_content(base, &Hashed::new(&partial, &lookup).unwrap())?;
                        assert_eq!(again.tree, written.tree, "case {case}, some delivered before");
                        assert_eq!(
                            (again.added, again.modified, again.deleted, &again.folders),
                            (written.added, written.modified, written.deleted, &written.folders),
                            "case {case}, some delivered before"
                        );
                        let changes = diff(&snapshot, &applied.tree);
                        let count = |c| changes.iter().filter(|(_, k)| *k == c).count();
                        assert_eq!(
                            (written.added, written.modified, written.deleted),
                            (
                                count(Change::Added),
                                count(Change::Modified),
                                count(Change::Deleted)
                            ),
                            "case {case}"
                        );
                        let folders: BTreeSet<String> = changes
                            .iter()
                            .filter(|(p, _)| p.contains('/'))
                            .map(|(p, _)| top(p).to_owned())
                            .collect();
                        assert_eq!(written.folders, folders, "case {case}");
                        assert_eq!(written.promoted, applied.promoted, "case {case}");
                    }
                    (Err(_), Err(_)) => conflicts += 1,
                    (e, w) => panic!("case {case}: full write {e:?}, incremental {w:?}"),
                }
                Ok(())
            })
            .unwrap();
        }
        assert!(conflicts < 15, "most cases are not conflicts: {conflicts}");
    }

    /// A file delivered before that the repository does not have (a new GitOps repository,
    /// a rebuilt cache) cannot be put on a branch by its id: the build says so, and the
    /// caller renders in full. One the branch already has needs nothing more.
    #[test]
    fn files_delivered_before_must_be_in_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::from_path(&dir.path().join("remote.git"));
        let repo = Repo::open_mirror(&url, &Cache::new(dir.path().join("cache"))).unwrap();
        let mut content = RepoContent::default();
        content.cluster_types.insert("c".to_owned());
        let package = Package::new(&[b"r".to_vec()], &[b"n".to_vec()], &[], "yaml");
        content.packages.insert(("c".to_owned(), "t".to_owned()), package);
        let full = Hashed::new(&content, &|_, _| None).unwrap();
        let ids = full.rendered()[0].1.clone();
        let mut delivered = content.clone();
        delivered.packages.clear();
        delivered.delivered.insert(("c".to_owned(), "t".to_owned()));
        let lookup = |_: &str, _: &str| Some(&ids[..]);
        assert!(
            Hashed::new(&delivered, &|_, _| None).is_err(),
            "no ids: no hashing"
        );
        repo.staging(|s| -> Result<(), crate::repo::Error> {
            let by_id = Hashed::new(&delivered, &lookup).unwrap();
            let missing = s.write_content(None, &by_id).unwrap_err();
            assert!(
                matches!(&missing, crate::repo::StageError::NotDelivered { path, .. } if path.starts_with("c/t/")),
                "{missing}"
            );
            let tree = s.write_content(None, &full)?.tree;
            assert_eq!(s.write_content(Some(tree), &by_id)?.tree, tree);
            assert_eq!(s.write_content(None, &by_id)?.tree, tree, "now stored");
            Ok(())
        })
        .unwrap();
    }

    /// Content hashed for artifacts only has the rendered files' ids [`Hashed::new`] gives,
    /// and refuses an assignment without remembered files as it does.
    #[test]
    fn files_only_hashing_gives_the_rendered_ids_and_checks_the_delivered() {
        let mut content = RepoContent::default();
        for ct in ["c", "d"] {
            content.cluster_types.insert(ct.to_owned());
            for dt in ["t", "u"] {
                let package = Package::new(
                    &[format!("r {ct} {dt}").into_bytes()],
                    &[b"n".to_vec()],
                    &[],
                    "yaml",
                );
                content.packages.insert((ct.to_owned(), dt.to_owned()), package);
            }
        }
        content.delivered.insert(("c".to_owned(), "v".to_owned()));
        let known = [("reconciler.yaml", object_id("blob", b"v"))];
        let lookup = |_: &str, dt: &str| (dt == "v").then_some(&known[..]);
        let full = Hashed::new(&content, &lookup).unwrap();
        let files = Hashed::files_only(&content, &lookup).unwrap();
        assert_eq!(full.rendered().len(), 4);
        assert_eq!(files.rendered(), full.rendered());
        let unknown = |_: &str, _: &str| None;
        assert_eq!(
            Hashed::files_only(&content, &unknown).unwrap_err().assignment,
            ("c".to_owned(), "v".to_owned())
        );
    }

    #[test]
    fn ids_are_gits() {
        // `printf 'hello\n' | git hash-object --stdin`
        assert_eq!(
            object_id("blob", b"hello\n").to_string(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        // The empty tree.
        assert_eq!(
            object_id("tree", &[]).to_string(),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    #[test]
    fn folders_sort_as_git_sorts_them() {
        let a = Oid::ZERO_SHA1;
        let mut entries = [("a.b", FILE_MODE, a), ("a", DIR_MODE, a), ("a-", FILE_MODE, a)];
        tree_content(&mut entries);
        let names: Vec<&str> = entries.iter().map(|e| e.0).collect();
        assert_eq!(names, ["a-", "a.b", "a"]);
        // Against the definition (a folder's name with `/` appended), over names that are
        // prefixes of each other around `/`'s neighbours in ASCII.
        let names = ["a", "a-", "a.", "a0", "ab", "a-b", "a.b", "b", "a--", "a.-"];
        for (x, x_mode) in names.iter().flat_map(|n| [(*n, FILE_MODE), (*n, DIR_MODE)]) {
            for (y, y_mode) in names.iter().flat_map(|n| [(*n, FILE_MODE), (*n, DIR_MODE)]) {
                let key =
                    |name: &str, mode: i32| format!("{name}{}", if mode == DIR_MODE { "/" } else { "" });
                assert_eq!(
                    git_order(x, x_mode, y, y_mode),
                    key(x, x_mode).cmp(&key(y, y_mode)),
                    "{x:?} {x_mode:o} / {y:?} {y_mode:o}"
                );
            }
        }
    }
}
