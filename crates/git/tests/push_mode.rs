//! `push` mode over `file://`: reading the control plane from branches, promotion pins,
//! workload repositories, commits that happen only when the tree changes.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, base_repo, file_url, sync};
use kalypso_core::Code;
use kalypso_git::{Delivery, Outcome, Syncer};
use kalypso_testkit::{branch_files, commit_count, git, rev_parse, runtime, write_files};

fn delivered(report: &kalypso_git::EnvReport) -> &Delivery {
    match &report.outcome {
        Outcome::Delivered(targets) => &targets[0].delivery,
        Outcome::Failed { failures, .. } => panic!("not delivered: {failures:?}"),
    }
}

#[test]
fn commits_the_rendered_tree_once() {
    let rt = runtime();
    let fx = Fixture::new();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();

    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let report = reports[0].as_ref().unwrap();
    let Delivery::Committed { commit, changes } = delivered(report) else {
        panic!("expected a commit: {report:?}");
    };
    assert_eq!(
        rev_parse(&fx.gitops, "refs/heads/dev").as_deref(),
        Some(commit.to_string().as_str())
    );
    assert_eq!(changes.added, 4);
    let files = branch_files(&fx.gitops, "dev");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "large/README.md",
            "large/app-dev-target/namespace.yaml",
            "large/app-dev-target/platform-config.yaml",
            "large/app-dev-target/reconciler.yaml",
        ]
    );
    assert_eq!(
        files["large/app-dev-target/reconciler.yaml"],
        b"kind: Reconciler\nversion: v1\n"
    );
    let log = git(&fx.gitops, &["log", "-1", "--format=%an <%ae>|%s", "dev"]);
    assert_eq!(
        log.trim(),
        "Kalypso Scheduler <kalypso.scheduler@email.com>|Kalypso Scheduler commit"
    );
    // The body says which environment and which control-plane commits the commit carries.
    let body = git(&fx.gitops, &["log", "-1", "--format=%b", "dev"]);
    assert_eq!(
        body.trim(),
        format!(
            "dev: 4 files changed in 1 cluster type\n\nEnvironment: dev\nControl plane: main {}, dev {}\nWorkload repositories: 1",
            report.revisions.main, report.revisions.environment
        )
    );

    // Nothing changed: nothing is committed.
    let again = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let again = again[0].as_ref().unwrap();
    assert!(matches!(delivered(again), Delivery::UpToDate { head: Some(h), .. } if h == commit));
    assert_eq!(commit_count(&fx.gitops, "dev"), 1);
    assert_eq!(again.revisions, report.revisions);
}

#[test]
fn keeps_foreign_files_by_the_original_rules_and_updates_changed_inputs() {
    let rt = runtime();
    let fx = Fixture::new();
    // The GitOps branch already has content: root files and dot-folders stay, folders of
    // cluster types that are no longer there go.
    write_files(
        &fx.gitops,
        "dev",
        &[
            ("README.md", Some("platform gitops")),
            (".github/workflows/check.yaml", Some("on: push")),
            ("retired/README.md", Some("old")),
        ],
        "seed",
    );
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    sync(&syncer, &fx.control_plane.display().to_string(), &["dev"])[0]
        .as_ref()
        .unwrap();
    let files = branch_files(&fx.gitops, "dev");
    assert!(files.contains_key("README.md") && files.contains_key(".github/workflows/check.yaml"));
    assert!(!files.contains_key("retired/README.md"));

    // A new template version on main changes exactly one file.
    common::release_reconciler_v2(&fx);
    let report = sync(&syncer, &fx.control_plane.display().to_string(), &["dev"]);
    let Delivery::Committed { changes, .. } = delivered(report[0].as_ref().unwrap()) else {
        panic!("expected a commit");
    };
    assert_eq!((changes.added, changes.modified, changes.deleted), (0, 1, 0));
    assert_eq!(
        branch_files(&fx.gitops, "dev")["large/app-dev-target/reconciler.yaml"],
        b"kind: Reconciler\nversion: v2\n"
    );
    assert_eq!(commit_count(&fx.gitops, "dev"), 3);
}

#[test]
fn reads_main_at_the_promoted_commit() {
    let rt = runtime();
    let fx = Fixture::new();
    let v1 = rev_parse(&fx.control_plane, "refs/heads/main").unwrap();
    let v2 = common::release_reconciler_v2(&fx);
    write_files(
        &fx.control_plane,
        "dev",
        &[("base-repo.yaml", Some(&base_repo(Some(&v1))))],
        "pin v1",
    );
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let reports = sync(&syncer, &file_url(&fx.control_plane), &[]);
    assert_eq!(reports.len(), 2, "both environments are discovered");
    let dev = reports[0].as_ref().unwrap();
    assert_eq!(dev.environment, "dev");
    assert_eq!(dev.revisions.main, v1);
    let files = branch_files(&fx.gitops, "dev");
    assert_eq!(
        files["large/app-dev-target/reconciler.yaml"],
        b"kind: Reconciler\nversion: v1\n"
    );
    assert_eq!(files[".github/tracking/Promoted_Commit_Id"], v1.as_bytes());
    // stage pins nothing: it follows main's tip and has no tracking file.
    let stage = branch_files(&fx.gitops, "stage");
    assert_eq!(
        stage["large/app-stage-target/reconciler.yaml"],
        b"kind: Reconciler\nversion: v2\n"
    );
    assert!(!stage.contains_key(".github/tracking/Promoted_Commit_Id"));
    assert_eq!(reports[1].as_ref().unwrap().revisions.main, v2);
}

#[test]
fn unknown_environments_and_missing_pins_are_reported() {
    let rt = runtime();
    let fx = Fixture::new();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let url = kalypso_git::RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let pass = syncer.pass(&url).unwrap();
    let err = pass.environments(&["prod".to_owned()]).unwrap_err().to_string();
    assert!(
        err.contains("\"prod\"") && err.contains("defined: dev, stage"),
        "{err}"
    );

    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "base-repo.yaml",
            Some(&base_repo(Some("0123456789abcdef0123456789abcdef01234567"))),
        )],
        "pin nothing",
    );
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let err = reports[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("commit 0123456789abcdef0123456789abcdef01234567 not found"),
        "{err}"
    );
    assert_eq!(commit_count(&fx.gitops, "dev"), 0);
}

#[test]
fn render_errors_block_delivery_in_push_mode() {
    let rt = runtime();
    let fx = Fixture::new();
    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "cluster-types/large.yaml",
            Some(&common::cluster_type("large", "no-such-template")),
        )],
        "break",
    );
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let report = reports[0].as_ref().unwrap();
    let Outcome::Failed { failures, issues } = &report.outcome else {
        panic!("expected a failure");
    };
    assert!(issues.is_none(), "push mode opens no issues");
    assert_eq!(
        kalypso_git::issues::title(&failures[0], "dev"),
        "Can't generate manifests for deplyment target app-dev-target in cluster type large in dev environment"
    );
    assert!(failures[0].message.contains("no-such-template"));
    assert_eq!(commit_count(&fx.gitops, "dev"), 0);
}

#[test]
fn refuses_the_checked_out_branch_of_a_working_copy() {
    let rt = runtime();
    let fx = Fixture::new();
    let work = fx.dir.path().join("gitops-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "dev"]);
    let mut settings = fx.settings();
    settings.gitops_repo = Some(work.display().to_string());
    let syncer = Syncer::new(settings, rt.handle().clone()).unwrap();
    let err = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("checked out"), "{err}");
}

#[test]
fn a_failing_workload_keeps_its_folders_and_the_rest_is_delivered() {
    let rt = runtime();
    let fx = Fixture::new();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let first = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    assert!(first[0].as_ref().unwrap().is_success());
    let before = branch_files(&fx.gitops, "dev");

    // The workload repository breaks, and the environment gains a cluster type.
    common::break_the_workload_and_add_a_cluster_type(&fx);
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let report = reports[0].as_ref().unwrap();
    assert!(
        matches!(delivered(report), Delivery::Committed { .. }),
        "{report:?}"
    );
    assert!(!report.is_success(), "the failure shows in the result");
    assert_eq!(report.isolated.iter().collect::<Vec<_>>(), ["app"]);
    assert!(!report.isolated_failures.is_empty());
    assert!(report.diagnostics.errors().any(|d| d.code == Code::Yaml));

    let after = branch_files(&fx.gitops, "dev");
    let paths: Vec<&str> = after.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "large/README.md",
            "large/app-dev-target/namespace.yaml",
            "large/app-dev-target/platform-config.yaml",
            "large/app-dev-target/reconciler.yaml",
            "small/README.md",
        ]
    );
    for (path, content) in &before {
        assert_eq!(after.get(path), Some(content), "{path} is kept as it was");
    }

    // Fixed: the workload is delivered again, on the new cluster type too.
    common::fix_the_workload(&fx);
    let fixed = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let fixed = fixed[0].as_ref().unwrap();
    assert!(fixed.is_success(), "{fixed:?}");
    assert!(fixed.isolated.is_empty());
}
