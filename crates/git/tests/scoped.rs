//! Deliveries of part of an environment (`Pass::deliver_scoped`, the seam a progressive
//! rollout uses): one GitOps commit in which some cluster types take the new content and the
//! others keep their folders as the branch has them, and one that gives the cluster types
//! that moved their previous content back.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use common::{Fixture, add_a_cluster_type, cluster_type, file_url, release_reconciler_v2};
use kalypso_git::control_plane::Resolved;
use kalypso_git::{Delivery, EnvReport, Outcome, RepoUrl, Scope, Syncer};
use kalypso_testkit::{branch_files, git, runtime, write_files};

/// Resolves `dev` in a new pass of `syncer`.
fn resolve(syncer: &Syncer, fx: &Fixture) -> Resolved {
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let mut pass = syncer.pass(&url).unwrap();
    let env = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
    pass.resolve(&env).unwrap()
}

/// Delivers `resolved` in `scope` in a new pass of `syncer`.
fn deliver(syncer: &Syncer, fx: &Fixture, resolved: &Resolved, scope: &Scope<'_>) -> EnvReport {
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let pass = syncer.pass(&url).unwrap();
    let report = pass.deliver_scoped(resolved, scope).unwrap();
    assert!(report.is_success(), "{report:?}");
    report
}

fn changed_files(report: &EnvReport) -> usize {
    match &report.outcome {
        Outcome::Delivered(targets) => match &targets[0].delivery {
            Delivery::Committed { changes, .. } => changes.files(),
            Delivery::UpToDate { .. } => 0,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The tree id of `branch` of the GitOps repository.
fn tree_of(fx: &Fixture, branch: &str) -> String {
    git(&fx.gitops, &["rev-parse", &format!("{branch}^{{tree}}")])
        .trim()
        .to_owned()
}

fn reconciler(files: &std::collections::BTreeMap<String, Vec<u8>>, cluster_type: &str) -> String {
    String::from_utf8(files[&format!("{cluster_type}/app-dev-target/reconciler.yaml")].clone()).unwrap()
}

#[test]
fn some_cluster_types_take_new_content_the_others_keep_their_folders_and_they_roll_back() {
    let fx = Fixture::new();
    add_a_cluster_type(&fx);
    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "cluster-types/medium.yaml",
            Some(&cluster_type("medium", "reconciler")),
        )],
        "a third cluster type",
    );
    let rt = runtime();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();

    // Version 1 everywhere.
    let v1 = resolve(&syncer, &fx);
    let first = deliver(&syncer, &fx, &v1, &Scope::default());
    assert_eq!((first.assignments, first.rendered), (3, 3));
    let v1_files = branch_files(&fx.gitops, "dev");
    let v1_tree = tree_of(&fx, "dev");
    for ct in ["large", "medium", "small"] {
        assert_eq!(reconciler(&v1_files, ct), "kind: Reconciler\nversion: v1\n");
    }

    // Version 2 reaches large and small; medium keeps its folder.
    release_reconciler_v2(&fx);
    let v2 = resolve(&syncer, &fx);
    let medium = || ["medium".to_owned()];
    let wave = deliver(&syncer, &fx, &v2, &Scope::default().keeping(medium()));
    assert_eq!((wave.assignments, wave.rendered), (2, 2));
    assert_eq!(changed_files(&wave), 2);
    let files = branch_files(&fx.gitops, "dev");
    assert_eq!(reconciler(&files, "large"), "kind: Reconciler\nversion: v2\n");
    assert_eq!(reconciler(&files, "small"), "kind: Reconciler\nversion: v2\n");
    for (path, bytes) in v1_files.iter().filter(|(p, _)| p.starts_with("medium/")) {
        assert_eq!(files.get(path), Some(bytes), "{path}");
    }
    assert_eq!(files.len(), v1_files.len());

    // Rolled back: large and small get version 1's content again, medium stays; the tree is
    // version 1's again.
    let reached = BTreeSet::from(["large".to_owned(), "small".to_owned()]);
    let back = deliver(
        &syncer,
        &fx,
        &v2,
        &Scope::default().rendering_from(reached, &v1).keeping(medium()),
    );
    assert_eq!(changed_files(&back), 2);
    assert_eq!(branch_files(&fx.gitops, "dev"), v1_files);
    assert_eq!(tree_of(&fx, "dev"), v1_tree);

    // The whole environment at version 2: the record of delivered files knew medium's folder
    // (held, not rendered, by the scoped deliveries), so only the three changed assignments
    // render.
    let all = deliver(&syncer, &fx, &v2, &Scope::default());
    assert_eq!((all.assignments, all.rendered), (3, 3));
    assert_eq!(changed_files(&all), 3);
    let files = branch_files(&fx.gitops, "dev");
    for ct in ["large", "medium", "small"] {
        assert_eq!(reconciler(&files, ct), "kind: Reconciler\nversion: v2\n");
    }
    // Nothing left to do.
    let again = deliver(&syncer, &fx, &v2, &Scope::default());
    assert_eq!((again.rendered, changed_files(&again)), (0, 0));
}
