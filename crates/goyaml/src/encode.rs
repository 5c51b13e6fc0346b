//! yaml.v3's `Marshal` front end: how each Go value becomes emitter events.
//!
//! This is where Go types matter: ints print in decimal, floats with
//! `strconv.FormatFloat(f, 'g', -1, bits)` and YAML's `.inf`/`.nan`, strings pick a style
//! from how they would resolve when read back (`"true"` must be quoted), invalid UTF-8 becomes
//! `!!binary`, map keys are sorted with yaml.v3's own order, and structs are mappings keyed by
//! their lowercased field names.

use std::io::Write as _;

use base64::Engine as _;
use kalypso_gotmpl::{FloatKind, MapKey, Str, Value};

use crate::Error;
use crate::emitter::{Emitter, EmitterError, Event, ScalarStyle};
use crate::resolve::{Resolved, Schema, is_base60_float, is_old_bool, resolve_plain};
use crate::sorter::sort_keys;

/// `yaml.v3.Marshal(v)`.
pub(crate) fn marshal(v: &Value) -> Result<Vec<u8>, Error> {
    let mut e = Emitter::new(Vec::with_capacity(128));
    e.emit(Event::StreamStart).map_err(emitter_error)?;
    e.emit(Event::DocumentStart).map_err(emitter_error)?;
    encode(&mut e, v)?;
    e.emit(Event::DocumentEnd).map_err(emitter_error)?;
    e.clear_open_ended();
    e.emit(Event::StreamEnd).map_err(emitter_error)?;
    Ok(e.into_output())
}

fn emitter_error(e: EmitterError) -> Error {
    Error::Marshal(e.0.to_owned())
}

fn scalar(e: &mut Emitter, value: &[u8], style: ScalarStyle) -> Result<(), Error> {
    e.emit(Event::Scalar {
        value,
        style,
        binary: false,
    })
    .map_err(emitter_error)
}

fn encode(e: &mut Emitter, v: &Value) -> Result<(), Error> {
    let mut digits = [0u8; 24];
    match v {
        Value::Nil => scalar(e, b"null", ScalarStyle::Plain),
        Value::Bool(b) => scalar(e, if *b { b"true" } else { b"false" }, ScalarStyle::Plain),
        Value::Int(i, _) => {
            let n = format_into(&mut digits, i);
            scalar(e, &digits[..n], ScalarStyle::Plain)
        }
        Value::Uint(u, _) => {
            let n = format_into(&mut digits, u);
            scalar(e, &digits[..n], ScalarStyle::Plain)
        }
        Value::Float(f, kind) => {
            let bits = match kind {
                FloatKind::Float32 => 32,
                FloatKind::Float64 => 64,
            };
            let text = kalypso_gotmpl::strconv::format_float(*f, b'g', -1, bits);
            let text = match text.as_str() {
                "+Inf" => ".inf",
                "-Inf" => "-.inf",
                "NaN" => ".nan",
                other => other,
            };
            scalar(e, text.as_bytes(), ScalarStyle::Plain)
        }
        Value::Complex(..) => Err(Error::Unsupported("cannot marshal type: complex128".to_owned())),
        Value::String(s) => encode_string(e, s),
        Value::List(list) => {
            e.emit(Event::SequenceStart {
                empty: list.is_empty(),
            })
            .map_err(emitter_error)?;
            for item in list.items() {
                encode(e, item)?;
            }
            e.emit(Event::SequenceEnd).map_err(emitter_error)
        }
        Value::Map(map) => {
            let entries = map.snapshot();
            let mut sorted: Vec<(&MapKey, &Value)> = entries.iter().collect();
            sort_keys(&mut sorted, |(k, _)| k);
            e.emit(Event::MappingStart {
                empty: sorted.is_empty(),
            })
            .map_err(emitter_error)?;
            for (key, value) in sorted {
                encode(e, &key.to_value())?;
                encode(e, value)?;
            }
            e.emit(Event::MappingEnd).map_err(emitter_error)
        }
        Value::Object(obj) => match obj.fields() {
            Some(fields) => {
                let exported: Vec<&(Str, Value)> = fields
                    .iter()
                    .filter(|(name, _)| name.as_bytes().first().is_some_and(u8::is_ascii_uppercase))
                    .collect();
                e.emit(Event::MappingStart {
                    empty: exported.is_empty(),
                })
                .map_err(emitter_error)?;
                for (name, value) in exported {
                    let key = name.to_str_lossy().to_lowercase();
                    encode_string(e, &Str::from(key))?;
                    encode(e, value)?;
                }
                e.emit(Event::MappingEnd).map_err(emitter_error)
            }
            // Opaque library values (`*semver.Version`) marshal through `MarshalText`, which
            // gives the same text as `String()`.
            None => match obj.go_string() {
                Some(text) => encode_string(e, &Str::from(text)),
                None => {
                    e.emit(Event::MappingStart { empty: true })
                        .map_err(emitter_error)?;
                    e.emit(Event::MappingEnd).map_err(emitter_error)
                }
            },
        },
    }
}

/// Writes a number's decimal text into `buf` and returns its length.
fn format_into(buf: &mut [u8; 24], n: &dyn std::fmt::Display) -> usize {
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    // A 64-bit integer needs at most 20 characters; the buffer cannot overflow.
    let _ = write!(cursor, "{n}");
    cursor.position() as usize
}

/// yaml.v3's `stringv`: quote what would read back as another type.
fn encode_string(e: &mut Emitter, s: &Str) -> Result<(), Error> {
    let Some(text) = s.as_str() else {
        let encoded = encode_base64(s.as_bytes());
        let style = if encoded.contains('\n') {
            ScalarStyle::Literal
        } else {
            ScalarStyle::Plain
        };
        return e
            .emit(Event::Scalar {
                value: encoded.as_bytes(),
                style,
                binary: true,
            })
            .map_err(emitter_error);
    };
    let style = if text.contains('\n') {
        ScalarStyle::Literal
    } else if resolve_plain(text, Schema::V3) == Resolved::Str && !is_base60_float(text) && !is_old_bool(text)
    {
        ScalarStyle::Plain
    } else {
        ScalarStyle::DoubleQuoted
    };
    scalar(e, text.as_bytes(), style)
}

/// go-yaml's `encodeBase64`: standard base64 in lines of 70 characters, each followed by a
/// line break when there is more than one line's worth.
fn encode_base64(data: &[u8]) -> String {
    const LINE: usize = 70;
    let encoded = base64::engine::general_purpose::STANDARD.encode(data);
    let multi_line = encoded.len() / LINE + 1 > 1;
    if !multi_line {
        return encoded;
    }
    let mut out = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
    for chunk in encoded.as_bytes().chunks(LINE) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out
}
