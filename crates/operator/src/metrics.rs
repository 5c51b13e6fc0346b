//! Prometheus metrics of the controllers, registered into the registry `/metrics` serves.
//!
//! Counters per controller for reconciliations and failures (labelled with the error
//! variant, as controller-rs does), a duration histogram, delivery outcomes, blocked
//! environments and leadership. Names are prefixed `kalypso_operator_`.

use std::sync::atomic::AtomicU64;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of per-controller metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `environment`, `baserepo`, `workloadregistration`, `scheduler`.
    pub controller: String,
}

/// Labels of failure counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The controller.
    pub controller: String,
    /// The error variant (`Kube`, `Flux`, `Publish`...).
    pub error: String,
}

/// Labels of delivery counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// `pushed`, `pull_request`, `up_to_date` or `failed`.
    pub result: String,
}

/// Every metric of the operator.
#[derive(Debug)]
pub struct Metrics {
    /// Reconciliations started.
    pub reconciliations: Family<ControllerLabels, Counter>,
    /// Reconciliations that failed.
    pub failures: Family<FailureLabels, Counter>,
    /// How long reconciliations take.
    pub duration: Family<ControllerLabels, Histogram>,
    /// Deliveries by result.
    pub deliveries: Family<DeliveryLabels, Counter>,
    /// Environments whose delivery is blocked by problems.
    pub blocked_environments: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// 1 while this instance is the leader.
    pub leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    /// Deployment targets applied (created or updated).
    pub targets_applied: Counter<u64, AtomicU64>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            reconciliations: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
            }),
            deliveries: Family::default(),
            blocked_environments: Gauge::default(),
            leader: Gauge::default(),
            targets_applied: Counter::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric in `registry` under the `kalypso_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("kalypso_operator");
        r.register(
            "reconciliations",
            "Reconciliations started",
            self.reconciliations.clone(),
        );
        r.register(
            "reconcile_failures",
            "Reconciliations that failed",
            self.failures.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Duration of reconciliations",
            self.duration.clone(),
        );
        r.register(
            "deliveries",
            "Deliveries to GitOps repositories",
            self.deliveries.clone(),
        );
        r.register(
            "blocked_environments",
            "Environments whose delivery is blocked by problems",
            self.blocked_environments.clone(),
        );
        r.register("leader", "1 while this instance leads", self.leader.clone());
        r.register(
            "deployment_targets_applied",
            "DeploymentTargets created or updated",
            self.targets_applied.clone(),
        );
    }

    /// Counts a reconciliation of `controller` and returns a guard that records its
    /// duration when dropped.
    pub fn reconcile(&self, controller: &str) -> DurationGuard<'_> {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconciliations.get_or_create(&labels).inc();
        DurationGuard {
            metrics: self,
            labels,
            start: Instant::now(),
        }
    }

    /// Counts a failure of `controller` with error variant `error`.
    pub fn failure(&self, controller: &str, error: &str) {
        self.failures
            .get_or_create(&FailureLabels {
                controller: controller.to_owned(),
                error: error.to_owned(),
            })
            .inc();
    }

    /// Counts a delivery with `result`.
    pub fn delivery(&self, result: &str) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                result: result.to_owned(),
            })
            .inc();
    }
}

/// Records a reconciliation's duration when dropped.
#[derive(Debug)]
pub struct DurationGuard<'a> {
    metrics: &'a Metrics,
    labels: ControllerLabels,
    start: Instant,
}

impl Drop for DurationGuard<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exported_with_the_prefix() {
        let m = Metrics::default();
        let mut registry = Registry::default();
        m.register(&mut registry);
        drop(m.reconcile("scheduler"));
        m.failure("scheduler", "Publish");
        m.delivery("pushed");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains("kalypso_operator_reconciliations_total{controller=\"scheduler\"} 1"),
            "{text}"
        );
        assert!(text.contains(
            "kalypso_operator_reconcile_failures_total{controller=\"scheduler\",error=\"Publish\"} 1"
        ));
        assert!(text.contains("kalypso_operator_deliveries_total{result=\"pushed\"} 1"));
        assert!(
            text.contains("kalypso_operator_reconcile_duration_seconds_count{controller=\"scheduler\"} 1")
        );
    }
}
