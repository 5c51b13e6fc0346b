//! The template lexer, after Go's `text/template/parse/lex.go`.
//!
//! Go's lexer is a state machine that the parser pulls one item at a time from. Its output
//! does not depend on the parser (only on two options fixed before lexing starts), so this
//! lexer runs it to completion up front and hands the parser a vector of items. Items carry
//! Go's byte positions and line numbers, which parse errors and execution error locations
//! report. A lexing error ends the item stream with an [`ItemType::Error`] item, exactly where
//! Go's parser would receive it.

use crate::unicode;

/// Kinds of lexical items, in Go's order (keywords after [`ItemType::Keyword`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default)]
pub(crate) enum ItemType {
    Error,
    Bool,
    Char,
    CharConstant,
    Comment,
    Complex,
    Assign,
    Declare,
    #[default]
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    Keyword,
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl ItemType {
    fn keyword(word: &str) -> Option<ItemType> {
        Some(match word {
            "." => ItemType::Dot,
            "block" => ItemType::Block,
            "break" => ItemType::Break,
            "continue" => ItemType::Continue,
            "define" => ItemType::Define,
            "else" => ItemType::Else,
            "end" => ItemType::End,
            "if" => ItemType::If,
            "range" => ItemType::Range,
            "nil" => ItemType::Nil,
            "template" => ItemType::Template,
            "with" => ItemType::With,
            _ => return None,
        })
    }
}

/// A lexical item: its type, byte range in the input and starting line.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Item {
    pub typ: ItemType,
    pub pos: usize,
    pub end: usize,
    pub line: usize,
}

/// The lexed input: all items, the last being `Eof` or `Error` (whose text is `error`).
pub(crate) struct Lexed<'a> {
    pub input: &'a str,
    pub items: Vec<Item>,
    pub error: String,
}

impl Lexed<'_> {
    /// The item's text (Go's `item.val`).
    pub fn val(&self, item: &Item) -> &str {
        match item.typ {
            ItemType::Error => &self.error,
            ItemType::Eof => "EOF",
            _ => &self.input[item.pos..item.end],
        }
    }

    /// Go's `item.String()`, as parse errors show items.
    pub fn describe(&self, item: &Item) -> String {
        let val = self.val(item);
        match item.typ {
            ItemType::Eof => "EOF".to_owned(),
            ItemType::Error => val.to_owned(),
            t if t > ItemType::Keyword => format!("<{val}>"),
            _ => {
                if val.len() > 10 {
                    let cut: String = val.chars().take(10).collect();
                    format!("{}...", crate::strconv::quote(cut.as_bytes()))
                } else {
                    crate::strconv::quote(val.as_bytes())
                }
            }
        }
    }
}

const LEFT_DELIM: &str = "{{";
const RIGHT_DELIM: &str = "}}";
const LEFT_COMMENT: &str = "/*";
const RIGHT_COMMENT: &str = "*/";
const TRIM_MARKER_LEN: usize = 2;
const EOF: u32 = u32::MAX;

#[derive(Clone, Copy)]
enum State {
    Text,
    LeftDelim,
    Comment,
    RightDelim,
    InsideAction,
    Space,
    Identifier,
    Field,
    Variable,
    Char,
    Number,
    Quote,
    RawQuote,
}

struct Lexer<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    start: usize,
    at_eof: bool,
    paren_depth: i64,
    line: usize,
    start_line: usize,
    inside_action: bool,
    break_ok: bool,
    continue_ok: bool,
    items: Vec<Item>,
    error: Option<String>,
    done: bool,
}

fn is_space(r: u32) -> bool {
    r == u32::from(b' ') || r == u32::from(b'\t') || r == u32::from(b'\r') || r == u32::from(b'\n')
}

fn is_alpha_numeric(r: u32) -> bool {
    r == u32::from(b'_') || (r != EOF && (unicode::is_letter(r) || unicode::is_digit(r)))
}

fn has_left_trim_marker(s: &[u8]) -> bool {
    s.len() >= 2 && s[0] == b'-' && is_space(u32::from(s[1]))
}

fn has_right_trim_marker(s: &[u8]) -> bool {
    s.len() >= 2 && is_space(u32::from(s[0])) && s[1] == b'-'
}

fn is_space_byte(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Lexes `input`. `break_ok`/`continue_ok` say whether `break` and `continue` are keywords
/// (Go makes them identifiers when a function of that name exists).
pub(crate) fn lex(input: &str, break_ok: bool, continue_ok: bool) -> Lexed<'_> {
    let mut l = Lexer {
        input,
        bytes: input.as_bytes(),
        pos: 0,
        start: 0,
        at_eof: false,
        paren_depth: 0,
        line: 1,
        start_line: 1,
        inside_action: false,
        break_ok,
        continue_ok,
        items: Vec::with_capacity(input.len() / 16 + 8),
        error: None,
        done: false,
    };
    l.run();
    Lexed {
        input,
        items: l.items,
        error: l.error.unwrap_or_default(),
    }
}

impl<'a> Lexer<'a> {
    fn run(&mut self) {
        let mut state = State::Text;
        while !self.done {
            let next = match state {
                State::Text => self.lex_text(),
                State::LeftDelim => self.lex_left_delim(),
                State::Comment => self.lex_comment(),
                State::RightDelim => self.lex_right_delim(),
                State::InsideAction => self.lex_inside_action(),
                State::Space => self.lex_space(),
                State::Identifier => self.lex_identifier(),
                State::Field => self.lex_field_or_variable(ItemType::Field),
                State::Variable => self.lex_variable(),
                State::Char => self.lex_char(),
                State::Number => self.lex_number(),
                State::Quote => self.lex_quote(),
                State::RawQuote => self.lex_raw_quote(),
            };
            state = match next {
                Some(s) => s,
                // An item was emitted: Go's nextItem restarts from the text or action state.
                None if self.inside_action => State::InsideAction,
                None => State::Text,
            };
        }
    }

    fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    #[inline]
    fn next(&mut self) -> u32 {
        let Some(&b) = self.bytes.get(self.pos) else {
            self.at_eof = true;
            return EOF;
        };
        if b < 0x80 {
            self.pos += 1;
            if b == b'\n' {
                self.line += 1;
            }
            return u32::from(b);
        }
        let (r, w) = unicode::decode_rune(&self.bytes[self.pos..]);
        self.pos += w;
        if r == u32::from(b'\n') {
            self.line += 1;
        }
        r
    }

    fn peek(&mut self) -> u32 {
        let r = self.next();
        self.backup();
        r
    }

    #[inline]
    fn backup(&mut self) {
        if !self.at_eof && self.pos > 0 {
            let b = self.bytes[self.pos - 1];
            if b < 0x80 {
                self.pos -= 1;
                if b == b'\n' {
                    self.line -= 1;
                }
                return;
            }
            let (r, w) = unicode::decode_last_rune(&self.bytes[..self.pos]);
            self.pos -= w;
            if r == u32::from(b'\n') {
                self.line -= 1;
            }
        }
    }

    fn this_item(&mut self, typ: ItemType) -> Item {
        let item = Item {
            typ,
            pos: self.start,
            end: self.pos,
            line: self.start_line,
        };
        self.start = self.pos;
        self.start_line = self.line;
        item
    }

    fn emit(&mut self, typ: ItemType) -> Option<State> {
        let item = self.this_item(typ);
        self.emit_item(item)
    }

    fn emit_item(&mut self, item: Item) -> Option<State> {
        if matches!(item.typ, ItemType::Eof) {
            self.done = true;
        }
        self.items.push(item);
        None
    }

    fn ignore(&mut self) {
        self.line += count_newlines(&self.bytes[self.start..self.pos]);
        self.start = self.pos;
        self.start_line = self.line;
    }

    fn accept(&mut self, valid: &[u8]) -> bool {
        let r = self.next();
        if r < 0x80 && valid.contains(&(r as u8)) {
            return true;
        }
        self.backup();
        false
    }

    fn accept_run(&mut self, valid: &[u8]) {
        loop {
            let r = self.next();
            if !(r < 0x80 && valid.contains(&(r as u8))) {
                break;
            }
        }
        self.backup();
    }

    fn errorf(&mut self, msg: String) -> Option<State> {
        self.items.push(Item {
            typ: ItemType::Error,
            pos: self.start,
            end: self.start,
            line: self.start_line,
        });
        self.error = Some(msg);
        self.done = true;
        None
    }

    fn lex_text(&mut self) -> Option<State> {
        if let Some(x) = self.input[self.pos..].find(LEFT_DELIM) {
            if x > 0 {
                self.pos += x;
                let mut trim_length = 0;
                let delim_end = self.pos + LEFT_DELIM.len();
                if has_left_trim_marker(&self.bytes[delim_end..]) {
                    trim_length = right_trim_length(&self.bytes[self.start..self.pos]);
                }
                self.pos -= trim_length;
                self.line += count_newlines(&self.bytes[self.start..self.pos]);
                let item = self.this_item(ItemType::Text);
                self.pos += trim_length;
                self.ignore();
                if item.end > item.pos {
                    return self.emit_item(item);
                }
            }
            return Some(State::LeftDelim);
        }
        self.pos = self.bytes.len();
        if self.pos > self.start {
            self.line += count_newlines(&self.bytes[self.start..self.pos]);
            return self.emit(ItemType::Text);
        }
        self.emit(ItemType::Eof)
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = self.rest();
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM.as_bytes()) {
            return (true, true);
        }
        if rest.starts_with(RIGHT_DELIM.as_bytes()) {
            return (true, false);
        }
        (false, false)
    }

    fn lex_left_delim(&mut self) -> Option<State> {
        self.pos += LEFT_DELIM.len();
        let trim_space = has_left_trim_marker(self.rest());
        let after_marker = if trim_space { TRIM_MARKER_LEN } else { 0 };
        if self.bytes[self.pos + after_marker..].starts_with(LEFT_COMMENT.as_bytes()) {
            self.pos += after_marker;
            self.ignore();
            return Some(State::Comment);
        }
        let item = self.this_item(ItemType::LeftDelim);
        self.inside_action = true;
        self.pos += after_marker;
        self.ignore();
        self.paren_depth = 0;
        self.emit_item(item)
    }

    fn lex_comment(&mut self) -> Option<State> {
        self.pos += LEFT_COMMENT.len();
        let Some(x) = self.input[self.pos..].find(RIGHT_COMMENT) else {
            return self.errorf("unclosed comment".to_owned());
        };
        self.pos += x + RIGHT_COMMENT.len();
        let (delim, trim_space) = self.at_right_delim();
        if !delim {
            return self.errorf("comment ends before closing delimiter".to_owned());
        }
        self.line += count_newlines(&self.bytes[self.start..self.pos]);
        let _comment = self.this_item(ItemType::Comment);
        if trim_space {
            self.pos += TRIM_MARKER_LEN;
        }
        self.pos += RIGHT_DELIM.len();
        if trim_space {
            self.pos += left_trim_length(self.rest());
        }
        self.ignore();
        Some(State::Text)
    }

    fn lex_right_delim(&mut self) -> Option<State> {
        let (_, trim_space) = self.at_right_delim();
        if trim_space {
            self.pos += TRIM_MARKER_LEN;
            self.ignore();
        }
        self.pos += RIGHT_DELIM.len();
        let item = self.this_item(ItemType::RightDelim);
        if trim_space {
            self.pos += left_trim_length(self.rest());
            self.ignore();
        }
        self.inside_action = false;
        self.emit_item(item)
    }

    fn lex_inside_action(&mut self) -> Option<State> {
        let (delim, _) = self.at_right_delim();
        if delim {
            if self.paren_depth == 0 {
                return Some(State::RightDelim);
            }
            return self.errorf("unclosed left paren".to_owned());
        }
        let r = self.next();
        if r == EOF {
            return self.errorf("unclosed action".to_owned());
        }
        if is_space(r) {
            self.backup();
            return Some(State::Space);
        }
        match char::from_u32(r).unwrap_or('\u{FFFD}') {
            '=' => self.emit(ItemType::Assign),
            ':' => {
                if self.next() != u32::from(b'=') {
                    return self.errorf("expected :=".to_owned());
                }
                self.emit(ItemType::Declare)
            }
            '|' => self.emit(ItemType::Pipe),
            '"' => Some(State::Quote),
            '`' => Some(State::RawQuote),
            '$' => Some(State::Variable),
            '\'' => Some(State::Char),
            '.' => {
                if self.pos < self.bytes.len() {
                    let c = self.bytes[self.pos];
                    if !c.is_ascii_digit() {
                        return Some(State::Field);
                    }
                }
                self.backup();
                Some(State::Number)
            }
            '+' | '-' | '0'..='9' => {
                self.backup();
                Some(State::Number)
            }
            _ if is_alpha_numeric(r) => {
                self.backup();
                Some(State::Identifier)
            }
            '(' => {
                self.paren_depth += 1;
                self.emit(ItemType::LeftParen)
            }
            ')' => {
                self.paren_depth -= 1;
                if self.paren_depth < 0 {
                    return self.errorf("unexpected right paren".to_owned());
                }
                self.emit(ItemType::RightParen)
            }
            _ if r < 0x80 && unicode::is_print(r) => self.emit(ItemType::Char),
            _ => self.errorf(format!("unrecognized character in action: {}", sharp_u(r))),
        }
    }

    fn lex_space(&mut self) -> Option<State> {
        let mut num_spaces = 0;
        loop {
            let r = self.peek();
            if !is_space(r) {
                break;
            }
            self.next();
            num_spaces += 1;
        }
        let rest = &self.bytes[self.pos - 1..];
        if has_right_trim_marker(rest) && rest[TRIM_MARKER_LEN..].starts_with(RIGHT_DELIM.as_bytes()) {
            self.backup();
            if num_spaces == 1 {
                return Some(State::RightDelim);
            }
        }
        self.emit(ItemType::Space)
    }

    fn lex_identifier(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if is_alpha_numeric(r) {
                continue;
            }
            self.backup();
            let word = &self.input[self.start..self.pos];
            if !self.at_terminator() {
                return self.errorf(format!("bad character {}", sharp_u(r)));
            }
            if let Some(kw) = ItemType::keyword(word) {
                if (kw == ItemType::Break && !self.break_ok)
                    || (kw == ItemType::Continue && !self.continue_ok)
                {
                    return self.emit(ItemType::Identifier);
                }
                return self.emit(kw);
            }
            if word.starts_with('.') {
                return self.emit(ItemType::Field);
            }
            if word == "true" || word == "false" {
                return self.emit(ItemType::Bool);
            }
            return self.emit(ItemType::Identifier);
        }
    }

    fn lex_variable(&mut self) -> Option<State> {
        if self.at_terminator() {
            return self.emit(ItemType::Variable);
        }
        self.lex_field_or_variable(ItemType::Variable)
    }

    fn lex_field_or_variable(&mut self, typ: ItemType) -> Option<State> {
        if self.at_terminator() {
            if typ == ItemType::Variable {
                return self.emit(ItemType::Variable);
            }
            return self.emit(ItemType::Dot);
        }
        let mut r;
        loop {
            r = self.next();
            if !is_alpha_numeric(r) {
                self.backup();
                break;
            }
        }
        if !self.at_terminator() {
            return self.errorf(format!("bad character {}", sharp_u(r)));
        }
        self.emit(typ)
    }

    fn at_terminator(&mut self) -> bool {
        let r = self.peek();
        if is_space(r) {
            return true;
        }
        if r == EOF || matches!(char::from_u32(r), Some('.' | ',' | '|' | ':' | ')' | '(')) {
            return true;
        }
        self.rest().starts_with(RIGHT_DELIM.as_bytes())
    }

    fn lex_char(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if r == u32::from(b'\\') {
                let r2 = self.next();
                if r2 != EOF && r2 != u32::from(b'\n') {
                    continue;
                }
                return self.errorf("unterminated character constant".to_owned());
            }
            if r == EOF || r == u32::from(b'\n') {
                return self.errorf("unterminated character constant".to_owned());
            }
            if r == u32::from(b'\'') {
                break;
            }
        }
        self.emit(ItemType::CharConstant)
    }

    fn lex_number(&mut self) -> Option<State> {
        if !self.scan_number() {
            let text = self.input[self.start..self.pos].to_owned();
            return self.errorf(format!(
                "bad number syntax: {}",
                crate::strconv::quote(text.as_bytes())
            ));
        }
        let sign = self.peek();
        if sign == u32::from(b'+') || sign == u32::from(b'-') {
            if !self.scan_number() || self.bytes[self.pos - 1] != b'i' {
                let text = self.input[self.start..self.pos].to_owned();
                return self.errorf(format!(
                    "bad number syntax: {}",
                    crate::strconv::quote(text.as_bytes())
                ));
            }
            return self.emit(ItemType::Complex);
        }
        self.emit(ItemType::Number)
    }

    fn scan_number(&mut self) -> bool {
        self.accept(b"+-");
        let mut digits: &[u8] = b"0123456789_";
        if self.accept(b"0") {
            if self.accept(b"xX") {
                digits = b"0123456789abcdefABCDEF_";
            } else if self.accept(b"oO") {
                digits = b"01234567_";
            } else if self.accept(b"bB") {
                digits = b"01_";
            }
        }
        self.accept_run(digits);
        if self.accept(b".") {
            self.accept_run(digits);
        }
        if digits.len() == 10 + 1 && self.accept(b"eE") {
            self.accept(b"+-");
            self.accept_run(b"0123456789_");
        }
        if digits.len() == 16 + 6 + 1 && self.accept(b"pP") {
            self.accept(b"+-");
            self.accept_run(b"0123456789_");
        }
        self.accept(b"i");
        if is_alpha_numeric(self.peek()) {
            self.next();
            return false;
        }
        true
    }

    fn lex_quote(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if r == u32::from(b'\\') {
                let r2 = self.next();
                if r2 != EOF && r2 != u32::from(b'\n') {
                    continue;
                }
                return self.errorf("unterminated quoted string".to_owned());
            }
            if r == EOF || r == u32::from(b'\n') {
                return self.errorf("unterminated quoted string".to_owned());
            }
            if r == u32::from(b'"') {
                break;
            }
        }
        self.emit(ItemType::String)
    }

    fn lex_raw_quote(&mut self) -> Option<State> {
        loop {
            let r = self.next();
            if r == EOF {
                return self.errorf("unterminated raw quoted string".to_owned());
            }
            if r == u32::from(b'`') {
                break;
            }
        }
        self.emit(ItemType::RawString)
    }
}

/// `%#U`: `U+0022 '"'` (the quoted rune only when printable).
pub(crate) fn sharp_u(r: u32) -> String {
    if r == EOF {
        return "U+FFFFFFFFFFFFFFFF".to_owned();
    }
    let mut s = format!("U+{r:04X}");
    if unicode::is_print(r) {
        s.push_str(" '");
        if let Some(c) = char::from_u32(r) {
            s.push(c);
        }
        s.push('\'');
    }
    s
}

fn count_newlines(s: &[u8]) -> usize {
    s.iter().filter(|&&b| b == b'\n').count()
}

fn right_trim_length(s: &[u8]) -> usize {
    s.iter().rev().take_while(|&&b| is_space_byte(b)).count()
}

fn left_trim_length(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_space_byte(b)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<(ItemType, String)> {
        let l = lex(s, true, true);
        l.items.iter().map(|i| (i.typ, l.val(i).to_owned())).collect()
    }

    #[test]
    fn lexes_actions_and_trim_markers() {
        use ItemType::*;
        assert_eq!(
            kinds("a {{- .x | f 1 -}} b"),
            vec![
                (Text, "a".into()),
                (LeftDelim, "{{".into()),
                (Field, ".x".into()),
                (Space, " ".into()),
                (Pipe, "|".into()),
                (Space, " ".into()),
                (Identifier, "f".into()),
                (Space, " ".into()),
                (Number, "1".into()),
                (RightDelim, "}}".into()),
                (Text, "b".into()),
                (Eof, "EOF".into()),
            ]
        );
        assert_eq!(
            kinds("{{.a.b}}")[1..3],
            [(Field, ".a".into()), (Field, ".b".into())]
        );
        assert_eq!(kinds("{{ .my-key }}").last().map(|k| k.0), Some(Error));
        let l = lex("{{ .my-key }}", true, true);
        assert_eq!(l.error, "bad character U+002D '-'");
    }

    #[test]
    fn counts_lines() {
        let l = lex("a\n{{ .name\nb", true, true);
        let b = l.items.iter().find(|i| l.val(i) == "b").map(|i| i.line);
        assert_eq!(b, Some(3));
    }
}
