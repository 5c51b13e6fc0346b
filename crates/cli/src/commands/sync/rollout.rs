//! `kalypso rollout status|pause|resume|abort`: an environment's progressive rollout read from
//! its GitOps branch, or steered there through the same delivery as `kalypso sync` (so that
//! every process that continues the rollout sees the same state).

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use kalypso_core::rollout::{RolloutState, Status, WaveHealth};
use kalypso_git::hub::{HubGate, now_ms};
use kalypso_git::rollout::{RolloutStatus, WaveGate};
use kalypso_git::{Settings, Syncer, redact};

use super::{format, runtime};
use crate::settings::{self, Global, RolloutAction};

pub(crate) fn rollout(args: &settings::Rollout, global: &Global) -> Result<ExitCode> {
    let sync = &args.sync;
    let url = &sync.control_plane.url;
    let settings = Settings {
        cache_dir: sync.git.cache_dir(),
        auth: sync.git.auth.clone(),
        retry: sync.git.retry,
        main_branch: sync.git.main_branch.clone(),
        delivery: sync.delivery.clone(),
        gitops_repo: sync.gitops_repo.clone(),
        registry: sync.registry.clone(),
        sprig: global.sprig,
        mass_deletion: sync.mass_deletion.clone(),
        ..Settings::default()
    };
    let runtime = runtime()?;
    // One sync (or rollout command) at a time per cache.
    let _hold = kalypso_git::Cache::new(&settings.cache_dir)
        .hold()
        .map_err(|e| anyhow!("{e}"))?;
    let syncer = Syncer::new(settings, runtime.handle().clone()).map_err(|e| anyhow!("{e}"))?;
    let mut pass = syncer.pass(url).map_err(|e| anyhow!("{e}"))?;
    let env = pass
        .environments(std::slice::from_ref(&args.env))
        .map_err(|e| anyhow!("{e}"))?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("environment {:?} is not defined on the main branch", args.env))?;
    match args.action {
        RolloutAction::Status => {
            let hub = match &sync.hub {
                Some(access) => Some(
                    HubGate::new(&access.url, access.token_file.as_deref())
                        .map_err(|e| anyhow!("--hub: {e}"))?,
                ),
                None => None,
            };
            let now = now_ms();
            let gate = hub.as_ref().map(|h| h as &dyn WaveGate);
            let status = pass
                .rollout_status(&env, gate, now)
                .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
            if sync.json {
                println!("{}", serde_json::to_string_pretty(&status_json(&status))?);
            } else {
                for line in status_lines(&status) {
                    println!("{line}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        RolloutAction::Control(control) => {
            let run = pass
                .control_rollout(&env, control)
                .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
            let mut ok = true;
            let mut json = serde_json::json!({"environment": env.name});
            if let Some(report) = &run.report {
                for d in report
                    .diagnostics
                    .iter()
                    .filter(|d| d.is_error() || !global.quiet)
                {
                    eprintln!("{}", redact(&d.to_string()));
                }
                ok &= report.is_success();
                if sync.json {
                    json = format::report_json(report);
                } else {
                    let lines = format::report_lines(report, global.quiet, false, std::time::Duration::ZERO);
                    for line in lines.errors {
                        eprintln!("{line}");
                    }
                    for line in lines.out {
                        println!("{line}");
                    }
                }
            }
            if let Some(rollout) = &run.rollout {
                if sync.json {
                    if let Some(v) = json.as_object_mut() {
                        v.insert("rollout".into(), format::rollout_json(rollout));
                    }
                } else if !global.quiet {
                    println!("{}: {}", rollout.environment, redact(&rollout.message));
                }
            }
            if sync.json {
                println!("{}", serde_json::to_string_pretty(&json)?);
            }
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Where wave `index` (0-based) of `state` is, in words.
fn wave_progress(state: &RolloutState, index: usize, health: Option<&WaveHealth>) -> String {
    if index >= state.delivered {
        return "waiting".to_owned();
    }
    let delivered = if state.status == Status::RolledBack {
        "rolled back"
    } else {
        "delivered"
    };
    match health {
        Some(h) => format!(
            "{delivered}; {}/{} cluster(s) compliant, {} failed",
            h.compliant,
            h.registered,
            h.failed_count.max(h.failed.len() as u64)
        ),
        None => delivered.to_owned(),
    }
}

fn status_lines(status: &RolloutStatus) -> Vec<String> {
    let mut lines = Vec::new();
    let Some(state) = &status.state else {
        lines.push(format!(
            "{}: RolloutPolicy {}: no rollout yet (the next sync starts one)",
            status.environment, status.policy
        ));
        return lines;
    };
    lines.push(format!(
        "{}: RolloutPolicy {}: the rollout of {} (main {}) is {}, {} of {} wave(s) delivered{}",
        status.environment,
        state.policy,
        short(&state.change.environment),
        short(&state.change.main),
        state.status.as_str(),
        state.delivered,
        state.waves.len(),
        status
            .wave_commit
            .as_deref()
            .map(|c| format!(" (last in GitOps commit {})", short(c)))
            .unwrap_or_default()
    ));
    for (i, wave) in state.waves.iter().enumerate() {
        let health = status.health.as_ref().and_then(|h| h.get(i));
        let types: Vec<&str> = wave.cluster_types.iter().map(String::as_str).collect();
        lines.push(format!(
            "  wave {}/{} {}: {}: {}",
            i + 1,
            state.waves.len(),
            wave.name,
            types.join(", "),
            wave_progress(state, i, health)
        ));
        if let Some(h) = health {
            for (cluster, ct, message) in &h.failed {
                lines.push(format!("    failed: {cluster} ({ct}): {}", redact(message)));
            }
        }
    }
    for ct in &status.unchecked {
        lines.push(format!(
            "  warning: cluster type {ct} of a delivered wave has no registered cluster; nothing checks it"
        ));
    }
    if let Some(failure) = &state.failure {
        lines.push(format!("  failure: {}", redact(failure)));
    }
    if status.newer_change {
        lines.push(
            "  the control plane holds a newer change: the next sync starts a new rollout of it (unless paused)"
                .to_owned(),
        );
    }
    lines.push(format!("  next: {}", redact(&status.next)));
    lines
}

fn status_json(status: &RolloutStatus) -> serde_json::Value {
    let waves: Vec<serde_json::Value> = status
        .state
        .iter()
        .flat_map(|state| {
            state.waves.iter().enumerate().map(|(i, wave)| {
                let health = status.health.as_ref().and_then(|h| h.get(i));
                serde_json::json!({
                    "name": wave.name,
                    "clusterTypes": wave.cluster_types,
                    "delivered": i < state.delivered,
                    "registered": health.map(|h| h.registered),
                    "compliant": health.map(|h| h.compliant),
                    "failedCount": health.map(|h| h.failed_count.max(h.failed.len() as u64)),
                    "failed": health.map(|h| h.failed.iter().map(|(cluster, ct, message)| serde_json::json!({
                        "cluster": cluster, "clusterType": ct, "message": redact(message),
                    })).collect::<Vec<_>>()),
                })
            })
        })
        .collect();
    serde_json::json!({
        "environment": status.environment,
        "policy": status.policy,
        "status": status.state.as_ref().map(|s| s.status.as_str()),
        "delivered": status.state.as_ref().map(|s| s.delivered),
        "change": status.state.as_ref().map(|s| &s.change),
        "waveCommit": status.wave_commit,
        "failure": status.state.as_ref().and_then(|s| s.failure.as_deref()).map(redact),
        "newerChange": status.newer_change,
        "uncheckedClusterTypes": status.unchecked,
        "waves": waves,
        "next": redact(&status.next),
    })
}
