//! A registry client for the few calls delivery and reading need, over the OCI distribution
//! API (`/v2/<name>/manifests/<reference>`, `/v2/<name>/blobs/<digest>`, blob uploads).
//!
//! Authentication follows the registry's challenges, as `docker` and Flux do: a request is
//! first sent as is; a `401` names the scheme in `WWW-Authenticate`. `Basic` means HTTP basic
//! authentication with the host's credentials on every later request. `Bearer
//! realm=…,service=…,scope=…` means a token from the token service at `realm`, asked for the
//! repository and the actions needed (`repository:<name>:pull` or `pull,push`), with the
//! host's credentials as basic authentication (or an identity token as an OAuth2 refresh
//! token); tokens are kept per repository until they expire, and once a host is known to
//! want them a token is fetched before the first request to a new repository, saving the
//! `401` round trip. A registry on this machine (`localhost`, `127.0.0.1`, `[::1]`) or named
//! as insecure is reached over plain HTTP; every other over HTTPS.
//!
//! Network failures, `429` and `5xx` answers are retried with exponential backoff; every
//! request is safe to repeat (an upload starts again from its `POST`). Errors name the
//! operation, the registry and the repository, and carry the registry's own error code and
//! message; never a credential (requests are built without user information, tokens travel
//! only in headers, and the `Authorization` header is never sent to another host a registry
//! redirects or points an upload to).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine;
use serde::Deserialize;
use ureq::http::{Response, StatusCode};
use ureq::{Agent, Body};

use crate::auth::{self, AuthSettings, Credential, Credentials, Secret};
use crate::digest::Digest;
use crate::reference::Location;

/// The media type of OCI image manifests, which kalypso writes.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// What manifest GETs accept: OCI and Docker manifests and indexes.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";
/// The largest manifest read (the distribution specification's recommended limit).
pub const MAX_MANIFEST: u64 = 4 << 20;
/// The most of an error body read.
const MAX_ERROR_BODY: u64 = 64 << 10;
/// How long a token lives when the token service does not say (the specification's default).
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(60);
/// The user agent of every request.
const USER_AGENT: &str = concat!("kalypso/", env!("CARGO_PKG_VERSION"));

/// How often and how patiently to retry a failed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (at least 1).
    pub attempts: u32,
    /// Wait before the second attempt.
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl Retry {
    /// The wait after failed attempt number `attempt` (1-based).
    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// A failed registry call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The registry cannot be reached (or the connection broke).
    #[error("{operation}: cannot reach {host}: {reason}")]
    Network {
        /// What was being done.
        operation: String,
        /// The registry.
        host: String,
        /// Why.
        reason: String,
    },
    /// The registry answered with an error.
    #[error("{operation}: the registry answered {status}{message}")]
    Status {
        /// What was being done.
        operation: String,
        /// The HTTP status.
        status: u16,
        /// The registry's error codes and messages (`: CODE: message`), if any.
        message: String,
    },
    /// Authentication failed or is missing.
    #[error("{operation}: {reason}")]
    Unauthorized {
        /// What was being done.
        operation: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The registry sent something kalypso cannot use (a digest that does not match, a
    /// manifest that is not JSON…).
    #[error("{operation}: {reason}")]
    Invalid {
        /// What was being done.
        operation: String,
        /// What is wrong.
        reason: String,
    },
    /// Credentials cannot be loaded.
    #[error(transparent)]
    Credentials(#[from] auth::Error),
}

impl Error {
    /// Whether trying again later may succeed (network trouble, a busy or failing registry).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Network { .. } => true,
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// The actions a request needs on its repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reading.
    Pull,
    /// Reading and writing.
    Push,
}

impl Access {
    fn actions(self) -> &'static str {
        match self {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        }
    }
}

/// How a registry host wants to be authenticated, as learnt from its challenges.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scheme {
    /// Basic authentication on every request.
    Basic,
    /// Tokens from a token service.
    Bearer { realm: String, service: Option<String> },
}

/// A token from a token service.
#[derive(Clone, Debug)]
struct Token {
    value: Secret,
    expires: Instant,
}

/// The answer of a token service.
#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// A registry error body: `{"errors": [{"code": "...", "message": "..."}]}`.
#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    errors: Vec<ErrorEntry>,
}

#[derive(Deserialize)]
struct ErrorEntry {
    #[serde(default)]
    code: String,
    #[serde(default)]
    message: String,
}

/// Sends one request, given the `Authorization` header to use.
type SendRequest<'a> = dyn Fn(Option<&str>) -> Result<Response<Body>, ureq::Error> + 'a;

/// Counts of what a client did (for reports and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// HTTP requests sent to registries (token services not counted).
    pub requests: u64,
    /// Blobs uploaded.
    pub blobs_uploaded: u64,
    /// Bytes of blobs uploaded.
    pub bytes_uploaded: u64,
    /// Manifests written.
    pub manifests_written: u64,
    /// Bytes of blobs downloaded.
    pub bytes_downloaded: u64,
    /// Requests retried after a transient failure.
    pub retries: u64,
}

/// A registry client (thread-safe: delivery uploads from several threads at once).
pub struct Registry {
    agent: Agent,
    credentials: Credentials,
    insecure: HashSet<String>,
    retry: Retry,
    schemes: Mutex<HashMap<String, Scheme>>,
    tokens: Mutex<HashMap<(String, String, Access), Token>>,
    traffic: Mutex<Traffic>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("credentials", &self.credentials)
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

/// A header value carrying credentials (never logged).
fn basic(username: &str, password: &Secret) -> String {
    let pair = format!("{username}:{}", password.expose());
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
}

/// The parameters of a `WWW-Authenticate` challenge: its scheme and `key="value"` pairs.
fn parse_challenge(header: &str) -> Option<(String, HashMap<String, String>)> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(char::is_whitespace).unwrap_or((header, ""));
    let mut params = HashMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let key = key.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    other => value.push(other),
                }
            }
            (value, &quoted[end..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        params.insert(key, value);
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some((scheme.to_ascii_lowercase(), params))
}

impl Registry {
    /// A client with the credentials and insecure registries `settings` name.
    pub fn new(settings: &AuthSettings, retry: Retry) -> Result<Registry, Error> {
        let credentials = Credentials::load(settings)?;
        Ok(Registry::with_credentials(
            credentials,
            settings.insecure.iter().map(|h| h.to_ascii_lowercase()).collect(),
            retry,
        ))
    }

    /// A client with these credentials, reaching the `insecure` registries over plain HTTP.
    pub fn with_credentials(credentials: Credentials, insecure: HashSet<String>, retry: Retry) -> Registry {
        let agent: Agent = Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(USER_AGENT)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_global(Some(Duration::from_secs(600)))
            .max_idle_connections_per_host(32)
            .max_idle_connections(64)
            .build()
            .into();
        Registry {
            agent,
            credentials,
            insecure,
            retry,
            schemes: Mutex::default(),
            tokens: Mutex::default(),
            traffic: Mutex::default(),
        }
    }

    /// What this client did so far.
    pub fn traffic(&self) -> Traffic {
        *self.traffic.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, f: impl FnOnce(&mut Traffic)) {
        f(&mut self.traffic.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// `http://HOST` or `https://HOST` for `location`'s registry API.
    pub fn base(&self, location: &Location) -> String {
        let plain = location.is_loopback() || self.insecure.contains(location.host());
        format!(
            "{}://{}",
            if plain { "http" } else { "https" },
            location.api_host()
        )
    }

    /// The digest of the manifest `reference` (a tag or a digest) of `repo`, without reading
    /// it; `None` when there is none.
    pub fn manifest_digest(
        &self,
        location: &Location,
        repo: &str,
        reference: &str,
        access: Access,
    ) -> Result<Option<Digest>, Error> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base(location));
        let operation = || format!("HEAD {}/{repo}:{reference}", location.host());
        let mut response = self.exchange(location, repo, access, &operation, &|auth| {
            let mut request = self.agent.head(&url).header("Accept", MANIFEST_ACCEPT);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.call()
        })?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let header = response
                    .headers()
                    .get("Docker-Content-Digest")
                    .and_then(|v| v.to_str().ok())
                    .and_then(Digest::parse);
                match header {
                    Some(digest) => Ok(Some(digest)),
                    // A registry that does not say: read the manifest and hash it.
                    None => Ok(self
                        .manifest(location, repo, reference, access)?
                        .map(|(_, digest)| digest)),
                }
            }
            _ => Err(status_error(&operation(), &mut response)),
        }
    }

    /// The manifest `reference` of `repo` and its digest; `None` when there is none.
    pub fn manifest(
        &self,
        location: &Location,
        repo: &str,
        reference: &str,
        access: Access,
    ) -> Result<Option<(Vec<u8>, Digest)>, Error> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base(location));
        let operation = || format!("GET {}/{repo}:{reference}", location.host());
        let mut response = self.exchange(location, repo, access, &operation, &|auth| {
            let mut request = self.agent.get(&url).header("Accept", MANIFEST_ACCEPT);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.call()
        })?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let bytes = read_body(&operation(), location, &mut response, MAX_MANIFEST)?;
                let digest = Digest::of(&bytes);
                if let Some(said) = Digest::parse(reference)
                    && said != digest
                {
                    return Err(Error::Invalid {
                        operation: operation(),
                        reason: format!("the manifest's digest is {digest}, not {said}"),
                    });
                }
                Ok(Some((bytes, digest)))
            }
            _ => Err(status_error(&operation(), &mut response)),
        }
    }

    /// Writes `manifest` (an OCI image manifest) as `reference` (a tag) of `repo`.
    pub fn put_manifest(
        &self,
        location: &Location,
        repo: &str,
        reference: &str,
        manifest: &[u8],
    ) -> Result<Digest, Error> {
        let url = format!("{}/v2/{repo}/manifests/{reference}", self.base(location));
        let operation = || format!("PUT {}/{repo}:{reference}", location.host());
        let mut response = self.exchange(location, repo, Access::Push, &operation, &|auth| {
            let mut request = self.agent.put(&url).header("Content-Type", MANIFEST_MEDIA_TYPE);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.send(manifest)
        })?;
        if !response.status().is_success() {
            return Err(status_error(&operation(), &mut response));
        }
        self.count(|t| t.manifests_written += 1);
        Ok(Digest::of(manifest))
    }

    /// Whether `repo` has blob `digest`.
    pub fn has_blob(
        &self,
        location: &Location,
        repo: &str,
        digest: &Digest,
        access: Access,
    ) -> Result<bool, Error> {
        let url = format!("{}/v2/{repo}/blobs/{digest}", self.base(location));
        let operation = || format!("HEAD {}/{repo}@{digest}", location.host());
        let mut response = self.exchange(location, repo, access, &operation, &|auth| {
            let mut request = self.agent.head(&url);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.call()
        })?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(false),
            status if status.is_success() => Ok(true),
            _ => Err(status_error(&operation(), &mut response)),
        }
    }

    /// Uploads `bytes` as blob `digest` of `repo` (a `POST` that opens the upload, then one
    /// `PUT` with the content).
    pub fn push_blob(
        &self,
        location: &Location,
        repo: &str,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let base = self.base(location);
        let operation = || format!("upload {}/{repo}@{digest}", location.host());
        let start = format!("{base}/v2/{repo}/blobs/uploads/");
        // The upload as a whole is what is retried: a session that failed half-way may be gone.
        let mut attempt = 1;
        loop {
            let result = (|| -> Result<(), Error> {
                let mut response = self.exchange(location, repo, Access::Push, &operation, &|auth| {
                    let mut request = self.agent.post(&start);
                    if let Some(auth) = auth {
                        request = request.header("Authorization", auth);
                    }
                    request.send_empty()
                })?;
                if response.status() != StatusCode::ACCEPTED && !response.status().is_success() {
                    return Err(status_error(&operation(), &mut response));
                }
                let location_header = response
                    .headers()
                    .get("Location")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| Error::Invalid {
                        operation: operation(),
                        reason: "the registry opened an upload without a Location".to_owned(),
                    })?
                    .to_owned();
                let mut target = url::Url::parse(&base)
                    .and_then(|b| b.join(&location_header))
                    .map_err(|e| Error::Invalid {
                        operation: operation(),
                        reason: format!("the upload's Location is not a URL: {e}"),
                    })?;
                target.query_pairs_mut().append_pair("digest", digest.as_str());
                // Credentials go only to the registry itself, not to wherever it points.
                let same_host = url::Url::parse(&base).is_ok_and(|b| {
                    b.host_str() == target.host_str()
                        && b.port_or_known_default() == target.port_or_known_default()
                });
                let target = target.to_string();
                let mut response = self.exchange(location, repo, Access::Push, &operation, &|auth| {
                    let mut request = self
                        .agent
                        .put(&target)
                        .header("Content-Type", "application/octet-stream");
                    if let Some(auth) = auth.filter(|_| same_host) {
                        request = request.header("Authorization", auth);
                    }
                    request.send(bytes)
                })?;
                if !response.status().is_success() {
                    return Err(status_error(&operation(), &mut response));
                }
                Ok(())
            })();
            match result {
                Err(e) if e.is_transient() && attempt < self.retry.attempts.max(1) => {
                    let wait = self.retry.backoff(attempt);
                    tracing::warn!(operation = %operation(), attempt, error = %e, "upload failed; starting it again");
                    self.count(|t| t.retries += 1);
                    std::thread::sleep(wait);
                    attempt += 1;
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    self.count(|t| {
                        t.blobs_uploaded += 1;
                        t.bytes_uploaded += bytes.len() as u64;
                    });
                    return Ok(());
                }
            }
        }
    }

    /// Blob `digest` of `repo` (at most `limit` bytes), checked against its digest.
    pub fn blob(
        &self,
        location: &Location,
        repo: &str,
        digest: &Digest,
        limit: u64,
        access: Access,
    ) -> Result<Vec<u8>, Error> {
        let url = format!("{}/v2/{repo}/blobs/{digest}", self.base(location));
        let operation = || format!("GET {}/{repo}@{digest}", location.host());
        let mut response = self.exchange(location, repo, access, &operation, &|auth| {
            let mut request = self.agent.get(&url);
            if let Some(auth) = auth {
                request = request.header("Authorization", auth);
            }
            request.call()
        })?;
        if !response.status().is_success() {
            return Err(status_error(&operation(), &mut response));
        }
        let bytes = read_body(&operation(), location, &mut response, limit)?;
        let got = Digest::of(&bytes);
        if &got != digest {
            return Err(Error::Invalid {
                operation: operation(),
                reason: format!("the content's digest is {got}"),
            });
        }
        self.count(|t| t.bytes_downloaded += bytes.len() as u64);
        Ok(bytes)
    }

    /// Sends a request (built by `send` with the `Authorization` header to use, if any),
    /// answering the registry's authentication challenge once and retrying transient
    /// failures. Returns the final response, whatever its status (but `401`).
    fn exchange(
        &self,
        location: &Location,
        repo: &str,
        access: Access,
        operation: &dyn Fn() -> String,
        send: &SendRequest<'_>,
    ) -> Result<Response<Body>, Error> {
        let host = location.api_host().to_owned();
        let mut attempt = 1;
        let mut challenged = false;
        loop {
            let authorization = self.authorization(location, repo, access, operation)?;
            self.count(|t| t.requests += 1);
            let outcome = send(authorization.as_deref());
            let transient = match outcome {
                Ok(response) if response.status() == StatusCode::UNAUTHORIZED => {
                    let challenge = response
                        .headers()
                        .get("WWW-Authenticate")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    if challenged {
                        return Err(Error::Unauthorized {
                            operation: operation(),
                            reason: self.refused(location),
                        });
                    }
                    challenged = true;
                    self.learn(location, repo, access, challenge.as_deref(), operation)?;
                    continue;
                }
                Ok(mut response)
                    if response.status() == StatusCode::TOO_MANY_REQUESTS
                        || response.status().is_server_error() =>
                {
                    status_error(&operation(), &mut response)
                }
                Ok(response) => return Ok(response),
                Err(e) => Error::Network {
                    operation: operation(),
                    host: host.clone(),
                    reason: network_reason(&e),
                },
            };
            if attempt >= self.retry.attempts.max(1) {
                return Err(transient);
            }
            let wait = self.retry.backoff(attempt);
            tracing::warn!(operation = %operation(), attempt, error = %transient, wait_ms = wait.as_millis() as u64, "registry request failed; retrying");
            self.count(|t| t.retries += 1);
            std::thread::sleep(wait);
            attempt += 1;
        }
    }

    /// Why a registry refused the credentials, and what to do.
    fn refused(&self, location: &Location) -> String {
        match self.credentials.for_host(location.host()) {
            Ok(Some(_)) => format!(
                "{} refused the credentials (check the Docker config's entry for it, or the registry token and user name)",
                location.host()
            ),
            _ => format!(
                "{} requires authentication and kalypso has no credentials for it (`docker login {}`, or --registry-username with --registry-token-file)",
                location.host(),
                location.host()
            ),
        }
    }

    /// The `Authorization` header for a request to `repo`, as far as the registry's earlier
    /// challenges tell.
    fn authorization(
        &self,
        location: &Location,
        repo: &str,
        access: Access,
        operation: &dyn Fn() -> String,
    ) -> Result<Option<String>, Error> {
        let credential = self.credentials.for_host(location.host())?;
        if let Some(Credential::RegistryToken(token)) = &credential {
            return Ok(Some(format!("Bearer {}", token.expose())));
        }
        let scheme = self
            .schemes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(location.api_host())
            .cloned();
        match scheme {
            None => Ok(None),
            Some(Scheme::Basic) => Ok(match &credential {
                Some(Credential::Basic { username, password }) => Some(basic(username, password)),
                _ => None,
            }),
            Some(Scheme::Bearer { realm, service }) => {
                let token = self.token(
                    location,
                    repo,
                    access,
                    &realm,
                    service.as_deref(),
                    credential.as_ref(),
                    operation,
                )?;
                Ok(Some(format!("Bearer {}", token.expose())))
            }
        }
    }

    /// Remembers what a `401`'s challenge asks for; fails when it asks for credentials kalypso
    /// does not have.
    fn learn(
        &self,
        location: &Location,
        repo: &str,
        access: Access,
        challenge: Option<&str>,
        operation: &dyn Fn() -> String,
    ) -> Result<(), Error> {
        let unauthorized = |reason: String| Error::Unauthorized {
            operation: operation(),
            reason,
        };
        let Some((scheme, params)) = challenge.and_then(parse_challenge) else {
            return Err(unauthorized(format!(
                "{} answered 401 without a WWW-Authenticate challenge",
                location.host()
            )));
        };
        let scheme = match scheme.as_str() {
            "basic" => {
                if !matches!(
                    self.credentials.for_host(location.host())?,
                    Some(Credential::Basic { .. })
                ) {
                    return Err(unauthorized(self.refused(location)));
                }
                Scheme::Basic
            }
            "bearer" => {
                let realm = params
                    .get("realm")
                    .filter(|r| !r.is_empty())
                    .cloned()
                    .ok_or_else(|| {
                        unauthorized(format!("{}'s Bearer challenge names no realm", location.host()))
                    })?;
                Scheme::Bearer {
                    realm,
                    service: params.get("service").cloned(),
                }
            }
            other => {
                return Err(unauthorized(format!(
                    "{} asks for {other:?} authentication, which kalypso does not speak (Basic or Bearer)",
                    location.host()
                )));
            }
        };
        // A new challenge invalidates the tokens of this repository.
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(host, r, _), _| !(host == location.api_host() && r == repo));
        let _ = access;
        self.schemes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(location.api_host().to_owned(), scheme);
        Ok(())
    }

    /// A token for `repo` with `access` (a push token serves pulls too), from the cache or
    /// the token service.
    #[allow(clippy::too_many_arguments)]
    fn token(
        &self,
        location: &Location,
        repo: &str,
        access: Access,
        realm: &str,
        service: Option<&str>,
        credential: Option<&Credential>,
        operation: &dyn Fn() -> String,
    ) -> Result<Secret, Error> {
        let host = location.api_host().to_owned();
        {
            let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let fresh = |a: Access| {
                tokens
                    .get(&(host.clone(), repo.to_owned(), a))
                    .filter(|t| t.expires > now)
                    .map(|t| t.value.clone())
            };
            if let Some(token) =
                fresh(access).or_else(|| (access == Access::Pull).then(|| fresh(Access::Push)).flatten())
            {
                return Ok(token);
            }
        }
        let fail = |reason: String| Error::Unauthorized {
            operation: operation(),
            reason: format!("token service {realm}: {reason}"),
        };
        let mut url = url::Url::parse(realm).map_err(|e| fail(format!("not a URL: {e}")))?;
        let registry_is_plain = self.base(location).starts_with("http://");
        match url.scheme() {
            "https" => {}
            "http" if registry_is_plain => {}
            other => {
                return Err(fail(format!(
                    "kalypso sends credentials to a token service over HTTPS only (scheme {other})"
                )));
            }
        }
        let scope = format!("repository:{repo}:{}", access.actions());
        let started = Instant::now();
        let response = match credential {
            Some(Credential::IdentityToken(refresh)) => {
                let mut form = url::form_urlencoded::Serializer::new(String::new());
                form.append_pair("grant_type", "refresh_token")
                    .append_pair("refresh_token", refresh.expose())
                    .append_pair("client_id", "kalypso")
                    .append_pair("scope", &scope);
                if let Some(service) = service {
                    form.append_pair("service", service);
                }
                self.agent
                    .post(url.as_str())
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .send(form.finish().as_bytes())
            }
            other => {
                {
                    let mut query = url.query_pairs_mut();
                    if let Some(service) = service {
                        query.append_pair("service", service);
                    }
                    query.append_pair("scope", &scope);
                    if let Some(Credential::Basic { username, .. }) = other {
                        query.append_pair("account", username);
                    }
                }
                let mut request = self.agent.get(url.as_str());
                if let Some(Credential::Basic { username, password }) = other {
                    request = request.header("Authorization", basic(username, password));
                }
                request.call()
            }
        };
        let mut response = response.map_err(|e| fail(network_reason(&e)))?;
        if response.status() == StatusCode::UNAUTHORIZED || response.status() == StatusCode::FORBIDDEN {
            return Err(Error::Unauthorized {
                operation: operation(),
                reason: self.refused(location),
            });
        }
        if !response.status().is_success() {
            let e = status_error(&format!("token service {realm}"), &mut response);
            return Err(fail(e.to_string()));
        }
        let body = response
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| fail(network_reason(&e)))?;
        let answer: TokenAnswer =
            serde_json::from_slice(&body).map_err(|_| fail("its answer is not a token JSON".to_owned()))?;
        let value = answer
            .token
            .filter(|t| !t.is_empty())
            .or(answer.access_token.filter(|t| !t.is_empty()))
            .ok_or_else(|| fail("its answer holds no token".to_owned()))?;
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_TOKEN_LIFETIME, Duration::from_secs)
            .saturating_sub(Duration::from_secs(5));
        let token = Token {
            value: Secret::new(value),
            expires: started + lifetime,
        };
        self.tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((host, repo.to_owned(), access), token.clone());
        Ok(token.value)
    }
}

/// A connection failure, in words.
fn network_reason(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::ConnectionFailed => "connection failed".to_owned(),
        other => other.to_string(),
    }
}

/// Reads a response body of at most `limit` bytes.
fn read_body(
    operation: &str,
    location: &Location,
    response: &mut Response<Body>,
    limit: u64,
) -> Result<Vec<u8>, Error> {
    response
        .body_mut()
        .with_config()
        .limit(limit)
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => Error::Invalid {
                operation: operation.to_owned(),
                reason: format!("the answer is larger than {limit} bytes"),
            },
            other => Error::Network {
                operation: operation.to_owned(),
                host: location.api_host().to_owned(),
                reason: network_reason(&other),
            },
        })
}

/// The error of a response with an error status, with the registry's codes and messages.
fn status_error(operation: &str, response: &mut Response<Body>) -> Error {
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_ERROR_BODY)
        .read_to_vec()
        .unwrap_or_default();
    let message = match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(parsed) if !parsed.errors.is_empty() => {
            let parts: Vec<String> = parsed
                .errors
                .iter()
                .map(|e| match (e.code.is_empty(), e.message.is_empty()) {
                    (false, false) => format!("{}: {}", e.code, e.message),
                    (false, true) => e.code.clone(),
                    _ => e.message.clone(),
                })
                .collect();
            format!(": {}", parts.join("; "))
        }
        _ => {
            let text = String::from_utf8_lossy(&body);
            let line = text.lines().next().unwrap_or_default().trim();
            if line.is_empty() {
                String::new()
            } else {
                format!(": {}", line.chars().take(200).collect::<String>())
            }
        }
    };
    Error::Status {
        operation: operation.to_owned(),
        status,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:samalba/my-app:pull,push""#,
        )
        .unwrap();
        assert_eq!(scheme, "bearer");
        assert_eq!(params["realm"], "https://auth.docker.io/token");
        assert_eq!(params["service"], "registry.docker.io");
        assert_eq!(params["scope"], "repository:samalba/my-app:pull,push");
        let (scheme, params) = parse_challenge(r#"Basic realm="basic-realm""#).unwrap();
        assert_eq!(
            (scheme.as_str(), params["realm"].as_str()),
            ("basic", "basic-realm")
        );
        let (_, params) = parse_challenge(r#"Bearer realm=https://r/t, service = "a \"b\"""#).unwrap();
        assert_eq!(
            (params["realm"].as_str(), params["service"].as_str()),
            ("https://r/t", "a \"b\"")
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = Retry {
            attempts: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
        };
        assert_eq!(
            [r.backoff(1), r.backoff(2), r.backoff(3), r.backoff(40)],
            [
                Duration::from_millis(100),
                Duration::from_millis(200),
                Duration::from_millis(350),
                Duration::from_millis(350)
            ]
        );
    }

    #[test]
    fn transient_failures_are_told_apart() {
        let status = |status| Error::Status {
            operation: String::new(),
            status,
            message: String::new(),
        };
        assert!(status(503).is_transient());
        assert!(status(429).is_transient());
        assert!(!status(404).is_transient());
        assert!(
            !Error::Unauthorized {
                operation: String::new(),
                reason: String::new()
            }
            .is_transient()
        );
    }
}
