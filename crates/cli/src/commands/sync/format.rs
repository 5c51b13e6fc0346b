//! How `sync` shows a delivery: a line per environment and GitOps repository for people
//! (`dev: 14 files changed in 1 cluster type, commit 7df587b pushed to dev@dev in 0.2 s`),
//! JSON for machines. Pure: reports in, strings and values out; printing is the command's.

use std::time::Duration;

use kalypso_git::sync::TargetReport;
use kalypso_git::{Delivery, EnvReport, Outcome, redact};

fn short7(commit: &impl std::fmt::Display) -> String {
    commit.to_string().chars().take(7).collect()
}

/// The one-line summary of a delivery, after `<environment>: `.
fn describe_target(t: &TargetReport, elapsed: Duration) -> String {
    let place = format!("{}@{}", t.name, t.branch);
    let took = format!("in {:.1} s", elapsed.as_secs_f64());
    match &t.delivery {
        Delivery::UpToDate { head, closed } => {
            let mut s = match head {
                Some(h) => format!("no change, {place} stays at {} ({took})", short7(h)),
                None => format!("no change, {place} stays empty ({took})"),
            };
            if !closed.is_empty() {
                s.push_str(&format!("; closed stale pull requests {}", numbers(closed)));
            }
            s
        }
        Delivery::Committed { commit, changes } => {
            format!(
                "{}, commit {} pushed to {place} {took}",
                changes.summary(),
                short7(commit)
            )
        }
        Delivery::PullRequest {
            number,
            url,
            branch,
            commit,
            created,
            promoted,
            changes,
            closed,
        } => {
            let mut s = format!(
                "{}, pull request #{number} {} for {place} {took}: {url} (branch {branch}, commit {}){}",
                changes.summary(),
                if *created { "opened" } else { "already open" },
                short7(commit),
                if *promoted { " [promoted]" } else { "" },
            );
            if !closed.is_empty() {
                s.push_str(&format!("; superseded {}", numbers(closed)));
            }
            s
        }
        Delivery::DryRun { mode, changes } => {
            format!(
                "dry run: {} for {place} in {mode} mode ({took}); nothing written",
                changes.summary()
            )
        }
        Delivery::Artifacts(report) => describe_artifacts(report, &place, &took),
    }
}

/// `sha256:0123456789ab`: a digest as a line shows it.
fn short_digest(digest: &kalypso_git::oci::Report) -> String {
    digest
        .index
        .as_ref()
        .map(|d| format!("sha256:{}", &d.hex()[..12]))
        .unwrap_or_else(|| "(none)".to_owned())
}

/// The summary of an OCI delivery: the artifacts pushed, unchanged and retired, the index.
fn describe_artifacts(report: &kalypso_git::oci::Report, place: &str, took: &str) -> String {
    let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let retired = if report.retired.is_empty() {
        String::new()
    } else {
        format!(
            "; no longer in the environment, left as they are: {}",
            report.retired.join(", ")
        )
    };
    if !report.changed {
        return format!(
            "no change, {place} stays at index {} ({})",
            short_digest(report),
            took.trim_start_matches("in ")
        );
    }
    let new = report.pushed.iter().filter(|p| p.new).count();
    let pushed = plural(report.pushed.len(), "artifact", "artifacts");
    let unchanged = format!("{} unchanged", report.unchanged);
    let new = if new > 0 {
        format!(" ({new} new)")
    } else {
        String::new()
    };
    if report.dry_run {
        return format!(
            "dry run: {pushed}{new} would be pushed to {place} ({}), {unchanged} ({took}); nothing written{retired}",
            report.location
        );
    }
    format!(
        "{pushed}{new} pushed to {place} ({}), {unchanged}, index {} {took}{retired}",
        report.location,
        short_digest(report)
    )
}

/// The JSON of an OCI delivery.
fn artifacts_json(report: &kalypso_git::oci::Report) -> serde_json::Value {
    serde_json::json!({
        "result": if report.dry_run { "dry_run" } else if report.changed { "pushed" } else { "up_to_date" },
        "index": report.index.as_ref().map(ToString::to_string),
        "pushed": report.pushed.iter().map(|p| serde_json::json!({
            "clusterType": p.cluster_type, "manifest": p.manifest.to_string(), "layerSize": p.layer_size,
            "files": p.files, "new": p.new,
        })).collect::<Vec<_>>(),
        "unchanged": report.unchanged,
        "retired": report.retired,
        "blobsUploaded": report.blobs_uploaded,
        "bytesUploaded": report.bytes_uploaded,
    })
}

/// `dev: no input moved, platform-gitops@dev stays at 1a2b3c4 (0.1 s)`, one line per GitOps
/// repository, and with `verbose` the input commits.
pub(super) fn unchanged_lines(u: &kalypso_git::Unchanged, verbose: bool, elapsed: Duration) -> Vec<String> {
    let mut lines: Vec<String> = u
        .targets
        .iter()
        .map(|t| {
            let place = format!("{}@{}", t.name, t.branch);
            let at = match &t.delivery {
                Delivery::UpToDate { head: Some(h), .. } => format!("stays at {}", short7(h)),
                Delivery::Artifacts(report) => format!("stays at index {}", short_digest(report)),
                _ => "stays empty".to_owned(),
            };
            format!(
                "{}: no input moved, {place} {at} ({:.1} s)",
                u.environment,
                elapsed.as_secs_f64()
            )
        })
        .collect();
    if verbose {
        lines.push(format!(
            "{}: {} assignment(s) from {}",
            u.environment, u.assignments, u.revisions
        ));
    }
    lines
}

pub(super) fn unchanged_json(u: &kalypso_git::Unchanged, elapsed: Duration) -> serde_json::Value {
    use serde_json::json;
    json!({
        "environment": u.environment,
        "result": "unchanged",
        "assignments": u.assignments,
        "revisions": {
            "main": u.revisions.main,
            "environment": u.revisions.environment,
            "workloads": u.revisions.workloads,
        },
        "targets": u.targets.iter().map(|t| {
            let head = match &t.delivery {
                Delivery::UpToDate { head, .. } => head.map(|h| h.to_string()),
                Delivery::Artifacts(report) => report.index.as_ref().map(ToString::to_string),
                _ => None,
            };
            json!({"gitopsRepo": t.name, "repo": t.repo, "branch": t.branch, "result": "up_to_date", "head": head})
        }).collect::<Vec<_>>(),
        "seconds": elapsed.as_secs_f64(),
    })
}

fn numbers(n: &[u64]) -> String {
    n.iter().map(|n| format!("#{n}")).collect::<Vec<_>>().join(", ")
}

/// What a delivery report shows: the lines for standard output and for standard error.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ReportLines {
    /// The summary (nothing with `quiet`).
    pub out: Vec<String>,
    /// Failures, also with `quiet`.
    pub errors: Vec<String>,
}

/// The lines of a delivery report: one summary per GitOps repository, with `verbose` the
/// input commits; failures and isolated registrations as errors.
pub(super) fn report_lines(report: &EnvReport, quiet: bool, verbose: bool, elapsed: Duration) -> ReportLines {
    let mut lines = ReportLines::default();
    match &report.outcome {
        Outcome::Delivered(targets) => {
            if !report.isolated.is_empty() {
                lines.errors.push(format!(
                    "error: environment {}: the workloads of {} failed; their folders keep what was last delivered",
                    report.environment,
                    report
                        .isolated
                        .iter()
                        .map(|r| format!("{r:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if quiet {
                return lines;
            }
            for t in targets {
                lines
                    .out
                    .push(format!("{}: {}", report.environment, describe_target(t, elapsed)));
            }
            if verbose {
                lines.out.push(format!(
                    "{}: {} assignment(s), {} rendered (the others unchanged since the last delivery), from {}",
                    report.environment, report.assignments, report.rendered, report.revisions
                ));
            }
        }
        Outcome::Failed { failures, issues } => {
            if let Some(held) = report.mass_deletion.as_ref().filter(|m| m.held) {
                lines.errors.push(format!(
                    "error: environment {}: delivery held, it would remove {} of {} deployment-target folders; nothing was delivered",
                    report.environment,
                    held.removed.len(),
                    held.total
                ));
            } else {
                lines.errors.push(format!(
                    "error: environment {} has {} failure(s); nothing was delivered",
                    report.environment,
                    failures.len()
                ));
            }
            if let Some(issues) = issues {
                lines.errors.push(format!(
                    "{}: issues opened {}, updated {}, closed {}",
                    report.environment,
                    numbers(&issues.created),
                    numbers(&issues.updated),
                    numbers(&issues.closed)
                ));
            }
        }
    }
    lines
}

pub(super) fn report_json(report: &EnvReport) -> serde_json::Value {
    use serde_json::json;
    let revisions = json!({
        "main": report.revisions.main,
        "environment": report.revisions.environment,
        "workloads": report.revisions.workloads,
    });
    match &report.outcome {
        Outcome::Delivered(targets) => json!({
            "environment": report.environment,
            "result": "delivered",
            "assignments": report.assignments,
            "rendered": report.rendered,
            "revisions": revisions,
            "isolated": report.isolated,
            "isolatedFailures": report.isolated_failures.iter().map(|f| json!({
                "title": kalypso_git::issues::title(f, &report.environment),
                "message": redact(&f.message),
            })).collect::<Vec<_>>(),
            "targets": targets.iter().map(|t| {
                let mut v = json!({"gitopsRepo": t.name, "repo": t.repo, "branch": t.branch});
                let d = match &t.delivery {
                    Delivery::UpToDate { head, closed } => json!({"result": "up_to_date", "head": head.map(|h| h.to_string()), "closed": closed}),
                    Delivery::Committed { commit, changes } => json!({"result": "committed", "commit": commit.to_string(), "added": changes.added, "changed": changes.modified, "deleted": changes.deleted, "clusterTypes": changes.cluster_types}),
                    Delivery::PullRequest { number, url, branch, commit, created, promoted, changes, closed } => json!({
                        "result": "pull_request", "number": number, "url": url, "branch": branch, "commit": commit.to_string(),
                        "created": created, "promoted": promoted, "added": changes.added, "changed": changes.modified, "deleted": changes.deleted, "closed": closed,
                    }),
                    Delivery::DryRun { mode, changes } => json!({"result": "dry_run", "mode": mode.to_string(), "added": changes.added, "changed": changes.modified, "deleted": changes.deleted}),
                    Delivery::Artifacts(report) => artifacts_json(report),
                };
                if let (Some(v), Some(d)) = (v.as_object_mut(), d.as_object()) {
                    v.extend(d.clone());
                }
                v
            }).collect::<Vec<_>>(),
        }),
        Outcome::Failed { failures, issues } => json!({
            "environment": report.environment,
            "result": if report.is_held() { "held" } else { "failed" },
            "assignments": report.assignments,
            "revisions": revisions,
            "failures": failures.iter().map(|f| json!({
                "title": kalypso_git::issues::title(f, &report.environment),
                "message": redact(&f.message),
            })).collect::<Vec<_>>(),
            "issues": issues.as_ref().map(|i| json!({"created": i.created, "updated": i.updated, "closed": i.closed})),
        }),
    }
}

/// A rollout's report as JSON: the state on the branch after the run, and what happened.
pub(super) fn rollout_json(rollout: &kalypso_git::rollout::RolloutReport) -> serde_json::Value {
    serde_json::json!({
        "message": redact(&rollout.message),
        "delivered": rollout.delivered,
        "uncheckedClusterTypes": rollout.unchecked,
        "state": rollout.state,
        "issue": rollout.issue.as_ref().map(|i| serde_json::json!({
            "created": i.created, "updated": i.updated, "closed": i.closed,
        })),
    })
}
