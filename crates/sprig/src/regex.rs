//! Sprig's regular-expression functions (`regex.go`) with Go's RE2 syntax and semantics.
//!
//! Patterns are parsed with Go's `regexp/syntax` rules (so invalid patterns fail with Go's
//! `error parsing regexp: ...` texts, and what Go accepts is accepted) and translated into an
//! equivalent pattern for Rust's `regex` crate, which implements the same leftmost-first RE2
//! semantics. The translation pins down the differences: Go's `\d`, `\s`, `\w` and `\b` are
//! ASCII-only, a `{` that does not start a valid repeat is a literal, `\Q...\E` and octal
//! escapes exist, and the `x` flag and class set operations (`[a&&b]`) do not. Matching loops
//! (`FindAll`, `ReplaceAll`, `Split`) follow Go's handling of empty matches.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kalypso_gotmpl::{FuncError, FuncMap, FuncResult, List, Type, Value};
use regex::bytes::{Regex, RegexBuilder};

use crate::util::{
    arg_bytes, arg_int, can_backquote, decode_rune, func, go_quote, is_digit, is_letter, register,
    string_value, strings_value,
};

/// A compiled Go regular expression.
#[derive(Debug)]
pub(crate) struct GoRegex {
    regex: Regex,
    /// Go's `SubexpNames`: "" for the whole match and unnamed groups.
    names: Vec<Option<String>>,
    /// The original pattern is non-empty (Go's `Split` treats empty input differently then).
    has_expr: bool,
}

/// A Go syntax error: the error code text and the offending expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    code: &'static str,
    expr: String,
}

impl SyntaxError {
    fn new(code: &'static str, expr: impl Into<String>) -> SyntaxError {
        SyntaxError {
            code,
            expr: expr.into(),
        }
    }

    /// Go's `(*syntax.Error).Error()`.
    pub(crate) fn message(&self) -> String {
        format!("error parsing regexp: {}: `{}`", self.code, self.expr)
    }
}

const MISSING_BRACKET: &str = "missing closing ]";
const MISSING_PAREN: &str = "missing closing )";
const UNEXPECTED_PAREN: &str = "unexpected )";
const MISSING_REPEAT_ARG: &str = "missing argument to repetition operator";
const INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const INVALID_ESCAPE: &str = "invalid escape sequence";
const INVALID_CHAR_RANGE: &str = "invalid character class range";
const INVALID_NAMED_CAPTURE: &str = "invalid named capture";
const INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";
const INVALID_UTF8: &str = "invalid UTF-8";
const TOO_LARGE: &str = "expression too large";

/// What precedes the current position, for Go's repetition checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prev {
    /// Start of the expression, a group, or an alternative.
    Nothing,
    /// An operand.
    Operand,
    /// A repetition operator that started at this byte offset of the pattern.
    Repeat(usize),
}

/// Translates Go regexp syntax into Rust `regex` syntax.
struct Translator<'a> {
    src: &'a str,
    pos: usize,
    out: String,
    prev: Prev,
    names: Vec<Option<String>>,
}

fn push_literal(out: &mut String, c: char) {
    if c.is_ascii_alphanumeric() || (!c.is_ascii() && !c.is_whitespace()) {
        out.push(c);
    } else {
        out.push_str(&format!("\\x{{{:X}}}", c as u32));
    }
}

fn perl_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        's' => "[\\t\\n\\f\\r ]",
        'S' => "[^\\t\\n\\f\\r ]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        _ => return None,
    })
}

const POSIX_CLASSES: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "word", "xdigit",
];

const GENERAL_CATEGORIES: &[&str] = &[
    "C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd", "Nl",
    "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl", "Zp", "Zs",
    "Any",
];

/// Long names Rust accepts but Go does not.
const RUST_ONLY_NAMES: &[&str] = &[
    "Letter",
    "Mark",
    "Number",
    "Punctuation",
    "Symbol",
    "Separator",
    "Other",
    "Control",
    "Format",
    "Unassigned",
    "Surrogate",
    "Assigned",
    "ASCII",
    "Alphabetic",
    "Lowercase",
    "Uppercase",
    "White_Space",
    "Whitespace",
    "Emoji",
    "Digit",
    "Decimal_Number",
];

fn unicode_name_ok(name: &str) -> bool {
    if GENERAL_CATEGORIES.contains(&name) {
        return true;
    }
    if RUST_ONLY_NAMES.contains(&name) || name.contains('=') || name.contains(':') {
        return false;
    }
    let mut chars = name.chars();
    let first_upper = chars.next().is_some_and(|c| c.is_ascii_uppercase());
    first_upper
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && regex::Regex::new(&format!("\\p{{{name}}}")).is_ok()
}

impl<'a> Translator<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn translate(mut self) -> Result<(String, Vec<Option<String>>), SyntaxError> {
        let mut group_stack: Vec<usize> = Vec::new();
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '(' => {
                    if group_stack.len() >= 1000 {
                        return Err(SyntaxError::new("expression nests too deeply", self.src));
                    }
                    self.group(&mut group_stack)?;
                }
                ')' => {
                    self.pos += 1;
                    if group_stack.pop().is_none() {
                        return Err(SyntaxError::new(UNEXPECTED_PAREN, self.src));
                    }
                    self.out.push(')');
                    self.prev = Prev::Operand;
                }
                '|' => {
                    self.pos += 1;
                    self.out.push('|');
                    self.prev = Prev::Nothing;
                }
                '^' | '$' | '.' => {
                    self.pos += 1;
                    self.out.push(c);
                    self.prev = Prev::Operand;
                }
                '*' | '+' | '?' => {
                    self.pos += 1;
                    let mut op = c.to_string();
                    if self.peek() == Some('?') {
                        self.pos += 1;
                        op.push('?');
                    }
                    self.repeat(start, &op)?;
                }
                '{' => match self.parse_repeat() {
                    Some(Ok((min, max))) => {
                        let mut op = match max {
                            Some(m) if m == min => format!("{{{min}}}"),
                            Some(m) => format!("{{{min},{m}}}"),
                            None => format!("{{{min},}}"),
                        };
                        if self.peek() == Some('?') {
                            self.pos += 1;
                            op.push('?');
                        }
                        self.repeat(start, &op)?;
                    }
                    Some(Err(e)) => return Err(e),
                    None => {
                        self.pos += 1;
                        push_literal(&mut self.out, '{');
                        self.prev = Prev::Operand;
                    }
                },
                '[' => {
                    self.class()?;
                    self.prev = Prev::Operand;
                }
                '\\' => self.escape()?,
                _ => {
                    self.pos += c.len_utf8();
                    push_literal(&mut self.out, c);
                    self.prev = Prev::Operand;
                }
            }
        }
        if !group_stack.is_empty() {
            return Err(SyntaxError::new(MISSING_PAREN, self.src));
        }
        Ok((self.out, self.names))
    }

    fn repeat(&mut self, start: usize, op: &str) -> Result<(), SyntaxError> {
        match self.prev {
            Prev::Nothing => {
                return Err(SyntaxError::new(MISSING_REPEAT_ARG, &self.src[start..self.pos]));
            }
            Prev::Repeat(first) => {
                return Err(SyntaxError::new(INVALID_REPEAT_OP, &self.src[first..self.pos]));
            }
            Prev::Operand => {}
        }
        self.out.push_str(op);
        self.prev = Prev::Repeat(start);
        Ok(())
    }

    /// Go's `parseRepeat` at a `{`: `None` if this is not repeat syntax (a literal `{`).
    fn parse_repeat(&mut self) -> Option<Result<(u32, Option<u32>), SyntaxError>> {
        let rest = self.rest();
        let bytes = rest.as_bytes();
        let mut i = 1;
        let parse_int = |i: &mut usize| -> Option<i64> {
            let start = *i;
            while *i < bytes.len() && bytes[*i].is_ascii_digit() {
                *i += 1;
            }
            if *i == start {
                return None;
            }
            let digits = &rest[start..*i];
            if digits.len() >= 2 && digits.starts_with('0') {
                return None;
            }
            if digits.len() > 8 {
                return Some(-1);
            }
            digits.parse().ok()
        };
        let min = parse_int(&mut i)?;
        let max;
        if i < bytes.len() && bytes[i] == b',' {
            i += 1;
            if i < bytes.len() && bytes[i] == b'}' {
                max = None;
            } else {
                max = Some(parse_int(&mut i)?);
            }
        } else {
            max = Some(min);
        }
        if i >= bytes.len() || bytes[i] != b'}' {
            return None;
        }
        i += 1;
        let text = &rest[..i];
        self.pos += i;
        if !(0..=1000).contains(&min) || max.is_some_and(|m| !(0..=1000).contains(&m) || m < min) {
            return Some(Err(SyntaxError::new(INVALID_REPEAT_SIZE, text)));
        }
        Some(Ok((min as u32, max.map(|m| m as u32))))
    }

    fn group(&mut self, stack: &mut Vec<usize>) -> Result<(), SyntaxError> {
        let start = self.pos;
        let rest = self.rest();
        if !rest.starts_with("(?") {
            self.pos += 1;
            stack.push(start);
            self.names.push(None);
            self.out.push('(');
            self.prev = Prev::Nothing;
            return Ok(());
        }
        let starts_with_p = rest.len() > 4 && rest.as_bytes()[2] == b'P' && rest.as_bytes()[3] == b'<';
        let starts_with_name = rest.len() > 3 && rest.as_bytes()[2] == b'<';
        if starts_with_p || starts_with_name {
            let name_start = if starts_with_p { 4 } else { 3 };
            let Some(end) = rest.find('>') else {
                return Err(SyntaxError::new(INVALID_NAMED_CAPTURE, rest));
            };
            let capture = &rest[..=end];
            let name = &rest[name_start..end];
            let valid = !name.is_empty() && name.chars().all(|c| c == '_' || is_letter(c) || is_digit(c));
            if !valid || self.names.iter().any(|n| n.as_deref() == Some(name)) {
                return Err(SyntaxError::new(INVALID_NAMED_CAPTURE, capture));
            }
            self.pos += end + 1;
            stack.push(start);
            self.names.push(Some(name.to_owned()));
            self.out.push_str(&format!("(?P<{name}>"));
            self.prev = Prev::Nothing;
            return Ok(());
        }
        // Flags, optionally opening a non-capturing group.
        let mut i = 2;
        let mut negated = false;
        let mut saw_flag = false;
        let mut flags = String::new();
        for c in rest[2..].chars() {
            i += c.len_utf8();
            match c {
                'i' | 'm' | 's' | 'U' => {
                    flags.push(c);
                    saw_flag = true;
                }
                '-' => {
                    if negated {
                        break;
                    }
                    negated = true;
                    flags.push('-');
                    saw_flag = false;
                }
                ':' | ')' => {
                    if negated && !saw_flag {
                        break;
                    }
                    self.pos += i;
                    if c == ':' {
                        stack.push(start);
                        self.out.push_str(&format!("(?{flags}:"));
                        self.prev = Prev::Nothing;
                    } else {
                        if !flags.is_empty() {
                            self.out.push_str(&format!("(?{flags})"));
                        }
                        // Go pushes no operand for a flag group; a repetition right after it
                        // is an error here.
                        self.prev = Prev::Nothing;
                    }
                    return Ok(());
                }
                _ => break,
            }
        }
        Err(SyntaxError::new(INVALID_PERL_OP, &rest[..i.min(rest.len())]))
    }

    /// Go's `parseEscape` for a single-rune escape (after the backslash), shared by classes.
    fn escape_rune(&mut self, start: usize) -> Result<char, SyntaxError> {
        let Some(c) = self.bump() else {
            return Err(SyntaxError::new(TRAILING_BACKSLASH, ""));
        };
        let invalid = |t: &Translator<'_>| SyntaxError::new(INVALID_ESCAPE, &t.src[start..t.pos]);
        match c {
            '1'..='7' | '0' => {
                if c != '0' && !matches!(self.peek(), Some('0'..='7')) {
                    return Err(invalid(self));
                }
                let mut r = c as u32 - '0' as u32;
                for _ in 1..3 {
                    match self.peek() {
                        Some(d @ '0'..='7') => {
                            self.pos += 1;
                            r = r * 8 + (d as u32 - '0' as u32);
                        }
                        _ => break,
                    }
                }
                Ok(char::from_u32(r).unwrap_or('\0'))
            }
            'x' => {
                if self.peek() == Some('{') {
                    self.pos += 1;
                    let mut v: u32 = 0;
                    let mut n = 0;
                    loop {
                        match self.bump() {
                            Some('}') if n > 0 => break,
                            Some(h) if h.is_ascii_hexdigit() => {
                                n += 1;
                                v = v.saturating_mul(16).saturating_add(h.to_digit(16).unwrap_or(0));
                                if v > 0x10FFFF {
                                    return Err(invalid(self));
                                }
                            }
                            _ => return Err(invalid(self)),
                        }
                    }
                    return char::from_u32(v).ok_or_else(|| invalid(self));
                }
                let mut v = 0;
                for _ in 0..2 {
                    match self.bump() {
                        Some(h) if h.is_ascii_hexdigit() => v = v * 16 + h.to_digit(16).unwrap_or(0),
                        _ => return Err(invalid(self)),
                    }
                }
                char::from_u32(v).ok_or_else(|| invalid(self))
            }
            'a' => Ok('\x07'),
            'f' => Ok('\x0c'),
            'n' => Ok('\n'),
            'r' => Ok('\r'),
            't' => Ok('\t'),
            'v' => Ok('\x0b'),
            c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok(c),
            _ => Err(invalid(self)),
        }
    }

    /// `\p{Name}`, `\pL`, `\P...` (the backslash and `p`/`P` already consumed). Returns the
    /// Rust class text.
    fn unicode_class(&mut self, start: usize, negated: bool) -> Result<String, SyntaxError> {
        let name = match self.bump() {
            Some('{') => {
                let rest = self.rest();
                let Some(end) = rest.find('}') else {
                    return Err(SyntaxError::new(INVALID_CHAR_RANGE, &self.src[start..]));
                };
                let name = rest[..end].to_owned();
                self.pos += end + 1;
                name
            }
            Some(c) => c.to_string(),
            None => return Err(SyntaxError::new(INVALID_CHAR_RANGE, &self.src[start..])),
        };
        let (negated, bare) = match name.strip_prefix('^') {
            Some(n) => (!negated, n.to_owned()),
            None => (negated, name.clone()),
        };
        if !unicode_name_ok(&bare) {
            return Err(SyntaxError::new(INVALID_CHAR_RANGE, &self.src[start..self.pos]));
        }
        Ok(format!("\\{}{{{bare}}}", if negated { 'P' } else { 'p' }))
    }

    fn escape(&mut self) -> Result<(), SyntaxError> {
        let start = self.pos;
        self.pos += 1; // backslash
        let Some(c) = self.peek() else {
            return Err(SyntaxError::new(TRAILING_BACKSLASH, ""));
        };
        match c {
            'A' => {
                self.pos += 1;
                self.out.push_str("\\A");
            }
            'z' => {
                self.pos += 1;
                self.out.push_str("\\z");
            }
            'b' => {
                self.pos += 1;
                self.out.push_str("(?-u:\\b)");
            }
            'B' => {
                self.pos += 1;
                self.out.push_str("(?-u:\\B)");
            }
            'Q' => {
                self.pos += 1;
                let rest = self.rest();
                let (lit, skip) = match rest.find("\\E") {
                    Some(end) => (&rest[..end], end + 2),
                    None => (rest, rest.len()),
                };
                self.pos += skip;
                for ch in lit.chars() {
                    push_literal(&mut self.out, ch);
                    self.prev = Prev::Operand;
                }
                return Ok(());
            }
            'p' | 'P' => {
                self.pos += 1;
                let class = self.unicode_class(start, c == 'P')?;
                self.out.push_str(&class);
            }
            'd' | 'D' | 's' | 'S' | 'w' | 'W' => {
                self.pos += 1;
                self.out.push_str(perl_class(c).unwrap_or(""));
            }
            _ => {
                let r = self.escape_rune(start)?;
                push_literal(&mut self.out, r);
            }
        }
        self.prev = Prev::Operand;
        Ok(())
    }

    /// A bracketed class, emitted with every literal escaped so that Rust's class syntax
    /// extensions (nested classes, `&&`, `--`, `~~`) never apply.
    fn class(&mut self) -> Result<(), SyntaxError> {
        let class_start = self.pos;
        self.pos += 1; // [
        let mut out = String::from("[");
        if self.peek() == Some('^') {
            self.pos += 1;
            out.push('^');
        }
        let mut first = true;
        let missing = |t: &Translator<'_>| SyntaxError::new(MISSING_BRACKET, &t.src[class_start..]);
        loop {
            let rest = self.rest();
            if rest.is_empty() {
                return Err(missing(self));
            }
            if rest.starts_with(']') && !first {
                self.pos += 1;
                break;
            }
            first = false;
            if rest.starts_with("[:")
                && let Some(end) = rest[2..].find(":]")
            {
                let name = &rest[2..2 + end];
                let text = &rest[..end + 4];
                let bare = name.strip_prefix('^').unwrap_or(name);
                if !POSIX_CLASSES.contains(&bare) {
                    return Err(SyntaxError::new(INVALID_CHAR_RANGE, text));
                }
                out.push_str(text);
                self.pos += text.len();
                continue;
            }
            let item_start = self.pos;
            if rest.starts_with("\\p") || rest.starts_with("\\P") {
                let negated = rest.as_bytes()[1] == b'P';
                self.pos += 2;
                let class = self.unicode_class(item_start, negated)?;
                out.push_str(&class);
                continue;
            }
            if rest.len() >= 2
                && rest.as_bytes()[0] == b'\\'
                && let Some(p) = perl_class(char::from(rest.as_bytes()[1]))
            {
                self.pos += 2;
                out.push_str(p);
                continue;
            }
            let lo = self.class_char(class_start)?;
            let mut hi = lo;
            let rest = self.rest();
            if rest.len() >= 2 && rest.starts_with('-') && !rest[1..].starts_with(']') {
                self.pos += 1;
                hi = self.class_char(class_start)?;
                if hi < lo {
                    return Err(SyntaxError::new(
                        INVALID_CHAR_RANGE,
                        &self.src[item_start..self.pos],
                    ));
                }
            }
            out.push_str(&format!("\\x{{{:X}}}", lo as u32));
            if hi != lo {
                out.push_str(&format!("-\\x{{{:X}}}", hi as u32));
            }
        }
        out.push(']');
        self.out.push_str(&out);
        Ok(())
    }

    fn class_char(&mut self, class_start: usize) -> Result<char, SyntaxError> {
        let start = self.pos;
        match self.peek() {
            None => Err(SyntaxError::new(MISSING_BRACKET, &self.src[class_start..])),
            Some('\\') => {
                self.pos += 1;
                self.escape_rune(start)
            }
            Some(c) => {
                self.pos += c.len_utf8();
                Ok(c)
            }
        }
    }
}

/// Compiled patterns by source, so templates that call a regex function in a loop do not
/// recompile (Go compiles each time; the result is the same).
type RegexCache = Mutex<HashMap<Vec<u8>, Result<Arc<GoRegex>, SyntaxError>>>;

/// Go's `regexp.Compile`.
pub(crate) fn compile(pattern: &[u8]) -> Result<Arc<GoRegex>, SyntaxError> {
    static CACHE: OnceLock<RegexCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(pattern) {
        return hit.clone();
    }
    let result = compile_uncached(pattern);
    let mut guard = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if guard.len() > 512 {
        guard.clear();
    }
    guard.insert(pattern.to_vec(), result.clone());
    result
}

fn compile_uncached(pattern: &[u8]) -> Result<Arc<GoRegex>, SyntaxError> {
    let src = match std::str::from_utf8(pattern) {
        Ok(s) => s,
        Err(e) => {
            let bad = &pattern[e.valid_up_to()..];
            return Err(SyntaxError::new(
                INVALID_UTF8,
                String::from_utf8_lossy(bad).into_owned(),
            ));
        }
    };
    let translator = Translator {
        src,
        pos: 0,
        out: String::new(),
        prev: Prev::Nothing,
        names: Vec::new(),
    };
    let (rust_pattern, names) = translator.translate()?;
    let regex = RegexBuilder::new(&rust_pattern)
        .size_limit(64 << 20)
        .build()
        .map_err(|_| SyntaxError::new(TOO_LARGE, src))?;
    let mut all_names = vec![None];
    all_names.extend(names);
    Ok(Arc::new(GoRegex {
        regex,
        names: all_names,
        has_expr: !pattern.is_empty(),
    }))
}

impl GoRegex {
    /// Go's `FindAllIndex`/`FindAllSubmatchIndex` loop: at most `n` matches (`n < 0`: all),
    /// an empty match right after the previous match is skipped.
    fn find_all(&self, s: &[u8], n: i64) -> Vec<(usize, usize)> {
        let limit = if n < 0 { s.len() as i64 + 1 } else { n };
        let mut out = Vec::new();
        let mut pos = 0usize;
        let mut prev_match_end: Option<usize> = None;
        while (out.len() as i64) < limit && pos <= s.len() {
            let Some(m) = self.regex.find_at(s, pos) else {
                break;
            };
            let (start, end) = (m.start(), m.end());
            let mut accept = true;
            if end == pos {
                // An empty match: not allowed right after the previous match.
                if Some(start) == prev_match_end {
                    accept = false;
                }
                let (_, width) = decode_rune(&s[pos..]);
                pos = if width > 0 { pos + width } else { s.len() + 1 };
            } else {
                pos = end;
            }
            prev_match_end = Some(end);
            if accept {
                out.push((start, end));
            }
        }
        out
    }

    /// Go's `FindSubmatch`: the match and every group (`None` for groups that did not
    /// participate).
    pub(crate) fn submatch<'h>(&self, s: &'h [u8]) -> Option<Vec<Option<&'h [u8]>>> {
        let caps = self.regex.captures(s)?;
        Some(
            (0..caps.len())
                .map(|i| caps.get(i).map(|m| m.as_bytes()))
                .collect(),
        )
    }

    /// Go's `FindAllSubmatch(s, -1)`.
    pub(crate) fn all_submatches<'h>(&self, s: &'h [u8]) -> Vec<Vec<Option<&'h [u8]>>> {
        self.find_all(s, -1)
            .into_iter()
            .filter_map(|(start, _)| {
                let caps = self.regex.captures_at(s, start)?;
                Some(
                    (0..caps.len())
                        .map(|i| caps.get(i).map(|m| m.as_bytes()))
                        .collect(),
                )
            })
            .collect()
    }

    /// Go's `MatchString`.
    pub(crate) fn is_match(&self, s: &[u8]) -> bool {
        self.regex.is_match(s)
    }

    fn find(&self, s: &[u8]) -> Option<(usize, usize)> {
        self.regex.find(s).map(|m| (m.start(), m.end()))
    }

    /// Go's `ReplaceAll` loop; `expand` writes the replacement for one match.
    fn replace_all(
        &self,
        src: &[u8],
        mut expand: impl FnMut(&mut Vec<u8>, &regex::bytes::Captures<'_>),
    ) -> Vec<u8> {
        let mut buf = Vec::with_capacity(src.len());
        let mut last_match_end = 0usize;
        let mut search_pos = 0usize;
        while search_pos <= src.len() {
            let Some(caps) = self.regex.captures_at(src, search_pos) else {
                break;
            };
            let Some(m) = caps.get(0) else { break };
            let (a0, a1) = (m.start(), m.end());
            buf.extend_from_slice(&src[last_match_end..a0]);
            if a1 > last_match_end || a0 == 0 {
                expand(&mut buf, &caps);
            }
            last_match_end = a1;
            let (_, width) = decode_rune(&src[search_pos.min(src.len())..]);
            if search_pos + width > a1 {
                search_pos += width;
            } else if search_pos + 1 > a1 {
                search_pos += 1;
            } else {
                search_pos = a1;
            }
        }
        buf.extend_from_slice(&src[last_match_end..]);
        buf
    }

    /// Go's `Regexp.Expand` of a `$name`/`${name}` template.
    fn expand(&self, dst: &mut Vec<u8>, template: &[u8], caps: &regex::bytes::Captures<'_>) {
        let mut t = template;
        while let Some(i) = t.iter().position(|&b| b == b'$') {
            dst.extend_from_slice(&t[..i]);
            t = &t[i + 1..];
            if t.first() == Some(&b'$') {
                dst.push(b'$');
                t = &t[1..];
                continue;
            }
            let Some((name, num, rest)) = extract(t) else {
                dst.push(b'$');
                continue;
            };
            t = rest;
            let group = match num {
                Some(n) => caps.get(n),
                None => self
                    .names
                    .iter()
                    .position(|n| n.as_deref().map(str::as_bytes) == Some(name))
                    .and_then(|i| caps.get(i)),
            };
            if let Some(g) = group {
                dst.extend_from_slice(g.as_bytes());
            }
        }
        dst.extend_from_slice(t);
    }

    /// Go's `Split`.
    fn split(&self, s: &[u8], n: i64) -> Option<Vec<Vec<u8>>> {
        if n == 0 {
            return None;
        }
        if self.has_expr && s.is_empty() {
            return Some(vec![Vec::new()]);
        }
        let matches = self.find_all(s, n);
        let mut out = Vec::new();
        let (mut beg, mut end) = (0usize, 0usize);
        for (m0, m1) in matches {
            if n > 0 && out.len() as i64 == n - 1 {
                break;
            }
            end = m0;
            if m1 != 0 {
                out.push(s[beg..end].to_vec());
            }
            beg = m1;
        }
        if end != s.len() {
            out.push(s[beg..].to_vec());
        }
        Some(out)
    }
}

/// Go's `extract` for `Expand`: the group name or number after `$`, and the rest.
fn extract(s: &[u8]) -> Option<(&[u8], Option<usize>, &[u8])> {
    let mut s = s;
    if s.is_empty() {
        return None;
    }
    let brace = s[0] == b'{';
    if brace {
        s = &s[1..];
    }
    let mut i = 0;
    while i < s.len() {
        let (r, w) = decode_rune(&s[i..]);
        if !is_letter(r) && !is_digit(r) && r != '_' {
            break;
        }
        i += w;
    }
    if i == 0 {
        return None;
    }
    let name = &s[..i];
    if brace {
        if i >= s.len() || s[i] != b'}' {
            return None;
        }
        i += 1;
    }
    let mut num: Option<usize> = Some(0);
    for &b in name {
        match num {
            Some(n) if b.is_ascii_digit() && n < 100_000_000 => {
                num = Some(n * 10 + usize::from(b - b'0'));
            }
            _ => {
                num = None;
                break;
            }
        }
    }
    if name[0] == b'0' && name.len() > 1 {
        num = None;
    }
    Some((name, num, &s[i..]))
}

/// The panic text of Go's `regexp.MustCompile`.
fn must_compile_panic(pattern: &[u8], err: &SyntaxError) -> FuncError {
    let quoted = if can_backquote(pattern) {
        format!("`{}`", String::from_utf8_lossy(pattern))
    } else {
        go_quote(pattern)
    };
    FuncError::new(format!("regexp: Compile({quoted}): {}", err.message()))
}

/// Compiles for a `must*` function (the error is returned) or a plain one (Go's
/// `MustCompile` panics).
fn compile_for(pattern: &[u8], must: bool) -> Result<Arc<GoRegex>, FuncError> {
    compile(pattern).map_err(|e| {
        if must {
            FuncError::new(e.message())
        } else {
            must_compile_panic(pattern, &e)
        }
    })
}

fn string_list_or_nil(items: Vec<Vec<u8>>) -> Value {
    if items.is_empty() {
        Value::List(List::nil(Type::String))
    } else {
        strings_value(items)
    }
}

fn find_all(a: &[Value], must: bool) -> FuncResult {
    let re = compile_for(arg_bytes(a, 0), must)?;
    let s = arg_bytes(a, 1);
    let items = re
        .find_all(s, arg_int(a, 2))
        .into_iter()
        .map(|(x, y)| s[x..y].to_vec())
        .collect();
    Ok(string_list_or_nil(items))
}

fn replace_all(a: &[Value], must: bool, literal: bool) -> FuncResult {
    let re = compile_for(arg_bytes(a, 0), must)?;
    let (s, repl) = (arg_bytes(a, 1), arg_bytes(a, 2));
    let out = if literal {
        re.replace_all(s, |dst, _| dst.extend_from_slice(repl))
    } else {
        re.replace_all(s, |dst, caps| re.expand(dst, repl, caps))
    };
    Ok(string_value(out))
}

fn split(a: &[Value], must: bool) -> FuncResult {
    let re = compile_for(arg_bytes(a, 0), must)?;
    Ok(match re.split(arg_bytes(a, 1), arg_int(a, 2)) {
        Some(parts) => strings_value(parts),
        None => Value::List(List::nil(Type::String)),
    })
}

/// Go's `regexp.QuoteMeta`.
fn quote_meta(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 2);
    for &b in s {
        if br"\.+*?()|[]{}^$".contains(&b) {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// Registers the regex functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || Type::String;
    register(
        m,
        &["regexMatch"],
        func(vec![s(), s()], |a| {
            Ok(Value::Bool(match compile(arg_bytes(a, 0)) {
                Ok(re) => re.find(arg_bytes(a, 1)).is_some(),
                Err(_) => false,
            }))
        }),
    );
    register(
        m,
        &["mustRegexMatch"],
        func(vec![s(), s()], |a| {
            let re = compile_for(arg_bytes(a, 0), true)?;
            Ok(Value::Bool(re.find(arg_bytes(a, 1)).is_some()))
        }),
    );
    register(
        m,
        &["regexFindAll"],
        func(vec![s(), s(), Type::INT], |a| find_all(a, false)),
    );
    register(
        m,
        &["mustRegexFindAll"],
        func(vec![s(), s(), Type::INT], |a| find_all(a, true)),
    );
    for (name, must) in [("regexFind", false), ("mustRegexFind", true)] {
        register(
            m,
            &[name],
            func(vec![s(), s()], move |a| {
                let re = compile_for(arg_bytes(a, 0), must)?;
                let text = arg_bytes(a, 1);
                Ok(string_value(
                    re.find(text)
                        .map(|(x, y)| text[x..y].to_vec())
                        .unwrap_or_default(),
                ))
            }),
        );
    }
    register(
        m,
        &["regexReplaceAll"],
        func(vec![s(), s(), s()], |a| replace_all(a, false, false)),
    );
    register(
        m,
        &["mustRegexReplaceAll"],
        func(vec![s(), s(), s()], |a| replace_all(a, true, false)),
    );
    register(
        m,
        &["regexReplaceAllLiteral"],
        func(vec![s(), s(), s()], |a| replace_all(a, false, true)),
    );
    register(
        m,
        &["mustRegexReplaceAllLiteral"],
        func(vec![s(), s(), s()], |a| replace_all(a, true, true)),
    );
    register(
        m,
        &["regexSplit"],
        func(vec![s(), s(), Type::INT], |a| split(a, false)),
    );
    register(
        m,
        &["mustRegexSplit"],
        func(vec![s(), s(), Type::INT], |a| split(a, true)),
    );
    register(
        m,
        &["regexQuoteMeta"],
        func(vec![s()], |a| Ok(string_value(quote_meta(arg_bytes(a, 0))))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(p: &str) -> String {
        compile(p.as_bytes()).unwrap_err().message()
    }

    fn find_all_str(p: &str, s: &str, n: i64) -> Vec<String> {
        let re = compile(p.as_bytes()).unwrap();
        re.find_all(s.as_bytes(), n)
            .into_iter()
            .map(|(a, b)| s[a..b].to_owned())
            .collect()
    }

    #[test]
    fn go_syntax_errors() {
        assert_eq!(err("["), "error parsing regexp: missing closing ]: `[`");
        assert_eq!(err("a[bc"), "error parsing regexp: missing closing ]: `[bc`");
        assert_eq!(err("(a"), "error parsing regexp: missing closing ): `(a`");
        assert_eq!(err("a)"), "error parsing regexp: unexpected ): `a)`");
        assert_eq!(
            err("*a"),
            "error parsing regexp: missing argument to repetition operator: `*`"
        );
        assert_eq!(
            err("a**"),
            "error parsing regexp: invalid nested repetition operator: `**`"
        );
        assert_eq!(err("\\y"), "error parsing regexp: invalid escape sequence: `\\y`");
        assert_eq!(
            err("[z-a]"),
            "error parsing regexp: invalid character class range: `z-a`"
        );
        assert_eq!(
            err("a{1001}"),
            "error parsing regexp: invalid repeat count: `{1001}`"
        );
        assert_eq!(
            err("(?x)a"),
            "error parsing regexp: invalid or unsupported Perl syntax: `(?x`"
        );
        assert_eq!(
            err("a\\"),
            "error parsing regexp: trailing backslash at end of expression: ``"
        );
        assert_eq!(err("\\1"), "error parsing regexp: invalid escape sequence: `\\1`");
    }

    #[test]
    fn go_semantics() {
        assert!(compile(b"a{").is_ok());
        assert!(compile(b"x{,2}").unwrap().find(b"x{,2}").is_some());
        let re = compile(b"\\d+").unwrap();
        assert!(re.find("٣".as_bytes()).is_none());
        assert!(compile(b"[a&&b]").unwrap().find(b"&").is_some());
        assert!(compile(b"\\Qa.b\\E").unwrap().find(b"axb").is_none());
        assert_eq!(find_all_str("[2,4,6,8]", "123456789", -1), ["2", "4", "6", "8"]);
        assert_eq!(find_all_str("[2,4,6,8]", "123456789", 2), ["2", "4"]);
        assert_eq!(find_all_str("a*", "baaac", -1), ["", "aaa", ""]);
    }

    #[test]
    fn replace_and_split() {
        let re = compile(b"a(x*)b").unwrap();
        let out = re.replace_all(b"-ab-axxb-", |d, c| re.expand(d, b"${1}W", c));
        assert_eq!(out, b"-W-xxW-");
        let out = re.replace_all(b"-ab-axxb-", |d, c| re.expand(d, b"$1W", c));
        assert_eq!(out, b"---");
        let re = compile(b"a*").unwrap();
        let out = re.replace_all(b"baaac", |d, _| d.push(b'-'));
        assert_eq!(out, b"-b-c-");
        let re = compile(b"z+").unwrap();
        let parts = re.split(b"pizza", -1).unwrap();
        assert_eq!(parts, vec![b"pi".to_vec(), b"a".to_vec()]);
        let re = compile(b"").unwrap();
        assert_eq!(re.split(b"abc", -1).unwrap().len(), 3);
        assert_eq!(quote_meta(b"1.2.3+[x]"), b"1\\.2\\.3\\+\\[x\\]");
    }
}
