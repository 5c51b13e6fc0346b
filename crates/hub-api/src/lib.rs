//! The Deployment Observability Hub's HTTP API as Rust types: what clusters post (a Flux
//! event, a generic compliance report), what the queries and the promotion gate answer, the
//! error body, and the one vocabulary of a cluster's state ([`ClusterState`]).
//!
//! The crate exists so that every party to the API reads and writes the same types: the hub
//! (`kalypso-hub`) serves them, `kalypso check-promote` and `promote --hub` read them, the
//! dashboard's data sources count with [`ClusterState`], and tests build them. It depends on
//! nothing but serde and utoipa's derives, so that any of those can depend on it. Each type
//! also derives its OpenAPI schema; the hub assembles the document
//! (`GET /api/v1/openapi.json`, `docs/hub-openapi.json`) from them.
//!
//! Compatibility: answers may gain fields and enums may gain values (the gate will list its
//! requirements, a rollout its waves); a client ignores fields it does not know, and the enums
//! are `#[non_exhaustive]` so that Rust clients already handle a value they do not know.

// utoipa's `ToSchema` derive expands `Option<T>` fields into paths that this lint reports at
// the field's type, in code that is not ours.
#![allow(unused_qualifications)]

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type};

/// The state of a cluster: what one report says, a cluster's own latest platform state, or
/// its state relative to a GitOps commit. Every answer of the hub and every page of the
/// dashboard speaks of clusters in these words; which of them a field can hold is said where
/// the field is documented:
///
/// - a report (and a reporting object) is `compliant`, `reconciling` or `failed`;
/// - a cluster's own platform state adds `unknown` (no platform report yet);
/// - relative to a commit (the gate, counts) a cluster is `compliant`, `reconciling`,
///   `failed`, `behind` or `stale`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ClusterState {
    /// The revision is applied and healthy (relative to a commit: that commit or a later one,
    /// which contains it).
    Compliant,
    /// Working on a revision, or not done yet.
    Reconciling,
    /// The revision failed to apply or is unhealthy.
    Failed,
    /// Relative to a commit: its platform commit is older, or it has no platform report yet.
    Behind,
    /// Silent for longer than the hub's `--stale-after`: its state is not known any more.
    Stale,
    /// No platform report yet (a cluster's own state only).
    #[default]
    Unknown,
}

impl ClusterState {
    /// Every state.
    pub const ALL: [ClusterState; 6] = [
        ClusterState::Compliant,
        ClusterState::Reconciling,
        ClusterState::Failed,
        ClusterState::Behind,
        ClusterState::Stale,
        ClusterState::Unknown,
    ];

    /// The states a report can give.
    pub const REPORTED: [ClusterState; 3] = [
        ClusterState::Reconciling,
        ClusterState::Compliant,
        ClusterState::Failed,
    ];

    /// The states `GET /api/v1/clusters?state=` filters on: a cluster's own platform state,
    /// or stale.
    pub const LISTED: [ClusterState; 5] = [
        ClusterState::Compliant,
        ClusterState::Reconciling,
        ClusterState::Failed,
        ClusterState::Stale,
        ClusterState::Unknown,
    ];

    /// The name used in JSON, URLs and the database.
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterState::Compliant => "compliant",
            ClusterState::Reconciling => "reconciling",
            ClusterState::Failed => "failed",
            ClusterState::Behind => "behind",
            ClusterState::Stale => "stale",
            ClusterState::Unknown => "unknown",
        }
    }

    /// The state named `text`, if it is one of `among`.
    pub fn parse_among(text: &str, among: &[ClusterState]) -> Option<ClusterState> {
        among.iter().copied().find(|s| s.as_str() == text)
    }

    /// `a, b or c`: the names of `states`, for error messages.
    pub fn names(states: &[ClusterState]) -> String {
        let names: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.concat(),
        }
    }
}

/// A name this version does not know (a newer hub's) is read as [`ClusterState::Unknown`].
impl<'de> Deserialize<'de> for ClusterState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ClusterState, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(name.parse().unwrap_or(ClusterState::Unknown))
    }
}

impl fmt::Display for ClusterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`ClusterState`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownState(pub String);

impl fmt::Display for UnknownState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not one of {}",
            self.0,
            ClusterState::names(&ClusterState::ALL)
        )
    }
}

impl std::error::Error for UnknownState {}

impl FromStr for ClusterState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<ClusterState, UnknownState> {
        ClusterState::parse_among(s, &ClusterState::ALL).ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// The schema of a string that is one of `states`.
fn states_schema(states: &[ClusterState], description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(states.iter().map(|s| s.as_str())))
        .description(Some(description))
        .into()
}

fn reported_state_schema() -> Schema {
    states_schema(
        &ClusterState::REPORTED,
        "The state the report gives (a ClusterState).",
    )
}

fn own_state_schema() -> Schema {
    states_schema(
        &[
            ClusterState::Compliant,
            ClusterState::Reconciling,
            ClusterState::Failed,
            ClusterState::Unknown,
        ],
        "The cluster's own platform state: its latest report of an applying object for a commit of its \
         environment's GitOps branch; `unknown` before there is one (a ClusterState).",
    )
}

fn relative_state_schema() -> Schema {
    states_schema(
        &[
            ClusterState::Compliant,
            ClusterState::Reconciling,
            ClusterState::Failed,
            ClusterState::Behind,
            ClusterState::Stale,
        ],
        "The cluster's state relative to the commit asked about (a ClusterState).",
    )
}

/// The longest name (cluster, environment, cluster type) the hub accepts, in characters.
pub const MAX_NAME: usize = 253;

/// A name (cluster, environment, cluster type, object kind and name): not blank, without a
/// control character or a `/` (the hub trims the spaces around it).
pub const NAME_PATTERN: &str = r"^[^/\x00-\x1f\x7f-\x9f]*[^/\s\x00-\x1f\x7f-\x9f][^/\x00-\x1f\x7f-\x9f]*$";

/// A git revision as Flux reports it: `<branch>@sha1:<40 hex>`, `sha1:<40 hex>`, a bare
/// 40-hex id or `<branch>/<40 hex>`, with spaces around it allowed.
pub const REVISION_PATTERN: &str = r"^\s*([\s\S]*@sha1:|sha1:|[\s\S]*/)?[0-9a-fA-F]{40}\s*$";

fn name_schema(description: &str) -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME))
        .pattern(Some(NAME_PATTERN))
        .description(Some(description))
        .into()
}

fn name_field() -> Schema {
    name_schema("A name: not blank, no control character, no `/`.")
}

fn revision_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(REVISION_PATTERN))
        .description(Some(
            "A git commit: `<branch>@sha1:<40 hex>`, `sha1:<40 hex>`, a bare 40-hex id or `<branch>/<40 hex>`.",
        ))
}

fn revision_field() -> Schema {
    revision_schema().into()
}

fn report_time_schema() -> Schema {
    OneOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(r"^\s*$")),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "When (RFC 3339); the time of receipt when left out, null or blank.",
        ))
        .into()
}

fn flux_metadata_schema() -> Schema {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("cluster", name_schema("The cluster's name."))
        .property("clusterType", name_schema("The cluster's type."))
        .property("environment", name_schema("The cluster's environment."))
        .property("revision", revision_schema())
        .required("cluster")
        .required("clusterType")
        .required("environment")
        .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
        .description(Some(
            "The Alert's eventMetadata (the cluster's identity) and the controller's revision; other keys are ignored.",
        ))
        .into()
}

// ---------------------------------------------------------------------------------------
// Errors and acknowledgements

/// Every error answer: what is wrong, and which input field (or header) is at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What is wrong, for people.
    pub error: String,
    /// The field, query parameter or header at fault (`metadata.cluster`, `commit`,
    /// `X-Signature`, `Authorization`...), `null` when none is.
    pub field: Option<String>,
}

/// What became of a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum IngestResult {
    /// It is the object's latest state now.
    Stored,
    /// The same as the stored latest state (a retry or a repeated event): nothing new.
    Duplicate,
    /// Older than the stored latest state: kept in the history only.
    Older,
}

/// The answer to a report, sent once it is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct IngestAnswer {
    /// What became of it.
    pub result: IngestResult,
}

// ---------------------------------------------------------------------------------------
// Reports

/// The object a Flux event is about (a Kubernetes `ObjectReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    /// Its kind (`Kustomization`, `HelmRelease`, `GitRepository`...). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = name_field)]
    pub kind: Option<String>,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = name_field)]
    pub name: Option<String>,
    /// Its API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Its uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// The severity of a Flux event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something went well, or is in progress.
    Info,
    /// Something failed.
    Error,
    /// Detail.
    Trace,
}

/// The event Flux's notification-controller posts with a `generic` or `generic-hmac`
/// Provider (`event.toolkit.fluxcd.io/v1beta1` Event), after the Alert's `eventMetadata` was
/// merged into `metadata`. Other fields (`reportingController`...) are accepted and ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxEvent {
    /// The object the event is about.
    pub involved_object: InvolvedObject,
    /// `error` → failed; `info`/`trace` → compliant or reconciling (see the docs).
    pub severity: Severity,
    /// When it happened (RFC 3339). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false, format = DateTime)]
    pub timestamp: Option<String>,
    /// What happened (kept up to 8 KiB).
    #[serde(default)]
    pub message: String,
    /// Flux's reason (`ReconciliationSucceeded`, `Progressing`...).
    #[serde(default)]
    pub reason: String,
    /// The cluster's identity (`cluster`, `clusterType`, `environment`: required) and the
    /// revision applied (`revision`: `<branch>@sha1:<40 hex>`, also `sha1:<40 hex>`, a bare
    /// 40-hex id or `<branch>/<40 hex>`; older controllers send it under an API-group prefix,
    /// `kustomize.toolkit.fluxcd.io/revision`, which is accepted too). Other keys are ignored.
    #[serde(default)]
    #[schema(required = true, schema_with = flux_metadata_schema)]
    pub metadata: BTreeMap<String, String>,
}

/// A compliance report from any other agent (Argo CD notifications, a script).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComplianceReport {
    /// The cluster's name. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = name_field)]
    pub cluster: Option<String>,
    /// The cluster's type. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = name_field)]
    pub cluster_type: Option<String>,
    /// The cluster's environment. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = name_field)]
    pub environment: Option<String>,
    /// The GitOps repository applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitops_repo: Option<String>,
    /// Its branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit applied: 40 hex digits, or any form of a Flux revision. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = revision_field)]
    pub commit: Option<String>,
    /// `reconciling`, `compliant` or `failed`. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, schema_with = reported_state_schema)]
    pub state: Option<String>,
    /// What happened (kept up to 8 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When (RFC 3339); the time of receipt when left out, `null` or blank (as Argo CD's
    /// templates send a time not known yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = report_time_schema)]
    pub time: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Clusters

/// A cluster, as lists show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// Its name.
    pub name: String,
    /// Its environment.
    pub environment: String,
    /// Its cluster type.
    pub cluster_type: String,
    /// The revision of its platform state, as reported.
    pub revision: Option<String>,
    /// The commit of its platform state.
    pub commit: Option<String>,
    /// Its own platform state.
    #[schema(schema_with = own_state_schema)]
    pub state: ClusterState,
    /// Its reconciler's last message (empty when none).
    pub message: String,
    /// When it last reported (any object).
    pub last_seen: String,
    /// When it first reported.
    pub first_seen: String,
    /// Silent for longer than `--stale-after`.
    pub stale: bool,
}

/// `GET /api/v1/clusters`: one page of clusters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterList {
    /// Clusters matching the filters, on every page.
    pub total: u64,
    /// This page, by environment and name.
    pub clusters: Vec<Cluster>,
}

/// One report of one object of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    /// The reporting object: `Kind/namespace/name` for Flux, `compliance/<repo>#<branch>`
    /// (or `compliance`) for generic reports.
    pub object: String,
    /// What the report says.
    #[schema(schema_with = reported_state_schema)]
    pub state: ClusterState,
    /// The revision, as reported.
    pub revision: Option<String>,
    /// Its commit.
    pub commit: Option<String>,
    /// The message (empty when none).
    pub message: String,
    /// Flux's reason (empty when none).
    pub reason: String,
    /// When it happened.
    pub time: String,
    /// When the hub received it.
    pub received_at: String,
}

/// A page of a cluster's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct History {
    /// Reports in all.
    pub total: u64,
    /// This page, newest first.
    pub reports: Vec<ObjectReport>,
}

/// `GET /api/v1/clusters/{environment}/{name}`: a cluster, its objects and its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterDetail {
    /// The cluster.
    #[serde(flatten)]
    pub cluster: Cluster,
    /// Each reporting object's latest state, by object.
    pub objects: Vec<ObjectReport>,
    /// A page of its reports.
    pub history: History,
}

// ---------------------------------------------------------------------------------------
// Environments

/// Clusters by state relative to a commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Counts {
    /// All clusters, stale ones included.
    pub total: u64,
    /// Compliant.
    pub compliant: u64,
    /// Reconciling.
    pub reconciling: u64,
    /// Failed.
    pub failed: u64,
    /// Behind.
    pub behind: u64,
    /// Stale.
    pub stale: u64,
}

impl Counts {
    /// Counts `n` clusters in `state` (an `unknown` one is behind: it has no platform commit).
    pub fn add(&mut self, state: ClusterState, n: u64) {
        self.total += n;
        match state {
            ClusterState::Compliant => self.compliant += n,
            ClusterState::Reconciling => self.reconciling += n,
            ClusterState::Failed => self.failed += n,
            ClusterState::Behind | ClusterState::Unknown => self.behind += n,
            ClusterState::Stale => self.stale += n,
        }
    }

    /// Adds another group's counts.
    pub fn merge(&mut self, other: &Counts) {
        self.total += other.total;
        self.compliant += other.compliant;
        self.reconciling += other.reconciling;
        self.failed += other.failed;
        self.behind += other.behind;
        self.stale += other.stale;
    }

    /// Clusters that are not stale: the ones a gate requires.
    pub fn required(&self) -> u64 {
        self.total - self.stale
    }
}

/// Where a deployment target's manifests come from, as its reconciler says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReconcilerSource {
    /// `flux` (GitRepository + Kustomization) or `argocd` (Application).
    pub kind: String,
    /// The repository.
    pub url: Option<String>,
    /// The branch (Flux `spec.ref.branch`).
    pub branch: Option<String>,
    /// A tag, commit, semver range or Argo CD `targetRevision`.
    pub revision: Option<String>,
    /// The path in the repository.
    pub path: Option<String>,
}

/// A deployment target of a cluster type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeploymentTarget {
    /// Its folder's name.
    pub name: String,
    /// The `workload` label of its Namespace.
    pub workload: Option<String>,
    /// Its reconciler's source.
    pub source: Option<ReconcilerSource>,
}

/// A cluster type of an environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTypeStatus {
    /// Its name.
    pub name: String,
    /// Its deployment targets in the latest commit (none for a cluster type that has
    /// registered clusters but is no longer in the tree).
    pub deployment_targets: Vec<DeploymentTarget>,
    /// Its clusters relative to the latest commit.
    pub clusters: Counts,
}

/// An environment's latest GitOps commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LatestCommit {
    /// The GitOps commit.
    pub commit: String,
    /// The control-plane commit it promotes (`Promoted_Commit_Id`).
    pub control_plane_commit: Option<String>,
    /// When it was made.
    pub committed_at: String,
}

/// The environment's totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentSummary {
    /// Cluster types.
    pub cluster_types: u64,
    /// Deployment targets.
    pub deployment_targets: u64,
    /// Clusters relative to the latest commit.
    pub clusters: Counts,
}

/// `GET /api/v1/environments/{environment}`: an environment's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentStatus {
    /// Its name.
    pub name: String,
    /// Its GitOps repository.
    pub gitops_repo: String,
    /// Its GitOps branch.
    pub branch: String,
    /// The branch's latest commit the hub read, `null` before it read one.
    pub latest: Option<LatestCommit>,
    /// Its cluster types, by name.
    pub cluster_types: Vec<ClusterTypeStatus>,
    /// Totals.
    pub summary: EnvironmentSummary,
}

/// `GET /api/v1/environments`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentList {
    /// Every environment of the control plane, by name.
    pub environments: Vec<EnvironmentStatus>,
}

// ---------------------------------------------------------------------------------------
// Commits and workloads

/// Whether an environment runs a commit. A verdict this version does not know (a newer hub's)
/// is read as [`Verdict::Pending`]: not compliant yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Verdict {
    /// Every required cluster is compliant with it (or with a later commit containing it).
    Compliant,
    /// A required cluster failed to apply it.
    Failed,
    /// Some required clusters have not reported it yet.
    Pending,
    /// The hub does not know the commit (yet).
    UnknownCommit,
}

impl<'de> Deserialize<'de> for Verdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Verdict, D::Error> {
        Ok(match &*std::borrow::Cow::<'de, str>::deserialize(d)? {
            "compliant" => Verdict::Compliant,
            "failed" => Verdict::Failed,
            "unknown-commit" => Verdict::UnknownCommit,
            _ => Verdict::Pending,
        })
    }
}

/// A GitOps commit of an environment's branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitopsCommit {
    /// The commit.
    pub sha: String,
    /// Its first-parent position on the branch (0 for the root).
    pub position: i64,
    /// When it was made.
    pub committed_at: String,
    /// The control-plane commit it promotes.
    pub control_plane_commit: Option<String>,
}

/// A commit in one environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitInEnvironment {
    /// The environment.
    pub environment: String,
    /// The GitOps commits that match, oldest first (the first decides).
    pub gitops_commits: Vec<GitopsCommit>,
    /// The control-plane commit the first one promotes.
    pub control_plane_commit: Option<String>,
    /// The cluster types of its tree.
    pub cluster_types: Vec<String>,
    /// Clusters of those types relative to it.
    pub clusters: Counts,
    /// The verdict (never `unknown-commit` here).
    pub verdict: Verdict,
    /// The compliant clusters, by name, at most `limit`.
    pub compliant_clusters: Vec<String>,
    /// From the commit's time to the first compliant report of the last required cluster;
    /// `null` while not all are compliant.
    pub lead_time_seconds: Option<f64>,
}

/// `GET /api/v1/commits/{sha}`: where a commit is, and who runs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CommitAnswer {
    /// The commit (prefix) asked about, in lower case.
    pub commit: String,
    /// Each environment that has it, by name.
    pub environments: Vec<CommitInEnvironment>,
}

/// Since when a placement holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSince {
    /// The GitOps commit that started it.
    pub gitops_commit: String,
    /// The control-plane commit that GitOps commit promotes.
    pub control_plane_commit: Option<String>,
    /// When that commit was made.
    pub committed_at: Option<String>,
}

/// Until when a past placement held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementUntil {
    /// The GitOps commit that ended it.
    pub gitops_commit: String,
    /// When that commit was made.
    pub committed_at: Option<String>,
}

/// A workload's deployment target on a cluster type of an environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPlacement {
    /// The environment.
    pub environment: String,
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
    /// Its reconciler's source.
    pub source: Option<ReconcilerSource>,
    /// Since when.
    pub since: PlacementSince,
    /// Until when; `null` for a current placement.
    pub until: Option<PlacementUntil>,
}

/// `GET /api/v1/workloads/{name}`: where a workload runs, and where it ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkloadAnswer {
    /// The workload.
    pub workload: String,
    /// Where it runs now.
    pub placements: Vec<WorkloadPlacement>,
    /// Where it ran before.
    pub history: Vec<WorkloadPlacement>,
}

// ---------------------------------------------------------------------------------------
// The gate

/// A cluster in a gate answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateCluster {
    /// Its name.
    pub name: String,
    /// Its cluster type.
    pub cluster_type: String,
    /// Its state relative to the commit.
    #[schema(schema_with = relative_state_schema)]
    pub state: ClusterState,
    /// The GitOps commit it last reported.
    #[serde(default)]
    pub revision: Option<String>,
    /// Its reconciler's last message (empty when none).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub message: String,
}

impl GateCluster {
    /// The message, `None` when empty.
    pub fn message(&self) -> Option<&str> {
        Some(self.message.as_str()).filter(|m| !m.is_empty())
    }
}

/// `null` read as an empty string (a message field that a client may see as either).
fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// `GET /api/v1/environments/{environment}/gate?commit=SHA`: may the commit move on from
/// the environment?
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// The environment.
    pub environment: String,
    /// The GitOps commit the question is about, `null` when the hub does not know it.
    pub gitops_commit: Option<String>,
    /// The control-plane commit that GitOps commit promotes (`Promoted_Commit_Id`).
    pub control_plane_commit: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Required clusters compliant with the commit.
    pub compliant: u64,
    /// Required clusters: registered, not stale, of a cluster type of the commit's tree.
    pub total: u64,
    /// The clusters of the commit's cluster types: the failed ones first, then the others
    /// not compliant, then the compliant ones, each by name, at most `limit`.
    #[serde(default)]
    pub clusters: Vec<GateCluster>,
    /// Cluster types of the commit with no non-stale cluster: nothing checks them.
    #[serde(default)]
    pub cluster_types_without_clusters: Vec<String>,
    /// When a progressive rollout brought the commit and has not reached every wave of the
    /// environment (from the commit on, no commit's rollout is complete): the status of the
    /// environment's newest rollout (`progressing`, `paused`, `halted`, `rolled-back`). The
    /// verdict is then `pending` (`failed` when halted or rolled back), whatever the clusters
    /// report. Absent otherwise; once the rollout is complete, the clusters must run the
    /// commit that completed it (or a later one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// Asked with `into`: whether the commit may be promoted into that environment, with
    /// every requirement and its state. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<PromotionGate>,
}

// ---------------------------------------------------------------------------------------
// Promotion policies, approvals, freezes, audit

/// Whether a commit may be promoted into an environment: the environment's PromotionPolicy
/// (if it has one) and its freezes, evaluated for the commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromotionGate {
    /// The environment promoted into.
    pub into: String,
    /// Its PromotionPolicy's name (`null`: it has none; only compliance and freezes apply).
    pub policy: Option<String>,
    /// Whether every requirement is met.
    pub may_promote: bool,
    /// Every requirement, met or not, in a fixed order: policy, compliant, soak, approvals,
    /// windows, freezes, verification checks.
    pub requirements: Vec<Requirement>,
}

/// What a requirement is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RequirementKind {
    /// The PromotionPolicy itself can be used (it is valid and promotes from this environment).
    Policy,
    /// Every required cluster of the source environment is compliant.
    Compliant,
    /// They have been for the policy's soak time.
    Soak,
    /// Enough distinct identities approved the commit.
    Approvals,
    /// No deny window is open, and an allow window is (if there are any).
    Window,
    /// The environment is not frozen.
    Freeze,
    /// A verification check passed.
    Verification,
}

impl<'de> Deserialize<'de> for RequirementKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RequirementKind, D::Error> {
        Ok(match &*std::borrow::Cow::<'de, str>::deserialize(d)? {
            "compliant" => RequirementKind::Compliant,
            "soak" => RequirementKind::Soak,
            "approvals" => RequirementKind::Approvals,
            "window" => RequirementKind::Window,
            "freeze" => RequirementKind::Freeze,
            "verification" => RequirementKind::Verification,
            _ => RequirementKind::Policy,
        })
    }
}

/// A requirement's state. One this version does not know is read as `not-yet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RequirementState {
    /// Met.
    Met,
    /// Not met yet, but it may be by waiting: clusters still reconciling, a soak, an
    /// approval, a window, a freeze.
    NotYet,
    /// Failed: waiting does not help (a cluster failed, a check failed, a policy is invalid).
    Failed,
}

impl<'de> Deserialize<'de> for RequirementState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RequirementState, D::Error> {
        Ok(match &*std::borrow::Cow::<'de, str>::deserialize(d)? {
            "met" => RequirementState::Met,
            "failed" => RequirementState::Failed,
            _ => RequirementState::NotYet,
        })
    }
}

/// One requirement of a [`PromotionGate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// What it is about.
    pub kind: RequirementKind,
    /// The verification check's name, or the window's schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its state.
    pub state: RequirementState,
    /// What it says, for people: `compliant 38/38`, `soak 42m of 1h`, `approvals 1 of 2
    /// (ana@contoso.com)`, `window: denied until ...`, `verification smoke: passed`.
    pub summary: String,
    /// For approvals: the identities that approved, counted once each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_by: Vec<String>,
}

/// `POST /api/v1/approvals`: approve the promotion of a control-plane commit into an
/// environment. The approver is the caller's identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalRequest {
    /// The environment promoted into.
    pub environment: String,
    /// The control-plane commit (7 to 40 hex digits; a prefix must name one commit the hub knows).
    pub commit: String,
    /// Why, or anything the approver wants recorded.
    #[serde(default)]
    pub comment: Option<String>,
}

/// The answer to an approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalAnswer {
    /// The environment.
    pub environment: String,
    /// The control-plane commit, in full when the hub knows it.
    pub commit: String,
    /// Who approved.
    pub actor: String,
    /// False when this identity had already approved the commit (it counts once).
    pub counted: bool,
    /// Every identity that approved the commit for the environment, by name.
    pub approved_by: Vec<String>,
}

/// `POST /api/v1/freezes`: stop promotions into an environment ("stop the line").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FreezeRequest {
    /// The environment.
    pub environment: String,
    /// Why (required).
    pub reason: String,
    /// When the freeze ends by itself (RFC 3339); absent: until unfrozen.
    #[serde(default)]
    pub until: Option<String>,
}

/// `POST /api/v1/unfreezes`: lift every freeze of an environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UnfreezeRequest {
    /// The environment.
    pub environment: String,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A freeze of an environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Freeze {
    /// Its id.
    pub id: i64,
    /// The environment.
    pub environment: String,
    /// Why.
    pub reason: String,
    /// Who froze it.
    pub actor: String,
    /// When (RFC 3339).
    pub frozen_at: String,
    /// When it ends by itself (RFC 3339; `null`: when unfrozen).
    pub until: Option<String>,
}

/// The answer to an unfreeze.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnfreezeAnswer {
    /// The environment.
    pub environment: String,
    /// The freezes lifted (none: it was not frozen).
    pub lifted: Vec<Freeze>,
}

/// `POST /api/v1/promotions`: `kalypso promote` reports a promotion it pushed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromotionReport {
    /// The environment promoted into.
    pub environment: String,
    /// The environment the commit came from, if any.
    #[serde(default)]
    pub from: Option<String>,
    /// The control-plane commit promoted (7 to 40 hex digits).
    pub commit: String,
    /// The commit message or a note.
    #[serde(default)]
    pub message: Option<String>,
    /// Set when the promotion went ahead although the gate refused it: why (recorded as an
    /// `override` with the requirements that were not met).
    #[serde(default)]
    pub override_reason: Option<String>,
    /// The requirements not met when it was overridden, as the gate summarised them.
    #[serde(default)]
    pub unmet: Vec<String>,
}

/// What an audit entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditKind {
    /// A commit approved for an environment.
    Approval,
    /// An environment frozen.
    Freeze,
    /// An environment unfrozen.
    Unfreeze,
    /// A commit promoted into an environment (reported by `kalypso promote`, or seen by the hub).
    Promotion,
    /// A promotion that went ahead although the gate refused it.
    Override,
}

impl AuditKind {
    /// Every kind.
    pub const ALL: [AuditKind; 5] = [
        AuditKind::Approval,
        AuditKind::Freeze,
        AuditKind::Unfreeze,
        AuditKind::Promotion,
        AuditKind::Override,
    ];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Approval => "approval",
            AuditKind::Freeze => "freeze",
            AuditKind::Unfreeze => "unfreeze",
            AuditKind::Promotion => "promotion",
            AuditKind::Override => "override",
        }
    }
}

impl FromStr for AuditKind {
    type Err = ();
    fn from_str(s: &str) -> Result<AuditKind, ()> {
        AuditKind::ALL.into_iter().find(|k| k.as_str() == s).ok_or(())
    }
}

impl<'de> Deserialize<'de> for AuditKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<AuditKind, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse()
            .map_err(|()| serde::de::Error::custom(format!("unknown audit kind {text:?}")))
    }
}

/// One entry of the audit log: who did what, when, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Its id (increasing).
    pub id: i64,
    /// When (RFC 3339).
    pub at: String,
    /// Who: an identity, the API token's name, or `hub` for what the hub saw itself.
    pub actor: String,
    /// What.
    pub kind: AuditKind,
    /// The environment.
    pub environment: String,
    /// The control-plane commit, when it is about one.
    pub commit: Option<String>,
    /// Why: the comment, reason or message given.
    pub reason: String,
    /// More, for people (`from dev`, `until ...`, the requirements an override passed over).
    pub detail: String,
}

/// `GET /api/v1/audit`: a page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditList {
    /// Entries matching the filters.
    pub total: u64,
    /// This page.
    pub entries: Vec<AuditEntry>,
}

/// `GET /api/v1/environments/{environment}/waves?commit=SHA&clusterTypes=a,b`: how the
/// clusters of some cluster types are doing relative to a GitOps commit, for a progressive
/// rollout's gate (`kalypso sync` with a RolloutPolicy asks it before delivering the next wave).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveGate {
    /// The environment.
    pub environment: String,
    /// The GitOps commit the question is about, `null` when the hub does not know it (yet).
    pub gitops_commit: Option<String>,
    /// Each cluster type asked about, in the order asked.
    #[serde(default)]
    pub cluster_types: Vec<WaveClusterType>,
    /// The environment's freezes in force ("stop the line"): while there is one, no next wave
    /// is delivered.
    #[serde(default)]
    pub freezes: Vec<Freeze>,
}

/// One cluster type of a [`WaveGate`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveClusterType {
    /// The cluster type.
    pub cluster_type: String,
    /// Registered clusters that are not stale.
    pub registered: u64,
    /// Those compliant with the commit or a later one (which contains it).
    pub compliant: u64,
    /// For how long (milliseconds, by the hub's clock) every registered cluster has been
    /// compliant with the commit or a later one: since the last one that was not became
    /// compliant, and never longer than since the commit itself. `null` while one is not (or
    /// none is registered).
    pub compliant_for_ms: Option<u64>,
    /// The failed ones (on the commit or a later one), by name, at most `limit`, with their
    /// reconciler's message.
    #[serde(default)]
    pub failed: Vec<GateCluster>,
    /// How many failed, all told.
    pub failed_count: u64,
}

// ---------------------------------------------------------------------------------------
// A progressive rollout, as the dashboard shows it

/// Reads a kebab-case enum value, `other` for a value this version does not know (a newer hub
/// may add some).
macro_rules! tolerant_enum {
    ($name:ident, $other:ident, $($text:literal => $variant:ident),+ $(,)?) => {
        impl $name {
            /// The value as the API writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                Ok(match &*std::borrow::Cow::<'de, str>::deserialize(d)? {
                    $($text => $name::$variant,)+
                    _ => $name::$other,
                })
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

/// Where a progressive rollout is, as the state on the GitOps branch says. One this version
/// does not know is read as `progressing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RolloutStatus {
    /// Waves are being delivered.
    Progressing,
    /// Stopped by `kalypso rollout pause` until `resume`.
    Paused,
    /// A failure stopped it (`onFailure: Halt`): the later waves keep the old content.
    Halted,
    /// A failure (`onFailure: Rollback`) or `kalypso rollout abort` gave the delivered waves
    /// their previous content back.
    RolledBack,
    /// Every wave runs the change.
    Complete,
}

tolerant_enum!(RolloutStatus, Progressing,
    "progressing" => Progressing, "paused" => Paused, "halted" => Halted,
    "rolled-back" => RolledBack, "complete" => Complete);

/// Where one wave of a rollout is. One this version does not know is read as `waiting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WaveStatus {
    /// Not delivered yet: its cluster types keep the content they had.
    Waiting,
    /// Delivered; its clusters are applying the change (none failed).
    Progressing,
    /// Delivered, and some of its clusters failed to apply the change.
    Failed,
    /// Delivered, every registered cluster compliant, for less than its `minSuccessTime`.
    Soaking,
    /// Delivered, and every registered cluster compliant for its `minSuccessTime` (or the
    /// rollout went past it).
    Done,
    /// Delivered, then given its previous content back.
    RolledBack,
}

tolerant_enum!(WaveStatus, Waiting,
    "waiting" => Waiting, "progressing" => Progressing, "failed" => Failed,
    "soaking" => Soaking, "done" => Done, "rolled-back" => RolledBack);

/// What keeps a rollout from going on. One this version does not know is read as `waiting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum BlockerKind {
    /// Clusters of the delivered waves failed to apply the change (`clusters` names the first,
    /// with their reconciler's message).
    Failed,
    /// Clusters of the delivered waves do not run the change yet (applying it, or still on
    /// an earlier commit, or not reported).
    Waiting,
    /// The last wave delivered is compliant and soaking for its `minSuccessTime`.
    Soak,
    /// The last wave delivered was not compliant within the policy's `progressDeadline`: the
    /// next sync fails the rollout.
    Deadline,
    /// The environment is frozen: no next wave is delivered.
    Freeze,
    /// The rollout is paused.
    Paused,
    /// The rollout stopped on a failure (halted or rolled back).
    Stopped,
    /// The hub does not know the GitOps commit that delivered the last wave yet.
    Unknown,
}

tolerant_enum!(BlockerKind, Waiting,
    "failed" => Failed, "waiting" => Waiting, "soak" => Soak, "deadline" => Deadline,
    "freeze" => Freeze, "paused" => Paused, "stopped" => Stopped, "unknown" => Unknown);

/// A rollout's clusters of a cluster type or a wave, relative to the GitOps commit that
/// delivered the last wave reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCounts {
    /// Registered clusters that are not stale: the ones the rollout waits for.
    pub registered: u64,
    /// Compliant with the commit or a later one (which contains it).
    pub compliant: u64,
    /// Failed on the commit or a later one.
    pub failed: u64,
    /// Applying the commit or a later one.
    pub reconciling: u64,
    /// On an earlier commit, or with no platform report yet; for a wave not delivered, every
    /// registered cluster.
    pub waiting: u64,
    /// Silent for longer than `--stale-after` (not waited for).
    pub stale: u64,
}

impl RolloutCounts {
    /// Adds another group's counts.
    pub fn merge(&mut self, other: &RolloutCounts) {
        self.registered += other.registered;
        self.compliant += other.compliant;
        self.failed += other.failed;
        self.reconciling += other.reconciling;
        self.waiting += other.waiting;
        self.stale += other.stale;
    }
}

/// A cluster type of a rollout's wave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutClusterType {
    /// The cluster type.
    pub name: String,
    /// Its labels (what the waves select on), as the control plane has them at the rollout's
    /// change; empty when the hub cannot read them (`EnvironmentRollout.labelsUnavailable`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its clusters.
    pub clusters: RolloutCounts,
    /// Its failed clusters, by name, at most 20, with their reconciler's message.
    #[serde(default)]
    pub failed: Vec<GateCluster>,
}

/// One wave of a rollout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutWave {
    /// The wave's name.
    pub name: String,
    /// Where it is.
    pub status: WaveStatus,
    /// Its `minSuccessTime`, in milliseconds.
    pub min_success_ms: u64,
    /// How much of the soak is left (milliseconds, by the hub's clock) while it is soaking;
    /// `null` otherwise.
    pub soak_remaining_ms: Option<u64>,
    /// Its clusters, all cluster types together.
    pub clusters: RolloutCounts,
    /// Its cluster types, by name, as frozen when the rollout started.
    pub cluster_types: Vec<RolloutClusterType>,
}

/// Something that keeps a rollout from going on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutBlocker {
    /// What kind of thing.
    pub kind: BlockerKind,
    /// What it is, for people (`wave "canary": 1 failed cluster(s), 0 allowed`, `frozen by
    /// ana@contoso.com since ...: incident 42`, `wave "canary": compliant, soaking for 4m more`).
    pub summary: String,
    /// The clusters it is about (failed ones first, with their reconciler's message), at most 20.
    #[serde(default)]
    pub clusters: Vec<GateCluster>,
}

/// An environment's progressive rollout, as its GitOps branch tracks it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// The RolloutPolicy.
    pub policy: String,
    /// Where the rollout is.
    pub status: RolloutStatus,
    /// The control-plane `main` commit of the change rolled out.
    pub main_commit: String,
    /// The environment branch's commit of the change.
    pub environment_commit: String,
    /// The GitOps commit that delivered the last wave reached (counts are relative to it);
    /// `null` while the hub has not read it.
    pub wave_commit: Option<String>,
    /// When that commit was made (RFC 3339).
    pub wave_committed_at: Option<String>,
    /// How many waves run the change (the first `delivered`).
    pub delivered: u64,
    /// The waves, in order.
    pub waves: Vec<RolloutWave>,
    /// What keeps the rollout from going on now (empty: the next sync delivers the next wave
    /// or completes the rollout, or it is complete).
    pub blockers: Vec<RolloutBlocker>,
    /// What the next sync does, for people.
    pub next: String,
    /// Why the rollout failed, when it did.
    pub failure: Option<String>,
    /// The policy's `maxFailures` (`0`, `10%`), when the hub read the policy.
    pub max_failures: Option<String>,
    /// The policy's `progressDeadline` in milliseconds (`null`: none, or not read).
    pub progress_deadline_ms: Option<u64>,
    /// The policy's `onFailure` (`Halt` or `Rollback`), when the hub read the policy.
    pub on_failure: Option<String>,
}

/// `GET /api/v1/environments/{environment}/rollout`: the environment's progressive rollout,
/// for people (the dashboard shows it): its waves with their cluster types and clusters,
/// soak, and what blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentRollout {
    /// The environment.
    pub environment: String,
    /// The head of its GitOps branch, as the hub read it (`null`: none yet).
    pub gitops_commit: Option<String>,
    /// The rollout its GitOps branch tracks at the head; `null` when it tracks none (the
    /// environment is delivered whole) or the hub cannot tell (`unavailable` says why).
    pub rollout: Option<Rollout>,
    /// Why the hub cannot show the rollout (no control plane configured, or its GitOps
    /// branch not read yet); `null` when it can.
    pub unavailable: Option<String>,
    /// Why the cluster types' labels and the policy are not shown (the control plane at the
    /// rollout's change could not be read); `null` when they are.
    pub labels_unavailable: Option<String>,
    /// The environment's freezes in force.
    #[serde(default)]
    pub freezes: Vec<Freeze>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn states_round_trip_through_their_names() {
        for state in ClusterState::ALL {
            assert_eq!(state.as_str().parse::<ClusterState>(), Ok(state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        assert!("Failed".parse::<ClusterState>().is_err());
        assert_eq!(
            ClusterState::names(&ClusterState::REPORTED),
            "reconciling, compliant or failed"
        );
        assert_eq!(ClusterState::parse_among("behind", &ClusterState::REPORTED), None);
    }

    #[test]
    fn a_gate_message_may_be_null_or_absent() {
        let gate: Gate = serde_json::from_str(
            r#"{"environment":"dev","gitopsCommit":"aa","controlPlaneCommit":null,"verdict":"failed",
               "compliant":0,"total":2,"clusters":[
                 {"name":"a","clusterType":"t","state":"failed","revision":"aa","message":null},
                 {"name":"b","clusterType":"t","state":"behind"},
                 {"name":"c","clusterType":"t","state":"stale","revision":null,"message":"m"}],
               "clusterTypesWithoutClusters":[],"laterField":[1]}"#,
        )
        .unwrap();
        assert_eq!(gate.clusters[0].message(), None);
        assert_eq!(gate.clusters[1].message(), None);
        assert_eq!(gate.clusters[2].message(), Some("m"));
        assert_eq!(gate.clusters[1].state, ClusterState::Behind);
    }

    #[test]
    fn values_of_a_newer_hub_are_read_as_not_compliant() {
        let gate: Gate = serde_json::from_str(
            r#"{"environment":"dev","gitopsCommit":null,"controlPlaneCommit":null,"verdict":"waiting-for-approval",
               "compliant":0,"total":1,"clusters":[{"name":"a","clusterType":"t","state":"quarantined","message":""}]}"#,
        )
        .unwrap();
        assert_eq!(gate.verdict, Verdict::Pending);
        assert_eq!(gate.clusters[0].state, ClusterState::Unknown);
        for verdict in [
            Verdict::Compliant,
            Verdict::Failed,
            Verdict::Pending,
            Verdict::UnknownCommit,
        ] {
            let text = serde_json::to_string(&verdict).unwrap();
            assert_eq!(serde_json::from_str::<Verdict>(&text).unwrap(), verdict);
        }
    }

    #[test]
    fn counts_require_the_clusters_that_are_not_stale() {
        let mut c = Counts::default();
        c.add(ClusterState::Compliant, 2);
        c.add(ClusterState::Stale, 1);
        c.add(ClusterState::Unknown, 1);
        assert_eq!((c.total, c.behind, c.required()), (4, 1, 3));
    }
}
