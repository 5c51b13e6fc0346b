//! Environment, BaseRepo and WorkloadRegistration: the Flux objects that fill environment
//! namespaces.
//!
//! - Environment `<env>`: Namespace `<env>`, and Flux objects `<env>` for the environment
//!   branch (`spec.controlPlane`), applied into `<env>`.
//! - BaseRepo `<ns>/<name>`: Flux objects `<ns>-<name>` for the main branch pinned at
//!   `spec.commit`, applied into `<ns>`.
//! - WorkloadRegistration `<ns>/<name>`: Flux objects `<ns>-<name>` for the workload folder,
//!   applied into `<ns>`.
//!
//! `Ready=True, reason FluxResourcesCreated` once written, `UpdateFailed` otherwise, as in
//! the original; an Environment the scheduler marked `RolloutUnsupported` (its namespace
//! holds a RolloutPolicy) keeps that while its Flux objects are fine. The Flux objects live in `flux-system` and cannot be owned by a namespaced
//! object elsewhere, so a finalizer removes them when their object goes (the original only
//! did so when it happened to see the deletion). Deleting an Environment keeps its
//! namespace, as the original does.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kalypso_api::{BaseRepo, Environment, WorkloadRegistration};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event as Finalizer};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Shared;
use crate::conditions::{Desired, FLUX_RESOURCES_CREATED, ROLLOUT_UNSUPPORTED};
use crate::flux::{self, FluxSettings, FluxSource};

/// The finalizer that removes an object's Flux objects before it goes.
pub const FINALIZER: &str = "scheduler.kalypso.io/flux-resources";

/// Why a source object could not be reconciled.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing or deleting the Flux objects failed.
    #[error(transparent)]
    Flux(#[from] flux::Error),
    /// The environment's namespace could not be created.
    #[error("cannot create namespace {namespace} for Environment {namespace}: {source}")]
    Namespace {
        /// The namespace.
        namespace: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The status could not be written.
    #[error("cannot write the status of {kind} {name}: {source}")]
    Status {
        /// The kind.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Adding or removing the finalizer failed.
    #[error("finalizer of {kind} {name}: {source}")]
    Finalizer {
        /// The kind.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
        /// What failed.
        #[source]
        source: Box<finalizer::Error<Error>>,
    },
}

impl Error {
    /// The variant's name, for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Flux(_) => "Flux",
            Error::Namespace { .. } => "Namespace",
            Error::Status { .. } => "Status",
            Error::Finalizer { .. } => "Finalizer",
        }
    }
}

/// A kind whose objects are brought in by Flux objects the operator keeps.
pub trait SourceKind:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The kind's name.
    const KIND: &'static str;
    /// The controller's name (metrics, logs).
    const CONTROLLER: &'static str;
    /// The Flux objects the object wants.
    fn flux_source(&self) -> FluxSource;
    /// The object's conditions.
    fn conditions(&self) -> &[Condition];
    /// The namespace the object wants to exist (Environments).
    fn namespace_to_create(&self) -> Option<String> {
        None
    }
}

fn status_conditions(s: &Option<kalypso_api::Status>) -> &[Condition] {
    s.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default()
}

impl SourceKind for Environment {
    const KIND: &'static str = "Environment";
    const CONTROLLER: &'static str = "environment";

    fn flux_source(&self) -> FluxSource {
        let cp = &self.spec.control_plane;
        FluxSource {
            name: self.name_any(),
            url: cp.repo.clone(),
            branch: cp.branch.clone(),
            commit: None,
            path: cp.path.clone(),
            target_namespace: self.name_any(),
        }
    }

    fn conditions(&self) -> &[Condition] {
        status_conditions(&self.status)
    }

    fn namespace_to_create(&self) -> Option<String> {
        Some(self.name_any())
    }
}

impl SourceKind for BaseRepo {
    const KIND: &'static str = "BaseRepo";
    const CONTROLLER: &'static str = "baserepo";

    fn flux_source(&self) -> FluxSource {
        let ns = self.namespace().unwrap_or_default();
        FluxSource {
            name: format!("{ns}-{}", self.name_any()),
            url: self.spec.repo.clone(),
            branch: self.spec.branch.clone(),
            commit: Some(self.spec.commit.clone()).filter(|c| !c.is_empty()),
            path: self.spec.path.clone(),
            target_namespace: ns,
        }
    }

    fn conditions(&self) -> &[Condition] {
        status_conditions(&self.status)
    }
}

impl SourceKind for WorkloadRegistration {
    const KIND: &'static str = "WorkloadRegistration";
    const CONTROLLER: &'static str = "workloadregistration";

    fn flux_source(&self) -> FluxSource {
        let ns = self.namespace().unwrap_or_default();
        let w = &self.spec.workload;
        FluxSource {
            name: format!("{ns}-{}", self.name_any()),
            url: w.repo.clone(),
            branch: w.branch.clone(),
            commit: None,
            path: w.path.clone(),
            target_namespace: ns,
        }
    }

    fn conditions(&self) -> &[Condition] {
        status_conditions(&self.status)
    }
}

/// What the source controllers need.
#[derive(Clone, Debug)]
pub struct Context {
    /// Client, events, metrics.
    pub shared: Shared,
    /// How Flux objects are made.
    pub flux: FluxSettings,
    /// How long to wait after a failure.
    pub retry_after: Duration,
}

fn full_name<K: Resource>(obj: &K) -> String {
    match &obj.meta().namespace {
        Some(ns) => format!("{ns}/{}", obj.meta().name.clone().unwrap_or_default()),
        None => obj.meta().name.clone().unwrap_or_default(),
    }
}

/// Reconciles one object of kind `K`.
pub async fn reconcile<K: SourceKind>(obj: Arc<K>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.shared.metrics.reconcile(K::CONTROLLER);
    let ns = obj.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.shared.client.clone(), &ns);
    let name = full_name(obj.as_ref());
    finalizer::finalizer(&api, FINALIZER, obj, |event| async {
        match event {
            Finalizer::Apply(o) => apply(o.as_ref(), &ctx).await,
            Finalizer::Cleanup(o) => cleanup(o.as_ref(), &ctx).await,
        }
    })
    .await
    .map_err(|e| match e {
        finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer {
            kind: K::KIND,
            name,
            source: Box::new(other),
        },
    })
}

async fn apply<K: SourceKind>(obj: &K, ctx: &Context) -> Result<Action, Error> {
    let result = write_flux(obj, ctx).await;
    let desired = match &result {
        // The scheduler says that the environment's RolloutPolicy stops its delivery, and
        // gives `Ready` back once the policy is gone: keep its word.
        Ok(()) if refused_for_rollout(obj.conditions()) => Vec::new(),
        Ok(()) => vec![Desired::ready(FLUX_RESOURCES_CREATED, "")],
        Err(e) => vec![Desired::failed(e.to_string())],
    };
    ctx.shared
        .set_conditions(obj, obj.conditions(), &desired, &[])
        .await
        .map_err(|source| Error::Status {
            kind: K::KIND,
            name: full_name(obj),
            source,
        })?;
    result?;
    Ok(Action::await_change())
}

/// Whether `Ready` is the scheduler's `RolloutUnsupported`.
fn refused_for_rollout(conditions: &[Condition]) -> bool {
    crate::conditions::find(conditions, crate::conditions::READY)
        .is_some_and(|c| c.status == "False" && c.reason == ROLLOUT_UNSUPPORTED)
}

async fn write_flux<K: SourceKind>(obj: &K, ctx: &Context) -> Result<(), Error> {
    if let Some(namespace) = obj.namespace_to_create() {
        let api: Api<Namespace> = Api::all(ctx.shared.client.clone());
        let ns = serde_json::json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace }
        });
        api.patch(
            &namespace,
            &PatchParams::apply(crate::FIELD_MANAGER),
            &Patch::Apply(ns),
        )
        .await
        .map_err(|source| Error::Namespace {
            namespace: namespace.clone(),
            source,
        })?;
    }
    flux::apply(&ctx.shared.client, &ctx.flux, &obj.flux_source()).await?;
    Ok(())
}

async fn cleanup<K: SourceKind>(obj: &K, ctx: &Context) -> Result<Action, Error> {
    let source = obj.flux_source();
    flux::delete(&ctx.shared.client, &ctx.flux, &source.name).await?;
    tracing::info!(kind = K::KIND, name = %full_name(obj), flux = %source.name, "Flux objects deleted");
    Ok(Action::await_change())
}

/// After a failure: count it and try again later.
pub fn error_policy<K: SourceKind>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = K::KIND, name = %full_name(obj.as_ref()), error = %error, "reconcile failed");
    ctx.shared.metrics.failure(K::CONTROLLER, error.metric_label());
    Action::requeue(ctx.retry_after)
}

#[cfg(test)]
mod tests {
    use kalypso_api::{BaseRepoSpec, EnvironmentSpec, RepositoryRef};
    use kube::Resource;

    use super::*;
    use crate::fixtures::mock_client;
    use crate::metrics::Metrics;

    fn context(client: kube::Client) -> Arc<Context> {
        Arc::new(Context {
            shared: Shared::new(client, Some("test".into()), Arc::new(Metrics::default())),
            flux: FluxSettings {
                source_api_version: "source.toolkit.fluxcd.io/v1".into(),
                kustomize_api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
                ..FluxSettings::default()
            },
            retry_after: Duration::from_secs(30),
        })
    }

    fn environment(finalized: bool, deleting: bool) -> Environment {
        let mut e = Environment::new(
            "dev",
            EnvironmentSpec {
                control_plane: RepositoryRef {
                    repo: "https://github.com/org/cp".into(),
                    branch: "dev".into(),
                    path: ".".into(),
                },
            },
        );
        e.metadata.namespace = Some("kalypso".into());
        e.metadata.uid = Some("uid-dev".into());
        e.metadata.generation = Some(3);
        if finalized {
            e.metadata.finalizers = Some(vec![FINALIZER.into()]);
        }
        if deleting {
            e.metadata.deletion_timestamp = Some(crate::fixtures::now());
        }
        e
    }

    const ENV: &str = "/apis/scheduler.kalypso.io/v1alpha1/namespaces/kalypso/environments/dev";
    const GITREPO: &str = "/apis/source.toolkit.fluxcd.io/v1/namespaces/flux-system/gitrepositories";
    const KUSTOMIZATION: &str = "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/kalypso/events";

    #[tokio::test]
    async fn a_new_environment_gets_a_finalizer_first() {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let task = tokio::spawn(reconcile(Arc::new(environment(false, false)), ctx));
        let finalized = serde_json::to_value(environment(true, false)).expect("json");
        let patch = server.expect_ok_with("PATCH", ENV, &finalized).await;
        assert!(patch.to_string().contains(FINALIZER), "{patch}");
        let action = task.await.expect("join").expect("reconcile");
        assert_eq!(action, Action::await_change());
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn an_environment_gets_its_namespace_flux_objects_and_ready_condition() {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let task = tokio::spawn(reconcile(Arc::new(environment(true, false)), ctx));
        server.expect_ok("PATCH", "/api/v1/namespaces/dev").await;
        let repo = server.expect_ok("PATCH", format!("{GITREPO}/dev")).await;
        assert_eq!(repo["spec"]["url"], "https://github.com/org/cp");
        assert_eq!(repo["spec"]["ref"]["branch"], "dev");
        let k = server.expect_ok("PATCH", format!("{KUSTOMIZATION}/dev")).await;
        assert_eq!(k["spec"]["targetNamespace"], "dev");
        let status = server.expect_ok("PATCH", format!("{ENV}/status")).await;
        let c = &status["status"]["conditions"][0];
        assert_eq!(c["type"], "Ready");
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], "FluxResourcesCreated");
        assert_eq!(c["observedGeneration"], 3);
        let event = server.expect_ok("POST", EVENTS).await;
        assert_eq!(event["reason"], "FluxResourcesCreated");
        assert_eq!(task.await.expect("join").expect("ok"), Action::await_change());
        server.expect_nothing_more().await;
    }

    /// Reconciles an Environment whose `Ready` is already `ready`: its Flux objects are
    /// applied, and no status is written.
    async fn reconcile_writes_no_status(ready: Desired) {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let mut env = environment(true, false);
        env.status = Some(kalypso_api::Status {
            conditions: crate::conditions::update(&[], &[ready], &[], Some(3), &crate::fixtures::now()),
        });
        let task = tokio::spawn(reconcile(Arc::new(env), ctx));
        server.expect_ok("PATCH", "/api/v1/namespaces/dev").await;
        server.expect_ok("PATCH", format!("{GITREPO}/dev")).await;
        server.expect_ok("PATCH", format!("{KUSTOMIZATION}/dev")).await;
        task.await.expect("join").expect("ok");
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn a_ready_environment_writes_no_status_again() {
        reconcile_writes_no_status(Desired::ready("FluxResourcesCreated", "")).await;
    }

    #[tokio::test]
    async fn an_environment_the_scheduler_refused_for_its_rollout_policy_keeps_that_ready() {
        // No status write: `FluxResourcesCreated` would deliver nothing and hide the refusal.
        reconcile_writes_no_status(Desired::not_ready(
            ROLLOUT_UNSUPPORTED,
            "RolloutPolicy dev/rings ...",
        ))
        .await;
    }

    #[tokio::test]
    async fn a_flux_failure_is_reported_and_requeued() {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let task = tokio::spawn(reconcile(Arc::new(environment(true, false)), ctx.clone()));
        server.expect_ok("PATCH", "/api/v1/namespaces/dev").await;
        server
            .expect_error("PATCH", format!("{GITREPO}/dev"), 404, "NotFound")
            .await;
        let status = server.expect_ok("PATCH", format!("{ENV}/status")).await;
        let c = &status["status"]["conditions"][0];
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "UpdateFailed");
        assert!(
            c["message"]
                .as_str()
                .unwrap_or_default()
                .contains("GitRepository flux-system/dev")
        );
        let event = server.expect_ok("POST", EVENTS).await;
        assert_eq!(event["type"], "Warning");
        let err = task.await.expect("join").expect_err("fails");
        assert_eq!(err.metric_label(), "Flux");
        let env = Arc::new(environment(true, false));
        assert_eq!(
            error_policy(env, &err, ctx),
            Action::requeue(Duration::from_secs(30))
        );
    }

    #[tokio::test]
    async fn deleting_an_environment_removes_its_flux_objects_then_the_finalizer() {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let task = tokio::spawn(reconcile(Arc::new(environment(true, true)), ctx));
        server.expect_ok("DELETE", format!("{KUSTOMIZATION}/dev")).await;
        server
            .expect_error("DELETE", format!("{GITREPO}/dev"), 404, "NotFound")
            .await;
        let gone = serde_json::to_value(environment(false, true)).expect("json");
        let patch = server.expect_ok_with("PATCH", ENV, &gone).await;
        assert!(patch.to_string().contains("remove"), "{patch}");
        task.await.expect("join").expect("ok");
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn a_base_repo_pins_the_promoted_commit() {
        let (client, mut server) = mock_client();
        let ctx = context(client);
        let mut b = BaseRepo::new(
            "main",
            BaseRepoSpec {
                repo: "https://github.com/org/cp".into(),
                branch: "main".into(),
                path: ".".into(),
                commit: "0123abc".into(),
            },
        );
        b.metadata.namespace = Some("dev".into());
        b.metadata.finalizers = Some(vec![FINALIZER.into()]);
        assert_eq!(b.flux_source().name, "dev-main");
        let task = tokio::spawn(reconcile(Arc::new(b), ctx));
        let repo = server.expect_ok("PATCH", format!("{GITREPO}/dev-main")).await;
        assert_eq!(repo["spec"]["ref"]["commit"], "0123abc");
        let k = server
            .expect_ok("PATCH", format!("{KUSTOMIZATION}/dev-main"))
            .await;
        assert_eq!(k["spec"]["targetNamespace"], "dev");
        server
            .expect_ok(
                "PATCH",
                "/apis/scheduler.kalypso.io/v1alpha1/namespaces/dev/baserepoes/main/status",
            )
            .await;
        server
            .expect_ok("POST", "/apis/events.k8s.io/v1/namespaces/dev/events")
            .await;
        task.await.expect("join").expect("ok");
        assert_eq!(BaseRepo::plural(&()), "baserepoes");
    }
}
