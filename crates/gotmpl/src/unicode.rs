//! Go's `unicode` and `unicode/utf8` predicates and decoding.
//!
//! Go and Rust disagree on several definitions that shape output: Go's `IsLetter` is the
//! Unicode category L (Rust's `is_alphabetic` is the wider Alphabetic property), `IsDigit` is
//! Nd only, `IsPrint` decides what `strconv.Quote` escapes, and Go decodes invalid UTF-8 one
//! byte at a time as U+FFFD. This module reproduces Go's definitions over generated tables.

use crate::unicode_tables;

/// U+FFFD, what Go's decoder yields for an invalid byte.
pub const RUNE_ERROR: u32 = 0xFFFD;

/// The largest valid code point.
pub const MAX_RUNE: u32 = 0x10FFFF;

fn in_table(table: &[(u32, u32)], r: u32) -> bool {
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < r {
                std::cmp::Ordering::Less
            } else if lo > r {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `unicode.IsLetter`: category L.
pub fn is_letter(r: u32) -> bool {
    if r < 0x80 {
        return (r as u8).is_ascii_alphabetic();
    }
    in_table(unicode_tables::LETTER, r)
}

/// `unicode.IsDigit`: category Nd.
pub fn is_digit(r: u32) -> bool {
    if r < 0x80 {
        return (r as u8).is_ascii_digit();
    }
    in_table(unicode_tables::DIGIT, r)
}

/// `unicode.IsPrint` (and `strconv.IsPrint`): categories L, M, N, P, S and the ASCII space.
pub fn is_print(r: u32) -> bool {
    if r < 0x80 {
        return (0x20..0x7F).contains(&r);
    }
    in_table(unicode_tables::PRINT, r)
}

/// `unicode.IsGraphic`: like [`is_print`] plus the other space separators (Zs).
pub fn is_graphic(r: u32) -> bool {
    if r < 0x80 {
        return (0x20..0x7F).contains(&r);
    }
    in_table(unicode_tables::GRAPHIC, r)
}

/// `unicode.IsUpper` (category Lu).
pub fn is_upper(r: u32) -> bool {
    if r < 0x80 {
        return (r as u8).is_ascii_uppercase();
    }
    in_table(unicode_tables::UPPER, r)
}

/// `unicode.IsLower` (category Ll).
pub fn is_lower(r: u32) -> bool {
    if r < 0x80 {
        return (r as u8).is_ascii_lowercase();
    }
    in_table(unicode_tables::LOWER, r)
}

/// `unicode.IsTitle` (category Lt).
pub fn is_title(r: u32) -> bool {
    r >= 0x80 && in_table(unicode_tables::TITLE, r)
}

/// `unicode.IsPunct` (category P).
pub fn is_punct(r: u32) -> bool {
    if r < 0x80 {
        return (r as u8).is_ascii_punctuation() && !b"$+<=>^`|~".contains(&(r as u8));
    }
    in_table(unicode_tables::PUNCT, r)
}

/// `unicode.IsSpace`: `\t \n \v \f \r`, space, U+0085, U+00A0 and the White_Space runes.
pub fn is_space(r: u32) -> bool {
    matches!(
        r,
        0x09..=0x0D | 0x20 | 0x85 | 0xA0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000
    )
}

/// `utf8.ValidRune`.
pub fn valid_rune(r: i64) -> bool {
    (0..0xD800).contains(&r) || (0xE000..=MAX_RUNE as i64).contains(&r)
}

/// `utf8.DecodeRune`: the first rune of `s` and its width; `(RUNE_ERROR, 1)` for an invalid
/// byte and `(RUNE_ERROR, 0)` for empty input.
pub fn decode_rune(s: &[u8]) -> (u32, usize) {
    let Some(&b0) = s.first() else {
        return (RUNE_ERROR, 0);
    };
    if b0 < 0x80 {
        return (u32::from(b0), 1);
    }
    let cont = |i: usize, lo: u8, hi: u8| -> Option<u32> {
        let b = *s.get(i)?;
        (lo..=hi).contains(&b).then_some(u32::from(b & 0x3F))
    };
    let decoded = match b0 {
        0xC2..=0xDF => cont(1, 0x80, 0xBF).map(|c1| ((u32::from(b0 & 0x1F) << 6) | c1, 2)),
        0xE0..=0xEF => {
            let (lo, hi) = match b0 {
                0xE0 => (0xA0, 0xBF),
                0xED => (0x80, 0x9F),
                _ => (0x80, 0xBF),
            };
            cont(1, lo, hi).and_then(|c1| {
                cont(2, 0x80, 0xBF).map(|c2| ((u32::from(b0 & 0x0F) << 12) | (c1 << 6) | c2, 3))
            })
        }
        0xF0..=0xF4 => {
            let (lo, hi) = match b0 {
                0xF0 => (0x90, 0xBF),
                0xF4 => (0x80, 0x8F),
                _ => (0x80, 0xBF),
            };
            cont(1, lo, hi).and_then(|c1| {
                cont(2, 0x80, 0xBF).and_then(|c2| {
                    cont(3, 0x80, 0xBF)
                        .map(|c3| ((u32::from(b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3, 4))
                })
            })
        }
        _ => None,
    };
    decoded.unwrap_or((RUNE_ERROR, 1))
}

/// `utf8.DecodeLastRune`.
pub fn decode_last_rune(s: &[u8]) -> (u32, usize) {
    if s.is_empty() {
        return (RUNE_ERROR, 0);
    }
    let end = s.len();
    let lim = end.saturating_sub(4);
    let mut start = end - 1;
    while start > lim && (s[start] & 0xC0) == 0x80 {
        start -= 1;
    }
    let (r, w) = decode_rune(&s[start..end]);
    if start + w != end {
        return (RUNE_ERROR, 1);
    }
    (r, w)
}

/// `utf8.AppendRune`: invalid runes are written as U+FFFD.
pub fn append_rune(buf: &mut Vec<u8>, r: u32) {
    let c = char::from_u32(r).unwrap_or('\u{FFFD}');
    let mut tmp = [0u8; 4];
    buf.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
}

/// `utf8.RuneLen` of a valid rune (1 to 4), or 3 for an invalid one (its U+FFFD encoding).
pub fn rune_len(r: u32) -> usize {
    char::from_u32(r).map_or(3, char::len_utf8)
}

/// `utf8.RuneCount`: the number of runes, invalid bytes counting one each.
pub fn rune_count(s: &[u8]) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    let mut n = 0;
    let mut i = 0;
    while i < s.len() {
        let (_, w) = decode_rune(&s[i..]);
        i += w.max(1);
        n += 1;
    }
    n
}

/// Iterates the runes of a Go string as `for i, r := range s` does: `(byte offset, rune,
/// width)`, invalid bytes yielding U+FFFD with width 1.
pub fn runes(s: &[u8]) -> impl Iterator<Item = (usize, u32, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= s.len() {
            return None;
        }
        let (r, w) = decode_rune(&s[i..]);
        let w = w.max(1);
        let at = i;
        i += w;
        Some((at, r, w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_like_go() {
        assert_eq!(decode_rune("é".as_bytes()), (0xE9, 2));
        assert_eq!(decode_rune(&[0xC3]), (RUNE_ERROR, 1));
        assert_eq!(decode_rune(&[0xED, 0xA0, 0x80]), (RUNE_ERROR, 1));
        assert_eq!(decode_rune("🚀".as_bytes()), (0x1F680, 4));
        assert_eq!(decode_last_rune("aé".as_bytes()), (0xE9, 2));
        assert_eq!(rune_count(&[b'a', 0xFF, b'b']), 3);
    }

    #[test]
    fn categories_follow_go() {
        assert!(is_letter('é' as u32));
        assert!(!is_letter(0x2160)); // Roman numeral: Nl, not a letter in Go
        assert!(is_digit('٣' as u32));
        assert!(!is_print(0x2028));
        assert!(is_print(0xFFFD));
        assert!(!is_print(0xA0));
        assert!(is_graphic(0xA0));
    }
}
