//! `kalypso explain`: why a deployment target is (or is not) on a cluster type, and where a
//! config value comes from.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Result, bail};
use kalypso_core::explain::{ConfigExplanation, TargetExplanation, explain_config, explain_target};
use kalypso_core::{Diagnostics, Environment};
use kalypso_gotmpl::Value;

use super::report;
use crate::control_plane::read_inputs;
use crate::{ExplainArgs, GlobalArgs, OutputFormat};

/// A config value as YAML, as `toYaml` would print it.
fn yaml(value: &Value) -> String {
    let bytes = kalypso_goyaml::marshal_v3(value).unwrap_or_default();
    String::from_utf8_lossy(&bytes).trim_end_matches('\n').to_owned()
}

pub(crate) fn explain(args: &ExplainArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let inputs = read_inputs(&args.control_plane, &args.env)?;
    let mut diagnostics = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(&args.env, &inputs, &mut diagnostics);
    let env = Environment::new(namespace, &mut diagnostics);
    report(&diagnostics, global);
    let Some(target) = env.targets.get(&args.target) else {
        let known: Vec<&str> = env.targets.keys().map(String::as_str).collect();
        bail!(
            "no deployment target {:?} in environment {:?} (targets: {})",
            args.target,
            args.env,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    if let Some(ct) = &args.cluster_type
        && !env.namespace.cluster_types.contains_key(ct)
    {
        bail!("no cluster type {ct:?} in environment {:?}", args.env);
    }
    if let Some(key) = &args.config {
        let Some(ct_name) = &args.cluster_type else {
            bail!("--config explains one assignment: name its cluster type with --cluster-type");
        };
        let ct = &env.namespace.cluster_types[ct_name];
        let explanation = explain_config(&env.config, ct, target, key, yaml);
        match args.output {
            OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
            _ => print!("{}", config_text(&explanation)),
        }
    } else {
        let explanation = explain_target(&env, target, args.cluster_type.as_deref());
        match args.output {
            OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
            _ => print!("{}", target_text(&explanation)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn mark(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

fn actual(value: Option<&String>, key_hint: &str) -> String {
    match value {
        Some(v) => format!("{key_hint}={v}"),
        None => format!("no {key_hint} label"),
    }
}

/// The scheduling explanation for people.
pub(crate) fn target_text(e: &TargetExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Deployment target {} (workload {}, workspace {}, environment {})",
        e.deployment_target,
        e.workload,
        if e.workspace.is_empty() {
            "none"
        } else {
            &e.workspace
        },
        e.environment
    );
    let labels: Vec<String> = e.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let _ = writeln!(out, "Labels: {}", labels.join(", "));
    for p in &e.policies {
        let _ = writeln!(
            out,
            "\nPolicy {}: {}",
            p.policy,
            if p.selects_target {
                "selects the target"
            } else {
                "does not select the target"
            }
        );
        if !p.environment_matches {
            let _ = writeln!(
                out,
                "  {} environment: the target belongs to {}",
                mark(false),
                e.environment
            );
        }
        if !p.workspace.is_empty() {
            let _ = writeln!(
                out,
                "  {} workspace {} (target: {})",
                mark(p.workspace_matches),
                p.workspace,
                e.workspace
            );
        }
        if p.target_requirements.is_empty() {
            let _ = writeln!(out, "  {} target selector selects every target", mark(true));
        }
        for c in &p.target_requirements {
            let key = c
                .requirement
                .split(['=', ' '])
                .next()
                .unwrap_or_default()
                .trim_start_matches('!');
            let _ = writeln!(
                out,
                "  {} {} ({})",
                mark(c.satisfied),
                c.requirement,
                actual(c.actual.as_ref(), key)
            );
        }
        if p.selects_target {
            for ct in &p.cluster_types {
                let reasons: Vec<String> = ct
                    .requirements
                    .iter()
                    .map(|c| {
                        let key = c
                            .requirement
                            .split(['=', ' '])
                            .next()
                            .unwrap_or_default()
                            .trim_start_matches('!');
                        format!(
                            "{} {} ({})",
                            mark(c.satisfied),
                            c.requirement,
                            actual(c.actual.as_ref(), key)
                        )
                    })
                    .collect();
                let why = if reasons.is_empty() {
                    "selector selects every cluster type".to_owned()
                } else {
                    reasons.join(", ")
                };
                let _ = writeln!(
                    out,
                    "  cluster type {} {}: {why}",
                    ct.cluster_type,
                    mark(ct.selected)
                );
            }
        }
    }
    if e.assignments.is_empty() {
        let _ = writeln!(out, "\nAssignments: none");
    } else {
        let list: Vec<String> = e
            .assignments
            .iter()
            .map(|a| format!("{} (by {})", a.cluster_type, a.policies.join(", ")))
            .collect();
        let _ = writeln!(out, "\nAssignments: {}", list.join(", "));
    }
    out
}

fn indented(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The config explanation for people.
pub(crate) fn config_text(e: &ConfigExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Config key {} of {} on cluster type {}",
        e.key, e.deployment_target, e.cluster_type
    );
    if e.applied.is_empty() {
        let _ = writeln!(out, "\nNo applying ConfigMap sets it.");
    } else {
        let _ = writeln!(
            out,
            "\nApplied, in merge order{}:",
            if e.applied.len() > 1 {
                " (later values win or merge)"
            } else {
                ""
            }
        );
        for (i, s) in e.applied.iter().enumerate() {
            let _ = writeln!(out, "  {}. {}:\n{}", i + 1, s.source, indented(&s.raw, "       "));
        }
    }
    if !e.not_applied.is_empty() {
        let _ = writeln!(out, "\nNot applied:");
        for s in &e.not_applied {
            let _ = writeln!(
                out,
                "  - {}: {}",
                s.source,
                s.not_applied_because.as_deref().unwrap_or_default()
            );
        }
    }
    match &e.value {
        Some(v) => {
            let _ = writeln!(out, "\nFinal value:\n{}", indented(v, "  "));
        }
        None => {
            let _ = writeln!(out, "\nFinal value: (not set)");
        }
    }
    out
}
