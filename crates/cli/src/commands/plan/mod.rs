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

mod format;

use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use kalypso_core::model::Namespace;
use kalypso_core::placement::{CurrentAssignment, current_from_paths};
use kalypso_core::plan::plan;
use kalypso_core::run::Isolation;
use kalypso_core::tree::{RepoContent, Tree, apply, diff};
use kalypso_core::{Diagnostics, Inputs, ScheduledEnvironment};
use kalypso_git::RepoUrl;
use serde::Serialize;

use super::{report, run};
use crate::settings::{self, Comparison, Global};
use crate::source::{ControlPlaneSource, GitAccess, pinned_commit, read_against};

/// Exit code when the plan has changes (like `terraform plan -detailed-exitcode`).
pub(crate) const CHANGES: u8 = 2;

/// Loads, schedules and renders `env` (placing with the current tree `old`, when known); `Err`
/// with the exit code if it has errors (they are reported).
fn render(
    inputs: &Inputs,
    env: &str,
    old: Option<&Tree>,
    global: &Global,
) -> Result<(ScheduledEnvironment, RepoContent), ExitCode> {
    let current = || old.map(current_of).unwrap_or_default();
    let run = run(inputs, env, &current, Isolation::Environment, global);
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
    global: &Global,
) -> Result<Option<Tree>> {
    if let Some(against) = against {
        return read_against(against, git, global.quiet).map(Some);
    }
    let mut diagnostics = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(env, inputs, &mut diagnostics);
    if !namespace.policies.values().any(|p| p.spec.has_placement()) {
        return Ok(None);
    }
    match default_against(&namespace) {
        Ok(spec) => read_against(&spec, git, global.quiet).map(Some),
        Err(_) => Ok(None),
    }
}

/// The environment's GitOps branch as `<REPO>#<BRANCH>`, when its repository is local.
fn default_against(namespace: &Namespace) -> Result<String> {
    let name = &namespace.name;
    let hint = "name the current GitOps tree with --against <DIR>, --against <REPO>#<BRANCH> or --against oci://<HOST>/<PATH>#<TAG>";
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
    if kalypso_git::oci::is_oci(&one.spec.repo) {
        let location = kalypso_oci::Location::parse(&one.spec.repo)
            .map_err(|e| anyhow!("GitOpsRepo {}: {e}", one.name()))?;
        if !location.is_loopback() {
            bail!(
                "the GitOps repository of environment {name} ({location}) is a registry not on this machine; {hint}"
            );
        }
        return Ok(format!("{location}#{}", one.spec.branch));
    }
    let url = RepoUrl::parse(&one.spec.repo).map_err(|e| anyhow!("GitOpsRepo {}: {e}", one.name()))?;
    if !url.is_local() {
        bail!(
            "the GitOps repository of environment {name} ({}) is not local; {hint} (e.g. a clone)",
            url.redacted()
        );
    }
    Ok(format!("{}#{}", one.spec.repo, one.spec.branch))
}

/// The tree `content` gives on top of `old`, read from `against`: a git branch or folder
/// keeps what the original's update rules keep; an OCI environment holds exactly what each
/// artifact would (see `kalypso_oci::deliver::planned_tree`).
fn after(old: &Tree, content: &RepoContent, against: &str) -> Result<Tree> {
    if kalypso_git::oci::is_oci(against) {
        return kalypso_oci::deliver::planned_tree(content, old).map_err(|e| anyhow!("{e}"));
    }
    Ok(apply(old, content).tree)
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
fn trees(source: &Comparison, global: &Global) -> Result<Result<Trees, ExitCode>> {
    let git = GitAccess::new(&source.git)?.with_registry(&source.registry);
    let mut control_plane = ControlPlaneSource::open(&source.control_plane, &git, global.quiet)?;
    let env = source.env.as_str();
    let Some(from) = &source.promote_from else {
        let inputs = control_plane.inputs(env)?;
        let first = current_tree(source.against.as_ref(), &inputs, env, &git, global)?;
        let (environment, content) = match render(&inputs, env, first.as_ref(), global) {
            Ok(r) => r,
            Err(code) => return Ok(Err(code)),
        };
        let spec = match (&source.against, &first) {
            (Some(against), _) => against.clone(),
            (None, _) => default_against(&environment.namespace).unwrap_or_default(),
        };
        let old = match first {
            Some(old) => old,
            None => read_against(&default_against(&environment.namespace)?, &git, global.quiet)?,
        };
        let new = after(&old, &content, &spec)?;
        return Ok(Ok(Trees {
            old,
            new,
            promotion: None,
        }));
    };
    let is_git = matches!(control_plane, ControlPlaneSource::Git { .. });
    let (promoted_inputs, commit) = control_plane.promoted_inputs(env, from)?;
    let first = match (&source.against, is_git) {
        (Some(against), _) => Some(read_against(against, &git, global.quiet)?),
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
    let spec = match &source.against {
        Some(against) => against.clone(),
        None => default_against(&environment.namespace).unwrap_or_default(),
    };
    let old = match first {
        Some(old) => old,
        None => read_against(&default_against(&environment.namespace)?, &git, global.quiet)?,
    };
    let new = after(&old, &content, &spec)?;
    Ok(Ok(Trees {
        old,
        new,
        promotion: Some(Promotion {
            environment: from.clone(),
            commit,
        }),
    }))
}

/// `kalypso plan`: the plan, printed in the format asked for.
pub(crate) fn plan_command(settings: &settings::Plan, global: &Global) -> Result<ExitCode> {
    let trees = match trees(&settings.source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let plan = plan(&trees.old, &trees.new);
    let text = format::plan(
        settings.output,
        &settings.source.env,
        trees.promotion.as_ref(),
        &plan,
    )?;
    print!("{text}");
    Ok(if plan.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}

/// `kalypso diff`: the change as a unified diff, coloured as `--color` and the terminal say.
pub(crate) fn diff_command(source: &Comparison, global: &Global) -> Result<ExitCode> {
    let trees = match trees(source, global)? {
        Ok(trees) => trees,
        Err(code) => return Ok(code),
    };
    let color = crate::terminal::colour_stdout(global.color);
    let changes = diff(&trees.old, &trees.new);
    print!(
        "{}",
        format::unified_diff(&trees.old, &trees.new, &changes, color)
    );
    Ok(if changes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(CHANGES)
    })
}
