//! The dashboard's view models and the [`FleetSource`] trait through which it reads them.
//!
//! The dashboard does not know where its data lives: the hub answers these questions from
//! its database (with aggregation and paging done in SQL), tests and the demo answer them from
//! a [`MemorySource`](crate::MemorySource). Every answer is already aggregated and paged, so
//! that no page ever has to hold, or render, the whole fleet: at 100,000 clusters the fleet
//! map is a page of cluster types × environments with counts in each cell, not a table of
//! clusters. The types are plain serde structs, so that a source may also be a remote service
//! answering in JSON.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

pub use kalypso_hub_api::ClusterState;
use serde::{Deserialize, Serialize};

/// Seconds since the Unix epoch (UTC).
pub type Timestamp = u64;

/// How the dashboard shows the state of a cluster ([`ClusterState`], relative to its
/// environment's latest GitOps commit) and of a group of clusters (a cell of the fleet map, a
/// cluster type): a cluster that is behind that commit, or has not reported one yet, is shown
/// as reconciling towards it; a group without clusters is [`State::NoClusters`].
///
/// The order is the order of severity: the state of a group is the most severe state of its
/// clusters ([`StateCounts::state`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Running the environment's latest GitOps commit, applied successfully.
    Compliant,
    /// Applying the latest commit, or still on an earlier one: not failed yet.
    #[default]
    Reconciling,
    /// Has not reported for longer than the hub's staleness window: its state is unknown.
    Stale,
    /// Its reconciler failed to apply the latest commit.
    Failed,
    /// A group without any reporting cluster (never a cluster's own state).
    NoClusters,
}

impl State {
    /// Every state, in the order the dashboard lists them.
    pub const ALL: [State; 5] = [
        State::Compliant,
        State::Reconciling,
        State::Failed,
        State::Stale,
        State::NoClusters,
    ];

    /// The name used in URLs and JSON (`compliant`, `no-clusters`...).
    pub fn as_str(self) -> &'static str {
        match self {
            State::Compliant => "compliant",
            State::Reconciling => "reconciling",
            State::Stale => "stale",
            State::Failed => "failed",
            State::NoClusters => "no-clusters",
        }
    }

    /// The label shown to people.
    pub fn label(self) -> &'static str {
        match self {
            State::Compliant => "Compliant",
            State::Reconciling => "Reconciling",
            State::Stale => "Stale",
            State::Failed => "Failed",
            State::NoClusters => "No clusters",
        }
    }

    /// The icon shown before the label (never the only signal, nor is the colour).
    pub fn icon(self) -> &'static str {
        match self {
            State::Compliant => "✓",
            State::Reconciling => "↻",
            State::Stale => "◷",
            State::Failed => "✕",
            State::NoClusters => "∅",
        }
    }
}

impl From<ClusterState> for State {
    fn from(state: ClusterState) -> State {
        match state {
            ClusterState::Compliant => State::Compliant,
            ClusterState::Failed => State::Failed,
            ClusterState::Stale => State::Stale,
            // Reconciling, behind, unknown, and whatever a newer hub may say.
            _ => State::Reconciling,
        }
    }
}

impl State {
    /// Whether a cluster in this state keeps a promotion from being complete: failed ones
    /// and the ones still waited for. Stale clusters do not (the gate does not require them).
    pub fn blocks(self) -> bool {
        matches!(self, State::Failed | State::Reconciling)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A state name that is not one of [`State::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownState(pub String);

impl fmt::Display for UnknownState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown state {:?}: use compliant, reconciling, failed, stale or no-clusters",
            self.0
        )
    }
}

impl std::error::Error for UnknownState {}

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<State, UnknownState> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// How many clusters of a group are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCounts {
    /// Compliant clusters.
    pub compliant: u64,
    /// Reconciling clusters.
    pub reconciling: u64,
    /// Failed clusters.
    pub failed: u64,
    /// Stale clusters.
    pub stale: u64,
}

impl StateCounts {
    /// All clusters of the group.
    pub fn total(&self) -> u64 {
        self.compliant + self.reconciling + self.failed + self.stale
    }

    /// Counts one cluster in `state` (a [`State::NoClusters`] counts nothing).
    pub fn add(&mut self, state: impl Into<State>) {
        match state.into() {
            State::Compliant => self.compliant += 1,
            State::Reconciling => self.reconciling += 1,
            State::Failed => self.failed += 1,
            State::Stale => self.stale += 1,
            State::NoClusters => {}
        }
    }

    /// Adds another group's counts.
    pub fn merge(&mut self, other: &StateCounts) {
        self.compliant += other.compliant;
        self.reconciling += other.reconciling;
        self.failed += other.failed;
        self.stale += other.stale;
    }

    /// The number of clusters in `state`.
    pub fn get(&self, state: State) -> u64 {
        match state {
            State::Compliant => self.compliant,
            State::Reconciling => self.reconciling,
            State::Failed => self.failed,
            State::Stale => self.stale,
            State::NoClusters => u64::from(self.total() == 0),
        }
    }

    /// The clusters that keep a promotion from being complete ([`State::blocks`]).
    pub fn blocking(&self) -> u64 {
        self.failed + self.reconciling
    }

    /// The state of the group: its most severe cluster state, [`State::NoClusters`] when empty.
    pub fn state(&self) -> State {
        if self.failed > 0 {
            State::Failed
        } else if self.stale > 0 {
            State::Stale
        } else if self.reconciling > 0 {
            State::Reconciling
        } else if self.compliant > 0 {
            State::Compliant
        } else {
            State::NoClusters
        }
    }
}

/// Which page of a long list to show. Pages are numbered from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// The page number, from 1.
    pub number: u64,
    /// Rows per page.
    pub size: u64,
}

impl Default for Page {
    /// The first page of 50 rows.
    fn default() -> Page {
        Page::new(1, 50)
    }
}

impl Page {
    /// The largest page size a URL may ask for.
    pub const MAX_SIZE: u64 = 200;

    /// Page `number` (from 1) of `size` rows; both are clamped to sane values.
    pub fn new(number: u64, size: u64) -> Page {
        Page {
            number: number.max(1),
            size: size.clamp(1, Page::MAX_SIZE),
        }
    }

    /// The index of the first row of the page.
    pub fn offset(&self) -> u64 {
        (self.number - 1).saturating_mul(self.size)
    }

    /// The rows of `items` on this page.
    pub fn slice<'a, T>(&self, items: &'a [T]) -> &'a [T] {
        let start = usize::try_from(self.offset())
            .unwrap_or(usize::MAX)
            .min(items.len());
        let end = start
            .saturating_add(usize::try_from(self.size).unwrap_or(usize::MAX))
            .min(items.len());
        &items[start..end]
    }

    /// The number of pages `total` rows fill (at least 1).
    pub fn count(&self, total: u64) -> u64 {
        total.div_ceil(self.size).max(1)
    }
}

/// What the fleet map shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetFilter {
    /// Only this environment.
    pub environment: Option<String>,
    /// Only cells in this state.
    pub state: Option<State>,
    /// Only cluster types whose name contains this text.
    pub cluster_type: Option<String>,
    /// The page of cluster types.
    pub page: Option<Page>,
}

/// The fleet map: environments across, cluster types down, one [`Cell`] where they meet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetMap {
    /// Every environment, in promotion order (for the filter control), filtered or not.
    pub all_environments: Vec<String>,
    /// The environments shown (the columns), after the filter.
    pub environments: Vec<EnvironmentSummary>,
    /// One page of cluster types (the rows), after the filter.
    pub rows: Vec<ClusterTypeRow>,
    /// Rows matching the filter, on every page.
    pub total_rows: u64,
    /// The page shown.
    pub page: Page,
}

/// Rows per page when a query does not say.
pub const DEFAULT_PAGE_SIZE: u64 = 50;

/// How many blocking clusters a promotion stage names (failed ones first, then the ones still
/// waited for; [`State::blocks`]).
pub const BLOCKERS_SHOWN: usize = 3;

/// What a source knows of one environment for the fleet map: its heads and one [`Cell`] per
/// cluster type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetColumn {
    /// The environment's name.
    pub name: String,
    /// The control-plane `main` commit it runs.
    pub control_plane_commit: Option<String>,
    /// The latest commit of its GitOps branch.
    pub gitops_commit: Option<String>,
    /// When that GitOps commit was made.
    pub gitops_commit_at: Option<Timestamp>,
    /// Its cluster types' cells, by cluster type.
    pub cells: BTreeMap<String, Cell>,
}

impl FleetMap {
    /// The fleet map `filter` asks for, from every environment's name in promotion order and
    /// the columns a source knows (at least the ones the filter shows; an environment without
    /// a column is shown empty). Every source builds its map here, so that the filters, the
    /// totals and the paging are the same whatever the data comes from: an environment's
    /// totals count all its cluster types (the cluster-type filter only hides rows), a row
    /// matches the state filter when one of its cells is in that state.
    pub fn assemble(
        all_environments: Vec<String>,
        columns: Vec<FleetColumn>,
        filter: &FleetFilter,
    ) -> FleetMap {
        let page = filter.page.unwrap_or(Page::new(1, DEFAULT_PAGE_SIZE));
        let mut known: BTreeMap<String, FleetColumn> =
            columns.into_iter().map(|c| (c.name.clone(), c)).collect();
        let shown: Vec<FleetColumn> = all_environments
            .iter()
            .filter(|env| filter.environment.as_ref().is_none_or(|name| *env == name))
            .map(|env| {
                known.remove(env).unwrap_or_else(|| FleetColumn {
                    name: env.clone(),
                    ..FleetColumn::default()
                })
            })
            .collect();
        let needle = filter
            .cluster_type
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let mut rows: BTreeMap<&str, Vec<Option<Cell>>> = BTreeMap::new();
        let mut environments = Vec::with_capacity(shown.len());
        for (column, env) in shown.iter().enumerate() {
            let mut counts = StateCounts::default();
            for (cluster_type, cell) in &env.cells {
                counts.merge(&cell.counts);
                if needle.is_some_and(|n| !cluster_type.contains(n)) {
                    continue;
                }
                rows.entry(cluster_type)
                    .or_insert_with(|| vec![None; shown.len()])[column] = Some(cell.clone());
            }
            environments.push(EnvironmentSummary {
                name: env.name.clone(),
                control_plane_commit: env.control_plane_commit.clone(),
                gitops_commit: env.gitops_commit.clone(),
                gitops_commit_at: env.gitops_commit_at,
                counts,
                cluster_types: env.cells.len() as u64,
            });
        }
        let matching: Vec<(&str, Vec<Option<Cell>>)> = rows
            .into_iter()
            .filter(|(_, cells)| {
                filter
                    .state
                    .is_none_or(|state| cells.iter().flatten().any(|cell| cell.state() == state))
            })
            .collect();
        let rows = page
            .slice(&matching)
            .iter()
            .map(|(name, cells)| ClusterTypeRow {
                name: (*name).to_owned(),
                cells: cells.clone(),
            })
            .collect();
        FleetMap {
            all_environments,
            environments,
            rows,
            total_rows: matching.len() as u64,
            page,
        }
    }
}

/// An environment: a column of the fleet map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentSummary {
    /// Its name (`dev`, `stage`, `prod`...).
    pub name: String,
    /// The control-plane `main` commit it runs (its BaseRepo pin, `Promoted_Commit_Id`).
    pub control_plane_commit: Option<String>,
    /// The latest commit of its GitOps branch: what its clusters should run.
    pub gitops_commit: Option<String>,
    /// When that GitOps commit was made.
    pub gitops_commit_at: Option<Timestamp>,
    /// Clusters in each state, over the whole environment (not only the page).
    pub counts: StateCounts,
    /// Cluster types in the environment.
    pub cluster_types: u64,
}

/// A cluster type: a row of the fleet map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTypeRow {
    /// The cluster type's name.
    pub name: String,
    /// One entry per shown environment, in the same order; `None` where the environment has
    /// no such cluster type.
    pub cells: Vec<Option<Cell>>,
}

/// A cluster type in one environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Deployment targets assigned to it.
    pub deployment_targets: u64,
    /// Its clusters in each state.
    pub counts: StateCounts,
}

impl Cell {
    /// The cell's state.
    pub fn state(&self) -> State {
        self.counts.state()
    }
}

/// What the promotion view shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionFilter {
    /// The page of control-plane commits, newest first.
    pub page: Option<Page>,
}

/// Control-plane `main` commits down, environments across: how far each commit got.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionView {
    /// The environments, in promotion order (the columns).
    pub environments: Vec<String>,
    /// One page of `main` commits, newest first (the rows).
    pub commits: Vec<PromotionRow>,
    /// Commits on every page.
    pub total_commits: u64,
    /// The page shown.
    pub page: Page,
}

/// A control-plane `main` commit and its way through the environments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionRow {
    /// The commit id.
    pub commit: String,
    /// The first line of its message.
    pub subject: String,
    /// Its author.
    pub author: Option<String>,
    /// When it was committed.
    pub committed_at: Option<Timestamp>,
    /// One entry per environment, in the same order; `None` where it was never pinned.
    pub stages: Vec<Option<Stage>>,
}

/// A control-plane commit in one environment: pinned → rendered → delivered → compliant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stage {
    /// When the environment's BaseRepo was pinned to the commit.
    pub pinned_at: Option<Timestamp>,
    /// The GitOps commit rendered from it.
    pub gitops_commit: Option<String>,
    /// When it was rendered.
    pub rendered_at: Option<Timestamp>,
    /// When the GitOps commit reached the environment branch (pushed, or its PR merged).
    pub delivered_at: Option<Timestamp>,
    /// When every cluster of the environment was compliant with it.
    pub compliant_at: Option<Timestamp>,
    /// The clusters' states for this GitOps commit.
    pub counts: StateCounts,
    /// Why it is not compliant yet: the first failed or late clusters.
    pub blockers: Vec<Blocker>,
    /// Blocking clusters in all, of which `blockers` lists the first.
    pub total_blockers: u64,
    /// A later commit replaced this one in the environment before it was compliant.
    pub superseded: bool,
}

/// How far a commit got in an environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageState {
    /// Pinned, not rendered yet.
    Pinned,
    /// Rendered, not delivered yet.
    Rendered,
    /// Delivered; clusters are reconciling.
    Delivered,
    /// A cluster failed: the promotion is blocked.
    Blocked,
    /// Every cluster is compliant.
    Compliant,
    /// Replaced by a later commit before it was compliant.
    Superseded,
}

impl StageState {
    /// The label shown to people.
    pub fn label(self) -> &'static str {
        match self {
            StageState::Pinned => "Pinned",
            StageState::Rendered => "Rendered",
            StageState::Delivered => "Delivering",
            StageState::Blocked => "Blocked",
            StageState::Compliant => "Compliant",
            StageState::Superseded => "Superseded",
        }
    }

    /// The cluster state whose colour and icon the stage borrows.
    pub fn tone(self) -> State {
        match self {
            StageState::Compliant => State::Compliant,
            StageState::Blocked => State::Failed,
            StageState::Superseded => State::NoClusters,
            StageState::Pinned | StageState::Rendered | StageState::Delivered => State::Reconciling,
        }
    }
}

impl Stage {
    /// How far the commit got.
    pub fn state(&self) -> StageState {
        if self.counts.failed > 0 {
            StageState::Blocked
        } else if self.compliant_at.is_some() {
            StageState::Compliant
        } else if self.superseded {
            StageState::Superseded
        } else if self.delivered_at.is_some() {
            StageState::Delivered
        } else if self.gitops_commit.is_some() {
            StageState::Rendered
        } else {
            StageState::Pinned
        }
    }
}

/// A cluster that keeps a commit from being compliant in an environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    /// The cluster's name.
    pub cluster: String,
    /// Its cluster type.
    pub cluster_type: String,
    /// Its state.
    pub state: Option<ClusterState>,
    /// Its reconciler's last message.
    pub message: Option<String>,
}

/// Which clusters a drill-down page lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterQuery {
    /// Only clusters in this state.
    pub state: Option<State>,
    /// The page of clusters.
    pub page: Option<Page>,
}

/// A cluster type in one environment, in detail.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterTypePage {
    /// The environment.
    pub environment: String,
    /// The cluster type.
    pub name: String,
    /// Its labels, which the scheduling policies and ConfigMaps select on.
    pub labels: BTreeMap<String, String>,
    /// Why the source cannot show the labels, when it cannot (shown instead of them).
    #[serde(default)]
    pub labels_unavailable: Option<String>,
    /// The reconciler its clusters run (`arc-flux`, `argocd`...).
    pub reconciler: Option<String>,
    /// The environment's latest GitOps commit.
    pub gitops_commit: Option<String>,
    /// The deployment targets assigned to it.
    pub deployment_targets: Vec<DeploymentTargetInfo>,
    /// Its platform config values and where each came from.
    pub config: Vec<ConfigValue>,
    /// Why the source cannot show the platform config, when it cannot (shown instead of it).
    #[serde(default)]
    pub config_unavailable: Option<String>,
    /// Its clusters in each state (all of them, not only the page).
    pub counts: StateCounts,
    /// One page of its clusters, after the query's state filter.
    pub clusters: Vec<ClusterSummary>,
    /// Clusters matching the query, on every page.
    pub total_clusters: u64,
    /// The page shown.
    pub page: Page,
}

/// A deployment target assigned to a cluster type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentTargetInfo {
    /// Its name (`<workload>-<target>`, as in the GitOps tree's folder).
    pub name: String,
    /// The workload it belongs to.
    pub workload: String,
    /// The namespace it is deployed to.
    pub namespace: Option<String>,
    /// Where the reconciler takes its manifests from.
    pub source: ReconcilerSource,
}

/// The manifests' location a reconciler watches (from `reconciler.yaml`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcilerSource {
    /// The repository URL.
    pub repo: String,
    /// The branch.
    pub branch: String,
    /// The path in the repository.
    pub path: String,
}

/// A platform config value of an assignment and its provenance.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigValue {
    /// The key.
    pub key: String,
    /// The value, as written to `platform-config.yaml`.
    pub value: String,
    /// The ConfigMap it came from (the last matching one wins).
    pub config_map: String,
    /// Other matching ConfigMaps that set the key too, overridden by `config_map`.
    pub overridden: Vec<String>,
}

/// A cluster, as lists show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSummary {
    /// Its name.
    pub name: String,
    /// Its environment.
    pub environment: String,
    /// Its cluster type.
    pub cluster_type: String,
    /// Its state relative to the environment's latest GitOps commit.
    pub state: Option<ClusterState>,
    /// The GitOps commit it last reported.
    pub revision: Option<String>,
    /// Its reconciler's last message (Flux's `Ready` condition message).
    pub message: Option<String>,
    /// When it last reported.
    pub last_report_at: Option<Timestamp>,
}

/// A workload and where it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadPage {
    /// Its name.
    pub name: String,
    /// The repository its manifests come from.
    pub source: Option<String>,
    /// One page of its placements: every environment × cluster type it runs on.
    pub placements: Vec<Placement>,
    /// Placements on every page.
    pub total_placements: u64,
    /// The page shown.
    pub page: Page,
}

/// A workload's deployment target on one cluster type of one environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The environment.
    pub environment: String,
    /// The cluster type.
    pub cluster_type: String,
    /// The deployment target.
    pub deployment_target: String,
    /// The version it runs: the manifests' commit or tag in its reconciler source.
    pub version: Option<String>,
    /// The environment's GitOps commit that carries it.
    pub gitops_commit: Option<String>,
    /// Since when it runs that version.
    pub since: Option<Timestamp>,
    /// The cluster type's clusters in each state.
    pub counts: StateCounts,
}

/// A cluster and the history of its reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterPage {
    /// The cluster now.
    pub cluster: ClusterSummary,
    /// One page of its reports, newest first.
    pub reports: Vec<Report>,
    /// Reports on every page.
    pub total_reports: u64,
    /// The page shown.
    pub page: Page,
}

/// One compliance report of a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// When it was received.
    pub at: Timestamp,
    /// The GitOps commit reported.
    pub revision: Option<String>,
    /// The state it put the cluster in.
    pub state: Option<ClusterState>,
    /// The reconciler's message.
    pub message: Option<String>,
}

/// Why a source could not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceError {
    /// The data is not reachable now (the database is down, the hub is starting): the
    /// dashboard answers 503 and the page may be reloaded later.
    Unavailable(String),
    /// Anything else: the dashboard answers 500.
    Internal(String),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Unavailable(why) => write!(f, "fleet data unavailable: {why}"),
            SourceError::Internal(why) => write!(f, "fleet data error: {why}"),
        }
    }
}

impl std::error::Error for SourceError {}

/// Where the dashboard reads its data: the hub's storage, or a [`MemorySource`](crate::MemorySource).
///
/// Every method answers one page of the dashboard, aggregated and paged by the source.
/// `None` means the named object does not exist (the dashboard answers 404).
pub trait FleetSource: Send + Sync + 'static {
    /// The fleet map.
    fn fleet(&self, filter: &FleetFilter) -> impl Future<Output = Result<FleetMap, SourceError>> + Send;

    /// The promotion view.
    fn promotions(
        &self,
        filter: &PromotionFilter,
    ) -> impl Future<Output = Result<PromotionView, SourceError>> + Send;

    /// Cluster type `name` in environment `environment`.
    fn cluster_type(
        &self,
        environment: &str,
        name: &str,
        query: &ClusterQuery,
    ) -> impl Future<Output = Result<Option<ClusterTypePage>, SourceError>> + Send;

    /// Workload `name`.
    fn workload(
        &self,
        name: &str,
        page: Page,
    ) -> impl Future<Output = Result<Option<WorkloadPage>, SourceError>> + Send;

    /// Cluster `name` in environment `environment`, with a page of its reports.
    fn cluster(
        &self,
        environment: &str,
        name: &str,
        page: Page,
    ) -> impl Future<Output = Result<Option<ClusterPage>, SourceError>> + Send;

    /// Environment `environment`'s progressive rollout: its waves, their cluster types and
    /// clusters, the soak and what blocks (the hub's `GET /api/v1/environments/{env}/rollout`
    /// answer). `None`: no such environment.
    fn rollout(
        &self,
        environment: &str,
    ) -> impl Future<Output = Result<Option<kalypso_hub_api::EnvironmentRollout>, SourceError>> + Send;

    /// A number that changes whenever any answer would change: the pages update themselves
    /// when it does.
    fn version(&self) -> impl Future<Output = Result<u64, SourceError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_severe_state_wins() {
        let mut counts = StateCounts::default();
        assert_eq!(counts.state(), State::NoClusters);
        counts.add(State::Compliant);
        assert_eq!(counts.state(), State::Compliant);
        counts.add(State::Reconciling);
        assert_eq!(counts.state(), State::Reconciling);
        counts.add(State::Stale);
        assert_eq!(counts.state(), State::Stale);
        counts.add(State::Failed);
        assert_eq!(counts.state(), State::Failed);
        assert_eq!(counts.total(), 4);
    }

    #[test]
    fn states_round_trip_through_their_names() {
        for state in State::ALL {
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
        }
        assert!("Failed".parse::<State>().is_err());
    }

    #[test]
    fn a_failure_blocks_a_stage_even_after_it_was_compliant() {
        let mut stage = Stage::default();
        assert_eq!(stage.state(), StageState::Pinned);
        stage.gitops_commit = Some("abc".to_owned());
        assert_eq!(stage.state(), StageState::Rendered);
        stage.delivered_at = Some(1);
        assert_eq!(stage.state(), StageState::Delivered);
        stage.superseded = true;
        assert_eq!(stage.state(), StageState::Superseded);
        stage.compliant_at = Some(2);
        assert_eq!(stage.state(), StageState::Compliant);
        stage.counts.add(State::Failed);
        assert_eq!(stage.state(), StageState::Blocked);
    }

    fn cell(compliant: u64, failed: u64) -> Cell {
        Cell {
            deployment_targets: 1,
            counts: StateCounts {
                compliant,
                failed,
                ..StateCounts::default()
            },
        }
    }

    fn column(name: &str, cells: &[(&str, Cell)]) -> FleetColumn {
        FleetColumn {
            name: name.to_owned(),
            gitops_commit: Some(format!("{name}-head")),
            cells: cells.iter().map(|(n, c)| ((*n).to_owned(), c.clone())).collect(),
            ..FleetColumn::default()
        }
    }

    #[test]
    fn the_fleet_map_is_assembled_once_for_every_source() {
        let all = vec!["dev".to_owned(), "stage".to_owned(), "prod".to_owned()];
        let columns = vec![
            column("stage", &[("drone", cell(2, 0)), ("large", cell(0, 1))]),
            column("dev", &[("drone", cell(1, 0)), ("edge", cell(0, 0))]),
        ];
        let map = FleetMap::assemble(all.clone(), columns.clone(), &FleetFilter::default());
        // Columns in promotion order; an environment without a column is shown empty.
        let names: Vec<&str> = map.environments.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["dev", "stage", "prod"]);
        assert_eq!(map.environments[2].cluster_types, 0);
        assert_eq!(map.environments[2].gitops_commit, None);
        let rows: Vec<&str> = map.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(rows, ["drone", "edge", "large"]);
        assert_eq!(map.rows[2].cells, [None, Some(cell(0, 1)), None]);
        assert_eq!(
            map.rows[1].cells[0].as_ref().map(Cell::state),
            Some(State::NoClusters)
        );

        // The cluster-type filter hides rows, not the environments' totals.
        let filter = FleetFilter {
            cluster_type: Some(" dro ".to_owned()),
            ..FleetFilter::default()
        };
        let map = FleetMap::assemble(all.clone(), columns.clone(), &filter);
        assert_eq!(map.total_rows, 1);
        assert_eq!(map.environments[1].counts.total(), 3);
        assert_eq!(map.environments[1].cluster_types, 2);

        // A row matches a state when one of its cells is in it; pages slice the rows.
        let filter = FleetFilter {
            state: Some(State::Failed),
            ..FleetFilter::default()
        };
        let map = FleetMap::assemble(all.clone(), columns.clone(), &filter);
        assert_eq!(map.rows.len(), 1);
        assert_eq!(map.rows[0].name, "large");
        let filter = FleetFilter {
            environment: Some("stage".to_owned()),
            page: Some(Page::new(2, 1)),
            ..FleetFilter::default()
        };
        let map = FleetMap::assemble(all, columns, &filter);
        assert_eq!(map.all_environments, ["dev", "stage", "prod"]);
        assert_eq!(map.environments.len(), 1);
        assert_eq!((map.total_rows, map.rows.len()), (2, 1));
        assert_eq!(map.rows[0].name, "large");
        assert_eq!(map.rows[0].cells.len(), 1);
    }

    #[test]
    fn behind_and_unknown_clusters_show_as_reconciling_and_block() {
        assert_eq!(State::from(ClusterState::Behind), State::Reconciling);
        assert_eq!(State::from(ClusterState::Unknown), State::Reconciling);
        assert!(State::from(ClusterState::Behind).blocks());
        assert!(State::Failed.blocks());
        assert!(!State::Stale.blocks());
        assert!(!State::Compliant.blocks());
        let mut counts = StateCounts::default();
        counts.add(ClusterState::Behind);
        counts.add(ClusterState::Stale);
        counts.add(ClusterState::Failed);
        assert_eq!((counts.reconciling, counts.blocking()), (1, 2));
    }

    #[test]
    fn pages_slice_and_count() {
        let items: Vec<u32> = (0..25).collect();
        let page = Page::new(3, 10);
        assert_eq!(page.slice(&items), &[20, 21, 22, 23, 24]);
        assert_eq!(page.count(25), 3);
        assert_eq!(Page::new(9, 10).slice(&items), &[] as &[u32]);
        assert_eq!(Page::new(0, 0), Page::new(1, 1));
        assert_eq!(Page::new(1, 10).count(0), 1);
    }
}
