//! The render cache: what `kalypso render` last wrote into an output folder, so that the next
//! render only re-renders and rewrites what changed.
//!
//! For every assignment the cache keeps the fingerprint of its inputs (see
//! `kalypso_core::fingerprint`) and, for each file it wrote, a digest of the content and the
//! file's stat signature (size, modification and change times, inode). An assignment is
//! *clean* — its files need neither rendering nor writing — only if its fingerprint is
//! unchanged and every one of its files still has the recorded signature; anything edited,
//! replaced or deleted behind kalypso's back makes it dirty again. The cache lives outside the
//! output folder (which is usually a git checkout), in the user's cache directory, one file
//! per output folder and environment. A missing, unreadable or outdated cache only costs time.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kalypso_core::fingerprint::{FORMAT, Fingerprint, digest};

const HEADER: &str = "kalypso-render-cache 1";

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
        let meta = fs::symlink_metadata(path).ok()?;
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
    /// The content digest.
    pub digest: Fingerprint,
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
    entries: HashMap<(String, String), CachedAssignment>,
}

/// The cache file for `out` and `env` in `cache_dir`.
pub fn cache_file(cache_dir: &Path, out: &Path, env: &str) -> PathBuf {
    let canonical = fs::canonicalize(out).unwrap_or_else(|_| out.to_owned());
    let key = digest(format!("{}\0{env}", canonical.display()).as_bytes());
    cache_dir.join(format!("render-{key:032x}.tsv"))
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

impl RenderCache {
    /// Reads a cache file; anything missing, unreadable or from another kalypso version
    /// gives an empty cache.
    pub fn load(path: &Path) -> RenderCache {
        let Ok(text) = fs::read_to_string(path) else {
            return RenderCache::default();
        };
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) || lines.next() != Some(FORMAT) {
            return RenderCache::default();
        }
        let mut entries = HashMap::new();
        for line in lines {
            let Some((key, entry)) = parse_line(line) else {
                return RenderCache::default();
            };
            entries.insert(key, entry);
        }
        RenderCache { entries }
    }

    /// Whether the assignment's files in `out` are exactly what a render with this
    /// `fingerprint` writes.
    pub fn is_clean(&self, out: &Path, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> bool {
        let Some(entry) = self.entries.get(&(cluster_type.to_owned(), target.to_owned())) else {
            return false;
        };
        entry.fingerprint == fingerprint
            && entry
                .files
                .iter()
                .all(|f| Stamp::of(&out.join(cluster_type).join(target).join(&f.name)) == Some(f.stamp))
    }

    /// The entry of an assignment.
    pub fn get(&self, cluster_type: &str, target: &str) -> Option<&CachedAssignment> {
        self.entries.get(&(cluster_type.to_owned(), target.to_owned()))
    }

    /// Replaces all entries.
    pub fn replace(&mut self, entries: HashMap<(String, String), CachedAssignment>) {
        self.entries = entries;
    }

    /// Number of assignments known.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache knows nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes the cache file (atomically: a temporary file renamed into place).
    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut keys: Vec<&(String, String)> = self.entries.keys().collect();
        keys.sort();
        let mut text = String::with_capacity(self.entries.len() * 200);
        text.push_str(HEADER);
        text.push('\n');
        text.push_str(FORMAT);
        text.push('\n');
        for key in keys {
            let entry = &self.entries[key];
            text.push_str(&format!("{}\t{}\t{:032x}", key.0, key.1, entry.fingerprint));
            for f in &entry.files {
                let s = f.stamp;
                text.push_str(&format!(
                    "\t{}:{:032x}:{}:{}:{}:{}",
                    f.name, f.digest, s.size, s.mtime_ns, s.ctime_ns, s.inode
                ));
            }
            text.push('\n');
        }
        let temp = path.with_extension("tsv.tmp");
        let mut file = fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        drop(file);
        fs::rename(&temp, path)
    }
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
            let digest = u128::from_str_radix(parts.next()?, 16).ok()?;
            let stamp = Stamp {
                size: parts.next()?.parse().ok()?,
                mtime_ns: parts.next()?.parse().ok()?,
                ctime_ns: parts.next()?.parse().ok()?,
                inode: parts.next()?.parse().ok()?,
            };
            Some(CachedFile { name, digest, stamp })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(((ct, dt), CachedAssignment { fingerprint, files }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_changes() {
        let out = tempfile::tempdir().unwrap();
        let cache_dir = tempfile::tempdir().unwrap();
        let folder = out.path().join("large/app-t");
        fs::create_dir_all(&folder).unwrap();
        fs::write(folder.join("reconciler.yaml"), "a").unwrap();
        let stamp = Stamp::of(&folder.join("reconciler.yaml")).unwrap();
        let mut cache = RenderCache::default();
        cache.replace(HashMap::from([(
            ("large".to_owned(), "app-t".to_owned()),
            CachedAssignment {
                fingerprint: 42,
                files: vec![CachedFile {
                    name: "reconciler.yaml".into(),
                    digest: digest(b"a"),
                    stamp,
                }],
            },
        )]));
        let path = cache_file(cache_dir.path(), out.path(), "dev");
        cache.save(&path).unwrap();
        let loaded = RenderCache::load(&path);
        assert_eq!(loaded.get("large", "app-t"), cache.get("large", "app-t"));
        assert!(loaded.is_clean(out.path(), "large", "app-t", 42));
        assert!(
            !loaded.is_clean(out.path(), "large", "app-t", 43),
            "another fingerprint"
        );
        assert!(
            !loaded.is_clean(out.path(), "large", "other", 42),
            "unknown assignment"
        );
        fs::remove_file(folder.join("reconciler.yaml")).unwrap();
        fs::write(folder.join("reconciler.yaml"), "b").unwrap();
        assert!(
            !loaded.is_clean(out.path(), "large", "app-t", 42),
            "file replaced"
        );
    }

    #[test]
    fn unreadable_caches_are_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.tsv");
        fs::write(&path, "kalypso-render-cache 1\nsome other version\n").unwrap();
        assert!(RenderCache::load(&path).is_empty());
        fs::write(&path, format!("{HEADER}\n{FORMAT}\nbroken line\n")).unwrap();
        assert!(RenderCache::load(&path).is_empty());
        assert!(RenderCache::load(&dir.path().join("missing")).is_empty());
    }
}
