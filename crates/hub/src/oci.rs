//! The GitOps side of environments delivered to an OCI registry (`oci://` GitOpsRepos).
//!
//! There, an environment is a family of Flux artifacts, one per cluster type, and kalypso's
//! index beside them (see `kalypso_oci`): each index lists every cluster type's manifest and
//! names the index it replaced. The chain of indexes is the environment's history, as a
//! branch's first parents are in git, so it is stored the same way: an index is a GitOps
//! "commit" (its digest's hex, its parent, its time, the promoted control-plane commit) and
//! what its cluster types' artifacts hold are the placements, read from the layers (each
//! layer read once per process: most indexes share most of them).
//!
//! A cluster of an OCI environment reports the revision of its cluster type's artifact,
//! `<tag>@sha256:<manifest digest>` (Flux's `OCIRepository`), not an index. So the hub also
//! stores, per cluster type, which manifest its tag held from one index to another
//! ([`ArtifactOp`], table `oci_artifacts`): a cluster running manifest M of cluster type T is
//! at the last index where T still had M, which is how it is compared with any index
//! (`ingest` and [`crate::gitops`] set its position so).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use kalypso_git::RetryPolicy;
use kalypso_git::oci::AuthSettings;
use kalypso_oci::read::{self, Snapshot};
use kalypso_oci::{Access, Digest, Location, Registry};

use crate::gitops::{CommitInfo, History, Target, parse_namespace, parse_reconciler};

/// The most indexes read back in one refresh.
const MAX_HISTORY: usize = 10_000;
/// The most layers whose targets are remembered.
const MAX_REMEMBERED: usize = 4096;

/// The deployment targets of an artifact, by name.
type Targets = Arc<BTreeMap<String, Target>>;

/// What each layer's deployment targets run, by layer digest.
static LAYERS: Mutex<Option<HashMap<Digest, Targets>>> = Mutex::new(None);

/// Whether a GitOpsRepo's repository is an OCI location.
pub fn is_oci(repo: &str) -> bool {
    kalypso_git::oci::is_oci(repo)
}

/// The registry client of a refresh.
pub(crate) fn registry(auth: &AuthSettings, retry: &RetryPolicy) -> Result<Registry, String> {
    kalypso_git::oci::registry(auth, retry).map_err(|e| kalypso_git::redact(&e.to_string()))
}

/// The deployment targets of a cluster type's artifact.
fn targets(
    registry: &Registry,
    location: &Location,
    cluster_type: &str,
    entry: &kalypso_oci::artifact::Entry,
) -> Result<Targets, String> {
    if let Some(known) = LAYERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|m| m.get(&entry.layer))
    {
        return Ok(known.clone());
    }
    let files = read::layer(registry, location, cluster_type, entry, Access::Pull)
        .map_err(|e| kalypso_git::redact(&e.to_string()))?;
    let mut targets: BTreeMap<String, Target> = BTreeMap::new();
    for (path, blob) in &files {
        let Some((dt, name)) = path.split_once('/') else {
            continue;
        };
        if dt.starts_with('.') || name.contains('/') {
            continue;
        }
        let text = String::from_utf8_lossy(blob);
        let target = targets.entry(dt.to_owned()).or_default();
        match name {
            "namespace.yaml" => target.workload = parse_namespace(&text),
            "reconciler.yaml" => target.source = parse_reconciler(&text),
            _ => {}
        }
    }
    let targets = Arc::new(targets);
    let mut layers = LAYERS.lock().unwrap_or_else(PoisonError::into_inner);
    let layers = layers.get_or_insert_with(HashMap::new);
    if layers.len() >= MAX_REMEMBERED {
        layers.clear();
    }
    layers.insert(entry.layer.clone(), targets.clone());
    Ok(targets)
}

/// Unix milliseconds of an RFC 3339 time (0 when it is not one).
fn millis(text: Option<&str>) -> i64 {
    text.and_then(crate::model::parse_time).unwrap_or(0)
}

fn commit(registry: &Registry, location: &Location, snapshot: &Snapshot) -> Result<CommitInfo, String> {
    let mut cluster_types = BTreeMap::new();
    let mut artifacts = BTreeMap::new();
    for (ct, entry) in &snapshot.index.cluster_types {
        let targets = targets(registry, location, ct, entry)?;
        cluster_types.insert(ct.clone(), (*targets).clone());
        artifacts.insert(ct.clone(), entry.manifest.to_string());
    }
    Ok(CommitInfo {
        sha: snapshot.digest.hex().to_owned(),
        parent: snapshot.parent().map(|p| p.hex().to_owned()),
        committed_at: millis(snapshot.manifest.annotation(kalypso_oci::artifact::CREATED)),
        promoted: snapshot.index.promoted_commit.clone(),
        cluster_types,
        artifacts,
    })
}

/// The new indexes of the environment tagged `tag` at `repo`, oldest first, after the
/// stored one they descend from (`known`: stored index digests' hex → position).
pub(crate) fn read_history(
    registry: &Registry,
    repo: &str,
    tag: &str,
    known: &HashMap<String, i64>,
) -> Result<Option<History>, String> {
    let location = Location::parse(repo).map_err(|e| e.to_string())?;
    let redact = |e: kalypso_oci::Error| kalypso_git::redact(&e.to_string());
    let snapshots = read::history(
        registry,
        &location,
        tag,
        &|d| known.contains_key(d.hex()),
        MAX_HISTORY,
    )
    .map_err(redact)?;
    if snapshots.is_empty() {
        // Nothing delivered yet, or the head is known: nothing new.
        let head = read::index(registry, &location, tag, Access::Pull).map_err(redact)?;
        return Ok(head.map(|h| History {
            base: known.get(h.digest.hex()).map(|p| (h.digest.hex().to_owned(), *p)),
            commits: Vec::new(),
        }));
    }
    let base = snapshots
        .last()
        .and_then(Snapshot::parent)
        .and_then(|p| known.get(p.hex()).map(|position| (p.hex().to_owned(), *position)));
    let mut commits = Vec::with_capacity(snapshots.len());
    for snapshot in snapshots.iter().rev() {
        commits.push(commit(registry, &location, snapshot)?);
    }
    Ok(Some(History { base, commits }))
}

/// A change to the stored artifact intervals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactOp {
    /// Cluster type `cluster_type`'s tag holds `digest` from `position` on.
    Open {
        /// Cluster type.
        cluster_type: String,
        /// The manifest digest (`sha256:<hex>`).
        digest: String,
        /// The index's position.
        position: i64,
    },
    /// The interval opened at `from` ends at `position` (exclusive).
    Close {
        /// Cluster type.
        cluster_type: String,
        /// Where it was opened.
        from: i64,
        /// The index's position.
        position: i64,
    },
}

/// The open artifact intervals: cluster type → (digest, from position).
pub type OpenArtifacts = BTreeMap<String, (String, i64)>;

/// The interval changes of the index `commit` at `position` against `open`, which is updated.
pub fn diff_artifacts(open: &mut OpenArtifacts, commit: &CommitInfo, position: i64) -> Vec<ArtifactOp> {
    let mut ops = Vec::new();
    let closing: Vec<String> = open
        .iter()
        .filter(|(ct, (digest, _))| commit.artifacts.get(*ct) != Some(digest))
        .map(|(ct, _)| ct.clone())
        .collect();
    for ct in closing {
        if let Some((_, from)) = open.remove(&ct) {
            ops.push(ArtifactOp::Close {
                cluster_type: ct,
                from,
                position,
            });
        }
    }
    for (ct, digest) in &commit.artifacts {
        if !open.contains_key(ct) {
            open.insert(ct.clone(), (digest.clone(), position));
            ops.push(ArtifactOp::Open {
                cluster_type: ct.clone(),
                digest: digest.clone(),
                position,
            });
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(sha: &str, artifacts: &[(&str, &str)]) -> CommitInfo {
        CommitInfo {
            sha: sha.into(),
            artifacts: artifacts
                .iter()
                .map(|(ct, d)| ((*ct).to_owned(), (*d).to_owned()))
                .collect(),
            ..CommitInfo::default()
        }
    }

    #[test]
    fn artifact_intervals_follow_each_cluster_types_tag() {
        let mut open = OpenArtifacts::new();
        let ops = diff_artifacts(&mut open, &index("a", &[("drone", "d1"), ("large", "l1")]), 0);
        assert_eq!(ops.len(), 2);
        assert!(diff_artifacts(&mut open, &index("b", &[("drone", "d1"), ("large", "l1")]), 1).is_empty());
        let ops = diff_artifacts(&mut open, &index("c", &[("drone", "d2"), ("large", "l1")]), 2);
        assert_eq!(
            ops,
            [
                ArtifactOp::Close {
                    cluster_type: "drone".into(),
                    from: 0,
                    position: 2
                },
                ArtifactOp::Open {
                    cluster_type: "drone".into(),
                    digest: "d2".into(),
                    position: 2
                }
            ]
        );
        // A cluster type that leaves closes its interval.
        let ops = diff_artifacts(&mut open, &index("d", &[("drone", "d2")]), 3);
        assert_eq!(
            ops,
            [ArtifactOp::Close {
                cluster_type: "large".into(),
                from: 0,
                position: 3
            }]
        );
    }
}
