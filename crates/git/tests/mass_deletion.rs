//! The mass-deletion guard in `sync` (and so `serve` and the operator's `--source git`,
//! which deliver with the same `Pass`): a delivery that would remove every deployment target
//! of the GitOps branch is held, the branch stays where it was, and a person allows it.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, file_url, sync};
use kalypso_core::Code;
use kalypso_git::{AllowedDeletions, MassDeletionSettings, Outcome, Syncer};
use kalypso_testkit::{branch_files, rev_parse, runtime, write_files};

/// The control plane's `dev` without its scheduling policy: nothing is scheduled, the new
/// tree has only the cluster type's README.
fn unschedule_everything(fx: &Fixture) {
    write_files(
        &fx.control_plane,
        "dev",
        &[("scheduling/policy.yaml", None)],
        "remove the policy",
    );
}

#[test]
fn a_delivery_that_removes_every_deployment_target_is_held_until_allowed() {
    let rt = runtime();
    let fx = Fixture::new();
    let url = file_url(&fx.control_plane);
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let first = sync(&syncer, &url, &["dev"]).remove(0).unwrap();
    assert!(first.is_success(), "{:?}", first.outcome);
    let head = rev_parse(&fx.gitops, "refs/heads/dev").unwrap();
    assert!(branch_files(&fx.gitops, "dev").contains_key("large/app-dev-target/reconciler.yaml"));

    unschedule_everything(&fx);
    let held = sync(&syncer, &url, &["dev"]).remove(0).unwrap();
    assert!(held.is_held() && !held.is_success());
    let Outcome::Failed { failures, .. } = &held.outcome else {
        panic!("held: {:?}", held.outcome);
    };
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].message.contains("large/app-dev-target"),
        "{}",
        failures[0].message
    );
    assert!(
        failures[0]
            .message
            .contains("allow it (`kalypso sync --allow-mass-deletion`)"),
        "{}",
        failures[0].message
    );
    assert!(held.diagnostics.errors().any(|d| d.code == Code::MassDeletion));
    assert_eq!(
        rev_parse(&fx.gitops, "refs/heads/dev").unwrap(),
        head,
        "nothing was pushed"
    );

    // Held again on the next pass (nothing was recorded as delivered).
    let again = sync(&syncer, &url, &["dev"]).remove(0).unwrap();
    assert!(again.is_held());

    // Another environment is not allowed by dev's permission.
    let mut settings = fx.settings();
    settings.mass_deletion = MassDeletionSettings {
        allowed: AllowedDeletions::Environments(["stage".to_owned()].into()),
        ..MassDeletionSettings::default()
    };
    let other = Syncer::new(settings.clone(), rt.handle().clone()).unwrap();
    assert!(sync(&other, &url, &["dev"]).remove(0).unwrap().is_held());

    // Allowed for dev: delivered, with a warning; the folder is gone.
    settings.mass_deletion.allowed = AllowedDeletions::Environments(["dev".to_owned()].into());
    let allowed = Syncer::new(settings, rt.handle().clone()).unwrap();
    let delivered = sync(&allowed, &url, &["dev"]).remove(0).unwrap();
    assert!(delivered.is_success(), "{:?}", delivered.outcome);
    assert!(!delivered.is_held() && delivered.mass_deletion.is_some());
    assert!(
        delivered
            .diagnostics
            .warnings()
            .any(|d| d.code == Code::MassDeletion)
    );
    let files = branch_files(&fx.gitops, "dev");
    assert!(
        !files.keys().any(|p| p.starts_with("large/app-dev-target/")),
        "{files:?}"
    );
    assert_ne!(rev_parse(&fx.gitops, "refs/heads/dev").unwrap(), head);

    // Nothing left to remove: the guard has nothing to say (a new process, as serve is
    // restarted without the permission; this one remembers its own last delivery).
    let restarted = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let after = sync(&restarted, &url, &["dev"]).remove(0).unwrap();
    assert!(after.is_success() && after.mass_deletion.is_none());
}

#[test]
fn a_pass_allows_one_environment_as_the_operator_annotation_does() {
    let rt = runtime();
    let fx = Fixture::new();
    let url = file_url(&fx.control_plane);
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    assert!(sync(&syncer, &url, &["dev"]).remove(0).unwrap().is_success());
    unschedule_everything(&fx);
    let mut pass = syncer.pass(&kalypso_git::RepoUrl::parse(&url).unwrap()).unwrap();
    let dev = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
    pass.allow_mass_deletion("dev");
    let report = pass.sync(&dev).unwrap();
    assert!(report.is_success(), "{:?}", report.outcome);
}
