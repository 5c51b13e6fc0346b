//! The diagnostic codes ([`kalypso_core::Code`]) and `docs/errors.md` list the same codes in
//! the same order, and every code is still reported somewhere: the list users and scripts
//! rely on cannot drift from the code.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use kalypso_core::Code;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The sources outside test modules and the enum's own file, concatenated.
fn sources() -> String {
    let mut all = String::new();
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
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("core/src/diag.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            all.push_str(text.split("#[cfg(test)]").next().unwrap_or_default());
        }
    }
    all
}

fn codes_documented() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/errors.md")).unwrap();
    doc.lines()
        .take_while(|l| !l.starts_with("## Limits"))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_docs_list_every_code_in_order() {
    let codes: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        codes_documented(),
        codes,
        "docs/errors.md and kalypso_core::Code differ"
    );
}

#[test]
fn every_code_is_reported_somewhere() {
    let sources = sources();
    let unused: Vec<&Code> = Code::ALL
        .iter()
        .filter(|code| {
            let name = format!("Code::{code:?}");
            // `Code::Yaml` must not be found inside `Code::YamlLimit`.
            !sources.match_indices(&name).any(|(i, _)| {
                sources[i + name.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| !c.is_alphanumeric() && c != '_')
            })
        })
        .collect();
    assert!(unused.is_empty(), "codes that nothing reports: {unused:?}");
}

#[test]
fn codes_are_unique_lowercase_words() {
    let mut seen = std::collections::BTreeSet::new();
    for code in Code::ALL {
        let text = code.as_str();
        assert!(seen.insert(text), "{text} twice");
        assert!(
            !text.is_empty() && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
            "{text}"
        );
    }
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
