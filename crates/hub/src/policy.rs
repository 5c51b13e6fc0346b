//! The promotion gate with reasons: may a control-plane commit that environment `from` runs
//! be promoted into environment `into`? The answer lists every requirement and its state —
//! compliance of `from` (the existing gate, [`crate::query::gate`]), the soak, approvals,
//! windows and freezes of `into`, and its verification checks — so that a refusal names every
//! requirement not met, not only the first.
//!
//! The hub knows each environment's PromotionPolicy because it reads it from the control plane
//! it already reads ([`read_policy`], called by the GitOps refresh): the policy is part of the
//! target environment's branch, so the hub, not the caller, decides what applies (a CLI that
//! sent its own policy could send a lenient one). Verification checks run here, against
//! `from`, once its clusters are compliant; their results are stored per (environment, commit,
//! check), a pass for good, a failure until it is tried again [`RETRY_FAILED_CHECK`] later.

use std::collections::BTreeSet;
use std::time::Duration;

use kalypso_api::PromotionPolicySpec;
use kalypso_core::Diagnostics;
use kalypso_core::diag::Origin;
use kalypso_core::promotion::{self, Policy, WindowState};
use kalypso_git::control_plane::{ControlPlane, EnvironmentRef};
use kalypso_hub_api::{Gate, PromotionGate, Requirement, RequirementKind, RequirementState, Verdict};
use sqlx::Row;

use crate::db::{Db, DbError, searchable};
use crate::model::format_time;

/// How long a failed verification result stands before the check is run again.
pub const RETRY_FAILED_CHECK: Duration = Duration::from_secs(30);

/// What the refresh read of an environment's PromotionPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyRead {
    /// The branch holds none.
    None,
    /// The policy: its name, spec as JSON and problems ('' when valid).
    Found {
        /// `metadata.name`.
        name: String,
        /// The spec, as JSON.
        spec: String,
        /// The validation errors, one a line ('' when valid).
        problems: String,
    },
    /// The branch could not be read: keep what is stored.
    Unreadable,
}

/// Reads the PromotionPolicy of `env`'s branch (blocking: git).
pub fn read_policy(cp: &ControlPlane, env: &EnvironmentRef) -> PolicyRead {
    let Ok(Some(commit)) = cp.repo().branch(&env.branch) else {
        return PolicyRead::Unreadable;
    };
    let label = if env.path.is_empty() {
        env.branch.clone()
    } else {
        format!("{}/{}", env.branch, env.path)
    };
    let Ok(tree) = cp.repo().source_tree(commit, &env.path, &label) else {
        return PolicyRead::Unreadable;
    };
    let mut diagnostics = Diagnostics::new();
    let objects = kalypso_core::load::load_tree(&tree, &mut diagnostics);
    let mut found = objects.into_iter().filter_map(|o| match o {
        kalypso_core::model::AnyObject::PromotionPolicy(p) => Some(p),
        _ => None,
    });
    let Some(first) = found.next() else {
        return PolicyRead::None;
    };
    let mut problems: Vec<String> = diagnostics
        .errors()
        .filter(|d| {
            d.object
                .as_ref()
                .is_some_and(|(k, _)| *k == kalypso_api::Kind::PromotionPolicy)
        })
        .map(ToString::to_string)
        .collect();
    if let Some(second) = found.next() {
        problems.push(format!(
            "{} holds a second PromotionPolicy, {:?}: an environment has at most one",
            env.name, second.meta.name
        ));
    }
    PolicyRead::Found {
        name: first.meta.name.clone(),
        spec: serde_json::to_string(&first.spec).unwrap_or_default(),
        problems: problems.join("\n"),
    }
}

/// Stores what [`read_policy`] read for `environment`.
pub async fn store_policy(db: &Db, environment: &str, read: &PolicyRead, now: i64) -> Result<(), DbError> {
    match read {
        PolicyRead::Unreadable => {}
        PolicyRead::None => {
            sqlx::query("DELETE FROM promotion_policies WHERE environment = $1")
                .bind(environment)
                .execute(db.pool())
                .await?;
        }
        PolicyRead::Found { name, spec, problems } => {
            sqlx::query(
                "INSERT INTO promotion_policies (environment, name, spec, problems, read_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (environment) DO UPDATE SET name = excluded.name, spec = excluded.spec, \
                 problems = excluded.problems, read_at = excluded.read_at",
            )
            .bind(environment)
            .bind(name)
            .bind(spec)
            .bind(problems)
            .bind(now)
            .execute(db.pool())
            .await?;
        }
    }
    Ok(())
}

/// An environment's stored policy: valid, or why not.
pub(crate) enum StoredPolicy {
    /// None.
    None,
    /// Invalid: its name and problems.
    Invalid(String, String),
    /// Valid.
    Valid(Box<Policy>),
}

/// The stored policy of `environment`.
pub(crate) async fn stored_policy(db: &Db, environment: &str) -> Result<StoredPolicy, DbError> {
    if !searchable(environment) {
        return Ok(StoredPolicy::None);
    }
    let Some(row) = sqlx::query("SELECT name, spec, problems FROM promotion_policies WHERE environment = $1")
        .bind(environment)
        .fetch_optional(db.pool())
        .await?
    else {
        return Ok(StoredPolicy::None);
    };
    let name: String = row.try_get(0)?;
    let spec: String = row.try_get(1)?;
    let problems: String = row.try_get(2)?;
    if !problems.is_empty() {
        return Ok(StoredPolicy::Invalid(name, problems));
    }
    let Ok(spec) = serde_json::from_str::<PromotionPolicySpec>(&spec) else {
        return Ok(StoredPolicy::Invalid(
            name,
            "its stored spec cannot be read".into(),
        ));
    };
    let mut diagnostics = Diagnostics::new();
    match promotion::validate(&name, &spec, &Origin::new(environment, 0), &mut diagnostics) {
        Some(policy) => Ok(StoredPolicy::Valid(Box::new(policy))),
        None => Ok(StoredPolicy::Invalid(
            name,
            diagnostics
                .errors()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        )),
    }
}

/// An active freeze: who, since when, why, until when.
#[derive(Clone, Debug)]
pub(crate) struct ActiveFreeze {
    pub(crate) id: i64,
    pub(crate) actor: String,
    pub(crate) reason: String,
    pub(crate) frozen_at: i64,
    pub(crate) until: Option<i64>,
}

/// The freezes of `environment` in force at `now`, oldest first.
pub(crate) async fn active_freezes(
    db: &Db,
    environment: &str,
    now: i64,
) -> Result<Vec<ActiveFreeze>, DbError> {
    let rows = sqlx::query(
        "SELECT id, actor, reason, frozen_at, until_at FROM freezes WHERE environment = $1 \
         AND lifted_at IS NULL AND (until_at IS NULL OR until_at > $2) ORDER BY id",
    )
    .bind(environment)
    .bind(now)
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(ActiveFreeze {
                id: r.try_get(0)?,
                actor: r.try_get(1)?,
                reason: r.try_get(2)?,
                frozen_at: r.try_get(3)?,
                until: r.try_get(4)?,
            })
        })
        .collect()
}

/// The identities that approved `commit` for `environment`, with their groups, by name.
pub(crate) async fn approvals(
    db: &Db,
    environment: &str,
    commit: &str,
) -> Result<Vec<(String, Vec<String>)>, DbError> {
    let rows = sqlx::query(
        "SELECT actor, groups FROM approvals WHERE environment = $1 AND commit_sha = $2 ORDER BY actor",
    )
    .bind(environment)
    .bind(commit)
    .fetch_all(db.pool())
    .await?;
    rows.iter()
        .map(|r| {
            let groups: String = r.try_get(1)?;
            Ok((r.try_get(0)?, serde_json::from_str(&groups).unwrap_or_default()))
        })
        .collect()
}

/// Since when every non-stale cluster of `environment` has reported the commit at `position`
/// (or a later one) compliant: the latest of each cluster's first compliant report at or
/// after the commit. `None` when some cluster never did.
async fn compliant_since(
    db: &Db,
    environment: &str,
    position: i64,
    stale_before: i64,
) -> Result<Option<i64>, DbError> {
    let row = sqlx::query(
        "SELECT MAX(t) FROM (SELECT r.cluster_id, MIN(r.event_time) AS t FROM reports r \
         JOIN clusters c ON c.id = r.cluster_id \
         WHERE c.environment = $1 AND r.state = 'compliant' AND r.drives = 1 \
         AND (EXISTS (SELECT 1 FROM gitops_commits g WHERE g.environment = c.environment \
              AND g.sha = r.commit_sha AND g.position >= $2) \
           OR EXISTS (SELECT 1 FROM oci_artifacts a WHERE a.environment = c.environment \
              AND a.cluster_type = c.cluster_type AND a.digest = r.commit_sha \
              AND (a.to_position IS NULL OR a.to_position > $2))) \
         AND c.last_seen >= $3 GROUP BY r.cluster_id) firsts",
    )
    .bind(environment)
    .bind(position)
    .bind(stale_before)
    .fetch_one(db.pool())
    .await?;
    Ok(row.try_get::<Option<i64>, _>(0)?)
}

/// The stored result of a check: (passed, message, checked at).
async fn stored_check(
    db: &Db,
    environment: &str,
    commit: &str,
    check: &str,
) -> Result<Option<(bool, String, i64)>, DbError> {
    let row = sqlx::query(
        "SELECT passed, message, checked_at FROM verifications WHERE environment = $1 AND commit_sha = $2 AND check_name = $3",
    )
    .bind(environment)
    .bind(commit)
    .bind(check)
    .fetch_optional(db.pool())
    .await?;
    row.map(|r| Ok((r.try_get::<i64, _>(0)? == 1, r.try_get(1)?, r.try_get(2)?)))
        .transpose()
}

async fn store_check(
    db: &Db,
    environment: &str,
    commit: &str,
    check: &str,
    passed: bool,
    message: &str,
    now: i64,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO verifications (environment, commit_sha, check_name, passed, message, checked_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (environment, commit_sha, check_name) DO UPDATE \
         SET passed = excluded.passed, message = excluded.message, checked_at = excluded.checked_at",
    )
    .bind(environment)
    .bind(commit)
    .bind(check)
    .bind(i64::from(passed))
    .bind(message)
    .bind(now)
    .execute(db.pool())
    .await?;
    Ok(())
}

/// Runs `check`: GET its URL within its timeout; the message says what was answered.
pub async fn run_check(check: &promotion::Check) -> (bool, String) {
    let check = check.clone();
    tokio::task::spawn_blocking(move || {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(check.timeout))
            .http_status_as_error(false)
            .build()
            .new_agent();
        match agent.get(&check.url).call() {
            Ok(response) => {
                let status = response.status().as_u16();
                if status == check.expect_status {
                    (
                        true,
                        format!("{} answered {status}", kalypso_git::redact(&check.url)),
                    )
                } else {
                    (
                        false,
                        format!(
                            "{} answered {status}, expected {}",
                            kalypso_git::redact(&check.url),
                            check.expect_status
                        ),
                    )
                }
            }
            Err(e) => (
                false,
                format!(
                    "GET {}: {}",
                    kalypso_git::redact(&check.url),
                    kalypso_git::redact(&e.to_string())
                ),
            ),
        }
    })
    .await
    .unwrap_or_else(|e| (false, format!("the check stopped: {e}")))
}

fn requirement(kind: RequirementKind, state: RequirementState, summary: String) -> Requirement {
    Requirement {
        kind,
        name: None,
        state,
        summary,
        approved_by: Vec::new(),
    }
}

fn short(commit: &str) -> &str {
    kalypso_git::control_plane::short(commit)
}

/// A duration for people, in whole seconds (`42m`, `1h30m`).
fn human(d: Duration) -> String {
    kalypso_core::duration::format(Duration::from_secs(d.as_secs()))
}

/// Evaluates the promotion of what `gate` (the gate of environment `from`) found into `into`
/// at `now` (Unix ms).
pub async fn evaluate(
    db: &Db,
    gate: &Gate,
    into: &str,
    stale_before: i64,
    now: i64,
) -> Result<PromotionGate, DbError> {
    let from = gate.environment.as_str();
    let mut requirements = Vec::new();
    let stored = stored_policy(db, into).await?;
    let policy = match &stored {
        StoredPolicy::None => None,
        StoredPolicy::Invalid(name, problems) => {
            requirements.push(requirement(
                RequirementKind::Policy,
                RequirementState::Failed,
                format!(
                    "PromotionPolicy {name:?} of {into} is invalid: {}",
                    problems.replace('\n', "; ")
                ),
            ));
            None
        }
        StoredPolicy::Valid(p) if p.from != from => {
            requirements.push(requirement(
                RequirementKind::Policy,
                RequirementState::Failed,
                format!(
                    "PromotionPolicy {:?} of {into} promotes from {}, not from {from}",
                    p.name, p.from
                ),
            ));
            None
        }
        StoredPolicy::Valid(p) => Some(p.as_ref()),
    };
    let policy_name = match &stored {
        StoredPolicy::None => None,
        StoredPolicy::Invalid(name, _) => Some(name.clone()),
        StoredPolicy::Valid(p) => Some(p.name.clone()),
    };

    // Compliance of `from`, from the existing gate.
    let compliant = gate.verdict == Verdict::Compliant;
    let (state, summary) = match gate.verdict {
        _ if gate.rollout.is_some() && gate.verdict != Verdict::Compliant => (
            if gate.verdict == Verdict::Failed {
                RequirementState::Failed
            } else {
                RequirementState::NotYet
            },
            format!(
                "compliant: the progressive rollout in {from} is {}, not every wave runs the commit",
                gate.rollout.as_deref().unwrap_or_default()
            ),
        ),
        Verdict::Compliant => (
            RequirementState::Met,
            format!("compliant {}/{} in {from}", gate.compliant, gate.total),
        ),
        Verdict::Failed => {
            let failed: Vec<String> = gate
                .clusters
                .iter()
                .filter(|c| c.state == kalypso_hub_api::ClusterState::Failed)
                .map(|c| format!("{} ({})", c.name, c.message().unwrap_or("no message")))
                .collect();
            (
                RequirementState::Failed,
                format!(
                    "compliant {}/{} in {from}: failed on {}",
                    gate.compliant,
                    gate.total,
                    failed.join("; ")
                ),
            )
        }
        Verdict::UnknownCommit => (
            RequirementState::NotYet,
            format!("compliant: the hub does not know the commit in {from} yet"),
        ),
        _ => (
            RequirementState::NotYet,
            format!("compliant {}/{} in {from}", gate.compliant, gate.total),
        ),
    };
    requirements.push(requirement(RequirementKind::Compliant, state, summary));

    let commit = gate.control_plane_commit.clone();
    if let Some(policy) = policy {
        if let Some(soak) = policy.soak {
            let since = match (&gate.gitops_commit, compliant) {
                (Some(sha), true) => match crate::query::resolve_commit(db, from, sha).await? {
                    Some(row) => compliant_since(db, from, row.position, stale_before).await?,
                    None => None,
                },
                _ => None,
            };
            let elapsed = since.map_or(Duration::ZERO, |t| {
                Duration::from_millis(u64::try_from(now - t).unwrap_or_default())
            });
            let met = since.is_some() && elapsed >= soak;
            let mut summary = format!("soak {} of {}", human(elapsed), human(soak));
            if let Some(t) = since {
                summary.push_str(&format!(
                    " (every cluster of {from} compliant since {})",
                    format_time(t)
                ));
            }
            requirements.push(requirement(
                RequirementKind::Soak,
                if met {
                    RequirementState::Met
                } else {
                    RequirementState::NotYet
                },
                summary,
            ));
        }
        if policy.approvals_required > 0 {
            let given = match &commit {
                Some(c) => approvals(db, into, c).await?,
                None => Vec::new(),
            };
            let counted: Vec<String> = given
                .iter()
                .filter(|(actor, groups)| policy.may_approve(actor, groups))
                .map(|(actor, _)| actor.clone())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let n = counted.len() as u32;
            let mut summary = format!("approvals {n} of {}", policy.approvals_required);
            if !counted.is_empty() {
                summary.push_str(&format!(" ({})", counted.join(", ")));
            }
            if commit.is_none() {
                summary.push_str(": the control-plane commit is not known yet");
            }
            let mut r = requirement(
                RequirementKind::Approvals,
                if n >= policy.approvals_required {
                    RequirementState::Met
                } else {
                    RequirementState::NotYet
                },
                summary,
            );
            r.approved_by = counted;
            requirements.push(r);
        }
        if !policy.windows.is_empty() {
            let now_utc = chrono::DateTime::from_timestamp_millis(now).unwrap_or_default();
            let (state, name, summary) = match policy.window_state(now_utc) {
                WindowState::Open { allow } => (
                    RequirementState::Met,
                    allow.clone(),
                    match allow {
                        Some(s) => format!("window: open (Allow {s:?})"),
                        None => "window: open (no deny window now)".to_owned(),
                    },
                ),
                WindowState::Denied {
                    schedule,
                    time_zone,
                    until,
                } => (
                    RequirementState::NotYet,
                    Some(schedule.clone()),
                    format!(
                        "window: denied until {} (Deny {schedule:?})",
                        promotion::local_time(until, time_zone)
                    ),
                ),
                WindowState::OutsideAllow { next } => (
                    RequirementState::NotYet,
                    next.as_ref().map(|(s, _, _)| s.clone()),
                    match next {
                        Some((s, tz, t)) => format!(
                            "window: outside every allow window; the next opens {} (Allow {s:?})",
                            promotion::local_time(t, tz)
                        ),
                        None => "window: outside every allow window; none opens again".to_owned(),
                    },
                ),
            };
            let mut r = requirement(RequirementKind::Window, state, summary);
            r.name = name;
            requirements.push(r);
        }
    }

    // Freezes apply with or without a policy.
    let freezes = active_freezes(db, into, now).await?;
    if freezes.is_empty() {
        requirements.push(requirement(
            RequirementKind::Freeze,
            RequirementState::Met,
            format!("{into} is not frozen"),
        ));
    } else {
        for f in &freezes {
            let mut r = requirement(
                RequirementKind::Freeze,
                RequirementState::NotYet,
                format!(
                    "frozen by {} since {}: {}{}",
                    f.actor,
                    format_time(f.frozen_at),
                    f.reason,
                    f.until
                        .map(|u| format!(" (until {})", format_time(u)))
                        .unwrap_or_default()
                ),
            );
            r.name = Some(f.id.to_string());
            requirements.push(r);
        }
    }

    if let Some(policy) = policy {
        for check in &policy.verification {
            let (state, summary) = match (&commit, compliant) {
                (Some(c), true) => {
                    let stored = stored_check(db, into, c, &check.name).await?;
                    let fresh = match &stored {
                        Some((true, _, _)) => true,
                        Some((false, _, at)) => {
                            now - at < i64::try_from(RETRY_FAILED_CHECK.as_millis()).unwrap_or(i64::MAX)
                        }
                        None => false,
                    };
                    let (passed, message) = match stored {
                        Some((passed, message, _)) if fresh => (passed, message),
                        _ => {
                            let (passed, message) = run_check(check).await;
                            store_check(db, into, c, &check.name, passed, &message, crate::model::now_ms())
                                .await?;
                            (passed, message)
                        }
                    };
                    if passed {
                        (
                            RequirementState::Met,
                            format!("verification {}: passed ({message})", check.name),
                        )
                    } else {
                        (
                            RequirementState::Failed,
                            format!("verification {}: failed: {message}", check.name),
                        )
                    }
                }
                _ => (
                    RequirementState::NotYet,
                    format!("verification {}: waits until {from} is compliant", check.name),
                ),
            };
            let mut r = requirement(RequirementKind::Verification, state, summary);
            r.name = Some(check.name.clone());
            requirements.push(r);
        }
    }
    let may_promote = requirements.iter().all(|r| r.state == RequirementState::Met);
    Ok(PromotionGate {
        into: into.to_owned(),
        policy: policy_name,
        may_promote,
        requirements,
    })
}

/// The control-plane commit `text` names (7 to 40 hex digits): in full when exactly one
/// promoted commit the hub knows starts with it; `Err` with why not.
pub(crate) async fn resolve_control_plane_commit(
    db: &Db,
    text: &str,
) -> Result<Result<String, String>, DbError> {
    let t = text.trim().to_ascii_lowercase();
    if !(7..=40).contains(&t.len()) || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Err(format!("{text:?} is not a commit id (7 to 40 hex digits)")));
    }
    let rows = sqlx::query(
        "SELECT DISTINCT promoted_commit FROM gitops_commits WHERE promoted_commit LIKE $1 ORDER BY promoted_commit LIMIT 2",
    )
    .bind(format!("{t}%"))
    .fetch_all(db.pool())
    .await?;
    let found: Vec<String> = rows
        .iter()
        .map(|r| r.try_get::<Option<String>, _>(0))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    Ok(match found.as_slice() {
        [one] => Ok(one.clone()),
        [] if t.len() == 40 => Ok(t),
        [] => Err(format!(
            "no environment the hub knows runs a control-plane commit starting with {t}; give all 40 digits"
        )),
        _ => Err(format!("{t} is ambiguous: give more digits")),
    })
}

/// Records, as `promotion` entries of the audit log, the promotions the hub sees: each new
/// GitOps commit of `environment` whose control-plane commit differs from its parent's, unless
/// `kalypso promote` already reported that promotion. `base_promoted`: the control-plane commit
/// of the newest commit stored before (`None` on a first read, which records nothing: history
/// is not news).
pub async fn observe_promotions(
    db: &Db,
    environment: &str,
    base_promoted: Option<Option<String>>,
    commits: &[(String, Option<String>)],
    notifier: &crate::notify::Notifier,
) -> Result<(), DbError> {
    let Some(mut previous) = base_promoted else {
        return Ok(());
    };
    for (gitops, promoted) in commits {
        if promoted != &previous
            && let Some(commit) = promoted
        {
            let reported = sqlx::query(
                "SELECT COUNT(*) FROM audit WHERE environment = $1 AND commit_sha = $2 AND kind IN ('promotion', 'override')",
            )
            .bind(environment)
            .bind(commit)
            .fetch_one(db.pool())
            .await?
            .try_get::<i64, _>(0)?;
            if reported == 0 {
                crate::audit::record(
                    db,
                    notifier,
                    crate::audit::Entry {
                        actor: "hub".into(),
                        kind: kalypso_hub_api::AuditKind::Promotion,
                        environment: environment.to_owned(),
                        commit: Some(commit.clone()),
                        reason: String::new(),
                        detail: format!(
                            "seen by the hub: GitOps commit {} of {environment} carries it{}",
                            short(gitops),
                            previous
                                .as_deref()
                                .map(|p| format!(" (was {})", short(p)))
                                .unwrap_or_default()
                        ),
                    },
                )
                .await?;
            }
        }
        previous = promoted.clone();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_millis(2_520_400)), "42m");
    }
}
