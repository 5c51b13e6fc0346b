//! yaml.v2's `Unmarshal` into `interface{}`.
//!
//! The event stream comes from libyaml-safer, a safe Rust port of libyaml, the C library
//! go-yaml itself was ported from, so what parses (and what is an error) matches yaml.v2.
//! On top of it this module rebuilds yaml.v2's node tree and decoder: only the first document
//! is read, anchors are looked up as they are defined, aliases are decoded again at each use
//! (with v2's "excessive aliasing" guard), `<<` merges mappings, untagged plain scalars
//! resolve with YAML 1.1 rules, mappings become `map[interface {}]interface {}` and sequences
//! `[]interface {}`.

use std::collections::HashMap;

use base64::Engine as _;
use kalypso_gotmpl::{Entries, List, Map, MapKey, Str, Type, UintKind, Value};
use libyaml_safer::{EventData, Parser};

use crate::Error;
use crate::resolve::{Resolved, Schema, resolve_plain_with};

/// Deepest nesting accepted. go-yaml has no such limit below 10000, but every level costs
/// native stack here (decoding and dropping nested values recurse), and no ConfigMap value
/// comes near it.
const MAX_DEPTH: usize = 1_000;

const TAG_PREFIX: &str = "tag:yaml.org,2002:";

type NodeId = usize;

enum Node {
    Scalar {
        value: String,
        tag: Option<String>,
        /// libyaml's `plain_implicit`: a plain scalar without a tag (or with `!`).
        implicit: bool,
    },
    Sequence(Vec<NodeId>),
    /// Keys and values, alternating.
    Mapping(Vec<NodeId>),
    Alias {
        name: String,
        target: NodeId,
    },
}

fn fail(message: impl Into<String>) -> Error {
    Error::Unmarshal(format!("yaml: {}", message.into()))
}

fn parse_error(e: &libyaml_safer::Error) -> Error {
    let line = e
        .problem_mark()
        .map(|m| m.line + 1)
        .or_else(|| e.context_mark().map(|m| m.line))
        .unwrap_or(0);
    if line == 0 {
        fail(e.problem())
    } else {
        fail(format!("line {line}: {}", e.problem()))
    }
}

/// `yaml.v2.Unmarshal(text, &out)` with `out interface{}`.
pub(crate) fn unmarshal(text: &[u8]) -> Result<Value, Error> {
    // libyaml-safer panics on a block scalar that ends the input without a line break;
    // such input (a ConfigMap value written `a: |\n  x`) gets one.
    let owned;
    let input: &[u8] = if text.is_empty() {
        b"\n"
    } else if text.ends_with(b"\n") {
        text
    } else {
        owned = [text, b"\n"].concat();
        &owned
    };
    let Some((nodes, root)) = parse_first_document(input)? else {
        return Ok(Value::Nil);
    };
    let mut decoder = Decoder {
        nodes: &nodes,
        decode_count: 0,
        alias_count: 0,
        alias_depth: 0,
        active_aliases: Vec::new(),
    };
    decoder.unmarshal(root, 0)
}

/// Reads events up to the end of the first document (yaml.v2 never looks further) and builds
/// the node tree. `None` when the stream has no document.
fn parse_first_document(input: &[u8]) -> Result<Option<(Vec<Node>, NodeId)>, Error> {
    let mut parser = Parser::new();
    parser.set_input(input);
    let mut next = || parser.parse().map_err(|e| parse_error(&e));

    if !matches!(next()?.data, EventData::StreamStart { .. }) {
        return Err(fail("expected STREAM-START"));
    }
    match next()?.data {
        EventData::StreamEnd => return Ok(None),
        EventData::DocumentStart { .. } => {}
        _ => return Err(fail("expected DOCUMENT-START")),
    }

    let mut nodes: Vec<Node> = Vec::new();
    let mut anchors: HashMap<String, NodeId> = HashMap::new();
    // Open collections, innermost last.
    let mut open: Vec<NodeId> = Vec::new();
    let mut root = None;

    fn attach(nodes: &mut [Node], open: &[NodeId], root: &mut Option<NodeId>, id: NodeId) {
        match open.last() {
            Some(&parent) => match &mut nodes[parent] {
                Node::Sequence(items) | Node::Mapping(items) => items.push(id),
                _ => {}
            },
            None => *root = Some(id),
        }
    }

    loop {
        let event = next()?;
        match event.data {
            EventData::Scalar {
                anchor,
                tag,
                value,
                plain_implicit,
                ..
            } => {
                let id = nodes.len();
                nodes.push(Node::Scalar {
                    value,
                    tag,
                    implicit: plain_implicit,
                });
                attach(&mut nodes, &open, &mut root, id);
                if let Some(a) = anchor {
                    anchors.insert(a, id);
                }
            }
            EventData::Alias { anchor } => {
                let Some(&target) = anchors.get(&anchor) else {
                    return Err(fail(format!("unknown anchor '{anchor}' referenced")));
                };
                let id = nodes.len();
                nodes.push(Node::Alias { name: anchor, target });
                attach(&mut nodes, &open, &mut root, id);
            }
            data @ (EventData::SequenceStart { .. } | EventData::MappingStart { .. }) => {
                if open.len() >= MAX_DEPTH {
                    return Err(fail(format!("exceeded max depth of {MAX_DEPTH}")));
                }
                let id = nodes.len();
                let anchor = match data {
                    EventData::SequenceStart { anchor, .. } => {
                        nodes.push(Node::Sequence(Vec::new()));
                        anchor
                    }
                    EventData::MappingStart { anchor, .. } => {
                        nodes.push(Node::Mapping(Vec::new()));
                        anchor
                    }
                    _ => None,
                };
                attach(&mut nodes, &open, &mut root, id);
                // Registered before the children: a child alias to it is "contains itself".
                if let Some(a) = anchor {
                    anchors.insert(a, id);
                }
                open.push(id);
            }
            EventData::SequenceEnd | EventData::MappingEnd => {
                open.pop();
            }
            EventData::DocumentEnd { .. } => break,
            EventData::StreamStart { .. } | EventData::StreamEnd | EventData::DocumentStart { .. } => {
                return Err(fail("unexpected event in document"));
            }
        }
    }
    match root {
        Some(root) => Ok(Some((nodes, root))),
        None => Err(fail("document without content")),
    }
}

struct Decoder<'a> {
    nodes: &'a [Node],
    decode_count: u64,
    alias_count: u64,
    alias_depth: u32,
    /// Anchored nodes being decoded through an alias, to detect self-reference.
    active_aliases: Vec<NodeId>,
}

/// yaml.v2's `allowedAliasRatio`: how much of the decoding may come from alias expansion.
fn allowed_alias_ratio(decode_count: u64) -> f64 {
    const LOW: u64 = 400_000;
    const HIGH: u64 = 4_000_000;
    if decode_count <= LOW {
        0.99
    } else if decode_count >= HIGH {
        0.10
    } else {
        0.99 - 0.89 * ((decode_count - LOW) as f64 / (HIGH - LOW) as f64)
    }
}

impl Decoder<'_> {
    fn count(&mut self) -> Result<(), Error> {
        self.decode_count += 1;
        if self.alias_depth > 0 {
            self.alias_count += 1;
        }
        if self.alias_count > 100
            && self.decode_count > 1000
            && self.alias_count as f64 / self.decode_count as f64 > allowed_alias_ratio(self.decode_count)
        {
            return Err(fail("document contains excessive aliasing"));
        }
        Ok(())
    }

    fn unmarshal(&mut self, id: NodeId, depth: usize) -> Result<Value, Error> {
        self.count()?;
        if depth > MAX_DEPTH {
            return Err(fail(format!("exceeded max depth of {MAX_DEPTH}")));
        }
        match &self.nodes[id] {
            Node::Scalar { value, tag, implicit } => scalar(value, tag.as_deref(), *implicit),
            Node::Sequence(items) => {
                let mut values = Vec::with_capacity(items.len());
                for &item in items {
                    values.push(self.unmarshal(item, depth + 1)?);
                }
                Ok(Value::List(List::interfaces(values)))
            }
            Node::Mapping(_) => {
                let mut entries = Entries::new();
                self.mapping_into(id, &mut entries, depth)?;
                Ok(Value::Map(Map::from_entries(
                    Type::Interface,
                    Type::Interface,
                    entries,
                )))
            }
            Node::Alias { name, target } => {
                let target = *target;
                if self.active_aliases.contains(&target) {
                    return Err(fail(format!("anchor '{name}' value contains itself")));
                }
                self.active_aliases.push(target);
                self.alias_depth += 1;
                let result = self.unmarshal(target, depth + 1);
                self.alias_depth -= 1;
                self.active_aliases.pop();
                result
            }
        }
    }

    /// yaml.v2's `mapping` into an existing map: entries in order, later keys replace
    /// earlier ones, `<<` merges other mappings in place.
    fn mapping_into(&mut self, id: NodeId, out: &mut Entries, depth: usize) -> Result<(), Error> {
        let Node::Mapping(items) = &self.nodes[id] else {
            return Err(fail("map merge requires map or sequence of maps as the value"));
        };
        for pair in items.chunks(2) {
            let [key, value] = *pair else {
                return Err(fail("mapping without value"));
            };
            if self.is_merge(key) {
                self.merge(value, out, depth)?;
                continue;
            }
            let k = self.unmarshal(key, depth + 1)?;
            let Some(k) = MapKey::from_value(&k) else {
                return Err(fail(format!("invalid map key: {k:?}")));
            };
            let v = self.unmarshal(value, depth + 1)?;
            out.insert(k, v);
        }
        Ok(())
    }

    fn is_merge(&self, id: NodeId) -> bool {
        matches!(&self.nodes[id], Node::Scalar { value, tag, implicit }
            if value == "<<" && (*implicit || tag.as_deref() == Some("tag:yaml.org,2002:merge")))
    }

    fn target_is_mapping(&self, id: NodeId) -> bool {
        match &self.nodes[id] {
            Node::Mapping(_) => true,
            Node::Alias { target, .. } => matches!(self.nodes[*target], Node::Mapping(_)),
            _ => false,
        }
    }

    /// Decodes a mapping (or an alias to one) into `out`.
    fn merge_one(&mut self, id: NodeId, out: &mut Entries, depth: usize) -> Result<(), Error> {
        self.count()?;
        match &self.nodes[id] {
            Node::Alias { name, target } => {
                let target = *target;
                if self.active_aliases.contains(&target) {
                    return Err(fail(format!("anchor '{name}' value contains itself")));
                }
                self.active_aliases.push(target);
                self.alias_depth += 1;
                let result = self
                    .count()
                    .and_then(|()| self.mapping_into(target, out, depth + 1));
                self.alias_depth -= 1;
                self.active_aliases.pop();
                result
            }
            _ => self.mapping_into(id, out, depth + 1),
        }
    }

    fn merge(&mut self, value: NodeId, out: &mut Entries, depth: usize) -> Result<(), Error> {
        let want_map = || fail("map merge requires map or sequence of maps as the value");
        match &self.nodes[value] {
            Node::Mapping(_) => self.merge_one(value, out, depth),
            Node::Alias { .. } => {
                if !self.target_is_mapping(value) {
                    return Err(want_map());
                }
                self.merge_one(value, out, depth)
            }
            Node::Sequence(items) => {
                // Earlier mappings take precedence: merge from the last one.
                for &item in items.iter().rev() {
                    if !self.target_is_mapping(item) {
                        return Err(want_map());
                    }
                    self.merge_one(item, out, depth)?;
                }
                Ok(())
            }
            Node::Scalar { .. } => Err(want_map()),
        }
    }
}

/// Short form of a tag for messages (`!!int`).
fn short_tag(tag: &str) -> String {
    match tag.strip_prefix(TAG_PREFIX) {
        Some(rest) => format!("!!{rest}"),
        None => tag.to_owned(),
    }
}

/// yaml.v2's `scalar` into `interface{}` with `resolve(tag, value)`.
fn scalar(value: &str, tag: Option<&str>, implicit: bool) -> Result<Value, Error> {
    let tag = tag.unwrap_or("");
    if tag.is_empty() && !implicit {
        return Ok(Value::string(value));
    }
    let short = tag.strip_prefix(TAG_PREFIX);
    let resolvable = tag.is_empty()
        || matches!(
            short,
            Some("str" | "bool" | "int" | "float" | "null" | "timestamp")
        );
    if !resolvable {
        if short == Some("binary") {
            let cleaned: Vec<u8> = value.bytes().filter(|&b| b != b'\n' && b != b'\r').collect();
            return match base64::engine::general_purpose::STANDARD.decode(cleaned) {
                Ok(bytes) => Ok(Value::String(Str::from_bytes(bytes))),
                Err(_) => Err(fail("!!binary value contains invalid base64 data")),
            };
        }
        return Ok(Value::string(value));
    }
    if short == Some("str") {
        return Ok(Value::string(value));
    }
    // The timestamp check runs for untagged and `!!timestamp` scalars only.
    let timestamps = tag.is_empty() || short == Some("timestamp");
    let resolved = resolve_plain_with(value, Schema::V2, timestamps);
    let rtag = match &resolved {
        Resolved::Null => "null",
        Resolved::Bool(_) => "bool",
        Resolved::Int(_) | Resolved::Uint(_) => "int",
        Resolved::Float(_) => "float",
        Resolved::Timestamp => "timestamp",
        Resolved::Str => "str",
    };
    if let Some(want) = short.filter(|want| *want != rtag) {
        return match (want, &resolved) {
            ("float", Resolved::Int(i)) => Ok(Value::float(*i as f64)),
            _ => Err(fail(format!(
                "cannot decode {} `{value}` as a {}",
                short_tag(&format!("{TAG_PREFIX}{rtag}")),
                short_tag(tag)
            ))),
        };
    }
    Ok(match resolved {
        Resolved::Null => Value::Nil,
        Resolved::Bool(b) => Value::Bool(b),
        Resolved::Int(i) => Value::int(i),
        Resolved::Uint(u) => Value::Uint(u, UintKind::Uint64),
        Resolved::Float(f) => Value::float(f),
        // Timestamps stay strings in `interface{}` (yaml.v2 keeps them for compatibility).
        Resolved::Timestamp | Resolved::Str => Value::string(value),
    })
}
