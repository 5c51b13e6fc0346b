//! Parses arbitrary text and executes it against a fixed JSON-like value with tight limits:
//! nothing may panic, hang, overflow the stack or exceed the limits.

#![no_main]

use std::sync::{Arc, OnceLock};

use kalypso_gotmpl::{Func, FuncError, FuncMap, Limits, List, Map, MapKey, Str, Template, Type, Value};
use libfuzzer_sys::fuzz_target;

fn funcs() -> Arc<FuncMap> {
    static FUNCS: OnceLock<Arc<FuncMap>> = OnceLock::new();
    FUNCS
        .get_or_init(|| {
            let mut m = FuncMap::new();
            m.insert(
                "upper",
                Func::new([Type::String], |a| {
                    Ok(Value::string(
                        a[0].as_string()
                            .map(|s| s.to_string().to_uppercase())
                            .unwrap_or_default(),
                    ))
                }),
            );
            m.insert(
                "list",
                Func::variadic([], Type::Interface, |a| {
                    Ok(Value::List(List::interfaces(a.to_vec())))
                }),
            );
            m.insert(
                "dict",
                Func::variadic([], Type::Interface, |a| {
                    let map = Map::new(Type::String, Type::Interface);
                    for pair in a.chunks(2) {
                        let k = Str::from(kalypso_gotmpl::fmt::sprint_value(&pair[0]));
                        map.insert(MapKey::String(k), pair.get(1).cloned().unwrap_or(Value::Nil));
                    }
                    Ok(Value::Map(map))
                }),
            );
            m.insert(
                "set",
                Func::new(
                    [Type::string_interface_map(), Type::String, Type::Interface],
                    |a| {
                        if let Some(m) = a[0].as_map() {
                            if m.is_nil() {
                                return Err(FuncError::new("assignment to entry in nil map"));
                            }
                            m.insert(
                                MapKey::String(a[1].as_string().cloned().unwrap_or_default()),
                                a[2].clone(),
                            );
                        }
                        Ok(a[0].clone())
                    },
                ),
            );
            m.insert(
                "fail",
                Func::new([Type::String], |a| {
                    Err(FuncError::new(
                        a[0].as_string().map(|s| s.to_string()).unwrap_or_default(),
                    ))
                }),
            );
            m.insert("float", Func::new([Type::FLOAT64], |a| Ok(a[0].clone())));
            m.insert(
                "i8",
                Func::new([Type::Int(kalypso_gotmpl::IntKind::Int8)], |a| Ok(a[0].clone())),
            );
            Arc::new(m)
        })
        .clone()
}

fn data() -> Value {
    let list = Value::List(List::interfaces(vec![
        Value::string("a"),
        Value::int(1),
        Value::float(2.5),
        Value::Nil,
        Value::Bool(true),
    ]));
    let nested = Value::Map(Map::string_interface([
        (
            "inner",
            Value::Map(Map::string_interface([("leaf", Value::string("deep"))])),
        ),
        ("list", list.clone()),
    ]));
    Value::Map(Map::string_interface([
        ("name", Value::string("kalypso")),
        ("count", Value::int(3)),
        ("pi", Value::float(3.25)),
        ("nil", Value::Nil),
        ("list", list),
        ("nested", nested),
        (
            "labels",
            Value::Map(Map::string_string([("env", "dev"), ("app", "x")])),
        ),
        ("empty", Value::Map(Map::nil(Type::String, Type::String))),
    ]))
}

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    let Ok(t) = Template::parse("template", text, funcs()) else {
        return;
    };
    let limits = Limits {
        max_steps: 20_000,
        max_depth: 200,
        max_output: 1 << 16,
        max_alloc: 1 << 22,
        max_data_depth: 100,
    };
    let mut out = Vec::new();
    let _ = t.execute(&data(), &mut out, &limits);
    // Output is checked after each write, so it may overshoot by one printed value, whose
    // size the step limit bounds.
    assert!(out.len() < 1 << 28);
});
