//! Every BaseRepo of an environment brings its branch and path at its pinned commit into
//! the environment, as the original's per-BaseRepo Flux GitRepository + Kustomization do
//! (`controllers/baserepo_controller.go`); only the one named `main` is promoted. Real git
//! repositories over `file://`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, cluster_type, file_url, sync, template};
use kalypso_git::{Outcome, Syncer};
use kalypso_testkit::{branch_files, runtime, write_files};

fn extra_base(name: &str, branch: &str, path: &str, commit: Option<&str>) -> String {
    let mut text = format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: BaseRepo\nmetadata:\n  name: {name}\nspec:\n  \
         repo: https://github.com/contoso/control-plane\n  branch: {branch}\n  path: {path}\n"
    );
    if let Some(c) = commit {
        text.push_str(&format!("  commit: {c}\n"));
    }
    text
}

fn failures(report: &kalypso_git::EnvReport) -> String {
    match &report.outcome {
        Outcome::Delivered(_) => String::new(),
        Outcome::Failed { failures, .. } => format!("{failures:?}"),
    }
}

#[test]
fn every_base_repo_brings_its_branch_and_path_at_its_pinned_commit() {
    let rt = runtime();
    let fx = Fixture::new();
    // A second BaseRepo delivers a reconciler Template from branch `platform`, folder
    // `extra`, pinned at the first of two commits.
    let pinned = write_files(
        &fx.control_plane,
        "platform",
        &[
            (
                "extra/special.yaml",
                Some(&template(
                    "special",
                    "reconciler",
                    "kind: Special\nversion: pinned",
                )),
            ),
            (
                "elsewhere/ignored.yaml",
                Some(&template("ignored", "reconciler", "kind: Ignored")),
            ),
        ],
        "special v1",
    );
    write_files(
        &fx.control_plane,
        "platform",
        &[(
            "extra/special.yaml",
            Some(&template("special", "reconciler", "kind: Special\nversion: tip")),
        )],
        "special v2",
    );
    write_files(
        &fx.control_plane,
        "dev",
        &[
            (
                "cluster-types/large.yaml",
                Some(&cluster_type("large", "special")),
            ),
            (
                "platform-base.yaml",
                Some(&extra_base("platform", "platform", "extra", Some(&pinned))),
            ),
        ],
        "use the platform base",
    );
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let report = reports[0].as_ref().unwrap();
    assert_eq!(failures(report), "");
    let files = branch_files(&fx.gitops, "dev");
    assert_eq!(
        files["large/app-dev-target/reconciler.yaml"], b"kind: Special\nversion: pinned\n",
        "the pinned commit, not the branch tip"
    );
    assert_eq!(
        report.revisions.bases.get("platform").map(String::as_str),
        Some(pinned.trim())
    );
    // Only BaseRepo `main` is promoted: no Promoted_Commit_Id from `platform`'s pin.
    assert!(!files.contains_key(".github/tracking/Promoted_Commit_Id"));

    // Unpinned, it follows its branch's tip.
    write_files(
        &fx.control_plane,
        "dev",
        &[(
            "platform-base.yaml",
            Some(&extra_base("platform", "platform", "extra", None)),
        )],
        "follow the tip",
    );
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    assert_eq!(failures(reports[0].as_ref().unwrap()), "");
    assert_eq!(
        branch_files(&fx.gitops, "dev")["large/app-dev-target/reconciler.yaml"],
        b"kind: Special\nversion: tip\n"
    );
}

#[test]
fn without_base_repo_main_the_main_branch_is_not_read() {
    let rt = runtime();
    let fx = Fixture::new();
    // The only BaseRepo is `platform`, which brings just one Template: the main branch's
    // Templates and registration do not reach the environment (nothing is scheduled).
    let pinned = write_files(
        &fx.control_plane,
        "platform",
        &[(
            "extra/special.yaml",
            Some(&template("special", "reconciler", "kind: Special")),
        )],
        "special",
    );
    write_files(
        &fx.control_plane,
        "dev",
        &[
            ("base-repo.yaml", None),
            (
                "platform-base.yaml",
                Some(&extra_base("platform", "platform", "extra", Some(&pinned))),
            ),
        ],
        "only platform",
    );
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let reports = sync(&syncer, &file_url(&fx.control_plane), &["dev"]);
    let report = reports[0].as_ref().unwrap();
    assert_eq!(failures(report), "");
    let files = branch_files(&fx.gitops, "dev");
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        ["large/README.md"],
        "no workload arrives without BaseRepo main"
    );
}

#[test]
fn without_any_base_repo_the_main_tip_is_read_with_a_warning() {
    let fx = Fixture::new();
    write_files(&fx.control_plane, "dev", &[("base-repo.yaml", None)], "no base");
    let rt = runtime();
    let syncer = Syncer::new(fx.settings(), rt.handle().clone()).unwrap();
    let url = kalypso_git::RepoUrl::parse(&file_url(&fx.control_plane)).unwrap();
    let mut pass = syncer.pass(&url).unwrap();
    let env = pass.environments(&["dev".to_owned()]).unwrap().remove(0);
    let resolved = pass.resolve(&env).unwrap();
    assert!(!resolved.inputs.main.files().is_empty());
    let engine = kalypso_template::Engine::new();
    let context = kalypso_core::run::RunContext::new(&engine);
    let (outcome, _) = kalypso_core::run::run(
        kalypso_core::run::Request::new("dev", &resolved.inputs),
        &context,
        &mut kalypso_core::run::Collect::default(),
    );
    let warnings: Vec<String> = outcome.diagnostics.warnings().map(ToString::to_string).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("no-base-repo") && w.contains("environment dev has no BaseRepo")),
        "{warnings:?}"
    );
}
