//! [`MemorySource`]: a [`FleetSource`] over a fleet held in memory.
//!
//! It exists so that the dashboard can be tested, benchmarked and demonstrated without the
//! hub and its database: tests fill a [`FleetData`] as the hub would see a real fleet, change
//! it while a browser looks at it ([`MemorySource::update`], [`MemorySource::report`]) and
//! check that the pages follow. It aggregates by scanning, which is fast enough for a fleet of
//! hundreds of thousands of clusters in memory; the hub does the same in SQL.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

pub use crate::model::DEFAULT_PAGE_SIZE;
use crate::model::{
    BLOCKERS_SHOWN, Blocker, Cell, ClusterPage, ClusterQuery, ClusterState, ClusterSummary, ClusterTypePage,
    ConfigValue, DeploymentTargetInfo, FleetColumn, FleetFilter, FleetMap, FleetSource, Page, Placement,
    PromotionFilter, PromotionRow, PromotionView, Report, SourceError, Stage, State, StateCounts, Timestamp,
    WorkloadPage,
};

/// The whole fleet, as the hub knows it.
#[derive(Clone, Debug, Default)]
pub struct FleetData {
    /// The environments, in promotion order.
    pub environments: Vec<EnvironmentData>,
    /// The control-plane `main` commits, newest first.
    pub commits: Vec<CommitData>,
    /// The workloads' manifest repositories, by workload name.
    pub workload_sources: BTreeMap<String, String>,
}

/// A control-plane `main` commit.
#[derive(Clone, Debug, Default)]
pub struct CommitData {
    /// The commit id.
    pub id: String,
    /// The first line of its message.
    pub subject: String,
    /// Its author.
    pub author: Option<String>,
    /// When it was committed.
    pub at: Option<Timestamp>,
}

/// An environment.
#[derive(Clone, Debug, Default)]
pub struct EnvironmentData {
    /// Its name.
    pub name: String,
    /// The control-plane commit it runs.
    pub control_plane_commit: Option<String>,
    /// The latest commit of its GitOps branch.
    pub gitops_commit: Option<String>,
    /// When that commit was made.
    pub gitops_commit_at: Option<Timestamp>,
    /// Its cluster types, sorted by name.
    pub cluster_types: Vec<ClusterTypeData>,
    /// The control-plane commits it was pinned to, oldest first.
    pub promotions: Vec<PromotionData>,
}

/// One control-plane commit pinned in an environment.
#[derive(Clone, Debug, Default)]
pub struct PromotionData {
    /// The control-plane commit.
    pub commit: String,
    /// When it was pinned.
    pub pinned_at: Option<Timestamp>,
    /// The GitOps commit rendered from it.
    pub gitops_commit: Option<String>,
    /// When it was rendered.
    pub rendered_at: Option<Timestamp>,
    /// When the GitOps commit was delivered.
    pub delivered_at: Option<Timestamp>,
    /// When every cluster was compliant with it.
    pub compliant_at: Option<Timestamp>,
}

/// A cluster type in an environment.
#[derive(Clone, Debug, Default)]
pub struct ClusterTypeData {
    /// Its name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its reconciler.
    pub reconciler: Option<String>,
    /// The deployment targets assigned to it.
    pub deployment_targets: Vec<DeploymentTargetData>,
    /// Its platform config with provenance.
    pub config: Vec<ConfigValue>,
    /// Its clusters.
    pub clusters: Vec<ClusterData>,
}

/// A deployment target on a cluster type.
#[derive(Clone, Debug, Default)]
pub struct DeploymentTargetData {
    /// What the cluster-type page shows.
    pub info: DeploymentTargetInfo,
    /// The version it runs.
    pub version: Option<String>,
    /// Since when.
    pub since: Option<Timestamp>,
}

/// A cluster.
#[derive(Clone, Debug, Default)]
pub struct ClusterData {
    /// Its name.
    pub name: String,
    /// Its state relative to the environment's latest GitOps commit.
    pub state: ClusterState,
    /// The GitOps commit it last reported.
    pub revision: Option<String>,
    /// Its reconciler's last message.
    pub message: Option<String>,
    /// When it last reported.
    pub last_report_at: Option<Timestamp>,
    /// Its reports, oldest first.
    pub reports: Vec<Report>,
}

impl ClusterTypeData {
    fn counts(&self) -> StateCounts {
        let mut counts = StateCounts::default();
        for cluster in &self.clusters {
            counts.add(cluster.state);
        }
        counts
    }
}

impl EnvironmentData {
    fn cluster_type(&self, name: &str) -> Option<&ClusterTypeData> {
        self.cluster_types
            .binary_search_by(|ct| ct.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.cluster_types[i])
    }

    fn cluster_type_mut(&mut self, name: &str) -> Option<&mut ClusterTypeData> {
        self.cluster_types
            .binary_search_by(|ct| ct.name.as_str().cmp(name))
            .ok()
            .map(|i| &mut self.cluster_types[i])
    }

    /// Adds (or replaces) a cluster type, keeping them sorted.
    pub fn put_cluster_type(&mut self, cluster_type: ClusterTypeData) {
        match self
            .cluster_types
            .binary_search_by(|ct| ct.name.cmp(&cluster_type.name))
        {
            Ok(i) => self.cluster_types[i] = cluster_type,
            Err(i) => self.cluster_types.insert(i, cluster_type),
        }
    }

    fn counts(&self) -> StateCounts {
        let mut counts = StateCounts::default();
        for cluster_type in &self.cluster_types {
            counts.merge(&cluster_type.counts());
        }
        counts
    }

    fn find_cluster(&self, name: &str) -> Option<(&ClusterTypeData, &ClusterData)> {
        self.cluster_types.iter().find_map(|ct| {
            ct.clusters
                .iter()
                .find(|cluster| cluster.name == name)
                .map(|cluster| (ct, cluster))
        })
    }
}

fn summary(environment: &str, cluster_type: &str, cluster: &ClusterData) -> ClusterSummary {
    ClusterSummary {
        name: cluster.name.clone(),
        environment: environment.to_owned(),
        cluster_type: cluster_type.to_owned(),
        state: Some(cluster.state),
        revision: cluster.revision.clone(),
        message: cluster.message.clone(),
        last_report_at: cluster.last_report_at,
    }
}

/// The blockers of an environment's current GitOps commit ([`State::blocks`]): the first
/// [`BLOCKERS_SHOWN`], failed clusters first, each group by name; and how many there are.
fn blockers(environment: &EnvironmentData) -> (Vec<Blocker>, u64) {
    let mut blocking: Vec<(&ClusterTypeData, &ClusterData)> = environment
        .cluster_types
        .iter()
        .flat_map(|ct| ct.clusters.iter().map(move |c| (ct, c)))
        .filter(|(_, c)| State::from(c.state).blocks())
        .collect();
    let total = blocking.len() as u64;
    blocking.sort_by(|(_, a), (_, b)| {
        (State::from(a.state) != State::Failed, &a.name)
            .cmp(&(State::from(b.state) != State::Failed, &b.name))
    });
    let shown = blocking
        .into_iter()
        .take(BLOCKERS_SHOWN)
        .map(|(cluster_type, cluster)| Blocker {
            cluster: cluster.name.clone(),
            cluster_type: cluster_type.name.clone(),
            state: Some(cluster.state),
            message: cluster.message.clone(),
        })
        .collect();
    (shown, total)
}

impl FleetData {
    /// The environment named `name`.
    pub fn environment(&self, name: &str) -> Option<&EnvironmentData> {
        self.environments.iter().find(|env| env.name == name)
    }

    /// The environment named `name`, to change.
    pub fn environment_mut(&mut self, name: &str) -> Option<&mut EnvironmentData> {
        self.environments.iter_mut().find(|env| env.name == name)
    }

    /// Records a compliance report of cluster `cluster` of `environment`; when the last
    /// cluster of the environment becomes compliant with its current commit, the promotion
    /// of that commit is marked compliant. Returns whether the cluster exists.
    pub fn report(&mut self, environment: &str, cluster: &str, report: Report) -> bool {
        let Some(env) = self.environment_mut(environment) else {
            return false;
        };
        let Some(data) = env
            .cluster_types
            .iter_mut()
            .flat_map(|ct| ct.clusters.iter_mut())
            .find(|c| c.name == cluster)
        else {
            return false;
        };
        if let Some(state) = report.state {
            data.state = state;
        }
        data.revision.clone_from(&report.revision);
        data.message.clone_from(&report.message);
        data.last_report_at = Some(report.at);
        let at = report.at;
        data.reports.push(report);
        if env.counts().state() == State::Compliant
            && let Some(current) = env.promotions.last_mut()
            && current.compliant_at.is_none()
        {
            current.compliant_at = Some(at);
        }
        true
    }
}

/// A [`FleetSource`] over a [`FleetData`] in memory.
#[derive(Debug, Default)]
pub struct MemorySource {
    data: RwLock<FleetData>,
    version: AtomicU64,
}

impl MemorySource {
    /// A source serving `data`.
    pub fn new(data: FleetData) -> MemorySource {
        MemorySource {
            data: RwLock::new(data),
            version: AtomicU64::new(1),
        }
    }

    /// Changes the fleet; the pages showing it update themselves.
    pub fn update<R>(&self, change: impl FnOnce(&mut FleetData) -> R) -> R {
        let result = change(&mut self.data.write().unwrap_or_else(PoisonError::into_inner));
        self.version.fetch_add(1, Ordering::SeqCst);
        result
    }

    /// Records a cluster's report (see [`FleetData::report`]).
    pub fn report(&self, environment: &str, cluster: &str, report: Report) -> bool {
        self.update(|data| data.report(environment, cluster, report))
    }

    /// Reads the fleet.
    pub fn read<R>(&self, read: impl FnOnce(&FleetData) -> R) -> R {
        read(&self.data.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn fleet_now(&self, filter: &FleetFilter) -> FleetMap {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        let columns = data
            .environments
            .iter()
            .filter(|env| filter.environment.as_ref().is_none_or(|name| &env.name == name))
            .map(|env| FleetColumn {
                name: env.name.clone(),
                control_plane_commit: env.control_plane_commit.clone(),
                gitops_commit: env.gitops_commit.clone(),
                gitops_commit_at: env.gitops_commit_at,
                cells: env
                    .cluster_types
                    .iter()
                    .map(|ct| {
                        let cell = Cell {
                            deployment_targets: ct.deployment_targets.len() as u64,
                            counts: ct.counts(),
                        };
                        (ct.name.clone(), cell)
                    })
                    .collect(),
            })
            .collect();
        let all_environments = data.environments.iter().map(|e| e.name.clone()).collect();
        FleetMap::assemble(all_environments, columns, filter)
    }

    fn promotions_now(&self, filter: &PromotionFilter) -> PromotionView {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        let page = filter.page.unwrap_or(Page::new(1, 20));
        let current: Vec<(Vec<Blocker>, u64, StateCounts)> = data
            .environments
            .iter()
            .map(|env| {
                let (shown, total) = blockers(env);
                (shown, total, env.counts())
            })
            .collect();
        let commits = page
            .slice(&data.commits)
            .iter()
            .map(|commit| PromotionRow {
                commit: commit.id.clone(),
                subject: commit.subject.clone(),
                author: commit.author.clone(),
                committed_at: commit.at,
                stages: data
                    .environments
                    .iter()
                    .zip(&current)
                    .map(|(env, (shown, total, counts))| {
                        let position = env.promotions.iter().position(|p| p.commit == commit.id)?;
                        let promotion = &env.promotions[position];
                        let is_current = position + 1 == env.promotions.len();
                        let mut stage = Stage {
                            pinned_at: promotion.pinned_at,
                            gitops_commit: promotion.gitops_commit.clone(),
                            rendered_at: promotion.rendered_at,
                            delivered_at: promotion.delivered_at,
                            compliant_at: promotion.compliant_at,
                            superseded: !is_current,
                            ..Stage::default()
                        };
                        if is_current && promotion.delivered_at.is_some() {
                            stage.counts = *counts;
                            stage.blockers.clone_from(shown);
                            stage.total_blockers = *total;
                        }
                        Some(stage)
                    })
                    .collect(),
            })
            .collect();
        PromotionView {
            environments: data.environments.iter().map(|e| e.name.clone()).collect(),
            commits,
            total_commits: data.commits.len() as u64,
            page,
        }
    }

    fn cluster_type_now(
        &self,
        environment: &str,
        name: &str,
        query: &ClusterQuery,
    ) -> Option<ClusterTypePage> {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        let env = data.environment(environment)?;
        let cluster_type = env.cluster_type(name)?;
        let page = query.page.unwrap_or(Page::new(1, DEFAULT_PAGE_SIZE));
        let mut matching: Vec<&ClusterData> = cluster_type
            .clusters
            .iter()
            .filter(|c| query.state.is_none_or(|s| State::from(c.state) == s))
            .collect();
        // The clusters that need attention first.
        matching.sort_by(|a, b| {
            State::from(b.state)
                .cmp(&State::from(a.state))
                .then_with(|| a.name.cmp(&b.name))
        });
        Some(ClusterTypePage {
            environment: env.name.clone(),
            name: cluster_type.name.clone(),
            labels: cluster_type.labels.clone(),
            labels_unavailable: None,
            reconciler: cluster_type.reconciler.clone(),
            gitops_commit: env.gitops_commit.clone(),
            deployment_targets: cluster_type
                .deployment_targets
                .iter()
                .map(|dt| dt.info.clone())
                .collect(),
            config: cluster_type.config.clone(),
            config_unavailable: None,
            counts: cluster_type.counts(),
            total_clusters: matching.len() as u64,
            clusters: page
                .slice(&matching)
                .iter()
                .map(|c| summary(&env.name, &cluster_type.name, c))
                .collect(),
            page,
        })
    }

    fn workload_now(&self, name: &str, page: Page) -> Option<WorkloadPage> {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        let mut placements = Vec::new();
        for env in &data.environments {
            for cluster_type in &env.cluster_types {
                for dt in cluster_type
                    .deployment_targets
                    .iter()
                    .filter(|dt| dt.info.workload == name)
                {
                    placements.push(Placement {
                        environment: env.name.clone(),
                        cluster_type: cluster_type.name.clone(),
                        deployment_target: dt.info.name.clone(),
                        version: dt.version.clone(),
                        gitops_commit: env.gitops_commit.clone(),
                        since: dt.since,
                        counts: cluster_type.counts(),
                    });
                }
            }
        }
        let source = data.workload_sources.get(name).cloned();
        if placements.is_empty() && source.is_none() {
            return None;
        }
        Some(WorkloadPage {
            name: name.to_owned(),
            source,
            total_placements: placements.len() as u64,
            placements: page.slice(&placements).to_vec(),
            page,
        })
    }

    fn cluster_now(&self, environment: &str, name: &str, page: Page) -> Option<ClusterPage> {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        let env = data.environment(environment)?;
        let (cluster_type, cluster) = env.find_cluster(name)?;
        let newest_first: Vec<Report> = cluster.reports.iter().rev().cloned().collect();
        Some(ClusterPage {
            cluster: summary(&env.name, &cluster_type.name, cluster),
            total_reports: newest_first.len() as u64,
            reports: page.slice(&newest_first).to_vec(),
            page,
        })
    }
}

impl FleetSource for MemorySource {
    async fn fleet(&self, filter: &FleetFilter) -> Result<FleetMap, SourceError> {
        Ok(self.fleet_now(filter))
    }

    async fn promotions(&self, filter: &PromotionFilter) -> Result<PromotionView, SourceError> {
        Ok(self.promotions_now(filter))
    }

    async fn cluster_type(
        &self,
        environment: &str,
        name: &str,
        query: &ClusterQuery,
    ) -> Result<Option<ClusterTypePage>, SourceError> {
        Ok(self.cluster_type_now(environment, name, query))
    }

    async fn workload(&self, name: &str, page: Page) -> Result<Option<WorkloadPage>, SourceError> {
        Ok(self.workload_now(name, page))
    }

    async fn cluster(
        &self,
        environment: &str,
        name: &str,
        page: Page,
    ) -> Result<Option<ClusterPage>, SourceError> {
        Ok(self.cluster_now(environment, name, page))
    }

    async fn rollout(
        &self,
        environment: &str,
    ) -> Result<Option<kalypso_hub_api::EnvironmentRollout>, SourceError> {
        // The memory source's environments are delivered whole: none tracks a rollout.
        Ok(self.read(|data| {
            data.environments.iter().find(|e| e.name == environment).map(|e| {
                kalypso_hub_api::EnvironmentRollout {
                    environment: e.name.clone(),
                    gitops_commit: e.gitops_commit.clone(),
                    rollout: None,
                    unavailable: None,
                    labels_unavailable: None,
                    freezes: Vec::new(),
                }
            })
        }))
    }

    async fn version(&self) -> Result<u64, SourceError> {
        Ok(self.version.load(Ordering::SeqCst))
    }
}

/// Changes a cluster type of an environment in place; returns whether both exist.
pub fn with_cluster_type(
    data: &mut FleetData,
    environment: &str,
    cluster_type: &str,
    change: impl FnOnce(&mut ClusterTypeData),
) -> bool {
    match data
        .environment_mut(environment)
        .and_then(|env| env.cluster_type_mut(cluster_type))
    {
        Some(ct) => {
            change(ct);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(name: &str, state: ClusterState) -> ClusterData {
        ClusterData {
            name: name.to_owned(),
            state,
            ..ClusterData::default()
        }
    }

    #[test]
    fn blockers_are_failed_first_then_waited_for_never_stale() {
        let mut env = EnvironmentData::default();
        env.put_cluster_type(ClusterTypeData {
            name: "a".to_owned(),
            clusters: vec![
                cluster("z-failed", ClusterState::Failed),
                cluster("b-stale", ClusterState::Stale),
                cluster("c-ok", ClusterState::Compliant),
            ],
            ..ClusterTypeData::default()
        });
        env.put_cluster_type(ClusterTypeData {
            name: "b".to_owned(),
            clusters: vec![
                cluster("a-behind", ClusterState::Behind),
                cluster("d-reconciling", ClusterState::Reconciling),
                cluster("e-reconciling", ClusterState::Reconciling),
            ],
            ..ClusterTypeData::default()
        });
        let (shown, total) = blockers(&env);
        let names: Vec<&str> = shown.iter().map(|b| b.cluster.as_str()).collect();
        assert_eq!(names, ["z-failed", "a-behind", "d-reconciling"]);
        assert_eq!(total, 4);
        assert_eq!(total, env.counts().blocking());
    }
}
