//! Sprig's `urlParse` and `urlJoin` (`url.go`), on a port of the parts of Go's `net/url`
//! they use: `url.Parse`, `URL.String`, `Hostname`, and Go's escaping rules per URL part.

use kalypso_gotmpl::{FuncError, FuncMap, FuncResult, Map, Type, Value};

use crate::util::{NIL_DEREF, arg_bytes, arg_map, dict_type, func, go_quote, register, skey};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    UserPassword,
    Fragment,
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            return match mode {
                Mode::Path => c == b'?',
                Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
                Mode::Fragment => false,
                Mode::Host => true,
            };
        }
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn escape(s: &[u8], mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s {
        if should_escape(c, mode) {
            out.push_str(&format!("%{c:02X}"));
        } else {
            out.push(char::from(c));
        }
    }
    out
}

fn unescape(s: &[u8], mode: Mode) -> Result<Vec<u8>, String> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                if i + 2 >= s.len() || !s[i + 1].is_ascii_hexdigit() || !s[i + 2].is_ascii_hexdigit() {
                    let end = (i + 3).min(s.len());
                    return Err(format!("invalid URL escape {}", go_quote(&s[i..end])));
                }
                let hi = char::from(s[i + 1]).to_digit(16).unwrap_or(0);
                if mode == Mode::Host && hi < 8 && &s[i..i + 3] != b"%25" {
                    return Err(format!("invalid URL escape {}", go_quote(&s[i..i + 3])));
                }
                i += 3;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&s[i..i + 1])
                    ));
                }
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            let h = |c: u8| char::from(c).to_digit(16).unwrap_or(0) as u8;
            out.push(h(s[i + 1]) << 4 | h(s[i + 2]));
            i += 3;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn valid_optional_port(port: &[u8]) -> bool {
    port.is_empty() || (port[0] == b':' && port[1..].iter().all(u8::is_ascii_digit))
}

/// A parsed URL (the fields Sprig reads).
#[derive(Default, Debug)]
struct Url {
    scheme: Vec<u8>,
    opaque: Vec<u8>,
    user: Option<(Vec<u8>, Option<Vec<u8>>)>,
    host: Vec<u8>,
    path: Vec<u8>,
    raw_path: Vec<u8>,
    omit_host: bool,
    force_query: bool,
    raw_query: Vec<u8>,
    fragment: Vec<u8>,
    raw_fragment: Vec<u8>,
}

fn parse_host(host: &[u8]) -> Result<Vec<u8>, String> {
    if host.first() == Some(&b'[') {
        let Some(i) = host.iter().rposition(|&c| c == b']') else {
            return Err("missing ']' in host".to_owned());
        };
        let port = &host[i + 1..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
    } else if let Some(i) = host.iter().rposition(|&c| c == b':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {} after host", go_quote(port)));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_userinfo(s: &[u8]) -> bool {
    s.iter()
        .all(|&c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c))
}

/// Go's `url.Parse`; errors are the `*url.Error` text.
fn parse(raw: &[u8]) -> Result<Url, String> {
    let (u, frag) = match raw.iter().position(|&c| c == b'#') {
        Some(i) => (&raw[..i], Some(&raw[i + 1..])),
        None => (raw, None),
    };
    let wrap = |url: &[u8], e: String| format!("parse {}: {e}", go_quote(url));
    let mut url = parse_without_fragment(u).map_err(|e| wrap(u, e))?;
    if let Some(frag) = frag
        && !frag.is_empty()
    {
        url.fragment = unescape(frag, Mode::Fragment).map_err(|e| wrap(raw, e))?;
        if escape(&url.fragment, Mode::Fragment).as_bytes() != frag {
            url.raw_fragment = frag.to_vec();
        }
    }
    Ok(url)
}

fn parse_without_fragment(raw: &[u8]) -> Result<Url, String> {
    if raw.iter().any(|&c| c < 0x20 || c == 0x7F) {
        return Err("net/url: invalid control character in URL".to_owned());
    }
    let mut url = Url::default();
    if raw == b"*" {
        url.path = b"*".to_vec();
        return Ok(url);
    }
    // Scheme.
    let mut rest = raw;
    for (i, &c) in raw.iter().enumerate() {
        if c.is_ascii_alphabetic() {
            continue;
        }
        if c.is_ascii_digit() || c == b'+' || c == b'-' || c == b'.' {
            if i == 0 {
                break;
            }
            continue;
        }
        if c == b':' {
            if i == 0 {
                return Err("missing protocol scheme".to_owned());
            }
            url.scheme = raw[..i].to_ascii_lowercase();
            rest = &raw[i + 1..];
        }
        break;
    }
    let qcount = rest.iter().filter(|&&c| c == b'?').count();
    if rest.last() == Some(&b'?') && qcount == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some(i) = rest.iter().position(|&c| c == b'?') {
        url.raw_query = rest[i + 1..].to_vec();
        rest = &rest[..i];
    }
    if rest.first() != Some(&b'/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_vec();
            return Ok(url);
        }
        let segment = rest.split(|&c| c == b'/').next().unwrap_or(&[]);
        if segment.contains(&b':') {
            return Err("first path segment in URL cannot contain colon".to_owned());
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with(b"///")) && rest.starts_with(b"//") {
        let mut authority = &rest[2..];
        rest = &[];
        if let Some(i) = authority.iter().position(|&c| c == b'/') {
            rest = &authority[i..];
            authority = &authority[..i];
        }
        let at = authority.iter().rposition(|&c| c == b'@');
        let host_part = match at {
            Some(i) => &authority[i + 1..],
            None => authority,
        };
        url.host = parse_host(host_part)?;
        if let Some(i) = at {
            let userinfo = &authority[..i];
            if !valid_userinfo(userinfo) {
                return Err("net/url: invalid userinfo".to_owned());
            }
            url.user = Some(match userinfo.iter().position(|&c| c == b':') {
                None => (unescape(userinfo, Mode::UserPassword)?, None),
                Some(j) => (
                    unescape(&userinfo[..j], Mode::UserPassword)?,
                    Some(unescape(&userinfo[j + 1..], Mode::UserPassword)?),
                ),
            });
        }
    } else if !url.scheme.is_empty() && rest.first() == Some(&b'/') {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    if escape(&url.path, Mode::Path).as_bytes() != rest {
        url.raw_path = rest.to_vec();
    }
    Ok(url)
}

fn userinfo_string(user: &(Vec<u8>, Option<Vec<u8>>)) -> String {
    let mut s = escape(&user.0, Mode::UserPassword);
    if let Some(p) = &user.1 {
        s.push(':');
        s.push_str(&escape(p, Mode::UserPassword));
    }
    s
}

/// Go's `URL.Hostname`.
fn hostname(host: &[u8]) -> Vec<u8> {
    let mut h = host;
    if let Some(i) = h.iter().rposition(|&c| c == b':')
        && valid_optional_port(&h[i..])
    {
        h = &h[..i];
    }
    if h.first() == Some(&b'[') && h.last() == Some(&b']') {
        h = &h[1..h.len() - 1];
    }
    h.to_vec()
}

/// Go's `URL.String` for a URL built from parts (no raw path or fragment hints).
fn url_string(u: &Url) -> String {
    let mut buf = String::new();
    if !u.scheme.is_empty() {
        buf.push_str(&String::from_utf8_lossy(&u.scheme));
        buf.push(':');
    }
    if !u.opaque.is_empty() {
        buf.push_str(&String::from_utf8_lossy(&u.opaque));
    } else {
        if (!u.scheme.is_empty() || !u.host.is_empty() || u.user.is_some())
            && (!u.omit_host || !u.host.is_empty() || u.user.is_some())
        {
            if !u.host.is_empty() || !u.path.is_empty() || u.user.is_some() {
                buf.push_str("//");
            }
            if let Some(user) = &u.user {
                buf.push_str(&userinfo_string(user));
                buf.push('@');
            }
            if !u.host.is_empty() {
                buf.push_str(&escape(&u.host, Mode::Host));
            }
        }
        let path = if u.path == b"*" {
            "*".to_owned()
        } else {
            escape(&u.path, Mode::Path)
        };
        if !path.is_empty() && !path.starts_with('/') && !u.host.is_empty() {
            buf.push('/');
        }
        if buf.is_empty() {
            let segment = path.split('/').next().unwrap_or("");
            if segment.contains(':') {
                buf.push_str("./");
            }
        }
        buf.push_str(&path);
    }
    if u.force_query || !u.raw_query.is_empty() {
        buf.push('?');
        buf.push_str(&String::from_utf8_lossy(&u.raw_query));
    }
    if !u.fragment.is_empty() {
        buf.push('#');
        buf.push_str(&escape(&u.fragment, Mode::Fragment));
    }
    buf
}

fn url_parse(raw: &[u8]) -> FuncResult {
    let u = parse(raw).map_err(|e| FuncError::new(format!("unable to parse url: {e}")))?;
    let d = Map::new(Type::String, Type::Interface);
    let s = |b: &[u8]| crate::util::string_value(b.to_vec());
    d.insert(skey("scheme"), s(&u.scheme));
    d.insert(skey("host"), s(&u.host));
    d.insert(skey("hostname"), s(&hostname(&u.host)));
    d.insert(skey("path"), s(&u.path));
    d.insert(skey("query"), s(&u.raw_query));
    d.insert(skey("opaque"), s(&u.opaque));
    d.insert(skey("fragment"), s(&u.fragment));
    d.insert(
        skey("userinfo"),
        Value::string(u.user.as_ref().map(userinfo_string).unwrap_or_default()),
    );
    Ok(Value::Map(d))
}

/// Sprig's `dictGetOrEmpty`: a string entry, "" when missing, a panic for other types.
fn dict_string(d: &Map, key: &str) -> Result<Vec<u8>, FuncError> {
    match d.get_str(key) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(Value::Nil) => Err(FuncError::new(NIL_DEREF)),
        Some(other) => Err(FuncError::new(format!(
            "unable to parse {key} key, must be of type string, but {} found",
            other.kind_name()
        ))),
    }
}

fn url_join(d: &Map) -> FuncResult {
    let mut u = Url {
        scheme: dict_string(d, "scheme")?,
        host: dict_string(d, "host")?,
        path: dict_string(d, "path")?,
        raw_query: dict_string(d, "query")?,
        opaque: dict_string(d, "opaque")?,
        fragment: dict_string(d, "fragment")?,
        ..Url::default()
    };
    let userinfo = dict_string(d, "userinfo")?;
    if !userinfo.is_empty() {
        let mut raw = b"proto://".to_vec();
        raw.extend_from_slice(&userinfo);
        raw.extend_from_slice(b"@host");
        let parsed =
            parse(&raw).map_err(|e| FuncError::new(format!("unable to parse userinfo in dict: {e}")))?;
        u.user = parsed.user;
    }
    Ok(Value::string(url_string(&u)))
}

/// Registers `urlParse` and `urlJoin`.
pub(crate) fn register_all(m: &mut FuncMap) {
    register(
        m,
        &["urlParse"],
        func(vec![Type::String], |a| url_parse(arg_bytes(a, 0))),
    );
    register(
        m,
        &["urlJoin"],
        func(vec![dict_type()], |a| url_join(&arg_map(a, 0))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_join_roundtrip() {
        let u = parse(b"https://user:pw@example.com:8443/a%20b/c?x=1&y=2#frag").unwrap();
        assert_eq!(u.scheme, b"https");
        assert_eq!(u.host, b"example.com:8443");
        assert_eq!(hostname(&u.host), b"example.com");
        assert_eq!(u.path, b"/a b/c");
        assert_eq!(u.raw_query, b"x=1&y=2");
        assert_eq!(u.fragment, b"frag");
        assert_eq!(userinfo_string(u.user.as_ref().unwrap()), "user:pw");
        let joined = Url {
            scheme: b"http".to_vec(),
            host: b"h".to_vec(),
            path: b"/a b".to_vec(),
            raw_query: b"q=1".to_vec(),
            ..Url::default()
        };
        assert_eq!(url_string(&joined), "http://h/a%20b?q=1");
        assert_eq!(
            parse(b"http://[::1").unwrap_err(),
            "parse \"http://[::1\": missing ']' in host"
        );
    }
}
