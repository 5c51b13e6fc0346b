//! The bundled example control plane (`examples/control-plane`) as scratch git repositories,
//! next to the folder form of the same input, for the tests that compare what kalypso does
//! with a control plane in git (`sync`, `plan`, `promote`) with what it does with a folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::{init_bare, text_files_under, write_files, write_files_under};

/// The workspace's root folder (where `examples/` and `tests/` are): the folder above the
/// tested package (`CARGO_MANIFEST_DIR`, which `cargo test` sets when it runs a test) whose
/// `Cargo.toml` declares the workspace. It is read when the test runs rather than where this
/// crate was compiled, as a build directory shared between two checkouts of the workspace
/// may hold this crate compiled in the other one.
pub fn workspace_root() -> PathBuf {
    let tested = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        // This crate is `<root>/crates/testkit`.
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    tested
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|toml| toml.contains("\n[workspace]"))
        })
        .unwrap_or_else(|| panic!("no workspace Cargo.toml above {}", tested.display()))
        .to_owned()
}

/// The test data copied into the repository (`tests/data`: real scheduler runs, the Go
/// template vectors, the fleet generator).
pub fn data_dir() -> PathBuf {
    workspace_root().join("tests/data")
}

/// The bundled example control plane, in its folder form.
pub fn example_control_plane() -> PathBuf {
    workspace_root().join("examples/control-plane")
}

/// Commits `files` (relative path → text) under `prefix` on `branch` of `repo`; returns the
/// commit id.
pub fn commit_files(repo: &Path, branch: &str, prefix: &str, files: &BTreeMap<String, String>) -> String {
    let paths: Vec<(String, &str)> = files
        .iter()
        .map(|(p, t)| (format!("{prefix}{p}"), t.as_str()))
        .collect();
    let refs: Vec<(&str, Option<&str>)> = paths.iter().map(|(p, t)| (p.as_str(), Some(*t))).collect();
    write_files(repo, branch, &refs, &format!("{branch} content"))
}

/// Replaces the first `from` in file `path` of `files` by `to`; panics if it is not there.
pub fn replace_in(files: &mut BTreeMap<String, String>, path: &str, from: &str, to: &str) {
    let text = &files[path];
    assert!(text.contains(from), "{path} does not contain {from}");
    let new = text.replacen(from, to, 1);
    files.insert(path.to_owned(), new);
}

/// Points `base-repo.yaml`'s pin (an example commit id) at `commit`.
pub fn pin(files: &mut BTreeMap<String, String>, commit: &str) {
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
    assert!(pinned.contains(commit), "base-repo.yaml has no commit pin");
    files.insert("base-repo.yaml".to_owned(), pinned);
}

/// The example as bare repositories under one folder: a control plane with `main`, `dev` and
/// `stage` branches (the environments pinned at the `main` commit, delivering to
/// [`gitops`](ExampleRepos::gitops) by a `file://` URL), two workload repositories the
/// registrations point at, an empty GitOps repository; and the folder form of the same input.
#[derive(Debug)]
pub struct ExampleRepos {
    /// The control plane, a bare repository.
    pub control_plane: PathBuf,
    /// The GitOps repository, bare and without branches.
    pub gitops: PathBuf,
    /// The same input in the folder form (`main/`, `dev/`, `stage/`, `workloads/`).
    pub folder: PathBuf,
    /// The files of the `main` branch as committed.
    pub main: BTreeMap<String, String>,
    /// The `main` commit the environments are pinned at.
    pub main_commit: String,
}

impl ExampleRepos {
    /// Builds the repositories and the folder under `dir`.
    pub fn create(dir: &Path) -> ExampleRepos {
        let control_plane = dir.join("control-plane.git");
        let app = dir.join("app-src.git");
        let svc = dir.join("svc-src.git");
        let gitops = dir.join("gitops.git");
        for r in [&control_plane, &app, &svc, &gitops] {
            init_bare(r);
        }
        let example = example_control_plane();
        let app_files = text_files_under(&example.join("workloads/hello-world-app"));
        let svc_files = text_files_under(&example.join("workloads/platform-svc"));
        commit_files(&app, "main", "workload/", &app_files);
        commit_files(&svc, "main", "workloads/", &svc_files);
        let mut main = text_files_under(&example.join("main"));
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
        let main_commit = commit_files(&control_plane, "main", "", &main);
        let folder = dir.join("folder");
        write_files_under(&folder.join("main"), &main);
        write_files_under(&folder.join("workloads/hello-world-app"), &app_files);
        write_files_under(&folder.join("workloads/platform-svc"), &svc_files);
        for env in ["dev", "stage"] {
            let mut files = text_files_under(&example.join(env));
            pin(&mut files, &main_commit);
            replace_in(
                &mut files,
                "gitops-repo.yaml",
                "https://github.com/contoso/kalypso-gitops",
                &format!("file://{}", gitops.display()),
            );
            commit_files(&control_plane, env, "", &files);
            write_files_under(&folder.join(env), &files);
        }
        ExampleRepos {
            control_plane,
            gitops,
            folder,
            main,
            main_commit,
        }
    }
}
