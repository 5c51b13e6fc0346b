//! The template parser, after Go's `text/template/parse/parse.go`.
//!
//! The parser follows Go's recursive descent step by step, including its token look-ahead
//! buffer (which decides which space tokens it sees), its variable scoping (undefined
//! variables are parse errors), its function check (undefined functions are parse errors
//! even in branches that never run) and the line it reports in each error. Nested
//! `{{define}}` and `{{block}}` bodies are parsed as separate trees, as in Go.

use std::collections::{BTreeSet, HashMap};

use crate::ast::{
    ActionNode, BranchNode, CommandNode, FuncRef, Ident, ListNode, Node, NumberNode, Operand, PipeNode, Pos,
    TemplateNode, TextNode, VarId, VariableNode,
};
use crate::builtins::Builtin;
use crate::error::{Error, ErrorKind};
use crate::lex::{self, Item, ItemType, Lexed};
use crate::str::Str;
use crate::strconv;
use crate::unicode;
use crate::value::func::FuncMap;

/// Go's `maxStackDepth`: the deepest nesting of parenthesized pipelines.
const MAX_STACK_DEPTH: usize = 10_000;

/// Go's `maxPipelineCmds`.
const MAX_PIPELINE_CMDS: usize = 100_000;

/// One named template of a set.
#[derive(Debug)]
pub(crate) struct Tree {
    pub name: String,
    pub root: ListNode,
}

/// The result of parsing: every template, the one being parsed and the interned variables.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub trees: Vec<Tree>,
    pub main: usize,
    /// The names of the functions referred to anywhere in the text, sorted.
    pub functions: Vec<Box<str>>,
}

/// What `textOrAction` returns: a node, or the `{{end}}`/`{{else}}` that ends a list.
enum Parsed1 {
    Node(Node),
    End,
    Else(Pos),
}

impl Parsed1 {
    fn describe(&self) -> &'static str {
        match self {
            Parsed1::End => "{{end}}",
            Parsed1::Else(_) => "{{else}}",
            Parsed1::Node(_) => "node",
        }
    }
}

/// Per-tree parser state (Go's `Tree` fields used while parsing).
#[derive(Default)]
struct TreeState {
    token: [Item; 3],
    peek_count: usize,
    vars: Vec<VarId>,
    action_line: usize,
    range_depth: usize,
    stack_depth: usize,
}

struct Parser<'a> {
    lexed: Lexed<'a>,
    cursor: usize,
    parse_name: &'a str,
    funcs: &'a FuncMap,
    t: TreeState,
    var_names: Vec<&'a str>,
    trees: Vec<Tree>,
    has_template_calls: bool,
    functions: BTreeSet<&'a str>,
}

type PResult<T> = Result<T, Error>;

/// Parses `text` as Go's `parse.Parse` with the given function map plus the builtins.
pub(crate) fn parse(name: &str, text: &str, funcs: &FuncMap) -> Result<Parsed, Error> {
    let has = |n: &str| funcs.contains(n) || Builtin::lookup(n).is_some();
    let lexed = lex::lex(text, !has("break"), !has("continue"));
    let mut p = Parser {
        lexed,
        cursor: 0,
        parse_name: name,
        funcs,
        t: TreeState {
            vars: vec![0],
            ..TreeState::default()
        },
        var_names: vec!["$"],
        trees: Vec::new(),
        has_template_calls: false,
        functions: BTreeSet::new(),
    };
    let root = p.parse_top()?;
    p.add(name, root)?;
    let main = p.tree_position(name).unwrap_or(0);
    let mut trees = p.trees;
    if p.has_template_calls {
        resolve_template_calls(&mut trees);
    }
    let functions = p.functions.iter().map(|&f| Box::from(f)).collect();
    Ok(Parsed {
        trees,
        main,
        functions,
    })
}

/// Points every `{{template}}` node at the tree it calls.
fn resolve_template_calls(trees: &mut [Tree]) {
    let index: HashMap<String, usize> = trees
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    for tree in trees.iter_mut() {
        let mut stack: Vec<&mut ListNode> = vec![&mut tree.root];
        while let Some(list) = stack.pop() {
            for node in list.nodes.iter_mut() {
                match node {
                    Node::If(b) | Node::Range(b) | Node::With(b) => {
                        let b = &mut **b;
                        stack.push(&mut b.list);
                        if let Some(e) = &mut b.else_list {
                            stack.push(e);
                        }
                    }
                    Node::Template(t) => t.target = index.get(&t.name).copied(),
                    _ => {}
                }
            }
        }
    }
}

/// Go's `IsEmptyTree` for a list: only space text and comments.
fn is_empty_list(list: &ListNode) -> bool {
    list.nodes.iter().all(|n| match n {
        Node::Text(t) => trim_space(&t.text).is_empty(),
        _ => false,
    })
}

/// `bytes.TrimSpace` (Unicode white space).
fn trim_space(s: &[u8]) -> &[u8] {
    let mut start = 0;
    while start < s.len() {
        let (r, w) = unicode::decode_rune(&s[start..]);
        if !unicode::is_space(r) {
            break;
        }
        start += w;
    }
    let mut end = s.len();
    while end > start {
        let (r, w) = unicode::decode_last_rune(&s[start..end]);
        if !unicode::is_space(r) {
            break;
        }
        end -= w;
    }
    &s[start..end]
}

impl<'a> Parser<'a> {
    // ----- token stream -----

    fn lex_next(&mut self) -> Item {
        let item = match self.lexed.items.get(self.cursor) {
            Some(i) => *i,
            None => {
                // Past the end: Go's lexer keeps returning its last item kind; repeat it.
                *self.lexed.items.last().unwrap_or(&Item::default())
            }
        };
        if self.cursor < self.lexed.items.len() {
            self.cursor += 1;
        }
        item
    }

    fn next(&mut self) -> Item {
        if self.t.peek_count > 0 {
            self.t.peek_count -= 1;
        } else {
            self.t.token[0] = self.lex_next();
        }
        self.t.token[self.t.peek_count]
    }

    fn backup(&mut self) {
        self.t.peek_count += 1;
    }

    fn backup2(&mut self, t1: Item) {
        self.t.token[1] = t1;
        self.t.peek_count = 2;
    }

    fn backup3(&mut self, t2: Item, t1: Item) {
        self.t.token[1] = t1;
        self.t.token[2] = t2;
        self.t.peek_count = 3;
    }

    fn peek(&mut self) -> Item {
        if self.t.peek_count > 0 {
            return self.t.token[self.t.peek_count - 1];
        }
        self.t.peek_count = 1;
        self.t.token[0] = self.lex_next();
        self.t.token[0]
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            let token = self.next();
            if token.typ != ItemType::Space {
                return token;
            }
        }
    }

    fn peek_non_space(&mut self) -> Item {
        let token = self.next_non_space();
        self.backup();
        token
    }

    fn val(&self, item: &Item) -> &'a str {
        match item.typ {
            ItemType::Error | ItemType::Eof => "",
            _ => &self.lexed.input[item.pos..item.end],
        }
    }

    // ----- errors -----

    fn errorf(&self, msg: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorKind::Parse,
            format!("template: {}:{}: {}", self.parse_name, self.t.token[0].line, msg),
        )
    }

    fn unexpected(&self, token: &Item, context: &str) -> Error {
        if token.typ == ItemType::Error {
            let mut extra = String::new();
            if self.t.action_line != 0 && self.t.action_line != token.line {
                extra = format!(" in action started at {}:{}", self.parse_name, self.t.action_line);
                if self.lexed.error.ends_with(" action") {
                    extra = extra[" in action".len()..].to_owned();
                }
            }
            return self.errorf(format!("{}{}", self.lexed.describe(token), extra));
        }
        self.errorf(format!(
            "unexpected {} in {}",
            self.lexed.describe(token),
            context
        ))
    }

    fn expect(&mut self, expected: ItemType, context: &str) -> PResult<Item> {
        let token = self.next_non_space();
        if token.typ != expected {
            return Err(self.unexpected(&token, context));
        }
        Ok(token)
    }

    fn expect_one_of(&mut self, e1: ItemType, e2: ItemType, context: &str) -> PResult<Item> {
        let token = self.next_non_space();
        if token.typ != e1 && token.typ != e2 {
            return Err(self.unexpected(&token, context));
        }
        Ok(token)
    }

    // ----- trees -----

    fn tree_position(&self, name: &str) -> Option<usize> {
        self.trees.iter().position(|t| t.name == name)
    }

    fn add(&mut self, name: &str, root: ListNode) -> PResult<()> {
        match self.tree_position(name) {
            Some(i) if !is_empty_list(&self.trees[i].root) => {
                if !is_empty_list(&root) {
                    return Err(self.errorf(format!(
                        "template: multiple definition of template {}",
                        strconv::quote(name.as_bytes())
                    )));
                }
                Ok(())
            }
            Some(i) => {
                self.trees[i].root = root;
                Ok(())
            }
            None => {
                self.trees.push(Tree {
                    name: name.to_owned(),
                    root,
                });
                Ok(())
            }
        }
    }

    /// Starts parsing a nested tree (define or block): fresh look-ahead, variables and depth.
    fn enter_tree(&mut self) -> TreeState {
        std::mem::replace(
            &mut self.t,
            TreeState {
                vars: vec![0],
                ..TreeState::default()
            },
        )
    }

    fn parse_top(&mut self) -> PResult<ListNode> {
        let pos = self.peek().pos;
        let mut root = ListNode {
            pos,
            nodes: Vec::new(),
        };
        while self.peek().typ != ItemType::Eof {
            if self.peek().typ == ItemType::LeftDelim {
                let delim = self.next();
                if self.next_non_space().typ == ItemType::Define {
                    let saved = self.enter_tree();
                    let r = self.parse_definition();
                    self.t = saved;
                    r?;
                    continue;
                }
                self.backup2(delim);
            }
            match self.text_or_action()? {
                Parsed1::Node(n) => root.nodes.push(n),
                other => return Err(self.errorf(format!("unexpected {}", other.describe()))),
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        let context = "define clause";
        let name_tok = self.expect_one_of(ItemType::String, ItemType::RawString, context)?;
        let name = match strconv::unquote(self.val(&name_tok).as_bytes()) {
            Ok(n) => String::from_utf8_lossy(&n).into_owned(),
            Err(e) => return Err(self.errorf(e.message())),
        };
        self.expect(ItemType::RightDelim, context)?;
        let (root, end) = self.item_list()?;
        if !matches!(end, Parsed1::End) {
            return Err(self.errorf(format!("unexpected {} in {}", end.describe(), context)));
        }
        self.add(&name, root)
    }

    fn item_list(&mut self) -> PResult<(ListNode, Parsed1)> {
        let pos = self.peek_non_space().pos;
        let mut list = ListNode {
            pos,
            nodes: Vec::new(),
        };
        while self.peek_non_space().typ != ItemType::Eof {
            match crate::stack::grow(|| self.text_or_action())? {
                Parsed1::Node(n) => list.nodes.push(n),
                end => return Ok((list, end)),
            }
        }
        Err(self.errorf("unexpected EOF"))
    }

    fn text_or_action(&mut self) -> PResult<Parsed1> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Text => Ok(Parsed1::Node(Node::Text(TextNode {
                pos: token.pos,
                text: self.val(&token).as_bytes().into(),
            }))),
            ItemType::LeftDelim => {
                self.t.action_line = token.line;
                let r = self.action();
                self.t.action_line = 0;
                r
            }
            _ => Err(self.unexpected(&token, "input")),
        }
    }

    fn action(&mut self) -> PResult<Parsed1> {
        let token = self.next_non_space();
        let node = match token.typ {
            ItemType::Block => self.block_control()?,
            ItemType::Break => self.break_control(token.pos, true)?,
            ItemType::Continue => self.break_control(token.pos, false)?,
            ItemType::Else => return self.else_control(),
            ItemType::End => {
                let t = self.expect(ItemType::RightDelim, "end")?;
                let _ = t;
                return Ok(Parsed1::End);
            }
            ItemType::If => self.branch_control("if")?,
            ItemType::Range => self.branch_control("range")?,
            ItemType::Template => self.template_control()?,
            ItemType::With => self.branch_control("with")?,
            _ => {
                self.backup();
                let token = self.peek();
                let pipe = self.pipeline("command", ItemType::RightDelim)?;
                Node::Action(ActionNode { pos: token.pos, pipe })
            }
        };
        Ok(Parsed1::Node(node))
    }

    fn break_control(&mut self, pos: Pos, is_break: bool) -> PResult<Node> {
        let (word, outside) = if is_break {
            ("{{break}}", "{{break}} outside {{range}}")
        } else {
            ("{{continue}}", "{{continue}} outside {{range}}")
        };
        let token = self.next_non_space();
        if token.typ != ItemType::RightDelim {
            return Err(self.unexpected(&token, word));
        }
        if self.t.range_depth == 0 {
            return Err(self.errorf(outside));
        }
        Ok(if is_break {
            Node::Break(pos)
        } else {
            Node::Continue(pos)
        })
    }

    fn var_id(&mut self, name: &'a str) -> VarId {
        if let Some(id) = self.var_names.iter().position(|&n| n == name) {
            return id as VarId;
        }
        self.var_names.push(name);
        (self.var_names.len() - 1) as VarId
    }

    fn new_variable(&mut self, pos: Pos, ident: &'a str) -> VariableNode {
        let mut parts = ident.split('.');
        let name = parts.next().unwrap_or("");
        let id = self.var_id(name);
        VariableNode {
            pos,
            name: name.into(),
            id,
            fields: parts.map(Ident::new).collect(),
        }
    }

    fn pipeline(&mut self, context: &str, end: ItemType) -> PResult<PipeNode> {
        let token = self.peek_non_space();
        let mut pipe = PipeNode::default();
        pipe.pos = token.pos;
        'decls: loop {
            let v = self.peek_non_space();
            if v.typ == ItemType::Variable {
                self.next();
                let token_after_variable = self.peek();
                let next = self.peek_non_space();
                if next.typ == ItemType::Assign || next.typ == ItemType::Declare {
                    pipe.is_assign = next.typ == ItemType::Assign;
                    self.next_non_space();
                    let var = self.new_variable(v.pos, self.val(&v));
                    self.t.vars.push(var.id);
                    pipe.decl.push(var);
                } else if next.typ == ItemType::Char && self.val(&next) == "," {
                    self.next_non_space();
                    let var = self.new_variable(v.pos, self.val(&v));
                    self.t.vars.push(var.id);
                    pipe.decl.push(var);
                    if context == "range" && pipe.decl.len() < 2 {
                        match self.peek_non_space().typ {
                            ItemType::Variable | ItemType::RightDelim | ItemType::RightParen => {
                                continue 'decls;
                            }
                            _ => return Err(self.errorf("range can only initialize variables")),
                        }
                    }
                    return Err(self.errorf(format!("too many declarations in {context}")));
                } else if token_after_variable.typ == ItemType::Space {
                    self.backup3(v, token_after_variable);
                } else {
                    self.backup2(v);
                }
            }
            break;
        }
        loop {
            let token = self.next_non_space();
            if token.typ == end {
                self.check_pipeline(&pipe, context)?;
                return Ok(pipe);
            }
            match token.typ {
                ItemType::Bool
                | ItemType::CharConstant
                | ItemType::Complex
                | ItemType::Dot
                | ItemType::Field
                | ItemType::Identifier
                | ItemType::Number
                | ItemType::Nil
                | ItemType::RawString
                | ItemType::String
                | ItemType::Variable
                | ItemType::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    pipe.cmds.push(cmd);
                    if pipe.cmds.len() > MAX_PIPELINE_CMDS {
                        return Err(self.errorf("pipeline too long"));
                    }
                }
                _ => return Err(self.unexpected(&token, context)),
            }
        }
    }

    fn check_pipeline(&self, pipe: &PipeNode, context: &str) -> PResult<()> {
        if pipe.cmds.is_empty() {
            return Err(self.errorf(format!("missing value for {context}")));
        }
        for (i, c) in pipe.cmds.iter().enumerate().skip(1) {
            if c.args[0].is_non_executable() {
                return Err(self.errorf(format!("non executable command in pipeline stage {}", i + 1)));
            }
        }
        Ok(())
    }

    fn branch_control(&mut self, context: &str) -> PResult<Node> {
        let mark = self.t.vars.len();
        let r = self.parse_control(context);
        self.t.vars.truncate(mark);
        let (pipe, list, else_list) = r?;
        let list_reads_dot = list.reads_dot();
        let reads_dot =
            list_reads_dot || pipe.reads_dot() || else_list.as_ref().is_some_and(ListNode::reads_dot);
        let branch = Box::new(BranchNode {
            pos: pipe.pos,
            list_reads_dot,
            reads_dot,
            pipe,
            list,
            else_list,
        });
        Ok(match context {
            "if" => Node::If(branch),
            "range" => Node::Range(branch),
            _ => Node::With(branch),
        })
    }

    fn parse_control(&mut self, context: &str) -> PResult<(PipeNode, ListNode, Option<ListNode>)> {
        let pipe = self.pipeline(context, ItemType::RightDelim)?;
        if context == "range" {
            self.t.range_depth += 1;
        }
        let r = self.item_list();
        if context == "range" {
            self.t.range_depth -= 1;
        }
        let (list, next) = r?;
        let mut else_list = None;
        match next {
            Parsed1::End => {}
            Parsed1::Else(else_pos) => {
                if context == "if" && self.peek().typ == ItemType::If {
                    self.next();
                    let node = crate::stack::grow(|| self.branch_control("if"))?;
                    else_list = Some(ListNode {
                        pos: else_pos,
                        nodes: vec![node],
                    });
                } else if context == "with" && self.peek().typ == ItemType::With {
                    self.next();
                    let node = crate::stack::grow(|| self.branch_control("with"))?;
                    else_list = Some(ListNode {
                        pos: else_pos,
                        nodes: vec![node],
                    });
                } else {
                    let (l, next) = self.item_list()?;
                    if !matches!(next, Parsed1::End) {
                        return Err(self.errorf(format!("expected end; found {}", next.describe())));
                    }
                    else_list = Some(l);
                }
            }
            Parsed1::Node(_) => {}
        }
        Ok((pipe, list, else_list))
    }

    fn else_control(&mut self) -> PResult<Parsed1> {
        let peek = self.peek_non_space();
        if peek.typ == ItemType::If || peek.typ == ItemType::With {
            return Ok(Parsed1::Else(peek.pos));
        }
        let token = self.expect(ItemType::RightDelim, "else")?;
        Ok(Parsed1::Else(token.pos))
    }

    fn block_control(&mut self) -> PResult<Node> {
        let context = "block clause";
        let token = self.next_non_space();
        let name = self.parse_template_name(&token, context)?;
        let pipe = self.pipeline(context, ItemType::RightDelim)?;
        let saved = self.enter_tree();
        let r = self.item_list();
        let block_state = std::mem::replace(&mut self.t, saved);
        let (root, end) = r?;
        if !matches!(end, Parsed1::End) {
            return Err(self.errorf(format!("unexpected {} in {}", end.describe(), context)));
        }
        // Go adds the block's tree with the block's own parser state (its last token).
        let parent = std::mem::replace(&mut self.t, block_state);
        let added = self.add(&name, root);
        self.t = parent;
        added?;
        self.has_template_calls = true;
        Ok(Node::Template(Box::new(TemplateNode {
            pos: token.pos,
            name,
            pipe: Some(pipe),
            target: None,
        })))
    }

    fn template_control(&mut self) -> PResult<Node> {
        let context = "template clause";
        let token = self.next_non_space();
        let name = self.parse_template_name(&token, context)?;
        let mut pipe = None;
        if self.next_non_space().typ != ItemType::RightDelim {
            self.backup();
            pipe = Some(self.pipeline(context, ItemType::RightDelim)?);
        }
        self.has_template_calls = true;
        Ok(Node::Template(Box::new(TemplateNode {
            pos: token.pos,
            name,
            pipe,
            target: None,
        })))
    }

    fn parse_template_name(&mut self, token: &Item, context: &str) -> PResult<String> {
        match token.typ {
            ItemType::String | ItemType::RawString => match strconv::unquote(self.val(token).as_bytes()) {
                Ok(n) => Ok(String::from_utf8_lossy(&n).into_owned()),
                Err(e) => Err(self.errorf(e.message())),
            },
            _ => Err(self.unexpected(token, context)),
        }
    }

    fn command(&mut self) -> PResult<CommandNode> {
        let pos = self.peek_non_space().pos;
        let mut cmd = CommandNode {
            pos,
            args: Vec::new(),
        };
        loop {
            self.peek_non_space();
            if let Some(operand) = self.operand()? {
                cmd.args.push(operand);
            }
            let token = self.next();
            match token.typ {
                ItemType::Space => continue,
                ItemType::RightDelim | ItemType::RightParen => self.backup(),
                ItemType::Pipe => {}
                _ => return Err(self.unexpected(&token, "operand")),
            }
            break;
        }
        if cmd.args.is_empty() {
            return Err(self.errorf("empty command"));
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Operand>> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if self.peek().typ != ItemType::Field {
            return Ok(Some(node));
        }
        let chain_pos = self.peek().pos;
        let mut fields = Vec::new();
        while self.peek().typ == ItemType::Field {
            let f = self.next();
            fields.push(Ident::new(&self.val(&f)[1..]));
        }
        Ok(Some(match node {
            Operand::Field {
                fields: mut first, ..
            } => {
                first.extend(fields);
                Operand::Field {
                    pos: chain_pos,
                    fields: first,
                }
            }
            Operand::Variable(mut v) => {
                v.fields.extend(fields);
                v.pos = chain_pos;
                Operand::Variable(v)
            }
            n @ (Operand::Bool(..)
            | Operand::String { .. }
            | Operand::Number(_)
            | Operand::Nil(_)
            | Operand::Dot(_)) => {
                return Err(self.errorf(format!(
                    "unexpected . after term {}",
                    strconv::quote(n.to_go_string().as_bytes())
                )));
            }
            n => Operand::Chain {
                pos: chain_pos,
                node: Box::new(n),
                fields,
            },
        }))
    }

    fn term(&mut self) -> PResult<Option<Operand>> {
        let token = self.next_non_space();
        let val = self.val(&token);
        Ok(Some(match token.typ {
            ItemType::Identifier => {
                let func = if let Some(f) = self.funcs.get(val) {
                    FuncRef::User(f.clone())
                } else if let Some(b) = Builtin::lookup(val) {
                    FuncRef::Builtin(b)
                } else {
                    return Err(
                        self.errorf(format!("function {} not defined", strconv::quote(val.as_bytes())))
                    );
                };
                self.functions.insert(val);
                Operand::Identifier {
                    pos: token.pos,
                    name: val.into(),
                    func,
                }
            }
            ItemType::Dot => Operand::Dot(token.pos),
            ItemType::Nil => Operand::Nil(token.pos),
            ItemType::Variable => {
                let v = self.new_variable(token.pos, val);
                if !self.t.vars.contains(&v.id) {
                    return Err(self.errorf(format!(
                        "undefined variable {}",
                        strconv::quote(v.name.as_bytes())
                    )));
                }
                Operand::Variable(v)
            }
            ItemType::Field => Operand::Field {
                pos: token.pos,
                fields: val[1..].split('.').map(Ident::new).collect(),
            },
            ItemType::Bool => Operand::Bool(token.pos, val == "true"),
            ItemType::CharConstant | ItemType::Complex | ItemType::Number => {
                match new_number(token.pos, val, token.typ) {
                    Ok(n) => Operand::Number(Box::new(n)),
                    Err(msg) => return Err(self.errorf(msg)),
                }
            }
            ItemType::LeftParen => {
                if self.t.stack_depth >= MAX_STACK_DEPTH {
                    return Err(self.errorf("max expression depth exceeded"));
                }
                self.t.stack_depth += 1;
                let r = crate::stack::grow(|| self.pipeline("parenthesized pipeline", ItemType::RightParen));
                self.t.stack_depth -= 1;
                Operand::Pipe(Box::new(r?))
            }
            ItemType::String | ItemType::RawString => match strconv::unquote(val.as_bytes()) {
                Ok(text) => Operand::String {
                    pos: token.pos,
                    quoted: val.into(),
                    text: Str::from(text),
                },
                Err(e) => return Err(self.errorf(e.message())),
            },
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }
}

/// Go's `newNumber`: the number's value under every type that can represent it.
pub(crate) fn new_number(pos: Pos, text: &str, typ: ItemType) -> Result<NumberNode, String> {
    let mut n = NumberNode {
        pos,
        text: text.into(),
        is_int: false,
        is_uint: false,
        is_float: false,
        is_complex: false,
        int64: 0,
        uint64: 0,
        float64: 0.0,
        complex: (0.0, 0.0),
    };
    match typ {
        ItemType::CharConstant => {
            let bytes = text.as_bytes();
            let (r, _, w) =
                strconv::unquote_char(&bytes[1..], bytes[0]).map_err(|e| e.message().to_owned())?;
            if &bytes[1 + w..] != b"'" {
                return Err(format!("malformed character constant: {text}"));
            }
            n.int64 = i64::from(r);
            n.is_int = true;
            n.uint64 = u64::from(r);
            n.is_uint = true;
            n.float64 = f64::from(r);
            n.is_float = true;
            return Ok(n);
        }
        ItemType::Complex => {
            let (re, im) = parse_complex(text).ok_or_else(|| "expected integer".to_owned())?;
            n.complex = (re, im);
            n.is_complex = true;
            simplify_complex(&mut n);
            return Ok(n);
        }
        _ => {}
    }
    if let Some(body) = text.strip_suffix('i')
        && let Ok(f) = strconv::parse_float(body.as_bytes())
    {
        n.is_complex = true;
        n.complex = (0.0, f);
        simplify_complex(&mut n);
        return Ok(n);
    }
    let u = strconv::parse_uint(text.as_bytes(), 0, 64);
    if let Ok(u) = u {
        n.is_uint = true;
        n.uint64 = u;
    }
    if let Ok(i) = strconv::parse_int(text.as_bytes(), 0, 64) {
        n.is_int = true;
        n.int64 = i;
        if i == 0 {
            n.is_uint = true;
            n.uint64 = u.unwrap_or(0);
        }
    }
    if n.is_int {
        n.is_float = true;
        n.float64 = n.int64 as f64;
    } else if n.is_uint {
        n.is_float = true;
        n.float64 = n.uint64 as f64;
    } else if let Ok(f) = strconv::parse_float(text.as_bytes()) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Err(format!("integer overflow: {}", strconv::quote(text.as_bytes())));
        }
        n.is_float = true;
        n.float64 = f;
        if !n.is_int
            && (f as i64) as f64 == f
            && f.fract() == 0.0
            && (-9.223372036854776e18..9.223372036854776e18).contains(&f)
        {
            n.is_int = true;
            n.int64 = f as i64;
        }
        if !n.is_uint && (0.0..1.8446744073709552e19).contains(&f) && f.fract() == 0.0 {
            n.is_uint = true;
            n.uint64 = f as u64;
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return Err(format!(
            "illegal number syntax: {}",
            strconv::quote(text.as_bytes())
        ));
    }
    Ok(n)
}

fn simplify_complex(n: &mut NumberNode) {
    let (re, im) = n.complex;
    n.is_float = im == 0.0;
    if n.is_float {
        n.float64 = re;
        n.is_int = re.fract() == 0.0 && (-9.223372036854776e18..9.223372036854776e18).contains(&re);
        if n.is_int {
            n.int64 = re as i64;
        }
        n.is_uint = re.fract() == 0.0 && (0.0..1.8446744073709552e19).contains(&re);
        if n.is_uint {
            n.uint64 = re as u64;
        }
    }
}

/// `fmt.Sscan` of a complex literal `re±imi`.
fn parse_complex(text: &str) -> Option<(f64, f64)> {
    let body = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or(text);
    let bytes = body.as_bytes();
    let split = (1..bytes.len()).rev().find(|&i| {
        (bytes[i] == b'+' || bytes[i] == b'-') && !matches!(bytes[i - 1], b'e' | b'E' | b'p' | b'P')
    })?;
    let re = strconv::parse_float(&bytes[..split]).ok()?;
    let im_text = body[split..].strip_suffix('i')?;
    let im = strconv::parse_float(im_text.as_bytes()).ok()?;
    Some((re, im))
}
