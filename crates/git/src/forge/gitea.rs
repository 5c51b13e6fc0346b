//! Gitea's (and Forgejo's) REST API v1: pull requests, issues, labels and commit statuses of
//! one repository, authenticated with `Authorization: token <token>`.
//!
//! Its shapes are close to GitHub's. Two differences matter: pages are sized with `limit`
//! (servers cap it, 50 by default), and labels are set by id, so the `promoted` label is
//! looked up among the repository's labels and created when missing.

use serde::Deserialize;
use serde_json::json;

use super::http::{Body, Http, Method, encode};
use super::{
    CommitStatus, Error, Forge, Issue, Label, Provider, PullBranch, PullRequest, RepoRef, StatusState,
};
use crate::redact::Secret;
use crate::retry::RetryPolicy;

/// Items per page (Gitea's default maximum).
const PER_PAGE: usize = 50;

/// The colour of labels kalypso creates.
const LABEL_COLOR: &str = "#0e8a16";

/// A client for one Gitea repository.
#[derive(Debug)]
pub struct Gitea {
    http: Http,
    /// `https://HOST/api/v1/repos/OWNER/REPO`.
    repo: String,
}

#[derive(Deserialize)]
struct GiteaPull {
    number: u64,
    #[serde(default)]
    html_url: Option<String>,
    head: GiteaBranch,
    base: GiteaBranch,
    #[serde(default)]
    labels: Option<Vec<GiteaLabel>>,
}

#[derive(Deserialize)]
struct GiteaBranch {
    #[serde(rename = "ref")]
    name: String,
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    repo: Option<RepoRef>,
}

#[derive(Deserialize)]
struct GiteaLabel {
    id: u64,
    name: String,
}

#[derive(Deserialize)]
struct GiteaIssue {
    number: u64,
    title: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    html_url: Option<String>,
}

impl Gitea {
    /// A client for `owner/repo` behind `api` (`https://HOST/api/v1`).
    pub fn new(api: &str, owner: &str, repo: &str, token: Option<&Secret>, retry: RetryPolicy) -> Gitea {
        Gitea {
            repo: format!("{api}/repos/{owner}/{repo}"),
            http: Http::new(
                Provider::Gitea,
                format!("{owner}/{repo}"),
                token.map(|t| ("authorization", format!("token {}", t.expose()))),
                retry,
            ),
        }
    }

    fn pull(p: GiteaPull) -> PullRequest {
        PullRequest {
            number: p.number,
            html_url: p.html_url,
            head: PullBranch {
                name: p.head.name,
                sha: p.head.sha.unwrap_or_default(),
                repo: p.head.repo,
            },
            base: PullBranch {
                name: p.base.name,
                sha: p.base.sha.unwrap_or_default(),
                repo: p.base.repo,
            },
            labels: p
                .labels
                .unwrap_or_default()
                .into_iter()
                .map(|l| Label { name: l.name })
                .collect(),
        }
    }

    fn list<T: serde::de::DeserializeOwned>(&self, rest: &str) -> Result<Vec<T>, Error> {
        let mut all = Vec::new();
        for page in 1.. {
            let url = format!("{}/{rest}&limit={PER_PAGE}&page={page}", self.repo);
            let items: Vec<T> = self.http.idempotent_as(Method::Get, &url, None)?;
            // A server whose maximum is below the limit asked answers shorter pages: only an
            // empty page ends the listing for sure.
            let last = items.is_empty();
            all.extend(items);
            if last {
                break;
            }
        }
        Ok(all)
    }

    /// The id of label `name`, created when `create` and missing.
    fn label_id(&self, name: &str, create: bool) -> Result<Option<u64>, Error> {
        let labels: Vec<GiteaLabel> = self.list("labels?")?;
        if let Some(label) = labels.into_iter().find(|l| l.name == name) {
            return Ok(Some(label.id));
        }
        if !create {
            return Ok(None);
        }
        let url = format!("{}/labels", self.repo);
        let body = json!({"name": name, "color": LABEL_COLOR});
        let label: GiteaLabel = self
            .http
            .idempotent_as(Method::Post, &url, Some(Body::json(&body)))?;
        Ok(Some(label.id))
    }

    fn edit_issue(&self, number: u64, body: &serde_json::Value) -> Result<(), Error> {
        self.http.idempotent(
            Method::Patch,
            &format!("{}/issues/{number}", self.repo),
            Some(Body::json(body)),
        )?;
        Ok(())
    }
}

impl Forge for Gitea {
    fn provider(&self) -> Provider {
        Provider::Gitea
    }

    fn full_name(&self) -> String {
        self.http.repo().to_owned()
    }

    fn retries(&self) -> u32 {
        self.http.retries()
    }

    fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error> {
        let pulls: Vec<GiteaPull> = self.list("pulls?state=open")?;
        Ok(pulls
            .into_iter()
            .map(Gitea::pull)
            .filter(|p| p.base.name == base)
            .collect())
    }

    fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error> {
        let request = json!({"head": head, "base": base, "title": title, "body": body});
        let url = format!("{}/pulls", self.repo);
        match self
            .http
            .idempotent_as::<GiteaPull>(Method::Post, &url, Some(Body::json(&request)))
        {
            Ok(p) => Ok(Some(Gitea::pull(p))),
            // "pull request already exists for these targets"
            Err(e) if e.status() == Some(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn close_pull(&self, number: u64) -> Result<(), Error> {
        self.http.idempotent(
            Method::Patch,
            &format!("{}/pulls/{number}", self.repo),
            Some(Body::json(&json!({"state": "closed"}))),
        )?;
        Ok(())
    }

    fn add_label(&self, number: u64, label: &str) -> Result<(), Error> {
        let Some(id) = self.label_id(label, true)? else {
            return Ok(());
        };
        self.http.idempotent(
            Method::Post,
            &format!("{}/issues/{number}/labels", self.repo),
            Some(Body::json(&json!({ "labels": [id] }))),
        )?;
        Ok(())
    }

    fn remove_label(&self, number: u64, label: &str) -> Result<(), Error> {
        let Some(id) = self.label_id(label, false)? else {
            return Ok(());
        };
        match self.http.idempotent(
            Method::Delete,
            &format!("{}/issues/{number}/labels/{id}", self.repo),
            None,
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn open_issues(&self) -> Result<Vec<Issue>, Error> {
        let issues: Vec<GiteaIssue> = self.list("issues?state=open&type=issues")?;
        Ok(issues
            .into_iter()
            .map(|i| Issue {
                number: i.number,
                title: i.title,
                body: i.body,
                html_url: i.html_url,
                pull_request: None,
            })
            .collect())
    }

    fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error> {
        let url = format!("{}/issues", self.repo);
        let answer = self.http.send(
            Method::Post,
            &url,
            Some(Body::json(&json!({"title": title, "body": body}))),
        )?;
        let issue: GiteaIssue = self.http.decode(Method::Post, &url, answer.json)?;
        Ok(Issue {
            number: issue.number,
            title: issue.title,
            body: issue.body,
            html_url: issue.html_url,
            pull_request: None,
        })
    }

    fn update_issue(&self, number: u64, body: &str) -> Result<(), Error> {
        self.edit_issue(number, &json!({ "body": body }))
    }

    fn close_issue(&self, number: u64) -> Result<(), Error> {
        self.edit_issue(number, &json!({"state": "closed"}))
    }

    fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error> {
        let state = match status.state {
            StatusState::Pending => "pending",
            StatusState::Success => "success",
            StatusState::Failure => "failure",
            StatusState::Error => "error",
        };
        let mut body = json!({
            "state": state,
            "context": status.context,
            "description": status.description,
        });
        if let Some(url) = &status.target_url {
            body["target_url"] = json!(url);
        }
        self.http.idempotent(
            Method::Post,
            &format!("{}/statuses/{}", self.repo, encode(sha)),
            Some(Body::json(&body)),
        )?;
        Ok(())
    }
}
