//! A failed progressive rollout in `pr` mode is reported as an issue in the GitOps repository
//! (issue 28 item 3), through the same forge path as render failures: against a GitHub REST
//! stand-in on loopback, with the exact request checked, and never filed twice for the same
//! failed rollout (its pull request not merged yet, then merged). The hub is a stand-in
//! [`WaveGate`] here; `tests/rollout.rs` runs rollouts against the real hub.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::{Fixture, add_a_cluster_type};
use kalypso_core::rollout::WaveHealth;
use kalypso_git::rollout::{GateAnswer, RolloutRun, WaveGate};
use kalypso_git::{Delivery, Mode, Outcome, RepoUrl, Syncer};
use kalypso_testkit::{FakeGitHub, GitHttpServer, git, runtime, write_files};

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
  onFailure: Halt
";

/// The hub as the test says: the canary's one cluster failed (or not).
struct Gate {
    failing: bool,
}

impl WaveGate for Gate {
    fn health(&self, _: &str, _: &str, waves: &[BTreeSet<String>]) -> Result<GateAnswer, String> {
        let health = waves
            .iter()
            .map(|_| {
                if self.failing {
                    WaveHealth {
                        registered: 1,
                        compliant: 0,
                        failed: vec![(
                            "small-1".to_owned(),
                            "small".to_owned(),
                            "Deployment/agent dry-run failed: field is immutable".to_owned(),
                        )],
                        failed_count: 1,
                        ..WaveHealth::default()
                    }
                } else {
                    WaveHealth {
                        registered: 1,
                        compliant: 0,
                        ..WaveHealth::default()
                    }
                }
            })
            .collect();
        Ok(GateAnswer {
            waves: Some(health),
            frozen: None,
        })
    }
}

/// The hub as the test says: every wave's one cluster compliant.
struct Healthy;

impl WaveGate for Healthy {
    fn health(&self, _: &str, _: &str, waves: &[BTreeSet<String>]) -> Result<GateAnswer, String> {
        let healthy = WaveHealth {
            registered: 1,
            compliant: 1,
            compliant_since: Some(0),
            ..WaveHealth::default()
        };
        Ok(GateAnswer {
            waves: Some(vec![healthy; waves.len()]),
            frozen: None,
        })
    }
}

struct Scenario {
    rt: tokio::runtime::Runtime,
    fx: Fixture,
    git: GitHttpServer,
    github: FakeGitHub,
}

impl Scenario {
    fn new() -> Scenario {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let git = GitHttpServer::start(rt.handle(), dir.path().join("repos"), None);
        let github = FakeGitHub::start(rt.handle());
        let fx = Fixture::in_dir(
            dir,
            Some(&git.url("contoso/gitops.git")),
            Some(&git.url("contoso/app.git")),
        );
        write_files(&fx.gitops, "dev", &[("README.md", Some("platform"))], "init");
        add_a_cluster_type(&fx);
        write_files(
            &fx.control_plane,
            "dev",
            &[("rollout.yaml", Some(RINGS))],
            "rings",
        );
        Scenario { rt, fx, git, github }
    }

    fn run(&self, gate: &dyn WaveGate) -> RolloutRun {
        let mut settings = self.fx.settings();
        settings.delivery.mode = Mode::Pr;
        settings.delivery.github_api_url = self.github.url();
        let syncer = Syncer::new(settings, self.rt.handle().clone()).unwrap();
        let url = RepoUrl::parse(&self.git.url("contoso/control-plane.git")).unwrap();
        let mut pass = syncer.pass(&url).unwrap();
        let env = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
        pass.sync_rollout(&env, Some(gate), kalypso_git::hub::now_ms())
            .unwrap()
    }

    /// Merges the pull request `run` opened: its commit becomes dev's head.
    fn merge(&self, run: &RolloutRun) {
        let Some(report) = &run.report else {
            panic!("nothing delivered: {:?}", run.rollout)
        };
        let Outcome::Delivered(targets) = &report.outcome else {
            panic!("{:?}", report.outcome)
        };
        let Delivery::PullRequest { commit, .. } = &targets[0].delivery else {
            panic!("{:?}", targets[0].delivery)
        };
        git(
            &self.fx.gitops,
            &["update-ref", "refs/heads/dev", &commit.to_string()],
        );
    }

    fn issue_requests(&self) -> Vec<kalypso_testkit::Recorded> {
        self.github.requests_to("POST", "/repos/contoso/gitops/issues")
    }
}

#[test]
fn a_failed_rollout_is_reported_once_as_an_issue_in_pr_mode() {
    let s = Scenario::new();
    // Wave 1 in a pull request, merged: the canary runs the change.
    let first = s.run(&Gate { failing: false });
    assert!(first.rollout.as_ref().unwrap().delivered);
    s.merge(&first);
    // Still waiting for the canary: no issue.
    let waiting = s.run(&Gate { failing: false });
    assert!(waiting.report.is_none(), "{:?}", waiting.rollout);
    assert!(s.issue_requests().is_empty());

    // The canary's cluster fails: the rollout halts (a pull request with the state), and the
    // failure is filed as an issue.
    let halted = s.run(&Gate { failing: true });
    let rollout = halted.rollout.as_ref().unwrap();
    assert!(rollout.failed() && rollout.delivered, "{rollout:?}");
    let state = rollout.state.as_ref().unwrap();
    let change = &state.change;
    let created = s.issue_requests();
    assert_eq!(created.len(), 1, "{created:?}");
    let title = format!(
        "Rollout of {} (main {}) failed in dev environment",
        &change.environment[..12],
        &change.main[..12]
    );
    let expected_body = format!(
        "The progressive rollout of environment dev (RolloutPolicy rings) is halted.\n\n\
         Failure: wave \"canary\": 1 failed cluster(s), 0 allowed: small-1 (small): Deployment/agent dry-run failed: field is immutable\n\n\
         Change: environment branch commit {}, main commit {}, app {}\n\n\
         Waves:\n- canary (small): delivered\n- rest (large): not delivered\n\n\
         The later waves keep their previous content. A newer change starts a new rollout; \
         `kalypso rollout abort` gives the delivered waves their previous content back.\n",
        change.environment, change.main, change.workloads["app"]
    );
    assert_eq!(
        created[0].body,
        serde_json::json!({"title": title, "body": expected_body}),
        "{:#}",
        created[0].body
    );
    assert_eq!(rollout.issue.as_ref().unwrap().created.len(), 1);

    // The halting pull request is not merged yet: the next run fails the rollout again, and
    // files nothing twice.
    let again = s.run(&Gate { failing: true });
    assert!(again.rollout.as_ref().unwrap().failed());
    assert_eq!(s.issue_requests().len(), 1);
    assert!(
        s.github
            .requests()
            .iter()
            .all(|r| r.method != "PATCH" || !r.path.contains("/issues/")),
        "the issue's text did not change"
    );
    // Merged: the rollout is halted on the branch; later runs file nothing.
    s.merge(&again);
    let stopped = s.run(&Gate { failing: true });
    assert!(stopped.report.is_none());
    assert!(stopped.rollout.as_ref().unwrap().failed());
    assert_eq!(s.issue_requests().len(), 1);
    assert_eq!(s.github.issues().iter().filter(|i| i.state == "open").count(), 1);
}

#[test]
fn push_mode_files_no_issue() {
    let s = Scenario::new();
    let mut settings = s.fx.settings();
    settings.delivery.mode = Mode::Push;
    settings.delivery.github_api_url = s.github.url();
    let syncer = Syncer::new(settings, s.rt.handle().clone()).unwrap();
    let url = RepoUrl::parse(&s.git.url("contoso/control-plane.git")).unwrap();
    for failing in [false, true] {
        let mut pass = syncer.pass(&url).unwrap();
        let env = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
        let run = pass
            .sync_rollout(&env, Some(&Gate { failing }), kalypso_git::hub::now_ms())
            .unwrap();
        assert_eq!(run.rollout.unwrap().failed(), failing);
    }
    assert!(
        s.github.requests().iter().all(|r| !r.path.contains("/issues")),
        "{:?}",
        s.github.requests()
    );
}

#[test]
fn a_later_rollout_that_completes_closes_the_failed_one_s_issue() {
    let s = Scenario::new();
    let stage = s.github.add_issue(
        "Rollout of 0123456789ab (main 0123456789ab) failed in stage environment",
        "another environment's",
    );
    let render = s.github.add_issue(
        "Deployment target app-dev failed in dev environment",
        "a render failure",
    );
    // The canary fails the rollout: reported, and the halting pull request merged.
    let first = s.run(&Gate { failing: false });
    s.merge(&first);
    let halted = s.run(&Gate { failing: true });
    s.merge(&halted);
    let failed = halted.rollout.unwrap().issue.unwrap().created[0];

    // A newer change rolls out to every wave; the run that completes it closes the issue.
    common::release_reconciler_v2(&s.fx);
    for _ in 0..2 {
        let wave = s.run(&Healthy);
        let rollout = wave.rollout.as_ref().unwrap();
        assert_eq!(rollout.state.as_ref().unwrap().status.as_str(), "progressing");
        assert!(rollout.issue.is_none(), "{rollout:?}");
        s.merge(&wave);
    }
    assert!(
        s.github
            .requests_to("PATCH", &format!("/issues/{failed}"))
            .is_empty()
    );
    let done = s.run(&Healthy);
    let rollout = done.rollout.as_ref().unwrap();
    assert_eq!(rollout.state.as_ref().unwrap().status.as_str(), "complete");
    assert_eq!(rollout.issue.as_ref().unwrap().closed, [failed]);
    let closed = s
        .github
        .requests_to("PATCH", &format!("/repos/contoso/gitops/issues/{failed}"));
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(
        closed[0].body,
        serde_json::json!({"state": "closed", "state_reason": "completed"})
    );
    // Its pull request not merged yet, the run repeats and closes nothing more; merged, the
    // rollout is complete and later runs touch no issue.
    let again = s.run(&Healthy);
    assert!(
        again
            .rollout
            .as_ref()
            .unwrap()
            .issue
            .as_ref()
            .unwrap()
            .closed
            .is_empty()
    );
    s.merge(&again);
    let quiet = s.run(&Healthy);
    assert!(quiet.report.is_none(), "{:?}", quiet.rollout);
    let state = |number: u64| {
        s.github
            .issues()
            .into_iter()
            .find(|i| i.number == number)
            .unwrap()
            .state
    };
    assert_eq!(state(failed), "closed");
    assert_eq!(state(stage), "open", "another environment's rollout");
    assert_eq!(state(render), "open", "not a rollout's issue");
    assert_eq!(
        s.github.requests_to("PATCH", &format!("/issues/{failed}")).len(),
        1
    );
}
