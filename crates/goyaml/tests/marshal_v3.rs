//! `marshal_v3` against yaml.v3 3.0.1 output (expected texts from the Go conformance vectors,
//! which show `toYaml`, i.e. the output without its final newline).

mod common;

use common::json;
use kalypso_gotmpl::{FloatKind, IntKind, List, Map, MapKey, Struct, Type, Value};
use kalypso_goyaml::{Error, marshal_v3, unmarshal_v2};

#[track_caller]
fn check(v: &Value, want: &str) {
    let got = marshal_v3(v).expect("marshal");
    let got = String::from_utf8(got).expect("UTF-8");
    assert_eq!(got, format!("{want}\n"));
}

#[test]
fn strings_that_resolve_otherwise_are_double_quoted() {
    check(
        &json(r#"["true", "yes", "on", "y", "null", "~", "0123"]"#),
        "- \"true\"\n- \"yes\"\n- \"on\"\n- \"y\"\n- \"null\"\n- \"~\"\n- \"0123\"",
    );
    check(
        &json(r#"["0x1F", "1e3", "1.0", "-", ":", "a: b", "- x"]"#),
        "- \"0x1F\"\n- \"1e3\"\n- \"1.0\"\n- '-'\n- ':'\n- 'a: b'\n- '- x'",
    );
    check(
        &json(r#"["012", "08", "1_000", "+1", ".5", "2001-12-14", "="]"#),
        "- \"012\"\n- \"08\"\n- \"1_000\"\n- \"+1\"\n- \".5\"\n- \"2001-12-14\"\n- =",
    );
}

#[test]
fn indicators_are_single_quoted() {
    check(
        &json(r##"["#c", "k #x", "'s'", "\"d\"", "@a", "`t", "m\nl"]"##),
        "- '#c'\n- 'k #x'\n- '''s'''\n- '\"d\"'\n- '@a'\n- '`t'\n- |-\n  m\n  l",
    );
    check(
        &json(r#"["tr\n", " lead", "trail ", "", "*", "&a", "!t"]"#),
        "- |\n  tr\n- ' lead'\n- 'trail '\n- \"\"\n- '*'\n- '&a'\n- '!t'",
    );
}

#[test]
fn escapes_and_unicode() {
    check(
        &json(r#"["%p", "{a}", "[a]", "ü", "🚀", "tab\th", "\u0007"]"#),
        "- '%p'\n- '{a}'\n- '[a]'\n- ü\n- \"\\U0001F680\"\n- \"tab\\th\"\n- \"\\a\"",
    );
    check(
        &json(r#"[".nan", "12:30", "1:2:3", "x\r\ny", "a  b", "trailing\n\n", "\nleading"]"#),
        "- \".nan\"\n- \"12:30\"\n- \"1:2:3\"\n- \"x\\r\\ny\"\n- a  b\n- |+\n  trailing\n\n- |4-\n  leading",
    );
    check(
        &json(r#"{"EMOJI": "🚀🔥", "GREETING": "Grüße, 世界"}"#),
        "EMOJI: \"\\U0001F680\\U0001F525\"\nGREETING: Grüße, 世界",
    );
}

#[test]
fn maps_sort_numerically_aware() {
    check(
        &json(r#"{"z": 1, "a": "x", "M": true, "_": null, "10": 2, "9": 3}"#),
        "_: null\n\"9\": 3\n\"10\": 2\nM: true\na: x\nz: 1",
    );
}

#[test]
fn nesting_indents_four_and_sequences_inside_sequences_two() {
    check(
        &json(r#"{"a": {"b": {"c": [1, 2, {"d": "e"}]}}, "l": [[1, 2], [], {}]}"#),
        "a:\n    b:\n        c:\n            - 1\n            - 2\n            - d: e\nl:\n    - - 1\n      - 2\n    - []\n    - {}",
    );
    check(
        &json(r#"[{"name": "alice", "age": 30, "admin": true}, {"name": "bob", "age": 25, "admin": false}]"#),
        "- admin: true\n  age: 30\n  name: alice\n- admin: false\n  age: 25\n  name: bob",
    );
    check(&json(r#"[{"a": {"b": 1}}]"#), "- a:\n    b: 1");
}

#[test]
fn scalars() {
    check(&Value::int(1), "1");
    check(&Value::float(1.5), "1.5");
    check(&Value::Bool(true), "true");
    check(&Value::Nil, "null");
    check(&Value::string("s"), "s");
    check(&Value::float(1e21), "1e+21");
    check(&Value::int(12345678901234567), "12345678901234567");
    check(&Value::float(f64::INFINITY), ".inf");
    check(&Value::float(f64::NEG_INFINITY), "-.inf");
    check(&Value::float(f64::NAN), ".nan");
    check(&Value::Float(0.1, FloatKind::Float32), "0.1");
    check(&Value::string(""), "\"\"");
    check(&Value::string("a\nb"), "|-\n    a\n    b");
}

#[test]
fn long_strings_are_not_folded() {
    let s = "word ".repeat(30);
    check(&Value::string(s.as_str()), &format!("'{s}'"));
    let plain = "word ".repeat(30);
    let plain = plain.trim_end();
    check(&Value::string(plain), plain);
}

#[test]
fn empty_and_nil_collections() {
    check(&Value::Map(Map::nil(Type::String, Type::String)), "{}");
    check(&Value::List(List::nil(Type::Interface)), "[]");
    check(&json(r#"{"a": [], "b": {}}"#), "a: []\nb: {}");
}

#[test]
fn yaml_decoded_maps_keep_typed_keys() {
    let ints = unmarshal_v2(b"1: one\n2: two\n").expect("parse");
    check(&ints, "1: one\n2: two");
    let nested = unmarshal_v2(b"zip: 0123\nflag: on\nratio: 1.50\n").expect("parse");
    check(&nested, "flag: true\nratio: 1.5\nzip: 83");
    let mut entries = kalypso_gotmpl::Entries::new();
    entries.insert(MapKey::String("b".into()), Value::int(1));
    entries.insert(MapKey::Int(10, IntKind::Int), Value::int(2));
    entries.insert(MapKey::Bool(false), Value::int(3));
    entries.insert(MapKey::Nil, Value::int(4));
    let mixed = Value::Map(Map::from_entries(Type::Interface, Type::Interface, entries));
    check(&mixed, "false: 3\n10: 2\nnull: 4\nb: 1");
}

#[test]
fn structs_use_lowercased_field_names() {
    let s = Struct::new(
        "scheduler.dataType",
        vec![
            ("DeploymentTargetName".into(), Value::string("x")),
            ("Labels".into(), Value::Map(Map::nil(Type::String, Type::String))),
        ],
    );
    check(
        &Value::Object(std::sync::Arc::new(s)),
        "deploymenttargetname: x\nlabels: {}",
    );
}

#[test]
fn invalid_utf8_becomes_binary() {
    let v = Value::String(kalypso_gotmpl::Str::from_bytes(vec![0xff, 0xfe]));
    check(&v, "!!binary //4=");
    let long = Value::String(kalypso_gotmpl::Str::from_bytes(vec![0xff; 60]));
    let got = String::from_utf8(marshal_v3(&long).expect("marshal")).expect("UTF-8");
    assert!(got.starts_with("!!binary |\n    ////"), "{got}");
}

#[test]
fn multiline_keys_use_complex_key_syntax() {
    check(&json(r#"{"a\nb": 1}"#), "? |-\n    a\n    b\n: 1");
}

#[test]
fn complex_numbers_are_unsupported() {
    assert!(matches!(
        marshal_v3(&Value::Complex(1.0, 2.0)),
        Err(Error::Unsupported(m)) if m == "cannot marshal type: complex128"
    ));
}
