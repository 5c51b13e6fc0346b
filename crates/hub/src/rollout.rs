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

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use kalypso_hub_api::{ClusterState, GateCluster, WaveClusterType, WaveGate};

use crate::counts::{self, Scope, Snapshot, Staleness};
use crate::db::{Db, DbError};
use crate::http::{ApiError, ApiResult, HubState, ON_DEMAND_REFRESH, check_token, int_param, ok};
use crate::query::{resolve_commit, resolve_commit_in};

/// The most cluster types one question may name.
pub const MAX_CLUSTER_TYPES: usize = 1000;
/// The default number of failed clusters listed per cluster type.
pub const DEFAULT_FAILED_LIMIT: i64 = 20;

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
    let mut tx = db.begin_read().await?;
    let Some(commit) = resolve_commit_in(&mut tx, environment, sha).await? else {
        return Ok(WaveGate {
            environment: environment.to_owned(),
            gitops_commit: None,
            cluster_types: Vec::new(),
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
    })
}

/// The cluster types of `?clusterTypes=a,b` (names as the tree has them: no empty ones).
fn cluster_types_param(params: &BTreeMap<String, String>) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, Some("clusterTypes"), message);
    let text = params
        .get("clusterTypes")
        .ok_or_else(|| bad("the clusterTypes query parameter is missing".to_owned()))?;
    let mut out: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim) {
        if name.is_empty() || name.len() > 253 || name.chars().any(|c| c.is_control() || c == '/') {
            return Err(bad(format!("{name:?} is not a cluster type name")));
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    if out.len() > MAX_CLUSTER_TYPES {
        return Err(bad(format!(
            "at most {MAX_CLUSTER_TYPES} cluster types per question"
        )));
    }
    Ok(out)
}

/// `GET /api/v1/environments/{environment}/waves`.
#[utoipa::path(get, path = "/api/v1/environments/{environment}/waves", tag = "queries",
    summary = "A progressive rollout's wave gate: how some cluster types' clusters run a commit",
    description = "Per cluster type asked about: registered (non-stale) clusters, those compliant with the GitOps \
        commit or a later one, the failed ones with their reconciler's message, and for how long the compliant ones \
        have been compliant. Reports of an earlier commit never count as compliant. `gitopsCommit` is null when \
        the hub does not know the commit even after an on-demand refresh.",
    params(
        ("environment" = String, Path, example = "prod", description = "The environment."),
        ("commit" = String, Query, example = "6f1e9c2a", pattern = "^\\s*[0-9a-fA-F]{4,40}\\s*$",
            description = "The GitOps commit that delivered the wave (4 to 40 hex digits)."),
        ("clusterTypes" = String, Query, example = "canary-small,canary-large",
            description = "The cluster types, comma-separated (at most 1000)."),
        ("limit" = Option<i64>, Query, minimum = 0, maximum = 10000, description = "Failed clusters listed per cluster type at most (default 20)."),
    ),
    responses(
        (status = 200, description = "The cluster types' counts.", body = WaveGate),
        (status = 400, description = "A missing or malformed commit or cluster type list, or a bad limit (`field` names it).", body = kalypso_hub_api::ErrorBody),
    ))]
pub(crate) async fn get_waves(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(environment): Path<String>,
    Query(params): Query<BTreeMap<String, String>>,
) -> ApiResult {
    check_token(&state, &headers)?;
    let commit = params
        .get("commit")
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                Some("commit"),
                "the commit query parameter is missing",
            )
        })?;
    if crate::query::commit_pattern(&commit).is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("commit"),
            format!("{commit:?} is not a commit id (4 to 64 hex digits)"),
        ));
    }
    let cluster_types = cluster_types_param(&params)?;
    let limit = int_param(&params, "limit", DEFAULT_FAILED_LIMIT, 10_000)?;
    let db = state.db();
    if resolve_commit(db, &environment, &commit).await?.is_none() {
        state.refresher().refresh_now(ON_DEMAND_REFRESH).await;
    }
    ok(waves(
        db,
        &environment,
        &commit,
        &cluster_types,
        state.staleness(),
        limit,
    )
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_type_lists_are_checked() {
        let params = |v: &str| BTreeMap::from([("clusterTypes".to_owned(), v.to_owned())]);
        assert_eq!(
            cluster_types_param(&params("small, large,small")).unwrap(),
            ["small", "large"]
        );
        assert!(cluster_types_param(&params("small,,large")).is_err());
        assert!(cluster_types_param(&params("a/b")).is_err());
        assert!(cluster_types_param(&BTreeMap::new()).is_err());
    }
}
