//! YAML with Go's byte-level behaviour.
//!
//! Kalypso templates call `toYaml` (go-yaml v3 `Marshal`), and the scheduler converts
//! ConfigMap values by unmarshalling them with go-yaml v2 (YAML 1.1: `yes` is a bool, `0123`
//! is octal). GitOps diffs make every byte matter, so both directions follow go-yaml exactly:
//! indentation, key order, quoting and scalar resolution.

mod decode;
mod emitter;
mod encode;
mod resolve;
mod sorter;

use kalypso_gotmpl::Value;

/// Errors of marshalling and unmarshalling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// go-yaml's `Marshal` returned an error (`toYaml` then gives `""`).
    #[error("cannot marshal: {0}")]
    Marshal(String),
    /// go-yaml's `Marshal` panics for this value (`cannot marshal type: complex128`). Go's
    /// template engine turns a function's panic into an execution error, so callers that
    /// emulate a template function must report it rather than swallow it.
    #[error("{0}")]
    Unsupported(String),
    /// The text is not valid YAML, or cannot be decoded into Go values (unknown anchor,
    /// invalid map key, mismatched tag); the message is go-yaml's, e.g.
    /// `yaml: line 1: did not find expected ',' or ']'`.
    #[error("{0}")]
    Unmarshal(String),
}

/// `yaml.v3.Marshal(v)`: 4-space indentation, sorted map keys, v3 quoting rules. The output
/// ends with a newline, as go-yaml's does.
pub fn marshal_v3(v: &Value) -> Result<Vec<u8>, Error> {
    encode::marshal(v)
}

/// `yaml.v2.Unmarshal(text, &out)` with `out interface{}`: YAML 1.1 scalar resolution,
/// mappings as `map[interface {}]interface {}`, sequences as `[]interface {}`. Only the first
/// document is read; an empty stream gives nil.
pub fn unmarshal_v2(text: &[u8]) -> Result<Value, Error> {
    decode::unmarshal(text)
}
