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
use sqlx::pool::PoolConnection;
use sqlx::{Any, Row, Transaction};

use tokio::sync::{mpsc, oneshot};

use crate::db::{Backend, Db, DbError};
use crate::model::Report;

/// Reports taken into one transaction at most.
pub const MAX_BATCH: usize = 1024;

struct Job {
    report: Report,
    received_at: i64,
    reply: oneshot::Sender<Result<IngestResult, DbError>>,
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

/// Commit positions already looked up, by environment and commit. A commit's position never
/// changes, but a rewind of its branch can take the commit off the branch
/// ([`crate::gitops`]): then every writer of this process forgets what it looked up
/// ([`forget_positions`]) before its next batch's lookup.
#[derive(Debug, Default)]
struct Positions {
    /// The [`REWINDS`] the positions were looked up after.
    rewinds: u64,
    commits: HashMap<String, HashMap<String, i64>>,
}

impl Positions {
    fn new() -> Positions {
        Positions::default()
    }

    /// Forgets every position if a rewind was stored since they were looked up.
    fn forget_if_rewound(&mut self) {
        let rewinds = REWINDS.load(std::sync::atomic::Ordering::SeqCst);
        if rewinds != self.rewinds {
            self.commits.clear();
            self.rewinds = rewinds;
        }
    }
}

impl std::ops::Deref for Positions {
    type Target = HashMap<String, HashMap<String, i64>>;

    fn deref(&self) -> &Self::Target {
        &self.commits
    }
}

impl std::ops::DerefMut for Positions {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.commits
    }
}

/// Rewinds stored by this process's GitOps refreshes (see [`forget_positions`]).
static REWINDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Makes every writer of this process forget the commit positions it looked up, before the
/// lookup of its next batch: a GitOps refresh calls it while it takes commits off a rewound
/// branch, before it commits. On SQLite a writer checks under the write lock, which the
/// refresh holds until it commits, so no batch of this process uses a position of a commit the
/// branch no longer has. (A batch of another process, or one on PostgreSQL that found every
/// position in its memory, may still do so once; the next refresh moves such a cluster, as it
/// moves the ones the rewind found.)
pub(crate) fn forget_positions() {
    REWINDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// SQLite's page cache on a writer's connection, in KiB: the pages of the clusters' indexes a
/// batch descends through stay in memory between batches instead of being read again. Not
/// more: at the end of every transaction SQLite truncates the cache to the database's size,
/// and with many pages cached that walks the whole cache (`pcache1TruncateUnsafe` was a tenth
/// of the writer thread's time with 64 MiB at 100,000 clusters), while a page missing from it
/// is one read from the operating system's cache. With 8 MiB the hub took 60 µs of CPU per
/// update at 100,000 clusters instead of 67, and replaying the benchmark's batches at a
/// million clusters took less CPU than with 64 MiB.
const WRITER_CACHE_KIB: u32 = 8 * 1024;

/// SQLite's statement journal on a writer's connection in memory, not in a temporary file: a
/// batch's statements each change hundreds of pages, and SQLite keeps their old contents
/// until the statement ends (to undo just that statement if it fails), spilling past 64 KiB
/// to a new file in `/var/tmp` per statement: on the disk, about one page written there for
/// every two written to the WAL, and an open and unlink per batch. (The transaction's own
/// durability is the WAL's, not this journal's.)
const WRITER_PRAGMAS: &str = "PRAGMA temp_store = MEMORY";

/// How long a writer keeps its connection without a report to store: then it gives it back to
/// the pool (which closing the database waits for).
const IDLE_RELEASE: std::time::Duration = std::time::Duration::from_secs(1);

/// A writer's connection, kept between batches, and the page cache size it had in the pool.
struct Held {
    connection: PoolConnection<Any>,
    pooled_cache: Option<i64>,
}

async fn writer(db: Db, mut queue: mpsc::Receiver<Job>) {
    let mut positions = Positions::new();
    // The writer keeps its connection while reports keep coming: a pooled one would come back
    // in turn after other connections wrote (SQLite then drops its whole page cache), and
    // would be pinged at each acquisition. It is closed after a failed batch, given back after
    // `IDLE_RELEASE` without reports or once the pool closes, and taken again.
    let mut connection: Option<Held> = None;
    loop {
        let next = if connection.is_some() {
            match tokio::time::timeout(IDLE_RELEASE, queue.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    release(connection.take()).await;
                    continue;
                }
            }
        } else {
            queue.recv().await
        };
        let Some(first) = next else { break };
        if db.pool().is_closed() {
            release(connection.take()).await;
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if positions.values().map(HashMap::len).sum::<usize>() > 100_000 {
            positions.clear();
        }
        match store(&db, &mut connection, &batch, &mut positions).await {
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
    release(connection.take()).await;
}

/// Gives a writer's connection back to the pool, with the page cache and temporary store it
/// had there.
async fn release(held: Option<Held>) {
    let Some(mut held) = held else { return };
    if let Some(size) = held.pooled_cache {
        let mut reset = sqlx::query(&format!("PRAGMA cache_size = {size}"))
            .execute(&mut *held.connection)
            .await
            .is_ok();
        if reset {
            reset = sqlx::query("PRAGMA temp_store = DEFAULT")
                .execute(&mut *held.connection)
                .await
                .is_ok();
        }
        if !reset {
            held.connection.close_on_drop();
        }
    }
}

/// A column of a batch's rows: its name, and whether it is an integer (PostgreSQL reads every
/// JSON value as text and casts it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Column(pub &'static str, pub bool);

/// A batch's rows as a table `b` with `columns`, read from the statement's one parameter: a
/// JSON array of rows, each an array of the columns' values in order (`null` for NULL). A
/// batch is then one statement of one shape whatever its size: one round trip to the database
/// (on SQLite, one hop to the driver's thread) instead of one per run of rows, prepared once
/// per connection (but PostgreSQL's read, planned per batch: see `read_stored`), and one
/// parameter to bind instead of thirteen a row.
///
/// Each row is parsed once. SQLite's `json_each` gives a row as JSON text, and a plain subquery
/// is folded into the statement, so every `->>` of a column wrote the row's text out again and
/// parsed it: the rows are materialized first, and the `->>` of one row's text then share one
/// parse (SQLite keeps the last few). PostgreSQL reads the parameter as binary JSON (`jsonb`),
/// parsed once, where from text JSON (`json`) every `->>` parsed the row's text again. That was
/// most of the cost of reading a row: on SQLite 5.5 µs a row of twelve columns, now 2.4; on
/// PostgreSQL 15 µs, now 1.7.
pub(crate) fn batch_rows(backend: Backend, columns: &[Column]) -> String {
    batch_rows_of(backend, columns, 1)
}

/// [`batch_rows`] from the statement's parameter `parameter` (on PostgreSQL, where the
/// parameters are numbered; SQLite's are taken in order).
fn batch_rows_of(backend: Backend, columns: &[Column], parameter: usize) -> String {
    let mut out = String::from(match backend {
        Backend::Sqlite => "(WITH r AS MATERIALIZED (SELECT value FROM json_each(?)) SELECT ",
        Backend::Postgres => "(SELECT ",
    });
    for (i, &Column(name, integer)) in columns.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&match (backend, integer) {
            (Backend::Postgres, true) => format!("(value ->> {i})::BIGINT AS {name}"),
            _ => format!("value ->> {i} AS {name}"),
        });
    }
    match backend {
        Backend::Sqlite => out.push_str(" FROM r) AS b"),
        Backend::Postgres => out.push_str(&format!(
            " FROM jsonb_array_elements(${parameter}::jsonb) AS e (value)) AS b"
        )),
    }
    out
}

/// `($1, $2, …), (…)`: `rows` rows of `columns` placeholders, numbered from `$1`.
pub(crate) fn values(rows: usize, columns: usize) -> String {
    let mut out = String::with_capacity(rows * columns * 6);
    for r in 0..rows {
        if r > 0 {
            out.push_str(", ");
        }
        out.push('(');
        for c in 1..=columns {
            if c > 1 {
                out.push_str(", ");
            }
            out.push('$');
            out.push_str(&(r * columns + c).to_string());
        }
        out.push(')');
    }
    out
}

/// The latest state of an object, as far as this batch knows.
#[derive(Clone, Debug)]
struct Latest {
    state: String,
    commit: String,
    message: String,
    time: i64,
}

/// A cluster of the batch.
#[derive(Debug)]
struct Entry<'a> {
    environment: &'a str,
    name: &'a str,
    /// The last report's cluster type.
    cluster_type: &'a str,
    /// The latest receipt.
    seen: i64,
    /// The report that becomes its platform state (subject to the stored one being older),
    /// and its commit's position.
    platform: Option<(usize, i64)>,
    /// Its id, when it was stored before this batch.
    id: Option<i64>,
}

/// A platform state replaces the stored one unless that one is of a later event.
const APPLY: &str = "excluded.reported_at IS NOT NULL AND (clusters.reported_at IS NULL OR clusters.reported_at <= excluded.reported_at)";

/// The columns of a batch's clusters (see [`clusters_upsert`]).
const CLUSTER_ROW: [Column; 10] = [
    Column("environment", false),
    Column("name", false),
    Column("cluster_type", false),
    Column("seen", true),
    Column("state", false),
    Column("revision", false),
    Column("commit_sha", false),
    Column("position", true),
    Column("message", false),
    Column("reported_at", true),
];

/// A cluster of a batch as [`clusters_upsert`] reads it: environment, name, cluster type,
/// receipt, then the platform state (state, revision, commit, position, message, event
/// time), all NULL when the batch does not set it.
type ClusterRow<'a> = (
    &'a str,
    &'a str,
    &'a str,
    i64,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<i64>,
    Option<&'a str>,
    Option<i64>,
);

/// Registers the batch's clusters or updates them (last seen, cluster type, fresh again,
/// platform state) in one statement: a new cluster costs one insert, as an update costs one
/// update; the triggers move them between their groups.
pub(crate) fn clusters_upsert(backend: Backend) -> String {
    let platform = |column: &str| {
        format!("{column} = CASE WHEN {APPLY} THEN excluded.{column} ELSE clusters.{column} END")
    };
    format!(
        "INSERT INTO clusters (environment, name, cluster_type, first_seen, last_seen, changed_at, \
         state, revision, commit_sha, position, message, reported_at, since) \
         SELECT environment, name, cluster_type, seen, seen, seen, state, revision, commit_sha, position, \
         message, reported_at, reported_at FROM {} WHERE true \
         ON CONFLICT (environment, name) DO UPDATE SET cluster_type = excluded.cluster_type, \
         last_seen = CASE WHEN excluded.last_seen > clusters.last_seen THEN excluded.last_seen ELSE clusters.last_seen END, \
         changed_at = excluded.changed_at, stale = 0, {}, {}, {}, {}, {}, \
         since = CASE WHEN {APPLY} THEN CASE WHEN clusters.state = excluded.state AND clusters.commit_sha = excluded.commit_sha \
         THEN clusters.since ELSE excluded.reported_at END ELSE clusters.since END, \
         reported_at = CASE WHEN {APPLY} THEN excluded.reported_at ELSE clusters.reported_at END",
        batch_rows(backend, &CLUSTER_ROW),
        platform("state"),
        platform("revision"),
        platform("commit_sha"),
        platform("position"),
        platform("message"),
    )
}

/// The batch's stored clusters with the latest states of their objects, as one JSON text:
/// an array of `[entry, cluster id, object, state, commit, message, event time]` (the object's
/// fields `null` for a cluster without one), read through the clusters' unique index and the
/// latest states' key. The batch is rows of (entry, environment, name).
pub(crate) fn stored_latest(backend: Backend) -> String {
    let rows = batch_rows(
        backend,
        &[
            Column("entry", true),
            Column("environment", false),
            Column("name", false),
        ],
    );
    let fields = "b.entry, c.id, l.object, l.state, l.commit_sha, l.message, l.event_time";
    let aggregate = match backend {
        Backend::Sqlite => format!("json_group_array(json_array({fields}))"),
        Backend::Postgres => format!("COALESCE(json_agg(json_build_array({fields}))::TEXT, '[]')"),
    };
    format!(
        "SELECT {aggregate} FROM {rows} \
         JOIN clusters c ON c.environment = b.environment AND c.name = b.name \
         LEFT JOIN latest l ON l.cluster_id = c.id"
    )
}

/// What [`stored_latest`] gives per row.
type StoredRow = (
    usize,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
);

/// The columns of a report row: its cluster's id when the batch knows it (the cluster was
/// stored before), else its environment and name (the batch registers it), then the report.
const REPORT_ROW: [Column; 12] = [
    Column("cluster_id", true),
    Column("environment", false),
    Column("name", false),
    Column("object", false),
    Column("drives", true),
    Column("state", false),
    Column("revision", false),
    Column("commit_sha", false),
    Column("message", false),
    Column("reason", false),
    Column("event_time", true),
    Column("received_at", true),
];

/// A report row (see [`REPORT_ROW`]).
type ReportRow<'a> = (
    Option<i64>,
    &'a str,
    &'a str,
    &'a str,
    i64,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    i64,
    i64,
);

fn report_row(cluster: Option<i64>, job: &Job) -> ReportRow<'_> {
    let r = &job.report;
    (
        cluster,
        &r.environment,
        &r.cluster,
        &r.object,
        i64::from(r.drives),
        r.state.as_str(),
        &r.revision,
        &r.commit,
        &r.message,
        &r.reason,
        r.event_time,
        job.received_at,
    )
}

const REPORT_COLUMNS: &str =
    "cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at";

/// [`REPORT_COLUMNS`] from a batch's report rows: a cluster the batch registered is found by
/// its key (the clusters' unique index, whose pages the upsert just wrote), so that the batch
/// needs no statement to read the new ids back.
const REPORT_VALUES: &str = "COALESCE(cluster_id, (SELECT c.id FROM clusters c \
     WHERE c.environment = b.environment AND c.name = b.name)), \
     object, drives, state, revision, commit_sha, message, reason, event_time, received_at";

/// A latest state replaces the stored one unless that one is of a later event.
const LATEST_CONFLICT: &str = "ON CONFLICT (cluster_id, object) DO UPDATE SET drives = excluded.drives, \
     state = excluded.state, revision = excluded.revision, commit_sha = excluded.commit_sha, \
     message = excluded.message, reason = excluded.reason, event_time = excluded.event_time, \
     received_at = excluded.received_at WHERE excluded.event_time >= latest.event_time";

/// An identical history row again adds nothing.
const HISTORY_CONFLICT: &str = "ON CONFLICT (cluster_id, object, event_time, state, commit_sha) DO NOTHING";

/// Writes the latest states of a batch's objects, each unless a later one is stored.
pub(crate) fn latest_upsert(backend: Backend) -> String {
    format!(
        "INSERT INTO latest ({REPORT_COLUMNS}) SELECT {REPORT_VALUES} FROM {} WHERE true {LATEST_CONFLICT}",
        batch_rows(backend, &REPORT_ROW)
    )
}

/// Adds a batch's history rows (an identical row again adds nothing).
pub(crate) fn history_insert(backend: Backend) -> String {
    format!(
        "INSERT INTO reports ({REPORT_COLUMNS}) SELECT {REPORT_VALUES} FROM {} WHERE true {HISTORY_CONFLICT}",
        batch_rows(backend, &REPORT_ROW)
    )
}

/// A batch's writes on PostgreSQL as one statement, so one round trip, and, unless the batch
/// looked up a commit's position, its own transaction (one commit, and no `BEGIN` and `COMMIT`
/// round trips): the clusters upsert returns every cluster of the batch (registered or
/// updated) with its id, which the latest states and the history rows of the clusters the
/// batch registers take (the statement's parts all read the database as it was before it,
/// so they could not find the new clusters in the table). Parameters: the clusters, the
/// latest states, the history rows (each `[]` for none).
pub(crate) fn postgres_writes() -> String {
    let backend = Backend::Postgres;
    let values = "COALESCE(b.cluster_id, c.id), b.object, b.drives, b.state, b.revision, b.commit_sha, \
         b.message, b.reason, b.event_time, b.received_at";
    let rows = |parameter| {
        format!(
            "{} LEFT JOIN c ON c.environment = b.environment AND c.name = b.name",
            batch_rows_of(backend, &REPORT_ROW, parameter)
        )
    };
    format!(
        "WITH c AS ({} RETURNING id, environment, name), \
         l AS (INSERT INTO latest ({REPORT_COLUMNS}) SELECT {values} FROM {} WHERE true {LATEST_CONFLICT}), \
         h AS (INSERT INTO reports ({REPORT_COLUMNS}) SELECT {values} FROM {} WHERE true {HISTORY_CONFLICT}) \
         SELECT 1",
        clusters_upsert(backend),
        rows(2),
        rows(3),
    )
}

/// A batch's writes on SQLite: the clusters upsert, the latest states and the history as one
/// query of three statements (each with its own JSON parameter, `[]` for no rows), which the
/// driver's thread runs in a row: one hop to it and back instead of three.
pub(crate) fn sqlite_writes() -> String {
    format!(
        "{}; {}; {}",
        clusters_upsert(Backend::Sqlite),
        latest_upsert(Backend::Sqlite),
        history_insert(Backend::Sqlite)
    )
}

/// The rows of a batch as the JSON text its statement reads.
fn json_rows<T: serde::Serialize>(rows: &[T]) -> Result<String, DbError> {
    serde_json::to_string(rows).map_err(|e| DbError::Other(format!("encoding a batch: {e}")))
}

/// Reads [`stored_latest`] for `entries` (index, environment, name); on SQLite, begins the
/// batch's transaction in the same query (see [`store_on`]): one hop to the driver's thread and
/// back.
///
/// On PostgreSQL the read is planned for each batch, with the table as it is then (an unnamed
/// statement), not kept prepared: after five executions a prepared statement runs a *generic*
/// plan, made for whatever size the tables had then, and a writer prepares it when the hub
/// starts, often on an empty or small fleet. For a small `clusters` table that plan is a hash
/// join over a sequential scan of the clusters, and it stayed while the fleet grew (until an
/// automatic `ANALYZE` happened to invalidate it): at 50,000 clusters 12.6 ms a batch instead
/// of 0.1 ms, which made the server, not the hub, the bottleneck of ingest. Planning the read
/// takes about 0.3 ms, and the driver parses and describes the unnamed statement in a round
/// trip of its own before running it. (Keeping it prepared with `plan_cache_mode` set to
/// `force_custom_plan` on the writer's connection would save that round trip but plan the
/// writes on every batch too, 0.46 ms more.) (The writes find every row by a unique index, as `ON CONFLICT` must,
/// whatever the plan; SQLite plans each statement once, by its indexes, not by the table's
/// size.)
async fn read_stored(
    backend: Backend,
    connection: &mut sqlx::AnyConnection,
    entries: &[(usize, &str, &str)],
) -> Result<Vec<StoredRow>, DbError> {
    let read = stored_latest(backend);
    let sql = match backend {
        Backend::Sqlite => format!("BEGIN IMMEDIATE; {read}"),
        Backend::Postgres => read,
    };
    // Every row the query gives: the driver's `fetch_one` would stop at the first result, which
    // on SQLite is the `BEGIN`'s.
    let rows = sqlx::query(&sql)
        .persistent(backend == Backend::Sqlite)
        .bind(json_rows(entries)?)
        .fetch_all(&mut *connection)
        .await?;
    let text: String = rows
        .first()
        .ok_or_else(|| DbError::Other("reading the stored clusters: no answer".to_owned()))?
        .try_get(0)?;
    serde_json::from_str(&text).map_err(|e| DbError::Other(format!("reading the stored clusters: {e}")))
}

/// Stores a batch in one transaction with four statements, each taking the batch's rows as one
/// JSON parameter (see [`batch_rows`]): read the batch's stored clusters with their objects'
/// latest states; decide each report in order (so that several reports of one object in a
/// batch behave as if sent one by one); upsert the clusters (with their platform states), and
/// write the latest states and the history rows. On SQLite that is two queries, each one hop
/// to the driver's thread and back: `BEGIN IMMEDIATE` with the read, and the three writes with
/// `COMMIT`. On PostgreSQL it is three round trips: the read (two: the driver parses and
/// describes a statement that is not kept prepared before running it, see [`read_stored`]),
/// and the three writes as one statement ([`postgres_writes`]) that is its own transaction. The read need not be in it:
/// the latest states it decides from are written by this writer only (reports are spread
/// over the writers by cluster), and the clusters upsert decides each platform state from the
/// row as it is when written.
///
/// The writes hold the write lock from the moment a commit's position is looked up (SQLite:
/// `BEGIN IMMEDIATE`, before the read; PostgreSQL: a transaction begun for the lookup, with a
/// share lock on `gitops_commits`), so that a GitOps refresh storing a commit either comes
/// first (and the position is found) or sees this batch's reports (and applies them).
async fn store(
    db: &Db,
    kept: &mut Option<Held>,
    batch: &[Job],
    positions: &mut Positions,
) -> Result<Vec<IngestResult>, DbError> {
    let mut held = match kept.take() {
        Some(held) => held,
        None => {
            let mut connection = db.pool().acquire().await?;
            let mut pooled_cache = None;
            if db.backend() == Backend::Sqlite {
                pooled_cache = Some(
                    sqlx::query("PRAGMA cache_size")
                        .fetch_one(&mut *connection)
                        .await?
                        .try_get::<i64, _>(0)?,
                );
                sqlx::query(&format!("PRAGMA cache_size = -{WRITER_CACHE_KIB}"))
                    .execute(&mut *connection)
                    .await?;
                sqlx::query(WRITER_PRAGMAS).execute(&mut *connection).await?;
            }
            Held {
                connection,
                pooled_cache,
            }
        }
    };
    // The batch's transaction is begun and committed by statements of its own (so that they
    // share a hop with the batch's read and writes), not by the driver: until it is committed,
    // the connection is closed if dropped (the writer stopped mid-batch), which rolls the
    // transaction back, instead of going back to the pool inside it.
    let mut open = OpenTransaction {
        connection: &mut held.connection,
        committed: false,
    };
    let stored = store_on(db, open.connection, batch, positions).await;
    // A failed batch can leave its connection in a state the driver no longer tracks (SQLite
    // rolls a transaction back by itself on a full disk): it is never used again (dropping
    // `open` closes it), so that nothing is acknowledged that a later batch did not really
    // store.
    open.committed = stored.is_ok();
    drop(open);
    if stored.is_ok() {
        *kept = Some(held);
    }
    stored
}

/// A writer's connection while its batch's transaction is open: closed if dropped before the
/// commit.
struct OpenTransaction<'a> {
    connection: &'a mut PoolConnection<Any>,
    committed: bool,
}

impl Drop for OpenTransaction<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.connection.close_on_drop();
        }
    }
}

/// [`store`] on `connection`.
async fn store_on(
    db: &Db,
    connection: &mut sqlx::AnyConnection,
    batch: &[Job],
    positions: &mut Positions,
) -> Result<Vec<IngestResult>, DbError> {
    let tx = connection;

    // 1. The batch's clusters, once each.
    let mut entries: Vec<Entry<'_>> = Vec::new();
    let mut entry_of: HashMap<(&str, &str), usize> = HashMap::new();
    let mut cluster_of: Vec<usize> = Vec::with_capacity(batch.len());
    for job in batch {
        let r = &job.report;
        let key = (r.environment.as_str(), r.cluster.as_str());
        let index = *entry_of.entry(key).or_insert_with(|| {
            entries.push(Entry {
                environment: key.0,
                name: key.1,
                cluster_type: &r.cluster_type,
                seen: job.received_at,
                platform: None,
                id: None,
            });
            entries.len() - 1
        });
        let entry = &mut entries[index];
        entry.cluster_type = &r.cluster_type;
        entry.seen = entry.seen.max(job.received_at);
        cluster_of.push(index);
    }

    // 2. The stored latest states of their objects.
    let backend = db.backend();
    let keys: Vec<(usize, &str, &str)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i, e.environment, e.name))
        .collect();
    let mut current: HashMap<(usize, String), Latest> = HashMap::new();
    for (index, id, object, state, commit, message, time) in read_stored(backend, &mut *tx, &keys).await? {
        let Some(entry) = entries.get_mut(index) else {
            continue;
        };
        entry.id = Some(id);
        if let (Some(object), Some(state), Some(commit), Some(message), Some(time)) =
            (object, state, commit, message, time)
        {
            current.insert(
                (index, object),
                Latest {
                    state,
                    commit,
                    message,
                    time,
                },
            );
        }
    }

    // 3. Decide, report by report.
    let mut outcomes = Vec::with_capacity(batch.len());
    let mut dirty: Vec<(usize, String)> = Vec::new();
    let mut newest: HashMap<(usize, String), usize> = HashMap::new();
    let mut history: Vec<usize> = Vec::new();
    let mut platform: HashMap<usize, usize> = HashMap::new();
    for (index, job) in batch.iter().enumerate() {
        let r = &job.report;
        let key = (cluster_of[index], r.object.clone());
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
            history.push(index);
        }
        if changed && r.drives && !r.commit.is_empty() {
            let newer = platform
                .get(&cluster_of[index])
                .is_none_or(|&other| batch[other].report.event_time <= r.event_time);
            if newer {
                platform.insert(cluster_of[index], index);
            }
        }
        outcomes.push(outcome);
    }

    // 4. The positions of the platform states' commits on their environment's branch (under
    // the write lock on SQLite: a refresh storing a rewind has committed, or has not begun).
    positions.forget_if_rewound();
    let known = |positions: &Positions, r: &Report| {
        positions
            .get(&r.environment)
            .and_then(|p| p.get(&r.commit))
            .copied()
    };
    // An OCI environment's clusters report artifacts of their cluster type: their position
    // moves on with every index that keeps them, so it is looked up each time and never
    // remembered (see `crate::oci`).
    let mut artifact_positions: HashMap<(&str, &str, &str), i64> = HashMap::new();
    for &i in platform.values() {
        let r = &batch[i].report;
        if !is_artifact(r) {
            continue;
        }
        let key = (r.environment.as_str(), r.cluster_type.as_str(), r.commit.as_str());
        if artifact_positions.contains_key(&key) {
            continue;
        }
        if let Some(position) =
            crate::oci::artifact_position(&mut *tx, &r.environment, &r.cluster_type, &r.commit).await?
        {
            artifact_positions.insert(key, position);
        }
    }
    // On PostgreSQL, whether the batch's writes go in a transaction begun for the lookup.
    let mut in_transaction = false;
    let mut wanted: Vec<(&str, &str)> = platform
        .values()
        .map(|&i| &batch[i].report)
        .filter(|r| !is_artifact(r) && known(positions, r).is_none())
        .map(|r| (r.environment.as_str(), r.commit.as_str()))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    if !wanted.is_empty() {
        if db.backend() == Backend::Postgres {
            // A refresh storing these commits waits for this batch (and then applies its
            // reports), or this batch waits for it (and finds them).
            sqlx::query("BEGIN").execute(&mut *tx).await?;
            in_transaction = true;
            sqlx::query("LOCK TABLE gitops_commits IN SHARE MODE")
                .execute(&mut *tx)
                .await?;
        }
        let sql = format!(
            "WITH wanted (environment, sha) AS (VALUES {}) SELECT g.environment, g.sha, g.position FROM wanted \
             JOIN gitops_commits g ON g.environment = wanted.environment AND g.sha = wanted.sha",
            values(wanted.len(), 2)
        );
        let mut q = sqlx::query(&sql);
        for (environment, sha) in &wanted {
            q = q.bind(*environment).bind(*sha);
        }
        for row in q.fetch_all(&mut *tx).await? {
            positions
                .entry(row.try_get(0)?)
                .or_default()
                .insert(row.try_get(1)?, row.try_get(2)?);
        }
    }
    for (&entry, &index) in &platform {
        let r = &batch[index].report;
        let position = if is_artifact(r) {
            artifact_positions
                .get(&(r.environment.as_str(), r.cluster_type.as_str(), r.commit.as_str()))
                .copied()
        } else {
            known(positions, r)
        };
        if let Some(position) = position {
            entries[entry].platform = Some((index, position));
        }
    }

    // 5. The clusters, in a stable order (concurrent writers lock them in the same order);
    // 6. the latest states; 7. the history.
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_unstable_by_key(|&i| (entries[i].environment, entries[i].name));
    let rows: Vec<ClusterRow<'_>> = order
        .iter()
        .map(|&i| {
            let e = &entries[i];
            let platform = e
                .platform
                .map(|(index, position)| (&batch[index].report, position));
            (
                e.environment,
                e.name,
                e.cluster_type,
                e.seen,
                platform.map(|(r, _)| r.state.as_str()),
                platform.map(|(r, _)| r.revision.as_str()),
                platform.map(|(r, _)| r.commit.as_str()),
                platform.map(|(_, position)| position),
                platform.map(|(r, _)| r.message.as_str()),
                platform.map(|(r, _)| r.event_time),
            )
        })
        .collect();
    let latest: Vec<ReportRow<'_>> = dirty
        .iter()
        .map(|key| report_row(entries[key.0].id, &batch[newest[key]]))
        .collect();
    let history: Vec<ReportRow<'_>> = history
        .iter()
        .map(|&index| report_row(entries[cluster_of[index]].id, &batch[index]))
        .collect();
    match backend {
        Backend::Sqlite => {
            sqlx::query(&format!("{}; COMMIT", sqlite_writes()))
                .bind(json_rows(&rows)?)
                .bind(json_rows(&latest)?)
                .bind(json_rows(&history)?)
                .execute(&mut *tx)
                .await?;
        }
        Backend::Postgres => {
            sqlx::query(&postgres_writes())
                .bind(json_rows(&rows)?)
                .bind(json_rows(&latest)?)
                .bind(json_rows(&history)?)
                .execute(&mut *tx)
                .await?;
            if in_transaction {
                sqlx::query("COMMIT").execute(&mut *tx).await?;
            }
        }
    }
    Ok(outcomes)
}

/// Whether a report names an OCI artifact (`sha256:<hex>`) rather than a git commit.
fn is_artifact(report: &Report) -> bool {
    report.commit.starts_with("sha256:")
}

/// A report that becomes its cluster's platform state: (cluster id, state, revision, commit,
/// message, event time, the commit's position).
pub(crate) type PlatformState = (i64, String, String, String, String, i64, i64);

/// Makes each report its cluster's platform state, unless a newer one is stored, in one
/// statement (at `now`, the moment the triggers record for the clusters that move).
pub(crate) async fn set_platform_states(
    tx: &mut Transaction<'_, Any>,
    states: &[PlatformState],
    now: i64,
) -> Result<(), DbError> {
    for chunk in states.chunks(MAX_BATCH) {
        let sql = format!(
            "UPDATE clusters SET state = v.column2, revision = v.column3, commit_sha = v.column4, \
             position = v.column5, message = v.column6, \
             since = CASE WHEN clusters.state = v.column2 AND clusters.commit_sha = v.column4 THEN clusters.since ELSE v.column7 END, \
             reported_at = v.column7, changed_at = v.column8 FROM (VALUES {}) AS v \
             WHERE clusters.id = v.column1 AND (clusters.reported_at IS NULL OR clusters.reported_at <= v.column7)",
            values(chunk.len(), 8)
        );
        let mut q = sqlx::query(&sql);
        for (id, state, revision, commit, message, time, position) in chunk {
            q = q
                .bind(*id)
                .bind(state.as_str())
                .bind(revision.as_str())
                .bind(commit.as_str())
                .bind(*position)
                .bind(message.as_str())
                .bind(*time)
                .bind(now);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use kalypso_hub_api::ClusterState;

    use crate::db::DbOptions;

    const OLD: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const NEW: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const UNREAD: &str = "cccccccccccccccccccccccccccccccccccccccc";

    /// A report of `object` (a Kustomization unless it names a source) of `cluster` of `dev`.
    fn job(
        cluster: &str,
        cluster_type: &str,
        object: &str,
        state: ClusterState,
        commit: &str,
        time: i64,
    ) -> Job {
        let (reply, _) = oneshot::channel();
        Job {
            report: Report {
                environment: "dev".to_owned(),
                cluster: cluster.to_owned(),
                cluster_type: cluster_type.to_owned(),
                object: object.to_owned(),
                drives: !object.starts_with("GitRepository"),
                state,
                revision: format!("dev@sha1:{commit}"),
                commit: commit.to_owned(),
                message: format!("{} at {commit}", state.as_str()),
                reason: String::new(),
                event_time: time,
            },
            received_at: 1_000 + time,
            reply,
        }
    }

    async fn store_batch(db: &Db, batch: &[Job]) -> Vec<IngestResult> {
        let mut connection = db.pool().acquire().await.unwrap();
        store_on(db, &mut connection, batch, &mut Positions::new())
            .await
            .unwrap()
    }

    /// (name, cluster type, state, position) of every cluster, by name.
    async fn clusters(db: &Db) -> Vec<(String, String, Option<String>, Option<i64>)> {
        sqlx::query("SELECT name, cluster_type, state, position FROM clusters ORDER BY name")
            .fetch_all(db.pool())
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    }

    async fn count(db: &Db, sql: &str) -> i64 {
        sqlx::query(sql).fetch_one(db.pool()).await.unwrap().get(0)
    }

    fn own(
        name: &str,
        cluster_type: &str,
        state: Option<&str>,
        position: Option<i64>,
    ) -> (String, String, Option<String>, Option<i64>) {
        (
            name.to_owned(),
            cluster_type.to_owned(),
            state.map(str::to_owned),
            position,
        )
    }

    /// Batches that register clusters and update them, with several reports of one object, a
    /// retry, an older report, a source, a change of cluster type and an unread commit in one
    /// batch, are decided as if sent one by one, and leave the counts equal to a recount.
    async fn batches_decide_as_one_by_one(url: &str) {
        use ClusterState::{Compliant, Failed, Reconciling};
        const K: &str = "Kustomization/flux-system/platform";
        const S: &str = "GitRepository/flux-system/platform";
        let db = Db::connect(url, &DbOptions::default()).await.unwrap();
        sqlx::query("INSERT INTO environments (name, gitops_repo, branch, refreshed_at) VALUES ('dev', 'r', 'dev', 0)")
            .execute(db.pool())
            .await
            .unwrap();
        for (position, sha) in [(0_i64, OLD), (1, NEW)] {
            sqlx::query(
                "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit) \
                 VALUES ('dev', $1, NULL, $2, 0, NULL)",
            )
            .bind(sha)
            .bind(position)
            .execute(db.pool())
            .await
            .unwrap();
        }

        let first = [
            job("c1", "t1", K, Reconciling, NEW, 10),
            job("c1", "t1", K, Compliant, NEW, 11),
            job("c1", "t1", K, Compliant, NEW, 11),
            job("c2", "t1", K, Failed, OLD, 10),
            job("c2", "t1", K, Compliant, OLD, 5),
            job("c1", "t1", S, Compliant, NEW, 12),
        ];
        use IngestResult::{Duplicate, Older, Stored};
        assert_eq!(
            store_batch(&db, &first).await,
            [Stored, Stored, Duplicate, Stored, Older, Stored]
        );
        assert_eq!(
            clusters(&db).await,
            [
                own("c1", "t1", Some("compliant"), Some(1)),
                own("c2", "t1", Some("failed"), Some(0))
            ]
        );
        assert_eq!(count(&db, "SELECT COUNT(*) FROM latest").await, 3);
        // Every report but the retry is history (the older one too).
        assert_eq!(count(&db, "SELECT COUNT(*) FROM reports").await, 5);
        assert_eq!(crate::counts::check(&db, 0).await.unwrap().repaired, 0);

        let second = [
            job("c2", "t2", K, Compliant, NEW, 20),
            job("c3", "t1", K, Reconciling, UNREAD, 20),
            job("c1", "t1", K, Compliant, NEW, 11),
            job("c1", "t1", K, Reconciling, OLD, 9),
        ];
        assert_eq!(
            store_batch(&db, &second).await,
            [Stored, Stored, Duplicate, Older]
        );
        assert_eq!(
            clusters(&db).await,
            [
                own("c1", "t1", Some("compliant"), Some(1)),
                own("c2", "t2", Some("compliant"), Some(1)),
                own("c3", "t1", None, None),
            ]
        );
        assert_eq!(
            count(&db, "SELECT event_time FROM latest l JOIN clusters c ON c.id = l.cluster_id WHERE c.name = 'c1' AND l.object LIKE 'Kustomization%'").await,
            11
        );
        assert_eq!(count(&db, "SELECT COUNT(*) FROM latest").await, 4);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM reports").await, 8);
        assert_eq!(crate::counts::check(&db, 0).await.unwrap().repaired, 0);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_is_decided_as_its_reports_one_by_one() {
        crate::test_databases::on_each_engine("ingest", |url| async move {
            batches_decide_as_one_by_one(&url).await
        })
        .await;
    }

    /// The batch's rows come back from [`batch_rows`] as they were given: NULLs, the largest
    /// integers, and text with quotes, backslashes, control characters and non-ASCII letters.
    async fn batch_rows_read_back(url: &str) {
        let db = Db::connect(url, &DbOptions::default()).await.unwrap();
        let backend = db.backend();
        let columns = [Column("n", true), Column("t", false), Column("u", false)];
        let rows: Vec<(Option<i64>, Option<&str>, &str)> = vec![
            (Some(i64::MAX), Some("plain"), "a"),
            (Some(i64::MIN), None, "b"),
            (None, Some("quote \" back \\ slash, tab \t, newline \n"), "c"),
            (Some(0), Some("ünïcødé ☃ 𝄞"), "d"),
            (Some(-1), Some(""), "e [1, 2]"),
        ];
        let got: Vec<(Option<i64>, Option<String>, String)> = sqlx::query(&format!(
            "SELECT n, t, u FROM {} ORDER BY u",
            batch_rows(backend, &columns)
        ))
        .bind(json_rows(&rows).unwrap())
        .fetch_all(db.pool())
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
        let want: Vec<(Option<i64>, Option<String>, String)> = rows
            .iter()
            .map(|(n, t, u)| (*n, t.map(str::to_owned), (*u).to_owned()))
            .collect();
        assert_eq!(got, want, "{backend:?}");
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batch_rows_read_every_value_back() {
        crate::test_databases::on_each_engine(
            "batch_rows",
            |url| async move { batch_rows_read_back(&url).await },
        )
        .await;
    }

    /// A batch whose writes fail half-way stores nothing, its connection is not kept (the open
    /// transaction goes with it), and the next batch is stored whole.
    async fn failed_batch_stores_nothing(url: &str) {
        use ClusterState::Compliant;
        const K: &str = "Kustomization/flux-system/platform";
        let db = Db::connect(url, &DbOptions::default()).await.unwrap();
        // The history's insert, the batch's last write, fails for one object.
        let fail = match db.backend() {
            Backend::Sqlite => vec![
                "CREATE TRIGGER refuse BEFORE INSERT ON reports WHEN NEW.object = 'boom' \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            ],
            Backend::Postgres => vec![
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 IF NEW.object = 'boom' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$",
                "CREATE TRIGGER refuse BEFORE INSERT ON reports FOR EACH ROW EXECUTE FUNCTION refuse()",
            ],
        };
        for statement in fail {
            sqlx::query(statement).execute(db.pool()).await.unwrap();
        }
        let mut kept = None;
        let mut positions = Positions::new();
        let bad = [
            job("c1", "t1", K, Compliant, OLD, 10),
            job("c2", "t1", "boom", Compliant, OLD, 10),
        ];
        assert!(store(&db, &mut kept, &bad, &mut positions).await.is_err());
        assert!(kept.is_none(), "the failed batch's connection is not kept");
        let good = [
            job("c3", "t1", K, Compliant, OLD, 10),
            job("c1", "t2", K, Compliant, OLD, 11),
        ];
        assert_eq!(
            store(&db, &mut kept, &good, &mut positions).await.unwrap(),
            [IngestResult::Stored, IngestResult::Stored]
        );
        assert!(kept.is_some(), "a stored batch's connection is kept");
        release(kept.take()).await;
        assert_eq!(
            clusters(&db).await,
            [own("c1", "t2", None, None), own("c3", "t1", None, None)]
        );
        assert_eq!(count(&db, "SELECT COUNT(*) FROM latest").await, 2);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM reports").await, 2);
        assert_eq!(crate::counts::check(&db, 0).await.unwrap().repaired, 0);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_batch_stores_nothing() {
        crate::test_databases::on_each_engine("failed_batch", |url| async move {
            failed_batch_stores_nothing(&url).await
        })
        .await;
    }

    /// On PostgreSQL a writer's read is planned for each batch, never run from a generic plan
    /// made when the tables were small (see [`read_stored`]); its writes stay prepared.
    async fn read_planned_per_batch(url: &str) {
        use ClusterState::Compliant;
        const K: &str = "Kustomization/flux-system/platform";
        let db = Db::connect(url, &DbOptions::default()).await.unwrap();
        if db.backend() != Backend::Postgres {
            db.close().await;
            return;
        }
        let mut kept = None;
        let mut positions = Positions::new();
        // More batches than the five custom plans after which PostgreSQL turns to a generic one.
        for n in 0..8 {
            let batch = [job(&format!("c{n}"), "t1", K, Compliant, OLD, 10)];
            assert_eq!(
                store(&db, &mut kept, &batch, &mut positions).await.unwrap(),
                [IngestResult::Stored]
            );
        }
        let again = [job("c3", "t1", K, Compliant, OLD, 10)];
        assert_eq!(
            store(&db, &mut kept, &again, &mut positions).await.unwrap(),
            [IngestResult::Duplicate]
        );
        let mut held = kept.take().expect("the writer's connection is kept");
        let prepared = |marker: &'static str| {
            sqlx::query("SELECT COUNT(*) FROM pg_prepared_statements WHERE statement LIKE $1")
                .bind(format!("%{marker}%"))
        };
        let reads: i64 = prepared("json_agg")
            .fetch_one(&mut *held.connection)
            .await
            .unwrap()
            .get(0);
        assert_eq!(reads, 0, "the batch's read is not kept prepared");
        let writes: i64 = prepared("RETURNING id, environment, name")
            .fetch_one(&mut *held.connection)
            .await
            .unwrap()
            .get(0);
        assert_eq!(writes, 1, "the batch's writes are prepared once");
        drop(held);
        db.close().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_read_is_planned_per_batch_on_postgres() {
        crate::test_databases::on_each_engine("read_plan", |url| async move {
            read_planned_per_batch(&url).await
        })
        .await;
    }

    #[test]
    fn shards_are_stable_and_in_range() {
        for n in 1..5 {
            let a = shard("dev", "drone-1", n);
            assert!(a < n);
            assert_eq!(a, shard("dev", "drone-1", n));
        }
    }
}
