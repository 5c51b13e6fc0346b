//! Fetching into a mirror, and listing a remote's branches without fetching.

use std::collections::BTreeMap;

use git2::{AutotagOption, FetchOptions, FetchPrune, Oid, Repository};

use super::{GitFailure, Repo, TRACKING, Transport, auto_proxy, git_error};
use crate::auth::Credentials;
use crate::url::RepoUrl;

/// Fetching failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// libgit2 could not fetch, list or update the mirror's copies of the branches.
    #[error(transparent)]
    Git(#[from] GitFailure),
    /// A listing of the remote's branches did not finish.
    #[error("the branch listing not found in {repo}")]
    Unlisted {
        /// The repository, redacted.
        repo: String,
    },
}

impl FetchError {
    /// Whether retrying may help (network trouble).
    pub fn is_transient(&self) -> bool {
        matches!(self, FetchError::Git(g) if g.is_transient())
    }
}

impl Repo {
    /// Fetches every branch (pruning deleted ones). Nothing to do in place.
    pub fn fetch_all(&self, transport: &Transport<'_>) -> Result<(), FetchError> {
        self.fetch(transport, &[format!("+refs/heads/*:{TRACKING}*")])
    }

    /// Fetches `branches`, and every branch under each of `prefixes` (e.g. `kalypso/dev/`),
    /// pruning those that no longer exist. Afterwards [`Repo::branch`] answers `None` for a
    /// branch the remote does not have.
    pub fn fetch_branches(
        &self,
        transport: &Transport<'_>,
        branches: &[&str],
        prefixes: &[&str],
    ) -> Result<(), FetchError> {
        let mut refspecs: Vec<String> = branches
            .iter()
            .map(|b| format!("+refs/heads/{b}:{TRACKING}{b}"))
            .collect();
        refspecs.extend(
            prefixes
                .iter()
                .map(|p| format!("+refs/heads/{p}*:{TRACKING}{p}*")),
        );
        self.fetch(transport, &refspecs)
    }

    fn fetch(&self, transport: &Transport<'_>, refspecs: &[String]) -> Result<(), FetchError> {
        if self.in_place {
            return Ok(());
        }
        let span = tracing::debug_span!("fetch", repo = %self.url);
        let _enter = span.enter();
        // The mirror's copies of the branches stay in place while fetching: they are what
        // the negotiation offers as already here (without them the remote sends the whole
        // history again). A branch fetched by name that the remote deleted is pruned: libgit2
        // prunes the destination of an exact refspec whose source the remote does not list.
        // A copy whose commit or tree cannot be read (garbled packs) would be offered as had
        // and never sent again: it goes first, and its branch is fetched whole.
        self.drop_unreadable_branches()?;
        transport.run(
            &|| format!("fetch {}", self.url),
            FetchError::is_transient,
            || {
                let mut remote = self
                    .git
                    .remote_anonymous(self.url.for_git())
                    .map_err(git_error("cannot fetch", &self.url))?;
                let mut options = FetchOptions::new();
                options
                    .remote_callbacks(transport.credentials.callbacks())
                    .proxy_options(auto_proxy())
                    .prune(FetchPrune::On)
                    .download_tags(AutotagOption::None)
                    .update_fetchhead(false);
                Ok(remote
                    .fetch(refspecs, Some(&mut options), None)
                    .map_err(git_error("cannot fetch", &self.url))?)
            },
        )
    }

    /// Deletes the mirror's branches whose commit or root tree cannot be read.
    fn drop_unreadable_branches(&self) -> Result<(), FetchError> {
        let fail = || git_error("cannot update the cache of", &self.url);
        let glob = format!("{TRACKING}*");
        let mut unreadable = Vec::new();
        for r in self.git.references_glob(&glob).map_err(fail())? {
            let r = r.map_err(fail())?;
            let readable = r.peel_to_commit().and_then(|c| c.tree().map(|_| ())).is_ok();
            if !readable && let Ok(name) = r.name() {
                unreadable.push(name.to_owned());
            }
        }
        for name in unreadable {
            tracing::warn!(repo = %self.url, reference = name, "the cache's copy of a branch cannot be read; fetching it whole");
            if let Ok(mut r) = self.git.find_reference(&name) {
                r.delete().map_err(fail())?;
            }
        }
        Ok(())
    }

    /// Whether the mirror's copy of every branch in `heads` is at the head the remote
    /// listed (so fetching them would bring nothing). Always true in place.
    pub fn is_at(&self, heads: &BTreeMap<String, Oid>, branches: &[&str]) -> bool {
        if self.in_place {
            return true;
        }
        branches.iter().all(|b| {
            let local = self.git.refname_to_id(&format!("{TRACKING}{b}")).ok();
            local == heads.get(*b).copied()
        })
    }

    /// Whether the mirror holds exactly the branches `heads` lists, at those heads.
    pub fn mirrors(&self, heads: &BTreeMap<String, Oid>) -> bool {
        if self.in_place {
            return true;
        }
        self.branches_under("").is_ok_and(|local| &local == heads)
    }
}

/// Branch names (without `refs/heads/`) and their heads.
pub type Heads = BTreeMap<String, Oid>;

/// The branches of each repository in `urls` with their heads, as `git ls-remote --heads`
/// shows them: one connection per remote and no object transferred, `parallel` remotes at a
/// time. A plain local path is read in place (its local branches over its remote-tracking
/// ones, as [`Repo::branch`] reads them). One attempt each: a failure is returned for that
/// repository alone.
pub fn list_heads(
    urls: &[RepoUrl],
    credentials: &Credentials,
    parallel: usize,
) -> Vec<Result<Heads, FetchError>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Heads, FetchError>>>> =
        urls.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let workers = parallel.clamp(1, urls.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(url) = urls.get(i) else { break };
                    let listed = list_one(url, credentials);
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(listed);
                    }
                }
            });
        }
    });
    results
        .into_iter()
        .zip(urls)
        .map(|(slot, url)| {
            slot.into_inner()
                .ok()
                .flatten()
                .unwrap_or_else(|| Err(FetchError::Unlisted { repo: url.redacted() }))
        })
        .collect()
}

fn list_one(url: &RepoUrl, credentials: &Credentials) -> Result<Heads, FetchError> {
    let fail = || git_error("cannot list the branches of", url);
    let mut heads = BTreeMap::new();
    if let Some(path) = url.plain_path() {
        let git = Repository::open(path).map_err(fail())?;
        for (glob, strip) in [
            (format!("{TRACKING}*"), TRACKING),
            ("refs/heads/*".to_owned(), "refs/heads/"),
        ] {
            for r in git.references_glob(&glob).map_err(fail())? {
                let r = r.map_err(fail())?;
                if let (Ok(name), Ok(commit)) = (r.name(), r.peel_to_commit()) {
                    heads.insert(name.trim_start_matches(strip).to_owned(), commit.id());
                }
            }
        }
        return Ok(heads);
    }
    let mut remote = git2::Remote::create_detached(url.for_git()).map_err(fail())?;
    let connection = remote
        .connect_auth(
            git2::Direction::Fetch,
            Some(credentials.callbacks()),
            Some(auto_proxy()),
        )
        .map_err(fail())?;
    for head in connection.list().map_err(fail())? {
        if let Some(branch) = head.name().strip_prefix("refs/heads/") {
            heads.insert(branch.to_owned(), head.oid());
        }
    }
    Ok(heads)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::repo::Cache;
    use crate::retry::RetryPolicy;

    #[test]
    fn a_missing_local_repository_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let url = RepoUrl::parse(&format!("file://{}/missing.git", dir.path().display())).unwrap();
        let repo = Repo::open_mirror(&url, &Cache::new(dir.path().join("cache"))).unwrap();
        let credentials = Credentials::default();
        let retry = RetryPolicy {
            attempts: 5,
            initial_backoff: std::time::Duration::from_secs(30),
            max_backoff: std::time::Duration::from_secs(30),
        };
        let error = repo.fetch_all(&Transport::new(&credentials, retry)).unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert!(error.to_string().contains("missing.git"), "{error}");
    }

    /// Objects in the packs of the repository at `git_dir` (a mirror keeps no loose ones).
    fn packed_objects(git_dir: &Path) -> usize {
        let count = kalypso_testkit::git(git_dir, &["count-objects", "-v"]);
        count
            .lines()
            .find_map(|l| l.strip_prefix("in-pack: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no in-pack count in {count}"))
    }

    #[test]
    fn a_moved_branch_fetches_only_what_is_new_and_a_deleted_one_is_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let (work, remote) = (dir.path().join("work"), dir.path().join("remote.git"));
        std::fs::create_dir_all(work.join("files")).unwrap();
        kalypso_testkit::git(dir.path(), &["init", "-q", "--bare", "remote.git"]);
        kalypso_testkit::git(dir.path(), &["init", "-q", "work"]);
        for i in 0..40 {
            std::fs::write(work.join(format!("files/{i}.yaml")), format!("n: {i}\n")).unwrap();
        }
        let remote_path = remote.display().to_string();
        for args in [
            &["add", "-A"][..],
            &["commit", "-qm", "first"],
            &[
                "push",
                "-q",
                &remote_path,
                "HEAD:refs/heads/dev",
                "HEAD:refs/heads/gone",
            ],
        ] {
            kalypso_testkit::git(&work, args);
        }
        let url = RepoUrl::from_path(&remote);
        let cache = Cache::new(dir.path().join("cache"));
        let repo = Repo::open_mirror(&url, &cache).unwrap();
        let credentials = Credentials::default();
        let transport = Transport::new(&credentials, RetryPolicy::default());
        repo.fetch_branches(&transport, &["dev", "gone"], &[]).unwrap();
        let mirror = dir.path().join("cache").join(url.cache_name());
        let first = packed_objects(&mirror);
        assert!(first >= 42, "the first fetch brings every file: {first}");

        // One file changes: the next fetch brings its blob, two trees and the commit, not
        // the branch's whole history again (the mirror's copy is offered as what it has).
        std::fs::write(work.join("files/7.yaml"), "n: changed\n").unwrap();
        kalypso_testkit::git(&work, &["commit", "-qam", "second"]);
        kalypso_testkit::git(&work, &["push", "-q", &remote_path, "HEAD:refs/heads/dev"]);
        kalypso_testkit::git(&remote, &["branch", "-D", "gone"]);
        repo.fetch_branches(&transport, &["dev", "gone"], &[]).unwrap();
        let new = packed_objects(&mirror) - first;
        assert_eq!(new, 4, "a commit, two trees and a blob");
        let head = kalypso_testkit::git(&remote, &["rev-parse", "dev"]);
        assert_eq!(
            repo.branch("dev").unwrap().map(|o| o.to_string()),
            Some(head.trim().to_owned())
        );
        assert_eq!(
            repo.branch("gone").unwrap(),
            None,
            "a branch the remote deleted is gone"
        );
    }
}
