//! `kalypso approve`, `kalypso freeze` and `kalypso unfreeze`: the promotion flow's actions,
//! sent to the hub (which checks them, records who did what in its audit log and applies
//! them to its promotion gates). The identity is the one the hub gives the token.

use std::process::ExitCode;

use anyhow::{Result, anyhow};
use kalypso_git::control_plane::short;
use kalypso_hub_api::{
    ApprovalAnswer, ApprovalRequest, Freeze, FreezeRequest, UnfreezeAnswer, UnfreezeRequest,
};

use crate::hub_client::HubClient;
use crate::settings::{Action, Global, HubAction};

pub(crate) fn hub_action(settings: &HubAction, global: &Global) -> Result<ExitCode> {
    let client = HubClient::new(&settings.hub.url, settings.hub.token_file.as_deref())?;
    let env = settings.env.clone();
    let line = match &settings.action {
        Action::Approve { commit, comment } => {
            let answer: ApprovalAnswer = client
                .post(
                    "/api/v1/approvals",
                    &ApprovalRequest {
                        environment: env,
                        commit: commit.clone(),
                        comment: comment.clone(),
                    },
                )
                .map_err(|e| anyhow!("cannot approve: {e}"))?;
            format!(
                "{}: {} {} the promotion of {}; approved by {}",
                answer.environment,
                answer.actor,
                if answer.counted {
                    "approved"
                } else {
                    "had already approved (counted once)"
                },
                short(&answer.commit),
                answer.approved_by.join(", ")
            )
        }
        Action::Freeze { reason, until } => {
            let answer: Freeze = client
                .post(
                    "/api/v1/freezes",
                    &FreezeRequest {
                        environment: env,
                        reason: reason.clone(),
                        until: until.clone(),
                    },
                )
                .map_err(|e| anyhow!("cannot freeze: {e}"))?;
            format!(
                "{}: frozen by {} ({}) until {}",
                answer.environment,
                answer.actor,
                answer.reason,
                answer.until.as_deref().unwrap_or("unfrozen")
            )
        }
        Action::Unfreeze { reason } => {
            let answer: UnfreezeAnswer = client
                .post(
                    "/api/v1/unfreezes",
                    &UnfreezeRequest {
                        environment: env,
                        reason: reason.clone(),
                    },
                )
                .map_err(|e| anyhow!("cannot unfreeze: {e}"))?;
            if answer.lifted.is_empty() {
                format!("{}: was not frozen", answer.environment)
            } else {
                format!(
                    "{}: unfrozen (lifted {})",
                    answer.environment,
                    answer
                        .lifted
                        .iter()
                        .map(|f| format!("the freeze by {}: {}", f.actor, f.reason))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        }
    };
    if !global.quiet {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
