//! `pr` mode against a GitHub REST stand-in on loopback: branches and pull requests as the
//! original makes them, no duplicates, repair after a crash, superseding only the
//! scheduler's own pull requests, the `promoted` label, and failures as issues.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, base_repo, cluster_type, sync};
use kalypso_git::{Delivery, Mode, Outcome, Syncer};
use kalypso_testkit::{FakeGitHub, GitHttpServer, branch_files, rev_parse, runtime, write_files};

struct Scenario {
    rt: tokio::runtime::Runtime,
    fx: Fixture,
    git: GitHttpServer,
    github: FakeGitHub,
}

impl Scenario {
    fn new() -> Scenario {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let git = GitHttpServer::start(rt.handle(), dir.path().join("repos"), None);
        let github = FakeGitHub::start(rt.handle());
        let fx = Fixture::in_dir(
            dir,
            Some(&git.url("contoso/gitops.git")),
            Some(&git.url("contoso/app.git")),
        );
        // A pull request needs a base branch.
        write_files(&fx.gitops, "dev", &[("README.md", Some("platform"))], "init");
        Scenario { rt, fx, git, github }
    }

    fn syncer(&self) -> Syncer {
        let mut settings = self.fx.settings();
        settings.delivery.mode = Mode::Auto;
        settings.delivery.github_api_url = self.github.url();
        Syncer::new(settings, self.rt.handle().clone()).unwrap()
    }

    fn sync(&self) -> Result<kalypso_git::EnvReport, kalypso_git::sync::Error> {
        sync(
            &self.syncer(),
            &self.git.url("contoso/control-plane.git"),
            &["dev"],
        )
        .remove(0)
    }

    fn pushes(&self) -> usize {
        self.git
            .requests()
            .iter()
            .filter(|r| r.starts_with("POST /contoso/gitops.git/git-receive-pack"))
            .count()
    }
}

fn pull_request(report: &kalypso_git::EnvReport) -> &Delivery {
    match &report.outcome {
        Outcome::Delivered(t) => &t[0].delivery,
        Outcome::Failed { failures, .. } => panic!("failed: {failures:?}"),
    }
}

#[test]
fn opens_one_pull_request_per_change_and_none_when_nothing_changed() {
    let s = Scenario::new();
    let report = s.sync().unwrap();
    let Delivery::PullRequest {
        number,
        branch,
        commit,
        created,
        promoted,
        ..
    } = pull_request(&report).clone()
    else {
        panic!("expected a pull request");
    };
    assert!(created && !promoted);
    assert!(
        branch.starts_with("kalypso/dev/") && branch.len() == "kalypso/dev/".len() + 12,
        "{branch}"
    );
    // The branch holds the tree; the base branch is untouched.
    assert_eq!(
        rev_parse(&s.fx.gitops, &format!("refs/heads/{branch}")),
        Some(commit.to_string())
    );
    assert!(branch_files(&s.fx.gitops, &branch).contains_key("large/app-dev-target/reconciler.yaml"));
    assert_eq!(branch_files(&s.fx.gitops, "dev").len(), 1);

    let created = s.github.requests_to("POST", "/repos/contoso/gitops/pulls");
    assert_eq!(created.len(), 1);
    let body = &created[0].body;
    assert_eq!(body["base"], "dev");
    assert_eq!(body["head"], branch.as_str());
    assert_eq!(body["title"], format!("Update manifests in dev from {branch}"));
    assert_eq!(body["body"], "This PR updates the manifests in GitOps Repo");
    assert_eq!(body["maintainer_can_modify"], true);
    assert!(s.github.requests_to("POST", "/labels").is_empty());

    // Same inputs: no push, no new pull request.
    let pushes = s.pushes();
    let again = s.sync().unwrap();
    assert!(
        matches!(pull_request(&again), Delivery::PullRequest { number: n, created: false, .. } if *n == number)
    );
    assert_eq!(s.pushes(), pushes);
    assert_eq!(
        s.github.requests_to("POST", "/repos/contoso/gitops/pulls").len(),
        1
    );
    assert_eq!(s.github.pulls().iter().filter(|p| p.state == "open").count(), 1);
}

#[test]
fn a_pull_request_opened_concurrently_is_adopted_not_duplicated() {
    let s = Scenario::new();
    let first = s.sync().unwrap();
    let Delivery::PullRequest { number, .. } = pull_request(&first).clone() else {
        panic!()
    };
    // Another run opened the same pull request after this one listed the open ones: GitHub
    // answers 422 "already exists", and the existing pull request is used.
    s.github.hide_pulls_from_next_lists(1);
    let second = s.sync().unwrap();
    assert!(
        matches!(pull_request(&second), Delivery::PullRequest { number: n, created: false, .. } if *n == number)
    );
    assert_eq!(
        s.github.requests_to("POST", "/repos/contoso/gitops/pulls").len(),
        2
    );
    assert_eq!(s.github.pulls().len(), 1);
}

#[test]
fn a_crash_between_push_and_pull_request_is_repaired_by_the_next_run() {
    let s = Scenario::new();
    // GitHub is down after the push: the run fails with the branch pushed and no PR.
    s.github.fail("GET", "/pulls", 100);
    let err = s.sync().unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(s.github.pulls().is_empty());
    let pushes = s.pushes();
    assert_eq!(pushes, 1);

    s.github.clear_failures();
    let report = s.sync().unwrap();
    let Delivery::PullRequest { branch, created, .. } = pull_request(&report) else {
        panic!("expected a pull request");
    };
    assert!(*created);
    // The branch pushed before the crash was reused, not pushed again.
    assert_eq!(s.pushes(), pushes);
    assert_eq!(s.github.pulls().len(), 1);
    assert_eq!(&s.github.pulls()[0].head, branch);
}

#[test]
fn supersedes_only_its_own_older_pull_requests() {
    let s = Scenario::new();
    let someone = s.github.add_pull("feature/tweak", "contoso/gitops", "dev");
    let fork = s
        .github
        .add_pull("kalypso/dev/aaaaaaaaaaaa", "someone/gitops", "dev");
    let other_base = s
        .github
        .add_pull("kalypso/stage/bbbbbbbbbbbb", "contoso/gitops", "stage");
    let first = s.sync().unwrap();
    let Delivery::PullRequest {
        number: first,
        branch: first_branch,
        ..
    } = pull_request(&first).clone()
    else {
        panic!()
    };
    // New content: a new pull request replaces the scheduler's previous one.
    write_files(
        &s.fx.control_plane,
        "main",
        &[(
            "templates/reconciler.yaml",
            Some(&common::template(
                "reconciler",
                "reconciler",
                "kind: Reconciler\nversion: v2",
            )),
        )],
        "v2",
    );
    let second = s.sync().unwrap();
    let Delivery::PullRequest { number, closed, .. } = pull_request(&second).clone() else {
        panic!()
    };
    assert!(number > first);
    assert_eq!(closed, [first]);
    let state = |n: u64| {
        s.github
            .pulls()
            .into_iter()
            .find(|p| p.number == n)
            .unwrap()
            .state
    };
    assert_eq!(state(first), "closed");
    assert_eq!(state(number), "open");
    for n in [someone, fork, other_base] {
        assert_eq!(state(n), "open", "pull request #{n} is not the scheduler's own");
    }
    // The superseded branch is deleted.
    assert_eq!(
        rev_parse(&s.fx.gitops, &format!("refs/heads/{first_branch}")),
        None
    );

    // Back in step with the GitOps branch (say the PR was merged by hand): nothing to do,
    // and the scheduler's stale pull request is closed.
    let open_branch = s
        .github
        .pulls()
        .into_iter()
        .find(|p| p.number == number)
        .unwrap()
        .head;
    let merged = rev_parse(&s.fx.gitops, &format!("refs/heads/{open_branch}")).unwrap();
    kalypso_testkit::git(&s.fx.gitops, &["update-ref", "refs/heads/dev", &merged]);
    let third = s.sync().unwrap();
    assert!(matches!(pull_request(&third), Delivery::UpToDate { closed, .. } if closed == &vec![number]));
    assert_eq!(state(number), "closed");
    assert_eq!(state(someone), "open");
}

#[test]
fn labels_promotions() {
    let s = Scenario::new();
    let main = rev_parse(&s.fx.control_plane, "refs/heads/main").unwrap();
    write_files(
        &s.fx.control_plane,
        "dev",
        &[("base-repo.yaml", Some(&base_repo(Some(&main))))],
        "promote",
    );
    let report = s.sync().unwrap();
    let Delivery::PullRequest {
        number,
        branch,
        promoted,
        ..
    } = pull_request(&report).clone()
    else {
        panic!()
    };
    assert!(promoted);
    let labels = s.github.requests_to("POST", &format!("/issues/{number}/labels"));
    assert_eq!(labels.len(), 1);
    assert_eq!(labels[0].body["labels"][0], "promoted");
    assert_eq!(
        branch_files(&s.fx.gitops, &branch)[".github/tracking/Promoted_Commit_Id"],
        main.as_bytes()
    );
    // Labelled once only.
    s.sync().unwrap();
    assert_eq!(
        s.github
            .requests_to("POST", &format!("/issues/{number}/labels"))
            .len(),
        1
    );
    assert!(
        s.github.requests().iter().all(|r| r.authorization.is_none()),
        "no token configured"
    );
}

#[test]
fn failures_become_issues_that_follow_the_error_and_close_when_fixed() {
    let s = Scenario::new();
    let title = "Can't generate manifests for deplyment target app-dev-target in cluster type large in dev environment";
    let someone_elses = s.github.add_issue("Cluster drone is slow", "please look");
    write_files(
        &s.fx.control_plane,
        "dev",
        &[(
            "cluster-types/large.yaml",
            Some(&cluster_type("large", "missing-one")),
        )],
        "break",
    );
    let report = s.sync().unwrap();
    let Outcome::Failed {
        issues: Some(issues), ..
    } = &report.outcome
    else {
        panic!("expected a failure with issues: {:?}", report.outcome);
    };
    assert_eq!(issues.created.len(), 1);
    let issue = |title: &str| s.github.issues().into_iter().find(|i| i.title == title).unwrap();
    assert!(issue(title).body.contains("missing-one"));
    assert!(
        s.github.pulls().is_empty(),
        "nothing is delivered while anything fails"
    );

    // Same failure: nothing to do. Different failure: the text is updated.
    s.sync().unwrap();
    assert_eq!(
        s.github.requests_to("POST", "/repos/contoso/gitops/issues").len(),
        1
    );
    assert!(
        s.github
            .requests_to("PATCH", &format!("/issues/{}", issue(title).number))
            .is_empty()
    );
    write_files(
        &s.fx.control_plane,
        "dev",
        &[(
            "cluster-types/large.yaml",
            Some(&cluster_type("large", "missing-two")),
        )],
        "break differently",
    );
    s.sync().unwrap();
    assert!(issue(title).body.contains("missing-two"));
    assert_eq!(issue(title).state, "open");

    // Fixed: the issue closes, the change is delivered, other issues stay.
    write_files(
        &s.fx.control_plane,
        "dev",
        &[(
            "cluster-types/large.yaml",
            Some(&cluster_type("large", "reconciler")),
        )],
        "fix",
    );
    let fixed = s.sync().unwrap();
    assert!(matches!(pull_request(&fixed), Delivery::PullRequest { .. }));
    assert_eq!(issue(title).state, "closed");
    let other = s
        .github
        .issues()
        .into_iter()
        .find(|i| i.number == someone_elses)
        .unwrap();
    assert_eq!(other.state, "open");
    assert_eq!(
        s.github.requests_to("POST", "/repos/contoso/gitops/issues").len(),
        1
    );
}

#[test]
fn a_failing_workload_is_reported_as_an_issue_while_the_rest_goes_out_in_a_pull_request() {
    let s = Scenario::new();
    // The workload repository breaks, and the environment gains a cluster type.
    common::break_the_workload_and_add_a_cluster_type(&s.fx);
    let report = s.sync().unwrap();
    assert!(matches!(
        pull_request(&report),
        Delivery::PullRequest { created: true, .. }
    ));
    assert!(!report.is_success());
    let title = "Can't generate manifests in dev environment";
    let issues = s.github.issues();
    let issue = issues.iter().find(|i| i.title == title).unwrap();
    assert!(issue.body.contains("workload.yaml"), "{}", issue.body);
    assert_eq!(issue.state, "open");

    // Fixed: the issue closes.
    common::fix_the_workload(&s.fx);
    let fixed = s.sync().unwrap();
    assert!(fixed.is_success());
    let issues = s.github.issues();
    assert_eq!(issues.iter().find(|i| i.title == title).unwrap().state, "closed");
}

#[test]
fn sends_the_token_to_github() {
    let s = Scenario::new();
    let file = s.fx.dir.path().join("token");
    std::fs::write(&file, "ghp_forTheApi0123456789").unwrap();
    let mut settings = s.fx.settings();
    settings.delivery.github_api_url = s.github.url();
    settings.auth.token_file = Some(file);
    let syncer = Syncer::new(settings, s.rt.handle().clone()).unwrap();
    sync(&syncer, &s.git.url("contoso/control-plane.git"), &["dev"])
        .remove(0)
        .unwrap();
    let requests = s.github.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer ghp_forTheApi0123456789"))
    );
}

#[test]
fn dry_runs_call_no_api_and_push_nothing() {
    let s = Scenario::new();
    let mut settings = s.fx.settings();
    settings.delivery.github_api_url = s.github.url();
    settings.delivery.dry_run = true;
    let syncer = Syncer::new(settings, s.rt.handle().clone()).unwrap();
    let url = s.git.url("contoso/control-plane.git");
    let report = sync(&syncer, &url, &["dev"]).remove(0).unwrap();
    assert!(
        matches!(pull_request(&report), Delivery::DryRun { mode: Mode::Pr, changes } if changes.added == 4),
        "{report:?}"
    );
    // A broken environment in a dry run opens no issue either.
    write_files(
        &s.fx.control_plane,
        "dev",
        &[(
            "cluster-types/large.yaml",
            Some(&cluster_type("large", "missing")),
        )],
        "break",
    );
    let broken = sync(&syncer, &url, &["dev"]).remove(0).unwrap();
    assert!(matches!(broken.outcome, Outcome::Failed { issues: None, .. }));
    assert!(s.github.requests().is_empty());
    assert_eq!(s.pushes(), 0);
}
