//! Failures reported as issues in the GitOps repository, as the original does on GitHub: one
//! issue per failing assignment (title with the original's typo), its text the error,
//! updated when the error changes, closed when the assignment renders again. Any
//! [`Forge`] carries them: GitHub, GitLab and Gitea issues, Azure Boards work items.
//!
//! The original remembered issue numbers in Assignment status; kalypso keeps no state, so
//! it finds its issues by title among the open ones ([`title`], the original's words).
//! [`actions`] decides, from the open issues and the current failures, what to create,
//! update and close; [`apply`] carries it out.
//!
//! A progressive rollout that fails (halted or rolled back) is reported the same way, one
//! issue per failed rollout ([`rollout_title`]: the environment and the change), which
//! [`report_rollout_failure`] opens once and never closes: a person reads it.

use crate::forge::{self, Forge, Issue};
use crate::redact::redact;
use kalypso_core::rollout::{RolloutState, Status};
use kalypso_core::run::Failure;

/// GitHub refuses longer issue texts (65,536 characters); keep a margin.
const MAX_BODY: usize = 60_000;

/// One change to the issues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Open an issue.
    Create {
        /// Title.
        title: String,
        /// Text.
        body: String,
    },
    /// Replace an open issue's text.
    Update {
        /// Issue number.
        number: u64,
        /// New text.
        body: String,
    },
    /// Close an issue whose failure is gone.
    Close {
        /// Issue number.
        number: u64,
    },
}

/// What [`apply`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IssueReport {
    /// Issues opened.
    pub created: Vec<u64>,
    /// Issues whose text changed.
    pub updated: Vec<u64>,
    /// Issues closed.
    pub closed: Vec<u64>,
}

/// The title of `failure`'s issue in `environment`, as the original writes it (typo
/// included) for an assignment.
pub fn title(failure: &Failure, environment: &str) -> String {
    match &failure.assignment {
        Some((target, cluster_type)) => assignment_title(environment, target, cluster_type),
        None => environment_title(environment),
    }
}

/// The original's issue title for the failure of assignment (`target`, `cluster_type`).
pub fn assignment_title(environment: &str, target: &str, cluster_type: &str) -> String {
    format!(
        "Can't generate manifests for deplyment target {target} in cluster type {cluster_type} in {environment} environment"
    )
}

/// The title of the issue for the problems of `environment` not tied to one assignment.
pub fn environment_title(environment: &str) -> String {
    format!("Can't generate manifests in {environment} environment")
}

/// Whether `title` is one of the titles kalypso gives issues of `environment`.
pub fn is_title_of(title: &str, environment: &str) -> bool {
    title.starts_with("Can't generate manifests ")
        && title.ends_with(&format!(" in {environment} environment"))
}

/// The issue text for `failure`: redacted, and short enough for GitHub.
pub fn body(failure: &Failure) -> String {
    let mut text = redact(&failure.message);
    if text.len() > MAX_BODY {
        let mut cut = MAX_BODY;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (truncated)");
    }
    text
}

/// The actions that bring the open issues of `environment` in line with `failures`.
pub fn actions(environment: &str, open: &[Issue], failures: &[Failure]) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut wanted = Vec::new();
    for failure in failures {
        let title = title(failure, environment);
        let body = body(failure);
        match open.iter().find(|i| i.title == title) {
            Some(issue) if issue.body.as_deref().map(str::trim) == Some(body.trim()) => {}
            Some(issue) => actions.push(Action::Update {
                number: issue.number,
                body,
            }),
            None => actions.push(Action::Create {
                title: title.clone(),
                body,
            }),
        }
        wanted.push(title);
    }
    for issue in open {
        if is_title_of(&issue.title, environment) && !wanted.contains(&issue.title) {
            actions.push(Action::Close { number: issue.number });
        }
    }
    actions
}

/// Brings the issues of `environment` in line with `failures`.
pub fn apply(
    forge: &dyn Forge,
    environment: &str,
    failures: &[Failure],
) -> Result<IssueReport, forge::Error> {
    let open = forge.open_issues()?;
    let mut report = IssueReport::default();
    for action in actions(environment, &open, failures) {
        match action {
            Action::Create { title, body } => {
                report.created.push(create_once(forge, &title, &body)?);
            }
            Action::Update { number, body } => {
                forge.update_issue(number, &body)?;
                report.updated.push(number);
            }
            Action::Close { number } => {
                forge.close_issue(number)?;
                report.closed.push(number);
            }
        }
    }
    Ok(report)
}

/// The title of the issue of the failed rollout `state` of `environment`: the change's
/// environment-branch and main commits name it (a new failed rollout of another change gets
/// its own issue). Not one of [`is_title_of`]'s: deliveries never close it.
pub fn rollout_title(environment: &str, state: &RolloutState) -> String {
    format!(
        "{ROLLOUT_TITLE_START}{} (main {}){}",
        short(&state.change.environment),
        short(&state.change.main),
        rollout_title_end(environment)
    )
}

/// How every [`rollout_title`] starts.
const ROLLOUT_TITLE_START: &str = "Rollout of ";

/// How the [`rollout_title`]s of `environment` end.
fn rollout_title_end(environment: &str) -> String {
    format!(" failed in {environment} environment")
}

/// Whether `title` is the title of a failed rollout's issue of `environment` (any change's).
fn is_rollout_title_of(environment: &str, title: &str) -> bool {
    title.starts_with(ROLLOUT_TITLE_START) && title.ends_with(&rollout_title_end(environment))
}

/// Closes the open issues of `environment`'s failed rollouts: a later rollout of the
/// environment completed, every wave compliant with a newer change. Closing nothing when
/// none is open, it is safe to repeat (a pull request not merged yet, a restarted process).
pub fn close_rollout_failures(forge: &dyn Forge, environment: &str) -> Result<IssueReport, forge::Error> {
    let mut report = IssueReport::default();
    for issue in forge.open_issues()? {
        if is_rollout_title_of(environment, &issue.title) {
            forge.close_issue(issue.number)?;
            report.closed.push(issue.number);
        }
    }
    Ok(report)
}

/// The text of the issue of the failed rollout `state` of `environment`: the policy, the
/// change, the waves, the failure (the wave, the failed clusters and Flux's messages) and
/// what was done about it; redacted and bounded.
pub fn rollout_body(environment: &str, state: &RolloutState) -> String {
    let mut text = format!(
        "The progressive rollout of environment {environment} (RolloutPolicy {}) is {}.\n\n",
        state.policy,
        state.status.as_str()
    );
    text.push_str(&format!(
        "Failure: {}\n\n",
        state.failure.as_deref().unwrap_or("(no message)")
    ));
    text.push_str(&format!(
        "Change: environment branch commit {}, main commit {}",
        state.change.environment, state.change.main
    ));
    for (name, commit) in state.change.bases.iter().chain(&state.change.workloads) {
        text.push_str(&format!(", {name} {commit}"));
    }
    text.push_str("\n\nWaves:\n");
    for (i, wave) in state.waves.iter().enumerate() {
        let types: Vec<&str> = wave.cluster_types.iter().map(String::as_str).collect();
        text.push_str(&format!(
            "- {} ({}): {}\n",
            wave.name,
            types.join(", "),
            if i < state.delivered {
                "delivered"
            } else {
                "not delivered"
            }
        ));
    }
    text.push('\n');
    text.push_str(match state.status {
        Status::RolledBack => {
            "The delivered waves were given the content they ran before the rollout. A newer change starts a new rollout."
        }
        _ => {
            "The later waves keep their previous content. A newer change starts a new rollout; `kalypso rollout abort` gives the delivered waves their previous content back."
        }
    });
    text.push('\n');
    body(&Failure {
        assignment: None,
        message: text,
    })
}

/// Opens the issue of the failed rollout `state` of `environment`, unless one with its title
/// is open (its text is updated when it differs): a failure reported again (a pull request
/// not merged yet, a restarted process) files nothing twice.
pub fn report_rollout_failure(
    forge: &dyn Forge,
    environment: &str,
    state: &RolloutState,
) -> Result<IssueReport, forge::Error> {
    let title = rollout_title(environment, state);
    let body = rollout_body(environment, state);
    let mut report = IssueReport::default();
    match forge.open_issues()?.into_iter().find(|i| i.title == title) {
        Some(issue) if issue.body.as_deref().map(str::trim) == Some(body.trim()) => {}
        Some(issue) => {
            forge.update_issue(issue.number, &body)?;
            report.updated.push(issue.number);
        }
        None => report.created.push(create_once(forge, &title, &body)?),
    }
    Ok(report)
}

/// The first 12 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Creates an issue, retrying transient failures only after checking that the failed
/// attempt did not create it after all.
fn create_once(forge: &dyn Forge, title: &str, body: &str) -> Result<u64, forge::Error> {
    let mut last = None;
    for attempt in 0..3 {
        if attempt > 0
            && let Some(existing) = forge.open_issues()?.into_iter().find(|i| i.title == title)
        {
            return Ok(existing.number);
        }
        match forge.create_issue(title, body) {
            Ok(issue) => return Ok(issue.number),
            Err(e) if e.is_transient() => {
                tracing::warn!(title, error = %e, "creating an issue failed, checking and retrying");
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| forge::Error::Transport {
        provider: forge.provider(),
        call: "POST issues".to_owned(),
        repo: forge.full_name(),
        message: "no attempt made".to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(number: u64, title: &str, body: &str) -> Issue {
        Issue {
            number,
            title: title.into(),
            body: Some(body.into()),
            html_url: None,
            pull_request: None,
        }
    }

    fn failure(target: &str, ct: &str, message: &str) -> Failure {
        Failure {
            assignment: Some((target.into(), ct.into())),
            message: message.into(),
        }
    }

    #[test]
    fn creates_updates_and_closes_by_title() {
        let t = |dt: &str, ct: &str| assignment_title("dev", dt, ct);
        let open = vec![
            issue(1, &t("a", "large"), "old error"),
            issue(2, &t("b", "large"), "same error"),
            issue(3, &t("gone", "small"), "fixed since"),
            issue(4, &assignment_title("stage", "a", "large"), "other environment"),
            issue(5, "Something a human wrote", "keep"),
        ];
        let failures = vec![
            failure("a", "large", "new error"),
            failure("b", "large", "same error"),
            failure("c", "small", "brand new"),
        ];
        assert_eq!(
            actions("dev", &open, &failures),
            [
                Action::Update {
                    number: 1,
                    body: "new error".into()
                },
                Action::Create {
                    title: t("c", "small"),
                    body: "brand new".into()
                },
                Action::Close { number: 3 },
            ]
        );
        // Fixed everywhere: every issue of the environment closes, nothing else.
        assert_eq!(
            actions("dev", &open, &[]),
            [
                Action::Close { number: 1 },
                Action::Close { number: 2 },
                Action::Close { number: 3 }
            ]
        );
    }

    #[test]
    fn titles_are_the_originals_per_assignment_and_one_per_environment() {
        let failures = [
            failure("app-dev", "small", "config data validation failed"),
            failure("app-qa", "drone", "Template \"x\" does not exist"),
            Failure {
                assignment: None,
                message: "bad yaml".into(),
            },
        ];
        let titles: Vec<String> = failures.iter().map(|f| title(f, "dev")).collect();
        assert_eq!(
            titles,
            [
                "Can't generate manifests for deplyment target app-dev in cluster type small in dev environment",
                "Can't generate manifests for deplyment target app-qa in cluster type drone in dev environment",
                "Can't generate manifests in dev environment",
            ]
        );
        assert!(titles.iter().all(|t| is_title_of(t, "dev")));
        assert!(!is_title_of(&titles[0], "stage"));
        assert!(!is_title_of("Something a human wrote", "dev"));
    }

    #[test]
    fn bodies_are_redacted_and_bounded() {
        let f = failure("a", "b", "cannot fetch https://user:hunter2hunter2@example.com/x");
        assert_eq!(body(&f), "cannot fetch https://***@example.com/x");
        let long = failure("a", "b", &"é".repeat(40_000));
        let b = body(&long);
        assert!(b.len() <= MAX_BODY + 20 && b.ends_with("(truncated)"));
    }
}
