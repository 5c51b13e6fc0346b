//! How `explain` shows an explanation: text for people, readable without colour (`✓`/`✗`
//! marks), or JSON (a stable interface: docs/plan-and-explain.md). Pure: strings out.

use std::fmt::Write as _;

use anyhow::Result;
use kalypso_core::explain::{Check, ConfigExplanation, Effect, PlacementExplanation, TargetExplanation};
use serde::Serialize;

/// The version of the JSON form of explanations.
const FORMAT_VERSION: u32 = 1;

/// The scheduling explanation, as JSON or text.
pub(super) fn target(explanation: &TargetExplanation, json: bool) -> Result<String> {
    if json {
        to_json("target", explanation)
    } else {
        Ok(target_text(explanation))
    }
}

/// The config explanation, as JSON or text.
pub(super) fn config(explanation: &ConfigExplanation, json: bool) -> Result<String> {
    if json {
        to_json("config", explanation)
    } else {
        Ok(config_text(explanation))
    }
}

/// The JSON form: the explanation with its format version and kind (`target` or `config`).
#[derive(Serialize)]
struct Document<'a, T: Serialize> {
    version: u32,
    kind: &'static str,
    #[serde(flatten)]
    explanation: &'a T,
}

fn to_json<T: Serialize>(kind: &'static str, explanation: &T) -> Result<String> {
    let document = Document {
        version: FORMAT_VERSION,
        kind,
        explanation,
    };
    Ok(serde_json::to_string_pretty(&document)? + "\n")
}

/// At most `max` names, then how many more.
pub(super) fn some_of(names: &[&str], max: usize) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    let mut text = names.iter().take(max).copied().collect::<Vec<_>>().join(", ");
    if names.len() > max {
        let _ = write!(text, " and {} more", names.len() - max);
    }
    text
}

fn mark(ok: bool) -> &'static str {
    if ok { "✓" } else { "✗" }
}

/// `✓ size=large (has size=large)`: the requirement and the labels' value for its key.
fn check(c: &Check) -> String {
    format!(
        "{} {} ({})",
        mark(c.satisfied),
        c.requirement,
        match &c.actual {
            Some(v) => format!("has {}={v}", c.key),
            None => format!("no {} label", c.key),
        }
    )
}

/// The scheduling explanation for people.
fn target_text(e: &TargetExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Deployment target {}", e.deployment_target);
    let _ = writeln!(out, "  workload:    {}", e.workload);
    let _ = writeln!(
        out,
        "  workspace:   {}",
        if e.workspace.is_empty() {
            "(none)"
        } else {
            &e.workspace
        }
    );
    let _ = writeln!(out, "  environment: {}", e.environment);
    let _ = writeln!(out, "  labels:");
    for (k, v) in &e.labels {
        let _ = writeln!(out, "    {k}={v}");
    }
    if e.policies.is_empty() {
        let _ = writeln!(out, "\nNo scheduling policy in the environment.");
    }
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
                "  {} workspace {} (has {})",
                mark(p.workspace_matches),
                p.workspace,
                if e.workspace.is_empty() {
                    "none"
                } else {
                    &e.workspace
                }
            );
        }
        if p.target_requirements.is_empty() {
            let _ = writeln!(out, "  {} target selector: selects every target", mark(true));
        }
        for c in &p.target_requirements {
            let _ = writeln!(out, "  {}", check(c));
        }
        if !p.selects_target {
            continue;
        }
        let selected = p.cluster_types.iter().filter(|c| c.selected).count();
        let _ = writeln!(
            out,
            "  cluster types: {selected} of {} selected",
            p.cluster_types.len()
        );
        for ct in &p.cluster_types {
            if ct.requirements.is_empty() {
                let _ = writeln!(
                    out,
                    "    {} {}: selector selects every cluster type",
                    mark(ct.selected),
                    ct.cluster_type
                );
                continue;
            }
            let reasons: Vec<String> = ct.requirements.iter().map(check).collect();
            let _ = writeln!(
                out,
                "    {} {}: {}",
                mark(ct.selected),
                ct.cluster_type,
                reasons.join(", ")
            );
        }
        if let Some(placement) = &p.placement {
            placement_text(&mut out, placement);
        }
    }
    if e.assignments.is_empty() {
        let _ = writeln!(out, "\nAssignments: none");
    } else {
        let _ = writeln!(out, "\nAssignments:");
        for a in &e.assignments {
            let _ = writeln!(
                out,
                "  {}/{} (by {})",
                a.cluster_type,
                e.deployment_target,
                a.policies.join(", ")
            );
        }
    }
    out
}

/// A placement decision: feasible set, extender verdicts, scores, spread and the cut.
fn placement_text(out: &mut String, p: &PlacementExplanation) {
    let _ = writeln!(out, "  placement:");
    let _ = writeln!(
        out,
        "    feasible: {}",
        some_of(&p.feasible.iter().map(String::as_str).collect::<Vec<_>>(), 50)
    );
    for v in &p.extenders {
        match &v.error {
            Some(error) => {
                let _ = writeln!(out, "    extender {}: {} ({error})", v.extender, v.verdict);
            }
            None if v.dropped.is_empty() => {
                let _ = writeln!(out, "    extender {}: keeps every candidate", v.extender);
            }
            None => {
                let dropped: Vec<String> = v
                    .dropped
                    .iter()
                    .map(|(ct, why)| {
                        if why.is_empty() {
                            ct.clone()
                        } else {
                            format!("{ct} ({why})")
                        }
                    })
                    .collect();
                let _ = writeln!(out, "    extender {}: drops {}", v.extender, dropped.join(", "));
            }
        }
    }
    for (ct, why) in &p.excluded {
        let _ = writeln!(out, "    {} {ct}: {why}", mark(false));
    }
    let limit = p
        .number_of_cluster_types
        .map_or_else(|| "every candidate".to_owned(), |n| format!("the best {n}"));
    let prioritizers = if p.prioritizers.is_empty() {
        "no prioritizers: by name".to_owned()
    } else {
        format!("scores: {}", p.prioritizers.join(", "))
    };
    let _ = writeln!(out, "    choosing {limit}; {prioritizers}");
    for c in &p.candidates {
        let scores: Vec<String> = c.scores.iter().map(u32::to_string).collect();
        let why = if c.reason.is_empty() {
            String::new()
        } else {
            format!(" — {}", c.reason)
        };
        let _ = writeln!(
            out,
            "    {} {}: [{}] total {}{why}",
            mark(c.chosen),
            c.cluster_type,
            scores.join(", "),
            c.total
        );
    }
    if !p.spread.is_empty() {
        let _ = writeln!(out, "    spread: {}", p.spread);
    }
}

fn indented(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn effect(e: Option<Effect>) -> &'static str {
    match e {
        Some(Effect::Sets) => "sets",
        Some(Effect::Merges) => "merges in",
        Some(Effect::Replaces) => "replaces the value with",
        None => "gives",
    }
}

/// A raw ConfigMap value: inline when it is one line, else as an indented block.
fn raw_value(raw: &str, indent: &str) -> String {
    if raw.contains('\n') {
        format!(":\n{}", indented(raw.trim_end_matches('\n'), indent))
    } else {
        format!(" {raw:?}")
    }
}

/// The config explanation for people.
fn config_text(e: &ConfigExplanation) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Config key {} of assignment {}/{}",
        e.key, e.cluster_type, e.deployment_target
    );
    if !e.assigned {
        let _ = writeln!(
            out,
            "(note: {} is not scheduled on {}; this is the value it would get there)",
            e.deployment_target, e.cluster_type
        );
    }
    if e.applied.is_empty() {
        let _ = writeln!(out, "\nNo applying ConfigMap sets it.");
    } else {
        let _ = writeln!(out, "\nApplied, in merge order:");
        for (i, s) in e.applied.iter().enumerate() {
            let labels = if s.labels.is_empty() {
                "no labels: applies to every assignment".to_owned()
            } else {
                format!("matched by {}", s.labels.join(", "))
            };
            let _ = writeln!(
                out,
                "  {}. {} ({labels}) {}{}",
                i + 1,
                s.source,
                effect(s.effect),
                raw_value(&s.raw, "       ")
            );
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
        Some(v) if v.contains('\n') => {
            let _ = writeln!(out, "\nFinal value:\n{}", indented(v, "  "));
        }
        Some(v) => {
            let _ = writeln!(out, "\nFinal value: {v}");
        }
        None => {
            let _ = writeln!(out, "\nFinal value: (not set)");
        }
    }
    out
}
