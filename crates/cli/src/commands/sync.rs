//! `kalypso sync`: one delivery pass from a control plane in git to the GitOps
//! repositories, as commits (`push` mode) or pull requests (`pr` mode), with progress on a
//! terminal; and the async runtime and the logs of the other commands.

use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use kalypso_git::sync::TargetReport;
use kalypso_git::{Delivery, EnvReport, Outcome, Settings, Syncer, redact};

use crate::args::LogFormat;
use crate::progress::Progress;
use crate::settings::{self, Global};

/// A multi-threaded runtime: GitHub calls block on it from the syncing thread.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Logs (retries, warnings) go to standard error, as text unless `--log-format json`.
pub(crate) fn init_logs(global: &Global) {
    let level = if global.quiet { "error" } else { "warn" };
    let format = global.log_format(LogFormat::Text);
    // Already installed when a test runs several commands in one process: keep that one.
    let _ = crate::terminal::init_logs(format, level, global.color);
}

pub(crate) fn sync(args: &settings::Sync, global: &Global) -> Result<ExitCode> {
    let url = &args.control_plane.url;
    let settings = Settings {
        cache_dir: args.git.cache_dir(),
        auth: args.git.auth.clone(),
        retry: args.git.retry,
        main_branch: args.git.main_branch.clone(),
        delivery: args.delivery.clone(),
        gitops_repo: args.gitops_repo.clone(),
        ..Settings::default()
    };
    let runtime = runtime()?;
    // One sync at a time per cache; locks a killed sync left in it are removed.
    let _hold = kalypso_git::Cache::new(&settings.cache_dir)
        .hold()
        .map_err(|e| anyhow!("{e}"))?;
    let syncer = Syncer::new(settings, runtime.handle().clone()).map_err(|e| anyhow!("{e}"))?;
    // On a terminal, after a second: which environment, and which step (the fetches and
    // pushes within a step are named by the log subscriber's progress layer).
    let progress = Progress::start(global.quiet);
    // Environments whose inputs and GitOps branches did not move since their last delivery
    // are answered from the delivery state and one branch listing per repository.
    progress.stage("checking which branches moved");
    let started = std::time::Instant::now();
    let check = syncer.check(url, &args.environments);
    let mut ok = true;
    let mut json = Vec::new();
    let report_unchanged = |u: &kalypso_git::Unchanged, json: &mut Vec<serde_json::Value>| {
        if args.json {
            json.push(unchanged_json(u, started.elapsed()));
        } else if !global.quiet {
            print_unchanged(u, args.verbose, started.elapsed());
        }
    };
    if check.complete {
        progress.finish();
        for u in &check.unchanged {
            report_unchanged(u, &mut json);
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    progress.stage("fetching the control plane");
    // A damaged mirror (broken reference, lost or garbled objects) is removed and fetched
    // afresh, once per run, with a warning.
    let mut repaired = false;
    let open = |check: &kalypso_git::Check| {
        let pass = syncer.pass_after(url, check)?;
        let environments = pass.environments(&args.environments)?;
        Ok::<_, kalypso_git::sync::Error>((pass, environments))
    };
    let (mut pass, environments) = match open(&check) {
        Err(e) if e.is_cache_damage() => {
            repaired = true;
            progress.suspend(|| {
                syncer.repair_cache();
            });
            open(&kalypso_git::Check::default())
        }
        other => other,
    }
    .map_err(|e| anyhow!("{e}"))?;
    let total = environments.len();
    for (i, env) in environments.iter().enumerate() {
        if let Some(u) = check.unchanged(&env.name) {
            progress.suspend(|| report_unchanged(u, &mut json));
            continue;
        }
        let subject = format!("{} ({}/{total})", env.name, i + 1);
        let started = std::time::Instant::now();
        progress.stage_of(subject.clone(), "reading the inputs", None);
        let mut result = pass.resolve(env).and_then(|resolved| {
            progress.stage_of(subject.clone(), "rendering", Some("writing the tree"));
            pass.deliver(&resolved)
        });
        if let Err(e) = &result
            && e.is_cache_damage()
            && !repaired
        {
            repaired = true;
            progress.suspend(|| {
                syncer.repair_cache();
            });
            pass = syncer.pass(url).map_err(|e| anyhow!("{e}"))?;
            result = pass.resolve(env).and_then(|resolved| {
                progress.stage_of(subject, "rendering", Some("writing the tree"));
                pass.deliver(&resolved)
            });
        }
        progress.suspend(|| match result {
            Ok(report) => {
                let elapsed = started.elapsed();
                for d in report
                    .diagnostics
                    .iter()
                    .filter(|d| d.is_error() || !global.quiet)
                {
                    eprintln!("{}", redact(&d.to_string()));
                }
                ok &= report.is_success();
                if args.json {
                    let mut value = report_json(&report);
                    if let Some(v) = value.as_object_mut() {
                        v.insert("seconds".into(), serde_json::json!(elapsed.as_secs_f64()));
                    }
                    json.push(value);
                } else {
                    print_report(&report, global, args.verbose, elapsed);
                }
            }
            Err(e) => {
                ok = false;
                let message = redact(&e.to_string());
                eprintln!("error: {message}");
                if args.json {
                    json.push(
                        serde_json::json!({"environment": env.name, "result": "error", "error": message}),
                    );
                }
            }
        });
    }
    progress.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn short7(commit: &impl std::fmt::Display) -> String {
    commit.to_string().chars().take(7).collect()
}

/// The one-line summary of a delivery, after `<environment>: `.
fn describe_target(t: &TargetReport, elapsed: std::time::Duration) -> String {
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
    }
}

/// `dev: no input moved, platform-gitops@dev stays at 1a2b3c4 (0.1 s)`.
fn print_unchanged(u: &kalypso_git::Unchanged, verbose: bool, elapsed: std::time::Duration) {
    for t in &u.targets {
        let place = format!("{}@{}", t.name, t.branch);
        let at = match &t.delivery {
            Delivery::UpToDate { head: Some(h), .. } => format!("stays at {}", short7(h)),
            _ => "stays empty".to_owned(),
        };
        println!(
            "{}: no input moved, {place} {at} ({:.1} s)",
            u.environment,
            elapsed.as_secs_f64()
        );
    }
    if verbose {
        println!(
            "{}: {} assignment(s) from {}",
            u.environment, u.assignments, u.revisions
        );
    }
}

fn unchanged_json(u: &kalypso_git::Unchanged, elapsed: std::time::Duration) -> serde_json::Value {
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

fn print_report(report: &EnvReport, global: &Global, verbose: bool, elapsed: std::time::Duration) {
    match &report.outcome {
        Outcome::Delivered(targets) => {
            if !report.isolated.is_empty() {
                eprintln!(
                    "error: environment {}: the workloads of {} failed; their folders keep what was last delivered",
                    report.environment,
                    report
                        .isolated
                        .iter()
                        .map(|r| format!("{r:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            if global.quiet {
                return;
            }
            for t in targets {
                println!("{}: {}", report.environment, describe_target(t, elapsed));
            }
            if verbose {
                println!(
                    "{}: {} assignment(s) from {}",
                    report.environment, report.assignments, report.revisions
                );
            }
        }
        Outcome::Failed { failures, issues } => {
            eprintln!(
                "error: environment {} has {} failure(s); nothing was delivered",
                report.environment,
                failures.len()
            );
            if let Some(issues) = issues {
                eprintln!(
                    "{}: issues opened {}, updated {}, closed {}",
                    report.environment,
                    numbers(&issues.created),
                    numbers(&issues.updated),
                    numbers(&issues.closed)
                );
            }
        }
    }
}

fn report_json(report: &EnvReport) -> serde_json::Value {
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
            "revisions": revisions,
            "isolated": report.isolated,
            "isolatedFailures": report.isolated_failures.iter().map(|f| json!({
                "title": f.title(&report.environment),
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
                };
                if let (Some(v), Some(d)) = (v.as_object_mut(), d.as_object()) {
                    v.extend(d.clone());
                }
                v
            }).collect::<Vec<_>>(),
        }),
        Outcome::Failed { failures, issues } => json!({
            "environment": report.environment,
            "result": "failed",
            "assignments": report.assignments,
            "revisions": revisions,
            "failures": failures.iter().map(|f| json!({
                "title": f.title(&report.environment),
                "message": redact(&f.message),
            })).collect::<Vec<_>>(),
            "issues": issues.as_ref().map(|i| json!({"created": i.created, "updated": i.updated, "closed": i.closed})),
        }),
    }
}
