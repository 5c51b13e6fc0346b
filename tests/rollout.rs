//! Progressive rollout end to end (issue 28's Tests): the bundled example as local git
//! repositories (examples/local-repos.sh), a RolloutPolicy on `dev` (canary: the `small`
//! cluster type; rest: every other), the hub on SQLite as a child process, and a simulated
//! fleet (kalypso-testkit's `fleet`) that posts the Flux events of the commits its clusters
//! apply. Each `kalypso sync --hub` is one step; the GitOps branch is read back with git.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::rollout::{KALYPSO, Setup, git};
use kalypso_testkit::fleet::{Fleet, Rule};

/// The canary's soak.
const SOAK: Duration = Duration::from_secs(5);

fn policy(on_failure: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: RolloutPolicy\nmetadata:\n  name: rings\nspec:\n  waves:\n  \
         - name: canary\n    clusterTypeSelector:\n      labelSelector:\n        matchLabels: {{size: small}}\n    \
         minSuccessTime: {}s\n  - name: rest\n    clusterTypeSelector:\n      labelSelector: {{}}\n  \
         maxFailures: 0\n  progressDeadline: 10m\n  onFailure: {on_failure}\n",
        SOAK.as_secs()
    )
}

/// The example with a RolloutPolicy whose `onFailure` is `on_failure`, and the hub.
fn setup(on_failure: &str) -> Setup {
    Setup::new(&policy(on_failure), None, None, &[])
}

impl Setup {
    /// `kalypso ACTION --hub URL --env dev ...` (freeze, unfreeze), which must succeed.
    fn hub_action(&self, args: &[&str]) {
        let out = Command::new(KALYPSO)
            .arg(args[0])
            .args(["--hub", &self.url, "--env", "dev"])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn state(&self) -> serde_json::Value {
        let text = git(&self.gitops(), &["show", "dev:.github/tracking/Rollout_State"]);
        serde_json::from_str(&text).unwrap()
    }

    /// The ENVIRONMENT value a cluster type's folders carry on dev (the ConfigMap rolled out).
    fn environment_value(&self, cluster_type: &str) -> Option<String> {
        let files = git(
            &self.gitops(),
            &["ls-tree", "-r", "--name-only", "dev", "--", cluster_type],
        );
        let file = files.lines().find(|f| f.ends_with("platform-config.yaml"))?;
        let text = git(&self.gitops(), &["show", &format!("dev:{file}")]);
        text.lines()
            .find_map(|l| l.trim().strip_prefix("ENVIRONMENT:"))
            .map(|v| v.trim().trim_matches('"').to_owned())
    }

    /// Changes dev's ConfigMap value ENVIRONMENT to `value` on the control plane.
    fn change(&self, value: &str) {
        let clone = self.work.join("dev-clone");
        git(&clone, &["pull", "-q", "--rebase", "origin", "dev"]);
        let path = clone.join("configs/dev-config.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let changed: String = text
            .lines()
            .map(|l| {
                if l.trim_start().starts_with("ENVIRONMENT:") {
                    format!("  ENVIRONMENT: {value}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&path, changed).unwrap();
        git(
            &clone,
            &["commit", "-q", "-am", &format!("ENVIRONMENT is {value}")],
        );
        git(&clone, &["push", "-q", "origin", "dev"]);
    }

    /// Rolls the first change (everything) out to every wave.
    fn roll_out_everything(&self, fleet: &Fleet) {
        self.sync_ok();
        fleet.apply_head();
        std::thread::sleep(SOAK);
        self.sync_ok();
        fleet.apply_head();
        let out = self.sync_ok();
        assert_eq!(self.state()["status"], "complete", "{}\n{out}", self.state());
    }
}

#[test]
fn a_change_goes_canary_first_soaks_then_the_rest_and_a_newer_change_restarts() {
    let setup = setup("Rollback");
    let fleet = setup.fleet();
    // The first sync delivers the canary wave only: the other cluster types have no folder.
    setup.sync_ok();
    let state = setup.state();
    assert_eq!(state["delivered"], 1, "{state}");
    assert!(setup.environment_value("small").is_some());
    assert!(setup.environment_value("large").is_none());
    // The clusters register with their first report; the canary's are compliant, and the next
    // wave waits for the soak.
    let head = fleet.apply_head();
    let out = setup.sync_ok();
    assert!(out.contains("soaking"), "{out}");
    assert_eq!(setup.head(), head);
    std::thread::sleep(SOAK);
    setup.sync_ok();
    assert_eq!(setup.state()["delivered"], 2);
    fleet.apply_head();
    setup.sync_ok();
    assert_eq!(setup.state()["status"], "complete", "{}", setup.state());
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));

    // A ConfigMap change goes to the canary only, in one commit with the state.
    let before = setup.head();
    setup.change("Dev2");
    setup.sync_ok();
    let wave1 = setup.head();
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev2"));
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));
    assert_eq!(setup.state()["delivered"], 1);
    // An environment whose rollout is not complete is not promoted from.
    let out = Command::new(KALYPSO)
        .arg("promote")
        .arg(setup.work.join("control-plane.git"))
        .args(["--from", "dev", "--env", "stage", "--cache-dir"])
        .arg(setup.work.join("cache"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("progressing (1 of 2 waves delivered)"),
        "{stderr}"
    );
    // Every cluster still healthy on the commit before: never a reason to advance.
    fleet.apply(&before, |_| true);
    let out = setup.sync_ok();
    assert!(out.contains("not yet compliant"), "{out}");
    assert_eq!(setup.head(), wave1);
    // The canary applies the wave: compliant, but not for the soak yet.
    fleet.apply(&wave1, |c| c.cluster_type == "small");
    let out = setup.sync_ok();
    assert!(out.contains("soaking"), "{out}");
    assert_eq!(setup.head(), wave1);
    std::thread::sleep(SOAK);
    // A freeze stops the line: soaked, yet the next wave waits until it is lifted.
    setup.hub_action(&["freeze", "--reason", "incident 42"]);
    let out = setup.sync_ok();
    assert!(out.contains("frozen") && out.contains("incident 42"), "{out}");
    assert_eq!(setup.head(), wave1);
    setup.hub_action(&["unfreeze", "--reason", "resolved"]);
    setup.sync_ok();
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev2"));
    assert_eq!(setup.state()["delivered"], 2);

    // A newer change before the rest is compliant: a new rollout from the canary.
    setup.change("Dev3");
    setup.sync_ok();
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev3"));
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev2"));
    let state = setup.state();
    assert_eq!(state["delivered"], 1, "{state}");
    assert_eq!(state["status"], "progressing");
}

#[test]
fn a_failing_canary_halts_the_rollout() {
    let setup = setup("Halt");
    let fleet = setup.fleet();
    setup.roll_out_everything(&fleet);
    let fleet = fleet.failing(Rule::Content(
        "Dev2".to_owned(),
        "Deployment/agent dry-run failed: field is immutable".to_owned(),
    ));
    setup.change("Dev2");
    setup.sync_ok();
    fleet.apply_head();
    let out = setup.sync();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("wave \"canary\"")
            && stderr.contains("small-1")
            && stderr.contains("field is immutable"),
        "{stderr}"
    );
    assert_eq!(setup.state()["status"], "halted");
    // The later wave keeps the old content, and the next sync stays stopped.
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));
    let head = setup.head();
    assert_eq!(setup.sync().status.code(), Some(1));
    assert_eq!(setup.head(), head);
    // check-promote fails at once: the change never reaches the later waves.
    let out = setup.check_promote(&head, "30s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is halted"), "{stderr}");
}

#[test]
fn a_failing_canary_is_rolled_back_by_itself() {
    let setup = setup("Rollback");
    let fleet = setup.fleet();
    setup.roll_out_everything(&fleet);
    let fleet = fleet.failing(Rule::ClusterType(
        "small".to_owned(),
        "HelmRelease/agent install failed".to_owned(),
    ));
    setup.change("Dev2");
    setup.sync_ok();
    let wave1 = setup.head();
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev2"));
    fleet.apply_head();
    let out = setup.sync();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("install failed"), "{stderr}");
    // A new commit gives the canary its previous content back.
    assert_ne!(setup.head(), wave1);
    assert_eq!(git(&setup.gitops(), &["rev-parse", "dev~1"]), wave1);
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev"));
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));
    assert_eq!(setup.state()["status"], "rolled-back");
}

impl Setup {
    /// `kalypso check-promote --env dev --commit COMMIT` with a short timeout.
    fn check_promote(&self, commit: &str, timeout: &str) -> Output {
        Command::new(KALYPSO)
            .args([
                "check-promote",
                "--hub",
                &self.url,
                "--env",
                "dev",
                "--commit",
                commit,
            ])
            .args(["--timeout", timeout, "--interval", "1s"])
            .output()
            .unwrap()
    }

    /// `kalypso rollout ACTION CONTROL_PLANE --env dev --hub URL`.
    fn rollout(&self, action: &str, extra: &[&str]) -> Output {
        Command::new(KALYPSO)
            .args(["rollout", action])
            .arg(self.work.join("control-plane.git"))
            .args(["--env", "dev", "--hub", &self.url, "--cache-dir"])
            .arg(self.work.join("cache"))
            .args(extra)
            .output()
            .unwrap()
    }

    fn rollout_ok(&self, action: &str, extra: &[&str]) -> String {
        let out = self.rollout(action, extra);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "rollout {action} failed:\n{text}");
        text
    }

    /// Each first-parent commit of dev, oldest first, with the rollout state it carries
    /// (`null` before the first rollout).
    fn history(&self) -> Vec<(String, serde_json::Value)> {
        let commits = git(
            &self.gitops(),
            &["rev-list", "--first-parent", "--reverse", "dev"],
        );
        commits
            .lines()
            .map(|c| {
                let out = Command::new("git")
                    .arg("-C")
                    .arg(self.gitops())
                    .args(["show", &format!("{c}:.github/tracking/Rollout_State")])
                    .output()
                    .unwrap();
                let state = if out.status.success() {
                    serde_json::from_slice(&out.stdout).unwrap()
                } else {
                    serde_json::Value::Null
                };
                (c.to_owned(), state)
            })
            .collect()
    }
}

#[test]
fn a_rollout_is_paused_resumed_and_aborted_on_its_gitops_branch() {
    let setup = setup("Halt");
    let fleet = setup.fleet();
    setup.roll_out_everything(&fleet);
    setup.change("Dev2");
    setup.sync_ok();
    let wave1 = setup.head();
    fleet.apply_head();

    // status reads the tracked state and asks the hub how the canary runs it.
    let out = setup.rollout_ok("status", &[]);
    assert!(
        out.contains("is progressing, 1 of 2 wave(s) delivered")
            && out.contains("wave 1/2 canary: small: delivered; 2/2 cluster(s) compliant, 0 failed")
            && out.contains("wave 2/2 rest: command-center, drone, large: waiting")
            && out.contains("next: wave \"canary\": compliant, soaking"),
        "{out}"
    );

    // pause: a commit with the state only (the content of both waves as it was).
    let out = setup.rollout_ok("pause", &[]);
    assert!(out.contains("paused at 1 of 2 waves"), "{out}");
    assert_eq!(git(&setup.gitops(), &["rev-parse", "dev~1"]), wave1);
    let changed = git(&setup.gitops(), &["diff", "--name-only", &wave1, "dev"]);
    assert_eq!(changed, ".github/tracking/Rollout_State");
    assert_eq!(setup.state()["status"], "paused");
    // A paused rollout is not advanced, even after its soak; pausing twice is refused.
    std::thread::sleep(SOAK);
    let paused = setup.head();
    let out = setup.sync_ok();
    assert!(out.contains("paused"), "{out}");
    assert_eq!(setup.head(), paused);
    let out = setup.rollout("pause", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is paused: it cannot be paused"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = setup.rollout_ok("status", &["--json"]);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["status"], "paused", "{status}");
    assert_eq!(status["waves"][0]["delivered"], true);
    assert_eq!(status["waves"][1]["delivered"], false);

    // resume: progressing again, and the next sync delivers the next wave.
    setup.rollout_ok("resume", &[]);
    assert_eq!(setup.state()["status"], "progressing");
    setup.sync_ok();
    assert_eq!(setup.state()["delivered"], 2, "{}", setup.state());
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev2"));

    // check-promote: every cluster may report the newest commit, but until the rollout is
    // complete the environment does not run the change everywhere.
    fleet.apply_head();
    let out = setup.check_promote(&wave1, "3s");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("progressive rollout of") && stderr.contains("is progressing"),
        "{stderr}"
    );
    setup.sync_ok();
    assert_eq!(setup.state()["status"], "complete");
    // Complete: compliant once the clusters run the commit that completed it.
    fleet.apply_head();
    let out = setup.check_promote(&wave1, "30s");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A newer change, wave 1 delivered: abort it.
    setup.change("Dev3");
    setup.sync_ok();
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev3"));

    // abort: the delivered waves get the content they ran before, in one commit; exit 0.
    let before_abort = setup.head();
    let out = setup.rollout_ok("abort", &[]);
    assert!(out.contains("rolled back"), "{out}");
    assert_eq!(git(&setup.gitops(), &["rev-parse", "dev~1"]), before_abort);
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev2"));
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev2"));
    assert_eq!(setup.state()["status"], "rolled-back");
    // Nothing is left to resume.
    assert_eq!(setup.rollout("resume", &[]).status.code(), Some(1));
}

/// kill -9 of `kalypso sync` at points spread over a wave's delivery: the GitOps branch holds
/// the old wave or the new one, never part of one, and the next sync goes on from the tracked
/// state without losing or repeating a wave.
#[test]
fn a_killed_sync_loses_and_repeats_no_wave() {
    let setup = setup("Rollback");
    let fleet = setup.fleet();
    setup.roll_out_everything(&fleet);
    // How long a sync that delivers a wave takes here: the kills are spread over it.
    setup.change("Dev9");
    let started = std::time::Instant::now();
    setup.sync_ok();
    let took = started.elapsed();
    fleet.apply_head();
    std::thread::sleep(SOAK);
    setup.sync_ok();
    fleet.apply_head();
    setup.sync_ok();
    assert_eq!(setup.state()["status"], "complete");
    let delays = [1u32, 3, 5, 7, 9].map(|tenths| took * tenths / 10);
    for (round, delay) in delays.into_iter().enumerate() {
        setup.change(&format!("Dev{}", round + 10));
        // Wave 1 by a sync that is killed, then by the next one.
        for wave in 1..=2 {
            if wave == 2 {
                fleet.apply_head();
                std::thread::sleep(SOAK);
            }
            let mut child = setup
                .sync_command()
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(delay);
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
            let out = setup.sync_ok();
            let state = setup.state();
            assert_eq!(
                state["delivered"], wave,
                "round {round}, wave {wave}: {state}\n{out}"
            );
            assert_eq!(state["status"], "progressing", "{state}");
        }
        fleet.apply_head();
        setup.sync_ok();
        assert_eq!(setup.state()["status"], "complete", "round {round}");
    }
    // Every commit of the branch carries a whole step: per change, wave 1 once, wave 2 once,
    // complete once, in that order.
    let mut steps: Vec<(String, u64, String)> = Vec::new();
    for (_, state) in setup.history() {
        if state.is_null() {
            continue;
        }
        let step = (
            state["change"]["environment"].as_str().unwrap().to_owned(),
            state["delivered"].as_u64().unwrap(),
            state["status"].as_str().unwrap().to_owned(),
        );
        assert!(
            !steps.contains(&step),
            "a step was delivered twice: {step:?} in {steps:?}"
        );
        steps.push(step);
    }
    let per_change: Vec<Vec<(u64, String)>> = steps
        .chunk_by(|a, b| a.0 == b.0)
        .map(|c| c.iter().map(|s| (s.1, s.2.clone())).collect())
        .collect();
    assert_eq!(per_change.len(), 7, "{steps:?}");
    for change in per_change {
        assert_eq!(
            change,
            [
                (1, "progressing".to_owned()),
                (2, "progressing".to_owned()),
                (2, "complete".to_owned())
            ],
            "{steps:?}"
        );
    }
}

/// `kalypso serve` in a child process, killed (SIGKILL) and reaped when dropped.
struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// GETs `path` from serve's HTTP server (its body; empty while it does not answer).
    fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(&self.addr) else {
            return String::new();
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        );
        if stream.write_all(request.as_bytes()).is_err() {
            return String::new();
        }
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        text.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default()
    }

    /// `/status`'s entry of dev.
    fn status(&self) -> serde_json::Value {
        let body = self.get("/status");
        serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v.get("environments")
                    .and_then(|e| e.get("dev"))
                    .cloned()
                    .or_else(|| v.get("dev").cloned())
            })
            .unwrap_or(serde_json::Value::Null)
    }
}

impl Setup {
    /// Writes serve's configuration (dev only, a one-second poll, its own cache; the hub
    /// unless `without_hub`) and starts `kalypso serve`.
    fn serve(&self, without_hub: bool) -> Serve {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut config = format!(
            "controlPlane: {}\nenvironments: [dev]\ninterval: 1s\nlisten: {addr}\ncacheDir: {}\nlog:\n  format: text\n",
            self.work.join("control-plane.git").display(),
            self.work.join("serve-cache").display()
        );
        if !without_hub {
            config.push_str(&format!("hub:\n  url: {}\n", self.url));
        }
        let path = self.work.join("kalypso.yaml");
        std::fs::write(&path, config).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work.join("serve.log"))
            .unwrap();
        let child = Command::new(KALYPSO)
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Serve { child, addr }
    }

    fn serve_log(&self) -> String {
        std::fs::read_to_string(self.work.join("serve.log")).unwrap_or_default()
    }

    /// The rollout state on dev, `null` while there is none.
    fn state_or_null(&self) -> serde_json::Value {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.gitops())
            .args(["show", "dev:.github/tracking/Rollout_State"])
            .output()
            .unwrap();
        if out.status.success() {
            serde_json::from_slice(&out.stdout).unwrap()
        } else {
            serde_json::Value::Null
        }
    }

    /// Waits (at most a minute) until dev's rollout state satisfies `done`.
    fn wait_for(&self, what: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        for _ in 0..600 {
            let state = self.state_or_null();
            if done(&state) {
                return state;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "serve never got to {what}: {}\n--- serve\n{}\n--- hub\n{}",
            self.state_or_null(),
            self.serve_log(),
            self.hub_log()
        );
    }
}

/// The state's (change, delivered, status).
fn step(state: &serde_json::Value) -> (String, u64, String) {
    (
        state["change"]["environment"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        state["delivered"].as_u64().unwrap_or_default(),
        state["status"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn serve_rolls_a_change_out_wave_by_wave_and_rolls_a_failing_canary_back() {
    let setup = setup("Rollback");
    let fleet = setup.fleet();
    let serve = setup.serve(false);
    // The canary first; the rest waits for the canary's clusters and the soak.
    let wave1 = setup.wait_for("wave 1", |s| s["delivered"] == 1);
    assert_eq!(wave1["status"], "progressing");
    assert!(setup.environment_value("small").is_some());
    assert!(setup.environment_value("large").is_none());
    let head = fleet.apply_head();
    // Polls that change nothing write nothing: still the wave-1 commit during the soak.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(setup.head(), head, "{}", setup.serve_log());
    let status = serve.status();
    assert_eq!(status["rollout"]["status"], "progressing", "{status}");
    assert_eq!(status["result"], "rollout_waiting", "{status}");
    assert!(
        status["rollout"]["message"].as_str().unwrap().contains("soaking"),
        "{status}"
    );
    setup.wait_for("wave 2", |s| s["delivered"] == 2);
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));
    fleet.apply_head();
    setup.wait_for("complete", |s| s["status"] == "complete");
    // Complete: no more commits.
    let complete = setup.head();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(setup.head(), complete);
    let metrics = serve.get("/metrics");
    assert!(
        metrics.contains("kalypso_rollout_steps_total{environment=\"dev\",result=\"wave\"} 2")
            && metrics.contains("kalypso_rollout_steps_total{environment=\"dev\",result=\"complete\"} 1"),
        "{metrics}"
    );

    // A change whose canary fails: rolled back by itself, in a new commit.
    let fleet = fleet.failing(Rule::ClusterType(
        "small".to_owned(),
        "HelmRelease/agent install failed".to_owned(),
    ));
    setup.change("Dev2");
    setup.wait_for("wave 1 of Dev2", |s| {
        s["delivered"] == 1 && s["change"] != wave1["change"]
    });
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev2"));
    let wave1 = fleet.apply_head();
    let state = setup.wait_for("the rollback", |s| s["status"] == "rolled-back");
    assert!(
        state["failure"]
            .as_str()
            .unwrap()
            .contains("small-1 (small): HelmRelease/agent install failed"),
        "{state}"
    );
    assert_eq!(git(&setup.gitops(), &["rev-parse", "dev~1"]), wave1);
    assert_eq!(setup.environment_value("small").as_deref(), Some("Dev"));
    assert_eq!(setup.environment_value("large").as_deref(), Some("Dev"));
    let mut status = serve.status();
    for _ in 0..100 {
        if status["result"] == "rollout_failed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        status = serve.status();
    }
    assert_eq!(status["result"], "rollout_failed", "{status}");
    assert!(
        status["detail"].as_str().unwrap().contains("install failed"),
        "{status}"
    );
    assert_eq!(status["rollout"]["status"], "rolled-back", "{status}");
    assert!(
        setup.serve_log().contains("rollout failed"),
        "{}",
        setup.serve_log()
    );
    // Stopped: the next polls write nothing.
    let rolled_back = setup.head();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(setup.head(), rolled_back);
}

#[test]
fn serve_without_a_hub_refuses_an_environment_with_a_rollout_policy() {
    let setup = setup("Halt");
    let serve = setup.serve(true);
    let mut status = serve.status();
    for _ in 0..600 {
        if status["result"] == "error" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        status = serve.status();
    }
    assert_eq!(status["result"], "error", "{status}\n{}", setup.serve_log());
    let detail = status["detail"].as_str().unwrap();
    assert!(
        detail.contains("RolloutPolicy \"rings\"")
            && detail.contains("hub")
            && detail.contains("nothing was delivered"),
        "{detail}"
    );
    // Nothing is delivered, not even a wave: the GitOps repository has no dev branch yet.
    assert_eq!(git(&setup.gitops(), &["branch", "--list", "dev"]), "");
    assert!(
        setup.serve_log().contains("RolloutPolicy"),
        "{}",
        setup.serve_log()
    );
}

/// kill -9 of serve mid-rollout: a restarted serve continues the same rollout, each step once.
#[test]
fn a_killed_serve_is_continued_by_the_next_one() {
    let setup = setup("Rollback");
    let fleet = setup.fleet();
    let serve = setup.serve(false);
    let wave1 = setup.wait_for("wave 1", |s| s["delivered"] == 1);
    drop(serve); // SIGKILL
    fleet.apply_head();
    std::thread::sleep(SOAK);
    let serve = setup.serve(false);
    setup.wait_for("wave 2", |s| s["delivered"] == 2);
    // Killed again while the rest is waited for; the clusters apply it meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    drop(serve);
    fleet.apply_head();
    let _serve = setup.serve(false);
    let complete = setup.wait_for("complete", |s| s["status"] == "complete");
    assert_eq!(complete["change"], wave1["change"]);
    let steps: Vec<(String, u64, String)> = setup
        .history()
        .iter()
        .filter(|(_, s)| !s.is_null())
        .map(|(_, s)| step(s))
        .collect();
    let change = wave1["change"]["environment"].as_str().unwrap().to_owned();
    assert_eq!(
        steps,
        [
            (change.clone(), 1, "progressing".to_owned()),
            (change.clone(), 2, "progressing".to_owned()),
            (change, 2, "complete".to_owned()),
        ]
    );
}
