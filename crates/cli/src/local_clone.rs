//! A control plane given as a local clone is read as it is, and the reader is told how that
//! differs from what was pushed.
//!
//! Someone editing the `dev` branch in their clone wants `plan`, `render` and `validate` to
//! see the edit before committing it: the checked-out branch is read from the working copy
//! when it has uncommitted changes, and every other branch from its local head (else its
//! remote-tracking one). Because that is not what CI or the daemon would read, each
//! difference is said once on standard error: uncommitted changes and unpushed commits are
//! used (a note), a branch behind its upstream as last fetched is a warning.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use git2::{BranchType, Repository, Status, StatusOptions};
use kalypso_core::source::{SOURCEIGNORE, SourceFile, SourceTree};

/// A non-bare local repository: the working copy of a control plane.
pub(crate) struct LocalClone {
    repo: Repository,
    workdir: PathBuf,
    /// Branches already described, so that each is described once.
    described: Vec<String>,
}

impl std::fmt::Debug for LocalClone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalClone")
            .field("workdir", &self.workdir)
            .finish()
    }
}

/// How a local branch differs from what others see.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BranchState {
    /// Files changed, added or deleted in the working copy (only for the checked-out branch).
    pub(crate) uncommitted: usize,
    /// The upstream branch compared with (`origin/dev`), if any.
    pub(crate) upstream: Option<String>,
    /// Commits on the local branch that the upstream lacks.
    pub(crate) ahead: usize,
    /// Commits on the upstream that the local branch lacks.
    pub(crate) behind: usize,
}

impl LocalClone {
    /// The clone at `path`, if it is a git working copy.
    pub(crate) fn open(path: &Path) -> Option<LocalClone> {
        let repo = Repository::open(path).ok()?;
        let workdir = repo.workdir()?.to_owned();
        Some(LocalClone {
            repo,
            workdir,
            described: Vec::new(),
        })
    }

    /// The root of the working copy.
    pub(crate) fn workdir(&self) -> &Path {
        &self.workdir
    }

    /// The branch checked out, if HEAD is on a branch.
    fn head_branch(&self) -> Option<String> {
        let head = self.repo.head().ok()?;
        if !head.is_branch() {
            return None;
        }
        head.shorthand().ok().map(str::to_owned)
    }

    /// Whether `branch` is checked out and its working copy is what must be read.
    pub(crate) fn is_checked_out(&self, branch: &str) -> bool {
        self.head_branch().as_deref() == Some(branch)
    }

    /// The working copy's changes against its index and HEAD, untracked files included (in
    /// untracked folders too), ignored files left out.
    fn statuses(&self) -> Result<git2::Statuses<'_>> {
        let mut options = StatusOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false);
        self.repo
            .statuses(Some(&mut options))
            .with_context(|| format!("cannot read the status of {}", self.workdir.display()))
    }

    /// How `branch` differs from its upstream and, when checked out, from its last commit.
    pub(crate) fn state(&self, branch: &str) -> Result<BranchState> {
        let mut state = BranchState::default();
        if self.is_checked_out(branch) {
            let statuses = self.statuses()?;
            state.uncommitted = statuses
                .iter()
                .filter(|s| !s.status().is_empty() && s.status() != Status::IGNORED)
                .count();
        }
        let Ok(local) = self.repo.find_branch(branch, BranchType::Local) else {
            return Ok(state);
        };
        let upstream = match local.upstream() {
            Ok(upstream) => Some(upstream),
            Err(_) => self
                .repo
                .find_branch(&format!("origin/{branch}"), BranchType::Remote)
                .ok(),
        };
        if let Some(upstream) = upstream
            && let (Some(ours), Some(theirs)) = (local.get().target(), upstream.get().target())
        {
            let (ahead, behind) = self
                .repo
                .graph_ahead_behind(ours, theirs)
                .with_context(|| format!("cannot compare {branch} with its upstream"))?;
            state.upstream = upstream.name().ok().flatten().map(str::to_owned);
            (state.ahead, state.behind) = (ahead, behind);
        }
        Ok(state)
    }

    /// What to say about `branch` (notes and warnings, one per line), the first time only.
    pub(crate) fn describe(&mut self, branch: &str) -> Result<Vec<String>> {
        if self.described.iter().any(|b| b == branch) {
            return Ok(Vec::new());
        }
        self.described.push(branch.to_owned());
        Ok(describe(branch, &self.state(branch)?, &self.workdir))
    }

    /// The working copy's folder `path` (relative to the clone's root) as branch `label`
    /// would hold it after `git add -A`: the files git reads (YAML and `.sourceignore`),
    /// tracked or untracked, ignored ones left out, deleted ones gone.
    pub(crate) fn read(&self, path: &str, label: &str) -> Result<SourceTree> {
        // `.`, `./envs/dev/`, `envs//dev`: the folder as git names it.
        let prefix = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect::<Vec<_>>()
            .join("/");
        let mut paths = BTreeSet::new();
        let index = self
            .repo
            .index()
            .with_context(|| format!("cannot read the index of {}", self.workdir.display()))?;
        paths.extend(
            index
                .iter()
                .map(|e| String::from_utf8_lossy(&e.path).into_owned()),
        );
        let statuses = self.statuses()?;
        paths.extend(
            statuses
                .iter()
                .filter(|s| s.status().contains(Status::WT_NEW))
                .filter_map(|s| s.path().ok().map(str::to_owned)),
        );
        let mut files = Vec::new();
        for in_repo in paths {
            let relative = if prefix.is_empty() {
                in_repo.as_str()
            } else {
                match in_repo
                    .strip_prefix(prefix.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                {
                    Some(relative) => relative,
                    None => continue,
                }
            };
            let name = relative.rsplit('/').next().unwrap_or_default();
            if !(relative.ends_with(".yaml") || relative.ends_with(".yml") || name == SOURCEIGNORE) {
                continue;
            }
            let file = self.workdir.join(&in_repo);
            match std::fs::read(&file) {
                Ok(bytes) => files.push(SourceFile::new(relative.to_owned(), bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
            }
        }
        Ok(SourceTree::new(label, files))
    }
}

/// The lines that say how `branch` of the clone at `workdir` differs from what was pushed.
pub(crate) fn describe(branch: &str, state: &BranchState, workdir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    if state.uncommitted > 0 {
        lines.push(format!(
            "note: using uncommitted changes in {branch} ({} changed file(s) in {})",
            state.uncommitted,
            workdir.display()
        ));
    }
    if let Some(upstream) = &state.upstream {
        if state.ahead > 0 {
            lines.push(format!(
                "note: using unpushed commits in {branch} ({} commit(s) ahead of {upstream})",
                state.ahead
            ));
        }
        if state.behind > 0 {
            lines.push(format!(
                "warning: {branch} is {} commit(s) behind {upstream} as last fetched; what was pushed since is not \
                 used (git pull in {} to update)",
                state.behind,
                workdir.display()
            ));
        }
    }
    lines
}
