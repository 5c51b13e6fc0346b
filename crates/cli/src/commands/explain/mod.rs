//! `kalypso explain`: why a deployment target is (or is not) on a cluster type, and where a
//! config value comes from — answered from the control plane alone, with the same rules the
//! renderer uses (see `kalypso_core::explain`).
//!
//! The control plane may be a folder or a git repository, as for `plan`. Text output is for
//! people and readable without color (`✓`/`✗` marks); `--output json` is a stable interface
//! documented in docs/plan-and-explain.md.

mod format;

use std::process::ExitCode;

use anyhow::{Result, bail};
use kalypso_core::Diagnostics;
use kalypso_core::explain::{explain_config, explain_target};
use kalypso_core::placement::current_from_paths;
use kalypso_gotmpl::Value;

use super::report;
use crate::settings::{Explain, Global};
use crate::source::{ControlPlaneSource, GitAccess, read_against};
use format::some_of;

/// A config value as YAML, as `toYaml` would print it.
fn yaml(value: &Value) -> String {
    let bytes = kalypso_goyaml::marshal_v3(value).unwrap_or_default();
    String::from_utf8_lossy(&bytes).trim_end_matches('\n').to_owned()
}

pub(crate) fn explain(settings: &Explain, global: &Global) -> Result<ExitCode> {
    let git = GitAccess::new(&settings.git)?;
    let inputs =
        ControlPlaneSource::open(&settings.control_plane, &git, global.quiet)?.inputs(&settings.env)?;
    let mut diagnostics = Diagnostics::new();
    let current = match &settings.against {
        Some(against) => Some(read_against(against, &git, global.quiet)?),
        None => None,
    };
    let env = super::schedule(
        &inputs,
        &settings.env,
        &|| {
            current
                .as_ref()
                .map(|tree| current_from_paths(tree.iter().map(|(path, _)| path.as_str())))
                .unwrap_or_default()
        },
        global,
        &mut diagnostics,
    );
    report(&diagnostics, global);
    let Some(target) = env.targets.get(&settings.target) else {
        let known: Vec<&str> = env.targets.keys().map(String::as_str).collect();
        bail!(
            "no deployment target {:?} in environment {:?} (targets: {})",
            settings.target,
            settings.env,
            some_of(&known, 20)
        );
    };
    if let Some(ct) = &settings.cluster_type
        && !env.namespace.cluster_types.contains_key(ct)
    {
        let known: Vec<&str> = env.namespace.cluster_types.keys().map(String::as_str).collect();
        bail!(
            "no cluster type {ct:?} in environment {:?} (cluster types: {})",
            settings.env,
            some_of(&known, 20)
        );
    }
    let text = if let Some(key) = &settings.config {
        let ct_name = match &settings.cluster_type {
            Some(ct) => ct.clone(),
            None => {
                let on: Vec<&str> = env
                    .schedule
                    .iter()
                    .filter(|a| a.deployment_target == target.name)
                    .map(|a| a.cluster_type.as_str())
                    .collect();
                match on.as_slice() {
                    [one] => (*one).to_owned(),
                    [] => bail!(
                        "--config explains one assignment, and {} is on no cluster type: name one with --cluster-type",
                        target.name
                    ),
                    several => bail!(
                        "--config explains one assignment, and {} is on {}: choose one with --cluster-type",
                        target.name,
                        several.join(", ")
                    ),
                }
            }
        };
        let ct = &env.namespace.cluster_types[&ct_name];
        let explanation = explain_config(&env, ct, target, key, yaml);
        format::config(&explanation, settings.json)?
    } else {
        let explanation = explain_target(&env, target, settings.cluster_type.as_deref());
        format::target(&explanation, settings.json)?
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
