//! Rendering a generated fleet: the tree is the same whatever the thread count, and an
//! incremental render (with the render cache) produces exactly the tree a full render does,
//! touching only the files whose content changed.
//!
//! The fleet comes from the benchmark generator (`tests/data/fleetgen/fleetgen.py`, a verbatim
//! copy of the shared benchmark generator whose origin tests/data/fleetgen/README.md notes;
//! deterministic), at a size that keeps the test quick but
//! gives every thread plenty of assignments.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under `dir`: relative path → (content, modification time).
fn read_tree(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                let modified = entry.metadata().unwrap().modified().unwrap();
                out.insert(rel, (fs::read(&path).unwrap(), modified));
            }
        }
    }
    out
}

fn contents(tree: &BTreeMap<String, (Vec<u8>, SystemTime)>) -> BTreeMap<&str, &[u8]> {
    tree.iter()
        .map(|(k, (v, _))| (k.as_str(), v.as_slice()))
        .collect()
}

/// Runs `kalypso render` and returns its standard output.
fn render(fleet: &Path, out: &Path, cache: &Path, extra: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_kalypso"))
        .arg("render")
        .arg(fleet)
        .args(["--env", "dev", "--out"])
        .arg(out)
        .args(extra)
        .env("KALYPSO_CACHE_DIR", cache)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "render failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The "(A added, C changed, D deleted, U unchanged; N assignments re-rendered...)" counts of a
/// render's summary line.
fn counts(stdout: &str) -> [usize; 5] {
    let added = stdout
        .find(" added")
        .unwrap_or_else(|| panic!("no summary in {stdout:?}"));
    let start = stdout[..added].rfind('(').unwrap();
    let numbers: Vec<usize> = stdout[start..]
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(5)
        .map(|s| s.parse().unwrap())
        .collect();
    numbers.try_into().unwrap()
}

fn generate_fleet(dir: &Path) -> PathBuf {
    let fleet = dir.join("fleet");
    let generator = root().join("tests/data/fleetgen/fleetgen.py");
    let status = Command::new("python3")
        .arg(&generator)
        .arg(&fleet)
        .args(["--workloads", "40", "--cluster-types", "24", "--policies", "8"])
        .status()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", generator.display()));
    assert!(status.success(), "fleetgen.py failed");
    fleet
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    fs::write(path, text.replacen(from, to, 1)).unwrap();
}

fn find(dir: &Path, name: &str) -> PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == name) {
                return path;
            }
        }
    }
    panic!("no {name} under {}", dir.display())
}

/// Files whose content differs between two trees, or that only one has.
fn changed_files(before: &BTreeMap<&str, &[u8]>, after: &BTreeMap<&str, &[u8]>) -> usize {
    let mut names: Vec<&&str> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| before.get(**n) != after.get(**n))
        .count()
}

#[test]
fn output_is_the_same_whatever_the_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = generate_fleet(tmp.path());
    let cache = tmp.path().join("cache");
    let one = tmp.path().join("one");
    let four = tmp.path().join("four");
    render(&fleet, &one, &cache, &["--no-cache", "--threads", "1"]);
    render(&fleet, &four, &cache, &["--no-cache", "--threads", "4"]);
    let one = read_tree(&one);
    assert!(
        one.len() > 500,
        "the fleet is too small to test: {} files",
        one.len()
    );
    assert_eq!(contents(&one), contents(&read_tree(&four)));
}

#[test]
fn incremental_renders_equal_full_renders_and_touch_only_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = generate_fleet(tmp.path());
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");

    let first = counts(&render(&fleet, &out, &cache, &[]));
    let full = read_tree(&out);
    assert_eq!(first[0], full.len(), "a first render adds every file");

    // No input change: nothing is re-rendered and no file is written.
    let again = counts(&render(&fleet, &out, &cache, &[]));
    assert_eq!(again[..3], [0, 0, 0], "nothing written");
    assert_eq!(again[4], 0, "nothing re-rendered");
    assert_eq!(read_tree(&out), full, "contents and modification times unchanged");

    // One cluster type's ConfigMap changes: the result is what a full render gives, and only the
    // files that differ were written.
    let busiest = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .max_by_key(|p| fs::read_dir(p).unwrap().count())
        .unwrap();
    let busiest = busiest.file_name().unwrap().to_str().unwrap();
    edit(
        &find(&fleet.join("dev"), &format!("{busiest}-config.yaml")),
        "MAX_REPLICAS: \"",
        "MAX_REPLICAS: \"9",
    );
    let changed = counts(&render(&fleet, &out, &cache, &[]));
    let fresh = tmp.path().join("fresh-1");
    render(&fleet, &fresh, &cache, &["--no-cache"]);
    let after = read_tree(&out);
    assert_eq!(contents(&after), contents(&read_tree(&fresh)));
    let differing = changed_files(&contents(&full), &contents(&after));
    assert!(differing > 0, "the ConfigMap change shows in the tree");
    assert_eq!(changed[0] + changed[1] + changed[2], differing);
    assert!(
        changed[4] < full.len() / 3,
        "only affected assignments re-rendered: {changed:?}"
    );
    for (path, (content, modified)) in &after {
        if full.get(path).is_some_and(|(old, _)| old == content) {
            assert_eq!(
                *modified, full[path].1,
                "{path} was rewritten with the same content"
            );
        }
    }

    // One workload added (its registration and its folder): same checks.
    let workloads = fleet.join("workloads");
    let registration = fs::read_to_string(fleet.join("main/workloads/app-00000.yaml")).unwrap();
    fs::write(
        fleet.join("main/workloads/app-new.yaml"),
        registration.replace("app-00000", "app-new"),
    )
    .unwrap();
    fs::create_dir_all(workloads.join("app-new")).unwrap();
    for entry in fs::read_dir(workloads.join("app-00000")).unwrap() {
        let entry = entry.unwrap();
        let text = fs::read_to_string(entry.path()).unwrap();
        fs::write(
            workloads.join("app-new").join(entry.file_name()),
            text.replace("app-00000", "app-new"),
        )
        .unwrap();
    }
    let before = read_tree(&out);
    let added = counts(&render(&fleet, &out, &cache, &[]));
    let fresh = tmp.path().join("fresh-2");
    render(&fleet, &fresh, &cache, &["--no-cache"]);
    let after = read_tree(&out);
    assert_eq!(contents(&after), contents(&read_tree(&fresh)));
    assert!(added[0] > 0, "the new workload's files are added: {added:?}");
    assert_eq!(
        added[0] + added[1] + added[2],
        changed_files(&contents(&before), &contents(&after))
    );
}
