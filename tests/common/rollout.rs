//! What the progressive-rollout tests (`tests/rollout.rs`, `tests/rollout_view.rs`) share: the
//! bundled example as local git repositories (examples/local-repos.sh) with a RolloutPolicy on
//! `dev`, `kalypso hub` reading that control plane as a child process, the simulated fleet of
//! the example's cluster types, and `kalypso sync --hub`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kalypso_testkit::fleet::Fleet;

/// The binary under test.
pub const KALYPSO: &str = env!("CARGO_BIN_EXE_kalypso");

/// `git -C dir args...` as the platform team, which must succeed; its standard output.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Platform")
        .env("GIT_AUTHOR_EMAIL", "platform@example.com")
        .env("GIT_COMMITTER_NAME", "Platform")
        .env("GIT_COMMITTER_EMAIL", "platform@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The example's repositories in a scratch folder, with the hub running on them.
pub struct Setup {
    _dir: tempfile::TempDir,
    /// The scratch folder: the repositories, `dev-clone` (a clone of the control plane's
    /// `dev`), the hub's log and cache, the sync cache.
    pub work: PathBuf,
    hub: Child,
    /// The hub's URL.
    pub url: String,
    /// The hub's API token (also in `work/api-token`), if it has one.
    token: Option<String>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.hub.kill();
        let _ = self.hub.wait();
    }
}

impl Setup {
    /// The example's repositories with `policy` (a RolloutPolicy) committed on dev, and the
    /// hub on `database` (`None`: SQLite in the scratch folder), with API token `token` if
    /// given, and `hub_args` besides.
    pub fn new(policy: &str, database: Option<String>, token: Option<&str>, hub_args: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().to_owned();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new("sh")
            .arg(root.join("examples/local-repos.sh"))
            .arg(&work)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let clone = work.join("dev-clone");
        git(
            &work,
            &[
                "clone",
                "-q",
                "--branch",
                "dev",
                work.join("control-plane.git").to_str().unwrap(),
                "dev-clone",
            ],
        );
        std::fs::write(clone.join("rollout.yaml"), policy).unwrap();
        git(&clone, &["add", "-A"]);
        git(&clone, &["commit", "-q", "-m", "Rings for dev"]);
        git(&clone, &["push", "-q", "origin", "dev"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let database = database.unwrap_or_else(|| format!("sqlite://{}", work.join("hub.db").display()));
        let log = std::fs::File::create(work.join("hub.log")).unwrap();
        let mut hub = Command::new(KALYPSO);
        hub.args(["hub", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--database", &database, "--control-plane"])
            .arg(work.join("control-plane.git"))
            .args(["--refresh", "1s", "--cache-dir"])
            .arg(work.join("hub-cache"))
            .args(hub_args);
        if let Some(token) = token {
            std::fs::write(work.join("api-token"), format!("{token}\n")).unwrap();
            hub.arg("--api-token-file").arg(work.join("api-token"));
        }
        let hub = hub.stdout(log.try_clone().unwrap()).stderr(log).spawn().unwrap();
        let setup = Setup {
            _dir: dir,
            work,
            hub,
            url: format!("http://127.0.0.1:{port}"),
            token: token.map(str::to_owned),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while ureq::get(&format!("{}/readyz", setup.url)).call().is_err() {
            assert!(
                Instant::now() < deadline,
                "the hub did not start:\n{}",
                setup.hub_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        setup
    }

    /// The bare GitOps repository.
    pub fn gitops(&self) -> PathBuf {
        self.work.join("gitops.git")
    }

    /// The simulated fleet of dev: two `small` clusters (the canary), one of each other
    /// cluster type; it asks the hub with the token, when there is one.
    pub fn fleet(&self) -> Fleet {
        let fleet = Fleet::new(&self.url, &self.gitops(), "dev", "dev")
            .with_clusters("small", 2)
            .with_clusters("large", 1)
            .with_clusters("drone", 1)
            .with_clusters("command-center", 1);
        match &self.token {
            Some(token) => fleet.with_token(token),
            None => fleet,
        }
    }

    /// The hub's log so far.
    pub fn hub_log(&self) -> String {
        std::fs::read_to_string(self.work.join("hub.log")).unwrap_or_default()
    }

    /// The head of dev on the GitOps repository.
    pub fn head(&self) -> String {
        git(&self.gitops(), &["rev-parse", "dev"])
    }

    /// The command `kalypso sync --env dev --hub URL [--hub-token-file F]`.
    pub fn sync_command(&self) -> Command {
        let mut sync = Command::new(KALYPSO);
        sync.arg("sync")
            .arg(self.work.join("control-plane.git"))
            .args(["--env", "dev", "--hub", &self.url, "--cache-dir"])
            .arg(self.work.join("cache"));
        if self.token.is_some() {
            sync.arg("--hub-token-file").arg(self.work.join("api-token"));
        }
        sync
    }

    /// `kalypso sync --env dev --hub URL`.
    pub fn sync(&self) -> Output {
        self.sync_command().output().unwrap()
    }

    /// [`Setup::sync`], which must succeed; its output.
    pub fn sync_ok(&self) -> String {
        let out = self.sync();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "sync failed:\n{text}\n--- hub\n{}",
            self.hub_log()
        );
        text
    }
}
