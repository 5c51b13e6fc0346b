//! mitchellh/hashstructure v1 `Hash(v, nil)`, the scheduler's `hash` template function.
//!
//! Templates put the number into annotations (a config hash that restarts pods when the
//! config changes), so it must equal Go's to the bit. The algorithm: 64-bit FNV-1 (not 1a)
//! over little-endian encodings; numbers hash their Go-sized bytes (`int` as 8 bytes, `bool`
//! as one `int8`, nil as an 8-byte zero `int`); strings hash their bytes; slices fold item
//! hashes in order; maps XOR the hashes of their (key, value) pairs, so order does not matter;
//! structs start from the hash of the unqualified type name and XOR in (field name, value)
//! pairs of exported fields.

use kalypso_gotmpl::{FloatKind, IntKind, UintKind, Value};

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// 64-bit FNV-1, Go's `hash/fnv.New64`.
fn fnv1(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(OFFSET, |h, &b| h.wrapping_mul(PRIME) ^ u64::from(b))
}

/// `hashUpdateOrdered`: the hash of two hashes written in order.
fn ordered(a: u64, b: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&a.to_le_bytes());
    buf[8..].copy_from_slice(&b.to_le_bytes());
    fnv1(&buf)
}

/// `hashstructure.Hash(v, nil)`; the error text is the library's.
pub(crate) fn hash(v: &Value) -> Result<u64, String> {
    Ok(match v {
        Value::Nil => fnv1(&0i64.to_le_bytes()),
        Value::Bool(b) => fnv1(&[u8::from(*b)]),
        Value::Int(i, kind) => match kind {
            IntKind::Int | IntKind::Int64 => fnv1(&i.to_le_bytes()),
            IntKind::Int8 => fnv1(&(*i as i8).to_le_bytes()),
            IntKind::Int16 => fnv1(&(*i as i16).to_le_bytes()),
            IntKind::Int32 => fnv1(&(*i as i32).to_le_bytes()),
        },
        Value::Uint(u, kind) => match kind {
            UintKind::Uint | UintKind::Uint64 => fnv1(&u.to_le_bytes()),
            UintKind::Uint8 => fnv1(&(*u as u8).to_le_bytes()),
            UintKind::Uint16 => fnv1(&(*u as u16).to_le_bytes()),
            UintKind::Uint32 => fnv1(&(*u as u32).to_le_bytes()),
            UintKind::Uintptr => {
                return Err("binary.Write: some values are not fixed-sized in type uintptr".to_owned());
            }
        },
        Value::Float(f, FloatKind::Float32) => fnv1(&(*f as f32).to_bits().to_le_bytes()),
        Value::Float(f, FloatKind::Float64) => fnv1(&f.to_bits().to_le_bytes()),
        Value::Complex(..) => return Err("unknown kind to hash: complex128".to_owned()),
        Value::String(s) => fnv1(s.as_bytes()),
        Value::List(list) => {
            let mut h = 0;
            for item in list.items() {
                h = ordered(h, hash(item)?);
            }
            h
        }
        Value::Map(map) => {
            let mut h = 0;
            for (key, value) in map.snapshot().iter() {
                h ^= ordered(hash(&key.to_value())?, hash(value)?);
            }
            h
        }
        Value::Object(obj) => {
            let type_name = obj.type_name();
            let name = type_name.to_str_lossy();
            let name = name.trim_start_matches('*');
            let name = name.rsplit('.').next().unwrap_or(name);
            let mut h = fnv1(name.as_bytes());
            for (field, value) in obj.fields().unwrap_or_default() {
                if !field.as_bytes().first().is_some_and(u8::is_ascii_uppercase) {
                    continue;
                }
                h ^= ordered(fnv1(field.as_bytes()), hash(&value)?);
            }
            h
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_gotmpl::{List, Map};

    #[test]
    fn matches_go_for_scalars() {
        assert_eq!(hash(&Value::string("a")), Ok(12638153115695167422));
        assert_eq!(hash(&Value::int(1)), Ok(16390143479181108970));
        assert_eq!(hash(&Value::Bool(true)), Ok(12638153115695167454));
        assert_eq!(hash(&Value::Nil), Ok(12161962213042174405));
        assert_eq!(hash(&Value::float(1.0)), Ok(12161874252111917546));
        assert_eq!(hash(&Value::string("1")), Ok(12638153115695167470));
    }

    #[test]
    fn matches_go_for_collections() {
        let list = Value::List(List::interfaces(vec![
            Value::int(1),
            Value::int(2),
            Value::int(3),
        ]));
        assert_eq!(hash(&list), Ok(6602429904429176298));
        let map = Value::Map(Map::string_interface([
            ("a", Value::int(1)),
            ("b", Value::string("x")),
        ]));
        assert_eq!(hash(&map), Ok(17144087709915182236));
    }

    #[test]
    fn complex_is_an_error() {
        assert!(hash(&Value::Complex(1.0, 0.0)).is_err());
    }
}
