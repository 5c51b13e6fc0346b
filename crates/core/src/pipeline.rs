//! The pipeline, stage by stage: load the trees of one environment into its namespace,
//! unfold workloads, schedule, merge config, validate, render, and lay out the GitOps tree.
//!
//! The CLI, the git daemon and the operator all drive these same functions; they differ
//! only in where the inputs come from and where the tree goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kalypso_api::Kind;
use kalypso_template::Engine;
use rayon::prelude::*;

use crate::config::{ConfigData, ConfigKey, ConfigSources, labels_match};
use crate::diag::{Diagnostic, Diagnostics};
use crate::load::load_tree;
use crate::model::{Delivery, Namespace};
use crate::render::{
    ClusterTypeTemplates, RenderFailure, TemplateSet, cluster_type_templates, render_package, template_data,
};
use crate::schedule::{Assignment, Schedule, schedule};
use crate::schema::SchemaCache;
use crate::source::SourceTree;
use crate::tree::{Package, RepoContent};
use crate::unfold::{DeploymentTarget, deployment_targets};

/// The source trees of one environment: the promoted main branch, the environment branch,
/// and the folder of each WorkloadRegistration (keyed by registration name; a registration
/// without a tree yields nothing, as when its repository is unreachable).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// The control plane's main branch (templates, workload registrations).
    pub main: SourceTree,
    /// The environment branch (cluster types, configs, policies, GitOpsRepo, BaseRepo).
    pub environment: SourceTree,
    /// Workload folders by registration name.
    pub workloads: BTreeMap<String, SourceTree>,
}

/// Loads the objects Flux would apply into namespace `environment`.
pub fn load_namespace(environment: &str, inputs: &Inputs, diagnostics: &mut Diagnostics) -> Namespace {
    let env_objects = load_tree(&inputs.environment, diagnostics);
    let main_objects = load_tree(&inputs.main, diagnostics);
    let mut ns = Namespace::new(environment);
    ns.apply(&Delivery::Environment, env_objects, diagnostics);
    // Main-branch content arrives through the BaseRepo named `main` (the original's only
    // promoted one); its Kustomization is `<env>-main`.
    ns.apply(&Delivery::Base("main".to_owned()), main_objects, diagnostics);
    let registrations: Vec<String> = ns.registrations.keys().cloned().collect();
    for registration in registrations {
        if let Some(tree) = inputs.workloads.get(&registration) {
            let objects = load_tree(tree, diagnostics);
            ns.apply(&Delivery::Workload(registration), objects, diagnostics);
        }
    }
    ns
}

/// An environment after scheduling: what `render`, `plan` and `explain` start from.
#[derive(Debug)]
pub struct Environment {
    /// The namespace's objects.
    pub namespace: Namespace,
    /// The deployment targets, by name.
    pub targets: BTreeMap<String, DeploymentTarget>,
    /// The assignments and compiled policies.
    pub schedule: Schedule,
    /// The config sources, prepared.
    pub config: ConfigSources,
}

impl Environment {
    /// Unfolds workloads, schedules, and prepares config sources.
    pub fn new(namespace: Namespace, diagnostics: &mut Diagnostics) -> Environment {
        let targets = deployment_targets(&namespace, diagnostics);
        let schedule = schedule(&namespace, &targets, diagnostics);
        let config = ConfigSources::new(&namespace, kalypso_template::config_value);
        Environment {
            namespace,
            targets,
            schedule,
            config,
        }
    }

    /// The environment's name.
    pub fn name(&self) -> &str {
        &self.namespace.name
    }
}

/// One rendered assignment with the facts behind it.
#[derive(Clone, Debug)]
pub struct AssignmentRecord {
    /// The assignment (with the policies that chose it).
    pub assignment: Assignment,
    /// The merged config it was rendered with.
    pub config: Arc<ConfigData>,
}

/// The result of rendering an environment.
#[derive(Clone, Debug, Default)]
pub struct Rendered {
    /// What goes into the GitOps tree.
    pub content: RepoContent,
    /// Every assignment, in tree order, with its config and provenance.
    pub records: Vec<AssignmentRecord>,
}

/// Renders every assignment of `env`. Problems go to `diagnostics`; if any is an error the
/// content must not be delivered (the original blocks the whole environment too).
pub fn render(env: &Environment, engine: &Engine, diagnostics: &mut Diagnostics) -> Rendered {
    let ns = &env.namespace;
    let templates = TemplateSet::compile(ns, engine);

    // Templates of the cluster types that have assignments; broken templates that no
    // assignment uses are only worth a warning.
    let mut used_templates = std::collections::BTreeSet::new();
    let mut per_cluster_type: BTreeMap<&str, Option<ClusterTypeTemplates<'_>>> = BTreeMap::new();
    for assignment in env.schedule.iter() {
        if per_cluster_type.contains_key(assignment.cluster_type.as_str()) {
            continue;
        }
        let Some(ct) = ns.cluster_types.get(&assignment.cluster_type) else {
            continue;
        };
        used_templates.extend([
            &ct.spec.reconciler,
            &ct.spec.namespace_service,
            &ct.spec.config_type,
        ]);
        per_cluster_type.insert(ct.name(), cluster_type_templates(ct, &templates, diagnostics));
    }
    for name in ns.templates.keys().filter(|n| !used_templates.contains(n)) {
        if let Some(Err(errors)) = templates.get(name) {
            for e in errors {
                let mut w = e.clone();
                w.severity = crate::diag::Severity::Warning;
                w.message = format!("{} (no assignment uses this template)", w.message);
                diagnostics.push(w);
            }
        }
    }

    // Distinct configurations, merged once each.
    let assignments: Vec<&Assignment> = env.schedule.iter().collect();
    let keys: Vec<ConfigKey> = assignments
        .iter()
        .map(|a| {
            env.config
                .key_for(&a.cluster_type, &env.targets[&a.deployment_target])
        })
        .collect();
    let mut representatives: HashMap<&ConfigKey, &Assignment> = HashMap::new();
    for (key, a) in keys.iter().zip(&assignments) {
        representatives.entry(key).or_insert(a);
    }
    let distinct: Vec<(&ConfigKey, &Assignment)> = representatives.into_iter().collect();
    let configs: HashMap<&ConfigKey, Arc<ConfigData>> = distinct
        .par_iter()
        .map(|(key, a)| {
            let ct = &ns.cluster_types[&a.cluster_type];
            let target = &env.targets[&a.deployment_target];
            (*key, Arc::new(env.config.merge_for(ct, target)))
        })
        .collect();

    let schemas = SchemaCache::new();
    let results: Vec<Result<Option<Package>, String>> = assignments
        .par_iter()
        .zip(keys.par_iter())
        .map(|(a, key)| {
            let Some(Some(templates)) = per_cluster_type.get(a.cluster_type.as_str()) else {
                return Ok(None);
            };
            let ct = &ns.cluster_types[&a.cluster_type];
            let target = &env.targets[&a.deployment_target];
            let config = &configs[key];
            let schema_texts: Vec<&str> = ns
                .config_schemas
                .values()
                .filter(|s| labels_match(s.labels(), ct, target))
                .map(|s| s.spec.schema.as_str())
                .chain(target.spec.config_schemas.iter().map(String::as_str))
                .collect();
            schemas.validate(config, &schema_texts)?;
            let data = template_data(target, &a.cluster_type, config);
            render_package(engine, templates, &data)
                .map(Some)
                .map_err(|f: RenderFailure| {
                    format!(
                        "{}: Template {:?} spec.manifests[{}]: {}",
                        f.origin, f.template, f.manifest, f.message
                    )
                })
        })
        .collect();

    let mut rendered = Rendered::default();
    for ((a, key), result) in assignments.iter().zip(&keys).zip(results) {
        match result {
            Ok(Some(package)) => {
                rendered
                    .content
                    .packages
                    .insert((a.cluster_type.clone(), a.deployment_target.clone()), package);
                rendered.records.push(AssignmentRecord {
                    assignment: (*a).clone(),
                    config: configs[key].clone(),
                });
            }
            Ok(None) => {}
            Err(message) => {
                let target = &env.targets[&a.deployment_target];
                diagnostics.push(
                    Diagnostic::error(
                        "assignment",
                        format!(
                            "cannot generate manifests for deployment target {:?} on cluster type {:?}: {message}",
                            a.deployment_target, a.cluster_type
                        ),
                    )
                    .at(&target.origin)
                    .on(Kind::DeploymentTarget, &a.deployment_target),
                );
            }
        }
    }
    rendered.content.cluster_types = ns.cluster_types.keys().cloned().collect();
    rendered.content.promoted_commit = ns
        .promoted_base()
        .map(|b| b.spec.commit.clone())
        .filter(|c| !c.is_empty());
    rendered
}
