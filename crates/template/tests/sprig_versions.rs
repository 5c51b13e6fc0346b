//! Sprig v2.22.0 (the original scheduler's, the default) against v3.2.3 (selectable), on the
//! vectors of `sprig_v2_vectors.jsonl`: one line per template, with what v2.22.0 and v3.2.3
//! produce. The v2 expectations are derived from Sprig v2.22.0's source (`functions.go`,
//! `numeric.go` `toInt64`, `strings.go` `strval`/`trunc`), the v3 ones from v3.2.3's; each
//! differing function has a vector. `.ConfigData.port` is the string `"08080"`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed unwrap is a failed test.

use kalypso_gotmpl::Map;
use kalypso_template::{Engine, SprigVersion, TemplateData};

#[derive(Debug)]
enum Expected {
    Output(String),
    Error(String),
}

fn expected(v: &serde_json::Value) -> Expected {
    if let Some(o) = v.get("output") {
        Expected::Output(o.as_str().expect("output text").to_owned())
    } else {
        Expected::Error(v["error"].as_str().expect("error text").to_owned())
    }
}

fn render(engine: &Engine, template: &str) -> Result<String, String> {
    let data = TemplateData {
        config_data: Some(Map::string_interface([(
            "port",
            kalypso_gotmpl::Value::string("08080"),
        )])),
        ..TemplateData::default()
    };
    let compiled = engine.compile("t", template).map_err(|e| e.to_string())?;
    let out = engine
        .render(&compiled, &data.to_value())
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out).expect("UTF-8 output"))
}

fn run(version: SprigVersion) -> (usize, Vec<String>) {
    let text = include_str!("sprig_v2_vectors.jsonl");
    let engine = Engine::with_sprig(version);
    let mut failures = Vec::new();
    let mut count = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("vector JSON");
        let name = case["name"].as_str().expect("name");
        let template = case["template"].as_str().expect("template");
        let want = expected(&case[version.as_str()]);
        let got = render(&engine, template);
        count += 1;
        let ok = match (&want, &got) {
            (Expected::Output(w), Ok(g)) => w == g,
            (Expected::Error(w), Err(g)) => g.contains(w.as_str()),
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: {template}\n  want {want:?}\n  got  {got:?}"));
        }
    }
    (count, failures)
}

#[test]
fn sprig_v2_vectors_in_v2_mode() {
    let (count, failures) = run(SprigVersion::V2);
    assert!(count > 90, "only {count} vectors");
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn sprig_v2_vectors_in_v3_mode() {
    let (count, failures) = run(SprigVersion::V3);
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_default_engine_is_sprig_v2() {
    assert_eq!(Engine::new().sprig(), SprigVersion::V2);
    assert_eq!(Engine::default().sprig(), SprigVersion::V2);
    assert!(Engine::new().funcs().get("seq").is_none());
    assert!(Engine::with_sprig(SprigVersion::V3).funcs().get("seq").is_some());
}

#[test]
fn every_v3_only_function_has_a_vector() {
    let text = include_str!("sprig_v2_vectors.jsonl");
    let v3 = Engine::with_sprig(SprigVersion::V3);
    for name in kalypso_sprig::V3_ONLY {
        if v3.funcs().get(name).is_none() {
            continue; // excluded (random, keys, environment): absent in both modes
        }
        assert!(
            text.contains(&format!("\"{name} is v3-only\"")),
            "{name} has no vector"
        );
    }
}
