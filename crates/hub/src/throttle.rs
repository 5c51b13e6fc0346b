//! Per-cluster rate limiting that never drops a change of state: one misbehaving cluster (a
//! Flux controller in a crash loop, a script posting in a tight loop) must not take the
//! writers' time from the rest of the fleet, yet the hub must never miss that a cluster moved
//! to another state or commit.
//!
//! Each cluster has a token bucket (`burst` reports at once, `rate` a second sustained). A
//! report that finds the bucket empty is still let through when it changes what the hub knows
//! of its object (another state or commit than the last report stored); only a repeat is
//! refused (429 with `Retry-After`), and a repeat stores nothing the hub does not already
//! hold. A cluster whose bucket is full again is forgotten, so memory follows the clusters
//! reporting right now, not the fleet. Pure: the caller passes the clock.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::Report;

/// How many reports a cluster may send.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Reports a second, sustained (0: no limit).
    pub per_second: f64,
    /// Reports at once.
    pub burst: u32,
}

impl Default for Rate {
    fn default() -> Rate {
        Rate {
            per_second: 10.0,
            burst: 100,
        }
    }
}

/// What to do with a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Store it.
    Pass,
    /// Refuse it: a repeat from a cluster over its rate; ask again after this many seconds.
    Refuse {
        /// Whole seconds until a token is free.
        retry_after: u64,
    },
}

struct Bucket {
    tokens: f64,
    /// Unix milliseconds of the last refill.
    at: i64,
    /// Per object: the state and commit of the last report stored.
    last: HashMap<String, (&'static str, String)>,
}

/// The buckets of the clusters reporting now.
pub struct Throttle {
    rate: Rate,
    buckets: Mutex<Buckets>,
}

#[derive(Default)]
struct Buckets {
    by_cluster: HashMap<(String, String), Bucket>,
    /// When full buckets were last forgotten.
    swept_at: i64,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

/// How often full buckets are forgotten, in milliseconds.
const SWEEP_EVERY_MS: i64 = 10_000;

impl Throttle {
    /// Buckets at `rate`.
    pub fn new(rate: Rate) -> Throttle {
        Throttle {
            rate,
            buckets: Mutex::default(),
        }
    }

    /// Whether `report`, arriving at `now` (Unix milliseconds), is stored or refused.
    pub fn admit(&self, report: &Report, now: i64) -> Verdict {
        if self.rate.per_second <= 0.0 {
            return Verdict::Pass;
        }
        let burst = f64::from(self.rate.burst.max(1));
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.sweep(&mut buckets, now, burst);
        let bucket = buckets
            .by_cluster
            .entry((report.environment.clone(), report.cluster.clone()))
            .or_insert_with(|| Bucket {
                tokens: burst,
                at: now,
                last: HashMap::new(),
            });
        refill(bucket, self.rate.per_second, burst, now);
        let state = report.state.as_str();
        let changes = bucket
            .last
            .get(&report.object)
            .is_none_or(|(s, c)| *s != state || *c != report.commit);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
        } else if !changes {
            let wait = (1.0 - bucket.tokens) / self.rate.per_second;
            return Verdict::Refuse {
                retry_after: wait.ceil().max(1.0) as u64,
            };
        }
        Verdict::Pass
    }

    /// Notes that `report` is stored: a repeat of it is no change. (Only once stored: a
    /// change the database did not take must pass again when it is sent again.)
    pub fn stored(&self, report: &Report) {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bucket) = buckets
            .by_cluster
            .get_mut(&(report.environment.clone(), report.cluster.clone()))
        {
            bucket.last.insert(
                report.object.clone(),
                (report.state.as_str(), report.commit.clone()),
            );
        }
    }

    /// Clusters with a bucket now (those that reported within the last `burst / rate` seconds).
    pub fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_cluster
            .len()
    }

    /// Forgets the buckets that are full again: such a cluster is treated as new.
    fn sweep(&self, buckets: &mut Buckets, now: i64, burst: f64) {
        if now - buckets.swept_at < SWEEP_EVERY_MS {
            return;
        }
        buckets.swept_at = now;
        let rate = self.rate.per_second;
        buckets.by_cluster.retain(|_, bucket| {
            refill(bucket, rate, burst, now);
            bucket.tokens < burst
        });
    }
}

fn refill(bucket: &mut Bucket, per_second: f64, burst: f64, now: i64) {
    let elapsed = (now - bucket.at).max(0) as f64 / 1000.0;
    bucket.tokens = (bucket.tokens + elapsed * per_second).min(burst);
    bucket.at = now.max(bucket.at);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_hub_api::ClusterState;

    fn report(cluster: &str, object: &str, state: ClusterState, commit: &str) -> Report {
        Report {
            environment: "dev".into(),
            cluster: cluster.into(),
            cluster_type: "large".into(),
            object: object.into(),
            drives: true,
            state,
            revision: String::new(),
            commit: commit.into(),
            message: String::new(),
            reason: String::new(),
            event_time: 0,
        }
    }

    #[test]
    fn a_flood_of_repeats_is_refused_after_the_burst_but_every_change_passes() {
        let throttle = Throttle::new(Rate {
            per_second: 1.0,
            burst: 3,
        });
        let same = report(
            "c1",
            "Kustomization/flux-system/apps",
            ClusterState::Compliant,
            "a",
        );
        let admit = |r: &Report, now: i64| {
            let verdict = throttle.admit(r, now);
            if verdict == Verdict::Pass {
                throttle.stored(r);
            }
            verdict
        };
        let verdicts: Vec<Verdict> = (0..10).map(|_| admit(&same, 1_000)).collect();
        assert_eq!(verdicts[..3], [Verdict::Pass; 3]);
        assert!(
            verdicts[3..]
                .iter()
                .all(|v| *v == Verdict::Refuse { retry_after: 1 })
        );
        // Over the rate, a change of state, of commit, or a new object still passes, once.
        let failed = report("c1", "Kustomization/flux-system/apps", ClusterState::Failed, "a");
        assert_eq!(admit(&failed, 1_000), Verdict::Pass);
        assert_eq!(admit(&failed, 1_000), Verdict::Refuse { retry_after: 1 });
        let newer = report("c1", "Kustomization/flux-system/apps", ClusterState::Failed, "b");
        assert_eq!(admit(&newer, 1_000), Verdict::Pass);
        let other = report("c1", "HelmRelease/apps/web", ClusterState::Failed, "b");
        assert_eq!(admit(&other, 1_000), Verdict::Pass);
        // A change the database did not take passes again.
        let lost = report(
            "c1",
            "Kustomization/flux-system/apps",
            ClusterState::Reconciling,
            "c",
        );
        assert_eq!(throttle.admit(&lost, 1_000), Verdict::Pass);
        assert_eq!(throttle.admit(&lost, 1_000), Verdict::Pass);
        // Another cluster has its own bucket.
        let c2 = report(
            "c2",
            "Kustomization/flux-system/apps",
            ClusterState::Compliant,
            "a",
        );
        assert_eq!(admit(&c2, 1_000), Verdict::Pass);
        // A second later, one token more.
        assert_eq!(admit(&newer, 2_000), Verdict::Pass);
        assert_eq!(admit(&newer, 2_000), Verdict::Refuse { retry_after: 1 });
    }

    #[test]
    fn full_buckets_are_forgotten_and_no_rate_means_no_limit() {
        let throttle = Throttle::new(Rate {
            per_second: 10.0,
            burst: 5,
        });
        for i in 0..100 {
            let r = report(&format!("c{i}"), "o", ClusterState::Compliant, "a");
            assert_eq!(throttle.admit(&r, 20_000), Verdict::Pass);
        }
        assert_eq!(throttle.tracked(), 100);
        // Half a second later every bucket is full again; the next sweep forgets them.
        let r = report("late", "o", ClusterState::Compliant, "a");
        throttle.admit(&r, 40_000);
        assert_eq!(throttle.tracked(), 1);

        let open = Throttle::new(Rate {
            per_second: 0.0,
            burst: 1,
        });
        let r = report("c", "o", ClusterState::Compliant, "a");
        assert!((0..1000).all(|_| open.admit(&r, 0) == Verdict::Pass));
        assert_eq!(open.tracked(), 0);
    }
}
