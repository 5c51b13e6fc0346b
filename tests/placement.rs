//! Placement end to end with real SchedulerExtenders: loopback HTTP servers that answer well,
//! too slowly, with garbage, with an error status or with too much, behind the placement
//! example's `prod` environment (`examples/placement`), rendered and explained by the CLI.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kalypso_testkit::{copy_files, files_under};

fn example() -> PathBuf {
    kalypso_testkit::workspace_root().join("examples/placement")
}

/// How a test extender answers.
#[derive(Clone, Copy, Debug)]
enum Behaviour {
    /// As `examples/placement/extender.py`: drops capacity < 25, scores the capacity.
    Good,
    /// Good, after 2 s.
    Slow,
    /// Not JSON.
    Garbage,
    /// HTTP 500.
    Status,
    /// 2 MiB of JSON.
    Huge,
    /// Names a cluster type that was not a candidate.
    Stranger,
}

/// The response body and status of an extender behaving as `behaviour`.
fn answer(behaviour: Behaviour, request: &serde_json::Value) -> (u16, String) {
    let mut kept = Vec::new();
    let mut failed = serde_json::Map::new();
    let mut scores = serde_json::Map::new();
    for c in request["candidates"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_owned();
        let capacity: u64 = c["labels"]["capacity"].as_str().unwrap_or("0").parse().unwrap();
        if capacity < 25 {
            failed.insert(name, format!("full (capacity {capacity})").into());
        } else {
            kept.push(serde_json::Value::from(name.clone()));
            scores.insert(name, capacity.min(100).into());
        }
    }
    let good = serde_json::json!({"clusterTypes": kept, "failed": failed, "scores": scores}).to_string();
    match behaviour {
        Behaviour::Good | Behaviour::Slow => (200, good),
        Behaviour::Garbage => (200, "<html>busy</html>".to_owned()),
        Behaviour::Status => (500, "{\"error\": \"database down\"}".to_owned()),
        Behaviour::Huge => (
            200,
            format!("{{\"failed\": {{\"x\": \"{}\"}}}}", "y".repeat(2 << 20)),
        ),
        Behaviour::Stranger => (200, "{\"clusterTypes\": [\"mars-1\"], \"scores\": {}}".to_owned()),
    }
}

/// A loopback extender (a small HTTP/1.1 server on std's TcpListener, one thread per
/// connection); counts the requests it gets. It stops with the test process.
struct Extender {
    url: String,
    requests: Arc<AtomicUsize>,
}

/// Reads one HTTP request (headers, then `Content-Length` bytes of body).
fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

impl Extender {
    fn start(behaviour: Behaviour) -> Extender {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/placement", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    while let Some(body) = read_request(&mut stream) {
                        counter.fetch_add(1, Ordering::SeqCst);
                        if matches!(behaviour, Behaviour::Slow) {
                            std::thread::sleep(Duration::from_secs(2));
                        }
                        let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let (status, text) = answer(behaviour, &request);
                        let head = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            text.len()
                        );
                        if stream.write_all(head.as_bytes()).is_err()
                            || stream.write_all(text.as_bytes()).is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Extender { url, requests }
    }
}

/// The example in a temporary folder, its extender at `url` with `failure_policy` and a 500 ms
/// timeout.
fn control_plane(dir: &Path, url: &str, failure_policy: &str) -> PathBuf {
    let cp = dir.join("control-plane");
    copy_files(&example(), &cp);
    let policies = cp.join("prod/policies.yaml");
    let text = std::fs::read_to_string(&policies)
        .unwrap()
        .replace("http://127.0.0.1:8099/placement", url)
        .replace("timeout: 2s", "timeout: 500ms")
        .replace("failurePolicy: Fail", &format!("failurePolicy: {failure_policy}"));
    std::fs::write(&policies, text).unwrap();
    cp
}

fn kalypso(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kalypso"))
        .args(args)
        .env("KALYPSO_CACHE_DIR", "/nonexistent-kalypso-cache")
        .output()
        .unwrap()
}

fn render(cp: &Path, out: &Path) -> Output {
    kalypso(&[
        "render",
        cp.to_str().unwrap(),
        "--env",
        "prod",
        "--out",
        out.to_str().unwrap(),
        "--no-cache",
    ])
}

fn placed(out: &Path) -> Vec<String> {
    files_under(out)
        .keys()
        .filter(|p| p.ends_with("/reconciler.yaml"))
        .map(|p| p.trim_end_matches("/reconciler.yaml").to_owned())
        .collect()
}

#[test]
fn a_good_extender_filters_and_scores_and_explain_shows_why() {
    let server = Extender::start(Behaviour::Good);
    let dir = tempfile::tempdir().unwrap();
    let cp = control_plane(dir.path(), &server.url, "Fail");
    let out = dir.path().join("out");
    let output = render(&cp, &out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // east-small is full; east-large (80) and west-large (90) are the best of two regions.
    assert_eq!(
        placed(&out),
        ["east-large/shop-web-prod", "west-large/shop-web-prod"]
    );
    assert_eq!(
        server.requests.load(Ordering::SeqCst),
        1,
        "one call for filter and scores"
    );

    let explain = kalypso(&[
        "explain",
        cp.to_str().unwrap(),
        "--env",
        "prod",
        "--target",
        "shop-web-prod",
        "--against",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        explain.status.success(),
        "{}",
        String::from_utf8_lossy(&explain.stderr)
    );
    for line in [
        "    feasible: east-large, east-small, north-edge, west-large, west-small",
        "    extender capacity-service: drops east-small (full (capacity 20))",
        "    choosing the best 2; scores: Steady ×3, extender capacity-service ×2",
        "    ✓ west-large: [100, 90] total 480",
        "    ✓ east-large: [100, 80] total 460",
        "    ✗ north-edge: [0, 50] total 100 — not among the best 2 that keep the spread",
        "    spread: region (maxSkew 1): east=1, north=0, west=1",
    ] {
        assert!(text.contains(line), "explain lacks {line:?}:\n{text}");
    }

    // Re-rendering is stable and changes nothing.
    let before = files_under(&out);
    let again = render(&cp, &out);
    assert!(again.status.success());
    assert_eq!(files_under(&out), before);
}

#[test]
fn failing_extenders_stop_the_environment_or_are_skipped_by_their_failure_policy() {
    let cases = [
        (Behaviour::Slow, "no answer within 500ms"),
        (Behaviour::Garbage, "its response is not the protocol's JSON"),
        (
            Behaviour::Status,
            "it answered HTTP 500: {\"error\": \"database down\"}",
        ),
        (Behaviour::Huge, "larger than the limit of 1048576 bytes"),
        (
            Behaviour::Stranger,
            "it names \"mars-1\", which was not a candidate",
        ),
    ];
    for (behaviour, message) in cases {
        let server = Extender::start(behaviour);
        let dir = tempfile::tempdir().unwrap();

        let cp = control_plane(dir.path(), &server.url, "Fail");
        let out = dir.path().join("out");
        let output = render(&cp, &out);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{behaviour:?}: {stderr}");
        assert!(!out.exists(), "{behaviour:?}: nothing written");
        assert!(
            stderr.contains("error[extender]: prod/policies.yaml:")
                && stderr.contains("SchedulerExtender \"capacity-service\": spec.url:")
                && stderr.contains(message)
                && stderr.contains("failurePolicy Fail stops the environment"),
            "{behaviour:?}: {stderr}"
        );

        let cp = control_plane(&dir.path().join("ignore"), &server.url, "Ignore");
        let output = render(&cp, &out);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{behaviour:?}: {stderr}");
        assert!(
            stderr.contains("warning[extender]") && stderr.contains(message) && stderr.contains("skipped"),
            "{behaviour:?}: {stderr}"
        );
        // Without the extender: Steady and nothing else, so the first of each region by name.
        assert_eq!(
            placed(&out),
            ["east-large/shop-web-prod", "north-edge/shop-web-prod"],
            "{behaviour:?}"
        );
    }
}

/// The example's dev environment in a temporary folder, rendered into `out`.
fn dev_rendered(dir: &Path) -> (PathBuf, PathBuf) {
    let cp = dir.join("control-plane");
    copy_files(&example(), &cp);
    let out = dir.join("out");
    let output = kalypso(&[
        "render",
        cp.to_str().unwrap(),
        "--env",
        "dev",
        "--out",
        out.to_str().unwrap(),
        "--no-cache",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (cp, out)
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

fn plan(cp: &Path, against: &Path) -> (String, Option<i32>) {
    let output = kalypso(&[
        "plan",
        cp.to_str().unwrap(),
        "--env",
        "dev",
        "--against",
        against.to_str().unwrap(),
    ]);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.status.code(),
    )
}

#[test]
fn steady_keeps_a_placed_target_and_without_it_plan_shows_the_move() {
    let dir = tempfile::tempdir().unwrap();
    let (cp, out) = dev_rendered(dir.path());
    assert!(out.join("north-edge/shop-web-dev").is_dir());
    // north-edge loses its capacity: web would rather be on east-large now...
    edit(
        &cp.join("dev/cluster-types.yaml"),
        "{region: north, capacity: \"50\"}",
        "{region: north, capacity: \"5\"}",
    );
    edit(
        &cp.join("dev/policies.yaml"),
        "    - builtIn: Balance\n      weight: 1\n",
        "",
    );
    // ...but Steady keeps it where it is.
    let (text, code) = plan(&cp, &out);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("No changes"), "{text}");
    // Without Steady it moves, and plan says so.
    edit(
        &cp.join("dev/policies.yaml"),
        "    - builtIn: Steady\n      weight: 3\n",
        "",
    );
    let (text, code) = plan(&cp, &out);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("Moved (1):\n  > shop-web-dev: north-edge -> east-large"),
        "{text}"
    );
}

/// The example's `prod` environment as git repositories, its extender at `url`.
struct GitControlPlane {
    /// The control plane's `file://` URL.
    url: String,
    /// The control plane (bare).
    repo: PathBuf,
    /// The files of its `prod` branch.
    prod: std::collections::BTreeMap<String, String>,
    /// The GitOps repository (bare).
    gitops: PathBuf,
}

/// The example's `prod` environment as git repositories (control plane, workload, GitOps),
/// its extender at `url`.
fn git_control_plane(dir: &Path, url: &str) -> GitControlPlane {
    use kalypso_testkit::{commit_files, init_bare, replace_in, text_files_under};
    let folder = control_plane(dir, url, "Fail");
    let (repo, workload, gitops) = (dir.join("cp.git"), dir.join("shop.git"), dir.join("gitops.git"));
    for r in [&repo, &workload, &gitops] {
        init_bare(r);
    }
    commit_files(
        &workload,
        "main",
        "workload/",
        &text_files_under(&folder.join("workloads/shop")),
    );
    let mut main = text_files_under(&folder.join("main"));
    replace_in(
        &mut main,
        "platform.yaml",
        "https://github.com/contoso/shop",
        &format!("file://{}", workload.display()),
    );
    main.insert(
        ".environments/prod.yaml".to_owned(),
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: prod\nspec:\n  controlPlane:\n    repo: x\n    branch: prod\n    path: .\n".to_owned(),
    );
    main.insert(".sourceignore".to_owned(), ".environments/\n".to_owned());
    commit_files(&repo, "main", "", &main);
    let mut prod = text_files_under(&folder.join("prod"));
    prod.insert(
        "gitops-repo.yaml".to_owned(),
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: prod\nspec:\n  repo: file://{}\n  branch: prod\n  path: .\n",
            gitops.display()
        ),
    );
    commit_files(&repo, "prod", "", &prod);
    GitControlPlane {
        url: format!("file://{}", repo.display()),
        repo,
        prod,
        gitops,
    }
}

/// `kalypso sync` of `prod`, in a process of its own; the deployment-target folders of the
/// GitOps branch after it.
fn sync_prod(cp: &GitControlPlane, cache: &Path) -> Vec<String> {
    let output = kalypso(&[
        "sync",
        &cp.url,
        "--env",
        "prod",
        "--cache-dir",
        cache.to_str().unwrap(),
        "--token-env",
        "KALYPSO_TEST_NO_TOKEN",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    kalypso_testkit::branch_files(&cp.gitops, "prod")
        .keys()
        .filter(|p| p.ends_with("/reconciler.yaml"))
        .map(|p| p.trim_end_matches("/reconciler.yaml").to_owned())
        .collect()
}

#[test]
fn sync_calls_the_extenders_and_keeps_targets_where_the_gitops_branch_has_them() {
    use kalypso_testkit::{commit_files, replace_in};
    let server = Extender::start(Behaviour::Good);
    let dir = tempfile::tempdir().unwrap();
    let mut cp = git_control_plane(dir.path(), &server.url);
    let cache = dir.path().join("cache");
    assert_eq!(
        sync_prod(&cp, &cache),
        ["east-large/shop-web-prod", "west-large/shop-web-prod"]
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);

    // east-small gains capacity and east-large loses it: placed afresh, web would move to
    // east-small; a new process reads where the GitOps branch has it, and Steady keeps it.
    replace_in(
        &mut cp.prod,
        "cluster-types.yaml",
        "{region: east, capacity: \"20\"}",
        "{region: east, capacity: \"95\"}",
    );
    replace_in(
        &mut cp.prod,
        "cluster-types.yaml",
        "{region: east, capacity: \"80\"}",
        "{region: east, capacity: \"30\"}",
    );
    commit_files(&cp.repo, "prod", "", &cp.prod);
    assert_eq!(
        sync_prod(&cp, &cache),
        ["east-large/shop-web-prod", "west-large/shop-web-prod"]
    );
    // Without Steady, it moves.
    replace_in(
        &mut cp.prod,
        "policies.yaml",
        "    - builtIn: Steady\n      weight: 3\n",
        "",
    );
    commit_files(&cp.repo, "prod", "", &cp.prod);
    assert_eq!(
        sync_prod(&cp, &cache),
        ["east-small/shop-web-prod", "west-large/shop-web-prod"]
    );
}
