//! The `scheduler.kalypso.io/v1alpha1` API: the objects a platform team writes in its
//! control-plane repository, and the ones the scheduler derives from them.
//!
//! These are plain data types with the original's JSON/YAML field names, so that existing
//! control-plane repositories load unchanged. They know nothing about Kubernetes clients,
//! files or git: the core pipeline, the CLI, the git daemon and the operator all share them.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

#[cfg(feature = "kube")]
pub mod crd;
#[cfg(feature = "kube")]
pub use crd::{AssignmentStatus, GitIssueStatus, GitOpsRepoStatus, Status};

/// The API group of every Kalypso kind.
pub const GROUP: &str = "scheduler.kalypso.io";
/// The API version of every Kalypso kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Kalypso kind.
pub const API_VERSION: &str = "scheduler.kalypso.io/v1alpha1";

/// Labels (and annotations): sorted, so that iteration is deterministic.
pub type Labels = BTreeMap<String, String>;

/// Well-known label keys.
pub mod labels {
    /// Marks a ConfigMap as platform configuration.
    pub const PLATFORM_CONFIG: &str = "platform-config";
    /// The Flux Kustomization that applied an object (`<namespace>-<registration>` for workloads).
    pub const FLUX_NAME: &str = "kustomize.toolkit.fluxcd.io/name";
    /// The namespace of the Flux Kustomization that applied an object (`flux-system`).
    pub const FLUX_NAMESPACE: &str = "kustomize.toolkit.fluxcd.io/namespace";
    /// The namespace Flux objects live in.
    pub const FLUX_SYSTEM: &str = "flux-system";
    /// A deployment target's workload; also a config-matching key.
    pub const WORKLOAD: &str = "workload";
    /// A deployment target's workspace.
    pub const WORKSPACE: &str = "workspace";
    /// Config-matching key: the cluster type's name.
    pub const CLUSTER_TYPE: &str = "cluster-type";
    /// Config-matching key: the deployment target's name.
    pub const DEPLOYMENT_TARGET: &str = "deployment-target";
    /// Assignments carry the policy that created them.
    pub const SCHEDULING_POLICY: &str = "scheduling-policy";
}

/// The kinds of `scheduler.kalypso.io/v1alpha1`, plus core `v1` ConfigMaps.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Serialize, Deserialize)]
pub enum Kind {
    /// [`ClusterTypeSpec`]
    ClusterType,
    /// [`TemplateSpec`]
    Template,
    /// [`WorkloadRegistrationSpec`]
    WorkloadRegistration,
    /// [`WorkloadSpec`]
    Workload,
    /// [`DeploymentTargetSpec`]
    DeploymentTarget,
    /// [`SchedulingPolicySpec`]
    SchedulingPolicy,
    /// [`EnvironmentSpec`]
    Environment,
    /// [`GitOpsRepoSpec`]
    GitOpsRepo,
    /// [`BaseRepoSpec`]
    BaseRepo,
    /// [`ConfigSchemaSpec`]
    ConfigSchema,
    /// [`AssignmentSpec`]
    Assignment,
    /// [`AssignmentPackageSpec`]
    AssignmentPackage,
    /// A core `v1` ConfigMap ([`ConfigMapData`]).
    ConfigMap,
    /// [`SchedulerExtenderSpec`]
    SchedulerExtender,
    /// [`PromotionPolicySpec`]
    PromotionPolicy,
    /// [`RolloutPolicySpec`]
    RolloutPolicy,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 16] = [
        Kind::ClusterType,
        Kind::Template,
        Kind::WorkloadRegistration,
        Kind::Workload,
        Kind::DeploymentTarget,
        Kind::SchedulingPolicy,
        Kind::Environment,
        Kind::GitOpsRepo,
        Kind::BaseRepo,
        Kind::ConfigSchema,
        Kind::Assignment,
        Kind::AssignmentPackage,
        Kind::ConfigMap,
        Kind::SchedulerExtender,
        Kind::PromotionPolicy,
        Kind::RolloutPolicy,
    ];

    /// The kind's name as written in `kind:`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ClusterType => "ClusterType",
            Kind::Template => "Template",
            Kind::WorkloadRegistration => "WorkloadRegistration",
            Kind::Workload => "Workload",
            Kind::DeploymentTarget => "DeploymentTarget",
            Kind::SchedulingPolicy => "SchedulingPolicy",
            Kind::Environment => "Environment",
            Kind::GitOpsRepo => "GitOpsRepo",
            Kind::BaseRepo => "BaseRepo",
            Kind::ConfigSchema => "ConfigSchema",
            Kind::Assignment => "Assignment",
            Kind::AssignmentPackage => "AssignmentPackage",
            Kind::ConfigMap => "ConfigMap",
            Kind::SchedulerExtender => "SchedulerExtender",
            Kind::PromotionPolicy => "PromotionPolicy",
            Kind::RolloutPolicy => "RolloutPolicy",
        }
    }

    /// The `apiVersion` objects of this kind carry.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::ConfigMap => "v1",
            _ => API_VERSION,
        }
    }

    /// The plural resource name, as the original's CRDs spell it (`baserepoes`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ClusterType => "clustertypes",
            Kind::Template => "templates",
            Kind::WorkloadRegistration => "workloadregistrations",
            Kind::Workload => "workloads",
            Kind::DeploymentTarget => "deploymenttargets",
            Kind::SchedulingPolicy => "schedulingpolicies",
            Kind::Environment => "environments",
            Kind::GitOpsRepo => "gitopsrepoes",
            Kind::BaseRepo => "baserepoes",
            Kind::ConfigSchema => "configschemas",
            Kind::Assignment => "assignments",
            Kind::AssignmentPackage => "assignmentpackages",
            Kind::ConfigMap => "configmaps",
            Kind::SchedulerExtender => "schedulerextenders",
            Kind::PromotionPolicy => "promotionpolicies",
            Kind::RolloutPolicy => "rolloutpolicies",
        }
    }

    /// The kind of an object from its `apiVersion` and `kind`; `None` for kinds the
    /// scheduler does not read.
    pub fn from_type_meta(api_version: &str, kind: &str) -> Option<Kind> {
        let found = Kind::ALL.into_iter().find(|k| k.name() == kind)?;
        (found.api_version() == api_version).then_some(found)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The part of Kubernetes object metadata the scheduler reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// `metadata.name`
    #[serde(default)]
    pub name: String,
    /// `metadata.namespace`
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `metadata.labels` (a `null` value is an empty map).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: Labels,
    /// `metadata.annotations`
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: Labels,
}

/// A place in a git repository: `repo` URL, `branch` and `path`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct RepositoryRef {
    /// Repository URL.
    pub repo: String,
    /// Branch name.
    pub branch: String,
    /// Path inside the repository.
    pub path: String,
}

/// A set of cluster types sharing reconciler, namespace and config templates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "ClusterType",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "ClusterType of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Reconciler","type":"string","jsonPath":".spec.reconciler"}"#,
        printcolumn = r#"{"name":"Namespace","type":"string","jsonPath":".spec.namespaceService"}"#,
        printcolumn = r#"{"name":"Config","type":"string","jsonPath":".spec.configType"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct ClusterTypeSpec {
    /// Name of the reconciler `Template`.
    pub reconciler: String,
    /// Name of the namespace `Template`.
    pub namespace_service: String,
    /// Name of the config `Template`.
    pub config_type: String,
}

/// What a template is for. Recorded, but (as in the original) never checked against its use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub enum TemplateType {
    /// Reconciler resources (Flux, Argo CD...).
    Reconciler,
    /// The workload namespace and per-namespace resources.
    Namespace,
    /// The platform configuration (ConfigMap or env file).
    Config,
}

/// One manifest of a template: a Go template string, or (in older control planes) a YAML
/// object whose string leaves are templates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Manifest {
    /// A Go `text/template` string.
    Text(String),
    /// A YAML object (the pre-2023-03 form).
    Object(serde_json::Value),
}

/// Go templates for reconciler, namespace or config manifests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "Template",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "Template of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
        printcolumn = r#"{"name":"Content","type":"string","jsonPath":".spec.contentType"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct TemplateSpec {
    /// What the template is for.
    #[serde(rename = "type")]
    pub template_type: TemplateType,
    /// For config templates: `sh` writes `platform-config.sh`, anything else `.yaml`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    /// The manifests, each rendered separately and joined with `---\n`.
    pub manifests: Vec<Manifest>,
}

/// A reference to the place where a workload is defined.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "WorkloadRegistration",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "WorkloadRegistration of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.workspace"}"#,
        printcolumn = r#"{"name":"Repo","type":"string","jsonPath":".spec.workload.repo"}"#,
        printcolumn = r#"{"name":"Branch","type":"string","jsonPath":".spec.workload.branch"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct WorkloadRegistrationSpec {
    /// Repository, branch and path of the `Workload` definition.
    pub workload: RepositoryRef,
    /// The workspace (team) the workload belongs to.
    #[serde(default)]
    pub workspace: String,
}

/// An application or service with the deployment targets its team wants.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "Workload",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "Workload of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct WorkloadSpec {
    /// The deployment targets.
    #[serde(default, deserialize_with = "null_as_default")]
    pub deployment_targets: Vec<DeploymentTargetDetail>,
    /// JSON schemas every target's platform config must satisfy.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub config_schemas: Vec<String>,
}

/// One deployment target as a workload declares it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct DeploymentTargetDetail {
    /// Target name (the derived DeploymentTarget is `<workload>-<name>`).
    pub name: String,
    /// Target labels.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: Labels,
    /// The target's spec.
    #[serde(flatten)]
    pub spec: DeploymentTargetSpec,
}

/// A place a workload is deployed to within one environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "DeploymentTarget",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "DeploymentTarget of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Environment","type":"string","jsonPath":".spec.environment"}"#,
        printcolumn = r#"{"name":"Workload","type":"string","jsonPath":".metadata.labels.workload"}"#,
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".metadata.labels.workspace"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct DeploymentTargetSpec {
    /// The environment (`dev`, `stage`...).
    pub environment: String,
    /// Where the target's manifests are (`repo`, `branch`, `path`, ...); templates see it as
    /// `.Manifests`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub manifests: Labels,
    /// JSON schemas the target's platform config must satisfy.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub config_schemas: Vec<String>,
}

/// A Kubernetes label selector: `matchLabels` and `matchExpressions`, all of which must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "kube", schemars(extend("x-kubernetes-map-type" = "atomic")))]
pub struct LabelSelector {
    /// Exact label values.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub match_labels: Labels,
    /// Set-based requirements.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement: `In`, `NotIn`, `Exists` or `DoesNotExist`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// The values (`In`/`NotIn`: at least one; `Exists`/`DoesNotExist`: none).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub values: Vec<String>,
}

/// Which deployment targets a policy schedules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct DeploymentTargetSelector {
    /// Only targets of this workspace (empty: any).
    #[serde(default)]
    pub workspace: String,
    /// Targets whose labels match.
    #[serde(default)]
    pub label_selector: LabelSelector,
}

/// Which cluster types a policy schedules onto.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct ClusterTypeSelector {
    /// Cluster types whose labels match.
    #[serde(default)]
    pub label_selector: LabelSelector,
}

/// Assigns every selected deployment target to every selected cluster type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "SchedulingPolicy",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "SchedulingPolicy of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Workspace","type":"string","jsonPath":".spec.deploymentTargetSelector.workspace"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct SchedulingPolicySpec {
    /// The deployment targets.
    #[serde(default)]
    pub deployment_target_selector: DeploymentTargetSelector,
    /// The cluster types.
    #[serde(default)]
    pub cluster_type_selector: ClusterTypeSelector,
    /// At most this many cluster types per deployment target (absent: every feasible one).
    /// The placement fields are kalypso's; a policy without them behaves as the original's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number_of_cluster_types: Option<i64>,
    /// The ordering used when `numberOfClusterTypes` or a spread constraint cuts the
    /// feasible set: scores normalised to 0–100 per prioritizer, combined by weight.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub prioritizers: Vec<Prioritizer>,
    /// How the chosen cluster types spread over the values of cluster-type labels.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// SchedulerExtenders (by name) whose filter is applied to the feasible set before scoring.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub extenders: Vec<String>,
    /// Take the cluster types from an Open Cluster Management Placement's decisions
    /// (operator mode) instead of the cluster-type selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_ref: Option<PlacementRef>,
}

impl SchedulingPolicySpec {
    /// Whether the policy uses any placement field (otherwise it selects every feasible
    /// cluster type, exactly as the original).
    pub fn has_placement(&self) -> bool {
        self.number_of_cluster_types.is_some()
            || !self.prioritizers.is_empty()
            || !self.spread_constraints.is_empty()
            || !self.extenders.is_empty()
            || self.placement_ref.is_some()
    }
}

/// One prioritizer of a SchedulingPolicy: exactly one of `builtIn`, `labelValue` and
/// `extender`, with a weight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct Prioritizer {
    /// `Steady` (keep the cluster types the target is on now) or `Balance` (prefer cluster
    /// types with fewer assigned deployment targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built_in: Option<String>,
    /// A numeric cluster-type label as the score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_value: Option<LabelValue>,
    /// The scores of a SchedulerExtender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extender: Option<ExtenderRef>,
    /// The weight of the normalised score in the total (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// The `labelValue` prioritizer: the value of a cluster-type label, a number.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct LabelValue {
    /// The label key.
    pub key: String,
}

/// A SchedulerExtender by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct ExtenderRef {
    /// The SchedulerExtender's name.
    pub name: String,
}

/// Spread the chosen cluster types over the values of a cluster-type label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct SpreadConstraint {
    /// The cluster-type label whose values are the topology domains (`region`).
    pub topology_key: String,
    /// The most the numbers of chosen cluster types of two domains may differ by (default 1).
    #[serde(default = "one")]
    pub max_skew: i64,
}

fn one() -> i64 {
    1
}

/// An Open Cluster Management `Placement` (`cluster.open-cluster-management.io/v1beta1`)
/// whose `PlacementDecisions` choose the policy's cluster types.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct PlacementRef {
    /// The Placement's name.
    pub name: String,
    /// Its namespace (default: the policy's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The ManagedCluster label whose value is a decided cluster's cluster type (default
    /// `scheduler.kalypso.io/cluster-type`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_type_label: String,
}

/// What happens when a SchedulerExtender fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub enum FailurePolicy {
    /// The environment fails; nothing is written.
    #[default]
    Fail,
    /// The extender is skipped with a warning.
    Ignore,
}

/// An external scheduler: kalypso asks it (JSON over HTTP POST) to filter or score each
/// deployment target's candidate cluster types. The protocol is in `docs/placement.md`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "SchedulerExtender",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "SchedulerExtender of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.url"}"#,
        printcolumn = r#"{"name":"Filter","type":"boolean","jsonPath":".spec.filter"}"#,
        printcolumn = r#"{"name":"Prioritize","type":"boolean","jsonPath":".spec.prioritize"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct SchedulerExtenderSpec {
    /// The http(s) URL requests are POSTed to.
    pub url: String,
    /// Whether the extender filters candidates.
    #[serde(default)]
    pub filter: bool,
    /// Whether the extender scores candidates.
    #[serde(default)]
    pub prioritize: bool,
    /// How long one call may take, as a Go duration (`500ms`, `2s`; default `5s`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timeout: String,
    /// `Fail` (default): a failing call fails the environment; `Ignore`: it is skipped.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
}

/// What a control-plane commit must have passed before it is promoted into an environment:
/// it lives in the *target* environment's branch (an environment without one promotes as
/// before). The Deployment Observability Hub evaluates it; `docs/promotion.md` explains it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "PromotionPolicy",
        plural = "promotionpolicies",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "PromotionPolicy of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"From","type":"string","jsonPath":".spec.from"}"#,
        printcolumn = r#"{"name":"Soak","type":"string","jsonPath":".spec.soak"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct PromotionPolicySpec {
    /// The environment a commit must have passed (every cluster compliant) first.
    pub from: String,
    /// How long every cluster of `from` must have been compliant with the commit, as a Go
    /// duration (`1h`, `30m`; none: no soak).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub soak: String,
    /// Approvals needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<PromotionApprovals>,
    /// When promotions into the environment may happen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<PromotionWindow>,
    /// Checks run against `from` once its clusters are compliant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verification: Vec<PromotionVerification>,
}

/// The approvals of a [`PromotionPolicySpec`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct PromotionApprovals {
    /// Distinct identities that must approve the commit.
    pub required: u32,
    /// Who may approve: `user:NAME` or `group:NAME` (none: any identity allowed to approve).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
}

/// Whether a [`PromotionWindow`] allows or denies promotions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub enum WindowKind {
    /// Promotions only inside (one of) the allow windows.
    #[default]
    Allow,
    /// No promotion inside the window.
    Deny,
}

/// A recurring window: it opens at each time `schedule` (cron, in `timeZone`) names and
/// lasts `duration`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct PromotionWindow {
    /// `Allow` or `Deny`.
    pub kind: WindowKind,
    /// A cron expression (five fields: minute hour day-of-month month day-of-week).
    pub schedule: String,
    /// How long each window lasts, as a Go duration (`63h`).
    pub duration: String,
    /// An IANA time zone (`Europe/Berlin`; default `UTC`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_zone: String,
}

/// A check the hub runs against the `from` environment once its clusters are compliant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct PromotionVerification {
    /// The check's name, unique in the policy.
    pub name: String,
    /// An HTTP GET and the status it must answer.
    pub http: HttpCheck,
    /// How long the check may take, as a Go duration (default `30s`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timeout: String,
}

/// An HTTP GET check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct HttpCheck {
    /// The http(s) URL.
    pub url: String,
    /// The status it must answer (default 200).
    #[serde(default = "default_expect_status")]
    pub expect_status: u16,
}

fn default_expect_status() -> u16 {
    200
}

/// How a change of an environment reaches its cluster types: in waves, each delivered once
/// every registered cluster of the waves before it runs the change (as the Deployment
/// Observability Hub sees it) for `minSuccessTime`. Optional, in an environment branch; an
/// environment without one gets every change in one GitOps commit, as the original.
/// `docs/rollout.md` has the rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "RolloutPolicy",
        plural = "rolloutpolicies",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "RolloutPolicy of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"OnFailure","type":"string","jsonPath":".spec.onFailure"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct RolloutPolicySpec {
    /// The waves, in order; a cluster type belongs to the first wave whose selector matches
    /// its labels, and every cluster type of the environment must belong to one.
    #[serde(default, deserialize_with = "null_as_default")]
    pub waves: Vec<Wave>,
    /// Failed clusters a wave may have before the rollout fails: a number (`0`, the default)
    /// or a percentage of the wave's registered clusters (`10%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "kube", schemars(schema_with = "crate::crd::int_or_string_schema"))]
    pub max_failures: Option<IntOrPercent>,
    /// How long a wave may take to become compliant before the rollout fails, as a Go
    /// duration (`30m`; default: no deadline).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress_deadline: String,
    /// What a failed rollout does: `Halt` (default: later waves keep the old content) or
    /// `Rollback` (the delivered waves get their previous content back).
    #[serde(default)]
    pub on_failure: OnFailure,
}

/// One wave of a [`RolloutPolicySpec`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub struct Wave {
    /// The wave's name (unique in the policy).
    pub name: String,
    /// The cluster types of the wave (those an earlier wave took aside).
    #[serde(default)]
    pub cluster_type_selector: ClusterTypeSelector,
    /// How long every registered cluster of the wave must have run the change before the
    /// next wave gets it, as a Go duration (`10m`; default `0s`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub min_success_time: String,
}

/// A count or a percentage (`3`, `"10%"`), as Kubernetes' `IntOrString`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub enum IntOrPercent {
    /// A count.
    Int(i64),
    /// A percentage, `"N%"` (or a count written as a string).
    String(String),
}

/// What a failed rollout does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "kube", derive(schemars::JsonSchema))]
pub enum OnFailure {
    /// Stop: the waves delivered keep the change, the later ones the old content.
    #[default]
    Halt,
    /// Stop and give the delivered waves their previous content back.
    Rollback,
}

/// A rollout environment and the control-plane branch that configures it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "Environment",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "Environment of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Repo","type":"string","jsonPath":".spec.controlPlane.repo"}"#,
        printcolumn = r#"{"name":"Branch","type":"string","jsonPath":".spec.controlPlane.branch"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct EnvironmentSpec {
    /// Repository, branch and path of the environment's configuration.
    pub control_plane: RepositoryRef,
}

/// Where the environment's platform GitOps tree is delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "GitOpsRepo",
        plural = "gitopsrepoes",
        namespaced,
        status = "GitOpsRepoStatus",
        category = "kalypso",
        doc = "GitOpsRepo of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Repo","type":"string","jsonPath":".spec.repo"}"#,
        printcolumn = r#"{"name":"Branch","type":"string","jsonPath":".spec.branch"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct GitOpsRepoSpec {
    /// Repository URL.
    pub repo: String,
    /// The environment's branch.
    pub branch: String,
    /// Path (ignored by the original, which always writes at the repository root).
    #[serde(default)]
    pub path: String,
    /// The forge the repository is on, for pull requests, failure reports and commit
    /// statuses (kalypso's; the original knows only GitHub): `github`, `gitlab`,
    /// `azure-devops`, `gitea` or `forgejo`. Default: the `--provider` of the run, else
    /// inferred from the URL (github.com, gitlab.com, dev.azure.com, *.visualstudio.com,
    /// codeberg.org; any other host is GitHub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The forge's API (kalypso's): `https://HOST/api/v4` for GitLab, the organization or
    /// collection URL for Azure DevOps, `https://HOST/api/v1` for Gitea. Default: derived
    /// from the URL (or the run's `--provider-api-url` when `provider` is not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_api_url: Option<String>,
}

/// The main-branch content an environment is built from; `commit` pins it (promotion).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "BaseRepo",
        plural = "baserepoes",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "BaseRepo of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Repo","type":"string","jsonPath":".spec.repo"}"#,
        printcolumn = r#"{"name":"Branch","type":"string","jsonPath":".spec.branch"}"#,
        printcolumn = r#"{"name":"Commit","type":"string","jsonPath":".spec.commit"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct BaseRepoSpec {
    /// Repository URL.
    pub repo: String,
    /// Branch (normally `main`).
    pub branch: String,
    /// Path inside the repository.
    #[serde(default)]
    pub path: String,
    /// The promoted commit, if pinned.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit: String,
}

/// A JSON schema for platform config, applied to assignments matched by its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "ConfigSchema",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "ConfigSchema of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct ConfigSchemaSpec {
    /// The JSON schema text.
    pub schema: String,
}

/// One deployment target scheduled on one cluster type (derived).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "Assignment",
        namespaced,
        status = "AssignmentStatus",
        category = "kalypso",
        doc = "Assignment of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"Workload","type":"string","jsonPath":".spec.workload"}"#,
        printcolumn = r#"{"name":"Target","type":"string","jsonPath":".spec.deploymentTarget"}"#,
        printcolumn = r#"{"name":"ClusterType","type":"string","jsonPath":".spec.clusterType"}"#,
        printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
        printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","priority":1}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
pub struct AssignmentSpec {
    /// The workload.
    pub workload: String,
    /// The deployment target.
    pub deployment_target: String,
    /// The cluster type.
    pub cluster_type: String,
}

/// The rendered manifests of one assignment (derived).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "kube", derive(kube::CustomResource, schemars::JsonSchema))]
#[cfg_attr(
    feature = "kube",
    kube(
        group = "scheduler.kalypso.io",
        version = "v1alpha1",
        kind = "AssignmentPackage",
        namespaced,
        status = "Status",
        category = "kalypso",
        doc = "AssignmentPackage of the Kalypso scheduler (`scheduler.kalypso.io/v1alpha1`).",
        printcolumn = r#"{"name":"ClusterType","type":"string","jsonPath":".metadata.labels.cluster-type"}"#,
        printcolumn = r#"{"name":"Target","type":"string","jsonPath":".metadata.labels.deployment-target"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    )
)]
#[cfg_attr(feature = "kube", schemars(transform = crd::assignment_package_schema))]
pub struct AssignmentPackageSpec {
    /// Rendered reconciler manifests.
    #[serde(default)]
    pub reconciler_manifests: Vec<String>,
    /// Rendered namespace manifests.
    #[serde(default)]
    pub namespace_manifests: Vec<String>,
    /// Rendered config manifests.
    #[serde(default)]
    pub config_manifests: Vec<String>,
    /// `yaml` or `sh`.
    #[serde(default)]
    pub config_manifests_content_type: String,
}

/// The data of a core ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapData {
    /// `data`: string values.
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: Labels,
}

/// Treats an explicit YAML/JSON `null` like an absent field (Kubernetes does the same).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_resolve_from_type_meta() {
        assert_eq!(
            Kind::from_type_meta(API_VERSION, "ClusterType"),
            Some(Kind::ClusterType)
        );
        assert_eq!(Kind::from_type_meta("v1", "ConfigMap"), Some(Kind::ConfigMap));
        assert_eq!(Kind::from_type_meta("v1", "ClusterType"), None);
        assert_eq!(Kind::from_type_meta(API_VERSION, "Secret"), None);
        assert_eq!(Kind::BaseRepo.plural(), "baserepoes");
    }

    #[test]
    fn templates_accept_strings_and_objects() {
        let spec: TemplateSpec = serde_json::from_value(serde_json::json!({
            "type": "reconciler",
            "manifests": ["a: {{ .X }}", {"kind": "Namespace", "metadata": {"name": "{{ .Namespace }}"}}]
        }))
        .unwrap();
        assert!(matches!(spec.manifests[0], Manifest::Text(_)));
        assert!(matches!(spec.manifests[1], Manifest::Object(_)));
    }

    #[test]
    fn deployment_target_details_flatten_their_spec() {
        let d: DeploymentTargetDetail = serde_json::from_value(serde_json::json!({
            "name": "dev", "labels": null, "environment": "dev",
            "manifests": {"repo": "r", "branch": "b", "path": "p"}
        }))
        .unwrap();
        assert_eq!(d.spec.environment, "dev");
        assert_eq!(d.spec.manifests["path"], "p");
        assert!(d.labels.is_empty());
    }
}
