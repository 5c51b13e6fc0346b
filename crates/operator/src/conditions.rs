//! Status conditions, computed in memory and written only when they change.
//!
//! Every object the operator reports on gets a `Ready` condition with a reason, a message and
//! the generation it was computed for; the GitOpsRepo also gets `ReadyToPR` while content
//! waits out the debounce, as in the original. [`update`] merges the desired conditions into
//! the existing ones the way `meta.SetStatusCondition` does (the transition time moves only
//! when the status flips), so that an unchanged result is an unchanged list and no write
//! happens: the operator never loops on its own status updates.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// `Ready`: the object is valid and its effects are in place.
pub const READY: &str = "Ready";
/// `ReadyToPR`: a GitOpsRepo has new content waiting for the debounce to pass.
pub const READY_TO_PR: &str = "ReadyToPR";
/// The failure reason the original uses everywhere.
pub const UPDATE_FAILED: &str = "UpdateFailed";
/// `Ready=False` of an Environment (and its GitOpsRepos) whose namespace holds a
/// RolloutPolicy while the operator runs with the Flux or external source, which cannot run
/// progressive rollouts: nothing is delivered.
pub const ROLLOUT_UNSUPPORTED: &str = "RolloutUnsupported";
/// `Ready=True` of an object whose Flux objects were written (the sources controller's).
pub const FLUX_RESOURCES_CREATED: &str = "FluxResourcesCreated";
/// The API server's limit on a condition message.
const MAX_MESSAGE: usize = 32 * 1024;

/// A condition as the operator wants it to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    /// The condition type (`Ready`).
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable detail (may be empty).
    pub message: String,
}

impl Desired {
    /// `Ready=True` with `reason`.
    pub fn ready(reason: &str, message: impl Into<String>) -> Desired {
        Desired {
            type_: READY,
            status: true,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// `Ready=False` with `reason`.
    pub fn not_ready(reason: &str, message: impl Into<String>) -> Desired {
        Desired {
            type_: READY,
            status: false,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// `Ready=False, reason=UpdateFailed`: the original's failure condition.
    pub fn failed(message: impl Into<String>) -> Desired {
        Desired::not_ready(UPDATE_FAILED, message)
    }
}

fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The conditions after setting `desired` and removing the types in `remove`; other
/// conditions are kept. A condition whose status does not change keeps its
/// `lastTransitionTime`.
pub fn update(
    existing: &[Condition],
    desired: &[Desired],
    remove: &[&str],
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing
        .iter()
        .filter(|c| !remove.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    for d in desired {
        let status = status_str(d.status);
        let new = |last_transition_time: Time| Condition {
            type_: d.type_.to_owned(),
            status: status.to_owned(),
            reason: d.reason.clone(),
            message: truncate(&d.message),
            observed_generation: generation,
            last_transition_time,
        };
        match out.iter_mut().find(|c| c.type_ == d.type_) {
            Some(c) => {
                let time = if c.status == status {
                    c.last_transition_time.clone()
                } else {
                    now.clone()
                };
                *c = new(time);
            }
            None => out.push(new(now.clone())),
        }
    }
    out
}

/// The condition of `type_`, if set.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether condition `type_` is set and `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// A change of an object's `Ready` condition worth a Kubernetes Event: the status or the
/// reason changed (or the condition is new).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The new status.
    pub ready: bool,
    /// The new reason.
    pub reason: String,
    /// The new message.
    pub message: String,
}

/// The transition from `old` to `new` of the `Ready` condition, if any.
pub fn ready_transition(old: &[Condition], new: &[Condition]) -> Option<Transition> {
    let after = find(new, READY)?;
    let before = find(old, READY);
    let changed = before.is_none_or(|b| b.status != after.status || b.reason != after.reason);
    changed.then(|| Transition {
        ready: after.status == "True",
        reason: after.reason.clone(),
        message: after.message.clone(),
    })
}

/// The current time as an API timestamp, truncated to seconds as the API server stores it
/// (so that a written condition compares equal to what is read back).
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    let secs = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
    Time(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(s).expect("time"))
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let first = update(&[], &[Desired::ready("Accepted", "")], &[], Some(1), &at(10));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].last_transition_time, at(10));
        assert_eq!(first[0].observed_generation, Some(1));

        let same = update(&first, &[Desired::ready("Accepted", "")], &[], Some(1), &at(20));
        assert_eq!(
            same, first,
            "unchanged conditions are equal, so nothing is written"
        );

        let reason = update(&first, &[Desired::ready("Other", "m")], &[], Some(2), &at(30));
        assert_eq!(reason[0].last_transition_time, at(10));
        assert_eq!(reason[0].reason, "Other");

        let flipped = update(&reason, &[Desired::failed("boom")], &[], Some(2), &at(40));
        assert_eq!(flipped[0].last_transition_time, at(40));
        assert_eq!(flipped[0].status, "False");
        assert_eq!(flipped[0].reason, UPDATE_FAILED);
    }

    #[test]
    fn other_conditions_are_kept_and_removals_applied() {
        let start = update(
            &[],
            &[
                Desired::ready("A", ""),
                Desired {
                    type_: READY_TO_PR,
                    status: true,
                    reason: "ReadyForPR".into(),
                    message: String::new(),
                },
            ],
            &[],
            None,
            &at(1),
        );
        let out = update(&start, &[Desired::ready("B", "")], &[READY_TO_PR], None, &at(2));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].reason, "B");
    }

    #[test]
    fn transitions_are_status_or_reason_changes() {
        let a = update(&[], &[Desired::ready("A", "")], &[], None, &at(1));
        assert!(ready_transition(&[], &a).is_some());
        let a2 = update(&a, &[Desired::ready("A", "new message")], &[], None, &at(2));
        assert_eq!(ready_transition(&a, &a2), None);
        let b = update(&a, &[Desired::failed("x")], &[], None, &at(3));
        let t = ready_transition(&a, &b).expect("transition");
        assert!(!t.ready);
        assert_eq!(t.message, "x");
    }

    #[test]
    fn long_messages_are_truncated() {
        let long = "é".repeat(MAX_MESSAGE);
        let c = update(&[], &[Desired::failed(long)], &[], None, &at(1));
        assert!(c[0].message.len() <= MAX_MESSAGE);
        assert!(c[0].message.ends_with("..."));
    }
}
