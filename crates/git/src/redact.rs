//! Credentials never leave the process: every text that can reach a log, an error message,
//! standard output, a GitHub issue or a commit passes through [`redact`] first.
//!
//! Two kinds of secrets are scrubbed. Credentials written into URLs
//! (`https://user:token@host/...`) are recognised by shape, wherever a URL appears in a
//! text. Tokens read from the environment or from files are registered with
//! [`register_secret`] when they are loaded, and every later occurrence of them is replaced,
//! whatever the text around them (libgit2 and HTTP libraries may echo them in unexpected
//! places). The registry is process-wide on purpose: an error can be formatted far from the
//! code that loaded the token, and forgetting to pass a redactor along must not leak it.

use std::fmt;
use std::sync::{Mutex, PoisonError};

/// What replaces a secret.
pub const MASK: &str = "***";

/// Secrets shorter than this are not registered: replacing every `a` in a text would make it
/// unreadable and protect nothing.
const MIN_SECRET_LEN: usize = 4;

static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Remembers `secret` so that [`redact`] masks it everywhere from now on.
pub fn register_secret(secret: &str) {
    let secret = secret.trim();
    if secret.len() < MIN_SECRET_LEN {
        return;
    }
    let mut secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    if !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_owned());
        // Longest first, so that a secret containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with URL credentials and registered secrets masked.
pub fn redact(text: &str) -> String {
    let mut out = strip_url_credentials(text);
    let secrets = SECRETS.lock().unwrap_or_else(PoisonError::into_inner);
    for secret in secrets.iter() {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

/// Replaces the user-info part of every `scheme://user-info@host` in `text` with [`MASK`].
fn strip_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (before, after) = rest.split_at(pos + 3);
        out.push_str(before);
        // The authority ends at the first character that cannot be part of it.
        let end = after
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || "\"'<>`".contains(c))
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str(MASK);
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A secret value (a token, a passphrase): `Debug` and `Display` print [`MASK`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value` and registers it for redaction.
    pub fn new(value: impl Into<String>) -> Secret {
        let value = value.into();
        register_secret(&value);
        Secret(value)
    }

    /// The value itself, for the one place that must send it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_credentials_from_every_url() {
        assert_eq!(
            redact("fetch https://x-access-token:ghp_abc@github.com/o/r.git failed; see http://u@h:80/x"),
            "fetch https://***@github.com/o/r.git failed; see http://***@h:80/x"
        );
        assert_eq!(redact("ssh://git@host/repo"), "ssh://***@host/repo");
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(redact("file:///tmp/a@b/repo"), "file:///tmp/a@b/repo");
        assert_eq!(redact("'https://a:b@h'"), "'https://***@h'");
    }

    #[test]
    fn masks_registered_secrets_anywhere() {
        let secret = Secret::new("tok-0123456789-redaction-test");
        assert_eq!(format!("{secret:?} {secret}"), "*** ***");
        assert_eq!(
            redact("Authorization: Bearer tok-0123456789-redaction-test!"),
            "Authorization: Bearer ***!"
        );
        assert_eq!(secret.expose(), "tok-0123456789-redaction-test");
    }

    #[test]
    fn short_secrets_are_not_registered() {
        register_secret("ab");
        assert_eq!(redact("abc"), "abc");
    }
}
