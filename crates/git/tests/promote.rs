//! `kalypso promote`: pinning a main commit in `base-repo.yaml` on an environment branch,
//! through a push (remote control plane) or in place (local repository).
#![allow(clippy::unwrap_used)]

mod common;

use common::{Fixture, file_url};
use kalypso_git::auth::Credentials;
use kalypso_git::promote::{DEFAULT_MESSAGE, Promotion, Request, promote};
use kalypso_git::repo::Transport;
use kalypso_git::{Author, Cache, RepoUrl, RetryPolicy};
use kalypso_testkit::{branch_files, commit_count, git, rev_parse, write_files};

fn request(env: &str, commit: Option<&str>) -> Request {
    Request {
        environment: env.to_owned(),
        commit: commit.map(str::to_owned),
        author: Author {
            name: "CD".into(),
            email: "cd@example.com".into(),
        },
        message: DEFAULT_MESSAGE.to_owned(),
    }
}

fn run(fx: &Fixture, url: &str, req: &Request) -> Result<Promotion, kalypso_git::promote::Error> {
    let credentials = Credentials::default();
    let transport = Transport::new(&credentials, RetryPolicy::immediate(2));
    promote(
        &RepoUrl::parse(url).unwrap(),
        "main",
        &Cache::new(&fx.cache),
        &transport,
        req,
    )
}

#[test]
fn pins_the_main_tip_once_keeping_the_file_layout() {
    let fx = Fixture::new();
    let main = rev_parse(&fx.control_plane, "refs/heads/main").unwrap();
    let before = commit_count(&fx.control_plane, "dev");
    let result = run(&fx, &file_url(&fx.control_plane), &request("dev", None)).unwrap();
    let Promotion::Promoted {
        commit,
        file,
        head,
        previous,
    } = result
    else {
        panic!("expected a promotion");
    };
    assert_eq!(commit.to_string(), main);
    assert_eq!(file, "base-repo.yaml");
    assert_eq!(previous, None);
    assert_eq!(
        rev_parse(&fx.control_plane, "refs/heads/dev"),
        Some(head.to_string())
    );
    let text = String::from_utf8(branch_files(&fx.control_plane, "dev")["base-repo.yaml"].clone()).unwrap();
    assert_eq!(text, format!("{}  commit: {main}\n", common::base_repo(None)));
    assert!(text.starts_with("# Which main commit this environment runs."));
    let log = git(&fx.control_plane, &["log", "-1", "--format=%an|%s", "dev"]);
    assert_eq!(log.trim(), format!("CD|Promoting {main} to the dev environment"));

    // Again: nothing to do.
    let again = run(&fx, &file_url(&fx.control_plane), &request("dev", None)).unwrap();
    assert!(matches!(again, Promotion::AlreadyPromoted { .. }));
    assert_eq!(commit_count(&fx.control_plane, "dev"), before + 1);
    // stage is untouched.
    assert!(
        !String::from_utf8_lossy(&branch_files(&fx.control_plane, "stage")["base-repo.yaml"])
            .contains("commit:")
    );
}

#[test]
fn promotes_an_older_commit_in_place_and_refuses_commits_not_on_main() {
    let fx = Fixture::new();
    let old = rev_parse(&fx.control_plane, "refs/heads/main").unwrap();
    write_files(
        &fx.control_plane,
        "main",
        &[("notes.txt", Some("later"))],
        "later",
    );
    let stray = write_files(
        &fx.control_plane,
        "experiment",
        &[("x.txt", Some("x"))],
        "experiment",
    );
    // A local path is updated in place (no cache, no push).
    let path = fx.control_plane.display().to_string();
    let result = run(&fx, &path, &request("dev", Some(&old[..10]))).unwrap();
    assert!(matches!(result, Promotion::Promoted { commit, .. } if commit.to_string() == old));
    assert!(
        String::from_utf8_lossy(&branch_files(&fx.control_plane, "dev")["base-repo.yaml"]).contains(&old)
    );
    assert!(!fx.cache.exists());

    let err = run(&fx, &path, &request("dev", Some(&stray)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not on branch \"main\""), "{err}");
    let err = run(&fx, &path, &request("prod", None)).unwrap_err().to_string();
    assert!(err.contains("\"prod\""), "{err}");
}

#[test]
fn creates_base_repo_yaml_when_the_environment_has_none() {
    let fx = Fixture::new();
    write_files(
        &fx.control_plane,
        "dev",
        &[("base-repo.yaml", None)],
        "no base repo",
    );
    let main = rev_parse(&fx.control_plane, "refs/heads/main").unwrap();
    run(&fx, &file_url(&fx.control_plane), &request("dev", None)).unwrap();
    let text = String::from_utf8(branch_files(&fx.control_plane, "dev")["base-repo.yaml"].clone()).unwrap();
    assert!(
        text.contains("kind: BaseRepo") && text.contains(&format!("commit: {main}")),
        "{text}"
    );
    assert!(
        text.contains("repo: \"https://github.com/contoso/control-plane\""),
        "{text}"
    );
}
