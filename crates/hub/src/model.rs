//! What a cluster reports, parsed and validated before anything is stored.
//!
//! Two payloads come in: the event Flux's notification-controller posts with a `generic` or
//! `generic-hmac` Provider (the `event.toolkit.fluxcd.io/v1beta1` Event, after the controller
//! merged the Alert's `spec.eventMetadata` into `metadata` and stripped the involved object's
//! API-group prefix from its keys), and a small generic JSON report for any other agent
//! (Argo CD notifications, scripts). Both become one [`Report`]; every rejection names the
//! field at fault, so that a misconfigured Alert is easy to fix.

use std::borrow::Cow;

use kalypso_hub_api::{ClusterState, ComplianceReport, FluxEvent, MAX_NAME, Severity};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// The most of a report's message that is stored (Flux allows 39,000 characters).
pub const MAX_MESSAGE: usize = 8 * 1024;

/// One report, ready to be stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The cluster's environment.
    pub environment: String,
    /// The cluster's name.
    pub cluster: String,
    /// The cluster's type.
    pub cluster_type: String,
    /// The reporting object: `Kind/namespace/name` for Flux, `compliance/<repo>#<branch>` for
    /// generic reports.
    pub object: String,
    /// Whether the object applies a revision (a Kustomization, a HelmRelease, a generic
    /// report) and may so decide the cluster's platform state; sources only fetch.
    pub drives: bool,
    /// The state: compliant, reconciling or failed.
    pub state: ClusterState,
    /// The revision as reported (`dev@sha1:<hex>`), or empty.
    pub revision: String,
    /// The commit of the revision (40 lower-case hex digits), the artifact of an OCI revision
    /// (`sha256:<64 hex>`), or empty.
    pub commit: String,
    /// What happened.
    pub message: String,
    /// Flux's reason (`ReconciliationSucceeded`...), or empty.
    pub reason: String,
    /// When it happened, Unix milliseconds.
    pub event_time: i64,
}

/// A rejected payload: which field, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BadInput {
    /// The field's path (`metadata.cluster`, `involvedObject.kind`, `commit`).
    pub field: String,
    /// Why.
    pub message: String,
}

impl BadInput {
    fn new(field: impl Into<String>, message: impl Into<String>) -> BadInput {
        BadInput {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The commit a revision names: `<branch>@sha1:<hex>` (Flux 2), `sha1:<hex>`, a bare
/// 40-hex id, or `<branch>/<hex>` (older Flux); or the artifact an OCI revision names,
/// `<tag>@sha256:<64 hex>` (Flux's `OCIRepository`) or `sha256:<64 hex>`, as
/// `sha256:<hex>`. `None` for anything else.
pub fn parse_revision(revision: &str) -> Option<String> {
    let r = revision.trim();
    let oci = r
        .rsplit_once("@sha256:")
        .map(|(_, hex)| hex)
        .or_else(|| r.strip_prefix("sha256:"));
    if let Some(hex) = oci {
        return (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| format!("sha256:{}", hex.to_ascii_lowercase()));
    }
    let hex = if let Some((_, digest)) = r.rsplit_once("@sha1:") {
        digest
    } else if let Some(digest) = r.strip_prefix("sha1:") {
        digest
    } else if is_sha(r) {
        r
    } else if let Some((_, digest)) = r.rsplit_once('/') {
        digest
    } else {
        return None;
    };
    is_sha(hex).then(|| hex.to_ascii_lowercase())
}

/// Whether `text` is a full 40-hex commit id.
pub fn is_sha(text: &str) -> bool {
    text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An RFC 3339 time as Unix milliseconds.
pub fn parse_time(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Unix milliseconds as RFC 3339 (UTC, millisecond precision).
pub fn format_time(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn check_name(field: &str, value: Option<&str>) -> Result<String, BadInput> {
    let raw = value.unwrap_or_default();
    let value = raw.trim();
    if value.is_empty() {
        return Err(BadInput::new(field, "is missing or empty"));
    }
    if raw.chars().count() > MAX_NAME {
        return Err(BadInput::new(
            field,
            format!("is longer than {MAX_NAME} characters"),
        ));
    }
    if value.chars().any(|c| c.is_control() || c == '/') {
        return Err(BadInput::new(field, "holds a control character or a '/'"));
    }
    Ok(value.to_owned())
}

/// `text` with every NUL character replaced by U+FFFD: PostgreSQL's text cannot hold NUL, and
/// a report must not be refused (and retried forever) for a byte in a message. (Names never
/// hold one: [`check_name`] refuses control characters.)
fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}")
    } else {
        text
    }
}

fn truncate(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// Deserializes `body` into `B`, a twin of the API type `T` that borrows its strings from the
/// body: a good payload is parsed once, without copies. On failure the body is parsed again
/// into `T` through a slower path that tracks where it failed, to name the field at fault. (The
/// twins accept exactly what their API types accept.)
fn from_json<'a, B: Deserialize<'a>, T: DeserializeOwned>(body: &'a [u8]) -> Result<B, BadInput> {
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let error = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(_) => return Err(BadInput::new("body", "invalid JSON")),
        Err(e) => e,
    };
    let path = error.path().to_string();
    let inner = error.into_inner();
    // A missing field is reported at its parent; name the field itself.
    let message = inner.to_string();
    let at_root = path == "." || path == "?";
    let field = match message.strip_prefix("missing field `") {
        Some(rest) => {
            let name = rest.split('`').next().unwrap_or_default();
            if at_root {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            }
        }
        None if at_root || inner.is_syntax() || inner.is_eof() => "body".to_owned(),
        None => path,
    };
    Err(BadInput::new(field, format!("invalid JSON: {message}")))
}

/// [`FluxEvent`], borrowing its strings from the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FluxEventRef<'a> {
    #[serde(borrow)]
    involved_object: InvolvedObjectRef<'a>,
    severity: Severity,
    #[serde(default, borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Cow<'a, str>,
    #[serde(default, borrow)]
    reason: Cow<'a, str>,
    #[serde(default, borrow)]
    metadata: Metadata<'a>,
}

/// [`kalypso_hub_api::InvolvedObject`], borrowing its strings from the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvolvedObjectRef<'a> {
    #[serde(default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    // Not used, but checked as the API type checks them.
    #[serde(default, borrow)]
    #[allow(dead_code)]
    api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    #[allow(dead_code)]
    uid: Option<Cow<'a, str>>,
}

/// A Flux event's `metadata`: string keys and values, in the body's order (a repeated key's
/// last value counts, as in a map).
#[derive(Default)]
struct Metadata<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Metadata<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Entries<'a> {
            type Value = Metadata<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Metadata<'a>, M::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((k, v)) = map.next_entry::<Borrowed<'a>, Borrowed<'a>>()? {
                    entries.push((k.0, v.0));
                }
                Ok(Metadata(entries))
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// A string borrowed from the body when it has no escapes.
struct Borrowed<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wrap<'a>(#[serde(borrow)] Cow<'a, str>);
        Wrap::deserialize(d).map(|w| Borrowed(w.0))
    }
}

/// [`ComplianceReport`], borrowing its strings from the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ComplianceReportRef<'a> {
    #[serde(default, borrow)]
    cluster: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    cluster_type: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    environment: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    gitops_repo: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    branch: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    commit: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    state: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    time: Option<Cow<'a, str>>,
}

/// Kinds that only fetch an artifact: their events never decide a cluster's state.
const SOURCE_KINDS: [&str; 6] = [
    "GitRepository",
    "OCIRepository",
    "Bucket",
    "HelmRepository",
    "HelmChart",
    "ExternalArtifact",
];

/// Parses a Flux event. The cluster's identity comes from the metadata keys `cluster`,
/// `clusterType` and `environment` (the Alert's `spec.eventMetadata`); the revision from
/// `revision` (also accepted with an API-group prefix, as older controllers sent it).
///
/// State: severity `error` → failed; a source's event → reconciling (it fetched, nothing is
/// applied yet); reason `Progressing*` → reconciling; reason `ReconciliationSucceeded`, or
/// any other `info` event with a revision → compliant; anything else → reconciling.
pub fn parse_flux(body: &[u8]) -> Result<Report, BadInput> {
    let event: FluxEventRef<'_> = from_json::<_, FluxEvent>(body)?;
    let meta = |key: &str| event.metadata.get(key);
    let cluster = check_name("metadata.cluster", meta("cluster"))?;
    let cluster_type = check_name("metadata.clusterType", meta("clusterType"))?;
    let environment = check_name("metadata.environment", meta("environment"))?;
    let kind = check_name("involvedObject.kind", event.involved_object.kind.as_deref())?;
    let name = check_name("involvedObject.name", event.involved_object.name.as_deref())?;
    let namespace = event.involved_object.namespace.as_deref().unwrap_or_default();
    let timestamp = event
        .timestamp
        .as_deref()
        .ok_or_else(|| BadInput::new("timestamp", "is missing"))?;
    let event_time = parse_time(timestamp)
        .ok_or_else(|| BadInput::new("timestamp", format!("{timestamp:?} is not an RFC 3339 time")))?;
    let revision = meta("revision")
        .map(|r| ("metadata.revision".to_owned(), r))
        .or_else(|| {
            event
                .metadata
                .0
                .iter()
                .find(|(k, _)| k.ends_with("/revision"))
                .map(|(k, v)| (format!("metadata.{k}"), v.as_ref()))
        });
    let (revision, commit) = match revision {
        Some((field, text)) => {
            let commit = parse_revision(text).ok_or_else(|| {
                BadInput::new(
                    field,
                    format!(
                        "{text:?} is not a git revision (<branch>@sha1:<40 hex>, sha1:<40 hex> or <40 hex>) \
                         nor an OCI one (<tag>@sha256:<64 hex>)"
                    ),
                )
            })?;
            (text.trim().to_owned(), commit)
        }
        None => (String::new(), String::new()),
    };
    let source = SOURCE_KINDS.contains(&kind.as_str());
    let state = match event.severity {
        Severity::Error => ClusterState::Failed,
        Severity::Info | Severity::Trace => {
            if source || event.reason.starts_with("Progressing") {
                ClusterState::Reconciling
            } else if event.reason == "ReconciliationSucceeded" || !commit.is_empty() {
                ClusterState::Compliant
            } else {
                ClusterState::Reconciling
            }
        }
    };
    Ok(Report {
        environment,
        cluster,
        cluster_type,
        object: storable(format!("{kind}/{namespace}/{name}")),
        drives: !source,
        state,
        revision: storable(revision),
        commit,
        message: storable(truncate(event.message.into_owned())),
        reason: storable(truncate(event.reason.into_owned())),
        event_time,
    })
}

/// Parses a generic report: `{cluster, clusterType, environment, gitopsRepo, branch, commit,
/// state, message, time}`. `time` defaults to `now` (Unix milliseconds); `commit` takes the
/// same forms as a Flux revision.
pub fn parse_generic(body: &[u8], now: i64) -> Result<Report, BadInput> {
    let g: ComplianceReportRef<'_> = from_json::<_, ComplianceReport>(body)?;
    let cluster = check_name("cluster", g.cluster.as_deref())?;
    let cluster_type = check_name("clusterType", g.cluster_type.as_deref())?;
    let environment = check_name("environment", g.environment.as_deref())?;
    let text = g
        .commit
        .as_deref()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| BadInput::new("commit", "is missing or empty"))?;
    let commit = parse_revision(text).ok_or_else(|| {
        BadInput::new(
            "commit",
            format!("{text:?} is not a 40-hex commit id or a Flux revision"),
        )
    })?;
    let state_text = g.state.as_deref().unwrap_or_default();
    let state = ClusterState::parse_among(state_text, &ClusterState::REPORTED).ok_or_else(|| {
        BadInput::new(
            "state",
            format!(
                "{state_text:?} is not one of {}",
                ClusterState::names(&ClusterState::REPORTED)
            ),
        )
    })?;
    let event_time = match g.time.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(t) => {
            parse_time(t).ok_or_else(|| BadInput::new("time", format!("{t:?} is not an RFC 3339 time")))?
        }
        None => now,
    };
    let repo = g.gitops_repo.unwrap_or_default();
    let branch = g.branch.unwrap_or_default();
    let object = if repo.is_empty() && branch.is_empty() {
        "compliance".to_owned()
    } else {
        format!("compliance/{repo}#{branch}")
    };
    Ok(Report {
        environment,
        cluster,
        cluster_type,
        object: storable(object),
        drives: true,
        state,
        revision: storable(text.to_owned()),
        commit,
        message: storable(truncate(g.message.map(Cow::into_owned).unwrap_or_default())),
        reason: String::new(),
        event_time,
    })
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn revisions_in_every_accepted_form() {
        assert_eq!(parse_revision(&format!("dev@sha1:{SHA}")).as_deref(), Some(SHA));
        assert_eq!(parse_revision(&format!("sha1:{SHA}")).as_deref(), Some(SHA));
        assert_eq!(parse_revision(SHA).as_deref(), Some(SHA));
        assert_eq!(
            parse_revision(&format!("feature/x@sha1:{}", SHA.to_uppercase())).as_deref(),
            Some(SHA)
        );
        assert_eq!(parse_revision(&format!("main/{SHA}")).as_deref(), Some(SHA));
        assert_eq!(parse_revision("dev@sha1:abc"), None);
        assert_eq!(parse_revision("latest@sha256:0123"), None);
        let digest = "ab".repeat(32);
        assert_eq!(
            parse_revision(&format!("dev@sha256:{}", digest.to_uppercase())),
            Some(format!("sha256:{digest}"))
        );
        assert_eq!(
            parse_revision(&format!("sha256:{digest}")),
            Some(format!("sha256:{digest}"))
        );
        assert_eq!(parse_revision(""), None);
    }

    fn event(severity: &str, kind: &str, reason: &str, revision: Option<&str>) -> Vec<u8> {
        let mut metadata = serde_json::json!({"cluster": "c1", "clusterType": "drone", "environment": "dev"});
        if let Some(r) = revision {
            metadata["revision"] = r.into();
        }
        serde_json::to_vec(&serde_json::json!({
            "involvedObject": {"kind": kind, "namespace": "flux-system", "name": "platform"},
            "severity": severity, "timestamp": "2026-01-02T03:04:05Z", "message": "m",
            "reason": reason, "metadata": metadata, "reportingController": "kustomize-controller"
        }))
        .unwrap()
    }

    #[test]
    fn flux_states() {
        let rev = format!("dev@sha1:{SHA}");
        let r = parse_flux(&event(
            "info",
            "Kustomization",
            "ReconciliationSucceeded",
            Some(&rev),
        ))
        .unwrap();
        assert_eq!(
            (r.state, r.commit.as_str(), r.drives),
            (ClusterState::Compliant, SHA, true)
        );
        assert_eq!(r.object, "Kustomization/flux-system/platform");
        assert_eq!(r.event_time, 1_767_323_045_000);
        let r = parse_flux(&event("error", "Kustomization", "HealthCheckFailed", Some(&rev))).unwrap();
        assert_eq!(r.state, ClusterState::Failed);
        let r = parse_flux(&event("info", "Kustomization", "Progressing", Some(&rev))).unwrap();
        assert_eq!(r.state, ClusterState::Reconciling);
        let r = parse_flux(&event("info", "Kustomization", "Other", None)).unwrap();
        assert_eq!(r.state, ClusterState::Reconciling);
        let r = parse_flux(&event("info", "GitRepository", "NewArtifact", Some(&rev))).unwrap();
        assert_eq!((r.state, r.drives), (ClusterState::Reconciling, false));
    }

    #[test]
    fn flux_rejections_name_the_field() {
        let bad = parse_flux(&event("info", "Kustomization", "x", Some("main@sha1:12"))).unwrap_err();
        assert_eq!(bad.field, "metadata.revision");
        let bad = parse_flux(&event("warning", "Kustomization", "x", None)).unwrap_err();
        assert_eq!(bad.field, "severity");
        let bad = parse_flux(br#"{"involvedObject": {"kind": "K", "name": "n"}, "severity": "info", "timestamp": "2026-01-02T03:04:05Z", "metadata": {"cluster": "c", "environment": "dev"}}"#).unwrap_err();
        assert_eq!(bad.field, "metadata.clusterType");
        let bad =
            parse_flux(br#"{"involvedObject": {"kind": "K", "name": "n"}, "timestamp": "x"}"#).unwrap_err();
        assert_eq!(bad.field, "severity");
        let bad = parse_flux(br#"{"involvedObject": 3}"#).unwrap_err();
        assert_eq!(bad.field, "involvedObject");
        let bad = parse_flux(b"{").unwrap_err();
        assert_eq!(bad.field, "body");
    }

    #[test]
    fn generic_reports() {
        let body = format!(
            r#"{{"cluster":"c","clusterType":"t","environment":"dev","gitopsRepo":"https://g/r","branch":"dev","commit":"{SHA}","state":"compliant","message":"ok","time":"2026-01-02T03:04:05.5Z"}}"#
        );
        let r = parse_generic(body.as_bytes(), 7).unwrap();
        assert_eq!(r.object, "compliance/https://g/r#dev");
        assert_eq!(
            (r.state, r.event_time),
            (ClusterState::Compliant, 1_767_323_045_500)
        );
        let r = parse_generic(
            format!(
                r#"{{"cluster":"c","clusterType":"t","environment":"dev","commit":"{SHA}","state":"failed"}}"#
            )
            .as_bytes(),
            7,
        )
        .unwrap();
        assert_eq!((r.event_time, r.object.as_str()), (7, "compliance"));
        let bad = parse_generic(
            br#"{"cluster":"c","clusterType":"t","environment":"dev","commit":"nope","state":"failed"}"#,
            0,
        )
        .unwrap_err();
        assert_eq!(bad.field, "commit");
        let bad = parse_generic(
            format!(
                r#"{{"cluster":"c","clusterType":"t","environment":"dev","commit":"{SHA}","state":"done"}}"#
            )
            .as_bytes(),
            0,
        )
        .unwrap_err();
        assert_eq!(bad.field, "state");
        let bad = parse_generic(br#"{"cluster":"","clusterType":"t"}"#, 0).unwrap_err();
        assert_eq!(bad.field, "cluster");
        let bad = parse_generic(br#"{"cluster": 5}"#, 0).unwrap_err();
        assert_eq!(bad.field, "cluster");
    }

    #[test]
    fn nul_characters_are_stored_as_replacement_characters() {
        let body = format!(
            r#"{{"cluster":"c","clusterType":"t","environment":"dev","gitopsRepo":"r\u0000","commit":"{SHA}","state":"failed","message":"a\u0000b"}}"#
        );
        let r = parse_generic(body.as_bytes(), 7).unwrap();
        assert_eq!(r.message, "a\u{fffd}b");
        assert_eq!(r.object, "compliance/r\u{fffd}#");
        let bad = parse_generic(
            br#"{"cluster":"c\u0000","clusterType":"t","environment":"dev","commit":"x","state":"failed"}"#,
            0,
        )
        .unwrap_err();
        assert_eq!(bad.field, "cluster");
    }

    #[test]
    fn times_round_trip() {
        assert_eq!(format_time(1_767_323_045_500), "2026-01-02T03:04:05.500Z");
        assert_eq!(parse_time("2026-01-02T04:04:05+01:00"), Some(1_767_323_045_000));
    }
}
