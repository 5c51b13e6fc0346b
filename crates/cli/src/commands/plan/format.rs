//! How `plan` and `diff` show a change: the plan as text for people, Markdown for a
//! pull-request comment or JSON for machines (a stable interface: docs/plan-and-explain.md),
//! and the unified diff of files. Pure: strings in, strings out; printing is the command's.

use std::fmt::Write as _;

use anyhow::Result;
use kalypso_core::plan::{ChangeGroup, FORMAT_VERSION, FileChange, KeyChange, Plan};
use kalypso_core::tree::{Change, Tree};
use kalypso_git::control_plane::short;
use serde::Serialize;

use super::Promotion;
use crate::args::OutputFormat;

/// The plan in `format`, as printed.
pub(super) fn plan(
    format: OutputFormat,
    env: &str,
    promotion: Option<&Promotion>,
    plan: &Plan,
) -> Result<String> {
    Ok(match format {
        OutputFormat::Text => plan_text(env, promotion, plan),
        OutputFormat::Markdown => plan_markdown(env, promotion, plan),
        OutputFormat::Json => {
            let document = PlanDocument {
                version: FORMAT_VERSION,
                environment: env,
                promote_from: promotion,
                has_changes: !plan.is_empty(),
                plan,
            };
            let mut json = serde_json::to_string_pretty(&document)?;
            json.push('\n');
            json
        }
    })
}

/// The JSON form of a plan: a stable interface (see docs/plan-and-explain.md).
#[derive(Debug, Serialize)]
struct PlanDocument<'a> {
    /// [`FORMAT_VERSION`].
    version: u32,
    /// The environment planned.
    environment: &'a str,
    /// The promotion planned, with `--promote-from`.
    promote_from: Option<&'a Promotion>,
    /// Whether anything changes (the exit code is 2 exactly then).
    has_changes: bool,
    #[serde(flatten)]
    plan: &'a Plan,
}

/// The counts, as two lines.
fn summary(plan: &Plan) -> String {
    let c = &plan.counts;
    format!(
        "Assignments: {} added, {} removed, {} moved, {} changed, {} unchanged.\nFiles: {} added, {} modified, {} deleted.",
        c.added, c.removed, c.moved, c.changed, c.unchanged, c.files_added, c.files_modified, c.files_deleted
    )
}

fn title(env: &str, promotion: Option<&Promotion>) -> String {
    match promotion {
        None => format!("environment {env}"),
        Some(Promotion {
            environment,
            commit: Some(commit),
        }) => format!(
            "environment {env}, promoting main commit {} from {environment}",
            short(commit)
        ),
        Some(Promotion { environment, .. }) => {
            format!("environment {env}, promoting main from {environment}")
        }
    }
}

/// A value for people: quoted, escaped; `(none)` when absent.
fn show(value: Option<&String>) -> String {
    match value {
        None => "(none)".to_owned(),
        Some(v) => format!("{v:?}"),
    }
}

fn key_lines(out: &mut String, k: &KeyChange, indent: &str) {
    let multiline = |v: &Option<String>| v.as_ref().is_some_and(|v| v.contains('\n'));
    let sign = match (&k.old, &k.new) {
        (None, _) => '+',
        (_, None) => '-',
        _ => '~',
    };
    if multiline(&k.old) || multiline(&k.new) {
        let _ = writeln!(out, "{indent}{sign} {}:", k.key);
        for (label, value) in [("old", &k.old), ("new", &k.new)] {
            match value {
                None => {
                    let _ = writeln!(out, "{indent}    {label}: (none)");
                }
                Some(v) => {
                    let _ = writeln!(out, "{indent}    {label}: |");
                    for line in v.lines() {
                        let _ = writeln!(out, "{indent}      {line}");
                    }
                }
            }
        }
        return;
    }
    let _ = match (&k.old, &k.new) {
        (None, new) => writeln!(out, "{indent}{sign} {}: {}", k.key, show(new.as_ref())),
        (old, None) => writeln!(out, "{indent}{sign} {}: {}", k.key, show(old.as_ref())),
        (old, new) => writeln!(
            out,
            "{indent}{sign} {}: {} -> {}",
            k.key,
            show(old.as_ref()),
            show(new.as_ref())
        ),
    };
}

fn file_lines(out: &mut String, files: &[FileChange], indent: &str) {
    for f in files {
        let _ = writeln!(out, "{indent}{} {}", f.file, f.change.as_str());
        for k in &f.keys {
            key_lines(out, k, &format!("{indent}  "));
        }
    }
}

/// The plan for people on a terminal.
fn plan_text(env: &str, promotion: Option<&Promotion>, plan: &Plan) -> String {
    let mut out = format!("Plan for {}\n", title(env, promotion));
    if plan.is_empty() {
        let _ = writeln!(out, "\nNo changes: the GitOps tree is up to date.");
        return out;
    }
    if !plan.cluster_types.added.is_empty() || !plan.cluster_types.removed.is_empty() {
        let _ = writeln!(out, "\nCluster types:");
        for ct in &plan.cluster_types.added {
            let _ = writeln!(out, "  + {ct}");
        }
        for ct in &plan.cluster_types.removed {
            let _ = writeln!(out, "  - {ct}");
        }
    }
    if !plan.added.is_empty() {
        let _ = writeln!(out, "\nAdded ({}):", plan.added.len());
        for a in &plan.added {
            let _ = writeln!(out, "  + {a}");
        }
    }
    if !plan.removed.is_empty() {
        let _ = writeln!(out, "\nRemoved ({}):", plan.removed.len());
        for a in &plan.removed {
            let _ = writeln!(out, "  - {a}");
        }
    }
    if !plan.moved.is_empty() {
        let _ = writeln!(out, "\nMoved ({}):", plan.moved.len());
        for m in &plan.moved {
            let _ = writeln!(
                out,
                "  > {}: {} -> {}",
                m.deployment_target,
                m.from.join(", "),
                m.to.join(", ")
            );
        }
    }
    if !plan.changed.is_empty() {
        let _ = writeln!(out, "\nChanged ({}):", plan.changed.len());
        // Assignments that changed alike share one description; groups are set apart.
        for (i, group) in plan.groups().iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            for a in &group.assignments {
                let _ = writeln!(out, "  ~ {a}");
            }
            file_lines(&mut out, group.files, "      ");
        }
    }
    if let Some(p) = &plan.promoted_commit {
        let _ = writeln!(
            out,
            "\nPromoted commit: {} -> {}",
            show(p.old.as_ref()),
            show(p.new.as_ref())
        );
    }
    let other: Vec<_> = plan.other_unexplained().collect();
    if !other.is_empty() {
        let _ = writeln!(out, "\nOther files:");
        for p in other {
            let _ = writeln!(out, "  {} ({})", p.path, p.change.as_str());
        }
    }
    let _ = writeln!(out, "\n{}", summary(plan));
    out
}

/// A value in a Markdown table cell: a code span, `|` escaped, line breaks shown as `\n`.
fn md_value(value: Option<&String>) -> String {
    match value {
        None => "_none_".to_owned(),
        Some(v) if v.is_empty() => "_empty_".to_owned(),
        Some(v) => md_code(&v.replace('\n', "\\n")).replace('|', "\\|"),
    }
}

/// A code span that survives backticks in `text`.
fn md_code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// The largest comment GitHub accepts is 65536 characters; stay well below.
const MARKDOWN_LIMIT: usize = 60_000;
/// Groups with at most this many assignments name them on one line.
const MARKDOWN_INLINE: usize = 3;
/// Groups with more assignments than this list them in a collapsed block.
const MARKDOWN_COLLAPSE: usize = 10;

fn md_group(out: &mut String, group: &ChangeGroup<'_>) {
    let names: Vec<String> = group
        .assignments
        .iter()
        .map(|a| md_code(&a.to_string()))
        .collect();
    let bullets = || {
        names
            .iter()
            .map(|n| format!("- {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if names.len() <= MARKDOWN_INLINE {
        let _ = writeln!(out, "**{}**\n", names.join(", "));
    } else if names.len() <= MARKDOWN_COLLAPSE {
        let _ = writeln!(out, "**{} assignments**\n\n{}\n", names.len(), bullets());
    } else {
        let _ = writeln!(
            out,
            "**{} assignments**\n\n<details><summary>Assignments</summary>\n\n{}\n\n</details>\n",
            names.len(),
            bullets()
        );
    }
    let files: Vec<String> = group
        .files
        .iter()
        .map(|f| format!("{} {}", md_code(&f.file), f.change.as_str()))
        .collect();
    let _ = writeln!(out, "{}", files.join(", "));
    let keys: Vec<(&str, &KeyChange)> = group
        .files
        .iter()
        .flat_map(|f| f.keys.iter().map(move |k| (f.file.as_str(), k)))
        .collect();
    if !keys.is_empty() {
        let several_files = group.files.iter().filter(|f| !f.keys.is_empty()).count() > 1;
        out.push_str("\n| key | old | new |\n|---|---|---|\n");
        for (file, k) in keys {
            let key = if several_files {
                format!("{file}: {}", k.key)
            } else {
                k.key.clone()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                md_code(&key).replace('|', "\\|"),
                md_value(k.old.as_ref()),
                md_value(k.new.as_ref())
            );
        }
    }
    out.push('\n');
}

/// The plan as a pull-request comment (GitHub-flavoured Markdown).
fn plan_markdown(env: &str, promotion: Option<&Promotion>, plan: &Plan) -> String {
    let mut out = format!("### kalypso plan: {}\n\n", md_title(env, promotion));
    if plan.is_empty() {
        out.push_str("No changes: the GitOps tree is up to date.\n");
        return out;
    }
    let c = &plan.counts;
    let _ = writeln!(
        out,
        "| | added | removed | moved | changed | unchanged |\n|---|---:|---:|---:|---:|---:|\n| **assignments** | {} | {} | {} | {} | {} |\n",
        c.added, c.removed, c.moved, c.changed, c.unchanged
    );
    let _ = writeln!(
        out,
        "Files: {} added, {} modified, {} deleted.\n",
        c.files_added, c.files_modified, c.files_deleted
    );
    if let Some(p) = &plan.promoted_commit {
        let _ = writeln!(
            out,
            "Promoted commit: {} → {}\n",
            md_value(p.old.as_ref()),
            md_value(p.new.as_ref())
        );
    }
    if !plan.cluster_types.added.is_empty() || !plan.cluster_types.removed.is_empty() {
        out.push_str("#### Cluster types\n\n");
        for ct in &plan.cluster_types.added {
            let _ = writeln!(out, "- {} added", md_code(ct));
        }
        for ct in &plan.cluster_types.removed {
            let _ = writeln!(out, "- {} removed", md_code(ct));
        }
        out.push('\n');
    }
    for (heading, list) in [("Added", &plan.added), ("Removed", &plan.removed)] {
        if !list.is_empty() {
            let _ = writeln!(out, "#### {heading} ({})\n", list.len());
            for a in list {
                let _ = writeln!(out, "- {}", md_code(&a.to_string()));
            }
            out.push('\n');
        }
    }
    if !plan.moved.is_empty() {
        let _ = writeln!(out, "#### Moved ({})\n", plan.moved.len());
        for m in &plan.moved {
            let list = |cts: &[String]| cts.iter().map(|c| md_code(c)).collect::<Vec<_>>().join(", ");
            let _ = writeln!(
                out,
                "- {}: {} → {}",
                md_code(&m.deployment_target),
                list(&m.from),
                list(&m.to)
            );
        }
        out.push('\n');
    }
    if !plan.changed.is_empty() {
        let _ = writeln!(out, "#### Changed ({})\n", plan.changed.len());
        for group in plan.groups() {
            md_group(&mut out, &group);
        }
    }
    let other: Vec<_> = plan.other_unexplained().collect();
    if !other.is_empty() {
        out.push_str("#### Other files\n\n");
        for p in other {
            let _ = writeln!(out, "- {} {}", md_code(&p.path), p.change.as_str());
        }
        out.push('\n');
    }
    truncate_markdown(out)
}

fn md_title(env: &str, promotion: Option<&Promotion>) -> String {
    match promotion {
        None => md_code(env),
        Some(Promotion {
            environment,
            commit: Some(commit),
        }) => format!(
            "{}, promoting {} from {}",
            md_code(env),
            md_code(short(commit)),
            md_code(environment)
        ),
        Some(Promotion { environment, .. }) => {
            format!("{}, promoting main from {}", md_code(env), md_code(environment))
        }
    }
}

/// Cuts a comment that GitHub would refuse, at a line break, and says so.
fn truncate_markdown(mut out: String) -> String {
    if out.len() <= MARKDOWN_LIMIT {
        return out;
    }
    let mut cut = MARKDOWN_LIMIT;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = out[..cut].rfind('\n').map_or(cut, |i| i + 1);
    out.truncate(cut);
    out.push_str(
        "\n_The plan is too long for a comment and was cut here; run `kalypso plan` (or `--output json`) for all of it._\n",
    );
    out
}

/// A unified diff of every changed file, in path order, in git's format: `git apply` in a
/// checkout of the current tree turns it into the new one.
pub(super) fn unified_diff(old: &Tree, new: &Tree, changes: &[(String, Change)], color: bool) -> String {
    let paint = |code: &str, line: &str| {
        if color {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_owned()
        }
    };
    let mut out = String::new();
    for (path, change) in changes {
        let before = old.get(path).map(|b| &b[..]).unwrap_or_default();
        let after = new.get(path).map(|b| &b[..]).unwrap_or_default();
        let _ = writeln!(out, "{}", paint("1", &format!("diff --git a/{path} b/{path}")));
        match change {
            Change::Added => {
                let _ = writeln!(out, "{}", paint("1", "new file mode 100644"));
            }
            Change::Deleted => {
                let _ = writeln!(out, "{}", paint("1", "deleted file mode 100644"));
            }
            Change::Modified => {}
        }
        let (Ok(before), Ok(after)) = (std::str::from_utf8(before), std::str::from_utf8(after)) else {
            let _ = writeln!(out, "Binary files a/{path} and b/{path} differ");
            continue;
        };
        if before.is_empty() && after.is_empty() {
            continue;
        }
        let (a, b) = match change {
            Change::Added => ("/dev/null".to_owned(), format!("b/{path}")),
            Change::Deleted => (format!("a/{path}"), "/dev/null".to_owned()),
            Change::Modified => (format!("a/{path}"), format!("b/{path}")),
        };
        let text = similar::TextDiff::from_lines(before, after);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_core::tree::diff;

    fn tree(files: &[(&str, &str)]) -> Tree {
        Tree::of_texts(files)
    }

    #[test]
    fn markdown_values_survive_pipes_backticks_and_newlines() {
        assert_eq!(md_value(Some(&"a|b".to_owned())), "`a\\|b`");
        assert_eq!(md_value(Some(&"a`b".to_owned())), "`` a`b ``");
        assert_eq!(md_value(Some(&"a\nb".to_owned())), "`a\\nb`");
        assert_eq!(md_value(Some(&String::new())), "_empty_");
        assert_eq!(md_value(None), "_none_");
    }

    #[test]
    fn long_markdown_is_cut_at_a_line() {
        let long = "line\n".repeat(MARKDOWN_LIMIT);
        let cut = truncate_markdown(long);
        assert!(cut.len() < MARKDOWN_LIMIT + 200);
        assert!(cut.ends_with("for all of it._\n"));
        assert!(cut.contains("line\n\n_The plan"));
    }

    #[test]
    fn multiline_values_are_shown_as_blocks() {
        let mut out = String::new();
        key_lines(
            &mut out,
            &KeyChange {
                key: "LOGGING".into(),
                old: Some("level: info\n".into()),
                new: None,
            },
            "  ",
        );
        assert_eq!(
            out,
            "  - LOGGING:\n      old: |\n        level: info\n      new: (none)\n"
        );
    }

    #[test]
    fn diff_marks_new_deleted_and_empty_files() {
        let old = tree(&[("a/x", "1\n"), ("gone", "g")]);
        let new = tree(&[("a/x", "2\n"), ("empty", "")]);
        let changes = diff(&old, &new);
        let text = unified_diff(&old, &new, &changes, false);
        assert_eq!(
            text,
            "diff --git a/a/x b/a/x\n--- a/a/x\n+++ b/a/x\n@@ -1 +1 @@\n-1\n+2\n\
             diff --git a/empty b/empty\nnew file mode 100644\n\
             diff --git a/gone b/gone\ndeleted file mode 100644\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-g\n\\ No newline at end of file\n"
        );
        assert!(unified_diff(&old, &new, &changes, true).contains("\x1b[32m+2\x1b[0m"));
    }
}
