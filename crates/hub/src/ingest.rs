//! Storing reports with group commit: writer tasks take every report waiting in their queue,
//! store the lot in one transaction, and answer each request only after the commit. A
//! transaction costs one fsync whatever its size, so concurrent reports share it, and a
//! request is never answered with success for a report that is not durable.
//!
//! Reports are spread over the writers by cluster, so that one cluster's reports are stored
//! in order by one writer. SQLite has one writer (it serialises writers anyway); PostgreSQL
//! several.
//!
//! Per report: the cluster is registered or its `last_seen` advanced; the object's latest
//! state is replaced only by a newer event; a history row is added when the state, commit or
//! message changed (an identical retry adds nothing); and when the object applies a commit of
//! the environment's GitOps branch, the cluster's platform state follows it.

use std::collections::HashMap;

use kalypso_hub_api::IngestResult;
use sqlx::{Any, Row, Transaction};

use tokio::sync::{mpsc, oneshot};

use crate::db::{Db, DbError};
use crate::model::Report;

/// Reports taken into one transaction at most.
pub const MAX_BATCH: usize = 1024;

struct Job {
    report: Report,
    received_at: i64,
    reply: oneshot::Sender<Result<IngestResult, DbError>>,
}

/// Binds the ten columns of a report row (`cluster_id, object, drives, state, revision,
/// commit_sha, message, reason, event_time, received_at`), as both the latest-state upsert
/// and the history insert write them.
fn bind_report<'q>(
    q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    cluster: i64,
    job: &'q Job,
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    let r = &job.report;
    q.bind(cluster)
        .bind(&r.object)
        .bind(i64::from(r.drives))
        .bind(r.state.as_str())
        .bind(&r.revision)
        .bind(&r.commit)
        .bind(&r.message)
        .bind(&r.reason)
        .bind(r.event_time)
        .bind(job.received_at)
}

/// The writers' queues.
#[derive(Clone, Debug)]
pub struct Ingest {
    queues: Vec<mpsc::Sender<Job>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("object", &self.report.object)
            .finish_non_exhaustive()
    }
}

impl Ingest {
    /// Starts `writers` writer tasks on `db`.
    pub fn start(db: &Db, writers: usize) -> Ingest {
        let queues = (0..writers.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
                tokio::spawn(writer(db.clone(), rx));
                tx
            })
            .collect();
        Ingest { queues }
    }

    /// Stores `report` (received at `received_at`, Unix ms); answers after the commit.
    pub async fn submit(&self, report: Report, received_at: i64) -> Result<IngestResult, DbError> {
        let index = shard(&report.environment, &report.cluster, self.queues.len());
        let (reply, answer) = oneshot::channel();
        let job = Job {
            report,
            received_at,
            reply,
        };
        self.queues[index]
            .send(job)
            .await
            .map_err(|_| DbError::Unavailable("the writer stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| DbError::Unavailable("the writer stopped".to_owned()))?
    }
}

fn shard(environment: &str, cluster: &str, n: usize) -> usize {
    // FNV-1a: stable and cheap; only the spread matters.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in environment.bytes().chain([0]).chain(cluster.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % n.max(1) as u64) as usize
}

/// Commit positions already looked up: a commit's position never changes.
type Positions = HashMap<(String, String), i64>;

async fn writer(db: Db, mut queue: mpsc::Receiver<Job>) {
    let mut positions = Positions::new();
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if positions.len() > 100_000 {
            positions.clear();
        }
        match store(&db, &batch, &mut positions).await {
            Ok(outcomes) => {
                for (job, outcome) in batch.into_iter().zip(outcomes) {
                    let _ = job.reply.send(Ok(outcome));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, reports = batch.len(), "reports not stored");
                for job in batch {
                    let _ = job.reply.send(Err(match &e {
                        DbError::Unavailable(m) => DbError::Unavailable(m.clone()),
                        DbError::Url { url, reason } => DbError::Url {
                            url: url.clone(),
                            reason: reason.clone(),
                        },
                        DbError::Other(m) => DbError::Other(m.clone()),
                    }));
                }
            }
        }
    }
}

fn values(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|r| {
            let cells: Vec<String> = (1..=columns).map(|c| format!("${}", r * columns + c)).collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The latest state of an object, as far as this batch knows.
#[derive(Clone, Debug)]
struct Latest {
    state: String,
    commit: String,
    message: String,
    time: i64,
}

/// Stores a batch in one transaction with a handful of multi-row statements: register the
/// clusters, read the latest states, decide each report in order (so that several reports
/// of one object in a batch behave as if sent one by one), write the latest states, the
/// history rows and the platform states.
async fn store(db: &Db, batch: &[Job], positions: &mut Positions) -> Result<Vec<IngestResult>, DbError> {
    // Bound parameters stay under SQLite's 32,766 (10 a row at most).
    const _: () = assert!(MAX_BATCH * 10 < 32_766);
    let mut tx = db.pool().begin().await?;

    // 1. Clusters, once each (the last report's cluster type wins).
    let mut order: Vec<(&str, &str)> = Vec::new();
    let mut latest_of: HashMap<(&str, &str), (&str, i64)> = HashMap::new();
    for job in batch {
        let key = (job.report.environment.as_str(), job.report.cluster.as_str());
        if !latest_of.contains_key(&key) {
            order.push(key);
        }
        let seen = latest_of
            .get(&key)
            .map_or(job.received_at, |(_, t)| (*t).max(job.received_at));
        latest_of.insert(key, (job.report.cluster_type.as_str(), seen));
    }
    let sql = format!(
        "INSERT INTO clusters (environment, name, cluster_type, first_seen, last_seen) VALUES {} \
         ON CONFLICT (environment, name) DO UPDATE SET cluster_type = excluded.cluster_type, \
         last_seen = CASE WHEN excluded.last_seen > clusters.last_seen THEN excluded.last_seen ELSE clusters.last_seen END \
         RETURNING id, environment, name",
        values(order.len(), 5)
    );
    let mut q = sqlx::query(&sql);
    for key in &order {
        let (cluster_type, seen) = latest_of[key];
        q = q.bind(key.0).bind(key.1).bind(cluster_type).bind(seen).bind(seen);
    }
    let mut ids: HashMap<(String, String), i64> = HashMap::new();
    for row in q.fetch_all(&mut *tx).await? {
        ids.insert((row.try_get(1)?, row.try_get(2)?), row.try_get(0)?);
    }
    let id_of = |r: &Report| -> Result<i64, DbError> {
        ids.get(&(r.environment.clone(), r.cluster.clone()))
            .copied()
            .ok_or_else(|| {
                DbError::Other(format!(
                    "cluster {} of {} was not registered",
                    r.cluster, r.environment
                ))
            })
    };

    // 2. The stored latest states of these clusters' objects.
    let mut distinct: Vec<i64> = ids.values().copied().collect();
    distinct.sort_unstable();
    let sql = format!(
        "SELECT cluster_id, object, state, commit_sha, message, event_time FROM latest WHERE cluster_id IN ({})",
        (1..=distinct.len())
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut q = sqlx::query(&sql);
    for id in &distinct {
        q = q.bind(*id);
    }
    let mut current: HashMap<(i64, String), Latest> = HashMap::new();
    for row in q.fetch_all(&mut *tx).await? {
        current.insert(
            (row.try_get(0)?, row.try_get(1)?),
            Latest {
                state: row.try_get(2)?,
                commit: row.try_get(3)?,
                message: row.try_get(4)?,
                time: row.try_get(5)?,
            },
        );
    }

    // 3. Decide, report by report.
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut dirty: Vec<(i64, String)> = Vec::new();
    let mut newest: HashMap<(i64, String), usize> = HashMap::new();
    let mut history: Vec<(i64, usize)> = Vec::new();
    let mut platform: HashMap<i64, usize> = HashMap::new();
    for (index, job) in batch.iter().enumerate() {
        let r = &job.report;
        let id = id_of(r)?;
        let key = (id, r.object.clone());
        let (outcome, changed) = match current.get(&key) {
            None => (IngestResult::Stored, true),
            Some(l) => {
                let same = l.state == r.state.as_str() && l.commit == r.commit && l.message == r.message;
                // Flux stamps events to the second: a different report of the same second
                // came later (Progressing, then Succeeded), so it wins; the same one again is
                // a retry.
                if r.event_time > l.time || (r.event_time == l.time && !same) {
                    (IngestResult::Stored, !same)
                } else if same {
                    (IngestResult::Duplicate, false)
                } else {
                    (IngestResult::Older, false)
                }
            }
        };
        if outcome == IngestResult::Stored {
            current.insert(
                key.clone(),
                Latest {
                    state: r.state.as_str().to_owned(),
                    commit: r.commit.clone(),
                    message: r.message.clone(),
                    time: r.event_time,
                },
            );
            if newest.insert(key.clone(), index).is_none() {
                dirty.push(key);
            }
        }
        if changed || outcome == IngestResult::Older {
            history.push((id, index));
        }
        if changed && r.drives && !r.commit.is_empty() {
            let newer = platform
                .get(&id)
                .is_none_or(|&other| batch[other].report.event_time <= r.event_time);
            if newer {
                platform.insert(id, index);
            }
        }
        outcomes.push(outcome);
    }

    // 4. Latest states.
    if !dirty.is_empty() {
        let sql = format!(
            "INSERT INTO latest (cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at) \
             VALUES {} ON CONFLICT (cluster_id, object) DO UPDATE SET drives = excluded.drives, state = excluded.state, \
             revision = excluded.revision, commit_sha = excluded.commit_sha, message = excluded.message, \
             reason = excluded.reason, event_time = excluded.event_time, received_at = excluded.received_at \
             WHERE excluded.event_time >= latest.event_time",
            values(dirty.len(), 10)
        );
        let mut q = sqlx::query(&sql);
        for key in &dirty {
            q = bind_report(q, key.0, &batch[newest[key]]);
        }
        q.execute(&mut *tx).await?;
    }

    // 5. History.
    if !history.is_empty() {
        let sql = format!(
            "INSERT INTO reports (cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at) \
             VALUES {} ON CONFLICT (cluster_id, object, event_time, state, commit_sha) DO NOTHING",
            values(history.len(), 10)
        );
        let mut q = sqlx::query(&sql);
        for (id, index) in &history {
            q = bind_report(q, *id, &batch[*index]);
        }
        q.execute(&mut *tx).await?;
    }

    // 6. Platform states, for commits of the environment's GitOps branch (and, for an OCI
    // environment, for artifacts of its indexes: their position moves on with every index
    // that keeps them, so it is looked up each time and never remembered).
    let mut artifact_positions: HashMap<(String, String, String), i64> = HashMap::new();
    for &i in platform.values() {
        let r = &batch[i].report;
        if !r.commit.starts_with("sha256:") {
            continue;
        }
        let key = (r.environment.clone(), r.cluster_type.clone(), r.commit.clone());
        if artifact_positions.contains_key(&key) {
            continue;
        }
        if let Some(position) =
            crate::oci::artifact_position(&mut *tx, &r.environment, &r.cluster_type, &r.commit).await?
        {
            artifact_positions.insert(key, position);
        }
    }
    let mut wanted: Vec<(String, String)> = platform
        .values()
        .filter(|&&i| !batch[i].report.commit.starts_with("sha256:"))
        .map(|&i| {
            (
                batch[i].report.environment.clone(),
                batch[i].report.commit.clone(),
            )
        })
        .filter(|k| !positions.contains_key(k))
        .collect();
    wanted.sort();
    wanted.dedup();
    if !wanted.is_empty() {
        let sql = format!(
            "SELECT environment, sha, position FROM gitops_commits WHERE sha IN ({})",
            (1..=wanted.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut q = sqlx::query(&sql);
        for (_, sha) in &wanted {
            q = q.bind(sha.as_str());
        }
        for row in q.fetch_all(&mut *tx).await? {
            positions.insert((row.try_get(0)?, row.try_get(1)?), row.try_get(2)?);
        }
    }
    let mut updates: Vec<(i64, usize, i64)> = platform
        .iter()
        .filter_map(|(&id, &i)| {
            let r = &batch[i].report;
            let position = if r.commit.starts_with("sha256:") {
                artifact_positions.get(&(r.environment.clone(), r.cluster_type.clone(), r.commit.clone()))
            } else {
                positions.get(&(r.environment.clone(), r.commit.clone()))
            };
            position.map(|&p| (id, i, p))
        })
        .collect();
    updates.sort_unstable();
    if !updates.is_empty() {
        // One UPDATE … FROM (VALUES …) for the lot; the same rule as `set_platform_state`.
        let sql = format!(
            "UPDATE clusters SET state = v.column2, revision = v.column3, commit_sha = v.column4, \
             position = v.column5, message = v.column6, \
             since = CASE WHEN clusters.state = v.column2 AND clusters.commit_sha = v.column4 THEN clusters.since ELSE v.column7 END, \
             reported_at = v.column7 FROM (VALUES {}) AS v \
             WHERE clusters.id = v.column1 AND (clusters.reported_at IS NULL OR clusters.reported_at <= v.column7)",
            values(updates.len(), 7)
        );
        let mut q = sqlx::query(&sql);
        for (id, index, position) in &updates {
            let r = &batch[*index].report;
            q = q
                .bind(*id)
                .bind(r.state.as_str())
                .bind(&r.revision)
                .bind(&r.commit)
                .bind(*position)
                .bind(&r.message)
                .bind(r.event_time);
        }
        q.execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(outcomes)
}

/// Makes `r` (whose commit is at `position` of the environment's branch) the cluster's
/// platform state, unless a newer one is stored.
pub(crate) async fn set_platform_state(
    tx: &mut Transaction<'static, Any>,
    cluster_id: i64,
    r: &Report,
    position: i64,
) -> Result<(), DbError> {
    sqlx::query(
        "UPDATE clusters SET state = $1, revision = $2, commit_sha = $3, position = $4, message = $5, \
         since = CASE WHEN state = $1 AND commit_sha = $3 THEN since ELSE $6 END, reported_at = $6 \
         WHERE id = $7 AND (reported_at IS NULL OR reported_at <= $6)",
    )
    .bind(r.state.as_str())
    .bind(&r.revision)
    .bind(&r.commit)
    .bind(position)
    .bind(&r.message)
    .bind(r.event_time)
    .bind(cluster_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_in_range() {
        for n in 1..5 {
            let a = shard("dev", "drone-1", n);
            assert!(a < n);
            assert_eq!(a, shard("dev", "drone-1", n));
        }
    }
}
