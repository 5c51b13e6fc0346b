//! Loopback stand-ins for tests (feature `test-support`): repositories built with the real
//! `git` command, a smart-HTTP git server over `git http-backend` with token checks and
//! fault injection, a GitHub REST stand-in that records every request, and folders read and
//! written as maps of files.
//!
//! Nothing here reaches beyond 127.0.0.1. Helpers panic on failure: they are for tests.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

mod fake_github;
mod folders;
mod git_cli;
mod http_git;

pub use fake_github::{FakeGitHub, FakeIssue, FakePull, Recorded};
pub use folders::{copy_files, files_under, write_files_under};
pub use git_cli::{branch_files, commit_count, git, init_bare, rev_parse, write_files};
pub use http_git::GitHttpServer;

/// A multi-threaded runtime for the servers; sync code runs on the test's own thread and
/// blocks on this runtime for GitHub calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
