//! End to end: the bundled example control plane turned into real git repositories (a
//! control plane with `main`, `dev` and `stage` branches, two workload repositories, a bare
//! GitOps repository), delivered with `kalypso sync`, compared with `kalypso render` of the
//! same input, and promoted with `kalypso promote`.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use kalypso_cli::{Cli, run};
use kalypso_git::testing::{
    branch_files, commit_count, files_under, git, init_bare, rev_parse, write_files, write_files_under,
};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/control-plane")
}

/// Commits `files` (under `prefix`) on `branch`.
fn commit(repo: &Path, branch: &str, prefix: &str, files: &BTreeMap<String, Vec<u8>>) -> String {
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|(p, b)| (format!("{prefix}{p}"), String::from_utf8(b.clone()).unwrap()))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = texts
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    write_files(repo, branch, &refs, &format!("{branch} content"))
}

fn kalypso(args: &[&str]) -> ExitCode {
    let mut argv = vec!["kalypso"];
    argv.extend_from_slice(args);
    run(Cli::parse_from(argv))
}

fn replace_in(files: &mut BTreeMap<String, Vec<u8>>, path: &str, from: &str, to: &str) {
    let text = String::from_utf8(files[path].clone()).unwrap();
    assert!(text.contains(from), "{path} does not contain {from}");
    files.insert(path.to_owned(), text.replace(from, to).into_bytes());
}

/// Points `base-repo.yaml`'s pin (an example commit id) at `commit`.
fn pin(files: &mut BTreeMap<String, Vec<u8>>, commit: &str) {
    let text = String::from_utf8(files["base-repo.yaml"].clone()).unwrap();
    let pinned: String = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("commit:") {
                format!("  commit: {commit}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert!(pinned.contains(commit));
    files.insert("base-repo.yaml".to_owned(), pinned.into_bytes());
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
    let control_plane = dir.path().join("control-plane.git");
    let app = dir.path().join("app-src.git");
    let svc = dir.path().join("svc-src.git");
    let gitops = dir.path().join("gitops.git");
    for r in [&control_plane, &app, &svc, &gitops] {
        init_bare(r);
    }
    let example = example();
    commit(
        &app,
        "main",
        "workload/",
        &files_under(&example.join("workloads/hello-world-app")),
    );
    commit(
        &svc,
        "main",
        "workloads/",
        &files_under(&example.join("workloads/platform-svc")),
    );

    let mut main = files_under(&example.join("main"));
    replace_in(
        &mut main,
        "workloads/hello-world-app.yaml",
        "https://github.com/contoso/kalypso-app-src",
        &format!("file://{}", app.display()),
    );
    replace_in(
        &mut main,
        "workloads/platform-svc.yaml",
        "https://github.com/contoso/kalypso-svc-src",
        &format!("file://{}", svc.display()),
    );
    let main_commit = commit(&control_plane, "main", "", &main);

    let folder = dir.path().join("folder");
    write_files_under(&folder.join("main"), &main);
    write_files_under(
        &folder.join("workloads/hello-world-app"),
        &files_under(&example.join("workloads/hello-world-app")),
    );
    write_files_under(
        &folder.join("workloads/platform-svc"),
        &files_under(&example.join("workloads/platform-svc")),
    );
    for env in ["dev", "stage"] {
        let mut files = files_under(&example.join(env));
        pin(&mut files, &main_commit);
        replace_in(
            &mut files,
            "gitops-repo.yaml",
            "https://github.com/contoso/kalypso-gitops",
            &format!("file://{}", gitops.display()),
        );
        commit(&control_plane, env, "", &files);
        write_files_under(&folder.join(env), &files);
    }
    Setup {
        cache: dir.path().join("cache"),
        folder,
        control_plane,
        gitops,
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
