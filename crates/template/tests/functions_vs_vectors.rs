//! The Kalypso functions and data against the Go conformance vectors, without the template
//! engine: a small evaluator runs the vectors (nested ones when a single pass suffices) whose actions are all of the forms `.Path`,
//! `FUNC .Path` and `FUNC .Path | indent N` / `| nindent N`, calling the functions through the
//! engine's function map. The full-stack check is the workspace's conformance test.

use std::collections::BTreeMap;

use kalypso_gotmpl::{Map, MapKey, Value};
use kalypso_template::{Engine, TemplateData, config_value};
use kalypso_testkit::go_json;

fn cases() -> Vec<serde_json::Value> {
    let path = kalypso_testkit::data_dir().join("gotemplate/cases.jsonl");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("case JSON"))
        .collect()
}

fn kalypso_value(v: &serde_json::Value) -> Option<Value> {
    let mut data = TemplateData {
        config_data: Some(Map::string_interface::<_, &str>([])),
        ..TemplateData::default()
    };
    let Some(fields) = v.as_object() else {
        return Some(data.to_value());
    };
    for (key, value) in fields {
        let s = || kalypso_gotmpl::Str::from(value.as_str().unwrap_or_default());
        let m = || -> Option<BTreeMap<String, String>> {
            value.as_object().map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
        };
        match key.as_str() {
            "DeploymentTargetName" => data.deployment_target_name = s(),
            "Namespace" => data.namespace = s(),
            "Environment" => data.environment = s(),
            "Workspace" => data.workspace = s(),
            "Workload" => data.workload = s(),
            "ClusterType" => data.cluster_type = s(),
            "Labels" => data.labels = m().as_ref().map(kalypso_template::string_map),
            "Manifests" => data.manifests = m().as_ref().map(kalypso_template::string_map),
            "ConfigData" => {
                let raw = m().unwrap_or_default();
                data.config_data = Some(Map::string_interface(
                    raw.iter().map(|(k, v)| (k.as_str(), config_value(v))),
                ));
            }
            _ => return None,
        }
    }
    Some(data.to_value())
}

/// `.A.b` on the data; `None` for a missing key (which the evaluator does not handle).
fn lookup(dot: &Value, path: &str) -> Option<Value> {
    let mut v = dot.clone();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        v = match &v {
            Value::Object(o) => o.field(part)?,
            Value::Map(m) => m.get(&MapKey::String(part.into()))?,
            _ => return None,
        };
    }
    Some(v)
}

fn indent(s: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    format!("{pad}{}", s.replace('\n', &format!("\n{pad}")))
}

/// Evaluates one action, or `None` if it is outside the supported forms.
fn action(engine: &Engine, dot: &Value, text: &str) -> Option<String> {
    let mut stages = text.split('|').map(str::trim);
    let first: Vec<&str> = stages.next()?.split_whitespace().collect();
    let mut out = match first.as_slice() {
        [path] if path.starts_with('.') => match lookup(dot, path)? {
            Value::String(s) => s.to_string(),
            _ => return None,
        },
        [func, path] if path.starts_with('.') => {
            let f = engine.funcs().get(func)?;
            match f.call(&[lookup(dot, path)?]).ok()? {
                Value::String(s) => s.to_string(),
                _ => return None,
            }
        }
        _ => return None,
    };
    for stage in stages {
        let words: Vec<&str> = stage.split_whitespace().collect();
        out = match words.as_slice() {
            ["indent", n] => indent(&out, n.parse().ok()?),
            ["nindent", n] => format!("\n{}", indent(&out, n.parse().ok()?)),
            _ => return None,
        };
    }
    Some(out)
}

fn render(engine: &Engine, dot: &Value, template: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}")? + start;
        let inner = &rest[start + 2..end];
        if inner.starts_with('-') || inner.ends_with('-') {
            return None;
        }
        out.push_str(&action(engine, dot, inner.trim())?);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    Some(out)
}

#[test]
fn simple_vectors_render_like_go() {
    let engine = Engine::with_sprig(kalypso_template::SprigVersion::V3);
    let mut checked = 0;
    let mut failures = Vec::new();
    for case in cases() {
        let name = case["name"].as_str().unwrap_or_default();
        let Some(want) = case["expected"]["output"].as_str() else {
            continue;
        };
        let dot = match case["data_kind"].as_str() {
            Some("kalypso") => match kalypso_value(&case["data"]) {
                Some(v) => v,
                None => continue,
            },
            _ => go_json(&case["data"]),
        };
        let template = case["template"].as_str().unwrap_or_default();
        let Some(got) = render(&engine, &dot, template) else {
            if std::env::var_os("SHOW_CASES").is_some() {
                eprintln!("skipped {name}");
            }
            continue;
        };
        if case["nested"].as_bool() == Some(true) && got.contains("{{") {
            continue;
        }
        checked += 1;
        if std::env::var_os("SHOW_CASES").is_some() {
            eprintln!("checked {name}");
        }
        if got != want {
            failures.push(format!("{name}\n  want: {want:?}\n  got:  {got:?}"));
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    println!(
        "functions: {} passed, {} failed",
        checked - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} vectors differ",
        failures.len()
    );
    if checked == 0 {
        eprintln!("no conformance vectors found; shared/ is not beside the checkout");
    }
}
