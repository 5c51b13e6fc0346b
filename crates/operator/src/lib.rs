//! kalypso as a Kubernetes operator: a drop-in replacement for the original Kalypso
//! Scheduler's controller manager.
//!
//! It serves the original's API (`scheduler.kalypso.io/v1alpha1`, CRDs generated from the
//! Rust types in [`crds`]), keeps the original's Flux objects for Environments, BaseRepos and
//! WorkloadRegistrations ([`controller::sources`], [`flux`]), and replaces the original's
//! chain of scheduling controllers by one reconcile per environment namespace that runs the
//! shared, pure core pipeline in memory ([`controller::scheduler`], [`snapshot`], [`desired`]).
//! Delivery to GitOps repositories goes through [`deliver::Publisher`], implemented with
//! `kalypso-git` in [`git`], debounced so that a burst of changes gives one commit.
//!
//! Around the controllers: [`stores`] (one cache per kind), [`conditions`] (status
//! conditions written only when they change), [`metrics`], [`leader`] (Lease-based leader
//! election), [`http`] (`/healthz`, `/readyz`, `/metrics`) and [`run()`], which wires it all up
//! and shuts down gracefully on SIGTERM.

pub mod conditions;
pub mod controller;
pub mod crds;
pub mod deliver;
pub mod desired;
pub mod flux;
pub mod git;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod ocm;
pub mod run;
pub mod runtime;
pub mod snapshot;
pub mod stores;

#[cfg(test)]
mod fixtures;

/// The field manager of every write, and the reporting controller of Events.
pub const FIELD_MANAGER: &str = "kalypso-scheduler";

pub use run::{Backends, Config, ControlPlaneFeed, Error, run};
