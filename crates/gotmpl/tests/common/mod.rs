//! Test-only functions with Sprig's Go signatures, so engine behaviour (argument conversion,
//! error wrapping, interface results) can be tested without the Sprig crate.

#![allow(dead_code)]

use std::sync::Arc;

use kalypso_gotmpl::{Func, FuncError, FuncMap, List, Map, MapKey, Str, Type, Value};

fn to_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i, _) => *i,
        Value::Uint(u, _) => *u as i64,
        Value::Float(f, _) => *f as i64,
        Value::String(s) => s.to_string().parse().unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// A small Sprig-like function map.
pub fn funcs() -> Arc<FuncMap> {
    let mut m = FuncMap::new();
    let s = |v: &Value| v.as_string().map(|s| s.to_string()).unwrap_or_default();
    m.insert(
        "upper",
        Func::new([Type::String], move |a| {
            Ok(Value::string(s(&a[0]).to_uppercase()))
        }),
    );
    m.insert(
        "lower",
        Func::new([Type::String], move |a| {
            Ok(Value::string(s(&a[0]).to_lowercase()))
        }),
    );
    m.insert(
        "add",
        Func::variadic([], Type::Interface, |a| {
            Ok(Value::int64(a.iter().map(to_i64).sum()))
        }),
    );
    m.insert(
        "add1",
        Func::new([Type::Interface], |a| Ok(Value::int64(to_i64(&a[0]) + 1))),
    );
    m.insert(
        "sub",
        Func::new([Type::Interface, Type::Interface], |a| {
            Ok(Value::int64(to_i64(&a[0]) - to_i64(&a[1])))
        }),
    );
    m.insert(
        "div",
        Func::new([Type::Interface, Type::Interface], |a| {
            let d = to_i64(&a[1]);
            if d == 0 {
                return Err(FuncError::new("runtime error: integer divide by zero"));
            }
            Ok(Value::int64(to_i64(&a[0]) / d))
        }),
    );
    m.insert(
        "fail",
        Func::new([Type::String], move |a| Err(FuncError::new(s(&a[0])))),
    );
    m.insert(
        "list",
        Func::variadic([], Type::Interface, |a| {
            Ok(Value::List(List::interfaces(a.to_vec())))
        }),
    );
    m.insert(
        "until",
        Func::new([Type::INT], |a| {
            let n = to_i64(&a[0]);
            Ok(Value::List(List::new(
                Type::INT,
                (0..n.max(0)).map(Value::int).collect(),
            )))
        }),
    );
    m.insert(
        "quote",
        Func::variadic([], Type::Interface, |a| {
            let parts: Vec<String> = a
                .iter()
                .filter(|v| !v.is_nil())
                .map(|v| kalypso_gotmpl::strconv::quote(&kalypso_gotmpl::fmt::sprint_value(v)))
                .collect();
            Ok(Value::string(parts.join(" ")))
        }),
    );
    m.insert(
        "replace",
        Func::new([Type::String, Type::String, Type::String], move |a| {
            Ok(Value::string(s(&a[2]).replace(&s(&a[0]), &s(&a[1]))))
        }),
    );
    m.insert(
        "hasKey",
        Func::new([Type::string_interface_map(), Type::String], |a| {
            let key = MapKey::String(a[1].as_string().cloned().unwrap_or_default());
            Ok(Value::Bool(a[0].as_map().is_some_and(|m| m.get(&key).is_some())))
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
                if let Some(map) = a[0].as_map() {
                    map.insert(
                        MapKey::String(a[1].as_string().cloned().unwrap_or_default()),
                        a[2].clone(),
                    );
                }
                Ok(a[0].clone())
            },
        ),
    );
    m.insert(
        "first",
        Func::new([Type::Interface], |a| match &a[0] {
            Value::List(l) => Ok(l.get(0).cloned().unwrap_or(Value::Nil)),
            other => Err(FuncError::new(format!(
                "Cannot find first on type {}",
                other.kind_name()
            ))),
        }),
    );
    m.insert(
        "slice",
        Func::variadic([Type::Interface], Type::Interface, |a| match &a[0] {
            Value::List(l) => {
                let start = a.get(1).map_or(0, to_i64) as usize;
                let end = a.get(2).map_or(l.len() as i64, to_i64) as usize;
                if start > end || end > l.len() {
                    return Err(FuncError::new("reflect.Value.Slice: slice index out of bounds"));
                }
                Ok(Value::List(List::interfaces(l.items()[start..end].to_vec())))
            }
            other => Err(FuncError::new(format!(
                "list should be type of slice or array but {}",
                other.kind_name()
            ))),
        }),
    );
    Arc::new(m)
}
