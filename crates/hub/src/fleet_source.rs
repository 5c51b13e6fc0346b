//! The fleet dashboard's data source over the hub's database: [`HubSource`] implements
//! [`kalypso_dashboard::FleetSource`], so that `kalypso hub` serves the dashboard at `/` from
//! the same tables the API reads.
//!
//! It exists apart from [`query`] because the dashboard asks different, wider
//! questions (every environment × every cluster type at once, control-plane commits across
//! environments) and wants typed view models rather than JSON. The rules are shared: a
//! cluster's state relative to a commit is [`counts::group_state`], applied to whole groups.
//!
//! Scale: every count is read from the incremental aggregates ([`counts`]: a few hundred groups
//! however many clusters there are) and classified in Rust against each environment's head;
//! lists of clusters are merges of name-ordered index ranges stopped after the page
//! ([`counts::list`]); nothing reads the whole `clusters` table.
//!
//! The cluster types' labels and platform config values (with the ConfigMap that set each) are
//! not in the rendered GitOps tree: they come from the control plane, as the refresher read it
//! at the commits each environment runs ([`crate::control_plane`]); without a control plane, or
//! before it could be read, the page says why. The hub does not read the control-plane
//! repository's commit messages, authors or the time an environment was pinned: those fields
//! stay empty and the dashboard says so; lead times are measured from the first GitOps commit
//! that carried a control-plane commit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kalypso_dashboard::model::{
    BLOCKERS_SHOWN, Blocker, Cell, ClusterSummary, DeploymentTargetInfo, Placement, PromotionRow,
    ReconcilerSource, Report, Stage, StateCounts, Timestamp,
};
use kalypso_dashboard::{
    ClusterPage, ClusterQuery, ClusterState, ClusterTypePage, FleetColumn, FleetFilter, FleetMap,
    FleetSource, Page, PromotionFilter, PromotionView, SourceError, State, WorkloadPage,
};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::counts::{self, Group, Scope, Snapshot, Staleness};
use crate::db::{Db, DbError, searchable};
use crate::query::{self, CommitRow};

/// What the cluster-type page says instead of labels and platform config before the hub has
/// read the environment from the control plane.
pub const NOT_READ_YET: &str = "Not known to the hub yet: it reads the control plane at the \
     commits each environment runs on its next refresh.";

/// What the cluster-type page says when the environment's GitOps branch names no control-plane
/// commit.
pub const NO_PROMOTED_COMMIT: &str = "Not known to the hub: the environment's GitOps branch names \
     no control-plane commit (.github/tracking/Promoted_Commit_Id), so it does not know which \
     control plane to read.";

/// The dashboard's [`FleetSource`] over the hub's database.
#[derive(Clone, Debug)]
pub struct HubSource {
    db: Db,
    stale_after: Duration,
    /// The refresher, whose readings of the control plane give the cluster types' labels and
    /// platform config ([`crate::control_plane`]).
    refresher: Option<crate::gitops::Refresher>,
}

/// A cluster type's labels and platform config as the control plane gives them, or why not.
struct FromControlPlane {
    labels: BTreeMap<String, String>,
    labels_unavailable: Option<String>,
    config: Vec<kalypso_dashboard::model::ConfigValue>,
    config_unavailable: Option<String>,
}

impl FromControlPlane {
    fn unavailable(why: &str) -> FromControlPlane {
        FromControlPlane {
            labels: BTreeMap::new(),
            labels_unavailable: Some(why.to_owned()),
            config: Vec::new(),
            config_unavailable: Some(why.to_owned()),
        }
    }
}

impl From<DbError> for SourceErrorWrap {
    fn from(e: DbError) -> SourceErrorWrap {
        SourceErrorWrap(match e {
            DbError::Unavailable(why) => SourceError::Unavailable(why),
            other => SourceError::Internal(other.to_string()),
        })
    }
}

impl From<sqlx::Error> for SourceErrorWrap {
    fn from(e: sqlx::Error) -> SourceErrorWrap {
        SourceErrorWrap::from(DbError::from(e))
    }
}

/// A [`SourceError`] that `?` can make from database errors.
struct SourceErrorWrap(SourceError);

type Result<T> = std::result::Result<T, SourceErrorWrap>;

fn unwrap_err<T>(r: Result<T>) -> std::result::Result<T, SourceError> {
    r.map_err(|e| e.0)
}

/// A cluster's state relative to the commit at `target`, or, when the hub knows no GitOps
/// history for the environment (no control plane), its own reported state (unknown before
/// its first platform report).
fn cluster_state(
    stale: bool,
    state: Option<&str>,
    position: Option<i64>,
    target: Option<i64>,
) -> ClusterState {
    counts::group_state(stale, state.unwrap_or_default(), position.unwrap_or(-1), target)
}

/// The counts of `groups` relative to the commit at `target`.
fn counts<'a>(groups: impl Iterator<Item = &'a Group>, target: Option<i64>) -> StateCounts {
    let mut counts = StateCounts::default();
    for g in groups {
        let n = u64::try_from(g.clusters).unwrap_or_default();
        match State::from(g.state_at(target)) {
            State::Compliant => counts.compliant += n,
            State::Reconciling => counts.reconciling += n,
            State::Failed => counts.failed += n,
            State::Stale => counts.stale += n,
            State::NoClusters => {}
        }
    }
    counts
}

/// Environments in promotion order, as well as the hub can guess it: the usual stage names
/// first (`dev`, `qa`, `test`, `stage`, `preprod`, `prod`), then the rest by name. (The control
/// plane's environments carry no order the hub stores.)
fn promotion_order(names: BTreeSet<String>) -> Vec<String> {
    const ORDER: [&str; 10] = [
        "dev",
        "development",
        "qa",
        "test",
        "int",
        "stage",
        "staging",
        "uat",
        "preprod",
        "prod",
    ];
    let rank = |name: &str| {
        let lower = name.to_ascii_lowercase();
        ORDER
            .iter()
            .position(|known| *known == lower)
            .unwrap_or(ORDER.len())
    };
    let mut names: Vec<String> = names.into_iter().collect();
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    names
}

fn seconds(millis: i64) -> Timestamp {
    u64::try_from(millis / 1000).unwrap_or_default()
}

fn limit_offset(page: Page) -> (i64, i64) {
    (
        i64::try_from(page.size).unwrap_or(i64::MAX),
        i64::try_from(page.offset()).unwrap_or(i64::MAX),
    )
}

/// The order of the cluster-type page: failed, stale, reconciling (and behind), compliant —
/// only the filtered state's clusters when there is a filter.
fn severity(filter: Option<State>) -> impl Fn(ClusterState) -> Option<usize> + Sync {
    move |state| {
        let state = State::from(state);
        if filter.is_some_and(|f| f != state) {
            return None;
        }
        Some(match state {
            State::Failed => 0,
            State::Stale => 1,
            State::Compliant => 3,
            State::Reconciling | State::NoClusters => 2,
        })
    }
}

/// The order of the promotions' blockers: failed first, then the ones still waited for.
fn blocking_first(state: ClusterState) -> Option<usize> {
    match state {
        ClusterState::Failed => Some(0),
        ClusterState::Reconciling | ClusterState::Behind | ClusterState::Unknown => Some(1),
        _ => None,
    }
}

impl HubSource {
    /// A source over `db`; a cluster silent for longer than `stale_after` is stale.
    pub fn new(db: Db, stale_after: Duration) -> HubSource {
        HubSource {
            db,
            stale_after,
            refresher: None,
        }
    }

    /// The same source, showing the cluster types' labels and platform config as `refresher`
    /// reads them from the control plane.
    pub fn with_control_plane(mut self, refresher: crate::gitops::Refresher) -> HubSource {
        self.refresher = Some(refresher);
        self
    }

    /// Cluster type `name` of `environment` as the control plane defines it, or why the hub
    /// cannot say.
    fn defined_in_control_plane(&self, environment: &str, name: &str) -> FromControlPlane {
        let Some(refresher) = self.refresher.as_ref().filter(|r| r.enabled()) else {
            return FromControlPlane::unavailable(crate::control_plane::NO_CONTROL_PLANE);
        };
        let Some(view) = refresher.observed().get(environment) else {
            return FromControlPlane::unavailable(NOT_READ_YET);
        };
        let model = match view.model.as_deref() {
            None => return FromControlPlane::unavailable(NO_PROMOTED_COMMIT),
            Some(Err(why)) => return FromControlPlane::unavailable(&format!("Not known to the hub: {why}.")),
            Some(Ok(model)) => model,
        };
        let Some(ct) = model.cluster_types.get(name) else {
            return FromControlPlane::unavailable(&format!(
                "Not known to the hub: the control plane at main {} defines no cluster type {name:?} in {environment}.",
                kalypso_git::control_plane::short(&model.main_commit)
            ));
        };
        FromControlPlane {
            labels: ct.labels.clone(),
            labels_unavailable: None,
            config: ct
                .config
                .iter()
                .map(|c| kalypso_dashboard::model::ConfigValue {
                    key: c.key.clone(),
                    value: c.value.clone(),
                    config_map: c.source.clone(),
                    overridden: c.overridden.clone(),
                })
                .collect(),
            config_unavailable: None,
        }
    }

    fn staleness(&self) -> Staleness {
        Staleness {
            now: crate::http::now_ms(),
            after: i64::try_from(self.stale_after.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// The newest stored GitOps commit of every environment.
    async fn heads(&self, conn: &mut sqlx::AnyConnection) -> Result<BTreeMap<String, CommitRow>> {
        let rows = sqlx::query(
            "SELECT g.environment, g.sha, g.position, g.committed_at, g.promoted_commit FROM gitops_commits g \
             JOIN (SELECT environment, MAX(position) AS top FROM gitops_commits GROUP BY environment) h \
             ON h.environment = g.environment AND h.top = g.position",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut out = BTreeMap::new();
        for r in &rows {
            let row = CommitRow {
                environment: r.try_get(0)?,
                sha: r.try_get(1)?,
                position: r.try_get(2)?,
                committed_at: r.try_get(3)?,
                promoted: r.try_get(4)?,
            };
            out.insert(row.environment.clone(), row);
        }
        Ok(out)
    }

    /// The environments of the control plane.
    async fn known_environments(&self, conn: &mut sqlx::AnyConnection) -> Result<BTreeSet<String>> {
        let rows = sqlx::query("SELECT name FROM environments")
            .fetch_all(&mut *conn)
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// (environment, cluster type) → deployment targets, for the open placements.
    async fn open_placements(
        &self,
        conn: &mut sqlx::AnyConnection,
    ) -> Result<BTreeMap<(String, String), u64>> {
        let rows = sqlx::query(
            "SELECT environment, cluster_type, SUM(CASE WHEN deployment_target <> '' THEN 1 ELSE 0 END) \
             FROM placements WHERE to_position IS NULL GROUP BY environment, cluster_type",
        )
        .fetch_all(&mut *conn)
        .await?;
        let mut out = BTreeMap::new();
        for r in &rows {
            let n: i64 = r.try_get(2)?;
            out.insert(
                (r.try_get(0)?, r.try_get(1)?),
                u64::try_from(n).unwrap_or_default(),
            );
        }
        Ok(out)
    }

    async fn fleet_map(&self, filter: &FleetFilter) -> Result<FleetMap> {
        if !filter.environment.as_deref().is_none_or(searchable) {
            return Ok(FleetMap::assemble(Vec::new(), Vec::new(), filter));
        }
        let mut tx = self.db.begin_read().await?;
        // Every environment's groups (a few hundred rows each): with an environment filter
        // only its cells are counted, but every environment with clusters is named.
        let snapshot = Snapshot::read(&mut tx, None, None, self.staleness()).await?;
        let groups: Vec<Group> = snapshot.groups().into_iter().filter(|g| g.clusters > 0).collect();
        let heads = self.heads(&mut tx).await?;
        let placements = self.open_placements(&mut tx).await?;
        let mut names = self.known_environments(&mut tx).await?;
        tx.commit().await?;
        names.extend(groups.iter().map(|g| g.environment.clone()));
        names.extend(placements.keys().map(|(env, _)| env.clone()));
        let all_environments = promotion_order(names);

        // (environment, cluster type) → cell.
        let mut cells: BTreeMap<(&str, &str), Cell> = BTreeMap::new();
        for ((env, ct), targets) in &placements {
            cells.entry((env, ct)).or_default().deployment_targets = *targets;
        }
        let mut by_cell: BTreeMap<(&str, &str), Vec<&Group>> = BTreeMap::new();
        for g in &groups {
            if filter.environment.as_ref().is_some_and(|e| *e != g.environment) {
                continue;
            }
            by_cell
                .entry((&g.environment, &g.cluster_type))
                .or_default()
                .push(g);
        }
        for ((env, ct), gs) in &by_cell {
            let target = heads.get(*env).map(|h| h.position);
            cells.entry((env, ct)).or_default().counts = counts(gs.iter().copied(), target);
        }
        let mut columns: BTreeMap<&str, FleetColumn> = BTreeMap::new();
        for ((env, ct), cell) in cells {
            columns.entry(env).or_default().cells.insert(ct.to_owned(), cell);
        }
        let columns = all_environments
            .iter()
            .map(|env| {
                let head = heads.get(env.as_str());
                FleetColumn {
                    name: env.clone(),
                    control_plane_commit: head.and_then(|h| h.promoted.clone()),
                    gitops_commit: head.map(|h| h.sha.clone()),
                    gitops_commit_at: head.map(|h| seconds(h.committed_at)),
                    cells: columns.remove(env.as_str()).map(|c| c.cells).unwrap_or_default(),
                }
            })
            .collect();
        Ok(FleetMap::assemble(all_environments.clone(), columns, filter))
    }

    async fn promotion_view(&self, filter: &PromotionFilter) -> Result<PromotionView> {
        let page = filter.page.unwrap_or(Page::new(1, 20));
        let (limit, offset) = limit_offset(page);
        let mut tx = self.db.begin_read().await?;
        let total: i64 = sqlx::query("SELECT COUNT(DISTINCT promoted_commit) FROM gitops_commits")
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        let commits: Vec<(String, i64)> = sqlx::query(&format!(
            "SELECT promoted_commit, MIN(committed_at) FROM gitops_commits WHERE promoted_commit IS NOT NULL \
             GROUP BY promoted_commit ORDER BY 2 DESC, MAX(position) DESC, 1 LIMIT {limit} OFFSET {offset}"
        ))
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_>>()?;
        let heads = self.heads(&mut tx).await?;
        let mut names = self.known_environments(&mut tx).await?;
        names.extend(heads.keys().cloned());
        let environments = promotion_order(names);

        // (control-plane commit, environment) → the first GitOps commit carrying it.
        let mut first: BTreeMap<(String, String), CommitRow> = BTreeMap::new();
        if !commits.is_empty() {
            let placeholders = (1..=commits.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = format!(
                "SELECT environment, sha, position, committed_at, promoted_commit FROM gitops_commits \
                 WHERE promoted_commit IN ({placeholders}) ORDER BY environment, position"
            );
            let mut q = sqlx::query(&sql);
            for (sha, _) in &commits {
                q = q.bind(sha);
            }
            for r in q.fetch_all(&mut *tx).await? {
                let row = CommitRow {
                    environment: r.try_get(0)?,
                    sha: r.try_get(1)?,
                    position: r.try_get(2)?,
                    committed_at: r.try_get(3)?,
                    promoted: r.try_get(4)?,
                };
                let key = (row.promoted.clone().unwrap_or_default(), row.environment.clone());
                first.entry(key).or_insert(row);
            }
        }

        let staleness = self.staleness();
        let mut snapshots: BTreeMap<&str, (Snapshot, Vec<Group>)> = BTreeMap::new();
        for env in &environments {
            if first.keys().any(|(_, e)| e == env) {
                let snapshot = Snapshot::read(&mut tx, Some(env), None, staleness).await?;
                let groups = snapshot.groups().into_iter().filter(|g| g.clusters > 0).collect();
                snapshots.insert(env, (snapshot, groups));
            }
        }

        let mut rows = Vec::with_capacity(commits.len());
        for (commit, first_seen) in &commits {
            let mut stages = Vec::with_capacity(environments.len());
            for env in &environments {
                let Some(gitops) = first.get(&(commit.clone(), env.clone())) else {
                    stages.push(None);
                    continue;
                };
                let Some((snapshot, groups)) = snapshots.get(env.as_str()) else {
                    stages.push(None);
                    continue;
                };
                let counts = counts(groups.iter(), Some(gitops.position));
                let head = heads.get(env);
                let superseded = head.is_some_and(|h| h.promoted.as_deref() != Some(commit.as_str()));
                let all_compliant = counts.compliant > 0 && counts.failed == 0 && counts.reconciling == 0;
                // When the last cluster that kept it from being compliant stopped doing so.
                let compliant_at = if all_compliant {
                    snapshot
                        .compliant_since(env, None, gitops.position)
                        .map(|at| seconds(at.max(gitops.committed_at)))
                } else {
                    None
                };
                let waiting = counts.blocking();
                // Only the environment's current commit is worth a list of its blockers: an
                // older one is compliant or superseded.
                let blockers = if waiting > 0 && (!superseded || counts.failed > 0) && compliant_at.is_none()
                {
                    counts::list(
                        &mut tx,
                        snapshot,
                        env,
                        Scope::Types(None),
                        Some(gitops.position),
                        &blocking_first,
                        0,
                        BLOCKERS_SHOWN as u64,
                    )
                    .await?
                    .into_iter()
                    .map(|c| Blocker {
                        cluster: c.name,
                        cluster_type: c.cluster_type,
                        state: Some(c.state),
                        message: c.message.filter(|m| !m.is_empty()),
                    })
                    .collect()
                } else {
                    Vec::new()
                };
                stages.push(Some(Stage {
                    pinned_at: None,
                    gitops_commit: Some(gitops.sha.clone()),
                    rendered_at: Some(seconds(gitops.committed_at)),
                    delivered_at: Some(seconds(gitops.committed_at)),
                    compliant_at,
                    counts,
                    total_blockers: if blockers.is_empty() { 0 } else { waiting },
                    blockers,
                    superseded: superseded && compliant_at.is_none(),
                }));
            }
            rows.push(PromotionRow {
                commit: commit.clone(),
                subject: String::new(),
                author: None,
                committed_at: Some(seconds(*first_seen)),
                stages,
            });
        }
        tx.commit().await?;
        Ok(PromotionView {
            environments,
            commits: rows,
            total_commits: u64::try_from(total).unwrap_or_default(),
            page,
        })
    }

    fn summary(row: &AnyRow, stale_before: i64, target: Option<i64>) -> Result<ClusterSummary> {
        let last_seen: i64 = row.try_get("last_seen")?;
        let state: Option<String> = row.try_get("state")?;
        Ok(ClusterSummary {
            name: row.try_get("name")?,
            environment: row.try_get("environment")?,
            cluster_type: row.try_get("cluster_type")?,
            state: Some(cluster_state(
                last_seen < stale_before,
                state.as_deref(),
                row.try_get("position")?,
                target,
            )),
            revision: row.try_get("commit_sha")?,
            message: row
                .try_get::<Option<String>, _>("message")?
                .filter(|m| !m.is_empty()),
            last_report_at: Some(seconds(last_seen)),
        })
    }

    async fn cluster_type_page(
        &self,
        environment: &str,
        name: &str,
        cluster_query: &ClusterQuery,
    ) -> Result<Option<ClusterTypePage>> {
        if !searchable(environment) || !searchable(name) {
            return Ok(None);
        }
        let page = cluster_query
            .page
            .unwrap_or(Page::new(1, kalypso_dashboard::memory::DEFAULT_PAGE_SIZE));
        let mut tx = self.db.begin_read().await?;
        let targets = sqlx::query(
            "SELECT deployment_target, workload, source FROM placements \
             WHERE environment = $1 AND cluster_type = $2 AND to_position IS NULL ORDER BY deployment_target",
        )
        .bind(environment)
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        let snapshot = Snapshot::read(&mut tx, Some(environment), Some(name), self.staleness()).await?;
        let groups: Vec<Group> = snapshot.groups().into_iter().filter(|g| g.clusters > 0).collect();
        if targets.is_empty() && groups.is_empty() {
            return Ok(None);
        }
        let head = query::head(&mut tx, environment).await?;
        let target = head.as_ref().map(|h| h.position);
        let counts = counts(groups.iter(), target);

        let mut deployment_targets = Vec::new();
        let mut reconcilers = BTreeSet::new();
        for r in &targets {
            let dt: String = r.try_get(0)?;
            if dt.is_empty() {
                continue;
            }
            let source = query::reconciler_source(r.try_get::<Option<String>, _>(2)?.as_deref());
            if let Some(s) = &source {
                reconcilers.insert(s.kind.clone());
            }
            let source = source.unwrap_or_default();
            deployment_targets.push(DeploymentTargetInfo {
                name: dt,
                workload: r.try_get::<Option<String>, _>(1)?.unwrap_or_default(),
                namespace: None,
                source: ReconcilerSource {
                    repo: source.url.unwrap_or_default(),
                    branch: source.branch.or(source.revision).unwrap_or_default(),
                    path: source.path.unwrap_or_default(),
                },
            });
        }

        let total_clusters = match cluster_query.state {
            Some(state) => counts.get(state),
            None => counts.total(),
        };
        // Without a GitOps head, the clusters' own states are listed (see `cluster_state`).
        let clusters = counts::list(
            &mut tx,
            &snapshot,
            environment,
            Scope::Type(name),
            target,
            &severity(cluster_query.state),
            page.offset(),
            page.size,
        )
        .await?
        .into_iter()
        .map(|c| ClusterSummary {
            name: c.name,
            environment: environment.to_owned(),
            cluster_type: c.cluster_type,
            state: Some(c.state),
            revision: c.commit,
            message: c.message.filter(|m| !m.is_empty()),
            last_report_at: Some(seconds(c.last_seen)),
        })
        .collect();
        tx.commit().await?;
        let defined = self.defined_in_control_plane(environment, name);
        Ok(Some(ClusterTypePage {
            environment: environment.to_owned(),
            name: name.to_owned(),
            labels: defined.labels,
            labels_unavailable: defined.labels_unavailable,
            reconciler: (!reconcilers.is_empty())
                .then(|| reconcilers.into_iter().collect::<Vec<_>>().join(", ")),
            gitops_commit: head.map(|h| h.sha),
            deployment_targets,
            config: defined.config,
            config_unavailable: defined.config_unavailable,
            counts,
            clusters,
            total_clusters,
            page,
        }))
    }

    async fn workload_page(&self, name: &str, page: Page) -> Result<Option<WorkloadPage>> {
        if !searchable(name) {
            return Ok(None);
        }
        let mut tx = self.db.begin_read().await?;
        let total: i64 = sqlx::query(
            "SELECT COUNT(*) FROM placements WHERE workload = $1 AND deployment_target <> '' AND to_position IS NULL",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
        if total == 0 {
            let ever: i64 = sqlx::query("SELECT COUNT(*) FROM placements WHERE workload = $1")
                .bind(name)
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            if ever == 0 {
                return Ok(None);
            }
        }
        let (limit, offset) = limit_offset(page);
        let rows = sqlx::query(&format!(
            "SELECT p.environment, p.cluster_type, p.deployment_target, p.source, p.from_sha, f.committed_at \
             FROM placements p LEFT JOIN gitops_commits f ON f.environment = p.environment AND f.sha = p.from_sha \
             WHERE p.workload = $1 AND p.deployment_target <> '' AND p.to_position IS NULL \
             ORDER BY p.environment, p.cluster_type, p.deployment_target LIMIT {limit} OFFSET {offset}"
        ))
        .bind(name)
        .fetch_all(&mut *tx)
        .await?;
        let heads = self.heads(&mut tx).await?;
        let snapshot = Snapshot::read(&mut tx, None, None, self.staleness()).await?;
        tx.commit().await?;
        let mut groups: BTreeMap<(String, String), Vec<Group>> = BTreeMap::new();
        for g in snapshot.groups() {
            if g.clusters > 0 {
                groups
                    .entry((g.environment.clone(), g.cluster_type.clone()))
                    .or_default()
                    .push(g);
            }
        }
        let mut placements = Vec::with_capacity(rows.len());
        let mut repo = None;
        for r in &rows {
            let environment: String = r.try_get(0)?;
            let cluster_type: String = r.try_get(1)?;
            let source = query::reconciler_source(r.try_get::<Option<String>, _>(3)?.as_deref());
            if repo.is_none() {
                repo = source.as_ref().and_then(|s| s.url.clone());
            }
            let target = heads.get(&environment).map(|h| h.position);
            let cell = groups
                .get(&(environment.clone(), cluster_type.clone()))
                .map(Vec::as_slice)
                .unwrap_or_default();
            placements.push(Placement {
                counts: counts(cell.iter(), target),
                environment,
                cluster_type,
                deployment_target: r.try_get(2)?,
                version: source.and_then(|s| s.revision.or(s.branch)),
                gitops_commit: Some(r.try_get(4)?),
                since: r.try_get::<Option<i64>, _>(5)?.map(seconds),
            });
        }
        Ok(Some(WorkloadPage {
            name: name.to_owned(),
            source: repo,
            placements,
            total_placements: u64::try_from(total).unwrap_or_default(),
            page,
        }))
    }

    async fn cluster_page(&self, environment: &str, name: &str, page: Page) -> Result<Option<ClusterPage>> {
        if !searchable(environment) || !searchable(name) {
            return Ok(None);
        }
        let mut tx = self.db.begin_read().await?;
        let Some(row) = sqlx::query(
            "SELECT id, name, environment, cluster_type, last_seen, state, position, commit_sha, message \
             FROM clusters WHERE environment = $1 AND name = $2",
        )
        .bind(environment)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?
        else {
            return Ok(None);
        };
        let id: i64 = row.try_get("id")?;
        let head = query::head(&mut tx, environment).await?;
        let cluster = HubSource::summary(&row, self.staleness().before(), head.map(|h| h.position))?;
        let total: i64 = sqlx::query("SELECT COUNT(*) FROM reports WHERE cluster_id = $1")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?
            .try_get(0)?;
        let (limit, offset) = limit_offset(page);
        let rows = sqlx::query(&format!(
            "SELECT received_at, commit_sha, state, message, object FROM reports WHERE cluster_id = $1 \
             ORDER BY event_time DESC, id DESC LIMIT {limit} OFFSET {offset}"
        ))
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let reports = rows
            .iter()
            .map(|r| {
                let state: String = r.try_get(2)?;
                let message: String = r.try_get(3)?;
                let object: String = r.try_get(4)?;
                Ok(Report {
                    at: seconds(r.try_get(0)?),
                    revision: Some(r.try_get::<String, _>(1)?).filter(|s| !s.is_empty()),
                    state: Some(
                        ClusterState::parse_among(&state, &ClusterState::REPORTED)
                            .unwrap_or(ClusterState::Reconciling),
                    ),
                    message: Some(if message.is_empty() {
                        object
                    } else {
                        format!("{object}: {message}")
                    }),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(ClusterPage {
            cluster,
            reports,
            total_reports: u64::try_from(total).unwrap_or_default(),
            page,
        }))
    }

    /// Changes whenever a report or a GitOps commit is stored, in every replica: the newest
    /// report id plus the number of GitOps commits, environments and placements (which only
    /// grow), plus the number of rewinds stored times 2^40 (a rewind removes commits and
    /// placements, far fewer than 2^40, so the version still grows).
    async fn current_version(&self) -> Result<u64> {
        let row = sqlx::query(
            "SELECT (SELECT COALESCE(MAX(id), 0) FROM reports), (SELECT COUNT(*) FROM gitops_commits), \
             (SELECT COUNT(*) FROM environments), (SELECT COUNT(*) FROM placements), \
             (SELECT CAST(COALESCE(SUM(rewinds), 0) AS BIGINT) FROM environments)",
        )
        .fetch_one(self.db.pool())
        .await?;
        let mut version = 0u64;
        for i in 0..4 {
            let n: i64 = row.try_get(i)?;
            version = version.wrapping_add(u64::try_from(n).unwrap_or_default());
        }
        let rewinds: i64 = row.try_get(4)?;
        Ok(version.wrapping_add(u64::try_from(rewinds).unwrap_or_default().wrapping_shl(40)))
    }
}

impl FleetSource for HubSource {
    async fn fleet(&self, filter: &FleetFilter) -> std::result::Result<FleetMap, SourceError> {
        unwrap_err(self.fleet_map(filter).await)
    }

    async fn promotions(&self, filter: &PromotionFilter) -> std::result::Result<PromotionView, SourceError> {
        unwrap_err(self.promotion_view(filter).await)
    }

    async fn cluster_type(
        &self,
        environment: &str,
        name: &str,
        query: &ClusterQuery,
    ) -> std::result::Result<Option<ClusterTypePage>, SourceError> {
        unwrap_err(self.cluster_type_page(environment, name, query).await)
    }

    async fn workload(
        &self,
        name: &str,
        page: Page,
    ) -> std::result::Result<Option<WorkloadPage>, SourceError> {
        unwrap_err(self.workload_page(name, page).await)
    }

    async fn cluster(
        &self,
        environment: &str,
        name: &str,
        page: Page,
    ) -> std::result::Result<Option<ClusterPage>, SourceError> {
        unwrap_err(self.cluster_page(environment, name, page).await)
    }

    async fn rollout(
        &self,
        environment: &str,
    ) -> std::result::Result<Option<kalypso_hub_api::EnvironmentRollout>, SourceError> {
        let observed = crate::control_plane::Observed::default();
        let (observed, reads) = match &self.refresher {
            Some(r) => (r.observed(), r.enabled()),
            None => (&observed, false),
        };
        unwrap_err(
            crate::rollout::environment_rollout(&self.db, observed, reads, environment, self.staleness())
                .await
                .map_err(SourceErrorWrap::from),
        )
    }

    async fn version(&self) -> std::result::Result<u64, SourceError> {
        unwrap_err(self.current_version().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environments_come_in_promotion_order() {
        let names = ["prod", "alpha", "stage", "dev"]
            .map(str::to_owned)
            .into_iter()
            .collect();
        assert_eq!(promotion_order(names), ["dev", "stage", "prod", "alpha"]);
    }

    #[test]
    fn states_relative_to_the_head_or_reported() {
        assert_eq!(
            cluster_state(false, Some("compliant"), Some(3), Some(3)),
            ClusterState::Compliant
        );
        assert_eq!(
            cluster_state(false, Some("compliant"), Some(2), Some(3)),
            ClusterState::Behind
        );
        assert_eq!(
            cluster_state(false, Some("failed"), Some(3), Some(3)),
            ClusterState::Failed
        );
        assert_eq!(
            cluster_state(true, Some("failed"), Some(3), Some(3)),
            ClusterState::Stale
        );
        assert_eq!(
            cluster_state(false, Some("failed"), None, None),
            ClusterState::Failed
        );
        assert_eq!(cluster_state(false, None, None, None), ClusterState::Unknown);
        // The dashboard shows a cluster behind the head, or without a report, as reconciling.
        assert_eq!(
            State::from(cluster_state(false, Some("compliant"), Some(2), Some(3))),
            State::Reconciling
        );
        assert_eq!(
            State::from(cluster_state(false, None, None, None)),
            State::Reconciling
        );
    }
}
