//! Go's `encoding/json` for Sprig's `toJson`, `toPrettyJson`, `toRawJson` and `fromJson`.
//!
//! Output must match Go byte for byte: map keys sorted, `<`, `>` and `&` escaped as
//! `\u003c`... (except in `toRawJson`), U+2028/U+2029 always escaped, invalid UTF-8 replaced
//! by `\ufffd`, floats in Go's shortest form (`1e+21`, `1e-7`), `[]byte` as base64, and
//! `map[interface {}]interface {}` (what YAML decoding produces) rejected as an unsupported
//! type. Decoding reports Go's syntax error texts (`invalid character 'b' looking for
//! beginning of object key string`) and yields Go's types (`float64` numbers,
//! `map[string]interface {}` objects, `[]interface {}` arrays).

use std::sync::Arc;

use kalypso_gotmpl::{FloatKind, List, Map, MapKey, Str, Type, Value};

use crate::util::{RUNE_ERROR, decode_rune, is_byte_slice, list_bytes, push_rune};

/// A JSON encoding error, with Go's message.
#[derive(Debug)]
pub(crate) struct JsonError(pub(crate) String);

/// Options of one encoding run.
#[derive(Clone, Copy)]
pub(crate) struct EncodeOptions {
    /// Escape `<`, `>` and `&` (json.Marshal does; an Encoder with SetEscapeHTML(false) not).
    pub(crate) escape_html: bool,
}

/// `json.Marshal(v)` (or an Encoder's output without the trailing newline).
pub(crate) fn marshal(v: &Value, opts: EncodeOptions) -> Result<Vec<u8>, JsonError> {
    let encode = || {
        let mut enc = Encoder {
            out: Vec::new(),
            opts,
            map_stack: Vec::new(),
        };
        enc.value(v).map(|()| enc.out)
    };
    if nesting_depth(v) <= SHALLOW {
        return encode();
    }
    // Go encodes any depth (fromJson accepts 10000 levels); give the recursive encoder a
    // stack that fits, instead of overflowing the caller's.
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(DEEP_STACK_BYTES)
            .spawn_scoped(scope, encode)
            .map_err(|e| JsonError(format!("json: {e}")))?
            .join()
            .unwrap_or_else(|_| Err(JsonError("json: encoder failed".to_owned())))
    })
}

/// Nesting below which the encoder runs on the caller's stack.
const SHALLOW: usize = 256;

/// Stack for encoding deeper values: far more than 10000 levels need.
const DEEP_STACK_BYTES: usize = 256 << 20;

/// How deeply lists and maps nest in `v` (iteratively, so any depth can be measured).
fn nesting_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v.clone(), 1usize)];
    while let Some((v, depth)) = stack.pop() {
        max = max.max(depth);
        if max > SHALLOW {
            return max;
        }
        match v {
            Value::List(l) => stack.extend(l.items().iter().map(|i| (i.clone(), depth + 1))),
            Value::Map(m) => stack.extend(m.snapshot().values().map(|i| (i.clone(), depth + 1))),
            _ => {}
        }
    }
    max
}

/// `json.MarshalIndent(v, "", "  ")`.
pub(crate) fn marshal_indent(v: &Value) -> Result<Vec<u8>, JsonError> {
    let compact = marshal(v, EncodeOptions { escape_html: true })?;
    Ok(indent(&compact, b"  "))
}

struct Encoder {
    out: Vec<u8>,
    opts: EncodeOptions,
    map_stack: Vec<*const ()>,
}

fn map_identity(m: &Map) -> *const () {
    // Two clones of one Go map share their entries; the snapshot Arc identifies the map
    // only until it is mutated, which cannot happen while encoding.
    Arc::as_ptr(&m.snapshot()).cast()
}

impl Encoder {
    fn value(&mut self, v: &Value) -> Result<(), JsonError> {
        match v {
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::Bool(b) => self.out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Value::Int(i, _) => self.out.extend_from_slice(i.to_string().as_bytes()),
            Value::Uint(u, _) => self.out.extend_from_slice(u.to_string().as_bytes()),
            Value::Float(f, kind) => {
                let text = encode_float(*f, *kind)?;
                self.out.extend_from_slice(text.as_bytes());
            }
            Value::Complex(..) => {
                return Err(JsonError("json: unsupported type: complex128".to_owned()));
            }
            Value::String(s) => self.string(s.as_bytes()),
            Value::List(l) => self.list(l)?,
            Value::Map(m) => self.map(m)?,
            Value::Object(o) => {
                if let Some(text) = crate::date::marshal_json(o) {
                    let text = text.map_err(JsonError)?;
                    self.out.extend_from_slice(text.as_bytes());
                } else if let Some(text) = crate::semver::marshal_json(o) {
                    self.string(text.as_bytes());
                } else if let Some(fields) = o.fields() {
                    self.out.push(b'{');
                    for (i, (name, value)) in fields.iter().enumerate() {
                        if i > 0 {
                            self.out.push(b',');
                        }
                        self.string(name.as_bytes());
                        self.out.push(b':');
                        self.value(value)?;
                    }
                    self.out.push(b'}');
                } else if let Some(text) = o.go_string() {
                    self.string(text.as_bytes());
                } else {
                    self.out.extend_from_slice(b"{}");
                }
            }
        }
        Ok(())
    }

    fn list(&mut self, l: &List) -> Result<(), JsonError> {
        if l.is_nil() {
            self.out.extend_from_slice(b"null");
            return Ok(());
        }
        if is_byte_slice(l) {
            let encoded = crate::encoding::base64_encode(&list_bytes(l));
            self.out.push(b'"');
            self.out.extend_from_slice(encoded.as_bytes());
            self.out.push(b'"');
            return Ok(());
        }
        self.out.push(b'[');
        for (i, item) in l.items().iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.value(item)?;
        }
        self.out.push(b']');
        Ok(())
    }

    fn map(&mut self, m: &Map) -> Result<(), JsonError> {
        if m.is_nil() {
            self.out.extend_from_slice(b"null");
            return Ok(());
        }
        let key_ok = matches!(m.key_type(), Type::String | Type::Int(_) | Type::Uint(_));
        if !key_ok {
            return Err(JsonError(format!("json: unsupported type: {}", m.type_of())));
        }
        let id = map_identity(m);
        if self.map_stack.contains(&id) {
            return Err(JsonError(format!(
                "json: unsupported value: encountered a cycle via {}",
                m.type_of()
            )));
        }
        self.map_stack.push(id);
        let entries = m.snapshot();
        let mut keyed: Vec<(Vec<u8>, &Value)> = entries
            .iter()
            .map(|(k, v)| {
                let key = match k {
                    MapKey::String(s) => s.as_bytes().to_vec(),
                    MapKey::Int(i, _) => i.to_string().into_bytes(),
                    MapKey::Uint(u, _) => u.to_string().into_bytes(),
                    other => format!("{:?}", other.to_value()).into_bytes(),
                };
                (key, v)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        self.out.push(b'{');
        for (i, (key, value)) in keyed.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.string(key);
            self.out.push(b':');
            self.value(value)?;
        }
        self.out.push(b'}');
        self.map_stack.pop();
        Ok(())
    }

    fn string(&mut self, s: &[u8]) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let out = &mut self.out;
        out.push(b'"');
        let mut i = 0;
        while i < s.len() {
            let b = s[i];
            if b < 0x80 {
                let safe = b >= 0x20
                    && b != b'"'
                    && b != b'\\'
                    && !(self.opts.escape_html && (b == b'<' || b == b'>' || b == b'&'));
                if safe {
                    out.push(b);
                } else {
                    match b {
                        b'\\' | b'"' => {
                            out.push(b'\\');
                            out.push(b);
                        }
                        b'\x08' => out.extend_from_slice(b"\\b"),
                        b'\x0c' => out.extend_from_slice(b"\\f"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        _ => {
                            out.extend_from_slice(b"\\u00");
                            out.push(HEX[usize::from(b >> 4)]);
                            out.push(HEX[usize::from(b & 0xF)]);
                        }
                    }
                }
                i += 1;
                continue;
            }
            let (r, w) = decode_rune(&s[i..]);
            if r == RUNE_ERROR && w == 1 {
                out.extend_from_slice(b"\\ufffd");
                i += 1;
                continue;
            }
            if r == '\u{2028}' || r == '\u{2029}' {
                out.extend_from_slice(b"\\u202");
                out.push(HEX[(r as usize) & 0xF]);
                i += w;
                continue;
            }
            out.extend_from_slice(&s[i..i + w]);
            i += w;
        }
        out.push(b'"');
    }
}

/// Go's float encoding in JSON: shortest representation, exponent form outside
/// `[1e-6, 1e21)`, with `e-07` shortened to `e-7`.
fn encode_float(f: f64, kind: FloatKind) -> Result<String, JsonError> {
    if f.is_nan() || f.is_infinite() {
        let shown = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(JsonError(format!("json: unsupported value: {shown}")));
    }
    let abs = f.abs();
    let bits32 = kind == FloatKind::Float32;
    let exp_form = abs != 0.0
        && if bits32 {
            (abs as f32) < 1e-6 || (abs as f32) >= 1e21
        } else {
            !(1e-6..1e21).contains(&abs)
        };
    let (neg, digits, exp10) = shortest_digits(f, bits32);
    let mut text = String::new();
    if neg {
        text.push('-');
    }
    if exp_form {
        text.push_str(&digits[..1]);
        if digits.len() > 1 {
            text.push('.');
            text.push_str(&digits[1..]);
        }
        let e = exp10 - 1;
        text.push('e');
        text.push(if e < 0 { '-' } else { '+' });
        let e = e.unsigned_abs();
        // Go's 'e' format prints at least two exponent digits; JSON then drops a leading
        // zero of a negative two-digit exponent, so only "e+0X" keeps it.
        if e < 10 && exp10 > 0 {
            text.push('0');
        }
        text.push_str(&e.to_string());
    } else {
        text.push_str(&format_fixed(&digits, exp10));
    }
    Ok(text)
}

/// The shortest round-trip decimal digits of `f` (as `f32` when `bits32`), and the decimal
/// exponent such that the value is `0.DIGITS × 10^exp10`.
pub(crate) fn shortest_digits(f: f64, bits32: bool) -> (bool, String, i32) {
    let text = if bits32 {
        format!("{:e}", f as f32)
    } else {
        format!("{f:e}")
    };
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() {
        return (neg, "0".to_owned(), 1);
    }
    (neg, digits.to_owned(), exp + 1)
}

/// `0.DIGITS × 10^exp10` in plain decimal notation (Go's `%f` with shortest precision).
pub(crate) fn format_fixed(digits: &str, exp10: i32) -> String {
    if digits == "0" {
        return "0".to_owned();
    }
    if exp10 <= 0 {
        let mut s = "0.".to_owned();
        s.push_str(&"0".repeat((-exp10) as usize));
        s.push_str(digits);
        s
    } else if exp10 as usize >= digits.len() {
        let mut s = digits.to_owned();
        s.push_str(&"0".repeat(exp10 as usize - digits.len()));
        s
    } else {
        let (int, frac) = digits.split_at(exp10 as usize);
        format!("{int}.{frac}")
    }
}

/// Go's `json.Indent` of compact JSON with no prefix.
fn indent(src: &[u8], indent: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut need_indent = false;
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        for _ in 0..depth {
            out.extend_from_slice(indent);
        }
    };
    for &c in src {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        if need_indent && c != b']' && c != b'}' {
            need_indent = false;
            depth += 1;
            newline(&mut out, depth);
        }
        match c {
            b'"' => {
                in_string = true;
                out.push(c);
            }
            b'{' | b'[' => {
                need_indent = true;
                out.push(c);
            }
            b',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            b':' => {
                out.push(c);
                out.push(b' ');
            }
            b'}' | b']' => {
                if need_indent {
                    need_indent = false;
                } else {
                    depth = depth.saturating_sub(1);
                    newline(&mut out, depth);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Go's `quoteChar` for syntax error messages.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        _ => {
            let r = char::from(c);
            let inner = match r {
                '\x07' => "\\a".to_owned(),
                '\x08' => "\\b".to_owned(),
                '\x0c' => "\\f".to_owned(),
                '\n' => "\\n".to_owned(),
                '\r' => "\\r".to_owned(),
                '\t' => "\\t".to_owned(),
                '\x0b' => "\\v".to_owned(),
                '\\' => "\\\\".to_owned(),
                c if (c as u32) < 0x20 || c == '\x7f' => format!("\\x{:02x}", c as u32),
                c if (0x80..0xA1).contains(&(c as u32)) || c == '\u{AD}' => {
                    format!("\\u{:04x}", c as u32)
                }
                c => c.to_string(),
            };
            format!("'{inner}'")
        }
    }
}

/// A JSON decoding error, with Go's message.
#[derive(Debug)]
pub(crate) struct DecodeError(pub(crate) String);

const MAX_NESTING: usize = 10_000;

/// Go's `json.Unmarshal(data, &v)` with `v interface{}`.
pub(crate) fn unmarshal(data: &[u8]) -> Result<Value, DecodeError> {
    check_valid(data)?;
    let mut p = Parser { data, pos: 0 };
    p.skip_space();
    p.value()
}

fn syntax_error(c: u8, context: &str) -> DecodeError {
    DecodeError(format!("invalid character {} {context}", quote_char(c)))
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `checkValid`: a full syntax check with Go's error messages.
fn check_valid(data: &[u8]) -> Result<(), DecodeError> {
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        ObjectKey,
        ObjectValue,
        Array,
    }
    let eof = || DecodeError("unexpected end of JSON input".to_owned());
    let mut stack: Vec<Ctx> = Vec::new();
    let mut i = 0;
    let n = data.len();
    let skip = |i: &mut usize| {
        while *i < n && is_space(data[*i]) {
            *i += 1;
        }
    };
    // Parse one value starting at i (after whitespace); returns when a value is complete.
    'outer: loop {
        skip(&mut i);
        if i >= n {
            return Err(eof());
        }
        let c = data[i];
        // Begin value.
        match c {
            b'{' => {
                i += 1;
                if stack.len() >= MAX_NESTING {
                    return Err(syntax_error(c, "exceeded max depth"));
                }
                skip(&mut i);
                if i >= n {
                    return Err(eof());
                }
                if data[i] == b'}' {
                    i += 1;
                } else if data[i] == b'"' {
                    stack.push(Ctx::ObjectKey);
                    continue 'outer;
                } else {
                    return Err(syntax_error(
                        data[i],
                        "looking for beginning of object key string",
                    ));
                }
            }
            b'[' => {
                i += 1;
                if stack.len() >= MAX_NESTING {
                    return Err(syntax_error(c, "exceeded max depth"));
                }
                skip(&mut i);
                if i >= n {
                    return Err(eof());
                }
                if data[i] == b']' {
                    i += 1;
                } else {
                    stack.push(Ctx::Array);
                    continue 'outer;
                }
            }
            b'"' => {
                i += 1;
                loop {
                    if i >= n {
                        return Err(eof());
                    }
                    let c = data[i];
                    i += 1;
                    match c {
                        b'"' => break,
                        b'\\' => {
                            if i >= n {
                                return Err(eof());
                            }
                            let e = data[i];
                            i += 1;
                            match e {
                                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {}
                                b'u' => {
                                    for _ in 0..4 {
                                        if i >= n {
                                            return Err(eof());
                                        }
                                        if !data[i].is_ascii_hexdigit() {
                                            return Err(syntax_error(
                                                data[i],
                                                "in \\u hexadecimal character escape",
                                            ));
                                        }
                                        i += 1;
                                    }
                                }
                                _ => return Err(syntax_error(e, "in string escape code")),
                            }
                        }
                        c if c < 0x20 => return Err(syntax_error(c, "in string literal")),
                        _ => {}
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                if c == b'-' {
                    i += 1;
                    if i >= n {
                        return Err(eof());
                    }
                    if !data[i].is_ascii_digit() {
                        return Err(syntax_error(data[i], "in numeric literal"));
                    }
                }
                if data[i] == b'0' {
                    i += 1;
                } else {
                    while i < n && data[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < n && data[i] == b'.' {
                    i += 1;
                    if i >= n {
                        return Err(eof());
                    }
                    if !data[i].is_ascii_digit() {
                        return Err(syntax_error(data[i], "after decimal point in numeric literal"));
                    }
                    while i < n && data[i].is_ascii_digit() {
                        i += 1;
                    }
                }
                if i < n && (data[i] == b'e' || data[i] == b'E') {
                    i += 1;
                    if i < n && (data[i] == b'+' || data[i] == b'-') {
                        i += 1;
                    }
                    if i >= n {
                        return Err(eof());
                    }
                    if !data[i].is_ascii_digit() {
                        return Err(syntax_error(data[i], "in exponent of numeric literal"));
                    }
                    while i < n && data[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            b't' | b'f' | b'n' => {
                let word: &[u8] = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                let name = std::str::from_utf8(word).unwrap_or("");
                i += 1;
                for &expected in &word[1..] {
                    if i >= n {
                        return Err(eof());
                    }
                    if data[i] != expected {
                        return Err(syntax_error(
                            data[i],
                            &format!("in literal {name} (expecting {})", quote_char(expected)),
                        ));
                    }
                    i += 1;
                }
            }
            _ => return Err(syntax_error(c, "looking for beginning of value")),
        }
        // A value ended: decide what comes next.
        loop {
            skip(&mut i);
            let Some(ctx) = stack.last().copied() else {
                if i < n {
                    return Err(syntax_error(data[i], "after top-level value"));
                }
                return Ok(());
            };
            if i >= n {
                return Err(eof());
            }
            let c = data[i];
            match ctx {
                Ctx::ObjectKey => {
                    if c != b':' {
                        return Err(syntax_error(c, "after object key"));
                    }
                    i += 1;
                    if let Some(top) = stack.last_mut() {
                        *top = Ctx::ObjectValue;
                    }
                    continue 'outer;
                }
                Ctx::ObjectValue => {
                    if c == b',' {
                        i += 1;
                        skip(&mut i);
                        if i >= n {
                            return Err(eof());
                        }
                        if data[i] != b'"' {
                            return Err(syntax_error(
                                data[i],
                                "looking for beginning of object key string",
                            ));
                        }
                        if let Some(top) = stack.last_mut() {
                            *top = Ctx::ObjectKey;
                        }
                        continue 'outer;
                    }
                    if c == b'}' {
                        i += 1;
                        stack.pop();
                        continue;
                    }
                    return Err(syntax_error(c, "after object key:value pair"));
                }
                Ctx::Array => {
                    if c == b',' {
                        i += 1;
                        continue 'outer;
                    }
                    if c == b']' {
                        i += 1;
                        stack.pop();
                        continue;
                    }
                    return Err(syntax_error(c, "after array element"));
                }
            }
        }
    }
}

/// Builds values from input that [`check_valid`] accepted.
struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.pos < self.data.len() && is_space(self.data[self.pos]) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> u8 {
        self.data.get(self.pos).copied().unwrap_or(0)
    }

    /// Builds the value at the current position. Iterative, so that deeply nested input
    /// (Go accepts 10000 levels) cannot overflow the stack.
    fn value(&mut self) -> Result<Value, DecodeError> {
        enum Frame {
            Array(Vec<Value>),
            Object(Map, Str),
        }
        let mut stack: Vec<Frame> = Vec::new();
        loop {
            self.skip_space();
            // Parse one scalar, or open a container.
            let mut done = match self.peek() {
                b'{' => {
                    self.pos += 1;
                    let m = Map::new(Type::String, Type::Interface);
                    self.skip_space();
                    if self.peek() == b'}' {
                        self.pos += 1;
                        Value::Map(m)
                    } else {
                        let key = self.object_key();
                        stack.push(Frame::Object(m, key));
                        continue;
                    }
                }
                b'[' => {
                    self.pos += 1;
                    self.skip_space();
                    if self.peek() == b']' {
                        self.pos += 1;
                        Value::List(List::interfaces(Vec::new()))
                    } else {
                        stack.push(Frame::Array(Vec::new()));
                        continue;
                    }
                }
                _ => self.scalar()?,
            };
            // Attach the finished value to its container, closing containers as they end.
            loop {
                let Some(top) = stack.last_mut() else {
                    return Ok(done);
                };
                self.skip_space();
                let c = self.peek();
                self.pos += 1;
                match top {
                    Frame::Array(items) => {
                        items.push(done);
                        if c == b',' {
                            break;
                        }
                    }
                    Frame::Object(m, key) => {
                        m.insert(MapKey::String(key.clone()), done);
                        if c == b',' {
                            self.skip_space();
                            *key = self.object_key();
                            break;
                        }
                    }
                }
                done = match stack.pop() {
                    Some(Frame::Array(items)) => Value::List(List::interfaces(items)),
                    Some(Frame::Object(m, _)) => Value::Map(m),
                    None => return Err(DecodeError("unexpected end of JSON input".to_owned())),
                };
            }
        }
    }

    /// An object key and the `:` after it.
    fn object_key(&mut self) -> Str {
        self.skip_space();
        let key = Str::from_bytes(self.string());
        self.skip_space();
        self.pos += 1; // ':'
        key
    }

    fn scalar(&mut self) -> Result<Value, DecodeError> {
        match self.peek() {
            b'"' => Ok(Value::String(Str::from_bytes(self.string()))),
            b't' => {
                self.pos += 4;
                Ok(Value::Bool(true))
            }
            b'f' => {
                self.pos += 5;
                Ok(Value::Bool(false))
            }
            b'n' => {
                self.pos += 4;
                Ok(Value::Nil)
            }
            _ => {
                let start = self.pos;
                while self.pos < self.data.len()
                    && matches!(
                        self.data[self.pos],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.pos += 1;
                }
                let text = &self.data[start..self.pos];
                let s = std::str::from_utf8(text).unwrap_or("0");
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() => Ok(Value::float(f)),
                    _ => Err(DecodeError(format!(
                        "json: cannot unmarshal number {s} into Go value of type float64"
                    ))),
                }
            }
        }
    }

    /// A string literal at the current position, unquoted as Go does (invalid UTF-8 and
    /// lone surrogates become U+FFFD).
    fn string(&mut self) -> Vec<u8> {
        let data = self.data;
        self.pos += 1; // opening quote
        let mut out = Vec::new();
        loop {
            let Some(&c) = data.get(self.pos) else {
                return out;
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    return out;
                }
                b'\\' => {
                    let e = data.get(self.pos + 1).copied().unwrap_or(b'"');
                    self.pos += 2;
                    match e {
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let r1 = self.hex4();
                            if (0xD800..0xE000).contains(&r1) {
                                // A surrogate: valid only as the first half of a pair.
                                if r1 < 0xDC00
                                    && data.get(self.pos) == Some(&b'\\')
                                    && data.get(self.pos + 1) == Some(&b'u')
                                {
                                    let save = self.pos;
                                    self.pos += 2;
                                    let r2 = self.hex4();
                                    if (0xDC00..0xE000).contains(&r2) {
                                        let c = 0x10000 + ((r1 - 0xD800) << 10) + (r2 - 0xDC00);
                                        push_rune(&mut out, char::from_u32(c).unwrap_or(RUNE_ERROR));
                                        continue;
                                    }
                                    self.pos = save;
                                }
                                push_rune(&mut out, RUNE_ERROR);
                            } else {
                                push_rune(&mut out, char::from_u32(r1).unwrap_or(RUNE_ERROR));
                            }
                        }
                        other => out.push(other),
                    }
                }
                c if c < 0x80 => {
                    out.push(c);
                    self.pos += 1;
                }
                _ => {
                    let (r, w) = decode_rune(&data[self.pos..]);
                    if r == RUNE_ERROR && w == 1 {
                        push_rune(&mut out, RUNE_ERROR);
                    } else {
                        out.extend_from_slice(&data[self.pos..self.pos + w]);
                    }
                    self.pos += w.max(1);
                }
            }
        }
    }

    fn hex4(&mut self) -> u32 {
        let mut v = 0;
        for _ in 0..4 {
            let d = self
                .data
                .get(self.pos)
                .and_then(|c| char::from(*c).to_digit(16))
                .unwrap_or(0);
            v = v * 16 + d;
            self.pos += 1;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Value) -> String {
        String::from_utf8(marshal(v, EncodeOptions { escape_html: true }).unwrap()).unwrap()
    }

    #[test]
    fn encodes_like_go() {
        let floats = Value::List(List::interfaces(
            [1.0, 0.1, 1e21, 1e-7, 100.0, -0.0, 123456789.125, 1e20, 5e-324]
                .into_iter()
                .map(Value::float)
                .collect(),
        ));
        assert_eq!(
            enc(&floats),
            "[1,0.1,1e+21,1e-7,100,-0,123456789.125,100000000000000000000,5e-324]"
        );
        assert_eq!(
            enc(&Value::string("<&>\u{2028}\t\x01é")),
            r#""\u003c\u0026\u003e\u2028\t\u0001é""#
        );
        let m = Map::string_interface([("b", Value::int(2)), ("a", Value::Nil)]);
        assert_eq!(enc(&Value::Map(m)), r#"{"a":null,"b":2}"#);
        let bad = Map::new(Type::Interface, Type::Interface);
        assert_eq!(
            marshal(&Value::Map(bad), EncodeOptions { escape_html: true })
                .unwrap_err()
                .0,
            "json: unsupported type: map[interface {}]interface {}"
        );
        assert_eq!(enc(&Value::List(List::nil(Type::Interface))), "null");
    }

    #[test]
    fn indents_like_go() {
        let v = unmarshal(br#"{"a":[1,{"b":{}}],"c":[]}"#).unwrap();
        let out = String::from_utf8(marshal_indent(&v).unwrap()).unwrap();
        assert_eq!(
            out,
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": {}\n    }\n  ],\n  \"c\": []\n}"
        );
    }

    #[test]
    fn decodes_with_go_errors() {
        assert_eq!(
            unmarshal(b"{bad").unwrap_err().0,
            "invalid character 'b' looking for beginning of object key string"
        );
        assert_eq!(unmarshal(b"").unwrap_err().0, "unexpected end of JSON input");
        assert_eq!(
            unmarshal(b"[1,]").unwrap_err().0,
            "invalid character ']' looking for beginning of value"
        );
        assert_eq!(
            unmarshal(b"01").unwrap_err().0,
            "invalid character '1' after top-level value"
        );
        assert_eq!(unmarshal(b"tru").unwrap_err().0, "unexpected end of JSON input");
        assert_eq!(
            unmarshal(b"trux").unwrap_err().0,
            "invalid character 'x' in literal true (expecting 'e')"
        );
        assert_eq!(
            unmarshal(b"{\"a\" 1}").unwrap_err().0,
            "invalid character '1' after object key"
        );
        let v = unmarshal(br#"{"a": [1, 2.5, "x\u00e9\ud83d\ude80"], "b": {"c": null}}"#).unwrap();
        let m = v.as_map().unwrap();
        let a = m.get_str("a").unwrap();
        assert_eq!(a.as_list().unwrap().items()[0].type_name(), "float64");
        assert_eq!(
            a.as_list().unwrap().items()[2].as_string().unwrap().as_str(),
            Some("xé🚀")
        );
        assert!(unmarshal(b"1e999").is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let value = unmarshal(deep.as_bytes()).unwrap();
        let encoded = marshal(&value, EncodeOptions { escape_html: true }).unwrap();
        assert_eq!(encoded, deep.as_bytes());
        let too_deep = format!("{}{}", "[".repeat(10_001), "]".repeat(10_001));
        assert_eq!(
            unmarshal(too_deep.as_bytes()).unwrap_err().0,
            "invalid character '[' exceeded max depth"
        );
    }
}
