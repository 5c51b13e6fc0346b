//! Parsed templates and their execution: the public face of the engine.

use std::sync::Arc;

use crate::error::Error;
use crate::exec;
use crate::func::FuncMap;
use crate::parse::{self, Tree};
use crate::value::Value;

/// Bounds on one execution, so that a hostile or buggy template fails with an
/// [`crate::ErrorKind::Limit`] error instead of hanging, overflowing the stack or exhausting
/// memory.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Maximum number of evaluation steps (nodes visited, loop iterations, function calls):
    /// the `template-steps` limit.
    pub max_steps: u64,
    /// Maximum nesting of `{{template}}` calls (`template-depth`). Go's limit is 100000;
    /// reaching it is an [`crate::ErrorKind::Exec`] error with Go's message, as in Go.
    pub max_depth: usize,
    /// Maximum output size in bytes (`template-output`).
    pub max_output: usize,
    /// Maximum bytes of strings, lists and maps that function calls build in one execution,
    /// counted as they are returned (`template-alloc`, see [`crate::budget`]).
    pub max_alloc: usize,
    /// Maximum nesting of lists and maps that encoding and hashing functions recurse into
    /// (`data-depth`, see [`crate::budget::check_data`]).
    pub max_data_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 10_000_000,
            max_depth: 100_000,
            max_output: 64 << 20,
            max_alloc: 256 << 20,
            max_data_depth: 1_000,
        }
    }
}

/// A parsed template (with the `{{define}}`d templates it contains), ready to execute.
/// It is immutable, `Send` and `Sync`: parse once, execute from any number of threads.
#[derive(Debug)]
pub struct Template {
    name: String,
    funcs: Arc<FuncMap>,
    text: Arc<str>,
    trees: Vec<Tree>,
    main: usize,
    functions: Vec<Box<str>>,
}

impl Template {
    /// Parses `text` as Go's `template.New(name).Funcs(funcs).Parse(text)` does: a reference
    /// to a function that is neither builtin nor in `funcs` is a parse error, even in a branch
    /// that never runs. Functions in `funcs` take precedence over builtins of the same name.
    pub fn parse(name: &str, text: &str, funcs: Arc<FuncMap>) -> Result<Template, Error> {
        let parsed = crate::stack::grow(|| parse::parse(name, text, &funcs))?;
        Ok(Template {
            name: name.to_owned(),
            funcs,
            text: Arc::from(text),
            trees: parsed.trees,
            main: parsed.main,
            functions: parsed.functions,
        })
    }

    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The functions the template was parsed with.
    pub fn funcs(&self) -> &Arc<FuncMap> {
        &self.funcs
    }

    /// The names of the functions (builtin or from `funcs`) the text refers to anywhere, even
    /// in branches that never run, sorted.
    pub fn functions(&self) -> impl Iterator<Item = &str> {
        self.functions.iter().map(|f| &**f)
    }

    /// The names of all templates in the set (the main one and every `{{define}}` and
    /// `{{block}}`), sorted.
    pub fn template_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.trees.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        names
    }

    /// Executes the template with `data` as dot, appending the output to `out`. On error,
    /// what was appended so far is unspecified; callers discard it, as the original does.
    pub fn execute(&self, data: &Value, out: &mut Vec<u8>, limits: &Limits) -> Result<(), Error> {
        self.execute_index(self.main, data, out, limits)
    }

    /// Executes the template called `name` in this set (Go's `ExecuteTemplate`).
    pub fn execute_template(
        &self,
        name: &str,
        data: &Value,
        out: &mut Vec<u8>,
        limits: &Limits,
    ) -> Result<(), Error> {
        match self.trees.iter().position(|t| t.name == name) {
            Some(i) => self.execute_index(i, data, out, limits),
            None => Err(Error::new(
                crate::ErrorKind::Exec,
                format!(
                    "template: no template {} associated with template {}",
                    crate::strconv::quote(name.as_bytes()),
                    crate::strconv::quote(self.name.as_bytes())
                ),
            )),
        }
    }

    fn execute_index(
        &self,
        index: usize,
        data: &Value,
        out: &mut Vec<u8>,
        limits: &Limits,
    ) -> Result<(), Error> {
        let set = exec::Set {
            text: &self.text,
            parse_name: &self.name,
            trees: &self.trees,
        };
        crate::stack::grow(|| exec::execute(set, index, data, out, limits))
    }

    /// Executes with default [`Limits`] and returns the output.
    pub fn render(&self, data: &Value) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.execute(data, &mut out, &Limits::default())?;
        Ok(out)
    }
}
