//! A minimal OpenID Connect relying party for the dashboard: the authorization code flow with
//! PKCE (S256), a `state` and a `nonce`, and ID-token validation — the signature (RS256 or
//! ES256, with `ring`) by a key of the provider's JWKS, the issuer, the audience (and `azp`
//! with several audiences), the expiry, the issue time and the nonce. The provider's discovery
//! document and keys are fetched when first needed (a provider that is down does not stop the
//! hub) and the keys again when a token names an unknown one. Only what sign-in needs is here:
//! no userinfo, no refresh tokens (a session lasts its configured time, then people sign in
//! again). Messages never carry codes, tokens or the client secret.

use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use kalypso_git::redact::Secret;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::OidcSection;

/// How long a call to the provider may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Clock skew allowed on `exp` and `iat`.
const SKEW_S: i64 = 60;
/// Keys are fetched again for an unknown key id at most this often.
const JWKS_REFETCH: Duration = Duration::from_secs(60);

/// Why a sign-in failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct OidcError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, OidcError> {
    Err(OidcError(message.into()))
}

/// A key of the provider's JWKS.
#[derive(Clone, Debug, Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Clone, Debug, Deserialize)]
struct Metadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

#[derive(Debug)]
struct Provider {
    metadata: Metadata,
    keys: Vec<Jwk>,
    keys_fetched: Instant,
}

/// What the ID token says about the person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Person {
    /// The identity claim's value (default `email`), else the subject.
    pub identity: String,
    /// The subject.
    pub subject: String,
    /// The groups claim's values.
    pub groups: Vec<String>,
}

/// The relying party of one provider.
pub struct Client {
    settings: OidcSection,
    secret: Option<Secret>,
    agent: ureq::Agent,
    provider: tokio::sync::Mutex<Option<Provider>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("issuer", &self.settings.issuer)
            .field("client_id", &self.settings.client_id)
            .finish_non_exhaustive()
    }
}

/// The PKCE challenge (S256) of `verifier`.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

impl Client {
    /// A client for `settings`, with the client secret when it has one.
    pub fn new(settings: &OidcSection, secret: Option<Secret>) -> Client {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        Client {
            settings: settings.clone(),
            secret,
            agent,
            provider: tokio::sync::Mutex::new(None),
        }
    }

    /// The configured issuer.
    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    /// The redirect URL (the hub's callback).
    pub fn redirect_url(&self) -> &str {
        &self.settings.redirect_url
    }

    async fn get_json<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        url: &str,
        what: &str,
    ) -> Result<T, OidcError> {
        let agent = self.agent.clone();
        let (url, what_owned) = (url.to_owned(), what.to_owned());
        tokio::task::spawn_blocking(move || {
            let what = what_owned;
            let mut response = agent
                .get(&url)
                .header("accept", "application/json")
                .call()
                .map_err(|e| OidcError(format!("cannot read the provider's {what} at {url}: {e}")))?;
            let status = response.status().as_u16();
            if status != 200 {
                return fail(format!("the provider's {what} at {url} answered {status}"));
            }
            let text = response
                .body_mut()
                .read_to_string()
                .map_err(|e| OidcError(format!("cannot read the provider's {what} at {url}: {e}")))?;
            serde_json::from_str::<T>(&text).map_err(|e| {
                OidcError(format!(
                    "the provider's {what} at {url} is not what OpenID Connect says: {e}"
                ))
            })
        })
        .await
        .map_err(|e| OidcError(format!("the provider's {what}: {e}")))?
    }

    /// The provider's metadata, discovered on first use.
    async fn metadata(&self) -> Result<Metadata, OidcError> {
        let mut provider = self.provider.lock().await;
        if let Some(p) = &*provider {
            return Ok(p.metadata.clone());
        }
        let issuer = self.settings.issuer.trim_end_matches('/');
        let url = format!("{issuer}/.well-known/openid-configuration");
        let metadata: Metadata = self.get_json(&url, "discovery document").await?;
        if metadata.issuer.trim_end_matches('/') != issuer {
            return fail(format!(
                "the provider's discovery document names issuer {:?}, not the configured {:?}",
                metadata.issuer, self.settings.issuer
            ));
        }
        let jwks: Jwks = self.get_json(&metadata.jwks_uri, "keys (JWKS)").await?;
        *provider = Some(Provider {
            metadata: metadata.clone(),
            keys: jwks.keys,
            keys_fetched: Instant::now(),
        });
        Ok(metadata)
    }

    /// The provider's authorization URL for a sign-in with `state`, `nonce` and PKCE
    /// `verifier`.
    pub async fn authorization_url(
        &self,
        state: &str,
        nonce: &str,
        verifier: &str,
    ) -> Result<String, OidcError> {
        let metadata = self.metadata().await?;
        let mut scopes = vec!["openid".to_owned()];
        let wanted = if self.settings.scopes.is_empty() {
            vec!["email".to_owned(), "profile".to_owned()]
        } else {
            self.settings.scopes.clone()
        };
        scopes.extend(wanted.into_iter().filter(|s| s != "openid"));
        let separator = if metadata.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        Ok(format!(
            "{}{separator}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}&nonce={}&code_challenge={}&code_challenge_method=S256",
            metadata.authorization_endpoint,
            encode(&self.settings.client_id),
            encode(&self.settings.redirect_url),
            encode(&scopes.join(" ")),
            encode(state),
            encode(nonce),
            encode(&pkce_challenge(verifier)),
        ))
    }

    /// Exchanges `code` for an ID token, validates it against `nonce` at `now` (Unix
    /// seconds) and says who signed in.
    pub async fn finish(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
        now: i64,
    ) -> Result<Person, OidcError> {
        let metadata = self.metadata().await?;
        let agent = self.agent.clone();
        let client_id = self.settings.client_id.clone();
        let secret = self.secret.clone();
        let form = [
            ("grant_type".to_owned(), "authorization_code".to_owned()),
            ("code".to_owned(), code.to_owned()),
            ("redirect_uri".to_owned(), self.settings.redirect_url.clone()),
            ("code_verifier".to_owned(), verifier.to_owned()),
            ("client_id".to_owned(), client_id.clone()),
        ];
        let endpoint = metadata.token_endpoint.clone();
        let answer: Value = tokio::task::spawn_blocking(move || {
            let mut request = agent.post(&endpoint).header("accept", "application/json");
            if let Some(secret) = &secret {
                let basic = STANDARD.encode(format!("{}:{}", encode(&client_id), encode(secret.expose())));
                request = request.header("authorization", &format!("Basic {basic}"));
            }
            let mut response = request
                .send_form(form.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(|e| {
                    OidcError(format!(
                        "cannot reach the provider's token endpoint {endpoint}: {}",
                        kalypso_git::redact(&e.to_string())
                    ))
                })?;
            let status = response.status().as_u16();
            let body: Value = response
                .body_mut()
                .read_to_string()
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or(Value::Null);
            if status != 200 {
                let error = body
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("no error code");
                let description = body
                    .get("error_description")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return fail(format!(
                    "the provider refused the code ({status} {error}{}{description})",
                    if description.is_empty() { "" } else { ": " }
                ));
            }
            Ok(body)
        })
        .await
        .map_err(|e| OidcError(format!("the token exchange: {e}")))??;
        let Some(id_token) = answer.get("id_token").and_then(Value::as_str) else {
            return fail("the provider's token answer has no id_token");
        };
        let claims = self.validate(id_token, nonce, now).await?;
        self.person(&claims)
    }

    fn person(&self, claims: &Value) -> Result<Person, OidcError> {
        let Some(subject) = claims
            .get("sub")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return fail("the ID token has no subject (sub)");
        };
        let identity_claim = self.settings.identity_claim.as_deref().unwrap_or("email");
        let identity = claims
            .get(identity_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(subject)
            .to_owned();
        let groups_claim = self.settings.groups_claim.as_deref().unwrap_or("groups");
        let groups = match claims.get(groups_claim) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(Value::String(one)) => vec![one.clone()],
            _ => Vec::new(),
        };
        Ok(Person {
            identity,
            subject: subject.to_owned(),
            groups,
        })
    }

    /// The key `kid` (or the only signing key), fetching the keys again once if unknown.
    async fn key(&self, kid: Option<&str>, kty: &str) -> Result<Jwk, OidcError> {
        let find = |keys: &[Jwk]| {
            let mut candidates = keys
                .iter()
                .filter(|k| k.kty == kty && k.usage.as_deref().is_none_or(|u| u == "sig"));
            match kid {
                Some(kid) => candidates.find(|k| k.kid.as_deref() == Some(kid)).cloned(),
                None => {
                    let first = candidates.next().cloned();
                    if candidates.next().is_some() { None } else { first }
                }
            }
        };
        let mut provider = self.provider.lock().await;
        let Some(p) = provider.as_mut() else {
            return fail("the provider's keys are not known");
        };
        if let Some(key) = find(&p.keys) {
            return Ok(key);
        }
        if p.keys_fetched.elapsed() >= JWKS_REFETCH {
            let uri = p.metadata.jwks_uri.clone();
            drop(provider);
            let jwks: Jwks = self.get_json(&uri, "keys (JWKS)").await?;
            let mut provider = self.provider.lock().await;
            if let Some(p) = provider.as_mut() {
                p.keys = jwks.keys;
                p.keys_fetched = Instant::now();
                if let Some(key) = find(&p.keys) {
                    return Ok(key);
                }
            }
        }
        fail(format!(
            "no key {:?} of type {kty} in the provider's JWKS",
            kid.unwrap_or("(none)")
        ))
    }

    /// Validates `token` (signature, issuer, audience, expiry, nonce); its claims.
    async fn validate(&self, token: &str, nonce: &str, now: i64) -> Result<Value, OidcError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return fail("the ID token is not a signed JWT");
        };
        let decode = |part: &str, what: &str| {
            URL_SAFE_NO_PAD
                .decode(part.trim_end_matches('='))
                .map_err(|_| OidcError(format!("the ID token's {what} is not base64url")))
        };
        let header: Value = serde_json::from_slice(&decode(header, "header")?)
            .map_err(|_| OidcError("the ID token's header is not JSON".to_owned()))?;
        let signature = decode(signature, "signature")?;
        // What is signed: `header.payload` as sent.
        let signed = &token[..token.rfind('.').unwrap_or(0)];
        let alg = header.get("alg").and_then(Value::as_str).unwrap_or_default();
        let kid = header.get("kid").and_then(Value::as_str);
        match alg {
            "RS256" => {
                let key = self.key(kid, "RSA").await?;
                let (Some(n), Some(e)) = (&key.n, &key.e) else {
                    return fail("the provider's RSA key has no n or e");
                };
                let components = ring::signature::RsaPublicKeyComponents {
                    n: decode(n, "key's n")?,
                    e: decode(e, "key's e")?,
                };
                components
                    .verify(
                        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                        signed.as_bytes(),
                        &signature,
                    )
                    .map_err(|_| OidcError("the ID token's signature is not valid".to_owned()))?;
            }
            "ES256" => {
                let key = self.key(kid, "EC").await?;
                let (Some("P-256"), Some(x), Some(y)) = (key.crv.as_deref(), &key.x, &key.y) else {
                    return fail("the provider's EC key is not a P-256 key");
                };
                let mut point = vec![4u8];
                point.extend(decode(x, "key's x")?);
                point.extend(decode(y, "key's y")?);
                ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed.as_bytes(), &signature)
                    .map_err(|_| OidcError("the ID token's signature is not valid".to_owned()))?;
            }
            other => {
                return fail(format!(
                    "the ID token is signed with {other:?}; RS256 or ES256 are accepted"
                ));
            }
        }
        let claims: Value = serde_json::from_slice(&decode(payload, "payload")?)
            .map_err(|_| OidcError("the ID token's payload is not JSON".to_owned()))?;
        check_claims(
            &claims,
            &self.settings.issuer,
            &self.settings.client_id,
            nonce,
            now,
        )?;
        Ok(claims)
    }
}

/// Checks the claims of a validly signed ID token.
fn check_claims(
    claims: &Value,
    issuer: &str,
    client_id: &str,
    nonce: &str,
    now: i64,
) -> Result<(), OidcError> {
    let iss = claims.get("iss").and_then(Value::as_str).unwrap_or_default();
    if iss.trim_end_matches('/') != issuer.trim_end_matches('/') {
        return fail(format!("the ID token's issuer is {iss:?}, not {issuer:?}"));
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !audiences.contains(&client_id) {
        return fail(format!("the ID token is not for this client ({client_id:?})"));
    }
    if audiences.len() > 1 && claims.get("azp").and_then(Value::as_str) != Some(client_id) {
        return fail("the ID token has several audiences and is not authorized for this client (azp)");
    }
    let Some(exp) = claims.get("exp").and_then(Value::as_i64) else {
        return fail("the ID token has no expiry (exp)");
    };
    if exp + SKEW_S < now {
        return fail("the ID token has expired");
    }
    if claims
        .get("iat")
        .and_then(Value::as_i64)
        .is_some_and(|iat| iat > now + SKEW_S)
    {
        return fail("the ID token was issued in the future (iat): check the clocks");
    }
    let given = claims.get("nonce").and_then(Value::as_str).unwrap_or_default();
    if !super::digest_eq(given.as_bytes(), nonce.as_bytes()) {
        return fail("the ID token's nonce is not the one of this sign-in");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn pkce_follows_rfc_7636() {
        // BASE64URL(SHA256(verifier)) without padding, as Python's hashlib and base64 compute it.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gFWFOEjXk"),
            "bwWFMyPfdG9qreDhH2lmftFx_dFeLDalzcT1gb_j68g"
        );
    }

    #[test]
    fn claims_are_checked() {
        let good =
            json!({"iss": "https://op", "aud": "hub", "exp": 1000, "iat": 900, "nonce": "n", "sub": "s"});
        assert!(check_claims(&good, "https://op/", "hub", "n", 950).is_ok());
        let with = |key: &str, value: Value| {
            let mut c = good.clone();
            c[key] = value;
            check_claims(&c, "https://op", "hub", "n", 950)
                .unwrap_err()
                .to_string()
        };
        assert!(with("iss", json!("https://evil")).contains("issuer"));
        assert!(with("aud", json!("other")).contains("not for this client"));
        assert!(with("aud", json!(["hub", "other"])).contains("azp"));
        assert!(with("exp", json!(100)).contains("expired"));
        assert!(with("iat", json!(5000)).contains("future"));
        assert!(with("nonce", json!("m")).contains("nonce"));
    }
}
