//! The dashboard's sign-in sessions, kept in the browser as cookies signed by the hub
//! (HMAC-SHA256 with the session key), so that replicas sharing the key share sessions and the
//! database holds none. A session cookie carries the person's identity, roles, a CSRF token and
//! its expiry; it is `HttpOnly`, `SameSite=Lax` and, when the hub is reached over https,
//! `Secure`. Signing out clears it and revokes it on this replica (until it would have expired).
//! The sign-in cookie carries the state, nonce and PKCE verifier of a sign-in under way.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use kalypso_git::redact::Secret;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::Grants;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kalypso_session";
/// The sign-in cookie's name (a sign-in under way).
pub const SIGN_IN_COOKIE: &str = "kalypso_sign_in";
/// How long a sign-in may take at the provider.
pub const SIGN_IN_TTL: Duration = Duration::from_secs(600);

/// A signed-in person's session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The person's identity (e-mail, or subject).
    pub identity: String,
    /// The person's groups at sign-in (what a PromotionPolicy's `group:` approvers match).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The session's id (revocation).
    pub sid: String,
    /// The CSRF token every state-changing request of the session carries.
    pub csrf: String,
    /// The person's roles at sign-in.
    pub grants: Grants,
    /// Unix seconds after which the session is over.
    pub exp: i64,
}

/// A sign-in under way: what the callback checks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignIn {
    /// The `state` sent to the provider.
    pub state: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
    /// Where to go once signed in (a path of the hub).
    pub next: String,
    /// Unix seconds after which the sign-in is over.
    pub exp: i64,
}

/// Signs, reads and revokes cookies.
pub struct Sessions {
    key: Secret,
    ttl: Duration,
    secure: bool,
    revoked: Mutex<HashMap<String, i64>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("ttl", &self.ttl)
            .field("secure", &self.secure)
            .finish_non_exhaustive()
    }
}

/// `n` random bytes as URL-safe base64.
pub fn random_token(n: usize) -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .unwrap_or_else(|_| panic!("the system's random source failed"));
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Sessions {
    /// Sessions signed with `key` (none: a random one), lasting `ttl`, `Secure` cookies when
    /// `secure`.
    pub fn new(key: Option<&Secret>, ttl: Duration, secure: bool) -> Sessions {
        Sessions {
            key: key.cloned().unwrap_or_else(|| Secret::new(random_token(32))),
            ttl,
            secure,
            revoked: Mutex::new(HashMap::new()),
        }
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn mac(&self, purpose: &str, payload: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.key.expose().as_bytes())
            .unwrap_or_else(|_| panic!("HMAC takes keys of any length"));
        mac.update(purpose.as_bytes());
        mac.update(b".");
        mac.update(payload.as_bytes());
        mac
    }

    fn seal<T: Serialize>(&self, purpose: &str, value: &T) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(self.mac(purpose, &payload).finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    fn open<T: DeserializeOwned>(&self, purpose: &str, text: &str) -> Option<T> {
        let (payload, tag) = text.split_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        self.mac(purpose, payload).verify_slice(&tag).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
    }

    fn cookie(&self, name: &str, value: &str, path: &str, max_age: i64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}"
        ))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// A new session for `identity` in `groups` with `grants`, from `now` (Unix seconds), and
    /// its `Set-Cookie` value.
    pub fn start(
        &self,
        identity: &str,
        groups: &[String],
        grants: Grants,
        now: i64,
    ) -> (Session, HeaderValue) {
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX / 2);
        let session = Session {
            identity: identity.to_owned(),
            groups: groups.to_vec(),
            sid: random_token(16),
            csrf: random_token(24),
            grants,
            exp: now.saturating_add(ttl),
        };
        let value = self.seal("session", &session);
        let cookie = self.cookie(SESSION_COOKIE, &value, "/", ttl);
        (session, cookie)
    }

    /// The valid session `headers` carry at `now`, if any.
    pub fn read(&self, headers: &HeaderMap, now: i64) -> Option<Session> {
        let session: Session = self.open("session", cookie(headers, SESSION_COOKIE)?)?;
        if session.exp <= now {
            return None;
        }
        let mut revoked = self.revoked.lock().unwrap_or_else(PoisonError::into_inner);
        revoked.retain(|_, exp| *exp > now);
        (!revoked.contains_key(&session.sid)).then_some(session)
    }

    /// Revokes `session` on this replica; the `Set-Cookie` value that clears it.
    pub fn end(&self, session: &Session) -> HeaderValue {
        self.revoked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.sid.clone(), session.exp);
        self.clear(SESSION_COOKIE, "/")
    }

    /// The `Set-Cookie` value that clears cookie `name` of `path`.
    pub fn clear(&self, name: &str, path: &str) -> HeaderValue {
        self.cookie(name, "", path, 0)
    }

    /// The sign-in cookie for `sign_in`.
    pub fn sign_in_cookie(&self, sign_in: &SignIn) -> HeaderValue {
        let max_age = i64::try_from(SIGN_IN_TTL.as_secs()).unwrap_or(600);
        self.cookie(SIGN_IN_COOKIE, &self.seal("sign-in", sign_in), "/auth", max_age)
    }

    /// The sign-in under way that `headers` carry, if valid at `now`.
    pub fn sign_in(&self, headers: &HeaderMap, now: i64) -> Option<SignIn> {
        let sign_in: SignIn = self.open("sign-in", cookie(headers, SIGN_IN_COOKIE)?)?;
        (sign_in.exp > now).then_some(sign_in)
    }
}

/// The value of cookie `name` in `headers`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn headers(set_cookie: &HeaderValue) -> HeaderMap {
        let pair = set_cookie.to_str().unwrap().split(';').next().unwrap().to_owned();
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, format!("other=1; {pair}").parse().unwrap());
        h
    }

    #[test]
    fn a_session_reads_back_until_it_expires_or_ends() {
        let sessions = Sessions::new(None, Duration::from_secs(60), true);
        let (session, set) = sessions.start("ana@contoso.com", &["leads".to_owned()], Grants::all(), 1000);
        let text = set.to_str().unwrap();
        assert!(
            text.contains("HttpOnly")
                && text.contains("SameSite=Lax")
                && text.contains("Secure")
                && text.contains("Path=/;"),
            "{text}"
        );
        let h = headers(&set);
        assert_eq!(sessions.read(&h, 1010), Some(session.clone()));
        assert_eq!(sessions.read(&h, 1060), None, "expired");
        // Another key (another hub) does not accept it; a changed payload is refused.
        assert_eq!(
            Sessions::new(None, Duration::from_secs(60), true).read(&h, 1010),
            None
        );
        let forged = text.replacen("kalypso_session=e", "kalypso_session=f", 1);
        assert_eq!(
            sessions.read(&headers(&HeaderValue::from_str(&forged).unwrap()), 1010),
            None
        );
        let cleared = sessions.end(&session);
        assert!(cleared.to_str().unwrap().contains("Max-Age=0"));
        assert_eq!(sessions.read(&h, 1010), None, "revoked");
    }

    #[test]
    fn a_shared_key_shares_sessions_and_plain_http_drops_secure() {
        let key = Secret::new("k".repeat(32));
        let a = Sessions::new(Some(&key), Duration::from_secs(60), false);
        let b = Sessions::new(Some(&key), Duration::from_secs(60), false);
        let (session, set) = a.start("ana", &[], Grants::default(), 0);
        assert!(!set.to_str().unwrap().contains("Secure"));
        assert_eq!(b.read(&headers(&set), 1), Some(session));
        let sign_in = SignIn {
            state: "s".into(),
            nonce: "n".into(),
            verifier: "v".into(),
            next: "/".into(),
            exp: 10,
        };
        let set = a.sign_in_cookie(&sign_in);
        assert!(set.to_str().unwrap().contains("Path=/auth;"));
        assert_eq!(b.sign_in(&headers(&set), 5), Some(sign_in));
        assert_eq!(b.sign_in(&headers(&set), 10), None);
        // A session cookie is not a sign-in cookie.
        assert_eq!(a.open::<SignIn>("sign-in", "x.y"), None);
    }
}
