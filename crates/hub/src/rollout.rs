//! The gate of a progressive rollout's waves (`GET /api/v1/environments/{env}/waves`): per
//! cluster type asked about, the registered clusters, those compliant with a GitOps commit or
//! a later one (which contains it, on the environment's first-parent history), the failed ones
//! with their reconciler's message, and for how long all of them have been compliant (the
//! wave's soak).
//!
//! Only reports of the commit or a later one count: a cluster still healthy on the commit
//! before the wave is *behind*, never compliant, so a wave is never advanced by reports of the
//! old content. The answer comes from the incremental counts ([`crate::counts`]), as the
//! promotion gate's: a sum over the groups of the cluster types asked about and, for the soak,
//! when the last cluster that kept one of them from being compliant stopped doing so
//! ([`Snapshot::compliant_since`]); only the failed clusters listed are read from `clusters`.

use std::collections::BTreeSet;

use kalypso_hub_api::{ClusterState, GateCluster, WaveClusterType, WaveGate};

use crate::counts::{self, Scope, Snapshot, Staleness};
use crate::db::{Db, DbError};
use crate::query::resolve_commit_in;

/// Lists only the failed clusters.
fn failed_only(state: ClusterState) -> Option<usize> {
    (state == ClusterState::Failed).then_some(0)
}

/// The wave gate of `environment` for GitOps commit `sha` and `cluster_types` (see the module
/// docs), all read from one snapshot of the database.
pub async fn waves(
    db: &Db,
    environment: &str,
    sha: &str,
    cluster_types: &[String],
    staleness: Staleness,
    failed_limit: i64,
) -> Result<WaveGate, DbError> {
    let freezes: Vec<_> = crate::policy::active_freezes(db, environment, staleness.now)
        .await?
        .iter()
        .map(|f| crate::actions::freeze_answer(environment, f))
        .collect();
    let mut tx = db.begin_read().await?;
    let Some(commit) = resolve_commit_in(&mut tx, environment, sha).await? else {
        return Ok(WaveGate {
            environment: environment.to_owned(),
            gitops_commit: None,
            cluster_types: Vec::new(),
            freezes,
        });
    };
    let snapshot = Snapshot::read(&mut tx, Some(environment), None, staleness).await?;
    let by_type = snapshot.counts_by_type(Some(commit.position));
    let mut answer = Vec::with_capacity(cluster_types.len());
    for ct in cluster_types {
        let counts = by_type
            .get(&(environment.to_owned(), ct.clone()))
            .copied()
            .unwrap_or_default();
        let registered = counts.required();
        // The soak runs from when the last cluster that kept the cluster type from being
        // compliant stopped doing so, and never from before the commit itself.
        let compliant_for_ms = if registered > 0 && counts.compliant == registered {
            let only = BTreeSet::from([ct.clone()]);
            snapshot
                .compliant_since(environment, Some(&only), commit.position)
                .map(|since| {
                    u64::try_from(staleness.now.saturating_sub(since.max(commit.committed_at)))
                        .unwrap_or_default()
                })
        } else {
            None
        };
        let failed = if counts.failed > 0 && failed_limit > 0 {
            counts::list(
                &mut tx,
                &snapshot,
                environment,
                Scope::Type(ct),
                Some(commit.position),
                &failed_only,
                0,
                u64::try_from(failed_limit).unwrap_or_default(),
            )
            .await?
            .into_iter()
            .map(|c| GateCluster {
                name: c.name,
                cluster_type: c.cluster_type,
                state: c.state,
                revision: c.commit,
                message: c.message.unwrap_or_default(),
            })
            .collect()
        } else {
            Vec::new()
        };
        answer.push(WaveClusterType {
            cluster_type: ct.clone(),
            registered,
            compliant: counts.compliant,
            compliant_for_ms,
            failed,
            failed_count: counts.failed,
        });
    }
    tx.commit().await?;
    Ok(WaveGate {
        environment: environment.to_owned(),
        gitops_commit: Some(commit.sha),
        cluster_types: answer,
        freezes,
    })
}
