//! The value model: Go values as `text/template` sees them through reflection.
//!
//! Byte-compatible output needs more than "JSON-like" values. Go distinguishes `int` from
//! `int64` and `float64` (printing, `eq`, `%T`), a typed `map[string]string` from
//! `map[string]interface {}` (Sprig's dict functions reject the former), YAML-decoded
//! `map[interface {}]interface {}` maps (whose keys need not be strings), structs with fields,
//! and values with methods (`semver`, `time.Time`). Every [`Value`] therefore carries its Go
//! type, and [`Type`] spells it exactly as Go does in messages and `%T`.
//!
//! Maps are reference values in Go: Sprig's `set`, `unset` and `merge` mutate a map in place,
//! and the change is visible through every other reference (`{{ $_ := set $d "k" 1 }}{{ $d }}`).
//! [`Map`] reproduces this with a shared cell holding a copy-on-write snapshot, so readers
//! never hold a lock while they work. Slices are immutable (Sprig never mutates one in place).
//!
//! There is deliberately no "invalid" value here: Go's missing map entries (printed as
//! `<no value>`) exist only inside the executor. Functions always receive real values.

pub mod func;

use std::any::Any;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::str::Str;
use func::Func;

/// The sizes of Go's signed integer types.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum IntKind {
    /// `int` (64 bits on every platform the original runs on).
    Int,
    /// `int8`
    Int8,
    /// `int16`
    Int16,
    /// `int32` (also `rune`)
    Int32,
    /// `int64`
    Int64,
}

impl IntKind {
    /// Go's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            IntKind::Int => "int",
            IntKind::Int8 => "int8",
            IntKind::Int16 => "int16",
            IntKind::Int32 => "int32",
            IntKind::Int64 => "int64",
        }
    }

    /// Size in bits.
    pub fn bits(self) -> u32 {
        match self {
            IntKind::Int | IntKind::Int64 => 64,
            IntKind::Int8 => 8,
            IntKind::Int16 => 16,
            IntKind::Int32 => 32,
        }
    }
}

/// The sizes of Go's unsigned integer types.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum UintKind {
    /// `uint`
    Uint,
    /// `uint8` (also `byte`)
    Uint8,
    /// `uint16`
    Uint16,
    /// `uint32`
    Uint32,
    /// `uint64`
    Uint64,
    /// `uintptr`
    Uintptr,
}

impl UintKind {
    /// Go's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            UintKind::Uint => "uint",
            UintKind::Uint8 => "uint8",
            UintKind::Uint16 => "uint16",
            UintKind::Uint32 => "uint32",
            UintKind::Uint64 => "uint64",
            UintKind::Uintptr => "uintptr",
        }
    }

    /// Size in bits.
    pub fn bits(self) -> u32 {
        match self {
            UintKind::Uint | UintKind::Uint64 | UintKind::Uintptr => 64,
            UintKind::Uint8 => 8,
            UintKind::Uint16 => 16,
            UintKind::Uint32 => 32,
        }
    }
}

/// The sizes of Go's floating-point types.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum FloatKind {
    /// `float32`
    Float32,
    /// `float64`
    Float64,
}

impl FloatKind {
    /// Go's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            FloatKind::Float32 => "float32",
            FloatKind::Float64 => "float64",
        }
    }
}

/// A Go type, as far as templates can observe it.
///
/// `Display` spells the type the way Go's reflection does (`map[string]interface {}`), which
/// is what appears in Go's error messages and in `printf "%T"`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Type {
    /// `interface {}`: any value, including nil.
    Interface,
    /// `bool`
    Bool,
    /// A signed integer type.
    Int(IntKind),
    /// An unsigned integer type.
    Uint(UintKind),
    /// A floating-point type.
    Float(FloatKind),
    /// `complex128`
    Complex128,
    /// `string`
    String,
    /// `[]T`
    Slice(Arc<Type>),
    /// `map[K]V`
    Map(Arc<Type>, Arc<Type>),
    /// A named type provided by an [`Object`] (a struct, a pointer to one, `time.Time`...),
    /// spelled as Go prints it: `scheduler.dataType`, `*semver.Version`.
    Named(Str),
}

impl Type {
    /// `int`
    pub const INT: Type = Type::Int(IntKind::Int);
    /// `int64`
    pub const INT64: Type = Type::Int(IntKind::Int64);
    /// `float64`
    pub const FLOAT64: Type = Type::Float(FloatKind::Float64);

    /// `[]elem`
    pub fn slice(elem: Type) -> Type {
        Type::Slice(Arc::new(elem))
    }

    /// `map[key]elem`
    pub fn map(key: Type, elem: Type) -> Type {
        Type::Map(Arc::new(key), Arc::new(elem))
    }

    /// `[]interface {}`
    pub fn interface_slice() -> Type {
        Type::slice(Type::Interface)
    }

    /// `map[string]interface {}`
    pub fn string_interface_map() -> Type {
        Type::map(Type::String, Type::Interface)
    }

    /// Whether Go can represent nil in this type (interfaces, slices, maps, pointers).
    pub fn can_be_nil(&self) -> bool {
        match self {
            Type::Interface | Type::Slice(_) | Type::Map(..) => true,
            Type::Named(name) => name.as_bytes().first() == Some(&b'*'),
            _ => false,
        }
    }

    /// The name of the reflect.Kind of this type, as Sprig's `kindOf` prints it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Type::Interface => "interface",
            Type::Bool => "bool",
            Type::Int(k) => k.name(),
            Type::Uint(k) => k.name(),
            Type::Float(k) => k.name(),
            Type::Complex128 => "complex128",
            Type::String => "string",
            Type::Slice(_) => "slice",
            Type::Map(..) => "map",
            Type::Named(name) => {
                if name.as_bytes().first() == Some(&b'*') {
                    "ptr"
                } else {
                    "struct"
                }
            }
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Interface => f.write_str("interface {}"),
            Type::Bool => f.write_str("bool"),
            Type::Int(k) => f.write_str(k.name()),
            Type::Uint(k) => f.write_str(k.name()),
            Type::Float(k) => f.write_str(k.name()),
            Type::Complex128 => f.write_str("complex128"),
            Type::String => f.write_str("string"),
            Type::Slice(elem) => write!(f, "[]{elem}"),
            Type::Map(key, elem) => write!(f, "map[{key}]{elem}"),
            Type::Named(name) => write!(f, "{name}"),
        }
    }
}

/// A Go value.
#[derive(Clone)]
pub enum Value {
    /// The nil interface: `nil` stored in an `interface {}` (JSON `null`, a nil function result).
    Nil,
    /// `bool`
    Bool(bool),
    /// A signed integer of the given type.
    Int(i64, IntKind),
    /// An unsigned integer of the given type.
    Uint(u64, UintKind),
    /// A float of the given type (`float32` values are stored widened).
    Float(f64, FloatKind),
    /// `complex128` (real, imaginary).
    Complex(f64, f64),
    /// `string`
    String(Str),
    /// A slice.
    List(List),
    /// A map (a reference value: clones share the same entries).
    Map(Map),
    /// A struct, a pointer to one, or another Go value with fields and methods.
    Object(Obj),
}

impl Value {
    /// A Go `int`.
    pub fn int(i: i64) -> Value {
        Value::Int(i, IntKind::Int)
    }

    /// A Go `int64`.
    pub fn int64(i: i64) -> Value {
        Value::Int(i, IntKind::Int64)
    }

    /// A Go `float64`.
    pub fn float(f: f64) -> Value {
        Value::Float(f, FloatKind::Float64)
    }

    /// A Go `string`.
    pub fn string(s: impl Into<Str>) -> Value {
        Value::String(s.into())
    }

    /// The dynamic Go type, or `None` for the nil interface (which `%T` prints as `<nil>`).
    pub fn type_of(&self) -> Option<Type> {
        Some(match self {
            Value::Nil => return None,
            Value::Bool(_) => Type::Bool,
            Value::Int(_, k) => Type::Int(*k),
            Value::Uint(_, k) => Type::Uint(*k),
            Value::Float(_, k) => Type::Float(*k),
            Value::Complex(..) => Type::Complex128,
            Value::String(_) => Type::String,
            Value::List(l) => l.type_of(),
            Value::Map(m) => m.type_of(),
            Value::Object(o) => Type::Named(o.type_name()),
        })
    }

    /// Go's spelling of the dynamic type; `<nil>` for the nil interface.
    pub fn type_name(&self) -> String {
        match self.type_of() {
            Some(t) => t.to_string(),
            None => "<nil>".to_owned(),
        }
    }

    /// The name of the reflect.Kind (`string`, `slice`, `map`, `struct`, `ptr`...);
    /// `invalid` for nil.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Nil => "invalid",
            Value::Object(o) => o.kind_name(),
            other => other.type_of().map_or("invalid", |t| t.kind_name()),
        }
    }

    /// Whether this is the nil interface.
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    /// Go template truth (`if`, `with`, `and`, `or`, `not`): false for zero numbers, empty
    /// strings, slices and maps, and nil; structs are always true.
    pub fn is_true(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i, _) => *i != 0,
            Value::Uint(u, _) => *u != 0,
            Value::Float(f, _) => *f != 0.0,
            Value::Complex(re, im) => *re != 0.0 || *im != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Object(_) => true,
        }
    }

    /// The string, if this is one.
    pub fn as_string(&self) -> Option<&Str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The list, if this is one.
    pub fn as_list(&self) -> Option<&List> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// A deep copy: maps get new cells, so mutating the copy never affects the original.
    /// Strings, which are immutable, are shared.
    pub fn deep_copy(&self) -> Value {
        self.copy(false)
    }

    /// A deep copy in which every map is frozen (see [`Map::is_frozen`]): no template can
    /// change it, so one copy can be shared by any number of renders.
    pub fn frozen_copy(&self) -> Value {
        self.copy(true)
    }

    fn copy(&self, frozen: bool) -> Value {
        crate::stack::grow(|| self.copy_here(frozen))
    }

    fn copy_here(&self, frozen: bool) -> Value {
        match self {
            Value::List(l) => Value::List(List::with_nil(
                l.elem_type().clone(),
                l.items().iter().map(|v| v.copy(frozen)).collect(),
                l.is_nil(),
            )),
            Value::Map(m) => Value::Map(m.copy(frozen)),
            other => other.clone(),
        }
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Value {
        Value::float(f)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(Str::from(s))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(Str::from(s))
    }
}

impl From<Str> for Value {
    fn from(s: Str) -> Value {
        Value::String(s)
    }
}

impl From<List> for Value {
    fn from(l: List) -> Value {
        Value::List(l)
    }
}

impl From<Map> for Value {
    fn from(m: Map) -> Value {
        Value::Map(m)
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i, k) => write!(f, "{}({i})", k.name()),
            Value::Uint(u, k) => write!(f, "{}({u})", k.name()),
            Value::Float(x, k) => write!(f, "{}({x:?})", k.name()),
            Value::Complex(re, im) => write!(f, "complex128({re:?}+{im:?}i)"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::List(l) => fmt::Debug::fmt(l, f),
            Value::Map(m) => fmt::Debug::fmt(m, f),
            Value::Object(o) => write!(f, "{}{{..}}", o.type_name()),
        }
    }
}

/// A Go slice. Clones share the (immutable) items.
#[derive(Clone)]
pub struct List(Arc<ListData>);

struct ListData {
    elem: Type,
    items: Vec<Value>,
    nil: bool,
}

impl List {
    /// A non-nil slice `[]elem` of the given items. Items must have type `elem` (any value for
    /// `interface {}`).
    pub fn new(elem: Type, items: Vec<Value>) -> List {
        List::with_nil(elem, items, false)
    }

    /// A nil slice of type `[]elem` (printed `[]`, JSON `null`).
    pub fn nil(elem: Type) -> List {
        List::with_nil(elem, Vec::new(), true)
    }

    fn with_nil(elem: Type, items: Vec<Value>, nil: bool) -> List {
        let nil = nil && items.is_empty();
        List(Arc::new(ListData { elem, items, nil }))
    }

    /// `[]interface {}` of the given items.
    pub fn interfaces(items: Vec<Value>) -> List {
        List::new(Type::Interface, items)
    }

    /// `[]string` of the given strings.
    pub fn strings<I, S>(items: I) -> List
    where
        I: IntoIterator<Item = S>,
        S: Into<Str>,
    {
        List::new(
            Type::String,
            items.into_iter().map(|s| Value::String(s.into())).collect(),
        )
    }

    /// The element type.
    pub fn elem_type(&self) -> &Type {
        &self.0.elem
    }

    /// The slice type, `[]elem`.
    pub fn type_of(&self) -> Type {
        Type::slice(self.0.elem.clone())
    }

    /// The items.
    pub fn items(&self) -> &[Value] {
        &self.0.items
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.0.items.len()
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.0.items.is_empty()
    }

    /// Whether this is a nil slice.
    pub fn is_nil(&self) -> bool {
        self.0.nil
    }

    /// The item at `i`.
    pub fn get(&self, i: usize) -> Option<&Value> {
        self.0.items.get(i)
    }
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.type_of())?;
        f.debug_list().entries(self.items()).finish()
    }
}

/// A key of a map, ordered as Go's `fmt` and `text/template` order map keys (package
/// `internal/fmtsort`): numbers numerically, strings byte-wise, `false` before `true`, nil
/// first. Keys of different types (only possible in `map[interface {}]interface {}`) are
/// ordered by type name, then value; Go orders them by the address of the type descriptor,
/// which is not observable in a portable way (see COMPATIBILITY.md).
#[derive(Clone, Debug)]
pub enum MapKey {
    /// A nil interface key.
    Nil,
    /// A boolean key.
    Bool(bool),
    /// A signed integer key.
    Int(i64, IntKind),
    /// An unsigned integer key.
    Uint(u64, UintKind),
    /// A float key.
    Float(f64, FloatKind),
    /// A string key.
    String(Str),
}

impl MapKey {
    /// The key for a value, if Go can use the value as a map key here (comparable scalars).
    pub fn from_value(v: &Value) -> Option<MapKey> {
        Some(match v {
            Value::Nil => MapKey::Nil,
            Value::Bool(b) => MapKey::Bool(*b),
            Value::Int(i, k) => MapKey::Int(*i, *k),
            Value::Uint(u, k) => MapKey::Uint(*u, *k),
            Value::Float(f, k) => MapKey::Float(*f, *k),
            Value::String(s) => MapKey::String(s.clone()),
            Value::Complex(..) | Value::List(_) | Value::Map(_) | Value::Object(_) => return None,
        })
    }

    /// The key as a value.
    pub fn to_value(&self) -> Value {
        match self {
            MapKey::Nil => Value::Nil,
            MapKey::Bool(b) => Value::Bool(*b),
            MapKey::Int(i, k) => Value::Int(*i, *k),
            MapKey::Uint(u, k) => Value::Uint(*u, *k),
            MapKey::Float(f, k) => Value::Float(*f, *k),
            MapKey::String(s) => Value::String(s.clone()),
        }
    }

    fn type_rank(&self) -> (&'static str, u8) {
        // Ordered by Go type name ("bool" < "float64" < "int" < "string" < "uint"), nil first.
        match self {
            MapKey::Nil => ("", 0),
            MapKey::Bool(_) => ("bool", 0),
            MapKey::Int(_, k) => (k.name(), 0),
            MapKey::Uint(_, k) => (k.name(), 0),
            MapKey::Float(_, k) => (k.name(), 0),
            MapKey::String(_) => ("string", 0),
        }
    }
}

impl PartialEq for MapKey {
    fn eq(&self, other: &MapKey) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for MapKey {}

impl PartialOrd for MapKey {
    fn partial_cmp(&self, other: &MapKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MapKey {
    fn cmp(&self, other: &MapKey) -> Ordering {
        match (self, other) {
            (MapKey::Nil, MapKey::Nil) => Ordering::Equal,
            (MapKey::Bool(a), MapKey::Bool(b)) => a.cmp(b),
            (MapKey::Int(a, ka), MapKey::Int(b, kb)) if ka == kb => a.cmp(b),
            (MapKey::Uint(a, ka), MapKey::Uint(b, kb)) if ka == kb => a.cmp(b),
            (MapKey::Float(a, ka), MapKey::Float(b, kb)) if ka == kb => compare_floats(*a, *b),
            (MapKey::String(a), MapKey::String(b)) => a.cmp(b),
            _ => self.type_rank().cmp(&other.type_rank()),
        }
    }
}

/// fmtsort's float order: NaN first, then numeric.
fn compare_floats(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// The entries of a map, in Go's key order.
pub type Entries = BTreeMap<MapKey, Value>;

/// A Go map: a reference value. Clones share the same entries, and mutation through one
/// clone ([`Map::insert`], [`Map::remove`]) is visible through all of them, as in Go.
///
/// A *frozen* map ([`Value::frozen_copy`]) never changes: it can be shared by any number of
/// renders at once, and values derived from it ([`Map::derived`]) are computed once.
#[derive(Clone)]
pub struct Map(Arc<MapCell>);

struct MapCell {
    key: Type,
    elem: Type,
    nil: bool,
    frozen: bool,
    /// For a frozen map: values derived from it, by name.
    derived: Mutex<Vec<(&'static str, Value)>>,
    /// For a frozen map: its shape as [`crate::budget::check_data`] walks it (values
    /// visited, deepest nesting), once a walk has passed the limits.
    shape: OnceLock<(usize, usize)>,
    entries: Mutex<Arc<Entries>>,
    /// For a frozen map, its entries (the same as under the lock), read without taking it:
    /// a frozen map's data is read by every thread that renders with it.
    fixed: Option<Arc<Entries>>,
}

/// Values whose last reference is being dropped, taken apart one level at a time so that
/// dropping a deeply nested value (a dict built in a loop) never recurses.
fn drop_iteratively(mut stack: Vec<Value>) {
    while let Some(v) = stack.pop() {
        match v {
            Value::Map(m) => {
                if let Ok(mut cell) = Arc::try_unwrap(m.0) {
                    take_entries(&mut cell, &mut stack);
                }
            }
            Value::List(l) => {
                if let Ok(mut data) = Arc::try_unwrap(l.0) {
                    stack.append(&mut data.items);
                }
            }
            _ => {}
        }
    }
}

fn take_entries(cell: &mut MapCell, stack: &mut Vec<Value>) {
    cell.fixed = None;
    let slot = cell.entries.get_mut().unwrap_or_else(PoisonError::into_inner);
    if slot.is_empty() {
        return;
    }
    let entries = std::mem::take(slot);
    if let Ok(entries) = Arc::try_unwrap(entries) {
        stack.extend(
            entries
                .into_values()
                .filter(|v| matches!(v, Value::Map(_) | Value::List(_))),
        );
    }
}

impl Drop for MapCell {
    fn drop(&mut self) {
        let mut stack = Vec::new();
        take_entries(self, &mut stack);
        if !stack.is_empty() {
            drop_iteratively(stack);
        }
    }
}

impl Drop for ListData {
    fn drop(&mut self) {
        if self
            .items
            .iter()
            .any(|v| matches!(v, Value::Map(_) | Value::List(_)))
        {
            drop_iteratively(std::mem::take(&mut self.items));
        }
    }
}

impl Map {
    /// An empty, non-nil `map[key]elem`.
    pub fn new(key: Type, elem: Type) -> Map {
        Map::from_entries(key, elem, Entries::new())
    }

    /// A nil map of type `map[key]elem` (no entries; printed `map[]`).
    pub fn nil(key: Type, elem: Type) -> Map {
        Map::cell(key, elem, true, false, Entries::new())
    }

    /// A map of the given type and entries.
    pub fn from_entries(key: Type, elem: Type, entries: Entries) -> Map {
        Map::cell(key, elem, false, false, entries)
    }

    fn cell(key: Type, elem: Type, nil: bool, frozen: bool, entries: Entries) -> Map {
        let entries = Arc::new(entries);
        Map(Arc::new(MapCell {
            key,
            elem,
            nil,
            frozen,
            derived: Mutex::new(Vec::new()),
            shape: OnceLock::new(),
            fixed: frozen.then(|| Arc::clone(&entries)),
            entries: Mutex::new(entries),
        }))
    }

    /// A `map[string]interface {}` of the given entries.
    pub fn string_interface<I, K>(entries: I) -> Map
    where
        I: IntoIterator<Item = (K, Value)>,
        K: Into<Str>,
    {
        Map::from_entries(
            Type::String,
            Type::Interface,
            entries
                .into_iter()
                .map(|(k, v)| (MapKey::String(k.into()), v))
                .collect(),
        )
    }

    /// A `map[string]string` of the given entries.
    pub fn string_string<I, K, V>(entries: I) -> Map
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Str>,
        V: Into<Str>,
    {
        Map::from_entries(
            Type::String,
            Type::String,
            entries
                .into_iter()
                .map(|(k, v)| (MapKey::String(k.into()), Value::String(v.into())))
                .collect(),
        )
    }

    /// The key type.
    pub fn key_type(&self) -> &Type {
        &self.0.key
    }

    /// The element type.
    pub fn elem_type(&self) -> &Type {
        &self.0.elem
    }

    /// The map type, `map[key]elem`.
    pub fn type_of(&self) -> Type {
        Type::map(self.0.key.clone(), self.0.elem.clone())
    }

    /// Whether this is a nil map.
    pub fn is_nil(&self) -> bool {
        self.0.nil
    }

    /// Whether this map is frozen: it never changes, and functions that would change it
    /// must fail instead.
    pub fn is_frozen(&self) -> bool {
        self.0.frozen
    }

    /// The value named `name` that `derive` computes from this map. A frozen map keeps it,
    /// so it is computed once however often it is asked for (`derive` must depend on nothing
    /// but the map); for any other map, `derive` runs every time.
    pub fn derived<E>(
        &self,
        name: &'static str,
        derive: impl FnOnce() -> Result<Value, E>,
    ) -> Result<Value, E> {
        if !self.0.frozen {
            return derive();
        }
        let known = |cell: &MapCell| {
            let derived = cell.derived.lock().unwrap_or_else(PoisonError::into_inner);
            derived.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone())
        };
        if let Some(value) = known(&self.0) {
            return Ok(value);
        }
        let value = derive()?;
        let mut derived = self.0.derived.lock().unwrap_or_else(PoisonError::into_inner);
        if !derived.iter().any(|(n, _)| *n == name) {
            derived.push((name, value.clone()));
        }
        Ok(value)
    }

    /// A frozen map's shape (values visited, deepest nesting) as the budget's data check
    /// walked it; `None` before the first walk that passed, and for other maps.
    pub(crate) fn data_shape(&self) -> Option<(usize, usize)> {
        self.0.shape.get().copied()
    }

    /// Keeps a frozen map's shape for later checks; other maps change, so keep none.
    pub(crate) fn keep_data_shape(&self, shape: (usize, usize)) {
        if self.0.frozen {
            let _ = self.0.shape.set(shape);
        }
    }

    /// The current entries, in Go's key order. The snapshot does not change when the map is
    /// mutated later.
    pub fn snapshot(&self) -> Arc<Entries> {
        if let Some(fixed) = &self.0.fixed {
            return Arc::clone(fixed);
        }
        self.0
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.with_entries(Entries::len)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` with the current entries, under the map's lock, without copying them or
    /// their values. `f` must not use this map.
    pub(crate) fn with_entries<R>(&self, f: impl FnOnce(&Entries) -> R) -> R {
        if let Some(fixed) = &self.0.fixed {
            return f(fixed);
        }
        let entries = self.0.entries.lock().unwrap_or_else(PoisonError::into_inner);
        f(&entries)
    }

    /// The value for `key`.
    pub fn get(&self, key: &MapKey) -> Option<Value> {
        self.with_entries(|entries| entries.get(key).cloned())
    }

    /// The value for a string key.
    pub fn get_str(&self, key: &str) -> Option<Value> {
        self.get(&MapKey::String(Str::from(key)))
    }

    /// Sets `key` to `value`, visibly to every clone of this map.
    ///
    /// Go panics when assigning to a nil map; callers that emulate Go code must check
    /// [`Map::is_nil`] first.
    ///
    /// A frozen map must not be changed: callers check [`Map::is_frozen`] first (a change
    /// would not be seen: a frozen map's entries are read from where they were frozen).
    pub fn insert(&self, key: MapKey, value: Value) {
        debug_assert!(!self.0.frozen, "insert into a frozen map");
        let mut guard = self.0.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::make_mut(&mut guard).insert(key, value);
    }

    /// Removes `key`, visibly to every clone of this map. A frozen map must not be changed:
    /// callers check [`Map::is_frozen`] first.
    pub fn remove(&self, key: &MapKey) -> Option<Value> {
        debug_assert!(!self.0.frozen, "remove from a frozen map");
        let mut guard = self.0.entries.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::make_mut(&mut guard).remove(key)
    }

    /// Whether both are the same Go map (the same reference).
    pub fn ptr_eq(&self, other: &Map) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// A new map with deep copies of the entries.
    pub fn deep_copy(&self) -> Map {
        self.copy(false)
    }

    /// A frozen deep copy (see [`Value::frozen_copy`]).
    pub fn frozen_copy(&self) -> Map {
        self.copy(true)
    }

    /// A new map with deep copies of the entries; with `frozen`, it and every map in it are
    /// frozen.
    fn copy(&self, frozen: bool) -> Map {
        let entries = if self.is_nil() {
            Entries::new()
        } else {
            self.snapshot()
                .iter()
                .map(|(k, v)| (k.clone(), v.copy(frozen)))
                .collect()
        };
        Map::cell(
            self.0.key.clone(),
            self.0.elem.clone(),
            self.0.nil,
            frozen,
            entries,
        )
    }
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.type_of())?;
        f.debug_map()
            .entries(self.snapshot().iter().map(|(k, v)| (k.to_value(), v.clone())))
            .finish()
    }
}

/// A shared Go value with fields and/or methods: a struct, a pointer to a struct, or an
/// opaque library type such as `*semver.Version` or `time.Time`.
pub type Obj = Arc<dyn Object>;

/// A Go value the template can inspect through its exported fields and methods.
///
/// Implement this for library types (Sprig's `semver` result) and for data structs (the
/// Kalypso scheduler's `dataType`). [`Struct`] covers plain structs.
pub trait Object: Send + Sync + 'static {
    /// Go's spelling of the dynamic type: `scheduler.dataType`, `*semver.Version`.
    fn type_name(&self) -> Str;

    /// The reflect.Kind name: `struct` for structs (the default), `ptr` for pointers.
    fn kind_name(&self) -> &'static str {
        "struct"
    }

    /// An exported field by name. `None` if the type has no such field.
    fn field(&self, _name: &str) -> Option<Value> {
        None
    }

    /// The field [`Object::field`] returns, by reference, for objects that hold their
    /// fields as values: the executor prints `{{ .Field }}` from it without a copy. `None`
    /// (the default) when the object computes its fields or has no such field.
    fn field_ref(&self, _name: &str) -> Option<&Value> {
        None
    }

    /// All fields in declaration order (structs, and pointers to structs), for `%v`, `%+v`,
    /// JSON and hashing. `None` for types that are not structs.
    fn fields(&self) -> Option<Vec<(Str, Value)>> {
        None
    }

    /// An exported method by name, bound to this receiver. `None` if there is no such
    /// method. The returned [`Func`] declares the method's parameters, so the executor
    /// checks and converts arguments as for any function.
    fn method(&self, _name: &str) -> Option<Func> {
        None
    }

    /// The result of the type's `String()` method, if it implements `fmt.Stringer`.
    /// `fmt` prints such values with it.
    fn go_string(&self) -> Option<String> {
        None
    }

    /// Go's `reflect.DeepEqual` with `other` (of the same type name), for types whose
    /// state is not in their fields (a `time.Time`, a `*semver.Version`). `None`: compare
    /// the fields.
    fn deep_equal(&self, _other: &dyn Object) -> Option<bool> {
        None
    }

    /// Downcasting support for functions that accept this type.
    fn as_any(&self) -> &dyn Any;
}

/// A plain Go struct value: a type name and fields in declaration order.
#[derive(Clone, Debug)]
pub struct Struct {
    type_name: Str,
    fields: Vec<(Str, Value)>,
}

impl Struct {
    /// A struct of the named type with the given fields.
    pub fn new(type_name: impl Into<Str>, fields: Vec<(Str, Value)>) -> Struct {
        Struct {
            type_name: type_name.into(),
            fields,
        }
    }
}

impl Object for Struct {
    fn type_name(&self) -> Str {
        self.type_name.clone()
    }

    fn field(&self, name: &str) -> Option<Value> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn field_ref(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    fn fields(&self) -> Option<Vec<(Str, Value)>> {
        Some(self.fields.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_spelled_like_go() {
        assert_eq!(
            Type::string_interface_map().to_string(),
            "map[string]interface {}"
        );
        assert_eq!(
            Type::map(Type::Interface, Type::Interface).to_string(),
            "map[interface {}]interface {}"
        );
        assert_eq!(Type::slice(Type::slice(Type::INT)).to_string(), "[][]int");
        assert_eq!(Value::Nil.type_name(), "<nil>");
    }

    #[test]
    fn frozen_copies_freeze_every_map_and_keep_what_is_derived() {
        let inner = Map::from_entries(
            Type::Interface,
            Type::Interface,
            [(MapKey::String(Str::from("k")), Value::int(1))].into(),
        );
        let list = Value::List(List::interfaces(vec![Value::Map(inner.clone())]));
        let outer = Map::string_interface([("inner", Value::Map(inner.clone())), ("list", list)]);
        let Value::Map(frozen) = Value::Map(outer.clone()).frozen_copy() else {
            panic!("not a map")
        };
        assert!(frozen.is_frozen() && !outer.is_frozen() && !inner.is_frozen());
        assert!(!frozen.ptr_eq(&outer), "a copy");
        let Some(Value::Map(frozen_inner)) = frozen.get_str("inner") else {
            panic!("no inner map")
        };
        assert!(frozen_inner.is_frozen() && !frozen_inner.ptr_eq(&inner));
        let Some(Value::List(items)) = frozen.get_str("list") else {
            panic!("no list")
        };
        assert!(matches!(&items.items()[0], Value::Map(m) if m.is_frozen()));
        assert_eq!(format!("{frozen:?}"), format!("{outer:?}"), "same content");

        let mut runs = 0;
        for _ in 0..3 {
            let v = frozen.derived("len", || {
                runs += 1;
                Ok::<_, ()>(Value::int(2))
            });
            assert_eq!(format!("{v:?}"), "Ok(int(2))");
        }
        assert_eq!(runs, 1, "computed once for a frozen map");
        for _ in 0..3 {
            let _ = outer.derived("len", || {
                runs += 1;
                Ok::<_, ()>(Value::int(2))
            });
        }
        assert_eq!(runs, 4, "computed every time for a map that can change");
        assert!(frozen.derived("failing", || Err::<Value, _>("no")).is_err());
        assert!(
            frozen.derived("failing", || Ok::<_, ()>(Value::int(0))).is_ok(),
            "errors are not kept"
        );
        let nil = Map::nil(Type::String, Type::String);
        let Value::Map(frozen_nil) = Value::Map(nil).frozen_copy() else {
            panic!("not a map")
        };
        assert!(frozen_nil.is_nil() && frozen_nil.is_frozen());
    }

    #[test]
    fn maps_are_shared_references() {
        let m = Map::string_interface([("a", Value::int(1))]);
        let alias = m.clone();
        let before = m.snapshot();
        alias.insert(MapKey::String("b".into()), Value::int(2));
        assert_eq!(m.len(), 2);
        assert_eq!(before.len(), 1, "snapshots are stable");
        let copy = m.deep_copy();
        copy.insert(MapKey::String("c".into()), Value::int(3));
        assert_eq!(m.len(), 2, "deep copies are independent");
    }

    #[test]
    fn map_keys_follow_fmtsort() {
        let mut keys = [
            MapKey::String("b".into()),
            MapKey::Int(10, IntKind::Int),
            MapKey::String("B".into()),
            MapKey::Int(9, IntKind::Int),
            MapKey::Bool(true),
            MapKey::Nil,
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(|k| format!("{:?}", k.to_value())).collect();
        assert_eq!(shown, ["nil", "true", "int(9)", "int(10)", "\"B\"", "\"b\""]);
    }

    #[test]
    fn truth_follows_go() {
        assert!(!Value::Nil.is_true());
        assert!(!Value::float(0.0).is_true());
        assert!(Value::string("false").is_true());
        assert!(!Value::List(List::interfaces(vec![])).is_true());
        assert!(Value::Map(Map::string_interface([("a", Value::Nil)])).is_true());
    }
}
