//! The files of the last delivery, kept in the cache: a sync in a new process renders only
//! the assignments whose inputs changed, puts the others on the branch by the ids of their
//! files, and renders in full when one of those files is no longer in the cache.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, add_a_cluster_type, cluster_type, file_url, release_reconciler_v2, sync, template};
use kalypso_git::{Delivery, EnvReport, Syncer};
use kalypso_testkit::{branch_files, init_bare, runtime, write_files};

/// Syncs dev with a new syncer (as a new process would) and returns its report.
fn sync_dev(fx: &Fixture) -> EnvReport {
    let rt = runtime();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let report = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    assert!(report.is_success(), "{report:?}");
    report
}

fn delivery(report: &EnvReport) -> &Delivery {
    match &report.outcome {
        kalypso_git::Outcome::Delivered(targets) => &targets[0].delivery,
        other => panic!("{other:?}"),
    }
}

fn committed(report: &EnvReport) -> bool {
    matches!(delivery(report), Delivery::Committed { .. })
}

fn up_to_date(report: &EnvReport) -> bool {
    matches!(delivery(report), Delivery::UpToDate { .. })
}

const LARGE: &str = "large/app-dev-target/reconciler.yaml";
const SMALL: &str = "small/app-dev-target/reconciler.yaml";

#[test]
fn a_new_process_renders_only_the_assignments_whose_inputs_changed() {
    let fx = Fixture::new();
    add_a_cluster_type(&fx);
    let first = sync_dev(&fx);
    assert_eq!((first.assignments, first.rendered), (2, 2));
    assert!(committed(&first));
    assert!(fx.cache.join("state").exists());

    // Nothing changed: nothing rendered, nothing committed.
    let again = sync_dev(&fx);
    assert_eq!((again.assignments, again.rendered), (2, 0));
    assert!(up_to_date(&again), "{again:?}");

    // One cluster type takes another reconciler template: that assignment alone is
    // rendered, and only its file changes.
    write_files(
        &fx.control_plane,
        "main",
        &[(
            "templates/edge.yaml",
            Some(&template("edge", "reconciler", "kind: Reconciler\nversion: edge")),
        )],
        "an edge reconciler",
    );
    write_files(
        &fx.control_plane,
        "dev",
        &[("cluster-types/small.yaml", Some(&cluster_type("small", "edge")))],
        "small takes the edge reconciler",
    );
    let before = branch_files(&fx.gitops, "dev");
    let retemplated = sync_dev(&fx);
    assert_eq!(retemplated.rendered, 1);
    let Delivery::Committed { changes, .. } = delivery(&retemplated) else {
        panic!("{retemplated:?}");
    };
    assert_eq!((changes.added, changes.modified, changes.deleted), (0, 1, 0));
    let after = branch_files(&fx.gitops, "dev");
    assert_eq!(after[SMALL], b"kind: Reconciler\nversion: edge\n");
    assert_eq!(after[LARGE], before[LARGE]);

    // A template the other uses: that one rendered, committed.
    release_reconciler_v2(&fx);
    let released = sync_dev(&fx);
    assert_eq!(released.rendered, 1);
    assert!(committed(&released));
    let files = branch_files(&fx.gitops, "dev");
    assert_eq!(files[LARGE], b"kind: Reconciler\nversion: v2\n");
    assert_eq!(files[SMALL], b"kind: Reconciler\nversion: edge\n");

    // Someone edits a file on the GitOps branch: a sync with nothing to render puts the
    // delivered file back, by its id.
    write_files(
        &fx.gitops,
        "dev",
        &[(LARGE, Some("edited by hand\n"))],
        "hand edit",
    );
    let restored = sync_dev(&fx);
    assert_eq!(restored.rendered, 0);
    assert!(committed(&restored));
    assert_eq!(branch_files(&fx.gitops, "dev"), files);
}

#[test]
fn a_delivered_file_missing_from_the_cache_means_a_full_render() {
    let fx = Fixture::new();
    add_a_cluster_type(&fx);
    let first = sync_dev(&fx);
    let files = branch_files(&fx.gitops, "dev");

    // The GitOps repository is created anew and the cache's mirrors are gone: the files
    // of the last delivery are nowhere.
    std::fs::remove_dir_all(&fx.gitops).unwrap();
    init_bare(&fx.gitops);
    for entry in std::fs::read_dir(&fx.cache).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "state" && entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path()).unwrap();
        }
    }
    let again = sync_dev(&fx);
    assert_eq!(again.rendered, first.rendered, "rendered in full");
    assert!(committed(&again));
    assert_eq!(branch_files(&fx.gitops, "dev"), files);
}

#[test]
fn a_damaged_record_of_the_files_means_a_full_render() {
    let fx = Fixture::new();
    sync_dev(&fx);
    let mut records = 0;
    for control_plane in std::fs::read_dir(fx.cache.join("state")).unwrap() {
        for file in std::fs::read_dir(control_plane.unwrap().path()).unwrap() {
            let path = file.unwrap().path();
            if path.extension().is_some_and(|e| e == "files") {
                let mut bytes = std::fs::read(&path).unwrap();
                let middle = bytes.len() / 2;
                bytes[middle] ^= 1;
                std::fs::write(&path, bytes).unwrap();
                records += 1;
            }
        }
    }
    assert_eq!(records, 1, "dev's files are recorded");
    let again = sync_dev(&fx);
    assert_eq!(again.rendered, 1);
    assert!(up_to_date(&again));
}
