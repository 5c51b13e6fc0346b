//! Helpers shared by every Sprig module: Go's view of strings as runes, Go's Unicode
//! predicates and simple case mappings, Sprig's `strval`/`empty`, `reflect.DeepEqual`, and
//! small constructors that keep function registration readable.
//!
//! Sprig is written against Go's standard library, so byte-exact output depends on Go's
//! exact semantics in places where Rust's standard library differs: Go decodes each invalid
//! UTF-8 byte as its own U+FFFD (Rust's lossy conversion merges them), and Go's `unicode`
//! case functions use the *simple* case mappings (`ß` stays `ß` in `upper`).

use kalypso_gotmpl::{Func, FuncError, FuncMap, FuncResult, List, Map, MapKey, Str, Type, Value};
use unicode_general_category::{GeneralCategory, get_general_category};

/// Go's `runtime error` for a nil pointer dereference (for example `reflect.TypeOf(nil).Kind()`).
pub(crate) const NIL_DEREF: &str = "runtime error: invalid memory address or nil pointer dereference";

/// The replacement character Go substitutes for each invalid UTF-8 byte.
pub(crate) const RUNE_ERROR: char = '\u{FFFD}';

/// Go's `utf8.DecodeRune`: the rune at the start of `b` and its width in bytes. An invalid
/// or truncated sequence decodes as `(U+FFFD, 1)`; an empty slice as `(U+FFFD, 0)`.
pub(crate) fn decode_rune(b: &[u8]) -> (char, usize) {
    let Some(&first) = b.first() else {
        return (RUNE_ERROR, 0);
    };
    if first < 0x80 {
        return (char::from(first), 1);
    }
    let width = match first {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return (RUNE_ERROR, 1),
    };
    match b.get(..width).and_then(|s| std::str::from_utf8(s).ok()) {
        Some(s) => (s.chars().next().unwrap_or(RUNE_ERROR), width),
        None => (RUNE_ERROR, 1),
    }
}

/// Go's `utf8.DecodeLastRune`.
pub(crate) fn decode_last_rune(b: &[u8]) -> (char, usize) {
    if b.is_empty() {
        return (RUNE_ERROR, 0);
    }
    let end = b.len();
    let lim = end.saturating_sub(4);
    let mut start = end - 1;
    while start > lim && (b[start] & 0xC0) == 0x80 {
        start -= 1;
    }
    let (r, size) = decode_rune(&b[start..end]);
    if start + size != end {
        return (RUNE_ERROR, 1);
    }
    (r, size)
}

/// The runes of a Go string, as `for _, r := range s` sees them.
pub(crate) fn runes(b: &[u8]) -> Vec<char> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let (r, w) = decode_rune(&b[i..]);
        out.push(r);
        i += w;
    }
    out
}

/// Appends the UTF-8 encoding of `r` (Go's `WriteRune`).
pub(crate) fn push_rune(out: &mut Vec<u8>, r: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(r.encode_utf8(&mut buf).as_bytes());
}

/// Go's `string(runes)`.
pub(crate) fn runes_to_bytes(rs: &[char]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rs.len());
    for &r in rs {
        push_rune(&mut out, r);
    }
    out
}

/// Go's `strings.Map` with a rune-to-rune mapping: invalid bytes become U+FFFD (mapped).
pub(crate) fn map_runes(b: &[u8], f: impl Fn(char) -> char) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let (r, w) = decode_rune(&b[i..]);
        push_rune(&mut out, f(r));
        i += w;
    }
    out
}

fn category(r: char) -> GeneralCategory {
    get_general_category(r)
}

/// Go's `unicode.IsUpper` (category Lu).
pub(crate) fn is_upper(r: char) -> bool {
    category(r) == GeneralCategory::UppercaseLetter
}

/// Go's `unicode.IsLower` (category Ll).
pub(crate) fn is_lower(r: char) -> bool {
    category(r) == GeneralCategory::LowercaseLetter
}

/// Go's `unicode.IsTitle` (category Lt).
pub(crate) fn is_title(r: char) -> bool {
    category(r) == GeneralCategory::TitlecaseLetter
}

/// Go's `unicode.IsLetter` (category L).
pub(crate) fn is_letter(r: char) -> bool {
    matches!(
        category(r),
        GeneralCategory::UppercaseLetter
            | GeneralCategory::LowercaseLetter
            | GeneralCategory::TitlecaseLetter
            | GeneralCategory::ModifierLetter
            | GeneralCategory::OtherLetter
    )
}

/// Go's `unicode.IsNumber` (category N).
pub(crate) fn is_number(r: char) -> bool {
    matches!(
        category(r),
        GeneralCategory::DecimalNumber | GeneralCategory::LetterNumber | GeneralCategory::OtherNumber
    )
}

/// Go's `unicode.IsDigit` (category Nd).
pub(crate) fn is_digit(r: char) -> bool {
    category(r) == GeneralCategory::DecimalNumber
}

/// Go's `unicode.IsPunct` (category P).
pub(crate) fn is_punct(r: char) -> bool {
    matches!(
        category(r),
        GeneralCategory::ConnectorPunctuation
            | GeneralCategory::DashPunctuation
            | GeneralCategory::OpenPunctuation
            | GeneralCategory::ClosePunctuation
            | GeneralCategory::InitialPunctuation
            | GeneralCategory::FinalPunctuation
            | GeneralCategory::OtherPunctuation
    )
}

/// Go's `unicode.IsSpace` (the White_Space property, which Rust uses too).
pub(crate) fn is_space(r: char) -> bool {
    r.is_whitespace()
}

/// Go's `unicode.ToUpper`: the simple uppercase mapping.
pub(crate) fn to_upper(r: char) -> char {
    if r.is_ascii() {
        return r.to_ascii_uppercase();
    }
    let mut it = r.to_uppercase();
    match (it.next(), it.next()) {
        (Some(u), None) => u,
        _ => match r as u32 {
            // Greek letters with ypogegrammeni: the full mapping expands, the simple one
            // maps to the titlecase letter with prosgegrammeni.
            c @ (0x1F80..=0x1F87 | 0x1F90..=0x1F97 | 0x1FA0..=0x1FA7) => char::from_u32(c + 8).unwrap_or(r),
            0x1FB3 => '\u{1FBC}',
            0x1FC3 => '\u{1FCC}',
            0x1FF3 => '\u{1FFC}',
            _ => r,
        },
    }
}

/// Go's `unicode.ToLower`: the simple lowercase mapping.
pub(crate) fn to_lower(r: char) -> char {
    if r.is_ascii() {
        return r.to_ascii_lowercase();
    }
    let mut it = r.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        _ if r == '\u{130}' => 'i',
        _ => r,
    }
}

/// Go's `unicode.ToTitle`: the simple titlecase mapping.
pub(crate) fn to_title(r: char) -> char {
    match r as u32 {
        0x01C4..=0x01C6 => '\u{01C5}',
        0x01C7..=0x01C9 => '\u{01C8}',
        0x01CA..=0x01CC => '\u{01CB}',
        0x01F1..=0x01F3 => '\u{01F2}',
        // Georgian Mkhedruli has uppercase (Mtavruli) forms but is its own titlecase.
        0x10D0..=0x10FA | 0x10FD..=0x10FF => r,
        _ => to_upper(r),
    }
}

/// Go's `strings.TrimSpace`.
pub(crate) fn trim_space(b: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < b.len() {
        let (r, w) = decode_rune(&b[start..]);
        if !is_space(r) || (r == RUNE_ERROR && w == 1) {
            break;
        }
        start += w;
    }
    let mut end = b.len();
    while end > start {
        let (r, w) = decode_last_rune(&b[start..end]);
        if !is_space(r) || (r == RUNE_ERROR && w == 1) {
            break;
        }
        end -= w;
    }
    &b[start..end]
}

/// Go's `strings.Index` (byte offsets), `None` for -1.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    if needle.len() > hay.len() {
        return None;
    }
    // memchr's substring search, not a comparison at every offset: `indent` and `replace`
    // search every rendered config for its newlines.
    memchr::memmem::find(hay, needle)
}

/// Go's `strings.LastIndex`.
pub(crate) fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(hay.len());
    }
    if needle.len() > hay.len() {
        return None;
    }
    memchr::memmem::rfind(hay, needle)
}

/// Go's `strings.Replace(s, old, new, n)` (`n < 0`: all).
pub(crate) fn replace(s: &[u8], old: &[u8], new: &[u8], n: i64) -> Vec<u8> {
    if old == new || n == 0 {
        return s.to_vec();
    }
    let mut out = Vec::with_capacity(s.len());
    let mut done = 0i64;
    let mut start = 0;
    if old.is_empty() {
        // Insert `new` before every rune and at the end.
        let mut i = 0;
        loop {
            if n >= 0 && done >= n {
                break;
            }
            out.extend_from_slice(new);
            done += 1;
            if i >= s.len() {
                start = s.len();
                break;
            }
            let (_, w) = decode_rune(&s[i..]);
            out.extend_from_slice(&s[i..i + w]);
            i += w;
            start = i;
        }
        out.extend_from_slice(&s[start..]);
        return out;
    }
    // One searcher for the whole text (its matches do not overlap, as Go's are found).
    let mut replace_at = |pos: usize| {
        out.extend_from_slice(&s[start..pos]);
        out.extend_from_slice(new);
        start = pos + old.len();
        done += 1;
        n < 0 || done < n
    };
    if let [byte] = old {
        for pos in memchr::memchr_iter(*byte, s) {
            if !replace_at(pos) {
                break;
            }
        }
    } else {
        for pos in memchr::memmem::find_iter(s, old) {
            if !replace_at(pos) {
                break;
            }
        }
    }
    out.extend_from_slice(&s[start..]);
    out
}

/// Go's `strings.Split(s, sep)`.
pub(crate) fn split(s: &[u8], sep: &[u8]) -> Vec<Vec<u8>> {
    split_n(s, sep, -1)
}

/// Go's `strings.SplitN(s, sep, n)`.
pub(crate) fn split_n(s: &[u8], sep: &[u8], n: i64) -> Vec<Vec<u8>> {
    if n == 0 {
        return Vec::new();
    }
    if sep.is_empty() {
        // Explode into runes (invalid bytes become U+FFFD), at most n pieces.
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            if n > 0 && out.len() as i64 == n - 1 {
                out.push(s[i..].to_vec());
                return out;
            }
            let (r, w) = decode_rune(&s[i..]);
            if r == RUNE_ERROR && w == 1 {
                out.push("\u{FFFD}".as_bytes().to_vec());
            } else {
                out.push(s[i..i + w].to_vec());
            }
            i += w;
        }
        return out;
    }
    let mut out = Vec::new();
    let mut start = 0;
    while n < 0 || (out.len() as i64) < n - 1 {
        match find(&s[start..], sep) {
            Some(pos) => {
                out.push(s[start..start + pos].to_vec());
                start += pos + sep.len();
            }
            None => break,
        }
    }
    out.push(s[start..].to_vec());
    out
}

/// Sprig's `strval`: strings as they are, `[]byte` as bytes, Stringers through `String()`,
/// everything else as `fmt.Sprintf("%v", v)`.
pub(crate) fn strval(v: &Value) -> Str {
    match v {
        Value::String(s) => s.clone(),
        Value::List(l) if is_byte_slice(l) => Str::from(list_bytes(l)),
        Value::Object(o) => match o.go_string() {
            Some(s) => Str::from(s),
            None => Str::from(kalypso_gotmpl::fmt::sprint_value(v)),
        },
        _ => Str::from(kalypso_gotmpl::fmt::sprint_value(v)),
    }
}

/// Whether a list is a `[]byte` (`[]uint8`).
pub(crate) fn is_byte_slice(l: &List) -> bool {
    matches!(l.elem_type(), Type::Uint(kalypso_gotmpl::UintKind::Uint8))
}

/// The bytes of a `[]byte`.
pub(crate) fn list_bytes(l: &List) -> Vec<u8> {
    l.items()
        .iter()
        .map(|v| match v {
            Value::Uint(u, _) => *u as u8,
            _ => 0,
        })
        .collect()
}

/// Sprig's `empty`: the zero value of its type (nil, 0, "", false, empty collections).
/// Structs are never empty.
pub(crate) fn is_empty(v: &Value) -> bool {
    match v {
        Value::Nil => true,
        Value::Bool(b) => !b,
        Value::Int(i, _) => *i == 0,
        Value::Uint(u, _) => *u == 0,
        Value::Float(f, _) => *f == 0.0,
        Value::Complex(re, im) => *re == 0.0 && *im == 0.0,
        Value::String(s) => s.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Object(_) => false,
    }
}

/// Go's `reflect.DeepEqual` on two interface values.
pub(crate) fn deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x, kx), Value::Int(y, ky)) => kx == ky && x == y,
        (Value::Uint(x, kx), Value::Uint(y, ky)) => kx == ky && x == y,
        (Value::Float(x, kx), Value::Float(y, ky)) => kx == ky && x == y,
        (Value::Complex(xr, xi), Value::Complex(yr, yi)) => xr == yr && xi == yi,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.elem_type() == y.elem_type()
                && x.is_nil() == y.is_nil()
                && x.len() == y.len()
                && x.items().iter().zip(y.items()).all(|(p, q)| deep_equal(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            if x.type_of() != y.type_of() || x.is_nil() != y.is_nil() {
                return false;
            }
            if x.ptr_eq(y) {
                return true;
            }
            let (ex, ey) = (x.snapshot(), y.snapshot());
            ex.len() == ey.len()
                && ex
                    .iter()
                    .all(|(k, v)| ey.get(k).is_some_and(|w| deep_equal(v, w)))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.type_name() != y.type_name() {
                return false;
            }
            if std::sync::Arc::ptr_eq(x, y) {
                return true;
            }
            if let Some(eq) = x.deep_equal(y.as_ref()) {
                return eq;
            }
            match (x.fields(), y.fields()) {
                (Some(fx), Some(fy)) => {
                    fx.len() == fy.len()
                        && fx
                            .iter()
                            .zip(fy.iter())
                            .all(|((n1, v1), (n2, v2))| n1 == n2 && deep_equal(v1, v2))
                }
                _ => x.go_string() == y.go_string(),
            }
        }
        _ => false,
    }
}

/// The reflect.Kind name Sprig prints in "Cannot ... on type %s", or the Go panic for a nil
/// interface (`reflect.TypeOf(nil).Kind()`).
pub(crate) fn kind_or_nil_panic(v: &Value) -> Result<&'static str, FuncError> {
    match v {
        Value::Nil => Err(FuncError::new(NIL_DEREF)),
        other => Ok(other.kind_name()),
    }
}

/// The string argument at `i` (the executor has already converted it).
pub(crate) fn arg_str(args: &[Value], i: usize) -> Str {
    match args.get(i) {
        Some(Value::String(s)) => s.clone(),
        _ => Str::empty(),
    }
}

/// The bytes of the string argument at `i`.
pub(crate) fn arg_bytes(args: &[Value], i: usize) -> &[u8] {
    match args.get(i) {
        Some(Value::String(s)) => s.as_bytes(),
        _ => &[],
    }
}

/// The integer argument at `i` (an `int`, or any other integer type).
pub(crate) fn arg_int(args: &[Value], i: usize) -> i64 {
    match args.get(i) {
        Some(Value::Int(n, _)) => *n,
        Some(Value::Uint(n, _)) => *n as i64,
        _ => 0,
    }
}

/// The bool argument at `i`.
pub(crate) fn arg_bool(args: &[Value], i: usize) -> bool {
    matches!(args.get(i), Some(Value::Bool(true)))
}

/// The argument at `i`, nil if absent.
pub(crate) fn arg(args: &[Value], i: usize) -> Value {
    args.get(i).cloned().unwrap_or(Value::Nil)
}

/// The map argument at `i` (declared as a map type, so the executor guarantees it).
pub(crate) fn arg_map(args: &[Value], i: usize) -> Map {
    match args.get(i) {
        Some(Value::Map(m)) => m.clone(),
        _ => Map::nil(Type::String, Type::Interface),
    }
}

/// A Go string value from bytes.
pub(crate) fn string_value(b: impl Into<Vec<u8>>) -> Value {
    Value::String(Str::from_bytes(b))
}

/// A `[]string` value.
pub(crate) fn strings_value(items: Vec<Vec<u8>>) -> Value {
    Value::List(List::new(
        Type::String,
        items
            .into_iter()
            .map(|b| Value::String(Str::from_bytes(b)))
            .collect(),
    ))
}

/// A `[]interface {}` value.
pub(crate) fn interfaces_value(items: Vec<Value>) -> Value {
    Value::List(List::interfaces(items))
}

/// A nil `[]interface {}`.
pub(crate) fn nil_interfaces() -> Value {
    Value::List(List::nil(Type::Interface))
}

/// A map key for a Go string.
pub(crate) fn skey(s: impl Into<Str>) -> MapKey {
    MapKey::String(s.into())
}

/// `map[string]interface {}` as a type.
pub(crate) fn dict_type() -> Type {
    Type::string_interface_map()
}

/// Registers `func` under every name in `names`.
pub(crate) fn register(m: &mut FuncMap, names: &[&str], func: Func) {
    for name in names {
        m.insert(*name, func.clone());
    }
}

/// A fixed-arity function.
pub(crate) fn func(params: Vec<Type>, body: impl Fn(&[Value]) -> FuncResult + Send + Sync + 'static) -> Func {
    Func::new(params, body)
}

/// A variadic function.
pub(crate) fn variadic(
    params: Vec<Type>,
    rest: Type,
    body: impl Fn(&[Value]) -> FuncResult + Send + Sync + 'static,
) -> Func {
    Func::variadic(params, rest, body)
}

/// Go's `strconv.Quote`-based `%q` of a string.
pub(crate) fn go_quote(b: &[u8]) -> String {
    kalypso_gotmpl::strconv::quote(b)
}

/// Go's `strconv.CanBackquote`.
pub(crate) fn can_backquote(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        let (r, w) = decode_rune(&s[i..]);
        if w > 1 {
            if r == '\u{FEFF}' {
                return false;
            }
            i += w;
            continue;
        }
        if r == RUNE_ERROR {
            return false;
        }
        if (r < ' ' && r != '\t') || r == '`' || r == '\u{7F}' {
            return false;
        }
        i += w;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_invalid_bytes_one_at_a_time() {
        assert_eq!(runes(&[0xF0, 0x9F, 0x9A]), vec![RUNE_ERROR; 3]);
        assert_eq!(runes("é".as_bytes()), vec!['é']);
        assert_eq!(decode_last_rune("aé".as_bytes()), ('é', 2));
    }

    #[test]
    fn simple_case_mappings() {
        assert_eq!(to_upper('ß'), 'ß');
        assert_eq!(to_upper('é'), 'É');
        assert_eq!(to_lower('\u{130}'), 'i');
        assert_eq!(to_title('ǆ'), 'ǅ');
        assert!(!is_lower('ª'));
    }

    #[test]
    fn string_helpers_follow_go() {
        assert_eq!(trim_space(b"  x \n"), b"x");
        assert_eq!(replace(b"ab", b"", b"_", -1), b"_a_b_");
        assert_eq!(split(b"a,b,,c", b",").len(), 4);
        assert_eq!(split_n(b"foo$bar$baz", b"$", 2)[1], b"bar$baz");
        assert_eq!(split(b"", b",").len(), 1);
    }

    #[test]
    fn deep_equal_checks_types() {
        assert!(!deep_equal(&Value::int(1), &Value::float(1.0)));
        assert!(!deep_equal(&Value::int(1), &Value::int64(1)));
        let a = Value::List(List::strings(["a"]));
        let b = Value::List(List::interfaces(vec![Value::string("a")]));
        assert!(!deep_equal(&a, &b));
    }
}
