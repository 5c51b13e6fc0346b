//! Git's smart HTTP protocol on loopback: `git http-backend` (the CGI program shipped with
//! git) behind a tiny axum server that can require a token, fail requests on purpose, run a
//! hook before the first push, and record what it was asked.

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, StatusCode, Uri};
use base64::Engine as _;

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Shared {
    requests: Vec<String>,
    authorizations: Vec<String>,
    fail_next: u32,
    failed: u32,
    before_push: VecDeque<Hook>,
}

struct Config {
    root: PathBuf,
    token: Option<String>,
    shared: Mutex<Shared>,
}

/// A running server; stops when the runtime does.
pub struct GitHttpServer {
    port: u16,
    config: Arc<Config>,
}

impl std::fmt::Debug for GitHttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHttpServer").field("port", &self.port).finish()
    }
}

impl GitHttpServer {
    /// Serves the repositories under `root` (as `http://127.0.0.1:<port>/<name>`), requiring
    /// HTTP basic authentication with password `token` when given.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        root: impl Into<PathBuf>,
        token: Option<&str>,
    ) -> GitHttpServer {
        let config = Arc::new(Config {
            root: root.into(),
            token: token.map(str::to_owned),
            shared: Mutex::new(Shared::default()),
        });
        let app = Router::new().fallback(handle).with_state(config.clone());
        let port = crate::loopback::serve(runtime, app);
        GitHttpServer { port, config }
    }

    /// The URL of repository `name` (a folder under the root).
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// The URL with credentials written into it.
    pub fn url_with_credentials(&self, name: &str, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@127.0.0.1:{}/{name}", self.port)
    }

    /// Answer the next `n` requests with `503 Service Unavailable`.
    pub fn fail_next(&self, n: u32) {
        self.config.shared.lock().unwrap().fail_next = n;
    }

    /// Requests failed on purpose so far.
    pub fn failed(&self) -> u32 {
        self.config.shared.lock().unwrap().failed
    }

    /// Runs `hook` before serving the next push (its ref advertisement), e.g. to let
    /// "someone else" push first.
    pub fn before_next_push(&self, hook: impl FnOnce() + Send + 'static) {
        self.config
            .shared
            .lock()
            .unwrap()
            .before_push
            .push_back(Box::new(hook));
    }

    /// `METHOD /path?query` of every request, in order.
    pub fn requests(&self) -> Vec<String> {
        self.config.shared.lock().unwrap().requests.clone()
    }

    /// Every `Authorization` header received, decoded (`user:password`).
    pub fn authorizations(&self) -> Vec<String> {
        self.config.shared.lock().unwrap().authorizations.clone()
    }
}

fn respond(status: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(Body::from(body.to_owned()));
    *r.status_mut() = status;
    r
}

async fn handle(
    State(config): State<Arc<Config>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let query = uri.query().unwrap_or_default().to_owned();
    let path = uri.path().to_owned();
    let hook = {
        let mut shared = config.shared.lock().unwrap();
        shared.requests.push(format!("{method} {path}?{query}"));
        if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
            let decoded = auth
                .strip_prefix("Basic ")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|| auth.to_owned());
            shared.authorizations.push(decoded);
        }
        if shared.fail_next > 0 {
            shared.fail_next -= 1;
            shared.failed += 1;
            return respond(StatusCode::SERVICE_UNAVAILABLE, "try again later");
        }
        if query.contains("service=git-receive-pack") && method == Method::GET {
            shared.before_push.pop_front()
        } else {
            None
        }
    };
    if let Some(token) = &config.token {
        let ok = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .is_some_and(|pair| pair.split_once(':').is_some_and(|(_, p)| p == token));
        if !ok {
            let mut r = respond(StatusCode::UNAUTHORIZED, "authentication required");
            r.headers_mut()
                .insert("www-authenticate", "Basic realm=\"git\"".parse().unwrap());
            return r;
        }
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let root = config.root.clone();
    let result = tokio::task::spawn_blocking(move || {
        if let Some(hook) = hook {
            hook();
        }
        cgi(&root, &method, &path, &query, &content_type, &encoding, &body)
    })
    .await;
    match result {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => respond(StatusCode::INTERNAL_SERVER_ERROR, &e),
        Err(e) => respond(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn cgi(
    root: &std::path::Path,
    method: &Method,
    path: &str,
    query: &str,
    content_type: &str,
    encoding: &str,
    body: &[u8],
) -> Result<Response<Body>, String> {
    let mut child = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.receivepack")
        .env("GIT_CONFIG_VALUE_0", "true")
        .env("REMOTE_USER", "kalypso-test")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", encoding)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let input = body.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    let _ = writer.join();
    let out = output.stdout;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| (p, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2)))
        .ok_or_else(|| format!("bad CGI output: {}", String::from_utf8_lossy(&output.stderr)))?;
    let head = String::from_utf8_lossy(&out[..split.0]).into_owned();
    let mut response = Response::new(Body::from(out[split.0 + split.1..].to_vec()));
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value
                .split_whitespace()
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(500);
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::try_from(name.trim()),
            axum::http::HeaderValue::try_from(value),
        ) {
            response.headers_mut().append(n, v);
        }
    }
    Ok(response)
}
