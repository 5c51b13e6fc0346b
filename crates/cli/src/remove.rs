//! Removing what kalypso made beside or in an output folder (staging folders, the folders
//! made for lock files), whatever permissions a user or a killed render left on it. Below `output` and
//! `interrupt`, which both clean up with it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Removes each of `dirs` (in order) that is an empty folder.
pub fn remove_empty(dirs: &[PathBuf]) {
    for dir in dirs {
        let _ = fs::remove_dir(dir);
    }
}

/// Removes a folder (or a file) and everything in it, making read-only folders writable first.
pub fn remove_all(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path).or_else(|_| {
            make_writable(path);
            fs::remove_dir_all(path)
        }),
        Ok(_) => fs::remove_file(path),
    }
}

/// Gives the owner write and search permission on `dir` and every folder below it (never
/// following links), so that their entries can be removed.
fn make_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o700));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|k| k.is_dir()) {
                make_writable(&entry.path());
            }
        }
    }
}
