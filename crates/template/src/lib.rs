//! The template environment of the Kalypso scheduler.
//!
//! Every manifest of a `Template` object is a Go `text/template` rendered with Sprig plus
//! four functions of the original scheduler (`toYaml`, `stringify`, `hash`, `unquote`), with
//! the scheduler's `dataType` as dot. Output that still contains `{{` is rendered again, as the
//! original does, but at most [`MAX_PASSES`] times. Sprig's `env` and `expandenv` are absent,
//! so templates cannot read the scheduler's environment (the original leaks tokens this way).

mod data;
mod funcs;
mod hash;

use std::collections::BTreeMap;
use std::sync::Arc;

use kalypso_gotmpl::{ErrorKind, FuncMap, Limits, Map, Str, Value};

pub use data::DATA_TYPE_NAME;

/// Maximum number of executions of nested rendering before it fails.
pub const MAX_PASSES: usize = 10;

/// Errors of compiling or rendering a template.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The template (or, during nested rendering, an intermediate output) did not parse.
    #[error("{0}")]
    Parse(kalypso_gotmpl::Error),
    /// Execution failed.
    #[error("{0}")]
    Exec(kalypso_gotmpl::Error),
    /// Execution exceeded a limit.
    #[error("{0}")]
    Limit(kalypso_gotmpl::Error),
    /// Nested rendering still produced `{{` after [`MAX_PASSES`] executions.
    #[error("output still contains \"{{{{\" after {MAX_PASSES} passes")]
    TooManyPasses,
    /// [`Engine::render_shared`] met a template that may change a map of its data (it calls
    /// `set`, `unset` or a merge); such data must be rendered with [`Engine::render`] from a
    /// copy of its own.
    #[error("the template may change maps of data shared with other renders")]
    ChangesSharedData,
}

/// The functions and limits templates run with. Build once and share: it is `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Engine {
    funcs: Arc<FuncMap>,
    limits: Limits,
    sprig: SprigVersion,
}

pub use kalypso_sprig::Version as SprigVersion;

/// The environment variable that selects the Sprig version of control-plane templates:
/// `v3` for Sprig v3.2.3, `v2` (the default, as the original) for v2.22.0.
pub const SPRIG_ENV: &str = "KALYPSO_SPRIG";

/// The Sprig version [`SPRIG_ENV`] selects: [`SprigVersion::V2`] when it is unset or empty,
/// an error naming the variable and its value when it is neither `v2` nor `v3`.
pub fn sprig_from_env() -> Result<SprigVersion, String> {
    match std::env::var(SPRIG_ENV) {
        Ok(v) if v.trim().is_empty() => Ok(SprigVersion::V2),
        Ok(v) => SprigVersion::parse(&v).ok_or_else(|| {
            format!(
                "{SPRIG_ENV}={v:?} is not a Sprig version: use v2 (v2.22.0, the original's) or v3 (v3.2.3)"
            )
        }),
        Err(std::env::VarError::NotPresent) => Ok(SprigVersion::V2),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!("{SPRIG_ENV} is not valid UTF-8")),
    }
}

/// The warning to show when templates run with a Sprig other than the original's v2.22.0;
/// `None` for v2.
pub fn sprig_warning(version: SprigVersion) -> Option<String> {
    (version != SprigVersion::V2).then(|| {
        format!(
            "templates run with Sprig {version} ({SPRIG_ENV}={version}), not the original scheduler's v2.22.0: \
             `int \"010\"` is 8 instead of 10, negative `trunc` keeps the end instead of failing, and v3-only \
             functions exist; output can differ from the original's"
        )
    })
}

static DEFAULT_LIMITS: std::sync::RwLock<Option<Limits>> = std::sync::RwLock::new(None);

/// Makes `limits` the limits of every [`Engine`] built from now on in this process (the
/// command line installs those its `--limit` options set).
pub fn set_default_limits(limits: Limits) {
    *DEFAULT_LIMITS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(limits);
}

/// The limits new engines get: those of [`set_default_limits`], or [`Limits::default`].
pub fn default_limits() -> Limits {
    DEFAULT_LIMITS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// A template text parsed once, ready to render many times.
#[derive(Debug)]
pub struct Compiled {
    template: kalypso_gotmpl::Template,
    changes_maps: bool,
}

impl Compiled {
    /// Whether the template may change a map of its data: it refers to one of
    /// [`kalypso_sprig::CHANGE_MAPS`] (even in a branch that never runs).
    pub fn changes_maps(&self) -> bool {
        self.changes_maps
    }
}

impl Engine {
    /// The original's function set: Sprig v2.22.0 (without `env`/`expandenv`) plus `toYaml`,
    /// `stringify`, `hash` and `unquote`, with default limits.
    pub fn new() -> Engine {
        Engine::with_sprig(SprigVersion::V2)
    }

    /// The original's function set with the given Sprig version instead of v2.22.0.
    pub fn with_sprig(sprig: SprigVersion) -> Engine {
        let mut funcs = kalypso_sprig::funcs_for(sprig);
        funcs.remove("env");
        funcs.remove("expandenv");
        funcs::register(&mut funcs);
        Engine {
            funcs: Arc::new(funcs),
            limits: default_limits(),
            sprig,
        }
    }

    /// The Sprig version of the functions.
    pub fn sprig(&self) -> SprigVersion {
        self.sprig
    }

    /// The functions templates can call.
    pub fn funcs(&self) -> &Arc<FuncMap> {
        &self.funcs
    }

    /// The same functions with other limits.
    pub fn with_limits(mut self, limits: Limits) -> Engine {
        self.limits = limits;
        self
    }

    /// Parses a template text.
    pub fn compile(&self, name: &str, text: &str) -> Result<Compiled, Error> {
        let template =
            kalypso_gotmpl::Template::parse(name, text, self.funcs.clone()).map_err(Error::Parse)?;
        let changes_maps = template
            .functions()
            .any(|f| kalypso_sprig::CHANGE_MAPS.contains(&f));
        Ok(Compiled {
            template,
            changes_maps,
        })
    }

    /// Renders `template` with `data` as dot; while the output contains `{{` it is parsed and
    /// rendered again with the same data, at most [`MAX_PASSES`] executions in all.
    ///
    /// Each pass is parsed as a template named `template` with the same functions, as the
    /// original does. Output that is not valid UTF-8 is re-parsed with each invalid byte read
    /// as U+FFFD.
    pub fn render(&self, template: &Compiled, data: &Value) -> Result<Vec<u8>, Error> {
        self.render_passes(template, data, false)
    }

    /// [`Engine::render`] for data shared with other renders, whose maps are frozen (see
    /// [`Value::frozen_copy`]): fails with [`Error::ChangesSharedData`] before any pass
    /// (nested ones included) whose template may change a map. Values derived from the
    /// frozen maps, such as their `toYaml`, are computed once for all renders.
    pub fn render_shared(&self, template: &Compiled, data: &Value) -> Result<Vec<u8>, Error> {
        self.render_passes(template, data, true)
    }

    /// [`Engine::render`] (or, with `shared`, [`Engine::render_shared`]) appending the output
    /// to `out`, so that a caller joining many outputs writes them into one buffer. On error,
    /// what was appended is unspecified (callers discard it).
    pub fn render_into(
        &self,
        template: &Compiled,
        data: &Value,
        shared: bool,
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        if shared && template.changes_maps {
            return Err(Error::ChangesSharedData);
        }
        let start = out.len();
        self.execute(template, data, out)?;
        let mut passes = 1;
        while contains_action(&out[start..]) {
            if passes >= MAX_PASSES {
                return Err(Error::TooManyPasses);
            }
            let next = self.compile("template", &String::from_utf8_lossy(&out[start..]))?;
            if shared && next.changes_maps {
                return Err(Error::ChangesSharedData);
            }
            out.truncate(start);
            self.execute(&next, data, out)?;
            passes += 1;
        }
        Ok(())
    }

    fn render_passes(&self, template: &Compiled, data: &Value, shared: bool) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.render_into(template, data, shared, &mut out)?;
        Ok(out)
    }

    /// Renders `template` once, without nested rendering.
    pub fn render_once(&self, template: &Compiled, data: &Value) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        self.execute(template, data, &mut out)?;
        Ok(out)
    }

    /// Executes `template` once, appending to `out`.
    fn execute(&self, template: &Compiled, data: &Value, out: &mut Vec<u8>) -> Result<(), Error> {
        template
            .template
            .execute(data, out, &self.limits)
            .map_err(|e| match e.kind() {
                ErrorKind::Parse => Error::Parse(e),
                ErrorKind::Limit => Error::Limit(e),
                _ => Error::Exec(e),
            })
    }
}

/// Whether rendered output still contains an action opener, `{{`.
fn contains_action(out: &[u8]) -> bool {
    // Built once: `memmem::find` builds its searcher on every call, and this runs on every
    // file of every render.
    static OPENER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"{{"));
    OPENER.find(out).is_some()
}

impl Default for Engine {
    fn default() -> Engine {
        Engine::new()
    }
}

/// The data a Kalypso template sees as dot: the original's `scheduler.dataType`.
///
/// The fields are Go values, so that parts shared by many assignments (a target's labels and
/// manifests, a cluster type's name) are built once and only referenced per render.
#[derive(Clone, Debug, Default)]
pub struct TemplateData {
    /// `.DeploymentTargetName`
    pub deployment_target_name: Str,
    /// `.Namespace`
    pub namespace: Str,
    /// `.Environment`
    pub environment: Str,
    /// `.Workspace`
    pub workspace: Str,
    /// `.Workload`
    pub workload: Str,
    /// `.Labels`, a `map[string]string` (see [`string_map`]); `None` is a nil map.
    pub labels: Option<Map>,
    /// `.Manifests`, a `map[string]string`; `None` is a nil map.
    pub manifests: Option<Map>,
    /// `.ClusterType`
    pub cluster_type: Str,
    /// `.ConfigData`, a `map[string]interface {}` of converted ConfigMap values
    /// (see [`config_value`]); `None` is a nil map.
    pub config_data: Option<Map>,
}

/// A Go `map[string]string` of the given entries (for [`TemplateData::labels`] and
/// [`TemplateData::manifests`]).
pub fn string_map(entries: &BTreeMap<String, String>) -> Map {
    Map::string_string(entries.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

impl TemplateData {
    /// The `scheduler.dataType` struct value.
    ///
    /// `Labels` and `Manifests` are `map[string]string` (nil maps for `None`), `ConfigData` a
    /// `map[string]interface {}` shared with `config_data` (Go maps are references: a template
    /// that `set`s a key changes it for later renders with the same data, as in the original).
    pub fn to_value(&self) -> Value {
        data::to_value(self)
    }
}

/// Converts a ConfigMap data string as the original does before rendering: a trimmed value
/// wrapped in `'…'` becomes the text inside; otherwise, if go-yaml v2 parses it to a list or a
/// map, that value; otherwise the original string, untrimmed.
///
/// Lists are `[]interface {}` and maps `map[interface {}]interface {}` with YAML 1.1 scalars
/// (`yes` is `true`, `0123` is 83).
pub fn config_value(raw: &str) -> Value {
    data::config_value(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(config: Map) -> Value {
        TemplateData {
            deployment_target_name: Str::from("t"),
            config_data: Some(config),
            ..TemplateData::default()
        }
        .to_value()
    }

    #[test]
    fn shared_data_is_never_changed() {
        let engine = Engine::new();
        let config = Map::string_interface([("A", Value::string("1"))]).frozen_copy();
        let shared = data(config.clone());
        let compile = |text: &str| engine.compile("template", text).unwrap();

        let reads = compile("{{ toYaml .ConfigData }} {{ .DeploymentTargetName }}");
        assert!(!reads.changes_maps());
        let out = engine.render_shared(&reads, &shared).unwrap();
        assert_eq!(out, b"A: \"1\" t");
        assert_eq!(engine.render_shared(&reads, &shared).unwrap(), out, "toYaml kept");

        // Calling a function that changes maps, even in a branch that never runs.
        let changes = compile("{{ if false }}{{ $_ := set .ConfigData \"B\" 2 }}{{ end }}x");
        assert!(changes.changes_maps());
        assert!(matches!(
            engine.render_shared(&changes, &shared),
            Err(Error::ChangesSharedData)
        ));
        assert_eq!(
            engine.render(&changes, &shared).unwrap(),
            b"x",
            "fine for private data"
        );

        // A nested pass that would call `set`.
        let nested = compile("{{ \"{{\" }} $_ := set .ConfigData \"B\" 2 {{ \"}}\" }}y");
        assert!(!nested.changes_maps());
        assert!(matches!(
            engine.render_shared(&nested, &shared),
            Err(Error::ChangesSharedData)
        ));
        // Were the check bypassed, the frozen map itself refuses the change.
        let err = engine.render(&nested, &shared).unwrap_err();
        assert!(err.to_string().contains("shared by several renders"), "{err}");
        assert_eq!(format!("{config:?}"), "map[string]interface {}{\"A\": \"1\"}");

        let private = Map::string_interface([("A", Value::string("1"))]);
        assert_eq!(engine.render(&nested, &data(private.clone())).unwrap(), b"y");
        assert_eq!(private.len(), 2, "private data is changed as in Go");
    }

    #[test]
    fn shared_data_is_checked_against_each_render_limits() {
        // A frozen map's shape is kept after its first check; a render with tighter limits
        // must still fail as a walk of the map fails.
        let nested = Map::string_interface([("B", Value::int(1))]);
        let config = Map::string_interface([("A", Value::Map(nested))]).frozen_copy();
        let shared = data(config);
        let engine = Engine::new();
        let reads = engine.compile("template", "{{ toYaml .ConfigData }}").unwrap();
        let ok = engine.render_shared(&reads, &shared).unwrap();
        assert_eq!(ok, b"A:\n    B: 1");
        let shallow = engine.clone().with_limits(Limits {
            max_data_depth: 2,
            ..Limits::default()
        });
        let err = shallow.render_shared(&reads, &shared).unwrap_err();
        assert!(
            err.to_string()
                .contains("the data is nested more than 2 levels deep (the data-depth limit)"),
            "{err}"
        );
        let few = engine.clone().with_limits(Limits {
            max_alloc: 2 * size_of::<Value>(),
            ..Limits::default()
        });
        let err = few.render_shared(&reads, &shared).unwrap_err();
        assert!(
            err.to_string().contains("the data holds more than 2 values"),
            "{err}"
        );
        assert_eq!(
            engine.render_shared(&reads, &shared).unwrap(),
            ok,
            "and passes again"
        );
    }
}
