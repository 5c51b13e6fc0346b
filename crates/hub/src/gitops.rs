//! The GitOps side: what each environment's platform GitOps branch held, commit by commit.
//!
//! Clusters report commits only; the hub learns what a commit means from the GitOps tree
//! kalypso (or the original scheduler) wrote: `.github/tracking/Promoted_Commit_Id` (the
//! control-plane `main` commit promoted), a folder per cluster type, and in it a folder per
//! deployment target with `namespace.yaml` (labels `workload`, `deploymentTarget`) and
//! `reconciler.yaml` (a Flux GitRepository + Kustomization, or an Argo CD Application).
//! Everything is extracted tolerantly: a missing or odd file gives nulls, never an error.
//!
//! A refresh discovers the environments of the control plane and their GitOpsRepo (with
//! kalypso-git), fetches each GitOps branch into the cache, walks its first-parent history
//! from the head down to the newest commit already stored, and stores the new commits and
//! what changed as intervals ([`diff`]). Every write is keyed, so replicas refreshing at the
//! same time store the same rows once. A branch found rewound (commits stored as on it after
//! the commit the walk stopped at) has those commits taken off it first, with what they
//! changed and the clusters that ran them (`docs/hub.md`, "Rewound branches").

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use git2::{ObjectType, Oid, Repository};
use kalypso_core::tree as layout;
use kalypso_git::auth::Credentials;
use kalypso_git::control_plane::ControlPlane;
use kalypso_git::repo::{Repo, Transport};
use kalypso_git::{AuthSettings, Cache, RepoUrl, RetryPolicy};
use kalypso_hub_api::{ClusterState, ReconcilerSource};
use serde::Serialize;
use sqlx::Row;
use tokio::sync::{Notify, watch};

use crate::db::{Db, DbError};
use crate::ingest::{PlatformState, set_platform_states};

/// A deployment target folder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The `workload` label of its Namespace.
    pub workload: Option<String>,
    /// Its reconciler's source.
    pub source: Option<ReconcilerSource>,
}

/// One commit of a GitOps branch and its tree's meaning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit.
    pub sha: String,
    /// Its first parent.
    pub parent: Option<String>,
    /// Committer time, Unix ms.
    pub committed_at: i64,
    /// The content of `.github/tracking/Promoted_Commit_Id`.
    pub promoted: Option<String>,
    /// The status of the progressive rollout `.github/tracking/Rollout_State` tracks, if any.
    pub rollout_status: Option<String>,
    /// Cluster type → deployment target → what it runs.
    pub cluster_types: BTreeMap<String, BTreeMap<String, Target>>,
    /// For an index of an OCI environment: cluster type → its artifact's manifest digest
    /// (`sha256:<hex>`), what its clusters report (see [`crate::oci`]). Empty for git.
    pub artifacts: BTreeMap<String, String>,
}

fn yaml_docs(text: &str) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize as _;
    // The first broken document ends the stream (the parser cannot resynchronise).
    serde_yaml_ng::Deserializer::from_str(text)
        .map_while(|doc| serde_yaml_ng::Value::deserialize(doc).ok())
        .take(1000)
        .collect()
}

fn get<'a>(v: &'a serde_yaml_ng::Value, path: &[&str]) -> Option<&'a serde_yaml_ng::Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn get_str(v: &serde_yaml_ng::Value, path: &[&str]) -> Option<String> {
    get(v, path).and_then(|v| v.as_str()).map(str::to_owned)
}

/// The `workload` label of the Namespace in a `namespace.yaml`.
pub fn parse_namespace(text: &str) -> Option<String> {
    yaml_docs(text)
        .iter()
        .find(|d| get_str(d, &["kind"]).as_deref() == Some("Namespace"))
        .and_then(|d| get_str(d, &["metadata", "labels", "workload"]))
}

/// The source of a `reconciler.yaml`: Flux GitRepository (+ Kustomization path) or Argo CD
/// Application. `None` when it holds neither.
pub fn parse_reconciler(text: &str) -> Option<ReconcilerSource> {
    let docs = yaml_docs(text);
    let kind_of = |d: &serde_yaml_ng::Value| get_str(d, &["kind"]).unwrap_or_default();
    if let Some(app) = docs.iter().find(|d| kind_of(d) == "Application") {
        let source = get(app, &["spec", "source"])
            .or_else(|| get(app, &["spec", "sources"]).and_then(|s| s.get(0)))
            .cloned()
            .unwrap_or_default();
        return Some(ReconcilerSource {
            kind: "argocd".to_owned(),
            url: get_str(&source, &["repoURL"]),
            branch: None,
            revision: get_str(&source, &["targetRevision"]),
            path: get_str(&source, &["path"]),
        });
    }
    let repo = docs.iter().find(|d| kind_of(d) == "GitRepository");
    let kustomization = docs.iter().find(|d| kind_of(d) == "Kustomization");
    if repo.is_none() && kustomization.is_none() {
        return None;
    }
    let reference = |key: &str| repo.and_then(|r| get_str(r, &["spec", "ref", key]));
    Some(ReconcilerSource {
        kind: "flux".to_owned(),
        url: repo.and_then(|r| get_str(r, &["spec", "url"])),
        branch: reference("branch"),
        revision: reference("tag")
            .or_else(|| reference("commit"))
            .or_else(|| reference("semver"))
            .or_else(|| reference("name")),
        path: kustomization.and_then(|k| get_str(k, &["spec", "path"])),
    })
}

/// Reads the meaning of commits of one repository, remembering deployment target folders
/// by tree id (most are unchanged from one commit to the next).
struct TreeReader<'r> {
    git: &'r Repository,
    targets: HashMap<Oid, Target>,
}

impl<'r> TreeReader<'r> {
    fn blob_text(&self, tree: &git2::Tree<'_>, name: &str) -> Option<String> {
        let entry = tree.get_name(name)?;
        let blob = self.git.find_blob(entry.id()).ok()?;
        Some(String::from_utf8_lossy(blob.content()).into_owned())
    }

    fn target(&mut self, id: Oid) -> Target {
        if let Some(t) = self.targets.get(&id) {
            return t.clone();
        }
        let target = match self.git.find_tree(id) {
            Ok(tree) => Target {
                workload: self
                    .blob_text(&tree, layout::NAMESPACE_FILE)
                    .and_then(|t| parse_namespace(&t)),
                source: self
                    .blob_text(&tree, layout::RECONCILER_FILE)
                    .and_then(|t| parse_reconciler(&t)),
            },
            Err(_) => Target::default(),
        };
        self.targets.insert(id, target.clone());
        target
    }

    fn commit(&mut self, id: Oid) -> Result<CommitInfo, git2::Error> {
        let commit = self.git.find_commit(id)?;
        let root = commit.tree()?;
        let promoted = root
            .get_path(std::path::Path::new(layout::PROMOTED_COMMIT_PATH))
            .ok()
            .and_then(|e| self.git.find_blob(e.id()).ok())
            .map(|b| String::from_utf8_lossy(b.content()).trim().to_owned())
            .filter(|s| !s.is_empty());
        let rollout_status = root
            .get_path(std::path::Path::new(kalypso_core::rollout::ROLLOUT_STATE_PATH))
            .ok()
            .and_then(|e| self.git.find_blob(e.id()).ok())
            .and_then(|b| kalypso_core::rollout::RolloutState::parse(b.content()))
            .map(|state| state.status.as_str().to_owned());
        let mut cluster_types = BTreeMap::new();
        for entry in root.iter() {
            let Ok(name) = entry.name() else { continue };
            if name.starts_with('.') || entry.kind() != Some(ObjectType::Tree) {
                continue;
            }
            let tree = self.git.find_tree(entry.id())?;
            let mut targets = BTreeMap::new();
            for dt in tree.iter() {
                let Ok(dt_name) = dt.name() else { continue };
                if dt.kind() == Some(ObjectType::Tree) && !dt_name.starts_with('.') {
                    targets.insert(dt_name.to_owned(), self.target(dt.id()));
                }
            }
            cluster_types.insert(name.to_owned(), targets);
        }
        Ok(CommitInfo {
            sha: id.to_string(),
            parent: commit.parent_ids().next().map(|p| p.to_string()),
            committed_at: commit.committer().when().seconds() * 1000,
            promoted,
            rollout_status,
            cluster_types,
            artifacts: BTreeMap::new(),
        })
    }
}

/// New commits of a branch, oldest first, after the stored one they descend from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The newest stored commit the walk reached, and its position (`None`: from the root).
    pub base: Option<(String, i64)>,
    /// The new commits, oldest first.
    pub commits: Vec<CommitInfo>,
}

/// Walks the first-parent history of `head` in `git` down to a commit of `known` (sha →
/// position), reading each new commit's tree.
pub fn read_history(
    git: &Repository,
    head: Oid,
    known: &HashMap<String, i64>,
) -> Result<History, git2::Error> {
    let mut reader = TreeReader {
        git,
        targets: HashMap::new(),
    };
    let mut new = Vec::new();
    let mut base = None;
    let mut next = Some(head);
    while let Some(id) = next {
        let sha = id.to_string();
        if let Some(position) = known.get(&sha) {
            base = Some((sha, *position));
            break;
        }
        let info = reader.commit(id)?;
        next = info.parent.as_deref().and_then(|p| Oid::from_str(p).ok());
        new.push(info);
    }
    new.reverse();
    Ok(History { base, commits: new })
}

/// An open interval: (cluster type, deployment target or '') → (from position, workload,
/// source as JSON).
pub type Open = BTreeMap<(String, String), (i64, Option<String>, Option<String>)>;

/// A change to the stored intervals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A placement starts at a commit.
    Open {
        /// Cluster type.
        cluster_type: String,
        /// Deployment target ('' for the cluster type itself).
        target: String,
        /// Workload.
        workload: Option<String>,
        /// Source, as JSON.
        source: Option<String>,
        /// The commit's position.
        position: i64,
        /// The commit.
        sha: String,
    },
    /// The placement opened at `from` ends at a commit.
    Close {
        /// Cluster type.
        cluster_type: String,
        /// Deployment target ('' for the cluster type itself).
        target: String,
        /// Where it was opened.
        from: i64,
        /// The commit's position.
        position: i64,
        /// The commit.
        sha: String,
    },
}

/// The interval changes of `commit` (at `position`) against `open`, which is updated.
pub fn diff(open: &mut Open, commit: &CommitInfo, position: i64) -> Vec<Op> {
    let mut now: BTreeMap<(String, String), (Option<String>, Option<String>)> = BTreeMap::new();
    for (ct, targets) in &commit.cluster_types {
        now.insert((ct.clone(), String::new()), (None, None));
        for (dt, t) in targets {
            let source = t.source.as_ref().and_then(|s| serde_json::to_string(s).ok());
            now.insert((ct.clone(), dt.clone()), (t.workload.clone(), source));
        }
    }
    let mut ops = Vec::new();
    let closing: Vec<(String, String)> = open
        .iter()
        .filter(|(k, (_, w, s))| now.get(*k).is_none_or(|(nw, ns)| nw != w || ns != s))
        .map(|(k, _)| k.clone())
        .collect();
    for key in closing {
        if let Some((from, _, _)) = open.remove(&key) {
            ops.push(Op::Close {
                cluster_type: key.0,
                target: key.1,
                from,
                position,
                sha: commit.sha.clone(),
            });
        }
    }
    for (key, (workload, source)) in now {
        if let std::collections::btree_map::Entry::Vacant(slot) = open.entry(key) {
            let (cluster_type, target) = slot.key().clone();
            ops.push(Op::Open {
                cluster_type,
                target,
                workload: workload.clone(),
                source: source.clone(),
                position,
                sha: commit.sha.clone(),
            });
            slot.insert((position, workload, source));
        }
    }
    ops
}

/// Where the control plane is and how to reach it.
#[derive(Clone, Debug)]
pub struct GitSettings {
    /// The control plane (git URL or local path).
    pub control_plane: String,
    /// The mirrors' folder.
    pub cache_dir: PathBuf,
    /// Credentials.
    pub auth: AuthSettings,
    /// Network retries.
    pub retry: RetryPolicy,
    /// The control plane's main branch.
    pub main_branch: String,
    /// Registry access, for environments delivered to OCI registries (`oci://` GitOpsRepos).
    pub registry: kalypso_git::oci::AuthSettings,
}

/// An environment's GitOps branch, fetched: its head and history.
#[derive(Debug)]
struct EnvHistory {
    name: String,
    repo: String,
    branch: String,
    history: Option<History>,
    /// The PromotionPolicy of the environment's branch ([`crate::policy`]).
    policy: crate::policy::PolicyRead,
}

/// What a refresh pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefreshReport {
    /// Environments read.
    pub environments: usize,
    /// New commits stored.
    pub commits: usize,
    /// Environments whose branch was found rewound (`docs/hub.md`, "Rewound branches").
    pub rewound: usize,
    /// Per-environment failures (redacted).
    pub errors: Vec<String>,
}

/// The background refresher's handle: ask for a pass, wait for passes.
#[derive(Clone, Debug)]
pub struct Refresher {
    trigger: Arc<Notify>,
    started: Arc<AtomicU64>,
    finished: watch::Sender<u64>,
    enabled: bool,
    /// What the refreshes read of the control plane and the rollouts ([`crate::control_plane`]).
    observed: Arc<crate::control_plane::Observed>,
}

impl Refresher {
    /// A handle; no task runs until [`Refresher::spawn`].
    pub fn new(enabled: bool) -> Refresher {
        Refresher {
            trigger: Arc::new(Notify::new()),
            started: Arc::new(AtomicU64::new(0)),
            finished: watch::channel(0).0,
            enabled,
            observed: Arc::default(),
        }
    }

    /// What the refreshes read of the control plane and the rollouts.
    pub fn observed(&self) -> &crate::control_plane::Observed {
        &self.observed
    }

    /// Whether a control plane is configured.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Runs a pass every `interval` and whenever asked, until the process ends.
    pub fn spawn(
        &self,
        db: Db,
        settings: GitSettings,
        interval: Duration,
        notifier: crate::notify::Notifier,
    ) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                me.started.fetch_add(1, Ordering::SeqCst);
                match refresh_and_observe(&db, &settings, &notifier, &me.observed).await {
                    Ok(report) => {
                        if !report.errors.is_empty() || report.commits > 0 || report.rewound > 0 {
                            tracing::info!(
                                environments = report.environments,
                                commits = report.commits,
                                rewound = report.rewound,
                                errors = ?report.errors,
                                "GitOps history refreshed"
                            );
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "GitOps refresh failed"),
                }
                me.finished.send_modify(|n| *n += 1);
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = me.trigger.notified() => {}
                }
            }
        });
    }

    /// Asks for a pass now and waits (at most `timeout`) until one that started after this
    /// call has finished. Returns at once when no control plane is configured.
    pub async fn refresh_now(&self, timeout: Duration) {
        if !self.enabled {
            return;
        }
        let mut finished = self.finished.subscribe();
        // A pass running now may have read the branches before the call: wait for the next.
        let target = self.started.load(Ordering::SeqCst) + 1;
        self.trigger.notify_one();
        let wait = async {
            while *finished.borrow_and_update() < target {
                if finished.changed().await.is_err() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }
}

/// Failure of a whole refresh pass.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The control plane cannot be read.
    #[error("control plane: {0}")]
    ControlPlane(String),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

fn git_dir(url: &RepoUrl, cache: &Cache) -> PathBuf {
    match url.plain_path() {
        Some(path) => path.to_path_buf(),
        None => cache.dir().join(url.cache_name()),
    }
}

/// Reads the control plane's environments, their GitOps branches and each branch's new
/// history (`known`: the stored commits per environment). Blocking (git).
fn read_all(
    settings: &GitSettings,
    known: &HashMap<String, HashMap<String, i64>>,
    stored_heads: &HashMap<String, (String, Option<String>)>,
    observed: &crate::control_plane::Observed,
) -> Result<Vec<EnvHistory>, RefreshError> {
    let fail = |e: &dyn std::fmt::Display| RefreshError::ControlPlane(kalypso_git::redact(&e.to_string()));
    let credentials = Credentials::load(&settings.auth).map_err(|e| fail(&e))?;
    let transport = Transport::new(&credentials, settings.retry);
    let cache = Cache::new(&settings.cache_dir);
    let url = RepoUrl::parse(&settings.control_plane).map_err(|e| fail(&e))?;
    let cp = ControlPlane::open(&url, &cache, &transport, &settings.main_branch).map_err(|e| fail(&e))?;
    let mut out = Vec::new();
    for env in cp.environments().map_err(|e| fail(&e))? {
        let policy = crate::policy::read_policy(&cp, &env);
        let targets = match cp.gitops_targets(&env) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(environment = %env.name, error = %kalypso_git::redact(&e.to_string()), "cannot read the GitOpsRepo");
                continue;
            }
        };
        let Some(target) = targets.into_iter().next() else {
            continue;
        };
        let empty = HashMap::new();
        let known_here = known.get(&env.name).unwrap_or(&empty);
        let history = if crate::oci::is_oci(&target.repo) {
            let history = read_oci_history(settings, &target.repo, &target.branch, known_here);
            // The newest index: a new one, else the newest stored.
            let newest = match &history {
                Ok(Some(h)) => h.commits.last().map(|c| (c.sha.clone(), c.promoted.clone())),
                _ => None,
            }
            .or_else(|| stored_heads.get(&env.name).cloned());
            if let Some((sha, promoted)) = newest {
                crate::control_plane::observe_promoted(
                    &cp,
                    &env,
                    Some(&sha),
                    promoted.as_deref(),
                    &cache,
                    &transport,
                    observed,
                );
            }
            history
        } else {
            (|| -> Result<Option<History>, String> {
                let url = RepoUrl::parse(&target.repo).map_err(|e| e.to_string())?;
                let repo = Repo::open_source(&url, &cache).map_err(|e| e.to_string())?;
                repo.fetch_branches(&transport, &[target.branch.as_str()], &[])
                    .map_err(|e| e.to_string())?;
                crate::control_plane::observe_git(
                    &cp,
                    &env,
                    &repo,
                    &target.branch,
                    &cache,
                    &transport,
                    observed,
                );
                let Some(head) = repo.branch(&target.branch).map_err(|e| e.to_string())? else {
                    return Ok(None);
                };
                let git = Repository::open(git_dir(&url, &cache)).map_err(|e| e.to_string())?;
                read_history(&git, head, known_here)
                    .map(Some)
                    .map_err(|e| e.to_string())
            })()
        };
        match history {
            Ok(history) => out.push(EnvHistory {
                name: env.name.clone(),
                repo: target.repo.clone(),
                branch: target.branch.clone(),
                history,
                policy,
            }),
            Err(e) => {
                tracing::warn!(environment = %env.name, error = %kalypso_git::redact(&e), "cannot read the GitOps branch");
                out.push(EnvHistory {
                    name: env.name.clone(),
                    repo: target.repo.clone(),
                    branch: target.branch.clone(),
                    history: None,
                    policy,
                });
            }
        }
    }
    Ok(out)
}

/// What each layer's deployment targets run, by layer digest (read once per process: most
/// indexes of an OCI environment share most of their artifacts).
static OCI_LAYERS: std::sync::Mutex<Option<HashMap<kalypso_oci::Digest, LayerTargets>>> =
    std::sync::Mutex::new(None);
/// The deployment targets of a layer, by name.
type LayerTargets = Arc<BTreeMap<String, Target>>;
/// The most layers whose targets are remembered.
const MAX_OCI_LAYERS: usize = 4096;

/// The new indexes of an OCI environment as GitOps commits (see [`crate::oci`]): an index's
/// digest (hex) is the commit id, its cluster types' targets are read from their layers.
fn read_oci_history(
    settings: &GitSettings,
    repo: &str,
    tag: &str,
    known: &HashMap<String, i64>,
) -> Result<Option<History>, String> {
    let registry = crate::oci::registry(&settings.registry, &settings.retry)?;
    let location = kalypso_oci::Location::parse(repo).map_err(|e| e.to_string())?;
    let Some((base, snapshots)) = crate::oci::read_indexes(&registry, &location, tag, known)? else {
        return Ok(None);
    };
    let mut commits = Vec::with_capacity(snapshots.len());
    for snapshot in &snapshots {
        let mut cluster_types = BTreeMap::new();
        let mut artifacts = BTreeMap::new();
        for (ct, entry) in &snapshot.index.cluster_types {
            let cached = OCI_LAYERS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .and_then(|m| m.get(&entry.layer).cloned());
            let targets = match cached {
                Some(targets) => targets,
                None => {
                    let files = crate::oci::layer(&registry, &location, ct, entry)?;
                    let mut targets: BTreeMap<String, Target> = BTreeMap::new();
                    for (path, blob) in &files {
                        let Some((dt, name)) = path.split_once('/') else {
                            continue;
                        };
                        if dt.starts_with('.') || name.contains('/') {
                            continue;
                        }
                        let text = String::from_utf8_lossy(blob);
                        let target = targets.entry(dt.to_owned()).or_default();
                        match name {
                            "namespace.yaml" => target.workload = parse_namespace(&text),
                            "reconciler.yaml" => target.source = parse_reconciler(&text),
                            _ => {}
                        }
                    }
                    let targets = Arc::new(targets);
                    let mut layers = OCI_LAYERS
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let layers = layers.get_or_insert_with(HashMap::new);
                    if layers.len() >= MAX_OCI_LAYERS {
                        layers.clear();
                    }
                    layers.insert(entry.layer.clone(), targets.clone());
                    targets
                }
            };
            cluster_types.insert(ct.clone(), (*targets).clone());
            artifacts.insert(ct.clone(), entry.manifest.to_string());
        }
        commits.push(CommitInfo {
            sha: snapshot.digest.hex().to_owned(),
            parent: snapshot.parent().map(|p| p.hex().to_owned()),
            committed_at: snapshot
                .manifest
                .annotation(kalypso_oci::artifact::CREATED)
                .and_then(crate::model::parse_time)
                .unwrap_or(0),
            promoted: snapshot.index.promoted_commit.clone(),
            // An OCI environment is delivered whole: no rollout.
            rollout_status: None,
            cluster_types,
            artifacts,
        });
    }
    Ok(Some(History { base, commits }))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// One refresh pass: reads every environment's new GitOps commits and stores them.
pub async fn refresh(db: &Db, settings: &GitSettings) -> Result<RefreshReport, RefreshError> {
    let observed = Arc::default();
    refresh_and_observe(db, settings, &crate::notify::Notifier::none(), &observed).await
}

/// [`refresh`], which also stores each environment's PromotionPolicy, records (and notifies)
/// the promotions it sees, and reads into `observed` the rollout each GitOps branch tracks and
/// the control plane at the commits each environment runs ([`crate::control_plane`]).
pub async fn refresh_and_observe(
    db: &Db,
    settings: &GitSettings,
    notifier: &crate::notify::Notifier,
    observed: &Arc<crate::control_plane::Observed>,
) -> Result<RefreshReport, RefreshError> {
    let known = stored_positions(db, "gitops_commits").await?;
    // What each environment's stored history was before its branch is read (see
    // [`StoredHistory`]): the commits a rewind took off the branch are few, usually none.
    let mut stored: HashMap<String, StoredHistory> = HashMap::new();
    for (env, commits) in &known {
        let entry = stored.entry(env.clone()).or_default();
        entry.top = commits.values().copied().max();
        entry.last_position = entry.top;
    }
    for (env, abandoned) in stored_positions(db, "gitops_abandoned").await? {
        let entry = stored.entry(env).or_default();
        entry.last_position = entry.last_position.max(abandoned.values().copied().max());
        entry.abandoned = abandoned;
    }
    // Each environment's newest stored commit and the control-plane commit it carries (what
    // an OCI environment without a new index runs).
    let mut stored_heads: HashMap<String, (String, Option<String>)> = HashMap::new();
    for row in sqlx::query(
        "SELECT g.environment, g.sha, g.promoted_commit FROM gitops_commits g \
         JOIN (SELECT environment, MAX(position) AS top FROM gitops_commits GROUP BY environment) h \
         ON h.environment = g.environment AND h.top = g.position",
    )
    .fetch_all(db.pool())
    .await
    .map_err(DbError::from)?
    {
        stored_heads.insert(
            row.try_get(0).map_err(DbError::from)?,
            (
                row.try_get(1).map_err(DbError::from)?,
                row.try_get(2).map_err(DbError::from)?,
            ),
        );
    }
    let settings_owned = settings.clone();
    let known_owned = known;
    let observed_owned = observed.clone();
    let envs = tokio::task::spawn_blocking(move || {
        read_all(&settings_owned, &known_owned, &stored_heads, &observed_owned)
    })
    .await
    .map_err(|e| RefreshError::ControlPlane(format!("the git reader stopped: {e}")))??;
    let mut report = RefreshReport {
        environments: envs.len(),
        ..RefreshReport::default()
    };
    for env in envs {
        let base_promoted = match env.history.as_ref().and_then(|h| h.base.as_ref()) {
            Some((sha, _)) => Some(
                sqlx::query("SELECT promoted_commit FROM gitops_commits WHERE environment = $1 AND sha = $2")
                    .bind(&env.name)
                    .bind(sha)
                    .fetch_optional(db.pool())
                    .await
                    .map_err(DbError::from)?
                    .map(|r| r.try_get::<Option<String>, _>(0))
                    .transpose()
                    .map_err(DbError::from)?
                    .flatten(),
            ),
            None => None,
        };
        if let Err(e) = crate::policy::store_policy(db, &env.name, &env.policy, now_ms()).await {
            report.errors.push(format!("{}: {e}", env.name));
        }
        let stored_here = stored.get(&env.name).cloned().unwrap_or_default();
        match store_history(db, &env, &stored_here).await {
            Ok(done) => {
                report.commits += done.commits;
                report.rewound += usize::from(done.rewound);
                let commits: Vec<(String, Option<String>)> = env
                    .history
                    .iter()
                    .flat_map(|h| h.commits.iter().map(|c| (c.sha.clone(), c.promoted.clone())))
                    .collect();
                if let Err(e) =
                    crate::policy::observe_promotions(db, &env.name, base_promoted, &commits, notifier).await
                {
                    report.errors.push(format!("{}: {e}", env.name));
                }
            }
            Err(e) => report.errors.push(format!("{}: {e}", env.name)),
        }
    }
    Ok(report)
}

/// The commits stored in `table` (`gitops_commits` or `gitops_abandoned`) with their
/// positions, by environment.
async fn stored_positions(
    db: &Db,
    table: &'static str,
) -> Result<HashMap<String, HashMap<String, i64>>, RefreshError> {
    let mut out: HashMap<String, HashMap<String, i64>> = HashMap::new();
    for row in sqlx::query(&format!("SELECT environment, sha, position FROM {table}"))
        .fetch_all(db.pool())
        .await
        .map_err(DbError::from)?
    {
        let env: String = row.try_get(0).map_err(DbError::from)?;
        let sha: String = row.try_get(1).map_err(DbError::from)?;
        let position: i64 = row.try_get(2).map_err(DbError::from)?;
        out.entry(env).or_default().insert(sha, position);
    }
    Ok(out)
}

/// What a pass found stored of an environment's history before it read the branch.
#[derive(Clone, Debug, Default)]
struct StoredHistory {
    /// The position of the newest commit stored as on the branch (`None`: none stored).
    top: Option<i64>,
    /// The highest position ever given to a commit of the environment, on the branch or
    /// abandoned: new commits are numbered after it.
    last_position: Option<i64>,
    /// The commits a rewind took off the branch, with their positions (kept if the branch
    /// comes back to them).
    abandoned: HashMap<String, i64>,
}

/// What [`store_history`] did.
#[derive(Clone, Copy, Debug, Default)]
struct StoredPass {
    /// New commits stored.
    commits: usize,
    /// Whether the branch was found rewound.
    rewound: bool,
}

/// The open intervals of `environment`: what its newest stored commit holds.
async fn open_placements<'e, E>(executor: E, environment: &str) -> Result<Open, DbError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let mut open = Open::new();
    for row in sqlx::query(
        "SELECT cluster_type, deployment_target, from_position, workload, source FROM placements \
         WHERE environment = $1 AND to_position IS NULL",
    )
    .bind(environment)
    .fetch_all(executor)
    .await?
    {
        open.insert(
            (row.try_get(0)?, row.try_get(1)?),
            (row.try_get(2)?, row.try_get(3)?, row.try_get(4)?),
        );
    }
    Ok(open)
}

/// Stores an environment's new commits and what changed, after taking the commits a rewind
/// abandoned off the branch.
///
/// The branch was rewound when commits stored as on it lie after the commit where its history
/// now meets the stored one (the walk's base; none: an unrelated history): those commits move
/// to `gitops_abandoned` with their positions, the intervals they opened are removed and the
/// ones they closed are open again (so that the stored intervals describe the branch's history
/// only, and the open ones its fork commit), their clusters' platform states lose their
/// position ([`move_off_branch`]), and the writers forget the positions they looked up. New
/// commits are numbered after every position ever given (the fork's position plus one on a
/// branch that was never rewound, as before), a commit the branch comes back to keeps its
/// position; so no two commits share one, and positions grow along the branch.
async fn store_history(db: &Db, env: &EnvHistory, stored: &StoredHistory) -> Result<StoredPass, DbError> {
    let pool = db.pool();
    // The open placements are what new commits are compared with: with none (the branch
    // did not move), they are not read (93,020 rows at the M fleet, on every refresh).
    let new_commits = env.history.as_ref().is_some_and(|h| !h.commits.is_empty());
    let fork = env
        .history
        .as_ref()
        .map(|h| h.base.as_ref().map_or(-1, |(_, position)| *position));
    let rewind = match (fork, stored.top) {
        (Some(fork), Some(top)) if top > fork => Some((fork, top)),
        _ => None,
    };
    let mut open = if new_commits && rewind.is_none() {
        open_placements(pool, &env.name).await?
    } else {
        Open::new()
    };
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO environments (name, gitops_repo, branch, refreshed_at) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (name) DO UPDATE SET gitops_repo = excluded.gitops_repo, branch = excluded.branch, \
         refreshed_at = excluded.refreshed_at",
    )
    .bind(&env.name)
    .bind(kalypso_git::redact(&env.repo))
    .bind(&env.branch)
    .bind(now_ms())
    .execute(&mut *tx)
    .await?;
    let Some(history) = &env.history else {
        apply_pending_reports(&mut tx, &env.name, None).await?;
        tx.commit().await?;
        return Ok(StoredPass::default());
    };
    let is_oci = crate::oci::is_oci(&env.repo);
    if let Some((fork, top)) = rewind {
        take_off_branch(&mut tx, &env.name, fork, top).await?;
        if new_commits {
            open = open_placements(&mut *tx, &env.name).await?;
        }
    }
    if rewind.is_some() || !stored.abandoned.is_empty() {
        // Also a cluster that a writer of another process (or one with the position in its
        // memory) moved to an abandoned commit after an earlier rewind.
        move_off_branch(&mut tx, &env.name, now_ms()).await?;
    }
    let mut open_artifacts = crate::oci::OpenArtifacts::new();
    if is_oci && new_commits {
        for row in sqlx::query(
            "SELECT cluster_type, digest, from_position FROM oci_artifacts WHERE environment = $1 AND to_position IS NULL",
        )
        .bind(&env.name)
        .fetch_all(&mut *tx)
        .await?
        {
            open_artifacts.insert(row.try_get(0)?, (row.try_get(1)?, row.try_get(2)?));
        }
    }
    if history.base.is_none() {
        // From the root: whatever was open belongs to a history this branch no longer has.
        open.clear();
        open_artifacts.clear();
    }
    let mut next = stored.last_position.map_or(0, |p| p + 1);
    let mut previous = fork.unwrap_or(-1);
    let mut first = None;
    let mut new_shas = Vec::new();
    for commit in &history.commits {
        // A commit the branch comes back to keeps its position, which follows the one before
        // it on the branch (a commit was stored with its first-parent history); should it
        // not, it is numbered anew, and the writers forget the old number.
        let kept = stored.abandoned.get(&commit.sha).copied();
        let position = match kept {
            Some(p) if p > previous => p,
            _ => {
                if kept.is_some() {
                    crate::ingest::forget_positions();
                }
                next += 1;
                next - 1
            }
        };
        if kept.is_some() {
            sqlx::query("DELETE FROM gitops_abandoned WHERE environment = $1 AND sha = $2")
                .bind(&env.name)
                .bind(&commit.sha)
                .execute(&mut *tx)
                .await?;
        }
        previous = position;
        first.get_or_insert(position);
        sqlx::query(
            "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit, rollout_status) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (environment, sha) DO NOTHING",
        )
        .bind(&env.name)
        .bind(&commit.sha)
        .bind(&commit.parent)
        .bind(position)
        .bind(commit.committed_at)
        .bind(&commit.promoted)
        .bind(&commit.rollout_status)
        .execute(&mut *tx)
        .await?;
        for op in diff(&mut open, commit, position) {
            match op {
                Op::Open {
                    cluster_type,
                    target,
                    workload,
                    source,
                    position,
                    sha,
                } => {
                    sqlx::query(
                        "INSERT INTO placements (environment, cluster_type, deployment_target, workload, source, from_position, from_sha) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT (environment, cluster_type, deployment_target, from_position) DO NOTHING",
                    )
                    .bind(&env.name)
                    .bind(cluster_type)
                    .bind(target)
                    .bind(workload)
                    .bind(source)
                    .bind(position)
                    .bind(sha)
                    .execute(&mut *tx)
                    .await?;
                }
                Op::Close {
                    cluster_type,
                    target,
                    from,
                    position,
                    sha,
                } => {
                    sqlx::query(
                        "UPDATE placements SET to_position = $1, to_sha = $2 WHERE environment = $3 \
                         AND cluster_type = $4 AND deployment_target = $5 AND from_position = $6 AND to_position IS NULL",
                    )
                    .bind(position)
                    .bind(sha)
                    .bind(&env.name)
                    .bind(cluster_type)
                    .bind(target)
                    .bind(from)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        if is_oci {
            store_artifacts(
                &mut tx,
                &env.name,
                crate::oci::diff_artifacts(&mut open_artifacts, &commit.artifacts, position),
            )
            .await?;
        }
        new_shas.push(commit.sha.clone());
    }
    // Reports that named these commits before the hub knew them now decide their clusters'
    // platform state.
    apply_pending_reports(&mut tx, &env.name, first).await?;
    if is_oci && (!new_shas.is_empty() || rewind.is_some()) {
        apply_oci_reports(&mut tx, &env.name).await?;
    }
    if rewind.is_some() {
        // Before the commit too (see `take_off_branch`): a batch that looked a position up
        // while this pass ran looks it up again.
        crate::ingest::forget_positions();
    }
    tx.commit().await?;
    Ok(StoredPass {
        commits: history.commits.len(),
        rewound: rewind.is_some(),
    })
}

/// Takes the commits of `environment` after position `fork` (up to `top`, the newest the pass
/// knew of) off the branch: see [`store_history`].
async fn take_off_branch(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    environment: &str,
    fork: i64,
    top: i64,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO gitops_abandoned (environment, sha, position, abandoned_at) \
         SELECT environment, sha, position, $4 FROM gitops_commits \
         WHERE environment = $1 AND position > $2 AND position <= $3 \
         ON CONFLICT (environment, sha) DO UPDATE SET position = excluded.position, abandoned_at = excluded.abandoned_at",
    )
    .bind(environment)
    .bind(fork)
    .bind(top)
    .bind(now_ms())
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE environments SET rewinds = rewinds + 1 WHERE name = $1")
        .bind(environment)
        .execute(&mut **tx)
        .await?;
    for sql in [
        "DELETE FROM gitops_commits WHERE environment = $1 AND position > $2 AND position <= $3",
        // What the abandoned commits opened is forgotten, what they closed is open again.
        "DELETE FROM placements WHERE environment = $1 AND from_position > $2 AND from_position <= $3",
        "UPDATE placements SET to_position = NULL, to_sha = NULL WHERE environment = $1 \
         AND from_position <= $2 AND to_position > $2 AND to_position <= $3",
        "DELETE FROM oci_artifacts WHERE environment = $1 AND from_position > $2 AND from_position <= $3",
        "UPDATE oci_artifacts SET to_position = NULL WHERE environment = $1 \
         AND from_position <= $2 AND to_position > $2 AND to_position <= $3",
    ] {
        sqlx::query(sql)
            .bind(environment)
            .bind(fork)
            .bind(top)
            .execute(&mut **tx)
            .await?;
    }
    // The writers of this process look positions up again, under the lock this transaction
    // holds on SQLite (see `crate::ingest::forget_positions`).
    crate::ingest::forget_positions();
    Ok(())
}

/// The update of [`move_off_branch`] for one group (`$1` now, `$2` environment, `$3` cluster
/// type, `$4` stale flag, `$5` position, `$6` state unless the group has none): a range of the
/// `clusters_group` index.
pub(crate) fn off_branch_sql(without_state: bool) -> String {
    let state_sql = if without_state {
        "state IS NULL"
    } else {
        "state = $6"
    };
    format!(
        "UPDATE clusters SET position = NULL, changed_at = $1 WHERE environment = $2 AND cluster_type = $3 \
         AND stale = $4 AND position = $5 AND {state_sql}"
    )
}

/// Clusters of `environment` whose platform commit is not on the branch (any more) keep their
/// platform state but lose its position: they are behind every commit of the branch until they
/// report one. Found by group in `cluster_counts` (a few rows) and moved group by group
/// through the `clusters_group` index, at `now` for the counts' `left_at`. Returns how many.
async fn move_off_branch(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    environment: &str,
    now: i64,
) -> Result<u64, DbError> {
    let groups = sqlx::query(
        "SELECT cc.cluster_type, cc.stale, cc.state, cc.position FROM cluster_counts cc \
         WHERE cc.environment = $1 AND cc.clusters > 0 AND cc.position >= 0 AND NOT EXISTS \
         (SELECT 1 FROM gitops_commits g WHERE g.environment = cc.environment AND g.position = cc.position)",
    )
    .bind(environment)
    .fetch_all(&mut **tx)
    .await?;
    let mut moved = 0;
    for group in groups {
        let cluster_type: String = group.try_get(0)?;
        let stale: i64 = group.try_get(1)?;
        let state: String = group.try_get(2)?;
        let position: i64 = group.try_get(3)?;
        let sql = off_branch_sql(state.is_empty());
        let mut q = sqlx::query(&sql)
            .bind(now)
            .bind(environment)
            .bind(cluster_type)
            .bind(stale)
            .bind(position);
        if !state.is_empty() {
            q = q.bind(state);
        }
        moved += q.execute(&mut **tx).await?.rows_affected();
    }
    Ok(moved)
}

/// Stores the artifact interval changes of one index (see [`crate::oci`]).
async fn store_artifacts(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    environment: &str,
    ops: Vec<crate::oci::ArtifactOp>,
) -> Result<(), DbError> {
    for op in ops {
        match op {
            crate::oci::ArtifactOp::Open {
                cluster_type,
                digest,
                position,
            } => {
                sqlx::query(
                    "INSERT INTO oci_artifacts (environment, cluster_type, digest, from_position) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (environment, cluster_type, from_position) DO NOTHING",
                )
                .bind(environment)
                .bind(cluster_type)
                .bind(digest)
                .bind(position)
                .execute(&mut **tx)
                .await?;
            }
            crate::oci::ArtifactOp::Close {
                cluster_type,
                from,
                position,
            } => {
                sqlx::query(
                    "UPDATE oci_artifacts SET to_position = $1 WHERE environment = $2 AND cluster_type = $3 \
                     AND from_position = $4 AND to_position IS NULL",
                )
                .bind(position)
                .bind(environment)
                .bind(cluster_type)
                .bind(from)
                .execute(&mut **tx)
                .await?;
            }
        }
    }
    Ok(())
}

/// After new indexes of an OCI environment: every cluster reporting an artifact gets the
/// position that artifact stands at now (an artifact its cluster type still has moves on to
/// the new head; one the refresh just learnt of counts at last), in one update (see
/// [`set_platform_states`]). This reads the environment's artifact reports, once per refresh
/// that found new indexes.
async fn apply_oci_reports(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    environment: &str,
) -> Result<(), DbError> {
    let rows = sqlx::query(
        "SELECT l.cluster_id, l.state, l.revision, l.commit_sha, l.message, l.event_time, c.cluster_type \
         FROM latest l JOIN clusters c ON c.id = l.cluster_id \
         WHERE c.environment = $1 AND l.drives = 1 AND l.commit_sha LIKE 'sha256:%' \
         AND (c.reported_at IS NULL OR c.reported_at <= l.event_time)",
    )
    .bind(environment)
    .fetch_all(&mut **tx)
    .await?;
    let mut artifact_positions: HashMap<(String, String), Option<i64>> = HashMap::new();
    // Per cluster, the newest report decides (as when they arrived one by one).
    let mut newest: BTreeMap<i64, PlatformState> = BTreeMap::new();
    for row in rows {
        let digest: String = row.try_get(3)?;
        let cluster_type: String = row.try_get(6)?;
        let key = (cluster_type, digest);
        let position = match artifact_positions.get(&key) {
            Some(p) => *p,
            None => {
                let p = crate::oci::artifact_position(&mut **tx, environment, &key.0, &key.1).await?;
                artifact_positions.insert(key.clone(), p);
                p
            }
        };
        let Some(position) = position else {
            continue;
        };
        let state: String = row.try_get(1)?;
        let candidate: PlatformState = (
            row.try_get(0)?,
            ClusterState::parse_among(&state, &ClusterState::REPORTED)
                .unwrap_or(ClusterState::Reconciling)
                .as_str()
                .to_owned(),
            row.try_get(2)?,
            key.1,
            row.try_get(4)?,
            row.try_get(5)?,
            position,
        );
        match newest.get(&candidate.0) {
            Some(stored) if stored.5 > candidate.5 => {}
            _ => {
                newest.insert(candidate.0, candidate);
            }
        }
    }
    let states: Vec<PlatformState> = newest.into_values().collect();
    set_platform_states(tx, &states, now_ms()).await
}

/// The driving reports of `$1`'s commits at position `$2` or later.
pub(crate) const PENDING_BY_COMMIT: &str = "SELECT l.cluster_id, l.state, l.revision, l.commit_sha, l.message, l.event_time, g.position \
     FROM gitops_commits g JOIN latest l ON l.commit_sha = g.sha JOIN clusters c ON c.id = l.cluster_id \
     WHERE g.environment = $1 AND g.position >= $2 AND c.environment = $1 AND l.drives = 1";

/// The driving reports of `$1`'s clusters without a platform state, for commits it knows.
/// (`CROSS JOIN`: SQLite reads the clusters first, through `clusters_unapplied`, however many
/// reports the commits have.)
pub(crate) const PENDING_UNAPPLIED: &str = "SELECT l.cluster_id, l.state, l.revision, l.commit_sha, l.message, l.event_time, g.position \
     FROM clusters c CROSS JOIN latest l CROSS JOIN gitops_commits g \
     WHERE c.environment = $1 AND c.reported_at IS NULL AND l.cluster_id = c.id AND l.drives = 1 \
     AND g.environment = c.environment AND g.sha = l.commit_sha";

/// Makes reports their clusters' platform state where they are not yet: the driving reports
/// whose commit is at position `from` or later of `environment`'s branch (just read: found
/// through the commits and `latest_commit`), and those of clusters that have no platform state
/// at all (`clusters_unapplied`, which holds only them). Both reads use indexes; the one update
/// keeps a newer stored state (see [`set_platform_states`]).
///
/// A report stored while this pass stores its commits cannot be missed: ingest takes the write
/// lock (SQLite) or a share lock on `gitops_commits` (PostgreSQL) before it looks a commit up,
/// so it either finds the commit or is committed before this pass reads the reports.
async fn apply_pending_reports(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    environment: &str,
    from: Option<i64>,
) -> Result<(), DbError> {
    let mut rows = Vec::new();
    if let Some(from) = from {
        rows.extend(
            sqlx::query(PENDING_BY_COMMIT)
                .bind(environment)
                .bind(from)
                .fetch_all(&mut **tx)
                .await?,
        );
    }
    rows.extend(
        sqlx::query(PENDING_UNAPPLIED)
            .bind(environment)
            .fetch_all(&mut **tx)
            .await?,
    );
    // Per cluster, the newest report decides (as when they arrived one by one).
    let mut newest: BTreeMap<i64, PlatformState> = BTreeMap::new();
    for row in rows {
        let state: String = row.try_get(1)?;
        let state = ClusterState::parse_among(&state, &ClusterState::REPORTED)
            .unwrap_or(ClusterState::Reconciling)
            .as_str()
            .to_owned();
        let candidate: PlatformState = (
            row.try_get(0)?,
            state,
            row.try_get(2)?,
            row.try_get(3)?,
            row.try_get(4)?,
            row.try_get(5)?,
            row.try_get(6)?,
        );
        match newest.get(&candidate.0) {
            Some(stored) if stored.5 > candidate.5 => {}
            _ => {
                newest.insert(candidate.0, candidate);
            }
        }
    }
    let states: Vec<PlatformState> = newest.into_values().collect();
    set_platform_states(tx, &states, now_ms()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcilers_of_both_kinds() {
        let flux = "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nspec:\n  url: https://g/app\n  ref:\n    branch: dev\n---\nkind: Kustomization\nspec:\n  path: ./functional-test\n";
        assert_eq!(
            parse_reconciler(flux),
            Some(ReconcilerSource {
                kind: "flux".into(),
                url: Some("https://g/app".into()),
                branch: Some("dev".into()),
                revision: None,
                path: Some("./functional-test".into()),
            })
        );
        let argo = "kind: Application\nspec:\n  source:\n    repoURL: https://g/app\n    targetRevision: main\n    path: p\n";
        let s = parse_reconciler(argo).unwrap();
        assert_eq!((s.kind.as_str(), s.revision.as_deref()), ("argocd", Some("main")));
        assert_eq!(parse_reconciler("kind: ConfigMap\n"), None);
        assert_eq!(parse_reconciler(": : not yaml ["), None);
    }

    #[test]
    fn namespaces_give_the_workload() {
        let ns = "kind: Namespace\nmetadata:\n  labels:\n    workload: hello\n---\nkind: RoleBinding\n";
        assert_eq!(parse_namespace(ns).as_deref(), Some("hello"));
        assert_eq!(parse_namespace("kind: Namespace\nmetadata: {}\n"), None);
    }

    fn commit(sha: &str, cts: &[(&str, &[(&str, &str)])]) -> CommitInfo {
        CommitInfo {
            sha: sha.into(),
            cluster_types: cts
                .iter()
                .map(|(ct, dts)| {
                    (
                        ct.to_string(),
                        dts.iter()
                            .map(|(dt, w)| {
                                (
                                    dt.to_string(),
                                    Target {
                                        workload: Some(w.to_string()),
                                        source: None,
                                    },
                                )
                            })
                            .collect(),
                    )
                })
                .collect(),
            ..CommitInfo::default()
        }
    }

    #[test]
    fn intervals_open_and_close() {
        let mut open = Open::new();
        let ops = diff(&mut open, &commit("a", &[("drone", &[("app-dev", "app")])]), 0);
        assert_eq!(ops.len(), 2);
        let ops = diff(&mut open, &commit("b", &[("drone", &[("app-dev", "app")])]), 1);
        assert!(ops.is_empty());
        let ops = diff(
            &mut open,
            &commit("c", &[("drone", &[("app-dev", "app2")]), ("large", &[])]),
            2,
        );
        assert_eq!(
            ops,
            vec![
                Op::Close {
                    cluster_type: "drone".into(),
                    target: "app-dev".into(),
                    from: 0,
                    position: 2,
                    sha: "c".into()
                },
                Op::Open {
                    cluster_type: "drone".into(),
                    target: "app-dev".into(),
                    workload: Some("app2".into()),
                    source: None,
                    position: 2,
                    sha: "c".into()
                },
                Op::Open {
                    cluster_type: "large".into(),
                    target: String::new(),
                    workload: None,
                    source: None,
                    position: 2,
                    sha: "c".into()
                },
            ]
        );
        let ops = diff(&mut open, &commit("d", &[]), 3);
        assert_eq!(ops.len(), 3);
        assert!(open.is_empty());
    }
}
