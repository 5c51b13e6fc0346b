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
    /// 1-based line: of the object's document, or of the field a diagnostic is about (0 when
    /// unknown, e.g. objects from a cluster).
    pub line: u32,
    /// 1-based column of the field a diagnostic is about (0 when it names a document or
    /// a line).
    pub column: u32,
}

impl Origin {
    /// An origin at `line` of `file`.
    pub fn new(file: impl Into<Arc<str>>, line: u32) -> Origin {
        Origin {
            file: file.into(),
            line,
            column: 0,
        }
    }

    /// The same file, another line.
    pub fn at_line(&self, line: u32) -> Origin {
        Origin::new(self.file.clone(), line)
    }

    /// `file` at `line` and `column` (both 1-based).
    pub fn at(file: &Arc<str>, line: u32, column: u32) -> Origin {
        Origin {
            file: file.clone(),
            line,
            column,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = escape(&self.file);
        if self.line > 0 && self.column > 0 {
            write!(f, "{file}:{}:{}", self.line, self.column)
        } else if self.line > 0 {
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

/// Declares [`Code`] with each variant's stable text once.
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)+) => {
        /// The kind of a problem: a stable identifier that scripts may match on. Each code is
        /// explained in `docs/errors.md`, in this order (a test keeps the two the same).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($(#[$doc])* $variant,)+
        }

        impl Code {
            /// Every code, in the order `docs/errors.md` lists them.
            pub const ALL: &'static [Code] = &[$(Code::$variant),+];

            /// The code as users see it (`duplicate-key`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $text,)+
                }
            }
        }
    };
}

codes! {
    /// `yaml`: A file is not valid YAML or not UTF-8.
    Yaml => "yaml",
    /// `yaml-limit`: A YAML document exceeds a depth, alias or size limit.
    YamlLimit => "yaml-limit",
    /// `duplicate-key`: A mapping has the same key twice.
    DuplicateKey => "duplicate-key",
    /// `not-an-object`: A document is not an object, or lacks `apiVersion`/`kind`.
    NotAnObject => "not-an-object",
    /// `unknown-kind`: A `scheduler.kalypso.io` kind or version the scheduler does not have.
    UnknownKind => "unknown-kind",
    /// `invalid-object`: A field is missing or has the wrong type.
    InvalidObject => "invalid-object",
    /// `unknown-field`: A field the scheduler does not know; it is ignored.
    UnknownField => "unknown-field",
    /// `legacy-manifest`: A Template manifest written as a mapping.
    LegacyManifest => "legacy-manifest",
    /// `schema-draft`: A config schema declares a draft other than the one Helm uses.
    SchemaDraft => "schema-draft",
    /// `invalid-name`: An object name Kubernetes would refuse.
    InvalidName => "invalid-name",
    /// `invalid-label`: A label key or value Kubernetes would refuse.
    InvalidLabel => "invalid-label",
    /// `invalid-config-key`: A ConfigMap key Kubernetes would refuse.
    InvalidConfigKey => "invalid-config-key",
    /// `invalid-namespace`: An assignment namespace that is not a DNS-1123 label.
    InvalidNamespace => "invalid-namespace",
    /// `duplicate-name`: Two objects of one kind share a name.
    DuplicateName => "duplicate-name",
    /// `invalid-selector`: A SchedulingPolicy selector the label-selector rules reject.
    InvalidSelector => "invalid-selector",
    /// `workload-without-registration`: A Workload that no WorkloadRegistration delivers.
    WorkloadWithoutRegistration => "workload-without-registration",
    /// `workloads-missing`: A WorkloadRegistration without workload files.
    WorkloadsMissing => "workloads-missing",
    /// `workloads-unregistered`: A workload folder no WorkloadRegistration names.
    WorkloadsUnregistered => "workloads-unregistered",
    /// `no-base-repo`: An environment without a BaseRepo.
    NoBaseRepo => "no-base-repo",
    /// `kustomization`: A `kustomization.yaml` that cannot be read or forms a cycle.
    Kustomization => "kustomization",
    /// `sourceignore`: An invalid `.sourceignore` pattern.
    Sourceignore => "sourceignore",
    /// `template-missing`: A ClusterType names a Template that does not exist.
    TemplateMissing => "template-missing",
    /// `template-parse`: A Template manifest does not parse.
    TemplateParse => "template-parse",
    /// `assignment`: An assignment could not be rendered.
    Assignment => "assignment",
    /// `config-schema`: A config breaks a config schema rule, or a schema cannot be used.
    ConfigSchema => "config-schema",
    /// `config-conflict`: Several ConfigMaps set one key differently for an assignment.
    ConfigConflict => "config-conflict",
    /// `registration-isolated`: A WorkloadRegistration failed alone; the rest was delivered.
    RegistrationIsolated => "registration-isolated",
    /// `mass-deletion`: A delivery would remove too many deployment-target folders.
    MassDeletion => "mass-deletion",
    /// `invalid-placement`: A SchedulingPolicy placement field is wrong.
    InvalidPlacement => "invalid-placement",
    /// `invalid-extender`: A SchedulerExtender object is wrong.
    InvalidExtender => "invalid-extender",
    /// `invalid-promotion-policy`: A PromotionPolicy field is wrong, or an environment has two.
    InvalidPromotionPolicy => "invalid-promotion-policy",
    /// `extender`: A SchedulerExtender call failed.
    Extender => "extender",
    /// `placement-ref-unsupported`: A `placementRef` whose decisions were not read.
    PlacementRefUnsupported => "placement-ref-unsupported",
    /// `policy-selects-nothing`: A SchedulingPolicy selector matches nothing.
    PolicySelectsNothing => "policy-selects-nothing",
    /// `target-placed-nowhere`: A deployment target no policy places.
    TargetPlacedNowhere => "target-placed-nowhere",
    /// `config-map-matches-nothing`: A platform ConfigMap whose labels match no assignment.
    ConfigMapMatchesNothing => "config-map-matches-nothing",
    /// `config-key-unused`: A config key that no template reads.
    ConfigKeyUnused => "config-key-unused",
    /// `sprig-version`: `KALYPSO_SPRIG` is wrong, or templates run with Sprig v3.
    SprigVersion => "sprig-version",
    /// `invalid-rollout`: A RolloutPolicy is wrong, or one of its waves selects nothing.
    InvalidRollout => "invalid-rollout",
    /// `cluster-type-in-no-wave`: A cluster type no wave of the RolloutPolicy selects.
    ClusterTypeInNoWave => "cluster-type-in-no-wave",
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// The kind of problem.
    pub code: Code,
    /// What is wrong, in a sentence that names the thing.
    pub message: String,
    /// Where the offending object was read from.
    pub origin: Option<Origin>,
    /// The offending object.
    pub object: Option<(Kind, String)>,
    /// The offending object when it is of a kind the scheduler does not read (a Secret, a Flux
    /// Kustomization) but its document is broken: its kind and name as written.
    pub other_object: Option<(String, String)>,
    /// The offending field, as a path (`spec.clusterTypeSelector.labelSelector`).
    pub field: Option<String>,
    /// The WorkloadRegistration whose files it was found in (what fails with it when a run
    /// isolates failures: see [`crate::run::Isolation`]).
    pub registration: Option<String>,
}

impl Diagnostic {
    /// An error.
    pub fn error(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            origin: None,
            object: None,
            other_object: None,
            field: None,
            registration: None,
        }
    }

    /// A warning.
    pub fn warning(code: Code, message: impl Into<String>) -> Diagnostic {
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
        match (&self.object, &self.other_object) {
            (Some((kind, name)), _) if name.is_empty() => write!(f, "{kind} without a name: ")?,
            (Some((kind, name)), _) => write!(f, "{kind} {name:?}: ")?,
            (None, Some((kind, name))) if name.is_empty() => write!(f, "{} without a name: ", escape(kind))?,
            (None, Some((kind, name))) => write!(f, "{} {name:?}: ", escape(kind))?,
            (None, None) => {}
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

    /// The diagnostics, to complete them (e.g. with their fields' positions).
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Diagnostic> {
        self.items.iter_mut()
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
        let d = Diagnostic::error(Code::InvalidName, "required field is missing")
            .at(&Origin::new("dev/ct.yaml", 3))
            .on(Kind::ClusterType, "")
            .field("metadata.name");
        assert_eq!(
            d.to_string(),
            "error[invalid-name]: dev/ct.yaml:3: ClusterType without a name: metadata.name: required field is missing"
        );
        let w = Diagnostic::warning(Code::UnknownField, "text").on(Kind::Template, "t");
        assert_eq!(w.to_string(), "warning[unknown-field]: Template \"t\": text");
    }
}
