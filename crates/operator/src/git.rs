//! The git [`Publisher`]: delivery with `kalypso-git`, the same code `kalypso serve` uses.
//!
//! Each GitOpsRepo's branch gets the new tree as a pull request (the original's behaviour,
//! on GitHub) or as a commit pushed onto the branch, per [`kalypso_git::Mode`]; a branch that
//! already holds the tree gets nothing (the original opened empty pull requests). Git work
//! is blocking, so it runs on tokio's blocking pool; GitHub calls block on the runtime from
//! there.

use std::sync::Arc;

use futures::future::BoxFuture;
use kalypso_api::GitOpsRepoSpec;
use kalypso_core::placement::CurrentAssignment;
use kalypso_git::auth::Credentials;
use kalypso_git::deliver::{self, Context, Delivery, DeliverySettings, Destination, Mode};
use kalypso_git::forge::ProviderSettings;
use kalypso_git::issues;
use kalypso_git::repo::{Cache, Transport};
use kalypso_git::{AuthSettings, RepoUrl, RetryPolicy};
use tokio::runtime::Handle;

use crate::deliver::{PublishError, PublishRequest, Published, Publisher, ReportRequest};

/// Why the git publisher cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The credentials could not be loaded.
    #[error("cannot load git credentials: {0}")]
    Credentials(#[from] kalypso_git::auth::Error),
}

/// Delivers with `kalypso-git`.
#[derive(Clone, Debug)]
pub struct GitPublisher {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cache: Cache,
    credentials: Credentials,
    retry: RetryPolicy,
    settings: DeliverySettings,
    runtime: Handle,
}

impl GitPublisher {
    /// A publisher mirroring repositories in `cache_dir`, with credentials per `auth`
    /// (by default the token in `GITHUB_AUTH_TOKEN`, as the original).
    pub fn new(
        cache_dir: std::path::PathBuf,
        auth: &AuthSettings,
        settings: DeliverySettings,
        runtime: Handle,
    ) -> Result<GitPublisher, Error> {
        Ok(GitPublisher {
            inner: Arc::new(Inner {
                cache: Cache::new(cache_dir),
                credentials: Credentials::load(auth)?,
                retry: RetryPolicy::default(),
                settings,
                runtime,
            }),
        })
    }
}

fn published(delivery: Delivery) -> Published {
    match delivery {
        // The operator delivers to git only (`oci://` GitOpsRepos are `sync`'s and `serve`'s).
        Delivery::UpToDate { .. } | Delivery::DryRun { .. } | Delivery::Artifacts(_) => Published::UpToDate,
        Delivery::Committed { commit, .. } => Published::Pushed {
            commit: commit.to_string(),
        },
        Delivery::PullRequest { url, commit, .. } => Published::PullRequest {
            url,
            commit: commit.to_string(),
        },
    }
}

impl GitPublisher {
    /// Runs `work` on the blocking pool with a delivery context.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Context<'_>) -> T + Send + 'static,
    ) -> Result<T, tokio::task::JoinError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let transport = Transport::new(&inner.credentials, inner.retry);
            let ctx = Context {
                cache: &inner.cache,
                transport: &transport,
                credentials: &inner.credentials,
                settings: &inner.settings,
                runtime: &inner.runtime,
            };
            work(&ctx)
        })
        .await
    }
}

/// The forge `spec`'s repository is on, as the GitOpsRepo and the operator's flags say.
fn providers_of(settings: &DeliverySettings, spec: &GitOpsRepoSpec) -> Result<ProviderSettings, String> {
    settings
        .providers()
        .for_gitops_repo(spec.provider.as_deref(), spec.provider_api_url.as_deref())
}

impl Publisher for GitPublisher {
    fn publish(&self, request: PublishRequest) -> BoxFuture<'static, Result<Published, PublishError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let failure = |message: String, transient: bool| PublishError {
                environment: request.environment.clone(),
                gitops_repo: request.gitops_repo.clone(),
                message: kalypso_git::redact(&message),
                transient,
            };
            let url = RepoUrl::parse(&request.spec.repo).map_err(|e| failure(e.to_string(), false))?;
            if request.spec.branch.trim().is_empty() {
                return Err(failure("spec.branch is empty".to_owned(), false));
            }
            let mode = inner.settings.mode.resolve(&url);
            let providers = providers_of(&inner.settings, &request.spec).map_err(|e| failure(e, false))?;
            let branch = request.spec.branch.clone();
            let content = request.content.clone();
            let publisher = GitPublisher { inner };
            let result = publisher
                .blocking(move |ctx| {
                    let dest = Destination {
                        url: &url,
                        branch: &branch,
                        mode,
                        providers: &providers,
                    };
                    deliver::deliver(ctx, &dest, &content)
                })
                .await
                .map_err(|e| failure(format!("the delivery thread failed: {e}"), true))?;
            result
                .map(published)
                .map_err(|e| failure(e.to_string(), e.is_transient()))
        })
    }

    /// Reads the branch into the publisher's cache (the same mirror it delivers through).
    fn placement(&self, spec: &GitOpsRepoSpec) -> BoxFuture<'static, Option<CurrentAssignment>> {
        let publisher = self.clone();
        let (repo, branch) = (spec.repo.clone(), spec.branch.clone());
        Box::pin(async move {
            let url = RepoUrl::parse(&repo).ok()?;
            let result = publisher
                .blocking(move |ctx| deliver::placement(ctx.cache, ctx.transport, &url, &branch))
                .await
                .ok()?;
            result
                .map_err(|error| {
                    tracing::warn!(error = %kalypso_git::redact(&error.to_string()), "cannot read the GitOps branch (for Steady placement and the mass-deletion guard); placing afresh");
                })
                .ok()
        })
    }

    /// Issues exist only in pull-request mode, on the GitOps repository's forge, as in
    /// `kalypso serve`.
    fn report(&self, request: ReportRequest) -> BoxFuture<'static, Result<(), PublishError>> {
        let publisher = self.clone();
        Box::pin(async move {
            let failure = |message: String, transient: bool| PublishError {
                environment: request.environment.clone(),
                gitops_repo: request.gitops_repo.clone(),
                message: kalypso_git::redact(&message),
                transient,
            };
            let Ok(url) = RepoUrl::parse(&request.spec.repo) else {
                return Ok(());
            };
            if publisher.inner.settings.mode.resolve(&url) != Mode::Pr || publisher.inner.settings.dry_run {
                return Ok(());
            }
            let providers =
                providers_of(&publisher.inner.settings, &request.spec).map_err(|e| failure(e, false))?;
            let (environment, failures) = (request.environment.clone(), request.failures.clone());
            let result = publisher
                .blocking(move |ctx| -> Result<(), String> {
                    let forge = ctx.forge(&url, &providers).map_err(|e| e.to_string())?;
                    issues::apply(forge.as_ref(), &environment, &failures)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                })
                .await
                .map_err(|e| failure(format!("the reporting thread failed: {e}"), true))?;
            result.map_err(|m| failure(format!("cannot report failures as issues: {m}"), true))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What publishing empty content to `spec` fails with, from a publisher with default
    /// settings whose cache is `dir` under the temporary folder.
    async fn publish_error(dir: &str, spec: GitOpsRepoSpec) -> PublishError {
        let publisher = GitPublisher::new(
            std::env::temp_dir().join(dir),
            &AuthSettings::default(),
            DeliverySettings::default(),
            Handle::current(),
        )
        .expect("publisher");
        let request = PublishRequest {
            environment: "dev".into(),
            gitops_repo: "dev".into(),
            spec,
            content: Default::default(),
        };
        publisher
            .publish(request)
            .await
            .expect_err("a refused destination")
    }

    #[tokio::test]
    async fn invalid_destinations_fail_before_any_git_work() {
        let spec = GitOpsRepoSpec {
            repo: "https://github.com/org/gitops".into(),
            branch: " ".into(),
            path: String::new(),
            ..GitOpsRepoSpec::default()
        };
        let err = publish_error("kalypso-operator-git-test", spec).await;
        assert!(err.to_string().contains("spec.branch is empty"), "{err}");
        assert!(!err.transient);
    }

    #[tokio::test]
    async fn an_unknown_provider_fails_naming_the_field() {
        let spec = GitOpsRepoSpec {
            repo: "https://git.contoso.com/org/gitops".into(),
            branch: "dev".into(),
            provider: Some("bitbucket".into()),
            ..GitOpsRepoSpec::default()
        };
        let err = publish_error("kalypso-operator-git-test-provider", spec).await;
        assert!(
            err.to_string()
                .contains("spec.provider: unknown provider \"bitbucket\""),
            "{err}"
        );
        assert!(!err.transient);
    }
}
