//! Parsed templates and their execution: the public face of the engine.

use std::sync::Arc;

use crate::budget::Limits;
use crate::error::Error;
use crate::exec;
use crate::parse::{self, Tree};
use crate::value::Value;
use crate::value::func::FuncMap;

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
