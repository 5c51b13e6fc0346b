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

    /// Checks `config` against each of `schemas`: every violation, and every schema that
    /// cannot be used, with the index of the schema it is about (in the order of `schemas`,
    /// each schema's violations in the validator's order). Empty when the config passes.
    pub fn check(&self, config: &ConfigData, schemas: &[&str]) -> Vec<(usize, Problem)> {
        if schemas.is_empty() {
            return Vec::new();
        }
        let instance = config_instance(config);
        let mut problems = Vec::new();
        for (index, text) in schemas.iter().enumerate() {
            match &*self.get(text) {
                Err(e) => problems.push((index, Problem::Invalid(e.clone()))),
                Ok(validator) => problems.extend(
                    validator
                        .iter_errors(&instance)
                        .flat_map(|e| violations(&e))
                        .map(|v| (index, Problem::Violation(v))),
                ),
            }
        }
        problems
    }
}

/// What is wrong with a config for one schema.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Problem {
    /// The config breaks one of the schema's rules.
    Violation(Violation),
    /// The schema cannot be used (it does not parse, is not a JSON Schema, or refers to
    /// something outside itself); every config fails it, as in the original.
    Invalid(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Violation(v) => v.fmt(f),
            Problem::Invalid(reason) => write!(f, "the schema cannot be used: {reason}"),
        }
    }
}

/// One rule of a schema that a config breaks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Violation {
    /// The JSON pointer of the config value (`/REPLICAS`, `/LIMITS/cpu`); for a required key
    /// that is missing, the pointer it would have.
    pub pointer: String,
    /// The rule, in plain words (`must be at most 2, found 3`).
    pub rule: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pointer = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        write!(
            f,
            "config value {}: {}",
            crate::diag::escape(pointer),
            crate::diag::escape(&self.rule)
        )
    }
}

/// `key` as one step of a JSON pointer (`~` and `/` escaped, RFC 6901).
fn pointer_step(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A JSON value as the user wrote it, shortened when long.
fn shown(value: &Json) -> String {
    let text = value.to_string();
    if text.chars().count() <= 60 {
        text
    } else {
        let head: String = text.chars().take(57).collect();
        format!("{head}...")
    }
}

/// What a JSON value is, in words (`a string`, `a mapping`).
fn type_of(value: &Json) -> &'static str {
    match value {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(n) if n.is_f64() => "a number",
        Json::Number(_) => "an integer",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

/// A JSON Schema type name in words.
fn type_name(ty: jsonschema::JsonType) -> &'static str {
    use jsonschema::JsonType as T;
    match ty {
        T::Array => "a list",
        T::Boolean => "a boolean",
        T::Integer => "an integer",
        T::Null => "null",
        T::Number => "a number",
        T::Object => "a mapping",
        T::String => "a string",
    }
}

/// `a, b or c`.
fn one_of_words(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The length of a string value, in characters (what JSON Schema counts).
fn length(value: &Json) -> usize {
    value.as_str().map_or(0, |s| s.chars().count())
}

/// A validator's error as violations in plain words: the validator's own messages name its
/// internals ("the schemas listed in the 'anyOf' keyword"), so each kind is worded here.
fn violations(e: &jsonschema::ValidationError<'_>) -> Vec<Violation> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as K};
    let pointer = e.instance_path().to_string();
    let value = e.instance();
    let found = shown(value);
    let at = |rule: String| {
        vec![Violation {
            pointer: pointer.clone(),
            rule,
        }]
    };
    let each_key = |keys: &[String], rule: &str| -> Vec<Violation> {
        keys.iter()
            .map(|key| Violation {
                pointer: format!("{pointer}/{}", pointer_step(key)),
                rule: rule.to_owned(),
            })
            .collect()
    };
    match e.kind() {
        K::Required { property } => vec![Violation {
            pointer: format!(
                "{pointer}/{}",
                pointer_step(property.as_str().unwrap_or_default())
            ),
            rule: "is required but missing".to_owned(),
        }],
        K::Type { kind } => {
            let expected: Vec<String> = match kind {
                TypeKind::Single(ty) => vec![type_name(*ty).to_owned()],
                TypeKind::Multiple(set) => set.iter().map(|ty| type_name(ty).to_owned()).collect(),
            };
            at(format!(
                "must be {}, found {} ({found})",
                one_of_words(&expected),
                type_of(value)
            ))
        }
        K::Minimum { limit } => at(format!("must be at least {limit}, found {found}")),
        K::Maximum { limit } => at(format!("must be at most {limit}, found {found}")),
        K::ExclusiveMinimum { limit } => at(format!("must be greater than {limit}, found {found}")),
        K::ExclusiveMaximum { limit } => at(format!("must be less than {limit}, found {found}")),
        K::MultipleOf { multiple_of } => at(format!("must be a multiple of {multiple_of}, found {found}")),
        K::MinLength { limit } => at(format!(
            "must be at least {limit} character(s) long, found {} ({found})",
            length(value)
        )),
        K::MaxLength { limit } => at(format!(
            "must be at most {limit} character(s) long, found {} ({found})",
            length(value)
        )),
        K::MinItems { limit } => at(format!(
            "must have at least {limit} item(s), found {}",
            value.as_array().map_or(0, Vec::len)
        )),
        K::MaxItems { limit } => at(format!(
            "must have at most {limit} item(s), found {}",
            value.as_array().map_or(0, Vec::len)
        )),
        K::MinProperties { limit } => at(format!(
            "must have at least {limit} key(s), found {}",
            value.as_object().map_or(0, JsonMap::len)
        )),
        K::MaxProperties { limit } => at(format!(
            "must have at most {limit} key(s), found {}",
            value.as_object().map_or(0, JsonMap::len)
        )),
        K::Enum { options } => {
            let options: Vec<String> = match &**options {
                Json::Array(items) => items.iter().map(shown).collect(),
                other => vec![shown(other)],
            };
            at(format!("must be {}, found {found}", one_of_words(&options)))
        }
        K::Constant { expected_value } => at(format!("must be {}, found {found}", shown(expected_value))),
        K::Pattern { pattern } => at(format!("must match the pattern {pattern:?}, found {found}")),
        K::Format { format } => at(format!("must be a valid {format}, found {found}")),
        K::AdditionalProperties { unexpected } => {
            each_key(unexpected, "is not allowed: the schema lists the keys it accepts")
        }
        K::UnevaluatedProperties { unexpected } => each_key(
            unexpected,
            "is not allowed: no part of the schema accepts this key",
        ),
        K::AdditionalItems { limit } => at(format!(
            "must have at most {limit} item(s), found {}",
            value.as_array().map_or(0, Vec::len)
        )),
        K::UnevaluatedItems { unexpected } => at(format!(
            "has item(s) no part of the schema accepts: {}",
            unexpected.join(", ")
        )),
        K::AnyOf { .. } => at(format!(
            "must match at least one of the schema's alternatives (anyOf), found {found}"
        )),
        K::OneOfNotValid { .. } => at(format!(
            "must match exactly one of the schema's alternatives (oneOf), matches none: {found}"
        )),
        K::OneOfMultipleValid { .. } => at(format!(
            "must match exactly one of the schema's alternatives (oneOf), matches several: {found}"
        )),
        K::Not { .. } => at(format!("must not match the schema under \"not\", found {found}")),
        K::Contains => at("must contain an item the schema's \"contains\" accepts".to_owned()),
        K::UniqueItems => at(format!("must not repeat an item, found {found}")),
        K::FalseSchema => at("is not allowed: the schema for it is `false`".to_owned()),
        K::PropertyNames { error } => {
            let key = error.instance().as_str().unwrap_or_default().to_owned();
            let rules: Vec<String> = violations(error).into_iter().map(|v| v.rule).collect();
            vec![Violation {
                pointer: format!("{pointer}/{}", pointer_step(&key)),
                rule: format!("is not an allowed key name: the name {}", rules.join("; ")),
            }]
        }
        K::ContentEncoding { content_encoding } => {
            at(format!("must be {content_encoding}-encoded, found {found}"))
        }
        K::FromUtf8 { .. } => at("must decode to UTF-8 text".to_owned()),
        K::ContentMediaType { content_media_type } => at(format!(
            "must be a valid {content_media_type} document, found {found}"
        )),
        K::BacktrackLimitExceeded { .. } | K::RegexEngineFailure { .. } => {
            at("cannot be checked: the schema's pattern is too complex to evaluate".to_owned())
        }
        K::Custom { message, .. } => at(message.clone()),
        K::Referencing(error) => at(reference_problem(error)),
    }
}

/// A `$ref` that cannot be followed, in plain words (schemas never reach the network or the
/// file system, so any reference outside the schema itself fails).
fn reference_problem(error: &jsonschema::ReferencingError) -> String {
    use jsonschema::ReferencingError as R;
    match error {
        R::Unretrievable { uri, .. } => format!(
            "the schema refers to {uri:?} ($ref); kalypso reads schemas only from the control plane and does not \
             fetch others"
        ),
        R::PointerToNowhere { pointer } => {
            format!("the schema's $ref {pointer:?} points to nothing in the schema")
        }
        R::NoSuchAnchor { anchor } | R::InvalidAnchor { anchor } => {
            format!("the schema's $ref names the anchor {anchor:?}, which the schema does not have")
        }
        R::UnknownSpecification { specification } => {
            format!("the schema declares $schema {specification:?}, which is not a JSON Schema draft")
        }
        other => format!("the schema has a $ref that cannot be followed ({other})"),
    }
}

/// A schema compile error in plain words.
fn compile_problem(e: &jsonschema::ValidationError<'_>) -> String {
    if let jsonschema::error::ValidationErrorKind::Referencing(error) = e.kind() {
        return reference_problem(error);
    }
    let rules: Vec<String> = violations(e)
        .into_iter()
        .map(|v| {
            let at = if v.pointer.is_empty() {
                "/"
            } else {
                v.pointer.as_str()
            };
            // The meta-schema's `type` is an anyOf of a name and a list of names.
            if at.ends_with("/type") && matches!(e.kind(), jsonschema::error::ValidationErrorKind::AnyOf { .. }) {
                return format!(
                    "{at} must be array, boolean, integer, null, number, object or string (or a list of them), \
                     found {}",
                    shown(e.instance())
                );
            }
            format!("{at} {}", v.rule)
        })
        .collect();
    format!("it is not a valid JSON Schema: {}", rules.join("; "))
}

fn parse(text: &str) -> Result<Json, String> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        // A YAML schema is accepted too (the original accepts only JSON).
        Err(json_err) => {
            serde_yaml_ng::from_str(text).map_err(|_| format!("it is not valid JSON: {json_err}"))
        }
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
        .map_err(|e| compile_problem(&e))
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

    /// Every problem of `pairs` with `schemas`, one per line (`<schema index>: <problem>`).
    fn problems(schemas: &[&str], pairs: &[(&str, &str)]) -> Result<(), String> {
        let found = SchemaCache::new().check(&config(pairs), schemas);
        if found.is_empty() {
            return Ok(());
        }
        Err(found
            .iter()
            .map(|(i, p)| format!("{i}: {p}"))
            .collect::<Vec<_>>()
            .join("\n"))
    }

    #[test]
    fn numeric_strings_validate_as_numbers() {
        let schema = r#"{"type":"object","properties":{"REPLICAS":{"type":"integer","minimum":1}},"required":["REPLICAS","REGION"]}"#;
        assert_eq!(
            problems(&[schema], &[("REPLICAS", "3"), ("REGION", "eu")]),
            Ok(())
        );
        let err = problems(&[schema], &[("REPLICAS", "0")]).unwrap_err();
        assert_eq!(
            err,
            "0: config value /REGION: is required but missing\n\
             0: config value /REPLICAS: must be at least 1, found 0"
        );
    }

    #[test]
    fn every_schema_is_checked_and_each_problem_names_its_schema() {
        let a = r#"{"properties":{"N":{"maximum":2}}}"#;
        let b = r#"{"required":["OWNER"],"properties":{"N":{"enum":[1,2]}}}"#;
        let found = SchemaCache::new().check(&config(&[("N", "3")]), &[a, "{not json", b]);
        let shown: Vec<String> = found.iter().map(|(i, p)| format!("{i}: {p}")).collect();
        assert_eq!(
            shown,
            [
                "0: config value /N: must be at most 2, found 3",
                "1: the schema cannot be used: it is not valid JSON: key must be a string at line 1 column 2",
                "2: config value /OWNER: is required but missing",
                "2: config value /N: must be 1 or 2, found 3",
            ]
        );
    }

    #[test]
    fn violations_are_in_plain_words_with_the_pointer_of_the_value() {
        let schema = r#"{
            "properties": {
                "S": {"type": "string", "minLength": 3},
                "L": {"type": "array", "maxItems": 1, "items": {"type": "integer"}},
                "M": {"type": "object", "additionalProperties": false, "properties": {"cpu": {"type": "string"}}},
                "O": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "P": {"pattern": "^[a-z]+$"}
            },
            "propertyNames": {"maxLength": 2}
        }"#;
        let cache = SchemaCache::new();
        let mut values = BTreeMap::new();
        values.insert("S".to_owned(), Value::from("ab"));
        values.insert("L".to_owned(), kalypso_template::config_value("[1, x]"));
        values.insert(
            "M".to_owned(),
            kalypso_template::config_value("{cpu: 1, mem/x: 2}"),
        );
        values.insert("O".to_owned(), Value::Bool(true));
        values.insert("P".to_owned(), Value::from("ABC"));
        values.insert("LONGKEY".to_owned(), Value::from("x"));
        let config = ConfigData {
            values,
            provenance: BTreeMap::new(),
        };
        let mut shown: Vec<String> = cache
            .check(&config, &[schema])
            .iter()
            .map(|(_, p)| p.to_string())
            .collect();
        shown.sort();
        assert_eq!(
            shown,
            [
                "config value /L/1: must be an integer, found a string (\"x\")",
                "config value /L: must have at most 1 item(s), found 2",
                "config value /LONGKEY: is not an allowed key name: the name must be at most 2 character(s) long, found 7 (\"LONGKEY\")",
                "config value /M/cpu: must be a string, found an integer (1)",
                "config value /M/mem~1x: is not allowed: the schema lists the keys it accepts",
                "config value /O: must match exactly one of the schema's alternatives (oneOf), matches none: true",
                "config value /P: must match the pattern \"^[a-z]+$\", found \"ABC\"",
                "config value /S: must be at least 3 character(s) long, found 2 (\"ab\")",
            ]
        );
        for line in &shown {
            assert!(!line.contains("keyword") && !line.contains("feature"), "{line}");
        }
    }

    #[test]
    fn a_reference_outside_the_schema_is_refused_in_plain_words() {
        let err = problems(&[r#"{"$ref":"https://example.com/s.json"}"#], &[]).unwrap_err();
        assert!(
            err.contains("refers to \"https://example.com/s.json\"") && err.contains("does not fetch"),
            "{err}"
        );
        assert!(!err.contains("feature"), "{err}");
        let err = problems(&[r#"{"type":"strin"}"#], &[]).unwrap_err();
        assert!(
            err.contains(
                "it is not a valid JSON Schema: /type must be array, boolean, integer, null, number, object or \
                 string (or a list of them), found \"strin\""
            ),
            "{err}"
        );
    }

    fn check(schema: &str, pairs: &[(&str, &str)]) -> Result<(), String> {
        problems(&[schema], pairs)
    }

    #[test]
    fn without_schema_draft4_booleans_and_draft6_numbers_both_work() {
        // gojsonschema's hybrid draft (schema.go, case Hybrid).
        let boolean = r#"{"properties":{"N":{"type":"integer","minimum":5,"exclusiveMinimum":true,"maximum":9,"exclusiveMaximum":false}}}"#;
        assert!(check(boolean, &[("N", "5")]).unwrap_err().contains("/N: "));
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
                .contains("/B: is required")
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
                .contains("/E: ")
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
    fn invalid_schemas_fail_every_config() {
        let err = problems(&["{not json"], &[]).unwrap_err();
        assert!(
            err.contains("the schema cannot be used: it is not valid JSON"),
            "{err}"
        );
    }
}
