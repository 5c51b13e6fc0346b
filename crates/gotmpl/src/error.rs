//! Template errors, formatted with Go's message text.

use std::fmt;

/// What went wrong.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The template text did not parse (Go's `Parse` error).
    Parse,
    /// Execution failed (Go's `Execute` error).
    Exec,
    /// Execution exceeded a [`crate::Limits`] bound.
    Limit,
}

/// A parse or execution error. `Display` prints Go's text, e.g.
/// `template: template:1:3: executing "template" at <len 3>: error calling len: ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of the given kind with Go's full message text.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Go's message text.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
