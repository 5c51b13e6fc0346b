//! The hub's configuration file (`kalypso hub --config FILE`, YAML): what outgrows flags.
//!
//! Each top-level section is its own type, parsed and checked on its own, so that a new
//! section is one more field here and touches no other: `controlPlane` (what
//! `--control-plane` gives; the flag wins), `oidc` (sign-in),
//! `tokens` (named, scoped API tokens, stored as hashes), `roles` (who may do what once signed
//! in), `session` (the dashboard's sign-in cookies) and `notifications` (what a
//! `--notifications` file holds). Unknown fields are refused; every
//! error names the file and the field. Parsing ([`HubFile::parse`]) is pure; [`load`] reads the
//! file and the secret files it names, relative paths resolved against the file's folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{Member, Scope, TokenHash};

/// The configuration file, as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HubFile {
    /// The control plane the hub follows (a git URL or a local repository path, relative to
    /// the file's folder), as `--control-plane` gives it; the flag overrides it.
    #[serde(default)]
    pub control_plane: Option<String>,
    /// OpenID Connect sign-in for the dashboard.
    #[serde(default)]
    pub oidc: Option<OidcSection>,
    /// Named, scoped API tokens.
    #[serde(default)]
    pub tokens: Vec<TokenSection>,
    /// What signed-in people may do.
    #[serde(default)]
    pub roles: RolesSection,
    /// The sign-in sessions.
    #[serde(default)]
    pub session: SessionSection,
    /// Where notifications go (as a `--notifications` file holds them).
    #[serde(default)]
    pub notifications: Option<crate::notify::NotificationsConfig>,
}

/// `oidc`: the OpenID Provider the dashboard signs people in with.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OidcSection {
    /// The provider's issuer URL (its discovery document is `ISSUER/.well-known/openid-configuration`).
    pub issuer: String,
    /// The hub's client id at the provider.
    pub client_id: String,
    /// File holding the client secret (none: a public client, PKCE only).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// Where the provider sends people back: `https://HUB/auth/callback`.
    pub redirect_url: String,
    /// The scopes asked for (default `openid email profile`; `openid` is always asked).
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The claim naming the person (default `email`; the subject when the claim is absent).
    #[serde(default)]
    pub identity_claim: Option<String>,
    /// The claim listing the person's groups (default `groups`).
    #[serde(default)]
    pub groups_claim: Option<String>,
}

/// One entry of `tokens`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenSection {
    /// The token's name: its identity in logs, approvals and the audit log.
    pub name: String,
    /// `sha256:<64 hex digits>`, as `kalypso hub hash-token` prints it.
    pub hash: String,
    /// What it may do: `read`, `report`, `approve`, `approve:ENV`, `admin`.
    pub scopes: Vec<String>,
}

/// `roles`: members (`user:ID`, `group:NAME`, `*` for anyone signed in) of each role.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolesSection {
    /// May read everything the dashboard and the API show.
    #[serde(default)]
    pub viewer: Vec<String>,
    /// Per environment (`*`: every environment), who may approve promotions into it (and read).
    #[serde(default)]
    pub approver: BTreeMap<String, Vec<String>>,
    /// May do everything.
    #[serde(default)]
    pub admin: Vec<String>,
}

/// `session`: the dashboard's sign-in cookies.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionSection {
    /// File holding the key session cookies are signed with (at least 32 characters). Without
    /// it a random key is made at start: sessions end when the hub restarts, and replicas
    /// do not share them.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// How long a sign-in lasts (default `8h`).
    #[serde(default)]
    pub ttl: Option<String>,
}

/// A configuration error: the file, the field and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file (or a file it names) cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A field is wrong.
    #[error("{file}: {field}: {message}")]
    Invalid {
        /// The configuration file.
        file: String,
        /// The field (`tokens[1].scopes[0]`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(file: &str, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        file: file.to_owned(),
        field: field.into(),
        message: message.into(),
    }
}

/// The checked sign-in settings the hub runs with (secrets not read yet).
#[derive(Clone, Debug)]
pub struct AuthFile {
    /// OIDC, if configured.
    pub oidc: Option<OidcSection>,
    /// The named tokens.
    pub tokens: Vec<(String, TokenHash, Vec<Scope>)>,
    /// Role members.
    pub viewers: Vec<Member>,
    /// Approvers by environment (`*`: all).
    pub approvers: BTreeMap<String, Vec<Member>>,
    /// Admins.
    pub admins: Vec<Member>,
    /// The session key file.
    pub session_secret_file: Option<PathBuf>,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
}

/// The default session lifetime.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);

impl Default for AuthFile {
    fn default() -> AuthFile {
        AuthFile {
            oidc: None,
            tokens: Vec::new(),
            viewers: Vec::new(),
            approvers: BTreeMap::new(),
            admins: Vec::new(),
            session_secret_file: None,
            session_ttl: DEFAULT_SESSION_TTL,
        }
    }
}

impl HubFile {
    /// Parses the text of file `file` (its name, for errors) and checks every section.
    pub fn parse(text: &str, file: &str) -> Result<(HubFile, AuthFile), ConfigError> {
        let de = serde_yaml_ng::Deserializer::from_str(text);
        let parsed: HubFile = match serde_path_to_error::deserialize(de) {
            Ok(v) => v,
            Err(e) => {
                let path = e.path().to_string();
                let field = if path == "." { "(top)".to_owned() } else { path };
                // The YAML error starts with the path of the mapping it is in: said once.
                let message = e.into_inner().to_string();
                let message = match message.split_once(": ") {
                    Some((at, rest)) if field.starts_with(at) => rest.to_owned(),
                    _ => message,
                };
                return Err(invalid(file, field, message));
            }
        };
        let auth = parsed.check(file)?;
        Ok((parsed, auth))
    }

    fn check(&self, file: &str) -> Result<AuthFile, ConfigError> {
        if let Some(control_plane) = &self.control_plane {
            kalypso_git::url::RepoUrl::parse(control_plane)
                .map_err(|e| invalid(file, "controlPlane", e.to_string()))?;
        }
        if let Some(oidc) = &self.oidc {
            check_oidc(oidc, file)?;
        }
        let mut tokens = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for (i, token) in self.tokens.iter().enumerate() {
            let at = |field: &str| format!("tokens[{i}].{field}");
            let name = token.name.trim();
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@:".contains(c))
            {
                return Err(invalid(
                    file,
                    at("name"),
                    format!("{name:?} is not a token name (letters, digits, - _ . @ :)"),
                ));
            }
            if !names.insert(name.to_owned()) {
                return Err(invalid(
                    file,
                    at("name"),
                    format!("a second token named {name:?}"),
                ));
            }
            let hash = TokenHash::parse(&token.hash).ok_or_else(|| {
                invalid(
                    file,
                    at("hash"),
                    "not sha256:<64 hex digits> (make it with `kalypso hub hash-token`)",
                )
            })?;
            if token.scopes.is_empty() {
                return Err(invalid(
                    file,
                    at("scopes"),
                    "no scope: give read, report, approve, approve:ENV or admin",
                ));
            }
            let mut scopes = Vec::new();
            for (j, text) in token.scopes.iter().enumerate() {
                scopes.push(Scope::parse(text).ok_or_else(|| {
                    invalid(
                        file,
                        format!("tokens[{i}].scopes[{j}]"),
                        format!("{text:?} is not one of read, report, approve, approve:ENV, admin"),
                    )
                })?);
            }
            tokens.push((name.to_owned(), hash, scopes));
        }
        let members = |list: &[String], field: &str| -> Result<Vec<Member>, ConfigError> {
            list.iter()
                .enumerate()
                .map(|(i, text)| {
                    Member::parse(text).ok_or_else(|| {
                        invalid(
                            file,
                            format!("{field}[{i}]"),
                            format!("{text:?} is not user:ID, group:NAME or *"),
                        )
                    })
                })
                .collect()
        };
        let viewers = members(&self.roles.viewer, "roles.viewer")?;
        let admins = members(&self.roles.admin, "roles.admin")?;
        let mut approvers = BTreeMap::new();
        for (env, list) in &self.roles.approver {
            if env.trim().is_empty() {
                return Err(invalid(file, "roles.approver", "an empty environment name"));
            }
            approvers.insert(env.clone(), members(list, &format!("roles.approver.{env}"))?);
        }
        let session_ttl = match &self.session.ttl {
            None => DEFAULT_SESSION_TTL,
            Some(text) => kalypso_core::placement::parse_duration(text).ok_or_else(|| {
                invalid(
                    file,
                    "session.ttl",
                    format!("{text:?} is not a duration (8h, 30m)"),
                )
            })?,
        };
        Ok(AuthFile {
            oidc: self.oidc.clone(),
            tokens,
            viewers,
            approvers,
            admins,
            session_secret_file: self.session.secret_file.clone(),
            session_ttl,
        })
    }
}

fn check_oidc(oidc: &OidcSection, file: &str) -> Result<(), ConfigError> {
    let url = |field: &str, text: &str| -> Result<url::Url, ConfigError> {
        let parsed = url::Url::parse(text).map_err(|e| {
            invalid(
                file,
                format!("oidc.{field}"),
                format!("{text:?} is not a URL: {e}"),
            )
        })?;
        if !matches!(parsed.scheme(), "https" | "http") {
            return Err(invalid(file, format!("oidc.{field}"), "must be an https:// URL"));
        }
        if parsed.scheme() == "http" && !is_loopback(&parsed) {
            return Err(invalid(
                file,
                format!("oidc.{field}"),
                "must be an https:// URL (http:// only on loopback)",
            ));
        }
        Ok(parsed)
    };
    url("issuer", &oidc.issuer)?;
    let redirect = url("redirectUrl", &oidc.redirect_url)?;
    if redirect.path() != crate::auth::CALLBACK_PATH {
        return Err(invalid(
            file,
            "oidc.redirectUrl",
            format!("the hub's callback is at {}", crate::auth::CALLBACK_PATH),
        ));
    }
    if oidc.client_id.trim().is_empty() {
        return Err(invalid(file, "oidc.clientId", "is empty"));
    }
    for (i, scope) in oidc.scopes.iter().enumerate() {
        if scope.is_empty() || scope.contains(char::is_whitespace) {
            return Err(invalid(
                file,
                format!("oidc.scopes[{i}]"),
                format!("{scope:?} is not a scope"),
            ));
        }
    }
    Ok(())
}

/// Whether `url`'s host is a loopback address or `localhost`.
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Reads and checks the configuration file at `path`; relative paths in it are resolved
/// against its folder.
pub fn load(path: &Path) -> Result<(HubFile, AuthFile), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    let (file, mut auth) = HubFile::parse(&text, &path.display().to_string())?;
    let folder = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = folder.join(&*p);
        }
    };
    if let Some(oidc) = &mut auth.oidc
        && let Some(secret) = &mut oidc.client_secret_file
    {
        resolve(secret);
    }
    if let Some(secret) = &mut auth.session_secret_file {
        resolve(secret);
    }
    let mut file = file;
    if let Some(control_plane) = &mut file.control_plane {
        let relative = kalypso_git::url::RepoUrl::parse(control_plane)
            .ok()
            .and_then(|url| url.plain_path().map(Path::is_relative))
            .unwrap_or(false);
        if relative {
            *control_plane = folder.join(control_plane.trim()).display().to_string();
        }
    }
    if let Some(notifications) = file.notifications.take() {
        let notifications = notifications.relative_to(folder);
        notifications
            .check()
            .map_err(|message| invalid(&path.display().to_string(), "notifications", message))?;
        file.notifications = Some(notifications);
    }
    Ok((file, auth))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn error(text: &str) -> String {
        HubFile::parse(text, "hub.yaml").unwrap_err().to_string()
    }

    #[test]
    fn a_full_file_parses() {
        let text = "oidc:\n  issuer: https://login.contoso.com\n  clientId: hub\n  redirectUrl: https://hub.contoso.com/auth/callback\n  scopes: [openid, email, groups]\ntokens:\n- name: argocd\n  hash: sha256:0000000000000000000000000000000000000000000000000000000000000000\n  scopes: [report]\nroles:\n  viewer: ['*']\n  approver:\n    prod: [group:platform-leads]\n  admin: [user:ana@contoso.com]\nsession:\n  ttl: 1h\n";
        let (_, auth) = HubFile::parse(text, "hub.yaml").unwrap();
        assert_eq!(auth.tokens.len(), 1);
        assert_eq!(auth.session_ttl, Duration::from_secs(3600));
        assert_eq!(auth.approvers["prod"].len(), 1);
        assert_eq!(HubFile::parse("", "hub.yaml").unwrap().1.tokens.len(), 0);
    }

    fn starts(error: String, start: &str) {
        assert!(error.starts_with(start), "{error}");
    }

    #[test]
    fn notifications_may_be_a_section_their_files_relative_to_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("hmac"), "s3cret\n").unwrap();
        let path = tmp.path().join("hub.yaml");
        std::fs::write(
            &path,
            "notifications:\n  attempts: 2\n  receivers:\n  - {name: ops, type: generic, url: 'http://127.0.0.1:9/hook', secretFile: hmac}\n",
        )
        .unwrap();
        let (file, _) = load(&path).unwrap();
        let notifications = file.notifications.unwrap();
        assert_eq!(notifications.attempts, Some(2));
        assert_eq!(
            notifications.receivers[0].secret_file.as_deref(),
            Some(tmp.path().join("hmac").as_path())
        );
        std::fs::remove_file(tmp.path().join("hmac")).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: notifications: receivers[0] (\"ops\").secretFile",
                path.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        starts(
            error("tokenz: []\n"),
            "hub.yaml: tokenz: unknown field `tokenz`, expected one of",
        );
        starts(
            error(
                "oidc:\n  issuer: https://a\n  clientId: x\n  redirectUrl: https://h/auth/callback\n  extra: 1\n",
            ),
            "hub.yaml: oidc.extra: unknown field `extra`, expected one of",
        );
        let hash = format!("sha256:{}", "0".repeat(64));
        assert_eq!(
            error(&format!(
                "tokens:\n- name: a\n  hash: {hash}\n  scopes: [read, write]\n"
            )),
            "hub.yaml: tokens[0].scopes[1]: \"write\" is not one of read, report, approve, approve:ENV, admin"
        );
        starts(
            error("tokens:\n- name: a\n  hash: md5:00\n  scopes: [read]\n"),
            "hub.yaml: tokens[0].hash:",
        );
        starts(
            error(&format!(
                "tokens:\n- {{name: a, hash: {hash}, scopes: [read]}}\n- {{name: a, hash: {hash}, scopes: [read]}}\n"
            )),
            "hub.yaml: tokens[1].name: a second token",
        );
        assert_eq!(
            error("roles:\n  approver:\n    prod: [team:x]\n"),
            "hub.yaml: roles.approver.prod[0]: \"team:x\" is not user:ID, group:NAME or *"
        );
        starts(
            error(
                "oidc:\n  issuer: http://login.contoso.com\n  clientId: x\n  redirectUrl: https://h/auth/callback\n",
            ),
            "hub.yaml: oidc.issuer: must be an https:// URL",
        );
        starts(
            error("oidc:\n  issuer: https://login\n  clientId: x\n  redirectUrl: https://h/callback\n"),
            "hub.yaml: oidc.redirectUrl: the hub's callback is at /auth/callback",
        );
        starts(error("session:\n  ttl: forever\n"), "hub.yaml: session.ttl:");
        starts(error("controlPlane: ''\n"), "hub.yaml: controlPlane: ");
        starts(
            error("controlPlane: ftp://example.com/control-plane\n"),
            "hub.yaml: controlPlane: ",
        );
        starts(error("controlPlane: [a]\n"), "hub.yaml: controlPlane: ");
    }

    #[test]
    fn a_relative_control_plane_path_is_relative_to_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("hub.yaml");
        for (text, expected) in [
            (
                "controlPlane: repos/control-plane\n",
                tmp.path().join("repos/control-plane").display().to_string(),
            ),
            (
                "controlPlane: /srv/control-plane\n",
                "/srv/control-plane".to_owned(),
            ),
            (
                "controlPlane: https://github.com/contoso/control-plane\n",
                "https://github.com/contoso/control-plane".to_owned(),
            ),
            (
                "controlPlane: file:///srv/control-plane\n",
                "file:///srv/control-plane".to_owned(),
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(load(&path).unwrap().0.control_plane, Some(expected), "{text}");
        }
    }
}
