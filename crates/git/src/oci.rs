//! Delivery to OCI registries: a GitOpsRepo whose `spec.repo` is `oci://HOST/PATH` gets each
//! cluster type of the environment as a Flux artifact (see `kalypso_oci`), from the same
//! render and the same record of delivered files as a git branch.
//!
//! This module is the seam between a sync and `kalypso_oci`: which GitOpsRepos are OCI
//! locations (and what cannot be asked of them: pull requests), the registry client a pass
//! shares (created on first use, so that a git-only control plane never reads a Docker
//! config), the git ids of the files delivered before (which tell `kalypso_oci` what is
//! unchanged without their content), and the provenance written into the artifacts.

use std::sync::OnceLock;

use kalypso_core::placement::{CurrentAssignment, current_from_folders, current_from_paths};
use kalypso_oci::artifact::folder_names;
pub use kalypso_oci::auth::{DEFAULT_TOKEN_ENV, USERNAME_ENV};
use kalypso_oci::deliver::{Destination, Provenance, Settings};
use kalypso_oci::read::Snapshot;
pub use kalypso_oci::{AuthSettings, Report};
use kalypso_oci::{GitId, Location, Registry, Retry};

use crate::control_plane::GitOpsTarget;
use crate::deliver::Mode;
use crate::delivered::DeliveredFiles;
use crate::retry::RetryPolicy;
use crate::treewrite::Hashed;

/// A GitOpsRepo delivered to a registry.
#[derive(Clone, Debug)]
pub struct OciTarget {
    /// The GitOpsRepo's name.
    pub name: String,
    /// Where (`oci://HOST/PATH`).
    pub location: Location,
    /// The environment's tag (the GitOpsRepo's `spec.branch`).
    pub tag: String,
}

/// Whether a GitOpsRepo's repository (or the `--gitops-repo` given instead) is an OCI location.
pub fn is_oci(repo: &str) -> bool {
    kalypso_oci::is_oci(repo)
}

/// The GitOpsRepos of `gitops` that are OCI locations (`repo_override` replaces every
/// `spec.repo`), checked: a valid location and tag, and no pull requests asked for. `Err`:
/// (GitOpsRepo, why).
pub fn targets(
    gitops: &[GitOpsTarget],
    repo_override: Option<&str>,
    mode: Mode,
) -> Result<Vec<OciTarget>, (String, String)> {
    gitops
        .iter()
        .filter(|g| is_oci(repo_override.unwrap_or(&g.repo)))
        .map(|g| {
            let invalid = |reason: String| (g.name.clone(), reason);
            let text = repo_override.unwrap_or(&g.repo);
            let location = Location::parse(text).map_err(|e| invalid(e.to_string()))?;
            if mode == Mode::Pr {
                return Err(invalid(format!(
                    "{location} is an OCI registry: artifacts are pushed, there is nothing to open a pull request \
                     on (use --mode push, or auto)"
                )));
            }
            if g.provider.is_some() || g.provider_api_url.is_some() {
                return Err(invalid(format!(
                    "{location} is an OCI registry: spec.provider and spec.providerApiUrl name a forge, which a \
                     registry is not (remove them)"
                )));
            }
            kalypso_oci::reference::check_tag(&g.branch)
                .map_err(|e| invalid(format!("spec.branch names the artifacts' tag: {e}")))?;
            Ok(OciTarget {
                name: g.name.clone(),
                location,
                tag: g.branch.clone(),
            })
        })
        .collect()
}

/// A registry client with `auth`, retrying as `retry` says. Every secret it loads or
/// receives is registered with [`mod@crate::redact`].
pub fn registry(auth: &AuthSettings, retry: &RetryPolicy) -> Result<Registry, kalypso_oci::client::Error> {
    kalypso_oci::auth::on_secret(crate::redact::register_secret);
    Registry::new(
        auth,
        Retry {
            attempts: retry.attempts,
            initial_backoff: retry.initial_backoff,
            max_backoff: retry.max_backoff,
        },
    )
}

/// The registry client of a syncer, made when an OCI GitOpsRepo is first met.
#[derive(Debug, Default)]
pub(crate) struct Lazy(OnceLock<Result<Registry, String>>);

impl Lazy {
    /// The client (or why it cannot be made: credentials that cannot be loaded).
    pub(crate) fn get(&self, auth: &AuthSettings, retry: &RetryPolicy) -> Result<&Registry, String> {
        self.0
            .get_or_init(|| registry(auth, retry).map_err(|e| crate::redact::redact(&e.to_string())))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// The index `target`'s tag held when a pass read it for placement (see
/// [`current_assignment`]): the delivery starts from it instead of reading it again.
#[derive(Debug, Default)]
pub struct IndexRead(std::sync::Mutex<Option<Kept>>);

/// What an [`IndexRead`] keeps: the target's location and tag, and the index read there
/// (`None`: the tag had none).
type Kept = ((String, String), Option<Snapshot>);

/// What tells targets apart in an [`IndexRead`]: the location and the tag.
fn key(target: &OciTarget) -> (String, String) {
    (target.location.to_string(), target.tag.clone())
}

impl IndexRead {
    fn keep(&self, target: &OciTarget, snapshot: Option<Snapshot>) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((key(target), snapshot));
    }

    /// What was read of `target`'s tag (`Some(None)`: it had no index), taken; `None` when
    /// nothing was.
    fn take(&self, target: &OciTarget) -> Option<Option<Snapshot>> {
        let mut slot = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.take() {
            Some((read, snapshot)) if read == key(target) => Some(snapshot),
            other => {
                *slot = other;
                None
            }
        }
    }
}

/// Delivers the hashed content to `target`: the assignments not rendered again are known by
/// the ids `last` recorded for them. The index is the one `read` kept for `target`, else it
/// is read now.
pub fn deliver(
    registry: &Registry,
    target: &OciTarget,
    read: &IndexRead,
    content: &Hashed<'_>,
    last: &DeliveredFiles,
    provenance: &Provenance,
    dry_run: bool,
) -> Result<Report, kalypso_oci::Error> {
    let ids = |ct: &str, dt: &str| {
        last.files(ct, dt).map(|files| {
            files
                .iter()
                .map(|(name, oid)| {
                    let mut id = [0u8; 20];
                    id.copy_from_slice(oid.as_bytes());
                    (*name, GitId(id))
                })
                .collect()
        })
    };
    let dest = Destination {
        location: &target.location,
        tag: &target.tag,
    };
    let before = match read.take(target) {
        Some(before) => before,
        None => kalypso_oci::read::index(registry, dest.location, dest.tag, kalypso_oci::Access::Push)?,
    };
    kalypso_oci::deliver::deliver_over(
        registry,
        dest,
        before,
        content.content(),
        &ids,
        provenance,
        &Settings {
            dry_run,
            ..Settings::default()
        },
    )
}

/// What the delivery state records of a delivery to `target` (see [`crate::state`]): the
/// location, the tag and the index the tag was left on; `None` when there is none (a dry run).
pub(crate) fn delivered_at(
    target: &OciTarget,
    delivery: &crate::deliver::Delivery,
) -> Option<crate::state::BranchAt> {
    let crate::deliver::Delivery::Artifacts(report) = delivery else {
        return None;
    };
    if report.dry_run {
        return None;
    }
    Some(crate::state::BranchAt {
        url: target.location.to_string(),
        branch: target.tag.clone(),
        commit: Some(report.index.as_ref()?.to_string()),
    })
}

/// The index each recorded OCI target's tag holds now (`None`: no index), by (location,
/// tag): one `HEAD` each. Targets that cannot be asked (no registry client, a failed
/// request) are left out, so that their environment takes the full path.
pub(crate) fn index_heads<'a>(
    recorded: impl Iterator<Item = &'a crate::state::BranchAt>,
    registry: impl FnOnce() -> Option<&'a Registry>,
) -> std::collections::HashMap<(String, String), Option<String>> {
    let mut heads = std::collections::HashMap::new();
    let wanted: std::collections::BTreeSet<(String, String)> = recorded
        .filter(|at| is_oci(&at.url))
        .map(|at| (at.url.clone(), at.branch.clone()))
        .collect();
    if wanted.is_empty() {
        return heads;
    }
    let Some(registry) = registry() else {
        return heads;
    };
    for (url, tag) in wanted {
        let Ok(location) = Location::parse(&url) else {
            continue;
        };
        match registry.manifest_digest(&location, location.path(), &tag, kalypso_oci::Access::Pull) {
            Ok(digest) => {
                heads.insert((url, tag), digest.map(|d| d.to_string()));
            }
            Err(error) => {
                tracing::debug!(error = %crate::redact::redact(&error.to_string()), "cannot read the index; syncing in full");
            }
        }
    }
    heads
}

/// The report of an OCI target whose inputs and index did not move (`None` for a git one).
pub(crate) fn unchanged(at: &crate::state::BranchAt) -> Option<Report> {
    if !is_oci(&at.url) {
        return None;
    }
    Some(Report {
        location: at.url.clone(),
        tag: at.branch.clone(),
        index: at.commit.as_deref().and_then(kalypso_oci::Digest::parse),
        changed: false,
        pushed: Vec::new(),
        unchanged: 0,
        retired: Vec::new(),
        blobs_uploaded: 0,
        bytes_uploaded: 0,
        dry_run: false,
    })
}

/// Where the environment delivered to `target` has each deployment target (nothing when it
/// cannot be read: placement then starts afresh, and says so in the log). The index read is
/// kept in `read`, for the delivery.
pub fn current_assignment(registry: &Registry, target: &OciTarget, read: &IndexRead) -> CurrentAssignment {
    let placement = || -> Result<CurrentAssignment, kalypso_oci::Error> {
        let (location, tag) = (&target.location, target.tag.as_str());
        let snapshot = kalypso_oci::read::index(registry, location, tag, kalypso_oci::Access::Pull)?;
        // The folders' names are read where they were decoded, not copied one by one.
        let recorded = snapshot.as_ref().map(|s| {
            s.index.folder_lists().map(|lists| {
                current_from_folders(
                    lists
                        .iter()
                        .flat_map(|(ct, list)| folder_names(list).map(move |dt| (*ct, dt))),
                )
            })
        });
        read.keep(target, snapshot);
        match recorded {
            None => return Ok(CurrentAssignment::new()),
            Some(Some(current)) => return Ok(current),
            Some(None) => {}
        }
        // An index from before the folders were recorded: its layers say.
        Ok(match kalypso_oci::read::tree(registry, location, tag)? {
            Some((_, tree)) => current_from_paths(tree.iter().map(|(path, _)| path.as_str())),
            None => CurrentAssignment::new(),
        })
    };
    placement().unwrap_or_else(|error| {
        tracing::warn!(error = %crate::redact::redact(&error.to_string()), "cannot read the OCI artifacts for Steady placement; placing afresh");
        CurrentAssignment::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gitops(repo: &str, branch: &str) -> Vec<GitOpsTarget> {
        vec![GitOpsTarget {
            name: "dev".into(),
            repo: repo.into(),
            branch: branch.into(),
            provider: None,
            provider_api_url: None,
        }]
    }

    #[test]
    fn oci_gitops_repos_are_told_apart_and_checked() {
        assert!(
            targets(&gitops("https://github.com/o/r", "dev"), None, Mode::Auto)
                .unwrap()
                .is_empty()
        );
        let found = targets(&gitops("oci://ghcr.io/o/gitops", "dev"), None, Mode::Push).unwrap();
        assert_eq!(
            (found[0].location.to_string(), found[0].tag.as_str()),
            ("oci://ghcr.io/o/gitops".to_owned(), "dev")
        );
        let overridden = targets(
            &gitops("https://github.com/o/r", "dev"),
            Some("oci://127.0.0.1:5000/gitops"),
            Mode::Auto,
        )
        .unwrap();
        assert_eq!(overridden.len(), 1);
        let (name, why) = targets(&gitops("oci://ghcr.io/o/gitops", "dev"), None, Mode::Pr).unwrap_err();
        assert_eq!(name, "dev");
        assert!(
            why.contains("pull request") && why.contains("--mode push"),
            "{why}"
        );
        let (_, why) = targets(&gitops("oci://ghcr.io/o/gitops", "env/dev"), None, Mode::Auto).unwrap_err();
        assert!(why.contains("spec.branch"), "{why}");
        let (_, why) = targets(&gitops("oci://ghcr.io/O/gitops", "dev"), None, Mode::Auto).unwrap_err();
        assert!(why.contains("repository name"), "{why}");
        let mut forge = gitops("oci://ghcr.io/o/gitops", "dev");
        forge[0].provider = Some("gitlab".into());
        let (_, why) = targets(&forge, None, Mode::Auto).unwrap_err();
        assert!(why.contains("spec.provider"), "{why}");
    }
}
