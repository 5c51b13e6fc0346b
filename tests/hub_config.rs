//! `kalypso hub`'s configuration file and token hashes, as a user meets them: `kalypso hub
//! hash-token` prints the hash the file holds (from a file or standard input), and a hub whose
//! configuration file is wrong does not start and names the file and the field. The token
//! never appears in the hub's output. The control plane may be given in the file
//! (`controlPlane`, relative to its folder), and `--control-plane` overrides it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kalypso() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kalypso"));
    cmd.env("NO_COLOR", "1").env_remove("KALYPSO_HUB_CONFIG");
    cmd
}

#[test]
fn hash_token_prints_the_sha256_of_the_token() {
    let tmp = tempfile::tempdir().unwrap();
    // sha256("abc"), the FIPS 180-2 example.
    let expected = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n";
    std::fs::write(tmp.path().join("token"), "abc\n").unwrap();
    let out = kalypso()
        .args(["hub", "hash-token", "--token-file"])
        .arg(tmp.path().join("token"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    let mut child = kalypso()
        .args(["hub", "hash-token"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"  abc  ").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);

    let out = kalypso()
        .args(["hub", "hash-token"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the token is empty"));
}

#[test]
fn a_bad_configuration_file_stops_the_hub_naming_the_file_and_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("hub.yaml");
    let token = "n0t-a-hash-but-a-t0ken";
    for (text, message) in [
        ("tokenz: []\n", "unknown field `tokenz`"),
        (
            &*format!("tokens:\n- name: ci\n  hash: {token}\n  scopes: [read]\n"),
            ": tokens[0].hash: not sha256:<64 hex digits>",
        ),
        (
            "tokens:\n- name: ci\n  hash: sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n  scopes: [write]\n",
            ": tokens[0].scopes[0]: \"write\" is not one of read, report, approve, approve:ENV, admin",
        ),
        (
            "oidc:\n  issuer: https://login.contoso.com\n  clientId: hub\n  clientSecretFile: missing-secret\n  redirectUrl: https://hub.contoso.com/auth/callback\n",
            "cannot read the OIDC client secret file",
        ),
        (
            "notifications:\n  receivers:\n  - {name: slack, type: slack, url: 'ftp://hooks.example'}\n",
            ": notifications: receivers[0] (\"slack\"): the URL is not http(s)",
        ),
        (
            "controlPlane: ftp://example.com/control-plane\n",
            ": controlPlane: ",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let out = kalypso()
            .args(["hub", "--listen", "127.0.0.1:0", "--database"])
            .arg(format!("sqlite://{}", tmp.path().join("hub.db").display()))
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        let named = if message.starts_with("cannot read") {
            tmp.path().join("missing-secret")
        } else {
            file.clone()
        };
        assert!(stderr.contains(&*named.display().to_string()), "{stderr}");
        assert!(stderr.contains(message), "{message}: {stderr}");
        assert!(!stderr.contains(token), "{stderr}");
    }
    // Notifications in the file and with --notifications: one place only.
    std::fs::write(
        &file,
        "notifications:\n  receivers:\n  - {name: slack, type: slack, url: 'http://127.0.0.1:9/hook'}\n",
    )
    .unwrap();
    let flag_file = tmp.path().join("notifications.yaml");
    std::fs::write(&flag_file, "receivers: []\n").unwrap();
    let out = kalypso()
        .args(["hub", "--listen", "127.0.0.1:0", "--database"])
        .arg(format!("sqlite://{}", tmp.path().join("hub.db").display()))
        .arg("--config")
        .arg(&file)
        .arg("--notifications")
        .arg(&flag_file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "{}: notifications: give them in the configuration file or with --notifications, not both",
            file.display()
        )),
        "{stderr}"
    );
}

/// Starts `kalypso hub` with `config` and `args`, its database, cache and log in `dir`
/// (created); returns it and its URL.
fn start_hub(dir: &Path, config: &Path, args: &[&str]) -> (std::process::Child, String) {
    std::fs::create_dir_all(dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(dir.join("hub.log")).unwrap();
    let hub = kalypso()
        .args(["hub", "--listen", &format!("127.0.0.1:{port}"), "--database"])
        .arg(format!("sqlite://{}", dir.join("hub.db").display()))
        .args(["--refresh", "1s", "--no-dashboard", "--cache-dir"])
        .arg(dir.join("hub-cache"))
        .arg("--config")
        .arg(config)
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    (hub, format!("http://127.0.0.1:{port}"))
}

/// Waits until `done` holds for the hub's environment list (names) and its log.
fn wait_for(url: &str, log: &Path, what: &str, done: impl Fn(&[String], &str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names: Vec<String> = ureq::get(&format!("{url}/api/v1/environments"))
            .call()
            .ok()
            .and_then(|mut r| r.body_mut().read_to_string().ok())
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .map(|v| {
                v["environments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|e| e["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if done(&names, &text) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: environments {names:?}, log:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_control_plane_may_be_given_in_the_file_and_the_flag_overrides_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new("sh")
        .arg(root.join("examples/local-repos.sh"))
        .arg(dir.join("repos"))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // Relative to the file's folder.
    let config = dir.join("hub.yaml");
    std::fs::write(&config, "controlPlane: repos/control-plane.git\n").unwrap();
    let first = dir.join("first");
    let (mut hub, url) = start_hub(&first, &config, &[]);
    wait_for(
        &url,
        &first.join("hub.log"),
        "the file's control plane",
        |names, _| names.iter().any(|n| n == "dev") && names.iter().any(|n| n == "stage"),
    );
    hub.kill().unwrap();
    hub.wait().unwrap();

    // The flag wins: the hub follows the control plane it names (missing here), not the file's.
    let missing = dir.join("missing.git");
    let second = dir.join("second");
    let (mut hub, url) = start_hub(&second, &config, &["--control-plane", missing.to_str().unwrap()]);
    wait_for(
        &url,
        &second.join("hub.log"),
        "the flag's control plane",
        |names, log| names.is_empty() && log.contains("GitOps refresh failed") && log.contains("missing.git"),
    );
    let log = std::fs::read_to_string(second.join("hub.log")).unwrap();
    assert!(!log.contains("repos/control-plane.git"), "{log}");
    hub.kill().unwrap();
    hub.wait().unwrap();
}
