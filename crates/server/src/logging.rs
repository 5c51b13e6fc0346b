//! Logs: one JSON object per line (the default, for log collectors) or human-readable text,
//! through `tracing`. The filter comes from `RUST_LOG`, else the configured level, else
//! `info`. Every message and field that can hold a URL or an error is redacted where it is
//! produced (see `kalypso_git::redact`).

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Fails if one is already installed.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .map_err(|e| format!("invalid log level: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| e.to_string())
}
