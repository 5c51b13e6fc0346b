//! The platform GitOps tree: a folder per cluster type, a folder per deployment target in it,
//! and the original's rules for updating an existing tree.
//!
//! The names of that layout (the promoted-commit file, the files of a deployment target's
//! folder, a cluster type's readme) are defined here once, for every crate that reads or
//! writes such a tree (the CLI's output folder, git delivery, the hub).
//!
//! A tree is a sorted map from path to bytes. [`apply`] puts new repository content on top
//! of the environment branch's current tree exactly as the original does: root files and
//! dot-folders are kept, folders of cluster types and targets that are no longer scheduled
//! are deleted, stale files inside still-scheduled target folders survive, and every cluster
//! type gets a `README.md`. [`diff`] says which paths changed, so writers touch only those.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::fingerprint::{FORMAT, Fingerprint, Hasher};

/// File contents.
pub type Blob = Arc<[u8]>;

/// The text of every cluster type's `README.md` (no trailing newline, as in the original).
pub const README_TEXT: &str = "This folder contains deployment targets scheduled on the cluster type";
/// Where the promoted main commit is tracked.
pub const PROMOTED_COMMIT_PATH: &str = ".github/tracking/Promoted_Commit_Id";
/// A cluster type's readme file name.
pub const README: &str = "README.md";
/// The reconciler manifests' file.
pub const RECONCILER_FILE: &str = "reconciler.yaml";
/// The namespace manifests' file.
pub const NAMESPACE_FILE: &str = "namespace.yaml";
/// The config file, for config content type `yaml` (the default).
pub const CONFIG_FILE: &str = "platform-config.yaml";
/// The config file, for config content type `sh`.
pub const SHELL_CONFIG_FILE: &str = "platform-config.sh";
/// Every name a deployment target's folder can hold a file under.
pub const PACKAGE_FILES: [&str; 4] = [RECONCILER_FILE, NAMESPACE_FILE, CONFIG_FILE, SHELL_CONFIG_FILE];
/// The config file the original scheduler wrote before 2023-03-31 (found in older trees).
pub const LEGACY_CONFIG_FILE: &str = "config.yaml";

/// A tree of files: `/`-separated relative paths to contents, in path order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    files: BTreeMap<String, Blob>,
}

impl Tree {
    /// An empty tree.
    pub fn new() -> Tree {
        Tree::default()
    }

    /// A tree of text files, `(path, text)` (for examples and tests).
    pub fn of_texts(files: &[(&str, &str)]) -> Tree {
        files
            .iter()
            .map(|(path, text)| ((*path).to_owned(), Blob::from(text.as_bytes())))
            .collect()
    }

    /// Adds or replaces a file.
    pub fn insert(&mut self, path: impl Into<String>, content: impl Into<Blob>) {
        self.files.insert(path.into(), content.into());
    }

    /// Removes a file.
    pub fn remove(&mut self, path: &str) -> Option<Blob> {
        self.files.remove(path)
    }

    /// The file at `path`.
    pub fn get(&self, path: &str) -> Option<&Blob> {
        self.files.get(path)
    }

    /// Every file, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Blob)> {
        self.files.iter()
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether the tree has no files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl FromIterator<(String, Blob)> for Tree {
    fn from_iter<I: IntoIterator<Item = (String, Blob)>>(iter: I) -> Tree {
        Tree {
            files: iter.into_iter().collect(),
        }
    }
}

/// The files of one assignment's folder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Package {
    /// `reconciler.yaml`: the rendered reconciler manifests.
    pub reconciler: Blob,
    /// `namespace.yaml`: the rendered namespace manifests.
    pub namespace: Blob,
    /// The config file (`platform-config.yaml` or `.sh`) and its content, when the config
    /// template produced any output.
    pub config: Option<(&'static str, Blob)>,
}

impl Package {
    /// Builds the files as the original writes them: rendered manifests (empty outputs
    /// already dropped) joined by `---\n` with nothing inserted; the config file only when
    /// there is config output, named `platform-config.sh` for content type `sh`, else
    /// `platform-config.yaml`.
    pub fn new(
        reconciler: &[Vec<u8>],
        namespace: &[Vec<u8>],
        config: &[Vec<u8>],
        config_content_type: &str,
    ) -> Package {
        Package {
            reconciler: join(reconciler),
            namespace: join(namespace),
            config: (!config.is_empty()).then(|| (config_file(config_content_type), join(config))),
        }
    }

    /// [`Package::new`] from manifests already joined: `config` empty when the config
    /// template produced no output (no config file, as in the original).
    pub fn from_files(reconciler: Blob, namespace: Blob, config: Blob, config_content_type: &str) -> Package {
        Package {
            reconciler,
            namespace,
            config: (!config.is_empty()).then(|| (config_file(config_content_type), config)),
        }
    }

    /// The folder's files, in the order they are listed.
    pub fn files(&self) -> impl Iterator<Item = (&'static str, &Blob)> {
        [
            (RECONCILER_FILE, &self.reconciler),
            (NAMESPACE_FILE, &self.namespace),
        ]
        .into_iter()
        .chain(self.config.as_ref().map(|(name, blob)| (*name, blob)))
    }
}

/// What separates the rendered manifests of one file.
pub(crate) const MANIFEST_SEPARATOR: &[u8] = b"---\n";

fn join(manifests: &[Vec<u8>]) -> Blob {
    match manifests {
        // Most templates have one manifest: copied once, not joined first.
        [only] => Blob::from(&only[..]),
        _ => Blob::from(manifests.join(MANIFEST_SEPARATOR)),
    }
}

/// The config file's name for the config template's content type.
fn config_file(content_type: &str) -> &'static str {
    if content_type == "sh" {
        SHELL_CONFIG_FILE
    } else {
        CONFIG_FILE
    }
}

/// What the scheduler delivers for an environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepoContent {
    /// Every cluster type the content writes (each gets a folder and README).
    pub cluster_types: BTreeSet<String>,
    /// The packages, keyed by (cluster type, deployment target).
    pub packages: BTreeMap<(String, String), Package>,
    /// The promoted main commit (BaseRepo `main`'s `spec.commit`), if pinned.
    pub promoted_commit: Option<String>,
    /// Deployment-target folders kept as they are though no package is written for them
    /// (a failing WorkloadRegistration's, see [`crate::run::Isolation`]): one entry per
    /// group of cluster types whose workloads failed (usually one, for every cluster type).
    pub kept: Vec<KeptFolders>,
    /// Cluster types whose whole folders stay as the sink has them: this content writes,
    /// deletes and renders nothing there (a run asked to keep them, see
    /// [`crate::run::Request::keeping`]). Not in [`RepoContent::cluster_types`].
    pub held: BTreeSet<String>,
    /// Scheduled assignments whose packages were not rendered again: their inputs did not
    /// change since a delivery the sink remembers ([`crate::run::RenderMemo`]), and the
    /// sink still has their files. Empty unless the sink has a memo.
    pub delivered: BTreeSet<(String, String)>,
    /// Files this content writes under `.github/tracking/` besides `Promoted_Commit_Id`, by
    /// file name: the state of a progressive rollout ([`crate::rollout::ROLLOUT_STATE_PATH`]),
    /// written in the same commit as the content it describes. Empty unless a rollout is in
    /// effect; a file not named here is kept as the branch has it.
    pub tracking: BTreeMap<String, Blob>,
}

/// The folder of the tracking files (`Promoted_Commit_Id`, the rollout's state).
pub const TRACKING_DIR: &str = ".github/tracking";

impl RepoContent {
    /// Whether assignment `key` (cluster type, deployment target) has its files here or
    /// among the ones delivered before.
    pub fn has_package(&self, key: &(String, String)) -> bool {
        self.packages.contains_key(key) || self.delivered.contains(key)
    }

    /// The fingerprint of what this content puts in a tree: its cluster types, the path and
    /// bytes of every file of its packages, the promoted commit, and the folders it keeps.
    /// Equal contents have equal fingerprints whoever rendered them, and a change of any
    /// byte changes it (the operator compares it with what it delivered last). Assignments
    /// in [`RepoContent::delivered`] count by name only: fill their packages in first.
    pub fn fingerprint(&self) -> Fingerprint {
        let mut hash = Hasher::new();
        hash.str(FORMAT);
        hash.strs(self.cluster_types.iter().map(String::as_str));
        for ((ct, dt), package) in &self.packages {
            hash.str(ct).str(dt);
            for (file, blob) in package.files() {
                hash.str(file).bytes(blob);
            }
        }
        hash.strs(
            self.delivered
                .iter()
                .flat_map(|(ct, dt)| [ct.as_str(), dt.as_str()]),
        );
        hash.str(self.promoted_commit.as_deref().unwrap_or_default());
        for kept in &self.kept {
            hash.strs(kept.claimed.iter().map(String::as_str));
            match &kept.cluster_types {
                Some(cts) => hash.strs(cts.iter().map(String::as_str)),
                None => hash.str("*"),
            };
        }
        hash.strs(self.held.iter().map(String::as_str));
        for (name, blob) in &self.tracking {
            hash.str(name).bytes(blob);
        }
        hash.finish()
    }
}

/// Which existing deployment-target folders stay as they are while a WorkloadRegistration
/// fails: every folder of a cluster type whose name is not a deployment target of a healthy
/// workload. The failing registration's folders stay even when its files do not load (and
/// its targets' names are unknown); a healthy target that moved leaves its old folder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeptFolders {
    /// The deployment targets of the healthy workloads (and those declared on branches).
    pub claimed: BTreeSet<String>,
    /// The cluster types whose folders this is about; `None`: every cluster type of the
    /// content (a run of one control-plane version). A content composed of several versions
    /// has one per version that isolated a registration.
    pub cluster_types: Option<BTreeSet<String>>,
}

impl KeptFolders {
    /// Whether the folders of `cluster_type` are subject to this.
    pub fn applies_to(&self, cluster_type: &str) -> bool {
        self.cluster_types
            .as_ref()
            .is_none_or(|cts| cts.contains(cluster_type))
    }
}

/// The original's rules for what survives in an existing tree, for one layout: which cluster
/// types exist and which deployment targets are scheduled on each.
#[derive(Clone, Debug, Default)]
pub struct Rules<'a> {
    cluster_types: BTreeSet<&'a str>,
    scheduled: BTreeMap<&'a str, BTreeSet<&'a str>>,
    kept: &'a [KeptFolders],
    held: Option<&'a BTreeSet<String>>,
}

impl<'a> Rules<'a> {
    /// The rules for these cluster types and scheduled (cluster type, target) pairs.
    pub fn new(
        cluster_types: impl IntoIterator<Item = &'a str>,
        scheduled: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Rules<'a> {
        let mut rules = Rules {
            cluster_types: cluster_types.into_iter().collect(),
            scheduled: BTreeMap::new(),
            kept: &[],
            held: None,
        };
        for (ct, dt) in scheduled {
            rules.scheduled.entry(ct).or_default().insert(dt);
        }
        rules
    }

    /// The rules for `content`.
    pub fn for_content(content: &'a RepoContent) -> Rules<'a> {
        Rules::new(
            content.cluster_types.iter().map(String::as_str),
            content
                .packages
                .keys()
                .chain(&content.delivered)
                .map(|(ct, dt)| (ct.as_str(), dt.as_str())),
        )
        .keeping(&content.kept)
        .holding(&content.held)
    }

    /// These rules, also keeping the folders `kept` names.
    pub fn keeping(mut self, kept: &'a [KeptFolders]) -> Rules<'a> {
        self.kept = kept;
        self
    }

    /// These rules, also keeping the whole folders of the cluster types `held`.
    pub fn holding(mut self, held: &'a BTreeSet<String>) -> Rules<'a> {
        self.held = Some(held);
        self
    }

    /// Whether an existing file at `path` survives: root files and anything under a
    /// dot-folder or a held cluster type's folder do; under a folder that is not a cluster
    /// type nothing does; in a cluster type's folder its `README.md` does, and anything
    /// inside a scheduled target's folder (stale files included) does; nothing else does.
    pub fn keeps(&self, path: &str) -> bool {
        let mut segments = path.split('/');
        let first = segments.next().unwrap_or_default();
        let Some(second) = segments.next() else {
            return true;
        };
        first.starts_with('.')
            || self.holds(first)
            || (self.cluster_types.contains(first)
                && ((second == README && segments.next().is_none()) || self.keeps_folder(first, second)))
    }

    /// Whether the folder of deployment target `target` in cluster type `cluster_type`
    /// survives (with every file in it): the target is scheduled there, its folder is kept,
    /// or its cluster type is held.
    pub fn keeps_folder(&self, cluster_type: &str, target: &str) -> bool {
        self.is_scheduled(cluster_type, target)
            || self.holds(cluster_type)
            || (self.cluster_types.contains(cluster_type)
                && self
                    .kept
                    .iter()
                    .any(|kept| kept.applies_to(cluster_type) && !kept.claimed.contains(target)))
    }

    /// Whether `name` is a cluster type of the layout (written or held).
    pub fn is_cluster_type(&self, name: &str) -> bool {
        self.cluster_types.contains(name) || self.holds(name)
    }

    /// Whether the folder of cluster type `name` is held as it is.
    pub fn holds(&self, name: &str) -> bool {
        self.held.is_some_and(|held| held.contains(name))
    }

    /// Whether `target` is scheduled on `cluster_type`.
    pub fn is_scheduled(&self, cluster_type: &str, target: &str) -> bool {
        self.scheduled
            .get(cluster_type)
            .is_some_and(|t| t.contains(target))
    }
}

/// The outcome of [`apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The new tree.
    pub tree: Tree,
    /// Whether `Promoted_Commit_Id` was written (the original labels such PRs `promoted`).
    pub promoted: bool,
}

/// Whether the promoted commit must be written: it is pinned and differs from what the
/// tree tracks (or the tree tracks nothing).
pub fn promotes(current: Option<&[u8]>, content: &RepoContent) -> Option<Blob> {
    let commit = content.promoted_commit.as_deref().filter(|c| !c.is_empty())?;
    (current != Some(commit.as_bytes())).then(|| Blob::from(commit.as_bytes()))
}

/// The `README.md` every cluster type folder gets.
pub fn readme() -> Blob {
    Blob::from(README_TEXT.as_bytes())
}

/// Puts `content` on top of the branch's current tree `base` with the original's rules.
pub fn apply(base: &Tree, content: &RepoContent) -> Applied {
    let rules = Rules::for_content(content);
    let mut tree: Tree = base
        .iter()
        .filter(|(path, _)| rules.keeps(path))
        .map(|(p, b)| (p.clone(), b.clone()))
        .collect();
    let promoted = match promotes(base.get(PROMOTED_COMMIT_PATH).map(|b| &b[..]), content) {
        Some(blob) => {
            tree.insert(PROMOTED_COMMIT_PATH, blob);
            true
        }
        None => false,
    };
    for (name, blob) in &content.tracking {
        tree.insert(format!("{TRACKING_DIR}/{name}"), blob.clone());
    }
    for ((ct, dt), package) in &content.packages {
        for (file, blob) in package.files() {
            tree.insert(format!("{ct}/{dt}/{file}"), blob.clone());
        }
    }
    let readme = readme();
    for ct in &content.cluster_types {
        tree.insert(format!("{ct}/{README}"), readme.clone());
    }
    Applied { tree, promoted }
}

/// How one path differs between two trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Only in the new tree.
    Added,
    /// In both, with different contents.
    Modified,
    /// Only in the old tree.
    Deleted,
}

/// The paths that differ between `old` and `new`, in path order.
pub fn diff(old: &Tree, new: &Tree) -> Vec<(String, Change)> {
    let mut changes = Vec::new();
    for (path, blob) in new.iter() {
        match old.get(path) {
            None => changes.push((path.clone(), Change::Added)),
            Some(old_blob) if old_blob[..] != blob[..] => changes.push((path.clone(), Change::Modified)),
            Some(_) => {}
        }
    }
    for (path, _) in old.iter() {
        if new.get(path).is_none() {
            changes.push((path.clone(), Change::Deleted));
        }
    }
    changes.sort();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of_texts(files)
    }

    fn paths(t: &Tree) -> Vec<&str> {
        t.iter().map(|(p, _)| p.as_str()).collect()
    }

    fn package(reconciler: &str, config: &[&str]) -> Package {
        let config: Vec<Vec<u8>> = config.iter().map(|c| c.as_bytes().to_vec()).collect();
        Package::new(&[reconciler.as_bytes().to_vec()], &[], &config, "")
    }

    #[test]
    fn applies_the_original_update_rules() {
        let base = tree(&[
            ("manifests-statement.txt", "root"),
            (".github/tracking/Promoted_Commit_Id", "old"),
            (".github/x/y", "dot"),
            ("gone/README.md", "x"),
            ("gone/t/reconciler.yaml", "x"),
            ("large/README.md", "x"),
            ("large/old-target/reconciler.yaml", "x"),
            ("large/t/config.yaml", "stale"),
            ("large/t/reconciler.yaml", "old"),
            ("large/stray.txt", "x"),
        ]);
        let content = RepoContent {
            cluster_types: ["large".to_owned(), "small".to_owned()].into(),
            packages: [(("large".to_owned(), "t".to_owned()), package("new", &[]))].into(),
            promoted_commit: Some("abc".to_owned()),
            kept: Vec::new(),
            held: BTreeSet::new(),
            delivered: BTreeSet::new(),
            tracking: BTreeMap::new(),
        };
        let applied = apply(&base, &content);
        assert!(applied.promoted);
        assert_eq!(
            paths(&applied.tree),
            [
                ".github/tracking/Promoted_Commit_Id",
                ".github/x/y",
                "large/README.md",
                "large/t/config.yaml",
                "large/t/namespace.yaml",
                "large/t/reconciler.yaml",
                "manifests-statement.txt",
                "small/README.md",
            ]
        );
        assert_eq!(&applied.tree.get("large/t/reconciler.yaml").unwrap()[..], b"new");
        assert_eq!(&applied.tree.get("large/t/namespace.yaml").unwrap()[..], b"");
        assert_eq!(&applied.tree.get(PROMOTED_COMMIT_PATH).unwrap()[..], b"abc");
    }

    #[test]
    fn a_held_cluster_type_keeps_its_folder_as_it_is() {
        let base = tree(&[
            ("large/README.md", "edited by hand"),
            ("large/t/reconciler.yaml", "old"),
            ("large/gone/reconciler.yaml", "unscheduled, but held"),
            ("large/stray.txt", "x"),
            ("small/t/reconciler.yaml", "old"),
            ("retired/t/reconciler.yaml", "a cluster type of no one"),
        ]);
        let content = RepoContent {
            cluster_types: ["small".to_owned()].into(),
            packages: [(("small".to_owned(), "t".to_owned()), package("new", &[]))].into(),
            held: ["large".to_owned(), "retired".to_owned()].into(),
            ..RepoContent::default()
        };
        let applied = apply(&base, &content);
        for (path, text) in [
            ("large/README.md", "edited by hand"),
            ("large/t/reconciler.yaml", "old"),
            ("large/gone/reconciler.yaml", "unscheduled, but held"),
            ("large/stray.txt", "x"),
            ("retired/t/reconciler.yaml", "a cluster type of no one"),
            ("small/t/reconciler.yaml", "new"),
        ] {
            assert_eq!(
                applied.tree.get(path).map(|b| &b[..]),
                Some(text.as_bytes()),
                "{path}"
            );
        }
        assert!(applied.tree.get("small/README.md").is_some());
        assert_eq!(applied.tree.len(), 8, "{:?}", paths(&applied.tree));
    }

    #[test]
    fn same_promoted_commit_is_not_promoted_again() {
        let base = tree(&[(PROMOTED_COMMIT_PATH, "abc")]);
        let content = RepoContent {
            promoted_commit: Some("abc".into()),
            ..RepoContent::default()
        };
        assert!(!apply(&base, &content).promoted);
    }

    #[test]
    fn manifests_join_with_bare_separator_and_config_is_optional() {
        let p = Package::new(
            &[b"a: 1".to_vec(), b"b: 2\n".to_vec()],
            &[],
            &[b"export A=1\n".to_vec()],
            "sh",
        );
        let files: Vec<(&str, &[u8])> = p.files().map(|(n, b)| (n, &b[..])).collect();
        assert_eq!(files[0], ("reconciler.yaml", &b"a: 1---\nb: 2\n"[..]));
        assert_eq!(files[1], ("namespace.yaml", &b""[..]));
        assert_eq!(files[2].0, "platform-config.sh");
        assert_eq!(package("r", &[]).files().count(), 2);
    }

    #[test]
    fn diff_lists_changes_in_path_order() {
        let old = tree(&[("a", "1"), ("b", "1"), ("c", "1")]);
        let new = tree(&[("a", "1"), ("b", "2"), ("d", "1")]);
        assert_eq!(
            diff(&old, &new),
            [
                ("b".to_owned(), Change::Modified),
                ("c".to_owned(), Change::Deleted),
                ("d".to_owned(), Change::Added)
            ]
        );
    }
}
