//! The incremental aggregates: clusters counted by group, so that the answers a promotion
//! waits on do not grow with the fleet.
//!
//! A *group* is (environment, cluster type, stale flag, platform state, platform commit
//! position). Relative to any GitOps commit at position `p`, every cluster of a group is in the
//! same state ([`group_state`]), so the gate of any commit — the head or an older one — is a
//! sum over a few hundred rows of `cluster_counts`, never a scan of `clusters`. The table is
//! kept by triggers on `clusters` (migrations `0004_cluster_counts`) in the same transaction as
//! every change of a cluster, whoever makes it; [`check`] verifies it against a recount on
//! start and repairs it (a database restored from a backup, or edited by hand).
//!
//! Staleness is time-based: a cluster becomes stale without any report. The stale flag of
//! `clusters` says how a cluster is *counted*; [`sweep`] moves clusters whose silence crossed
//! `--stale-after` to stale groups, a few thousand at a time through the `(stale, last_seen)`
//! index, and a report moves its cluster back. Readers correct the counts for the clusters the
//! sweep has not reached yet (the same index range, usually empty), so answers are exact
//! whatever the sweep's lag.
//!
//! Each group also keeps `left_at`, the last time a cluster left it: when no cluster blocks a
//! gate, the latest `left_at` of the groups that would block it is when it last became
//! compliant ([`Snapshot::compliant_since`]) — the soak time of a promotion, or of a rollout's
//! wave.
//!
//! Lists of clusters (the gate's clusters, the promotions' blockers, the cluster-type page) are
//! merges of name-ordered index ranges, one per group, each stopped after the page ([`list`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kalypso_hub_api::{ClusterState, Counts};
use sqlx::{AnyConnection, Row};

use crate::db::{Backend, Db, DbError};

/// When a cluster is stale: silent since before `now - after` (Unix ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Staleness {
    /// Now.
    pub now: i64,
    /// `--stale-after`, in ms.
    pub after: i64,
}

impl Staleness {
    /// Clusters last seen before this are stale.
    pub fn before(&self) -> i64 {
        self.now.saturating_sub(self.after)
    }
}

/// The state a group's clusters are in, relative to the commit at `target`, or their own state
/// when there is no target (an environment without GitOps history). `state` is the stored
/// platform state (`""`: none), `position` its commit's position (`-1`: none).
pub fn group_state(stale: bool, state: &str, position: i64, target: Option<i64>) -> ClusterState {
    if stale {
        return ClusterState::Stale;
    }
    let own = || match state {
        "" => ClusterState::Unknown,
        "compliant" => ClusterState::Compliant,
        "failed" => ClusterState::Failed,
        _ => ClusterState::Reconciling,
    };
    match target {
        None => own(),
        Some(target) if position >= 0 && position >= target => match own() {
            ClusterState::Unknown => ClusterState::Reconciling,
            s => s,
        },
        Some(_) => ClusterState::Behind,
    }
}

/// One row of `cluster_counts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Environment.
    pub environment: String,
    /// Cluster type.
    pub cluster_type: String,
    /// Counted as stale.
    pub stale: bool,
    /// Platform state (`""`: none).
    pub state: String,
    /// Platform commit position (`-1`: none).
    pub position: i64,
    /// Clusters in the group.
    pub clusters: i64,
    /// When a cluster last left the group (Unix ms, 0: never).
    pub left_at: i64,
}

impl Group {
    fn key(&self) -> GroupKey {
        (
            self.environment.clone(),
            self.cluster_type.clone(),
            self.stale,
            self.state.clone(),
            self.position,
        )
    }

    /// Its clusters' state relative to the commit at `target` (see [`group_state`]).
    pub fn state_at(&self, target: Option<i64>) -> ClusterState {
        group_state(self.stale, &self.state, self.position, target)
    }
}

type GroupKey = (String, String, bool, String, i64);

/// A cluster whose silence crossed the limit (or, after `--stale-after` grew, came back under
/// it) since the sweep last looked: counted in its stored group, but not in the state it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unswept {
    /// Environment.
    pub environment: String,
    /// Cluster type.
    pub cluster_type: String,
    /// Name.
    pub name: String,
    /// Counted as stale (so: fresh in truth).
    pub counted_stale: bool,
    /// Platform state (`""`: none).
    pub state: String,
    /// Platform commit position (`-1`: none).
    pub position: i64,
    /// Platform commit.
    pub commit: Option<String>,
    /// Platform message.
    pub message: Option<String>,
    /// Last report, Unix ms.
    pub last_seen: i64,
}

impl Unswept {
    fn stored_key(&self) -> GroupKey {
        (
            self.environment.clone(),
            self.cluster_type.clone(),
            self.counted_stale,
            self.state.clone(),
            self.position,
        )
    }
}

/// The counts of an environment (or of all), as stored, with the clusters the sweep has not
/// reached yet: everything an answer needs, read at once.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// `cluster_counts` rows, empty groups included.
    pub stored: Vec<Group>,
    /// Clusters counted in the wrong stale group for now.
    pub unswept: Vec<Unswept>,
    /// The staleness the snapshot was read for.
    pub staleness: Option<Staleness>,
}

const GROUP_COLUMNS: &str = "environment, cluster_type, stale, state, position, clusters, left_at";
const UNSWEPT_COLUMNS: &str = "environment, cluster_type, name, stale, COALESCE(state, ''), COALESCE(position, -1), \
     commit_sha, message, last_seen";

/// The SQL that reads the clusters the sweep has not reached, with `$1` the limit of
/// staleness and `filter` (`AND environment = $2`...) appended to both ranges of the
/// `clusters_seen` index.
pub(crate) fn unswept_sql(filter: &str) -> String {
    format!(
        "SELECT {UNSWEPT_COLUMNS} FROM clusters WHERE stale = 0 AND last_seen < $1{filter} \
         UNION ALL SELECT {UNSWEPT_COLUMNS} FROM clusters WHERE stale = 1 AND last_seen >= $1{filter}"
    )
}

/// The filter of [`unswept_sql`] to an environment (`$2`), which must not make the planner read
/// the environment's clusters instead of the `clusters_seen` ranges.
pub(crate) const UNSWEPT_OF_ENVIRONMENT: &str = " AND environment || '' = $2";
/// The filter of [`unswept_sql`] to an environment (`$2`) and a cluster type (`$3`).
pub(crate) const UNSWEPT_OF_TYPE: &str = " AND environment || '' = $2 AND cluster_type || '' = $3";

/// The SQL that reads `cluster_counts` (`filter`: `WHERE environment = $1`...).
pub(crate) fn groups_sql(filter: &str) -> String {
    format!("SELECT {GROUP_COLUMNS} FROM cluster_counts{filter}")
}

impl Snapshot {
    /// Reads the groups of `environment` (and `cluster_type`), or of every environment.
    pub async fn read(
        conn: &mut AnyConnection,
        environment: Option<&str>,
        cluster_type: Option<&str>,
        staleness: Staleness,
    ) -> Result<Snapshot, DbError> {
        let (group_filter, unswept_filter) = match (environment, cluster_type) {
            // `environment || ''`: the unswept clusters are read through the `clusters_seen`
            // range, never through a group index.
            (Some(_), Some(_)) => (" WHERE environment = $1 AND cluster_type = $2", UNSWEPT_OF_TYPE),
            (Some(_), None) => (" WHERE environment = $1", UNSWEPT_OF_ENVIRONMENT),
            _ => ("", ""),
        };
        let sql = groups_sql(group_filter);
        let mut q = sqlx::query(&sql);
        if let Some(env) = environment {
            q = q.bind(env);
            if let Some(ct) = cluster_type {
                q = q.bind(ct);
            }
        }
        let mut stored = Vec::new();
        for row in q.fetch_all(&mut *conn).await? {
            stored.push(Group {
                environment: row.try_get(0)?,
                cluster_type: row.try_get(1)?,
                stale: row.try_get::<i64, _>(2)? != 0,
                state: row.try_get(3)?,
                position: row.try_get(4)?,
                clusters: row.try_get(5)?,
                left_at: row.try_get(6)?,
            });
        }
        let sql = unswept_sql(unswept_filter);
        let mut q = sqlx::query(&sql).bind(staleness.before());
        if let Some(env) = environment {
            q = q.bind(env);
            if let Some(ct) = cluster_type {
                q = q.bind(ct);
            }
        }
        let mut unswept = Vec::new();
        for row in q.fetch_all(&mut *conn).await? {
            unswept.push(Unswept {
                environment: row.try_get(0)?,
                cluster_type: row.try_get(1)?,
                name: row.try_get(2)?,
                counted_stale: row.try_get::<i64, _>(3)? != 0,
                state: row.try_get(4)?,
                position: row.try_get(5)?,
                commit: row.try_get(6)?,
                message: row.try_get(7)?,
                last_seen: row.try_get(8)?,
            });
        }
        Ok(Snapshot {
            stored,
            unswept,
            staleness: Some(staleness),
        })
    }

    /// The groups as they are: the stored ones with the unswept clusters moved to the stale
    /// (or fresh) group they belong to, each leaving at the moment it became stale.
    pub fn groups(&self) -> Vec<Group> {
        if self.unswept.is_empty() {
            return self.stored.clone();
        }
        let after = self.staleness.map_or(0, |s| s.after);
        let now = self.staleness.map_or(0, |s| s.now);
        let mut by_key: BTreeMap<GroupKey, Group> =
            self.stored.iter().map(|g| (g.key(), g.clone())).collect();
        for u in &self.unswept {
            let from = u.stored_key();
            let left_at = if u.counted_stale {
                now
            } else {
                u.last_seen.saturating_add(after)
            };
            let group = by_key.entry(from.clone()).or_insert_with(|| empty_group(&from));
            group.clusters -= 1;
            group.left_at = group.left_at.max(left_at);
            let to = (from.0, from.1, !from.2, from.3, from.4);
            by_key
                .entry(to.clone())
                .or_insert_with(|| empty_group(&to))
                .clusters += 1;
        }
        by_key.into_values().collect()
    }

    /// Per cluster type, the counts relative to the commit at `target` (own states when
    /// `None`), of the cluster types that have clusters.
    pub fn counts_by_type(&self, target: Option<i64>) -> BTreeMap<(String, String), Counts> {
        let mut out: BTreeMap<(String, String), Counts> = BTreeMap::new();
        for g in self.groups() {
            if g.clusters <= 0 {
                continue;
            }
            let n = u64::try_from(g.clusters).unwrap_or_default();
            out.entry((g.environment.clone(), g.cluster_type.clone()))
                .or_default()
                .add(g.state_at(target), n);
        }
        out
    }

    /// Since when every fresh cluster of `environment` of the given cluster types (all, when
    /// `None`) has been compliant at the commit at `position` or a later one: `None` while one
    /// is not; otherwise the moment the last one that was not stopped blocking (Unix ms, 0 if
    /// none ever blocked). A caller measuring a soak takes the later of this and the commit's
    /// own time.
    pub fn compliant_since(
        &self,
        environment: &str,
        types: Option<&BTreeSet<String>>,
        position: i64,
    ) -> Option<i64> {
        let mut since = 0;
        for g in self.groups() {
            if g.environment != environment || g.stale || types.is_some_and(|t| !t.contains(&g.cluster_type))
            {
                continue;
            }
            if g.state_at(Some(position)) == ClusterState::Compliant {
                continue;
            }
            if g.clusters > 0 {
                return None;
            }
            since = since.max(g.left_at);
        }
        Some(since)
    }
}

fn empty_group(key: &GroupKey) -> Group {
    Group {
        environment: key.0.clone(),
        cluster_type: key.1.clone(),
        stale: key.2,
        state: key.3.clone(),
        position: key.4,
        clusters: 0,
        left_at: 0,
    }
}

/// Which clusters a list is about.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    /// The clusters of one cluster type.
    Type(&'a str),
    /// The clusters of these cluster types (`None`: of every cluster type of the environment).
    Types(Option<&'a BTreeSet<String>>),
}

impl Scope<'_> {
    fn holds(&self, cluster_type: &str) -> bool {
        match self {
            Scope::Type(t) => *t == cluster_type,
            Scope::Types(None) => true,
            Scope::Types(Some(types)) => types.contains(cluster_type),
        }
    }
}

/// A cluster in a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Name.
    pub name: String,
    /// Cluster type.
    pub cluster_type: String,
    /// Its state relative to the list's commit (its own state without one).
    pub state: ClusterState,
    /// Platform commit.
    pub commit: Option<String>,
    /// Platform message.
    pub message: Option<String>,
    /// Last report, Unix ms.
    pub last_seen: i64,
}

impl From<Listed> for kalypso_hub_api::GateCluster {
    /// A listed cluster as the gates answer it (without a message: an empty one).
    fn from(c: Listed) -> Self {
        kalypso_hub_api::GateCluster {
            name: c.name,
            cluster_type: c.cluster_type,
            state: c.state,
            revision: c.commit,
            message: c.message.unwrap_or_default(),
        }
    }
}

/// Clusters of one group key within a scope, read as one name-ordered index range.
#[derive(Clone, Debug)]
struct Stream {
    /// The cluster type, unless the stream spans all of the environment's.
    cluster_type: Option<String>,
    stale: bool,
    state: String,
    position: i64,
    /// Clusters it yields (the group's, less the unswept ones).
    clusters: i64,
}

/// The SQL of one stream: the clusters of a group, by name, that the sweep has counted right
/// (`$1` environment, `$2` the staleness limit, `$3` limit, `$4` offset, then the group's
/// stale flag, state and position, then the cluster type, if one).
pub(crate) fn stream_sql(stale: bool, state: &str, position: i64, cluster_type: Option<&str>) -> String {
    let mut next = 5;
    let mut param = || {
        let p = format!("${next}");
        next += 1;
        p
    };
    let stale_sql = format!("stale = {}", param());
    let state_sql = if state.is_empty() {
        "state IS NULL".to_owned()
    } else {
        format!("state = {}", param())
    };
    let position_sql = if position < 0 {
        "position IS NULL".to_owned()
    } else {
        format!("position = {}", param())
    };
    // Within a cluster type the `clusters_group` index gives the order, across all cluster
    // types `clusters_environment_group`; both engines pick it from the equalities. (A set of
    // cluster types is read one cluster type at a time: an `IN` list would let the planner
    // sort a range as large as the group.)
    let (type_sql, type_order) = match cluster_type {
        Some(_) => (format!(" AND cluster_type = {}", param()), "cluster_type, "),
        None => (String::new(), ""),
    };
    // The order is the index's whole key (all but the name are fixed, so it is the order by
    // name): PostgreSQL does not take `state IS NULL` as fixing the state, and would otherwise
    // read the environment's clusters by name and filter them.
    // `+last_seen`: the staleness limit filters the group's range; it must not make the
    // planner read the `clusters_seen` range instead.
    let seen = if stale {
        "+last_seen < $2"
    } else {
        "+last_seen >= $2"
    };
    format!(
        "SELECT name, cluster_type, commit_sha, message, last_seen FROM clusters \
         WHERE environment = $1 AND {stale_sql} AND {state_sql} AND {position_sql}{type_sql} AND {seen} \
         ORDER BY environment, {type_order}stale, state, position, name LIMIT $3 OFFSET $4"
    )
}

async fn fetch_stream(
    conn: &mut AnyConnection,
    environment: &str,
    stream: &Stream,
    state: ClusterState,
    before: i64,
    limit: i64,
    offset: i64,
) -> Result<Vec<Listed>, DbError> {
    let sql = stream_sql(
        stream.stale,
        &stream.state,
        stream.position,
        stream.cluster_type.as_deref(),
    );
    let mut q = sqlx::query(&sql)
        .bind(environment)
        .bind(before)
        .bind(limit)
        .bind(offset)
        .bind(i64::from(stream.stale));
    if !stream.state.is_empty() {
        q = q.bind(stream.state.as_str());
    }
    if stream.position >= 0 {
        q = q.bind(stream.position);
    }
    if let Some(t) = &stream.cluster_type {
        q = q.bind(t.as_str());
    }
    let rows = q.fetch_all(&mut *conn).await?;
    rows.iter()
        .map(|r| {
            Ok(Listed {
                name: r.try_get(0)?,
                cluster_type: r.try_get(1)?,
                state,
                commit: r.try_get(2)?,
                message: r.try_get(3)?,
                last_seen: r.try_get(4)?,
            })
        })
        .collect()
}

/// Lists the clusters of `environment` in `scope`, in the order `rank` gives their states
/// relative to `target` (own states when `None`), then by name; states `rank` maps to `None`
/// are left out. Skips `offset` clusters and returns `limit` at most.
///
/// Each rank is a merge of the name-ordered ranges of its groups (read through the
/// `clusters_group` or `clusters_environment_group` index, each stopped after the page) and of
/// the unswept clusters; whole ranks before the page are skipped by their counts.
#[allow(clippy::too_many_arguments)] // the list's question has this many parts
pub async fn list(
    conn: &mut AnyConnection,
    snapshot: &Snapshot,
    environment: &str,
    scope: Scope<'_>,
    target: Option<i64>,
    rank: &(dyn Fn(ClusterState) -> Option<usize> + Sync),
    offset: u64,
    limit: u64,
) -> Result<Vec<Listed>, DbError> {
    let Some(staleness) = snapshot.staleness else {
        return Ok(Vec::new());
    };
    let before = staleness.before();
    // Stored groups in scope, by (cluster type unless all, stale, state, position), less their
    // unswept clusters.
    let per_type = !matches!(scope, Scope::Types(None));
    let stream_type = |cluster_type: &str| per_type.then(|| cluster_type.to_owned());
    let mut by_key: BTreeMap<(Option<String>, bool, String, i64), i64> = BTreeMap::new();
    for g in &snapshot.stored {
        if g.environment == environment && scope.holds(&g.cluster_type) && g.clusters > 0 {
            *by_key
                .entry((stream_type(&g.cluster_type), g.stale, g.state.clone(), g.position))
                .or_default() += g.clusters;
        }
    }
    let mut ranks: BTreeMap<usize, (Vec<Stream>, Vec<Listed>)> = BTreeMap::new();
    for u in &snapshot.unswept {
        if u.environment != environment || !scope.holds(&u.cluster_type) {
            continue;
        }
        if let Some(n) = by_key.get_mut(&(
            stream_type(&u.cluster_type),
            u.counted_stale,
            u.state.clone(),
            u.position,
        )) {
            *n -= 1;
        }
        let state = group_state(!u.counted_stale, &u.state, u.position, target);
        if let Some(r) = rank(state) {
            ranks.entry(r).or_default().1.push(Listed {
                name: u.name.clone(),
                cluster_type: u.cluster_type.clone(),
                state,
                commit: u.commit.clone(),
                message: u.message.clone(),
                last_seen: u.last_seen,
            });
        }
    }
    for ((cluster_type, stale, state, position), clusters) in by_key {
        if clusters <= 0 {
            continue;
        }
        if let Some(r) = rank(group_state(stale, &state, position, target)) {
            ranks.entry(r).or_default().0.push(Stream {
                cluster_type,
                stale,
                state,
                position,
                clusters,
            });
        }
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut skip = i64::try_from(offset).unwrap_or(i64::MAX);
    let mut out: Vec<Listed> = Vec::new();
    for (streams, mut unswept) in ranks.into_values() {
        let room = limit - out.len() as i64;
        if room <= 0 {
            break;
        }
        let total: i64 = streams.iter().map(|s| s.clusters).sum::<i64>() + unswept.len() as i64;
        if skip >= total {
            skip -= total;
            continue;
        }
        if streams.len() == 1 && unswept.is_empty() {
            let s = &streams[0];
            let state = group_state(s.stale, &s.state, s.position, target);
            out.extend(fetch_stream(conn, environment, s, state, before, room, skip).await?);
        } else {
            let want = skip.saturating_add(room);
            for s in &streams {
                let state = group_state(s.stale, &s.state, s.position, target);
                unswept.extend(fetch_stream(conn, environment, s, state, before, want, 0).await?);
            }
            unswept.sort_by(|a, b| a.name.cmp(&b.name));
            out.extend(
                unswept
                    .into_iter()
                    .skip(usize::try_from(skip).unwrap_or(usize::MAX))
                    .take(usize::try_from(room).unwrap_or(usize::MAX)),
            );
        }
        skip = 0;
    }
    Ok(out)
}

/// Clusters the sweep moves in one statement at most.
pub const SWEEP_BATCH: i64 = 5000;

/// Marks stale (`$1` the limit, `$2` the time before which they are, `$3` how many).
pub(crate) const SWEEP_STALE: &str = "UPDATE clusters SET stale = 1, changed_at = last_seen + $1 WHERE id IN \
     (SELECT id FROM clusters WHERE stale = 0 AND last_seen < $2 ORDER BY last_seen LIMIT $3)";

/// Marks fresh again (`$1` now, `$2` the time before which they would be stale, `$3` how many).
pub(crate) const SWEEP_FRESH: &str = "UPDATE clusters SET stale = 0, changed_at = $1 WHERE id IN \
     (SELECT id FROM clusters WHERE stale = 1 AND last_seen >= $2 ORDER BY last_seen LIMIT $3)";

/// Moves up to `batch` clusters whose silence crossed the limit to their stale groups (each
/// leaving its group at the moment it became stale), and up to `batch` counted stale that are
/// not (after `--stale-after` grew) back. Returns how many moved.
pub async fn sweep(db: &Db, staleness: Staleness, batch: i64) -> Result<u64, DbError> {
    let stale = sqlx::query(SWEEP_STALE)
        .bind(staleness.after)
        .bind(staleness.before())
        .bind(batch)
        .execute(db.pool())
        .await?
        .rows_affected();
    let fresh = sqlx::query(SWEEP_FRESH)
        .bind(staleness.now)
        .bind(staleness.before())
        .bind(batch)
        .execute(db.pool())
        .await?
        .rows_affected();
    Ok(stale + fresh)
}

/// Sweeps until no cluster is left to move.
pub async fn sweep_all(db: &Db, staleness: Staleness) -> Result<u64, DbError> {
    let mut moved = 0;
    loop {
        let n = sweep(db, staleness, SWEEP_BATCH).await?;
        moved += n;
        if n == 0 {
            return Ok(moved);
        }
    }
}

/// Drops the empty groups no answer needs: stale ones, and fresh ones whose `left_at` is not
/// the latest that could decide a gate. The `left_at` of an empty non-compliant group is first
/// folded into its cluster type's group without a platform state, which blocks every gate too.
pub async fn prune(db: &Db) -> Result<u64, DbError> {
    let greatest = match db.backend() {
        Backend::Sqlite => "MAX",
        Backend::Postgres => "GREATEST",
    };
    let mut tx = db.pool().begin().await?;
    sqlx::query(&format!(
        "INSERT INTO cluster_counts AS c (environment, cluster_type, stale, state, position, clusters, left_at) \
         SELECT environment, cluster_type, 0, '', -1, 0, MAX(left_at) FROM cluster_counts \
         WHERE clusters = 0 AND stale = 0 AND state <> 'compliant' AND NOT (state = '' AND position = -1) \
         GROUP BY environment, cluster_type \
         ON CONFLICT (environment, cluster_type, stale, state, position) \
         DO UPDATE SET left_at = {greatest}(c.left_at, excluded.left_at)"
    ))
    .execute(&mut *tx)
    .await?;
    let dropped = sqlx::query(
        "DELETE FROM cluster_counts WHERE clusters = 0 AND (stale = 1 \
         OR (state <> 'compliant' AND NOT (state = '' AND position = -1)) \
         OR (state = 'compliant' AND left_at <= (SELECT COALESCE(MAX(b.left_at), 0) FROM cluster_counts b \
             WHERE b.environment = cluster_counts.environment AND b.cluster_type = cluster_counts.cluster_type \
             AND b.stale = 0 AND b.state <> 'compliant')))",
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(dropped)
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Groups compared.
    pub groups: usize,
    /// Groups whose count was wrong (and is repaired).
    pub repaired: usize,
}

/// Recounts `clusters` by group and compares with `cluster_counts`, repairing every group that
/// differs, under a lock that keeps writers out meanwhile. A repaired cluster type's soak
/// starts again (its `left_at` is set to now): what it was cannot be known any more.
pub async fn check(db: &Db, now: i64) -> Result<CheckReport, DbError> {
    let mut tx = match db.backend() {
        Backend::Sqlite => db.pool().begin_with("BEGIN IMMEDIATE").await?,
        Backend::Postgres => {
            let mut tx = db.pool().begin().await?;
            sqlx::query("LOCK TABLE clusters IN SHARE ROW EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await?;
            tx
        }
    };
    let mut recount: HashMap<GroupKey, i64> = HashMap::new();
    for row in sqlx::query(
        "SELECT environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1), COUNT(*) FROM clusters \
         GROUP BY environment, cluster_type, stale, COALESCE(state, ''), COALESCE(position, -1)",
    )
    .fetch_all(&mut *tx)
    .await?
    {
        let key: GroupKey = (
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get::<i64, _>(2)? != 0,
            row.try_get(3)?,
            row.try_get(4)?,
        );
        recount.insert(key, row.try_get(5)?);
    }
    let mut stored: HashMap<GroupKey, i64> = HashMap::new();
    for row in sqlx::query(&groups_sql("")).fetch_all(&mut *tx).await? {
        let key: GroupKey = (
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get::<i64, _>(2)? != 0,
            row.try_get(3)?,
            row.try_get(4)?,
        );
        stored.insert(key, row.try_get(5)?);
    }
    let keys: BTreeSet<&GroupKey> = recount.keys().chain(stored.keys()).collect();
    let mut report = CheckReport {
        groups: keys.len(),
        repaired: 0,
    };
    let mut types: BTreeSet<(String, String)> = BTreeSet::new();
    for key in keys {
        let want = recount.get(key).copied().unwrap_or(0);
        let have = stored.get(key).copied();
        if have == Some(want) {
            continue;
        }
        report.repaired += 1;
        types.insert((key.0.clone(), key.1.clone()));
        sqlx::query(
            "INSERT INTO cluster_counts (environment, cluster_type, stale, state, position, clusters, left_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 0) ON CONFLICT (environment, cluster_type, stale, state, position) \
             DO UPDATE SET clusters = excluded.clusters",
        )
        .bind(&key.0)
        .bind(&key.1)
        .bind(i64::from(key.2))
        .bind(&key.3)
        .bind(key.4)
        .bind(want)
        .execute(&mut *tx)
        .await?;
    }
    for (environment, cluster_type) in &types {
        sqlx::query(
            "INSERT INTO cluster_counts (environment, cluster_type, stale, state, position, clusters, left_at) \
             VALUES ($1, $2, 0, '', -1, 0, $3) ON CONFLICT (environment, cluster_type, stale, state, position) \
             DO UPDATE SET left_at = excluded.left_at",
        )
        .bind(environment)
        .bind(cluster_type)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(stale: bool, state: &str, position: i64, clusters: i64, left_at: i64) -> Group {
        Group {
            environment: "dev".into(),
            cluster_type: "drone".into(),
            stale,
            state: state.into(),
            position,
            clusters,
            left_at,
        }
    }

    #[test]
    fn groups_relative_to_a_commit() {
        assert_eq!(
            group_state(false, "compliant", 5, Some(5)),
            ClusterState::Compliant
        );
        assert_eq!(
            group_state(false, "compliant", 7, Some(5)),
            ClusterState::Compliant
        );
        assert_eq!(group_state(false, "compliant", 4, Some(5)), ClusterState::Behind);
        assert_eq!(group_state(false, "failed", 5, Some(5)), ClusterState::Failed);
        assert_eq!(
            group_state(false, "reconciling", 6, Some(5)),
            ClusterState::Reconciling
        );
        assert_eq!(group_state(false, "", -1, Some(0)), ClusterState::Behind);
        assert_eq!(group_state(true, "compliant", 5, Some(5)), ClusterState::Stale);
        assert_eq!(group_state(false, "", -1, None), ClusterState::Unknown);
        assert_eq!(group_state(false, "failed", 2, None), ClusterState::Failed);
        assert_eq!(
            group_state(false, "compliant", 2, Some(i64::MAX)),
            ClusterState::Behind
        );
    }

    #[test]
    fn compliant_since_is_when_the_last_blocking_cluster_left() {
        let snapshot = Snapshot {
            stored: vec![
                group(false, "compliant", 3, 10, 500),
                group(false, "compliant", 2, 0, 400),
                group(false, "reconciling", 3, 0, 300),
                group(true, "failed", 1, 4, 900),
            ],
            unswept: Vec::new(),
            staleness: Some(Staleness {
                now: 1000,
                after: 100,
            }),
        };
        // At 3: compliant@2 and reconciling@3 block; the later left at 400.
        assert_eq!(snapshot.compliant_since("dev", None, 3), Some(400));
        // At 2: only reconciling@3 blocks.
        assert_eq!(snapshot.compliant_since("dev", None, 2), Some(300));
        // At 4: compliant@3 holds clusters that are behind.
        assert_eq!(snapshot.compliant_since("dev", None, 4), None);
        // Another cluster type has no blocking group.
        let other: BTreeSet<String> = ["large".to_owned()].into();
        assert_eq!(snapshot.compliant_since("dev", Some(&other), 4), Some(0));
    }

    #[test]
    fn unswept_clusters_are_counted_where_they_belong() {
        let snapshot = Snapshot {
            stored: vec![
                group(false, "failed", 3, 2, 0),
                group(false, "compliant", 3, 5, 0),
            ],
            unswept: vec![Unswept {
                environment: "dev".into(),
                cluster_type: "drone".into(),
                name: "d-1".into(),
                counted_stale: false,
                state: "failed".into(),
                position: 3,
                commit: None,
                message: None,
                last_seen: 700,
            }],
            staleness: Some(Staleness {
                now: 1000,
                after: 100,
            }),
        };
        let counts = snapshot.counts_by_type(Some(3));
        let c = counts[&("dev".to_owned(), "drone".to_owned())];
        assert_eq!((c.failed, c.stale, c.compliant, c.total), (1, 1, 5, 7));
        assert_eq!(snapshot.compliant_since("dev", None, 3), None);
        // Once the other failed cluster is gone too, the gate has been compliant since the
        // unswept one went stale: 700 + 100.
        let mut s = snapshot.clone();
        s.stored[0].clusters = 1;
        assert_eq!(s.compliant_since("dev", None, 3), Some(800));
    }
}
