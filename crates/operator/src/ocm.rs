//! The Open Cluster Management adaptor: a SchedulingPolicy with `spec.placementRef` takes its
//! cluster types from an OCM `Placement`'s decisions.
//!
//! OCM's placement controller writes the clusters a `Placement` chose into `PlacementDecision`
//! objects (`cluster.open-cluster-management.io/v1beta1`) labelled
//! `cluster.open-cluster-management.io/placement: <placement>`, one `status.decisions[]
//! .clusterName` per cluster. Each decided `ManagedCluster` (`.../v1`, cluster-scoped) names
//! its cluster type in a label (`placementRef.clusterTypeLabel`, by default
//! [`DEFAULT_CLUSTER_TYPE_LABEL`]). The adaptor reads both and hands the core, per policy, the
//! set of decided cluster types ([`kalypso_core::placement::PlacementInput::decisions`]); the
//! core cuts the policy's feasible set to it. Decisions are read on every reconcile, so a new
//! decision is picked up at the next one (at the latest after the resync period).
//!
//! When OCM is not installed or the objects cannot be read, the policy gets no decision: the
//! core then places by the policy's selector and says so in a warning, and the log says why.

use std::collections::{BTreeMap, BTreeSet};

use kalypso_api::SchedulingPolicy;
use kalypso_core::placement::DEFAULT_CLUSTER_TYPE_LABEL;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};

/// The label of a PlacementDecision that names its Placement.
pub const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";

fn placement_decisions() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            "cluster.open-cluster-management.io",
            "v1beta1",
            "PlacementDecision",
        ),
        "placementdecisions",
    )
}

fn managed_clusters() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.open-cluster-management.io", "v1", "ManagedCluster"),
        "managedclusters",
    )
}

/// The cluster names of every PlacementDecision of Placement `name` in `namespace`.
async fn decided_clusters(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<BTreeSet<String>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &placement_decisions());
    let list = api
        .list(&ListParams::default().labels(&format!("{PLACEMENT_LABEL}={name}")))
        .await?;
    Ok(list
        .items
        .iter()
        .flat_map(|d| {
            d.data
                .pointer("/status/decisions")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
        })
        .filter_map(|decision| decision.get("clusterName")?.as_str())
        .filter(|cluster| !cluster.is_empty())
        .map(ToOwned::to_owned)
        .collect())
}

/// The decided cluster types of each policy of `policies` (in environment namespace
/// `namespace`) that has a `placementRef` and whose decisions could be read.
pub async fn decisions(
    client: &Client,
    namespace: &str,
    policies: &[std::sync::Arc<SchedulingPolicy>],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let referring: Vec<(String, &kalypso_api::PlacementRef)> = policies
        .iter()
        .filter_map(|p| Some((p.name_any(), p.spec.placement_ref.as_ref()?)))
        .collect();
    if referring.is_empty() {
        return out;
    }
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &managed_clusters());
    let labels: BTreeMap<String, BTreeMap<String, String>> = match clusters.list(&ListParams::default()).await
    {
        Ok(list) => list
            .items
            .into_iter()
            .map(|c| (c.name_any(), c.metadata.labels.unwrap_or_default()))
            .collect(),
        Err(error) => {
            tracing::warn!(%error, "cannot list OCM ManagedClusters; policies with a placementRef place by their selectors");
            return out;
        }
    };
    for (policy, reference) in referring {
        let placement_namespace = if reference.namespace.is_empty() {
            namespace
        } else {
            &reference.namespace
        };
        let label = if reference.cluster_type_label.is_empty() {
            DEFAULT_CLUSTER_TYPE_LABEL
        } else {
            &reference.cluster_type_label
        };
        match decided_clusters(client, placement_namespace, &reference.name).await {
            Ok(decided) => {
                let mut cluster_types = BTreeSet::new();
                for cluster in decided {
                    match labels.get(&cluster).and_then(|l| l.get(label)) {
                        Some(cluster_type) => {
                            cluster_types.insert(cluster_type.clone());
                        }
                        None => tracing::warn!(
                            %policy, %cluster, %label,
                            "a decided ManagedCluster has no cluster-type label (or does not exist); it is left out"
                        ),
                    }
                }
                out.insert(policy, cluster_types);
            }
            Err(error) => tracing::warn!(
                %policy, placement = %format!("{placement_namespace}/{}", reference.name), %error,
                "cannot read the Placement's decisions; the policy places by its selector"
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::StatusCode;
    use serde_json::json;

    use super::*;
    use crate::fixtures::{ApiServerVerifier, Expected, mock_client, policy};

    fn policy_with_ref(name: &str, placement: &str, label: &str) -> Arc<SchedulingPolicy> {
        let mut p = policy(name);
        p.spec.placement_ref = Some(kalypso_api::PlacementRef {
            name: placement.to_owned(),
            namespace: String::new(),
            cluster_type_label: label.to_owned(),
        });
        Arc::new(p)
    }

    fn cluster(name: &str, labels: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
               "metadata": {"name": name, "labels": labels}})
    }

    #[tokio::test]
    async fn decided_clusters_become_cluster_types_by_their_label() {
        let (client, mut server) = mock_client();
        let policies = vec![
            policy_with_ref("web", "web-placement", ""),
            policy_with_ref("db", "db-placement", "example.com/flavour"),
            Arc::new(policy("plain")),
        ];
        let asking = tokio::spawn(async move { decisions(&client, "dev", &policies).await });
        server
            .expect_ok_with(
                "GET",
                "/apis/cluster.open-cluster-management.io/v1/managedclusters",
                &json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedClusterList",
                    "metadata": {}, "items": [
                        cluster("east-1", json!({"scheduler.kalypso.io/cluster-type": "large", "example.com/flavour": "gold"})),
                        cluster("west-1", json!({"scheduler.kalypso.io/cluster-type": "small"})),
                        cluster("north-1", json!({})),
                    ]}),
            )
            .await;
        let (_, send) = server
            .next(Expected {
                method: "GET",
                path: "/apis/cluster.open-cluster-management.io/v1beta1/namespaces/dev/placementdecisions"
                    .into(),
            })
            .await;
        ApiServerVerifier::respond(
            send,
            StatusCode::OK,
            &json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecisionList",
            "metadata": {}, "items": [
                {"metadata": {"name": "web-placement-decision-1", "namespace": "dev",
                    "labels": {PLACEMENT_LABEL: "web-placement"}},
                 "status": {"decisions": [{"clusterName": "east-1", "reason": ""},
                                          {"clusterName": "north-1", "reason": ""}]}},
                {"metadata": {"name": "web-placement-decision-2", "namespace": "dev",
                    "labels": {PLACEMENT_LABEL: "web-placement"}},
                 "status": {"decisions": [{"clusterName": "west-1", "reason": ""}, {"clusterName": "", "reason": ""}]}},
            ]}),
        );
        // db's Placement is in a namespace the operator may not read.
        server
            .expect_error(
                "GET",
                "/apis/cluster.open-cluster-management.io/v1beta1/namespaces/dev/placementdecisions",
                403,
                "Forbidden",
            )
            .await;
        let decided = asking.await.unwrap();
        assert_eq!(
            decided,
            BTreeMap::from([(
                "web".to_owned(),
                BTreeSet::from(["large".to_owned(), "small".to_owned()])
            )]),
            "north-1 has no cluster-type label; db's decisions could not be read"
        );
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn without_ocm_no_policy_gets_a_decision() {
        let (client, mut server) = mock_client();
        let policies = vec![policy_with_ref("web", "web-placement", "")];
        let asking = tokio::spawn(async move { decisions(&client, "dev", &policies).await });
        server
            .expect_error(
                "GET",
                "/apis/cluster.open-cluster-management.io/v1/managedclusters",
                404,
                "NotFound",
            )
            .await;
        assert!(asking.await.unwrap().is_empty());
        server.expect_nothing_more().await;
    }

    #[tokio::test]
    async fn policies_without_a_placement_ref_ask_nothing() {
        let (client, server) = mock_client();
        let policies = vec![Arc::new(policy("plain"))];
        assert!(decisions(&client, "dev", &policies).await.is_empty());
        server.expect_nothing_more().await;
    }
}
