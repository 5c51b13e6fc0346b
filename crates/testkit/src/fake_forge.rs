//! Stand-ins on loopback for the REST APIs of GitLab (v4), Azure DevOps (7.1) and Gitea
//! (v1), built from each provider's documented API: the merge/pull request, label, issue
//! (Azure Boards work item) and commit status endpoints kalypso calls, with each
//! provider's paths, shapes, pagination and conflict answers (GitLab's and Gitea's 409 for a
//! duplicate pull request, Azure DevOps' TF401179, GitLab's refusal to set a status to the
//! state it is in). Every request is recorded with its authentication header; a request
//! without the expected credential gets a 401 whose message quotes what it got (as some
//! proxies do), so that tests can check that kalypso never shows it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::fake_github::{FakeIssue, FakePull};

/// Which API the stand-in serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// GitLab v4 under `/api/v4/projects/<encoded path>/`.
    GitLab,
    /// Azure DevOps 7.1 under `/<org>/<project>/_apis/`.
    AzureDevOps,
    /// Gitea v1 under `/api/v1/repos/<owner>/<repo>/`.
    Gitea,
}

/// One request the stand-in received.
#[derive(Clone, Debug, PartialEq)]
pub struct ForgeRequest {
    /// Method.
    pub method: String,
    /// Path, as sent (percent-encoding kept).
    pub path: String,
    /// Query string.
    pub query: String,
    /// JSON body (`null` if none).
    pub body: Value,
    /// `Content-Type` header.
    pub content_type: Option<String>,
    /// `Authorization` header.
    pub authorization: Option<String>,
    /// `PRIVATE-TOKEN` header (GitLab).
    pub private_token: Option<String>,
}

/// A work item's extra fields (Azure DevOps).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkItemFields {
    /// `System.Tags`.
    pub tags: String,
    /// `System.State`.
    pub state: String,
}

#[derive(Default)]
struct Data {
    requests: Vec<ForgeRequest>,
    pulls: Vec<FakePull>,
    issues: Vec<FakeIssue>,
    work_items: BTreeMap<u64, WorkItemFields>,
    labels: Vec<(u64, String)>,
    statuses: Vec<Value>,
    next: u64,
    fail: Vec<(String, String, u32)>,
    hide_pulls: u32,
}

struct Config {
    flavor: Flavor,
    /// The repository's own name: `group/project` (GitLab), `owner/repo` (Gitea),
    /// `org/project/repo` (Azure DevOps).
    repo: String,
    token: Option<String>,
    data: Mutex<Data>,
}

/// The running stand-in; stops with its runtime.
#[derive(Clone)]
pub struct FakeForge {
    port: u16,
    config: Arc<Config>,
}

impl std::fmt::Debug for FakeForge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeForge")
            .field("flavor", &self.config.flavor)
            .field("port", &self.port)
            .finish()
    }
}

/// Azure DevOps' states of the Basic process's `Issue`.
const WORK_ITEM_STATES: [(&str, &str); 3] = [
    ("To Do", "Proposed"),
    ("Doing", "InProgress"),
    ("Done", "Completed"),
];

impl FakeForge {
    /// Starts a stand-in of `flavor` for repository `repo` on a free loopback port,
    /// requiring `token` when given.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        flavor: Flavor,
        repo: &str,
        token: Option<&str>,
    ) -> FakeForge {
        let config = Arc::new(Config {
            flavor,
            repo: repo.to_owned(),
            token: token.map(str::to_owned),
            data: Mutex::new(Data {
                next: 1,
                ..Data::default()
            }),
        });
        let app = Router::new().fallback(handle).with_state(config.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let _context = runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeForge { port, config }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The API URL kalypso is given: `/api/v4` (GitLab), `/api/v1` (Gitea), the
    /// organisation URL (Azure DevOps).
    pub fn api_url(&self) -> String {
        match self.config.flavor {
            Flavor::GitLab => format!("{}/api/v4", self.origin()),
            Flavor::Gitea => format!("{}/api/v1", self.origin()),
            Flavor::AzureDevOps => {
                let org = self.config.repo.split('/').next().unwrap_or_default();
                format!("{}/{org}", self.origin())
            }
        }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<ForgeRequest> {
        self.config.data.lock().unwrap().requests.clone()
    }

    /// Requests whose method is `method` and path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<ForgeRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }

    /// Every pull (merge) request.
    pub fn pulls(&self) -> Vec<FakePull> {
        self.config.data.lock().unwrap().pulls.clone()
    }

    /// Every issue (work item).
    pub fn issues(&self) -> Vec<FakeIssue> {
        self.config.data.lock().unwrap().issues.clone()
    }

    /// The tags and state of work item `id` (Azure DevOps).
    pub fn work_item(&self, id: u64) -> Option<WorkItemFields> {
        self.config.data.lock().unwrap().work_items.get(&id).cloned()
    }

    /// Every commit status set, oldest first, as sent, with `sha` added.
    pub fn statuses(&self) -> Vec<Value> {
        self.config.data.lock().unwrap().statuses.clone()
    }

    /// Adds an open pull request from `head` in `head_repo` (this repository's own name, or
    /// another for a fork) into `base`.
    pub fn add_pull(&self, head: &str, head_repo: &str, base: &str) -> u64 {
        let mut d = self.config.data.lock().unwrap();
        let number = d.next;
        d.next += 1;
        d.pulls.push(FakePull {
            number,
            head: head.into(),
            head_repo: head_repo.into(),
            base: base.into(),
            title: format!("PR from {head}"),
            body: String::new(),
            state: "open".into(),
            labels: vec![],
        });
        number
    }

    /// Adds an open issue (a work item with `tags` on Azure DevOps).
    pub fn add_issue(&self, title: &str, body: &str, tags: &str) -> u64 {
        let mut d = self.config.data.lock().unwrap();
        let number = d.next;
        d.next += 1;
        d.issues.push(FakeIssue {
            number,
            title: title.into(),
            body: body.into(),
            state: "open".into(),
        });
        d.work_items.insert(
            number,
            WorkItemFields {
                tags: tags.into(),
                state: "To Do".into(),
            },
        );
        number
    }

    /// The next `lists` listings of pull requests come back empty, as if another run opened
    /// its pull request between a listing and a creation.
    pub fn hide_pulls_from_next_lists(&self, lists: u32) {
        self.config.data.lock().unwrap().hide_pulls = lists;
    }

    /// Answers the next `times` requests `method` to paths ending with `suffix` with 502.
    pub fn fail(&self, method: &str, suffix: &str, times: u32) {
        self.config
            .data
            .lock()
            .unwrap()
            .fail
            .push((method.into(), suffix.into(), times));
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| decode(v))
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 3 <= bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Whether the request carries `token` the way `flavor` expects it.
fn authenticated(flavor: Flavor, token: &str, request: &ForgeRequest) -> bool {
    match flavor {
        Flavor::GitLab => request.private_token.as_deref() == Some(token),
        Flavor::Gitea => request.authorization.as_deref() == Some(&format!("token {token}")),
        Flavor::AzureDevOps => request
            .authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|userpass| userpass.split_once(':').map(|(_, p)| p.to_owned()))
            .is_some_and(|password| password == token),
    }
}

async fn handle(
    State(config): State<Arc<Config>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let request = ForgeRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        content_type: header(&headers, "content-type"),
        authorization: header(&headers, "authorization"),
        private_token: header(&headers, "private-token"),
    };
    let host = header(&headers, "host").unwrap_or_else(|| "127.0.0.1".into());
    let mut d = config.data.lock().unwrap();
    d.requests.push(request.clone());
    if let Some(token) = &config.token
        && !authenticated(config.flavor, token, &request)
    {
        let got = request
            .private_token
            .clone()
            .or(request.authorization.clone())
            .unwrap_or_default();
        return json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"message": format!("401 Unauthorized: credential {got:?} rejected")}),
        );
    }
    if let Some(rule) = d
        .fail
        .iter_mut()
        .find(|(m, s, n)| *n > 0 && *m == request.method && request.path.ends_with(s.as_str()))
    {
        rule.2 -= 1;
        return json_response(StatusCode::BAD_GATEWAY, &json!({"message": "502 Bad Gateway"}));
    }
    let base_url = format!("http://{host}");
    let lists_pulls = request.method == "GET"
        && (request.path.ends_with("/pulls")
            || request.path.ends_with("/merge_requests")
            || request.path.ends_with("/pullrequests"));
    if lists_pulls && d.hide_pulls > 0 {
        d.hide_pulls -= 1;
        let empty = match config.flavor {
            Flavor::AzureDevOps => json!({"value": [], "count": 0}),
            _ => json!([]),
        };
        return json_response(StatusCode::OK, &empty);
    }
    match config.flavor {
        Flavor::GitLab => gitlab(&config, &mut d, &request, &base_url),
        Flavor::Gitea => gitea(&config, &mut d, &request, &base_url),
        Flavor::AzureDevOps => azure(&config, &mut d, &request, &base_url),
    }
}

fn not_found() -> Response<Body> {
    json_response(StatusCode::NOT_FOUND, &json!({"message": "404 Not Found"}))
}

fn next_number(d: &mut Data) -> u64 {
    let n = d.next;
    d.next += 1;
    n
}

fn paged(items: Vec<Value>, page: usize, per_page: usize) -> (Vec<Value>, bool) {
    let total = items.len();
    let start = per_page * page.saturating_sub(1);
    let more = start + per_page < total;
    (items.into_iter().skip(start).take(per_page).collect(), more)
}

// GitLab v4 ----------------------------------------------------------------------------

fn gitlab_mr(config: &Config, base_url: &str, p: &FakePull) -> Value {
    json!({
        "iid": p.number,
        "id": 1000 + p.number,
        "web_url": format!("{base_url}/{}/-/merge_requests/{}", config.repo, p.number),
        "title": p.title,
        "description": p.body,
        "state": if p.state == "open" { "opened" } else { p.state.as_str() },
        "source_branch": p.head,
        "target_branch": p.base,
        "source_project_id": if p.head_repo == config.repo { 1 } else { 2 },
        "target_project_id": 1,
        "sha": "0000000000000000000000000000000000000000",
        "labels": p.labels,
    })
}

fn gitlab_issue(config: &Config, base_url: &str, i: &FakeIssue) -> Value {
    json!({
        "iid": i.number,
        "id": 2000 + i.number,
        "title": i.title,
        "description": i.body,
        "state": if i.state == "open" { "opened" } else { i.state.as_str() },
        "web_url": format!("{base_url}/{}/-/issues/{}", config.repo, i.number),
    })
}

fn gitlab_list(items: Vec<Value>, query: &str) -> Response<Body> {
    let per_page = query_param(query, "per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let page = query_param(query, "page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (items, more) = paged(items, page, per_page);
    let mut r = json_response(StatusCode::OK, &Value::Array(items));
    let next = if more {
        (page + 1).to_string()
    } else {
        String::new()
    };
    r.headers_mut().insert("x-next-page", next.parse().unwrap());
    r
}

fn gitlab(config: &Config, d: &mut Data, r: &ForgeRequest, base_url: &str) -> Response<Body> {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let project = config.repo.replace('/', "%2F");
    if segments.len() < 5 || segments[..3] != ["api", "v4", "projects"] || segments[3] != project {
        return not_found();
    }
    let body = &r.body;
    match (r.method.as_str(), &segments[4..]) {
        ("GET", ["merge_requests"]) => {
            let state = query_param(&r.query, "state").unwrap_or_else(|| "all".into());
            let target = query_param(&r.query, "target_branch");
            let items = d
                .pulls
                .iter()
                .filter(|p| state == "all" || (state == "opened" && p.state == "open") || p.state == state)
                .filter(|p| target.as_ref().is_none_or(|t| &p.base == t))
                .map(|p| gitlab_mr(config, base_url, p))
                .collect();
            gitlab_list(items, &r.query)
        }
        ("POST", ["merge_requests"]) => {
            let head = body["source_branch"].as_str().unwrap_or_default().to_owned();
            let base = body["target_branch"].as_str().unwrap_or_default().to_owned();
            if let Some(p) = d
                .pulls
                .iter()
                .find(|p| p.state == "open" && p.head == head && p.base == base)
            {
                return json_response(
                    StatusCode::CONFLICT,
                    &json!({"message": [format!("Another open merge request already exists for this source branch: !{}", p.number)]}),
                );
            }
            let number = next_number(d);
            let pull = FakePull {
                number,
                head,
                head_repo: config.repo.clone(),
                base,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["description"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
                labels: vec![],
            };
            let answer = gitlab_mr(config, base_url, &pull);
            d.pulls.push(pull);
            json_response(StatusCode::CREATED, &answer)
        }
        ("PUT", ["merge_requests", n]) => {
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            if body["state_event"] == "close" {
                p.state = "closed".into();
            }
            for label in body["add_labels"].as_str().unwrap_or_default().split(',') {
                if !label.is_empty() && !p.labels.iter().any(|l| l == label) {
                    p.labels.push(label.to_owned());
                }
            }
            for label in body["remove_labels"].as_str().unwrap_or_default().split(',') {
                p.labels.retain(|l| l != label);
            }
            let answer = gitlab_mr(config, base_url, p);
            json_response(StatusCode::OK, &answer)
        }
        ("GET", ["issues"]) => {
            let state = query_param(&r.query, "state").unwrap_or_else(|| "all".into());
            let items = d
                .issues
                .iter()
                .filter(|i| state == "all" || (state == "opened" && i.state == "open") || i.state == state)
                .map(|i| gitlab_issue(config, base_url, i))
                .collect();
            gitlab_list(items, &r.query)
        }
        ("POST", ["issues"]) => {
            let number = next_number(d);
            let issue = FakeIssue {
                number,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["description"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
            };
            let answer = gitlab_issue(config, base_url, &issue);
            d.issues.push(issue);
            json_response(StatusCode::CREATED, &answer)
        }
        ("PUT", ["issues", n]) => {
            let Some(i) = d.issues.iter_mut().find(|i| i.number.to_string() == *n) else {
                return not_found();
            };
            if let Some(text) = body["description"].as_str() {
                i.body = text.to_owned();
            }
            if body["state_event"] == "close" {
                i.state = "closed".into();
            }
            let answer = gitlab_issue(config, base_url, i);
            json_response(StatusCode::OK, &answer)
        }
        ("POST", ["statuses", sha]) => {
            let state = body["state"].as_str().unwrap_or_default().to_owned();
            let name = body["name"].clone();
            let current = d
                .statuses
                .iter()
                .rev()
                .find(|s| s["sha"] == *sha && s["name"] == name)
                .and_then(|s| s["state"].as_str().map(str::to_owned));
            if current.as_deref() == Some(state.as_str()) && (state == "running" || state == "pending") {
                let via = if state == "running" { "run" } else { "enqueue" };
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"message": format!("Cannot transition status via :{via} from :{state} (Reason(s): Status cannot transition via \"{via}\")")}),
                );
            }
            let mut status = body.clone();
            status["sha"] = json!(sha);
            d.statuses.push(status.clone());
            json_response(StatusCode::CREATED, &status)
        }
        _ => not_found(),
    }
}

// Gitea v1 -----------------------------------------------------------------------------

fn gitea_pull(config: &Config, base_url: &str, p: &FakePull, labels: &[(u64, String)]) -> Value {
    json!({
        "number": p.number,
        "html_url": format!("{base_url}/{}/pulls/{}", config.repo, p.number),
        "state": p.state,
        "title": p.title,
        "body": p.body,
        "head": {"ref": p.head, "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": p.head_repo}},
        "base": {"ref": p.base, "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": config.repo}},
        "labels": p.labels.iter().map(|name| {
            let id = labels.iter().find(|(_, n)| n == name).map_or(0, |(id, _)| *id);
            json!({"id": id, "name": name})
        }).collect::<Vec<_>>(),
    })
}

fn gitea_issue(config: &Config, base_url: &str, i: &FakeIssue) -> Value {
    json!({
        "number": i.number,
        "title": i.title,
        "body": i.body,
        "state": i.state,
        "html_url": format!("{base_url}/{}/issues/{}", config.repo, i.number),
    })
}

fn gitea_list(items: Vec<Value>, query: &str) -> Response<Body> {
    // Gitea caps `limit` at its MAX_RESPONSE_ITEMS (50 by default).
    let limit = query_param(query, "limit")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30usize)
        .min(50);
    let page = query_param(query, "page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (items, _) = paged(items, page, limit);
    json_response(StatusCode::OK, &Value::Array(items))
}

fn gitea(config: &Config, d: &mut Data, r: &ForgeRequest, base_url: &str) -> Response<Body> {
    let segments: Vec<&str> = r.path.trim_matches('/').split('/').collect();
    let prefix: Vec<&str> = ["api", "v1", "repos"]
        .into_iter()
        .chain(config.repo.split('/'))
        .collect();
    if segments.len() <= prefix.len() || segments[..prefix.len()] != prefix[..] {
        return not_found();
    }
    let body = &r.body;
    match (r.method.as_str(), &segments[prefix.len()..]) {
        ("GET", ["pulls"]) => {
            let state = query_param(&r.query, "state").unwrap_or_else(|| "open".into());
            let items = d
                .pulls
                .iter()
                .filter(|p| state == "all" || p.state == state)
                .map(|p| gitea_pull(config, base_url, p, &d.labels))
                .collect();
            gitea_list(items, &r.query)
        }
        ("POST", ["pulls"]) => {
            let head = body["head"].as_str().unwrap_or_default().to_owned();
            let base = body["base"].as_str().unwrap_or_default().to_owned();
            if let Some(p) = d
                .pulls
                .iter()
                .find(|p| p.state == "open" && p.head == head && p.base == base)
            {
                return json_response(
                    StatusCode::CONFLICT,
                    &json!({"message": format!("pull request already exists for these targets [id: {0}, issue_id: {0}, head_repo_id: 1, base_repo_id: 1, head_branch: {head}, base_branch: {base}]", p.number)}),
                );
            }
            let number = next_number(d);
            let pull = FakePull {
                number,
                head,
                head_repo: config.repo.clone(),
                base,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["body"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
                labels: vec![],
            };
            let answer = gitea_pull(config, base_url, &pull, &d.labels);
            d.pulls.push(pull);
            json_response(StatusCode::CREATED, &answer)
        }
        ("PATCH", ["pulls", n]) => {
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            if let Some(state) = body["state"].as_str() {
                p.state = state.to_owned();
            }
            let p = p.clone();
            json_response(StatusCode::CREATED, &gitea_pull(config, base_url, &p, &d.labels))
        }
        ("GET", ["labels"]) => {
            let items = d
                .labels
                .iter()
                .map(|(id, name)| json!({"id": id, "name": name}))
                .collect();
            gitea_list(items, &r.query)
        }
        ("POST", ["labels"]) => {
            let name = body["name"].as_str().unwrap_or_default().to_owned();
            if body["color"].as_str().is_none_or(str::is_empty) {
                return json_response(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &json!({"message": "color is required"}),
                );
            }
            let id = 100 + d.labels.len() as u64;
            d.labels.push((id, name.clone()));
            json_response(StatusCode::CREATED, &json!({"id": id, "name": name}))
        }
        ("POST", ["issues", n, "labels"]) => {
            let ids: Vec<u64> = body["labels"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let names: Vec<String> = d
                .labels
                .iter()
                .filter(|(id, _)| ids.contains(id))
                .map(|(_, n)| n.clone())
                .collect();
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            for name in names {
                if !p.labels.contains(&name) {
                    p.labels.push(name);
                }
            }
            json_response(StatusCode::OK, &json!([]))
        }
        ("DELETE", ["issues", n, "labels", id]) => {
            let Some(name) = d
                .labels
                .iter()
                .find(|(i, _)| i.to_string() == *id)
                .map(|(_, n)| n.clone())
            else {
                return not_found();
            };
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            p.labels.retain(|l| *l != name);
            Response::builder()
                .status(StatusCode::NO_CONTENT)
                .body(Body::empty())
                .unwrap()
        }
        ("GET", ["issues"]) => {
            let state = query_param(&r.query, "state").unwrap_or_else(|| "open".into());
            // Without `type=issues`, Gitea lists pull requests too.
            let mut items: Vec<Value> = d
                .issues
                .iter()
                .filter(|i| state == "all" || i.state == state)
                .map(|i| gitea_issue(config, base_url, i))
                .collect();
            if query_param(&r.query, "type").as_deref() != Some("issues") {
                items.extend(
                    d.pulls
                        .iter()
                        .filter(|p| state == "all" || p.state == state)
                        .map(|p| json!({"number": p.number, "title": p.title, "body": p.body, "state": p.state, "pull_request": {"merged": false}})),
                );
            }
            gitea_list(items, &r.query)
        }
        ("POST", ["issues"]) => {
            let number = next_number(d);
            let issue = FakeIssue {
                number,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["body"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
            };
            let answer = gitea_issue(config, base_url, &issue);
            d.issues.push(issue);
            json_response(StatusCode::CREATED, &answer)
        }
        ("PATCH", ["issues", n]) => {
            let Some(i) = d.issues.iter_mut().find(|i| i.number.to_string() == *n) else {
                return not_found();
            };
            if let Some(text) = body["body"].as_str() {
                i.body = text.to_owned();
            }
            if let Some(state) = body["state"].as_str() {
                i.state = state.to_owned();
            }
            let answer = gitea_issue(config, base_url, i);
            json_response(StatusCode::CREATED, &answer)
        }
        ("POST", ["statuses", sha]) => {
            let mut status = body.clone();
            status["sha"] = json!(sha);
            d.statuses.push(status.clone());
            json_response(StatusCode::CREATED, &status)
        }
        _ => not_found(),
    }
}

// Azure DevOps 7.1 ---------------------------------------------------------------------

fn azure_pull(config: &Config, p: &FakePull) -> Value {
    let mut v = json!({
        "pullRequestId": p.number,
        "status": if p.state == "open" { "active" } else { p.state.as_str() },
        "title": p.title,
        "description": p.body,
        "sourceRefName": format!("refs/heads/{}", p.head),
        "targetRefName": format!("refs/heads/{}", p.base),
        "lastMergeSourceCommit": {"commitId": "0000000000000000000000000000000000000000"},
        "labels": p.labels.iter().map(|l| json!({"id": format!("label-{l}"), "name": l, "active": true})).collect::<Vec<_>>(),
    });
    if p.head_repo != config.repo {
        v["forkSource"] =
            json!({"name": format!("refs/heads/{}", p.head), "repository": {"name": p.head_repo}});
    }
    v
}

fn azure_work_item(base_url: &str, org_project: &str, i: &FakeIssue, fields: &WorkItemFields) -> Value {
    json!({
        "id": i.number,
        "rev": 1,
        "fields": {
            "System.Title": i.title,
            "System.Description": i.body,
            "System.Tags": fields.tags,
            "System.State": fields.state,
            "System.WorkItemType": "Issue",
        },
        "url": format!("{base_url}/{org_project}/_apis/wit/workItems/{}", i.number),
    })
}

fn azure(config: &Config, d: &mut Data, r: &ForgeRequest, base_url: &str) -> Response<Body> {
    if query_param(&r.query, "api-version").as_deref() != Some("7.1") {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"message": "VS800075: The project name is not supported or api-version is missing"}),
        );
    }
    let mut parts = config.repo.split('/');
    let (org, project, repo) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let segments: Vec<String> = r.path.trim_matches('/').split('/').map(decode).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    if segments.len() < 4 || segments[0] != org || segments[1] != project || segments[2] != "_apis" {
        return not_found();
    }
    let org_project = format!("{org}/{project}");
    let body = &r.body;
    let rest = &segments[3..];
    if rest.len() >= 3 && rest[..2] == ["git", "repositories"] {
        if rest[2] != repo {
            return json_response(
                StatusCode::NOT_FOUND,
                &json!({"message": "TF401019: The Git repository with name or identifier x does not exist or you do not have permissions for the operation you are attempting."}),
            );
        }
        return match (r.method.as_str(), &rest[3..]) {
            ("GET", ["pullrequests"]) => {
                let status =
                    query_param(&r.query, "searchCriteria.status").unwrap_or_else(|| "active".into());
                let target = query_param(&r.query, "searchCriteria.targetRefName");
                let top = query_param(&r.query, "$top")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(101usize);
                let skip = query_param(&r.query, "$skip")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0usize);
                let items: Vec<Value> = d
                    .pulls
                    .iter()
                    .filter(|p| status == "all" || (status == "active" && p.state == "open"))
                    .filter(|p| {
                        target
                            .as_ref()
                            .is_none_or(|t| *t == format!("refs/heads/{}", p.base))
                    })
                    .map(|p| azure_pull(config, p))
                    .skip(skip)
                    .take(top)
                    .collect();
                json_response(StatusCode::OK, &json!({"value": items, "count": items.len()}))
            }
            ("POST", ["pullrequests"]) => {
                let source = body["sourceRefName"].as_str().unwrap_or_default();
                let target = body["targetRefName"].as_str().unwrap_or_default();
                let (Some(head), Some(base)) = (
                    source.strip_prefix("refs/heads/"),
                    target.strip_prefix("refs/heads/"),
                ) else {
                    return json_response(
                        StatusCode::BAD_REQUEST,
                        &json!({"message": "TF401398: The pull request cannot be activated because the source and/or the target branch no longer exists"}),
                    );
                };
                if d.pulls
                    .iter()
                    .any(|p| p.state == "open" && p.head == head && p.base == base)
                {
                    return json_response(
                        StatusCode::CONFLICT,
                        &json!({"message": "TF401179: An active pull request for the source and target branch already exists.", "typeKey": "GitPullRequestExistsException"}),
                    );
                }
                let number = next_number(d);
                let pull = FakePull {
                    number,
                    head: head.to_owned(),
                    head_repo: config.repo.clone(),
                    base: base.to_owned(),
                    title: body["title"].as_str().unwrap_or_default().to_owned(),
                    body: body["description"].as_str().unwrap_or_default().to_owned(),
                    state: "open".into(),
                    labels: vec![],
                };
                let answer = azure_pull(config, &pull);
                d.pulls.push(pull);
                json_response(StatusCode::CREATED, &answer)
            }
            ("PATCH", ["pullrequests", n]) => {
                let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                    return not_found();
                };
                if body["status"] == "abandoned" {
                    p.state = "abandoned".into();
                }
                let p = p.clone();
                json_response(StatusCode::OK, &azure_pull(config, &p))
            }
            ("POST", ["pullRequests", n, "labels"]) => {
                let name = body["name"].as_str().unwrap_or_default().to_owned();
                let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                    return not_found();
                };
                if !p.labels.contains(&name) {
                    p.labels.push(name.clone());
                }
                json_response(
                    StatusCode::OK,
                    &json!({"id": format!("label-{name}"), "name": name, "active": true}),
                )
            }
            ("DELETE", ["pullRequests", n, "labels", name]) => {
                let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                    return not_found();
                };
                if !p.labels.iter().any(|l| l == name) {
                    return not_found();
                }
                p.labels.retain(|l| l != name);
                Response::builder()
                    .status(StatusCode::NO_CONTENT)
                    .body(Body::empty())
                    .unwrap()
            }
            ("POST", ["commits", sha, "statuses"]) => {
                let mut status = body.clone();
                status["sha"] = json!(sha);
                d.statuses.push(status.clone());
                json_response(StatusCode::CREATED, &status)
            }
            _ => not_found(),
        };
    }
    match (r.method.as_str(), rest) {
        ("GET", ["wit", "workitemtypes", "Issue", "states"]) => {
            let value: Vec<Value> = WORK_ITEM_STATES
                .iter()
                .map(|(name, category)| json!({"name": name, "color": "b2b2b2", "category": category}))
                .collect();
            json_response(StatusCode::OK, &json!({"count": value.len(), "value": value}))
        }
        ("POST", ["wit", "wiql"]) => {
            // The one query shape kalypso sends: a tag, a work item type, finished states.
            let query = body["query"].as_str().unwrap_or_default();
            let Some(tag) = query
                .split("[System.Tags] CONTAINS '")
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
            else {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"message": "TF51005: unsupported query"}),
                );
            };
            let finished: Vec<String> = query
                .split("[System.State] NOT IN (")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .map(|list| {
                    list.split(',')
                        .map(|s| s.trim().trim_matches('\'').to_owned())
                        .collect()
                })
                .unwrap_or_default();
            let items: Vec<Value> = d
                .issues
                .iter()
                .filter(|i| {
                    d.work_items
                        .get(&i.number)
                        .is_some_and(|f| f.tags.contains(tag) && !finished.contains(&f.state))
                })
                .map(|i| json!({"id": i.number, "url": format!("{base_url}/{org_project}/_apis/wit/workItems/{}", i.number)}))
                .collect();
            json_response(StatusCode::OK, &json!({"queryType": "flat", "workItems": items}))
        }
        ("GET", ["wit", "workitems"]) => {
            let ids: Vec<String> = query_param(&r.query, "ids")
                .unwrap_or_default()
                .split(',')
                .map(str::to_owned)
                .collect();
            if ids.len() > 200 {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    &json!({"message": "VS402337: too many ids"}),
                );
            }
            let value: Vec<Value> = d
                .issues
                .iter()
                .filter(|i| ids.contains(&i.number.to_string()))
                .map(|i| azure_work_item(base_url, &org_project, i, &d.work_items[&i.number]))
                .collect();
            json_response(StatusCode::OK, &json!({"count": value.len(), "value": value}))
        }
        ("POST", ["wit", "workitems", kind]) if kind.starts_with('$') => {
            if r.content_type.as_deref() != Some("application/json-patch+json") {
                return json_response(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    &json!({"message": "VS403404: content type must be application/json-patch+json"}),
                );
            }
            if *kind != "$Issue" {
                return json_response(
                    StatusCode::NOT_FOUND,
                    &json!({"message": "VS402323: Work item type does not exist"}),
                );
            }
            let number = next_number(d);
            let mut issue = FakeIssue {
                number,
                title: String::new(),
                body: String::new(),
                state: "open".into(),
            };
            let mut fields = WorkItemFields {
                tags: String::new(),
                state: "To Do".into(),
            };
            apply_patch(body, &mut issue, &mut fields);
            let answer = azure_work_item(base_url, &org_project, &issue, &fields);
            d.issues.push(issue);
            d.work_items.insert(number, fields);
            json_response(StatusCode::OK, &answer)
        }
        ("PATCH", ["wit", "workitems", n]) => {
            if r.content_type.as_deref() != Some("application/json-patch+json") {
                return json_response(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    &json!({"message": "VS403404: content type must be application/json-patch+json"}),
                );
            }
            let Some(i) = d.issues.iter_mut().find(|i| i.number.to_string() == *n) else {
                return not_found();
            };
            let fields = d.work_items.entry(i.number).or_default();
            apply_patch(body, i, fields);
            let answer = azure_work_item(base_url, &org_project, i, fields);
            json_response(StatusCode::OK, &answer)
        }
        _ => not_found(),
    }
}

/// Applies a JSON Patch document to a work item's fields.
fn apply_patch(operations: &Value, issue: &mut FakeIssue, fields: &mut WorkItemFields) {
    for op in operations.as_array().into_iter().flatten() {
        let value = op["value"].as_str().unwrap_or_default().to_owned();
        match op["path"].as_str().unwrap_or_default() {
            "/fields/System.Title" => issue.title = value,
            "/fields/System.Description" => issue.body = value,
            "/fields/System.Tags" => fields.tags = value,
            "/fields/System.State" => {
                if WORK_ITEM_STATES
                    .iter()
                    .any(|(s, c)| *s == value && *c == "Completed")
                {
                    issue.state = "closed".into();
                }
                fields.state = value;
            }
            _ => {}
        }
    }
}
