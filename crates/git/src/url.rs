//! Repository locations as users write them: local paths, `file://`, `https://`, `http://`,
//! `ssh://`, `git://` and scp-like `git@host:owner/repo.git`.
//!
//! A [`RepoUrl`] keeps the text exactly as given (libgit2 needs it, credentials included) but
//! only ever shows its redacted form, so that a URL cannot leak a token through `Display`,
//! `Debug` or an error message. It also knows the few things delivery needs: whether the
//! repository is local (local GitOps repositories default to `push` mode), which GitHub
//! repository it is (for pull requests and issues), and a stable cache folder name.

use std::fmt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::redact::redact;

/// Why a repository location is unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The location is empty.
    #[error("empty repository location")]
    Empty,
    /// The URL does not parse.
    #[error("invalid repository URL {url}: {reason}")]
    Invalid {
        /// The URL, redacted.
        url: String,
        /// What is wrong.
        reason: String,
    },
}

/// How a location is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Scheme {
    /// A path on this machine (absolute or relative to the working directory).
    Path(PathBuf),
    /// `file://` URL.
    File(PathBuf),
    /// Anything reached through a transport (`https`, `http`, `ssh`, `git`, scp-like).
    Network,
}

/// A repository location.
#[derive(Clone, PartialEq, Eq)]
pub struct RepoUrl {
    raw: String,
    scheme: Scheme,
}

impl RepoUrl {
    /// Parses a location.
    pub fn parse(text: &str) -> Result<RepoUrl, Error> {
        let raw = text.trim();
        if raw.is_empty() {
            return Err(Error::Empty);
        }
        let invalid = |reason: &str| Error::Invalid {
            url: redact(raw),
            reason: reason.to_owned(),
        };
        if let Some((scheme, _)) = raw.split_once("://") {
            let parsed = url::Url::parse(raw).map_err(|e| invalid(&e.to_string()))?;
            return match scheme {
                "file" => {
                    let path = parsed
                        .to_file_path()
                        .map_err(|()| invalid("not a local file path"))?;
                    Ok(RepoUrl {
                        raw: raw.to_owned(),
                        scheme: Scheme::File(path),
                    })
                }
                "https" | "http" | "ssh" | "git" | "ssh+git" | "git+ssh" => Ok(RepoUrl {
                    raw: raw.to_owned(),
                    scheme: Scheme::Network,
                }),
                other => Err(invalid(&format!("unsupported scheme {other:?}"))),
            };
        }
        if is_scp_like(raw) {
            return Ok(RepoUrl {
                raw: raw.to_owned(),
                scheme: Scheme::Network,
            });
        }
        Ok(RepoUrl {
            raw: raw.to_owned(),
            scheme: Scheme::Path(PathBuf::from(raw)),
        })
    }

    /// A location for a local path.
    pub fn from_path(path: &Path) -> RepoUrl {
        RepoUrl {
            raw: path.to_string_lossy().into_owned(),
            scheme: Scheme::Path(path.to_owned()),
        }
    }

    /// The text to hand to libgit2 (may contain credentials: never print it).
    pub(crate) fn for_git(&self) -> &str {
        &self.raw
    }

    /// The redacted text, for messages.
    pub fn redacted(&self) -> String {
        redact(&self.raw)
    }

    /// Whether the repository is on this machine (a path or `file://`).
    pub fn is_local(&self) -> bool {
        !matches!(self.scheme, Scheme::Network)
    }

    /// The path, when the location is a plain path (not `file://`): such repositories are
    /// read in place, without a cached copy.
    pub fn plain_path(&self) -> Option<&Path> {
        match &self.scheme {
            Scheme::Path(p) => Some(p),
            _ => None,
        }
    }

    /// The path of a local repository (plain path or `file://`).
    pub fn local_path(&self) -> Option<&Path> {
        match &self.scheme {
            Scheme::Path(p) | Scheme::File(p) => Some(p),
            Scheme::Network => None,
        }
    }

    /// `(owner, repo)` when the location names a repository on a forge: the first two path
    /// segments, with a `.git` suffix removed (the original kept it, which broke `.git` URLs).
    pub fn forge_repo(&self) -> Option<(String, String)> {
        if self.is_local() {
            return None;
        }
        let path = if let Some((_, rest)) = self.raw.split_once("://") {
            let without_query = rest.split(['?', '#']).next().unwrap_or_default();
            without_query.split_once('/').map(|(_, p)| p)?.to_owned()
        } else {
            self.raw.split_once(':').map(|(_, p)| p)?.to_owned()
        };
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let owner = segments.next()?;
        let repo = segments.next()?;
        let repo = repo.strip_suffix(".git").unwrap_or(repo);
        if owner.is_empty() || repo.is_empty() {
            return None;
        }
        Some((owner.to_owned(), repo.to_owned()))
    }

    /// Where a network location is, for a provider's API: whether it is reached over plain
    /// `http` (an `https`, `ssh` or scp-like location gives `false`), the host (with the
    /// port of an `http(s)` URL, without any user), and the path segments (a `.git` suffix
    /// removed from the last). `None` for local locations.
    pub fn remote(&self) -> Option<Remote> {
        if self.is_local() {
            return None;
        }
        let (plain_http, authority, path) = match self.raw.split_once("://") {
            Some((scheme, rest)) => {
                let rest = rest.split(['?', '#']).next().unwrap_or_default();
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let web = scheme == "http" || scheme == "https";
                let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                // An ssh port is not the web port.
                let authority = if web {
                    authority
                } else {
                    authority.split(':').next().unwrap_or_default()
                };
                (scheme == "http", authority.to_owned(), path.to_owned())
            }
            None => {
                let (authority, path) = self.raw.split_once(':')?;
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                (false, host.to_owned(), path.to_owned())
            }
        };
        let mut segments: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if let Some(last) = segments.last_mut()
            && let Some(stripped) = last.strip_suffix(".git")
        {
            *last = stripped.to_owned();
        }
        if authority.is_empty() {
            return None;
        }
        Some(Remote {
            plain_http,
            host: authority.to_ascii_lowercase(),
            segments,
        })
    }

    /// A folder name for the cached copy: readable, and unique per location (credentials
    /// are not part of it, so a token change reuses the cache).
    pub fn cache_name(&self) -> String {
        let key = match &self.scheme {
            Scheme::Path(p) | Scheme::File(p) => {
                let absolute = std::path::absolute(p).unwrap_or_else(|_| p.clone());
                format!("file://{}", absolute.display())
            }
            Scheme::Network => strip_userinfo(&self.raw),
        };
        let digest = hex::encode(&Sha256::digest(key.as_bytes())[..8]);
        let readable: String = key
            .rsplit(['/', ':'])
            .find(|s| !s.is_empty())
            .unwrap_or("repo")
            .trim_end_matches(".git")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        format!("{readable}-{digest}")
    }
}

/// A network repository location taken apart (see [`RepoUrl::remote`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Reached over plain `http`.
    pub plain_http: bool,
    /// Host, with the port of an `http(s)` URL, lower case.
    pub host: String,
    /// Path segments, as written (percent-encoding kept), `.git` removed from the last.
    pub segments: Vec<String>,
}

impl Remote {
    /// `http://HOST` or `https://HOST`.
    pub fn origin(&self) -> String {
        format!(
            "{}://{}",
            if self.plain_http { "http" } else { "https" },
            self.host
        )
    }

    /// The host without its port.
    pub fn hostname(&self) -> &str {
        self.host.split(':').next().unwrap_or_default()
    }
}

/// `user@host:path` (not a Windows drive letter, no `/` before the `:`).
fn is_scp_like(raw: &str) -> bool {
    let Some((host, _)) = raw.split_once(':') else {
        return false;
    };
    !host.contains('/') && host.len() > 1 && host.contains('@')
}

fn strip_userinfo(raw: &str) -> String {
    match raw.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            let authority = &rest[..end];
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{}", &rest[end..])
        }
        None => raw.to_owned(),
    }
}

impl fmt::Display for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RepoUrl({})", self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_locations() {
        assert!(RepoUrl::parse("/tmp/repo").unwrap().plain_path().is_some());
        assert!(RepoUrl::parse("../repo").unwrap().is_local());
        let file = RepoUrl::parse("file:///tmp/gitops.git").unwrap();
        assert!(file.is_local() && file.plain_path().is_none());
        assert_eq!(file.local_path(), Some(Path::new("/tmp/gitops.git")));
        assert!(!RepoUrl::parse("https://github.com/o/r").unwrap().is_local());
        assert!(!RepoUrl::parse("git@github.com:o/r.git").unwrap().is_local());
        assert!(RepoUrl::parse("ftp://x/y").is_err());
        assert!(RepoUrl::parse("  ").is_err());
    }

    #[test]
    fn names_forge_repositories_without_git_suffix() {
        let slug = |u: &str| RepoUrl::parse(u).unwrap().forge_repo();
        let expected = Some(("contoso".to_owned(), "gitops".to_owned()));
        assert_eq!(slug("https://github.com/contoso/gitops"), expected);
        assert_eq!(slug("https://github.com/contoso/gitops.git"), expected);
        assert_eq!(slug("https://x:tok@github.com/contoso/gitops/"), expected);
        assert_eq!(slug("git@github.com:contoso/gitops.git"), expected);
        assert_eq!(slug("ssh://git@github.com/contoso/gitops.git"), expected);
        assert_eq!(slug("https://github.com/contoso"), None);
        assert_eq!(slug("/tmp/contoso/gitops"), None);
    }

    #[test]
    fn takes_network_locations_apart() {
        let remote = |u: &str| RepoUrl::parse(u).unwrap().remote().unwrap();
        let r = remote("https://user:tok@GitLab.example.com:8443/group/sub/project.git");
        assert_eq!(
            (r.plain_http, r.host.as_str()),
            (false, "gitlab.example.com:8443")
        );
        assert_eq!(r.segments, ["group", "sub", "project"]);
        assert_eq!(r.origin(), "https://gitlab.example.com:8443");
        assert_eq!(r.hostname(), "gitlab.example.com");
        let r = remote("git@ssh.dev.azure.com:v3/contoso/platform/gitops");
        assert_eq!((r.host.as_str(), r.segments.len()), ("ssh.dev.azure.com", 4));
        let r = remote("ssh://git@gitea.local:2222/o/r.git");
        assert_eq!(
            (r.host.as_str(), r.segments.as_slice()),
            ("gitea.local", &["o".to_owned(), "r".to_owned()][..])
        );
        assert!(remote("http://127.0.0.1:3000/o/r").plain_http);
        assert!(RepoUrl::parse("/tmp/r").unwrap().remote().is_none());
    }

    #[test]
    fn never_shows_credentials() {
        let url = RepoUrl::parse("https://user:s3cr3t-token@example.com/o/r.git").unwrap();
        assert_eq!(url.to_string(), "https://***@example.com/o/r.git");
        assert!(!format!("{url:?}").contains("s3cr3t"));
        assert!(!url.cache_name().contains("s3cr3t"));
        assert_eq!(
            url.cache_name(),
            RepoUrl::parse("https://example.com/o/r.git")
                .unwrap()
                .cache_name()
        );
        assert!(url.cache_name().starts_with("r-"));
    }
}
