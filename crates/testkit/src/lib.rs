//! Test support for the whole workspace, in one crate so that no test copies a helper and no
//! shipped crate carries test code behind a feature. Every crate takes it as a
//! dev-dependency only; it is never part of the `kalypso` binary.
//!
//! - repositories built with the real `git` command ([`git`], [`write_files`],
//!   [`branch_files`]...);
//! - a smart-HTTP git server over `git http-backend` with token checks and fault injection
//!   ([`GitHttpServer`]), and REST stand-ins that record every request: GitHub
//!   ([`FakeGitHub`]), GitLab, Azure DevOps and Gitea ([`FakeForge`]);
//! - a real OCI registry (Debian's `docker-registry`) behind a recording, fault-injecting
//!   proxy that can also act as its token service ([`TestRegistry`]);
//! - folders read and written as maps of files ([`files_under`], [`write_files_under`]), and
//!   snapshots that see folders and links too ([`snapshot`]);
//! - the `kalypso` command run in a child process ([`Run`], [`kalypso`]) and the bundled
//!   example as git repositories ([`ExampleRepos`]);
//! - JSON data as Go decodes it ([`go_json`]), and the in-repository test data
//!   ([`data_dir`]);
//! - documentation walk-throughs run as scripts ([`run_doc_script`]);
//! - a simulated fleet that reads a GitOps branch and posts to the hub the Flux events of the
//!   commits its clusters apply, with failure rules ([`fleet`]);
//! - the pieces of a data-driven test harness ([`cases`]: case folders, expected files,
//!   blessing).
//!
//! Nothing here reaches beyond 127.0.0.1. Helpers panic on failure: they are for tests.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod browser;
pub mod cases;
mod doc_script;
mod example;
mod fake_forge;
mod fake_github;
pub mod fleet;
mod folders;
mod git_cli;
mod go_json;
mod http_git;
mod kill;
mod loopback;
pub mod oidc;
mod registry;
mod run;

pub use doc_script::{run_doc_script, sh_blocks};
pub use example::{
    ExampleRepos, commit_files, data_dir, example_control_plane, pin, replace_in, workspace_root,
};
pub use fake_forge::{FakeForge, Flavor, ForgeRequest, WorkItemFields};
pub use fake_github::{FakeGitHub, FakeIssue, FakePull, Recorded};
pub use folders::{Entry, copy_files, files_under, snapshot, text_files_under, write_files_under};
pub use git_cli::{branch_files, commit_count, git, init_bare, rev_parse, write_files};
pub use go_json::go_json;
pub use http_git::GitHttpServer;
pub use kill::{Random, kill_seed};
pub use registry::{RegistryRequest, TestRegistry, require_tool, services_required};
pub use run::{Run, kalypso};

/// Says, once per test process and in one line that the test harness does not capture, that
/// `what` is skipped and why (with how to run it): a test run that leaves out the tests
/// needing a service this machine lacks says so, without failing.
pub fn skipped(what: &str) {
    use std::io::Write;
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.iter().any(|s| s == what) {
        said.push(what.to_owned());
        // Straight to the standard error: the harness captures only `eprintln!`.
        let _ = writeln!(std::io::stderr(), "note: skipped: {what}");
    }
}

/// The PostgreSQL server the tests that need one use: `KALYPSO_TEST_POSTGRES_URL`
/// (`postgres://kalypso:kalypso@127.0.0.1:5432/postgres` for the server `.ci/setup` starts).
/// Without it `None`, and the test run says once (or fails, where [`services_required`]) that `what` is skipped and how to run it.
pub fn postgres_url(what: &str) -> Option<String> {
    match std::env::var("KALYPSO_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            assert!(
                !services_required(),
                "{what} need PostgreSQL: set KALYPSO_TEST_POSTGRES_URL (.ci/setup starts a server)"
            );
            skipped(&format!(
                "{what} (no PostgreSQL: set KALYPSO_TEST_POSTGRES_URL to a server's URL to run them; \
                 .ci/setup starts one, see the README)"
            ));
            None
        }
    }
}

/// A multi-threaded runtime for the servers; sync code runs on the test's own thread and
/// blocks on this runtime for GitHub calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
