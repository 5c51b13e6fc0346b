//! JSON test data as the conformance vectors' Go program decodes it.

use kalypso_gotmpl::{List, Map, Value};

/// Objects are `map[string]interface {}`, arrays `[]interface {}`, integers `int`, other
/// numbers `float64`.
pub fn json(text: &str) -> Value {
    let v: serde_json::Value = serde_json::from_str(text).expect("test JSON");
    convert(&v)
}

fn convert(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) if !n.to_string().contains(['.', 'e', 'E']) => Value::int(i),
            _ => Value::float(n.as_f64().expect("number")),
        },
        serde_json::Value::String(s) => Value::string(s.as_str()),
        serde_json::Value::Array(items) => Value::List(List::interfaces(items.iter().map(convert).collect())),
        serde_json::Value::Object(fields) => Value::Map(Map::string_interface(
            fields.iter().map(|(k, v)| (k.as_str(), convert(v))),
        )),
    }
}
