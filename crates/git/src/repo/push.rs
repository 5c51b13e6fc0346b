//! Pushing: a commit's objects sent and the branch moved, never forced; or, for a repository
//! read in place, its local branch moved with a compare-and-swap.

use std::cell::RefCell;

use git2::{ErrorCode, Oid, PushOptions};

use super::{GitCause, GitFailure, StageError, Staging, TRACKING, Transport, auto_proxy, git_error};
use crate::local_push::Failure;
use crate::redact::redact;

/// Pushing failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// libgit2 could not push or update the mirror.
    #[error(transparent)]
    Git(#[from] GitFailure),
    /// The objects to push could not be stored first.
    #[error(transparent)]
    Store(#[from] StageError),
    /// The remote refused a reference update (someone else pushed first).
    #[error("{repo} rejected the update of {reference}: {message}")]
    Rejected {
        /// The repository, redacted.
        repo: String,
        /// The reference.
        reference: String,
        /// The server's reason.
        message: String,
    },
    /// The remote could not update a branch because its lock file exists: another process
    /// is writing the branch, or one was interrupted while writing it.
    #[error("{repo} could not update {detail}")]
    Locked {
        /// The repository, redacted.
        repo: String,
        /// The reference, the remote's message, and for a repository on this machine which
        /// file to remove once no process writes.
        detail: String,
        /// Whether the repository is on this machine (the lock then stays until removed).
        local: bool,
    },
}

impl PushError {
    /// Whether retrying may help: network trouble, or a remote server's lock (another push
    /// under way; a local lock stays).
    pub fn is_transient(&self) -> bool {
        match self {
            PushError::Git(g) => g.is_transient(),
            PushError::Store(e) => e.is_transient(),
            PushError::Locked { local, .. } => !local,
            PushError::Rejected { .. } => false,
        }
    }
}

/// One reference update of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUpdate {
    /// The branch (without `refs/heads/`).
    pub branch: String,
    /// The new head, or `None` to delete the branch.
    pub target: Option<Oid>,
}

impl Staging<'_> {
    /// Pushes `updates` without forcing: a branch that moved since it was fetched is
    /// rejected ([`PushError::Rejected`]) and the caller starts again from a fresh fetch.
    /// Transient network failures are retried (pushing the same update again is harmless).
    /// On success the mirror's branches are moved too. The new objects are stored in the
    /// mirror first, whether the push succeeds or not.
    pub fn push(&self, transport: &Transport<'_>, updates: &[RefUpdate]) -> Result<(), PushError> {
        let span = tracing::debug_span!("push", repo = %self.url);
        let _enter = span.enter();
        // The new objects are stored before any reference of the mirror names them: a
        // process killed from here on leaves a usable mirror (objects no reference names at
        // worst), never a reference to an object it does not have.
        self.persist()?;
        if !self.pushed_locally(updates)? {
            self.push_with_libgit2(transport, updates)?;
        }
        for update in updates {
            let tracking = format!("{TRACKING}{}", update.branch);
            match update.target {
                Some(target) => {
                    self.git
                        .reference(&tracking, target, true, "kalypso push")
                        .map_err(git_error("cannot update the cache of", self.url))?;
                }
                None => {
                    if let Ok(mut r) = self.git.find_reference(&tracking) {
                        r.delete()
                            .map_err(git_error("cannot update the cache of", self.url))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Pushes to a bare repository on this machine by writing the new objects into it and
    /// moving its branches with a compare-and-swap ([`crate::local_push`]). `Ok(false)`:
    /// not such a push (a network remote, a deletion, a merge...), nothing done.
    fn pushed_locally(&self, updates: &[RefUpdate]) -> Result<bool, PushError> {
        let Some(path) = self.url.local_path().filter(|_| !self.in_place) else {
            return Ok(false);
        };
        let targets: Option<Vec<(&str, Oid)>> = updates
            .iter()
            .map(|u| u.target.map(|t| (u.branch.as_str(), t)))
            .collect();
        let Some(targets) = targets else {
            return Ok(false);
        };
        match crate::local_push::push(self.git, path, &targets, &self.built.borrow()) {
            Ok(pushed) => Ok(pushed),
            Err(Failure::Refused { reference, message }) => Err(PushError::Rejected {
                repo: self.url.redacted(),
                reference,
                message: redact(&message),
            }),
            Err(Failure::Locked { reference, message }) => Err(self.locked(&reference, &redact(&message))),
            Err(Failure::Git(e)) => Err(git_error("cannot push to", self.url)(e).into()),
        }
    }

    /// The error of a push that found `reference` locked.
    fn locked(&self, reference: &str, message: &str) -> PushError {
        PushError::Locked {
            repo: self.url.redacted(),
            detail: format!(
                "{reference}: it is locked ({message}); another process is writing it, or one was \
                 interrupted while writing it{}",
                match self.url.local_path() {
                    Some(path) => format!(
                        " (if no process is, remove {}.lock)",
                        path.join(reference).display()
                    ),
                    None => String::new(),
                }
            ),
            local: self.url.is_local(),
        }
    }

    /// Pushes through libgit2 (any transport), with retries of transient failures.
    fn push_with_libgit2(&self, transport: &Transport<'_>, updates: &[RefUpdate]) -> Result<(), PushError> {
        let mut refspecs = Vec::new();
        let mut temp_refs = Vec::new();
        for (i, update) in updates.iter().enumerate() {
            match update.target {
                Some(target) => {
                    let temp = format!("refs/kalypso/push/{i}");
                    self.git
                        .reference(&temp, target, true, "kalypso push")
                        .map_err(git_error("cannot prepare a push to", self.url))?;
                    refspecs.push(format!("{temp}:refs/heads/{}", update.branch));
                    temp_refs.push(temp);
                }
                None => refspecs.push(format!(":refs/heads/{}", update.branch)),
            }
        }
        let result = transport.run(
            &|| format!("push to {}", self.url),
            PushError::is_transient,
            || {
                let mut remote = self
                    .git
                    .remote_anonymous(self.url.for_git())
                    .map_err(git_error("cannot push to", self.url))?;
                let rejected: RefCell<Vec<(String, String)>> = RefCell::new(Vec::new());
                let mut callbacks = transport.credentials.callbacks();
                callbacks.push_update_reference(|reference, status| {
                    if let Some(message) = status {
                        rejected
                            .borrow_mut()
                            .push((reference.to_owned(), redact(message)));
                    }
                    Ok(())
                });
                let mut options = PushOptions::new();
                options.remote_callbacks(callbacks).proxy_options(auto_proxy());
                let pushed = remote.push(&refspecs, Some(&mut options));
                drop(options);
                match pushed {
                    Ok(()) => match rejected.into_inner().into_iter().next() {
                        Some((reference, message)) if message.contains("lock") => {
                            Err(self.locked(&reference, &message))
                        }
                        Some((reference, message)) => Err(PushError::Rejected {
                            repo: self.url.redacted(),
                            reference,
                            message,
                        }),
                        None => Ok(()),
                    },
                    Err(e) => {
                        let cause = GitCause::from(e);
                        if cause.is_rejection() {
                            Err(PushError::Rejected {
                                repo: self.url.redacted(),
                                reference: updates
                                    .iter()
                                    .map(|u| u.branch.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", "),
                                message: cause.message,
                            })
                        } else {
                            Err(PushError::Git(GitFailure {
                                action: "cannot push to".to_owned(),
                                repo: self.url.redacted(),
                                cause,
                            }))
                        }
                    }
                }
            },
        );
        for temp in temp_refs {
            if let Ok(mut r) = self.git.find_reference(&temp) {
                let _ = r.delete();
            }
        }
        result
    }

    /// Moves local branch `branch` from `expected` to `target` (a repository read in place),
    /// persisting the objects first. Fails with [`PushError::Rejected`] if the branch moved
    /// meanwhile. A branch that only exists as `refs/remotes/origin/<branch>` is created.
    pub fn update_local_branch(&self, branch: &str, target: Oid, expected: Oid) -> Result<(), PushError> {
        self.persist()?;
        let name = format!("refs/heads/{branch}");
        let message = "kalypso promote";
        let result = match self.git.find_reference(&name) {
            Ok(_) => self
                .git
                .reference_matching(&name, target, true, expected, message),
            Err(_) => self.git.reference(&name, target, false, message),
        };
        match result {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.code(),
                    ErrorCode::Modified | ErrorCode::Exists | ErrorCode::Locked
                ) =>
            {
                Err(PushError::Rejected {
                    repo: self.url.redacted(),
                    reference: name,
                    message: redact(e.message()),
                })
            }
            Err(e) => Err(git_error(format!("cannot update branch {branch} of"), self.url)(e).into()),
        }
    }
}
