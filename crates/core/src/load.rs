//! Loading: multi-document YAML files into typed objects that remember where they came from.
//!
//! Every document keeps the file and line it starts on, so that any later problem can point
//! at it. Documents of kinds the scheduler does not read (Secrets, Flux objects, anything
//! without `apiVersion`/`kind`) are skipped, as the original never looks at them. Malformed
//! YAML and objects whose fields have the wrong shape are reported with file, line, object
//! and field path; loading continues with the next document so that all problems surface.

use kalypso_api::{
    BaseRepoSpec, ClusterTypeSpec, ConfigMapData, ConfigSchemaSpec, DeploymentTargetSpec, EnvironmentSpec,
    GitOpsRepoSpec, Kind, ObjectMeta, SchedulingPolicySpec, TemplateSpec, WorkloadRegistrationSpec,
    WorkloadSpec,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::diag::{Diagnostic, Diagnostics, Origin};
use crate::model::{AnyObject, Object};
use crate::source::SourceTree;

/// One YAML document of a file: its text and the line (1-based) its first line has.
#[derive(Debug, PartialEq, Eq)]
struct Document<'a> {
    text: &'a str,
    first_line: u32,
}

/// Splits a YAML stream at document markers (`---` and `...` at the start of a line).
/// Markers cannot occur inside a document at column 0 (not even in block scalars), so a
/// line-based split is exact.
fn split_documents(text: &str) -> Vec<Document<'_>> {
    let mut docs = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1u32;
    let mut offset = 0usize;
    for (line_no, line) in (1u32..).zip(text.split_inclusive('\n')) {
        let bare = line.trim_end_matches(['\n', '\r']);
        let is_start = bare == "---" || bare.starts_with("--- ") || bare.starts_with("---\t");
        let is_end = bare == "..." || bare.starts_with("... ");
        if is_start || is_end {
            docs.push(Document {
                text: &text[start..offset],
                first_line: start_line,
            });
            if is_start && bare.len() > 3 {
                // Content after `--- ` belongs to the new document (e.g. `--- !tag` or a
                // scalar); keep it by starting the document on the marker line itself,
                // with the marker blanked out.
                start = offset + 3;
                start_line = line_no;
            } else {
                start = offset + line.len();
                start_line = line_no + 1;
            }
        }
        offset += line.len();
    }
    docs.push(Document {
        text: &text[start..],
        first_line: start_line,
    });
    docs.retain(|d| {
        d.text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    });
    docs
}

/// The first line of a document that holds content (for pointing at the object).
fn content_line(doc: &Document<'_>) -> u32 {
    let skipped = doc
        .text
        .lines()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .count();
    doc.first_line + u32::try_from(skipped).unwrap_or(0)
}

#[derive(Deserialize)]
struct TypeMeta {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    kind: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    metadata: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize)]
struct TypedObject<S> {
    #[serde(default)]
    metadata: ObjectMeta,
    spec: S,
}

#[derive(Deserialize)]
struct ConfigMapObject {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(flatten)]
    data: ConfigMapData,
}

/// Loads every object of the kinds the scheduler reads from the manifest files of `tree`.
pub fn load_tree(tree: &SourceTree, diagnostics: &mut Diagnostics) -> Vec<AnyObject> {
    let mut objects = Vec::new();
    for file in tree.manifest_files(diagnostics) {
        let shown = tree.display_path(&file.path);
        let Ok(text) = std::str::from_utf8(&file.content) else {
            diagnostics.push(Diagnostic::error("yaml", "file is not UTF-8 text").at(&Origin::new(shown, 0)));
            continue;
        };
        let origin = Origin::new(shown, 0);
        for doc in split_documents(text) {
            if let Some(object) = load_document(&doc, &origin, diagnostics) {
                objects.push(object);
            }
        }
    }
    objects
}

fn yaml_error(err: &serde_yaml_ng::Error, doc: &Document<'_>, origin: &Origin) -> Diagnostic {
    let line = err.location().map_or(doc.first_line, |l| {
        doc.first_line + u32::try_from(l.line()).unwrap_or(1) - 1
    });
    let message = err.to_string();
    // serde_yaml appends " at line L column C", relative to the document: drop it, the
    // diagnostic carries the absolute line.
    let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
    Diagnostic::error("yaml", format!("invalid YAML: {message}")).at(&origin.at_line(line))
}

fn load_document(doc: &Document<'_>, file: &Origin, diagnostics: &mut Diagnostics) -> Option<AnyObject> {
    let origin = file.at_line(content_line(doc));
    let meta: TypeMeta = match serde_yaml_ng::from_str(doc.text) {
        Ok(m) => m,
        Err(err) => {
            // Not a mapping (a list or a scalar) or not YAML at all.
            let is_syntax = err.location().is_some() && !err.to_string().contains("invalid type");
            if is_syntax {
                diagnostics.push(yaml_error(&err, doc, file));
            } else {
                diagnostics.push(
                    Diagnostic::warning("not-an-object", "document is not a Kubernetes object; skipped")
                        .at(&origin),
                );
            }
            return None;
        }
    };
    let (Some(serde_yaml_ng::Value::String(api_version)), Some(serde_yaml_ng::Value::String(kind))) =
        (&meta.api_version, &meta.kind)
    else {
        return None;
    };
    let kind = Kind::from_type_meta(api_version, kind)?;
    let name = meta
        .metadata
        .as_ref()
        .and_then(|m| m.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_owned();
    let typed = |diagnostics: &mut Diagnostics| -> Option<AnyObject> {
        Some(match kind {
            Kind::ClusterType => AnyObject::ClusterType(parse_typed::<ClusterTypeSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::Template => AnyObject::Template(parse_typed::<TemplateSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::WorkloadRegistration => {
                AnyObject::WorkloadRegistration(parse_typed::<WorkloadRegistrationSpec>(
                    doc,
                    &origin,
                    kind,
                    &name,
                    diagnostics,
                )?)
            }
            Kind::Workload => AnyObject::Workload(parse_typed::<WorkloadSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::DeploymentTarget => AnyObject::DeploymentTarget(parse_typed::<DeploymentTargetSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::SchedulingPolicy => AnyObject::SchedulingPolicy(parse_typed::<SchedulingPolicySpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::Environment => AnyObject::Environment(parse_typed::<EnvironmentSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::GitOpsRepo => AnyObject::GitOpsRepo(parse_typed::<GitOpsRepoSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::BaseRepo => AnyObject::BaseRepo(parse_typed::<BaseRepoSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::ConfigSchema => AnyObject::ConfigSchema(parse_typed::<ConfigSchemaSpec>(
                doc,
                &origin,
                kind,
                &name,
                diagnostics,
            )?),
            Kind::ConfigMap => {
                let parsed: ConfigMapObject = parse_document(doc, &origin, kind, &name, diagnostics)?;
                AnyObject::ConfigMap(Object {
                    meta: parsed.metadata,
                    spec: parsed.data,
                    origin: origin.clone(),
                })
            }
            // Derived kinds are the scheduler's output, never its input.
            Kind::Assignment | Kind::AssignmentPackage => return None,
        })
    };
    typed(diagnostics)
}

fn parse_typed<S: DeserializeOwned>(
    doc: &Document<'_>,
    origin: &Origin,
    kind: Kind,
    name: &str,
    diagnostics: &mut Diagnostics,
) -> Option<Object<S>> {
    let parsed: TypedObject<S> = parse_document(doc, origin, kind, name, diagnostics)?;
    Some(Object {
        meta: parsed.metadata,
        spec: parsed.spec,
        origin: origin.clone(),
    })
}

/// Deserializes a document into `T`, reporting the failing field's path and line, and
/// warning about fields under `spec` that the scheduler does not know (usually typos).
fn parse_document<T: DeserializeOwned>(
    doc: &Document<'_>,
    origin: &Origin,
    kind: Kind,
    name: &str,
    diagnostics: &mut Diagnostics,
) -> Option<T> {
    let mut unknown = Vec::new();
    let mut track = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
    let de = serde_yaml_ng::Deserializer::from_str(doc.text);
    let ignored = serde_ignored::Deserializer::new(de, &mut track);
    let result: Result<T, _> = serde_path_to_error::deserialize(ignored);
    for path in unknown.into_iter().filter(|p| p.starts_with("spec.")) {
        diagnostics.push(
            Diagnostic::warning("unknown-field", "unknown field; it is ignored")
                .at(origin)
                .on(kind, name)
                .field(path),
        );
    }
    match result {
        Ok(v) => Some(v),
        Err(err) => {
            let path = err.path().to_string();
            let inner = err.into_inner();
            let line = inner.location().map_or(origin.line, |l| {
                doc.first_line + u32::try_from(l.line()).unwrap_or(1) - 1
            });
            let message = inner.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
            let mut d = Diagnostic::error("invalid-object", message)
                .at(&origin.at_line(line))
                .on(kind, name);
            if path != "." {
                d = d.field(path);
            }
            diagnostics.push(d);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    #[test]
    fn splits_documents_and_tracks_lines() {
        let text = "# c\na: 1\n---\nb: 2\n--- \n\n---\n# only a comment\n...\nc: |\n  x\n";
        let docs = split_documents(text);
        let starts: Vec<(u32, u32)> = docs.iter().map(|d| (d.first_line, content_line(d))).collect();
        assert_eq!(starts, [(1, 2), (4, 4), (10, 10)]);
        assert_eq!(docs[2].text, "c: |\n  x\n");
    }

    fn load(text: &str) -> (Vec<AnyObject>, Diagnostics) {
        let tree = SourceTree::new("dev", vec![SourceFile::new("f.yaml", text.as_bytes())]);
        let mut d = Diagnostics::new();
        let objects = load_tree(&tree, &mut d);
        (objects, d)
    }

    #[test]
    fn loads_known_kinds_and_skips_others() {
        let (objects, d) = load(
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n\
             apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\n  labels: {size: large}\n\
             spec: {reconciler: flux, namespaceService: ns, configType: cfg}\n",
        );
        assert!(d.is_empty(), "{d}");
        assert_eq!(objects.len(), 1);
        let AnyObject::ClusterType(ct) = &objects[0] else {
            panic!("not a cluster type")
        };
        assert_eq!(ct.meta.name, "large");
        assert_eq!(ct.origin.to_string(), "dev/f.yaml:5");
    }

    #[test]
    fn reports_missing_fields_with_path_and_line() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata:\n  name: large\nspec:\n  reconciler: flux\n",
        );
        assert!(objects.is_empty());
        let shown = d.to_string();
        assert!(shown.contains("ClusterType \"large\""), "{shown}");
        assert!(shown.contains("missing field `namespaceService`"), "{shown}");
    }

    #[test]
    fn reports_malformed_yaml_with_absolute_line() {
        let (_, d) = load("a: 1\n---\nkind: [unclosed\n");
        let shown = d.to_string();
        assert!(shown.starts_with("error[yaml]: dev/f.yaml:"), "{shown}");
    }

    #[test]
    fn warns_about_unknown_spec_fields() {
        let (objects, d) = load(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: ClusterType\nmetadata: {name: x}\n\
             spec: {reconciler: a, namespaceService: b, configType: c, reconcilr: d}\n",
        );
        assert_eq!(objects.len(), 1);
        assert_eq!(d.warnings().count(), 1);
        assert!(d.to_string().contains("spec.reconcilr"));
    }
}
