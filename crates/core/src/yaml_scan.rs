//! A pass over a YAML document's events before it is deserialized, for what the
//! deserializer does not check, checks too late, or reports in its own words.
//!
//! - **Limits**: nesting deeper than `yaml-depth`, aliases that expand to more than
//!   `yaml-alias-nodes` nodes (an "alias bomb"). The events are streamed, so a document
//!   100,000 levels deep is refused after reading the first levels, in milliseconds (the
//!   deserializer's parser slows down quadratically with flow nesting).
//! - **Duplicate mapping keys**, which Kubernetes and the original reject and serde would
//!   resolve silently (the last one wins), reported with both lines and the key's path.
//! - **Keys that are not strings** (a list or mapping as a key, `? [a]` or `[a]: b`), which
//!   a Kubernetes object, being JSON, cannot have; **aliases without an anchor**; **merge
//!   keys** (`<<`) that do not refer to a mapping or a list of mappings.
//! - **Syntax errors**, in words that say what to fix, at the field they were found in
//!   (the parser's own messages, `did not find expected key`, name neither).
//! - **Merge keys** (`<<: *anchor`), which the deserializer keeps as a key named `<<`: the
//!   scan says whether the document has any, so that the loader merges them first.
//!
//! It also notes the document's top-level `kind` and `metadata.name`, so that a document
//! refused here is still reported against its object, and, where it can tell them exactly as
//! the deserializer will read them, `apiVersion`, `kind` and `metadata.name` as strings (see
//! [`Resolved`]), so that the loader need not parse the document once more only for them.

use foldhash::{HashMap, HashMapExt};

use libyaml_safer::{EventData, Parser};

/// What the scan found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Problems, in document order.
    pub problems: Vec<Problem>,
    /// Whether a mapping has a `<<` merge key.
    pub has_merge_keys: bool,
    /// The top-level `kind`, if it is a scalar (the first one, if it is written twice).
    pub kind: Option<String>,
    /// The top-level `metadata.name`, if it is a scalar (the first one).
    pub name: Option<String>,
    /// What the deserializer will read, when the scan can be sure of it (see [`Resolved`]).
    pub resolved: Option<Resolved>,
}

/// `apiVersion`, `kind` and `metadata.name` as serde_yaml reads them into a value and takes
/// them as strings: the string, or `None` for a value that is no string (a number, null, a
/// list) or for no value. The scan gives them only for a document whose values it resolves
/// as the deserializer does: a mapping, with no aliases, tags or merge keys, and these three
/// absent, lists or mappings, or scalars it can tell are strings or not (quoted, or plain and
/// starting with a letter); any other document is parsed for them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    /// Whether an item of the top-level `spec.deploymentTargets` list is a mapping with a
    /// key other than [`TARGET_FIELDS`] (a Workload's unknown target fields: the loader
    /// looks at those documents again to name them).
    pub other_target_keys: bool,
}

/// The fields of a Workload's deployment target.
pub(crate) const TARGET_FIELDS: &[&str] = &["name", "labels", "environment", "manifests", "configSchemas"];

/// Whether serde_yaml reads an untagged scalar written in `style` as a string: `Some(true)`
/// for a quoted or block scalar and for a plain one that starts with a letter and is no
/// null or boolean (no number starts with a letter: those that Rust's float parser reads,
/// `inf` and `nan`, are not finite, which serde_yaml does not take as numbers); `Some(false)`
/// for a plain null, boolean or empty value; `None` when the scan does not tell (a plain
/// scalar that starts otherwise: a number, or a string like `1a`).
fn read_as_string(value: &str, style: libyaml_safer::ScalarStyle) -> Option<bool> {
    if style != libyaml_safer::ScalarStyle::Plain {
        return Some(true);
    }
    match value {
        "" | "~" | "null" | "Null" | "NULL" | "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ if value.as_bytes()[0].is_ascii_alphabetic() => Some(true),
        _ => None,
    }
}

/// What kind of problem a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProblemKind {
    /// A limit was exceeded (its name).
    Limit(&'static str),
    /// A mapping has a key twice.
    DuplicateKey,
    /// A key is a list or a mapping.
    ComplexKey,
    /// The text is not YAML; an alias has no anchor; a merge key refers to something other
    /// than mappings.
    Syntax,
}

/// One problem: the 0-based line and column in the document, the field path, the message,
/// and what kind of problem it is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub line: u32,
    pub column: u32,
    pub field: String,
    pub message: String,
    pub kind: ProblemKind,
}

/// The scan's limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanLimits {
    pub depth: usize,
    pub alias_nodes: usize,
}

/// What a node is, as far as merge keys care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Scalar,
    /// A list; whether every item is a mapping.
    Sequence(bool),
    Mapping,
}

/// A place in the text: 0-based line and column, and the character index.
#[derive(Clone, Copy, Debug, Default)]
struct Place {
    line: u32,
    column: u32,
    index: u64,
}

impl Place {
    fn of(mark: libyaml_safer::Mark) -> Place {
        Place {
            line: saturating_u32(mark.line),
            column: saturating_u32(mark.column),
            index: mark.index,
        }
    }
}

enum Container {
    Sequence {
        index: usize,
        nodes: usize,
        anchor: Option<String>,
        /// Whether every item so far is a mapping.
        of_mappings: bool,
        /// Where it starts, and its path.
        start: Place,
        path: String,
    },
    Mapping {
        /// Whether the next node is a key.
        at_key: bool,
        /// The scalar keys so far, with their 0-based lines.
        seen: HashMap<String, u32>,
        nodes: usize,
        anchor: Option<String>,
        /// Whether the value being read is a merge key's (`<<`).
        merging: bool,
        /// Where the key being read starts, when it is a list or mapping.
        complex_key: Option<Place>,
        start: Place,
        path: String,
    },
}

impl Container {
    fn start(&self) -> (Place, &str) {
        match self {
            Container::Sequence { start, path, .. } | Container::Mapping { start, path, .. } => {
                (*start, path)
            }
        }
    }
}

fn saturating_u32(mark: u64) -> u32 {
    u32::try_from(mark).unwrap_or(u32::MAX)
}

/// Scans `text`, a document whose first line is line `first_line` (1-based) of its file, as
/// messages name other lines. A syntax error ends the scan with a problem that says what to
/// fix.
pub(crate) fn scan(text: &str, limits: ScanLimits, first_line: u32) -> Scan {
    // Should the parser panic, the scan is skipped: the deserializer, which uses another
    // parser, reports the document.
    guarded(text, |text| {
        // The parser refuses control characters before it produces the events around them:
        // they are blanked for the walk, which stops where the first one is.
        match text.char_indices().find(|(_, c)| !is_yaml_char(*c)) {
            Some((at, c)) => {
                let line = text[..at].matches('\n').count();
                let column = text[..at].rsplit('\n').next().unwrap_or_default().chars().count();
                let blanked: String = text
                    .chars()
                    .map(|c| if is_yaml_char(c) { c } else { ' ' })
                    .collect();
                let (line, column) = (saturating_u32(line as u64), saturating_u32(column as u64));
                let mut out = scan_events(&blanked, limits, Some((line, column)), first_line);
                // The walk stops at the character with an empty problem that holds the path
                // there, or before it at a problem of its own.
                let field = match out.problems.pop() {
                    Some(p) if p.message.is_empty() => p.field,
                    Some(p) => {
                        out.problems.push(p);
                        return out;
                    }
                    None => String::new(),
                };
                let escape = format!("\\u{:04X}", u32::from(c));
                out.problems.push(Problem {
                    line,
                    column,
                    field,
                    message: format!(
                        "the control character U+{:04X} is not allowed in YAML text: remove it, or write it as \
                         an escape in a double-quoted string (\"{escape}\")",
                        u32::from(c)
                    ),
                    kind: ProblemKind::Syntax,
                });
                out
            }
            None => scan_events(text, limits, None, first_line),
        }
    })
}

/// The path of the node that starts at or next after 0-based `line` and `column` of `text`
/// (a document), as far as the parser reads it; `None` when there is none or it is the top.
pub(crate) fn path_at(text: &str, line: u32, column: u32) -> Option<String> {
    let unlimited = ScanLimits {
        depth: usize::MAX,
        alias_nodes: usize::MAX,
    };
    guarded(text, |text| {
        scan_events(text, unlimited, Some((line, column)), 1)
            .problems
            .pop()
            .map(|p| p.field)
            .filter(|f| !f.is_empty())
    })
}

/// Whether YAML allows `c` in its text (YAML 1.1's printable characters).
fn is_yaml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7e}' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// Runs `read` on `text` the way libyaml-safer needs it: ending with a line break (it panics
/// on a block scalar that ends the input without one; libyaml's buffer always has one, but a
/// document taken out of a stream may end so), and a panic on some other input taken as
/// nothing found (`T::default()`).
pub(crate) fn guarded<T: Default>(text: &str, read: impl FnOnce(&str) -> T + std::panic::UnwindSafe) -> T {
    let owned;
    let text = if text.ends_with('\n') {
        text
    } else {
        owned = format!("{text}\n");
        &owned
    };
    std::panic::catch_unwind(|| read(text)).unwrap_or_default()
}

/// A path as diagnostics show it, from its steps (`spec`, `[0]`, `name`).
fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for p in path {
        if p.starts_with('[') || s.is_empty() {
            s.push_str(p);
        } else {
            s.push('.');
            s.push_str(p);
        }
    }
    s
}

/// The text between two character indices of `text`, on one line, shortened to 40
/// characters: a complex key as written.
fn excerpt(text: &str, from: u64, to: u64) -> String {
    let from = usize::try_from(from).unwrap_or(usize::MAX);
    let to = usize::try_from(to).unwrap_or(usize::MAX);
    let written: String = text.chars().skip(from).take(to.saturating_sub(from)).collect();
    let one_line = written.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > 40 {
        format!("{}...", one_line.chars().take(40).collect::<String>())
    } else {
        one_line
    }
}

/// What a shape is, for messages.
fn shape_words(shape: Shape) -> &'static str {
    match shape {
        Shape::Scalar => "a single value",
        Shape::Sequence(_) => "a list holding something other than mappings",
        Shape::Mapping => "a mapping",
    }
}

/// Whether an event starts a node (a scalar, an alias, a sequence or a mapping).
fn starts_node(data: &EventData) -> bool {
    matches!(
        data,
        EventData::Scalar { .. }
            | EventData::Alias { .. }
            | EventData::SequenceStart { .. }
            | EventData::MappingStart { .. }
    )
}

#[allow(clippy::too_many_lines)]
fn scan_events(text: &str, limits: ScanLimits, stop_at: Option<(u32, u32)>, first_line: u32) -> Scan {
    let mut out = Scan::default();
    let mut parser = Parser::new();
    let mut bytes = text.as_bytes();
    parser.set_input_string(&mut bytes);
    let mut stack: Vec<Container> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    // Nodes each anchor stands for (itself and everything under it, aliases expanded), and
    // what it is.
    let mut anchors: HashMap<String, (usize, Shape)> = HashMap::new();
    let mut expanded = 0usize;
    // The path of the last node that started (for a walk to a place).
    let mut last_node = String::new();
    // What the deserializer will read (see `Resolved`), and whether the scan can tell it.
    let mut resolved = Resolved::default();
    let mut resolvable = true;
    let mut root_mapping = false;
    loop {
        let event = match parser.parse() {
            Ok(event) => event,
            Err(err) => {
                out.problems
                    .push(syntax_problem(&err, text, &stack, &path, first_line));
                return out;
            }
        };
        let place = Place::of(event.start_mark);
        let (line, column) = (place.line, place.column);
        if let Some(stop) = stop_at
            && (line, column) >= stop
        {
            // A walk to a place: the path of the node that starts there, or else of the one
            // the place is in, is the answer.
            let at_node = (line, column) == stop && starts_node(&event.data);
            out.problems.push(Problem {
                line,
                column,
                field: if at_node { path_string(&path) } else { last_node },
                message: String::new(),
                kind: ProblemKind::Syntax,
            });
            return out;
        }
        if stop_at.is_some() && starts_node(&event.data) {
            last_node = path_string(&path);
            if let (EventData::Scalar { value, .. }, Some(Container::Mapping { at_key: true, .. })) =
                (&event.data, stack.last())
            {
                let mut key = path.clone();
                key.push(value.clone());
                last_node = path_string(&key);
            }
        }
        let is_sequence = matches!(event.data, EventData::SequenceStart { .. });
        // A node's size, anchor and shape, for aliases and for the container that holds it.
        let node: Option<(usize, Option<String>, Shape)> = match event.data {
            EventData::StreamEnd => {
                if resolvable && root_mapping && !out.has_merge_keys {
                    out.resolved = Some(resolved);
                }
                return out;
            }
            EventData::DocumentEnd { .. }
            | EventData::StreamStart { .. }
            | EventData::DocumentStart { .. } => None,
            EventData::Alias { anchor } => {
                resolvable = false;
                let Some(&(size, shape)) = anchors.get(&anchor) else {
                    out.problems.push(Problem {
                        line,
                        column,
                        field: path_string(&path),
                        message: format!(
                            "the alias *{anchor} refers to no anchor: an alias repeats a node marked `&{anchor}` \
                             earlier in the same document; quote a value that starts with `*`"
                        ),
                        kind: ProblemKind::Syntax,
                    });
                    return out;
                };
                expanded = expanded.saturating_add(size);
                if expanded > limits.alias_nodes {
                    out.problems.push(Problem {
                        line,
                        column,
                        field: path_string(&path),
                        message: format!(
                            "aliases expand to more than {} nodes (the yaml-alias-nodes limit); \
                             is this an alias bomb?",
                            limits.alias_nodes
                        ),
                        kind: ProblemKind::Limit("yaml-alias-nodes"),
                    });
                    return out;
                }
                if let Some(Container::Mapping { at_key, .. }) = stack.last()
                    && *at_key
                    && shape != Shape::Scalar
                {
                    let mut field = path.clone();
                    field.push(format!("[*{anchor}]"));
                    out.problems.push(complex_key_problem(
                        line,
                        column,
                        &field,
                        shape,
                        &format!("*{anchor}"),
                    ));
                }
                Some((size, None, shape))
            }
            EventData::Scalar {
                anchor,
                tag,
                value,
                plain_implicit,
                style,
                ..
            } => {
                resolvable &= tag.is_none();
                // A key?
                if let Some(Container::Mapping {
                    at_key,
                    seen,
                    merging,
                    ..
                }) = stack.last_mut()
                    && *at_key
                {
                    *at_key = false;
                    if plain_implicit && value == "<<" {
                        out.has_merge_keys = true;
                        *merging = true;
                    } else if let Some(first) = seen.get(&value) {
                        let mut field = path.clone();
                        field.push(value.clone());
                        out.problems.push(Problem {
                            line,
                            column,
                            field: path_string(&field),
                            message: format!(
                                "duplicate key {value:?} (also on line {}): Kubernetes rejects \
                                 a mapping with a key twice",
                                first + first_line
                            ),
                            kind: ProblemKind::DuplicateKey,
                        });
                    } else {
                        seen.insert(value.clone(), line);
                    }
                    if let [spec, targets, item] = path.as_slice()
                        && spec == "spec"
                        && targets == "deploymentTargets"
                        && item.starts_with('[')
                        && stack.len() == 4
                        && !TARGET_FIELDS.contains(&value.as_str())
                    {
                        resolved.other_target_keys = true;
                    }
                    path.push(value);
                    if let Some(a) = anchor {
                        anchors.insert(a, (1, Shape::Scalar));
                    }
                    continue;
                }
                // A value: note the object's kind and name (the first ones written).
                let noted = match (stack.len(), path.as_slice()) {
                    (1, [k]) if k == "kind" && out.kind.is_none() => {
                        out.kind = Some(value.clone());
                        Some(&mut resolved.kind)
                    }
                    (1, [k]) if k == "apiVersion" => Some(&mut resolved.api_version),
                    (2, [m, n]) if m == "metadata" && n == "name" && out.name.is_none() => {
                        out.name = Some(value.clone());
                        Some(&mut resolved.name)
                    }
                    _ => None,
                };
                if let Some(noted) = noted {
                    match read_as_string(&value, style) {
                        Some(true) => *noted = Some(value),
                        Some(false) => *noted = None,
                        None => resolvable = false,
                    }
                }
                Some((1, anchor, Shape::Scalar))
            }
            EventData::SequenceStart { anchor, tag, .. } | EventData::MappingStart { anchor, tag, .. } => {
                resolvable &= tag.is_none();
                root_mapping |= stack.is_empty() && !is_sequence;
                if stack.len() >= limits.depth {
                    // The start of the path is enough to find the place.
                    let shown = if path.len() > 6 {
                        format!("{}...", path_string(&path[..6]))
                    } else {
                        path_string(&path)
                    };
                    out.problems.push(Problem {
                        line,
                        column,
                        field: shown,
                        message: format!(
                            "lists and mappings nested more than {} levels deep (the yaml-depth limit)",
                            limits.depth
                        ),
                        kind: ProblemKind::Limit("yaml-depth"),
                    });
                    return out;
                }
                if let Some(Container::Mapping {
                    at_key, complex_key, ..
                }) = stack.last_mut()
                    && *at_key
                {
                    *complex_key = Some(place);
                }
                let own = path_string(&path);
                let container = if is_sequence {
                    path.push("[0]".to_owned());
                    Container::Sequence {
                        index: 0,
                        nodes: 1,
                        anchor,
                        of_mappings: true,
                        start: place,
                        path: own,
                    }
                } else {
                    Container::Mapping {
                        at_key: true,
                        seen: HashMap::new(),
                        nodes: 1,
                        anchor,
                        merging: false,
                        complex_key: None,
                        start: place,
                        path: own,
                    }
                };
                stack.push(container);
                None
            }
            EventData::SequenceEnd | EventData::MappingEnd => match stack.pop() {
                Some(Container::Sequence {
                    nodes,
                    anchor,
                    of_mappings,
                    ..
                }) => {
                    path.pop();
                    Some((nodes, anchor, Shape::Sequence(of_mappings)))
                }
                Some(Container::Mapping { nodes, anchor, .. }) => Some((nodes, anchor, Shape::Mapping)),
                None => return out,
            },
        };
        // A node is complete: count it, remember its anchor, move its container on.
        if let Some((size, anchor, shape)) = node {
            if let Some(a) = anchor {
                anchors.insert(a, (size, shape));
            }
            match stack.last_mut() {
                Some(Container::Sequence {
                    index,
                    nodes,
                    of_mappings,
                    ..
                }) => {
                    *nodes = nodes.saturating_add(size);
                    *of_mappings &= shape == Shape::Mapping;
                    *index += 1;
                    if let Some(last) = path.last_mut() {
                        *last = format!("[{index}]");
                    }
                }
                Some(Container::Mapping {
                    at_key,
                    nodes,
                    merging,
                    complex_key,
                    ..
                }) => {
                    *nodes = nodes.saturating_add(size);
                    if *at_key {
                        // A key that is not a scalar is complete; its value follows.
                        *at_key = false;
                        let written = match complex_key.take() {
                            Some(start) => {
                                let written = excerpt(text, start.index, event.end_mark.index);
                                let mut field = path.clone();
                                field.push(format!("[{written}]"));
                                out.problems.push(complex_key_problem(
                                    start.line,
                                    start.column,
                                    &field,
                                    shape,
                                    &written,
                                ));
                                written
                            }
                            // An alias to a scalar.
                            None => "*".to_owned(),
                        };
                        path.push(format!("[{written}]"));
                    } else {
                        // A value is complete; a key follows.
                        *at_key = true;
                        if std::mem::take(merging) && !matches!(shape, Shape::Mapping | Shape::Sequence(true))
                        {
                            out.problems.push(Problem {
                                line,
                                column,
                                field: path_string(&path),
                                message: format!(
                                    "a merge key (<<) must refer to a mapping or a list of mappings, not to {}",
                                    shape_words(shape)
                                ),
                                kind: ProblemKind::Syntax,
                            });
                        }
                        path.pop();
                    }
                }
                None => {}
            }
        }
    }
}

/// The problem of a key that is a list or a mapping (written `written`), at `field`.
fn complex_key_problem(line: u32, column: u32, field: &[String], shape: Shape, written: &str) -> Problem {
    let what = match shape {
        Shape::Mapping => "a mapping",
        Shape::Sequence(_) => "a list",
        Shape::Scalar => "a value",
    };
    Problem {
        line,
        column,
        field: path_string(field),
        message: format!(
            "the key {written} is {what}, but keys must be strings: a Kubernetes object is JSON, whose keys \
             are strings (a `? ` or `[...]:` key is a complex key); quote it to make it one"
        ),
        kind: ProblemKind::ComplexKey,
    }
}

/// The problem the parser's error `err` is, in words that say what to fix, at the field
/// where it was found. An unclosed quote or bracket is reported where it opens.
fn syntax_problem(
    err: &libyaml_safer::Error,
    text: &str,
    stack: &[Container],
    path: &[String],
    first_line: u32,
) -> Problem {
    let problem = err.problem();
    let context = err.context().unwrap_or_default();
    let at = err.problem_mark().map(Place::of).unwrap_or_default();
    let opened = err.context_mark().map(Place::of);
    let found = text
        .lines()
        .nth(at.line as usize)
        .and_then(|l| l.chars().nth(at.column as usize));
    // Where a mapping waits for a key, a problem later on a line that starts with one
    // (`URL: http://a: b`) is in that key's value: the parser had not yet said so.
    let mut path = path.to_vec();
    if let Some(Container::Mapping { at_key: true, .. }) = stack.last()
        && let Some(line) = text.lines().nth(at.line as usize)
    {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some((key, _)) = line[indent..].split_once(": ")
            && !key.is_empty()
            && !key.starts_with(['-', '?', '[', '{', '"', '\'', '#', '&', '*', '!'])
            && at.column as usize > indent + key.chars().count()
        {
            path.push(key.to_owned());
        }
    }
    let path = path.as_slice();
    let stopped = at.line + first_line;
    // Where a flow collection that is not closed opens, and its path.
    let open_flow = || {
        let opened = opened?;
        stack
            .iter()
            .rev()
            .map(Container::start)
            .find(|(start, _)| start.index == opened.index)
            .map(|(start, path)| (start, path.to_owned()))
    };
    let (place, field, message) = match (problem, context) {
        ("did not find expected ',' or ']'" | "did not find expected ',' or '}'", _)
        | ("found unexpected end of stream", "while parsing a flow sequence" | "while parsing a flow mapping") => {
            let (bracket, close, what) = if problem.ends_with("']'") || context.ends_with("sequence") {
                ('[', ']', "list")
            } else {
                ('{', '}', "mapping")
            };
            let message = format!(
                "the {what} opened with `{bracket}` here is not closed with `{close}` (the YAML stops making sense \
                 on line {stopped}: a missing `{close}`, or a missing comma between two items?)"
            );
            match open_flow() {
                Some((start, path)) => (start, path, message),
                None => (at, path_string(path), message),
            }
        }
        ("found unexpected end of stream" | "found unexpected document indicator", "while scanning a quoted scalar") => (
            opened.unwrap_or(at),
            path_string(path),
            "the quoted string that starts here is not closed: its closing quote is missing (a quote inside a \
             string is written '' in single quotes, \\\" in double quotes)"
                .to_owned(),
        ),
        ("found unexpected end of stream", _) => (
            at,
            path_string(path),
            "the document ends in the middle of a value (a quote or bracket left open?)".to_owned(),
        ),
        ("found character that cannot start any token", _) => {
            let message = match found {
                Some('\t') => "a tab indents this line; YAML indentation must use spaces".to_owned(),
                Some(c) => format!(
                    "the character {c} cannot start a value here (YAML reserves it): quote the value, e.g. \"{c}...\""
                ),
                None => "a character that cannot start a value here: quote the value".to_owned(),
            };
            (at, path_string(path), message)
        }
        (
            "found a tab character that violates indentation"
            | "found a tab character where an indentation space is expected",
            _,
        ) => (
            at,
            path_string(path),
            "a tab indents this line; YAML indentation must use spaces".to_owned(),
        ),
        ("did not find expected key", _) => (
            at,
            path_string(path),
            "this line does not fit the mapping above it: check its indentation, and quote a value that holds \
             `: ` or starts with a special character"
                .to_owned(),
        ),
        ("could not find expected ':'", _) => (
            at,
            path_string(path),
            "a key without `: ` after it (a line cut short, a key running over two lines, or a quote left open \
             above?)"
                .to_owned(),
        ),
        ("mapping values are not allowed in this context", _) => (
            at,
            path_string(path),
            "`: ` where no `key: value` can start: quote a value that holds `: ` (\"a: b\"), or put a nested \
             mapping on its own, indented lines"
                .to_owned(),
        ),
        ("block sequence entries are not allowed in this context", _) => (
            at,
            path_string(path),
            "a list item (`- `) where no list can start: start the list on the line after its key, indented, \
             or quote a value that starts with `- `"
                .to_owned(),
        ),
        ("mapping keys are not allowed in this context", _) => (
            at,
            path_string(path),
            "a `? ` key where no mapping can start: put it on a line of its own, or quote a value that starts \
             with `? `"
                .to_owned(),
        ),
        ("did not find expected '-' indicator", _) => (
            at,
            path_string(path),
            "this line is inside a list but is not one of its items (`- `): check its indentation".to_owned(),
        ),
        ("did not find expected node content", _) => (
            at,
            path_string(path),
            "a value is missing here (after `- `, `? `, a tag or an anchor, or between commas)".to_owned(),
        ),
        ("did not find expected alphabetic or numeric character", _) => (
            at,
            path_string(path),
            "`&` and `*` start an anchor or an alias, which needs a name: quote a value that starts with them"
                .to_owned(),
        ),
        (
            "found unknown escape character"
            | "did not find expected hexdecimal number"
            | "found invalid Unicode character escape code",
            _,
        ) => (
            at,
            path_string(path),
            "an escape that YAML does not know in a double-quoted string: write a backslash as \\\\, or use \
             single quotes"
                .to_owned(),
        ),
        (
            "found undefined tag handle"
            | "did not find expected tag URI"
            | "did not find the expected '>'"
            | "did not find URI escaped octet"
            | "found an incorrect leading UTF-8 octet"
            | "found an incorrect trailing UTF-8 octet"
            | "did not find expected '!'",
            _,
        ) => (
            at,
            path_string(path),
            "a tag (`!name`, `!!type`) that is not written right; Kubernetes objects need no tags: remove it, or \
             quote a value that starts with `!`"
                .to_owned(),
        ),
        (_, "while scanning a block scalar") => (
            at,
            path_string(path),
            "the header of a block string (`|` or `>`) may hold only an indentation digit from 1 to 9 and `-` \
             or `+`, then a comment"
                .to_owned(),
        ),
        (
            "could not find expected directive name"
            | "found unknown directive name"
            | "did not find expected version number"
            | "did not find expected digit or '.' character"
            | "found extremely long version number"
            | "found incompatible YAML document"
            | "found duplicate %YAML directive"
            | "found duplicate %TAG directive"
            | "did not find expected <document start>",
            _,
        ) => (
            at,
            path_string(path),
            "a directive (a line starting with `%`) that is wrong or out of place: only `%YAML 1.1`, `%YAML \
             1.2` and `%TAG` may come before a document's `---`; quote a value that starts with `%`"
                .to_owned(),
        ),
        ("did not find expected comment or line break" | "did not find expected whitespace or line break", _) => (
            at,
            path_string(path),
            "unexpected text after a value on this line (a comment needs a space before `#`; a value that goes \
             on after a quoted part must be quoted whole)"
                .to_owned(),
        ),
        _ => (
            at,
            path_string(path),
            "this is not valid YAML (check the line's indentation, and quote values with special characters)"
                .to_owned(),
        ),
    };
    Problem {
        line: place.line,
        column: place.column,
        field,
        message,
        kind: ProblemKind::Syntax,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ScanLimits = ScanLimits {
        depth: 100,
        alias_nodes: 1000,
    };

    fn problems(text: &str) -> Vec<(u32, String, String)> {
        scan(text, LIMITS, 1)
            .problems
            .into_iter()
            .map(|p| (p.line + 1, p.field, p.message))
            .collect()
    }

    #[test]
    fn duplicate_keys_name_both_lines_and_the_path() {
        let text =
            "kind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: '1'\n  y: '2'\n  x: '3'\nkind: Secret\n";
        let found = problems(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, 7);
        assert_eq!(found[0].1, "data.x");
        assert!(found[0].2.contains("also on line 5"), "{}", found[0].2);
        assert_eq!((found[1].0, found[1].1.as_str()), (8, "kind"));
        // Keys in different mappings, and list items, are not duplicates.
        assert!(problems("a: {x: 1}\nb: {x: 1}\nc: [{x: 1}, {x: 2}]\n").is_empty());
        let s = scan("items:\n- {a: 1}\n- {b: 1, b: 2}\n", LIMITS, 1);
        assert_eq!(s.problems[0].field, "items[1].b");
    }

    #[test]
    fn notes_kind_name_and_merge_keys() {
        let s = scan(
            "base: &b {x: 1}\nkind: Template\nmetadata: {name: t, <<: *b}\n",
            LIMITS,
            1,
        );
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        assert!(s.has_merge_keys);
        assert_eq!(s.kind.as_deref(), Some("Template"));
        assert_eq!(s.name.as_deref(), Some("t"));
        // Two merge keys are not duplicates.
        assert!(problems("a: &a {x: 1}\nb: &b {y: 1}\nc:\n  <<: *a\n  <<: *b\n").is_empty());
    }

    #[test]
    fn block_scalars_at_the_end_of_the_input_are_read() {
        for text in ["a: |\n  x", "a: >-\n  x\n  y", "a: |", "- |\n  x\n- |"] {
            let s = scan(text, LIMITS, 1);
            assert!(s.problems.is_empty(), "{text:?}: {:?}", s.problems);
        }
        let s = scan("a: |\n  x\na: |\n  y", LIMITS, 1);
        assert_eq!(s.problems.len(), 1, "the scan went on to the end");
    }

    #[test]
    fn deep_nesting_stops_early() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let found = problems(&deep);
        assert_eq!(found.len(), 1);
        assert!(found[0].2.contains("yaml-depth"), "{}", found[0].2);
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(problems(&ok).is_empty());
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e"].iter().zip(["b", "c", "d", "e", "f"]) {
            text.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{prev}"); 10].join(", ")
            ));
        }
        let found = problems(&text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].2.contains("yaml-alias-nodes"), "{}", found[0].2);
        assert_eq!(found[0].0, 3);
        // A few aliases are fine.
        assert!(problems("a: &a [1, 2]\nb: *a\nc: *a\n").is_empty());
    }
}
