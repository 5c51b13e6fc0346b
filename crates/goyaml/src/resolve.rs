//! Plain-scalar resolution as go-yaml does it: which tag an unquoted scalar gets, and its value.
//!
//! The encoder (yaml.v3) quotes every string that would read back as something else, and the
//! decoder (yaml.v2) turns plain scalars into bools, numbers and nulls. Both sides use the same
//! algorithm over Go's `strconv` syntax (base prefixes, octal `0123`, `1_000`); only the table
//! of words differs: yaml.v2 also reads YAML 1.1's `yes`/`no`/`on`/`off`/`y`/`n` as bools.
//! Integers are parsed with Go's `strconv` rules from `kalypso_gotmpl::strconv`.

use kalypso_gotmpl::strconv;

/// What a plain scalar resolves to.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    /// A Go `int` (64 bits).
    Int(i64),
    /// A Go `uint64` (only for values above `i64::MAX`).
    Uint(u64),
    Float(f64),
    /// Looks like a timestamp; yaml.v2 keeps the text as a string in `interface{}`.
    Timestamp,
    Str,
}

/// Which word table applies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Schema {
    /// gopkg.in/yaml.v2: YAML 1.1 booleans (`yes`, `on`, `y`, ...).
    V2,
    /// gopkg.in/yaml.v3: only `true`/`false` in three spellings.
    V3,
}

/// go-yaml's `resolve("", s)`: the resolution of an untagged plain scalar.
pub(crate) fn resolve_plain(s: &str, schema: Schema) -> Resolved {
    resolve_plain_with(s, schema, true)
}

/// `resolve(tag, s)` for the resolvable tags other than `!!str`: `timestamps` is false when an
/// explicit tag other than `!!timestamp` is present.
pub(crate) fn resolve_plain_with(s: &str, schema: Schema, timestamps: bool) -> Resolved {
    let hint = match s.as_bytes().first() {
        None => b'N',
        Some(&c) => hint_of(c),
    };
    if hint == 0 {
        return Resolved::Str;
    }
    if let Some(word) = resolve_word(s, schema) {
        return word;
    }
    match hint {
        b'.' => match parse_float(s) {
            Some(f) => Resolved::Float(f),
            None => Resolved::Str,
        },
        b'D' | b'S' => resolve_number(s, timestamps),
        _ => Resolved::Str,
    }
}

/// The number part of resolution for hints `D` and `S`; `timestamps` says whether a
/// timestamp-looking value counts (only for untagged and `!!timestamp` scalars).
fn resolve_number(s: &str, timestamps: bool) -> Resolved {
    if timestamps && is_timestamp(s) {
        return Resolved::Timestamp;
    }
    let plain: String = s.chars().filter(|&c| c != '_').collect();
    if let Some(i) = parse_int(&plain, 0) {
        return Resolved::Int(i);
    }
    if let Some(u) = parse_uint(&plain, 0) {
        return Resolved::Uint(u);
    }
    if let Some(f) = is_yaml_style_float(&plain).then(|| parse_float(&plain)).flatten() {
        return Resolved::Float(f);
    }
    if let Some(rest) = plain.strip_prefix("0b") {
        if let Some(i) = parse_int(rest, 2) {
            return Resolved::Int(i);
        }
        if let Some(u) = parse_uint(rest, 2) {
            return Resolved::Uint(u);
        }
    } else if let Some(i) = plain
        .strip_prefix("-0b")
        .and_then(|rest| parse_int(&format!("-{rest}"), 2))
    {
        return Resolved::Int(i);
    }
    if let Some(rest) = plain.strip_prefix("0o") {
        if let Some(i) = parse_int(rest, 8) {
            return Resolved::Int(i);
        }
        if let Some(u) = parse_uint(rest, 8) {
            return Resolved::Uint(u);
        }
    } else if let Some(i) = plain
        .strip_prefix("-0o")
        .and_then(|rest| parse_int(&format!("-{rest}"), 8))
    {
        return Resolved::Int(i);
    }
    Resolved::Str
}

/// go-yaml's resolve table: the first byte decides which checks can apply.
fn hint_of(c: u8) -> u8 {
    match c {
        b'+' | b'-' => b'S',
        b'0'..=b'9' => b'D',
        b'y' | b'Y' | b'n' | b'N' | b't' | b'T' | b'f' | b'F' | b'o' | b'O' | b'~' => b'M',
        b'.' => b'.',
        _ => 0,
    }
}

/// The fixed words of go-yaml's resolve map.
fn resolve_word(s: &str, schema: Schema) -> Option<Resolved> {
    Some(match s {
        "true" | "True" | "TRUE" => Resolved::Bool(true),
        "false" | "False" | "FALSE" => Resolved::Bool(false),
        "" | "~" | "null" | "Null" | "NULL" => Resolved::Null,
        ".nan" | ".NaN" | ".NAN" => Resolved::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Resolved::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Resolved::Float(f64::NEG_INFINITY),
        _ if schema == Schema::V2 => match s {
            "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Resolved::Bool(true),
            "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Resolved::Bool(false),
            _ => return None,
        },
        _ => return None,
    })
}

/// yaml.v3's `isOldBool`: YAML 1.1 booleans, which v3 quotes on output although it no
/// longer reads them as booleans.
pub(crate) fn is_old_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// go-yaml's `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
pub(crate) fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    if !(first == b'+' || first == b'-' || first.is_ascii_digit()) || !b.contains(&b':') {
        return false;
    }
    let mut i = usize::from(first == b'+' || first == b'-');
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    i += 1;
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
        i += 1;
    }
    // One or more `:[0-5]?[0-9]` groups. A group is two digits when the first is 0-5 and a
    // digit follows, else one digit; the regex backtracks, but a digit after a one-digit
    // group could never be matched by what follows (`:` or `.` or the end), so greedy is exact.
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        let d1 = b.get(i + 1).copied();
        let d2 = b.get(i + 2).copied();
        match (d1, d2) {
            (Some(a), Some(c)) if (b'0'..=b'5').contains(&a) && c.is_ascii_digit() => i += 3,
            (Some(a), _) if a.is_ascii_digit() => i += 2,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// go-yaml's `yamlStyleFloat`: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's `strconv.ParseUint(s, base, 64)`; `None` for syntax and range errors.
pub(crate) fn parse_uint(s: &str, base: u32) -> Option<u64> {
    strconv::parse_uint(s.as_bytes(), base, 64).ok()
}

/// Go's `strconv.ParseInt(s, base, 64)`; `None` for syntax and range errors.
pub(crate) fn parse_int(s: &str, base: u32) -> Option<i64> {
    strconv::parse_int(s.as_bytes(), base, 64).ok()
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal syntax (with `_` separators), `inf`,
/// `infinity` and `nan`. Hexadecimal floats are not needed: resolution only calls it on text
/// that starts with `.` or matches the decimal-only `yamlStyleFloat`. `None` for syntax
/// errors and for values that overflow (Go's `ErrRange`).
pub(crate) fn parse_float(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let body = &s[i..];
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if b[0] == b'-' {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower == "nan" && i == 0 {
        return Some(f64::NAN);
    }
    if lower.starts_with("0x") {
        return None;
    }
    let mut underscores = false;
    let mut saw_digits = false;
    let mut saw_dot = false;
    while i < b.len() {
        match b[i] {
            b'_' => underscores = true,
            b'.' if !saw_dot => saw_dot = true,
            b'0'..=b'9' => saw_digits = true,
            _ => break,
        }
        i += 1;
    }
    if !saw_digits {
        return None;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            if b[i] == b'_' {
                underscores = true;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    if i != b.len() || underscores && !strconv::underscore_ok(s.as_bytes()) {
        return None;
    }
    let cleaned: String = s.chars().filter(|&c| c != '_').collect();
    let f: f64 = cleaned.parse().ok()?;
    if f.is_infinite() { None } else { Some(f) }
}

/// go-yaml's `parseTimestamp`: `YYYY-` followed by one of the layouts
/// `2006-1-2T15:4:5.999999999Z07:00` (also with `t`), `2006-1-2 15:4:5.999999999` and
/// `2006-1-2`, with Go's `time.Parse` rules (one- or two-digit fields, range checks, any run
/// of spaces where the layout has a space).
pub(crate) fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let year_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if year_digits != 4 || b.get(4) != Some(&b'-') {
        return false;
    }
    parse_date_time(b, Layout::Rfc3339(b'T'))
        || parse_date_time(b, Layout::Rfc3339(b't'))
        || parse_date_time(b, Layout::SpaceSeparated)
        || parse_date_time(b, Layout::DateOnly)
}

#[derive(Clone, Copy)]
enum Layout {
    Rfc3339(u8),
    SpaceSeparated,
    DateOnly,
}

/// `time.Parse`'s `getnum(s, false)`: one or two digits.
fn get_num(b: &[u8], i: &mut usize) -> Option<u32> {
    let d1 = *b.get(*i).filter(|c| c.is_ascii_digit())?;
    *i += 1;
    match b.get(*i) {
        Some(d2) if d2.is_ascii_digit() => {
            *i += 1;
            Some(u32::from(d1 - b'0') * 10 + u32::from(d2 - b'0'))
        }
        _ => Some(u32::from(d1 - b'0')),
    }
}

fn expect(b: &[u8], i: &mut usize, c: u8) -> Option<()> {
    (b.get(*i) == Some(&c)).then(|| *i += 1)
}

fn parse_date_time(b: &[u8], layout: Layout) -> bool {
    fn run(b: &[u8], layout: Layout) -> Option<()> {
        let year: u32 = std::str::from_utf8(&b[..4]).ok()?.parse().ok()?;
        let mut i = 4;
        expect(b, &mut i, b'-')?;
        let month = get_num(b, &mut i)?;
        if !(1..=12).contains(&month) {
            return None;
        }
        expect(b, &mut i, b'-')?;
        let day = get_num(b, &mut i)?;
        match layout {
            Layout::DateOnly => {}
            Layout::Rfc3339(t) => {
                expect(b, &mut i, t)?;
                time_of_day(b, &mut i)?;
                if b.get(i) == Some(&b'Z') {
                    i += 1;
                } else {
                    // `-07:00`: sign, two digits, colon, two digits.
                    let z = b.get(i..i + 6)?;
                    if !matches!(z[0], b'+' | b'-')
                        || z[3] != b':'
                        || ![z[1], z[2], z[4], z[5]].iter().all(u8::is_ascii_digit)
                    {
                        return None;
                    }
                    let hours = u32::from(z[1] - b'0') * 10 + u32::from(z[2] - b'0');
                    let minutes = u32::from(z[4] - b'0') * 10 + u32::from(z[5] - b'0');
                    if hours > 24 || minutes > 60 {
                        return None;
                    }
                    i += 6;
                }
            }
            Layout::SpaceSeparated => {
                // A layout space matches any run of spaces, including none at the very end.
                if i < b.len() && b[i] != b' ' {
                    return None;
                }
                while b.get(i) == Some(&b' ') {
                    i += 1;
                }
                time_of_day(b, &mut i)?;
            }
        }
        if i != b.len() || day < 1 || day > days_in(month, year) {
            return None;
        }
        Some(())
    }
    run(b, layout).is_some()
}

/// `15:4:5.999999999`: hour, minute, second of one or two digits and an optional fraction.
fn time_of_day(b: &[u8], i: &mut usize) -> Option<()> {
    let hour = get_num(b, i)?;
    expect(b, i, b':')?;
    let minute = get_num(b, i)?;
    expect(b, i, b':')?;
    let second = get_num(b, i)?;
    if hour >= 24 || minute >= 60 || second >= 60 {
        return None;
    }
    if matches!(b.get(*i), Some(b'.' | b',')) && b.get(*i + 1).is_some_and(u8::is_ascii_digit) {
        *i += 1;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
    }
    Some(())
}

fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(s: &str) -> Resolved {
        resolve_plain(s, Schema::V2)
    }

    fn v3(s: &str) -> Resolved {
        resolve_plain(s, Schema::V3)
    }

    #[test]
    fn yaml11_words_only_in_v2() {
        for s in ["yes", "Yes", "on", "ON", "y", "Y"] {
            assert_eq!(v2(s), Resolved::Bool(true), "{s}");
            assert_eq!(v3(s), Resolved::Str, "{s}");
        }
        for s in ["no", "off", "n", "N"] {
            assert_eq!(v2(s), Resolved::Bool(false), "{s}");
        }
        assert_eq!(v3("True"), Resolved::Bool(true));
        assert_eq!(v2("~"), Resolved::Null);
        assert_eq!(v2(""), Resolved::Null);
        assert_eq!(v2("tRue"), Resolved::Str);
        assert_eq!(v2("<<"), Resolved::Str, "'<' has no resolve hint");
    }

    #[test]
    fn numbers_follow_go_strconv() {
        assert_eq!(v2("0123"), Resolved::Int(83));
        assert_eq!(v2("0x1F"), Resolved::Int(31));
        assert_eq!(v2("1_000"), Resolved::Int(1000));
        assert_eq!(v2("+1"), Resolved::Int(1));
        assert_eq!(v2("-0b101"), Resolved::Int(-5));
        assert_eq!(v2("0o17"), Resolved::Int(15));
        assert_eq!(v2("08"), Resolved::Float(8.0));
        assert_eq!(v2("1.50"), Resolved::Float(1.5));
        assert_eq!(v2(".5"), Resolved::Float(0.5));
        assert_eq!(v2("1e3"), Resolved::Float(1000.0));
        assert_eq!(v2("18446744073709551615"), Resolved::Uint(u64::MAX));
        assert_eq!(v2("-9223372036854775808"), Resolved::Int(i64::MIN));
        assert_eq!(v2("1e400"), Resolved::Str, "out of range is not a float");
        assert_eq!(v2("-"), Resolved::Str);
        assert_eq!(v2("."), Resolved::Str);
        assert_eq!(v2("0x"), Resolved::Str);
        assert_eq!(v2("1.2.3"), Resolved::Str);
        assert_eq!(v2("12:30"), Resolved::Str);
        assert!(matches!(v2(".nan"), Resolved::Float(f) if f.is_nan()));
        assert_eq!(v2("-.inf"), Resolved::Float(f64::NEG_INFINITY));
        assert_eq!(v2(".infinity"), Resolved::Str);
    }

    #[test]
    fn timestamps() {
        assert_eq!(v2("2001-12-14"), Resolved::Timestamp);
        assert_eq!(v2("2001-2-4"), Resolved::Timestamp);
        assert_eq!(v2("2001-12-14T21:59:43.10Z"), Resolved::Timestamp);
        assert_eq!(v2("2001-12-14t21:59:43+05:00"), Resolved::Timestamp);
        assert_eq!(v2("2001-12-14 21:59:43.10"), Resolved::Timestamp);
        assert_eq!(v2("2001-12-14   1:2:3"), Resolved::Timestamp);
        assert_eq!(v2("2001-02-30"), Resolved::Str, "day out of range");
        assert_eq!(v2("2001-13-01"), Resolved::Str);
        assert_eq!(v2("2001-12-14 21:59:43.10 -5"), Resolved::Str);
        assert_eq!(v2("20011-12-14"), Resolved::Str);
    }

    #[test]
    fn base60() {
        assert!(is_base60_float("12:30"));
        assert!(is_base60_float("1:2:3"));
        assert!(is_base60_float("-1_0:59.5"));
        assert!(!is_base60_float("12:60"));
        assert!(!is_base60_float("12:"));
        assert!(!is_base60_float("a:1"));
        assert!(!is_base60_float("12:345"));
    }
}
