//! JSON test data as the Go program that produced the conformance vectors decodes it
//! (`encoding/json` into `interface{}`), so that the engine's tests, the template crate's
//! tests and the workspace's conformance test feed the engine the same values.

use kalypso_gotmpl::{List, Map, Value};

/// `v` as a Go value: objects are `map[string]interface {}`, arrays `[]interface {}`,
/// integers that fit are `int`, other numbers `float64`.
pub fn go_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) if !n.to_string().contains(['.', 'e', 'E']) => Value::int(i),
            _ => Value::float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::string(s.as_str()),
        serde_json::Value::Array(items) => Value::List(List::interfaces(items.iter().map(go_json).collect())),
        serde_json::Value::Object(fields) => Value::Map(Map::string_interface(
            fields.iter().map(|(k, v)| (k.as_str(), go_json(v))),
        )),
    }
}
