//! Running the core pipeline on a resolved environment, and turning its error diagnostics
//! into the failures the original reports as GitHub issues.
//!
//! The original reports a failure per Assignment (deployment target × cluster type) that
//! cannot be rendered, with the title `Can't generate manifests for deplyment target <dt> in
//! cluster type <ct> in <ns> environment` (typo included). Problems that are not about one
//! assignment (a YAML error, a duplicate name, an invalid selector) blocked the original's
//! environment silently; kalypso reports them too, in one issue per environment.

use std::collections::BTreeSet;

use kalypso_api::Kind;
use kalypso_core::tree::RepoContent;
use kalypso_core::{Diagnostic, Diagnostics, Environment, Inputs};
use kalypso_template::Engine;

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
    let mut diagnostics = Diagnostics::new();
    let namespace = kalypso_core::load_namespace(name, inputs, &mut diagnostics);
    let environment = Environment::new(namespace, &mut diagnostics);
    let rendered = kalypso_core::render(&environment, &Engine::new(), &mut diagnostics);
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
    use kalypso_core::tree::Package;

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
