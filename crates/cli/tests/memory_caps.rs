//! Runaway templates under an address-space cap: the real command, run as a child process
//! under `prlimit --as` (1 GiB), must fail each with a limit's error and exit code 1, never
//! abort on a failed allocation or a stack overflow. Memory is the point, so it is checked
//! by the operating system's limit, not by timing or by counting in the test.

#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use kalypso_testkit::{Run, copy_files, workspace_root};

/// The address space the command may use.
const CAP_BYTES: u64 = 1 << 30;

/// Not a test: the child process's entry point (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

fn templates(reconciler: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: reconciler\nspec:\n  \
         type: reconciler\n  manifests:\n    - |\n      {reconciler}\n---\n\
         apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: namespace\nspec:\n  \
         type: namespace\n  manifests:\n    - \"ns\"\n---\n\
         apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata:\n  name: config\nspec:\n  \
         type: config\n  manifests:\n    - \"{{{{ toYaml .ConfigData }}}}\"\n"
    )
}

/// Runs `validate` on the valid control plane with `reconciler` as its reconciler template,
/// under the cap.
fn validate_capped(reconciler: &str, limits: &[&str]) -> Run {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let cp = dir.path().join("control-plane");
    copy_files(
        &workspace_root().join("tests/cases/bad-input/a-valid-control-plane-changes-the-seeded-tree/input"),
        &cp,
    );
    std::fs::write(cp.join("main/templates.yaml"), templates(reconciler)).expect("templates written");
    let mut args: Vec<String> = limits.iter().map(|s| (*s).to_owned()).collect();
    args.extend([
        "validate".to_owned(),
        cp.to_str().expect("UTF-8 path").to_owned(),
        "--env".to_owned(),
        "dev".to_owned(),
    ]);
    let mut prlimit = Command::new("prlimit");
    prlimit
        .arg(format!("--as={CAP_BYTES}"))
        .arg("--")
        .arg(std::env::current_exe().expect("the test binary"));
    Run::of(
        support::as_cli_child(&mut prlimit, &args)
            .env("KALYPSO_THREADS", "2")
            .env_remove("KALYPSO_LIMITS"),
    )
}

#[test]
fn runaway_templates_fail_with_a_limit_under_a_memory_cap() {
    let deep = r#"{{ $d := dict }}{{ range until 100000 }}{{ $d = dict "a" $d }}{{ end }}"#;
    let cases = [
        (
            "template-alloc",
            r#"{{ $s := "ab" }}{{ range until 40 }}{{ $s = cat $s $s }}{{ end }}{{ len $s }}"#.to_owned(),
        ),
        (
            "template-alloc",
            r#"{{ $s := "ab" }}{{ range until 40 }}{{ $s = join "" (list $s $s) }}{{ end }}{{ len $s }}"#
                .to_owned(),
        ),
        (
            "template-alloc",
            r#"{{ $l := list 1 }}{{ range until 40 }}{{ $l = concat $l $l }}{{ end }}{{ len $l }}"#
                .to_owned(),
        ),
        (
            "template-output",
            r#"{{ $s := "ab" }}{{ range until 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}{{ len $s }}"#
                .to_owned(),
        ),
        (
            "template-alloc",
            r#"{{ $l := list 1 }}{{ range until 60 }}{{ $l = list $l $l }}{{ end }}{{ hash $l }}"#.to_owned(),
        ),
        ("data-depth", format!("{deep}{{{{ hash $d }}}}")),
        ("data-depth", format!("{deep}{{{{ toYaml $d }}}}")),
        ("data-depth", format!("{deep}{{{{ stringify $d }}}}")),
        ("data-depth", format!("{deep}{{{{ toJson $d }}}}")),
    ];
    for (limit, template) in &cases {
        let outcome = validate_capped(template, &[]);
        assert_eq!(outcome.code, 1, "{template}: {outcome:#?}");
        assert!(
            outcome.stderr.contains(&format!("the {limit} limit")) && outcome.stderr.contains("--limit"),
            "{template}: {outcome:#?}"
        );
    }
}

#[test]
fn deep_data_within_a_raised_limit_renders_under_a_memory_cap() {
    // Raising data-depth gives the encoders the stack they need rather than overflowing.
    let template = r#"{{ $d := dict }}{{ range until 5000 }}{{ $d = dict "a" $d }}{{ end }}{{ hash $d | len }}{{ toYaml $d | len }}"#;
    let outcome = validate_capped(template, &["--limit", "data-depth=6000"]);
    assert_eq!(outcome.code, 0, "{outcome:#?}");
}
