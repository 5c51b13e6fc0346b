//! Running the core pipeline on a resolved environment, and turning its error diagnostics
//! into the failures the original reports as GitHub issues.
//!
//! The original reports a failure per Assignment (deployment target × cluster type) that
//! cannot be rendered, with the title `Can't generate manifests for deplyment target <dt> in
//! cluster type <ct> in <ns> environment` (typo included). Problems that are not about one
//! assignment (a YAML error, a duplicate name, an invalid selector) blocked the original's
//! environment silently; kalypso reports them too, in one issue per environment.
//!
//! A long-running process (`kalypso serve`) keeps a [`RenderMemo`] per environment: the
//! packages of the last render with the fingerprints of their inputs, so that a change
//! re-renders only the assignments it affects.

use std::collections::{BTreeSet, HashMap};

use kalypso_api::Kind;
use kalypso_core::fingerprint::Fingerprint;
use kalypso_core::placement::{CurrentAssignment, PlacementInput};
use kalypso_core::tree::{Package, RepoContent};
use kalypso_core::{Diagnostic, Diagnostics, Environment, Inputs};
use kalypso_template::Engine;

/// The packages of an environment's last render, by (cluster type, deployment target), with
/// the fingerprint of the inputs each was rendered from.
#[derive(Debug, Default)]
pub struct RenderMemo {
    packages: HashMap<(String, String), (Fingerprint, Package)>,
}

impl RenderMemo {
    /// Number of assignments remembered.
    pub fn len(&self) -> usize {
        self.packages.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
    }

    fn get(&self, cluster_type: &str, target: &str, fingerprint: Fingerprint) -> Option<&Package> {
        self.packages
            .get(&(cluster_type.to_owned(), target.to_owned()))
            .filter(|(known, _)| *known == fingerprint)
            .map(|(_, package)| package)
    }
}

/// The result of rendering one environment.
#[derive(Debug)]
pub struct RenderOutcome {
    /// Every diagnostic (warnings included).
    pub diagnostics: Diagnostics,
    /// The content to deliver; `None` when there are errors.
    pub content: Option<RepoContent>,
    /// What failed, grouped as issues are.
    pub failures: Vec<Failure>,
    /// Assignments scheduled.
    pub assignments: usize,
    /// Assignments rendered in this pass (the others came from the [`RenderMemo`]).
    pub rendered: usize,
}

/// One reportable failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The assignment, or `None` for a problem of the environment as a whole.
    pub assignment: Option<(String, String)>,
    /// What went wrong (one diagnostic per line).
    pub message: String,
}

impl Failure {
    /// The issue title, as the original writes it (typo included) for assignments.
    pub fn title(&self, environment: &str) -> String {
        match &self.assignment {
            Some((target, cluster_type)) => issue_title(environment, target, cluster_type),
            None => environment_issue_title(environment),
        }
    }
}

/// The original's issue title for an assignment failure.
pub fn issue_title(environment: &str, target: &str, cluster_type: &str) -> String {
    format!(
        "Can't generate manifests for deplyment target {target} in cluster type {cluster_type} in {environment} environment"
    )
}

/// The title of the issue for problems not tied to one assignment.
pub fn environment_issue_title(environment: &str) -> String {
    format!("Can't generate manifests in {environment} environment")
}

/// Whether `title` is one of the titles kalypso gives issues of `environment`.
pub fn is_issue_title_of(title: &str, environment: &str) -> bool {
    title.starts_with("Can't generate manifests ")
        && title.ends_with(&format!(" in {environment} environment"))
}

/// Loads, schedules and renders `inputs` as environment `name`.
pub fn render_environment(name: &str, inputs: &Inputs) -> RenderOutcome {
    render_environment_with(name, inputs, &mut RenderMemo::default())
}

/// [`render_environment`], re-rendering only the assignments whose fingerprints differ from
/// `memo`'s; `memo` then holds this render's packages. The content is the same as a full
/// render's.
pub fn render_environment_with(name: &str, inputs: &Inputs, memo: &mut RenderMemo) -> RenderOutcome {
    let mut diagnostics = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(name, inputs, &mut diagnostics);
    // Steady keeps targets where the last pass of this process placed them.
    let mut current = CurrentAssignment::new();
    for (cluster_type, target) in memo.packages.keys() {
        current
            .entry(target.clone())
            .or_default()
            .insert(cluster_type.clone());
    }
    let input = PlacementInput {
        current: &current,
        ..PlacementInput::default()
    };
    let environment = Environment::with_placement(namespace, &input, &mut diagnostics);
    let engine = Engine::from_env().unwrap_or_else(|e| {
        diagnostics.push(Diagnostic::error("sprig-version", e));
        Engine::new()
    });
    let prepared = kalypso_core::prepare(&environment, &engine, &mut diagnostics);
    let mut rendered = prepared.render(&engine, &mut diagnostics, |job| {
        let a = job.assignment;
        memo.get(&a.cluster_type, &a.deployment_target, job.fingerprint)
            .is_none()
    });
    let rendered_now = rendered.content.packages.len();
    let mut next = RenderMemo::default();
    for record in &rendered.records {
        let key = (
            record.assignment.cluster_type.clone(),
            record.assignment.deployment_target.clone(),
        );
        let package = match rendered.content.packages.get(&key) {
            Some(package) => Some(package.clone()),
            None => memo.get(&key.0, &key.1, record.fingerprint).cloned(),
        };
        if let Some(package) = package {
            rendered
                .content
                .packages
                .entry(key.clone())
                .or_insert_with(|| package.clone());
            next.packages.insert(key, (record.fingerprint, package));
        }
    }
    *memo = next;
    let scheduled: Vec<(String, String)> = environment
        .schedule
        .iter()
        .map(|a| (a.deployment_target.clone(), a.cluster_type.clone()))
        .collect();
    let failures = failures(&scheduled, &rendered.content, &diagnostics);
    let content = (!diagnostics.has_errors()).then_some(rendered.content);
    RenderOutcome {
        diagnostics,
        content,
        failures,
        assignments: scheduled.len(),
        rendered: rendered_now,
    }
}

/// Groups the error diagnostics: one failure per scheduled assignment that produced no
/// package (with the diagnostics about it, or about its cluster type's templates), and one
/// for the remaining errors.
pub fn failures(
    scheduled: &[(String, String)],
    content: &RepoContent,
    diagnostics: &Diagnostics,
) -> Vec<Failure> {
    let errors: Vec<&Diagnostic> = diagnostics.errors().collect();
    let mut used = BTreeSet::new();
    let mut out = Vec::new();
    for (target, cluster_type) in scheduled {
        if content
            .packages
            .contains_key(&(cluster_type.clone(), target.clone()))
        {
            continue;
        }
        let about_assignment = |d: &Diagnostic| {
            d.code == "assignment"
                && d.object.as_ref() == Some(&(Kind::DeploymentTarget, target.clone()))
                && d.message.contains(&format!("on cluster type {cluster_type:?}"))
        };
        let about_cluster_type =
            |d: &Diagnostic| d.object.as_ref() == Some(&(Kind::ClusterType, cluster_type.clone()));
        let mut picked: Vec<usize> = (0..errors.len())
            .filter(|&i| about_assignment(errors[i]))
            .collect();
        if picked.is_empty() {
            picked = (0..errors.len())
                .filter(|&i| about_cluster_type(errors[i]))
                .collect();
        }
        if picked.is_empty() {
            continue;
        }
        used.extend(picked.iter().copied());
        out.push(Failure {
            assignment: Some((target.clone(), cluster_type.clone())),
            message: picked
                .iter()
                .map(|&i| errors[i].to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    let rest: Vec<String> = (0..errors.len())
        .filter(|i| !used.contains(i))
        .map(|i| errors[i].to_string())
        .collect();
    if !rest.is_empty() {
        out.push(Failure {
            assignment: None,
            message: rest.join("\n"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kalypso_core::source::{SourceFile, SourceTree};
    use std::path::Path;

    /// Every file under `dir` as a source tree.
    fn source_tree(dir: &Path) -> SourceTree {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    let rel = path.strip_prefix(root).unwrap().display().to_string();
                    out.push(SourceFile::new(rel, std::fs::read(&path).unwrap()));
                }
            }
        }
        let mut files = Vec::new();
        walk(dir, dir, &mut files);
        SourceTree::new(dir.display().to_string(), files)
    }

    /// The example control plane's inputs for `env`.
    fn example(env: &str) -> Inputs {
        example_at("examples/control-plane", env)
    }

    /// The inputs of the example control plane at `path` (from the workspace) for `env`.
    fn example_at(path: &str, env: &str) -> Inputs {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
        let workloads = std::fs::read_dir(root.join("workloads"))
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    source_tree(&e.path()),
                )
            })
            .collect();
        Inputs {
            main: source_tree(&root.join("main")),
            environment: source_tree(&root.join(env)),
            workloads,
            ..Inputs::default()
        }
    }

    /// Replaces `from` with `to` in every file of `tree` whose path ends with `file`.
    fn edit(tree: &SourceTree, file: &str, from: &str, to: &str) -> SourceTree {
        let files = tree
            .files()
            .iter()
            .map(|f| {
                let text = String::from_utf8(f.content.to_vec()).unwrap();
                let text = if f.path.ends_with(file) {
                    text.replace(from, to)
                } else {
                    text
                };
                SourceFile::new(f.path.clone(), text.into_bytes())
            })
            .collect();
        SourceTree::new(tree.label(), files)
    }

    #[test]
    fn steady_keeps_targets_where_the_last_pass_placed_them() {
        let on = |outcome: &RenderOutcome| -> Vec<String> {
            let content = outcome.content.as_ref().unwrap();
            content
                .packages
                .keys()
                .filter(|(_, dt)| dt == "shop-web-dev")
                .map(|(ct, _)| ct.clone())
                .collect()
        };
        let inputs = example_at("examples/placement", "dev");
        let mut memo = RenderMemo::default();
        let first = render_environment_with("dev", &inputs, &mut memo);
        assert_eq!(on(&first), ["north-edge", "west-large"]);
        // north-edge loses its capacity, and web no longer balances.
        let environment = edit(
            &inputs.environment,
            "cluster-types.yaml",
            "{region: north, capacity: \"50\"}",
            "{region: north, capacity: \"5\"}",
        );
        let changed = Inputs {
            environment: edit(
                &environment,
                "policies.yaml",
                "    - builtIn: Balance\n      weight: 1\n",
                "",
            ),
            ..example_at("examples/placement", "dev")
        };
        assert_eq!(
            on(&render_environment("dev", &changed)),
            ["east-large", "west-large"]
        );
        let second = render_environment_with("dev", &changed, &mut memo);
        assert_eq!(
            on(&second),
            ["north-edge", "west-large"],
            "Steady keeps the last pass's placement"
        );
    }

    #[test]
    fn a_memo_re_renders_only_changed_assignments_and_gives_the_full_render() {
        let inputs = example("dev");
        let mut memo = RenderMemo::default();
        let first = render_environment_with("dev", &inputs, &mut memo);
        let full = render_environment("dev", &inputs);
        assert_eq!(first.content, full.content);
        assert!(first.content.as_ref().is_some_and(|c| !c.packages.is_empty()));
        assert_eq!(memo.len(), first.content.as_ref().unwrap().packages.len());

        // Unchanged inputs: the memo supplies every package.
        let again = render_environment_with("dev", &inputs, &mut memo);
        assert_eq!(again.content, full.content);
        assert_eq!(again.rendered, 0);
        assert_eq!(first.rendered, memo.len());

        // A config change: the result is what a full render of the new inputs gives.
        let config = inputs
            .environment
            .files()
            .iter()
            .find(|f| String::from_utf8_lossy(&f.content).contains("MAX_REPLICAS"))
            .map(|f| f.path.clone())
            .unwrap();
        let changed = Inputs {
            environment: edit(
                &inputs.environment,
                &config,
                "MAX_REPLICAS: \"",
                "MAX_REPLICAS: \"9",
            ),
            ..example("dev")
        };
        let incremental = render_environment_with("dev", &changed, &mut memo);
        let expected = render_environment("dev", &changed);
        assert_eq!(incremental.content, expected.content);
        assert_ne!(incremental.content, full.content, "the change shows");
        assert!(
            incremental.rendered > 0 && incremental.rendered < memo.len(),
            "only the affected assignments are rendered: {} of {}",
            incremental.rendered,
            memo.len()
        );
    }

    fn error(code: &'static str, message: &str, object: (Kind, &str)) -> Diagnostic {
        Diagnostic::error(code, message).on(object.0, object.1)
    }

    #[test]
    fn groups_errors_by_assignment_then_environment() {
        let scheduled = vec![
            ("app-dev".to_owned(), "large".to_owned()),
            ("app-dev".to_owned(), "small".to_owned()),
            ("app-qa".to_owned(), "drone".to_owned()),
            ("app-ok".to_owned(), "large".to_owned()),
        ];
        let mut content = RepoContent::default();
        content
            .packages
            .insert(("large".into(), "app-ok".into()), Package::default());
        let mut diags = Diagnostics::new();
        diags.push(error(
            "assignment",
            "cannot generate manifests on cluster type \"small\": config data validation failed",
            (Kind::DeploymentTarget, "app-dev"),
        ));
        diags.push(error(
            "template-missing",
            "Template \"x\" does not exist",
            (Kind::ClusterType, "drone"),
        ));
        diags.push(error("yaml", "bad yaml", (Kind::ConfigMap, "c")));
        diags.push(Diagnostic::warning("w", "just a warning"));
        let failures = failures(&scheduled, &content, &diags);
        let titles: Vec<String> = failures.iter().map(|f| f.title("dev")).collect();
        assert_eq!(
            titles,
            [
                "Can't generate manifests for deplyment target app-dev in cluster type small in dev environment",
                "Can't generate manifests for deplyment target app-qa in cluster type drone in dev environment",
                "Can't generate manifests in dev environment",
            ]
        );
        assert!(failures[0].message.contains("config data validation failed"));
        assert!(failures[1].message.contains("does not exist"));
        assert!(failures[2].message.contains("bad yaml"));
        assert!(!failures.iter().any(|f| f.message.contains("just a warning")));
        // app-dev on large has no diagnostic of its own and is not reported.
        assert!(titles.iter().all(|t| !t.contains("cluster type large")));
        assert!(titles.iter().all(|t| is_issue_title_of(t, "dev")));
        assert!(!is_issue_title_of(&titles[0], "stage"));
    }
}
