//! `unmarshal_v2` against yaml.v2 2.4.0 behaviour: YAML 1.1 resolution, typed keys,
//! anchors and merges, and errors where libyaml fails.

use kalypso_gotmpl::{MapKey, Value};
use kalypso_goyaml::unmarshal_v2;

fn parse(text: &str) -> Value {
    unmarshal_v2(text.as_bytes()).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

/// A compact rendering that shows Go types: `int(83)`, `"s"`, maps with typed keys.
fn show(v: &Value) -> String {
    format!("{v:?}")
}

fn get(v: &Value, key: &str) -> Value {
    v.as_map()
        .and_then(|m| m.get(&MapKey::String(key.into())))
        .unwrap_or_else(|| panic!("no key {key} in {v:?}"))
}

#[test]
fn yaml11_scalars() {
    let v = parse(
        "a: yes\nb: off\nc: 0123\nd: 0x1F\ne: 1_000\nf: .inf\ng: ~\nh:\ni: 1.50\nj: 'yes'\nk: \"0123\"\nl: 2001-12-14\nm: 12:30\n",
    );
    assert_eq!(show(&get(&v, "a")), "true");
    assert_eq!(show(&get(&v, "b")), "false");
    assert_eq!(show(&get(&v, "c")), "int(83)");
    assert_eq!(show(&get(&v, "d")), "int(31)");
    assert_eq!(show(&get(&v, "e")), "int(1000)");
    assert_eq!(show(&get(&v, "f")), "float64(inf)");
    assert_eq!(show(&get(&v, "g")), "nil");
    assert_eq!(show(&get(&v, "h")), "nil");
    assert_eq!(show(&get(&v, "i")), "float64(1.5)");
    assert_eq!(show(&get(&v, "j")), "\"yes\"");
    assert_eq!(show(&get(&v, "k")), "\"0123\"");
    assert_eq!(show(&get(&v, "l")), "\"2001-12-14\"", "timestamps stay strings");
    assert_eq!(show(&get(&v, "m")), "\"12:30\"");
}

#[test]
fn collections_are_interface_typed() {
    let v = parse("1: one\n2: two\n");
    assert_eq!(v.type_name(), "map[interface {}]interface {}",);
    assert_eq!(
        show(&v),
        "map[interface {}]interface {}{int(1): \"one\", int(2): \"two\"}"
    );
    let l = parse("- a\n- 1\n- [x]\n");
    assert_eq!(show(&l), "[]interface {}[\"a\", int(1), []interface {}[\"x\"]]");
    let keys = parse("~: n\ntrue: t\n1.5: f\ny: v\n");
    assert_eq!(
        show(&keys),
        "map[interface {}]interface {}{nil: false, true: \"v\", float64(1.5): \"f\"}",
        "YAML 1.1: `n` is false and the key `y` is true (it replaces `true`)"
    );
}

#[test]
fn scalars_and_empty_documents() {
    assert_eq!(show(&parse("")), "nil");
    assert_eq!(show(&parse("# only a comment\n")), "nil");
    assert_eq!(show(&parse("---\n")), "nil");
    assert_eq!(show(&parse("value")), "\"value\"");
    assert_eq!(show(&parse("3")), "int(3)");
    assert_eq!(show(&parse("line one\nline two\n")), "\"line one line two\"");
    assert_eq!(show(&parse("[]")), "[]interface {}[]");
    assert_eq!(show(&parse("{}")), "map[interface {}]interface {}{}");
}

#[test]
fn only_the_first_document_counts() {
    assert_eq!(show(&parse("a\n---\nb\n")), "\"a\"");
}

#[test]
fn anchors_aliases_and_merges() {
    let v = parse("base: &b\n  x: 1\n  z: 2\nderived:\n  <<: *b\n  z: 3\nlist: &l [1, 2]\nagain: *l\n");
    assert_eq!(
        show(&get(&v, "derived")),
        "map[interface {}]interface {}{\"x\": int(1), \"z\": int(3)}"
    );
    assert_eq!(show(&get(&v, "again")), "[]interface {}[int(1), int(2)]");
    let seq = parse("a: &a {k: 1, j: 1}\nb: &b {k: 2}\nc:\n  <<: [*a, *b]\n");
    assert_eq!(
        show(&get(&seq, "c")),
        "map[interface {}]interface {}{\"j\": int(1), \"k\": int(1)}",
        "earlier maps in a merge sequence win"
    );
    let later_override = parse("a: 1\n<<: {a: 2}\n");
    assert_eq!(show(&get(&later_override, "a")), "int(2)");
}

#[test]
fn tags() {
    let v = parse("a: !!str 123\nb: !!float 1\nc: !!binary aGk=\nd: !custom x\ne: ! 12\n");
    assert_eq!(show(&get(&v, "a")), "\"123\"");
    assert_eq!(show(&get(&v, "b")), "float64(1.0)");
    assert_eq!(show(&get(&v, "c")), "\"hi\"");
    assert_eq!(show(&get(&v, "d")), "\"x\"");
    assert_eq!(show(&get(&v, "e")), "\"12\"");
}

#[test]
fn errors() {
    for bad in [
        "key: [unclosed",
        "a: b: c",
        "a: *missing",
        "[1, 2]: x",
        "a: !!int abc",
        "a: &x [*x]",
        "a: !!binary '!!'",
        "<<: 1",
        "\tkey: value",
        "a:\n  - b\n c: d",
        "\"unterminated",
    ] {
        assert!(unmarshal_v2(bad.as_bytes()).is_err(), "{bad:?} must fail");
    }
}

#[test]
fn billion_laughs_is_rejected() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let prev = i - 1;
        doc.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    let err = unmarshal_v2(doc.as_bytes()).expect_err("excessive aliasing");
    assert!(err.to_string().contains("excessive aliasing"), "{err}");
}

#[test]
fn deep_nesting_does_not_overflow() {
    let depth = 1_000;
    let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            assert!(unmarshal_v2(doc.as_bytes()).is_ok());
        })
        .expect("thread")
        .join()
        .expect("no stack overflow");
}

#[test]
fn block_scalars_at_the_end_of_the_input_decode() {
    for text in ["a: |\n  x", "a: >-\n  x\n  y", "- |\n  x"] {
        let v = unmarshal_v2(text.as_bytes());
        assert!(v.is_ok(), "{text:?}: {v:?}");
    }
}
