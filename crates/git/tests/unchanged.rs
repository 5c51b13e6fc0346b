//! The no-change fast path: after a delivery, a sync whose inputs and GitOps branches did not
//! move is answered from the delivery state and one branch listing per repository, without
//! fetching or rendering; anything that moved, and changed settings, lead to a real render.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, file_url, sync};
use kalypso_git::sync::Settings;
use kalypso_git::{Delivery, Outcome, RepoUrl, Syncer};
use kalypso_testkit::{rev_parse, runtime, write_files};

fn names(envs: &[&str]) -> Vec<String> {
    envs.iter().map(|s| (*s).to_owned()).collect()
}

fn head(fx: &Fixture, branch: &str) -> String {
    rev_parse(&fx.gitops, &format!("refs/heads/{branch}")).unwrap()
}

/// Delivers dev and stage once, so that both have a delivery state.
fn delivered(fx: &Fixture, settings: Settings) -> Syncer {
    let rt = runtime();
    let syncer = Syncer::new(settings, rt.handle().clone()).unwrap();
    for report in sync(&syncer, &file_url(&fx.control_plane), &[]) {
        let report = report.unwrap();
        assert!(report.is_success(), "{report:?}");
    }
    syncer
}

/// Syncs dev and checks that it was rendered and committed (the fast path did not answer).
fn dev_is_committed(syncer: &Syncer, fx: &Fixture) {
    let report = sync(syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    let Outcome::Delivered(targets) = &report.outcome else {
        panic!("{report:?}");
    };
    assert!(
        matches!(targets[0].delivery, Delivery::Committed { .. }),
        "{targets:?}"
    );
}

fn unchanged(syncer: &Syncer, fx: &Fixture, envs: &[&str]) -> Vec<String> {
    let check = syncer.check(
        &RepoUrl::parse(&file_url(&fx.control_plane)).unwrap(),
        &names(envs),
    );
    check.unchanged.iter().map(|u| u.environment.clone()).collect()
}

#[test]
fn an_unchanged_environment_is_answered_without_fetching_or_rendering() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();

    // The mirrors are gone: nothing but the listing and the state can answer.
    for entry in std::fs::read_dir(&fx.cache).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "state" {
            std::fs::remove_dir_all(entry.path()).unwrap();
        }
    }
    let check = syncer.check(&url, &[]);
    assert!(check.complete, "{check:?}");
    assert_eq!(
        check.remotes, 3,
        "control plane, workload, GitOps: one listing each"
    );
    let dev = check.unchanged("dev").unwrap();
    assert_eq!(dev.assignments, 1);
    assert_eq!(dev.targets.len(), 1);
    assert_eq!(dev.targets[0].branch, "dev");
    let Delivery::UpToDate { head: Some(h), .. } = &dev.targets[0].delivery else {
        panic!("{dev:?}");
    };
    assert_eq!(h.to_string(), head(&fx, "dev"));
    assert_eq!(
        dev.revisions.environment,
        rev_parse(&fx.control_plane, "refs/heads/dev").unwrap()
    );
    assert!(check.unchanged("stage").is_some());
    let left: Vec<_> = std::fs::read_dir(&fx.cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, ["state"], "nothing was fetched into the cache");

    // Named environments are checked alone.
    assert_eq!(unchanged(&syncer, &fx, &["stage"]), ["stage"]);
}

#[test]
fn a_moved_workload_branch_leads_to_a_render_of_what_moved() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let before = head(&fx, "dev");
    write_files(
        &fx.workload,
        "main",
        &[(
            "workload/workload.yaml",
            Some(&common::WORKLOAD.replace("purpose: test", "purpose: other")),
        )],
        "relabel",
    );
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let check = syncer.check(&url, &[]);
    assert!(!check.complete);
    assert!(
        check.unchanged.is_empty(),
        "both environments read the workload: {check:?}"
    );
    // A pass after the check renders and delivers (the workload's label is in no file:
    // the tree stays, and the state is recorded again).
    let mut pass = syncer.pass_after(&url, &check).unwrap();
    let envs = pass.environments(&[]).unwrap();
    for env in &envs {
        let report = pass.sync(env).unwrap();
        assert!(report.is_success());
    }
    assert_eq!(head(&fx, "dev"), before);
    assert_eq!(unchanged(&syncer, &fx, &[]), ["dev", "stage"]);
}

#[test]
fn a_moved_environment_branch_renders_that_environment_only() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let before = head(&fx, "dev");
    common::add_a_cluster_type(&fx);
    assert_eq!(unchanged(&syncer, &fx, &[]), ["stage"]);
    dev_is_committed(&syncer, &fx);
    assert_ne!(head(&fx, "dev"), before);
    assert_eq!(unchanged(&syncer, &fx, &["dev", "stage"]), ["dev", "stage"]);
}

#[test]
fn a_moved_main_branch_renders_every_environment() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    common::release_reconciler_v2(&fx);
    assert!(unchanged(&syncer, &fx, &[]).is_empty());
    assert!(unchanged(&syncer, &fx, &["dev"]).is_empty());
}

#[test]
fn the_environment_list_is_reused_while_the_main_branch_stays() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    assert_eq!(
        syncer.environments_unchanged(&url),
        Some(names(&["dev", "stage"]))
    );
    write_files(
        &fx.control_plane,
        "dev",
        &[("notes.yaml", Some("# note\n"))],
        "note",
    );
    assert_eq!(
        syncer.environments_unchanged(&url),
        Some(names(&["dev", "stage"])),
        "environments are defined on main only"
    );
    write_files(
        &fx.control_plane,
        "main",
        &[("notes.yaml", Some("# note\n"))],
        "note",
    );
    assert_eq!(syncer.environments_unchanged(&url), None);
}

#[test]
fn a_moved_gitops_branch_is_rendered_again() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    // Someone merged a change into the GitOps branch.
    write_files(
        &fx.gitops,
        "dev",
        &[("large/app-dev-target/reconciler.yaml", Some("edited by hand\n"))],
        "hand edit",
    );
    assert_eq!(unchanged(&syncer, &fx, &[]), ["stage"]);
    dev_is_committed(&syncer, &fx);
    assert_eq!(
        kalypso_testkit::branch_files(&fx.gitops, "dev")["large/app-dev-target/reconciler.yaml"],
        b"kind: Reconciler\nversion: v1\n"
    );
    assert_eq!(unchanged(&syncer, &fx, &["dev"]), ["dev"]);
}

#[test]
fn other_settings_or_a_dry_run_do_not_trust_the_state() {
    let fx = Fixture::new();
    let _syncer = delivered(&fx, fx.settings());
    let rt = runtime();
    let mut other = fx.settings();
    other.delivery.message = "another message".into();
    let other = Syncer::new(other, rt.handle().clone()).unwrap();
    assert!(
        unchanged(&other, &fx, &["dev"]).is_empty(),
        "another commit message"
    );

    // A dry run neither trusts nor records a state.
    let fresh = Fixture::new();
    let mut dry = fresh.settings();
    dry.delivery.dry_run = true;
    let dry = delivered(&fresh, dry);
    assert!(unchanged(&dry, &fresh, &["dev"]).is_empty());
    let url = RepoUrl::parse(&file_url(&fresh.control_plane)).unwrap();
    let state = fresh.cache.join("state").join(url.cache_name()).join("dev.json");
    assert!(!state.exists(), "a dry run records nothing");
    assert_eq!(
        unchanged(&delivered(&fresh, fresh.settings()), &fresh, &["dev"]),
        ["dev"]
    );
}

#[test]
fn an_environment_without_a_state_or_with_a_broken_one_takes_the_full_path() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let dir = fx.cache.join("state").join(url.cache_name());
    std::fs::write(dir.join("dev.json"), "{\"format\": 1, \"fingerp").unwrap();
    std::fs::remove_file(dir.join("stage.json")).unwrap();
    let check = syncer.check(&url, &["dev".into(), "stage".into()]);
    assert!(check.unchanged.is_empty() && !check.complete);
    // The next full sync records them again.
    for report in sync(&syncer, &file_url(&fx.control_plane), &["dev", "stage"]) {
        assert!(report.unwrap().is_success());
    }
    assert_eq!(unchanged(&syncer, &fx, &["dev", "stage"]), ["dev", "stage"]);
}

#[test]
fn a_locked_local_gitops_branch_is_reported_with_the_file_to_remove() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    common::add_a_cluster_type(&fx);
    // What a process killed while updating the branch of a repository on this machine leaves.
    let lock = fx.gitops.join("refs/heads/dev.lock");
    std::fs::write(&lock, "").unwrap();
    let error = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("could not update refs/heads/dev: it is locked")
            && message.contains(&format!("if no process is, remove {}", lock.display())),
        "{message}"
    );
    assert!(!error.is_transient());
    std::fs::remove_file(&lock).unwrap();
    let report = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    assert!(report.is_success());
}

/// The hub as far as these tests go: every wave's one cluster is compliant.
struct Compliant;

impl kalypso_git::rollout::WaveGate for Compliant {
    fn health(
        &self,
        _: &str,
        _: &str,
        waves: &[std::collections::BTreeSet<String>],
    ) -> Result<kalypso_git::rollout::GateAnswer, String> {
        let healthy = kalypso_core::rollout::WaveHealth {
            registered: 1,
            compliant: 1,
            compliant_since: Some(0),
            ..Default::default()
        };
        Ok(kalypso_git::rollout::GateAnswer {
            waves: Some(vec![healthy; waves.len()]),
            frozen: None,
        })
    }
}

#[test]
fn a_rollout_in_progress_is_never_unchanged_yet_its_branches_are_listed() {
    let fx = Fixture::new();
    let syncer = delivered(&fx, fx.settings());
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    common::add_a_cluster_type(&fx);
    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "rollout.yaml",
            Some(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: RolloutPolicy\nmetadata:\n  name: rings\n\
                 spec:\n  waves:\n  - name: canary\n    clusterTypeSelector:\n      labelSelector:\n        \
                 matchLabels: {size: small}\n  - name: rest\n    clusterTypeSelector:\n      labelSelector: {}\n",
            ),
        )],
        "rings",
    );
    // One step of dev's rollout, as `sync` takes it: the check, then a pass after it.
    let step = || {
        let check = syncer.check(&url, &names(&["dev"]));
        assert!(check.unchanged.is_empty(), "a rollout goes on: {check:?}");
        let mut pass = syncer.pass_after(&url, &check).unwrap();
        let env = pass.environments(&names(&["dev"])).unwrap().remove(0);
        let run = pass
            .sync_rollout(&env, Some(&Compliant), kalypso_git::hub::now_ms())
            .unwrap();
        let rollout = run.rollout.unwrap();
        assert!(rollout.delivered, "{rollout:?}");
        rollout.state.unwrap()
    };
    let state = fx.cache.join("state").join(url.cache_name()).join("dev.json");
    let marked = || {
        let text = std::fs::read_to_string(&state).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["rollout_in_progress"] == true
    };

    // The canary wave: a delivery of some cluster types, which records no new state; the one
    // before is kept and marked, so the next check lists its three repositories (control
    // plane, workload, GitOps) and the next pass fetches only what moved, yet never answers
    // "nothing moved" while the rollout goes on.
    assert_eq!(step().delivered, 1);
    assert!(marked());
    let check = syncer.check(&url, &names(&["dev"]));
    assert_eq!(check.remotes, 3, "{check:?}");
    assert!(check.unchanged.is_empty());

    // The rest: a delivery of every cluster type, recorded as one a rollout goes on from.
    let rest = step();
    assert_eq!((rest.delivered, rest.status.as_str()), (2, "progressing"));
    assert!(marked());
    assert_eq!(syncer.check(&url, &names(&["dev"])).remotes, 3);

    // Complete: the state says so in a last commit, and a sync with nothing moved is answered
    // from the delivery state again.
    assert_eq!(step().status.as_str(), "complete");
    assert!(!marked());
    assert_eq!(unchanged(&syncer, &fx, &["dev"]), ["dev"]);
}
