//! `kalypso sync`'s progress display: drawn on a terminal when the sync takes more than a
//! second, never in a pipe or with `--quiet`. The sync runs in a child process (this test
//! binary re-executed into `cli_child`, see `support`), on a terminal made by `script`
//! (util-linux). The control plane is served over loopback HTTP and its first request fails
//! with 503, so that the sync retries after 1.5 s: long enough for the display to appear.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::{Command, Stdio};

use kalypso_testkit::{ExampleRepos, GitHttpServer, commit_count};

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

/// What a run printed: standard output and standard error apart (in a pipe), or together
/// (on a terminal).
struct Printed {
    stdout: String,
    stderr: String,
}

/// `kalypso sync` of a fresh copy of the example's `dev`, on a terminal or not.
fn sync(terminal: bool, quiet: bool) -> Printed {
    let rt = kalypso_testkit::runtime();
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let server = GitHttpServer::start(rt.handle(), dir.path(), None);
    server.fail_next(1);
    let mut args: Vec<String> = vec![
        "sync".into(),
        server.url("control-plane.git"),
        "--env".into(),
        "dev".into(),
        "--cache-dir".into(),
        dir.path().join("cache").display().to_string(),
        "--token-env".into(),
        "KALYPSO_TEST_NO_TOKEN".into(),
        "--backoff".into(),
        "1500ms".into(),
    ];
    if quiet {
        args.push("--quiet".into());
    }
    let exe = std::env::current_exe().unwrap();
    let mut command = if terminal {
        // `script -qefc CMD /dev/null`: CMD on a new terminal, its output copied to ours.
        let mut inner = Command::new(&exe);
        support::as_cli_child(&mut inner, &args);
        let line = std::iter::once(exe.display().to_string())
            .chain(inner.get_args().map(|a| a.to_str().unwrap().to_owned()))
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ");
        let mut script = Command::new("script");
        script.args(["-qefc", &line, "/dev/null"]);
        for (k, v) in inner.get_envs() {
            script.env(k, v.unwrap());
        }
        script
    } else {
        let mut command = Command::new(&exe);
        support::as_cli_child(&mut command, &args);
        command
    };
    let out = command
        .env_remove("KALYPSO_TIMINGS")
        .env_remove("RUST_LOG")
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = Printed {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(out.status.success(), "{}\n{}", printed.stdout, printed.stderr);
    assert_eq!(server.failed(), 1, "the first fetch failed and was retried");
    assert_eq!(commit_count(&repos.gitops, "dev"), 1);
    printed
}

#[test]
fn progress_is_drawn_on_a_terminal_only() {
    // On a terminal: the retry is announced, the display names the fetch it waits for and
    // then the environment's steps, and the result is printed.
    let tty = sync(true, false);
    let all = tty.stdout;
    if std::env::var_os("KALYPSO_SHOW_TERMINAL").is_some() {
        println!("{all:?}");
    }
    assert!(all.contains("retrying in 1.5 s (attempt 2/5)"), "{all}");
    assert!(
        all.contains("fetching http://127.0.0.1:"),
        "the display names the fetch under way: {all:?}"
    );
    assert!(
        all.contains("dev (1/1): "),
        "the display names the environment: {all:?}"
    );
    assert!(all.contains("commit "), "{all}");

    // In a pipe: the same run prints no display, only the retry and the result.
    let pipe = sync(false, false);
    assert!(
        pipe.stderr.contains("retrying in 1.5 s (attempt 2/5)"),
        "{}",
        pipe.stderr
    );
    for text in [&pipe.stdout, &pipe.stderr] {
        assert!(!text.contains("dev (1/1)"), "{text}");
        assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text:?}");
    }
    // (The child's standard output also holds the test harness's own lines.)
    let results: Vec<&str> = pipe.stdout.lines().filter(|l| l.starts_with("dev: ")).collect();
    assert_eq!(results.len(), 1, "{}", pipe.stdout);
    assert!(results[0].contains("pushed to dev@dev"), "{}", pipe.stdout);

    // Quiet on a terminal: nothing drawn.
    let quiet = sync(true, true);
    assert!(!quiet.stdout.contains("dev (1/1)"), "{:?}", quiet.stdout);
    assert!(!quiet.stdout.contains("fetching"), "{:?}", quiet.stdout);
}
