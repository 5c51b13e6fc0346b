//! Loading: multi-document YAML files into typed objects that remember where they came from.
//!
//! Every document keeps the file and line it starts on, so that any later problem can point
//! at it. Documents of kinds the scheduler does not read (Secrets, Flux objects) are skipped,
//! as the original never looks at them. What Flux or the Kubernetes API server would reject
//! is an error here too: malformed YAML, files that are not UTF-8, documents that are lists
//! or scalars rather than objects, unknown `scheduler.kalypso.io` kinds, missing required
//! fields, values of the wrong type (a ConfigMap value or label value that is a number rather
//! than a string). Each is reported with file, line, object and field path, and loading
//! continues with the next document so that all problems surface. Documents without
//! `apiVersion`/`kind` and unknown fields under `spec` (usually typos) are warnings.

use std::fmt;

use kalypso_api::{API_VERSION, ConfigMapData, GROUP, Kind, Labels, ObjectMeta};
use rayon::prelude::*;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};
use crate::model::{AnyObject, Object};
use crate::position::strip_location;
use crate::source::{SourceFile, SourceTree};
use crate::yaml_scan::ProblemKind;

/// One YAML document of a file: its text and the line (1-based) its first line has.
#[derive(Debug, PartialEq, Eq)]
struct Document<'a> {
    text: &'a str,
    first_line: u32,
}

/// The documents of a YAML stream (see [`crate::position::document_ranges`]), without the
/// parts that hold no document.
fn split_documents(text: &str) -> Vec<Document<'_>> {
    let mut docs: Vec<Document<'_>> = crate::position::document_ranges(text)
        .into_iter()
        .map(|r| Document {
            text: &text[r.start..r.end],
            first_line: r.first_line,
        })
        .collect();
    // A part holding only comments, or only the directives (`%YAML 1.2`) of the document
    // after it, is no document; the parser reads each document without its directives, as
    // YAML 1.1 and 1.2 parse Kubernetes objects alike.
    docs.retain(|d| {
        d.text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#') && !l.starts_with('%'))
    });
    docs
}

/// The first line of a document that holds content (for pointing at the object).
fn content_line(doc: &Document<'_>) -> u32 {
    let skipped = doc
        .text
        .lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .count();
    doc.first_line + u32::try_from(skipped).unwrap_or(0)
}

#[derive(Deserialize)]
struct TypeMeta {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    kind: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
struct TypedObject<S> {
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: Metadata,
    spec: S,
}

#[derive(Deserialize)]
struct ConfigMapObject {
    #[serde(default, deserialize_with = "null_as_default")]
    metadata: Metadata,
    #[serde(default, deserialize_with = "string_map")]
    data: Labels,
}

/// Object metadata as the Kubernetes API server accepts it: the name, label and annotation
/// values must be strings (an unquoted `3` or `true` is rejected there, so it is here too).
#[derive(Default, Deserialize)]
struct Metadata {
    #[serde(default, deserialize_with = "string")]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default, deserialize_with = "string_map")]
    labels: Labels,
    #[serde(default, deserialize_with = "string_map")]
    annotations: Labels,
}

impl From<Metadata> for ObjectMeta {
    fn from(m: Metadata) -> ObjectMeta {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            labels: m.labels,
            annotations: m.annotations,
        }
    }
}

/// Treats an explicit `null` like an absent field, as Kubernetes does.
fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A string that must be written as one: YAML numbers, booleans, lists and mappings are
/// rejected with a hint (`null` reads as the empty string, as Kubernetes reads it).
struct StrictString(String);

impl<'de> Deserialize<'de> for StrictString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StrictString, D::Error> {
        d.deserialize_any(StrictStringVisitor)
    }
}

struct StrictStringVisitor;

impl StrictStringVisitor {
    fn scalar<E: de::Error>(what: &str, text: impl fmt::Display) -> E {
        E::custom(format!(
            "must be a string, not {what} {text}; quote it: \"{text}\""
        ))
    }
}

impl<'de> Visitor<'de> for StrictStringVisitor {
    type Value = StrictString;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<StrictString, E> {
        Ok(StrictString(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<StrictString, E> {
        Ok(StrictString(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<StrictString, E> {
        Ok(StrictString(String::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<StrictString, E> {
        Ok(StrictString(String::new()))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<StrictString, E> {
        Err(Self::scalar("the boolean", v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictString, E> {
        Err(Self::scalar("the number", v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictString, E> {
        Err(Self::scalar("the number", v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<StrictString, E> {
        Err(Self::scalar("the number", format!("{v:?}")))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<StrictString, A::Error> {
        Err(de::Error::custom(
            "must be a string, not a list; write structured data as a block string (`key: |`)",
        ))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<StrictString, A::Error> {
        Err(de::Error::custom(
            "must be a string, not a mapping; write structured data as a block string (`key: |`)",
        ))
    }
}

fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(StrictString::deserialize(d)?.0)
}

fn string_map<'de, D: Deserializer<'de>>(d: D) -> Result<Labels, D::Error> {
    let map: Option<std::collections::BTreeMap<String, StrictString>> = Option::deserialize(d)?;
    Ok(map
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}

/// Loads every object of the kinds the scheduler reads from the manifest files of `tree`.
/// Files are parsed in parallel; objects and diagnostics keep the files' order. The
/// diagnostics of a file point at their fields' lines and columns.
pub fn load_tree(tree: &SourceTree, diagnostics: &mut Diagnostics) -> Vec<AnyObject> {
    let files = tree.manifest_files(diagnostics);
    let loaded: Vec<(Vec<AnyObject>, Diagnostics)> = files
        .par_iter()
        .map(|file| {
            let mut found = Diagnostics::new();
            let objects = load_file(tree, file, &mut found);
            (objects, found)
        })
        .collect();
    let mut objects = Vec::new();
    for (file_objects, found) in loaded {
        objects.extend(file_objects);
        diagnostics.extend(found);
    }
    objects
}

fn load_file(tree: &SourceTree, file: &SourceFile, diagnostics: &mut Diagnostics) -> Vec<AnyObject> {
    let shown = tree.display_path(&file.path);
    let text = match std::str::from_utf8(&file.content) {
        Ok(text) => text,
        Err(e) => {
            diagnostics.push(not_utf8(&file.content, e.valid_up_to(), shown.into()));
            return Vec::new();
        }
    };
    // A byte-order mark is allowed (YAML parsers skip it); it would hide a leading `---`.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let origin = Origin::new(shown, 0);
    let objects = split_documents(text)
        .iter()
        .filter_map(|doc| load_document(doc, &origin, diagnostics))
        .collect();
    let positions = crate::position::FilePositions::new(text);
    for d in diagnostics.iter_mut() {
        positions.place(d);
    }
    objects
}

/// The error of a file that is not UTF-8, whose first invalid byte is at `at`: at its line and
/// column, naming the object of the document it is in and the field (read from the text
/// before it).
fn not_utf8(content: &[u8], at: usize, shown: std::sync::Arc<str>) -> Diagnostic {
    let valid = std::str::from_utf8(&content[..at]).unwrap_or_default();
    let line = 1 + valid.matches('\n').count();
    let column = 1 + valid.rsplit('\n').next().unwrap_or_default().chars().count();
    let mut d = Diagnostic::error(
        Code::Yaml,
        format!(
            "the file is not UTF-8 text (byte 0x{:02X} here is not UTF-8); save it as UTF-8",
            content[at]
        ),
    )
    .at(&Origin::at(
        &shown,
        u32::try_from(line).unwrap_or(0),
        u32::try_from(column).unwrap_or(0),
    ));
    // The document the byte is in, as far as it is valid text.
    let lossy = String::from_utf8_lossy(content);
    let line = u32::try_from(line).unwrap_or(u32::MAX);
    if let Some(doc) = split_documents(&lossy)
        .into_iter()
        .take_while(|doc| doc.first_line <= line)
        .last()
    {
        let (kind, name) = written_identity(doc.text);
        d = Identity { kind, name }.apply(d);
        let relative = line - doc.first_line;
        let field = crate::yaml_scan::path_at(doc.text, relative, u32::try_from(column).unwrap_or(0) - 1)
            .or_else(|| top_level_key(doc.text, relative));
        if let Some(field) = field {
            d = d.field(field);
        }
    }
    d
}

/// Where the parser stopped: `origin`'s file at the error's line and column of the document,
/// or the document's first line when the parser does not say.
fn located(err: &serde_yaml_ng::Error, doc: &Document<'_>, origin: &Origin) -> Origin {
    match err.location() {
        Some(l) => Origin::at(
            &origin.file,
            doc.first_line + u32::try_from(l.line()).unwrap_or(1) - 1,
            u32::try_from(l.column()).unwrap_or(0),
        ),
        None => origin.at_line(doc.first_line),
    }
}

/// A YAML error the deserializer found that the scan did not (the scan reports the usual
/// ones first, in its own words): at the field where it stopped, about the document's
/// object, in words without the deserializer's wording.
fn serde_yaml_error(
    err: &serde_yaml_ng::Error,
    doc: &Document<'_>,
    origin: &Origin,
    identity: &Identity,
) -> Diagnostic {
    let raw = err.to_string();
    let raw = strip_location(&raw);
    // serde_yaml names the path of a nested value before its message.
    let (prefix, rest) = match raw.split_once(": ") {
        Some((path, rest)) if !path.is_empty() && !path.contains(' ') => (Some(path), rest),
        _ => (None, raw),
    };
    let at = err.location();
    let field = prefix.map(str::to_owned).or_else(|| {
        at.as_ref().and_then(|l| {
            crate::yaml_scan::path_at(
                doc.text,
                u32::try_from(l.line().saturating_sub(1)).unwrap_or(0),
                u32::try_from(l.column().saturating_sub(1)).unwrap_or(0),
            )
        })
    });
    let (code, message) = if rest.starts_with("recursion limit exceeded") {
        (
            Code::YamlLimit,
            "lists and mappings nested more than 128 levels deep, more than kalypso's YAML reader reads (whatever \
             the yaml-depth limit)"
                .to_owned(),
        )
    } else if rest.starts_with("invalid value: ") || rest.starts_with("invalid type: ") {
        let (_, mut message) = describe_error(field.as_deref().unwrap_or_default(), rest);
        let tagged = at
            .as_ref()
            .and_then(|l| doc.text.lines().nth(l.line().saturating_sub(1)))
            .and_then(|line| line.get(at.as_ref().map_or(0, |l| l.column().saturating_sub(1))..))
            .filter(|value| value.starts_with('!'))
            .map(|tag| tag.split_whitespace().next().unwrap_or_default().to_owned());
        if let Some(tag) = tagged {
            message.push_str(&tag_hint(&tag));
        }
        (Code::InvalidObject, message)
    } else if rest.starts_with("repetition limit exceeded") {
        (
            Code::YamlLimit,
            format!(
                "aliases repeat nodes too often for kalypso's YAML reader; {}",
                crate::limits::hint("yaml-alias-nodes")
            ),
        )
    } else {
        (
            Code::Yaml,
            "this is not valid YAML (check the line's indentation, and quote values with special characters)"
                .to_owned(),
        )
    };
    let mut d = identity.apply(Diagnostic::error(code, message).at(&located(err, doc, origin)));
    if let Some(field) = field {
        d = d.field(field);
    }
    d
}

/// The values the enum field at `path` of `text` takes, as serde lists them (`` `Fail` or
/// `Ignore` ``): read by deserializing the document with that field set to a value that is
/// none of them.
fn variants_at<T: DeserializeOwned>(text: &str, path: &str) -> Option<String> {
    use serde_yaml_ng::Value;
    let mut value: Value = serde_yaml_ng::from_str(text).ok()?;
    let mut slot = &mut value;
    for step in path.split('.') {
        let (key, indices) = match step.find('[') {
            Some(i) => (&step[..i], &step[i..]),
            None => (step, ""),
        };
        if !key.is_empty() {
            slot = slot.get_mut(key)?;
        }
        for index in indices.split(['[', ']']).filter(|s| !s.is_empty()) {
            slot = slot.get_mut(index.parse::<usize>().ok()?)?;
        }
    }
    *slot = Value::String("\u{1}".to_owned());
    let err = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let message = err.into_inner().to_string();
    let (_, expected) = message
        .split("unknown variant ")
        .nth(1)?
        .split_once(", expected ")?;
    Some(expected.strip_prefix("one of ").unwrap_or(expected).to_owned())
}

/// The tag (`!!int`, `!custom`) written before the value of `field` in `text`, if any.
fn tag_at(text: &str, field: &str) -> Option<String> {
    let mark = crate::position::find(text, field)?;
    let line = text.lines().nth(mark.line as usize)?;
    let from: usize = line.char_indices().nth(mark.column as usize).map(|(i, _)| i)?;
    let rest = &line[from..];
    // A key's value follows its `: `; a list item is the value itself.
    let value = match rest.split_once(": ") {
        Some((_, value)) if !rest.starts_with('!') => value,
        _ => rest,
    };
    let tag = value.split_whitespace().next()?;
    tag.starts_with('!').then(|| tag.to_owned())
}

/// What to say about a tag on a value that does not fit its field.
fn tag_hint(tag: &str) -> String {
    if tag.starts_with("!!") {
        format!(" (the tag {tag} asks for that type: remove the tag, or write a value of that type)")
    } else {
        format!(
            " (the tag {tag} before the value is read as part of it: remove it, Kubernetes objects need no tags)"
        )
    }
}

/// Who a document is about, for diagnostics: the kind and name it gives, as written.
#[derive(Clone, Debug, Default)]
struct Identity {
    kind: Option<String>,
    name: Option<String>,
}

impl Identity {
    /// The kind and name the scan noted, completed from the text where it did not get to
    /// them (see [`written_identity`]).
    fn of(scan_kind: Option<String>, scan_name: Option<String>, text: &str) -> Identity {
        let (kind, name) = if scan_kind.is_none() || scan_name.is_none() {
            let (kind, name) = written_identity(text);
            (scan_kind.or(kind), scan_name.or(name))
        } else {
            (scan_kind, scan_name)
        };
        Identity { kind, name }
    }

    /// `d`, naming the object: one of the scheduler's kinds, or another kind as written.
    fn apply(&self, mut d: Diagnostic) -> Diagnostic {
        let Some(kind) = self.kind.as_ref().filter(|k| !k.is_empty()) else {
            return d;
        };
        let name = self.name.clone().unwrap_or_default();
        match Kind::ALL.into_iter().find(|k| k.name() == kind) {
            Some(known) => d.object = Some((known, name)),
            None => d.other_object = Some((kind.clone(), name)),
        }
        d
    }
}

/// The `kind` and `metadata.name` a document gives in block style, read line by line: for
/// naming the object of a document the parser cannot read to its name (a syntax error or a
/// limit before it, a document too large to parse). `kind:` must start a line, and `name:`
/// must be the first indented key under a `metadata:` that starts one.
fn written_identity(text: &str) -> (Option<String>, Option<String>) {
    let scalar = |value: &str| -> Option<String> {
        let value = value.trim();
        let value = match value.find(" #") {
            Some(i) => value[..i].trim_end(),
            None => value,
        };
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        let plain = !unquoted.is_empty()
            && !unquoted.starts_with(['[', '{', '&', '*', '!', '|', '>', '%', '@', '`'])
            && !unquoted.contains(": ");
        plain.then(|| unquoted.to_owned())
    };
    let (mut kind, mut name) = (None, None);
    let mut in_metadata = false;
    for line in text.lines() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            in_metadata = line.trim_end() == "metadata:" || line.starts_with("metadata: #");
            if kind.is_none()
                && let Some(value) = line.strip_prefix("kind:")
            {
                kind = scalar(value);
            }
            continue;
        }
        if in_metadata && name.is_none() {
            let key = line.trim_start();
            if let Some(value) = key.strip_prefix("name:") {
                name = scalar(value);
            }
        }
    }
    (kind, name)
}

/// The top-level key whose value takes most of `text` (a document too large to read): the
/// field to point at.
fn largest_top_level_key(text: &str) -> Option<String> {
    let mut best: Option<(usize, &str)> = None;
    let mut current: Option<(usize, &str)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let top = !line.starts_with([' ', '\t', '#', '\n', '\r', '-']);
        if top && let Some((key, _)) = line.split_once(':') {
            if let Some((start, name)) = current.take()
                && best.is_none_or(|(size, _)| offset - start > size)
            {
                best = Some((offset - start, name));
            }
            current = Some((offset, key.trim()));
        }
        offset += line.len();
    }
    if let Some((start, name)) = current
        && best.is_none_or(|(size, _)| offset - start > size)
    {
        best = Some((offset - start, name));
    }
    best.map(|(_, name)| name.to_owned()).filter(|n| !n.is_empty())
}

/// The message for a mapping that lacks `apiVersion` or `kind` (or has them, but not as
/// strings).
fn missing_type_meta(api_version: Option<&str>, kind: Option<&str>, name: &str) -> String {
    let missing = match (api_version, kind) {
        (None, None) => "apiVersion and kind",
        (None, Some(_)) => "apiVersion",
        _ => "kind",
    };
    let what = if name.is_empty() || kind.is_some() {
        "document".to_owned()
    } else {
        format!("document (metadata.name {name:?})")
    };
    format!(
        "{what} has no {missing} (as strings), so it is not a Kubernetes object: Flux cannot apply a file that \
         holds it, and skipping it would drop the object it describes from the output"
    )
}

/// What a document that is not a mapping is, for messages; `None` for a mapping or an empty
/// (`null`) document, which Flux skips too.
fn non_object_shape(text: &str) -> Option<&'static str> {
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(serde_yaml_ng::Value::Sequence(_)) => Some("a list"),
        Ok(serde_yaml_ng::Value::Tagged(_)) => Some("a tagged value"),
        Ok(
            serde_yaml_ng::Value::Bool(_) | serde_yaml_ng::Value::Number(_) | serde_yaml_ng::Value::String(_),
        ) => Some("a scalar"),
        // A mapping, an empty document, or text the deserializer cannot read: not a shape.
        Ok(serde_yaml_ng::Value::Mapping(_) | serde_yaml_ng::Value::Null) | Err(_) => None,
    }
}

/// Whether a document is empty (`~`, `null`, or nothing but comments), which Flux skips too.
fn is_null_document(text: &str) -> bool {
    matches!(
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text),
        Ok(serde_yaml_ng::Value::Null)
    )
}

/// The kinds of `scheduler.kalypso.io` a control plane may hold, for messages.
fn known_kinds() -> String {
    Kind::ALL
        .into_iter()
        .filter(|k| {
            k.api_version() == API_VERSION && !matches!(k, Kind::Assignment | Kind::AssignmentPackage)
        })
        .map(Kind::name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What [`prescan`] found in a document that may be parsed: the text to parse (its own, or
/// with its merge keys applied) and who it is about.
struct Prescanned {
    merged: Option<String>,
    identity: Identity,
    /// What the deserializer will read, when the scan can tell (see
    /// [`crate::yaml_scan::Resolved`]).
    resolved: Option<crate::yaml_scan::Resolved>,
}

/// Checks a document against the YAML limits, for duplicate and complex keys, undefined
/// aliases and syntax errors before it is parsed (see [`crate::yaml_scan`]); reports what it
/// finds and returns `None` if the document must not be parsed, or the text to parse (the
/// document's, or with its merge keys (`<<`) applied) and the object it is about.
fn prescan(doc: &Document<'_>, origin: &Origin, diagnostics: &mut Diagnostics) -> Option<Prescanned> {
    let limits = crate::limits::current();
    if doc.text.len() > limits.yaml_document_size {
        let (kind, name) = written_identity(doc.text);
        let mut d = Identity { kind, name }.apply(
            Diagnostic::error(
                Code::YamlLimit,
                format!(
                    "the document is {} bytes, more than the yaml-document-size limit ({} bytes); {}",
                    doc.text.len(),
                    limits.yaml_document_size,
                    crate::limits::hint("yaml-document-size")
                ),
            )
            .at(origin),
        );
        if let Some(field) = largest_top_level_key(doc.text) {
            d = d.field(field);
        }
        diagnostics.push(d);
        return None;
    }
    let scan = crate::yaml_scan::scan(
        doc.text,
        crate::yaml_scan::ScanLimits {
            depth: limits.yaml_depth,
            alias_nodes: limits.yaml_alias_nodes,
        },
        doc.first_line,
    );
    let identity = Identity::of(scan.kind, scan.name, doc.text);
    // The scan's view holds only where the deserializer nests no deeper than its own
    // recursion limit (128), which it then never reaches: the scan refuses deeper documents.
    let resolved = scan.resolved.filter(|_| limits.yaml_depth <= 100);
    if !scan.problems.is_empty() {
        for p in scan.problems {
            let (code, message) = match p.kind {
                ProblemKind::Limit(limit) => (
                    Code::YamlLimit,
                    format!("{}; {}", p.message, crate::limits::hint(limit)),
                ),
                ProblemKind::DuplicateKey => (Code::DuplicateKey, p.message),
                ProblemKind::ComplexKey => (Code::InvalidObject, p.message),
                ProblemKind::Syntax => (Code::Yaml, p.message),
            };
            let mut d = identity.apply(Diagnostic::error(code, message).at(&Origin::at(
                &origin.file,
                doc.first_line + p.line,
                p.column + 1,
            )));
            // A problem at the top level names the top-level key it is under (or the first).
            d = d.field(if p.field.is_empty() {
                top_level_key(doc.text, p.line).unwrap_or_default()
            } else {
                p.field
            });
            diagnostics.push(d);
        }
        return None;
    }
    if !scan.has_merge_keys {
        return Some(Prescanned {
            merged: None,
            identity,
            resolved,
        });
    }
    // YAML 1.1 merge keys, which Kubernetes tools resolve: merged into the document, which
    // is then parsed as if written out (lines of later messages are those of the object).
    // The scan checked that each refers to mappings.
    let merged = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(doc.text)
        .and_then(|mut v| v.apply_merge().map(|()| v))
        .and_then(|v| serde_yaml_ng::to_string(&v));
    match merged {
        Ok(text) => Some(Prescanned {
            merged: Some(text),
            identity,
            resolved: None,
        }),
        Err(e) => {
            diagnostics.push(serde_yaml_error(&e, doc, origin, &identity));
            None
        }
    }
}

/// The top-level key written last at or before 0-based `line` of a document (or its first,
/// if none is): the field of a problem found at the top level.
fn top_level_key(text: &str, line: u32) -> Option<String> {
    let key = |l: &str| -> Option<String> {
        if l.starts_with([' ', '\t', '#', '%', '-']) {
            return None;
        }
        let (key, _) = l.split_once(':')?;
        let key = key.trim().trim_matches(['"', '\'']);
        (!key.is_empty() && !key.contains(' ')).then(|| key.to_owned())
    };
    let mut found = None;
    for l in text.lines().take(line as usize + 1) {
        found = key(l).or(found);
    }
    found.or_else(|| text.lines().find_map(key))
}

fn load_document(doc: &Document<'_>, file: &Origin, diagnostics: &mut Diagnostics) -> Option<AnyObject> {
    load_document_as(doc, file, true, diagnostics)
}

/// [`load_document`], taking what the scan resolved (`use_scan`) or parsing the document
/// for its `apiVersion`, `kind` and name (the tests compare the two).
fn load_document_as(
    doc: &Document<'_>,
    file: &Origin,
    use_scan: bool,
    diagnostics: &mut Diagnostics,
) -> Option<AnyObject> {
    let origin = file.at_line(content_line(doc));
    let Prescanned {
        merged,
        identity,
        resolved,
    } = prescan(doc, &origin, diagnostics)?;
    let Some(resolved) = resolved.filter(|_| use_scan) else {
        return load_parsed(doc, merged.as_deref(), &origin, file, &identity, diagnostics);
    };
    // The scan read apiVersion, kind and metadata.name as the parse below would have; that
    // parse fails only where the object's parse fails too (a YAML error), so on a failure
    // it is made, and if it fails, the document is reported as it reports it.
    let meta = TypeMetaStrings {
        api_version: resolved.api_version.as_deref(),
        kind: resolved.kind.as_deref(),
        name: resolved.name.unwrap_or_default(),
    };
    let mut found = Diagnostics::new();
    let loaded = load_typed(doc, &meta, &origin, !resolved.other_target_keys, &mut found);
    if loaded.is_none() && serde_yaml_ng::from_str::<TypeMeta>(doc.text).is_err() {
        return load_parsed(doc, None, &origin, file, &identity, diagnostics);
    }
    diagnostics.extend(found);
    loaded
}

/// A document's `apiVersion`, `kind` (as strings, if they are) and `metadata.name` (the
/// empty string if it is none).
struct TypeMetaStrings<'a> {
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    name: String,
}

/// Loads a document whose `apiVersion`, `kind` and `metadata.name` are read by parsing it
/// (`merged`: its text with merge keys applied).
fn load_parsed(
    doc: &Document<'_>,
    merged: Option<&str>,
    origin: &Origin,
    file: &Origin,
    identity: &Identity,
    diagnostics: &mut Diagnostics,
) -> Option<AnyObject> {
    let merged_doc;
    let doc = match merged {
        Some(text) => {
            merged_doc = Document {
                text,
                first_line: origin.line,
            };
            &merged_doc
        }
        None => doc,
    };
    let meta: TypeMeta = match serde_yaml_ng::from_str(doc.text) {
        Ok(m) => m,
        Err(err) => {
            if let Some(shape) = non_object_shape(doc.text) {
                // Flux cannot apply such a file, so the original never sees any of it.
                diagnostics.push(
                    Diagnostic::error(
                        Code::NotAnObject,
                        format!(
                            "document is {shape}, not a Kubernetes object (a mapping with apiVersion, kind and metadata)"
                        ),
                    )
                    .at(origin),
                );
            } else if non_object_shape(doc.text).is_none() && !is_null_document(doc.text) {
                diagnostics.push(serde_yaml_error(&err, doc, file, identity));
            }
            return None;
        }
    };
    let api_version = meta.api_version.as_ref().and_then(serde_yaml_ng::Value::as_str);
    let kind_name = meta.kind.as_ref().and_then(serde_yaml_ng::Value::as_str);
    let name = meta
        .metadata
        .as_ref()
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_owned();
    let meta = TypeMetaStrings {
        api_version,
        kind: kind_name,
        name,
    };
    load_typed(doc, &meta, origin, false, diagnostics)
}

/// Loads a document as the object its `apiVersion` and `kind` say it is (`targets_known`:
/// the scan saw that a Workload's deployment targets have only known fields).
fn load_typed(
    doc: &Document<'_>,
    meta: &TypeMetaStrings<'_>,
    origin: &Origin,
    targets_known: bool,
    diagnostics: &mut Diagnostics,
) -> Option<AnyObject> {
    let origin = origin.clone();
    let name = meta.name.clone();
    let (api_version, kind_name) = (meta.api_version, meta.kind);
    let (Some(api_version), Some(kind_name)) = (api_version, kind_name) else {
        // An error, not a warning: skipping the document would drop the object it was meant
        // to be (a ClusterType, a Workload...) and the render would delete its folders.
        let d = Diagnostic::error(
            Code::NotAnObject,
            missing_type_meta(api_version, kind_name, &name),
        )
        .at(&origin)
        .field(if api_version.is_none() {
            "apiVersion"
        } else {
            "kind"
        });
        // With a kind but no apiVersion, the object is named by its kind and name.
        let d = match kind_name {
            Some(kind) => Identity {
                kind: Some(kind.to_owned()),
                name: Some(name.clone()),
            }
            .apply(d),
            None => d,
        };
        diagnostics.push(d);
        return None;
    };
    let Some(kind) = Kind::from_type_meta(api_version, kind_name) else {
        let ours = Kind::ALL
            .into_iter()
            .find(|k| k.name() == kind_name && k.api_version() == API_VERSION);
        let problem = if let Some(kind) = ours {
            Some((
                "apiVersion",
                format!("{kind} is a kind of {API_VERSION}, not of {api_version:?}"),
            ))
        } else if api_version.split('/').next() == Some(GROUP) && api_version != API_VERSION {
            Some((
                "apiVersion",
                format!("unknown version {api_version:?}; the version of {GROUP} is {API_VERSION}"),
            ))
        } else if api_version == API_VERSION {
            Some((
                "kind",
                format!(
                    "unknown kind {kind_name:?}; the kinds of {API_VERSION} are {}",
                    known_kinds()
                ),
            ))
        } else {
            // Another API's object (a Secret, a Flux object...): not the scheduler's business.
            None
        };
        if let Some((field, message)) = problem {
            // Named by its kind as written (one of the scheduler's, or the misspelled one).
            let d = Identity {
                kind: Some(kind_name.to_owned()),
                name: Some(name.clone()),
            }
            .apply(
                Diagnostic::error(Code::UnknownKind, message)
                    .at(&origin)
                    .field(field),
            );
            diagnostics.push(d);
        }
        return None;
    };
    let typed = |diagnostics: &mut Diagnostics| -> Option<AnyObject> {
        Some(match kind {
            Kind::ClusterType => AnyObject::ClusterType(parse_typed(doc, &origin, kind, &name, diagnostics)?),
            Kind::Template => {
                let template: Object<kalypso_api::TemplateSpec> =
                    parse_typed(doc, &origin, kind, &name, diagnostics)?;
                for (i, manifest) in template.spec.manifests.iter().enumerate() {
                    if matches!(manifest, kalypso_api::Manifest::Object(_)) {
                        diagnostics.push(
                            Diagnostic::warning(
                                Code::LegacyManifest,
                                "a mapping, not a template string: the original's CRD declares manifests as strings \
                                 (since 2023-03-07), so its API server rejects this Template; kalypso renders the \
                                 mapping's YAML text",
                            )
                            .at(&origin)
                            .on(kind, &name)
                            .field(format!("spec.manifests[{i}]")),
                        );
                    }
                }
                AnyObject::Template(template)
            }
            Kind::WorkloadRegistration => {
                AnyObject::WorkloadRegistration(parse_typed(doc, &origin, kind, &name, diagnostics)?)
            }
            Kind::Workload => {
                let workload: Object<kalypso_api::WorkloadSpec> =
                    parse_typed(doc, &origin, kind, &name, diagnostics)?;
                let target_schemas =
                    workload
                        .spec
                        .deployment_targets
                        .iter()
                        .enumerate()
                        .flat_map(|(i, t)| {
                            t.spec.config_schemas.iter().enumerate().map(move |(j, s)| {
                                (format!("spec.deploymentTargets[{i}].configSchemas[{j}]"), s)
                            })
                        });
                let own_schemas = workload
                    .spec
                    .config_schemas
                    .iter()
                    .enumerate()
                    .map(|(j, s)| (format!("spec.configSchemas[{j}]"), s));
                for (field, text) in target_schemas.chain(own_schemas) {
                    if let Some(warning) = crate::schema::schema_warning(text) {
                        diagnostics.push(
                            Diagnostic::warning(Code::SchemaDraft, warning)
                                .at(&origin)
                                .on(kind, &name)
                                .field(field),
                        );
                    }
                }
                if !targets_known {
                    warn_unknown_target_fields(doc, &origin, &name, diagnostics);
                }
                AnyObject::Workload(workload)
            }
            Kind::DeploymentTarget => {
                AnyObject::DeploymentTarget(parse_typed(doc, &origin, kind, &name, diagnostics)?)
            }
            Kind::SchedulingPolicy => {
                let policy = parse_typed(doc, &origin, kind, &name, diagnostics)?;
                // A policy without a name is already refused (one error for it is enough).
                if !name.is_empty() && !selectors_present(doc, &origin, &name, diagnostics) {
                    return None;
                }
                AnyObject::SchedulingPolicy(policy)
            }
            Kind::Environment => AnyObject::Environment(parse_typed(doc, &origin, kind, &name, diagnostics)?),
            Kind::GitOpsRepo => AnyObject::GitOpsRepo(parse_typed(doc, &origin, kind, &name, diagnostics)?),
            Kind::BaseRepo => AnyObject::BaseRepo(parse_typed(doc, &origin, kind, &name, diagnostics)?),
            Kind::SchedulerExtender => {
                AnyObject::SchedulerExtender(parse_typed(doc, &origin, kind, &name, diagnostics)?)
            }
            Kind::PromotionPolicy => {
                let policy: Object<kalypso_api::PromotionPolicySpec> =
                    parse_typed(doc, &origin, kind, &name, diagnostics)?;
                crate::promotion::validate(&name, &policy.spec, &origin, diagnostics);
                AnyObject::PromotionPolicy(policy)
            }
            Kind::RolloutPolicy => {
                AnyObject::RolloutPolicy(parse_typed(doc, &origin, kind, &name, diagnostics)?)
            }
            Kind::ConfigSchema => {
                let schema: Object<kalypso_api::ConfigSchemaSpec> =
                    parse_typed(doc, &origin, kind, &name, diagnostics)?;
                if let Some(warning) = crate::schema::schema_warning(&schema.spec.schema) {
                    diagnostics.push(
                        Diagnostic::warning(Code::SchemaDraft, warning)
                            .at(&origin)
                            .on(kind, &name)
                            .field("spec.schema"),
                    );
                }
                AnyObject::ConfigSchema(schema)
            }
            Kind::ConfigMap => {
                let parsed: ConfigMapObject = parse_document(doc, &origin, kind, &name, diagnostics)?;
                AnyObject::ConfigMap(Object {
                    meta: parsed.metadata.into(),
                    spec: ConfigMapData { data: parsed.data },
                    origin: origin.clone(),
                })
            }
            // Derived kinds are the scheduler's output, never its input.
            Kind::Assignment | Kind::AssignmentPackage => return None,
        })
    };
    typed(diagnostics)
}

fn parse_typed<S: DeserializeOwned>(
    doc: &Document<'_>,
    origin: &Origin,
    kind: Kind,
    name: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Object<S>> {
    let parsed: TypedObject<S> = parse_document(doc, origin, kind, name, diagnostics)?;
    Some(Object {
        meta: parsed.metadata.into(),
        spec: parsed.spec,
        origin: origin.clone(),
    })
}

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// The steps of a path `serde_ignored` reports (`Option` and newtype wrappers dropped).
fn segments(path: &serde_ignored::Path<'_>) -> Vec<Segment> {
    use serde_ignored::Path;
    let mut out = match path {
        Path::Root => return Vec::new(),
        Path::Seq { parent, .. }
        | Path::Map { parent, .. }
        | Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => segments(parent),
    };
    match path {
        Path::Seq { index, .. } => out.push(Segment::Index(*index)),
        Path::Map { key, .. } => out.push(Segment::Key(key.clone())),
        _ => {}
    }
    out
}

/// A path as diagnostics show it: `spec.deploymentTargets[0].name`.
fn path_string(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Turns serde's message for a field into one for people: the path prefix serde_yaml
/// repeats is dropped, a missing field becomes part of the path, and Rust type names become
/// YAML ones. Returns the field path (if any) and the message.
fn describe_error(path: &str, raw: &str) -> (Option<String>, String) {
    let path = (path != "." && !path.is_empty()).then_some(path);
    let mut message = strip_location(raw);
    // serde_yaml repeats the path of the value it was reading (all of it, or the part up to
    // an enum or a flattened struct) before its message.
    if let Some(p) = path
        && let Some((prefix, rest)) = message.split_once(": ")
        && (prefix == p || p.strip_prefix(prefix).is_some_and(|r| r.starts_with(['.', '['])))
    {
        message = rest;
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.trim_end_matches('`');
        let full = path.map_or_else(|| field.to_owned(), |p| format!("{p}.{field}"));
        return (Some(full), "required field is missing".to_owned());
    }
    if let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return (
            path.map(str::to_owned),
            format!(
                "must be {}, found {}",
                expected_words(expected),
                found_words(found)
            ),
        );
    }
    if let Some(rest) = message.strip_prefix("invalid length ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return (
            path.map(str::to_owned),
            format!("must have {}, found {found} item(s)", expected_words(expected)),
        );
    }
    if message.starts_with("untagged and internally tagged enums do not support enum input") {
        return (
            path.map(str::to_owned),
            "must be a plain value, found a tagged value".to_owned(),
        );
    }
    if message.starts_with("data did not match any variant of untagged enum Manifest") {
        return (
            path.map(str::to_owned),
            "must be a template string (or, in the pre-2023 form, a mapping)".to_owned(),
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (found, expected) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let expected = expected.strip_prefix("one of ").unwrap_or(expected);
        let found = if found == "``" { "an empty value" } else { found };
        return (
            path.map(str::to_owned),
            if expected.is_empty() {
                format!("unknown value {found}")
            } else {
                format!("must be one of {expected}, found {found}")
            },
        );
    }
    (path.map(str::to_owned), message.to_owned())
}

/// What serde says a field expects, in the words of YAML (`a mapping`, not `struct ObjectMeta`).
fn expected_words(expected: &str) -> String {
    let t = expected.trim();
    match t {
        _ if t.starts_with("struct ") || t.starts_with("a map") || t == "map" => "a mapping".to_owned(),
        "a sequence" | "sequence" => "a list".to_owned(),
        "unit value" | "unit" => "null".to_owned(),
        "a borrowed string" | "a string" | "string" => "a string".to_owned(),
        "a boolean" | "bool" => "true or false".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        _ => t.to_owned(),
    }
}

/// What serde says it found, in the words of YAML (`the number 42`, `a mapping`).
fn found_words(found: &str) -> String {
    let t = found.trim();
    let quoted = |prefix: &str| {
        t.strip_prefix(prefix)
            .map(|rest| rest.trim_matches('`').to_owned())
    };
    if let Some(n) = quoted("integer ").or_else(|| quoted("floating point ")) {
        return format!("the number {n}");
    }
    if let Some(b) = quoted("boolean ") {
        return format!("the boolean {b}");
    }
    if let Some(s) = t.strip_prefix("string ") {
        return format!("the string {s}");
    }
    match t {
        "map" => "a mapping".to_owned(),
        "sequence" => "a list".to_owned(),
        "unit value" => "null".to_owned(),
        // serde_yaml reads a tagged value (`!name value`) as an enum.
        "enum" => "a tagged value".to_owned(),
        _ => t.to_owned(),
    }
}

/// The selectors the original's SchedulingPolicy CRD requires
/// (`config/crd/bases/scheduler.kalypso.io_schedulingpolicies.yaml`: `spec` requires
/// `deploymentTargetSelector` and `clusterTypeSelector`, each requires `labelSelector`), so
/// the API server rejects a policy without them. Without this check a missing or misspelled
/// selector would default to the empty selector and select everything. Reports each missing
/// one (`null` counts as missing, as the API server prunes it) and returns whether all are there.
fn selectors_present(doc: &Document<'_>, origin: &Origin, name: &str, diagnostics: &mut Diagnostics) -> bool {
    let Ok(value) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(doc.text) else {
        return true; // reported by the typed parse
    };
    let present = |v: Option<&serde_yaml_ng::Value>| v.is_some_and(|v| !v.is_null());
    let spec = value.get("spec");
    let mut ok = true;
    for selector in ["deploymentTargetSelector", "clusterTypeSelector"] {
        let sel = spec.and_then(|s| s.get(selector));
        let (path, what) = if !present(sel) {
            (
                vec![Segment::Key("spec".to_owned()), Segment::Key(selector.to_owned())],
                selector,
            )
        } else if !present(sel.and_then(|s| s.get("labelSelector"))) {
            (
                vec![
                    Segment::Key("spec".to_owned()),
                    Segment::Key(selector.to_owned()),
                    Segment::Key("labelSelector".to_owned()),
                ],
                "labelSelector",
            )
        } else {
            continue;
        };
        ok = false;
        diagnostics.push(
            Diagnostic::error(
                Code::InvalidObject,
                format!(
                    "required field is missing: the original scheduler's CRD requires {what} (write \
                     `labelSelector: {{}}` to select everything); a misspelled key does not count"
                ),
            )
            .at(origin)
            .on(Kind::SchedulingPolicy, name)
            .field(path_string(&path)),
        );
    }
    ok
}

/// The leaf of an error serde reports at a Workload's deployment target
/// (`spec.deploymentTargets[0]`): its spec is flattened into it, and serde buffers flattened
/// content, losing the path inside. Re-reading the target's spec alone finds the field
/// (`spec.deploymentTargets[0].manifests.repo`). Returns the path and serde's message;
/// `None` when the error is not about a target's spec.
fn flattened_leaf(text: &str, kind: Kind, path: &str) -> Option<(String, String)> {
    if kind != Kind::Workload {
        return None;
    }
    let index: usize = path
        .strip_prefix("spec.deploymentTargets[")?
        .strip_suffix(']')?
        .parse()
        .ok()?;
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).ok()?;
    let target = value.get("spec")?.get("deploymentTargets")?.get(index)?.clone();
    let err = serde_path_to_error::deserialize::<_, kalypso_api::DeploymentTargetSpec>(target).err()?;
    let mut segments = vec![
        Segment::Key("spec".to_owned()),
        Segment::Key("deploymentTargets".to_owned()),
        Segment::Index(index),
    ];
    for step in err.path().iter() {
        match step {
            serde_path_to_error::Segment::Seq { index } => segments.push(Segment::Index(*index)),
            serde_path_to_error::Segment::Map { key } => segments.push(Segment::Key(key.clone())),
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {}
        }
    }
    Some((path_string(&segments), err.into_inner().to_string()))
}

use crate::yaml_scan::TARGET_FIELDS;

/// Warns about unknown fields of a Workload's deployment targets, which the generic check
/// cannot see (their spec is flattened into them). A misspelled `environment` would
/// otherwise silently keep a target out of every environment.
fn warn_unknown_target_fields(
    doc: &Document<'_>,
    origin: &Origin,
    name: &str,
    diagnostics: &mut Diagnostics,
) {
    let Ok(value) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(doc.text) else {
        return;
    };
    let Some(targets) = value
        .get("spec")
        .and_then(|s| s.get("deploymentTargets"))
        .and_then(serde_yaml_ng::Value::as_sequence)
    else {
        return;
    };
    for (i, target) in targets.iter().enumerate() {
        let Some(fields) = target.as_mapping() else {
            continue;
        };
        for key in fields.keys().filter_map(serde_yaml_ng::Value::as_str) {
            if TARGET_FIELDS.contains(&key) {
                continue;
            }
            let path = [
                Segment::Key("spec".to_owned()),
                Segment::Key("deploymentTargets".to_owned()),
                Segment::Index(i),
                Segment::Key(key.to_owned()),
            ];
            diagnostics.push(
                Diagnostic::warning(
                    Code::UnknownField,
                    format!(
                        "a deployment target has no such field; it is ignored (misspelled? the fields are {})",
                        TARGET_FIELDS.join(", ")
                    ),
                )
                .at(origin)
                .on(Kind::Workload, name)
                .field(path_string(&path)),
            );
        }
    }
}

/// Fields of Kubernetes' ObjectMeta that kalypso does not read but the API server accepts.
const OBJECT_META_FIELDS: &[&str] = &[
    "generateName",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Whether a field the typed parse ignored is unknown to the API server too (which prunes
/// it, so it has no effect in the original): anything under `spec`, a top-level field other
/// than `apiVersion`, `kind`, `status` (and a ConfigMap's `binaryData`, `immutable`), or a
/// metadata field that is not one of ObjectMeta's.
fn is_unknown_field(kind: Kind, path: &[Segment]) -> bool {
    let key = |i: usize| match path.get(i) {
        Some(Segment::Key(k)) => Some(k.as_str()),
        _ => None,
    };
    match (key(0), path.len()) {
        (Some("spec"), n) => n > 1,
        (Some("metadata"), 2) => key(1).is_some_and(|k| !OBJECT_META_FIELDS.contains(&k)),
        (Some("metadata"), _) => false,
        (Some("apiVersion" | "kind" | "status"), _) => false,
        (Some("binaryData" | "immutable"), _) => kind != Kind::ConfigMap,
        (Some(_), 1) => true,
        _ => false,
    }
}

/// Deserializes a document into `T`, reporting the failing field's path and line, and
/// warning about fields under `spec` that the scheduler does not know (usually typos).
fn parse_document<T: DeserializeOwned>(
    doc: &Document<'_>,
    origin: &Origin,
    kind: Kind,
    name: &str,
    diagnostics: &mut Diagnostics,
) -> Option<T> {
    let mut unknown: Vec<Vec<Segment>> = Vec::new();
    // Parsed first without tracking the path of each value (which copies every key); the
    // path is only wanted for an error, and a document that fails is parsed again with it.
    let untracked: Option<T> = {
        let mut track = |path: serde_ignored::Path<'_>| unknown.push(segments(&path));
        let de = serde_yaml_ng::Deserializer::from_str(doc.text);
        T::deserialize(serde_ignored::Deserializer::new(de, &mut track)).ok()
    };
    let result: Result<T, _> = match untracked {
        Some(v) => Ok(v),
        None => {
            unknown.clear();
            let mut track = |path: serde_ignored::Path<'_>| unknown.push(segments(&path));
            let de = serde_yaml_ng::Deserializer::from_str(doc.text);
            let ignored = serde_ignored::Deserializer::new(de, &mut track);
            serde_path_to_error::deserialize(ignored)
        }
    };
    for path in unknown.into_iter().filter(|p| is_unknown_field(kind, p)) {
        diagnostics.push(
            Diagnostic::warning(
                Code::UnknownField,
                format!("{kind} has no such field; it is ignored (misspelled?)"),
            )
            .at(origin)
            .on(kind, name)
            .field(path_string(&path)),
        );
    }
    match result {
        Ok(v) => Some(v),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let (path, raw) = match flattened_leaf(doc.text, kind, &path) {
                Some((leaf, raw)) => (leaf, raw),
                None => (path, inner.to_string()),
            };
            let (field, mut message) = describe_error(&path, &raw);
            // An enum field given a list or mapping: serde says it wanted a tag; say which
            // values the field takes instead.
            if let Some(rest) = message.strip_prefix("must be a YAML tag starting with '!', found ")
                && let Some(variants) = field.as_deref().and_then(|f| variants_at::<T>(doc.text, f))
            {
                message = format!("must be one of {variants}, found {rest}");
            }
            if let Some(tag) = field.as_deref().and_then(|f| tag_at(doc.text, f)) {
                message.push_str(&tag_hint(&tag));
            }
            let mut d = Diagnostic::error(Code::InvalidObject, message).on(kind, name);
            // With a field, the file's positions are read once it is loaded (see
            // `crate::position`); without one, the parser's place is the best there is.
            d = match field {
                Some(field) => d.at(origin).field(field),
                None => {
                    let d = d.at(&located(&inner, doc, origin));
                    match inner.location().and_then(|l| {
                        crate::yaml_scan::path_at(
                            doc.text,
                            u32::try_from(l.line().saturating_sub(1)).unwrap_or(0),
                            u32::try_from(l.column().saturating_sub(1)).unwrap_or(0),
                        )
                    }) {
                        Some(field) => d.field(field),
                        None => d,
                    }
                }
            };
            diagnostics.push(d);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    /// Loads each document of `text` both ways (with what the scan resolved, and parsed for
    /// its type) and checks that objects and diagnostics are the same; returns whether the
    /// scan resolved each.
    fn same_both_ways(text: &str) -> Vec<bool> {
        let origin = Origin::new("f.yaml", 0);
        split_documents(text)
            .iter()
            .map(|doc| {
                let (mut scanned, mut parsed) = (Diagnostics::new(), Diagnostics::new());
                let a = load_document_as(doc, &origin, true, &mut scanned);
                let b = load_document_as(doc, &origin, false, &mut parsed);
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{}", doc.text);
                assert_eq!(scanned, parsed, "{}", doc.text);
                let limits = crate::yaml_scan::ScanLimits {
                    depth: 100,
                    alias_nodes: 100_000,
                };
                crate::yaml_scan::scan(doc.text, limits, 1).resolved.is_some()
            })
            .collect()
    }

    #[test]
    fn the_scans_type_and_name_are_those_the_parse_reads() {
        let head = "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ";
        let workload = |target: &str| {
            format!(
                "{head}Workload\nmetadata:\n  name: w\nspec:\n  deploymentTargets:\n  - name: t\n    \
                 environment: dev\n    manifests: {{repo: r, branch: b, path: p}}\n{target}"
            )
        };
        let cases: Vec<(String, bool)> = vec![
            (format!("{head}ClusterType\nmetadata:\n  name: a\nspec:\n  reconciler: r\n  namespaceService: n\n"), true),
            (format!("{head}ClusterType\nmetadata:\n  name: \"3\"\nspec:\n  reconciler: r\n  namespaceService: n\n"), true),
            (format!("{head}ClusterType\nmetadata:\n  name: 3\nspec:\n  reconciler: r\n  namespaceService: n\n"), false),
            (format!("{head}ClusterType\nmetadata:\n  name: true\nspec:\n  reconciler: r\n  namespaceService: n\n"), true),
            (format!("{head}ClusterType\nmetadata:\n  name: [a]\nspec: {{}}\n"), true),
            (format!("{head}ClusterType\nmetadata: [name]\nspec: {{}}\n"), true),
            (format!("{head}ClusterType\nmetadata:\n  name: nan\nspec:\n  reconciler: r\n  namespaceService: n\n"), true),
            (format!("{head}!!str ClusterType\nmetadata:\n  name: a\nspec: {{}}\n"), false),
            (format!("{head}Clustertype\nmetadata:\n  name: a\n"), true),
            (format!("{head}null\nmetadata:\n  name: a\n"), true),
            (format!("{head}\nmetadata:\n  name: a\n"), true),
            ("apiVersion: 1\nkind: ClusterType\nmetadata:\n  name: a\n".to_owned(), false),
            ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\ndata: {a: b}\n".to_owned(), true),
            ("kind: ConfigMap\nmetadata:\n  name: c\n".to_owned(), true),
            ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: 1\n".to_owned(), true),
            ("apiVersion: v1\nkind: 'ConfigMap'\nmetadata:\n  name: \"c\"\n  labels: {x: y}\ndata: {a: b}\n".to_owned(), true),
            ("apiVersion: v1\nkind: ConfigMap\nmetadata: &m\n  name: c\nother: *m\n".to_owned(), false),
            ("- a\n- b\n".to_owned(), false),
            ("just text\n".to_owned(), false),
            (format!("{head}Workload\nmetadata:\n  name: w\nspec:\n  deploymentTargets: 3\n"), true),
            (workload(""), true),
            (workload("    enviroment: x\n"), true),
            (workload("    1: x\n"), true),
            (workload("  - name: u\n    environment: dev\n    extra: {a: b}\n    manifests: {repo: r, branch: b, path: p}\n"), true),
            (format!("{head}SchedulingPolicy\nmetadata:\n  name: p\nspec:\n  deploymentTargetSelector: {{}}\n"), true),
        ];
        for (text, resolved) in cases {
            let got = same_both_ways(&text);
            assert_eq!(got, [resolved], "{text}");
        }
        let kinds = same_both_ways("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n---\nkind: x\n");
        assert_eq!(kinds, [true, true]);
    }

    #[test]
    fn splits_documents_and_tracks_lines() {
        let text = "# c\na: 1\n---\nb: 2\n--- \n\n---\n# only a comment\n...\nc: |\n  x\n";
        let docs = split_documents(text);
        let starts: Vec<(u32, u32)> = docs.iter().map(|d| (d.first_line, content_line(d))).collect();
        assert_eq!(starts, [(1, 2), (4, 4), (10, 10)]);
        assert_eq!(docs[2].text, "c: |\n  x\n");
    }

    fn load(text: &str) -> (Vec<AnyObject>, Diagnostics) {
        let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", text.as_bytes())]);
        let mut d = Diagnostics::new();
        let objects = load_tree(&tree, &mut d);
        (objects, d)
    }

    #[test]
    fn loads_known_kinds_and_skips_others() {
        let (objects, d) = load(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n\
             apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\n  labels: {size: large}\n\
             spec: {reconciler: flux, namespaceService: ns, configType: cfg}\n",
        );
        assert!(d.is_empty(), "{d}");
        assert_eq!(objects.len(), 1);
        let AnyObject::ClusterType(ct) = &objects[0] else {
            panic!("not a cluster type")
        };
        assert_eq!(ct.meta.name, "large");
        assert_eq!(ct.origin.to_string(), "dev/f.yaml:5");
    }

    #[test]
    fn reports_missing_fields_with_path_and_line() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\nspec:\n  reconciler: flux\n",
        );
        assert!(objects.is_empty());
        let shown = d.to_string();
        assert_eq!(
            shown.trim_end(),
            "error[invalid-object]: dev/f.yaml:5:1: ClusterType \"large\": spec.namespaceService: \
             required field is missing"
        );
    }

    #[test]
    fn reports_malformed_yaml_with_absolute_line() {
        let (_, d) = load("apiVersion: v1\nkind: Secret\n---\nkind: [unclosed\n");
        let shown = d.to_string();
        assert_eq!(
            shown.trim_end(),
            "error[yaml]: dev/f.yaml:4:7: kind: the list opened with `[` here is not closed with `]` (the YAML \
             stops making sense on line 5: a missing `]`, or a missing comma between two items?)"
        );
    }

    /// A document broken after the line that names its object is reported against the
    /// object, at the field, in words that say what to fix; so is one of a kind the scheduler
    /// does not read.
    #[test]
    fn broken_documents_name_their_object_and_field() {
        let head = "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\n";
        let shown = |text: &str| load(text).1.to_string().trim_end().to_owned();
        assert_eq!(
            shown(&format!(
                "{head}spec:\n  reconciler: r\n  namespaceService: *nope\n"
            )),
            "error[yaml]: dev/f.yaml:7:21: ClusterType \"large\": spec.namespaceService: the alias *nope refers to \
             no anchor: an alias repeats a node marked `&nope` earlier in the same document; quote a value that \
             starts with `*`"
        );
        assert_eq!(
            shown(&format!("{head}spec:\n  ? [a, b]\n  : c\n")),
            "error[invalid-object]: dev/f.yaml:6:5: ClusterType \"large\": spec[[a, b]]: the key [a, b] is a list, \
             but keys must be strings: a Kubernetes object is JSON, whose keys are strings (a `? ` or `[...]:` \
             key is a complex key); quote it to make it one"
        );
        assert_eq!(
            shown(&format!("{head}  labels:\n    <<: plain\n")),
            "error[yaml]: dev/f.yaml:6:9: ClusterType \"large\": metadata.labels.<<: a merge key (<<) must refer \
             to a mapping or a list of mappings, not to a single value"
        );
        assert_eq!(
            shown(&format!(
                "{head}spec:\n  reconciler: \"r\n  namespaceService: n\n"
            )),
            "error[yaml]: dev/f.yaml:6:15: ClusterType \"large\": spec.reconciler: the quoted string that starts \
             here is not closed: its closing quote is missing (a quote inside a string is written '' in single \
             quotes, \\\" in double quotes)"
        );
        assert_eq!(
            shown(&format!("{head}  labels:\n    size: !!int large\n")),
            "error[invalid-object]: dev/f.yaml:6:11: ClusterType \"large\": metadata.labels.size: must be an \
             integer, found the string \"large\" (the tag !!int asks for that type: remove the tag, or write a \
             value of that type)"
        );
        // The name comes before the broken part but after the kind's; a Secret's is named too.
        assert_eq!(
            shown("metadata:\n  name: s\n  labels: {a: [}\nkind: Secret\n"),
            "error[yaml]: dev/f.yaml:3:16: Secret \"s\": metadata.labels.a[0]: a value is missing here (after \
             `- `, `? `, a tag or an anchor, or between commas)"
        );
    }

    #[test]
    fn a_policy_needs_both_selectors_and_their_label_selectors() {
        let head = "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: SchedulingPolicy\n";
        let (objects, d) = load(&format!(
            "{head}metadata: {{name: missing}}\nspec:\n  deploymentTargetSelector:\n    labelSelector: {{}}\n\
             ---\n{head}metadata: {{name: typo}}\nspec:\n  deploymentTargetSelector:\n    labelSelector: {{}}\n\
             \x20 clusterTypeSelecter:\n    labelSelector: {{}}\n\
             ---\n{head}metadata: {{name: inner}}\nspec:\n  deploymentTargetSelector:\n    workspace: team\n\
             \x20 clusterTypeSelector:\n    labelSelector:\n\
             ---\n{head}metadata: {{name: fine}}\nspec:\n  deploymentTargetSelector: {{labelSelector: {{}}}}\n\
             \x20 clusterTypeSelector: {{labelSelector: {{matchLabels: {{a: b}}}}}}\n"
        ));
        assert_eq!(objects.len(), 1, "only the complete policy loads");
        let errors: Vec<String> = d.errors().map(ToString::to_string).collect();
        let missing = "required field is missing: the original scheduler's CRD requires";
        assert_eq!(errors.len(), 4, "{errors:#?}");
        assert!(errors[0].starts_with(&format!(
            "error[invalid-object]: dev/f.yaml:4:1: SchedulingPolicy \"missing\": spec.clusterTypeSelector: {missing} clusterTypeSelector"
        )), "{errors:#?}");
        assert!(
            errors[1].contains("SchedulingPolicy \"typo\": spec.clusterTypeSelector: "),
            "{errors:#?}"
        );
        assert!(errors[2].starts_with("error[invalid-object]: dev/f.yaml:21:3: SchedulingPolicy \"inner\": spec.deploymentTargetSelector.labelSelector: "), "{errors:#?}");
        assert!(
            errors[3].contains("\"inner\": spec.clusterTypeSelector.labelSelector: "),
            "{errors:#?}"
        );
        let warnings: Vec<String> = d.warnings().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "warning[unknown-field]: dev/f.yaml:14:3: SchedulingPolicy \"typo\": spec.clusterTypeSelecter: \
              SchedulingPolicy has no such field; it is ignored (misspelled?)"
            ]
        );
    }

    #[test]
    fn object_manifests_are_rendered_with_a_warning() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Template\nmetadata: {name: old}\n\
             spec:\n  type: reconciler\n  manifests:\n    - \"kind: A\"\n    - {kind: B}\n",
        );
        assert_eq!(objects.len(), 1);
        let warnings: Vec<String> = d.warnings().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "warning[legacy-manifest]: dev/f.yaml:8:7: Template \"old\": spec.manifests[1]: a mapping, not a template string"
            ),
            "{warnings:?}"
        );
    }

    #[test]
    fn warns_about_unknown_top_level_and_metadata_fields() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: x\n  lables: {a: b}\n\
             \x20 uid: u\n  creationTimestamp: null\n\
             spec: {reconciler: a, namespaceService: b, configType: c}\nstatus: {}\nspecs: {}\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m, labels: {platform-config: \"true\"}}\nimmutable: true\n\
             dta: {A: b}\n",
        );
        assert_eq!(objects.len(), 2);
        let warnings: Vec<String> = d.warnings().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "warning[unknown-field]: dev/f.yaml:5:3: ClusterType \"x\": metadata.lables: ClusterType has no \
                 such field; it is ignored (misspelled?)",
                "warning[unknown-field]: dev/f.yaml:10:1: ClusterType \"x\": specs: ClusterType has no \
                 such field; it is ignored (misspelled?)",
                "warning[unknown-field]: dev/f.yaml:16:1: ConfigMap \"m\": dta: ConfigMap has no \
                 such field; it is ignored (misspelled?)",
            ]
        );
    }

    #[test]
    fn warns_about_unknown_spec_fields_at_their_line() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata: {name: x}\n\
             spec: {reconciler: a, namespaceService: b, configType: c, reconcilr: d}\n---\n\
             apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata: {name: y}\n\
             spec:\n  reconciler: a\n  namespaceService: b\n  configType: c\n  configTyp: d\n",
        );
        assert_eq!(objects.len(), 2);
        let warnings: Vec<String> = d.warnings().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "warning[unknown-field]: dev/f.yaml:4:59: ClusterType \"x\": spec.reconcilr: ClusterType has no \
                 such field; it is ignored (misspelled?)",
                "warning[unknown-field]: dev/f.yaml:13:3: ClusterType \"y\": spec.configTyp: ClusterType has no \
                 such field; it is ignored (misspelled?)"
            ]
        );
    }

    #[test]
    fn warns_about_unknown_fields_of_deployment_targets() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Workload\nmetadata: {name: w}\nspec:\n  \
             deploymentTargets:\n    - name: a\n      environment: dev\n    - name: b\n      environment: stage\n      \
             enviroment: dev\n",
        );
        assert_eq!(objects.len(), 1);
        assert_eq!(
            d.to_string().trim_end(),
            "warning[unknown-field]: dev/f.yaml:10:7: Workload \"w\": spec.deploymentTargets[1].enviroment: a \
             deployment target has no such field; it is ignored (misspelled? the fields are name, labels, \
             environment, manifests, configSchemas)"
        );
    }

    #[test]
    fn lists_and_scalars_are_errors_and_empty_documents_are_skipped() {
        let (objects, d) = load("- a\n- b\n---\njust text\n---\n~\n---\n");
        assert!(objects.is_empty());
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "error[not-an-object]: dev/f.yaml:1: document is a list, not a Kubernetes object (a mapping \
                 with apiVersion, kind and metadata)",
                "error[not-an-object]: dev/f.yaml:4: document is a scalar, not a Kubernetes object (a mapping \
                 with apiVersion, kind and metadata)",
            ]
        );
    }

    #[test]
    fn documents_without_type_are_errors_naming_the_missing_field() {
        let head = "apiVersion: scheduler.kalypso.io/v1alpha1\n";
        let (objects, d) = load(&format!(
            "name: x\nspec: {{}}\n---\n{head}metadata: {{name: large}}\nspec: {{}}\n---\n\
             kind: ClusterType\nmetadata: {{name: small}}\n---\n{head}kind: [ClusterType]\nmetadata: {{name: n}}\n"
        ));
        assert!(objects.is_empty());
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        let tail = "(as strings), so it is not a Kubernetes object: Flux cannot apply a file that holds it, and \
                    skipping it would drop the object it describes from the output";
        assert_eq!(
            shown,
            [
                format!(
                    "error[not-an-object]: dev/f.yaml:1: apiVersion: document has no apiVersion and kind {tail}"
                ),
                format!(
                    "error[not-an-object]: dev/f.yaml:4: kind: document (metadata.name \"large\") has no kind {tail}"
                ),
                format!(
                    "error[not-an-object]: dev/f.yaml:8: ClusterType \"small\": apiVersion: document has no apiVersion {tail}"
                ),
                format!(
                    "error[not-an-object]: dev/f.yaml:12:1: kind: document (metadata.name \"n\") has no kind {tail}"
                ),
            ]
        );
    }

    #[test]
    fn unknown_kalypso_kinds_and_versions_are_errors() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterTyp\nmetadata: {name: a}\n---\n\
             apiVersion: scheduler.kalypso.io/v1\nkind: ClusterType\nmetadata: {name: b}\n---\n\
             apiVersion: v1\nkind: Template\nmetadata: {name: c}\n---\n\
             apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: d}\n",
        );
        assert!(objects.is_empty());
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 3, "{shown:#?}");
        assert!(
            shown[0].starts_with(
                "error[unknown-kind]: dev/f.yaml:2:1: ClusterTyp \"a\": kind: unknown kind \"ClusterTyp\"; the \
                 kinds of scheduler.kalypso.io/v1alpha1 are ClusterType, Template,"
            ),
            "{shown:#?}"
        );
        assert_eq!(
            shown[1],
            "error[unknown-kind]: dev/f.yaml:5:1: ClusterType \"b\": apiVersion: ClusterType is a kind of \
             scheduler.kalypso.io/v1alpha1, not of \"scheduler.kalypso.io/v1\""
        );
        assert_eq!(
            shown[2],
            "error[unknown-kind]: dev/f.yaml:9:1: Template \"c\": apiVersion: Template is a kind of \
             scheduler.kalypso.io/v1alpha1, not of \"v1\""
        );
    }

    #[test]
    fn config_map_values_and_labels_must_be_strings() {
        let (objects, d) = load(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: m\ndata:\n  A: ok\n  REPLICAS: 3\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: n\n  labels:\n    platform-config: true\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: o\ndata:\n  LIST: [a]\n  NULL: ~\n",
        );
        assert!(objects.is_empty());
        let shown: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "error[invalid-object]: dev/f.yaml:7:3: ConfigMap \"m\": data.REPLICAS: must be a string, not \
                 the number 3; quote it: \"3\"",
                "error[invalid-object]: dev/f.yaml:14:5: ConfigMap \"n\": metadata.labels.platform-config: must \
                 be a string, not the boolean true; quote it: \"true\"",
                "error[invalid-object]: dev/f.yaml:21:3: ConfigMap \"o\": data.LIST: must be a string, not a \
                 list; write structured data as a block string (`key: |`)",
            ]
        );
    }

    #[test]
    fn wrong_types_name_the_field_once() {
        let (_, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata: {name: x}\n\
             spec:\n  reconciler: [a]\n  namespaceService: b\n  configType: c\n",
        );
        assert_eq!(
            d.to_string().trim_end(),
            "error[invalid-object]: dev/f.yaml:5:3: ClusterType \"x\": spec.reconciler: must be a string, \
             found a list"
        );
    }

    #[test]
    fn wrong_types_in_a_deployment_target_name_the_leaf_without_serde_wording() {
        let workload = |target: &str| {
            load(&format!(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Workload\nmetadata: {{name: app}}\nspec:\n  \
                 deploymentTargets:\n    - name: a\n      environment: dev\n{target}"
            ))
            .1
            .to_string()
        };
        assert_eq!(
            workload("    - name: b\n      environment: dev\n      manifests:\n        repo: 42\n")
                .trim_end(),
            "error[invalid-object]: dev/f.yaml:11:9: Workload \"app\": spec.deploymentTargets[1].manifests.repo: \
             must be a string, found the number 42"
        );
        assert_eq!(
            workload("    - name: b\n      environment: [dev]\n").trim_end(),
            "error[invalid-object]: dev/f.yaml:9:7: Workload \"app\": spec.deploymentTargets[1].environment: \
             must be a string, found a list"
        );
        assert_eq!(
            workload("    - name: b\n      environment: dev\n      configSchemas: {a: b}\n").trim_end(),
            "error[invalid-object]: dev/f.yaml:10:7: Workload \"app\": spec.deploymentTargets[1].configSchemas: \
             must be a list, found a mapping"
        );
        assert_eq!(
            workload("    - name: b\n      environment: dev\n      configSchemas: [true]\n").trim_end(),
            "error[invalid-object]: dev/f.yaml:10:23: Workload \"app\": spec.deploymentTargets[1].configSchemas[0]: \
             must be a string, found the boolean true"
        );
        for shown in [
            workload("    - name: b\n      environment: {x: 1}\n"),
            workload("    - name: {x: 1}\n      environment: dev\n"),
        ] {
            assert!(
                !shown.contains("invalid type") && !shown.contains("expected"),
                "{shown}"
            );
            assert!(shown.contains("must be a string, found a mapping"), "{shown}");
        }
    }

    #[test]
    fn files_that_are_not_utf8_name_the_line() {
        let text =
            b"apiVersion: v1\nkind: Secret\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n\
                     data:\n  CITY: M\xfcnchen\n";
        let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", &text[..])]);
        let mut d = Diagnostics::new();
        assert!(load_tree(&tree, &mut d).is_empty());
        assert_eq!(
            d.to_string().trim_end(),
            "error[yaml]: dev/f.yaml:9:10: ConfigMap \"c\": data.CITY: the file is not UTF-8 text (byte 0xFC here \
             is not UTF-8); save it as UTF-8"
        );
    }
}
