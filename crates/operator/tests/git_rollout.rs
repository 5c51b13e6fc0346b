//! `--source git` with a RolloutPolicy (issue 28 item 2): each reconcile's work
//! ([`gitsource::sync_environment`]) is one step of the rollout, and the Environment's `Ready`
//! condition ([`gitsource::run_condition`]) says where it is. Tested as the git source's
//! delivery is, without a Kubernetes API: the bundled example as local git repositories
//! (examples/local-repos.sh), a RolloutPolicy on `dev` (canary: `small`), and the hub as a
//! stand-in [`WaveGate`] (`tests/rollout.rs` runs rollouts against the real hub).
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kalypso_core::rollout::WaveHealth;
use kalypso_git::rollout::{GateAnswer, WaveGate};
use kalypso_git::{EnvironmentRef, RepoUrl, Settings, Syncer};
use kalypso_operator::controller::gitsource::{run_condition, sync_environment};
use kalypso_testkit::{git, runtime};

const RINGS: &str = "apiVersion: scheduler.kalypso.io/v1alpha1
kind: RolloutPolicy
metadata:
  name: rings
spec:
  waves:
  - name: canary
    clusterTypeSelector:
      labelSelector:
        matchLabels: {size: small}
  - name: rest
    clusterTypeSelector:
      labelSelector: {}
  onFailure: Rollback
";

/// The hub as the test says: every registered cluster compliant for an hour, or one failed.
struct Gate {
    failing: bool,
}

impl WaveGate for Gate {
    fn health(&self, _: &str, _: &str, waves: &[BTreeSet<String>]) -> Result<GateAnswer, String> {
        let health = waves
            .iter()
            .map(|_| WaveHealth {
                registered: 1,
                compliant: u64::from(!self.failing),
                failed: if self.failing {
                    vec![(
                        "small-1".to_owned(),
                        "small".to_owned(),
                        "HelmRelease/agent install failed".to_owned(),
                    )]
                } else {
                    Vec::new()
                },
                failed_count: u64::from(self.failing),
                compliant_since: (!self.failing).then(|| now() - 3_600_000),
                without_clusters: Vec::new(),
            })
            .collect();
        Ok(GateAnswer {
            waves: Some(health),
            frozen: None,
        })
    }
}

fn now() -> i64 {
    kalypso_git::hub::now_ms()
}

struct Example {
    _dir: tempfile::TempDir,
    work: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Example {
    fn new() -> Example {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().to_owned();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/local-repos.sh");
        let status = Command::new("sh")
            .arg(script)
            .arg(&work)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let example = Example {
            _dir: dir,
            work,
            rt: runtime(),
        };
        example.commit_to_dev("rollout.yaml", RINGS);
        example
    }

    /// Commits `file` with `text` to the control plane's dev branch.
    fn commit_to_dev(&self, file: &str, text: &str) {
        let clone = self.work.join("dev-clone");
        if !clone.exists() {
            let origin = self.work.join("control-plane.git");
            git(
                &self.work,
                &[
                    "clone",
                    "-q",
                    "--branch",
                    "dev",
                    origin.to_str().unwrap(),
                    "dev-clone",
                ],
            );
        }
        std::fs::write(clone.join(file), text).unwrap();
        for args in [
            &["add", "-A"][..],
            &[
                "-c",
                "user.name=P",
                "-c",
                "user.email=p@example.com",
                "commit",
                "-q",
                "-m",
                file,
            ],
            &["push", "-q", "origin", "dev"],
        ] {
            git(&clone, args);
        }
    }

    fn syncer(&self) -> Syncer {
        Syncer::new(
            Settings {
                cache_dir: self.work.join("cache"),
                ..Settings::default()
            },
            self.rt.handle().clone(),
        )
        .unwrap()
    }

    fn url(&self) -> RepoUrl {
        RepoUrl::parse(self.work.join("control-plane.git").to_str().unwrap()).unwrap()
    }

    /// dev as an Environment object with `spec.controlPlane` names it.
    fn env(&self) -> EnvironmentRef {
        EnvironmentRef {
            name: "dev".to_owned(),
            branch: "dev".to_owned(),
            path: ".".to_owned(),
            repo: self.url().to_string(),
        }
    }

    fn state(&self) -> serde_json::Value {
        let text = git(
            &self.work.join("gitops.git"),
            &["show", "dev:.github/tracking/Rollout_State"],
        );
        serde_json::from_str(&text).unwrap()
    }
}

#[test]
fn each_reconcile_is_one_step_of_the_rollout_and_the_condition_says_where_it_is() {
    let ex = Example::new();
    let syncer = ex.syncer();
    let (url, env) = (ex.url(), ex.env());

    // Without the hub: an error, nothing delivered.
    let error = sync_environment(&syncer, &url, &env, false, None, now()).unwrap_err();
    assert!(error.to_string().contains("RolloutPolicy \"rings\""), "{error}");
    assert!(error.to_string().contains("nothing was delivered"), "{error}");
    assert!(!git(&ex.work.join("gitops.git"), &["branch", "--list", "dev"]).contains("dev"));

    let healthy = Gate { failing: false };
    let run = sync_environment(&syncer, &url, &env, false, Some(&healthy), now()).unwrap();
    let ready = run_condition(&run);
    assert!(ready.status, "{ready:?}");
    assert_eq!(ready.reason, "RolloutProgressing");
    assert!(
        ready
            .message
            .contains("wave 1/2 (canary) gets the change (1 of 2 waves delivered)"),
        "{}",
        ready.message
    );
    assert_eq!(ex.state()["delivered"], 1);
    let run = sync_environment(&syncer, &url, &env, false, Some(&healthy), now()).unwrap();
    assert_eq!(run_condition(&run).reason, "RolloutProgressing");
    assert_eq!(ex.state()["delivered"], 2);
    let run = sync_environment(&syncer, &url, &env, false, Some(&healthy), now()).unwrap();
    let ready = run_condition(&run);
    assert_eq!(ready.reason, "RolloutComplete", "{ready:?}");
    assert_eq!(ex.state()["status"], "complete");
    // Complete: a reconcile with nothing new writes nothing.
    let head = git(&ex.work.join("gitops.git"), &["rev-parse", "dev"]);
    let run = sync_environment(&syncer, &url, &env, false, Some(&healthy), now()).unwrap();
    assert!(run_condition(&run).status);
    assert_eq!(git(&ex.work.join("gitops.git"), &["rev-parse", "dev"]), head);

    // A change whose canary fails: rolled back, and the condition names the wave, the cluster
    // and Flux's message.
    ex.commit_to_dev("note.txt", "a change\n");
    let run = sync_environment(&syncer, &url, &env, false, Some(&healthy), now()).unwrap();
    assert_eq!(run_condition(&run).reason, "RolloutProgressing");
    let failing = Gate { failing: true };
    let run = sync_environment(&syncer, &url, &env, false, Some(&failing), now()).unwrap();
    let ready = run_condition(&run);
    assert!(!ready.status);
    assert_eq!(ready.reason, "RolloutFailed");
    assert!(
        ready.message.contains("rolled-back")
            && ready.message.contains("wave \"canary\"")
            && ready
                .message
                .contains("small-1 (small): HelmRelease/agent install failed"),
        "{}",
        ready.message
    );
    assert_eq!(ex.state()["status"], "rolled-back");
}
