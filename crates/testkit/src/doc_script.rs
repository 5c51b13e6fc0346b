//! Documentation pages that are scripts: a walk-through's ```` ```sh ```` blocks run in order
//! in one `bash`, so that the page a user follows is the test (docs/promotion.md,
//! docs/tutorial.md).

use std::path::Path;
use std::process::{Command, Output};

/// The contents of the ```` ```sh ```` blocks of a Markdown text, in order.
pub fn sh_blocks(markdown: &str) -> Vec<String> {
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

/// Runs the `sh` blocks of the Markdown page `doc` (relative to `root`) as one `bash -eu`
/// script in `root`, with the folder of the `kalypso` binary `kalypso` first on the `PATH`, no
/// GitHub token, and `env` set. Panics unless the page has at least `min_blocks` blocks.
pub fn run_doc_script(
    root: &Path,
    doc: &str,
    min_blocks: usize,
    kalypso: &Path,
    env: &[(&str, &str)],
) -> Output {
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let blocks = sh_blocks(&text);
    assert!(blocks.len() >= min_blocks, "{doc} has its steps");
    let script = format!("set -eu\n{}", blocks.join("\n"));
    let bin = kalypso.parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = Command::new("bash");
    command
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        .env("PATH", path)
        .env_remove("GITHUB_AUTH_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

#[cfg(test)]
mod tests {
    use super::sh_blocks;

    #[test]
    fn only_sh_blocks_are_taken_in_order() {
        let page = "text\n```sh\necho one\n```\n```yaml\nkey: v\n```\n```sh \necho two\necho three\n```\n";
        assert_eq!(sh_blocks(page), ["echo one\n", "echo two\necho three\n"]);
    }

    #[test]
    fn an_unclosed_block_is_not_run() {
        assert!(sh_blocks("```sh\necho half\n").is_empty());
    }
}
