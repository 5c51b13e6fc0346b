//! Sprig's string functions (`strings.go`, plus the helpers it borrows from Go's `strings`,
//! Masterminds/goutils v1.1.1 and huandu/xstrings v1.3.3).
//!
//! Several of these work on bytes, not runes, exactly as the Go libraries do: `trunc`,
//! `substr` and `abbrev` can cut a character in half, and `initials`/`nospace` treat every
//! byte of a multi-byte character as a Latin-1 rune (`initials "ünï code"` is `Ãc`). Those
//! quirks are reproduced on purpose: output must match the Go original byte for byte.

use kalypso_gotmpl::strconv::append_quote;
use kalypso_gotmpl::{Func, FuncError, FuncMap, Map, MapKey, Str, Type, Value, budget};

use crate::util::{
    RUNE_ERROR, arg, arg_bytes, arg_int, decode_rune, find, func, is_digit, is_letter, is_lower, is_number,
    is_punct, is_space, is_title, is_upper, map_runes, push_rune, register, replace, rfind, runes,
    runes_to_bytes, split, split_n, string_value, strings_value, strval, to_lower, to_title, to_upper,
    trim_space, variadic,
};

/// Registers the string functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || Type::String;
    let int = || Type::INT;

    register(m, &["hello"], func(vec![], |_| Ok(Value::string("Hello!"))));
    register(
        m,
        &["abbrev"],
        func(vec![int(), s()], |a| {
            Ok(string_value(abbrev(arg_int(a, 0), arg_bytes(a, 1))))
        }),
    );
    register(
        m,
        &["abbrevboth"],
        func(vec![int(), int(), s()], |a| {
            let (left, right, text) = (arg_int(a, 0), arg_int(a, 1), arg_bytes(a, 2));
            if right < 4 || (left > 0 && right < 7) {
                return Ok(string_value(text));
            }
            Ok(string_value(
                abbreviate_full(text, left, right).unwrap_or_default(),
            ))
        }),
    );
    register(
        m,
        &["trunc"],
        func(vec![int(), s()], |a| {
            Ok(string_value(trunc(arg_int(a, 0), arg_bytes(a, 1))))
        }),
    );
    register(
        m,
        &["trim"],
        func(vec![s()], |a| Ok(string_value(trim_space(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["upper"],
        func(vec![s()], |a| {
            Ok(string_value(map_runes(arg_bytes(a, 0), to_upper)))
        }),
    );
    register(
        m,
        &["lower"],
        func(vec![s()], |a| {
            Ok(string_value(map_runes(arg_bytes(a, 0), to_lower)))
        }),
    );
    register(
        m,
        &["title"],
        func(vec![s()], |a| Ok(string_value(title(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["untitle"],
        func(vec![s()], |a| Ok(string_value(uncapitalize(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["substr"],
        func(vec![int(), int(), s()], |a| {
            substring(arg_int(a, 0), arg_int(a, 1), arg_bytes(a, 2)).map(string_value)
        }),
    );
    register(
        m,
        &["repeat"],
        func(vec![int(), s()], |a| {
            repeat(arg_bytes(a, 1), arg_int(a, 0)).map(string_value)
        }),
    );
    register(
        m,
        &["trimall", "trimAll"],
        func(vec![s(), s()], |a| {
            Ok(string_value(trim_cutset(arg_bytes(a, 1), arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["trimSuffix"],
        func(vec![s(), s()], |a| {
            let (suffix, text) = (arg_bytes(a, 0), arg_bytes(a, 1));
            Ok(string_value(text.strip_suffix(suffix).unwrap_or(text)))
        }),
    );
    register(
        m,
        &["trimPrefix"],
        func(vec![s(), s()], |a| {
            let (prefix, text) = (arg_bytes(a, 0), arg_bytes(a, 1));
            Ok(string_value(text.strip_prefix(prefix).unwrap_or(text)))
        }),
    );
    register(
        m,
        &["nospace"],
        func(vec![s()], |a| {
            Ok(string_value(delete_white_space(arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["initials"],
        func(vec![s()], |a| Ok(string_value(initials(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["swapcase"],
        func(vec![s()], |a| Ok(string_value(swap_case(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["snakecase"],
        func(vec![s()], |a| {
            Ok(string_value(camel_case_to_lower_case(arg_bytes(a, 0), '_')))
        }),
    );
    register(
        m,
        &["kebabcase"],
        func(vec![s()], |a| {
            Ok(string_value(camel_case_to_lower_case(arg_bytes(a, 0), '-')))
        }),
    );
    register(
        m,
        &["camelcase"],
        func(vec![s()], |a| Ok(string_value(to_camel_case(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["wrap"],
        func(vec![int(), s()], |a| {
            Ok(string_value(wrap_custom(
                arg_bytes(a, 1),
                arg_int(a, 0),
                b"",
                false,
            )))
        }),
    );
    register(
        m,
        &["wrapWith"],
        func(vec![int(), s(), s()], |a| {
            Ok(string_value(wrap_custom(
                arg_bytes(a, 2),
                arg_int(a, 0),
                arg_bytes(a, 1),
                true,
            )))
        }),
    );
    register(
        m,
        &["contains"],
        func(vec![s(), s()], |a| {
            Ok(Value::Bool(find(arg_bytes(a, 1), arg_bytes(a, 0)).is_some()))
        }),
    );
    register(
        m,
        &["hasPrefix"],
        func(vec![s(), s()], |a| {
            Ok(Value::Bool(arg_bytes(a, 1).starts_with(arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["hasSuffix"],
        func(vec![s(), s()], |a| {
            Ok(Value::Bool(arg_bytes(a, 1).ends_with(arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["quote"],
        Func::string(vec![], Some(Type::Interface), |a, out| {
            // The quoted parts joined by spaces.
            for (i, v) in a.iter().filter(|v| !v.is_nil()).enumerate() {
                if i > 0 {
                    out.push(b' ');
                }
                match v {
                    Value::String(s) => append_quote(out, s.as_bytes()),
                    _ => append_quote(out, strval(v).as_bytes()),
                }
            }
            Ok(())
        }),
    );
    register(
        m,
        &["squote"],
        Func::string(vec![], Some(Type::Interface), |a, out| {
            let start = out.len();
            for v in a.iter().filter(|v| !v.is_nil()) {
                if out.len() > start {
                    out.push(b' ');
                }
                out.push(b'\'');
                out.extend(kalypso_gotmpl::fmt::sprint_value(v));
                out.push(b'\'');
            }
            Ok(())
        }),
    );
    register(
        m,
        &["cat"],
        variadic(vec![], Type::Interface, |a| {
            budget::reserve(a.iter().map(printed_size).sum())?;
            let mut out = Vec::new();
            for v in a.iter().filter(|v| !v.is_nil()) {
                if !out.is_empty() {
                    out.push(b' ');
                }
                out.extend(kalypso_gotmpl::fmt::sprint_value(v));
            }
            Ok(string_value(out))
        }),
    );
    register(
        m,
        &["indent"],
        Func::string(vec![int(), s()], None, |a, out| {
            indent(out, arg_int(a, 0), arg_bytes(a, 1))
        }),
    );
    register(
        m,
        &["nindent"],
        Func::string(vec![int(), s()], None, |a, out| {
            out.push(b'\n');
            indent(out, arg_int(a, 0), arg_bytes(a, 1))
        }),
    );
    register(
        m,
        &["replace"],
        func(vec![s(), s(), s()], |a| {
            let (text, old, new) = (arg_bytes(a, 2), arg_bytes(a, 0), arg_bytes(a, 1));
            if new.len() > old.len() {
                // At most one replacement per byte (and one more for an empty `old`).
                let count = if old.is_empty() {
                    text.len() + 1
                } else {
                    text.len() / old.len()
                };
                budget::reserve(
                    text.len()
                        .saturating_add(count.saturating_mul(new.len() - old.len())),
                )?;
            }
            Ok(string_value(replace(
                arg_bytes(a, 2),
                arg_bytes(a, 0),
                arg_bytes(a, 1),
                -1,
            )))
        }),
    );
    register(
        m,
        &["plural"],
        func(vec![s(), s(), int()], |a| {
            Ok(if arg_int(a, 2) == 1 { arg(a, 0) } else { arg(a, 1) })
        }),
    );
    register(
        m,
        &["toString"],
        func(vec![Type::Interface], |a| Ok(Value::String(strval(&arg(a, 0))))),
    );
    register(
        m,
        &["split"],
        func(vec![s(), s()], |a| {
            Ok(parts_map(split(arg_bytes(a, 1), arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["splitn"],
        func(vec![s(), int(), s()], |a| {
            Ok(parts_map(split_n(
                arg_bytes(a, 2),
                arg_bytes(a, 0),
                arg_int(a, 1),
            )))
        }),
    );
    register(
        m,
        &["splitList"],
        func(vec![s(), s()], |a| {
            Ok(strings_value(split(arg_bytes(a, 1), arg_bytes(a, 0))))
        }),
    );
    register(
        m,
        &["toStrings"],
        func(vec![Type::Interface], |a| {
            Ok(strings_value(str_slice(&arg(a, 0))))
        }),
    );
    register(
        m,
        &["join"],
        func(vec![s(), Type::Interface], |a| {
            let sep = arg_bytes(a, 0);
            let parts = str_slice(&arg(a, 1));
            budget::reserve(
                parts
                    .iter()
                    .map(|p| p.len() + sep.len())
                    .fold(0usize, usize::saturating_add),
            )?;
            Ok(string_value(parts.join(sep)))
        }),
    );
    register(
        m,
        &["sortAlpha"],
        func(vec![Type::Interface], |a| {
            let v = arg(a, 0);
            Ok(strings_value(match v {
                Value::List(_) => {
                    let mut items = str_slice(&v);
                    items.sort();
                    items
                }
                other => vec![strval(&other).as_bytes().to_vec()],
            }))
        }),
    );
}

/// The `map[string]string` that `split` and `splitn` return: `_0`, `_1`, ... keys.
fn parts_map(parts: Vec<Vec<u8>>) -> Value {
    let entries = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            (
                MapKey::String(Str::from(format!("_{i}"))),
                Value::String(Str::from_bytes(p)),
            )
        })
        .collect();
    Value::Map(Map::from_entries(Type::String, Type::String, entries))
}

/// Sprig's `strslice`: a list's non-nil items through `strval`; nil is an empty list and any
/// other value a one-item list.
pub(crate) fn str_slice(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::List(l) => l
            .items()
            .iter()
            .filter(|item| !item.is_nil())
            .map(|item| strval(item).as_bytes().to_vec())
            .collect(),
        Value::Nil => Vec::new(),
        other => vec![strval(other).as_bytes().to_vec()],
    }
}

/// Sprig's `trunc`: a byte prefix (or, for negative `c`, a byte suffix).
/// Sprig v2.22.0's `trunc`: `s` if it is no longer than `c`, else `s[0:c]`, which panics
/// for a negative `c` (v3 keeps the last `-c` bytes instead).
pub(crate) fn trunc_v2(c: i64, s: &[u8]) -> Result<Vec<u8>, FuncError> {
    if s.len() as i64 <= c {
        return Ok(s.to_vec());
    }
    if let Some(e) = slice_bounds_error(Some(0), c, s.len()) {
        return Err(e);
    }
    Ok(s[..c as usize].to_vec())
}

fn trunc(c: i64, s: &[u8]) -> Vec<u8> {
    let len = s.len() as i64;
    if c < 0 && len + c > 0 {
        return s[(len + c) as usize..].to_vec();
    }
    if c >= 0 && len > c {
        return s[..c as usize].to_vec();
    }
    s.to_vec()
}

/// Go's panic text for `s[low:high]` out of range on a string of length `len`.
pub(crate) fn slice_bounds_error(low: Option<i64>, high: i64, len: usize) -> Option<FuncError> {
    let len_i = len as i64;
    if high < 0 {
        return Some(FuncError::new(format!(
            "runtime error: slice bounds out of range [:{high}]"
        )));
    }
    if high > len_i {
        return Some(FuncError::new(format!(
            "runtime error: slice bounds out of range [:{high}] with length {len}"
        )));
    }
    if let Some(low) = low {
        if low < 0 {
            return Some(FuncError::new(format!(
                "runtime error: slice bounds out of range [{low}:]"
            )));
        }
        if low > high {
            return Some(FuncError::new(format!(
                "runtime error: slice bounds out of range [{low}:{high}]"
            )));
        }
    }
    None
}

/// Sprig's `substring`, including Go's panics on bad bounds.
fn substring(start: i64, end: i64, s: &[u8]) -> Result<Vec<u8>, FuncError> {
    let len = s.len() as i64;
    if start < 0 {
        if let Some(e) = slice_bounds_error(None, end, s.len()) {
            return Err(e);
        }
        return Ok(s[..end as usize].to_vec());
    }
    if end < 0 || end > len {
        if let Some(e) = slice_bounds_error(Some(start), len, s.len()) {
            return Err(e);
        }
        return Ok(s[start as usize..].to_vec());
    }
    if let Some(e) = slice_bounds_error(Some(start), end, s.len()) {
        return Err(e);
    }
    Ok(s[start as usize..end as usize].to_vec())
}

/// The largest string `repeat`/`indent` will build. Go would try to allocate any size; a
/// template must not be able to exhaust the scheduler's memory.
const MAX_REPEAT_BYTES: usize = 64 << 20;

/// Go's `strings.Repeat`, with its panics.
/// About how many bytes printing `v` with `%v` takes, one level deep (for reserving the
/// allocation of functions that print their arguments).
fn printed_size(v: &Value) -> usize {
    let one = |v: &Value| match v {
        Value::String(s) => s.len() + 1,
        _ => 24,
    };
    match v {
        Value::List(l) => l.items().iter().map(one).fold(0, usize::saturating_add),
        Value::Map(m) => m
            .snapshot()
            .values()
            .map(|v| one(v) + 16)
            .fold(0, usize::saturating_add),
        other => one(other),
    }
}

pub(crate) fn repeat(s: &[u8], count: i64) -> Result<Vec<u8>, FuncError> {
    if count < 0 {
        return Err(FuncError::new("strings: negative Repeat count"));
    }
    let total = (s.len() as u128) * (count as u128);
    if total > MAX_REPEAT_BYTES as u128 {
        return Err(FuncError::new("strings: Repeat output length overflow"));
    }
    budget::reserve(total as usize)?;
    Ok(s.repeat(count as usize))
}

/// Sprig's `indent`: `pad + strings.Replace(v, "\n", "\n" + pad, -1)`, appended to `out` in
/// one pass with the exact room reserved (a rendered config is indented once per assignment).
fn indent(out: &mut Vec<u8>, spaces: i64, v: &[u8]) -> Result<(), FuncError> {
    let pad = repeat(b" ", spaces)?;
    let newlines = memchr::memchr_iter(b'\n', v).count();
    let len = (pad.len() as u128) * (newlines as u128 + 1) + v.len() as u128;
    if len > MAX_REPEAT_BYTES as u128 {
        return Err(FuncError::new("strings: Repeat output length overflow"));
    }
    out.reserve(len as usize);
    out.extend_from_slice(&pad);
    let mut start = 0;
    for newline in memchr::memchr_iter(b'\n', v) {
        out.extend_from_slice(&v[start..=newline]);
        out.extend_from_slice(&pad);
        start = newline + 1;
    }
    out.extend_from_slice(&v[start..]);
    Ok(())
}

/// Go's `strings.Trim(s, cutset)`.
fn trim_cutset(s: &[u8], cutset: &[u8]) -> Vec<u8> {
    if s.is_empty() || cutset.is_empty() {
        return s.to_vec();
    }
    let set = runes(cutset);
    let ascii_only = cutset.is_ascii();
    let in_set = |r: char, w: usize| -> bool {
        if ascii_only {
            // Go's ASCII fast path compares bytes: a non-ASCII byte is never in the set.
            w == 1 && r.is_ascii() && set.contains(&r)
        } else {
            set.contains(&r)
        }
    };
    let mut start = 0;
    while start < s.len() {
        let (r, w) = decode_rune(&s[start..]);
        if !in_set(r, w) {
            break;
        }
        start += w;
    }
    let mut end = s.len();
    while end > start {
        let (r, w) = crate::util::decode_last_rune(&s[start..end]);
        if !in_set(r, w) {
            break;
        }
        end -= w;
    }
    s[start..end].to_vec()
}

/// Go's deprecated `strings.Title`.
fn title(s: &[u8]) -> Vec<u8> {
    let mut prev = ' ';
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let (r, w) = decode_rune(&s[i..]);
        let mapped = if is_separator(prev) { to_title(r) } else { r };
        prev = r;
        push_rune(&mut out, mapped);
        i += w;
    }
    out
}

fn is_separator(r: char) -> bool {
    if r.is_ascii() {
        return !(r.is_ascii_alphanumeric() || r == '_');
    }
    if is_letter(r) || is_digit(r) {
        return false;
    }
    is_space(r)
}

/// goutils `Uncapitalize`: lowercases the first rune of each whitespace-separated word.
fn uncapitalize(s: &[u8]) -> Vec<u8> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut rs = runes(s);
    let mut next = true;
    for r in rs.iter_mut() {
        if is_space(*r) {
            next = true;
        } else if next {
            *r = to_lower(*r);
            next = false;
        }
    }
    runes_to_bytes(&rs)
}

/// goutils `AbbreviateFull` (byte offsets). `None` where goutils returns an error.
fn abbreviate_full(s: &[u8], offset: i64, max_width: i64) -> Option<Vec<u8>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    if max_width < 4 {
        return None;
    }
    let len = s.len() as i64;
    if len <= max_width {
        return Some(s.to_vec());
    }
    let mut offset = offset.min(len);
    if len - offset < max_width - 3 {
        offset = len - (max_width - 3);
    }
    let marker = b"...";
    if offset <= 4 {
        let mut out = s[..(max_width - 3) as usize].to_vec();
        out.extend_from_slice(marker);
        return Some(out);
    }
    if max_width < 7 {
        return None;
    }
    if offset + max_width - 3 < len {
        let inner = abbreviate_full(&s[offset as usize..], 0, max_width - 3).unwrap_or_default();
        let mut out = marker.to_vec();
        out.extend(inner);
        return Some(out);
    }
    let mut out = marker.to_vec();
    out.extend_from_slice(&s[(len - (max_width - 3)) as usize..]);
    Some(out)
}

/// Sprig's `abbrev`.
fn abbrev(width: i64, s: &[u8]) -> Vec<u8> {
    if width < 4 {
        return s.to_vec();
    }
    abbreviate_full(s, 0, width).unwrap_or_default()
}

/// goutils `DeleteWhiteSpace`: works byte by byte, so multi-byte characters are re-encoded
/// as Latin-1 runes (and their 0x85/0xA0 bytes count as spaces).
fn delete_white_space(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut count = 0;
    for &b in s {
        let r = char::from(b);
        if !is_space(r) {
            push_rune(&mut out, r);
            count += 1;
        }
    }
    if count == s.len() {
        return s.to_vec();
    }
    out
}

/// goutils `Initials`: byte by byte, like `DeleteWhiteSpace`.
fn initials(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut last_was_gap = true;
    for &b in s {
        let r = char::from(b);
        if is_space(r) {
            last_was_gap = true;
        } else if last_was_gap {
            push_rune(&mut out, r);
            last_was_gap = false;
        }
    }
    out
}

/// goutils `SwapCase`: upper and title case become lower; lower case becomes title case at
/// the start of a word and upper case elsewhere.
fn swap_case(s: &[u8]) -> Vec<u8> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut rs = runes(s);
    let mut whitespace = true;
    for r in rs.iter_mut() {
        let ch = *r;
        if is_upper(ch) || is_title(ch) {
            *r = to_lower(ch);
            whitespace = false;
        } else if is_lower(ch) {
            if whitespace {
                *r = to_title(ch);
                whitespace = false;
            } else {
                *r = to_upper(ch);
            }
        } else {
            whitespace = is_space(ch);
        }
    }
    runes_to_bytes(&rs)
}

/// goutils `WrapCustom` (byte offsets, words separated by ' ').
fn wrap_custom(s: &[u8], wrap_length: i64, newline: &[u8], wrap_long_words: bool) -> Vec<u8> {
    if s.is_empty() {
        return Vec::new();
    }
    let newline: &[u8] = if newline.is_empty() { b"\n" } else { newline };
    let wrap_length = wrap_length.max(1) as usize;
    let input_len = s.len();
    let mut offset = 0usize;
    let mut out = Vec::with_capacity(s.len() + s.len() / wrap_length.max(1));
    while input_len - offset > wrap_length {
        if s[offset] == b' ' {
            offset += 1;
            continue;
        }
        let end = wrap_length + offset + 1;
        match rfind(&s[offset..end], b" ") {
            Some(pos) => {
                let space = pos + offset;
                out.extend_from_slice(&s[offset..space]);
                out.extend_from_slice(newline);
                offset = space + 1;
            }
            None if wrap_long_words => {
                let end = wrap_length + offset;
                out.extend_from_slice(&s[offset..end]);
                out.extend_from_slice(newline);
                offset += wrap_length;
            }
            None => {
                let end = wrap_length + offset;
                match s[end..].iter().position(|&b| b == b' ') {
                    Some(index) => {
                        let space = index + end;
                        out.extend_from_slice(&s[offset..space]);
                        out.extend_from_slice(newline);
                        offset = space + 1;
                    }
                    None => {
                        out.extend_from_slice(&s[offset..]);
                        offset = input_len;
                    }
                }
            }
        }
    }
    out.extend_from_slice(&s[offset..]);
    out
}

fn is_connector(r: char) -> bool {
    r == '-' || r == '_' || is_space(r)
}

/// xstrings `ToCamelCase`: words separated by spaces, `_` or `-` become capitalized and
/// joined; other letters are lowercased; runs of connectors keep all but one.
fn to_camel_case(s: &[u8]) -> Vec<u8> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s;
    let mut r0 = RUNE_ERROR;
    let mut size = 0;
    while !rest.is_empty() {
        let (r, w) = decode_rune(rest);
        r0 = r;
        size = w;
        rest = &rest[w..];
        if !is_connector(r0) {
            r0 = to_upper(r0);
            break;
        }
        push_rune(&mut out, r0);
    }
    if rest.is_empty() {
        if size != 0 {
            push_rune(&mut out, r0);
        }
        return out;
    }
    while !rest.is_empty() {
        let r1 = r0;
        let (r, w) = decode_rune(rest);
        r0 = r;
        rest = &rest[w..];
        if is_connector(r0) && is_connector(r1) {
            push_rune(&mut out, r1);
            continue;
        }
        if is_connector(r1) {
            r0 = to_upper(r0);
        } else {
            r0 = to_lower(r0);
            push_rune(&mut out, r1);
        }
    }
    push_rune(&mut out, r0);
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum WordType {
    Invalid,
    Number,
    UpperCase,
    Alphabet,
    Connector,
    Punct,
    Other,
}

/// xstrings `isAlphabet`: a letter that is not a CJK ideograph.
fn is_alphabet(r: char) -> bool {
    if !is_letter(r) {
        return false;
    }
    let c = r as u32;
    if c < 0x3400 {
        return true;
    }
    !((0x4E00..=0x9FCC).contains(&c) || (0x3400..=0x4D85).contains(&c) || (0x20000..=0x2B81D).contains(&c))
}

/// xstrings `nextValidRune`: skips invalid bytes; `prev` if nothing valid remains.
fn next_valid_rune(s: &[u8], prev: char) -> (char, usize) {
    let mut size = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let (r, w) = decode_rune(rest);
        size += w;
        if r != RUNE_ERROR {
            return (r, size);
        }
        rest = &rest[w..];
    }
    (prev, size)
}

/// xstrings `nextWord`: the type of the next word, the word, and what remains.
fn next_word(s: &[u8]) -> (WordType, &[u8], &[u8]) {
    if s.is_empty() {
        return (WordType::Invalid, &[], &[]);
    }
    let mut remaining = s;
    let (mut r, mut size) = next_valid_rune(remaining, RUNE_ERROR);
    let mut offset = size;
    if r == RUNE_ERROR {
        return (WordType::Invalid, &s[..offset], &s[offset..]);
    }
    let wt;
    if is_connector(r) {
        wt = WordType::Connector;
        remaining = &remaining[size..];
        while !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if !is_connector(r) {
                break;
            }
            offset += size;
            remaining = &remaining[size..];
        }
    } else if is_punct(r) {
        wt = WordType::Punct;
        remaining = &remaining[size..];
        while !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if !is_punct(r) {
                break;
            }
            offset += size;
            remaining = &remaining[size..];
        }
    } else if is_upper(r) {
        wt = WordType::UpperCase;
        remaining = &remaining[size..];
        if !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if is_upper(r) {
                let mut prev_size = size;
                offset += size;
                remaining = &remaining[size..];
                while !remaining.is_empty() {
                    (r, size) = next_valid_rune(remaining, r);
                    if !is_upper(r) {
                        break;
                    }
                    prev_size = size;
                    offset += size;
                    remaining = &remaining[size..];
                }
                if !remaining.is_empty() && is_alphabet(r) {
                    offset -= prev_size;
                    remaining = &s[offset..];
                }
            } else if is_alphabet(r) {
                offset += size;
                remaining = &remaining[size..];
                while !remaining.is_empty() {
                    (r, size) = next_valid_rune(remaining, r);
                    if !is_alphabet(r) || is_upper(r) {
                        break;
                    }
                    offset += size;
                    remaining = &remaining[size..];
                }
            }
        }
    } else if is_alphabet(r) {
        wt = WordType::Alphabet;
        remaining = &remaining[size..];
        while !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if !is_alphabet(r) || is_upper(r) {
                break;
            }
            offset += size;
            remaining = &remaining[size..];
        }
    } else if is_number(r) {
        wt = WordType::Number;
        remaining = &remaining[size..];
        while !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if !is_number(r) {
                break;
            }
            offset += size;
            remaining = &remaining[size..];
        }
    } else {
        wt = WordType::Other;
        remaining = &remaining[size..];
        while !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if size == 0 || is_connector(r) || is_alphabet(r) || is_number(r) || is_punct(r) {
                break;
            }
            offset += size;
            remaining = &remaining[size..];
        }
    }
    (wt, &s[..offset], remaining)
}

/// xstrings `toLower` helper: upper-case and connector words are lowercased and their
/// connectors replaced; other words are copied.
fn word_to_lower(out: &mut Vec<u8>, wt: WordType, word: &[u8], connector: char) {
    if wt != WordType::UpperCase && wt != WordType::Connector {
        out.extend_from_slice(word);
        return;
    }
    let mut rest = word;
    while !rest.is_empty() {
        let (r, w) = decode_rune(rest);
        rest = &rest[w..];
        if is_connector(r) {
            push_rune(out, connector);
        } else if is_upper(r) {
            push_rune(out, to_lower(r));
        } else {
            push_rune(out, r);
        }
    }
}

/// xstrings `camelCaseToLowerCase`, behind `snakecase` and `kebabcase`.
fn camel_case_to_lower_case(s: &[u8], connector: char) -> Vec<u8> {
    use WordType as W;
    if s.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(s.len() + 4);
    let (mut wt, mut word, mut remaining) = next_word(s);
    while !remaining.is_empty() {
        if wt != W::Connector {
            word_to_lower(&mut out, wt, word, connector);
        }
        let prev = wt;
        let last = word;
        (wt, word, remaining) = next_word(remaining);
        match prev {
            W::Number => {
                while wt == W::Alphabet || wt == W::Number {
                    word_to_lower(&mut out, wt, word, connector);
                    (wt, word, remaining) = next_word(remaining);
                }
                if wt != W::Invalid && wt != W::Punct && wt != W::Connector {
                    push_rune(&mut out, connector);
                }
            }
            W::Connector => word_to_lower(&mut out, prev, last, connector),
            W::Punct => {}
            _ => {
                if wt != W::Number {
                    if wt != W::Connector && wt != W::Punct {
                        push_rune(&mut out, connector);
                    }
                    continue;
                }
                if remaining.is_empty() {
                    continue;
                }
                let last = word;
                (wt, word, remaining) = next_word(remaining);
                if wt != W::Alphabet {
                    word_to_lower(&mut out, W::Number, last, connector);
                    if wt != W::Connector && wt != W::Punct {
                        push_rune(&mut out, connector);
                    }
                    continue;
                }
                push_rune(&mut out, connector);
                word_to_lower(&mut out, W::Number, last, connector);
                while wt == W::Alphabet || wt == W::Number {
                    word_to_lower(&mut out, wt, word, connector);
                    (wt, word, remaining) = next_word(remaining);
                }
                if wt != W::Invalid && wt != W::Connector && wt != W::Punct {
                    push_rune(&mut out, connector);
                }
            }
        }
    }
    word_to_lower(&mut out, wt, word, connector);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn case_conversions_match_xstrings() {
        assert_eq!(s(camel_case_to_lower_case(b"FirstName", '_')), "first_name");
        assert_eq!(s(camel_case_to_lower_case(b"HTTPServer", '_')), "http_server");
        assert_eq!(
            s(camel_case_to_lower_case(b"already_snake", '_')),
            "already_snake"
        );
        assert_eq!(s(camel_case_to_lower_case(b"a b-c", '_')), "a_b_c");
        assert_eq!(s(camel_case_to_lower_case(b"HTTP2XX", '_')), "http2_xx");
        assert_eq!(s(camel_case_to_lower_case(b"Duration2m3s", '_')), "duration_2m3s");
        assert_eq!(s(camel_case_to_lower_case(b"http2xx", '_')), "http_2xx");
        assert_eq!(s(camel_case_to_lower_case(b"HTTP20xOK", '_')), "http_20x_ok");
        assert_eq!(s(camel_case_to_lower_case(b"Bld4Floor", '_')), "bld4_floor");
        assert_eq!(s(camel_case_to_lower_case(b"FirstName", '-')), "first-name");
        assert_eq!(s(to_camel_case(b"http_server")), "HttpServer");
        assert_eq!(s(to_camel_case(b"_complex__case_")), "_Complex_Case_");
        assert_eq!(s(to_camel_case(b"a-b c")), "ABC");
    }

    #[test]
    fn goutils_quirks() {
        assert_eq!(s(initials("ünï code".as_bytes())), "Ãc");
        assert_eq!(s(initials(b"First Try")), "FT");
        assert_eq!(s(swap_case("This Is A.Test".as_bytes())), "tHIS iS a.tEST");
        assert_eq!(s(swap_case("éÉ".as_bytes())), "Éé");
        assert_eq!(s(delete_white_space(b" a b\tc ")), "abc");
        assert_eq!(s(abbrev(5, b"hello world")), "he...");
        assert_eq!(s(abbrev(3, b"hello")), "hello");
        assert_eq!(
            s(abbreviate_full(b"1234 5678 9123", 5, 10).unwrap()),
            "...5678..."
        );
        assert_eq!(
            s(wrap_custom(
                b"The quick brown fox jumps over the lazy dog",
                10,
                b"",
                false
            )),
            "The quick\nbrown fox\njumps over\nthe lazy\ndog"
        );
        assert_eq!(s(uncapitalize(b"Hello World")), "hello world");
        assert_eq!(s(title(b"hello wOrld-x")), "Hello WOrld-X");
    }

    #[test]
    fn byte_slicing_functions() {
        assert_eq!(trunc(5, b"Hello, World"), b"Hello");
        assert_eq!(trunc(-5, b"Hello, World"), b"World");
        assert_eq!(trunc(0, b"abc"), b"");
        assert_eq!(substring(-1, 3, b"Hello").unwrap(), b"Hel");
        assert_eq!(substring(7, 100, b"Hello, World").unwrap(), b"World");
        assert_eq!(
            substring(3, 1, b"Hello").unwrap_err().message(),
            "runtime error: slice bounds out of range [3:1]"
        );
        assert_eq!(
            substring(-1, 9, b"Hello").unwrap_err().message(),
            "runtime error: slice bounds out of range [:9] with length 5"
        );
        assert_eq!(substring(0, 2, "éa".as_bytes()).unwrap(), "é".as_bytes());
    }

    #[test]
    fn trim_all_uses_cutset() {
        assert_eq!(trim_cutset(b"$$5.00$", b"$"), b"5.00");
        assert_eq!(trim_cutset(b"abcba", b"ab"), b"c");
        assert_eq!(trim_cutset("éxé".as_bytes(), "é".as_bytes()), b"x");
    }
}
