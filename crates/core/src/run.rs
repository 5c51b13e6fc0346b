//! One environment, from its sources to the content of its GitOps tree: the driver behind
//! every front end (`render`, `validate`, `plan`, `explain`, `sync`, `serve`, the operator).
//!
//! Front ends differ only in where the sources come from and where the content goes. What
//! happens in between is here, once: load and schedule ([`schedule`]), the warnings about
//! parts of a control plane that have no effect, merge config and render ([`run`], or
//! [`crate::prepare`] and [`finish`] for a front end that streams packages to disk), the
//! config-conflict check, the failures grouped as the original reports them ([`Failure`]),
//! and failure isolation ([`Isolation`]).
//!
//! A long-running process keeps a [`RenderMemo`] per environment: the packages of its last
//! run with the fingerprints of their inputs, so that a change re-renders only the
//! assignments it affects.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use kalypso_api::Kind;
use kalypso_template::Engine;
use rayon::prelude::*;

use crate::config::ConfigData;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::explain::conflicts;
use crate::fingerprint::Fingerprint;
use kalypso_api::ConfigMapData;

use crate::model::{Namespace, Object};
use crate::pipeline::{
    AssignmentFailure, AssignmentRecord, Inputs, Rendered, ScheduledEnvironment, load_namespace, prepare,
};
use crate::placement::{CurrentAssignment, ExtenderClient, NoExtenders, PlacementInput};
use crate::tree::{KeptFolders, RepoContent};
use crate::warnings;

/// What an error blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Any error blocks the whole environment, as one failing assignment blocks the
    /// original's pull request (`render`, `validate`, `plan`).
    #[default]
    Environment,
    /// An error that belongs to one WorkloadRegistration's workloads (its files, its
    /// Workloads, the assignments of their deployment targets) fails only that registration,
    /// as a failing Flux Kustomization of one workload repository does in the original: its
    /// deployment targets keep the folders last delivered, the rest of the environment is
    /// delivered, the failure is reported. Errors of the environment as a whole still block
    /// it (`sync`, `serve`, the operator, `render --keep-going`).
    Registration,
}

/// What a front end gives a run besides the sources.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    /// The template engine.
    pub engine: &'a Engine,
    /// The current assignment, asked for only when a policy has placement fields (`Steady`
    /// keeps targets where they are).
    pub current: &'a dyn Fn() -> CurrentAssignment,
    /// Makes the calls to scheduler extenders.
    pub extenders: &'a dyn ExtenderClient,
    /// The cluster types decided by OCM Placements, by policy name.
    pub decisions: &'a BTreeMap<String, BTreeSet<String>>,
    /// What an error blocks.
    pub isolation: Isolation,
}

impl std::fmt::Debug for RunContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("decisions", self.decisions)
            .field("isolation", &self.isolation)
            .finish_non_exhaustive()
    }
}

static NO_DECISIONS: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();

impl<'a> RunContext<'a> {
    /// A context with nothing placed yet, no extenders, no OCM decisions, and errors that
    /// block the environment.
    pub fn new(engine: &'a Engine) -> RunContext<'a> {
        RunContext {
            engine,
            current: &CurrentAssignment::new,
            extenders: &NoExtenders,
            decisions: &NO_DECISIONS,
            isolation: Isolation::Environment,
        }
    }
}

/// Loads environment `name` from `inputs` and schedules it: the start of every run, and all
/// that `explain` needs. Diagnostics point at their fields' lines and columns.
pub fn schedule(
    name: &str,
    inputs: &Inputs,
    context: &RunContext<'_>,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    let namespace = load_namespace(name, inputs, diagnostics);
    let environment = schedule_namespace(namespace, context, diagnostics);
    inputs.place_fields(diagnostics);
    environment
}

/// Schedules a loaded namespace (the operator loads it from the cluster) and adds the
/// warnings about what has no effect.
pub fn schedule_namespace(
    namespace: Namespace,
    context: &RunContext<'_>,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    let environment = schedule_unwarned(namespace, context, diagnostics);
    warnings::warn(&environment, diagnostics);
    environment
}

/// [`schedule_namespace`] without the warnings.
fn schedule_unwarned(
    namespace: Namespace,
    context: &RunContext<'_>,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    if namespace.policies.values().any(|p| p.spec.has_placement()) {
        let current = (context.current)();
        let input = PlacementInput {
            current: &current,
            extenders: context.extenders,
            decisions: context.decisions,
        };
        ScheduledEnvironment::with_placement(namespace, &input, diagnostics)
    } else {
        ScheduledEnvironment::new(namespace, diagnostics)
    }
}

/// Schedules and renders environment `name`, rendering only the assignments whose
/// fingerprints differ from `memo`'s: the others are listed in the content's
/// [`RepoContent::delivered`], for the front end to take their files from its last delivery.
/// With an empty memo, everything is rendered.
pub fn run(name: &str, inputs: &Inputs, context: &RunContext<'_>, memo: &dyn RenderMemo) -> Run {
    let mut diagnostics = Diagnostics::new();
    // As `schedule`, with the fields placed once, at the end, for every stage's diagnostics.
    let namespace = load_namespace(name, inputs, &mut diagnostics);
    let environment = schedule_unwarned(namespace, context, &mut diagnostics);
    // The warnings and the preparation only read the environment: side by side (the
    // warnings' single pass over the assignments is a fifth of a run that renders little),
    // their diagnostics in the order `schedule_namespace` and `prepare` give them.
    let warn = !diagnostics.has_errors();
    let (warnings, (prepared, prepare_diagnostics)) = rayon::join(
        || {
            if warn {
                warnings::warnings(&environment)
            } else {
                Vec::new()
            }
        },
        || {
            let mut found = Diagnostics::new();
            (prepare(&environment, context.engine, &mut found), found)
        },
    );
    for warning in warnings {
        diagnostics.push(warning);
    }
    diagnostics.extend(prepare_diagnostics);
    let mut rendered = prepared.render(context.engine, &mut diagnostics, |job| {
        let a = job.assignment;
        memo.fingerprint(&a.cluster_type, &a.deployment_target) != Some(job.fingerprint)
    });
    let rendered_now = rendered.content.packages.len();
    let content = &mut rendered.content;
    for record in &rendered.records {
        let a = &record.assignment;
        if memo.fingerprint(&a.cluster_type, &a.deployment_target) == Some(record.fingerprint) {
            let key = (a.cluster_type.clone(), a.deployment_target.clone());
            if !content.packages.contains_key(&key) {
                content.delivered.insert(key);
            }
        }
    }
    let mut run = finish(environment, rendered, diagnostics, context.isolation);
    inputs.place_fields(&mut run.diagnostics);
    run.rendered_now = rendered_now;
    run
}

/// Schedules and renders a loaded namespace in full (the operator's run: its inputs come
/// from the cluster, not from source trees).
pub fn run_namespace(namespace: Namespace, context: &RunContext<'_>) -> Run {
    let mut diagnostics = Diagnostics::new();
    let environment = schedule_namespace(namespace, context, &mut diagnostics);
    let rendered = crate::pipeline::render(&environment, context.engine, &mut diagnostics);
    let rendered_now = rendered.content.packages.len();
    let mut run = finish(environment, rendered, diagnostics, context.isolation);
    run.rendered_now = rendered_now;
    run
}

/// The result of a run.
#[derive(Debug)]
pub struct Run {
    /// The scheduled environment.
    pub environment: ScheduledEnvironment,
    /// The content (packages of the assignments rendered), the records of every assignment
    /// and the failed assignments.
    pub rendered: Rendered,
    /// Every diagnostic, warnings included.
    pub diagnostics: Diagnostics,
    /// The errors, grouped as the original reports them (one per failed assignment, one for
    /// the rest).
    pub failures: Vec<Failure>,
    /// The WorkloadRegistrations whose errors were isolated ([`Isolation::Registration`]).
    pub isolated: BTreeSet<String>,
    /// Assignments rendered by this run (the others were unchanged since the memo's run).
    pub rendered_now: usize,
    blocked: bool,
}

impl Run {
    /// The content to deliver, or `None` when an error blocks the environment.
    pub fn content(&self) -> Option<&RepoContent> {
        (!self.blocked).then_some(&self.rendered.content)
    }

    /// Whether an error blocks the environment.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Records an error found outside the pipeline (the front end's setup) that blocks the
    /// environment.
    pub fn block(&mut self, error: Diagnostic) {
        let line = error.to_string();
        self.diagnostics.push(error);
        self.blocked = true;
        match self.failures.iter_mut().find(|f| f.assignment.is_none()) {
            Some(failure) => {
                failure.message.push('\n');
                failure.message.push_str(&line);
            }
            None => self.failures.push(Failure {
                assignment: None,
                message: line,
            }),
        }
    }

    /// Assignments scheduled.
    pub fn assignments(&self) -> usize {
        self.environment.schedule.iter().count()
    }
}

/// Completes a run whose rendering the front end drove (see [`crate::Prepared::render_with`]):
/// the config-conflict warnings, the failures, and which errors block the environment.
pub fn finish(
    environment: ScheduledEnvironment,
    mut rendered: Rendered,
    mut diagnostics: Diagnostics,
    isolation: Isolation,
) -> Run {
    for warning in conflict_warnings(&rendered.records, &environment.namespace.config_maps) {
        diagnostics.push(warning);
    }
    let failures = if diagnostics.has_errors() {
        let scheduled: Vec<(String, String)> = environment
            .schedule
            .iter()
            .map(|a| (a.deployment_target.clone(), a.cluster_type.clone()))
            .collect();
        failures(&scheduled, &rendered.content, &rendered.failures, &diagnostics)
    } else {
        Vec::new()
    };
    let mut isolated = BTreeSet::new();
    let mut blocked = diagnostics.has_errors();
    if blocked && isolation == Isolation::Registration {
        let scopes: Option<BTreeSet<String>> = diagnostics
            .errors()
            .map(|d| registrations_of(d, &environment, &rendered.failures))
            .collect::<Option<Vec<_>>>()
            .map(|sets| sets.into_iter().flatten().collect());
        if let Some(scopes) = scopes {
            isolate(&environment, &mut rendered.content, &scopes, &mut diagnostics);
            isolated = scopes;
            blocked = false;
        }
    }
    Run {
        environment,
        rendered,
        diagnostics,
        failures,
        isolated,
        rendered_now: 0,
        blocked,
    }
}

/// The WorkloadRegistrations an error belongs to, if it belongs only to them: those of the
/// assignments it fails (an error that reports several assignments, such as a schema rule
/// they break: see [`AssignmentFailure::errors`]), or the one of [`registration_of`].
fn registrations_of(
    d: &Diagnostic,
    env: &ScheduledEnvironment,
    assignment_failures: &[AssignmentFailure],
) -> Option<BTreeSet<String>> {
    let failing: Vec<&AssignmentFailure> = assignment_failures
        .iter()
        .filter(|f| f.errors.contains(d))
        .collect();
    if d.registration.is_none() && !failing.is_empty() {
        return failing
            .iter()
            .map(|f| target_registration(env, &f.deployment_target).map(ToOwned::to_owned))
            .collect();
    }
    registration_of(d, env).map(|r| BTreeSet::from([r.to_owned()]))
}

/// The WorkloadRegistration an error belongs to, if it belongs to one: it was found in the
/// registration's files, or it is about a Workload from them, a deployment target such a
/// Workload unfolds to (and its assignments), or the registration itself.
fn registration_of<'e>(d: &'e Diagnostic, env: &'e ScheduledEnvironment) -> Option<&'e str> {
    if let Some(registration) = &d.registration {
        return Some(registration);
    }
    let ns = &env.namespace;
    let (kind, name) = d.object.as_ref()?;
    match kind {
        Kind::WorkloadRegistration => ns.registrations.get_key_value(name).map(|(k, _)| k.as_str()),
        Kind::Workload => ns.workloads.get(name)?.registration.as_deref(),
        Kind::DeploymentTarget => target_registration(env, name),
        _ => None,
    }
}

/// The registration whose Workload unfolds to deployment target `name` (`None` for a target
/// declared directly on a branch).
fn target_registration<'e>(env: &'e ScheduledEnvironment, name: &str) -> Option<&'e str> {
    let target = env.targets.get(name)?;
    let workload = env.namespace.workloads.get(&target.workload)?;
    (workload.object.origin == target.origin)
        .then_some(workload.registration.as_deref())
        .flatten()
}

/// Takes the packages of `registrations`' deployment targets out of `content` and keeps
/// every existing target folder that no other workload claims (the failing registration's
/// folders, whose names may be unknown when its files do not load).
fn isolate(
    env: &ScheduledEnvironment,
    content: &mut RepoContent,
    registrations: &BTreeSet<String>,
    diagnostics: &mut Diagnostics,
) {
    let failing = |target: &str| target_registration(env, target).is_some_and(|r| registrations.contains(r));
    content.packages.retain(|(_, target), _| !failing(target));
    content.delivered.retain(|(_, target)| !failing(target));
    content.kept = Some(KeptFolders {
        claimed: env
            .targets
            .keys()
            .filter(|target| !failing(target))
            .cloned()
            .collect(),
    });
    for registration in registrations {
        let mut warning = Diagnostic::warning(
            Code::RegistrationIsolated,
            "its workloads failed (see the errors above): their deployment targets keep the folders \
             last delivered, and the rest of the environment is delivered",
        )
        .on(Kind::WorkloadRegistration, registration);
        if let Some(object) = env.namespace.registrations.get(registration) {
            warning = warning.at(&object.origin);
        }
        diagnostics.push(warning);
    }
}

/// A warning per config key that applying ConfigMaps set to different values, naming the
/// ConfigMaps with their files and the assignments it affects; it points at the key in the
/// ConfigMap whose value wins (the last one).
pub fn conflict_warnings(
    records: &[AssignmentRecord],
    config_maps: &BTreeMap<String, Object<ConfigMapData>>,
) -> Vec<Diagnostic> {
    // Assignments with the same merged config share it: each config is checked once, and the
    // assignments are only named (three of them) when there is a conflict.
    let mut by_config: HashMap<*const ConfigData, Vec<usize>> = HashMap::new();
    let mut configs: Vec<&Arc<ConfigData>> = Vec::new();
    for (i, record) in records.iter().enumerate() {
        by_config
            .entry(Arc::as_ptr(&record.config))
            .or_insert_with(|| {
                configs.push(&record.config);
                Vec::new()
            })
            .push(i);
    }
    let per_config: Vec<(usize, Vec<crate::explain::Conflict>)> = configs
        .par_iter()
        .enumerate()
        .map(|(n, config)| (n, conflicts(config)))
        .collect();
    let mut found: BTreeMap<_, Vec<*const ConfigData>> = BTreeMap::new();
    for (n, config_conflicts) in per_config {
        for conflict in config_conflicts {
            found.entry(conflict).or_default().push(Arc::as_ptr(configs[n]));
        }
    }
    // `ct/dt` of record `i`, compared without building the string.
    let name = |i: usize| {
        let a = &records[i].assignment;
        a.cluster_type
            .bytes()
            .chain(std::iter::once(b'/'))
            .chain(a.deployment_target.bytes())
    };
    // The order of `name`, by slices: the byte-wise walk only when one cluster type's name
    // is a prefix of the other's (where the `/` decides).
    let name_order = |i: usize, j: usize| {
        let (a, b) = (&records[i].assignment, &records[j].assignment);
        if a.cluster_type == b.cluster_type {
            return a.deployment_target.cmp(&b.deployment_target);
        }
        let common = a.cluster_type.len().min(b.cluster_type.len());
        match a.cluster_type.as_bytes()[..common].cmp(&b.cluster_type.as_bytes()[..common]) {
            std::cmp::Ordering::Equal => name(i).cmp(name(j)),
            other => other,
        }
    };
    found
        .into_iter()
        .map(|(conflict, with)| {
            let indices = with.iter().flat_map(|config| by_config[config].iter().copied());
            let total = with.iter().map(|config| by_config[config].len()).sum::<usize>();
            let mut first: Vec<usize> = Vec::with_capacity(4);
            for i in indices {
                if first.len() == 3 && name_order(i, first[2]).is_ge() {
                    continue;
                }
                let at = first.partition_point(|&j| name_order(j, i).is_lt());
                if at < 3 {
                    first.insert(at, i);
                    first.truncate(3);
                }
            }
            let shown: Vec<String> = first
                .iter()
                .map(|&i| String::from_utf8_lossy(&name(i).collect::<Vec<u8>>()).into_owned())
                .collect();
            let origin = |(map, _): &(String, String)| config_maps.get(map).map(|m| &m.origin);
            let values: Vec<String> = conflict
                .values
                .iter()
                .zip(&conflict.config_maps)
                .map(|((source, raw), map)| match origin(map) {
                    Some(origin) => format!("{source} ({origin}) gives {raw:?}"),
                    None => format!("{source} gives {raw:?}"),
                })
                .collect();
            let more = if total > 3 {
                format!(" and {} more", total - 3)
            } else {
                String::new()
            };
            let mut warning = Diagnostic::warning(
                Code::ConfigConflict,
                format!(
                    "config key {:?} gets different values from ConfigMaps that apply to the same assignments: {}; \
                     the last one silently wins (assignments: {}{more})",
                    conflict.key,
                    values.join(", "),
                    shown.join(", ")
                ),
            );
            if let Some((last, data_key)) = conflict.config_maps.last()
                && let Some(map) = config_maps.get(last)
            {
                warning = warning
                    .at(&map.origin)
                    .on(Kind::ConfigMap, last.clone())
                    .field(format!("data.{data_key}"));
            }
            warning
        })
        .collect()
}

/// What a front end remembers of an environment's last delivery: the fingerprint of each
/// assignment whose files it still has, by cluster type and deployment target. A run given
/// a memo skips the assignments whose fingerprints it finds there.
pub trait RenderMemo: Sync {
    /// The fingerprint the assignment had when its files were delivered.
    fn fingerprint(&self, cluster_type: &str, target: &str) -> Option<Fingerprint>;
}

/// No memo: a run renders every assignment.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoMemo;

impl RenderMemo for NoMemo {
    fn fingerprint(&self, _: &str, _: &str) -> Option<Fingerprint> {
        None
    }
}

/// One reportable failure: the original opens a GitHub issue per assignment that cannot be
/// rendered; problems that are not about one assignment (a YAML error, a duplicate name)
/// blocked its environment silently, and kalypso reports them in one issue per environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The assignment (deployment target, cluster type), or `None` for a problem of the
    /// environment as a whole.
    pub assignment: Option<(String, String)>,
    /// What went wrong (one diagnostic per line).
    pub message: String,
}

/// Groups the error diagnostics: one failure per scheduled (deployment target, cluster type)
/// that produced no package (with the diagnostics about it: its `assignment` errors, the
/// `config-schema` errors `assignment_failures` lists for it, or else those about its
/// cluster type's templates), and one for the remaining errors. An error that fails several
/// assignments (a schema violation) is in each of their failures.
pub fn failures(
    scheduled: &[(String, String)],
    content: &RepoContent,
    assignment_failures: &[AssignmentFailure],
    diagnostics: &Diagnostics,
) -> Vec<Failure> {
    let errors: Vec<&Diagnostic> = diagnostics.errors().collect();
    if errors.is_empty() {
        return Vec::new();
    }
    let mut used = BTreeSet::new();
    let mut out = Vec::new();
    for (target, cluster_type) in scheduled {
        if content.has_package(&(cluster_type.clone(), target.clone())) {
            continue;
        }
        let reported: Vec<&Diagnostic> = assignment_failures
            .iter()
            .filter(|f| &f.deployment_target == target && &f.cluster_type == cluster_type)
            .flat_map(|f| &f.errors)
            .collect();
        let about_assignment = |d: &Diagnostic| {
            (d.code == Code::Assignment
                && d.object.as_ref() == Some(&(Kind::DeploymentTarget, target.clone()))
                && d.message.contains(&format!("on cluster type {cluster_type:?}")))
                || reported.contains(&d)
        };
        let about_cluster_type =
            |d: &Diagnostic| d.object.as_ref() == Some(&(Kind::ClusterType, cluster_type.clone()));
        let mut picked: Vec<usize> = (0..errors.len())
            .filter(|&i| about_assignment(errors[i]))
            .collect();
        if picked.is_empty() {
            picked = (0..errors.len())
                .filter(|&i| about_cluster_type(errors[i]))
                .collect();
        }
        if picked.is_empty() {
            continue;
        }
        used.extend(picked.iter().copied());
        out.push(Failure {
            assignment: Some((target.clone(), cluster_type.clone())),
            message: picked
                .iter()
                .map(|&i| errors[i].to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    let rest: Vec<String> = (0..errors.len())
        .filter(|i| !used.contains(i))
        .map(|i| errors[i].to_string())
        .collect();
    if !rest.is_empty() {
        out.push(Failure {
            assignment: None,
            message: rest.join("\n"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{SourceFile, SourceTree};
    use crate::tree::Package;
    use std::path::Path;

    /// Every file under `dir` as a source tree.
    fn source_tree(dir: &Path) -> SourceTree {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    let rel = path.strip_prefix(root).unwrap().display().to_string();
                    out.push(SourceFile::new(rel, std::fs::read(&path).unwrap()));
                }
            }
        }
        let mut files = Vec::new();
        walk(dir, dir, &mut files);
        SourceTree::new(dir.display().to_string(), files)
    }

    /// The example control plane's inputs for `env`.
    fn example(env: &str) -> Inputs {
        example_at("examples/control-plane", env)
    }

    /// The inputs of the example control plane at `path` (from the workspace) for `env`.
    fn example_at(path: &str, env: &str) -> Inputs {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
        let workloads = std::fs::read_dir(root.join("workloads"))
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    source_tree(&e.path()),
                )
            })
            .collect();
        Inputs {
            main: source_tree(&root.join("main")),
            environment: source_tree(&root.join(env)),
            workloads,
            ..Inputs::default()
        }
    }

    /// Replaces `from` with `to` in every file of `tree` whose path ends with `file`.
    fn edit(tree: &SourceTree, file: &str, from: &str, to: &str) -> SourceTree {
        let files = tree
            .files()
            .iter()
            .map(|f| {
                let text = String::from_utf8(f.content.to_vec()).unwrap();
                let text = if f.path.ends_with(file) {
                    text.replace(from, to)
                } else {
                    text
                };
                SourceFile::new(f.path.clone(), text.into_bytes())
            })
            .collect();
        SourceTree::new(tree.label(), files)
    }

    /// What a front end keeps between runs: the packages it delivered, with the fingerprints
    /// they were rendered from.
    #[derive(Default)]
    struct Delivered {
        packages: BTreeMap<(String, String), (Fingerprint, Package)>,
    }

    impl RenderMemo for Delivered {
        fn fingerprint(&self, cluster_type: &str, target: &str) -> Option<Fingerprint> {
            let key = (cluster_type.to_owned(), target.to_owned());
            self.packages.get(&key).map(|(f, _)| *f)
        }
    }

    /// A run of `inputs` as environment `dev` by a front end that delivered `delivered`
    /// before: it gives the run their memo, takes the files of the assignments the run did
    /// not render from what it delivered, and then remembers this run's.
    fn run_with(inputs: &Inputs, delivered: &mut Delivered) -> Run {
        let engine = Engine::new();
        let current = crate::placement::current_from_folders(
            delivered
                .packages
                .keys()
                .map(|(ct, dt)| (ct.as_str(), dt.as_str())),
        );
        let current = move || current.clone();
        let context = RunContext {
            current: &current,
            ..RunContext::new(&engine)
        };
        let mut run = run("dev", inputs, &context, &*delivered);
        let content = &mut run.rendered.content;
        for key in std::mem::take(&mut content.delivered) {
            let package = delivered.packages[&key].1.clone();
            content.packages.insert(key, package);
        }
        delivered.packages = run
            .rendered
            .records
            .iter()
            .filter_map(|r| {
                let key = (
                    r.assignment.cluster_type.clone(),
                    r.assignment.deployment_target.clone(),
                );
                let package = content.packages.get(&key)?.clone();
                Some((key, (r.fingerprint, package)))
            })
            .collect();
        run
    }

    /// A run of `inputs` as environment `dev` from scratch.
    fn run_fresh(inputs: &Inputs) -> Run {
        run_with(inputs, &mut Delivered::default())
    }

    #[test]
    fn steady_keeps_targets_where_the_last_pass_placed_them() {
        let on = |outcome: &Run| -> Vec<String> {
            let content = outcome.content().unwrap();
            content
                .packages
                .keys()
                .filter(|(_, dt)| dt == "shop-web-dev")
                .map(|(ct, _)| ct.clone())
                .collect()
        };
        let inputs = example_at("examples/placement", "dev");
        let mut memo = Delivered::default();
        let first = run_with(&inputs, &mut memo);
        assert_eq!(on(&first), ["north-edge", "west-large"]);
        // north-edge loses its capacity, and web no longer balances.
        let environment = edit(
            &inputs.environment,
            "cluster-types.yaml",
            "{region: north, capacity: \"50\"}",
            "{region: north, capacity: \"5\"}",
        );
        let changed = Inputs {
            environment: edit(
                &environment,
                "policies.yaml",
                "    - builtIn: Balance\n      weight: 1\n",
                "",
            ),
            ..example_at("examples/placement", "dev")
        };
        assert_eq!(on(&run_fresh(&changed)), ["east-large", "west-large"]);
        let second = run_with(&changed, &mut memo);
        assert_eq!(
            on(&second),
            ["north-edge", "west-large"],
            "Steady keeps the last pass's placement"
        );
    }

    #[test]
    fn a_memo_re_renders_only_changed_assignments_and_gives_the_full_render() {
        let inputs = example("dev");
        let mut memo = Delivered::default();
        let first = run_with(&inputs, &mut memo);
        let full = run_fresh(&inputs);
        assert_eq!(first.content(), full.content());
        assert!(first.content().is_some_and(|c| !c.packages.is_empty()));
        assert_eq!(memo.packages.len(), first.content().unwrap().packages.len());

        // Unchanged inputs: every package is one delivered before.
        let again = run_with(&inputs, &mut memo);
        assert_eq!(again.content(), full.content());
        assert_eq!(again.rendered_now, 0);
        assert_eq!(first.rendered_now, memo.packages.len());

        // A config change: the result is what a full render of the new inputs gives.
        let config = inputs
            .environment
            .files()
            .iter()
            .find(|f| String::from_utf8_lossy(&f.content).contains("MAX_REPLICAS"))
            .map(|f| f.path.clone())
            .unwrap();
        let changed = Inputs {
            environment: edit(
                &inputs.environment,
                &config,
                "MAX_REPLICAS: \"",
                "MAX_REPLICAS: \"9",
            ),
            ..example("dev")
        };
        let incremental = run_with(&changed, &mut memo);
        let expected = run_fresh(&changed);
        assert_eq!(incremental.content(), expected.content());
        assert_ne!(incremental.content(), full.content(), "the change shows");
        assert!(
            incremental.rendered_now > 0 && incremental.rendered_now < memo.packages.len(),
            "only the affected assignments are rendered: {} of {}",
            incremental.rendered_now,
            memo.packages.len()
        );
    }

    fn error(code: Code, message: &str, object: (Kind, &str)) -> Diagnostic {
        Diagnostic::error(code, message).on(object.0, object.1)
    }

    #[test]
    fn groups_errors_by_assignment_then_environment() {
        let scheduled = vec![
            ("app-dev".to_owned(), "large".to_owned()),
            ("app-dev".to_owned(), "small".to_owned()),
            ("app-qa".to_owned(), "drone".to_owned()),
            ("app-ok".to_owned(), "large".to_owned()),
        ];
        let mut content = RepoContent::default();
        content
            .packages
            .insert(("large".into(), "app-ok".into()), Package::default());
        let mut diags = Diagnostics::new();
        diags.push(error(
            Code::Assignment,
            "cannot generate manifests on cluster type \"small\": config data validation failed",
            (Kind::DeploymentTarget, "app-dev"),
        ));
        diags.push(error(
            Code::TemplateMissing,
            "Template \"x\" does not exist",
            (Kind::ClusterType, "drone"),
        ));
        diags.push(error(Code::Yaml, "bad yaml", (Kind::ConfigMap, "c")));
        diags.push(Diagnostic::warning(Code::ConfigConflict, "just a warning"));
        let failures = failures(&scheduled, &content, &[], &diags);
        // (Their issue titles: kalypso_git::issues.)
        let assignments: Vec<Option<(&str, &str)>> = failures
            .iter()
            .map(|f| f.assignment.as_ref().map(|(dt, ct)| (dt.as_str(), ct.as_str())))
            .collect();
        assert_eq!(
            assignments,
            [Some(("app-dev", "small")), Some(("app-qa", "drone")), None]
        );
        assert!(failures[0].message.contains("config data validation failed"));
        assert!(failures[1].message.contains("does not exist"));
        assert!(failures[2].message.contains("bad yaml"));
        assert!(!failures.iter().any(|f| f.message.contains("just a warning")));
        // app-dev on large has no diagnostic of its own and is not reported.
        assert!(assignments.iter().flatten().all(|(_, ct)| *ct != "large"));
    }

    #[test]
    fn a_schema_error_shared_by_assignments_is_in_each_of_their_failures() {
        let scheduled = vec![
            ("app-dev".to_owned(), "large".to_owned()),
            ("app-qa".to_owned(), "large".to_owned()),
            ("app-ok".to_owned(), "large".to_owned()),
        ];
        let mut content = RepoContent::default();
        content
            .packages
            .insert(("large".into(), "app-ok".into()), Package::default());
        let shared = error(
            Code::ConfigSchema,
            "config value /REPLICAS: must be at most 2, found 3 (failing assignments: large/app-dev, large/app-qa)",
            (Kind::ConfigSchema, "replicas"),
        );
        let own = error(
            Code::ConfigSchema,
            "config value /OWNER: is required but missing (failing assignment: large/app-qa)",
            (Kind::Workload, "app"),
        );
        let failed = |target: &str, errors: Vec<Diagnostic>| AssignmentFailure {
            cluster_type: "large".to_owned(),
            deployment_target: target.to_owned(),
            message: String::new(),
            errors,
        };
        let assignment_failures = [
            failed("app-dev", vec![shared.clone()]),
            failed("app-qa", vec![shared.clone(), own.clone()]),
        ];
        let mut diags = Diagnostics::new();
        diags.push(shared.clone());
        diags.push(own.clone());
        diags.push(error(Code::Yaml, "bad yaml", (Kind::ConfigMap, "c")));
        let failures = failures(&scheduled, &content, &assignment_failures, &diags);
        assert_eq!(failures.len(), 3, "{failures:?}");
        assert_eq!(failures[0].assignment, Some(("app-dev".into(), "large".into())));
        assert_eq!(failures[0].message, shared.to_string());
        assert_eq!(failures[1].assignment, Some(("app-qa".into(), "large".into())));
        assert_eq!(failures[1].message, format!("{shared}\n{own}"));
        // The schema errors are not repeated in the environment's failure.
        assert_eq!(failures[2].assignment, None);
        assert!(failures[2].message.contains("bad yaml"));
        assert!(!failures[2].message.contains("config-schema"));
    }

    #[test]
    fn a_schema_rule_broken_by_two_registrations_is_one_error_that_isolates_both() {
        let mut inputs = example("dev");
        let mut files = inputs.main.files().to_vec();
        files.push(SourceFile::new(
            "schema.yaml",
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ConfigSchema\nmetadata:\n  name: owner\n\
             spec:\n  schema: '{\"required\": [\"OWNER\"]}'\n"
                .as_bytes()
                .to_vec(),
        ));
        inputs.main = SourceTree::new(inputs.main.label(), files);

        let blocked = run_isolated(&inputs, Isolation::Environment);
        assert!(blocked.is_blocked());
        let errors: Vec<&Diagnostic> = blocked.diagnostics.errors().collect();
        assert_eq!(errors.len(), 1, "one error for the rule: {errors:?}");
        assert_eq!(errors[0].code, Code::ConfigSchema);
        assert!(
            errors[0].message.contains("/OWNER: is required but missing"),
            "{}",
            errors[0]
        );
        // Each failing assignment is its own failure (an issue), each with the shared error.
        let failing = blocked.rendered.failures.len();
        assert!(failing > 1);
        assert_eq!(
            blocked.failures.iter().filter(|f| f.assignment.is_some()).count(),
            failing
        );
        assert!(
            blocked
                .failures
                .iter()
                .all(|f| f.message == errors[0].to_string())
        );

        let isolated = run_isolated(&inputs, Isolation::Registration);
        assert!(!isolated.is_blocked(), "{:?}", isolated.diagnostics);
        assert_eq!(
            isolated.isolated,
            BTreeSet::from(["hello-world-app".to_owned(), "platform-svc".to_owned()])
        );
        assert!(isolated.content().unwrap().packages.is_empty());
    }

    /// The example's inputs with registration `platform-svc`'s workload files broken.
    fn broken_platform_svc() -> Inputs {
        let mut inputs = example("dev");
        let tree = &inputs.workloads["platform-svc"];
        let broken = edit(
            tree,
            "observability.yaml",
            "kind: Workload",
            "kind: Workload\nspec: [unclosed",
        );
        inputs.workloads.insert("platform-svc".to_owned(), broken);
        inputs
    }

    fn run_isolated(inputs: &Inputs, isolation: Isolation) -> Run {
        let engine = Engine::new();
        let context = RunContext {
            isolation,
            ..RunContext::new(&engine)
        };
        run("dev", inputs, &context, &NoMemo)
    }

    #[test]
    fn a_failing_registration_blocks_the_environment_unless_isolated() {
        let healthy = run_fresh(&example("dev"));
        let healthy = healthy.content().unwrap();
        let inputs = broken_platform_svc();

        let blocked = run_isolated(&inputs, Isolation::Environment);
        assert!(blocked.is_blocked());
        assert!(blocked.content().is_none());
        assert!(blocked.isolated.is_empty());

        let isolated = run_isolated(&inputs, Isolation::Registration);
        assert!(!isolated.is_blocked(), "{:?}", isolated.diagnostics);
        assert_eq!(isolated.isolated, BTreeSet::from(["platform-svc".to_owned()]));
        let errors: Vec<&Diagnostic> = isolated.diagnostics.errors().collect();
        assert!(!errors.is_empty());
        assert!(
            errors
                .iter()
                .all(|d| d.registration.as_deref() == Some("platform-svc"))
        );
        assert!(
            isolated
                .diagnostics
                .warnings()
                .any(|d| d.code == Code::RegistrationIsolated
                    && d.object == Some((Kind::WorkloadRegistration, "platform-svc".to_owned())))
        );
        // The failure is reported, as a sync reports it (an issue in `pr` mode).
        assert!(!isolated.failures.is_empty());

        // The other registration's packages are delivered as a healthy run gives them.
        let content = isolated.content().unwrap();
        assert!(!content.packages.is_empty());
        for (key, package) in &content.packages {
            assert_eq!(healthy.packages.get(key), Some(package), "{key:?}");
        }
        // The failing registration's targets are not claimed: their folders stay.
        let kept = content.kept.as_ref().unwrap();
        let missing: Vec<&(String, String)> = healthy
            .packages
            .keys()
            .filter(|k| !content.packages.contains_key(*k))
            .collect();
        assert!(!missing.is_empty());
        for (ct, dt) in missing {
            assert!(!kept.claimed.contains(dt));
            let rules = crate::tree::Rules::for_content(content);
            assert!(rules.keeps(&format!("{ct}/{dt}/reconciler.yaml")), "{ct}/{dt}");
        }
        // A healthy target's folder on a cluster type it left is deleted as usual.
        let (ct, dt) = content.packages.keys().next().unwrap();
        let rules = crate::tree::Rules::for_content(content);
        assert!(kept.claimed.contains(dt));
        let elsewhere = content
            .cluster_types
            .iter()
            .find(|other| *other != ct && !content.packages.contains_key(&((*other).clone(), dt.clone())));
        if let Some(other) = elsewhere {
            assert!(!rules.keeps(&format!("{other}/{dt}/reconciler.yaml")));
        }
    }

    #[test]
    fn an_error_of_the_environment_blocks_even_when_isolated() {
        let mut inputs = broken_platform_svc();
        let tree = &inputs.environment;
        let file = tree
            .files()
            .iter()
            .find(|f| String::from_utf8_lossy(&f.content).contains("kind: ClusterType"))
            .map(|f| f.path.clone())
            .unwrap();
        inputs.environment = edit(
            tree,
            &file,
            "kind: ClusterType",
            "kind: ClusterType\nspec: [unclosed",
        );
        let run = run_isolated(&inputs, Isolation::Registration);
        assert!(run.is_blocked());
        assert!(run.isolated.is_empty());
        assert!(run.content().is_none());
    }
}
