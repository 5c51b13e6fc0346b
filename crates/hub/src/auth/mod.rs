//! Who is asking, and may they: every request is turned into a [`Principal`] — a person
//! signed in with OpenID Connect, a named API token, the signature of a report, or nobody on a
//! hub without credentials — and checked against one [`Action`] by [`authorize`] (or
//! [`authorize_form`] for the dashboard's forms, [`authorize_report`] for reports).
//!
//! Credentials, in the order they are tried: `Authorization: Bearer TOKEN` (the token of
//! `--api-token-file`, allowed everything, or a named token of the configuration file, compared
//! by its SHA-256 in constant time, allowed its scopes); the dashboard's session cookie
//! ([`session`], roles from the provider's groups claim, and a CSRF token for anything but
//! reading); for reports, `X-Signature`. Queries (and approvals, admin actions) need a
//! credential as soon as the hub has one that could read: the API token, OIDC or a named token
//! with a read, approve or admin scope. Reports need one as soon as the hub has a webhook secret
//! or a token with the report scope. A token is never logged nor written into an answer.

pub mod oidc;
pub mod routes;
pub mod session;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use axum::http::{HeaderMap, StatusCode, header};
use kalypso_git::redact::Secret;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::AuthFile;
use crate::http::{ApiError, HubState};

/// Where the provider sends people back.
pub const CALLBACK_PATH: &str = "/auth/callback";
/// Starts a sign-in (`?next=PATH`).
pub const SIGN_IN_PATH: &str = "/auth/sign-in";
/// Ends a session (POST, with the CSRF token).
pub const SIGN_OUT_PATH: &str = "/auth/sign-out";
/// Says that the session ended.
pub const SIGNED_OUT_PATH: &str = "/auth/signed-out";
/// The header carrying the CSRF token of a session's state-changing request (forms send the
/// `csrf` field instead).
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The identity of the `--api-token-file` token.
pub const LEGACY_TOKEN_IDENTITY: &str = "api-token";
/// The identity of a report authenticated by its signature.
pub const SIGNATURE_IDENTITY: &str = "webhook-signature";
/// The identity of a request to a hub without credentials.
pub const ANONYMOUS_IDENTITY: &str = "anonymous";

/// What a request wants to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Read what the API and the dashboard show.
    Read,
    /// Post a report (ingest).
    Report,
    /// Approve a promotion into an environment.
    Approve(&'a str),
    /// Freeze or unfreeze an environment (its approvers and admins may).
    Freeze(&'a str),
    /// Tell the hub of a promotion into an environment, for its audit log (its approvers and
    /// admins may).
    Promote(&'a str),
    /// Anything else that changes the hub (freezes, a refresh...).
    Admin,
}

impl fmt::Display for Action<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Read => f.write_str("read"),
            Action::Report => f.write_str("report"),
            Action::Approve(env) => write!(f, "approve in {env}"),
            Action::Freeze(env) => write!(f, "freeze or unfreeze {env}"),
            Action::Promote(env) => write!(f, "report promotions into {env}"),
            Action::Admin => f.write_str("administer"),
        }
    }
}

/// A token's scope.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// `read`.
    Read,
    /// `report`.
    Report,
    /// `approve` (every environment) or `approve:ENV`.
    Approve(Option<String>),
    /// `admin`: everything.
    Admin,
}

impl Scope {
    /// Parses `read`, `report`, `approve`, `approve:ENV` or `admin`.
    pub fn parse(text: &str) -> Option<Scope> {
        match text.trim() {
            "read" => Some(Scope::Read),
            "report" => Some(Scope::Report),
            "approve" => Some(Scope::Approve(None)),
            "admin" => Some(Scope::Admin),
            other => other
                .strip_prefix("approve:")
                .filter(|env| !env.is_empty() && !env.contains(char::is_whitespace))
                .map(|env| Scope::Approve(Some(env.to_owned()))),
        }
    }
}

/// A member of a role: a person by identity, everyone in a group, or anyone signed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    /// `user:ID`: the person whose identity (e-mail or subject) is ID.
    User(String),
    /// `group:NAME`: anyone whose groups claim lists NAME.
    Group(String),
    /// `*`.
    Anyone,
}

impl Member {
    /// Parses `user:ID`, `group:NAME` or `*`.
    pub fn parse(text: &str) -> Option<Member> {
        let text = text.trim();
        if text == "*" {
            return Some(Member::Anyone);
        }
        let (kind, name) = text.split_once(':')?;
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        match kind {
            "user" => Some(Member::User(name.to_owned())),
            "group" => Some(Member::Group(name.to_owned())),
            _ => None,
        }
    }

    fn includes(&self, identity: &str, subject: &str, groups: &[String]) -> bool {
        match self {
            Member::Anyone => true,
            Member::User(id) => id == identity || id == subject,
            Member::Group(g) => groups.iter().any(|x| x == g),
        }
    }
}

/// The SHA-256 of a token, as the configuration file holds it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl TokenHash {
    /// The hash of `token` (surrounding whitespace ignored, as in token files).
    pub fn of(token: &str) -> TokenHash {
        TokenHash(Sha256::digest(token.trim().as_bytes()).into())
    }

    /// Parses `sha256:<64 hex digits>`.
    pub fn parse(text: &str) -> Option<TokenHash> {
        let hex = text.trim().strip_prefix("sha256:")?;
        let bytes = hex::decode(hex).ok()?;
        Some(TokenHash(bytes.try_into().ok()?))
    }

    /// Compares in constant time.
    fn matches(&self, other: &TokenHash) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

impl fmt::Display for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// What a principal may do.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    /// Read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read: bool,
    /// Post reports.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report: bool,
    /// Approve in these environments (`*`: all).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub approve: BTreeSet<String>,
    /// Everything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
}

impl Grants {
    /// Everything.
    pub fn all() -> Grants {
        Grants {
            read: true,
            report: true,
            approve: BTreeSet::from(["*".to_owned()]),
            admin: true,
        }
    }

    fn of_scopes(scopes: &[Scope]) -> Grants {
        let mut grants = Grants::default();
        for scope in scopes {
            match scope {
                Scope::Read => grants.read = true,
                Scope::Report => grants.report = true,
                Scope::Approve(env) => {
                    grants
                        .approve
                        .insert(env.clone().unwrap_or_else(|| "*".to_owned()));
                }
                Scope::Admin => grants = Grants::all(),
            }
        }
        grants
    }

    /// Whether they allow `action`.
    pub fn allow(&self, action: Action<'_>) -> bool {
        self.admin
            || match action {
                Action::Read => self.read,
                Action::Report => self.report,
                Action::Approve(env) | Action::Freeze(env) | Action::Promote(env) => {
                    self.approve.contains("*") || self.approve.contains(env)
                }
                Action::Admin => false,
            }
    }

    /// `read, approve:stage`, or `admin` (the scopes or roles, for messages and the dashboard).
    pub fn describe(&self, person: bool) -> String {
        if self.admin {
            return "admin".to_owned();
        }
        let mut parts = Vec::new();
        if person {
            for env in &self.approve {
                parts.push(if env == "*" {
                    "approver".to_owned()
                } else {
                    format!("approver in {env}")
                });
            }
            if parts.is_empty() && self.read {
                parts.push("viewer".to_owned());
            }
        } else {
            if self.read {
                parts.push("read".to_owned());
            }
            if self.report {
                parts.push("report".to_owned());
            }
            for env in &self.approve {
                parts.push(if env == "*" {
                    "approve".to_owned()
                } else {
                    format!("approve:{env}")
                });
            }
        }
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// What kind of caller a principal is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrincipalKind {
    /// A person signed in with OpenID Connect.
    Person,
    /// An API token (named, or the `--api-token-file` one).
    Token,
    /// A report signed with the webhook secret.
    Signature,
    /// A request to a hub that has no credential for the action.
    Anonymous,
}

/// Who a request comes from, and what they may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The identity recorded in approvals and the audit log: the person's e-mail (or
    /// subject), the token's name, [`LEGACY_TOKEN_IDENTITY`], [`SIGNATURE_IDENTITY`] or
    /// [`ANONYMOUS_IDENTITY`].
    pub identity: String,
    /// The groups claim of a person (empty for tokens): what a PromotionPolicy's `group:`
    /// approvers match.
    pub groups: Vec<String>,
    /// What kind of caller.
    pub kind: PrincipalKind,
    /// What they may do.
    pub grants: Grants,
}

impl Principal {
    fn anonymous() -> Principal {
        Principal {
            identity: ANONYMOUS_IDENTITY.to_owned(),
            groups: Vec::new(),
            kind: PrincipalKind::Anonymous,
            grants: Grants::all(),
        }
    }

    /// The roles or scopes, as people read them.
    pub fn describe(&self) -> String {
        self.grants.describe(self.kind == PrincipalKind::Person)
    }
}

struct NamedToken {
    name: String,
    hash: TokenHash,
    grants: Grants,
}

/// Everything the hub authenticates with, built once at start.
pub struct Auth {
    legacy: Option<Secret>,
    webhook_secret: Option<Secret>,
    tokens: Vec<NamedToken>,
    viewers: Vec<Member>,
    approvers: BTreeMap<String, Vec<Member>>,
    admins: Vec<Member>,
    oidc: Option<oidc::Client>,
    sessions: session::Sessions,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("legacy_token", &self.legacy.is_some())
            .field("webhook_secret", &self.webhook_secret.is_some())
            .field("tokens", &self.tokens.iter().map(|t| &t.name).collect::<Vec<_>>())
            .field("oidc", &self.oidc.is_some())
            .finish_non_exhaustive()
    }
}

/// What [`Auth`] is built from.
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// The `--api-token-file` token (allowed everything).
    pub api_token: Option<Secret>,
    /// The `--webhook-secret-file` secret reports are signed with.
    pub webhook_secret: Option<Secret>,
    /// The configuration file's sections.
    pub file: AuthFile,
    /// The OIDC client secret (read from `oidc.clientSecretFile`).
    pub oidc_client_secret: Option<Secret>,
    /// The session key (read from `session.secretFile`; none: random).
    pub session_secret: Option<Secret>,
}

impl Auth {
    /// Builds the authenticator.
    pub fn new(settings: &AuthSettings) -> Auth {
        let file = &settings.file;
        let secure = file
            .oidc
            .as_ref()
            .is_some_and(|o| o.redirect_url.starts_with("https://"));
        Auth {
            legacy: settings.api_token.clone(),
            webhook_secret: settings.webhook_secret.clone(),
            tokens: file
                .tokens
                .iter()
                .map(|(name, hash, scopes)| NamedToken {
                    name: name.clone(),
                    hash: hash.clone(),
                    grants: Grants::of_scopes(scopes),
                })
                .collect(),
            viewers: file.viewers.clone(),
            approvers: file.approvers.clone(),
            admins: file.admins.clone(),
            oidc: file
                .oidc
                .as_ref()
                .map(|o| oidc::Client::new(o, settings.oidc_client_secret.clone())),
            sessions: session::Sessions::new(settings.session_secret.as_ref(), file.session_ttl, secure),
        }
    }

    /// The webhook secret reports are signed with.
    pub fn webhook_secret(&self) -> Option<&Secret> {
        self.webhook_secret.as_ref()
    }

    /// The OIDC client, when people can sign in.
    pub fn oidc(&self) -> Option<&oidc::Client> {
        self.oidc.as_ref()
    }

    /// The session cookies.
    pub fn sessions(&self) -> &session::Sessions {
        &self.sessions
    }

    /// Whether reading (and approving, administering) needs a credential.
    pub fn protects_reads(&self) -> bool {
        self.legacy.is_some()
            || self.oidc.is_some()
            || self
                .tokens
                .iter()
                .any(|t| t.grants.read || t.grants.admin || !t.grants.approve.is_empty())
    }

    /// Whether reports need a credential.
    pub fn protects_reports(&self) -> bool {
        self.webhook_secret.is_some() || self.tokens.iter().any(|t| t.grants.report)
    }

    fn open(&self, action: Action<'_>) -> bool {
        match action {
            Action::Report => !self.protects_reports(),
            _ => !self.protects_reads(),
        }
    }

    /// The roles of a person with identity `identity`, subject `subject` and `groups`.
    pub fn roles_of(&self, identity: &str, subject: &str, groups: &[String]) -> Grants {
        let any = |members: &[Member]| members.iter().any(|m| m.includes(identity, subject, groups));
        if any(&self.admins) {
            return Grants {
                read: true,
                report: false,
                approve: BTreeSet::from(["*".to_owned()]),
                admin: true,
            };
        }
        let approve: BTreeSet<String> = self
            .approvers
            .iter()
            .filter(|(_, members)| any(members))
            .map(|(env, _)| env.clone())
            .collect();
        Grants {
            read: !approve.is_empty() || any(&self.viewers),
            report: false,
            approve,
            admin: false,
        }
    }

    /// The principal of the bearer token `given`: `Ok(None)` when it matches none.
    fn token(&self, given: &str) -> Option<Principal> {
        if let Some(legacy) = &self.legacy
            && digest_eq(given.as_bytes(), legacy.expose().as_bytes())
        {
            return Some(Principal {
                identity: LEGACY_TOKEN_IDENTITY.to_owned(),
                groups: Vec::new(),
                kind: PrincipalKind::Token,
                grants: Grants::all(),
            });
        }
        let hash = TokenHash::of(given);
        // Every configured hash is compared, so that the time taken does not say which matched.
        let mut found = None;
        for token in &self.tokens {
            if token.hash.matches(&hash) && found.is_none() {
                found = Some(token);
            }
        }
        found.map(|t| Principal {
            identity: t.name.clone(),
            groups: Vec::new(),
            kind: PrincipalKind::Token,
            grants: t.grants.clone(),
        })
    }

    /// The principal of `headers` for `action`, `csrf` being the CSRF token the request
    /// carries (needed from a session for anything but reading). `now` is Unix seconds.
    pub fn principal(
        &self,
        headers: &HeaderMap,
        action: Action<'_>,
        csrf: Option<&str>,
        now: i64,
    ) -> Result<Principal, ApiError> {
        self.caller(headers, action, csrf, now)?.may(action)
    }

    /// Who `headers` come from, before what they want is known: 401 for a wrong bearer token
    /// (or none, where `action` needs a credential), 403 for a session's request without its
    /// CSRF token (anything but reading). Only `action`'s kind matters here (reading, reporting
    /// or changing something), not its environment: [`Caller::may`] checks that.
    pub fn caller(
        &self,
        headers: &HeaderMap,
        action: Action<'_>,
        csrf: Option<&str>,
        now: i64,
    ) -> Result<Caller, ApiError> {
        let open = self.open(action);
        if let Some(given) = bearer(headers) {
            return match self.token(given) {
                Some(p) => Ok(Caller {
                    principal: Some(p),
                    open,
                }),
                None if open => Ok(Caller {
                    principal: None,
                    open,
                }),
                None => Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    Some("Authorization"),
                    "invalid bearer token",
                )),
            };
        }
        if let Some(session) = self.sessions.read(headers, now) {
            if action != Action::Read {
                let given = csrf
                    .or_else(|| headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok()))
                    .unwrap_or_default();
                if !digest_eq(given.as_bytes(), session.csrf.as_bytes()) {
                    return Err(forbidden(
                        "missing or wrong CSRF token: reload the page and try again".to_owned(),
                    ));
                }
            }
            return Ok(Caller {
                principal: Some(Principal {
                    identity: session.identity.clone(),
                    groups: session.groups.clone(),
                    kind: PrincipalKind::Person,
                    grants: session.grants.clone(),
                }),
                open,
            });
        }
        if open {
            return Ok(Caller {
                principal: None,
                open,
            });
        }
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            Some("Authorization"),
            match action {
                Action::Report => {
                    "missing credentials: sign the body (X-Signature) or send Authorization: Bearer <token with the report scope>"
                }
                _ => "missing credentials: Authorization: Bearer <token>, or sign in",
            },
        ))
    }
}

/// A request's authenticated caller ([`Auth::caller`]), to be checked against an action.
#[derive(Clone, Debug)]
pub struct Caller {
    principal: Option<Principal>,
    open: bool,
}

impl Caller {
    /// The principal, when it may do `action`: 403 naming its scopes or roles when not. On a
    /// hub without credentials for `action`, a token without the scope acts as anonymous and a
    /// person as themself.
    pub fn may(self, action: Action<'_>) -> Result<Principal, ApiError> {
        match self.principal {
            Some(p) if p.grants.allow(action) => Ok(p),
            Some(p) if self.open && p.kind == PrincipalKind::Person => Ok(p),
            Some(_) | None if self.open => Ok(Principal::anonymous()),
            Some(p) => Err(forbidden(match p.kind {
                PrincipalKind::Person => format!("{} may not {action} (roles: {})", p.identity, p.describe()),
                _ => format!(
                    "token {:?} may not {action} (its scopes: {})",
                    p.identity,
                    p.describe()
                ),
            })),
            None => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                Some("Authorization"),
                "missing credentials: Authorization: Bearer <token>, or sign in",
            )),
        }
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, None, message)
}

/// The bearer token of `headers`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Compares two secrets through their digests, so that neither the length nor the content
/// leaks through timing.
pub(crate) fn digest_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn now_s() -> i64 {
    crate::http::now_ms() / 1000
}

/// The principal of a request for `action`: a bearer token, else the session cookie (whose
/// requests need the CSRF token in the `X-CSRF-Token` header for anything but reading), else
/// nobody on a hub without credentials for it. 401 without credentials, 403 with credentials
/// that do not allow the action.
pub fn authorize(state: &HubState, headers: &HeaderMap, action: Action<'_>) -> Result<Principal, ApiError> {
    state.auth().principal(headers, action, None, now_s())
}

/// The caller of a request that changes something (an approval, a freeze...), known before its
/// body is read: 401 without valid credentials where the hub has any, 403 for a session's
/// request without its CSRF token (`csrf`, a form's field, else the `X-CSRF-Token` header).
/// What the caller may do is checked once the body names it ([`Caller::may`]).
pub fn authenticate_change(
    state: &HubState,
    headers: &HeaderMap,
    csrf: Option<&str>,
) -> Result<Caller, ApiError> {
    state.auth().caller(headers, Action::Admin, csrf, now_s())
}

/// [`authorize`] for a form post of the dashboard, whose CSRF token is the form's `csrf` field.
pub fn authorize_form(
    state: &HubState,
    headers: &HeaderMap,
    action: Action<'_>,
    csrf: Option<&str>,
) -> Result<Principal, ApiError> {
    state.auth().principal(headers, action, csrf, now_s())
}

/// The principal of a report with `body`: its `X-Signature` (HMAC-SHA256 with the webhook
/// secret) when it has one, else a bearer token with the report scope.
pub fn authorize_report(state: &HubState, headers: &HeaderMap, body: &[u8]) -> Result<Principal, ApiError> {
    let auth = state.auth();
    let signature = headers
        .get("x-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if let Some(secret) = auth.webhook_secret()
        && !signature.is_empty()
    {
        if !kalypso_git::signature::verify(secret.expose().as_bytes(), body, signature) {
            tracing::warn!("report rejected: invalid signature");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                Some("X-Signature"),
                "invalid signature",
            ));
        }
        return Ok(Principal {
            identity: SIGNATURE_IDENTITY.to_owned(),
            groups: Vec::new(),
            kind: PrincipalKind::Signature,
            grants: Grants {
                report: true,
                ..Grants::default()
            },
        });
    }
    if bearer(headers).is_none() && auth.protects_reports() {
        let message = if auth.webhook_secret().is_some() {
            "missing X-Signature header (sha256=<HMAC-SHA256 of the body>), or Authorization: Bearer <token with the report scope>"
        } else {
            "missing Authorization: Bearer <token with the report scope>"
        };
        let field = if auth.webhook_secret().is_some() {
            "X-Signature"
        } else {
            "Authorization"
        };
        return Err(ApiError::new(StatusCode::UNAUTHORIZED, Some(field), message));
    }
    auth.principal(headers, Action::Report, None, now_s())
}

/// The line `kalypso hub hash-token` prints for `token`.
pub fn hash_token(token: &str) -> String {
    TokenHash::of(token).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::HubFile;

    fn auth(yaml: &str, legacy: Option<&str>) -> Auth {
        let (_, file) = HubFile::parse(yaml, "hub.yaml").unwrap();
        Auth::new(&AuthSettings {
            api_token: legacy.map(Secret::new),
            file,
            ..AuthSettings::default()
        })
    }

    fn with_bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        h
    }

    #[test]
    fn tokens_compare_by_digest() {
        assert!(digest_eq(b"abc", b"abc"));
        assert!(!digest_eq(b"abc", b"abd"));
        assert!(!digest_eq(b"abc", b"abcd"));
    }

    #[test]
    fn scopes_and_members_parse() {
        assert_eq!(
            Scope::parse("approve:prod"),
            Some(Scope::Approve(Some("prod".into())))
        );
        assert_eq!(Scope::parse("approve:"), None);
        assert_eq!(Scope::parse("write"), None);
        assert_eq!(Member::parse("group:leads"), Some(Member::Group("leads".into())));
        assert_eq!(Member::parse("user:"), None);
        assert_eq!(
            TokenHash::parse(&hash_token(" abc\n")),
            Some(TokenHash::of("abc"))
        );
        assert_eq!(
            hash_token("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn each_token_may_do_what_its_scopes_say() {
        let yaml = format!(
            "tokens:\n- {{name: reader, hash: {}, scopes: [read]}}\n- {{name: argocd, hash: {}, scopes: [report]}}\n- {{name: ci, hash: {}, scopes: ['approve:stage']}}\n",
            hash_token("r-token"),
            hash_token("w-token"),
            hash_token("a-token")
        );
        let auth = auth(&yaml, None);
        let p = |token: &str, action| auth.principal(&with_bearer(token), action, None, 0);
        assert_eq!(p("r-token", Action::Read).unwrap().identity, "reader");
        assert_eq!(
            p("r-token", Action::Report).unwrap_err().status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(p("w-token", Action::Report).unwrap().identity, "argocd");
        assert_eq!(
            p("w-token", Action::Read).unwrap_err().status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(p("a-token", Action::Approve("stage")).unwrap().identity, "ci");
        assert!(p("a-token", Action::Approve("prod")).is_err());
        assert!(p("a-token", Action::Admin).is_err());
        assert_eq!(
            p("nope", Action::Read).unwrap_err().status(),
            StatusCode::UNAUTHORIZED
        );
        let e = p("r-token", Action::Report).unwrap_err();
        assert!(!format!("{e:?}").contains("r-token"), "{e:?}");
        assert_eq!(
            auth.principal(&HeaderMap::new(), Action::Read, None, 0)
                .unwrap_err()
                .status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn the_legacy_token_may_do_everything_and_an_open_hub_lets_anyone_in() {
        let auth = auth("", Some("legacy"));
        for action in [
            Action::Read,
            Action::Report,
            Action::Approve("prod"),
            Action::Admin,
        ] {
            let p = auth.principal(&with_bearer("legacy"), action, None, 0).unwrap();
            assert_eq!(p.identity, LEGACY_TOKEN_IDENTITY);
        }
        // Reports stay open without a webhook secret, as before.
        assert_eq!(
            auth.principal(&HeaderMap::new(), Action::Report, None, 0)
                .unwrap()
                .kind,
            PrincipalKind::Anonymous
        );
        let open = self::auth("", None);
        assert_eq!(
            open.principal(&HeaderMap::new(), Action::Admin, None, 0)
                .unwrap()
                .identity,
            ANONYMOUS_IDENTITY
        );
    }

    #[test]
    fn roles_come_from_users_and_groups() {
        let auth = auth(
            "roles:\n  viewer: [group:devs]\n  approver:\n    stage: [group:leads]\n  admin: [user:ana@contoso.com]\n",
            None,
        );
        assert!(auth.roles_of("ana@contoso.com", "ana", &[]).admin);
        let lead = auth.roles_of("lea@contoso.com", "lea", &["leads".into()]);
        assert!(
            lead.allow(Action::Read)
                && lead.allow(Action::Approve("stage"))
                && !lead.allow(Action::Approve("prod"))
        );
        assert_eq!(lead.describe(true), "approver in stage");
        let dev = auth.roles_of("vic@contoso.com", "vic", &["devs".into()]);
        assert!(dev.allow(Action::Read) && !dev.allow(Action::Admin));
        assert_eq!(dev.describe(true), "viewer");
        assert_eq!(auth.roles_of("x", "x", &[]), Grants::default());
    }
}
