//! Unfolding: Workloads into the DeploymentTargets of this environment.
//!
//! The original's Workload controller creates one DeploymentTarget per target whose
//! `environment` is this one, named `<workload>-<target>`, labelled with the target's labels,
//! then all of the Workload's labels (including the two Flux adds), then `workload` and
//! `workspace`. The workspace comes from the WorkloadRegistration that delivered the
//! Workload; the original finds it by parsing the Flux label, which breaks for environment
//! names containing `-` — here the registration is known directly (see COMPATIBILITY.md).

use std::collections::BTreeMap;

use kalypso_api::{DeploymentTargetSpec, Kind, Labels, labels};

use crate::diag::{Diagnostic, Diagnostics, Origin};
use crate::model::Namespace;
use crate::names::dns_subdomain_error;

/// A deployment target of the environment, derived from a Workload or declared directly.
#[derive(Clone, Debug, PartialEq)]
pub struct DeploymentTarget {
    /// Name: `<workload>-<target>` for derived targets; also the folder name in the GitOps tree.
    pub name: String,
    /// The workload (label `workload`).
    pub workload: String,
    /// The workspace (label `workspace`).
    pub workspace: String,
    /// All labels, as templates see them in `.Labels`.
    pub labels: Labels,
    /// Environment, manifests and config schemas (the Workload's schemas appended).
    pub spec: DeploymentTargetSpec,
    /// Where the target was declared.
    pub origin: Origin,
}

/// Derives the deployment targets of `ns`, keyed by name. Targets of other environments are
/// not derived; declared DeploymentTargets are kept whatever their environment (scheduling
/// filters them).
pub fn deployment_targets(
    ns: &Namespace,
    diagnostics: &mut Diagnostics,
) -> BTreeMap<String, DeploymentTarget> {
    let mut targets: BTreeMap<String, DeploymentTarget> = BTreeMap::new();
    for (workload_name, delivered) in &ns.workloads {
        let workload = &delivered.object;
        let Some(registration) = &delivered.registration else {
            diagnostics.push(
                Diagnostic::warning(
                    "workload-without-registration",
                    "this Workload is not delivered by a WorkloadRegistration, so its workspace is unknown; \
                     the original scheduler cannot unfold it either, so it is ignored",
                )
                .at(&workload.origin)
                .on(Kind::Workload, workload_name),
            );
            continue;
        };
        let workspace = ns
            .registrations
            .get(registration)
            .map(|r| r.spec.workspace.clone())
            .unwrap_or_default();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, detail) in workload.spec.deployment_targets.iter().enumerate() {
            let field = format!("spec.deploymentTargets[{index}]");
            if let Some(first) = seen.insert(&detail.name, index) {
                diagnostics.push(
                    Diagnostic::error(
                        "duplicate-name",
                        format!(
                            "deployment target {:?} is also declared at spec.deploymentTargets[{first}]",
                            detail.name
                        ),
                    )
                    .at(&workload.origin)
                    .on(Kind::Workload, workload_name)
                    .field(format!("{field}.name")),
                );
                continue;
            }
            if detail.spec.environment != ns.name {
                continue;
            }
            let name = format!("{workload_name}-{}", detail.name);
            if let Some(e) = dns_subdomain_error(&name) {
                diagnostics.push(
                    Diagnostic::error("invalid-name", format!("deployment target name {name:?} {e}"))
                        .at(&workload.origin)
                        .on(Kind::Workload, workload_name)
                        .field(format!("{field}.name")),
                );
                continue;
            }
            let mut target_labels = detail.labels.clone();
            target_labels.extend(workload.meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            target_labels.insert(labels::WORKLOAD.to_owned(), workload_name.clone());
            target_labels.insert(labels::WORKSPACE.to_owned(), workspace.clone());
            let mut spec = detail.spec.clone();
            spec.config_schemas
                .extend(workload.spec.config_schemas.iter().cloned());
            let target = DeploymentTarget {
                name: name.clone(),
                workload: workload_name.clone(),
                workspace: workspace.clone(),
                labels: target_labels,
                spec,
                origin: workload.origin.clone(),
            };
            insert_target(&mut targets, target, diagnostics);
        }
    }
    for (name, declared) in &ns.deployment_targets {
        let target = DeploymentTarget {
            name: name.clone(),
            workload: declared
                .meta
                .labels
                .get(labels::WORKLOAD)
                .cloned()
                .unwrap_or_default(),
            workspace: declared
                .meta
                .labels
                .get(labels::WORKSPACE)
                .cloned()
                .unwrap_or_default(),
            labels: declared.meta.labels.clone(),
            spec: declared.spec.clone(),
            origin: declared.origin.clone(),
        };
        insert_target(&mut targets, target, diagnostics);
    }
    targets
}

fn insert_target(
    targets: &mut BTreeMap<String, DeploymentTarget>,
    target: DeploymentTarget,
    diagnostics: &mut Diagnostics,
) {
    if let Some(first) = targets.get(&target.name) {
        diagnostics.push(
            Diagnostic::error(
                "duplicate-name",
                format!(
                    "deployment target {:?} is also produced by {}",
                    target.name, first.origin
                ),
            )
            .at(&target.origin)
            .on(Kind::DeploymentTarget, &target.name),
        );
        return;
    }
    targets.insert(target.name.clone(), target);
}

#[cfg(test)]
mod tests {
    use kalypso_api::{DeploymentTargetDetail, WorkloadRegistrationSpec, WorkloadSpec};

    use super::*;
    use crate::model::{AnyObject, Delivery, Object};

    fn detail(name: &str, env: &str, labels: &[(&str, &str)]) -> DeploymentTargetDetail {
        DeploymentTargetDetail {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            spec: DeploymentTargetSpec {
                environment: env.into(),
                ..DeploymentTargetSpec::default()
            },
        }
    }

    fn namespace(details: Vec<DeploymentTargetDetail>) -> (Namespace, Diagnostics) {
        let mut ns = Namespace::new("dev");
        let mut d = Diagnostics::new();
        let reg = Object::new(
            "helloworld",
            WorkloadRegistrationSpec {
                workspace: "kaizen".into(),
                ..Default::default()
            },
            Origin::new("main/r.yaml", 1),
        );
        ns.apply(
            &Delivery::Base("main".into()),
            vec![AnyObject::WorkloadRegistration(reg)],
            &mut d,
        );
        let mut w = Object::new(
            "hw",
            WorkloadSpec {
                deployment_targets: details,
                config_schemas: vec!["{}".into()],
            },
            Origin::new("workloads/helloworld/w.yaml", 1),
        );
        w.meta.labels.insert("type".into(), "application".into());
        w.meta.labels.insert("purpose".into(), "from-workload".into());
        ns.apply(
            &Delivery::Workload("helloworld".into()),
            vec![AnyObject::Workload(w)],
            &mut d,
        );
        (ns, d)
    }

    #[test]
    fn unfolds_targets_of_this_environment_with_original_label_precedence() {
        let (ns, mut d) = namespace(vec![
            detail(
                "green",
                "dev",
                &[("zone", "green"), ("purpose", "from-target"), ("workload", "x")],
            ),
            detail("uat", "stage", &[]),
        ]);
        let targets = deployment_targets(&ns, &mut d);
        assert!(d.is_empty(), "{d}");
        assert_eq!(targets.keys().collect::<Vec<_>>(), ["hw-green"]);
        let t = &targets["hw-green"];
        assert_eq!(
            t.labels["purpose"], "from-workload",
            "workload labels override target labels"
        );
        assert_eq!(t.labels["workload"], "hw");
        assert_eq!(t.labels["workspace"], "kaizen");
        assert_eq!(t.labels[labels::FLUX_NAME], "dev-helloworld");
        assert_eq!(t.spec.config_schemas, ["{}"]);
    }

    #[test]
    fn duplicate_target_names_are_errors() {
        let (ns, mut d) = namespace(vec![detail("a", "dev", &[]), detail("a", "dev", &[])]);
        let targets = deployment_targets(&ns, &mut d);
        assert_eq!(targets.len(), 1);
        assert!(d.has_errors());
    }
}
