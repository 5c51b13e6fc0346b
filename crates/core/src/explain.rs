//! Explanations: why a deployment target is (or is not) on a cluster type, where each config
//! value comes from, and which ConfigMaps silently override each other.
//!
//! Everything here is computed from the same objects and rules the renderer uses, so an
//! explanation can never disagree with the output. Kalypso's config merge is silent (the
//! original takes ConfigMaps in name order and the last scalar wins), and its selectors are
//! plain label matches; these explanations make both visible: every selector requirement
//! with the label value it saw, every ConfigMap with the key whether it applied or not (and
//! why not), and what each applying one did to the value.
//!
//! The structures serialize to the JSON of `kalypso explain --output json`, a stable
//! interface: fields are only ever added.

use std::collections::BTreeMap;

use kalypso_api::{ClusterTypeSpec, Labels, labels};
use kalypso_gotmpl::Value;
use serde::Serialize;

use crate::config::{ConfigData, labels_match, merge};
use crate::model::Object;
use crate::pipeline::ScheduledEnvironment;
use crate::placement::{Decision, Verdict};
use crate::selector::{RequirementCheck, Selector};
use crate::unfold::DeploymentTarget;

/// One selector requirement checked against labels.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The label key the requirement is about.
    pub key: String,
    /// The requirement, in selector syntax (`size=large`, `tier in (t0,t1)`, `!gpu`).
    pub requirement: String,
    /// The label's value, if present.
    pub actual: Option<String>,
    /// Whether it held.
    pub satisfied: bool,
}

impl From<RequirementCheck> for Check {
    fn from(c: RequirementCheck) -> Check {
        Check {
            key: c.requirement.key.clone(),
            requirement: c.requirement.to_string(),
            actual: c.actual,
            satisfied: c.satisfied,
        }
    }
}

fn checks(selector: &Selector, labels: &Labels) -> Vec<Check> {
    selector.explain(labels).into_iter().map(Check::from).collect()
}

/// How a policy's cluster-type selector fared against one cluster type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterTypeCheck {
    /// The cluster type.
    pub cluster_type: String,
    /// Each requirement of the selector.
    pub requirements: Vec<Check>,
    /// Whether the selector selects it.
    pub selected: bool,
}

/// How a policy fared against the deployment target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PolicyExplanation {
    /// The policy.
    pub policy: String,
    /// Whether the target's environment is this environment (policies only ever select
    /// targets of their own environment).
    pub environment_matches: bool,
    /// The workspace the policy requires (empty: any).
    pub workspace: String,
    /// Whether the target's workspace satisfies it.
    pub workspace_matches: bool,
    /// The target-selector requirements.
    pub target_requirements: Vec<Check>,
    /// Whether the policy selects the target.
    pub selects_target: bool,
    /// The cluster-type selector against each cluster type considered.
    pub cluster_types: Vec<ClusterTypeCheck>,
    /// How the policy's placement fields chose among the selected cluster types (policies
    /// with placement fields that select the target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementExplanation>,
}

/// A placement decision for people: the feasible set, the extenders' verdicts, each
/// candidate's scores and the spread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementExplanation {
    /// The feasible cluster types (the selector's matches).
    pub feasible: Vec<String>,
    /// Each filtering extender's verdict.
    pub extenders: Vec<ExtenderVerdict>,
    /// The prioritizers with their weights (`Steady ×3`), the order of `scores`.
    pub prioritizers: Vec<String>,
    /// The candidates after filtering, best first.
    pub candidates: Vec<CandidateScore>,
    /// Candidates left out before scoring, with why.
    pub excluded: BTreeMap<String, String>,
    /// `numberOfClusterTypes`.
    pub number_of_cluster_types: Option<usize>,
    /// The spread decision: chosen cluster types per domain.
    pub spread: String,
}

/// What one extender said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderVerdict {
    /// The SchedulerExtender.
    pub extender: String,
    /// `filtered`, `ignored` (failed, `failurePolicy: Ignore`) or `failed`.
    pub verdict: &'static str,
    /// The candidates it dropped, with its reasons.
    pub dropped: BTreeMap<String, String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One candidate's scores.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateScore {
    /// The cluster type.
    pub cluster_type: String,
    /// Each prioritizer's normalised score (0–100).
    pub scores: Vec<u32>,
    /// The weighted total.
    pub total: u64,
    /// Chosen?
    pub chosen: bool,
    /// Why not.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl From<&Decision> for PlacementExplanation {
    fn from(d: &Decision) -> PlacementExplanation {
        PlacementExplanation {
            feasible: d.feasible.clone(),
            extenders: d
                .verdicts
                .iter()
                .map(|(name, v)| {
                    let (verdict, dropped, error) = match v {
                        Verdict::Filtered { dropped } => ("filtered", dropped.clone(), None),
                        Verdict::Ignored(e) => ("ignored", BTreeMap::new(), Some(e.clone())),
                        Verdict::Failed(e) => ("failed", BTreeMap::new(), Some(e.clone())),
                    };
                    ExtenderVerdict {
                        extender: name.clone(),
                        verdict,
                        dropped,
                        error,
                    }
                })
                .collect(),
            prioritizers: d.prioritizers.clone(),
            candidates: d
                .ranked
                .iter()
                .map(|c| CandidateScore {
                    cluster_type: c.name.clone(),
                    scores: c.scores.clone(),
                    total: c.total,
                    chosen: c.chosen,
                    reason: c.reason.clone(),
                })
                .collect(),
            excluded: d.excluded.clone(),
            number_of_cluster_types: d.limit,
            spread: d.spread.clone(),
        }
    }
}

/// The assignments a target ends up with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AssignmentSummary {
    /// The cluster type.
    pub cluster_type: String,
    /// The policies that chose it.
    pub policies: Vec<String>,
}

/// Why a deployment target is (or is not) on each cluster type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TargetExplanation {
    /// The deployment target.
    pub deployment_target: String,
    /// Its workload.
    pub workload: String,
    /// Its workspace.
    pub workspace: String,
    /// Its environment.
    pub environment: String,
    /// Its labels.
    pub labels: Labels,
    /// Every valid policy, by name.
    pub policies: Vec<PolicyExplanation>,
    /// The resulting assignments (restricted to the cluster type asked about, if any).
    pub assignments: Vec<AssignmentSummary>,
}

/// Explains the scheduling of `target`, optionally only against `cluster_type`.
pub fn explain_target(
    env: &ScheduledEnvironment,
    target: &DeploymentTarget,
    cluster_type: Option<&str>,
) -> TargetExplanation {
    let cluster_types: Vec<&Object<ClusterTypeSpec>> = env
        .namespace
        .cluster_types
        .values()
        .filter(|ct| cluster_type.is_none_or(|name| ct.name() == name))
        .collect();
    let policies = env
        .schedule
        .policies
        .values()
        .map(|p| {
            let environment_matches = target.spec.environment == env.name();
            let workspace_matches = p.workspace.is_empty() || p.workspace == target.workspace;
            PolicyExplanation {
                policy: p.name.clone(),
                environment_matches,
                workspace: p.workspace.clone(),
                workspace_matches,
                target_requirements: checks(&p.target_selector, &target.labels),
                selects_target: p.selects_target(target, env.name()),
                cluster_types: cluster_types
                    .iter()
                    .map(|ct| ClusterTypeCheck {
                        cluster_type: ct.name().to_owned(),
                        requirements: checks(&p.cluster_type_selector, ct.labels()),
                        selected: p.cluster_type_selector.matches(ct.labels()),
                    })
                    .collect(),
                placement: env
                    .schedule
                    .decisions
                    .get(&(p.name.clone(), target.name.clone()))
                    .map(PlacementExplanation::from),
            }
        })
        .collect();
    let assignments = env
        .schedule
        .iter()
        .filter(|a| a.deployment_target == target.name && cluster_type.is_none_or(|ct| a.cluster_type == ct))
        .map(|a| AssignmentSummary {
            cluster_type: a.cluster_type.clone(),
            policies: a.policies.clone(),
        })
        .collect();
    TargetExplanation {
        deployment_target: target.name.clone(),
        workload: target.workload.clone(),
        workspace: target.workspace.clone(),
        environment: target.spec.environment.clone(),
        labels: target.labels.clone(),
        policies,
        assignments,
    }
}

/// What an applying source did to the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// The first source with the key: it sets the value.
    Sets,
    /// A list merged into a list, or a map into a map (see [`crate::config::merge`]).
    Merges,
    /// Anything else: the value so far is replaced.
    Replaces,
}

/// A source's value for the key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceValue {
    /// The ConfigMap (and, for Azure exports, the key).
    pub source: String,
    /// The labels that decide whether it applies, as `key=value` (Flux and `platform-config`
    /// labels left out; for Azure exports, the labels encoded in the key).
    pub labels: Vec<String>,
    /// The raw ConfigMap string.
    pub raw: String,
    /// For applying sources: what it did to the value, in merge order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// Why the source does not apply (`None`: it applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applied_because: Option<String>,
}

/// Where one config value of one assignment comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConfigExplanation {
    /// The deployment target.
    pub deployment_target: String,
    /// The cluster type.
    pub cluster_type: String,
    /// Whether the target is scheduled on the cluster type (if not, the value is what it
    /// would get there).
    pub assigned: bool,
    /// The config key.
    pub key: String,
    /// The sources that apply, in merge order (for scalars the last one wins).
    pub applied: Vec<SourceValue>,
    /// Sources that have the key but do not apply to this assignment, and why.
    pub not_applied: Vec<SourceValue>,
    /// The final value as the templates see it, as YAML (`None`: no source gives the key).
    pub value: Option<String>,
}

/// A config filter's labels that matter, as `key=value`.
fn filter_labels(filter: &Labels) -> Vec<String> {
    filter
        .iter()
        .filter(|(k, _)| {
            *k != labels::FLUX_NAME && *k != labels::FLUX_NAMESPACE && *k != labels::PLATFORM_CONFIG
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Why a config filter does not match, or `None` if it does.
fn mismatch(filter: &Labels, ct: &Object<ClusterTypeSpec>, target: &DeploymentTarget) -> Option<String> {
    for (key, value) in filter {
        if key == labels::FLUX_NAME || key == labels::FLUX_NAMESPACE || key == labels::PLATFORM_CONFIG {
            continue;
        }
        let single = |k: &str, v: &String| {
            let mut one = Labels::new();
            one.insert(k.to_owned(), v.clone());
            labels_match(&one, ct, target)
        };
        if !single(key, value) {
            return Some(match key.as_str() {
                labels::CLUSTER_TYPE => {
                    format!("cluster-type={value}, but the cluster type is {}", ct.name())
                }
                labels::DEPLOYMENT_TARGET => {
                    format!("deployment-target={value}, but the target is {}", target.name)
                }
                labels::WORKLOAD => format!(
                    "workload={value}, but the target's workload is {}",
                    target.workload
                ),
                _ => match (ct.labels().get(key), target.labels.get(key)) {
                    (None, None) => format!(
                        "{key}={value}, but neither the cluster type nor the target has a {key} label"
                    ),
                    (on_ct, on_target) => {
                        let has = |v: Option<&String>| {
                            v.map_or(format!("no {key} label"), |v| format!("{key}={v}"))
                        };
                        format!(
                            "{key}={value}, but the cluster type has {} and the target has {}",
                            has(on_ct),
                            has(on_target)
                        )
                    }
                },
            });
        }
    }
    None
}

/// Explains config key `key` for the assignment of `target` on `cluster_type`.
pub fn explain_config(
    env: &ScheduledEnvironment,
    ct: &Object<ClusterTypeSpec>,
    target: &DeploymentTarget,
    key: &str,
    render_value: impl Fn(&Value) -> String,
) -> ConfigExplanation {
    let merged = env.config.merge_for(ct, target);
    // What the renderer merged, in order: the effect of each applying source.
    let mut so_far: Option<Value> = None;
    let mut effects = Vec::new();
    for c in merged.provenance.get(key).into_iter().flatten() {
        let (effect, next) = match &so_far {
            None => (Effect::Sets, c.value.clone()),
            Some(prev) => {
                let kind = match (prev, &c.value) {
                    (Value::List(_), Value::List(_)) | (Value::Map(_), Value::Map(_)) => Effect::Merges,
                    _ => Effect::Replaces,
                };
                (kind, merge(prev, &c.value))
            }
        };
        effects.push(effect);
        so_far = Some(next);
    }
    let mut applied = Vec::new();
    let mut not_applied = Vec::new();
    for (source, filter, raw) in env.config.entries_for_key(key) {
        let reason = mismatch(filter, ct, target);
        let value = SourceValue {
            source: source.to_string(),
            labels: filter_labels(filter),
            raw: raw.to_owned(),
            effect: None,
            not_applied_because: reason,
        };
        if value.not_applied_because.is_some() {
            not_applied.push(value);
        } else {
            applied.push(value);
        }
    }
    if applied.len() == effects.len() {
        for (value, effect) in applied.iter_mut().zip(effects) {
            value.effect = Some(effect);
        }
    }
    ConfigExplanation {
        deployment_target: target.name.clone(),
        cluster_type: ct.name().to_owned(),
        assigned: env
            .schedule
            .iter()
            .any(|a| a.deployment_target == target.name && a.cluster_type == ct.name()),
        key: key.to_owned(),
        applied,
        not_applied,
        value: merged.values.get(key).map(render_value),
    }
}

/// Two or more applying ConfigMaps that give different scalar values for one key; the last
/// (by the original's merge order) silently wins.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Conflict {
    /// The config key.
    pub key: String,
    /// Each source and its raw value, in merge order.
    pub values: Vec<(String, String)>,
    /// The ConfigMap each value is from and the key of its `data` that gives it (for
    /// diagnostics that name their files and fields).
    #[serde(skip)]
    pub config_maps: Vec<(String, String)>,
}

/// The conflicts in one merged configuration.
pub fn conflicts(config: &ConfigData) -> Vec<Conflict> {
    let mut out = Vec::new();
    for (key, contributions) in &config.provenance {
        let scalars: Vec<_> = contributions
            .iter()
            .filter(|c| !matches!(c.value, Value::List(_) | Value::Map(_)))
            .collect();
        if scalars.len() < 2 {
            continue;
        }
        let first = &scalars[0].raw;
        if scalars.iter().any(|c| &c.raw != first) {
            out.push(Conflict {
                key: key.clone(),
                values: scalars
                    .iter()
                    .map(|c| (c.source.to_string(), c.raw.clone()))
                    .collect(),
                config_maps: scalars
                    .iter()
                    .map(|c| {
                        let data_key = c.source.data_key(key);
                        (c.source.config_map().to_owned(), data_key.to_owned())
                    })
                    .collect(),
            });
        }
    }
    out
}

/// A config value as YAML, as `toYaml` would print it (and `kalypso explain --config` shows it).
pub fn value_yaml(value: &Value) -> String {
    let bytes = kalypso_goyaml::marshal_v3(value).unwrap_or_default();
    String::from_utf8_lossy(&bytes).trim_end_matches('\n').to_owned()
}

/// One platform config value of a cluster type and the ConfigMaps that gave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClusterTypeConfig {
    /// The config key.
    pub key: String,
    /// The value as the templates see it, as YAML.
    pub value: String,
    /// The source that decided the value: the last applying one (for a scalar it wins; a list
    /// or a map is merged into what the earlier ones gave).
    pub source: String,
    /// The earlier applying sources that have the key too, in merge order (replaced by, or
    /// merged into, `source`).
    pub overridden: Vec<String>,
}

/// A source as the cluster type's config names it: the ConfigMap (and, for an Azure export,
/// its key).
fn source_name(source: &crate::config::ConfigSource) -> String {
    match source {
        crate::config::ConfigSource::ConfigMap { name } => name.clone(),
        crate::config::ConfigSource::AzureAppConfig { map, key } => format!("{map} key {key}"),
    }
}

/// The platform config of cluster type `ct` of `ns` on its own — what a deployment target
/// without labels of its own gets there (a ConfigMap that selects on a target's labels, its
/// workload or its name applies to some targets only; `kalypso explain TARGET --config KEY`
/// answers for one assignment) — with the ConfigMap that set each value and the ones it
/// overrides, by the same merge the renderer runs. Sorted by key.
pub fn cluster_type_config(
    ns: &crate::model::Namespace,
    ct: &Object<ClusterTypeSpec>,
) -> Vec<ClusterTypeConfig> {
    let sources = crate::config::ConfigSources::new(ns, kalypso_template::config_value);
    let target = DeploymentTarget {
        name: String::new(),
        workload: String::new(),
        workspace: String::new(),
        labels: Labels::new(),
        spec: kalypso_api::DeploymentTargetSpec {
            environment: ns.name.clone(),
            manifests: Labels::new(),
            config_schemas: Vec::new(),
        },
        origin: crate::diag::Origin::new("", 0),
    };
    let merged = sources.merge_for(ct, &target);
    merged
        .values
        .iter()
        .map(|(key, value)| {
            let contributions = merged.provenance.get(key).map(Vec::as_slice).unwrap_or_default();
            let (last, earlier) =
                contributions
                    .split_last()
                    .map_or((String::new(), Vec::new()), |(last, earlier)| {
                        (
                            source_name(&last.source),
                            earlier.iter().map(|c| source_name(&c.source)).collect(),
                        )
                    });
            ClusterTypeConfig {
                key: key.clone(),
                value: value_yaml(value),
                source: last,
                overridden: earlier,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{SourceFile, SourceTree};

    const CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n  labels:\n    platform-config: \"true\"\nLABELS\ndata:\nDATA";

    fn config_map(name: &str, labels: &str, data: &str) -> String {
        CONFIG
            .replace("NAME", name)
            .replace("LABELS", labels)
            .replace("DATA", data)
    }

    #[test]
    fn a_cluster_type_config_names_the_config_map_of_each_value_and_the_ones_it_overrides() {
        let files = vec![
            SourceFile::new(
                "cluster-types/small.yaml",
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: small\n  labels:\n    size: small\nspec:\n  reconciler: arc-flux\n  namespaceService: default\n  configType: configmap\n"
                    .as_bytes()
                    .to_vec(),
            ),
            SourceFile::new(
                "configs/a.yaml",
                config_map("a-all", "", "  REGION: west\n  DB: shared\n").into_bytes(),
            ),
            SourceFile::new(
                "configs/b.yaml",
                config_map("b-small", "    size: small", "  DB: small-db\n").into_bytes(),
            ),
            SourceFile::new(
                "configs/c.yaml",
                config_map("c-large", "    size: large", "  DB: large-db\n").into_bytes(),
            ),
        ];
        let inputs = crate::pipeline::Inputs {
            environment: SourceTree::new("dev", files),
            ..crate::pipeline::Inputs::default()
        };
        let mut diagnostics = crate::Diagnostics::new();
        let ns = crate::load_namespace("dev", &inputs, &mut diagnostics);
        assert!(ns.cluster_types.contains_key("small"), "{diagnostics:?}");
        let config = cluster_type_config(&ns, &ns.cluster_types["small"]);
        let rows: Vec<(&str, &str, &str, Vec<&str>)> = config
            .iter()
            .map(|c| {
                (
                    c.key.as_str(),
                    c.value.as_str(),
                    c.source.as_str(),
                    c.overridden.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("DB", "small-db", "b-small", vec!["a-all"]),
                ("REGION", "west", "a-all", vec![]),
            ]
        );
    }
}
