//! Warnings about parts of a control plane that have no effect: a SchedulingPolicy that
//! selects nothing, a deployment target placed on no cluster type, a platform ConfigMap that
//! applies to no assignment, a config key no template reads.
//!
//! None of these is an error for the original scheduler, and each is often a typo in a label
//! or a selector that silently drops a workload from the fleet. A warning is only given when
//! it is certain: config keys are only checked when every template reads `.ConfigData` by
//! key (a template that hands the whole config or the whole data to a function may read any
//! key). `validate --strict` turns the warnings into failures.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use kalypso_api::{ConfigMapData, Kind, Labels, Manifest, labels};

use crate::config::labels_match;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::Object;
use crate::pipeline::ScheduledEnvironment;
use crate::unfold::DeploymentTarget;

/// Adds the warnings about `env` to `diagnostics`, in a stable order: policies, deployment
/// targets, ConfigMaps, config keys. Nothing when `diagnostics` has errors: an object that
/// failed to load (a ClusterType, a policy) might have been what was missing.
pub fn warn(env: &ScheduledEnvironment, diagnostics: &mut Diagnostics) {
    if diagnostics.has_errors() {
        return;
    }
    for warning in warnings(env) {
        diagnostics.push(warning);
    }
}

/// The warnings about `env` (see [`warn`]), assuming it loaded without errors.
pub fn warnings(env: &ScheduledEnvironment) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    // The policies no assignment names: the assignments are read until every policy was
    // named (in a fleet, after a few of its hundreds of thousands of assignments).
    let mut unused: BTreeSet<&str> = env.schedule.policies.keys().map(String::as_str).collect();
    for assignment in env.schedule.iter() {
        if unused.is_empty() {
            break;
        }
        for policy in &assignment.policies {
            unused.remove(policy.as_str());
        }
    }
    policies(env, &unused, &mut out);
    // A policy with an invalid selector (an error already) might have placed anything: what
    // depends on the assignments is not certain.
    if env.schedule.policies.len() == env.namespace.policies.len() {
        // One pass over the assignments for what the other checks ask of them.
        let pairs = Pairs::of(env);
        targets(env, &pairs, &mut out);
        let applying: BTreeMap<&str, bool> = platform_config_maps(env)
            .map(|(name, map)| (name.as_str(), pairs.any_matches(map.labels())))
            .collect();
        config_maps(env, &applying, &mut out);
        config_keys(env, &applying, &mut out);
    }
    out
}

fn policies(env: &ScheduledEnvironment, unused: &BTreeSet<&str>, out: &mut Vec<Diagnostic>) {
    for (name, policy) in &env.schedule.policies {
        if !unused.contains(name.as_str()) {
            continue;
        }
        let Some(object) = env.namespace.policies.get(name) else {
            continue;
        };
        let targets = env
            .targets
            .values()
            .filter(|t| policy.selects_target(t, env.name()))
            .count();
        let cluster_types = env
            .namespace
            .cluster_types
            .values()
            .filter(|ct| policy.cluster_type_selector.matches(ct.labels()))
            .count();
        let (field, why) = match (targets, cluster_types) {
            (0, _) => (
                "spec.deploymentTargetSelector",
                "no deployment target of this environment matches its deploymentTargetSelector",
            ),
            (_, 0) => (
                "spec.clusterTypeSelector",
                "no cluster type matches its clusterTypeSelector",
            ),
            // The selectors match, but nothing came of it: leave it to `explain`.
            _ => continue,
        };
        out.push(
            Diagnostic::warning(Code::PolicySelectsNothing, format!("schedules nothing: {why}"))
                .at(&object.origin)
                .on(Kind::SchedulingPolicy, name.clone())
                .field(field),
        );
    }
}

fn targets(env: &ScheduledEnvironment, pairs: &Pairs<'_>, out: &mut Vec<Diagnostic>) {
    for (name, target) in &env.targets {
        if target.spec.environment != env.name() || pairs.placed(name) {
            continue;
        }
        out.push(
            Diagnostic::warning(
                Code::TargetPlacedNowhere,
                format!(
                    "placed on no cluster type: no SchedulingPolicy selects it together with a cluster type \
                     (`kalypso explain <CONTROL_PLANE> --env {} --target {name}` shows why)",
                    env.name()
                ),
            )
            .at(&target.origin)
            .on(Kind::DeploymentTarget, name.clone()),
        );
    }
}

/// The platform ConfigMaps (label `platform-config: "true"`), by name.
fn platform_config_maps(
    env: &ScheduledEnvironment,
) -> impl Iterator<Item = (&String, &Object<ConfigMapData>)> {
    env.namespace
        .config_maps
        .iter()
        .filter(|(_, m)| m.labels().get(labels::PLATFORM_CONFIG).map(String::as_str) == Some("true"))
}

/// The assignments as a ConfigMap's labels see them: a cluster type and a deployment
/// target. A fleet has hundreds of thousands of assignments but far fewer distinct pairs of
/// label sets, and a filter that names neither a cluster type nor a target sees only labels.
struct Pairs<'e> {
    /// Every assignment, by cluster type name (a filter naming one sees only those).
    by_cluster_type: HashMap<&'e str, Vec<Pair<'e>>>,
    /// Every assignment, by deployment target name (a target of the environment that no
    /// assignment has: an empty list).
    by_target: HashMap<&'e str, Vec<Pair<'e>>>,
    /// One assignment per distinct (cluster type labels, target labels).
    by_labels: Vec<Pair<'e>>,
    /// The targets of assignments whose cluster type or target the environment does not
    /// have (none, when the schedule is the environment's own).
    unknown: BTreeSet<&'e str>,
}

type ClusterType = Object<kalypso_api::ClusterTypeSpec>;

/// An assignment as a ConfigMap's labels see it.
type Pair<'e> = (&'e ClusterType, &'e DeploymentTarget);

impl<'e> Pairs<'e> {
    fn of(env: &'e ScheduledEnvironment) -> Pairs<'e> {
        // Each cluster type and target with the number of its set of labels.
        let mut label_sets: HashMap<&'e Labels, usize> = HashMap::new();
        let mut intern = |labels: &'e Labels| {
            let next = label_sets.len();
            *label_sets.entry(labels).or_insert(next)
        };
        let cluster_types: HashMap<&str, (&ClusterType, usize)> = env
            .namespace
            .cluster_types
            .iter()
            .map(|(name, ct)| (name.as_str(), (ct, intern(ct.labels()))))
            .collect();
        let mut targets: HashMap<&str, (&DeploymentTarget, usize, Vec<Pair<'e>>)> = env
            .targets
            .iter()
            .map(|(name, t)| (name.as_str(), (t, intern(&t.labels), Vec::new())))
            .collect();
        let mut seen: HashSet<(usize, usize)> = HashSet::new();
        let mut by_cluster_type: HashMap<&'e str, Vec<Pair<'e>>> = HashMap::new();
        let mut by_labels = Vec::new();
        let mut unknown = BTreeSet::new();
        // The assignments come in tree order, a cluster type's together: each cluster type is
        // looked up once.
        let mut assignments = env.schedule.iter().peekable();
        while let Some(first) = assignments.peek() {
            let name = first.cluster_type.as_str();
            let cluster_type = cluster_types.get(name).copied();
            let mut pairs = Vec::new();
            while let Some(a) = assignments.next_if(|a| a.cluster_type == name) {
                let (Some((ct, ct_labels)), Some((target, target_labels, of_target))) =
                    (cluster_type, targets.get_mut(a.deployment_target.as_str()))
                else {
                    unknown.insert(a.deployment_target.as_str());
                    continue;
                };
                pairs.push((ct, *target));
                of_target.push((ct, *target));
                if seen.insert((ct_labels, *target_labels)) {
                    by_labels.push((ct, *target));
                }
            }
            if !pairs.is_empty() {
                by_cluster_type.entry(name).or_default().extend(pairs);
            }
        }
        Pairs {
            by_cluster_type,
            by_target: targets
                .into_iter()
                .map(|(name, (_, _, pairs))| (name, pairs))
                .collect(),
            by_labels,
            unknown,
        }
    }

    /// Whether an assignment places deployment target `name`.
    fn placed(&self, name: &str) -> bool {
        self.by_target.get(name).is_some_and(|pairs| !pairs.is_empty()) || self.unknown.contains(name)
    }

    /// Whether labels `filter` select at least one assignment.
    fn any_matches(&self, filter: &Labels) -> bool {
        let candidates = named(filter, labels::CLUSTER_TYPE, &self.by_cluster_type)
            .or_else(|| named(filter, labels::DEPLOYMENT_TARGET, &self.by_target))
            .unwrap_or(&self.by_labels);
        candidates.iter().any(|(ct, t)| labels_match(filter, ct, t))
    }
}

/// The assignments of the cluster type (or target) a filter names under `key`, if it names
/// one: the only ones it can match.
fn named<'a, 'e>(
    filter: &Labels,
    key: &str,
    index: &'a HashMap<&'e str, Vec<Pair<'e>>>,
) -> Option<&'a [Pair<'e>]> {
    filter
        .get(key)
        .map(|name| index.get(name.as_str()).map_or(&[][..], Vec::as_slice))
}

/// Labels a ConfigMap's filter does not match on (see [`crate::config`]).
fn ignored_key(key: &str) -> bool {
    key == labels::FLUX_NAME || key == labels::FLUX_NAMESPACE || key == labels::PLATFORM_CONFIG
}

fn config_maps(env: &ScheduledEnvironment, applying: &BTreeMap<&str, bool>, out: &mut Vec<Diagnostic>) {
    // Without assignments every ConfigMap matches nothing; the targets' warnings say why.
    if env.schedule.assignments.is_empty() {
        return;
    }
    for (name, map) in platform_config_maps(env) {
        if applying.get(name.as_str()).copied().unwrap_or(false) {
            continue;
        }
        out.push(
            Diagnostic::warning(
                Code::ConfigMapMatchesNothing,
                format!(
                    "applies to no assignment: no assignment matches all of its labels ({})",
                    map.labels()
                        .iter()
                        .filter(|(k, _)| !ignored_key(k))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .at(&map.origin)
            .on(Kind::ConfigMap, name.clone())
            .field("metadata.labels"),
        );
    }
}

fn config_keys(env: &ScheduledEnvironment, applying: &BTreeMap<&str, bool>, out: &mut Vec<Diagnostic>) {
    let mut read = BTreeSet::new();
    for template in env.namespace.templates.values() {
        for manifest in &template.spec.manifests {
            let Manifest::Text(text) = manifest else {
                return;
            };
            match keys_read(text) {
                Some(keys) => read.extend(keys),
                None => return,
            }
        }
    }
    if env.namespace.templates.is_empty() {
        return;
    }
    for (name, map) in platform_config_maps(env) {
        if !applying.get(name.as_str()).copied().unwrap_or(false) {
            continue;
        }
        for key in map.spec.data.keys().filter(|k| !read.contains(k.as_str())) {
            out.push(
                Diagnostic::warning(
                    Code::ConfigKeyUnused,
                    format!(
                        "config key {key:?} is read by no Template (they read .ConfigData.{})",
                        if read.is_empty() {
                            "nothing".to_owned()
                        } else {
                            read.iter().cloned().collect::<Vec<_>>().join(", .ConfigData.")
                        }
                    ),
                )
                .at(&map.origin)
                .on(Kind::ConfigMap, name.clone())
                .field(format!("data.{key}")),
            );
        }
    }
}

/// The config keys a template's text reads, when that is certain: every `ConfigData` is
/// `.ConfigData.<key>`, and no action hands the whole data (`.` or `$` alone) anywhere.
/// `None` when the template may read other keys.
pub fn keys_read(text: &str) -> Option<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after.find("}}")?;
        let action = &after[..end];
        rest = &after[end + 2..];
        if action.trim_start_matches('-').trim_start().starts_with("/*") {
            continue;
        }
        let bytes = action.as_bytes();
        let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        for (i, &b) in bytes.iter().enumerate() {
            let prev = i.checked_sub(1).map(|p| bytes[p]);
            let next = bytes.get(i + 1).copied();
            match b {
                // `.` alone (not `.Field`, not `x.y`, not a number, not `)`.Field): the whole data.
                b'.' if !next.is_some_and(ident)
                    && !prev.is_some_and(|p| ident(p) || p == b')' || p == b'"') =>
                {
                    return None;
                }
                // `$` alone, or `$.Field`: the root data (`$x` is a variable).
                b'$' if !next.is_some_and(|n| ident(n) || n == b'.') => return None,
                _ => {}
            }
        }
        let mut search = action;
        while let Some(at) = search.find("ConfigData") {
            let tail = &search[at + "ConfigData".len()..];
            let key: String = tail
                .strip_prefix('.')?
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if key.is_empty() {
                return None;
            }
            keys.insert(key);
            search = tail;
        }
    }
    Some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Option<Vec<String>> {
        keys_read(text).map(|k| k.into_iter().collect())
    }

    #[test]
    fn keys_are_read_by_name_only_when_certain() {
        assert_eq!(
            keys("a: {{ .ConfigData.REGION }}\nb: {{ $.ConfigData.db_url | quote }}\n{{ .Namespace }}"),
            Some(vec!["REGION".to_owned(), "db_url".to_owned()])
        );
        assert_eq!(keys("no actions"), Some(vec![]));
        assert_eq!(keys("{{/* .ConfigData and . */}}{{ .Repo }}"), Some(vec![]));
        assert_eq!(keys("{{ printf \"%.2f\" 1.5 }}"), Some(vec![]));
        // The whole config, the whole data, or a key chosen at run time: any key may be read.
        assert_eq!(keys("{{ toYaml .ConfigData }}"), None);
        assert_eq!(keys("{{ range $k, $v := .ConfigData }}{{ $k }}{{ end }}"), None);
        assert_eq!(keys("{{ index .ConfigData \"REGION\" }}"), None);
        assert_eq!(keys("{{ toYaml . }}"), None);
        assert_eq!(keys("{{ template \"t\" . }}"), None);
        assert_eq!(keys("{{ toYaml $ }}"), None);
        assert_eq!(keys("{{ with .ConfigData }}{{ .REGION }}{{ end }}"), None);
        assert_eq!(keys("{{ .ConfigData"), None);
    }
}
