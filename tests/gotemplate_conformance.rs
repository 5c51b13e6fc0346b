//! Go template conformance: every vector of `tests/data/gotemplate/cases.jsonl`
//! (rendered by Go 1.25 `text/template` + Sprig v3 + the original scheduler's functions) must
//! render to identical bytes, or fail with an error of the same kind.
//!
//! `GOTMPL_CASES` names another case file (same format); `GOTMPL_FILTER` runs only the cases
//! whose name contains the given text. The run prints `gotemplate: N passed, M failed` and
//! then fails if any case failed, showing what each failing case produced.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use kalypso_gotmpl::{Map, Str, Value};
use kalypso_template::{Engine, Error, TemplateData, config_value};
use kalypso_testkit::go_json;
use serde::Deserialize;

const DEFAULT_CASES: &str = "tests/data/gotemplate/cases.jsonl";

#[derive(Deserialize)]
struct Case {
    name: String,
    template: String,
    data_kind: String,
    data: serde_json::Value,
    #[serde(default)]
    nested: bool,
    expected: Expected,
}

#[derive(Deserialize)]
struct Expected {
    output: Option<String>,
    output_base64: Option<String>,
    error: Option<String>,
}

/// What running a case gave: the output bytes, or an error kind and message.
#[derive(Debug, PartialEq)]
enum Outcome {
    Output(Vec<u8>),
    Error { kind: String, message: String },
}

fn cases_path() -> PathBuf {
    match std::env::var_os("GOTMPL_CASES") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(DEFAULT_CASES),
    }
}

/// The `kalypso` data kind: the original's `scheduler.dataType`, with ConfigData given as
/// ConfigMap data strings and converted as the scheduler converts them.
fn kalypso_value(v: &serde_json::Value) -> Result<Value, String> {
    let mut data = TemplateData {
        config_data: Some(Map::string_interface::<_, &str>([])),
        ..TemplateData::default()
    };
    let fields = match v {
        serde_json::Value::Null => return Ok(data.to_value()),
        serde_json::Value::Object(fields) => fields,
        other => {
            return Err(format!(
                "json: cannot unmarshal {other} into Go value of type Input"
            ));
        }
    };
    for (key, value) in fields {
        let string = || match value {
            serde_json::Value::String(s) => Ok(Str::from(s.as_str())),
            serde_json::Value::Null => Ok(Str::empty()),
            _ => Err(format!(
                "json: cannot unmarshal into Go struct field Input.{key} of type string"
            )),
        };
        let string_map = || -> Result<Option<BTreeMap<String, String>>, String> {
            match value {
                serde_json::Value::Null => Ok(None),
                serde_json::Value::Object(m) => m
                    .iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
                        _ => Err(format!(
                            "json: cannot unmarshal into Go struct field Input.{key} of type string"
                        )),
                    })
                    .collect::<Result<_, _>>()
                    .map(Some),
                _ => Err(format!("json: cannot unmarshal into Go struct field Input.{key}")),
            }
        };
        match key.as_str() {
            "DeploymentTargetName" => data.deployment_target_name = string()?,
            "Namespace" => data.namespace = string()?,
            "Environment" => data.environment = string()?,
            "Workspace" => data.workspace = string()?,
            "Workload" => data.workload = string()?,
            "ClusterType" => data.cluster_type = string()?,
            "Labels" => data.labels = string_map()?.as_ref().map(kalypso_template::string_map),
            "Manifests" => data.manifests = string_map()?.as_ref().map(kalypso_template::string_map),
            "ConfigData" => {
                let raw = string_map()?.unwrap_or_default();
                data.config_data = Some(Map::string_interface(
                    raw.iter().map(|(k, v)| (k.as_str(), config_value(v))),
                ));
            }
            other => return Err(format!("json: unknown field \"{other}\"")),
        }
    }
    Ok(data.to_value())
}

fn error_outcome(err: &Error) -> Outcome {
    let kind = match err {
        Error::Parse(_) => "parse",
        Error::Exec(_) | Error::Limit(_) => "exec",
        Error::TooManyPasses => "depth",
        Error::ChangesSharedData => "shared",
    };
    Outcome::Error {
        kind: kind.to_owned(),
        message: err.to_string(),
    }
}

fn run(engine: &Engine, case: &Case) -> Outcome {
    let data = match case.data_kind.as_str() {
        "json" => go_json(&case.data),
        "kalypso" => match kalypso_value(&case.data) {
            Ok(v) => v,
            Err(message) => {
                return Outcome::Error {
                    kind: "data".to_owned(),
                    message,
                };
            }
        },
        other => panic!("{}: unknown data kind {other}", case.name),
    };
    let compiled = match engine.compile("template", &case.template) {
        Ok(c) => c,
        Err(err) => return error_outcome(&err),
    };
    let rendered = if case.nested {
        engine.render(&compiled, &data)
    } else {
        engine.render_once(&compiled, &data)
    };
    let outcome = match rendered {
        Ok(bytes) => Outcome::Output(bytes),
        Err(err) => error_outcome(&err),
    };
    // The scheduler renders data whose maps are frozen and shared by many assignments when
    // the template cannot change them: that must give exactly the same result.
    if case.nested {
        let shared = match engine.render_shared(&compiled, &data.frozen_copy()) {
            Err(Error::ChangesSharedData) => return outcome,
            Ok(bytes) => Outcome::Output(bytes),
            Err(err) => error_outcome(&err),
        };
        if show(&shared) != show(&outcome) {
            return Outcome::Error {
                kind: "shared".to_owned(),
                message: format!(
                    "{} with shared data, {} with a copy",
                    show(&shared),
                    show(&outcome)
                ),
            };
        }
    }
    outcome
}

fn expected(case: &Case) -> Outcome {
    let e = &case.expected;
    if let Some(out) = &e.output {
        Outcome::Output(out.as_bytes().to_vec())
    } else if let Some(b64) = &e.output_base64 {
        Outcome::Output(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("valid base64"),
        )
    } else if let Some(err) = &e.error {
        let (kind, message) = err.split_once(": ").unwrap_or((err.as_str(), ""));
        Outcome::Error {
            kind: kind.to_owned(),
            message: message.to_owned(),
        }
    } else {
        panic!("{}: no expected result", case.name)
    }
}

fn passes(got: &Outcome, want: &Outcome) -> bool {
    match (got, want) {
        (Outcome::Output(a), Outcome::Output(b)) => a == b,
        (Outcome::Error { kind: a, .. }, Outcome::Error { kind: b, .. }) => a == b,
        _ => false,
    }
}

fn show(o: &Outcome) -> String {
    match o {
        Outcome::Output(bytes) => format!("output {:?}", String::from_utf8_lossy(bytes)),
        Outcome::Error { kind, message } => format!("{kind} error: {message}"),
    }
}

#[test]
fn gotemplate_conformance() {
    let path = cases_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let filter = std::env::var("GOTMPL_FILTER").unwrap_or_default();
    let engine = Engine::with_sprig(kalypso_template::SprigVersion::V3);
    let mut passed = 0;
    let mut failures = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let case: Case =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), n + 1));
        if !case.name.contains(&filter) {
            continue;
        }
        let want = expected(&case);
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&engine, &case)))
            .unwrap_or_else(|_| Outcome::Error {
                kind: "panic".to_owned(),
                message: String::new(),
            });
        if passes(&got, &want) {
            passed += 1;
        } else {
            failures.push(format!(
                "{}\n  template: {:?}\n  want: {}\n  got:  {}",
                case.name,
                case.template,
                show(&want),
                show(&got)
            ));
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    println!("gotemplate: {passed} passed, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "gotemplate: {passed} passed, {} failed",
        failures.len()
    );
}
