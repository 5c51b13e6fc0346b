//! OCI delivery end to end, as users run it: the bundled example as git repositories whose
//! `dev` GitOpsRepo is `oci://127.0.0.1:PORT/kalypso/gitops`, a real registry (Debian's
//! `docker-registry`, see `kalypso_testkit::TestRegistry`), and the `kalypso` binary: `sync`
//! pushes a Flux artifact per cluster type, a second `sync` sends nothing, a ConfigMap change
//! pushes only the cluster types it touches, `plan`/`diff --against oci://…#dev` read the
//! artifacts back, `serve` delivers the same way, and credentials never show.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kalypso_testkit::{
    ExampleRepos, Run, TestRegistry, commit_files, replace_in, require_tool, text_files_under, workspace_root,
};

const WHO: &str = "the OCI end-to-end tests";

struct Setup {
    dir: tempfile::TempDir,
    repos: ExampleRepos,
    registry: TestRegistry,
    /// The dev branch's files, as committed.
    dev: BTreeMap<String, String>,
}

impl Setup {
    /// The example with dev delivering to `oci://<registry>/kalypso/gitops`.
    fn new(registry: TestRegistry) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let repos = ExampleRepos::create(dir.path());
        let mut dev = text_files_under(&repos.folder.join("dev"));
        let gitops = format!("file://{}", repos.gitops.display());
        replace_in(
            &mut dev,
            "gitops-repo.yaml",
            &gitops,
            &registry.location("kalypso/gitops"),
        );
        commit_files(&repos.control_plane, "dev", "", &dev);
        Setup {
            dir,
            repos,
            registry,
            dev,
        }
    }

    fn cp(&self) -> String {
        self.repos.control_plane.display().to_string()
    }

    fn location(&self) -> String {
        self.registry.location("kalypso/gitops")
    }

    /// Runs `kalypso` with the scratch cache and no Docker config of the machine's user.
    fn kalypso(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let tmp = self.dir.path();
        let mut command = kalypso_testkit::kalypso(
            env!("CARGO_BIN_EXE_kalypso").as_ref(),
            args,
            &workspace_root(),
            &tmp.join("cache"),
        );
        command
            .env("DOCKER_CONFIG", tmp.join("no-docker"))
            .env_remove("KALYPSO_REGISTRY_TOKEN")
            .env_remove("KALYPSO_REGISTRY_USERNAME");
        for (k, v) in env {
            command.env(k, v);
        }
        Run::of(&mut command)
            .replace(&tmp.display().to_string(), "<tmp>")
            .replace(&self.registry.host(), "<registry>")
    }

    fn sync(&self) -> Run {
        self.kalypso(
            &[
                "sync",
                &self.cp(),
                "--env",
                "dev",
                "--token-env",
                "KALYPSO_TEST_NO_TOKEN",
            ],
            &[],
        )
    }

    /// Commits a change of the dev branch.
    fn change_dev(&mut self, path: &str, from: &str, to: &str) {
        replace_in(&mut self.dev, path, from, to);
        commit_files(&self.repos.control_plane, "dev", "", &self.dev);
    }

    /// The writes (PUT, POST) the registry received, by repository.
    fn writes(&self) -> BTreeSet<String> {
        self.registry
            .requests()
            .into_iter()
            .filter(|r| r.method == "PUT" || r.method == "POST")
            .map(|r| {
                let name = r.path.trim_start_matches("/v2/");
                ["/blobs/", "/manifests/"]
                    .iter()
                    .find_map(|sep| name.split_once(sep).map(|(n, _)| n.to_owned()))
                    .unwrap()
            })
            .collect()
    }
}

/// What `kalypso render` writes for the folder form of the same input, by cluster type.
fn rendered(setup: &Setup) -> BTreeMap<String, String> {
    let out = setup.dir.path().join("rendered");
    let run = setup.kalypso(
        &[
            "render",
            &setup.repos.folder.display().to_string(),
            "--env",
            "dev",
            "--out",
            &out.display().to_string(),
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    text_files_under(&out)
}

/// The files of every artifact as `skopeo copy` and `tar` extract them, `<ct>/<path>`.
fn pulled(setup: &Setup, cluster_types: &[&str]) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for ct in cluster_types {
        let dir = setup.dir.path().join(format!("pulled-{ct}-{}", rand_suffix()));
        setup
            .registry
            .skopeo(&[
                "copy",
                "--src-tls-verify=false",
                &format!("docker://{}/kalypso/gitops/{ct}:dev", setup.registry.host()),
                &format!("oci:{}:dev", dir.display()),
            ])
            .unwrap();
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
        let manifest_digest = index["manifests"][0]["digest"].as_str().unwrap();
        let blob = |digest: &str| {
            dir.join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:"))
        };
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(blob(manifest_digest)).unwrap()).unwrap();
        assert_eq!(
            manifest["layers"][0]["mediaType"],
            "application/vnd.cncf.flux.content.v1.tar+gzip"
        );
        assert_eq!(
            manifest["config"]["mediaType"],
            "application/vnd.cncf.flux.config.v1+json"
        );
        let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
        let out = dir.join("extracted");
        std::fs::create_dir_all(&out).unwrap();
        let status = Command::new("tar")
            .args(["-xzf", layer.to_str().unwrap(), "-C", out.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        for (path, text) in text_files_under(&out) {
            files.insert(format!("{ct}/{path}"), text);
        }
    }
    files
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

const CLUSTER_TYPES: [&str; 4] = ["command-center", "drone", "large", "small"];

#[test]
fn sync_pushes_a_flux_artifact_per_cluster_type_and_then_only_what_changed() {
    let Some(registry) = TestRegistry::start(WHO) else {
        return;
    };
    if !require_tool("skopeo", WHO) {
        return;
    }
    let mut s = Setup::new(registry);

    let first = s.sync();
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    // The index's digest, as skopeo computes it from the raw manifest.
    let index_digest = |s: &Setup| {
        let raw = s
            .registry
            .skopeo(&[
                "inspect",
                "--raw",
                "--tls-verify=false",
                &format!("docker://{}/kalypso/gitops:dev", s.registry.host()),
            ])
            .unwrap();
        let file = s.dir.path().join("index-manifest.json");
        std::fs::write(&file, raw).unwrap();
        s.registry
            .skopeo(&["manifest-digest", &file.display().to_string()])
            .unwrap()
            .trim()
            .to_owned()
    };
    let first_index = index_digest(&s);
    assert!(
        first
            .stdout
            .contains("dev: 4 artifacts (4 new) pushed to dev@dev (oci://<registry>/kalypso/gitops), 0 unchanged, index sha256:"),
        "{}",
        first.stdout
    );

    // Each cluster type's artifact holds that cluster type's folder of the render, and
    // Promoted_Commit_Id as the git form carries it.
    let rendered = rendered(&s);
    let pulled = pulled(&s, &CLUSTER_TYPES);
    let expected: BTreeMap<String, String> = rendered
        .iter()
        .filter(|(p, _)| !p.starts_with(".github/"))
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect();
    let got: BTreeMap<String, String> = pulled
        .iter()
        .filter(|(p, _)| !p.contains("/.github/"))
        .map(|(p, t)| (p.clone(), t.clone()))
        .collect();
    assert_eq!(got, expected);
    for ct in CLUSTER_TYPES {
        assert_eq!(
            pulled[&format!("{ct}/.github/tracking/Promoted_Commit_Id")],
            rendered[".github/tracking/Promoted_Commit_Id"]
        );
    }

    // Nothing moved: the index is looked at (one HEAD), nothing is rendered or written.
    s.registry.clear_requests();
    let again = s.sync();
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stdout
            .contains("dev: no input moved, dev@dev stays at index sha256:"),
        "{}",
        again.stdout
    );
    let requests = s.registry.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("HEAD", "/v2/kalypso/gitops/manifests/dev")
    );
    // A control-plane commit that changes no artifact: the index is read, nothing written.
    s.change_dev(
        "scheduling/kaizen/functional-test-policy.yaml",
        "spec:",
        "# a comment\nspec:",
    );
    s.registry.clear_requests();
    let moved = s.sync();
    assert_eq!(moved.code, 0, "{}", moved.stderr);
    assert!(
        moved
            .stdout
            .contains("dev: no change, dev@dev stays at index sha256:"),
        "{}",
        moved.stdout
    );
    assert!(s.writes().is_empty(), "{:?}", s.registry.requests());

    // The current artifacts are what the control plane renders: no plan.
    let against = format!("{}#dev", s.location());
    let plan = s.kalypso(&["plan", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);

    // A ConfigMap of the large cluster type changes: the plan reads the artifacts back and
    // shows it; the sync pushes large's artifact alone.
    s.change_dev(
        "cluster-types/west-us/large/large-config.yaml",
        "MAX_REPLICAS: \"20\"",
        "MAX_REPLICAS: \"40\"",
    );
    let plan = s.kalypso(&["plan", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(plan.code, 2, "{}\n{}", plan.stdout, plan.stderr);
    assert!(plan.stdout.contains("MAX_REPLICAS"), "{}", plan.stdout);
    let diff = s.kalypso(&["diff", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(diff.code, 2);
    assert!(
        diff.stdout.contains("+++ b/large/") && !diff.stdout.contains("b/drone/"),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout.contains("+  MAX_REPLICAS: \"40\"") || diff.stdout.contains("MAX_REPLICAS: \"40\""),
        "{}",
        diff.stdout
    );

    s.registry.clear_requests();
    let changed = s.sync();
    assert_eq!(changed.code, 0, "{}", changed.stderr);
    assert!(
        changed
            .stdout
            .contains("dev: 1 artifact pushed to dev@dev (oci://<registry>/kalypso/gitops), 3 unchanged"),
        "{}",
        changed.stdout
    );
    assert_eq!(
        s.writes(),
        BTreeSet::from(["kalypso/gitops".to_owned(), "kalypso/gitops/large".to_owned()])
    );
    let plan = s.kalypso(&["plan", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(plan.code, 0, "{}", plan.stdout);

    // JSON says the same.
    s.change_dev(
        "cluster-types/west-us/large/large-config.yaml",
        "MAX_REPLICAS: \"40\"",
        "MAX_REPLICAS: \"41\"",
    );
    let json = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--json",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
        ],
        &[],
    );
    assert_eq!(json.code, 0, "{}", json.stderr);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let target = &value[0]["targets"][0];
    assert_eq!(target["result"], "pushed");
    assert_eq!(target["pushed"][0]["clusterType"], "large");
    assert_eq!(target["unchanged"], 3);
    assert_eq!(target["blobsUploaded"], 3);

    // Someone moves the index's tag back: nothing in git moved, but the next sync sees the
    // registry did, takes the full path and puts the environment back.
    let host = s.registry.host();
    s.registry
        .skopeo(&[
            "copy",
            "--preserve-digests",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            &format!("docker://{host}/kalypso/gitops@{first_index}"),
            &format!("docker://{host}/kalypso/gitops:dev"),
        ])
        .unwrap();
    assert_eq!(index_digest(&s), first_index);
    let back = s.sync();
    assert_eq!(back.code, 0, "{}", back.stderr);
    assert!(!back.stdout.contains("no input moved"), "{}", back.stdout);
    assert_ne!(index_digest(&s), first_index);
    let plan = s.kalypso(&["plan", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(plan.code, 0, "{}", plan.stdout);
}

#[test]
fn pull_requests_are_refused_for_a_registry() {
    let Some(registry) = TestRegistry::start(WHO) else {
        return;
    };
    let s = Setup::new(registry);
    let run = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--mode",
            "pr",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
        ],
        &[],
    );
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("is an OCI registry") && run.stderr.contains("--mode push"),
        "{}",
        run.stderr
    );
    assert!(s.registry.requests().is_empty(), "nothing was sent");
    // A dry run says what would be pushed, and writes nothing.
    let dry = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--dry-run",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
        ],
        &[],
    );
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout
            .contains("dry run: 4 artifacts (4 new) would be pushed"),
        "{}",
        dry.stdout
    );
    assert!(s.writes().is_empty());
}

#[test]
fn credentials_come_from_a_docker_config_or_a_token_and_never_show() {
    let Some(registry) = TestRegistry::start_with_basic_auth(WHO, "kalypso-ci", "registry-pass-8472") else {
        return;
    };
    let s = Setup::new(registry);
    // No credentials: the error says what to do.
    let run = s.sync();
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("requires authentication"), "{}", run.stderr);
    // A wrong token, given in the environment: refused, and never printed.
    let run = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
            "--registry-username",
            "kalypso-ci",
        ],
        &[("KALYPSO_REGISTRY_TOKEN", "wrong-token-5531")],
    );
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("refused the credentials"), "{}", run.stderr);
    assert!(!format!("{}{}", run.stdout, run.stderr).contains("wrong-token-5531"));
    // A Docker config file, as `docker login` writes it.
    let config = s.dir.path().join("docker.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("kalypso-ci:registry-pass-8472");
    std::fs::write(
        &config,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            s.registry.host()
        ),
    )
    .unwrap();
    let run = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
            "--registry-config",
            &config.display().to_string(),
        ],
        &[],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("4 artifacts (4 new) pushed"),
        "{}",
        run.stdout
    );
    // A token file and its user, for plan.
    let token = s.dir.path().join("token");
    std::fs::write(&token, "registry-pass-8472\n").unwrap();
    let against = format!("{}#dev", s.location());
    let plan = s.kalypso(
        &[
            "plan",
            &s.cp(),
            "--env",
            "dev",
            "--against",
            &against,
            "--registry-username",
            "kalypso-ci",
            "--registry-token-file",
            &token.display().to_string(),
        ],
        &[],
    );
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
    assert!(!format!("{}{}", plan.stdout, plan.stderr).contains("registry-pass-8472"));
}

/// A child process killed if the test fails before it exits.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    use std::io::Write as _;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out.split_once("\r\n\r\n")?.1.to_owned())
}

#[test]
fn serve_delivers_to_the_registry_too() {
    let Some(registry) = TestRegistry::start(WHO) else {
        return;
    };
    let s = Setup::new(registry);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = s.dir.path().join("kalypso.yaml");
    std::fs::write(
        &config,
        format!(
            "controlPlane: {}\nenvironments: [dev]\ninterval: 1h\nlisten: 127.0.0.1:{port}\ncacheDir: {}\n\
             registry:\n  dockerConfig: {}\nlog:\n  format: text\n  level: warn\n",
            s.cp(),
            s.dir.path().join("serve-cache").display(),
            write_empty_docker_config(s.dir.path()).display(),
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kalypso"))
        .args(["serve", "--config", &config.display().to_string()])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _child = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = get(port, "/status")
            && let Ok(value) = serde_json::from_str::<serde_json::Value>(&status)
            && value["environments"]["dev"]["result"]
                .as_str()
                .is_some_and(|r| !r.is_empty())
        {
            let dev = &value["environments"]["dev"];
            assert_eq!(dev["result"], "delivered", "{value}");
            assert!(
                dev["detail"]
                    .as_str()
                    .unwrap()
                    .contains("4 artifact(s) pushed (4 new)"),
                "{value}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "serve did not deliver dev");
        std::thread::sleep(Duration::from_millis(100));
    }
    let against = format!("{}#dev", s.location());
    let plan = s.kalypso(&["plan", &s.cp(), "--env", "dev", "--against", &against], &[]);
    assert_eq!(plan.code, 0, "{}\n{}", plan.stdout, plan.stderr);
}

fn write_empty_docker_config(dir: &Path) -> PathBuf {
    let path = dir.join("empty-docker.json");
    std::fs::write(&path, "{}").unwrap();
    path
}

#[test]
fn the_flux_examples_point_each_cluster_type_at_its_own_artifact() {
    let examples = workspace_root().join("examples/oci");
    let gitops = std::fs::read_to_string(examples.join("gitops-repo.yaml")).unwrap();
    assert!(
        gitops.contains("repo: oci://ghcr.io/contoso/kalypso-gitops\n"),
        "{gitops}"
    );
    assert!(gitops.contains("branch: dev\n"), "{gitops}");
    let clusters = text_files_under(&examples.join("clusters"));
    let names: Vec<&str> = clusters.keys().map(|k| k.trim_end_matches(".yaml")).collect();
    assert_eq!(
        names, CLUSTER_TYPES,
        "one bootstrap per cluster type of the example's dev"
    );
    for (file, text) in &clusters {
        let ct = file.trim_end_matches(".yaml");
        for line in [
            "kind: OCIRepository",
            &format!("url: oci://ghcr.io/contoso/kalypso-gitops/{ct}\n"),
            "tag: dev\n",
            "kind: Kustomization",
            "kind: OCIRepository\n    name: kalypso-platform",
            "path: ./\n",
        ] {
            assert!(text.contains(line), "{file} has {line:?}:\n{text}");
        }
    }
}

/// A sync with no local state (another machine, a wiped cache) knows where the registry has
/// each deployment target from the index alone (it records each artifact's folders), so the
/// mass-deletion guard holds a change that would remove them all, and reads no layer to
/// know it.
#[test]
fn a_sync_without_local_state_reads_the_placement_from_the_index() {
    let Some(registry) = TestRegistry::start(WHO) else {
        return;
    };
    let s = Setup::new(registry);
    let first = s.sync();
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    // Every SchedulingPolicy of dev goes: nothing would be placed any more.
    let policies: Vec<String> = s
        .dev
        .keys()
        .filter(|p| p.starts_with("scheduling/"))
        .cloned()
        .collect();
    assert!(!policies.is_empty());
    let removed: Vec<(&str, Option<&str>)> = policies.iter().map(|p| (p.as_str(), None)).collect();
    kalypso_testkit::write_files(&s.repos.control_plane, "dev", &removed, "no policies");
    s.registry.clear_requests();
    let fresh = s.dir.path().join("another-cache");
    let held = s.kalypso(
        &[
            "sync",
            &s.cp(),
            "--env",
            "dev",
            "--token-env",
            "KALYPSO_TEST_NO_TOKEN",
        ],
        &[("KALYPSO_CACHE_DIR", &fresh.display().to_string())],
    );
    assert_eq!(held.code, 3, "{}\n{}", held.stdout, held.stderr);
    assert!(held.stderr.contains("delivery held"), "{}", held.stderr);
    let requests = s.registry.requests();
    assert!(
        requests.iter().all(|r| r.method == "GET" || r.method == "HEAD"),
        "a held delivery writes nothing: {requests:?}"
    );
    let layers: Vec<_> = requests
        .iter()
        // The index's own blob is under kalypso/gitops; a cluster type's, under
        // kalypso/gitops/<cluster type>.
        .filter(|r| r.path.contains("/blobs/") && !r.path.starts_with("/v2/kalypso/gitops/blobs/"))
        .collect();
    assert!(
        layers.is_empty(),
        "no cluster type's layer is read to know the placement: {layers:?}"
    );
}

/// A sync that moves reads the index once: for the placement, and the delivery starts from
/// that read (one GET of the index manifest and one of its blob, not two of each).
#[test]
fn a_changed_sync_reads_the_index_once() {
    let Some(registry) = TestRegistry::start(WHO) else {
        return;
    };
    let mut s = Setup::new(registry);
    let first = s.sync();
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    s.change_dev(
        "cluster-types/west-us/large/large-config.yaml",
        "MAX_REPLICAS: \"20\"",
        "MAX_REPLICAS: \"40\"",
    );
    s.registry.clear_requests();
    let changed = s.sync();
    assert_eq!(changed.code, 0, "{}", changed.stderr);
    assert!(
        changed
            .stdout
            .contains("dev: 1 artifact pushed to dev@dev (oci://<registry>/kalypso/gitops), 3 unchanged"),
        "{}",
        changed.stdout
    );
    let requests = s.registry.requests();
    let gets = |prefix: &str| {
        requests
            .iter()
            .filter(|r| r.method == "GET" && r.path.starts_with(prefix))
            .count()
    };
    assert_eq!(gets("/v2/kalypso/gitops/manifests/dev"), 1, "{requests:?}");
    assert_eq!(gets("/v2/kalypso/gitops/blobs/"), 1, "{requests:?}");
}
