//! Golden trees: real runs of the Go scheduler (`tests/data/kalypso-real`, era `v1.1`, a copy
//! of the shared fixtures) and the project's own cases (`tests/fixtures/<case>`), all in the same layout:
//!
//! ```text
//! <case>/case.yaml            environment: <env> (and, for real runs, semantics.era)
//! <case>/input/main/...       control-plane main branch
//! <case>/input/<env>/...      environment branch
//! <case>/input/workloads/...  workload folders
//! <case>/input/gitops-base/   the GitOps branch before the run (optional)
//! <case>/expected/...         the tree after the run
//! ```
//!
//! Each case copies `input/gitops-base` into a fresh folder, runs the `kalypso render`
//! binary on it, and requires the folder to equal `expected/` byte for byte, with no missing
//! or extra file. Adding a case is adding a folder.
//!
//! A case about a bundled example names it instead of copying it: `input: examples/placement`
//! in `case.yaml` (relative to the workspace) is the control plane, and the GitOps branch
//! before the run is then `<case>/gitops-base` (optional).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use kalypso_testkit::{copy_files, files_under};

const REAL_FIXTURES: &str = "tests/data/kalypso-real";
const OWN_FIXTURES: &str = "tests/fixtures";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn case_field(case_yaml: &str, key: &str) -> Option<String> {
    case_yaml.lines().find_map(|l| {
        let t = l.trim();
        t.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().trim_matches('"').to_owned())
    })
}

struct Case {
    name: String,
    dir: PathBuf,
    env: String,
    /// The control plane (`<case>/input`, or the example `input:` names).
    input: PathBuf,
    /// The GitOps tree before the run.
    gitops_base: PathBuf,
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (base, only_v11) in [
        (root().join(REAL_FIXTURES), true),
        (root().join(OWN_FIXTURES), false),
    ] {
        let Ok(entries) = fs::read_dir(&base) else {
            assert!(!only_v11, "real fixtures not found at {}", base.display());
            continue;
        };
        for entry in entries {
            let dir = entry.unwrap().path();
            let Ok(case_yaml) = fs::read_to_string(dir.join("case.yaml")) else {
                continue;
            };
            if only_v11 && case_field(&case_yaml, "era").as_deref() != Some("v1.1") {
                continue;
            }
            let env = case_field(&case_yaml, "environment").expect("case.yaml names the environment");
            let (input, gitops_base) = match case_field(&case_yaml, "input") {
                Some(example) => (root().join(example), dir.join("gitops-base")),
                None => (dir.join("input"), dir.join("input/gitops-base")),
            };
            cases.push(Case {
                name: dir.file_name().unwrap().to_string_lossy().into_owned(),
                dir,
                env,
                input,
                gitops_base,
            });
        }
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    cases
}

fn run_case(case: &Case) -> Result<(), String> {
    let out = tempfile::tempdir().unwrap();
    copy_files(&case.gitops_base, out.path());
    let output = Command::new(env!("CARGO_BIN_EXE_kalypso"))
        .arg("render")
        .arg(&case.input)
        .args(["--env", &case.env, "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    if !output.status.success() {
        return Err(format!(
            "render failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let got = files_under(out.path());
    let want = files_under(&case.dir.join("expected"));
    let mut problems = Vec::new();
    for (path, bytes) in &want {
        match got.get(path) {
            None => problems.push(format!("missing {path}")),
            Some(g) if g != bytes => problems.push(format!(
                "differs {path}\n--- want\n{}\n--- got\n{}",
                String::from_utf8_lossy(bytes),
                String::from_utf8_lossy(g)
            )),
            Some(_) => {}
        }
    }
    problems.extend(
        got.keys()
            .filter(|p| !want.contains_key(*p))
            .map(|p| format!("extra {p}")),
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn golden_trees() {
    let cases = cases();
    assert!(
        cases.len() >= 6,
        "expected at least the 6 real v1.1 cases, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = run_case(case) {
            failures.push(format!("{}:\n{e}", case.name));
        }
    }
    println!(
        "fixtures: {} passed, {} failed",
        cases.len() - failures.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
