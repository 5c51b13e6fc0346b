//! Plans: what a new GitOps tree changes, in terms of assignments rather than files.
//!
//! A raw file diff of a platform GitOps repository is hard to review: one ConfigMap change
//! touches hundreds of `platform-config.yaml` files, and a moved deployment target shows up
//! as a deleted folder here and an added one there. A [`Plan`] groups the changes by
//! assignment (a deployment target's folder under a cluster type's folder): assignments
//! added, removed, moved between cluster types, and changed — with, for config files, the
//! keys that changed and their old and new values — plus cluster types that appear or
//! disappear and the promoted main commit. [`Plan::groups`] folds assignments that changed in
//! exactly the same way into one entry, so that a fleet-wide change reads as one line.
//!
//! The plan is computed from the two trees alone (no control plane needed), so it describes
//! exactly what a reviewer would merge. Its JSON form (`kalypso plan --output json`) is a
//! stable interface: fields are only ever added, and [`FORMAT_VERSION`] changes if one is
//! ever removed or changes meaning.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::tree::{Change, PROMOTED_COMMIT_PATH, README, Tree, diff};

/// The version of the plan's JSON form.
pub const FORMAT_VERSION: u32 = 1;

/// An assignment as it appears in a tree: a deployment target folder in a cluster type folder.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct AssignmentRef {
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
}

impl std::fmt::Display for AssignmentRef {
    /// `cluster-type/deployment-target`, the assignment's folder.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.cluster_type, self.deployment_target)
    }
}

/// A deployment target that left some cluster types and arrived on others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Move {
    /// The deployment target.
    pub deployment_target: String,
    /// Cluster types it is no longer on, sorted.
    pub from: Vec<String>,
    /// Cluster types it is newly on, sorted.
    pub to: Vec<String>,
}

/// A changed config key (or any changed value: see [`Plan::promoted_commit`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct KeyChange {
    /// The key. For ConfigMaps the `data` key, for env files the variable; for other YAML
    /// config files the dotted path of the value (`spec.replicas`, `items[0].name`).
    pub key: String,
    /// The old value (`None`: the key is new).
    pub old: Option<String>,
    /// The new value (`None`: the key was removed).
    pub new: Option<String>,
}

/// A changed file of an assignment.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FileChange {
    /// The file name inside the assignment folder.
    pub file: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
    /// For config files (`platform-config.*`, legacy `config.yaml`) that could be read: the
    /// keys that changed, by key. Empty for other files, and for config files whose only
    /// changes are outside their keys (e.g. an annotation).
    pub keys: Vec<KeyChange>,
}

/// [`Change`], serializable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    /// Only in the new tree.
    Added,
    /// Different contents.
    Modified,
    /// Only in the old tree.
    Deleted,
}

impl ChangeKind {
    /// `added`, `modified` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
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
    /// The changed files, by file name.
    pub files: Vec<FileChange>,
}

impl AssignmentChange {
    /// The assignment.
    pub fn assignment(&self) -> AssignmentRef {
        AssignmentRef {
            cluster_type: self.cluster_type.clone(),
            deployment_target: self.deployment_target.clone(),
        }
    }
}

/// A changed path outside assignment folders (cluster type READMEs, root files, tracking).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathChange {
    /// The path.
    pub path: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
}

/// Cluster type folders that appear or disappear.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterTypeChanges {
    /// Cluster types only in the new tree, sorted.
    pub added: Vec<String>,
    /// Cluster types only in the old tree, sorted.
    pub removed: Vec<String>,
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
    /// Assignments on both sides and unchanged.
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
    /// Assignments only in the new tree (of targets that did not move), sorted.
    pub added: Vec<AssignmentRef>,
    /// Assignments only in the old tree (of targets that did not move), sorted.
    pub removed: Vec<AssignmentRef>,
    /// Targets that left some cluster types and arrived on others, by target.
    pub moved: Vec<Move>,
    /// Assignments on both sides whose files changed, sorted by assignment.
    pub changed: Vec<AssignmentChange>,
    /// Cluster type folders that appear or disappear.
    pub cluster_types: ClusterTypeChanges,
    /// The promoted main commit (`.github/tracking/Promoted_Commit_Id`), if it changes.
    pub promoted_commit: Option<ValueChange>,
    /// Every changed path outside assignment folders, by path (including the tracking file
    /// and the READMEs of cluster types that appear or disappear).
    pub other: Vec<PathChange>,
    /// Counts.
    pub counts: Counts,
}

/// A value that changes (`None`: absent on that side).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValueChange {
    /// The old value.
    pub old: Option<String>,
    /// The new value.
    pub new: Option<String>,
}

/// Assignments that changed in exactly the same way: same files, same keys, same values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeGroup<'a> {
    /// The assignments, sorted.
    pub assignments: Vec<AssignmentRef>,
    /// Their common file changes.
    pub files: &'a [FileChange],
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

    /// The changed assignments, those with identical changes together; groups in the order
    /// of their first assignment.
    pub fn groups(&self) -> Vec<ChangeGroup<'_>> {
        let mut index: HashMap<&[FileChange], usize> = HashMap::new();
        let mut groups: Vec<ChangeGroup<'_>> = Vec::new();
        for c in &self.changed {
            let i = *index.entry(&c.files).or_insert_with(|| {
                groups.push(ChangeGroup {
                    assignments: Vec::new(),
                    files: &c.files,
                });
                groups.len() - 1
            });
            groups[i].assignments.push(c.assignment());
        }
        groups
    }

    /// The changed paths outside assignments that [`Plan::cluster_types`] and
    /// [`Plan::promoted_commit`] do not already describe.
    pub fn other_unexplained(&self) -> impl Iterator<Item = &PathChange> {
        self.other.iter().filter(|p| {
            if p.path == PROMOTED_COMMIT_PATH {
                return false;
            }
            match p.path.split_once('/') {
                Some((ct, README)) => {
                    !self.cluster_types.added.iter().any(|a| a == ct)
                        && !self.cluster_types.removed.iter().any(|r| r == ct)
                }
                _ => true,
            }
        })
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

/// Cluster type folders: first segments of nested paths, outside dot-folders.
fn cluster_types(tree: &Tree) -> BTreeSet<&str> {
    tree.iter()
        .filter_map(|(p, _)| p.split_once('/').map(|(first, _)| first))
        .filter(|first| !first.starts_with('.'))
        .collect()
}

fn text(bytes: Option<&[u8]>) -> Option<String> {
    bytes.map(|b| String::from_utf8_lossy(b).into_owned())
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

    let old_cts = cluster_types(old);
    let new_cts = cluster_types(new);
    plan.cluster_types = ClusterTypeChanges {
        added: new_cts.difference(&old_cts).map(|s| (*s).to_owned()).collect(),
        removed: old_cts.difference(&new_cts).map(|s| (*s).to_owned()).collect(),
    };

    let mut changed: BTreeMap<AssignmentRef, Vec<FileChange>> = BTreeMap::new();
    for (path, change) in diff(old, new) {
        match change {
            Change::Added => plan.counts.files_added += 1,
            Change::Modified => plan.counts.files_modified += 1,
            Change::Deleted => plan.counts.files_deleted += 1,
        }
        match assignment_of(&path) {
            Some((a, file)) if old_assignments.contains(&a) && new_assignments.contains(&a) => {
                let keys = if is_config_file(file) {
                    config_key_changes(
                        file,
                        old.get(&path).map(|b| &b[..]),
                        new.get(&path).map(|b| &b[..]),
                    )
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
            None => {
                if path == PROMOTED_COMMIT_PATH {
                    plan.promoted_commit = Some(ValueChange {
                        old: text(old.get(&path).map(|b| &b[..])),
                        new: text(new.get(&path).map(|b| &b[..])),
                    });
                }
                plan.other.push(PathChange {
                    path,
                    change: change.into(),
                });
            }
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

/// Whether an assignment file holds platform config: `platform-config.yaml`,
/// `platform-config.sh` (the config Template's output), or the legacy `config.yaml`.
fn is_config_file(file: &str) -> bool {
    file.starts_with("platform-config.") || file == "config.yaml"
}

/// The key/value pairs of a config file, or `None` if it cannot be read as one: the
/// `VAR=value` lines (with or without `export`) of an env file (`.sh`); the `data` of the
/// ConfigMap documents of a YAML file (keys prefixed with the ConfigMap's name when several
/// documents have data); else every scalar of every YAML document by dotted path.
fn config_entries(file: &str, bytes: &[u8]) -> Option<BTreeMap<String, String>> {
    let text = std::str::from_utf8(bytes).ok()?;
    if file.ends_with(".sh") {
        return Some(env_entries(text));
    }
    let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(text)
        .map(<serde_yaml_ng::Value as serde::Deserialize>::deserialize)
        .collect::<Result<_, _>>()
        .ok()?;
    let docs: Vec<serde_yaml_ng::Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let with_data: Vec<&serde_yaml_ng::Value> = docs
        .iter()
        .filter(|d| matches!(d.get("data"), Some(serde_yaml_ng::Value::Mapping(_))))
        .collect();
    let mut entries = BTreeMap::new();
    if !with_data.is_empty() {
        let prefixed = with_data.len() > 1;
        for (i, doc) in with_data.iter().enumerate() {
            let prefix = if prefixed {
                let name = doc
                    .get("metadata")
                    .and_then(|m| m.get("name"))
                    .and_then(serde_yaml_ng::Value::as_str)
                    .map_or_else(|| format!("#{}", i + 1), str::to_owned);
                format!("{name}/")
            } else {
                String::new()
            };
            if let Some(serde_yaml_ng::Value::Mapping(data)) = doc.get("data") {
                for (k, v) in data {
                    entries.insert(format!("{prefix}{}", scalar_text(k)?), scalar_text(v)?);
                }
            }
        }
        return Some(entries);
    }
    let prefixed = docs.len() > 1;
    for (i, doc) in docs.iter().enumerate() {
        let prefix = if prefixed {
            format!("#{}", i + 1)
        } else {
            String::new()
        };
        flatten(doc, prefix, &mut entries);
    }
    Some(entries)
}

/// `VAR=value` lines, `export ` allowed, one level of quotes removed.
fn env_entries(text: &str) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let valid = key
            .chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()));
        if key.is_empty() || !valid {
            continue;
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .filter(|_| value.len() >= 2)
            .unwrap_or(value);
        entries.insert(key.to_owned(), unquoted.to_owned());
    }
    entries
}

/// A YAML value as text: strings as they are, anything else as compact YAML.
fn scalar_text(v: &serde_yaml_ng::Value) -> Option<String> {
    match v {
        serde_yaml_ng::Value::String(s) => Some(s.clone()),
        other => Some(serde_yaml_ng::to_string(other).ok()?.trim_end().to_owned()),
    }
}

/// Every scalar of `value` under its dotted path.
fn flatten(value: &serde_yaml_ng::Value, path: String, out: &mut BTreeMap<String, String>) {
    match value {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, v) in m {
                let key = scalar_text(k).unwrap_or_default();
                let child = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                flatten(v, child, out);
            }
        }
        serde_yaml_ng::Value::Sequence(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(v, format!("{path}[{i}]"), out);
            }
        }
        serde_yaml_ng::Value::Tagged(t) => flatten(&t.value, path, out),
        scalar => {
            if let Some(text) = scalar_text(scalar) {
                out.insert(path, text);
            }
        }
    }
}

/// The keys whose values differ between two versions of config file `file` (either may be
/// absent: a file added or deleted). Empty if a present side cannot be read.
fn config_key_changes(file: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> Vec<KeyChange> {
    let read = |bytes: Option<&[u8]>| match bytes {
        None => Some(BTreeMap::new()),
        Some(b) => config_entries(file, b),
    };
    let (Some(old), Some(new)) = (read(old), read(new)) else {
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

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of_texts(files)
    }

    fn a(ct: &str, dt: &str) -> AssignmentRef {
        AssignmentRef {
            cluster_type: ct.into(),
            deployment_target: dt.into(),
        }
    }

    fn k(key: &str, old: Option<&str>, new: Option<&str>) -> KeyChange {
        KeyChange {
            key: key.into(),
            old: old.map(Into::into),
            new: new.map(Into::into),
        }
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
            ("small/README.md", "r"),
            ("small/mover/reconciler.yaml", "x"),
            ("manifests-statement.txt", "s"),
        ]);
        let new = tree(&[
            ("large/README.md", "r"),
            ("large/a/reconciler.yaml", "x"),
            ("large/a/platform-config.yaml", CFG_NEW),
            ("large/mover/reconciler.yaml", "x"),
            ("large/new/reconciler.yaml", "x"),
            ("tiny/README.md", "r"),
            (".github/tracking/Promoted_Commit_Id", "abc"),
            ("manifests-statement.txt", "s"),
        ]);
        let p = plan(&old, &new);
        assert_eq!(p.added, [a("large", "new")]);
        assert_eq!(p.removed, [a("large", "gone")]);
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
                k("A", Some("1"), Some("2")),
                k("B", Some("two"), None),
                k("C", None, Some("three"))
            ]
        );
        assert_eq!(
            p.cluster_types,
            ClusterTypeChanges {
                added: vec!["tiny".into()],
                removed: vec!["small".into()]
            }
        );
        assert_eq!(
            p.promoted_commit,
            Some(ValueChange {
                old: None,
                new: Some("abc".into())
            })
        );
        assert_eq!(
            p.other,
            [
                PathChange {
                    path: ".github/tracking/Promoted_Commit_Id".into(),
                    change: ChangeKind::Added
                },
                PathChange {
                    path: "small/README.md".into(),
                    change: ChangeKind::Deleted
                },
                PathChange {
                    path: "tiny/README.md".into(),
                    change: ChangeKind::Added
                },
            ]
        );
        assert_eq!(p.other_unexplained().count(), 0);
        assert_eq!(p.counts.unchanged, 0);
        assert_eq!(
            (
                p.counts.files_added,
                p.counts.files_modified,
                p.counts.files_deleted
            ),
            (4, 1, 3)
        );
        assert!(!p.is_empty());
        assert!(plan(&new, &new).is_empty());
    }

    #[test]
    fn identical_changes_form_one_group() {
        let old = tree(&[
            ("a/t1/platform-config.yaml", CFG_OLD),
            ("a/t2/platform-config.yaml", CFG_OLD),
            ("b/t1/platform-config.yaml", CFG_OLD),
            ("b/t1/reconciler.yaml", "x"),
            ("b/t3/reconciler.yaml", "x"),
        ]);
        let new = tree(&[
            ("a/t1/platform-config.yaml", CFG_NEW),
            ("a/t2/platform-config.yaml", CFG_NEW),
            ("b/t1/platform-config.yaml", CFG_NEW),
            ("b/t1/reconciler.yaml", "y"),
            ("b/t3/reconciler.yaml", "x"),
        ]);
        let p = plan(&old, &new);
        let groups = p.groups();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].assignments, [a("a", "t1"), a("a", "t2")]);
        assert_eq!(groups[1].assignments, [a("b", "t1")]);
        assert_eq!(groups[1].files.len(), 2);
        assert_eq!(p.counts.unchanged, 1);
    }

    #[test]
    fn env_file_keys_are_compared() {
        let changes = config_key_changes(
            "platform-config.sh",
            Some(b"export A=\"1\"\nexport B=\"x\"\n"),
            Some(b"export A=\"1\"\nB='y'\n# comment=no\n"),
        );
        assert_eq!(changes, [k("B", Some("x"), Some("y"))]);
    }

    #[test]
    fn added_config_files_show_every_key_as_new() {
        let changes = config_key_changes("platform-config.yaml", None, Some(CFG_OLD.as_bytes()));
        assert_eq!(changes, [k("A", None, Some("1")), k("B", None, Some("two"))]);
    }

    #[test]
    fn other_yaml_config_is_compared_by_path() {
        let old = "kind: Application\nspec:\n  replicas: 2\n  items:\n    - name: a\n";
        let new = "kind: Application\nspec:\n  replicas: 3\n  items:\n    - name: b\n";
        let changes = config_key_changes("platform-config.yaml", Some(old.as_bytes()), Some(new.as_bytes()));
        assert_eq!(
            changes,
            [
                k("spec.items[0].name", Some("a"), Some("b")),
                k("spec.replicas", Some("2"), Some("3"))
            ]
        );
    }

    #[test]
    fn several_config_maps_in_one_file_are_told_apart() {
        let old = "kind: ConfigMap\nmetadata:\n  name: one\ndata:\n  A: x\n---\nkind: ConfigMap\nmetadata:\n  name: two\ndata:\n  A: x\n";
        let new = old.replacen("A: x\n---", "A: y\n---", 1);
        let changes = config_key_changes("platform-config.yaml", Some(old.as_bytes()), Some(new.as_bytes()));
        assert_eq!(changes, [k("one/A", Some("x"), Some("y"))]);
    }

    #[test]
    fn unreadable_config_gives_no_keys() {
        let changes = config_key_changes("platform-config.yaml", Some(b"a: [\n"), Some(b"a: 1\n"));
        assert!(changes.is_empty());
    }
}
