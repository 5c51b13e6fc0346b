//! Delivery of an environment's content to its GitOps repositories, debounced.
//!
//! The scheduler controller decides *what* the tree should hold; a [`Publisher`] writes it
//! (the git implementation in [`crate::git`] uses `kalypso-git`, the same code as `kalypso
//! serve`: pull request or push). Between the two sits the [`Debouncer`]: like the original,
//! which waited until its `ReadyToPR` condition was 3 s old, new content is delivered only
//! after it has stayed the same for the debounce period, so that a burst of changes (Flux
//! applying a commit object by object) gives one commit instead of one per object.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::BoxFuture;
use kalypso_api::GitOpsRepoSpec;
use kalypso_core::placement::CurrentAssignment;
use kalypso_core::run::Failure;
use kalypso_core::tree::RepoContent;
use tokio::time::Instant;

/// One delivery: the content of `environment` for one GitOpsRepo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublishRequest {
    /// The environment (namespace).
    pub environment: String,
    /// The GitOpsRepo object's name.
    pub gitops_repo: String,
    /// Where to deliver.
    pub spec: GitOpsRepoSpec,
    /// What to deliver.
    pub content: RepoContent,
}

/// What a delivery did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    /// The branch already held this tree: nothing was written.
    UpToDate,
    /// A commit was pushed onto the branch.
    Pushed {
        /// The new commit.
        commit: String,
    },
    /// A pull request holds the change.
    PullRequest {
        /// Its page.
        url: String,
        /// Its head commit.
        commit: String,
    },
}

impl Published {
    /// The `Ready` reason the GitOpsRepo gets (`PRCreated` as in the original).
    pub fn reason(&self) -> &'static str {
        match self {
            Published::UpToDate => "UpToDate",
            Published::Pushed { .. } => "Pushed",
            Published::PullRequest { .. } => "PRCreated",
        }
    }

    /// A one-line description.
    pub fn describe(&self) -> String {
        match self {
            Published::UpToDate => "the GitOps branch already holds this content".to_owned(),
            Published::Pushed { commit } => format!("pushed commit {commit}"),
            Published::PullRequest { url, commit } => format!("pull request {url} (commit {commit})"),
        }
    }
}

/// Why a delivery failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot deliver environment {environment} to GitOpsRepo {gitops_repo}: {message}")]
pub struct PublishError {
    /// The environment.
    pub environment: String,
    /// The GitOpsRepo.
    pub gitops_repo: String,
    /// What went wrong (credentials already redacted).
    pub message: String,
    /// Whether retrying later may help (network trouble, a busy branch).
    pub transient: bool,
}

/// The failures of an environment, to be reported where the original reports them: as
/// GitHub issues in the (first) GitOps repository, one per failing assignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportRequest {
    /// The environment (namespace).
    pub environment: String,
    /// The GitOpsRepo object's name.
    pub gitops_repo: String,
    /// Its repository.
    pub spec: GitOpsRepoSpec,
    /// The failures (empty: close the issues of earlier failures).
    pub failures: Vec<Failure>,
}

/// Writes content to a GitOps repository.
pub trait Publisher: Send + Sync + 'static {
    /// Delivers `request`. Blocking work must not run on the caller's task.
    fn publish(&self, request: PublishRequest) -> BoxFuture<'static, Result<Published, PublishError>>;

    /// Where the GitOps branch of `spec` has each deployment target (what `Steady` placement
    /// keeps before the operator has run an environment); `None` when it cannot tell.
    fn placement(&self, spec: &GitOpsRepoSpec) -> BoxFuture<'static, Option<CurrentAssignment>> {
        let _ = spec;
        Box::pin(async { None })
    }

    /// Opens, updates and closes the issues of `request.environment` so that they match
    /// `request.failures`. Publishers without issues do nothing.
    fn report(&self, request: ReportRequest) -> BoxFuture<'static, Result<(), PublishError>> {
        let _ = request;
        Box::pin(async { Ok(()) })
    }
}

/// A fingerprint of a set of failures, to report each set once.
pub fn failures_fingerprint(failures: &[Failure]) -> String {
    let mut h = kalypso_core::fingerprint::Hasher::new();
    for f in failures {
        match &f.assignment {
            Some((target, cluster_type)) => h.strs([target.as_str(), cluster_type.as_str()]),
            None => h.strs([]),
        };
        h.str(&f.message);
    }
    format!("{:032x}", h.finish())
}

/// What to do with content whose hash is `hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It was already delivered.
    UpToDate,
    /// It is new or still changing: check again after this long.
    Wait(Duration),
    /// It has been stable for the debounce period: deliver now.
    Deliver,
}

/// Per GitOpsRepo, the content waiting to be delivered and since when it is unchanged.
/// Kept in memory: a new leader simply waits one debounce period again.
#[derive(Debug)]
pub struct Debouncer {
    period: Duration,
    pending: HashMap<(String, String), (String, Instant)>,
}

impl Debouncer {
    /// A debouncer with `period` of quiet before delivery (zero: deliver at once).
    pub fn new(period: Duration) -> Debouncer {
        Debouncer {
            period,
            pending: HashMap::new(),
        }
    }

    /// Decides for GitOpsRepo `key` (namespace, name) with content `hash`, given the hash
    /// last delivered (from its status) and the time now.
    pub fn decide(
        &mut self,
        key: (String, String),
        hash: &str,
        delivered: Option<&str>,
        now: Instant,
    ) -> Decision {
        if delivered == Some(hash) {
            self.pending.remove(&key);
            return Decision::UpToDate;
        }
        let since = match self.pending.get(&key) {
            Some((pending, since)) if pending == hash => *since,
            _ => {
                self.pending.insert(key, (hash.to_owned(), now));
                now
            }
        };
        let quiet = now.saturating_duration_since(since);
        if quiet >= self.period {
            Decision::Deliver
        } else {
            Decision::Wait(self.period - quiet)
        }
    }

    /// Forgets `key` (delivered, deleted, or blocked: the next content starts afresh).
    pub fn forget(&mut self, key: &(String, String)) {
        self.pending.remove(key);
    }
}

/// A publisher that records requests and answers from a script; for tests and for
/// `--dry-run`-like use.
#[derive(Debug, Default)]
pub struct Recorder {
    requests: std::sync::Mutex<Vec<PublishRequest>>,
    reports: std::sync::Mutex<Vec<ReportRequest>>,
    fail: Option<String>,
}

impl Recorder {
    /// A recorder that answers every request with a push.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// A recorder that fails every request with `message` (transient).
    pub fn failing(message: &str) -> Recorder {
        Recorder {
            requests: std::sync::Mutex::default(),
            reports: std::sync::Mutex::default(),
            fail: Some(message.to_owned()),
        }
    }

    /// The reports seen so far.
    pub fn reports(&self) -> Vec<ReportRequest> {
        self.reports.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<PublishRequest> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Publisher for Recorder {
    fn publish(&self, request: PublishRequest) -> BoxFuture<'static, Result<Published, PublishError>> {
        let result = match &self.fail {
            Some(message) => Err(PublishError {
                environment: request.environment.clone(),
                gitops_repo: request.gitops_repo.clone(),
                message: message.clone(),
                transient: true,
            }),
            None => Ok(Published::Pushed {
                commit: format!("commit-{}", self.requests().len() + 1),
            }),
        };
        if let Ok(mut r) = self.requests.lock() {
            r.push(request);
        }
        Box::pin(async move { result })
    }

    fn report(&self, request: ReportRequest) -> BoxFuture<'static, Result<(), PublishError>> {
        if let Ok(mut r) = self.reports.lock() {
            r.push(request);
        }
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (String, String) {
        ("dev".into(), "dev".into())
    }

    #[test]
    fn a_burst_of_changes_gives_one_delivery_after_the_quiet_period() {
        let mut d = Debouncer::new(Duration::from_secs(3));
        let t0 = Instant::now();
        assert_eq!(
            d.decide(key(), "h1", None, t0),
            Decision::Wait(Duration::from_secs(3))
        );
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(
            d.decide(key(), "h2", None, t1),
            Decision::Wait(Duration::from_secs(3))
        );
        let t2 = t1 + Duration::from_secs(2);
        assert_eq!(
            d.decide(key(), "h2", None, t2),
            Decision::Wait(Duration::from_secs(1))
        );
        let t3 = t1 + Duration::from_secs(3);
        assert_eq!(d.decide(key(), "h2", None, t3), Decision::Deliver);
        // Once delivered, the same hash is up to date.
        assert_eq!(d.decide(key(), "h2", Some("h2"), t3), Decision::UpToDate);
        assert!(d.pending.is_empty());
    }

    #[test]
    fn zero_period_delivers_at_once_and_keys_are_separate() {
        let mut d = Debouncer::new(Duration::ZERO);
        let t = Instant::now();
        assert_eq!(d.decide(key(), "h", Some("old"), t), Decision::Deliver);
        let mut d = Debouncer::new(Duration::from_secs(1));
        d.decide(key(), "h", None, t);
        assert_eq!(
            d.decide(
                ("prod".into(), "prod".into()),
                "h",
                None,
                t + Duration::from_secs(5)
            ),
            Decision::Wait(Duration::from_secs(1))
        );
        d.forget(&key());
        assert_eq!(
            d.decide(key(), "h", None, t + Duration::from_secs(5)),
            Decision::Wait(Duration::from_secs(1))
        );
    }
}
