//! A GitHub REST stand-in on loopback: the pull-request, label and issue endpoints kalypso
//! calls, with GitHub's answers (including its 422 for a duplicate pull request and issues
//! listing pull requests too), every request recorded, and failures on demand.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use serde_json::{Value, json};

/// One request the stand-in received.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Query string.
    pub query: String,
    /// JSON body (`null` if none).
    pub body: Value,
    /// `Authorization` header.
    pub authorization: Option<String>,
}

/// A pull request held by the stand-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakePull {
    /// Number.
    pub number: u64,
    /// Head branch.
    pub head: String,
    /// Head repository (`owner/name`).
    pub head_repo: String,
    /// Base branch.
    pub base: String,
    /// Title.
    pub title: String,
    /// Text.
    pub body: String,
    /// `open` or `closed`.
    pub state: String,
    /// Labels.
    pub labels: Vec<String>,
}

/// An issue held by the stand-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeIssue {
    /// Number.
    pub number: u64,
    /// Title.
    pub title: String,
    /// Text.
    pub body: String,
    /// `open` or `closed`.
    pub state: String,
}

#[derive(Default)]
struct Data {
    requests: Vec<Recorded>,
    pulls: Vec<FakePull>,
    issues: Vec<FakeIssue>,
    next: u64,
    fail: crate::loopback::Failures,
    hide_pulls: u32,
    statuses: Vec<Value>,
}

/// The running stand-in; stops with its runtime.
#[derive(Clone)]
pub struct FakeGitHub {
    port: u16,
    data: Arc<Mutex<Data>>,
}

impl std::fmt::Debug for FakeGitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGitHub").field("port", &self.port).finish()
    }
}

impl FakeGitHub {
    /// Starts the stand-in on a free loopback port.
    pub fn start(runtime: &tokio::runtime::Handle) -> FakeGitHub {
        let data = Arc::new(Mutex::new(Data {
            next: 1,
            ..Data::default()
        }));
        let app = Router::new().fallback(handle).with_state(data.clone());
        let port = crate::loopback::serve(runtime, app);
        FakeGitHub { port, data }
    }

    /// The API base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.data.lock().unwrap().requests.clone()
    }

    /// Requests whose method is `method` and path ends with `suffix`.
    pub fn requests_to(&self, method: &str, suffix: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .collect()
    }

    /// Every pull request.
    pub fn pulls(&self) -> Vec<FakePull> {
        self.data.lock().unwrap().pulls.clone()
    }

    /// Every issue.
    pub fn issues(&self) -> Vec<FakeIssue> {
        self.data.lock().unwrap().issues.clone()
    }

    /// Every commit status set, oldest first (`state`, `context`, `description`, `sha`).
    pub fn statuses(&self) -> Vec<Value> {
        self.data.lock().unwrap().statuses.clone()
    }

    /// Adds a pull request (someone else's, or an old one of the scheduler).
    pub fn add_pull(&self, head: &str, head_repo: &str, base: &str) -> u64 {
        let mut d = self.data.lock().unwrap();
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

    /// Adds an open issue.
    pub fn add_issue(&self, title: &str, body: &str) -> u64 {
        let mut d = self.data.lock().unwrap();
        let number = d.next;
        d.next += 1;
        d.issues.push(FakeIssue {
            number,
            title: title.into(),
            body: body.into(),
            state: "open".into(),
        });
        number
    }

    /// The next `lists` listings of pull requests come back empty, as if another run opened
    /// its pull request between a listing and a creation.
    pub fn hide_pulls_from_next_lists(&self, lists: u32) {
        self.data.lock().unwrap().hide_pulls = lists;
    }

    /// Forgets every failure rule.
    pub fn clear_failures(&self) {
        self.data.lock().unwrap().fail.clear();
    }

    /// Answers the next `times` requests `method` to paths ending with `suffix` with 502.
    pub fn fail(&self, method: &str, suffix: &str, times: u32) {
        self.data.lock().unwrap().fail.add(method, suffix, times);
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn pull_json(base_url: &str, owner_repo: &str, p: &FakePull) -> Value {
    json!({
        "number": p.number,
        "html_url": format!("{base_url}/{owner_repo}/pull/{}", p.number),
        "state": p.state,
        "title": p.title,
        "body": p.body,
        "head": {"ref": p.head, "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": p.head_repo}},
        "base": {"ref": p.base, "sha": "0000000000000000000000000000000000000000", "repo": {"full_name": owner_repo}},
        "labels": p.labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>(),
    })
}

fn issue_json(base_url: &str, owner_repo: &str, i: &FakeIssue) -> Value {
    json!({
        "number": i.number,
        "title": i.title,
        "body": i.body,
        "state": i.state,
        "html_url": format!("{base_url}/{owner_repo}/issues/{}", i.number),
    })
}

fn query_param<'q>(query: &'q str, key: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
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

fn page<T: Clone>(items: Vec<T>, query: &str) -> Vec<T> {
    let per_page: usize = query_param(query, "per_page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let page: usize = query_param(query, "page")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    items
        .into_iter()
        .skip(per_page * (page.max(1) - 1))
        .take(per_page)
        .collect()
}

async fn handle(
    State(data): State<Arc<Mutex<Data>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or_default().to_owned();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let host = headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1")
        .to_owned();
    let base_url = format!("http://{host}");
    let mut d = data.lock().unwrap();
    d.requests.push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        body: body.clone(),
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    });
    if d.fail.take(method.as_str(), &path) {
        return json_response(StatusCode::BAD_GATEWAY, &json!({"message": "Server Error"}));
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let not_found = || json_response(StatusCode::NOT_FOUND, &json!({"message": "Not Found"}));
    if segments.len() < 4 || segments[0] != "repos" {
        return not_found();
    }
    let owner_repo = format!("{}/{}", segments[1], segments[2]);
    let rest = &segments[3..];
    match (method.as_str(), rest) {
        ("GET", ["pulls"]) => {
            if d.hide_pulls > 0 {
                d.hide_pulls -= 1;
                return json_response(StatusCode::OK, &json!([]));
            }
            let state = query_param(&query, "state").unwrap_or("open").to_owned();
            let base = query_param(&query, "base").map(decode);
            let items: Vec<Value> = d
                .pulls
                .iter()
                .filter(|p| state == "all" || p.state == state)
                .filter(|p| base.as_ref().is_none_or(|b| &p.base == b))
                .map(|p| pull_json(&base_url, &owner_repo, p))
                .collect();
            json_response(StatusCode::OK, &Value::Array(page(items, &query)))
        }
        ("POST", ["pulls"]) => {
            let head = body["head"].as_str().unwrap_or_default().to_owned();
            let base = body["base"].as_str().unwrap_or_default().to_owned();
            if d.pulls
                .iter()
                .any(|p| p.state == "open" && p.head == head && p.base == base)
            {
                return json_response(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for {}:{head}.", segments[1])}]}),
                );
            }
            let number = d.next;
            d.next += 1;
            let pull = FakePull {
                number,
                head,
                head_repo: owner_repo.clone(),
                base,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["body"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
                labels: vec![],
            };
            let answer = pull_json(&base_url, &owner_repo, &pull);
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
            let answer = pull_json(&base_url, &owner_repo, p);
            json_response(StatusCode::OK, &answer)
        }
        ("POST", ["issues", n, "labels"]) => {
            let labels: Vec<String> = body["labels"]
                .as_array()
                .map(|a| a.iter().filter_map(|l| l.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            for l in labels {
                if !p.labels.contains(&l) {
                    p.labels.push(l);
                }
            }
            let answer: Vec<Value> = p.labels.iter().map(|l| json!({"name": l})).collect();
            json_response(StatusCode::OK, &Value::Array(answer))
        }
        ("DELETE", ["issues", n, "labels", label]) => {
            let label = decode(label);
            let Some(p) = d.pulls.iter_mut().find(|p| p.number.to_string() == *n) else {
                return not_found();
            };
            if !p.labels.contains(&label) {
                return json_response(StatusCode::NOT_FOUND, &json!({"message": "Label does not exist"}));
            }
            p.labels.retain(|l| *l != label);
            let answer: Vec<Value> = p.labels.iter().map(|l| json!({"name": l})).collect();
            json_response(StatusCode::OK, &Value::Array(answer))
        }
        ("GET", ["issues"]) => {
            let state = query_param(&query, "state").unwrap_or("open").to_owned();
            // GitHub lists pull requests among issues, marked with `pull_request`.
            let mut items: Vec<(u64, Value)> = d
                .issues
                .iter()
                .filter(|i| state == "all" || i.state == state)
                .map(|i| (i.number, issue_json(&base_url, &owner_repo, i)))
                .collect();
            items.extend(d.pulls.iter().filter(|p| state == "all" || p.state == state).map(|p| {
                (
                    p.number,
                    json!({"number": p.number, "title": p.title, "body": p.body, "state": p.state, "pull_request": {"url": "x"}}),
                )
            }));
            items.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
            let items: Vec<Value> = items.into_iter().map(|(_, v)| v).collect();
            json_response(StatusCode::OK, &Value::Array(page(items, &query)))
        }
        ("POST", ["issues"]) => {
            let number = d.next;
            d.next += 1;
            let issue = FakeIssue {
                number,
                title: body["title"].as_str().unwrap_or_default().to_owned(),
                body: body["body"].as_str().unwrap_or_default().to_owned(),
                state: "open".into(),
            };
            let answer = issue_json(&base_url, &owner_repo, &issue);
            d.issues.push(issue);
            json_response(StatusCode::CREATED, &answer)
        }
        ("PATCH", ["issues", n]) => {
            let Some(i) = d.issues.iter_mut().find(|i| i.number.to_string() == *n) else {
                return not_found();
            };
            if let Some(state) = body["state"].as_str() {
                i.state = state.to_owned();
            }
            if let Some(text) = body["body"].as_str() {
                i.body = text.to_owned();
            }
            let answer = issue_json(&base_url, &owner_repo, i);
            json_response(StatusCode::OK, &answer)
        }
        ("POST", ["statuses", sha]) => {
            let status = json!({
                "state": body["state"],
                "context": body["context"],
                "description": body["description"],
                "sha": sha,
            });
            d.statuses.push(status.clone());
            json_response(StatusCode::CREATED, &status)
        }
        _ => not_found(),
    }
}
