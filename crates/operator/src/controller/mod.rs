//! The controllers, and what they share: the client, the Event recorder, the metrics, and
//! the way conditions are written.
//!
//! - [`sources`]: Environment, BaseRepo and WorkloadRegistration — the Flux objects that
//!   bring control-plane content into environment namespaces (with finalizers, since those
//!   objects live in another namespace and cannot be owned).
//! - [`scheduler`]: one reconcile per environment namespace — snapshot the namespace's
//!   objects, run the core pipeline in memory, keep DeploymentTargets, write conditions,
//!   deliver.
//! - [`gitsource`]: with `--source git`, Environments synchronised from git by
//!   `kalypso-git` (no Flux, no objects in environment namespaces).

pub mod gitsource;
pub mod scheduler;
pub mod sources;

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;

use crate::conditions::{self, Desired, ready_transition};
use crate::metrics::Metrics;

/// What every controller needs.
#[derive(Clone)]
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// Shared state on `client`, reporting Events as `kalypso-scheduler` from `instance`.
    pub fn new(client: Client, instance: Option<String>, metrics: Arc<Metrics>) -> Shared {
        let reporter = Reporter {
            controller: crate::FIELD_MANAGER.to_owned(),
            instance,
        };
        Shared {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
        }
    }

    /// Sets `desired` (removing condition types `remove`) on `obj`'s status if that changes
    /// anything, and publishes an Event when `Ready` changes. Returns whether a write
    /// happened.
    pub async fn set_conditions<K>(
        &self,
        obj: &K,
        current: &[Condition],
        desired: &[Desired],
        remove: &[&str],
    ) -> Result<bool, kube::Error>
    where
        K: Resource<DynamicType = ()>,
    {
        let target = StatusTarget {
            reference: obj.object_ref(&()),
            resource: ApiResource::erase::<K>(&()),
            generation: obj.meta().generation,
        };
        self.write_status(&target, current, desired, remove, None).await
    }

    /// Like [`Shared::set_conditions`] for any object, with `extra` status fields merged
    /// into the patch (written even if the conditions do not change).
    pub async fn write_status(
        &self,
        target: &StatusTarget,
        current: &[Condition],
        desired: &[Desired],
        remove: &[&str],
        extra: Option<serde_json::Value>,
    ) -> Result<bool, kube::Error> {
        let new = conditions::update(current, desired, remove, target.generation, &conditions::now());
        let mut status = extra.unwrap_or_else(|| json!({}));
        if new == current && status.as_object().is_none_or(|o| o.is_empty()) {
            return Ok(false);
        }
        status["conditions"] = serde_json::to_value(&new).unwrap_or_default();
        let name = target.reference.name.clone().unwrap_or_default();
        let api: Api<DynamicObject> = match &target.reference.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &target.resource),
            None => Api::all_with(self.client.clone(), &target.resource),
        };
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
        if let Some(t) = ready_transition(current, &new) {
            self.event_for(&target.reference, !t.ready, &t.reason, t.message)
                .await;
        }
        Ok(true)
    }

    /// Publishes an Event about the object `reference` points at.
    pub async fn event_for(&self, reference: &ObjectReference, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(truncate_note(note)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, reason, "cannot publish event");
        }
    }
}

/// The object whose status is written.
#[derive(Clone, Debug)]
pub struct StatusTarget {
    /// Which object.
    pub reference: ObjectReference,
    /// Its resource (for the API path).
    pub resource: ApiResource,
    /// Its `metadata.generation`.
    pub generation: Option<i64>,
}

impl StatusTarget {
    /// The status target of `obj`.
    pub fn of<K: Resource<DynamicType = ()>>(obj: &K) -> StatusTarget {
        StatusTarget {
            reference: obj.object_ref(&()),
            resource: ApiResource::erase::<K>(&()),
            generation: obj.meta().generation,
        }
    }
}

/// Event notes are limited to 1 kB.
fn truncate_note(mut note: String) -> String {
    const MAX: usize = 1000;
    if note.len() > MAX {
        let mut end = MAX - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}
