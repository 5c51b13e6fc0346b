//! Hostile templates: deep nesting, runaway recursion and loops, huge output. None may
//! panic, hang or overflow the stack; each fails with Go's error or a limit error.

mod common;

use std::sync::Arc;

use kalypso_gotmpl::{ErrorKind, FuncMap, Limits, Template, Value};

fn run(text: &str, limits: &Limits) -> Result<Vec<u8>, kalypso_gotmpl::Error> {
    let t = Template::parse("template", text, common::funcs())?;
    let mut out = Vec::new();
    t.execute(&Value::Nil, &mut out, limits)?;
    Ok(out)
}

#[test]
fn recursion_stops_at_go_depth() {
    let err = run(
        r#"{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}"#,
        &Limits::default(),
    )
    .expect_err("recursion fails");
    assert_eq!(err.kind(), ErrorKind::Exec);
    assert_eq!(
        err.to_string(),
        r#"template: template:1:28: executing "r" at <{{template "r" .}}>: exceeded maximum template depth (100000)"#
    );
}

#[test]
fn deep_control_nesting_parses_executes_and_drops() {
    let n = 20_000;
    let text = format!("{}x{}", "{{if 1}}".repeat(n), "{{end}}".repeat(n));
    assert_eq!(run(&text, &Limits::default()).expect("runs"), b"x");
    let text = format!("{}x{}", "{{range 1}}".repeat(n), "{{end}}".repeat(n));
    assert_eq!(run(&text, &Limits::default()).expect("runs"), b"x");
    let unclosed = "{{with 1}}".repeat(n);
    assert_eq!(
        run(&unclosed, &Limits::default()).expect_err("unclosed").kind(),
        ErrorKind::Parse
    );
}

#[test]
fn paren_depth_is_bounded_like_go() {
    let ok = format!("{{{{{}1{}}}}}", "(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(run(&ok, &Limits::default()).expect("runs"), b"1");
    let deep = format!("{{{{{}1{}}}}}", "(".repeat(10_001), ")".repeat(10_001));
    let err = run(&deep, &Limits::default()).expect_err("too deep");
    assert_eq!(
        err.to_string(),
        "template: template:1: max expression depth exceeded"
    );
}

#[test]
fn steps_and_output_are_limited() {
    let limits = Limits {
        max_steps: 10_000,
        max_output: 1_000,
        ..Limits::default()
    };
    let err = run("{{range 1000000}}{{end}}", &limits).expect_err("steps");
    assert_eq!(err.kind(), ErrorKind::Limit);
    let err = run("{{range 100}}0123456789abcdef{{end}}", &limits).expect_err("output");
    assert_eq!(err.kind(), ErrorKind::Limit);
    let err = run(r#"{{printf "%1000000d" 1}}"#, &limits).expect_err("output");
    assert_eq!(err.kind(), ErrorKind::Limit);
}

#[test]
fn deeply_nested_values_print_and_drop() {
    let text =
        r#"{{ $d := dict }}{{ range until 50000 }}{{ $d = dict "a" $d }}{{ end }}{{ len (printf "%v" $d) }}"#;
    let out = run(text, &Limits::default()).expect("runs");
    assert_eq!(out, b"350005");
}

#[test]
fn templates_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Template>();
    let t = Arc::new(Template::parse("t", "{{.}}", Arc::new(FuncMap::new())).expect("parses"));
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || t.render(&Value::int(i)).expect("renders"))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().expect("joins"), i.to_string().as_bytes());
    }
}
