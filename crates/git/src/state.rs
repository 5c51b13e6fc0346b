//! The delivery state: what each environment was last built from and delivered to, kept in
//! the cache so that a later sync, in another process, can tell with one branch listing per
//! repository (no fetch, no render) that nothing moved.
//!
//! A GitOps branch at the commit a delivery left it at holds exactly what the recorded
//! inputs render to (placement included: Steady placement reads that branch), so when the
//! control-plane branches, the workload branches and the GitOps branches are all where the
//! state says, rendering again would deliver nothing. A state is written only after a
//! delivery that fully succeeded in `push` mode (no dry run, no failing workload, no
//! scheduler extender called: their answers are not in git), and trusted only when the same
//! binary with the same output settings wrote it ([`Fingerprint`]). Any doubt (no state,
//! an unreadable one, another format, a listing that failed) means the full path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::repo::Cache;
use crate::url::RepoUrl;

/// The layout of the state files; a file of another layout is ignored.
pub const FORMAT: u32 = 1;

/// What decides the output besides the inputs in git: the binary and the settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint(pub String);

impl Fingerprint {
    /// The fingerprint of this binary (version, and the executable's size and time, so that
    /// a rebuilt binary counts as another) with `settings` (any text that decides the output).
    pub fn of(settings: &str) -> Fingerprint {
        let mut hash = Sha256::new();
        hash.update(format!(
            "format {FORMAT}\nversion {}\n",
            env!("CARGO_PKG_VERSION")
        ));
        if let Ok(exe) = std::env::current_exe()
            && let Ok(meta) = std::fs::metadata(&exe)
        {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos());
            hash.update(format!("exe {} {} {modified:?}\n", exe.display(), meta.len()));
        }
        hash.update(settings.as_bytes());
        Fingerprint(hex::encode(&hash.finalize()[..16]))
    }
}

/// A branch of a repository at a commit (`None`: the branch did not exist).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchAt {
    /// The repository (a location without credentials: states with credentials in a
    /// location are not written).
    pub url: String,
    /// The branch.
    pub branch: String,
    /// Its head.
    pub commit: Option<String>,
}

/// What one environment was last built from and delivered to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvState {
    /// [`FORMAT`].
    pub format: u32,
    /// The [`Fingerprint`] of the binary and settings that delivered.
    pub fingerprint: String,
    /// The head of each control-plane branch read.
    pub control_plane: BTreeMap<String, String>,
    /// The workload branches read.
    pub sources: Vec<BranchAt>,
    /// Each GitOps branch delivered to, by GitOpsRepo name, at the head the delivery left.
    pub targets: BTreeMap<String, BranchAt>,
    /// Assignments scheduled.
    pub assignments: usize,
    /// The input commits, for `--verbose` and JSON output.
    pub main: String,
    /// The environment branch's commit.
    pub environment: String,
    /// Each registration's workload commit.
    pub workloads: BTreeMap<String, String>,
    /// The commit of each BaseRepo other than `main`.
    pub bases: BTreeMap<String, String>,
    /// A progressive rollout goes on from this delivery: never "nothing moved", the state
    /// only says which branches to list ([`Store::mark_rollout_in_progress`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollout_in_progress: bool,
}

/// The environments the main branch defined at a commit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environments {
    /// [`FORMAT`].
    pub format: u32,
    /// The [`Fingerprint`] of the writer.
    pub fingerprint: String,
    /// The main branch.
    pub main_branch: String,
    /// Its head.
    pub main: String,
    /// The environments, in order.
    pub names: Vec<String>,
}

/// The state files of one control plane: `<cache>/state/<control plane>/<environment>.json`.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// The name of environment `name`'s file with `extension`, if `name` can name a file (an
/// environment is a namespace name).
fn file_name(name: &str, extension: &str) -> Option<String> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    ok.then(|| format!("{name}.{extension}"))
}

/// The file listing the environments (not a namespace name, so never an environment's).
const ENVIRONMENTS: &str = "_environments.json";

impl Store {
    /// The states of `control_plane`'s environments in `cache`.
    pub fn new(cache: &Cache, control_plane: &RepoUrl) -> Store {
        Store {
            dir: cache.dir().join("state").join(control_plane.cache_name()),
        }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state of `environment`, if there is a usable one.
    pub fn environment(&self, environment: &str, fingerprint: &Fingerprint) -> Option<EnvState> {
        let state: EnvState = self.read(&file_name(environment, "json")?)?;
        (state.format == FORMAT && state.fingerprint == fingerprint.0).then_some(state)
    }

    /// Records `state` for `environment`.
    pub fn save_environment(&self, environment: &str, state: &EnvState) {
        if let Some(file) = file_name(environment, "json") {
            self.write(&file, state);
        }
    }

    /// Marks the state of `environment` as one a progressive rollout goes on from: the next
    /// sync takes the full path for it even though nothing moved (a rollout in progress
    /// advances with time and the clusters' reports, not with its inputs), but still lists
    /// the branches the state names, so that only the repositories that moved are fetched
    /// (without a state, every workload repository is fetched). When the mark cannot be
    /// written the state is removed; a failure to do either is logged: an unmarked state left
    /// behind would hold the rollout back until an input moves.
    pub fn mark_rollout_in_progress(&self, environment: &str) {
        let Some(file) = file_name(environment, "json") else {
            return;
        };
        let path = self.dir.join(&file);
        let Some(mut state) = self.read::<EnvState>(&file) else {
            return;
        };
        if state.rollout_in_progress {
            return;
        }
        state.rollout_in_progress = true;
        let Err(error) = self.try_write(&file, &state) else {
            return;
        };
        tracing::warn!(file = %path.display(), %error, "cannot mark the delivery state; removing it");
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot remove the delivery state");
            }
        }
    }

    /// Where the files of `environment`'s last delivery are recorded (see
    /// [`crate::delivered`]); `None` for a name that cannot name a file.
    pub fn files_path(&self, environment: &str) -> Option<PathBuf> {
        Some(self.dir.join(file_name(environment, "files")?))
    }

    /// The environments listed at the main branch's head, if usable.
    pub fn environments(&self, fingerprint: &Fingerprint) -> Option<Environments> {
        let listed: Environments = self.read(ENVIRONMENTS)?;
        (listed.format == FORMAT && listed.fingerprint == fingerprint.0).then_some(listed)
    }

    /// Records the environments the main branch defines.
    pub fn save_environments(&self, listed: &Environments) {
        self.write(ENVIRONMENTS, listed);
    }

    fn read<T: serde::de::DeserializeOwned>(&self, file: &str) -> Option<T> {
        let path = self.dir.join(file);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "cannot read the delivery state; syncing in full");
                return None;
            }
        };
        match serde_json::from_slice(&bytes) {
            Ok(value) => Some(value),
            Err(error) => {
                tracing::warn!(file = %path.display(), %error, "unusable delivery state; syncing in full");
                None
            }
        }
    }

    /// Writes `value` to `file` atomically (a temporary file renamed over it): a reader
    /// sees the old state or the new one, never half of one. A failure is logged, not
    /// fatal: without a state the next sync takes the full path.
    fn write<T: Serialize>(&self, file: &str, value: &T) {
        if let Err(error) = self.try_write(file, value) {
            tracing::warn!(file = %self.dir.join(file).display(), %error, "cannot record the delivery state");
        }
    }

    /// [`Store::write`], its failure returned.
    fn try_write<T: Serialize>(&self, file: &str, value: &T) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
        write_atomically(&self.dir.join(file), &bytes)
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed over `path`: a
/// reader sees the old file or the new one, never a part (its folder is made if missing).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&temporary, bytes)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn state() -> EnvState {
        EnvState {
            format: FORMAT,
            fingerprint: Fingerprint::of("settings").0,
            control_plane: BTreeMap::from([("main".into(), "a".repeat(40))]),
            sources: vec![],
            targets: BTreeMap::new(),
            assignments: 3,
            main: "a".repeat(40),
            environment: "b".repeat(40),
            workloads: BTreeMap::new(),
            bases: BTreeMap::new(),
            rollout_in_progress: false,
        }
    }

    #[test]
    fn a_state_is_used_only_by_the_same_binary_and_settings_and_format() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(
            &Cache::new(dir.path()),
            &RepoUrl::parse("file:///cp.git").unwrap(),
        );
        let fingerprint = Fingerprint::of("settings");
        assert_eq!(store.environment("dev", &fingerprint), None, "no state yet");
        store.save_environment("dev", &state());
        assert_eq!(store.environment("dev", &fingerprint), Some(state()));
        assert_eq!(store.environment("dev", &Fingerprint::of("other settings")), None);
        let mut other = state();
        other.format = FORMAT + 1;
        store.save_environment("dev", &other);
        assert_eq!(store.environment("dev", &fingerprint), None, "another format");
    }

    #[test]
    fn garbage_or_truncated_states_are_ignored_and_odd_names_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(
            &Cache::new(dir.path()),
            &RepoUrl::parse("file:///cp.git").unwrap(),
        );
        let fingerprint = Fingerprint::of("settings");
        store.save_environment("dev", &state());
        let path = store.dir().join("dev.json");
        let text = std::fs::read(&path).unwrap();
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        assert_eq!(store.environment("dev", &fingerprint), None, "truncated");
        std::fs::write(&path, b"\x00\xffgarbage").unwrap();
        assert_eq!(store.environment("dev", &fingerprint), None, "garbage");
        store.save_environment("../escape", &state());
        store.save_environment("_environments", &state());
        assert!(!dir.path().join("state").join("escape.json").exists());
        let names: Vec<_> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["dev.json"]);
    }
}
