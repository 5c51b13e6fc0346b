//! The hub's connection and request limits, over real TCP on 127.0.0.1 against
//! `kalypso_hub::serve_on` (what `kalypso hub` runs): idle and slow-header connections are
//! closed, a trickled body gets 408, an oversized body gets 413 before it is read, at most
//! `max_connections` are served at once, reports still flow within the limits, and a flood
//! from one cluster costs one stored report per change of state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use kalypso_hub::throttle::Rate;
use kalypso_hub::{HubConfig, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

const COMMIT: &str = "6f1e9c2a4b7d8e0f1a2b3c4d5e6f708192a3b4c5";

/// Long enough that nothing in a test waits for it by accident.
const NEVER: Duration = Duration::from_secs(600);

struct Hub {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn start(limits: Limits) -> Hub {
    start_with(limits, Rate::default()).await
}

async fn start_with(limits: Limits, rate: Rate) -> Hub {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", dir.path().join("hub.db").display()));
    config.limits = limits;
    config.cluster_rate = rate;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        kalypso_hub::serve_on(&config, listener, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });
    // Ready once /healthz answers.
    for _ in 0..100 {
        if let Ok(mut s) = TcpStream::connect(addr).await
            && let Ok(answer) = exchange(&mut s, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n").await
            && answer.starts_with("HTTP/1.1 200")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Hub {
        addr,
        stop: Some(stop),
        done,
        _dir: dir,
    }
}

/// Writes `request` and reads one answer (headers and a `Content-Length` body).
async fn exchange(stream: &mut TcpStream, request: &str) -> std::io::Result<String> {
    stream.write_all(request.as_bytes()).await?;
    read_one(stream).await
}

/// Reads one answer within ten seconds.
async fn read_one(stream: &mut TcpStream) -> std::io::Result<String> {
    tokio::time::timeout(Duration::from_secs(10), read_answer(stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within 10 s"))?
}

async fn read_answer(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length: ")
                        .map(str::to_owned)
                })
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if buf.len() >= end + 4 + length {
                return Ok(text);
            }
        }
    }
}

/// Whether the hub closes `stream` (EOF or reset) within `within`.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, stream.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn limits(max_connections: usize, idle: Duration, body: Duration) -> Limits {
    Limits {
        max_connections,
        idle_timeout: idle,
        body_timeout: body,
    }
}

fn compliance(cluster: &str) -> String {
    report(cluster, "compliant", COMMIT, "2026-11-26T08:00:00Z")
}

fn report(cluster: &str, state: &str, commit: &str, time: &str) -> String {
    format!(
        r#"{{"cluster":"{cluster}","clusterType":"large","environment":"dev","commit":"{commit}","state":"{state}","time":"{time}"}}"#
    )
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn idle_and_slow_header_connections_are_closed() {
    let hub = start(limits(16, Duration::from_secs(1), NEVER)).await;

    // Connected, nothing sent.
    let mut silent = TcpStream::connect(hub.addr).await.unwrap();
    // Half a request head, then nothing.
    let mut slow = TcpStream::connect(hub.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: hu")
        .await
        .unwrap();
    // One request answered, then idle on keep-alive.
    let mut idle = TcpStream::connect(hub.addr).await.unwrap();
    let first = exchange(&mut idle, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n")
        .await
        .unwrap();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");

    for (what, stream) in [
        ("silent", &mut silent),
        ("slow header", &mut slow),
        ("idle", &mut idle),
    ] {
        assert!(
            closed_within(stream, Duration::from_secs(10)).await,
            "{what} connection still open"
        );
    }

    // A connection that keeps asking stays open across more than the idle timeout.
    let mut busy = TcpStream::connect(hub.addr).await.unwrap();
    for _ in 0..6 {
        let answer = exchange(&mut busy, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n")
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    hub.stop().await;
}

#[tokio::test]
async fn a_trickled_body_gets_408_and_stores_nothing() {
    let hub = start(limits(16, NEVER, Duration::from_secs(1))).await;
    let body = compliance("trickle");
    let mut s = TcpStream::connect(hub.addr).await.unwrap();
    let request = post("/api/v1/compliance", &body);
    // Everything but the last ten bytes of the body.
    s.write_all(&request.as_bytes()[..request.len() - 10])
        .await
        .unwrap();
    let answer = read_one(&mut s).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""field":"body""#), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );

    let mut s = TcpStream::connect(hub.addr).await.unwrap();
    let list = exchange(&mut s, "GET /api/v1/clusters HTTP/1.1\r\nHost: hub\r\n\r\n")
        .await
        .unwrap();
    assert!(list.contains(r#""total":0"#), "nothing stored: {list}");
    hub.stop().await;
}

#[tokio::test]
async fn an_oversized_body_gets_413_before_it_is_sent() {
    // The body timeout is never reached: the answer comes from Content-Length alone.
    let hub = start(limits(16, NEVER, NEVER)).await;
    let mut s = TcpStream::connect(hub.addr).await.unwrap();
    s.write_all(
        b"POST /api/v1/compliance HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\n\
          Content-Length: 1073741824\r\n\r\n{",
    )
    .await
    .unwrap();
    let answer = read_one(&mut s).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("over 1024 KiB"), "{answer}");
    assert!(
        closed_within(&mut s, Duration::from_secs(10)).await,
        "the rest is never read"
    );

    // A chunked body without end: refused once it passes the limit.
    let mut s = TcpStream::connect(hub.addr).await.unwrap();
    s.write_all(
        b"POST /api/v1/events/flux HTTP/1.1\r\nHost: hub\r\nContent-Type: application/json\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
    .await
    .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 * 1024, "x".repeat(64 * 1024));
    let mut sent = 0usize;
    let answer = loop {
        if s.write_all(chunk.as_bytes()).await.is_err() {
            break read_one(&mut s).await.unwrap();
        }
        sent += 64 * 1024;
        assert!(sent <= 4 * 1024 * 1024, "4 MiB were read without an answer");
        if sent > 1024 * 1024 {
            // Past the limit: the answer is there (the hub may also have closed).
            break read_one(&mut s).await.unwrap();
        }
    };
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    hub.stop().await;
}

#[tokio::test]
async fn at_most_max_connections_are_served_and_the_next_waits_its_turn() {
    let hub = start(limits(2, NEVER, NEVER)).await;
    let mut first = TcpStream::connect(hub.addr).await.unwrap();
    let mut second = TcpStream::connect(hub.addr).await.unwrap();
    for s in [&mut first, &mut second] {
        let answer = exchange(s, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n")
            .await
            .unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // The third is accepted by the kernel but not served while two are open.
    let mut third = TcpStream::connect(hub.addr).await.unwrap();
    third
        .write_all(post("/api/v1/compliance", &compliance("third")).as_bytes())
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    assert!(
        tokio::time::timeout(Duration::from_secs(1), third.peek(&mut byte))
            .await
            .is_err(),
        "a third connection was served while two were open"
    );
    // One closes: the third is served, and its report stored.
    drop(first);
    let answer = read_one(&mut third).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let list = exchange(
        &mut second,
        "GET /api/v1/clusters/dev/third HTTP/1.1\r\nHost: hub\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(
        list.starts_with("HTTP/1.1 200") && list.contains(COMMIT),
        "{list}"
    );
    hub.stop().await;
}

#[tokio::test]
async fn shutdown_finishes_the_request_in_flight_and_closes_idle_connections() {
    let hub = start(limits(16, NEVER, Duration::from_secs(30))).await;
    let mut idle = TcpStream::connect(hub.addr).await.unwrap();
    let answer = exchange(&mut idle, "GET /healthz HTTP/1.1\r\nHost: hub\r\n\r\n")
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // A report whose body is still on its way when the hub is told to stop.
    let body = compliance("late");
    let request = post("/api/v1/compliance", &body);
    let mut late = TcpStream::connect(hub.addr).await.unwrap();
    late.write_all(&request.as_bytes()[..request.len() - 5])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let addr = hub.addr;
    let stopping = tokio::spawn(hub.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    late.write_all(&request.as_bytes()[request.len() - 5..])
        .await
        .unwrap();
    let answer = read_one(&mut late).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)).await,
        "idle connection kept"
    );
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("the hub stops once its connections are closed")
        .unwrap();
    assert!(TcpStream::connect(addr).await.is_err(), "still accepting");
}

#[tokio::test]
async fn a_flood_from_one_cluster_costs_one_row_per_change_of_state() {
    let rate = Rate {
        per_second: 0.5,
        burst: 3,
    };
    let hub = start_with(limits(16, NEVER, NEVER), rate).await;
    let mut s = TcpStream::connect(hub.addr).await.unwrap();
    const OTHER: &str = "0123456789abcdef0123456789abcdef01234567";
    // Each phase: a flood of one report that differs from the last only in its time. The
    // first of each phase changes the state or the commit and is stored, whatever the rate.
    let phases = [
        ("compliant", COMMIT),
        ("failed", COMMIT),
        ("failed", OTHER),
        ("compliant", OTHER),
    ];
    let (mut stored, mut refused) = (0, 0);
    for (phase, (state, commit)) in phases.iter().enumerate() {
        for second in 0..50 {
            let time = format!("2026-11-26T08:{phase:02}:{second:02}Z");
            let answer = exchange(
                &mut s,
                &post("/api/v1/compliance", &report("noisy", state, commit, &time)),
            )
            .await
            .unwrap();
            if answer.starts_with("HTTP/1.1 200") {
                stored += 1;
                if second == 0 {
                    assert!(answer.contains(r#""result":"stored""#), "{answer}");
                }
            } else {
                assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
                assert!(second > 0, "a change of state was refused: {answer}");
                assert!(answer.to_ascii_lowercase().contains("retry-after: "), "{answer}");
                assert!(
                    answer.contains("noisy") && answer.contains("over its report rate"),
                    "{answer}"
                );
                refused += 1;
            }
        }
    }
    // The burst (3, the first change among them) and the other three changes passed, perhaps
    // a token more if the test took over two seconds.
    assert!((6..=8).contains(&stored), "{stored} stored");
    assert_eq!(stored + refused, 200);
    // Another cluster is not held back by the noisy one.
    let quiet = exchange(&mut s, &post("/api/v1/compliance", &compliance("quiet")))
        .await
        .unwrap();
    assert!(quiet.starts_with("HTTP/1.1 200"), "{quiet}");
    // One history row per change of state (repeats of a state add none).
    let detail = exchange(
        &mut s,
        "GET /api/v1/clusters/dev/noisy HTTP/1.1\r\nHost: hub\r\n\r\n",
    )
    .await
    .unwrap();
    let body: serde_json::Value =
        serde_json::from_str(&detail[detail.find("\r\n\r\n").unwrap() + 4..]).unwrap();
    assert_eq!(body["history"]["total"], 4, "{body}");
    assert_eq!(body["objects"][0]["state"], "compliant", "{body}");
    assert_eq!(body["objects"][0]["commit"], OTHER, "{body}");
    hub.stop().await;
}

impl Hub {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.done).await.unwrap();
    }
}
