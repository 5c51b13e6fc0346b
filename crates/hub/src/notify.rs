//! Notifications: the hub tells people what happened — a cluster failed, a gate blocked a
//! promotion, a promotion happened, an approval is needed, an environment was frozen — through
//! Slack and Microsoft Teams incoming webhooks and a generic webhook signed like Flux's
//! `generic-hmac` (`X-Signature: sha256=<hex HMAC-SHA256 of the body>`).
//!
//! Receivers are configured in a YAML file (`kalypso hub --notifications FILE`; it is meant to
//! become a section of the hub's configuration file), each with the environments and event
//! kinds it wants. Sending never waits: [`Notifier::send`] puts the event on each matching
//! receiver's bounded queue (dropping it, with a warning, when the queue is full) and a
//! background task per receiver delivers it, retrying with exponential backoff; so a receiver
//! that is down delays neither ingest nor any answer of the API.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kalypso_git::redact::Secret;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// Events a receiver's queue holds at most; more are dropped.
const QUEUE: usize = 1000;
/// How long one delivery attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A cluster reported that it failed to apply its platform commit.
    ClusterFailed,
    /// A promotion gate refused a promotion (a failure, or a freeze or window).
    GateBlocked,
    /// A promotion waits for approvals.
    ApprovalNeeded,
    /// A commit was approved.
    Approval,
    /// A commit was promoted into an environment.
    Promotion,
    /// A promotion went ahead although the gate refused it.
    Override,
    /// An environment was frozen.
    Freeze,
    /// An environment was unfrozen.
    Unfreeze,
}

impl EventKind {
    /// The kind's name (as in the configuration and the generic webhook's JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ClusterFailed => "cluster-failed",
            EventKind::GateBlocked => "gate-blocked",
            EventKind::ApprovalNeeded => "approval-needed",
            EventKind::Approval => "approval",
            EventKind::Promotion => "promotion",
            EventKind::Override => "override",
            EventKind::Freeze => "freeze",
            EventKind::Unfreeze => "unfreeze",
        }
    }
}

/// One notification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Where.
    pub environment: String,
    /// The commit it is about, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Who did it (an identity, or `hub`).
    pub actor: String,
    /// One line for people.
    pub message: String,
}

/// The kind of receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverType {
    /// A Slack incoming webhook (`{"text": ...}`).
    Slack,
    /// A Microsoft Teams incoming webhook (a MessageCard).
    Teams,
    /// Any HTTP endpoint: the event as JSON, signed with `secretFile` when given.
    Generic,
}

/// A receiver as configured.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiverConfig {
    /// A name for logs.
    pub name: String,
    /// `slack`, `teams` or `generic`.
    #[serde(rename = "type")]
    pub kind: ReceiverType,
    /// The webhook URL (or `urlFile`, for a URL that is a secret, as Slack's are).
    #[serde(default)]
    pub url: Option<String>,
    /// A file holding the webhook URL.
    #[serde(default)]
    pub url_file: Option<std::path::PathBuf>,
    /// generic: a file holding the HMAC secret.
    #[serde(default)]
    pub secret_file: Option<std::path::PathBuf>,
    /// Only these environments (none: all).
    #[serde(default)]
    pub environments: Vec<String>,
    /// Only these event kinds (none: all).
    #[serde(default)]
    pub events: Vec<EventKind>,
}

/// The notifications configuration file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NotificationsConfig {
    /// The receivers.
    #[serde(default)]
    pub receivers: Vec<ReceiverConfig>,
    /// Delivery attempts per event and receiver (default 5).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The first retry's delay, doubled for each next one (default `1s`).
    #[serde(default)]
    pub backoff: Option<String>,
}

/// A receiver ready to send.
#[derive(Clone, Debug)]
struct Receiver {
    name: String,
    kind: ReceiverType,
    url: Secret,
    secret: Option<Secret>,
    environments: BTreeSet<String>,
    events: BTreeSet<EventKind>,
}

impl Receiver {
    fn wants(&self, event: &Event) -> bool {
        (self.environments.is_empty() || self.environments.contains(&event.environment))
            && (self.events.is_empty() || self.events.contains(&event.kind))
    }

    /// The body and headers of `event` for this receiver.
    fn request(&self, event: &Event) -> (Vec<u8>, Vec<(&'static str, String)>) {
        let text = format!(
            "[{}] {}: {}",
            event.kind.as_str(),
            event.environment,
            event.message
        );
        let body = match self.kind {
            ReceiverType::Slack => serde_json::json!({ "text": text }),
            ReceiverType::Teams => serde_json::json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "summary": text,
                "title": format!("kalypso: {} in {}", event.kind.as_str(), event.environment),
                "text": event.message,
            }),
            ReceiverType::Generic => serde_json::to_value(event).unwrap_or_default(),
        };
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let mut headers = vec![("content-type", "application/json".to_owned())];
        if let Some(secret) = &self.secret {
            headers.push((
                "x-signature",
                kalypso_git::signature::sign(secret.expose().as_bytes(), &body),
            ));
        }
        (body, headers)
    }
}

/// Why a notifications file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("notifications file {file}: {message}")]
pub struct ConfigError {
    file: String,
    message: String,
}

fn read_secret(file: &Path, what: &str) -> Result<Secret, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{what}: cannot read {}: {e}", file.display()))?;
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("{what}: {} is empty", file.display()));
    }
    Ok(Secret::new(text))
}

impl NotificationsConfig {
    /// Reads and checks `file`.
    pub fn load(file: &Path) -> Result<NotificationsConfig, ConfigError> {
        let fail = |message: String| ConfigError {
            file: file.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(file).map_err(|e| fail(e.to_string()))?;
        let config: NotificationsConfig = serde_yaml_ng::from_str(&text).map_err(|e| fail(e.to_string()))?;
        config.receivers().map_err(fail)?;
        Ok(config)
    }

    fn backoff(&self) -> Result<Duration, String> {
        match &self.backoff {
            None => Ok(Duration::from_secs(1)),
            Some(text) => kalypso_core::duration::parse(text).map_err(|e| format!("backoff: {e}")),
        }
    }

    fn receivers(&self) -> Result<Vec<Receiver>, String> {
        self.backoff()?;
        if self.attempts == Some(0) {
            return Err("attempts: must be at least 1".into());
        }
        let mut out = Vec::new();
        let mut names = BTreeSet::new();
        for (i, r) in self.receivers.iter().enumerate() {
            let what = format!("receivers[{i}] ({:?})", r.name);
            if r.name.trim().is_empty() {
                return Err(format!("receivers[{i}].name: is empty"));
            }
            if !names.insert(r.name.clone()) {
                return Err(format!("{what}: a second receiver of this name"));
            }
            let url = match (&r.url, &r.url_file) {
                (Some(url), None) => Secret::new(url.trim()),
                (None, Some(file)) => read_secret(file, &format!("{what}.urlFile"))?,
                _ => return Err(format!("{what}: give exactly one of url and urlFile")),
            };
            let scheme_ok = ["http://", "https://"]
                .iter()
                .any(|s| url.expose().to_ascii_lowercase().starts_with(s));
            if !scheme_ok {
                return Err(format!("{what}: the URL is not http(s)"));
            }
            let secret = match (&r.secret_file, r.kind) {
                (Some(file), ReceiverType::Generic) => {
                    Some(read_secret(file, &format!("{what}.secretFile"))?)
                }
                (Some(_), _) => return Err(format!("{what}.secretFile: only generic receivers sign")),
                (None, _) => None,
            };
            out.push(Receiver {
                name: r.name.clone(),
                kind: r.kind,
                url,
                secret,
                environments: r.environments.iter().cloned().collect(),
                events: r.events.iter().copied().collect(),
            });
        }
        Ok(out)
    }
}

/// Sends events to the configured receivers, in the background.
#[derive(Clone, Debug, Default)]
pub struct Notifier {
    queues: Arc<Vec<(Receiver, mpsc::Sender<Event>)>>,
}

impl Notifier {
    /// A notifier that sends nothing.
    pub fn none() -> Notifier {
        Notifier::default()
    }

    /// Starts one delivery task per receiver of `config`. Must run inside a tokio runtime.
    pub fn start(config: &NotificationsConfig) -> Result<Notifier, String> {
        let receivers = config.receivers()?;
        let backoff = config.backoff()?;
        let attempts = config.attempts.unwrap_or(5);
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(ATTEMPT_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        let mut queues = Vec::new();
        for receiver in receivers {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(deliver(receiver.clone(), rx, agent.clone(), attempts, backoff));
            queues.push((receiver, tx));
        }
        Ok(Notifier {
            queues: Arc::new(queues),
        })
    }

    /// Queues `event` for every receiver that wants it; never waits.
    pub fn send(&self, event: Event) {
        for (receiver, queue) in self.queues.iter() {
            if receiver.wants(&event)
                && let Err(e) = queue.try_send(event.clone())
            {
                tracing::warn!(receiver = %receiver.name, error = %e, "notification dropped");
            }
        }
    }
}

async fn deliver(
    receiver: Receiver,
    mut queue: mpsc::Receiver<Event>,
    agent: ureq::Agent,
    attempts: u32,
    backoff: Duration,
) {
    while let Some(event) = queue.recv().await {
        let (body, headers) = receiver.request(&event);
        let mut delay = backoff;
        for attempt in 1..=attempts {
            let agent = agent.clone();
            let url = receiver.url.clone();
            let body = body.clone();
            let headers = headers.clone();
            let result = tokio::task::spawn_blocking(move || {
                let mut request = agent.post(url.expose());
                for (name, value) in &headers {
                    request = request.header(*name, value);
                }
                match request.send(&body[..]) {
                    Ok(response) if response.status().is_success() => Ok(()),
                    Ok(response) => Err(format!("answered {}", response.status().as_u16())),
                    Err(e) => Err(kalypso_git::redact(&e.to_string())),
                }
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match result {
                Ok(()) => break,
                Err(error) if attempt < attempts => {
                    tracing::debug!(receiver = %receiver.name, attempt, %error, "notification not delivered; retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                }
                Err(error) => {
                    tracing::warn!(receiver = %receiver.name, kind = event.kind.as_str(), attempts, %error, "notification not delivered");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn receiver(kind: ReceiverType, secret: Option<&str>) -> Receiver {
        Receiver {
            name: "r".into(),
            kind,
            url: Secret::new("http://127.0.0.1:1/hook"),
            secret: secret.map(Secret::new),
            environments: BTreeSet::from(["prod".to_owned()]),
            events: BTreeSet::new(),
        }
    }

    fn event() -> Event {
        Event {
            kind: EventKind::Freeze,
            environment: "prod".into(),
            commit: None,
            actor: "ana".into(),
            message: "frozen by ana: incident 42".into(),
        }
    }

    #[test]
    fn generic_receivers_sign_like_flux_generic_hmac() {
        let (body, headers) = receiver(ReceiverType::Generic, Some("secret")).request(&event());
        assert_eq!(
            String::from_utf8(body.clone()).unwrap(),
            r#"{"actor":"ana","environment":"prod","kind":"freeze","message":"frozen by ana: incident 42"}"#
        );
        let signature = &headers.iter().find(|(n, _)| *n == "x-signature").unwrap().1;
        assert!(kalypso_git::signature::verify(b"secret", &body, signature));
        assert!(signature.starts_with("sha256="));
    }

    #[test]
    fn slack_and_teams_get_their_shapes_and_routes_apply() {
        let (body, _) = receiver(ReceiverType::Slack, None).request(&event());
        assert_eq!(
            String::from_utf8(body).unwrap(),
            r#"{"text":"[freeze] prod: frozen by ana: incident 42"}"#
        );
        let (body, _) = receiver(ReceiverType::Teams, None).request(&event());
        let card: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(card["@type"], "MessageCard");
        let r = receiver(ReceiverType::Slack, None);
        assert!(r.wants(&event()));
        assert!(!r.wants(&Event {
            environment: "dev".into(),
            ..event()
        }));
    }
}
