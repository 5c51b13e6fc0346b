//! Sprig's list functions (`list.go`): `list`, `append`, `first`, `uniq`, `slice`, `chunk`...
//!
//! Sprig reaches list items through reflection, so any slice type works (`[]string` from
//! `splitList`, `[]int` from `until`), results are `[]interface {}`, and anything else fails
//! with Sprig's "Cannot ... on type KIND" message. A nil argument makes Go's reflection
//! dereference a nil type, which surfaces as Go's nil-pointer runtime error. The non-`must`
//! variants panic where the `must` ones return an error; the template engine reports both the
//! same way, so each pair shares one implementation.

use kalypso_gotmpl::{FuncError, FuncMap, FuncResult, List, Type, Value, budget};

/// The bytes one list element takes, for reserving allocations.
const SLOT: usize = size_of::<Value>();

use crate::cast::to_int;
use crate::util::{
    NIL_DEREF, arg, arg_int, deep_equal, func, interfaces_value, is_empty, kind_or_nil_panic, nil_interfaces,
    register, variadic,
};

/// Registers the list functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let any = || Type::Interface;
    register(
        m,
        &["list", "tuple"],
        variadic(vec![], any(), |a| Ok(interfaces_value(a.to_vec()))),
    );
    register(
        m,
        &["append", "push", "mustAppend", "mustPush"],
        func(vec![any(), any()], |a| {
            let mut items = items_of(&arg(a, 0), "Cannot push on type")?;
            budget::reserve((items.len() + 1).saturating_mul(SLOT))?;
            items.push(arg(a, 1));
            Ok(interfaces_value(items))
        }),
    );
    register(
        m,
        &["prepend", "mustPrepend"],
        func(vec![any(), any()], |a| {
            let rest = items_of(&arg(a, 0), "Cannot prepend on type")?;
            budget::reserve((rest.len() + 1).saturating_mul(SLOT))?;
            let mut items = vec![arg(a, 1)];
            items.extend(rest);
            Ok(interfaces_value(items))
        }),
    );
    register(
        m,
        &["first", "mustFirst"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot find first on type")?;
            Ok(items.first().cloned().unwrap_or(Value::Nil))
        }),
    );
    register(
        m,
        &["last", "mustLast"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot find last on type")?;
            Ok(items.last().cloned().unwrap_or(Value::Nil))
        }),
    );
    register(
        m,
        &["rest", "mustRest"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot find rest on type")?;
            if items.is_empty() {
                return Ok(nil_interfaces());
            }
            Ok(interfaces_value(items[1..].to_vec()))
        }),
    );
    register(
        m,
        &["initial", "mustInitial"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot find initial on type")?;
            if items.is_empty() {
                return Ok(nil_interfaces());
            }
            Ok(interfaces_value(items[..items.len() - 1].to_vec()))
        }),
    );
    register(
        m,
        &["reverse", "mustReverse"],
        func(vec![any()], |a| {
            let mut items = items_of(&arg(a, 0), "Cannot find reverse on type")?;
            items.reverse();
            Ok(interfaces_value(items))
        }),
    );
    register(
        m,
        &["compact", "mustCompact"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot compact on type")?;
            Ok(interfaces_value(
                items.into_iter().filter(|v| !is_empty(v)).collect(),
            ))
        }),
    );
    register(
        m,
        &["uniq", "mustUniq"],
        func(vec![any()], |a| {
            let items = items_of(&arg(a, 0), "Cannot find uniq on type")?;
            let mut dest: Vec<Value> = Vec::new();
            for item in items {
                if !dest.iter().any(|d| deep_equal(&item, d)) {
                    dest.push(item);
                }
            }
            Ok(interfaces_value(dest))
        }),
    );
    register(
        m,
        &["without", "mustWithout"],
        variadic(vec![any()], any(), |a| {
            let items = items_of(&arg(a, 0), "Cannot find without on type")?;
            let omit = &a[1.min(a.len())..];
            Ok(interfaces_value(
                items
                    .into_iter()
                    .filter(|item| !omit.iter().any(|o| deep_equal(item, o)))
                    .collect(),
            ))
        }),
    );
    register(
        m,
        &["has", "mustHas"],
        func(vec![any(), any()], |a| {
            let haystack = arg(a, 1);
            if haystack.is_nil() {
                return Ok(Value::Bool(false));
            }
            let needle = arg(a, 0);
            let items = items_of(&haystack, "Cannot find has on type")?;
            Ok(Value::Bool(items.iter().any(|item| deep_equal(&needle, item))))
        }),
    );
    register(
        m,
        &["slice", "mustSlice"],
        variadic(vec![any()], any(), |a| slice(a, to_int)),
    );
    register(
        m,
        &["concat"],
        variadic(vec![], any(), |a| {
            let total = a
                .iter()
                .map(|l| l.as_list().map_or(0, List::len))
                .fold(0usize, usize::saturating_add);
            budget::reserve(total.saturating_mul(SLOT))?;
            let mut res = Vec::new();
            for list in a {
                match list {
                    Value::List(l) => res.extend(l.items().iter().cloned()),
                    Value::Nil => return Err(FuncError::new(NIL_DEREF)),
                    other => {
                        return Err(FuncError::new(format!(
                            "Cannot concat type {} as list",
                            other.kind_name()
                        )));
                    }
                }
            }
            if res.is_empty() {
                return Ok(nil_interfaces());
            }
            Ok(interfaces_value(res))
        }),
    );
    register(
        m,
        &["chunk", "mustChunk"],
        func(vec![Type::INT, any()], |a| chunk(arg_int(a, 0), &arg(a, 1))),
    );
}

/// The items of a slice argument, or Sprig's error naming the argument's kind.
fn items_of(v: &Value, what: &str) -> Result<Vec<Value>, FuncError> {
    match v {
        Value::List(l) => Ok(l.items().to_vec()),
        other => {
            let kind = kind_or_nil_panic(other)?;
            Err(FuncError::new(format!("{what} {kind}")))
        }
    }
}

/// Sprig's `slice`: `list[start:end]` through reflection, keeping the slice's type; the
/// indices are converted with `to_int` (spf13/cast in v3, Sprig's own `toInt` in v2).
pub(crate) fn slice(a: &[Value], to_int: fn(&Value) -> i64) -> FuncResult {
    let list = arg(a, 0);
    let l = match &list {
        Value::List(l) => l,
        other => {
            let kind = kind_or_nil_panic(other)?;
            return Err(FuncError::new(format!(
                "list should be type of slice or array but {kind}"
            )));
        }
    };
    let len = l.len() as i64;
    if len == 0 {
        return Ok(Value::Nil);
    }
    let start = a.get(1).map_or(0, to_int);
    let end = a.get(2).map_or(len, to_int);
    if start < 0 || end < start || end > len {
        return Err(FuncError::new("reflect.Value.Slice: slice index out of bounds"));
    }
    Ok(Value::List(List::new(
        l.elem_type().clone(),
        l.items()[start as usize..end as usize].to_vec(),
    )))
}

const MAKESLICE_LEN: &str = "runtime error: makeslice: len out of range";

/// Go's `int(f)` for the float arithmetic in `chunk`.
fn float_to_int(f: f64) -> i64 {
    crate::cast::float_to_i64(f)
}

/// Sprig's `chunk`, including its float arithmetic (and the panics it leads to for sizes
/// below one).
fn chunk(size: i64, list: &Value) -> FuncResult {
    let items = items_of(list, "Cannot chunk type")?;
    let l = items.len() as i64;
    let chunks = float_to_int(((l - 1) as f64 / size as f64).floor() + 1.0);
    if chunks < 0 {
        return Err(FuncError::new(MAKESLICE_LEN));
    }
    let mut out = Vec::new();
    for i in 0..chunks {
        let mut clen = size;
        if i == chunks - 1 {
            clen = float_to_int((l as f64 % size as f64).floor());
            if clen == 0 {
                clen = size;
            }
        }
        if clen < 0 {
            return Err(FuncError::new(MAKESLICE_LEN));
        }
        let mut part = Vec::with_capacity(clen as usize);
        for j in 0..clen {
            let ix = i * size + j;
            match items.get(ix as usize) {
                Some(v) if ix >= 0 => part.push(v.clone()),
                _ => {
                    return Err(FuncError::new("reflect: slice index out of range"));
                }
            }
        }
        out.push(Value::List(List::interfaces(part)));
    }
    Ok(Value::List(List::new(Type::interface_slice(), out)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::funcs;

    fn call(name: &str, args: &[Value]) -> FuncResult {
        funcs().get(name).expect(name).call(args)
    }

    fn strs(items: &[&str]) -> Value {
        Value::List(List::interfaces(
            items.iter().map(|s| Value::string(*s)).collect(),
        ))
    }

    fn texts(v: &Value) -> Vec<String> {
        v.as_list()
            .unwrap()
            .items()
            .iter()
            .map(|x| format!("{x:?}"))
            .collect()
    }

    #[test]
    fn basic_list_functions() {
        let l = strs(&["a", "b", "c"]);
        assert_eq!(
            texts(&call("append", &[l.clone(), Value::string("d")]).unwrap()).len(),
            4
        );
        assert_eq!(
            format!("{:?}", call("first", std::slice::from_ref(&l)).unwrap()),
            "\"a\""
        );
        assert!(call("first", &[strs(&[])]).unwrap().is_nil());
        let rest = call("rest", &[strs(&[])]).unwrap();
        assert!(rest.as_list().unwrap().is_nil());
        assert_eq!(
            call("first", &[Value::string("abc")]).unwrap_err().message(),
            "Cannot find first on type string"
        );
        assert_eq!(
            call("append", &[Value::Nil, Value::int(1)])
                .unwrap_err()
                .message(),
            NIL_DEREF
        );
        assert!(matches!(
            call("has", &[Value::int(1), Value::Nil]),
            Ok(Value::Bool(false))
        ));
    }

    #[test]
    fn uniq_uses_deep_equal() {
        let l = Value::List(List::interfaces(vec![
            Value::int(1),
            Value::int(2),
            Value::int(1),
            Value::string("1"),
            Value::Nil,
            Value::Nil,
        ]));
        assert_eq!(call("uniq", &[l]).unwrap().as_list().unwrap().len(), 4);
    }

    #[test]
    fn slice_keeps_type_and_checks_bounds() {
        let l = Value::List(List::strings(["a", "b", "c"]));
        let s = call("slice", &[l.clone(), Value::int(1)]).unwrap();
        assert_eq!(s.type_name(), "[]string");
        assert_eq!(s.as_list().unwrap().len(), 2);
        assert!(call("slice", &[l, Value::int(2), Value::int(1)]).is_err());
    }

    #[test]
    fn chunk_splits() {
        let l = Value::List(List::interfaces((1..=5).map(Value::int).collect()));
        let c = call("chunk", &[Value::int(2), l.clone()]).unwrap();
        assert_eq!(c.type_name(), "[][]interface {}");
        assert_eq!(c.as_list().unwrap().len(), 3);
        assert_eq!(
            call("chunk", &[Value::int(0), l]).unwrap_err().message(),
            MAKESLICE_LEN
        );
    }
}
