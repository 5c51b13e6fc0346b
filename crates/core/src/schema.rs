//! Config validation against JSON schemas: ConfigSchema objects matched by label, and the
//! schemas a Workload or DeploymentTarget declares.
//!
//! The original validates through Helm's `ValidateAgainstSingleSchema`: top-level config
//! strings that parse as integers or floats are validated as numbers, nested values as the
//! YAML they were parsed from, and every violation becomes part of the assignment's error
//! (the original writes one `- <message>` line each; here they share one line, separated by
//! `; `, each with the config key it is about). Schemas never reach the network or the file
//! system.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kalypso_gotmpl::Value;
use serde_json::{Map as JsonMap, Number, Value as Json};

use crate::config::ConfigData;

/// Compiled schemas, shared by all assignments of a run.
#[derive(Default)]
pub struct SchemaCache {
    compiled: Mutex<HashMap<String, Arc<Result<jsonschema::Validator, String>>>>,
}

impl std::fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaCache").finish_non_exhaustive()
    }
}

impl SchemaCache {
    /// An empty cache.
    pub fn new() -> SchemaCache {
        SchemaCache::default()
    }

    fn get(&self, text: &str) -> Arc<Result<jsonschema::Validator, String>> {
        if let Some(v) = self
            .compiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(text)
        {
            return v.clone();
        }
        let compiled = Arc::new(compile(text));
        self.compiled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(text.to_owned(), compiled.clone());
        compiled
    }

    /// Validates `config` against every schema; returns every violation of every schema,
    /// and every schema that cannot be compiled, as one line
    /// (`config data validation failed: REPLICAS: 0 is less than the minimum of 1; ...`).
    pub fn validate(&self, config: &ConfigData, schemas: &[&str]) -> Result<(), String> {
        if schemas.is_empty() {
            return Ok(());
        }
        let instance = config_instance(config);
        let mut failures: Vec<String> = Vec::new();
        for text in schemas {
            match &*self.get(text) {
                Err(e) => failures.push(format!("invalid schema ({e})")),
                Ok(validator) => failures.extend(validator.iter_errors(&instance).map(|e| {
                    let path = e.instance_path().to_string();
                    let field = path.trim_start_matches('/').replace('/', ".");
                    if field.is_empty() {
                        e.to_string()
                    } else {
                        format!("{field}: {e}")
                    }
                })),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            let joined = failures.join("; ").replace(['\n', '\r'], " ");
            Err(format!("config data validation failed: {joined}"))
        }
    }
}

fn compile(text: &str) -> Result<jsonschema::Validator, String> {
    let schema: Json = match serde_json::from_str(text) {
        Ok(v) => v,
        // A YAML schema is accepted too (the original accepts only JSON).
        Err(json_err) => serde_yaml_ng::from_str(text).map_err(|_| format!("not valid JSON: {json_err}"))?,
    };
    jsonschema::validator_for(&schema).map_err(|e| e.to_string())
}

/// The config as the original hands it to the validator: top-level strings that Go's
/// `strconv.Atoi` or `strconv.ParseFloat` accept become numbers.
fn config_instance(config: &ConfigData) -> Json {
    let mut object = JsonMap::new();
    for (key, value) in &config.values {
        let json = match value {
            Value::String(s) => s.as_str().and_then(go_number).unwrap_or_else(|| to_json(value)),
            other => to_json(other),
        };
        object.insert(key.clone(), json);
    }
    Json::Object(object)
}

/// A string as Go's `strconv.Atoi` (then `ParseFloat`) reads it, if it is a finite number.
fn go_number(s: &str) -> Option<Json> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && let Ok(i) = s.parse::<i64>()
    {
        return Some(Json::Number(i.into()));
    }
    let looks_numeric = s
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
        && s.bytes().any(|b| b.is_ascii_digit());
    if looks_numeric && let Ok(f) = s.parse::<f64>() {
        return Number::from_f64(f).map(Json::Number);
    }
    None
}

/// A config value as JSON (YAML maps with non-string keys get their keys printed).
fn to_json(value: &Value) -> Json {
    match value {
        Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i, _) => Json::Number((*i).into()),
        Value::Uint(u, _) => Json::Number((*u).into()),
        Value::Float(f, _) => Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Complex(..) | Value::Object(_) => Json::Null,
        Value::String(s) => Json::String(s.to_string()),
        Value::List(l) => Json::Array(l.items().iter().map(to_json).collect()),
        Value::Map(m) => Json::Object(
            m.snapshot()
                .iter()
                .map(|(k, v)| {
                    let key = match k.to_value() {
                        Value::String(s) => s.to_string(),
                        Value::Int(i, _) => i.to_string(),
                        Value::Uint(u, _) => u.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Float(f, _) => f.to_string(),
                        _ => "null".to_owned(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ConfigData {
        ConfigData {
            values: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Value::from(*v)))
                .collect(),
            provenance: BTreeMap::new(),
        }
    }

    #[test]
    fn numeric_strings_validate_as_numbers() {
        let cache = SchemaCache::new();
        let schema = r#"{"type":"object","properties":{"REPLICAS":{"type":"integer","minimum":1}},"required":["REPLICAS","REGION"]}"#;
        assert_eq!(
            cache.validate(&config(&[("REPLICAS", "3"), ("REGION", "eu")]), &[schema]),
            Ok(())
        );
        let err = cache
            .validate(&config(&[("REPLICAS", "0")]), &[schema])
            .unwrap_err();
        assert!(err.starts_with("config data validation failed: "), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");
        assert!(err.contains("\"REGION\" is a required property"), "{err}");
        assert!(err.contains("; "), "{err}");
        assert!(err.contains("REPLICAS: 0 is less than the minimum of 1"), "{err}");
    }

    #[test]
    fn go_number_parsing() {
        assert_eq!(go_number("007"), Some(Json::Number(7.into())));
        assert_eq!(go_number("-3"), Some(Json::Number((-3).into())));
        assert!(matches!(go_number("1.5e3"), Some(Json::Number(_))));
        assert_eq!(go_number("1_000"), None);
        assert_eq!(go_number(" 5"), None);
        assert_eq!(go_number("abc"), None);
    }

    #[test]
    fn invalid_schemas_fail_the_assignment() {
        let cache = SchemaCache::new();
        let err = cache.validate(&config(&[]), &["{not json"]).unwrap_err();
        assert!(err.contains("invalid schema"), "{err}");
    }
}
