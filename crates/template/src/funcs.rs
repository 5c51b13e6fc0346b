//! The four template functions the Kalypso scheduler adds to Sprig.
//!
//! - `toYaml v`: yaml.v3 `Marshal`, final newline removed, `""` when go-yaml returns an error
//!   (a value go-yaml panics on, such as a complex number, fails the template instead, as the
//!   Go template engine reports a function's panic).
//! - `stringify v`: for a `map[string]interface {}`, values that are `map[string]interface {}`
//!   or `[]interface {}` are replaced by their yaml.v3 text (with its final newline) before
//!   `toYaml`; YAML-decoded `map[interface {}]interface {}` values stay maps. Anything else is
//!   plain `toYaml`.
//! - `hash v`: mitchellh/hashstructure v1 `Hash(v, nil)` in decimal.
//! - `unquote v`: strings are space-trimmed, then stripped of `"`, then of `'` at both ends;
//!   other values give `""`.

use kalypso_gotmpl::{Entries, Func, FuncError, FuncMap, FuncResult, Map, Str, Type, Value, budget};
use kalypso_goyaml::Error as YamlError;

use crate::hash::hash;

/// Adds `toYaml`, `stringify`, `hash` and `unquote` to `funcs`.
pub(crate) fn register(funcs: &mut FuncMap) {
    funcs.insert("toYaml", Func::new([Type::Interface], |args| to_yaml(arg(args))));
    funcs.insert(
        "stringify",
        Func::new([Type::Interface], |args| stringify(arg(args))),
    );
    funcs.insert("hash", Func::new([Type::Interface], |args| hash_func(arg(args))));
    funcs.insert(
        "unquote",
        Func::new([Type::Interface], |args| Ok(unquote(arg(args)))),
    );
}

fn arg(args: &[Value]) -> &Value {
    args.first().unwrap_or(&Value::Nil)
}

/// yaml.v3 `Marshal`, distinguishing go-yaml's errors (`Ok(None)`) from its panics.
fn marshal(v: &Value) -> Result<Option<Vec<u8>>, FuncError> {
    match kalypso_goyaml::marshal_v3(v) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(YamlError::Unsupported(message)) => Err(FuncError::new(message)),
        Err(_) => Ok(None),
    }
}

fn to_yaml(v: &Value) -> FuncResult {
    budget::with_data(v, || to_yaml_unchecked(v))?
}

fn to_yaml_unchecked(v: &Value) -> FuncResult {
    match v {
        // A frozen map (config shared by many assignments) is encoded once.
        Value::Map(map) => map.derived("toYaml", || encode_yaml(v)),
        _ => encode_yaml(v),
    }
}

fn encode_yaml(v: &Value) -> FuncResult {
    Ok(Value::String(match marshal(v)? {
        Some(mut bytes) => {
            if bytes.last() == Some(&b'\n') {
                bytes.pop();
            }
            Str::from_bytes(bytes)
        }
        None => Str::empty(),
    }))
}

fn is_string_interface_map(m: &Map) -> bool {
    matches!(m.key_type(), Type::String) && matches!(m.elem_type(), Type::Interface)
}

fn stringify(v: &Value) -> FuncResult {
    budget::with_data(v, || stringify_unchecked(v))?
}

fn stringify_unchecked(v: &Value) -> FuncResult {
    let Value::Map(map) = v else {
        return to_yaml_unchecked(v);
    };
    if !is_string_interface_map(map) {
        return to_yaml_unchecked(v);
    }
    let mut entries = Entries::new();
    for (key, value) in map.snapshot().iter() {
        let nested = match value {
            Value::Map(m) => is_string_interface_map(m),
            Value::List(l) => matches!(l.elem_type(), Type::Interface),
            _ => false,
        };
        let value = if nested {
            Value::String(Str::from_bytes(marshal(value)?.unwrap_or_default()))
        } else {
            value.clone()
        };
        entries.insert(key.clone(), value);
    }
    to_yaml_unchecked(&Value::Map(Map::from_entries(
        Type::String,
        Type::Interface,
        entries,
    )))
}

/// The original's `hash` (`scheduler/templater.go`): hashstructure's value as a decimal
/// string, or `""` when hashstructure returns an error.
fn hash_func(v: &Value) -> FuncResult {
    let h = budget::with_data(v, || hash(v))?;
    Ok(Value::string(h.map(|h| h.to_string()).unwrap_or_default()))
}

/// Go's `strings.TrimSpace` on bytes: Unicode white space at both ends; invalid UTF-8 is
/// never space.
fn trim_space(s: &[u8]) -> &[u8] {
    use kalypso_gotmpl::unicode::{decode_last_rune, decode_rune, is_space};
    let mut start = 0;
    while start < s.len() {
        let (r, n) = decode_rune(&s[start..]);
        if !is_space(r) {
            break;
        }
        start += n;
    }
    let mut end = s.len();
    while end > start {
        let (r, n) = decode_last_rune(&s[start..end]);
        if !is_space(r) {
            break;
        }
        end -= n;
    }
    &s[start..end]
}

fn trim_byte(s: &[u8], b: u8) -> &[u8] {
    let start = s.iter().position(|&c| c != b).unwrap_or(s.len());
    let end = s.iter().rposition(|&c| c != b).map_or(start, |i| i + 1);
    &s[start..end.max(start)]
}

fn unquote(v: &Value) -> Value {
    match v {
        Value::String(s) => {
            let trimmed = trim_byte(trim_byte(trim_space(s.as_bytes()), b'"'), b'\'');
            if trimmed.len() == s.len() {
                v.clone()
            } else {
                Value::String(Str::from_bytes(trimmed))
            }
        }
        _ => Value::string(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: FuncResult) -> String {
        match r {
            Ok(Value::String(s)) => s.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hash_of_an_unhashable_value_is_empty_as_in_the_original() {
        assert_eq!(text(hash_func(&Value::Complex(1.0, 2.0))), "");
        assert!(!text(hash_func(&Value::int(1))).is_empty());
    }

    #[test]
    fn unquote_variants() {
        let cases = [
            ("\"x\"", "x"),
            ("'y'", "y"),
            ("  \"'z'\"  ", "z"),
            ("'\"w\"'", "\"w\""),
            ("\"\"\"many\"\"", "many"),
            ("\ttab\"\n", "tab"),
            ("\u{85}nel\u{a0}", "nel"),
            ("plain", "plain"),
        ];
        for (input, want) in cases {
            assert_eq!(
                unquote(&Value::string(input)).as_string().map(Str::to_string),
                Some(want.to_owned()),
                "{input:?}"
            );
        }
        assert_eq!(format!("{:?}", unquote(&Value::int(5))), "\"\"");
        assert_eq!(format!("{:?}", unquote(&Value::Nil)), "\"\"");
    }

    #[test]
    fn to_yaml_trims_one_newline() {
        assert_eq!(text(to_yaml(&Value::string("a\n\n"))), "|+\n    a\n");
        assert_eq!(text(to_yaml(&Value::int(1))), "1");
        assert!(to_yaml(&Value::Complex(1.0, 1.0)).is_err());
    }

    #[test]
    fn stringify_turns_nested_values_into_yaml_text() {
        let v = Value::Map(Map::string_interface([
            ("a", Value::Map(Map::string_interface([("b", Value::int(1))]))),
            (
                "l",
                Value::List(kalypso_gotmpl::List::interfaces(vec![
                    Value::int(1),
                    Value::string("two"),
                ])),
            ),
            ("s", Value::string("str")),
            ("n", Value::int(3)),
        ]));
        assert_eq!(
            text(stringify(&v)),
            "a: |\n    b: 1\nl: |\n    - 1\n    - two\n\"n\": 3\ns: str"
        );
        let Value::Map(original) = &v else { unreachable!() };
        assert!(
            matches!(original.get_str("a"), Some(Value::Map(_))),
            "the argument is not modified"
        );
        assert_eq!(text(stringify(&Value::int(3))), "3");
    }
}
