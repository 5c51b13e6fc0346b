//! The artifact's content: a gzipped tarball of a cluster type's folder, as `flux push
//! artifact` builds one (`fluxcd/pkg/tar`: regular files and folders, relative paths, user,
//! group and times zeroed) and as source-controller extracts it (`tar.Untar`: gzip required,
//! no absolute paths, no `..`, symlinks refused).
//!
//! The archive is deterministic, so that the same files always give the same bytes and the
//! same digest: entries sorted by path, each folder before its files, mode 0755 for folders
//! and 0644 for files, uid and gid 0, no user or group names, modification time 0, and a gzip
//! header without a name or time (operating system 255, "unknown", as Go's gzip writes it).
//! Long paths use ustar's prefix field and, beyond it, a GNU long-name entry, which Go's
//! reader understands. One pass writes the tar into the gzip stream while hashing both: the
//! layer's digest (of the gzip bytes) and its `diff_id` (of the tar), which the Flux config
//! records.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use flate2::Compression;
use kalypso_core::tree::Blob;
use sha2::{Digest as _, Sha256};

use crate::digest::Digest;

/// The mode of the folders in an archive.
const DIR_MODE: u32 = 0o755;
/// The mode of the files in an archive.
const FILE_MODE: u32 = 0o644;

/// A built layer: the gzipped tarball and what describes it.
#[derive(Clone, Debug)]
pub struct Layer {
    /// The gzip bytes.
    pub bytes: Vec<u8>,
    /// Their digest (the layer's descriptor).
    pub digest: Digest,
    /// The digest of the uncompressed tar (the config's `rootfs.diff_ids`).
    pub diff_id: Digest,
    /// Files in the archive.
    pub files: usize,
    /// Bytes of file content in the archive.
    pub content_bytes: u64,
}

/// A writer that hashes what goes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

/// Builds the layer of `files` (`/`-separated relative paths and contents, in any order;
/// paths unique). Gzip at `level` (0–9).
pub fn build<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>, level: u32) -> io::Result<Layer> {
    let mut files: Vec<(&str, &[u8])> = files.into_iter().collect();
    files.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let content_bytes: u64 = files.iter().map(|(_, c)| c.len() as u64).sum();
    let gzip_out = Hashing {
        inner: Vec::with_capacity((content_bytes / 6) as usize + 1024),
        hasher: Sha256::new(),
    };
    let gzip = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(gzip_out, Compression::new(level.min(9)));
    let tar_out = Hashing {
        inner: gzip,
        hasher: Sha256::new(),
    };
    let mut tar = tar::Builder::new(tar_out);
    let mut made: Vec<&str> = Vec::new();
    for (path, content) in &files {
        check_path(path)?;
        // Each folder once, before its first file: the paths are sorted, so a folder's
        // files are contiguous and its parent is made first.
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            let dir = &path[..end];
            if !made.contains(&dir) {
                made.retain(|m| dir.starts_with(m));
                made.push(dir);
                let mut h = header(tar::EntryType::Directory, 0, DIR_MODE);
                tar.append_data(&mut h, format!("{dir}/"), io::empty())?;
            }
            end += 1;
        }
        let mut h = header(tar::EntryType::Regular, content.len() as u64, FILE_MODE);
        tar.append_data(&mut h, path, *content)?;
    }
    let tar_out = tar.into_inner()?;
    let diff_id = Digest::from_hasher(tar_out.hasher);
    let gzip_out = tar_out.inner.finish()?;
    Ok(Layer {
        digest: Digest::from_hasher(gzip_out.hasher),
        bytes: gzip_out.inner,
        diff_id,
        files: files.len(),
        content_bytes,
    })
}

/// Refuses what source-controller's `tar.Untar` refuses, before it is written.
fn check_path(path: &str) -> io::Result<()> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path.split('/').any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{path:?} cannot be a path in an artifact"),
        ));
    }
    Ok(())
}

/// Why an archive cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not a gzipped tarball, or a broken one.
    #[error("not a gzipped tarball: {0}")]
    Format(String),
    /// A path escapes the artifact or is not UTF-8.
    #[error("entry {0:?} has a path that is absolute, goes up with '..' or is not UTF-8")]
    Path(String),
    /// A symbolic link or another special file (Flux refuses them too).
    #[error("entry {0:?} is not a regular file or a folder")]
    Special(String),
    /// More content than the limit.
    #[error("the content is larger than {0} bytes")]
    TooLarge(u64),
}

/// The files of a gzipped tarball (folders are implied by the paths), refusing what
/// source-controller refuses; at most `limit` bytes of content.
pub fn read(bytes: &[u8], limit: u64) -> Result<BTreeMap<String, Blob>, ReadError> {
    let format = |e: io::Error| ReadError::Format(e.to_string());
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for entry in archive.entries().map_err(format)? {
        let mut entry = entry.map_err(format)?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let path = raw.trim_start_matches("./").trim_end_matches('/').to_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if kind.is_pax_global_extensions() {
            continue;
        }
        if !(kind.is_file() || kind == tar::EntryType::Continuous) {
            return Err(ReadError::Special(path));
        }
        if std::str::from_utf8(&entry.path_bytes()).is_err() || check_path(&path).is_err() {
            return Err(ReadError::Path(raw));
        }
        total = total.saturating_add(entry.size());
        if total > limit {
            return Err(ReadError::TooLarge(limit));
        }
        let mut content = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut content).map_err(format)?;
        files.insert(path, Blob::from(content));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<(String, Vec<u8>)> {
        vec![
            ("README.md".into(), b"This folder".to_vec()),
            (
                "app-dev/reconciler.yaml".into(),
                b"kind: GitRepository\n".to_vec(),
            ),
            ("app-dev/namespace.yaml".into(), b"kind: Namespace\n".to_vec()),
            (".github/tracking/Promoted_Commit_Id".into(), b"0123".to_vec()),
            (
                format!("{}/platform-config.yaml", "t".repeat(240)),
                b"data: {}\n".to_vec(),
            ),
        ]
    }

    fn build_sample(order: impl Fn(&mut Vec<(String, Vec<u8>)>)) -> Layer {
        let mut files = sample();
        order(&mut files);
        build(files.iter().map(|(p, c)| (p.as_str(), c.as_slice())), 6).unwrap()
    }

    #[test]
    fn the_same_files_give_the_same_bytes() {
        let a = build_sample(|_| {});
        let b = build_sample(|f| f.reverse());
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(a.digest, Digest::of(&a.bytes));
        assert_eq!((a.files, a.content_bytes), (5, 11 + 20 + 16 + 4 + 9));
        let c = build_sample(|f| f[0].1.push(b'!'));
        assert_ne!(a.digest, c.digest);
        // gzip header: no name, time 0, OS 255.
        assert_eq!(&a.bytes[..4], &[0x1f, 0x8b, 8, 0]);
        assert_eq!(&a.bytes[4..8], &[0, 0, 0, 0]);
        assert_eq!(a.bytes[9], 255);
    }

    #[test]
    fn reads_back_what_it_wrote() {
        let layer = build_sample(|_| {});
        let files = read(&layer.bytes, 1 << 20).unwrap();
        let expected: BTreeMap<String, Blob> =
            sample().into_iter().map(|(p, c)| (p, Blob::from(c))).collect();
        assert_eq!(files, expected);
        assert!(matches!(read(&layer.bytes, 10), Err(ReadError::TooLarge(10))));
        assert!(matches!(read(b"not gzip", 10), Err(ReadError::Format(_))));
    }

    #[test]
    fn entries_are_sorted_folders_first_with_fixed_headers() {
        let layer = build_sample(|_| {});
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&layer.bytes[..]));
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let h = entry.header();
            assert_eq!(
                (h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()),
                (0, 0, 0)
            );
            assert_eq!(h.username().unwrap(), Some(""));
            let mode = h.mode().unwrap();
            assert_eq!(mode, if h.entry_type().is_dir() { 0o755 } else { 0o644 });
            names.push(String::from_utf8(entry.path_bytes().to_vec()).unwrap());
        }
        let long = "t".repeat(240);
        assert_eq!(
            names,
            [
                ".github/".to_owned(),
                ".github/tracking/".to_owned(),
                ".github/tracking/Promoted_Commit_Id".to_owned(),
                "README.md".to_owned(),
                "app-dev/".to_owned(),
                "app-dev/namespace.yaml".to_owned(),
                "app-dev/reconciler.yaml".to_owned(),
                format!("{long}/"),
                format!("{long}/platform-config.yaml"),
            ]
        );
        // The diff id is the digest of the tar itself.
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&layer.bytes[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(layer.diff_id, Digest::of(&tar));
    }

    #[test]
    fn refuses_paths_flux_would_refuse() {
        for bad in ["/etc/passwd", "../x", "a/../b", "a//b", "a\\b", ""] {
            assert!(build([(bad, &b""[..])], 6).is_err(), "{bad:?}");
        }
        // An archive with a symbolic link (as another tool could write) is refused.
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        tar.append_link(&mut h, "link", "/etc/passwd").unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(&tar.into_inner().unwrap()).unwrap();
        let bytes = gz.finish().unwrap();
        assert!(matches!(read(&bytes, 1 << 20), Err(ReadError::Special(_))));
    }
}
