//! `kalypso plan`, `diff` and `explain` on a control plane and GitOps repository in git: the
//! bundled example turned into scratch repositories (a control plane with `main`, `dev` and
//! `stage` branches, two workload repositories, a bare GitOps repository reached by a
//! `file://` URL), compared with the folder form of the same input, and the promotion plan
//! between environments (`--promote-from`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use kalypso_testkit::{ExampleRepos, Run, commit_files as commit, replace_in as replace, workspace_root};

struct Setup {
    dir: tempfile::TempDir,
    /// The control plane as a bare repository.
    control_plane: PathBuf,
    /// The same input in the folder form.
    folder: PathBuf,
    gitops: PathBuf,
    main: BTreeMap<String, String>,
    main_commit: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ExampleRepos {
        control_plane,
        gitops,
        folder,
        main,
        main_commit,
    } = ExampleRepos::create(dir.path());
    Setup {
        dir,
        control_plane,
        folder,
        gitops,
        main,
        main_commit,
    }
}

impl Setup {
    /// Runs `kalypso` with the scratch cache; paths and the main commits are replaced by
    /// placeholders in the output.
    fn kalypso(&self, args: &[&str], commits: &[(&str, &str)]) -> Run {
        let tmp = self.dir.path();
        let mut run = Run::of(&mut kalypso_testkit::kalypso(
            env!("CARGO_BIN_EXE_kalypso").as_ref(),
            args,
            &workspace_root(),
            &tmp.join("cache"),
        ))
        .replace(&tmp.display().to_string(), "<tmp>");
        for (commit, name) in commits {
            run = run.replace(commit, name).replace(&commit[..12], name);
        }
        run
    }

    fn cp(&self) -> String {
        self.control_plane.display().to_string()
    }
}

#[test]
fn git_control_plane_against_the_gitops_repository() {
    let s = setup();
    let cp = s.cp();
    // The GitOps repository is local (file://): it is the default. Its dev branch does not
    // exist yet, so everything is new.
    let first = s.kalypso(&["plan", &cp, "--env", "dev"], &[]);
    assert_eq!(first.code, 2, "{}", first.stderr);
    assert!(first.stderr.contains("does not exist"), "{}", first.stderr);
    assert!(first.stdout.contains("Added (8):"), "{}", first.stdout);

    // The folder form of the same input, against an empty folder, plans the same.
    let empty = s.dir.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    let folder = s.folder.display().to_string();
    let from_folder = s.kalypso(
        &[
            "plan",
            &folder,
            "--env",
            "dev",
            "--against",
            &empty.display().to_string(),
        ],
        &[],
    );
    assert_eq!(from_folder.stdout, first.stdout);

    // Delivered, nothing is left to do, whichever way the GitOps branch is named.
    let sync = s.kalypso(&["sync", &cp, "--env", "dev"], &[]);
    assert_eq!(sync.code, 0, "{}", sync.stderr);
    let after = s.kalypso(&["plan", &cp, "--env", "dev"], &[]);
    assert_eq!(after.code, 0, "{}", after.stderr);
    assert!(after.stdout.contains("No changes"));
    let gitops_dev = format!("{}#dev", s.gitops.display());
    let explicit = s.kalypso(&["diff", &cp, "--env", "dev", "--against", &gitops_dev], &[]);
    assert_eq!(explicit.code, 0, "{}", explicit.stderr);
    assert!(explicit.stdout.is_empty());
    let by_url = format!("file://{}#dev", s.gitops.display());
    let url_run = s.kalypso(&["plan", &cp, "--env", "dev", "--against", &by_url], &[]);
    assert_eq!(url_run.code, 0, "{}", url_run.stderr);
    // A bare repository needs its branch named.
    let bare = s.kalypso(
        &[
            "plan",
            &cp,
            "--env",
            "dev",
            "--against",
            &s.gitops.display().to_string(),
        ],
        &[],
    );
    assert_eq!(bare.code, 1);
    assert!(bare.stderr.contains("#<BRANCH>"), "{}", bare.stderr);

    // A change on the environment branch shows against the delivered tree.
    let mut large = BTreeMap::new();
    large.insert(
        "cluster-types/west-us/large/large-config.yaml".to_owned(),
        fs::read_to_string(s.folder.join("dev/cluster-types/west-us/large/large-config.yaml"))
            .unwrap()
            .replace("MAX_REPLICAS: \"20\"", "MAX_REPLICAS: \"25\""),
    );
    commit(&s.control_plane, "dev", "", &large);
    let changed = s.kalypso(&["plan", &cp, "--env", "dev", "--output", "markdown"], &[]);
    assert_eq!(changed.code, 2, "{}", changed.stderr);
    insta::assert_snapshot!("git_plan_config_change_markdown", changed.stdout);

    // explain reads the git control plane as the folder form.
    for args in [
        &["--env", "dev", "--target", "hello-world-app-functional-test"][..],
        &[
            "--env",
            "stage",
            "--target",
            "hello-world-app-uat-test",
            "--cluster-type",
            "drone",
            "--config",
            "MAX_REPLICAS",
        ][..],
    ] {
        let run = |cp: &str| {
            let mut all = vec!["explain", cp];
            all.extend_from_slice(args);
            s.kalypso(&all, &[])
        };
        let git = run(&cp);
        assert_eq!(git.code, 0, "{}", git.stderr);
        assert_eq!(git.stdout, run(&folder).stdout);
    }
}

#[test]
fn promotion_plan_between_environments() {
    let s = setup();
    let cp = s.cp();
    let cache = s.dir.path().join("cache").display().to_string();
    // A new main commit: every namespace gets a label. Promoted to dev only.
    let mut main = s.main.clone();
    replace(
        &mut main,
        "templates/namespace.yaml",
        "          workload: {{ .Workload }}\n",
        "          workload: {{ .Workload }}\n          owner: platform\n",
    );
    let newer = commit(&s.control_plane, "main", "", &main);
    let promote = s.kalypso(&["promote", &cp, "--env", "dev", "--cache-dir", &cache], &[]);
    assert_eq!(promote.code, 0, "{}", promote.stderr);
    let names = [(s.main_commit.as_str(), "<main-1>"), (newer.as_str(), "<main-2>")];

    // Stage, as it is (rendered at its own pin), against stage with dev's main.
    let plan = s.kalypso(&["plan", &cp, "--env", "stage", "--promote-from", "dev"], &names);
    assert_eq!(plan.code, 2, "{}", plan.stderr);
    insta::assert_snapshot!("git_plan_promote_text", plan.stdout);
    let markdown = s.kalypso(
        &[
            "plan",
            &cp,
            "--env",
            "stage",
            "--promote-from",
            "dev",
            "--output",
            "markdown",
        ],
        &names,
    );
    insta::assert_snapshot!("git_plan_promote_markdown", markdown.stdout);
    let json = s.kalypso(
        &[
            "plan",
            &cp,
            "--env",
            "stage",
            "--promote-from",
            "dev",
            "--output",
            "json",
        ],
        &[],
    );
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        doc["promote_from"],
        serde_json::json!({"environment": "dev", "commit": newer})
    );
    assert_eq!(
        doc["promoted_commit"],
        serde_json::json!({"old": s.main_commit, "new": newer})
    );
    assert_eq!(doc["counts"]["changed"], 8);
    assert_eq!(
        doc["counts"]["files_modified"], 9,
        "8 namespaces and the tracking file"
    );

    // Against stage's GitOps branch once delivered: the same changes.
    let sync = s.kalypso(&["sync", &cp, "--env", "stage"], &[]);
    assert_eq!(sync.code, 0, "{}", sync.stderr);
    let gitops_stage = format!("{}#stage", s.gitops.display());
    let against = s.kalypso(
        &[
            "plan",
            &cp,
            "--env",
            "stage",
            "--promote-from",
            "dev",
            "--against",
            &gitops_stage,
        ],
        &names,
    );
    assert_eq!(against.code, 2, "{}", against.stderr);
    assert_eq!(against.stdout, plan.stdout);

    // Dev already runs its own commit: promoting dev to itself is refused, and promoting
    // stage's (older) main to dev would take the label away again.
    let back = s.kalypso(&["plan", &cp, "--env", "dev", "--promote-from", "stage"], &names);
    assert_eq!(back.code, 2, "{}", back.stderr);
    assert!(
        back.stdout.contains("promoting main commit <main-1> from stage"),
        "{}",
        back.stdout
    );
    let unknown = s.kalypso(&["plan", &cp, "--env", "stage", "--promote-from", "prod"], &[]);
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("prod"), "{}", unknown.stderr);
}
