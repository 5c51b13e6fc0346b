//! The pipeline, stage by stage: load the trees of one environment into its namespace,
//! unfold workloads, schedule, merge config, validate, render, and lay out the GitOps tree.
//!
//! Front ends do not call these stages one by one: [`crate::run::run`] drives them for
//! every front end, which differ only in where the inputs come from and where the tree goes.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use kalypso_api::Kind;
use kalypso_gotmpl::{Map, Str};
use kalypso_template::Engine;
use rayon::prelude::*;

use crate::config::{ConfigData, ConfigSources, TargetKey, labels_match};
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::fingerprint::{FORMAT, Fingerprint, Hasher};
use crate::load::load_tree;
use crate::model::{AnyObject, Kustomization, Namespace};
use crate::placement::PlacementInput;
use crate::render::{
    ClusterTypeTemplates, RenderFailure, TargetValues, TemplateSet, cluster_type_templates, render_package,
};
use crate::schedule::{Assignment, Schedule, schedule_with};
use crate::schema::{Problem, SchemaCache};
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
    /// The trees of the environment's other BaseRepos (not `main`), by BaseRepo name: each
    /// brings its repo, branch and path at its pinned commit into the environment, as the
    /// original's per-BaseRepo Flux Kustomization `<env>-<name>` does. Empty for folders.
    pub bases: BTreeMap<String, SourceTree>,
    /// Problems the reader of the sources found (reported with the environment's).
    pub notes: Vec<Diagnostic>,
}

impl Inputs {
    /// Points the diagnostics found after loading (a name, a selector, a placement field...)
    /// at their fields' lines and columns in the files their objects were read from.
    pub fn place_fields(&self, diagnostics: &mut Diagnostics) {
        if !diagnostics.iter().any(crate::position::needs_place) {
            return;
        }
        let trees = [&self.main, &self.environment]
            .into_iter()
            .chain(self.workloads.values())
            .chain(self.bases.values());
        let mut texts: HashMap<String, &str> = HashMap::new();
        for tree in trees {
            for file in tree.files() {
                if let Ok(text) = std::str::from_utf8(&file.content) {
                    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
                    texts.insert(tree.display_path(&file.path), text);
                }
            }
        }
        let mut positions: HashMap<&str, crate::position::FilePositions<'_>> = HashMap::new();
        for d in diagnostics.iter_mut() {
            if !crate::position::needs_place(d) {
                continue;
            }
            let Some(file) = d.origin.as_ref().map(|o| o.file.clone()) else {
                continue;
            };
            let Some((shown, text)) = texts.get_key_value(&*file) else {
                continue;
            };
            positions
                .entry(shown.as_str())
                .or_insert_with(|| crate::position::FilePositions::new(text))
                .place(d);
        }
    }
}

/// Loads the objects Flux would apply into namespace `environment`.
pub fn load_namespace(environment: &str, inputs: &Inputs, diagnostics: &mut Diagnostics) -> Namespace {
    let env_objects = load_tree(&inputs.environment, diagnostics);
    let main_objects = load_tree(&inputs.main, diagnostics);
    let mut ns = Namespace::new(environment);
    diagnostics.extend_from(&inputs.notes);
    ns.apply(&Kustomization::Environment, env_objects, diagnostics);
    // Main-branch content arrives through the BaseRepo named `main` (the original's only
    // promoted one); its Kustomization is `<env>-main`.
    ns.apply(&Kustomization::Base("main".to_owned()), main_objects, diagnostics);
    for (name, tree) in &inputs.bases {
        let objects = load_tree(tree, diagnostics);
        ns.apply(&Kustomization::Base(name.clone()), objects, diagnostics);
    }
    // Workload folders are small and many: they are parsed in parallel, applied in order.
    let registrations: Vec<&String> = ns.registrations.keys().collect();
    let workloads: Vec<(String, Vec<AnyObject>, Diagnostics)> = registrations
        .par_iter()
        .filter_map(|registration| {
            let tree = inputs.workloads.get(*registration)?;
            let mut found = Diagnostics::new();
            let objects = load_tree(tree, &mut found);
            Some(((*registration).clone(), objects, found))
        })
        .collect();
    for (registration, objects, found) in workloads {
        diagnostics.extend(found.in_registration(&registration));
        let mut applied = Diagnostics::new();
        ns.apply(
            &Kustomization::Workload(registration.clone()),
            objects,
            &mut applied,
        );
        diagnostics.extend(applied.in_registration(&registration));
    }
    ns.check_workload_sources(&inputs.workloads, diagnostics);
    ns
}

/// An environment after scheduling: what `render`, `plan` and `explain` start from.
#[derive(Debug, Default)]
pub struct ScheduledEnvironment {
    /// The namespace's objects.
    pub namespace: Namespace,
    /// The deployment targets, by name.
    pub targets: BTreeMap<String, DeploymentTarget>,
    /// The assignments and compiled policies.
    pub schedule: Schedule,
    /// The config sources, prepared.
    pub config: ConfigSources,
}

impl ScheduledEnvironment {
    /// Unfolds workloads, schedules, and prepares config sources.
    pub fn new(namespace: Namespace, diagnostics: &mut Diagnostics) -> ScheduledEnvironment {
        ScheduledEnvironment::with_placement(namespace, &PlacementInput::default(), diagnostics)
    }

    /// [`ScheduledEnvironment::new`] with what placement needs besides the control plane (the current
    /// assignment for `Steady`, the extender client).
    pub fn with_placement(
        namespace: Namespace,
        input: &PlacementInput<'_>,
        diagnostics: &mut Diagnostics,
    ) -> ScheduledEnvironment {
        let targets = deployment_targets(&namespace, diagnostics);
        let schedule = schedule_with(&namespace, &targets, input, diagnostics);
        let config = ConfigSources::new(&namespace, kalypso_template::config_value);
        ScheduledEnvironment {
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
    /// The fingerprint of everything its output depends on.
    pub fingerprint: Fingerprint,
}

/// An assignment that could not be rendered (its template failed, or its config violates a
/// schema). Any failure blocks the environment, as in the original.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignmentFailure {
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
    /// What went wrong (Go's message for template errors, the schema violations for config).
    pub message: String,
    /// The errors that report it (a `config-schema` error may report several assignments).
    pub errors: Vec<Diagnostic>,
}

/// The result of rendering an environment.
#[derive(Clone, Debug, Default)]
pub struct Rendered {
    /// What goes into the GitOps tree (packages of the assignments that were rendered).
    pub content: RepoContent,
    /// Every assignment rendered or held by the sink, in tree order, with its config,
    /// provenance and fingerprint.
    pub records: Vec<AssignmentRecord>,
    /// The assignments that failed, in tree order.
    pub failures: Vec<AssignmentFailure>,
    /// How many assignments were rendered (the others the sink held, or failed).
    pub renders: usize,
}

/// One assignment with everything it depends on resolved, ready to render.
#[derive(Debug)]
pub struct Job<'e> {
    /// The assignment.
    pub assignment: &'e Assignment,
    /// Its namespace (`<environment>-<cluster type>-<target>`, the templates' `.Namespace`).
    namespace: Str,
    /// The fingerprint of everything its output depends on.
    pub fingerprint: Fingerprint,
    cluster_type: Str,
    target: Arc<TargetValues>,
    templates: Option<ClusterTypeTemplates>,
    config: Arc<ConfigData>,
    /// The config as a frozen map, shared by the renders whose templates cannot change it.
    shared_config: Map,
    schemas: Vec<&'e str>,
}

/// Where a config schema was declared: a ConfigSchema object, or a field of the Workload or
/// DeploymentTarget that declares a target's own schemas (`spec.configSchemas[0]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SchemaSource {
    kind: Kind,
    name: String,
    origin: crate::diag::Origin,
    field: Option<String>,
}

impl SchemaSource {
    /// `d`, about this schema.
    fn attach(&self, d: Diagnostic) -> Diagnostic {
        let d = d.at(&self.origin).on(self.kind, &self.name);
        match &self.field {
            Some(field) => d.field(field),
            None => d,
        }
    }
}

/// Where each of an assignment's schemas was declared, in the order of [`Job`]'s `schemas`:
/// the matching ConfigSchemas, then the target's own. Only asked for when a config fails
/// (it is not needed to render).
fn schema_sources(env: &ScheduledEnvironment, a: &Assignment) -> Vec<SchemaSource> {
    let ns = &env.namespace;
    let ct = &ns.cluster_types[&a.cluster_type];
    let target = &env.targets[&a.deployment_target];
    ns.config_schemas
        .values()
        .filter(|s| labels_match(s.labels(), ct, target))
        .map(|s| SchemaSource {
            kind: Kind::ConfigSchema,
            name: s.meta.name.clone(),
            origin: s.origin.clone(),
            field: None,
        })
        .chain(target_schema_sources(ns, target))
        .collect()
}

/// Where each of `target`'s own schemas (`spec.configSchemas`: its own, then its Workload's)
/// was declared.
fn target_schema_sources(ns: &Namespace, target: &DeploymentTarget) -> Vec<SchemaSource> {
    let count = target.spec.config_schemas.len();
    let declared = |kind: Kind, name: &str, fields: Vec<String>| {
        fields
            .into_iter()
            .map(|field| SchemaSource {
                kind,
                name: name.to_owned(),
                origin: target.origin.clone(),
                field: Some(field),
            })
            .collect()
    };
    // A target derived from a Workload: the target's entry, then the Workload's list.
    if let Some(workload) = ns.workloads.get(&target.workload)
        && workload.object.origin == target.origin
        && let Some((i, detail)) = workload
            .object
            .spec
            .deployment_targets
            .iter()
            .enumerate()
            .find(|(_, d)| format!("{}-{}", target.workload, d.name) == target.name)
    {
        let own = detail.spec.config_schemas.len();
        let fields = (0..count)
            .map(|j| {
                if j < own {
                    format!("spec.deploymentTargets[{i}].configSchemas[{j}]")
                } else {
                    format!("spec.configSchemas[{}]", j - own)
                }
            })
            .collect();
        return declared(Kind::Workload, &target.workload, fields);
    }
    let fields = (0..count).map(|j| format!("spec.configSchemas[{j}]")).collect();
    declared(Kind::DeploymentTarget, &target.name, fields)
}

/// An environment resolved for rendering: templates compiled, configs merged, every
/// assignment fingerprinted. Rendering it fully or partially is then pure work.
#[derive(Debug)]
pub struct Prepared<'e> {
    env: &'e ScheduledEnvironment,
    jobs: Vec<Job<'e>>,
}

/// What identifies a distinct configuration: the cluster type and the class of the target
/// (targets of equal [`TargetKey`] share one).
type ConfigKey<'a> = (&'a str, usize);

/// Resolves everything the assignments of `env` need. Missing or broken templates are
/// reported here (once per cluster type).
pub(crate) fn prepare<'e>(
    env: &'e ScheduledEnvironment,
    engine: &Engine,
    diagnostics: &mut Diagnostics,
) -> Prepared<'e> {
    let ns = &env.namespace;
    if let Some(warning) = kalypso_template::sprig_warning(engine.sprig()) {
        diagnostics.push(Diagnostic::warning(Code::SprigVersion, warning));
    }
    let templates = TemplateSet::compile(ns, engine);
    let template_ids: HashMap<&str, Fingerprint> = ns
        .templates
        .iter()
        .map(|(name, t)| (name.as_str(), Hasher::new().template(name, &t.spec).finish()))
        .collect();

    // Templates of the cluster types that have assignments; broken templates that no
    // assignment uses are only worth a warning.
    let mut used_templates = std::collections::BTreeSet::new();
    let mut per_cluster_type: HashMap<&str, (Option<ClusterTypeTemplates>, Fingerprint, Str)> =
        HashMap::new();
    for assignment in env.schedule.iter() {
        if per_cluster_type.contains_key(assignment.cluster_type.as_str()) {
            continue;
        }
        let Some(ct) = ns.cluster_types.get(&assignment.cluster_type) else {
            continue;
        };
        let names = [
            &ct.spec.reconciler,
            &ct.spec.namespace_service,
            &ct.spec.config_type,
        ];
        used_templates.extend(names);
        let mut id = Hasher::new();
        id.str(engine.sprig().as_str());
        for name in names {
            id.str(name)
                .fingerprint(template_ids.get(name.as_str()).copied().unwrap_or_default());
        }
        per_cluster_type.insert(
            ct.name(),
            (
                cluster_type_templates(ct, &templates, diagnostics),
                id.finish(),
                Str::from(ct.name()),
            ),
        );
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

    // Per-target values, identities and configuration classes (targets of equal
    // `target_key`), once per target.
    let mut target_classes: HashMap<TargetKey<'e>, usize> = HashMap::new();
    let mut targets: HashMap<&str, (Arc<TargetValues>, Fingerprint, usize)> = HashMap::new();
    for a in env.schedule.iter() {
        targets.entry(a.deployment_target.as_str()).or_insert_with(|| {
            let t = &env.targets[&a.deployment_target];
            let id = Hasher::new()
                .str(&t.name)
                .str(&t.workload)
                .str(&t.workspace)
                .str(&t.spec.environment)
                .labels(&t.labels)
                .labels(&t.spec.manifests)
                .strs(t.spec.config_schemas.iter().map(String::as_str))
                .finish();
            let next = target_classes.len();
            let class = *target_classes.entry(env.config.target_key(t)).or_insert(next);
            (Arc::new(TargetValues::new(t)), id, class)
        });
    }

    // Distinct configurations, merged once each: one per cluster type and target class.
    let assignments: Vec<&Assignment> = env.schedule.iter().collect();
    let keys: Vec<ConfigKey<'_>> = assignments
        .iter()
        .map(|a| (a.cluster_type.as_str(), targets[a.deployment_target.as_str()].2))
        .collect();
    let mut representatives: HashMap<&ConfigKey<'_>, &Assignment> = HashMap::new();
    for (key, a) in keys.iter().zip(&assignments) {
        representatives.entry(key).or_insert(a);
    }
    let distinct: Vec<(&ConfigKey<'_>, &Assignment)> = representatives.into_iter().collect();
    let configs: HashMap<&ConfigKey<'_>, (Arc<ConfigData>, Map, Fingerprint)> = distinct
        .par_iter()
        .map(|(key, a)| {
            let ct = &ns.cluster_types[&a.cluster_type];
            let target = &env.targets[&a.deployment_target];
            let config = env.config.merge_for(ct, target);
            let mut id = Hasher::new();
            for (k, v) in &config.values {
                id.str(k).value(v);
            }
            let frozen = config.frozen_map();
            (*key, (Arc::new(config), frozen, id.finish()))
        })
        .collect();

    let jobs: Vec<Job<'e>> = assignments
        .par_iter()
        .zip(&keys)
        .map(|(a, key)| {
            let ct = &ns.cluster_types[&a.cluster_type];
            let target = &env.targets[&a.deployment_target];
            let (templates, templates_id, ct_name) = &per_cluster_type[a.cluster_type.as_str()];
            let (target_values, target_id, _) = &targets[a.deployment_target.as_str()];
            let (config, shared_config, config_id) = &configs[key];
            let schemas: Vec<&str> = ns
                .config_schemas
                .values()
                .filter(|s| labels_match(s.labels(), ct, target))
                .map(|s| s.spec.schema.as_str())
                .chain(target.spec.config_schemas.iter().map(String::as_str))
                .collect();
            let fingerprint = Hasher::new()
                .str(FORMAT)
                .str(env.name())
                .str(&a.cluster_type)
                .fingerprint(*templates_id)
                .fingerprint(*target_id)
                .fingerprint(*config_id)
                .strs(schemas.iter().copied())
                .finish();
            Job {
                assignment: a,
                namespace: Str::from(crate::render::namespace(
                    &target.spec.environment,
                    &a.cluster_type,
                    &a.deployment_target,
                )),
                fingerprint,
                cluster_type: ct_name.clone(),
                target: target_values.clone(),
                templates: templates.clone(),
                config: config.clone(),
                shared_config: shared_config.clone(),
                schemas,
            }
        })
        .collect();

    // Each assignment's namespace (`<environment>-<cluster type>-<target>`, what the
    // templates get as `.Namespace`) must be one Kubernetes accepts.
    for job in &jobs {
        let (a, namespace) = (job.assignment, job.namespace.to_str_lossy());
        if let Some(e) = crate::names::dns_label_error(&namespace) {
            let target = &env.targets[&a.deployment_target];
            diagnostics.push(
                Diagnostic::error(
                    Code::InvalidNamespace,
                    format!(
                        "the namespace {namespace:?} of its assignment to cluster type {:?} \
                         (<environment>-<cluster type>-<deployment target>) {e}",
                        a.cluster_type
                    ),
                )
                .at(&target.origin)
                .on(Kind::DeploymentTarget, &a.deployment_target),
            );
        }
    }
    Prepared { env, jobs }
}

/// The most assignments a rendering thread renders before it hands their packages on
/// ([`Prepared::render`]).
const MAX_RENDER_BATCH: usize = 256;

/// What a run does with one assignment, chosen before rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Render it.
    Render,
    /// The sink holds its files as rendered from the same inputs (its memo,
    /// [`crate::run::RenderMemo`]): it is recorded and listed in
    /// [`RepoContent::delivered`], not rendered.
    Held,
    /// Not this run's to render: its cluster type takes its content from other inputs, or
    /// keeps its folder ([`crate::run::Request`]). Neither rendered nor recorded.
    Excluded,
}

impl<'e> Prepared<'e> {
    /// The assignments, in tree order.
    pub fn jobs(&self) -> &[Job<'e>] {
        &self.jobs
    }

    /// The environment prepared.
    pub fn environment(&self) -> &'e ScheduledEnvironment {
        self.env
    }

    /// Renders the assignments `choices` (one per job, in order) says to render, in
    /// parallel, and records those it renders or the sink holds. Each package is handed to
    /// `take` on the rendering thread once its batch (at most 256 assignments) is rendered
    /// (a sink may write it at once, rather than hold a whole fleet's files in memory); the
    /// packages `take` hands back are kept in `Rendered::content`. Failures go to `diagnostics` and to `Rendered::failures`.
    pub fn render(
        &self,
        engine: &Engine,
        diagnostics: &mut Diagnostics,
        choices: &[Choice],
        take: impl Fn(&Job<'_>, Package) -> Option<Package> + Sync,
    ) -> Rendered {
        let schemas = SchemaCache::new();
        // Bytes rendered by all assignments together, against the render-output limit.
        let max_total = crate::limits::current().render_output;
        let total = std::sync::atomic::AtomicUsize::new(0);
        let renders = std::sync::atomic::AtomicUsize::new(0);
        let render_one = |job: &Job<'_>, choice: &Choice| -> Result<Option<Package>, Failed> {
            let Some(templates) = &job.templates else {
                return Ok(None);
            };
            if *choice != Choice::Render {
                return Ok(None);
            }
            let problems = schemas.check(&job.config, &job.schemas);
            if !problems.is_empty() {
                return Err(Failed::Schema(problems));
            }
            let package = render_package(
                engine,
                templates,
                &job.target,
                &job.cluster_type,
                &job.namespace,
                &job.config,
                &job.shared_config,
            )
            .map_err(|f: RenderFailure| {
                Failed::Other(format!(
                    "{}: Template {:?}: spec.manifests[{}]: {}",
                    f.origin, f.template, f.manifest, f.message
                ))
            })?;
            let size: usize = package.files().map(|(_, blob)| blob.len()).sum();
            let before = total.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
            if before.saturating_add(size) > max_total {
                return Err(Failed::Other(format!(
                    "the manifests of the render exceed the render-output limit ({max_total} bytes) \
                     with this assignment's {size} bytes; {}",
                    crate::limits::hint("render-output")
                )));
            }
            renders.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Some(package))
        };
        // A batch of assignments is rendered before any of its packages is handed to `take`:
        // a sink that writes each package at once makes system calls that push the
        // templates and the data out of the processor's caches, and rendering the next
        // assignment right after them would find them gone (bench/rendercpu.py: batches of
        // 32 to 512 cut the B fleet's user CPU by 15% to 19%).
        // As large as helps (256 renders' packages are a few hundred KiB), but small enough
        // that every thread gets several batches of what is to be rendered (a run that
        // renders a few assignments, one cluster type's, say, holds the others).
        let to_render = choices.iter().filter(|c| **c == Choice::Render).count();
        let batch = (to_render / (rayon::current_num_threads() * 4)).clamp(1, MAX_RENDER_BATCH);
        let results: Vec<Result<Option<Package>, Failed>> = self
            .jobs
            .par_chunks(batch)
            .zip(choices.par_chunks(batch))
            .flat_map_iter(|(jobs, choices)| {
                let packages: Vec<_> = jobs
                    .iter()
                    .zip(choices)
                    .map(|(job, choice)| render_one(job, choice))
                    .collect();
                jobs.iter()
                    .zip(packages)
                    .map(|(job, package)| Ok(package?.and_then(|package| take(job, package))))
                    .collect::<Vec<_>>()
            })
            .collect();

        let env = self.env;
        let ns = &env.namespace;
        let mut schema_errors = SchemaErrors::new(env, &self.jobs, &results);
        let mut rendered = Rendered {
            renders: renders.into_inner(),
            ..Rendered::default()
        };
        // The assignments held by the sink come in tree order: their set is built at once.
        let mut held = Vec::new();
        for (n, ((job, result), choice)) in self.jobs.iter().zip(results).zip(choices).enumerate() {
            let a = job.assignment;
            match result {
                Ok(package) => {
                    if job.templates.is_none() || *choice == Choice::Excluded {
                        continue;
                    }
                    let key = (a.cluster_type.clone(), a.deployment_target.clone());
                    match package {
                        Some(package) => {
                            rendered.content.packages.insert(key, package);
                        }
                        None if *choice == Choice::Held => {
                            held.push(key);
                        }
                        None => {}
                    }
                    rendered.records.push(AssignmentRecord {
                        assignment: a.clone(),
                        config: job.config.clone(),
                        fingerprint: job.fingerprint,
                    });
                }
                Err(Failed::Schema(problems)) => {
                    // Reported once per schema and problem, where the first assignment it
                    // fails comes in tree order.
                    let errors = schema_errors.for_job(n, diagnostics);
                    rendered.failures.push(AssignmentFailure {
                        cluster_type: a.cluster_type.clone(),
                        deployment_target: a.deployment_target.clone(),
                        message: format!(
                            "config data validation failed: {}",
                            problems
                                .iter()
                                .map(|(_, p)| p.to_string())
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                        errors,
                    });
                }
                Err(Failed::Other(message)) => {
                    let target = &env.targets[&a.deployment_target];
                    let error = Diagnostic::error(
                        Code::Assignment,
                        format!(
                            "cannot generate manifests on cluster type {:?}: {message}",
                            a.cluster_type
                        ),
                    )
                    .at(&target.origin)
                    .on(Kind::DeploymentTarget, &a.deployment_target);
                    diagnostics.push(error.clone());
                    rendered.failures.push(AssignmentFailure {
                        cluster_type: a.cluster_type.clone(),
                        deployment_target: a.deployment_target.clone(),
                        message,
                        errors: vec![error],
                    });
                }
            }
        }
        rendered.content.delivered = held.into_iter().collect();
        rendered.content.cluster_types = ns.cluster_types.keys().cloned().collect();
        rendered.content.promoted_commit = ns
            .promoted_base()
            .map(|b| b.spec.commit.clone())
            .filter(|c| !c.is_empty());
        rendered
    }
}

/// Why an assignment could not be rendered.
enum Failed {
    /// Its config has problems with its schemas (index into the job's schemas, problem).
    Schema(Vec<(usize, Problem)>),
    /// A template failed, or a limit was hit.
    Other(String),
}

/// How many assignments an error names before "and N more".
const SHOWN_ASSIGNMENTS: usize = 3;

/// The `config-schema` errors of a render: one per schema and problem, naming the assignments
/// it fails (each assignment's [`AssignmentFailure::errors`] lists those about it, which is
/// also how a run isolates them by registration: [`crate::run::Isolation`]).
struct SchemaErrors {
    /// Each error's key, its assignments (`<cluster type>/<deployment target>`, tree order)
    /// and whether it was reported yet.
    groups: Vec<(SchemaErrorKey, Vec<String>, Option<Diagnostic>)>,
    /// For each failing job (by index), the group of each of its problems.
    of_job: HashMap<usize, Vec<usize>>,
}

type SchemaErrorKey = (SchemaSource, Problem);

impl SchemaErrors {
    fn new(
        env: &ScheduledEnvironment,
        jobs: &[Job<'_>],
        results: &[Result<Option<Package>, Failed>],
    ) -> SchemaErrors {
        let mut errors = SchemaErrors {
            groups: Vec::new(),
            of_job: HashMap::new(),
        };
        let mut index: HashMap<SchemaErrorKey, usize> = HashMap::new();
        for (n, (job, result)) in jobs.iter().zip(results).enumerate() {
            let Err(Failed::Schema(problems)) = result else {
                continue;
            };
            let a = job.assignment;
            let sources = schema_sources(env, a);
            let assignment = format!("{}/{}", a.cluster_type, a.deployment_target);
            let mut groups = Vec::with_capacity(problems.len());
            for (schema, problem) in problems {
                let key = (sources[*schema].clone(), problem.clone());
                let next = errors.groups.len();
                let i = *index.entry(key.clone()).or_insert(next);
                if i == next {
                    errors.groups.push((key, Vec::new(), None));
                }
                let assignments = &mut errors.groups[i].1;
                if assignments.last() != Some(&assignment) {
                    assignments.push(assignment.clone());
                }
                groups.push(i);
            }
            errors.of_job.insert(n, groups);
        }
        errors
    }

    /// The errors about the problems of job `n`, each pushed to `diagnostics` the first time.
    fn for_job(&mut self, n: usize, diagnostics: &mut Diagnostics) -> Vec<Diagnostic> {
        let mut errors: Vec<Diagnostic> = Vec::new();
        for i in self.of_job.get(&n).cloned().unwrap_or_default() {
            let (key, assignments, reported) = &mut self.groups[i];
            let error = reported.get_or_insert_with(|| {
                let shown = assignments[..assignments.len().min(SHOWN_ASSIGNMENTS)].join(", ");
                let more = assignments.len().saturating_sub(SHOWN_ASSIGNMENTS);
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                let what = if assignments.len() == 1 {
                    "assignment"
                } else {
                    "assignments"
                };
                let d = key.0.attach(Diagnostic::error(
                    Code::ConfigSchema,
                    format!("{} (failing {what}: {shown}{more})", key.1),
                ));
                diagnostics.push(d.clone());
                d
            });
            if !errors.contains(error) {
                errors.push(error.clone());
            }
        }
        errors
    }
}
