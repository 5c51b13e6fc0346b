//! The correlation queries: clusters, environments, commits, workloads and the promotion
//! gate. Counts come from the incremental aggregates ([`crate::counts`]): an environment of a
//! million clusters answers from a few hundred rows of `cluster_counts`, and lists of clusters
//! are merges of index ranges stopped after the page. The rules (what a cluster's state is
//! relative to a commit, what the verdict is) are pure functions, unit-tested.
//!
//! A cluster's *platform state* is the latest report of an applying object whose commit is on
//! its environment's GitOps branch, with that commit's first-parent position. Relative to a
//! commit at position `p`: stale when silent for longer than `--stale-after`; compliant,
//! failed or reconciling when the platform commit's position is at least `p` (the commit or a
//! later one, which contains it); behind otherwise.

use std::collections::{BTreeMap, BTreeSet};

use kalypso_hub_api::{
    Cluster, ClusterDetail, ClusterList, ClusterState, ClusterTypeStatus, CommitAnswer, CommitInEnvironment,
    Counts, DeploymentTarget, EnvironmentList, EnvironmentStatus, EnvironmentSummary, Gate, GateCluster,
    GitopsCommit, History, LatestCommit, ObjectReport, PlacementSince, PlacementUntil, ReconcilerSource,
    Verdict, WorkloadAnswer, WorkloadPlacement,
};
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use crate::counts::{self, Scope, Snapshot, Staleness};
use crate::db::{Db, DbError, searchable};
use crate::model::format_time;

/// A cluster's state relative to the commit at `target`: `last_seen` against `stale_before`,
/// its platform `state` at `position` against the commit's position. (The rule of
/// [`counts::group_state`], which the counts apply to whole groups.)
pub fn classify(
    last_seen: i64,
    stale_before: i64,
    state: Option<&str>,
    position: Option<i64>,
    target: i64,
) -> ClusterState {
    counts::group_state(
        last_seen < stale_before,
        state.unwrap_or_default(),
        position.unwrap_or(-1),
        Some(target),
    )
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

/// The gate's verdict from the required clusters' counts.
pub fn verdict(counts: &Counts) -> Verdict {
    if counts.failed > 0 {
        Verdict::Failed
    } else if counts.compliant == counts.required() {
        Verdict::Compliant
    } else {
        Verdict::Pending
    }
}

/// Per cluster type of `environment`, the counts relative to the commit at `target`.
fn counts_by_type(snapshot: &Snapshot, environment: &str, target: i64) -> BTreeMap<String, Counts> {
    snapshot
        .counts_by_type(Some(target))
        .into_iter()
        .filter(|((env, _), _)| env == environment)
        .map(|((_, ct), counts)| (ct, counts))
        .collect()
}

/// A stored GitOps commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRow {
    /// Environment.
    pub environment: String,
    /// The commit.
    pub sha: String,
    /// First-parent position.
    pub position: i64,
    /// Commit time, Unix ms.
    pub committed_at: i64,
    /// Promoted control-plane commit.
    pub promoted: Option<String>,
}

impl CommitRow {
    fn from_row(row: &AnyRow) -> Result<CommitRow, DbError> {
        Ok(CommitRow {
            environment: row.try_get(0)?,
            sha: row.try_get(1)?,
            position: row.try_get(2)?,
            committed_at: row.try_get(3)?,
            promoted: row.try_get(4)?,
        })
    }

    fn answer(&self) -> GitopsCommit {
        GitopsCommit {
            sha: self.sha.clone(),
            position: self.position,
            committed_at: format_time(self.committed_at),
            control_plane_commit: self.promoted.clone(),
        }
    }
}

const COMMIT_COLUMNS: &str = "environment, sha, position, committed_at, promoted_commit";

/// A commit id or prefix as given in a URL: lower-case hex, 4 to 64 digits (a git commit
/// has 40; the index of an OCI environment, a SHA-256 digest, 64).
pub fn commit_pattern(text: &str) -> Option<String> {
    let t = text.trim().to_ascii_lowercase();
    (t.len() >= 4 && t.len() <= 64 && t.bytes().all(|b| b.is_ascii_hexdigit())).then_some(t)
}

/// The GitOps commit of `environment` that `sha` names: a GitOps commit (full or prefix), or
/// a control-plane commit carried in Promoted_Commit_Id (→ its first GitOps commit).
pub async fn resolve_commit(db: &Db, environment: &str, sha: &str) -> Result<Option<CommitRow>, DbError> {
    let mut conn = db.pool().acquire().await?;
    resolve_commit_in(&mut conn, environment, sha).await
}

/// [`resolve_commit`] on a connection the caller holds (a read transaction's).
pub(crate) async fn resolve_commit_in(
    conn: &mut AnyConnection,
    environment: &str,
    sha: &str,
) -> Result<Option<CommitRow>, DbError> {
    let Some(pattern) = commit_pattern(sha) else {
        return Ok(None);
    };
    if !searchable(environment) {
        return Ok(None);
    }
    let like = format!("{pattern}%");
    let row = sqlx::query(&format!(
        "SELECT {COMMIT_COLUMNS} FROM gitops_commits WHERE environment = $1 AND sha LIKE $2 ORDER BY position LIMIT 2"
    ))
    .bind(environment)
    .bind(&like)
    .fetch_all(&mut *conn)
    .await?;
    if row.len() == 1 {
        return Ok(Some(CommitRow::from_row(&row[0])?));
    }
    if row.len() > 1 {
        return Ok(None); // ambiguous
    }
    let row = sqlx::query(&format!(
        "SELECT {COMMIT_COLUMNS} FROM gitops_commits WHERE environment = $1 AND promoted_commit LIKE $2 ORDER BY position LIMIT 1"
    ))
    .bind(environment)
    .bind(&like)
    .fetch_optional(&mut *conn)
    .await?;
    row.as_ref().map(CommitRow::from_row).transpose()
}

/// The newest stored commit of `environment`.
pub(crate) async fn head(conn: &mut AnyConnection, environment: &str) -> Result<Option<CommitRow>, DbError> {
    sqlx::query(&format!(
        "SELECT {COMMIT_COLUMNS} FROM gitops_commits WHERE environment = $1 ORDER BY position DESC LIMIT 1"
    ))
    .bind(environment)
    .fetch_optional(&mut *conn)
    .await?
    .as_ref()
    .map(CommitRow::from_row)
    .transpose()
}

/// The cluster types folders of the commit at `position`.
pub(crate) async fn cluster_types_at(
    conn: &mut AnyConnection,
    environment: &str,
    position: i64,
) -> Result<BTreeSet<String>, DbError> {
    let rows = sqlx::query(
        "SELECT cluster_type FROM placements WHERE environment = $1 AND deployment_target = '' \
         AND from_position <= $2 AND (to_position IS NULL OR to_position > $2)",
    )
    .bind(environment)
    .bind(position)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the clusters run everything `commit` brought: from the commit itself, or, when a
/// progressive rollout brought it, from the first commit on whose rollout is complete (a
/// commit without a rollout delivered every cluster type). `Err` with the status of the
/// environment's newest rollout when no such commit exists (yet): the later waves do not run
/// the commit.
async fn rollout_target(
    conn: &mut AnyConnection,
    environment: &str,
    commit: &CommitRow,
) -> Result<Result<i64, String>, DbError> {
    let done = sqlx::query(
        "SELECT position FROM gitops_commits WHERE environment = $1 AND position >= $2 \
         AND (rollout_status IS NULL OR rollout_status = 'complete') ORDER BY position LIMIT 1",
    )
    .bind(environment)
    .bind(commit.position)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(row) = done {
        return Ok(Ok(row.try_get(0)?));
    }
    let newest: Option<String> = sqlx::query(
        "SELECT rollout_status FROM gitops_commits WHERE environment = $1 ORDER BY position DESC LIMIT 1",
    )
    .bind(environment)
    .fetch_optional(&mut *conn)
    .await?
    .map(|row| row.try_get::<Option<String>, _>(0))
    .transpose()?
    .flatten();
    Ok(Err(newest.unwrap_or_else(|| "progressing".to_owned())))
}

/// The gate's order: the failed clusters first (what a failed verdict names), then the other
/// clusters that are not compliant, then the compliant ones; so that a caller that asks for
/// the verdict and the first few blockers (`limit`) gets the ones that decide it.
fn blockers_first(state: ClusterState) -> Option<usize> {
    Some(match state {
        ClusterState::Failed => 0,
        ClusterState::Compliant => 2,
        _ => 1,
    })
}

/// The promotion gate of `environment` for `sha` (see the crate docs and `docs/hub.md`).
/// `None` for the commit means it is unknown. Counts, verdict and list come from one snapshot
/// of the database.
pub async fn gate(
    db: &Db,
    environment: &str,
    sha: &str,
    staleness: Staleness,
    limit: i64,
) -> Result<Gate, DbError> {
    let mut tx = db.begin_read().await?;
    let Some(commit) = resolve_commit_in(&mut tx, environment, sha).await? else {
        return Ok(Gate {
            environment: environment.to_owned(),
            gitops_commit: None,
            control_plane_commit: None,
            verdict: Verdict::UnknownCommit,
            compliant: 0,
            total: 0,
            clusters: Vec::new(),
            cluster_types_without_clusters: Vec::new(),
            rollout: None,
            promotion: None,
        });
    };
    let (target, rollout) = match rollout_target(&mut tx, environment, &commit).await? {
        Ok(target) => (target, None),
        Err(status) => (commit.position, Some(status)),
    };
    let types = cluster_types_at(&mut tx, environment, target).await?;
    let snapshot = Snapshot::read(&mut tx, Some(environment), None, staleness).await?;
    let by_type = counts_by_type(&snapshot, environment, target);
    let mut counts = Counts::default();
    let mut without = Vec::new();
    for t in &types {
        match by_type.get(t) {
            Some(c) if c.required() > 0 => counts.merge(c),
            Some(c) => {
                counts.total += c.total;
                counts.stale += c.stale;
                without.push(t.clone());
            }
            None => without.push(t.clone()),
        }
    }
    // When the commit has every cluster type the environment's clusters have, the list needs
    // no filter on cluster types.
    let all_types = by_type.keys().all(|t| types.contains(t));
    let scope = Scope::Types((!all_types).then_some(&types));
    let listed = if types.is_empty() {
        Vec::new()
    } else {
        counts::list(
            &mut tx,
            &snapshot,
            environment,
            scope,
            Some(target),
            &blockers_first,
            0,
            u64::try_from(limit).unwrap_or_default(),
        )
        .await?
    };
    tx.commit().await?;
    let verdict = match rollout.as_deref() {
        None => verdict(&counts),
        Some("halted" | "rolled-back") => Verdict::Failed,
        Some(_) if verdict(&counts) == Verdict::Failed => Verdict::Failed,
        Some(_) => Verdict::Pending,
    };
    Ok(Gate {
        environment: environment.to_owned(),
        verdict,
        gitops_commit: Some(commit.sha),
        control_plane_commit: commit.promoted,
        compliant: counts.compliant,
        total: counts.required(),
        clusters: listed.into_iter().map(GateCluster::from).collect(),
        cluster_types_without_clusters: without,
        rollout,
        promotion: None,
    })
}

/// The filters of `GET /api/v1/clusters`.
#[derive(Clone, Debug, Default)]
pub struct ClusterFilter {
    /// Environment.
    pub environment: Option<String>,
    /// Cluster type.
    pub cluster_type: Option<String>,
    /// A platform state (one of [`ClusterState::LISTED`]: `compliant`, `reconciling`,
    /// `failed`, `unknown`) or `stale`.
    pub state: Option<ClusterState>,
    /// Page size.
    pub limit: i64,
    /// Page start.
    pub offset: i64,
}

fn cluster_answer(row: &AnyRow, stale_before: i64) -> Result<Cluster, DbError> {
    let last_seen: i64 = row.try_get("last_seen")?;
    Ok(Cluster {
        name: row.try_get("name")?,
        environment: row.try_get("environment")?,
        cluster_type: row.try_get("cluster_type")?,
        revision: row.try_get("revision")?,
        commit: row.try_get("commit_sha")?,
        state: row
            .try_get::<Option<String>, _>("state")?
            .map_or(ClusterState::Unknown, |s| {
                ClusterState::parse_among(&s, &ClusterState::REPORTED).unwrap_or(ClusterState::Reconciling)
            }),
        message: row.try_get::<Option<String>, _>("message")?.unwrap_or_default(),
        last_seen: format_time(last_seen),
        first_seen: format_time(row.try_get("first_seen")?),
        stale: last_seen < stale_before,
    })
}

const CLUSTER_COLUMNS: &str =
    "id, environment, name, cluster_type, first_seen, last_seen, state, revision, commit_sha, message";

/// `GET /api/v1/clusters`.
pub async fn clusters(db: &Db, filter: &ClusterFilter, staleness: Staleness) -> Result<ClusterList, DbError> {
    let stale_before = staleness.before();
    let names = [&filter.environment, &filter.cluster_type];
    if !names.into_iter().flatten().all(|n| searchable(n)) {
        return Ok(ClusterList {
            total: 0,
            clusters: Vec::new(),
        });
    }
    let mut conditions = Vec::new();
    let mut binds: Vec<Bind> = Vec::new();
    if let Some(e) = &filter.environment {
        binds.push(Bind::Text(e.clone()));
        conditions.push(format!("environment = ${}", binds.len()));
    }
    if let Some(t) = &filter.cluster_type {
        binds.push(Bind::Text(t.clone()));
        conditions.push(format!("cluster_type = ${}", binds.len()));
    }
    match filter.state {
        None => {}
        Some(ClusterState::Stale) => {
            binds.push(Bind::Int(stale_before));
            conditions.push(format!("last_seen < ${}", binds.len()));
        }
        Some(ClusterState::Unknown) => conditions.push("state IS NULL".to_owned()),
        Some(s) => {
            binds.push(Bind::Text(s.as_str().to_owned()));
            conditions.push(format!("state = ${}", binds.len()));
        }
    }
    let filter_sql = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    // The total is a sum over the groups; the page is read by (environment, name).
    let mut tx = db.begin_read().await?;
    let snapshot = Snapshot::read(
        &mut tx,
        filter.environment.as_deref(),
        filter.environment.as_ref().and(filter.cluster_type.as_deref()),
        staleness,
    )
    .await?;
    let total: i64 = snapshot
        .groups()
        .iter()
        .filter(|g| filter.cluster_type.as_ref().is_none_or(|t| *t == g.cluster_type))
        .filter(|g| match filter.state {
            None => true,
            Some(ClusterState::Stale) => g.stale,
            Some(ClusterState::Unknown) => g.state.is_empty(),
            Some(s) => g.state == s.as_str(),
        })
        .map(|g| g.clusters)
        .sum();
    let list_sql = format!(
        "SELECT {CLUSTER_COLUMNS} FROM clusters{filter_sql} ORDER BY environment, name LIMIT {} OFFSET {}",
        filter.limit, filter.offset
    );
    let rows = bind_all(sqlx::query(&list_sql), &binds)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    let clusters = rows
        .iter()
        .map(|r| cluster_answer(r, stale_before))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ClusterList {
        total: count(total),
        clusters,
    })
}

enum Bind {
    Text(String),
    Int(i64),
}

fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for b in binds {
        q = match b {
            Bind::Text(t) => q.bind(t.as_str()),
            Bind::Int(i) => q.bind(*i),
        };
    }
    q
}

/// `GET /api/v1/clusters/{environment}/{name}`: the cluster, its objects' latest states and
/// a page of its history, newest first. `None` when unknown.
pub async fn cluster(
    db: &Db,
    environment: &str,
    name: &str,
    stale_before: i64,
    limit: i64,
    offset: i64,
) -> Result<Option<ClusterDetail>, DbError> {
    if !searchable(environment) || !searchable(name) {
        return Ok(None);
    }
    let Some(row) = sqlx::query(&format!(
        "SELECT {CLUSTER_COLUMNS} FROM clusters WHERE environment = $1 AND name = $2"
    ))
    .bind(environment)
    .bind(name)
    .fetch_optional(db.pool())
    .await?
    else {
        return Ok(None);
    };
    let id: i64 = row.try_get("id")?;
    let cluster = cluster_answer(&row, stale_before)?;
    let report = |r: &AnyRow| -> Result<ObjectReport, DbError> {
        let state: String = r.try_get(1)?;
        Ok(ObjectReport {
            object: r.try_get(0)?,
            state: ClusterState::parse_among(&state, &ClusterState::REPORTED)
                .unwrap_or(ClusterState::Reconciling),
            revision: Some(r.try_get::<String, _>(2)?).filter(|s| !s.is_empty()),
            commit: Some(r.try_get::<String, _>(3)?).filter(|s| !s.is_empty()),
            message: r.try_get(4)?,
            reason: r.try_get(5)?,
            time: format_time(r.try_get(6)?),
            received_at: format_time(r.try_get(7)?),
        })
    };
    let objects = sqlx::query(
        "SELECT object, state, revision, commit_sha, message, reason, event_time, received_at FROM latest \
         WHERE cluster_id = $1 ORDER BY object",
    )
    .bind(id)
    .fetch_all(db.pool())
    .await?;
    let total: i64 = sqlx::query("SELECT COUNT(*) FROM reports WHERE cluster_id = $1")
        .bind(id)
        .fetch_one(db.pool())
        .await?
        .try_get(0)?;
    let history = sqlx::query(&format!(
        "SELECT object, state, revision, commit_sha, message, reason, event_time, received_at FROM reports \
         WHERE cluster_id = $1 ORDER BY event_time DESC, id DESC LIMIT {limit} OFFSET {offset}"
    ))
    .bind(id)
    .fetch_all(db.pool())
    .await?;
    Ok(Some(ClusterDetail {
        cluster,
        objects: objects.iter().map(report).collect::<Result<_, _>>()?,
        history: History {
            total: count(total),
            reports: history.iter().map(report).collect::<Result<_, _>>()?,
        },
    }))
}

/// Environments known from the control plane: (name, repo, branch).
async fn environment_rows(db: &Db, name: Option<&str>) -> Result<Vec<(String, String, String)>, DbError> {
    let rows = match name {
        Some(n) => {
            sqlx::query("SELECT name, gitops_repo, branch FROM environments WHERE name = $1")
                .bind(n)
                .fetch_all(db.pool())
                .await?
        }
        None => {
            sqlx::query("SELECT name, gitops_repo, branch FROM environments ORDER BY name")
                .fetch_all(db.pool())
                .await?
        }
    };
    rows.iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect()
}

/// A placement's stored reconciler source.
pub(crate) fn reconciler_source(text: Option<&str>) -> Option<ReconcilerSource> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

/// The status of one environment (`GET /api/v1/environments/{env}`), `None` when unknown.
pub async fn environment(
    db: &Db,
    name: &str,
    staleness: Staleness,
) -> Result<Option<EnvironmentStatus>, DbError> {
    if !searchable(name) {
        return Ok(None);
    }
    let Some((name, repo, branch)) = environment_rows(db, Some(name)).await?.into_iter().next() else {
        return Ok(None);
    };
    let mut tx = db.begin_read().await?;
    let status = environment_status(&mut tx, &name, &repo, &branch, staleness).await?;
    tx.commit().await?;
    Ok(Some(status))
}

/// Every environment's status.
pub async fn environments(db: &Db, staleness: Staleness) -> Result<EnvironmentList, DbError> {
    let mut out = Vec::new();
    let mut tx = db.begin_read().await?;
    for (name, repo, branch) in environment_rows(db, None).await? {
        out.push(environment_status(&mut tx, &name, &repo, &branch, staleness).await?);
    }
    tx.commit().await?;
    Ok(EnvironmentList { environments: out })
}

async fn environment_status(
    conn: &mut AnyConnection,
    name: &str,
    repo: &str,
    branch: &str,
    staleness: Staleness,
) -> Result<EnvironmentStatus, DbError> {
    let head = head(conn, name).await?;
    let target = head.as_ref().map_or(i64::MAX, |h| h.position);
    let mut types: BTreeMap<String, (Vec<DeploymentTarget>, Counts)> = BTreeMap::new();
    for row in sqlx::query(
        "SELECT cluster_type, deployment_target, workload, source FROM placements \
         WHERE environment = $1 AND to_position IS NULL ORDER BY cluster_type, deployment_target",
    )
    .bind(name)
    .fetch_all(&mut *conn)
    .await?
    {
        let ct: String = row.try_get(0)?;
        let dt: String = row.try_get(1)?;
        let entry = types.entry(ct).or_default();
        if !dt.is_empty() {
            entry.0.push(DeploymentTarget {
                name: dt,
                workload: row.try_get(2)?,
                source: reconciler_source(row.try_get::<Option<String>, _>(3)?.as_deref()),
            });
        }
    }
    let snapshot = Snapshot::read(conn, Some(name), None, staleness).await?;
    let mut summary = Counts::default();
    for (ct, counts) in counts_by_type(&snapshot, name, target) {
        types.entry(ct).or_default().1 = counts;
        summary.merge(&counts);
    }
    let deployment_targets: usize = types.values().map(|(d, _)| d.len()).sum();
    let cluster_types: Vec<ClusterTypeStatus> = types
        .into_iter()
        .map(|(name, (deployment_targets, clusters))| ClusterTypeStatus {
            name,
            deployment_targets,
            clusters,
        })
        .collect();
    Ok(EnvironmentStatus {
        name: name.to_owned(),
        gitops_repo: repo.to_owned(),
        branch: branch.to_owned(),
        latest: head.map(|h| LatestCommit {
            commit: h.sha,
            control_plane_commit: h.promoted,
            committed_at: format_time(h.committed_at),
        }),
        summary: EnvironmentSummary {
            cluster_types: cluster_types.len() as u64,
            deployment_targets: deployment_targets as u64,
            clusters: summary,
        },
        cluster_types,
    })
}

/// The lead time in seconds from `committed_at` to the time the last of the required
/// clusters first reported compliant at the commit or later; `None` unless all are.
fn lead_time(committed_at: i64, last_compliant: Option<i64>, counts: &Counts) -> Option<f64> {
    if counts.required() == 0 || counts.compliant != counts.required() {
        return None;
    }
    last_compliant.map(|t| ((t - committed_at).max(0)) as f64 / 1000.0)
}

/// `GET /api/v1/commits/{sha}`: per environment, what `sha` (a GitOps or control-plane
/// commit) is there and who runs it.
pub async fn commit(db: &Db, sha: &str, staleness: Staleness, limit: i64) -> Result<CommitAnswer, DbError> {
    let stale_before = staleness.before();
    let Some(pattern) = commit_pattern(sha) else {
        return Ok(CommitAnswer {
            commit: sha.to_owned(),
            environments: Vec::new(),
        });
    };
    let like = format!("{pattern}%");
    let rows = sqlx::query(&format!(
        "SELECT {COMMIT_COLUMNS} FROM gitops_commits WHERE sha LIKE $1 OR promoted_commit LIKE $2 \
         ORDER BY environment, position"
    ))
    .bind(&like)
    .bind(&like)
    .fetch_all(db.pool())
    .await?;
    let mut by_env: BTreeMap<String, Vec<CommitRow>> = BTreeMap::new();
    for row in &rows {
        let c = CommitRow::from_row(row)?;
        by_env.entry(c.environment.clone()).or_default().push(c);
    }
    let mut out = Vec::new();
    let mut tx = db.begin_read().await?;
    for (env, commits) in by_env {
        // The first GitOps commit carrying it decides (later ones contain it).
        let Some(first) = commits.first() else { continue };
        let types = cluster_types_at(&mut tx, &env, first.position).await?;
        let snapshot = Snapshot::read(&mut tx, Some(&env), None, staleness).await?;
        let by_type = counts_by_type(&snapshot, &env, first.position);
        let mut counts = Counts::default();
        for t in &types {
            if let Some(c) = by_type.get(t) {
                counts.merge(c);
            }
        }
        let all_types = by_type.keys().all(|t| types.contains(t));
        let compliant_clusters: Vec<String> = if types.is_empty() {
            Vec::new()
        } else {
            counts::list(
                &mut tx,
                &snapshot,
                &env,
                Scope::Types((!all_types).then_some(&types)),
                Some(first.position),
                &|s| (s == ClusterState::Compliant).then_some(0),
                0,
                u64::try_from(limit).unwrap_or_default(),
            )
            .await?
            .into_iter()
            .map(|c| c.name)
            .collect()
        };
        let last_compliant =
            if counts.required() > 0 && counts.compliant == counts.required() && !types.is_empty() {
                let sql = format!(
                    "SELECT MAX(t) FROM (SELECT r.cluster_id, MIN(r.event_time) AS t FROM reports r \
                 JOIN clusters c ON c.id = r.cluster_id \
                 WHERE c.environment = $1 AND r.state = 'compliant' AND r.drives = 1 \
                 AND (EXISTS (SELECT 1 FROM gitops_commits g WHERE g.environment = c.environment \
                      AND g.sha = r.commit_sha AND g.position >= $2) \
                   OR EXISTS (SELECT 1 FROM oci_artifacts a WHERE a.environment = c.environment \
                      AND a.cluster_type = c.cluster_type AND a.digest = r.commit_sha \
                      AND (a.to_position IS NULL OR a.to_position > $2))) \
                 AND c.last_seen >= $3 AND c.cluster_type IN ({}) GROUP BY r.cluster_id) firsts",
                    placeholders(4, types.len())
                );
                let mut q = sqlx::query(&sql)
                    .bind(&env)
                    .bind(first.position)
                    .bind(stale_before);
                for t in &types {
                    q = q.bind(t);
                }
                q.fetch_one(&mut *tx).await?.try_get::<Option<i64>, _>(0)?
            } else {
                None
            };
        out.push(CommitInEnvironment {
            gitops_commits: commits.iter().map(CommitRow::answer).collect(),
            control_plane_commit: first.promoted.clone(),
            cluster_types: types.into_iter().collect(),
            clusters: counts,
            verdict: verdict(&counts),
            compliant_clusters,
            lead_time_seconds: lead_time(first.committed_at, last_compliant, &counts),
            environment: env,
        });
    }
    tx.commit().await?;
    Ok(CommitAnswer {
        commit: pattern,
        environments: out,
    })
}

/// `GET /api/v1/workloads/{name}`: where the workload runs now (environment, cluster type,
/// deployment target, since which GitOps commit) and where it ran before.
pub async fn workload(db: &Db, name: &str) -> Result<WorkloadAnswer, DbError> {
    if !searchable(name) {
        return Ok(WorkloadAnswer {
            workload: name.to_owned(),
            placements: Vec::new(),
            history: Vec::new(),
        });
    }
    let rows = sqlx::query(
        "SELECT p.environment, p.cluster_type, p.deployment_target, p.source, p.from_sha, p.to_sha, \
         f.committed_at, t.committed_at, f.promoted_commit \
         FROM placements p \
         LEFT JOIN gitops_commits f ON f.environment = p.environment AND f.sha = p.from_sha \
         LEFT JOIN gitops_commits t ON t.environment = p.environment AND t.sha = p.to_sha \
         WHERE p.workload = $1 AND p.deployment_target <> '' \
         ORDER BY p.environment, p.cluster_type, p.deployment_target, p.from_position",
    )
    .bind(name)
    .fetch_all(db.pool())
    .await?;
    let mut current = Vec::new();
    let mut past = Vec::new();
    for row in rows {
        let to_sha: Option<String> = row.try_get(5)?;
        let until = match &to_sha {
            Some(sha) => Some(PlacementUntil {
                gitops_commit: sha.clone(),
                committed_at: row.try_get::<Option<i64>, _>(7)?.map(format_time),
            }),
            None => None,
        };
        let entry = WorkloadPlacement {
            environment: row.try_get(0)?,
            cluster_type: row.try_get(1)?,
            deployment_target: row.try_get(2)?,
            source: reconciler_source(row.try_get::<Option<String>, _>(3)?.as_deref()),
            since: PlacementSince {
                gitops_commit: row.try_get(4)?,
                control_plane_commit: row.try_get(8)?,
                committed_at: row.try_get::<Option<i64>, _>(6)?.map(format_time),
            },
            until,
        };
        if to_sha.is_some() {
            past.push(entry);
        } else {
            current.push(entry);
        }
    }
    Ok(WorkloadAnswer {
        workload: name.to_owned(),
        placements: current,
        history: past,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_relative_to_a_commit() {
        assert_eq!(
            classify(10, 20, Some("compliant"), Some(5), 5),
            ClusterState::Stale
        );
        assert_eq!(
            classify(30, 20, Some("compliant"), Some(5), 5),
            ClusterState::Compliant
        );
        assert_eq!(
            classify(30, 20, Some("compliant"), Some(7), 5),
            ClusterState::Compliant
        );
        assert_eq!(
            classify(30, 20, Some("compliant"), Some(4), 5),
            ClusterState::Behind
        );
        assert_eq!(classify(30, 20, Some("failed"), Some(5), 5), ClusterState::Failed);
        assert_eq!(classify(30, 20, Some("failed"), Some(4), 5), ClusterState::Behind);
        assert_eq!(
            classify(30, 20, Some("reconciling"), Some(6), 5),
            ClusterState::Reconciling
        );
        assert_eq!(classify(30, 20, None, None, 5), ClusterState::Behind);
    }

    #[test]
    fn verdicts() {
        let mut c = Counts::default();
        assert_eq!(verdict(&c), Verdict::Compliant);
        c.add(ClusterState::Compliant, 2);
        c.add(ClusterState::Stale, 1);
        assert_eq!(verdict(&c), Verdict::Compliant);
        c.add(ClusterState::Behind, 1);
        assert_eq!(verdict(&c), Verdict::Pending);
        c.add(ClusterState::Failed, 1);
        assert_eq!(verdict(&c), Verdict::Failed);
        assert_eq!(c.required(), 4);
    }

    #[test]
    fn lead_times() {
        let mut c = Counts::default();
        c.add(ClusterState::Compliant, 2);
        assert_eq!(lead_time(1000, Some(4500), &c), Some(3.5));
        c.add(ClusterState::Reconciling, 1);
        assert_eq!(lead_time(1000, Some(4500), &c), None);
        assert_eq!(lead_time(1000, None, &Counts::default()), None);
    }

    #[test]
    fn commit_patterns() {
        assert_eq!(commit_pattern("ABCD12").as_deref(), Some("abcd12"));
        assert_eq!(commit_pattern("abc"), None);
        assert_eq!(commit_pattern("xyz1234"), None);
        assert_eq!(commit_pattern("%"), None);
    }
}
