//! Pushes to a bare repository on this machine (`file://`) without libgit2's walk.
//!
//! libgit2's push works out what the remote lacks by walking the whole tree of every branch
//! head the remote has (93,000 folder trees read back for a fleet of 280,000 files, most of
//! a one-ConfigMap sync), then has its local transport write the pack and overwrite the
//! branch. A GitOps commit is one commit on top of a head the remote has, so what it lacks
//! is what differs from that parent: the trees along changed paths and the changed files.
//! This module walks only those (folders whose ids equal the parent's are not opened),
//! writes them as one pack straight into the remote's object store, then moves each branch
//! with a compare-and-swap from the head it had: a branch that moved meanwhile is refused,
//! never overwritten. Anything else (a merge, a parent the remote has no branch at, a
//! repository with a work tree) is left to libgit2.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use git2::{ErrorCode, ObjectType, Odb, Oid, Repository};
use kalypso_core::tree::Blob;

use crate::pack::PackStream;

/// The mode git gives folders in trees.
const DIR_MODE: u32 = 0o040_000;
/// The mode of submodule entries (a commit of another repository, not an object here).
const SUBMODULE_MODE: u32 = 0o160_000;

/// Why a local push did not move a branch.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The branch is not where the push expected it (it moved, or was created meanwhile).
    Refused { reference: String, message: String },
    /// The branch is locked by another writer.
    Locked { reference: String, message: String },
    /// Reading the mirror or writing the remote failed.
    Git(git2::Error),
}

impl From<git2::Error> for Failure {
    fn from(e: git2::Error) -> Failure {
        Failure::Git(e)
    }
}

/// Pushes `updates` (branch without `refs/heads/`, new head) from `mirror` to the bare
/// repository at `remote`. The objects in `held` (sorted by id) are sent from there, the
/// others read from the mirror. `Ok(false)`: not a push this module makes (see the module
/// docs); nothing was written, and libgit2's push is to be used.
pub(crate) fn push(
    mirror: &Repository,
    remote: &Path,
    updates: &[(&str, Oid)],
    held: &[(ObjectType, Oid, Blob)],
) -> Result<bool, Failure> {
    // A repository with a work tree (its folder, or its `.git`) is libgit2's to refuse.
    let Ok(target) = Repository::open(remote) else {
        return Ok(false);
    };
    if !target.is_bare() {
        return Ok(false);
    }
    let heads: HashSet<Oid> = branch_heads(&target)?;
    let objects = Objects {
        odb: mirror.odb()?,
        held,
    };
    // The branches to move: (reference, new head, old head).
    let mut moves = Vec::new();
    let mut send = Vec::new();
    // Trees already walked (a fleet's files are mostly unique, and a set of them would cost
    // more than the duplicates it saves: those go when `send` is sorted).
    let mut walked = HashSet::new();
    for (branch, new) in updates {
        let reference = format!("refs/heads/{branch}");
        let old = match target.refname_to_id(&reference) {
            Ok(old) => Some(old),
            Err(e) if e.code() == ErrorCode::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        if old == Some(*new) {
            continue;
        }
        let commit = mirror.find_commit(*new)?;
        let parent_tree = match commit.parent_ids().collect::<Vec<_>>()[..] {
            // A root commit, on a new branch only (over an old head it would not fast-forward).
            [] if old.is_none() => None,
            [parent] if heads.contains(&parent) && old.is_none_or(|old| old == parent) => {
                Some(mirror.find_commit(parent)?.tree_id())
            }
            _ => return Ok(false),
        };
        send.push(*new);
        new_objects(&objects, commit.tree_id(), parent_tree, &mut send, &mut walked)?;
        moves.push((reference, *new, old));
    }
    send.sort_unstable();
    send.dedup();
    if !send.is_empty() {
        let count =
            u32::try_from(send.len()).map_err(|_| git2::Error::from_str("too many objects for one pack"))?;
        let mut pack = PackStream::new(&target, count)?;
        for oid in &send {
            objects.with(*oid, |kind, data| pack.put(kind, *oid, data))??;
        }
        pack.finish()?;
    }
    for (reference, new, old) in moves {
        let moved = match old {
            Some(old) => target.reference_matching(&reference, new, true, old, "kalypso push"),
            None => target.reference(&reference, new, false, "kalypso push"),
        };
        match moved {
            Ok(_) => {}
            Err(e) if matches!(e.code(), ErrorCode::Modified | ErrorCode::Exists) => {
                return Err(Failure::Refused {
                    reference,
                    message: e.message().to_owned(),
                });
            }
            Err(e) if e.code() == ErrorCode::Locked => {
                return Err(Failure::Locked {
                    reference,
                    message: e.message().to_owned(),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The heads of the branches of `repo`.
fn branch_heads(repo: &Repository) -> Result<HashSet<Oid>, git2::Error> {
    let mut heads = HashSet::new();
    for r in repo.references_glob("refs/heads/*")? {
        if let Some(oid) = r?.target() {
            heads.insert(oid);
        }
    }
    Ok(heads)
}

/// Adds to `out` the objects under tree `new` that tree `old` (whose objects the remote
/// has) does not have at the same path: `new` itself and, recursively, every entry whose id
/// differs. Trees in `walked` are not walked again; a file can be added more than once.
fn new_objects(
    objects: &Objects<'_>,
    new: Oid,
    old: Option<Oid>,
    out: &mut Vec<Oid>,
    walked: &mut HashSet<Oid>,
) -> Result<(), git2::Error> {
    if old == Some(new) || !walked.insert(new) {
        return Ok(());
    }
    out.push(new);
    let old_entries: HashMap<Vec<u8>, (u32, Oid)> = match old {
        Some(old) => objects.with(old, |_, data| {
            entries(data).map(|list| {
                list.into_iter()
                    .map(|(mode, name, oid)| (name.to_vec(), (mode, oid)))
                    .collect()
            })
        })??,
        None => HashMap::new(),
    };
    let new_entries: Vec<(u32, Vec<u8>, Oid)> = objects.with(new, |_, data| {
        entries(data).map(|list| list.into_iter().map(|(m, n, o)| (m, n.to_vec(), o)).collect())
    })??;
    for (mode, name, oid) in new_entries {
        let before = old_entries.get(&name).copied();
        if before.map(|(_, o)| o) == Some(oid) || mode == SUBMODULE_MODE {
            continue;
        }
        if mode == DIR_MODE {
            let old_dir = before.filter(|(m, _)| *m == DIR_MODE).map(|(_, o)| o);
            new_objects(objects, oid, old_dir, out, walked)?;
        } else {
            out.push(oid);
        }
    }
    Ok(())
}

/// Objects by id: from those held in memory, else from the mirror.
struct Objects<'h> {
    odb: Odb<'h>,
    held: &'h [(ObjectType, Oid, Blob)],
}

impl Objects<'_> {
    /// Calls `f` with the kind and content of object `oid`.
    fn with<R>(&self, oid: Oid, f: impl FnOnce(ObjectType, &[u8]) -> R) -> Result<R, git2::Error> {
        match self.held.binary_search_by_key(&oid, |(_, id, _)| *id) {
            Ok(i) => Ok(f(self.held[i].0, &self.held[i].2)),
            Err(_) => {
                let object = self.odb.read(oid)?;
                Ok(f(object.kind(), object.data()))
            }
        }
    }
}

/// A tree entry: mode, name, id.
type TreeEntry<'a> = (u32, &'a [u8], Oid);

/// The entries of a raw tree object.
fn entries(data: &[u8]) -> Result<Vec<TreeEntry<'_>>, git2::Error> {
    let bad = || git2::Error::from_str("a malformed tree object");
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ').ok_or_else(bad)?;
        let mode = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .ok_or_else(bad)?;
        let after = &rest[space + 1..];
        let nul = after.iter().position(|b| *b == 0).ok_or_else(bad)?;
        let id = after.get(nul + 1..nul + 21).ok_or_else(bad)?;
        out.push((mode, &after[..nul], Oid::from_bytes(id)?));
        rest = &after[nul + 21..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_testkit::git;

    /// Objects in the store of the repository at `dir`, loose or packed.
    fn objects(dir: &Path) -> usize {
        let count = git(dir, &["count-objects", "-v"]);
        count
            .lines()
            .filter_map(|l| l.strip_prefix("count: ").or_else(|| l.strip_prefix("in-pack: ")))
            .map(|n| n.trim().parse::<usize>().unwrap())
            .sum()
    }

    /// A bare `remote.git` whose `dev` has 30 files and a nested one, a `work` clone to
    /// commit from, and `mirror.git`, a bare copy that the commits to push are put into.
    struct Repos {
        _dir: tempfile::TempDir,
        remote: std::path::PathBuf,
        work: std::path::PathBuf,
        mirror: std::path::PathBuf,
    }

    impl Repos {
        fn new() -> Repos {
            let dir = tempfile::tempdir().unwrap();
            let (remote, work, mirror) = (
                dir.path().join("remote.git"),
                dir.path().join("work"),
                dir.path().join("mirror.git"),
            );
            git(dir.path(), &["init", "-q", "--bare", "remote.git"]);
            git(dir.path(), &["init", "-q", "work"]);
            std::fs::create_dir_all(work.join("files/deep/er")).unwrap();
            for i in 0..30 {
                std::fs::write(work.join(format!("files/{i}.yaml")), format!("n: {i}\n")).unwrap();
            }
            std::fs::write(work.join("files/deep/er/x.yaml"), "x: 1\n").unwrap();
            git(&work, &["add", "-A"]);
            git(&work, &["commit", "-qm", "first"]);
            git(
                &work,
                &["push", "-q", remote.to_str().unwrap(), "HEAD:refs/heads/dev"],
            );
            git(dir.path(), &["clone", "-q", "--bare", "remote.git", "mirror.git"]);
            Repos {
                _dir: dir,
                remote,
                work,
                mirror,
            }
        }

        /// Commits `file` with `content` in the work clone and copies the commit into the
        /// mirror only.
        fn commit(&self, file: &str, content: &str) -> Oid {
            std::fs::write(self.work.join(file), content).unwrap();
            git(&self.work, &["add", "-A"]);
            git(&self.work, &["commit", "-qm", file]);
            git(
                &self.work,
                &[
                    "push",
                    "-qf",
                    self.mirror.to_str().unwrap(),
                    "HEAD:refs/heads/next",
                ],
            );
            Oid::from_str(git(&self.work, &["rev-parse", "HEAD"]).trim()).unwrap()
        }

        fn head(&self, branch: &str) -> String {
            git(&self.remote, &["rev-parse", branch]).trim().to_owned()
        }

        fn push(&self, updates: &[(&str, Oid)]) -> Result<bool, Failure> {
            push(
                &Repository::open_bare(&self.mirror).unwrap(),
                &self.remote,
                updates,
                &[],
            )
        }
    }

    #[test]
    fn sends_the_commit_and_what_differs_from_its_parent() {
        let repos = Repos::new();
        let before = objects(&repos.remote);
        let new = repos.commit("files/deep/er/x.yaml", "x: 2\n");
        assert!(repos.push(&[("dev", new)]).unwrap());
        assert_eq!(repos.head("dev"), new.to_string());
        // The commit, the four trees down to the file, the file: not the 30 others.
        assert_eq!(objects(&repos.remote) - before, 6);
        git(&repos.remote, &["fsck", "--strict", "--no-dangling"]);

        // A new branch from a head the remote has (a pull request's branch).
        let next = repos.commit("files/new.yaml", "n: new\n");
        assert!(repos.push(&[("kalypso/dev/next", next)]).unwrap());
        assert_eq!(repos.head("kalypso/dev/next"), next.to_string());
        git(&repos.remote, &["fsck", "--strict", "--no-dangling"]);
    }

    #[test]
    fn a_whole_tree_to_a_new_branch_of_an_empty_repository() {
        let repos = Repos::new();
        let first = Oid::from_str(&repos.head("dev")).unwrap();
        std::fs::remove_dir_all(&repos.remote).unwrap();
        git(
            repos.remote.parent().unwrap(),
            &["init", "-q", "--bare", "remote.git"],
        );
        assert!(repos.push(&[("dev", first)]).unwrap());
        assert_eq!(repos.head("dev"), first.to_string());
        assert_eq!(
            objects(&repos.remote),
            1 + 4 + 31,
            "the commit, four trees, 31 files"
        );
        git(&repos.remote, &["fsck", "--strict", "--no-dangling"]);
    }

    #[test]
    fn leaves_to_libgit2_what_it_cannot_vouch_for() {
        let repos = Repos::new();
        let new = repos.commit("files/1.yaml", "n: changed\n");
        // The branch moved since the commit was made on it: libgit2 refuses it as not a
        // fast-forward; nothing is written here.
        std::fs::write(repos.work.join("other.yaml"), "o\n").unwrap();
        git(&repos.work, &["add", "-A"]);
        git(&repos.work, &["commit", "-qm", "elsewhere"]);
        let elsewhere = git(&repos.work, &["rev-parse", "HEAD"]).trim().to_owned();
        git(
            &repos.work,
            &[
                "push",
                "-q",
                repos.remote.to_str().unwrap(),
                "HEAD:refs/heads/dev",
            ],
        );
        let before = objects(&repos.remote);
        assert!(!repos.push(&[("dev", new)]).unwrap());
        assert_eq!(objects(&repos.remote), before);
        assert_eq!(repos.head("dev"), elsewhere);
        // A root commit over an existing branch would not be a fast-forward either.
        git(&repos.work, &["checkout", "-q", "--orphan", "root"]);
        let root = repos.commit("root.yaml", "r\n");
        assert!(!repos.push(&[("dev", root)]).unwrap());
        // A repository with a work tree.
        // A repository with a work tree, by its folder or its `.git`.
        let mirror = Repository::open_bare(&repos.mirror).unwrap();
        for path in [repos.work.clone(), repos.work.join(".git")] {
            let pushed = push(&mirror, &path, &[("fresh", root)], &[]).unwrap();
            assert!(!pushed, "{}", path.display());
        }
        assert_eq!(
            git(&repos.work, &["branch", "--list", "fresh"]),
            "",
            "no branch was made"
        );
    }

    #[test]
    fn reads_tree_entries_as_git_writes_them() {
        let id = [7u8; 20];
        let mut data = b"100644 a.yaml\0".to_vec();
        data.extend_from_slice(&id);
        data.extend_from_slice(b"40000 dir\0");
        data.extend_from_slice(&id);
        let read = entries(&data).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!((read[0].0, read[0].1), (0o100_644, &b"a.yaml"[..]));
        assert_eq!((read[1].0, read[1].1), (DIR_MODE, &b"dir"[..]));
        assert_eq!(read[1].2, Oid::from_bytes(&id).unwrap());
        assert!(entries(&data[..data.len() - 1]).is_err(), "a truncated id");
        assert!(entries(b"10x644 a\0").is_err());
    }
}
