//! Sprig's defaults, flow-control, JSON and reflection functions (`defaults.go`,
//! `reflect.go`, `fail`): `default`, `empty`, `coalesce`, `all`, `any`, `ternary`, `fail`,
//! `toJson` and friends, `fromJson`, `typeOf`, `kindIs`, `deepEqual`...

use kalypso_gotmpl::{FuncError, FuncMap, Type, Value};

use crate::json::{self, EncodeOptions};
use crate::util::{
    arg, arg_bool, arg_bytes, arg_str, deep_equal, func, is_empty, register, string_value, variadic,
};

/// Registers the defaults, JSON and reflection functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let any = || Type::Interface;
    let s = || Type::String;
    register(
        m,
        &["default"],
        variadic(vec![any()], any(), |a| {
            let given = &a[1..];
            match given.first() {
                Some(g) if !is_empty(g) => Ok(g.clone()),
                _ => Ok(arg(a, 0)),
            }
        }),
    );
    register(
        m,
        &["empty"],
        func(vec![any()], |a| Ok(Value::Bool(is_empty(&arg(a, 0))))),
    );
    register(
        m,
        &["coalesce"],
        variadic(vec![], any(), |a| {
            Ok(a.iter().find(|v| !is_empty(v)).cloned().unwrap_or(Value::Nil))
        }),
    );
    register(
        m,
        &["all"],
        variadic(vec![], any(), |a| Ok(Value::Bool(a.iter().all(|v| !is_empty(v))))),
    );
    register(
        m,
        &["any"],
        variadic(vec![], any(), |a| Ok(Value::Bool(a.iter().any(|v| !is_empty(v))))),
    );
    register(
        m,
        &["ternary"],
        func(vec![any(), any(), Type::Bool], |a| {
            Ok(if arg_bool(a, 2) { arg(a, 0) } else { arg(a, 1) })
        }),
    );
    register(
        m,
        &["fail"],
        func(vec![s()], |a| Err(FuncError::new(arg_str(a, 0).to_string()))),
    );

    let html = EncodeOptions { escape_html: true };
    let raw = EncodeOptions { escape_html: false };
    register(
        m,
        &["toJson"],
        func(vec![any()], move |a| {
            Ok(string_value(
                json::marshal(&checked(a)?, html).unwrap_or_default(),
            ))
        }),
    );
    register(
        m,
        &["mustToJson"],
        func(vec![any()], move |a| {
            json::marshal(&checked(a)?, html)
                .map(string_value)
                .map_err(|e| FuncError::new(e.0))
        }),
    );
    register(
        m,
        &["toPrettyJson"],
        func(vec![any()], |a| {
            Ok(string_value(
                json::marshal_indent(&checked(a)?).unwrap_or_default(),
            ))
        }),
    );
    register(
        m,
        &["mustToPrettyJson"],
        func(vec![any()], |a| {
            json::marshal_indent(&checked(a)?)
                .map(string_value)
                .map_err(|e| FuncError::new(e.0))
        }),
    );
    register(
        m,
        &["toRawJson"],
        func(vec![any()], move |a| {
            Ok(string_value(json::marshal(&checked(a)?, raw).unwrap_or_default()))
        }),
    );
    register(
        m,
        &["mustToRawJson"],
        func(vec![any()], move |a| {
            json::marshal(&checked(a)?, raw)
                .map(string_value)
                .map_err(|e| FuncError::new(e.0))
        }),
    );
    register(
        m,
        &["fromJson"],
        func(vec![s()], |a| {
            Ok(json::unmarshal(arg_bytes(a, 0)).unwrap_or(Value::Nil))
        }),
    );
    register(
        m,
        &["mustFromJson"],
        func(vec![s()], |a| {
            json::unmarshal(arg_bytes(a, 0)).map_err(|e| FuncError::new(e.0))
        }),
    );

    register(
        m,
        &["typeOf"],
        func(vec![any()], |a| Ok(Value::string(arg(a, 0).type_name()))),
    );
    register(
        m,
        &["typeIs"],
        func(vec![s(), any()], |a| {
            Ok(Value::Bool(arg_str(a, 0) == arg(a, 1).type_name().as_str()))
        }),
    );
    register(
        m,
        &["typeIsLike"],
        func(vec![s(), any()], |a| {
            let target = arg_str(a, 0).to_string();
            let t = arg(a, 1).type_name();
            Ok(Value::Bool(target == t || format!("*{target}") == t))
        }),
    );
    register(
        m,
        &["kindOf"],
        func(vec![any()], |a| Ok(Value::string(arg(a, 0).kind_name()))),
    );
    register(
        m,
        &["kindIs"],
        func(vec![s(), any()], |a| {
            Ok(Value::Bool(arg_str(a, 0) == arg(a, 1).kind_name()))
        }),
    );
    register(
        m,
        &["deepEqual"],
        func(vec![any(), any()], |a| {
            Ok(Value::Bool(deep_equal(&arg(a, 0), &arg(a, 1))))
        }),
    );
}

/// The value to encode, once it is known to be within the data limits of the execution
/// (see [`kalypso_gotmpl::budget::check_data`]).
fn checked(a: &[Value]) -> Result<Value, FuncError> {
    let v = arg(a, 0);
    // The encoder grows its own stack (see `json::marshal`).
    kalypso_gotmpl::budget::check_data(&v)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use kalypso_gotmpl::{FuncResult, List, Map};

    use crate::funcs;

    use super::*;

    fn call(name: &str, args: &[Value]) -> FuncResult {
        funcs().get(name).expect(name).call(args)
    }

    fn text(v: FuncResult) -> String {
        match v.unwrap() {
            Value::String(s) => s.to_string(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn defaults() {
        assert_eq!(text(call("default", &[Value::string("d"), Value::Nil])), "d");
        assert_eq!(text(call("default", &[Value::string("d")])), "d");
        assert!(matches!(
            call("default", &[Value::int(9), Value::int(3)]),
            Ok(Value::Int(3, _))
        ));
        assert!(matches!(
            call("empty", &[Value::float(0.0)]),
            Ok(Value::Bool(true))
        ));
        assert!(
            call("coalesce", &[Value::Nil, Value::List(List::interfaces(vec![]))])
                .unwrap()
                .is_nil()
        );
        assert_eq!(
            call("fail", &[Value::string("boom")]).unwrap_err().message(),
            "boom"
        );
    }

    #[test]
    fn json_functions() {
        let bad = Value::Map(Map::new(Type::Interface, Type::Interface));
        assert_eq!(text(call("toJson", std::slice::from_ref(&bad))), "");
        assert_eq!(
            call("mustToJson", &[bad]).unwrap_err().message(),
            "json: unsupported type: map[interface {}]interface {}"
        );
        assert_eq!(text(call("toRawJson", &[Value::string("<a>")])), "\"<a>\"");
        assert!(call("fromJson", &[Value::string("{bad")]).unwrap().is_nil());
    }

    #[test]
    fn reflection() {
        assert_eq!(text(call("typeOf", &[Value::Nil])), "<nil>");
        assert_eq!(
            text(call("kindOf", &[Value::List(List::strings(["a"]))])),
            "slice"
        );
        assert!(matches!(
            call("typeIsLike", &[Value::string("string"), Value::string("x")]),
            Ok(Value::Bool(true))
        ));
        assert!(matches!(
            call("deepEqual", &[Value::int(1), Value::float(1.0)]),
            Ok(Value::Bool(false))
        ));
    }
}
