//! From Kubernetes objects to the core's kube-free model.
//!
//! The operator does not schedule or render with Kubernetes types: it copies what the API
//! server holds for one namespace into a [`Snapshot`], and [`Snapshot::to_namespace`] turns
//! that into a `kalypso_core::model::Namespace`, the same model the CLI and the git daemon
//! fill from files (linkerd's "kube-free domain core"). Everything after that is the shared,
//! pure pipeline.
//!
//! Two things differ from loading files. Objects keep the labels they have in the cluster
//! (Flux has already added its own), and DeploymentTargets that the operator derived from a
//! Workload (owned by it) are left out, because the pipeline derives them again; only
//! DeploymentTargets someone declared directly are inputs.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta as KubeMeta;
use kalypso_api::{
    BaseRepo, ClusterType, ConfigMapData, ConfigSchema, DeploymentTarget, GitOpsRepo, Kind, ObjectMeta,
    RolloutPolicy, SchedulingPolicy, Template, Workload, WorkloadRegistration, labels,
};
use kalypso_core::Origin;
use kalypso_core::model::{DeliveredWorkload, Namespace, Object};
use kube::ResourceExt;

/// The objects of one environment namespace, as the API server (or the operator's caches)
/// holds them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The namespace.
    pub namespace: String,
    /// ClusterTypes.
    pub cluster_types: Vec<Arc<ClusterType>>,
    /// Templates.
    pub templates: Vec<Arc<Template>>,
    /// WorkloadRegistrations.
    pub registrations: Vec<Arc<WorkloadRegistration>>,
    /// Workloads.
    pub workloads: Vec<Arc<Workload>>,
    /// DeploymentTargets, derived and declared.
    pub deployment_targets: Vec<Arc<DeploymentTarget>>,
    /// SchedulingPolicies.
    pub policies: Vec<Arc<SchedulingPolicy>>,
    /// GitOpsRepos.
    pub gitops_repos: Vec<Arc<GitOpsRepo>>,
    /// BaseRepos.
    pub base_repos: Vec<Arc<BaseRepo>>,
    /// ConfigSchemas.
    pub config_schemas: Vec<Arc<ConfigSchema>>,
    /// RolloutPolicies: not an input of the pipeline (the Flux and external sources cannot
    /// run rollouts), but one in the namespace stops its delivery (see
    /// [`Snapshot::rollout_policies_in_force`]).
    pub rollout_policies: Vec<Arc<RolloutPolicy>>,
    /// ConfigMaps (all of them; the pipeline picks the platform ones).
    pub config_maps: Vec<Arc<ConfigMap>>,
    /// The cluster types the OCM Placement of each policy with a `placementRef` decided
    /// (policy name → cluster types; see [`crate::ocm`]). Policies whose decisions could not
    /// be read have no entry.
    pub placement_decisions: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// The Environment named after the namespace, if there is one (its annotations allow a
    /// mass deletion; with `--source external` the scheduler writes its `Ready`).
    pub environment: Option<Arc<kalypso_api::Environment>>,
}

/// A Workload whose Flux label names a WorkloadRegistration that does not exist: the
/// original fails the Workload (its reconcile cannot look the workspace up) and derives no
/// targets from it; so does the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingRegistration {
    /// The Workload.
    pub workload: String,
    /// The registration its Flux label names.
    pub registration: String,
}

/// Where an object of the cluster is "from", for diagnostics: its API path.
pub fn origin(kind: Kind, namespace: &str, name: &str) -> Origin {
    Origin::new(format!("namespaces/{namespace}/{}/{name}", kind.plural()), 0)
}

/// The metadata the core reads.
fn meta(m: &KubeMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name.clone().unwrap_or_default(),
        namespace: m.namespace.clone(),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
    }
}

fn object<S: Clone>(kind: Kind, namespace: &str, m: &KubeMeta, spec: &S) -> Object<S> {
    let meta = meta(m);
    let origin = origin(kind, namespace, &meta.name);
    Object {
        meta,
        spec: spec.clone(),
        origin,
    }
}

/// Whether an object is on its way out (Flux pruned it, someone deleted it).
fn deleting(m: &KubeMeta) -> bool {
    m.deletion_timestamp.is_some()
}

/// Whether a DeploymentTarget was derived from a Workload (the Workload is its controller).
pub fn derived_from_workload(target: &DeploymentTarget) -> Option<&str> {
    target
        .owner_references()
        .iter()
        .find(|o| o.kind == Kind::Workload.name() && o.api_version == kalypso_api::API_VERSION)
        .map(|o| o.name.as_str())
}

/// The WorkloadRegistration that delivered a Workload, from the Flux label
/// `kustomize.toolkit.fluxcd.io/name: <namespace>-<registration>`. The original splits at the
/// first `-`, which breaks for environment names containing `-`; the namespace prefix is
/// stripped here instead. No label: `Some("")`, the original's empty workspace.
pub fn registration_of(namespace: &str, workload_labels: &kalypso_api::Labels) -> String {
    match workload_labels.get(labels::FLUX_NAME) {
        None => String::new(),
        Some(kustomization) => match kustomization.strip_prefix(&format!("{namespace}-")) {
            Some(registration) => registration.to_owned(),
            None => kustomization
                .split_once('-')
                .map(|(_, rest)| rest.to_owned())
                .unwrap_or_default(),
        },
    }
}

impl Snapshot {
    /// An empty snapshot of `namespace`.
    pub fn new(namespace: impl Into<String>) -> Snapshot {
        Snapshot {
            namespace: namespace.into(),
            ..Snapshot::default()
        }
    }

    /// Whether the namespace holds anything the scheduler acts on.
    pub fn is_empty(&self) -> bool {
        self.cluster_types.is_empty()
            && self.templates.is_empty()
            && self.registrations.is_empty()
            && self.workloads.is_empty()
            && self.deployment_targets.is_empty()
            && self.policies.is_empty()
            && self.gitops_repos.is_empty()
            && self.base_repos.is_empty()
            && self.config_schemas.is_empty()
    }

    /// The RolloutPolicies of the namespace that are not being deleted, as
    /// `namespace/name`, sorted.
    pub fn rollout_policies_in_force(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .rollout_policies
            .iter()
            .filter(|p| !deleting(&p.metadata))
            .map(|p| format!("{}/{}", self.namespace, p.name_any()))
            .collect();
        names.sort();
        names
    }

    /// The core model of the namespace, and the Workloads left out because their
    /// registration is missing.
    pub fn to_namespace(&self) -> (Namespace, Vec<MissingRegistration>) {
        let ns_name = self.namespace.as_str();
        let mut ns = Namespace::new(ns_name);
        let mut missing = Vec::new();
        macro_rules! fill {
            ($field:ident, $target:ident, $kind:expr) => {
                for o in self.$field.iter().filter(|o| !deleting(&o.metadata)) {
                    let obj = object($kind, ns_name, &o.metadata, &o.spec);
                    ns.$target.insert(obj.meta.name.clone(), obj);
                }
            };
        }
        fill!(cluster_types, cluster_types, Kind::ClusterType);
        fill!(templates, templates, Kind::Template);
        fill!(registrations, registrations, Kind::WorkloadRegistration);
        fill!(policies, policies, Kind::SchedulingPolicy);
        fill!(gitops_repos, gitops_repos, Kind::GitOpsRepo);
        fill!(base_repos, base_repos, Kind::BaseRepo);
        fill!(config_schemas, config_schemas, Kind::ConfigSchema);
        for t in self
            .deployment_targets
            .iter()
            .filter(|t| !deleting(&t.metadata) && derived_from_workload(t).is_none())
        {
            let obj = object(Kind::DeploymentTarget, ns_name, &t.metadata, &t.spec);
            ns.deployment_targets.insert(obj.meta.name.clone(), obj);
        }
        for w in self.workloads.iter().filter(|w| !deleting(&w.metadata)) {
            let obj = object(Kind::Workload, ns_name, &w.metadata, &w.spec);
            let registration = registration_of(ns_name, &obj.meta.labels);
            if !registration.is_empty() && !ns.registrations.contains_key(&registration) {
                missing.push(MissingRegistration {
                    workload: obj.meta.name.clone(),
                    registration,
                });
                continue;
            }
            ns.workloads.insert(
                obj.meta.name.clone(),
                DeliveredWorkload {
                    object: obj,
                    registration: Some(registration),
                },
            );
        }
        for cm in self.config_maps.iter().filter(|c| !deleting(&c.metadata)) {
            let data = ConfigMapData {
                data: cm.data.clone().unwrap_or_default().into_iter().collect(),
            };
            let obj = object(Kind::ConfigMap, ns_name, &cm.metadata, &data);
            ns.config_maps.insert(obj.meta.name.clone(), obj);
        }
        (ns, missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;

    #[test]
    fn flux_labels_name_the_registration() {
        let mut l = kalypso_api::Labels::new();
        assert_eq!(registration_of("dev", &l), "");
        l.insert(labels::FLUX_NAME.into(), "dev-hello-world".into());
        assert_eq!(registration_of("dev", &l), "hello-world");
        // The original's bug (environment names with `-`) is fixed by stripping the prefix.
        l.insert(labels::FLUX_NAME.into(), "dev-east-hw".into());
        assert_eq!(registration_of("dev-east", &l), "hw");
    }

    #[test]
    fn derived_targets_are_not_inputs() {
        let mut s = Snapshot::new("dev");
        let workload = workload("hw", "hw", &[("dev", "dev")]);
        s.deployment_targets
            .push(Arc::new(owned_target(&workload, "hw-dev", "dev")));
        s.deployment_targets
            .push(Arc::new(declared_target("extra", "dev")));
        s.registrations.push(Arc::new(registration("hw", "team")));
        s.workloads.push(Arc::new(workload));
        let (ns, missing) = s.to_namespace();
        assert!(missing.is_empty());
        assert_eq!(ns.deployment_targets.keys().collect::<Vec<_>>(), ["extra"]);
        assert_eq!(ns.workloads["hw"].registration.as_deref(), Some("hw"));
        assert_eq!(
            ns.workloads["hw"].object.origin.to_string(),
            "namespaces/dev/workloads/hw"
        );
    }

    #[test]
    fn workloads_of_missing_registrations_are_left_out() {
        let mut s = Snapshot::new("dev");
        s.workloads
            .push(Arc::new(workload("hw", "gone", &[("dev", "dev")])));
        let (ns, missing) = s.to_namespace();
        assert!(ns.workloads.is_empty());
        assert_eq!(
            missing,
            [MissingRegistration {
                workload: "hw".into(),
                registration: "gone".into()
            }]
        );
    }

    #[test]
    fn deleted_objects_are_ignored() {
        let mut s = Snapshot::new("dev");
        let mut ct = cluster_type("large", "flux", "ns", "cfg");
        ct.metadata.deletion_timestamp = Some(now());
        s.cluster_types.push(Arc::new(ct));
        assert!(s.to_namespace().0.cluster_types.is_empty());
    }
}
