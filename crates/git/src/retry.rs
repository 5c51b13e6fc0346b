//! Retrying transient failures with exponential backoff.
//!
//! Networks fail: a fetch times out, a server answers 503, GitHub rate-limits. Every
//! network operation of this crate is wrapped in [`RetryPolicy::run`], which retries the
//! failures its caller calls transient, waiting `initial`, `2 × initial`, … up to `max`
//! between attempts. Permanent failures (authentication, a missing branch) are returned at
//! once. Operations are written to be safe to repeat: each attempt re-reads the state it
//! acts on.

use std::time::Duration;

use serde::Deserialize;

/// How often and how patiently to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub attempts: u32,
    /// Wait before the second attempt.
    #[serde(with = "kalypso_core::duration")]
    pub initial_backoff: Duration,
    /// Longest wait between attempts.
    #[serde(with = "kalypso_core::duration")]
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No waiting and `attempts` attempts (tests).
    pub fn immediate(attempts: u32) -> RetryPolicy {
        RetryPolicy {
            attempts,
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
        }
    }

    /// The wait after failed attempt number `attempt` (1-based).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }

    /// Runs `op` until it succeeds, fails permanently, or the attempts are used up. Each
    /// retry is logged (with `what` naming the operation) and counted in `retries`.
    pub fn run<T, E: std::fmt::Display>(
        &self,
        what: &dyn Fn() -> String,
        retries: &mut u32,
        is_transient: impl Fn(&E) -> bool,
        mut op: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let mut attempt = 1;
        loop {
            match op() {
                Ok(v) => return Ok(v),
                Err(e) if attempt < self.attempts.max(1) && is_transient(&e) => {
                    let wait = self.backoff(attempt);
                    let operation = what();
                    let error = crate::redact::redact(&e.to_string());
                    tracing::warn!(
                        operation = %operation,
                        attempt,
                        wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                        error = %error,
                        "{}",
                        retry_message(&operation, &error, wait, attempt + 1, self.attempts)
                    );
                    *retries += 1;
                    std::thread::sleep(wait);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What a person reads when an attempt failed and another follows: `fetch X failed: why;
/// retrying in 2 s (attempt 2/5)`.
fn retry_message(operation: &str, error: &str, wait: Duration, next: u32, attempts: u32) -> String {
    format!(
        "{operation} failed: {error}; retrying in {} (attempt {next}/{attempts})",
        human(wait)
    )
}

/// `2 s`, `1.5 s`, `250 ms`.
fn human(wait: Duration) -> String {
    let ms = wait.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", wait.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_message_says_when_and_which_attempt_follows() {
        let p = RetryPolicy::default();
        assert_eq!(
            retry_message("fetch file:///x", "connection reset", p.backoff(2), 3, p.attempts),
            "fetch file:///x failed: connection reset; retrying in 2 s (attempt 3/5)"
        );
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let p = RetryPolicy {
            attempts: 10,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        let waits: Vec<u128> = (1..=5).map(|a| p.backoff(a).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        assert_eq!(p.backoff(60), Duration::from_millis(500));
    }

    #[test]
    fn retries_transient_failures_only() {
        let p = RetryPolicy::immediate(4);
        let mut retries = 0;
        let mut calls = 0;
        let r: Result<u32, String> = p.run(
            &|| "op".into(),
            &mut retries,
            |e: &String| e == "flaky",
            || {
                calls += 1;
                if calls < 3 { Err("flaky".into()) } else { Ok(calls) }
            },
        );
        assert_eq!((r, retries), (Ok(3), 2));

        let mut calls = 0;
        let r: Result<u32, String> = p.run(
            &|| "op".into(),
            &mut retries,
            |e: &String| e == "flaky",
            || {
                calls += 1;
                Err("permanent".into())
            },
        );
        assert_eq!((r, calls), (Err("permanent".into()), 1));

        let mut calls = 0;
        let r: Result<u32, String> = p.run(
            &|| "op".into(),
            &mut retries,
            |_: &String| true,
            || {
                calls += 1;
                Err("flaky".into())
            },
        );
        assert_eq!((r, calls), (Err("flaky".into()), 4));
    }
}
