//! One environment, from its control plane to its GitOps tree delivered: the driver behind
//! every front end (`render`, `validate`, `plan`, `diff`, `explain`, `sync`, `serve`, the
//! operator).
//!
//! [`run`] is how an environment is rendered and delivered, in one function: load and
//! schedule, merge config and fingerprint, skip what the [`Sink`] already holds (its
//! [`RenderMemo`]), render the rest handing each package to the sink, check config
//! conflicts, group the failures as the original reports them ([`Failure`]), isolate a
//! failing workload ([`Isolation`]), and let the sink deliver. Front ends differ only in the
//! [`Request`] (where the control plane comes from) and the sink (a folder, GitOps
//! branches, the operator's publisher, memory). `explain` needs only the first step,
//! [`schedule`].
//!
//! A request can also give some cluster types the content of other inputs (another
//! control-plane commit) and keep others' folders as the sink has them
//! ([`Request::rendering_from`], [`Request::keeping`]): one delivery in which some cluster
//! types move to new content and the others stay, as a progressive rollout needs.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};
use kalypso_api::Kind;
use kalypso_template::Engine;
use rayon::prelude::*;

use crate::config::ConfigData;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::explain::conflicts;
use kalypso_api::ConfigMapData;

use crate::model::{Namespace, Object};
use crate::pipeline::{
    AssignmentFailure, AssignmentRecord, Choice, Inputs, Rendered, ScheduledEnvironment, load_namespace,
    prepare,
};
use crate::placement::{CurrentAssignment, ExtenderClient, NoExtenders, PlacementInput};
pub mod guard;
pub mod sink;

use crate::tree::{KeptFolders, RepoContent};
use crate::warnings;
pub use guard::{DeletionGuard, DeletionLimit, MassDeletion};
pub use sink::{Collect, InMemory, NoMemo, RenderMemo, Sink, Writer};

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

/// A step of a run, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Loading the control plane and scheduling.
    Scheduling,
    /// Merging configs and fingerprinting the assignments.
    Preparing,
    /// Asking the sink's memo which assignments it holds.
    CheckingMemo,
    /// Rendering this many assignments.
    Rendering {
        /// Assignments to render.
        assignments: usize,
    },
    /// Config conflicts, failures and isolation.
    Finishing,
    /// The sink delivers.
    Delivering,
}

/// What a front end wants to know while a run goes (a progress display, timings).
pub trait Observer: Sync {
    /// A new step starts.
    fn stage(&self, stage: Stage) {
        let _ = stage;
    }

    /// One assignment was rendered (called from the rendering threads).
    fn rendered(&self) {}
}

/// An observer that wants to know nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// What a front end gives a run besides the control plane and the sink.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    /// The template engine (its Sprig version is a setting, checked when the front end
    /// starts).
    pub engine: &'a Engine,
    /// Makes the calls to scheduler extenders.
    pub extenders: &'a dyn ExtenderClient,
    /// The cluster types decided by OCM Placements, by policy name.
    pub decisions: &'a BTreeMap<String, BTreeSet<String>>,
    /// What an error blocks.
    pub isolation: Isolation,
    /// Told about each step.
    pub observer: &'a dyn Observer,
    /// Holds a delivery that would remove too many of the deployment-target folders the
    /// sink has ([`guard`]); `None`: no guard (commands that only write a local folder or
    /// look at the result).
    pub mass_deletion: Option<DeletionGuard>,
}

impl std::fmt::Debug for RunContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("decisions", self.decisions)
            .field("isolation", &self.isolation)
            .field("mass_deletion", &self.mass_deletion)
            .finish_non_exhaustive()
    }
}

static NO_DECISIONS: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();

impl<'a> RunContext<'a> {
    /// A context with no extenders, no OCM decisions, errors that block the environment,
    /// nobody watching, and no mass-deletion guard.
    pub fn new(engine: &'a Engine) -> RunContext<'a> {
        RunContext {
            engine,
            extenders: &NoExtenders,
            decisions: &NO_DECISIONS,
            isolation: Isolation::Environment,
            observer: &Quiet,
            mass_deletion: None,
        }
    }
}

/// The control plane of an environment, as a run reads it.
#[derive(Debug)]
pub enum Input<'a> {
    /// Source trees (folders, git commits), loaded into the environment's namespace as Flux
    /// would apply them.
    Trees(&'a Inputs),
    /// A namespace already loaded (the operator's, from the cluster).
    Namespace(Box<Namespace>),
    /// Source trees whose namespace was already loaded from them ([`Loaded::from_trees`]),
    /// so that a front end that had to read the namespace first does not parse them twice.
    Loaded(&'a Inputs, Box<Loaded>),
}

/// An environment's namespace loaded from its source trees, with the diagnostics of the
/// load: what a run starts from, read ahead by a front end that must know the environment
/// before it asks for a run (its RolloutPolicy decides which cluster types a sync renders).
#[derive(Debug)]
pub struct Loaded {
    /// The namespace.
    pub namespace: Namespace,
    /// What loading it found.
    pub diagnostics: Diagnostics,
}

impl Loaded {
    /// Loads environment `name` from `inputs`, as a run does.
    pub fn from_trees(name: &str, inputs: &Inputs) -> Loaded {
        let mut diagnostics = Diagnostics::new();
        let namespace = load_namespace(name, inputs, &mut diagnostics);
        Loaded {
            namespace,
            diagnostics,
        }
    }
}

/// What a run renders: an environment's control plane and, per cluster type, where its
/// content comes from. By default every cluster type is rendered from the one input.
#[derive(Debug)]
pub struct Request<'a> {
    name: String,
    input: Input<'a>,
    /// Cluster types rendered from other inputs (the first entry naming one wins).
    others: Vec<(Input<'a>, BTreeSet<String>)>,
    /// Cluster types whose folders the sink keeps as they are.
    keep: BTreeSet<String>,
}

impl<'a> Request<'a> {
    /// Environment `name` of `inputs`.
    pub fn new(name: &str, inputs: &'a Inputs) -> Request<'a> {
        Request {
            name: name.to_owned(),
            input: Input::Trees(inputs),
            others: Vec::new(),
            keep: BTreeSet::new(),
        }
    }

    /// Environment `name` of `inputs`, whose namespace `loaded` was loaded from them
    /// ([`Loaded::from_trees`]): the same run as [`Request::new`]'s, without loading again.
    pub fn preloaded(name: &str, inputs: &'a Inputs, loaded: Loaded) -> Request<'a> {
        Request {
            name: name.to_owned(),
            input: Input::Loaded(inputs, Box::new(loaded)),
            others: Vec::new(),
            keep: BTreeSet::new(),
        }
    }

    /// The environment of a namespace already loaded.
    pub fn loaded(namespace: Namespace) -> Request<'a> {
        Request {
            name: namespace.name.clone(),
            input: Input::Namespace(Box::new(namespace)),
            others: Vec::new(),
            keep: BTreeSet::new(),
        }
    }

    /// Renders `cluster_types` from `input` instead (the same environment at another
    /// control-plane commit, say): the rest of the environment is rendered from the
    /// request's own input and delivered together with them. A cluster type `input` does not
    /// have gets no folder.
    pub fn rendering_from(mut self, cluster_types: BTreeSet<String>, input: Input<'a>) -> Request<'a> {
        self.others.push((input, cluster_types));
        self
    }

    /// Keeps the folders of `cluster_types` exactly as the sink has them: nothing is rendered,
    /// written or deleted there (whatever the inputs say of them).
    pub fn keeping(mut self, cluster_types: impl IntoIterator<Item = String>) -> Request<'a> {
        self.keep.extend(cluster_types);
        self
    }

    /// The environment's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each input with the cluster types it renders, the request's own first.
    fn versions(self) -> (String, Vec<(Input<'a>, Selection)>, BTreeSet<String>) {
        let mut taken = self.keep.clone();
        let mut versions = Vec::with_capacity(1 + self.others.len());
        let mut others = Vec::with_capacity(self.others.len());
        for (input, cluster_types) in self.others {
            let own: BTreeSet<String> = cluster_types.difference(&taken).cloned().collect();
            taken.extend(own.iter().cloned());
            others.push((input, Selection::Only(own)));
        }
        versions.push((self.input, Selection::AllBut(taken)));
        versions.extend(others);
        (self.name, versions, self.keep)
    }
}

/// The cluster types one version of a request renders.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Selection {
    /// Every cluster type but these.
    AllBut(BTreeSet<String>),
    /// Only these.
    Only(BTreeSet<String>),
}

impl Selection {
    fn contains(&self, cluster_type: &str) -> bool {
        match self {
            Selection::AllBut(others) => !others.contains(cluster_type),
            Selection::Only(these) => these.contains(cluster_type),
        }
    }

    fn is_all(&self) -> bool {
        matches!(self, Selection::AllBut(others) if others.is_empty())
    }
}

/// Renders the environment `request` names and hands it to `sink`; returns the run (its
/// diagnostics, failures and content, whatever the sink did) and what the sink's delivery
/// did. This is how every front end renders and delivers an environment.
pub fn run<S: Sink + ?Sized>(
    request: Request<'_>,
    context: &RunContext<'_>,
    sink: &mut S,
) -> (Run, Result<S::Delivered, S::Error>) {
    let observer = context.observer;
    let (name, versions, keep) = request.versions();

    // 1. Load and schedule each version of the environment (one, unless the request gives
    //    cluster types other inputs). Steady placement asks the sink where targets are now,
    //    once, and only if a policy places.
    observer.stage(Stage::Scheduling);
    let current_cell: OnceCell<CurrentAssignment> = OnceCell::new();
    let scheduled: Vec<Scheduled<'_>> = {
        let sink: &S = sink;
        let current = || current_cell.get_or_init(|| sink.current_assignment()).clone();
        versions
            .into_iter()
            .map(|(input, selection)| Scheduled::new(&name, input, selection, context, &current))
            .collect()
    };

    // 2. The sink learns which cluster types get content, before anything is rendered.
    let cluster_types: BTreeSet<String> = scheduled
        .iter()
        .flat_map(|s| {
            s.environment
                .namespace
                .cluster_types
                .keys()
                .filter(|ct| s.selection.contains(ct))
                .cloned()
        })
        .collect();
    sink.begin(&cluster_types);

    // 3. Configs merged and every assignment fingerprinted; the assignments whose files the
    //    sink holds (its memo) are skipped, the rest rendered in parallel, each package handed
    //    to the sink as soon as it is rendered; then the config conflicts, the failures and
    //    what an error blocks.
    let runs: Vec<(Run, Selection)> = scheduled.into_iter().map(|s| s.render(context, &*sink)).collect();

    // 4. One content: each cluster type's from its version, the kept ones untouched.
    observer.stage(Stage::Finishing);
    let mut run = compose(runs, keep);

    // 5. A content that removes too many of the folders the sink has now is held.
    if let Some(guard) = context.mass_deletion
        && !run.blocked
    {
        let current = current_cell.get_or_init(|| sink.current_assignment());
        guard_deletions(&mut run, &name, current, guard);
    }

    // 6. The sink delivers the content, or reports why there is none.
    observer.stage(Stage::Delivering);
    let delivered = sink.deliver(&mut run);
    (run, delivered)
}

/// Blocks `run` (an environment error, reported as a failure of the environment) when its
/// content removes more of the `current` folders than `guard` allows; a deletion a person
/// allowed is a warning.
fn guard_deletions(run: &mut Run, environment: &str, current: &CurrentAssignment, guard: DeletionGuard) {
    let Some(mut found) = guard::check(current, &run.rendered.content, guard.limit) else {
        return;
    };
    found.held = !guard.allowed;
    let message = found.message(guard.how_to_allow);
    if found.held {
        let error = Diagnostic::error(Code::MassDeletion, message).on(Kind::Environment, environment);
        run.failures.push(Failure {
            assignment: None,
            message: error.to_string(),
        });
        run.diagnostics.push(error);
        run.blocked = true;
    } else {
        run.diagnostics
            .push(Diagnostic::warning(Code::MassDeletion, message).on(Kind::Environment, environment));
    }
    run.mass_deletion = Some(found);
}

/// One version of an environment, loaded and scheduled.
struct Scheduled<'a> {
    environment: ScheduledEnvironment,
    diagnostics: Diagnostics,
    selection: Selection,
    /// The source trees, to point late diagnostics at their files (none for a namespace
    /// loaded from the cluster).
    trees: Option<&'a Inputs>,
}

impl<'a> Scheduled<'a> {
    fn new(
        name: &str,
        input: Input<'a>,
        selection: Selection,
        context: &RunContext<'_>,
        current: &dyn Fn() -> CurrentAssignment,
    ) -> Scheduled<'a> {
        let mut diagnostics = Diagnostics::new();
        let (namespace, trees) = match input {
            Input::Trees(inputs) => (load_namespace(name, inputs, &mut diagnostics), Some(inputs)),
            Input::Namespace(namespace) => (*namespace, None),
            Input::Loaded(inputs, loaded) => {
                let Loaded {
                    namespace,
                    diagnostics: found,
                } = *loaded;
                diagnostics = found;
                (namespace, Some(inputs))
            }
        };
        let environment = schedule_loaded(namespace, context, current, &mut diagnostics);
        Scheduled {
            environment,
            diagnostics,
            selection,
            trees,
        }
    }

    /// Prepares, renders what the sink does not hold and finishes the run of this version.
    fn render<S: Sink + ?Sized>(self, context: &RunContext<'_>, sink: &S) -> (Run, Selection) {
        let Scheduled {
            environment,
            mut diagnostics,
            selection,
            trees,
        } = self;
        let observer = context.observer;
        observer.stage(Stage::Preparing);
        // The warnings and the preparation only read the environment: side by side (the
        // warnings' single pass over the assignments is a fifth of a run that renders
        // little), their diagnostics in the order of a warning pass followed by `prepare`.
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

        observer.stage(Stage::CheckingMemo);
        let (memo, writer) = (sink.memo(), sink.writer());
        let choices: Vec<Choice> = prepared
            .jobs()
            .par_iter()
            .map(|job| {
                let a = job.assignment;
                if !selection.contains(&a.cluster_type) {
                    Choice::Excluded
                } else if memo.holds(&a.cluster_type, &a.deployment_target, job.fingerprint) {
                    Choice::Held
                } else {
                    Choice::Render
                }
            })
            .collect();
        let assignments = choices.iter().filter(|c| **c == Choice::Render).count();
        observer.stage(Stage::Rendering { assignments });
        let rendered = prepared.render(context.engine, &mut diagnostics, &choices, |job, package| {
            observer.rendered();
            match writer {
                Some(writer) => {
                    writer.write(job.assignment, job.fingerprint, &package);
                    None
                }
                None => Some(package),
            }
        });
        drop(prepared);

        let scheduled = environment
            .schedule
            .iter()
            .filter(|a| selection.contains(&a.cluster_type))
            .count();
        let mut run = finish(environment, rendered, diagnostics, context.isolation);
        run.assignments = scheduled;
        if let Some(inputs) = trees {
            inputs.place_fields(&mut run.diagnostics);
        }
        (run, selection)
    }
}

/// The runs of a request's versions as one: each cluster type's content from the version
/// that renders it, the cluster types kept held as they are.
fn compose(mut runs: Vec<(Run, Selection)>, keep: BTreeSet<String>) -> Run {
    let (mut run, selection) = runs.remove(0);
    if runs.is_empty() && keep.is_empty() && selection.is_all() {
        return run;
    }
    restrict(&mut run, &selection);
    for (other, selection) in runs {
        let mut other = other;
        restrict(&mut other, &selection);
        let (into, from) = (&mut run.rendered, other.rendered);
        into.content.cluster_types.extend(from.content.cluster_types);
        into.content.packages.extend(from.content.packages);
        into.content.delivered.extend(from.content.delivered);
        into.content.kept.extend(from.content.kept);
        into.records.extend(from.records);
        into.failures.extend(from.failures);
        into.renders += from.renders;
        run.diagnostics.extend(other.diagnostics);
        run.failures.extend(other.failures);
        run.isolated.extend(other.isolated);
        run.assignments += other.assignments;
        run.blocked |= other.blocked;
    }
    let rendered = &mut run.rendered;
    // In tree order, as the records of one version are.
    rendered.records.sort_by(|a, b| {
        let (a, b) = (&a.assignment, &b.assignment);
        (&a.cluster_type, &a.deployment_target).cmp(&(&b.cluster_type, &b.deployment_target))
    });
    rendered.failures.sort_by(|a, b| {
        (&a.cluster_type, &a.deployment_target).cmp(&(&b.cluster_type, &b.deployment_target))
    });
    rendered.content.held = keep;
    run
}

/// Limits a version's content to the cluster types it renders (its packages and records
/// already are): the cluster types it writes, and the folders its isolation keeps.
fn restrict(run: &mut Run, selection: &Selection) {
    let content = &mut run.rendered.content;
    content.cluster_types.retain(|ct| selection.contains(ct));
    for kept in &mut content.kept {
        kept.cluster_types = Some(content.cluster_types.clone());
    }
}

/// Loads environment `name` from `inputs` and schedules it, with the warnings about what
/// has no effect: the first step of every run, and all that `explain` needs (`current`: the
/// current assignment, asked for only when a policy places). Diagnostics point at their
/// fields' lines and columns.
pub fn schedule(
    name: &str,
    inputs: &Inputs,
    context: &RunContext<'_>,
    current: &dyn Fn() -> CurrentAssignment,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    let namespace = load_namespace(name, inputs, diagnostics);
    let environment = schedule_loaded(namespace, context, current, diagnostics);
    warnings::warn(&environment, diagnostics);
    inputs.place_fields(diagnostics);
    environment
}

/// Schedules a loaded namespace (no warnings).
fn schedule_loaded(
    namespace: Namespace,
    context: &RunContext<'_>,
    current: &dyn Fn() -> CurrentAssignment,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    // The RolloutPolicy is checked with the environment it applies to (its errors block it).
    crate::rollout::waves(&namespace, diagnostics);
    if namespace.policies.values().any(|p| p.spec.has_placement()) {
        let current = current();
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

/// The result of a run.
#[derive(Debug)]
pub struct Run {
    /// The scheduled environment (of the request's own input). A sink may take it out once
    /// it is no longer needed, to free memory before delivering.
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
    /// Assignments rendered by this run (the others were held by the sink).
    pub rendered_now: usize,
    /// The deployment-target folders this run's content removes, when they are over the
    /// mass-deletion limit ([`RunContext::mass_deletion`]): held (the run is blocked), or
    /// allowed by a person.
    pub mass_deletion: Option<MassDeletion>,
    assignments: usize,
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

    /// Whether the mass-deletion guard held the delivery.
    pub fn is_held(&self) -> bool {
        self.mass_deletion.as_ref().is_some_and(|m| m.held)
    }

    /// Assignments scheduled (on the cluster types the run renders).
    pub fn assignments(&self) -> usize {
        self.assignments
    }
}

/// Completes a run: the config-conflict warnings, the failures, and which errors block the
/// environment.
fn finish(
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
    let rendered_now = rendered.renders;
    Run {
        environment,
        rendered,
        diagnostics,
        failures,
        isolated,
        rendered_now,
        mass_deletion: None,
        assignments: 0,
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
    content.kept = vec![KeptFolders {
        claimed: env
            .targets
            .keys()
            .filter(|target| !failing(target))
            .cloned()
            .collect(),
        cluster_types: None,
    }];
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

    /// A run of `inputs` as environment `dev` by a front end that keeps in memory what it
    /// delivered (the operator): the run skips what `memo` holds, the sink fills those
    /// packages in from memory and then remembers this run's.
    fn run_with(inputs: &Inputs, memo: &mut InMemory) -> Run {
        let engine = Engine::new();
        let (run, delivered) = run(Request::new("dev", inputs), &RunContext::new(&engine), memo);
        assert!(delivered.is_ok());
        run
    }

    /// A run of `inputs` as environment `dev` from scratch.
    fn run_fresh(inputs: &Inputs) -> Run {
        run_with(inputs, &mut InMemory::default())
    }

    #[test]
    fn a_run_from_a_namespace_loaded_ahead_is_the_run_from_the_trees() {
        let engine = Engine::new();
        let runs = |inputs: &Inputs| {
            let from_trees = run(
                Request::new("dev", inputs),
                &RunContext::new(&engine),
                &mut InMemory::default(),
            )
            .0;
            let loaded = Loaded::from_trees("dev", inputs);
            let ahead = run(
                Request::preloaded("dev", inputs, loaded),
                &RunContext::new(&engine),
                &mut InMemory::default(),
            )
            .0;
            (from_trees, ahead)
        };
        let (from_trees, ahead) = runs(&example("dev"));
        assert_eq!(from_trees.content().unwrap(), ahead.content().unwrap());
        assert_eq!(from_trees.diagnostics, ahead.diagnostics);
        // What the load finds (a file that does not parse) is reported by the run all the same,
        // at its file.
        let mut broken = example("dev");
        let mut files = broken.environment.files().to_vec();
        files.push(SourceFile::new(
            "broken.yaml",
            b"kind: ClusterType\nmetadata: [\n".to_vec(),
        ));
        broken.environment = SourceTree::new(broken.environment.label(), files);
        let (from_trees, ahead) = runs(&broken);
        assert!(
            from_trees
                .diagnostics
                .iter()
                .any(|d| d.to_string().contains("broken.yaml")),
            "{:?}",
            from_trees.diagnostics
        );
        assert_eq!(from_trees.diagnostics, ahead.diagnostics);
        assert_eq!(from_trees.content(), ahead.content());
    }

    #[test]
    fn a_delivery_that_removes_too_many_folders_is_held_until_allowed() {
        let inputs = example("dev");
        let fresh = run_fresh(&inputs);
        let delivered: Vec<(String, String)> = fresh.content().unwrap().packages.keys().cloned().collect();
        assert!(!delivered.is_empty());
        let engine = Engine::new();
        let guarded = |allowed: bool| RunContext {
            mass_deletion: Some(DeletionGuard {
                allowed,
                ..DeletionGuard::new("run again with --allow-mass-deletion.")
            }),
            ..RunContext::new(&engine)
        };
        let run_against = |folders: &[(String, String)], context: &RunContext<'_>| {
            let current = crate::placement::current_from_folders(
                folders.iter().map(|(ct, dt)| (ct.as_str(), dt.as_str())),
            );
            let current = move || current.clone();
            run(
                Request::new("dev", &inputs),
                context,
                &mut Collect::placed(&current),
            )
            .0
        };

        // The sink has what the content keeps: nothing removed.
        let same = run_against(&delivered, &guarded(false));
        assert!(!same.is_blocked() && same.mass_deletion.is_none());

        // The sink has folders of targets this control plane no longer schedules: every one
        // of them would go.
        let gone: Vec<(String, String)> = (0..12)
            .map(|i| ("large".to_owned(), format!("gone-{i:02}")))
            .collect();
        let held = run_against(&gone, &guarded(false));
        assert!(held.is_blocked() && held.is_held());
        assert!(held.content().is_none());
        let found = held.mass_deletion.as_ref().unwrap();
        assert_eq!((found.removed.len(), found.total), (12, 12));
        let errors: Vec<&Diagnostic> = held.diagnostics.errors().collect();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].code, Code::MassDeletion);
        assert_eq!(errors[0].object, Some((Kind::Environment, "dev".to_owned())));
        assert!(errors[0].message.contains("large/gone-00"), "{}", errors[0]);
        // Reported as a failure of the environment (an issue in pr mode).
        let [failure] = &held.failures[..] else {
            panic!("{:?}", held.failures);
        };
        assert_eq!(failure.assignment, None);
        assert!(
            failure.message.contains("--allow-mass-deletion"),
            "{}",
            failure.message
        );

        // Half of the folders kept: under the default limit.
        let mixed: Vec<(String, String)> = delivered
            .iter()
            .cloned()
            .chain(gone.iter().take(delivered.len()).cloned())
            .collect();
        assert!(!run_against(&mixed, &guarded(false)).is_blocked());

        // Allowed: delivered, with a warning.
        let allowed = run_against(&gone, &guarded(true));
        assert!(!allowed.is_blocked() && !allowed.is_held());
        assert!(allowed.mass_deletion.is_some());
        assert!(
            allowed
                .diagnostics
                .warnings()
                .any(|d| d.code == Code::MassDeletion)
        );

        // No guard (render, plan): nothing is held.
        assert!(!run_against(&gone, &RunContext::new(&engine)).is_blocked());
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
        let mut memo = InMemory::default();
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
        let mut memo = InMemory::default();
        let first = run_with(&inputs, &mut memo);
        let full = run_fresh(&inputs);
        assert_eq!(first.content(), full.content());
        assert!(first.content().is_some_and(|c| !c.packages.is_empty()));
        assert_eq!(memo.len(), first.content().unwrap().packages.len());

        // Unchanged inputs: every package is one delivered before.
        let again = run_with(&inputs, &mut memo);
        assert_eq!(again.content(), full.content());
        assert_eq!(again.rendered_now, 0);
        assert_eq!(first.rendered_now, memo.len());

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
            incremental.rendered_now > 0 && incremental.rendered_now < memo.len(),
            "only the affected assignments are rendered: {} of {}",
            incremental.rendered_now,
            memo.len()
        );
    }

    /// The example's `dev` with one change that reaches every assignment (the environment's
    /// name in its shared config).
    fn example_changed() -> Inputs {
        let inputs = example("dev");
        Inputs {
            environment: edit(
                &inputs.environment,
                "dev-config.yaml",
                "ENVIRONMENT: Dev",
                "ENVIRONMENT: Dev2",
            ),
            ..inputs
        }
    }

    /// The packages of `content` on cluster types `cluster_types` (all: `None`).
    fn packages_on<'c>(
        content: &'c RepoContent,
        cluster_types: Option<&BTreeSet<String>>,
    ) -> BTreeMap<&'c (String, String), &'c Package> {
        content
            .packages
            .iter()
            .filter(|((ct, _), _)| cluster_types.is_none_or(|cts| cts.contains(ct)))
            .collect()
    }

    #[test]
    fn a_request_gives_some_cluster_types_new_content_keeps_the_rest_and_rolls_them_back() {
        let (v1, v2) = (example("dev"), example_changed());
        let (old, new) = (run_fresh(&v1), run_fresh(&v2));
        let (old, new) = (old.content().unwrap(), new.content().unwrap());
        assert!(old.cluster_types.len() > 2);
        assert_eq!(old.cluster_types, new.cluster_types);
        for (key, package) in &new.packages {
            assert_ne!(
                old.packages.get(key),
                Some(package),
                "{key:?}: the change reaches it"
            );
        }
        let kept = "large".to_owned();
        let reached: BTreeSet<String> = new
            .cluster_types
            .iter()
            .filter(|ct| **ct != kept)
            .cloned()
            .collect();
        let engine = Engine::new();
        let context = RunContext::new(&engine);

        // v1 everywhere, then v2 for every cluster type but `large`, whose folders stay.
        let mut memo = InMemory::default();
        run_with(&v1, &mut memo);
        let (wave, _) = run(
            Request::new("dev", &v2).keeping([kept.clone()]),
            &context,
            &mut memo,
        );
        let content = wave.content().unwrap();
        assert_eq!(content.held, BTreeSet::from([kept.clone()]));
        assert_eq!(content.cluster_types, reached);
        assert_eq!(packages_on(content, None), packages_on(new, Some(&reached)));
        assert!(
            wave.rendered
                .records
                .iter()
                .all(|r| r.assignment.cluster_type != kept)
        );
        let on_large = old.packages.keys().filter(|(ct, _)| *ct == kept).count();
        assert!(on_large > 0);
        assert_eq!(wave.assignments(), new.packages.len() - on_large);
        // The update rules keep everything under a held cluster type, README and strays too.
        let rules = crate::tree::Rules::for_content(content);
        assert!(rules.keeps("large/README.md") && rules.keeps("large/anything/at-all.yaml"));
        // The memo kept what `large` had: v2 everywhere renders `large` alone.
        let all = run_with(&v2, &mut memo);
        assert_eq!(all.rendered_now, on_large);
        assert_eq!(all.content(), Some(new));

        // Rolling back: the reached cluster types get v1's content again, `large` stays.
        let (back, _) = run(
            Request::new("dev", &v2)
                .rendering_from(reached.clone(), Input::Trees(&v1))
                .keeping([kept.clone()]),
            &context,
            &mut Collect::default(),
        );
        let content = back.content().unwrap();
        assert_eq!(content.cluster_types, reached);
        assert_eq!(packages_on(content, None), packages_on(old, Some(&reached)));
        assert_eq!(content.held, BTreeSet::from([kept]));
        assert!(
            back.diagnostics.errors().next().is_none(),
            "{:?}",
            back.diagnostics
        );

        // Everything from other inputs is a whole render of them.
        let (other, _) = run(
            Request::new("dev", &v2).rendering_from(old.cluster_types.clone(), Input::Trees(&v1)),
            &context,
            &mut Collect::default(),
        );
        assert_eq!(
            packages_on(other.content().unwrap(), None),
            packages_on(old, None)
        );
        assert_eq!(other.content().unwrap().cluster_types, old.cluster_types);
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
        run(Request::new("dev", inputs), &context, &mut Collect::default()).0
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
        let [kept] = &content.kept[..] else {
            panic!("one group of kept folders: {:?}", content.kept);
        };
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
