//! Running the `kalypso` command in a child process, the way a user runs it: its exit code
//! and both output streams, with temporary paths replaced by placeholders so that tests can
//! compare them with snapshots and expected files.

use std::path::Path;
use std::process::Command;

/// What one run of a command returned and printed.
#[derive(Debug)]
pub struct Run {
    /// The exit code.
    pub code: i32,
    /// Standard output (UTF-8).
    pub stdout: String,
    /// Standard error (UTF-8).
    pub stderr: String,
}

impl Run {
    /// Runs `command` to completion and captures its outcome; panics if it cannot start, is
    /// killed by a signal, or prints something that is not UTF-8.
    pub fn of(command: &mut Command) -> Run {
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
        let text = |bytes: Vec<u8>, stream: &str| {
            String::from_utf8(bytes).unwrap_or_else(|e| panic!("{stream} of {command:?} is not UTF-8: {e}"))
        };
        Run {
            code: output
                .status
                .code()
                .unwrap_or_else(|| panic!("{command:?} was killed: {}", output.status)),
            stdout: text(output.stdout, "stdout"),
            stderr: text(output.stderr, "stderr"),
        }
    }

    /// The same outcome with every `from` in both streams replaced by `to` (a temporary
    /// path by a placeholder, a commit id by a name).
    #[must_use]
    pub fn replace(self, from: &str, to: &str) -> Run {
        Run {
            code: self.code,
            stdout: self.stdout.replace(from, to),
            stderr: self.stderr.replace(from, to),
        }
    }

    /// The lines of standard error that report a problem (`error[...]`, `warning[...]`).
    pub fn diagnostics(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("error[") || l.starts_with("warning["))
            .collect()
    }

    /// Asserts that some line of standard error holds every one of `parts`.
    #[track_caller]
    pub fn reports(&self, parts: &[&str]) -> &Run {
        assert!(
            self.stderr.lines().any(|l| parts.iter().all(|p| l.contains(p))),
            "no line of stderr holds all of {parts:?}:\n{}",
            self.stderr
        );
        self
    }
}

/// The `kalypso` binary at `bin` with `args`, run in `cwd` as the tests run it: no colour,
/// the render cache in `cache`, and no GitHub token from the environment.
pub fn kalypso(bin: &Path, args: &[&str], cwd: &Path, cache: &Path) -> Command {
    let mut command = Command::new(bin);
    command
        .args(args)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env("KALYPSO_CACHE_DIR", cache)
        .env_remove("GITHUB_AUTH_TOKEN");
    command
}
