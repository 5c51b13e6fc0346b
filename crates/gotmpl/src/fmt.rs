//! Go's `fmt` printing of [`Value`]s: `Sprint`, `Sprintln`, `Sprintf` with every verb, flag,
//! width and precision, and Go's `%!verb(type=value)` error notation.

use crate::value::Value;

/// `fmt.Sprint(args...)`: operands printed with `%v`, a space between operands when neither
/// side is a string.
pub fn sprint(args: &[Value]) -> Vec<u8> {
    let _ = args;
    unimplemented!("fmt::sprint")
}

/// `fmt.Sprintln(args...)`: operands printed with `%v`, always space-separated, newline added.
pub fn sprintln(args: &[Value]) -> Vec<u8> {
    let _ = args;
    unimplemented!("fmt::sprintln")
}

/// `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &[u8], args: &[Value]) -> Vec<u8> {
    let _ = (format, args);
    unimplemented!("fmt::sprintf")
}

/// `fmt.Sprint(v)` of a single value, i.e. `%v` (what Sprig's `toString` produces).
pub fn sprint_value(v: &Value) -> Vec<u8> {
    sprint(std::slice::from_ref(v))
}
