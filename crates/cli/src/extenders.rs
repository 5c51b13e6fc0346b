//! The edge of placement: the HTTP client of the SchedulerExtender protocol, and the current
//! assignment read from a GitOps folder (for the `Steady` prioritizer).
//!
//! The core ([`kalypso_core::placement`]) decides; it hands a render's extender calls over as
//! one deduplicated batch. This client runs them on a bounded pool of threads with blocking
//! HTTP (ureq, already the CLI's client), each with its extender's timeout, and refuses
//! responses larger than [`MAX_RESPONSE_BYTES`] without reading them whole.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kalypso_core::placement::{CurrentAssignment, ExtenderCall, ExtenderClient, MAX_RESPONSE_BYTES};

/// A response body, or why there is none.
type Reply = Result<Vec<u8>, String>;

/// At most this many calls in flight.
const POOL: usize = 16;

/// Calls extenders over HTTP.
#[derive(Debug)]
pub(crate) struct HttpExtenders {
    agent: ureq::Agent,
}

impl HttpExtenders {
    pub(crate) fn new() -> HttpExtenders {
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
                e => format!("cannot reach {}: {}", redact(&call.url), e),
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

/// A URL without its user information (`https://user:secret@host` → `https://host`).
fn redact(url: &str) -> String {
    kalypso_git::redact(url)
}

/// The current assignment of a GitOps folder: `<cluster type>/<deployment target>/` folders
/// (dot-folders are not cluster types). A missing folder has none.
pub(crate) fn current_from_dir(out: &Path) -> CurrentAssignment {
    let mut current = CurrentAssignment::new();
    let Ok(cluster_types) = std::fs::read_dir(out) else {
        return current;
    };
    for ct in cluster_types.flatten() {
        let name = ct.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !ct.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(targets) = std::fs::read_dir(ct.path()) else {
            continue;
        };
        for dt in targets.flatten() {
            if dt.file_type().is_ok_and(|t| t.is_dir()) {
                current
                    .entry(dt.file_name().to_string_lossy().into_owned())
                    .or_default()
                    .insert(name.clone());
            }
        }
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_assignment_is_the_folder_layout() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for path in [
            "large/app-dev",
            "large/db-dev",
            "small/app-dev",
            ".github/workflows",
        ] {
            std::fs::create_dir_all(dir.path().join(path)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(dir.path().join("large/README.md"), "x").unwrap_or_else(|e| panic!("{e}"));
        let current = current_from_dir(dir.path());
        let shown: Vec<(String, Vec<String>)> = current
            .into_iter()
            .map(|(dt, cts)| (dt, cts.into_iter().collect()))
            .collect();
        assert_eq!(
            shown,
            [
                ("app-dev".to_owned(), vec!["large".to_owned(), "small".to_owned()]),
                ("db-dev".to_owned(), vec!["large".to_owned()])
            ]
        );
        assert!(current_from_dir(&dir.path().join("missing")).is_empty());
    }
}
