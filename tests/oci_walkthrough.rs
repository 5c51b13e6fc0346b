//! docs/oci.md's walk-through, run as written: its `sh` blocks, in order, with the `kalypso`
//! binary of this build on the `PATH`, a temporary work folder and a real registry on
//! loopback (Debian's `docker-registry`, see `kalypso_testkit::TestRegistry`) as `REGISTRY`.
//! The page checks its own results (`test`, `grep -q` lines); this test fails when any line
//! does, and checks what the page says `sync` prints.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use kalypso_testkit::{TestRegistry, run_doc_script};

#[test]
fn the_oci_walkthrough_runs_as_written() {
    let Some(registry) = TestRegistry::start("the OCI walk-through (docs/oci.md)") else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let output = run_doc_script(
        root,
        "docs/oci.md",
        6,
        Path::new(env!("CARGO_BIN_EXE_kalypso")),
        &[
            ("WORK", work.path().to_str().unwrap()),
            ("REGISTRY", &registry.host()),
            ("DOCKER_CONFIG", work.path().join("no-docker").to_str().unwrap()),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the walk-through failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = format!(
        "dev: 4 artifacts (4 new) pushed to dev@dev (oci://{}/kalypso/gitops), 0 unchanged, index sha256:",
        registry.host()
    );
    assert!(
        stdout.contains(&shown),
        "the page says sync prints {shown:?}:\n{stdout}"
    );
    assert!(stdout.contains("\"tags\":["), "{stdout}");
    // Nothing but the registry the test started was written to.
    assert!(registry.requests().iter().any(|r| r.method == "PUT"));
}
