//! Sprig's path functions: `base`, `dir`, `clean`, `ext`, `isAbs` (Go's `path`) and their
//! `os*` twins (Go's `path/filepath`, which on the Linux original behaves identically).

use kalypso_gotmpl::{FuncMap, Type, Value};

use crate::util::{arg_bytes, func, register, string_value};

/// Go's `path.Clean`: lexical normalization of a slash-separated path.
pub(crate) fn clean(path: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        return b".".to_vec();
    }
    let rooted = path[0] == b'/';
    let n = path.len();
    let mut out: Vec<u8> = Vec::with_capacity(n);
    let (mut r, mut dotdot) = (0usize, 0usize);
    if rooted {
        out.push(b'/');
        r = 1;
        dotdot = 1;
    }
    while r < n {
        let empty_or_dot = path[r] == b'/' || (path[r] == b'.' && (r + 1 == n || path[r + 1] == b'/'));
        if empty_or_dot {
            r += 1;
        } else if path[r] == b'.' && path[r + 1] == b'.' && (r + 2 == n || path[r + 2] == b'/') {
            r += 2;
            if out.len() > dotdot {
                let mut w = out.len() - 1;
                while w > dotdot && out[w] != b'/' {
                    w -= 1;
                }
                out.truncate(w);
            } else if !rooted {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(b"..");
                dotdot = out.len();
            }
        } else {
            if (rooted && out.len() != 1) || (!rooted && !out.is_empty()) {
                out.push(b'/');
            }
            while r < n && path[r] != b'/' {
                out.push(path[r]);
                r += 1;
            }
        }
    }
    if out.is_empty() {
        return b".".to_vec();
    }
    out
}

/// Go's `path.Base`.
fn base(path: &[u8]) -> Vec<u8> {
    if path.is_empty() {
        return b".".to_vec();
    }
    let mut p = path;
    while let [rest @ .., b'/'] = p {
        p = rest;
    }
    if let Some(i) = p.iter().rposition(|&c| c == b'/') {
        p = &p[i + 1..];
    }
    if p.is_empty() {
        return b"/".to_vec();
    }
    p.to_vec()
}

/// Go's `path.Dir`.
fn dir(path: &[u8]) -> Vec<u8> {
    let split = path.iter().rposition(|&c| c == b'/').map_or(0, |i| i + 1);
    clean(&path[..split])
}

/// Go's `path.Ext`.
fn ext(path: &[u8]) -> Vec<u8> {
    for i in (0..path.len()).rev() {
        match path[i] {
            b'/' => break,
            b'.' => return path[i..].to_vec(),
            _ => {}
        }
    }
    Vec::new()
}

/// Registers the path functions.
pub(crate) fn register_all(m: &mut FuncMap) {
    let s = || vec![Type::String];
    register(
        m,
        &["base", "osBase"],
        func(s(), |a| Ok(string_value(base(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["dir", "osDir"],
        func(s(), |a| Ok(string_value(dir(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["clean", "osClean"],
        func(s(), |a| Ok(string_value(clean(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["ext", "osExt"],
        func(s(), |a| Ok(string_value(ext(arg_bytes(a, 0))))),
    );
    register(
        m,
        &["isAbs", "osIsAbs"],
        func(s(), |a| Ok(Value::Bool(arg_bytes(a, 0).first() == Some(&b'/')))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: Vec<u8>) -> String {
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn path_functions_follow_go() {
        assert_eq!(s(clean(b"a//b/../c/")), "a/c");
        assert_eq!(s(clean(b"/../x")), "/x");
        assert_eq!(s(clean(b"../../a/..")), "../..");
        assert_eq!(s(clean(b"")), ".");
        assert_eq!(s(base(b"/usr/local/bin/tool.tar.gz")), "tool.tar.gz");
        assert_eq!(s(base(b"///")), "/");
        assert_eq!(s(base(b"")), ".");
        assert_eq!(s(dir(b"/usr/local/bin/tool.tar.gz")), "/usr/local/bin");
        assert_eq!(s(dir(b"")), ".");
        assert_eq!(s(ext(b"/a/b.txt")), ".txt");
        assert_eq!(s(ext(b"/a.d/b")), "");
    }
}
