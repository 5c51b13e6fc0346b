//! docs/promotion.md's walk-through, run as written: its `sh` blocks, in order, with the
//! `kalypso` binary of this build on the `PATH`, in a temporary folder and with a free port for
//! the hub. The walk-through checks its own results (`test ...` lines, exit codes); this test
//! fails when any line does.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

/// The contents of the ```` ```sh ```` blocks of a Markdown text, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            Some(block) if line.trim_end() == "```" => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn the_promotion_walkthrough_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/promotion.md")).unwrap();
    let blocks = sh_blocks(&doc);
    assert!(blocks.len() >= 6, "the walk-through has its steps");
    let script = format!("set -eu\n{}", blocks.join("\n"));
    let work = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = Path::new(env!("CARGO_BIN_EXE_kalypso")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        .env("PATH", path)
        .env("WORK", work.path())
        .env("HUB_PORT", port.to_string())
        .env_remove("GITHUB_AUTH_TOKEN")
        .output()
        .unwrap();
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
