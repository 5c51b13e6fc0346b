//! The pages, as HTML built with `maud`.
//!
//! Rendering is kept apart from the HTTP handlers so that it can be tested as plain functions
//! from view models to markup. Every text that comes from a cluster or a repository (names,
//! messages, labels, config values) goes through maud's splices, which escape it: no string
//! is ever inserted as raw HTML. States are shown with an icon and a word as well as a colour.

use maud::{DOCTYPE, Markup, PreEscaped, html};
use url::form_urlencoded;

use crate::account::ACCOUNT_SLOT;
use crate::model::{
    ClusterPage, ClusterSummary, ClusterTypePage, FleetFilter, FleetMap, Page, PromotionView, Stage,
    StageState, State, StateCounts, Timestamp, WorkloadPage,
};

/// Which item of the navigation is the current page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    /// The fleet map and the drill-down pages under it.
    Fleet,
    /// The promotion view.
    Promotions,
    /// None (error pages).
    None,
}

/// A path segment, percent-encoded.
pub fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The URL of a cluster type's page.
pub fn cluster_type_url(environment: &str, name: &str) -> String {
    format!(
        "/environments/{}/cluster-types/{}",
        segment(environment),
        segment(name)
    )
}

/// The URL of a cluster's page.
pub fn cluster_url(environment: &str, name: &str) -> String {
    format!(
        "/environments/{}/clusters/{}",
        segment(environment),
        segment(name)
    )
}

/// The URL of environment `env`'s rollout page ([`crate::rollout`]).
pub fn rollout_url(env: &str) -> String {
    format!("/environments/{}/rollout", segment(env))
}

/// The URL of a workload's page.
pub fn workload_url(name: &str) -> String {
    format!("/workloads/{}", segment(name))
}

/// `path` with the query `pairs` (empty values left out).
pub(crate) fn with_query(path: &str, pairs: &[(&str, String)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (key, value) in pairs {
        if !value.is_empty() {
            query.append_pair(key, value);
            any = true;
        }
    }
    if any {
        format!("{path}?{}", query.finish())
    } else {
        path.to_owned()
    }
}

/// The first 7 characters of a commit id.
fn short(commit: &str) -> &str {
    commit.get(..7).unwrap_or(commit)
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// A timestamp as `2026-11-26 08:00 UTC` (and its ISO form for `<time datetime>`).
fn timestamp_parts(at: Timestamp) -> (String, String) {
    let secs = i64::try_from(at).unwrap_or(i64::MAX);
    let (year, month, day) = civil(secs.div_euclid(86_400));
    let rest = secs.rem_euclid(86_400);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    (
        format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC"),
        format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z"),
    )
}

fn time(at: Option<Timestamp>) -> Markup {
    match at {
        Some(at) => {
            let (text, iso) = timestamp_parts(at);
            html! { time datetime=(iso) { (text) } }
        }
        None => html! { span.muted { "—" } },
    }
}

/// A duration as `27 min`, `2 h 5 min`, `3 d 4 h`.
pub fn duration(seconds: u64) -> String {
    let minutes = seconds / 60;
    if minutes < 1 {
        format!("{seconds} s")
    } else if minutes < 60 {
        format!("{minutes} min")
    } else if minutes < 60 * 24 {
        format!("{} h {} min", minutes / 60, minutes % 60)
    } else {
        format!("{} d {} h", minutes / 1440, minutes % 1440 / 60)
    }
}

pub(crate) fn commit(id: Option<&str>) -> Markup {
    match id {
        Some(id) => html! { code.sha title=(id) { (short(id)) } },
        None => html! { span.muted { "none" } },
    }
}

/// A state badge: colour, icon and word.
pub fn badge(state: impl Into<State>) -> Markup {
    let state: State = state.into();
    html! {
        span class={"badge state-" (state.as_str())} {
            span.icon aria-hidden="true" { (state.icon()) }
            " " (state.label())
        }
    }
}

fn stage_badge(state: StageState) -> Markup {
    let tone = state.tone();
    html! {
        span class={"badge state-" (tone.as_str())} {
            span.icon aria-hidden="true" { (tone.icon()) }
            " " (state.label())
        }
    }
}

/// Counts as `3 compliant · 1 failed`, leaving out zeros.
fn breakdown(counts: &StateCounts) -> Markup {
    let parts: Vec<(State, u64)> = [State::Failed, State::Stale, State::Reconciling, State::Compliant]
        .into_iter()
        .map(|s| (s, counts.get(s)))
        .filter(|(_, n)| *n > 0)
        .collect();
    html! {
        @if parts.is_empty() {
            span.muted { "no clusters" }
        } @else {
            span.breakdown {
                @for (i, (state, n)) in parts.iter().enumerate() {
                    @if i > 0 { " · " }
                    span class={"count state-text-" (state.as_str())} { (number(*n)) " " (state.label().to_lowercase()) }
                }
            }
        }
    }
}

/// A count with thousands separators: `300,000`.
pub fn number(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{} {many}", number(n))
    }
}

/// A page with a message and one link (sign-in and sign-out pages).
pub fn message_page(title: &str, message: &str, link: (&str, &str)) -> Markup {
    layout(
        title,
        Nav::None,
        None,
        html! {
            div.error-page {
                h1 { (title) }
                p.message { (message) }
                p { a href=(link.0) { (link.1) } }
            }
        },
    )
}

/// The page around `content`.
pub fn layout(title: &str, nav: Nav, version: Option<u64>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Kalypso fleet" }
                link rel="stylesheet" href="/assets/dashboard.css";
                script src="/assets/dashboard.js" defer {}
            }
            body data-version=[version] {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/" { span.logo aria-hidden="true" { "◆" } " Kalypso fleet" }
                    nav aria-label="Main" {
                        ul {
                            li { a href="/" aria-current=[(nav == Nav::Fleet).then_some("page")] { "Fleet map" } }
                            li { a href="/promotions" aria-current=[(nav == Nav::Promotions).then_some("page")] { "Promotions" } }
                        }
                    }
                    @if version.is_some() {
                        p #live-status role="status" { "Live" }
                    }
                    (PreEscaped(ACCOUNT_SLOT))
                }
                main #main tabindex="-1" { (content) }
            }
        }
    }
}

fn pager(path: &str, pairs: &[(&str, String)], page: Page, total: u64, noun: &str) -> Markup {
    let pages = page.count(total);
    let first = page.offset().saturating_add(1).min(total);
    let last = page.offset().saturating_add(page.size).min(total);
    let link = |number: u64| {
        let mut pairs = pairs.to_vec();
        pairs.push(("page", number.to_string()));
        if page.size != crate::memory::DEFAULT_PAGE_SIZE {
            pairs.push(("size", page.size.to_string()));
        }
        with_query(path, &pairs)
    };
    html! {
        nav.pager aria-label={"Pages of " (noun)} {
            span { (number(first)) "–" (number(last)) " of " (number(total)) " " (noun) " · page " (number(page.number)) " of " (number(pages)) }
            @if page.number > 1 {
                a href=(link(1)) { "« First" }
                a href=(link(page.number - 1)) rel="prev" { "‹ Previous" }
            }
            @if page.number < pages {
                a href=(link(page.number + 1)) rel="next" { "Next ›" }
                a href=(link(pages)) { "Last »" }
            }
        }
    }
}

/// The fleet map at `/`.
pub fn fleet_page(map: &FleetMap, filter: &FleetFilter, version: u64) -> Markup {
    let mut pairs = vec![
        ("environment", filter.environment.clone().unwrap_or_default()),
        (
            "state",
            filter.state.map(|s| s.as_str().to_owned()).unwrap_or_default(),
        ),
        ("cluster-type", filter.cluster_type.clone().unwrap_or_default()),
    ];
    pairs.retain(|(_, v)| !v.is_empty());
    let filtered = !pairs.is_empty();
    let mut all = StateCounts::default();
    for env in &map.environments {
        all.merge(&env.counts);
    }
    let content = html! {
        h1 { "Fleet map" }
        form.filters method="get" action="/" {
            div.field {
                label for="f-environment" { "Environment" }
                select #f-environment name="environment" {
                    option value="" { "All environments" }
                    @for env in &map.all_environments {
                        option value=(env) selected[filter.environment.as_deref() == Some(env.as_str())] { (env) }
                    }
                }
            }
            div.field {
                label for="f-state" { "State" }
                select #f-state name="state" {
                    option value="" { "Any state" }
                    @for state in State::ALL {
                        option value=(state.as_str()) selected[filter.state == Some(state)] { (state.label()) }
                    }
                }
            }
            div.field {
                label for="f-cluster-type" { "Cluster type contains" }
                input #f-cluster-type type="search" name="cluster-type" value=[filter.cluster_type.as_deref()];
            }
            div.actions {
                button type="submit" { "Apply filters" }
                @if filtered { a href="/" { "Clear" } }
            }
        }
        div #live {
            p.lede {
                (plural(all.total(), "cluster", "clusters")) " in "
                (plural(map.environments.len() as u64, "environment", "environments")) ": "
                (breakdown(&all))
            }
            ul.envs {
                @for env in &map.environments {
                    li class={"env-card state-border-" (env.counts.state().as_str())} {
                        h2 { a href=(with_query("/", &[("environment", env.name.clone())])) { (env.name) } }
                        (badge(env.counts.state()))
                        dl {
                            dt { "Control plane" } dd { (commit(env.control_plane_commit.as_deref())) }
                            dt { "GitOps" } dd { (commit(env.gitops_commit.as_deref())) " " (time(env.gitops_commit_at)) }
                            dt { "Clusters" } dd { (breakdown(&env.counts)) }
                        }
                        p.env-links { a href=(rollout_url(&env.name)) { "Rollout of " (env.name) } }
                    }
                }
            }
            @if map.rows.is_empty() {
                p.empty { "No cluster type matches these filters." }
            } @else {
                div.scroll {
                    table.fleet {
                        caption { "Cluster types by environment: deployment targets, clusters and their compliance with the environment's latest GitOps commit" }
                        thead {
                            tr {
                                th scope="col" { "Cluster type" }
                                @for env in &map.environments {
                                    th scope="col" {
                                        span.env-name { (env.name) }
                                        span.sub { "runs " (commit(env.control_plane_commit.as_deref())) }
                                    }
                                }
                            }
                        }
                        tbody {
                            @for row in &map.rows {
                                tr {
                                    th scope="row" { (row.name) }
                                    @for (env, cell) in map.environments.iter().zip(&row.cells) {
                                        @match cell {
                                            Some(cell) => {
                                                td class={"cell state-" (cell.state().as_str()) @if filter.state.is_some_and(|s| s != cell.state()) { " dimmed" }} data-state=(cell.state().as_str()) {
                                                    a href=(cluster_type_url(&env.name, &row.name)) {
                                                        (badge(cell.state()))
                                                        span.cell-main {
                                                            @if cell.counts.total() == 0 {
                                                                "No clusters reporting"
                                                            } @else {
                                                                (number(cell.counts.compliant)) "/" (number(cell.counts.total())) " compliant"
                                                            }
                                                        }
                                                        span.cell-sub { (plural(cell.deployment_targets, "target", "targets")) }
                                                        @if cell.counts.total() > cell.counts.compliant {
                                                            span.cell-sub { (breakdown(&cell.counts)) }
                                                        }
                                                        span.visually-hidden { " — " (row.name) " in " (env.name) }
                                                    }
                                                }
                                            }
                                            None => {
                                                td.cell.absent {
                                                    span aria-hidden="true" { "—" }
                                                    span.visually-hidden { "Not in " (env.name) }
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
            (pager("/", &pairs, map.page, map.total_rows, "cluster types"))
        }
    };
    layout("Fleet map", Nav::Fleet, Some(version), content)
}

fn stage_cell(stage: &Stage, environment: &str, committed_at: Option<Timestamp>) -> Markup {
    let state = stage.state();
    let lead_time = match (committed_at, stage.compliant_at) {
        (Some(from), Some(to)) if to >= from => Some(duration(to - from)),
        _ => None,
    };
    html! {
        td class={"stage state-" (state.tone().as_str())} data-stage=(format!("{state:?}").to_lowercase()) {
            (stage_badge(state))
            ol.steps {
                li { "Pinned " (time(stage.pinned_at)) }
                li {
                    @if stage.gitops_commit.is_some() {
                        "Rendered " (commit(stage.gitops_commit.as_deref())) " " (time(stage.rendered_at))
                    } @else { span.muted { "Not rendered yet" } }
                }
                li {
                    @if stage.delivered_at.is_some() {
                        "Delivered " (time(stage.delivered_at))
                    } @else { span.muted { "Not delivered yet" } }
                }
                li {
                    @if stage.compliant_at.is_some() {
                        "All compliant " (time(stage.compliant_at))
                    } @else if stage.counts.total() > 0 {
                        (stage.counts.compliant) "/" (stage.counts.total()) " clusters compliant"
                    } @else { span.muted { "Not compliant yet" } }
                }
            }
            @if let Some(lead) = lead_time {
                p.lead { "Lead time " strong { (lead) } }
            }
            @if !stage.blockers.is_empty() && matches!(state, StageState::Blocked | StageState::Delivered) {
                div.blockers {
                    p.blocked-title { @if state == StageState::Blocked { "Blocked by" } @else { "Waiting for" } }
                    ul {
                        @for blocker in &stage.blockers {
                            li {
                                a href=(cluster_url(environment, &blocker.cluster)) { (blocker.cluster) }
                                " (" (blocker.cluster_type) ") "
                                @if let Some(s) = blocker.state { (State::from(s).label().to_lowercase()) }
                                @if let Some(message) = &blocker.message { ": " span.message { (message) } }
                            }
                        }
                    }
                    @if stage.total_blockers > stage.blockers.len() as u64 {
                        p { a href=(with_query("/", &[("environment", environment.to_owned())])) {
                            "and " (stage.total_blockers - stage.blockers.len() as u64) " more"
                        } }
                    }
                }
            }
        }
    }
}

/// The promotion view at `/promotions`.
pub fn promotions_page(view: &PromotionView, version: u64) -> Markup {
    let content = html! {
        h1 { "Promotions" }
        p.intro { "Each control-plane " code { "main" } " commit and how far it got in each environment: pinned in the environment's BaseRepo, rendered to a GitOps commit, delivered to the environment branch, and applied by every cluster. Lead time runs from the commit to all clusters compliant." }
        div #live {
            @if view.commits.is_empty() {
                p.empty { "No control-plane commits yet." }
            } @else {
                div.scroll {
                    table.promotions {
                        caption { "Control-plane commits, newest first, by environment" }
                        thead {
                            tr {
                                th scope="col" { "Commit" }
                                @for env in &view.environments { th scope="col" { (env) } }
                            }
                        }
                        tbody {
                            @for row in &view.commits {
                                tr {
                                    th scope="row" {
                                        (commit(Some(&row.commit)))
                                        span.subject { (row.subject) }
                                        span.sub {
                                            @if let Some(author) = &row.author { (author) " · " }
                                            (time(row.committed_at))
                                        }
                                    }
                                    @for (env, stage) in view.environments.iter().zip(&row.stages) {
                                        @match stage {
                                            Some(stage) => { (stage_cell(stage, env, row.committed_at)) }
                                            None => { td.stage.absent { span.muted { "Not promoted" } } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            (pager("/promotions", &[], view.page, view.total_commits, "commits"))
        }
    };
    layout("Promotions", Nav::Promotions, Some(version), content)
}

fn breadcrumbs(items: &[(&str, Option<String>)]) -> Markup {
    html! {
        nav.crumbs aria-label="Breadcrumb" {
            ol {
                @for (label, href) in items {
                    li {
                        @match href {
                            Some(href) => { a href=(href) { (label) } }
                            None => { span aria-current="page" { (label) } }
                        }
                    }
                }
            }
        }
    }
}

fn clusters_table(clusters: &[ClusterSummary], show_type: bool) -> Markup {
    html! {
        div.scroll {
            table.clusters {
                caption.visually-hidden { "Clusters" }
                thead {
                    tr {
                        th scope="col" { "Cluster" }
                        @if show_type { th scope="col" { "Cluster type" } }
                        th scope="col" { "State" }
                        th scope="col" { "Revision" }
                        th scope="col" { "Last report" }
                        th scope="col" { "Reconciler message" }
                    }
                }
                tbody {
                    @for cluster in clusters {
                        tr data-cluster=(cluster.name) {
                            th scope="row" { a href=(cluster_url(&cluster.environment, &cluster.name)) { (cluster.name) } }
                            @if show_type { td { (cluster.cluster_type) } }
                            td { @if let Some(s) = cluster.state { (badge(s)) } }
                            td { (commit(cluster.revision.as_deref())) }
                            td { (time(cluster.last_report_at)) }
                            td.message { @if let Some(m) = &cluster.message { (m) } }
                        }
                    }
                }
            }
        }
    }
}

/// A cluster type in an environment at `/environments/{env}/cluster-types/{name}`.
pub fn cluster_type_page(page: &ClusterTypePage, state: Option<State>, version: u64) -> Markup {
    let path = cluster_type_url(&page.environment, &page.name);
    let title = format!("{} in {}", page.name, page.environment);
    let state_pairs: Vec<(&str, String)> = state
        .map(|s| vec![("state", s.as_str().to_owned())])
        .unwrap_or_default();
    let content = html! {
        (breadcrumbs(&[
            ("Fleet map", Some("/".to_owned())),
            (&page.environment, Some(with_query("/", &[("environment", page.environment.clone())]))),
            (&page.name, None),
        ]))
        h1 { "Cluster type " (page.name) " " span.h-sub { "in " (page.environment) } }
        div #live {
            div.summary {
                (badge(page.counts.state()))
                dl.inline {
                    dt { "Clusters" } dd { (breakdown(&page.counts)) }
                    dt { "Reconciler" } dd { (page.reconciler.as_deref().unwrap_or("—")) }
                    dt { "GitOps commit" } dd { (commit(page.gitops_commit.as_deref())) }
                }
            }
            section aria-labelledby="labels" {
                h2 #labels { "Labels" }
                @if let Some(why) = &page.labels_unavailable { p.muted.unavailable { (why) } } @else if page.labels.is_empty() { p.muted { "No labels." } } @else {
                    ul.labels {
                        @for (key, value) in &page.labels { li { code { (key) "=" (value) } } }
                    }
                }
            }
            section aria-labelledby="targets" {
                h2 #targets { "Deployment targets" }
                @if page.deployment_targets.is_empty() { p.muted { "No deployment target is assigned to this cluster type." } } @else {
                    div.scroll {
                        table {
                            thead { tr {
                                th scope="col" { "Deployment target" }
                                th scope="col" { "Workload" }
                                th scope="col" { "Namespace" }
                                th scope="col" { "Reconciler source" }
                            } }
                            tbody {
                                @for dt in &page.deployment_targets {
                                    tr {
                                        th scope="row" { (dt.name) }
                                        td { a href=(workload_url(&dt.workload)) { (dt.workload) } }
                                        td { @if let Some(ns) = &dt.namespace { code { (ns) } } }
                                        td.source {
                                            span.repo { (dt.source.repo) }
                                            " " span.sub { "branch " code { (dt.source.branch) } ", path " code { (dt.source.path) } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="config" {
                h2 #config { "Platform config" }
                @if let Some(why) = &page.config_unavailable { p.muted.unavailable { (why) } } @else if page.config.is_empty() { p.muted { "No platform config." } } @else {
                    div.scroll {
                        table.config {
                            thead { tr {
                                th scope="col" { "Key" }
                                th scope="col" { "Value" }
                                th scope="col" { "From ConfigMap" }
                            } }
                            tbody {
                                @for value in &page.config {
                                    tr data-key=(value.key) {
                                        th scope="row" { code { (value.key) } }
                                        td { code.value { (value.value) } }
                                        td {
                                            span.configmap { (value.config_map) }
                                            @if !value.overridden.is_empty() {
                                                span.sub { "overrides " (value.overridden.join(", ")) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="clusters" {
                h2 #clusters { "Clusters" }
                form.filters.compact method="get" action=(path) {
                    div.field {
                        label for="c-state" { "State" }
                        select #c-state name="state" {
                            option value="" { "Any state" }
                            @for s in [State::Failed, State::Stale, State::Reconciling, State::Compliant] {
                                option value=(s.as_str()) selected[state == Some(s)] { (s.label()) }
                            }
                        }
                    }
                    div.actions { button type="submit" { "Show" } }
                }
                @if page.clusters.is_empty() {
                    p.empty { "No cluster reports for this cluster type" @if state.is_some() { " in this state" } "." }
                } @else {
                    (clusters_table(&page.clusters, false))
                }
                (pager(&path, &state_pairs, page.page, page.total_clusters, "clusters"))
            }
        }
    };
    layout(&title, Nav::Fleet, Some(version), content)
}

/// A workload at `/workloads/{name}`.
pub fn workload_page(page: &WorkloadPage, version: u64) -> Markup {
    let content = html! {
        (breadcrumbs(&[("Fleet map", Some("/".to_owned())), (&page.name, None)]))
        h1 { "Workload " (page.name) }
        @if let Some(source) = &page.source { p.intro { "Manifests from " span.repo { (source) } } }
        div #live {
            @if page.placements.is_empty() {
                p.empty { "This workload is not scheduled on any cluster type." }
            } @else {
                div.scroll {
                    table.placements {
                        caption { "Where " (page.name) " runs: every environment and cluster type" }
                        thead { tr {
                            th scope="col" { "Environment" }
                            th scope="col" { "Cluster type" }
                            th scope="col" { "Deployment target" }
                            th scope="col" { "Version" }
                            th scope="col" { "GitOps commit" }
                            th scope="col" { "Since" }
                            th scope="col" { "Clusters" }
                        } }
                        tbody {
                            @for p in &page.placements {
                                tr {
                                    td { (p.environment) }
                                    th scope="row" { a href=(cluster_type_url(&p.environment, &p.cluster_type)) { (p.cluster_type) } }
                                    td { (p.deployment_target) }
                                    td { @if let Some(v) = &p.version { code { (v) } } @else { span.muted { "—" } } }
                                    td { (commit(p.gitops_commit.as_deref())) }
                                    td { (time(p.since)) }
                                    td { (badge(p.counts.state())) " " (breakdown(&p.counts)) }
                                }
                            }
                        }
                    }
                }
            }
            (pager(&workload_url(&page.name), &[], page.page, page.total_placements, "placements"))
        }
    };
    layout(
        &format!("Workload {}", page.name),
        Nav::Fleet,
        Some(version),
        content,
    )
}

/// A cluster at `/environments/{env}/clusters/{name}`.
pub fn cluster_page(page: &ClusterPage, version: u64) -> Markup {
    let cluster = &page.cluster;
    let content = html! {
        (breadcrumbs(&[
            ("Fleet map", Some("/".to_owned())),
            (&cluster.environment, Some(with_query("/", &[("environment", cluster.environment.clone())]))),
            (&cluster.cluster_type, Some(cluster_type_url(&cluster.environment, &cluster.cluster_type))),
            (&cluster.name, None),
        ]))
        h1 { "Cluster " (cluster.name) " " span.h-sub { "in " (cluster.environment) } }
        div #live {
            div.summary {
                @if let Some(s) = cluster.state { (badge(s)) }
                dl.inline {
                    dt { "Cluster type" } dd { a href=(cluster_type_url(&cluster.environment, &cluster.cluster_type)) { (cluster.cluster_type) } }
                    dt { "Revision" } dd { (commit(cluster.revision.as_deref())) }
                    dt { "Last report" } dd { (time(cluster.last_report_at)) }
                }
            }
            @if let Some(message) = &cluster.message {
                p.last-message { span.label { "Reconciler message: " } span.message { (message) } }
            }
            section aria-labelledby="history" {
                h2 #history { "Reports" }
                @if page.reports.is_empty() { p.empty { "No reports yet." } } @else {
                    div.scroll {
                        table.reports {
                            caption.visually-hidden { "Reports of " (cluster.name) ", newest first" }
                            thead { tr {
                                th scope="col" { "Received" }
                                th scope="col" { "State" }
                                th scope="col" { "Revision" }
                                th scope="col" { "Message" }
                            } }
                            tbody {
                                @for report in &page.reports {
                                    tr {
                                        th scope="row" { (time(Some(report.at))) }
                                        td { @if let Some(s) = report.state { (badge(s)) } }
                                        td { (commit(report.revision.as_deref())) }
                                        td.message { @if let Some(m) = &report.message { (m) } }
                                    }
                                }
                            }
                        }
                    }
                }
                (pager(&cluster_url(&cluster.environment, &cluster.name), &[], page.page, page.total_reports, "reports"))
            }
        }
    };
    layout(
        &format!("Cluster {}", cluster.name),
        Nav::Fleet,
        Some(version),
        content,
    )
}

/// An error page: 404 (`what` was not found), 400 (bad query) or 503/500.
pub fn error_page(title: &str, message: &str) -> Markup {
    layout(
        title,
        Nav::None,
        None,
        html! {
            div.error-page {
                h1 { (title) }
                p.message { (message) }
                p { a href="/" { "Go to the fleet map" } " or " a href="/promotions" { "the promotions" } "." }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_dates() {
        assert_eq!(timestamp_parts(0).0, "1970-01-01 00:00 UTC");
        assert_eq!(
            timestamp_parts(crate::demo::DEMO_NOW),
            (
                "2026-11-26 08:00 UTC".to_owned(),
                "2026-11-26T08:00:00Z".to_owned()
            )
        );
        assert_eq!(timestamp_parts(951_782_400).0, "2000-02-29 00:00 UTC");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(42), "42 s");
        assert_eq!(duration(27 * 60), "27 min");
        assert_eq!(duration(125 * 60), "2 h 5 min");
        assert_eq!(duration(3 * 86_400 + 4 * 3600), "3 d 4 h");
    }

    #[test]
    fn numbers_have_thousands_separators() {
        assert_eq!(number(0), "0");
        assert_eq!(number(999), "999");
        assert_eq!(number(1000), "1,000");
        assert_eq!(number(300_000), "300,000");
        assert_eq!(number(1_234_567), "1,234,567");
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(segment("drone-1.a_b~"), "drone-1.a_b~");
        assert_eq!(segment("a/b c<"), "a%2Fb%20c%3C");
        assert_eq!(
            cluster_type_url("dev", "x/y"),
            "/environments/dev/cluster-types/x%2Fy"
        );
    }

    #[test]
    fn badges_say_the_state_in_words_and_icon() {
        let html = badge(State::Failed).into_string();
        assert!(html.contains("state-failed"));
        assert!(html.contains("Failed"));
        assert!(html.contains("✕"));
    }
}
