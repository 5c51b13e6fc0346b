//! docs/templates.md's "Everything at once" example, checked: the page's Template is rendered
//! with the bundled example control plane, and the file it writes must be the page's output
//! block, byte for byte.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use kalypso_testkit::{copy_files, example_control_plane, kalypso};

/// The ```` ```yaml ```` blocks of the section of `markdown` headed `heading`, in order.
fn yaml_blocks_of_section(markdown: &str, heading: &str) -> Vec<String> {
    let section = markdown.split(heading).nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    section
        .split("```yaml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_template_data_example_renders_as_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/templates.md")).unwrap();
    let blocks = yaml_blocks_of_section(&doc, "## Everything at once");
    let [template, expected] = blocks.as_slice() else {
        panic!("the section has a template and its output: {blocks:?}");
    };
    let work = tempfile::tempdir().unwrap();
    let control_plane = work.path().join("control-plane");
    copy_files(&example_control_plane(), &control_plane);
    std::fs::write(control_plane.join("main/templates/namespace.yaml"), template).unwrap();
    let output = kalypso(
        Path::new(env!("CARGO_BIN_EXE_kalypso")),
        &["render", "control-plane", "--env", "dev", "--out", "out/dev"],
        work.path(),
        &work.path().join("cache"),
    )
    .output()
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written = std::fs::read_to_string(
        work.path()
            .join("out/dev/drone/hello-world-app-functional-test/namespace.yaml"),
    )
    .unwrap();
    assert_eq!(&written, expected);
}
