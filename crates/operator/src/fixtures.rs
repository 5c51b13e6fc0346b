//! Test support: object builders and a mocked API server (controller-rs style).
//!
//! [`ApiServerVerifier`] sits behind a `kube::Client` built on `tower_test::mock`: a test
//! spawns the scenario it expects (each step checks one request and answers it) and runs
//! the reconciler against the client; a request the scenario does not expect, or a step the
//! reconciler never reaches, fails the test within the timeout.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kalypso_api::{
    ClusterType, ClusterTypeSpec, DeploymentTarget, DeploymentTargetDetail, DeploymentTargetSpec, GitOpsRepo,
    GitOpsRepoSpec, LabelSelector, Labels, Manifest, RepositoryRef, RolloutPolicy, RolloutPolicySpec,
    SchedulingPolicy, SchedulingPolicySpec, Template, TemplateSpec, TemplateType, Workload,
    WorkloadRegistration, WorkloadRegistrationSpec, WorkloadSpec, labels,
};
use kube::client::Body;
use kube::{Client, Resource};
use tower_test::mock::{Handle, SendResponse};

use crate::snapshot::Snapshot;

/// The namespace every fixture lives in.
pub const NS: &str = "dev";

/// A fixed timestamp.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("time"))
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(NS.to_owned()),
        uid: Some(format!("uid-{name}")),
        generation: Some(1),
        resource_version: Some("1".to_owned()),
        ..ObjectMeta::default()
    }
}

fn flux_labels(kustomization: &str) -> Labels {
    Labels::from([
        (labels::FLUX_NAME.to_owned(), kustomization.to_owned()),
        (labels::FLUX_NAMESPACE.to_owned(), labels::FLUX_SYSTEM.to_owned()),
    ])
}

/// A ClusterType delivered by the environment's Kustomization.
pub fn cluster_type(name: &str, reconciler: &str, namespace: &str, config: &str) -> ClusterType {
    let mut o = ClusterType::new(
        name,
        ClusterTypeSpec {
            reconciler: reconciler.into(),
            namespace_service: namespace.into(),
            config_type: config.into(),
        },
    );
    o.metadata = meta(name);
    o.metadata.labels = Some(flux_labels(NS));
    o
}

/// A Template with string manifests.
pub fn template(name: &str, manifests: &[&str]) -> Template {
    let mut o = Template::new(
        name,
        TemplateSpec {
            template_type: TemplateType::Reconciler,
            content_type: String::new(),
            manifests: manifests
                .iter()
                .map(|m| Manifest::Text((*m).to_owned()))
                .collect(),
        },
    );
    o.metadata = meta(name);
    o.metadata.labels = Some(flux_labels(&format!("{NS}-main")));
    o
}

/// A WorkloadRegistration of `workspace`.
pub fn registration(name: &str, workspace: &str) -> WorkloadRegistration {
    let mut o = WorkloadRegistration::new(
        name,
        WorkloadRegistrationSpec {
            workload: RepositoryRef {
                repo: "https://github.com/org/app".into(),
                branch: "main".into(),
                path: "workload".into(),
            },
            workspace: workspace.into(),
        },
    );
    o.metadata = meta(name);
    o
}

/// A Workload delivered by registration `registration`, with `(target, environment)`s.
pub fn workload(name: &str, registration: &str, targets: &[(&str, &str)]) -> Workload {
    let mut o = Workload::new(
        name,
        WorkloadSpec {
            deployment_targets: targets
                .iter()
                .map(|(t, env)| DeploymentTargetDetail {
                    name: (*t).to_owned(),
                    labels: Labels::from([("purpose".to_owned(), "test".to_owned())]),
                    spec: DeploymentTargetSpec {
                        environment: (*env).to_owned(),
                        manifests: Labels::from([
                            ("repo".to_owned(), "https://github.com/org/app-gitops".to_owned()),
                            ("branch".to_owned(), (*env).to_owned()),
                            ("path".to_owned(), format!("./{t}")),
                        ]),
                        config_schemas: Vec::new(),
                    },
                })
                .collect(),
            config_schemas: Vec::new(),
        },
    );
    o.metadata = meta(name);
    o.metadata.labels = Some(flux_labels(&format!("{NS}-{registration}")));
    o
}

/// A DeploymentTarget derived from (owned by) `workload`.
pub fn owned_target(workload: &Workload, name: &str, env: &str) -> DeploymentTarget {
    let mut o = declared_target(name, env);
    o.metadata.owner_references = workload.controller_owner_ref(&()).map(|r| vec![r]);
    o.metadata.labels = Some(Labels::from([(labels::WORKLOAD.to_owned(), "hw".to_owned())]));
    o
}

/// A DeploymentTarget declared directly.
pub fn declared_target(name: &str, env: &str) -> DeploymentTarget {
    let mut o = DeploymentTarget::new(
        name,
        DeploymentTargetSpec {
            environment: env.into(),
            manifests: Labels::new(),
            config_schemas: Vec::new(),
        },
    );
    o.metadata = meta(name);
    o
}

/// A SchedulingPolicy selecting every target and cluster type.
pub fn policy(name: &str) -> SchedulingPolicy {
    let mut o = SchedulingPolicy::new(name, SchedulingPolicySpec::default());
    o.spec.cluster_type_selector.label_selector = LabelSelector::default();
    o.metadata = meta(name);
    o
}

/// A RolloutPolicy with one wave of every cluster type.
pub fn rollout_policy(name: &str) -> RolloutPolicy {
    let mut o = RolloutPolicy::new(
        name,
        RolloutPolicySpec {
            waves: vec![kalypso_api::Wave {
                name: "all".into(),
                ..kalypso_api::Wave::default()
            }],
            ..RolloutPolicySpec::default()
        },
    );
    o.metadata = meta(name);
    o
}

/// Environment [`NS`] (in namespace `kalypso`) whose `Ready` has `reason` (`None`: no
/// conditions yet).
pub fn environment(ready: Option<(bool, &str)>) -> kalypso_api::Environment {
    let mut o = kalypso_api::Environment::new(NS, kalypso_api::EnvironmentSpec::default());
    o.metadata = meta(NS);
    o.metadata.namespace = Some("kalypso".to_owned());
    o.status = ready.map(|(status, reason)| kalypso_api::Status {
        conditions: crate::conditions::update(
            &[],
            &[crate::conditions::Desired {
                type_: crate::conditions::READY,
                status,
                reason: reason.to_owned(),
                message: String::new(),
            }],
            &[],
            Some(1),
            &now(),
        ),
    });
    o
}

/// A GitOpsRepo.
pub fn gitops_repo(name: &str) -> GitOpsRepo {
    let mut o = GitOpsRepo::new(
        name,
        GitOpsRepoSpec {
            repo: "https://github.com/org/platform-gitops".into(),
            branch: NS.into(),
            path: ".".into(),
            ..GitOpsRepoSpec::default()
        },
    );
    o.metadata = meta(name);
    o
}

/// A ConfigMap labelled `platform-config: "true"`.
pub fn platform_config(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            labels: Some(Labels::from([(
                labels::PLATFORM_CONFIG.to_owned(),
                "true".to_owned(),
            )])),
            ..meta(name)
        },
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..ConfigMap::default()
    }
}

/// One environment with one workload (`hw`, target `dev`), one cluster type (`large`), a
/// policy scheduling everything, platform config and a GitOpsRepo.
pub fn hello_world_snapshot() -> Snapshot {
    let mut s = Snapshot::new(NS);
    s.cluster_types.push(Arc::new(cluster_type(
        "large",
        "reconciler",
        "namespace",
        "config",
    )));
    s.templates.push(Arc::new(template(
        "reconciler",
        &["kind: Reconciler\nname: {{ .DeploymentTargetName }}\nns: {{ .Namespace }}\n"],
    )));
    s.templates.push(Arc::new(template(
        "namespace",
        &["kind: Namespace\nname: {{ .Namespace }}\n"],
    )));
    s.templates.push(Arc::new(template(
        "config",
        &["kind: ConfigMap\ndata:\n{{ toYaml .ConfigData | indent 2 }}\n"],
    )));
    s.registrations.push(Arc::new(registration("hw", "team-a")));
    s.workloads.push(Arc::new(workload(
        "hw",
        "hw",
        &[("dev", "dev"), ("prod", "prod")],
    )));
    s.policies.push(Arc::new(policy("all")));
    s.gitops_repos.push(Arc::new(gitops_repo("dev")));
    s.config_maps.push(Arc::new(platform_config(
        "platform",
        &[("DB_URL", "postgres://db")],
    )));
    s
}

/// The other end of a mocked `kube::Client`.
pub struct ApiServerVerifier(pub Handle<Request<Body>, Response<Body>>);

/// A mocked client and the verifier that answers its requests.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, NS), ApiServerVerifier(handle))
}

/// One expected request: method, path (and query, if given) must match.
#[derive(Debug)]
pub struct Expected {
    /// `GET`, `PATCH`, ...
    pub method: &'static str,
    /// The path, e.g. `/apis/scheduler.kalypso.io/v1alpha1/namespaces/dev/workloads/hw/status`.
    pub path: String,
}

impl ApiServerVerifier {
    /// Waits for the next request, checks method and path, and returns it with the handle
    /// to answer it. Fails the test if no request comes.
    pub async fn next(&mut self, expected: Expected) -> (serde_json::Value, SendResponse<Response<Body>>) {
        let (request, send) = tokio::time::timeout(std::time::Duration::from_secs(5), self.0.next_request())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {expected:?}"))
            .unwrap_or_else(|| panic!("client dropped before {expected:?}"));
        assert_eq!(request.method().as_str(), expected.method, "{:?}", request.uri());
        assert_eq!(
            request.uri().path(),
            expected.path,
            "{} {}",
            request.method(),
            request.uri()
        );
        let bytes = request.into_body().collect_bytes().await.expect("request body");
        let body = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON request body")
        };
        (body, send)
    }

    /// Answers `send` with `status` and a JSON body.
    pub fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: &serde_json::Value) {
        let response = Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response");
        send.send_response(response);
    }

    /// Expects a request and answers it `200 OK`, echoing the request body (what an API
    /// server returns for a successful apply or patch). Returns the request body.
    pub async fn expect_ok(&mut self, method: &'static str, path: impl Into<String>) -> serde_json::Value {
        let (body, send) = self
            .next(Expected {
                method,
                path: path.into(),
            })
            .await;
        let answer = if body.is_null() || method == "DELETE" {
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}, "code": 200})
        } else {
            body.clone()
        };
        Self::respond(send, StatusCode::OK, &answer);
        body
    }

    /// Expects a request and answers it `200 OK` with `answer`. Returns the request body.
    pub async fn expect_ok_with(
        &mut self,
        method: &'static str,
        path: impl Into<String>,
        answer: &serde_json::Value,
    ) -> serde_json::Value {
        let (body, send) = self
            .next(Expected {
                method,
                path: path.into(),
            })
            .await;
        Self::respond(send, StatusCode::OK, answer);
        body
    }

    /// Expects a request and answers it with an API error of `code`.
    pub async fn expect_error(
        &mut self,
        method: &'static str,
        path: impl Into<String>,
        code: u16,
        reason: &str,
    ) {
        let (_, send) = self
            .next(Expected {
                method,
                path: path.into(),
            })
            .await;
        let status = StatusCode::from_u16(code).expect("status code");
        Self::respond(
            send,
            status,
            &serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("{reason} (mocked)"), "reason": reason, "code": code
            }),
        );
    }

    /// Asserts that no further request arrives within a short time.
    pub async fn expect_nothing_more(mut self) {
        let next = tokio::time::timeout(std::time::Duration::from_millis(200), self.0.next_request()).await;
        if let Ok(Some((request, _))) = next {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
    }
}
