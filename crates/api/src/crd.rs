//! The kinds as Kubernetes custom resources (feature `kube`).
//!
//! With the feature on, every `*Spec` type of this crate also derives kube's
//! `CustomResource` and schemars' `JsonSchema`, which generates the root types
//! ([`ClusterType`], [`Template`], ...) and their
//! `CustomResourceDefinition`s. This module holds what those derives need besides the specs:
//! the status types, the schema of template manifests (strings), and [`definitions`], the
//! CRDs of every kind in one list.
//!
//! The CRDs are field- and version-compatible with the original operator's: same group,
//! version, kinds, plural names (`baserepoes`, `gitopsrepoes`), namespaced scope and status
//! subresources, and the same validation: they accept what the original's accept and refuse
//! what they refuse (the same required fields, manifests as strings), so an object applied by
//! Flux exists in both or in neither, with one exception: `spec` itself is required (kube's
//! typed objects cannot hold an object without one, and the original does nothing with such
//! an object but fail its reconcile). What they add (conditions on every kind, printer
//! columns, the `kalypso` category) is additive.

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResourceExt;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{
    Assignment, AssignmentPackage, BaseRepo, ClusterType, ConfigSchema, DeploymentTarget, Environment,
    GitOpsRepo, Manifest, PromotionPolicy, RolloutPolicy, SchedulerExtender, SchedulingPolicy, Template,
    Workload, WorkloadRegistration,
};

/// The status of most kinds: conditions only (`Ready`, with reason, message and the
/// generation it was computed for).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// The status of a GitOpsRepo: what was last delivered to it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsRepoStatus {
    /// Hash of the content last delivered (the original stores its own hash here; a
    /// different value only means one more, possibly empty, delivery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_content_hash: Option<String>,
    /// Conditions: `Ready` (delivered, blocked or failed) and `ReadyToPR` (content waiting
    /// for the debounce to pass).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The commit last written to the GitOps repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit: Option<String>,
    /// The pull request last opened, when delivering by pull request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<String>,
}

/// The GitHub issue an assignment's failure was reported in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitIssueStatus {
    /// The issue number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue_no: Option<i64>,
    /// Hash of the reported message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
}

/// The status of an Assignment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentStatus {
    /// Conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// The issue reporting the assignment's failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_issue_status: Option<GitIssueStatus>,
}

/// Conditions are a map keyed by `type`, so that server-side apply merges them per type.
fn conditions_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Vec<Condition>>::json_schema(generator);
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["type"]));
    schema
}

/// A count or a percentage, as Kubernetes' `IntOrString` fields are declared.
pub(crate) fn int_or_string_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
}

/// A template manifest in a cluster is a Go template string, as the original's CRD requires
/// (`items: {type: string}`). Control-plane folders from before 2023-03 may still hold YAML
/// objects (kalypso reads both when it reads files), but no cluster running the original
/// accepts them, so neither does this schema.
impl JsonSchema for Manifest {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Manifest".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A Go template (text/template with Sprig) of one Kubernetes manifest.",
            "type": "string"
        })
    }
}

/// The original's AssignmentPackages also carry a content type for the reconciler and
/// namespace manifests; the schema keeps them so that its objects survive unpruned.
pub(crate) fn assignment_package_schema(schema: &mut Schema) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for field in ["reconcilerManifestsContentType", "namespaceManifestsContentType"] {
            properties.insert(field.to_owned(), serde_json::json!({ "type": "string" }));
        }
    }
}

/// The CustomResourceDefinitions of every `scheduler.kalypso.io/v1alpha1` kind, sorted by
/// name (`assignmentpackages.scheduler.kalypso.io` first).
pub fn definitions() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        Assignment::crd(),
        AssignmentPackage::crd(),
        BaseRepo::crd(),
        ClusterType::crd(),
        ConfigSchema::crd(),
        DeploymentTarget::crd(),
        Environment::crd(),
        GitOpsRepo::crd(),
        PromotionPolicy::crd(),
        RolloutPolicy::crd(),
        SchedulerExtender::crd(),
        SchedulingPolicy::crd(),
        Template::crd(),
        Workload::crd(),
        WorkloadRegistration::crd(),
    ];
    for crd in &mut crds {
        require_as_the_original(crd);
    }
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// Fields the original's CRDs require although kalypso's types give them defaults: the
/// defaults keep reading files lenient (the core reports a missing selector as an error naming
/// the field), while in a cluster an object the original would refuse is refused too. Each
/// entry: kind, the path of the object schema from the root (`[]` steps into array items), and
/// the required field.
const REQUIRED_AS_IN_THE_ORIGINAL: &[(&str, &[&str], &str)] = &[
    ("BaseRepo", &["spec"], "path"),
    ("GitOpsRepo", &["spec"], "path"),
    ("DeploymentTarget", &["spec"], "manifests"),
    ("Workload", &["spec", "deploymentTargets", "[]"], "manifests"),
    ("SchedulingPolicy", &["spec"], "clusterTypeSelector"),
    ("SchedulingPolicy", &["spec"], "deploymentTargetSelector"),
    (
        "SchedulingPolicy",
        &["spec", "clusterTypeSelector"],
        "labelSelector",
    ),
    (
        "SchedulingPolicy",
        &["spec", "deploymentTargetSelector"],
        "labelSelector",
    ),
];

fn require_as_the_original(crd: &mut CustomResourceDefinition) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaProps, JSONSchemaPropsOrArray,
    };
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        for (_, path, field) in REQUIRED_AS_IN_THE_ORIGINAL.iter().filter(|(k, ..)| *k == kind) {
            let mut schema: Option<&mut JSONSchemaProps> = Some(&mut *root);
            for step in *path {
                schema = schema.and_then(|s| {
                    if *step == "[]" {
                        match s.items.as_mut() {
                            Some(JSONSchemaPropsOrArray::Schema(items)) => Some(&mut **items),
                            _ => None,
                        }
                    } else {
                        s.properties.as_mut().and_then(|p| p.get_mut(*step))
                    }
                });
            }
            if let Some(schema) = schema {
                let required = schema.required.get_or_insert_with(Vec::new);
                if !required.iter().any(|r| r == field) {
                    required.push((*field).to_owned());
                    required.sort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    #[test]
    fn every_kind_has_a_crd_with_the_original_names() {
        let crds = definitions();
        for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::ConfigMap) {
            let crd = crds
                .iter()
                .find(|c| c.spec.names.kind == kind.name())
                .unwrap_or_else(|| panic!("no CRD for {kind}"));
            assert_eq!(crd.spec.group, crate::GROUP);
            assert_eq!(crd.spec.names.plural, kind.plural());
            assert_eq!(
                crd.metadata.name.as_deref(),
                Some(format!("{}.{}", kind.plural(), crate::GROUP).as_str())
            );
            assert_eq!(crd.spec.scope, "Namespaced");
            assert_eq!(crd.spec.versions.len(), 1);
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, crate::VERSION);
            assert!(version.served && version.storage);
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                "{kind} has a status subresource"
            );
        }
        assert_eq!(crds.len(), 15);
    }

    fn spec_schema(kind: &str) -> serde_json::Value {
        let crd = definitions()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("crd");
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        let json = serde_json::to_value(schema).expect("json");
        json["properties"]["spec"].clone()
    }

    #[test]
    fn template_manifests_are_strings_as_in_the_original() {
        let spec = spec_schema("Template");
        let items = &spec["properties"]["manifests"]["items"];
        assert_eq!(items["type"], "string", "{spec:#}");
        assert_eq!(
            spec["properties"]["type"]["enum"],
            serde_json::json!(["reconciler", "namespace", "config"])
        );
    }

    #[test]
    fn required_fields_match_the_original() {
        let ct = spec_schema("ClusterType");
        assert_eq!(
            ct["required"],
            serde_json::json!(["configType", "namespaceService", "reconciler"])
        );
        let env = spec_schema("Environment");
        assert_eq!(env["required"], serde_json::json!(["controlPlane"]));
        for kind in ["BaseRepo", "GitOpsRepo"] {
            assert_eq!(
                spec_schema(kind)["required"],
                serde_json::json!(["branch", "path", "repo"]),
                "{kind}"
            );
        }
        assert_eq!(
            spec_schema("DeploymentTarget")["required"],
            serde_json::json!(["environment", "manifests"])
        );
        let target = &spec_schema("Workload")["properties"]["deploymentTargets"]["items"];
        assert_eq!(
            target["required"],
            serde_json::json!(["environment", "manifests", "name"])
        );
        let policy = spec_schema("SchedulingPolicy");
        assert_eq!(
            policy["required"],
            serde_json::json!(["clusterTypeSelector", "deploymentTargetSelector"])
        );
        for selector in ["clusterTypeSelector", "deploymentTargetSelector"] {
            assert_eq!(
                policy["properties"][selector]["required"],
                serde_json::json!(["labelSelector"]),
                "{selector}"
            );
        }
        let selector = &spec_schema("SchedulingPolicy")["properties"]["clusterTypeSelector"]["properties"]["labelSelector"];
        assert_eq!(selector["x-kubernetes-map-type"], "atomic");
        let package = spec_schema("AssignmentPackage");
        assert!(package["properties"]["reconcilerManifestsContentType"].is_object());
        assert!(package["properties"]["configManifestsContentType"].is_object());
    }
}
