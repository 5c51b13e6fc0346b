//! The limits that keep hostile or broken input from exhausting memory, stack or time.
//!
//! Each limit has a name users see in errors and raise with `--limit NAME=VALUE` (or
//! `KALYPSO_LIMITS=NAME=VALUE,...`), and a default far above what real control planes need.
//! The command line parses them once and installs them for the process ([`install`]); the
//! loader and the template engine read the installed values, so every front end (render,
//! sync, serve, the operator) runs with the same bounds without threading them through.

use std::fmt;
use std::sync::RwLock;

/// Every limit, with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes one template execution may write (`template-output`).
    pub template_output: usize,
    /// Bytes of strings, lists and maps function calls may build in one execution
    /// (`template-alloc`).
    pub template_alloc: usize,
    /// Evaluation steps of one execution: actions, loop iterations, calls (`template-steps`).
    pub template_steps: u64,
    /// Nesting of `{{template}}` calls (`template-depth`, Go's 100000).
    pub template_depth: usize,
    /// Nesting of data passed to `toYaml`, `toJson`, `hash`, `stringify`... (`data-depth`).
    pub data_depth: usize,
    /// Bytes of all the manifests of one render together (`render-output`).
    pub render_output: usize,
    /// Nesting of lists and mappings in a YAML document (`yaml-depth`).
    pub yaml_depth: usize,
    /// Bytes of one YAML document (`yaml-document-size`).
    pub yaml_document_size: usize,
    /// Nodes a YAML document may expand to when its aliases are resolved
    /// (`yaml-alias-nodes`).
    pub yaml_alias_nodes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        let t = kalypso_gotmpl::Limits::default();
        Limits {
            template_output: t.max_output,
            template_alloc: t.max_alloc,
            template_steps: t.max_steps,
            template_depth: t.max_depth,
            data_depth: t.max_data_depth,
            render_output: 4 << 30,
            yaml_depth: 100,
            yaml_document_size: 8 << 20,
            yaml_alias_nodes: 100_000,
        }
    }
}

/// The names of the limits, as users write them.
pub const NAMES: [&str; 9] = [
    "template-output",
    "template-alloc",
    "template-steps",
    "template-depth",
    "data-depth",
    "render-output",
    "yaml-depth",
    "yaml-document-size",
    "yaml-alias-nodes",
];

/// How to raise a limit, for error messages.
pub fn hint(name: &str) -> String {
    format!("raise it with --limit {name}=VALUE or KALYPSO_LIMITS={name}=VALUE")
}

/// A `--limit` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitError(String);

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LimitError {}

/// A size or count: digits with an optional binary suffix `K`, `M`, `G` (`KiB`, `MiB`,
/// `GiB` too); `_` separates digits.
fn parse_amount(text: &str) -> Option<u64> {
    let t = text.trim().replace('_', "");
    let (digits, shift) = match t.trim_end_matches("iB").trim_end_matches('B') {
        s if s.ends_with(['k', 'K']) => (&s[..s.len() - 1], 10),
        s if s.ends_with('M') => (&s[..s.len() - 1], 20),
        s if s.ends_with('G') => (&s[..s.len() - 1], 30),
        s => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

impl Limits {
    /// Sets the limit `name` from `value` (`64M`, `100000`...).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), LimitError> {
        let amount = parse_amount(value).filter(|&v| v > 0).ok_or_else(|| {
            LimitError(format!(
                "limit {name}={value:?}: the value must be a positive number, optionally with K, M or G"
            ))
        })?;
        let size = usize::try_from(amount).unwrap_or(usize::MAX);
        match name {
            "template-output" => self.template_output = size,
            "template-alloc" => self.template_alloc = size,
            "template-steps" => self.template_steps = amount,
            "template-depth" => self.template_depth = size,
            "data-depth" => self.data_depth = size,
            "render-output" => self.render_output = size,
            "yaml-depth" => self.yaml_depth = size,
            "yaml-document-size" => self.yaml_document_size = size,
            "yaml-alias-nodes" => self.yaml_alias_nodes = size,
            _ => {
                return Err(LimitError(format!(
                    "unknown limit {name:?}; the limits are {}",
                    NAMES.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Applies `NAME=VALUE` settings, each possibly a comma-separated list of them (the
    /// form of `KALYPSO_LIMITS`).
    pub fn apply<'a>(&mut self, settings: impl IntoIterator<Item = &'a str>) -> Result<(), LimitError> {
        for setting in settings.into_iter().flat_map(|s| s.split(',')) {
            let setting = setting.trim();
            if setting.is_empty() {
                continue;
            }
            let (name, value) = setting.split_once('=').ok_or_else(|| {
                LimitError(format!(
                    "limit {setting:?} is not NAME=VALUE (e.g. template-output=128M)"
                ))
            })?;
            self.set(name.trim(), value)?;
        }
        Ok(())
    }

    /// The template engine's share of the limits.
    pub fn template(&self) -> kalypso_gotmpl::Limits {
        kalypso_gotmpl::Limits {
            max_steps: self.template_steps,
            max_depth: self.template_depth,
            max_output: self.template_output,
            max_alloc: self.template_alloc,
            max_data_depth: self.data_depth,
        }
    }
}

static INSTALLED: RwLock<Option<Limits>> = RwLock::new(None);

/// Makes `limits` the limits of the process: of the loader, of [`current`], and of template
/// engines built from now on.
pub fn install(limits: Limits) {
    kalypso_template::set_default_limits(limits.template());
    *INSTALLED
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(limits);
}

/// The limits [`install`]ed, or the defaults.
pub fn current() -> Limits {
    INSTALLED
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_sizes_and_lists() {
        let mut l = Limits::default();
        l.apply(["template-output=128M, yaml-depth=50", "template-steps=1_000"])
            .unwrap();
        assert_eq!(l.template_output, 128 << 20);
        assert_eq!(l.yaml_depth, 50);
        assert_eq!(l.template_steps, 1000);
        l.apply(["render-output=2GiB,template-alloc=64k"]).unwrap();
        assert_eq!(l.render_output, 2 << 30);
        assert_eq!(l.template_alloc, 64 << 10);
        assert_eq!(l.template().max_output, 128 << 20);
        for bad in [
            "nope=1",
            "template-output",
            "template-output=0",
            "template-output=-1",
            "yaml-depth=1T",
        ] {
            assert!(l.clone().apply([bad]).is_err(), "{bad}");
        }
        assert_eq!(
            l.apply(["nope=1"]).unwrap_err().to_string(),
            format!("unknown limit \"nope\"; the limits are {}", NAMES.join(", "))
        );
    }
}
