//! Native stack growth at the recursion points of the parser, the executor and `fmt`.
//!
//! Go's goroutine stacks grow on demand, so Go parses and executes deeply nested templates
//! (and prints deeply nested values) that would overflow a fixed Rust thread stack. Every
//! recursion point goes through [`grow`], which continues on a fresh heap-allocated stack
//! segment when little native stack is left.

/// Stack space that must remain before a recursive call proceeds on the current stack.
const RED_ZONE: usize = 128 * 1024;

/// Size of each additional stack segment.
const SEGMENT: usize = 2 * 1024 * 1024;

/// Runs `f`, first switching to a new stack segment if the current one is nearly exhausted.
#[inline]
pub(crate) fn grow<R>(f: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(RED_ZONE, SEGMENT, f)
}
