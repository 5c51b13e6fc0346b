//! Delivering an environment to a registry: each cluster type as its own Flux artifact, then
//! the index that lists them.
//!
//! For each cluster type the artifact's files are laid out first, by their git blob ids only:
//! `README.md`, a folder per deployment target with its files (rendered now, or known by the
//! ids of the delivery that wrote them, see `kalypso_git::delivered`), the folders a failing
//! WorkloadRegistration keeps (taken from the artifact delivered before), and
//! `.github/tracking/Promoted_Commit_Id` when a commit is promoted. Their *content id* (a
//! digest of the sorted paths and ids) is compared with the one the current index records:
//! an equal id means the artifact is unchanged, and it is neither archived nor uploaded, nor
//! is anything about it sent. The others are completed (a file known only by its id is read
//! from the artifact delivered before, and checked against its id), archived
//! deterministically in parallel, and uploaded by a pool of threads while the next ones are
//! compressed: for each, the tag's current manifest is looked at (an interrupted delivery may
//! have pushed it already), only the blobs the repository lacks are uploaded, and the manifest
//! is written under the control-plane commit's tag and then under the environment's tag, the
//! write that moves what clusters pull. The index is written last, naming the one it replaces.
//!
//! So a failure part-way leaves every tag on a complete artifact, old or new, and the index
//! on the old state; the next delivery finds the artifacts already pushed (same content, same
//! manifest) and finishes. A cluster type no longer in the environment keeps its repository
//! and tags as they are (its clusters keep running their last artifact, as Flux does when a
//! Kustomization's source path disappears: nothing is pruned); the new index no longer lists
//! it, and the report names it as retired.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};

use kalypso_core::tree::{Blob, PROMOTED_COMMIT_PATH, Package, README, RepoContent, Rules, readme};
use rayon::prelude::*;
use sha2::{Digest as _, Sha256};

use crate::Error;
use crate::archive;
use crate::artifact::{
    self, CONFIG_MEDIA_TYPE, CONTENT_MEDIA_TYPE, Descriptor, Entry, INDEX_MEDIA_TYPE, Index, Manifest,
};
use crate::client::{Access, Registry};
use crate::digest::{Digest, GitId};
use crate::read::{self, Snapshot};
use crate::reference::{Location, check_tag};

/// Where an environment goes: the GitOps repository's location and the environment's tag
/// (the GitOpsRepo's `spec.branch`).
#[derive(Clone, Copy, Debug)]
pub struct Destination<'a> {
    /// The location (`oci://HOST/PATH`).
    pub location: &'a Location,
    /// The tag.
    pub tag: &'a str,
}

/// Where the content comes from, for the annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The environment.
    pub environment: String,
    /// The control plane (no credentials: it is written into every artifact).
    pub source: String,
    /// The control plane's environment branch.
    pub branch: String,
    /// Its commit rendered (40 hex digits): the revision, and the second tag of new artifacts.
    pub commit: String,
    /// When that commit was made (RFC 3339, UTC): the artifacts' `created`.
    pub created: String,
    /// The `main` commit rendered.
    pub main_commit: String,
}

impl Provenance {
    /// The revision, as Flux writes one: `<branch>@sha1:<commit>`.
    pub fn revision(&self) -> String {
        format!("{}@sha1:{}", self.branch, self.commit)
    }
}

/// `unix` seconds as RFC 3339 in UTC (`2026-11-27T10:00:00Z`), for [`Provenance::created`].
pub fn rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let seconds = unix.rem_euclid(86_400);
    // Days to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// How to deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Gzip level of the layers (0–9).
    pub level: u32,
    /// Artifacts uploaded at once.
    pub uploads: usize,
    /// Compute what would change; write nothing.
    pub dry_run: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            level: 6,
            uploads: 8,
            dry_run: false,
        }
    }
}

/// The git blob ids of the files of an assignment delivered before (in
/// [`RepoContent::delivered`]: not rendered again, known by these ids only), by cluster type
/// and deployment target.
pub type Ids<'c> = dyn Fn(&str, &str) -> Option<Vec<(&'static str, GitId)>> + Sync + 'c;

/// What a delivery did to one cluster type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The cluster type.
    pub cluster_type: String,
    /// Its new manifest.
    pub manifest: Digest,
    /// The layer's size in bytes.
    pub layer_size: u64,
    /// Files in the artifact.
    pub files: usize,
    /// Whether the cluster type had no artifact in the index before.
    pub new: bool,
}

/// What a delivery did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The location.
    pub location: String,
    /// The environment's tag.
    pub tag: String,
    /// The index after the delivery (`None`: none yet, a dry run into an empty registry).
    pub index: Option<Digest>,
    /// Whether a new index was written (or, in a dry run, would be).
    pub changed: bool,
    /// The cluster types whose artifact was written (or would be), by name.
    pub pushed: Vec<Pushed>,
    /// Cluster types whose artifact did not change.
    pub unchanged: usize,
    /// Cluster types the index listed that the environment no longer has: their repositories
    /// are left as they are.
    pub retired: Vec<String>,
    /// Blobs uploaded.
    pub blobs_uploaded: u64,
    /// Bytes uploaded.
    pub bytes_uploaded: u64,
    /// Nothing was written.
    pub dry_run: bool,
}

/// A file of an artifact being planned: its path in the artifact, git id and content (`None`
/// while known by id only).
#[derive(Clone, Debug)]
struct File {
    path: String,
    id: GitId,
    content: Option<Blob>,
}

/// A path of a file laid out by [`plan`], in parts: an environment's 280,000 paths are
/// compared and hashed for the content ids, and only the changed artifacts' are built.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PlannedPath<'a> {
    /// `{folder}/{name}`: a file of a deployment target's folder.
    InFolder(&'a str, &'a str),
    /// Any other path.
    Whole(String),
}

impl PlannedPath<'_> {
    /// The path's bytes, in parts to be read one after the other.
    fn parts(&self) -> [&[u8]; 3] {
        match self {
            PlannedPath::InFolder(folder, name) => [folder.as_bytes(), b"/", name.as_bytes()],
            PlannedPath::Whole(path) => [path.as_bytes(), b"", b""],
        }
    }

    /// The path's deployment-target folder (its first segment), if it has one.
    fn folder(&self) -> Option<&str> {
        match self {
            PlannedPath::InFolder(folder, _) => Some(folder),
            PlannedPath::Whole(path) => path.split_once('/').map(|(folder, _)| folder),
        }
    }

    /// The order of the paths as strings, without building them.
    fn order(&self, other: &PlannedPath<'_>) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        if let (PlannedPath::InFolder(a, x), PlannedPath::InFolder(b, y)) = (self, other) {
            if a == b {
                return x.cmp(y);
            }
            // Different folders: their first difference decides, or, when one is a prefix of
            // the other, the `/` after the shorter against the longer's next byte.
            let common = a.len().min(b.len());
            let order = match a.as_bytes()[..common].cmp(&b.as_bytes()[..common]) {
                Ordering::Equal if a.len() < b.len() => b'/'.cmp(&b.as_bytes()[common]),
                Ordering::Equal => a.as_bytes()[common].cmp(&b'/'),
                order => order,
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        // Otherwise (rare: a path that is not a folder's file, or a folder name holding a
        // `/`), byte by byte.
        let bytes = |p: &PlannedPath<'_>| {
            let [a, b, c] = p.parts();
            a.iter().chain(b).chain(c).copied().collect::<Vec<u8>>()
        };
        bytes(self).cmp(&bytes(other))
    }
}

impl std::fmt::Display for PlannedPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlannedPath::InFolder(folder, name) => write!(f, "{folder}/{name}"),
            PlannedPath::Whole(path) => f.write_str(path),
        }
    }
}

/// A file laid out by [`plan`]: a [`File`] whose path is in parts.
#[derive(Clone, Debug)]
struct Planned<'a> {
    path: PlannedPath<'a>,
    id: GitId,
    content: Option<Blob>,
}

impl Planned<'_> {
    /// The file with its path built.
    fn into_file(self) -> File {
        File {
            path: self.path.to_string(),
            id: self.id,
            content: self.content,
        }
    }
}

/// The deployment-target folders of an artifact's files (their first path segment), sorted:
/// what [`Entry::deployment_targets`] records.
fn folders(files: &[File]) -> Vec<String> {
    let set: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.path.split_once('/').map(|(dt, _)| dt))
        .filter(|dt| !dt.starts_with('.'))
        .collect();
    set.into_iter().map(str::to_owned).collect()
}

/// [`folders`] of files laid out by [`plan`].
fn planned_folders(files: &[Planned<'_>]) -> Vec<String> {
    let set: BTreeSet<&str> = files
        .iter()
        .filter_map(|f| f.path.folder())
        .filter(|dt| !dt.starts_with('.'))
        .collect();
    set.into_iter().map(str::to_owned).collect()
}

/// The content id of an artifact's files: a digest of their sorted paths and git blob ids.
/// (Its definition: deliveries compute it as [`planned_content_id`] or [`Layout::content_id`],
/// and the tests check that they agree.)
#[cfg(test)]
fn content_id(files: &[File]) -> String {
    let mut sorted: Vec<&File> = files.iter().collect();
    sorted.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    content_id_of(sorted.iter().map(|f| ([f.path.as_bytes(), b"", b""], &f.id)))
}

/// [`content_id`] of files laid out by [`plan`] (sorted by path).
fn planned_content_id(files: &[Planned<'_>]) -> String {
    content_id_of(files.iter().map(|f| (f.path.parts(), &f.id)))
}

/// The digest of [`content_id`] over files sorted by path, each as its path's parts and id.
fn content_id_of<'f>(files: impl Iterator<Item = ([&'f [u8]; 3], &'f GitId)>) -> String {
    let mut id = ContentId::new();
    for (path, file) in files {
        id.add(path, file);
    }
    id.finish()
}

/// [`content_id`] computed a file at a time, in path order.
struct ContentId(Sha256);

impl ContentId {
    fn new() -> ContentId {
        let mut h = Sha256::new();
        h.update(b"kalypso-oci-content 1\n");
        ContentId(h)
    }

    /// Adds the next file: its path's parts and its id.
    fn add(&mut self, path: [&[u8]; 3], id: &GitId) {
        for part in path {
            self.0.update(part);
        }
        self.0.update([0]);
        self.0.update(id.0);
        self.0.update(b"\n");
    }

    fn finish(self) -> String {
        format!("sha256:{}", hex::encode(self.0.finalize()))
    }
}

/// Every cluster type of `content`: those of the environment, and any holding a package.
fn cluster_types(content: &RepoContent) -> BTreeSet<&str> {
    let mut all: BTreeSet<&str> = content.cluster_types.iter().map(String::as_str).collect();
    all.extend(content.packages.keys().map(|(ct, _)| ct.as_str()));
    all.extend(content.delivered.iter().map(|(ct, _)| ct.as_str()));
    all
}

/// [`Rules::for_content`], made when a failing WorkloadRegistration's kept folders first need
/// it: the rules index every assignment (93,020 at the M fleet), and most deliveries keep none.
struct LazyRules<'c> {
    content: &'c RepoContent,
    rules: std::sync::OnceLock<Rules<'c>>,
}

impl<'c> LazyRules<'c> {
    fn new(content: &'c RepoContent) -> LazyRules<'c> {
        LazyRules {
            content,
            rules: std::sync::OnceLock::new(),
        }
    }

    fn get(&self) -> &Rules<'c> {
        self.rules.get_or_init(|| Rules::for_content(self.content))
    }
}

/// The previous artifacts' files, read once each when needed.
struct Previous<'a> {
    registry: Option<&'a Registry>,
    location: &'a Location,
    index: Option<&'a Index>,
    /// Files given instead of read (plans: the current tree's).
    given: Option<&'a BTreeMap<String, BTreeMap<String, Blob>>>,
    read: Mutex<HashMap<String, std::sync::Arc<BTreeMap<String, Blob>>>>,
}

impl Previous<'_> {
    /// The files of `cluster_type`'s artifact before this delivery (empty if it had none).
    fn files(&self, cluster_type: &str) -> Result<std::sync::Arc<BTreeMap<String, Blob>>, Error> {
        if let Some(given) = self.given {
            return Ok(std::sync::Arc::new(
                given.get(cluster_type).cloned().unwrap_or_default(),
            ));
        }
        if let Some(files) = self
            .read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(cluster_type)
        {
            return Ok(files.clone());
        }
        let files = match (
            self.registry,
            self.index.and_then(|i| i.cluster_types.get(cluster_type)),
        ) {
            (Some(registry), Some(entry)) => {
                read::layer(registry, self.location, cluster_type, entry, Access::Push)?
            }
            _ => BTreeMap::new(),
        };
        let files = std::sync::Arc::new(files);
        self.read
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(cluster_type.to_owned(), files.clone());
        Ok(files)
    }
}

/// How the artifacts of an environment's cluster types are laid out: the content, the ids of
/// the files of the assignments delivered before, the commit promoted and the artifacts
/// delivered before (for a failing WorkloadRegistration's kept folders).
struct Layout<'c, 'a> {
    content: &'c RepoContent,
    ids: &'a Ids<'a>,
    rules: LazyRules<'c>,
    promoted: Option<&'a str>,
    previous: &'a Previous<'a>,
}

impl<'c, 'a> Layout<'c, 'a> {
    fn new(
        content: &'c RepoContent,
        ids: &'a Ids<'a>,
        promoted: Option<&'a str>,
        previous: &'a Previous<'a>,
    ) -> Layout<'c, 'a> {
        Layout {
            content,
            ids,
            rules: LazyRules::new(content),
            promoted,
            previous,
        }
    }

    /// The files of `cluster_type`'s artifact by id (contents where known), sorted by path.
    fn plan(&self, cluster_type: &str) -> Result<Vec<Planned<'c>>, Error> {
        let mut files = Vec::new();
        self.walk(cluster_type, &mut |file| files.push(file))?;
        Ok(files)
    }

    /// The content id of `cluster_type`'s artifact as [`Layout::plan`] lays it out, hashed as
    /// the files are walked: the unchanged cluster types of a sync (all but a few) never hold
    /// their 280,000 files at once.
    fn content_id(&self, cluster_type: &str) -> Result<String, Error> {
        let mut id = ContentId::new();
        self.walk(cluster_type, &mut |file| id.add(file.path.parts(), &file.id))?;
        Ok(id.finish())
    }

    /// Walks the files of `cluster_type`'s artifact by id (contents where known) in path
    /// order, giving each to `emit`.
    fn walk(&self, cluster_type: &str, emit: &mut dyn FnMut(Planned<'c>)) -> Result<(), Error> {
        let Layout {
            content,
            ids,
            ref rules,
            promoted,
            previous,
        } = *self;
        // The deployment targets' folders, each with its files in name order, in the order of
        // their paths (a folder's paths are `{folder}/...`, so folders sort as `{folder}/`).
        let start = (cluster_type.to_owned(), String::new());
        let rendered = content
            .packages
            .range(start.clone()..)
            .take_while(|((ct, _), _)| ct == cluster_type)
            .map(|((_, dt), package)| (dt.as_str(), Some(package)));
        let delivered = content
            .delivered
            .range(start..)
            .take_while(|(ct, _)| ct == cluster_type)
            .map(|(_, dt)| (dt.as_str(), None));
        let mut folders: Vec<(&str, Option<&Package>)> = rendered.chain(delivered).collect();
        folders.sort_by(|(a, _), (b, _)| PlannedPath::InFolder(a, "").order(&PlannedPath::InFolder(b, "")));
        // The few other files, sorted, each given where its path sorts among the folders' files.
        let mut others = Vec::new();
        if content.cluster_types.contains(cluster_type) {
            let text = readme();
            others.push(Planned {
                path: PlannedPath::Whole(README.to_owned()),
                id: GitId::of_blob(&text),
                content: Some(text),
            });
        }
        if content.kept.iter().any(|kept| kept.applies_to(cluster_type)) {
            // A failing WorkloadRegistration's folders keep what was delivered before.
            let targets: BTreeSet<&str> = folders.iter().map(|(dt, _)| *dt).collect();
            let before = previous.files(cluster_type)?;
            for (path, blob) in before.iter() {
                let Some((dt, _)) = path.split_once('/') else {
                    continue;
                };
                if dt.starts_with('.') || targets.contains(dt) || !rules.get().keeps_folder(cluster_type, dt)
                {
                    continue;
                }
                others.push(Planned {
                    path: PlannedPath::Whole(path.clone()),
                    id: GitId::of_blob(blob),
                    content: Some(blob.clone()),
                });
            }
        }
        if let Some(commit) = promoted {
            let blob = Blob::from(commit.as_bytes());
            others.push(Planned {
                path: PlannedPath::Whole(PROMOTED_COMMIT_PATH.to_owned()),
                id: GitId::of_blob(&blob),
                content: Some(blob),
            });
        }
        others.sort_by(|a, b| a.path.order(&b.path));
        let mut others = others.into_iter().peekable();
        let mut in_folder = Vec::new();
        for &(dt, package) in &folders {
            match package {
                Some(package) => in_folder.extend(package.files().map(|(name, blob)| Planned {
                    path: PlannedPath::InFolder(dt, name),
                    id: GitId::of_blob(blob),
                    content: Some(blob.clone()),
                })),
                None => {
                    let known = ids(cluster_type, dt).ok_or_else(|| Error::NotDelivered {
                        cluster_type: cluster_type.to_owned(),
                        path: format!("{dt}/"),
                    })?;
                    in_folder.extend(known.into_iter().map(|(name, id)| Planned {
                        path: PlannedPath::InFolder(dt, name),
                        id,
                        content: None,
                    }));
                }
            }
            in_folder.sort_by(|a, b| a.path.order(&b.path));
            for file in in_folder.drain(..) {
                // On a tie (there is none: a kept folder is no target's) the folder's file first.
                while let Some(other) = others.next_if(|other| other.path.order(&file.path).is_lt()) {
                    emit(other);
                }
                emit(file);
            }
        }
        others.for_each(emit);
        Ok(())
    }
}

/// Gives every file known by id its content, from the artifact delivered before (checked
/// against the id).
fn complete(cluster_type: &str, files: &mut [File], previous: &Previous<'_>) -> Result<(), Error> {
    if files.iter().all(|f| f.content.is_some()) {
        return Ok(());
    }
    let before = previous.files(cluster_type)?;
    let mut by_id: Option<HashMap<GitId, Blob>> = None;
    for file in files.iter_mut().filter(|f| f.content.is_none()) {
        let at_path = before
            .get(&file.path)
            .filter(|blob| GitId::of_blob(blob) == file.id)
            .cloned();
        let found = at_path.or_else(|| {
            by_id
                .get_or_insert_with(|| before.values().map(|b| (GitId::of_blob(b), b.clone())).collect())
                .get(&file.id)
                .cloned()
        });
        file.content = Some(found.ok_or_else(|| Error::NotDelivered {
            cluster_type: cluster_type.to_owned(),
            path: file.path.clone(),
        })?);
    }
    Ok(())
}

/// The promoted commit the artifacts carry: the one pinned now, else the one they carried.
fn promoted<'a>(content: &'a RepoContent, before: Option<&'a Index>) -> Option<&'a str> {
    content
        .promoted_commit
        .as_deref()
        .filter(|c| !c.is_empty())
        .or_else(|| before.and_then(|i| i.promoted_commit.as_deref()))
}

/// The environment as delivering `content` on top of `current` (a tree in the git form's
/// layout, as [`read::tree`] gives) would leave it, in the same layout: for `plan` and `diff`.
pub fn planned_tree(
    content: &RepoContent,
    current: &kalypso_core::tree::Tree,
) -> Result<kalypso_core::tree::Tree, Error> {
    let mut by_ct: BTreeMap<String, BTreeMap<String, Blob>> = BTreeMap::new();
    for (path, blob) in current.iter() {
        if let Some((ct, rest)) = path.split_once('/')
            && !ct.starts_with('.')
        {
            by_ct
                .entry(ct.to_owned())
                .or_default()
                .insert(rest.to_owned(), blob.clone());
        }
    }
    let current_promoted = current
        .get(PROMOTED_COMMIT_PATH)
        .map(|b| String::from_utf8_lossy(b).into_owned());
    let location = Location::parse("oci://plan.invalid/plan").map_err(Error::Reference)?;
    let previous = Previous {
        registry: None,
        location: &location,
        index: None,
        given: Some(&by_ct),
        read: Mutex::default(),
    };
    let promoted = content
        .promoted_commit
        .as_deref()
        .filter(|c| !c.is_empty())
        .or(current_promoted.as_deref());
    let none = |_: &str, _: &str| None;
    let layout = Layout::new(content, &none, promoted, &previous);
    let mut tree = kalypso_core::tree::Tree::new();
    for ct in cluster_types(content) {
        let mut files: Vec<File> = layout.plan(ct)?.into_iter().map(Planned::into_file).collect();
        complete(ct, &mut files, &previous)?;
        for file in files {
            if file.path != PROMOTED_COMMIT_PATH
                && let Some(blob) = file.content
            {
                tree.insert(format!("{ct}/{}", file.path), blob);
            }
        }
    }
    if let Some(commit) = promoted {
        tree.insert(PROMOTED_COMMIT_PATH, Blob::from(commit.as_bytes()));
    }
    Ok(tree)
}

/// An artifact built and ready to upload.
struct Built {
    cluster_type: String,
    repo: String,
    config: Vec<u8>,
    config_digest: Digest,
    layer: archive::Layer,
    manifest: Vec<u8>,
    manifest_digest: Digest,
    content: String,
    /// [`Entry::deployment_targets`].
    deployment_targets: String,
}

/// Delivers `content` to `dest`: see the module's documentation.
pub fn deliver(
    registry: &Registry,
    dest: Destination<'_>,
    content: &RepoContent,
    ids: &Ids<'_>,
    provenance: &Provenance,
    settings: &Settings,
) -> Result<Report, Error> {
    check_tag(dest.tag)?;
    let before = read::index(registry, dest.location, dest.tag, Access::Push)?;
    deliver_over(registry, dest, before, content, ids, provenance, settings)
}

/// [`deliver`] over `before`, the index `dest`'s tag held when this delivery began, as the
/// caller read it with [`read::index`] (for placement: a sync reads the index once, not once
/// for placement and again to deliver; `None` when the tag had none).
pub fn deliver_over(
    registry: &Registry,
    dest: Destination<'_>,
    before: Option<Snapshot>,
    content: &RepoContent,
    ids: &Ids<'_>,
    provenance: &Provenance,
    settings: &Settings,
) -> Result<Report, Error> {
    let location = dest.location;
    check_tag(dest.tag)?;
    let commit_tag = (!provenance.commit.is_empty()).then(|| provenance.commit.clone());
    if let Some(tag) = &commit_tag {
        check_tag(tag)?;
    }
    let names = cluster_types(content);
    let repos: BTreeMap<&str, String> = names
        .iter()
        .map(|ct| Ok((*ct, location.cluster_type_repository(ct)?)))
        .collect::<Result<_, Error>>()?;
    let before_index = before.as_ref().map(|s| &s.index);
    let promoted = promoted(content, before_index);
    let previous = Previous {
        registry: Some(registry),
        location,
        index: before_index,
        given: None,
        read: Mutex::default(),
    };
    let layout = Layout::new(content, ids, promoted, &previous);
    // Each cluster type's content id: for one the index lists with its folders, hashed as its
    // files are walked by id (most are unchanged); the others, and the changed ones, are laid
    // out, and only the changed ones keep their files, with their paths built.
    let planned: Vec<(String, Result<Entry, Vec<File>>, String)> = names
        .par_iter()
        .map(|ct| {
            let before = before_index.and_then(|i| i.cluster_types.get(*ct));
            if let Some(entry) = before.filter(|entry| entry.deployment_targets.is_some()) {
                let id = layout.content_id(ct)?;
                if entry.content == id {
                    return Ok(((*ct).to_owned(), Ok(entry.clone()), id));
                }
            }
            let files = layout.plan(ct)?;
            let id = planned_content_id(&files);
            let outcome = match before {
                Some(entry) if entry.content == id => {
                    // The same content id is the same paths, so the same folders: an index
                    // written before the folders were recorded gets them now.
                    let mut entry = entry.clone();
                    entry.deployment_targets = Some(artifact::encode_folders(&planned_folders(&files)));
                    Ok(entry)
                }
                _ => Err(files.into_iter().map(Planned::into_file).collect()),
            };
            Ok(((*ct).to_owned(), outcome, id))
        })
        .collect::<Result<_, Error>>()?;
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    let mut changed: Vec<(String, Vec<File>, String)> = Vec::new();
    for (ct, outcome, id) in planned {
        match outcome {
            Ok(entry) => {
                entries.insert(ct, entry);
            }
            Err(files) => changed.push((ct, files, id)),
        }
    }
    let unchanged = entries.len();
    tracing::debug!(
        cluster_types = names.len(),
        changed = changed.len(),
        unchanged = entries.len(),
        "artifacts laid out by id"
    );
    let retired: Vec<String> = before_index
        .map(|i| {
            i.cluster_types
                .keys()
                .filter(|ct| !names.contains(ct.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let was_new = |ct: &str| before_index.is_none_or(|i| !i.cluster_types.contains_key(ct));
    let nothing_to_do = changed.is_empty() && retired.is_empty() && before.is_some();
    let mut report = Report {
        location: location.to_string(),
        tag: dest.tag.to_owned(),
        index: before.as_ref().map(|s| s.digest.clone()),
        changed: !nothing_to_do,
        pushed: Vec::new(),
        unchanged,
        retired,
        blobs_uploaded: 0,
        bytes_uploaded: 0,
        dry_run: settings.dry_run,
    };
    if nothing_to_do {
        return Ok(report);
    }
    if settings.dry_run {
        report.pushed = changed
            .iter()
            .map(|(ct, files, _)| Pushed {
                cluster_type: ct.clone(),
                manifest: Digest::of(b""),
                layer_size: 0,
                files: files.len(),
                new: was_new(ct),
            })
            .collect();
        return Ok(report);
    }
    let traffic_before = registry.traffic();
    let annotations = |ct: Option<&str>, content: Option<&str>| {
        let mut a = BTreeMap::new();
        a.insert(artifact::SOURCE.to_owned(), provenance.source.clone());
        a.insert(artifact::REVISION.to_owned(), provenance.revision());
        a.insert(artifact::CREATED.to_owned(), provenance.created.clone());
        a.insert(artifact::ENVIRONMENT.to_owned(), provenance.environment.clone());
        if !provenance.main_commit.is_empty() {
            a.insert(artifact::MAIN_COMMIT.to_owned(), provenance.main_commit.clone());
        }
        if let Some(commit) = promoted {
            a.insert(artifact::PROMOTED_COMMIT.to_owned(), commit.to_owned());
        }
        if let Some(ct) = ct {
            a.insert(artifact::CLUSTER_TYPE.to_owned(), ct.to_owned());
        }
        if let Some(content) = content {
            a.insert(artifact::CONTENT.to_owned(), content.to_owned());
        }
        a
    };
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let fail = |e: Error| {
        failed.store(true, Ordering::SeqCst);
        let mut slot = first_error.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(e);
        }
    };
    let pushed: Mutex<Vec<(Pushed, Entry)>> = Mutex::new(Vec::new());
    let build = |(ct, mut files, id): (String, Vec<File>, String)| -> Result<Built, Error> {
        complete(&ct, &mut files, &previous)?;
        let deployment_targets = artifact::encode_folders(&folders(&files));
        let layer = archive::build(
            files
                .iter()
                .map(|f| (f.path.as_str(), f.content.as_deref().unwrap_or_default())),
            settings.level,
        )
        .map_err(|e| Error::Corrupt {
            what: format!("the artifact of {ct}"),
            reason: e.to_string(),
        })?;
        let config = artifact::flux_config(&provenance.created, &layer.diff_id);
        let config_digest = Digest::of(&config);
        let manifest = Manifest::new(
            Descriptor {
                media_type: CONFIG_MEDIA_TYPE.to_owned(),
                size: config.len() as u64,
                digest: config_digest.clone(),
            },
            vec![Descriptor {
                media_type: CONTENT_MEDIA_TYPE.to_owned(),
                size: layer.bytes.len() as u64,
                digest: layer.digest.clone(),
            }],
            annotations(Some(&ct), Some(&id)),
        )
        .to_bytes();
        let repo = repos[ct.as_str()].clone();
        Ok(Built {
            cluster_type: ct,
            repo,
            config,
            config_digest,
            manifest_digest: Digest::of(&manifest),
            manifest,
            layer,
            content: id,
            deployment_targets,
        })
    };
    let upload = |built: &Built| -> Result<(), Error> {
        let current = registry.manifest_digest(location, &built.repo, dest.tag, Access::Push)?;
        if current.as_ref() == Some(&built.manifest_digest) {
            // Pushed by an earlier delivery that did not get to write the index.
            return Ok(());
        }
        for (digest, bytes) in [
            (&built.layer.digest, &built.layer.bytes),
            (&built.config_digest, &built.config),
        ] {
            if !registry.has_blob(location, &built.repo, digest, Access::Push)? {
                registry.push_blob(location, &built.repo, digest, bytes)?;
            }
        }
        if let Some(tag) = &commit_tag
            && tag != dest.tag
        {
            registry.put_manifest(location, &built.repo, tag, &built.manifest)?;
        }
        registry.put_manifest(location, &built.repo, dest.tag, &built.manifest)?;
        Ok(())
    };
    let uploads = settings.uploads.max(1).min(changed.len().max(1));
    let (sender, receiver) = mpsc::sync_channel::<Built>(uploads * 2);
    let receiver = Mutex::new(receiver);
    std::thread::scope(|scope| {
        let receiver = &receiver;
        let (failed, upload, pushed, fail, was_new) = (&failed, &upload, &pushed, &fail, &was_new);
        for _ in 0..uploads {
            scope.spawn(move || {
                loop {
                    let next = receiver.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    let Ok(built) = next else { break };
                    // After a failure the queue is still drained, so that no builder blocks.
                    if failed.load(Ordering::SeqCst) {
                        continue;
                    }
                    match upload(&built) {
                        Ok(()) => pushed.lock().unwrap_or_else(PoisonError::into_inner).push((
                            Pushed {
                                new: was_new(&built.cluster_type),
                                cluster_type: built.cluster_type.clone(),
                                manifest: built.manifest_digest.clone(),
                                layer_size: built.layer.bytes.len() as u64,
                                files: built.layer.files,
                            },
                            Entry {
                                manifest: built.manifest_digest.clone(),
                                layer: built.layer.digest.clone(),
                                layer_size: built.layer.bytes.len() as u64,
                                content: built.content.clone(),
                                deployment_targets: Some(built.deployment_targets.clone()),
                            },
                        )),
                        Err(e) => fail(e),
                    }
                }
            });
        }
        changed.into_par_iter().for_each_with(sender, |sender, job| {
            if failed.load(Ordering::SeqCst) {
                return;
            }
            match build(job) {
                Ok(built) => {
                    let _ = sender.send(built);
                }
                Err(e) => fail(e),
            }
        });
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(e);
    }
    let mut pushed = pushed.into_inner().unwrap_or_else(PoisonError::into_inner);
    pushed.sort_by(|a, b| a.0.cluster_type.cmp(&b.0.cluster_type));
    for (p, entry) in &pushed {
        entries.insert(p.cluster_type.clone(), entry.clone());
    }
    report.pushed = pushed.into_iter().map(|(p, _)| p).collect();
    tracing::debug!(
        pushed = report.pushed.len(),
        "artifacts uploaded; writing the index"
    );
    // The index, last: it names the state every tag is now on.
    let index = Index {
        format: artifact::INDEX_FORMAT,
        environment: provenance.environment.clone(),
        revision: provenance.revision(),
        promoted_commit: promoted.map(str::to_owned),
        cluster_types: entries,
    };
    let config = index.to_bytes();
    let config_digest = Digest::of(&config);
    let mut index_annotations = annotations(None, None);
    if let Some(before) = &before {
        index_annotations.insert(artifact::PARENT.to_owned(), before.digest.to_string());
    }
    let manifest = Manifest::new(
        Descriptor {
            media_type: INDEX_MEDIA_TYPE.to_owned(),
            size: config.len() as u64,
            digest: config_digest.clone(),
        },
        Vec::new(),
        index_annotations,
    )
    .to_bytes();
    let repo = location.path();
    if !registry.has_blob(location, repo, &config_digest, Access::Push)? {
        registry.push_blob(location, repo, &config_digest, &config)?;
    }
    report.index = Some(registry.put_manifest(location, repo, dest.tag, &manifest)?);
    let traffic = registry.traffic();
    report.blobs_uploaded = traffic.blobs_uploaded - traffic_before.blobs_uploaded;
    report.bytes_uploaded = traffic.bytes_uploaded - traffic_before.bytes_uploaded;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_core::tree::{KeptFolders, Package, Tree};

    fn content() -> RepoContent {
        let mut content = RepoContent::default();
        for ct in ["drone", "large"] {
            content.cluster_types.insert(ct.to_owned());
            content.packages.insert(
                (ct.to_owned(), "app-dev".to_owned()),
                Package::new(
                    &[format!("kind: GitRepository # {ct}\n").into_bytes()],
                    &[b"kind: Namespace\n".to_vec()],
                    &[b"data: {}\n".to_vec()],
                    "yaml",
                ),
            );
        }
        content.promoted_commit = Some("0123456789abcdef0123456789abcdef01234567".to_owned());
        content
    }

    #[test]
    fn a_plan_lays_out_each_cluster_type_as_its_artifact() {
        let tree = planned_tree(&content(), &Tree::new()).unwrap();
        let paths: Vec<&str> = tree.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".github/tracking/Promoted_Commit_Id",
                "drone/README.md",
                "drone/app-dev/namespace.yaml",
                "drone/app-dev/platform-config.yaml",
                "drone/app-dev/reconciler.yaml",
                "large/README.md",
                "large/app-dev/namespace.yaml",
                "large/app-dev/platform-config.yaml",
                "large/app-dev/reconciler.yaml",
            ]
        );
    }

    #[test]
    fn a_plan_keeps_a_failing_registrations_folders_and_nothing_stale() {
        let mut current = planned_tree(&content(), &Tree::new()).unwrap();
        current.insert("drone/broken-dev/reconciler.yaml", Blob::from(&b"old"[..]));
        current.insert("drone/app-dev/stale.yaml", Blob::from(&b"stale"[..]));
        current.insert("root.md", Blob::from(&b"root"[..]));
        let mut next = content();
        next.promoted_commit = None;
        // Without isolation: the unscheduled folder, the stale file and root files go.
        let plain = planned_tree(&next, &current).unwrap();
        assert!(plain.get("drone/broken-dev/reconciler.yaml").is_none());
        assert!(plain.get("drone/app-dev/stale.yaml").is_none());
        assert!(plain.get("root.md").is_none());
        // The promoted commit the artifacts carried stays.
        assert_eq!(
            plain.get(PROMOTED_COMMIT_PATH).map(|b| b.to_vec()),
            Some(b"0123456789abcdef0123456789abcdef01234567".to_vec())
        );
        // A failing registration's folder stays while it fails.
        next.kept = vec![KeptFolders {
            claimed: BTreeSet::from(["app-dev".to_owned()]),
            cluster_types: None,
        }];
        let isolated = planned_tree(&next, &current).unwrap();
        assert_eq!(
            isolated
                .get("drone/broken-dev/reconciler.yaml")
                .map(|b| b.to_vec()),
            Some(b"old".to_vec())
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // `date -u -d @1795773600 +%FT%TZ`
        assert_eq!(rfc3339(1_795_773_600), "2026-11-27T10:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn planned_paths_sort_as_their_strings() {
        let folders = ["app", "app-dev", "app.x", "app0", "ap", "b", "app/"];
        let names = ["", "namespace.yaml", "reconciler.yaml", "a", "-", "0"];
        let mut paths: Vec<PlannedPath<'_>> = Vec::new();
        for folder in folders {
            for name in names {
                paths.push(PlannedPath::InFolder(folder, name));
            }
        }
        for whole in [
            "README.md",
            ".github/tracking/Promoted_Commit_Id",
            "app-dev/x",
            "app",
            "app/",
        ] {
            paths.push(PlannedPath::Whole(whole.to_owned()));
        }
        for a in &paths {
            for b in &paths {
                assert_eq!(a.order(b), a.to_string().cmp(&b.to_string()), "{a} against {b}");
            }
        }
    }

    #[test]
    fn a_planned_content_id_is_the_content_id_of_its_files() {
        let mut content = content();
        // Folders whose names are prefixes of each other, rendered and delivered.
        for dt in ["app", "app-a", "app.b"] {
            content.delivered.insert(("drone".to_owned(), dt.to_owned()));
        }
        let ids = |_: &str, dt: &str| {
            Some(vec![
                ("reconciler.yaml", GitId::of_blob(dt.as_bytes())),
                ("namespace.yaml", GitId::of_blob(b"ns")),
            ])
        };
        let location = Location::parse("oci://plan.invalid/plan").unwrap();
        let previous = Previous {
            registry: None,
            location: &location,
            index: None,
            given: None,
            read: Mutex::default(),
        };
        let planned = Layout::new(&content, &ids, Some("0123"), &previous)
            .plan("drone")
            .unwrap();
        let files: Vec<File> = planned.iter().cloned().map(Planned::into_file).collect();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        let mut sorted = paths.clone();
        sorted.sort_unstable();
        assert_eq!(paths, sorted);
        assert_eq!(paths.len(), 11);
        assert_eq!(planned_content_id(&planned), content_id(&files));
        assert_eq!(
            planned_folders(&planned),
            ["app", "app-a", "app-dev", "app.b"].map(str::to_owned)
        );
        assert_eq!(planned_folders(&planned), folders(&files));
    }

    #[test]
    fn a_walked_content_id_is_the_content_id_of_the_planned_files() {
        let mut content = content();
        // Rendered and delivered folders whose names are prefixes of each other, and a
        // failing registration's kept folders, which sort among them.
        for dt in ["app", "app-a", "app.b", "zed"] {
            content.delivered.insert(("drone".to_owned(), dt.to_owned()));
        }
        content.kept = vec![KeptFolders {
            claimed: BTreeSet::from(["app-dev".to_owned()]),
            cluster_types: None,
        }];
        let ids = |_: &str, dt: &str| {
            Some(vec![
                ("reconciler.yaml", GitId::of_blob(dt.as_bytes())),
                ("namespace.yaml", GitId::of_blob(b"ns")),
            ])
        };
        let before: BTreeMap<String, BTreeMap<String, Blob>> = BTreeMap::from([(
            "drone".to_owned(),
            ["app-/x", "app-b/reconciler.yaml", "README.md", "b/a", "zz/x"]
                .into_iter()
                .map(|path| (path.to_owned(), Blob::from(path.as_bytes())))
                .collect(),
        )]);
        let location = Location::parse("oci://plan.invalid/plan").unwrap();
        let previous = Previous {
            registry: None,
            location: &location,
            index: None,
            given: Some(&before),
            read: Mutex::default(),
        };
        for (ct, promoted) in [("drone", Some("0123")), ("drone", None), ("large", Some("0123"))] {
            let layout = Layout::new(&content, &ids, promoted, &previous);
            let planned = layout.plan(ct).unwrap();
            let files: Vec<File> = planned.iter().cloned().map(Planned::into_file).collect();
            let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
            let mut sorted = paths.clone();
            sorted.sort_unstable();
            assert_eq!(paths, sorted);
            let walked = layout.content_id(ct).unwrap();
            assert_eq!(walked, content_id(&files), "{ct} {promoted:?}");
            assert_eq!(walked, planned_content_id(&planned));
        }
        // The kept folders are in the layout, between the targets' folders.
        let planned = Layout::new(&content, &ids, None, &previous)
            .plan("drone")
            .unwrap();
        let paths: Vec<String> = planned.iter().map(|f| f.path.to_string()).collect();
        for kept in ["app-/x", "app-b/reconciler.yaml", "b/a", "zz/x"] {
            assert!(paths.iter().any(|p| p == kept), "{kept} in {paths:?}");
        }
        // A target no delivery knows is an error either way.
        let unknown = |_: &str, _: &str| None;
        assert!(matches!(
            Layout::new(&content, &unknown, None, &previous).content_id("drone"),
            Err(Error::NotDelivered { .. })
        ));
    }

    #[test]
    fn content_ids_depend_on_paths_and_ids_only() {
        let file = |path: &str, text: &str| File {
            path: path.to_owned(),
            id: GitId::of_blob(text.as_bytes()),
            content: None,
        };
        let a = [file("a/x", "1"), file("b", "2")];
        let b = [file("b", "2"), file("a/x", "1")];
        assert_eq!(content_id(&a), content_id(&b));
        assert_ne!(content_id(&a), content_id(&[file("a/x", "1"), file("b", "3")]));
        assert_ne!(content_id(&a), content_id(&[file("a/y", "1"), file("b", "2")]));
    }
}
