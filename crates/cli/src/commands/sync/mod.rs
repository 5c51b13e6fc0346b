//! `kalypso sync`: one delivery pass from a control plane in git to the GitOps
//! repositories, as commits (`push` mode) or pull requests (`pr` mode), with progress on a
//! terminal; and the async runtime and the logs of the other commands.

use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use kalypso_git::hub::{HubGate, now_ms};
use kalypso_git::rollout::{RolloutRun, WaveGate};
use kalypso_git::{Settings, Syncer, redact};

use crate::progress::Progress;
use crate::settings::{self, Global};
use kalypso_server::config::LogFormat;

mod format;
mod rollout;

pub(crate) use rollout::rollout;

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
        registry: args.registry.clone(),
        sprig: global.sprig,
        mass_deletion: args.mass_deletion.clone(),
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
    // Every failure was a delivery held by the mass-deletion guard (exit code 3).
    let mut only_held = true;
    let mut json = Vec::new();
    let report_unchanged = |u: &kalypso_git::Unchanged, json: &mut Vec<serde_json::Value>| {
        if args.json {
            json.push(format::unchanged_json(u, started.elapsed()));
        } else if !global.quiet {
            for line in format::unchanged_lines(u, args.verbose, started.elapsed()) {
                println!("{line}");
            }
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
    let hub = match &args.hub {
        Some(access) => {
            Some(HubGate::new(&access.url, access.token_file.as_deref()).map_err(|e| anyhow!("--hub: {e}"))?)
        }
        None => None,
    };
    let total = environments.len();
    for (i, env) in environments.iter().enumerate() {
        if let Some(u) = check.unchanged(&env.name) {
            progress.suspend(|| report_unchanged(u, &mut json));
            continue;
        }
        let subject = format!("{} ({}/{total})", env.name, i + 1);
        let started = std::time::Instant::now();
        progress.stage_of(subject.clone(), "reading the inputs", None);
        let now = now_ms();
        let gate = hub.as_ref().map(|h| h as &dyn WaveGate);
        let mut result = pass.resolve(env).and_then(|resolved| {
            progress.stage_of(subject.clone(), "rendering", Some("writing the tree"));
            pass.deliver_rollout(&resolved, gate, now)
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
                pass.deliver_rollout(&resolved, gate, now)
            });
        }
        progress.suspend(|| match result {
            Ok(RolloutRun { report, rollout }) => {
                if let Some(rollout) = &rollout {
                    for ct in &rollout.unchecked {
                        eprintln!(
                            "warning: environment {}: cluster type {ct} of a delivered wave has no registered cluster; nothing checks it",
                            rollout.environment
                        );
                    }
                    if rollout.failed() {
                        // A failed rollout is not a held delivery: exit code 1, not 3.
                        ok = false;
                        only_held = false;
                        eprintln!("error: environment {}: {}", rollout.environment, redact(&rollout.message));
                        if let Some(issue) = &rollout.issue {
                            for number in issue.created.iter().chain(&issue.updated) {
                                eprintln!("environment {}: the failure is reported in issue #{number}", rollout.environment);
                            }
                        }
                    } else if !global.quiet && !args.json {
                        println!("{}: {}", rollout.environment, redact(&rollout.message));
                        for number in rollout.issue.iter().flat_map(|i| &i.closed) {
                            println!(
                                "{}: closed issue #{number} of an earlier failed rollout",
                                rollout.environment
                            );
                        }
                    }
                }
                let Some(report) = report else {
                    if args.json
                        && let Some(rollout) = &rollout
                    {
                        json.push(serde_json::json!({
                            "environment": env.name,
                            "result": if rollout.failed() { "rollout-failed" } else { "rollout-waiting" },
                            "rollout": format::rollout_json(rollout),
                        }));
                    }
                    return;
                };
                let elapsed = started.elapsed();
                for d in report
                    .diagnostics
                    .iter()
                    .filter(|d| d.is_error() || !global.quiet)
                {
                    eprintln!("{}", redact(&d.to_string()));
                }
                ok &= report.is_success();
                only_held &= report.is_success() || report.is_held();
                if args.json {
                    let mut value = format::report_json(&report);
                    if let Some(v) = value.as_object_mut() {
                        v.insert("seconds".into(), serde_json::json!(elapsed.as_secs_f64()));
                        if let Some(rollout) = &rollout {
                            v.insert("rollout".into(), format::rollout_json(rollout));
                        }
                    }
                    json.push(value);
                } else {
                    let lines = format::report_lines(&report, global.quiet, args.verbose, elapsed);
                    for line in lines.errors {
                        eprintln!("{line}");
                    }
                    for line in lines.out {
                        println!("{line}");
                    }
                }
            }
            Err(e) => {
                ok = false;
                only_held = false;
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
    Ok(if ok {
        ExitCode::SUCCESS
    } else if only_held {
        ExitCode::from(HELD)
    } else {
        ExitCode::FAILURE
    })
}

/// The exit code of a sync whose only failures are deliveries held by the mass-deletion
/// guard (a person decides; nothing is broken).
pub(crate) const HELD: u8 = 3;
