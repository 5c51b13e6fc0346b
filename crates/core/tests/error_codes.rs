//! Every diagnostic code the sources report is documented in `docs/errors.md`, and every
//! code documented there is still reported somewhere: the list users and scripts rely on
//! cannot drift from the code.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The codes in the sources: the first argument of `Diagnostic::error`/`warning` when it is
/// a literal, and the literal codes chosen in `load.rs`'s match arms (`("duplicate-key", ...)`).
/// Test modules are left out.
fn codes_in_sources() -> BTreeSet<String> {
    let mut codes = BTreeSet::new();
    let mut dirs = vec![root().join("crates")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                if !path.ends_with("tests") && !path.ends_with("target") {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.split("#[cfg(test)]").next().unwrap_or_default();
            for marker in ["Diagnostic::error(", "Diagnostic::warning(", "(\"duplicate-key\""] {
                for (i, _) in text.match_indices(marker) {
                    let rest = text[i + marker.len()..].trim_start();
                    let rest = if marker.starts_with("(\"") {
                        &text[i + 1..]
                    } else {
                        rest
                    };
                    if let Some(literal) = rest.strip_prefix('"')
                        && let Some(end) = literal.find('"')
                    {
                        codes.insert(literal[..end].to_owned());
                    }
                }
            }
        }
    }
    codes
}

fn codes_documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/errors.md")).unwrap();
    doc.lines()
        .take_while(|l| !l.starts_with("## Limits"))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_code_is_documented_and_every_documented_code_is_used() {
    let used = codes_in_sources();
    let documented = codes_documented();
    assert!(used.len() > 20, "found the codes: {used:?}");
    let undocumented: Vec<_> = used.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "codes missing from docs/errors.md: {undocumented:?}"
    );
    let unused: Vec<_> = documented.difference(&used).collect();
    assert!(
        unused.is_empty(),
        "codes in docs/errors.md that nothing reports: {unused:?}"
    );
}

#[test]
fn every_limit_is_documented() {
    let doc = std::fs::read_to_string(root().join("docs/errors.md")).unwrap();
    for name in kalypso_core::limits::NAMES {
        assert!(
            doc.contains(&format!("| `{name}` |")),
            "limit {name} missing from docs/errors.md"
        );
    }
}
