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

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};
use crate::model::Namespace;
use crate::names::{dns_subdomain_error, label_key_error, label_value_error};

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
    // The workspace becomes a label of every target the registration delivers.
    for (name, registration) in &ns.registrations {
        if let Some(e) = label_value_error(&registration.spec.workspace) {
            diagnostics.push(
                Diagnostic::error(
                    Code::InvalidLabel,
                    format!("{e} (the workspace becomes the `workspace` label of its deployment targets)"),
                )
                .at(&registration.origin)
                .on(Kind::WorkloadRegistration, name)
                .field("spec.workspace"),
            );
        }
    }
    for (workload_name, delivered) in &ns.workloads {
        let workload = &delivered.object;
        let Some(registration) = &delivered.registration else {
            diagnostics.push(
                Diagnostic::warning(
                    Code::WorkloadWithoutRegistration,
                    "no WorkloadRegistration delivers this Workload, so it has no workspace and is ignored \
                     (the original scheduler cannot unfold it either); Workloads belong in the folder a \
                     WorkloadRegistration points at",
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
        // Only this environment's targets become objects, so only they can collide (the
        // same target name for `dev` and for `stage` is fine).
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, detail) in workload.spec.deployment_targets.iter().enumerate() {
            if detail.spec.environment != ns.name {
                continue;
            }
            let field = format!("spec.deploymentTargets[{index}]");
            if let Some(first) = seen.insert(&detail.name, index) {
                diagnostics.push(
                    Diagnostic::error(
                        Code::DuplicateName,
                        format!(
                            "deployment target {:?} of environment {:?} is also declared at \
                             spec.deploymentTargets[{first}]",
                            detail.name, ns.name
                        ),
                    )
                    .at(&workload.origin)
                    .on(Kind::Workload, workload_name)
                    .field(format!("{field}.name")),
                );
                continue;
            }
            let name = format!("{workload_name}-{}", detail.name);
            if let Some(e) = dns_subdomain_error(&name) {
                diagnostics.push(
                    Diagnostic::error(
                        Code::InvalidName,
                        format!("the deployment target's name {name:?} (<workload>-<target>) {e}"),
                    )
                    .at(&workload.origin)
                    .on(Kind::Workload, workload_name)
                    .field(format!("{field}.name")),
                );
                continue;
            }
            let mut labels_ok = true;
            for (key, value) in &detail.labels {
                for e in [label_key_error(key), label_value_error(value)]
                    .into_iter()
                    .flatten()
                {
                    diagnostics.push(
                        Diagnostic::error(Code::InvalidLabel, e)
                            .at(&workload.origin)
                            .on(Kind::Workload, workload_name)
                            .field(format!("{field}.labels.{key}")),
                    );
                    labels_ok = false;
                }
            }
            if !labels_ok {
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
                Code::DuplicateName,
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
    use crate::model::{AnyObject, Kustomization, Object};

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
            &Kustomization::Base("main".into()),
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
            &Kustomization::Workload("helloworld".into()),
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
        assert_eq!(
            d.to_string().trim_end(),
            "error[duplicate-name]: workloads/helloworld/w.yaml:1: Workload \"hw\": spec.deploymentTargets[1].name: \
             deployment target \"a\" of environment \"dev\" is also declared at spec.deploymentTargets[0]"
        );
    }

    #[test]
    fn the_same_target_name_in_two_environments_is_fine() {
        let (ns, mut d) = namespace(vec![detail("a", "dev", &[]), detail("a", "stage", &[])]);
        let targets = deployment_targets(&ns, &mut d);
        assert!(d.is_empty(), "{d}");
        assert_eq!(targets.keys().collect::<Vec<_>>(), ["hw-a"]);
    }

    #[test]
    fn invalid_target_names_and_labels_are_errors() {
        let (ns, mut d) = namespace(vec![
            detail("Web", "dev", &[]),
            detail("ok", "dev", &[("tier", "-bad"), ("bad key", "x")]),
        ]);
        let targets = deployment_targets(&ns, &mut d);
        assert!(targets.is_empty());
        let fields: Vec<&str> = d.errors().filter_map(|e| e.field.as_deref()).collect();
        assert_eq!(
            fields,
            [
                "spec.deploymentTargets[0].name",
                "spec.deploymentTargets[1].labels.bad key",
                "spec.deploymentTargets[1].labels.tier"
            ]
        );
    }
}
