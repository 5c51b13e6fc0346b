//! The rollout page, `/environments/{env}/rollout`: an environment's progressive rollout as
//! the hub answers it (`kalypso_hub_api::EnvironmentRollout`) — the status, what blocks and
//! what the next sync does, then each wave with its cluster types (their labels, which the
//! waves select on) and their clusters' counts, the soak left, and the failed clusters with
//! their reconciler's message. Live like every page: it is re-rendered when the source's
//! version changes.

use kalypso_hub_api::{
    BlockerKind, EnvironmentRollout, GateCluster, Rollout, RolloutCounts, RolloutStatus, WaveStatus,
};
use maud::{Markup, html};

use crate::model::State;
use crate::render::{Nav, cluster_type_url, cluster_url, commit, layout, number};

pub use crate::render::rollout_url;

fn tone_of_rollout(status: RolloutStatus) -> State {
    match status {
        RolloutStatus::Complete => State::Compliant,
        RolloutStatus::Halted | RolloutStatus::RolledBack => State::Failed,
        RolloutStatus::Paused => State::Stale,
        _ => State::Reconciling,
    }
}

fn tone_of_wave(status: WaveStatus) -> State {
    match status {
        WaveStatus::Done => State::Compliant,
        WaveStatus::Failed | WaveStatus::RolledBack => State::Failed,
        WaveStatus::Waiting => State::NoClusters,
        _ => State::Reconciling,
    }
}

fn words(text: &str) -> String {
    let mut out = text.replace('-', " ");
    if let Some(first) = out.get(..1) {
        let upper = first.to_uppercase();
        out.replace_range(..1, &upper);
    }
    out
}

/// A badge in `tone`'s colour and icon with `word`.
fn status_badge(tone: State, word: &str) -> Markup {
    html! {
        span class={"badge state-" (tone.as_str())} {
            span.icon aria-hidden="true" { (tone.icon()) }
            " " (words(word))
        }
    }
}

/// A duration in milliseconds as `4 min 10 s`, `2 h 5 min`.
fn millis(ms: u64) -> String {
    let seconds = ms.div_ceil(1000);
    if seconds < 60 {
        format!("{seconds} s")
    } else if seconds < 3600 {
        let rest = seconds % 60;
        if rest == 0 {
            format!("{} min", seconds / 60)
        } else {
            format!("{} min {rest} s", seconds / 60)
        }
    } else {
        crate::render::duration(seconds)
    }
}

fn counts_cells(c: &RolloutCounts) -> Markup {
    html! {
        td.num { (number(c.registered)) }
        td.num.state-text-compliant { (number(c.compliant)) }
        td.num.state-text-failed { (number(c.failed)) }
        td.num { (number(c.reconciling)) }
        td.num { (number(c.waiting)) }
        td.num.state-text-stale { (number(c.stale)) }
    }
}

fn failed_list(environment: &str, clusters: &[GateCluster]) -> Markup {
    html! {
        ul.failed-clusters {
            @for c in clusters {
                li {
                    a href=(cluster_url(environment, &c.name)) { (c.name) }
                    " (" (c.cluster_type) ") " (c.state.as_str())
                    @if let Some(m) = c.message() { ": " span.message { (m) } }
                }
            }
        }
    }
}

fn blocker_word(kind: BlockerKind) -> &'static str {
    match kind {
        BlockerKind::Failed => "Failed clusters",
        BlockerKind::Soak => "Soak",
        BlockerKind::Deadline => "Progress deadline",
        BlockerKind::Freeze => "Freeze",
        BlockerKind::Paused => "Paused",
        BlockerKind::Stopped => "Stopped",
        BlockerKind::Unknown => "Not read yet",
        _ => "Waiting",
    }
}

fn rollout_body(environment: &str, r: &Rollout, labels_unavailable: Option<&str>) -> Markup {
    let total = r.waves.len();
    html! {
        p.lede.rollout-status {
            (status_badge(tone_of_rollout(r.status), r.status.as_str()))
            " RolloutPolicy " code { (r.policy) } ": "
            (r.delivered) " of " (total) " waves delivered · change: main " (commit(Some(&r.main_commit)))
            ", " (environment) " " (commit(Some(&r.environment_commit)))
            @if let Some(c) = &r.wave_commit {
                " · last wave delivered by GitOps commit " (commit(Some(c)))
                @if let Some(at) = &r.wave_committed_at { " at " (at) }
            }
        }
        @if let Some(failure) = &r.failure { p.state-text-failed.failure { (failure) } }
        section.rollout-blockers aria-labelledby="blockers-h" {
            h2 #blockers-h { "What blocks" }
            @if r.blockers.is_empty() {
                p.nothing-blocks { "Nothing blocks." }
            } @else {
                ul.blocker-list {
                    @for b in &r.blockers {
                        li class={"blocker blocker-" (b.kind.as_str())} {
                            strong { (blocker_word(b.kind)) } ": " span.summary { (b.summary) }
                            @if !b.clusters.is_empty() { (failed_list(environment, &b.clusters)) }
                        }
                    }
                }
            }
            p.next { strong { "Next: " } (r.next) }
            p.policy-limits.muted {
                "maxFailures " (r.max_failures.as_deref().unwrap_or("unknown"))
                " · progressDeadline " (r.progress_deadline_ms.map_or("none".to_owned(), millis))
                " · onFailure " (r.on_failure.as_deref().unwrap_or("unknown"))
            }
        }
        @if let Some(why) = labels_unavailable { p.muted.unavailable.labels-unavailable { "Labels and policy: " (why) } }
        section.waves aria-labelledby="waves-h" {
            h2 #waves-h { "Waves" }
            ol.waves {
                @for (i, w) in r.waves.iter().enumerate() {
                    li class={"wave wave-" (w.status.as_str())} data-wave=(w.name) {
                        h3 {
                            "Wave " (i + 1) "/" (total) ": " span.wave-name { (w.name) } " "
                            (status_badge(tone_of_wave(w.status), w.status.as_str()))
                        }
                        p.wave-summary {
                            (number(w.clusters.compliant)) "/" (number(w.clusters.registered)) " clusters compliant with the change"
                            @if w.min_success_ms > 0 { " · minSuccessTime " (millis(w.min_success_ms)) }
                            @if let Some(left) = w.soak_remaining_ms { " · " strong.soak { "soak: " (millis(left)) " left" } }
                        }
                        table.rollout-types {
                            caption { "Cluster types of wave " (w.name) " and their clusters" }
                            thead {
                                tr {
                                    th scope="col" { "Cluster type" }
                                    th scope="col" { "Labels" }
                                    th scope="col" { "Registered" }
                                    th scope="col" { "Compliant" }
                                    th scope="col" { "Failed" }
                                    th scope="col" { "Reconciling" }
                                    th scope="col" { "Waiting" }
                                    th scope="col" { "Stale" }
                                }
                            }
                            tbody {
                                @for ct in &w.cluster_types {
                                    tr data-cluster-type=(ct.name) {
                                        th scope="row" { a href=(cluster_type_url(environment, &ct.name)) { (ct.name) } }
                                        td.labels {
                                            @for (k, v) in &ct.labels { code.label { (k) "=" (v) } " " }
                                        }
                                        (counts_cells(&ct.clusters))
                                    }
                                    @if !ct.failed.is_empty() {
                                        tr.failed-row { td colspan="8" { (failed_list(environment, &ct.failed)) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `/environments/{env}/rollout`.
pub fn rollout_page(view: &EnvironmentRollout, version: u64) -> Markup {
    let env = &view.environment;
    let content = html! {
        nav.crumbs aria-label="Breadcrumb" {
            ol {
                li { a href="/" { "Fleet map" } }
                li { a href=(crate::render::with_query("/", &[("environment", env.clone())])) { (env) } }
                li { span aria-current="page" { "Rollout" } }
            }
        }
        h1 { "Rollout of " (env) }
        div #live {
            @if let Some(why) = &view.unavailable {
                p.muted.unavailable { "Not known to the hub: " (why) "." }
            } @else {
                @match &view.rollout {
                    Some(r) => (rollout_body(env, r, view.labels_unavailable.as_deref())),
                    None => p.no-rollout {
                        "No progressive rollout: the GitOps branch of " (env)
                        " tracks none (without a RolloutPolicy each change reaches every cluster type in one commit)."
                    },
                }
            }
        }
    };
    layout(&format!("Rollout of {env}"), Nav::Fleet, Some(version), content)
}

#[cfg(test)]
mod tests {
    use kalypso_hub_api::{ClusterState, RolloutBlocker, RolloutClusterType, RolloutWave};

    use super::*;

    fn view() -> EnvironmentRollout {
        let failed = GateCluster {
            name: "small-1".into(),
            cluster_type: "small".into(),
            state: ClusterState::Failed,
            revision: Some("abc".into()),
            message: "<script>alert(1)</script> dry-run failed".into(),
        };
        EnvironmentRollout {
            environment: "dev".into(),
            gitops_commit: Some("abcdef1234".into()),
            rollout: Some(Rollout {
                policy: "rings".into(),
                status: RolloutStatus::Progressing,
                main_commit: "1111111111".into(),
                environment_commit: "2222222222".into(),
                wave_commit: Some("abcdef1234".into()),
                wave_committed_at: Some("2026-11-28T08:00:00.000Z".into()),
                delivered: 1,
                waves: vec![
                    RolloutWave {
                        name: "canary".into(),
                        status: WaveStatus::Failed,
                        min_success_ms: 600_000,
                        soak_remaining_ms: None,
                        clusters: RolloutCounts {
                            registered: 2,
                            compliant: 1,
                            failed: 1,
                            ..RolloutCounts::default()
                        },
                        cluster_types: vec![RolloutClusterType {
                            name: "small".into(),
                            labels: [("size".to_owned(), "small".to_owned())].into(),
                            clusters: RolloutCounts {
                                registered: 2,
                                compliant: 1,
                                failed: 1,
                                ..RolloutCounts::default()
                            },
                            failed: vec![failed.clone()],
                        }],
                    },
                    RolloutWave {
                        name: "rest".into(),
                        status: WaveStatus::Waiting,
                        min_success_ms: 0,
                        soak_remaining_ms: None,
                        clusters: RolloutCounts::default(),
                        cluster_types: Vec::new(),
                    },
                ],
                blockers: vec![RolloutBlocker {
                    kind: BlockerKind::Failed,
                    summary: "wave \"canary\": 1 failed cluster(s), 0 allowed".into(),
                    clusters: vec![failed],
                }],
                next: "the next sync halts the rollout".into(),
                failure: None,
                max_failures: Some("0".into()),
                progress_deadline_ms: Some(1_800_000),
                on_failure: Some("Halt".into()),
            }),
            unavailable: None,
            labels_unavailable: None,
            freezes: Vec::new(),
        }
    }

    #[test]
    fn the_page_shows_waves_labels_and_blockers_and_escapes_messages() {
        let html = rollout_page(&view(), 7).into_string();
        assert!(html.contains("data-version=\"7\""), "{html}");
        assert!(
            html.contains("Wave 1/2: <span class=\"wave-name\">canary</span>"),
            "{html}"
        );
        assert!(html.contains("size=small"));
        assert!(html.contains("1 failed cluster(s), 0 allowed"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; dry-run failed"));
        assert!(!html.contains("<script>alert(1)"));
        assert!(html.contains("progressDeadline 30 min"));
        assert!(html.contains("href=\"/environments/dev/clusters/small-1\""));
    }

    #[test]
    fn without_a_rollout_or_a_control_plane_the_page_says_so() {
        let mut v = view();
        v.rollout = None;
        assert!(
            rollout_page(&v, 1)
                .into_string()
                .contains("No progressive rollout")
        );
        v.unavailable = Some("the hub reads no control plane".into());
        assert!(
            rollout_page(&v, 1)
                .into_string()
                .contains("Not known to the hub: the hub reads no control plane.")
        );
    }
}
