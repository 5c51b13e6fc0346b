//! Placement: which of a policy's feasible cluster types each deployment target goes to.
//!
//! The original scheduler only knows "every cluster type whose labels match". A policy with
//! any of kalypso's placement fields (`numberOfClusterTypes`, `prioritizers`,
//! `spreadConstraints`, `extenders`, `placementRef`) narrows that feasible set per deployment
//! target, in this order: SchedulerExtender filters, then prioritizer scores (normalised to
//! 0–100 per prioritizer, combined by weight, ties broken by name), then a greedy pick that
//! keeps every spread constraint's skew within `maxSkew`, stopping at `numberOfClusterTypes`.
//!
//! Everything outside the control plane is an input, so the module stays pure: the current
//! assignment (for `Steady`) is read from the GitOps tree by the front end, and extender calls
//! are handed as one deduplicated batch to an [`ExtenderClient`] the front end implements
//! (over HTTP in the CLI). Each decision is recorded ([`Decision`]) for `kalypso explain`.
//! The protocol and the rules are documented in `docs/placement.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use kalypso_api::{FailurePolicy, Kind, Labels, SchedulerExtenderSpec, SchedulingPolicySpec};
use serde::{Deserialize, Serialize};

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};
use crate::fingerprint::Hasher;
use crate::model::{Namespace, Object};
use crate::unfold::DeploymentTarget;

/// The default timeout of one extender call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest extender response accepted, in bytes.
pub const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The ManagedCluster label naming a cluster's cluster type, unless `placementRef` names another.
pub const DEFAULT_CLUSTER_TYPE_LABEL: &str = "scheduler.kalypso.io/cluster-type";

/// The cluster types each deployment target is on now (deployment target → cluster types),
/// as the current GitOps tree lays them out.
pub type CurrentAssignment = BTreeMap<String, BTreeSet<String>>;

/// The current assignment of a GitOps tree, from its paths: `<cluster type>/<deployment
/// target>/<file>` (dot-folders are not cluster types).
pub fn current_from_paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> CurrentAssignment {
    current_from_folders(paths.into_iter().filter_map(|path| {
        let mut parts = path.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(ct), Some(dt), Some(_)) if !ct.starts_with('.') => Some((ct, dt)),
            _ => None,
        }
    }))
}

/// The current assignment of a GitOps tree's (cluster type, deployment target) folders.
pub fn current_from_folders<'a>(folders: impl IntoIterator<Item = (&'a str, &'a str)>) -> CurrentAssignment {
    let mut current = CurrentAssignment::new();
    for (cluster_type, target) in folders {
        add_folder(&mut current, cluster_type, target);
    }
    current
}

/// Adds a GitOps tree's folder `<cluster type>/<deployment target>` to `current`. A target's
/// name is copied when first met, not for every cluster type it is on.
pub fn add_folder(current: &mut CurrentAssignment, cluster_type: &str, target: &str) {
    match current.get_mut(target) {
        Some(cluster_types) => {
            cluster_types.insert(cluster_type.to_owned());
        }
        None => {
            current.insert(target.to_owned(), BTreeSet::from([cluster_type.to_owned()]));
        }
    }
}

/// One HTTP POST to a SchedulerExtender.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtenderCall {
    /// The SchedulerExtender's name.
    pub extender: String,
    /// Where to POST.
    pub url: String,
    /// How long the call may take.
    pub timeout: Duration,
    /// The JSON request body.
    pub body: Vec<u8>,
}

/// Makes extender calls: the front end's IO. `call` gets the whole batch of a render (already
/// deduplicated) and returns, in the same order, each response body or why there is none
/// (unreachable, timed out, not 2xx, larger than [`MAX_RESPONSE_BYTES`]).
pub trait ExtenderClient: Sync {
    /// Runs the calls (in parallel, as the implementation sees fit).
    fn call(&self, calls: &[ExtenderCall]) -> Vec<Result<Vec<u8>, String>>;
}

/// The client of front ends that cannot reach extenders: every call fails.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExtenders;

impl ExtenderClient for NoExtenders {
    fn call(&self, calls: &[ExtenderCall]) -> Vec<Result<Vec<u8>, String>> {
        calls
            .iter()
            .map(|_| Err("this command does not call scheduler extenders".to_owned()))
            .collect()
    }
}

/// What placement needs besides the control plane.
#[derive(Clone, Copy)]
pub struct PlacementInput<'a> {
    /// The current assignment (empty: nothing is placed yet).
    pub current: &'a CurrentAssignment,
    /// Makes the extender calls.
    pub extenders: &'a dyn ExtenderClient,
    /// The cluster types decided by the OCM Placement of each policy with a `placementRef`
    /// (policy name → cluster types); `None` where no decision could be read.
    pub decisions: &'a BTreeMap<String, BTreeSet<String>>,
}

impl std::fmt::Debug for PlacementInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacementInput")
            .field("current", &self.current.len())
            .field("decisions", self.decisions)
            .finish_non_exhaustive()
    }
}

static EMPTY_CURRENT: CurrentAssignment = BTreeMap::new();
static EMPTY_DECISIONS: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();

impl Default for PlacementInput<'_> {
    fn default() -> Self {
        PlacementInput {
            current: &EMPTY_CURRENT,
            extenders: &NoExtenders,
            decisions: &EMPTY_DECISIONS,
        }
    }
}

/// The request body of the extender protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderRequest {
    /// The environment.
    pub environment: String,
    /// The deployment target being placed.
    pub deployment_target: RequestTarget,
    /// The candidate cluster types, sorted by name.
    pub candidates: Vec<Candidate>,
}

/// The deployment target of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestTarget {
    /// `<workload>-<target>`.
    pub name: String,
    /// Its workload.
    pub workload: String,
    /// Its workspace.
    pub workspace: String,
    /// Its labels.
    pub labels: Labels,
}

/// A candidate cluster type of a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidate {
    /// The cluster type's name.
    pub name: String,
    /// Its labels.
    pub labels: Labels,
}

/// The response body of the extender protocol: `clusterTypes`/`failed` for a filter,
/// `scores` for a prioritizer, both for an extender that does both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderResponse {
    /// The candidates kept.
    #[serde(default)]
    pub cluster_types: Option<Vec<String>>,
    /// The candidates dropped, with the reason.
    #[serde(default)]
    pub failed: BTreeMap<String, String>,
    /// A score of 0–100 per candidate.
    #[serde(default)]
    pub scores: Option<BTreeMap<String, f64>>,
}

/// A built-in or external scorer, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scorer {
    /// 100 for the cluster types the target is on now.
    Steady,
    /// Fewer assigned deployment targets score higher.
    Balance,
    /// A numeric cluster-type label.
    LabelValue(String),
    /// A SchedulerExtender's scores.
    Extender(String),
}

impl std::fmt::Display for Scorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scorer::Steady => f.write_str("Steady"),
            Scorer::Balance => f.write_str("Balance"),
            Scorer::LabelValue(key) => write!(f, "labelValue {key}"),
            Scorer::Extender(name) => write!(f, "extender {name}"),
        }
    }
}

/// A policy's placement fields, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementSpec {
    /// At most this many cluster types per target.
    pub limit: Option<usize>,
    /// Scorers with their weights, in the policy's order.
    pub prioritizers: Vec<(Scorer, u64)>,
    /// (topology key, max skew).
    pub spread: Vec<(String, usize)>,
    /// Filtering extenders, in the policy's order.
    pub filters: Vec<String>,
    /// The referenced OCM Placement (`namespace/name`), if any.
    pub placement_ref: Option<String>,
}

/// What one extender said about one deployment target's candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It kept these and dropped those (with reasons).
    Filtered {
        /// Dropped candidates and why (`""`: not kept, no reason given).
        dropped: BTreeMap<String, String>,
    },
    /// It failed and `failurePolicy: Ignore` skipped it.
    Ignored(String),
    /// It failed (`failurePolicy: Fail`): the environment fails.
    Failed(String),
}

/// One candidate of a decision, with its scores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scored {
    /// The cluster type.
    pub name: String,
    /// The normalised score of each prioritizer (policy order).
    pub scores: Vec<u32>,
    /// The weighted total.
    pub total: u64,
    /// Chosen?
    pub chosen: bool,
    /// Why it was not chosen (`""` when chosen).
    pub reason: String,
}

/// How one policy placed one deployment target: what `kalypso explain` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The policy.
    pub policy: String,
    /// The deployment target.
    pub target: String,
    /// The feasible set (the cluster-type selector's matches, and the Placement's decision).
    pub feasible: Vec<String>,
    /// Each filtering extender's verdict, in the policy's order.
    pub verdicts: Vec<(String, Verdict)>,
    /// The prioritizers as shown (`Steady ×3`).
    pub prioritizers: Vec<String>,
    /// The candidates that passed the filters, best first.
    pub ranked: Vec<Scored>,
    /// Candidates excluded before scoring (a spread constraint's label missing), with why.
    pub excluded: BTreeMap<String, String>,
    /// `numberOfClusterTypes`.
    pub limit: Option<usize>,
    /// The spread decision in a sentence (empty without spread constraints).
    pub spread: String,
}

impl Decision {
    /// The chosen cluster types, by name.
    pub fn chosen(&self) -> impl Iterator<Item = &str> {
        self.ranked.iter().filter(|c| c.chosen).map(|c| c.name.as_str())
    }
}

/// Validates the placement fields of a policy; `None` (with errors reported) if any is wrong.
/// `decided`: whether its OCM Placement's decision was read.
pub fn compile(
    name: &str,
    policy: &Object<SchedulingPolicySpec>,
    ns: &Namespace,
    decided: bool,
    diagnostics: &mut Diagnostics,
) -> Option<PlacementSpec> {
    let spec = &policy.spec;
    let mut ok = true;
    let mut error = |field: String, message: String| {
        ok = false;
        diagnostics.push(
            Diagnostic::error(Code::InvalidPlacement, message)
                .at(&policy.origin)
                .on(Kind::SchedulingPolicy, name)
                .field(field),
        );
    };
    let limit = match spec.number_of_cluster_types {
        Some(n) if n < 1 => {
            error(
                "spec.numberOfClusterTypes".into(),
                format!("must be at least 1, not {n}"),
            );
            None
        }
        Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        None => None,
    };
    let mut prioritizers = Vec::new();
    for (i, p) in spec.prioritizers.iter().enumerate() {
        let field = format!("spec.prioritizers[{i}]");
        let weight = p.weight.unwrap_or(1);
        if weight < 0 {
            error(
                format!("{field}.weight"),
                format!("must not be negative, not {weight}"),
            );
        }
        let given = usize::from(p.built_in.is_some())
            + usize::from(p.label_value.is_some())
            + usize::from(p.extender.is_some());
        if given != 1 {
            error(
                field,
                format!("must set exactly one of builtIn, labelValue and extender, not {given}"),
            );
            continue;
        }
        let scorer = if let Some(b) = &p.built_in {
            match b.as_str() {
                "Steady" => Scorer::Steady,
                "Balance" => Scorer::Balance,
                other => {
                    error(
                        format!("{field}.builtIn"),
                        format!("unknown prioritizer {other:?}; the built-in ones are Steady and Balance"),
                    );
                    continue;
                }
            }
        } else if let Some(l) = &p.label_value {
            if l.key.is_empty() {
                error(
                    format!("{field}.labelValue.key"),
                    "must name a cluster-type label".into(),
                );
                continue;
            }
            Scorer::LabelValue(l.key.clone())
        } else {
            let name = p.extender.as_ref().map(|e| e.name.clone()).unwrap_or_default();
            match ns.extenders.get(&name) {
                None => {
                    error(
                        format!("{field}.extender.name"),
                        format!("unknown SchedulerExtender {name:?}{}", known(ns)),
                    );
                    continue;
                }
                Some(e) if !e.spec.prioritize => {
                    error(
                        format!("{field}.extender.name"),
                        format!(
                            "SchedulerExtender {name:?} does not prioritize (its spec.prioritize is false)"
                        ),
                    );
                    continue;
                }
                Some(_) => Scorer::Extender(name),
            }
        };
        prioritizers.push((scorer, u64::try_from(weight).unwrap_or(0)));
    }
    let mut spread = Vec::new();
    for (i, s) in spec.spread_constraints.iter().enumerate() {
        let field = format!("spec.spreadConstraints[{i}]");
        if s.topology_key.is_empty() {
            error(
                format!("{field}.topologyKey"),
                "must name a cluster-type label".into(),
            );
        }
        if s.max_skew < 1 {
            error(
                format!("{field}.maxSkew"),
                format!("must be at least 1, not {}", s.max_skew),
            );
            continue;
        }
        spread.push((
            s.topology_key.clone(),
            usize::try_from(s.max_skew).unwrap_or(usize::MAX),
        ));
    }
    let mut filters = Vec::new();
    for (i, e) in spec.extenders.iter().enumerate() {
        let field = format!("spec.extenders[{i}]");
        match ns.extenders.get(e) {
            None => error(field, format!("unknown SchedulerExtender {e:?}{}", known(ns))),
            Some(x) if !x.spec.filter => error(
                field,
                format!("SchedulerExtender {e:?} does not filter (its spec.filter is false)"),
            ),
            Some(_) => filters.push(e.clone()),
        }
    }
    if spec.placement_ref.is_some() && !decided {
        // Only the operator reads PlacementDecisions: say so rather than let the field look
        // effective.
        diagnostics.push(
            Diagnostic::warning(
                Code::PlacementRefUnsupported,
                "no decision of this Open Cluster Management Placement was read (only `kalypso operator` \
                 reads them, from the cluster); this policy places by its clusterTypeSelector",
            )
            .at(&policy.origin)
            .on(Kind::SchedulingPolicy, name)
            .field("spec.placementRef"),
        );
    }
    let placement_ref = spec.placement_ref.as_ref().map(|r| {
        let namespace = if r.namespace.is_empty() {
            &ns.name
        } else {
            &r.namespace
        };
        format!("{namespace}/{}", r.name)
    });
    ok.then_some(PlacementSpec {
        limit,
        prioritizers,
        spread,
        filters,
        placement_ref,
    })
}

fn known(ns: &Namespace) -> String {
    if ns.extenders.is_empty() {
        " (the environment defines none)".to_owned()
    } else {
        let names: Vec<&str> = ns.extenders.keys().map(String::as_str).collect();
        format!(" (known: {})", names.join(", "))
    }
}

/// A SchedulerExtender, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extender {
    url: String,
    timeout: Duration,
    fail: bool,
    origin: Origin,
}

/// Validates every SchedulerExtender of the namespace; the valid ones by name.
pub fn extenders(ns: &Namespace, diagnostics: &mut Diagnostics) -> BTreeMap<String, Extender> {
    let mut out = BTreeMap::new();
    for (name, object) in &ns.extenders {
        let spec: &SchedulerExtenderSpec = &object.spec;
        let mut error = |field: &str, message: String| {
            diagnostics.push(
                Diagnostic::error(Code::InvalidExtender, message)
                    .at(&object.origin)
                    .on(Kind::SchedulerExtender, name)
                    .field(field),
            );
        };
        let url_ok = ["http://", "https://"].iter().any(|scheme| {
            spec.url
                .get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
                && spec.url.len() > scheme.len()
        });
        if !url_ok {
            error("spec.url", format!("{:?} is not an http(s) URL", spec.url));
        }
        let timeout = if spec.timeout.is_empty() {
            Some(DEFAULT_TIMEOUT)
        } else {
            let parsed = parse_duration(&spec.timeout);
            if parsed.is_none() {
                error(
                    "spec.timeout",
                    format!(
                        "{:?} is not a positive duration such as 500ms or 5s",
                        spec.timeout
                    ),
                );
            }
            parsed
        };
        if !spec.filter && !spec.prioritize {
            diagnostics.push(
                Diagnostic::warning(
                    Code::InvalidExtender,
                    "neither filters nor prioritizes; it is never called",
                )
                .at(&object.origin)
                .on(Kind::SchedulerExtender, name)
                .field("spec"),
            );
        }
        if let (true, Some(timeout)) = (url_ok, timeout) {
            out.insert(
                name.clone(),
                Extender {
                    url: spec.url.clone(),
                    timeout,
                    fail: spec.failure_policy == FailurePolicy::Fail,
                    origin: object.origin.clone(),
                },
            );
        }
    }
    out
}

/// A Go duration of ms, s, m or h units (`1m30s`, `500ms`), positive.
pub fn parse_duration(text: &str) -> Option<Duration> {
    // A unit is required here (`5` is not a Go duration).
    if text.trim().parse::<f64>().is_ok() {
        return None;
    }
    crate::duration::parse(text).ok().filter(|d| !d.is_zero())
}

/// One (policy, target) to place: the work [`place`] is given by the scheduler.
#[derive(Clone, Debug)]
pub struct Work<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// Its validated placement fields.
    pub spec: &'a PlacementSpec,
    /// The deployment target.
    pub target: &'a DeploymentTarget,
    /// The feasible cluster types, sorted by name.
    pub feasible: Vec<&'a str>,
}

/// The outcome of an extender's call for one request.
type Answer = Result<ExtenderResponse, String>;

/// Places every (policy, target) of `work` (in the order given: policy, then target, by name,
/// which `Balance` depends on). `assigned` counts the deployment targets already on each
/// cluster type (the policies without placement fields); it is updated with each decision.
pub fn place(
    ns: &Namespace,
    work: &[Work<'_>],
    extenders: &BTreeMap<String, Extender>,
    assigned: &mut HashMap<String, u64>,
    input: &PlacementInput<'_>,
    diagnostics: &mut Diagnostics,
) -> Vec<Decision> {
    // One request per (policy, target), shared by its extenders; calls deduplicated by
    // (extender, request hash).
    let mut calls: Vec<ExtenderCall> = Vec::new();
    let mut call_index: HashMap<(String, crate::fingerprint::Fingerprint), usize> = HashMap::new();
    let mut work_calls: Vec<BTreeMap<&str, usize>> = Vec::with_capacity(work.len());
    for w in work {
        let feasible = feasible_set(w, input);
        let mut mine = BTreeMap::new();
        let names: BTreeSet<&str> = w
            .spec
            .filters
            .iter()
            .map(String::as_str)
            .chain(w.spec.prioritizers.iter().filter_map(|(s, _)| match s {
                Scorer::Extender(name) => Some(name.as_str()),
                _ => None,
            }))
            .collect();
        if !names.is_empty() && !feasible.is_empty() {
            let body = request_body(ns, w.target, &feasible);
            let hash = Hasher::new().bytes(&body).finish();
            for name in names {
                let Some(extender) = extenders.get(name) else {
                    continue;
                };
                let index = *call_index.entry((name.to_owned(), hash)).or_insert_with(|| {
                    calls.push(ExtenderCall {
                        extender: name.to_owned(),
                        url: extender.url.clone(),
                        timeout: extender.timeout,
                        body: body.clone(),
                    });
                    calls.len() - 1
                });
                mine.insert(name, index);
            }
        }
        work_calls.push(mine);
    }
    let replies = if calls.is_empty() {
        Vec::new()
    } else {
        input.extenders.call(&calls)
    };
    let answers: Vec<Answer> = calls
        .iter()
        .zip(replies.into_iter().chain(std::iter::repeat_with(|| {
            Err("the extender client returned no response".to_owned())
        })))
        .map(|(call, reply)| {
            reply.and_then(|bytes| {
                if bytes.len() > MAX_RESPONSE_BYTES {
                    return Err(format!(
                        "its response of {} bytes is larger than the limit of {MAX_RESPONSE_BYTES}",
                        bytes.len()
                    ));
                }
                serde_json::from_slice::<ExtenderResponse>(&bytes)
                    .map_err(|e| format!("its response is not the protocol's JSON: {e}"))
                    .and_then(|r| check_response(&r, call).map(|()| r))
            })
        })
        .collect();

    // Failures, grouped per (extender, message) so that a dead service is one line.
    let mut failures: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut decisions = Vec::with_capacity(work.len());
    for (w, mine) in work.iter().zip(&work_calls) {
        let decision = decide(ns, w, mine, &answers, extenders, assigned, input, &mut failures);
        for ct in decision.chosen() {
            *assigned.entry(ct.to_owned()).or_default() += 1;
        }
        decisions.push(decision);
    }
    for ((name, message), targets) in failures {
        let Some(extender) = extenders.get(&name) else {
            continue;
        };
        let what = format!(
            "call failed for {} deployment target(s) ({}{}): {message}",
            targets.len(),
            targets.first().map(String::as_str).unwrap_or_default(),
            if targets.len() > 1 { ", ..." } else { "" },
        );
        let d = if extender.fail {
            Diagnostic::error(
                Code::Extender,
                format!("{what}; failurePolicy Fail stops the environment"),
            )
        } else {
            Diagnostic::warning(Code::Extender, format!("{what}; skipped (failurePolicy Ignore)"))
        };
        diagnostics.push(
            d.at(&extender.origin)
                .on(Kind::SchedulerExtender, name)
                .field("spec.url"),
        );
    }
    decisions
}

/// The feasible set of a work item: the selector's matches, cut to the Placement's decision.
fn feasible_set<'a>(w: &Work<'a>, input: &PlacementInput<'_>) -> Vec<&'a str> {
    match input.decisions.get(w.policy) {
        Some(decided) if w.spec.placement_ref.is_some() => w
            .feasible
            .iter()
            .copied()
            .filter(|ct| decided.contains(*ct))
            .collect(),
        _ => w.feasible.clone(),
    }
}

/// The request body for `target` with these candidates (JSON, candidates by name).
pub fn request_body(ns: &Namespace, target: &DeploymentTarget, candidates: &[&str]) -> Vec<u8> {
    let request = ExtenderRequest {
        environment: ns.name.clone(),
        deployment_target: RequestTarget {
            name: target.name.clone(),
            workload: target.workload.clone(),
            workspace: target.workspace.clone(),
            labels: target.labels.clone(),
        },
        candidates: candidates
            .iter()
            .map(|ct| Candidate {
                name: (*ct).to_owned(),
                labels: ns
                    .cluster_types
                    .get(*ct)
                    .map(|c| c.meta.labels.clone())
                    .unwrap_or_default(),
            })
            .collect(),
    };
    serde_json::to_vec(&request).unwrap_or_default()
}

/// Checks a response against its request: names must be candidates, scores within 0–100.
fn check_response(response: &ExtenderResponse, call: &ExtenderCall) -> Result<(), String> {
    let request: ExtenderRequest =
        serde_json::from_slice(&call.body).map_err(|e| format!("internal: request unreadable: {e}"))?;
    let candidates: BTreeSet<&str> = request.candidates.iter().map(|c| c.name.as_str()).collect();
    let unknown = |name: &str| -> Result<(), String> {
        if candidates.contains(name) {
            Ok(())
        } else {
            Err(format!("it names {name:?}, which was not a candidate"))
        }
    };
    for name in response.cluster_types.iter().flatten() {
        unknown(name)?;
    }
    for name in response.failed.keys() {
        unknown(name)?;
    }
    for (name, score) in response.scores.iter().flatten() {
        unknown(name)?;
        if !(0.0..=100.0).contains(score) {
            return Err(format!("its score {score} for {name:?} is outside 0–100"));
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn decide(
    ns: &Namespace,
    w: &Work<'_>,
    mine: &BTreeMap<&str, usize>,
    answers: &[Answer],
    extenders: &BTreeMap<String, Extender>,
    assigned: &HashMap<String, u64>,
    input: &PlacementInput<'_>,
    failures: &mut BTreeMap<(String, String), Vec<String>>,
) -> Decision {
    let feasible = feasible_set(w, input);
    let mut candidates: Vec<&str> = feasible.clone();
    let mut failed = |name: &str, message: &str| -> Verdict {
        failures
            .entry((name.to_owned(), message.to_owned()))
            .or_default()
            .push(w.target.name.clone());
        if extenders.get(name).is_some_and(|e| e.fail) {
            Verdict::Failed(message.to_owned())
        } else {
            Verdict::Ignored(message.to_owned())
        }
    };
    let answer = |name: &str| mine.get(name).map(|&i| &answers[i]);

    // Filters.
    let mut verdicts = Vec::new();
    for name in &w.spec.filters {
        let verdict = match answer(name) {
            None if candidates.is_empty() => continue,
            None => failed(name, "the extender is not usable (see its errors)"),
            Some(Err(message)) => failed(name, message),
            Some(Ok(response)) => match &response.cluster_types {
                None => failed(
                    name,
                    "its response has no clusterTypes, which a filter must return",
                ),
                Some(kept) => {
                    let kept: BTreeSet<&str> = kept.iter().map(String::as_str).collect();
                    let mut dropped = BTreeMap::new();
                    candidates.retain(|ct| {
                        let keep = kept.contains(ct);
                        if !keep {
                            dropped.insert(
                                (*ct).to_owned(),
                                response.failed.get(*ct).cloned().unwrap_or_default(),
                            );
                        }
                        keep
                    });
                    Verdict::Filtered { dropped }
                }
            },
        };
        verdicts.push((name.clone(), verdict));
    }

    // Spread constraints need their label.
    let mut excluded = BTreeMap::new();
    if !w.spec.spread.is_empty() {
        candidates.retain(|ct| {
            let labels = ns.cluster_types.get(*ct).map(|c| &c.meta.labels);
            let missing = w
                .spec
                .spread
                .iter()
                .find(|(key, _)| !labels.is_some_and(|l| l.contains_key(key)));
            if let Some((key, _)) = missing {
                excluded.insert((*ct).to_owned(), format!("no label {key:?} to spread by"));
            }
            missing.is_none()
        });
    }

    // Scores.
    let columns: Vec<Vec<u32>> = w
        .spec
        .prioritizers
        .iter()
        .map(|(scorer, _)| match scorer {
            Scorer::Steady => {
                let current = input.current.get(&w.target.name);
                candidates
                    .iter()
                    .map(|ct| {
                        if current.is_some_and(|c| c.contains(*ct)) {
                            100
                        } else {
                            0
                        }
                    })
                    .collect()
            }
            Scorer::Balance => {
                let raw: Vec<Option<f64>> = candidates
                    .iter()
                    .map(|ct| Some(-(assigned.get(*ct).copied().unwrap_or(0) as f64)))
                    .collect();
                normalise(&raw)
            }
            Scorer::LabelValue(key) => {
                let raw: Vec<Option<f64>> = candidates
                    .iter()
                    .map(|ct| {
                        ns.cluster_types
                            .get(*ct)
                            .and_then(|c| c.meta.labels.get(key))
                            .and_then(|v| number(v))
                    })
                    .collect();
                normalise(&raw)
            }
            Scorer::Extender(name) => {
                let scores = match answer(name) {
                    Some(Ok(response)) => match &response.scores {
                        Some(scores) => Some(scores),
                        None => {
                            failed(
                                name,
                                "its response has no scores, which a prioritizer must return",
                            );
                            None
                        }
                    },
                    Some(Err(message)) => {
                        failed(name, message);
                        None
                    }
                    None => None,
                };
                candidates
                    .iter()
                    .map(|ct| {
                        scores
                            .and_then(|s| s.get(*ct))
                            .map_or(0, |s| s.round().clamp(0.0, 100.0) as u32)
                    })
                    .collect()
            }
        })
        .collect();
    let mut ranked: Vec<Scored> = candidates
        .iter()
        .enumerate()
        .map(|(i, ct)| {
            let scores: Vec<u32> = columns.iter().map(|c| c[i]).collect();
            let total = scores
                .iter()
                .zip(&w.spec.prioritizers)
                .map(|(s, (_, weight))| u64::from(*s) * weight)
                .sum();
            Scored {
                name: (*ct).to_owned(),
                scores,
                total,
                chosen: false,
                reason: String::new(),
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));

    // The pick.
    let limit = w.spec.limit.unwrap_or(usize::MAX);
    let domains: Vec<Vec<Option<&str>>> = w
        .spec
        .spread
        .iter()
        .map(|(key, _)| {
            ranked
                .iter()
                .map(|c| {
                    ns.cluster_types
                        .get(&c.name)
                        .and_then(|o| o.meta.labels.get(key))
                        .map(String::as_str)
                })
                .collect()
        })
        .collect();
    let picked = pick(&domains, &w.spec.spread, ranked.len(), limit);
    let mut chosen = 0;
    for (i, c) in ranked.iter_mut().enumerate() {
        if picked.contains(&i) {
            c.chosen = true;
            chosen += 1;
        }
    }
    for c in ranked.iter_mut().filter(|c| !c.chosen) {
        c.reason = if chosen < limit {
            "would exceed a spread constraint's maxSkew".to_owned()
        } else if w.spec.spread.is_empty() {
            format!("not among the best {limit}")
        } else {
            format!("not among the best {limit} that keep the spread")
        };
    }
    let spread = spread_sentence(ns, &w.spec.spread, &ranked);
    let prioritizers = w
        .spec
        .prioritizers
        .iter()
        .map(|(s, weight)| format!("{s} ×{weight}"))
        .collect();
    Decision {
        policy: w.policy.to_owned(),
        target: w.target.name.clone(),
        feasible: feasible.iter().map(|s| (*s).to_owned()).collect(),
        verdicts,
        prioritizers,
        ranked,
        excluded,
        limit: w.spec.limit,
        spread,
    }
}

/// The numeric value of a label (an integer or decimal, optionally signed).
pub fn number(value: &str) -> Option<f64> {
    value.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Min-max scaling to 0–100 (higher raw, higher score); no value scores 0; all equal score 100.
fn normalise(raw: &[Option<f64>]) -> Vec<u32> {
    let values = raw.iter().flatten();
    let min = values.clone().copied().fold(f64::INFINITY, f64::min);
    let max = values.copied().fold(f64::NEG_INFINITY, f64::max);
    raw.iter()
        .map(|v| match v {
            None => 0,
            Some(_) if max <= min => 100,
            Some(v) => (((v - min) / (max - min)) * 100.0).round() as u32,
        })
        .collect()
}

/// The greedy pick: repeatedly the best-ranked candidate whose domain (per constraint) stays
/// within `maxSkew` of the least-chosen domain that still has candidates, until `limit`.
/// Keeps the invariant "no domain exceeds a domain with candidates left by more than maxSkew".
/// Returns the indices picked.
pub fn pick(
    domains: &[Vec<Option<&str>>],
    spread: &[(String, usize)],
    n: usize,
    limit: usize,
) -> BTreeSet<usize> {
    let mut picked = BTreeSet::new();
    if spread.is_empty() {
        picked.extend(0..n.min(limit));
        return picked;
    }
    // Per constraint: domain → (chosen, capacity).
    let mut counts: Vec<BTreeMap<&str, (usize, usize)>> = domains
        .iter()
        .map(|column| {
            let mut m: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
            for d in column.iter().flatten() {
                m.entry(d).or_default().1 += 1;
            }
            m
        })
        .collect();
    while picked.len() < limit {
        let admissible = (0..n).filter(|i| !picked.contains(i)).find(|&i| {
            counts
                .iter()
                .zip(domains)
                .zip(spread)
                .all(|((m, column), (_, skew))| {
                    let Some(d) = column[i] else { return false };
                    let least = m
                        .values()
                        .filter(|(c, cap)| c < cap)
                        .map(|(c, _)| *c)
                        .min()
                        .unwrap_or(0);
                    m[d].0 < least + skew
                })
        });
        let Some(i) = admissible else { break };
        picked.insert(i);
        for (m, column) in counts.iter_mut().zip(domains) {
            if let Some(d) = column[i] {
                m.entry(d).or_default().0 += 1;
            }
        }
    }
    picked
}

fn spread_sentence(ns: &Namespace, spread: &[(String, usize)], ranked: &[Scored]) -> String {
    let mut parts = Vec::new();
    for (key, skew) in spread {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for c in ranked {
            let Some(d) = ns.cluster_types.get(&c.name).and_then(|o| o.meta.labels.get(key)) else {
                continue;
            };
            *counts.entry(d).or_default() += usize::from(c.chosen);
        }
        let shown: Vec<String> = counts.iter().map(|(d, n)| format!("{d}={n}")).collect();
        parts.push(format!("{key} (maxSkew {skew}): {}", shown.join(", ")));
    }
    parts.join("; ")
}

/// Reports labels that a `labelValue` prioritizer reads but that are not numbers, on the
/// cluster types among `feasible` that carry them.
pub fn check_label_values(
    policy_name: &str,
    spec: &PlacementSpec,
    feasible: &[&str],
    ns: &Namespace,
    diagnostics: &mut Diagnostics,
) -> bool {
    let mut ok = true;
    for (i, (scorer, _)) in spec.prioritizers.iter().enumerate() {
        let Scorer::LabelValue(key) = scorer else { continue };
        for ct in feasible {
            let Some(object) = ns.cluster_types.get(*ct) else {
                continue;
            };
            let Some(value) = object.meta.labels.get(key) else {
                continue;
            };
            if number(value).is_none() {
                ok = false;
                diagnostics.push(
                    Diagnostic::error(
                        Code::InvalidPlacement,
                        format!(
                            "label {key:?} is {value:?}, not a number, and SchedulingPolicy {policy_name:?} \
                             scores cluster types by it (spec.prioritizers[{i}].labelValue.key)"
                        ),
                    )
                    .at(&object.origin)
                    .on(Kind::ClusterType, *ct)
                    .field(format!("metadata.labels.{key}")),
                );
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_assignment_is_read_from_tree_paths() {
        let current = current_from_paths([
            "large/app-dev/reconciler.yaml",
            "large/README.md",
            ".github/workflows/ci.yaml",
            "small/app-dev/namespace.yaml",
            "Promoted_Commit_Id",
        ]);
        assert_eq!(current.len(), 1);
        assert_eq!(current["app-dev"].iter().collect::<Vec<_>>(), ["large", "small"]);
    }

    #[test]
    fn durations_are_go_durations() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("fast"), None);
    }

    #[test]
    fn normalisation_is_min_max() {
        assert_eq!(
            normalise(&[Some(1.0), Some(3.0), None, Some(2.0)]),
            [0, 100, 0, 50]
        );
        assert_eq!(normalise(&[Some(7.0), Some(7.0)]), [100, 100]);
        assert_eq!(normalise(&[None]), [0]);
    }

    #[test]
    fn the_pick_keeps_skew_within_bounds() {
        // Ranked: a1 a2 a3 b1 c1 (domains a, a, a, b, c), maxSkew 1, limit 4.
        let column = vec![Some("a"), Some("a"), Some("a"), Some("b"), Some("c")];
        let picked = pick(std::slice::from_ref(&column), &[("region".into(), 1)], 5, 4);
        // a1, b1, c1 (one per domain), then a2: a has 2, b and c are exhausted.
        assert_eq!(picked.into_iter().collect::<Vec<_>>(), [0, 1, 3, 4]);
        let picked = pick(&[column], &[("region".into(), 2)], 5, 2);
        assert_eq!(picked.into_iter().collect::<Vec<_>>(), [0, 1]);
    }
}
