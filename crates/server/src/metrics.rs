//! Prometheus metrics of the daemon, in the OpenMetrics text format on `/metrics`.
//!
//! Per environment: renders, assignments, render-and-deliver duration, failures by reason,
//! deliveries by result, and the time of the last successful delivery; for the daemon:
//! polls, poll errors, network retries and webhook requests.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-environment metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvLabels {
    /// The environment.
    pub environment: String,
}

/// Labels of per-environment metrics with a reason or result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvResultLabels {
    /// The environment.
    pub environment: String,
    /// `input`, `render` or `delivery` for failures; `committed`, `pull_request`,
    /// `up_to_date` for deliveries.
    pub result: String,
}

/// Labels of webhook requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `accepted`, `ignored`, `rejected`.
    pub result: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// Every metric of the daemon.
#[derive(Debug)]
pub struct Metrics {
    /// The registry they are encoded from.
    pub registry: Registry,
    /// Environments rendered.
    pub renders: Family<EnvLabels, Counter>,
    /// Assignments in the last render.
    pub assignments: Family<EnvLabels, Gauge>,
    /// Render-and-deliver duration.
    pub duration: Family<EnvLabels, Histogram, fn() -> Histogram>,
    /// Failures by reason.
    pub failures: Family<EnvResultLabels, Counter>,
    /// Deliveries by result.
    pub deliveries: Family<EnvResultLabels, Counter>,
    /// Unix time of the last successful delivery.
    pub last_success: Family<EnvLabels, Gauge<f64, AtomicU64>>,
    /// Polls run.
    pub polls: Counter,
    /// Polls that could not read the control plane.
    pub poll_errors: Counter,
    /// Network retries.
    pub retries: Counter,
    /// Webhook requests by result.
    pub webhooks: Family<WebhookLabels, Counter>,
    /// Steps of progressive rollouts by result (`wave`, `complete`, `halted`, `rolled-back`).
    pub rollout_steps: Family<EnvResultLabels, Counter>,
    /// Waves that run the change of the environment's rollout (of those its policy has).
    pub rollout_waves_delivered: Family<EnvLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric under the `kalypso` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kalypso");
        let renders = Family::<EnvLabels, Counter>::default();
        let assignments = Family::<EnvLabels, Gauge>::default();
        let duration = Family::<EnvLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram as fn() -> Histogram,
        );
        let failures = Family::<EnvResultLabels, Counter>::default();
        let deliveries = Family::<EnvResultLabels, Counter>::default();
        let last_success = Family::<EnvLabels, Gauge<f64, AtomicU64>>::default();
        let polls = Counter::default();
        let poll_errors = Counter::default();
        let retries = Counter::default();
        let webhooks = Family::<WebhookLabels, Counter>::default();
        let rollout_steps = Family::<EnvResultLabels, Counter>::default();
        let rollout_waves_delivered = Family::<EnvLabels, Gauge>::default();
        registry.register("renders", "Environments rendered", renders.clone());
        registry.register(
            "assignments",
            "Assignments in the environment's last render",
            assignments.clone(),
        );
        registry.register(
            "render_duration_seconds",
            "Time to render and deliver an environment",
            duration.clone(),
        );
        registry.register(
            "failures",
            "Environments not delivered, by reason (input, render, delivery)",
            failures.clone(),
        );
        registry.register(
            "deliveries",
            "Deliveries by result (committed, pull_request, up_to_date)",
            deliveries.clone(),
        );
        registry.register(
            "last_success_timestamp_seconds",
            "Unix time of the environment's last successful delivery",
            last_success.clone(),
        );
        registry.register("polls", "Polls of the control plane", polls.clone());
        registry.register(
            "poll_errors",
            "Polls that could not read the control plane",
            poll_errors.clone(),
        );
        registry.register("git_retries", "Network operations retried", retries.clone());
        registry.register("webhooks", "Webhook requests by result", webhooks.clone());
        registry.register(
            "rollout_steps",
            "Steps of progressive rollouts delivered, by result (wave, complete, halted, rolled-back)",
            rollout_steps.clone(),
        );
        registry.register(
            "rollout_waves_delivered",
            "Waves that run the change of the environment's progressive rollout",
            rollout_waves_delivered.clone(),
        );
        Metrics {
            registry,
            renders,
            assignments,
            duration,
            failures,
            deliveries,
            last_success,
            polls,
            poll_errors,
            retries,
            webhooks,
            rollout_steps,
            rollout_waves_delivered,
        }
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Per-environment labels.
    pub fn env(environment: &str) -> EnvLabels {
        EnvLabels {
            environment: environment.to_owned(),
        }
    }

    /// Per-environment labels with a result.
    pub fn env_result(environment: &str, result: &str) -> EnvResultLabels {
        EnvResultLabels {
            environment: environment.to_owned(),
            result: result.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_per_environment_series() {
        let m = Metrics::new();
        m.renders.get_or_create(&Metrics::env("dev")).inc();
        m.assignments.get_or_create(&Metrics::env("dev")).set(7);
        m.failures
            .get_or_create(&Metrics::env_result("stage", "render"))
            .inc();
        m.duration.get_or_create(&Metrics::env("dev")).observe(0.5);
        let text = m.encode();
        assert!(
            text.contains("kalypso_renders_total{environment=\"dev\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kalypso_assignments{environment=\"dev\"} 7"),
            "{text}"
        );
        assert!(
            text.contains("kalypso_failures_total{environment=\"stage\",result=\"render\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("kalypso_render_duration_seconds_count{environment=\"dev\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
