//! A control plane read from git: a `main` branch and one branch per environment, plus the
//! workload repositories its registrations point at.
//!
//! Environments are the `Environment` objects of the main branch's tip (typically in
//! `.environments/`, which `.sourceignore` hides from Flux but which kalypso reads for
//! discovery); each names its branch and folder. An environment is read in three steps, as
//! Flux would deliver it into the environment's namespace:
//! 1. its branch (cluster types, configs, policies, `gitops-repo.yaml`, `base-repo.yaml`);
//! 2. every BaseRepo's branch and path at the commit it pins, or at the branch's tip when it
//!    pins none, as the original's Flux GitRepository + Kustomization `<env>-<name>` per
//!    BaseRepo deliver them (`controllers/baserepo_controller.go`); the one named `main` is
//!    the promoted one (and `kalypso plan --promote-from` replaces its commit). With no
//!    BaseRepo at all kalypso reads the main branch's tip and warns (`no-base-repo`): the
//!    original would bring no Templates or WorkloadRegistrations into the environment; with
//!    BaseRepos but none named `main`, the main branch is not read, as in the original;
//! 3. for every WorkloadRegistration, the folder `spec.workload.path` of branch
//!    `spec.workload.branch` of `spec.workload.repo`, fetched into the cache.
//!
//! The `repo` fields of Environment and BaseRepo objects name the control plane as the
//! clusters see it (usually a GitHub URL); kalypso reads both branches from the control
//! plane it was given, so that a local clone or a mirror can be used as is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, PoisonError};

use git2::Oid;
use kalypso_core::model::AnyObject;
use kalypso_core::run::{Loaded, Request};
use kalypso_core::source::{SOURCEIGNORE, SourceTree};
use kalypso_core::{Code, Diagnostic, Diagnostics, Inputs};

use crate::repo::{self, Cache, Repo, Transport};
use crate::url::{self as repo_url, RepoUrl};

/// The branch environments are discovered on when no other is configured.
pub const DEFAULT_MAIN_BRANCH: &str = "main";
/// The BaseRepo that pins the promoted main commit.
pub const PROMOTED_BASE: &str = "main";

/// Why a control plane or an environment cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A git operation failed.
    #[error(transparent)]
    Repo(#[from] repo::Error),
    /// A workload repository could not be fetched or read.
    #[error("{what}: {error}")]
    Workload {
        /// Which WorkloadRegistration of which environment pointed at it.
        what: String,
        /// Why (its message is part of this error's).
        error: repo::Error,
    },
    /// A repository location is invalid.
    #[error("{what}: {error}")]
    Url {
        /// Whose location.
        what: String,
        /// Why (its message is part of this error's).
        error: repo_url::Error,
    },
    /// A branch is missing.
    #[error("branch {branch:?} ({what}) does not exist in {repo}")]
    NoBranch {
        /// The repository, redacted.
        repo: String,
        /// The branch.
        branch: String,
        /// What it was needed for.
        what: String,
    },
    /// An environment was asked for that the control plane does not define.
    #[error("environment {name:?} is not defined on branch {main:?} of {repo}{}", known_list(.known))]
    UnknownEnvironment {
        /// The name asked for.
        name: String,
        /// The main branch.
        main: String,
        /// The repository, redacted.
        repo: String,
        /// The environments that exist.
        known: Vec<String>,
    },
    /// Every environment was asked for and none is defined.
    #[error(
        "no Environment objects on branch {main:?} of {repo}: name the environments to sync with --env (each is then read from the branch of the same name)"
    )]
    NoEnvironments {
        /// The main branch.
        main: String,
        /// The repository, redacted.
        repo: String,
    },
}

crate::repo::operation_errors_into!(Error);

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!(" (defined: {})", known.join(", "))
    }
}

/// An environment and where its configuration lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvironmentRef {
    /// The environment (namespace) name.
    pub name: String,
    /// The control-plane branch holding its configuration.
    pub branch: String,
    /// The folder on that branch.
    pub path: String,
    /// The control plane's URL as the Environment object gives it (informational).
    pub repo: String,
}

/// The commits an environment was built from: what decides whether it must be rendered
/// again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Revisions {
    /// The main-branch commit used.
    pub main: String,
    /// The environment branch's commit.
    pub environment: String,
    /// Each registration's workload commit.
    pub workloads: BTreeMap<String, String>,
    /// The commit of each BaseRepo other than `main`.
    pub bases: BTreeMap<String, String>,
}

impl std::fmt::Display for Revisions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "main {} env {}", short(&self.main), short(&self.environment))?;
        for (name, commit) in &self.bases {
            write!(f, " base {name} {}", short(commit))?;
        }
        for (name, commit) in &self.workloads {
            write!(f, " {name} {}", short(commit))?;
        }
        Ok(())
    }
}

/// The first 12 characters of a commit id.
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// A GitOpsRepo of an environment: where its tree is delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitOpsTarget {
    /// The GitOpsRepo object's name.
    pub name: String,
    /// Repository.
    pub repo: String,
    /// Branch.
    pub branch: String,
    /// The forge it is on (`spec.provider`), when the GitOpsRepo names it.
    pub provider: Option<String>,
    /// The forge's API (`spec.providerApiUrl`), when the GitOpsRepo names it.
    pub provider_api_url: Option<String>,
}

/// Everything one environment is built from.
#[derive(Debug)]
pub struct Resolved {
    /// The environment.
    pub environment: EnvironmentRef,
    /// The source trees.
    pub inputs: Inputs,
    /// Their commits.
    pub revisions: Revisions,
    /// Where the environment is delivered, by GitOpsRepo name.
    pub gitops: Vec<GitOpsTarget>,
    /// The control-plane branches read (the main branch environments are listed from,
    /// the environment's, every BaseRepo's): where the inputs moves show.
    pub branches: BTreeSet<String>,
    /// The workload branches read, each once, with the commit read.
    pub sources: Vec<SourceRef>,
    /// The environment's namespace, when it was loaded before the run (to read its
    /// RolloutPolicy); the run takes it instead of loading the trees again.
    read_ahead: std::sync::Mutex<Option<Loaded>>,
}

impl Resolved {
    /// `f` of the environment's namespace, loaded from the inputs once: a later run of this
    /// environment starts from it ([`Resolved::request`]).
    pub fn with_namespace<T>(&self, f: impl FnOnce(&kalypso_core::model::Namespace) -> T) -> T {
        let mut slot = self.read_ahead.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = slot.get_or_insert_with(|| Loaded::from_trees(&self.environment.name, &self.inputs));
        f(&loaded.namespace)
    }

    /// The core's request for a run of this environment, starting from the namespace
    /// [`Resolved::with_namespace`] loaded if there is one (taken: a second run loads the
    /// trees again).
    pub fn request(&self) -> Request<'_> {
        let loaded = self
            .read_ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match loaded {
            Some(loaded) => Request::preloaded(&self.environment.name, &self.inputs, loaded),
            None => Request::new(&self.environment.name, &self.inputs),
        }
    }
}

/// A branch of a workload repository, at the commit an environment was built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRef {
    /// The repository, as the WorkloadRegistration names it.
    pub url: RepoUrl,
    /// The branch.
    pub branch: String,
    /// Its head.
    pub commit: Oid,
}

impl Error {
    /// Whether the failure may go away by itself (network trouble).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Repo(e) | Error::Workload { error: e, .. } => e.is_transient(),
            _ => false,
        }
    }

    /// Whether a repository looks damaged on disk (see [`repo::Error::is_damage`]).
    pub fn is_damage(&self) -> bool {
        match self {
            Error::Repo(e) | Error::Workload { error: e, .. } => e.is_damage(),
            _ => false,
        }
    }

    /// A repository failure put in the words of `what` needed the repository.
    fn about(self, what: &str) -> Error {
        match self {
            Error::Repo(error) => Error::Workload {
                what: what.to_owned(),
                error,
            },
            other => other,
        }
    }
}

/// Workload repositories opened during one pass, each fetched at most once per branch.
#[derive(Debug)]
pub struct WorkloadRepos {
    cache: Cache,
    repos: HashMap<String, Repo>,
    fetched: HashMap<String, Vec<String>>,
    /// Branch heads the remotes were just seen at (by cache name): a mirror already at
    /// them is not fetched.
    listed: Arc<HashMap<String, BTreeMap<String, Oid>>>,
}

impl WorkloadRepos {
    /// No repository opened yet.
    pub fn new(cache: Cache) -> WorkloadRepos {
        WorkloadRepos {
            cache,
            repos: HashMap::new(),
            fetched: HashMap::new(),
            listed: Arc::default(),
        }
    }

    /// No repository opened yet; the branches `listed` (by cache name) were just seen at
    /// these heads, so mirrors already at them are not fetched again.
    pub fn with_listing(cache: Cache, listed: Arc<HashMap<String, BTreeMap<String, Oid>>>) -> WorkloadRepos {
        WorkloadRepos {
            listed,
            ..WorkloadRepos::new(cache)
        }
    }

    /// The repository at `url` with `branch` fetched.
    fn branch(
        &mut self,
        url: &RepoUrl,
        branch: &str,
        transport: &Transport<'_>,
    ) -> Result<(&Repo, Option<Oid>), Error> {
        let key = url.cache_name();
        if !self.repos.contains_key(&key) {
            let repo = Repo::open_source(url, &self.cache)?;
            self.repos.insert(key.clone(), repo);
        }
        let fetched = self.fetched.entry(key.clone()).or_default();
        let repo = &self.repos[&key];
        let current = self
            .listed
            .get(&key)
            .is_some_and(|heads| repo.is_at(heads, &[branch]));
        if !fetched.iter().any(|b| b == branch) {
            if !current {
                repo.fetch_branches(transport, &[branch], &[])?;
            }
            fetched.push(branch.to_owned());
        }
        let head = repo.branch(branch)?;
        Ok((repo, head))
    }
}

/// A control-plane repository, fetched.
#[derive(Debug)]
pub struct ControlPlane {
    repo: Repo,
    main_branch: String,
}

impl ControlPlane {
    /// Opens the control plane at `url` and fetches all its branches.
    pub fn open(
        url: &RepoUrl,
        cache: &Cache,
        transport: &Transport<'_>,
        main_branch: &str,
    ) -> Result<ControlPlane, Error> {
        ControlPlane::open_listed(url, cache, transport, main_branch, None)
    }

    /// As [`ControlPlane::open`]; when `listed` (the remote's branches, just listed) is
    /// what the mirror already holds, nothing is fetched.
    pub fn open_listed(
        url: &RepoUrl,
        cache: &Cache,
        transport: &Transport<'_>,
        main_branch: &str,
        listed: Option<&BTreeMap<String, Oid>>,
    ) -> Result<ControlPlane, Error> {
        let repo = Repo::open_source(url, cache)?;
        if !listed.is_some_and(|heads| repo.mirrors(heads)) {
            repo.fetch_all(transport)?;
        }
        Ok(ControlPlane {
            repo,
            main_branch: main_branch.to_owned(),
        })
    }

    /// The repository.
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// The main branch's name.
    pub fn main_branch(&self) -> &str {
        &self.main_branch
    }

    fn require_branch(&self, branch: &str, what: &str) -> Result<Oid, Error> {
        self.repo.branch(branch)?.ok_or_else(|| Error::NoBranch {
            repo: self.repo.url().redacted(),
            branch: branch.to_owned(),
            what: what.to_owned(),
        })
    }

    /// The environments defined by `Environment` objects at the main branch's tip, sorted by
    /// name. `.sourceignore` files are not applied: they hide these objects from Flux only.
    pub fn environments(&self) -> Result<Vec<EnvironmentRef>, Error> {
        let tip = self.require_branch(&self.main_branch, "the main branch")?;
        let tree = self.repo.source_tree(tip, "", &self.main_branch)?;
        let visible = SourceTree::new(
            tree.label(),
            tree.files()
                .iter()
                .filter(|f| f.path.rsplit('/').next() != Some(SOURCEIGNORE))
                .cloned()
                .collect(),
        );
        let mut scratch = Diagnostics::new();
        let mut envs: Vec<EnvironmentRef> = kalypso_core::load::load_tree(&visible, &mut scratch)
            .into_iter()
            .filter_map(|o| match o {
                AnyObject::Environment(e) => {
                    let cp = &e.spec.control_plane;
                    Some(EnvironmentRef {
                        branch: if cp.branch.is_empty() {
                            e.meta.name.clone()
                        } else {
                            cp.branch.clone()
                        },
                        path: cp.path.clone(),
                        repo: cp.repo.clone(),
                        name: e.meta.name,
                    })
                }
                _ => None,
            })
            .collect();
        envs.sort();
        envs.dedup_by(|a, b| a.name == b.name);
        Ok(envs)
    }

    /// The environments named in `names` (all of them when empty). When the main branch
    /// defines no Environment at all, each name is taken as a branch of the same name.
    pub fn select(&self, names: &[String]) -> Result<Vec<EnvironmentRef>, Error> {
        let defined = self.environments()?;
        if defined.is_empty() {
            if names.is_empty() {
                return Err(Error::NoEnvironments {
                    main: self.main_branch.clone(),
                    repo: self.repo.url().redacted(),
                });
            }
            return Ok(names
                .iter()
                .map(|n| EnvironmentRef {
                    name: n.clone(),
                    branch: n.clone(),
                    path: String::new(),
                    repo: self.repo.url().redacted(),
                })
                .collect());
        }
        if names.is_empty() {
            return Ok(defined);
        }
        names
            .iter()
            .map(|n| {
                defined
                    .iter()
                    .find(|e| &e.name == n)
                    .cloned()
                    .ok_or_else(|| Error::UnknownEnvironment {
                        name: n.clone(),
                        main: self.main_branch.clone(),
                        repo: self.repo.url().redacted(),
                        known: defined.iter().map(|e| e.name.clone()).collect(),
                    })
            })
            .collect()
    }

    /// The GitOpsRepos of `env` (where its tree is delivered), read from its branch alone:
    /// no main commit and no workload repository is needed, as an observer of the GitOps
    /// repositories (the observability hub) only wants to know where they are. Sorted by name.
    pub fn gitops_targets(&self, env: &EnvironmentRef) -> Result<Vec<GitOpsTarget>, Error> {
        let env_commit = self.require_branch(&env.branch, &format!("environment {}", env.name))?;
        let environment =
            self.repo
                .source_tree(env_commit, &env.path, &branch_label(&env.branch, &env.path))?;
        let mut scratch = Diagnostics::new();
        let mut targets: Vec<GitOpsTarget> = kalypso_core::load::load_tree(&environment, &mut scratch)
            .into_iter()
            .filter_map(|o| match o {
                AnyObject::GitOpsRepo(g) => Some(GitOpsTarget {
                    name: g.meta.name,
                    repo: g.spec.repo,
                    branch: g.spec.branch,
                    provider: g.spec.provider,
                    provider_api_url: g.spec.provider_api_url,
                }),
                _ => None,
            })
            .collect();
        targets.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(targets)
    }

    /// Reads everything `env` is built from.
    pub fn resolve(
        &self,
        env: &EnvironmentRef,
        sources: &mut WorkloadRepos,
        transport: &Transport<'_>,
    ) -> Result<Resolved, Error> {
        self.resolve_at(env, None, sources, transport)
    }

    /// Reads everything `env` would be built from with main at `main_commit` (a full or
    /// abbreviated id) instead of the commit its BaseRepo pins: what promoting that commit
    /// to `env` would render (`kalypso plan --promote-from`). The BaseRepo's path is kept;
    /// workloads are those the registrations at `main_commit` name. `None`: as [`Self::resolve`].
    pub fn resolve_at(
        &self,
        env: &EnvironmentRef,
        main_commit: Option<&str>,
        sources: &mut WorkloadRepos,
        transport: &Transport<'_>,
    ) -> Result<Resolved, Error> {
        let pins = Revisions {
            main: main_commit.unwrap_or_default().to_owned(),
            ..Revisions::default()
        };
        self.resolve_pinned(env, &pins, sources, transport)
    }

    /// Reads everything `env` was built from at `revisions`: the environment branch, main,
    /// the other BaseRepos and each registration's workloads at the commits given (an empty
    /// commit, or a name not given: as [`Self::resolve`] reads it). What a progressive rollout
    /// renders to give cluster types back the content they ran before.
    pub fn resolve_pinned(
        &self,
        env: &EnvironmentRef,
        pins: &Revisions,
        sources: &mut WorkloadRepos,
        transport: &Transport<'_>,
    ) -> Result<Resolved, Error> {
        let main_commit = Some(pins.main.as_str()).filter(|c| !c.is_empty());
        let env_commit = match Some(pins.environment.as_str()).filter(|c| !c.is_empty()) {
            Some(commit) => self.repo.find_commit(commit)?,
            None => self.require_branch(&env.branch, &format!("environment {}", env.name))?,
        };
        let environment =
            self.repo
                .source_tree(env_commit, &env.path, &branch_label(&env.branch, &env.path))?;

        // Every BaseRepo brings its repo/branch/path at its pinned commit (or its branch's
        // tip) into the environment, as its Flux GitRepository + Kustomization do in the
        // original; the one named `main` is the promoted one.
        let mut scratch = Diagnostics::new();
        let mut bases: Vec<(String, kalypso_api::BaseRepoSpec)> =
            kalypso_core::load::load_tree(&environment, &mut scratch)
                .into_iter()
                .filter_map(|o| match o {
                    AnyObject::BaseRepo(b) => Some((b.meta.name, b.spec)),
                    _ => None,
                })
                .collect();
        bases.sort_by(|a, b| a.0.cmp(&b.0));
        bases.dedup_by(|a, b| a.0 == b.0); // a duplicate is reported when the namespace loads
        let mut notes = Vec::new();
        let base = bases
            .iter()
            .find(|(name, _)| name == PROMOTED_BASE)
            .map(|(_, spec)| spec);
        let branch_of = |b: &kalypso_api::BaseRepoSpec| -> String {
            if b.branch.is_empty() {
                self.main_branch.clone()
            } else {
                b.branch.clone()
            }
        };
        let (main_branch, main_path, pinned) = match base {
            Some(b) => (
                branch_of(b),
                b.path.as_str(),
                Some(b.commit.as_str()).filter(|c| !c.is_empty()),
            ),
            None => (self.main_branch.clone(), "", None),
        };
        let mut branches =
            BTreeSet::from([self.main_branch.clone(), env.branch.clone(), main_branch.clone()]);
        let main_commit = match main_commit.or(pinned) {
            Some(commit) => self.repo.find_commit(commit)?,
            None => self.require_branch(
                &main_branch,
                &format!("the main branch of environment {}", env.name),
            )?,
        };
        let main = if base.is_none() && !bases.is_empty() {
            // Only other BaseRepos: nothing brings the main branch in, as in the original.
            SourceTree::new(main_branch.as_str(), Vec::new())
        } else {
            if base.is_none() {
                notes.push(Diagnostic::warning(
                    Code::NoBaseRepo,
                    format!(
                        "environment {} has no BaseRepo; kalypso reads Templates and WorkloadRegistrations from the \
                         tip of branch {main_branch:?}, but the original scheduler would bring none into the environment \
                         (each BaseRepo is what delivers them); add a BaseRepo named main",
                        env.name
                    ),
                ));
            }
            self.repo.source_tree(main_commit, main_path, &main_branch)?
        };
        let mut base_trees = BTreeMap::new();
        let mut base_commits = BTreeMap::new();
        for (name, spec) in bases.iter().filter(|(name, _)| name != PROMOTED_BASE) {
            let branch = branch_of(spec);
            branches.insert(branch.clone());
            let what = format!("BaseRepo {name:?} of environment {}", env.name);
            let pinned = pins.bases.get(name).map(String::as_str);
            let commit = match pinned.or(Some(spec.commit.as_str())).filter(|c| !c.is_empty()) {
                Some(commit) => self.repo.find_commit(commit)?,
                None => self.require_branch(&branch, &what)?,
            };
            let tree = self
                .repo
                .source_tree(commit, &spec.path, &format!("{branch}[{name}]"))?;
            base_trees.insert(name.clone(), tree);
            base_commits.insert(name.clone(), commit.to_string());
        }

        let mut inputs = Inputs {
            main,
            environment,
            workloads: BTreeMap::new(),
            bases: base_trees,
            notes,
        };
        let namespace = kalypso_core::load_namespace(&env.name, &inputs, &mut scratch);
        let mut revisions = Revisions {
            main: main_commit.to_string(),
            environment: env_commit.to_string(),
            workloads: BTreeMap::new(),
            bases: base_commits,
        };
        let mut read = Vec::<SourceRef>::new();
        // (cache name, branch) of each source in `read`, to list each once.
        let mut listed = std::collections::HashSet::<(String, String)>::new();
        for (name, registration) in &namespace.registrations {
            let w = &registration.spec.workload;
            let what = format!("WorkloadRegistration {name:?} in environment {}", env.name);
            let url = RepoUrl::parse(&w.repo).map_err(|error| Error::Url {
                what: what.clone(),
                error,
            })?;
            let (repo, head) = sources
                .branch(&url, &w.branch, transport)
                .map_err(|e| e.about(&what))?;
            let head = head.ok_or_else(|| Error::NoBranch {
                repo: url.redacted(),
                branch: w.branch.clone(),
                what: what.clone(),
            })?;
            let head = match pins.workloads.get(name) {
                Some(commit) => repo.find_commit(commit).map_err(|error| Error::Workload {
                    what: what.clone(),
                    error: error.into(),
                })?,
                None => head,
            };
            let tree = repo
                .source_tree(head, &w.path, &format!("workloads/{name}"))
                .map_err(|error| Error::Workload {
                    what: what.clone(),
                    error: error.into(),
                })?;
            inputs.workloads.insert(name.clone(), tree);
            revisions.workloads.insert(name.clone(), head.to_string());
            if listed.insert((url.cache_name(), w.branch.clone())) {
                read.push(SourceRef {
                    url,
                    branch: w.branch.clone(),
                    commit: head,
                });
            }
        }
        let gitops = namespace
            .gitops_repos
            .values()
            .map(|g| GitOpsTarget {
                name: g.meta.name.clone(),
                repo: g.spec.repo.clone(),
                branch: g.spec.branch.clone(),
                provider: g.spec.provider.clone(),
                provider_api_url: g.spec.provider_api_url.clone(),
            })
            .collect();
        Ok(Resolved {
            environment: env.clone(),
            inputs,
            revisions,
            gitops,
            branches,
            sources: read,
            read_ahead: std::sync::Mutex::new(None),
        })
    }
}

/// How files of `path` on `branch` are shown in diagnostics: `dev/x.yaml` when the
/// environment's folder is the branch's root, `dev:envs/dev/x.yaml` (git's `<rev>:<path>`)
/// otherwise, so the file can be found.
fn branch_label(branch: &str, path: &str) -> String {
    match repo::normalize_path(path) {
        Ok(p) if !p.is_empty() => format!("{branch}:{p}"),
        _ => branch.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::branch_label;

    #[test]
    fn files_below_the_branch_root_are_shown_with_their_path() {
        assert_eq!(branch_label("dev", "."), "dev");
        assert_eq!(branch_label("dev", ""), "dev");
        assert_eq!(branch_label("dev", "./envs/dev/"), "dev:envs/dev");
    }
}
