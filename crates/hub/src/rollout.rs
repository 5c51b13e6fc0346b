//! The gate of a progressive rollout's waves (`GET /api/v1/environments/{env}/waves`): per
//! cluster type asked about, the registered clusters, those compliant with a GitOps commit or
//! a later one (which contains it, on the environment's first-parent history), the failed ones
//! with their reconciler's message, and for how long all of them have been compliant (the
//! wave's soak).
//!
//! Only reports of the commit or a later one count: a cluster still healthy on the commit
//! before the wave is *behind*, never compliant, so a wave is never advanced by reports of the
//! old content. The answer comes from the incremental counts ([`crate::counts`]), as the
//! promotion gate's: a sum over the groups of the cluster types asked about and, for the soak,
//! when the last cluster that kept one of them from being compliant stopped doing so
//! ([`Snapshot::compliant_since`]); only the failed clusters listed are read from `clusters`.
//!
//! [`environment_rollout`] shows the whole rollout for people (`GET
//! /api/v1/environments/{env}/rollout` and the dashboard's rollout page) from the same counts.

use std::collections::BTreeSet;

use kalypso_core::rollout::{MaxFailures, RolloutState, Status, Waves};
use kalypso_hub_api::{
    BlockerKind, ClusterState, EnvironmentRollout, GateCluster, Rollout, RolloutBlocker, RolloutClusterType,
    RolloutCounts, RolloutStatus, RolloutWave, WaveClusterType, WaveGate, WaveStatus,
};

use crate::counts::{self, Scope, Snapshot, Staleness};
use crate::db::{Db, DbError};
use crate::query::resolve_commit_in;

/// Lists only the failed clusters.
fn failed_only(state: ClusterState) -> Option<usize> {
    (state == ClusterState::Failed).then_some(0)
}

/// The first `limit` failed clusters of cluster type `ct` relative to the commit at
/// `position`, with their reconciler's message.
async fn list_failed(
    conn: &mut sqlx::AnyConnection,
    snapshot: &Snapshot,
    environment: &str,
    ct: &str,
    position: i64,
    limit: u64,
) -> Result<Vec<GateCluster>, DbError> {
    Ok(counts::list(
        conn,
        snapshot,
        environment,
        Scope::Type(ct),
        Some(position),
        &failed_only,
        0,
        limit,
    )
    .await?
    .into_iter()
    .map(GateCluster::from)
    .collect())
}

/// The wave gate of `environment` for GitOps commit `sha` and `cluster_types` (see the module
/// docs), all read from one snapshot of the database.
pub async fn waves(
    db: &Db,
    environment: &str,
    sha: &str,
    cluster_types: &[String],
    staleness: Staleness,
    failed_limit: i64,
) -> Result<WaveGate, DbError> {
    let freezes: Vec<_> = crate::policy::active_freezes(db, environment, staleness.now)
        .await?
        .iter()
        .map(|f| crate::actions::freeze_answer(environment, f))
        .collect();
    let mut tx = db.begin_read().await?;
    let Some(commit) = resolve_commit_in(&mut tx, environment, sha).await? else {
        return Ok(WaveGate {
            environment: environment.to_owned(),
            gitops_commit: None,
            cluster_types: Vec::new(),
            freezes,
        });
    };
    let snapshot = Snapshot::read(&mut tx, Some(environment), None, staleness).await?;
    let by_type = snapshot.counts_by_type(Some(commit.position));
    let mut answer = Vec::with_capacity(cluster_types.len());
    for ct in cluster_types {
        let counts = by_type
            .get(&(environment.to_owned(), ct.clone()))
            .copied()
            .unwrap_or_default();
        let registered = counts.required();
        // The soak runs from when the last cluster that kept the cluster type from being
        // compliant stopped doing so, and never from before the commit itself.
        let compliant_for_ms = if registered > 0 && counts.compliant == registered {
            let only = BTreeSet::from([ct.clone()]);
            snapshot
                .compliant_since(environment, Some(&only), commit.position)
                .map(|since| {
                    u64::try_from(staleness.now.saturating_sub(since.max(commit.committed_at)))
                        .unwrap_or_default()
                })
        } else {
            None
        };
        let failed = if counts.failed > 0 && failed_limit > 0 {
            let limit = u64::try_from(failed_limit).unwrap_or_default();
            list_failed(&mut tx, &snapshot, environment, ct, commit.position, limit).await?
        } else {
            Vec::new()
        };
        answer.push(WaveClusterType {
            cluster_type: ct.clone(),
            registered,
            compliant: counts.compliant,
            compliant_for_ms,
            failed,
            failed_count: counts.failed,
        });
    }
    tx.commit().await?;
    Ok(WaveGate {
        environment: environment.to_owned(),
        gitops_commit: Some(commit.sha),
        cluster_types: answer,
        freezes,
    })
}

/// How many failed clusters a rollout view lists per cluster type and per blocker.
pub const VIEW_FAILED_LIMIT: u64 = 20;

/// What the rollout view says when the hub reads no control plane.
pub const NO_CONTROL_PLANE: &str = "the hub reads no control plane (start it with --control-plane REPO): \
     it knows no GitOps branch, so no rollout";

/// What the rollout view says before the first refresh read the environment's GitOps branch.
pub const NOT_READ_YET: &str =
    "the hub has not read the environment's GitOps branch since it started (it does at its next refresh)";

fn rollout_status(status: Status) -> RolloutStatus {
    match status {
        Status::Progressing => RolloutStatus::Progressing,
        Status::Paused => RolloutStatus::Paused,
        Status::Complete => RolloutStatus::Complete,
        Status::Halted => RolloutStatus::Halted,
        Status::RolledBack => RolloutStatus::RolledBack,
    }
}

fn duration_text(ms: u64) -> String {
    kalypso_core::duration::format(std::time::Duration::from_millis(ms))
}

/// Environment `environment`'s progressive rollout for people (`GET
/// /api/v1/environments/{env}/rollout`, the dashboard's rollout page): the state its GitOps
/// branch tracks at the head (as the last refresh read it, [`crate::control_plane`]), each
/// wave's cluster types with their labels and their clusters' counts relative to the commit
/// that delivered the last wave reached (from the incremental counts, as the wave gate's),
/// the soak left, and what blocks. `None`: no such environment.
pub async fn environment_rollout(
    db: &Db,
    observed: &crate::control_plane::Observed,
    reads_control_plane: bool,
    environment: &str,
    staleness: Staleness,
) -> Result<Option<EnvironmentRollout>, DbError> {
    if !crate::db::searchable(environment) {
        return Ok(None);
    }
    let freezes: Vec<_> = crate::policy::active_freezes(db, environment, staleness.now)
        .await?
        .iter()
        .map(|f| crate::actions::freeze_answer(environment, f))
        .collect();
    let mut tx = db.begin_read().await?;
    let known = sqlx::query("SELECT name FROM environments WHERE name = $1")
        .bind(environment)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    if !known {
        tx.commit().await?;
        return Ok(None);
    }
    let head = crate::query::head(&mut tx, environment).await?;
    let mut answer = EnvironmentRollout {
        environment: environment.to_owned(),
        gitops_commit: head.as_ref().map(|h| h.sha.clone()),
        rollout: None,
        unavailable: None,
        labels_unavailable: None,
        freezes,
    };
    let view = observed.get(environment);
    let Some(view) = view.filter(|_| reads_control_plane) else {
        answer.unavailable = Some(
            if reads_control_plane {
                NOT_READ_YET
            } else {
                NO_CONTROL_PLANE
            }
            .to_owned(),
        );
        tx.commit().await?;
        return Ok(Some(answer));
    };
    let Some(read) = view.rollout else {
        tx.commit().await?;
        return Ok(Some(answer));
    };
    let model = match view.model.as_deref() {
        Some(Ok(model)) => Some(model),
        Some(Err(why)) => {
            answer.labels_unavailable = Some(why.clone());
            None
        }
        None => {
            answer.labels_unavailable = Some("the GitOps branch names no control-plane commit".to_owned());
            None
        }
    };
    let state = &read.state;
    let wave_commit = match &read.wave_commit {
        Some(sha) => resolve_commit_in(&mut tx, environment, sha).await?,
        None => None,
    };
    let snapshot = Snapshot::read(&mut tx, Some(environment), None, staleness).await?;
    let position = wave_commit.as_ref().map(|c| c.position);
    let by_type = snapshot.counts_by_type(position.or(Some(i64::MAX)));
    let delivered = state.delivered.min(state.waves.len());
    let progressing = state.status == Status::Progressing;
    let mut waves = Vec::with_capacity(state.waves.len());
    let mut failed_clusters: Vec<(String, Vec<GateCluster>, u64, u64)> = Vec::new();
    for (i, wave) in state.waves.iter().enumerate() {
        let reached = i < delivered && wave_commit.is_some();
        let mut total = RolloutCounts::default();
        let mut cluster_types = Vec::with_capacity(wave.cluster_types.len());
        let mut failed_here = Vec::new();
        for ct in &wave.cluster_types {
            let c = by_type
                .get(&(environment.to_owned(), ct.clone()))
                .copied()
                .unwrap_or_default();
            let registered = c.required();
            let clusters = if reached {
                RolloutCounts {
                    registered,
                    compliant: c.compliant,
                    failed: c.failed,
                    reconciling: c.reconciling,
                    waiting: c.behind,
                    stale: c.stale,
                }
            } else {
                RolloutCounts {
                    registered,
                    waiting: registered,
                    stale: c.stale,
                    ..RolloutCounts::default()
                }
            };
            let failed = match position {
                Some(position) if reached && c.failed > 0 => {
                    list_failed(&mut tx, &snapshot, environment, ct, position, VIEW_FAILED_LIMIT).await?
                }
                _ => Vec::new(),
            };
            failed_here.extend(failed.iter().cloned());
            total.merge(&clusters);
            cluster_types.push(RolloutClusterType {
                name: ct.clone(),
                labels: model
                    .and_then(|m| m.cluster_types.get(ct))
                    .map(|m| m.labels.clone())
                    .unwrap_or_default(),
                clusters,
                failed,
            });
        }
        // The soak of the last wave delivered, as sync measures it.
        let mut soak_remaining_ms = None;
        if let (Some(commit), true) = (&wave_commit, reached && i + 1 == delivered && progressing)
            && total.registered > 0
            && total.compliant == total.registered
            && let Some(since) =
                snapshot.compliant_since(environment, Some(&wave.cluster_types), commit.position)
        {
            let compliant_for = staleness.now.saturating_sub(since.max(commit.committed_at));
            let left = i64::try_from(wave.min_success_ms)
                .unwrap_or(i64::MAX)
                .saturating_sub(compliant_for);
            if left > 0 {
                soak_remaining_ms = u64::try_from(left).ok();
            }
        }
        let status = if !reached {
            WaveStatus::Waiting
        } else if state.status == Status::RolledBack {
            WaveStatus::RolledBack
        } else if total.failed > 0 {
            WaveStatus::Failed
        } else if total.compliant < total.registered {
            WaveStatus::Progressing
        } else if soak_remaining_ms.is_some() {
            WaveStatus::Soaking
        } else {
            WaveStatus::Done
        };
        if reached && total.failed > 0 {
            record_failed(
                &mut failed_clusters,
                &wave.name,
                failed_here,
                total.failed,
                total.registered,
            );
        }
        waves.push(RolloutWave {
            name: wave.name.clone(),
            status,
            min_success_ms: wave.min_success_ms,
            soak_remaining_ms,
            clusters: total,
            cluster_types,
        });
    }
    tx.commit().await?;
    let policy = model.and_then(|m| m.waves.as_ref());
    let (blockers, next) = blockers(
        state,
        &read,
        wave_commit.is_some(),
        &waves,
        &failed_clusters,
        &answer.freezes,
        policy,
        staleness.now,
    );
    answer.rollout = Some(Rollout {
        policy: state.policy.clone(),
        status: rollout_status(state.status),
        main_commit: state.change.main.clone(),
        environment_commit: state.change.environment.clone(),
        wave_commit: wave_commit.as_ref().map(|c| c.sha.clone()),
        wave_committed_at: wave_commit
            .as_ref()
            .map(|c| crate::model::format_time(c.committed_at)),
        delivered: delivered as u64,
        waves,
        blockers,
        next,
        failure: state.failure.clone(),
        max_failures: policy.map(|p| match p.max_failures {
            MaxFailures::Count(n) => n.to_string(),
            MaxFailures::Percent(n) => format!("{n}%"),
        }),
        progress_deadline_ms: policy
            .and_then(|p| p.progress_deadline)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        on_failure: policy.map(|p| format!("{:?}", p.on_failure)),
    });
    Ok(Some(answer))
}

/// Records a delivered wave's failed clusters: (wave, the first ones, how many, registered).
fn record_failed(
    out: &mut Vec<(String, Vec<GateCluster>, u64, u64)>,
    wave: &str,
    mut clusters: Vec<GateCluster>,
    failed: u64,
    registered: u64,
) {
    clusters.truncate(usize::try_from(VIEW_FAILED_LIMIT).unwrap_or(usize::MAX));
    out.push((wave.to_owned(), clusters, failed, registered));
}

/// What keeps the rollout of `state` from going on, and what the next sync does — the rule
/// of [`kalypso_core::rollout::next_step`] (failures, then clusters not compliant yet and the
/// progress deadline, then the soak, then a freeze), said for people.
#[allow(clippy::too_many_arguments)]
fn blockers(
    state: &RolloutState,
    read: &crate::control_plane::RolloutRead,
    commit_known: bool,
    waves: &[RolloutWave],
    failed: &[(String, Vec<GateCluster>, u64, u64)],
    freezes: &[kalypso_hub_api::Freeze],
    policy: Option<&Waves>,
    now: i64,
) -> (Vec<RolloutBlocker>, String) {
    let blocker = |kind: BlockerKind, summary: String| RolloutBlocker {
        kind,
        summary,
        clusters: Vec::new(),
    };
    match state.status {
        Status::Complete => return (Vec::new(), "nothing: the rollout is complete".to_owned()),
        Status::Paused => {
            return (
                vec![blocker(
                    BlockerKind::Paused,
                    "paused (kalypso rollout resume continues it; abort rolls it back)".to_owned(),
                )],
                "nothing: the rollout is paused".to_owned(),
            );
        }
        Status::Halted | Status::RolledBack => {
            let word = rollout_status(state.status);
            return (
                vec![blocker(
                    BlockerKind::Stopped,
                    format!("{word}: {}", state.failure.clone().unwrap_or_default()),
                )],
                format!("nothing: the rollout is {word} (a newer change starts a new rollout)"),
            );
        }
        Status::Progressing => {}
    }
    if !commit_known {
        let commit = read.wave_commit.as_deref().unwrap_or_default();
        return (
            vec![blocker(
                BlockerKind::Unknown,
                format!(
                    "the hub has not stored GitOps commit {} yet (its next refresh does)",
                    commit.get(..12).unwrap_or(commit)
                ),
            )],
            "waiting for the hub's answer".to_owned(),
        );
    }
    let delivered = state.delivered.min(waves.len());
    let current = delivered.saturating_sub(1);
    let Some(wave) = waves.get(current) else {
        return (Vec::new(), "nothing: the rollout has no wave".to_owned());
    };
    let fails_with = policy.map_or("fails the rollout".to_owned(), |p| match p.on_failure {
        kalypso_api::OnFailure::Halt => "halts the rollout".to_owned(),
        kalypso_api::OnFailure::Rollback => "rolls the delivered waves back".to_owned(),
    });
    let mut out = Vec::new();
    let mut next = None;
    for (name, clusters, count, registered) in failed {
        let allowed = policy.map(|p| p.max_failures.allowed(*registered));
        let over = allowed.is_none_or(|a| *count > a);
        let summary = match allowed {
            Some(a) => format!("wave {name:?}: {count} failed cluster(s), {a} allowed"),
            None => format!("wave {name:?}: {count} failed cluster(s)"),
        };
        if over && allowed.is_some() && next.is_none() {
            next = Some(format!("the next sync {fails_with} ({summary})"));
        }
        out.push(RolloutBlocker {
            kind: BlockerKind::Failed,
            summary,
            clusters: clusters.clone(),
        });
    }
    let pending: u64 = waves
        .iter()
        .take(delivered)
        .map(|w| {
            w.clusters
                .registered
                .saturating_sub(w.clusters.compliant)
                .saturating_sub(w.clusters.failed)
        })
        .sum();
    let not_compliant: u64 = waves
        .iter()
        .take(delivered)
        .map(|w| w.clusters.registered.saturating_sub(w.clusters.compliant))
        .sum();
    if not_compliant > 0 {
        let deadline = policy.and_then(|p| p.progress_deadline);
        let left = match (deadline, read.deadline_from) {
            (Some(d), Some(from)) => Some(
                from.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .saturating_sub(now),
            ),
            _ => None,
        };
        if pending > 0 {
            let mut summary = format!(
                "wave {:?}: {pending} cluster(s) not yet compliant with the change",
                wave.name
            );
            if let Some(left) = left.filter(|l| *l >= 0) {
                summary.push_str(&format!(
                    " (progress deadline in {})",
                    duration_text(left.unsigned_abs())
                ));
            }
            out.push(blocker(BlockerKind::Waiting, summary));
        }
        if let (Some(d), Some(left)) = (deadline, left)
            && left < 0
        {
            let summary = format!(
                "wave {:?}: {not_compliant} cluster(s) not compliant after the progress deadline ({})",
                wave.name,
                duration_text(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            );
            if next.is_none() {
                next = Some(format!("the next sync {fails_with} ({summary})"));
            }
            out.push(blocker(BlockerKind::Deadline, summary));
        }
        if next.is_none() {
            next = Some(format!("wave {:?} waits for its clusters", wave.name));
        }
    } else if let Some(left) = wave.soak_remaining_ms {
        out.push(blocker(
            BlockerKind::Soak,
            format!(
                "wave {:?}: compliant, soaking for {} more",
                wave.name,
                duration_text(left)
            ),
        ));
        next = Some(format!("wave {:?} soaks", wave.name));
    }
    for f in freezes {
        out.push(blocker(
            BlockerKind::Freeze,
            format!(
                "frozen by {} since {}: {} (no next wave until it is lifted)",
                f.actor, f.frozen_at, f.reason
            ),
        ));
    }
    let next = next.unwrap_or_else(|| {
        if !freezes.is_empty() {
            "nothing while the environment is frozen".to_owned()
        } else if delivered >= waves.len() {
            "the next sync marks the rollout complete".to_owned()
        } else {
            format!(
                "the next sync delivers wave {}/{} ({})",
                delivered + 1,
                waves.len(),
                waves[delivered].name
            )
        }
    });
    (out, next)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use kalypso_core::rollout::{Revision, WavePlan, WaveState};

    use super::*;

    fn state(status: Status, delivered: usize) -> RolloutState {
        RolloutState {
            format: kalypso_core::rollout::STATE_FORMAT,
            policy: "rings".to_owned(),
            change: Revision::default(),
            waves: ["canary", "rest"]
                .iter()
                .map(|name| WaveState {
                    name: (*name).to_owned(),
                    cluster_types: BTreeSet::from([format!("{name}-type")]),
                    min_success_ms: 0,
                })
                .collect(),
            delivered,
            status,
            before: BTreeMap::new(),
            failure: (status == Status::Halted).then(|| "wave \"canary\": 1 failed".to_owned()),
        }
    }

    fn policy(on_failure: kalypso_api::OnFailure) -> Waves {
        Waves {
            policy: "rings".to_owned(),
            waves: vec![WavePlan {
                name: "canary".to_owned(),
                cluster_types: BTreeSet::new(),
                min_success_time: Duration::ZERO,
            }],
            max_failures: MaxFailures::Count(0),
            progress_deadline: Some(Duration::from_secs(600)),
            on_failure,
        }
    }

    fn wave(name: &str, registered: u64, compliant: u64) -> RolloutWave {
        RolloutWave {
            name: name.to_owned(),
            status: WaveStatus::Progressing,
            min_success_ms: 0,
            soak_remaining_ms: None,
            clusters: RolloutCounts {
                registered,
                compliant,
                waiting: registered - compliant,
                ..RolloutCounts::default()
            },
            cluster_types: Vec::new(),
        }
    }

    fn read(deadline_from: i64) -> crate::control_plane::RolloutRead {
        crate::control_plane::RolloutRead {
            state: state(Status::Progressing, 1),
            wave_commit: Some("abc".to_owned()),
            deadline_from: Some(deadline_from),
        }
    }

    fn kinds(blockers: &[RolloutBlocker]) -> Vec<BlockerKind> {
        blockers.iter().map(|b| b.kind).collect()
    }

    #[test]
    fn a_wave_past_its_progress_deadline_is_said_to_fail_the_rollout() {
        let waves = [wave("canary", 3, 1), wave("rest", 2, 0)];
        let p = policy(kalypso_api::OnFailure::Rollback);
        let s = state(Status::Progressing, 1);
        // Within the deadline: waited for, with the time left.
        let (b, next) = blockers(&s, &read(0), true, &waves, &[], &[], Some(&p), 60_000);
        assert_eq!(kinds(&b), [BlockerKind::Waiting]);
        assert!(b[0].summary.contains("2 cluster(s) not yet compliant"), "{b:?}");
        assert!(b[0].summary.contains("progress deadline in 9m"), "{b:?}");
        assert_eq!(next, "wave \"canary\" waits for its clusters");
        // Past it.
        let (b, next) = blockers(&s, &read(0), true, &waves, &[], &[], Some(&p), 601_000);
        assert_eq!(kinds(&b), [BlockerKind::Waiting, BlockerKind::Deadline]);
        assert!(
            next.starts_with("the next sync rolls the delivered waves back"),
            "{next}"
        );
    }

    #[test]
    fn paused_stopped_complete_and_unread_rollouts_say_so() {
        let waves = [wave("canary", 1, 1), wave("rest", 1, 0)];
        let (b, next) = blockers(
            &state(Status::Paused, 1),
            &read(0),
            true,
            &waves,
            &[],
            &[],
            None,
            0,
        );
        assert_eq!(
            (kinds(&b), next.as_str()),
            (vec![BlockerKind::Paused], "nothing: the rollout is paused")
        );
        let (b, next) = blockers(
            &state(Status::Halted, 1),
            &read(0),
            true,
            &waves,
            &[],
            &[],
            None,
            0,
        );
        assert_eq!(kinds(&b), [BlockerKind::Stopped]);
        assert!(
            b[0].summary.contains("halted: wave \"canary\": 1 failed"),
            "{b:?}"
        );
        assert!(next.contains("is halted"), "{next}");
        let (b, _) = blockers(
            &state(Status::Complete, 2),
            &read(0),
            true,
            &waves,
            &[],
            &[],
            None,
            0,
        );
        assert!(b.is_empty());
        let (b, _) = blockers(
            &state(Status::Progressing, 1),
            &read(0),
            false,
            &waves,
            &[],
            &[],
            None,
            0,
        );
        assert_eq!(kinds(&b), [BlockerKind::Unknown]);
        // Compliant, nothing else: the next sync delivers the next wave.
        let (b, next) = blockers(
            &state(Status::Progressing, 1),
            &read(0),
            true,
            &waves,
            &[],
            &[],
            None,
            0,
        );
        assert!(b.is_empty(), "{b:?}");
        assert_eq!(next, "the next sync delivers wave 2/2 (rest)");
    }
}
