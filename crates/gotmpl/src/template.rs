//! Parsed templates and their execution.

use std::sync::Arc;

use crate::error::Error;
use crate::func::FuncMap;
use crate::value::Value;

/// Bounds on one execution, so that a hostile or buggy template fails with an
/// [`crate::ErrorKind::Limit`] error instead of hanging, overflowing the stack or exhausting
/// memory.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Maximum number of evaluation steps (nodes visited, loop iterations, function calls).
    pub max_steps: u64,
    /// Maximum nesting of `{{template}}` calls.
    pub max_depth: usize,
    /// Maximum output size in bytes.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 10_000_000,
            max_depth: 100_000,
            max_output: 64 << 20,
        }
    }
}

/// A parsed template (with the `{{define}}`d templates it contains), ready to execute.
/// It is immutable, `Send` and `Sync`: parse once, execute from any number of threads.
#[derive(Debug)]
pub struct Template {
    name: String,
    funcs: Arc<FuncMap>,
}

impl Template {
    /// Parses `text` as Go's `template.New(name).Funcs(funcs).Parse(text)` does: a reference
    /// to a function that is neither builtin nor in `funcs` is a parse error, even in a branch
    /// that never runs.
    pub fn parse(name: &str, text: &str, funcs: Arc<FuncMap>) -> Result<Template, Error> {
        let _ = text;
        Ok(Template {
            name: name.to_owned(),
            funcs,
        })
    }

    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Executes the template with `data` as dot, appending the output to `out`. On error,
    /// what was appended so far is unspecified; callers discard it, as the original does.
    pub fn execute(&self, data: &Value, out: &mut Vec<u8>, limits: &Limits) -> Result<(), Error> {
        let _ = (data, out, limits, &self.funcs);
        unimplemented!("Template::execute")
    }

    /// Executes with default [`Limits`] and returns the output.
    pub fn render(&self, data: &Value) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.execute(data, &mut out, &Limits::default())?;
        Ok(out)
    }
}
