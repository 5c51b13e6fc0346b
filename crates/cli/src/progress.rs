//! Progress on standard error, for renders that take more than a moment.
//!
//! Nothing is shown unless standard error is a terminal, and nothing is drawn during the
//! first second, so quick runs and pipelines stay quiet. With `KALYPSO_TIMINGS` set in
//! the environment, the time each stage took is printed to standard error instead.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How long a run must take before progress is drawn.
const DELAY: Duration = Duration::from_secs(1);

/// A progress display that may be disabled.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    visible: AtomicBool,
    /// With `KALYPSO_TIMINGS`: the current stage and when it began.
    timings: Option<Mutex<(&'static str, Instant)>>,
}

impl Progress {
    /// Starts tracking; draws only on a terminal and never when `quiet`.
    pub(crate) fn start(quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        });
        let timings = std::env::var_os("KALYPSO_TIMINGS").map(|_| Mutex::new(("starting", Instant::now())));
        Progress {
            bar: bar.filter(|_| timings.is_none()),
            started: Instant::now(),
            visible: AtomicBool::new(false),
            timings,
        }
    }

    /// With `KALYPSO_TIMINGS`: prints how long the current stage took and starts `next`.
    fn time(&self, next: &'static str) {
        if let Some(timings) = &self.timings
            && let Ok(mut current) = timings.lock()
        {
            let now = Instant::now();
            eprintln!(
                "timing: {:>8.1} ms  {}",
                (now - current.1).as_secs_f64() * 1000.0,
                current.0
            );
            *current = (next, now);
        }
    }

    fn show_if_slow(&self, bar: &ProgressBar) {
        if !self.visible.load(Ordering::Relaxed) && self.started.elapsed() >= DELAY {
            self.visible.store(true, Ordering::Relaxed);
            bar.set_draw_target(ProgressDrawTarget::stderr());
            bar.enable_steady_tick(Duration::from_millis(120));
        }
    }

    /// Names the current stage.
    pub(crate) fn stage(&self, message: &'static str) {
        self.time(message);
        if let Some(bar) = &self.bar {
            bar.set_message(message);
            self.show_if_slow(bar);
        }
    }

    /// Switches to counting `total` assignments being rendered.
    pub(crate) fn rendering(&self, total: usize) {
        self.time("rendering");
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
            bar.set_position(0);
            bar.set_style(
                ProgressStyle::with_template("{spinner} rendering {pos}/{len} assignments {wide_bar} {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.show_if_slow(bar);
        }
    }

    /// Counts one rendered assignment (callable from any thread).
    pub(crate) fn rendered_one(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
            self.show_if_slow(bar);
        }
    }

    /// Removes the display.
    pub(crate) fn finish(&self) {
        self.time("done");
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
