//! YAML with Go's byte-level behaviour.
//!
//! Kalypso templates call `toYaml` (go-yaml v3 `Marshal`), and the scheduler converts
//! ConfigMap values by unmarshalling them with go-yaml v2 (YAML 1.1: `yes` is a bool, `0123`
//! is octal). GitOps diffs make every byte matter, so both directions follow go-yaml exactly:
//! indentation, key order, quoting and scalar resolution.

use kalypso_gotmpl::Value;

/// Errors of marshalling and unmarshalling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The value cannot be represented (go-yaml panics or returns an error).
    #[error("cannot marshal {0}")]
    Marshal(String),
    /// The text is not valid YAML.
    #[error("{0}")]
    Unmarshal(String),
}

/// `yaml.v3.Marshal(v)`: 4-space indentation, sorted map keys, v3 quoting rules. The output
/// ends with a newline, as go-yaml's does.
pub fn marshal_v3(v: &Value) -> Result<Vec<u8>, Error> {
    let _ = v;
    Err(Error::Marshal("not implemented".to_owned()))
}

/// `yaml.v2.Unmarshal(text, &out)` with `out interface{}`: YAML 1.1 scalar resolution,
/// mappings as `map[interface {}]interface {}`, sequences as `[]interface {}`.
pub fn unmarshal_v2(text: &[u8]) -> Result<Value, Error> {
    let _ = text;
    Err(Error::Unmarshal("not implemented".to_owned()))
}
