//! Folders as maps of files, for tests that build control planes and compare trees, and
//! snapshots that also see folders and links, for tests that check nothing was touched.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Every file under `dir`, by path relative to it (`/`-separated); empty if `dir` does not
/// exist.
pub fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Writes `files` (relative path → content) under `dir`, creating folders as needed.
pub fn write_files_under<C: AsRef<[u8]>>(dir: &Path, files: &BTreeMap<String, C>) {
    fs::create_dir_all(dir).unwrap();
    for (rel, content) in files {
        let target = dir.join(rel);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(target, content).unwrap();
    }
}

/// Copies every file under `from` to the same place under `to`.
pub fn copy_files(from: &Path, to: &Path) {
    write_files_under(to, &files_under(from));
}

/// Every file under `dir` as UTF-8 text, by path relative to it; panics on a file that is not
/// UTF-8.
pub fn text_files_under(dir: &Path) -> BTreeMap<String, String> {
    files_under(dir)
        .into_iter()
        .map(|(path, bytes)| {
            let text = String::from_utf8(bytes).unwrap_or_else(|_| panic!("{path} is not UTF-8"));
            (path, text)
        })
        .collect()
}

/// One entry of a [`snapshot`].
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// A folder (its entries are entries of the snapshot too).
    Dir,
    /// A regular file and its bytes.
    File(Vec<u8>),
    /// A symbolic link and where it points (never followed).
    Symlink(PathBuf),
}

/// Everything under `dir`, including folders and symbolic links (not followed), by path
/// relative to it: two snapshots are equal when nothing under `dir` was added, removed or
/// changed.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let kind = entry.file_type().unwrap();
            let value = if kind.is_symlink() {
                Entry::Symlink(fs::read_link(&path).unwrap())
            } else if kind.is_dir() {
                stack.push(path.clone());
                Entry::Dir
            } else {
                Entry::File(fs::read(&path).unwrap())
            };
            out.insert(rel, value);
        }
    }
    out
}
