//! GitLab's REST API v4: merge requests, issues and commit statuses of one project,
//! authenticated with a `PRIVATE-TOKEN` header (a personal, project or group access token
//! with the `api` scope).
//!
//! A project is addressed by its URL-encoded path (`group%2Fsub%2Fproject`); merge requests
//! and issues by their `iid` (the number people see). A merge request's source project is
//! the project itself unless it comes from a fork: `source_project_id` equal to
//! `target_project_id`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Body, Http, Method, encode};
use super::{
    CommitStatus, Error, Forge, Issue, Label, Provider, PullBranch, PullRequest, RepoRef, StatusState,
};
use crate::redact::Secret;
use crate::retry::RetryPolicy;

/// Items per page (GitLab's maximum).
const PER_PAGE: usize = 100;

/// A client for one GitLab project.
#[derive(Debug)]
pub struct GitLab {
    http: Http,
    /// `https://HOST/api/v4/projects/<encoded path>`.
    project: String,
}

#[derive(Deserialize)]
struct MergeRequest {
    iid: u64,
    #[serde(default)]
    web_url: Option<String>,
    source_branch: String,
    target_branch: String,
    #[serde(default)]
    sha: Option<String>,
    source_project_id: u64,
    target_project_id: u64,
    #[serde(default)]
    labels: Vec<String>,
}

#[derive(Deserialize)]
struct GitLabIssue {
    iid: u64,
    title: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    web_url: Option<String>,
}

impl GitLab {
    /// A client for the project at `path` (its segments) behind `api`
    /// (`https://HOST/api/v4`).
    pub fn new(api: &str, path: &[String], token: Option<&Secret>, retry: RetryPolicy) -> GitLab {
        let full = path.join("/");
        GitLab {
            project: format!("{api}/projects/{}", encode(&full)),
            http: Http::new(
                Provider::GitLab,
                full,
                token.map(|t| ("private-token", t.expose().to_owned())),
                retry,
            ),
        }
    }

    fn pull(&self, mr: MergeRequest) -> PullRequest {
        // The head's repository: this project, or (a fork) the source project's id.
        let head_repo = if mr.source_project_id == mr.target_project_id {
            self.http.repo().to_owned()
        } else {
            format!("project {}", mr.source_project_id)
        };
        PullRequest {
            number: mr.iid,
            html_url: mr.web_url,
            head: PullBranch {
                name: mr.source_branch,
                sha: mr.sha.unwrap_or_default(),
                repo: Some(RepoRef { full_name: head_repo }),
            },
            base: PullBranch {
                name: mr.target_branch,
                sha: String::new(),
                repo: Some(RepoRef {
                    full_name: self.http.repo().to_owned(),
                }),
            },
            labels: mr.labels.into_iter().map(|name| Label { name }).collect(),
        }
    }

    /// Every page of `GET {project}/{rest}` (which carries a query).
    fn list<T: serde::de::DeserializeOwned>(&self, rest: &str) -> Result<Vec<T>, Error> {
        let mut all = Vec::new();
        let mut page = "1".to_owned();
        loop {
            let url = format!("{}/{rest}&per_page={PER_PAGE}&page={page}", self.project);
            let answer = self.http.idempotent(Method::Get, &url, None)?;
            let items: Vec<T> = self.http.decode(Method::Get, &url, answer.json)?;
            let count = items.len();
            all.extend(items);
            match answer.next_page.filter(|p| !p.trim().is_empty()) {
                Some(next) => page = next.trim().to_owned(),
                // Without the header (keyset pagination, a proxy): a short page is the last.
                None if count < PER_PAGE => break,
                None => page = (page.parse::<u64>().unwrap_or(1) + 1).to_string(),
            }
            if count == 0 {
                break;
            }
        }
        Ok(all)
    }

    fn update_merge_request(&self, number: u64, body: &Value) -> Result<(), Error> {
        self.http.idempotent(
            Method::Put,
            &format!("{}/merge_requests/{number}", self.project),
            Some(Body::json(body)),
        )?;
        Ok(())
    }
}

impl Forge for GitLab {
    fn provider(&self) -> Provider {
        Provider::GitLab
    }

    fn full_name(&self) -> String {
        self.http.repo().to_owned()
    }

    fn retries(&self) -> u32 {
        self.http.retries()
    }

    fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error> {
        let mrs: Vec<MergeRequest> = self.list(&format!(
            "merge_requests?state=opened&target_branch={}",
            encode(base)
        ))?;
        Ok(mrs.into_iter().map(|mr| self.pull(mr)).collect())
    }

    fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error> {
        let request = json!({
            "source_branch": head,
            "target_branch": base,
            "title": title,
            "description": body,
            "remove_source_branch": true,
        });
        let url = format!("{}/merge_requests", self.project);
        match self
            .http
            .idempotent_as::<MergeRequest>(Method::Post, &url, Some(Body::json(&request)))
        {
            Ok(mr) => Ok(Some(self.pull(mr))),
            // "Another open merge request already exists for this source branch: !12"
            Err(e) if e.status() == Some(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn close_pull(&self, number: u64) -> Result<(), Error> {
        self.update_merge_request(number, &json!({"state_event": "close"}))
    }

    fn add_label(&self, number: u64, label: &str) -> Result<(), Error> {
        self.update_merge_request(number, &json!({ "add_labels": label }))
    }

    fn remove_label(&self, number: u64, label: &str) -> Result<(), Error> {
        self.update_merge_request(number, &json!({ "remove_labels": label }))
    }

    fn open_issues(&self) -> Result<Vec<Issue>, Error> {
        let issues: Vec<GitLabIssue> = self.list("issues?state=opened")?;
        Ok(issues
            .into_iter()
            .map(|i| Issue {
                number: i.iid,
                title: i.title,
                body: i.description,
                html_url: i.web_url,
                pull_request: None,
            })
            .collect())
    }

    fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error> {
        let url = format!("{}/issues", self.project);
        let request = json!({"title": title, "description": body});
        let answer = self.http.send(Method::Post, &url, Some(Body::json(&request)))?;
        let issue: GitLabIssue = self.http.decode(Method::Post, &url, answer.json)?;
        Ok(Issue {
            number: issue.iid,
            title: issue.title,
            body: issue.description,
            html_url: issue.web_url,
            pull_request: None,
        })
    }

    fn update_issue(&self, number: u64, body: &str) -> Result<(), Error> {
        self.http.idempotent(
            Method::Put,
            &format!("{}/issues/{number}", self.project),
            Some(Body::json(&json!({ "description": body }))),
        )?;
        Ok(())
    }

    fn close_issue(&self, number: u64) -> Result<(), Error> {
        self.http.idempotent(
            Method::Put,
            &format!("{}/issues/{number}", self.project),
            Some(Body::json(&json!({"state_event": "close"}))),
        )?;
        Ok(())
    }

    fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error> {
        // GitLab's states: a check under way is `running` (its `pending` means queued).
        let state = match status.state {
            StatusState::Pending => "running",
            StatusState::Success => "success",
            StatusState::Failure | StatusState::Error => "failed",
        };
        let mut body = json!({
            "state": state,
            "name": status.context,
            "description": status.description.chars().take(255).collect::<String>(),
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        let url = format!("{}/statuses/{}", self.project, encode(sha));
        match self.http.idempotent(Method::Post, &url, Some(Body::json(&body))) {
            Ok(_) => Ok(()),
            // GitLab refuses to set a status to the state it is in ("Cannot transition
            // status via :run from :running"): it is already what was asked.
            Err(e @ Error::Api { status: 400, .. }) if e.to_string().contains("Cannot transition status") => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
