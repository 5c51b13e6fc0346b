//! Leader election with a `coordination.k8s.io/v1` Lease, so that several replicas can run
//! and only one writes.
//!
//! The protocol is client-go's: the leader renews `spec.renewTime` every few seconds; a
//! candidate takes the Lease over when it is unheld or its renewal is older than
//! `leaseDurationSeconds`. Every write carries the Lease's `resourceVersion`, so two
//! candidates racing for it cannot both win (the loser gets a conflict). On shutdown the
//! leader releases the Lease so that a successor takes over at once. [`decide`] is the pure
//! part; [`Elector`] does the API calls.

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
    /// How long a Lease stays held without renewal.
    pub lease_duration: Duration,
    /// How often the leader renews (and candidates retry).
    pub retry_period: Duration,
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
    /// false when it could not be renewed for a whole lease duration (the caller must then
    /// stop writing). Releases the Lease when stopped.
    pub async fn run(self, leading: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        let mut last_renewal = tokio::time::Instant::now();
        loop {
            match self.try_acquire_or_renew().await {
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
                    if *leading.borrow() && last_renewal.elapsed() > self.settings.lease_duration {
                        tracing::warn!("could not renew the lease in time");
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
        LeaseSettings {
            name: "kalypso-scheduler".into(),
            namespace: "kalypso".into(),
            identity: "pod-a".into(),
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(5),
        }
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
}
