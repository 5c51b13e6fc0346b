//! File-system edges: reading control-plane folders into source trees, reading a GitOps
//! folder into a tree, and writing a new tree over it safely.
//!
//! Writing is all-or-nothing as far as the file system allows: every new or changed file is
//! first written next to its destination under a temporary name, and only when all of them
//! are on disk are they renamed into place and stale files removed. If staging fails, the
//! temporaries are removed and the folder is exactly as it was. No write ever follows a
//! symbolic link out of the output folder, and `.git` is never read or touched.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use kalypso_core::source::{SourceFile, SourceTree};
use kalypso_core::tree::{Blob, Change, Tree, diff};

/// Errors of reading and writing folders; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A file or folder could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A file or folder could not be written or removed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A path inside the output folder is a symbolic link; writing through it could escape
    /// the folder.
    #[error("refusing to write through symbolic link {0}")]
    Symlink(PathBuf),
    /// A path of the tree is not a plain relative path.
    #[error("refusing to write unsafe path {0:?}")]
    UnsafePath(String),
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |source| FsError::Read {
        path: path.to_owned(),
        source,
    }
}

fn write_err(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |source| FsError::Write {
        path: path.to_owned(),
        source,
    }
}

/// Every regular file under `dir` (recursively, not following symbolic links, skipping
/// `.git`), as `/`-separated relative paths, sorted.
fn walk(dir: &Path) -> Result<Vec<(String, PathBuf)>, FsError> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_owned(), String::new())];
    while let Some((path, rel)) = stack.pop() {
        for entry in fs::read_dir(&path).map_err(read_err(&path))? {
            let entry = entry.map_err(read_err(&path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let file_type = entry.file_type().map_err(read_err(&entry.path()))?;
            if file_type.is_dir() {
                if name != ".git" {
                    stack.push((entry.path(), child_rel));
                }
            } else if file_type.is_file() {
                out.push((child_rel, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Reads a folder into a source tree labelled `label`.
pub fn read_source_tree(dir: &Path, label: &str) -> Result<SourceTree, FsError> {
    let files = walk(dir)?
        .into_iter()
        .map(|(rel, path)| {
            fs::read(&path)
                .map(|bytes| SourceFile::new(rel, bytes))
                .map_err(read_err(&path))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SourceTree::new(label, files))
}

/// Reads a GitOps folder into a tree (empty if the folder does not exist).
pub fn read_tree(dir: &Path) -> Result<Tree, FsError> {
    if !dir.exists() {
        return Ok(Tree::new());
    }
    walk(dir)?
        .into_iter()
        .map(|(rel, path)| {
            fs::read(&path)
                .map(|bytes| (rel, Blob::from(bytes)))
                .map_err(read_err(&path))
        })
        .collect()
}

/// What [`write_tree`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Files created.
    pub added: usize,
    /// Files whose content changed.
    pub modified: usize,
    /// Files removed.
    pub deleted: usize,
    /// Files left untouched.
    pub unchanged: usize,
}

fn check_relative(rel: &str) -> Result<(), FsError> {
    let safe = !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\\') && !s.contains('\0'));
    if safe {
        Ok(())
    } else {
        Err(FsError::UnsafePath(rel.to_owned()))
    }
}

/// Fails if any existing component of `rel` below `root` (including `rel` itself) is a
/// symbolic link.
fn check_no_symlinks(root: &Path, rel: &str) -> Result<(), FsError> {
    let mut path = root.to_owned();
    for segment in rel.split('/') {
        path.push(segment);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(FsError::Symlink(path)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(FsError::Read { path, source: e }),
        }
    }
    Ok(())
}

/// Makes the folder at `dir` hold `new` instead of `old` (which must be what
/// [`read_tree`] read from it): only changed files are written, removed files are deleted,
/// and folders left empty by deletions are removed.
pub fn write_tree(dir: &Path, old: &Tree, new: &Tree) -> Result<WriteStats, FsError> {
    let changes = diff(old, new);
    let mut stats = WriteStats {
        unchanged: new.len(),
        ..WriteStats::default()
    };
    for (path, change) in &changes {
        check_relative(path)?;
        check_no_symlinks(dir, path)?;
        match change {
            Change::Added => stats.added += 1,
            Change::Modified => stats.modified += 1,
            Change::Deleted => stats.deleted += 1,
        }
    }
    stats.unchanged -= stats.added + stats.modified;

    // Stage every write next to its destination.
    let mut staged: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let mut stage = |staged: &mut Vec<(PathBuf, PathBuf)>| -> Result<(), FsError> {
        for (path, change) in &changes {
            if *change == Change::Deleted {
                continue;
            }
            let target = dir.join(path);
            let parent = target.parent().unwrap_or(dir);
            if !parent.exists() {
                let mut first_missing = parent;
                while let Some(up) = first_missing.parent().filter(|up| !up.exists()) {
                    first_missing = up;
                }
                created_dirs.push(first_missing.to_owned());
                fs::create_dir_all(parent).map_err(write_err(parent))?;
            }
            check_no_symlinks(dir, path)?;
            let name = target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let temp = parent.join(format!(".{name}.kalypso-tmp"));
            let content = new.get(path).map(|b| &b[..]).unwrap_or_default();
            let mut file = fs::File::create(&temp).map_err(write_err(&temp))?;
            staged.push((temp.clone(), target));
            file.write_all(content).map_err(write_err(&temp))?;
        }
        Ok(())
    };
    if let Err(e) = stage(&mut staged) {
        for (temp, _) in &staged {
            let _ = fs::remove_file(temp);
        }
        for created in &created_dirs {
            let _ = fs::remove_dir_all(created);
        }
        return Err(e);
    }
    for (temp, target) in &staged {
        fs::rename(temp, target).map_err(write_err(target))?;
    }
    let mut parents = BTreeSet::new();
    for (path, change) in &changes {
        if *change == Change::Deleted {
            let target = dir.join(path);
            fs::remove_file(&target).map_err(write_err(&target))?;
            let mut p = Path::new(path.as_str()).parent();
            while let Some(parent) = p.filter(|p| !p.as_os_str().is_empty()) {
                parents.insert(parent.to_owned());
                p = parent.parent();
            }
        }
    }
    // Deepest first, so that a folder emptied by removing its sub-folders goes too.
    let mut parents: Vec<PathBuf> = parents.into_iter().collect();
    parents.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for parent in parents {
        let full = dir.join(&parent);
        if fs::read_dir(&full)
            .map(|mut d| d.next().is_none())
            .unwrap_or(false)
        {
            fs::remove_dir(&full).map_err(write_err(&full))?;
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> Tree {
        files
            .iter()
            .map(|(p, c)| ((*p).to_owned(), Blob::from(c.as_bytes())))
            .collect()
    }

    #[test]
    fn writes_only_changes_and_prunes_empty_folders() {
        let dir = tempfile::tempdir().unwrap();
        let old = tree(&[("a/x.yaml", "1"), ("b/c/y.yaml", "1"), ("keep.txt", "k")]);
        write_tree(dir.path(), &Tree::new(), &old).unwrap();
        assert_eq!(read_tree(dir.path()).unwrap(), old);
        let new = tree(&[("a/x.yaml", "2"), ("keep.txt", "k"), ("d/z.yaml", "3")]);
        let stats = write_tree(dir.path(), &old, &new).unwrap();
        assert_eq!(
            stats,
            WriteStats {
                added: 1,
                modified: 1,
                deleted: 1,
                unchanged: 1
            }
        );
        assert_eq!(read_tree(dir.path()).unwrap(), new);
        assert!(!dir.path().join("b").exists(), "emptied folders are removed");
    }

    #[test]
    fn never_writes_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("large")).unwrap();
        let err = write_tree(
            dir.path(),
            &Tree::new(),
            &tree(&[("large/t/reconciler.yaml", "x")]),
        )
        .unwrap_err();
        assert!(matches!(err, FsError::Symlink(_)), "{err}");
        assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn rejects_unsafe_paths() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_tree(dir.path(), &Tree::new(), &tree(&[("../escape", "x")])).unwrap_err();
        assert!(matches!(err, FsError::UnsafePath(_)));
    }

    #[test]
    fn skips_git_folder() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        fs::write(dir.path().join("a"), "1").unwrap();
        assert_eq!(read_tree(dir.path()).unwrap(), tree(&[("a", "1")]));
    }
}
