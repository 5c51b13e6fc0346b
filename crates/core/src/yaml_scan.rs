//! A pass over a YAML document's events before it is deserialized, for what the
//! deserializer does not check or checks too late.
//!
//! - **Limits**: nesting deeper than `yaml-depth`, aliases that expand to more than
//!   `yaml-alias-nodes` nodes (an "alias bomb"). The events are streamed, so a document
//!   100,000 levels deep is refused after reading the first levels, in milliseconds (the
//!   deserializer's parser slows down quadratically with flow nesting).
//! - **Duplicate mapping keys**, which Kubernetes and the original reject and serde would
//!   resolve silently (the last one wins), reported with both lines and the key's path.
//! - **Merge keys** (`<<: *anchor`), which the deserializer keeps as a key named `<<`: the
//!   scan says whether the document has any, so that the loader merges them first.
//!
//! It also notes the document's top-level `kind` and `metadata.name`, so that a document
//! refused here is still reported against its object.

use std::collections::HashMap;

use libyaml_safer::{EventData, Parser};

/// What the scan found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Problems, in document order.
    pub problems: Vec<Problem>,
    /// Whether a mapping has a `<<` merge key.
    pub has_merge_keys: bool,
    /// The top-level `kind`, if it is a scalar.
    pub kind: Option<String>,
    /// The top-level `metadata.name`, if it is a scalar.
    pub name: Option<String>,
}

/// One problem: the 0-based line and column in the document, the field path, the message,
/// and the limit it exceeded (if it is one).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    pub line: u32,
    pub column: u32,
    pub field: String,
    pub message: String,
    pub limit: Option<&'static str>,
}

/// The scan's limits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanLimits {
    pub depth: usize,
    pub alias_nodes: usize,
}

enum Container {
    Sequence {
        index: usize,
        nodes: usize,
        anchor: Option<String>,
    },
    Mapping {
        /// Whether the next node is a key.
        at_key: bool,
        /// The scalar keys so far, with their 0-based lines.
        seen: HashMap<String, u32>,
        nodes: usize,
        anchor: Option<String>,
    },
}

fn saturating_u32(mark: u64) -> u32 {
    u32::try_from(mark).unwrap_or(u32::MAX)
}

/// Scans `text`. Syntax errors end the scan silently: the deserializer reports them with its
/// own message.
pub(crate) fn scan(text: &str, limits: ScanLimits) -> Scan {
    // Should the parser panic, the scan is skipped: the deserializer, which uses another
    // parser, reports the document.
    guarded(text, |text| scan_events(text, limits))
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

fn scan_events(text: &str, limits: ScanLimits) -> Scan {
    let mut out = Scan::default();
    let mut parser = Parser::new();
    let mut bytes = text.as_bytes();
    parser.set_input_string(&mut bytes);
    let mut stack: Vec<Container> = Vec::new();
    let mut path: Vec<String> = Vec::new();
    // Nodes each anchor stands for (itself and everything under it, aliases expanded).
    let mut anchors: HashMap<String, usize> = HashMap::new();
    let mut expanded = 0usize;
    let path_string = |path: &[String]| -> String {
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
    };
    loop {
        let Ok(event) = parser.parse() else {
            return out;
        };
        let line = saturating_u32(event.start_mark.line);
        let column = saturating_u32(event.start_mark.column);
        let is_sequence = matches!(event.data, EventData::SequenceStart { .. });
        // A node's size, for aliases and for the container that holds it.
        let node: Option<(usize, Option<String>)> = match event.data {
            EventData::StreamEnd | EventData::DocumentEnd { .. } => {
                if matches!(event.data, EventData::StreamEnd) {
                    return out;
                }
                None
            }
            EventData::StreamStart { .. } | EventData::DocumentStart { .. } => None,
            EventData::Alias { anchor } => {
                let size = anchors.get(&anchor).copied().unwrap_or(1);
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
                        limit: Some("yaml-alias-nodes"),
                    });
                    return out;
                }
                Some((size, None))
            }
            EventData::Scalar {
                anchor,
                value,
                plain_implicit,
                ..
            } => {
                // A key?
                if let Some(Container::Mapping { at_key, seen, .. }) = stack.last_mut()
                    && *at_key
                {
                    *at_key = false;
                    if plain_implicit && value == "<<" {
                        out.has_merge_keys = true;
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
                                first + 1
                            ),
                            limit: None,
                        });
                    } else {
                        seen.insert(value.clone(), line);
                    }
                    path.push(value);
                    if let Some(a) = anchor {
                        anchors.insert(a, 1);
                    }
                    continue;
                }
                // A value: note the object's kind and name.
                match (stack.len(), path.as_slice()) {
                    (1, [k]) if k == "kind" => out.kind = Some(value.clone()),
                    (2, [m, n]) if m == "metadata" && n == "name" => out.name = Some(value.clone()),
                    _ => {}
                }
                if let Some(a) = anchor {
                    anchors.insert(a, 1);
                }
                Some((1, None))
            }
            EventData::SequenceStart { anchor, .. } | EventData::MappingStart { anchor, .. } => {
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
                        limit: Some("yaml-depth"),
                    });
                    return out;
                }
                let container = if is_sequence {
                    path.push("[0]".to_owned());
                    Container::Sequence {
                        index: 0,
                        nodes: 1,
                        anchor,
                    }
                } else {
                    Container::Mapping {
                        at_key: true,
                        seen: HashMap::new(),
                        nodes: 1,
                        anchor,
                    }
                };
                stack.push(container);
                None
            }
            EventData::SequenceEnd | EventData::MappingEnd => {
                let (nodes, anchor) = match stack.pop() {
                    Some(Container::Sequence { nodes, anchor, .. }) => {
                        path.pop();
                        (nodes, anchor)
                    }
                    Some(Container::Mapping { nodes, anchor, .. }) => (nodes, anchor),
                    None => return out,
                };
                Some((nodes, anchor))
            }
        };
        // A node is complete: count it, remember its anchor, move its container on.
        if let Some((size, anchor)) = node {
            if let Some(a) = anchor {
                anchors.insert(a, size);
            }
            match stack.last_mut() {
                Some(Container::Sequence { index, nodes, .. }) => {
                    *nodes = nodes.saturating_add(size);
                    *index += 1;
                    if let Some(last) = path.last_mut() {
                        *last = format!("[{index}]");
                    }
                }
                Some(Container::Mapping { at_key, nodes, .. }) => {
                    *nodes = nodes.saturating_add(size);
                    if *at_key {
                        // A complex key (a list or mapping) is complete; its value follows.
                        *at_key = false;
                        path.push("?".to_owned());
                    } else {
                        // A value is complete; a key follows.
                        *at_key = true;
                        path.pop();
                    }
                }
                None => {}
            }
        }
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
        scan(text, LIMITS)
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
        let s = scan("items:\n- {a: 1}\n- {b: 1, b: 2}\n", LIMITS);
        assert_eq!(s.problems[0].field, "items[1].b");
    }

    #[test]
    fn notes_kind_name_and_merge_keys() {
        let s = scan(
            "base: &b {x: 1}\nkind: Template\nmetadata: {name: t, <<: *b}\n",
            LIMITS,
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
            let s = scan(text, LIMITS);
            assert!(s.problems.is_empty(), "{text:?}: {:?}", s.problems);
        }
        let s = scan("a: |\n  x\na: |\n  y", LIMITS);
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
