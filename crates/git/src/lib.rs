//! Git delivery for kalypso: control planes and workloads read from git, GitOps trees
//! delivered as commits or pull requests, failures reported as issues.
//!
//! This is the IO edge around the pure `kalypso-core` pipeline, for running kalypso with no
//! infrastructure: from a laptop, a CI job, or the `kalypso serve` daemon. Modules, in the
//! order a sync uses them:
//!
//! - [`url`], [`auth`], [`mod@redact`]: where repositories are and how to reach them, without
//!   ever showing a credential;
//! - [`repo`]: fetching into a cache, reading trees straight from git objects, writing
//!   trees and commits, pushing (with [`retry`] for network failures; `pack` writes packs
//!   and their indexes, `local_push` pushes to `file://` repositories without libgit2's
//!   walk of the remote's tree);
//!   [`treewrite`]: the GitOps tree built incrementally from the previous commit's;
//! - [`control_plane`]: environments, their branches, the promoted main commit, workload
//!   folders → [`kalypso_core::Inputs`];
//! - [`deliver`]: `push` and `pr` modes; [`forge`] (GitHub through [`github`], GitLab,
//!   Azure DevOps, Gitea/Forgejo) and [`issues`] for the forge; [`oci`]:
//!   `oci://` GitOpsRepos, delivered as Flux artifacts by `kalypso_oci`;
//! - [`sync`]: one pass over a control plane, each environment run by
//!   [`kalypso_core::run`] (calling scheduler [`extenders`] over HTTP); [`state`]: what each
//!   environment was last delivered from, so that a sync with nothing moved is one branch
//!   listing per repository; [`delivered`]: the files each assignment was last delivered
//!   with, so that a sync renders only what changed; [`promote`]: pinning a main commit on
//!   an environment branch; [`rollout`]: an environment's change delivered wave by wave
//!   (its RolloutPolicy), gated on the clusters' reports as [`hub`] asks the Deployment
//!   Observability Hub;
//! - [`signature`]: HMAC signatures of webhooks (GitHub and Gitea pushes, Flux reports).

pub mod auth;
pub mod control_plane;
pub mod deliver;
pub mod delivered;
pub mod extenders;
pub mod forge;
pub mod github;
pub mod hub;
pub mod issues;
mod local_push;
pub mod oci;
mod pack;
pub mod promote;
pub mod redact;
pub mod repo;
pub mod retry;
pub mod rollout;
pub mod signature;
pub mod state;
pub mod sync;
pub mod treewrite;
pub mod url;

pub use auth::AuthSettings;
pub use control_plane::{EnvironmentRef, Revisions};
pub use deliver::{Delivery, DeliverySettings, Mode};
pub use redact::redact;
pub use repo::{Author, Cache};
pub use retry::RetryPolicy;
pub use sync::{
    AllowedDeletions, Check, EnvReport, MassDeletionSettings, Outcome, Pass, Scope, Settings, Syncer,
    Unchanged,
};
pub use url::RepoUrl;

/// The Sprig version of the templates a sync renders with ([`Settings::sprig`]).
pub use kalypso_template::SprigVersion;
