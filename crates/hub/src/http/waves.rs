//! The HTTP side of a progressive rollout's wave gate
//! (`GET /api/v1/environments/{env}/waves`): its parameters checked, the answer from
//! [`crate::rollout::waves`].

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use kalypso_hub_api::WaveGate;

use super::{ApiError, ApiResult, HubState, ON_DEMAND_REFRESH, check_token, int_param, ok};
use crate::query::resolve_commit;
use crate::rollout::waves;

/// The most cluster types one question may name.
pub const MAX_CLUSTER_TYPES: usize = 1000;
/// The default number of failed clusters listed per cluster type.
pub const DEFAULT_FAILED_LIMIT: i64 = 20;

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
pub async fn get_waves(
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
