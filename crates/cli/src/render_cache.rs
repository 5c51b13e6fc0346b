//! The render cache: what `kalypso render` last wrote into an output folder, so that the next
//! render only re-renders and rewrites what changed. It is the folder's memo
//! ([`kalypso_core::run::RenderMemo`], see [`FolderMemo`]): the form incremental rendering
//! takes for a folder, as the record of delivered files is for git.
//!
//! For every assignment the cache keeps the fingerprint of its inputs (see
//! `kalypso_core::fingerprint`) and, for each file it wrote, the file's stat signature (size,
//! modification and change times, inode). An assignment is
//! *clean* — its files need neither rendering nor writing — only if its fingerprint is
//! unchanged and every one of its files still has the recorded signature; anything edited,
//! replaced or deleted behind kalypso's back makes it dirty again. The cache lives outside the
//! output folder (which is usually a git checkout), in the user's cache directory: a folder
//! per output folder and environment, holding one file per cluster type so that a render
//! rewrites only the files of the cluster types it changed. A missing, unreadable or outdated
//! cache only costs time.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kalypso_core::fingerprint::{FORMAT, Fingerprint, digest};
use kalypso_core::run::RenderMemo;
use rayon::prelude::*;

const HEADER: &str = "kalypso-render-cache 2";

/// A file's stat signature: if any part changes, the file may have changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    inode: u64,
}

impl Stamp {
    /// The signature of the file at `path`, if it is a regular file.
    pub fn of(path: &Path) -> Option<Stamp> {
        Stamp::from_metadata(&fs::symlink_metadata(path).ok()?)
    }

    /// The signature of a file from its metadata, if it is a regular file.
    pub fn from_metadata(meta: &fs::Metadata) -> Option<Stamp> {
        if !meta.file_type().is_file() {
            return None;
        }
        Some(Stamp {
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            inode: meta.ino(),
        })
    }
}

/// One file an assignment wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedFile {
    /// The file name inside the assignment folder.
    pub name: String,
    /// The stat signature right after it was written.
    pub stamp: Stamp,
}

/// What the cache knows about one assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedAssignment {
    /// The fingerprint of its inputs.
    pub fingerprint: Fingerprint,
    /// The files it wrote.
    pub files: Vec<CachedFile>,
}

/// The cache of one output folder and environment.
#[derive(Debug, Default)]
pub struct RenderCache {
    /// Cluster type → deployment target → entry (nested, so lookups by `&str` allocate nothing).
    entries: HashMap<String, HashMap<String, CachedAssignment>>,
}

/// The render cache of one output folder as its memo: an assignment is held when it is clean
/// ([`RenderCache::is_clean`]).
#[derive(Debug)]
pub struct FolderMemo {
    /// The cache.
    pub cache: RenderCache,
    /// The output folder.
    pub out: PathBuf,
}

impl RenderMemo for FolderMemo {
    fn holds(&self, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> bool {
        self.cache.is_clean(&self.out, cluster_type, target, fingerprint)
    }
}

/// The cache folder for `out` and `env` in `cache_dir`.
pub fn cache_file(cache_dir: &Path, out: &Path, env: &str) -> PathBuf {
    let key = digest(format!("{}\0{env}", canonical_folder(out).display()).as_bytes());
    cache_dir.join(format!("render-{key:032x}"))
}

/// `path` made absolute with its symbolic links resolved, whether or not it exists yet (the
/// first render into a folder creates it): its deepest existing ancestor is resolved and the
/// rest appended, so the same folder always gets the same cache.
fn canonical_folder(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(canonical) = fs::canonicalize(existing) {
            return rest.iter().rev().fold(canonical, |dir, name| dir.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/kalypso` or `~/.cache/kalypso`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("kalypso"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".cache/kalypso"))
}

/// The file of one cluster type in a cache folder. Cluster type names are Kubernetes names
/// (checked when the control plane is loaded), so they are safe file names.
fn cluster_type_file(dir: &Path, cluster_type: &str) -> PathBuf {
    dir.join(format!("{cluster_type}.tsv"))
}

impl RenderCache {
    /// Reads a cache folder (one file per cluster type, read in parallel); anything missing,
    /// unreadable or from another kalypso version gives an empty cache.
    pub fn load(dir: &Path) -> RenderCache {
        let Ok(entries) = fs::read_dir(dir) else {
            return RenderCache::default();
        };
        let files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "tsv"))
            .collect();
        let parsed: Option<Vec<Vec<(String, String, CachedAssignment)>>> =
            files.par_iter().map(|file| parse_file(file)).collect();
        let mut cache = RenderCache::default();
        for (cluster_type, target, entry) in parsed.into_iter().flatten().flatten() {
            cache.insert(cluster_type, target, entry);
        }
        cache
    }

    fn insert(&mut self, cluster_type: String, target: String, entry: CachedAssignment) {
        self.entries
            .entry(cluster_type)
            .or_default()
            .insert(target, entry);
    }

    /// Whether assignment (`cluster_type`, `target`) is clean in `out` for `fingerprint`: its
    /// fingerprint is unchanged and its files still have the recorded stamps.
    pub fn is_clean(&self, out: &Path, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> bool {
        let Some(entry) = self.get(cluster_type, target) else {
            return false;
        };
        if entry.fingerprint != fingerprint {
            return false;
        }
        let mut path = out.join(cluster_type);
        path.push(target);
        entry.files.iter().all(|f| {
            path.push(&f.name);
            let same = Stamp::of(&path) == Some(f.stamp);
            path.pop();
            same
        })
    }

    /// The entry of an assignment.
    pub fn get(&self, cluster_type: &str, target: &str) -> Option<&CachedAssignment> {
        self.entries.get(cluster_type)?.get(target)
    }

    /// Brings the cache up to date after a render: drops the assignments for which `keep` is
    /// false, sets the entries of the re-rendered ones, and returns the cluster types whose
    /// entries changed (the files [`RenderCache::save`] must rewrite).
    pub fn update(
        &mut self,
        keep: impl Fn(&str, &str) -> bool,
        rendered: impl IntoIterator<Item = (String, String, CachedAssignment)>,
    ) -> BTreeSet<String> {
        let mut changed = BTreeSet::new();
        for (cluster_type, targets) in &mut self.entries {
            let before = targets.len();
            targets.retain(|target, _| keep(cluster_type, target));
            if targets.len() != before {
                changed.insert(cluster_type.clone());
            }
        }
        for (cluster_type, target, entry) in rendered {
            let same = self.get(&cluster_type, &target) == Some(&entry);
            if !same {
                changed.insert(cluster_type.clone());
                self.insert(cluster_type, target, entry);
            }
        }
        changed
    }

    /// Takes the stamps of the files of `targets` (cluster type, deployment target) again,
    /// after their folder was replaced by a tree of new hard links to the same files (which
    /// changes their change times only); an entry whose files are gone or differ in anything
    /// but the change time is dropped. Returns the cluster types whose entries changed.
    pub fn restamp<'t>(
        &mut self,
        out: &Path,
        targets: impl IntoIterator<Item = (&'t str, &'t str)>,
    ) -> BTreeSet<String> {
        let targets: Vec<(&str, &str)> = targets.into_iter().collect();
        let fresh: Vec<Option<Vec<Stamp>>> = targets
            .par_iter()
            .map(|(ct, dt)| {
                let entry = self.get(ct, dt)?;
                let folder = out.join(ct).join(dt);
                entry
                    .files
                    .iter()
                    .map(|f| {
                        let now = Stamp::of(&folder.join(&f.name))?;
                        let old = f.stamp;
                        (now.size == old.size && now.mtime_ns == old.mtime_ns && now.inode == old.inode)
                            .then_some(now)
                    })
                    .collect()
            })
            .collect();
        let mut changed = BTreeSet::new();
        for ((ct, dt), stamps) in targets.into_iter().zip(fresh) {
            let Some(known) = self.entries.get_mut(ct) else {
                continue;
            };
            match stamps {
                Some(stamps) => {
                    if let Some(entry) = known.get_mut(dt) {
                        for (file, stamp) in entry.files.iter_mut().zip(stamps) {
                            if file.stamp != stamp {
                                file.stamp = stamp;
                                changed.insert(ct.to_owned());
                            }
                        }
                    }
                }
                None => {
                    if known.remove(dt).is_some() {
                        changed.insert(ct.to_owned());
                    }
                }
            }
        }
        changed
    }

    /// Number of assignments known.
    pub fn len(&self) -> usize {
        self.entries.values().map(HashMap::len).sum()
    }

    /// Whether the cache knows nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.values().all(HashMap::is_empty)
    }

    /// Writes the files of the `changed` cluster types into the cache folder `dir` (each
    /// atomically: a temporary file renamed into place, in parallel), and deletes the files of
    /// cluster types the cache no longer knows.
    pub fn save(&self, dir: &Path, changed: &BTreeSet<String>) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        changed.par_iter().try_for_each(|cluster_type| {
            let path = cluster_type_file(dir, cluster_type);
            match self.entries.get(cluster_type).filter(|t| !t.is_empty()) {
                Some(targets) => {
                    let temp = path.with_extension("tsv.tmp");
                    let mut file = fs::File::create(&temp)?;
                    file.write_all(format_cluster_type(cluster_type, targets).as_bytes())?;
                    drop(file);
                    fs::rename(&temp, &path)
                }
                None => match fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                },
            }
        })
    }
}

/// The cache file of one cluster type: a header, then one line per deployment target.
fn format_cluster_type(cluster_type: &str, targets: &HashMap<String, CachedAssignment>) -> String {
    let mut targets: Vec<(&String, &CachedAssignment)> = targets.iter().collect();
    targets.sort_unstable_by_key(|(name, _)| *name);
    let mut text = String::with_capacity(64 + targets.len() * 300);
    text.push_str(HEADER);
    text.push('\n');
    text.push_str(FORMAT);
    text.push('\n');
    for (target, entry) in targets {
        // Writing into a String cannot fail.
        let _ = write!(text, "{cluster_type}\t{target}\t{:032x}", entry.fingerprint);
        for f in &entry.files {
            let s = f.stamp;
            let _ = write!(
                text,
                "\t{}:{}:{}:{}:{}",
                f.name, s.size, s.mtime_ns, s.ctime_ns, s.inode
            );
        }
        text.push('\n');
    }
    text
}

/// The entries of one cluster type's cache file; `None` if it is unreadable or from another
/// version.
fn parse_file(path: &Path) -> Option<Vec<(String, String, CachedAssignment)>> {
    let text = fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) || lines.next() != Some(FORMAT) {
        return None;
    }
    lines
        .map(|line| parse_line(line).map(|((ct, dt), entry)| (ct, dt, entry)))
        .collect()
}

fn parse_line(line: &str) -> Option<((String, String), CachedAssignment)> {
    let mut fields = line.split('\t');
    let ct = fields.next()?.to_owned();
    let dt = fields.next()?.to_owned();
    let fingerprint = u128::from_str_radix(fields.next()?, 16).ok()?;
    let files = fields
        .map(|f| {
            let mut parts = f.split(':');
            let name = parts.next()?.to_owned();
            let stamp = Stamp {
                size: parts.next()?.parse().ok()?,
                mtime_ns: parts.next()?.parse().ok()?,
                ctime_ns: parts.next()?.parse().ok()?,
                inode: parts.next()?.parse().ok()?,
            };
            Some(CachedFile { name, stamp })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(((ct, dt), CachedAssignment { fingerprint, files }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `target` on `cluster_type` is clean for `fingerprint`.
    fn is_clean(
        cache: &RenderCache,
        out: &Path,
        cluster_type: &str,
        target: &str,
        fingerprint: Fingerprint,
    ) -> bool {
        cache.is_clean(out, cluster_type, target, fingerprint)
    }

    fn entry(fingerprint: Fingerprint, stamp: Stamp) -> CachedAssignment {
        CachedAssignment {
            fingerprint,
            files: vec![CachedFile {
                name: "reconciler.yaml".into(),
                stamp,
            }],
        }
    }

    #[test]
    fn round_trips_and_detects_changes() {
        let out = tempfile::tempdir().unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        let folder = out.path().join("large/app-t");
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join("reconciler.yaml"), "a").unwrap();
        let stamp = Stamp::of(&folder.join("reconciler.yaml")).unwrap();
        let mut cache = RenderCache::default();
        let changed = cache.update(
            |_, _| true,
            [
                ("large".to_owned(), "app-t".to_owned(), entry(42, stamp)),
                ("small".to_owned(), "app-t".to_owned(), entry(7, stamp)),
            ],
        );
        assert_eq!(changed, BTreeSet::from(["large".to_owned(), "small".to_owned()]));
        let path = cache_file(cache_dir.path(), out.path(), "dev");
        cache.save(&path, &changed).unwrap();
        let loaded = RenderCache::load(&path);
        assert_eq!(loaded.len(), 2);
        assert_eq!(loaded.get("large", "app-t"), cache.get("large", "app-t"));
        assert!(is_clean(&loaded, out.path(), "large", "app-t", 42));
        assert!(
            !is_clean(&loaded, out.path(), "large", "app-t", 43),
            "another fingerprint"
        );
        assert!(
            !is_clean(&loaded, out.path(), "large", "other", 42),
            "unknown assignment"
        );
        fs::remove_file(folder.join("reconciler.yaml")).unwrap();
        fs::write(folder.join("reconciler.yaml"), "b").unwrap();
        assert!(
            !is_clean(&loaded, out.path(), "large", "app-t", 42),
            "file replaced"
        );

        // Setting an equal entry changes nothing; dropping a cluster type's only assignment
        // deletes its file.
        let changed = cache.update(
            |ct, _| ct == "large",
            [("large".to_owned(), "app-t".to_owned(), entry(42, stamp))],
        );
        assert_eq!(changed, BTreeSet::from(["small".to_owned()]));
        cache.save(&path, &changed).unwrap();
        assert!(!path.join("small.tsv").exists());
        assert!(path.join("large.tsv").exists());
        let loaded = RenderCache::load(&path);
        assert_eq!(loaded.len(), 1);
        assert!(loaded.get("small", "app-t").is_none());
    }

    #[test]
    fn a_folder_gets_the_same_cache_before_and_after_it_exists() {
        let cache_dir = Path::new("/cache");
        let base = tempfile::tempdir().unwrap();
        let out = base.path().join("out/dev");
        let before = cache_file(cache_dir, &out, "dev");
        fs::create_dir_all(&out).unwrap();
        assert_eq!(before, cache_file(cache_dir, &out, "dev"));
        // A relative path names the same folder as its absolute form.
        let cwd = std::env::current_dir().unwrap();
        let relative = Path::new("target/kalypso-cache-test/out");
        assert_eq!(
            cache_file(cache_dir, relative, "dev"),
            cache_file(cache_dir, &cwd.join(relative), "dev")
        );
        assert_ne!(before, cache_file(cache_dir, &out, "stage"));
    }

    #[test]
    fn unreadable_caches_are_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.tsv");
        fs::write(&path, "kalypso-render-cache 2\nsome other version\n").unwrap();
        assert!(RenderCache::load(dir.path()).is_empty());
        fs::write(&path, format!("{HEADER}\n{FORMAT}\nbroken line\n")).unwrap();
        assert!(RenderCache::load(dir.path()).is_empty());
        assert!(RenderCache::load(&dir.path().join("missing")).is_empty());
    }
}
