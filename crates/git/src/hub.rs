//! The Deployment Observability Hub as the gate of a rollout's waves ([`WaveGate`]), one
//! implementation for every process that continues a rollout: `kalypso sync --hub`, `kalypso
//! rollout status --hub`, `kalypso serve` and the operator.
//!
//! It asks `GET /api/v1/environments/{env}/waves?commit=SHA&clusterTypes=a,b` (in parts when
//! the list is long), reads the answer into the hub's own API types (`kalypso-hub-api`, so
//! client and server cannot disagree on its shape), and sums it per wave. The API token is
//! read from a file and held as a [`Secret`]: it never appears in a message.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use kalypso_core::rollout::WaveHealth;

use crate::github::encode;
use crate::redact::{Secret, redact};
use crate::rollout::{GateAnswer, WaveGate};

/// How long one question may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest cluster type list one question carries (the hub takes 4096 characters).
const MAX_WAVE_QUESTION: usize = 4000;

/// A hub, asked about rollouts' waves.
pub struct HubGate {
    base: String,
    token: Option<Secret>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for HubGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubGate")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl HubGate {
    /// The hub at `base` (`http://host:port`), with the bearer token read from `token_file`
    /// when given. Errors name the URL or the file, never the token.
    pub fn new(base: &str, token_file: Option<&Path>) -> Result<HubGate, String> {
        let token = match token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the hub token file {}: {e}", path.display()))?;
                let token = text.trim();
                if token.is_empty() {
                    return Err(format!("the hub token file {} is empty", path.display()));
                }
                Some(Secret::new(token))
            }
            None => None,
        };
        HubGate::with_token(base, token)
    }

    /// The hub at `base`, with `token` (if any).
    pub fn with_token(base: &str, token: Option<Secret>) -> Result<HubGate, String> {
        let base = base.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "hub URL {:?}: expected an http:// or https:// URL",
                redact(&base)
            ));
        }
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Ok(HubGate { base, token, agent })
    }

    /// The hub's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// How the clusters of `cluster_types` of `environment` run GitOps commit `commit`.
    pub fn waves(
        &self,
        environment: &str,
        commit: &str,
        cluster_types: &[String],
    ) -> Result<kalypso_hub_api::WaveGate, String> {
        let url = format!(
            "{}/api/v1/environments/{}/waves?commit={}&clusterTypes={}",
            self.base,
            encode(environment),
            encode(commit),
            encode(&cluster_types.join(","))
        );
        let mut request = self.agent.get(&url).header("accept", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", &format!("Bearer {}", token.expose()));
        }
        let what = format!("the hub at {}", redact(&self.base));
        let mut response = request
            .call()
            .map_err(|e| format!("cannot reach {what}: {}", redact(&e.to_string())))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().unwrap_or_default();
        let message = error_message(&body).map(|m| format!(": {m}")).unwrap_or_default();
        match status {
            200 => serde_json::from_str(&body).map_err(|e| {
                format!("{what} answered the wave gate of {environment} with unexpected JSON: {e}")
            }),
            401 | 403 => Err(format!(
                "{what} refused the request ({status}): give its API token (a token file)"
            )),
            404 => Err(format!(
                "{what} does not know environment {environment:?}{message}"
            )),
            _ => Err(format!("{what} answered {status}{message}")),
        }
    }

    /// [`WaveGate::health`] with `now` (Unix ms) as the time the hub's "compliant for" is
    /// turned into a time.
    pub fn health_at(
        &self,
        environment: &str,
        commit: &str,
        waves: &[BTreeSet<String>],
        now: i64,
    ) -> Result<GateAnswer, String> {
        let all: Vec<String> = waves.iter().flatten().cloned().collect();
        let mut answered: Vec<kalypso_hub_api::WaveClusterType> = Vec::new();
        let mut frozen = None;
        let mut chunk: Vec<String> = Vec::new();
        let mut length = 0;
        for (i, ct) in all.iter().enumerate() {
            chunk.push(ct.clone());
            length += ct.chars().count() + 1;
            let next = all.get(i + 1).map_or(usize::MAX, |n| n.chars().count() + 1);
            if i + 1 == all.len() || length + next > MAX_WAVE_QUESTION {
                let answer = self.waves(environment, commit, &chunk)?;
                frozen = answer.freezes.first().map(|f| {
                    format!(
                        "frozen by {} since {}{}: {}",
                        f.actor,
                        f.frozen_at,
                        f.until
                            .as_ref()
                            .map(|u| format!(" until {u}"))
                            .unwrap_or_default(),
                        f.reason
                    )
                });
                if answer.gitops_commit.is_none() {
                    return Ok(GateAnswer { waves: None, frozen });
                }
                answered.extend(answer.cluster_types);
                chunk.clear();
                length = 0;
            }
        }
        Ok(GateAnswer {
            waves: Some(per_wave(waves, &answered, now)),
            frozen,
        })
    }
}

impl WaveGate for HubGate {
    fn health(
        &self,
        environment: &str,
        commit: &str,
        waves: &[BTreeSet<String>],
    ) -> Result<GateAnswer, String> {
        self.health_at(environment, commit, waves, now_ms())
    }
}

/// The hub's per-cluster-type answer summed per wave; `now` turns "compliant for" into a time.
fn per_wave(
    waves: &[BTreeSet<String>],
    answered: &[kalypso_hub_api::WaveClusterType],
    now: i64,
) -> Vec<WaveHealth> {
    let by_type: BTreeMap<&str, &kalypso_hub_api::WaveClusterType> =
        answered.iter().map(|t| (t.cluster_type.as_str(), t)).collect();
    waves
        .iter()
        .map(|cluster_types| {
            let mut h = WaveHealth::default();
            for ct in cluster_types {
                let Some(t) = by_type.get(ct.as_str()) else {
                    h.without_clusters.push(ct.clone());
                    continue;
                };
                if t.registered == 0 {
                    h.without_clusters.push(ct.clone());
                }
                h.registered += t.registered;
                h.compliant += t.compliant;
                h.failed.extend(
                    t.failed
                        .iter()
                        .map(|c| (c.name.clone(), ct.clone(), c.message.clone())),
                );
                // Failed clusters beyond the hub's list still count.
                h.failed_count += t.failed_count.max(t.failed.len() as u64);
                if let Some(for_ms) = t.compliant_for_ms {
                    let since = now.saturating_sub(i64::try_from(for_ms).unwrap_or(i64::MAX));
                    h.compliant_since = Some(h.compliant_since.map_or(since, |s: i64| s.max(since)));
                }
            }
            h
        })
        .collect()
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

/// The `error` (or `message`) field of a JSON error body.
fn error_message(body: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    value
        .get("error")
        .or_else(|| value.get("message"))
        .and_then(serde_json::Value::as_str)
        .map(redact)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn answered(
        ct: &str,
        registered: u64,
        compliant: u64,
        for_ms: Option<u64>,
    ) -> kalypso_hub_api::WaveClusterType {
        kalypso_hub_api::WaveClusterType {
            cluster_type: ct.to_owned(),
            registered,
            compliant,
            compliant_for_ms: for_ms,
            failed: Vec::new(),
            failed_count: 0,
        }
    }

    #[test]
    fn sums_the_answer_per_wave() {
        let waves = vec![
            BTreeSet::from(["small".to_owned(), "tiny".to_owned()]),
            BTreeSet::from(["large".to_owned()]),
        ];
        let health = per_wave(
            &waves,
            &[
                answered("small", 2, 2, Some(1_000)),
                answered("tiny", 0, 0, None),
                answered("large", 3, 1, None),
            ],
            10_000,
        );
        assert_eq!(
            (
                health[0].registered,
                health[0].compliant,
                health[0].compliant_since
            ),
            (2, 2, Some(9_000))
        );
        assert_eq!(health[0].without_clusters, ["tiny"]);
        assert_eq!((health[1].registered, health[1].compliant), (3, 1));
    }

    #[test]
    fn refuses_other_schemes_and_never_shows_the_token() {
        assert!(HubGate::with_token("ftp://hub", None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret-hub-token\n").unwrap();
        let gate = HubGate::new("http://127.0.0.1:1/", Some(&file)).unwrap();
        assert_eq!(gate.base(), "http://127.0.0.1:1");
        assert!(!format!("{gate:?}").contains("s3cret"));
        let error = gate.waves("dev", "abc", &["small".to_owned()]).unwrap_err();
        assert!(
            error.contains("cannot reach the hub at http://127.0.0.1:1"),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        std::fs::write(&file, " \n").unwrap();
        let empty = HubGate::new("http://127.0.0.1:1", Some(&file)).unwrap_err();
        assert!(empty.contains("is empty") && empty.contains("token"), "{empty}");
    }
}
