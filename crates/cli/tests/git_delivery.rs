//! End to end: the bundled example control plane turned into real git repositories (a
//! control plane with `main`, `dev` and `stage` branches, two workload repositories, a bare
//! GitOps repository), delivered with `kalypso sync`, compared with `kalypso render` of the
//! same input, and promoted with `kalypso promote`.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kalypso_cli::{Cli, run};
use kalypso_testkit::{ExampleRepos, branch_files, commit_count, files_under, git, rev_parse, write_files};

fn kalypso(args: &[&str]) -> ExitCode {
    let mut argv = vec!["kalypso"];
    argv.extend_from_slice(args);
    run(Cli::parse_from(argv))
}

struct Setup {
    dir: tempfile::TempDir,
    folder: PathBuf,
    control_plane: PathBuf,
    gitops: PathBuf,
    cache: PathBuf,
}

/// The example as git repositories, and as the folder form of the same input.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    Setup {
        cache: dir.path().join("cache"),
        folder: repos.folder,
        control_plane: repos.control_plane,
        gitops: repos.gitops,
        dir,
    }
}

#[test]
fn sync_commits_what_render_writes_and_only_once() {
    let s = setup();
    let cp = s.control_plane.display().to_string();
    let cache = s.cache.display().to_string();
    assert_eq!(
        kalypso(&[
            "sync",
            &cp,
            "--env",
            "dev",
            "--cache-dir",
            &cache,
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN"
        ]),
        ExitCode::SUCCESS
    );
    assert_eq!(commit_count(&s.gitops, "dev"), 1);
    assert_eq!(
        commit_count(&s.gitops, "stage"),
        0,
        "only the environment asked for"
    );

    let out = s.dir.path().join("rendered");
    let folder = s.folder.display().to_string();
    assert_eq!(
        kalypso(&[
            "render",
            &folder,
            "--env",
            "dev",
            "--out",
            &out.display().to_string()
        ]),
        ExitCode::SUCCESS
    );
    let rendered = files_under(&out);
    assert!(rendered.len() > 5, "the example renders several files");
    assert_eq!(branch_files(&s.gitops, "dev"), rendered);

    // The same input again: no commit.
    assert_eq!(
        kalypso(&[
            "sync",
            &cp,
            "--env",
            "dev",
            "--cache-dir",
            &cache,
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN"
        ]),
        ExitCode::SUCCESS
    );
    assert_eq!(commit_count(&s.gitops, "dev"), 1);

    // Every environment, with --dry-run: stage would change, nothing is written.
    assert_eq!(
        kalypso(&["sync", &cp, "--dry-run", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    assert_eq!(commit_count(&s.gitops, "stage"), 0);
}

#[test]
fn promote_then_sync_delivers_the_promoted_main() {
    let s = setup();
    let cp = s.control_plane.display().to_string();
    let cache = s.cache.display().to_string();
    // A new main commit, promoted to stage only.
    let newer = write_files(
        &s.control_plane,
        "main",
        &[("docs/notes.md", Some("a change on main"))],
        "notes",
    );
    assert_eq!(
        kalypso(&["promote", &cp, "--env", "stage", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    let stage_base =
        String::from_utf8(branch_files(&s.control_plane, "stage")["base-repo.yaml"].clone()).unwrap();
    assert!(stage_base.contains(&format!("commit: {newer}")), "{stage_base}");
    let dev_base =
        String::from_utf8(branch_files(&s.control_plane, "dev")["base-repo.yaml"].clone()).unwrap();
    assert!(!dev_base.contains(&newer));
    // Promoting again changes nothing.
    let head = rev_parse(&s.control_plane, "refs/heads/stage");
    assert_eq!(
        kalypso(&["promote", &cp, "--env", "stage", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    assert_eq!(rev_parse(&s.control_plane, "refs/heads/stage"), head);

    assert_eq!(
        kalypso(&["sync", &cp, "--env", "stage", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    let tracking = branch_files(&s.gitops, "stage")[".github/tracking/Promoted_Commit_Id"].clone();
    assert_eq!(tracking, newer.as_bytes());
    let log = git(&s.gitops, &["log", "-1", "--format=%an", "stage"]);
    assert_eq!(log.trim(), "Kalypso Scheduler");

    // A broken environment is not delivered and the command fails.
    write_files(
        &s.control_plane,
        "stage",
        &[(
            "cluster-types/west-us/large/large-cluster-type.yaml",
            Some(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\nspec:\n  reconciler: no-such-template\n  namespaceService: default\n  configType: configmap\n",
            ),
        )],
        "break stage",
    );
    let before = commit_count(&s.gitops, "stage");
    assert_eq!(
        kalypso(&["sync", &cp, "--env", "stage", "--cache-dir", &cache]),
        ExitCode::FAILURE
    );
    assert_eq!(commit_count(&s.gitops, "stage"), before);

    // An unknown environment fails.
    assert_eq!(
        kalypso(&["promote", &cp, "--env", "prod", "--cache-dir", &cache]),
        ExitCode::FAILURE
    );
    assert_eq!(
        kalypso(&["sync", &cp, "--env", "prod", "--cache-dir", &cache]),
        ExitCode::FAILURE
    );
}

/// What the hub stand-in answers, and the requests it saw: (query, authorization).
#[derive(Default)]
struct Script {
    answers: Vec<(u16, serde_json::Value)>,
    seen: Vec<(String, Option<String>)>,
}

/// A stand-in for the hub's gate: answers each request with the next scripted answer (the
/// last one is repeated) and records the query and authorization of every request.
struct ScriptedHub {
    url: String,
    script: std::sync::Arc<std::sync::Mutex<Script>>,
    _runtime: tokio::runtime::Runtime,
}

impl ScriptedHub {
    fn start(answers: Vec<(u16, serde_json::Value)>) -> ScriptedHub {
        use axum::extract::{RawQuery, State};
        use axum::http::{HeaderMap, StatusCode};
        async fn gate(
            State(script): State<std::sync::Arc<std::sync::Mutex<Script>>>,
            RawQuery(query): RawQuery,
            headers: HeaderMap,
        ) -> (StatusCode, axum::Json<serde_json::Value>) {
            let mut s = script.lock().unwrap();
            let auth = headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_owned());
            s.seen.push((query.unwrap_or_default(), auth));
            let (status, body) = if s.answers.len() > 1 {
                s.answers.remove(0)
            } else {
                s.answers[0].clone()
            };
            (StatusCode::from_u16(status).unwrap(), axum::Json(body))
        }
        let runtime = kalypso_testkit::runtime();
        let script = std::sync::Arc::new(std::sync::Mutex::new(Script {
            answers,
            seen: Vec::new(),
        }));
        let app = axum::Router::new()
            .route("/api/v1/environments/{env}/gate", axum::routing::get(gate))
            .with_state(script.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let _guard = runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await });
        ScriptedHub {
            url,
            script,
            _runtime: runtime,
        }
    }

    fn requests(&self) -> Vec<(String, Option<String>)> {
        self.script.lock().unwrap().seen.clone()
    }
}

fn gate(
    verdict: &str,
    gitops: &str,
    control_plane: &str,
    clusters: serde_json::Value,
) -> (u16, serde_json::Value) {
    let list = clusters.as_array().unwrap();
    let compliant = list.iter().filter(|c| c["state"] == "compliant").count();
    (
        200,
        serde_json::json!({
            "environment": "dev", "gitopsCommit": gitops, "controlPlaneCommit": control_plane,
            "verdict": verdict, "compliant": compliant, "total": list.len(),
            "clusters": clusters, "clusterTypesWithoutClusters": ["large"],
        }),
    )
}

fn cluster(name: &str, state: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"name": name, "clusterType": "drone", "state": state, "revision": "ab", "message": message})
}

#[test]
fn check_promote_waits_for_compliance_and_sets_commit_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("hub-token");
    std::fs::write(&token, "hub-secret\n").unwrap();
    let cp_commit = "1111111111111111111111111111111111111111";
    let hub = ScriptedHub::start(vec![
        (503, serde_json::json!({"error": "database is locked"})),
        gate("unknown-commit", "", "", serde_json::json!([])),
        gate(
            "pending",
            "ab",
            cp_commit,
            serde_json::json!([
                cluster("drone-1", "compliant", ""),
                cluster("drone-2", "reconciling", "")
            ]),
        ),
        gate(
            "compliant",
            "ab",
            cp_commit,
            serde_json::json!([
                cluster("drone-1", "compliant", ""),
                cluster("drone-2", "compliant", "")
            ]),
        ),
    ]);
    let runtime = kalypso_testkit::runtime();
    let github = kalypso_testkit::FakeGitHub::start(runtime.handle());
    let code = kalypso(&[
        "check-promote",
        "--hub",
        &hub.url,
        "--hub-token-file",
        &token.display().to_string(),
        "--env",
        "dev",
        "--commit",
        "ab",
        "--interval",
        "50ms",
        "--timeout",
        "30s",
        "--commit-status",
        "--control-plane",
        "https://github.com/contoso/control-plane",
        "--github-api-url",
        &github.url(),
        "--token-env",
        "KALYPSO_TEST_NO_TOKEN",
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    let requests = hub.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert_eq!(requests[0].0, "commit=ab&limit=100");
    assert!(
        requests
            .iter()
            .all(|(_, auth)| auth.as_deref() == Some("Bearer hub-secret"))
    );
    let statuses = github.statuses();
    let states: Vec<&str> = statuses.iter().map(|s| s["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "success"], "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|s| s["sha"] == cp_commit && s["context"] == "kalypso/deployed/dev")
    );
}

#[test]
fn check_promote_sets_commit_statuses_on_gitlab_azure_devops_and_gitea() {
    use kalypso_testkit::{FakeForge, Flavor};
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("forge-token");
    std::fs::write(&token, "forge-status-token-0123\n").unwrap();
    let cp_commit = "2222222222222222222222222222222222222222";
    let runtime = kalypso_testkit::runtime();
    for (flavor, repo, control_plane, provider, states) in [
        // A self-managed GitLab, named with --provider.
        (
            Flavor::GitLab,
            "platform/control-plane",
            "https://gitlab.contoso.com/platform/control-plane.git",
            Some("gitlab"),
            ["running", "success"],
        ),
        // Azure DevOps, known by its host.
        (
            Flavor::AzureDevOps,
            "contoso/platform/control-plane",
            "https://dev.azure.com/contoso/platform/_git/control-plane",
            None,
            ["pending", "succeeded"],
        ),
        (
            Flavor::Gitea,
            "platform/control-plane",
            "https://gitea.contoso.com/platform/control-plane.git",
            Some("forgejo"),
            ["pending", "success"],
        ),
    ] {
        let forge = FakeForge::start(runtime.handle(), flavor, repo, Some("forge-status-token-0123"));
        let hub = ScriptedHub::start(vec![
            gate(
                "pending",
                "ab",
                cp_commit,
                serde_json::json!([cluster("drone-1", "reconciling", "")]),
            ),
            gate(
                "compliant",
                "ab",
                cp_commit,
                serde_json::json!([cluster("drone-1", "compliant", "")]),
            ),
        ]);
        let api = forge.api_url();
        let mut args = vec![
            "check-promote",
            "--hub",
            &hub.url,
            "--env",
            "dev",
            "--commit",
            "ab",
            "--interval",
            "50ms",
            "--timeout",
            "30s",
            "--commit-status",
            "--control-plane",
            control_plane,
            "--provider-api-url",
            &api,
        ];
        if let Some(provider) = provider {
            args.extend(["--provider", provider]);
        }
        let token = token.display().to_string();
        args.extend(["--token-file", &token]);
        assert_eq!(kalypso(&args), ExitCode::SUCCESS, "{flavor:?}");
        let statuses = forge.statuses();
        let sent: Vec<&str> = statuses.iter().map(|s| s["state"].as_str().unwrap()).collect();
        assert_eq!(sent, states, "{flavor:?}: {statuses:?}");
        assert!(statuses.iter().all(|s| s["sha"] == cp_commit), "{statuses:?}");
        let requests = forge.requests();
        assert_eq!(requests.len(), 2, "{requests:?}");
        assert!(
            requests.iter().all(|r| {
                let auth = r
                    .authorization
                    .as_deref()
                    .or(r.private_token.as_deref())
                    .unwrap_or_default();
                match flavor {
                    Flavor::GitLab => auth == "forge-status-token-0123",
                    Flavor::Gitea => auth == "token forge-status-token-0123",
                    Flavor::AzureDevOps => auth.starts_with("Basic "),
                }
            }),
            "{requests:?}"
        );
    }
}

#[test]
fn check_promote_fails_fast_on_a_failed_cluster_and_times_out_distinctly() {
    let hub = ScriptedHub::start(vec![gate(
        "failed",
        "ab",
        "11",
        serde_json::json!([
            cluster("drone-1", "failed", "kustomize build failed"),
            cluster("drone-2", "reconciling", "")
        ]),
    )]);
    let args = |hub: &str| {
        vec![
            "check-promote".to_owned(),
            "--hub".into(),
            hub.to_owned(),
            "--env".into(),
            "dev".into(),
            "--commit".into(),
            "ab".into(),
            "--interval".into(),
            "50ms".into(),
            "--timeout".into(),
            "1s".into(),
        ]
    };
    let run_with = |args: Vec<String>| {
        let mut argv = vec!["kalypso".to_owned()];
        argv.extend(args);
        run(Cli::parse_from(argv))
    };
    assert_eq!(run_with(args(&hub.url)), ExitCode::FAILURE);
    assert_eq!(hub.requests().len(), 1, "a failure ends the wait at once");

    let waiting = ScriptedHub::start(vec![gate(
        "pending",
        "ab",
        "11",
        serde_json::json!([cluster("drone-1", "reconciling", "")]),
    )]);
    assert_eq!(run_with(args(&waiting.url)), ExitCode::from(3));

    let refusing = ScriptedHub::start(vec![(401, serde_json::json!({"error": "missing bearer token"}))]);
    assert_eq!(run_with(args(&refusing.url)), ExitCode::FAILURE);
    assert_eq!(refusing.requests().len(), 1, "a refused token is not retried");
}

#[test]
fn promote_from_pins_what_the_source_environment_runs_when_the_hub_says_it_is_compliant() {
    let s = setup();
    let cp = s.control_plane.display().to_string();
    let cache = s.cache.display().to_string();
    // dev runs a newer main commit than stage pins; stage has no BaseRepo yet (its first
    // promotion).
    let newer = write_files(
        &s.control_plane,
        "main",
        &[("docs/notes.md", Some("a change"))],
        "notes",
    );
    write_files(
        &s.control_plane,
        "stage",
        &[("base-repo.yaml", None)],
        "stage follows dev",
    );
    assert_eq!(
        kalypso(&["promote", &cp, "--env", "dev", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    assert_eq!(
        kalypso(&["sync", &cp, "--env", "dev", "--cache-dir", &cache]),
        ExitCode::SUCCESS
    );
    let dev_gitops = rev_parse(&s.gitops, "refs/heads/dev").unwrap();
    let stage_head = rev_parse(&s.control_plane, "refs/heads/stage");

    // dev is not compliant yet: nothing is promoted.
    let pending = ScriptedHub::start(vec![gate(
        "pending",
        &dev_gitops,
        &newer,
        serde_json::json!([cluster("drone-1", "reconciling", "")]),
    )]);
    let promote_from = |hub: &str| {
        kalypso(&[
            "promote",
            &cp,
            "--from",
            "dev",
            "--env",
            "stage",
            "--hub",
            hub,
            "--cache-dir",
            &cache,
        ])
    };
    assert_eq!(promote_from(&pending.url), ExitCode::FAILURE);
    assert_eq!(rev_parse(&s.control_plane, "refs/heads/stage"), stage_head);
    assert_eq!(
        pending.requests()[0].0,
        format!("commit={dev_gitops}&limit=100&into=stage")
    );

    let failed = ScriptedHub::start(vec![gate(
        "failed",
        &dev_gitops,
        &newer,
        serde_json::json!([cluster("drone-1", "failed", "health check failed")]),
    )]);
    assert_eq!(promote_from(&failed.url), ExitCode::FAILURE);
    assert_eq!(rev_parse(&s.control_plane, "refs/heads/stage"), stage_head);

    let compliant = ScriptedHub::start(vec![gate(
        "compliant",
        &dev_gitops,
        &newer,
        serde_json::json!([cluster("drone-1", "compliant", "")]),
    )]);
    assert_eq!(promote_from(&compliant.url), ExitCode::SUCCESS);
    let stage_base =
        String::from_utf8(branch_files(&s.control_plane, "stage")["base-repo.yaml"].clone()).unwrap();
    assert!(stage_base.contains(&format!("commit: {newer}")), "{stage_base}");

    // Without a hub, what dev delivered is promoted as it is; stage already has it.
    let head = rev_parse(&s.control_plane, "refs/heads/stage");
    assert_eq!(
        kalypso(&[
            "promote",
            &cp,
            "--from",
            "dev",
            "--env",
            "stage",
            "--cache-dir",
            &cache
        ]),
        ExitCode::SUCCESS
    );
    assert_eq!(rev_parse(&s.control_plane, "refs/heads/stage"), head);
    // An environment that delivered nothing yet cannot be promoted from.
    assert_eq!(
        kalypso(&[
            "promote",
            &cp,
            "--from",
            "stage",
            "--env",
            "dev",
            "--cache-dir",
            &cache
        ]),
        ExitCode::FAILURE
    );
}
