//! The release pages a hub with promotion policies adds to the dashboard: each environment's
//! promotion requirements and freezes (`/releases`), one environment's page with the approve,
//! freeze and unfreeze forms for the people who may (`/environments/{env}/promotion`), and the
//! audit log (`/audit`). The hub builds the view models from its database and decides who may
//! act; this module only renders them (every form posts the session's CSRF token).

use maud::{Markup, html};

use crate::model::State;
use crate::render::{Nav, layout, segment, with_query};

/// The path of environment `env`'s release page.
pub fn environment_url(env: &str) -> String {
    format!("/environments/{}/promotion", segment(env))
}

/// Where the form acting on environment `env` posts (`approve`, `freeze`, `unfreeze`).
pub fn action_url(env: &str, action: &str) -> String {
    format!("/environments/{}/{action}", segment(env))
}

/// A requirement of a promotion and whether it is met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// `met`, `not-yet` or `failed`.
    pub state: String,
    /// What it says (`approvals 1 of 2 (ana@contoso.com)`, `soak 42m of 1h`...).
    pub summary: String,
}

/// The promotion waiting to go into an environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The environment it comes from.
    pub from: String,
    /// The control-plane commit `from` runs.
    pub commit: String,
    /// Whether every requirement is met.
    pub may_promote: bool,
    /// Every requirement.
    pub requirements: Vec<Requirement>,
}

/// A freeze in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freeze {
    /// Who froze.
    pub actor: String,
    /// Since when (RFC 3339).
    pub since: String,
    /// Why.
    pub reason: String,
    /// Until when (RFC 3339), if it ends by itself.
    pub until: Option<String>,
}

/// One environment's promotion state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentRelease {
    /// The environment.
    pub name: String,
    /// Its PromotionPolicy's name, if it has one.
    pub policy: Option<String>,
    /// What its policy cannot be used for, if it is invalid.
    pub problem: Option<String>,
    /// The freezes in force.
    pub freezes: Vec<Freeze>,
    /// The promotion waiting to go in, if any.
    pub pending: Option<Pending>,
    /// The person's CSRF token, when they may approve, freeze and unfreeze here.
    pub csrf: Option<String>,
}

/// An entry of the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    /// When (RFC 3339).
    pub at: String,
    /// Who.
    pub actor: String,
    /// What (`approval`, `freeze`...).
    pub kind: String,
    /// The environment.
    pub environment: String,
    /// The control-plane commit, if any.
    pub commit: Option<String>,
    /// Why.
    pub reason: String,
    /// More.
    pub detail: String,
}

/// A page of the audit log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    /// The environment filter.
    pub environment: Option<String>,
    /// The entries, newest first.
    pub entries: Vec<AuditRow>,
    /// How many match the filter.
    pub total: u64,
}

fn requirement_badge(state: &str) -> Markup {
    let tone = match state {
        "met" => State::Compliant,
        "failed" => State::Failed,
        _ => State::Reconciling,
    };
    let word = match state {
        "met" => "Met",
        "failed" => "Failed",
        _ => "Not yet",
    };
    html! {
        span class={"badge state-" (tone.as_str())} { span.icon aria-hidden="true" { (tone.icon()) } " " (word) }
    }
}

fn short(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

fn freezes(list: &[Freeze]) -> Markup {
    html! {
        @if list.is_empty() {
            p.not-frozen { "Not frozen." }
        } @else {
            ul.freezes {
                @for f in list {
                    li.freeze {
                        strong { "Frozen" } " by " (f.actor) " since " (f.since)
                        @if let Some(until) = &f.until { " until " (until) }
                        ": " (f.reason)
                    }
                }
            }
        }
    }
}

fn requirements(pending: &Pending) -> Markup {
    html! {
        p.pending {
            "Promotion of " code { (short(&pending.commit)) } " from " (pending.from) ": "
            @if pending.may_promote { strong.may-promote { "may go" } } @else { strong.may-not-promote { "held" } }
        }
        ul.requirements {
            @for r in &pending.requirements {
                li class={"requirement requirement-" (r.state)} { (requirement_badge(&r.state)) " " span.summary { (r.summary) } }
            }
        }
    }
}

/// `/releases`: every environment's freezes and pending promotion.
pub fn releases_page(environments: &[EnvironmentRelease]) -> Markup {
    let content = html! {
        h1 { "Releases" }
        p.lede { "What each environment's promotion is waiting for, and who froze what. " a href="/audit" { "Audit log" } }
        @if environments.is_empty() {
            p { "The hub knows no environment yet." }
        }
        @for env in environments {
            section.release id={"release-" (env.name)} {
                h2 { a href=(environment_url(&env.name)) { (env.name) } }
                @if let Some(policy) = &env.policy { p.policy { "PromotionPolicy " code { (policy) } } }
                @if let Some(problem) = &env.problem { p.state-text-failed { (problem) } }
                (freezes(&env.freezes))
                @match &env.pending {
                    Some(pending) => (requirements(pending)),
                    None => p.no-pending { "No promotion waiting." },
                }
            }
        }
    };
    layout("Releases", Nav::None, None, content)
}

/// `/environments/{env}/promotion`: one environment's promotion, with the forms to act on it.
pub fn environment_page(env: &EnvironmentRelease) -> Markup {
    let content = html! {
        h1 { "Promotion into " (env.name) }
        p.lede {
            a href="/releases" { "All releases" } " · "
            a href=(with_query("/audit", &[("environment", env.name.clone())])) { "Audit log of " (env.name) }
        }
        @if let Some(policy) = &env.policy { p.policy { "PromotionPolicy " code { (policy) } } }
        @if let Some(problem) = &env.problem { p.state-text-failed { (problem) } }
        (freezes(&env.freezes))
        @match &env.pending {
            Some(pending) => (requirements(pending)),
            None => p.no-pending { "No promotion waiting." },
        }
        @if let Some(csrf) = &env.csrf {
            section.release-actions {
                h2 { "Act" }
                @if let Some(pending) = &env.pending {
                    form.approve method="post" action=(action_url(&env.name, "approve")) {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="hidden" name="commit" value=(pending.commit);
                        label for="approve-comment" { "Comment" }
                        input #approve-comment type="text" name="comment" maxlength="4096";
                        button type="submit" { "Approve " (short(&pending.commit)) }
                    }
                }
                form.freeze method="post" action=(action_url(&env.name, "freeze")) {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="freeze-reason" { "Reason" }
                    input #freeze-reason type="text" name="reason" required maxlength="4096";
                    label for="freeze-until" { "Until (RFC 3339, optional)" }
                    input #freeze-until type="text" name="until" placeholder="2026-12-01T09:00:00Z";
                    button type="submit" { "Freeze" }
                }
                @if !env.freezes.is_empty() {
                    form.unfreeze method="post" action=(action_url(&env.name, "unfreeze")) {
                        input type="hidden" name="csrf" value=(csrf);
                        label for="unfreeze-reason" { "Reason" }
                        input #unfreeze-reason type="text" name="reason" maxlength="4096";
                        button type="submit" { "Unfreeze" }
                    }
                }
            }
        }
    };
    layout(&format!("Promotion into {}", env.name), Nav::None, None, content)
}

/// `/audit`: the audit log, newest first.
pub fn audit_page(page: &AuditPage) -> Markup {
    let content = html! {
        h1 { "Audit log" @if let Some(env) = &page.environment { " of " (env) } }
        p.lede { (page.total) " entries, newest first. Nothing in the log can be changed or deleted." }
        table.audit {
            thead { tr { th { "When" } th { "Who" } th { "What" } th { "Environment" } th { "Commit" } th { "Why" } th { "Detail" } } }
            tbody {
                @for e in &page.entries {
                    tr class={"audit-" (e.kind)} {
                        td { (e.at) }
                        td.actor { (e.actor) }
                        td.kind { (e.kind) }
                        td { a href=(environment_url(&e.environment)) { (e.environment) } }
                        td { @if let Some(c) = &e.commit { code { (short(c)) } } }
                        td.reason { (e.reason) }
                        td { (e.detail) }
                    }
                }
            }
        }
    };
    layout("Audit log", Nav::None, None, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(csrf: Option<&str>) -> EnvironmentRelease {
        EnvironmentRelease {
            name: "stage".into(),
            policy: Some("into-stage".into()),
            problem: None,
            freezes: vec![Freeze {
                actor: "ana@contoso.com".into(),
                since: "2026-11-28T10:00:00Z".into(),
                reason: "<b>incident</b>".into(),
                until: None,
            }],
            pending: Some(Pending {
                from: "dev".into(),
                commit: "1111111111111111111111111111111111111111".into(),
                may_promote: false,
                requirements: vec![Requirement {
                    state: "not-yet".into(),
                    summary: "approvals 1 of 2 (ana@contoso.com)".into(),
                }],
            }),
            csrf: csrf.map(str::to_owned),
        }
    }

    #[test]
    fn only_people_who_may_act_get_the_forms_and_text_is_escaped() {
        let viewer = environment_page(&env(None)).into_string();
        assert!(!viewer.contains("<form class=\"approve\""), "{viewer}");
        assert!(viewer.contains("approvals 1 of 2 (ana@contoso.com)"));
        assert!(viewer.contains("&lt;b&gt;incident&lt;/b&gt;"));
        let approver = environment_page(&env(Some("t0k"))).into_string();
        for form in ["approve", "freeze", "unfreeze"] {
            assert!(
                approver.contains(&format!("action=\"/environments/stage/{form}\"")),
                "{form}: {approver}"
            );
        }
        assert_eq!(approver.matches("name=\"csrf\" value=\"t0k\"").count(), 3);
    }
}
