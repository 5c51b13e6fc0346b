//! A damaged cache (a garbled reference, truncated packs, garbled packs) is detected as such, and removing its mirrors ([`Syncer::repair_cache`]) lets the next pass
//! deliver as if nothing had happened.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use common::{Fixture, file_url, sync};
use kalypso_git::{RepoUrl, Syncer};
use kalypso_testkit::runtime;

fn mirror(fx: &Fixture, repo: &Path) -> PathBuf {
    fx.cache
        .join(RepoUrl::parse(&file_url(repo)).unwrap().cache_name())
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// A fixture whose dev environment was delivered once, its syncer and the runtime it uses.
fn dev_delivered() -> (tokio::runtime::Runtime, Fixture, Syncer) {
    let rt = runtime();
    let fx = Fixture::new();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    assert!(
        sync(&syncer, &file_url(&fx.control_plane), &["dev"])
            .remove(0)
            .unwrap()
            .is_success()
    );
    (rt, fx, syncer)
}

/// Delivers dev, damages the cache with `damage`, moves dev's branch (so that the fast path
/// does not answer), and checks that the next pass fails as damage and the one after a
/// repair delivers.
fn damaged_then_repaired(damage: impl FnOnce(&Fixture)) {
    let (_rt, fx, syncer) = dev_delivered();
    damage(&fx);
    common::add_a_cluster_type(&fx);
    let url = RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let failed = syncer
        .pass(&url)
        .and_then(|mut pass| {
            let env = pass.environments(&["dev".into()])?.remove(0);
            pass.sync(&env)
        })
        .unwrap_err();
    assert!(failed.is_cache_damage(), "{failed} {failed:?}");
    assert!(syncer.repair_cache() >= 1);
    let report = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    assert!(report.is_success(), "{report:?}");
    assert!(
        kalypso_testkit::branch_files(&fx.gitops, "dev").contains_key("small/app-dev-target/reconciler.yaml")
    );
}

#[test]
fn a_garbled_reference_in_a_mirror_is_damage_and_repaired() {
    damaged_then_repaired(|fx| {
        let reference = mirror(fx, &fx.workload).join("refs/remotes/origin/main");
        std::fs::write(reference, "not an object id\n").unwrap();
    });
}

/// Truncates every file under the objects folder of `repo`'s mirror.
fn truncate_objects(fx: &Fixture, repo: &Path) {
    let mut files = Vec::new();
    files_under(&mirror(fx, repo).join("objects"), &mut files);
    assert!(!files.is_empty());
    for file in files {
        let len = std::fs::metadata(&file).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(len / 3)
            .unwrap();
    }
}

#[test]
fn truncated_packs_in_a_mirror_are_damage_and_repaired() {
    // The workload's branch did not move: its mirror is read, not fetched.
    damaged_then_repaired(|fx| truncate_objects(fx, &fx.workload));
}

#[test]
fn truncated_packs_of_a_moved_branch_are_fetched_again() {
    // The control plane's dev moved: its mirror's copy, unreadable, is not offered as had,
    // and the fetch brings the branch whole.
    let (_rt, fx, syncer) = dev_delivered();
    truncate_objects(&fx, &fx.control_plane);
    common::add_a_cluster_type(&fx);
    let report = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    assert!(report.is_success(), "{report:?}");
    assert!(
        kalypso_testkit::branch_files(&fx.gitops, "dev").contains_key("large/app-dev-target/reconciler.yaml")
    );
}

#[test]
fn garbage_packs_in_the_gitops_mirror_do_not_stop_delivery() {
    // libgit2 refuses the garbled packs and the fetch brings the objects again: the pass
    // delivers without needing a repair.
    let (_rt, fx, syncer) = dev_delivered();
    let mut files = Vec::new();
    files_under(&mirror(&fx, &fx.gitops).join("objects"), &mut files);
    let mut garbled = 0;
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "pack"))
    {
        let len = std::fs::metadata(file).unwrap().len() as usize;
        let mut bytes = b"PACK".to_vec();
        bytes.resize(len, 0xa5);
        std::fs::write(file, bytes).unwrap();
        garbled += 1;
    }
    assert!(garbled > 0);
    common::add_a_cluster_type(&fx);
    let report = sync(&syncer, &file_url(&fx.control_plane), &["dev"])
        .remove(0)
        .unwrap();
    assert!(report.is_success(), "{report:?}");
    let files = kalypso_testkit::branch_files(&fx.gitops, "dev");
    assert!(files.contains_key("small/app-dev-target/reconciler.yaml"));
    assert!(files.contains_key("large/app-dev-target/reconciler.yaml"));
}
