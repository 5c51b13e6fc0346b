//! Diagnostics of a git control plane. One about a file names the branch it was read from:
//! the environment's branch (which need not be named like the environment), or the main
//! branch. The folder form names the environment's folder the same way (the bad-input cases).
//! An environment branch without a BaseRepo is warned about.
//!
//! The CLI runs in a child process (see `support`) so that its standard error is seen exactly
//! as a user sees it.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use kalypso_testkit::{ExampleRepos, Run, branch_files, write_files};

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

fn kalypso(args: &[&str]) -> Run {
    let args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
    Run::of(
        support::as_cli_child(&mut Command::new(std::env::current_exe().unwrap()), &args)
            .env("NO_COLOR", "1"),
    )
}

const CLUSTER_TYPE: &str = "cluster-types/west-us/large/large-cluster-type.yaml";

#[test]
fn errors_in_branch_files_name_the_branch() {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cp = &repos.control_plane;
    let url = format!("file://{}", cp.display());

    // Environment `dev` is read from branch `env-dev`, whose ClusterType file is broken.
    let environment = ".environments/dev.yaml";
    let retargeted = repos.main[environment].replace("branch: dev", "branch: env-dev");
    assert_ne!(retargeted, repos.main[environment]);
    write_files(
        cp,
        "main",
        &[(environment, Some(&retargeted))],
        "dev lives on env-dev",
    );
    let mut files: Vec<(String, String)> = branch_files(cp, "dev")
        .into_iter()
        .map(|(path, bytes)| (path, String::from_utf8(bytes).unwrap()))
        .collect();
    let broken = files.iter_mut().find(|(path, _)| path == CLUSTER_TYPE).unwrap();
    broken.1 = broken
        .1
        .replacen("kind: ClusterType", "kind: ClusterType\nspec: [broken", 1);
    let refs: Vec<(&str, Option<&str>)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), Some(t.as_str())))
        .collect();
    write_files(cp, "env-dev", &refs, "a broken cluster type");

    let validate = kalypso(&["validate", &url, "--env", "dev"]);
    assert_eq!(validate.code, 1, "{validate:#?}");
    assert!(
        validate
            .stderr
            .contains(&format!("error[yaml]: env-dev/{CLUSTER_TYPE}:")),
        "the file is named with its branch: {validate:#?}"
    );
    let out = dir.path().join("out");
    let render = kalypso(&["render", &url, "--env", "dev", "--out", out.to_str().unwrap()]);
    assert_eq!(render.code, 1, "{render:#?}");
    assert!(
        render
            .stderr
            .contains(&format!("error[yaml]: env-dev/{CLUSTER_TYPE}:")),
        "{render:#?}"
    );
    assert!(!out.exists(), "nothing is written");
}

/// An environment branch without a BaseRepo: kalypso reads the main branch's tip, which the
/// original would not bring in, and says so (`no-base-repo`, a warning that `--strict` makes
/// an error).
#[test]
fn an_environment_without_a_base_repo_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cp = &repos.control_plane;
    let url = format!("file://{}", cp.display());
    assert!(branch_files(cp, "dev").contains_key("base-repo.yaml"));
    write_files(cp, "dev", &[("base-repo.yaml", None)], "no BaseRepo");

    let validate = kalypso(&["validate", &url, "--env", "dev"]);
    assert_eq!(validate.code, 0, "{validate:#?}");
    assert!(
        validate.stderr.contains(
            "warning[no-base-repo]: environment dev has no BaseRepo; kalypso reads Templates and \
             WorkloadRegistrations from the tip of branch \"main\""
        ),
        "{validate:#?}"
    );
    let strict = kalypso(&["validate", &url, "--env", "dev", "--strict"]);
    assert_eq!(strict.code, 1, "{strict:#?}");
    assert!(strict.stderr.contains("error[no-base-repo]: "), "{strict:#?}");
}
