//! `kalypso operator`: run as a Kubernetes operator, a drop-in replacement for the original
//! Kalypso Scheduler's controller manager (see `kalypso-operator` and docs/operator.md).
//!
//! The flags the original's Deployment passes (`--health-probe-bind-address`,
//! `--metrics-bind-address`, `--leader-elect`) are accepted with the same meaning, so the
//! original's manifests run kalypso unchanged apart from the image.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, anyhow};
use clap::{Args, ValueEnum};
use kalypso_operator::Source;
use kalypso_operator::desired::Options;
use kalypso_operator::flux::FluxSettings;
use kalypso_operator::leader::LeaseSettings;
use kalypso_operator::runtime::Delivery;

use crate::GlobalArgs;
use crate::terminal::{LogFormat, init_logs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SourceArg {
    /// Flux brings the control plane into environment namespaces; the operator keeps the
    /// Flux objects of Environments, BaseRepos and WorkloadRegistrations (the original's way).
    Flux,
    /// Something else fills the namespaces; the operator only schedules and delivers.
    External,
    /// No Flux: each Environment's control plane is read from git and delivered with the
    /// code of `kalypso serve`, every --poll period.
    Git,
}

#[derive(Debug, Args)]
pub(crate) struct OperatorArgs {
    /// Where the control plane comes from.
    #[arg(long, env = "KALYPSO_SOURCE", value_enum, default_value = "flux")]
    source: SourceArg,
    /// Address of /healthz and /readyz (`:8081` means every interface).
    #[arg(long, value_name = "ADDR", default_value = ":8081", value_parser = parse_addr)]
    health_probe_bind_address: SocketAddr,
    /// Address of /metrics (may be the same as the health address).
    #[arg(long, value_name = "ADDR", default_value = ":8080", value_parser = parse_addr)]
    metrics_bind_address: SocketAddr,
    /// Elect a leader with a Lease, so that several replicas can run.
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "kalypso-scheduler")]
    leader_election_id: String,
    /// The Lease's namespace (default: the pod's, from POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NS", default_value = "default")]
    leader_election_namespace: String,
    /// This instance's name (from POD_NAME; default: the host name).
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pod_name: Option<String>,
    /// Namespace of the Flux objects.
    #[arg(long, value_name = "NS", default_value = "flux-system")]
    flux_namespace: String,
    /// Secret with git credentials for Flux (empty: none).
    #[arg(long, value_name = "NAME", default_value = "gh-repo-secret")]
    flux_secret: String,
    /// Reconcile interval of the Flux objects.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    flux_interval: String,
    /// apiVersion of Flux GitRepositories. `auto`: the original's
    /// (`source.toolkit.fluxcd.io/v1beta2`) when the cluster serves it, else the cluster's
    /// preferred version, with a warning.
    #[arg(long, value_name = "API", default_value = "auto")]
    flux_source_api_version: String,
    /// apiVersion of Flux Kustomizations (`auto` as for --flux-source-api-version).
    #[arg(long, value_name = "API", default_value = "auto")]
    flux_kustomize_api_version: String,
    /// Write Assignment and AssignmentPackage objects, as the original does, so that
    /// `kubectl get assignments` shows what it showed (`--assignments false`: do not).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    assignments: bool,
    /// Deliver new content only after it has not changed for this long.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = kalypso_core::duration::parse)]
    debounce: Duration,
    /// Reconcile every environment at least this often.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = kalypso_core::duration::parse)]
    resync: Duration,
    /// With --source git: how often each environment is read and delivered.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = kalypso_core::duration::parse)]
    poll: Duration,
    /// Environments reconciled at the same time.
    #[arg(long, value_name = "N", default_value = "4")]
    concurrency: u16,
    /// How to deliver: `pr` (pull requests, the original's way), `push`, or `auto`.
    #[arg(long, value_name = "MODE", default_value = "pr")]
    delivery: String,
    /// Where GitOps repositories are mirrored.
    #[arg(long, env = "KALYPSO_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Environment variable holding the GitHub token.
    #[arg(long, value_name = "VAR", default_value = "GITHUB_AUTH_TOKEN")]
    token_env: String,
    /// File holding the GitHub token (wins over --token-env).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The GitHub API (for GitHub Enterprise).
    #[arg(long, value_name = "URL")]
    github_api_url: Option<String>,
    /// Log level or filter (RUST_LOG wins).
    #[arg(long, env = "KALYPSO_LOG_LEVEL", value_name = "LEVEL")]
    log_level: Option<String>,
}

/// `:8081` (Go's form: every interface) or a full socket address.
fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_owned()
    };
    full.parse().map_err(|e| format!("invalid address {text:?}: {e}"))
}

pub(crate) fn operator(args: &OperatorArgs, global: &GlobalArgs) -> Result<ExitCode> {
    let identity = args
        .pod_name
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "kalypso-scheduler".to_owned());
    let config = kalypso_operator::Config {
        source: match args.source {
            SourceArg::Flux => Source::Flux,
            SourceArg::External => Source::External,
            SourceArg::Git => Source::Git,
        },
        health_addr: args.health_probe_bind_address,
        metrics_addr: args.metrics_bind_address,
        leader_elect: args.leader_elect.then(|| LeaseSettings {
            name: args.leader_election_id.clone(),
            namespace: args.leader_election_namespace.clone(),
            identity: identity.clone(),
            lease_duration: Duration::from_secs(15),
            retry_period: Duration::from_secs(5),
        }),
        flux: FluxSettings {
            namespace: args.flux_namespace.clone(),
            secret: Some(args.flux_secret.clone()).filter(|s| !s.is_empty()),
            interval: args.flux_interval.clone(),
            source_api_version: args.flux_source_api_version.clone(),
            kustomize_api_version: args.flux_kustomize_api_version.clone(),
        },
        options: Options {
            assignments: args.assignments,
        },
        debounce: args.debounce,
        resync: args.resync,
        retry_after: Duration::from_secs(30),
        concurrency: args.concurrency.max(1),
        instance: Some(identity),
        poll: args.poll,
    };
    let delivery = Delivery {
        mode: args.delivery.clone(),
        cache_dir: args.cache_dir.clone(),
        token_env: args.token_env.clone(),
        token_file: args.token_file.clone(),
        github_api_url: args.github_api_url.clone(),
    };
    let format = global.log_format.unwrap_or(LogFormat::Json);
    init_logs(format, args.log_level.as_deref().unwrap_or("info"), global.color)
        .map_err(|e| anyhow!("{e}"))?;
    kalypso_operator::runtime::block_on(config, delivery).map_err(|e| anyhow!("{e}"))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_addresses() {
        assert_eq!(parse_addr(":8081"), Ok(SocketAddr::from(([0, 0, 0, 0], 8081))));
        assert_eq!(
            parse_addr("127.0.0.1:9"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9)))
        );
        assert!(parse_addr("nope").is_err());
    }
}
