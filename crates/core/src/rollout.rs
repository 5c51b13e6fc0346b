//! Progressive rollout inside an environment: which wave each cluster type belongs to (the
//! environment's RolloutPolicy), the rollout's state as the GitOps branch tracks it, and the
//! rule that decides, from that state and the clusters' health, what the next delivery is.
//!
//! Pure, as the rest of the core: the front ends read the state from the GitOps branch, ask the
//! Deployment Observability Hub how the delivered waves' clusters are doing, pass the time in,
//! and deliver what [`next_step`] says in one commit (content and state together, so that a
//! process killed at any point leaves a branch any other process continues from).
//! `docs/rollout.md` describes the behaviour.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kalypso_api::{IntOrPercent, Kind, OnFailure, labels};
use serde::{Deserialize, Serialize};

use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::{Kustomization, Namespace};
use crate::selector::Selector;

/// Where the rollout's state is tracked on the GitOps branch (beside `Promoted_Commit_Id`).
pub const ROLLOUT_STATE_PATH: &str = ".github/tracking/Rollout_State";
/// The state file's format version. Format 2 writes `before` grouped by revision (one entry per
/// revision, with its cluster types) instead of one revision per cluster type, which at 200
/// cluster types and 500 workloads was 6.5 MB in every commit of a rollout; format 1 is still
/// read.
pub const STATE_FORMAT: u32 = 2;
/// The oldest state format still read.
const OLDEST_STATE_FORMAT: u32 = 1;

/// An environment's RolloutPolicy, validated: its waves with their cluster types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waves {
    /// The RolloutPolicy's name.
    pub policy: String,
    /// The waves that select at least one cluster type, in order.
    pub waves: Vec<WavePlan>,
    /// Failed clusters a wave may have.
    pub max_failures: MaxFailures,
    /// How long a wave may take.
    pub progress_deadline: Option<Duration>,
    /// What a failure does.
    pub on_failure: OnFailure,
}

/// One wave: its cluster types and soak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WavePlan {
    /// The wave's name.
    pub name: String,
    /// Its cluster types.
    pub cluster_types: BTreeSet<String>,
    /// How long its clusters must have been compliant before the next wave.
    pub min_success_time: Duration,
}

/// `maxFailures`: a count or a percentage of a wave's registered clusters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxFailures {
    /// At most this many.
    Count(u64),
    /// At most this percentage (rounded down).
    Percent(u64),
}

impl MaxFailures {
    /// The failed clusters allowed among `registered`.
    pub fn allowed(self, registered: u64) -> u64 {
        match self {
            MaxFailures::Count(n) => n,
            MaxFailures::Percent(p) => registered.saturating_mul(p) / 100,
        }
    }
}

fn parse_max_failures(value: &IntOrPercent) -> Result<MaxFailures, String> {
    match value {
        IntOrPercent::Int(n) => u64::try_from(*n)
            .map(MaxFailures::Count)
            .map_err(|_| format!("{n} is negative")),
        IntOrPercent::String(text) => {
            let t = text.trim();
            if let Some(p) = t.strip_suffix('%') {
                match p.trim().parse::<u64>() {
                    Ok(p) if p <= 100 => Ok(MaxFailures::Percent(p)),
                    _ => Err(format!("{text:?} is not a percentage from 0% to 100%")),
                }
            } else {
                t.parse::<u64>()
                    .map(MaxFailures::Count)
                    .map_err(|_| format!("{text:?} is neither a count nor a percentage such as 10%"))
            }
        }
    }
}

/// Whether the environment's own branch (not the main branch, another BaseRepo or a
/// workload folder) brings a RolloutPolicy into namespace `ns`: only then is the environment
/// delivered by waves.
pub fn defined_by_environment(ns: &Namespace) -> bool {
    let own = Kustomization::Environment.name(&ns.name);
    ns.rollout_policies
        .values()
        .any(|p| p.labels().get(labels::FLUX_NAME) == Some(&own))
}

/// The environment's rollout waves from its RolloutPolicy, if it has one; every problem of
/// the policy is reported into `diagnostics` (with the field it is about), and an invalid
/// policy gives `None` (its errors block the environment's delivery).
pub fn waves(ns: &Namespace, diagnostics: &mut Diagnostics) -> Option<Waves> {
    let mut policies = ns.rollout_policies.values();
    let object = policies.next()?;
    let name = object.name();
    let mut valid = true;
    for other in policies {
        diagnostics.push(
            Diagnostic::error(
                Code::InvalidRollout,
                format!(
                    "an environment has at most one RolloutPolicy; {name:?} is defined at {}",
                    object.origin
                ),
            )
            .at(&other.origin)
            .on(Kind::RolloutPolicy, other.name()),
        );
        valid = false;
    }
    let mut error = |field: String, message: String| {
        diagnostics.push(
            Diagnostic::error(Code::InvalidRollout, message)
                .at(&object.origin)
                .on(Kind::RolloutPolicy, name)
                .field(field),
        );
    };
    let spec = &object.spec;
    if spec.waves.is_empty() {
        error(
            "spec.waves".to_owned(),
            "a RolloutPolicy needs at least one wave".to_owned(),
        );
        valid = false;
    }
    let max_failures = match spec.max_failures.as_ref().map(parse_max_failures) {
        None => MaxFailures::Count(0),
        Some(Ok(m)) => m,
        Some(Err(message)) => {
            error("spec.maxFailures".to_owned(), message);
            valid = false;
            MaxFailures::Count(0)
        }
    };
    let progress_deadline = if spec.progress_deadline.is_empty() {
        None
    } else {
        match crate::duration::parse(&spec.progress_deadline) {
            Ok(d) if !d.is_zero() => Some(d),
            Ok(_) => {
                error(
                    "spec.progressDeadline".to_owned(),
                    "must be longer than 0s (leave it out for no deadline)".to_owned(),
                );
                valid = false;
                None
            }
            Err(message) => {
                error("spec.progressDeadline".to_owned(), message);
                valid = false;
                None
            }
        }
    };
    let mut remaining: BTreeMap<&str, &kalypso_api::Labels> = ns
        .cluster_types
        .iter()
        .map(|(n, ct)| (n.as_str(), &ct.meta.labels))
        .collect();
    let mut names = BTreeSet::new();
    let mut plans = Vec::new();
    let mut empty = Vec::new();
    for (i, wave) in spec.waves.iter().enumerate() {
        if wave.name.trim().is_empty() {
            error(format!("spec.waves[{i}].name"), "a wave needs a name".to_owned());
            valid = false;
        } else if !names.insert(wave.name.as_str()) {
            error(
                format!("spec.waves[{i}].name"),
                format!("another wave is named {:?}", wave.name),
            );
            valid = false;
        }
        let min_success_time = if wave.min_success_time.is_empty() {
            Duration::ZERO
        } else {
            crate::duration::parse(&wave.min_success_time).unwrap_or_else(|message| {
                error(format!("spec.waves[{i}].minSuccessTime"), message);
                valid = false;
                Duration::ZERO
            })
        };
        let selector = match Selector::parse(&wave.cluster_type_selector.label_selector) {
            Ok(s) => s,
            Err(errors) => {
                for e in errors {
                    error(
                        format!("spec.waves[{i}].clusterTypeSelector.labelSelector.{}", e.field),
                        e.message,
                    );
                }
                valid = false;
                continue;
            }
        };
        let cluster_types: BTreeSet<String> = remaining
            .iter()
            .filter(|(_, labels)| selector.matches(labels))
            .map(|(n, _)| (*n).to_owned())
            .collect();
        for ct in &cluster_types {
            remaining.remove(ct.as_str());
        }
        if cluster_types.is_empty() {
            empty.push((i, wave.name.clone()));
            continue;
        }
        plans.push(WavePlan {
            name: wave.name.clone(),
            cluster_types,
            min_success_time,
        });
    }
    if valid {
        for (i, wave) in empty {
            diagnostics.push(
                Diagnostic::warning(
                    Code::InvalidRollout,
                    format!("wave {wave:?} selects no cluster type (earlier waves took them all, or none matches); it is skipped"),
                )
                .at(&object.origin)
                .on(Kind::RolloutPolicy, name)
                .field(format!("spec.waves[{i}].clusterTypeSelector")),
            );
        }
        for ct in remaining.keys() {
            diagnostics.push(
                Diagnostic::error(
                    Code::ClusterTypeInNoWave,
                    format!(
                        "cluster type {ct:?} is in no wave of RolloutPolicy {name:?}, so no change would reach it; \
                         add a last wave with an empty selector (labelSelector: {{}}) to take the rest"
                    ),
                )
                .at(&object.origin)
                .on(Kind::RolloutPolicy, name)
                .field("spec.waves"),
            );
            valid = false;
        }
    }
    valid.then(|| Waves {
        policy: name.to_owned(),
        waves: plans,
        max_failures,
        progress_deadline,
        on_failure: spec.on_failure,
    })
}

/// The control-plane commits a content is rendered from: what identifies a change.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// The main-branch commit (the promoted one).
    pub main: String,
    /// The environment branch's commit.
    pub environment: String,
    /// The commit of each BaseRepo other than `main`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bases: BTreeMap<String, String>,
    /// Each WorkloadRegistration's workload commit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workloads: BTreeMap<String, String>,
}

/// Where a rollout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Waves are being delivered.
    Progressing,
    /// Stopped by `kalypso rollout pause`: nothing is delivered until `resume`.
    Paused,
    /// Every wave runs the change.
    Complete,
    /// Failed with `onFailure: Halt`: the later waves keep the old content.
    Halted,
    /// Failed with `onFailure: Rollback`, or aborted: the delivered waves got their previous
    /// content back.
    RolledBack,
}

impl Status {
    /// The status as the state file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Progressing => "progressing",
            Status::Paused => "paused",
            Status::Complete => "complete",
            Status::Halted => "halted",
            Status::RolledBack => "rolled-back",
        }
    }
}

/// One wave as a rollout froze it when it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaveState {
    /// The wave's name.
    pub name: String,
    /// Its cluster types.
    pub cluster_types: BTreeSet<String>,
    /// Its soak, in milliseconds.
    pub min_success_ms: u64,
}

/// The state of an environment's rollout, tracked on its GitOps branch
/// ([`ROLLOUT_STATE_PATH`]) and written in the same commit as the content it describes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutState {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The RolloutPolicy.
    pub policy: String,
    /// The change being rolled out.
    pub change: Revision,
    /// The waves, frozen at the start.
    pub waves: Vec<WaveState>,
    /// How many waves run the change (the first `delivered` waves).
    pub delivered: usize,
    /// Where the rollout is.
    pub status: Status,
    /// The revision each cluster type ran before this rollout reached it (none known for a
    /// cluster type that no rollout tracked before: it cannot be rolled back). Written grouped
    /// by revision (format 2; format 1's map is read too).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "grouped")]
    pub before: BTreeMap<String, Revision>,
    /// Why the rollout failed (wave, clusters, Flux's messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl RolloutState {
    /// Reads a state file; `None` when it is not one (a newer format, damage): a rollout then
    /// starts afresh.
    pub fn parse(bytes: &[u8]) -> Option<RolloutState> {
        serde_json::from_slice::<RolloutState>(bytes)
            .ok()
            .filter(|s| (OLDEST_STATE_FORMAT..=STATE_FORMAT).contains(&s.format))
            .map(|s| RolloutState {
                format: STATE_FORMAT,
                ..s
            })
    }

    /// The state file's bytes: sorted, stable, no timestamps.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// The identity of the wave last delivered: a commit that changes the state but not this
    /// (a pause, say) is not a new wave.
    pub fn wave_key(&self) -> (Revision, usize, BTreeSet<String>) {
        let reached = self.reached();
        (self.change.clone(), self.delivered, reached)
    }

    /// The cluster types of the waves delivered.
    pub fn reached(&self) -> BTreeSet<String> {
        self.waves
            .iter()
            .take(self.delivered)
            .flat_map(|w| w.cluster_types.iter().cloned())
            .collect()
    }

    /// The cluster types of the waves not delivered.
    pub fn waiting(&self) -> BTreeSet<String> {
        self.waves
            .iter()
            .skip(self.delivered)
            .flat_map(|w| w.cluster_types.iter().cloned())
            .collect()
    }

    /// Whether the rollout stopped or finished: nothing more is delivered for its change.
    pub fn is_finished(&self) -> bool {
        matches!(
            self.status,
            Status::Complete | Status::Halted | Status::RolledBack
        )
    }

    /// The revision each cluster type runs now, where known.
    fn running(&self) -> BTreeMap<String, Revision> {
        let mut out = self.before.clone();
        if self.status != Status::RolledBack {
            for ct in self.reached() {
                out.insert(ct, self.change.clone());
            }
        }
        out
    }
}

/// The state file's `before`: one entry per revision with the cluster types that ran it, in
/// the revisions' order (a handful of revisions, where one entry per cluster type repeated
/// every workload's commit for every cluster type). Format 1's map from cluster type to
/// revision is read too.
mod grouped {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Revision;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Group {
        revision: Revision,
        cluster_types: BTreeSet<String>,
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Grouped(Vec<Group>),
        ByClusterType(BTreeMap<String, Revision>),
    }

    pub(super) fn serialize<S: Serializer>(
        before: &BTreeMap<String, Revision>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut groups: BTreeMap<&Revision, BTreeSet<String>> = BTreeMap::new();
        for (ct, revision) in before {
            groups.entry(revision).or_default().insert(ct.clone());
        }
        let groups: Vec<Group> = groups
            .into_iter()
            .map(|(revision, cluster_types)| Group {
                revision: revision.clone(),
                cluster_types,
            })
            .collect();
        groups.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, Revision>, D::Error> {
        Ok(match Written::deserialize(deserializer)? {
            Written::ByClusterType(before) => before,
            Written::Grouped(groups) => groups
                .into_iter()
                .flat_map(|g| {
                    let revision = g.revision;
                    g.cluster_types.into_iter().map(move |ct| (ct, revision.clone()))
                })
                .collect(),
        })
    }
}

/// How the clusters of one wave are doing, relative to the GitOps commit that delivered the
/// wave last reached (as the hub answers it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaveHealth {
    /// Registered clusters of the wave's cluster types.
    pub registered: u64,
    /// Those compliant with that commit or a later one.
    pub compliant: u64,
    /// Those failed on that commit or a later one: (cluster, cluster type, Flux's message).
    pub failed: Vec<(String, String, String)>,
    /// How many failed, all told (the list may be cut short).
    pub failed_count: u64,
    /// When the last of the compliant ones became compliant (Unix ms).
    pub compliant_since: Option<i64>,
    /// The wave's cluster types without registered clusters.
    pub without_clusters: Vec<String>,
}

/// What the rollout does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Deliver: the cluster types of `render_new` from the change, those of `restore` from the
    /// revision each ran before, every other cluster type's folders kept as they are, with
    /// `state` tracked in the same commit.
    Deliver {
        /// The state to write.
        state: RolloutState,
        /// Cluster types rendered from the change.
        render_new: BTreeSet<String>,
        /// Cluster types given back the revision they ran before.
        restore: BTreeMap<Revision, BTreeSet<String>>,
        /// What this delivery is, for people.
        summary: String,
    },
    /// Nothing to deliver yet.
    Wait {
        /// Why, for people.
        reason: String,
    },
    /// The rollout stopped (halted, rolled back, paused): nothing is delivered.
    Stopped {
        /// The state.
        state: RolloutState,
    },
}

/// Starts a rollout of `change` from wave 1, after the rollout `previous` (if any).
pub fn start(waves: &Waves, change: &Revision, previous: Option<&RolloutState>) -> Step {
    let before = previous.map(RolloutState::running).unwrap_or_default();
    let waves_state: Vec<WaveState> = waves
        .waves
        .iter()
        .map(|w| WaveState {
            name: w.name.clone(),
            cluster_types: w.cluster_types.clone(),
            min_success_ms: u64::try_from(w.min_success_time.as_millis()).unwrap_or(u64::MAX),
        })
        .collect();
    let state = RolloutState {
        format: STATE_FORMAT,
        policy: waves.policy.clone(),
        change: change.clone(),
        waves: waves_state,
        delivered: 1,
        status: Status::Progressing,
        before,
        failure: None,
    };
    let Some(first) = waves.waves.first() else {
        return Step::Wait {
            reason: "the environment has no cluster type".to_owned(),
        };
    };
    Step::Deliver {
        render_new: first.cluster_types.clone(),
        restore: BTreeMap::new(),
        summary: format!(
            "rollout of {}: wave 1/{} ({}) gets the change",
            short(&change.environment),
            waves.waves.len(),
            first.name
        ),
        state,
    }
}

/// What the rollout of `state` does next, `change` being the environment's inputs now:
/// a newer change starts again from wave 1; a progressing rollout advances when every
/// registered cluster of the delivered waves is compliant with the commit that delivered the
/// last of them (`health`, one per delivered wave, in order) for that wave's soak, and fails
/// when a wave has more failed clusters than `maxFailures` or exceeds `progressDeadline`
/// (`wave_started`: when that commit was made; `now`: the time, Unix ms).
pub fn next_step(
    waves: &Waves,
    change: &Revision,
    state: Option<&RolloutState>,
    health: Option<&[WaveHealth]>,
    wave_started: Option<i64>,
    now: i64,
) -> Step {
    let Some(state) = state else {
        return start(waves, change, None);
    };
    if state.status == Status::Paused {
        return Step::Stopped { state: state.clone() };
    }
    if &state.change != change {
        return start(waves, change, Some(state));
    }
    if matches!(state.status, Status::Halted | Status::RolledBack) {
        return Step::Stopped { state: state.clone() };
    }
    if state.status == Status::Complete {
        return Step::Wait {
            reason: "the rollout is complete".to_owned(),
        };
    }
    let Some(health) = health else {
        return Step::Wait {
            reason: "waiting for the hub's answer".to_owned(),
        };
    };
    let total = state.waves.len();
    let current = &state.waves[state.delivered.saturating_sub(1).min(total.saturating_sub(1))];
    // Failures first, in any delivered wave.
    for (wave, h) in state.waves.iter().zip(health) {
        let allowed = waves.max_failures.allowed(h.registered);
        let failed = h.failed_count.max(h.failed.len() as u64);
        if failed > allowed {
            let clusters: Vec<String> = h
                .failed
                .iter()
                .take(5)
                .map(|(cluster, ct, message)| format!("{cluster} ({ct}): {message}"))
                .collect();
            let message = format!(
                "wave {:?}: {} failed cluster(s), {} allowed: {}{}",
                wave.name,
                failed,
                allowed,
                clusters.join("; "),
                if failed > 5 { "; ..." } else { "" }
            );
            return fail(waves, state, message);
        }
    }
    let pending: u64 = health
        .iter()
        .map(|h| h.registered.saturating_sub(h.compliant))
        .sum();
    if pending > 0 {
        if let (Some(deadline), Some(started)) = (waves.progress_deadline, wave_started) {
            let deadline_ms = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX);
            if now.saturating_sub(started) > deadline_ms {
                let message = format!(
                    "wave {:?}: {pending} cluster(s) not compliant after the progress deadline ({})",
                    current.name,
                    crate::duration::format(deadline)
                );
                return fail(waves, state, message);
            }
        }
        return Step::Wait {
            reason: format!(
                "wave {:?}: {pending} cluster(s) not yet compliant with the change",
                current.name
            ),
        };
    }
    let soak = i64::try_from(current.min_success_ms).unwrap_or(i64::MAX);
    let since = health
        .get(state.delivered.saturating_sub(1))
        .and_then(|h| h.compliant_since);
    if let Some(since) = since {
        let remaining = since.saturating_add(soak).saturating_sub(now);
        if remaining > 0 {
            return Step::Wait {
                reason: format!(
                    "wave {:?}: compliant, soaking for {} more",
                    current.name,
                    crate::duration::format(Duration::from_millis(remaining.unsigned_abs()))
                ),
            };
        }
    }
    let mut next = state.clone();
    if state.delivered >= total {
        next.status = Status::Complete;
        return Step::Deliver {
            render_new: next.reached(),
            restore: BTreeMap::new(),
            summary: format!("rollout of {}: complete", short(&change.environment)),
            state: next,
        };
    }
    next.delivered += 1;
    let wave = &next.waves[next.delivered - 1];
    Step::Deliver {
        render_new: next.reached(),
        restore: BTreeMap::new(),
        summary: format!(
            "rollout of {}: wave {}/{} ({}) gets the change",
            short(&change.environment),
            next.delivered,
            total,
            wave.name
        ),
        state: next,
    }
}

/// The rollout of `state` failed with `message`: halted, or rolled back when the policy says
/// so (and the revisions the delivered waves ran before are known).
fn fail(waves: &Waves, state: &RolloutState, message: String) -> Step {
    match waves.on_failure {
        OnFailure::Halt => {
            let mut next = state.clone();
            next.status = Status::Halted;
            next.failure = Some(message.clone());
            Step::Deliver {
                render_new: next.reached(),
                restore: BTreeMap::new(),
                summary: format!("rollout halted: {message}"),
                state: next,
            }
        }
        OnFailure::Rollback => abort(state, message),
    }
}

/// Rolls the rollout of `state` back now (`kalypso rollout abort`, or a failure with
/// `onFailure: Rollback`): the delivered waves get the revision each cluster type ran before.
/// A cluster type whose previous revision is unknown keeps the change, and the state says so.
pub fn abort(state: &RolloutState, message: String) -> Step {
    let mut next = state.clone();
    next.status = Status::RolledBack;
    let mut restore: BTreeMap<Revision, BTreeSet<String>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for ct in state.reached() {
        match state.before.get(&ct) {
            Some(rev) => {
                restore.entry(rev.clone()).or_default().insert(ct);
            }
            None => unknown.push(ct),
        }
    }
    let message = if unknown.is_empty() {
        message
    } else {
        format!(
            "{message} (cluster types {} keep the change: no earlier rollout recorded what they ran before)",
            unknown.join(", ")
        )
    };
    next.failure = Some(message.clone());
    Step::Deliver {
        render_new: unknown.into_iter().collect(),
        restore,
        summary: format!("rollout rolled back: {message}"),
        state: next,
    }
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waves(on_failure: OnFailure) -> Waves {
        Waves {
            policy: "rings".to_owned(),
            waves: vec![
                WavePlan {
                    name: "canary".to_owned(),
                    cluster_types: ["small".to_owned()].into(),
                    min_success_time: Duration::from_secs(600),
                },
                WavePlan {
                    name: "rest".to_owned(),
                    cluster_types: ["large".to_owned()].into(),
                    min_success_time: Duration::ZERO,
                },
            ],
            max_failures: MaxFailures::Count(0),
            progress_deadline: Some(Duration::from_secs(1800)),
            on_failure,
        }
    }

    fn rev(env: &str) -> Revision {
        Revision {
            main: "m".to_owned(),
            environment: env.to_owned(),
            ..Revision::default()
        }
    }

    fn state_of(step: Step) -> RolloutState {
        match step {
            Step::Deliver { state, .. } | Step::Stopped { state } => state,
            Step::Wait { reason } => panic!("waits: {reason}"),
        }
    }

    fn healthy(since: i64) -> WaveHealth {
        WaveHealth {
            registered: 2,
            compliant: 2,
            compliant_since: Some(since),
            ..WaveHealth::default()
        }
    }

    #[test]
    fn the_state_writes_each_revision_once_and_reads_format_1() {
        let mut state = state_of(start(&waves(OnFailure::Rollback), &rev("b"), None));
        for ct in ["small", "large", "medium"] {
            state.before.insert(ct.to_owned(), rev("a"));
        }
        state.before.insert("tiny".to_owned(), rev("z"));
        let bytes = state.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(text.matches("\"environment\": \"a\"").count(), 1, "{text}");
        assert!(text.contains("\"format\": 2"), "{text}");
        assert_eq!(RolloutState::parse(&bytes), Some(state.clone()));
        // Format 1: one revision per cluster type.
        let mut old: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        old["format"] = 1.into();
        old["before"] = serde_json::to_value(&state.before).unwrap();
        let read = RolloutState::parse(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(read, state);
        // A newer format is not read.
        old["format"] = 3.into();
        assert_eq!(RolloutState::parse(&serde_json::to_vec(&old).unwrap()), None);
    }

    #[test]
    fn a_change_goes_to_the_first_wave_then_waits_soaks_and_advances() {
        let w = waves(OnFailure::Halt);
        let Step::Deliver {
            state, render_new, ..
        } = next_step(&w, &rev("a"), None, None, None, 0)
        else {
            panic!()
        };
        assert_eq!(render_new, ["small".to_owned()].into());
        assert_eq!(state.delivered, 1);
        let pending = WaveHealth {
            registered: 2,
            compliant: 1,
            ..WaveHealth::default()
        };
        assert!(matches!(
            next_step(&w, &rev("a"), Some(&state), Some(&[pending]), Some(0), 1000),
            Step::Wait { .. }
        ));
        // Compliant for 5 of the 10 minutes.
        let step = next_step(&w, &rev("a"), Some(&state), Some(&[healthy(0)]), Some(0), 300_000);
        assert!(
            matches!(&step, Step::Wait { reason } if reason.contains("soaking for 5m")),
            "{step:?}"
        );
        let Step::Deliver {
            state, render_new, ..
        } = next_step(&w, &rev("a"), Some(&state), Some(&[healthy(0)]), Some(0), 600_001)
        else {
            panic!()
        };
        assert_eq!(state.delivered, 2);
        assert_eq!(render_new.len(), 2);
        let done = state_of(next_step(
            &w,
            &rev("a"),
            Some(&state),
            Some(&[healthy(0), healthy(0)]),
            Some(0),
            700_000,
        ));
        assert_eq!(done.status, Status::Complete);
    }

    #[test]
    fn a_newer_change_restarts_from_the_first_wave_remembering_what_each_ran() {
        let w = waves(OnFailure::Rollback);
        let first = state_of(next_step(&w, &rev("a"), None, None, None, 0));
        let Step::Deliver { state, .. } =
            next_step(&w, &rev("a"), Some(&first), Some(&[healthy(0)]), Some(0), 700_000)
        else {
            panic!()
        };
        let restarted = state_of(next_step(&w, &rev("b"), Some(&state), None, None, 0));
        assert_eq!(restarted.delivered, 1);
        assert_eq!(restarted.change, rev("b"));
        assert_eq!(restarted.before["small"], rev("a"));
        assert_eq!(restarted.before["large"], rev("a"));
    }

    #[test]
    fn failures_halt_or_roll_back() {
        let failed = WaveHealth {
            registered: 2,
            compliant: 1,
            failed: vec![(
                "c1".to_owned(),
                "small".to_owned(),
                "kustomize build failed".to_owned(),
            )],
            ..WaveHealth::default()
        };
        let w = waves(OnFailure::Halt);
        let started = state_of(next_step(&w, &rev("a"), None, None, None, 0));
        let halted = state_of(next_step(
            &w,
            &rev("a"),
            Some(&started),
            Some(std::slice::from_ref(&failed)),
            Some(0),
            1,
        ));
        assert_eq!(halted.status, Status::Halted);
        assert!(
            halted
                .failure
                .as_deref()
                .unwrap()
                .contains("c1 (small): kustomize build failed")
        );
        assert!(matches!(
            next_step(&w, &rev("a"), Some(&halted), None, None, 2),
            Step::Stopped { .. }
        ));

        let w = waves(OnFailure::Rollback);
        let mut started = state_of(next_step(&w, &rev("b"), None, None, None, 0));
        started.before.insert("small".to_owned(), rev("a"));
        let Step::Deliver {
            state,
            restore,
            render_new,
            ..
        } = next_step(&w, &rev("b"), Some(&started), Some(&[failed]), Some(0), 1)
        else {
            panic!()
        };
        assert_eq!(state.status, Status::RolledBack);
        assert_eq!(restore[&rev("a")], ["small".to_owned()].into());
        assert!(render_new.is_empty());
    }

    #[test]
    fn the_progress_deadline_fails_a_slow_wave() {
        let w = waves(OnFailure::Halt);
        let started = state_of(next_step(&w, &rev("a"), None, None, None, 0));
        let slow = WaveHealth {
            registered: 2,
            compliant: 1,
            ..WaveHealth::default()
        };
        let halted = state_of(next_step(
            &w,
            &rev("a"),
            Some(&started),
            Some(&[slow]),
            Some(0),
            1_800_001,
        ));
        assert!(halted.failure.unwrap().contains("progress deadline (30m)"));
    }

    #[test]
    fn max_failures_counts_and_percentages() {
        assert_eq!(MaxFailures::Count(3).allowed(100), 3);
        assert_eq!(MaxFailures::Percent(10).allowed(25), 2);
        assert_eq!(
            parse_max_failures(&IntOrPercent::String("10%".into())),
            Ok(MaxFailures::Percent(10))
        );
        assert!(parse_max_failures(&IntOrPercent::String("110%".into())).is_err());
        assert!(parse_max_failures(&IntOrPercent::Int(-1)).is_err());
    }

    #[test]
    fn the_state_file_is_stable() {
        let w = waves(OnFailure::Halt);
        let state = state_of(next_step(&w, &rev("a"), None, None, None, 0));
        let bytes = state.to_bytes();
        assert_eq!(RolloutState::parse(&bytes), Some(state));
        assert!(RolloutState::parse(b"{}").is_none());
    }

    #[test]
    fn only_the_environment_branch_s_own_rollout_policy_rolls_it_out() {
        use crate::pipeline::{Inputs, load_namespace};
        use crate::source::{SourceFile, SourceTree};
        const POLICY: &str = "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: RolloutPolicy\nmetadata:\n  \
                              name: rings\nspec:\n  waves:\n  - name: all\n    clusterTypeSelector:\n      \
                              labelSelector: {}\n";
        let tree = |label: &str, files: &[(&str, &str)]| {
            SourceTree::new(
                label,
                files
                    .iter()
                    .map(|(path, text)| SourceFile::new(*path, text.as_bytes().to_vec()))
                    .collect(),
            )
        };
        let namespace = |environment: &[(&str, &str)], main: &[(&str, &str)]| {
            let inputs = Inputs {
                main: tree("main", main),
                environment: tree("dev", environment),
                workloads: BTreeMap::new(),
                bases: BTreeMap::new(),
                notes: Vec::new(),
            };
            load_namespace("dev", &inputs, &mut Diagnostics::new())
        };
        assert!(defined_by_environment(&namespace(
            &[("rollout.yaml", POLICY)],
            &[]
        )));
        let from_main = namespace(&[], &[("rollout.yaml", POLICY)]);
        assert_eq!(from_main.rollout_policies.len(), 1, "main's is in the namespace");
        assert!(!defined_by_environment(&from_main), "but does not roll dev out");
        assert!(!defined_by_environment(&namespace(&[], &[])));
    }
}
