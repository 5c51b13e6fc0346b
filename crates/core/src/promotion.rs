//! PromotionPolicy: what a control-plane commit must have passed before it is promoted into
//! an environment (soak, approvals, windows, verification). This module validates the object
//! (each problem names its field, so that `kalypso validate` shows file:line:column) and holds
//! the pure rules the hub applies: whether an identity may approve, and whether a time is
//! inside a window. Pure: the time is always given, never read.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use kalypso_api::{Kind, PromotionPolicySpec, WindowKind};

use crate::diag::{Code, Diagnostic, Diagnostics, Origin};

/// The timeout of a verification check that names none.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a verification check may take.
pub const MAX_CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// Who may approve: a user (an identity) or a group claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approver {
    /// `user:NAME`.
    User(String),
    /// `group:NAME`.
    Group(String),
}

impl std::fmt::Display for Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Approver::User(u) => write!(f, "user:{u}"),
            Approver::Group(g) => write!(f, "group:{g}"),
        }
    }
}

/// A window, parsed.
#[derive(Clone, Debug)]
pub struct Window {
    /// Allow or deny.
    pub kind: WindowKind,
    /// The cron expression as written.
    pub schedule: String,
    /// Parsed.
    cron: Cron,
    /// How long each window lasts.
    pub duration: Duration,
    /// Its time zone.
    pub time_zone: Tz,
}

/// A verification check, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Its name.
    pub name: String,
    /// The URL to GET.
    pub url: String,
    /// The status it must answer.
    pub expect_status: u16,
    /// How long it may take.
    pub timeout: Duration,
}

/// A PromotionPolicy, validated.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Its name.
    pub name: String,
    /// The environment a commit must have passed.
    pub from: String,
    /// How long `from` must have been compliant.
    pub soak: Option<Duration>,
    /// Distinct approvals needed (0: none).
    pub approvals_required: u32,
    /// Who may approve (empty: anyone allowed to).
    pub approvers: Vec<Approver>,
    /// Windows.
    pub windows: Vec<Window>,
    /// Verification checks.
    pub verification: Vec<Check>,
}

/// Where `now` stands relative to a policy's windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WindowState {
    /// Promotions may happen (inside an allow window, or there are none; in no deny window).
    Open {
        /// The allow window that is open (its schedule), if any.
        allow: Option<String>,
    },
    /// A deny window is open.
    Denied {
        /// Its schedule.
        schedule: String,
        /// Its time zone.
        time_zone: Tz,
        /// When it closes.
        until: DateTime<Utc>,
    },
    /// Allow windows exist and none is open.
    OutsideAllow {
        /// When the next one opens (`None`: never again).
        next: Option<(String, Tz, DateTime<Utc>)>,
    },
}

fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && url.len() > scheme.len()
    })
}

fn positive_duration(text: &str) -> Option<Duration> {
    crate::duration::parse(text).ok().filter(|d| !d.is_zero())
}

/// Parses a cron expression of five fields (minute hour day-of-month month day-of-week).
pub fn parse_schedule(text: &str) -> Result<Cron, String> {
    if text.split_whitespace().count() != 5 {
        return Err(format!(
            "{text:?} is not a cron expression of five fields (minute hour day-of-month month day-of-week)"
        ));
    }
    text.parse::<Cron>()
        .map_err(|e| format!("{text:?} is not a cron expression: {e}"))
}

/// Validates `spec` (the object `name` read at `origin`), recording each problem on its field;
/// the policy when it has none.
pub fn validate(
    name: &str,
    spec: &PromotionPolicySpec,
    origin: &Origin,
    diagnostics: &mut Diagnostics,
) -> Option<Policy> {
    let mut ok = true;
    let mut error = |field: String, message: String| {
        ok = false;
        diagnostics.push(
            Diagnostic::error(Code::InvalidPromotionPolicy, message)
                .at(origin)
                .on(Kind::PromotionPolicy, name)
                .field(field),
        );
    };
    if spec.from.trim().is_empty() {
        error(
            "spec.from".into(),
            "names no environment: a PromotionPolicy needs the environment a commit must have passed".into(),
        );
    }
    let soak = if spec.soak.is_empty() {
        None
    } else {
        let parsed = positive_duration(&spec.soak);
        if parsed.is_none() {
            error(
                "spec.soak".into(),
                format!("{:?} is not a positive duration such as 30m or 1h", spec.soak),
            );
        }
        parsed
    };
    let mut approvers = Vec::new();
    let mut required = 0;
    if let Some(approvals) = &spec.approvals {
        required = approvals.required;
        if approvals.required == 0 {
            error(
                "spec.approvals.required".into(),
                "is 0: require at least one approval, or leave spec.approvals out".into(),
            );
        }
        for (i, text) in approvals.approvers.iter().enumerate() {
            let parsed = match text.split_once(':') {
                Some(("user", n)) if !n.trim().is_empty() => Some(Approver::User(n.trim().to_owned())),
                Some(("group", n)) if !n.trim().is_empty() => Some(Approver::Group(n.trim().to_owned())),
                _ => None,
            };
            match parsed {
                Some(a) => approvers.push(a),
                None => error(
                    format!("spec.approvals.approvers[{i}]"),
                    format!("{text:?} is neither user:NAME nor group:NAME"),
                ),
            }
        }
    }
    let mut windows = Vec::new();
    for (i, w) in spec.windows.iter().enumerate() {
        let cron = parse_schedule(&w.schedule);
        if let Err(e) = &cron {
            error(format!("spec.windows[{i}].schedule"), e.clone());
        }
        let duration = positive_duration(&w.duration);
        if duration.is_none() {
            error(
                format!("spec.windows[{i}].duration"),
                format!("{:?} is not a positive duration such as 8h or 63h", w.duration),
            );
        }
        let zone = if w.time_zone.is_empty() {
            "UTC"
        } else {
            &w.time_zone
        };
        let tz = zone.parse::<Tz>().ok();
        if tz.is_none() {
            error(
                format!("spec.windows[{i}].timeZone"),
                format!("{zone:?} is not an IANA time zone such as Europe/Berlin"),
            );
        }
        if let (Ok(cron), Some(duration), Some(time_zone)) = (cron, duration, tz) {
            windows.push(Window {
                kind: w.kind,
                schedule: w.schedule.clone(),
                cron,
                duration,
                time_zone,
            });
        }
    }
    let mut verification: Vec<Check> = Vec::new();
    for (i, v) in spec.verification.iter().enumerate() {
        if v.name.trim().is_empty() {
            error(format!("spec.verification[{i}].name"), "is empty".into());
        } else if verification.iter().any(|c| c.name == v.name) {
            error(
                format!("spec.verification[{i}].name"),
                format!("a second check named {:?}: names are unique in a policy", v.name),
            );
        }
        if !is_http_url(&v.http.url) {
            error(
                format!("spec.verification[{i}].http.url"),
                format!("{:?} is not an http(s) URL", v.http.url),
            );
        }
        if !(100..=599).contains(&v.http.expect_status) {
            error(
                format!("spec.verification[{i}].http.expectStatus"),
                format!("{} is not an HTTP status (100 to 599)", v.http.expect_status),
            );
        }
        let timeout = if v.timeout.is_empty() {
            Some(DEFAULT_CHECK_TIMEOUT)
        } else {
            positive_duration(&v.timeout).filter(|t| *t <= MAX_CHECK_TIMEOUT)
        };
        if timeout.is_none() {
            error(
                format!("spec.verification[{i}].timeout"),
                format!(
                    "{:?} is not a positive duration of at most 10m such as 30s",
                    v.timeout
                ),
            );
        }
        verification.push(Check {
            name: v.name.clone(),
            url: v.http.url.clone(),
            expect_status: v.http.expect_status,
            timeout: timeout.unwrap_or(DEFAULT_CHECK_TIMEOUT),
        });
    }
    ok.then(|| Policy {
        name: name.to_owned(),
        from: spec.from.trim().to_owned(),
        soak,
        approvals_required: required,
        approvers,
        windows,
        verification,
    })
}

impl Policy {
    /// Whether an identity with `groups` may approve.
    pub fn may_approve(&self, identity: &str, groups: &[String]) -> bool {
        self.approvers.is_empty()
            || self.approvers.iter().any(|a| match a {
                Approver::User(u) => u == identity,
                Approver::Group(g) => groups.iter().any(|h| h == g),
            })
    }

    /// Where `now` stands relative to the windows.
    pub fn window_state(&self, now: DateTime<Utc>) -> WindowState {
        let mut allow_open = None;
        let mut next_allow: Option<(String, Tz, DateTime<Utc>)> = None;
        let mut has_allow = false;
        let mut denied: Option<(String, Tz, DateTime<Utc>)> = None;
        for w in &self.windows {
            let local = w.time_zone.from_utc_datetime(&now.naive_utc());
            let open_until = w
                .cron
                .find_previous_occurrence(&local, true)
                .ok()
                .map(|start| start.with_timezone(&Utc) + w.duration)
                .filter(|end| *end > now);
            match w.kind {
                WindowKind::Deny => {
                    if let Some(end) = open_until
                        && denied.as_ref().is_none_or(|(_, _, e)| end > *e)
                    {
                        denied = Some((w.schedule.clone(), w.time_zone, end));
                    }
                }
                WindowKind::Allow => {
                    has_allow = true;
                    if open_until.is_some() {
                        allow_open.get_or_insert_with(|| w.schedule.clone());
                    } else if let Ok(next) = w.cron.find_next_occurrence(&local, false) {
                        let next = next.with_timezone(&Utc);
                        if next_allow.as_ref().is_none_or(|(_, _, n)| next < *n) {
                            next_allow = Some((w.schedule.clone(), w.time_zone, next));
                        }
                    }
                }
            }
        }
        if let Some((schedule, time_zone, until)) = denied {
            return WindowState::Denied {
                schedule,
                time_zone,
                until,
            };
        }
        if has_allow && allow_open.is_none() {
            return WindowState::OutsideAllow { next: next_allow };
        }
        WindowState::Open { allow: allow_open }
    }
}

/// `Mon 09:00 Europe/Berlin`: a time as people of that zone read it.
pub fn local_time(time: DateTime<Utc>, zone: Tz) -> String {
    format!("{} {zone}", time.with_timezone(&zone).format("%a %Y-%m-%d %H:%M"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kalypso_api::{PromotionApprovals, PromotionWindow};

    fn policy(windows: Vec<PromotionWindow>) -> Policy {
        let spec = PromotionPolicySpec {
            from: "dev".into(),
            windows,
            ..PromotionPolicySpec::default()
        };
        let mut d = Diagnostics::new();
        validate("p", &spec, &Origin::new("f.yaml", 1), &mut d).unwrap()
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    fn weekend_freeze() -> PromotionWindow {
        PromotionWindow {
            kind: WindowKind::Deny,
            schedule: "0 18 * * FRI".into(),
            duration: "63h".into(),
            time_zone: "Europe/Berlin".into(),
        }
    }

    #[test]
    fn a_deny_window_denies_until_it_closes() {
        let p = policy(vec![weekend_freeze()]);
        // Saturday noon in Berlin (UTC+1 in November).
        match p.window_state(at("2026-11-28T11:00:00Z")) {
            WindowState::Denied { until, time_zone, .. } => {
                assert_eq!(local_time(until, time_zone), "Mon 2026-11-30 09:00 Europe/Berlin");
            }
            other => panic!("{other:?}"),
        }
        // Friday 17:59 Berlin: not yet.
        assert_eq!(
            p.window_state(at("2026-11-27T16:59:00Z")),
            WindowState::Open { allow: None }
        );
        // Monday 09:00 Berlin: over.
        assert_eq!(
            p.window_state(at("2026-11-30T08:00:00Z")),
            WindowState::Open { allow: None }
        );
    }

    #[test]
    fn allow_windows_name_the_next_opening() {
        let p = policy(vec![PromotionWindow {
            kind: WindowKind::Allow,
            schedule: "0 9 * * MON-THU".into(),
            duration: "8h".into(),
            time_zone: String::new(),
        }]);
        assert_eq!(
            p.window_state(at("2026-11-24T10:00:00Z")),
            WindowState::Open {
                allow: Some("0 9 * * MON-THU".into())
            }
        );
        match p.window_state(at("2026-11-27T10:00:00Z")) {
            WindowState::OutsideAllow {
                next: Some((_, tz, next)),
            } => {
                assert_eq!(local_time(next, tz), "Mon 2026-11-30 09:00 UTC");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_bad_field_is_named() {
        let spec = PromotionPolicySpec {
            from: String::new(),
            soak: "soon".into(),
            approvals: Some(PromotionApprovals {
                required: 0,
                approvers: vec!["ana".into(), "group:leads".into()],
            }),
            windows: vec![PromotionWindow {
                kind: WindowKind::Deny,
                schedule: "61 * * * *".into(),
                duration: "0s".into(),
                time_zone: "Mars/Olympus".into(),
            }],
            verification: vec![],
        };
        let mut d = Diagnostics::new();
        assert!(validate("p", &spec, &Origin::new("f.yaml", 1), &mut d).is_none());
        let fields: Vec<String> = d.iter().map(|d| d.field.clone().unwrap()).collect();
        assert_eq!(
            fields,
            [
                "spec.from",
                "spec.soak",
                "spec.approvals.required",
                "spec.approvals.approvers[0]",
                "spec.windows[0].schedule",
                "spec.windows[0].duration",
                "spec.windows[0].timeZone"
            ]
        );
    }

    #[test]
    fn approvers_match_users_and_groups() {
        let spec = PromotionPolicySpec {
            from: "dev".into(),
            approvals: Some(PromotionApprovals {
                required: 2,
                approvers: vec!["user:ana@contoso.com".into(), "group:leads".into()],
            }),
            ..PromotionPolicySpec::default()
        };
        let mut d = Diagnostics::new();
        let p = validate("p", &spec, &Origin::new("f.yaml", 1), &mut d).unwrap();
        assert!(p.may_approve("ana@contoso.com", &[]));
        assert!(p.may_approve("bo", &["leads".into()]));
        assert!(!p.may_approve("bo", &["devs".into()]));
    }
}
