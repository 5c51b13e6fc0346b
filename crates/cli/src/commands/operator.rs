//! `kalypso operator`: run as a Kubernetes operator, a drop-in replacement for the original
//! Kalypso Scheduler's controller manager (see `kalypso-operator` and docs/operator.md).
//!
//! The flags the original's Deployment passes (`--health-probe-bind-address`,
//! `--metrics-bind-address`, `--leader-elect`) are accepted with the same meaning, so the
//! original's manifests run kalypso unchanged apart from the image.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use kalypso_operator::desired::Options;
use kalypso_operator::leader::LeaseSettings;

use crate::settings::{Global, Operator};
use crate::terminal::init_logs;
use kalypso_server::config::LogFormat;

pub(crate) fn operator(settings: &Operator, global: &Global) -> Result<ExitCode> {
    let identity = settings
        .pod_name
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "kalypso-scheduler".to_owned());
    let hub = match &settings.hub {
        Some(access) => Some(std::sync::Arc::new(
            kalypso_git::hub::HubGate::new(&access.url, access.token_file.as_deref())
                .map_err(|e| anyhow!("--hub: {e}"))?,
        )),
        None => None,
    };
    if hub.is_some() && settings.source != kalypso_operator::ControlPlaneFeed::Git {
        anyhow::bail!(
            "--hub: progressive rollouts run with --source git only (the Flux and external sources deliver environments whole)"
        );
    }
    let config = kalypso_operator::Config {
        source: settings.source,
        health_addr: settings.health_addr,
        metrics_addr: settings.metrics_addr,
        leader_elect: settings.lease.as_ref().map(|(name, namespace)| {
            let (lease_duration, renew_deadline, retry_period) = settings.lease_timings;
            LeaseSettings {
                lease_duration,
                renew_deadline,
                retry_period,
                ..LeaseSettings::new(name.clone(), namespace.clone(), identity.clone())
            }
        }),
        flux: settings.flux.clone(),
        options: Options {
            assignments: settings.assignments,
            external: settings.source == kalypso_operator::ControlPlaneFeed::External,
            mass_deletion: settings.mass_deletion_limit,
        },
        debounce: settings.debounce,
        resync: settings.resync,
        retry_after: Duration::from_secs(30),
        concurrency: settings.concurrency,
        instance: Some(identity),
        poll: settings.poll,
        sprig: global.sprig,
        hub,
    };
    let format = global.log_format(LogFormat::Json);
    init_logs(
        format,
        settings.log_level.as_deref().unwrap_or("info"),
        global.color,
    )
    .map_err(|e| anyhow!("{e}"))?;
    kalypso_operator::runtime::block_on(
        config,
        settings.publisher.clone(),
        kalypso_server::shutdown_signal(),
    )
    .map_err(|e| anyhow!("{e}"))?;
    Ok(ExitCode::SUCCESS)
}
