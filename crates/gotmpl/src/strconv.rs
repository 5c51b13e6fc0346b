//! Go's `strconv` conversions that output formats depend on: `FormatFloat` in every format,
//! `Quote` and its variants, `Unquote`, and the integer and float parsers the template
//! parser uses for literals.
//!
//! Float formatting takes its decimal digits from Rust's formatter, which (like Go) produces
//! the shortest round-tripping digits in shortest mode and correctly rounded digits, ties to
//! even, in fixed mode; Go's layout rules (`%e` exponents with at least two digits, `%g`'s
//! choice between the forms) are applied on top.

use crate::unicode::{self, RUNE_ERROR};

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";
const UPPER_HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Decimal digits of a float: `digits` (ASCII, no trailing zeros; empty for zero) with the
/// decimal point `dp` places after the first digit's position (value = 0.d1d2... × 10^dp).
struct Digits {
    d: Vec<u8>,
    dp: i32,
}

/// Parses Rust's `{:e}` output (`1.2345e-7`, `0e0`) into digits and decimal point.
fn digits_from_exp_form(s: &str) -> Digits {
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut d: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    while d.last() == Some(&b'0') {
        d.pop();
    }
    if d.is_empty() {
        return Digits { d, dp: 0 };
    }
    Digits { d, dp: exp + 1 }
}

/// Shortest digits that round-trip at the given bit size.
fn shortest_digits(f: f64, bit_size: u32) -> Digits {
    let f = f.abs();
    let s = if bit_size == 32 {
        format!("{:e}", f as f32)
    } else {
        format!("{f:e}")
    };
    digits_from_exp_form(&s)
}

/// `n` significant digits, correctly rounded.
fn significant_digits(f: f64, n: usize) -> Digits {
    let s = format!("{:.*e}", n.saturating_sub(1), f.abs());
    digits_from_exp_form(&s)
}

/// Digits correctly rounded to `frac` places after the decimal point.
fn fixed_digits(f: f64, frac: usize) -> Digits {
    let s = format!("{:.*}", frac, f.abs());
    let (int, fr) = s.split_once('.').unwrap_or((&s, ""));
    let int = int.trim_start_matches('0');
    let mut d: Vec<u8> = Vec::with_capacity(int.len() + fr.len());
    let dp = if int.is_empty() {
        let lead = fr.bytes().take_while(|&b| b == b'0').count();
        d.extend_from_slice(&fr.as_bytes()[lead..]);
        -(lead as i32)
    } else {
        d.extend_from_slice(int.as_bytes());
        d.extend_from_slice(fr.as_bytes());
        int.len() as i32
    };
    while d.last() == Some(&b'0') {
        d.pop();
    }
    if d.is_empty() {
        return Digits { d, dp: 0 };
    }
    Digits { d, dp }
}

/// `strconv.FormatFloat(f, fmt, prec, bitSize)`: `fmt` is one of `b'b' b'e' b'E' b'f' b'g'
/// b'G' b'x' b'X'`, `prec` -1 means the shortest representation that round-trips.
pub fn format_float(f: f64, fmt: u8, prec: i32, bit_size: u32) -> String {
    let mut out = Vec::with_capacity(24);
    append_float(&mut out, f, fmt, prec, bit_size);
    String::from_utf8(out).unwrap_or_default()
}

/// `strconv.AppendFloat`: [`format_float`] appending to `dst`.
pub fn append_float(dst: &mut Vec<u8>, f: f64, fmt: u8, prec: i32, bit_size: u32) {
    let f = if bit_size == 32 { f64::from(f as f32) } else { f };
    if f.is_nan() {
        dst.extend_from_slice(b"NaN");
        return;
    }
    if f.is_infinite() {
        dst.extend_from_slice(if f < 0.0 { b"-Inf" } else { b"+Inf" });
        return;
    }
    let neg = f.is_sign_negative();
    match fmt {
        b'b' => return fmt_b(dst, f, bit_size),
        b'x' | b'X' => return fmt_x(dst, f, prec, fmt, bit_size),
        b'e' | b'E' | b'f' | b'g' | b'G' => {}
        _ => {
            dst.push(b'%');
            dst.push(fmt);
            return;
        }
    }
    let shortest = prec < 0;
    let mut prec = prec;
    let digs = if shortest {
        let digs = shortest_digits(f, bit_size);
        let nd = digs.d.len() as i32;
        prec = match fmt {
            b'e' | b'E' => (nd - 1).max(0),
            b'f' => (nd - digs.dp).max(0),
            _ => nd,
        };
        digs
    } else {
        match fmt {
            b'e' | b'E' => significant_digits(f, prec as usize + 1),
            b'f' => fixed_digits(f, prec as usize),
            _ => {
                if prec == 0 {
                    prec = 1;
                }
                significant_digits(f, prec as usize)
            }
        }
    };
    format_digits(dst, shortest, neg, &digs, prec, fmt);
}

fn format_digits(dst: &mut Vec<u8>, shortest: bool, neg: bool, digs: &Digits, prec: i32, fmt: u8) {
    let nd = digs.d.len() as i32;
    match fmt {
        b'e' | b'E' => fmt_e(dst, neg, digs, prec, fmt),
        b'f' => fmt_f(dst, neg, digs, prec),
        _ => {
            let mut eprec = prec;
            if eprec > nd && nd >= digs.dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = digs.dp - 1;
            let mut prec = prec;
            if exp < -4 || exp >= eprec {
                if prec > nd {
                    prec = nd;
                }
                fmt_e(dst, neg, digs, prec - 1, fmt + b'e' - b'g');
                return;
            }
            if prec > digs.dp {
                prec = nd;
            }
            fmt_f(dst, neg, digs, (prec - digs.dp).max(0));
        }
    }
}

fn fmt_e(dst: &mut Vec<u8>, neg: bool, d: &Digits, prec: i32, fmt: u8) {
    if neg {
        dst.push(b'-');
    }
    let nd = d.d.len() as i32;
    dst.push(if nd != 0 { d.d[0] } else { b'0' });
    if prec > 0 {
        dst.push(b'.');
        let mut i = 1;
        let m = nd.min(prec + 1);
        if i < m {
            dst.extend_from_slice(&d.d[i as usize..m as usize]);
            i = m;
        }
        while i <= prec {
            dst.push(b'0');
            i += 1;
        }
    }
    dst.push(fmt);
    let mut exp = d.dp - 1;
    if nd == 0 {
        exp = 0;
    }
    if exp < 0 {
        dst.push(b'-');
        exp = -exp;
    } else {
        dst.push(b'+');
    }
    let exp = exp as u32;
    if exp < 10 {
        dst.extend_from_slice(&[b'0', exp as u8 + b'0']);
    } else if exp < 100 {
        dst.extend_from_slice(&[(exp / 10) as u8 + b'0', (exp % 10) as u8 + b'0']);
    } else {
        dst.extend_from_slice(&[
            (exp / 100) as u8 + b'0',
            (exp / 10 % 10) as u8 + b'0',
            (exp % 10) as u8 + b'0',
        ]);
    }
}

fn fmt_f(dst: &mut Vec<u8>, neg: bool, d: &Digits, prec: i32) {
    if neg {
        dst.push(b'-');
    }
    let nd = d.d.len() as i32;
    if d.dp > 0 {
        let m = nd.min(d.dp);
        dst.extend_from_slice(&d.d[..m as usize]);
        for _ in m..d.dp {
            dst.push(b'0');
        }
    } else {
        dst.push(b'0');
    }
    if prec > 0 {
        dst.push(b'.');
        for i in 1..=prec {
            let j = d.dp + i - 1;
            dst.push(if (0..nd).contains(&j) {
                d.d[j as usize]
            } else {
                b'0'
            });
        }
    }
}

/// `%b`: `-ddddp±ddd`, the binary exponent form.
fn fmt_b(dst: &mut Vec<u8>, f: f64, bit_size: u32) {
    let (mant, exp, neg) = if bit_size == 32 {
        let bits = (f as f32).to_bits();
        let neg = bits >> 31 != 0;
        let mut exp = ((bits >> 23) & 0xFF) as i32;
        let mut mant = u64::from(bits & ((1 << 23) - 1));
        if exp == 0 {
            exp = 1;
        } else {
            mant |= 1 << 23;
        }
        (mant, exp - 127 - 23, neg)
    } else {
        let bits = f.to_bits();
        let neg = bits >> 63 != 0;
        let mut exp = ((bits >> 52) & 0x7FF) as i32;
        let mut mant = bits & ((1 << 52) - 1);
        if exp == 0 {
            exp = 1;
        } else {
            mant |= 1 << 52;
        }
        (mant, exp - 1023 - 52, neg)
    };
    if neg {
        dst.push(b'-');
    }
    dst.extend_from_slice(mant.to_string().as_bytes());
    dst.push(b'p');
    if exp >= 0 {
        dst.push(b'+');
    }
    dst.extend_from_slice(exp.to_string().as_bytes());
}

/// `%x`/`%X`: hexadecimal mantissa and binary exponent, `-0x1.23abcp+20`.
fn fmt_x(dst: &mut Vec<u8>, f: f64, prec: i32, fmt: u8, bit_size: u32) {
    let (mut mant, mut exp, neg, mantbits) = if bit_size == 32 {
        let bits = (f as f32).to_bits();
        let e = ((bits >> 23) & 0xFF) as i32;
        let mut m = u64::from(bits & ((1 << 23) - 1));
        let e = if e == 0 {
            1
        } else {
            m |= 1 << 23;
            e
        };
        (m, e - 127, bits >> 31 != 0, 23)
    } else {
        let bits = f.to_bits();
        let e = ((bits >> 52) & 0x7FF) as i32;
        let mut m = bits & ((1 << 52) - 1);
        let e = if e == 0 {
            1
        } else {
            m |= 1 << 52;
            e
        };
        (m, e - 1023, bits >> 63 != 0, 52)
    };
    if mant == 0 {
        exp = 0;
    }
    // Shift digits so leading 1 (if any) is at bit 1<<60.
    mant <<= 60 - mantbits;
    while mant != 0 && mant & (1 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    // Round if requested.
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1 << 61) != 0 {
            // Wrapped around.
            mant >>= 1;
            exp += 1;
        }
    }
    let hex = if fmt == b'X' { UPPER_HEX } else { LOWER_HEX };
    if neg {
        dst.push(b'-');
    }
    dst.push(b'0');
    dst.push(fmt);
    dst.push(b'0' + ((mant >> 60) & 1) as u8);
    mant <<= 4; // remove leading 0 or 1
    if prec < 0 && mant != 0 {
        dst.push(b'.');
        while mant != 0 {
            dst.push(hex[((mant >> 60) & 15) as usize]);
            mant <<= 4;
        }
    } else if prec > 0 {
        dst.push(b'.');
        for _ in 0..prec {
            dst.push(hex[((mant >> 60) & 15) as usize]);
            mant <<= 4;
        }
    }
    dst.push(if fmt == b'X' { b'P' } else { b'p' });
    if exp < 0 {
        dst.push(b'-');
        exp = -exp;
    } else {
        dst.push(b'+');
    }
    if exp < 100 {
        dst.push(exp as u8 / 10 + b'0');
        dst.push(exp as u8 % 10 + b'0');
    } else if exp < 1000 {
        dst.push((exp / 100) as u8 + b'0');
        dst.push((exp / 10 % 10) as u8 + b'0');
        dst.push((exp % 10) as u8 + b'0');
    } else {
        dst.push((exp / 1000) as u8 + b'0');
        dst.push((exp / 100 % 10) as u8 + b'0');
        dst.push((exp / 10 % 10) as u8 + b'0');
        dst.push((exp % 10) as u8 + b'0');
    }
}

/// `strconv.Quote(s)`: a double-quoted Go string literal, escaping non-printable runes and
/// invalid UTF-8 bytes as Go does.
pub fn quote(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    append_quote(&mut out, s);
    String::from_utf8(out).unwrap_or_default()
}

/// `strconv.AppendQuote`.
pub fn append_quote(dst: &mut Vec<u8>, s: &[u8]) {
    append_quoted_with(dst, s, b'"', false, false);
}

/// `strconv.QuoteToASCII`: like [`quote`] but escaping every non-ASCII rune.
pub fn quote_to_ascii(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    append_quoted_with(&mut out, s, b'"', true, false);
    String::from_utf8(out).unwrap_or_default()
}

/// `strconv.AppendQuoteToASCII`.
pub fn append_quote_to_ascii(dst: &mut Vec<u8>, s: &[u8]) {
    append_quoted_with(dst, s, b'"', true, false);
}

/// `strconv.QuoteToGraphic`.
pub fn quote_to_graphic(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len() + 2);
    append_quoted_with(&mut out, s, b'"', false, true);
    String::from_utf8(out).unwrap_or_default()
}

/// `strconv.QuoteRune(r)`: a single-quoted Go character literal (invalid runes become
/// U+FFFD).
pub fn quote_rune(r: i64) -> String {
    let mut out = Vec::with_capacity(8);
    append_quote_rune(&mut out, r, false);
    String::from_utf8(out).unwrap_or_default()
}

/// `strconv.AppendQuoteRune` / `AppendQuoteRuneToASCII`.
pub fn append_quote_rune(dst: &mut Vec<u8>, r: i64, ascii_only: bool) {
    let r = if unicode::valid_rune(r) {
        r as u32
    } else {
        RUNE_ERROR
    };
    dst.push(b'\'');
    append_escaped_rune(dst, r, b'\'', ascii_only, false);
    dst.push(b'\'');
}

fn append_quoted_with(dst: &mut Vec<u8>, s: &[u8], quote: u8, ascii_only: bool, graphic_only: bool) {
    dst.push(quote);
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if (0x20..0x80).contains(&b) && b != 0x7F && b != quote && b != b'\\' {
            dst.push(b);
            i += 1;
            continue;
        }
        let (r, w) = unicode::decode_rune(&s[i..]);
        if w == 1 && r == RUNE_ERROR {
            dst.extend_from_slice(b"\\x");
            dst.push(LOWER_HEX[usize::from(b >> 4)]);
            dst.push(LOWER_HEX[usize::from(b & 0xF)]);
            i += 1;
            continue;
        }
        append_escaped_rune(dst, r, quote, ascii_only, graphic_only);
        i += w;
    }
    dst.push(quote);
}

fn append_escaped_rune(dst: &mut Vec<u8>, r: u32, quote: u8, ascii_only: bool, graphic_only: bool) {
    if r == u32::from(quote) || r == u32::from(b'\\') {
        dst.push(b'\\');
        unicode::append_rune(dst, r);
        return;
    }
    if ascii_only {
        if r < 0x80 && unicode::is_print(r) {
            dst.push(r as u8);
            return;
        }
    } else if unicode::is_print(r) || (graphic_only && unicode::is_graphic(r)) {
        unicode::append_rune(dst, r);
        return;
    }
    match r {
        0x07 => dst.extend_from_slice(b"\\a"),
        0x08 => dst.extend_from_slice(b"\\b"),
        0x0C => dst.extend_from_slice(b"\\f"),
        0x0A => dst.extend_from_slice(b"\\n"),
        0x0D => dst.extend_from_slice(b"\\r"),
        0x09 => dst.extend_from_slice(b"\\t"),
        0x0B => dst.extend_from_slice(b"\\v"),
        _ => {
            if r < 0x20 || r == 0x7F {
                dst.extend_from_slice(b"\\x");
                dst.push(LOWER_HEX[(r >> 4) as usize & 0xF]);
                dst.push(LOWER_HEX[r as usize & 0xF]);
            } else {
                let r = if unicode::valid_rune(i64::from(r)) {
                    r
                } else {
                    RUNE_ERROR
                };
                if r < 0x10000 {
                    dst.extend_from_slice(b"\\u");
                    for s in (0..=12).rev().step_by(4) {
                        dst.push(LOWER_HEX[(r >> s) as usize & 0xF]);
                    }
                } else {
                    dst.extend_from_slice(b"\\U");
                    for s in (0..=28).rev().step_by(4) {
                        dst.push(LOWER_HEX[(r >> s) as usize & 0xF]);
                    }
                }
            }
        }
    }
}

/// `strconv.CanBackquote`: whether `s` can be written as a raw string literal.
pub fn can_backquote(s: &[u8]) -> bool {
    let mut i = 0;
    while i < s.len() {
        let (r, w) = unicode::decode_rune(&s[i..]);
        i += w;
        if w > 1 {
            if r == 0xFEFF {
                return false;
            }
            continue;
        }
        if r == RUNE_ERROR {
            return false;
        }
        if (r < 0x20 && r != 0x09) || r == u32::from(b'`') || r == 0x7F {
            return false;
        }
    }
    true
}

/// `strconv.IsPrint`.
pub fn is_print(r: u32) -> bool {
    unicode::is_print(r)
}

/// The error of Go's `strconv` parsers and `Unquote`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumError {
    /// `strconv.ErrSyntax`: "invalid syntax".
    Syntax,
    /// `strconv.ErrRange`: "value out of range".
    Range,
}

impl NumError {
    /// Go's text of the error (without the `strconv.ParseInt: parsing "x": ` prefix).
    pub fn message(self) -> &'static str {
        match self {
            NumError::Syntax => "invalid syntax",
            NumError::Range => "value out of range",
        }
    }
}

/// One character of a quoted literal, as `strconv.UnquoteChar` returns it: the value, whether
/// it must be written as UTF-8 (`multibyte`), and the number of input bytes consumed.
pub fn unquote_char(s: &[u8], quote: u8) -> Result<(u32, bool, usize), NumError> {
    let Some(&c) = s.first() else {
        return Err(NumError::Syntax);
    };
    if c == quote && (quote == b'\'' || quote == b'"') {
        return Err(NumError::Syntax);
    }
    if c >= 0x80 {
        let (r, w) = unicode::decode_rune(s);
        return Ok((r, true, w));
    }
    if c != b'\\' {
        return Ok((u32::from(c), false, 1));
    }
    let Some(&c) = s.get(1) else {
        return Err(NumError::Syntax);
    };
    let rest = &s[2..];
    let simple = |v: u8| Ok((u32::from(v), false, 2));
    match c {
        b'a' => simple(0x07),
        b'b' => simple(0x08),
        b'f' => simple(0x0C),
        b'n' => simple(b'\n'),
        b'r' => simple(b'\r'),
        b't' => simple(b'\t'),
        b'v' => simple(0x0B),
        b'x' | b'u' | b'U' => {
            let n = match c {
                b'x' => 2,
                b'u' => 4,
                _ => 8,
            };
            if rest.len() < n {
                return Err(NumError::Syntax);
            }
            let mut v: u32 = 0;
            for &h in &rest[..n] {
                let x = (h as char).to_digit(16).ok_or(NumError::Syntax)?;
                v = (v << 4) | x;
            }
            if c == b'x' {
                return Ok((v, false, 2 + n));
            }
            if !unicode::valid_rune(i64::from(v)) {
                return Err(NumError::Syntax);
            }
            Ok((v, true, 2 + n))
        }
        b'0'..=b'7' => {
            let mut v = u32::from(c - b'0');
            if rest.len() < 2 {
                return Err(NumError::Syntax);
            }
            for &o in &rest[..2] {
                if !(b'0'..=b'7').contains(&o) {
                    return Err(NumError::Syntax);
                }
                v = (v << 3) | u32::from(o - b'0');
            }
            if v > 255 {
                return Err(NumError::Syntax);
            }
            Ok((v, false, 4))
        }
        b'\\' => simple(b'\\'),
        b'\'' | b'"' => {
            if c != quote {
                return Err(NumError::Syntax);
            }
            simple(c)
        }
        _ => Err(NumError::Syntax),
    }
}

/// `strconv.Unquote`: the value of a Go string literal (`"..."`, `` `...` `` or `'x'`).
pub fn unquote(s: &[u8]) -> Result<Vec<u8>, NumError> {
    if s.len() < 2 {
        return Err(NumError::Syntax);
    }
    let quote = s[0];
    let Some(end) = s[1..].iter().position(|&b| b == quote) else {
        return Err(NumError::Syntax);
    };
    let end = end + 2;
    match quote {
        b'`' => {
            if end != s.len() {
                return Err(NumError::Syntax);
            }
            Ok(s[1..end - 1].iter().copied().filter(|&b| b != b'\r').collect())
        }
        b'"' | b'\'' => {
            let body = &s[..end];
            if !body.contains(&b'\\') && !body.contains(&b'\n') {
                let inner = &s[1..end - 1];
                let valid = if quote == b'"' {
                    std::str::from_utf8(inner).is_ok()
                } else {
                    let (r, n) = unicode::decode_rune(inner);
                    1 + n + 1 == end && (r != RUNE_ERROR || n != 1)
                };
                if valid {
                    if end != s.len() {
                        return Err(NumError::Syntax);
                    }
                    return Ok(inner.to_vec());
                }
            }
            let mut buf = Vec::with_capacity(s.len());
            let mut i = 1;
            while i < s.len() && s[i] != quote {
                if s[i] == b'\n' {
                    return Err(NumError::Syntax);
                }
                let (r, multibyte, w) = unquote_char(&s[i..], quote)?;
                i += w;
                if r < 0x80 || !multibyte {
                    buf.push(r as u8);
                } else {
                    unicode::append_rune(&mut buf, r);
                }
                if quote == b'\'' {
                    break;
                }
            }
            if !(i < s.len() && s[i] == quote) {
                return Err(NumError::Syntax);
            }
            i += 1;
            if i != s.len() {
                return Err(NumError::Syntax);
            }
            Ok(buf)
        }
        _ => Err(NumError::Syntax),
    }
}

/// Go's `underscoreOK`: underscores may only separate digits (or follow a base prefix), in
/// literals with a base prefix or in decimal literals.
pub fn underscore_ok(s: &[u8]) -> bool {
    // saw tracks the last character (class) we saw: ^ start, 0 digit or prefix, _ underscore, ! other.
    let mut saw = b'^';
    let mut i = 0;
    let mut s = s;
    if !s.is_empty() && (s[0] == b'-' || s[0] == b'+') {
        s = &s[1..];
    }
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    while i < s.len() {
        let c = s[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// `strconv.ParseUint(s, base, bitSize)` (base 0 infers the base from the prefix and allows
/// underscores, as Go literals do).
pub fn parse_uint(s: &[u8], base: u32, bit_size: u32) -> Result<u64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let base0 = base == 0;
    let original = s;
    let mut s = s;
    let mut base = base;
    if base == 0 {
        base = 10;
        if s[0] == b'0' {
            if s.len() >= 3 && s[1].eq_ignore_ascii_case(&b'b') {
                base = 2;
                s = &s[2..];
            } else if s.len() >= 3 && s[1].eq_ignore_ascii_case(&b'o') {
                base = 8;
                s = &s[2..];
            } else if s.len() >= 3 && s[1].eq_ignore_ascii_case(&b'x') {
                base = 16;
                s = &s[2..];
            } else {
                base = 8;
                s = &s[1..];
            }
        }
    } else if !(2..=36).contains(&base) {
        return Err(NumError::Syntax);
    }
    let bit_size = if bit_size == 0 { 64 } else { bit_size };
    let max_val: u64 = if bit_size >= 64 {
        u64::MAX
    } else {
        (1u64 << bit_size) - 1
    };
    let mut underscores = false;
    let mut n: u64 = 0;
    let mut overflow = false;
    for &c in s {
        let d = match c {
            b'_' if base0 => {
                underscores = true;
                continue;
            }
            b'0'..=b'9' => u32::from(c - b'0'),
            b'a'..=b'z' => u32::from(c - b'a') + 10,
            b'A'..=b'Z' => u32::from(c - b'A') + 10,
            _ => return Err(NumError::Syntax),
        };
        if d >= base {
            return Err(NumError::Syntax);
        }
        if overflow {
            continue;
        }
        match n
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(u64::from(d)))
        {
            Some(v) if v <= max_val => n = v,
            _ => overflow = true,
        }
    }
    if underscores && !underscore_ok(original) {
        return Err(NumError::Syntax);
    }
    if overflow {
        return Err(NumError::Range);
    }
    Ok(n)
}

/// `strconv.ParseInt(s, base, bitSize)`.
pub fn parse_int(s: &[u8], base: u32, bit_size: u32) -> Result<i64, NumError> {
    if s.is_empty() {
        return Err(NumError::Syntax);
    }
    let (neg, body) = match s[0] {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let bit_size = if bit_size == 0 { 64 } else { bit_size };
    let un = parse_uint(body, base, 64)?;
    let cutoff = 1u64 << (bit_size - 1);
    if !neg && un >= cutoff {
        return Err(NumError::Range);
    }
    if neg && un > cutoff {
        return Err(NumError::Range);
    }
    Ok(if neg {
        (un as i64).wrapping_neg()
    } else {
        un as i64
    })
}

/// `strconv.ParseFloat(s, 64)` for Go literals: decimal and hexadecimal forms with
/// underscores, `inf`/`infinity`/`nan` in any case.
pub fn parse_float(s: &[u8]) -> Result<f64, NumError> {
    let text = std::str::from_utf8(s).map_err(|_| NumError::Syntax)?;
    let (neg, body) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Ok(if neg { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    if lower == "nan" {
        return Ok(f64::NAN);
    }
    let bytes = body.as_bytes();
    if bytes.contains(&b'_') && !underscore_ok(bytes) {
        return Err(NumError::Syntax);
    }
    let cleaned: String = body.chars().filter(|&c| c != '_').collect();
    let v = if cleaned.len() > 2 && (cleaned.starts_with("0x") || cleaned.starts_with("0X")) {
        parse_hex_float(&cleaned[2..])?
    } else {
        if cleaned.is_empty()
            || !cleaned
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            return Err(NumError::Syntax);
        }
        cleaned.parse::<f64>().map_err(|_| NumError::Syntax)?
    };
    if v.is_infinite() {
        return Err(NumError::Range);
    }
    Ok(if neg { -v } else { v })
}

fn parse_hex_float(s: &str) -> Result<f64, NumError> {
    let (mant, exp) = match s.find(['p', 'P']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let Some(exp) = exp else {
        return Err(NumError::Syntax);
    };
    let exp: i64 = exp.parse().map_err(|_| NumError::Syntax)?;
    let mut m: u64 = 0;
    let mut e2: i64 = 0;
    let mut seen_dot = false;
    let mut any = false;
    let mut sticky = false;
    for c in mant.chars() {
        if c == '.' {
            if seen_dot {
                return Err(NumError::Syntax);
            }
            seen_dot = true;
            continue;
        }
        let d = c.to_digit(16).ok_or(NumError::Syntax)?;
        any = true;
        if m >> 58 == 0 {
            m = (m << 4) | u64::from(d);
            if seen_dot {
                e2 -= 4;
            }
        } else {
            sticky |= d != 0;
            if !seen_dot {
                e2 += 4;
            }
        }
    }
    if !any {
        return Err(NumError::Syntax);
    }
    if sticky {
        m |= 1;
    }
    let total = exp.saturating_add(e2).clamp(-5000, 5000) as i32;
    let mut v = m as f64;
    // Scale in steps that stay exact while in range.
    let mut t = total;
    while t > 0 {
        let step = t.min(1000);
        v *= 2f64.powi(step);
        t -= step;
    }
    while t < 0 {
        let step = (-t).min(1000);
        v /= 2f64.powi(step);
        t += step;
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ff(f: f64, fmt: u8, prec: i32) -> String {
        format_float(f, fmt, prec, 64)
    }

    #[test]
    fn format_float_shortest() {
        assert_eq!(ff(1e21, b'g', -1), "1e+21");
        assert_eq!(ff(1e20, b'g', -1), "1e+20");
        assert_eq!(ff(0.1, b'g', -1), "0.1");
        assert_eq!(ff(1.0, b'g', -1), "1");
        assert_eq!(ff(1e-7, b'g', -1), "1e-07");
        assert_eq!(ff(123456789.0, b'g', -1), "1.23456789e+08");
        assert_eq!(ff(100000.0, b'g', -1), "100000");
        assert_eq!(ff(1000000.0, b'g', -1), "1e+06");
        assert_eq!(ff(0.0001, b'g', -1), "0.0001");
        assert_eq!(ff(0.00001, b'g', -1), "1e-05");
        assert_eq!(ff(0.0, b'g', -1), "0");
        assert_eq!(ff(-0.0, b'g', -1), "-0");
        assert_eq!(ff(1.5, b'e', -1), "1.5e+00");
        assert_eq!(ff(0.0, b'e', -1), "0e+00");
        assert_eq!(ff(123.456, b'f', -1), "123.456");
        assert_eq!(ff(1e21, b'f', -1), "1000000000000000000000");
        assert_eq!(ff(5e-324, b'g', -1), "5e-324");
        assert_eq!(ff(1.7976931348623157e308, b'g', -1), "1.7976931348623157e+308");
        assert_eq!(format_float(0.1f32.into(), b'g', -1, 32), "0.1");
        assert_eq!(format_float(16777216.0, b'g', -1, 32), "1.6777216e+07");
    }

    #[test]
    fn format_float_fixed() {
        assert_eq!(ff(1.23456, b'f', 2), "1.23");
        assert_eq!(ff(2.5, b'f', 6), "2.500000");
        assert_eq!(ff(0.00012, b'E', 6), "1.200000E-04");
        assert_eq!(ff(1e21, b'G', -1), "1E+21");
        assert_eq!(ff(0.5, b'f', 0), "0");
        assert_eq!(ff(1.5, b'f', 0), "2");
        assert_eq!(ff(2.5, b'f', 0), "2");
        assert_eq!(ff(0.05, b'f', 1), "0.1");
        assert_eq!(ff(1.0, b'g', 3), "1");
        assert_eq!(ff(123456.0, b'g', 3), "1.23e+05");
        assert_eq!(ff(0.000012345, b'g', 3), "1.23e-05");
        assert_eq!(ff(99.99, b'g', 3), "100");
        assert_eq!(ff(0.0, b'e', 3), "0.000e+00");
        assert_eq!(ff(1e100, b'e', 2), "1.00e+100");
        assert_eq!(ff(-1.0, b'f', 1), "-1.0");
        assert_eq!(ff(f64::NAN, b'g', -1), "NaN");
        assert_eq!(ff(f64::NEG_INFINITY, b'g', -1), "-Inf");
        assert_eq!(ff(f64::INFINITY, b'f', 2), "+Inf");
    }

    #[test]
    fn format_float_binary_and_hex() {
        assert_eq!(ff(1.0, b'b', -1), "4503599627370496p-52");
        assert_eq!(ff(1.0, b'x', -1), "0x1p+00");
        assert_eq!(ff(16.0, b'x', -1), "0x1p+04");
        assert_eq!(ff(1.5, b'X', -1), "0X1.8P+00");
        assert_eq!(ff(3.0, b'x', 3), "0x1.800p+01");
        assert_eq!(ff(0.0, b'x', -1), "0x0p+00");
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(quote(b"quo\"te"), r#""quo\"te""#);
        assert_eq!(quote("é\n\t\u{7f}".as_bytes()), "\"é\\n\\t\\x7f\"");
        assert_eq!(quote(&[0xff, b'a']), "\"\\xffa\"");
        assert_eq!(quote("\u{2028}".as_bytes()), "\"\\u2028\"");
        assert_eq!(quote("\u{1F680}".as_bytes()), "\"\u{1F680}\"");
        assert_eq!(quote("\u{E0001}".as_bytes()), "\"\\U000e0001\"");
        assert_eq!(quote_to_ascii("é".as_bytes()), "\"\\u00e9\"");
        assert_eq!(quote_rune(65), "'A'");
        assert_eq!(quote_rune(0x110000), "'�'");
        assert_eq!(quote_rune(39), "'\\''");
        assert!(can_backquote(b"a\tb"));
        assert!(!can_backquote(b"a`b"));
    }

    #[test]
    fn unquotes_like_go() {
        assert_eq!(unquote(br#""dq\t\"x\"""#).unwrap(), b"dq\t\"x\"");
        assert_eq!(unquote(b"`raw\\t`").unwrap(), b"raw\\t");
        assert_eq!(unquote(br#""\u00e9""#).unwrap(), "é".as_bytes());
        assert_eq!(unquote(br#""\xff""#).unwrap(), vec![0xff]);
        assert_eq!(unquote(br#""\q""#), Err(NumError::Syntax));
        assert_eq!(unquote(b"'a'").unwrap(), b"a");
        assert_eq!(unquote_char(b"\\n'", b'\'').unwrap(), (10, false, 2));
    }

    #[test]
    fn parses_numbers_like_go() {
        assert_eq!(parse_int(b"0x1F", 0, 64), Ok(31));
        assert_eq!(parse_int(b"017", 0, 64), Ok(15));
        assert_eq!(parse_int(b"0o17", 0, 64), Ok(15));
        assert_eq!(parse_int(b"0b101", 0, 64), Ok(5));
        assert_eq!(parse_int(b"1_000", 0, 64), Ok(1000));
        assert_eq!(parse_int(b"1__0", 0, 64), Err(NumError::Syntax));
        assert_eq!(parse_int(b"-1", 0, 64), Ok(-1));
        assert_eq!(parse_uint(b"-1", 0, 64), Err(NumError::Syntax));
        assert_eq!(parse_int(b"9223372036854775808", 0, 64), Err(NumError::Range));
        assert_eq!(parse_int(b"-9223372036854775808", 0, 64), Ok(i64::MIN));
        assert_eq!(parse_uint(b"0xFFFFFFFFFFFFFFFF", 0, 64), Ok(u64::MAX));
        assert_eq!(parse_uint(b"089", 0, 64), Err(NumError::Syntax));
        assert_eq!(parse_float(b"0x1p4"), Ok(16.0));
        assert_eq!(parse_float(b"1e3"), Ok(1000.0));
        assert_eq!(parse_float(b".5"), Ok(0.5));
        assert_eq!(parse_float(b"1."), Ok(1.0));
        assert_eq!(parse_float(b"1e400"), Err(NumError::Range));
        assert_eq!(parse_float(b"089"), Ok(89.0));
        assert_eq!(parse_float(b"0x1.8p1"), Ok(3.0));
        assert_eq!(parse_float(b"1x"), Err(NumError::Syntax));
    }
}
