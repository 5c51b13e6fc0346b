//! The Sprig version setting: `KALYPSO_SPRIG` unset renders with v2.22.0 silently, `v3`
//! renders with v3.2.3 and warns, anything else is an error before any work.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::process::Command;

fn validate(sprig: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kalypso"));
    cmd.args(["validate", "examples/control-plane", "--env", "dev"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match sprig {
        Some(v) => cmd.env("KALYPSO_SPRIG", v),
        None => cmd.env_remove("KALYPSO_SPRIG"),
    };
    cmd.output().unwrap()
}

#[test]
fn v2_is_the_default_and_v3_warns() {
    let v2 = validate(None);
    assert!(v2.status.success(), "{}", String::from_utf8_lossy(&v2.stderr));
    assert!(!String::from_utf8_lossy(&v2.stderr).contains("KALYPSO_SPRIG"));

    let v3 = validate(Some("v3"));
    let err = String::from_utf8_lossy(&v3.stderr);
    assert!(v3.status.success(), "{err}");
    assert!(
        err.contains("Sprig v3") && err.contains("KALYPSO_SPRIG=v3"),
        "{err}"
    );
}

#[test]
fn an_unknown_version_is_an_error() {
    let out = validate(Some("v4"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("KALYPSO_SPRIG=\"v4\" is not a Sprig version"),
        "{err}"
    );
}
