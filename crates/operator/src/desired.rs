//! What one environment namespace should look like, computed from a [`Snapshot`] without
//! touching the API server.
//!
//! [`desired_state`] runs the shared core pipeline ([`kalypso_core::run`]: unfold, schedule,
//! config, schemas, render) on the namespace's objects and turns its result into the
//! operator's to-do list: the DeploymentTargets to keep (owned by their Workload, as the
//! original keeps them) and the ones to delete, the `Ready` condition of every user-facing
//! object, the repository content to deliver with its hash (or the problems that block it; a
//! failing workload fails alone, see [`kalypso_core::run::Isolation`]), and, when asked for,
//! Assignment and AssignmentPackage objects.
//!
//! It is plain data in, plain data out, so that all of the scheduler's decisions are unit
//! tested here; the controller only applies it. (Named "desired state" rather than "plan": in
//! kalypso a plan is what `kalypso plan` shows, the changes a render would make.)

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference};
use kalypso_api::{
    Assignment, AssignmentPackage, AssignmentPackageSpec, AssignmentSpec, DeploymentTarget, Kind, Labels,
    labels,
};
use kalypso_core::run::{DeletionGuard, DeletionLimit, Failure, InMemory, Isolation, Request, RunContext};
use kalypso_core::tree::RepoContent;
use kalypso_core::{Diagnostic, Diagnostics, ScheduledEnvironment};
use kalypso_template::Engine;
use kube::{Resource, ResourceExt};

use crate::conditions::{Desired, FLUX_RESOURCES_CREATED, ROLLOUT_UNSUPPORTED};
use crate::controller::StatusTarget;
use crate::snapshot::{MissingRegistration, Snapshot, derived_from_workload};

/// Labels on objects the operator creates.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kalypso-scheduler");
/// How many problems a GitOpsRepo's `Ready` message lists before summarising.
const LISTED_PROBLEMS: usize = 10;

/// What the desired should include besides the essentials.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Also produce Assignment and AssignmentPackage objects (the original's internal kinds).
    pub assignments: bool,
    /// The operator keeps no Flux objects (`--source external`): the scheduler gives the
    /// Environment, its WorkloadRegistrations and BaseRepos their `Ready` condition (with
    /// Flux, the sources controller does).
    pub external: bool,
    /// When a delivery that removes deployment targets is held (see
    /// [`kalypso_core::run::guard`]).
    pub mass_deletion: DeletionLimit,
}

/// The annotation on an Environment that allows its next deliveries to remove more
/// deployment targets than the mass-deletion limit (`"true"`; a person removes it again
/// once the removal is delivered).
pub const ALLOW_MASS_DELETION: &str = "scheduler.kalypso.io/allow-mass-deletion";

/// The sentence that ends a held delivery's message in the operator.
pub const HOW_TO_ALLOW_MASS_DELETION: &str = "annotate the Environment with \
     scheduler.kalypso.io/allow-mass-deletion=true (and remove the annotation once delivered).";

/// Whether `environment` carries [`ALLOW_MASS_DELETION`] set to `true`.
pub fn allows_mass_deletion(environment: &kalypso_api::Environment) -> bool {
    environment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALLOW_MASS_DELETION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// The `Ready` condition one object should have.
#[derive(Clone, Debug)]
pub struct ObjectStatus {
    /// The object's kind.
    pub kind: Kind,
    /// The object's name.
    pub name: String,
    /// Where to write (reference, resource, generation for `observedGeneration`).
    pub target: StatusTarget,
    /// The object's current conditions.
    pub current: Vec<Condition>,
    /// The condition it should have.
    pub desired: Desired,
}

/// The GitOps content of the environment, ready to deliver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// What goes into the tree.
    pub content: RepoContent,
    /// Its fingerprint ([`RepoContent::fingerprint`], 32 hex digits), stored in
    /// `GitOpsRepo.status.repoContentHash`.
    pub hash: String,
    /// How many assignments it holds.
    pub assignments: usize,
}

/// Whether the environment can be delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deliverable {
    /// Every object is fine: this is the content.
    Ready(Content),
    /// These problems block delivery (each names its object).
    Blocked(Vec<String>),
    /// The namespace holds a RolloutPolicy, which the Flux and external sources cannot
    /// honour: nothing is delivered (this message says why and what to do), rather than
    /// the whole content reaching every cluster type at once.
    RolloutUnsupported(String),
}

/// Why an environment whose namespace holds the RolloutPolicies `policies` (`namespace/name`)
/// is not delivered by the operator's Flux and external sources, and what to do.
pub fn rollout_unsupported(policies: &[String]) -> String {
    let named = policies
        .iter()
        .map(|p| format!("RolloutPolicy {p}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{named} asks for a progressive rollout, which the operator runs only with --source git --hub URL \
         (the Flux and external sources would deliver every cluster type at once); nothing was delivered. \
         Run the operator with --source git --hub URL, or remove the RolloutPolicy to deliver the \
         environment whole."
    )
}

/// The operator's to-do list for one namespace.
#[derive(Clone, Debug)]
pub struct DesiredState {
    /// The namespace.
    pub namespace: String,
    /// DeploymentTargets derived from Workloads, to create or update.
    pub targets: Vec<DeploymentTarget>,
    /// Names of derived DeploymentTargets no Workload asks for any more.
    pub stale_targets: Vec<String>,
    /// The `Ready` condition of each object.
    pub statuses: Vec<ObjectStatus>,
    /// The content to deliver, or why not.
    pub delivery: Deliverable,
    /// Warnings (not blocking), for logs.
    pub warnings: Vec<String>,
    /// Assignments and their packages (only with [`Options::assignments`]).
    pub assignments: Vec<(Assignment, AssignmentPackage)>,
    /// The errors grouped as the original reports them in GitHub issues (one per failing
    /// assignment, one for the rest); empty when nothing fails.
    pub failures: Vec<Failure>,
    /// Whether the mass-deletion guard held the delivery (see [`ALLOW_MASS_DELETION`]).
    pub held: bool,
}

/// Diagnostics grouped by the object they are about.
#[derive(Default)]
struct ByObject {
    errors: BTreeMap<(Kind, String), Vec<String>>,
    warnings: BTreeMap<(Kind, String), Vec<String>>,
}

fn describe(d: &Diagnostic) -> String {
    match &d.field {
        Some(field) => format!("{field}: {}", d.message),
        None => d.message.clone(),
    }
}

impl ByObject {
    fn new(diagnostics: &Diagnostics) -> ByObject {
        let mut by = ByObject::default();
        for d in diagnostics.iter() {
            let Some(object) = d.object.clone() else { continue };
            let map = if d.is_error() {
                &mut by.errors
            } else {
                &mut by.warnings
            };
            map.entry(object).or_default().push(describe(d));
        }
        by
    }

    /// `Ready` for an object: failed with its errors, else `ok` with its warnings.
    fn condition(&self, kind: Kind, name: &str, ok_reason: &str, ok_message: String) -> Desired {
        let key = (kind, name.to_owned());
        if let Some(errors) = self.errors.get(&key) {
            return Desired::failed(errors.join("; "));
        }
        let mut message = ok_message;
        if let Some(warnings) = self.warnings.get(&key) {
            if !message.is_empty() {
                message.push_str("; ");
            }
            message.push_str("warning: ");
            message.push_str(&warnings.join("; warning: "));
        }
        Desired::ready(ok_reason, message)
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Computes the desired of `snapshot`'s namespace with the core's driver. `memo` is what the
/// operator keeps of the namespace's last run: the assignments whose inputs did not change
/// are not rendered again (their packages come from it), and `Steady` placement keeps
/// targets where that run placed them (or, before a first run, where `memo` was seeded from
/// the GitOps branch).
pub fn desired_state(
    snapshot: &Snapshot,
    engine: &Engine,
    options: Options,
    memo: &mut InMemory,
) -> DesiredState {
    let namespace = snapshot.namespace.clone();
    let (ns, missing) = snapshot.to_namespace();
    // A failing workload fails alone, as a failing Flux Kustomization of one workload
    // repository does in the original.
    let extenders = kalypso_git::extenders::HttpExtenders::new();
    let context = RunContext {
        extenders: &extenders,
        decisions: &snapshot.placement_decisions,
        isolation: Isolation::Registration,
        mass_deletion: Some(DeletionGuard {
            limit: options.mass_deletion,
            allowed: snapshot.environment.as_deref().is_some_and(allows_mass_deletion),
            how_to_allow: HOW_TO_ALLOW_MASS_DELETION,
        }),
        ..RunContext::new(engine)
    };
    // The memo fills in the packages it held: the content is complete.
    let (run, _) = kalypso_core::run::run(Request::loaded(ns), &context, memo);
    let (env, rendered, diagnostics) = (&run.environment, &run.rendered, &run.diagnostics);
    let by = ByObject::new(diagnostics);

    // Derived deployment targets, owned by their Workload.
    let workloads: BTreeMap<&str, &kalypso_api::Workload> = snapshot
        .workloads
        .iter()
        .map(|w| (w.metadata.name.as_deref().unwrap_or_default(), w.as_ref()))
        .collect();
    let mut targets = Vec::new();
    for target in env.targets.values() {
        let Some(delivered) = env.namespace.workloads.get(&target.workload) else {
            continue;
        };
        if delivered.object.origin != target.origin {
            continue; // declared directly, not derived
        }
        let Some(owner) = workloads
            .get(target.workload.as_str())
            .and_then(|w| w.controller_owner_ref(&()))
        else {
            continue;
        };
        let mut dt = DeploymentTarget::new(&target.name, target.spec.clone());
        dt.metadata.namespace = Some(namespace.clone());
        dt.metadata.labels = Some(target.labels.clone());
        dt.metadata.owner_references = Some(vec![owner]);
        targets.push(dt);
    }
    let wanted: BTreeSet<&str> = targets
        .iter()
        .filter_map(|t| t.metadata.name.as_deref())
        .collect();
    let kept_workloads: BTreeSet<&str> = missing.iter().map(|m| m.workload.as_str()).collect();
    let mut stale_targets: Vec<String> = snapshot
        .deployment_targets
        .iter()
        .filter(|t| {
            derived_from_workload(t).is_some_and(|w| !kept_workloads.contains(w))
                && !wanted.contains(t.name_any().as_str())
        })
        .map(|t| t.name_any())
        .collect();
    stale_targets.sort();

    let mut warnings: Vec<String> = diagnostics.warnings().map(ToString::to_string).collect();
    let unplaced: Vec<&str> = snapshot
        .workloads
        .iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none() && !w.labels().contains_key(labels::FLUX_NAME))
        .map(|w| w.metadata.name.as_deref().unwrap_or_default())
        .collect();
    for workload in &unplaced {
        warnings.push(format!("Workload {workload:?}: {}", no_workspace(&namespace)));
    }

    // Problems: every error blocks delivery, as one failing assignment blocks the
    // original's environment.
    let mut problems: Vec<String> = missing
        .iter()
        .map(|m| {
            format!(
                "Workload {:?}: WorkloadRegistration {:?} not found",
                m.workload, m.registration
            )
        })
        .collect();
    if run.is_blocked() {
        problems.extend(diagnostics.errors().map(ToString::to_string));
    }
    let rollout_policies = snapshot.rollout_policies_in_force();
    let delivery = if !rollout_policies.is_empty() {
        Deliverable::RolloutUnsupported(rollout_unsupported(&rollout_policies))
    } else if problems.is_empty() {
        Deliverable::Ready(Content {
            hash: format!("{:032x}", rendered.content.fingerprint()),
            assignments: rendered.records.len(),
            content: rendered.content.clone(),
        })
    } else {
        Deliverable::Blocked(problems)
    };

    let mut failures = run.failures.clone();
    if !missing.is_empty() && failures.iter().all(|f| f.assignment.is_some()) {
        // Missing registrations are not diagnostics of the core: report them too.
        let message = missing
            .iter()
            .map(|m| {
                format!(
                    "Workload {:?}: WorkloadRegistration {:?} not found",
                    m.workload, m.registration
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        failures.push(Failure {
            assignment: None,
            message,
        });
    }

    let held = run.is_held();
    let statuses = statuses(snapshot, env, &by, &missing, options, &delivery, held);

    let assignments = if options.assignments {
        assignment_objects(&namespace, env, &rendered.content, &by)
    } else {
        Vec::new()
    };

    DesiredState {
        namespace,
        targets,
        stale_targets,
        statuses,
        delivery,
        warnings,
        assignments,
        failures,
        held,
    }
}

/// Why a Workload without the Flux label is not Ready: nothing says which
/// WorkloadRegistration delivered it, so its deployment targets have no workspace.
fn no_workspace(namespace: &str) -> String {
    format!(
        "the Workload has no label {} naming the WorkloadRegistration that delivers it \
         (\"{namespace}-<registration>\"), so its deployment targets have an empty workspace and \
         no SchedulingPolicy that selects a workspace schedules them. Apply it with that label \
         (Flux sets it), or declare its deployment targets directly.",
        labels::FLUX_NAME
    )
}

fn statuses(
    snapshot: &Snapshot,
    env: &ScheduledEnvironment,
    by: &ByObject,
    missing: &[MissingRegistration],
    options: Options,
    delivery: &Deliverable,
    held: bool,
) -> Vec<ObjectStatus> {
    let mut out = Vec::new();
    let mut push = |kind: Kind, target: StatusTarget, current: Option<&Vec<Condition>>, desired: Desired| {
        out.push(ObjectStatus {
            kind,
            name: target.reference.name.clone().unwrap_or_default(),
            target,
            current: current.cloned().unwrap_or_default(),
            desired,
        });
    };
    fn conditions(s: &Option<kalypso_api::Status>) -> Option<&Vec<Condition>> {
        s.as_ref().map(|s| &s.conditions)
    }

    for o in &snapshot.cluster_types {
        let name = o.name_any();
        let d = by.condition(Kind::ClusterType, &name, "Accepted", String::new());
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::ClusterType,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    for o in &snapshot.templates {
        let name = o.name_any();
        let d = by.condition(Kind::Template, &name, "Accepted", String::new());
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::Template,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    for o in &snapshot.config_schemas {
        let name = o.name_any();
        let d = by.condition(Kind::ConfigSchema, &name, "Accepted", String::new());
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::ConfigSchema,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    for o in &snapshot.policies {
        let name = o.name_any();
        let count = env.schedule.iter().filter(|a| a.policies.contains(&name)).count();
        let d = by.condition(
            Kind::SchedulingPolicy,
            &name,
            "AssignmentsCreated",
            plural(count, "assignment"),
        );
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::SchedulingPolicy,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    for o in &snapshot.workloads {
        let name = o.name_any();
        let d = match missing.iter().find(|m| m.workload == name) {
            Some(m) => Desired::failed(format!(
                "WorkloadRegistration {:?} named by label {} not found",
                m.registration,
                labels::FLUX_NAME
            )),
            None if !o.labels().contains_key(labels::FLUX_NAME)
                && !by.errors.contains_key(&(Kind::Workload, name.clone())) =>
            {
                Desired::not_ready("NoWorkspace", no_workspace(&snapshot.namespace))
            }
            None => {
                let count = env.targets.values().filter(|t| t.workload == name).count();
                by.condition(
                    Kind::Workload,
                    &name,
                    "DeploymentTargetsCreated",
                    format!("{} in {}", plural(count, "deployment target"), snapshot.namespace),
                )
            }
        };
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::Workload,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    if options.external {
        for o in &snapshot.registrations {
            let name = o.name_any();
            let count = env
                .namespace
                .workloads
                .values()
                .filter(|w| w.registration.as_deref() == Some(name.as_str()))
                .count();
            let d = by.condition(
                Kind::WorkloadRegistration,
                &name,
                "Accepted",
                format!(
                    "{} in workspace {:?}",
                    plural(count, "workload"),
                    o.spec.workspace
                ),
            );
            if o.metadata.deletion_timestamp.is_none() {
                push(
                    Kind::WorkloadRegistration,
                    StatusTarget::of(o.as_ref()),
                    conditions(&o.status),
                    d,
                );
            }
        }
        for o in &snapshot.base_repos {
            let name = o.name_any();
            let pinned = if o.spec.commit.is_empty() {
                format!("{} of {} is followed", o.spec.branch, o.spec.repo)
            } else {
                format!(
                    "{} of {} is pinned at {}",
                    o.spec.branch, o.spec.repo, o.spec.commit
                )
            };
            let d = by.condition(Kind::BaseRepo, &name, "Accepted", pinned);
            if o.metadata.deletion_timestamp.is_none() {
                push(
                    Kind::BaseRepo,
                    StatusTarget::of(o.as_ref()),
                    conditions(&o.status),
                    d,
                );
            }
        }
        if let Some(o) = snapshot
            .environment
            .as_deref()
            .filter(|o| o.metadata.deletion_timestamp.is_none())
        {
            let d = match delivery {
                Deliverable::Ready(content) => Desired::ready(
                    "Scheduled",
                    format!(
                        "{} rendered for delivery to the GitOps repositories.",
                        plural(content.assignments, "assignment")
                    ),
                ),
                Deliverable::Blocked(problems) if held => {
                    Desired::not_ready(MASS_DELETION_HELD, summarize(problems))
                }
                Deliverable::Blocked(problems) => Desired::not_ready("Blocked", summarize(problems)),
                Deliverable::RolloutUnsupported(message) => {
                    Desired::not_ready(ROLLOUT_UNSUPPORTED, message.clone())
                }
            };
            push(Kind::Environment, StatusTarget::of(o), conditions(&o.status), d);
        }
    } else if let Some(o) = snapshot
        .environment
        .as_deref()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
    {
        // With Flux the sources controller writes the Environment's `Ready` (its Flux
        // objects); the scheduler only says that a RolloutPolicy stops the delivery (over a
        // Ready environment: a failure of its Flux objects says more), and gives `Ready`
        // back once the policy is gone (the sources controller keeps it meanwhile, and it
        // wrote the Flux objects before the scheduler could say so).
        let current = conditions(&o.status);
        let reason = current
            .and_then(|c| crate::conditions::find(c, crate::conditions::READY))
            .map(|c| c.reason.as_str());
        let d = match delivery {
            Deliverable::RolloutUnsupported(message) if reason != Some(crate::conditions::UPDATE_FAILED) => {
                Some(Desired::not_ready(ROLLOUT_UNSUPPORTED, message.clone()))
            }
            Deliverable::RolloutUnsupported(_) => None,
            _ if reason == Some(ROLLOUT_UNSUPPORTED) => Some(Desired::ready(FLUX_RESOURCES_CREATED, "")),
            _ => None,
        };
        if let Some(d) = d {
            push(Kind::Environment, StatusTarget::of(o), current, d);
        }
    }
    for o in &snapshot.deployment_targets {
        let name = o.name_any();
        if !env.targets.contains_key(&name) {
            continue; // stale: about to be deleted
        }
        let count = env
            .schedule
            .iter()
            .filter(|a| a.deployment_target == name)
            .count();
        let d = by.condition(
            Kind::DeploymentTarget,
            &name,
            "Scheduled",
            format!("on {}", plural(count, "cluster type")),
        );
        if o.metadata.deletion_timestamp.is_none() {
            push(
                Kind::DeploymentTarget,
                StatusTarget::of(o.as_ref()),
                conditions(&o.status),
                d,
            );
        }
    }
    out
}

fn assignment_objects(
    namespace: &str,
    env: &ScheduledEnvironment,
    content: &RepoContent,
    by: &ByObject,
) -> Vec<(Assignment, AssignmentPackage)> {
    let mut out = Vec::new();
    for a in env.schedule.iter() {
        let name = format!("{}-{}-{}", a.workload, a.deployment_target, a.cluster_type);
        let mut assignment = Assignment::new(
            &name,
            AssignmentSpec {
                workload: a.workload.clone(),
                deployment_target: a.deployment_target.clone(),
                cluster_type: a.cluster_type.clone(),
            },
        );
        assignment.metadata.namespace = Some(namespace.to_owned());
        let mut l = Labels::new();
        if let Some(policy) = a.policies.first() {
            l.insert(labels::SCHEDULING_POLICY.to_owned(), policy.clone());
        }
        l.insert(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned());
        assignment.metadata.labels = Some(l);
        let package = content
            .packages
            .get(&(a.cluster_type.clone(), a.deployment_target.clone()));
        let desired = match package {
            Some(_) => Desired::ready("AssignmentPackageCreated", ""),
            None => {
                let errors = by
                    .errors
                    .get(&(Kind::DeploymentTarget, a.deployment_target.clone()))
                    .map(|e| e.join("; "))
                    .unwrap_or_else(|| "no manifests were rendered".to_owned());
                Desired::failed(errors)
            }
        };
        assignment.status = Some(kalypso_api::AssignmentStatus {
            conditions: crate::conditions::update(&[], &[desired], &[], None, &crate::conditions::now()),
            git_issue_status: None,
        });
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let spec = match package {
            Some(p) => AssignmentPackageSpec {
                reconciler_manifests: vec![text(&p.reconciler)],
                namespace_manifests: vec![text(&p.namespace)],
                config_manifests: p.config.iter().map(|(_, b)| text(b)).collect(),
                config_manifests_content_type: match p.config {
                    Some((file, _)) if file.ends_with(".sh") => "sh".to_owned(),
                    _ => "yaml".to_owned(),
                },
            },
            None => AssignmentPackageSpec::default(),
        };
        let mut pkg = AssignmentPackage::new(&name, spec);
        pkg.metadata.namespace = Some(namespace.to_owned());
        pkg.metadata.labels = Some(Labels::from([
            (labels::CLUSTER_TYPE.to_owned(), a.cluster_type.clone()),
            (labels::WORKLOAD.to_owned(), a.workload.clone()),
            (labels::DEPLOYMENT_TARGET.to_owned(), a.deployment_target.clone()),
            (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        ]));
        out.push((assignment, pkg));
    }
    out
}

/// The owner reference that makes an AssignmentPackage go with its Assignment (needs the
/// Assignment's uid, known once it exists).
pub fn package_owner(assignment: &Assignment) -> Option<OwnerReference> {
    assignment.controller_owner_ref(&())
}

/// The `Ready=False` reason of a GitOpsRepo (and, with `--source external`, of the
/// Environment) whose delivery the mass-deletion guard holds.
pub const MASS_DELETION_HELD: &str = "MassDeletionHeld";

/// A short text for a GitOpsRepo's `Ready=False` message.
pub fn summarize(problems: &[String]) -> String {
    let mut out = format!("{} block delivery:", plural(problems.len(), "problem"));
    for p in problems.iter().take(LISTED_PROBLEMS) {
        out.push_str("\n- ");
        out.push_str(p);
    }
    if problems.len() > LISTED_PROBLEMS {
        out.push_str(&format!("\n- ... and {} more", problems.len() - LISTED_PROBLEMS));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fixtures::*;

    fn engine() -> Engine {
        Engine::new()
    }

    #[test]
    fn a_run_that_would_remove_every_target_is_held_until_the_environment_allows_it() {
        let mut s = hello_world_snapshot();
        // The Workload is gone (Flux not synchronised yet, or deleted by mistake) while the
        // GitOps branch has its target.
        s.workloads.clear();
        let on_branch = || {
            InMemory::placed(kalypso_core::placement::current_from_folders([(
                "large", "hw-dev",
            )]))
        };
        let mut memo = on_branch();
        let p = desired_state(&s, &engine(), Options::default(), &mut memo);
        assert!(p.held);
        let Deliverable::Blocked(problems) = &p.delivery else {
            panic!("delivered: {:?}", p.delivery);
        };
        assert!(problems[0].contains("error[mass-deletion]"), "{problems:?}");
        assert!(problems[0].contains("large/hw-dev"), "{problems:?}");
        assert!(problems[0].contains(ALLOW_MASS_DELETION), "{problems:?}");
        assert_eq!(p.failures.len(), 1, "reported as an issue: {:?}", p.failures);
        // The memo still knows the branch: the next run is held too.
        let again = desired_state(&s, &engine(), Options::default(), &mut memo);
        assert!(again.held);

        // The annotation allows it.
        let mut env = kalypso_api::Environment::new("dev", Default::default());
        env.metadata.annotations = Some([(ALLOW_MASS_DELETION.to_owned(), "true".to_owned())].into());
        s.environment = Some(Arc::new(env));
        let allowed = desired_state(&s, &engine(), Options::default(), &mut on_branch());
        assert!(!allowed.held);
        assert!(
            matches!(allowed.delivery, Deliverable::Ready(_)),
            "{:?}",
            allowed.delivery
        );
        assert!(allowed.warnings.iter().any(|w| w.contains("mass-deletion")));
    }

    #[test]
    fn a_rollout_policy_stops_the_delivery_and_says_which_and_what_to_do() {
        let mut s = hello_world_snapshot();
        s.rollout_policies.push(Arc::new(rollout_policy("rings")));
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let Deliverable::RolloutUnsupported(message) = &p.delivery else {
            panic!("{:?}", p.delivery);
        };
        for part in [
            "RolloutPolicy dev/rings",
            "--source git --hub URL",
            "remove the RolloutPolicy",
            "nothing was delivered",
        ] {
            assert!(message.contains(part), "{part}: {message}");
        }
        // The rest of the namespace is reconciled as before: targets and object conditions.
        assert_eq!(p.targets.len(), 1);
        assert!(
            p.statuses
                .iter()
                .any(|st| st.kind == Kind::Workload && st.desired.status)
        );

        // A policy on its way out no longer counts.
        let mut going = rollout_policy("rings");
        going.metadata.deletion_timestamp = Some(now());
        s.rollout_policies = vec![Arc::new(going)];
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        assert!(matches!(p.delivery, Deliverable::Ready(_)), "{:?}", p.delivery);
    }

    #[test]
    fn the_environment_says_a_rollout_policy_stops_it_with_either_source() {
        let environment_ready = |s: &Snapshot, options: Options| {
            desired_state(s, &engine(), options, &mut InMemory::default())
                .statuses
                .into_iter()
                .find(|st| st.kind == Kind::Environment)
                .map(|st| (st.desired.status, st.desired.reason))
        };
        let flux = Options::default();
        let external = Options {
            external: true,
            ..Options::default()
        };
        let mut s = hello_world_snapshot();
        s.rollout_policies.push(Arc::new(rollout_policy("rings")));
        s.environment = Some(Arc::new(environment(Some((true, FLUX_RESOURCES_CREATED)))));
        let refused = Some((false, ROLLOUT_UNSUPPORTED.to_owned()));
        assert_eq!(environment_ready(&s, flux), refused);
        assert_eq!(environment_ready(&s, external), refused);
        // With Flux a failure of the Environment's Flux objects is not hidden.
        s.environment = Some(Arc::new(environment(Some((
            false,
            crate::conditions::UPDATE_FAILED,
        )))));
        assert_eq!(environment_ready(&s, flux), None);

        // The policy removed: with Flux, `Ready` goes back to what the sources controller
        // said; with the external source, the scheduler's own `Scheduled`.
        s.rollout_policies.clear();
        s.environment = Some(Arc::new(environment(Some((false, ROLLOUT_UNSUPPORTED)))));
        assert_eq!(
            environment_ready(&s, flux),
            Some((true, FLUX_RESOURCES_CREATED.to_owned()))
        );
        assert_eq!(
            environment_ready(&s, external),
            Some((true, "Scheduled".to_owned()))
        );
        // A Flux environment without a policy is the sources controller's alone, as before.
        s.environment = Some(Arc::new(environment(Some((true, FLUX_RESOURCES_CREATED)))));
        assert_eq!(environment_ready(&s, flux), None);
    }

    #[test]
    fn a_workload_without_the_flux_label_is_not_ready_and_says_why() {
        let mut s = hello_world_snapshot();
        let mut w = (*s.workloads[0]).clone();
        w.metadata.labels = None;
        s.workloads = vec![Arc::new(w)];
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let status = p.statuses.iter().find(|s| s.kind == Kind::Workload).unwrap();
        assert!(!status.desired.status);
        assert_eq!(status.desired.reason, "NoWorkspace");
        assert!(
            status.desired.message.contains(labels::FLUX_NAME),
            "{}",
            status.desired.message
        );
        assert!(
            p.warnings.iter().any(|w| w.contains("no label")),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn with_an_external_source_registrations_base_repos_and_the_environment_get_ready() {
        let mut s = hello_world_snapshot();
        let mut base = kalypso_api::BaseRepo::new(
            "main",
            kalypso_api::BaseRepoSpec {
                repo: "https://github.com/org/cp".into(),
                branch: "main".into(),
                path: ".".into(),
                commit: "abc123".into(),
            },
        );
        base.metadata.namespace = Some(s.namespace.clone());
        s.base_repos.push(Arc::new(base));
        s.environment = Some(Arc::new(kalypso_api::Environment::new("dev", Default::default())));
        let kinds = |options: Options| -> Vec<(Kind, bool, String)> {
            desired_state(&s, &engine(), options, &mut InMemory::default())
                .statuses
                .into_iter()
                .map(|s| (s.kind, s.desired.status, s.desired.message))
                .collect()
        };
        // With Flux, the sources controller writes them.
        let flux = kinds(Options::default());
        assert!(
            !flux
                .iter()
                .any(|(k, ..)| matches!(k, Kind::WorkloadRegistration | Kind::BaseRepo | Kind::Environment))
        );
        let external = kinds(Options {
            external: true,
            ..Options::default()
        });
        for kind in [Kind::WorkloadRegistration, Kind::BaseRepo, Kind::Environment] {
            let (_, ready, message) = external
                .iter()
                .find(|(k, ..)| *k == kind)
                .unwrap_or_else(|| panic!("{kind:?}"));
            assert!(ready, "{kind:?}: {message}");
            assert!(!message.contains('{'), "{kind:?}: {message}");
        }
        let (_, _, base) = external.iter().find(|(k, ..)| *k == Kind::BaseRepo).unwrap();
        assert_eq!(base, "main of https://github.com/org/cp is pinned at abc123");
    }

    #[test]
    fn a_healthy_environment_is_ready_to_deliver() {
        let s = hello_world_snapshot();
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let Deliverable::Ready(content) = &p.delivery else {
            panic!("blocked: {:?}", p.delivery);
        };
        assert_eq!(content.assignments, 1);
        let keys: Vec<_> = content.content.packages.keys().cloned().collect();
        assert_eq!(keys, [("large".to_owned(), "hw-dev".to_owned())]);
        let pkg = &content.content.packages[&("large".to_owned(), "hw-dev".to_owned())];
        assert_eq!(
            &pkg.reconciler[..],
            b"kind: Reconciler\nname: hw-dev\nns: dev-large-hw-dev\n"
        );
        assert_eq!(content.hash.len(), 32);

        // The target is derived from the Workload and owned by it.
        assert_eq!(p.targets.len(), 1);
        let dt = &p.targets[0];
        assert_eq!(dt.name_any(), "hw-dev");
        let owner = &dt.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Workload", "hw"));
        assert_eq!(owner.controller, Some(true));
        assert_eq!(dt.labels()["workload"], "hw");
        assert_eq!(dt.labels()["workspace"], "team-a");
        assert!(p.stale_targets.is_empty());

        let policy = p
            .statuses
            .iter()
            .find(|s| s.kind == Kind::SchedulingPolicy)
            .expect("policy status");
        assert_eq!(
            policy.desired,
            Desired::ready("AssignmentsCreated", "1 assignment")
        );
        let workload = p
            .statuses
            .iter()
            .find(|s| s.kind == Kind::Workload)
            .expect("workload");
        assert_eq!(
            workload.desired,
            Desired::ready("DeploymentTargetsCreated", "1 deployment target in dev")
        );
    }

    #[test]
    fn hash_is_stable_and_follows_content() {
        let s = hello_world_snapshot();
        let a = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let b = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let hash = |p: &DesiredState| match &p.delivery {
            Deliverable::Ready(c) => c.hash.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(hash(&a), hash(&b));
        let mut changed = hello_world_snapshot();
        changed
            .config_maps
            .push(Arc::new(platform_config("extra", &[("REGION", "west")])));
        assert_ne!(
            hash(&a),
            hash(&desired_state(
                &changed,
                &engine(),
                Options::default(),
                &mut InMemory::default()
            ))
        );
    }

    #[test]
    fn a_broken_template_blocks_delivery_and_is_reported_on_its_objects() {
        let mut s = hello_world_snapshot();
        s.templates = vec![Arc::new(template("reconciler", &["{{ .Broken "]))];
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let Deliverable::Blocked(problems) = &p.delivery else {
            panic!("not blocked");
        };
        assert!(!problems.is_empty());
        let t = p
            .statuses
            .iter()
            .find(|s| s.kind == Kind::Template)
            .expect("template");
        assert!(!t.desired.status, "{t:?}");
        assert_eq!(t.desired.reason, "UpdateFailed");
        assert!(summarize(problems).contains("block delivery"));
        assert!(!p.failures.is_empty(), "reported as issues");
        assert!(
            desired_state(
                &hello_world_snapshot(),
                &engine(),
                Options::default(),
                &mut InMemory::default()
            )
            .failures
            .is_empty(),
            "nothing to report when everything renders"
        );
    }

    #[test]
    fn a_failing_workload_fails_alone_and_the_rest_is_delivered() {
        let mut s = hello_world_snapshot();
        s.templates[0] = Arc::new(template(
            "reconciler",
            &[
                "{{ if eq .Workload \"bad\" }}{{ fail \"bad workload\" }}{{ end }}kind: Reconciler\nname: {{ .DeploymentTargetName }}\n",
            ],
        ));
        s.registrations.push(Arc::new(registration("broken", "team-b")));
        s.workloads
            .push(Arc::new(workload("bad", "broken", &[("dev", "dev")])));
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        let Deliverable::Ready(content) = &p.delivery else {
            panic!("blocked: {:?}", p.delivery);
        };
        let delivered: Vec<&str> = content
            .content
            .packages
            .keys()
            .map(|(_, dt)| dt.as_str())
            .collect();
        assert_eq!(delivered, ["hw-dev"]);
        let [kept] = &content.content.kept[..] else {
            panic!("one group of kept folders: {:?}", content.content.kept);
        };
        assert!(!kept.claimed.contains("bad-dev"));
        assert_eq!(p.failures.len(), 1, "{:?}", p.failures);
        assert!(p.failures[0].message.contains("bad workload"));
        assert!(p.warnings.iter().any(|w| w.contains("registration-isolated")));
    }

    #[test]
    fn a_placement_ref_places_on_the_decided_cluster_types() {
        let mut s = hello_world_snapshot();
        s.cluster_types.push(Arc::new(cluster_type(
            "small",
            "reconciler",
            "namespace",
            "config",
        )));
        let mut p = policy("all");
        p.spec.placement_ref = Some(kalypso_api::PlacementRef {
            name: "web".into(),
            ..Default::default()
        });
        s.policies = vec![Arc::new(p)];
        let on = |desired: &DesiredState| -> Vec<String> {
            let Deliverable::Ready(content) = &desired.delivery else {
                panic!("blocked: {:?}", desired.delivery);
            };
            content
                .content
                .packages
                .keys()
                .map(|(ct, _)| ct.clone())
                .collect()
        };
        // No decision read: the selector's matches, and a warning that says so.
        let undecided = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        assert_eq!(on(&undecided), ["large", "small"]);
        assert!(
            undecided
                .warnings
                .iter()
                .any(|w| w.contains("placement-ref-unsupported"))
        );
        // OCM decided `small`.
        s.placement_decisions = BTreeMap::from([("all".to_owned(), BTreeSet::from(["small".to_owned()]))]);
        let decided = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        assert_eq!(on(&decided), ["small"]);
        assert!(
            !decided
                .warnings
                .iter()
                .any(|w| w.contains("placement-ref-unsupported"))
        );
    }

    #[test]
    fn targets_no_longer_declared_are_deleted() {
        let mut s = hello_world_snapshot();
        let w = s.workloads[0].as_ref().clone();
        s.deployment_targets
            .push(Arc::new(owned_target(&w, "hw-old", "dev")));
        s.deployment_targets
            .push(Arc::new(owned_target(&w, "hw-dev", "dev")));
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        assert_eq!(p.stale_targets, ["hw-old"]);
        // The existing derived target gets a status; the stale one does not.
        let names: Vec<_> = p
            .statuses
            .iter()
            .filter(|s| s.kind == Kind::DeploymentTarget)
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["hw-dev"]);
    }

    #[test]
    fn a_missing_registration_fails_the_workload_and_keeps_its_targets() {
        let mut s = hello_world_snapshot();
        let w = s.workloads[0].as_ref().clone();
        s.deployment_targets
            .push(Arc::new(owned_target(&w, "hw-dev", "dev")));
        s.registrations.clear();
        let p = desired_state(&s, &engine(), Options::default(), &mut InMemory::default());
        assert!(p.stale_targets.is_empty());
        assert!(p.targets.is_empty());
        let workload = p
            .statuses
            .iter()
            .find(|s| s.kind == Kind::Workload)
            .expect("workload");
        assert!(!workload.desired.status);
        assert!(matches!(p.delivery, Deliverable::Blocked(_)));
    }

    #[test]
    fn assignments_are_objects_only_when_asked_for() {
        let s = hello_world_snapshot();
        assert!(
            desired_state(&s, &engine(), Options::default(), &mut InMemory::default())
                .assignments
                .is_empty()
        );
        let p = desired_state(
            &s,
            &engine(),
            Options {
                assignments: true,
                ..Options::default()
            },
            &mut InMemory::default(),
        );
        assert_eq!(p.assignments.len(), 1);
        let (a, pkg) = &p.assignments[0];
        assert_eq!(a.name_any(), "hw-hw-dev-large");
        assert_eq!(a.labels()["scheduling-policy"], "all");
        assert_eq!(pkg.labels()["cluster-type"], "large");
        assert_eq!(pkg.spec.config_manifests_content_type, "yaml");
        assert_eq!(pkg.spec.reconciler_manifests.len(), 1);
    }
}
