//! Headless Chromium driven through chromedriver (WebDriver, with fantoccini), for the
//! dashboard's browser tests: the dashboard crate's over its in-memory source, the hub's over
//! its database. Debian's `chromium` and `chromium-driver` are used (or the binaries that
//! `KALYPSO_CHROMIUM` and `KALYPSO_CHROMEDRIVER` name); nothing downloads a browser. Without
//! them the tests are skipped, and the test run says so in one line (see [`crate::skipped`]), so that
//! `cargo test --workspace` passes on a machine with only the Rust toolchain; CI sets
//! `KALYPSO_TEST_REQUIRE_SERVICES=1`, which makes a missing browser a failure.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

/// Finds a binary: the environment variable, else the Debian path, else `PATH`.
fn binary(variable: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    for name in names {
        let debian = Path::new("/usr/bin").join(name);
        if debian.is_file() {
            return Some(debian);
        }
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let candidate = dir.join(name);
                if candidate.is_file() {
                    return Some(candidate);
                }
            }
        }
    }
    None
}

/// Where screenshots go: `<target>/dashboard-screenshots` (a CI artifact).
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            // <target>/<profile>/deps/<test>-<hash>
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        })
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let dir = target.join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot folder");
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A chromedriver process, ended when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A headless Chromium session looking at one site.
pub struct Browser {
    /// The WebDriver session, for what the helpers below do not cover.
    pub client: Client,
    base: String,
    _driver: Driver,
    _profile: tempfile::TempDir,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Browser {
    /// A session looking at `base` (`http://127.0.0.1:PORT`); `None` when the browser is
    /// missing (said once, see [`crate::skipped`]), unless [`crate::services_required`]
    /// makes that a failure. `who` names the tests in the message that says what to install.
    pub async fn start(base: &str, who: &str) -> Option<Browser> {
        let chromium = binary("KALYPSO_CHROMIUM", &["chromium", "chromium-browser"]);
        let chromedriver = binary("KALYPSO_CHROMEDRIVER", &["chromedriver"]);
        let (Some(chromium), Some(chromedriver)) = (chromium, chromedriver) else {
            let install = "install Debian's chromium and chromium-driver (apt-get install chromium \
                           chromium-driver), or point KALYPSO_CHROMIUM and KALYPSO_CHROMEDRIVER at the binaries";
            assert!(
                !crate::services_required(),
                "{who} need Chromium and chromedriver: {install}"
            );
            crate::skipped(&format!(
                "{who} (no Chromium or chromedriver: {install} to run them)"
            ));
            return None;
        };
        let port = free_port();
        let driver = Driver(
            Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display())),
        );
        let driver_addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(driver_addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().expect("profile folder");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--hide-scrollbars",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://{driver_addr}"))
            .await
            .expect("a chromedriver session");
        Some(Browser {
            client,
            base: base.to_owned(),
            _driver: driver,
            _profile: profile,
        })
    }

    /// Opens `path` of the site.
    pub async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .expect("navigation");
    }

    /// Runs `script` in the page and returns what it returns.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.expect("script")
    }

    /// The text of the first element `css` selects. A page that updates itself (the dashboard's
    /// live pages) may replace the element between finding it and reading it: it is then found
    /// again.
    pub async fn text(&self, css: &str) -> String {
        for _ in 0..50 {
            let element = self
                .client
                .find(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("no {css}: {e}"));
            match element.text().await {
                Ok(text) => return text,
                Err(e) if e.is_stale_element_reference() => continue,
                Err(e) => panic!("the text of {css}: {e}"),
            }
        }
        panic!("{css}: replaced by the page each time it was read")
    }

    /// The visible text of every element `css` selects, in page order.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let script = format!(
            "return Array.from(document.querySelectorAll({css:?})).map(function (e) {{ return e.innerText; }});"
        );
        match self.js(&script).await {
            Value::Array(items) => items
                .into_iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect(),
            other => panic!("texts of {css}: {other}"),
        }
    }

    /// The page's title.
    pub async fn title(&self) -> String {
        self.client.title().await.expect("title")
    }

    /// The `data-state` of the fleet-map cell of environment `env` × cluster type `ct`.
    pub async fn cell_state(&self, env: &str, ct: &str) -> Option<String> {
        let script = format!(
            "var a = document.querySelector('a[href=\"/environments/{env}/cluster-types/{ct}\"]');\
             return a ? a.closest('td').dataset.state : null;"
        );
        self.js(&script).await.as_str().map(str::to_owned)
    }

    /// Saves a screenshot as `<target>/dashboard-screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("write png");
    }

    /// Ends the session.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}
