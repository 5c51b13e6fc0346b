//! Azure DevOps' REST API 7.1: pull requests, their labels and commit statuses of one Git
//! repository, and failure reports as Azure Boards work items of its project, authenticated
//! with HTTP Basic and a personal access token (empty user name).
//!
//! A repository is `ORG_URL/PROJECT/_git/REPO` (`ORG_URL` is `https://dev.azure.com/ORG`,
//! `https://ORG.visualstudio.com` or an Azure DevOps Server collection); its API is under
//! `ORG_URL/PROJECT/_apis/git/repositories/REPO`. Pull requests are `active` until completed
//! or `abandoned` (what closing means here); branches are full ref names.
//!
//! Azure DevOps has no issues: failures become work items of type `Issue` (the Basic, Agile
//! and CMMI processes have it) tagged `kalypso:REPO`, found again with a WIQL query on that
//! tag, their text in an HTML `<pre>` block, closed by moving them to the first state of the
//! type's `Completed` category (`Done` or `Closed`, whatever the process calls it).

use std::cell::OnceCell;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Body, Http, Method, encode};
use super::{
    CommitStatus, Error, Forge, Issue, Label, Provider, PullBranch, PullRequest, RepoRef, StatusState,
};
use crate::redact::{Secret, register_secret};
use crate::retry::RetryPolicy;
use crate::url::RepoUrl;

/// The API version every call names.
const API_VERSION: &str = "api-version=7.1";
/// Pull requests per page.
const PER_PAGE: usize = 100;
/// Work items read per call (the API's maximum).
const WORK_ITEMS_PER_CALL: usize = 200;
/// The work item type of failure reports.
pub const WORK_ITEM_TYPE: &str = "Issue";
/// The media type of work item updates.
const JSON_PATCH: &str = "application/json-patch+json";

/// Where an Azure DevOps repository is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// `https://dev.azure.com/ORG`, `https://ORG.visualstudio.com[/COLLECTION]`, or an
    /// Azure DevOps Server collection URL.
    pub organization_url: String,
    /// The organisation's (or collection's) name, for messages.
    pub organization: String,
    /// The project, as the URL writes it.
    pub project: String,
    /// The repository, as the URL writes it.
    pub repository: String,
}

impl Location {
    /// The location `url` names: `https://[ORG@]dev.azure.com/ORG/PROJECT/_git/REPO`,
    /// `https://ORG.visualstudio.com/[COLLECTION/]PROJECT/_git/REPO`,
    /// `https://HOST/COLLECTION/PROJECT/_git/REPO` (Azure DevOps Server),
    /// `git@ssh.dev.azure.com:v3/ORG/PROJECT/REPO` or `ORG@vs-ssh.visualstudio.com:v3/ORG/PROJECT/REPO`.
    pub fn of(url: &RepoUrl) -> Option<Location> {
        let remote = url.remote()?;
        let host = remote.hostname().to_owned();
        let s = &remote.segments;
        if s.first().map(String::as_str) == Some("v3") && s.len() == 4 {
            let org = s[1].clone();
            let organization_url = if host.ends_with("visualstudio.com") {
                format!("https://{org}.visualstudio.com")
            } else {
                format!("https://dev.azure.com/{org}")
            };
            return Some(Location {
                organization_url,
                organization: org,
                project: s[2].clone(),
                repository: s[3].clone(),
            });
        }
        let git = s.iter().position(|seg| seg == "_git")?;
        let repository = s.get(git + 1)?.clone();
        // `ORG/_git/REPO`: the project of the same name as the repository.
        let (prefix, project) = if git == 0 || (host == "dev.azure.com" && git == 1) {
            (&s[..git], repository.clone())
        } else {
            (&s[..git - 1], s[git - 1].clone())
        };
        let organization_url = format!(
            "{}{}",
            remote.origin(),
            prefix.iter().map(|p| format!("/{p}")).collect::<String>()
        );
        let organization = match host.strip_suffix(".visualstudio.com") {
            Some(org) => org.to_owned(),
            None => prefix.last().cloned().unwrap_or(host),
        };
        Some(Location {
            organization_url,
            organization,
            project,
            repository,
        })
    }
}

/// A client for one Azure DevOps repository and its project's work items.
#[derive(Debug)]
pub struct AzureDevOps {
    http: Http,
    /// `ORG_URL/PROJECT/_apis`.
    project_api: String,
    /// `ORG_URL/PROJECT/_apis/git/repositories/REPO`.
    repo_api: String,
    /// `ORG_URL/PROJECT/_git/REPO`, for links.
    web: String,
    /// The tag of this repository's work items.
    tag: String,
    /// The work item type's states: open ones, and the one closing moves to.
    states: OnceCell<States>,
}

#[derive(Clone, Debug)]
struct States {
    /// States of the `Completed` and `Removed` categories.
    finished: Vec<String>,
    /// The first `Completed` state.
    completed: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AzurePull {
    pull_request_id: u64,
    source_ref_name: String,
    target_ref_name: String,
    #[serde(default)]
    labels: Option<Vec<AzureLabel>>,
    #[serde(default)]
    fork_source: Option<Value>,
    #[serde(default)]
    last_merge_source_commit: Option<Value>,
}

#[derive(Deserialize)]
struct AzureLabel {
    name: String,
    #[serde(default)]
    active: Option<bool>,
}

#[derive(Deserialize)]
struct ValueList<T> {
    value: Vec<T>,
}

#[derive(Deserialize)]
struct WorkItem {
    id: u64,
    #[serde(default)]
    fields: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
struct WorkItemRef {
    id: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WiqlAnswer {
    #[serde(default)]
    work_items: Vec<WorkItemRef>,
}

#[derive(Deserialize)]
struct StateInfo {
    name: String,
    #[serde(default)]
    category: String,
}

impl AzureDevOps {
    /// A client for `location`; `organization_url` replaces the location's (a proxy, a
    /// server reached under another name).
    pub fn new(
        location: Location,
        organization_url: Option<&str>,
        token: Option<&Secret>,
        retry: RetryPolicy,
    ) -> AzureDevOps {
        let org = organization_url.unwrap_or(&location.organization_url);
        let project = format!("{org}/{}", location.project);
        let auth = token.map(|t| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!(":{}", t.expose()));
            register_secret(&encoded);
            ("authorization", format!("Basic {encoded}"))
        });
        AzureDevOps {
            http: Http::new(
                Provider::AzureDevOps,
                format!(
                    "{}/{}/{}",
                    location.organization, location.project, location.repository
                ),
                auth,
                retry,
            ),
            repo_api: format!("{project}/_apis/git/repositories/{}", location.repository),
            web: format!("{project}/_git/{}", location.repository),
            project_api: format!("{project}/_apis"),
            tag: format!("kalypso:{}", location.repository),
            states: OnceCell::new(),
        }
    }

    fn pull(&self, p: AzurePull) -> PullRequest {
        let branch = |r: &str| r.strip_prefix("refs/heads/").unwrap_or(r).to_owned();
        let head_repo = match &p.fork_source {
            None | Some(Value::Null) => self.http.repo().to_owned(),
            Some(fork) => fork
                .pointer("/repository/name")
                .and_then(Value::as_str)
                .map_or_else(|| "a fork".to_owned(), |name| format!("fork {name}")),
        };
        PullRequest {
            number: p.pull_request_id,
            html_url: Some(format!("{}/pullrequest/{}", self.web, p.pull_request_id)),
            head: PullBranch {
                name: branch(&p.source_ref_name),
                sha: p
                    .last_merge_source_commit
                    .as_ref()
                    .and_then(|c| c.get("commitId"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                repo: Some(RepoRef { full_name: head_repo }),
            },
            base: PullBranch {
                name: branch(&p.target_ref_name),
                sha: String::new(),
                repo: Some(RepoRef {
                    full_name: self.http.repo().to_owned(),
                }),
            },
            labels: p
                .labels
                .unwrap_or_default()
                .into_iter()
                .filter(|l| l.active != Some(false))
                .map(|l| Label { name: l.name })
                .collect(),
        }
    }

    fn states(&self) -> Result<States, Error> {
        if let Some(states) = self.states.get() {
            return Ok(states.clone());
        }
        let url = format!(
            "{}/wit/workitemtypes/{WORK_ITEM_TYPE}/states?{API_VERSION}",
            self.project_api
        );
        let list: ValueList<StateInfo> = self.http.idempotent_as(Method::Get, &url, None)?;
        let completed = list
            .value
            .iter()
            .find(|s| s.category == "Completed")
            .map(|s| s.name.clone())
            .ok_or_else(|| {
                self.http.api_error(
                    "GET wit/workitemtypes/states",
                    200,
                    &format!("work item type {WORK_ITEM_TYPE} has no state of the Completed category"),
                )
            })?;
        let states = States {
            finished: list
                .value
                .into_iter()
                .filter(|s| s.category == "Completed" || s.category == "Removed")
                .map(|s| s.name)
                .collect(),
            completed,
        };
        Ok(self.states.get_or_init(|| states).clone())
    }

    fn patch_work_item(&self, id: u64, operations: &Value) -> Result<Value, Error> {
        let url = format!("{}/wit/workitems/{id}?{API_VERSION}", self.project_api);
        let answer = self.http.idempotent(
            Method::Patch,
            &url,
            Some(Body {
                content_type: JSON_PATCH,
                value: operations,
            }),
        )?;
        Ok(answer.json)
    }

    fn issue(&self, item: &WorkItem) -> Issue {
        let field = |name: &str| item.fields.get(name).and_then(Value::as_str).map(str::to_owned);
        Issue {
            number: item.id,
            title: field("System.Title").unwrap_or_default(),
            body: field("System.Description").map(|d| from_html(&d)),
            html_url: Some(format!("{}/_workitems/edit/{}", self.project_url(), item.id)),
            pull_request: None,
        }
    }

    fn project_url(&self) -> &str {
        self.project_api
            .strip_suffix("/_apis")
            .unwrap_or(&self.project_api)
    }
}

/// A report's text as the HTML of a work item's description: preformatted, escaped.
pub fn to_html(text: &str) -> String {
    let escaped = text
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    format!("<pre>{escaped}</pre>")
}

/// The text [`to_html`] made (other HTML is returned as it is).
pub fn from_html(html: &str) -> String {
    match html.strip_prefix("<pre>").and_then(|h| h.strip_suffix("</pre>")) {
        Some(inner) => inner
            .replace("&quot;", "\"")
            .replace("&gt;", ">")
            .replace("&lt;", "<")
            .replace("&amp;", "&"),
        None => html.to_owned(),
    }
}

impl Forge for AzureDevOps {
    fn provider(&self) -> Provider {
        Provider::AzureDevOps
    }

    fn full_name(&self) -> String {
        self.http.repo().to_owned()
    }

    fn retries(&self) -> u32 {
        self.http.retries()
    }

    fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error> {
        let mut all = Vec::new();
        for page in 0.. {
            let url = format!(
                "{}/pullrequests?searchCriteria.status=active&searchCriteria.targetRefName={}&$top={PER_PAGE}&$skip={}&{API_VERSION}",
                self.repo_api,
                encode(&format!("refs/heads/{base}")),
                page * PER_PAGE
            );
            let list: ValueList<AzurePull> = self.http.idempotent_as(Method::Get, &url, None)?;
            let last = list.value.len() < PER_PAGE;
            all.extend(list.value.into_iter().map(|p| self.pull(p)));
            if last {
                break;
            }
        }
        Ok(all)
    }

    fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error> {
        let request = json!({
            "sourceRefName": format!("refs/heads/{head}"),
            "targetRefName": format!("refs/heads/{base}"),
            "title": title,
            "description": body,
        });
        let url = format!("{}/pullrequests?{API_VERSION}", self.repo_api);
        match self
            .http
            .idempotent_as::<AzurePull>(Method::Post, &url, Some(Body::json(&request)))
        {
            Ok(p) => Ok(Some(self.pull(p))),
            // TF401179: An active pull request for the source and target branch already exists.
            Err(e) if e.status() == Some(409) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn close_pull(&self, number: u64) -> Result<(), Error> {
        self.http.idempotent(
            Method::Patch,
            &format!("{}/pullrequests/{number}?{API_VERSION}", self.repo_api),
            Some(Body::json(&json!({"status": "abandoned"}))),
        )?;
        Ok(())
    }

    fn add_label(&self, number: u64, label: &str) -> Result<(), Error> {
        self.http.idempotent(
            Method::Post,
            &format!("{}/pullRequests/{number}/labels?{API_VERSION}", self.repo_api),
            Some(Body::json(&json!({ "name": label }))),
        )?;
        Ok(())
    }

    fn remove_label(&self, number: u64, label: &str) -> Result<(), Error> {
        let url = format!(
            "{}/pullRequests/{number}/labels/{}?{API_VERSION}",
            self.repo_api,
            encode(label)
        );
        match self.http.idempotent(Method::Delete, &url, None) {
            Ok(_) => Ok(()),
            Err(e) if e.status() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn open_issues(&self) -> Result<Vec<Issue>, Error> {
        let states = self.states()?;
        let finished: Vec<String> = states
            .finished
            .iter()
            .map(|s| format!("'{}'", s.replace('\'', "''")))
            .collect();
        let mut query = format!(
            "SELECT [System.Id] FROM WorkItems WHERE [System.TeamProject] = @project AND [System.WorkItemType] = '{WORK_ITEM_TYPE}' AND [System.Tags] CONTAINS '{}'",
            self.tag.replace('\'', "''")
        );
        if !finished.is_empty() {
            query.push_str(&format!(" AND [System.State] NOT IN ({})", finished.join(", ")));
        }
        query.push_str(" ORDER BY [System.Id]");
        let url = format!("{}/wit/wiql?{API_VERSION}", self.project_api);
        // A query changes nothing: safe to repeat.
        let answer: WiqlAnswer =
            self.http
                .idempotent_as(Method::Post, &url, Some(Body::json(&json!({ "query": query }))))?;
        let ids: Vec<u64> = answer.work_items.iter().map(|w| w.id).collect();
        let mut issues = Vec::new();
        for chunk in ids.chunks(WORK_ITEMS_PER_CALL) {
            let list: Vec<String> = chunk.iter().map(u64::to_string).collect();
            let url = format!(
                "{}/wit/workitems?ids={}&fields=System.Title,System.Description,System.Tags&{API_VERSION}",
                self.project_api,
                list.join(",")
            );
            let items: ValueList<WorkItem> = self.http.idempotent_as(Method::Get, &url, None)?;
            // CONTAINS matches part of a tag; keep the items tagged exactly.
            issues.extend(
                items
                    .value
                    .iter()
                    .filter(|item| {
                        item.fields
                            .get("System.Tags")
                            .and_then(Value::as_str)
                            .is_some_and(|tags| tags.split(';').any(|t| t.trim() == self.tag))
                    })
                    .map(|item| self.issue(item)),
            );
        }
        Ok(issues)
    }

    fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error> {
        let url = format!(
            "{}/wit/workitems/${WORK_ITEM_TYPE}?{API_VERSION}",
            self.project_api
        );
        let operations = json!([
            {"op": "add", "path": "/fields/System.Title", "value": title},
            {"op": "add", "path": "/fields/System.Description", "value": to_html(body)},
            {"op": "add", "path": "/fields/System.Tags", "value": self.tag},
        ]);
        let answer = self.http.send(
            Method::Post,
            &url,
            Some(Body {
                content_type: JSON_PATCH,
                value: &operations,
            }),
        )?;
        let item: WorkItem = self.http.decode(Method::Post, &url, answer.json)?;
        Ok(self.issue(&item))
    }

    fn update_issue(&self, number: u64, body: &str) -> Result<(), Error> {
        self.patch_work_item(
            number,
            &json!([{"op": "add", "path": "/fields/System.Description", "value": to_html(body)}]),
        )?;
        Ok(())
    }

    fn close_issue(&self, number: u64) -> Result<(), Error> {
        let completed = self.states()?.completed;
        self.patch_work_item(
            number,
            &json!([{"op": "add", "path": "/fields/System.State", "value": completed}]),
        )?;
        Ok(())
    }

    fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error> {
        let state = match status.state {
            StatusState::Pending => "pending",
            StatusState::Success => "succeeded",
            StatusState::Failure => "failed",
            StatusState::Error => "error",
        };
        // Azure DevOps shows `genre/name`: `kalypso/deployed/dev` keeps its whole text.
        let context = match status.context.rsplit_once('/') {
            Some((genre, name)) => json!({"genre": genre, "name": name}),
            None => json!({ "name": status.context }),
        };
        let mut body = json!({
            "state": state,
            "description": status.description,
            "context": context,
        });
        if let Some(url) = &status.target_url {
            body["targetUrl"] = json!(url);
        }
        self.http.idempotent(
            Method::Post,
            &format!("{}/commits/{}/statuses?{API_VERSION}", self.repo_api, encode(sha)),
            Some(Body::json(&body)),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(url: &str) -> Location {
        Location::of(&RepoUrl::parse(url).unwrap()).unwrap()
    }

    #[test]
    fn reads_every_url_form() {
        let expected = Location {
            organization_url: "https://dev.azure.com/contoso".into(),
            organization: "contoso".into(),
            project: "platform".into(),
            repository: "gitops".into(),
        };
        assert_eq!(
            location("https://dev.azure.com/contoso/platform/_git/gitops"),
            expected
        );
        assert_eq!(
            location("https://contoso@dev.azure.com/contoso/platform/_git/gitops"),
            expected
        );
        assert_eq!(
            location("git@ssh.dev.azure.com:v3/contoso/platform/gitops"),
            expected
        );
        let vs = location("https://contoso.visualstudio.com/platform/_git/gitops");
        assert_eq!(
            (vs.organization_url.as_str(), vs.organization.as_str()),
            ("https://contoso.visualstudio.com", "contoso")
        );
        let server = location("https://tfs.contoso.com/tfs/DefaultCollection/platform/_git/gitops.git");
        assert_eq!(
            server.organization_url,
            "https://tfs.contoso.com/tfs/DefaultCollection"
        );
        assert_eq!(
            (server.project.as_str(), server.repository.as_str()),
            ("platform", "gitops")
        );
        let same = location("https://dev.azure.com/contoso/_git/gitops");
        assert_eq!(
            (same.project.as_str(), same.repository.as_str()),
            ("gitops", "gitops")
        );
        assert!(Location::of(&RepoUrl::parse("https://dev.azure.com/contoso/platform").unwrap()).is_none());
    }

    #[test]
    fn descriptions_round_trip_through_html() {
        let text = "template \"x\" <y> & z\nline 2";
        assert_eq!(
            to_html(text),
            "<pre>template &quot;x&quot; &lt;y&gt; &amp; z\nline 2</pre>"
        );
        assert_eq!(from_html(&to_html(text)), text);
        assert_eq!(from_html("<div>edited</div>"), "<div>edited</div>");
    }
}
