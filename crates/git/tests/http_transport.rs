//! Git over smart HTTP on loopback (`git http-backend`): token authentication, tokens never
//! shown, transient failures retried with backoff, rejected pushes started again, and the
//! cache reused between runs.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{Fixture, sync};
use kalypso_git::{AuthSettings, Delivery, Mode, Outcome, RepoUrl, RetryPolicy, Syncer};
use kalypso_testkit::{GitHttpServer, branch_files, commit_count, git, rev_parse, runtime, write_files};

const TOKEN: &str = "ghp_kalypsoTestToken0123456789";

/// The fixture's repositories served over HTTP; the control plane names HTTP URLs.
fn serve(rt: &tokio::runtime::Runtime, token: Option<&str>) -> (Fixture, GitHttpServer) {
    let dir = tempfile::tempdir().unwrap();
    let server = GitHttpServer::start(rt.handle(), dir.path().join("repos"), token);
    let fx = Fixture::in_dir(
        dir,
        Some(&server.url("contoso/gitops.git")),
        Some(&server.url("contoso/app.git")),
    );
    (fx, server)
}

/// The fixture's settings, delivering in `push` mode (`auto` would open pull requests for
/// an HTTP GitOps repository).
fn push_settings(fx: &Fixture) -> kalypso_git::Settings {
    let mut settings = fx.settings();
    settings.delivery.mode = Mode::Push;
    settings
}

/// Settings reading `token` from a file (tests cannot set environment variables: the
/// workspace forbids `unsafe`).
fn with_token(fx: &Fixture, token: &str) -> kalypso_git::Settings {
    let file = fx.dir.path().join(format!("token-{}", token.len()));
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let mut settings = push_settings(fx);
    settings.auth = AuthSettings {
        token_file: Some(file),
        ..AuthSettings::default()
    };
    settings
}

/// Captures everything logged through `tracing` while `f` runs.
fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber_for_tests(move || writer.clone());
    let result = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (result, text)
}

fn tracing_subscriber_for_tests<W>(make: impl Fn() -> W + Send + Sync + 'static) -> impl tracing::Subscriber
where
    W: Write + 'static,
{
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(make)
        .finish()
}

#[test]
fn authenticates_with_a_token_and_never_shows_it() {
    let rt = runtime();
    let (fx, server) = serve(&rt, Some(TOKEN));
    let syncer = Syncer::new(with_token(&fx, TOKEN), rt.handle().clone()).unwrap();
    let control_plane = server.url("contoso/control-plane.git");
    let ((reports, _), logs) = capture_logs(|| {
        let reports = sync(&syncer, &control_plane, &["dev"]);
        (reports, ())
    });
    let report = reports[0].as_ref().unwrap();
    assert!(
        matches!(&report.outcome, Outcome::Delivered(t) if matches!(t[0].delivery, Delivery::Committed { .. }))
    );
    assert!(
        server
            .authorizations()
            .iter()
            .all(|a| a == &format!("x-access-token:{TOKEN}"))
    );
    assert!(!server.authorizations().is_empty());
    assert!(!logs.contains(TOKEN));
    assert_eq!(commit_count(&fx.gitops, "dev"), 1);

    // A wrong token fails at once (authentication is not retried), without showing either token.
    let bad = Syncer::new(with_token(&fx, "ghp_wrongWrongWrong98765"), rt.handle().clone()).unwrap();
    let url = RepoUrl::parse(&control_plane).unwrap();
    let (err, logs) = capture_logs(|| bad.pass(&url).unwrap_err().to_string());
    assert!(err.contains(&server.url("contoso/control-plane.git")), "{err}");
    for secret in [TOKEN, "ghp_wrongWrongWrong98765"] {
        assert!(!err.contains(secret) && !logs.contains(secret), "{err}\n{logs}");
    }

    // Credentials written into a URL are redacted everywhere too.
    let embedded = server.url_with_credentials("contoso/missing.git", "someone", "p4ssw0rd-in-url");
    let url = RepoUrl::parse(&embedded).unwrap();
    let (err, logs) = capture_logs(|| syncer.pass(&url).unwrap_err().to_string());
    assert!(
        !err.contains("p4ssw0rd-in-url") && !logs.contains("p4ssw0rd-in-url"),
        "{err}\n{logs}"
    );
    assert!(err.contains("http://***@127.0.0.1:"), "{err}");
    assert!(!format!("{url:?} {url}").contains("p4ssw0rd-in-url"));
}

#[test]
fn transient_failures_are_retried_with_backoff() {
    let rt = runtime();
    let (fx, server) = serve(&rt, None);
    let syncer = Syncer::new(push_settings(&fx), rt.handle().clone()).unwrap();
    server.fail_next(2);
    let url = RepoUrl::parse(&server.url("contoso/control-plane.git")).unwrap();
    let mut pass = syncer.pass(&url).unwrap();
    assert_eq!(pass.retries(), 2);
    assert_eq!(server.failed(), 2);
    let env = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
    let report = pass.sync(&env).unwrap();
    assert!(report.is_success());
    assert_eq!(commit_count(&fx.gitops, "dev"), 1);

    // More failures than attempts: the error names the repository and says what failed.
    let few = Syncer::new(
        kalypso_git::Settings {
            retry: RetryPolicy::immediate(2),
            ..push_settings(&fx)
        },
        rt.handle().clone(),
    )
    .unwrap();
    server.fail_next(5);
    let err = few.pass(&url).unwrap_err();
    assert!(err.is_transient());
    assert!(
        err.to_string().contains("cannot fetch http://127.0.0.1:"),
        "{err}"
    );
    assert!(err.to_string().contains("503"), "{err}");
}

#[test]
fn a_rejected_push_starts_again_from_the_new_head() {
    let rt = runtime();
    let (fx, server) = serve(&rt, None);
    write_files(&fx.gitops, "dev", &[("NOTES.md", Some("v0"))], "seed");
    let gitops = fx.gitops.clone();
    // Someone else pushes between kalypso's fetch and its push.
    server.before_next_push(move || {
        write_files(
            &gitops,
            "dev",
            &[("NOTES.md", Some("someone else was faster"))],
            "concurrent",
        );
    });
    let syncer = Syncer::new(push_settings(&fx), rt.handle().clone()).unwrap();
    let reports = sync(&syncer, &server.url("contoso/control-plane.git"), &["dev"]);
    assert!(reports[0].as_ref().unwrap().is_success());
    let files = branch_files(&fx.gitops, "dev");
    assert_eq!(files["NOTES.md"], b"someone else was faster");
    assert!(files.contains_key("large/app-dev-target/reconciler.yaml"));
    // seed, the concurrent commit, and kalypso's on top of it: nothing was lost.
    assert_eq!(commit_count(&fx.gitops, "dev"), 3);
    let parent = git(&fx.gitops, &["log", "-1", "--format=%s", "dev~1"]);
    assert_eq!(parent.trim(), "concurrent");
    // The first push was refused and a second one made from a fresh fetch.
    let advertisements = server
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /contoso/gitops.git/info/refs?service=git-receive-pack"))
        .count();
    assert_eq!(advertisements, 2);
}

#[test]
fn unchanged_repositories_are_not_downloaded_again() {
    let rt = runtime();
    let (fx, server) = serve(&rt, None);
    let syncer = Syncer::new(push_settings(&fx), rt.handle().clone()).unwrap();
    let url = server.url("contoso/control-plane.git");
    assert!(sync(&syncer, &url, &["dev"])[0].as_ref().unwrap().is_success());
    let before = server.requests().len();
    assert!(sync(&syncer, &url, &["dev"])[0].as_ref().unwrap().is_success());
    let second: Vec<String> = server.requests()[before..].to_vec();
    // Only ref advertisements: no pack was downloaded or pushed on the second run.
    assert!(!second.is_empty());
    assert!(second.iter().all(|r| r.starts_with("GET ")), "{second:#?}");
    assert!(rev_parse(&fx.gitops, "refs/heads/dev").is_some());
}
