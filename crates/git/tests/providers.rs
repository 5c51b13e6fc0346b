//! `pr` mode, failure reports and commit statuses on GitLab, Azure DevOps and Gitea, each
//! against a stand-in of its documented REST API (kalypso_testkit::FakeForge), with the
//! GitOps repository a real git repository served over smart HTTP on loopback: the exact
//! requests (paths, bodies, authentication headers), superseding only the scheduler's own
//! pull requests, reports that follow the error, and tokens never shown.
#![allow(clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use common::{Fixture, base_repo, cluster_type, sync};
use kalypso_git::forge::{self, CommitStatus, Provider, ProviderSettings, StatusState};
use kalypso_git::{Delivery, Mode, Outcome, RepoUrl, RetryPolicy, Syncer};
use kalypso_testkit::{
    FakeForge, Flavor, ForgeRequest, GitHttpServer, branch_files, rev_parse, runtime, write_files,
};
use serde_json::json;

const TOKEN: &str = "forge-token-0123456789abcdef";

struct Scenario {
    rt: tokio::runtime::Runtime,
    fx: Fixture,
    git: GitHttpServer,
    forge: FakeForge,
    flavor: Flavor,
    /// The repository's own name on the forge.
    own: &'static str,
    /// The GitOps repository's URL, as the control plane names it.
    gitops_url: String,
}

impl Scenario {
    fn new(flavor: Flavor) -> Scenario {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repos");
        let git = GitHttpServer::start(rt.handle(), &root, None);
        // Azure DevOps repositories live at ORG/PROJECT/_git/REPO.
        let (own, gitops_url) = match flavor {
            Flavor::AzureDevOps => ("contoso/platform/gitops", git.url("contoso/platform/_git/gitops")),
            _ => ("contoso/gitops", git.url("contoso/gitops.git")),
        };
        let forge = FakeForge::start(rt.handle(), flavor, own, Some(TOKEN));
        let fx = Fixture::in_dir(dir, Some(&gitops_url), Some(&git.url("contoso/app.git")));
        if flavor == Flavor::AzureDevOps {
            let project = root.join("contoso/platform/_git");
            std::fs::create_dir_all(&project).unwrap();
            std::os::unix::fs::symlink(&fx.gitops, project.join("gitops")).unwrap();
        }
        write_files(&fx.gitops, "dev", &[("README.md", Some("platform"))], "init");
        std::fs::write(fx.dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        Scenario {
            rt,
            fx,
            git,
            forge,
            flavor,
            own,
            gitops_url,
        }
    }

    fn provider(&self) -> Provider {
        match self.flavor {
            Flavor::GitLab => Provider::GitLab,
            Flavor::AzureDevOps => Provider::AzureDevOps,
            Flavor::Gitea => Provider::Gitea,
        }
    }

    fn settings(&self) -> kalypso_git::Settings {
        let mut settings = self.fx.settings();
        settings.delivery.mode = Mode::Auto;
        settings.delivery.provider = Some(self.provider());
        settings.delivery.provider_api_url = Some(self.forge.api_url());
        settings.auth.token_file = Some(self.fx.dir.path().join("token"));
        settings
    }

    fn sync_with(
        &self,
        settings: kalypso_git::Settings,
    ) -> Result<kalypso_git::EnvReport, kalypso_git::sync::Error> {
        let syncer = Syncer::new(settings, self.rt.handle().clone()).unwrap();
        sync(&syncer, &self.git.url("contoso/control-plane.git"), &["dev"]).remove(0)
    }

    fn sync(&self) -> Result<kalypso_git::EnvReport, kalypso_git::sync::Error> {
        self.sync_with(self.settings())
    }

    /// The path of the API's `rest` for the repository (pull requests, statuses).
    fn repo_path(&self, rest: &str) -> String {
        match self.flavor {
            Flavor::GitLab => format!("/api/v4/projects/contoso%2Fgitops/{rest}"),
            Flavor::Gitea => format!("/api/v1/repos/contoso/gitops/{rest}"),
            Flavor::AzureDevOps => format!("/contoso/platform/_apis/git/repositories/gitops/{rest}"),
        }
    }

    fn pulls_path(&self) -> String {
        self.repo_path(match self.flavor {
            Flavor::GitLab => "merge_requests",
            Flavor::Gitea => "pulls",
            Flavor::AzureDevOps => "pullrequests",
        })
    }

    fn pull_path(&self, number: u64) -> String {
        format!("{}/{number}", self.pulls_path())
    }

    /// Commits cluster type `large` of dev with reconciler template `template` (a missing
    /// one breaks the render).
    fn break_with(&self, template: &str) {
        write_files(
            &self.fx.control_plane,
            "dev",
            &[("cluster-types/large.yaml", Some(&cluster_type("large", template)))],
            "break",
        );
    }

    fn requests(&self, method: &str, path: &str) -> Vec<ForgeRequest> {
        self.forge
            .requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }

    fn state(&self, number: u64) -> String {
        self.forge
            .pulls()
            .into_iter()
            .find(|p| p.number == number)
            .unwrap()
            .state
    }

    fn closed_state(&self) -> &'static str {
        if self.flavor == Flavor::AzureDevOps {
            "abandoned"
        } else {
            "closed"
        }
    }

    /// Every request carried the token as the provider expects it, and nothing else.
    fn assert_authenticated(&self) {
        let requests = self.forge.requests();
        assert!(!requests.is_empty());
        for r in &requests {
            match self.flavor {
                Flavor::GitLab => {
                    assert_eq!(r.private_token.as_deref(), Some(TOKEN), "{r:?}");
                    assert_eq!(r.authorization, None, "{r:?}");
                }
                Flavor::Gitea => assert_eq!(
                    r.authorization.as_deref(),
                    Some(&*format!("token {TOKEN}")),
                    "{r:?}"
                ),
                Flavor::AzureDevOps => {
                    let basic = base64::engine::general_purpose::STANDARD.encode(format!(":{TOKEN}"));
                    assert_eq!(
                        r.authorization.as_deref(),
                        Some(&*format!("Basic {basic}")),
                        "{r:?}"
                    );
                    assert!(r.query.ends_with("api-version=7.1"), "{r:?}");
                }
            }
        }
    }
}

fn pull_request(report: &kalypso_git::EnvReport) -> &Delivery {
    match &report.outcome {
        Outcome::Delivered(t) => &t[0].delivery,
        Outcome::Failed { failures, .. } => panic!("failed: {failures:?}"),
    }
}

fn release_v2(s: &Scenario) {
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
}

fn opens_adopts_and_supersedes_only_its_own(flavor: Flavor) {
    let s = Scenario::new(flavor);
    let someone = s.forge.add_pull("feature/tweak", s.own, "dev");
    let fork = s
        .forge
        .add_pull("kalypso/dev/aaaaaaaaaaaa", "someone/gitops", "dev");
    let other_base = s.forge.add_pull("kalypso/stage/bbbbbbbbbbbb", s.own, "stage");

    let report = s.sync().unwrap();
    let Delivery::PullRequest {
        number: first,
        branch: first_branch,
        created,
        url,
        closed,
        ..
    } = pull_request(&report).clone()
    else {
        panic!("expected a pull request");
    };
    assert!(
        created && closed.is_empty(),
        "others' pull requests are left alone"
    );
    assert!(first_branch.starts_with("kalypso/dev/"), "{first_branch}");
    assert!(branch_files(&s.fx.gitops, &first_branch).contains_key("large/app-dev-target/reconciler.yaml"));
    assert_eq!(
        branch_files(&s.fx.gitops, "dev").len(),
        1,
        "the base branch is untouched"
    );
    let title = format!("Update manifests in dev from {first_branch}");
    let created = s.requests("POST", &s.pulls_path());
    assert_eq!(created.len(), 1);
    let expected = match flavor {
        Flavor::GitLab => json!({
            "source_branch": first_branch, "target_branch": "dev", "title": title,
            "description": "This PR updates the manifests in GitOps Repo", "remove_source_branch": true,
        }),
        Flavor::Gitea => json!({
            "head": first_branch, "base": "dev", "title": title,
            "body": "This PR updates the manifests in GitOps Repo",
        }),
        Flavor::AzureDevOps => json!({
            "sourceRefName": format!("refs/heads/{first_branch}"), "targetRefName": "refs/heads/dev",
            "title": title, "description": "This PR updates the manifests in GitOps Repo",
        }),
    };
    assert_eq!(created[0].body, expected);
    let expected_url = match flavor {
        Flavor::GitLab => format!("{}/contoso/gitops/-/merge_requests/{first}", s.forge.origin()),
        Flavor::Gitea => format!("{}/contoso/gitops/pulls/{first}", s.forge.origin()),
        Flavor::AzureDevOps => format!(
            "{}/contoso/platform/_git/gitops/pullrequest/{first}",
            s.forge.origin()
        ),
    };
    assert_eq!(url, expected_url);
    // The listing asks for open pull requests into the branch.
    let listing = s.requests("GET", &s.pulls_path());
    let query = &listing[0].query;
    match flavor {
        Flavor::GitLab => assert!(
            query.starts_with("state=opened&target_branch=dev&per_page=100&page=1"),
            "{query}"
        ),
        Flavor::Gitea => assert!(query.starts_with("state=open&limit=50&page=1"), "{query}"),
        Flavor::AzureDevOps => assert_eq!(
            query,
            "searchCriteria.status=active&searchCriteria.targetRefName=refs%2Fheads%2Fdev&$top=100&$skip=0&api-version=7.1"
        ),
    }

    // Same inputs: the open pull request is the one (no new one, nothing pushed).
    let again = s.sync().unwrap();
    assert!(
        matches!(pull_request(&again), Delivery::PullRequest { number, created: false, .. } if *number == first),
        "{again:?}"
    );
    assert_eq!(s.requests("POST", &s.pulls_path()).len(), 1);

    // Opened concurrently by another run after this one listed: the forge's conflict
    // answer is taken as "it exists", and the existing one adopted.
    s.forge.hide_pulls_from_next_lists(1);
    let concurrent = s.sync().unwrap();
    assert!(
        matches!(pull_request(&concurrent), Delivery::PullRequest { number, created: false, .. } if *number == first),
        "{concurrent:?}"
    );
    assert_eq!(s.requests("POST", &s.pulls_path()).len(), 2);
    assert_eq!(s.forge.pulls().len(), 4);

    // New content: a new pull request supersedes the scheduler's previous one only.
    release_v2(&s);
    let second = s.sync().unwrap();
    let Delivery::PullRequest { number, closed, .. } = pull_request(&second).clone() else {
        panic!("{second:?}")
    };
    assert!(number > first);
    assert_eq!(closed, [first]);
    let close = s.requests(
        match flavor {
            Flavor::GitLab => "PUT",
            _ => "PATCH",
        },
        &s.pull_path(first),
    );
    let expected = match flavor {
        Flavor::GitLab => json!({"state_event": "close"}),
        Flavor::Gitea => json!({"state": "closed"}),
        Flavor::AzureDevOps => json!({"status": "abandoned"}),
    };
    assert_eq!(
        close.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
        [expected]
    );
    assert_eq!(s.state(first), s.closed_state());
    assert_eq!(s.state(number), "open");
    for n in [someone, fork, other_base] {
        assert_eq!(s.state(n), "open", "pull request #{n} is not the scheduler's own");
    }
    assert_eq!(
        rev_parse(&s.fx.gitops, &format!("refs/heads/{first_branch}")),
        None
    );
    s.assert_authenticated();
}

#[test]
fn gitlab_merge_requests_are_opened_adopted_and_superseded() {
    opens_adopts_and_supersedes_only_its_own(Flavor::GitLab);
}

#[test]
fn azure_devops_pull_requests_are_opened_adopted_and_superseded() {
    opens_adopts_and_supersedes_only_its_own(Flavor::AzureDevOps);
}

#[test]
fn gitea_pull_requests_are_opened_adopted_and_superseded() {
    opens_adopts_and_supersedes_only_its_own(Flavor::Gitea);
}

fn labels_promotions(flavor: Flavor) {
    let s = Scenario::new(flavor);
    let main = rev_parse(&s.fx.control_plane, "refs/heads/main").unwrap();
    write_files(
        &s.fx.control_plane,
        "dev",
        &[("base-repo.yaml", Some(&base_repo(Some(&main))))],
        "promote",
    );
    let report = s.sync().unwrap();
    let Delivery::PullRequest { number, promoted, .. } = pull_request(&report).clone() else {
        panic!()
    };
    assert!(promoted);
    let labelled = |s: &Scenario| -> Vec<serde_json::Value> {
        let (method, path) = match flavor {
            Flavor::GitLab => ("PUT", s.pull_path(number)),
            Flavor::Gitea => (
                "POST",
                format!("/api/v1/repos/contoso/gitops/issues/{number}/labels"),
            ),
            Flavor::AzureDevOps => ("POST", s.repo_path(&format!("pullRequests/{number}/labels"))),
        };
        s.requests(method, &path).into_iter().map(|r| r.body).collect()
    };
    let expected = match flavor {
        Flavor::GitLab => json!({"add_labels": "promoted"}),
        // Gitea sets labels by id: kalypso created the label first.
        Flavor::Gitea => json!({"labels": [100]}),
        Flavor::AzureDevOps => json!({"name": "promoted"}),
    };
    assert_eq!(labelled(&s), std::slice::from_ref(&expected));
    if flavor == Flavor::Gitea {
        let created = s.requests("POST", "/api/v1/repos/contoso/gitops/labels");
        assert_eq!(created[0].body, json!({"name": "promoted", "color": "#0e8a16"}));
    }
    let pull = s.forge.pulls().into_iter().find(|p| p.number == number).unwrap();
    assert_eq!(pull.labels, ["promoted"]);
    // Labelled once only.
    s.sync().unwrap();
    assert_eq!(labelled(&s), [expected]);
    s.assert_authenticated();
}

#[test]
fn gitlab_labels_promotions() {
    labels_promotions(Flavor::GitLab);
}

#[test]
fn azure_devops_labels_promotions() {
    labels_promotions(Flavor::AzureDevOps);
}

#[test]
fn gitea_labels_promotions() {
    labels_promotions(Flavor::Gitea);
}

fn failures_are_reported_and_follow_the_error(flavor: Flavor) {
    let s = Scenario::new(flavor);
    let title = "Can't generate manifests for deplyment target app-dev-target in cluster type large in dev environment";
    let tag = "kalypso:gitops";
    let someone_elses = s.forge.add_issue("Cluster drone is slow", "please look", "");
    s.break_with("missing-one");
    let report = s.sync().unwrap();
    let Outcome::Failed {
        issues: Some(issues), ..
    } = &report.outcome
    else {
        panic!("expected a failure with issues: {:?}", report.outcome);
    };
    assert_eq!(issues.created.len(), 1);
    let number = issues.created[0];
    let issue = |n: u64| s.forge.issues().into_iter().find(|i| i.number == n).unwrap();
    assert_eq!(issue(number).title, title);
    assert!(
        issue(number).body.contains("missing-one"),
        "{}",
        issue(number).body
    );
    let (create_path, update_method) = match flavor {
        Flavor::GitLab => ("/api/v4/projects/contoso%2Fgitops/issues".to_owned(), "PUT"),
        Flavor::Gitea => ("/api/v1/repos/contoso/gitops/issues".to_owned(), "PATCH"),
        Flavor::AzureDevOps => ("/contoso/platform/_apis/wit/workitems/$Issue".to_owned(), "PATCH"),
    };
    let created = s.requests("POST", &create_path);
    assert_eq!(created.len(), 1);
    let body = &created[0].body;
    match flavor {
        Flavor::GitLab => {
            assert_eq!(body["title"], title);
            assert!(body["description"].as_str().unwrap().contains("missing-one"));
        }
        Flavor::Gitea => {
            assert_eq!(body["title"], title);
            assert!(body["body"].as_str().unwrap().contains("missing-one"));
        }
        Flavor::AzureDevOps => {
            assert_eq!(
                created[0].content_type.as_deref(),
                Some("application/json-patch+json")
            );
            assert_eq!(
                body[0],
                json!({"op": "add", "path": "/fields/System.Title", "value": title})
            );
            let description = body[1]["value"].as_str().unwrap();
            assert!(
                description.starts_with("<pre>") && description.contains("missing-one"),
                "{description}"
            );
            assert_eq!(
                body[2],
                json!({"op": "add", "path": "/fields/System.Tags", "value": tag})
            );
            assert_eq!(s.forge.work_item(number).unwrap().tags, tag);
        }
    }

    // The same error again: nothing changes.
    s.sync().unwrap();
    assert_eq!(s.requests("POST", &create_path).len(), 1);
    let item_path = match flavor {
        Flavor::GitLab => format!("/api/v4/projects/contoso%2Fgitops/issues/{number}"),
        Flavor::Gitea => format!("/api/v1/repos/contoso/gitops/issues/{number}"),
        Flavor::AzureDevOps => format!("/contoso/platform/_apis/wit/workitems/{number}"),
    };
    assert!(
        s.requests(update_method, &item_path).is_empty(),
        "an unchanged error is not rewritten"
    );

    // Another error: the text follows it.
    s.break_with("missing-two");
    s.sync().unwrap();
    assert_eq!(s.requests(update_method, &item_path).len(), 1);
    assert!(issue(number).body.contains("missing-two"));
    assert_eq!(issue(number).state, "open");

    // Fixed: the report closes, the change is delivered, the other issue stays open.
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
    assert_eq!(issue(number).state, "closed");
    let closing = s.requests(update_method, &item_path).pop().unwrap().body;
    let expected = match flavor {
        Flavor::GitLab => json!({"state_event": "close"}),
        Flavor::Gitea => json!({"state": "closed"}),
        // The first state of the Completed category of the project's process.
        Flavor::AzureDevOps => json!([{"op": "add", "path": "/fields/System.State", "value": "Done"}]),
    };
    assert_eq!(closing, expected);
    assert_eq!(issue(someone_elses).state, "open");
    s.assert_authenticated();
}

#[test]
fn gitlab_issues_report_failures() {
    failures_are_reported_and_follow_the_error(Flavor::GitLab);
}

#[test]
fn azure_boards_work_items_report_failures() {
    failures_are_reported_and_follow_the_error(Flavor::AzureDevOps);
}

/// A Scrum project has no `Issue` work item type: failures are `Impediment`s, closed by moving
/// them to `Closed`.
#[test]
fn azure_boards_of_a_scrum_project_report_failures_as_impediments() {
    let s = Scenario::new(Flavor::AzureDevOps);
    s.forge.use_scrum_process();
    s.break_with("missing-one");
    let report = s.sync().unwrap();
    let Outcome::Failed {
        issues: Some(issues), ..
    } = &report.outcome
    else {
        panic!("expected a failure with issues: {:?}", report.outcome);
    };
    assert_eq!(issues.created.len(), 1);
    let number = issues.created[0];
    // Issue's states: 404; the project's types; Impediment's states.
    let asked: Vec<String> = s
        .forge
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/wit/workitemtypes"))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        asked,
        [
            "/contoso/platform/_apis/wit/workitemtypes/Issue/states",
            "/contoso/platform/_apis/wit/workitemtypes",
            "/contoso/platform/_apis/wit/workitemtypes/Impediment/states",
        ]
    );
    assert_eq!(
        s.requests("POST", "/contoso/platform/_apis/wit/workitems/$Impediment")
            .len(),
        1
    );
    assert!(
        s.requests("POST", "/contoso/platform/_apis/wit/workitems/$Issue")
            .is_empty()
    );
    let query = s.requests("POST", "/contoso/platform/_apis/wit/wiql")[0].body["query"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(query.contains("[System.WorkItemType] = 'Impediment'"), "{query}");
    assert!(query.contains("NOT IN ('Closed', 'Removed')"), "{query}");
    assert_eq!(s.forge.work_item(number).unwrap().state, "Open");

    // The same error again: found by the query, not created twice.
    s.sync().unwrap();
    assert_eq!(
        s.requests("POST", "/contoso/platform/_apis/wit/workitems/$Impediment")
            .len(),
        1
    );
    // Fixed: closed.
    s.break_with("reconciler");
    s.sync().unwrap();
    let item = format!("/contoso/platform/_apis/wit/workitems/{number}");
    let closing = s.requests("PATCH", &item).pop().unwrap().body;
    assert_eq!(
        closing,
        json!([{"op": "add", "path": "/fields/System.State", "value": "Closed"}])
    );
    assert_eq!(s.forge.work_item(number).unwrap().state, "Closed");
    s.assert_authenticated();
}

#[test]
fn gitea_issues_report_failures() {
    failures_are_reported_and_follow_the_error(Flavor::Gitea);
}

fn a_rejected_token_is_never_shown(flavor: Flavor) {
    let s = Scenario::new(flavor);
    let wrong = "wrong-forge-token-9876543210";
    std::fs::write(s.fx.dir.path().join("wrong"), wrong).unwrap();
    let mut settings = s.settings();
    settings.auth.token_file = Some(s.fx.dir.path().join("wrong"));
    let error = s.sync_with(settings).unwrap_err();
    let text = format!("{error} {error:?}");
    // The stand-in quotes the credential it got in its 401; kalypso masks it.
    assert!(text.contains("401"), "{text}");
    assert!(!text.contains(wrong), "{text}");
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(":{wrong}"));
    assert!(!text.contains(&basic), "{text}");
    assert!(!error.is_transient(), "a refused credential is not retried");
}

#[test]
fn gitlab_tokens_are_never_shown() {
    a_rejected_token_is_never_shown(Flavor::GitLab);
}

#[test]
fn azure_devops_tokens_are_never_shown() {
    a_rejected_token_is_never_shown(Flavor::AzureDevOps);
}

#[test]
fn gitea_tokens_are_never_shown() {
    a_rejected_token_is_never_shown(Flavor::Gitea);
}

fn commit_statuses(flavor: Flavor) {
    let s = Scenario::new(flavor);
    let url = RepoUrl::parse(&s.gitops_url).unwrap();
    let settings = ProviderSettings {
        provider: Some(s.provider()),
        github_api_url: String::new(),
        api_url: Some(s.forge.api_url()),
    };
    let token = kalypso_git::redact::Secret::new(TOKEN);
    let forge = forge::connect(
        &url,
        &settings,
        Some(&token),
        RetryPolicy::immediate(3),
        s.rt.handle(),
    )
    .unwrap()
    .unwrap();
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let status = |state| CommitStatus {
        state,
        context: "kalypso/deployed/dev".into(),
        description: "Deployed to dev: 3/3 clusters".into(),
        target_url: None,
    };
    forge
        .set_commit_status(sha, &status(StatusState::Pending))
        .unwrap();
    // Set again (a retried call): GitLab refuses the same state twice; that is success.
    forge
        .set_commit_status(sha, &status(StatusState::Pending))
        .unwrap();
    let path = match flavor {
        Flavor::GitLab => format!("/api/v4/projects/contoso%2Fgitops/statuses/{sha}"),
        Flavor::Gitea => format!("/api/v1/repos/contoso/gitops/statuses/{sha}"),
        Flavor::AzureDevOps => {
            format!("/contoso/platform/_apis/git/repositories/gitops/commits/{sha}/statuses")
        }
    };
    // A transient failure is retried.
    s.forge.fail("POST", &path, 1);
    forge
        .set_commit_status(sha, &status(StatusState::Success))
        .unwrap();
    forge
        .set_commit_status(sha, &status(StatusState::Failure))
        .unwrap();
    let sent: Vec<serde_json::Value> = s.requests("POST", &path).into_iter().map(|r| r.body).collect();
    let body = |state: &str| match flavor {
        Flavor::GitLab => {
            json!({"state": state, "name": "kalypso/deployed/dev", "description": "Deployed to dev: 3/3 clusters"})
        }
        Flavor::Gitea => {
            json!({"state": state, "context": "kalypso/deployed/dev", "description": "Deployed to dev: 3/3 clusters"})
        }
        Flavor::AzureDevOps => json!({
            "state": state, "description": "Deployed to dev: 3/3 clusters",
            "context": {"genre": "kalypso/deployed", "name": "dev"},
        }),
    };
    let states = match flavor {
        Flavor::GitLab => ["running", "running", "success", "success", "failed"],
        Flavor::Gitea => ["pending", "pending", "success", "success", "failure"],
        Flavor::AzureDevOps => ["pending", "pending", "succeeded", "succeeded", "failed"],
    };
    assert_eq!(sent, states.map(body));
    assert_eq!(forge.retries(), 1);
    s.assert_authenticated();
}

#[test]
fn gitlab_commit_statuses() {
    commit_statuses(Flavor::GitLab);
}

#[test]
fn azure_devops_commit_statuses() {
    commit_statuses(Flavor::AzureDevOps);
}

#[test]
fn gitea_commit_statuses() {
    commit_statuses(Flavor::Gitea);
}

/// Each GitOpsRepo names its own forge (`spec.provider`, `spec.providerApiUrl`): one
/// environment delivered to a Gitea and a GitLab repository on hosts that say neither, in one
/// run, each pull request opened on its own forge; the run's `--provider` and
/// `--provider-api-url` (another forge's) do not touch a GitOpsRepo that names its own.
#[test]
fn each_gitops_repo_names_its_own_forge() {
    let s = Scenario::new(Flavor::Gitea);
    let root = s.fx.dir.path().join("repos");
    let second = root.join("contoso/gitops-lab.git");
    kalypso_testkit::init_bare(&second);
    write_files(&second, "dev", &[("README.md", Some("platform"))], "init");
    let lab = FakeForge::start(s.rt.handle(), Flavor::GitLab, "contoso/gitops-lab", Some(TOKEN));
    let gitops_repo = |name: &str, url: &str, provider: &str, api: &str| {
        format!(
            "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: {name}\nspec:\n  \
             repo: {url}\n  branch: dev\n  path: .\n  provider: {provider}\n  providerApiUrl: {api}\n"
        )
    };
    write_files(
        &s.fx.control_plane,
        "dev",
        &[
            (
                "gitops-repo.yaml",
                Some(&gitops_repo("dev", &s.gitops_url, "forgejo", &s.forge.api_url())),
            ),
            (
                "gitops-repo-lab.yaml",
                Some(&gitops_repo(
                    "dev-lab",
                    &s.git.url("contoso/gitops-lab.git"),
                    "gitlab",
                    &lab.api_url(),
                )),
            ),
        ],
        "two forges",
    );
    let mut settings = s.settings();
    // The run's flags name another forge, unreachable: a GitOpsRepo that names its own
    // provider does not use them.
    settings.delivery.provider = Some(Provider::AzureDevOps);
    settings.delivery.provider_api_url = Some("http://127.0.0.1:9/unreachable".into());
    let report = s.sync_with(settings).unwrap();
    let Outcome::Delivered(targets) = &report.outcome else {
        panic!("failed: {:?}", report.outcome);
    };
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["dev", "dev-lab"]);
    for t in targets {
        assert!(
            matches!(t.delivery, Delivery::PullRequest { created: true, .. }),
            "{}: {:?}",
            t.name,
            t.delivery
        );
    }
    let gitea_pulls: Vec<ForgeRequest> = s
        .forge
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v1/repos/contoso/gitops/pulls")
        .collect();
    assert_eq!(gitea_pulls.len(), 1, "{:?}", s.forge.requests());
    let lab_merge_requests: Vec<ForgeRequest> = lab
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/api/v4/projects/contoso%2Fgitops-lab/merge_requests")
        .collect();
    assert_eq!(lab_merge_requests.len(), 1, "{:?}", lab.requests());
    assert_eq!(lab_merge_requests[0].private_token.as_deref(), Some(TOKEN));
    s.assert_authenticated();

    // A provider kalypso does not speak is refused before anything is written, naming the
    // GitOpsRepo and the field.
    write_files(
        &s.fx.control_plane,
        "dev",
        &[(
            "gitops-repo-lab.yaml",
            Some(&gitops_repo(
                "dev-lab",
                &s.git.url("contoso/gitops-lab.git"),
                "bitbucket",
                &lab.api_url(),
            )),
        )],
        "an unknown forge",
    );
    let before = (s.forge.requests().len(), lab.requests().len());
    let error = s.sync().unwrap_err().to_string();
    assert!(
        error.contains("GitOpsRepo \"dev-lab\"")
            && error.contains("spec.provider: unknown provider \"bitbucket\""),
        "{error}"
    );
    assert_eq!((s.forge.requests().len(), lab.requests().len()), before);
}
