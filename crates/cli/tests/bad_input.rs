//! Bad input, end to end: for each kind of mistake a control plane can hold, `kalypso render`
//! and `kalypso validate` exit non-zero, name the file (and line), the object and the field,
//! list every problem rather than the first, and leave the output folder exactly as it was.
//!
//! The cases are data: one folder per case under `tests/cases/bad-input/` (see
//! `tests/cases/README.md`), each with the control plane (`input/`), the commands to run
//! and their exit codes (`case.yaml`), and what each command must print (`<run>.stderr`,
//! `<run>.stdout`). [`bad_input_cases`] runs them all and reports every failing case by name.
//! Each case runs in a temporary folder that also holds an output folder seeded with a GitOps
//! tree which a successful render would change (`tests/cases/bad-input-seed/`, see the case
//! `a-valid-control-plane-changes-the-seeded-tree`), so "nothing changed" is a real assertion.
//!
//! The CLI runs in a child process (this test binary, re-executed into [`cli_child`]) so that
//! its exit code, standard output and standard error are observed exactly as a user sees them.
//! What cannot be data (symbolic links in the output folder) is a test of its own below, on
//! the same helpers.
#![allow(clippy::unwrap_used)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use kalypso_testkit::{Run, cases, copy_files, snapshot, workspace_root};
use serde::Deserialize;

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

/// The folder of the cases.
fn cases_dir() -> PathBuf {
    workspace_root().join("tests/cases/bad-input")
}

/// A case's `case.yaml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    /// `render` and `validate` of environment `dev` both fail with this many errors (the runs
    /// `render`, `render-new-out` and `validate`; see [`Sandbox::fails`]).
    fails: Option<usize>,
    /// More runs, after those of `fails`.
    #[serde(default)]
    runs: Vec<RunSpec>,
    /// Text that no run may print on standard error.
    #[serde(default)]
    stderr_excludes: Vec<String>,
    /// Whether `[OUT]` starts as a copy of the seed (default); `false`: it does not exist
    /// (the case's `root/` may still put something there).
    #[serde(default = "yes")]
    seed: bool,
    /// Folders (relative to `[ROOT]`) made the root of a git clone before the runs: a `.git`
    /// folder holding `HEAD` is put in each (git cannot store a `.git` folder in `root/`).
    #[serde(default)]
    git: Vec<String>,
    /// Symbolic links made before the runs: `[link, target]`, the link relative to `[ROOT]`,
    /// the target as written (placeholders expanded).
    #[serde(default)]
    links: Vec<[String; 2]>,
    /// Whether another process (this test, writing pid 4242 into the lock file) holds the
    /// lock of `[OUT]` during the runs.
    #[serde(default)]
    locked: bool,
    /// Paths (relative to `[ROOT]`) that must exist after the runs.
    #[serde(default)]
    present: Vec<String>,
    /// Paths (relative to `[ROOT]`) that must not exist after the runs (leftovers cleaned up).
    #[serde(default)]
    absent: Vec<String>,
    /// Folders (relative to `[ROOT]`) made read-only (`chmod a-w`) before the runs, writable
    /// again after them. A process running as root can still write them: the case is then
    /// skipped, with a note.
    #[serde(default)]
    read_only: Vec<String>,
}

/// The default of [`CaseFile::seed`].
fn yes() -> bool {
    true
}

/// One run of the command in a case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunSpec {
    /// Names the expected files, `<name>.stderr` and `<name>.stdout`.
    name: String,
    /// The arguments, with `[ROOT]`, `[DIR]` and `[OUT]` for the temporary folder, the
    /// control plane and the output folder.
    args: Vec<String>,
    /// The exit code.
    code: i32,
    /// Whether the run may change the temporary folder; by default nothing in it may change.
    #[serde(default)]
    writes: bool,
    /// Environment variables of the run (`KALYPSO_SPRIG: "9"`).
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

/// A case's temporary folder: `control-plane/` (the case's `input/`), `out/` (the seeded
/// GitOps tree), `cache/` (empty), and the files of the case's `root/` if it has one.
struct Sandbox {
    root: tempfile::TempDir,
    /// Whether the runs go without the capabilities that let root write into read-only
    /// folders (`setpriv`), so that a read-only folder is one for them too.
    without_override: bool,
}

impl Sandbox {
    /// A sandbox whose control plane is a copy of `input`.
    fn new(input: &Path) -> Sandbox {
        Sandbox::with_seed(input, true)
    }

    /// A sandbox whose control plane is a copy of `input`, with the seeded output folder
    /// if `seed`.
    fn with_seed(input: &Path, seed: bool) -> Sandbox {
        let sandbox = Sandbox {
            root: tempfile::tempdir().unwrap(),
            without_override: false,
        };
        copy_files(input, &sandbox.dir());
        if seed {
            copy_files(
                &workspace_root().join("tests/cases/bad-input-seed"),
                &sandbox.out(),
            );
        }
        fs::create_dir_all(sandbox.path().join("cache")).unwrap();
        sandbox
    }

    /// The temporary folder, `[ROOT]`.
    fn path(&self) -> &Path {
        self.root.path()
    }

    /// The control-plane folder, `[DIR]`.
    fn dir(&self) -> PathBuf {
        self.path().join("control-plane")
    }

    /// The output folder, `[OUT]`.
    fn out(&self) -> PathBuf {
        self.path().join("out")
    }

    /// `arg` with its placeholders replaced by the sandbox's paths.
    fn expand(&self, arg: &str) -> String {
        let root = self.path().to_str().unwrap();
        arg.replace("[DIR]", "[ROOT]/control-plane")
            .replace("[OUT]", "[ROOT]/out")
            .replace("[ROOT]", root)
    }

    /// Runs `kalypso` with `args` (placeholders expanded) in a child process; the temporary
    /// folder is `[ROOT]` in what it prints.
    fn kalypso(&self, args: &[&str], env: &std::collections::BTreeMap<String, String>) -> Run {
        let args: Vec<String> = args.iter().map(|a| self.expand(a)).collect();
        let cache = self.path().join("cache");
        let mut command = if self.without_override {
            let mut setpriv = Command::new("setpriv");
            setpriv
                .arg(format!("--bounding-set=-{WRITE_OVERRIDES}"))
                .arg("--")
                .arg(std::env::current_exe().unwrap());
            setpriv
        } else {
            Command::new(std::env::current_exe().unwrap())
        };
        let run = Run::of(
            support::as_cli_child(&mut command, &args)
                .envs(env)
                .env("XDG_CACHE_HOME", &cache)
                .env("KALYPSO_CACHE_DIR", &cache)
                .env("HOME", self.path())
                .env_remove("KALYPSO_THREADS")
                .env("NO_COLOR", "1")
                .current_dir(self.path()),
        );
        // The test harness announces the test it runs; the rest is the command's output.
        let stdout = run
            .stdout
            .lines()
            .filter(|l| !l.is_empty() && *l != "running 1 test")
            .collect::<Vec<_>>()
            .join("\n");
        Run { stdout, ..run }.replace(self.path().to_str().unwrap(), "[ROOT]")
    }

    /// Runs `spec`: checks its exit code and, unless it may write, that nothing under the
    /// temporary folder changed.
    fn run(&self, spec: &RunSpec) -> Result<Run, String> {
        let before = (!spec.writes).then(|| snapshot(self.path()));
        let args: Vec<&str> = spec.args.iter().map(String::as_str).collect();
        let outcome = self.kalypso(&args, &spec.env);
        if outcome.code != spec.code {
            return Err(format!(
                "run {}: exit code {}, not {}: {outcome:#?}",
                spec.name, outcome.code, spec.code
            ));
        }
        if let Some(before) = before
            && snapshot(self.path()) != before
        {
            return Err(format!(
                "run {} must leave everything as it was: {outcome:#?}",
                spec.name
            ));
        }
        Ok(outcome)
    }

    /// The runs of `fails: errors`: `render` of `dev` into the seeded output folder,
    /// `render-new-out` into an output folder that does not exist yet (built while rendering:
    /// neither it nor its parent may be left behind) and `validate`; all fail and change
    /// nothing. Both commands count `errors` errors and report the same ones.
    fn fails(&self, errors: usize) -> Result<Vec<(String, Run)>, String> {
        let spec = |name: &str, args: &[&str]| RunSpec {
            name: name.to_owned(),
            args: args.iter().map(|&a| a.to_owned()).collect(),
            code: 1,
            writes: false,
            env: std::collections::BTreeMap::new(),
        };
        let render = self.run(&spec(
            "render",
            &["render", "[DIR]", "--env", "dev", "--out", "[OUT]"],
        ))?;
        let count =
            format!("error: environment \"dev\" has {errors} problem(s); nothing was written to [ROOT]/out");
        if !render.stderr.contains(&count) {
            return Err(format!("render must count {errors} problem(s): {render:#?}"));
        }
        let fresh = self.run(&spec(
            "render-new-out",
            &["render", "[DIR]", "--env", "dev", "--out", "[ROOT]/new/out"],
        ))?;
        let validate = self.run(&spec("validate", &["validate", "[DIR]", "--env", "dev"]))?;
        if !validate
            .stderr
            .contains(&format!("environment dev: {errors} error(s)"))
        {
            return Err(format!("validate must count {errors} error(s): {validate:#?}"));
        }
        let errors_of = |o: &Run| -> Vec<String> {
            o.diagnostics()
                .into_iter()
                .filter(|l| l.starts_with("error["))
                .map(str::to_owned)
                .collect()
        };
        if errors_of(&render) != errors_of(&validate) {
            return Err(format!(
                "render and validate must report the same errors:\n{render:#?}\n{validate:#?}"
            ));
        }
        if errors_of(&render).len() != errors {
            return Err(format!("render must report {errors} error(s): {render:#?}"));
        }
        Ok(vec![
            ("render".to_owned(), render),
            ("render-new-out".to_owned(), fresh),
            ("validate".to_owned(), validate),
        ])
    }
}

/// Runs one case folder: its runs in order, each checked against its expected files.
fn check_case(dir: &Path) -> Result<(), String> {
    let text = fs::read_to_string(dir.join("case.yaml")).unwrap();
    let case: CaseFile =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("case.yaml is not a valid case: {e}"))?;
    if case.fails.is_none() && case.runs.is_empty() {
        return Err("case.yaml has neither `fails` nor `runs`".to_owned());
    }
    let mut sandbox = Sandbox::with_seed(&dir.join("input"), case.seed);
    if dir.join("root").is_dir() {
        copy_files(&dir.join("root"), sandbox.path());
    }
    for clone in &case.git {
        let git = sandbox.path().join(clone).join(".git");
        fs::create_dir_all(&git).unwrap();
        fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }
    for [link, target] in &case.links {
        let link = sandbox.path().join(link);
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(sandbox.expand(target), link).unwrap();
    }
    // Held until the runs are over, as another kalypso would.
    let _lock = case.locked.then(|| hold_lock(&sandbox.out()));
    let _read_only = match ReadOnly::make(&sandbox, &case.read_only) {
        Some((guard, without_override)) => {
            sandbox.without_override = without_override;
            guard
        }
        None => {
            eprintln!(
                "{}: skipped: the read-only folders can still be written (running as root, and setpriv \
                 cannot drop the capabilities that allow it)",
                dir.display()
            );
            return Ok(());
        }
    };
    let mut outcomes = match case.fails {
        Some(errors) => sandbox.fails(errors)?,
        None => Vec::new(),
    };
    for spec in &case.runs {
        outcomes.push((spec.name.clone(), sandbox.run(spec)?));
    }
    let mut problems = Vec::new();
    for (name, outcome) in &outcomes {
        for excluded in &case.stderr_excludes {
            if outcome.stderr.contains(excluded.as_str()) {
                problems.push(format!(
                    "run {name}: stderr holds {excluded:?}:\n{}",
                    outcome.stderr
                ));
            }
        }
        for (stream, text) in [("stderr", &outcome.stderr), ("stdout", &outcome.stdout)] {
            if let Err(e) = check_output(&dir.join(format!("{name}.{stream}")), text) {
                problems.push(e);
            }
        }
    }
    // The output folder after the runs, folders included (nothing left behind), except
    // `.git` (which `present` checks).
    let expected_out = dir.join("expected-out");
    if expected_out.is_dir() {
        let mut actual = snapshot(&sandbox.out());
        actual.retain(|path, _| path != ".git" && !path.starts_with(".git/"));
        if cases::blessing() {
            fs::remove_dir_all(&expected_out).unwrap();
            copy_files(&sandbox.out(), &expected_out);
            let _ = fs::remove_dir_all(expected_out.join(".git"));
        } else if actual != snapshot(&expected_out) {
            problems.push(format!(
                "the output folder differs from expected-out/: {actual:#?}"
            ));
        }
    }
    for path in &case.present {
        if fs::symlink_metadata(sandbox.path().join(path)).is_err() {
            problems.push(format!("{path} must exist after the runs"));
        }
    }
    for path in &case.absent {
        if fs::symlink_metadata(sandbox.path().join(path)).is_ok() {
            problems.push(format!("{path} must not exist after the runs"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// The capabilities that let root write into a folder without write permission.
const WRITE_OVERRIDES: &str = "dac_override,-dac_read_search";

/// Folders made read-only for a case's runs, writable again when dropped.
struct ReadOnly(Vec<PathBuf>);

impl ReadOnly {
    /// Removes the write permission of `folders` (relative to the sandbox), and says whether
    /// the runs must drop the capabilities that override it (this process runs as root, and
    /// without them a probe cannot write); `None` (with the permissions restored) when the
    /// folders stay writable even so.
    fn make(sandbox: &Sandbox, folders: &[String]) -> Option<(ReadOnly, bool)> {
        use std::os::unix::fs::PermissionsExt;
        let guard = ReadOnly(folders.iter().map(|f| sandbox.path().join(f)).collect());
        for folder in &guard.0 {
            let mode = fs::metadata(folder).unwrap().permissions().mode();
            fs::set_permissions(folder, fs::Permissions::from_mode(mode & !0o222)).unwrap();
        }
        let mut without_override = false;
        for folder in &guard.0 {
            let probe = folder.join(".kalypso-write-probe");
            if fs::write(&probe, "").is_ok() {
                let _ = fs::remove_file(&probe);
                let still_writes = Command::new("setpriv")
                    .arg(format!("--bounding-set=-{WRITE_OVERRIDES}"))
                    .args(["--", "sh", "-c", "echo > \"$0\""])
                    .arg(&probe)
                    .stderr(std::process::Stdio::null())
                    .status()
                    .map_or(true, |s| s.success());
                let _ = fs::remove_file(&probe);
                if still_writes {
                    return None;
                }
                without_override = true;
            }
        }
        Some((guard, without_override))
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        for folder in &self.0 {
            if let Ok(meta) = fs::metadata(folder) {
                let _ = fs::set_permissions(
                    folder,
                    fs::Permissions::from_mode(meta.permissions().mode() | 0o200),
                );
            }
        }
    }
}

/// Holds the lock of the output folder `out` as another kalypso would: its lock file beside
/// it, locked, holding a process id (4242, so that the message is the same in every run).
fn hold_lock(out: &Path) -> fs::File {
    let name = out.file_name().unwrap().to_string_lossy();
    let path = out.with_file_name(format!(".{name}.kalypso-lock"));
    let file = fs::File::create(path).unwrap();
    fs::write(out.with_file_name(format!(".{name}.kalypso-lock")), "4242").unwrap();
    file.lock().unwrap();
    file
}

/// Compares a stream with its expected file; a stream that printed nothing has no file.
fn check_output(path: &Path, text: &str) -> Result<(), String> {
    if text.is_empty() {
        if cases::blessing() {
            let _ = fs::remove_file(path);
        } else if path.exists() {
            return Err(format!("nothing was printed, but {} exists", path.display()));
        }
        return Ok(());
    }
    cases::check_expected(path, text)
}

#[test]
fn bad_input_cases() {
    cases::run_all("bad-input", &cases::case_dirs(&cases_dir()), |_, dir| {
        check_case(dir)
    });
}

/// Runs `args` in `sandbox`; asserts the command fails with a message holding every one of
/// `parts`, and that nothing under the temporary folder changed.
#[track_caller]
fn fails_with(sandbox: &Sandbox, args: &[&str], parts: &[&str]) -> Run {
    let before = snapshot(sandbox.path());
    let outcome = sandbox.kalypso(args, &std::collections::BTreeMap::new());
    assert_eq!(outcome.code, 1, "{outcome:#?}");
    outcome.reports(parts);
    assert_eq!(snapshot(sandbox.path()), before, "nothing changed: {outcome:#?}");
    outcome
}

/// Links cannot be data (git would store them, but the harness copies files only), so this
/// case stays code, on a copy of the valid case's control plane.
#[test]
fn symbolic_links_in_the_output_tree_are_not_written_through() {
    let sandbox = Sandbox::new(&cases_dir().join("a-valid-control-plane-changes-the-seeded-tree/input"));
    let out = sandbox.out();
    let outside = sandbox.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("reconciler.yaml"), "precious").unwrap();
    // The target folder the render writes into is a link out of the output folder.
    fs::remove_dir_all(out.join("large/app-web")).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("large/app-web")).unwrap();
    let render = ["render", "[DIR]", "--env", "dev", "--out", "[OUT]"];
    fails_with(
        &sandbox,
        &render,
        &["refusing to write through symbolic link", "large/app-web"],
    );
    assert_eq!(
        fs::read_to_string(outside.join("reconciler.yaml")).unwrap(),
        "precious"
    );

    // A linked file is not written through either.
    fs::remove_file(out.join("large/app-web")).unwrap();
    fs::create_dir(out.join("large/app-web")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("reconciler.yaml"),
        out.join("large/app-web/reconciler.yaml"),
    )
    .unwrap();
    fails_with(
        &sandbox,
        &render,
        &[
            "refusing to write through symbolic link",
            "large/app-web/reconciler.yaml",
        ],
    );
    assert_eq!(
        fs::read_to_string(outside.join("reconciler.yaml")).unwrap(),
        "precious"
    );
}
