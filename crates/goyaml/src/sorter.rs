//! yaml.v3's map key order (`keyList.Less`).
//!
//! go-yaml does not sort keys byte-wise: numbers (and bools) come first in numeric order,
//! then other kinds by Go's `reflect.Kind` number, and strings in a "natural" order where runs
//! of digits compare as numbers (`"9"` before `"10"`) and letters come before other symbols
//! after a digit. The output order of every mapping depends on it.

use kalypso_gotmpl::{FloatKind, IntKind, MapKey, UintKind};

/// Go's `reflect.Kind` numbers, which order keys of different kinds.
fn kind_number(key: &MapKey) -> u8 {
    match key {
        MapKey::Bool(_) => 1,
        MapKey::Int(_, k) => match k {
            IntKind::Int => 2,
            IntKind::Int8 => 3,
            IntKind::Int16 => 4,
            IntKind::Int32 => 5,
            IntKind::Int64 => 6,
        },
        MapKey::Uint(_, k) => match k {
            UintKind::Uint => 7,
            UintKind::Uint8 => 8,
            UintKind::Uint16 => 9,
            UintKind::Uint32 => 10,
            UintKind::Uint64 => 11,
            UintKind::Uintptr => 12,
        },
        MapKey::Float(_, FloatKind::Float32) => 13,
        MapKey::Float(_, FloatKind::Float64) => 14,
        // A nil key of a `map[interface {}]...` stays an interface.
        MapKey::Nil => 20,
        MapKey::String(_) => 24,
    }
}

fn key_float(key: &MapKey) -> Option<f64> {
    match key {
        MapKey::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        MapKey::Int(i, _) => Some(*i as f64),
        MapKey::Uint(u, _) => Some(*u as f64),
        MapKey::Float(f, _) => Some(*f),
        MapKey::Nil | MapKey::String(_) => None,
    }
}

/// A key prepared for sorting: string keys carry their runes unless they are ASCII (where
/// bytes are runes), so comparisons neither validate nor decode UTF-8 again.
pub(crate) struct SortKey<'a> {
    key: &'a MapKey,
    runes: Option<Vec<char>>,
}

impl<'a> SortKey<'a> {
    pub(crate) fn new(key: &'a MapKey) -> SortKey<'a> {
        let runes = match key {
            MapKey::String(s) if !s.as_bytes().is_ascii() => Some(s.to_str_lossy().chars().collect()),
            _ => None,
        };
        SortKey { key, runes }
    }
}

/// `keyList.Less(a, b)`.
pub(crate) fn key_less(a: &SortKey<'_>, b: &SortKey<'_>) -> bool {
    let (ak, bk) = (kind_number(a.key), kind_number(b.key));
    if let (Some(af), Some(bf)) = (key_float(a.key), key_float(b.key)) {
        if af != bf {
            return af < bf;
        }
        if ak != bk {
            return ak < bk;
        }
        return match (a.key, b.key) {
            (MapKey::Int(x, _), MapKey::Int(y, _)) => x < y,
            (MapKey::Uint(x, _), MapKey::Uint(y, _)) => x < y,
            (MapKey::Float(x, _), MapKey::Float(y, _)) => x < y,
            (MapKey::Bool(x), MapKey::Bool(y)) => !x & y,
            _ => false,
        };
    }
    match (a.key, b.key) {
        (MapKey::String(x), MapKey::String(y)) => match (&a.runes, &b.runes) {
            (None, None) => natural_less(x.as_bytes(), y.as_bytes(), |c| char::from(*c)),
            _ => {
                let x = a
                    .runes
                    .clone()
                    .unwrap_or_else(|| x.as_bytes().iter().map(|&c| char::from(c)).collect());
                let y = b
                    .runes
                    .clone()
                    .unwrap_or_else(|| y.as_bytes().iter().map(|&c| char::from(c)).collect());
                natural_less(&x, &y, |c| *c)
            }
        },
        _ => ak < bk,
    }
}

/// Go's `unicode.IsLetter` (category L).
fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        kalypso_gotmpl::unicode::is_letter(u32::from(c))
    }
}

/// Go's `unicode.IsDigit` (category Nd).
fn is_digit(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        kalypso_gotmpl::unicode::is_digit(u32::from(c))
    }
}

/// The string branch of `keyList.Less`, over runes.
fn natural_less<T>(ar: &[T], br: &[T], rune: impl Fn(&T) -> char) -> bool {
    let mut digits = false;
    let n = ar.len().min(br.len());
    for i in 0..n {
        let (a, b) = (rune(&ar[i]), rune(&br[i]));
        if a == b {
            digits = is_digit(a);
            continue;
        }
        let (al, bl) = (is_letter(a), is_letter(b));
        if al && bl {
            return a < b;
        }
        if al || bl {
            return if digits { al } else { bl };
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if a == '0' || b == '0' {
            for j in (0..i).rev() {
                let c = rune(&ar[j]);
                if !is_digit(c) {
                    break;
                }
                if c != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && is_digit(rune(&ar[ai])) {
            an = an
                .wrapping_mul(10)
                .wrapping_add(i64::from(rune(&ar[ai]) as u32).wrapping_sub(i64::from(b'0')));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && is_digit(rune(&br[bi])) {
            bn = bn
                .wrapping_mul(10)
                .wrapping_add(i64::from(rune(&br[bi]) as u32).wrapping_sub(i64::from(b'0')));
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return a < b;
    }
    ar.len() < br.len()
}

/// Sorts `items` by their keys with `key_less`. A merge sort that only asks "less?", so a
/// comparison that is not a total order (NaN keys) cannot make it panic; for such ties Go's
/// order depends on map iteration and is not reproducible anyway.
pub(crate) fn sort_keys<T>(items: &mut Vec<T>, key: impl Fn(&T) -> &MapKey) {
    if items.len() < 2 {
        return;
    }
    let mut prepared: Vec<(SortKey<'_>, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, item)| (SortKey::new(key(item)), i))
        .collect();
    merge_sort(&mut prepared);
    let order: Vec<usize> = prepared.into_iter().map(|(_, i)| i).collect();
    let mut slots: Vec<Option<T>> = std::mem::take(items).into_iter().map(Some).collect();
    items.extend(order.into_iter().filter_map(|i| slots[i].take()));
}

fn merge_sort(items: &mut Vec<(SortKey<'_>, usize)>) {
    if items.len() <= 16 {
        // Insertion sort: the common case of small mappings.
        for i in 1..items.len() {
            let mut j = i;
            while j > 0 && key_less(&items[j].0, &items[j - 1].0) {
                items.swap(j, j - 1);
                j -= 1;
            }
        }
        return;
    }
    let mut rest = items.split_off(items.len() / 2);
    merge_sort(items);
    merge_sort(&mut rest);
    let left = std::mem::take(items);
    items.reserve(left.len() + rest.len());
    let mut left = left.into_iter().peekable();
    let mut right = rest.into_iter().peekable();
    loop {
        let take_right = match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => key_less(&r.0, &l.0),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => break,
        };
        let next = if take_right { right.next() } else { left.next() };
        items.extend(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> MapKey {
        MapKey::String(v.into())
    }

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut v: Vec<MapKey> = keys.iter().map(|k| s(k)).collect();
        sort_keys(&mut v, |k| k);
        v.iter()
            .map(|k| match k {
                MapKey::String(x) => x.to_string(),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn natural_order() {
        assert_eq!(
            sorted(&["z", "a", "M", "_", "10", "9"]),
            ["_", "9", "10", "M", "a", "z"]
        );
        assert_eq!(sorted(&["a10", "a9", "a1b", "a1"]), ["a1", "a1b", "a9", "a10"]);
        assert_eq!(sorted(&["a01", "a1", "a001"]), ["a1", "a01", "a001"]);
        assert_eq!(sorted(&["1_", "1a", "11"]), ["1a", "1_", "11"]);
    }

    #[test]
    fn mixed_kinds() {
        let mut v = vec![
            s("a"),
            MapKey::Nil,
            MapKey::Int(2, IntKind::Int),
            MapKey::Bool(true),
            MapKey::Float(1.5, FloatKind::Float64),
        ];
        sort_keys(&mut v, |k| k);
        assert_eq!(
            format!("{v:?}"),
            r#"[Bool(true), Float(1.5, Float64), Int(2, Int), Nil, String("a")]"#
        );
    }

    #[test]
    fn large_sort_matches_small() {
        let keys: Vec<String> = (0..100).rev().map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let got = sorted(&refs);
        let want: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
        assert_eq!(got, want);
    }
}
