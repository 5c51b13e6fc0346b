//! Tests as data: a folder of case folders run by one harness, so that adding a case is
//! adding a folder. This module holds what every such harness needs: finding the cases,
//! comparing an output with its expected file (or writing it, to bless a change), and running
//! every case to report all the failing ones by name rather than stopping at the first.
//!
//! Environment variables:
//! - `KALYPSO_BLESS=1` writes the actual outputs over the expected files instead of comparing
//!   them (review the change with `git diff` before committing it);
//! - `KALYPSO_CASE=<text>` runs only the cases whose name contains `<text>`.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Whether expected files are being blessed (`KALYPSO_BLESS` set to anything but `0`).
pub fn blessing() -> bool {
    std::env::var_os("KALYPSO_BLESS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The case folders under `root` (the sub-folders holding a `case.yaml`), by name, sorted;
/// only those whose name contains `KALYPSO_CASE` when it is set.
pub fn case_dirs(root: &Path) -> Vec<(String, PathBuf)> {
    let only = std::env::var("KALYPSO_CASE").unwrap_or_default();
    let mut cases: Vec<(String, PathBuf)> = fs::read_dir(root)
        .unwrap_or_else(|e| panic!("cannot read the cases at {}: {e}", root.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|dir| dir.join("case.yaml").is_file())
        .map(|dir| (dir.file_name().unwrap().to_string_lossy().into_owned(), dir))
        .filter(|(name, _)| name.contains(&only))
        .collect();
    cases.sort();
    cases
}

/// Compares `actual` with the content of the expected file at `path`, or, when
/// [`blessing`], writes `actual` there. A missing expected file is a failure that
/// says how to create it.
pub fn check_expected(path: &Path, actual: &str) -> Result<(), String> {
    if blessing() {
        fs::write(path, actual).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return Ok(());
    }
    let Ok(expected) = fs::read_to_string(path) else {
        return Err(format!(
            "no expected file {} (run with KALYPSO_BLESS=1 to write it); actual:\n{actual}",
            path.display()
        ));
    };
    if expected == actual {
        return Ok(());
    }
    let mut report = format!("{} differs (- expected, + actual):\n", path.display());
    let (want, got): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some(w), Some(g)) if w == g => report.push_str(&format!("  {w}\n")),
            (w, g) => {
                if let Some(w) = w {
                    report.push_str(&format!("- {w}\n"));
                }
                if let Some(g) = g {
                    report.push_str(&format!("+ {g}\n"));
                }
            }
        }
    }
    if want == got {
        report.push_str("(the files differ only in line endings or a final newline)\n");
    }
    Err(report)
}

/// Runs `check` on every case (a case that panics fails like one that returns an error),
/// prints `<what>: N passed, M failed`, and panics with every failure, by case name, if any
/// case failed. Panics too when there is no case at all.
pub fn run_all(what: &str, cases: &[(String, PathBuf)], check: impl Fn(&str, &Path) -> Result<(), String>) {
    assert!(!cases.is_empty(), "{what}: no case found");
    let mut failures = Vec::new();
    for (name, dir) in cases {
        let outcome = catch_unwind(AssertUnwindSafe(|| check(name, dir))).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(format!("panicked: {message}"))
        });
        if let Err(e) = outcome {
            failures.push(format!("case {name} failed:\n{e}"));
        }
    }
    println!(
        "{what}: {} passed, {} failed",
        cases.len() - failures.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
