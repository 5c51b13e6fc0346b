//! The template data (the original's `scheduler.dataType`) and ConfigMap value conversion.
//!
//! Every assignment renders its templates with one of these structs as dot, so building it is
//! on the hot path at fleet scale. It is a dedicated [`Object`] with the nine field values
//! prepared once and static field names, instead of a generic [`kalypso_gotmpl::Struct`]
//! (which would allocate nine name strings and search them by comparison on every access).

use std::any::Any;
use std::sync::{Arc, LazyLock};

use kalypso_gotmpl::{Map, Object, Str, Type, Value};

use crate::TemplateData;

/// The Go type of the data, as `%T` and error messages spell it.
pub const DATA_TYPE_NAME: &str = "scheduler.dataType";

static DATA_TYPE: LazyLock<Str> = LazyLock::new(|| Str::from(DATA_TYPE_NAME));

/// Field names in declaration order.
const FIELD_NAMES: [&str; 9] = [
    "DeploymentTargetName",
    "Namespace",
    "Environment",
    "Workspace",
    "Workload",
    "Labels",
    "Manifests",
    "ClusterType",
    "ConfigData",
];

/// `scheduler.dataType` as a template value.
#[derive(Debug)]
struct DataType {
    fields: [Value; 9],
}

impl Object for DataType {
    fn type_name(&self) -> Str {
        DATA_TYPE.clone()
    }

    fn field(&self, name: &str) -> Option<Value> {
        self.field_ref(name).cloned()
    }

    fn field_ref(&self, name: &str) -> Option<&Value> {
        let index = match name {
            "DeploymentTargetName" => 0,
            "Namespace" => 1,
            "Environment" => 2,
            "Workspace" => 3,
            "Workload" => 4,
            "Labels" => 5,
            "Manifests" => 6,
            "ClusterType" => 7,
            "ConfigData" => 8,
            _ => return None,
        };
        Some(&self.fields[index])
    }

    fn fields(&self) -> Option<Vec<(Str, Value)>> {
        Some(
            FIELD_NAMES
                .iter()
                .zip(&self.fields)
                .map(|(name, value)| (Str::from(*name), value.clone()))
                .collect(),
        )
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn string_map(map: Option<&Map>) -> Value {
    Value::Map(match map {
        Some(map) => map.clone(),
        None => Map::nil(Type::String, Type::String),
    })
}

pub(crate) fn to_value(data: &TemplateData) -> Value {
    let config = match &data.config_data {
        Some(map) => map.clone(),
        None => Map::nil(Type::String, Type::Interface),
    };
    Value::Object(Arc::new(DataType {
        fields: [
            Value::String(data.deployment_target_name.clone()),
            Value::String(data.namespace.clone()),
            Value::String(data.environment.clone()),
            Value::String(data.workspace.clone()),
            Value::String(data.workload.clone()),
            string_map(data.labels.as_ref()),
            string_map(data.manifests.as_ref()),
            Value::String(data.cluster_type.clone()),
            Value::Map(config),
        ],
    }))
}

/// The controller's conversion of one ConfigMap data value.
pub(crate) fn config_value(raw: &str) -> Value {
    let trimmed = raw.trim();
    if trimmed.starts_with('\'') && trimmed.ends_with('\'') {
        return Value::string(trimmed.trim_matches('\''));
    }
    match kalypso_goyaml::unmarshal_v2(raw.as_bytes()) {
        Ok(v @ (Value::List(_) | Value::Map(_))) => v,
        _ => Value::string(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_lose_their_quotes() {
        assert_eq!(format!("{:?}", config_value("'0123'")), "\"0123\"");
        assert_eq!(format!("{:?}", config_value("  ''x''  ")), "\"x\"");
        assert_eq!(format!("{:?}", config_value("'")), "\"\"");
    }

    #[test]
    fn scalars_stay_the_original_string() {
        for raw in [
            "true",
            "yes",
            "0123",
            "  padded  ",
            "",
            "~",
            "null",
            "1.50",
            "key: [unclosed",
            "line one\nline two\n",
            "\"quoted\"",
        ] {
            assert_eq!(format!("{:?}", config_value(raw)), format!("{raw:?}"));
        }
    }

    #[test]
    fn collections_are_parsed_with_yaml11() {
        assert_eq!(
            format!("{:?}", config_value("zip: 0123\nflag: on\n")),
            "map[interface {}]interface {}{\"flag\": true, \"zip\": int(83)}"
        );
        assert_eq!(format!("{:?}", config_value("[]")), "[]interface {}[]");
    }

    #[test]
    fn nil_maps_stay_typed() {
        let v = to_value(&TemplateData::default());
        let Value::Object(obj) = v else {
            panic!("not an object")
        };
        assert_eq!(obj.type_name(), "scheduler.dataType");
        let labels = obj.field("Labels").expect("field");
        assert_eq!(labels.type_name(), "map[string]string");
        assert!(labels.as_map().is_some_and(Map::is_nil));
        assert!(obj.field("Missing").is_none());
    }
}
