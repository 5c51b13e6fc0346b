//! The builtin functions of `text/template`, after Go's `text/template/funcs.go`.
//!
//! Builtins receive executor values ([`Val`]) rather than plain [`Value`]s because, like
//! Go's, they take `reflect.Value` parameters: they see the difference between a missing
//! value, a nil interface and a concrete value (`len` of a missing value fails differently
//! from `len` of nil; `index` of a `map[string]interface {}` yields an interface element).
//! Comparison follows Go's `basicKind` rules and error messages exactly.

use std::cmp::Ordering;

use crate::fmt;
use crate::reflect::{
    ParamType, Val, deref_type_name, elem_val, has_type, printable, truncate_int, truncate_uint, zero_value,
};
use crate::str::Str;
use crate::unicode;
use crate::value::{List, MapKey, Type, UintKind, Value};

/// A builtin function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    And,
    Call,
    Html,
    Index,
    Slice,
    Js,
    Len,
    Not,
    Or,
    Print,
    Printf,
    Println,
    Urlquery,
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
    Ne,
}

static STRING: Type = Type::String;
static INTERFACE: Type = Type::Interface;

const REFLECT: ParamType<'static> = ParamType::Reflect;
const ANY: ParamType<'static> = ParamType::Go(&INTERFACE);

impl Builtin {
    /// The builtin called `name`.
    pub fn lookup(name: &str) -> Option<Builtin> {
        Some(match name {
            "and" => Builtin::And,
            "call" => Builtin::Call,
            "html" => Builtin::Html,
            "index" => Builtin::Index,
            "slice" => Builtin::Slice,
            "js" => Builtin::Js,
            "len" => Builtin::Len,
            "not" => Builtin::Not,
            "or" => Builtin::Or,
            "print" => Builtin::Print,
            "printf" => Builtin::Printf,
            "println" => Builtin::Println,
            "urlquery" => Builtin::Urlquery,
            "eq" => Builtin::Eq,
            "ge" => Builtin::Ge,
            "gt" => Builtin::Gt,
            "le" => Builtin::Le,
            "lt" => Builtin::Lt,
            "ne" => Builtin::Ne,
            _ => return None,
        })
    }

    /// Go's signature: fixed parameters and the variadic element type.
    pub fn arity(self) -> (&'static [ParamType<'static>], Option<ParamType<'static>>) {
        const ONE: &[ParamType<'static>] = &[REFLECT];
        const TWO: &[ParamType<'static>] = &[REFLECT, REFLECT];
        const FORMAT: &[ParamType<'static>] = &[ParamType::Go(&STRING)];
        match self {
            Builtin::And | Builtin::Or | Builtin::Call | Builtin::Index | Builtin::Slice | Builtin::Eq => {
                (ONE, Some(REFLECT))
            }
            Builtin::Html | Builtin::Js | Builtin::Urlquery | Builtin::Print | Builtin::Println => {
                (&[], Some(ANY))
            }
            Builtin::Printf => (FORMAT, Some(ANY)),
            Builtin::Len | Builtin::Not => (ONE, None),
            Builtin::Ge | Builtin::Gt | Builtin::Le | Builtin::Lt | Builtin::Ne => (TWO, None),
        }
    }
}

/// Go's `truth`: `isTrue(indirectInterface(v))`.
pub(crate) fn truth(v: &Val) -> bool {
    v.inner().is_some_and(Value::is_true)
}

fn values(args: Vec<Val>) -> Vec<Value> {
    args.into_iter()
        .map(|v| match v {
            Val::Missing => Value::Nil,
            Val::Iface(v) | Val::Conc(v) => v,
        })
        .collect()
}

fn string(s: Vec<u8>) -> Val {
    Val::Conc(Value::String(Str::from(s)))
}

/// Why a builtin failed.
pub(crate) enum CallError {
    /// Go's error text.
    Go(String),
    /// The result would exceed the output limit.
    TooLarge,
}

impl From<String> for CallError {
    fn from(s: String) -> CallError {
        CallError::Go(s)
    }
}

/// Calls builtin `b` (other than `and`/`or`) with evaluated arguments. `callee` is the text of
/// `call`'s first argument; results longer than `limit` bytes fail with
/// [`CallError::TooLarge`].
pub(crate) fn call(b: Builtin, callee: &str, args: Vec<Val>, limit: usize) -> Result<Val, CallError> {
    let r = call_inner(b, callee, args, limit)?;
    if let Val::Conc(Value::String(s)) = &r
        && s.len() > limit
    {
        return Err(CallError::TooLarge);
    }
    Ok(r)
}

fn call_inner(b: Builtin, callee: &str, args: Vec<Val>, limit: usize) -> Result<Val, CallError> {
    let mut args = args;
    Ok(match b {
        Builtin::And | Builtin::Or => return Err(CallError::Go("unreachable".to_owned())),
        Builtin::Call => {
            let f = args.first().and_then(Val::inner);
            return Err(CallError::Go(match f {
                None => "call of nil".to_owned(),
                Some(v) => format!("non-function {callee} of type {}", v.type_name()),
            }));
        }
        Builtin::Print => string(fmt::sprint(&values(args))),
        Builtin::Println => string(fmt::sprintln(&values(args))),
        Builtin::Printf => {
            let vals = values(args);
            let format = match vals.first() {
                Some(Value::String(s)) => s.clone(),
                _ => Str::empty(),
            };
            let mut out = Vec::new();
            if !fmt::write_sprintf_bounded(&mut out, format.as_bytes(), &vals[1..], limit) {
                return Err(CallError::TooLarge);
            }
            string(out)
        }
        Builtin::Html => string(html_escape(&eval_args(values(args)))),
        Builtin::Js => string(js_escape(&eval_args(values(args)))),
        Builtin::Urlquery => string(query_escape(&eval_args(values(args)))),
        Builtin::Len => Val::Conc(Value::int(length(&args[0])? as i64)),
        Builtin::Not => Val::Conc(Value::Bool(!truth(&args[0]))),
        Builtin::Index => {
            let indexes = args.split_off(1);
            index(args.swap_remove(0), &indexes)?
        }
        Builtin::Slice => {
            let indexes = args.split_off(1);
            slice(args.swap_remove(0), &indexes)?
        }
        Builtin::Eq => {
            let rest = args.split_off(1);
            Val::Conc(Value::Bool(eq(&args[0], &rest)?))
        }
        Builtin::Ne => Val::Conc(Value::Bool(!eq(&args[0], &args[1..])?)),
        Builtin::Lt => Val::Conc(Value::Bool(lt(&args[0], &args[1])?)),
        Builtin::Le => Val::Conc(Value::Bool(le(&args[0], &args[1])?)),
        Builtin::Gt => Val::Conc(Value::Bool(!le(&args[0], &args[1])?)),
        Builtin::Ge => Val::Conc(Value::Bool(!lt(&args[0], &args[1])?)),
    })
}

// ----- len, index, slice -----

fn length(item: &Val) -> Result<usize, String> {
    match item {
        Val::Missing => Err("reflect: call of reflect.Value.Type on zero Value".to_owned()),
        Val::Iface(Value::Nil) => Err("len of nil pointer".to_owned()),
        Val::Iface(v) | Val::Conc(v) => match v {
            Value::List(l) => Ok(l.len()),
            Value::Map(m) => Ok(m.len()),
            Value::String(s) => Ok(s.len()),
            other => Err(format!("len of type {}", deref_type_name(other))),
        },
    }
}

/// Go's `indexArg`: an index into something of length `cap`.
fn index_arg(index: Option<&Value>, cap: usize) -> Result<usize, String> {
    let x: i64 = match index {
        Some(Value::Int(i, _)) => *i,
        Some(Value::Uint(u, _)) => *u as i64,
        None => return Err("cannot index slice/array with nil".to_owned()),
        Some(other) => {
            return Err(format!(
                "cannot index slice/array with type {}",
                other.type_name()
            ));
        }
    };
    if x < 0 || x as u64 > cap as u64 {
        return Err(format!("index out of range: {x}"));
    }
    Ok(x as usize)
}

fn is_int_like(t: &Type) -> bool {
    matches!(t, Type::Int(_) | Type::Uint(_))
}

/// Go's `prepareArg` for a map key of type `key_type`.
fn prepare_key(value: Option<&Value>, key_type: &Type) -> Result<MapKey, String> {
    let Some(v) = value else {
        if !key_type.can_be_nil() {
            return Err(format!("value is nil; should be of type {key_type}"));
        }
        return Ok(MapKey::Nil);
    };
    let unhashable = || format!("runtime error: hash of unhashable type {}", v.type_name());
    if has_type(v, key_type) {
        return MapKey::from_value(v).ok_or_else(unhashable);
    }
    let v_int_like = matches!(v, Value::Int(..) | Value::Uint(..));
    if v_int_like && is_int_like(key_type) {
        let converted = match (v, key_type) {
            (Value::Int(i, _), Type::Int(k)) => Value::Int(truncate_int(*i, *k), *k),
            (Value::Uint(u, _), Type::Int(k)) => Value::Int(truncate_int(*u as i64, *k), *k),
            (Value::Int(i, _), Type::Uint(k)) => Value::Uint(truncate_uint(*i as u64, *k), *k),
            (Value::Uint(u, _), Type::Uint(k)) => Value::Uint(truncate_uint(*u, *k), *k),
            _ => return Err(unhashable()),
        };
        return MapKey::from_value(&converted).ok_or_else(unhashable);
    }
    Err(format!("value has type {}; should be {key_type}", v.type_name()))
}

fn index(item: Val, indexes: &[Val]) -> Result<Val, String> {
    let mut item = match item.inner() {
        None => return Err("index of untyped nil".to_owned()),
        Some(v) => Val::Conc(v.clone()),
    };
    for index in indexes {
        let index = index.inner();
        let v = match item {
            Val::Iface(Value::Nil) => return Err("index of nil pointer".to_owned()),
            Val::Missing => return Err("index of untyped nil".to_owned()),
            Val::Iface(v) | Val::Conc(v) => v,
        };
        item = match &v {
            Value::List(l) => {
                let x = index_arg(index, l.len())?;
                match l.get(x) {
                    Some(e) => elem_val(l.elem_type(), e.clone()),
                    None => return Err("reflect: slice index out of range".to_owned()),
                }
            }
            Value::String(s) => {
                let x = index_arg(index, s.len())?;
                match s.as_bytes().get(x) {
                    Some(&b) => Val::Conc(Value::Uint(u64::from(b), UintKind::Uint8)),
                    None => return Err("reflect: string index out of range".to_owned()),
                }
            }
            Value::Map(m) => {
                let key = prepare_key(index, m.key_type())?;
                match m.get(&key) {
                    Some(e) => elem_val(m.elem_type(), e),
                    None => elem_val(m.elem_type(), zero_value(m.elem_type())),
                }
            }
            other => return Err(format!("can't index item of type {}", deref_type_name(other))),
        };
    }
    Ok(item)
}

fn slice(item: Val, indexes: &[Val]) -> Result<Val, String> {
    let Some(item) = item.inner() else {
        return Err("slice of untyped nil".to_owned());
    };
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match item {
        Value::String(s) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".to_owned());
            }
            s.len()
        }
        Value::List(l) => l.len(),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let mut idx = [0usize, len, 0];
    for (i, index) in indexes.iter().enumerate() {
        idx[i] = index_arg(index.inner(), len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    Ok(Val::Conc(match item {
        Value::String(s) => Value::String(Str::from(&s.as_bytes()[idx[0]..idx[1]])),
        Value::List(l) => Value::List(List::new(
            l.elem_type().clone(),
            l.items()[idx[0]..idx[1]].to_vec(),
        )),
        _ => Value::Nil,
    }))
}

// ----- comparison -----

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Invalid,
    Bool,
    Complex,
    Int,
    Float,
    String,
    Uint,
}

fn basic_kind(v: Option<&Value>) -> Kind {
    match v {
        Some(Value::Bool(_)) => Kind::Bool,
        Some(Value::Int(..)) => Kind::Int,
        Some(Value::Uint(..)) => Kind::Uint,
        Some(Value::Float(..)) => Kind::Float,
        Some(Value::Complex(..)) => Kind::Complex,
        Some(Value::String(_)) => Kind::String,
        _ => Kind::Invalid,
    }
}

fn as_int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Int(i, _)) => *i,
        _ => 0,
    }
}

fn as_uint(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Uint(u, _)) => *u,
        _ => 0,
    }
}

fn as_float(v: Option<&Value>) -> f64 {
    match v {
        Some(Value::Float(f, _)) => *f,
        _ => 0.0,
    }
}

fn as_bytes(v: Option<&Value>) -> &[u8] {
    match v {
        Some(Value::String(s)) => s.as_bytes(),
        _ => b"",
    }
}

fn type_of(v: Option<&Value>) -> String {
    v.map_or_else(|| "<nil>".to_owned(), Value::type_name)
}

/// The reflect.Kind of a value, for `canCompare`.
fn reflect_kind(v: Option<&Value>) -> &'static str {
    match v {
        None => "invalid",
        Some(v) => v.kind_name(),
    }
}

fn is_nil(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Nil) => true,
        Some(Value::Map(m)) => m.is_nil(),
        Some(Value::List(l)) => l.is_nil(),
        _ => false,
    }
}

/// Whether Go considers the type comparable with `==`.
fn comparable(v: &Value) -> bool {
    match v {
        Value::List(_) | Value::Map(_) => false,
        Value::Object(o) if o.kind_name() != "ptr" => o
            .fields()
            .is_none_or(|f| f.iter().all(|(_, v)| matches!(v, Value::Nil) || comparable(v))),
        _ => true,
    }
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.kind_name() == "ptr" || y.kind_name() == "ptr" {
                return std::sync::Arc::ptr_eq(x, y);
            }
            x.type_name() == y.type_name()
                && match (x.fields(), y.fields()) {
                    (Some(fx), Some(fy)) => {
                        fx.len() == fy.len()
                            && fx
                                .iter()
                                .zip(fy.iter())
                                .all(|((_, a), (_, b))| values_equal(a, b))
                    }
                    _ => std::sync::Arc::ptr_eq(x, y),
                }
        }
        (Value::Nil, Value::Nil) => true,
        _ => match (MapKey::from_value(a), MapKey::from_value(b)) {
            (Some(x), Some(y)) => x == y && a.type_name() == b.type_name(),
            _ => matches!((a, b), (Value::Complex(r1, i1), Value::Complex(r2, i2)) if r1 == r2 && i1 == i2),
        },
    }
}

fn sprintf1(format: &str, args: &[Value]) -> String {
    String::from_utf8_lossy(&fmt::sprintf(format.as_bytes(), args)).into_owned()
}

fn shown(v: Option<&Value>) -> Value {
    v.cloned().unwrap_or(Value::Nil)
}

fn eq(arg1: &Val, rest: &[Val]) -> Result<bool, String> {
    let a1 = arg1.inner();
    if rest.is_empty() {
        return Err("missing argument for comparison".to_owned());
    }
    let k1 = basic_kind(a1);
    for arg in rest {
        let a = arg.inner();
        let k2 = basic_kind(a);
        let mut truth = false;
        if k1 != k2 {
            match (k1, k2) {
                (Kind::Int, Kind::Uint) => truth = as_int(a1) >= 0 && as_int(a1) as u64 == as_uint(a),
                (Kind::Uint, Kind::Int) => truth = as_int(a) >= 0 && as_uint(a1) == as_int(a) as u64,
                _ => {
                    if a1.is_some() && a.is_some() {
                        return Err(format!(
                            "incompatible types for comparison: {} and {}",
                            type_of(a1),
                            type_of(a)
                        ));
                    }
                }
            }
        } else {
            match k1 {
                Kind::Bool => {
                    truth = matches!((a1, a), (Some(Value::Bool(x)), Some(Value::Bool(y))) if x == y)
                }
                Kind::Complex => {
                    truth = matches!((a1, a), (Some(Value::Complex(r1, i1)), Some(Value::Complex(r2, i2))) if r1 == r2 && i1 == i2)
                }
                Kind::Float => truth = as_float(a1) == as_float(a),
                Kind::Int => truth = as_int(a1) == as_int(a),
                Kind::String => truth = as_bytes(a1) == as_bytes(a),
                Kind::Uint => truth = as_uint(a1) == as_uint(a),
                Kind::Invalid => {
                    let (r1, r2) = (reflect_kind(a1), reflect_kind(a));
                    if r1 != r2 && r1 != "invalid" && r2 != "invalid" {
                        return Err(sprintf1(
                            "non-comparable types %s: %v, %s: %v",
                            &[
                                printable(&shown(a1)),
                                Value::string(type_of(a1)),
                                Value::string(type_of(a)),
                                printable(&shown(a)),
                            ],
                        ));
                    }
                    if is_nil(a1) || is_nil(a) {
                        truth = is_nil(a) == is_nil(a1);
                    } else {
                        let (Some(x), Some(y)) = (a1, a) else {
                            continue;
                        };
                        if !comparable(y) {
                            return Err(sprintf1(
                                "non-comparable type %s: %v",
                                &[printable(y), Value::string(y.type_name())],
                            ));
                        }
                        truth = values_equal(x, y);
                    }
                }
            }
        }
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(arg1: &Val, arg2: &Val) -> Result<bool, String> {
    let a1 = arg1.inner();
    let k1 = basic_kind(a1);
    if k1 == Kind::Invalid {
        return Err("invalid type for comparison".to_owned());
    }
    let a2 = arg2.inner();
    let k2 = basic_kind(a2);
    if k2 == Kind::Invalid {
        return Err("invalid type for comparison".to_owned());
    }
    if k1 != k2 {
        return match (k1, k2) {
            (Kind::Int, Kind::Uint) => Ok(as_int(a1) < 0 || (as_int(a1) as u64) < as_uint(a2)),
            (Kind::Uint, Kind::Int) => Ok(as_int(a2) >= 0 && as_uint(a1) < as_int(a2) as u64),
            _ => Err(format!(
                "incompatible types for comparison: {} and {}",
                type_of(a1),
                type_of(a2)
            )),
        };
    }
    match k1 {
        Kind::Bool | Kind::Complex => Err("invalid type for comparison".to_owned()),
        Kind::Float => Ok(as_float(a1).partial_cmp(&as_float(a2)) == Some(Ordering::Less)),
        Kind::Int => Ok(as_int(a1) < as_int(a2)),
        Kind::String => Ok(as_bytes(a1) < as_bytes(a2)),
        Kind::Uint => Ok(as_uint(a1) < as_uint(a2)),
        Kind::Invalid => Err("invalid type for comparison".to_owned()),
    }
}

fn le(arg1: &Val, arg2: &Val) -> Result<bool, String> {
    let less = lt(arg1, arg2)?;
    if less {
        return Ok(true);
    }
    eq(arg1, std::slice::from_ref(arg2))
}

// ----- escaping -----

/// Go's `evalArgs`: one string argument as is, otherwise `fmt.Sprint` of the printable
/// values (missing values print `<no value>`).
fn eval_args(args: Vec<Value>) -> Vec<u8> {
    if args.len() == 1
        && let Value::String(s) = &args[0]
    {
        return s.as_bytes().to_vec();
    }
    let printable: Vec<Value> = args
        .iter()
        .map(|a| match a {
            Value::Nil => Value::string("<no value>"),
            v => printable(v),
        })
        .collect();
    fmt::sprint(&printable)
}

/// Go's `template.HTMLEscape`.
pub(crate) fn html_escape(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for &c in b {
        match c {
            0 => out.extend_from_slice("\u{FFFD}".as_bytes()),
            b'"' => out.extend_from_slice(b"&#34;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscape`.
pub(crate) fn js_escape(b: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let special =
            matches!(c, b'\\' | b'\'' | b'"' | b'<' | b'>' | b'&' | b'=') || !(b' '..0x80).contains(&c);
        if !special {
            out.push(c);
            i += 1;
            continue;
        }
        if c < 0x80 {
            match c {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\'' => out.extend_from_slice(b"\\'"),
                b'"' => out.extend_from_slice(b"\\\""),
                b'<' => out.extend_from_slice(b"\\u003C"),
                b'>' => out.extend_from_slice(b"\\u003E"),
                b'&' => out.extend_from_slice(b"\\u0026"),
                b'=' => out.extend_from_slice(b"\\u003D"),
                _ => {
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[usize::from(c >> 4)]);
                    out.push(HEX[usize::from(c & 0xF)]);
                }
            }
            i += 1;
        } else {
            let (r, size) = unicode::decode_rune(&b[i..]);
            if unicode::is_print(r) {
                out.extend_from_slice(&b[i..i + size]);
            } else {
                out.extend_from_slice(format!("\\u{r:04X}").as_bytes());
            }
            i += size;
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub(crate) fn query_escape(b: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(b.len());
    for &c in b {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
            out.push(c);
        } else if c == b' ' {
            out.push(b'+');
        } else {
            out.push(b'%');
            out.push(HEX[usize::from(c >> 4)]);
            out.push(HEX[usize::from(c & 0xF)]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::IntKind;

    #[test]
    fn escapes_like_go() {
        assert_eq!(
            html_escape(b"<a href=\"x\">Tom & Jerry's</a>"),
            b"&lt;a href=&#34;x&#34;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;".to_vec()
        );
        assert_eq!(
            js_escape("it's \"q\" \\ =&".as_bytes()),
            b"it\\'s \\\"q\\\" \\\\ \\u003D\\u0026".to_vec()
        );
        assert_eq!(js_escape("é\u{2028}".as_bytes()), "é\\u2028".as_bytes().to_vec());
        assert_eq!(
            query_escape("a b&c=d/é?x=1".as_bytes()),
            b"a+b%26c%3Dd%2F%C3%A9%3Fx%3D1".to_vec()
        );
    }

    #[test]
    fn compares_like_go() {
        let i = |n| Val::Conc(Value::int(n));
        let f = |x| Val::Conc(Value::float(x));
        assert_eq!(eq(&i(1), &[i(1)]), Ok(true));
        assert_eq!(
            eq(&i(1), &[f(1.0)]),
            Err("incompatible types for comparison: int and float64".to_owned())
        );
        assert_eq!(eq(&Val::Missing, &[Val::Missing]), Ok(true));
        let u = Val::Conc(Value::Uint(3, UintKind::Uint));
        assert_eq!(lt(&u, &i(5)), Ok(true));
        assert_eq!(lt(&i(-1), &u), Ok(true));
        let l = Val::Iface(Value::List(List::strings(["a", "b", "c"])));
        assert_eq!(
            eq(&l, std::slice::from_ref(&l)),
            Err("non-comparable type [a b c]: []string".to_owned())
        );
        assert_eq!(lt(&Val::Conc(Value::Int(1, IntKind::Int8)), &i(2)), Ok(true));
    }
}
