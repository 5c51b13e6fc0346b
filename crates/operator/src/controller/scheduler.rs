//! The scheduler: one reconcile per environment namespace.
//!
//! The original splits this work over six controllers that talk through intermediate
//! objects (DeploymentTargets, Assignments, AssignmentPackages) and status conditions. Here a
//! change to any object of a namespace triggers one reconcile of that namespace, which:
//!
//! 1. takes a [`Snapshot`] of the namespace from the caches ([`crate::stores`]);
//! 2. runs the shared core pipeline on it in memory ([`crate::desired`], on a blocking thread);
//! 3. creates, updates and deletes the DeploymentTargets derived from Workloads (owned by
//!    the Workload, as the original keeps them) — only those whose content differs;
//! 4. writes `Ready` conditions on the user-facing objects, only where they change, with an
//!    Event on each transition;
//! 5. with `--assignments`, writes Assignment and AssignmentPackage objects;
//! 6. for every GitOpsRepo: delivers the content once it has been stable for the debounce
//!    period ([`crate::deliver::Debouncer`]), or records why it is blocked.
//!
//! Reconciles of one namespace never overlap (kube-runtime serialises per object), so the
//! debouncer and the writes need no further locking.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kalypso_api::{Assignment, AssignmentPackage, DeploymentTarget, GitOpsRepo};
use kalypso_core::run::InMemory;
use kalypso_template::Engine;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{Shared, StatusTarget};
use crate::conditions::{self, Desired, READY, READY_TO_PR};
use crate::deliver::{Debouncer, Decision, PublishRequest, Published, Publisher};
use crate::desired::{self, Deliverable, DesiredState, MANAGED_BY, Options};
use crate::snapshot::Snapshot;
use crate::stores::Stores;

/// The controller's name (metrics, logs).
pub const CONTROLLER: &str = "scheduler";

/// Why an environment could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call about an object failed.
    #[error("{action} {kind} {namespace}/{name}: {source}")]
    Kube {
        /// What was attempted (`cannot apply`, `cannot delete`...).
        action: &'static str,
        /// The object's kind.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Delivery to a GitOps repository failed.
    #[error(transparent)]
    Publish(#[from] crate::deliver::PublishError),
    /// The caches stopped (the operator is shutting down).
    #[error("the object caches stopped before they were ready")]
    CachesStopped,
    /// The pipeline's thread panicked (a bug).
    #[error("the scheduling pipeline of environment {namespace} panicked")]
    Pipeline {
        /// The environment.
        namespace: String,
    },
}

impl Error {
    /// The variant's name, for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "Kube",
            Error::Publish(_) => "Publish",
            Error::CachesStopped => "CachesStopped",
            Error::Pipeline { .. } => "Pipeline",
        }
    }
}

/// What the scheduler needs.
pub struct Context {
    /// Client, events, metrics.
    pub shared: Shared,
    /// The caches (`None` only in tests, which hand snapshots in).
    pub stores: Option<Stores>,
    /// The template engine (compiled templates are cached per reconcile).
    pub engine: Arc<Engine>,
    /// What the desired includes.
    pub options: Options,
    /// Writes to GitOps repositories.
    pub publisher: Arc<dyn Publisher>,
    /// Content waiting to be delivered.
    pub debouncer: Mutex<Debouncer>,
    /// How often an idle environment is reconciled anyway.
    pub resync: Duration,
    /// How long to wait after a failure.
    pub retry_after: Duration,
    /// Environments currently blocked (for the gauge).
    pub blocked: Mutex<BTreeSet<String>>,
    /// Per environment, the fingerprint of the failures last reported as issues.
    pub reported: Mutex<BTreeMap<String, String>>,
    /// Per environment, its last run's packages (the memo of its next run) and placement.
    pub memos: Mutex<BTreeMap<String, InMemory>>,
    /// Environments not delivered because they hold a RolloutPolicy (logged once when one
    /// enters or leaves the set).
    pub rollout_refused: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("options", &self.options)
            .field("resync", &self.resync)
            .finish_non_exhaustive()
    }
}

fn kube_error(
    action: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> Error {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |source| Error::Kube {
        action,
        kind,
        namespace,
        name,
        source,
    }
}

/// Reconciles the environment namespace `ns`.
pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(stores) = &ctx.stores else {
        return Err(Error::CachesStopped);
    };
    stores.wait_ready().await.map_err(|_| Error::CachesStopped)?;
    let snapshot = stores.snapshot(&ns.name_any());
    if snapshot.is_empty() {
        if let Ok(mut memos) = ctx.memos.lock() {
            memos.remove(&ns.name_any());
        }
        return Ok(Action::await_change());
    }
    sync(snapshot, &ctx).await
}

/// Plans and applies one namespace.
pub async fn sync(mut snapshot: Snapshot, ctx: &Context) -> Result<Action, Error> {
    let _timer = ctx.shared.metrics.reconcile(CONTROLLER);
    let namespace = snapshot.namespace.clone();
    let span = tracing::info_span!("environment", environment = %namespace);
    let _enter = span.enter();
    snapshot.placement_decisions =
        crate::ocm::decisions(&ctx.shared.client, &namespace, &snapshot.policies).await;
    let (engine, options) = (ctx.engine.clone(), ctx.options);
    let memo = memo(&snapshot, ctx).await;
    let (desired, snapshot, memo) = tokio::task::spawn_blocking(move || {
        let mut memo = memo;
        let desired = desired::desired_state(&snapshot, &engine, options, &mut memo);
        (desired, snapshot, memo)
    })
    .await
    .map_err(|_| Error::Pipeline {
        namespace: namespace.clone(),
    })?;
    if let Ok(mut memos) = ctx.memos.lock() {
        memos.insert(namespace.clone(), memo);
    }
    for w in &desired.warnings {
        tracing::debug!(warning = %w, "pipeline warning");
    }
    apply_targets(&desired, &snapshot, ctx).await?;
    write_statuses(&desired, ctx).await?;
    if ctx.options.assignments {
        apply_assignments(&desired, ctx).await?;
    }
    report_failures(&desired, &snapshot, ctx).await;
    let wait = deliver(&desired, &snapshot, ctx).await?;
    Ok(Action::requeue(wait.map_or(ctx.resync, |w| w.min(ctx.resync))))
}

/// What the operator keeps of the namespace's last run; before a first run, seeded with
/// where the (first) GitOps branch has its deployment targets, so that `Steady` keeps them
/// there across a restart, and the mass-deletion guard compares a first run with what the
/// branch holds (an operator restarted on a namespace that lost its Workloads must not
/// empty the branch).
async fn memo(snapshot: &Snapshot, ctx: &Context) -> InMemory {
    let kept = ctx
        .memos
        .lock()
        .ok()
        .and_then(|mut memos| memos.remove(&snapshot.namespace));
    if let Some(memo) = kept {
        return memo;
    }
    let Some(repo) = snapshot
        .gitops_repos
        .iter()
        .find(|r| r.metadata.deletion_timestamp.is_none())
    else {
        return InMemory::default();
    };
    match ctx.publisher.placement(&repo.spec).await {
        Some(placed) => InMemory::placed(placed),
        None => InMemory::default(),
    }
}

/// Whether `existing` differs from `desired` in what the operator sets.
pub fn needs_apply(existing: Option<&DeploymentTarget>, desired: &DeploymentTarget) -> bool {
    let Some(existing) = existing else { return true };
    existing.spec != desired.spec
        || existing.metadata.labels != desired.metadata.labels
        || !desired
            .owner_references()
            .iter()
            .all(|o| existing.owner_references().iter().any(|e| e.uid == o.uid))
}

async fn apply_targets(desired: &DesiredState, snapshot: &Snapshot, ctx: &Context) -> Result<(), Error> {
    let ns = &desired.namespace;
    let api: Api<DeploymentTarget> = Api::namespaced(ctx.shared.client.clone(), ns);
    let existing: BTreeMap<String, &DeploymentTarget> = snapshot
        .deployment_targets
        .iter()
        .map(|t| (t.name_any(), t.as_ref()))
        .collect();
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    for target in &desired.targets {
        let name = target.name_any();
        if !needs_apply(existing.get(&name).copied(), target) {
            continue;
        }
        api.patch(&name, &params, &Patch::Apply(target))
            .await
            .map_err(kube_error("cannot apply", "DeploymentTarget", ns, &name))?;
        ctx.shared.metrics.targets_applied.inc();
        tracing::info!(deployment_target = %name, "deployment target applied");
    }
    for name in &desired.stale_targets {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(kube_error("cannot delete", "DeploymentTarget", ns, name)(e)),
        }
        tracing::info!(deployment_target = %name, "deployment target deleted");
    }
    Ok(())
}

async fn write_statuses(desired: &DesiredState, ctx: &Context) -> Result<(), Error> {
    for s in &desired.statuses {
        ctx.shared
            .write_status(&s.target, &s.current, std::slice::from_ref(&s.desired), &[], None)
            .await
            .map_err(kube_error(
                "cannot write the status of",
                s.kind.name(),
                &desired.namespace,
                &s.name,
            ))?;
    }
    Ok(())
}

async fn apply_assignments(desired: &DesiredState, ctx: &Context) -> Result<(), Error> {
    let ns = &desired.namespace;
    let client = ctx.shared.client.clone();
    let assignments: Api<Assignment> = Api::namespaced(client.clone(), ns);
    let packages: Api<AssignmentPackage> = Api::namespaced(client, ns);
    let params = PatchParams::apply(crate::FIELD_MANAGER).force();
    let mut wanted = BTreeSet::new();
    for (assignment, package) in &desired.assignments {
        let name = assignment.name_any();
        wanted.insert(name.clone());
        let mut body = assignment.clone();
        body.status = None;
        let written = assignments
            .patch(&name, &params, &Patch::Apply(&body))
            .await
            .map_err(kube_error("cannot apply", "Assignment", ns, &name))?;
        let desired: Vec<Desired> = assignment
            .status
            .iter()
            .flat_map(|s| &s.conditions)
            .filter(|c| c.type_ == READY)
            .map(|c| Desired {
                type_: READY,
                status: c.status == "True",
                reason: c.reason.clone(),
                message: c.message.clone(),
            })
            .collect();
        let current = written.status.clone().unwrap_or_default().conditions;
        ctx.shared
            .write_status(&StatusTarget::of(&written), &current, &desired, &[], None)
            .await
            .map_err(kube_error("cannot write the status of", "Assignment", ns, &name))?;
        let mut package = package.clone();
        package.metadata.owner_references = desired::package_owner(&written).map(|o| vec![o]);
        packages
            .patch(&name, &params, &Patch::Apply(&package))
            .await
            .map_err(kube_error("cannot apply", "AssignmentPackage", ns, &name))?;
    }
    let managed = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let existing =
        assignments
            .list(&managed)
            .await
            .map_err(kube_error("cannot list", "Assignment", ns, "*"))?;
    for old in existing.items.iter().filter(|a| !wanted.contains(&a.name_any())) {
        let name = old.name_any();
        match assignments.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(kube_error("cannot delete", "Assignment", ns, &name)(e)),
        }
    }
    Ok(())
}

fn repo_conditions(repo: &GitOpsRepo) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    repo.status.clone().unwrap_or_default().conditions
}

/// Delivers to every GitOpsRepo of the namespace what is due; returns how long until the
/// debounce of pending content ends, if any is pending.
async fn deliver(
    desired: &DesiredState,
    snapshot: &Snapshot,
    ctx: &Context,
) -> Result<Option<Duration>, Error> {
    let ns = &desired.namespace;
    let mut wait: Option<Duration> = None;
    let blocked = !matches!(desired.delivery, Deliverable::Ready(_));
    note_rollout_refusal(desired, ctx);
    if let Ok(mut b) = ctx.blocked.lock() {
        if blocked {
            b.insert(ns.clone());
        } else {
            b.remove(ns);
        }
        ctx.shared
            .metrics
            .blocked_environments
            .set(i64::try_from(b.len()).unwrap_or(i64::MAX));
    }
    for repo in snapshot
        .gitops_repos
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        let name = repo.name_any();
        let key = (ns.clone(), name.clone());
        let current = repo_conditions(repo);
        let target = StatusTarget::of(repo.as_ref());
        let status_error = kube_error("cannot write the status of", "GitOpsRepo", ns, &name);
        let content = match &desired.delivery {
            Deliverable::Blocked(problems) => {
                if let Ok(mut d) = ctx.debouncer.lock() {
                    d.forget(&key);
                }
                let reason = if desired.held {
                    desired::MASS_DELETION_HELD
                } else {
                    "Blocked"
                };
                ctx.shared
                    .write_status(
                        &target,
                        &current,
                        &[Desired::not_ready(reason, desired::summarize(problems))],
                        &[READY_TO_PR],
                        None,
                    )
                    .await
                    .map_err(status_error)?;
                continue;
            }
            Deliverable::RolloutUnsupported(message) => {
                if let Ok(mut d) = ctx.debouncer.lock() {
                    d.forget(&key);
                }
                ctx.shared
                    .write_status(
                        &target,
                        &current,
                        &[Desired::not_ready(
                            conditions::ROLLOUT_UNSUPPORTED,
                            message.clone(),
                        )],
                        &[READY_TO_PR],
                        None,
                    )
                    .await
                    .map_err(status_error)?;
                continue;
            }
            Deliverable::Ready(content) => content,
        };
        let delivered = repo.status.as_ref().and_then(|s| s.repo_content_hash.as_deref());
        let decision = match ctx.debouncer.lock() {
            Ok(mut d) => d.decide(key.clone(), &content.hash, delivered, tokio::time::Instant::now()),
            Err(_) => Decision::Deliver,
        };
        match decision {
            Decision::UpToDate => {
                if !conditions::is_true(&current, READY) || conditions::find(&current, READY_TO_PR).is_some()
                {
                    ctx.shared
                        .write_status(
                            &target,
                            &current,
                            &[Desired::ready(
                                "UpToDate",
                                "the GitOps repository holds the current content",
                            )],
                            &[READY_TO_PR],
                            None,
                        )
                        .await
                        .map_err(status_error)?;
                }
            }
            Decision::Wait(d) => {
                wait = Some(wait.map_or(d, |w| w.min(d)));
                let ready_to_pr = Desired {
                    type_: READY_TO_PR,
                    status: true,
                    reason: "ReadyForPR".to_owned(),
                    message: format!(
                        "{} assignment(s) waiting for the debounce period",
                        content.assignments
                    ),
                };
                ctx.shared
                    .write_status(&target, &current, &[ready_to_pr], &[], None)
                    .await
                    .map_err(status_error)?;
            }
            Decision::Deliver => {
                let request = PublishRequest {
                    environment: ns.clone(),
                    gitops_repo: name.clone(),
                    spec: repo.spec.clone(),
                    content: content.content.clone(),
                };
                match ctx.publisher.publish(request).await {
                    Ok(published) => {
                        ctx.shared.metrics.delivery(match &published {
                            Published::UpToDate => "up_to_date",
                            Published::Pushed { .. } => "pushed",
                            Published::PullRequest { .. } => "pull_request",
                        });
                        tracing::info!(gitops_repo = %name, result = %published.describe(), "delivered");
                        let (commit, pull) = match &published {
                            Published::UpToDate => (None, None),
                            Published::Pushed { commit } => (Some(commit.clone()), None),
                            Published::PullRequest { url, commit } => {
                                (Some(commit.clone()), Some(url.clone()))
                            }
                        };
                        let mut extra = json!({ "repoContentHash": content.hash });
                        if let Some(c) = commit {
                            extra["lastCommit"] = json!(c);
                        }
                        if let Some(p) = pull {
                            extra["pullRequest"] = json!(p);
                        }
                        ctx.shared
                            .write_status(
                                &target,
                                &current,
                                &[Desired::ready(published.reason(), published.describe())],
                                &[READY_TO_PR],
                                Some(extra),
                            )
                            .await
                            .map_err(status_error)?;
                        if let Ok(mut d) = ctx.debouncer.lock() {
                            d.forget(&key);
                        }
                    }
                    Err(e) => {
                        ctx.shared.metrics.delivery("failed");
                        ctx.shared
                            .write_status(&target, &current, &[Desired::failed(e.to_string())], &[], None)
                            .await
                            .map_err(status_error)?;
                        return Err(Error::Publish(e));
                    }
                }
            }
        }
    }
    Ok(wait)
}

/// Logs when the environment starts or stops being refused for its RolloutPolicy (once per
/// change, not every reconcile; the Events go with the `Ready` transitions).
fn note_rollout_refusal(desired: &DesiredState, ctx: &Context) {
    let Ok(mut refused) = ctx.rollout_refused.lock() else {
        return;
    };
    match &desired.delivery {
        Deliverable::RolloutUnsupported(message) => {
            if refused.insert(desired.namespace.clone()) {
                tracing::warn!(reason = conditions::ROLLOUT_UNSUPPORTED, "{message}");
            }
        }
        _ => {
            if refused.remove(&desired.namespace) {
                tracing::info!("the RolloutPolicy is gone: the environment is delivered again");
            }
        }
    }
}

/// Reports the environment's failures as the original does (GitHub issues in the first
/// GitOps repository; closed again once everything renders), each distinct set once.
/// Reporting is a courtesy: a failure is logged and an Event, and retried next time.
async fn report_failures(desired: &DesiredState, snapshot: &Snapshot, ctx: &Context) {
    let Some(repo) = snapshot
        .gitops_repos
        .iter()
        .find(|r| r.metadata.deletion_timestamp.is_none())
    else {
        return;
    };
    let ns = &desired.namespace;
    let fingerprint = crate::deliver::failures_fingerprint(&desired.failures);
    let last = ctx.reported.lock().ok().and_then(|r| r.get(ns).cloned());
    if last.as_deref() == Some(fingerprint.as_str()) {
        return;
    }
    let request = crate::deliver::ReportRequest {
        environment: ns.clone(),
        gitops_repo: repo.name_any(),
        spec: repo.spec.clone(),
        failures: desired.failures.clone(),
    };
    match ctx.publisher.report(request).await {
        Ok(()) => {
            if let Ok(mut r) = ctx.reported.lock() {
                r.insert(ns.clone(), fingerprint);
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot report failures as issues");
            ctx.shared
                .event_for(&repo.object_ref(&()), true, "IssueReportFailed", e.to_string())
                .await;
        }
    }
}

/// After a failure: count it and try again later.
pub fn error_policy(ns: Arc<Namespace>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(environment = %ns.name_any(), error = %error, "reconcile failed");
    ctx.shared.metrics.failure(CONTROLLER, error.metric_label());
    Action::requeue(ctx.retry_after)
}

#[cfg(test)]
mod tests;
