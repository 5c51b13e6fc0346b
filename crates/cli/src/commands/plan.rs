//! `kalypso plan` and `kalypso diff`: what rendering would change in a GitOps tree, as an
//! assignment-level summary or as a unified diff of files.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use kalypso_core::Diagnostics;
use kalypso_core::plan::{ChangeKind, Plan, plan};
use kalypso_core::tree::{Change, Tree, apply, diff};

use super::{report, run_pipeline};
use crate::control_plane::read_inputs;
use crate::fsio::read_tree;
use crate::{ColorChoice, DiffArgs, GlobalArgs, OutputFormat, PlanArgs, PlanSource};

/// Exit code when the plan has changes (like `terraform plan -detailed-exitcode`).
pub(crate) const CHANGES: u8 = 2;

/// The current tree and the tree the control plane produces, or the exit code of a failure.
fn trees(source: &PlanSource, global: &GlobalArgs) -> Result<Result<(Tree, Tree), ExitCode>> {
    let inputs = read_inputs(&source.control_plane, &source.env)?;
    let mut diagnostics = Diagnostics::new();
    let (_, rendered) = run_pipeline(&inputs, &source.env, &mut diagnostics);
    report(&diagnostics, global);
    if diagnostics.has_errors() {
        eprintln!(
            "error: environment {:?} has {} problem(s); no plan",
            source.env,
            diagnostics.errors().count()
        );
        return Ok(Err(ExitCode::FAILURE));
    }
    let Some(against) = &source.against else {
        bail!("name the current GitOps tree to compare with: --against <DIR>");
    };
    let base = read_tree(against).with_context(|| format!("reading {}", against.display()))?;
    let new = apply(&base, &rendered.content).tree;
    Ok(Ok((base, new)))
}

pub(crate) fn plan_command(args: &PlanArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let (old, new) = match trees(&args.source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let plan = plan(&old, &new);
    let env = &args.source.env;
    let text = match args.output {
        OutputFormat::Text => plan_text(env, &plan),
        OutputFormat::Markdown => plan_markdown(env, &plan),
        OutputFormat::Json => {
            let mut json =
                serde_json::to_string_pretty(&serde_json::json!({ "environment": env, "plan": plan }))?;
            json.push('\n');
            json
        }
    };
    print!("{text}");
    Ok(if plan.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}

fn summary(plan: &Plan) -> String {
    let c = &plan.counts;
    format!(
        "{} added, {} removed, {} moved, {} changed, {} unchanged assignment(s); files: {} added, {} modified, {} deleted",
        c.added, c.removed, c.moved, c.changed, c.unchanged, c.files_added, c.files_modified, c.files_deleted
    )
}

fn show(value: Option<&String>) -> String {
    match value {
        None => "(absent)".to_owned(),
        Some(v) if v.contains('\n') => format!("{v:?}"),
        Some(v) => format!("\"{v}\""),
    }
}

/// The plan for people on a terminal.
pub(crate) fn plan_text(env: &str, plan: &Plan) -> String {
    let mut out = String::new();
    if plan.is_empty() {
        let _ = writeln!(out, "No changes: environment {env} is up to date.");
        return out;
    }
    let _ = writeln!(out, "Environment {env}:");
    for a in &plan.added {
        let _ = writeln!(out, "  + {}/{} (added)", a.cluster_type, a.deployment_target);
    }
    for a in &plan.removed {
        let _ = writeln!(out, "  - {}/{} (removed)", a.cluster_type, a.deployment_target);
    }
    for m in &plan.moved {
        let _ = writeln!(
            out,
            "  > {} moved from {} to {}",
            m.deployment_target,
            m.from.join(", "),
            m.to.join(", ")
        );
    }
    for c in &plan.changed {
        let _ = writeln!(out, "  ~ {}/{} (changed)", c.cluster_type, c.deployment_target);
        for f in &c.files {
            let _ = writeln!(out, "      {} {}", f.file, kind(f.change));
            for k in &f.keys {
                let _ = writeln!(
                    out,
                    "        {}: {} -> {}",
                    k.key,
                    show(k.old.as_ref()),
                    show(k.new.as_ref())
                );
            }
        }
    }
    for p in &plan.other {
        let _ = writeln!(out, "  * {} {}", p.path, kind(p.change));
    }
    let _ = writeln!(out, "\n{}", summary(plan));
    out
}

fn kind(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
    }
}

fn md_cell(value: Option<&String>) -> String {
    match value {
        None => "_absent_".to_owned(),
        Some(v) => format!("`{}`", v.replace('|', "\\|").replace('\n', "\\n")),
    }
}

/// The plan as a pull-request comment.
pub(crate) fn plan_markdown(env: &str, plan: &Plan) -> String {
    let mut out = format!("### kalypso plan: `{env}`\n\n");
    if plan.is_empty() {
        out.push_str("No changes.\n");
        return out;
    }
    let _ = writeln!(out, "{}\n", summary(plan));
    if !plan.added.is_empty() || !plan.removed.is_empty() || !plan.moved.is_empty() {
        out.push_str("| | cluster type | deployment target |\n|---|---|---|\n");
        for a in &plan.added {
            let _ = writeln!(
                out,
                "| added | `{}` | `{}` |",
                a.cluster_type, a.deployment_target
            );
        }
        for a in &plan.removed {
            let _ = writeln!(
                out,
                "| removed | `{}` | `{}` |",
                a.cluster_type, a.deployment_target
            );
        }
        for m in &plan.moved {
            let _ = writeln!(
                out,
                "| moved | `{}` → `{}` | `{}` |",
                m.from.join("`, `"),
                m.to.join("`, `"),
                m.deployment_target
            );
        }
        out.push('\n');
    }
    if !plan.changed.is_empty() {
        out.push_str("#### Changed assignments\n\n");
        for c in &plan.changed {
            let files: Vec<String> = c
                .files
                .iter()
                .map(|f| format!("`{}` ({})", f.file, kind(f.change)))
                .collect();
            let _ = writeln!(
                out,
                "- `{}/{}`: {}",
                c.cluster_type,
                c.deployment_target,
                files.join(", ")
            );
            let keys: Vec<_> = c.files.iter().flat_map(|f| &f.keys).collect();
            if !keys.is_empty() {
                out.push_str("\n  | key | old | new |\n  |---|---|---|\n");
                for k in keys {
                    let _ = writeln!(
                        out,
                        "  | `{}` | {} | {} |",
                        k.key,
                        md_cell(k.old.as_ref()),
                        md_cell(k.new.as_ref())
                    );
                }
                out.push('\n');
            }
        }
    }
    if !plan.other.is_empty() {
        out.push_str("\n#### Other files\n\n");
        for p in &plan.other {
            let _ = writeln!(out, "- `{}` ({})", p.path, kind(p.change));
        }
    }
    out
}

pub(crate) fn diff_command(args: &DiffArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let (old, new) = match trees(&args.source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let color = match args.color {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let changes = diff(&old, &new);
    print!("{}", unified_diff(&old, &new, &changes, color));
    Ok(if changes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}

/// A unified diff of every changed file, in path order.
pub(crate) fn unified_diff(old: &Tree, new: &Tree, changes: &[(String, Change)], color: bool) -> String {
    let paint = |code: &str, line: &str| {
        if color {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_owned()
        }
    };
    let mut out = String::new();
    for (path, change) in changes {
        let before = old
            .get(path)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let after = new
            .get(path)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let (a, b) = match change {
            Change::Added => ("/dev/null".to_owned(), format!("b/{path}")),
            Change::Deleted => (format!("a/{path}"), "/dev/null".to_owned()),
            Change::Modified => (format!("a/{path}"), format!("b/{path}")),
        };
        let _ = writeln!(
            out,
            "{}",
            paint("1", &format!("diff --kalypso a/{path} b/{path}"))
        );
        let text = similar::TextDiff::from_lines(&before, &after);
        let unified = text.unified_diff().context_radius(3).header(&a, &b).to_string();
        for line in unified.lines() {
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                paint("1", line)
            } else if line.starts_with('+') {
                paint("32", line)
            } else if line.starts_with('-') {
                paint("31", line)
            } else if line.starts_with("@@") {
                paint("36", line)
            } else {
                line.to_owned()
            };
            let _ = writeln!(out, "{painted}");
        }
    }
    out
}
