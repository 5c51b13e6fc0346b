//! `kalypso promote`: pin a main-branch commit on an environment branch, as the seeds'
//! CD workflow does ("Promoting Commit_Id to the environment").
//!
//! The pin is `spec.commit` of the environment's BaseRepo `main`, usually in
//! `base-repo.yaml`. The file is edited in place, line by line, so that comments and layout
//! survive; only when its shape is unusual is the document written afresh. The change is
//! one commit on the environment branch: pushed (non-forced, starting again on rejection)
//! for a remote control plane, or moved with a compare-and-swap on the local branch for a
//! control plane given as a path. Promoting the commit that is already pinned changes
//! nothing.

use std::sync::Arc;

use git2::Oid;
use kalypso_core::Diagnostics;
use kalypso_core::model::AnyObject;
use kalypso_core::source::{SourceFile, SourceTree};
use kalypso_core::tree::Blob;

use crate::control_plane::{self, ControlPlane, PROMOTED_BASE};
use crate::repo::{self, Author, Cache, RefUpdate, Transport, normalize_path};
use crate::url::RepoUrl;

/// The file written when an environment has no BaseRepo yet.
pub const BASE_REPO_FILE: &str = "base-repo.yaml";
/// How often promotion starts again after its update was rejected.
const MAX_REJECTIONS: u32 = 5;

/// Why a promotion failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control plane cannot be read.
    #[error(transparent)]
    ControlPlane(#[from] control_plane::Error),
    /// A git operation failed.
    #[error(transparent)]
    Repo(#[from] repo::Error),
    /// The commit is not on the main branch.
    #[error("commit {commit} is not on branch {main:?} of {repo}: only main-branch commits can be promoted")]
    NotOnMain {
        /// The commit.
        commit: String,
        /// The main branch.
        main: String,
        /// The repository, redacted.
        repo: String,
    },
    /// The environment branch does not exist.
    #[error("branch {branch:?} of environment {environment} does not exist in {repo}")]
    NoBranch {
        /// The environment.
        environment: String,
        /// Its branch.
        branch: String,
        /// The repository, redacted.
        repo: String,
    },
    /// The environment has no GitOpsRepo to read from.
    #[error(
        "environment {environment} has no GitOpsRepo on branch {branch:?}: nothing tells where its GitOps tree is"
    )]
    NoGitOpsRepo {
        /// The environment.
        environment: String,
        /// Its control-plane branch.
        branch: String,
    },
    /// The branch kept moving.
    #[error("gave up promoting to branch {branch:?} of {repo}: rejected {attempts} times")]
    Contended {
        /// The branch.
        branch: String,
        /// The repository, redacted.
        repo: String,
        /// Attempts made.
        attempts: u32,
    },
}

crate::repo::operation_errors_into!(Error);

/// What to promote, and how to commit it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The environment.
    pub environment: String,
    /// The main commit (default: the main branch's tip).
    pub commit: Option<String>,
    /// Commit author.
    pub author: Author,
    /// Commit message (`{commit}` and `{environment}` are replaced).
    pub message: String,
}

/// The default promotion commit message.
pub const DEFAULT_MESSAGE: &str = "Promoting {commit} to the {environment} environment";

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// The commit was already pinned.
    AlreadyPromoted {
        /// The pinned commit.
        commit: Oid,
        /// The file holding the pin.
        file: String,
    },
    /// The pin was written.
    Promoted {
        /// The promoted main commit.
        commit: Oid,
        /// The file written.
        file: String,
        /// The new head of the environment branch.
        head: Oid,
        /// The commit pinned before, if any.
        previous: Option<String>,
    },
}

/// Promotes `request.commit` (or main's tip) to `request.environment`.
pub fn promote(
    control_plane: &RepoUrl,
    main_branch: &str,
    cache: &Cache,
    transport: &Transport<'_>,
    request: &Request,
) -> Result<Promotion, Error> {
    for attempt in 1..=MAX_REJECTIONS {
        match promote_once(control_plane, main_branch, cache, transport, request) {
            Err(Error::Repo(e)) if e.is_rejection() => {
                tracing::warn!(repo = %control_plane, attempt, error = %e, "promotion rejected, starting again");
            }
            other => return other,
        }
    }
    let env = request.environment.clone();
    Err(Error::Contended {
        branch: env,
        repo: control_plane.redacted(),
        attempts: MAX_REJECTIONS,
    })
}

/// What an environment's GitOps branch holds now: the commit its clusters pull and the
/// control-plane `main` commit that tree was rendered from (`Promoted_Commit_Id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The environment.
    pub environment: String,
    /// The GitOps repository, redacted.
    pub gitops_repo: String,
    /// Its branch.
    pub branch: String,
    /// The branch head.
    pub gitops_commit: Oid,
    /// The control-plane commit the tree carries, if any.
    pub promoted: Option<String>,
    /// The progressive rollout the branch tracks, if any (`.github/tracking/Rollout_State`).
    pub rollout: Option<kalypso_core::rollout::RolloutState>,
}

/// Reads what `environment` delivered: the head of the branch of its first GitOpsRepo (or
/// of `gitops_override`) and the control-plane commit in its `Promoted_Commit_Id`. This is
/// what `kalypso promote --from` promotes to the next environment.
pub fn delivered(
    control_plane: &RepoUrl,
    main_branch: &str,
    cache: &Cache,
    transport: &Transport<'_>,
    environment: &str,
    gitops_override: Option<&RepoUrl>,
) -> Result<Delivered, Error> {
    let cp = ControlPlane::open(control_plane, cache, transport, main_branch)?;
    let env = cp
        .select(&[environment.to_owned()])?
        .into_iter()
        .next()
        .ok_or_else(|| Error::NoBranch {
            environment: environment.to_owned(),
            branch: environment.to_owned(),
            repo: control_plane.redacted(),
        })?;
    let target = cp
        .gitops_targets(&env)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::NoGitOpsRepo {
            environment: env.name.clone(),
            branch: env.branch.clone(),
        })?;
    let url = match gitops_override {
        Some(url) => url.clone(),
        None => RepoUrl::parse(&target.repo).map_err(|error| control_plane::Error::Url {
            what: format!("GitOpsRepo {:?} of environment {}", target.name, env.name),
            error,
        })?,
    };
    let repo = repo::Repo::open_source(&url, cache)?;
    repo.fetch_branches(transport, &[target.branch.as_str()], &[])?;
    let head = repo
        .branch(&target.branch)?
        .ok_or_else(|| control_plane::Error::NoBranch {
            repo: url.redacted(),
            branch: target.branch.clone(),
            what: format!("the GitOps branch of environment {}", env.name),
        })?;
    let promoted = repo
        .read_file(head, kalypso_core::tree::PROMOTED_COMMIT_PATH)?
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .filter(|c| !c.is_empty());
    let rollout = repo
        .read_file(head, kalypso_core::rollout::ROLLOUT_STATE_PATH)?
        .and_then(|bytes| kalypso_core::rollout::RolloutState::parse(&bytes));
    Ok(Delivered {
        environment: env.name,
        gitops_repo: url.redacted(),
        branch: target.branch,
        gitops_commit: head,
        promoted,
        rollout,
    })
}

fn promote_once(
    url: &RepoUrl,
    main_branch: &str,
    cache: &Cache,
    transport: &Transport<'_>,
    request: &Request,
) -> Result<Promotion, Error> {
    let cp = ControlPlane::open(url, cache, transport, main_branch)?;
    let env = cp
        .select(std::slice::from_ref(&request.environment))?
        .into_iter()
        .next()
        .ok_or_else(|| Error::NoBranch {
            environment: request.environment.clone(),
            branch: request.environment.clone(),
            repo: url.redacted(),
        })?;
    let repo = cp.repo();
    let main_tip = repo
        .branch(main_branch)?
        .ok_or_else(|| control_plane::Error::NoBranch {
            repo: url.redacted(),
            branch: main_branch.to_owned(),
            what: "the main branch".to_owned(),
        })?;
    let commit = match &request.commit {
        Some(rev) => repo.find_commit(rev)?,
        None => main_tip,
    };
    if !repo.descends_from(main_tip, commit)? {
        return Err(Error::NotOnMain {
            commit: commit.to_string(),
            main: main_branch.to_owned(),
            repo: url.redacted(),
        });
    }
    let head = repo.branch(&env.branch)?.ok_or_else(|| Error::NoBranch {
        environment: env.name.clone(),
        branch: env.branch.clone(),
        repo: url.redacted(),
    })?;
    let prefix = normalize_path(&env.path).map_err(|reason| repo::ReadError::InvalidPath {
        path: env.path.clone(),
        repo: url.redacted(),
        reason,
    })?;
    let sources = repo.source_tree(head, &prefix, &env.branch)?;
    let sha = commit.to_string();
    let (file, previous, text) = match find_base_repo(&sources) {
        Some((path, previous, text)) => {
            if previous.as_deref() == Some(sha.as_str()) {
                return Ok(Promotion::AlreadyPromoted {
                    commit,
                    file: join(&prefix, &path),
                });
            }
            let edited = set_commit(&text, &sha)
                .unwrap_or_else(|| fresh_document(&text, &sha, &env.repo, main_branch));
            (path, previous, edited)
        }
        None => (
            BASE_REPO_FILE.to_owned(),
            None,
            new_base_repo(&env.repo, main_branch, &sha),
        ),
    };
    let full_path = join(&prefix, &file);
    let snapshot = repo.snapshot(Some(head))?;
    let mut files = snapshot.files.clone();
    files.insert(full_path.clone(), Blob::from(text.into_bytes()));
    let message = request
        .message
        .replace("{commit}", &sha)
        .replace("{environment}", &env.name);
    let new_head = repo.staging(|s| -> Result<Oid, repo::Error> {
        let tree = s.write_tree(&snapshot, &files)?;
        let new_head = s.commit(tree, Some(head), &request.author, &message)?;
        if repo.is_in_place() {
            s.update_local_branch(&env.branch, new_head, head)?;
        } else {
            s.push(
                transport,
                &[RefUpdate {
                    branch: env.branch.clone(),
                    target: Some(new_head),
                }],
            )?;
        }
        Ok(new_head)
    })?;
    Ok(Promotion::Promoted {
        commit,
        file: full_path,
        head: new_head,
        previous,
    })
}

fn join(prefix: &str, path: &str) -> String {
    if prefix.is_empty() {
        path.to_owned()
    } else {
        format!("{prefix}/{path}")
    }
}

/// The file holding BaseRepo `main` (path within `tree`), its pinned commit, and its text.
fn find_base_repo(tree: &SourceTree) -> Option<(String, Option<String>, String)> {
    for file in tree.files() {
        let single = SourceTree::new(
            "",
            vec![SourceFile::new(file.path.clone(), Arc::clone(&file.content))],
        );
        let mut scratch = Diagnostics::new();
        for object in kalypso_core::load::load_tree(&single, &mut scratch) {
            if let AnyObject::BaseRepo(b) = object
                && b.meta.name == PROMOTED_BASE
            {
                let text = String::from_utf8_lossy(&file.content).into_owned();
                let commit = Some(b.spec.commit).filter(|c| !c.is_empty());
                return Some((file.path.clone(), commit, text));
            }
        }
    }
    None
}

/// Documents of a YAML file: (first line, lines), split at `---` lines.
fn documents(text: &str) -> Vec<Vec<&str>> {
    let mut docs = vec![Vec::new()];
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            docs.push(vec![line]);
        } else if let Some(last) = docs.last_mut() {
            last.push(line);
        }
    }
    docs
}

/// Whether `doc` is BaseRepo `main`.
fn is_promoted_base(doc: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head {
        kind: Option<String>,
        metadata: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        name: Option<String>,
    }
    let body = doc.trim_start_matches("---");
    match serde_yaml_ng::from_str::<Head>(body) {
        Ok(h) => {
            h.kind.as_deref() == Some("BaseRepo")
                && h.metadata.and_then(|m| m.name).as_deref() == Some(PROMOTED_BASE)
        }
        Err(_) => false,
    }
}

/// The pinned commit of a BaseRepo document.
fn pinned_commit(doc: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Doc {
        spec: Spec,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        commit: Option<String>,
    }
    serde_yaml_ng::from_str::<Doc>(doc.trim_start_matches("---"))
        .ok()
        .and_then(|d| d.spec.commit)
}

/// `text` with BaseRepo `main`'s `spec.commit` set to `sha`, editing only that line (or
/// adding it at the end of `spec`). `None` when the document's layout is not one this
/// line-based edit understands; the result is checked by parsing it.
pub fn set_commit(text: &str, sha: &str) -> Option<String> {
    let docs = documents(text);
    let index = docs.iter().position(|d| is_promoted_base(&d.concat()))?;
    let doc = &docs[index];
    let spec_line = doc.iter().position(|l| l.trim_end() == "spec:")?;
    let children: Vec<usize> = (spec_line + 1..doc.len())
        .take_while(|&i| {
            let l = doc[i];
            l.trim().is_empty() || l.trim_start().starts_with('#') || l.starts_with(' ')
        })
        .filter(|&i| !doc[i].trim().is_empty() && !doc[i].trim_start().starts_with('#'))
        .collect();
    let first = *children.first()?;
    let indent = &doc[first][..doc[first].len() - doc[first].trim_start().len()];
    let newline = if doc[first].ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let new_line = format!("{indent}commit: {sha}{newline}");
    let mut lines: Vec<String> = doc.iter().map(|l| (*l).to_owned()).collect();
    let existing = children.iter().find(|&&i| {
        doc[i].starts_with(indent)
            && !doc[i][indent.len()..].starts_with(' ')
            && doc[i][indent.len()..].starts_with("commit:")
    });
    match existing {
        Some(&i) => lines[i] = new_line,
        None => {
            let last = *children.last()?;
            if !lines[last].ends_with('\n') {
                lines[last].push_str(newline);
            }
            lines.insert(last + 1, new_line);
        }
    }
    let new_doc = lines.concat();
    if pinned_commit(&new_doc).as_deref() != Some(sha) {
        return None;
    }
    let mut out = String::new();
    for (i, d) in docs.iter().enumerate() {
        if i == index {
            out.push_str(&new_doc);
        } else {
            out.push_str(&d.concat());
        }
    }
    Some(out)
}

/// `text` with BaseRepo `main` replaced by a freshly written document keeping its repo,
/// branch and path (comments inside it are lost).
fn fresh_document(text: &str, sha: &str, default_repo: &str, main_branch: &str) -> String {
    #[derive(serde::Deserialize, Default)]
    struct Spec {
        #[serde(default)]
        repo: String,
        #[serde(default)]
        branch: String,
        #[serde(default)]
        path: String,
    }
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        spec: Spec,
    }
    let docs = documents(text);
    let mut out = String::new();
    for d in &docs {
        let joined = d.concat();
        if is_promoted_base(&joined) {
            let spec = serde_yaml_ng::from_str::<Doc>(joined.trim_start_matches("---"))
                .map(|d| d.spec)
                .unwrap_or_default();
            let separator = if joined.starts_with("---") { "---\n" } else { "" };
            out.push_str(separator);
            out.push_str(&base_repo_yaml(
                if spec.repo.is_empty() {
                    default_repo
                } else {
                    &spec.repo
                },
                if spec.branch.is_empty() {
                    main_branch
                } else {
                    &spec.branch
                },
                if spec.path.is_empty() { "." } else { &spec.path },
                sha,
            ));
        } else {
            out.push_str(&joined);
        }
    }
    out
}

fn new_base_repo(repo: &str, main_branch: &str, sha: &str) -> String {
    base_repo_yaml(repo, main_branch, ".", sha)
}

fn base_repo_yaml(repo: &str, branch: &str, path: &str, sha: &str) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"));
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: BaseRepo\nmetadata:\n  name: {PROMOTED_BASE}\nspec:\n  repo: {}\n  branch: {}\n  path: {}\n  commit: {sha}\n",
        quote(repo),
        quote(branch),
        quote(path),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn replaces_the_commit_line_keeping_everything_else() {
        let text = "# pinned by CD\napiVersion: scheduler.kalypso.io/v1alpha1\nkind: BaseRepo\nmetadata:\n  name: main\nspec:\n  repo: https://github.com/contoso/cp\n  branch: main  # the main branch\n  path: .\n  commit: 3f1c2a9d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39\n";
        let out = set_commit(text, SHA).unwrap();
        assert_eq!(out, text.replace("3f1c2a9d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39", SHA));
    }

    #[test]
    fn adds_a_missing_commit_at_the_end_of_spec() {
        let text = "kind: BaseRepo\napiVersion: scheduler.kalypso.io/v1alpha1\nmetadata:\n  name: main\nspec:\n    repo: r\n    branch: main\n    path: .\n---\nkind: GitOpsRepo\nmetadata:\n  name: dev\nspec:\n  repo: x\n";
        let out = set_commit(text, SHA).unwrap();
        assert!(out.contains(&format!("    path: .\n    commit: {SHA}\n---\nkind: GitOpsRepo")));
        assert!(out.ends_with("spec:\n  repo: x\n"));
    }

    #[test]
    fn leaves_other_base_repos_alone_and_rewrites_odd_layouts() {
        let other = "kind: BaseRepo\nmetadata:\n  name: extra\nspec:\n  repo: r\n  commit: old\n";
        assert_eq!(set_commit(other, SHA), None);
        let flow =
            "kind: BaseRepo\nmetadata: {name: main}\nspec: {repo: r, branch: main, path: ., commit: old}\n";
        assert_eq!(set_commit(flow, SHA), None);
        let fresh = fresh_document(flow, SHA, "unused", "main");
        assert_eq!(pinned_commit(&fresh).as_deref(), Some(SHA));
        assert!(fresh.contains("repo: \"r\""));
    }

    #[test]
    fn new_files_name_the_environment_repository() {
        let text = new_base_repo("https://github.com/contoso/cp", "main", SHA);
        assert!(is_promoted_base(&text));
        assert_eq!(pinned_commit(&text).as_deref(), Some(SHA));
    }
}
