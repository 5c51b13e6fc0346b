//! Config validation against JSON schemas: ConfigSchema objects matched by label, and the
//! schemas a Workload or DeploymentTarget declares.
//!
//! The original validates with gojsonschema v1.2.0 (`scheduler/config_validator.go`,
//! `validateAgainstSingleSchema`, a copy of Helm's): top-level config strings that parse as
//! integers or floats are validated as numbers, nested values as the YAML they were parsed
//! from, and every violation becomes part of the assignment's error (the original writes one
//! `- <message>` line each; here they share one line, separated by `; `, each with the config
//! key it is about). Schemas never reach the network or the file system.
//!
//! Drafts, as gojsonschema chooses them (`draft.go` `parseSchemaURL`, `schema.go`):
//! - no `$schema` (or one gojsonschema does not know): its "hybrid" draft, the keywords of
//!   draft-4, 6 and 7 together. `exclusiveMinimum`/`exclusiveMaximum` may be draft-4 booleans
//!   (modifying `minimum`/`maximum`; a boolean without them is an error) or draft-6 numbers.
//!   kalypso rewrites the booleans to the numeric form and validates as draft 7;
//! - `$schema` of draft-04, 06 or 07: that draft;
//! - `$schema` of draft 2019-09 or 2020-12: gojsonschema does not know them and validates as
//!   hybrid; kalypso honours them ([`schema_warning`] says so where the schema is declared).
//!
//! `format` is checked in every draft, as gojsonschema does (with the `jsonschema` crate's
//! format checkers, which may differ from gojsonschema's on unusual values).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use jsonschema::Draft;
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

fn parse(text: &str) -> Result<Json, String> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        // A YAML schema is accepted too (the original accepts only JSON).
        Err(json_err) => serde_yaml_ng::from_str(text).map_err(|_| format!("not valid JSON: {json_err}")),
    }
}

/// The draft a schema is validated with (see the module documentation).
fn draft_of(schema: &Json) -> Option<Draft> {
    match Draft::default().detect(schema) {
        d @ (Draft::Draft4 | Draft::Draft6 | Draft::Draft7 | Draft::Draft201909 | Draft::Draft202012)
            if declared_schema(schema).is_some() =>
        {
            Some(d)
        }
        _ => None, // hybrid
    }
}

fn declared_schema(schema: &Json) -> Option<&str> {
    schema.as_object()?.get("$schema")?.as_str()
}

fn compile(text: &str) -> Result<jsonschema::Validator, String> {
    let mut schema = parse(text)?;
    let draft = match draft_of(&schema) {
        Some(draft) => draft,
        None => {
            if let Some(object) = schema.as_object_mut() {
                // gojsonschema ignores a `$schema` it does not know.
                object.remove("$schema");
            }
            hybrid_to_draft7(&mut schema)?;
            Draft::Draft7
        }
    };
    jsonschema::options()
        .with_draft(draft)
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|e| e.to_string())
}

/// gojsonschema's hybrid draft as draft 7: a boolean `exclusiveMinimum: true` turns
/// `minimum` exclusive (`exclusiveMinimum: <minimum>`), `false` is dropped, and a boolean
/// without its `minimum` is gojsonschema's error; the same for the maximum.
fn hybrid_to_draft7(schema: &mut Json) -> Result<(), String> {
    match schema {
        Json::Object(object) => {
            for (exclusive, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
                if let Some(Json::Bool(on)) = object.get(exclusive).cloned() {
                    let Some(limit) = object.get(bound).cloned() else {
                        return Err(format!("{exclusive} cannot be used without {bound}"));
                    };
                    object.remove(exclusive);
                    if on {
                        object.remove(bound);
                        object.insert(exclusive.to_owned(), limit);
                    }
                }
            }
            for (key, child) in object.iter_mut() {
                match key.as_str() {
                    // Data, not schemas.
                    "enum" | "const" | "default" | "examples" => {}
                    // Maps of names to schemas.
                    "properties" | "patternProperties" | "definitions" | "$defs" | "dependencies" => {
                        if let Json::Object(children) = child {
                            for child in children.values_mut() {
                                hybrid_to_draft7(child)?;
                            }
                        }
                    }
                    _ => hybrid_to_draft7(child)?,
                }
            }
            Ok(())
        }
        Json::Array(items) => items.iter_mut().try_for_each(hybrid_to_draft7),
        _ => Ok(()),
    }
}

/// A warning for a schema the original would validate differently: one declaring draft
/// 2019-09 or 2020-12, which gojsonschema does not know (it validates it with the keywords of
/// drafts 4 to 7, ignoring newer ones such as `dependentRequired` or `unevaluatedProperties`),
/// while kalypso honours the declared draft. `None` for every other schema (also for one that
/// does not parse: that is reported when it is used).
pub fn schema_warning(text: &str) -> Option<String> {
    let schema = parse(text).ok()?;
    let uri = declared_schema(&schema)?;
    matches!(draft_of(&schema), Some(Draft::Draft201909 | Draft::Draft202012)).then(|| {
        format!(
            "the schema declares $schema {uri}; kalypso validates it as that draft, but the original \
             scheduler (gojsonschema v1.2.0) does not know it and validates it with draft-4/6/7 keywords only, \
             ignoring newer ones"
        )
    })
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

    fn check(schema: &str, pairs: &[(&str, &str)]) -> Result<(), String> {
        SchemaCache::new().validate(&config(pairs), &[schema])
    }

    #[test]
    fn without_schema_draft4_booleans_and_draft6_numbers_both_work() {
        // gojsonschema's hybrid draft (schema.go, case Hybrid).
        let boolean = r#"{"properties":{"N":{"type":"integer","minimum":5,"exclusiveMinimum":true,"maximum":9,"exclusiveMaximum":false}}}"#;
        assert!(check(boolean, &[("N", "5")]).unwrap_err().contains("N: "));
        assert_eq!(check(boolean, &[("N", "6")]), Ok(()));
        assert_eq!(check(boolean, &[("N", "9")]), Ok(()));
        assert!(check(boolean, &[("N", "10")]).is_err());
        let numeric = r#"{"properties":{"N":{"exclusiveMinimum":5,"exclusiveMaximum":9}}}"#;
        assert!(check(numeric, &[("N", "5")]).is_err());
        assert_eq!(check(numeric, &[("N", "6")]), Ok(()));
        assert!(check(numeric, &[("N", "9")]).is_err());
        // Both forms in one schema, and draft-7's if/then.
        let mixed = r#"{"properties":{"N":{"minimum":5,"exclusiveMinimum":true},"M":{"exclusiveMaximum":3}},"if":{"required":["A"]},"then":{"required":["B"]}}"#;
        assert_eq!(check(mixed, &[("N", "6"), ("M", "2")]), Ok(()));
        assert!(check(mixed, &[("N", "6"), ("M", "3")]).is_err());
        assert!(
            check(mixed, &[("N", "6"), ("A", "x")])
                .unwrap_err()
                .contains("\"B\"")
        );
        // A boolean without its bound is gojsonschema's error.
        let err = check(r#"{"exclusiveMinimum":true}"#, &[]).unwrap_err();
        assert!(
            err.contains("exclusiveMinimum cannot be used without minimum"),
            "{err}"
        );
        // Values under enum/const are data, not rewritten.
        let data = r#"{"properties":{"O":{"const":{"exclusiveMinimum":true}}}}"#;
        assert_eq!(check(data, &[]), Ok(()));
        // A $schema gojsonschema does not know is ignored: hybrid.
        let unknown = r#"{"$schema":"https://example.com/my-schema","properties":{"N":{"minimum":5,"exclusiveMinimum":true}}}"#;
        assert!(check(unknown, &[("N", "5")]).is_err());
        assert_eq!(check(unknown, &[("N", "6")]), Ok(()));
    }

    #[test]
    fn format_is_checked_as_gojsonschema_does() {
        let schema =
            r#"{"properties":{"E":{"format":"email"},"H":{"format":"ipv4"},"D":{"format":"date-time"}}}"#;
        assert_eq!(
            check(
                schema,
                &[
                    ("E", "ops@example.com"),
                    ("H", "10.0.0.1"),
                    ("D", "2024-01-02T03:04:05Z")
                ]
            ),
            Ok(())
        );
        assert!(
            check(schema, &[("E", "not an address")])
                .unwrap_err()
                .contains("E: ")
        );
        assert!(check(schema, &[("H", "999.1.1.1")]).is_err());
        assert!(check(schema, &[("D", "yesterday")]).is_err());
        // In declared drafts too.
        let d7 =
            r#"{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"H":{"format":"ipv4"}}}"#;
        assert!(check(d7, &[("H", "999.1.1.1")]).is_err());
    }

    #[test]
    fn a_declared_draft_is_honoured() {
        let d4 = r#"{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"N":{"minimum":5,"exclusiveMinimum":true}}}"#;
        assert!(check(d4, &[("N", "5")]).is_err());
        assert_eq!(check(d4, &[("N", "6")]), Ok(()));
        let d6 = r#"{"$schema":"http://json-schema.org/draft-06/schema#","properties":{"N":{"exclusiveMinimum":5}},"propertyNames":{"pattern":"^[A-Z]+$"}}"#;
        assert!(check(d6, &[("N", "5")]).is_err());
        assert!(check(d6, &[("lower", "x")]).is_err());
        assert_eq!(check(d6, &[("N", "6")]), Ok(()));
        let d7 = r#"{"$schema":"http://json-schema.org/draft-07/schema#","if":{"required":["A"]},"then":{"required":["B"]}}"#;
        assert!(check(d7, &[("A", "x")]).is_err());
        assert_eq!(check(d7, &[("A", "x"), ("B", "y")]), Ok(()));
        // Draft-7 has no boolean exclusiveMinimum (gojsonschema: "invalid type").
        let d7_boolean = r#"{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"N":{"minimum":5,"exclusiveMinimum":true}}}"#;
        assert!(check(d7_boolean, &[("N", "6")]).is_err());
        // Newer drafts: honoured (gojsonschema would ignore dependentRequired), with a warning.
        let d2019 =
            r#"{"$schema":"https://json-schema.org/draft/2019-09/schema","dependentRequired":{"A":["B"]}}"#;
        assert!(check(d2019, &[("A", "x")]).is_err());
        assert_eq!(check(d2019, &[("A", "x"), ("B", "y")]), Ok(()));
        assert!(schema_warning(d2019).unwrap().contains("2019-09"));
        let d2020 = r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"N":{"type":"integer"}}}"#;
        assert!(check(d2020, &[("N", "x")]).is_err());
        assert!(schema_warning(d2020).unwrap().contains("gojsonschema"));
        for quiet in [d4, d6, d7, r#"{"type":"object"}"#, "not json {"] {
            assert_eq!(schema_warning(quiet), None, "{quiet}");
        }
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
