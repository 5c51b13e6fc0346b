//! Go's `fmt` printing of [`Value`]s: `Sprint`, `Sprintln`, `Sprintf` with every verb, flag,
//! width and precision, and Go's `%!verb(type=value)` error notation.
//!
//! This is a port of the observable behaviour of Go's `fmt/print.go` and `fmt/format.go`:
//! the same flag handling (`%+v`, `%#v`, zero padding only to the left), the same treatment
//! of values nested in slices, maps and structs (nil interfaces print `<nil>`, `fmt.Stringer`
//! values print through `String()`), map keys in `fmtsort` order, and the same error
//! notations (`%!d(string=a)`, `%!(EXTRA int=1)`, `%!s(MISSING)`, `%!(BADINDEX)`).

use crate::strconv;
use crate::unicode::{self, MAX_RUNE, RUNE_ERROR};
use crate::value::{FloatKind, List, Obj, Type, UintKind, Value};

const LDIGITS: &[u8; 17] = b"0123456789abcdefx";
const UDIGITS: &[u8; 17] = b"0123456789ABCDEFX";

/// The address Go would print for a non-nil pointer, map or slice with `%p`. Real addresses
/// are not reproducible, so every one prints as this.
const FAKE_ADDRESS: u64 = 0xc000010000;

/// `fmt.Sprint(args...)`: operands printed with `%v`, a space between operands when neither
/// side is a string.
pub fn sprint(args: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    write_sprint(&mut out, args);
    out
}

/// `fmt.Sprintln(args...)`: operands printed with `%v`, always space-separated, newline added.
pub fn sprintln(args: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    write_sprintln(&mut out, args);
    out
}

/// `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &[u8], args: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    write_sprintf(&mut out, format, args);
    out
}

/// `fmt.Sprint(v)` of a single value, i.e. `%v` (what Sprig's `toString` produces).
pub fn sprint_value(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, v);
    out
}

/// [`sprint_value`] as a `String` (invalid UTF-8 replaced by U+FFFD).
pub fn sprint_string(v: &Value) -> String {
    match String::from_utf8(sprint_value(v)) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// [`sprint`] appending to `out`.
pub fn write_sprint(out: &mut Vec<u8>, args: &[Value]) {
    let mut p = Printer::new(out);
    let mut prev_string = false;
    for (i, arg) in args.iter().enumerate() {
        let is_string = matches!(arg, Value::String(_));
        if i > 0 && !is_string && !prev_string {
            p.buf.push(b' ');
        }
        p.print_arg(arg, 'v');
        prev_string = is_string;
    }
}

/// [`sprintln`] appending to `out`.
pub fn write_sprintln(out: &mut Vec<u8>, args: &[Value]) {
    let mut p = Printer::new(out);
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            p.buf.push(b' ');
        }
        p.print_arg(arg, 'v');
    }
    p.buf.push(b'\n');
}

/// [`sprint_value`] appending to `out`. Strings and integers take a fast path.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::String(s) => out.extend_from_slice(s.as_bytes()),
        Value::Int(i, _) => write_i64(out, *i),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        _ => Printer::new(out).print_arg(v, 'v'),
    }
}

/// [`sprintf`] appending to `out`.
pub fn write_sprintf(out: &mut Vec<u8>, format: &[u8], args: &[Value]) {
    Printer::new(out).do_printf(format, args);
}

/// [`write_sprintf`] that stops once `out` holds more than `limit` bytes (a width can pad a
/// single verb to ten million bytes, and a format can hold many verbs). Returns `false` if it
/// stopped early.
pub fn write_sprintf_bounded(out: &mut Vec<u8>, format: &[u8], args: &[Value], limit: usize) -> bool {
    let mut p = Printer::new(out);
    p.limit = limit;
    p.do_printf(format, args);
    p.buf.len() <= limit
}

fn write_i64(out: &mut Vec<u8>, i: i64) {
    let mut buf = [0u8; 20];
    let mut n = i.unsigned_abs();
    let mut pos = buf.len();
    loop {
        pos -= 1;
        buf[pos] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if i < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[pos..]);
}

#[derive(Clone, Copy, Default)]
struct Flags {
    wid_present: bool,
    prec_present: bool,
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    plus_v: bool,
    sharp_v: bool,
}

struct Printer<'a> {
    buf: &'a mut Vec<u8>,
    f: Flags,
    wid: usize,
    prec: usize,
    erroring: bool,
    reordered: bool,
    good_arg_num: bool,
    limit: usize,
}

fn too_large(x: i64) -> bool {
    !(-1_000_000..=1_000_000).contains(&x)
}

fn parse_num(s: &[u8], start: usize, end: usize) -> (usize, bool, usize) {
    if start >= end {
        return (0, false, end);
    }
    let mut num: i64 = 0;
    let mut is_num = false;
    let mut i = start;
    while i < end && s[i].is_ascii_digit() {
        if too_large(num) {
            return (0, false, end);
        }
        num = num * 10 + i64::from(s[i] - b'0');
        is_num = true;
        i += 1;
    }
    (num as usize, is_num, i)
}

/// The integer value of a `*` width or precision argument, as Go's `intFromArg`.
fn int_from_arg(args: &[Value], arg_num: usize) -> (i64, bool, usize) {
    let mut new_arg_num = arg_num;
    let mut num = 0i64;
    let mut is_int = false;
    if arg_num < args.len() {
        match &args[arg_num] {
            Value::Int(i, _) => {
                num = *i;
                is_int = true;
            }
            Value::Uint(u, _) if i64::try_from(*u).is_ok() => {
                num = *u as i64;
                is_int = true;
            }
            _ => {}
        }
        new_arg_num = arg_num + 1;
        if too_large(num) {
            num = 0;
            is_int = false;
        }
    }
    (num, is_int, new_arg_num)
}

/// `parseArgNumber`: the zero-based index in `[n]`, the bytes consumed, and success.
fn parse_arg_number(format: &[u8]) -> (i64, usize, bool) {
    if format.len() < 3 {
        return (0, 1, false);
    }
    for i in 1..format.len() {
        if format[i] == b']' {
            let (width, ok, newi) = parse_num(format, 1, i);
            if !ok || newi != i {
                return (0, i + 1, false);
            }
            return (width as i64 - 1, i + 1, true);
        }
    }
    (0, 1, false)
}

fn is_byte_list(l: &List) -> bool {
    matches!(l.elem_type(), Type::Uint(UintKind::Uint8))
}

fn list_bytes(l: &List) -> Vec<u8> {
    l.items()
        .iter()
        .map(|v| match v {
            Value::Uint(u, _) => *u as u8,
            Value::Int(i, _) => *i as u8,
            _ => 0,
        })
        .collect()
}

fn float_size(k: FloatKind) -> u32 {
    match k {
        FloatKind::Float32 => 32,
        FloatKind::Float64 => 64,
    }
}

impl<'a> Printer<'a> {
    fn new(buf: &'a mut Vec<u8>) -> Printer<'a> {
        Printer {
            buf,
            f: Flags::default(),
            wid: 0,
            prec: 0,
            erroring: false,
            reordered: false,
            good_arg_num: true,
            limit: usize::MAX,
        }
    }

    fn clear_flags(&mut self) {
        self.f = Flags::default();
        self.wid = 0;
        self.prec = 0;
    }

    fn write_rune(&mut self, r: u32) {
        unicode::append_rune(self.buf, r);
    }

    // ----- format.go -----

    fn write_padding(&mut self, n: usize) {
        let pad = if self.f.zero && !self.f.minus { b'0' } else { b' ' };
        self.buf.resize(self.buf.len() + n, pad);
    }

    fn pad(&mut self, b: &[u8]) {
        if !self.f.wid_present || self.wid == 0 {
            self.buf.extend_from_slice(b);
            return;
        }
        let width = self.wid.saturating_sub(unicode::rune_count(b));
        if !self.f.minus {
            self.write_padding(width);
            self.buf.extend_from_slice(b);
        } else {
            self.buf.extend_from_slice(b);
            self.write_padding(width);
        }
    }

    fn fmt_boolean(&mut self, v: bool) {
        self.pad(if v { b"true" } else { b"false" });
    }

    fn fmt_unicode(&mut self, u: u64) {
        let mut prec = 4usize;
        if self.f.prec_present && self.prec > 4 {
            prec = self.prec;
        }
        let mut digits = Vec::with_capacity(20);
        let mut v = u;
        loop {
            digits.push(UDIGITS[(v & 0xF) as usize]);
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        while digits.len() < prec {
            digits.push(b'0');
        }
        let mut out = Vec::with_capacity(digits.len() + 10);
        out.extend_from_slice(b"U+");
        out.extend(digits.iter().rev());
        if self.f.sharp && u <= u64::from(MAX_RUNE) && strconv::is_print(u as u32) {
            out.extend_from_slice(b" '");
            unicode::append_rune(&mut out, u as u32);
            out.push(b'\'');
        }
        let old_zero = self.f.zero;
        self.f.zero = false;
        self.pad(&out);
        self.f.zero = old_zero;
    }

    fn fmt_int(&mut self, u: u64, base: u64, is_signed: bool, verb: char, digits: &[u8; 17]) {
        let negative = is_signed && (u as i64) < 0;
        let mut u = if negative { (u as i64).unsigned_abs() } else { u };
        let mut prec = 0usize;
        if self.f.prec_present {
            prec = self.prec;
            if prec == 0 && u == 0 {
                let old_zero = self.f.zero;
                self.f.zero = false;
                let w = self.wid;
                self.write_padding(w);
                self.f.zero = old_zero;
                return;
            }
        } else if self.f.zero && !self.f.minus && self.f.wid_present {
            prec = self.wid;
            if negative || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        // Digits are produced right to left.
        let mut buf: Vec<u8> = Vec::with_capacity(prec.max(24) + 4);
        match base {
            10 => {
                while u >= 10 {
                    buf.push(b'0' + (u % 10) as u8);
                    u /= 10;
                }
            }
            16 => {
                while u >= 16 {
                    buf.push(digits[(u & 0xF) as usize]);
                    u >>= 4;
                }
            }
            8 => {
                while u >= 8 {
                    buf.push(b'0' + (u & 7) as u8);
                    u >>= 3;
                }
            }
            _ => {
                while u >= 2 {
                    buf.push(b'0' + (u & 1) as u8);
                    u >>= 1;
                }
            }
        }
        buf.push(digits[u as usize]);
        while prec > buf.len() {
            buf.push(b'0');
        }
        if self.f.sharp {
            match base {
                2 => buf.extend_from_slice(b"b0"),
                8 if buf.last() != Some(&b'0') => {
                    buf.push(b'0');
                }
                16 => {
                    buf.push(digits[16]);
                    buf.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            buf.extend_from_slice(b"o0");
        }
        if negative {
            buf.push(b'-');
        } else if self.f.plus {
            buf.push(b'+');
        } else if self.f.space {
            buf.push(b' ');
        }
        buf.reverse();
        let old_zero = self.f.zero;
        self.f.zero = false;
        self.pad(&buf);
        self.f.zero = old_zero;
    }

    fn truncate<'s>(&self, s: &'s [u8]) -> &'s [u8] {
        if self.f.prec_present {
            let mut n = self.prec;
            for (i, _, _) in unicode::runes(s) {
                if n == 0 {
                    return &s[..i];
                }
                n -= 1;
            }
        }
        s
    }

    fn fmt_s(&mut self, s: &[u8]) {
        let s = self.truncate(s);
        self.pad(s);
    }

    fn fmt_sbx(&mut self, s: &[u8], digits: &[u8; 17]) {
        let mut length = s.len();
        if self.f.prec_present && self.prec < length {
            length = self.prec;
        }
        let mut width = 2 * length;
        if width > 0 {
            if self.f.space {
                if self.f.sharp {
                    width *= 2;
                }
                width += length - 1;
            } else if self.f.sharp {
                width += 2;
            }
        } else {
            if self.f.wid_present {
                let w = self.wid;
                self.write_padding(w);
            }
            return;
        }
        if self.f.wid_present && self.wid > width && !self.f.minus {
            let w = self.wid - width;
            self.write_padding(w);
        }
        if self.f.sharp {
            self.buf.push(b'0');
            self.buf.push(digits[16]);
        }
        for (i, &c) in s[..length].iter().enumerate() {
            if self.f.space && i > 0 {
                self.buf.push(b' ');
                if self.f.sharp {
                    self.buf.push(b'0');
                    self.buf.push(digits[16]);
                }
            }
            self.buf.push(digits[usize::from(c >> 4)]);
            self.buf.push(digits[usize::from(c & 0xF)]);
        }
        if self.f.wid_present && self.wid > width && self.f.minus {
            let w = self.wid - width;
            self.write_padding(w);
        }
    }

    fn fmt_q(&mut self, s: &[u8]) {
        let s = self.truncate(s);
        if self.f.sharp && strconv::can_backquote(s) {
            let mut q = Vec::with_capacity(s.len() + 2);
            q.push(b'`');
            q.extend_from_slice(s);
            q.push(b'`');
            self.pad(&q);
            return;
        }
        let mut q = Vec::with_capacity(s.len() + 2);
        if self.f.plus {
            strconv::append_quote_to_ascii(&mut q, s);
        } else {
            strconv::append_quote(&mut q, s);
        }
        self.pad(&q);
    }

    fn fmt_c(&mut self, c: u64) {
        let r = if c > u64::from(MAX_RUNE) {
            RUNE_ERROR
        } else {
            c as u32
        };
        let mut b = Vec::with_capacity(4);
        unicode::append_rune(&mut b, r);
        self.pad(&b);
    }

    fn fmt_qc(&mut self, c: u64) {
        let r = if c > u64::from(MAX_RUNE) {
            RUNE_ERROR
        } else {
            c as u32
        };
        let mut b = Vec::with_capacity(8);
        strconv::append_quote_rune(&mut b, i64::from(r), self.f.plus);
        self.pad(&b);
    }

    fn fmt_float_raw(&mut self, v: f64, size: u32, verb: char, prec: i32) {
        let prec = if self.f.prec_present {
            self.prec as i32
        } else {
            prec
        };
        let mut num: Vec<u8> = Vec::with_capacity(32);
        num.push(b'+');
        strconv::append_float(&mut num, v, verb as u8, prec, size);
        if num[1] == b'-' || num[1] == b'+' {
            num.remove(0);
        } else {
            num[0] = b'+';
        }
        if self.f.space && num[0] == b'+' && !self.f.plus {
            num[0] = b' ';
        }
        if num[1] == b'I' || num[1] == b'N' {
            let old_zero = self.f.zero;
            self.f.zero = false;
            if num[1] == b'N' && !self.f.space && !self.f.plus {
                num.remove(0);
            }
            self.pad(&num);
            self.f.zero = old_zero;
            return;
        }
        if self.f.sharp && verb != 'b' {
            let mut digits: i32 = 0;
            if matches!(verb, 'v' | 'g' | 'G' | 'x') {
                digits = prec;
                if digits == -1 {
                    digits = 6;
                }
            }
            let mut tail: Vec<u8> = Vec::new();
            let mut has_decimal_point = false;
            let mut saw_nonzero_digit = false;
            let mut i = 1;
            while i < num.len() {
                match num[i] {
                    b'.' => has_decimal_point = true,
                    b'p' | b'P' => {
                        tail.extend_from_slice(&num[i..]);
                        num.truncate(i);
                        break;
                    }
                    b'e' | b'E' if verb != 'x' && verb != 'X' => {
                        tail.extend_from_slice(&num[i..]);
                        num.truncate(i);
                        break;
                    }
                    c => {
                        if c != b'0' {
                            saw_nonzero_digit = true;
                        }
                        if saw_nonzero_digit {
                            digits -= 1;
                        }
                    }
                }
                i += 1;
            }
            if !has_decimal_point {
                if num.len() == 2 && num[1] == b'0' {
                    digits -= 1;
                }
                num.push(b'.');
            }
            while digits > 0 {
                num.push(b'0');
                digits -= 1;
            }
            num.extend_from_slice(&tail);
        }
        if self.f.plus || num[0] != b'+' {
            if self.f.zero && !self.f.minus && self.f.wid_present && self.wid > num.len() {
                self.buf.push(num[0]);
                let w = self.wid - num.len();
                self.write_padding(w);
                self.buf.extend_from_slice(&num[1..]);
                return;
            }
            self.pad(&num);
            return;
        }
        self.pad(&num[1..]);
    }

    // ----- print.go -----

    fn bad_verb(&mut self, verb: char, arg: &Value) {
        self.erroring = true;
        self.buf.extend_from_slice(b"%!");
        self.write_rune(verb as u32);
        self.buf.push(b'(');
        match arg {
            Value::Nil => self.buf.extend_from_slice(b"<nil>"),
            v => {
                let t = v.type_name();
                self.buf.extend_from_slice(t.as_bytes());
                self.buf.push(b'=');
                self.print_arg(v, 'v');
            }
        }
        self.buf.push(b')');
        self.erroring = false;
    }

    fn fmt_bool(&mut self, v: bool, verb: char, arg: &Value) {
        match verb {
            't' | 'v' => self.fmt_boolean(v),
            _ => self.bad_verb(verb, arg),
        }
    }

    fn fmt_0x64(&mut self, v: u64, leading0x: bool) {
        let sharp = self.f.sharp;
        self.f.sharp = leading0x;
        self.fmt_int(v, 16, false, 'v', LDIGITS);
        self.f.sharp = sharp;
    }

    fn fmt_integer(&mut self, v: u64, is_signed: bool, verb: char, arg: &Value) {
        match verb {
            'v' => {
                if self.f.sharp_v && !is_signed {
                    self.fmt_0x64(v, true);
                } else {
                    self.fmt_int(v, 10, is_signed, verb, LDIGITS);
                }
            }
            'd' => self.fmt_int(v, 10, is_signed, verb, LDIGITS),
            'b' => self.fmt_int(v, 2, is_signed, verb, LDIGITS),
            'o' | 'O' => self.fmt_int(v, 8, is_signed, verb, LDIGITS),
            'x' => self.fmt_int(v, 16, is_signed, verb, LDIGITS),
            'X' => self.fmt_int(v, 16, is_signed, verb, UDIGITS),
            'c' => self.fmt_c(v),
            'q' => self.fmt_qc(v),
            'U' => self.fmt_unicode(v),
            _ => self.bad_verb(verb, arg),
        }
    }

    fn fmt_float(&mut self, v: f64, size: u32, verb: char, arg: &Value) {
        match verb {
            'v' => self.fmt_float_raw(v, size, 'g', -1),
            'b' | 'g' | 'G' | 'x' | 'X' => self.fmt_float_raw(v, size, verb, -1),
            'f' | 'e' | 'E' => self.fmt_float_raw(v, size, verb, 6),
            'F' => self.fmt_float_raw(v, size, 'f', 6),
            _ => self.bad_verb(verb, arg),
        }
    }

    fn fmt_complex(&mut self, re: f64, im: f64, verb: char, arg: &Value) {
        match verb {
            'v' | 'b' | 'g' | 'G' | 'x' | 'X' | 'f' | 'F' | 'e' | 'E' => {
                let old_plus = self.f.plus;
                self.buf.push(b'(');
                self.fmt_float(re, 64, verb, arg);
                self.f.plus = true;
                self.fmt_float(im, 64, verb, arg);
                self.buf.extend_from_slice(b"i)");
                self.f.plus = old_plus;
            }
            _ => self.bad_verb(verb, arg),
        }
    }

    fn fmt_string(&mut self, s: &[u8], verb: char, arg: &Value) {
        match verb {
            'v' => {
                if self.f.sharp_v {
                    self.fmt_q(s);
                } else {
                    self.fmt_s(s);
                }
            }
            's' => self.fmt_s(s),
            'x' => self.fmt_sbx(s, LDIGITS),
            'X' => self.fmt_sbx(s, UDIGITS),
            'q' => self.fmt_q(s),
            _ => self.bad_verb(verb, arg),
        }
    }

    fn fmt_bytes(&mut self, v: &[u8], verb: char, type_string: &str, is_nil: bool, arg: &Value) {
        match verb {
            'v' | 'd' => {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(type_string.as_bytes());
                    if is_nil {
                        self.buf.extend_from_slice(b"(nil)");
                        return;
                    }
                    self.buf.push(b'{');
                    for (i, &c) in v.iter().enumerate() {
                        if i > 0 {
                            self.buf.extend_from_slice(b", ");
                        }
                        self.fmt_0x64(u64::from(c), true);
                    }
                    self.buf.push(b'}');
                } else {
                    self.buf.push(b'[');
                    for (i, &c) in v.iter().enumerate() {
                        if i > 0 {
                            self.buf.push(b' ');
                        }
                        self.fmt_int(u64::from(c), 10, false, verb, LDIGITS);
                    }
                    self.buf.push(b']');
                }
            }
            's' => {
                let t = self.truncate(v).to_vec();
                self.pad(&t);
            }
            'x' => self.fmt_sbx(v, LDIGITS),
            'X' => self.fmt_sbx(v, UDIGITS),
            'q' => self.fmt_q(v),
            _ => self.print_value(arg, verb, 0, false),
        }
    }

    fn fmt_pointer(&mut self, value: &Value, verb: char) {
        let u: u64 = match value {
            Value::Map(m) => {
                if m.is_nil() {
                    0
                } else {
                    FAKE_ADDRESS
                }
            }
            Value::List(l) => {
                if l.is_nil() {
                    0
                } else {
                    FAKE_ADDRESS
                }
            }
            Value::Object(o) if o.kind_name() == "ptr" => FAKE_ADDRESS,
            _ => {
                self.bad_verb(verb, value);
                return;
            }
        };
        match verb {
            'v' => {
                if self.f.sharp_v {
                    self.buf.push(b'(');
                    let t = value.type_name();
                    self.buf.extend_from_slice(t.as_bytes());
                    self.buf.extend_from_slice(b")(");
                    if u == 0 {
                        self.buf.extend_from_slice(b"nil");
                    } else {
                        self.fmt_0x64(u, true);
                    }
                    self.buf.push(b')');
                } else if u == 0 {
                    self.pad(b"<nil>");
                } else {
                    let sharp = !self.f.sharp;
                    self.fmt_0x64(u, sharp);
                }
            }
            'p' => {
                let sharp = !self.f.sharp;
                self.fmt_0x64(u, sharp);
            }
            'b' | 'o' | 'd' | 'x' | 'X' => self.fmt_integer(u, false, verb, value),
            _ => self.bad_verb(verb, value),
        }
    }

    /// Go's `handleMethods`: `String()` of values implementing `fmt.Stringer`.
    fn handle_methods(&mut self, arg: &Value, verb: char) -> bool {
        if self.erroring {
            return false;
        }
        if verb == 'w' {
            // Sprintf has no errors to wrap.
            self.bad_verb(verb, arg);
            return true;
        }
        if self.f.sharp_v {
            return false;
        }
        if matches!(verb, 'v' | 's' | 'x' | 'X' | 'q')
            && let Value::Object(o) = arg
            && let Some(s) = o.go_string()
        {
            self.fmt_string(s.as_bytes(), verb, arg);
            return true;
        }
        false
    }

    fn print_arg(&mut self, arg: &Value, verb: char) {
        if let Value::Nil = arg {
            match verb {
                'T' | 'v' => self.pad(b"<nil>"),
                _ => self.bad_verb(verb, arg),
            }
            return;
        }
        match verb {
            'T' => {
                let t = arg.type_name();
                self.fmt_s(t.as_bytes());
                return;
            }
            'p' => {
                self.fmt_pointer(arg, 'p');
                return;
            }
            _ => {}
        }
        match arg {
            Value::Bool(b) => self.fmt_bool(*b, verb, arg),
            Value::Float(f, k) => self.fmt_float(*f, float_size(*k), verb, arg),
            Value::Complex(re, im) => self.fmt_complex(*re, *im, verb, arg),
            Value::Int(i, _) => self.fmt_integer(*i as u64, true, verb, arg),
            Value::Uint(u, _) => self.fmt_integer(*u, false, verb, arg),
            Value::String(s) => self.fmt_string(s.as_bytes(), verb, arg),
            Value::List(l) if is_byte_list(l) => {
                let bytes = list_bytes(l);
                self.fmt_bytes(&bytes, verb, "[]byte", l.is_nil(), arg);
            }
            _ => {
                if !self.handle_methods(arg, verb) {
                    self.print_value(arg, verb, 0, false);
                }
            }
        }
    }

    /// Go's `printValue`. `iface` says the value sits in an interface-typed slot (an element of
    /// `[]interface {}`, a value of `map[string]interface {}`...), where nil prints `<nil>`.
    fn print_value(&mut self, value: &Value, verb: char, depth: usize, iface: bool) {
        if depth > 0 && !matches!(value, Value::Nil) && self.handle_methods(value, verb) {
            return;
        }
        if iface {
            if let Value::Nil = value {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(b"interface {}(nil)");
                } else {
                    self.buf.extend_from_slice(b"<nil>");
                }
                return;
            }
            self.print_value_grow(value, verb, depth + 1, false);
            return;
        }
        match value {
            Value::Nil => {
                if depth == 0 {
                    self.buf.extend_from_slice(b"<invalid reflect.Value>");
                } else if verb == 'v' {
                    self.buf.extend_from_slice(b"<nil>");
                } else {
                    self.bad_verb(verb, value);
                }
            }
            Value::Bool(b) => self.fmt_bool(*b, verb, value),
            Value::Int(i, _) => self.fmt_integer(*i as u64, true, verb, value),
            Value::Uint(u, _) => self.fmt_integer(*u, false, verb, value),
            Value::Float(f, k) => self.fmt_float(*f, float_size(*k), verb, value),
            Value::Complex(re, im) => self.fmt_complex(*re, *im, verb, value),
            Value::String(s) => self.fmt_string(s.as_bytes(), verb, value),
            Value::Map(m) => {
                if self.f.sharp_v {
                    let t = m.type_of().to_string();
                    self.buf.extend_from_slice(t.as_bytes());
                    if m.is_nil() {
                        self.buf.extend_from_slice(b"(nil)");
                        return;
                    }
                    self.buf.push(b'{');
                } else {
                    self.buf.extend_from_slice(b"map[");
                }
                let key_iface = matches!(m.key_type(), Type::Interface);
                let elem_iface = matches!(m.elem_type(), Type::Interface);
                let entries = m.snapshot();
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        if self.f.sharp_v {
                            self.buf.extend_from_slice(b", ");
                        } else {
                            self.buf.push(b' ');
                        }
                    }
                    self.print_value_grow(&k.to_value(), verb, depth + 1, key_iface);
                    self.buf.push(b':');
                    self.print_value_grow(v, verb, depth + 1, elem_iface);
                }
                self.buf.push(if self.f.sharp_v { b'}' } else { b']' });
            }
            Value::List(l) => {
                if matches!(verb, 's' | 'q' | 'x' | 'X') && is_byte_list(l) {
                    let bytes = list_bytes(l);
                    let t = l.type_of().to_string();
                    self.fmt_bytes(&bytes, verb, &t, l.is_nil(), value);
                    return;
                }
                let elem_iface = matches!(l.elem_type(), Type::Interface);
                if self.f.sharp_v {
                    let t = l.type_of().to_string();
                    self.buf.extend_from_slice(t.as_bytes());
                    if l.is_nil() {
                        self.buf.extend_from_slice(b"(nil)");
                        return;
                    }
                    self.buf.push(b'{');
                    for (i, item) in l.items().iter().enumerate() {
                        if i > 0 {
                            self.buf.extend_from_slice(b", ");
                        }
                        self.print_value_grow(item, verb, depth + 1, elem_iface);
                    }
                    self.buf.push(b'}');
                } else {
                    self.buf.push(b'[');
                    for (i, item) in l.items().iter().enumerate() {
                        if i > 0 {
                            self.buf.push(b' ');
                        }
                        self.print_value_grow(item, verb, depth + 1, elem_iface);
                    }
                    self.buf.push(b']');
                }
            }
            Value::Object(o) => self.print_object(o, value, verb, depth),
        }
    }

    fn print_value_grow(&mut self, value: &Value, verb: char, depth: usize, iface: bool) {
        crate::stack::grow(|| self.print_value(value, verb, depth, iface));
    }

    fn print_object(&mut self, o: &Obj, value: &Value, verb: char, depth: usize) {
        let is_ptr = o.kind_name() == "ptr";
        if is_ptr {
            if depth == 0 && o.fields().is_some() {
                self.buf.push(b'&');
                self.print_struct(o, verb, depth + 1, true);
                return;
            }
            self.fmt_pointer(value, verb);
            return;
        }
        self.print_struct(o, verb, depth, false);
    }

    fn print_struct(&mut self, o: &Obj, verb: char, depth: usize, deref: bool) {
        if self.f.sharp_v {
            let name = o.type_name();
            let bytes = name.as_bytes();
            let bytes = if deref && bytes.first() == Some(&b'*') {
                &bytes[1..]
            } else {
                bytes
            };
            self.buf.extend_from_slice(bytes);
        }
        self.buf.push(b'{');
        let fields = o.fields().unwrap_or_default();
        for (i, (name, v)) in fields.iter().enumerate() {
            if i > 0 {
                if self.f.sharp_v {
                    self.buf.extend_from_slice(b", ");
                } else {
                    self.buf.push(b' ');
                }
            }
            if self.f.plus_v || self.f.sharp_v {
                self.buf.extend_from_slice(name.as_bytes());
                self.buf.push(b':');
            }
            let iface = matches!(v, Value::Nil);
            self.print_value_grow(v, verb, depth + 1, iface);
        }
        self.buf.push(b'}');
    }

    fn arg_number(
        &mut self,
        arg_num: usize,
        format: &[u8],
        i: usize,
        num_args: usize,
    ) -> (usize, usize, bool) {
        if format.len() <= i || format[i] != b'[' {
            return (arg_num, i, false);
        }
        self.reordered = true;
        let (index, wid, ok) = parse_arg_number(&format[i..]);
        if ok && 0 <= index && (index as usize) < num_args {
            return (index as usize, i + wid, true);
        }
        self.good_arg_num = false;
        (arg_num, i + wid, ok)
    }

    fn do_printf(&mut self, format: &[u8], a: &[Value]) {
        let end = format.len();
        let mut arg_num = 0usize;
        let mut after_index;
        self.reordered = false;
        let mut i = 0;
        'format_loop: while i < end {
            if self.buf.len() > self.limit {
                return;
            }
            self.good_arg_num = true;
            let lasti = i;
            while i < end && format[i] != b'%' {
                i += 1;
            }
            if i > lasti {
                self.buf.extend_from_slice(&format[lasti..i]);
            }
            if i >= end {
                break;
            }
            i += 1;
            self.clear_flags();
            while i < end {
                let c = format[i];
                match c {
                    b'#' => self.f.sharp = true,
                    b'0' => self.f.zero = true,
                    b'+' => self.f.plus = true,
                    b'-' => self.f.minus = true,
                    b' ' => self.f.space = true,
                    _ => {
                        if c.is_ascii_lowercase() && arg_num < a.len() {
                            if c == b'v' || c == b'w' {
                                self.f.sharp_v = self.f.sharp;
                                self.f.sharp = false;
                                self.f.plus_v = self.f.plus;
                                self.f.plus = false;
                            }
                            self.print_arg(&a[arg_num], c as char);
                            arg_num += 1;
                            i += 1;
                            continue 'format_loop;
                        }
                        break;
                    }
                }
                i += 1;
            }

            (arg_num, i, after_index) = self.arg_number(arg_num, format, i, a.len());

            if i < end && format[i] == b'*' {
                i += 1;
                let (w, present, n) = int_from_arg(a, arg_num);
                arg_num = n;
                self.f.wid_present = present;
                if !present {
                    self.buf.extend_from_slice(b"%!(BADWIDTH)");
                }
                if w < 0 {
                    self.wid = w.unsigned_abs() as usize;
                    self.f.minus = true;
                    self.f.zero = false;
                } else {
                    self.wid = w as usize;
                }
                after_index = false;
            } else {
                let (w, present, ni) = parse_num(format, i, end);
                self.wid = w;
                self.f.wid_present = present;
                i = ni;
                if after_index && self.f.wid_present {
                    self.good_arg_num = false;
                }
            }

            if i + 1 < end && format[i] == b'.' {
                i += 1;
                if after_index {
                    self.good_arg_num = false;
                }
                (arg_num, i, after_index) = self.arg_number(arg_num, format, i, a.len());
                if i < end && format[i] == b'*' {
                    i += 1;
                    let (p, present, n) = int_from_arg(a, arg_num);
                    arg_num = n;
                    self.f.prec_present = present;
                    if p < 0 {
                        self.prec = 0;
                        self.f.prec_present = false;
                    } else {
                        self.prec = p as usize;
                    }
                    if !self.f.prec_present {
                        self.buf.extend_from_slice(b"%!(BADPREC)");
                    }
                    after_index = false;
                } else {
                    let (p, present, ni) = parse_num(format, i, end);
                    self.prec = p;
                    self.f.prec_present = present;
                    i = ni;
                    if !self.f.prec_present {
                        self.prec = 0;
                        self.f.prec_present = true;
                    }
                }
            }

            if !after_index {
                (arg_num, i, after_index) = self.arg_number(arg_num, format, i, a.len());
            }
            let _ = after_index;

            if i >= end {
                self.buf.extend_from_slice(b"%!(NOVERB)");
                break;
            }

            let (verb, size) = unicode::decode_rune(&format[i..]);
            i += size.max(1);
            let verb = char::from_u32(verb).unwrap_or('\u{FFFD}');

            if verb == '%' {
                self.buf.push(b'%');
            } else if !self.good_arg_num {
                self.buf.extend_from_slice(b"%!");
                self.write_rune(verb as u32);
                self.buf.extend_from_slice(b"(BADINDEX)");
            } else if arg_num >= a.len() {
                self.buf.extend_from_slice(b"%!");
                self.write_rune(verb as u32);
                self.buf.extend_from_slice(b"(MISSING)");
            } else {
                if verb == 'v' || verb == 'w' {
                    self.f.sharp_v = self.f.sharp;
                    self.f.sharp = false;
                    self.f.plus_v = self.f.plus;
                    self.f.plus = false;
                }
                self.print_arg(&a[arg_num], verb);
                arg_num += 1;
            }
        }

        if !self.reordered && arg_num < a.len() {
            self.clear_flags();
            self.buf.extend_from_slice(b"%!(EXTRA ");
            for (i, arg) in a[arg_num..].iter().enumerate() {
                if i > 0 {
                    self.buf.extend_from_slice(b", ");
                }
                if let Value::Nil = arg {
                    self.buf.extend_from_slice(b"<nil>");
                } else {
                    let t = arg.type_name();
                    self.buf.extend_from_slice(t.as_bytes());
                    self.buf.push(b'=');
                    self.print_arg(arg, 'v');
                }
            }
            self.buf.push(b')');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{IntKind, List, Map, Struct};

    fn s(v: Vec<u8>) -> String {
        String::from_utf8(v).expect("utf8")
    }

    fn pf(format: &str, args: &[Value]) -> String {
        s(sprintf(format.as_bytes(), args))
    }

    #[test]
    fn sprint_spacing() {
        let i = Value::int;
        assert_eq!(s(sprint(&[i(1), i(2)])), "1 2");
        assert_eq!(s(sprint(&["a".into(), "b".into()])), "ab");
        assert_eq!(s(sprint(&["a".into(), i(1), "b".into()])), "a1b");
        assert_eq!(s(sprint(&[i(1), "a".into(), i(2)])), "1a2");
        assert_eq!(s(sprint(&[Value::float(1.5), Value::Bool(true)])), "1.5 true");
        assert_eq!(s(sprintln(&["a".into(), i(1), Value::Bool(true)])), "a 1 true\n");
        assert_eq!(s(sprint(&[Value::Nil])), "<nil>");
    }

    #[test]
    fn containers() {
        let m = Map::string_interface([
            ("b", Value::int(1)),
            (
                "a",
                Value::List(List::interfaces(vec![Value::int(1), Value::int(2)])),
            ),
            ("c", Value::Map(Map::string_interface([("d", Value::Nil)]))),
        ]);
        assert_eq!(
            s(sprint_value(&Value::Map(m.clone()))),
            "map[a:[1 2] b:1 c:map[d:<nil>]]"
        );
        assert_eq!(
            pf("%#v", &[Value::Map(m)]),
            r#"map[string]interface {}{"a":[]interface {}{1, 2}, "b":1, "c":map[string]interface {}{"d":interface {}(nil)}}"#
        );
        let st = Value::Object(std::sync::Arc::new(Struct::new(
            "main.T",
            vec![("Name".into(), "a".into()), ("N".into(), Value::int(2))],
        )));
        assert_eq!(pf("%v", std::slice::from_ref(&st)), "{a 2}");
        assert_eq!(pf("%+v", std::slice::from_ref(&st)), "{Name:a N:2}");
        assert_eq!(pf("%#v", &[st]), r#"main.T{Name:"a", N:2}"#);
        let l = Value::List(List::interfaces(vec![Value::Nil, "x".into()]));
        assert_eq!(pf("%d", &[l]), "[<nil> %!d(string=x)]");
        assert_eq!(
            s(sprint_value(&Value::Map(Map::nil(Type::String, Type::String)))),
            "map[]"
        );
    }

    #[test]
    fn printf_verbs() {
        let i = Value::int;
        assert_eq!(pf("%s!", &["kalypso".into()]), "kalypso!");
        assert_eq!(pf("%q", &["quo\"te".into()]), r#""quo\"te""#);
        assert_eq!(pf("%x", &["hi".into()]), "6869");
        assert_eq!(pf("%x %X %o %b", &[i(255), i(255), i(8), i(5)]), "ff FF 10 101");
        assert_eq!(pf("%5.2f", &[Value::float(1.23456)]), " 1.23");
        assert_eq!(pf("%f", &[Value::float(2.5)]), "2.500000");
        assert_eq!(
            pf(
                "%T %T %T %T",
                &["s".into(), i(1), Value::float(1.5), Value::Bool(false)]
            ),
            "string int float64 bool"
        );
        assert_eq!(pf("%c %U %q", &[i(65), i(0x1F680), i(65)]), "A U+1F680 'A'");
        assert_eq!(pf("100%%", &[]), "100%");
        assert_eq!(pf("%05d|%+d|%-5d|", &[i(42), i(42), i(42)]), "00042|+42|42   |");
        assert_eq!(pf("%s", &["one".into(), "two".into()]), "one%!(EXTRA string=two)");
        assert_eq!(pf("%6.2f", &[i(3)]), "%!f(int=    03)");
        assert_eq!(pf("[%*d]", &[i(5), i(42)]), "[   42]");
        assert_eq!(pf("%v", &[Value::Nil]), "<nil>");
        assert_eq!(pf("%d", &[Value::Nil]), "%!d(<nil>)");
        assert_eq!(pf("%x", &[i(-255)]), "-ff");
        assert_eq!(pf("[%8.3s]", &["abcdef".into()]), "[     abc]");
        assert_eq!(pf("%#x %#o %#b", &[i(255), i(8), i(5)]), "0xff 010 0b101");
        assert_eq!(pf("%E", &[Value::float(0.00012)]), "1.200000E-04");
        assert_eq!(pf("%G", &[Value::float(1e21)]), "1E+21");
        assert_eq!(
            pf("%v %v", &[Value::float(1e21), Value::float(0.000001)]),
            "1e+21 1e-06"
        );
        assert_eq!(pf("%[2]s %[1]s", &["a".into(), "b".into()]), "b a");
        assert_eq!(pf("%d", &[]), "%!d(MISSING)");
        assert_eq!(pf("%[3]d", &[i(1)]), "%!d(BADINDEX)");
        assert_eq!(pf("%", &[]), "%!(NOVERB)");
        assert_eq!(pf("%!", &[i(1)]), "%!!(int=1)");
        assert_eq!(pf("%.1f", &[i(3)]), "%!f(int=3)");
        assert_eq!(pf("%v", &[Value::Complex(0.0, 1.0)]), "(0+1i)");
        assert_eq!(
            pf("%t %v", &[Value::Bool(true), Value::Int(-3, IntKind::Int8)]),
            "true -3"
        );
        assert_eq!(
            pf("%#v %#v", &[Value::Uint(7, UintKind::Uint), "s".into()]),
            "0x7 \"s\""
        );
        assert_eq!(
            pf(
                "%08.3f|%-8.3f|%+.2e",
                &[
                    Value::float(-1.23456),
                    Value::float(1.23456),
                    Value::float(12345.678)
                ]
            ),
            "-001.235|1.235   |+1.23e+04"
        );
        assert_eq!(
            pf(
                "%#g %#.3g %#v",
                &[Value::float(1.0), Value::float(2.0), Value::float(3.0)]
            ),
            "1.00000 2.00 3"
        );
        assert_eq!(pf("%06s|%-06s|", &["ab".into(), "ab".into()]), "0000ab|ab    |");
        assert_eq!(pf("% x|%# x", &["hi".into(), "hi".into()]), "68 69|0x68 0x69");
        assert_eq!(pf("%.0d|%5.0d|", &[i(0), i(0)]), "|     |");
        assert_eq!(pf("%w", &[i(1)]), "%!w(int=1)");
        assert_eq!(pf("%s", &[Value::List(List::strings(["a", "b"]))]), "[a b]");
        assert_eq!(
            pf(
                "%x",
                &[Value::List(List::new(
                    Type::Uint(UintKind::Uint8),
                    vec![Value::Uint(1, UintKind::Uint8), Value::Uint(255, UintKind::Uint8)]
                ))]
            ),
            "01ff"
        );
    }
}
