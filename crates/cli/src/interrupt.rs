//! A render or a reader of an output folder stopped by Ctrl-C (SIGINT), SIGTERM or SIGHUP
//! cleans up before it exits: the staging folder it was filling is removed, a journal it
//! committed is carried out to the end first, and its lock files are removed, so that the
//! output folder holds the old tree or the new one and nothing is left beside it. (SIGKILL
//! cannot be caught: what it leaves, the next kalypso command on the folder cleans up, see
//! [`crate::output::recover`].)
//!
//! The first lock taken ([`crate::output::OutputLock`]) starts a thread that waits for those
//! signals (the handlers are installed before the lock is returned). Staging folders and
//! lock files are registered here while they exist; the step that moves a staged tree or
//! update into place runs [`uninterrupted`], so that a signal waits for it to end.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, Once, PoisonError};

/// What must be removed if the process is stopped now.
struct Pending {
    /// Lock files this process holds, with the folder each locks as the user named it and
    /// the folders made for it (removed if still empty).
    locks: Vec<(PathBuf, String, Vec<PathBuf>)>,
    /// Staging folders being filled.
    staging: Vec<PathBuf>,
}

static PENDING: Mutex<Pending> = Mutex::new(Pending {
    locks: Vec::new(),
    staging: Vec::new(),
});
static WATCHING: Once = Once::new();

fn pending() -> MutexGuard<'static, Pending> {
    PENDING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts watching for SIGINT, SIGTERM and SIGHUP (once per process). When one comes, what is
/// pending is cleaned up and the process exits with 128 + the signal's number.
pub(crate) fn watch() {
    WATCHING.call_once(|| {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else {
            return;
        };
        // Installed here, before the caller goes on to write anything.
        let signals = runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            Some((
                signal(SignalKind::interrupt()).ok()?,
                signal(SignalKind::terminate()).ok()?,
                signal(SignalKind::hangup()).ok()?,
            ))
        });
        let Some((mut interrupt, mut terminate, mut hang_up)) = signals else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("interrupts".to_owned())
            .spawn(move || {
                let (code, name) = runtime.block_on(async {
                    tokio::select! {
                        _ = interrupt.recv() => (130, "interrupted"),
                        _ = terminate.recv() => (143, "terminated"),
                        _ = hang_up.recv() => (129, "hung up"),
                    }
                });
                clean_up_and_exit(code, name);
            });
    });
}

/// Removes the staging folders and lock files pending (waiting for a step that runs
/// [`uninterrupted`] to end first), says so, and ends the process with `code`.
fn clean_up_and_exit(code: i32, what: &str) -> ! {
    let pending = pending();
    for staging in &pending.staging {
        // A thread may still be creating files in it: removed again until it is gone (the
        // writers fail once its path is gone).
        for _ in 0..100 {
            if crate::remove::remove_all(staging).is_ok() && std::fs::symlink_metadata(staging).is_err() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    for (lock, _, made) in &pending.locks {
        let _ = std::fs::remove_file(lock);
        crate::remove::remove_empty(made);
    }
    if let Some((_, shown, _)) = pending.locks.first() {
        eprintln!(
            "error: {what}; {shown} holds the old tree or, if its update had begun, the new one, whole"
        );
    }
    std::process::exit(code)
}

/// Runs `step` (moving a staged tree or update into place, taking or dropping a lock) to its
/// end even if a signal comes meanwhile: the signal's clean-up waits for it. The step notes
/// what it leaves pending in the [`Registry`] it is given.
pub(crate) fn uninterrupted<T>(step: impl FnOnce(&mut Registry<'_>) -> T) -> T {
    let mut held = pending();
    step(&mut Registry(&mut held))
}

/// What is pending, for a step run [`uninterrupted`].
pub(crate) struct Registry<'p>(&'p mut Pending);

impl Registry<'_> {
    /// Notes a lock file this process holds on `shown`, and the folders made for it.
    pub(crate) fn locked(&mut self, lock: &Path, shown: &str, made: &[PathBuf]) {
        self.0
            .locks
            .push((lock.to_owned(), shown.to_owned(), made.to_vec()));
    }

    /// Notes that the lock file `lock` was removed.
    pub(crate) fn unlocked(&mut self, lock: &Path) {
        self.0.locks.retain(|(l, _, _)| l != lock);
    }
}

/// Makes the staging folder `folder` with `make` and notes it (removed if the process is
/// stopped) in one step: a signal's clean-up comes wholly before it (nothing is made, since
/// the process exits while `make` waits) or after it (the folder is noted and removed), never
/// between the two, where it would miss a folder made after it looked.
pub(crate) fn make_staging<T, E>(folder: &Path, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let mut held = pending();
    let made = make();
    held.staging.push(folder.to_owned());
    made
}

/// Notes that the staging folder `folder` was moved into place or removed.
pub(crate) fn staged(folder: &Path) {
    pending().staging.retain(|f| f != folder);
}
