//! Go's `text/template`, reimplemented in Rust with Go's observable behaviour.
//!
//! Templates written for the Go Kalypso scheduler must render byte for byte as Go renders
//! them, errors included. This crate holds only Go semantics (the template language, its
//! builtin functions, Go's value model and `fmt` printing); Sprig and the Kalypso functions
//! live in their own crates and register into a [`FuncMap`].
//!
//! A [`Template`] is parsed once and can be executed any number of times, from any number of
//! threads. Execution is bounded by [`Limits`] so that hostile templates fail with an error
//! instead of hanging or exhausting memory.

pub mod budget;
pub mod fmt;
pub mod strconv;
pub mod unicode;

mod ast;
mod builtins;
mod error;
mod exec;
mod lex;
mod parse;
mod reflect;
mod stack;
mod str;
mod template;
mod unicode_tables;
mod value;

pub use budget::Limits;
pub use error::{Error, ErrorKind};
pub use str::Str;
pub use template::Template;
pub use value::func::{Func, FuncError, FuncMap, FuncResult};
pub use value::{Entries, FloatKind, IntKind, List, Map, MapKey, Obj, Object, Struct, Type, UintKind, Value};
