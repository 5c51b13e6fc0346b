//! `kalypso serve` killed with SIGKILL at random instants while it polls and delivers (a child
//! process, see `support`): after every kill the GitOps branch is at the old commit or one
//! commit on, and the next start of serve on the same cache delivers the newest input.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kalypso_testkit::{ExampleRepos, Random, branch_files, kill_seed, rev_parse, write_files};

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

/// A serve process killed when the test ends, whatever happened.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_serve(config: &Path) -> Serve {
    let args = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--log-format",
        "json",
    ]
    .map(str::to_owned);
    let mut command = Command::new(std::env::current_exe().unwrap());
    support::as_cli_child(&mut command, &args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Serve(command.spawn().unwrap())
}

fn config_map(round: u32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: east-us-config\n  labels:\n    \
         platform-config: \"true\"\n    region: east-us\ndata:\n  REGION: East US\n  ROUND: round-{round}\n"
    )
}

/// Commits `round`'s input to the control plane's dev branch.
fn write_round(repos: &ExampleRepos, round: u32) {
    write_files(
        &repos.control_plane,
        "dev",
        &[(
            "cluster-types/east-us/east-us-config.yaml",
            Some(&config_map(round)),
        )],
        &format!("round {round}"),
    );
}

fn delivered(gitops: &Path, round: u32) -> bool {
    let marker = format!("round-{round}");
    branch_files(gitops, "dev")
        .values()
        .any(|f| String::from_utf8_lossy(f).contains(&marker))
}

/// Waits (at most a minute) until serve has delivered `round`'s input to dev.
fn wait_for_delivery(gitops: &Path, round: u32, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !delivered(gitops, round) {
        assert!(
            Instant::now() < deadline,
            "round {round} (seed {seed}): serve did not deliver within a minute"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_killed_at_any_instant_leaves_the_old_or_the_new_commit_and_the_next_start_continues() {
    let seed = kill_seed(Some(0x5eed_0032_u64));
    let mut rng = Random::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let config = dir.path().join("kalypso.yaml");
    std::fs::write(
        &config,
        format!(
            "controlPlane: file://{}\nenvironments: [dev]\ninterval: 1s\nlisten: 127.0.0.1:0\ncacheDir: {}\n\
             auth:\n  tokenEnv: KALYPSO_TEST_NO_TOKEN\nwebhook:\n  secretEnv: KALYPSO_TEST_NO_SECRET\n",
            repos.control_plane.display(),
            dir.path().join("cache").display()
        ),
    )
    .unwrap();

    // Rounds 0 and 1, not killed: the first start clones into the cache; the second, on a warm
    // cache as every killed start below is, measures how long a start takes to deliver, so
    // that kills land anywhere in the start, the first poll, the render and the delivery.
    let mut whole = 0;
    for round in 0..2 {
        write_round(&repos, round);
        let started = Instant::now();
        let serve = start_serve(&config);
        wait_for_delivery(&repos.gitops, round, seed);
        whole = started.elapsed().as_millis().max(20) as u64;
        drop(serve);
    }

    // Kills fall in `[0, window)`. A start's time varies from run to run and machine to
    // machine, so the window follows what the kills find: it shrinks by a quarter after a
    // kill that came after the push and grows back after one that came before, so that both
    // kinds happen however fast this machine delivers.
    let widest = whole + whole / 2;
    let mut window = widest;
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut killed_rounds, mut killed_before, mut killed_after, mut locked) = (0u32, 0, 0, 0);
    while killed_rounds < 20 && Instant::now() < deadline {
        killed_rounds += 1;
        let round = killed_rounds + 1;
        write_round(&repos, round);
        let old = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        let serve = start_serve(&config);
        std::thread::sleep(Duration::from_millis(rng.below(window.max(1))));
        drop(serve); // SIGKILL
        let after = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        if after == old {
            killed_before += 1;
            window = (window + window / 4 + 1).min(widest);
        } else {
            killed_after += 1;
            window -= window / 4;
            let parent = rev_parse(&repos.gitops, &format!("{after}^")).unwrap();
            assert_eq!(
                parent, old,
                "round {round} (seed {seed}): the branch moved by one commit or not at all"
            );
            assert!(
                delivered(&repos.gitops, round),
                "round {round}: a new commit holds the new input"
            );
        }
        // Killed while git updated the branch in this (local) repository: its lock file stays,
        // as after a killed `git push`; whoever knows no process writes removes it (the
        // `sync` kill loop checks that the message names it).
        let lock = repos.gitops.join("refs/heads/dev.lock");
        if lock.exists() {
            locked += 1;
            std::fs::remove_file(&lock).unwrap();
        }
        // The next start on the same cache delivers this round's input, on top of `after`.
        let serve = start_serve(&config);
        wait_for_delivery(&repos.gitops, round, seed);
        let now = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        assert!(
            now == after || rev_parse(&repos.gitops, &format!("{now}^")).unwrap() == after,
            "round {round} (seed {seed}): one commit on top of what the killed serve left"
        );
        // And makes no further commit for the same input.
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(
            rev_parse(&repos.gitops, "refs/heads/dev").unwrap(),
            now,
            "round {round} (seed {seed}): a commit without a new input"
        );
        drop(serve);
    }
    eprintln!(
        "serve kill loop: seed {seed}, {killed_rounds} killed rounds, {killed_before} killed before pushing, {killed_after} after, \
         {locked} left the branch locked, a warm start delivers in {whole} ms"
    );
    assert!(
        killed_rounds >= 4,
        "only {killed_rounds} killed rounds in the time"
    );
    assert!(
        killed_before >= 1,
        "no serve was killed before it pushed (seed {seed})"
    );
}
