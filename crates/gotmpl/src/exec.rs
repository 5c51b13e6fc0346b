//! The executor, after Go's `text/template/exec.go`.
//!
//! Go evaluates templates through reflection, and several observable behaviours come from
//! reflection details: a map element of type `interface {}` is an interface value (so field
//! access on it reports type `interface {}`), a pipeline result is unwrapped from its
//! interface (so a nil element prints `<no value>`), a missing map key is an invalid value
//! that converts to a nil map or nil interface argument but not to a string. [`Val`] models
//! exactly these three states, and each evaluation step mirrors the Go function of the same
//! name, including which node Go records as the error location.

use crate::ast::{
    CommandNode, FuncRef, Ident, ListNode, Node, NumberNode, Operand, PipeNode, TemplateNode, VarId,
};
use crate::budget::Limits;
use crate::builtins::{self, Builtin};
use crate::error::{Error, ErrorKind};
use crate::fmt;
use crate::parse::Tree;
use crate::reflect::{ParamType, Val, elem_val, has_type, printable, truncate_int, truncate_uint};
use crate::strconv;
use crate::value::func::Func;
use crate::value::{FloatKind, Type, Value};

/// What a step of the walk asks its enclosing `range` to do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

/// The node Go's `state.at` last recorded, for error locations.
#[derive(Clone, Copy)]
enum At<'t> {
    None,
    List(&'t ListNode),
    Node(&'t Node),
    Pipe(&'t PipeNode),
    Command(&'t CommandNode),
    Operand(&'t Operand),
}

/// A function being called.
#[derive(Clone, Copy)]
enum Callee<'a> {
    Builtin(Builtin),
    User(&'a Func),
}

/// The parsed templates an execution runs over.
pub(crate) struct Set<'t> {
    pub text: &'t str,
    pub parse_name: &'t str,
    pub trees: &'t [Tree],
}

pub(crate) struct State<'t, 'o> {
    set: Set<'t>,
    tmpl: usize,
    out: &'o mut Vec<u8>,
    out_start: usize,
    node: At<'t>,
    vars: Vec<(VarId, Val)>,
    var_base: usize,
    depth: usize,
    steps: u64,
    limits: &'t Limits,
}

type R<T> = Result<T, Error>;

/// Executes tree `main` of the set with `data` as dot.
pub(crate) fn execute(set: Set<'_>, main: usize, data: &Value, out: &mut Vec<u8>, limits: &Limits) -> R<()> {
    let dot = match data {
        Value::Nil => Val::Missing,
        v => Val::Conc(v.clone()),
    };
    let trees = set.trees;
    let out_start = out.len();
    let _budget = crate::budget::install(limits);
    let mut state = State {
        set,
        tmpl: main,
        out,
        out_start,
        node: At::None,
        vars: vec![(0, dot.clone())],
        var_base: 0,
        depth: 0,
        steps: 0,
        limits,
    };
    state.walk_list(&dot, &trees[main].root).map(|_| ())
}

impl<'t> State<'t, '_> {
    // ----- bookkeeping -----

    fn at_node(&mut self, n: &'t Node) {
        self.node = At::Node(n);
    }

    fn at(&mut self, o: &'t Operand) {
        self.node = At::Operand(o);
    }

    fn error_context(&self) -> Option<(String, String)> {
        let (pos, ctx) = match self.node {
            At::None => return None,
            At::List(l) => {
                let mut s = String::new();
                l.write_to(&mut s);
                (l.pos, s)
            }
            At::Node(n) => {
                let mut s = String::new();
                n.write_to(&mut s);
                (n.pos(), s)
            }
            At::Pipe(p) => {
                let mut s = String::new();
                p.write_to(&mut s);
                (p.pos, s)
            }
            At::Command(c) => {
                let mut s = String::new();
                c.write_to(&mut s);
                (c.pos, s)
            }
            At::Operand(o) => (o.pos(), o.to_go_string()),
        };
        let text = &self.set.text.as_bytes()[..pos.min(self.set.text.len())];
        let byte_num = match text.iter().rposition(|&b| b == b'\n') {
            None => pos,
            Some(i) => pos - (i + 1),
        };
        let line = 1 + text.iter().filter(|&&b| b == b'\n').count();
        Some((format!("{}:{}:{}", self.set.parse_name, line, byte_num), ctx))
    }

    fn error_kind(&self, kind: ErrorKind, msg: impl std::fmt::Display) -> Error {
        let name = &self.set.trees[self.tmpl].name;
        match self.error_context() {
            None => Error::new(kind, format!("template: {name}: {msg}")),
            Some((location, context)) => Error::new(
                kind,
                format!(
                    "template: {location}: executing {} at <{context}>: {msg}",
                    strconv::quote(name.as_bytes())
                ),
            ),
        }
    }

    fn errorf(&self, msg: impl std::fmt::Display) -> Error {
        self.error_kind(ErrorKind::Exec, msg)
    }

    #[inline]
    fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(self.error_kind(
                ErrorKind::Limit,
                format!(
                    "exceeded the template-steps limit ({} steps: actions, loop iterations and calls)",
                    self.limits.max_steps
                ),
            ));
        }
        Ok(())
    }

    #[inline]
    fn check_output(&self) -> R<()> {
        if self.out.len() - self.out_start > self.limits.max_output {
            return Err(self.error_kind(
                ErrorKind::Limit,
                format!(
                    "exceeded the template-output limit ({} bytes)",
                    self.limits.max_output
                ),
            ));
        }
        Ok(())
    }

    fn push(&mut self, id: VarId, v: Val) {
        self.vars.push((id, v));
    }

    /// Where variable `id` is held: the innermost of that name in the current scope.
    fn var_index(&self, id: VarId) -> Option<usize> {
        (self.var_base..self.vars.len())
            .rev()
            .find(|&i| self.vars[i].0 == id)
    }

    fn set_var(&mut self, id: VarId, name: &str, v: Val) -> R<()> {
        let Some(i) = self.var_index(id) else {
            return Err(self.errorf(format!("undefined variable: {name}")));
        };
        self.vars[i].1 = v;
        Ok(())
    }

    fn set_top_var(&mut self, n: usize, v: Val) {
        let len = self.vars.len();
        self.vars[len - n].1 = v;
    }

    fn var_value(&self, id: VarId, name: &str) -> R<Val> {
        match self.var_index(id) {
            Some(i) => Ok(self.vars[i].1.clone()),
            None => Err(self.errorf(format!("undefined variable: {name}"))),
        }
    }

    // ----- walk -----

    fn walk_list(&mut self, dot: &Val, list: &'t ListNode) -> R<Flow> {
        self.node = At::List(list);
        for node in &list.nodes {
            let flow = self.walk(dot, node)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, dot: &Val, node: &'t Node) -> R<Flow> {
        self.at_node(node);
        self.step()?;
        match node {
            Node::Text(t) => {
                self.out.extend_from_slice(&t.text);
                self.check_output()?;
            }
            Node::Action(a) => {
                if a.pipe.decl.is_empty()
                    && (self.print_held(dot, node, &a.pipe)? || self.print_written(dot, node, &a.pipe)?)
                {
                    return Ok(Flow::Normal);
                }
                let val = self.eval_pipeline(dot, &a.pipe)?;
                if a.pipe.decl.is_empty() {
                    self.print_value(node, &val)?;
                }
            }
            Node::Break(_) => return Ok(Flow::Break),
            Node::Continue(_) => return Ok(Flow::Continue),
            Node::If(b) | Node::With(b) => {
                let is_with = matches!(node, Node::With(_));
                let mark = self.vars.len();
                let r = self.walk_if_or_with(is_with, dot, b);
                self.vars.truncate(mark);
                return r;
            }
            Node::Range(b) => return crate::stack::grow(|| self.walk_range(dot, node, b)),
            Node::Template(t) => {
                self.walk_template(dot, node, t)?;
            }
        }
        Ok(Flow::Normal)
    }

    fn walk_if_or_with(&mut self, is_with: bool, dot: &Val, b: &'t crate::ast::BranchNode) -> R<Flow> {
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let truth = val.inner().is_some_and(Value::is_true);
        crate::stack::grow(|| {
            if truth {
                if is_with {
                    self.walk_list(&val, &b.list)
                } else {
                    self.walk_list(dot, &b.list)
                }
            } else if let Some(e) = &b.else_list {
                self.walk_list(dot, e)
            } else {
                Ok(Flow::Normal)
            }
        })
    }

    fn walk_range(&mut self, dot: &Val, node: &'t Node, r: &'t crate::ast::BranchNode) -> R<Flow> {
        self.at_node(node);
        let outer = self.vars.len();
        let result = self.walk_range_inner(dot, r);
        self.vars.truncate(outer);
        match result? {
            Flow::Continue => Ok(Flow::Continue),
            _ => Ok(Flow::Normal),
        }
    }

    fn one_iteration(
        &mut self,
        r: &'t crate::ast::BranchNode,
        mark: usize,
        index: Val,
        elem: Val,
    ) -> R<Flow> {
        self.step()?;
        let decl = &r.pipe.decl;
        // The element goes to dot and to the variable; a body that never reads dot gets it
        // only in its variable (moved there, not copied): dot is then nothing, which
        // nothing in that body can observe.
        let (elem, dot) = match (decl.is_empty(), r.list_reads_dot) {
            (true, _) => (Val::Missing, elem),
            (false, true) => (elem.clone(), elem),
            (false, false) => (elem, Val::Missing),
        };
        if !decl.is_empty() {
            if r.pipe.is_assign {
                if decl.len() > 1 {
                    self.set_var(decl[0].id, &decl[0].name, index.clone())?;
                    self.set_var(decl[1].id, &decl[1].name, elem)?;
                } else {
                    self.set_var(decl[0].id, &decl[0].name, elem)?;
                }
            } else {
                self.set_top_var(1, elem);
                if decl.len() > 1 {
                    self.set_top_var(2, index);
                }
            }
        }
        let flow = self.walk_list(&dot, &r.list);
        self.vars.truncate(mark);
        match flow? {
            Flow::Break => Ok(Flow::Break),
            _ => Ok(Flow::Normal),
        }
    }

    fn walk_range_inner(&mut self, dot: &Val, r: &'t crate::ast::BranchNode) -> R<Flow> {
        let val = self.eval_pipeline(dot, &r.pipe)?;
        let mark = self.vars.len();
        let value = match &val {
            Val::Missing => None,
            Val::Iface(v) | Val::Conc(v) => Some(v.clone()),
        };
        let iterated = match &value {
            None => false,
            Some(Value::Int(n, k)) => {
                if r.pipe.decl.len() > 1 {
                    return Err(self.errorf(format!(
                        "can't use {} to iterate over more than one variable",
                        fmt::sprint_string(value.as_ref().unwrap_or(&Value::Nil))
                    )));
                }
                let (n, k) = (*n, *k);
                for i in 0..n.max(0) {
                    if self.one_iteration(r, mark, Val::Missing, Val::Conc(Value::Int(i, k)))? == Flow::Break
                    {
                        break;
                    }
                }
                n > 0
            }
            Some(Value::Uint(n, k)) => {
                if r.pipe.decl.len() > 1 {
                    return Err(self.errorf(format!(
                        "can't use {} to iterate over more than one variable",
                        fmt::sprint_string(value.as_ref().unwrap_or(&Value::Nil))
                    )));
                }
                let (n, k) = (*n, *k);
                for i in 0..n {
                    if self.one_iteration(r, mark, Val::Missing, Val::Conc(Value::Uint(i, k)))? == Flow::Break
                    {
                        break;
                    }
                }
                n > 0
            }
            Some(Value::List(l)) => {
                let elem_type = l.elem_type();
                for (i, item) in l.items().iter().enumerate() {
                    let index = Val::Conc(Value::int(i as i64));
                    if self.one_iteration(r, mark, index, elem_val(elem_type, item.clone()))? == Flow::Break {
                        break;
                    }
                }
                !l.is_empty()
            }
            Some(Value::Map(m)) => {
                let entries = m.snapshot();
                let key_type = m.key_type();
                let elem_type = m.elem_type();
                for (k, v) in entries.iter() {
                    let key = elem_val(key_type, k.to_value());
                    if self.one_iteration(r, mark, key, elem_val(elem_type, v.clone()))? == Flow::Break {
                        break;
                    }
                }
                !entries.is_empty()
            }
            Some(other) => {
                let shown = fmt::sprint_string(&printable(other));
                return Err(self.errorf(format!("range can't iterate over {shown}")));
            }
        };
        if !iterated && let Some(e) = &r.else_list {
            return self.walk_list(dot, e);
        }
        Ok(Flow::Normal)
    }

    fn walk_template(&mut self, dot: &Val, node: &'t Node, t: &'t TemplateNode) -> R<()> {
        self.at_node(node);
        let Some(target) = t.target else {
            return Err(self.errorf(format!(
                "template {} not defined",
                strconv::quote(t.name.as_bytes())
            )));
        };
        if self.depth >= self.limits.max_depth {
            return Err(self.errorf(format!(
                "exceeded maximum template depth ({})",
                self.limits.max_depth
            )));
        }
        let new_dot = match &t.pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Val::Missing,
        };
        let saved_base = self.var_base;
        let saved_tmpl = self.tmpl;
        let saved_len = self.vars.len();
        self.var_base = saved_len;
        self.vars.push((0, new_dot.clone()));
        self.tmpl = target;
        self.depth += 1;
        let trees = self.set.trees;
        let r = crate::stack::grow(|| self.walk_list(&new_dot, &trees[target].root));
        self.depth -= 1;
        self.tmpl = saved_tmpl;
        self.vars.truncate(saved_len);
        self.var_base = saved_base;
        r.map(|_| ())
    }

    // ----- evaluation -----

    fn eval_pipeline(&mut self, dot: &Val, pipe: &'t PipeNode) -> R<Val> {
        self.node = At::Pipe(pipe);
        let mut value: Option<Val> = None;
        for cmd in &pipe.cmds {
            let v = self.eval_command(dot, cmd, value.take())?;
            value = Some(v.unwrap_iface());
        }
        let value = value.unwrap_or(Val::Missing);
        for var in &pipe.decl {
            if pipe.is_assign {
                self.set_var(var.id, &var.name, value.clone())?;
            } else {
                self.push(var.id, value.clone());
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &'t [Operand], final_: &Option<Val>) -> R<()> {
        if args.len() > 1 || final_.is_some() {
            return Err(self.errorf(format!(
                "can't give argument to non-function {}",
                args[0].to_go_string()
            )));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Val, cmd: &'t CommandNode, final_: Option<Val>) -> R<Val> {
        self.step()?;
        let first = &cmd.args[0];
        match first {
            Operand::Field { fields, .. } => {
                self.at(first);
                return self.eval_field_chain(dot, dot.clone(), first, fields, Some(&cmd.args), final_);
            }
            Operand::Chain { .. } => return self.eval_chain_node(dot, first, Some(&cmd.args), final_),
            Operand::Identifier { func, name, .. } => {
                self.at(first);
                return self.eval_call(dot, callee(func), At::Command(cmd), name, &cmd.args[1..], final_);
            }
            Operand::Pipe(p) => {
                self.not_a_function(&cmd.args, &final_)?;
                return crate::stack::grow(|| self.eval_pipeline(dot, p));
            }
            Operand::Variable(_) => return self.eval_variable_node(dot, first, Some(&cmd.args), final_),
            _ => {}
        }
        self.at(first);
        self.not_a_function(&cmd.args, &final_)?;
        match first {
            Operand::Bool(_, b) => Ok(Val::Conc(Value::Bool(*b))),
            Operand::Dot(_) => Ok(dot.clone()),
            Operand::Nil(_) => Err(self.errorf("nil is not a command")),
            Operand::Number(n) => self.ideal_constant(first, n),
            Operand::String { text, .. } => Ok(Val::Conc(Value::String(text.clone()))),
            _ => Err(self.errorf(format!(
                "can't evaluate command {}",
                strconv::quote(first.to_go_string().as_bytes())
            ))),
        }
    }

    fn ideal_constant(&mut self, node: &'t Operand, n: &NumberNode) -> R<Val> {
        self.at(node);
        let text = &*n.text;
        if n.is_complex {
            return Ok(Val::Conc(Value::Complex(n.complex.0, n.complex.1)));
        }
        if n.is_float
            && !is_hex_int(text)
            && !text.starts_with('\'')
            && text.contains(['.', 'e', 'E', 'p', 'P'])
        {
            return Ok(Val::Conc(Value::float(n.float64)));
        }
        if n.is_int {
            return Ok(Val::Conc(Value::int(n.int64)));
        }
        if n.is_uint {
            return Err(self.errorf(format!("{text} overflows int")));
        }
        Ok(Val::Missing)
    }

    fn eval_chain_node(
        &mut self,
        dot: &Val,
        node: &'t Operand,
        args: Option<&'t [Operand]>,
        final_: Option<Val>,
    ) -> R<Val> {
        self.at(node);
        let Operand::Chain {
            node: inner, fields, ..
        } = node
        else {
            return Err(self.errorf("internal error: not a chain"));
        };
        if fields.is_empty() {
            return Err(self.errorf("internal error: no fields in evalChainNode"));
        }
        if let Operand::Nil(_) = **inner {
            return Err(self.errorf(format!(
                "indirection through explicit nil in {}",
                node.to_go_string()
            )));
        }
        let pipe = crate::stack::grow(|| self.eval_arg(dot, ParamType::None, inner))?;
        self.eval_field_chain(dot, pipe, node, fields, args, final_)
    }

    fn eval_variable_node(
        &mut self,
        dot: &Val,
        node: &'t Operand,
        args: Option<&'t [Operand]>,
        final_: Option<Val>,
    ) -> R<Val> {
        self.at(node);
        let Operand::Variable(v) = node else {
            return Err(self.errorf("internal error: not a variable"));
        };
        let value = self.var_value(v.id, &v.name)?;
        if v.fields.is_empty() {
            if let Some(args) = args {
                self.not_a_function(args, &final_)?;
            } else if final_.is_some() {
                return Err(self.errorf(format!(
                    "can't give argument to non-function {}",
                    node.to_go_string()
                )));
            }
            return Ok(value);
        }
        self.eval_field_chain(dot, value, node, &v.fields, args, final_)
    }

    fn eval_field_chain(
        &mut self,
        dot: &Val,
        mut receiver: Val,
        node: &'t Operand,
        idents: &'t [Ident],
        args: Option<&'t [Operand]>,
        final_: Option<Val>,
    ) -> R<Val> {
        let n = idents.len();
        for ident in &idents[..n - 1] {
            receiver = self.eval_field(dot, ident, node, None, None, receiver)?;
        }
        self.eval_field(dot, &idents[n - 1], node, args, final_, receiver)
    }

    fn eval_field(
        &mut self,
        dot: &Val,
        field: &'t Ident,
        node: &'t Operand,
        args: Option<&'t [Operand]>,
        final_: Option<Val>,
        receiver: Val,
    ) -> R<Val> {
        let (value, typ) = match receiver {
            Val::Missing => return Ok(Val::Missing),
            Val::Iface(Value::Nil) => {
                return Err(self.errorf(format!("nil pointer evaluating interface {{}}.{}", field.name())));
            }
            Val::Iface(v) => (v, None),
            Val::Conc(v) => (v, Some(())),
        };
        if let Value::Object(o) = &value
            && let Some(method) = o.method(field.name())
        {
            let rest = args.map_or(&[][..], |a| &a[1..]);
            return self.eval_call(
                dot,
                Callee::User(&method),
                At::Operand(node),
                field.name(),
                rest,
                final_,
            );
        }
        let has_args = args.is_some_and(|a| a.len() > 1) || final_.is_some();
        match &value {
            Value::Object(o) => {
                if let Some(v) = o.field(field.name()) {
                    if has_args {
                        return Err(self.errorf(format!(
                            "{} has arguments but cannot be invoked as function",
                            field.name()
                        )));
                    }
                    return Ok(Val::from_result(v));
                }
            }
            Value::Map(m) if matches!(m.key_type(), Type::String | Type::Interface) => {
                if has_args {
                    return Err(self.errorf(format!("{} is not a method but has arguments", field.name())));
                }
                return Ok(match m.get(&field.key) {
                    Some(v) => elem_val(m.elem_type(), v),
                    None => Val::Missing,
                });
            }
            _ => {}
        }
        let type_name = match typ {
            None => "interface {}".to_owned(),
            Some(()) => value.type_name(),
        };
        Err(self.errorf(format!(
            "can't evaluate field {} in type {type_name}",
            field.name()
        )))
    }

    fn eval_call(
        &mut self,
        dot: &Val,
        fun: Callee<'_>,
        node: At<'t>,
        name: &str,
        args: &'t [Operand],
        final_: Option<Val>,
    ) -> R<Val> {
        let func = match fun {
            Callee::Builtin(b) => {
                let (n, v) = b.arity();
                return self.eval_builtin_call(dot, b, node, name, args, final_, n, v);
            }
            Callee::User(f) => f,
        };
        let argv = self.call_args(dot, func.params(), func.variadic_type(), name, args, final_)?;
        self.step()?;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| func.call(argv.as_slice())));
        match result {
            Ok(Ok(v)) => {
                self.charge_result(node, name, crate::budget::shallow_size(&v))?;
                Ok(Val::from_result(v))
            }
            Ok(Err(e)) => Err(self.call_error(node, name, &e)),
            Err(panic) => Err(self.call_panic(node, name, &panic)),
        }
    }

    /// Charges a function's result of `size` bytes to the allocation budget.
    fn charge_result(&mut self, node: At<'t>, name: &str, size: usize) -> R<()> {
        if let Err(e) = crate::budget::charge(size) {
            self.node = node;
            return Err(self.error_kind(ErrorKind::Limit, format!("error calling {name}: {}", e.message())));
        }
        Ok(())
    }

    /// The error of a call that returned `e`.
    fn call_error(&mut self, node: At<'t>, name: &str, e: &crate::FuncError) -> Error {
        self.node = node;
        if e.is_limit() {
            self.error_kind(ErrorKind::Limit, format!("error calling {name}: {}", e.message()))
        } else {
            self.errorf(format!("error calling {name}: {}", e.message()))
        }
    }

    /// The error of a call that panicked.
    fn call_panic(&mut self, node: At<'t>, name: &str, panic: &(dyn std::any::Any + Send)) -> Error {
        self.node = node;
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".to_owned());
        self.errorf(format!("error calling {name}: {msg}"))
    }

    /// The arguments of a call to a function of a [`crate::FuncMap`] with `params` (and
    /// `variadic` ones): the number checked, each evaluated and converted, `final_` (the
    /// previous command's value) last.
    fn call_args(
        &mut self,
        dot: &Val,
        params: &[Type],
        variadic: Option<&Type>,
        name: &str,
        args: &'t [Operand],
        final_: Option<Val>,
    ) -> R<Args> {
        let num_in = args.len() + usize::from(final_.is_some());
        let num_fixed;
        if variadic.is_some() {
            num_fixed = params.len();
            if num_in < num_fixed {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want at least {} got {}",
                    params.len(),
                    args.len()
                )));
            }
        } else {
            if num_in != params.len() {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want {} got {num_in}",
                    params.len()
                )));
            }
            num_fixed = args.len();
        }
        let mut argv = Args::with_capacity(num_in);
        let mut i = 0;
        while i < num_fixed && i < args.len() {
            let v = self.eval_arg(dot, ParamType::Go(&params[i]), &args[i])?;
            argv.push(v.into_value());
            i += 1;
        }
        if let Some(vt) = variadic {
            while i < args.len() {
                let v = self.eval_arg(dot, ParamType::Go(vt), &args[i])?;
                argv.push(v.into_value());
                i += 1;
            }
        }
        if let Some(f) = final_ {
            let t = match variadic {
                Some(vt) => {
                    if num_in - 1 < num_fixed {
                        &params[num_in - 1]
                    } else {
                        vt
                    }
                }
                None => &params[params.len() - 1],
            };
            let v = self.validate_type(f, ParamType::Go(t))?;
            argv.push(v.into_value());
        }
        Ok(argv)
    }

    /// Prints an action whose pipeline ends in a call of a function made with
    /// [`crate::Func::string`] (`{{ .X | quote }}`) by having the function append its
    /// result to the output, with the same steps, output and errors as
    /// [`State::eval_pipeline`] followed by [`State::print_value`] (the result charged to
    /// the allocation budget as its string would be). Returns `false`, having done nothing,
    /// for any other pipeline.
    fn print_written(&mut self, dot: &Val, node: &'t Node, pipe: &'t PipeNode) -> R<bool> {
        let Some((last, before)) = pipe.cmds.split_last() else {
            return Ok(false);
        };
        let first = &last.args[0];
        let Operand::Identifier {
            func: FuncRef::User(func),
            name,
            ..
        } = first
        else {
            return Ok(false);
        };
        let Some(write) = func.write_body() else {
            return Ok(false);
        };
        if let Some(i) = self.passed_variable(before, last, func) {
            return self.print_written_variable(node, pipe, i, write).map(|()| true);
        }
        // eval_pipeline, up to its last command.
        self.node = At::Pipe(pipe);
        let mut value: Option<Val> = None;
        for cmd in before {
            let v = self.eval_command(dot, cmd, value.take())?;
            value = Some(v.unwrap_iface());
        }
        // eval_command and eval_call of the last one.
        self.step()?;
        self.at(first);
        let node_at = At::Command(last);
        let argv = self.call_args(
            dot,
            func.params(),
            func.variadic_type(),
            name,
            &last.args[1..],
            value,
        )?;
        self.step()?;
        let start = self.out.len();
        let out = &mut *self.out;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(argv.as_slice(), out)));
        self.settle_written(node, node_at, name, start, result)?;
        Ok(true)
    }

    #[allow(clippy::too_many_arguments)]
    fn eval_builtin_call(
        &mut self,
        dot: &Val,
        b: Builtin,
        node: At<'t>,
        name: &str,
        args: &'t [Operand],
        final_: Option<Val>,
        fixed: &[ParamType<'static>],
        variadic: Option<ParamType<'static>>,
    ) -> R<Val> {
        let num_in = args.len() + usize::from(final_.is_some());
        let num_fixed;
        if variadic.is_some() {
            num_fixed = fixed.len();
            if num_in < num_fixed {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want at least {} got {}",
                    fixed.len(),
                    args.len()
                )));
            }
        } else {
            if num_in != fixed.len() {
                return Err(self.errorf(format!(
                    "wrong number of args for {name}: want {} got {num_in}",
                    fixed.len()
                )));
            }
            num_fixed = args.len();
        }
        if matches!(b, Builtin::And | Builtin::Or) {
            let want = b == Builtin::Or;
            let mut v = Val::Missing;
            for arg in args {
                v = self.eval_arg(dot, ParamType::Reflect, arg)?;
                if builtins::truth(&v) == want {
                    return Ok(v);
                }
            }
            if let Some(f) = final_ {
                v = self.validate_type(f, ParamType::Reflect)?;
            }
            return Ok(v);
        }
        let mut argv: Vec<Val> = Vec::with_capacity(num_in + 1);
        let mut i = 0;
        while i < num_fixed && i < args.len() {
            let v = self.eval_arg(dot, fixed[i], &args[i])?;
            argv.push(v);
            i += 1;
        }
        if let Some(vt) = variadic {
            while i < args.len() {
                let v = self.eval_arg(dot, vt, &args[i])?;
                argv.push(v);
                i += 1;
            }
        }
        let mut callee_name = String::new();
        if let Some(f) = final_ {
            let t = match variadic {
                Some(vt) => {
                    if num_in - 1 < num_fixed {
                        fixed[num_in - 1]
                    } else {
                        vt
                    }
                }
                None => fixed[fixed.len() - 1],
            };
            if b == Builtin::Call && args.is_empty() {
                callee_name = match &f {
                    Val::Conc(Value::String(s)) | Val::Iface(Value::String(s)) => s.to_string(),
                    Val::Missing => "<invalid Value>".to_owned(),
                    other => format!("<{} Value>", other.static_type()),
                };
            }
            let v = self.validate_type(f, t)?;
            argv.push(v);
        }
        if b == Builtin::Call && !args.is_empty() {
            callee_name = args[0].to_go_string();
        }
        self.step()?;
        match builtins::call(b, &callee_name, argv, self.limits.max_output) {
            Ok(v) => {
                if let Val::Conc(c) | Val::Iface(c) = &v
                    && let Err(e) = crate::budget::charge(crate::budget::shallow_size(c))
                {
                    self.node = node;
                    return Err(
                        self.error_kind(ErrorKind::Limit, format!("error calling {name}: {}", e.message()))
                    );
                }
                Ok(v)
            }
            Err(builtins::CallError::Go(msg)) => {
                self.node = node;
                Err(self.errorf(format!("error calling {name}: {msg}")))
            }
            Err(builtins::CallError::TooLarge) => {
                self.node = node;
                Err(self.error_kind(
                    ErrorKind::Limit,
                    format!(
                        "exceeded the template-output limit ({} bytes)",
                        self.limits.max_output
                    ),
                ))
            }
        }
    }

    fn validate_type(&self, value: Val, typ: ParamType<'_>) -> R<Val> {
        let v = match value {
            Val::Missing => {
                return match typ {
                    ParamType::None => Ok(Val::Missing),
                    t if t.can_be_nil() => Ok(t.zero()),
                    t => Err(self.errorf(format!("invalid value; expected {}", t.describe()))),
                };
            }
            v => v,
        };
        let t = match typ {
            ParamType::None | ParamType::Reflect => return Ok(v),
            ParamType::Go(t) => t,
        };
        match v {
            Val::Iface(inner) => {
                if matches!(t, Type::Interface) {
                    return Ok(Val::Iface(inner));
                }
                if matches!(inner, Value::Nil) {
                    return Err(
                        self.errorf(format!("wrong type for value; expected {t}; got interface {{}}"))
                    );
                }
                if has_type(&inner, t) || deref_matches(&inner, t) {
                    return Ok(Val::Conc(inner));
                }
                Err(self.errorf(format!(
                    "wrong type for value; expected {t}; got {}",
                    inner.type_name()
                )))
            }
            Val::Conc(inner) => {
                if has_type(&inner, t) || deref_matches(&inner, t) {
                    return Ok(Val::Conc(inner));
                }
                Err(self.errorf(format!(
                    "wrong type for value; expected {t}; got {}",
                    inner.type_name()
                )))
            }
            Val::Missing => Ok(Val::Missing),
        }
    }

    fn eval_arg(&mut self, dot: &Val, typ: ParamType<'_>, n: &'t Operand) -> R<Val> {
        self.at(n);
        match n {
            Operand::Dot(_) => return self.validate_type(dot.clone(), typ),
            Operand::Nil(_) => {
                if typ.can_be_nil() {
                    return Ok(typ.zero());
                }
                return Err(self.errorf(format!("cannot assign nil to {}", typ.describe())));
            }
            Operand::Field { fields, .. } => {
                let v = self.eval_field_chain(dot, dot.clone(), n, fields, None, None)?;
                return self.validate_type(v, typ);
            }
            Operand::Variable(_) => {
                let v = self.eval_variable_node(dot, n, None, None)?;
                return self.validate_type(v, typ);
            }
            Operand::Pipe(p) => {
                let v = crate::stack::grow(|| self.eval_pipeline(dot, p))?;
                return self.validate_type(v, typ);
            }
            Operand::Identifier { func, name, .. } => {
                let v = self.eval_call(dot, callee(func), At::Operand(n), name, &[], None)?;
                return self.validate_type(v, typ);
            }
            Operand::Chain { .. } => {
                let v = self.eval_chain_node(dot, n, None, None)?;
                return self.validate_type(v, typ);
            }
            _ => {}
        }
        let t = match typ {
            ParamType::Reflect => return self.eval_empty_interface(n),
            ParamType::None => return self.eval_empty_interface(n),
            ParamType::Go(t) => t,
        };
        let found =
            |s: &Self, what: &str| Err(s.errorf(format!("expected {what}; found {}", n.to_go_string())));
        match t {
            Type::Bool => match n {
                Operand::Bool(_, b) => Ok(Val::Conc(Value::Bool(*b))),
                _ => found(self, "bool"),
            },
            Type::Complex128 => match n {
                Operand::Number(num) if num.is_complex => {
                    Ok(Val::Conc(Value::Complex(num.complex.0, num.complex.1)))
                }
                _ => found(self, "complex"),
            },
            Type::Float(k) => match n {
                Operand::Number(num) if num.is_float => {
                    let f = match k {
                        FloatKind::Float32 => f64::from(num.float64 as f32),
                        FloatKind::Float64 => num.float64,
                    };
                    Ok(Val::Conc(Value::Float(f, *k)))
                }
                _ => found(self, "float"),
            },
            Type::Int(k) => match n {
                Operand::Number(num) if num.is_int => {
                    Ok(Val::Conc(Value::Int(truncate_int(num.int64, *k), *k)))
                }
                _ => found(self, "integer"),
            },
            Type::Interface => self.eval_empty_interface(n),
            Type::String => match n {
                Operand::String { text, .. } => Ok(Val::Conc(Value::String(text.clone()))),
                _ => found(self, "string"),
            },
            Type::Uint(k) => match n {
                Operand::Number(num) if num.is_uint => {
                    Ok(Val::Conc(Value::Uint(truncate_uint(num.uint64, *k), *k)))
                }
                _ => found(self, "unsigned integer"),
            },
            t => Err(self.errorf(format!("can't handle {} for arg of type {t}", n.to_go_string()))),
        }
    }

    fn eval_empty_interface(&mut self, n: &'t Operand) -> R<Val> {
        self.at(n);
        match n {
            Operand::Bool(_, b) => Ok(Val::Conc(Value::Bool(*b))),
            Operand::Number(num) => self.ideal_constant(n, num),
            Operand::String { text, .. } => Ok(Val::Conc(Value::String(text.clone()))),
            Operand::Nil(_) => Err(self.errorf("evalEmptyInterface: nil (can't happen)")),
            _ => Err(self.errorf(format!(
                "can't handle assignment of {} to empty interface argument",
                n.to_go_string()
            ))),
        }
    }

    fn print_value(&mut self, node: &'t Node, v: &Val) -> R<()> {
        self.at_node(node);
        write_printed(self.out, v.inner());
        self.check_output()
    }

    /// Prints the commonest actions, `{{ $x }}`, `{{ .Field }}` and `{{ .Field.key }}` (dot
    /// a struct, the field a map with string keys), from where their value is held instead
    /// of through a copy, with the same steps, output and errors as
    /// [`State::eval_pipeline`] followed by [`State::print_value`]. Returns `false`, having
    /// done nothing, for any other pipeline or when the value is not held that simply (a
    /// method, a missing field, another kind of value).
    fn print_held(&mut self, dot: &Val, node: &'t Node, pipe: &'t PipeNode) -> R<bool> {
        let [cmd] = &pipe.cmds[..] else {
            return Ok(false);
        };
        let [arg] = &cmd.args[..] else {
            return Ok(false);
        };
        match arg {
            Operand::Variable(v) if v.fields.is_empty() => {
                let Some(i) = self.var_index(v.id) else {
                    return Ok(false);
                };
                self.before_print(pipe, node)?;
                write_printed(self.out, self.vars[i].1.inner());
                self.check_output()?;
                Ok(true)
            }
            Operand::Field { fields, .. } => {
                let (Val::Conc(Value::Object(o)) | Val::Iface(Value::Object(o))) = dot else {
                    return Ok(false);
                };
                let (first, key) = match &fields[..] {
                    [first] => (first, None),
                    [first, key] => (first, Some(key)),
                    _ => return Ok(false),
                };
                if o.method(first.name()).is_some() {
                    return Ok(false);
                }
                let Some(value) = o.field_ref(first.name()) else {
                    return Ok(false);
                };
                let Some(key) = key else {
                    self.before_print(pipe, node)?;
                    // A nil field is the nil interface (`Val::from_result`).
                    write_printed(self.out, (!value.is_nil()).then_some(value));
                    self.check_output()?;
                    return Ok(true);
                };
                let Value::Map(m) = value else {
                    return Ok(false);
                };
                if !matches!(m.key_type(), Type::String | Type::Interface) {
                    return Ok(false);
                }
                self.before_print(pipe, node)?;
                let interface = matches!(m.elem_type(), Type::Interface);
                // A missing key, or a nil held in an interface element, prints as
                // `<no value>` (`elem_val`, then `Val::inner`).
                fn printed(held: Option<&Value>, interface: bool) -> Option<&Value> {
                    held.filter(|v| !(interface && v.is_nil()))
                }
                if m.is_frozen() {
                    // Read without a lock: printed where it is held.
                    let out = &mut *self.out;
                    m.with_entries(|entries| write_printed(out, printed(entries.get(&key.key), interface)));
                } else {
                    // Copied out of the map before printing: printing a map takes its lock,
                    // and a Go map can hold itself.
                    let held = m.with_entries(|entries| entries.get(&key.key).cloned());
                    write_printed(self.out, printed(held.as_ref(), interface));
                }
                self.check_output()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// For a pipeline `$x | f` whose function `f` takes the variable's value as it is held
    /// (one parameter of its type, or `interface {}`: no conversion, no error), where the
    /// variable is held; `None` for any other pipeline, or when that value is not passed
    /// unchanged (nil, missing, another type). Has no effect.
    fn passed_variable(&self, before: &[CommandNode], last: &CommandNode, func: &Func) -> Option<usize> {
        let [first] = before else {
            return None;
        };
        let ([Operand::Variable(var)], [_]) = (&first.args[..], &last.args[..]) else {
            return None;
        };
        if !var.fields.is_empty() {
            return None;
        }
        let param = match (func.params(), func.variadic_type()) {
            ([param], _) | ([], Some(param)) => param,
            _ => return None,
        };
        let i = self.var_index(var.id)?;
        // The value after the stage (`unwrap_iface`), as `validate_type` passes it.
        let value = match &self.vars[i].1 {
            Val::Conc(v) => v,
            Val::Iface(v) if !v.is_nil() => v,
            _ => return None,
        };
        (has_type(value, param) || deref_matches(value, param)).then_some(i)
    }

    /// [`State::print_written`] of `$x | f` where [`State::passed_variable`] found `$x`
    /// (held at `i`): the same steps and nodes as the general path, the variable's value
    /// passed from where it is held instead of through a copy.
    fn print_written_variable(
        &mut self,
        node: &'t Node,
        pipe: &'t PipeNode,
        i: usize,
        write: &crate::value::func::WriteBody,
    ) -> R<()> {
        let (first, last) = (&pipe.cmds[0], &pipe.cmds[1]);
        let Operand::Identifier { name, .. } = &last.args[0] else {
            return Err(self.errorf("internal error: not a call"));
        };
        // eval_pipeline; eval_command and eval_variable_node of `$x`.
        self.node = At::Pipe(pipe);
        self.step()?;
        self.at(&first.args[0]);
        // eval_command and eval_call of `f`, whose argument passes as it is.
        self.step()?;
        self.at(&last.args[0]);
        let node_at = At::Command(last);
        self.step()?;
        let start = self.out.len();
        let (vars, out) = (&self.vars, &mut *self.out);
        let arg = std::slice::from_ref(match &vars[i].1 {
            Val::Conc(v) | Val::Iface(v) => v,
            Val::Missing => &Value::Nil,
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(arg, out)));
        self.settle_written(node, node_at, name, start, result)
    }

    /// After a function wrote its result into the output from `start`: charges what it
    /// wrote, or takes it back and reports its error (or panic) at the call; then, as printing
    /// a value does, checks the output's size.
    fn settle_written(
        &mut self,
        node: &'t Node,
        node_at: At<'t>,
        name: &str,
        start: usize,
        result: std::thread::Result<Result<(), crate::FuncError>>,
    ) -> R<()> {
        let written = self.out.len() - start;
        let result = match result {
            Ok(Ok(())) => self.charge_result(node_at, name, written),
            Ok(Err(e)) => Err(self.call_error(node_at, name, &e)),
            Err(panic) => Err(self.call_panic(node_at, name, &panic)),
        };
        if let Err(e) = result {
            self.out.truncate(start);
            return Err(e);
        }
        // print_value
        self.at_node(node);
        self.check_output()
    }

    /// What evaluating a one-command pipeline does before its value is printed: the step
    /// of its command, and the node errors name.
    fn before_print(&mut self, pipe: &'t PipeNode, node: &'t Node) -> R<()> {
        self.node = At::Pipe(pipe);
        self.step()?;
        self.at_node(node);
        Ok(())
    }
}

/// The arguments of a call to a function of a [`crate::FuncMap`]: up to [`Args::INLINE`]
/// of them (nearly every call) held in place, more in a vector, so that a call allocates
/// nothing for its arguments.
enum Args {
    Inline([Value; Args::INLINE], usize),
    Heap(Vec<Value>),
}

impl Args {
    const INLINE: usize = 3;

    fn with_capacity(n: usize) -> Args {
        if n <= Args::INLINE {
            Args::Inline([Value::Nil, Value::Nil, Value::Nil], 0)
        } else {
            Args::Heap(Vec::with_capacity(n))
        }
    }

    fn push(&mut self, v: Value) {
        match self {
            Args::Inline(items, len) if *len < Args::INLINE => {
                items[*len] = v;
                *len += 1;
            }
            Args::Inline(items, len) => {
                let mut heap: Vec<Value> = items[..*len]
                    .iter_mut()
                    .map(|item| std::mem::replace(item, Value::Nil))
                    .collect();
                heap.push(v);
                *self = Args::Heap(heap);
            }
            Args::Heap(items) => items.push(v),
        }
    }

    fn as_slice(&self) -> &[Value] {
        match self {
            Args::Inline(items, len) => &items[..*len],
            Args::Heap(items) => items,
        }
    }
}

/// Go's printing of an action's value: `<no value>` for none (invalid, or a nil interface),
/// pointers to structs as the struct.
fn write_printed(out: &mut Vec<u8>, v: Option<&Value>) {
    match v {
        None => out.extend_from_slice(b"<no value>"),
        Some(Value::Object(o)) if o.kind_name() == "ptr" => {
            fmt::write_value(out, &printable(&Value::Object(o.clone())))
        }
        Some(value) => fmt::write_value(out, value),
    }
}

fn callee(f: &FuncRef) -> Callee<'_> {
    match f {
        FuncRef::Builtin(b) => Callee::Builtin(*b),
        FuncRef::User(f) => Callee::User(f),
    }
}

/// Go's `validateType` dereference: a `*T` argument for a `T` parameter.
fn deref_matches(v: &Value, t: &Type) -> bool {
    match (v, t) {
        (Value::Object(o), Type::Named(n)) => {
            let name = o.type_name();
            name.as_bytes().first() == Some(&b'*') && &name.as_bytes()[1..] == n.as_bytes()
        }
        _ => false,
    }
}

fn is_hex_int(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() > 2 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') && !s.contains(['p', 'P'])
}
