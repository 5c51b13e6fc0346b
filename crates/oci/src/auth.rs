//! Registry credentials, found where the tools users already have put them: a Docker config
//! file (`docker login`, `flux` and `oras` all write and read it) or a token given to kalypso.
//!
//! A Docker config (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, or a file named
//! explicitly) holds, per registry host, `auth` (base64 `user:password`), or `username` and
//! `password`, or an `identitytoken` (an OAuth2 refresh token, exchanged at the registry's
//! token service), or a `registrytoken` (a bearer token sent as is); `credHelpers` and
//! `credsStore` name `docker-credential-<name>` programs that answer for a host. A token given
//! to kalypso (a file or an environment variable, with its user name) is used for every
//! registry and wins over the file.
//!
//! Secrets are wrapped in [`Secret`], whose `Debug` and `Display` print `***`, and every secret
//! loaded or received (bearer tokens from token services too) is handed to the process's
//! redaction (see [`on_secret`]), so that no log, error or output line can carry one.

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use base64::Engine;
use serde::Deserialize;

/// What replaces a secret in text.
pub const MASK: &str = "***";

/// Where secrets are reported for redaction.
static SECRET_HOOK: OnceLock<fn(&str)> = OnceLock::new();

/// Sends every secret this crate loads or receives to `hook` (the process-wide redaction of
/// the program, e.g. `kalypso_git::redact::register_secret`). The first hook set stays.
pub fn on_secret(hook: fn(&str)) {
    let _ = SECRET_HOOK.set(hook);
}

/// A secret value (a password, a token): `Debug` and `Display` print [`MASK`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` and reports it for redaction.
    pub fn new(value: impl Into<String>) -> Secret {
        let value = value.into();
        if let Some(hook) = SECRET_HOOK.get() {
            hook(&value);
        }
        Secret(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

/// Why credentials cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Docker config file cannot be read or parsed.
    #[error("Docker config {file}: {reason}")]
    Config {
        /// The file.
        file: String,
        /// What is wrong (the field, for a bad entry).
        reason: String,
    },
    /// A credential helper failed.
    #[error("credential helper docker-credential-{helper} (named in {file} for {host}): {reason}")]
    Helper {
        /// The helper's name.
        helper: String,
        /// The config file naming it.
        file: String,
        /// The registry asked about.
        host: String,
        /// What went wrong.
        reason: String,
    },
    /// The token file cannot be read.
    #[error("registry token file {file}: {reason}")]
    TokenFile {
        /// The file.
        file: String,
        /// Why.
        reason: String,
    },
    /// A token was given without the user name it belongs to.
    #[error(
        "a registry token needs the user name it belongs to (--registry-username or KALYPSO_REGISTRY_USERNAME)"
    )]
    TokenWithoutUser,
}

/// The environment variable a registry token is read from by default.
pub const DEFAULT_TOKEN_ENV: &str = "KALYPSO_REGISTRY_TOKEN";
/// The environment variable the token's user name is read from when none is given.
pub const USERNAME_ENV: &str = "KALYPSO_REGISTRY_USERNAME";

/// How kalypso reaches registries: where credentials are, and which registries are plain HTTP.
#[derive(Clone, Debug)]
pub struct AuthSettings {
    /// The Docker config file to read; `None`: `$DOCKER_CONFIG/config.json`, else
    /// `~/.docker/config.json` (a missing default file means no credentials).
    pub docker_config: Option<PathBuf>,
    /// The user name of the token (`None`: [`USERNAME_ENV`]).
    pub username: Option<String>,
    /// A password or token for every registry (wins over the Docker config).
    pub token: Option<Secret>,
    /// A file holding the token (when [`AuthSettings::token`] is not given).
    pub token_file: Option<PathBuf>,
    /// The environment variable holding the token (when neither of the above is given).
    pub token_env: Option<String>,
    /// Registries (`host[:port]`) reached over plain HTTP besides loopback ones.
    pub insecure: Vec<String>,
}

impl Default for AuthSettings {
    fn default() -> AuthSettings {
        AuthSettings {
            docker_config: None,
            username: None,
            token: None,
            token_file: None,
            token_env: Some(DEFAULT_TOKEN_ENV.to_owned()),
            insecure: Vec::new(),
        }
    }
}

impl AuthSettings {
    /// The token the settings name: given, from its file, or from its variable.
    fn load_token(&self) -> Result<Option<Secret>, Error> {
        if let Some(token) = &self.token {
            return Ok(Some(token.clone()));
        }
        if let Some(path) = &self.token_file {
            let text = std::fs::read_to_string(path).map_err(|e| Error::TokenFile {
                file: path.display().to_string(),
                reason: e.to_string(),
            })?;
            let text = text.trim();
            if text.is_empty() {
                return Err(Error::TokenFile {
                    file: path.display().to_string(),
                    reason: "it is empty".to_owned(),
                });
            }
            return Ok(Some(Secret::new(text)));
        }
        Ok(self
            .token_env
            .as_deref()
            .and_then(|name| std::env::var(name).ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .map(Secret::new))
    }
}

/// The credentials for one registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A user name and password (or a token used as one): HTTP basic authentication, or
    /// basic authentication at the token service.
    Basic {
        /// The user name.
        username: String,
        /// The password.
        password: Secret,
    },
    /// An OAuth2 refresh token, exchanged at the token service (`identitytoken`).
    IdentityToken(Secret),
    /// A bearer token sent to the registry as is (`registrytoken`).
    RegistryToken(Secret),
}

/// One `auths` entry of a Docker config.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// The parts of a Docker config kalypso reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DockerConfig {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
    #[serde(default)]
    cred_helpers: HashMap<String, String>,
    #[serde(default)]
    creds_store: Option<String>,
}

/// A credential helper's answer (`docker-credential-X get`).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HelperAnswer {
    #[serde(default)]
    username: String,
    #[serde(default)]
    secret: String,
}

/// The credentials of every registry, loaded once.
pub struct Credentials {
    file: Option<PathBuf>,
    token: Option<Credential>,
    auths: HashMap<String, Credential>,
    helpers: HashMap<String, String>,
    store: Option<String>,
    /// Answers of credential helpers, asked once per host.
    asked: Mutex<HashMap<String, Option<Credential>>>,
    /// Where helpers are looked for instead of `PATH` (tests).
    search_path: Option<std::ffi::OsString>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("file", &self.file)
            .field("hosts", &self.auths.keys().collect::<Vec<_>>())
            .field("token", &self.token.is_some())
            .finish_non_exhaustive()
    }
}

/// The key Docker files credentials under for a registry host: no scheme, no path, Docker
/// Hub's names folded into `index.docker.io`.
pub fn normalize_host(key: &str) -> String {
    let key = key.trim();
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => "index.docker.io".to_owned(),
        _ => host,
    }
}

/// The Docker config file read when none is named.
pub fn default_docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".docker").join("config.json"))
}

impl Credentials {
    /// No credentials at all (anonymous access).
    pub fn none() -> Credentials {
        Credentials {
            file: None,
            token: None,
            auths: HashMap::new(),
            helpers: HashMap::new(),
            store: None,
            asked: Mutex::default(),
            search_path: None,
        }
    }

    /// Loads the credentials `settings` point at. A Docker config named explicitly must
    /// exist; the default one may be missing.
    pub fn load(settings: &AuthSettings) -> Result<Credentials, Error> {
        let mut credentials = Credentials::none();
        if let Some(token) = settings.load_token()? {
            let username = settings
                .username
                .clone()
                .or_else(|| std::env::var(USERNAME_ENV).ok())
                .filter(|u| !u.trim().is_empty())
                .ok_or(Error::TokenWithoutUser)?;
            credentials.token = Some(Credential::Basic {
                username: username.trim().to_owned(),
                password: token,
            });
        }
        let (path, required) = match &settings.docker_config {
            Some(path) => (Some(path.clone()), true),
            None => (default_docker_config(), false),
        };
        let Some(path) = path else {
            return Ok(credentials);
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(credentials),
            Err(e) => {
                return Err(Error::Config {
                    file: path.display().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        credentials.read_config(&path, &text)?;
        credentials.file = Some(path);
        Ok(credentials)
    }

    fn read_config(&mut self, path: &Path, text: &str) -> Result<(), Error> {
        let file = path.display().to_string();
        let config: DockerConfig = serde_json::from_str(text).map_err(|e| Error::Config {
            file: file.clone(),
            reason: format!("not a Docker config: {e}"),
        })?;
        for (key, entry) in config.auths {
            let field = |name: &str| format!("auths.{key:?}.{name}");
            let credential = if let Some(token) = entry.registrytoken.filter(|t| !t.is_empty()) {
                Some(Credential::RegistryToken(Secret::new(token)))
            } else if let Some(token) = entry.identitytoken.filter(|t| !t.is_empty()) {
                Some(Credential::IdentityToken(Secret::new(token)))
            } else if let Some(auth) = entry.auth.filter(|a| !a.is_empty()) {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .ok()
                    .and_then(|bytes| String::from_utf8(bytes).ok())
                    .ok_or_else(|| Error::Config {
                        file: file.clone(),
                        reason: format!("{} is not base64 of user:password", field("auth")),
                    })?;
                let (username, password) = decoded.split_once(':').ok_or_else(|| Error::Config {
                    file: file.clone(),
                    reason: format!("{} does not decode to user:password", field("auth")),
                })?;
                Some(Credential::Basic {
                    username: username.to_owned(),
                    password: Secret::new(password),
                })
            } else {
                match (entry.username, entry.password) {
                    (Some(username), Some(password)) if !password.is_empty() => Some(Credential::Basic {
                        username,
                        password: Secret::new(password),
                    }),
                    _ => None,
                }
            };
            if let Some(credential) = credential {
                self.auths.insert(normalize_host(&key), credential);
            }
        }
        self.helpers = config
            .cred_helpers
            .into_iter()
            .map(|(host, helper)| (normalize_host(&host), helper))
            .collect();
        self.store = config.creds_store.filter(|s| !s.is_empty());
        Ok(())
    }

    /// The credential for registry `host` (as written in a location), if any: the token given
    /// to kalypso, else the host's credential helper, its `auths` entry, the credentials store.
    pub fn for_host(&self, host: &str) -> Result<Option<Credential>, Error> {
        if let Some(token) = &self.token {
            return Ok(Some(token.clone()));
        }
        let key = normalize_host(host);
        if let Some(helper) = self.helpers.get(&key) {
            return self.ask(helper, &key);
        }
        if let Some(credential) = self.auths.get(&key) {
            return Ok(Some(credential.clone()));
        }
        match &self.store {
            Some(store) => self.ask(store, &key),
            None => Ok(None),
        }
    }

    /// Asks credential helper `helper` for `host` (once per host).
    fn ask(&self, helper: &str, host: &str) -> Result<Option<Credential>, Error> {
        if let Some(answer) = self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(host)
        {
            return Ok(answer.clone());
        }
        let fail = |reason: String| Error::Helper {
            helper: helper.to_owned(),
            file: self
                .file
                .as_ref()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            host: host.to_owned(),
            reason,
        };
        if !helper
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(fail("not a helper name".to_owned()));
        }
        // Docker asks about Docker Hub by its historical URL.
        let server = if host == "index.docker.io" {
            "https://index.docker.io/v1/"
        } else {
            host
        };
        let program = format!("docker-credential-{helper}");
        let mut command = Command::new(&program);
        if let Some(path) = &self.search_path {
            command.env("PATH", path);
        }
        let mut child = command
            .arg("get")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot run {program}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(server.as_bytes())
                .map_err(|e| fail(format!("cannot write to {program}: {e}")))?;
        }
        let output = child
            .wait_with_output()
            .map_err(|e| fail(format!("{program} did not finish: {e}")))?;
        let answer = if output.status.success() {
            let answer: HelperAnswer = serde_json::from_slice(&output.stdout)
                .map_err(|e| fail(format!("its answer is not the credential JSON: {e}")))?;
            match (answer.username.as_str(), answer.secret) {
                (_, secret) if secret.is_empty() => None,
                ("<token>", secret) => Some(Credential::IdentityToken(Secret::new(secret))),
                (username, secret) => Some(Credential::Basic {
                    username: username.to_owned(),
                    password: Secret::new(secret),
                }),
            }
        } else {
            let said = String::from_utf8_lossy(&output.stdout).to_string()
                + &String::from_utf8_lossy(&output.stderr);
            if said.to_ascii_lowercase().contains("not found") {
                None
            } else {
                return Err(fail(format!(
                    "{program} failed ({}): {}",
                    output.status,
                    said.trim()
                )));
            }
        };
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(host.to_owned(), answer.clone());
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, text: &str) -> AuthSettings {
        let path = dir.join("config.json");
        std::fs::write(&path, text).unwrap();
        AuthSettings {
            docker_config: Some(path),
            ..AuthSettings::default()
        }
    }

    #[test]
    fn reads_every_form_of_docker_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("robot:pa:ss");
        let settings = config(
            dir.path(),
            &format!(
                r#"{{"auths": {{
                    "https://ghcr.io": {{"auth": "{auth}"}},
                    "127.0.0.1:5000": {{"username": "u", "password": "p4ss"}},
                    "https://index.docker.io/v1/": {{"auth": "", "identitytoken": "refresh-tok"}},
                    "reg.example.com": {{"registrytoken": "bearer-tok"}},
                    "empty.example.com": {{}}
                }}, "HttpHeaders": {{"User-Agent": "x"}}}}"#
            ),
        );
        let c = Credentials::load(&settings).unwrap();
        assert_eq!(
            c.for_host("ghcr.io").unwrap(),
            Some(Credential::Basic {
                username: "robot".into(),
                password: Secret::new("pa:ss")
            })
        );
        assert!(matches!(
            c.for_host("127.0.0.1:5000").unwrap(),
            Some(Credential::Basic { username, .. }) if username == "u"
        ));
        assert_eq!(
            c.for_host("docker.io").unwrap(),
            Some(Credential::IdentityToken(Secret::new("refresh-tok")))
        );
        assert_eq!(
            c.for_host("reg.example.com").unwrap(),
            Some(Credential::RegistryToken(Secret::new("bearer-tok")))
        );
        assert_eq!(c.for_host("empty.example.com").unwrap(), None);
        assert_eq!(c.for_host("other.example.com").unwrap(), None);
        let shown = format!("{c:?} {:?}", c.for_host("ghcr.io").unwrap());
        assert!(
            !shown.contains("pa:ss") && !shown.contains("refresh-tok"),
            "{shown}"
        );
    }

    #[test]
    fn a_token_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "file-token-789\n").unwrap();
        let settings = AuthSettings {
            token_file: Some(file.clone()),
            username: Some("u".into()),
            token_env: None,
            ..AuthSettings::default()
        };
        let c = Credentials::load(&settings).unwrap();
        assert_eq!(
            c.for_host("x.example.com").unwrap(),
            Some(Credential::Basic {
                username: "u".into(),
                password: Secret::new("file-token-789")
            })
        );
        std::fs::write(&file, "  \n").unwrap();
        let e = Credentials::load(&settings).unwrap_err().to_string();
        assert!(e.contains("empty") && e.contains("token"), "{e}");
        let missing = AuthSettings {
            token_file: Some(dir.path().join("none")),
            ..settings
        };
        assert!(
            Credentials::load(&missing)
                .unwrap_err()
                .to_string()
                .contains("none")
        );
    }

    #[test]
    fn a_token_wins_and_needs_its_user() {
        let mut settings = AuthSettings {
            token: Some(Secret::new("tok-123")),
            docker_config: Some(PathBuf::from("/nonexistent/config.json")),
            ..AuthSettings::default()
        };
        assert!(matches!(
            Credentials::load(&settings),
            Err(Error::TokenWithoutUser)
        ));
        settings.username = Some("ci".into());
        // A Docker config named explicitly must exist.
        let missing = Credentials::load(&settings).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/config.json"),
            "{missing}"
        );
        settings.docker_config = None;
        let c = Credentials::load(&settings).unwrap();
        assert_eq!(
            c.for_host("anything.example.com").unwrap(),
            Some(Credential::Basic {
                username: "ci".into(),
                password: Secret::new("tok-123")
            })
        );
    }

    #[test]
    fn bad_entries_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let settings = config(dir.path(), r#"{"auths": {"ghcr.io": {"auth": "%%%"}}}"#);
        let e = Credentials::load(&settings).unwrap_err().to_string();
        assert!(e.contains(r#"auths."ghcr.io".auth"#), "{e}");
        let settings = config(dir.path(), "[1]");
        let e = Credentials::load(&settings).unwrap_err().to_string();
        assert!(e.contains("not a Docker config"), "{e}");
    }

    #[test]
    fn credential_helpers_answer_for_their_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let helper = bin.join("docker-credential-kalypsotest");
        std::fs::write(
            &helper,
            "#!/bin/sh\nread host\ncase \"$host\" in\n  helped.example.com) echo '{\"ServerURL\":\"x\",\"Username\":\"hu\",\"Secret\":\"hs-secret\"}';;\n  token.example.com) echo '{\"Username\":\"<token>\",\"Secret\":\"id-tok\"}';;\n  *) echo 'credentials not found in native keychain'; exit 1;;\nesac\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let settings = config(
            dir.path(),
            r#"{"credHelpers": {"helped.example.com": "kalypsotest", "broken.example.com": "missing-helper"},
                "credsStore": "kalypsotest"}"#,
        );
        // The helper is found on PATH, as Docker finds it (here: the test's folder first).
        let mut c = Credentials::load(&settings).unwrap();
        c.search_path =
            Some(format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default()).into());
        assert_eq!(
            c.for_host("helped.example.com").unwrap(),
            Some(Credential::Basic {
                username: "hu".into(),
                password: Secret::new("hs-secret")
            })
        );
        assert_eq!(
            c.for_host("token.example.com").unwrap(),
            Some(Credential::IdentityToken(Secret::new("id-tok")))
        );
        assert_eq!(c.for_host("unknown.example.com").unwrap(), None);
        let e = c.for_host("broken.example.com").unwrap_err().to_string();
        assert!(
            e.contains("docker-credential-missing-helper") && e.contains("broken.example.com"),
            "{e}"
        );
    }
}
