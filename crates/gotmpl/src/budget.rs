//! The allocation and data-nesting budget of the execution running on this thread.
//!
//! [`crate::Limits`] bounds what the executor itself does (steps, output, template calls), but
//! functions registered in a [`crate::FuncMap`] build values the executor never sees being
//! built: a loop doubling a string with `cat` or `join` exhausts memory in thirty steps, and
//! encoders (`toYaml`, `hash`) recurse into data nested as deeply as `fromJson` or `dict` made
//! it. Functions have no handle on the execution, so the execution publishes its budget in a
//! thread-local for them: [`reserve`] before a large allocation, [`check_data`] before
//! recursing into a value. Every function result is also charged by the executor.

use std::cell::Cell;

use crate::value::func::FuncError;
use crate::value::{Map, Value};

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

#[derive(Clone, Copy)]
struct Budget {
    max_alloc: usize,
    used: usize,
    max_data_depth: usize,
}

thread_local! {
    static CURRENT: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// Installs the budget of `limits` for the duration of one execution; dropping the guard
/// restores the previous one (executions can nest when a function executes a template).
pub(crate) struct Guard(Option<Budget>);

pub(crate) fn install(limits: &Limits) -> Guard {
    Guard(CURRENT.with(|c| {
        c.replace(Some(Budget {
            max_alloc: limits.max_alloc,
            used: 0,
            max_data_depth: limits.max_data_depth,
        }))
    }))
}

impl Drop for Guard {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

fn current() -> Budget {
    CURRENT.with(Cell::get).unwrap_or_else(|| {
        let d = Limits::default();
        Budget {
            max_alloc: d.max_alloc,
            used: 0,
            max_data_depth: d.max_data_depth,
        }
    })
}

fn alloc_error(max: usize, wanted: usize) -> FuncError {
    FuncError::limit(format!(
        "exceeded the template-alloc limit ({max} bytes built by function calls in one execution): \
         this call would bring it to {wanted} bytes"
    ))
}

/// Fails if building `bytes` more would exceed the allocation limit of the current
/// execution. Call it before allocating a result whose size can be far larger than the
/// arguments (`repeat`, `cat`, `join`, `indent`...); the executor charges the result after.
pub fn reserve(bytes: usize) -> Result<(), FuncError> {
    let b = current();
    let wanted = b.used.saturating_add(bytes);
    if wanted > b.max_alloc {
        return Err(alloc_error(b.max_alloc, wanted));
    }
    Ok(())
}

/// Charges `bytes` to the current execution; fails once the total exceeds the limit.
pub(crate) fn charge(bytes: usize) -> Result<(), FuncError> {
    CURRENT.with(|c| {
        let Some(mut b) = c.get() else {
            return Ok(());
        };
        b.used = b.used.saturating_add(bytes);
        c.set(Some(b));
        if b.used > b.max_alloc {
            return Err(alloc_error(b.max_alloc, b.used));
        }
        Ok(())
    })
}

/// The bytes a function result is charged: its own storage, not that of values it shares
/// with its arguments (nested values were charged when they were built).
pub(crate) fn shallow_size(v: &Value) -> usize {
    const SLOT: usize = size_of::<Value>();
    match v {
        Value::String(s) => s.len(),
        Value::List(l) => l.len().saturating_mul(SLOT),
        Value::Map(m) => m.len().saturating_mul(2 * SLOT),
        _ => 0,
    }
}

/// The nesting limit of data for the current execution.
pub fn max_data_depth() -> usize {
    current().max_data_depth
}

/// Fails if lists and maps nest in `v` more deeply than the data-depth limit allows (call it
/// before a function recurses into `v`), or if walking `v` would exceed the
/// allocation limit (a list holding the same list twice, thirty times over, is small to
/// build but has a billion leaves to encode). Walked iteratively, so any depth is safe to
/// check; it stops as soon as a limit is passed. Returns how deeply `v` nests.
///
/// A frozen map never changes, so its shape is kept after the first walk that passes: a
/// config shared by thousands of renders is walked once, not at every `toYaml`. A later
/// check against tighter limits walks it again, so the result (an error included) is the
/// one the walk gives.
pub fn check_data(v: &Value) -> Result<usize, FuncError> {
    const NODE: usize = size_of::<Value>();
    let b = current();
    let max = b.max_data_depth;
    let nodes_left = b.max_alloc.saturating_sub(b.used) / NODE;
    let frozen = match v {
        Value::Map(m) if m.is_frozen() => Some(m),
        _ => None,
    };
    if let Some((visited, deepest)) = frozen.and_then(Map::data_shape)
        && visited <= nodes_left
        && deepest <= max
    {
        return Ok(deepest);
    }
    let (visited, deepest) = walk_data(v, max, nodes_left, b.max_alloc)?;
    if let Some(m) = frozen {
        m.keep_data_shape((visited, deepest));
    }
    Ok(deepest)
}

/// [`check_data`]'s walk: the number of values visited and the deepest nesting, or the
/// first limit passed.
fn walk_data(
    v: &Value,
    max: usize,
    nodes_left: usize,
    max_alloc: usize,
) -> Result<(usize, usize), FuncError> {
    let mut visited = 0usize;
    let mut deepest = 0usize;
    let mut stack: Vec<(Value, usize)> = vec![(v.clone(), 1)];
    while let Some((v, depth)) = stack.pop() {
        visited += 1;
        if visited > nodes_left {
            return Err(FuncError::limit(format!(
                "the data holds more than {nodes_left} values (shared values counted at each use), \
                 more than the template-alloc limit ({} bytes) allows",
                max_alloc
            )));
        }
        deepest = deepest.max(depth);
        if depth > max {
            return Err(FuncError::limit(format!(
                "the data is nested more than {max} levels deep (the data-depth limit)"
            )));
        }
        match v {
            Value::List(l) => stack.extend(l.items().iter().map(|i| (i.clone(), depth + 1))),
            Value::Map(m) => stack.extend(m.snapshot().values().map(|i| (i.clone(), depth + 1))),
            _ => {}
        }
    }
    Ok((visited, deepest))
}

/// Native stack reserved per level of data for the functions that recurse into it.
const STACK_PER_LEVEL: usize = 32 << 10;

/// Checks `v` with [`check_data`], then runs `f` (which recurses into `v`) on a native stack
/// deep enough for `v`'s nesting, so that data within the limit never overflows the stack of
/// the thread rendering it.
pub fn with_data<R>(v: &Value, f: impl FnOnce() -> R) -> Result<R, FuncError> {
    let depth = check_data(v)?;
    Ok(if depth <= 16 {
        f()
    } else {
        stacker::grow(depth.saturating_mul(STACK_PER_LEVEL), f)
    })
}
