//! The daemon: its router called in-process (health, readiness, metrics, status, webhook
//! signatures), polls against local repositories (render only when inputs change), and a
//! short-lived run of the whole loop with a webhook and a graceful shutdown.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use kalypso_git::redact::Secret;
use kalypso_git::signature::sign;
use kalypso_server::{AppState, Config, Daemon, EnvPoll, app};
use kalypso_testkit::{branch_files, commit_count, init_bare, runtime, write_files};
use tower::ServiceExt;

async fn call(state: &AppState, request: Request<Body>) -> (StatusCode, String, Option<String>) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap(), content_type)
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

fn webhook(event: &str, body: &str, signature: Option<&str>) -> Request<Body> {
    let mut r = Request::post("/webhook").header("x-github-event", event);
    if let Some(s) = signature {
        r = r.header("x-hub-signature-256", s);
    }
    r.body(Body::from(body.to_owned())).unwrap()
}

#[test]
fn health_readiness_and_metrics() {
    let rt = runtime();
    rt.block_on(async {
        let state = AppState::new(None);
        assert_eq!(call(&state, get("/healthz")).await.0, StatusCode::OK);
        assert_eq!(
            call(&state, get("/readyz")).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        state.set_ready();
        assert_eq!(call(&state, get("/readyz")).await.0, StatusCode::OK);

        let dev = kalypso_server::metrics::Metrics::env("dev");
        state.metrics().renders.get_or_create(&dev).inc();
        state
            .metrics()
            .last_success
            .get_or_create(&dev)
            .set(1_700_000_000.0);
        let (status, text, content_type) = call(&state, get("/metrics")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(content_type.unwrap().starts_with("application/openmetrics-text"));
        assert!(
            text.contains("kalypso_renders_total{environment=\"dev\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE kalypso_last_success_timestamp_seconds gauge"),
            "{text}"
        );
        assert!(
            text.contains("kalypso_last_success_timestamp_seconds{environment=\"dev\"} 1700000000"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        assert_eq!(call(&state, get("/nope")).await.0, StatusCode::NOT_FOUND);
    });
}

#[test]
fn webhook_signatures_are_checked_when_a_secret_is_set() {
    let rt = runtime();
    rt.block_on(async {
        let body = r#"{"ref":"refs/heads/dev"}"#;
        let state = AppState::new(Some(Secret::new("webhook-secret-value")));
        let good = sign(b"webhook-secret-value", body.as_bytes());
        let bad = sign(b"another-secret", body.as_bytes());
        assert_eq!(
            call(&state, webhook("push", body, None)).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&state, webhook("push", body, Some(&bad))).await.0,
            StatusCode::UNAUTHORIZED
        );
        let tampered = sign(b"webhook-secret-value", b"{\"ref\":\"refs/heads/prod\"}");
        assert_eq!(
            call(&state, webhook("push", body, Some(&tampered))).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(
                &state,
                webhook("ping", "{}", Some(&sign(b"webhook-secret-value", b"{}")))
            )
            .await
            .0,
            StatusCode::OK
        );
        assert_eq!(
            call(&state, webhook("push", body, Some(&good))).await.0,
            StatusCode::ACCEPTED
        );
        // The accepted push asked for a poll.
        tokio::time::timeout(Duration::from_secs(10), state.triggered())
            .await
            .expect("a poll was triggered");
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"rejected\"} 3"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"accepted\"} 1"),
            "{metrics}"
        );

        // Without a secret, unsigned pushes are accepted.
        let open = AppState::new(None);
        assert_eq!(
            call(&open, webhook("push", body, None)).await.0,
            StatusCode::ACCEPTED
        );
    });
}

/// A POST of `body` to `/webhook` with `headers`, over loopback HTTP.
async fn raw_webhook(addr: std::net::SocketAddr, headers: &[(&str, &str)], body: &str) -> String {
    let headers: String = headers.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    raw_request(
        addr,
        format!(
            "POST /webhook HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

#[test]
fn gitlab_push_webhooks_are_checked_by_their_token_before_anything_is_done() {
    let rt = runtime();
    rt.block_on(async {
        let state = AppState::new(Some(Secret::new("gitlab-secret-token")));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = state.clone();
        tokio::spawn(async move { axum::serve(listener, app(served)).await });
        let push = include_str!("data/gitlab-push.json");
        let mut triggers = state.triggers();
        triggers.mark_unchanged();
        let status = |response: String| response.split(' ').nth(1).unwrap_or_default().to_owned();

        // Refused, and nothing triggered: no token, a wrong one, a GitHub request with the token.
        for headers in [
            &[("X-Gitlab-Event", "Push Hook")][..],
            &[
                ("X-Gitlab-Event", "Push Hook"),
                ("X-Gitlab-Token", "gitlab-secret-tokeN"),
            ][..],
            &[
                ("X-Gitlab-Event", "Push Hook"),
                ("X-Gitlab-Token", "gitlab-secret-toke"),
            ][..],
            &[
                ("X-GitHub-Event", "push"),
                ("X-Gitlab-Token", "gitlab-secret-token"),
            ][..],
        ] {
            let response = raw_webhook(addr, headers, push).await;
            assert_eq!(status(response.clone()), "401", "{headers:?}: {response}");
        }
        assert!(
            !triggers.has_changed().unwrap(),
            "a refused webhook triggers nothing"
        );

        // Other events and payloads that are not pushes trigger nothing either.
        let token = ("X-Gitlab-Token", "gitlab-secret-token");
        let response = raw_webhook(addr, &[("X-Gitlab-Event", "Merge Request Hook"), token], "{}").await;
        assert_eq!(status(response.clone()), "200", "{response}");
        assert!(response.ends_with("event ignored\n"), "{response}");
        let tag = push.replace("\"object_kind\": \"push\"", "\"object_kind\": \"tag_push\"");
        let response = raw_webhook(addr, &[("X-Gitlab-Event", "Push Hook"), token], &tag).await;
        assert_eq!(status(response.clone()), "400", "{response}");
        assert!(!triggers.has_changed().unwrap());

        // GitLab's push event with the right token: every environment polls now.
        let response = raw_webhook(addr, &[("X-Gitlab-Event", "Push Hook"), token], push).await;
        assert_eq!(status(response.clone()), "202", "{response}");
        tokio::time::timeout(Duration::from_secs(10), triggers.changed())
            .await
            .expect("a poll was triggered")
            .unwrap();
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"rejected\"} 4"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"invalid\"} 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"accepted\"} 1"),
            "{metrics}"
        );
    });
}

#[test]
fn gitea_push_webhooks_are_checked_by_their_signature() {
    let rt = runtime();
    rt.block_on(async {
        let secret = "gitea-webhook-secret";
        let state = AppState::new(Some(Secret::new(secret)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = state.clone();
        tokio::spawn(async move { axum::serve(listener, app(served)).await });
        let push = include_str!("data/gitea-push.json");
        let mut triggers = state.triggers();
        triggers.mark_unchanged();
        let status = |response: String| response.split(' ').nth(1).unwrap_or_default().to_owned();
        // Gitea's signature is the bare hex of the body's HMAC-SHA256.
        let good = sign(secret.as_bytes(), push.as_bytes())
            .trim_start_matches("sha256=")
            .to_owned();
        let wrong_key = sign(b"another-secret", push.as_bytes())
            .trim_start_matches("sha256=")
            .to_owned();
        let other_body = sign(secret.as_bytes(), b"{}")
            .trim_start_matches("sha256=")
            .to_owned();
        let prefixed = sign(secret.as_bytes(), push.as_bytes());

        // Refused, and nothing triggered: no signature, another key, another body, GitHub's
        // prefixed form in Gitea's header, the secret itself.
        for signature in [
            None,
            Some(&*wrong_key),
            Some(&*other_body),
            Some(&*prefixed),
            Some(secret),
        ] {
            let mut headers = vec![("X-Gitea-Event", "push")];
            if let Some(signature) = signature {
                headers.push(("X-Gitea-Signature", signature));
            }
            let response = raw_webhook(addr, &headers, push).await;
            assert_eq!(status(response.clone()), "401", "{signature:?}: {response}");
            assert!(response.ends_with("invalid signature\n"), "{response}");
        }
        assert!(
            !triggers.has_changed().unwrap(),
            "a refused webhook triggers nothing"
        );

        // Signed, but not a push: ignored.
        let pr = sign(secret.as_bytes(), b"{}")
            .trim_start_matches("sha256=")
            .to_owned();
        let response = raw_webhook(
            addr,
            &[("X-Gitea-Event", "pull_request"), ("X-Gitea-Signature", &pr)],
            "{}",
        )
        .await;
        assert_eq!(status(response.clone()), "200", "{response}");
        assert!(!triggers.has_changed().unwrap());

        // Gitea's push, as Gitea sends it (with GitHub's headers too): polls now.
        let response = raw_webhook(
            addr,
            &[
                ("X-Gitea-Event", "push"),
                ("X-GitHub-Event", "push"),
                ("X-Gitea-Signature", &good),
                ("X-Hub-Signature-256", &prefixed),
            ],
            push,
        )
        .await;
        assert_eq!(status(response.clone()), "202", "{response}");
        tokio::time::timeout(Duration::from_secs(10), triggers.changed())
            .await
            .expect("a poll was triggered")
            .unwrap();
        triggers.mark_unchanged();
        // Forgejo's own headers are accepted too.
        let response = raw_webhook(
            addr,
            &[("X-Forgejo-Event", "push"), ("X-Forgejo-Signature", &good)],
            push,
        )
        .await;
        assert_eq!(status(response.clone()), "202", "{response}");
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"rejected\"} 5"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"accepted\"} 2"),
            "{metrics}"
        );
    });
}

#[test]
fn azure_devops_service_hooks_are_checked_by_their_basic_credentials() {
    use base64::Engine as _;
    let rt = runtime();
    rt.block_on(async {
        let secret = "azure-hook-password";
        let state = AppState::new(Some(Secret::new(secret)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = state.clone();
        tokio::spawn(async move { axum::serve(listener, app(served)).await });
        let push = include_str!("data/azure-devops-push.json");
        let mut triggers = state.triggers();
        triggers.mark_unchanged();
        let status = |response: String| response.split(' ').nth(1).unwrap_or_default().to_owned();
        let basic = |user_password: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(user_password)
            )
        };

        // Refused: no credentials, a wrong password, the secret as the user name, garbage.
        for authorization in [
            None,
            Some(basic("kalypso:azure-hook-passwort")),
            Some(basic("azure-hook-password:")),
            Some("Basic !!!".to_owned()),
        ] {
            let headers: Vec<(&str, &str)> = authorization
                .iter()
                .map(|a| ("Authorization", a.as_str()))
                .collect();
            let response = raw_webhook(addr, &headers, push).await;
            assert_eq!(status(response.clone()), "401", "{authorization:?}: {response}");
        }
        assert!(
            !triggers.has_changed().unwrap(),
            "a refused webhook triggers nothing"
        );

        // Authenticated, but not a push (a pull request was created): ignored.
        let good = basic(&format!("kalypso:{secret}"));
        let created = push.replace("\"git.push\"", "\"git.pullrequest.created\"");
        let response = raw_webhook(addr, &[("Authorization", &good)], &created).await;
        assert_eq!(status(response.clone()), "200", "{response}");
        assert!(response.ends_with("event ignored\n"), "{response}");
        assert!(!triggers.has_changed().unwrap());

        // The push, with the service hook's credentials (any user name): polls now.
        let response = raw_webhook(addr, &[("Authorization", &good)], push).await;
        assert_eq!(status(response.clone()), "202", "{response}");
        tokio::time::timeout(Duration::from_secs(10), triggers.changed())
            .await
            .expect("a poll was triggered")
            .unwrap();
        let empty_user = basic(&format!(":{secret}"));
        let response = raw_webhook(addr, &[("Authorization", &empty_user)], push).await;
        assert_eq!(status(response.clone()), "202", "{response}");
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"rejected\"} 4"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_webhooks_total{result=\"accepted\"} 2"),
            "{metrics}"
        );
    });
}

#[test]
fn azure_devops_and_gitea_pushes_poll_without_a_secret() {
    let rt = runtime();
    rt.block_on(async {
        let state = AppState::new(None);
        for request in [
            Request::post("/webhook")
                .header("x-gitea-event", "push")
                .body(Body::from(include_str!("data/gitea-push.json")))
                .unwrap(),
            Request::post("/webhook")
                .body(Body::from(include_str!("data/azure-devops-push.json")))
                .unwrap(),
        ] {
            let (status, text, _) = call(&state, request).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{text}");
        }
        // Another service hook event is not a push.
        let created = include_str!("data/azure-devops-push.json")
            .replace("\"git.push\"", "\"git.pullrequest.created\"");
        let (status, text, _) = call(
            &state,
            Request::post("/webhook").body(Body::from(created)).unwrap(),
        )
        .await;
        assert_eq!((status, text.as_str()), (StatusCode::OK, "event ignored\n"));
    });
}

const TEMPLATES: &[(&str, &str)] = &[
    ("reconciler", "reconciler"),
    ("namespace", "namespace"),
    ("config", "config"),
];

/// A control plane, a workload repository and a GitOps repository, all local.
struct Repos {
    dir: tempfile::TempDir,
    control_plane: PathBuf,
    gitops: PathBuf,
}

fn template(name: &str, kind: &str, text: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: {name}\nspec:\n  type: {kind}\n  manifests:\n    - |\n      {text}\n"
    )
}

fn repos() -> Repos {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = dir.path().join("control-plane.git");
    let workload = dir.path().join("app.git");
    let gitops = dir.path().join("gitops.git");
    for r in [&control_plane, &workload, &gitops] {
        init_bare(r);
    }
    write_files(
        &workload,
        "main",
        &[(
            "workload.yaml",
            Some(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Workload\nmetadata:\n  name: app\nspec:\n  deploymentTargets:\n    - name: t\n      environment: dev\n      manifests: {}\n",
            ),
        )],
        "workload",
    );
    let mut main: Vec<(String, String)> = TEMPLATES
        .iter()
        .map(|(n, k)| {
            (
                format!("templates/{n}.yaml"),
                template(n, k, &format!("kind: {n}")),
            )
        })
        .collect();
    main.push((
        ".environments/dev.yaml".into(),
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: dev\nspec:\n  controlPlane:\n    repo: x\n    branch: dev\n    path: .\n".into(),
    ));
    main.push((
        "registrations.yaml".into(),
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: WorkloadRegistration\nmetadata:\n  name: app\nspec:\n  workload:\n    repo: file://{}\n    branch: main\n    path: .\n  workspace: team\n",
            workload.display()
        ),
    ));
    let main_refs: Vec<(&str, Option<&str>)> =
        main.iter().map(|(p, c)| (p.as_str(), Some(c.as_str()))).collect();
    write_files(&control_plane, "main", &main_refs, "main");
    write_files(
        &control_plane,
        "dev",
        &[
            (
                "ct.yaml",
                Some(
                    "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: small\nspec:\n  reconciler: reconciler\n  namespaceService: namespace\n  configType: config\n",
                ),
            ),
            (
                "policy.yaml",
                Some(
                    "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulingPolicy\nmetadata:\n  name: all\nspec:\n  deploymentTargetSelector: {labelSelector: {}}\n  clusterTypeSelector: {labelSelector: {}}\n",
                ),
            ),
            (
                "gitops-repo.yaml",
                Some(&format!(
                    "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: dev\nspec:\n  repo: {}\n  branch: dev\n  path: .\n",
                    gitops.display()
                )),
            ),
        ],
        "dev",
    );
    Repos {
        dir,
        control_plane,
        gitops,
    }
}

fn config(repos: &Repos, cache: &Path) -> Config {
    let mut config = Config::new(repos.control_plane.display().to_string());
    config.cache_dir = Some(cache.to_owned());
    config.interval = Duration::from_secs(3600);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.auth.token_env = Some("KALYPSO_TEST_NO_TOKEN".into());
    config.webhook.secret_env = Some("KALYPSO_TEST_NO_SECRET".into());
    config
}

#[test]
fn polls_render_only_when_inputs_change() {
    let rt = runtime();
    let repos = repos();
    let daemon = Daemon::new(
        &config(&repos, &repos.dir.path().join("cache")),
        rt.handle().clone(),
    )
    .unwrap();
    let state = daemon.state();
    rt.block_on(async {
        let first = daemon.poll_once().await;
        assert_eq!(first.error, None);
        assert!(matches!(&first.environments[..], [(env, EnvPoll::Delivered(_))] if env == "dev"), "{first:?}");
        assert!(state.is_ready());
        assert_eq!(commit_count(&repos.gitops, "dev"), 1);
        assert!(branch_files(&repos.gitops, "dev").contains_key("small/app-t/reconciler.yaml"));

        let second = daemon.poll_once().await;
        assert_eq!(second.environments, [("dev".to_owned(), EnvPoll::Unchanged)]);

        write_files(&repos.control_plane, "main", &[("templates/reconciler.yaml", Some(&template("reconciler", "reconciler", "kind: v2")))], "v2");
        let third = daemon.poll_once().await;
        assert!(matches!(&third.environments[..], [(_, EnvPoll::Delivered(_))]), "{third:?}");
        assert_eq!(commit_count(&repos.gitops, "dev"), 2);

        let metrics = call(&state, get("/metrics")).await.1;
        assert!(metrics.contains("kalypso_renders_total{environment=\"dev\"} 2"), "{metrics}");
        assert!(metrics.contains("kalypso_polls_total 3"), "{metrics}");
        assert!(metrics.contains("kalypso_assignments{environment=\"dev\"} 1"), "{metrics}");
        assert!(metrics.contains("kalypso_deliveries_total{environment=\"dev\",result=\"committed\"} 2"), "{metrics}");
        assert!(!metrics.contains("kalypso_last_success_timestamp_seconds{environment=\"dev\"} 0"), "{metrics}");
        let status = call(&state, get("/status")).await.1;
        assert!(status.contains("\"result\":\"delivered\""), "{status}");

        // A broken environment is counted once per input change and not retried meanwhile.
        write_files(&repos.control_plane, "dev", &[("ct.yaml", Some("apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: small\nspec:\n  reconciler: gone\n  namespaceService: namespace\n  configType: config\n"))], "break");
        let broken = daemon.poll_once().await;
        assert!(matches!(&broken.environments[..], [(_, EnvPoll::RenderFailed(1))]), "{broken:?}");
        assert_eq!(daemon.poll_once().await.environments, [("dev".to_owned(), EnvPoll::Unchanged)]);
        let status = call(&state, get("/status")).await.1;
        assert!(status.contains("\"result\":\"render_failed\""), "{status}");
        assert!(status.contains("\"diagnostics\":[\"error["), "/status says why: {status}");
        assert!(status.contains("gone"), "/status names the missing template: {status}");
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(metrics.contains("kalypso_failures_total{environment=\"dev\",result=\"render\"} 1"), "{metrics}");
        assert_eq!(commit_count(&repos.gitops, "dev"), 2);
    });
}

#[test]
fn a_poll_with_nothing_moved_fetches_nothing_even_in_a_new_process() {
    let rt = runtime();
    let repos = repos();
    let cache = repos.dir.path().join("cache");
    let first = Daemon::new(&config(&repos, &cache), rt.handle().clone()).unwrap();
    rt.block_on(async {
        let polled = first.poll_once().await;
        assert!(
            matches!(&polled.environments[..], [(_, EnvPoll::Delivered(_))]),
            "{polled:?}"
        );
    });
    drop(first);
    let head = kalypso_testkit::rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
    // The mirrors are gone: only the branch listings and the delivery state can answer.
    let mirrors = cache.join("serve").join("dev");
    let discovery = cache.join("serve").join("_environments");
    for dir in [&mirrors, &discovery] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_name() != "state" {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
    }
    // The first daemon's last blocking task may still hold the mirrors' lock for a moment
    // after it is dropped (a new process would not share its locks at all).
    let since = std::time::Instant::now();
    let daemon = loop {
        match Daemon::new(&config(&repos, &cache), rt.handle().clone()) {
            Err(kalypso_server::daemon::Error::Mirrors(_)) if since.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => break other.unwrap(),
        }
    };
    let state = daemon.state();
    rt.block_on(async {
        let polled = daemon.poll_once().await;
        assert_eq!(polled.environments, [("dev".to_owned(), EnvPoll::Unchanged)]);
        let left: Vec<_> = std::fs::read_dir(&mirrors)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["state"], "nothing was fetched");
        let left: Vec<_> = std::fs::read_dir(&discovery)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["state"], "the environments were listed without a fetch");
        assert!(state.is_ready());
        let status = state.status("dev").unwrap();
        assert_eq!(status.result, "delivered");
        assert!(
            status.detail.contains(&format!("up to date at {}", &head[..12])),
            "{status:?}"
        );

        // A moved environment branch is fetched, rendered and delivered.
        write_files(
            &repos.control_plane,
            "dev",
            &[("notes.yaml", Some("# a note\n"))],
            "note",
        );
        let polled = daemon.poll_once().await;
        assert!(
            matches!(&polled.environments[..], [(_, EnvPoll::Delivered(_))]),
            "{polled:?}"
        );
        assert_eq!(
            daemon.poll_once().await.environments,
            [("dev".to_owned(), EnvPoll::Unchanged)]
        );
    });
}

#[test]
fn unreadable_control_plane_is_not_ready() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(format!("file://{}", dir.path().join("missing.git").display()));
    config.cache_dir = Some(dir.path().join("cache"));
    config.retry = Some(kalypso_git::RetryPolicy::immediate(1));
    config.webhook.secret_env = Some("KALYPSO_TEST_NO_SECRET".into());
    let daemon = Daemon::new(&config, rt.handle().clone()).unwrap();
    let report = rt.block_on(daemon.poll_once());
    assert!(report.error.unwrap().contains("missing.git"));
    assert!(!daemon.state().is_ready());
}

#[test]
fn the_loop_polls_on_webhooks_and_shuts_down_gracefully() {
    let rt = runtime();
    let repos = repos();
    let daemon = Daemon::new(
        &config(&repos, &repos.dir.path().join("cache")),
        rt.handle().clone(),
    )
    .unwrap();
    let serving = serve(&rt, daemon);
    let addr = serving.addr;
    rt.block_on(async {
        serving.passes_done(1, "the pass completes").await;
        assert_eq!(commit_count(&repos.gitops, "dev"), 1);

        // A push to the control plane, announced by a webhook over real HTTP.
        write_files(
            &repos.control_plane,
            "main",
            &[(
                "templates/namespace.yaml",
                Some(&template("namespace", "namespace", "kind: ns-v2")),
            )],
            "v2",
        );
        let response = raw_post(addr, "/webhook", "push", r#"{"ref":"refs/heads/main"}"#).await;
        assert!(response.starts_with("HTTP/1.1 202"), "{response}");
        serving.passes_done(2, "the pass completes").await;
        assert_eq!(commit_count(&repos.gitops, "dev"), 2);
        assert_eq!(
            branch_files(&repos.gitops, "dev")["small/app-t/namespace.yaml"],
            b"kind: ns-v2\n"
        );
        let health = raw_get(addr, "/healthz").await;
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");

        serving.stop().await;
    });
}

/// A daemon's whole loop serving on a loopback port, as `kalypso serve` runs it.
struct Serving {
    addr: std::net::SocketAddr,
    passes: tokio::sync::watch::Receiver<u64>,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), kalypso_server::daemon::Error>>,
}

/// Starts `daemon`'s loop on `rt`, serving on a free loopback port.
fn serve(rt: &tokio::runtime::Runtime, daemon: Daemon) -> Serving {
    let passes = daemon.state().passes();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let running = rt.spawn(daemon.run(listener, async {
        let _ = stopped.await;
    }));
    Serving {
        addr,
        passes,
        stop,
        running,
    }
}

impl Serving {
    /// Waits (at most a minute) until `n` polls have completed; `what` says what they are.
    async fn passes_done(&self, n: u64, what: &str) {
        let mut passes = self.passes.clone();
        tokio::time::timeout(Duration::from_secs(60), passes.wait_for(|p| *p >= n))
            .await
            .expect(what)
            .unwrap();
    }

    /// Asks the daemon to stop and waits until it has.
    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(60), self.running)
            .await
            .expect("the daemon stops")
            .unwrap()
            .unwrap();
    }
}

async fn raw_request(addr: std::net::SocketAddr, request: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

async fn raw_post(addr: std::net::SocketAddr, path: &str, event: &str, body: &str) -> String {
    raw_request(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nX-GitHub-Event: {event}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
    raw_request(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// Adds a `stage` environment to `repos` whose GitOps repository is `gitops_url`.
fn add_stage(repos: &Repos, gitops_url: &str) {
    write_files(
        &repos.control_plane,
        "main",
        &[(
            ".environments/stage.yaml",
            Some(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: stage\nspec:\n  controlPlane:\n    repo: x\n    branch: stage\n    path: .\n",
            ),
        )],
        "stage",
    );
    write_files(
        &repos.control_plane,
        "stage",
        &[(
            "gitops-repo.yaml",
            Some(&format!(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: stage\nspec:\n  repo: {gitops_url}\n  branch: stage\n  path: .\n"
            )),
        )],
        "stage",
    );
}

async fn status_json(addr: std::net::SocketAddr) -> serde_json::Value {
    let response = raw_get(addr, "/status").await;
    let body = response.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

/// One environment whose GitOps server answers every request with 503 and one that works:
/// the broken one backs off (its wait doubles at each failure and `/status` says why and
/// when it is tried next) while the good one is delivered at its first poll after each
/// push. The broken environment is listed first and its backoff is an hour: a loop that
/// polled the environments one after the other, or slept inside the failing fetch, would
/// never reach the good one.
#[test]
fn a_broken_environment_backs_off_without_delaying_the_others() {
    let rt = runtime();
    let repos = repos();
    let server = kalypso_testkit::GitHttpServer::start(rt.handle(), repos.dir.path(), None);
    server.fail_next(u32::MAX);
    add_stage(&repos, &server.url("gitops.git"));
    let mut config = config(&repos, &repos.dir.path().join("cache"));
    config.environments = vec!["stage".into(), "dev".into()];
    config.retry = Some(kalypso_git::RetryPolicy {
        attempts: 5,
        initial_backoff: Duration::from_secs(3600),
        max_backoff: Duration::from_secs(4 * 3600),
    });
    let daemon = Daemon::new(&config, rt.handle().clone()).unwrap();
    let state = daemon.state();
    let serving = serve(&rt, daemon);
    let addr = serving.addr;
    rt.block_on(async {
        let hang = "the polls complete (a hang here: one environment waits on another)";
        // The first poll of each.
        serving.passes_done(2, hang).await;
        assert_eq!(commit_count(&repos.gitops, "dev"), 1);
        let status = status_json(addr).await;
        let (dev, stage) = (&status["environments"]["dev"], &status["environments"]["stage"]);
        assert_eq!(dev["result"], "delivered", "{status}");
        assert_eq!(dev["polls"], 1, "{status}");
        assert_eq!(stage["result"], "error", "{status}");
        assert_eq!(stage["consecutiveFailures"], 1, "{status}");
        assert_eq!(stage["retryIn"], "1h", "{status}");
        let detail = stage["lastFailure"]["detail"].as_str().unwrap();
        assert!(
            detail.contains("gitops.git") && detail.contains("503"),
            "/status says why: {status}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(stage["nextPoll"].as_u64().unwrap() >= now + 3500, "{status}");
        assert!(
            dev.get("consecutiveFailures").is_none() && dev.get("retryIn").is_none(),
            "{status}"
        );

        // Two pushes to the good environment, each announced by a webhook: each is delivered
        // by the first poll after it, while the broken one fails again and waits longer.
        for round in 1..=2u64 {
            write_files(
                &repos.control_plane,
                "main",
                &[(
                    "templates/namespace.yaml",
                    Some(&template("namespace", "namespace", &format!("kind: ns-v{round}"))),
                )],
                "push",
            );
            let response = raw_post(addr, "/webhook", "push", r#"{"ref":"refs/heads/main"}"#).await;
            assert!(response.starts_with("HTTP/1.1 202"), "{response}");
            serving.passes_done(2 + 2 * round, hang).await;
            let status = status_json(addr).await;
            let (dev, stage) = (&status["environments"]["dev"], &status["environments"]["stage"]);
            assert_eq!(dev["polls"], 1 + round, "one poll per push: {status}");
            assert_eq!(dev["result"], "delivered", "{status}");
            assert_eq!(commit_count(&repos.gitops, "dev") as u64, 1 + round);
            assert_eq!(
                branch_files(&repos.gitops, "dev")["small/app-t/namespace.yaml"],
                format!("kind: ns-v{round}\n").as_bytes()
            );
            assert_eq!(stage["consecutiveFailures"], 1 + round, "{status}");
            assert_eq!(stage["retryIn"], ["2h", "4h"][round as usize - 1], "{status}");
        }
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_failures_total{environment=\"stage\",result=\"delivery\"} 3"),
            "{metrics}"
        );
        assert!(
            metrics.contains("kalypso_deliveries_total{environment=\"dev\",result=\"committed\"} 3"),
            "{metrics}"
        );

        serving.stop().await;
    });
}

#[test]
fn a_failing_workload_is_delivered_around_and_shown_in_the_status() {
    let rt = runtime();
    let repos = repos();
    let daemon = Daemon::new(
        &config(&repos, &repos.dir.path().join("cache")),
        rt.handle().clone(),
    )
    .unwrap();
    let state = daemon.state();
    rt.block_on(async {
        assert!(matches!(
            &daemon.poll_once().await.environments[..],
            [(_, EnvPoll::Delivered(_))]
        ));
        let delivered = branch_files(&repos.gitops, "dev");
        write_files(
            &repos.dir.path().join("app.git"),
            "main",
            &[("workload.yaml", Some("kind: Workload\nspec: [unclosed\n"))],
            "break the workload",
        );
        let poll = daemon.poll_once().await;
        assert!(
            matches!(&poll.environments[..], [(_, EnvPoll::Delivered(_))]),
            "{poll:?}"
        );
        assert_eq!(
            branch_files(&repos.gitops, "dev"),
            delivered,
            "its folder keeps what was delivered"
        );
        let status = call(&state, get("/status")).await.1;
        assert!(status.contains("\"result\":\"delivered\""), "{status}");
        assert!(status.contains("the workloads of app failed"), "{status}");
        assert!(
            status.contains("\"diagnostics\":[\"error[yaml]"),
            "/status says why: {status}"
        );
        let metrics = call(&state, get("/metrics")).await.1;
        assert!(
            metrics.contains("kalypso_failures_total{environment=\"dev\",result=\"render\"} 1"),
            "{metrics}"
        );
    });
}
