//! The namespace model: everything Flux would have applied into one environment's namespace.
//!
//! In the original, an environment is a Kubernetes namespace filled by Flux Kustomizations:
//! one for the environment branch (named `<env>`), one for the promoted main branch (named
//! `<env>-<BaseRepo>`), and one per WorkloadRegistration (`<env>-<registration>`). Flux labels
//! every object it applies with the Kustomization's name, and those labels are visible to
//! templates and label matching. [`Namespace::apply`] reproduces this, validates names and
//! labels as the Kubernetes API server would, and rejects duplicate names.

use std::collections::BTreeMap;

use kalypso_api::{
    BaseRepoSpec, ClusterTypeSpec, ConfigMapData, ConfigSchemaSpec, DeploymentTargetSpec, EnvironmentSpec,
    GitOpsRepoSpec, Kind, ObjectMeta, PromotionPolicySpec, RolloutPolicySpec, SchedulerExtenderSpec,
    SchedulingPolicySpec, TemplateSpec, WorkloadRegistrationSpec, WorkloadSpec, labels,
};

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};
use crate::names::{
    config_map_key_error, dns_label_error, dns_subdomain_error, label_key_error, label_value_error,
};
use crate::source::SourceTree;

/// An object with its metadata, spec and origin.
#[derive(Clone, Debug, PartialEq)]
pub struct Object<S> {
    /// Name, labels, annotations.
    pub meta: ObjectMeta,
    /// The kind-specific content.
    pub spec: S,
    /// Where it was read from.
    pub origin: Origin,
}

impl<S> Object<S> {
    /// An object of `name` with `spec`, without labels.
    pub fn new(name: impl Into<String>, spec: S, origin: Origin) -> Object<S> {
        Object {
            meta: ObjectMeta {
                name: name.into(),
                ..ObjectMeta::default()
            },
            spec,
            origin,
        }
    }

    /// `metadata.name`
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// `metadata.labels`
    pub fn labels(&self) -> &kalypso_api::Labels {
        &self.meta.labels
    }
}

/// An object of any kind the scheduler reads.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum AnyObject {
    ClusterType(Object<ClusterTypeSpec>),
    Template(Object<TemplateSpec>),
    WorkloadRegistration(Object<WorkloadRegistrationSpec>),
    Workload(Object<WorkloadSpec>),
    DeploymentTarget(Object<DeploymentTargetSpec>),
    SchedulingPolicy(Object<SchedulingPolicySpec>),
    Environment(Object<EnvironmentSpec>),
    GitOpsRepo(Object<GitOpsRepoSpec>),
    BaseRepo(Object<BaseRepoSpec>),
    ConfigSchema(Object<ConfigSchemaSpec>),
    ConfigMap(Object<ConfigMapData>),
    SchedulerExtender(Object<SchedulerExtenderSpec>),
    /// A PromotionPolicy.
    PromotionPolicy(Object<PromotionPolicySpec>),
    /// A RolloutPolicy.
    RolloutPolicy(Object<RolloutPolicySpec>),
}

macro_rules! each_object {
    ($value:expr, $o:ident => $body:expr) => {
        match $value {
            AnyObject::ClusterType($o) => $body,
            AnyObject::Template($o) => $body,
            AnyObject::WorkloadRegistration($o) => $body,
            AnyObject::Workload($o) => $body,
            AnyObject::DeploymentTarget($o) => $body,
            AnyObject::SchedulingPolicy($o) => $body,
            AnyObject::Environment($o) => $body,
            AnyObject::GitOpsRepo($o) => $body,
            AnyObject::BaseRepo($o) => $body,
            AnyObject::ConfigSchema($o) => $body,
            AnyObject::ConfigMap($o) => $body,
            AnyObject::SchedulerExtender($o) => $body,
            AnyObject::PromotionPolicy($o) => $body,
            AnyObject::RolloutPolicy($o) => $body,
        }
    };
}

impl AnyObject {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            AnyObject::ClusterType(_) => Kind::ClusterType,
            AnyObject::Template(_) => Kind::Template,
            AnyObject::WorkloadRegistration(_) => Kind::WorkloadRegistration,
            AnyObject::Workload(_) => Kind::Workload,
            AnyObject::DeploymentTarget(_) => Kind::DeploymentTarget,
            AnyObject::SchedulingPolicy(_) => Kind::SchedulingPolicy,
            AnyObject::Environment(_) => Kind::Environment,
            AnyObject::GitOpsRepo(_) => Kind::GitOpsRepo,
            AnyObject::BaseRepo(_) => Kind::BaseRepo,
            AnyObject::ConfigSchema(_) => Kind::ConfigSchema,
            AnyObject::ConfigMap(_) => Kind::ConfigMap,
            AnyObject::SchedulerExtender(_) => Kind::SchedulerExtender,
            AnyObject::PromotionPolicy(_) => Kind::PromotionPolicy,
            AnyObject::RolloutPolicy(_) => Kind::RolloutPolicy,
        }
    }

    /// The metadata.
    pub fn meta(&self) -> &ObjectMeta {
        each_object!(self, o => &o.meta)
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        each_object!(self, o => &mut o.meta)
    }

    /// Where it was read from.
    pub fn origin(&self) -> &Origin {
        each_object!(self, o => &o.origin)
    }
}

/// Which Flux Kustomization brings a tree into the environment's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kustomization {
    /// The environment branch (Kustomization `<env>`).
    Environment,
    /// The main branch, through the BaseRepo of this name (Kustomization `<env>-<name>`).
    Base(String),
    /// A workload folder, through the WorkloadRegistration of this name
    /// (Kustomization `<env>-<name>`).
    Workload(String),
}

impl Kustomization {
    /// The Kustomization's name, which Flux writes into `kustomize.toolkit.fluxcd.io/name`.
    pub fn name(&self, namespace: &str) -> String {
        match self {
            Kustomization::Environment => namespace.to_owned(),
            Kustomization::Base(name) | Kustomization::Workload(name) => format!("{namespace}-{name}"),
        }
    }
}

/// A Workload and the registration that delivered it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeliveredWorkload {
    /// The Workload object.
    pub object: Object<WorkloadSpec>,
    /// The WorkloadRegistration whose folder held it (`None`: it came from a control-plane
    /// branch).
    pub registration: Option<String>,
}

/// Everything in one environment's namespace, by kind and name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Namespace {
    /// The namespace (= environment) name.
    pub name: String,
    /// ClusterTypes.
    pub cluster_types: BTreeMap<String, Object<ClusterTypeSpec>>,
    /// Templates.
    pub templates: BTreeMap<String, Object<TemplateSpec>>,
    /// WorkloadRegistrations.
    pub registrations: BTreeMap<String, Object<WorkloadRegistrationSpec>>,
    /// Workloads.
    pub workloads: BTreeMap<String, DeliveredWorkload>,
    /// DeploymentTargets declared directly (not derived from a Workload).
    pub deployment_targets: BTreeMap<String, Object<DeploymentTargetSpec>>,
    /// SchedulingPolicies.
    pub policies: BTreeMap<String, Object<SchedulingPolicySpec>>,
    /// Environments.
    pub environments: BTreeMap<String, Object<EnvironmentSpec>>,
    /// GitOpsRepos.
    pub gitops_repos: BTreeMap<String, Object<GitOpsRepoSpec>>,
    /// BaseRepos.
    pub base_repos: BTreeMap<String, Object<BaseRepoSpec>>,
    /// ConfigSchemas.
    pub config_schemas: BTreeMap<String, Object<ConfigSchemaSpec>>,
    /// ConfigMaps.
    pub config_maps: BTreeMap<String, Object<ConfigMapData>>,
    /// SchedulerExtenders.
    pub extenders: BTreeMap<String, Object<SchedulerExtenderSpec>>,
    /// PromotionPolicies (at most one: what promotes into this environment).
    pub promotion_policies: BTreeMap<String, Object<PromotionPolicySpec>>,
    /// RolloutPolicies (at most one is valid: see [`crate::rollout`]).
    pub rollout_policies: BTreeMap<String, Object<RolloutPolicySpec>>,
}

fn insert_unique<S>(
    map: &mut BTreeMap<String, Object<S>>,
    kind: Kind,
    object: Object<S>,
    diagnostics: &mut Diagnostics,
) {
    match map.get(object.name()) {
        Some(first) => diagnostics.push(
            Diagnostic::error(
                Code::DuplicateName,
                format!("another {kind} of this name is defined at {}", first.origin),
            )
            .at(&object.origin)
            .on(kind, object.name()),
        ),
        None => {
            map.insert(object.meta.name.clone(), object);
        }
    }
}

impl Namespace {
    /// An empty namespace for environment `name`.
    pub fn new(name: impl Into<String>) -> Namespace {
        Namespace {
            name: name.into(),
            ..Namespace::default()
        }
    }

    /// Adds the objects one Flux Kustomization applies: labels them as Flux does, checks
    /// names and labels as the Kubernetes API server would, and rejects duplicate names.
    pub fn apply(&mut self, by: &Kustomization, objects: Vec<AnyObject>, diagnostics: &mut Diagnostics) {
        let kustomization = by.name(&self.name);
        for mut object in objects {
            if !valid_metadata(&object, diagnostics) {
                continue;
            }
            let meta = object.meta_mut();
            meta.labels
                .insert(labels::FLUX_NAME.to_owned(), kustomization.clone());
            meta.labels
                .insert(labels::FLUX_NAMESPACE.to_owned(), labels::FLUX_SYSTEM.to_owned());
            let kind = object.kind();
            match object {
                AnyObject::ClusterType(o) => insert_unique(&mut self.cluster_types, kind, o, diagnostics),
                AnyObject::Template(o) => insert_unique(&mut self.templates, kind, o, diagnostics),
                AnyObject::WorkloadRegistration(o) => {
                    insert_unique(&mut self.registrations, kind, o, diagnostics)
                }
                AnyObject::Workload(o) => {
                    let registration = match by {
                        Kustomization::Workload(r) => Some(r.clone()),
                        _ => None,
                    };
                    match self.workloads.get(o.name()) {
                        Some(first) => diagnostics.push(
                            Diagnostic::error(
                                Code::DuplicateName,
                                format!(
                                    "another Workload of this name is defined at {}",
                                    first.object.origin
                                ),
                            )
                            .at(&o.origin)
                            .on(kind, o.name()),
                        ),
                        None => {
                            self.workloads.insert(
                                o.meta.name.clone(),
                                DeliveredWorkload {
                                    object: o,
                                    registration,
                                },
                            );
                        }
                    }
                }
                AnyObject::DeploymentTarget(o) => {
                    insert_unique(&mut self.deployment_targets, kind, o, diagnostics)
                }
                AnyObject::SchedulingPolicy(o) => insert_unique(&mut self.policies, kind, o, diagnostics),
                AnyObject::Environment(o) => insert_unique(&mut self.environments, kind, o, diagnostics),
                AnyObject::GitOpsRepo(o) => insert_unique(&mut self.gitops_repos, kind, o, diagnostics),
                AnyObject::BaseRepo(o) => insert_unique(&mut self.base_repos, kind, o, diagnostics),
                AnyObject::ConfigSchema(o) => insert_unique(&mut self.config_schemas, kind, o, diagnostics),
                AnyObject::ConfigMap(o) => insert_unique(&mut self.config_maps, kind, o, diagnostics),
                AnyObject::SchedulerExtender(o) => insert_unique(&mut self.extenders, kind, o, diagnostics),
                AnyObject::PromotionPolicy(o) => {
                    if let Some(first) = self.promotion_policies.keys().find(|n| *n != o.name()) {
                        diagnostics.push(
                            Diagnostic::error(
                                Code::InvalidPromotionPolicy,
                                format!(
                                    "a second PromotionPolicy in environment {}: an environment has at most one \
                                     (the first is {first:?})",
                                    self.name
                                ),
                            )
                            .at(&o.origin)
                            .on(kind, o.name()),
                        );
                    } else {
                        insert_unique(&mut self.promotion_policies, kind, o, diagnostics)
                    }
                }
                AnyObject::RolloutPolicy(o) => {
                    insert_unique(&mut self.rollout_policies, kind, o, diagnostics)
                }
            }
        }
    }

    /// Reports workload sources that do not line up with the WorkloadRegistrations: a
    /// registration without a source tree is an error (none of its Workloads can be loaded,
    /// and their folders would be deleted from the output); a tree that no registration names
    /// is a warning (its Workloads are ignored, as in the original, which never applies it). Both are silent in the
    /// original, where they only show as deployment targets that never appear.
    pub fn check_workload_sources(
        &self,
        workloads: &BTreeMap<String, SourceTree>,
        diagnostics: &mut Diagnostics,
    ) {
        for (name, registration) in &self.registrations {
            if !workloads.contains_key(name) {
                diagnostics.push(
                    Diagnostic::error(
                        Code::WorkloadsMissing,
                        format!("no workload files for this registration (expected in workloads/{name}/); none of its Workloads could be loaded"),
                    )
                    .at(&registration.origin)
                    .on(Kind::WorkloadRegistration, name)
                    .in_registration(name),
                );
            }
        }
        for (name, tree) in workloads {
            if !self.registrations.contains_key(name) {
                let known: Vec<&str> = self.registrations.keys().map(String::as_str).collect();
                let known = if known.is_empty() {
                    "there are none".to_owned()
                } else {
                    format!("there are {}", known.join(", "))
                };
                diagnostics.push(
                    Diagnostic::warning(
                        Code::WorkloadsUnregistered,
                        format!(
                            "no WorkloadRegistration is named {name:?} ({known}), so the Workloads in this folder are ignored"
                        ),
                    )
                    .at(&Origin::new(tree.label(), 0)),
                );
            }
        }
    }

    /// The BaseRepo that pins the promoted main commit: the one named `main`.
    pub fn promoted_base(&self) -> Option<&Object<BaseRepoSpec>> {
        self.base_repos.get("main")
    }
}

/// `parent.key`, or `parent["key"]` when the key is not a plain word (`data["a.b"]`).
fn key_path(parent: &str, key: &str) -> String {
    if !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        format!("{parent}.{key}")
    } else {
        format!("{parent}[{key:?}]")
    }
}

/// Checks the name and labels; reports and returns false if the object must be dropped.
fn valid_metadata(object: &AnyObject, diagnostics: &mut Diagnostics) -> bool {
    let meta = object.meta();
    let (kind, origin) = (object.kind(), object.origin());
    let mut ok = true;
    let name_error = if meta.name.is_empty() {
        Some("required field is missing".to_owned())
    } else if kind == Kind::Environment {
        // An environment is a namespace (its Flux objects and everything it holds live there).
        dns_label_error(&meta.name)
            .map(|e| format!("an Environment's name is the name of its namespace, which {e}"))
    } else {
        // Names become folder names of the GitOps tree: this also rejects `..` and `/`.
        dns_subdomain_error(&meta.name)
    };
    if let Some(e) = name_error {
        diagnostics.push(
            Diagnostic::error(Code::InvalidName, e)
                .at(origin)
                .on(kind, &meta.name)
                .field("metadata.name"),
        );
        ok = false;
    }
    if let AnyObject::ConfigMap(config_map) = object {
        for key in config_map.spec.data.keys() {
            if let Some(e) = config_map_key_error(key) {
                diagnostics.push(
                    Diagnostic::error(Code::InvalidConfigKey, e)
                        .at(origin)
                        .on(kind, &meta.name)
                        .field(key_path("data", key)),
                );
                ok = false;
            }
        }
    }
    for (key, value) in &meta.labels {
        for e in [label_key_error(key), label_value_error(value)]
            .into_iter()
            .flatten()
        {
            diagnostics.push(
                Diagnostic::error(Code::InvalidLabel, e)
                    .at(origin)
                    .on(kind, &meta.name)
                    .field(format!("metadata.labels.{key}")),
            );
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster_type(name: &str, line: u32) -> AnyObject {
        AnyObject::ClusterType(Object::new(
            name,
            ClusterTypeSpec::default(),
            Origin::new("dev/ct.yaml", line),
        ))
    }

    #[test]
    fn flux_labels_are_added_per_kustomization() {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        ns.apply(
            &Kustomization::Environment,
            vec![cluster_type("large", 1)],
            &mut d,
        );
        let w = Object::new(
            "hw",
            WorkloadSpec::default(),
            Origin::new("workloads/hw/w.yaml", 1),
        );
        ns.apply(
            &Kustomization::Workload("helloworld".into()),
            vec![AnyObject::Workload(w)],
            &mut d,
        );
        assert!(d.is_empty());
        assert_eq!(ns.cluster_types["large"].labels()[labels::FLUX_NAME], "dev");
        let hw = &ns.workloads["hw"];
        assert_eq!(hw.object.labels()[labels::FLUX_NAME], "dev-helloworld");
        assert_eq!(hw.object.labels()[labels::FLUX_NAMESPACE], "flux-system");
        assert_eq!(hw.registration.as_deref(), Some("helloworld"));
    }

    #[test]
    fn a_registration_without_workloads_is_an_error_and_an_unregistered_folder_a_warning() {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        let registration = |name: &str| {
            AnyObject::WorkloadRegistration(Object::new(
                name,
                WorkloadRegistrationSpec::default(),
                Origin::new("main/r.yaml", 1),
            ))
        };
        ns.apply(
            &Kustomization::Base("main".into()),
            vec![registration("app"), registration("lost")],
            &mut d,
        );
        let trees: BTreeMap<String, SourceTree> = ["app", "orphan"]
            .into_iter()
            .map(|n| (n.to_owned(), SourceTree::new(format!("workloads/{n}"), vec![])))
            .collect();
        ns.check_workload_sources(&trees, &mut d);
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "error[workloads-missing]: main/r.yaml:1: WorkloadRegistration \"lost\": no workload files for \
                 this registration (expected in workloads/lost/); none of its Workloads could be loaded",
                "warning[workloads-unregistered]: workloads/orphan: no WorkloadRegistration is named \"orphan\" \
                 (there are app, lost), so the Workloads in this folder are ignored",
            ]
        );
    }

    #[test]
    fn rejects_duplicates_and_bad_names() {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        ns.apply(
            &Kustomization::Environment,
            vec![
                cluster_type("large", 1),
                cluster_type("large", 9),
                cluster_type("../x", 3),
            ],
            &mut d,
        );
        assert_eq!(ns.cluster_types.len(), 1);
        let shown = d.to_string();
        assert!(shown.contains("duplicate-name"), "{shown}");
        assert!(shown.contains("defined at dev/ct.yaml:1"), "{shown}");
        assert!(shown.contains("invalid-name"), "{shown}");
    }
}
