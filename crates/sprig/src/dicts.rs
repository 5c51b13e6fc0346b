//! Sprig's dictionary functions (`dict.go`): `dict`, `get`/`set`/`unset`, `keys`, `pick`,
//! `merge` (imdario/mergo v0.3.11 semantics), `deepCopy`, `dig`...
//!
//! Dicts are Go maps, i.e. references: `set`, `unset` and `merge` mutate the map they are
//! given, and every other reference sees the change. Go iterates maps in random order, so
//! `keys` and `values` have no defined order in the original; here they follow Go's sorted
//! key order, which is one of the orders Go can produce.

use kalypso_gotmpl::{FuncError, FuncMap, FuncResult, List, Map, MapKey, Type, Value};

use crate::util::{
    arg, arg_map, arg_str, dict_type, func, interfaces_value, register, skey, strings_value, strval, variadic,
};

/// Registers the dict functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || Type::String;
    let any = || Type::Interface;
    register(
        m,
        &["dict"],
        variadic(vec![], any(), |a| {
            let d = Map::new(Type::String, Type::Interface);
            for pair in a.chunks(2) {
                let key = skey(strval(&pair[0]));
                let value = pair.get(1).cloned().unwrap_or_else(|| Value::string(""));
                d.insert(key, value);
            }
            Ok(Value::Map(d))
        }),
    );
    register(
        m,
        &["get"],
        func(vec![dict_type(), s()], |a| {
            Ok(arg_map(a, 0)
                .get(&skey(arg_str(a, 1)))
                .unwrap_or_else(|| Value::string("")))
        }),
    );
    register(
        m,
        &["set"],
        func(vec![dict_type(), s(), any()], |a| {
            let d = unfrozen(arg_map(a, 0))?;
            if d.is_nil() {
                return Err(FuncError::new("assignment to entry in nil map"));
            }
            d.insert(skey(arg_str(a, 1)), arg(a, 2));
            Ok(Value::Map(d))
        }),
    );
    register(
        m,
        &["unset"],
        func(vec![dict_type(), s()], |a| {
            let d = unfrozen(arg_map(a, 0))?;
            d.remove(&skey(arg_str(a, 1)));
            Ok(Value::Map(d))
        }),
    );
    register(
        m,
        &["hasKey"],
        func(vec![dict_type(), s()], |a| {
            Ok(Value::Bool(arg_map(a, 0).get(&skey(arg_str(a, 1))).is_some()))
        }),
    );
    register(
        m,
        &["pluck"],
        variadic(vec![s()], dict_type(), |a| {
            let key = skey(arg_str(a, 0));
            let found = a[1..]
                .iter()
                .filter_map(|d| d.as_map().and_then(|d| d.get(&key)))
                .collect();
            Ok(interfaces_value(found))
        }),
    );
    register(
        m,
        &["keys"],
        variadic(vec![], dict_type(), |a| {
            let mut keys = Vec::new();
            for d in a.iter().filter_map(Value::as_map) {
                for k in d.snapshot().keys() {
                    if let MapKey::String(s) = k {
                        keys.push(s.as_bytes().to_vec());
                    }
                }
            }
            Ok(strings_value(keys))
        }),
    );
    register(
        m,
        &["pick"],
        variadic(vec![dict_type()], s(), |a| {
            let d = arg_map(a, 0);
            let res = Map::new(Type::String, Type::Interface);
            for k in &a[1..] {
                let key = skey(k.as_string().cloned().unwrap_or_default());
                if let Some(v) = d.get(&key) {
                    res.insert(key, v);
                }
            }
            Ok(Value::Map(res))
        }),
    );
    register(
        m,
        &["omit"],
        variadic(vec![dict_type()], s(), |a| {
            let d = arg_map(a, 0);
            let omit: Vec<MapKey> = a[1..]
                .iter()
                .map(|k| skey(k.as_string().cloned().unwrap_or_default()))
                .collect();
            let res = Map::new(Type::String, Type::Interface);
            for (k, v) in d.snapshot().iter() {
                if !omit.contains(k) {
                    res.insert(k.clone(), v.clone());
                }
            }
            Ok(Value::Map(res))
        }),
    );
    register(
        m,
        &["values"],
        func(vec![dict_type()], |a| {
            Ok(interfaces_value(
                arg_map(a, 0).snapshot().values().cloned().collect(),
            ))
        }),
    );
    register(
        m,
        &["merge", "mustMerge"],
        variadic(vec![dict_type()], dict_type(), |a| {
            checked_all(a, || merge(a, false))?
        }),
    );
    register(
        m,
        &["mergeOverwrite", "mustMergeOverwrite"],
        variadic(vec![dict_type()], dict_type(), |a| {
            checked_all(a, || merge(a, true))?
        }),
    );
    register(
        m,
        &["deepCopy", "mustDeepCopy"],
        func(vec![any()], |a| match arg(a, 0) {
            Value::Nil => Err(FuncError::new(
                "reflect: call of reflect.Value.Type on zero Value",
            )),
            v => kalypso_gotmpl::budget::with_data(&v, || v.deep_copy()),
        }),
    );
    register(m, &["dig"], variadic(vec![], any(), dig));
}

/// Sprig's `merge`/`mergeOverwrite`: mergo.Merge(&dst, src) for each source in turn.
fn merge(a: &[Value], overwrite: bool) -> FuncResult {
    let mut dst = arg_map(a, 0);
    for src in &a[1..] {
        let Some(src) = src.as_map() else { continue };
        if dst.is_nil() && !src.is_nil() {
            dst = Map::new(dst.key_type().clone(), dst.elem_type().clone());
        }
        merge_maps(&dst, src, overwrite)?;
    }
    Ok(Value::Map(dst))
}

/// mergo's emptiness test (like Sprig's `empty`, except that complex numbers are never
/// empty).
fn mergo_empty(v: &Value) -> bool {
    match v {
        Value::Complex(..) => false,
        other => crate::util::is_empty(other),
    }
}

/// `map`, unless it is frozen (shared by several renders, so no template may change it).
fn unfrozen(map: Map) -> Result<Map, FuncError> {
    if map.is_frozen() { Err(frozen()) } else { Ok(map) }
}

fn frozen() -> FuncError {
    FuncError::new("cannot change a map shared by several renders")
}

/// Sets `dst[key] = value`, with reflection's assignability check for typed maps.
fn set_map_index(dst: &Map, key: MapKey, value: Value, src_elem: &Type) -> Result<(), FuncError> {
    if dst.is_frozen() {
        return Err(frozen());
    }
    let elem = dst.elem_type();
    let ok = match elem {
        Type::Interface => true,
        t => value.type_of().as_ref() == Some(t) && src_elem == t,
    };
    if !ok {
        return Err(FuncError::new(format!(
            "reflect.Value.SetMapIndex: value of type {src_elem} is not assignable to type {elem}"
        )));
    }
    dst.insert(key, value);
    Ok(())
}

/// Runs `f` if every argument is within the data limits of the execution, on a stack deep
/// enough for the deepest (merging recurses).
fn checked_all<R>(a: &[Value], f: impl FnOnce() -> R) -> Result<R, FuncError> {
    let list = Value::List(List::interfaces(a.to_vec()));
    kalypso_gotmpl::budget::with_data(&list, f)
}

/// mergo's `deepMerge` for two maps.
fn merge_maps(dst: &Map, src: &Map, overwrite: bool) -> Result<(), FuncError> {
    if dst.is_nil() {
        // A nil map nested inside another value cannot be replaced in place.
        return Ok(());
    }
    let src_elem_type = src.elem_type().clone();
    let src_is_empty = src.is_empty();
    for (key, src_elem) in src.snapshot().iter() {
        let dst_elem = dst.get(key);
        if src_elem.is_nil() {
            if overwrite {
                set_map_index(dst, key.clone(), Value::Nil, &src_elem_type)?;
            }
            continue;
        }
        let src_kind_is_map = matches!(src_elem, Value::Map(_));
        let src_kind_is_slice = matches!(src_elem, Value::List(_));
        match src_elem {
            Value::Map(src_map) => {
                if let Some(Value::Map(dst_map)) = &dst_elem
                    && (!dst_map.is_nil() || src_map.is_nil())
                {
                    merge_maps(dst_map, src_map, overwrite)?;
                }
            }
            Value::List(_) => {
                let mut dst_slice = match &dst_elem {
                    None | Some(Value::Nil) => Value::List(List::new(
                        src_elem.type_of().map_or(Type::Interface, |t| match t {
                            Type::Slice(e) => (*e).clone(),
                            other => other,
                        }),
                        Vec::new(),
                    )),
                    Some(v) => v.clone(),
                };
                if !src_is_empty && (overwrite || dst.is_empty()) {
                    dst_slice = src_elem.clone();
                }
                set_map_index(dst, key.clone(), dst_slice, &src_elem_type)?;
            }
            _ => {}
        }
        if let Some(d) = &dst_elem
            && !mergo_empty(d)
            && (src_kind_is_map || src_kind_is_slice)
        {
            continue;
        }
        let dst_empty = dst_elem.as_ref().is_none_or(mergo_empty);
        if overwrite || dst_empty {
            set_map_index(dst, key.clone(), src_elem.clone(), &src_elem_type)?;
        }
    }
    Ok(())
}

/// Go's panic text for a failed `x.(T)` on an `interface {}`.
fn interface_conversion(v: &Value, want: &str) -> FuncError {
    FuncError::new(format!(
        "interface conversion: interface {{}} is {}, not {want}",
        if v.is_nil() {
            "nil".to_owned()
        } else {
            v.type_name()
        }
    ))
}

/// Sprig's `dig "a" "b" default dict`: walks nested `map[string]interface {}` values.
fn dig(a: &[Value]) -> FuncResult {
    if a.len() < 3 {
        return Err(FuncError::new("dig needs at least three arguments"));
    }
    let last = &a[a.len() - 1];
    let mut dict = match last {
        Value::Map(m) if m.type_of() == dict_type() => m.clone(),
        other => return Err(interface_conversion(other, "map[string]interface {}")),
    };
    let default = a[a.len() - 2].clone();
    let mut keys = Vec::with_capacity(a.len() - 2);
    for k in &a[..a.len() - 2] {
        match k {
            Value::String(s) => keys.push(s.clone()),
            other => return Err(interface_conversion(other, "string")),
        }
    }
    for (i, k) in keys.iter().enumerate() {
        let Some(step) = dict.get(&skey(k.clone())) else {
            return Ok(default);
        };
        if i == keys.len() - 1 {
            return Ok(step);
        }
        dict = match &step {
            Value::Map(m) if m.type_of() == dict_type() => m.clone(),
            other => return Err(interface_conversion(other, "map[string]interface {}")),
        };
    }
    Ok(default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcs;

    fn call(name: &str, args: &[Value]) -> FuncResult {
        funcs().get(name).expect(name).call(args)
    }

    fn d(entries: &[(&str, Value)]) -> Map {
        Map::string_interface(entries.iter().map(|(k, v)| (*k, v.clone())))
    }

    #[test]
    fn dict_and_set_mutate_in_place() {
        let m = call("dict", &[Value::string("a"), Value::int(1), Value::string("b")]).unwrap();
        let map = m.as_map().unwrap().clone();
        assert_eq!(format!("{:?}", map.get_str("b").unwrap()), "\"\"");
        call("set", &[m.clone(), Value::string("c"), Value::int(3)]).unwrap();
        assert_eq!(map.len(), 3);
        call("unset", &[m.clone(), Value::string("a")]).unwrap();
        assert_eq!(map.len(), 2);
        let key = call("dict", &[Value::int(1), Value::string("x")]).unwrap();
        assert!(key.as_map().unwrap().get_str("1").is_some());
    }

    #[test]
    fn frozen_maps_are_never_changed() {
        let nested = d(&[("x", Value::int(1))]);
        let Value::Map(frozen) = Value::Map(d(&[("n", Value::Map(nested))])).frozen_copy() else {
            panic!("not a map")
        };
        let before = format!("{frozen:?}");
        let src = Value::Map(d(&[
            ("n", Value::Map(d(&[("y", Value::int(2))]))),
            ("z", Value::int(3)),
        ]));
        for (name, args) in [
            (
                "set",
                vec![Value::Map(frozen.clone()), Value::string("a"), Value::int(1)],
            ),
            ("unset", vec![Value::Map(frozen.clone()), Value::string("n")]),
            ("merge", vec![Value::Map(frozen.clone()), src.clone()]),
            ("mergeOverwrite", vec![Value::Map(frozen.clone()), src.clone()]),
            // Only the map nested in the first argument would change.
            (
                "merge",
                vec![Value::Map(d(&[("n", frozen.get_str("n").unwrap())])), src.clone()],
            ),
        ] {
            let err = call(name, &args).unwrap_err();
            assert!(
                err.to_string().contains("shared by several renders"),
                "{name}: {err}"
            );
        }
        assert_eq!(format!("{frozen:?}"), before);
        assert!(crate::CHANGE_MAPS.iter().all(|f| funcs().get(f).is_some()));
    }

    #[test]
    fn merge_follows_mergo() {
        let dst = d(&[
            ("a", Value::int(1)),
            ("n", Value::Map(d(&[("x", Value::int(1))]))),
        ]);
        let src = d(&[
            ("a", Value::int(2)),
            ("b", Value::int(3)),
            ("n", Value::Map(d(&[("y", Value::int(2))]))),
        ]);
        let out = call("merge", &[Value::Map(dst.clone()), Value::Map(src)]).unwrap();
        assert!(out.as_map().unwrap().ptr_eq(&dst));
        assert!(matches!(dst.get_str("a"), Some(Value::Int(1, _))));
        assert!(matches!(dst.get_str("b"), Some(Value::Int(3, _))));
        let n = dst.get_str("n").unwrap();
        assert_eq!(n.as_map().unwrap().len(), 2);

        let dst = d(&[("a", Value::string("x")), ("b", Value::int(5))]);
        let src = d(&[("a", Value::string("")), ("b", Value::int(0))]);
        call("mergeOverwrite", &[Value::Map(dst.clone()), Value::Map(src)]).unwrap();
        assert!(matches!(dst.get_str("b"), Some(Value::Int(0, _))));
    }

    #[test]
    fn dig_walks_nested_dicts() {
        let inner = d(&[("b", Value::string("found"))]);
        let outer = Value::Map(d(&[("a", Value::Map(inner))]));
        let got = call(
            "dig",
            &[
                Value::string("a"),
                Value::string("b"),
                Value::string("def"),
                outer.clone(),
            ],
        )
        .unwrap();
        assert_eq!(format!("{got:?}"), "\"found\"");
        let got = call("dig", &[Value::string("z"), Value::string("def"), outer.clone()]).unwrap();
        assert_eq!(format!("{got:?}"), "\"def\"");
        let err = call(
            "dig",
            &[
                Value::string("a"),
                Value::string("b"),
                Value::string("c"),
                Value::string("d"),
                outer,
            ],
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "interface conversion: interface {} is string, not map[string]interface {}"
        );
    }
}
