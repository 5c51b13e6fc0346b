//! OCI delivery against a real registry (Debian's `docker-registry`, distribution 2.8, on
//! loopback; see `kalypso_testkit::TestRegistry`), read back with `skopeo` and with kalypso.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use base64::Engine as _;
use kalypso_core::tree::{Blob, PROMOTED_COMMIT_PATH, Package, RepoContent, Tree};
use kalypso_oci::artifact::{self, Manifest};
use kalypso_oci::client::Access;
use kalypso_oci::deliver::{self, Settings};
use kalypso_oci::{
    AuthSettings, Destination, Error, GitId, Location, Provenance, Registry, Retry, Secret, read,
};
use kalypso_testkit::{TestRegistry, require_tool};

const WHO: &str = "the OCI delivery tests";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const PROMOTED: &str = "89abcdef0123456789abcdef0123456789abcdef";

fn provenance(commit: &str) -> Provenance {
    Provenance {
        environment: "dev".into(),
        source: "https://github.com/contoso/control-plane".into(),
        branch: "dev".into(),
        commit: commit.into(),
        created: "2026-11-27T10:00:00Z".into(),
        main_commit: PROMOTED.into(),
    }
}

fn package(text: &str) -> Package {
    Package::new(
        &[format!("kind: GitRepository\nmetadata: {{name: {text}}}\n").into_bytes()],
        &[format!("kind: Namespace\nmetadata: {{name: {text}}}\n").into_bytes()],
        &[format!("data: {{KEY: {text}}}\n").into_bytes()],
        "yaml",
    )
}

/// Three cluster types with a target or two each.
fn content() -> RepoContent {
    let mut content = RepoContent::default();
    for (ct, targets) in [
        ("drone", &["app-dev", "svc-dev"][..]),
        ("large", &["app-dev"]),
        ("small", &[]),
    ] {
        content.cluster_types.insert(ct.to_owned());
        for dt in targets {
            content
                .packages
                .insert((ct.to_owned(), (*dt).to_owned()), package(&format!("{ct}-{dt}")));
        }
    }
    content.promoted_commit = Some(PROMOTED.into());
    content
}

fn none(_: &str, _: &str) -> Option<Vec<(&'static str, GitId)>> {
    None
}

/// Registry access that reads nothing of the machine's user: an empty Docker config, no
/// token variable.
fn hermetic() -> AuthSettings {
    // Written once: tests run in parallel threads, and rewriting the file while another
    // thread reads it let that one read it empty (and fail to parse it).
    static EMPTY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let path = EMPTY.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("kalypso-oci-test-{}-docker.json", std::process::id()));
        std::fs::write(&path, "{}").unwrap();
        path
    });
    AuthSettings {
        docker_config: Some(path.clone()),
        token_env: None,
        ..AuthSettings::default()
    }
}

fn registry() -> Registry {
    Registry::new(
        &hermetic(),
        Retry {
            attempts: 3,
            initial_backoff: std::time::Duration::from_millis(10),
            max_backoff: std::time::Duration::from_millis(50),
        },
    )
    .unwrap()
}

fn deliver_to(
    registry: &Registry,
    location: &Location,
    content: &RepoContent,
    commit: &str,
) -> Result<deliver::Report, Error> {
    deliver::deliver(
        registry,
        Destination { location, tag: "dev" },
        content,
        &none,
        &provenance(commit),
        &Settings::default(),
    )
}

fn manifest_of(reg: &TestRegistry, repo_tag: &str) -> (Manifest, String) {
    let raw = reg
        .skopeo(&[
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{}/{repo_tag}", reg.host()),
        ])
        .unwrap();
    let digest = format!("sha256:{}", sha256_hex(raw.as_bytes()));
    (Manifest::parse(raw.as_bytes()).unwrap(), digest)
}

fn sha256_hex(bytes: &[u8]) -> String {
    kalypso_oci::Digest::of(bytes).hex().to_owned()
}

#[test]
fn each_cluster_type_is_a_flux_artifact_that_skopeo_reads() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    if !require_tool("skopeo", WHO) {
        return;
    }
    let location = Location::parse(&reg.location("platform/gitops")).unwrap();
    let report = deliver_to(&registry(), &location, &content(), COMMIT).unwrap();
    let pushed: Vec<&str> = report.pushed.iter().map(|p| p.cluster_type.as_str()).collect();
    assert_eq!(pushed, ["drone", "large", "small"]);
    assert!(report.pushed.iter().all(|p| p.new));
    assert!(report.changed && report.retired.is_empty());

    let (manifest, digest) = manifest_of(&reg, "platform/gitops/drone:dev");
    assert_eq!(
        manifest.media_type.as_deref(),
        Some("application/vnd.oci.image.manifest.v1+json")
    );
    assert_eq!(
        manifest.config.media_type,
        "application/vnd.cncf.flux.config.v1+json"
    );
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(
        manifest.layers[0].media_type,
        "application/vnd.cncf.flux.content.v1.tar+gzip"
    );
    let a = |k: &str| manifest.annotation(k).unwrap_or_default().to_owned();
    assert_eq!(
        a("org.opencontainers.image.source"),
        "https://github.com/contoso/control-plane"
    );
    assert_eq!(
        a("org.opencontainers.image.revision"),
        format!("dev@sha1:{COMMIT}")
    );
    assert_eq!(a("org.opencontainers.image.created"), "2026-11-27T10:00:00Z");
    assert_eq!(a(artifact::PROMOTED_COMMIT), PROMOTED);
    assert_eq!(a(artifact::CLUSTER_TYPE), "drone");
    assert_eq!(a(artifact::ENVIRONMENT), "dev");
    assert!(a(artifact::CONTENT).starts_with("sha256:"));
    // Tagged with the control-plane commit too, on the same manifest.
    let (_, by_commit) = manifest_of(&reg, &format!("platform/gitops/drone:{COMMIT}"));
    assert_eq!(by_commit, digest);
    assert_eq!(report.pushed[0].manifest.as_str(), digest);

    // The layer as Flux extracts it: copied out by skopeo, opened by tar.
    let out = reg.scratch().join("copy");
    reg.skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/platform/gitops/drone:dev", reg.host()),
        &format!("dir:{}", out.display()),
    ])
    .unwrap();
    let layer = out.join(manifest.layers[0].digest.hex());
    let extracted = reg.scratch().join("extracted");
    std::fs::create_dir_all(&extracted).unwrap();
    let tar = std::process::Command::new("tar")
        .args(["-xzf", layer.to_str().unwrap(), "-C", extracted.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(tar.success());
    let files = kalypso_testkit::text_files_under(&extracted);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            ".github/tracking/Promoted_Commit_Id",
            "README.md",
            "app-dev/namespace.yaml",
            "app-dev/platform-config.yaml",
            "app-dev/reconciler.yaml",
            "svc-dev/namespace.yaml",
            "svc-dev/platform-config.yaml",
            "svc-dev/reconciler.yaml",
        ]
    );
    assert_eq!(files[".github/tracking/Promoted_Commit_Id"], PROMOTED);
    assert_eq!(files["README.md"], kalypso_core::tree::README_TEXT);
    // The config records the layer's diff id, as go-containerregistry's does.
    let config = std::fs::read_to_string(out.join(manifest.config.digest.hex())).unwrap();
    assert!(
        config.contains("\"created\":\"2026-11-27T10:00:00Z\""),
        "{config}"
    );
    assert!(config.contains("\"diff_ids\":[\"sha256:"), "{config}");

    // The index lists every cluster type.
    let (index_manifest, _) = manifest_of(&reg, "platform/gitops:dev");
    assert_eq!(index_manifest.config.media_type, artifact::INDEX_MEDIA_TYPE);
    assert!(index_manifest.layers.is_empty());
    assert_eq!(index_manifest.annotation(artifact::PARENT), None);
}

#[test]
fn kalypso_reads_back_what_it_delivered() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let client = registry();
    assert!(
        read::tree(&client, &location, "dev").unwrap().is_none(),
        "nothing yet"
    );
    deliver_to(&client, &location, &content(), COMMIT).unwrap();
    let (snapshot, tree) = read::tree(&registry(), &location, "dev").unwrap().unwrap();
    assert_eq!(tree, deliver::planned_tree(&content(), &Tree::new()).unwrap());
    assert_eq!(
        tree.get(PROMOTED_COMMIT_PATH).map(|b| b.to_vec()),
        Some(PROMOTED.as_bytes().to_vec())
    );
    assert_eq!(snapshot.index.revision, format!("dev@sha1:{COMMIT}"));
    let cts: Vec<&String> = snapshot.index.cluster_types.keys().collect();
    assert_eq!(cts, ["drone", "large", "small"]);
    // The index records each artifact's deployment-target folders: placement is read from
    // it alone, and it says what the layers say.
    let from_layers: BTreeSet<(String, String)> = tree
        .iter()
        .filter_map(|(path, _)| {
            let mut parts = path.splitn(3, '/');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(ct), Some(dt), Some(_)) if !ct.starts_with('.') => Some((ct.to_owned(), dt.to_owned())),
                _ => None,
            }
        })
        .collect();
    let from_index: BTreeSet<(String, String)> =
        snapshot.index.folders().expect("recorded").into_iter().collect();
    assert!(!from_index.is_empty());
    assert_eq!(from_index, from_layers);
    // An index written before the folders were recorded says nothing (the layers then do).
    let mut older = snapshot.index.clone();
    for entry in older.cluster_types.values_mut() {
        entry.deployment_targets = None;
    }
    assert_eq!(older.folders(), None);
}

#[test]
fn identical_content_gives_identical_digests_and_a_no_change_delivery_sends_nothing() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let client = registry();
    let one = Location::parse(&reg.location("one/gitops")).unwrap();
    let two = Location::parse(&reg.location("two/gitops")).unwrap();
    let first = deliver_to(&client, &one, &content(), COMMIT).unwrap();
    let second = deliver_to(&registry(), &two, &content(), COMMIT).unwrap();
    let digests = |r: &deliver::Report| r.pushed.iter().map(|p| p.manifest.clone()).collect::<Vec<_>>();
    assert_eq!(
        digests(&first),
        digests(&second),
        "the same content and revision, the same digests"
    );

    reg.clear_requests();
    let again = deliver_to(&registry(), &one, &content(), COMMIT).unwrap();
    assert!(!again.changed);
    assert!(again.pushed.is_empty());
    assert_eq!(again.unchanged, 3);
    assert_eq!(again.index, first.index);
    let requests = reg.requests();
    assert!(
        requests.iter().all(|r| r.method == "GET" || r.method == "HEAD"),
        "nothing written: {requests:?}"
    );
    assert_eq!(requests.len(), 2, "the index and its config: {requests:?}");

    // A new control-plane commit that changes nothing keeps every artifact as it is.
    let later = deliver_to(
        &registry(),
        &one,
        &content(),
        "1111111111111111111111111111111111111111",
    )
    .unwrap();
    assert!(!later.changed && later.pushed.is_empty());
}

#[test]
fn a_change_pushes_only_the_cluster_types_it_touches() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let first = deliver_to(&registry(), &location, &content(), COMMIT).unwrap();
    let mut next = content();
    next.packages
        .insert(("drone".into(), "app-dev".into()), package("changed"));
    reg.clear_requests();
    let second = deliver_to(
        &registry(),
        &location,
        &next,
        "2222222222222222222222222222222222222222",
    )
    .unwrap();
    let pushed: Vec<&str> = second.pushed.iter().map(|p| p.cluster_type.as_str()).collect();
    assert_eq!(pushed, ["drone"]);
    assert!(!second.pushed[0].new);
    assert_eq!(second.unchanged, 2);
    let writes: BTreeSet<String> = reg
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
        .collect();
    assert_eq!(
        writes,
        BTreeSet::from(["gitops".to_owned(), "gitops/drone".to_owned()])
    );
    // Two blobs for drone (layer and config), one for the index's config.
    assert_eq!(second.blobs_uploaded, 3);
    let client = registry();
    let head = |ct: &str| {
        client
            .manifest_digest(&location, &format!("gitops/{ct}"), "dev", Access::Pull)
            .unwrap()
            .unwrap()
    };
    assert_eq!(head("large"), first.pushed[1].manifest);
    assert_eq!(head("drone"), second.pushed[0].manifest);
    // The new index names the one it replaced.
    let snapshot = read::index(&client, &location, "dev", Access::Pull)
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.parent(), first.index);
    assert_eq!(snapshot.digest, second.index.clone().unwrap());
    // The unchanged cluster types keep their recorded folders: every target is still known.
    let folders: BTreeSet<(String, String)> =
        snapshot.index.folders().expect("recorded").into_iter().collect();
    let expected: BTreeSet<(String, String)> =
        [("drone", "app-dev"), ("drone", "svc-dev"), ("large", "app-dev")]
            .into_iter()
            .map(|(ct, dt)| (ct.to_owned(), dt.to_owned()))
            .collect();
    assert_eq!(folders, expected);
    let history = read::history(&client, &location, "dev", &|_| false, 10).unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(Some(history[1].digest.clone()), first.index);
}

#[test]
fn files_known_by_id_come_from_the_artifact_delivered_before() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let full = content();
    deliver_to(&registry(), &location, &full, COMMIT).unwrap();
    // The next render renders drone/app-dev only; the others are known by their ids.
    let ids: HashMap<(String, String), Vec<(&'static str, GitId)>> = full
        .packages
        .iter()
        .filter(|(k, _)| !(k.0 == "drone" && k.1 == "app-dev"))
        .map(|(k, p)| {
            (
                k.clone(),
                p.files().map(|(n, b)| (n, GitId::of_blob(b))).collect(),
            )
        })
        .collect();
    let mut next = RepoContent {
        cluster_types: full.cluster_types.clone(),
        promoted_commit: full.promoted_commit.clone(),
        ..RepoContent::default()
    };
    for key in full.packages.keys() {
        if key.0 == "drone" && key.1 == "app-dev" {
            next.packages.insert(key.clone(), package("new"));
        } else {
            next.delivered.insert(key.clone());
        }
    }
    let lookup = |ct: &str, dt: &str| ids.get(&(ct.to_owned(), dt.to_owned())).cloned();
    let report = deliver::deliver(
        &registry(),
        Destination {
            location: &location,
            tag: "dev",
        },
        &next,
        &lookup,
        &provenance(COMMIT),
        &Settings::default(),
    )
    .unwrap();
    assert_eq!(report.pushed.len(), 1);
    let (_, tree) = read::tree(&registry(), &location, "dev").unwrap().unwrap();
    let text = |p: &str| String::from_utf8(tree.get(p).unwrap().to_vec()).unwrap();
    assert!(text("drone/app-dev/reconciler.yaml").contains("new"));
    assert!(
        text("drone/svc-dev/reconciler.yaml").contains("drone-svc-dev"),
        "taken from the artifact before"
    );

    // An id the artifact does not have: the caller must render in full.
    let mut wrong = ids.clone();
    wrong.insert(
        ("drone".into(), "svc-dev".into()),
        vec![("reconciler.yaml", GitId::of_blob(b"never delivered"))],
    );
    next.packages
        .insert(("drone".into(), "app-dev".into()), package("newer"));
    let lookup = |ct: &str, dt: &str| wrong.get(&(ct.to_owned(), dt.to_owned())).cloned();
    let error = deliver::deliver(
        &registry(),
        Destination {
            location: &location,
            tag: "dev",
        },
        &next,
        &lookup,
        &provenance(COMMIT),
        &Settings::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&error, Error::NotDelivered { cluster_type, path } if cluster_type == "drone" && path == "svc-dev/reconciler.yaml"),
        "{error}"
    );
}

#[test]
fn a_failure_part_way_leaves_every_tag_on_a_complete_artifact() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let first = deliver_to(&registry(), &location, &content(), COMMIT).unwrap();
    let mut next = content();
    for ct in ["drone", "large"] {
        next.packages
            .insert((ct.into(), "app-dev".into()), package(&format!("{ct} v2")));
    }
    let client = registry();
    let head = |ct: &str| {
        client
            .manifest_digest(&location, &format!("gitops/{ct}"), "dev", Access::Pull)
            .unwrap()
    };
    // A blob upload of large fails: large does not move.
    reg.fail_when(|method, path| method == "PUT" && path.starts_with("/v2/gitops/large/blobs/uploads/"));
    let error = deliver_to(
        &registry(),
        &location,
        &next,
        "3333333333333333333333333333333333333333",
    )
    .unwrap_err();
    assert!(error.to_string().contains("failed on purpose"), "{error}");
    assert!(error.is_transient(), "a 500 is worth another try");
    assert_eq!(
        head("large"),
        Some(first.pushed[1].manifest.clone()),
        "large stays on its old artifact"
    );
    // Then its manifest cannot be written under the environment's tag: still nothing moves.
    reg.fail_when(|method, path| method == "PUT" && path == "/v2/gitops/large/manifests/dev");
    assert!(
        deliver_to(
            &registry(),
            &location,
            &next,
            "3333333333333333333333333333333333333333"
        )
        .is_err()
    );
    assert_eq!(head("large"), Some(first.pushed[1].manifest.clone()));
    let index = read::index(&client, &location, "dev", Access::Pull)
        .unwrap()
        .unwrap();
    assert_eq!(Some(index.digest.clone()), first.index, "the index is not moved");

    // Every artifact written, the index is not: the tags are on the new artifacts, the index
    // on the old state.
    reg.fail_when(|method, path| method == "PUT" && path == "/v2/gitops/manifests/dev");
    assert!(
        deliver_to(
            &registry(),
            &location,
            &next,
            "3333333333333333333333333333333333333333"
        )
        .is_err()
    );
    let index = read::index(&client, &location, "dev", Access::Pull)
        .unwrap()
        .unwrap();
    assert_eq!(Some(index.digest.clone()), first.index, "the index is not moved");
    let written = (head("drone"), head("large"));

    // Healed, the next delivery finishes: the artifacts are complete already and only looked
    // at; the index is written.
    reg.heal();
    reg.clear_requests();
    let done = deliver_to(
        &registry(),
        &location,
        &next,
        "3333333333333333333333333333333333333333",
    )
    .unwrap();
    let pushed: Vec<&str> = done.pushed.iter().map(|p| p.cluster_type.as_str()).collect();
    assert_eq!(pushed, ["drone", "large"]);
    assert_eq!(
        written,
        (
            Some(done.pushed[0].manifest.clone()),
            Some(done.pushed[1].manifest.clone())
        )
    );
    let artifact_writes = reg
        .requests()
        .iter()
        .filter(|r| {
            let in_a_cluster_types_repository = r.path.starts_with("/v2/gitops/")
                && !r.path.starts_with("/v2/gitops/manifests/")
                && !r.path.starts_with("/v2/gitops/blobs/");
            in_a_cluster_types_repository && (r.method == "PUT" || r.method == "POST")
        })
        .count();
    assert_eq!(
        artifact_writes,
        0,
        "the artifacts were complete already: {:?}",
        reg.requests()
    );
    assert!(
        reg.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path == "/v2/gitops/manifests/dev"),
        "the index is written"
    );
    assert_eq!(head("large"), Some(done.pushed[1].manifest.clone()));
    assert_eq!(
        read::index(&client, &location, "dev", Access::Pull)
            .unwrap()
            .unwrap()
            .parent(),
        first.index
    );
}

#[test]
fn transient_failures_are_retried() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    // Every third distinct request fails, once: its retry (an upload's too, whose session
    // path differs) goes through. Uploads run on several threads, so the requests are told
    // apart by what they are, not by their order.
    let seen = std::sync::Mutex::new(std::collections::HashSet::new());
    reg.fail_when(move |method, path| {
        let path = path.split('?').next().unwrap_or(path);
        let path = match path.find("/blobs/uploads/") {
            Some(at) => &path[..at + "/blobs/uploads/".len()],
            None => path,
        };
        let mut seen = seen.lock().unwrap();
        let new = seen.insert(format!("{method} {path}"));
        new && seen.len() % 3 == 1
    });
    let client = registry();
    deliver_to(&client, &location, &content(), COMMIT).unwrap();
    assert!(reg.failed() > 3);
    assert!(client.traffic().retries >= u64::from(reg.failed()));
    reg.heal();
    let (_, tree) = read::tree(&registry(), &location, "dev").unwrap().unwrap();
    assert_eq!(tree, deliver::planned_tree(&content(), &Tree::new()).unwrap());
}

#[test]
fn a_retired_cluster_type_keeps_its_artifact() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let first = deliver_to(&registry(), &location, &content(), COMMIT).unwrap();
    let mut next = content();
    next.cluster_types.remove("small");
    let report = deliver_to(
        &registry(),
        &location,
        &next,
        "4444444444444444444444444444444444444444",
    )
    .unwrap();
    assert_eq!(report.retired, ["small"]);
    assert!(report.pushed.is_empty() && report.changed);
    let client = registry();
    assert_eq!(
        client
            .manifest_digest(&location, "gitops/small", "dev", Access::Pull)
            .unwrap(),
        Some(first.pushed[2].manifest.clone()),
        "its clusters keep running their last artifact"
    );
    let index = read::index(&client, &location, "dev", Access::Pull)
        .unwrap()
        .unwrap();
    assert!(!index.index.cluster_types.contains_key("small"));
}

#[test]
fn something_kalypso_did_not_write_is_never_overwritten() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let client = registry();
    let location = Location::parse(&reg.location("gitops")).unwrap();
    deliver_to(&client, &location, &content(), COMMIT).unwrap();
    // A cluster type's artifact copied over the index's place, as another tool could.
    let other = Location::parse(&reg.location("gitops/drone")).unwrap();
    let error = deliver_to(&client, &other, &content(), COMMIT).unwrap_err();
    assert!(matches!(error, Error::Foreign { .. }), "{error}");
    assert!(
        error.to_string().contains("not a kalypso environment index"),
        "{error}"
    );
}

fn docker_config(dir: &Path, host: &str, user: &str, password: &str) -> AuthSettings {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let path = dir.join(format!("docker-{user}-{}.json", password.len()));
    std::fs::write(
        &path,
        format!(r#"{{"auths": {{"{host}": {{"auth": "{auth}"}}}}}}"#),
    )
    .unwrap();
    AuthSettings {
        docker_config: Some(path),
        ..AuthSettings::default()
    }
}

#[test]
fn a_registry_with_basic_authentication() {
    let Some(reg) = TestRegistry::start_with_basic_auth(WHO, "robot", "s3cret-registry-password") else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let retry = Retry::default();
    // No credentials: a clear error saying what to do.
    let anonymous = Registry::new(
        &AuthSettings {
            docker_config: Some(reg.scratch().join("missing.json")),
            ..AuthSettings::default()
        },
        retry,
    );
    assert!(anonymous.is_err(), "a named Docker config must exist");
    let none = Registry::new(
        &docker_config(reg.scratch(), "other.example.com", "x", "y"),
        retry,
    )
    .unwrap();
    let error = deliver_to(&none, &location, &content(), COMMIT)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("requires authentication") && error.contains("docker login"),
        "{error}"
    );
    // Wrong password: refused, and the password is not in the message.
    let wrong = Registry::new(
        &docker_config(reg.scratch(), &reg.host(), "robot", "wrong-password-123"),
        retry,
    )
    .unwrap();
    let error = deliver_to(&wrong, &location, &content(), COMMIT)
        .unwrap_err()
        .to_string();
    assert!(error.contains("refused the credentials"), "{error}");
    assert!(!error.contains("wrong-password-123"), "{error}");
    // The right ones, from a Docker config.
    let good = Registry::new(
        &docker_config(
            reg.scratch(),
            &format!("http://{}", reg.host()),
            "robot",
            "s3cret-registry-password",
        ),
        retry,
    )
    .unwrap();
    let report = deliver_to(&good, &location, &content(), COMMIT).unwrap();
    assert_eq!(report.pushed.len(), 3);
    // The same as a token given to kalypso, read back.
    let token = Registry::new(
        &AuthSettings {
            username: Some("robot".into()),
            token: Some(Secret::new("s3cret-registry-password")),
            docker_config: Some(reg.scratch().join("docker-x-1.json")),
            ..AuthSettings::default()
        },
        retry,
    );
    let token = match token {
        Ok(t) => t,
        Err(_) => {
            std::fs::write(reg.scratch().join("empty.json"), "{}").unwrap();
            Registry::new(
                &AuthSettings {
                    username: Some("robot".into()),
                    token: Some(Secret::new("s3cret-registry-password")),
                    docker_config: Some(reg.scratch().join("empty.json")),
                    ..AuthSettings::default()
                },
                retry,
            )
            .unwrap()
        }
    };
    assert!(read::tree(&token, &location, "dev").unwrap().is_some());
}

#[test]
fn a_registry_with_a_token_service() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    reg.require_bearer("ci-user", "ci-password-456");
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let client = Registry::new(
        &docker_config(reg.scratch(), &reg.host(), "ci-user", "ci-password-456"),
        Retry::default(),
    )
    .unwrap();
    let report = deliver_to(&client, &location, &content(), COMMIT).unwrap();
    assert_eq!(report.pushed.len(), 3);
    let scopes = reg.token_scopes();
    assert!(
        scopes.contains(&"repository:gitops/drone:pull,push".to_owned()),
        "{scopes:?}"
    );
    assert!(
        scopes.contains(&"repository:gitops:pull,push".to_owned()),
        "{scopes:?}"
    );
    // One token per repository: after the first challenge, tokens are fetched up front.
    let challenged = reg.requests().iter().filter(|r| r.status == 401).count();
    assert_eq!(challenged, 1, "{:?}", reg.requests());
    assert_eq!(scopes.len(), 4, "{scopes:?}");
    // A reader asks for pull access only.
    let reader = Registry::new(
        &docker_config(reg.scratch(), &reg.host(), "ci-user", "ci-password-456"),
        Retry::default(),
    )
    .unwrap();
    assert!(read::tree(&reader, &location, "dev").unwrap().is_some());
    assert!(
        reg.token_scopes()
            .contains(&"repository:gitops/large:pull".to_owned())
    );
    // A Docker config with an identity token (an OAuth2 refresh token, as `az acr login`
    // leaves one): exchanged at the token service with a POST.
    reg.accept_refresh_token("refresh-token-3141");
    let path = reg.scratch().join("identity.json");
    std::fs::write(
        &path,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "", "identitytoken": "refresh-token-3141"}}}}}}"#,
            reg.host()
        ),
    )
    .unwrap();
    let identity = Registry::new(
        &AuthSettings {
            docker_config: Some(path),
            ..AuthSettings::default()
        },
        Retry::default(),
    )
    .unwrap();
    let before = reg.requests().len();
    assert!(read::tree(&identity, &location, "dev").unwrap().is_some());
    assert!(
        reg.requests()[before..]
            .iter()
            .any(|r| r.method == "POST" && r.path == "/token" && r.status == 200),
        "{:?}",
        reg.requests()
    );
    // Wrong credentials at the token service.
    let wrong = Registry::new(
        &docker_config(reg.scratch(), &reg.host(), "ci-user", "nope-nope"),
        Retry::default(),
    )
    .unwrap();
    let error = read::tree(&wrong, &location, "dev").unwrap_err().to_string();
    assert!(
        error.contains("refused the credentials") && !error.contains("nope-nope"),
        "{error}"
    );
}

#[test]
fn manifests_read_back_by_digest_match() {
    let Some(reg) = TestRegistry::start(WHO) else {
        return;
    };
    let location = Location::parse(&reg.location("gitops")).unwrap();
    let report = deliver_to(&registry(), &location, &content(), COMMIT).unwrap();
    let client = registry();
    let drone = &report.pushed[0];
    let (bytes, digest) = client
        .manifest(&location, "gitops/drone", drone.manifest.as_str(), Access::Pull)
        .unwrap()
        .unwrap();
    assert_eq!(digest, drone.manifest);
    let manifest = Manifest::parse(&bytes).unwrap();
    let files: BTreeMap<String, Blob> = read::artifact(&client, &location, "drone", "dev")
        .unwrap()
        .unwrap()
        .1;
    assert_eq!(files.len(), 8);
    assert_eq!(manifest.layers[0].size, drone.layer_size);
}
