//! OCI delivery for kalypso: a GitOpsRepo whose `spec.repo` is `oci://HOST/PATH` receives
//! each cluster type of its environment as its own Flux artifact, in repository
//! `PATH/<cluster type>` tagged with the environment's branch name, so that a cluster pulls
//! only its own cluster type's manifests.
//!
//! Flux's source-controller pulls OCI artifacts (`OCIRepository`) as well as git branches,
//! and faster; and kalypso renders per cluster type, which a branch holding the whole
//! environment cannot exploit. This crate is that delivery and everything under it, with no
//! dependency on git:
//!
//! - [`mod@reference`]: `oci://` locations, repository names and tags, checked once;
//! - [`auth`]: credentials from a Docker config file (or a token), never printed;
//! - [`client`]: the registry API calls, with the `Basic`/`Bearer` challenge flow, retries,
//!   and a count of the traffic;
//! - [`archive`], [`artifact`]: Flux's artifact format (a deterministic gzipped tarball, the
//!   manifest, config and annotations `flux push artifact` writes) and kalypso's environment
//!   index;
//! - [`deliver`]: an environment's rendered content (`kalypso_core::tree::RepoContent`) to a
//!   registry, uploading only the cluster types whose content changed;
//! - [`read`]: the environment back, for `plan`/`diff --against oci://…` and the hub.
//!
//! `kalypso-git` drives [`deliver`] from a sync; the command line and the hub read with
//! [`read`]. The format and its choices are documented in `docs/oci.md`.

pub mod archive;
pub mod artifact;
pub mod auth;
pub mod client;
pub mod deliver;
pub mod digest;
pub mod read;
pub mod reference;

pub use auth::{AuthSettings, Secret};
pub use client::{Access, Registry, Retry};
pub use deliver::{Destination, Provenance, Report};
pub use digest::{Digest, GitId};
pub use reference::{Location, is_oci};

/// A failed OCI delivery or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A location, repository name or tag is unusable.
    #[error(transparent)]
    Reference(#[from] reference::Error),
    /// A registry call failed.
    #[error(transparent)]
    Registry(#[from] client::Error),
    /// The tag holds something kalypso did not write.
    #[error(
        "{location}:{reference} is not a kalypso environment index ({reason}); kalypso does not write over it: \
         use another repository or tag"
    )]
    Foreign {
        /// The location.
        location: String,
        /// The tag or digest.
        reference: String,
        /// What it is instead.
        reason: String,
    },
    /// A file known only by its id (from an earlier delivery) is in no artifact: the
    /// environment must be rendered in full.
    #[error("file {cluster_type}/{path} of an earlier delivery is not in the artifact delivered before")]
    NotDelivered {
        /// The cluster type.
        cluster_type: String,
        /// The file (or `<target>/` when its ids are unknown).
        path: String,
    },
    /// An artifact cannot be read or built.
    #[error("{what}: {reason}")]
    Corrupt {
        /// Which.
        what: String,
        /// Why.
        reason: String,
    },
}

impl Error {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Registry(e) if e.is_transient())
    }
}
