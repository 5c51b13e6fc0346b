//! Go strings: immutable byte sequences that are almost always, but not necessarily, UTF-8.
//!
//! Go's `string` is a byte string. Template output can contain invalid UTF-8 (for example
//! `{{ trunc 1 "é" }}` cuts a rune in half), and Go code that iterates runes treats each invalid
//! byte as U+FFFD. [`Str`] keeps the bytes exactly and remembers whether they are valid UTF-8,
//! so the common case costs nothing and the rare case stays byte-exact.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// An immutable, cheaply clonable Go string.
#[derive(Clone)]
pub struct Str(Repr);

/// Valid UTF-8 is held as text, so that reading it as `&str` checks nothing again; only the
/// rare invalid string is held as bytes.
#[derive(Clone)]
enum Repr {
    Text(Arc<str>),
    Bytes(Arc<[u8]>),
}

impl Str {
    /// The empty string.
    pub fn empty() -> Str {
        Str::from("")
    }

    /// A string from arbitrary bytes (validated once).
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Str {
        match String::from_utf8(bytes.into()) {
            Ok(text) => Str::from(text),
            Err(e) => Str(Repr::Bytes(Arc::from(e.into_bytes()))),
        }
    }

    /// The bytes, exactly.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Text(s) => s.as_bytes(),
            Repr::Bytes(b) => b,
        }
    }

    /// The text, if the bytes are valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            Repr::Text(s) => Some(s),
            Repr::Bytes(_) => None,
        }
    }

    /// The text with each invalid byte replaced by U+FFFD, as Go's rune iteration sees it.
    pub fn to_str_lossy(&self) -> Cow<'_, str> {
        match self.as_str() {
            Some(s) => Cow::Borrowed(s),
            None => String::from_utf8_lossy(self.as_bytes()),
        }
    }

    /// Whether the bytes are valid UTF-8.
    pub fn is_utf8(&self) -> bool {
        matches!(self.0, Repr::Text(_))
    }

    /// Length in bytes, as Go's `len` reports it.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }
}

impl Default for Str {
    fn default() -> Str {
        Str::empty()
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Str {
        Str(Repr::Text(Arc::from(s)))
    }
}

impl From<String> for Str {
    fn from(s: String) -> Str {
        Str(Repr::Text(Arc::from(s)))
    }
}

impl From<&String> for Str {
    fn from(s: &String) -> Str {
        Str::from(s.as_str())
    }
}

impl From<Cow<'_, str>> for Str {
    fn from(s: Cow<'_, str>) -> Str {
        Str::from(s.as_ref())
    }
}

impl From<Vec<u8>> for Str {
    fn from(b: Vec<u8>) -> Str {
        Str::from_bytes(b)
    }
}

impl From<&[u8]> for Str {
    fn from(b: &[u8]) -> Str {
        Str::from_bytes(b)
    }
}

impl PartialEq for Str {
    fn eq(&self, other: &Str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Str {}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Str {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialOrd for Str {
    fn partial_cmp(&self, other: &Str) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Byte-wise order, as Go compares strings.
impl Ord for Str {
    fn cmp(&self, other: &Str) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for Str {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::borrow::Borrow<[u8]> for Str {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_str_lossy())
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_str() {
            Some(s) => fmt::Debug::fmt(s, f),
            None => write!(f, "b{:?}", String::from_utf8_lossy(self.as_bytes())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_invalid_bytes_exactly() {
        let s = Str::from_bytes(vec![0xc3]);
        assert!(!s.is_utf8());
        assert_eq!(s.as_bytes(), &[0xc3]);
        assert_eq!(s.as_str(), None);
        assert_eq!(s.to_str_lossy(), "\u{fffd}");
    }

    #[test]
    fn orders_bytewise_like_go() {
        let mut v = [Str::from("b"), Str::from("B"), Str::from("é"), Str::from("a")];
        v.sort();
        let got: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        assert_eq!(got, ["B", "a", "b", "é"]);
    }
}
