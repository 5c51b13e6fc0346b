//! A client of the Deployment Observability Hub's API, for the commands that gate a
//! promotion on the clusters' compliance (`check-promote`, `promote --hub`) and the ones that
//! act on promotions (`approve`, `freeze`, `unfreeze`).
//!
//! Its main question is the gate (`GET /api/v1/environments/{env}/gate?commit=SHA[&into=ENV]`):
//! are the clusters that look at the environment's GitOps branch running that commit, and
//! (with `into`) may it be promoted into the next environment? The answer
//! is read into the hub's own API types (`kalypso-hub-api`), so that client and server cannot
//! disagree on its shape. Failures
//! are split into those worth asking again (the hub is unreachable or busy) and those that
//! are not (a wrong token, an unknown environment), so that a waiting command neither gives
//! up on a restarting hub nor waits out its timeout on a typo.

use std::path::Path;
use std::time::Duration;

use kalypso_git::github::encode;
use kalypso_git::redact::Secret;
pub(crate) use kalypso_hub_api::{Gate, Verdict};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Clusters a gate's answer lists at most: the commands need the verdict, its counts and the
/// first clusters that block it (the hub lists the failed ones first, then the others that are
/// not compliant), never the hub's default page of a thousand clusters.
pub(crate) const GATE_LISTED: u32 = 100;

/// Why the hub did not answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HubError {
    /// Asking again may help: the hub is unreachable, busy or failing.
    #[error("{0}")]
    Transient(String),
    /// Asking again will not help.
    #[error("{0}")]
    Fatal(String),
}

/// How many required clusters block `gate` beyond those it lists (it lists [`GATE_LISTED`]
/// at most; stale clusters are listed but not required).
pub(crate) fn unlisted_blockers(gate: &Gate) -> u64 {
    let listed = gate
        .clusters
        .iter()
        .filter(|c| {
            !matches!(
                c.state,
                kalypso_hub_api::ClusterState::Compliant | kalypso_hub_api::ClusterState::Stale
            )
        })
        .count() as u64;
    gate.total.saturating_sub(gate.compliant).saturating_sub(listed)
}

/// A client for one hub.
#[derive(Debug)]
pub(crate) struct HubClient {
    base: String,
    token: Option<Secret>,
    agent: ureq::Agent,
}

impl HubClient {
    /// A client of the hub at `base` (`http://host:port`), sending the bearer token read from
    /// `token_file` when given.
    pub fn new(base: &str, token_file: Option<&Path>) -> anyhow::Result<HubClient> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!("--hub {base:?}: expected an http:// or https:// URL");
        }
        let token = match token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("cannot read the hub token file {}: {e}", path.display()))?;
                Some(Secret::new(text.trim()))
            }
            None => None,
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(HubClient { base, token, agent })
    }

    /// The hub's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Asks whether `environment` runs `commit` (a GitOps or control-plane commit), and with
    /// `into`, whether it may be promoted into that environment. The answer lists the first
    /// [`GATE_LISTED`] clusters, those that block the commit first.
    pub fn gate(&self, environment: &str, commit: &str, into: Option<&str>) -> Result<Gate, HubError> {
        let mut url = format!(
            "{}/api/v1/environments/{}/gate?commit={}&limit={GATE_LISTED}",
            self.base,
            encode(environment),
            encode(commit)
        );
        if let Some(into) = into {
            url.push_str(&format!("&into={}", encode(into)));
        }
        self.get(&url, environment)
    }

    /// GETs `url`, an answer about `environment`, as `T`.
    fn get<T: serde::de::DeserializeOwned>(&self, url: &str, environment: &str) -> Result<T, HubError> {
        let mut request = self.agent.get(url).header("accept", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {}", token.expose()));
        }
        let what = format!("the hub at {}", self.base);
        let mut response = request.call().map_err(|e| {
            HubError::Transient(format!(
                "cannot reach {what}: {}",
                kalypso_git::redact(&e.to_string())
            ))
        })?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        match status {
            200 => serde_json::from_str(&body).map_err(|e| {
                HubError::Fatal(format!(
                    "{what} answered a question about {environment} with unexpected JSON: {e}"
                ))
            }),
            401 | 403 => Err(HubError::Fatal(format!(
                "{what} refused the request ({status}): give its API token with --hub-token-file"
            ))),
            404 => Err(HubError::Fatal(format!(
                "{what} does not know environment {environment:?}{}",
                error_message(&body).map(|m| format!(": {m}")).unwrap_or_default()
            ))),
            408 | 429 | 500..=599 => Err(HubError::Transient(format!(
                "{what} answered {status}{}",
                error_message(&body).map(|m| format!(": {m}")).unwrap_or_default()
            ))),
            _ => Err(HubError::Fatal(format!(
                "{what} answered {status}{}",
                error_message(&body).map(|m| format!(": {m}")).unwrap_or_default()
            ))),
        }
    }
}

impl HubClient {
    /// POSTs `body` as JSON to `path` (`/api/v1/approvals`) and reads the answer. Every failure
    /// is fatal: an action is not retried (it may have been recorded).
    pub fn post<B: serde::Serialize, A: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<A, HubError> {
        let url = format!("{}{path}", self.base);
        let mut request = self
            .agent
            .post(&url)
            .header("accept", "application/json")
            .header("content-type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {}", token.expose()));
        }
        let what = format!("the hub at {}", self.base);
        let text = serde_json::to_string(body).map_err(|e| HubError::Fatal(e.to_string()))?;
        let mut response = request.send(text.as_str()).map_err(|e| {
            HubError::Fatal(format!(
                "cannot reach {what}: {}",
                kalypso_git::redact(&e.to_string())
            ))
        })?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        let message = error_message(&body).map(|m| format!(": {m}")).unwrap_or_default();
        match status {
            200 => serde_json::from_str(&body)
                .map_err(|e| HubError::Fatal(format!("{what} answered {path} with unexpected JSON: {e}"))),
            401 => Err(HubError::Fatal(format!(
                "{what} refused the request ({status}): give its API token with --hub-token-file"
            ))),
            _ => Err(HubError::Fatal(format!("{what} answered {status}{message}"))),
        }
    }
}

/// The `error` (or `message`) field of a JSON error body.
fn error_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value
        .get("error")
        .or_else(|| value.get("message"))
        .and_then(serde_json::Value::as_str)
        .map(kalypso_git::redact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_gate_contract() {
        let gate: Gate = serde_json::from_str(
            r#"{"environment":"dev","gitopsCommit":"aa","controlPlaneCommit":"bb","verdict":"unknown-commit",
               "compliant":1,"total":2,"clusters":[{"name":"drone-1","clusterType":"drone","state":"failed",
               "revision":"aa","message":"kustomize build failed"}],"clusterTypesWithoutClusters":["large"]}"#,
        )
        .unwrap();
        assert_eq!(gate.verdict, Verdict::UnknownCommit);
        assert_eq!(gate.clusters[0].state, kalypso_hub_api::ClusterState::Failed);
        assert_eq!(gate.clusters[0].message(), Some("kustomize build failed"));
        assert_eq!(gate.cluster_types_without_clusters, ["large"]);
    }

    #[test]
    fn refuses_other_schemes() {
        assert!(HubClient::new("ftp://hub", None).is_err());
        assert_eq!(
            HubClient::new("http://hub:1/", None).unwrap().base(),
            "http://hub:1"
        );
    }
}
