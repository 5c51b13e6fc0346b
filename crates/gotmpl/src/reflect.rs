//! Go's `reflect` details that the executor ([`crate::exec`]) and the builtin functions
//! ([`crate::builtins`]) share: how a value is held during execution ([`Val`]: missing, an
//! interface slot, or concrete), zero values, exact type checks, the declared type of a
//! parameter, and integer truncation on assignment to a smaller type.

use std::sync::Arc;

use crate::str::Str;
use crate::value::{IntKind, List, Map, Struct, Type, UintKind, Value};

/// A value during execution, as Go's executor holds it in a `reflect.Value`.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// The invalid `reflect.Value`: a missing map key, no data, an absent pipeline.
    Missing,
    /// A value held in an `interface {}` slot (an element of `[]interface {}` or of a
    /// `map[string]interface {}`); `Value::Nil` is the nil interface.
    Iface(Value),
    /// A value of a concrete type.
    Conc(Value),
}

impl Val {
    /// Go's `indirectInterface`: the value inside, or `None` for invalid and nil interfaces.
    pub fn inner(&self) -> Option<&Value> {
        match self {
            Val::Missing | Val::Iface(Value::Nil) => None,
            Val::Iface(v) | Val::Conc(v) => Some(v),
        }
    }

    /// The value after a pipeline stage: interfaces are unwrapped, nil becomes invalid.
    pub(crate) fn unwrap_iface(self) -> Val {
        match self {
            Val::Iface(Value::Nil) => Val::Missing,
            Val::Iface(v) => Val::Conc(v),
            other => other,
        }
    }

    /// A function result: concrete, except nil which can only be an interface.
    pub fn from_result(v: Value) -> Val {
        match v {
            Value::Nil => Val::Iface(Value::Nil),
            v => Val::Conc(v),
        }
    }

    /// Go's static type name of the reflect value, as error messages show it.
    pub(crate) fn static_type(&self) -> String {
        match self {
            Val::Missing => "<invalid>".to_owned(),
            Val::Iface(_) => "interface {}".to_owned(),
            Val::Conc(v) => v.type_name(),
        }
    }

    /// The value a function parameter receives.
    pub(crate) fn into_value(self) -> Value {
        match self {
            Val::Missing => Value::Nil,
            Val::Iface(v) | Val::Conc(v) => v,
        }
    }
}

/// An element of a slice or map: an interface slot when the element type is `interface {}`.
pub(crate) fn elem_val(elem_type: &Type, v: Value) -> Val {
    if matches!(elem_type, Type::Interface) {
        Val::Iface(v)
    } else {
        Val::Conc(v)
    }
}

/// Go's zero value of a type (structs, which cannot be built here, become nil).
pub(crate) fn zero_value(t: &Type) -> Value {
    match t {
        Type::Interface | Type::Named(_) => Value::Nil,
        Type::Bool => Value::Bool(false),
        Type::Int(k) => Value::Int(0, *k),
        Type::Uint(k) => Value::Uint(0, *k),
        Type::Float(k) => Value::Float(0.0, *k),
        Type::Complex128 => Value::Complex(0.0, 0.0),
        Type::String => Value::String(Str::empty()),
        Type::Slice(e) => Value::List(List::nil((**e).clone())),
        Type::Map(k, e) => Value::Map(Map::nil((**k).clone(), (**e).clone())),
    }
}

/// Whether `v`'s dynamic type is exactly `t` (Go's `AssignableTo` for non-interface `t`).
pub(crate) fn has_type(v: &Value, t: &Type) -> bool {
    match (v, t) {
        (_, Type::Interface) => true,
        (Value::Bool(_), Type::Bool) => true,
        (Value::Int(_, a), Type::Int(b)) => a == b,
        (Value::Uint(_, a), Type::Uint(b)) => a == b,
        (Value::Float(_, a), Type::Float(b)) => a == b,
        (Value::Complex(..), Type::Complex128) => true,
        (Value::String(_), Type::String) => true,
        (Value::List(l), Type::Slice(e)) => l.elem_type() == &**e,
        (Value::Map(m), Type::Map(k, e)) => m.key_type() == &**k && m.elem_type() == &**e,
        (Value::Object(o), Type::Named(n)) => o.type_name() == *n,
        _ => false,
    }
}

/// A pointer object's type name without the `*` (the type after Go's `indirect`).
pub(crate) fn deref_type_name(v: &Value) -> String {
    match v {
        Value::Object(o) if o.kind_name() == "ptr" => {
            let n = o.type_name().to_string();
            n.strip_prefix('*').map(str::to_owned).unwrap_or(n)
        }
        other => other.type_name(),
    }
}

/// Go's `printableValue` followed by `fmt`: pointers to structs print as the struct.
pub(crate) fn printable(v: &Value) -> Value {
    if let Value::Object(o) = v
        && o.kind_name() == "ptr"
        && o.go_string().is_none()
        && let Some(fields) = o.fields()
    {
        return Value::Object(Arc::new(Struct::new(deref_type_name(v), fields)));
    }
    v.clone()
}

/// The declared type of a parameter: a Go type, or `reflect.Value` (builtins), or none (the
/// receiver of a chain).
#[derive(Clone, Copy)]
pub(crate) enum ParamType<'a> {
    None,
    Reflect,
    Go(&'a Type),
}

impl ParamType<'_> {
    pub(crate) fn can_be_nil(&self) -> bool {
        match self {
            ParamType::None | ParamType::Reflect => true,
            ParamType::Go(t) => t.can_be_nil(),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            ParamType::None => "<nil>".to_owned(),
            ParamType::Reflect => "reflect.Value".to_owned(),
            ParamType::Go(t) => t.to_string(),
        }
    }

    pub(crate) fn zero(&self) -> Val {
        match self {
            ParamType::None | ParamType::Reflect => Val::Missing,
            ParamType::Go(t) => match t {
                Type::Interface => Val::Iface(Value::Nil),
                t => Val::Conc(zero_value(t)),
            },
        }
    }
}

/// `reflect.Value.SetInt` on a smaller integer type: the value wraps.
pub(crate) fn truncate_int(i: i64, k: IntKind) -> i64 {
    match k {
        IntKind::Int8 => i64::from(i as i8),
        IntKind::Int16 => i64::from(i as i16),
        IntKind::Int32 => i64::from(i as i32),
        IntKind::Int | IntKind::Int64 => i,
    }
}

/// `reflect.Value.SetUint` on a smaller unsigned type.
pub(crate) fn truncate_uint(u: u64, k: UintKind) -> u64 {
    match k {
        UintKind::Uint8 => u64::from(u as u8),
        UintKind::Uint16 => u64::from(u as u16),
        UintKind::Uint32 => u64::from(u as u32),
        _ => u,
    }
}
