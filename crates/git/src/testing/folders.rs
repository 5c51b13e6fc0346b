//! Folders as maps of files, for tests that build control planes and compare trees.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

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
