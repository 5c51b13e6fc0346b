//! Source trees: the files of one branch or folder, as bytes, before any parsing.
//!
//! The original scheduler only ever sees what Flux delivers into the cluster: Flux's
//! source-controller drops files matched by its default exclusions and by `.sourceignore`
//! files (gitignore syntax, scoped to their folder), and the kustomize-controller applies the
//! YAML files that remain. [`SourceTree::manifest_files`] reproduces that selection, so that
//! a directory on disk, a git tree and a cluster all yield the same objects. Filling a tree
//! (reading a directory, a git commit) happens outside the core.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};

/// Flux source-controller's default exclusions (VCS files, images and archives, CI configs).
const FLUX_DEFAULT_IGNORES: &[&str] = &[
    ".git/",
    ".gitignore",
    ".gitmodules",
    ".gitattributes",
    "*.jpg",
    "*.jpeg",
    "*.gif",
    "*.png",
    "*.wmv",
    "*.flv",
    "*.tar.gz",
    "*.zip",
    ".github/",
    ".circleci/",
    ".travis.yml",
    ".gitlab-ci.yml",
    "appveyor.yml",
    ".drone.yml",
    "cloudbuild.yaml",
    "codeship-services.yml",
    "codeship-steps.yml",
    "**/.goreleaser.yml",
    "**/.sops.yaml",
    "**/.flux.yaml",
];

/// The name of Flux's ignore files.
pub const SOURCEIGNORE: &str = ".sourceignore";

/// One file of a source tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// Path inside the tree, `/`-separated, without a leading `/`.
    pub path: String,
    /// The bytes.
    pub content: Arc<[u8]>,
}

impl SourceFile {
    /// A file at `path` with `content`.
    pub fn new(path: impl Into<String>, content: impl Into<Arc<[u8]>>) -> SourceFile {
        SourceFile {
            path: path.into(),
            content: content.into(),
        }
    }
}

/// The files of one branch or folder, e.g. the control plane's `main` branch, an environment
/// branch, or the folder a WorkloadRegistration points at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceTree {
    label: String,
    files: Vec<SourceFile>,
}

impl SourceTree {
    /// A tree shown to users as `label` (e.g. `main`, `dev`, `workloads/hello-world-app`).
    pub fn new(label: impl Into<String>, mut files: Vec<SourceFile>) -> SourceTree {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        SourceTree {
            label: label.into(),
            files,
        }
    }

    /// The label used in messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Every file, sorted by path.
    pub fn files(&self) -> &[SourceFile] {
        &self.files
    }

    /// How a file of this tree is named in messages: `label/path`.
    pub fn display_path(&self, path: &str) -> String {
        if self.label.is_empty() {
            path.to_owned()
        } else {
            format!("{}/{path}", self.label)
        }
    }

    /// The YAML files Flux would apply from this tree: `.yaml`/`.yml` files that neither
    /// Flux's default exclusions nor a `.sourceignore` file exclude. Unreadable ignore files
    /// are reported and skipped.
    ///
    /// A `kustomization.yaml` (or `kustomization.yml`, `Kustomization`) is honoured as Flux's
    /// kustomize-controller does: in its folder only its `resources` are applied (files, and
    /// folders that have a kustomization of their own); a folder without one applies every
    /// YAML file below it, except in sub-folders that have one, which apply their own
    /// `resources`. Kustomize features that would change objects (`patches`, generators,
    /// `namePrefix`, `namespace`, labels...) are errors naming the file and the key: kalypso
    /// does not reproduce them and must not silently ignore them.
    pub fn manifest_files(&self, diagnostics: &mut Diagnostics) -> Vec<&SourceFile> {
        let rules = IgnoreRules::new(self, diagnostics);
        let delivered: Vec<&SourceFile> = self.files.iter().filter(|f| !rules.is_ignored(&f.path)).collect();
        if !delivered.iter().any(|f| is_kustomization(&f.path)) {
            // The common case: no kustomization anywhere.
            return delivered.into_iter().filter(|f| is_yaml(&f.path)).collect();
        }
        let mut selected = Vec::new();
        let mut visiting = Vec::new();
        self.select_folder("", &delivered, &mut selected, &mut visiting, diagnostics);
        selected.sort_by(|a: &&SourceFile, b| a.path.cmp(&b.path));
        selected.dedup_by(|a, b| a.path == b.path);
        selected
    }

    /// The files Flux applies from folder `dir` (`""`: the root).
    fn select_folder<'a>(
        &self,
        dir: &str,
        delivered: &[&'a SourceFile],
        selected: &mut Vec<&'a SourceFile>,
        visiting: &mut Vec<String>,
        diagnostics: &mut Diagnostics,
    ) {
        if let Some(k) = delivered
            .iter()
            .find(|f| parent(&f.path) == dir && is_kustomization(&f.path))
        {
            self.select_kustomization(k, delivered, selected, visiting, diagnostics);
            return;
        }
        // Flux generates a kustomization: every YAML file, sub-folders with a kustomization
        // of their own as one resource each.
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut own_kustomizations: Vec<String> = delivered
            .iter()
            .filter(|f| f.path.starts_with(&prefix) && is_kustomization(&f.path))
            .map(|f| parent(&f.path).to_owned())
            .collect();
        own_kustomizations.sort_by_key(|d| d.matches('/').count());
        let mut roots: Vec<String> = Vec::new();
        for d in own_kustomizations {
            if !roots.iter().any(|r| d.starts_with(&format!("{r}/"))) {
                roots.push(d);
            }
        }
        for f in delivered
            .iter()
            .filter(|f| f.path.starts_with(&prefix) && is_yaml(&f.path))
        {
            if !roots.iter().any(|r| f.path.starts_with(&format!("{r}/"))) {
                selected.push(f);
            }
        }
        for r in roots {
            self.select_folder(&r, delivered, selected, visiting, diagnostics);
        }
    }

    fn select_kustomization<'a>(
        &self,
        file: &'a SourceFile,
        delivered: &[&'a SourceFile],
        selected: &mut Vec<&'a SourceFile>,
        visiting: &mut Vec<String>,
        diagnostics: &mut Diagnostics,
    ) {
        // Line 1: a kustomization is one document, and its fields' positions are found from
        // there (see `Inputs::place_fields`).
        let origin = Origin::new(self.display_path(&file.path), 1);
        let dir = parent(&file.path).to_owned();
        if visiting.contains(&dir) {
            diagnostics.push(
                Diagnostic::error(
                    Code::Kustomization,
                    "the kustomizations' resources form a cycle: this folder is reached again through \
                     its own resources",
                )
                .at(&origin)
                .field("resources"),
            );
            return;
        }
        if let Some(d) = kustomization_yaml_error(&file.content, &origin) {
            diagnostics.push(d);
            return;
        }
        let Ok(value) = serde_yaml_ng::from_slice::<serde_yaml_ng::Value>(&file.content) else {
            return;
        };
        let Some(fields) = value.as_mapping() else {
            if !value.is_null() {
                diagnostics.push(
                    Diagnostic::error(
                        Code::Kustomization,
                        "a kustomization must be a mapping (apiVersion, kind, resources...), not a list or a \
                         single value",
                    )
                    .at(&origin),
                );
            }
            return;
        };
        let mut ok = true;
        for key in fields.keys() {
            let key = key.as_str().unwrap_or("?");
            if !KUSTOMIZATION_KEYS.contains(&key) {
                ok = false;
                diagnostics.push(
                    Diagnostic::error(
                        Code::Kustomization,
                        format!(
                            "kustomize's {key:?} changes or generates objects, which kalypso does not reproduce; \
                             only {} are supported (the objects would differ from what Flux applies)",
                            KUSTOMIZATION_KEYS.join(", ")
                        ),
                    )
                    .at(&origin)
                    .field(key),
                );
            }
        }
        if !ok {
            return;
        }
        let resources = match fields.get("resources") {
            None => return,
            Some(serde_yaml_ng::Value::Sequence(items)) => items.clone(),
            Some(v) if v.is_null() => return,
            Some(_) => {
                diagnostics.push(
                    Diagnostic::error(Code::Kustomization, "must be a list of files and folders")
                        .at(&origin)
                        .field("resources"),
                );
                return;
            }
        };
        visiting.push(dir.clone());
        for (i, item) in resources.iter().enumerate() {
            let field = format!("resources[{i}]");
            let Some(entry) = item.as_str() else {
                diagnostics.push(
                    Diagnostic::error(Code::Kustomization, "must be a file or folder path (a string)")
                        .at(&origin)
                        .field(field),
                );
                continue;
            };
            let Some(path) = join_relative(&dir, entry) else {
                diagnostics.push(
                    Diagnostic::error(
                        Code::Kustomization,
                        format!("{entry:?} is a remote resource or leaves the source tree; kalypso reads only local files"),
                    )
                    .at(&origin)
                    .field(field),
                );
                continue;
            };
            if let Some(f) = delivered.iter().find(|f| f.path == path) {
                selected.push(f);
                continue;
            }
            let prefix = if path.is_empty() {
                String::new()
            } else {
                format!("{path}/")
            };
            let is_folder = delivered.iter().any(|f| f.path.starts_with(&prefix));
            let has_kustomization = delivered
                .iter()
                .any(|f| parent(&f.path) == path && is_kustomization(&f.path));
            let message = if !is_folder {
                format!("{entry:?} does not exist (or .sourceignore hides it)")
            } else if !has_kustomization {
                format!("folder {entry:?} has no kustomization.yaml; kustomize refuses such a resource")
            } else {
                self.select_folder(&path, delivered, selected, visiting, diagnostics);
                continue;
            };
            diagnostics.push(
                Diagnostic::error(Code::Kustomization, message)
                    .at(&origin)
                    .field(field),
            );
        }
        visiting.pop();
    }
}

/// The first problem of a kustomization file's YAML, if it has one: where it is, in words
/// that say what to fix (see [`crate::yaml_scan`]).
fn kustomization_yaml_error(content: &[u8], origin: &Origin) -> Option<Diagnostic> {
    let Ok(text) = std::str::from_utf8(content) else {
        return Some(
            Diagnostic::error(
                Code::Kustomization,
                "the file is not UTF-8 text; save it as UTF-8",
            )
            .at(origin),
        );
    };
    let limits = crate::limits::current();
    let scan = crate::yaml_scan::scan(
        text,
        crate::yaml_scan::ScanLimits {
            depth: limits.yaml_depth,
            alias_nodes: limits.yaml_alias_nodes,
        },
        1,
    );
    if let Some(p) = scan.problems.into_iter().next() {
        let d = Diagnostic::error(Code::Kustomization, p.message).at(&Origin::at(
            &origin.file,
            p.line + 1,
            p.column + 1,
        ));
        return Some(if p.field.is_empty() { d } else { d.field(p.field) });
    }
    match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
        Ok(_) => None,
        Err(e) => {
            let at = e.location().map_or_else(
                || origin.clone(),
                |l| {
                    let number = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
                    Origin::at(&origin.file, number(l.line()), number(l.column()))
                },
            );
            Some(Diagnostic::error(
                Code::Kustomization,
                "this is not valid YAML (check the line's indentation, and quote values with special characters)",
            )
            .at(&at))
        }
    }
}

/// The kustomization keys kalypso honours: the ones that do not change objects.
const KUSTOMIZATION_KEYS: &[&str] = &["apiVersion", "kind", "metadata", "resources", "sortOptions"];

/// The file names kustomize recognises as a kustomization.
const KUSTOMIZATION_FILES: &[&str] = &["kustomization.yaml", "kustomization.yml", "Kustomization"];

fn is_kustomization(path: &str) -> bool {
    KUSTOMIZATION_FILES.contains(&path.rsplit('/').next().unwrap_or(path))
}

fn is_yaml(path: &str) -> bool {
    (path.ends_with(".yaml") || path.ends_with(".yml")) && !is_kustomization(path)
}

/// The folder of a path (`""` at the root).
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(d, _)| d)
}

/// `dir/entry` normalised (`.` and `..` resolved); `None` for URLs and paths leaving the tree.
fn join_relative(dir: &str, entry: &str) -> Option<String> {
    if entry.contains("://") || entry.starts_with('/') || entry.starts_with("github.com/") {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for segment in entry.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

/// Gitignore matchers, outermost folder first: Flux's defaults, then each `.sourceignore`.
struct IgnoreRules {
    /// Flux's default ignores ([`default_ignores`]), then each `.sourceignore` by its folder.
    matchers: Vec<(String, Gitignore)>,
}

/// Flux's default ignores ([`FLUX_DEFAULT_IGNORES`]) as a matcher, built once per process:
/// a run reads a source tree per workload, and building the matcher (a regular expression
/// compiled to a DFA) was a tenth of the B fleet's loading time when done per tree.
fn default_ignores() -> Option<&'static Gitignore> {
    static DEFAULTS: std::sync::OnceLock<Option<Gitignore>> = std::sync::OnceLock::new();
    DEFAULTS
        .get_or_init(|| {
            let mut defaults = GitignoreBuilder::new(virtual_root());
            for pattern in FLUX_DEFAULT_IGNORES {
                // The patterns are constants known to be valid.
                let _ = defaults.add_line(None, pattern);
            }
            defaults.build().ok()
        })
        .as_ref()
}

/// A fake absolute root, so that gitignore paths can be anchored without touching the disk.
/// What is wrong with a `.sourceignore` pattern, from the glob library's message, in words
/// that say what to fix.
fn glob_problem(message: &str) -> String {
    // The message names the glob first: `error parsing glob '<glob>': <problem>`.
    let problem = message.rsplit("': ").next().unwrap_or(message);
    if let Some(range) = problem.strip_prefix("invalid range; ") {
        let ends: Vec<&str> = range.split(" > ").map(|e| e.trim_matches('\'')).collect();
        if let [first, last] = ends.as_slice() {
            return format!("the range {first}-{last} runs backwards: write {last}-{first}");
        }
    }
    match problem {
        p if p.starts_with("invalid use of **") => "** must be a whole path segment, as in a/**/b".to_owned(),
        p if p.starts_with("unclosed character class") => "a [ is not closed with ]".to_owned(),
        p if p.starts_with("unopened alternate group") => "a } has no { before it".to_owned(),
        p if p.starts_with("unclosed alternate group") => "a { is not closed with }".to_owned(),
        p if p.starts_with("nested alternate groups") => "a {...} group is inside another".to_owned(),
        p if p.starts_with("dangling") => "it ends with a lone backslash".to_owned(),
        _ => "it is not a gitignore pattern".to_owned(),
    }
}

fn virtual_root() -> PathBuf {
    PathBuf::from("/kalypso-source")
}

impl IgnoreRules {
    fn new(tree: &SourceTree, diagnostics: &mut Diagnostics) -> IgnoreRules {
        let mut matchers = Vec::new();
        if let Some(m) = default_ignores() {
            // A clone shares the compiled expressions (they are reference-counted).
            matchers.push((String::new(), m.clone()));
        }
        let mut ignore_files: Vec<&SourceFile> = tree
            .files
            .iter()
            .filter(|f| f.path.rsplit('/').next() == Some(SOURCEIGNORE))
            .collect();
        ignore_files.sort_by_key(|f| f.path.matches('/').count());
        for file in ignore_files {
            let dir = file.path.rsplit_once('/').map_or("", |(d, _)| d).to_owned();
            let origin = Origin::new(tree.display_path(&file.path), 0);
            let root = virtual_root().join(&dir);
            let mut builder = GitignoreBuilder::new(&root);
            for (n, line) in String::from_utf8_lossy(&file.content).lines().enumerate() {
                if let Err(e) = builder.add_line(None, line) {
                    diagnostics.push(
                        Diagnostic::warning(
                            Code::Sourceignore,
                            format!(
                                "the pattern {:?} is not valid ({}), so it is ignored: the files it was meant to \
                                 hide are read",
                                line.trim(),
                                glob_problem(&e.to_string())
                            ),
                        )
                        .at(&origin.at_line(u32::try_from(n + 1).unwrap_or(0))),
                    );
                }
            }
            match builder.build() {
                Ok(m) => matchers.push((dir, m)),
                Err(e) => diagnostics.push(
                    Diagnostic::warning(
                        Code::Sourceignore,
                        format!(
                            "the patterns cannot be used ({}), so they are ignored: the files they were meant to \
                             hide are read",
                            glob_problem(&e.to_string())
                        ),
                    )
                    .at(&origin),
                ),
            }
        }
        IgnoreRules { matchers }
    }

    fn is_ignored(&self, path: &str) -> bool {
        let full = virtual_root().join(path);
        let mut ignored = false;
        for (dir, matcher) in &self.matchers {
            if !dir.is_empty() && !path.starts_with(&format!("{dir}/")) {
                continue;
            }
            let m = matcher.matched_path_or_any_parents(Path::new(&full), false);
            if m.is_ignore() {
                ignored = true;
            } else if m.is_whitelist() {
                ignored = false;
            }
        }
        ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[(&str, &str)]) -> SourceTree {
        SourceTree::new(
            "main",
            paths
                .iter()
                .map(|(p, c)| SourceFile::new(*p, c.as_bytes()))
                .collect(),
        )
    }

    fn selected(t: &SourceTree) -> Vec<&str> {
        t.manifest_files(&mut Diagnostics::new())
            .into_iter()
            .map(|f| f.path.as_str())
            .collect()
    }

    #[test]
    fn selects_yaml_outside_flux_default_exclusions() {
        let t = tree(&[
            ("a.yaml", ""),
            ("b.yml", ""),
            ("c.json", ""),
            ("README.md", ""),
            (".github/workflows/ci.yaml", ""),
            (".environments/dev.yaml", ""),
            ("x/.sops.yaml", ""),
        ]);
        assert_eq!(selected(&t), [".environments/dev.yaml", "a.yaml", "b.yml"]);
    }

    #[test]
    fn honours_root_and_nested_sourceignore() {
        let t = tree(&[
            (".sourceignore", ".environments/\n.onboard\n"),
            (".environments/dev.yaml", ""),
            (".onboard/x.yaml", ""),
            ("templates/a.yaml", ""),
            ("templates/.sourceignore", "skip-*.yaml\n!skip-keep.yaml\n"),
            ("templates/skip-me.yaml", ""),
            ("templates/skip-keep.yaml", ""),
            ("skip-other.yaml", ""),
        ]);
        assert_eq!(
            selected(&t),
            ["skip-other.yaml", "templates/a.yaml", "templates/skip-keep.yaml"]
        );
    }

    fn errors(t: &SourceTree) -> Vec<String> {
        let mut d = Diagnostics::new();
        t.manifest_files(&mut d);
        d.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_kustomization_restricts_what_is_applied() {
        let t = tree(&[
            (
                "kustomization.yaml",
                "resources:\n  - a.yaml\n  - ./sub\n  - deep/../b.yml\n",
            ),
            ("a.yaml", ""),
            ("b.yml", ""),
            ("not-listed.yaml", ""),
            (
                "sub/kustomization.yml",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [c.yaml]\n",
            ),
            ("sub/c.yaml", ""),
            ("sub/d.yaml", ""),
        ]);
        assert_eq!(selected(&t), ["a.yaml", "b.yml", "sub/c.yaml"]);
        assert!(errors(&t).is_empty());
    }

    #[test]
    fn without_a_root_kustomization_sub_folders_with_one_apply_their_resources() {
        let t = tree(&[
            ("a.yaml", ""),
            ("plain/b.yaml", ""),
            ("k/Kustomization", "resources: [c.yaml]\n"),
            ("k/c.yaml", ""),
            ("k/d.yaml", ""),
            ("k/inner/e.yaml", ""),
        ]);
        assert_eq!(selected(&t), ["a.yaml", "k/c.yaml", "plain/b.yaml"]);
    }

    #[test]
    fn kustomize_features_that_change_objects_are_errors_naming_file_and_key() {
        let t = tree(&[
            (
                "kustomization.yaml",
                "resources: [a.yaml]\nnamePrefix: x-\npatches: []\n",
            ),
            ("a.yaml", ""),
        ]);
        let e = errors(&t);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].starts_with("error[kustomization]: main/kustomization.yaml:1: namePrefix: kustomize's \"namePrefix\" changes"), "{e:?}");
        assert!(e[1].contains(": patches: "), "{e:?}");
        assert!(
            selected(&t).is_empty(),
            "nothing is applied from a refused kustomization"
        );
    }

    #[test]
    fn bad_resources_are_errors() {
        let t = tree(&[
            (
                "kustomization.yaml",
                "resources:\n  - missing.yaml\n  - folder\n  - https://example.com/x.yaml\n  - ../up.yaml\n",
            ),
            ("folder/a.yaml", ""),
        ]);
        let e = errors(&t);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(
            e[0].contains("resources[0]: \"missing.yaml\" does not exist"),
            "{e:?}"
        );
        assert!(
            e[1].contains("resources[1]: folder \"folder\" has no kustomization.yaml"),
            "{e:?}"
        );
        assert!(
            e[2].contains("resources[2]: \"https://example.com/x.yaml\" is a remote resource"),
            "{e:?}"
        );
        assert!(e[3].contains("resources[3]: \"../up.yaml\""), "{e:?}");
    }
}
