//! The parse tree, after Go's `text/template/parse/node.go`.
//!
//! Nodes keep Go's byte positions (execution errors report `line:column` computed from
//! them) and can print themselves as Go's `Node.String()` does, which execution errors
//! quote as their context (`at <index .list 5>`). Function names are resolved while
//! parsing, so executing a call never looks a name up. Deeply nested trees are dropped
//! iteratively, so no input can overflow the stack when a template is dropped.

use crate::builtins::Builtin;
use crate::str::Str;
use crate::value::MapKey;
use crate::value::func::Func;

/// A byte offset into the template text.
pub(crate) type Pos = usize;

/// An interned variable name (`$` is 0).
pub(crate) type VarId = u32;

/// A sequence of nodes.
#[derive(Debug, Default)]
pub(crate) struct ListNode {
    pub pos: Pos,
    pub nodes: Vec<Node>,
}

/// A node of a list.
#[derive(Debug)]
pub(crate) enum Node {
    Text(TextNode),
    Action(ActionNode),
    If(Box<BranchNode>),
    Range(Box<BranchNode>),
    With(Box<BranchNode>),
    Template(Box<TemplateNode>),
    Break(Pos),
    Continue(Pos),
}

#[derive(Debug)]
pub(crate) struct TextNode {
    pub pos: Pos,
    pub text: Box<[u8]>,
}

#[derive(Debug)]
pub(crate) struct ActionNode {
    pub pos: Pos,
    pub pipe: PipeNode,
}

/// `if`, `range` or `with`.
#[derive(Debug)]
pub(crate) struct BranchNode {
    pub pos: Pos,
    pub pipe: PipeNode,
    pub list: ListNode,
    pub else_list: Option<ListNode>,
    /// Whether `list` reads dot anywhere ([`ListNode::reads_dot`]): a `range` whose body
    /// does not need not copy each element into dot.
    pub list_reads_dot: bool,
    /// Whether the pipeline, `list` or `else_list` reads dot anywhere: kept so that an
    /// enclosing branch's answer takes this one's as it is, without walking it again.
    pub reads_dot: bool,
}

#[derive(Debug)]
pub(crate) struct TemplateNode {
    pub pos: Pos,
    pub name: String,
    pub pipe: Option<PipeNode>,
    /// Index of the called template in the template set, resolved after parsing.
    pub target: Option<usize>,
}

/// A pipeline with optional declarations.
#[derive(Debug, Default)]
pub(crate) struct PipeNode {
    pub pos: Pos,
    pub is_assign: bool,
    pub decl: Vec<VariableNode>,
    pub cmds: Vec<CommandNode>,
}

#[derive(Debug)]
pub(crate) struct CommandNode {
    pub pos: Pos,
    pub args: Vec<Operand>,
}

/// A field name with its prebuilt map key.
#[derive(Debug)]
pub(crate) struct Ident {
    pub key: MapKey,
}

impl Ident {
    pub fn new(name: &str) -> Ident {
        Ident {
            key: MapKey::String(Str::from(name)),
        }
    }

    /// The field name (always valid UTF-8: it comes from the template text).
    pub fn name(&self) -> &str {
        match &self.key {
            MapKey::String(s) => s.as_str().unwrap_or(""),
            _ => "",
        }
    }
}

/// `$x` or `$x.Field1.Field2`.
#[derive(Debug)]
pub(crate) struct VariableNode {
    pub pos: Pos,
    pub name: Box<str>,
    pub id: VarId,
    pub fields: Vec<Ident>,
}

/// A resolved function.
#[derive(Debug, Clone)]
pub(crate) enum FuncRef {
    Builtin(Builtin),
    User(Func),
}

#[derive(Debug)]
pub(crate) struct NumberNode {
    pub pos: Pos,
    pub text: Box<str>,
    pub is_int: bool,
    pub is_uint: bool,
    pub is_float: bool,
    pub is_complex: bool,
    pub int64: i64,
    pub uint64: u64,
    pub float64: f64,
    pub complex: (f64, f64),
}

/// An operand of a command.
#[derive(Debug)]
pub(crate) enum Operand {
    Identifier {
        pos: Pos,
        name: Box<str>,
        func: FuncRef,
    },
    Field {
        pos: Pos,
        fields: Vec<Ident>,
    },
    Variable(VariableNode),
    Chain {
        pos: Pos,
        node: Box<Operand>,
        fields: Vec<Ident>,
    },
    Dot(Pos),
    Nil(Pos),
    Bool(Pos, bool),
    Number(Box<NumberNode>),
    String {
        pos: Pos,
        quoted: Box<str>,
        text: Str,
    },
    Pipe(Box<PipeNode>),
}

impl Operand {
    pub fn pos(&self) -> Pos {
        match self {
            Operand::Identifier { pos, .. }
            | Operand::Field { pos, .. }
            | Operand::Chain { pos, .. }
            | Operand::Dot(pos)
            | Operand::Nil(pos)
            | Operand::Bool(pos, _)
            | Operand::String { pos, .. } => *pos,
            Operand::Variable(v) => v.pos,
            Operand::Number(n) => n.pos,
            Operand::Pipe(p) => p.pos,
        }
    }

    /// Whether Go's parser rejects this operand as a later pipeline stage.
    pub fn is_non_executable(&self) -> bool {
        matches!(
            self,
            Operand::Bool(..)
                | Operand::Dot(_)
                | Operand::Nil(_)
                | Operand::Number(_)
                | Operand::String { .. }
        )
    }

    pub fn write_to(&self, sb: &mut String) {
        crate::stack::grow(|| match self {
            Operand::Identifier { name, .. } => sb.push_str(name),
            Operand::Field { fields, .. } => {
                for f in fields {
                    sb.push('.');
                    sb.push_str(f.name());
                }
            }
            Operand::Variable(v) => v.write_to(sb),
            Operand::Chain { node, fields, .. } => {
                if let Operand::Pipe(p) = &**node {
                    sb.push('(');
                    p.write_to(sb);
                    sb.push(')');
                } else {
                    node.write_to(sb);
                }
                for f in fields {
                    sb.push('.');
                    sb.push_str(f.name());
                }
            }
            Operand::Dot(_) => sb.push('.'),
            Operand::Nil(_) => sb.push_str("nil"),
            Operand::Bool(_, b) => sb.push_str(if *b { "true" } else { "false" }),
            Operand::Number(n) => sb.push_str(&n.text),
            Operand::String { quoted, .. } => sb.push_str(quoted),
            Operand::Pipe(p) => p.write_to(sb),
        })
    }

    pub fn to_go_string(&self) -> String {
        let mut s = String::new();
        self.write_to(&mut s);
        s
    }
}

impl VariableNode {
    pub fn write_to(&self, sb: &mut String) {
        sb.push_str(&self.name);
        for f in &self.fields {
            sb.push('.');
            sb.push_str(f.name());
        }
    }
}

impl CommandNode {
    pub fn write_to(&self, sb: &mut String) {
        for (i, arg) in self.args.iter().enumerate() {
            if i > 0 {
                sb.push(' ');
            }
            if let Operand::Pipe(p) = arg {
                sb.push('(');
                p.write_to(sb);
                sb.push(')');
                continue;
            }
            arg.write_to(sb);
        }
    }
}

impl PipeNode {
    pub fn write_to(&self, sb: &mut String) {
        if !self.decl.is_empty() {
            for (i, v) in self.decl.iter().enumerate() {
                if i > 0 {
                    sb.push_str(", ");
                }
                v.write_to(sb);
            }
            sb.push_str(" := ");
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                sb.push_str(" | ");
            }
            c.write_to(sb);
        }
    }
}

impl ListNode {
    pub fn write_to(&self, sb: &mut String) {
        for n in &self.nodes {
            n.write_to(sb);
        }
    }
}

impl TemplateNode {
    pub fn write_to(&self, sb: &mut String) {
        sb.push_str("{{template ");
        sb.push_str(&crate::strconv::quote(self.name.as_bytes()));
        if let Some(p) = &self.pipe {
            sb.push(' ');
            p.write_to(sb);
        }
        sb.push_str("}}");
    }
}

impl Node {
    pub fn pos(&self) -> Pos {
        match self {
            Node::Text(t) => t.pos,
            Node::Action(a) => a.pos,
            Node::If(b) | Node::Range(b) | Node::With(b) => b.pos,
            Node::Template(t) => t.pos,
            Node::Break(p) | Node::Continue(p) => *p,
        }
    }

    pub fn write_to(&self, sb: &mut String) {
        crate::stack::grow(|| match self {
            Node::Text(t) => sb.push_str(&String::from_utf8_lossy(&t.text)),
            Node::Action(a) => {
                sb.push_str("{{");
                a.pipe.write_to(sb);
                sb.push_str("}}");
            }
            Node::If(b) => b.write_to("if", sb),
            Node::Range(b) => b.write_to("range", sb),
            Node::With(b) => b.write_to("with", sb),
            Node::Template(t) => t.write_to(sb),
            Node::Break(_) => sb.push_str("{{break}}"),
            Node::Continue(_) => sb.push_str("{{continue}}"),
        })
    }
}

impl ListNode {
    /// Whether executing the list can read dot: whether any node in it, at any depth, has
    /// `.` or a field of dot (`.Field`), in an action, a control's pipeline or a `template`
    /// call's data. Nested `range` and `with` bodies count too, though they have a dot of
    /// their own. A nested control's answer is the one kept in its [`BranchNode`], so
    /// building every branch's answer walks each node once.
    pub fn reads_dot(&self) -> bool {
        self.nodes.iter().any(Node::reads_dot)
    }
}

impl Node {
    fn reads_dot(&self) -> bool {
        match self {
            Node::Text(_) | Node::Break(_) | Node::Continue(_) => false,
            Node::Action(a) => a.pipe.reads_dot(),
            Node::If(b) | Node::Range(b) | Node::With(b) => b.reads_dot,
            Node::Template(t) => t.pipe.as_ref().is_some_and(PipeNode::reads_dot),
        }
    }
}

impl PipeNode {
    /// Whether any operand of the pipeline reads dot (parenthesized pipelines nest as deep
    /// as the parser allows, hence the stack check).
    pub fn reads_dot(&self) -> bool {
        crate::stack::grow(|| self.cmds.iter().any(|c| c.args.iter().any(Operand::reads_dot)))
    }
}

impl Operand {
    fn reads_dot(&self) -> bool {
        match self {
            Operand::Dot(_) | Operand::Field { .. } => true,
            Operand::Chain { node, .. } => node.reads_dot(),
            Operand::Pipe(p) => p.reads_dot(),
            Operand::Identifier { .. }
            | Operand::Variable(_)
            | Operand::Nil(_)
            | Operand::Bool(..)
            | Operand::Number(_)
            | Operand::String { .. } => false,
        }
    }
}

impl BranchNode {
    fn write_to(&self, name: &str, sb: &mut String) {
        sb.push_str("{{");
        sb.push_str(name);
        sb.push(' ');
        self.pipe.write_to(sb);
        sb.push_str("}}");
        self.list.write_to(sb);
        if let Some(e) = &self.else_list {
            sb.push_str("{{else}}");
            e.write_to(sb);
        }
        sb.push_str("{{end}}");
    }
}

/// Children taken out of a node being dropped, dropped in turn by the same loop.
enum Pending {
    Nodes(Vec<Node>),
    Operands(Vec<Operand>),
}

fn take_pipe(p: &mut PipeNode, stack: &mut Vec<Pending>) {
    for c in p.cmds.drain(..) {
        stack.push(Pending::Operands(c.args));
    }
}

fn take_operand(o: Operand, stack: &mut Vec<Pending>) {
    match o {
        Operand::Pipe(mut p) => take_pipe(&mut p, stack),
        Operand::Chain { node, .. } => take_operand(*node, stack),
        _ => {}
    }
}

/// Drops children iteratively: nesting depth is bounded only by the input size.
fn drain(stack: &mut Vec<Pending>) {
    while let Some(p) = stack.pop() {
        match p {
            Pending::Nodes(nodes) => {
                for n in nodes {
                    match n {
                        Node::If(mut b) | Node::Range(mut b) | Node::With(mut b) => {
                            stack.push(Pending::Nodes(std::mem::take(&mut b.list.nodes)));
                            if let Some(e) = &mut b.else_list {
                                stack.push(Pending::Nodes(std::mem::take(&mut e.nodes)));
                            }
                            take_pipe(&mut b.pipe, stack);
                        }
                        Node::Action(mut a) => take_pipe(&mut a.pipe, stack),
                        Node::Template(mut t) => {
                            if let Some(p) = &mut t.pipe {
                                take_pipe(p, stack);
                            }
                        }
                        _ => {}
                    }
                }
            }
            Pending::Operands(ops) => {
                for o in ops {
                    take_operand(o, stack);
                }
            }
        }
    }
}

impl Drop for ListNode {
    fn drop(&mut self) {
        if self.nodes.is_empty() {
            return;
        }
        let mut stack = vec![Pending::Nodes(std::mem::take(&mut self.nodes))];
        drain(&mut stack);
    }
}

impl Drop for PipeNode {
    fn drop(&mut self) {
        if self.cmds.is_empty() {
            return;
        }
        let mut stack = Vec::new();
        take_pipe(self, &mut stack);
        drain(&mut stack);
    }
}

#[cfg(test)]
mod tests {
    /// Whether the body of the first `range` of the main template reads dot.
    fn range_body_reads_dot(text: &str) -> bool {
        let parsed = crate::parse::parse("t", text, &crate::FuncMap::default()).expect("parses");
        parsed.trees[parsed.main]
            .root
            .nodes
            .iter()
            .find_map(|n| match n {
                super::Node::Range(b) => Some(b.list_reads_dot),
                _ => None,
            })
            .expect("a range")
    }

    #[test]
    fn a_range_body_reads_dot_through_any_operand_at_any_depth() {
        let reads = [
            "{{ range $v := .l }}{{ . }}{{ end }}",
            "{{ range $v := .l }}{{ .F }}{{ end }}",
            "{{ range $v := .l }}{{ (.).F }}{{ end }}",
            "{{ range $v := .l }}{{ print (print .) }}{{ end }}",
            "{{ range $v := .l }}{{ if .F }}{{ end }}{{ end }}",
            "{{ range $v := .l }}{{ if $v }}{{ else }}{{ . }}{{ end }}{{ end }}",
            "{{ range $v := .l }}{{ with $v }}{{ . }}{{ end }}{{ end }}",
            "{{ range $v := .l }}{{ range $v }}{{ end }}{{ .F }}{{ end }}",
            "{{ range $v := .l }}{{ $x := . }}{{ end }}",
            "{{ define \"x\" }}{{ end }}{{ range $v := .l }}{{ template \"x\" . }}{{ end }}",
        ];
        let does_not = [
            "{{ range $v := .l }}{{ $v }}{{ end }}",
            "{{ range $k, $v := .l }}{{ $k }}: {{ $v | print }}{{ end }}",
            "{{ range $v := .l }}{{ $.F }}{{ $v.F }}{{ end }}",
            "{{ range $v := .l }}text{{ break }}{{ end }}",
            "{{ define \"x\" }}{{ . }}{{ end }}{{ range $v := .l }}{{ template \"x\" $v }}{{ template \"x\" }}{{ end }}",
            "{{ range $v := .l }}{{ else }}{{ . }}{{ end }}",
        ];
        for text in reads {
            assert!(range_body_reads_dot(text), "{text}");
        }
        for text in does_not {
            assert!(!range_body_reads_dot(text), "{text}");
        }
    }
}
