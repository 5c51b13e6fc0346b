//! JSON test data as the conformance vectors' Go program decodes it.

use kalypso_gotmpl::Value;

/// Objects are `map[string]interface {}`, arrays `[]interface {}`, integers `int`, other
/// numbers `float64`.
pub fn json(text: &str) -> Value {
    let v: serde_json::Value = serde_json::from_str(text).expect("test JSON");
    kalypso_testkit::go_json(&v)
}
