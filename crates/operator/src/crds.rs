//! The CustomResourceDefinitions as YAML: what `kalypso crds` prints, what the Helm chart
//! ships in `charts/kalypso-scheduler/crds/`, and what the operator checks at start.
//!
//! The definitions are generated from the Rust types of `kalypso-api` (feature `kube`), so
//! they cannot drift from what the operator reads and writes; a test compares the chart's
//! copies with [`to_yaml`] byte for byte.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

pub use kalypso_api::crd::definitions;

/// Why the CRDs could not be written as YAML.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// serde_yaml refused a definition (a bug: the definitions are plain data).
    #[error("cannot write CustomResourceDefinition {name} as YAML")]
    Yaml {
        /// The CRD's name.
        name: String,
        /// The serializer's error.
        #[source]
        source: serde_yaml_ng::Error,
    },
}

/// One CRD as a YAML document (without a `---` separator), ending in a newline.
pub fn crd_to_yaml(crd: &CustomResourceDefinition) -> Result<String, Error> {
    serde_yaml_ng::to_string(crd).map_err(|source| Error::Yaml {
        name: crd.metadata.name.clone().unwrap_or_default(),
        source,
    })
}

/// Every CRD as one multi-document YAML stream, sorted by name, each document introduced by
/// `---`. Deterministic: the same build always prints the same bytes.
pub fn to_yaml() -> Result<String, Error> {
    let mut out = String::new();
    for crd in definitions() {
        out.push_str("---\n");
        out.push_str(&crd_to_yaml(&crd)?);
    }
    Ok(out)
}

/// The file name the chart keeps a CRD under: `<plural>.yaml` (`baserepoes.yaml`).
pub fn chart_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.spec.names.plural)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_is_deterministic_and_parses_back() {
        let a = to_yaml().expect("yaml");
        let b = to_yaml().expect("yaml");
        assert_eq!(a, b);
        let docs: Vec<&str> = a.split("---\n").filter(|d| !d.is_empty()).collect();
        assert_eq!(docs.len(), 15);
        for doc in docs {
            let crd: CustomResourceDefinition = serde_yaml_ng::from_str(doc).expect("parses");
            assert_eq!(crd.spec.group, "scheduler.kalypso.io");
        }
    }
}
