//! The commands.

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

pub(crate) use check_promote::{CheckPromoteArgs, check_promote};
pub(crate) use completions::{CompletionsArgs, ManArgs, completions, man};
pub(crate) use explain::explain;
pub(crate) use hub::{HubArgs, hub};
pub(crate) use plan::{diff_command as diff, plan_command as plan};
pub(crate) use promote::{PromoteArgs, promote};
pub(crate) use render::render;
pub(crate) use serve::{ServeArgs, serve};
pub(crate) use sync::{GitArgs, SyncArgs, init_logs, sync};
pub(crate) use validate::validate;

use std::collections::BTreeMap;

use kalypso_core::model::Namespace;
use kalypso_core::placement::{CurrentAssignment, PlacementInput};
use kalypso_core::{Diagnostics, Environment, Rendered};
use kalypso_template::Engine;

use crate::GlobalArgs;
use crate::extenders::HttpExtenders;

/// Schedules `namespace`. When a policy has placement fields, `current` gives the current
/// assignment (read only then) and extenders are called over HTTP.
pub(crate) fn environment(
    namespace: Namespace,
    current: impl FnOnce() -> CurrentAssignment,
    diagnostics: &mut Diagnostics,
) -> Environment {
    if !namespace.policies.values().any(|p| p.spec.has_placement()) {
        return Environment::new(namespace, diagnostics);
    }
    let current = current();
    let client = HttpExtenders::new();
    let decisions = BTreeMap::new();
    let input = PlacementInput {
        current: &current,
        extenders: &client,
        decisions: &decisions,
    };
    Environment::with_placement(namespace, &input, diagnostics)
}

/// Loads, schedules and renders one environment (`current`: the current assignment, for
/// policies with placement fields).
pub(crate) fn run_pipeline(
    inputs: &kalypso_core::Inputs,
    env: &str,
    current: impl FnOnce() -> CurrentAssignment,
    diagnostics: &mut Diagnostics,
) -> (Environment, Rendered) {
    let namespace = kalypso_core::load_namespace(env, inputs, diagnostics);
    let environment = environment(namespace, current, diagnostics);
    kalypso_core::warnings::warn(&environment, diagnostics);
    let engine = Engine::from_env().unwrap_or_else(|e| {
        diagnostics.push(kalypso_core::Diagnostic::error("sprig-version", e));
        Engine::new()
    });
    let rendered = kalypso_core::render(&environment, &engine, diagnostics);
    (environment, rendered)
}

/// Prints diagnostics to standard error (warnings only unless quiet).
pub(crate) fn report(diagnostics: &Diagnostics, global: &GlobalArgs) {
    for d in diagnostics.iter().filter(|d| d.is_error() || !global.quiet) {
        eprintln!("{d}");
    }
}
