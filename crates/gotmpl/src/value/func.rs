//! Functions callable from templates, declared with Go parameter types.
//!
//! Go's executor checks and converts every argument against the parameter types of the Go
//! function it calls: a literal `1` passed to a `float64` parameter becomes `1.0`, a `string`
//! parameter rejects `1` with "expected string; found 1", and a `map[string]interface {}`
//! parameter rejects a `map[string]string` with "wrong type for value". Those rules shape
//! both output and error behaviour, so a [`Func`] declares its parameters as [`Type`]s and the
//! executor applies Go's rules before calling the body with already-converted arguments.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::{Type, Value};

/// The error a function returns (Go's `error` result, or a recovered panic). The executor
/// reports it as `error calling NAME: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncError {
    message: String,
    limit: bool,
}

impl FuncError {
    /// An error with Go's message text.
    pub fn new(message: impl Into<String>) -> FuncError {
        FuncError {
            message: message.into(),
            limit: false,
        }
    }

    /// An error for a call that would exceed a limit of the execution (see
    /// [`crate::budget`]): the executor reports it as an [`crate::ErrorKind::Limit`] error.
    pub fn limit(message: impl Into<String>) -> FuncError {
        FuncError {
            message: message.into(),
            limit: true,
        }
    }

    /// Whether the call was stopped by a limit.
    pub fn is_limit(&self) -> bool {
        self.limit
    }

    /// The message text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for FuncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FuncError {}

/// The result of calling a function.
pub type FuncResult = Result<Value, FuncError>;

type Body = dyn Fn(&[Value]) -> FuncResult + Send + Sync;

/// The body of a function whose result is a string, appending it to a buffer.
pub(crate) type WriteBody = dyn Fn(&[Value], &mut Vec<u8>) -> Result<(), FuncError> + Send + Sync;

/// A function with a Go signature.
///
/// The body receives the fixed arguments followed by the variadic ones, each already
/// converted to its declared type (an `interface {}` parameter receives any value,
/// including [`Value::Nil`]).
#[derive(Clone)]
pub struct Func {
    params: Arc<[Type]>,
    variadic: Option<Type>,
    body: Arc<Body>,
    /// For a function made with [`Func::string`]: its body, which appends.
    write: Option<Arc<WriteBody>>,
}

impl Func {
    /// A function with fixed parameters: `func(p0, p1, ...) T`.
    pub fn new(
        params: impl Into<Vec<Type>>,
        body: impl Fn(&[Value]) -> FuncResult + Send + Sync + 'static,
    ) -> Func {
        Func {
            params: params.into().into(),
            variadic: None,
            body: Arc::new(body),
            write: None,
        }
    }

    /// A variadic function: `func(p0, ..., rest ...V) T`.
    pub fn variadic(
        params: impl Into<Vec<Type>>,
        rest: Type,
        body: impl Fn(&[Value]) -> FuncResult + Send + Sync + 'static,
    ) -> Func {
        Func {
            params: params.into().into(),
            variadic: Some(rest),
            body: Arc::new(body),
            write: None,
        }
    }

    /// A function whose result is a string (`func(p0, ..., rest ...V) string` when `rest`
    /// is given), made by appending it to a buffer: `write(args, out)` appends the result to
    /// `out`, or returns an error (having appended anything). An action that prints the
    /// function's result (`{{ .X | quote }}`) has it appended straight to the template's
    /// output; elsewhere the result is a string value built the same way.
    pub fn string(
        params: impl Into<Vec<Type>>,
        rest: Option<Type>,
        write: impl Fn(&[Value], &mut Vec<u8>) -> Result<(), FuncError> + Send + Sync + 'static,
    ) -> Func {
        let write: Arc<WriteBody> = Arc::new(write);
        let written = Arc::clone(&write);
        Func {
            params: params.into().into(),
            variadic: rest,
            body: Arc::new(move |args: &[Value]| {
                let mut out = Vec::new();
                written(args, &mut out)?;
                Ok(Value::String(crate::Str::from_bytes(out)))
            }),
            write: Some(write),
        }
    }

    /// The appending body of a function made with [`Func::string`].
    pub(crate) fn write_body(&self) -> Option<&WriteBody> {
        self.write.as_deref()
    }

    /// The fixed parameter types.
    pub fn params(&self) -> &[Type] {
        &self.params
    }

    /// The element type of the variadic parameter, if the function is variadic.
    pub fn variadic_type(&self) -> Option<&Type> {
        self.variadic.as_ref()
    }

    /// The type of the `i`th argument, or `None` past the end of a non-variadic signature.
    pub fn arg_type(&self, i: usize) -> Option<&Type> {
        self.params.get(i).or(self.variadic.as_ref())
    }

    /// Calls the body with converted arguments.
    pub fn call(&self, args: &[Value]) -> FuncResult {
        (self.body)(args)
    }
}

impl fmt::Debug for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("func(")?;
        for (i, p) in self.params.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p}")?;
        }
        if let Some(rest) = &self.variadic {
            if !self.params.is_empty() {
                f.write_str(", ")?;
            }
            write!(f, "...{rest}")?;
        }
        f.write_str(")")
    }
}

/// Named functions, like Go's `template.FuncMap`. Names here take precedence over the
/// built-in functions of the same name (Sprig's `slice` replaces the builtin).
#[derive(Clone, Default, Debug)]
pub struct FuncMap {
    funcs: HashMap<String, Func>,
}

impl FuncMap {
    /// An empty map.
    pub fn new() -> FuncMap {
        FuncMap::default()
    }

    /// Adds or replaces a function.
    pub fn insert(&mut self, name: impl Into<String>, func: Func) {
        self.funcs.insert(name.into(), func);
    }

    /// Removes a function.
    pub fn remove(&mut self, name: &str) -> Option<Func> {
        self.funcs.remove(name)
    }

    /// The function called `name`.
    pub fn get(&self, name: &str) -> Option<&Func> {
        self.funcs.get(name)
    }

    /// Whether a function called `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    /// Adds or replaces every function of `other`.
    pub fn extend(&mut self, other: FuncMap) {
        self.funcs.extend(other.funcs);
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.funcs.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }
}
