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

use crate::diag::{Diagnostic, Diagnostics, Origin};

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
    pub fn manifest_files(&self, diagnostics: &mut Diagnostics) -> Vec<&SourceFile> {
        let rules = IgnoreRules::new(self, diagnostics);
        self.files
            .iter()
            .filter(|f| f.path.ends_with(".yaml") || f.path.ends_with(".yml"))
            .filter(|f| !rules.is_ignored(&f.path))
            .collect()
    }
}

/// Gitignore matchers, outermost folder first: Flux's defaults, then each `.sourceignore`.
struct IgnoreRules {
    matchers: Vec<(String, Gitignore)>,
}

/// A fake absolute root, so that gitignore paths can be anchored without touching the disk.
fn virtual_root() -> PathBuf {
    PathBuf::from("/kalypso-source")
}

impl IgnoreRules {
    fn new(tree: &SourceTree, diagnostics: &mut Diagnostics) -> IgnoreRules {
        let mut matchers = Vec::new();
        let mut defaults = GitignoreBuilder::new(virtual_root());
        for pattern in FLUX_DEFAULT_IGNORES {
            // The patterns are constants known to be valid.
            let _ = defaults.add_line(None, pattern);
        }
        if let Ok(m) = defaults.build() {
            matchers.push((String::new(), m));
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
                        Diagnostic::warning("sourceignore", format!("ignoring invalid pattern: {e}"))
                            .at(&origin.at_line(u32::try_from(n + 1).unwrap_or(0))),
                    );
                }
            }
            match builder.build() {
                Ok(m) => matchers.push((dir, m)),
                Err(e) => diagnostics.push(Diagnostic::warning("sourceignore", e.to_string()).at(&origin)),
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
}
