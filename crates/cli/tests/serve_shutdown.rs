//! `kalypso serve` as an operator runs it: a child process (this test binary re-executed into
//! `cli_child`, see `support`) with JSON logs, stopped with SIGTERM while an environment
//! backs off after a failure. It must exit 0 at once, not when the backoff ends; its JSON
//! log and `/status` must say why the environment failed and when it is tried next.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Not a test: the entry point of the child process that runs the CLI (see `support`).
#[test]
#[ignore = "entry point of the child process that runs the kalypso CLI"]
fn cli_child() {
    support::run_cli_child();
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// A child process killed if the test fails before it exits, so that no daemon outlives it.
struct Reaped(std::process::Child);

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends SIGTERM to `child`.
/// Sends SIGTERM to `child` and waits for it to exit: its status and how long it took. The
/// 10 s limit is a hang guard only; the time is printed by the tests, not asserted.
fn terminate_and_wait(child: &mut std::process::Child) -> (std::process::ExitStatus, Duration) {
    let asked = Instant::now();
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if asked.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("serve did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (status, asked.elapsed())
}

#[test]
fn sigterm_during_a_backoff_stops_serve_at_once_with_exit_code_0() {
    let rt = kalypso_testkit::runtime();
    let dir = tempfile::tempdir().unwrap();
    // The control plane's server answers every request with 503: a network error, which
    // the environment retries after an hour.
    let server = kalypso_testkit::GitHttpServer::start(rt.handle(), dir.path(), None);
    server.fail_next(u32::MAX);
    let config = dir.path().join("kalypso.yaml");
    std::fs::write(
        &config,
        format!(
            "controlPlane: {}\nenvironments: [dev]\nlisten: 127.0.0.1:0\ncacheDir: {}\nauth:\n  tokenEnv: KALYPSO_TEST_NO_TOKEN\n\
             webhook:\n  secretEnv: KALYPSO_TEST_NO_SECRET\nretry:\n  attempts: 5\n  initialBackoff: 1h\n  maxBackoff: 2h\n",
            server.url("control-plane.git"),
            dir.path().join("cache").display()
        ),
    )
    .unwrap();
    let mut child = start_serve(&config);

    // Every log line, parsed, as it comes.
    let (lines, logged) = mpsc::channel::<serde_json::Value>();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let value: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
            let _ = lines.send(value.clone());
            all.push(value);
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let next = || {
        logged
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the expected log line (serve hangs or died)")
    };
    let addr: SocketAddr = loop {
        let line = next();
        if line["fields"]["message"] == "kalypso serve started" {
            break line["fields"]["address"].as_str().unwrap().parse().unwrap();
        }
    };
    // The environment failed once and backs off: the log says why and when it is tried next.
    let backoff = loop {
        let line = next();
        if line["fields"]["consecutive_failures"] == 1 {
            break line;
        }
    };
    assert_eq!(backoff["fields"]["environment"], "dev", "{backoff}");
    assert_eq!(backoff["fields"]["retry_in_ms"], 3_600_000, "{backoff}");
    assert!(backoff["fields"]["next_poll"].as_u64().is_some(), "{backoff}");
    let status: serde_json::Value = serde_json::from_str(&get(addr, "/status")).unwrap();
    let dev = &status["environments"]["dev"];
    assert_eq!(dev["result"], "error", "{status}");
    assert_eq!(dev["retryIn"], "1h", "{status}");
    assert!(
        dev["lastFailure"]["detail"]
            .as_str()
            .unwrap()
            .contains("control-plane.git"),
        "{status}"
    );

    let (status, took) = terminate_and_wait(&mut child);
    println!(
        "kalypso serve exited {:?} {:.0} ms after SIGTERM, during a 1 h backoff",
        status.code(),
        took.as_secs_f64() * 1000.0
    );
    assert_eq!(status.code(), Some(0));
    let log = reader.join().unwrap();
    assert!(
        log.iter()
            .any(|l| l["fields"]["message"] == "shutdown requested: stopping every environment"),
        "{log:?}"
    );
}

/// SIGTERM while an environment's fetch hangs (the server accepts the connection and never
/// answers): the step is abandoned after the grace period and serve exits 0.
#[test]
fn sigterm_during_a_hanging_fetch_abandons_it_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (accepted, connection) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            let _ = accepted.send(());
        }
    });
    let config = dir.path().join("kalypso.yaml");
    std::fs::write(
        &config,
        format!(
            "controlPlane: http://127.0.0.1:{port}/control-plane.git\nenvironments: [dev]\nlisten: 127.0.0.1:0\ncacheDir: {}\n\
             auth:\n  tokenEnv: KALYPSO_TEST_NO_TOKEN\nwebhook:\n  secretEnv: KALYPSO_TEST_NO_SECRET\n",
            dir.path().join("cache").display()
        ),
    )
    .unwrap();
    let mut child = start_serve(&config);
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(&l.unwrap()).unwrap())
            .collect::<Vec<_>>()
    });
    connection
        .recv_timeout(Duration::from_secs(60))
        .expect("serve fetches the control plane");

    let (status, took) = terminate_and_wait(&mut child);
    println!(
        "kalypso serve exited {:?} {:.0} ms after SIGTERM, during a fetch that never ends",
        status.code(),
        took.as_secs_f64() * 1000.0
    );
    assert_eq!(status.code(), Some(0));
    let log = reader.join().unwrap();
    let abandoned = log
        .iter()
        .find(|l| l["fields"]["step"] == "reading the control plane")
        .unwrap_or_else(|| panic!("the abandoned step is logged: {log:?}"));
    assert_eq!(abandoned["fields"]["environment"], "dev", "{abandoned}");
    assert_eq!(abandoned["level"], "WARN", "{abandoned}");
}

/// `kalypso serve --config CONFIG --log-format json` as a child process, its standard error
/// piped (the JSON log).
fn start_serve(config: &std::path::Path) -> Reaped {
    let args: Vec<String> = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--log-format",
        "json",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut command = Command::new(std::env::current_exe().unwrap());
    support::as_cli_child(&mut command, &args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Reaped(command.spawn().unwrap())
}
