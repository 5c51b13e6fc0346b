//! `kalypso plan`, `diff` and `explain` on a control plane and GitOps repository in git: the
//! bundled example turned into scratch repositories (a control plane with `main`, `dev` and
//! `stage` branches, two workload repositories, a bare GitOps repository reached by a
//! `file://` URL), compared with the folder form of the same input, and the promotion plan
//! between environments (`--promote-from`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kalypso_git::testing::{files_under, init_bare, write_files, write_files_under};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir` as text.
fn read_all(dir: &Path) -> BTreeMap<String, String> {
    files_under(dir)
        .into_iter()
        .map(|(path, bytes)| (path, String::from_utf8(bytes).unwrap()))
        .collect()
}

fn commit(repo: &Path, branch: &str, prefix: &str, files: &BTreeMap<String, String>) -> String {
    let paths: Vec<(String, &str)> = files
        .iter()
        .map(|(p, t)| (format!("{prefix}{p}"), t.as_str()))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = paths.iter().map(|(p, t)| (p.as_str(), Some(*t))).collect();
    write_files(repo, branch, &refs, &format!("{branch} content"))
}

fn replace(files: &mut BTreeMap<String, String>, path: &str, from: &str, to: &str) {
    let text = &files[path];
    assert!(text.contains(from), "{path} does not contain {from}");
    let new = text.replacen(from, to, 1);
    files.insert(path.to_owned(), new);
}

/// Points `base-repo.yaml`'s pin at `commit`.
fn pin(files: &mut BTreeMap<String, String>, commit: &str) {
    let pinned: String = files["base-repo.yaml"]
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("commit:") {
                format!("  commit: {commit}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    files.insert("base-repo.yaml".to_owned(), pinned);
}

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
    let control_plane = dir.path().join("control-plane.git");
    let app = dir.path().join("app-src.git");
    let svc = dir.path().join("svc-src.git");
    let gitops = dir.path().join("gitops.git");
    for r in [&control_plane, &app, &svc, &gitops] {
        init_bare(r);
    }
    let example = root().join("examples/control-plane");
    let app_files = read_all(&example.join("workloads/hello-world-app"));
    let svc_files = read_all(&example.join("workloads/platform-svc"));
    commit(&app, "main", "workload/", &app_files);
    commit(&svc, "main", "workloads/", &svc_files);
    let mut main = read_all(&example.join("main"));
    replace(
        &mut main,
        "workloads/hello-world-app.yaml",
        "https://github.com/contoso/kalypso-app-src",
        &format!("file://{}", app.display()),
    );
    replace(
        &mut main,
        "workloads/platform-svc.yaml",
        "https://github.com/contoso/kalypso-svc-src",
        &format!("file://{}", svc.display()),
    );
    let main_commit = commit(&control_plane, "main", "", &main);
    let folder = dir.path().join("folder");
    write_files_under(&folder.join("main"), &main);
    write_files_under(&folder.join("workloads/hello-world-app"), &app_files);
    write_files_under(&folder.join("workloads/platform-svc"), &svc_files);
    for env in ["dev", "stage"] {
        let mut files = read_all(&example.join(env));
        pin(&mut files, &main_commit);
        replace(
            &mut files,
            "gitops-repo.yaml",
            "https://github.com/contoso/kalypso-gitops",
            &format!("file://{}", gitops.display()),
        );
        commit(&control_plane, env, "", &files);
        write_files_under(&folder.join(env), &files);
    }
    Setup {
        dir,
        control_plane,
        folder,
        gitops,
        main,
        main_commit,
    }
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Setup {
    /// Runs `kalypso` with the scratch cache; paths and the main commits are replaced by
    /// placeholders in the output.
    fn kalypso(&self, args: &[&str], commits: &[(&str, &str)]) -> Run {
        let tmp = self.dir.path();
        let out = Command::new(env!("CARGO_BIN_EXE_kalypso"))
            .args(args)
            .current_dir(root())
            .env("NO_COLOR", "1")
            .env("KALYPSO_CACHE_DIR", tmp.join("cache"))
            .env_remove("GITHUB_AUTH_TOKEN")
            .output()
            .unwrap();
        let clean = |bytes: &[u8]| {
            let mut text = String::from_utf8(bytes.to_vec())
                .unwrap()
                .replace(&tmp.display().to_string(), "<tmp>");
            for (commit, name) in commits {
                text = text.replace(commit, name).replace(&commit[..12], name);
            }
            text
        };
        Run {
            code: out.status.code().unwrap(),
            stdout: clean(&out.stdout),
            stderr: clean(&out.stderr),
        }
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
    assert!(first.stdout.contains("Added (6):"), "{}", first.stdout);

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
    assert_eq!(doc["counts"]["changed"], 6);
    assert_eq!(
        doc["counts"]["files_modified"], 7,
        "6 namespaces and the tracking file"
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
