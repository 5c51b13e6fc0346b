//! The forges kalypso talks to beside git: GitHub, GitLab, Azure DevOps and Gitea/Forgejo,
//! behind one interface ([`Forge`]) so that `pr` mode, failure reports and commit statuses
//! are written once.
//!
//! Which forge a repository is on is inferred from its URL ([`Provider::infer`]:
//! `github.com`, `gitlab.com`, `dev.azure.com` and `*.visualstudio.com`, `codeberg.org`, an
//! Azure DevOps Server `/_git/` path) or set explicitly for self-hosted hosts
//! ([`ProviderSettings`]); any other host is GitHub (GitHub Enterprise through its API URL),
//! as before providers existed. GitHub goes through [`crate::github`] (octocrab), unchanged;
//! the others through their documented REST APIs with blocking HTTP (ureq), each in its own
//! module: [`gitlab`] (v4, `PRIVATE-TOKEN`), [`azure`] (7.1, Basic with a personal access
//! token), [`gitea`] (v1, `Authorization: token`). The token is the one git uses
//! ([`crate::auth`]); it is registered for redaction when loaded, and never part of a
//! message.
//!
//! The shapes are GitHub's ([`PullRequest`], [`Issue`]): each client maps its forge's
//! answers onto them, so that the delivery and reporting logic sees one model. A pull
//! request's `head.repo` names the repository its branch lives in: the forge's own name of
//! this repository ([`Forge::full_name`]) when the branch is here, something else for a fork,
//! which is how [`crate::deliver::is_own_pull`] tells the scheduler's pull requests apart.

pub mod azure;
pub mod gitea;
pub mod gitlab;
mod http;

use std::fmt;

use serde::Deserialize;

use crate::github::{self, GitHub};
use crate::redact::Secret;
use crate::retry::RetryPolicy;
use crate::url::RepoUrl;

pub use crate::github::{CommitStatus, Issue, Label, PullBranch, PullRequest, RepoRef, StatusState};

/// Where a repository is hosted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum Provider {
    /// GitHub or GitHub Enterprise.
    #[serde(rename = "github")]
    GitHub,
    /// GitLab (gitlab.com or self-managed).
    #[serde(rename = "gitlab")]
    GitLab,
    /// Azure DevOps Services (dev.azure.com, *.visualstudio.com) or Azure DevOps Server.
    #[serde(rename = "azure-devops")]
    AzureDevOps,
    /// Gitea or Forgejo.
    #[serde(rename = "gitea", alias = "forgejo")]
    Gitea,
}

impl Provider {
    /// Every provider with its name, as flags and configuration files spell it.
    pub const NAMES: [(Provider, &'static str); 4] = [
        (Provider::GitHub, "github"),
        (Provider::GitLab, "gitlab"),
        (Provider::AzureDevOps, "azure-devops"),
        (Provider::Gitea, "gitea"),
    ];

    /// The provider `url` is on, by its host: `github.com`, `gitlab.com`, `dev.azure.com` /
    /// `ssh.dev.azure.com` / `*.visualstudio.com` and `codeberg.org` by name, an Azure DevOps
    /// Server `…/_git/…` path by shape, and GitHub for every other host (GitHub Enterprise
    /// is reached through its API URL, as before providers were told apart). Local
    /// repositories are GitHub too: they have no API, and `pr` mode says so.
    pub fn infer(url: &RepoUrl) -> Provider {
        let Some(remote) = url.remote() else {
            return Provider::GitHub;
        };
        let host = remote.hostname();
        if host == "gitlab.com" {
            Provider::GitLab
        } else if host == "dev.azure.com"
            || host == "ssh.dev.azure.com"
            || host.ends_with(".visualstudio.com")
            || remote.segments.iter().any(|s| s == "_git")
        {
            Provider::AzureDevOps
        } else if host == "codeberg.org" {
            Provider::Gitea
        } else {
            Provider::GitHub
        }
    }

    /// The name flags and configuration files use.
    pub fn name(self) -> &'static str {
        Provider::NAMES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("github", |(_, name)| name)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::GitHub => "GitHub",
            Provider::GitLab => "GitLab",
            Provider::AzureDevOps => "Azure DevOps",
            Provider::Gitea => "Gitea",
        })
    }
}

impl std::str::FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Provider, String> {
        if s == "forgejo" {
            return Ok(Provider::Gitea);
        }
        Provider::NAMES
            .iter()
            .find(|(_, name)| *name == s)
            .map(|(p, _)| *p)
            .ok_or_else(|| format!("unknown provider {s:?} (github, gitlab, azure-devops, gitea or forgejo)"))
    }
}

/// Which forge, and where its API is, when the URL alone does not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The provider (default: inferred from the repository URL, see [`Provider::infer`]).
    pub provider: Option<Provider>,
    /// The GitHub API.
    pub github_api_url: String,
    /// The API of a GitLab (`https://HOST/api/v4`), Azure DevOps (the organisation or
    /// collection URL, `https://dev.azure.com/ORG`) or Gitea (`https://HOST/api/v1`) provider
    /// (default: derived from the repository URL).
    pub api_url: Option<String>,
}

impl ProviderSettings {
    /// The provider of `url`.
    pub fn provider_of(&self, url: &RepoUrl) -> Provider {
        self.provider.unwrap_or_else(|| Provider::infer(url))
    }

    /// The settings of one GitOpsRepo: its `spec.provider` and `spec.providerApiUrl` over
    /// these (the run's). A GitOpsRepo that names its provider is not touched by the run's
    /// `--provider` or `--provider-api-url` (they may be another forge's); one that does not
    /// takes the run's provider, and its own API URL before the run's. `Err` names the field
    /// and says why, for an unknown provider or an API URL that is not http(s).
    pub fn for_gitops_repo(
        &self,
        provider: Option<&str>,
        api_url: Option<&str>,
    ) -> Result<ProviderSettings, String> {
        let api_url = api_url.map(str::trim).filter(|a| !a.is_empty());
        if let Some(api) = api_url
            && !(api.starts_with("https://") || api.starts_with("http://"))
        {
            return Err(format!(
                "spec.providerApiUrl: {:?} is not an http(s) URL",
                crate::redact::redact(api)
            ));
        }
        let own = provider
            .map(|p| {
                p.trim()
                    .parse::<Provider>()
                    .map_err(|e| format!("spec.provider: {e}"))
            })
            .transpose()?;
        Ok(ProviderSettings {
            provider: own.or(self.provider),
            // GitHub's API is the run's `--github-api-url` unless the GitOpsRepo names one.
            github_api_url: api_url.map_or_else(|| self.github_api_url.clone(), str::to_owned),
            api_url: match (api_url, own) {
                (Some(api), _) => Some(api.to_owned()),
                (None, Some(_)) => None,
                (None, None) => self.api_url.clone(),
            },
        })
    }
}

/// A failed forge call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A GitHub call failed.
    #[error(transparent)]
    GitHub(#[from] github::Error),
    /// The repository URL does not name a repository of the provider.
    #[error("{url} is not a {provider} repository URL: {reason}")]
    Location {
        /// The provider.
        provider: Provider,
        /// The repository, redacted.
        url: String,
        /// What is missing.
        reason: String,
    },
    /// The provider answered with an error status.
    #[error("{provider} API {call} on {repo} failed: {status} {message}")]
    Api {
        /// The provider.
        provider: Provider,
        /// `METHOD /path`.
        call: String,
        /// The repository.
        repo: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message, redacted.
        message: String,
    },
    /// The call did not get an answer, or an answer that could be read.
    #[error("{provider} API {call} on {repo} failed: {message}")]
    Transport {
        /// The provider.
        provider: Provider,
        /// `METHOD /path`.
        call: String,
        /// The repository.
        repo: String,
        /// Why, redacted.
        message: String,
    },
}

impl Error {
    /// Whether retrying may help: no answer, a server error, or rate limiting.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::GitHub(e) => e.is_transient(),
            Error::Location { .. } => false,
            Error::Transport { .. } => true,
            Error::Api { status, .. } => *status >= 500 || *status == 429,
        }
    }

    /// The HTTP status of a provider's refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::GitHub(github::Error::Api { status, .. }) | Error::Api { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What kalypso does on a forge, for one repository.
///
/// Calls are blocking. Idempotent calls are retried on transient failures; creating an issue
/// is not (a lost answer may hide a created issue), so callers look first (see
/// [`crate::issues`]).
pub trait Forge: fmt::Debug {
    /// The provider.
    fn provider(&self) -> Provider;
    /// The forge's name of the repository (`owner/repo`, a GitLab project path, an Azure
    /// DevOps `org/project/repo`): the `head.repo` of pull requests from its own branches.
    fn full_name(&self) -> String;
    /// Retries made so far.
    fn retries(&self) -> u32;
    /// Open pull requests into `base`, every page.
    fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error>;
    /// Opens a pull request; `None` when the forge says one already exists for `head`.
    fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error>;
    /// Closes (abandons) a pull request.
    fn close_pull(&self, number: u64) -> Result<(), Error>;
    /// Adds a label to a pull request.
    fn add_label(&self, number: u64, label: &str) -> Result<(), Error>;
    /// Removes a label from a pull request (absent is fine).
    fn remove_label(&self, number: u64, label: &str) -> Result<(), Error>;
    /// Open failure reports (issues, or Azure Boards work items), pull requests excluded.
    fn open_issues(&self) -> Result<Vec<Issue>, Error>;
    /// Files a failure report. Not retried.
    fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error>;
    /// Replaces a report's text.
    fn update_issue(&self, number: u64, body: &str) -> Result<(), Error>;
    /// Closes a report.
    fn close_issue(&self, number: u64) -> Result<(), Error>;
    /// Sets a commit status on `sha`; statuses of the same context replace each other.
    fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error>;
}

impl Forge for GitHub {
    fn provider(&self) -> Provider {
        Provider::GitHub
    }
    fn full_name(&self) -> String {
        GitHub::full_name(self)
    }
    fn retries(&self) -> u32 {
        GitHub::retries(self)
    }
    fn open_pulls(&self, base: &str) -> Result<Vec<PullRequest>, Error> {
        Ok(GitHub::open_pulls(self, base)?)
    }
    fn create_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, Error> {
        Ok(GitHub::create_pull(self, head, base, title, body)?)
    }
    fn close_pull(&self, number: u64) -> Result<(), Error> {
        Ok(GitHub::close_pull(self, number)?)
    }
    fn add_label(&self, number: u64, label: &str) -> Result<(), Error> {
        Ok(GitHub::add_labels(self, number, &[label])?)
    }
    fn remove_label(&self, number: u64, label: &str) -> Result<(), Error> {
        Ok(GitHub::remove_label(self, number, label)?)
    }
    fn open_issues(&self) -> Result<Vec<Issue>, Error> {
        Ok(GitHub::open_issues(self)?)
    }
    fn create_issue(&self, title: &str, body: &str) -> Result<Issue, Error> {
        Ok(GitHub::create_issue(self, title, body)?)
    }
    fn update_issue(&self, number: u64, body: &str) -> Result<(), Error> {
        Ok(GitHub::update_issue(self, number, body)?)
    }
    fn close_issue(&self, number: u64) -> Result<(), Error> {
        Ok(GitHub::close_issue(self, number)?)
    }
    fn set_commit_status(&self, sha: &str, status: &CommitStatus) -> Result<(), Error> {
        Ok(GitHub::set_commit_status(self, sha, status)?)
    }
}

/// A client for the repository at `url` on its provider. GitHub calls run on `runtime`
/// (see [`crate::github`]); the others block the calling thread. `None` for GitHub when
/// `url` names no `owner/repo` (the caller says what it needed it for).
pub fn connect(
    url: &RepoUrl,
    settings: &ProviderSettings,
    token: Option<&Secret>,
    retry: RetryPolicy,
    runtime: &tokio::runtime::Handle,
) -> Result<Option<Box<dyn Forge>>, Error> {
    let provider = settings.provider_of(url);
    let location = |reason: &str| Error::Location {
        provider,
        url: url.redacted(),
        reason: reason.to_owned(),
    };
    let api = settings.api_url.as_deref().map(|a| a.trim_end_matches('/'));
    Ok(Some(match provider {
        Provider::GitHub => {
            let Some((owner, name)) = url.forge_repo() else {
                return Ok(None);
            };
            Box::new(GitHub::new(
                runtime.clone(),
                &settings.github_api_url,
                token,
                &owner,
                &name,
                retry,
            )?)
        }
        Provider::GitLab => {
            let remote = url.remote().ok_or_else(|| location("not a network location"))?;
            if remote.segments.len() < 2 {
                return Err(location("it names no GROUP/PROJECT"));
            }
            let api = api.map_or_else(|| format!("{}/api/v4", remote.origin()), str::to_owned);
            Box::new(gitlab::GitLab::new(&api, &remote.segments, token, retry))
        }
        Provider::Gitea => {
            let remote = url.remote().ok_or_else(|| location("not a network location"))?;
            let n = remote.segments.len();
            if n < 2 {
                return Err(location("it names no OWNER/REPO"));
            }
            let api = api.map_or_else(
                || {
                    let prefix: String = remote.segments[..n - 2].iter().map(|s| format!("/{s}")).collect();
                    format!("{}{prefix}/api/v1", remote.origin())
                },
                str::to_owned,
            );
            Box::new(gitea::Gitea::new(
                &api,
                &remote.segments[n - 2],
                &remote.segments[n - 1],
                token,
                retry,
            ))
        }
        Provider::AzureDevOps => {
            let repo = azure::Location::of(url).ok_or_else(|| {
                location("expected https://dev.azure.com/ORG/PROJECT/_git/REPO (or an ssh.dev.azure.com:v3/ORG/PROJECT/REPO)")
            })?;
            Box::new(azure::AzureDevOps::new(repo, api, token, retry))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn infer(url: &str) -> Provider {
        Provider::infer(&RepoUrl::parse(url).unwrap())
    }

    #[test]
    fn a_gitops_repo_that_names_its_forge_is_not_touched_by_the_runs_flags() {
        let run = ProviderSettings {
            provider: Some(Provider::GitLab),
            github_api_url: "https://ghe.contoso.com/api/v3".into(),
            api_url: Some("https://gitlab.contoso.com/api/v4".into()),
        };
        assert_eq!(
            run.for_gitops_repo(None, None).unwrap(),
            run,
            "nothing named: the run's"
        );
        let own_api = run
            .for_gitops_repo(None, Some(" https://lab2.contoso.com/api/v4 "))
            .unwrap();
        assert_eq!(own_api.provider, Some(Provider::GitLab));
        assert_eq!(
            own_api.api_url.as_deref(),
            Some("https://lab2.contoso.com/api/v4")
        );
        let gitea = run.for_gitops_repo(Some("forgejo"), None).unwrap();
        assert_eq!(gitea.provider, Some(Provider::Gitea));
        assert_eq!(
            gitea.api_url, None,
            "derived from its URL, not the run's GitLab API"
        );
        assert_eq!(gitea.github_api_url, run.github_api_url);
        let github = run
            .for_gitops_repo(Some("github"), Some("https://github.contoso.com/api/v3"))
            .unwrap();
        assert_eq!(github.github_api_url, "https://github.contoso.com/api/v3");
        let why = run.for_gitops_repo(Some("bitbucket"), None).unwrap_err();
        assert!(why.starts_with("spec.provider: "), "{why}");
        assert!(why.contains("bitbucket") && why.contains("azure-devops"), "{why}");
        let why = run.for_gitops_repo(None, Some("gitlab.contoso.com")).unwrap_err();
        assert!(why.starts_with("spec.providerApiUrl: "), "{why}");
    }

    #[test]
    fn infers_the_provider_from_the_host() {
        assert_eq!(infer("https://github.com/o/r"), Provider::GitHub);
        assert_eq!(infer("git@github.com:o/r.git"), Provider::GitHub);
        assert_eq!(infer("https://ghe.contoso.com/o/r"), Provider::GitHub);
        assert_eq!(infer("/srv/gitops"), Provider::GitHub);
        assert_eq!(
            infer("https://gitlab.com/group/sub/project.git"),
            Provider::GitLab
        );
        assert_eq!(infer("git@gitlab.com:group/project.git"), Provider::GitLab);
        assert_eq!(
            infer("https://dev.azure.com/contoso/platform/_git/gitops"),
            Provider::AzureDevOps
        );
        assert_eq!(
            infer("https://contoso@dev.azure.com/contoso/platform/_git/gitops"),
            Provider::AzureDevOps
        );
        assert_eq!(
            infer("git@ssh.dev.azure.com:v3/contoso/platform/gitops"),
            Provider::AzureDevOps
        );
        assert_eq!(
            infer("https://contoso.visualstudio.com/platform/_git/gitops"),
            Provider::AzureDevOps
        );
        assert_eq!(
            infer("https://tfs.contoso.com/DefaultCollection/platform/_git/gitops"),
            Provider::AzureDevOps
        );
        assert_eq!(infer("https://codeberg.org/o/r.git"), Provider::Gitea);
    }

    #[test]
    fn names_parse_and_print() {
        for (provider, name) in Provider::NAMES {
            assert_eq!(name.parse::<Provider>(), Ok(provider));
            assert_eq!(provider.name(), name);
        }
        assert_eq!("forgejo".parse::<Provider>(), Ok(Provider::Gitea));
        assert!("bitbucket".parse::<Provider>().unwrap_err().contains("gitlab"));
        assert_eq!(Provider::AzureDevOps.to_string(), "Azure DevOps");
        let yaml: Provider = serde_yaml_ng::from_str("forgejo").unwrap();
        assert_eq!(yaml, Provider::Gitea);
    }

    #[test]
    fn derives_each_api_from_the_repository_url() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let settings = |provider| ProviderSettings {
            provider,
            github_api_url: github::DEFAULT_API_URL.to_owned(),
            api_url: None,
        };
        let debug = |url: &str, provider: Option<Provider>| {
            let forge = connect(
                &RepoUrl::parse(url).unwrap(),
                &settings(provider),
                None,
                RetryPolicy::immediate(1),
                runtime.handle(),
            )
            .unwrap()
            .unwrap();
            (forge.provider(), forge.full_name(), format!("{forge:?}"))
        };
        let (p, name, d) = debug("https://gitlab.com/group/sub/project.git", None);
        assert_eq!((p, name.as_str()), (Provider::GitLab, "group/sub/project"));
        assert!(
            d.contains("https://gitlab.com/api/v4/projects/group%2Fsub%2Fproject"),
            "{d}"
        );
        let (p, name, d) = debug("http://git.local:3000/team/gitops", Some(Provider::Gitea));
        assert_eq!((p, name.as_str()), (Provider::Gitea, "team/gitops"));
        assert!(
            d.contains("http://git.local:3000/api/v1/repos/team/gitops"),
            "{d}"
        );
        let (p, name, d) = debug("git@ssh.dev.azure.com:v3/contoso/platform/gitops", None);
        assert_eq!(
            (p, name.as_str()),
            (Provider::AzureDevOps, "contoso/platform/gitops")
        );
        assert!(
            d.contains("https://dev.azure.com/contoso/platform/_apis/git/repositories/gitops"),
            "{d}"
        );
        let (_, _, d) = debug(
            "https://contoso.visualstudio.com/DefaultCollection/platform/_git/gitops",
            None,
        );
        assert!(
            d.contains(
                "https://contoso.visualstudio.com/DefaultCollection/platform/_apis/git/repositories/gitops"
            ),
            "{d}"
        );
        let err = connect(
            &RepoUrl::parse("https://gitlab.com/lonely").unwrap(),
            &settings(None),
            None,
            RetryPolicy::immediate(1),
            runtime.handle(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "https://gitlab.com/lonely is not a GitLab repository URL: it names no GROUP/PROJECT"
        );
        let local = connect(
            &RepoUrl::parse("/srv/gitops").unwrap(),
            &settings(None),
            None,
            RetryPolicy::immediate(1),
            runtime.handle(),
        )
        .unwrap();
        assert!(local.is_none());
    }
}
