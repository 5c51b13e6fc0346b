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

use sqlx::{Any, Row, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::db::{Db, DbError};
use crate::model::Report;

/// Reports taken into one transaction at most.
pub const MAX_BATCH: usize = 1024;

/// What happened to a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It is the object's latest state now.
    Stored,
    /// The same as the stored latest state (a retry or a repeated event): nothing new.
    Duplicate,
    /// Older than the stored latest state: kept in the history only.
    Older,
}

impl Outcome {
    /// The name used in responses.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Stored => "stored",
            Outcome::Duplicate => "duplicate",
            Outcome::Older => "older",
        }
    }
}

struct Job {
    report: Report,
    received_at: i64,
    reply: oneshot::Sender<Result<Outcome, DbError>>,
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
    pub async fn submit(&self, report: Report, received_at: i64) -> Result<Outcome, DbError> {
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

async fn store(db: &Db, batch: &[Job], positions: &mut Positions) -> Result<Vec<Outcome>, DbError> {
    let mut tx = db.pool().begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        outcomes.push(store_one(&mut tx, &job.report, job.received_at, positions).await?);
    }
    tx.commit().await?;
    Ok(outcomes)
}

async fn store_one(
    tx: &mut Transaction<'static, Any>,
    r: &Report,
    now: i64,
    positions: &mut Positions,
) -> Result<Outcome, DbError> {
    let cluster_id: i64 = sqlx::query(
        "INSERT INTO clusters (environment, name, cluster_type, first_seen, last_seen) \
         VALUES ($1, $2, $3, $4, $4) \
         ON CONFLICT (environment, name) DO UPDATE SET cluster_type = excluded.cluster_type, \
         last_seen = CASE WHEN excluded.last_seen > clusters.last_seen THEN excluded.last_seen ELSE clusters.last_seen END \
         RETURNING id",
    )
    .bind(&r.environment)
    .bind(&r.cluster)
    .bind(&r.cluster_type)
    .bind(now)
    .fetch_one(&mut **tx)
    .await?
    .try_get(0)?;

    let latest = sqlx::query(
        "SELECT state, commit_sha, message, event_time FROM latest WHERE cluster_id = $1 AND object = $2",
    )
    .bind(cluster_id)
    .bind(&r.object)
    .fetch_optional(&mut **tx)
    .await?;
    let (outcome, changed) = match latest {
        None => (Outcome::Stored, true),
        Some(row) => {
            let state: String = row.try_get(0)?;
            let commit: String = row.try_get(1)?;
            let message: String = row.try_get(2)?;
            let time: i64 = row.try_get(3)?;
            let same = state == r.state.as_str() && commit == r.commit && message == r.message;
            if r.event_time > time {
                (Outcome::Stored, !same)
            } else if same {
                (Outcome::Duplicate, false)
            } else {
                (Outcome::Older, false)
            }
        }
    };
    let drives = i64::from(r.drives);
    if outcome == Outcome::Stored {
        sqlx::query(
            "INSERT INTO latest (cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (cluster_id, object) DO UPDATE SET drives = excluded.drives, state = excluded.state, \
             revision = excluded.revision, commit_sha = excluded.commit_sha, message = excluded.message, \
             reason = excluded.reason, event_time = excluded.event_time, received_at = excluded.received_at \
             WHERE excluded.event_time > latest.event_time",
        )
        .bind(cluster_id)
        .bind(&r.object)
        .bind(drives)
        .bind(r.state.as_str())
        .bind(&r.revision)
        .bind(&r.commit)
        .bind(&r.message)
        .bind(&r.reason)
        .bind(r.event_time)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    }
    if changed || outcome == Outcome::Older {
        sqlx::query(
            "INSERT INTO reports (cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (cluster_id, object, event_time, state, commit_sha) DO NOTHING",
        )
        .bind(cluster_id)
        .bind(&r.object)
        .bind(drives)
        .bind(r.state.as_str())
        .bind(&r.revision)
        .bind(&r.commit)
        .bind(&r.message)
        .bind(&r.reason)
        .bind(r.event_time)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    }
    if changed && r.drives && !r.commit.is_empty() {
        let key = (r.environment.clone(), r.commit.clone());
        let position = match positions.get(&key) {
            Some(p) => Some(*p),
            None => {
                let p: Option<i64> =
                    sqlx::query("SELECT position FROM gitops_commits WHERE environment = $1 AND sha = $2")
                        .bind(&r.environment)
                        .bind(&r.commit)
                        .fetch_optional(&mut **tx)
                        .await?
                        .map(|row| row.try_get(0))
                        .transpose()?;
                if let Some(p) = p {
                    positions.insert(key, p);
                }
                p
            }
        };
        if let Some(position) = position {
            set_platform_state(tx, cluster_id, r, position).await?;
        }
    }
    Ok(outcome)
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
