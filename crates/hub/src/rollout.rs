//! The gate of a progressive rollout's waves (`GET /api/v1/environments/{env}/waves`): per
//! cluster type asked about, the registered clusters, those compliant with a GitOps commit or
//! a later one (which contains it, on the environment's first-parent history), the failed ones
//! with their reconciler's message, and for how long the compliant ones have been compliant
//! (the wave's soak).
//!
//! Only reports of the commit or a later one count: a cluster still healthy on the commit
//! before the wave is *behind*, never compliant, so a wave is never advanced by reports of the
//! old content. The counts are one `GROUP BY` over the clusters of the environment's cluster
//! types asked about, as the promotion gate's ([`crate::query`]).

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use kalypso_hub_api::{ClusterState, GateCluster, WaveClusterType, WaveGate};
use sqlx::Row;

use crate::db::{Db, DbError};
use crate::http::{ApiError, ApiResult, HubState, ON_DEMAND_REFRESH, check_token, int_param, now_ms, ok};
use crate::query::{relative_sql, resolve_commit};

/// The most cluster types one question may name.
pub const MAX_CLUSTER_TYPES: usize = 1000;
/// The default number of failed clusters listed per cluster type.
pub const DEFAULT_FAILED_LIMIT: i64 = 20;

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The wave gate of `environment` for GitOps commit `sha` and `cluster_types` (see the module
/// docs); `now` and `stale_before` are Unix ms.
pub async fn waves(
    db: &Db,
    environment: &str,
    sha: &str,
    cluster_types: &[String],
    stale_before: i64,
    now: i64,
    failed_limit: i64,
) -> Result<WaveGate, DbError> {
    let Some(commit) = resolve_commit(db, environment, sha).await? else {
        return Ok(WaveGate {
            environment: environment.to_owned(),
            gitops_commit: None,
            cluster_types: Vec::new(),
        });
    };
    let mut by_type: BTreeMap<String, WaveClusterType> = cluster_types
        .iter()
        .map(|ct| {
            (
                ct.clone(),
                WaveClusterType {
                    cluster_type: ct.clone(),
                    registered: 0,
                    compliant: 0,
                    compliant_for_ms: None,
                    failed: Vec::new(),
                    failed_count: 0,
                },
            )
        })
        .collect();
    if !cluster_types.is_empty() {
        let rel = relative_sql("$2", "$3");
        let sql = format!(
            "SELECT cluster_type, \
             SUM(CASE WHEN last_seen < $2 THEN 0 ELSE 1 END), \
             SUM(CASE WHEN {rel} = 'compliant' THEN 1 ELSE 0 END), \
             SUM(CASE WHEN {rel} = 'failed' THEN 1 ELSE 0 END), \
             MAX(CASE WHEN {rel} = 'compliant' THEN since ELSE NULL END) \
             FROM clusters WHERE environment = $1 AND cluster_type IN ({}) GROUP BY cluster_type",
            placeholders(4, cluster_types.len())
        );
        let mut q = sqlx::query(&sql)
            .bind(environment)
            .bind(stale_before)
            .bind(commit.position);
        for ct in cluster_types {
            q = q.bind(ct);
        }
        for row in q.fetch_all(db.pool()).await? {
            let ct: String = row.try_get(0)?;
            let Some(entry) = by_type.get_mut(&ct) else {
                continue;
            };
            entry.registered = count(row.try_get::<Option<i64>, _>(1)?.unwrap_or_default());
            entry.compliant = count(row.try_get::<Option<i64>, _>(2)?.unwrap_or_default());
            entry.failed_count = count(row.try_get::<Option<i64>, _>(3)?.unwrap_or_default());
            let since: Option<i64> = row.try_get(4)?;
            entry.compliant_for_ms = since.map(|s| count(now.saturating_sub(s)));
        }
        let failing: Vec<String> = by_type
            .values()
            .filter(|t| t.failed_count > 0)
            .map(|t| t.cluster_type.clone())
            .collect();
        for ct in failing {
            let sql = format!(
                "SELECT name, commit_sha, message FROM clusters WHERE environment = $1 AND cluster_type = $4 \
                 AND ({rel}) = 'failed' ORDER BY name LIMIT {failed_limit}"
            );
            let rows = sqlx::query(&sql)
                .bind(environment)
                .bind(stale_before)
                .bind(commit.position)
                .bind(&ct)
                .fetch_all(db.pool())
                .await?;
            let entry = by_type.get_mut(&ct).expect("asked about");
            for row in rows {
                entry.failed.push(GateCluster {
                    name: row.try_get(0)?,
                    cluster_type: ct.clone(),
                    state: ClusterState::Failed,
                    revision: row.try_get(1)?,
                    message: row.try_get::<Option<String>, _>(2)?.unwrap_or_default(),
                });
            }
        }
    }
    Ok(WaveGate {
        environment: environment.to_owned(),
        gitops_commit: Some(commit.sha),
        cluster_types: cluster_types.iter().filter_map(|ct| by_type.remove(ct)).collect(),
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
        state.stale_before(),
        now_ms(),
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
