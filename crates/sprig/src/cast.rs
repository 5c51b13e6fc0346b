//! Number conversion as Sprig does it: spf13/cast v1.3.1 (`ToInt64`, `ToInt`, `ToFloat64`)
//! on top of Go's `strconv.ParseInt` / `ParseFloat`.
//!
//! Sprig's arithmetic never fails: anything cast cannot convert becomes 0 (`add "a" 1` is 1),
//! strings are parsed with base prefixes (`int "010"` is 8, `int64 "0x10"` is 16), floats are
//! truncated, and booleans count as 0 or 1. Reproducing exactly which strings parse is what
//! makes `add "3" 4` render like the Go original.

use kalypso_gotmpl::{Value, strconv};

/// Go's `strconv.ParseInt(s, base, bits)`; `None` on any error.
pub(crate) fn parse_int(s: &[u8], base: u32, bits: u32) -> Option<i64> {
    strconv::parse_int(s, base, bits).ok()
}

/// Go's `strconv.Atoi`.
pub(crate) fn atoi(s: &[u8]) -> Option<i64> {
    parse_int(s, 10, 64)
}

/// Go's `strconv.ParseFloat(s, 64)`; `None` on syntax or range errors.
pub(crate) fn parse_float(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    let (sign, body) = match text.as_bytes().first() {
        Some(b'+') => (1.0, &text[1..]),
        Some(b'-') => (-1.0, &text[1..]),
        _ => (1.0, text),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(sign * f64::INFINITY);
    }
    if lower == "nan" {
        return if text.len() == body.len() {
            Some(f64::NAN)
        } else {
            None
        };
    }
    if let Some(hex) = lower.strip_prefix("0x") {
        return parse_hex_float(hex).map(|f| sign * f);
    }
    if body.contains('_') {
        return None;
    }
    // Go accepts exactly: digits with an optional '.', at least one digit, optional exponent.
    let bytes = body.as_bytes();
    let mut i = 0;
    let mut digits = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return None;
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        i += 1;
        if i < bytes.len() && (bytes[i] == b'+' || bytes[i] == b'-') {
            i += 1;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    if i != bytes.len() {
        return None;
    }
    let f: f64 = body.parse().ok()?;
    if f.is_infinite() {
        return None;
    }
    Some(sign * f)
}

/// The part of a hexadecimal float literal after `0x` (lowercased): mantissa digits with an
/// optional point, then a mandatory `p` exponent.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mant, exp) = s.split_once('p')?;
    let mant: String = mant.chars().filter(|&c| c != '_').collect();
    let exp: String = exp.chars().filter(|&c| c != '_').collect();
    let (int_part, frac_part) = mant.split_once('.').unwrap_or((&mant, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for c in int_part.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac_part.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    let e: i32 = exp.parse().ok()?;
    let f = value * 2f64.powi(e);
    if f.is_infinite() { None } else { Some(f) }
}

/// Go's `int64(f)` conversion on amd64: truncation, and the "indefinite integer"
/// (`math.MinInt64`) for NaN and out-of-range values.
pub(crate) fn float_to_i64(f: f64) -> i64 {
    if f.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// spf13/cast `ToInt64`: integers and floats (truncated), strings through
/// `strconv.ParseInt(s, 0, 0)`, booleans as 0/1, nil and anything else as 0.
pub(crate) fn to_int64(v: &Value) -> i64 {
    match v {
        Value::Int(i, _) => *i,
        Value::Uint(u, _) => *u as i64,
        Value::Float(f, _) => float_to_i64(*f),
        Value::String(s) => parse_int(s.as_bytes(), 0, 64).unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// Sprig v2.22.0's own `toInt64` (`numeric.go`, used by `int`, `int64`, `add`, `sub`, `mul`,
/// `div`, `mod`, `max`, `min` and `slice`): strings through `strconv.ParseInt(s, 10, 64)` (so
/// `"010"` is 10 and `"0x10"` is 0), integers as they are, unsigned values above
/// `math.MaxInt64` as `math.MaxInt64`, floats truncated, booleans as 0/1, anything else 0.
pub(crate) fn to_int64_v2(v: &Value) -> i64 {
    match v {
        Value::Int(i, _) => *i,
        Value::Uint(u, _) => i64::try_from(*u).unwrap_or(i64::MAX),
        Value::Float(f, _) => float_to_i64(*f),
        Value::String(s) => parse_int(s.as_bytes(), 10, 64).unwrap_or(0),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// spf13/cast `ToInt` (Go's `int` is 64 bits, so this is [`to_int64`]).
pub(crate) fn to_int(v: &Value) -> i64 {
    to_int64(v)
}

/// spf13/cast `ToFloat64`: numbers converted, strings through `strconv.ParseFloat`,
/// booleans as 0/1, anything else 0.
pub(crate) fn to_float64(v: &Value) -> f64 {
    match v {
        Value::Int(i, _) => *i as f64,
        Value::Uint(u, _) => *u as f64,
        Value::Float(f, _) => *f,
        Value::String(s) => parse_float(s.as_bytes()).unwrap_or(0.0),
        Value::Bool(b) if *b => 1.0,
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_int_follows_go_base_prefixes() {
        assert_eq!(parse_int(b"010", 0, 64), Some(8));
        assert_eq!(parse_int(b"0x10", 0, 64), Some(16));
        assert_eq!(parse_int(b"-0b101", 0, 64), Some(-5));
        assert_eq!(parse_int(b"1_000", 0, 64), Some(1000));
        assert_eq!(parse_int(b"1__0", 0, 64), None);
        assert_eq!(parse_int(b"0x", 0, 64), None);
        assert_eq!(parse_int(b"0", 0, 64), Some(0));
        assert_eq!(parse_int(b"9223372036854775808", 0, 64), None);
        assert_eq!(parse_int(b"-9223372036854775808", 0, 64), Some(i64::MIN));
        assert_eq!(atoi(b" 7"), None);
        assert_eq!(atoi(b"1_0"), None);
    }

    #[test]
    fn v2_cast_parses_decimal_only() {
        assert_eq!(to_int64_v2(&Value::string("010")), 10);
        assert_eq!(to_int64_v2(&Value::string("08080")), 8080);
        assert_eq!(to_int64_v2(&Value::string("0x10")), 0);
        assert_eq!(to_int64_v2(&Value::string("1_000")), 0);
        assert_eq!(to_int64_v2(&Value::string("+7")), 7);
        assert_eq!(to_int64_v2(&Value::string("3.7")), 0);
        assert_eq!(to_int64_v2(&Value::float(-1.9)), -1);
        assert_eq!(to_int64_v2(&Value::Bool(true)), 1);
        assert_eq!(to_int64_v2(&Value::Nil), 0);
        assert_eq!(
            to_int64_v2(&Value::Uint(u64::MAX, kalypso_gotmpl::UintKind::Uint64)),
            i64::MAX
        );
    }

    #[test]
    fn cast_conversions() {
        assert_eq!(to_int64(&Value::string("3.7")), 0);
        assert_eq!(to_int64(&Value::float(-1.9)), -1);
        assert_eq!(to_int64(&Value::Bool(true)), 1);
        assert_eq!(to_float64(&Value::string("1e3")), 1000.0);
        assert_eq!(to_int64(&Value::string("010")), 8);
        assert_eq!(
            to_int64(&Value::Uint(u64::MAX, kalypso_gotmpl::UintKind::Uint64)),
            -1
        );
        assert_eq!(to_float64(&Value::string("x")), 0.0);
        assert_eq!(to_float64(&Value::string("1e400")), 0.0);
        assert_eq!(to_float64(&Value::string("0x1p4")), 16.0);
        assert!(parse_float(b"+nan").is_none());
        assert_eq!(parse_float(b".5"), Some(0.5));
        assert_eq!(parse_float(b"5."), Some(5.0));
        assert!(parse_float(b".").is_none());
    }
}
