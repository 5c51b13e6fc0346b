//! Faults while `kalypso render` writes its output folder: the process killed at random
//! instants, two renders at once, readers while a render writes, a write that exceeds the
//! file-size limit. Each time the output folder must hold exactly the old tree or exactly the
//! new one once the journal of an update that was under way, if any, is finished, which the
//! next kalypso command that touches the folder does first: here a reader (`diff --against`),
//! which must then see the new tree whole; and whatever a killed render left beside the
//! folder (lock file, staging folder, journal) must be gone after that command.
//!
//! The renders run in child processes (this test binary re-executed into `cli_child`, as in
//! `bad_input.rs`), killed with SIGKILL; the control planes are generated, large enough that a
//! render takes a while, and alternate between two versions that produce different trees
//! (changed config, removed and added targets, a removed cluster type). Delays are random but
//! reproducible: the seed is printed, and `KALYPSO_KILL_SEED` replays one.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kalypso_cli::fsio::read_tree;
use kalypso_core::tree::Tree;

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

/// A command running `kalypso render CONTROL-PLANE --env dev --out OUT` in a child process,
/// with its render cache in `cache`.
fn render(control_plane: &Path, out: &Path, cache: &Path) -> Command {
    render_with(control_plane, out, cache, true)
}

/// [`render`], printing what it did unless `quiet`.
fn render_with(control_plane: &Path, out: &Path, cache: &Path, quiet: bool) -> Command {
    let mut args = vec![
        "render".to_owned(),
        control_plane.display().to_string(),
        "--env".to_owned(),
        "dev".to_owned(),
        "--out".to_owned(),
        out.display().to_string(),
    ];
    if quiet {
        args.push("--quiet".to_owned());
    }
    let mut command = Command::new(std::env::current_exe().unwrap());
    support::as_cli_child(&mut command, &args)
        .env("KALYPSO_CACHE_DIR", cache)
        .env_remove("KALYPSO_THREADS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A command running `kalypso diff CONTROL-PLANE --env dev --against OUT` (a reader of OUT)
/// in a child process.
fn reader(control_plane: &Path, out: &Path, cache: &Path) -> Command {
    let args = [
        "diff".to_owned(),
        control_plane.display().to_string(),
        "--env".to_owned(),
        "dev".to_owned(),
        "--against".to_owned(),
        out.display().to_string(),
    ];
    let mut command = Command::new(std::env::current_exe().unwrap());
    support::as_cli_child(&mut command, &args)
        .env("KALYPSO_CACHE_DIR", cache)
        .env_remove("KALYPSO_THREADS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// What a child printed on standard output, without the test harness's own lines (the child
/// is this test binary).
fn printed(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty() && *l != "running 1 test")
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes a control plane into `dir`: `cluster_types` cluster types, one workload with
/// `targets` deployment targets (named from `first`), every target on every cluster type, and
/// a config value `replicas`.
fn control_plane(dir: &Path, cluster_types: usize, first: usize, targets: usize, replicas: u32) {
    let api = "apiVersion: scheduler.kalypso.io/v1alpha1";
    let write = |rel: &str, text: String| {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write(
        "main/registration.yaml",
        format!(
            "{api}\nkind: WorkloadRegistration\nmetadata:\n  name: app\nspec:\n  workload:\n    repo: r\n    \
             branch: main\n    path: w\n  workspace: team\n"
        ),
    );
    let template = |name: &str, body: &str| {
        format!(
            "{api}\nkind: Template\nmetadata:\n  name: {name}\nspec:\n  type: {name}\n  manifests:\n    - |\n{body}"
        )
    };
    write(
        "main/templates.yaml",
        [
            template(
                "reconciler",
                "      name: {{ .DeploymentTargetName }}\n      repo: {{ .Manifests.repo }}\n      path: {{ .Manifests.path }}\n",
            ),
            template("namespace", "      namespace: {{ .Namespace }}\n"),
            template(
                "config",
                "      {{- range $i := until 40 }}\n      key{{ $i }}: \"{{ $.ConfigData.REPLICAS }} replicas of the workload\"\n      {{- end }}\n",
            ),
        ]
        .join("---\n"),
    );
    let cts: Vec<String> = (0..cluster_types)
        .map(|i| {
            format!(
                "{api}\nkind: ClusterType\nmetadata:\n  name: ct{i}\n  labels: {{size: large}}\nspec:\n  \
                 reconciler: reconciler\n  namespaceService: namespace\n  configType: config\n"
            )
        })
        .collect();
    write("dev/cluster-types.yaml", cts.join("---\n"));
    write(
        "dev/policy.yaml",
        format!(
            "{api}\nkind: SchedulingPolicy\nmetadata:\n  name: all\nspec:\n  deploymentTargetSelector:\n    \
             labelSelector: {{}}\n  clusterTypeSelector:\n    labelSelector: {{}}\n"
        ),
    );
    write(
        "dev/config.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: common\n  labels: {{platform-config: \"true\"}}\n\
             data:\n  REPLICAS: \"{replicas}\"\n"
        ),
    );
    let mut workload =
        format!("{api}\nkind: Workload\nmetadata:\n  name: app\nspec:\n  deploymentTargets:\n");
    for t in first..first + targets {
        workload.push_str(&format!(
            "    - name: t{t}\n      environment: dev\n      manifests: {{repo: r, branch: b, path: p{t}}}\n"
        ));
    }
    write("workloads/app/workload.yaml", workload);
}

/// A small reproducible random sequence (xorshift).
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Everything in `parent` whose name mentions kalypso (staging folders, lock files).
fn leftovers(parent: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("kalypso"))
        .collect();
    names.sort();
    names
}

/// Every path under `out` whose name mentions kalypso (temporary files).
fn temporaries(out: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![out.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries {
            let entry = entry.unwrap();
            if entry.file_name().to_string_lossy().contains("kalypso") {
                found.push(entry.path().display().to_string());
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

/// The test's folders: two control planes, the output folder and the cache.
struct Setup {
    root: tempfile::TempDir,
    planes: [PathBuf; 2],
    trees: [Tree; 2],
    /// How long a full render took (to spread the kills over a render).
    took: Duration,
}

impl Setup {
    fn new() -> Setup {
        let root = tempfile::tempdir().unwrap();
        let planes = [root.path().join("plane-a"), root.path().join("plane-b")];
        // B: another config value, 40 targets fewer at the start and 40 new ones at the end,
        // one cluster type fewer.
        control_plane(&planes[0], 4, 0, 120, 3);
        control_plane(&planes[1], 3, 40, 120, 5);
        let mut trees = Vec::new();
        let mut took = Duration::ZERO;
        for (i, plane) in planes.iter().enumerate() {
            let out = root.path().join(format!("reference-{i}"));
            let started = Instant::now();
            let done = render(plane, &out, &root.path().join("reference-cache"))
                .output()
                .unwrap();
            took = took.max(started.elapsed());
            assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
            trees.push(read_tree(&out).unwrap());
        }
        assert_ne!(trees[0], trees[1]);
        Setup {
            root,
            planes,
            trees: trees.try_into().unwrap(),
            took,
        }
    }

    fn out(&self) -> PathBuf {
        self.root.path().join("gitops/out")
    }

    fn cache(&self) -> PathBuf {
        self.root.path().join("cache")
    }

    /// Which of the two trees the output folder holds (panics if neither).
    fn holds(&self, what: &str) -> usize {
        let tree = read_tree(&self.out()).unwrap();
        let which = self.trees.iter().position(|t| *t == tree);
        let Some(which) = which else {
            let (a, b) = (&self.trees[0], &self.trees[1]);
            let only = |x: &Tree, y: &Tree| x.iter().filter(|(p, b)| y.get(p) != Some(b)).count();
            panic!(
                "{what}: the output folder holds a mix ({} files; {} differ from A, {} from B)",
                tree.len(),
                only(&tree, a) + only(a, &tree),
                only(&tree, b) + only(b, &tree)
            );
        };
        assert!(
            temporaries(&self.out()).is_empty(),
            "{what}: {:?}",
            temporaries(&self.out())
        );
        which
    }
}

fn kill(mut child: Child) -> bool {
    let finished = child.try_wait().unwrap().is_some();
    let _ = child.kill();
    let status = child.wait_with_output().unwrap();
    finished || status.status.success()
}

#[test]
fn a_render_killed_at_any_instant_leaves_the_old_tree_or_the_new_one() {
    let setup = Setup::new();
    let seed = std::env::var("KALYPSO_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("KALYPSO_KILL_SEED={seed}");
    let mut random = Random(seed);
    // The first tree, complete.
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    assert_eq!(setup.holds("first render"), 0);
    let span = u64::try_from(setup.took.as_micros()).unwrap().max(1000) * 3 / 2;
    let (mut old, mut new, mut finished, mut staged, mut journaled) = (0, 0, 0, 0, 0);
    for i in 0..40 {
        let target = (i + 1) % 2;
        let before = setup.holds(&format!("before kill {i}"));
        let child = render(&setup.planes[target], &setup.out(), &setup.cache())
            .spawn()
            .unwrap();
        // A third of the kills early (start-up, reading, locking), the rest over the render.
        let delay = if random.below(3) == 0 {
            random.below(span / 10)
        } else {
            random.below(span)
        };
        std::thread::sleep(Duration::from_micros(delay));
        if kill(child) {
            finished += 1;
        }
        let parent = setup.out().parent().unwrap().to_owned();
        let left = leftovers(&parent);
        if left.iter().any(|n| n.contains("kalypso-new")) {
            staged += 1;
        }
        // A kill after the update's journal was written may leave the tree part-way: the
        // next kalypso command that touches it finishes it first. Here a reader, which must
        // then see the new tree whole (no difference from what the new control plane
        // renders), and leave nothing beside the folder.
        let pending = left.iter().any(|n| n.ends_with(".kalypso-journal"));
        let read = reader(&setup.planes[target], &setup.out(), &setup.cache())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&read.stderr);
        assert!(
            matches!(read.status.code(), Some(0 | 2)),
            "reader after kill {i}: {stderr}"
        );
        if pending {
            journaled += 1;
            assert_eq!(
                read.status.code(),
                Some(0),
                "the reader sees the new tree: {stderr}"
            );
            assert_eq!(printed(&read), "");
            assert!(
                stderr.contains(
                    "held an update that an interrupted kalypso render had begun; it was finished first"
                ),
                "{stderr}"
            );
        }
        assert_eq!(
            leftovers(&parent),
            Vec::<String>::new(),
            "the reader after kill {i} cleaned up after it"
        );
        let now = setup.holds(&format!("kill {i} after {delay} µs"));
        if now == before {
            old += 1;
        } else {
            assert_eq!(now, target);
            new += 1;
        }
    }
    println!(
        "40 kills: {old} left the old tree, {new} the new one; {finished} renders finished first, \
         {staged} left a staging folder, {journaled} a journal that the next reader finished"
    );
    // The next render cleans up after them all.
    let done = render(&setup.planes[1], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(setup.holds("last render"), 1);
    assert_eq!(leftovers(setup.out().parent().unwrap()), Vec::<String>::new());
    // And a render from a warm cache after all that is right too.
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    assert_eq!(setup.holds("after the kills"), 0);
}

/// A render stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP at random instants cleans up before
/// it exits: the output folder holds the old tree or the new one at once (a committed update
/// is carried out first), with nothing to finish, and nothing is left beside it.
#[test]
fn a_render_interrupted_at_any_instant_leaves_a_whole_tree_and_nothing_beside_it() {
    use rustix::process::{Pid, Signal, kill_process};
    let setup = Setup::new();
    let seed = std::env::var("KALYPSO_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("KALYPSO_KILL_SEED={seed}");
    let mut random = Random(seed);
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    let span = u64::try_from(setup.took.as_micros()).unwrap().max(1000) * 3 / 2;
    let parent = setup.out().parent().unwrap().to_owned();
    let (mut old, mut new, mut finished) = (0, 0, 0);
    for i in 0..30 {
        // Always towards the other tree: every render has an update to make.
        let before = setup.holds(&format!("before signal {i}"));
        let target = 1 - before;
        let child = render(&setup.planes[target], &setup.out(), &setup.cache())
            .spawn()
            .unwrap();
        let delay = random.below(span);
        std::thread::sleep(Duration::from_micros(delay));
        let signal = [Signal::INT, Signal::TERM, Signal::HUP][i % 3];
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        let _ = kill_process(pid, signal);
        let output = child.wait_with_output().unwrap();
        if output.status.success() {
            finished += 1;
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(
            leftovers(&parent),
            Vec::<String>::new(),
            "signal {i} ({signal:?}) after {delay} µs left something beside the folder: {stderr}"
        );
        let now = setup.holds(&format!("signal {i} ({signal:?}) after {delay} µs"));
        if now == before {
            old += 1;
        } else {
            assert_eq!(now, target);
            new += 1;
        }
    }
    println!("30 signals: {old} left the old tree, {new} the new one; {finished} renders finished first");
}

#[test]
fn two_renders_at_once_one_fails_on_the_lock_and_the_tree_is_whole() {
    let setup = Setup::new();
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    let lock = setup.root.path().join("gitops/.out.kalypso-lock");
    let mut refused = 0;
    for attempt in 0..10 {
        let first = render(&setup.planes[attempt % 2], &setup.out(), &setup.cache())
            .spawn()
            .unwrap();
        // Start the second once the first holds the lock.
        let started = Instant::now();
        while !lock.exists() && started.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let second = render(&setup.planes[(attempt + 1) % 2], &setup.out(), &setup.cache())
            .output()
            .unwrap();
        let first = first.wait_with_output().unwrap();
        // Usually the second is refused; if it took the lock first (between the first's
        // creating the lock file and locking it), the first is. Never both.
        let failed: Vec<_> = [&first, &second]
            .into_iter()
            .filter(|o| !o.status.success())
            .collect();
        assert!(failed.len() < 2, "both renders failed");
        if let Some(loser) = failed.first() {
            let stderr = String::from_utf8_lossy(&loser.stderr);
            assert!(
                stderr.starts_with(&format!(
                    "error: another kalypso is writing to {} (pid {})",
                    setup.out().display(),
                    first_pid(&stderr)
                )),
                "{stderr}"
            );
            refused += 1;
        }
        setup.holds(&format!("attempt {attempt}"));
        assert!(!lock.exists(), "the lock file goes with the render that held it");
        if refused >= 3 {
            break;
        }
    }
    assert!(
        refused > 0,
        "no second render ever ran while the first held the lock"
    );
}

/// Readers of the output folder (`diff --against`) started one after the other while a render
/// updates it: each either fails at once on the render's lock, saying so, or reads a whole
/// tree, the old one or the new one (its diff is one of the two), never a mix. A render that
/// starts while a reader holds the lock fails at once too, saying so, and is run again.
#[test]
fn readers_during_a_render_see_a_whole_tree_or_wait_for_the_lock() {
    let setup = Setup::new();
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    // What a reader from control plane B prints against A's tree (against B's: nothing).
    let against_a = reader(&setup.planes[1], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert_eq!(against_a.status.code(), Some(2), "B differs from A's tree");
    let out = setup.out().display().to_string();
    let (mut refused, mut saw_a, mut saw_b, mut writer_refused) = (0, 0, 0, 0);
    for round in 0..4 {
        let target = (round + 1) % 2;
        loop {
            let mut writer = render(&setup.planes[target], &setup.out(), &setup.cache())
                .spawn()
                .unwrap();
            loop {
                let finished = writer.try_wait().unwrap().is_some();
                let read = reader(&setup.planes[1], &setup.out(), &setup.cache())
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&read.stderr);
                match read.status.code() {
                    Some(1) => {
                        assert!(
                            stderr.contains(&format!("another kalypso is writing to {out}"))
                                || stderr.contains(&format!("another kalypso is using {out} (pid unknown)")),
                            "{stderr}"
                        );
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Some(0) => {
                        assert_eq!(printed(&read), "");
                        saw_b += 1;
                    }
                    Some(2) => {
                        assert_eq!(printed(&read), printed(&against_a), "a reader saw a mix");
                        saw_a += 1;
                    }
                    other => panic!("reader exited with {other:?}: {stderr}"),
                }
                if finished {
                    break;
                }
            }
            let written = writer.wait_with_output().unwrap();
            if written.status.success() {
                break;
            }
            let stderr = String::from_utf8_lossy(&written.stderr);
            assert!(
                stderr.contains(&format!("another kalypso is reading {out}"))
                    || stderr.contains(&format!("another kalypso is using {out} (pid unknown)")),
                "{stderr}"
            );
            writer_refused += 1;
            assert!(writer_refused < 50, "the render never got the lock");
        }
        assert_eq!(setup.holds(&format!("round {round}")), target);
    }
    println!(
        "readers: {refused} refused on a render's lock, {saw_a} read tree A whole, {saw_b} tree B; \
         {writer_refused} renders refused on a reader's lock"
    );
    assert!(saw_a + saw_b > 0, "no reader read a tree");
    assert_eq!(leftovers(setup.out().parent().unwrap()), Vec::<String>::new());
}

/// The pid in a lock message (checked to be a number).
fn first_pid(stderr: &str) -> u32 {
    let rest = stderr.split("(pid ").nth(1).unwrap();
    rest.split(')').next().unwrap().parse().unwrap()
}

#[test]
fn a_render_stopped_by_the_file_size_limit_leaves_the_old_tree() {
    let setup = Setup::new();
    let done = render(&setup.planes[0], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success());
    // `ulimit -f 1`: no file may grow past 512 bytes; the config files do, so the render
    // is stopped (SIGXFSZ) while writing them, as a full disk would stop it.
    let command = render(&setup.planes[1], &setup.out(), &setup.cache());
    let program = command.get_program().to_owned();
    let args: Vec<_> = command.get_args().map(ToOwned::to_owned).collect();
    let mut limited = Command::new("sh");
    limited
        .arg("-c")
        .arg("ulimit -f 1 && exec \"$0\" \"$@\"")
        .arg(program)
        .args(args)
        .envs(
            command
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))),
        )
        .env_remove("KALYPSO_THREADS");
    let stopped = limited.output().unwrap();
    assert!(!stopped.status.success(), "the render must not get through");
    assert_eq!(setup.holds("after the file-size limit"), 0);
    let done = render(&setup.planes[1], &setup.out(), &setup.cache())
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(setup.holds("after the next render"), 1);
    assert_eq!(leftovers(setup.out().parent().unwrap()), Vec::<String>::new());
}

/// The files a swap carries over are new links to the same files, so the render cache must
/// still know them as clean: a render after a swap re-renders nothing when nothing changed.
#[test]
fn the_render_cache_stays_valid_across_swaps() {
    let setup = Setup::new();
    let rendered = |plane: &Path| {
        let done = render_with(plane, &setup.out(), &setup.cache(), false)
            .output()
            .unwrap();
        assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
        String::from_utf8_lossy(&done.stdout).into_owned()
    };
    rendered(&setup.planes[1]);
    // C is B with one target fewer: the tree is swapped, and every other assignment is clean
    // (not rendered, its files carried over as links).
    let c = setup.root.path().join("plane-c");
    control_plane(&c, 3, 40, 119, 5);
    let swapped = rendered(&c);
    assert!(
        swapped.contains(" 0 changed, 9 deleted,") && swapped.contains("; 0 assignment(s) re-rendered)"),
        "{swapped}"
    );
    let again = rendered(&c);
    assert!(
        again.contains("(0 added, 0 changed, 0 deleted,") && again.contains("; 0 assignment(s) re-rendered)"),
        "the cache knows the carried-over files: {again}"
    );
    // Back to B: only the removed target's assignments are rendered again.
    let back = rendered(&setup.planes[1]);
    assert!(back.contains("; 3 assignment(s) re-rendered)"), "{back}");
    assert_eq!(setup.holds("after the renders"), 1);
}
