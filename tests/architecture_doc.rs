//! docs/architecture.md stays true to the workspace: its crate list names every crate with
//! exactly its `kalypso-*` dependencies, in an order with no upward edge; its IO table and
//! crates/README.md have a row for every crate. A crate added, removed or rewired without the
//! docs fails here.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every package of the workspace (the root and `crates/*`) with its `kalypso-*` normal
/// dependencies, short names (`kalypso-core` → `core`).
fn workspace() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut manifests = vec![root.join("Cargo.toml")];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let path = entry.unwrap().path().join("Cargo.toml");
        if path.exists() {
            manifests.push(path);
        }
    }
    manifests
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let name = section(&text, "package")
                .find_map(|line| line.strip_prefix("name = "))
                .unwrap_or_else(|| panic!("{}: no package name", path.display()))
                .trim_matches('"')
                .to_owned();
            let dependencies = section(&text, "dependencies")
                .filter_map(|line| line.strip_prefix("kalypso-"))
                .map(|rest| rest.split(['.', ' ', '=']).next().unwrap().to_owned())
                .collect();
            (name, dependencies)
        })
        .collect()
}

/// The lines of the manifest table `[name]` (up to the next table).
fn section<'t>(manifest: &'t str, name: &str) -> impl Iterator<Item = &'t str> {
    let header = format!("[{name}]");
    manifest
        .lines()
        .skip_while(move |line| line.trim() != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .map(str::trim)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The crate list of "Crate layering": (crate, dependencies) in the order written. A line
/// starts with the crate's name; its dependencies are the last parenthesised list of the
/// entry, which may continue on an indented line.
fn layering(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let section = &doc[doc.find("## Crate layering").expect("a Crate layering section")..];
    let block = section
        .split("```text")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with(' ') {
            entries
                .last_mut()
                .expect("a continuation after an entry")
                .1
                .push_str(line);
        } else {
            let name = line.split_whitespace().next().unwrap().to_owned();
            entries.push((name, line.to_owned()));
        }
    }
    entries
        .into_iter()
        .map(|(name, text)| {
            let open = text
                .rfind('(')
                .unwrap_or_else(|| panic!("{name}: no (dependencies)"));
            let close = text[open..].find(')').unwrap() + open;
            let dependencies = text[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(str::to_owned)
                .collect();
            (name, dependencies)
        })
        .collect()
}

#[test]
fn the_crate_list_has_every_crate_with_its_dependencies_and_no_upward_edge() {
    let actual = workspace();
    let documented = layering(&read("docs/architecture.md"));
    let names: BTreeSet<&String> = documented.iter().map(|(n, _)| n).collect();
    let crates: BTreeSet<&String> = actual.keys().collect();
    assert_eq!(
        names, crates,
        "docs/architecture.md's crate list against the workspace"
    );
    let mut above = BTreeSet::new();
    for (name, dependencies) in &documented {
        assert_eq!(
            dependencies, &actual[name],
            "docs/architecture.md: the dependencies of {name} against its Cargo.toml"
        );
        for dependency in dependencies {
            assert!(
                above.contains(&format!("kalypso-{dependency}")),
                "docs/architecture.md: {name} depends on kalypso-{dependency}, which is not above it"
            );
        }
        above.insert(name.clone());
    }
}

#[test]
fn the_io_table_and_the_crates_readme_have_a_row_for_every_crate() {
    let doc = read("docs/architecture.md");
    let io = &doc[doc
        .find("## Where IO happens")
        .expect("a Where IO happens section")..];
    let readme = read("crates/README.md");
    for name in workspace().keys() {
        let mentioned = |text: &str| {
            text.lines().filter(|l| l.starts_with('|')).any(|l| {
                l.split('|')
                    .nth(1)
                    .is_some_and(|cell| cell.contains(&format!("`{name}`")))
            })
        };
        assert!(
            mentioned(io),
            "docs/architecture.md's IO table has no row for {name}"
        );
        assert!(mentioned(&readme), "crates/README.md has no row for {name}");
    }
}
