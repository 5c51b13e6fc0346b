//! The Kalypso pipeline, pure: control-plane objects in, platform GitOps tree out.
//!
//! No IO, no clock, deterministic order. Source trees are handed in as bytes (by the CLI
//! from directories, by the git layer from commits); the result is a [`tree::Tree`] and a
//! record of every decision (which policy placed each assignment, which ConfigMap gave each
//! config value), which the `plan` and `explain` commands show.
//!
//! Stages, one module each: [`source`] → [`load`] → [`model`] → [`unfold`] → [`schedule`]
//! (with [`placement`]) →
//! [`config`] + [`schema`] → [`render`](mod@render) → [`tree`]; [`pipeline`] holds the stages'
//! steps. [`run::run`] is the one driver every front end calls: it runs the stages for one
//! environment, says what blocks delivery and hands the content to the front end's sink ([`run::Sink`]).
//! [`plan`] and [`explain`] describe the results for people; [`warnings`] points out the
//! parts of a control plane that have no effect.

pub mod config;
pub mod diag;
pub mod duration;
pub mod explain;
pub mod fingerprint;
pub mod limits;
pub mod load;
pub mod model;
pub mod names;
pub mod pipeline;
pub mod placement;
pub mod plan;
mod position;
pub mod promotion;
pub mod render;
pub mod rollout;
pub mod run;
pub mod schedule;
pub mod schema;
pub mod selector;
pub mod source;
pub mod tree;
pub mod unfold;
pub mod warnings;
mod yaml_scan;

pub use diag::{Code, Diagnostic, Diagnostics, Origin, Severity};
pub use pipeline::{
    AssignmentFailure, AssignmentRecord, Inputs, Job, Rendered, ScheduledEnvironment, load_namespace,
};
