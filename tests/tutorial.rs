//! docs/tutorial.md, the seed tutorial on local repositories, run as written: its `sh` blocks,
//! in order, with the `kalypso` binary of this build on the `PATH` and a temporary work folder.
//! The page checks its own results (`test`, `grep -q`, `git cat-file -e` lines); this test
//! fails when any line does, and checks what the newcomer is shown at the two `plan` steps.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use kalypso_testkit::run_doc_script;

#[test]
fn the_tutorial_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let output = run_doc_script(
        root,
        "docs/tutorial.md",
        10,
        Path::new(env!("CARGO_BIN_EXE_kalypso")),
        &[("WORK", work.path().to_str().unwrap())],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the tutorial failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for shown in [
        "  + drone/hello-world-app-functional-test",
        "  + large/hello-world-app-performance-test",
        "Final value: mysql://west-stage:8806/mysql2",
        "~ DATABASE_URL: \"mysql://west-us-host:8806/mysql\" -> \"mysql://west-stage:8806/mysql2\"",
    ] {
        assert!(stdout.contains(shown), "the tutorial shows {shown:?}:\n{stdout}");
    }
}
