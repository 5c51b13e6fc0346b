//! Platform configuration: which ConfigMaps apply to an assignment, how their values merge,
//! and where every value came from.
//!
//! For each assignment the original takes the ConfigMaps labelled `platform-config: "true"`
//! in name order, keeps those whose labels match the cluster type and deployment target,
//! converts each value (quoted strings unwrapped, YAML lists and maps parsed) and merges it
//! into what earlier maps gave for the same key. Then every ConfigMap named
//! `azure-app-config*` contributes keys of the form `label.value.label.value.KEY`, matched the
//! same way. Maps merge recursively, lists merge items by their `name`, anything else is
//! replaced by the later value.
//!
//! The result depends only on which sources match, and that depends only on the cluster
//! type and on the deployment target's values for the few label keys the sources use.
//! [`ConfigSources::target_key`] computes the target's part of that key, so a fleet with
//! thousands of assignments merges each distinct configuration once.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::{HashMap, HashMapExt};

use kalypso_api::{ClusterTypeSpec, ConfigMapData, Labels, labels};
use kalypso_gotmpl::{List, Map, MapKey, Str, Type, Value};

use crate::model::{Namespace, Object};
use crate::unfold::DeploymentTarget;

/// The prefix of ConfigMaps read as Azure App Configuration exports.
pub const AZURE_APP_CONFIG_PREFIX: &str = "azure-app-config";

/// Where a config value came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigSource {
    /// A key of a `platform-config` ConfigMap.
    ConfigMap {
        /// The ConfigMap.
        name: String,
    },
    /// A labelled key of an `azure-app-config*` ConfigMap.
    AzureAppConfig {
        /// The ConfigMap.
        map: String,
        /// The full key, e.g. `region.west-us.DATABASE_URL`.
        key: String,
    },
}

impl ConfigSource {
    /// The name of the ConfigMap the value is from.
    pub fn config_map(&self) -> &str {
        match self {
            ConfigSource::ConfigMap { name } => name,
            ConfigSource::AzureAppConfig { map, .. } => map,
        }
    }

    /// The key of the ConfigMap's `data` that gives config key `key`.
    pub fn data_key<'k>(&'k self, key: &'k str) -> &'k str {
        match self {
            ConfigSource::ConfigMap { .. } => key,
            ConfigSource::AzureAppConfig { key: full, .. } => full,
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::ConfigMap { name } => write!(f, "ConfigMap {name}"),
            ConfigSource::AzureAppConfig { map, key } => write!(f, "ConfigMap {map} key {key}"),
        }
    }
}

/// One value a source gave for a config key.
#[derive(Clone, Debug)]
pub struct Contribution {
    /// Where it came from.
    pub source: ConfigSource,
    /// The raw ConfigMap string.
    pub raw: String,
    /// The converted value that was merged.
    pub value: Value,
}

/// The merged platform configuration of an assignment, with provenance.
#[derive(Clone, Debug)]
pub struct ConfigData {
    /// The merged values, keyed by config key, in key order.
    pub values: BTreeMap<String, Value>,
    /// Every contribution to each key, in merge order (the last scalar wins).
    pub provenance: BTreeMap<String, Vec<Contribution>>,
}

impl ConfigData {
    /// The values as Go's `map[string]interface {}` (a fresh map: templates may mutate it).
    pub fn to_map(&self) -> Map {
        Map::string_interface(self.values.iter().map(|(k, v)| (k.as_str(), v.deep_copy())))
    }

    /// The values as a frozen `map[string]interface {}` (see `Map::is_frozen`): one map that
    /// every assignment with this config can share, for templates that cannot change maps.
    pub fn frozen_map(&self) -> Map {
        Map::string_interface(self.values.iter().map(|(k, v)| (k.as_str(), v.clone()))).frozen_copy()
    }
}

/// One source of config entries (a ConfigMap, or one labelled key of an Azure export) with
/// the labels that decide whether it applies.
#[derive(Clone, Debug)]
struct ConfigEntries {
    source: ConfigSource,
    filter: Labels,
    entries: Vec<(String, String, Value)>,
}

/// The config sources of a namespace, prepared once: values converted, filters extracted.
#[derive(Clone, Debug, Default)]
pub struct ConfigSources {
    sources: Vec<ConfigEntries>,
    /// The positions of the sources whose filter names a `cluster-type`, by that name (in
    /// merge order): a source that names another cluster type never matches, so an
    /// assignment's candidates are these of its cluster type and [`Self::any_cluster_type`].
    by_cluster_type: HashMap<String, Vec<usize>>,
    /// The positions of the sources whose filter names no cluster type, in merge order.
    any_cluster_type: Vec<usize>,
    /// Label keys that sources match against cluster-type and target labels, sorted.
    relevant_keys: Vec<String>,
    uses_target_name: bool,
    uses_workload: bool,
}

/// Keys a config filter never matches on.
fn ignored_key(key: &str) -> bool {
    key == labels::FLUX_NAME || key == labels::FLUX_NAMESPACE || key == labels::PLATFORM_CONFIG
}

/// The original's label match between a config source (or ConfigSchema) and an assignment:
/// `cluster-type`, `deployment-target` and `workload` must equal the cluster type's name,
/// the target's name and its workload; every other key must equal the cluster type's or the
/// target's label of that key. A missing label reads as `""`, as a Go map lookup does
/// (`isConfigForClusterTypeAndTarget` in the original's `controllers/assignment_controller.go`
/// compares `clusterType.Labels[key]` and `deploymentTarget.Labels[key]`), so `zone: ""`
/// matches an assignment whose cluster type or target has no `zone` label.
pub fn labels_match(
    filter: &Labels,
    cluster_type: &Object<ClusterTypeSpec>,
    target: &DeploymentTarget,
) -> bool {
    filter
        .iter()
        .filter(|(k, _)| !ignored_key(k))
        .all(|(key, value)| match key.as_str() {
            labels::CLUSTER_TYPE => value == cluster_type.name(),
            labels::DEPLOYMENT_TARGET => *value == target.name,
            labels::WORKLOAD => go_lookup(&target.labels, labels::WORKLOAD) == value,
            _ => go_lookup(cluster_type.labels(), key) == value || go_lookup(&target.labels, key) == value,
        })
}

/// Go's `m[key]` on a `map[string]string`: the value, or `""` when the key is absent.
fn go_lookup<'a>(labels: &'a Labels, key: &str) -> &'a str {
    labels.get(key).map_or("", String::as_str)
}

/// Parses an `azure-app-config` key `l1.v1.l2.v2.KEY` into its labels and config key. A
/// middle segment without a partner is dropped, as in the original.
pub fn parse_azure_key(full: &str) -> (Labels, String) {
    let mut segments: Vec<&str> = full.split('.').collect();
    let key = segments.pop().unwrap_or_default().to_owned();
    let labels = segments
        .chunks_exact(2)
        .map(|pair| (pair[0].to_owned(), pair[1].to_owned()))
        .collect();
    (labels, key)
}

impl ConfigSources {
    /// Collects the namespace's config sources in the original's order: `platform-config`
    /// ConfigMaps by name, then the keys of `azure-app-config*` ConfigMaps (by map name, then
    /// key length, then key — the original leaves equal lengths unordered).
    pub fn new(ns: &Namespace, convert: impl Fn(&str) -> Value) -> ConfigSources {
        let mut sources = Vec::new();
        let entries = |data: &ConfigMapData| -> Vec<(String, String, Value)> {
            data.data
                .iter()
                .map(|(k, raw)| (k.clone(), raw.clone(), convert(raw)))
                .collect()
        };
        for (name, map) in &ns.config_maps {
            if map.labels().get(labels::PLATFORM_CONFIG).map(String::as_str) == Some("true") {
                sources.push(ConfigEntries {
                    source: ConfigSource::ConfigMap { name: name.clone() },
                    filter: map.labels().clone(),
                    entries: entries(&map.spec),
                });
            }
        }
        for (name, map) in ns
            .config_maps
            .iter()
            .filter(|(n, _)| n.starts_with(AZURE_APP_CONFIG_PREFIX))
        {
            let mut keys: Vec<&String> = map.spec.data.keys().collect();
            keys.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
            for full in keys {
                let raw = &map.spec.data[full];
                let (filter, key) = parse_azure_key(full);
                sources.push(ConfigEntries {
                    source: ConfigSource::AzureAppConfig {
                        map: name.clone(),
                        key: full.clone(),
                    },
                    filter,
                    entries: vec![(key, raw.clone(), convert(raw))],
                });
            }
        }
        let mut relevant_keys: Vec<String> = sources
            .iter()
            .flat_map(|s| s.filter.keys())
            .filter(|k| !ignored_key(k) && *k != labels::CLUSTER_TYPE)
            .cloned()
            .collect();
        relevant_keys.sort();
        relevant_keys.dedup();
        let uses_target_name = relevant_keys.iter().any(|k| k == labels::DEPLOYMENT_TARGET);
        let uses_workload = relevant_keys.iter().any(|k| k == labels::WORKLOAD);
        let mut by_cluster_type: HashMap<String, Vec<usize>> = HashMap::new();
        let mut any_cluster_type = Vec::new();
        for (i, source) in sources.iter().enumerate() {
            match source.filter.get(labels::CLUSTER_TYPE) {
                Some(name) => by_cluster_type.entry(name.clone()).or_default().push(i),
                None => any_cluster_type.push(i),
            }
        }
        ConfigSources {
            sources,
            by_cluster_type,
            any_cluster_type,
            relevant_keys,
            uses_target_name,
            uses_workload,
        }
    }

    /// What decides, with the cluster type, which sources match an assignment to `target`:
    /// the target's values of the label keys the sources use. Two assignments of one
    /// cluster type have the same configuration exactly when their targets' keys are equal,
    /// so the key is computed once per target, not per assignment.
    pub fn target_key<'t>(&self, target: &'t DeploymentTarget) -> TargetKey<'t> {
        let mut values: Vec<Option<&'t str>> = self
            .relevant_keys
            .iter()
            .map(|k| target.labels.get(k).map(String::as_str))
            .collect();
        if self.uses_target_name {
            values.push(Some(target.name.as_str()));
        }
        if self.uses_workload {
            values.push(target.labels.get(labels::WORKLOAD).map(String::as_str));
        }
        TargetKey(values)
    }

    /// Merges the sources that match the assignment.
    pub fn merge_for(&self, cluster_type: &Object<ClusterTypeSpec>, target: &DeploymentTarget) -> ConfigData {
        let mut values: BTreeMap<String, Value> = BTreeMap::new();
        let mut provenance: BTreeMap<String, Vec<Contribution>> = BTreeMap::new();
        let named: &[usize] = self
            .by_cluster_type
            .get(cluster_type.name())
            .map_or(&[], Vec::as_slice);
        for source in merged_in_order(&self.any_cluster_type, named)
            .map(|i| &self.sources[i])
            .filter(|s| labels_match(&s.filter, cluster_type, target))
        {
            for (key, raw, value) in &source.entries {
                let merged = match values.get(key) {
                    Some(old) => merge(old, value),
                    None => value.clone(),
                };
                values.insert(key.clone(), merged);
                provenance.entry(key.clone()).or_default().push(Contribution {
                    source: source.source.clone(),
                    raw: raw.clone(),
                    value: value.clone(),
                });
            }
        }
        ConfigData { values, provenance }
    }

    /// Every source that has `key`, in merge order: the source, its label filter, and the
    /// raw value.
    pub fn entries_for_key(&self, key: &str) -> Vec<(&ConfigSource, &Labels, &str)> {
        self.sources
            .iter()
            .flat_map(|s| {
                s.entries
                    .iter()
                    .filter(|(k, _, _)| k == key)
                    .map(move |(_, raw, _)| (&s.source, &s.filter, raw.as_str()))
            })
            .collect()
    }

    /// Whether any source exists.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

/// The positions of `a` and `b` (each ascending, no position in both) in ascending order.
fn merged_in_order<'a>(a: &'a [usize], b: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
    let (mut a, mut b) = (a.iter().copied().peekable(), b.iter().copied().peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some(&x), Some(&y)) if y < x => b.next(),
        (Some(_), _) => a.next(),
        (None, _) => b.next(),
    })
}

/// A target's part of what identifies a distinct configuration (see
/// [`ConfigSources::target_key`]); the cluster type is the other.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey<'t>(Vec<Option<&'t str>>);

/// The original's merge of a later config value `b` into an earlier one `a`.
///
/// Lists merge item by item: a map item of `b` is merged into *every* map item of `a` with an
/// equal `name` (two items without `name` count as equal, as in the original); unmatched and
/// non-map items are appended. Maps merge key by key, recursively. Anything else: `b` wins.
/// Inputs are never mutated.
pub fn merge(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::List(la), Value::List(lb)) => {
            let mut items: Vec<Value> = la.items().to_vec();
            for item in lb.items() {
                let mut matched = false;
                if let Value::Map(incoming) = item {
                    let wanted = incoming.get(&name_key());
                    for existing in items.iter_mut() {
                        if let Value::Map(current) = existing
                            && names_equal(current.get(&name_key()).as_ref(), wanted.as_ref())
                        {
                            *existing = merge(&Value::Map(current.clone()), item);
                            matched = true;
                        }
                    }
                }
                if !matched {
                    items.push(item.clone());
                }
            }
            Value::List(List::new(la.elem_type().clone(), items))
        }
        (Value::Map(ma), Value::Map(mb)) => {
            let mut entries = (*ma.snapshot()).clone();
            for (k, v) in mb.snapshot().iter() {
                let merged = match entries.get(k) {
                    Some(old) => merge(old, v),
                    None => v.clone(),
                };
                entries.insert(k.clone(), merged);
            }
            Value::Map(Map::from_entries(
                ma.key_type().clone(),
                ma.elem_type().clone(),
                entries,
            ))
        }
        _ => b.clone(),
    }
}

fn name_key() -> MapKey {
    MapKey::String(Str::from("name"))
}

/// Go's `==` on two interface values holding scalars; absent equals absent and `null` (both
/// are nil in Go). A list or map name (Go panics on `==`) equals nothing.
fn names_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    let a = a.filter(|v| !matches!(v, Value::Nil));
    let b = b.filter(|v| !matches!(v, Value::Nil));
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => match (MapKey::from_value(a), MapKey::from_value(b)) {
            (Some(ka), Some(kb)) => ka == kb,
            _ => false,
        },
        _ => false,
    }
}

/// A shared, immutable configuration, as cached per cluster type and [`TargetKey`].
pub type SharedConfig = Arc<ConfigData>;

/// The type of a config map: `map[string]interface {}`.
pub fn config_map_type() -> Type {
    Type::string_interface_map()
}

#[cfg(test)]
mod tests {
    use kalypso_gotmpl::IntKind;

    use super::*;

    fn ymap(entries: &[(&str, Value)]) -> Value {
        Value::Map(Map::from_entries(
            Type::Interface,
            Type::Interface,
            entries
                .iter()
                .map(|(k, v)| (MapKey::String(Str::from(*k)), v.clone()))
                .collect(),
        ))
    }

    fn list(items: Vec<Value>) -> Value {
        Value::List(List::interfaces(items))
    }

    fn show(v: &Value) -> String {
        match v {
            Value::String(s) => s.to_string(),
            Value::Int(i, _) => i.to_string(),
            Value::List(l) => format!("[{}]", l.items().iter().map(show).collect::<Vec<_>>().join(" ")),
            Value::Map(m) => format!(
                "map[{}]",
                m.snapshot()
                    .iter()
                    .map(|(k, v)| format!("{}:{}", show(&k.to_value()), show(v)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            Value::Nil => "<nil>".into(),
            other => format!("{other:?}"),
        }
    }

    fn labels_of(l: &[(&str, &str)]) -> Labels {
        l.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_missing_label_matches_an_empty_value_as_a_go_map_lookup() {
        let mut ct = Object::new(
            "zoned",
            ClusterTypeSpec::default(),
            crate::Origin::new("dev/ct.yaml", 1),
        );
        ct.meta.labels = labels_of(&[("zone", "west")]);
        let mut target = DeploymentTarget {
            name: "app-t".into(),
            workload: "app".into(),
            workspace: "team".into(),
            labels: labels_of(&[("workload", "app")]),
            spec: Default::default(),
            origin: crate::Origin::new("w.yaml", 1),
        };
        // The target has no zone: "" == "".
        assert!(labels_match(&labels_of(&[("zone", "")]), &ct, &target));
        assert!(labels_match(&labels_of(&[("region", "")]), &ct, &target));
        // Both have a zone, neither empty.
        target.labels.insert("zone".into(), "east".into());
        assert!(!labels_match(&labels_of(&[("zone", "")]), &ct, &target));
        assert!(labels_match(&labels_of(&[("zone", "east")]), &ct, &target));
        // Names are never empty.
        assert!(!labels_match(&labels_of(&[("cluster-type", "")]), &ct, &target));
        assert!(!labels_match(
            &labels_of(&[("deployment-target", "")]),
            &ct,
            &target
        ));
        assert!(!labels_match(&labels_of(&[("workload", "")]), &ct, &target));
        // A target without a workload label (declared directly) has workload "".
        target.labels.remove("workload");
        assert!(labels_match(&labels_of(&[("workload", "")]), &ct, &target));
    }

    #[test]
    fn positions_merge_in_ascending_order() {
        let merged = |a: &[usize], b: &[usize]| merged_in_order(a, b).collect::<Vec<_>>();
        assert_eq!(merged(&[0, 2, 5], &[1, 3]), [0, 1, 2, 3, 5]);
        assert_eq!(merged(&[], &[4, 7]), [4, 7]);
        assert_eq!(merged(&[1, 9], &[]), [1, 9]);
        assert_eq!(merged(&[3], &[0, 1, 2]), [0, 1, 2, 3]);
    }

    /// Only the sources of the assignment's cluster type or of none are tried: the merge is
    /// that of every matching source, in the original's order.
    #[test]
    fn a_merge_takes_the_matching_sources_of_any_cluster_type_in_order() {
        let mut ns = Namespace::default();
        let maps = [
            ("a-any", &[][..], "1"),
            ("b-east", &[("cluster-type", "east")][..], "2"),
            ("c-west", &[("cluster-type", "west")][..], "3"),
            ("d-prod", &[("tier", "prod")][..], "4"),
            (
                "e-east-prod",
                &[("cluster-type", "east"), ("tier", "prod")][..],
                "5",
            ),
            (
                "f-east-dev",
                &[("cluster-type", "east"), ("tier", "dev")][..],
                "6",
            ),
        ];
        for (name, filter, value) in maps {
            let mut map = Object::new(
                name,
                ConfigMapData {
                    data: labels_of(&[("KEY", value), (name, value)]),
                },
                crate::Origin::new(format!("dev/{name}.yaml"), 1),
            );
            map.meta.labels = labels_of(filter);
            map.meta
                .labels
                .insert(labels::PLATFORM_CONFIG.into(), "true".into());
            ns.config_maps.insert(name.to_owned(), map);
        }
        let sources = ConfigSources::new(&ns, |raw| Value::from(raw));
        let target = DeploymentTarget {
            name: "app-t".into(),
            workload: "app".into(),
            workspace: "team".into(),
            labels: labels_of(&[("workload", "app"), ("tier", "prod")]),
            spec: Default::default(),
            origin: crate::Origin::new("w.yaml", 1),
        };
        for (cluster_type, expected) in [
            ("east", ["a-any", "b-east", "d-prod", "e-east-prod"].as_slice()),
            ("west", &["a-any", "c-west", "d-prod"]),
            ("north", &["a-any", "d-prod"]),
        ] {
            let ct = Object::new(
                cluster_type,
                ClusterTypeSpec::default(),
                crate::Origin::new("dev/ct.yaml", 1),
            );
            let merged = sources.merge_for(&ct, &target);
            let named: Vec<&str> = merged
                .values
                .keys()
                .filter(|k| *k != "KEY")
                .map(String::as_str)
                .collect();
            assert_eq!(named, expected, "{cluster_type}");
            let last = ns.config_maps[*expected.last().unwrap()].spec.data["KEY"].as_str();
            assert_eq!(
                show(&merged.values["KEY"]),
                last,
                "{cluster_type}: the last source wins"
            );
            let order: Vec<&str> = merged.provenance["KEY"]
                .iter()
                .map(|c| match &c.source {
                    ConfigSource::ConfigMap { name } => name.as_str(),
                    ConfigSource::AzureAppConfig { key, .. } => key.as_str(),
                })
                .collect();
            assert_eq!(order, expected, "{cluster_type}: the merge order");
        }
    }

    #[test]
    fn absent_and_null_names_are_equal_as_go_nil() {
        assert!(names_equal(None, Some(&Value::Nil)));
        assert!(names_equal(Some(&Value::Nil), None));
        assert!(names_equal(None, None));
        assert!(!names_equal(Some(&Value::from("a")), None));
        let list = Value::List(List::interfaces(vec![Value::from("a")]));
        assert!(
            !names_equal(Some(&list), Some(&list)),
            "Go panics; kalypso matches nothing"
        );
    }

    #[test]
    fn lists_merge_by_name_into_every_match() {
        let a = list(vec![
            ymap(&[("name", "x".into()), ("v", Value::Int(1, IntKind::Int))]),
            ymap(&[("v", Value::Int(2, IntKind::Int))]),
            ymap(&[("v", Value::Int(3, IntKind::Int))]),
            "plain".into(),
        ]);
        let b = list(vec![
            ymap(&[("name", "x".into()), ("w", "new".into())]),
            ymap(&[("w", "nameless".into())]),
            ymap(&[("name", "y".into())]),
            "more".into(),
        ]);
        assert_eq!(
            show(&merge(&a, &b)),
            "[map[name:x v:1 w:new] map[v:2 w:nameless] map[v:3 w:nameless] plain map[name:y] more]"
        );
        assert_eq!(show(&a).matches("w:").count(), 0, "inputs are not mutated");
    }

    #[test]
    fn maps_merge_recursively_and_scalars_are_replaced() {
        let a = ymap(&[
            ("level", "info".into()),
            ("sinks", list(vec![ymap(&[("name", "stdout".into())])])),
        ]);
        let b = ymap(&[(
            "sinks",
            list(vec![ymap(&[
                ("name", "stdout".into()),
                ("format", "json".into()),
            ])]),
        )]);
        assert_eq!(
            show(&merge(&a, &b)),
            "map[level:info sinks:[map[format:json name:stdout]]]"
        );
        assert_eq!(show(&merge(&a, &Value::from("s"))), "s");
        assert_eq!(show(&merge(&Value::from("s"), &a)), show(&a));
    }

    #[test]
    fn azure_keys_carry_labels() {
        let (l, k) = parse_azure_key("region.west-us.size.large.DATABASE_URL");
        assert_eq!(k, "DATABASE_URL");
        assert_eq!(l.len(), 2);
        let (l, k) = parse_azure_key("region.west-us.orphan.KEY");
        assert_eq!((l.len(), k.as_str()), (1, "KEY"));
        let (l, k) = parse_azure_key("PLAIN");
        assert_eq!((l.len(), k.as_str()), (0, "PLAIN"));
    }
}
