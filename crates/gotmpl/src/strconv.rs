//! Go's `strconv` conversions that output formats depend on.

/// `strconv.FormatFloat(f, fmt, prec, bitSize)`: `fmt` is one of `b'e' b'E' b'f' b'g' b'G'`,
/// `prec` -1 means the shortest representation that round-trips.
pub fn format_float(f: f64, fmt: u8, prec: i32, bit_size: u32) -> String {
    let _ = (f, fmt, prec, bit_size);
    unimplemented!("strconv::format_float")
}

/// `strconv.Quote(s)`: a double-quoted Go string literal, escaping non-printable runes and
/// invalid UTF-8 bytes as Go does.
pub fn quote(s: &[u8]) -> String {
    let _ = s;
    unimplemented!("strconv::quote")
}
