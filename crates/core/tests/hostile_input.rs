//! A sweep of hostile and broken input through the loader: every document kind the scheduler
//! reads (and one it does not), each broken in every way the loader might meet, at every line
//! after the object's name, and each too large to read and holding a byte that is not UTF-8. Every diagnostic must name the file and line, the object (kind and
//! name: the document names it before the broken part), and the field, in kalypso's words:
//! no wording of the YAML parser or of the deserializer may reach a user.
//!
//! The sweep is systematic, not random (the random mutations of `fuzz_pass.rs` check that
//! nothing panics or escapes the limits): documents are truncated at every line and in the
//! middle of it, each value is replaced by each hostile value (unclosed brackets and quotes,
//! undefined aliases, tags, complex keys, merge keys, tabs, wrong types...), and each hostile
//! line is inserted before each line. A failure lists every offending message once, with one
//! document that produced it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use kalypso_core::diag::{Code, Diagnostic, Diagnostics};
use kalypso_core::source::{SourceFile, SourceTree};

const API: &str = "apiVersion: scheduler.kalypso.io/v1alpha1";

/// One valid document of each kind, its object named `subject` on its fourth line.
fn documents() -> Vec<(&'static str, String)> {
    let head =
        |kind: &str| format!("{API}\nkind: {kind}\nmetadata:\n  name: subject\n  labels:\n    team: a\n");
    vec![
        (
            "ClusterType",
            format!("{}spec:\n  reconciler: r\n  namespaceService: n\n  configType: c\n", head("ClusterType")),
        ),
        (
            "Template",
            format!(
                "{}spec:\n  type: reconciler\n  manifests:\n    - |\n      name: {{{{ .DeploymentTargetName }}}}\n    - \"kind: A\"\n",
                head("Template")
            ),
        ),
        (
            "WorkloadRegistration",
            format!(
                "{}spec:\n  workload:\n    repo: https://example.com/app\n    branch: main\n    path: workload\n  workspace: team\n",
                head("WorkloadRegistration")
            ),
        ),
        (
            "Workload",
            format!(
                "{}spec:\n  deploymentTargets:\n    - name: web\n      labels:\n        tier: front\n      environment: dev\n      \
                 manifests: {{repo: r, branch: b, path: web}}\n      configSchemas: [s]\n",
                head("Workload")
            ),
        ),
        (
            "DeploymentTarget",
            format!(
                "{}spec:\n  environment: dev\n  manifests:\n    repo: r\n    branch: b\n    path: api\n",
                head("DeploymentTarget")
            ),
        ),
        (
            "SchedulingPolicy",
            format!(
                "{}spec:\n  deploymentTargetSelector:\n    workspace: team\n    labelSelector:\n      matchLabels:\n        tier: front\n  \
                 clusterTypeSelector:\n    labelSelector:\n      matchExpressions:\n        - key: size\n          operator: In\n          \
                 values: [large, small]\n",
                head("SchedulingPolicy")
            ),
        ),
        (
            "Environment",
            format!(
                "{}spec:\n  controlPlane:\n    repo: https://example.com/cp\n    branch: dev\n    path: .\n",
                head("Environment")
            ),
        ),
        (
            "GitOpsRepo",
            format!(
                "{}spec:\n  repo: https://example.com/gitops\n  branch: dev\n  path: .\n",
                head("GitOpsRepo")
            ),
        ),
        (
            "BaseRepo",
            format!(
                "{}spec:\n  repo: https://example.com/cp\n  branch: main\n  path: .\n  commit: 3f1c2a9d\n",
                head("BaseRepo")
            ),
        ),
        (
            "SchedulerExtender",
            format!(
                "{}spec:\n  url: http://127.0.0.1:8099/placement\n  filter: true\n  prioritize: true\n  timeout: 2s\n  \
                 failurePolicy: Fail\n",
                head("SchedulerExtender")
            ),
        ),
        (
            "ConfigSchema",
            format!(
                "{}spec:\n  schema: |\n    {{\"type\": \"object\"}}\n",
                head("ConfigSchema")
            ),
        ),
        (
            "ConfigMap",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: subject\n  labels:\n    platform-config: \"true\"\n\
             data:\n  REPLICAS: \"3\"\n  REGION: east\n"
                .to_owned(),
        ),
        (
            "Secret",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: subject\n  labels:\n    team: a\nstringData:\n  token: x\n"
                .to_owned(),
        ),
    ]
}

/// Values a field may be given instead of its own.
const VALUES: &[&str] = &[
    "[unclosed",
    "{unclosed",
    "{a: [b}",
    "\"unclosed",
    "'unclosed",
    "*undefined",
    "&anchor",
    "!!binary aGVsbG8=",
    "!custom value",
    "!!map value",
    "!!seq value",
    "!!int abc",
    "!!float x",
    "!!bool maybe",
    "!!null x",
    "!!timestamp x",
    "!<tag:yaml.org,2002:str> x",
    "!e!foo x",
    "%",
    "@reserved",
    "`backtick",
    "a: b",
    "a: b: c",
    "- item",
    "[a, b]: c",
    "{a: b}: c",
    "? complex",
    "|\n\tx",
    "|-1\n  x",
    ">\n x",
    "\"\\q\"",
    "\"\\x4\"",
    "x\u{1}y",
    "[a]",
    "{a: b}",
    "[]",
    "{}",
    "1",
    "-1",
    "1.5",
    "1e999",
    "0x1F",
    ".nan",
    "true",
    "no",
    "null",
    "~",
    "\"\"",
    "!!str",
    "[*undefined]",
    "{? [a]: b}",
    "{[a]: b}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]",
];

/// Lines inserted before a line, at its indentation.
const LINES: &[&str] = &[
    "x: [unclosed",
    "x: {unclosed",
    "x: \"unclosed",
    "[a, b]: c",
    "{a: b}: c",
    "? [a, b]\n: c",
    "? {a: b}\n: c",
    "? a\n: b",
    "? |\n  a\n: b",
    "<<: *undefined",
    "<<: scalar",
    "<<: [a]",
    "<<: {labels: {x: y}}",
    "&dup a: b",
    "*undefined : b",
    "!tag k: v",
    "!!str 1: v",
    "1: integer key",
    "true: boolean key",
    "null: null key",
    "~: tilde key",
    "[]: empty",
    "\tx: tab",
    "- stray item",
    "key: a: b",
    "k: v\n k2: v",
    "k:\n- a\n b",
    "k: v #comment\n  deeper: x",
    "k: |\n x\n  y",
    "%YAML 1.2",
    "k: v\n...",
    "x: &a [1, 2]\ny: *a",
    "x: &a {m: 1}\ny: *a",
    "x: &a {m: 1}\ny:\n  <<: *a",
    "name: duplicate",
    "spec: duplicate",
    "labels: duplicate",
    "\"quoted key\": v",
    "'single': v",
    "k: \"a\\zb\"",
    "k: 'it''s",
    "k: @x",
    "k: `x",
    "k: v\u{0}",
    "\u{feff}k: v",
    "k: !!binary ***",
    "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
     c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
     e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e]",
];

/// What a user must never read: the YAML parser's and the deserializer's own wording.
const LIBRARY_WORDING: &[&str] = &[
    "invalid type",
    "invalid value",
    "invalid length",
    "unknown variant",
    "missing field",
    "expected",
    "while parsing",
    "while scanning",
    "did not find",
    "could not find",
    "found character",
    "found unexpected",
    "found unknown",
    "found undefined",
    "cannot start any token",
    "are not allowed in this context",
    "unknown anchor",
    "recursion limit",
    "untagged enum",
    "data did not match",
    "at line ",
    "column ",
    "struct ",
    "sequence",
    "unit value",
    "borrowed",
    "serde",
    "libyaml",
    "Value::",
    "Tagged",
];

/// What is wrong with a diagnostic about the object `kind "subject"` in `dev/f.yaml`, if
/// anything.
fn fault(d: &Diagnostic, kind: &str) -> Option<&'static str> {
    let Some(origin) = &d.origin else {
        return Some("no file");
    };
    if &*origin.file != "dev/f.yaml" || origin.line == 0 {
        return Some("no file and line");
    }
    let shown = d.to_string();
    if !shown.contains(&format!("{kind} \"subject\": ")) {
        return Some("the object is not named");
    }
    if d.field.is_none() {
        return Some("no field");
    }
    if let Some(word) = LIBRARY_WORDING.iter().find(|w| d.message.contains(*w)) {
        let _ = word;
        return Some("library wording");
    }
    None
}

/// The documents of the sweep for one valid document: truncations, values replaced,
/// lines inserted; each after the line naming the object.
fn variants(doc: &str) -> Vec<String> {
    let lines: Vec<&str> = doc.lines().collect();
    let named = lines.iter().position(|l| l.trim() == "name: subject").unwrap();
    let mut out = Vec::new();
    let join = |lines: &[String]| {
        let mut text = lines.join("\n");
        text.push('\n');
        text
    };
    for at in named + 1..lines.len() {
        let line = lines[at];
        let indent = &line[..line.len() - line.trim_start().len()];
        // Truncated at the line, and in the middle of it.
        let kept: Vec<String> = lines[..at].iter().map(|l| (*l).to_owned()).collect();
        out.push(join(&kept));
        let mut half = kept.clone();
        half.push(line[..line.len() / 2 + indent.len() / 2].to_owned());
        out.push(half.join("\n"));
        // Its value replaced.
        let value_at = if let Some(i) = line.find(": ") {
            Some(i + 2)
        } else if line.trim_start().starts_with("- ") {
            Some(indent.len() + 2)
        } else {
            None
        };
        if let Some(i) = value_at {
            for value in VALUES {
                let mut changed: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
                let continued = value.replace('\n', &format!("\n{indent}  "));
                changed[at] = format!("{}{continued}", &line[..i]);
                out.push(join(&changed));
            }
        }
        // A line inserted before it.
        for inserted in LINES {
            let mut changed: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
            let text = inserted
                .lines()
                .map(|l| format!("{indent}{l}"))
                .collect::<Vec<_>>()
                .join("\n");
            changed.insert(at, text);
            out.push(join(&changed));
        }
    }
    out
}

#[test]
fn every_diagnostic_names_file_object_and_field_in_kalypsos_words() {
    // The reason and the message's shape (numbers left out) → how often, one diagnostic and
    // the document that produced it.
    let mut faults: BTreeMap<(&'static str, String), (usize, String, String)> = BTreeMap::new();
    // Every message's shape, with one diagnostic that has it: printed with
    // KALYPSO_SWEEP_SHOW=1, to read what users read.
    let mut shown: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0usize;
    for (kind, doc) in documents() {
        let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", doc.as_bytes().to_vec())]);
        let mut clean = Diagnostics::new();
        kalypso_core::load::load_tree(&tree, &mut clean);
        assert!(clean.is_empty(), "the valid {kind} is not: {clean}");
        // The variants, and the document with a byte that is not UTF-8 in each line after
        // the name.
        let mut texts: Vec<Vec<u8>> = variants(&doc).into_iter().map(String::into_bytes).collect();
        let named = doc.find("name: subject\n").unwrap() + "name: subject\n".len();
        for (at, _) in doc.match_indices('\n').filter(|(at, _)| *at > named) {
            let mut bytes = doc.clone().into_bytes();
            bytes.insert(at - 1, 0xff);
            texts.push(bytes);
        }
        for bytes in texts {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", bytes)]);
            let mut diagnostics = Diagnostics::new();
            kalypso_core::load::load_tree(&tree, &mut diagnostics);
            for d in diagnostics.iter() {
                checked += 1;
                let shape: String = format!("{}: {}", d.code, d.message)
                    .chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect();
                shown
                    .entry(shape)
                    .or_insert_with(|| format!("{d}\n    in {text:?}"));
                // A second document a marker split off is not the object's.
                if d.code == Code::NotAnObject && text.contains("\n...") {
                    continue;
                }
                if let Some(why) = fault(d, kind) {
                    let shape: String = format!("{}: {}", d.code, d.message)
                        .chars()
                        .filter(|c| !c.is_ascii_digit())
                        .collect();
                    let entry = faults
                        .entry((why, shape))
                        .or_insert((0, d.to_string(), text.clone()));
                    entry.0 += 1;
                }
            }
        }
    }
    // Each document without its apiVersion, and each scheduler kind misspelled: named by the
    // kind as written.
    for (kind, doc) in documents() {
        let api_version = doc.lines().next().unwrap();
        let cases = [
            (
                doc.replacen(&format!("{api_version}\n"), "", 1),
                format!("{kind} \"subject\": apiVersion: "),
            ),
            (
                doc.replacen(&format!("kind: {kind}\n"), &format!("kind: {kind}x\n"), 1),
                format!("{kind}x \"subject\": "),
            ),
        ];
        for (text, named) in cases {
            let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", text.as_bytes().to_vec())]);
            let mut diagnostics = Diagnostics::new();
            kalypso_core::load::load_tree(&tree, &mut diagnostics);
            // A misspelled kind of another API is another API's object, not an error.
            if api_version.ends_with(" v1") && named.contains("x \"") {
                assert!(diagnostics.is_empty(), "{diagnostics}");
                continue;
            }
            assert_eq!(diagnostics.len(), 1, "{diagnostics}");
            let shown = diagnostics.to_string();
            assert!(shown.contains(&named), "{named:?} in {shown}");
            checked += 1;
        }
    }
    // Each document too large to read (the limit lowered for this test's process).
    kalypso_core::limits::install(kalypso_core::limits::Limits {
        yaml_document_size: 60,
        ..kalypso_core::limits::Limits::default()
    });
    for (kind, doc) in documents() {
        let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", doc.as_bytes().to_vec())]);
        let mut diagnostics = Diagnostics::new();
        kalypso_core::load::load_tree(&tree, &mut diagnostics);
        assert_eq!(diagnostics.len(), 1, "{diagnostics}");
        for d in diagnostics.iter() {
            checked += 1;
            if let Some(why) = fault(d, kind) {
                faults
                    .entry((why, d.to_string()))
                    .or_insert((1, d.to_string(), doc.clone()));
            }
        }
    }
    kalypso_core::limits::install(kalypso_core::limits::Limits::default());
    if std::env::var_os("KALYPSO_SWEEP_SHOW").is_some() {
        for example in shown.values() {
            println!("{example}");
        }
    }
    assert!(checked > 1000, "the sweep found only {checked} diagnostics");
    if !faults.is_empty() {
        let mut report = String::new();
        for ((why, _), (count, shown, text)) in &faults {
            report.push_str(&format!(
                "--- {why} ({count} times), e.g.\n{shown}\nin:\n{text}\n"
            ));
        }
        panic!("{} message(s) fall short (of {checked}):\n{report}", faults.len());
    }
}
