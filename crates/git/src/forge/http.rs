//! The HTTP client the GitLab, Azure DevOps and Gitea clients share: JSON over blocking
//! ureq, one authentication header, retries of idempotent calls, and errors that name the
//! call and the repository but never a credential.

use std::cell::Cell;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Error, Provider};
use crate::redact::{Secret, redact};
use crate::retry::RetryPolicy;

/// Longest answer read (a page of pull requests or work items is far smaller).
const MAX_ANSWER: u64 = 16 * 1024 * 1024;

/// The HTTP methods used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        })
    }
}

/// A request body and its media type.
pub(crate) struct Body<'a> {
    pub(crate) content_type: &'static str,
    pub(crate) value: &'a Value,
}

impl<'a> Body<'a> {
    /// `application/json`.
    pub(crate) fn json(value: &'a Value) -> Body<'a> {
        Body {
            content_type: "application/json",
            value,
        }
    }
}

/// An answer: its JSON (`null` when empty) and the header GitLab's pagination needs.
pub(crate) struct Answer {
    pub(crate) json: Value,
    /// GitLab's `X-Next-Page` (empty on the last page).
    pub(crate) next_page: Option<String>,
}

/// A client of one provider's API for one repository.
pub(crate) struct Http {
    agent: ureq::Agent,
    provider: Provider,
    /// The repository, for messages.
    repo: String,
    /// The authentication header (name, value) when a token is configured.
    auth: Option<(&'static str, Secret)>,
    retry: RetryPolicy,
    retries: Cell<u32>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("provider", &self.provider)
            .field("repo", &self.repo)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// A client sending `auth` (its value is registered for redaction) with every request.
    pub(crate) fn new(
        provider: Provider,
        repo: String,
        auth: Option<(&'static str, String)>,
        retry: RetryPolicy,
    ) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .new_agent();
        Http {
            agent,
            provider,
            repo,
            auth: auth.map(|(name, value)| (name, Secret::new(value))),
            retry,
            retries: Cell::new(0),
        }
    }

    /// The repository, for messages.
    pub(crate) fn repo(&self) -> &str {
        &self.repo
    }

    /// Retries made so far.
    pub(crate) fn retries(&self) -> u32 {
        self.retries.get()
    }

    /// An error of `call` with `status` and `message`.
    pub(crate) fn api_error(&self, call: &str, status: u16, message: &str) -> Error {
        Error::Api {
            provider: self.provider,
            call: call.to_owned(),
            repo: self.repo.clone(),
            status,
            message: redact(message),
        }
    }

    fn transport_error(&self, call: &str, message: &str) -> Error {
        Error::Transport {
            provider: self.provider,
            call: call.to_owned(),
            repo: self.repo.clone(),
            message: redact(message),
        }
    }

    /// One request to `url`, without retrying. `call` names it in messages (`METHOD path`,
    /// no host or query).
    pub(crate) fn send(&self, method: Method, url: &str, body: Option<Body<'_>>) -> Result<Answer, Error> {
        let call = format!("{method} {}", path_of(url));
        tracing::debug!(provider = %self.provider, call = %call, "forge API");
        let auth = self.auth.as_ref().map(|(name, value)| (*name, value.expose()));
        let bytes = body.as_ref().map(|b| b.value.to_string()).unwrap_or_default();
        let content_type = body.as_ref().map_or("application/json", |b| b.content_type);
        macro_rules! with_headers {
            ($builder:expr) => {{
                let mut builder = $builder.header("accept", "application/json");
                if let Some((name, value)) = auth {
                    builder = builder.header(name, value);
                }
                builder
            }};
        }
        let result = match method {
            Method::Get => with_headers!(self.agent.get(url)).call(),
            Method::Delete => with_headers!(self.agent.delete(url)).call(),
            Method::Post => with_headers!(self.agent.post(url))
                .header("content-type", content_type)
                .send(bytes.as_bytes()),
            Method::Put => with_headers!(self.agent.put(url))
                .header("content-type", content_type)
                .send(bytes.as_bytes()),
            Method::Patch => with_headers!(self.agent.patch(url))
                .header("content-type", content_type)
                .send(bytes.as_bytes()),
        };
        let mut response = result.map_err(|e| self.transport_error(&call, &e.to_string()))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let next_page = header("x-next-page");
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_string()
            .map_err(|e| self.transport_error(&call, &format!("cannot read the answer: {e}")))?;
        if !(200..300).contains(&status) {
            return Err(self.api_error(&call, status, &message_of(&text)));
        }
        let json = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text)
                .map_err(|e| self.transport_error(&call, &format!("the answer is not JSON: {e}")))?
        };
        Ok(Answer { json, next_page })
    }

    /// A request that is safe to repeat, retried on transient failures.
    pub(crate) fn idempotent(
        &self,
        method: Method,
        url: &str,
        body: Option<Body<'_>>,
    ) -> Result<Answer, Error> {
        let mut retries = self.retries.get();
        let result = self.retry.run(
            &|| format!("{} {method} {}", self.provider, path_of(url)),
            &mut retries,
            Error::is_transient,
            || {
                self.send(
                    method,
                    url,
                    body.as_ref().map(|b| Body {
                        content_type: b.content_type,
                        value: b.value,
                    }),
                )
            },
        );
        self.retries.set(retries);
        result
    }

    /// [`Http::idempotent`], its answer decoded as `T`.
    pub(crate) fn idempotent_as<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<Body<'_>>,
    ) -> Result<T, Error> {
        let answer = self.idempotent(method, url, body)?;
        self.decode(method, url, answer.json)
    }

    /// `json` decoded as `T`, or an error naming the call.
    pub(crate) fn decode<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        json: Value,
    ) -> Result<T, Error> {
        serde_json::from_value(json).map_err(|e| {
            self.transport_error(
                &format!("{method} {}", path_of(url)),
                &format!("unexpected answer: {e}"),
            )
        })
    }
}

/// The path of `url`, without scheme, host or query: what messages show of a call.
fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    path.split('?').next().unwrap_or(path)
}

/// The message of an error answer: GitLab's `message`/`error`, Azure DevOps' `message`,
/// Gitea's `message`, else the start of the text.
fn message_of(text: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(text) {
        for key in ["message", "error"] {
            match json.get(key) {
                Some(Value::String(s)) => return s.clone(),
                Some(other @ (Value::Object(_) | Value::Array(_))) => return other.to_string(),
                _ => {}
            }
        }
    }
    text.chars().take(300).collect::<String>().trim().to_owned()
}

/// Percent-encodes a path or query component.
pub(crate) use crate::github::encode;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_show_paths_and_provider_messages() {
        assert_eq!(
            path_of("https://gitlab.com/api/v4/projects/a%2Fb/issues?state=opened"),
            "/api/v4/projects/a%2Fb/issues"
        );
        assert_eq!(message_of(r#"{"message":"409 Conflict"}"#), "409 Conflict");
        assert_eq!(
            message_of(r#"{"message":{"base":["Cannot transition"]}}"#),
            r#"{"base":["Cannot transition"]}"#
        );
        assert_eq!(message_of(r#"{"error":"invalid_token"}"#), "invalid_token");
        assert_eq!(message_of("Bad Gateway\n"), "Bad Gateway");
    }
}
