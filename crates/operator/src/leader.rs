//! Leader election with a `coordination.k8s.io/v1` Lease, so that several replicas can run
//! and only one writes.
//!
//! The protocol is client-go's: the leader renews `spec.renewTime` every few seconds; a
//! candidate takes the Lease over when it is unheld or its renewal is older than
//! `leaseDurationSeconds`. Every write carries the Lease's `resourceVersion`, so two
//! candidates racing for it cannot both win (the loser gets a conflict). On shutdown the
//! leader releases the Lease so that a successor takes over at once. [`decide`] is the pure
//! part; [`Elector`] does the API calls.
//!
//! The timings ([`LeaseSettings::DEFAULT_LEASE_DURATION`] and the others) are chosen so that
//! a short API-server outage (a restart, an upgrade of a control-plane node: tens of
//! seconds) does not cost the leadership: the leader keeps leading while it has renewed
//! within the renew deadline (20 s), retrying every 2 s with each attempt bounded, and a
//! candidate takes over only after the lease duration (30 s) without a renewal, so the old
//! leader has stopped writing 10 s before anyone else may start. A leader that cannot renew
//! within the deadline stops its controllers and the process exits with an error
//! ([`crate::Error::LostLeadership`]), so that its Deployment restarts it as a candidate.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// How the election runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace (the operator's own).
    pub namespace: String,
    /// This instance (the pod name).
    pub identity: String,
    /// How long a Lease stays held without renewal (what candidates wait before taking it
    /// over).
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal; shorter than
    /// `lease_duration`, so that it stops before a candidate may take over.
    pub renew_deadline: Duration,
    /// How often the leader renews (and candidates retry); each attempt is also bounded by
    /// it (at least a second), so that a hung request does not stall the loop.
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// The default lease duration (the flag `--leader-elect-lease-duration`).
    pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(30);
    /// The default renew deadline (`--leader-elect-renew-deadline`).
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(20);
    /// The default retry period (`--leader-elect-retry-period`).
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// The Lease `namespace/name` for `identity`, with the default timings.
    pub fn new(
        name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> LeaseSettings {
        LeaseSettings {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Self::DEFAULT_LEASE_DURATION,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        }
    }

    /// Why the timings cannot work, if they cannot: the deadline must be shorter than the
    /// lease, and the retry period shorter than the deadline.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the leader-election renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(format!(
                "the leader-election retry period ({:?}) must be positive and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }

    /// How long one attempt to renew may take.
    fn attempt_timeout(&self) -> Duration {
        self.retry_period.max(Duration::from_secs(1))
    }
}

/// What to do with the Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// There is none: create it.
    Create,
    /// It is ours: renew it.
    Renew,
    /// It is unheld or expired: take it over.
    TakeOver,
    /// Someone else holds it.
    Wait,
}

/// Decides what `identity` does with `lease` at `now`.
pub fn decide(
    lease: Option<&Lease>,
    identity: &str,
    now: Timestamp,
    default_duration: Duration,
) -> LeaseDecision {
    let Some(lease) = lease else {
        return LeaseDecision::Create;
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder == identity {
        return LeaseDecision::Renew;
    }
    if holder.is_empty() {
        return LeaseDecision::TakeOver;
    }
    let duration = spec
        .lease_duration_seconds
        .map(|s| SignedDuration::from_secs(i64::from(s)))
        .unwrap_or_else(|| {
            SignedDuration::try_from(default_duration).unwrap_or(SignedDuration::from_secs(15))
        });
    match spec.renew_time {
        Some(MicroTime(renewed)) if renewed.saturating_add(duration).unwrap_or(renewed) > now => {
            LeaseDecision::Wait
        }
        _ => LeaseDecision::TakeOver,
    }
}

/// Runs the election against the API server.
#[derive(Clone)]
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    /// An elector for `settings` on `client`.
    pub fn new(client: Client, settings: LeaseSettings) -> Elector {
        Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.settings.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// One round: returns whether this instance holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.settings.name).await?;
        let decision = decide(
            current.as_ref(),
            &self.settings.identity,
            now,
            self.settings.lease_duration,
        );
        let result = match (decision, current) {
            (LeaseDecision::Wait, _) => return Ok(false),
            (LeaseDecision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.settings.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.settings.identity.clone()),
                        lease_duration_seconds: Some(self.duration_secs()),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..LeaseSpec::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            (decision, Some(mut lease)) => {
                let mut spec = lease.spec.take().unwrap_or_default();
                if decision == LeaseDecision::TakeOver {
                    spec.holder_identity = Some(self.settings.identity.clone());
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(self.duration_secs());
                spec.renew_time = Some(MicroTime(now));
                lease.spec = Some(spec);
                self.api
                    .replace(&self.settings.name, &PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (if held), so that another instance takes over at once.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(&self.settings.identity) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until `stop` fires: `leading` becomes true when the Lease is acquired and
    /// false when it could not be renewed within the renew deadline (the caller must then
    /// stop writing). Releases the Lease when stopped.
    pub async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            let attempt = tokio::time::timeout(self.settings.attempt_timeout(), self.try_acquire_or_renew())
                .await
                .unwrap_or_else(|_| {
                    Err(kube::Error::Service(
                        format!("no answer within {:?}", self.settings.attempt_timeout()).into(),
                    ))
                });
            match attempt {
                Ok(true) => {
                    last_renewal = tokio::time::Instant::now();
                    if !*leading.borrow() {
                        tracing::info!(identity = %self.settings.identity, lease = %self.settings.name, "became leader");
                    }
                    leading.send_replace(true);
                }
                Ok(false) => {
                    if *leading.borrow() {
                        tracing::warn!("lost the lease to another instance");
                        leading.send_replace(false);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reach the lease");
                    if *leading.borrow() && last_renewal.elapsed() > self.settings.renew_deadline {
                        tracing::warn!(
                            deadline = ?self.settings.renew_deadline,
                            "could not renew the lease within the renew deadline"
                        );
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.retry_period) => {}
                _ = stop.changed() => break,
            }
        }
        if *leading.borrow() {
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "cannot release the lease");
            }
            leading.send_replace(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::fixtures::mock_client;

    fn lease(holder: Option<&str>, renewed: i64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("kalypso-scheduler".into()),
                namespace: Some("kalypso".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).expect("time"))),
                lease_transitions: Some(2),
                ..LeaseSpec::default()
            }),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("time")
    }

    #[test]
    fn the_protocol() {
        let d = Duration::from_secs(15);
        assert_eq!(decide(None, "a", at(100), d), LeaseDecision::Create);
        assert_eq!(
            decide(Some(&lease(Some("a"), 0)), "a", at(100), d),
            LeaseDecision::Renew
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), 90)), "a", at(100), d),
            LeaseDecision::Wait
        );
        assert_eq!(
            decide(Some(&lease(Some("b"), 80)), "a", at(100), d),
            LeaseDecision::TakeOver
        );
        assert_eq!(
            decide(Some(&lease(None, 99)), "a", at(100), d),
            LeaseDecision::TakeOver
        );
    }

    fn settings() -> LeaseSettings {
        LeaseSettings::new("kalypso-scheduler", "kalypso", "pod-a")
    }

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kalypso/leases";

    #[tokio::test]
    async fn an_expired_lease_is_taken_over_with_its_resource_version() {
        let (client, mut server) = mock_client();
        let elector = Elector::new(client, settings());
        let task = tokio::spawn(async move { elector.try_acquire_or_renew().await });
        let old = serde_json::to_value(lease(Some("pod-b"), 0)).expect("json");
        server
            .expect_ok_with("GET", format!("{PATH}/kalypso-scheduler"), &old)
            .await;
        let put = server.expect_ok("PUT", format!("{PATH}/kalypso-scheduler")).await;
        assert_eq!(put["spec"]["holderIdentity"], "pod-a");
        assert_eq!(put["spec"]["leaseTransitions"], 3);
        assert_eq!(put["metadata"]["resourceVersion"], "7");
        assert!(task.await.expect("join").expect("ok"));
    }

    #[tokio::test]
    async fn a_missing_lease_is_created_and_a_lost_race_is_not_an_error() {
        let (client, mut server) = mock_client();
        let elector = Elector::new(client, settings());
        let task = tokio::spawn(async move { elector.try_acquire_or_renew().await });
        server
            .expect_error("GET", format!("{PATH}/kalypso-scheduler"), 404, "NotFound")
            .await;
        server.expect_error("POST", PATH, 409, "AlreadyExists").await;
        assert!(!task.await.expect("join").expect("ok"));
    }

    #[tokio::test]
    async fn a_held_lease_is_left_alone() {
        let (client, mut server) = mock_client();
        let elector = Elector::new(client, settings());
        let task = tokio::spawn(async move { elector.try_acquire_or_renew().await });
        let held = serde_json::to_value(lease(Some("pod-b"), Timestamp::now().as_second())).expect("json");
        server
            .expect_ok_with("GET", format!("{PATH}/kalypso-scheduler"), &held)
            .await;
        assert!(!task.await.expect("join").expect("ok"));
        server.expect_nothing_more().await;
    }

    /// Runs the elector against the mocked API server: acquires the Lease, then answers
    /// every request with 503 for `outage`, then serves again; returns whether it stayed
    /// the leader throughout.
    async fn leads_through(outage: Duration) -> bool {
        let (client, mut server) = mock_client();
        let (leading_tx, mut leading) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let elector = tokio::spawn(Elector::new(client, settings()).run(leading_tx, stop));
        server
            .expect_error("GET", format!("{PATH}/kalypso-scheduler"), 404, "NotFound")
            .await;
        let created = server.expect_ok("POST", PATH).await;
        leading.wait_for(|l| *l).await.expect("leading");
        let lost = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (mut leading, lost) = (leading.clone(), lost.clone());
            tokio::spawn(async move {
                while leading.changed().await.is_ok() {
                    if !*leading.borrow() {
                        lost.store(true, Ordering::SeqCst);
                    }
                }
            })
        };
        let start = tokio::time::Instant::now();
        while start.elapsed() < outage {
            server
                .expect_error(
                    "GET",
                    format!("{PATH}/kalypso-scheduler"),
                    503,
                    "ServiceUnavailable",
                )
                .await;
        }
        // Back: the Lease is still ours (no one could take it over within its duration).
        let mut held = created.clone();
        held["metadata"]["resourceVersion"] = "8".into();
        for _ in 0..2 {
            if lost.load(Ordering::SeqCst) {
                break;
            }
            server
                .expect_ok_with("GET", format!("{PATH}/kalypso-scheduler"), &held)
                .await;
            server.expect_ok("PUT", format!("{PATH}/kalypso-scheduler")).await;
        }
        let stayed = !lost.load(Ordering::SeqCst) && *leading.borrow();
        stop_tx.send_replace(true);
        elector.abort();
        watcher.abort();
        stayed
    }

    #[tokio::test(start_paused = true)]
    async fn a_ten_second_api_outage_does_not_cost_the_leadership_with_the_default_timings() {
        assert!(leads_through(Duration::from_secs(10)).await);
        assert!(leads_through(Duration::from_secs(18)).await);
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_longer_than_the_renew_deadline_does() {
        assert!(!leads_through(Duration::from_secs(24)).await);
    }

    #[test]
    fn the_default_timings_are_consistent_and_bad_ones_are_refused() {
        assert_eq!(settings().check(), Ok(()));
        let mut bad = settings();
        bad.renew_deadline = bad.lease_duration;
        assert!(bad.check().unwrap_err().contains("renew deadline"));
        let mut bad = settings();
        bad.retry_period = bad.renew_deadline;
        assert!(bad.check().unwrap_err().contains("retry period"));
    }
}
