//! The HTTP side of a progressive rollout: the wave gate
//! (`GET /api/v1/environments/{env}/waves`, its parameters checked, the answer from
//! [`crate::rollout::waves`]) and the rollout for people
//! (`GET /api/v1/environments/{env}/rollout`, from [`crate::rollout::environment_rollout`]).

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use kalypso_hub_api::{EnvironmentRollout, WaveGate};

use super::{ApiError, ApiResult, HubState, ON_DEMAND_REFRESH, int_param, not_found, ok};
use crate::auth::{Action, authorize};
use crate::query::resolve_commit;
use crate::rollout::waves;

/// The longest `clusterTypes` list, in characters: well within the longest request line the
/// HTTP server takes (64 KiB) even when every character is percent-encoded UTF-8. A client
/// asks about more cluster types in several questions (`kalypso sync` does).
pub const MAX_CLUSTER_TYPES_LENGTH: usize = 4096;
/// The default number of failed clusters listed per cluster type.
pub const DEFAULT_FAILED_LIMIT: i64 = 20;

/// The cluster types of `?clusterTypes=a,b`, each once, in the order given. Empty entries are
/// skipped, and a name no cluster type has is answered with no registered cluster (names are
/// only ever compared, never interpreted); only a missing or overlong list is refused, as the
/// OpenAPI document says.
fn cluster_types_param(params: &BTreeMap<String, String>) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError::new(StatusCode::BAD_REQUEST, Some("clusterTypes"), message);
    let text = params
        .get("clusterTypes")
        .ok_or_else(|| bad("the clusterTypes query parameter is missing".to_owned()))?;
    if text.chars().count() > MAX_CLUSTER_TYPES_LENGTH {
        return Err(bad(format!(
            "the cluster type list is longer than {MAX_CLUSTER_TYPES_LENGTH} characters"
        )));
    }
    let mut out: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
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
        ("clusterTypes" = String, Query, example = "canary-small,canary-large", max_length = 4096,
            description = "The cluster types, comma-separated (empty entries are skipped; a name no cluster type \
                has is answered with no registered cluster)."),
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
    authorize(&state, &headers, Action::Read)?;
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

/// `GET /api/v1/environments/{environment}/rollout`.
#[utoipa::path(get, path = "/api/v1/environments/{environment}/rollout", tag = "queries",
    summary = "An environment's progressive rollout: waves, cluster types, clusters, soak and what blocks",
    description = "The rollout the environment's GitOps branch tracks at its head (as the hub's last refresh read it): \
        each wave with its cluster types (and their labels, read from the control plane at the rollout's change) and \
        their clusters' counts relative to the GitOps commit that delivered the last wave reached, the soak left, the \
        status, and what keeps the rollout from going on. `rollout` is null when the branch tracks none (the \
        environment is delivered whole), or when the hub cannot tell (`unavailable` says why).",
    params(("environment" = String, Path, example = "prod", description = "The environment.")),
    responses(
        (status = 200, description = "The environment's rollout.", body = EnvironmentRollout),
        (status = 404, description = "No such environment.", body = kalypso_hub_api::ErrorBody),
    ))]
pub async fn get_rollout(
    State(state): State<HubState>,
    headers: HeaderMap,
    Path(environment): Path<String>,
) -> ApiResult {
    authorize(&state, &headers, Action::Read)?;
    match crate::rollout::environment_rollout(
        state.db(),
        state.refresher().observed(),
        state.refresher().enabled(),
        &environment,
        state.staleness(),
    )
    .await?
    {
        Some(answer) => ok(answer),
        None => Err(not_found(format!("no environment {environment:?}"))),
    }
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
        assert_eq!(
            cluster_types_param(&params("small,,large, ")).unwrap(),
            ["small", "large"]
        );
        assert_eq!(cluster_types_param(&params("")).unwrap(), Vec::<String>::new());
        let long = "a,".repeat(MAX_CLUSTER_TYPES_LENGTH / 2 + 1);
        assert!(cluster_types_param(&params(&long)).is_err());
        assert!(cluster_types_param(&BTreeMap::new()).is_err());
    }
}
