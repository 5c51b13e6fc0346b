//! What the terminal gets: whether output is coloured, and the log subscriber.
//!
//! Every command decides colour the same way, from the global `--color` flag and the usual
//! variables (<https://no-color.org>, `CLICOLOR_FORCE`), and logs through one subscriber,
//! as text or as one JSON object per line (`--log-format`). A log file or a CI log never gets
//! escape codes unless asked for.

use std::ffi::OsString;
use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::{ColorChoice, LogFormat};
use crate::progress::{LogWriter, ProgressLayer};

/// Whether to colour a stream, given `--color`, whether the stream is a terminal and the
/// values of `NO_COLOR` and `CLICOLOR_FORCE`. `--color always|never` wins; with `auto` a
/// non-empty `NO_COLOR` turns colour off, then a `CLICOLOR_FORCE` other than empty or `0`
/// turns it on, else colour follows the terminal.
pub(crate) fn colour(
    choice: ColorChoice,
    is_terminal: bool,
    no_color: Option<OsString>,
    clicolor_force: Option<OsString>,
) -> bool {
    let set = |v: &Option<OsString>| v.as_ref().is_some_and(|v| !v.is_empty());
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto if set(&no_color) => false,
        ColorChoice::Auto if set(&clicolor_force) && clicolor_force.as_deref() != Some("0".as_ref()) => true,
        ColorChoice::Auto => is_terminal,
    }
}

/// [`colour`] for standard output.
pub(crate) fn colour_stdout(choice: ColorChoice) -> bool {
    colour(
        choice,
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

/// [`colour`] for standard error.
pub(crate) fn colour_stderr(choice: ColorChoice) -> bool {
    colour(
        choice,
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

/// Installs the log subscriber on standard error: `format`, the filter from `RUST_LOG`, else
/// `level`; colour as [`colour_stderr`] decides (JSON is never coloured). Lines are written
/// with a progress display cleared, and the display names `kalypso-git`'s fetches and pushes
/// (see [`crate::progress`]). Fails if a subscriber is already installed (a test that runs
/// several commands in one process).
pub(crate) fn init_logs(format: LogFormat, level: &str, choice: ColorChoice) -> Result<(), String> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .map_err(|e| format!("invalid log level: {e}"))?;
    let lines = tracing_subscriber::fmt::layer().with_writer(LogWriter);
    let lines = match format {
        LogFormat::Json => lines
            .with_ansi(false)
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Text => lines.with_ansi(colour_stderr(choice)).with_filter(filter).boxed(),
    };
    let git_steps = Targets::new().with_target("kalypso_git", Level::DEBUG);
    tracing_subscriber::registry()
        .with(lines)
        .with(ProgressLayer.with_filter(git_steps))
        .try_init()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &str) -> Option<OsString> {
        Some(v.into())
    }

    #[test]
    fn colour_follows_the_flag_then_the_variables_then_the_terminal() {
        use ColorChoice::*;
        // (choice, terminal, NO_COLOR, CLICOLOR_FORCE) → colour
        let cases = [
            (Always, false, os("1"), None, true),
            (Never, true, None, os("1"), false),
            (Auto, true, None, None, true),
            (Auto, false, None, None, false),
            (Auto, true, os("1"), None, false),
            (Auto, true, os(""), None, true),
            (Auto, false, None, os("1"), true),
            (Auto, false, None, os("0"), false),
            (Auto, false, None, os(""), false),
            (Auto, false, os("1"), os("1"), false),
        ];
        for (choice, terminal, no_color, force, expected) in cases {
            assert_eq!(
                colour(choice, terminal, no_color.clone(), force.clone()),
                expected,
                "{choice:?} terminal={terminal} NO_COLOR={no_color:?} CLICOLOR_FORCE={force:?}"
            );
        }
    }
}
