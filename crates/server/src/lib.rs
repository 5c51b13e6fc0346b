//! `kalypso serve`: a small daemon that keeps GitOps repositories in step with a control
//! plane in git, with no Kubernetes and no Flux.
//!
//! - [`config`]: the `kalypso.yaml` file;
//! - [`daemon`]: the poll loop (interval and push webhooks), re-rendering only environments
//!   whose input commits changed, graceful shutdown;
//! - [`http`]: the axum router (`/healthz`, `/readyz`, `/metrics`, `/status`, `/webhook`),
//!   built by [`http::app`] so that tests can call it without a socket;
//! - [`metrics`]: Prometheus metrics;
//! - [`shutdown_signal`]: the signal every long-running command (`serve`, `hub`, `operator`)
//!   stops on.
//!
//! Logs go through `tracing`; the command line installs the subscriber, in the
//! [`config::LogFormat`] of the `log` section.

pub mod config;
pub mod daemon;
pub mod http;
pub mod metrics;

pub use config::Config;
pub use daemon::{Daemon, EnvPoll, PollReport, SHUTDOWN_GRACE, serve, shutdown_signal};
pub use http::{AppState, app};
