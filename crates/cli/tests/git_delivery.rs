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
