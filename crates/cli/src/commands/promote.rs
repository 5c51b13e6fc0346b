//! `kalypso promote`: pin a main-branch commit on an environment branch (its BaseRepo
//! `main`'s `spec.commit`, in `base-repo.yaml`), which makes the next sync deliver that
//! commit's templates and registrations to the environment.
//!
//! `--from ENV` promotes what ENV runs: the control-plane commit its GitOps branch was
//! rendered from. With `--hub`, the hub's gate must say that every cluster of ENV runs that
//! GitOps commit and that every requirement of the target environment (its PromotionPolicy's
//! soak, approvals, windows and verification, and its freezes) is met, or nothing is promoted
//! (`--override-gate REASON` goes ahead anyway and is recorded as an override). The hub is
//! told of the promotion, for its audit log.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use kalypso_git::control_plane::short;
use kalypso_git::promote::{self, Promotion, Request};
use kalypso_git::repo::Transport;
use kalypso_git::{Cache, RepoUrl, redact};
use kalypso_hub_api::ClusterState;

use kalypso_hub_api::PromotionReport;

use crate::hub_client::{HubClient, Verdict};
use crate::settings::{Global, HubAccess, Promote, PromoteFrom, PromotedCommit};

pub(crate) fn promote(settings: &Promote, global: &Global) -> Result<ExitCode> {
    let url = &settings.control_plane.url;
    let credentials = kalypso_git::auth::Credentials::load(&settings.git.auth).map_err(|e| anyhow!("{e}"))?;
    let transport = Transport::new(&credentials, settings.git.retry);
    let cache = Cache::new(settings.git.cache_dir());
    let mut checked = None;
    let commit = match &settings.commit {
        PromotedCommit::From(from) => {
            let (commit, unmet) = promoted_by(settings, from, url, &cache, &transport, global)?;
            checked = Some((from, commit.clone(), unmet));
            Some(commit)
        }
        PromotedCommit::Given(commit) => commit.clone(),
    };
    let request = Request {
        environment: settings.env.clone(),
        commit,
        author: settings.author.clone(),
        message: settings.message.clone(),
    };
    let result = promote::promote(url, &settings.git.main_branch, &cache, &transport, &request)
        .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    if let (Some((from, commit, unmet)), Promotion::Promoted { .. }) = (&checked, &result)
        && let Some(hub) = &from.hub
    {
        report(settings, hub, &from.env, commit, unmet);
    }
    if !global.quiet {
        match result {
            Promotion::AlreadyPromoted { commit, file } => println!(
                "{}: already at {} ({file}); nothing to do",
                settings.env,
                short(&commit.to_string())
            ),
            Promotion::Promoted {
                commit,
                file,
                head,
                previous,
            } => println!(
                "{}: promoted {}{} in {file}; commit {} on the environment branch of {url}",
                settings.env,
                short(&commit.to_string()),
                previous
                    .map(|p| format!(" (was {})", short(&p)))
                    .unwrap_or_default(),
                short(&head.to_string()),
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Tells the hub of the promotion (a warning when it cannot be told: the promotion is done).
fn report(settings: &Promote, hub: &HubAccess, from: &str, commit: &str, unmet: &[String]) {
    let body = PromotionReport {
        environment: settings.env.clone(),
        from: Some(from.to_owned()),
        commit: commit.to_owned(),
        message: None,
        override_reason: settings.override_gate.clone(),
        unmet: if settings.override_gate.is_some() {
            unmet.to_vec()
        } else {
            Vec::new()
        },
    };
    let told = HubClient::new(&hub.url, hub.token_file.as_deref()).and_then(|c| {
        c.post::<_, serde_json::Value>("/api/v1/promotions", &body)
            .map_err(|e| anyhow!("{e}"))
    });
    if let Err(e) = told {
        eprintln!("warning: the hub was not told of the promotion (its audit log misses it): {e}");
    }
}

/// The control-plane commit environment `from` delivered, checked against the hub when one
/// is given, and the requirements not met that `--override-gate` passed over.
fn promoted_by(
    settings: &Promote,
    source: &PromoteFrom,
    url: &RepoUrl,
    cache: &Cache,
    transport: &Transport<'_>,
    global: &Global,
) -> Result<(String, Vec<String>)> {
    let from = source.env.as_str();
    let delivered = promote::delivered(
        url,
        &settings.git.main_branch,
        cache,
        transport,
        from,
        source.gitops_repo.as_ref(),
    )
    .map_err(|e| anyhow!("{}", redact(&e.to_string())))?;
    let gitops_commit = delivered.gitops_commit.to_string();
    let promoted = delivered.promoted.clone().ok_or_else(|| {
        anyhow!(
            "GitOps commit {} of {} (branch {}) carries no {}: nothing tells which control-plane commit {from} runs",
            short(&gitops_commit),
            delivered.gitops_repo,
            delivered.branch,
            kalypso_core::tree::PROMOTED_COMMIT_PATH
        )
    })?;
    // A progressive rollout that has not reached every wave: the environment does not run
    // the commit everywhere, whatever its clusters report.
    if let Some(rollout) = &delivered.rollout
        && rollout.status != kalypso_core::rollout::Status::Complete
    {
        anyhow::bail!(
            "refusing to promote {} from {from}: its rollout of environment commit {} is {} ({} of {} waves delivered){}; nothing was pushed",
            short(&promoted),
            short(&rollout.change.environment),
            rollout.status.as_str(),
            rollout.delivered,
            rollout.waves.len(),
            rollout
                .failure
                .as_ref()
                .map(|f| format!(": {}", redact(f)))
                .unwrap_or_default()
        );
    }
    let mut compliance = String::new();
    if let Some(hub) = &source.hub {
        let client = HubClient::new(&hub.url, hub.token_file.as_deref())?;
        let refuse = |why: String| {
            anyhow!(
                "refusing to promote {} from {from} to {}: {why}; nothing was pushed",
                short(&promoted),
                settings.env
            )
        };
        let gate = client
            .gate(from, &gitops_commit, Some(&settings.env))
            .map_err(|e| refuse(e.to_string()))?;
        if let Some(promotion) = gate
            .promotion
            .as_ref()
            .filter(|_| gate.verdict != Verdict::UnknownCommit)
        {
            if promotion.may_promote {
                compliance = format!(
                    "; may be promoted into {}: {}",
                    settings.env,
                    super::check_promote::summaries(promotion, false).join(", ")
                );
            } else {
                let unmet = super::check_promote::summaries(promotion, true);
                match &settings.override_gate {
                    None => {
                        return Err(refuse(format!(
                            "{} may not be promoted into {}: {}",
                            from,
                            settings.env,
                            unmet.join("; ")
                        )));
                    }
                    Some(reason) => {
                        eprintln!(
                            "warning: overriding the gate ({reason}): {} may not be promoted into {}: {}",
                            from,
                            settings.env,
                            unmet.join("; ")
                        );
                        print_source(global, from, &gitops_commit, &delivered.branch, &promoted, "");
                        return Ok((promoted, unmet));
                    }
                }
            }
            print_source(
                global,
                from,
                &gitops_commit,
                &delivered.branch,
                &promoted,
                &compliance,
            );
            return Ok((promoted, Vec::new()));
        }
        match gate.verdict {
            Verdict::Compliant => {
                compliance = format!(", compliant on {}/{} clusters", gate.compliant, gate.total);
            }
            Verdict::Failed => {
                let failed: Vec<String> = gate
                    .clusters
                    .iter()
                    .filter(|c| c.state == ClusterState::Failed)
                    .map(|c| format!("{} ({})", c.name, c.message().unwrap_or("no message")))
                    .collect();
                return Err(refuse(format!(
                    "clusters of {from} failed to apply GitOps commit {}: {}",
                    short(&gitops_commit),
                    failed.join("; ")
                )));
            }
            Verdict::UnknownCommit => {
                return Err(refuse(format!(
                    "the hub does not know GitOps commit {} of {from}",
                    short(&gitops_commit)
                )));
            }
            // Pending, or a verdict this kalypso does not know yet: not compliant.
            Verdict::Pending | _ => {
                let waiting: Vec<&str> = gate
                    .clusters
                    .iter()
                    .filter(|c| c.state != ClusterState::Compliant)
                    .map(|c| c.name.as_str())
                    .collect();
                let more = crate::hub_client::unlisted_blockers(&gate);
                return Err(refuse(format!(
                    "{from} is not compliant with GitOps commit {} yet ({}/{} clusters; waiting for {}{})",
                    short(&gitops_commit),
                    gate.compliant,
                    gate.total,
                    waiting.join(", "),
                    if more > 0 && !waiting.is_empty() {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )));
            }
        }
    }
    print_source(
        global,
        from,
        &gitops_commit,
        &delivered.branch,
        &promoted,
        &compliance,
    );
    Ok((promoted, Vec::new()))
}

fn print_source(
    global: &Global,
    from: &str,
    gitops_commit: &str,
    branch: &str,
    promoted: &str,
    compliance: &str,
) {
    if !global.quiet {
        println!(
            "{from}: GitOps commit {} of {branch} carries control-plane commit {}{compliance}",
            short(gitops_commit),
            short(promoted)
        );
    }
}
