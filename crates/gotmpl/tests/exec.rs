//! Go behaviours of the executor beyond the public vectors (messages checked against Go's
//! source).

mod common;

use kalypso_gotmpl::{Limits, Template, Value};

fn render(text: &str, data: &Value) -> Result<String, String> {
    let t = Template::parse("template", text, common::funcs()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    t.execute(data, &mut out, &Limits::default())
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn data() -> Value {
    kalypso_testkit::go_json(&serde_json::json!({
        "name": "kalypso", "list": ["a", "b"], "nil": null, "m": {"a": 1}, "n": 3
    }))
}

#[test]
fn variables_and_scoping() {
    let d = data();
    assert_eq!(
        render("{{ $x := 1 }}{{ $x.y }}", &d).unwrap_err(),
        "template: template:1:18: executing \"template\" at <$x.y>: can't evaluate field y in type int"
    );
    assert_eq!(
        render("{{ range $i, $e := 3 }}{{ end }}", &d).unwrap_err(),
        "template: template:1:19: executing \"template\" at <3>: can't use 3 to iterate over more than one variable"
    );
    assert_eq!(render("{{ range $i := 3 }}{{ $i }}{{ end }}", &d).unwrap(), "012");
    assert_eq!(render("{{ $ }}", &Value::int(7)).unwrap(), "7");
    assert_eq!(
        render("{{ $x := 0 }}{{ range $x = .list }}{{ $x }}{{ end }}{{ $x }}", &d).unwrap(),
        "abb"
    );
    assert_eq!(
        render("{{ $i, $v := 1 }}", &d).unwrap_err(),
        "template: template:1: too many declarations in command"
    );
    assert_eq!(
        render("{{ if $x := .name }}{{ else if $x }}{{ end }}{{ $x }}", &d).unwrap_err(),
        "template: template:1: undefined variable \"$x\""
    );
}

#[test]
fn control_flow() {
    let d = data();
    assert_eq!(
        render("{{ with .nil }}a{{ else with .name }}{{ . }}{{ end }}", &d).unwrap(),
        "kalypso"
    );
    assert_eq!(
        render("{{ if false }}a{{ else if .n }}b{{ else }}c{{ end }}", &d).unwrap(),
        "b"
    );
    assert_eq!(
        render(
            "{{ range .list }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}",
            &d
        )
        .unwrap(),
        "a"
    );
    assert_eq!(render("{{ range .list }}{{ range 3 }}{{ if eq . 1 }}{{ continue }}{{ end }}{{ . }}{{ end }}{{ . }}{{ end }}", &d).unwrap(), "02a02b");
    assert_eq!(
        render("{{ range .nil }}x{{ else }}{{ .name }}{{ end }}", &d).unwrap(),
        "kalypso"
    );
    assert_eq!(
        render("{{ range .list }}{{ . }}{{ else }}{{ break }}{{ end }}", &d).unwrap_err(),
        "template: template:1: {{break}} outside {{range}}"
    );
}

#[test]
fn values_and_builtins() {
    let d = data();
    assert_eq!(
        render(
            "{{ 0x10 }} {{ 'a' }} {{ 1e2 }} {{ 0b11 }} {{ -0 }} {{ 1_0.5 }}",
            &d
        )
        .unwrap(),
        "16 97 100 3 0 10.5"
    );
    assert_eq!(render("{{ 1+2i }}", &d).unwrap(), "(1+2i)");
    assert_eq!(
        render("{{ 18446744073709551615 }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <18446744073709551615>: 18446744073709551615 overflows int"
    );
    assert_eq!(
        render("{{ 99999999999999999999 }}", &d).unwrap_err(),
        "template: template:1: integer overflow: \"99999999999999999999\""
    );
    assert_eq!(
        render("{{ len .missing }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <len .missing>: error calling len: reflect: call of reflect.Value.Type on zero Value"
    );
    assert_eq!(
        render("{{ len .nil }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <len .nil>: error calling len: len of nil pointer"
    );
    assert_eq!(
        render("{{ index .list 2 }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <index .list 2>: error calling index: reflect: slice index out of range"
    );
    assert_eq!(
        render("{{ index .m \"b\" }}|{{ print (index .m \"b\") }}", &d).unwrap(),
        "<no value>|<nil>"
    );
    assert_eq!(
        render("{{ and 1 .missing }}|{{ or .missing 0 }}|{{ and }}", &d).unwrap_err(),
        "template: template:1:44: executing \"template\" at <and>: wrong number of args for and: want at least 1 got 0"
    );
    assert_eq!(
        render("{{ and 1 .missing }}|{{ or .missing 0 }}", &d).unwrap(),
        "<no value>|0"
    );
    assert_eq!(
        render(
            "{{ eq .nil .missing }} {{ ne 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }}",
            &d
        )
        .unwrap(),
        "true true true true"
    );
    assert_eq!(
        render("{{ lt true false }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <lt true false>: error calling lt: invalid type for comparison"
    );
    assert_eq!(
        render("{{ eq .m .list }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <eq .m .list>: error calling eq: non-comparable types map[a:%!s(int=1)]: map[string]interface {}, []interface {}: [a b]"
    );
    assert_eq!(
        render("{{ html .missing }} {{ urlquery \"a b\" }} {{ js \"<\" }}", &d).unwrap(),
        "&lt;no value&gt; a+b \\u003C"
    );
    let builtin = Template::parse(
        "t",
        "{{ slice \"abcd\" 1 3 }}{{ slice .x 1 }}",
        std::sync::Arc::new(kalypso_gotmpl::FuncMap::new()),
    )
    .unwrap();
    assert_eq!(
        builtin.render(&d).unwrap_err().to_string(),
        "template: t:1:25: executing \"t\" at <slice .x 1>: error calling slice: slice of untyped nil"
    );
    assert_eq!(
        render("{{ .name.x }}", &d).unwrap_err(),
        "template: template:1:8: executing \"template\" at <.name.x>: can't evaluate field x in type interface {}"
    );
    assert_eq!(
        render("{{ (.name).x }}", &d).unwrap_err(),
        "template: template:1:4: executing \"template\" at <.name>: can't evaluate field x in type string"
    );
    assert_eq!(
        render("{{ nil }}", &d).unwrap_err(),
        "template: template:1:3: executing \"template\" at <nil>: nil is not a command"
    );
    assert_eq!(
        render("{{ upper nil }}", &d).unwrap_err(),
        "template: template:1:9: executing \"template\" at <nil>: cannot assign nil to string"
    );
    assert_eq!(
        render("{{ upper .missing }}", &d).unwrap_err(),
        "template: template:1:9: executing \"template\" at <.missing>: invalid value; expected string"
    );
    assert_eq!(
        render("{{ upper .nil }}", &d).unwrap_err(),
        "template: template:1:9: executing \"template\" at <.nil>: wrong type for value; expected string; got interface {}"
    );
    assert_eq!(
        render("{{ hasKey .m 1 }}", &d).unwrap_err(),
        "template: template:1:13: executing \"template\" at <1>: expected string; found 1"
    );
    assert_eq!(
        render("{{ hasKey \"x\" \"a\" }}", &d).unwrap_err(),
        "template: template:1:10: executing \"template\" at <\"x\">: can't handle \"x\" for arg of type map[string]interface {}"
    );
}

#[test]
fn parse_errors() {
    let d = data();
    let err = |t: &str| render(t, &d).unwrap_err();
    assert_eq!(
        err("{{ .name\n"),
        "template: template:2: unclosed action started at template:1"
    );
    assert_eq!(err("{{ if }}"), "template: template:1: missing value for if");
    assert_eq!(
        err("{{ template x }}"),
        "template: template:1: unexpected \"x\" in template clause"
    );
    assert_eq!(
        err("{{ \"abcdefghijklmnop\" \"\" | }}{{ end }}"),
        "template: template:1: unexpected {{end}}"
    );
    assert_eq!(
        err("{{ 3 | }}{{ x"),
        "template: template:1: function \"x\" not defined"
    );
    assert_eq!(err("{{ (1 2 }}"), "template: template:1: unclosed left paren");
    assert_eq!(
        err("{{ true.x }}"),
        "template: template:1: unexpected . after term \"true\""
    );
    assert_eq!(err("{{ \"\\q\" }}"), "template: template:1: invalid syntax");
    assert_eq!(
        err("{{ define \"a\" }}x{{ end }}{{ define \"a\" }}y{{ end }}"),
        "template: template:1: template: multiple definition of template \"a\""
    );
    assert_eq!(
        err("{{ .x | 1 | 2 }}"),
        "template: template:1: non executable command in pipeline stage 2"
    );
    assert_eq!(err("{{ else }}"), "template: template:1: unexpected {{else}}");
    assert_eq!(
        err("{{ range $a, 1 }}{{ end }}"),
        "template: template:1: range can only initialize variables"
    );
    assert_eq!(err("x {{/* c"), "template: template:1: unclosed comment");
    assert_eq!(
        err("{{ 'a }}"),
        "template: template:1: unterminated character constant"
    );
    assert_eq!(
        err("{{ ^ }}"),
        "template: template:1: unexpected \"^\" in command"
    );
    assert_eq!(
        err("{{ .a € }}"),
        "template: template:1: unrecognized character in action: U+20AC '€'"
    );
}

#[test]
fn templates_list_the_functions_they_refer_to() {
    let t = Template::parse(
        "t",
        "{{ if false }}{{ len . | printf \"%d\" }}{{ end }}{{ define \"x\" }}{{ index . 0 }}{{ end }}{{ len . }}",
        Default::default(),
    )
    .unwrap();
    assert_eq!(t.functions().collect::<Vec<_>>(), ["index", "len", "printf"]);
}

#[test]
fn define_and_block() {
    let d = data();
    assert_eq!(
        render("{{ define \"template\" }}body {{ .name }}{{ end }}", &d).unwrap(),
        "body kalypso"
    );
    assert_eq!(
        render("{{ block \"b\" .list }}{{ len . }}{{ end }}", &d).unwrap(),
        "2"
    );
    assert_eq!(
        render("{{ template \"t\" }}{{ define \"t\" }}{{ . }}{{ end }}", &d).unwrap(),
        "<no value>"
    );
    assert_eq!(
        render("{{ define \"t\" }}{{ $x }}{{ end }}{{ $x := 1 }}", &d).unwrap_err(),
        "template: template:1: undefined variable \"$x\""
    );
}

#[test]
fn actions_print_fields_and_variables_as_go_does() {
    use kalypso_gotmpl::{Map, MapKey, Str, Struct, Type};
    use std::sync::Arc;
    let config = Map::string_interface([("a", Value::int(1)), ("nil", Value::Nil)]);
    let ints = Map::from_entries(
        Type::INT,
        Type::String,
        [(MapKey::Int(1, kalypso_gotmpl::IntKind::Int), Value::string("one"))]
            .into_iter()
            .collect(),
    );
    let data = Value::Object(Arc::new(Struct::new(
        "main.T",
        vec![
            (Str::from("Name"), Value::string("kalypso")),
            (Str::from("Nil"), Value::Nil),
            (Str::from("Labels"), Value::Map(Map::string_string([("k", "v")]))),
            (
                Str::from("NilLabels"),
                Value::Map(Map::nil(Type::String, Type::String)),
            ),
            (Str::from("Config"), Value::Map(config)),
            (Str::from("Ints"), Value::Map(ints)),
        ],
    )));
    let cases = [
        ("{{ .Name }}", "kalypso"),
        ("{{ .Nil }}", "<no value>"),
        ("{{ .Labels.k }}|{{ .Labels.missing }}", "v|<no value>"),
        ("{{ .NilLabels.k }}", "<no value>"),
        (
            "{{ .Config.a }}|{{ .Config.nil }}|{{ .Config.missing }}",
            "1|<no value>|<no value>",
        ),
        ("{{ .Labels }}", "map[k:v]"),
        (
            "{{ $x := .Config.nil }}{{ $x }}|{{ $ }}",
            "<no value>|{kalypso <nil> map[k:v] map[] map[a:1 nil:<nil>] map[1:one]}",
        ),
        ("{{ range $k, $v := .Labels }}{{ $k }}={{ $v }}{{ end }}", "k=v"),
    ];
    for (text, want) in cases {
        assert_eq!(render(text, &data).as_deref(), Ok(want), "{text}");
    }
    assert_eq!(
        render("{{ .Missing }}", &data).unwrap_err(),
        "template: template:1:3: executing \"template\" at <.Missing>: can't evaluate field Missing in type main.T"
    );
    assert_eq!(
        render("{{ .Ints.x }}", &data).unwrap_err(),
        "template: template:1:8: executing \"template\" at <.Ints.x>: can't evaluate field x in type map[int]string"
    );
    assert_eq!(
        render("{{ .Nil.x }}", &data).unwrap_err(),
        "template: template:1:7: executing \"template\" at <.Nil.x>: nil pointer evaluating interface {}.x"
    );
    // The steps of a printed field or variable are those of any one-command pipeline.
    let limits = Limits {
        max_steps: 3,
        ..Limits::default()
    };
    let t = Template::parse("template", "{{ .Name }}{{ .Name }}", common::funcs()).unwrap();
    let err = t.execute(&data, &mut Vec::new(), &limits).unwrap_err();
    assert_eq!(
        err.to_string(),
        "template: template:1:14: executing \"template\" at <.Name>: exceeded the template-steps limit \
         (3 steps: actions, loop iterations and calls)"
    );
}

/// A function made with `Func::string` (`wtag`) behaves as the same function returning its
/// string (`vtag`): an action that prints its result has it appended to the output directly,
/// with the same output, steps, budget and errors.
#[test]
fn string_functions_print_as_functions_returning_strings() {
    use kalypso_gotmpl::{Func, FuncError, FuncMap, Type};
    use std::sync::Arc;
    fn tag(a: &[Value], out: &mut Vec<u8>) -> Result<(), FuncError> {
        out.push(b'<');
        for v in a {
            match v.as_string().map(|s| s.to_string()).as_deref() {
                Some("fail") => return Err(FuncError::new("failed")),
                Some("limit") => return Err(FuncError::limit("too much")),
                Some("panic") => panic!("boom"),
                Some(s) => out.extend_from_slice(s.as_bytes()),
                None => out.extend_from_slice(b"?"),
            }
        }
        out.push(b'>');
        Ok(())
    }
    let mut m = FuncMap::new();
    m.extend(Arc::try_unwrap(common::funcs()).unwrap_or_else(|a| (*a).clone()));
    m.insert("wtag", Func::string([Type::String], Some(Type::String), tag));
    m.insert(
        "vtag",
        Func::variadic([Type::String], Type::String, |a| {
            let mut out = Vec::new();
            tag(a, &mut out)?;
            Ok(Value::String(kalypso_gotmpl::Str::from_bytes(out)))
        }),
    );
    m.insert("wany", Func::string([], Some(Type::Interface), tag));
    m.insert(
        "vany",
        Func::variadic([], Type::Interface, |a| {
            let mut out = Vec::new();
            tag(a, &mut out)?;
            Ok(Value::String(kalypso_gotmpl::Str::from_bytes(out)))
        }),
    );
    let funcs = Arc::new(m);
    let data = data();
    let run = |text: &str, limits: &Limits| -> Result<String, String> {
        let t = Template::parse("template", text, funcs.clone()).map_err(|e| e.to_string())?;
        let mut out = b"before|".to_vec();
        match t.execute(&data, &mut out, limits) {
            Ok(()) => Ok(String::from_utf8_lossy(&out).into_owned()),
            // What was written before the error, too.
            Err(e) => Err(format!("{e} after {}", String::from_utf8_lossy(&out))),
        }
    };
    let texts = [
        "{{ wtag .name }}",
        "{{ wtag .name \"b\" \"c\" }}",
        "{{ .name | wtag }}",
        "{{ .name | upper | wtag \"x\" }}",
        "{{ wtag }}",
        "{{ wtag 3 }}",
        "{{ .nil | wtag }}",
        "{{ .missing | wtag }}",
        "{{ wtag \"fail\" }}",
        "{{ wtag \"limit\" }}",
        "{{ wtag \"panic\" }}",
        "{{ range .list }}{{ . | wtag }}{{ end }}",
        "{{ range $i, $v := .list }}{{ $v | wtag $.name }}{{ end }}",
        "{{ $x := wtag .name }}{{ $x }}",
        "{{ wtag (wtag .name) }}",
        "{{ $x := .name }}{{ $x | wtag }}",
        "{{ $x := .name }}{{ $x | wtag \"a\" }}",
        "{{ $x := 3 }}{{ $x | wtag }}",
        "{{ $x := .nil }}{{ $x | wtag }}{{ $x | wany }}",
        "{{ $x := .missing }}{{ $x | wany }}",
        "{{ $x := \"fail\" }}{{ $x | wany }}",
        "{{ $x := \"panic\" }}{{ $x | wtag }}",
        "{{ $x := .list }}{{ $x | wany }}",
        "{{ $ | wany }}{{ $ | wtag }}",
        "{{ $x.y | wtag }}",
        "{{ range $i, $v := .list }}{{ $v | wtag }}{{ $i | wany }}{{ end }}",
        "{{ range $k, $v := .m }}{{ $k | wtag }}{{ $v | wany }}{{ $v | wtag }}{{ end }}",
    ];
    let limits = [
        Limits::default(),
        Limits {
            max_steps: 2,
            ..Limits::default()
        },
        Limits {
            max_steps: 3,
            ..Limits::default()
        },
        Limits {
            max_output: 9,
            ..Limits::default()
        },
        Limits {
            max_alloc: 4,
            ..Limits::default()
        },
    ];
    for text in texts {
        for limits in &limits {
            let written = run(text, limits);
            let returned = run(&text.replace("wtag", "vtag").replace("wany", "vany"), limits)
                .map_err(|e| e.replace("vtag", "wtag").replace("vany", "wany"));
            assert_eq!(written, returned, "{text} with {limits:?}");
        }
    }
    assert_eq!(
        run("{{ .name | wtag }}", &Limits::default()).as_deref(),
        Ok("before|<kalypso>")
    );
}

/// A `range` whose body never reads dot moves each element into its variable instead of
/// copying it into dot as well: every form of the range's variables, with and without dot
/// in the body (at any depth: nested controls, parenthesized pipelines, `template` data),
/// prints what Go prints.
#[test]
fn range_bodies_with_and_without_dot() {
    let d = data();
    let cases = [
        ("{{ range $k, $v := .m }}{{ $k }}={{ $v }}{{ end }}", "a=1"),
        (
            "{{ range $k, $v := .m }}{{ $k }}={{ $v }}{{ . }}{{ end }}",
            "a=11",
        ),
        ("{{ range $v := .list }}{{ $v }}{{ end }}", "ab"),
        ("{{ range $i, $v := .list }}{{ $i }}{{ $v }}{{ end }}", "0a1b"),
        (
            "{{ range $i, $v := .list }}{{ $i }}{{ $v }}{{ (.) }}{{ end }}",
            "0aa1bb",
        ),
        ("{{ range .list }}x{{ end }}", "xx"),
        ("{{ range .list }}{{ . }}{{ end }}", "ab"),
        ("{{ $x := 0 }}{{ range $x = .list }}{{ end }}{{ $x }}", "b"),
        (
            "{{ $i := 0 }}{{ $v := 0 }}{{ range $i, $v = .list }}{{ end }}{{ $i }}{{ $v }}",
            "1b",
        ),
        (
            "{{ range $v := .list }}{{ with $v }}{{ . }}{{ end }}{{ end }}",
            "ab",
        ),
        (
            "{{ range $v := .list }}{{ if eq $v \"b\" }}{{ . }}{{ end }}{{ end }}",
            "b",
        ),
        (
            "{{ range $v := .list }}{{ if eq $v \"b\" }}{{ $v | printf \"%s!\" }}{{ end }}{{ end }}",
            "b!",
        ),
        (
            "{{ define \"t\" }}[{{ . }}]{{ end }}{{ range $v := .list }}{{ template \"t\" . }}{{ end }}",
            "[a][b]",
        ),
        (
            "{{ define \"t\" }}[{{ . }}]{{ end }}{{ range $v := .list }}{{ template \"t\" }}{{ end }}",
            "[<no value>][<no value>]",
        ),
        (
            "{{ define \"t\" }}[{{ . }}]{{ end }}{{ range $v := .list }}{{ template \"t\" $v }}{{ end }}",
            "[a][b]",
        ),
        ("{{ range $v := .list }}{{ $.name }}{{ end }}", "kalypsokalypso"),
        ("{{ range $i := 2 }}{{ $i }}{{ end }}", "01"),
        (
            "{{ range $v := .list }}{{ range $w := $.list }}{{ $v }}{{ $w }}{{ end }}{{ end }}",
            "aaabbabb",
        ),
        ("{{ range $v := .list }}{{ $v }}{{ else }}{{ . }}{{ end }}", "ab"),
        (
            "{{ range $v := .nil }}{{ $v }}{{ else }}{{ .name }}{{ end }}",
            "kalypso",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(render(text, &d).as_deref(), Ok(want), "{text}");
    }
}
