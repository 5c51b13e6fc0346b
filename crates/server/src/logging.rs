//! Logs: one JSON object per line (the default, for log collectors) or human-readable text,
//! through `tracing`. The filter comes from `RUST_LOG`, else the configured level, else
//! `info`. Every message and field that can hold a URL or an error is redacted where it is
//! produced (see `kalypso_git::redact`). Text logs are coloured only on a terminal, and never
//! when `NO_COLOR` is set: a log file or a CI log gets plain text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. Fails if one is already installed.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level.unwrap_or("info")))
        .map_err(|e| format!("invalid log level: {e}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr());
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

/// Whether text logs may be coloured: standard error is a terminal and `NO_COLOR` is unset or
/// empty (<https://no-color.org>).
fn colour_on_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
