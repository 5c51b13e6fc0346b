//! Progress on standard error, for renders and syncs that take more than a moment.
//!
//! Nothing is shown unless standard error is a terminal, and nothing is drawn during the
//! first second, so quick runs and pipelines stay quiet. With `KALYPSO_TIMINGS` set in
//! the environment, the time each stage took is printed to standard error instead.
//!
//! The git steps inside one call of `kalypso-git` (fetching a repository, pushing to one)
//! are not visible to the command that made the call; they are seen through the spans
//! `kalypso-git` opens for them, by the [`ProgressLayer`] of the log subscriber, which names
//! them under the current stage. Log lines are written through [`suspended`], so that a
//! warning printed while the bar is drawn does not break it.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing::span::{Attributes, Id};
use tracing::{Subscriber, field};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// How long a run must take before progress is drawn.
const DELAY: Duration = Duration::from_secs(1);

/// The bar of the progress display under way, if one is drawn, and its stage: what the
/// [`ProgressLayer`] and [`suspended`] reach.
static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

#[derive(Debug)]
struct Active {
    /// Which [`Progress`] it is.
    id: u64,
    bar: ProgressBar,
    /// What the stage is about (`dev (1/2)`), before each message; may be empty.
    subject: Cow<'static, str>,
    /// The stage's message.
    stage: Cow<'static, str>,
    /// Shown after a fetch ends within the stage (what the stage does next).
    after_fetch: Option<Cow<'static, str>>,
}

fn active() -> std::sync::MutexGuard<'static, Option<Active>> {
    ACTIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A progress display that may be disabled.
#[derive(Debug)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    started: Instant,
    visible: Arc<AtomicBool>,
    /// With `KALYPSO_TIMINGS`: the current stage and when it began.
    timings: Option<Mutex<(String, Instant)>>,
    id: u64,
}

/// The id of the next [`Progress`].
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

impl Progress {
    /// Starts tracking; draws only on a terminal and never when `quiet`.
    pub(crate) fn start(quiet: bool) -> Progress {
        let timings =
            std::env::var_os("KALYPSO_TIMINGS").map(|_| Mutex::new(("starting".to_owned(), Instant::now())));
        let bar = (!quiet && std::io::stderr().is_terminal() && timings.is_none()).then(Progress::hidden_bar);
        let progress = Progress::with_bar(bar, timings);
        progress.show_later();
        progress
    }

    fn hidden_bar() -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar
    }

    fn with_bar(bar: Option<ProgressBar>, timings: Option<Mutex<(String, Instant)>>) -> Progress {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if let Some(bar) = &bar {
            *active() = Some(Active {
                id,
                bar: bar.clone(),
                subject: Cow::Borrowed(""),
                stage: Cow::Borrowed(""),
                after_fetch: None,
            });
        }
        Progress {
            bar,
            started: Instant::now(),
            visible: Arc::new(AtomicBool::new(false)),
            timings,
            id,
        }
    }

    /// With `KALYPSO_TIMINGS`: prints how long the current stage took and starts `next`.
    fn time(&self, next: &str) {
        if let Some(timings) = &self.timings
            && let Ok(mut current) = timings.lock()
        {
            let now = Instant::now();
            eprintln!(
                "timing: {:>8.1} ms  {}",
                (now - current.1).as_secs_f64() * 1000.0,
                current.0
            );
            *current = (next.to_owned(), now);
        }
    }

    fn show_if_slow(&self, bar: &ProgressBar) {
        if self.started.elapsed() >= DELAY {
            show(&self.visible, bar);
        }
    }

    /// Shows the display after [`DELAY`] even if no stage begins meanwhile (a long fetch).
    fn show_later(&self) {
        if let Some(bar) = &self.bar {
            let (bar, visible) = (bar.clone(), self.visible.clone());
            std::thread::spawn(move || {
                std::thread::sleep(DELAY);
                if !bar.is_finished() {
                    show(&visible, &bar);
                }
            });
        }
    }

    /// Names the current stage.
    pub(crate) fn stage(&self, message: &'static str) {
        self.stage_of("", message, None);
    }

    /// Names the current stage, what it is about (`dev (1/2)`, shown before it and before the
    /// git steps within it) and what it does after a fetch within it ends (a delivery fetches
    /// the GitOps branch, then writes the tree).
    pub(crate) fn stage_of(
        &self,
        subject: impl Into<Cow<'static, str>>,
        message: &'static str,
        after_fetch: Option<&'static str>,
    ) {
        let subject = subject.into();
        let shown = join(&subject, message);
        self.time(&shown);
        if let Some(bar) = &self.bar {
            if let Some(a) = active().as_mut() {
                a.subject = subject;
                a.stage = message.into();
                a.after_fetch = after_fetch.map(Into::into);
            }
            bar.set_message(shown);
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

    /// Runs `f` (which prints) with the display cleared, and draws it again afterwards.
    pub(crate) fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Removes the display.
    pub(crate) fn finish(&self) {
        self.time("done");
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.release();
    }

    /// Stops the logs from reaching this display.
    fn release(&self) {
        let mut active = active();
        if active.as_ref().is_some_and(|a| a.id == self.id) {
            *active = None;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.release();
    }
}

/// Draws `bar` on standard error from now on, once.
fn show(visible: &AtomicBool, bar: &ProgressBar) {
    if !visible.swap(true, Ordering::Relaxed) {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        bar.enable_steady_tick(Duration::from_millis(120));
    }
}

/// Runs `f` (which writes to standard error) with the progress display, if any, cleared.
pub(crate) fn suspended<T>(f: impl FnOnce() -> T) -> T {
    let bar = active().as_ref().map(|a| a.bar.clone());
    match bar {
        Some(bar) => bar.suspend(f),
        None => f(),
    }
}

/// Standard error for the log subscriber: each log line is written with the progress display
/// cleared.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        suspended(|| std::io::stderr().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        suspended(|| std::io::stderr().write_all(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}

/// Names the git steps `kalypso-git` runs (its `fetch` and `push` spans, with their `repo`)
/// under the current stage of the progress display.
#[derive(Debug, Default)]
pub(crate) struct ProgressLayer;

/// The `repo` field of a span.
struct Repo(String);

struct RepoVisitor<'a>(&'a mut Option<String>);

impl field::Visit for RepoVisitor<'_> {
    fn record_debug(&mut self, field: &field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "repo" {
            *self.0 = Some(format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &field::Field, value: &str) {
        if field.name() == "repo" {
            *self.0 = Some(value.to_owned());
        }
    }
}

/// Shows `detail` under the current stage.
fn show_detail(detail: impl FnOnce(&Active) -> Option<String>) {
    let active = active();
    if let Some(a) = active.as_ref()
        && let Some(detail) = detail(a)
    {
        a.bar.set_message(detail);
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ProgressLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !matches!(attrs.metadata().name(), "fetch" | "push") || active().is_none() {
            return;
        }
        let mut repo = None;
        attrs.record(&mut RepoVisitor(&mut repo));
        if let (Some(repo), Some(span)) = (repo, ctx.span(id)) {
            span.extensions_mut().insert(Repo(kalypso_git::redact(&repo)));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let verb = match span.name() {
            "fetch" => "fetching",
            "push" => "pushing to",
            _ => return,
        };
        let extensions = span.extensions();
        let Some(Repo(repo)) = extensions.get::<Repo>() else {
            return;
        };
        let detail = format!("{verb} {repo}");
        show_detail(|a| Some(join(&a.subject, &detail)));
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        match span.name() {
            "fetch" => show_detail(|a| Some(join(&a.subject, a.after_fetch.as_deref().unwrap_or(&a.stage)))),
            "push" => {
                let extensions = span.extensions();
                if let Some(Repo(repo)) = extensions.get::<Repo>() {
                    let detail = format!("pushed to {repo}");
                    show_detail(|a| Some(join(&a.subject, &detail)));
                }
            }
            _ => {}
        }
    }
}

/// `subject: message`, or the message alone without a subject.
fn join(subject: &str, message: &str) -> String {
    if subject.is_empty() {
        message.to_owned()
    } else {
        format!("{subject}: {message}")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// The git steps of a delivery, as `kalypso-git` opens spans for them, shown under the
    /// stage; log lines are written with the display cleared. (The only test touching the
    /// display of the process.)
    #[test]
    fn git_steps_are_named_under_the_current_stage() {
        let progress = Progress::with_bar(Some(Progress::hidden_bar()), None);
        let bar = progress.bar.clone().unwrap();
        let subscriber = tracing_subscriber::registry().with(ProgressLayer);
        tracing::subscriber::with_default(subscriber, || {
            progress.stage("fetching the control plane");
            {
                let span =
                    tracing::debug_span!("fetch", repo = "https://x-access-token:secret@github.com/o/cp");
                let _e = span.enter();
                assert_eq!(bar.message(), "fetching https://***@github.com/o/cp");
            }
            assert_eq!(bar.message(), "fetching the control plane");
            progress.stage_of("dev (1/2)", "rendering", Some("writing the tree"));
            assert_eq!(bar.message(), "dev (1/2): rendering");
            {
                let span = tracing::debug_span!("fetch", repo = %"file:///srv/gitops.git");
                let _e = span.enter();
                assert_eq!(bar.message(), "dev (1/2): fetching file:///srv/gitops.git");
            }
            assert_eq!(bar.message(), "dev (1/2): writing the tree");
            {
                let span = tracing::debug_span!("push", repo = %"file:///srv/gitops.git");
                let _e = span.enter();
                assert_eq!(bar.message(), "dev (1/2): pushing to file:///srv/gitops.git");
            }
            assert_eq!(bar.message(), "dev (1/2): pushed to file:///srv/gitops.git");
            // Spans of other names change nothing.
            progress.stage_of("stage (2/2)", "reading the inputs", None);
            {
                let span = tracing::debug_span!("environment", repo = "x");
                let _e = span.enter();
                assert_eq!(bar.message(), "stage (2/2): reading the inputs");
            }
        });
        assert_eq!(suspended(|| 42), 42);
        progress.finish();
        assert!(
            active().is_none(),
            "a finished display is no longer reached by the logs"
        );
    }
}
