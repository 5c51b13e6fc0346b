//! Where the commands that read a control plane get it from: a folder, or a git repository
//! (a local clone or a URL) read as `sync` reads it, with a local clone's uncommitted changes
//! used and said; and the current GitOps tree `--against` names (a folder, or a branch of a
//! repository). Shared by `render`, `validate`, `plan`, `diff` and `explain`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use kalypso_core::tree::Tree;
use kalypso_core::{Diagnostics, Inputs};
use kalypso_git::auth::Credentials;
use kalypso_git::control_plane::{ControlPlane, EnvironmentRef, WorkloadRepos, short};
use kalypso_git::repo::{Repo, Transport};
use kalypso_git::{Cache, RepoUrl, RetryPolicy};

use crate::control_plane::{MAIN, discover_environments, read_inputs};
use crate::fsio::read_tree;
use crate::local_clone::LocalClone;
use crate::settings;

/// Git access shared by every repository one command reads (and registry access, for an
/// `oci://` tree named by `--against`).
#[derive(Debug)]
pub(crate) struct GitAccess {
    credentials: Credentials,
    cache: Cache,
    retry: RetryPolicy,
    main_branch: String,
    registry: kalypso_git::oci::AuthSettings,
}

impl GitAccess {
    /// Credentials (read now), cache and retries as the settings say.
    pub(crate) fn new(settings: &settings::Git) -> Result<GitAccess> {
        let credentials = Credentials::load(&settings.auth).map_err(|e| anyhow!("{e}"))?;
        Ok(GitAccess {
            credentials,
            cache: Cache::new(settings.cache_dir()),
            retry: settings.retry,
            main_branch: settings.main_branch.clone(),
            registry: kalypso_git::oci::AuthSettings::default(),
        })
    }

    /// The same, reaching registries as `registry` says.
    pub(crate) fn with_registry(mut self, registry: &kalypso_git::oci::AuthSettings) -> GitAccess {
        self.registry = registry.clone();
        self
    }

    fn transport(&self) -> Transport<'_> {
        Transport::new(&self.credentials, self.retry)
    }
}

/// Whether `path` is a git repository (a working copy or a bare repository).
fn is_git_repository(path: &Path) -> bool {
    path.join(".git").exists() || is_bare_repository(path)
}

fn is_bare_repository(path: &Path) -> bool {
    path.join("HEAD").is_file() && path.join("objects").is_dir() && path.join("refs").is_dir()
}

/// A control plane, opened: a folder, or a git repository with its branches fetched.
#[derive(Debug)]
pub(crate) enum ControlPlaneSource<'g> {
    /// The folder form (`main/`, `<env>/`, `workloads/`).
    Folder(PathBuf),
    /// A git repository.
    Git {
        /// The repository.
        control_plane: Box<ControlPlane>,
        /// Workload repositories opened so far.
        sources: WorkloadRepos,
        /// How they are reached.
        transport: Transport<'g>,
        /// The working copy, when the repository is a local clone.
        clone: Option<Box<LocalClone>>,
        /// Print nothing but errors.
        quiet: bool,
        /// The cache, held while the control plane is read (as `sync` holds it).
        _hold: kalypso_git::repo::CacheHold,
    },
}

impl<'g> ControlPlaneSource<'g> {
    /// Opens `control_plane`: a folder holding `main/` (or anything that is not a git
    /// repository) is the folder form; a git repository or URL is read as `sync` reads it.
    pub(crate) fn open(
        control_plane: &settings::ControlPlane,
        git: &'g GitAccess,
        quiet: bool,
    ) -> Result<ControlPlaneSource<'g>> {
        let url = &control_plane.url;
        if let Some(path) = url.plain_path()
            && (path.join(MAIN).is_dir() || !is_git_repository(path))
        {
            return Ok(ControlPlaneSource::Folder(path.to_owned()));
        }
        // One writer of the cache's mirrors at a time: a `sync` (or another command) that
        // holds it is waited for, and reference locks a killed one left are removed.
        let hold = git.cache.hold().map_err(|e| anyhow!("{e}"))?;
        let transport = git.transport();
        let control_plane = ControlPlane::open(url, &git.cache, &transport, &git.main_branch)?;
        Ok(ControlPlaneSource::Git {
            control_plane: Box::new(control_plane),
            sources: WorkloadRepos::new(git.cache.clone()),
            transport,
            clone: url.plain_path().and_then(LocalClone::open).map(Box::new),
            quiet,
            _hold: hold,
        })
    }

    /// The environments to check when none is named: the folders of a control-plane folder
    /// (see [`discover_environments`]), or the `Environment` objects of a repository's main
    /// branch.
    pub(crate) fn environments(&self) -> Result<Vec<String>> {
        match self {
            ControlPlaneSource::Folder(dir) => discover_environments(dir),
            ControlPlaneSource::Git { control_plane, .. } => {
                Ok(control_plane.select(&[])?.into_iter().map(|e| e.name).collect())
            }
        }
    }

    /// The local folder the control plane is read from, if any: a control-plane folder or a
    /// local clone's working copy.
    pub(crate) fn local_dir(&self) -> Option<&Path> {
        match self {
            ControlPlaneSource::Folder(dir) => Some(dir),
            ControlPlaneSource::Git { clone, .. } => clone.as_deref().map(LocalClone::workdir),
        }
    }

    /// Everything environment `env` is built from.
    pub(crate) fn inputs(&mut self, env: &str) -> Result<Inputs> {
        match self {
            ControlPlaneSource::Folder(dir) => read_inputs(dir, env),
            ControlPlaneSource::Git {
                control_plane,
                sources,
                transport,
                clone,
                quiet,
                ..
            } => {
                let env_ref = select(control_plane, env)?;
                let mut inputs = control_plane.resolve(&env_ref, sources, transport)?.inputs;
                if let Some(clone) = clone {
                    working_copy(clone, &env_ref, &mut inputs, true, *quiet)?;
                }
                Ok(inputs)
            }
        }
    }

    /// Everything `env` would be built from once the main commit `from` has promoted is
    /// promoted to it, and that commit (`None`: a folder whose `from` pins nothing).
    ///
    /// In git, main is read at `from`'s BaseRepo `main` pin (else main's tip). A folder has
    /// no history: its `main/` folder is the candidate, and the commit is `from`'s pin.
    ///
    /// `from` may also be the main branch itself (`main`, unless an environment has that
    /// name): the first step of the flow, pinning main's tip into the first environment.
    pub(crate) fn promoted_inputs(&mut self, env: &str, from: &str) -> Result<(Inputs, Option<String>)> {
        match self {
            ControlPlaneSource::Folder(dir) => {
                if from == kalypso_git::control_plane::DEFAULT_MAIN_BRANCH
                    && !discover_environments(dir)?.iter().any(|e| e == from)
                {
                    // The `main/` folder is what every environment reads: nothing is pinned.
                    return Ok((read_inputs(dir, env)?, None));
                }
                let commit = pinned_commit(from, &read_inputs(dir, from)?);
                Ok((read_inputs(dir, env)?, commit))
            }
            ControlPlaneSource::Git {
                control_plane,
                sources,
                transport,
                clone,
                quiet,
                ..
            } if from == control_plane.main_branch()
                && !control_plane.environments()?.iter().any(|e| e.name == from) =>
            {
                let env_ref = select(control_plane, env)?;
                let tip = control_plane.repo().branch(from)?.ok_or_else(|| {
                    anyhow!(
                        "branch {from:?} (the main branch) does not exist in {}",
                        control_plane.repo().url().redacted()
                    )
                })?;
                let commit = tip.to_string();
                let mut inputs = control_plane
                    .resolve_at(&env_ref, Some(&commit), sources, transport)?
                    .inputs;
                if let Some(clone) = clone {
                    working_copy(clone, &env_ref, &mut inputs, false, *quiet)?;
                }
                Ok((inputs, Some(commit)))
            }
            ControlPlaneSource::Git {
                control_plane,
                sources,
                transport,
                clone,
                quiet,
                ..
            } => {
                let from_ref = select(control_plane, from)?;
                let env_ref = select(control_plane, env)?;
                let commit = control_plane
                    .resolve(&from_ref, sources, transport)?
                    .revisions
                    .main;
                let mut inputs = control_plane
                    .resolve_at(&env_ref, Some(&commit), sources, transport)?
                    .inputs;
                if let Some(clone) = clone {
                    // Main is the promoted commit, not the working copy.
                    working_copy(clone, &env_ref, &mut inputs, false, *quiet)?;
                }
                Ok((inputs, Some(commit)))
            }
        }
    }
}

/// Puts the local clone's working copy into `inputs` where the branch it holds is read: the
/// environment's branch always, main's (`with_main`) when the environment reads its tip; and
/// says how each branch read differs from what was pushed.
fn working_copy(
    clone: &mut LocalClone,
    env: &EnvironmentRef,
    inputs: &mut Inputs,
    with_main: bool,
    quiet: bool,
) -> Result<()> {
    let mut lines = clone.describe(&env.branch)?;
    if clone.is_checked_out(&env.branch) && clone.state(&env.branch)?.uncommitted > 0 {
        inputs.environment = clone.read(&env.path, &env.branch)?;
    }
    let main_branch = inputs.main.label().to_owned();
    if with_main && main_branch != env.branch {
        let mut scratch = Diagnostics::new();
        let namespace = kalypso_core::load_namespace(&env.name, inputs, &mut scratch);
        let base = namespace.promoted_base().map(|b| b.spec.clone());
        let pin = base
            .as_ref()
            .map(|b| b.commit.trim().to_owned())
            .unwrap_or_default();
        let dirty = clone.is_checked_out(&main_branch) && clone.state(&main_branch)?.uncommitted > 0;
        if pin.is_empty() {
            lines.extend(clone.describe(&main_branch)?);
            if dirty {
                let path = base.as_ref().map(|b| b.path.as_str()).unwrap_or_default();
                inputs.main = clone.read(path, &main_branch)?;
            }
        } else if dirty && !quiet {
            lines.push(format!(
                "note: uncommitted changes in {main_branch} are not used: environment {} reads {main_branch} at \
                 the commit its BaseRepo pins ({})",
                env.name,
                short(&pin)
            ));
        }
    }
    for line in lines {
        if !quiet || line.starts_with("warning") {
            eprintln!("{line}");
        }
    }
    Ok(())
}

fn select(control_plane: &ControlPlane, env: &str) -> Result<EnvironmentRef> {
    let mut found = control_plane.select(&[env.to_owned()])?;
    found
        .pop()
        .ok_or_else(|| anyhow!("environment {env:?} not found"))
}

/// Reads the current GitOps tree `spec` names: a folder (a working copy's `.git` is
/// skipped), `<REPO>#<BRANCH>`, or `oci://HOST/PATH#TAG` (the artifacts of an environment
/// delivered to a registry, laid out as its git form: a folder per cluster type).
pub(crate) fn read_against(spec: &str, git: &GitAccess, quiet: bool) -> Result<Tree> {
    if kalypso_git::oci::is_oci(spec) {
        return read_artifacts(spec, git, quiet);
    }
    let path = Path::new(spec);
    if path.is_dir() && !is_bare_repository(path) {
        // Locked and settled first: no render changes it while it is read, and an update a
        // killed render began is finished (or, where it cannot be, refused).
        let _lock = crate::output::settle_for_reading(path, spec, quiet)?;
        return read_tree(path).with_context(|| format!("reading {spec}"));
    }
    if let Some((repo, branch)) = spec.rsplit_once('#')
        && !repo.is_empty()
        && !branch.is_empty()
    {
        return read_branch(repo, branch, git, quiet);
    }
    if is_bare_repository(path) {
        bail!("--against {spec}: a bare git repository; name the branch: {spec}#<BRANCH>");
    }
    bail!(
        "--against {}: no such folder (name a GitOps folder, or a branch of a git repository as <REPO>#<BRANCH>)",
        kalypso_git::redact(spec)
    )
}

/// The environment delivered to `oci://HOST/PATH#TAG` (empty if nothing is there yet).
fn read_artifacts(spec: &str, git: &GitAccess, quiet: bool) -> Result<Tree> {
    let (location, tag) =
        kalypso_oci::reference::parse_with_tag(spec).map_err(|e| anyhow!("--against: {e}"))?;
    let registry = kalypso_git::oci::registry(&git.registry, &git.retry)
        .map_err(|e| anyhow!("{}", kalypso_git::redact(&e.to_string())))?;
    match kalypso_oci::read::tree(&registry, &location, &tag)
        .map_err(|e| anyhow!("{}", kalypso_git::redact(&e.to_string())))?
    {
        Some((_, tree)) => Ok(tree),
        None => {
            if !quiet {
                eprintln!(
                    "note: {location} has no environment tagged {tag:?} yet; planning against an empty tree"
                );
            }
            Ok(Tree::new())
        }
    }
}

/// The files of `branch` of repository `repo` (empty if the branch does not exist yet).
fn read_branch(repo: &str, branch: &str, git: &GitAccess, quiet: bool) -> Result<Tree> {
    let url = RepoUrl::parse(repo).map_err(|e| anyhow!("GitOps repository: {e}"))?;
    let repo = Repo::open_source(&url, &git.cache)?;
    repo.fetch_branches(&git.transport(), &[branch], &[])?;
    match repo.branch(branch)? {
        Some(commit) => Ok(repo.snapshot(Some(commit))?.files),
        None => {
            if !quiet {
                eprintln!(
                    "note: branch {branch:?} does not exist in {}; planning against an empty tree",
                    url.redacted()
                );
            }
            Ok(Tree::new())
        }
    }
}

/// The main commit environment `env` pins in its BaseRepo `main`, if any.
pub(crate) fn pinned_commit(env: &str, inputs: &Inputs) -> Option<String> {
    let mut scratch = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(env, inputs, &mut scratch);
    namespace
        .promoted_base()
        .map(|b| b.spec.commit.trim().to_owned())
        .filter(|c| !c.is_empty())
}
