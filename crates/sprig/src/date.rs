//! Sprig's date functions that do not read the clock (`date.go`): `date`, `dateInZone`,
//! `htmlDate`, `toDate`, `dateModify`, `duration`, `durationRound`, `unixEpoch`, and the
//! `time.Time` values they produce and accept.
//!
//! Templates see a `time.Time` object with Go's methods (`.Format`, `.AddDate`, `.Unix`,
//! `.UTC`, `.Year`...) and Go's printing (`2024-02-28 00:00:00 +0000 UTC`). Layouts use Go's
//! reference-time notation (`2006-01-02T15:04:05Z07:00`) and parse errors carry Go's texts.
//!
//! The scheduler's local time zone is UTC: Go's `time.Local` depends on the machine, which
//! must not change rendered output. Named zones (`dateInZone ... "Europe/Berlin"`) come from
//! the IANA database compiled into `chrono-tz`. Where Sprig would read the clock (`date` of a
//! value that is not a time or an integer, `durationRound` of a time), these functions fail
//! with an error instead.

use std::any::Any;
use std::sync::Arc;

use chrono::{Offset, TimeZone};
use kalypso_gotmpl::{Func, FuncError, FuncMap, FuncResult, IntKind, Obj, Object, Str, Type, Value};

use crate::util::{arg, arg_bytes, arg_int, func, register};

/// Seconds from 0001-01-01 (Go's zero time) to 1970-01-01.
const ZERO_UNIX: i64 = -62_135_596_800;

const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A Go `*time.Location`.
#[derive(Clone, Debug, PartialEq)]
enum Zone {
    Utc,
    /// `time.Local`, which is UTC for the scheduler.
    Local,
    Fixed {
        name: String,
        offset: i32,
    },
    Named(chrono_tz::Tz),
}

impl Zone {
    /// Go's `time.LoadLocation`.
    fn load(name: &str) -> Option<Zone> {
        match name {
            "" | "UTC" => Some(Zone::Utc),
            "Local" => Some(Zone::Local),
            _ => name.parse::<chrono_tz::Tz>().ok().map(Zone::Named),
        }
    }

    /// The zone abbreviation and UTC offset in effect at `unix`.
    fn lookup(&self, unix: i64) -> (String, i32) {
        match self {
            Zone::Utc | Zone::Local => ("UTC".to_owned(), 0),
            Zone::Fixed { name, offset } => (name.clone(), *offset),
            Zone::Named(tz) => {
                let Some(utc) = chrono::DateTime::from_timestamp(unix, 0) else {
                    return ("UTC".to_owned(), 0);
                };
                let off = tz.offset_from_utc_datetime(&utc.naive_utc());
                let abbrev = chrono_tz::OffsetName::abbreviation(&off).unwrap_or("").to_owned();
                (abbrev, off.fix().local_minus_utc())
            }
        }
    }
}

/// A Go `time.Time`: an instant and a location.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GoTime {
    unix: i64,
    nsec: u32,
    zone: Zone,
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's `norm`: moves whole multiples of `base` from `lo` into `hi`.
fn norm(hi: i64, lo: i64, base: i64) -> (i64, i64) {
    let (mut hi, mut lo) = (hi, lo);
    if lo < 0 {
        let n = (-lo - 1) / base + 1;
        hi -= n;
        lo += n * base;
    }
    if lo >= base {
        let n = lo / base;
        hi += n;
        lo -= n * base;
    }
    (hi, lo)
}

/// The broken-down local time of a [`GoTime`].
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    min: i64,
    sec: i64,
    yday: i64,
    weekday: i64,
    offset: i32,
    zone_name: String,
}

impl GoTime {
    fn zero() -> GoTime {
        GoTime {
            unix: ZERO_UNIX,
            nsec: 0,
            zone: Zone::Utc,
        }
    }

    fn from_unix(secs: i64, zone: Zone) -> GoTime {
        GoTime {
            unix: secs,
            nsec: 0,
            zone,
        }
    }

    /// Go's `time.Date`, normalizing out-of-range fields.
    #[allow(clippy::too_many_arguments)]
    fn date(year: i64, month: i64, day: i64, hour: i64, min: i64, sec: i64, nsec: i64, zone: Zone) -> GoTime {
        let (year, m0) = norm(year, month - 1, 12);
        let (sec, nsec) = norm(sec, nsec, 1_000_000_000);
        let (min, sec) = norm(min, sec, 60);
        let (hour, min) = norm(hour, min, 60);
        let (day, hour) = norm(day, hour, 24);
        let days = days_from_civil(year, m0 + 1, 1) + day - 1;
        let local = days * 86_400 + hour * 3600 + min * 60 + sec;
        let (_, offset) = zone.lookup(local);
        let mut unix = local;
        if offset != 0 {
            let utc = local - i64::from(offset);
            let (_, offset2) = zone.lookup(utc);
            unix = local - i64::from(if offset2 != offset { offset2 } else { offset });
        }
        GoTime {
            unix,
            nsec: nsec as u32,
            zone,
        }
    }

    fn civil(&self) -> Civil {
        let (zone_name, offset) = self.zone.lookup(self.unix);
        let local = self.unix + i64::from(offset);
        let days = local.div_euclid(86_400);
        let secs = local.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: secs / 3600,
            min: secs % 3600 / 60,
            sec: secs % 60,
            yday: days - days_from_civil(year, 1, 1) + 1,
            weekday: (days + 4).rem_euclid(7),
            offset,
            zone_name,
        }
    }

    fn add_date(&self, years: i64, months: i64, days: i64) -> GoTime {
        let c = self.civil();
        GoTime::date(
            c.year + years,
            c.month + months,
            c.day + days,
            c.hour,
            c.min,
            c.sec,
            i64::from(self.nsec),
            self.zone.clone(),
        )
    }

    fn add_duration(&self, d: i64) -> GoTime {
        let total = i128::from(self.nsec) + i128::from(d % 1_000_000_000);
        let mut secs = self.unix.wrapping_add(d / 1_000_000_000);
        let mut nsec = total;
        if nsec < 0 {
            nsec += 1_000_000_000;
            secs -= 1;
        } else if nsec >= 1_000_000_000 {
            nsec -= 1_000_000_000;
            secs += 1;
        }
        GoTime {
            unix: secs,
            nsec: nsec as u32,
            zone: self.zone.clone(),
        }
    }

    fn unix_nano(&self) -> i64 {
        self.unix
            .wrapping_mul(1_000_000_000)
            .wrapping_add(i64::from(self.nsec))
    }

    fn cmp_instant(&self, o: &GoTime) -> std::cmp::Ordering {
        (self.unix, self.nsec).cmp(&(o.unix, o.nsec))
    }

    /// Go's `Time.Format`.
    fn format(&self, layout: &[u8]) -> Vec<u8> {
        let c = self.civil();
        let mut b = Vec::with_capacity(layout.len() + 10);
        let mut layout = layout;
        loop {
            let (prefix, std, suffix) = next_std_chunk(layout);
            b.extend_from_slice(prefix);
            let Some(std) = std else { break };
            layout = suffix;
            match std {
                Std::Year => {
                    append_int(&mut b, c.year.abs() % 100, 2);
                }
                Std::LongYear => append_int(&mut b, c.year, 4),
                Std::Month => b.extend_from_slice(&LONG_MONTHS[(c.month - 1) as usize].as_bytes()[..3]),
                Std::LongMonth => b.extend_from_slice(LONG_MONTHS[(c.month - 1) as usize].as_bytes()),
                Std::NumMonth => append_int(&mut b, c.month, 0),
                Std::ZeroMonth => append_int(&mut b, c.month, 2),
                Std::WeekDay => b.extend_from_slice(&LONG_DAYS[c.weekday as usize].as_bytes()[..3]),
                Std::LongWeekDay => b.extend_from_slice(LONG_DAYS[c.weekday as usize].as_bytes()),
                Std::Day => append_int(&mut b, c.day, 0),
                Std::UnderDay => {
                    if c.day < 10 {
                        b.push(b' ');
                    }
                    append_int(&mut b, c.day, 0);
                }
                Std::ZeroDay => append_int(&mut b, c.day, 2),
                Std::UnderYearDay => {
                    if c.yday < 100 {
                        b.push(b' ');
                        if c.yday < 10 {
                            b.push(b' ');
                        }
                    }
                    append_int(&mut b, c.yday, 0);
                }
                Std::ZeroYearDay => append_int(&mut b, c.yday, 3),
                Std::Hour => append_int(&mut b, c.hour, 2),
                Std::Hour12 | Std::ZeroHour12 => {
                    let hr = if c.hour % 12 == 0 { 12 } else { c.hour % 12 };
                    append_int(&mut b, hr, if std == Std::Hour12 { 0 } else { 2 });
                }
                Std::Minute => append_int(&mut b, c.min, 0),
                Std::ZeroMinute => append_int(&mut b, c.min, 2),
                Std::Second => append_int(&mut b, c.sec, 0),
                Std::ZeroSecond => append_int(&mut b, c.sec, 2),
                Std::PM => b.extend_from_slice(if c.hour >= 12 { b"PM" } else { b"AM" }),
                Std::Pm => b.extend_from_slice(if c.hour >= 12 { b"pm" } else { b"am" }),
                Std::Tz(kind) => format_offset(&mut b, kind, c.offset),
                Std::ZoneName => {
                    if !c.zone_name.is_empty() {
                        b.extend_from_slice(c.zone_name.as_bytes());
                    } else {
                        let mut zone = c.offset / 60;
                        if zone < 0 {
                            b.push(b'-');
                            zone = -zone;
                        } else {
                            b.push(b'+');
                        }
                        append_int(&mut b, i64::from(zone / 60), 2);
                        append_int(&mut b, i64::from(zone % 60), 2);
                    }
                }
                Std::Frac { trim, digits, sep } => {
                    if trim && (digits == 0 || self.nsec == 0) {
                        continue;
                    }
                    b.push(sep);
                    let start = b.len();
                    append_int(&mut b, i64::from(self.nsec), 9);
                    if digits < 9 {
                        b.truncate(start + digits);
                    }
                    if trim {
                        while b.last() == Some(&b'0') {
                            b.pop();
                        }
                        if b.last() == Some(&sep) {
                            b.pop();
                        }
                    }
                }
            }
        }
        b
    }

    fn string(&self) -> String {
        String::from_utf8_lossy(&self.format(b"2006-01-02 15:04:05.999999999 -0700 MST")).into_owned()
    }
}

fn append_int(b: &mut Vec<u8>, x: i64, width: usize) {
    let mut u = x.unsigned_abs();
    if x < 0 {
        b.push(b'-');
    }
    let mut digits = Vec::new();
    while u >= 10 {
        digits.push(b'0' + (u % 10) as u8);
        u /= 10;
    }
    digits.push(b'0' + u as u8);
    for _ in digits.len()..width {
        b.push(b'0');
    }
    b.extend(digits.iter().rev());
}

/// The numeric zone layouts: `Z07:00`-style (ISO 8601, `Z` for UTC) and `-0700`-style.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct TzKind {
    iso: bool,
    colon: bool,
    seconds: bool,
    short: bool,
}

fn format_offset(b: &mut Vec<u8>, kind: TzKind, offset: i32) {
    if offset == 0 && kind.iso {
        b.push(b'Z');
        return;
    }
    let mut zone = offset / 60;
    let mut abs = offset;
    if zone < 0 {
        b.push(b'-');
        zone = -zone;
        abs = -abs;
    } else {
        b.push(b'+');
    }
    append_int(b, i64::from(zone / 60), 2);
    if kind.colon {
        b.push(b':');
    }
    if !kind.short {
        append_int(b, i64::from(zone % 60), 2);
    }
    if kind.seconds {
        if kind.colon {
            b.push(b':');
        }
        append_int(b, i64::from(abs % 60), 2);
    }
}

/// One element of a Go layout.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    ZoneName,
    Tz(TzKind),
    Frac { trim: bool, digits: usize, sep: u8 },
}

fn tz(iso: bool, colon: bool, seconds: bool, short: bool) -> Std {
    Std::Tz(TzKind {
        iso,
        colon,
        seconds,
        short,
    })
}

/// Go's `nextStdChunk`: the literal prefix, the next layout element, and the rest.
fn next_std_chunk(layout: &[u8]) -> (&[u8], Option<Std>, &[u8]) {
    let l = layout;
    let at = |i: usize, s: &str| l.len() >= i + s.len() && &l[i..i + s.len()] == s.as_bytes();
    let lower_at = |i: usize| l.get(i).is_some_and(|c| c.is_ascii_lowercase());
    let digit_at = |i: usize| l.get(i).is_some_and(u8::is_ascii_digit);
    for i in 0..l.len() {
        let hit = |n: usize, std: Std| (&l[..i], Some(std), &l[i + n..]);
        match l[i] {
            b'J' if at(i, "Jan") => {
                if at(i, "January") {
                    return hit(7, Std::LongMonth);
                }
                if !lower_at(i + 3) {
                    return hit(3, Std::Month);
                }
            }
            b'M' if l.len() >= i + 3 => {
                if at(i, "Mon") {
                    if at(i, "Monday") {
                        return hit(6, Std::LongWeekDay);
                    }
                    if !lower_at(i + 3) {
                        return hit(3, Std::WeekDay);
                    }
                }
                if at(i, "MST") {
                    return hit(3, Std::ZoneName);
                }
            }
            b'0' => {
                if l.len() >= i + 2 && (b'1'..=b'6').contains(&l[i + 1]) {
                    let std = match l[i + 1] {
                        b'1' => Std::ZeroMonth,
                        b'2' => Std::ZeroDay,
                        b'3' => Std::ZeroHour12,
                        b'4' => Std::ZeroMinute,
                        b'5' => Std::ZeroSecond,
                        _ => Std::Year,
                    };
                    return hit(2, std);
                }
                if at(i, "002") {
                    return hit(3, Std::ZeroYearDay);
                }
            }
            b'1' => {
                if at(i, "15") {
                    return hit(2, Std::Hour);
                }
                return hit(1, Std::NumMonth);
            }
            b'2' => {
                if at(i, "2006") {
                    return hit(4, Std::LongYear);
                }
                return hit(1, Std::Day);
            }
            b'_' => {
                if at(i, "_2") {
                    if at(i + 1, "2006") {
                        return (&l[..i + 1], Some(Std::LongYear), &l[i + 5..]);
                    }
                    return hit(2, Std::UnderDay);
                }
                if at(i, "__2") {
                    return hit(3, Std::UnderYearDay);
                }
            }
            b'3' => return hit(1, Std::Hour12),
            b'4' => return hit(1, Std::Minute),
            b'5' => return hit(1, Std::Second),
            b'P' if at(i, "PM") => return hit(2, Std::PM),
            b'p' if at(i, "pm") => return hit(2, Std::Pm),
            b'-' => {
                if at(i, "-070000") {
                    return hit(7, tz(false, false, true, false));
                }
                if at(i, "-07:00:00") {
                    return hit(9, tz(false, true, true, false));
                }
                if at(i, "-0700") {
                    return hit(5, tz(false, false, false, false));
                }
                if at(i, "-07:00") {
                    return hit(6, tz(false, true, false, false));
                }
                if at(i, "-07") {
                    return hit(3, tz(false, false, false, true));
                }
            }
            b'Z' => {
                if at(i, "Z070000") {
                    return hit(7, tz(true, false, true, false));
                }
                if at(i, "Z07:00:00") {
                    return hit(9, tz(true, true, true, false));
                }
                if at(i, "Z0700") {
                    return hit(5, tz(true, false, false, false));
                }
                if at(i, "Z07:00") {
                    return hit(6, tz(true, true, false, false));
                }
                if at(i, "Z07") {
                    return hit(3, tz(true, false, false, true));
                }
            }
            c @ (b'.' | b',') if i + 1 < l.len() && (l[i + 1] == b'0' || l[i + 1] == b'9') => {
                let ch = l[i + 1];
                let mut j = i + 1;
                while j < l.len() && l[j] == ch {
                    j += 1;
                }
                if !digit_at(j) {
                    let std = Std::Frac {
                        trim: ch == b'9',
                        digits: j - (i + 1),
                        sep: c,
                    };
                    return (&l[..i], Some(std), &l[j..]);
                }
            }
            _ => {}
        }
    }
    (layout, None, &[])
}

/// Go's `time` package `quote` (used in its error messages).
fn time_quote(s: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut i = 0;
    while i < s.len() {
        let (r, w) = crate::util::decode_rune(&s[i..]);
        if (r as u32) >= 0x80 || r < ' ' {
            let width = if r == crate::util::RUNE_ERROR && w == 1 {
                1
            } else {
                w
            };
            for &byte in &s[i..i + width] {
                out.push_str(&format!("\\x{byte:02x}"));
            }
            i += width;
            continue;
        }
        if r == '"' || r == '\\' {
            out.push('\\');
        }
        out.push(r);
        i += w;
    }
    out.push('"');
    out
}

struct ParseError {
    layout: Vec<u8>,
    value: Vec<u8>,
    layout_elem: Vec<u8>,
    value_elem: Vec<u8>,
    message: String,
}

impl ParseError {
    fn text(&self) -> String {
        if self.message.is_empty() {
            format!(
                "parsing time {} as {}: cannot parse {} as {}",
                time_quote(&self.value),
                time_quote(&self.layout),
                time_quote(&self.value_elem),
                time_quote(&self.layout_elem)
            )
        } else {
            format!("parsing time {}{}", time_quote(&self.value), self.message)
        }
    }
}

fn is_digit_at(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

fn getnum(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    if !is_digit_at(s, 0) {
        return None;
    }
    if !is_digit_at(s, 1) {
        if fixed {
            return None;
        }
        return Some((i64::from(s[0] - b'0'), &s[1..]));
    }
    Some((i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'), &s[2..]))
}

fn getnum3(s: &[u8], fixed: bool) -> Option<(i64, &[u8])> {
    let mut n = 0;
    let mut i = 0;
    while i < 3 && is_digit_at(s, i) {
        n = n * 10 + i64::from(s[i] - b'0');
        i += 1;
    }
    if i == 0 || (fixed && i != 3) {
        return None;
    }
    Some((n, &s[i..]))
}

fn lookup_name<'a>(tab: &[&str], val: &'a [u8], len: Option<usize>) -> Option<(usize, &'a [u8])> {
    for (i, name) in tab.iter().enumerate() {
        let name = match len {
            Some(n) => &name.as_bytes()[..n],
            None => name.as_bytes(),
        };
        if val.len() >= name.len() && val[..name.len()].eq_ignore_ascii_case(name) {
            return Some((i, &val[name.len()..]));
        }
    }
    None
}

fn cut_space(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&c| c == b' ').count();
    &s[n..]
}

/// Go's `skip`: matches the layout's literal prefix, spaces matching any run of spaces.
fn skip<'a>(value: &'a [u8], prefix: &[u8]) -> Result<&'a [u8], &'a [u8]> {
    let (mut value, mut prefix) = (value, prefix);
    while !prefix.is_empty() {
        if prefix[0] == b' ' {
            if !value.is_empty() && value[0] != b' ' {
                return Err(value);
            }
            prefix = cut_space(prefix);
            value = cut_space(value);
            continue;
        }
        if value.is_empty() || value[0] != prefix[0] {
            return Err(value);
        }
        prefix = &prefix[1..];
        value = &value[1..];
    }
    Ok(value)
}

fn parse_nanoseconds(value: &[u8], nbytes: usize) -> Option<i64> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return None;
    }
    let nbytes = nbytes.min(10);
    let digits = &value[1..nbytes];
    let mut ns: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        ns = ns * 10 + i64::from(d - b'0');
    }
    for _ in 0..(10 - nbytes) {
        ns *= 10;
    }
    Some(ns)
}

fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let mut x: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if x > (1u64 << 63) / 10 {
            return None;
        }
        x = x * 10 + u64::from(s[i] - b'0');
        if x > 1u64 << 63 {
            return None;
        }
        i += 1;
    }
    Some((x, &s[i..]))
}

fn parse_signed_offset(value: &[u8]) -> usize {
    if !matches!(value.first(), Some(b'-' | b'+')) {
        return 0;
    }
    match leading_int(&value[1..]) {
        Some((x, rem)) if rem.len() != value.len() - 1 && x <= 12 => value.len() - rem.len(),
        _ => 0,
    }
}

fn parse_time_zone(value: &[u8]) -> Option<usize> {
    if value.len() < 3 {
        return None;
    }
    if value.len() >= 4 && (&value[..4] == b"ChST" || &value[..4] == b"MeST") {
        return Some(4);
    }
    if &value[..3] == b"GMT" {
        return Some(if value.len() == 3 {
            3
        } else {
            3 + parse_signed_offset(&value[3..])
        });
    }
    if value[0] == b'+' || value[0] == b'-' {
        let n = parse_signed_offset(value);
        return (n > 0).then_some(n);
    }
    let mut upper = 0;
    while upper < 6 && upper < value.len() && value[upper].is_ascii_uppercase() {
        upper += 1;
    }
    match upper {
        5 if value[4] == b'T' => Some(5),
        4 if value[3] == b'T' || &value[..4] == b"WITA" => Some(4),
        3 => Some(3),
        _ => None,
    }
}

/// Go's `time.ParseInLocation(layout, value, Local)` with Local being UTC.
fn parse_time(layout_all: &[u8], value_all: &[u8]) -> Result<GoTime, String> {
    let err = |layout_elem: &[u8], value_elem: &[u8], message: String| {
        ParseError {
            layout: layout_all.to_vec(),
            value: value_all.to_vec(),
            layout_elem: layout_elem.to_vec(),
            value_elem: value_elem.to_vec(),
            message,
        }
        .text()
    };
    let mut layout = layout_all;
    let mut value = value_all;
    let (mut am, mut pm) = (false, false);
    let mut year: i64 = 0;
    let (mut month, mut day, mut yday): (i64, i64, i64) = (-1, -1, -1);
    let (mut hour, mut min, mut sec, mut nsec) = (0i64, 0i64, 0i64, 0i64);
    let mut z: Option<Zone> = None;
    let mut zone_offset: Option<i64> = None;
    let mut zone_name: Vec<u8> = Vec::new();
    loop {
        let (prefix, std, suffix) = next_std_chunk(layout);
        let std_str = &layout[prefix.len()..layout.len() - suffix.len()];
        value = match skip(value, prefix) {
            Ok(v) => v,
            Err(v) => return Err(err(prefix, v, String::new())),
        };
        let Some(std) = std else {
            if !value.is_empty() {
                return Err(err(b"", value, format!(": extra text: {}", time_quote(value))));
            }
            break;
        };
        layout = suffix;
        let hold = value;
        let mut range_err = "";
        let ok: Option<()> = (|| {
            match std {
                Std::Year => {
                    let p = value.get(..2)?;
                    if !p.iter().all(u8::is_ascii_digit) {
                        return None;
                    }
                    value = &value[2..];
                    year = i64::from(p[0] - b'0') * 10 + i64::from(p[1] - b'0');
                    year += if year >= 69 { 1900 } else { 2000 };
                }
                Std::LongYear => {
                    if value.len() < 4 || !is_digit_at(value, 0) {
                        return None;
                    }
                    let p = &value[..4];
                    year = std::str::from_utf8(p).ok()?.parse().ok()?;
                    value = &value[4..];
                }
                Std::Month | Std::LongMonth => {
                    let (i, rest) = lookup_name(
                        &LONG_MONTHS,
                        value,
                        if std == Std::Month { Some(3) } else { None },
                    )?;
                    month = i as i64 + 1;
                    value = rest;
                }
                Std::NumMonth | Std::ZeroMonth => {
                    let (n, rest) = getnum(value, std == Std::ZeroMonth)?;
                    month = n;
                    value = rest;
                    if !(1..=12).contains(&month) {
                        range_err = "month";
                    }
                }
                Std::WeekDay | Std::LongWeekDay => {
                    let (_, rest) = lookup_name(
                        &LONG_DAYS,
                        value,
                        if std == Std::WeekDay { Some(3) } else { None },
                    )?;
                    value = rest;
                }
                Std::Day | Std::UnderDay | Std::ZeroDay => {
                    if std == Std::UnderDay && value.first() == Some(&b' ') {
                        value = &value[1..];
                    }
                    let (n, rest) = getnum(value, std == Std::ZeroDay)?;
                    day = n;
                    value = rest;
                }
                Std::UnderYearDay | Std::ZeroYearDay => {
                    for _ in 0..2 {
                        if std == Std::UnderYearDay && value.first() == Some(&b' ') {
                            value = &value[1..];
                        }
                    }
                    let (n, rest) = getnum3(value, std == Std::ZeroYearDay)?;
                    yday = n;
                    value = rest;
                }
                Std::Hour => {
                    let (n, rest) = getnum(value, false)?;
                    hour = n;
                    value = rest;
                    if !(0..24).contains(&hour) {
                        range_err = "hour";
                    }
                }
                Std::Hour12 | Std::ZeroHour12 => {
                    let (n, rest) = getnum(value, std == Std::ZeroHour12)?;
                    hour = n;
                    value = rest;
                    if !(0..=12).contains(&hour) {
                        range_err = "hour";
                    }
                }
                Std::Minute | Std::ZeroMinute => {
                    let (n, rest) = getnum(value, std == Std::ZeroMinute)?;
                    min = n;
                    value = rest;
                    if !(0..60).contains(&min) {
                        range_err = "minute";
                    }
                }
                Std::Second | Std::ZeroSecond => {
                    let (n, rest) = getnum(value, std == Std::ZeroSecond)?;
                    sec = n;
                    value = rest;
                    if !(0..60).contains(&sec) {
                        range_err = "second";
                        return Some(());
                    }
                    if value.len() >= 2 && matches!(value[0], b'.' | b',') && is_digit_at(value, 1) {
                        let (_, next, _) = next_std_chunk(layout);
                        if matches!(next, Some(Std::Frac { .. })) {
                            return Some(());
                        }
                        let mut n = 2;
                        while n < value.len() && is_digit_at(value, n) {
                            n += 1;
                        }
                        nsec = parse_nanoseconds(value, n)?;
                        value = &value[n..];
                    }
                }
                Std::PM | Std::Pm => {
                    let p = value.get(..2)?;
                    let (pm_text, am_text): (&[u8], &[u8]) = if std == Std::PM {
                        (b"PM", b"AM")
                    } else {
                        (b"pm", b"am")
                    };
                    if p == pm_text {
                        pm = true;
                    } else if p == am_text {
                        am = true;
                    } else {
                        return None;
                    }
                    value = &value[2..];
                }
                Std::Tz(kind) => {
                    if kind.iso && value.first() == Some(&b'Z') {
                        value = &value[1..];
                        z = Some(Zone::Utc);
                        return Some(());
                    }
                    let (sign, hh, mm, ss, rest): (u8, &[u8], &[u8], &[u8], &[u8]);
                    if kind.colon && !kind.seconds {
                        if value.len() < 6 || value[3] != b':' {
                            return None;
                        }
                        (sign, hh, mm, ss, rest) = (value[0], &value[1..3], &value[4..6], b"00", &value[6..]);
                    } else if kind.short {
                        if value.len() < 3 {
                            return None;
                        }
                        (sign, hh, mm, ss, rest) = (value[0], &value[1..3], b"00", b"00", &value[3..]);
                    } else if kind.colon && kind.seconds {
                        if value.len() < 9 || value[3] != b':' || value[6] != b':' {
                            return None;
                        }
                        (sign, hh, mm, ss, rest) =
                            (value[0], &value[1..3], &value[4..6], &value[7..9], &value[9..]);
                    } else if kind.seconds {
                        if value.len() < 7 {
                            return None;
                        }
                        (sign, hh, mm, ss, rest) =
                            (value[0], &value[1..3], &value[3..5], &value[5..7], &value[7..]);
                    } else {
                        if value.len() < 5 {
                            return None;
                        }
                        (sign, hh, mm, ss, rest) = (value[0], &value[1..3], &value[3..5], b"00", &value[5..]);
                    }
                    value = rest;
                    let (hr, _) = getnum(hh, true)?;
                    let (m, _) = getnum(mm, true)?;
                    let (s, _) = getnum(ss, true)?;
                    if hr > 24 {
                        range_err = "time zone offset hour";
                    }
                    if m > 60 {
                        range_err = "time zone offset minute";
                    }
                    if s > 60 {
                        range_err = "time zone offset second";
                    }
                    let off = (hr * 60 + m) * 60 + s;
                    zone_offset = Some(match sign {
                        b'+' => off,
                        b'-' => -off,
                        _ => return None,
                    });
                }
                Std::ZoneName => {
                    if value.starts_with(b"UTC") {
                        z = Some(Zone::Utc);
                        value = &value[3..];
                        return Some(());
                    }
                    let n = parse_time_zone(value)?;
                    zone_name = value[..n].to_vec();
                    value = &value[n..];
                }
                Std::Frac {
                    trim: false, digits, ..
                } => {
                    let ndigit = 1 + digits;
                    if value.len() < ndigit {
                        return None;
                    }
                    nsec = parse_nanoseconds(value, ndigit)?;
                    value = &value[ndigit..];
                }
                Std::Frac { trim: true, .. } => {
                    if value.len() < 2 || !matches!(value[0], b'.' | b',') || !value[1].is_ascii_digit() {
                        return Some(());
                    }
                    let mut i = 0;
                    while i + 1 < value.len() && value[i + 1].is_ascii_digit() {
                        i += 1;
                    }
                    nsec = parse_nanoseconds(value, 1 + i)?;
                    value = &value[1 + i..];
                }
            }
            Some(())
        })();
        if !range_err.is_empty() {
            return Err(err(std_str, value, format!(": {range_err} out of range")));
        }
        if ok.is_none() {
            return Err(err(std_str, hold, String::new()));
        }
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    if yday >= 0 {
        let mut d = 0;
        let mut m = 0;
        let mut yd = yday;
        if is_leap(year) {
            if yd == 31 + 29 {
                m = 2;
                d = 29;
            } else if yd > 31 + 29 {
                yd -= 1;
            }
        }
        if !(1..=365).contains(&yd) {
            return Err(err(b"", value, ": day-of-year out of range".to_owned()));
        }
        if m == 0 {
            let days_before = |m: i64| days_from_civil(2001, m, 1) - days_from_civil(2001, 1, 1);
            m = (yd - 1) / 31 + 1;
            if m < 12 && days_before(m + 1) < yd {
                m += 1;
            }
            d = yd - days_before(m);
        }
        if month >= 0 && month != m {
            return Err(err(b"", value, ": day-of-year does not match month".to_owned()));
        }
        month = m;
        if day >= 0 && day != d {
            return Err(err(b"", value, ": day-of-year does not match day".to_owned()));
        }
        day = d;
    } else {
        if month < 0 {
            month = 1;
        }
        if day < 0 {
            day = 1;
        }
    }
    if day < 1 || day > days_in(month, year) {
        return Err(err(b"", value, ": day out of range".to_owned()));
    }
    if let Some(zone) = z {
        return Ok(GoTime::date(year, month, day, hour, min, sec, nsec, zone));
    }
    if let Some(offset) = zone_offset {
        let mut t = GoTime::date(year, month, day, hour, min, sec, nsec, Zone::Utc);
        t.unix -= offset;
        let name = String::from_utf8_lossy(&zone_name).into_owned();
        if offset == 0 && (name.is_empty() || name == "UTC") {
            t.zone = Zone::Local;
        } else {
            t.zone = Zone::Fixed {
                name,
                offset: offset as i32,
            };
        }
        return Ok(t);
    }
    if !zone_name.is_empty() {
        let mut t = GoTime::date(year, month, day, hour, min, sec, nsec, Zone::Utc);
        let name = String::from_utf8_lossy(&zone_name).into_owned();
        if name == "UTC" {
            t.zone = Zone::Local;
            return Ok(t);
        }
        let mut offset = 0;
        if name.len() > 3 && name.starts_with("GMT") {
            offset = name[3..].parse::<i32>().unwrap_or(0) * 3600;
        }
        t.zone = Zone::Fixed { name, offset };
        return Ok(t);
    }
    Ok(GoTime::date(year, month, day, hour, min, sec, nsec, Zone::Local))
}

/// Go's `time.Duration.String`.
pub(crate) fn duration_string(d: i64) -> String {
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let mut buf: Vec<u8> = Vec::new();
    let frac = |buf: &mut Vec<u8>, v: u64, prec: usize| -> u64 {
        let mut v = v;
        let mut print = false;
        for _ in 0..prec {
            let digit = v % 10;
            print = print || digit != 0;
            if print {
                buf.push(b'0' + digit as u8);
            }
            v /= 10;
        }
        if print {
            buf.push(b'.');
        }
        v
    };
    let int = |buf: &mut Vec<u8>, v: u64| {
        let mut v = v;
        if v == 0 {
            buf.push(b'0');
        }
        while v > 0 {
            buf.push(b'0' + (v % 10) as u8);
            v /= 10;
        }
    };
    // Built backwards, like Go.
    if u < 1_000_000_000 {
        let prec;
        buf.push(b's');
        if u == 0 {
            return "0s".to_owned();
        } else if u < 1_000 {
            prec = 0;
            buf.push(b'n');
        } else if u < 1_000_000 {
            prec = 3;
            buf.extend_from_slice(&[0xB5, 0xC2]);
        } else {
            prec = 6;
            buf.push(b'm');
        }
        u = frac(&mut buf, u, prec);
        int(&mut buf, u);
    } else {
        buf.push(b's');
        u = frac(&mut buf, u, 9);
        int(&mut buf, u % 60);
        u /= 60;
        if u > 0 {
            buf.push(b'm');
            int(&mut buf, u % 60);
            u /= 60;
            if u > 0 {
                buf.push(b'h');
                int(&mut buf, u);
            }
        }
    }
    if neg {
        buf.push(b'-');
    }
    buf.reverse();
    String::from_utf8_lossy(&buf).into_owned()
}

/// Go's `time.ParseDuration`.
pub(crate) fn parse_duration(s_all: &[u8]) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", time_quote(s_all));
    let mut s = s_all;
    let mut neg = false;
    if let Some(&c) = s.first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = &s[1..];
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        if !(s[0] == b'.' || s[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let before = s.len();
        let (v, rest) = leading_int(s).ok_or_else(invalid)?;
        s = rest;
        let pre = before != s.len();
        let mut post = false;
        let (mut f, mut scale) = (0u64, 1f64);
        if s.first() == Some(&b'.') {
            s = &s[1..];
            let before = s.len();
            let mut overflow = false;
            let mut i = 0;
            while i < s.len() && s[i].is_ascii_digit() {
                if !overflow {
                    if f > (i64::MAX as u64) / 10 {
                        overflow = true;
                    } else {
                        let y = f * 10 + u64::from(s[i] - b'0');
                        if y > 1u64 << 63 {
                            overflow = true;
                        } else {
                            f = y;
                            scale *= 10.0;
                        }
                    }
                }
                i += 1;
            }
            s = &s[i..];
            post = before != s.len();
        }
        if !pre && !post {
            return Err(invalid());
        }
        let i = s
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        if i == 0 {
            return Err(format!("time: missing unit in duration {}", time_quote(s_all)));
        }
        let u = &s[..i];
        s = &s[i..];
        let unit: u64 = match u {
            b"ns" => 1,
            b"us" => 1_000,
            b"\xC2\xB5s" | b"\xCE\xBCs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "time: unknown unit {} in duration {}",
                    time_quote(u),
                    time_quote(s_all)
                ));
            }
        };
        if v > (1u64 << 63) / unit {
            return Err(invalid());
        }
        let mut v = v * unit;
        if f > 0 {
            v += (f as f64 * (unit as f64 / scale)) as u64;
            if v > 1u64 << 63 {
                return Err(invalid());
            }
        }
        d += v;
        if d > 1u64 << 63 {
            return Err(invalid());
        }
    }
    if neg {
        return Ok((d as i64).wrapping_neg());
    }
    if d > i64::MAX as u64 {
        return Err(invalid());
    }
    Ok(d as i64)
}

/// A `time.Time` object.
#[derive(Debug)]
struct TimeObject(GoTime);

/// A named integer type with a `String` method (`time.Month`, `time.Weekday`,
/// `time.Duration`).
#[derive(Debug)]
struct NamedInt {
    type_name: &'static str,
    kind: &'static str,
    value: i64,
    text: String,
}

impl Object for NamedInt {
    fn type_name(&self) -> Str {
        Str::from(self.type_name)
    }

    fn kind_name(&self) -> &'static str {
        self.kind
    }

    fn method(&self, name: &str) -> Option<Func> {
        let v = self.value;
        let text = self.text.clone();
        let is_duration = self.type_name == "time.Duration";
        Some(match name {
            "String" => func(vec![], move |_| Ok(Value::string(text.as_str()))),
            "Hours" if is_duration => func(vec![], move |_| Ok(Value::float(v as f64 / 3.6e12))),
            "Minutes" if is_duration => func(vec![], move |_| Ok(Value::float(v as f64 / 6e10))),
            "Seconds" if is_duration => func(vec![], move |_| Ok(Value::float(v as f64 / 1e9))),
            "Milliseconds" if is_duration => func(vec![], move |_| Ok(Value::int64(v / 1_000_000))),
            "Nanoseconds" if is_duration => func(vec![], move |_| Ok(Value::int64(v))),
            _ => return None,
        })
    }

    fn go_string(&self) -> Option<String> {
        Some(self.text.clone())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn named_int(type_name: &'static str, kind: &'static str, value: i64, text: String) -> Value {
    Value::Object(Arc::new(NamedInt {
        type_name,
        kind,
        value,
        text,
    }))
}

const TIME_TYPE: &str = "time.Time";

fn time_value(t: GoTime) -> Value {
    Value::Object(Arc::new(TimeObject(t)))
}

fn time_of(v: &Value) -> Option<&GoTime> {
    match v {
        Value::Object(o) => o.as_any().downcast_ref::<TimeObject>().map(|t| &t.0),
        _ => None,
    }
}

fn time_type() -> Type {
    Type::Named(Str::from(TIME_TYPE))
}

impl Object for TimeObject {
    fn type_name(&self) -> Str {
        Str::from(TIME_TYPE)
    }

    fn deep_equal(&self, other: &dyn Object) -> Option<bool> {
        other.as_any().downcast_ref::<TimeObject>().map(|y| self.0 == y.0)
    }

    fn method(&self, name: &str) -> Option<Func> {
        let t = self.0.clone();
        let int = |f: fn(&Civil) -> i64| {
            let t = t.clone();
            func(vec![], move |_| Ok(Value::int(f(&t.civil()))))
        };
        Some(match name {
            "Format" => func(vec![Type::String], move |a| {
                Ok(crate::util::string_value(t.format(arg_bytes(a, 0))))
            }),
            "String" => func(vec![], move |_| Ok(Value::string(t.string()))),
            "AddDate" => func(vec![Type::INT, Type::INT, Type::INT], move |a| {
                Ok(time_value(t.add_date(
                    arg_int(a, 0),
                    arg_int(a, 1),
                    arg_int(a, 2),
                )))
            }),
            "Unix" => func(vec![], move |_| Ok(Value::int64(t.unix))),
            "UnixNano" => func(vec![], move |_| Ok(Value::int64(t.unix_nano()))),
            "UnixMilli" => func(vec![], move |_| {
                Ok(Value::int64(
                    t.unix.wrapping_mul(1000) + i64::from(t.nsec / 1_000_000),
                ))
            }),
            "UTC" => func(vec![], move |_| {
                Ok(time_value(GoTime {
                    zone: Zone::Utc,
                    ..t.clone()
                }))
            }),
            "Local" => func(vec![], move |_| {
                Ok(time_value(GoTime {
                    zone: Zone::Local,
                    ..t.clone()
                }))
            }),
            "IsZero" => func(vec![], move |_| {
                Ok(Value::Bool(t.unix == ZERO_UNIX && t.nsec == 0))
            }),
            "Year" => int(|c| c.year),
            "Day" => int(|c| c.day),
            "Hour" => int(|c| c.hour),
            "Minute" => int(|c| c.min),
            "Second" => int(|c| c.sec),
            "YearDay" => int(|c| c.yday),
            "Nanosecond" => func(vec![], move |_| Ok(Value::int(i64::from(t.nsec)))),
            "Month" => func(vec![], move |_| {
                let m = t.civil().month;
                Ok(named_int(
                    "time.Month",
                    "int",
                    m,
                    LONG_MONTHS[(m - 1) as usize].to_owned(),
                ))
            }),
            "Weekday" => func(vec![], move |_| {
                let w = t.civil().weekday;
                Ok(named_int(
                    "time.Weekday",
                    "int",
                    w,
                    LONG_DAYS[w as usize].to_owned(),
                ))
            }),
            "Before" | "After" | "Equal" | "Sub" | "Compare" => {
                let which = name.to_owned();
                func(vec![time_type()], move |a| {
                    let Some(u) = a.first().and_then(time_of) else {
                        return Err(FuncError::new(crate::util::NIL_DEREF));
                    };
                    let ord = t.cmp_instant(u);
                    Ok(match which.as_str() {
                        "Before" => Value::Bool(ord.is_lt()),
                        "After" => Value::Bool(ord.is_gt()),
                        "Equal" => Value::Bool(ord.is_eq()),
                        "Compare" => Value::int(ord as i64),
                        _ => {
                            let d = i128::from(t.unix - u.unix) * 1_000_000_000 + i128::from(t.nsec)
                                - i128::from(u.nsec);
                            let d = d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
                            named_int("time.Duration", "int64", d, duration_string(d))
                        }
                    })
                })
            }
            _ => return None,
        })
    }

    fn go_string(&self) -> Option<String> {
        Some(self.0.string())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A time's `MarshalJSON` (RFC 3339 with nanoseconds), if `o` is a time.
pub(crate) fn marshal_json(o: &Obj) -> Option<Result<String, String>> {
    let t = &o.as_any().downcast_ref::<TimeObject>()?.0;
    let year = t.civil().year;
    if !(0..=9999).contains(&year) {
        return Some(Err(
            "json: error calling MarshalJSON for type time.Time: Time.MarshalJSON: year outside of range [0,9999]"
                .to_owned(),
        ));
    }
    let text = t.format(b"2006-01-02T15:04:05.999999999Z07:00");
    Some(Ok(format!("\"{}\"", String::from_utf8_lossy(&text))))
}

/// The time a `date`-family argument denotes: a time, or Unix seconds as an integer.
fn date_arg(v: &Value, zone: &Zone) -> Result<GoTime, FuncError> {
    if let Some(t) = time_of(v) {
        return Ok(t.clone());
    }
    match v {
        Value::Int(n, IntKind::Int | IntKind::Int64 | IntKind::Int32) => {
            Ok(GoTime::from_unix(*n, zone.clone()))
        }
        _ => Err(FuncError::new(format!(
            "date: a {} is not a time; Sprig would use the current time, which kalypso does not read",
            v.type_name()
        ))),
    }
}

fn date_in_zone(layout: &[u8], date: &Value, zone: &[u8]) -> FuncResult {
    let zone = Zone::load(&String::from_utf8_lossy(zone)).unwrap_or(Zone::Utc);
    let t = date_arg(date, &zone)?;
    let t = GoTime { zone, ..t };
    Ok(crate::util::string_value(t.format(layout)))
}

/// Go's `strconv.ParseInt(s, 10, 64)` as Sprig's `duration` uses it: range errors give the
/// clamped value, syntax errors 0.
fn parse_int_clamped(s: &[u8]) -> i64 {
    if let Some(n) = crate::cast::parse_int(s, 10, 64) {
        return n;
    }
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        return if neg { i64::MIN } else { i64::MAX };
    }
    0
}

/// Registers the date functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || Type::String;
    let any = || Type::Interface;
    register(
        m,
        &["date"],
        func(vec![s(), any()], |a| {
            date_in_zone(arg_bytes(a, 0), &arg(a, 1), b"Local")
        }),
    );
    register(
        m,
        &["dateInZone", "date_in_zone"],
        func(vec![s(), any(), s()], |a| {
            date_in_zone(arg_bytes(a, 0), &arg(a, 1), arg_bytes(a, 2))
        }),
    );
    register(
        m,
        &["htmlDate"],
        func(vec![any()], |a| date_in_zone(b"2006-01-02", &arg(a, 0), b"Local")),
    );
    register(
        m,
        &["htmlDateInZone"],
        func(vec![any(), s()], |a| {
            date_in_zone(b"2006-01-02", &arg(a, 0), arg_bytes(a, 1))
        }),
    );
    register(
        m,
        &["dateModify", "date_modify"],
        func(vec![s(), time_type()], |a| {
            let t = time_of(&arg(a, 1)).cloned().unwrap_or_else(GoTime::zero);
            Ok(time_value(match parse_duration(arg_bytes(a, 0)) {
                Ok(d) => t.add_duration(d),
                Err(_) => t,
            }))
        }),
    );
    register(
        m,
        &["mustDateModify", "must_date_modify"],
        func(vec![s(), time_type()], |a| {
            let t = time_of(&arg(a, 1)).cloned().unwrap_or_else(GoTime::zero);
            let d = parse_duration(arg_bytes(a, 0)).map_err(FuncError::new)?;
            Ok(time_value(t.add_duration(d)))
        }),
    );
    register(
        m,
        &["duration"],
        func(vec![any()], |a| {
            let n = match arg(a, 0) {
                Value::String(s) => parse_int_clamped(s.as_bytes()),
                Value::Int(n, IntKind::Int64) => n,
                _ => 0,
            };
            Ok(Value::string(duration_string(n.wrapping_mul(1_000_000_000))))
        }),
    );
    register(
        m,
        &["durationRound"],
        func(vec![any()], |a| {
            let v = arg(a, 0);
            let d = match &v {
                Value::String(s) => parse_duration(s.as_bytes()).unwrap_or(0),
                Value::Int(n, IntKind::Int64) => *n,
                _ if time_of(&v).is_some() => {
                    return Err(FuncError::new(
                        "durationRound of a time measures from the current time, which kalypso does not read",
                    ));
                }
                _ => 0,
            };
            Ok(Value::string(duration_round(d)))
        }),
    );
    register(
        m,
        &["toDate"],
        func(vec![s(), s()], |a| {
            Ok(time_value(
                parse_time(arg_bytes(a, 0), arg_bytes(a, 1)).unwrap_or_else(|_| GoTime::zero()),
            ))
        }),
    );
    register(
        m,
        &["mustToDate"],
        func(vec![s(), s()], |a| {
            parse_time(arg_bytes(a, 0), arg_bytes(a, 1))
                .map(time_value)
                .map_err(FuncError::new)
        }),
    );
    register(
        m,
        &["unixEpoch"],
        func(vec![time_type()], |a| {
            let t = time_of(&arg(a, 0)).cloned().unwrap_or_else(GoTime::zero);
            Ok(Value::string(t.unix.to_string()))
        }),
    );
}

/// Sprig's `durationRound`: the largest whole unit (y, m(onth), d, h, m, s).
fn duration_round(d: i64) -> String {
    let u = d.unsigned_abs();
    const HOUR: u64 = 3_600_000_000_000;
    let (year, month, day, minute, second) = (
        HOUR * 24 * 365,
        HOUR * 24 * 30,
        HOUR * 24,
        60_000_000_000u64,
        1_000_000_000u64,
    );
    if u > year {
        format!("{}y", u / year)
    } else if u > month {
        format!("{}mo", u / month)
    } else if u > day {
        format!("{}d", u / day)
    } else if u > HOUR {
        format!("{}h", u / HOUR)
    } else if u > minute {
        format!("{}m", u / minute)
    } else if u > second {
        format!("{}s", u / second)
    } else {
        "0s".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(t: &GoTime, layout: &str) -> String {
        String::from_utf8(t.format(layout.as_bytes())).unwrap()
    }

    #[test]
    fn formats_like_go() {
        let t = GoTime::date(2024, 2, 28, 13, 4, 5, 120_000_000, Zone::Utc);
        assert_eq!(fmt(&t, "2006-01-02"), "2024-02-28");
        assert_eq!(t.string(), "2024-02-28 13:04:05.12 +0000 UTC");
        assert_eq!(
            fmt(&t, "Mon Jan _2 3:04PM .000 Z07:00 -0700 MST"),
            "Wed Feb 28 1:04PM .120 Z +0000 UTC"
        );
        assert_eq!(fmt(&t.add_date(0, 0, 1), "2006-01-02"), "2024-02-29");
        assert_eq!(
            fmt(&t.add_date(0, 12, 2), "January 2, 2006 002"),
            "March 2, 2025 061"
        );
        assert_eq!(GoTime::zero().string(), "0001-01-01 00:00:00 +0000 UTC");
        let ny = GoTime {
            zone: Zone::load("America/New_York").unwrap(),
            ..GoTime::from_unix(0, Zone::Utc)
        };
        assert_eq!(ny.string(), "1969-12-31 19:00:00 -0500 EST");
    }

    #[test]
    fn parses_like_go() {
        let t = parse_time(b"2006-01-02", b"2024-02-28").unwrap();
        assert_eq!(t.string(), "2024-02-28 00:00:00 +0000 UTC");
        let t = parse_time(b"2006-01-02T15:04:05Z07:00", b"2024-02-28T10:00:00+02:00").unwrap();
        assert_eq!(t.unix, 1_709_107_200);
        assert_eq!(t.string(), "2024-02-28 10:00:00 +0200 +0200");
        assert_eq!(
            parse_time(b"2006-01-02", b"x").unwrap_err(),
            "parsing time \"x\" as \"2006-01-02\": cannot parse \"x\" as \"2006\""
        );
        assert_eq!(
            parse_time(b"2006-01-02", b"2024-02-30").unwrap_err(),
            "parsing time \"2024-02-30\": day out of range"
        );
        assert_eq!(
            parse_time(b"2006", b"2024x").unwrap_err(),
            "parsing time \"2024x\": extra text: \"x\""
        );
    }

    #[test]
    fn durations() {
        assert_eq!(duration_string(0), "0s");
        assert_eq!(duration_string(3_600_000_000_000), "1h0m0s");
        assert_eq!(duration_string(1_500), "1.5µs");
        assert_eq!(duration_string(-90_000_000_000), "-1m30s");
        assert_eq!(parse_duration(b"1h30m").unwrap(), 5_400_000_000_000);
        assert_eq!(parse_duration(b"1.5s").unwrap(), 1_500_000_000);
        assert_eq!(
            parse_duration(b"abc").unwrap_err(),
            "time: invalid duration \"abc\""
        );
        assert_eq!(
            parse_duration(b"1").unwrap_err(),
            "time: missing unit in duration \"1\""
        );
        assert_eq!(
            parse_duration(b"1x").unwrap_err(),
            "time: unknown unit \"x\" in duration \"1x\""
        );
        assert_eq!(duration_round(3_700_000_000_000), "1h");
        // Sprig v3.2.3 date.go durationRound: months are "mo", minutes "m".
        assert_eq!(duration_round(2_400 * 3_600_000_000_000), "3mo");
        assert_eq!(duration_round(-744 * 3_600_000_000_000), "1mo");
        assert_eq!(duration_round(720 * 3_600_000_000_000), "30d");
    }
}
