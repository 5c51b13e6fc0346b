//! Credentials for git transports and the forge API: an HTTPS token (from an environment
//! variable, `GITHUB_AUTH_TOKEN` by default as in the original, or from a file), SSH keys (a
//! key file, or the SSH agent), and nothing at all for local repositories.
//!
//! Tokens are wrapped in [`Secret`] as soon as they are read, which registers them for
//! redaction; they are handed to libgit2 only through its credential callback, never
//! written into a URL or a repository config.

use std::path::{Path, PathBuf};

use git2::{Cred, CredentialType, RemoteCallbacks};
use serde::Deserialize;

use crate::redact::{Secret, redact};

/// The environment variable the original scheduler reads its token from.
pub const DEFAULT_TOKEN_ENV: &str = "GITHUB_AUTH_TOKEN";
/// The user name sent with a token over HTTPS (GitHub accepts any; this is its convention).
pub const DEFAULT_TOKEN_USER: &str = "x-access-token";

/// Why credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A token or passphrase file cannot be read.
    #[error("cannot read {what} file {path}: {error}")]
    ReadFile {
        /// Which secret.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (its message is part of this error's).
        error: std::io::Error,
    },
    /// An SSH key file is missing.
    #[error("SSH key {path} does not exist")]
    MissingKey {
        /// The key file.
        path: PathBuf,
    },
}

/// Where credentials come from (command-line flags, or the `auth` section of `kalypso.yaml`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthSettings {
    /// Environment variable holding the HTTPS token (default `GITHUB_AUTH_TOKEN`).
    #[serde(default)]
    pub token_env: Option<String>,
    /// File holding the HTTPS token (wins over the variable).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// User name sent with the token (default `x-access-token`).
    #[serde(default)]
    pub token_user: Option<String>,
    /// Private SSH key file (default: the SSH agent).
    #[serde(default)]
    pub ssh_key: Option<PathBuf>,
    /// Environment variable holding the SSH key's passphrase.
    #[serde(default)]
    pub ssh_passphrase_env: Option<String>,
}

/// Loaded credentials.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    token: Option<Secret>,
    token_user: String,
    ssh_key: Option<PathBuf>,
    ssh_passphrase: Option<Secret>,
}

impl Credentials {
    /// Reads the secrets `settings` point at. A missing variable means "no token" (local and
    /// public repositories need none); a named file that cannot be read is an error.
    pub fn load(settings: &AuthSettings) -> Result<Credentials, Error> {
        let token = match &settings.token_file {
            Some(path) => Some(read_secret_file("token", path)?),
            None => {
                let var = settings.token_env.as_deref().unwrap_or(DEFAULT_TOKEN_ENV);
                std::env::var(var)
                    .ok()
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty())
                    .map(Secret::new)
            }
        };
        let ssh_passphrase = settings
            .ssh_passphrase_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|v| !v.is_empty())
            .map(Secret::new);
        if let Some(key) = &settings.ssh_key
            && !key.exists()
        {
            return Err(Error::MissingKey { path: key.clone() });
        }
        Ok(Credentials {
            token,
            token_user: settings
                .token_user
                .clone()
                .unwrap_or_else(|| DEFAULT_TOKEN_USER.to_owned()),
            ssh_key: settings.ssh_key.clone(),
            ssh_passphrase,
        })
    }

    /// Credentials holding just `token`.
    pub fn with_token(token: &str) -> Credentials {
        Credentials {
            token: Some(Secret::new(token)),
            token_user: DEFAULT_TOKEN_USER.to_owned(),
            ..Credentials::default()
        }
    }

    /// The HTTPS token, if any.
    pub fn token(&self) -> Option<&Secret> {
        self.token.as_ref()
    }

    /// Callbacks answering libgit2's credential requests for a repository.
    ///
    /// Each kind of credential is offered once per connection: if the server rejects it,
    /// libgit2 asks again, and answering with the same secret would loop, so the second
    /// request fails with an authentication error that names the (redacted) URL.
    pub(crate) fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut callbacks = RemoteCallbacks::new();
        let mut offered = CredentialType::empty();
        callbacks.credentials(move |url, username_from_url, allowed| {
            let fail = |what: &str| {
                git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Http,
                    format!("{what} for {}", redact(url)),
                )
            };
            if allowed.contains(CredentialType::SSH_KEY) && !offered.contains(CredentialType::SSH_KEY) {
                offered |= CredentialType::SSH_KEY;
                let user = username_from_url.unwrap_or("git");
                let passphrase = self.ssh_passphrase.as_ref().map(Secret::expose);
                return match &self.ssh_key {
                    Some(key) => Cred::ssh_key(user, None, key, passphrase),
                    None => Cred::ssh_key_from_agent(user),
                };
            }
            if allowed.contains(CredentialType::USER_PASS_PLAINTEXT)
                && !offered.contains(CredentialType::USER_PASS_PLAINTEXT)
            {
                offered |= CredentialType::USER_PASS_PLAINTEXT;
                return match &self.token {
                    Some(token) => Cred::userpass_plaintext(&self.token_user, token.expose()),
                    None => Err(fail("the server asks for credentials and no token is configured")),
                };
            }
            if allowed.contains(CredentialType::USERNAME) && !offered.contains(CredentialType::USERNAME) {
                offered |= CredentialType::USERNAME;
                return Cred::username(username_from_url.unwrap_or("git"));
            }
            if allowed.contains(CredentialType::DEFAULT) && !offered.contains(CredentialType::DEFAULT) {
                offered |= CredentialType::DEFAULT;
                return Cred::default();
            }
            Err(fail("authentication failed"))
        });
        callbacks
    }
}

fn read_secret_file(what: &'static str, path: &Path) -> Result<Secret, Error> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::ReadFile {
        what,
        path: path.to_owned(),
        error,
    })?;
    Ok(Secret::new(text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_wins_and_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "file-token-value\n").unwrap();
        let creds = Credentials::load(&AuthSettings {
            token_file: Some(file),
            token_env: Some("KALYPSO_TEST_TOKEN_THAT_IS_NOT_SET".into()),
            ..AuthSettings::default()
        })
        .unwrap();
        assert_eq!(creds.token().unwrap().expose(), "file-token-value");
        assert_eq!(format!("{creds:?}").matches("file-token-value").count(), 0);
    }

    #[test]
    fn missing_variable_means_no_token_and_missing_file_is_an_error() {
        let creds = Credentials::load(&AuthSettings {
            token_env: Some("KALYPSO_TEST_TOKEN_THAT_IS_NOT_SET".into()),
            ..AuthSettings::default()
        })
        .unwrap();
        assert!(creds.token().is_none());
        let err = Credentials::load(&AuthSettings {
            token_file: Some("/nonexistent/kalypso/token".into()),
            ..AuthSettings::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/kalypso/token"));
        let err = Credentials::load(&AuthSettings {
            ssh_key: Some("/nonexistent/kalypso/id_ed25519".into()),
            ..AuthSettings::default()
        })
        .unwrap_err();
        assert!(matches!(err, Error::MissingKey { .. }));
    }
}
