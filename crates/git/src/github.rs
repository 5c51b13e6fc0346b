//! The GitHub REST calls delivery needs: pull requests, labels and issues of the GitOps
//! repository, through `octocrab` (its base URL is configurable, for GitHub Enterprise and
//! for the loopback stand-in the tests use).
//!
//! Only the fields kalypso reads are modelled, so that the client does not depend on the
//! full shape of GitHub's answers. Calls are blocking (the delivery logic is sequential and
//! runs next to libgit2, which is blocking too): each call runs on a tokio runtime through
//! its [`tokio::runtime::Handle`], so it must not be made from inside an async task (use
//! `spawn_blocking`). Idempotent calls are retried on transient failures; creating an issue
//! is not, the caller looks first (see [`crate::issues`]).

use std::time::Duration;

use octocrab::Octocrab;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::runtime::Handle;

use crate::redact::{Secret, redact};
use crate::retry::RetryPolicy;

/// GitHub's public API.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// Items per page when listing (GitHub's maximum).
const PER_PAGE: usize = 100;

/// A failed GitHub call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client cannot be built.
    #[error("cannot use the GitHub API at {api}: {message}")]
    Client {
        /// The API URL, redacted.
        api: String,
        /// Why.
        message: String,
    },
    /// GitHub answered with an error status.
    #[error("GitHub API {call} on {repo} failed: {status} {message}")]
    Api {
        /// `METHOD /path`.
        call: String,
        /// `owner/repo`.
        repo: String,
        /// The HTTP status.
        status: u16,
        /// GitHub's message.
        message: String,
    },
    /// The call did not get an answer.
    #[error("GitHub API {call} on {repo} failed: {message}")]
    Transport {
        /// `METHOD /path`.
        call: String,
        /// `owner/repo`.
        repo: String,
        /// Why.
        message: String,
    },
}

impl Error {
    /// Whether retrying may help: no answer, a server error, or rate limiting.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Client { .. } => false,
            Error::Transport { .. } => true,
            Error::Api { status, message, .. } => {
                *status >= 500
                    || *status == 429
                    || (*status == 403 && message.to_lowercase().contains("rate limit"))
            }
        }
    }
}

/// A pull request, as far as kalypso reads it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct PullRequest {
    /// Its number.
    pub number: u64,
    /// Its page.
    #[serde(default)]
    pub html_url: Option<String>,
    /// The branch it merges.
    pub head: PullBranch,
    /// The branch it merges into.
    pub base: PullBranch,
    /// Its labels.
    #[serde(default)]
    pub labels: Vec<Label>,
}

/// One side of a pull request.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct PullBranch {
    /// The branch name.
    #[serde(rename = "ref")]
    pub name: String,
    /// Its head commit.
    #[serde(default)]
    pub sha: String,
    /// The repository (`None` when a fork was deleted).
    #[serde(default)]
    pub repo: Option<RepoRef>,
}

/// A repository reference.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RepoRef {
    /// `owner/name`.
    pub full_name: String,
}

/// A label.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Label {
    /// Its name.
    pub name: String,
}

/// An issue.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Issue {
    /// Its number.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// Its text.
    #[serde(default)]
    pub body: Option<String>,
    /// Its page.
    #[serde(default)]
    pub html_url: Option<String>,
    /// Present when the "issue" is a pull request (GitHub lists both).
    #[serde(default)]
    pub pull_request: Option<Value>,
}

/// A client for one repository.
pub struct GitHub {
    client: Octocrab,
    runtime: Handle,
    owner: String,
    repo: String,
    retry: RetryPolicy,
    retries: std::cell::Cell<u32>,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub")
            .field("repo", &self.full_name())
            .finish_non_exhaustive()
    }
}

impl GitHub {
    /// A client for `owner/repo` at `api_url`, authenticated with `token` when given.
    pub fn new(
        runtime: Handle,
        api_url: &str,
        token: Option<&Secret>,
        owner: &str,
        repo: &str,
        retry: RetryPolicy,
    ) -> Result<GitHub, Error> {
        let client_error = |message: String| Error::Client {
            api: redact(api_url),
            message: redact(&message),
        };
        let _context = runtime.enter();
        let mut builder = Octocrab::builder()
            .base_uri(api_url.trim_end_matches('/'))
            .map_err(|e| client_error(e.to_string()))?
            .set_connect_timeout(Some(Duration::from_secs(30)))
            .set_read_timeout(Some(Duration::from_secs(60)))
            .set_write_timeout(Some(Duration::from_secs(60)));
        if let Some(token) = token {
            builder = builder.personal_token(token.expose().to_owned());
        }
        let client = builder.build().map_err(|e| client_error(e.to_string()))?;
        Ok(GitHub {
            client,
            runtime,
            owner: owner.to_owned(),
            repo: repo.to_owned(),
            retry,
            retries: std::cell::Cell::new(0),
        })
    }

    /// `owner/repo`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// Retries made so far.
    pub fn retries(&self) -> u32 {
        self.retries.get()
    }

    fn path(&self, rest: &str) -> String {
        format!("/repos/{}/{}/{rest}", self.owner, self.repo)
    }

    fn map_error(&self, call: &str, e: octocrab::Error) -> Error {
        match e {
            octocrab::Error::GitHub { source, .. } => {
                // GitHub puts the details of a 422 in `errors` ("A pull request already
                // exists for …"); keep them with the message.
                let mut message = source.message.clone();
                for detail in source.errors.iter().flatten() {
                    let text = detail
                        .get("message")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| detail.to_string());
                    message.push_str(": ");
                    message.push_str(&text);
                }
                Error::Api {
                    call: call.to_owned(),
                    repo: self.full_name(),
                    status: source.status_code.as_u16(),
                    message: redact(&message),
                }
            }
            other => {
                let text = other.to_string();
                // Some variants append a backtrace; the first line says what happened.
                let first = text.split("\n\nFound at").next().unwrap_or_default().trim();
                Error::Transport {
                    call: call.to_owned(),
                    repo: self.full_name(),
                    message: redact(first),
                }
            }
        }
    }

    /// One request, without retrying.
    fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, Error> {
        let call = format!("{method} {path}");
        tracing::debug!(call = %call, "GitHub API");
        let client = &self.client;
        let result = self.runtime.block_on(async {
            match method {
                Method::Get => client.get(path, None::<&()>).await,
                Method::Post => client.post(path, body).await,
                Method::Patch => client.patch(path, body).await,
                Method::Delete => client.delete(path, body).await,
            }
        });
        result.map_err(|e| self.map_error(&call, e))
    }

    /// A request that is safe to repeat, retried on transient failures.
    fn idempotent<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, Error> {
        let mut retries = self.retries.get();
        let result = self.retry.run(
            &|| format!("GitHub {method} {path}"),
            &mut retries,
            Error::is_transient,
            || self.request(method, path, body),
        );
        self.retries.set(retries);
        result
    }

    fn list<T: DeserializeOwned>(&self, rest: &str) -> Result<Vec<T>, Error> {
        let mut all = Vec::new();
        for page in 1.. {
            let path = self.path(&format!("{rest}&per_page={PER_PAGE}&page={page}"));
            let items: Vec<T> = self.idempotent(Method::Get, &path, None)?;
            let last = items.len() < PER_PAGE;
            all.extend(items);
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// Open pull requests into `base`, every page.
    pub fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error> {
        self.list(&format!("pulls?state=open&base={}", encode(base)))
    }

    /// Opens a pull request; `None` when GitHub says one already exists for `head`.
    /// Repeating it is harmless, so it is retried.
    pub fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error> {
        let request = json!({
            "title": title,
            "head": head,
            "base": base,
            "body": body,
            "maintainer_can_modify": true,
        });
        match self.idempotent(Method::Post, &self.path("pulls"), Some(&request)) {
            Ok(pr) => Ok(Some(pr)),
            Err(Error::Api {
                status: 422, message, ..
            }) if message.to_lowercase().contains("already exist") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Closes a pull request.
    pub fn close_pull(&self, number: u64) -> Result<(), Error> {
        let _: Value = self.idempotent(
            Method::Patch,
            &self.path(&format!("pulls/{number}")),
            Some(&json!({"state": "closed"})),
        )?;
        Ok(())
    }

    /// Adds labels to an issue or pull request.
    pub fn add_labels(&self, number: u64, labels: &[&str]) -> Result<(), Error> {
        let _: Value = self.idempotent(
            Method::Post,
            &self.path(&format!("issues/{number}/labels")),
            Some(&json!({ "labels": labels })),
        )?;
        Ok(())
    }

    /// Removes a label from an issue or pull request.
    pub fn remove_label(&self, number: u64, label: &str) -> Result<(), Error> {
        let path = self.path(&format!("issues/{number}/labels/{}", encode(label)));
        match self.idempotent::<Value>(Method::Delete, &path, None) {
            Ok(_) | Err(Error::Api { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Open issues (pull requests excluded), every page.
    pub fn open_issues(&self) -> Result<Vec<Issue>, Error> {
        let issues: Vec<Issue> = self.list("issues?state=open")?;
        Ok(issues.into_iter().filter(|i| i.pull_request.is_none()).collect())
    }

    /// Creates an issue. Not retried: a lost answer may hide a created issue, so callers
    /// look for it before trying again.
    pub fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error> {
        self.request(
            Method::Post,
            &self.path("issues"),
            Some(&json!({"title": title, "body": body})),
        )
    }

    /// Replaces an issue's text.
    pub fn update_issue(&self, number: u64, body: &str) -> Result<(), Error> {
        let _: Value = self.idempotent(
            Method::Patch,
            &self.path(&format!("issues/{number}")),
            Some(&json!({"body": body})),
        )?;
        Ok(())
    }

    /// Closes an issue.
    pub fn close_issue(&self, number: u64) -> Result<(), Error> {
        let _: Value = self.idempotent(
            Method::Patch,
            &self.path(&format!("issues/{number}")),
            Some(&json!({"state": "closed", "state_reason": "completed"})),
        )?;
        Ok(())
    }

    /// Sets a commit status on `sha` (`state`: pending, success, failure or error), as the
    /// seeds' promotion workflow does for the environment it checked. Statuses of the same
    /// `context` replace each other, so repeating the call is harmless.
    pub fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error> {
        let mut body = json!({
            "state": status.state.as_str(),
            "context": status.context,
            "description": status.description.chars().take(140).collect::<String>(),
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        let _: Value = self.idempotent(
            Method::Post,
            &self.path(&format!("statuses/{}", encode(sha))),
            Some(&body),
        )?;
        Ok(())
    }
}

/// The state of a commit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusState {
    /// The check is running.
    Pending,
    /// The check passed.
    Success,
    /// The check failed.
    Failure,
    /// The check could not decide (e.g. it timed out).
    Error,
}

impl StatusState {
    /// GitHub's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusState::Pending => "pending",
            StatusState::Success => "success",
            StatusState::Failure => "failure",
            StatusState::Error => "error",
        }
    }
}

/// A commit status to set.
#[derive(Clone, Debug)]
pub struct CommitStatus {
    /// Its state.
    pub state: StatusState,
    /// What it is about (`kalypso/deployed/dev`); one status per context is shown.
    pub context: String,
    /// A line for people (GitHub keeps 140 characters).
    pub description: String,
    /// A link to details.
    pub target_url: Option<String>,
}

/// The HTTP methods used.
#[derive(Clone, Copy, Debug)]
enum Method {
    Get,
    Post,
    Patch,
    Delete,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        })
    }
}

/// Percent-encodes a path or query component (everything but RFC 3986's unreserved
/// characters).
pub fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_components() {
        assert_eq!(encode("dev/x y"), "dev%2Fx%20y");
        assert_eq!(encode("promoted"), "promoted");
    }

    #[test]
    fn classifies_transient_errors() {
        let api = |status, message: &str| Error::Api {
            call: "GET /x".into(),
            repo: "o/r".into(),
            status,
            message: message.into(),
        };
        assert!(api(502, "bad gateway").is_transient());
        assert!(api(403, "API rate limit exceeded").is_transient());
        assert!(!api(403, "Resource not accessible").is_transient());
        assert!(!api(422, "Validation Failed").is_transient());
    }
}
