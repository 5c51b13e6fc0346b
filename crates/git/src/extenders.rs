//! The HTTP client of the SchedulerExtender protocol: the edge of placement for every front
//! end (`render`, `plan`, `explain`, `sync`, `serve`).
//!
//! The core ([`kalypso_core::placement`]) decides; it hands a run's extender calls over as
//! one deduplicated batch. This client runs them on a bounded pool of threads with blocking
//! HTTP (ureq), each with its extender's timeout, and refuses responses larger than
//! [`MAX_RESPONSE_BYTES`] without reading them whole. A URL's user information never
//! appears in an error.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kalypso_core::placement::{ExtenderCall, ExtenderClient, MAX_RESPONSE_BYTES};

use crate::redact;

/// A response body, or why there is none.
type Reply = Result<Vec<u8>, String>;

/// At most this many calls in flight.
const POOL: usize = 16;

/// Calls extenders over HTTP.
#[derive(Debug)]
pub struct HttpExtenders {
    agent: ureq::Agent,
}

impl HttpExtenders {
    /// A client with a pool of idle connections per extender host.
    pub fn new() -> HttpExtenders {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_idle_connections_per_host(POOL)
            .build()
            .new_agent();
        HttpExtenders { agent }
    }

    fn one(&self, call: &ExtenderCall) -> Reply {
        let mut response = self
            .agent
            .post(&call.url)
            .config()
            .timeout_global(Some(call.timeout))
            .build()
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .send(&call.body[..])
            .map_err(|e| match e {
                ureq::Error::Timeout(_) => format!("no answer within {:?}", call.timeout),
                // ureq prefixes an IO error with its variant's name ("io: ").
                ureq::Error::Io(e) => format!("cannot reach {}: {e}", redact(&call.url)),
                e => format!("cannot reach {}: {e}", redact(&call.url)),
            })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES as u64)
            .read_to_vec()
            .map_err(|e| match e {
                ureq::Error::BodyExceedsLimit(_) => {
                    format!("its response is larger than the limit of {MAX_RESPONSE_BYTES} bytes")
                }
                ureq::Error::Timeout(_) => format!("no answer within {:?}", call.timeout),
                e => format!("cannot read its response: {e}"),
            })?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(format!("it answered HTTP {status}: {}", text.trim()));
        }
        Ok(body)
    }
}

impl ExtenderClient for HttpExtenders {
    fn call(&self, calls: &[ExtenderCall]) -> Vec<Reply> {
        let results: Vec<Mutex<Option<Reply>>> = calls.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..POOL.min(calls.len()) {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(call) = calls.get(i) else { break };
                        let result = self.one(call);
                        if let Ok(mut slot) = results[i].lock() {
                            *slot = Some(result);
                        }
                    }
                });
            }
        });
        results
            .into_iter()
            .map(|slot| {
                slot.into_inner()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| Err("the call was not made".to_owned()))
            })
            .collect()
    }
}

impl Default for HttpExtenders {
    fn default() -> HttpExtenders {
        HttpExtenders::new()
    }
}
