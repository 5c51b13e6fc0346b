//! In-memory caches of every kind the scheduler reads, and the watch streams that fill them.
//!
//! One reflector per kind, cluster-wide (as the original's informers). The scheduler
//! controller is triggered by these same streams (every change maps to its namespace) and
//! reads its snapshot from the caches, so each object is watched once. ConfigMaps that are
//! not platform config (no `platform-config: "true"` label, name not `azure-app-config*`)
//! are kept without their data, and managed fields are dropped everywhere, to keep memory
//! small in large clusters.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kalypso_api::{
    BaseRepo, ClusterType, ConfigSchema, DeploymentTarget, Environment, GitOpsRepo, RolloutPolicy,
    SchedulingPolicy, Template, Workload, WorkloadRegistration, labels,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::snapshot::Snapshot;

/// The caches.
#[derive(Clone)]
pub struct Stores {
    /// ClusterTypes.
    pub cluster_types: Store<ClusterType>,
    /// Templates.
    pub templates: Store<Template>,
    /// WorkloadRegistrations.
    pub registrations: Store<WorkloadRegistration>,
    /// Workloads.
    pub workloads: Store<Workload>,
    /// DeploymentTargets.
    pub deployment_targets: Store<DeploymentTarget>,
    /// SchedulingPolicies.
    pub policies: Store<SchedulingPolicy>,
    /// GitOpsRepos.
    pub gitops_repos: Store<GitOpsRepo>,
    /// BaseRepos.
    pub base_repos: Store<BaseRepo>,
    /// ConfigSchemas.
    pub config_schemas: Store<ConfigSchema>,
    /// RolloutPolicies (their presence stops an environment's delivery: the Flux and
    /// external sources cannot run rollouts).
    pub rollout_policies: Store<RolloutPolicy>,
    /// ConfigMaps (platform ones with data).
    pub config_maps: Store<ConfigMap>,
    /// Environments (cluster-wide: Environment `<env>` is about namespace `<env>`; the
    /// scheduler reads its annotations and, with `--source external`, writes its `Ready`).
    pub environments: Store<Environment>,
}

impl Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

/// A stream of namespaces whose objects changed (watch errors are logged and retried by
/// the watcher's backoff).
pub type Trigger = std::pin::Pin<Box<dyn Stream<Item = ObjectRef<Namespace>> + Send>>;

/// Whether a ConfigMap feeds platform config.
pub fn is_platform_config(cm: &ConfigMap) -> bool {
    cm.labels().get(labels::PLATFORM_CONFIG).map(String::as_str) == Some("true")
        || cm.name_any().starts_with("azure-app-config")
}

/// The namespace an object's change is about: its own (namespaced kinds).
fn own_namespace<K: Resource>(o: &K) -> Option<String> {
    o.meta().namespace.clone()
}

/// The namespace an Environment's change is about: the one named after it.
fn named_namespace<K: Resource>(o: &K) -> Option<String> {
    o.meta().name.clone()
}

fn reflect<K>(client: &Client, strip: fn(&mut K), about: fn(&K) -> Option<String>) -> (Store<K>, Trigger)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let api: Api<K> = Api::all(client.clone());
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .modify(move |o| {
            o.meta_mut().managed_fields = None;
            strip(o);
        })
        .reflect(writer)
        .touched_objects()
        .filter_map(move |r| {
            futures::future::ready(match r {
                Ok(o) => about(&o).map(|ns| ObjectRef::new(&ns)),
                Err(e) => {
                    tracing::warn!(error = %e, kind = %K::kind(&()), "watch failed; retrying");
                    None
                }
            })
        });
    (reader, Box::pin(stream))
}

fn keep<K>(_: &mut K) {}

fn strip_config_map(cm: &mut ConfigMap) {
    if !is_platform_config(cm) {
        cm.data = None;
        cm.binary_data = None;
    }
}

fn in_namespace<K: Resource + Clone>(store: &Store<K>, namespace: &str) -> Vec<Arc<K>>
where
    K::DynamicType: Eq + Hash + Clone,
{
    let mut out: Vec<Arc<K>> = store
        .state()
        .into_iter()
        .filter(|o| Some(namespace) == o.meta().namespace.as_deref())
        .collect();
    out.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    out
}

impl Stores {
    /// Starts nothing: returns the caches and the streams that fill them (which must be
    /// polled, e.g. by a controller's `watches_stream`).
    pub fn new(client: &Client) -> (Stores, Vec<Trigger>) {
        let mut triggers = Vec::new();
        macro_rules! store {
            ($k:ty, $strip:expr) => {{
                let (store, trigger) = reflect::<$k>(client, $strip, own_namespace);
                triggers.push(trigger);
                store
            }};
        }
        let stores = Stores {
            cluster_types: store!(ClusterType, keep),
            templates: store!(Template, keep),
            registrations: store!(WorkloadRegistration, keep),
            workloads: store!(Workload, keep),
            deployment_targets: store!(DeploymentTarget, keep),
            policies: store!(SchedulingPolicy, keep),
            gitops_repos: store!(GitOpsRepo, keep),
            base_repos: store!(BaseRepo, keep),
            config_schemas: store!(ConfigSchema, keep),
            rollout_policies: store!(RolloutPolicy, keep),
            config_maps: store!(ConfigMap, strip_config_map),
            environments: {
                let (store, trigger) = reflect::<Environment>(client, keep, named_namespace);
                triggers.push(trigger);
                store
            },
        };
        (stores, triggers)
    }

    /// Waits until every cache holds a complete first listing. Reconciling before that could
    /// delete DeploymentTargets or deliver partial content.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.cluster_types.wait_until_ready().await?;
        self.templates.wait_until_ready().await?;
        self.registrations.wait_until_ready().await?;
        self.workloads.wait_until_ready().await?;
        self.deployment_targets.wait_until_ready().await?;
        self.policies.wait_until_ready().await?;
        self.gitops_repos.wait_until_ready().await?;
        self.base_repos.wait_until_ready().await?;
        self.config_schemas.wait_until_ready().await?;
        self.rollout_policies.wait_until_ready().await?;
        self.config_maps.wait_until_ready().await?;
        self.environments.wait_until_ready().await?;
        Ok(())
    }

    /// The objects of `namespace`, each kind sorted by name.
    pub fn snapshot(&self, namespace: &str) -> Snapshot {
        Snapshot {
            namespace: namespace.to_owned(),
            cluster_types: in_namespace(&self.cluster_types, namespace),
            templates: in_namespace(&self.templates, namespace),
            registrations: in_namespace(&self.registrations, namespace),
            workloads: in_namespace(&self.workloads, namespace),
            deployment_targets: in_namespace(&self.deployment_targets, namespace),
            policies: in_namespace(&self.policies, namespace),
            gitops_repos: in_namespace(&self.gitops_repos, namespace),
            base_repos: in_namespace(&self.base_repos, namespace),
            config_schemas: in_namespace(&self.config_schemas, namespace),
            rollout_policies: in_namespace(&self.rollout_policies, namespace),
            config_maps: in_namespace(&self.config_maps, namespace)
                .into_iter()
                .filter(|c| is_platform_config(c))
                .collect(),
            placement_decisions: Default::default(),
            environment: self
                .environments
                .state()
                .into_iter()
                .find(|e| e.meta().name.as_deref() == Some(namespace)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_platform_config_maps_keep_their_data() {
        let mut platform = crate::fixtures::platform_config("p", &[("A", "1")]);
        strip_config_map(&mut platform);
        assert!(platform.data.is_some());
        let mut azure = ConfigMap::default();
        azure.metadata.name = Some("azure-app-config-dev".into());
        azure.data = Some([("k".to_owned(), "v".to_owned())].into());
        strip_config_map(&mut azure);
        assert!(azure.data.is_some());
        let mut other = ConfigMap::default();
        other.metadata.name = Some("kube-root-ca.crt".into());
        other.data = Some([("ca.crt".to_owned(), "...".to_owned())].into());
        strip_config_map(&mut other);
        assert!(other.data.is_none());
    }
}
