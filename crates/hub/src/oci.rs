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
//! (`ingest` and `gitops` set its position so). `gitops` turns the indexes into GitOps
//! commits: this module only reads them and keeps the intervals.

use std::collections::{BTreeMap, HashMap};

use kalypso_git::RetryPolicy;
use kalypso_git::oci::AuthSettings;
use kalypso_oci::read::{self, Files, Snapshot};
use kalypso_oci::{Access, Location, Registry};
use sqlx::Row;

use crate::db::DbError;

/// The most indexes read back in one refresh.
const MAX_HISTORY: usize = 10_000;

/// Whether a GitOpsRepo's repository is an OCI location.
pub fn is_oci(repo: &str) -> bool {
    kalypso_git::oci::is_oci(repo)
}

/// The registry client of a refresh.
pub(crate) fn registry(auth: &AuthSettings, retry: &RetryPolicy) -> Result<Registry, String> {
    kalypso_git::oci::registry(auth, retry).map_err(|e| kalypso_git::redact(&e.to_string()))
}

/// The stored index new ones descend from (hex, position), if any, and the new indexes, oldest
/// first.
pub(crate) type Indexes = (Option<(String, i64)>, Vec<Snapshot>);

/// The new indexes of the environment tagged `tag` at `repo`, oldest first, and the stored one
/// they descend from, if any (`known`: stored index digests' hex → position). `None` when
/// nothing was delivered there yet.
pub(crate) fn read_indexes(
    registry: &Registry,
    location: &Location,
    tag: &str,
    known: &HashMap<String, i64>,
) -> Result<Option<Indexes>, String> {
    let redact = |e: kalypso_oci::Error| kalypso_git::redact(&e.to_string());
    let mut snapshots = read::history(
        registry,
        location,
        tag,
        &|d| known.contains_key(d.hex()),
        MAX_HISTORY,
    )
    .map_err(redact)?;
    if snapshots.is_empty() {
        // Nothing delivered yet, or the head is known: nothing new.
        let head = read::index(registry, location, tag, Access::Pull).map_err(redact)?;
        return Ok(head.map(|h| {
            let base = known.get(h.digest.hex()).map(|p| (h.digest.hex().to_owned(), *p));
            (base, Vec::new())
        }));
    }
    let base = snapshots
        .last()
        .and_then(Snapshot::parent)
        .and_then(|p| known.get(p.hex()).map(|position| (p.hex().to_owned(), *position)));
    snapshots.reverse();
    Ok(Some((base, snapshots)))
}

/// The files of cluster type `cluster_type`'s artifact as an index lists it.
pub(crate) fn layer(
    registry: &Registry,
    location: &Location,
    cluster_type: &str,
    entry: &kalypso_oci::artifact::Entry,
) -> Result<Files, String> {
    read::layer(registry, location, cluster_type, entry, Access::Pull)
        .map_err(|e| kalypso_git::redact(&e.to_string()))
}

/// The position an artifact digest of a cluster type stands at in an OCI environment: the
/// last index whose cluster type still had it (the head while it still has it). `None`
/// when no index had it.
pub(crate) async fn artifact_position<'c, E>(
    executor: E,
    environment: &str,
    cluster_type: &str,
    digest: &str,
) -> Result<Option<i64>, DbError>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let row = sqlx::query(
        "SELECT CASE WHEN a.to_position IS NULL THEN (SELECT MAX(g.position) FROM gitops_commits g WHERE g.environment = a.environment) \
         ELSE a.to_position - 1 END FROM oci_artifacts a WHERE a.environment = $1 AND a.cluster_type = $2 AND a.digest = $3 \
         ORDER BY a.from_position DESC LIMIT 1",
    )
    .bind(environment)
    .bind(cluster_type)
    .bind(digest)
    .fetch_optional(executor)
    .await?;
    Ok(match row {
        Some(row) => row.try_get::<Option<i64>, _>(0)?,
        None => None,
    })
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

/// The interval changes of an index whose cluster types have `artifacts` (cluster type →
/// manifest digest), at `position`, against `open`, which is updated.
pub fn diff_artifacts(
    open: &mut OpenArtifacts,
    artifacts: &BTreeMap<String, String>,
    position: i64,
) -> Vec<ArtifactOp> {
    let mut ops = Vec::new();
    let closing: Vec<String> = open
        .iter()
        .filter(|(ct, (digest, _))| artifacts.get(*ct) != Some(digest))
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
    for (ct, digest) in artifacts {
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

    fn index(_sha: &str, artifacts: &[(&str, &str)]) -> BTreeMap<String, String> {
        artifacts
            .iter()
            .map(|(ct, d)| ((*ct).to_owned(), (*d).to_owned()))
            .collect()
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
