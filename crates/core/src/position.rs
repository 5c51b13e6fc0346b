//! Where a field is written: the line and column of a field path (`spec.deploymentTargets[2].labels`)
//! in a YAML document, read from the parser's events rather than by searching the text, so
//! that a diagnostic points at the field itself in block style, flow style, quoted keys and
//! comments alike.
//!
//! Diagnostics carry the object's origin (file and the line its document starts on) and a
//! field path; [`FilePositions::place`] turns those into the field's line and column once the file's text is
//! at hand: right after a file is loaded, and at the end of a run for the diagnostics found
//! later (a name, a selector, a placement field).

use libyaml_safer::{EventData, Parser};

use crate::diag::{Diagnostic, Origin};

/// A place in a document: 0-based line and column (in characters), as the parser counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    pub line: u32,
    pub column: u32,
}

impl Mark {
    fn of(mark: libyaml_safer::Mark) -> Mark {
        Mark {
            line: u32::try_from(mark.line).unwrap_or(u32::MAX),
            column: u32::try_from(mark.column).unwrap_or(u32::MAX),
        }
    }
}

/// How `candidate`, a path the document has, relates to `target`, the path sought.
fn relation(target: &str, candidate: &str) -> Option<bool> {
    let rest = target.strip_prefix(candidate)?;
    if rest.is_empty() {
        Some(true)
    } else if rest.starts_with(['.', '[']) {
        Some(false)
    } else {
        None
    }
}

/// The paths a key under `parent` is written as in diagnostics: `parent.key`, and
/// `parent["key"]` for keys that are not plain words.
fn key_paths(parent: &str, key: &str) -> [String; 2] {
    let dotted = if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    };
    [dotted, format!("{parent}[{key:?}]")]
}

enum Container {
    Sequence { path: String, index: usize },
    Mapping { path: String, at_key: bool },
}

/// The position of `field` in `text` (one YAML document): the key of a mapping entry, or the
/// start of a list item. When the path is not all there (a missing field), the deepest part
/// that is: a missing `spec.selector.labelSelector` points at `spec.selector`. `None` when not
/// even the first step is found or the text does not parse that far.
pub(crate) fn find(text: &str, field: &str) -> Option<Mark> {
    if field.is_empty() {
        return None;
    }
    crate::yaml_scan::guarded(text, |text| walk(text, field))
}

fn walk(text: &str, field: &str) -> Option<Mark> {
    let mut parser = Parser::new();
    let mut bytes = text.as_bytes();
    parser.set_input_string(&mut bytes);
    let mut stack: Vec<Container> = Vec::new();
    // The path of the node being read (a mapping value's key, or a list item).
    let mut current = String::new();
    let mut deepest: Option<(usize, Mark)> = None;
    // Whether `path` is the field; remembers it if it is a part of it.
    let note = |deepest: &mut Option<(usize, Mark)>, path: &str, mark: Mark| -> bool {
        match relation(field, path) {
            Some(true) => true,
            Some(false) => {
                if deepest.is_none_or(|(len, _)| path.len() > len) {
                    *deepest = Some((path.len(), mark));
                }
                false
            }
            None => false,
        }
    };
    loop {
        let Ok(event) = parser.parse() else {
            return deepest.map(|(_, m)| m);
        };
        let mark = Mark::of(event.start_mark);
        let starts_node = matches!(
            event.data,
            EventData::Scalar { .. }
                | EventData::Alias { .. }
                | EventData::SequenceStart { .. }
                | EventData::MappingStart { .. }
        );
        if starts_node {
            match stack.last_mut() {
                Some(Container::Mapping { path, at_key }) if *at_key => {
                    *at_key = false;
                    current = match &event.data {
                        EventData::Scalar { value, .. } => {
                            let paths = key_paths(path, value);
                            if let Some(found) = paths.iter().find(|p| relation(field, p).is_some()) {
                                if note(&mut deepest, found, mark) {
                                    return Some(mark);
                                }
                                found.clone()
                            } else {
                                paths[0].clone()
                            }
                        }
                        // A complex key: nothing under it is sought.
                        _ => format!("{path}[?]"),
                    };
                    if let EventData::Scalar { .. } | EventData::Alias { .. } = event.data {
                        continue;
                    }
                }
                Some(Container::Sequence { path, index }) => {
                    current = format!("{path}[{index}]");
                    if note(&mut deepest, &current, mark) {
                        return Some(mark);
                    }
                }
                _ => {}
            }
        }
        let completes_node = match &event.data {
            EventData::StreamEnd => return deepest.map(|(_, m)| m),
            EventData::SequenceStart { .. } => {
                stack.push(Container::Sequence {
                    path: std::mem::take(&mut current),
                    index: 0,
                });
                false
            }
            EventData::MappingStart { .. } => {
                stack.push(Container::Mapping {
                    path: std::mem::take(&mut current),
                    at_key: true,
                });
                false
            }
            EventData::SequenceEnd | EventData::MappingEnd => {
                stack.pop();
                true
            }
            EventData::Scalar { .. } | EventData::Alias { .. } => true,
            _ => false,
        };
        if completes_node {
            match stack.last_mut() {
                Some(Container::Sequence { index, .. }) => *index += 1,
                Some(Container::Mapping { at_key, .. }) => *at_key = true,
                None => {}
            }
        }
    }
}

/// Where one document of a YAML stream is: its byte range and the 1-based line it starts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DocumentRange {
    pub start: usize,
    pub end: usize,
    pub first_line: u32,
}

/// Splits a YAML stream at document markers (`---` and `...` at the start of a line).
/// Markers cannot occur inside a document at column 0 (not even in block scalars), so a
/// line-based split is exact. Content after `--- ` on the marker line (`--- !tag`, a scalar)
/// belongs to the new document, which then starts on the marker line, after the marker.
pub(crate) fn document_ranges(text: &str) -> Vec<DocumentRange> {
    let mut ranges = Vec::new();
    let mut start = 0usize;
    let mut first_line = 1u32;
    let mut offset = 0usize;
    for (line_no, line) in (1u32..).zip(text.split_inclusive('\n')) {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_start = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        let is_end = bare == "..." || bare.starts_with("... ");
        if is_start || is_end {
            ranges.push(DocumentRange {
                start,
                end: offset,
                first_line,
            });
            if is_start && bare.len() > 3 {
                start = offset + 3;
                first_line = line_no;
            } else {
                start = offset + line.len();
                first_line = line_no + 1;
            }
        }
        offset += line.len();
    }
    ranges.push(DocumentRange {
        start,
        end: text.len(),
        first_line,
    });
    ranges
}

/// serde_yaml appends " at line L column C", relative to the document: a diagnostic
/// carries the position instead.
pub(crate) fn strip_location(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// A file's text, ready to point diagnostics about it at their fields.
pub(crate) struct FilePositions<'t> {
    text: &'t str,
    documents: Vec<DocumentRange>,
}

impl<'t> FilePositions<'t> {
    /// The positions of `text`, a file's content.
    pub(crate) fn new(text: &'t str) -> FilePositions<'t> {
        FilePositions {
            text,
            documents: document_ranges(text),
        }
    }

    /// Gives `d`, about this file, its field's line and column, if its field is known and its
    /// column is not. Its line names the document its object is in; a field not found leaves
    /// it as it is.
    pub(crate) fn place(&self, d: &mut Diagnostic) {
        let (Some(origin), Some(field)) = (&d.origin, &d.field) else {
            return;
        };
        if origin.column > 0 || origin.line == 0 {
            return;
        }
        let Some(range) = self.documents.iter().rev().find(|r| r.first_line <= origin.line) else {
            return;
        };
        let (begin, first_line) = (range.start, range.first_line);
        let Some(document) = self.text.get(begin..range.end.max(begin)) else {
            return;
        };
        // The marker of a `--- content` line is blanked, as the loader does.
        let blanked;
        let document = if begin >= 3 && self.text.get(begin - 3..begin) == Some("---") {
            blanked = format!("   {document}");
            blanked.as_str()
        } else {
            document
        };
        if let Some(mark) = find(document, field) {
            d.origin = Some(Origin::at(&origin.file, first_line + mark.line, mark.column + 1));
        }
    }
}

/// Whether `d` names a field in a file but not yet the field's column.
pub(crate) fn needs_place(d: &Diagnostic) -> bool {
    d.field.is_some() && d.origin.as_ref().is_some_and(|o| o.line > 0 && o.column == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str, field: &str) -> Option<(u32, u32)> {
        find(text, field).map(|m| (m.line + 1, m.column + 1))
    }

    #[test]
    fn finds_keys_and_items_in_block_style() {
        let text = "apiVersion: v1\nkind: Workload\nspec:\n  # targets\n  deploymentTargets:\n    - name: a\n      labels: {x: y}\n    -\n      name: b\n      labels:\n        region: east\n";
        assert_eq!(at(text, "kind"), Some((2, 1)));
        assert_eq!(at(text, "spec.deploymentTargets"), Some((5, 3)));
        assert_eq!(at(text, "spec.deploymentTargets[0]"), Some((6, 7)));
        assert_eq!(at(text, "spec.deploymentTargets[0].labels.x"), Some((7, 16)));
        assert_eq!(at(text, "spec.deploymentTargets[1].name"), Some((9, 7)));
        assert_eq!(at(text, "spec.deploymentTargets[1].labels.region"), Some((11, 9)));
    }

    #[test]
    fn finds_keys_in_flow_style_and_quoted() {
        let text = "metadata: {name: a, labels: {'app.kubernetes.io/name': x, \"b c\": y}}\n";
        assert_eq!(at(text, "metadata.name"), Some((1, 12)));
        assert_eq!(at(text, "metadata.labels.app.kubernetes.io/name"), Some((1, 30)));
        assert_eq!(at(text, "metadata.labels[\"b c\"]"), Some((1, 59)));
        assert_eq!(at("a: [x, {b: 1}]\n", "a[1].b"), Some((1, 9)));
    }

    #[test]
    fn a_missing_field_points_at_the_deepest_part_there_is() {
        let text = "spec:\n  selector:\n    other: 1\n";
        assert_eq!(at(text, "spec.selector.labelSelector"), Some((2, 3)));
        assert_eq!(at(text, "status"), None);
        // A key that only starts like the sought one is not a part of it.
        assert_eq!(at("specs: 1\n", "spec.x"), None);
        // Values are not keys.
        assert_eq!(at("a: spec\n", "spec"), None);
    }

    #[test]
    fn text_that_does_not_parse_gives_what_came_before() {
        assert_eq!(at("a:\n  b: 1\n  c: [\n", "a.b"), Some((2, 3)));
        assert_eq!(at("a:\n  b: 1\n  c: [\n", "a.c.d"), Some((3, 3)));
    }

    #[test]
    fn places_diagnostics_in_their_document() {
        use crate::diag::{Code, Diagnostic};
        let text = "kind: A\n---\n# note\nkind: B\nmetadata:\n  name: x\n--- kind: C\n";
        let origin = |line| Origin::new("f.yaml", line);
        let mut ds = [
            Diagnostic::error(Code::InvalidName, "m")
                .at(&origin(3))
                .field("metadata.name"),
            Diagnostic::error(Code::InvalidName, "m")
                .at(&origin(7))
                .field("kind"),
            Diagnostic::error(Code::InvalidName, "m")
                .at(&origin(1))
                .field("nothing"),
            Diagnostic::error(Code::InvalidName, "m")
                .at(&Origin::new("g.yaml", 3))
                .field("kind"),
        ];
        let positions = FilePositions::new(text);
        for d in ds
            .iter_mut()
            .filter(|d| d.origin.as_ref().is_some_and(|o| &*o.file == "f.yaml"))
        {
            positions.place(d);
        }
        let shown: Vec<String> = ds
            .iter()
            .map(|d| d.origin.as_ref().unwrap().to_string())
            .collect();
        assert_eq!(shown, ["f.yaml:6:3", "f.yaml:7:5", "f.yaml:1", "g.yaml:3"]);
    }
}
