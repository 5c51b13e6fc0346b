//! docs/promotion.md's walk-through, run as written: its `sh` blocks, in order, with the
//! `kalypso` binary of this build on the `PATH`, in a temporary folder and with a free port for
//! the hub. The walk-through checks its own results (`test ...` lines, exit codes); this test
//! fails when any line does.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use kalypso_testkit::run_doc_script;

#[test]
fn the_promotion_walkthrough_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let output = run_doc_script(
        root,
        "docs/promotion.md",
        6,
        Path::new(env!("CARGO_BIN_EXE_kalypso")),
        &[("WORK", work.path().to_str().unwrap()), ("HUB_PORT", &port)],
    );
    let hub_log = std::fs::read_to_string(work.path().join("hub.log")).unwrap_or_default();
    assert!(
        output.status.success(),
        "the walk-through failed ({}):\n--- stdout\n{}\n--- stderr\n{}\n--- hub.log\n{hub_log}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cluster drone-1 (drone) in dev failed to apply GitOps commit")
            && stderr.contains("field is immutable"),
        "check-promote names the failed cluster and Flux's message:\n{stderr}"
    );
    assert!(stderr.contains("refusing to promote"), "{stderr}");
}
