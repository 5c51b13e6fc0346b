//! Delivering an environment's tree to its GitOps branch: a commit pushed straight to the
//! branch (`push` mode), or a branch and a pull request (`pr` mode, as the original).
//!
//! Both modes start from a fresh fetch of the GitOps branch, put the rendered content on top
//! of its head with the original's update rules ([`kalypso_core::tree::apply`]), and build the
//! new tree in memory. Nothing is written when the tree equals the head's (the original
//! opened pull requests with empty diffs; kalypso does not).
//!
//! Safety under faults:
//! - pushes never force: if someone else pushed first, the push is rejected, and delivery
//!   starts again from a fresh fetch (a bounded number of times);
//! - network failures are retried with backoff (see [`crate::retry`]);
//! - in `pr` mode the head branch is named after the new tree (`kalypso/<base>/<tree id>`),
//!   so a run that crashed after pushing is completed by the next one (same tree, same
//!   branch: the existing branch is reused and the missing pull request opened), and two
//!   runs of the same content meet on one branch and one pull request;
//! - only the scheduler's own pull requests (head branch under its prefix, in the same
//!   repository) are ever closed, and only those older than the one it keeps.

use git2::Oid;
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::tree::RepoContent;
use serde::Deserialize;

use crate::auth::Credentials;
use crate::forge::{self, Forge, Provider, ProviderSettings};
use crate::github::{self, GitHub, PullRequest};
use crate::repo::{self, Author, Cache, RefUpdate, Repo, Transport, Written};
use crate::treewrite::Hashed;
use crate::url::RepoUrl;

/// The label of pull requests that change `Promoted_Commit_Id`.
pub const PROMOTED_LABEL: &str = "promoted";
/// The original's pull-request text.
pub const PR_BODY: &str = "This PR updates the manifests in GitOps Repo";
/// The original's commit author name.
pub const DEFAULT_AUTHOR_NAME: &str = "Kalypso Scheduler";
/// The original's commit author e-mail.
pub const DEFAULT_AUTHOR_EMAIL: &str = "kalypso.scheduler@email.com";
/// The original's commit message.
pub const DEFAULT_MESSAGE: &str = "Kalypso Scheduler commit";
/// Where the scheduler's pull-request branches live.
pub const DEFAULT_BRANCH_PREFIX: &str = "kalypso/";
/// How often a delivery starts again after its push was rejected.
const MAX_REJECTIONS: u32 = 5;

/// A failed delivery.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A git operation failed.
    #[error(transparent)]
    Repo(#[from] repo::Error),
    /// A GitHub call failed.
    #[error(transparent)]
    GitHub(#[from] github::Error),
    /// A GitLab, Azure DevOps or Gitea call failed.
    #[error(transparent)]
    Forge(forge::Error),
    /// `pr` mode needs a repository on GitHub.
    #[error(
        "cannot open pull requests on {repo}: not a GitHub repository URL (use --mode push for other repositories)"
    )]
    NotAForge {
        /// The repository, redacted.
        repo: String,
    },
    /// `pr` mode needs the base branch.
    #[error("branch {branch:?} does not exist in {repo}; a pull request needs a base branch")]
    NoBaseBranch {
        /// The repository, redacted.
        repo: String,
        /// The branch.
        branch: String,
    },
    /// Someone changed the scheduler's pull-request branch.
    #[error("branch {branch:?} of {repo} was changed by someone else; delete it to let kalypso recreate it")]
    BranchModified {
        /// The repository, redacted.
        repo: String,
        /// The branch.
        branch: String,
    },
    /// Pushes kept being rejected.
    #[error(
        "gave up delivering to branch {branch:?} of {repo}: rejected {attempts} times, the branch keeps moving"
    )]
    Contended {
        /// The repository, redacted.
        repo: String,
        /// The branch.
        branch: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The branch is checked out in a local working copy.
    #[error(
        "branch {branch:?} is checked out in the working copy {repo}; deliver to a bare repository or another branch"
    )]
    CheckedOut {
        /// The repository.
        repo: String,
        /// The branch.
        branch: String,
    },
    /// The forge did not return the pull request it said exists.
    #[error(
        "{provider} reports a pull request from {head:?} into {base:?} in {repo}, but it is not among the open ones"
    )]
    MissingPull {
        /// The forge.
        provider: Provider,
        /// `owner/repo`.
        repo: String,
        /// Head branch.
        head: String,
        /// Base branch.
        base: String,
    },
}

crate::repo::operation_errors_into!(Error);

impl From<forge::Error> for Error {
    fn from(error: forge::Error) -> Error {
        match error {
            forge::Error::GitHub(e) => Error::GitHub(e),
            other => Error::Forge(other),
        }
    }
}

impl Error {
    /// Whether the failure may go away by itself: network trouble, GitHub being unavailable
    /// or rate-limiting, a branch that kept moving.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Repo(e) => e.is_transient(),
            Error::GitHub(e) => e.is_transient(),
            Error::Forge(e) => e.is_transient(),
            Error::Contended { .. } => true,
            _ => false,
        }
    }

    /// Whether a repository looks damaged on disk (see [`repo::Error::is_damage`]).
    pub fn is_damage(&self) -> bool {
        matches!(self, Error::Repo(e) if e.is_damage())
    }
}

/// How an environment reaches its GitOps repository.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `push` for local repositories (a path or `file://`), `pr` otherwise.
    #[default]
    Auto,
    /// A branch and a pull request per change (the original's behaviour).
    Pr,
    /// A commit straight on the GitOps branch.
    Push,
}

impl Mode {
    /// The mode used for `url`.
    pub fn resolve(self, url: &RepoUrl) -> Mode {
        match self {
            Mode::Auto if url.is_local() => Mode::Push,
            Mode::Auto => Mode::Pr,
            other => other,
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "pr" => Ok(Mode::Pr),
            "push" => Ok(Mode::Push),
            other => Err(format!("unknown delivery mode {other:?} (auto, pr or push)")),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Auto => "auto",
            Mode::Pr => "pr",
            Mode::Push => "push",
        })
    }
}

/// How commits and pull requests are made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Push or pull request.
    pub mode: Mode,
    /// Commit author (and committer).
    pub author: Author,
    /// Commit message.
    pub message: String,
    /// Prefix of the scheduler's pull-request branches (`kalypso/` gives `kalypso/dev/…`).
    pub branch_prefix: String,
    /// The GitHub API.
    pub github_api_url: String,
    /// The forge of the GitOps repositories (default: inferred from each one's URL, see
    /// [`Provider::infer`]).
    pub provider: Option<Provider>,
    /// The API of a GitLab, Azure DevOps or Gitea forge (default: derived from each
    /// repository's URL; see [`ProviderSettings::api_url`]).
    pub provider_api_url: Option<String>,
    /// Compute and report, but write nothing anywhere.
    pub dry_run: bool,
}

impl Default for DeliverySettings {
    fn default() -> DeliverySettings {
        DeliverySettings {
            mode: Mode::Auto,
            author: Author {
                name: DEFAULT_AUTHOR_NAME.to_owned(),
                email: DEFAULT_AUTHOR_EMAIL.to_owned(),
            },
            message: DEFAULT_MESSAGE.to_owned(),
            branch_prefix: DEFAULT_BRANCH_PREFIX.to_owned(),
            github_api_url: github::DEFAULT_API_URL.to_owned(),
            provider: None,
            provider_api_url: None,
            dry_run: false,
        }
    }
}

/// How many files a delivery changes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// New files.
    pub added: usize,
    /// Changed files.
    pub modified: usize,
    /// Removed files.
    pub deleted: usize,
    /// Cluster types (top-level folders other than dot-folders) with a changed file.
    pub cluster_types: usize,
}

impl Changes {
    fn of(written: &Written) -> Changes {
        Changes {
            added: written.added,
            modified: written.modified,
            deleted: written.deleted,
            cluster_types: written.folders.iter().filter(|f| !f.starts_with('.')).count(),
        }
    }

    /// Files added, changed or deleted.
    pub fn files(&self) -> usize {
        self.added + self.modified + self.deleted
    }
}

impl std::fmt::Display for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} added, {} changed, {} deleted",
            self.added, self.modified, self.deleted
        )
    }
}

/// What a delivery did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The branch already holds the tree.
    UpToDate {
        /// The branch head.
        head: Option<Oid>,
        /// The scheduler's pull requests closed because they are no longer needed.
        closed: Vec<u64>,
    },
    /// A commit was pushed to the branch.
    Committed {
        /// The new head.
        commit: Oid,
        /// What changed.
        changes: Changes,
    },
    /// A pull request holds the change.
    PullRequest {
        /// Its number.
        number: u64,
        /// Its page.
        url: String,
        /// Its head branch.
        branch: String,
        /// Its head commit.
        commit: Oid,
        /// Whether this run opened it (else it was already open).
        created: bool,
        /// Whether it changes `Promoted_Commit_Id` (labelled `promoted`).
        promoted: bool,
        /// What it changes.
        changes: Changes,
        /// Older pull requests of the scheduler closed in its favour.
        closed: Vec<u64>,
    },
    /// Dry run: what would change.
    DryRun {
        /// The mode that would be used.
        mode: Mode,
        /// What would change.
        changes: Changes,
    },
    /// Delivered to an OCI registry (`oci://` GitOpsRepos): the artifacts pushed (none when
    /// nothing changed), or in a dry run those that would be (see [`crate::oci`]).
    Artifacts(Box<kalypso_oci::Report>),
}

impl std::fmt::Display for Delivery {
    /// What the delivery did, as a sentence fragment for a status or a log line
    /// (`committed 1a2b3c4 (2 added, 0 changed, 1 deleted)`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |oid: &Oid| {
            let text = oid.to_string();
            text[..text.len().min(7)].to_owned()
        };
        let closed = |f: &mut std::fmt::Formatter<'_>, closed: &[u64]| {
            if closed.is_empty() {
                return Ok(());
            }
            let numbers: Vec<String> = closed.iter().map(|n| format!("#{n}")).collect();
            write!(f, ", and closed pull request(s) {}", numbers.join(", "))
        };
        match self {
            Delivery::UpToDate { head, closed: c } => {
                match head {
                    Some(head) => write!(f, "already up to date at {}", short(head))?,
                    None => f.write_str(
                        "already up to date (the branch does not exist and nothing is to be written)",
                    )?,
                }
                closed(f, c)
            }
            Delivery::Committed { commit, changes } => write!(f, "committed {} ({changes})", short(commit)),
            Delivery::PullRequest {
                number,
                url,
                created,
                changes,
                closed: c,
                ..
            } => {
                let state = if *created { "opened" } else { "already open" };
                write!(f, "pull request #{number} {url} {state} ({changes})")?;
                closed(f, c)
            }
            Delivery::DryRun { mode, changes } => write!(f, "would deliver in {mode} mode ({changes})"),
            Delivery::Artifacts(report) => {
                let verb = if report.dry_run { "would push" } else { "pushed" };
                write!(
                    f,
                    "{verb} {} artifact(s), {} unchanged",
                    report.pushed.len(),
                    report.unchanged
                )
            }
        }
    }
}

/// Where and how one GitOps branch is delivered to.
#[derive(Debug)]
pub struct Destination<'a> {
    /// The repository.
    pub url: &'a RepoUrl,
    /// The branch.
    pub branch: &'a str,
    /// The mode (already resolved: `Pr` or `Push`).
    pub mode: Mode,
    /// The forge the repository is on, and its API (the GitOpsRepo's, see
    /// [`ProviderSettings::for_gitops_repo`]).
    pub providers: &'a ProviderSettings,
}

/// What delivery needs from its surroundings.
#[derive(Debug)]
pub struct Context<'a> {
    /// Mirrors.
    pub cache: &'a Cache,
    /// Git network access.
    pub transport: &'a Transport<'a>,
    /// Credentials (the token is used for GitHub too).
    pub credentials: &'a Credentials,
    /// Settings.
    pub settings: &'a DeliverySettings,
    /// The runtime GitHub calls run on.
    pub runtime: &'a tokio::runtime::Handle,
}

impl DeliverySettings {
    /// Which forge, and where its API is.
    pub fn providers(&self) -> ProviderSettings {
        ProviderSettings {
            provider: self.provider,
            github_api_url: self.github_api_url.clone(),
            api_url: self.provider_api_url.clone(),
        }
    }
}

impl Context<'_> {
    /// A client of the forge `url`'s repository is on, as `providers` say (see
    /// [`crate::forge`]).
    pub fn forge(&self, url: &RepoUrl, providers: &ProviderSettings) -> Result<Box<dyn Forge>, Error> {
        forge::connect(
            url,
            providers,
            self.credentials.token(),
            self.transport.retry,
            self.runtime,
        )?
        .ok_or_else(|| Error::NotAForge { repo: url.redacted() })
    }

    /// A GitHub client for `url`'s repository.
    pub fn github(&self, url: &RepoUrl) -> Result<GitHub, Error> {
        let (owner, name) = url
            .forge_repo()
            .ok_or_else(|| Error::NotAForge { repo: url.redacted() })?;
        Ok(GitHub::new(
            self.runtime.clone(),
            &self.settings.github_api_url,
            self.credentials.token(),
            &owner,
            &name,
            self.transport.retry,
        )?)
    }
}

/// What a delivery carries, for its commit message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Provenance {
    /// The environment.
    pub environment: String,
    /// The control plane's main commit (promoted) and environment-branch commit.
    pub main: String,
    /// The environment branch's commit.
    pub environment_commit: String,
    /// Number of workload repositories read.
    pub workloads: usize,
}

impl Provenance {
    /// The text added under the commit message: the one-line summary, then the inputs.
    fn describe(&self, changes: &Changes) -> String {
        format!(
            "{}: {}\n\nEnvironment: {}\nControl plane: main {}, {} {}\nWorkload repositories: {}",
            self.environment,
            changes.summary(),
            self.environment,
            self.main,
            self.environment,
            self.environment_commit,
            self.workloads
        )
    }
}

impl Changes {
    /// `312 files changed in 4 cluster types`.
    pub fn summary(&self) -> String {
        let files = self.files();
        format!(
            "{files} file{} changed in {} cluster type{}",
            if files == 1 { "" } else { "s" },
            self.cluster_types,
            if self.cluster_types == 1 { "" } else { "s" }
        )
    }
}

fn message(ctx: &Context<'_>, about: Option<&Provenance>, changes: &Changes) -> String {
    match about {
        Some(about) => format!("{}\n\n{}\n", ctx.settings.message, about.describe(changes)),
        None => ctx.settings.message.clone(),
    }
}

/// Where the GitOps branch `branch` of `url` (fetched into the cache first) has each
/// deployment target: what `Steady` placement keeps before a process has placed anything.
/// A branch that does not exist has none.
pub fn placement(
    cache: &Cache,
    transport: &Transport<'_>,
    url: &RepoUrl,
    branch: &str,
) -> Result<CurrentAssignment, repo::Error> {
    let repo = Repo::open_mirror(url, cache)?;
    repo.fetch_branches(transport, &[branch], &[])?;
    Ok(match repo.branch(branch)? {
        Some(head) => repo.target_folders(head)?,
        None => CurrentAssignment::new(),
    })
}

/// Delivers `content` (every package rendered: nothing [`RepoContent::delivered`]) to `dest`.
pub fn deliver(ctx: &Context<'_>, dest: &Destination<'_>, content: &RepoContent) -> Result<Delivery, Error> {
    let hashed = Hashed::new(content, &|_, _| None)
        .map_err(|unknown| Error::Repo(repo::Error::not_delivered(unknown, dest.url.redacted())))?;
    deliver_with(ctx, dest, &hashed, None)
}

/// Delivers the hashed content to `dest`; commit messages say what `about` says.
pub fn deliver_with(
    ctx: &Context<'_>,
    dest: &Destination<'_>,
    content: &Hashed<'_>,
    about: Option<&Provenance>,
) -> Result<Delivery, Error> {
    refuse_checked_out_branch(dest)?;
    let repo = Repo::open_mirror(dest.url, ctx.cache)?;
    match dest.mode {
        Mode::Pr => deliver_pr(ctx, &repo, dest, content, about),
        Mode::Push | Mode::Auto => deliver_push(ctx, &repo, dest, content, about),
    }
}

/// Pushing into the checked-out branch of a working copy would leave its files out of step
/// with its branch.
fn refuse_checked_out_branch(dest: &Destination<'_>) -> Result<(), Error> {
    let Some(path) = dest.url.local_path() else {
        return Ok(());
    };
    let Ok(git) = git2::Repository::open(path) else {
        return Ok(());
    };
    if git.is_bare() {
        return Ok(());
    }
    let head = git
        .find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_owned));
    if head.as_deref() == Some(&format!("refs/heads/{}", dest.branch)) {
        return Err(Error::CheckedOut {
            repo: dest.url.redacted(),
            branch: dest.branch.to_owned(),
        });
    }
    Ok(())
}

fn deliver_push(
    ctx: &Context<'_>,
    repo: &Repo,
    dest: &Destination<'_>,
    content: &Hashed<'_>,
    about: Option<&Provenance>,
) -> Result<Delivery, Error> {
    for attempt in 1..=MAX_REJECTIONS {
        repo.fetch_branches(ctx.transport, &[dest.branch], &[])?;
        let head = repo.branch(dest.branch)?;
        let base = head.map(|h| repo.tree_of(h)).transpose()?;
        let result = repo.staging(|s| -> Result<Delivery, repo::Error> {
            let written = s.write_content(base, content)?;
            let tree = written.tree;
            let changes = Changes::of(&written);
            if Some(tree) == base || (head.is_none() && changes.files() == 0) {
                return Ok(Delivery::UpToDate { head, closed: vec![] });
            }
            if ctx.settings.dry_run {
                return Ok(Delivery::DryRun {
                    mode: Mode::Push,
                    changes,
                });
            }
            let commit = s.commit(tree, head, &ctx.settings.author, &message(ctx, about, &changes))?;
            s.push(
                ctx.transport,
                &[RefUpdate {
                    branch: dest.branch.to_owned(),
                    target: Some(commit),
                }],
            )?;
            Ok(Delivery::Committed { commit, changes })
        });
        match result {
            Err(e) if e.is_rejection() => {
                tracing::warn!(repo = %dest.url, branch = dest.branch, attempt, error = %e, "push rejected, starting again from the new head");
            }
            other => return Ok(other?),
        }
    }
    Err(Error::Contended {
        repo: dest.url.redacted(),
        branch: dest.branch.to_owned(),
        attempts: MAX_REJECTIONS,
    })
}

/// The git side of a pull request: which branch holds the change.
enum Prepared {
    UpToDate(Option<Oid>),
    DryRun(Changes),
    Branch {
        name: String,
        commit: Oid,
        changes: Changes,
        promoted: bool,
    },
}

fn deliver_pr(
    ctx: &Context<'_>,
    repo: &Repo,
    dest: &Destination<'_>,
    content: &Hashed<'_>,
    about: Option<&Provenance>,
) -> Result<Delivery, Error> {
    let own_prefix = format!("{}{}/", ctx.settings.branch_prefix, dest.branch);
    let mut prepared = None;
    for attempt in 1..=MAX_REJECTIONS {
        match prepare_branch(ctx, repo, dest, content, &own_prefix, about) {
            Err(Error::Repo(e)) if e.is_rejection() => {
                tracing::warn!(repo = %dest.url, branch = dest.branch, attempt, error = %e, "push rejected, starting again");
            }
            other => {
                prepared = Some(other?);
                break;
            }
        }
    }
    let Some(prepared) = prepared else {
        return Err(Error::Contended {
            repo: dest.url.redacted(),
            branch: dest.branch.to_owned(),
            attempts: MAX_REJECTIONS,
        });
    };
    let (name, commit, changes, promoted) = match prepared {
        Prepared::DryRun(changes) => {
            return Ok(Delivery::DryRun {
                mode: Mode::Pr,
                changes,
            });
        }
        Prepared::UpToDate(head) if ctx.settings.dry_run => {
            return Ok(Delivery::UpToDate { head, closed: vec![] });
        }
        Prepared::UpToDate(head) => {
            let (forge, open) = open_pulls(ctx, dest)?;
            let own: Vec<&PullRequest> = open
                .iter()
                .filter(|p| is_own_pull(p, &own_prefix, dest.branch, &forge.full_name()))
                .collect();
            let closed = close_pulls(ctx, repo, forge.as_ref(), &own)?;
            return Ok(Delivery::UpToDate { head, closed });
        }
        Prepared::Branch {
            name,
            commit,
            changes,
            promoted,
        } => (name, commit, changes, promoted),
    };
    let (forge, open) = open_pulls(ctx, dest)?;
    let own: Vec<&PullRequest> = open
        .iter()
        .filter(|p| is_own_pull(p, &own_prefix, dest.branch, &forge.full_name()))
        .collect();
    let (pull, created) = match own.iter().find(|p| p.head.name == name) {
        Some(p) => ((*p).clone(), false),
        None => {
            let title = format!("Update manifests in {} from {name}", dest.branch);
            // The original's text; the commit itself carries the summary and the inputs.
            match forge.create_pull(&name, dest.branch, &title, PR_BODY)? {
                Some(p) => (p, true),
                None => {
                    // Opened concurrently (or by an attempt whose answer was lost).
                    let again = forge.open_pulls(dest.branch)?;
                    let found = again.into_iter().find(|p| p.head.name == name).ok_or_else(|| {
                        Error::MissingPull {
                            provider: forge.provider(),
                            repo: forge.full_name(),
                            head: name.clone(),
                            base: dest.branch.to_owned(),
                        }
                    })?;
                    (found, false)
                }
            }
        }
    };
    let labelled = pull.labels.iter().any(|l| l.name == PROMOTED_LABEL);
    if promoted && !labelled {
        forge.add_label(pull.number, PROMOTED_LABEL)?;
    } else if !promoted && labelled {
        forge.remove_label(pull.number, PROMOTED_LABEL)?;
    }
    // Supersede only older pull requests of the scheduler: if two runs opened one each at
    // the same time, the newer survives and nothing is closed twice.
    let older: Vec<&PullRequest> = own.into_iter().filter(|p| p.number < pull.number).collect();
    let closed = close_pulls(ctx, repo, forge.as_ref(), &older)?;
    Ok(Delivery::PullRequest {
        number: pull.number,
        url: pull.html_url.clone().unwrap_or_default(),
        branch: name,
        commit,
        created,
        promoted,
        changes,
        closed,
    })
}

fn open_pulls(
    ctx: &Context<'_>,
    dest: &Destination<'_>,
) -> Result<(Box<dyn Forge>, Vec<PullRequest>), Error> {
    let forge = ctx.forge(dest.url, dest.providers)?;
    let open = forge.open_pulls(dest.branch)?;
    Ok((forge, open))
}

fn prepare_branch(
    ctx: &Context<'_>,
    repo: &Repo,
    dest: &Destination<'_>,
    content: &Hashed<'_>,
    own_prefix: &str,
    about: Option<&Provenance>,
) -> Result<Prepared, Error> {
    repo.fetch_branches(ctx.transport, &[dest.branch], &[own_prefix])?;
    let head = repo.branch(dest.branch)?.ok_or_else(|| Error::NoBaseBranch {
        repo: dest.url.redacted(),
        branch: dest.branch.to_owned(),
    })?;
    let base = repo.tree_of(head)?;
    let existing = repo.branches_under(own_prefix)?;
    repo.staging(|s| {
        let written = s.write_content(Some(base), content)?;
        let tree = written.tree;
        let changes = Changes::of(&written);
        if tree == base {
            return Ok(Prepared::UpToDate(Some(head)));
        }
        if ctx.settings.dry_run {
            return Ok(Prepared::DryRun(changes));
        }
        let name = format!("{own_prefix}{}", &tree.to_string()[..12]);
        let commit = match existing.get(&name) {
            Some(&commit) => {
                if s.tree_of(commit)? != tree {
                    return Err(Error::BranchModified {
                        repo: dest.url.redacted(),
                        branch: name,
                    });
                }
                commit
            }
            None => {
                let commit = s.commit(
                    tree,
                    Some(head),
                    &ctx.settings.author,
                    &message(ctx, about, &changes),
                )?;
                s.push(
                    ctx.transport,
                    &[RefUpdate {
                        branch: name.clone(),
                        target: Some(commit),
                    }],
                )?;
                commit
            }
        };
        Ok(Prepared::Branch {
            name,
            commit,
            changes,
            promoted: written.promoted,
        })
    })
}

/// Whether `pull` is one of the scheduler's own: into `base`, from a branch under the
/// scheduler's prefix of the same repository (a fork's branch of the same name is not).
pub fn is_own_pull(pull: &PullRequest, own_prefix: &str, base: &str, full_name: &str) -> bool {
    pull.base.name == base
        && pull.head.name.starts_with(own_prefix)
        && pull
            .head
            .repo
            .as_ref()
            .is_some_and(|r| r.full_name.eq_ignore_ascii_case(full_name))
}

/// Closes `pulls` and deletes their branches (best effort for the branches).
fn close_pulls(
    ctx: &Context<'_>,
    repo: &Repo,
    forge: &dyn Forge,
    pulls: &[&PullRequest],
) -> Result<Vec<u64>, Error> {
    let mut closed = Vec::new();
    for pull in pulls {
        forge.close_pull(pull.number)?;
        closed.push(pull.number);
        let deleted = repo.staging(|s| -> Result<(), repo::Error> {
            s.push(
                ctx.transport,
                &[RefUpdate {
                    branch: pull.head.name.clone(),
                    target: None,
                }],
            )
            .map_err(repo::Error::from)
        });
        if let Err(e) = deleted {
            tracing::warn!(branch = %pull.head.name, error = %e, "cannot delete the branch of a closed pull request");
        }
    }
    Ok(closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::{PullBranch, RepoRef};

    fn pull(number: u64, head: &str, base: &str, repo: Option<&str>) -> PullRequest {
        PullRequest {
            number,
            html_url: None,
            head: PullBranch {
                name: head.into(),
                sha: String::new(),
                repo: repo.map(|r| RepoRef { full_name: r.into() }),
            },
            base: PullBranch {
                name: base.into(),
                sha: String::new(),
                repo: None,
            },
            labels: vec![],
        }
    }

    #[test]
    fn recognises_only_its_own_pull_requests() {
        let own = |p: &PullRequest| is_own_pull(p, "kalypso/dev/", "dev", "contoso/gitops");
        assert!(own(&pull(
            1,
            "kalypso/dev/0123456789ab",
            "dev",
            Some("Contoso/GitOps")
        )));
        assert!(!own(&pull(
            2,
            "deployment/2024-05-23-10-00-00",
            "dev",
            Some("contoso/gitops")
        )));
        assert!(!own(&pull(
            3,
            "kalypso/dev/0123456789ab",
            "dev",
            Some("someone/gitops")
        )));
        assert!(!own(&pull(
            4,
            "kalypso/dev/0123456789ab",
            "stage",
            Some("contoso/gitops")
        )));
        assert!(!own(&pull(5, "kalypso/dev/0123456789ab", "dev", None)));
    }

    #[test]
    fn auto_mode_pushes_to_local_repositories() {
        let local = RepoUrl::parse("file:///tmp/gitops.git").unwrap();
        let remote = RepoUrl::parse("https://github.com/o/r").unwrap();
        assert_eq!(Mode::Auto.resolve(&local), Mode::Push);
        assert_eq!(Mode::Auto.resolve(&remote), Mode::Pr);
        assert_eq!(Mode::Pr.resolve(&local), Mode::Pr);
        assert_eq!("push".parse::<Mode>(), Ok(Mode::Push));
        assert!("force".parse::<Mode>().is_err());
    }
}
