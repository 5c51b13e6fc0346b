//! The commands. Each takes its validated settings (`crate::settings`), never clap's types,
//! and does its own IO: reading sources, writing, printing.

mod check_promote;
mod completions;
#[cfg(feature = "operator")]
pub(crate) mod crds;
mod explain;
mod hub;
#[cfg(feature = "operator")]
pub(crate) mod operator;
pub(crate) mod plan;
mod promote;
mod render;
mod serve;
mod sync;
mod validate;

pub(crate) use check_promote::check_promote;
pub(crate) use completions::{completions, man};
pub(crate) use explain::explain;
pub(crate) use hub::hub;
pub(crate) use plan::{diff_command as diff, plan_command as plan};
pub(crate) use promote::promote;
pub(crate) use render::render;
pub(crate) use serve::serve;
pub(crate) use sync::{init_logs, sync};
pub(crate) use validate::validate;

use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::{Isolation, Run, RunContext};
use kalypso_core::{Code, Diagnostic, Diagnostics, Inputs, ScheduledEnvironment};
use kalypso_template::Engine;

use crate::settings::Global;
use kalypso_git::extenders::HttpExtenders;

/// The template engine `KALYPSO_SPRIG` asks for, or the error that it names no Sprig version.
pub(crate) fn engine() -> (Engine, Option<Diagnostic>) {
    match Engine::from_env() {
        Ok(engine) => (engine, None),
        Err(e) => (Engine::new(), Some(Diagnostic::error(Code::SprigVersion, e))),
    }
}

/// Loads and schedules environment `env` of `inputs` (`current`: the current assignment,
/// read only for policies with placement fields; extenders are called over HTTP).
pub(crate) fn schedule(
    inputs: &Inputs,
    env: &str,
    current: &dyn Fn() -> CurrentAssignment,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    let engine = Engine::new();
    let extenders = HttpExtenders::new();
    let context = RunContext {
        current,
        extenders: &extenders,
        ..RunContext::new(&engine)
    };
    kalypso_core::run::schedule(env, inputs, &context, diagnostics)
}

/// Runs environment `env` of `inputs` in full with the core's driver (`current` as for
/// [`schedule`]).
pub(crate) fn run(
    inputs: &Inputs,
    env: &str,
    current: &dyn Fn() -> CurrentAssignment,
    isolation: Isolation,
) -> Run {
    let (engine, engine_error) = engine();
    let extenders = HttpExtenders::new();
    let context = RunContext {
        engine: &engine,
        current,
        extenders: &extenders,
        isolation,
        ..RunContext::new(&engine)
    };
    let mut run = kalypso_core::run::run(env, inputs, &context, &kalypso_core::run::NoMemo);
    if let Some(error) = engine_error {
        run.block(error);
    }
    run
}

/// Prints diagnostics to standard error (warnings only unless quiet).
pub(crate) fn report(diagnostics: &Diagnostics, global: &Global) {
    for d in diagnostics.iter().filter(|d| d.is_error() || !global.quiet) {
        eprintln!("{d}");
    }
}
