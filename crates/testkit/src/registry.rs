//! A real OCI registry on loopback: Debian's `docker-registry` (distribution 2.8) started with
//! a configuration of its own in a temporary folder (storage there, `http.addr` on a free
//! loopback port, optionally htpasswd basic authentication), behind a small proxy that
//! records every request, can fail chosen requests on purpose, and can stand in for a token
//! service (answering `401` with a `Bearer` challenge and issuing tokens for credentials), so
//! that the `Bearer` flow is exercised against the real registry too.
//!
//! The registry binary is required where services are (`CI` or
//! `KALYPSO_TEST_REQUIRE_SERVICES` set): a test that does not find it fails there, and
//! elsewhere prints one line saying it was skipped and what to install.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, Response, StatusCode};
use base64::Engine as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Where Debian installs the registry.
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

/// One request the proxy forwarded (or refused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryRequest {
    /// The method.
    pub method: String,
    /// The path and query.
    pub path: String,
    /// The status answered.
    pub status: u16,
}

type FailRule = Box<dyn Fn(&str, &str) -> bool + Send>;

#[derive(Default)]
struct Shared {
    requests: Vec<RegistryRequest>,
    fail: Option<FailRule>,
    failed: u32,
    /// Bearer mode: the accepted `user:password`, the tokens issued, the scopes asked for.
    bearer: Option<String>,
    /// Bearer mode: the refresh token accepted by the OAuth2 POST, if any.
    refresh: Option<String>,
    tokens: Vec<String>,
    scopes: Vec<String>,
}

struct Proxy {
    upstream: String,
    port: u16,
    client: Client<HttpConnector, Body>,
    shared: Mutex<Shared>,
}

/// A running registry; stopped when dropped.
pub struct TestRegistry {
    child: Child,
    dir: tempfile::TempDir,
    registry_port: u16,
    proxy: Arc<Proxy>,
    /// The proxy's runtime (`None` once dropped).
    runtime: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for TestRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestRegistry")
            .field("host", &self.host())
            .finish_non_exhaustive()
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Without waiting: the registry may be dropped inside an async test.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Whether tests must have their services (CI).
pub fn services_required() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set("KALYPSO_TEST_REQUIRE_SERVICES")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The registry binary, or `None` after the skip line (panics where services are required).
fn registry_binary(who: &str) -> Option<PathBuf> {
    let bin = std::env::var_os("KALYPSO_DOCKER_REGISTRY")
        .map_or_else(|| PathBuf::from(REGISTRY_BIN), PathBuf::from);
    if bin.is_file() {
        return Some(bin);
    }
    assert!(
        !services_required(),
        "{who} need a real OCI registry: install Debian's docker-registry (apt-get install -y \
         docker-registry skopeo apache2-utils), as .ci/run does, or point KALYPSO_DOCKER_REGISTRY at the binary"
    );
    eprintln!(
        "skipped: {who} need Debian's docker-registry ({}), not installed (apt-get install docker-registry skopeo apache2-utils)",
        bin.display()
    );
    None
}

/// Whether `command` runs (for skopeo and htpasswd), with the same rule as the registry.
pub fn require_tool(command: &str, who: &str) -> bool {
    let found = Command::new(command)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
        || Command::new("sh")
            .args(["-c", &format!("command -v {command}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if found {
        return true;
    }
    assert!(
        !services_required(),
        "{who} need {command}: apt-get install -y docker-registry skopeo apache2-utils (as .ci/run does)"
    );
    eprintln!("skipped: {who} need {command}, not installed (apt-get install skopeo apache2-utils)");
    false
}

impl TestRegistry {
    /// Starts an open registry (no authentication). `None` when it cannot be found here and
    /// services are not required.
    pub fn start(who: &str) -> Option<TestRegistry> {
        TestRegistry::start_with(who, None)
    }

    /// Starts a registry that requires HTTP basic authentication as `user`/`password`
    /// (htpasswd, bcrypt, as `htpasswd -B` writes it).
    pub fn start_with_basic_auth(who: &str, user: &str, password: &str) -> Option<TestRegistry> {
        if !require_tool("htpasswd", who) {
            return None;
        }
        TestRegistry::start_with(who, Some((user, password)))
    }

    fn start_with(who: &str, basic: Option<(&str, &str)>) -> Option<TestRegistry> {
        let bin = registry_binary(who)?;
        let dir = tempfile::tempdir().unwrap();
        let registry_port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  maintenance:\n    uploadpurging:\n      enabled: false\nhttp:\n  addr: 127.0.0.1:{registry_port}\n  secret: kalypso-test-secret\n",
            dir.path().join("data").display()
        );
        if let Some((user, password)) = basic {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd runs");
            assert!(out.status.success(), "htpasswd failed: {out:?}");
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, &out.stdout).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: kalypso-test\n    path: {}\n",
                file.display()
            ));
        }
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(&bin)
            .arg("serve")
            .arg(&config_path)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", registry_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not start; its log:\n{}",
                std::fs::read_to_string(dir.path().join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Arc::new(Proxy {
            upstream: format!("http://127.0.0.1:{registry_port}"),
            port,
            client: Client::builder(TokioExecutor::new()).build_http(),
            shared: Mutex::new(Shared::default()),
        });
        let app = Router::new().fallback(forward).with_state(proxy.clone());
        {
            let _context = runtime.enter();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            runtime.spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
        }
        Some(TestRegistry {
            child,
            dir,
            registry_port,
            proxy,
            runtime: Some(runtime),
        })
    }

    /// `127.0.0.1:PORT`: the registry as clients reach it (through the proxy).
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.proxy.port)
    }

    /// `127.0.0.1:PORT` of the registry itself, past the proxy.
    pub fn direct_host(&self) -> String {
        format!("127.0.0.1:{}", self.registry_port)
    }

    /// `oci://HOST/PATH` through the proxy.
    pub fn location(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.host())
    }

    /// The registry's storage folder.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The registry's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// A folder for the test's own files, removed with the registry.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Every request so far, in order (token requests included, as `GET /token?…`).
    pub fn requests(&self) -> Vec<RegistryRequest> {
        self.proxy.shared.lock().unwrap().requests.clone()
    }

    /// Forgets the requests recorded so far.
    pub fn clear_requests(&self) {
        self.proxy.shared.lock().unwrap().requests.clear();
    }

    /// Answers every request for which `rule(method, path)` holds with `500` (instead of
    /// forwarding it), until [`TestRegistry::heal`].
    pub fn fail_when(&self, rule: impl Fn(&str, &str) -> bool + Send + 'static) {
        self.proxy.shared.lock().unwrap().fail = Some(Box::new(rule));
    }

    /// Stops failing requests.
    pub fn heal(&self) {
        self.proxy.shared.lock().unwrap().fail = None;
    }

    /// Requests failed on purpose so far.
    pub fn failed(&self) -> u32 {
        self.proxy.shared.lock().unwrap().failed
    }

    /// Makes the proxy require bearer tokens, issued by its token service
    /// (`http://HOST/token`) to `user`/`password` (basic authentication on the token request).
    pub fn require_bearer(&self, user: &str, password: &str) {
        self.proxy.shared.lock().unwrap().bearer = Some(format!("{user}:{password}"));
    }

    /// Makes the token service also accept OAuth2 POSTs with `refresh_token` (what a Docker
    /// config's `identitytoken` is exchanged with).
    pub fn accept_refresh_token(&self, refresh_token: &str) {
        self.proxy.shared.lock().unwrap().refresh = Some(refresh_token.to_owned());
    }

    /// The scopes the token service was asked for, in order.
    pub fn token_scopes(&self) -> Vec<String> {
        self.proxy.shared.lock().unwrap().scopes.clone()
    }

    /// Runs `skopeo` with `args` (`--tls-verify=false` is the caller's); its standard output.
    pub fn skopeo(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("skopeo")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run skopeo: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

fn status(code: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_owned()));
    *response.status_mut() = code;
    response
}

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

/// `application/x-www-form-urlencoded` decoding.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                match text
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn forward(State(proxy): State<Arc<Proxy>>, request: Request<Body>) -> Response<Body> {
    let method = request.method().to_string();
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let record = |code: u16| {
        proxy.shared.lock().unwrap().requests.push(RegistryRequest {
            method: method.clone(),
            path: path.clone(),
            status: code,
        });
    };
    // The token service of bearer mode: GET with basic authentication, or an OAuth2 POST
    // with a refresh token (Docker's `identitytoken`).
    if request.uri().path() == "/token" {
        let query = request.uri().query().unwrap_or_default().to_owned();
        let authorization = request
            .headers()
            .get("Authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let post = request.method() == axum::http::Method::POST;
        let form = if post {
            let body = axum::body::to_bytes(request.into_body(), 1 << 16)
                .await
                .unwrap_or_default();
            String::from_utf8_lossy(&body).into_owned()
        } else {
            String::new()
        };
        let mut shared = proxy.shared.lock().unwrap();
        let (Some(expected), refresh) = (shared.bearer.clone(), shared.refresh.clone()) else {
            drop(shared);
            record(404);
            return status(StatusCode::NOT_FOUND, "");
        };
        let (allowed, scope) = if post {
            let ok = query_value(&form, "grant_type").as_deref() == Some("refresh_token")
                && refresh.is_some()
                && query_value(&form, "refresh_token") == refresh;
            (ok, query_value(&form, "scope").unwrap_or_default())
        } else {
            (
                authorization.as_deref() == Some(expected.as_str()),
                query_value(&query, "scope").unwrap_or_default(),
            )
        };
        if !allowed {
            drop(shared);
            record(401);
            return status(StatusCode::UNAUTHORIZED, r#"{"details":"bad credentials"}"#);
        }
        shared.scopes.push(scope.clone());
        let token = format!("tok-{}-{}", shared.tokens.len(), scope.len());
        shared.tokens.push(format!("{token}|{scope}"));
        drop(shared);
        record(200);
        // An OAuth2 answer names the token `access_token`; the Docker one `token`.
        let key = if post { "access_token" } else { "token" };
        let mut response = status(
            StatusCode::OK,
            &format!(r#"{{"{key}":"{token}","expires_in":300}}"#),
        );
        response
            .headers_mut()
            .insert("Content-Type", "application/json".parse().unwrap());
        return response;
    }
    let (fail, bearer_ok) = {
        let mut shared = proxy.shared.lock().unwrap();
        let fail = shared.fail.as_ref().is_some_and(|rule| rule(&method, &path));
        if fail {
            shared.failed += 1;
        }
        let bearer_ok = match &shared.bearer {
            None => true,
            Some(_) => {
                let repo = request.uri().path().strip_prefix("/v2/").and_then(|p| {
                    ["/manifests/", "/blobs/", "/tags/"]
                        .iter()
                        .find_map(|sep| p.split_once(sep).map(|(name, _)| name.to_owned()))
                });
                let token = request
                    .headers()
                    .get("Authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(str::to_owned);
                let writes = !matches!(method.as_str(), "GET" | "HEAD");
                match (repo, token) {
                    (None, _) if request.uri().path() == "/v2/" => true,
                    (Some(repo), Some(token)) => shared.tokens.iter().any(|t| {
                        let (tok, scope) = t.split_once('|').unwrap_or_default();
                        tok == token
                            && scope.starts_with(&format!("repository:{repo}:"))
                            && (!writes || scope.ends_with("push"))
                    }),
                    _ => false,
                }
            }
        };
        (fail, bearer_ok)
    };
    if fail {
        record(500);
        return status(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"errors":[{"code":"UNKNOWN","message":"failed on purpose by the test"}]}"#,
        );
    }
    if !bearer_ok {
        record(401);
        let repo = request
            .uri()
            .path()
            .strip_prefix("/v2/")
            .and_then(|p| p.split_once("/manifests/").or_else(|| p.split_once("/blobs/")))
            .map(|(name, _)| name.to_owned())
            .unwrap_or_default();
        let mut response = status(
            StatusCode::UNAUTHORIZED,
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
        );
        response.headers_mut().insert(
            "WWW-Authenticate",
            format!(
                "Bearer realm=\"http://127.0.0.1:{}/token\",service=\"kalypso-test\",scope=\"repository:{repo}:pull\"",
                proxy.port
            )
            .parse()
            .unwrap(),
        );
        return response;
    }
    let (mut parts, body) = request.into_parts();
    let upstream: axum::http::Uri = format!("{}{}", proxy.upstream, path).parse().unwrap();
    parts.uri = upstream;
    // In bearer mode the registry itself is open: the proxy's token stands in for its auth.
    if proxy.shared.lock().unwrap().bearer.is_some() {
        parts.headers.remove("Authorization");
    }
    let forwarded = Request::from_parts(parts, body);
    match proxy.client.request(forwarded).await {
        Ok(response) => {
            record(response.status().as_u16());
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            record(502);
            status(StatusCode::BAD_GATEWAY, &e.to_string())
        }
    }
}
