//! Diagnostics: every problem the pipeline finds, with the file, object and field it is about.
//!
//! The pipeline does not stop at the first problem. Each stage records what it finds and
//! carries on where it sensibly can, so that `kalypso validate` and a failed `render` list
//! everything that needs fixing in one go, the way a compiler does.

use std::fmt;
use std::sync::Arc;

use kalypso_api::Kind;

/// Where an object was read from: a file of a source tree and the line its document starts on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// The file, as shown to users (`dev/cluster-types/large.yaml`).
    pub file: Arc<str>,
    /// 1-based line of the object's document (0 when unknown, e.g. objects from a cluster).
    pub line: u32,
}

impl Origin {
    /// An origin at `line` of `file`.
    pub fn new(file: impl Into<Arc<str>>, line: u32) -> Origin {
        Origin {
            file: file.into(),
            line,
        }
    }

    /// The same file, another line.
    pub fn at_line(&self, line: u32) -> Origin {
        Origin {
            file: self.file.clone(),
            line,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = escape(&self.file);
        if self.line > 0 {
            write!(f, "{file}:{}", self.line)
        } else {
            write!(f, "{file}")
        }
    }
}

/// `text` with control characters (newline, ESC...) written as escapes (`\n`, `\u{1b}`),
/// so that a file or key name cannot break a diagnostic's line or drive the terminal.
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Worth knowing; the output is still produced.
    Warning,
    /// The environment cannot be rendered.
    Error,
}

/// One problem found in the control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// How serious it is.
    pub severity: Severity,
    /// A stable identifier of the kind of problem (`yaml`, `duplicate-name`, `template-missing`...).
    pub code: &'static str,
    /// What is wrong, in a sentence that names the thing.
    pub message: String,
    /// Where the offending object was read from.
    pub origin: Option<Origin>,
    /// The offending object.
    pub object: Option<(Kind, String)>,
    /// The offending field, as a path (`spec.clusterTypeSelector.labelSelector`).
    pub field: Option<String>,
    /// The WorkloadRegistration whose files it was found in (what fails with it when a run
    /// isolates failures: see [`crate::run::Isolation`]).
    pub registration: Option<String>,
}

impl Diagnostic {
    /// An error.
    pub fn error(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            origin: None,
            object: None,
            field: None,
            registration: None,
        }
    }

    /// A warning.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    /// Attaches the origin.
    pub fn at(mut self, origin: &Origin) -> Diagnostic {
        self.origin = Some(origin.clone());
        self
    }

    /// Attaches the object.
    pub fn on(mut self, kind: Kind, name: impl Into<String>) -> Diagnostic {
        self.object = Some((kind, name.into()));
        self
    }

    /// Attaches the field path.
    pub fn field(mut self, field: impl Into<String>) -> Diagnostic {
        self.field = Some(field.into());
        self
    }

    /// Records the WorkloadRegistration whose files it was found in.
    pub fn in_registration(mut self, name: impl Into<String>) -> Diagnostic {
        self.registration = Some(name.into());
        self
    }

    /// Whether this is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}[{}]: ", self.code)?;
        if let Some(origin) = &self.origin {
            write!(f, "{origin}: ")?;
        }
        match &self.object {
            Some((kind, name)) if name.is_empty() => write!(f, "{kind} without a name: ")?,
            Some((kind, name)) => write!(f, "{kind} {name:?}: ")?,
            None => {}
        }
        if let Some(field) = &self.field {
            write!(f, "{}: ", escape(field))?;
        }
        f.write_str(&self.message)
    }
}

/// The diagnostics of a run, in the order they were found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// No diagnostics.
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    /// Records a diagnostic.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Adds copies of `items`.
    pub fn extend_from(&mut self, items: &[Diagnostic]) {
        for d in items {
            self.push(d.clone());
        }
    }

    /// Records all of `other`.
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    /// Whether any error was recorded.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter().filter(|d| d.is_error())
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter().filter(|d| !d.is_error())
    }

    /// Everything, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }

    /// Number of diagnostics.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Records, on every diagnostic, the WorkloadRegistration whose files it was found in.
    pub fn in_registration(mut self, name: &str) -> Diagnostics {
        for d in &mut self.items {
            d.registration = Some(name.to_owned());
        }
        self
    }

    /// Turns warnings into errors (`validate --strict`).
    pub fn make_warnings_errors(&mut self) {
        for d in &mut self.items {
            d.severity = Severity::Error;
        }
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.items {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_origin_object_and_field_once_each() {
        let d = Diagnostic::error("invalid-name", "required field is missing")
            .at(&Origin::new("dev/ct.yaml", 3))
            .on(Kind::ClusterType, "")
            .field("metadata.name");
        assert_eq!(
            d.to_string(),
            "error[invalid-name]: dev/ct.yaml:3: ClusterType without a name: metadata.name: required field is missing"
        );
        let w = Diagnostic::warning("w", "text").on(Kind::Template, "t");
        assert_eq!(w.to_string(), "warning[w]: Template \"t\": text");
    }
}
