//! Each crate reads bottom-up: no cycle among the modules of a crate's `src/` (a module's
//! `crate::<other>` references, test code and comments left out). A module family that is
//! one idea (`value` and its `func` child in kalypso-gotmpl) keeps its children in a folder.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules of `src` and the modules each refers to with `crate::`.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".rs"))
        else {
            continue;
        };
        if name == "lib" || name == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut refers = BTreeSet::new();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                    .unwrap_or(rest.len());
                let other = &rest[..end];
                if !other.is_empty() && other != name {
                    refers.insert(other.to_owned());
                }
            }
        }
        graph.insert(name.to_owned(), refers);
    }
    graph
}

/// A cycle of `graph`, if it has one (as the path that closes it).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if graph.contains_key(next)
                && let Some(cycle) = visit(next, graph, path, done)
            {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_cycle_among_its_modules() {
    let crates = kalypso_testkit::workspace_root().join("crates");
    let mut checked = 0;
    let mut cycles = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        checked += 1;
        if let Some(cycle) = find_cycle(&module_graph(&src)) {
            cycles.push(format!("{}: {}", src.display(), cycle.join(" -> ")));
        }
    }
    assert!(
        checked >= 10,
        "only {checked} crates found under {}",
        crates.display()
    );
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c", "outside"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(n, d)| (n.to_owned(), d.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(find_cycle(&graph).unwrap(), ["a", "b", "c", "a"]);
    let acyclic: BTreeMap<String, BTreeSet<String>> = graph
        .into_iter()
        .map(|(n, d)| (n.clone(), if n == "c" { BTreeSet::new() } else { d }))
        .collect();
    assert!(find_cycle(&acyclic).is_none());
}
