//! `kalypso plan` and `kalypso diff`: what rendering would change in a GitOps tree, as an
//! assignment-level summary or as a unified diff of files, before anything is merged.
//!
//! Both commands build two trees and compare them:
//! - the *current* tree: `--against` (a folder, or `<REPO>#<BRANCH>` read straight from git),
//!   else the environment's GitOpsRepo branch when that repository is local;
//! - the *new* tree: the control plane rendered and put on top of the current tree with the
//!   original's update rules, exactly as `render` and `sync` would write it.
//!
//! With `--promote-from SRC` the new tree is ENV rendered with the main commit SRC has
//! promoted, and (for a git control plane without `--against`) the current tree is ENV
//! rendered at its own pinned commit, so the plan shows the promotion's effect alone.
//! The control plane itself may be a folder or a git repository (read as `sync` reads it).
//!
//! Exit codes follow `terraform plan -detailed-exitcode`: 0 no change, 2 changes, 1 error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use kalypso_core::model::Namespace;
use kalypso_core::placement::{CurrentAssignment, current_from_paths};
use kalypso_core::plan::{ChangeGroup, FORMAT_VERSION, FileChange, KeyChange, Plan, plan};
use kalypso_core::tree::{Change, RepoContent, Tree, apply, diff};
use kalypso_core::{Diagnostics, Inputs, ScheduledEnvironment};
use kalypso_git::auth::Credentials;
use kalypso_git::control_plane::{ControlPlane, EnvironmentRef, Sources, short};
use kalypso_git::repo::{Repo, Transport};
use kalypso_git::{Cache, RepoUrl, RetryPolicy};
use serde::Serialize;

use super::{GitArgs, report, run};
use crate::control_plane::{MAIN, discover_environments, read_inputs};
use crate::fsio::read_tree;
use crate::local_clone::LocalClone;
use crate::{DiffArgs, GlobalArgs, OutputFormat, PlanArgs, PlanSource};
use kalypso_core::run::Isolation;

/// Exit code when the plan has changes (like `terraform plan -detailed-exitcode`).
pub(crate) const CHANGES: u8 = 2;

/// Git access shared by every repository one command reads.
#[derive(Debug)]
pub(crate) struct GitAccess {
    credentials: Credentials,
    cache: Cache,
    retry: RetryPolicy,
    main_branch: String,
}

impl GitAccess {
    /// Credentials, cache and retries from the command line.
    pub(crate) fn new(args: &GitArgs) -> Result<GitAccess> {
        let credentials = Credentials::load(&args.auth()).map_err(|e| anyhow!("{e}"))?;
        Ok(GitAccess {
            credentials,
            cache: Cache::new(args.cache_dir()),
            retry: args.retry(),
            main_branch: args.main_branch().to_owned(),
        })
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
        sources: Sources,
        /// How they are reached.
        transport: Transport<'g>,
        /// The working copy, when the repository is a local clone.
        clone: Option<Box<LocalClone>>,
        /// Print nothing but errors.
        quiet: bool,
    },
}

impl<'g> ControlPlaneSource<'g> {
    /// Opens `text`: a folder holding `main/` (or anything that is not a git repository) is
    /// the folder form; a git repository or URL is read as `sync` reads it.
    pub(crate) fn open(text: &str, git: &'g GitAccess, quiet: bool) -> Result<ControlPlaneSource<'g>> {
        let url = RepoUrl::parse(text).map_err(|e| anyhow!("control plane: {e}"))?;
        if let Some(path) = url.plain_path()
            && (path.join(MAIN).is_dir() || !is_git_repository(path))
        {
            return Ok(ControlPlaneSource::Folder(path.to_owned()));
        }
        let transport = git.transport();
        let control_plane = ControlPlane::open(&url, &git.cache, &transport, &git.main_branch)?;
        Ok(ControlPlaneSource::Git {
            control_plane: Box::new(control_plane),
            sources: Sources::new(git.cache.clone()),
            transport,
            clone: url.plain_path().and_then(LocalClone::open).map(Box::new),
            quiet,
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
    fn promoted_inputs(&mut self, env: &str, from: &str) -> Result<(Inputs, Option<String>)> {
        match self {
            ControlPlaneSource::Folder(dir) => {
                let commit = pinned_commit(from, &read_inputs(dir, from)?);
                Ok((read_inputs(dir, env)?, commit))
            }
            ControlPlaneSource::Git {
                control_plane,
                sources,
                transport,
                clone,
                quiet,
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

/// Loads, schedules and renders `env` (placing with the current tree `old`, when known); `Err`
/// with the exit code if it has errors (they are reported).
fn render(
    inputs: &Inputs,
    env: &str,
    old: Option<&Tree>,
    global: &GlobalArgs,
) -> Result<(ScheduledEnvironment, RepoContent), ExitCode> {
    let current = || old.map(current_of).unwrap_or_default();
    let run = run(inputs, env, &current, Isolation::Environment);
    report(&run.diagnostics, global);
    if run.is_blocked() {
        eprintln!(
            "error: environment {env:?} has {} problem(s); no plan",
            run.diagnostics.errors().count()
        );
        return Err(ExitCode::FAILURE);
    }
    Ok((run.environment, run.rendered.content))
}

/// Reads the current GitOps tree `spec` names: a folder (a working copy's `.git` is
/// skipped), or `<REPO>#<BRANCH>`.
pub(crate) fn read_against(spec: &str, git: &GitAccess, global: &GlobalArgs) -> Result<Tree> {
    let path = Path::new(spec);
    if path.is_dir() && !is_bare_repository(path) {
        return read_tree(path).with_context(|| format!("reading {spec}"));
    }
    if let Some((repo, branch)) = spec.rsplit_once('#')
        && !repo.is_empty()
        && !branch.is_empty()
    {
        return read_branch(repo, branch, git, global);
    }
    if is_bare_repository(path) {
        bail!("--against {spec}: a bare git repository; name the branch: {spec}#<BRANCH>");
    }
    bail!(
        "--against {}: no such folder (name a GitOps folder, or a branch of a git repository as <REPO>#<BRANCH>)",
        kalypso_git::redact(spec)
    )
}

/// The files of `branch` of repository `repo` (empty if the branch does not exist yet).
fn read_branch(repo: &str, branch: &str, git: &GitAccess, global: &GlobalArgs) -> Result<Tree> {
    let url = RepoUrl::parse(repo).map_err(|e| anyhow!("GitOps repository: {e}"))?;
    let repo = Repo::open_source(&url, &git.cache)?;
    repo.fetch_branches(&git.transport(), &[branch], &[])?;
    match repo.branch(branch)? {
        Some(commit) => Ok(repo.snapshot(Some(commit))?.files),
        None => {
            if !global.quiet {
                eprintln!(
                    "note: branch {branch:?} does not exist in {}; planning against an empty tree",
                    url.redacted()
                );
            }
            Ok(Tree::new())
        }
    }
}

/// The current assignment of a GitOps tree (for the `Steady` prioritizer).
fn current_of(tree: &Tree) -> CurrentAssignment {
    current_from_paths(tree.iter().map(|(path, _)| path.as_str()))
}

/// The current tree to place with: `--against`, else the environment's local GitOps branch.
/// `None` when neither can be read now (the error is reported after rendering, as before).
fn current_tree(
    against: Option<&String>,
    inputs: &Inputs,
    env: &str,
    git: &GitAccess,
    global: &GlobalArgs,
) -> Result<Option<Tree>> {
    if let Some(against) = against {
        return read_against(against, git, global).map(Some);
    }
    let mut diagnostics = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(env, inputs, &mut diagnostics);
    if !namespace.policies.values().any(|p| p.spec.has_placement()) {
        return Ok(None);
    }
    match default_against(&namespace) {
        Ok(spec) => read_against(&spec, git, global).map(Some),
        Err(_) => Ok(None),
    }
}

/// The environment's GitOps branch as `<REPO>#<BRANCH>`, when its repository is local.
fn default_against(namespace: &Namespace) -> Result<String> {
    let name = &namespace.name;
    let hint = "name the current GitOps tree with --against <DIR> or --against <REPO>#<BRANCH>";
    let repos: Vec<_> = namespace.gitops_repos.values().collect();
    let [one] = repos.as_slice() else {
        if repos.is_empty() {
            bail!("environment {name} has no GitOpsRepo; {hint}");
        }
        let names: Vec<&str> = repos.iter().map(|r| r.name()).collect();
        bail!(
            "environment {name} has several GitOpsRepos ({}); {hint}",
            names.join(", ")
        );
    };
    let url = RepoUrl::parse(&one.spec.repo).map_err(|e| anyhow!("GitOpsRepo {}: {e}", one.name()))?;
    if !url.is_local() {
        bail!(
            "the GitOps repository of environment {name} ({}) is not local; {hint} (e.g. a clone)",
            url.redacted()
        );
    }
    Ok(format!("{}#{}", one.spec.repo, one.spec.branch))
}

/// The promotion a plan is about.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Promotion {
    /// The environment whose main commit is promoted.
    pub(crate) environment: String,
    /// That commit (`None`: a control-plane folder whose source environment pins nothing).
    pub(crate) commit: Option<String>,
}

/// The two trees a plan compares.
#[derive(Debug)]
struct Trees {
    old: Tree,
    new: Tree,
    promotion: Option<Promotion>,
}

/// The current tree and the tree the control plane produces, or the exit code of a failure.
fn trees(source: &PlanSource, global: &GlobalArgs) -> Result<Result<Trees, ExitCode>> {
    let git = GitAccess::new(&source.git)?;
    let mut control_plane = ControlPlaneSource::open(&source.control_plane, &git, global.quiet)?;
    let env = source.env.as_str();
    let Some(from) = &source.promote_from else {
        let inputs = control_plane.inputs(env)?;
        let first = current_tree(source.against.as_ref(), &inputs, env, &git, global)?;
        let (environment, content) = match render(&inputs, env, first.as_ref(), global) {
            Ok(r) => r,
            Err(code) => return Ok(Err(code)),
        };
        let old = match first {
            Some(old) => old,
            None => read_against(&default_against(&environment.namespace)?, &git, global)?,
        };
        let new = apply(&old, &content).tree;
        return Ok(Ok(Trees {
            old,
            new,
            promotion: None,
        }));
    };
    if from == env {
        bail!("--promote-from {from}: the environment promoted from must differ from --env");
    }
    let is_git = matches!(control_plane, ControlPlaneSource::Git { .. });
    let (promoted_inputs, commit) = control_plane.promoted_inputs(env, from)?;
    let first = match (&source.against, is_git) {
        (Some(against), _) => Some(read_against(against, &git, global)?),
        // The environment as it is now: rendered at its own pinned commit; nothing yet when
        // it pins none (its first promotion).
        (None, true) => {
            let inputs = control_plane.inputs(env)?;
            if pinned_commit(env, &inputs).is_none() {
                if !global.quiet {
                    eprintln!(
                        "note: environment {env} has never been promoted (its BaseRepo main pins no commit): \
                         planning its first promotion against an empty tree"
                    );
                }
                Some(Tree::new())
            } else {
                match render(&inputs, env, None, global) {
                    Ok((_, current)) => Some(apply(&Tree::new(), &current).tree),
                    Err(code) => return Ok(Err(code)),
                }
            }
        }
        // A folder has one main: compare with the environment's GitOps tree.
        (None, false) => current_tree(None, &promoted_inputs, env, &git, global)?,
    };
    let (environment, mut content) = match render(&promoted_inputs, env, first.as_ref(), global) {
        Ok(r) => r,
        Err(code) => return Ok(Err(code)),
    };
    if commit.is_some() {
        content.promoted_commit.clone_from(&commit);
    }
    let old = match first {
        Some(old) => old,
        None => read_against(&default_against(&environment.namespace)?, &git, global)?,
    };
    let new = apply(&old, &content).tree;
    Ok(Ok(Trees {
        old,
        new,
        promotion: Some(Promotion {
            environment: from.clone(),
            commit,
        }),
    }))
}

/// The main commit environment `env` pins in its BaseRepo `main`, if any.
fn pinned_commit(env: &str, inputs: &Inputs) -> Option<String> {
    let mut scratch = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(env, inputs, &mut scratch);
    namespace
        .promoted_base()
        .map(|b| b.spec.commit.trim().to_owned())
        .filter(|c| !c.is_empty())
}

/// The JSON form of a plan: a stable interface (see docs/plan-and-explain.md).
#[derive(Debug, Serialize)]
struct PlanDocument<'a> {
    /// [`FORMAT_VERSION`].
    version: u32,
    /// The environment planned.
    environment: &'a str,
    /// The promotion planned, with `--promote-from`.
    promote_from: Option<&'a Promotion>,
    /// Whether anything changes (the exit code is 2 exactly then).
    has_changes: bool,
    #[serde(flatten)]
    plan: &'a Plan,
}

pub(crate) fn plan_command(args: &PlanArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let trees = match trees(&args.source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let plan = plan(&trees.old, &trees.new);
    let env = &args.source.env;
    let promotion = trees.promotion.as_ref();
    let text = match args.output {
        OutputFormat::Text => plan_text(env, promotion, &plan),
        OutputFormat::Markdown => plan_markdown(env, promotion, &plan),
        OutputFormat::Json => {
            let document = PlanDocument {
                version: FORMAT_VERSION,
                environment: env,
                promote_from: promotion,
                has_changes: !plan.is_empty(),
                plan: &plan,
            };
            let mut json = serde_json::to_string_pretty(&document)?;
            json.push('\n');
            json
        }
    };
    print!("{text}");
    Ok(if plan.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}

/// The counts, as two lines.
fn summary(plan: &Plan) -> String {
    let c = &plan.counts;
    format!(
        "Assignments: {} added, {} removed, {} moved, {} changed, {} unchanged.\nFiles: {} added, {} modified, {} deleted.",
        c.added, c.removed, c.moved, c.changed, c.unchanged, c.files_added, c.files_modified, c.files_deleted
    )
}

fn title(env: &str, promotion: Option<&Promotion>) -> String {
    match promotion {
        None => format!("environment {env}"),
        Some(Promotion {
            environment,
            commit: Some(commit),
        }) => format!(
            "environment {env}, promoting main commit {} from {environment}",
            short(commit)
        ),
        Some(Promotion { environment, .. }) => {
            format!("environment {env}, promoting main from {environment}")
        }
    }
}

/// A value for people: quoted, escaped; `(none)` when absent.
fn show(value: Option<&String>) -> String {
    match value {
        None => "(none)".to_owned(),
        Some(v) => format!("{v:?}"),
    }
}

fn key_lines(out: &mut String, k: &KeyChange, indent: &str) {
    let multiline = |v: &Option<String>| v.as_ref().is_some_and(|v| v.contains('\n'));
    let sign = match (&k.old, &k.new) {
        (None, _) => '+',
        (_, None) => '-',
        _ => '~',
    };
    if multiline(&k.old) || multiline(&k.new) {
        let _ = writeln!(out, "{indent}{sign} {}:", k.key);
        for (label, value) in [("old", &k.old), ("new", &k.new)] {
            match value {
                None => {
                    let _ = writeln!(out, "{indent}    {label}: (none)");
                }
                Some(v) => {
                    let _ = writeln!(out, "{indent}    {label}: |");
                    for line in v.lines() {
                        let _ = writeln!(out, "{indent}      {line}");
                    }
                }
            }
        }
        return;
    }
    let _ = match (&k.old, &k.new) {
        (None, new) => writeln!(out, "{indent}{sign} {}: {}", k.key, show(new.as_ref())),
        (old, None) => writeln!(out, "{indent}{sign} {}: {}", k.key, show(old.as_ref())),
        (old, new) => writeln!(
            out,
            "{indent}{sign} {}: {} -> {}",
            k.key,
            show(old.as_ref()),
            show(new.as_ref())
        ),
    };
}

fn file_lines(out: &mut String, files: &[FileChange], indent: &str) {
    for f in files {
        let _ = writeln!(out, "{indent}{} {}", f.file, f.change.as_str());
        for k in &f.keys {
            key_lines(out, k, &format!("{indent}  "));
        }
    }
}

/// The plan for people on a terminal.
pub(crate) fn plan_text(env: &str, promotion: Option<&Promotion>, plan: &Plan) -> String {
    let mut out = format!("Plan for {}\n", title(env, promotion));
    if plan.is_empty() {
        let _ = writeln!(out, "\nNo changes: the GitOps tree is up to date.");
        return out;
    }
    if !plan.cluster_types.added.is_empty() || !plan.cluster_types.removed.is_empty() {
        let _ = writeln!(out, "\nCluster types:");
        for ct in &plan.cluster_types.added {
            let _ = writeln!(out, "  + {ct}");
        }
        for ct in &plan.cluster_types.removed {
            let _ = writeln!(out, "  - {ct}");
        }
    }
    if !plan.added.is_empty() {
        let _ = writeln!(out, "\nAdded ({}):", plan.added.len());
        for a in &plan.added {
            let _ = writeln!(out, "  + {a}");
        }
    }
    if !plan.removed.is_empty() {
        let _ = writeln!(out, "\nRemoved ({}):", plan.removed.len());
        for a in &plan.removed {
            let _ = writeln!(out, "  - {a}");
        }
    }
    if !plan.moved.is_empty() {
        let _ = writeln!(out, "\nMoved ({}):", plan.moved.len());
        for m in &plan.moved {
            let _ = writeln!(
                out,
                "  > {}: {} -> {}",
                m.deployment_target,
                m.from.join(", "),
                m.to.join(", ")
            );
        }
    }
    if !plan.changed.is_empty() {
        let _ = writeln!(out, "\nChanged ({}):", plan.changed.len());
        // Assignments that changed alike share one description; groups are set apart.
        for (i, group) in plan.groups().iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            for a in &group.assignments {
                let _ = writeln!(out, "  ~ {a}");
            }
            file_lines(&mut out, group.files, "      ");
        }
    }
    if let Some(p) = &plan.promoted_commit {
        let _ = writeln!(
            out,
            "\nPromoted commit: {} -> {}",
            show(p.old.as_ref()),
            show(p.new.as_ref())
        );
    }
    let other: Vec<_> = plan.other_unexplained().collect();
    if !other.is_empty() {
        let _ = writeln!(out, "\nOther files:");
        for p in other {
            let _ = writeln!(out, "  {} ({})", p.path, p.change.as_str());
        }
    }
    let _ = writeln!(out, "\n{}", summary(plan));
    out
}

/// A value in a Markdown table cell: a code span, `|` escaped, line breaks shown as `\n`.
fn md_value(value: Option<&String>) -> String {
    match value {
        None => "_none_".to_owned(),
        Some(v) if v.is_empty() => "_empty_".to_owned(),
        Some(v) => md_code(&v.replace('\n', "\\n")).replace('|', "\\|"),
    }
}

/// A code span that survives backticks in `text`.
fn md_code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// The largest comment GitHub accepts is 65536 characters; stay well below.
const MARKDOWN_LIMIT: usize = 60_000;
/// Groups with at most this many assignments name them on one line.
const MARKDOWN_INLINE: usize = 3;
/// Groups with more assignments than this list them in a collapsed block.
const MARKDOWN_COLLAPSE: usize = 10;

fn md_group(out: &mut String, group: &ChangeGroup<'_>) {
    let names: Vec<String> = group
        .assignments
        .iter()
        .map(|a| md_code(&a.to_string()))
        .collect();
    let bullets = || {
        names
            .iter()
            .map(|n| format!("- {n}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if names.len() <= MARKDOWN_INLINE {
        let _ = writeln!(out, "**{}**\n", names.join(", "));
    } else if names.len() <= MARKDOWN_COLLAPSE {
        let _ = writeln!(out, "**{} assignments**\n\n{}\n", names.len(), bullets());
    } else {
        let _ = writeln!(
            out,
            "**{} assignments**\n\n<details><summary>Assignments</summary>\n\n{}\n\n</details>\n",
            names.len(),
            bullets()
        );
    }
    let files: Vec<String> = group
        .files
        .iter()
        .map(|f| format!("{} {}", md_code(&f.file), f.change.as_str()))
        .collect();
    let _ = writeln!(out, "{}", files.join(", "));
    let keys: Vec<(&str, &KeyChange)> = group
        .files
        .iter()
        .flat_map(|f| f.keys.iter().map(move |k| (f.file.as_str(), k)))
        .collect();
    if !keys.is_empty() {
        let several_files = group.files.iter().filter(|f| !f.keys.is_empty()).count() > 1;
        out.push_str("\n| key | old | new |\n|---|---|---|\n");
        for (file, k) in keys {
            let key = if several_files {
                format!("{file}: {}", k.key)
            } else {
                k.key.clone()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                md_code(&key).replace('|', "\\|"),
                md_value(k.old.as_ref()),
                md_value(k.new.as_ref())
            );
        }
    }
    out.push('\n');
}

/// The plan as a pull-request comment (GitHub-flavoured Markdown).
pub(crate) fn plan_markdown(env: &str, promotion: Option<&Promotion>, plan: &Plan) -> String {
    let mut out = format!("### kalypso plan: {}\n\n", md_title(env, promotion));
    if plan.is_empty() {
        out.push_str("No changes: the GitOps tree is up to date.\n");
        return out;
    }
    let c = &plan.counts;
    let _ = writeln!(
        out,
        "| | added | removed | moved | changed | unchanged |\n|---|---:|---:|---:|---:|---:|\n| **assignments** | {} | {} | {} | {} | {} |\n",
        c.added, c.removed, c.moved, c.changed, c.unchanged
    );
    let _ = writeln!(
        out,
        "Files: {} added, {} modified, {} deleted.\n",
        c.files_added, c.files_modified, c.files_deleted
    );
    if let Some(p) = &plan.promoted_commit {
        let _ = writeln!(
            out,
            "Promoted commit: {} → {}\n",
            md_value(p.old.as_ref()),
            md_value(p.new.as_ref())
        );
    }
    if !plan.cluster_types.added.is_empty() || !plan.cluster_types.removed.is_empty() {
        out.push_str("#### Cluster types\n\n");
        for ct in &plan.cluster_types.added {
            let _ = writeln!(out, "- {} added", md_code(ct));
        }
        for ct in &plan.cluster_types.removed {
            let _ = writeln!(out, "- {} removed", md_code(ct));
        }
        out.push('\n');
    }
    for (heading, list) in [("Added", &plan.added), ("Removed", &plan.removed)] {
        if !list.is_empty() {
            let _ = writeln!(out, "#### {heading} ({})\n", list.len());
            for a in list {
                let _ = writeln!(out, "- {}", md_code(&a.to_string()));
            }
            out.push('\n');
        }
    }
    if !plan.moved.is_empty() {
        let _ = writeln!(out, "#### Moved ({})\n", plan.moved.len());
        for m in &plan.moved {
            let list = |cts: &[String]| cts.iter().map(|c| md_code(c)).collect::<Vec<_>>().join(", ");
            let _ = writeln!(
                out,
                "- {}: {} → {}",
                md_code(&m.deployment_target),
                list(&m.from),
                list(&m.to)
            );
        }
        out.push('\n');
    }
    if !plan.changed.is_empty() {
        let _ = writeln!(out, "#### Changed ({})\n", plan.changed.len());
        for group in plan.groups() {
            md_group(&mut out, &group);
        }
    }
    let other: Vec<_> = plan.other_unexplained().collect();
    if !other.is_empty() {
        out.push_str("#### Other files\n\n");
        for p in other {
            let _ = writeln!(out, "- {} {}", md_code(&p.path), p.change.as_str());
        }
        out.push('\n');
    }
    truncate_markdown(out)
}

fn md_title(env: &str, promotion: Option<&Promotion>) -> String {
    match promotion {
        None => md_code(env),
        Some(Promotion {
            environment,
            commit: Some(commit),
        }) => format!(
            "{}, promoting {} from {}",
            md_code(env),
            md_code(short(commit)),
            md_code(environment)
        ),
        Some(Promotion { environment, .. }) => {
            format!("{}, promoting main from {}", md_code(env), md_code(environment))
        }
    }
}

/// Cuts a comment that GitHub would refuse, at a line break, and says so.
fn truncate_markdown(mut out: String) -> String {
    if out.len() <= MARKDOWN_LIMIT {
        return out;
    }
    let mut cut = MARKDOWN_LIMIT;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = out[..cut].rfind('\n').map_or(cut, |i| i + 1);
    out.truncate(cut);
    out.push_str(
        "\n_The plan is too long for a comment and was cut here; run `kalypso plan` (or `--output json`) for all of it._\n",
    );
    out
}

pub(crate) fn diff_command(args: &DiffArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let trees = match trees(&args.source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let color = crate::terminal::colour_stdout(global.color);
    let changes = diff(&trees.old, &trees.new);
    print!("{}", unified_diff(&trees.old, &trees.new, &changes, color));
    Ok(if changes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}

/// A unified diff of every changed file, in path order, in git's format: `git apply` in a
/// checkout of the current tree turns it into the new one.
pub(crate) fn unified_diff(old: &Tree, new: &Tree, changes: &[(String, Change)], color: bool) -> String {
    let paint = |code: &str, line: &str| {
        if color {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_owned()
        }
    };
    let mut out = String::new();
    for (path, change) in changes {
        let before = old.get(path).map(|b| &b[..]).unwrap_or_default();
        let after = new.get(path).map(|b| &b[..]).unwrap_or_default();
        let _ = writeln!(out, "{}", paint("1", &format!("diff --git a/{path} b/{path}")));
        match change {
            Change::Added => {
                let _ = writeln!(out, "{}", paint("1", "new file mode 100644"));
            }
            Change::Deleted => {
                let _ = writeln!(out, "{}", paint("1", "deleted file mode 100644"));
            }
            Change::Modified => {}
        }
        let (Ok(before), Ok(after)) = (std::str::from_utf8(before), std::str::from_utf8(after)) else {
            let _ = writeln!(out, "Binary files a/{path} and b/{path} differ");
            continue;
        };
        if before.is_empty() && after.is_empty() {
            continue;
        }
        let (a, b) = match change {
            Change::Added => ("/dev/null".to_owned(), format!("b/{path}")),
            Change::Deleted => (format!("a/{path}"), "/dev/null".to_owned()),
            Change::Modified => (format!("a/{path}"), format!("b/{path}")),
        };
        let text = similar::TextDiff::from_lines(before, after);
        let unified = text.unified_diff().context_radius(3).header(&a, &b).to_string();
        for line in unified.lines() {
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                paint("1", line)
            } else if line.starts_with('+') {
                paint("32", line)
            } else if line.starts_with('-') {
                paint("31", line)
            } else if line.starts_with("@@") {
                paint("36", line)
            } else {
                line.to_owned()
            };
            let _ = writeln!(out, "{painted}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_core::tree::Blob;

    fn tree(files: &[(&str, &str)]) -> Tree {
        files
            .iter()
            .map(|(p, c)| ((*p).to_owned(), Blob::from(c.as_bytes())))
            .collect()
    }

    #[test]
    fn markdown_values_survive_pipes_backticks_and_newlines() {
        assert_eq!(md_value(Some(&"a|b".to_owned())), "`a\\|b`");
        assert_eq!(md_value(Some(&"a`b".to_owned())), "`` a`b ``");
        assert_eq!(md_value(Some(&"a\nb".to_owned())), "`a\\nb`");
        assert_eq!(md_value(Some(&String::new())), "_empty_");
        assert_eq!(md_value(None), "_none_");
    }

    #[test]
    fn long_markdown_is_cut_at_a_line() {
        let long = "line\n".repeat(MARKDOWN_LIMIT);
        let cut = truncate_markdown(long);
        assert!(cut.len() < MARKDOWN_LIMIT + 200);
        assert!(cut.ends_with("for all of it._\n"));
        assert!(cut.contains("line\n\n_The plan"));
    }

    #[test]
    fn multiline_values_are_shown_as_blocks() {
        let mut out = String::new();
        key_lines(
            &mut out,
            &KeyChange {
                key: "LOGGING".into(),
                old: Some("level: info\n".into()),
                new: None,
            },
            "  ",
        );
        assert_eq!(
            out,
            "  - LOGGING:\n      old: |\n        level: info\n      new: (none)\n"
        );
    }

    #[test]
    fn diff_marks_new_deleted_and_empty_files() {
        let old = tree(&[("a/x", "1\n"), ("gone", "g")]);
        let new = tree(&[("a/x", "2\n"), ("empty", "")]);
        let changes = diff(&old, &new);
        let text = unified_diff(&old, &new, &changes, false);
        assert_eq!(
            text,
            "diff --git a/a/x b/a/x\n--- a/a/x\n+++ b/a/x\n@@ -1 +1 @@\n-1\n+2\n\
             diff --git a/empty b/empty\nnew file mode 100644\n\
             diff --git a/gone b/gone\ndeleted file mode 100644\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-g\n\\ No newline at end of file\n"
        );
        assert!(unified_diff(&old, &new, &changes, true).contains("\x1b[32m+2\x1b[0m"));
    }
}
