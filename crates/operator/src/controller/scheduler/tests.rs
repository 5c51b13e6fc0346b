//! The scheduler against a mocked API server: what it writes on a first sync, that a
//! settled environment costs no writes, delivery after the debounce, failures, deletions,
//! the optional Assignment objects, and an environment with a RolloutPolicy (not delivered).

use std::sync::Arc;

use kalypso_api::{GitOpsRepoStatus, Status};

use super::*;
use crate::deliver::Recorder;
use crate::fixtures::*;
use crate::metrics::Metrics;

const API: &str = "/apis/scheduler.kalypso.io/v1alpha1/namespaces/dev";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/dev/events";

fn context(
    client: kube::Client,
    publisher: Arc<dyn Publisher>,
    debounce: Duration,
    assignments: bool,
) -> Context {
    Context {
        shared: Shared::new(client, Some("test".into()), Arc::new(Metrics::default())),
        stores: None,
        engine: Arc::new(Engine::new()),
        options: Options {
            assignments,
            ..Options::default()
        },
        publisher,
        debouncer: Mutex::new(Debouncer::new(debounce)),
        resync: Duration::from_secs(300),
        retry_after: Duration::from_secs(30),
        blocked: Mutex::default(),
        reported: Mutex::default(),
        memos: Mutex::default(),
        rollout_refused: Mutex::default(),
    }
}

/// `ctx` (what it remembers between reconciles kept) talking to a new mock API server.
fn on_a_new_api_server(ctx: Context) -> (Context, ApiServerVerifier) {
    let (client, server) = mock_client();
    let ctx = Context {
        shared: Shared::new(client, Some("test".into()), Arc::new(Metrics::default())),
        ..ctx
    };
    (ctx, server)
}

/// The snapshot after the operator has done its work once: derived targets exist, every
/// object carries its condition, and the GitOpsRepo has received the content.
fn settled(mut s: Snapshot, delivered: bool) -> Snapshot {
    let engine = Engine::new();
    let first = desired::desired_state(&s, &engine, Options::default(), &mut InMemory::default());
    for t in &first.targets {
        let mut t = t.clone();
        t.metadata.uid = Some(format!("uid-{}", t.name_any()));
        t.metadata.generation = Some(1);
        s.deployment_targets.push(Arc::new(t));
    }
    let second = desired::desired_state(&s, &engine, Options::default(), &mut InMemory::default());
    let status = |name: &str| {
        let d = second
            .statuses
            .iter()
            .find(|st| st.name == name)
            .unwrap_or_else(|| panic!("no status for {name}"));
        Some(Status {
            conditions: conditions::update(
                &[],
                std::slice::from_ref(&d.desired),
                &[],
                d.target.generation,
                &now(),
            ),
        })
    };
    macro_rules! settle {
        ($field:ident) => {
            s.$field = s
                .$field
                .iter()
                .map(|o| {
                    let mut o = o.as_ref().clone();
                    o.status = status(&o.name_any());
                    Arc::new(o)
                })
                .collect();
        };
    }
    settle!(cluster_types);
    settle!(templates);
    settle!(policies);
    settle!(workloads);
    settle!(deployment_targets);
    if delivered {
        let Deliverable::Ready(content) = &second.delivery else {
            panic!("blocked: {:?}", second.delivery);
        };
        s.gitops_repos = s
            .gitops_repos
            .iter()
            .map(|r| {
                let mut r = r.as_ref().clone();
                r.status = Some(GitOpsRepoStatus {
                    repo_content_hash: Some(content.hash.clone()),
                    conditions: conditions::update(
                        &[],
                        &[Desired::ready("Pushed", "")],
                        &[],
                        Some(1),
                        &now(),
                    ),
                    ..GitOpsRepoStatus::default()
                });
                Arc::new(r)
            })
            .collect();
    }
    s
}

/// Answers every request `200 OK` (echoing its body; an empty list for GETs) until the
/// client is quiet for a second; returns (method, path, body) of each.
async fn record_all(mut server: ApiServerVerifier) -> Vec<(String, String, serde_json::Value)> {
    let mut seen = Vec::new();
    while let Ok(Some((request, send))) =
        tokio::time::timeout(Duration::from_millis(1000), server.0.next_request()).await
    {
        let method = request.method().to_string();
        let path = request.uri().path().to_owned();
        let bytes = request.into_body().collect_bytes().await.expect("body");
        let body: serde_json::Value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("json")
        };
        let answer = match (method.as_str(), &body) {
            ("GET", _) => {
                json!({"apiVersion": "scheduler.kalypso.io/v1alpha1", "kind": "AssignmentList", "metadata": {}, "items": [
                    {"apiVersion": "scheduler.kalypso.io/v1alpha1", "kind": "Assignment",
                     "metadata": {"name": "old", "namespace": "dev"},
                     "spec": {"workload": "w", "deploymentTarget": "t", "clusterType": "c"}}
                ]})
            }
            ("DELETE", _) | (_, serde_json::Value::Null) => {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}, "code": 200})
            }
            (_, b) => {
                let mut b = b.clone();
                if b.get("metadata").is_some() && b["metadata"].get("uid").is_none() {
                    b["metadata"]["uid"] = json!("uid-new");
                }
                b
            }
        };
        ApiServerVerifier::respond(send, http::StatusCode::OK, &answer);
        seen.push((method, path, body));
    }
    seen
}

fn paths(seen: &[(String, String, serde_json::Value)]) -> Vec<String> {
    seen.iter().map(|(m, p, _)| format!("{m} {p}")).collect()
}

async fn status_and_event(server: &mut ApiServerVerifier, plural: &str, name: &str) -> serde_json::Value {
    let body = server
        .expect_ok("PATCH", format!("{API}/{plural}/{name}/status"))
        .await;
    server.expect_ok("POST", EVENTS).await;
    body
}

#[tokio::test]
async fn a_first_sync_derives_targets_reports_conditions_and_waits_for_the_debounce() {
    let (client, mut server) = mock_client();
    let publisher = Arc::new(Recorder::new());
    let ctx = context(client, publisher.clone(), Duration::from_secs(3), false);
    let task = tokio::spawn(async move { sync(hello_world_snapshot(), &ctx).await });

    let dt = server
        .expect_ok("PATCH", format!("{API}/deploymenttargets/hw-dev"))
        .await;
    assert_eq!(dt["kind"], "DeploymentTarget");
    assert_eq!(dt["metadata"]["ownerReferences"][0]["name"], "hw");
    assert_eq!(dt["metadata"]["labels"]["workspace"], "team-a");
    assert_eq!(dt["spec"]["environment"], "dev");

    let ct = status_and_event(&mut server, "clustertypes", "large").await;
    assert_eq!(ct["status"]["conditions"][0]["reason"], "Accepted");
    for t in ["reconciler", "namespace", "config"] {
        status_and_event(&mut server, "templates", t).await;
    }
    let policy = status_and_event(&mut server, "schedulingpolicies", "all").await;
    let c = &policy["status"]["conditions"][0];
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some("AssignmentsCreated"))
    );
    let w = status_and_event(&mut server, "workloads", "hw").await;
    assert_eq!(w["status"]["conditions"][0]["reason"], "DeploymentTargetsCreated");

    let repo = server
        .expect_ok("PATCH", format!("{API}/gitopsrepoes/dev/status"))
        .await;
    let c = &repo["status"]["conditions"][0];
    assert_eq!(
        (c["type"].as_str(), c["reason"].as_str()),
        (Some("ReadyToPR"), Some("ReadyForPR"))
    );

    let action = task.await.expect("join").expect("sync");
    assert_eq!(action, Action::requeue(Duration::from_secs(3)));
    assert!(
        publisher.requests().is_empty(),
        "nothing is delivered before the debounce"
    );
    server.expect_nothing_more().await;
}

#[tokio::test]
async fn a_settled_environment_costs_no_writes() {
    let (client, server) = mock_client();
    let ctx = context(client, Arc::new(Recorder::new()), Duration::from_secs(3), false);
    let action = sync(settled(hello_world_snapshot(), true), &ctx)
        .await
        .expect("sync");
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    server.expect_nothing_more().await;
}

#[tokio::test]
async fn new_content_is_delivered_once_stable_and_recorded_in_the_status() {
    let (client, server) = mock_client();
    let publisher = Arc::new(Recorder::new());
    let ctx = context(client, publisher.clone(), Duration::ZERO, false);
    let recorder = tokio::spawn(record_all(server));
    let action = sync(settled(hello_world_snapshot(), false), &ctx)
        .await
        .expect("sync");
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    let seen = recorder.await.expect("join");
    assert_eq!(
        paths(&seen),
        [
            format!("PATCH {API}/gitopsrepoes/dev/status"),
            format!("POST {EVENTS}")
        ]
    );
    let status = &seen[0].2["status"];
    assert_eq!(status["repoContentHash"].as_str().map(str::len), Some(32));
    assert_eq!(status["lastCommit"], "commit-1");
    assert_eq!(status["conditions"][0]["reason"], "Pushed");
    let requests = publisher.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].environment, "dev");
    assert_eq!(requests[0].spec.branch, "dev");
    assert_eq!(requests[0].content.packages.len(), 1);
}

#[tokio::test]
async fn a_failed_delivery_is_reported_and_retried() {
    let (client, server) = mock_client();
    let ctx = Arc::new(context(
        client,
        Arc::new(Recorder::failing("remote hung up")),
        Duration::ZERO,
        false,
    ));
    let recorder = tokio::spawn(record_all(server));
    let err = sync(settled(hello_world_snapshot(), false), &ctx)
        .await
        .expect_err("fails");
    assert_eq!(err.metric_label(), "Publish");
    assert!(err.to_string().contains("GitOpsRepo dev"), "{err}");
    let seen = recorder.await.expect("join");
    let status = &seen[0].2["status"]["conditions"][0];
    assert_eq!(status["reason"], "UpdateFailed");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("remote hung up")
    );
    assert_eq!(seen[1].2["type"], "Warning");
    let ns = Arc::new(Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("dev".into()),
            ..Default::default()
        },
        ..Default::default()
    });
    assert_eq!(
        error_policy(ns, &err, ctx),
        Action::requeue(Duration::from_secs(30))
    );
}

#[tokio::test]
async fn a_broken_template_blocks_the_environment_and_says_where() {
    let (client, server) = mock_client();
    let publisher = Arc::new(Recorder::new());
    let ctx = context(client, publisher.clone(), Duration::ZERO, false);
    let mut s = settled(hello_world_snapshot(), true);
    let mut broken = template("reconciler", &["{{ .Broken "]);
    broken.status = s.templates[0].status.clone();
    s.templates[0] = Arc::new(broken);
    let recorder = tokio::spawn(record_all(server));
    sync(s, &ctx).await.expect("sync");
    let seen = recorder.await.expect("join");
    let find = |path: &str| {
        seen.iter()
            .find(|(_, p, _)| p == path)
            .map(|(_, _, b)| b["status"]["conditions"][0].clone())
            .unwrap_or_else(|| panic!("no request to {path}: {:?}", paths(&seen)))
    };
    let t = find(&format!("{API}/templates/reconciler/status"));
    assert_eq!(
        (t["status"].as_str(), t["reason"].as_str()),
        (Some("False"), Some("UpdateFailed"))
    );
    let repo = find(&format!("{API}/gitopsrepoes/dev/status"));
    assert_eq!(repo["reason"], "Blocked");
    assert!(
        repo["message"]
            .as_str()
            .unwrap_or_default()
            .contains("block delivery")
    );
    assert!(publisher.requests().is_empty());
    assert_eq!(ctx.shared.metrics.blocked_environments.get(), 1);
    // The failures go to the GitOps repository's issues, once per distinct set.
    let reports = publisher.reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].gitops_repo, "dev");
    assert!(!reports[0].failures.is_empty());
}

#[tokio::test]
async fn failures_are_reported_once_and_closed_when_fixed() {
    let (client, server) = mock_client();
    let publisher = Arc::new(Recorder::new());
    let ctx = context(client, publisher.clone(), Duration::from_secs(3), false);
    let recorder = tokio::spawn(record_all(server));
    let mut broken = settled(hello_world_snapshot(), true);
    broken.templates[0] = Arc::new(template("reconciler", &["{{ .Broken "]));
    sync(broken.clone(), &ctx).await.expect("first");
    sync(broken, &ctx).await.expect("second");
    sync(settled(hello_world_snapshot(), true), &ctx)
        .await
        .expect("fixed");
    sync(settled(hello_world_snapshot(), true), &ctx)
        .await
        .expect("still fixed");
    drop(recorder);
    let reports = publisher.reports();
    assert_eq!(reports.len(), 2, "{reports:?}");
    assert!(!reports[0].failures.is_empty());
    assert!(
        reports[1].failures.is_empty(),
        "issues are closed once everything renders"
    );
}

#[tokio::test]
async fn targets_a_workload_no_longer_declares_are_deleted() {
    let (client, server) = mock_client();
    let ctx = context(client, Arc::new(Recorder::new()), Duration::from_secs(3), false);
    let mut s = settled(hello_world_snapshot(), true);
    let w = s.workloads[0].as_ref().clone();
    s.deployment_targets
        .push(Arc::new(owned_target(&w, "hw-old", "dev")));
    let recorder = tokio::spawn(record_all(server));
    sync(s, &ctx).await.expect("sync");
    assert_eq!(
        paths(&recorder.await.expect("join")),
        [format!("DELETE {API}/deploymenttargets/hw-old")]
    );
}

#[tokio::test]
async fn a_changed_workload_updates_its_target() {
    let (client, server) = mock_client();
    let ctx = context(client, Arc::new(Recorder::new()), Duration::from_secs(3), false);
    let mut s = settled(hello_world_snapshot(), true);
    let mut w = s.workloads[0].as_ref().clone();
    w.spec.deployment_targets[0]
        .spec
        .manifests
        .insert("path".into(), "./moved".into());
    s.workloads[0] = Arc::new(w);
    let recorder = tokio::spawn(record_all(server));
    sync(s, &ctx).await.expect("sync");
    let seen = recorder.await.expect("join");
    // Only the target changes: the templates do not use the path, so the content (and the
    // GitOpsRepo) stay as they are.
    assert_eq!(paths(&seen), [format!("PATCH {API}/deploymenttargets/hw-dev")]);
    assert_eq!(seen[0].2["spec"]["manifests"]["path"], "./moved");
}

#[tokio::test]
async fn api_failures_name_the_object() {
    let (client, mut server) = mock_client();
    let ctx = context(client, Arc::new(Recorder::new()), Duration::from_secs(3), false);
    let task = tokio::spawn(async move { sync(hello_world_snapshot(), &ctx).await });
    server
        .expect_error(
            "PATCH",
            format!("{API}/deploymenttargets/hw-dev"),
            403,
            "Forbidden",
        )
        .await;
    let err = task.await.expect("join").expect_err("fails");
    assert_eq!(err.metric_label(), "Kube");
    assert!(err.to_string().contains("DeploymentTarget dev/hw-dev"), "{err}");
}

#[tokio::test]
async fn assignments_are_written_only_when_asked_for() {
    let (client, server) = mock_client();
    let ctx = context(client, Arc::new(Recorder::new()), Duration::from_secs(3), true);
    let recorder = tokio::spawn(record_all(server));
    sync(settled(hello_world_snapshot(), true), &ctx)
        .await
        .expect("sync");
    let seen = recorder.await.expect("join");
    let p = paths(&seen);
    assert_eq!(p[0], format!("PATCH {API}/assignments/hw-hw-dev-large"));
    assert_eq!(p[1], format!("PATCH {API}/assignments/hw-hw-dev-large/status"));
    assert!(p.contains(&format!("PATCH {API}/assignmentpackages/hw-hw-dev-large")));
    assert!(p.contains(&format!("GET {API}/assignments")));
    assert_eq!(p.last(), Some(&format!("DELETE {API}/assignments/old")));
    let package = seen
        .iter()
        .find(|(_, path, _)| path.ends_with("assignmentpackages/hw-hw-dev-large"))
        .map(|(_, _, b)| b.clone())
        .expect("package");
    assert_eq!(package["metadata"]["ownerReferences"][0]["kind"], "Assignment");
    assert_eq!(package["metadata"]["labels"]["deployment-target"], "hw-dev");
}

#[test]
fn targets_are_applied_only_when_they_differ() {
    let s = settled(hello_world_snapshot(), true);
    let p = desired::desired_state(&s, &Engine::new(), Options::default(), &mut InMemory::default());
    let existing = s.deployment_targets[0].as_ref();
    assert!(!needs_apply(Some(existing), &p.targets[0]));
    assert!(needs_apply(None, &p.targets[0]));
    let mut relabelled = existing.clone();
    relabelled.metadata.labels = Some(Default::default());
    assert!(needs_apply(Some(&relabelled), &p.targets[0]));
}

/// `status.conditions` of a status patch, as the object has them after the write.
fn written_conditions(
    body: &serde_json::Value,
) -> Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    serde_json::from_value(body["status"]["conditions"].clone()).expect("conditions")
}

#[tokio::test]
async fn a_rollout_policy_stops_the_delivery_with_flux_until_it_is_removed() {
    const ENVIRONMENT: &str =
        "/apis/scheduler.kalypso.io/v1alpha1/namespaces/kalypso/environments/dev/status";
    const ENVIRONMENT_EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/kalypso/events";
    let publisher = Arc::new(Recorder::new());
    let (client, server) = mock_client();
    // The Flux source (no `external`): the sources controller made the Environment Ready.
    let ctx = context(client, publisher.clone(), Duration::ZERO, false);
    let mut s = settled(hello_world_snapshot(), false);
    s.environment = Some(Arc::new(environment(Some((
        true,
        conditions::FLUX_RESOURCES_CREATED,
    )))));
    s.rollout_policies.push(Arc::new(rollout_policy("rings")));

    // The namespace holds a RolloutPolicy: nothing is delivered, and both the Environment
    // and the GitOpsRepo say why, with a Warning each.
    let recorder = tokio::spawn(record_all(server));
    let action = sync(s.clone(), &ctx).await.expect("sync");
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    let seen = recorder.await.expect("join");
    assert_eq!(
        paths(&seen),
        [
            format!("PATCH {ENVIRONMENT}"),
            format!("POST {ENVIRONMENT_EVENTS}"),
            format!("PATCH {API}/gitopsrepoes/dev/status"),
            format!("POST {EVENTS}"),
        ]
    );
    assert!(publisher.requests().is_empty(), "nothing is delivered");
    for (i, (_, _, body)) in seen.iter().enumerate().step_by(2) {
        let c = &body["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["status"].as_str()),
            (Some("Ready"), Some("False"))
        );
        assert_eq!(c["reason"], conditions::ROLLOUT_UNSUPPORTED);
        let message = c["message"].as_str().unwrap_or_default();
        assert!(message.contains("RolloutPolicy dev/rings"), "{message}");
        assert!(message.contains("--source git --hub URL"), "{message}");
        let event = &seen[i + 1].2;
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["reason"], conditions::ROLLOUT_UNSUPPORTED);
    }
    assert!(
        ctx.rollout_refused.lock().expect("lock").contains("dev"),
        "logged as refused"
    );

    // The next reconcile (the objects now carry those conditions) writes nothing.
    let mut env = environment(None);
    env.status = Some(Status {
        conditions: written_conditions(&seen[0].2),
    });
    s.environment = Some(Arc::new(env));
    let mut repo = s.gitops_repos[0].as_ref().clone();
    repo.status = Some(GitOpsRepoStatus {
        conditions: written_conditions(&seen[2].2),
        ..GitOpsRepoStatus::default()
    });
    s.gitops_repos = vec![Arc::new(repo)];
    let (ctx, server) = on_a_new_api_server(ctx);
    sync(s.clone(), &ctx).await.expect("sync");
    server.expect_nothing_more().await;
    assert!(publisher.requests().is_empty());

    // The policy removed: the environment is delivered, and `Ready` is the sources
    // controller's again.
    s.rollout_policies.clear();
    let (ctx, server) = on_a_new_api_server(ctx);
    let recorder = tokio::spawn(record_all(server));
    sync(s, &ctx).await.expect("sync");
    let seen = recorder.await.expect("join");
    assert_eq!(
        paths(&seen),
        [
            format!("PATCH {ENVIRONMENT}"),
            format!("POST {ENVIRONMENT_EVENTS}"),
            format!("PATCH {API}/gitopsrepoes/dev/status"),
            format!("POST {EVENTS}"),
        ]
    );
    let c = &seen[0].2["status"]["conditions"][0];
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("True"), Some(conditions::FLUX_RESOURCES_CREATED))
    );
    assert_eq!(seen[2].2["status"]["conditions"][0]["reason"], "Pushed");
    let requests = publisher.requests();
    assert_eq!(requests.len(), 1, "delivered once the policy is gone");
    assert_eq!(requests[0].content.packages.len(), 1);
    assert!(!ctx.rollout_refused.lock().expect("lock").contains("dev"));
}

#[tokio::test]
async fn a_rollout_policy_stops_the_delivery_with_the_external_source_too() {
    const ENVIRONMENT: &str =
        "/apis/scheduler.kalypso.io/v1alpha1/namespaces/kalypso/environments/dev/status";
    let publisher = Arc::new(Recorder::new());
    let (client, server) = mock_client();
    let mut ctx = context(client, publisher.clone(), Duration::ZERO, false);
    ctx.options.external = true;
    let mut s = settled(hello_world_snapshot(), false);
    s.environment = Some(Arc::new(environment(None)));
    s.rollout_policies.push(Arc::new(rollout_policy("rings")));
    let recorder = tokio::spawn(record_all(server));
    sync(s, &ctx).await.expect("sync");
    let seen = recorder.await.expect("join");
    assert!(publisher.requests().is_empty(), "nothing is delivered");
    let ready = |path: &str| {
        let (_, _, body) = seen
            .iter()
            .find(|(m, p, _)| m == "PATCH" && p == path)
            .unwrap_or_else(|| panic!("no {path} in {:?}", paths(&seen)));
        let c = &body["status"]["conditions"][0];
        (c["status"].clone(), c["reason"].clone())
    };
    let refused = (json!("False"), json!(conditions::ROLLOUT_UNSUPPORTED));
    assert_eq!(ready(ENVIRONMENT), refused);
    assert_eq!(ready(&format!("{API}/gitopsrepoes/dev/status")), refused);
}
