//! Sprig's encoding and deterministic crypto functions (`strings.go`, `crypto.go`):
//! `b64enc`/`b64dec`, `b32enc`/`b32dec`, `sha1sum`, `sha256sum`, `adler32sum`,
//! `derivePassword` and `decryptAES`.
//!
//! The decoders are Go's own algorithms rather than a library's, because Sprig renders a
//! decoding error *as the output* (`b64dec "!"` prints `illegal base64 data at input byte 0`),
//! so the error offsets must be Go's.

use aes::Aes256;
use aes::cipher::{BlockDecrypt, KeyInit, generic_array::GenericArray};
use hmac::{Hmac, Mac};
use kalypso_gotmpl::{FuncError, FuncMap, Type, Value};
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::util::{arg_bytes, arg_int, func, register, string_value};

const BASE64_ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE32_ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Registers the encoding and crypto functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || Type::String;
    register(
        m,
        &["b64enc"],
        func(vec![s()], |a| Ok(Value::string(base64_encode(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["b64dec"],
        func(vec![s()], |a| {
            Ok(match base64_decode(arg_bytes(a, 0)) {
                Ok(b) => string_value(b),
                Err(e) => Value::string(e),
            })
        }),
    );
    register(
        m,
        &["b32enc"],
        func(vec![s()], |a| Ok(Value::string(base32_encode(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["b32dec"],
        func(vec![s()], |a| {
            Ok(match base32_decode(arg_bytes(a, 0)) {
                Ok(b) => string_value(b),
                Err(e) => Value::string(e),
            })
        }),
    );
    register(
        m,
        &["sha1sum"],
        func(vec![s()], |a| {
            Ok(Value::string(hex(&Sha1::digest(arg_bytes(a, 0)))))
        }),
    );
    register(
        m,
        &["sha256sum"],
        func(vec![s()], |a| {
            Ok(Value::string(hex(&Sha256::digest(arg_bytes(a, 0)))))
        }),
    );
    register(
        m,
        &["adler32sum"],
        func(vec![s()], |a| {
            Ok(Value::string(adler32(arg_bytes(a, 0)).to_string()))
        }),
    );
    register(
        m,
        &["derivePassword"],
        func(
            vec![Type::Uint(kalypso_gotmpl::UintKind::Uint32), s(), s(), s(), s()],
            |a| {
                Ok(string_value(derive_password(
                    arg_int(a, 0) as u32,
                    arg_bytes(a, 1),
                    arg_bytes(a, 2),
                    arg_bytes(a, 3),
                    arg_bytes(a, 4),
                )))
            },
        ),
    );
    register(
        m,
        &["decryptAES"],
        func(vec![s(), s()], |a| {
            decrypt_aes(arg_bytes(a, 0), arg_bytes(a, 1)).map(string_value)
        }),
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `hash/adler32.Checksum` (zlib's Adler-32).
fn adler32(data: &[u8]) -> u32 {
    adler2::adler32_slice(data)
}

/// `base64.StdEncoding.EncodeToString`.
pub(crate) fn base64_encode(src: &[u8]) -> String {
    let mut out = String::with_capacity(src.len().div_ceil(3) * 4);
    for chunk in src.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64_ALPHABET[((v >> (18 - 6 * i)) & 0x3F) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_value(c: u8) -> Option<u8> {
    BASE64_ALPHABET.iter().position(|&x| x == c).map(|p| p as u8)
}

fn base64_error(offset: usize) -> String {
    format!("illegal base64 data at input byte {offset}")
}

/// `base64.StdEncoding.DecodeString`, with Go's error offsets. Newlines are ignored.
pub(crate) fn base64_decode(src: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    loop {
        let mut dbuf = [0u8; 4];
        let mut dlen = 4;
        let mut trailing_error = None;
        let mut j = 0;
        let mut finished = false;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(base64_error(si - j));
            }
            let c = src[si];
            si += 1;
            if let Some(v) = base64_value(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(base64_error(si - 1));
            }
            // Padding: the end of the input.
            match j {
                0 | 1 => return Err(base64_error(si - 1)),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(base64_error(src.len()));
                    }
                    if src[si] != b'=' {
                        return Err(base64_error(si - 1));
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                trailing_error = Some(base64_error(si));
            }
            dlen = j;
            finished = true;
            break;
        }
        let val = (u32::from(dbuf[0]) << 18)
            | (u32::from(dbuf[1]) << 12)
            | (u32::from(dbuf[2]) << 6)
            | u32::from(dbuf[3]);
        let bytes = [(val >> 16) as u8, (val >> 8) as u8, val as u8];
        out.extend_from_slice(&bytes[..dlen - 1]);
        if let Some(e) = trailing_error {
            return Err(e);
        }
        if finished {
            return Ok(out);
        }
    }
}

/// `base32.StdEncoding.EncodeToString`.
fn base32_encode(src: &[u8]) -> String {
    let mut out = String::with_capacity(src.len().div_ceil(5) * 8);
    for chunk in src.chunks(5) {
        let mut b = [0u8; 5];
        b[..chunk.len()].copy_from_slice(chunk);
        let v = b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
        let chars = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < chars {
                out.push(char::from(BASE32_ALPHABET[((v >> (35 - 5 * i)) & 0x1F) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `base32.StdEncoding.DecodeString`, with Go's error offsets (counted after removing
/// newlines, as Go does).
fn base32_decode(input: &[u8]) -> Result<Vec<u8>, String> {
    let src: Vec<u8> = input
        .iter()
        .copied()
        .filter(|&c| c != b'\n' && c != b'\r')
        .collect();
    let err = |offset: usize| format!("illegal base32 data at input byte {offset}");
    let olen = src.len();
    let mut rest: &[u8] = &src;
    let mut out = Vec::new();
    let mut end = false;
    while !rest.is_empty() && !end {
        let mut dbuf = [0u8; 8];
        let mut dlen = 8;
        let mut j = 0;
        while j < 8 {
            if rest.is_empty() {
                return Err(err(olen - rest.len() - j));
            }
            let c = rest[0];
            rest = &rest[1..];
            if c == b'=' && j >= 2 && rest.len() < 8 {
                if rest.len() + j < 7 {
                    return Err(err(olen));
                }
                for k in 0..(7 - j) {
                    if rest.len() > k && rest[k] != b'=' {
                        return Err(err(olen - rest.len() + k - 1));
                    }
                }
                dlen = j;
                end = true;
                if dlen == 1 || dlen == 3 || dlen == 6 {
                    return Err(err(olen - rest.len() - 1));
                }
                break;
            }
            match BASE32_ALPHABET.iter().position(|&x| x == c) {
                Some(v) => dbuf[j] = v as u8,
                None => return Err(err(olen - rest.len() - 1)),
            }
            j += 1;
        }
        let d = dbuf;
        let bytes = [
            (d[0] << 3) | (d[1] >> 2),
            (d[1] << 6) | (d[2] << 1) | (d[3] >> 4),
            (d[3] << 4) | (d[4] >> 1),
            (d[4] << 7) | (d[5] << 2) | (d[6] >> 3),
            (d[6] << 5) | d[7],
        ];
        let n = match dlen {
            8 => 5,
            7 => 4,
            5 => 3,
            4 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

const MASTER_PASSWORD_SEED: &[u8] = b"com.lyndir.masterpassword";

fn password_templates(kind: &[u8]) -> Option<&'static [&'static str]> {
    Some(match kind {
        b"maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        b"long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        b"medium" => &["CvcnoCvc", "CvcCvcno"],
        b"short" => &["Cvcn"],
        b"basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        b"pin" => &["nnnn"],
        _ => return None,
    })
}

fn template_characters(class: u8) -> &'static [u8] {
    match class {
        b'V' => b"AEIOU",
        b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => b"aeiou",
        b'c' => b"bcdfghjklmnpqrstvwxyz",
        b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => b"0123456789",
        b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
        b'x' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
        _ => b"",
    }
}

/// Sprig's `derivePassword`: the Master Password algorithm (scrypt, then HMAC-SHA256).
fn derive_password(counter: u32, kind: &[u8], password: &[u8], user: &[u8], site: &[u8]) -> Vec<u8> {
    let Some(templates) = password_templates(kind) else {
        let mut msg = b"cannot find password template ".to_vec();
        msg.extend_from_slice(kind);
        return msg;
    };
    let mut salt = MASTER_PASSWORD_SEED.to_vec();
    salt.extend_from_slice(&(user.len() as u32).to_be_bytes());
    salt.extend_from_slice(user);
    let mut key = [0u8; 64];
    let params = match scrypt::Params::new(15, 8, 2, 64) {
        Ok(p) => p,
        Err(e) => return format!("failed to derive password: {e}").into_bytes(),
    };
    if let Err(e) = scrypt::scrypt(password, &salt, &params, &mut key) {
        return format!("failed to derive password: {e}").into_bytes();
    }
    let mut message = MASTER_PASSWORD_SEED.to_vec();
    message.extend_from_slice(&(site.len() as u32).to_be_bytes());
    message.extend_from_slice(site);
    message.extend_from_slice(&counter.to_be_bytes());
    let Ok(mut mac) = <Hmac<Sha256> as Mac>::new_from_slice(&key) else {
        return b"failed to derive password".to_vec();
    };
    mac.update(&message);
    let seed = mac.finalize().into_bytes();
    let template = templates[usize::from(seed[0]) % templates.len()].as_bytes();
    template
        .iter()
        .enumerate()
        .map(|(i, &class)| {
            let chars = template_characters(class);
            chars[usize::from(seed[i + 1]) % chars.len()]
        })
        .collect()
}

/// Sprig's `decryptAES`: AES-256-CBC with the IV in front and PKCS#7 padding, including the
/// Go panics on malformed input.
fn decrypt_aes(password: &[u8], crypt64: &[u8]) -> Result<Vec<u8>, FuncError> {
    if crypt64.is_empty() {
        return Ok(Vec::new());
    }
    let mut key = [0u8; 32];
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password[..n]);
    let crypt = base64_decode(crypt64).map_err(FuncError::new)?;
    if crypt.len() < 16 {
        let capacity = crypt64.iter().filter(|&&c| c != b'\n' && c != b'\r').count() / 4 * 3;
        return Err(FuncError::new(format!(
            "runtime error: slice bounds out of range [:16] with capacity {}",
            capacity.max(crypt.len())
        )));
    }
    let (iv, body) = crypt.split_at(16);
    if body.len() % 16 != 0 {
        return Err(FuncError::new("crypto/cipher: input not full blocks"));
    }
    let cipher = Aes256::new(GenericArray::from_slice(&key));
    let mut prev = [0u8; 16];
    prev.copy_from_slice(iv);
    let mut out = Vec::with_capacity(body.len());
    for block in body.chunks(16) {
        let mut b = GenericArray::clone_from_slice(block);
        cipher.decrypt_block(&mut b);
        for (x, p) in b.iter_mut().zip(prev.iter()) {
            *x ^= p;
        }
        out.extend_from_slice(&b);
        prev.copy_from_slice(block);
    }
    let Some(&last) = out.last() else {
        return Err(FuncError::new("runtime error: index out of range [-1]"));
    };
    let keep = out.len() as i64 - i64::from(last);
    if keep < 0 {
        return Err(FuncError::new(format!(
            "runtime error: slice bounds out of range [:{keep}]"
        )));
    }
    out.truncate(keep as usize);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_roundtrip_and_errors() {
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_decode(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode(b"aGVs\nbG8=").unwrap(), b"hello");
        assert_eq!(
            base64_decode(b"!!").unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            base64_decode(b"YQ").unwrap_err(),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            base64_decode(b"YQ=").unwrap_err(),
            "illegal base64 data at input byte 3"
        );
        assert_eq!(
            base64_decode(b"YQ==YQ==").unwrap_err(),
            "illegal base64 data at input byte 4"
        );
    }

    #[test]
    fn base32_roundtrip_and_errors() {
        assert_eq!(base32_encode(b"Hello, World"), "JBSWY3DPFQQFO33SNRSA====");
        assert_eq!(base32_decode(b"NBSWY3DP").unwrap(), b"hello");
        assert_eq!(
            base32_decode(b"JBSWY3DPFQQFO33SNRSA====").unwrap(),
            b"Hello, World"
        );
        assert_eq!(
            base32_decode(b"1").unwrap_err(),
            "illegal base32 data at input byte 0"
        );
        assert_eq!(
            base32_decode(b"NBSW").unwrap_err(),
            "illegal base32 data at input byte 0"
        );
    }

    #[test]
    fn checksums() {
        assert_eq!(adler32(b"Wikipedia"), 300_286_872);
        assert_eq!(
            hex(&Sha256::digest(b"")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn derive_password_matches_sprig() {
        assert_eq!(
            derive_password(1, b"long", b"password", b"user", b"example.com"),
            b"ZedaFaxcZaso9*"
        );
        assert_eq!(
            derive_password(1, b"nope", b"p", b"u", b"s"),
            b"cannot find password template nope"
        );
    }

    #[test]
    fn decrypt_aes_errors() {
        assert_eq!(decrypt_aes(b"k", b"").unwrap(), b"");
        assert!(decrypt_aes(b"k", b"YQ==").is_err());
    }
}
