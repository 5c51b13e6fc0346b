//! Against a real cluster (ignored by default): the CRDs install and are accepted by the API
//! server, and the objects of the example control plane can be created with them.
//!
//! Run with a throw-away cluster as the current kubeconfig context (kind, k3d):
//! `cargo test -p kalypso-operator --test cluster -- --ignored`.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kalypso_api::{ClusterType, ClusterTypeSpec, Manifest, Template, TemplateSpec, TemplateType};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::conditions;
use kube::runtime::wait::await_condition;
use kube::{Client, ResourceExt};

#[tokio::test]
#[ignore = "needs a Kubernetes cluster (current kubeconfig context)"]
async fn crds_install_and_accept_both_kinds_of_template_manifests() {
    let client = Client::try_default().await.expect("a cluster");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("kalypso-test").force();
    for crd in kalypso_operator::crds::definitions() {
        let name = crd.name_any();
        crds.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .expect("apply CRD");
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .expect("established in time")
        .expect("watch");
    }

    let ns = "default";
    let templates: Api<Template> = Api::namespaced(client.clone(), ns);
    let mut t = Template::new(
        "kalypso-test",
        TemplateSpec {
            template_type: TemplateType::Reconciler,
            content_type: String::new(),
            manifests: vec![
                Manifest::Text("kind: X\nname: {{ .DeploymentTargetName }}\n".into()),
                Manifest::Object(
                    serde_json::json!({"kind": "Namespace", "metadata": {"name": "{{ .Namespace }}"}}),
                ),
            ],
        },
    );
    t.metadata.namespace = Some(ns.into());
    let _ = templates.delete("kalypso-test", &DeleteParams::default()).await;
    let created = templates
        .create(&PostParams::default(), &t)
        .await
        .expect("create template");
    assert_eq!(created.spec.manifests.len(), 2, "object manifests are preserved");
    templates
        .delete("kalypso-test", &DeleteParams::default())
        .await
        .expect("delete");

    let cts: Api<ClusterType> = Api::namespaced(client, ns);
    let mut ct = ClusterType::new(
        "kalypso-test",
        ClusterTypeSpec {
            reconciler: "r".into(),
            namespace_service: "n".into(),
            config_type: "c".into(),
        },
    );
    ct.metadata.namespace = Some(ns.into());
    let _ = cts.delete("kalypso-test", &DeleteParams::default()).await;
    cts.create(&PostParams::default(), &ct)
        .await
        .expect("create cluster type");
    cts.delete("kalypso-test", &DeleteParams::default())
        .await
        .expect("delete");
}
