//! The commands. Each takes its validated settings (`crate::settings`), never clap's types,
//! and does its own IO: reading sources, writing, printing.

mod check_promote;
mod completions;
#[cfg(feature = "operator")]
pub(crate) mod crds;
mod explain;
pub(crate) mod hub;
mod hub_action;
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
pub(crate) use hub_action::hub_action;
pub(crate) use plan::{diff_command as diff, plan_command as plan};
pub(crate) use promote::promote;
pub(crate) use render::render;
pub(crate) use serve::serve;
pub(crate) use sync::{init_logs, rollout, sync};
pub(crate) use validate::validate;

use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::{Collect, Isolation, Request, Run, RunContext};
use kalypso_core::{Diagnostics, Inputs, ScheduledEnvironment};

use crate::settings::Global;
use kalypso_git::extenders::HttpExtenders;

/// Loads and schedules environment `env` of `inputs`: the first step of the core's driver,
/// all `explain` needs (`current`: the current assignment, read only for policies with
/// placement fields; extenders are called over HTTP).
pub(crate) fn schedule(
    inputs: &Inputs,
    env: &str,
    current: &dyn Fn() -> CurrentAssignment,
    global: &Global,
    diagnostics: &mut Diagnostics,
) -> ScheduledEnvironment {
    let engine = global.engine();
    let extenders = HttpExtenders::new();
    let context = RunContext {
        extenders: &extenders,
        ..RunContext::new(&engine)
    };
    kalypso_core::run::schedule(env, inputs, &context, current, diagnostics)
}

/// Runs environment `env` of `inputs` with the core's driver, keeping the content in memory
/// (`validate`, `plan`, `diff`; `current` as for [`schedule`]).
pub(crate) fn run(
    inputs: &Inputs,
    env: &str,
    current: &(dyn Fn() -> CurrentAssignment + Sync),
    isolation: Isolation,
    global: &Global,
) -> Run {
    let engine = global.engine();
    let extenders = HttpExtenders::new();
    let context = RunContext {
        extenders: &extenders,
        isolation,
        ..RunContext::new(&engine)
    };
    let (run, _) = kalypso_core::run::run(Request::new(env, inputs), &context, &mut Collect::placed(current));
    run
}

/// Prints diagnostics to standard error (warnings only unless quiet).
pub(crate) fn report(diagnostics: &Diagnostics, global: &Global) {
    for d in diagnostics.iter().filter(|d| d.is_error() || !global.quiet) {
        eprintln!("{d}");
    }
}
