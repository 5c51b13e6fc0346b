//! What a newcomer meets in the first hour, end to end through the `kalypso` binary: the
//! control plane as a local clone for `validate`, `render` and `plan` (its uncommitted and
//! unpushed changes used and said, a clone behind its origin warned about), failures that
//! name the WorkloadRegistration and retry only when the network is at fault (text and JSON
//! logs, colour only when asked), shell completions and the manual page.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::fs;
use std::path::{Path, PathBuf};

use kalypso_testkit::{ExampleRepos, Run, files_under, git, workspace_root};

struct Setup {
    dir: tempfile::TempDir,
    repos: ExampleRepos,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    Setup { dir, repos }
}

impl Setup {
    fn tmp(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `kalypso` with the scratch cache, the temporary folder written `<tmp>`.
    fn kalypso(&self, args: &[&str]) -> Run {
        self.kalypso_with(args, &[])
    }

    fn kalypso_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut command = kalypso_testkit::kalypso(
            env!("CARGO_BIN_EXE_kalypso").as_ref(),
            args,
            &workspace_root(),
            &self.tmp().join("cache"),
        );
        for (k, v) in env {
            command.env(k, v);
        }
        Run::of(&mut command).replace(&self.tmp().display().to_string(), "<tmp>")
    }

    /// A clone of the control plane with `branch` checked out.
    fn clone(&self, name: &str, branch: &str) -> PathBuf {
        let path = self.tmp().join(name);
        git(
            self.tmp(),
            &[
                "clone",
                "-q",
                &self.repos.control_plane.display().to_string(),
                name,
            ],
        );
        git(&path, &["checkout", "-q", branch]);
        path
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn validate_and_render_read_a_clone_as_they_read_the_folder() {
    let t = setup();
    let clone = t.clone("clone", "dev");
    let validate = t.kalypso(&["validate", &s(&clone)]);
    assert_eq!(validate.code, 0, "{}", validate.stderr);
    assert_eq!(
        validate
            .stdout
            .lines()
            .map(|l| l.split(',').next().unwrap())
            .collect::<Vec<_>>(),
        ["environment dev: ok", "environment stage: ok"],
        "every Environment of main is checked: {}",
        validate.stdout
    );
    assert!(
        !validate.stderr.contains("note:"),
        "a clean clone: {}",
        validate.stderr
    );

    let (from_git, from_folder) = (t.tmp().join("from-git"), t.tmp().join("from-folder"));
    let render = t.kalypso(&["render", &s(&clone), "--env", "dev", "--out", &s(&from_git)]);
    assert_eq!(render.code, 0, "{}", render.stderr);
    let render = t.kalypso(&[
        "render",
        &s(&t.repos.folder),
        "--env",
        "dev",
        "--out",
        &s(&from_folder),
    ]);
    assert_eq!(render.code, 0, "{}", render.stderr);
    assert_eq!(files_under(&from_git), files_under(&from_folder));
    assert!(files_under(&from_git).len() > 5);

    // Rendering into the clone would destroy it.
    let inside = t.kalypso(&[
        "render",
        &s(&clone),
        "--env",
        "dev",
        "--out",
        &s(&clone.join("out")),
    ]);
    assert_eq!(inside.code, 1);
    inside.reports(&["refusing to write into <tmp>/clone/out", "working copy"]);
}

#[test]
fn a_clone_is_used_as_it_is_and_says_so() {
    let t = setup();
    let clone = t.clone("clone", "dev");
    let current = t.tmp().join("current");
    assert_eq!(
        t.kalypso(&["render", &s(&clone), "--env", "dev", "--out", &s(&current)])
            .code,
        0
    );
    let plan = |t: &Setup| t.kalypso(&["plan", &s(&clone), "--env", "dev", "--against", &s(&current)]);
    let config = clone.join("configs/dev-config.yaml");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        text.replace("ENVIRONMENT: Dev", "ENVIRONMENT: Development"),
    )
    .unwrap();

    let uncommitted = plan(&t);
    assert_eq!(uncommitted.code, 2, "the edit is planned: {}", uncommitted.stderr);
    assert!(
        uncommitted.stdout.contains("Development"),
        "{}\n{}",
        uncommitted.stdout,
        uncommitted.stderr
    );
    uncommitted.reports(&["note: using uncommitted changes in dev (1 changed file(s) in <tmp>/clone/)"]);

    git(&clone, &["commit", "-qam", "rename the environment"]);
    let unpushed = plan(&t);
    assert_eq!(unpushed.code, 2, "{}", unpushed.stderr);
    assert!(!unpushed.stderr.contains("uncommitted"), "{}", unpushed.stderr);
    unpushed.reports(&["note: using unpushed commits in dev (1 commit(s) ahead of origin/dev)"]);

    // Another clone, on dev before the push: once it has fetched, it is behind.
    let other = t.clone("other", "dev");
    git(&clone, &["push", "-q", "origin", "dev"]);
    git(&other, &["fetch", "-q"]);
    let behind = t.kalypso(&["validate", &s(&other), "--env", "dev"]);
    assert_eq!(behind.code, 0, "{}", behind.stderr);
    behind.reports(&["warning: dev is 1 commit(s) behind origin/dev as last fetched"]);
    let quiet = t.kalypso(&["validate", &s(&other), "--env", "dev", "--quiet"]);
    quiet.reports(&["warning: dev is 1 commit(s) behind"]);
}

/// The control plane as a clone whose `dev` registrations point at `repo` instead.
fn with_workload_repo(t: &Setup, repo: &str) -> PathBuf {
    let clone = t.clone("broken", "main");
    let registration = clone.join("workloads/hello-world-app.yaml");
    let text = fs::read_to_string(&registration).unwrap();
    let start = text.find("repo: ").unwrap() + "repo: ".len();
    let end = start + text[start..].find('\n').unwrap();
    fs::write(&registration, format!("{}{repo}{}", &text[..start], &text[end..])).unwrap();
    git(&clone, &["commit", "-qam", "move the workload"]);
    // The environments pin main: promote the new commit to dev.
    let head = git(&clone, &["rev-parse", "HEAD"]).trim().to_owned();
    git(&clone, &["checkout", "-q", "dev"]);
    let base = clone.join("base-repo.yaml");
    let text = fs::read_to_string(&base).unwrap();
    let pinned = text
        .lines()
        .map(|l| match l.split_once("commit:") {
            Some((indent, _)) => format!("{indent}commit: {head}"),
            None => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    fs::write(&base, pinned + "\n").unwrap();
    git(&clone, &["commit", "-qam", "promote"]);
    clone
}

#[test]
fn a_missing_workload_repository_fails_at_once_naming_the_registration() {
    let t = setup();
    let missing = t.tmp().join("no-such-repo");
    let clone = with_workload_repo(&t, &format!("file://{}", missing.display()));
    let run = t.kalypso(&["validate", &s(&clone), "--env", "dev"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    run.reports(&[
        "error: WorkloadRegistration \"hello-world-app\" in environment dev:",
        "<tmp>/no-such-repo",
    ]);
    assert!(
        !run.stderr.contains("retrying"),
        "nothing to retry: {}",
        run.stderr
    );
}

#[test]
fn network_failures_are_retried_visibly_in_text_and_json_logs() {
    let t = setup();
    // Nothing listens on port 1 of the loopback interface: the connection is refused.
    let clone = with_workload_repo(&t, "http://127.0.0.1:1/app.git");
    let args = [
        "validate",
        &s(&clone),
        "--env",
        "dev",
        "--retries",
        "3",
        "--backoff",
        "10ms",
    ];
    let text = t.kalypso(&args);
    assert_eq!(text.code, 1, "{}", text.stderr);
    let retries: Vec<&str> = text
        .stderr
        .lines()
        .filter(|l| l.contains("retrying in"))
        .collect();
    assert_eq!(retries.len(), 2, "{}", text.stderr);
    assert!(
        retries[0].contains("; retrying in 10 ms (attempt 2/3)"),
        "{}",
        retries[0]
    );
    assert!(
        retries[1].contains("; retrying in 20 ms (attempt 3/3)"),
        "{}",
        retries[1]
    );
    assert!(
        !text.stderr.contains('\x1b'),
        "no colour off a terminal: {}",
        text.stderr
    );
    text.reports(&["error: WorkloadRegistration \"hello-world-app\" in environment dev:"]);

    let mut json_args = args.to_vec();
    json_args.extend(["--log-format", "json"]);
    let json = t.kalypso(&json_args);
    let logs: Vec<serde_json::Value> = json
        .stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(logs.len(), 2, "{}", json.stderr);
    assert_eq!(logs[1]["level"], "WARN");
    assert_eq!(logs[1]["fields"]["attempt"], 2);
    assert_eq!(logs[1]["fields"]["wait_ms"], 20);
    let message = logs[1]["fields"]["message"].as_str().unwrap();
    assert!(message.ends_with("retrying in 20 ms (attempt 3/3)"), "{message}");

    let mut colour_args = args.to_vec();
    colour_args.extend(["--color", "always"]);
    assert!(
        t.kalypso(&colour_args).stderr.contains("\x1b["),
        "--color always colours logs"
    );
    let forced = t.kalypso_with(&args, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "")]);
    assert!(forced.stderr.contains("\x1b["), "CLICOLOR_FORCE colours logs");
}

#[test]
fn completions_for_every_shell_and_a_manual_page() {
    let t = setup();
    for (shell, marker) in [
        ("bash", "complete -F _kalypso"),
        ("zsh", "#compdef kalypso"),
        ("fish", "complete -c kalypso"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let run = t.kalypso(&["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(
            run.stdout.contains(marker),
            "{shell}: {}",
            &run.stdout[..200.min(run.stdout.len())]
        );
        assert!(
            run.stdout.contains("render") && run.stdout.contains("promote-from"),
            "{shell}"
        );
    }
    let unknown = t.kalypso(&["completions", "tcsh"]);
    assert_eq!(unknown.code, 2);

    let man = t.kalypso(&["man"]);
    assert_eq!(man.code, 0, "{}", man.stderr);
    assert!(
        man.stdout.starts_with(".ie \\n(.g .ds Aq \\(aq") || man.stdout.contains(".TH kalypso 1"),
        "{}",
        man.stdout
    );
    assert!(
        man.stdout.contains(".SH SUBCOMMANDS") && man.stdout.contains("kalypso\\-render"),
        "{}",
        man.stdout
    );

    let pages = t.tmp().join("man1");
    let run = t.kalypso(&["man", "--out", &s(&pages)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let written = files_under(&pages);
    for page in [
        "kalypso.1",
        "kalypso-render.1",
        "kalypso-plan.1",
        "kalypso-completions.1",
    ] {
        assert!(written.contains_key(page), "{page} in {:?}", written.keys());
    }
    let render = String::from_utf8(written["kalypso-render.1"].clone()).unwrap();
    assert!(render.contains("\\-\\-no\\-cache"), "{render}");
}

#[test]
fn the_first_promotion_into_a_new_environment_can_be_planned() {
    let t = setup();
    // stage is new: its BaseRepo pins no commit yet.
    let clone = t.clone("clone", "stage");
    let base = clone.join("base-repo.yaml");
    let text = fs::read_to_string(&base).unwrap();
    let unpinned: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("commit:"))
        .collect();
    fs::write(&base, unpinned.join("\n") + "\n").unwrap();
    git(&clone, &["commit", "-qam", "a new environment"]);
    let plan = t.kalypso(&["plan", &s(&clone), "--env", "stage", "--promote-from", "dev"]);
    assert_eq!(plan.code, 2, "{}", plan.stderr);
    plan.reports(&[
        "note: environment stage has never been promoted",
        "against an empty tree",
    ]);
    let summary = plan
        .stdout
        .lines()
        .find(|l| l.starts_with("Assignments:"))
        .unwrap();
    assert!(
        summary.contains("removed, 0 moved, 0 changed, 0 unchanged"),
        "{summary}"
    );
    assert!(!summary.starts_with("Assignments: 0 added"), "{summary}");
}
