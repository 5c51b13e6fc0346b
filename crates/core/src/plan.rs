//! Plans: what a new GitOps tree changes, in terms of assignments rather than files.
//!
//! A raw file diff of a platform GitOps repository is hard to review: one config change
//! touches hundreds of `platform-config.yaml` files. A [`Plan`] groups the changes by
//! assignment (a deployment target's folder under a cluster type's folder): assignments
//! added, removed, moved between cluster types, and changed — with, for config files, the
//! keys that changed and their old and new values.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::tree::{Change, Tree, diff};

/// An assignment as it appears in a tree: a deployment target folder in a cluster type folder.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct AssignmentRef {
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
}

/// A deployment target that left some cluster types and arrived on others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Move {
    /// The deployment target.
    pub deployment_target: String,
    /// Cluster types it is no longer on.
    pub from: Vec<String>,
    /// Cluster types it is newly on.
    pub to: Vec<String>,
}

/// A changed config key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyChange {
    /// The key.
    pub key: String,
    /// The old value (`None`: the key is new).
    pub old: Option<String>,
    /// The new value (`None`: the key was removed).
    pub new: Option<String>,
}

/// A changed file of an assignment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// The file name inside the assignment folder.
    pub file: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
    /// For config files that could be read on both sides: the keys that changed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<KeyChange>,
}

/// [`Change`], serializable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Only in the new tree.
    Added,
    /// Different contents.
    Modified,
    /// Only in the old tree.
    Deleted,
}

impl From<Change> for ChangeKind {
    fn from(c: Change) -> ChangeKind {
        match c {
            Change::Added => ChangeKind::Added,
            Change::Modified => ChangeKind::Modified,
            Change::Deleted => ChangeKind::Deleted,
        }
    }
}

/// An assignment present on both sides whose files changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AssignmentChange {
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
    /// The changed files.
    pub files: Vec<FileChange>,
}

/// A changed path outside assignment folders (cluster type READMEs, root files, tracking).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathChange {
    /// The path.
    pub path: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
}

/// Counts for the summary line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Assignments added.
    pub added: usize,
    /// Assignments removed.
    pub removed: usize,
    /// Deployment targets moved between cluster types.
    pub moved: usize,
    /// Assignments changed.
    pub changed: usize,
    /// Assignments unchanged.
    pub unchanged: usize,
    /// Files added.
    pub files_added: usize,
    /// Files modified.
    pub files_modified: usize,
    /// Files deleted.
    pub files_deleted: usize,
}

/// What a new tree changes, by assignment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Assignments only in the new tree (targets that did not move).
    pub added: Vec<AssignmentRef>,
    /// Assignments only in the old tree (targets that did not move).
    pub removed: Vec<AssignmentRef>,
    /// Targets that left some cluster types and arrived on others.
    pub moved: Vec<Move>,
    /// Assignments on both sides whose files changed.
    pub changed: Vec<AssignmentChange>,
    /// Other changed paths.
    pub other: Vec<PathChange>,
    /// Counts.
    pub counts: Counts,
}

impl Plan {
    /// Whether the new tree changes nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.moved.is_empty()
            && self.changed.is_empty()
            && self.other.is_empty()
    }
}

/// The assignment a path belongs to: `<ct>/<dt>/<file...>` outside dot-folders.
fn assignment_of(path: &str) -> Option<(AssignmentRef, &str)> {
    let mut parts = path.splitn(3, '/');
    let (ct, dt, file) = (parts.next()?, parts.next()?, parts.next()?);
    if ct.starts_with('.') {
        return None;
    }
    Some((
        AssignmentRef {
            cluster_type: ct.to_owned(),
            deployment_target: dt.to_owned(),
        },
        file,
    ))
}

fn assignments(tree: &Tree) -> BTreeSet<AssignmentRef> {
    tree.iter()
        .filter_map(|(p, _)| assignment_of(p).map(|(a, _)| a))
        .collect()
}

/// Compares two trees by assignment.
pub fn plan(old: &Tree, new: &Tree) -> Plan {
    let mut plan = Plan::default();
    let old_assignments = assignments(old);
    let new_assignments = assignments(new);

    let mut per_target: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<&str>)> = BTreeMap::new();
    for a in &old_assignments {
        per_target
            .entry(&a.deployment_target)
            .or_default()
            .0
            .insert(&a.cluster_type);
    }
    for a in &new_assignments {
        per_target
            .entry(&a.deployment_target)
            .or_default()
            .1
            .insert(&a.cluster_type);
    }
    for (dt, (before, after)) in &per_target {
        let gone: Vec<String> = before.difference(after).map(|s| (*s).to_owned()).collect();
        let came: Vec<String> = after.difference(before).map(|s| (*s).to_owned()).collect();
        let pair = |ct: &String| AssignmentRef {
            cluster_type: ct.clone(),
            deployment_target: (*dt).to_owned(),
        };
        if !gone.is_empty() && !came.is_empty() {
            plan.moved.push(Move {
                deployment_target: (*dt).to_owned(),
                from: gone,
                to: came,
            });
        } else {
            plan.removed.extend(gone.iter().map(pair));
            plan.added.extend(came.iter().map(pair));
        }
    }
    plan.added.sort();
    plan.removed.sort();

    let mut changed: BTreeMap<AssignmentRef, Vec<FileChange>> = BTreeMap::new();
    for (path, change) in diff(old, new) {
        match change {
            Change::Added => plan.counts.files_added += 1,
            Change::Modified => plan.counts.files_modified += 1,
            Change::Deleted => plan.counts.files_deleted += 1,
        }
        match assignment_of(&path) {
            Some((a, file)) if old_assignments.contains(&a) && new_assignments.contains(&a) => {
                let keys = if change == Change::Modified && is_config_file(file) {
                    config_key_changes(old.get(&path).map(|b| &b[..]), new.get(&path).map(|b| &b[..]))
                } else {
                    Vec::new()
                };
                changed.entry(a).or_default().push(FileChange {
                    file: file.to_owned(),
                    change: change.into(),
                    keys,
                });
            }
            Some(_) => {}
            None => plan.other.push(PathChange {
                path,
                change: change.into(),
            }),
        }
    }
    plan.changed = changed
        .into_iter()
        .map(|(a, files)| AssignmentChange {
            cluster_type: a.cluster_type,
            deployment_target: a.deployment_target,
            files,
        })
        .collect();
    plan.counts.added = plan.added.len();
    plan.counts.removed = plan.removed.len();
    plan.counts.moved = plan.moved.len();
    plan.counts.changed = plan.changed.len();
    plan.counts.unchanged = new_assignments.intersection(&old_assignments).count() - plan.changed.len();
    plan
}

fn is_config_file(file: &str) -> bool {
    file.starts_with("platform-config.") || file == "config.yaml"
}

/// The key/value pairs of a config file: the `data` of ConfigMap documents, or the
/// `export KEY=VALUE` lines of an env file. `None` if the file is neither.
fn config_entries(bytes: &[u8]) -> Option<BTreeMap<String, String>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut entries = BTreeMap::new();
    let mut found = false;
    for line in text.lines() {
        if let Some((key, value)) = line
            .trim()
            .strip_prefix("export ")
            .and_then(|rest| rest.split_once('='))
        {
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            entries.insert(key.trim().to_owned(), value.to_owned());
            found = true;
        }
    }
    if found {
        return Some(entries);
    }
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let Ok(value) = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc) else {
            return None;
        };
        if let Some(serde_yaml_ng::Value::Mapping(data)) = value.get("data") {
            for (k, v) in data {
                let key = match k {
                    serde_yaml_ng::Value::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other).ok()?.trim_end().to_owned(),
                };
                let value = match v {
                    serde_yaml_ng::Value::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other).ok()?.trim_end().to_owned(),
                };
                entries.insert(key, value);
                found = true;
            }
        }
    }
    found.then_some(entries)
}

fn config_key_changes(old: Option<&[u8]>, new: Option<&[u8]>) -> Vec<KeyChange> {
    let (Some(old), Some(new)) = (old.and_then(config_entries), new.and_then(config_entries)) else {
        return Vec::new();
    };
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| KeyChange {
            key: k.clone(),
            old: old.get(k).cloned(),
            new: new.get(k).cloned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Blob;

    fn tree(files: &[(&str, &str)]) -> Tree {
        files
            .iter()
            .map(|(p, c)| ((*p).to_owned(), Blob::from(c.as_bytes())))
            .collect()
    }

    const CFG_OLD: &str = "apiVersion: v1\nkind: ConfigMap\ndata:\n  A: \"1\"\n  B: two\n";
    const CFG_NEW: &str = "apiVersion: v1\nkind: ConfigMap\ndata:\n  A: \"2\"\n  C: three\n";

    #[test]
    fn groups_changes_by_assignment() {
        let old = tree(&[
            ("large/README.md", "r"),
            ("large/a/reconciler.yaml", "x"),
            ("large/a/platform-config.yaml", CFG_OLD),
            ("large/gone/reconciler.yaml", "x"),
            ("small/mover/reconciler.yaml", "x"),
            ("manifests-statement.txt", "s"),
        ]);
        let new = tree(&[
            ("large/README.md", "r"),
            ("large/a/reconciler.yaml", "x"),
            ("large/a/platform-config.yaml", CFG_NEW),
            ("large/mover/reconciler.yaml", "x"),
            ("large/new/reconciler.yaml", "x"),
            (".github/tracking/Promoted_Commit_Id", "abc"),
            ("manifests-statement.txt", "s"),
        ]);
        let p = plan(&old, &new);
        assert_eq!(
            p.added,
            [AssignmentRef {
                cluster_type: "large".into(),
                deployment_target: "new".into()
            }]
        );
        assert_eq!(
            p.removed,
            [AssignmentRef {
                cluster_type: "large".into(),
                deployment_target: "gone".into()
            }]
        );
        assert_eq!(
            p.moved,
            [Move {
                deployment_target: "mover".into(),
                from: vec!["small".into()],
                to: vec!["large".into()]
            }]
        );
        assert_eq!(p.changed.len(), 1);
        assert_eq!(
            p.changed[0].files[0].keys,
            [
                KeyChange {
                    key: "A".into(),
                    old: Some("1".into()),
                    new: Some("2".into())
                },
                KeyChange {
                    key: "B".into(),
                    old: Some("two".into()),
                    new: None
                },
                KeyChange {
                    key: "C".into(),
                    old: None,
                    new: Some("three".into())
                },
            ]
        );
        assert_eq!(
            p.other,
            [PathChange {
                path: ".github/tracking/Promoted_Commit_Id".into(),
                change: ChangeKind::Added
            }]
        );
        assert_eq!(p.counts.unchanged, 0);
        assert!(!p.is_empty());
        assert!(plan(&new, &new).is_empty());
    }

    #[test]
    fn env_file_keys_are_compared() {
        let changes = config_key_changes(
            Some(b"export A=\"1\"\nexport B=\"x\"\n"),
            Some(b"export A=\"1\"\nexport B=\"y\"\n"),
        );
        assert_eq!(
            changes,
            [KeyChange {
                key: "B".into(),
                old: Some("x".into()),
                new: Some("y".into())
            }]
        );
    }
}
