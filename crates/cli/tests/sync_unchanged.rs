//! `kalypso sync` as a user runs it, in a child process (see `support`): a second sync with
//! nothing moved is answered from the delivery state, and says so; a sync killed at random
//! instants leaves the GitOps branch at the old or the new commit, and the next one succeeds.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kalypso_testkit::{ExampleRepos, Random, branch_files, kill_seed, rev_parse, write_files};

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

fn sync_command(repos: &ExampleRepos, cache: &Path, extra: &[&str]) -> Command {
    let mut args: Vec<String> = vec![
        "sync".into(),
        format!("file://{}", repos.control_plane.display()),
        "--cache-dir".into(),
        cache.display().to_string(),
        "--token-env".into(),
        "KALYPSO_TEST_NO_TOKEN".into(),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let mut command = Command::new(std::env::current_exe().unwrap());
    support::as_cli_child(&mut command, &args);
    command
}

fn sync(repos: &ExampleRepos, cache: &Path, extra: &[&str]) -> Output {
    let out = sync_command(repos, cache, extra).output().unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_second_sync_with_nothing_moved_says_so_without_rendering() {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cache = dir.path().join("cache");
    let first = String::from_utf8(sync(&repos, &cache, &[]).stdout).unwrap();
    assert!(first.contains("dev: ") && first.contains("pushed to"), "{first}");
    let dev = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
    let stage = rev_parse(&repos.gitops, "refs/heads/stage").unwrap();

    let second = String::from_utf8(sync(&repos, &cache, &[]).stdout).unwrap();
    // (The test harness of the child adds its own lines.)
    let lines: Vec<&str> = second.lines().filter(|l| l.contains(": ")).collect();
    assert_eq!(lines.len(), 2, "{second}");
    assert!(
        lines[0].starts_with(&format!("dev: no input moved, dev@dev stays at {} (", &dev[..7])),
        "{second}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "stage: no input moved, stage@stage stays at {} (",
            &stage[..7]
        )),
        "{second}"
    );

    let printed = String::from_utf8(sync(&repos, &cache, &["--env", "dev", "--json"]).stdout).unwrap();
    let json: serde_json::Value = serde_json::Deserializer::from_str(&printed[printed.find('[').unwrap()..])
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(json[0]["result"], "unchanged", "{json}");
    assert_eq!(json[0]["targets"][0]["head"], dev.as_str());
    assert_eq!(json[0]["revisions"]["main"], repos.main_commit.as_str());

    // A moved environment branch: dev is rendered and delivered, stage is not.
    write_files(
        &repos.control_plane,
        "dev",
        &[("notes.yaml", Some("# a comment only\n"))],
        "a note",
    );
    let third = String::from_utf8(sync(&repos, &cache, &[]).stdout).unwrap();
    assert!(
        third.contains("dev: no change, dev@dev stays at"),
        "rendered again: {third}"
    );
    assert!(third.contains("stage: no input moved"), "{third}");
}

#[test]
fn a_sync_killed_at_any_instant_leaves_the_old_or_the_new_commit_and_the_next_one_succeeds() {
    let seed = kill_seed(Some(0x5eed_0017_u64));
    let mut rng = Random::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cache = dir.path().join("cache");
    sync(&repos, &cache, &["--env", "dev"]);
    // How long a sync of one changed config takes here, so that kills land anywhere in it.
    let config = |round: u32| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: east-us-config\n  labels:\n    \
             platform-config: \"true\"\n    region: east-us\ndata:\n  REGION: East US\n  ROUND: round-{round}\n"
        )
    };
    write_files(
        &repos.control_plane,
        "dev",
        &[("cluster-types/east-us/east-us-config.yaml", Some(&config(0)))],
        "round 0",
    );
    let started = Instant::now();
    sync(&repos, &cache, &["--env", "dev"]);
    let whole = started.elapsed().as_millis().max(20) as u64;
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut rounds = 0u32;
    let mut killed = 0;
    let mut pushed_before_the_kill = 0;
    let mut locked = 0;
    while rounds < 25 && Instant::now() < deadline {
        rounds += 1;
        // A new input each round, so that every sync has a commit to make.
        write_files(
            &repos.control_plane,
            "dev",
            &[("cluster-types/east-us/east-us-config.yaml", Some(&config(rounds)))],
            &format!("round {rounds}"),
        );
        let old = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        let mut child = sync_command(&repos, &cache, &["--env", "dev"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.below(whole)));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        child.wait().unwrap();
        let after = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        if after != old {
            pushed_before_the_kill += 1;
            let parent = rev_parse(&repos.gitops, &format!("{after}^")).unwrap();
            assert_eq!(
                parent, old,
                "round {rounds} (seed {seed}): the branch moved by one commit or not at all"
            );
        }
        // A sync killed while the GitOps repository (on this machine, written by the sync
        // itself) was updating its branch leaves the branch's lock file there: the next
        // sync stops and names it, for whoever knows that no process writes to remove.
        let lock = repos.gitops.join("refs/heads/dev.lock");
        if lock.exists() {
            locked += 1;
            let out = sync_command(&repos, &cache, &["--env", "dev"]).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success());
            assert!(stderr.contains(&format!("remove {}", lock.display())), "{stderr}");
            std::fs::remove_file(&lock).unwrap();
        }
        // The next sync succeeds and delivers this round's input.
        sync(&repos, &cache, &["--env", "dev"]);
        let now = rev_parse(&repos.gitops, "refs/heads/dev").unwrap();
        assert!(now == after || rev_parse(&repos.gitops, &format!("{now}^")).unwrap() == after);
        let delivered = branch_files(&repos.gitops, "dev");
        let marker = format!("round-{rounds}");
        assert!(
            delivered
                .values()
                .any(|f| String::from_utf8_lossy(f).contains(&marker)),
            "round {rounds}: this round's config is delivered"
        );
        let again = sync(&repos, &cache, &["--env", "dev"]);
        assert_eq!(
            rev_parse(&repos.gitops, "refs/heads/dev").unwrap(),
            now,
            "round {rounds}: {again:?}"
        );
    }
    eprintln!(
        "kill loop: seed {seed}, {rounds} rounds, {killed} syncs killed, {pushed_before_the_kill} pushed before it, \
         {locked} left the branch locked, a sync takes {whole} ms"
    );
    assert!(rounds >= 4, "only {rounds} rounds in the time");
    assert!(
        killed >= 1,
        "no sync was killed while running (seed {seed}, {rounds} rounds)"
    );
}

#[test]
fn a_damaged_cache_is_rebuilt_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cache = dir.path().join("cache");
    sync(&repos, &cache, &["--env", "dev"]);
    // Every pack of every mirror cut to a third; the dev branch moves so that it is read.
    let mut packs = Vec::new();
    for mirror in std::fs::read_dir(&cache).unwrap() {
        let objects = mirror.unwrap().path().join("objects/pack");
        if let Ok(entries) = std::fs::read_dir(objects) {
            packs.extend(entries.map(|e| e.unwrap().path()));
        }
    }
    assert!(!packs.is_empty());
    for pack in packs {
        let len = std::fs::metadata(&pack).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&pack)
            .unwrap()
            .set_len(len / 3)
            .unwrap();
    }
    write_files(
        &repos.control_plane,
        "dev",
        &[("notes.yaml", Some("# a comment only\n"))],
        "a note",
    );
    let out = sync(&repos, &cache, &["--env", "dev"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the git cache looked damaged: its mirrors were removed and are fetched afresh"),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("dev: no change, dev@dev stays at"), "{stdout}");
}

/// `validate` (like `plan`, `diff`, `explain` and `render`) on a git control plane takes the
/// same hold on the cache as `sync`: a reference lock that a killed process left in a mirror
/// is removed instead of failing the fetch.
#[test]
fn reading_a_git_control_plane_clears_locks_a_killed_process_left_in_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let repos = ExampleRepos::create(dir.path());
    let cache = dir.path().join("cache");
    let url = format!("file://{}", repos.control_plane.display());
    let validate = || {
        let args: Vec<String> = [
            "validate",
            &url,
            "--env",
            "dev",
            "--cache-dir",
            cache.to_str().unwrap(),
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        let mut command = Command::new(std::env::current_exe().unwrap());
        support::as_cli_child(&mut command, &args).output().unwrap()
    };
    assert!(validate().status.success());
    // What a process killed while updating the mirror's `main` leaves behind.
    let mirrors: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("HEAD").is_file())
        .collect();
    assert!(!mirrors.is_empty());
    let mut locks = Vec::new();
    for mirror in &mirrors {
        let lock = mirror.join("refs/heads/main.lock");
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        std::fs::write(&lock, "").unwrap();
        locks.push(lock);
    }
    write_files(
        &repos.control_plane,
        "main",
        &[("notes.txt", Some("main moved\n"))],
        "move main",
    );
    let out = validate();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(locks.iter().all(|l| !l.exists()));
}
