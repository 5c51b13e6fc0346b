//! Rendering: each assignment's reconciler, namespace and config manifests.
//!
//! Every Template is compiled once per run; assignments are rendered in parallel. Templates
//! that cannot change a map (they call none of Sprig's `set`, `unset` or merges) share one
//! frozen config map per distinct config, so its `toYaml` is encoded once; any other
//! template gets its own copy of the config, so the output does not depend on the number of
//! threads or on the order of renders. An assignment whose template is missing,
//! whose config violates a schema, or whose template fails to execute is an error of that
//! assignment; as in the original, any such error blocks the environment.

use std::collections::BTreeMap;
use std::sync::Arc;

use kalypso_api::{ClusterTypeSpec, Kind, Manifest, TemplateSpec};
use kalypso_gotmpl::{Map, MapKey, Str, Type, Value};
use kalypso_template::{Compiled, Engine, TemplateData};

use crate::config::ConfigData;
use crate::diag::{Code, Diagnostic, Diagnostics, Origin};
use crate::model::{Namespace, Object};
use crate::unfold::DeploymentTarget;

/// The name every Kalypso template is parsed under (`template.New("template")` in the
/// original), which Go's error messages repeat.
pub const TEMPLATE_NAME: &str = "template";

/// A Template's manifests, compiled.
#[derive(Debug)]
pub struct CompiledTemplate {
    /// The Template object's name.
    pub name: String,
    /// One compiled template per manifest.
    pub manifests: Vec<Compiled>,
    /// `spec.contentType`.
    pub content_type: String,
    /// Where the Template was declared.
    pub origin: Origin,
}

/// Every Template of a namespace, compiled; templates that do not parse keep their errors.
#[derive(Debug, Default)]
pub struct TemplateSet {
    templates: BTreeMap<String, Result<Arc<CompiledTemplate>, Vec<Diagnostic>>>,
}

impl TemplateSet {
    /// Compiles every Template of `ns`.
    pub fn compile(ns: &Namespace, engine: &Engine) -> TemplateSet {
        let templates = ns
            .templates
            .iter()
            .map(|(name, t)| (name.clone(), compile_template(t, engine)))
            .collect();
        TemplateSet { templates }
    }

    /// The compiled template `name`: `None` if no such Template exists, `Some(Err)` if it
    /// failed to compile.
    pub fn get(&self, name: &str) -> Option<&Result<Arc<CompiledTemplate>, Vec<Diagnostic>>> {
        self.templates.get(name)
    }
}

fn compile_template(
    t: &Object<TemplateSpec>,
    engine: &Engine,
) -> Result<Arc<CompiledTemplate>, Vec<Diagnostic>> {
    let mut manifests = Vec::with_capacity(t.spec.manifests.len());
    let mut errors = Vec::new();
    for (i, manifest) in t.spec.manifests.iter().enumerate() {
        let text = match manifest {
            Manifest::Text(text) => text.clone(),
            Manifest::Object(object) => object_manifest_text(object),
        };
        match engine.compile(TEMPLATE_NAME, &text) {
            Ok(c) => manifests.push(c),
            Err(e) => errors.push(
                Diagnostic::error(Code::TemplateParse, e.to_string())
                    .at(&t.origin)
                    .on(Kind::Template, t.name())
                    .field(format!("spec.manifests[{i}]")),
            ),
        }
    }
    if errors.is_empty() {
        Ok(Arc::new(CompiledTemplate {
            name: t.name().to_owned(),
            manifests,
            content_type: t.spec.content_type.clone(),
            origin: t.origin.clone(),
        }))
    } else {
        Err(errors)
    }
}

/// An object manifest (the pre-2023 form) becomes its YAML text, which is then rendered
/// like any template text.
fn object_manifest_text(object: &serde_json::Value) -> String {
    let text = kalypso_goyaml::marshal_v3(&json_to_value(object)).unwrap_or_default();
    String::from_utf8_lossy(&text).into_owned()
}

fn json_to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map_or_else(|| Value::float(n.as_f64().unwrap_or(0.0)), Value::int),
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => Value::List(kalypso_gotmpl::List::interfaces(
            items.iter().map(json_to_value).collect(),
        )),
        serde_json::Value::Object(fields) => Value::Map(Map::from_entries(
            Type::String,
            Type::Interface,
            fields
                .iter()
                .map(|(k, v)| (MapKey::String(Str::from(k.as_str())), json_to_value(v)))
                .collect(),
        )),
    }
}

/// The template data that depends only on the deployment target, built once per target.
#[derive(Clone, Debug)]
pub struct TargetValues {
    name: Str,
    environment: Str,
    workspace: Str,
    workload: Str,
    /// The target's labels and manifests as one map each shared by its renders that may
    /// change maps (Go maps are references).
    labels: Map,
    manifests: Map,
    /// The same, frozen, for the renders whose templates cannot change a map (shared
    /// data): read without a lock, their values printed where they are held.
    frozen_labels: Map,
    frozen_manifests: Map,
}

impl TargetValues {
    /// The values of `target`.
    pub fn new(target: &DeploymentTarget) -> TargetValues {
        let labels = kalypso_template::string_map(&target.labels);
        let manifests = kalypso_template::string_map(&target.spec.manifests);
        TargetValues {
            name: Str::from(target.name.as_str()),
            environment: Str::from(target.spec.environment.as_str()),
            workspace: Str::from(target.workspace.as_str()),
            workload: Str::from(target.workload.as_str()),
            frozen_labels: labels.frozen_copy(),
            frozen_manifests: manifests.frozen_copy(),
            labels,
            manifests,
        }
    }
}

/// The original's template data for one assignment. `namespace` is the assignment's
/// ([`namespace`]: `<target environment>-<cluster type>-<target>`); `config` is the
/// assignment's own copy of its config ([`ConfigData::to_map`]) or the frozen one it shares
/// ([`ConfigData::frozen_map`]); with `shared` (the latter), the target's labels and
/// manifests are its frozen maps too.
pub fn template_data(
    target: &TargetValues,
    cluster_type: &Str,
    namespace: &Str,
    config: Map,
    shared: bool,
) -> TemplateData {
    let (labels, manifests) = if shared {
        (&target.frozen_labels, &target.frozen_manifests)
    } else {
        (&target.labels, &target.manifests)
    };
    TemplateData {
        deployment_target_name: target.name.clone(),
        namespace: namespace.clone(),
        environment: target.environment.clone(),
        workspace: target.workspace.clone(),
        workload: target.workload.clone(),
        labels: Some(labels.clone()),
        manifests: Some(manifests.clone()),
        cluster_type: cluster_type.clone(),
        config_data: Some(config),
    }
}

/// An assignment's namespace: `<target environment>-<cluster type>-<target>`.
pub fn namespace(environment: &str, cluster_type: &str, target: &str) -> String {
    [environment, cluster_type, target].join("-")
}

/// Renders every manifest of `template` into `out` (cleared first), joined as the original
/// joins them: outputs that are exactly empty are dropped, the others separated by `---\n`.
/// With `shared`, the data's maps are frozen and shared with other renders. `out` is a buffer
/// the caller reuses for each of an assignment's files, so that rendering does not grow a
/// new one per manifest.
fn render_manifests(
    engine: &Engine,
    template: &CompiledTemplate,
    data: &Value,
    shared: bool,
    out: &mut Vec<u8>,
) -> Result<(), (usize, kalypso_template::Error)> {
    out.clear();
    for (i, manifest) in template.manifests.iter().enumerate() {
        let before = out.len();
        if before > 0 {
            out.extend_from_slice(crate::tree::MANIFEST_SEPARATOR);
        }
        let start = out.len();
        engine
            .render_into(manifest, data, shared, out)
            .map_err(|e| (i, e))?;
        if out.len() == start {
            out.truncate(before);
        }
    }
    Ok(())
}

/// The templates a cluster type uses, looked up once for all of its assignments.
#[derive(Clone, Debug)]
pub struct ClusterTypeTemplates {
    reconciler: Arc<CompiledTemplate>,
    namespace: Arc<CompiledTemplate>,
    config: Arc<CompiledTemplate>,
    /// Whether any of their manifests may change a map of the data.
    changes_maps: bool,
}

/// Resolves the reconciler, namespace and config templates of a cluster type, reporting
/// each missing or broken one.
pub fn cluster_type_templates(
    cluster_type: &Object<ClusterTypeSpec>,
    templates: &TemplateSet,
    diagnostics: &mut Diagnostics,
) -> Option<ClusterTypeTemplates> {
    let mut resolve = |name: &str, field: &str| -> Option<Arc<CompiledTemplate>> {
        match templates.get(name) {
            None => {
                diagnostics.push(
                    Diagnostic::error(Code::TemplateMissing, format!("Template {name:?} does not exist"))
                        .at(&cluster_type.origin)
                        .on(Kind::ClusterType, cluster_type.name())
                        .field(field.to_owned()),
                );
                None
            }
            Some(Err(errors)) => {
                for e in errors {
                    diagnostics.push(e.clone());
                }
                None
            }
            Some(Ok(t)) => Some(t.clone()),
        }
    };
    let reconciler = resolve(&cluster_type.spec.reconciler, "spec.reconciler");
    let namespace = resolve(&cluster_type.spec.namespace_service, "spec.namespaceService");
    let config = resolve(&cluster_type.spec.config_type, "spec.configType");
    let (reconciler, namespace, config) = (reconciler?, namespace?, config?);
    let changes_maps = [&reconciler, &namespace, &config]
        .iter()
        .any(|t| t.manifests.iter().any(Compiled::changes_maps));
    Some(ClusterTypeTemplates {
        reconciler,
        namespace,
        config,
        changes_maps,
    })
}

/// Why an assignment could not be rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderFailure {
    /// The template that failed.
    pub template: String,
    /// Where the template was declared.
    pub origin: Origin,
    /// Which manifest of it.
    pub manifest: usize,
    /// Go's error text.
    pub message: String,
}

/// Renders one assignment's package (`namespace` is the assignment's, see [`namespace`]).
/// Unless one of its templates may change a map, the data holds `shared_config`, the frozen
/// config shared by every assignment with the same config; otherwise (also when nested
/// rendering turns out such a template) the package is rendered from the assignment's own
/// copy of `config`.
pub fn render_package(
    engine: &Engine,
    templates: &ClusterTypeTemplates,
    target: &TargetValues,
    cluster_type: &Str,
    namespace: &Str,
    config: &ConfigData,
    shared_config: &Map,
) -> Result<crate::tree::Package, RenderFailure> {
    let render = |config: Map, shared: bool| {
        render_templates(
            engine,
            templates,
            &template_data(target, cluster_type, namespace, config, shared),
            shared,
        )
    };
    if !templates.changes_maps {
        match render(shared_config.clone(), true) {
            Err((_, _, kalypso_template::Error::ChangesSharedData)) => {}
            result => return result.map_err(failure),
        }
    }
    render(config.to_map(), false).map_err(failure)
}

/// A template's error, as the failure of its assignment.
fn failure((template, manifest, e): (&CompiledTemplate, usize, kalypso_template::Error)) -> RenderFailure {
    RenderFailure {
        template: template.name.clone(),
        origin: template.origin.clone(),
        manifest,
        message: with_limit_hint(e.to_string()),
    }
}

/// A limit's error with how to raise the limit appended.
fn with_limit_hint(message: String) -> String {
    let limit = crate::limits::NAMES
        .into_iter()
        .find(|name| message.contains(&format!("the {name} limit")))
        .or_else(|| {
            message
                .contains("maximum template depth")
                .then_some("template-depth")
        });
    match limit {
        Some(name) => format!("{message}; {}", crate::limits::hint(name)),
        None => message,
    }
}

/// Renders the three templates with `data`.
fn render_templates<'t>(
    engine: &Engine,
    templates: &'t ClusterTypeTemplates,
    data: &TemplateData,
    shared: bool,
) -> Result<crate::tree::Package, (&'t CompiledTemplate, usize, kalypso_template::Error)> {
    let value = data.to_value();
    // One buffer for the three files, each copied out once at its final size.
    let mut out = Vec::with_capacity(RENDER_BUFFER);
    let mut render = |t: &'t CompiledTemplate| {
        render_manifests(engine, t, &value, shared, &mut out)
            .map(|()| crate::tree::Blob::from(&out[..]))
            .map_err(|(i, e)| (t, i, e))
    };
    let reconciler = render(&templates.reconciler)?;
    let namespace = render(&templates.namespace)?;
    let config = render(&templates.config)?;
    Ok(crate::tree::Package::from_files(
        reconciler,
        namespace,
        config,
        &templates.config.content_type,
    ))
}

/// The initial size of an assignment's render buffer: larger than most rendered files, so
/// that it rarely grows.
const RENDER_BUFFER: usize = 4096;
