//! `kalypso plan`, `diff` and `explain`, end to end through the real binary: snapshots of
//! every output format on the bundled example and on the real fixtures (their
//! `input/gitops-base` is the tree before, what kalypso renders from `input/` the tree
//! after, and that equals their `expected/`), exit codes, and a single ConfigMap change that
//! must show exactly the assignments and the key it affects.
//!
//! Snapshots live in `tests/snapshots/`; temporary paths are replaced by `<tmp>` before
//! comparing. Review changed snapshots by reading them: they are the commands' output.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kalypso_git::testing::{files_under, write_files_under};

const REAL_FIXTURES: &str = "../shared/fixtures/kalypso-real";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn example() -> PathBuf {
    root().join("examples/control-plane")
}

/// Every file under `dir` (relative path → bytes), outside `.git` folders.
fn read_all(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = files_under(dir);
    files.retain(|path, _| !path.split('/').any(|segment| segment == ".git"));
    files
}

fn copy_dir(from: &Path, to: &Path) {
    write_files_under(to, &read_all(from));
}

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `kalypso` with `args`, without color, with `tmp` replaced by `<tmp>` in the output.
fn kalypso(args: &[&str], tmp: &Path) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_kalypso"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("KALYPSO_CACHE_DIR", tmp.join(".cache"))
        .env_remove("GITHUB_AUTH_TOKEN")
        .output()
        .unwrap();
    let clean = |bytes: &[u8]| {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .replace(&tmp.display().to_string(), "<tmp>")
    };
    Run {
        code: out.status.code().unwrap(),
        stdout: clean(&out.stdout),
        stderr: clean(&out.stderr),
    }
}

fn s(path: &Path) -> String {
    path.display().to_string()
}

fn replace_in(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(
        text.contains(from),
        "{} does not contain {from:?}",
        path.display()
    );
    fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Renders `env` of `control_plane` into `out`.
fn render(control_plane: &Path, env: &str, out: &Path, tmp: &Path) {
    let run = kalypso(
        &["render", &s(control_plane), "--env", env, "--out", &s(out)],
        tmp,
    );
    assert_eq!(run.code, 0, "render failed: {}", run.stderr);
}

/// The example copied into `tmp/cp`, `dev` rendered into `tmp/gitops-dev`.
fn example_with_rendered_dev(tmp: &Path) -> (PathBuf, PathBuf) {
    let cp = tmp.join("cp");
    copy_dir(&example(), &cp);
    let gitops = tmp.join("gitops-dev");
    render(&cp, "dev", &gitops, tmp);
    (cp, gitops)
}

/// A fleet change to the example's dev environment touching every kind of plan entry: a
/// new cluster type `medium` (observability lands there) that performance tests move to,
/// cluster type `small` removed, a new deployment target, and config changes on `large`
/// (a ConfigMap) and on the restricted cluster types (a YAML and an env-file config).
fn fleet_change(cp: &Path) {
    let dev = cp.join("dev");
    fs::write(
        dev.join("cluster-types/west-us/medium-cluster-type.yaml"),
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: medium\n  labels:\n    region: west-us\n    size: medium\n    edge: \"false\"\nspec:\n  reconciler: arc-flux\n  namespaceService: default\n  configType: configmap\n",
    )
    .unwrap();
    replace_in(
        &dev.join("scheduling/kaizen/performance-test-policy.yaml"),
        "size: large",
        "size: medium",
    );
    fs::remove_file(dev.join("cluster-types/west-us/small/small-cluster-type.yaml")).unwrap();
    replace_in(
        &dev.join("cluster-types/west-us/large/large-config.yaml"),
        "MAX_REPLICAS: \"20\"",
        "MAX_REPLICAS: \"25\"",
    );
    replace_in(
        &dev.join("cluster-types/east-us/restricted/restricted-config.yaml"),
        "mysql://restricted-host:3306/mysqlrty123",
        "mysql://restricted-host:3306/mysql-v2",
    );
    replace_in(
        &cp.join("workloads/hello-world-app/workload.yaml"),
        "    - name: performance-test\n",
        "    - name: load-test\n      labels:\n        purpose: functional-test\n        edge: \"true\"\n      environment: dev\n      manifests:\n        type: kustomize\n        repo: https://github.com/contoso/kalypso-app-gitops\n        branch: dev\n        path: ./load-test\n    - name: performance-test\n",
    );
}

#[test]
fn example_fleet_change_plan_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let (cp, gitops) = example_with_rendered_dev(tmp);

    // Nothing changed yet: exit code 0 in every format.
    let base = ["plan", &s(&cp), "--env", "dev", "--against", &s(&gitops)].map(str::to_owned);
    let args = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .cloned()
            .chain(extra.iter().map(|e| (*e).to_owned()))
            .collect()
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        kalypso(&a.iter().map(String::as_str).collect::<Vec<_>>(), tmp)
    };
    let unchanged = run(&[]);
    assert_eq!(unchanged.code, 0, "{}", unchanged.stderr);
    insta::assert_snapshot!("example_plan_no_change_text", unchanged.stdout);
    let unchanged_md = run(&["--output", "markdown"]);
    assert_eq!(unchanged_md.code, 0);
    insta::assert_snapshot!("example_plan_no_change_markdown", unchanged_md.stdout);
    let unchanged_json = run(&["--output", "json"]);
    assert_eq!(unchanged_json.code, 0);
    let json: serde_json::Value = serde_json::from_str(&unchanged_json.stdout).unwrap();
    assert_eq!(json["has_changes"], false);
    assert_eq!(json["counts"]["unchanged"], 6);

    fleet_change(&cp);
    for (format, name) in [
        ("text", "example_plan_fleet_change_text"),
        ("markdown", "example_plan_fleet_change_markdown"),
        ("json", "example_plan_fleet_change_json"),
    ] {
        let r = run(&["--output", format]);
        assert_eq!(r.code, 2, "{format}: {}", r.stderr);
        insta::assert_snapshot!(name, r.stdout);
    }

    let diff = kalypso(&["diff", &s(&cp), "--env", "dev", "--against", &s(&gitops)], tmp);
    assert_eq!(diff.code, 2, "{}", diff.stderr);
    assert!(!diff.stdout.contains('\x1b'), "no color when not on a terminal");
    insta::assert_snapshot!("example_diff_fleet_change", diff.stdout);
    let colored = kalypso(
        &[
            "diff",
            &s(&cp),
            "--env",
            "dev",
            "--against",
            &s(&gitops),
            "--color",
            "always",
        ],
        tmp,
    );
    assert!(colored.stdout.contains("\x1b[32m+"));

    // The diff is a patch: applied to the current tree it gives what render writes.
    assert_diff_applies(&gitops, &diff.stdout, &cp, "dev", tmp);
}

/// Applies `patch` with `git apply` to a copy of `current` and requires the result to be
/// exactly what `kalypso render` writes over `current`.
fn assert_diff_applies(current: &Path, patch: &str, control_plane: &Path, env: &str, tmp: &Path) {
    let work = tmp.join(format!("apply-{env}"));
    let _ = fs::remove_dir_all(&work);
    copy_dir(current, &work);
    let patch_file = tmp.join(format!("{env}.patch"));
    fs::write(&patch_file, patch).unwrap();
    let out = Command::new("git")
        .args(["apply", "--whitespace=nowarn", "-p1"])
        .arg(&patch_file)
        .current_dir(&work)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CEILING_DIRECTORIES", tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = tmp.join(format!("rendered-{env}"));
    let _ = fs::remove_dir_all(&rendered);
    copy_dir(current, &rendered);
    render(control_plane, env, &rendered, tmp);
    assert_eq!(read_all(&work), read_all(&rendered));
}

#[test]
fn one_config_map_change_shows_exactly_its_assignments_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let (cp, gitops) = example_with_rendered_dev(tmp);
    replace_in(
        &cp.join("dev/cluster-types/west-us/large/large-config.yaml"),
        "MAX_REPLICAS: \"20\"",
        "MAX_REPLICAS: \"25\"",
    );
    let run = kalypso(
        &[
            "plan",
            &s(&cp),
            "--env",
            "dev",
            "--against",
            &s(&gitops),
            "--output",
            "json",
        ],
        tmp,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    let plan: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();

    // Exactly the assignments on cluster type `large`, as the rendered tree has them.
    let on_large: BTreeSet<String> = read_all(&gitops)
        .keys()
        .filter_map(|p| {
            let mut parts = p.split('/');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("large"), Some(dt), Some(_)) => Some(dt.to_owned()),
                _ => None,
            }
        })
        .collect();
    assert_eq!(on_large.len(), 2, "the example has two assignments on large");
    let changed = plan["changed"].as_array().unwrap();
    let changed_targets: BTreeSet<String> = changed
        .iter()
        .map(|c| {
            assert_eq!(c["cluster_type"], "large");
            c["deployment_target"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(changed_targets, on_large);
    for c in changed {
        assert_eq!(
            c["files"],
            serde_json::json!([{
                "file": "platform-config.yaml",
                "change": "modified",
                "keys": [{"key": "MAX_REPLICAS", "old": "20", "new": "25"}]
            }])
        );
    }
    // Nothing else.
    for empty in ["added", "removed", "moved", "other"] {
        assert_eq!(plan[empty], serde_json::json!([]), "{empty}");
    }
    assert_eq!(
        plan["cluster_types"],
        serde_json::json!({"added": [], "removed": []})
    );
    assert_eq!(plan["promoted_commit"], serde_json::Value::Null);
    assert_eq!(
        plan["counts"],
        serde_json::json!({
            "added": 0, "removed": 0, "moved": 0, "changed": 2, "unchanged": 4,
            "files_added": 0, "files_modified": 2, "files_deleted": 0
        })
    );

    // The text form says the same, once, for both assignments.
    let text = kalypso(&["plan", &s(&cp), "--env", "dev", "--against", &s(&gitops)], tmp);
    assert_eq!(text.code, 2);
    assert_eq!(text.stdout.matches("MAX_REPLICAS").count(), 1, "{}", text.stdout);
    assert!(text.stdout.contains("~ MAX_REPLICAS: \"20\" -> \"25\""));
}

#[test]
fn plan_errors_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let ex = s(&example());
    // No current tree to compare with: the example's GitOps repository is on GitHub.
    let no_against = kalypso(&["plan", &ex, "--env", "dev"], tmp);
    assert_eq!(no_against.code, 1);
    assert!(
        no_against.stderr.contains("is not local"),
        "{}",
        no_against.stderr
    );
    // A folder that does not exist is an error, not an empty tree.
    let missing = tmp.join("missing");
    let run = kalypso(&["plan", &ex, "--env", "dev", "--against", &s(&missing)], tmp);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no such folder"), "{}", run.stderr);
    // An environment that fails to render.
    let cp = tmp.join("cp");
    copy_dir(&example(), &cp);
    replace_in(
        &cp.join("dev/cluster-types/west-us/large/large-cluster-type.yaml"),
        "reconciler: argocd",
        "reconciler: no-such-template",
    );
    let gitops = tmp.join("empty");
    fs::create_dir_all(&gitops).unwrap();
    for command in ["plan", "diff"] {
        let run = kalypso(&[command, &s(&cp), "--env", "dev", "--against", &s(&gitops)], tmp);
        assert_eq!(run.code, 1, "{command}: {}", run.stdout);
        assert!(run.stderr.contains("no-such-template"), "{}", run.stderr);
        assert!(run.stdout.is_empty());
    }
    // Promoting from the environment itself.
    let run = kalypso(
        &[
            "plan",
            &ex,
            "--env",
            "dev",
            "--promote-from",
            "dev",
            "--against",
            &s(&gitops),
        ],
        tmp,
    );
    assert_eq!(run.code, 1);
}

#[test]
fn folder_promotion_plans_the_main_folder_with_the_source_pin() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let cp = tmp.join("cp");
    copy_dir(&example(), &cp);
    let stage = tmp.join("gitops-stage");
    render(&cp, "stage", &stage, tmp);
    // A change on main: every namespace gets a new label.
    replace_in(
        &cp.join("main/templates/namespace.yaml"),
        "          workload: {{ .Workload }}\n",
        "          workload: {{ .Workload }}\n          owner: platform\n",
    );
    let run = kalypso(
        &[
            "plan",
            &s(&cp),
            "--env",
            "stage",
            "--promote-from",
            "dev",
            "--against",
            &s(&stage),
        ],
        tmp,
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    insta::assert_snapshot!("example_plan_promote_folder_text", run.stdout);
    let json = kalypso(
        &[
            "plan",
            &s(&cp),
            "--env",
            "stage",
            "--promote-from",
            "dev",
            "--against",
            &s(&stage),
            "--output",
            "json",
        ],
        tmp,
    );
    let plan: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(
        plan["promote_from"],
        serde_json::json!({"environment": "dev", "commit": "3f1c2a9d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39"})
    );
    assert_eq!(
        plan["promoted_commit"],
        serde_json::json!({
            "old": "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b",
            "new": "3f1c2a9d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39"
        })
    );
}

#[test]
fn explain_on_the_example() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let ex = s(&example());
    let cases: &[(&str, &[&str])] = &[
        (
            "explain_dev_functional_test_text",
            &["--env", "dev", "--target", "hello-world-app-functional-test"],
        ),
        (
            "explain_dev_functional_test_json",
            &[
                "--env",
                "dev",
                "--target",
                "hello-world-app-functional-test",
                "--output",
                "json",
            ],
        ),
        (
            "explain_dev_observability_on_command_center_text",
            &[
                "--env",
                "dev",
                "--target",
                "observability-prometheus-dev",
                "--cluster-type",
                "command-center",
            ],
        ),
        (
            "explain_dev_config_logging_drone_text",
            &[
                "--env",
                "dev",
                "--target",
                "hello-world-app-functional-test",
                "--cluster-type",
                "drone",
                "--config",
                "LOGGING",
            ],
        ),
        (
            "explain_dev_config_database_url_text",
            &[
                "--env",
                "dev",
                "--target",
                "hello-world-app-performance-test",
                "--config",
                "DATABASE_URL",
            ],
        ),
        (
            "explain_stage_config_azure_json",
            &[
                "--env",
                "stage",
                "--target",
                "hello-world-app-uat-test",
                "--cluster-type",
                "drone",
                "--config",
                "MAX_REPLICAS",
                "--output",
                "json",
            ],
        ),
        (
            "explain_stage_config_azure_text",
            &[
                "--env",
                "stage",
                "--target",
                "hello-world-app-uat-test",
                "--cluster-type",
                "large",
                "--config",
                "DATABASE_URL",
            ],
        ),
    ];
    for (name, args) in cases {
        let mut all = vec!["explain", ex.as_str()];
        all.extend_from_slice(args);
        let run = kalypso(&all, tmp);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        insta::assert_snapshot!(*name, run.stdout);
    }

    // Mistakes are errors that say what exists.
    let unknown = kalypso(&["explain", &ex, "--env", "dev", "--target", "nope"], tmp);
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("hello-world-app-functional-test"));
    let ambiguous = kalypso(
        &[
            "explain",
            &ex,
            "--env",
            "dev",
            "--target",
            "hello-world-app-functional-test",
            "--config",
            "LOGGING",
        ],
        tmp,
    );
    assert_eq!(ambiguous.code, 1);
    assert!(
        ambiguous.stderr.contains("command-center, drone"),
        "{}",
        ambiguous.stderr
    );
}

/// The v1.1 real fixtures (the current scheduler's behaviour), by name and environment.
fn real_cases() -> Vec<(String, PathBuf, String)> {
    // `KALYPSO_REAL_FIXTURES` names them for checkouts that are not next to `shared/`.
    let base =
        std::env::var_os("KALYPSO_REAL_FIXTURES").map_or_else(|| root().join(REAL_FIXTURES), PathBuf::from);
    let mut cases = Vec::new();
    for entry in fs::read_dir(&base).expect("the real fixtures are in ../shared/fixtures") {
        let dir = entry.unwrap().path();
        let Ok(case) = fs::read_to_string(dir.join("case.yaml")) else {
            continue;
        };
        let field = |key: &str| {
            case.lines().find_map(|l| {
                l.trim()
                    .strip_prefix(key)
                    .and_then(|r| r.strip_prefix(':'))
                    .map(|v| v.trim().trim_matches('"').to_owned())
            })
        };
        if field("era").as_deref() != Some("v1.1") {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        cases.push((name, dir.clone(), field("environment").unwrap()));
    }
    cases.sort();
    assert!(cases.len() >= 6, "the v1.1 real fixtures");
    cases
}

#[test]
fn real_fixture_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    for (name, case, env) in real_cases() {
        let input = case.join("input");
        let base = case.join("input/gitops-base");
        let plan_args = |format: &str| {
            vec![
                "plan".to_owned(),
                s(&input),
                "--env".to_owned(),
                env.clone(),
                "--against".to_owned(),
                s(&base),
                "--output".to_owned(),
                format.to_owned(),
            ]
        };
        let expected_code = if read_all(&base) == read_all(&case.join("expected")) {
            0
        } else {
            2
        };
        for format in ["text", "markdown", "json"] {
            let args = plan_args(format);
            let run = kalypso(&args.iter().map(String::as_str).collect::<Vec<_>>(), tmp);
            assert_eq!(run.code, expected_code, "{name} {format}: {}", run.stderr);
            insta::assert_snapshot!(format!("real_{name}_plan_{format}"), run.stdout);
        }
        let diff = kalypso(&["diff", &s(&input), "--env", &env, "--against", &s(&base)], tmp);
        assert_eq!(diff.code, expected_code, "{name} diff: {}", diff.stderr);
        insta::assert_snapshot!(format!("real_{name}_diff"), diff.stdout);
        // Applied to the tree before, the diff gives the scheduler's real commit.
        let work = tmp.join(&name);
        copy_dir(&base, &work);
        if !diff.stdout.is_empty() {
            let patch = tmp.join(format!("{name}.patch"));
            fs::write(&patch, &diff.stdout).unwrap();
            let out = Command::new("git")
                .args(["apply", "--whitespace=nowarn", "-p1"])
                .arg(&patch)
                .current_dir(&work)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CEILING_DIRECTORIES", tmp)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: git apply failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(
            read_all(&work),
            read_all(&case.join("expected")),
            "{name}: the diff applied to gitops-base is the real commit"
        );
    }
}

#[test]
fn validate_reports_config_conflicts_and_strict_fails() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    let ex = s(&example());
    // Stage: an Azure export overrides two platform-config values on some assignments.
    let run = kalypso(&["validate", &ex, "--env", "stage"], tmp);
    assert_eq!(run.code, 0, "{}", run.stderr);
    insta::assert_snapshot!("validate_stage_conflicts", run.stderr);
    let strict = kalypso(&["validate", &ex, "--env", "stage", "--strict"], tmp);
    assert_eq!(strict.code, 1);
    assert!(strict.stderr.contains("config-conflict"), "{}", strict.stderr);
    // Dev has none: strict passes.
    let dev = kalypso(&["validate", &ex, "--env", "dev", "--strict"], tmp);
    assert_eq!(dev.code, 0, "{}", dev.stderr);
}
