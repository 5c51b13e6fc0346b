//! A real OpenID Provider for the hub's sign-in tests: npm's `oidc-provider` (pinned by
//! `oidc/package-lock.json`, installed by `.ci/setup` with `npm ci`) run with Node.js on
//! 127.0.0.1 by `oidc/provider.mjs`. Its login form takes any login and password; the logins
//! `ana` (group `platform-admins`), `lea` (`platform-leads`) and `vic` (`developers`) have an
//! e-mail `<login>@contoso.com`. Without Node.js or the installed package the tests are
//! skipped, said once (see [`crate::skipped`]), unless [`crate::services_required`].

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The folder of the provider's script and its `node_modules`.
pub fn provider_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("oidc")
}

/// The client secret of the hub's client at the provider.
pub const CLIENT_SECRET: &str = "kalypso-test-client-secret";
/// The hub's client id at the provider.
pub const CLIENT_ID: &str = "kalypso-hub";

/// A running provider, stopped when dropped.
#[derive(Debug)]
pub struct OidcProvider {
    /// Its issuer, `http://127.0.0.1:PORT`.
    pub issuer: String,
    child: Child,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OidcProvider {
    /// Starts the provider with one client, [`CLIENT_ID`], that may redirect to
    /// `redirect_uri`; `None` when Node.js or the package is missing (and not required).
    pub fn start(redirect_uri: &str, who: &str) -> Option<OidcProvider> {
        let dir = provider_dir();
        let installed = dir.join("node_modules/oidc-provider/package.json").is_file();
        let node = Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !(installed && node) {
            let install = format!(
                "install Node.js and run `npm ci` in {} (.ci/setup does both)",
                dir.display()
            );
            assert!(
                !crate::services_required(),
                "{who} need the OpenID Provider: {install}"
            );
            crate::skipped(&format!("{who} (no OpenID Provider: {install} to run them)"));
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut child = Command::new("node")
            .arg(dir.join("provider.mjs"))
            .arg(port.to_string())
            .arg(redirect_uri)
            .arg(CLIENT_SECRET)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(issuer) = line.strip_prefix("listening ") {
                    let _ = tx.send(issuer.to_owned());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let issuer = loop {
            if let Ok(issuer) = rx.recv_timeout(Duration::from_millis(100)) {
                break issuer;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the OpenID Provider exited: {status}");
            }
            assert!(Instant::now() < deadline, "the OpenID Provider did not start");
        };
        Some(OidcProvider { issuer, child })
    }
}
