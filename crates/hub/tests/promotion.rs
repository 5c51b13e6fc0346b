//! The promotion flow end to end, over real HTTP on 127.0.0.1 and real git repositories: a
//! PromotionPolicy in the target environment's branch, read by the hub from the control
//! plane; the gate with reasons (soak, approvals from distinct identities, a deny window, a
//! freeze, a verification check against a loopback server); the audit log; and notifications
//! to Slack-, Teams- and generic-webhook receivers on loopback, one of them down. On SQLite,
//! and on PostgreSQL when `KALYPSO_TEST_POSTGRES_URL` names a server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::HashMap;

use axum::http::HeaderMap;
use kalypso_git::redact::Secret;
use kalypso_git::{AuthSettings, RetryPolicy};
use kalypso_hub::auth::session::Sessions;
use kalypso_hub::client::{Client, Response};
use kalypso_hub::notify::NotificationsConfig;
use kalypso_hub::{GitSettings, HubConfig, HubState};
use kalypso_testkit::{init_bare, write_files};
use serde_json::{Value, json};

mod common;
use common::databases;

/// Control-plane commits the GitOps branches carry.
const P1: &str = "1111111111111111111111111111111111111111";
const P2: &str = "2222222222222222222222222222222222222222";

/// The key the hub signs session cookies with: the test signs people in with it, as a replica
/// sharing the key would (the sign-in itself, at a real OpenID Provider, is tests/sign_in.rs).
const SESSION_KEY: &str = "a-session-key-of-at-least-32-characters";

/// Who may do what on the test's hub: anyone signed in approves in stage (the PromotionPolicy
/// narrows who counts), ana administers (she freezes and unfreezes), and a read-only token
/// makes the hub require credentials for reading.
fn roles() -> kalypso_hub::config::AuthFile {
    let yaml = format!(
        "roles:\n  approver:\n    stage: ['*']\n  admin: [user:ana@contoso.com]\ntokens:\n- {{name: ci, hash: {}, scopes: [read]}}\n",
        kalypso_hub::auth::hash_token("ci-token")
    );
    kalypso_hub::config::HubFile::parse(&yaml, "hub.yaml").unwrap().1
}

/// The people of the test, signed in: (name as the calls give it, identity, groups).
const PEOPLE: [(&str, &str, &[&str]); 3] = [
    ("ana", "ana@contoso.com", &[]),
    ("bo", "bo@contoso.com", &["platform-leads"]),
    ("eve", "eve@contoso.com", &["interns"]),
];

/// A session (its `Cookie` header and CSRF token) for each of [`PEOPLE`], with the roles the
/// hub gives them at sign-in.
fn sessions(state: &HubState) -> HashMap<String, (String, String)> {
    let key = Secret::new(SESSION_KEY);
    let signer = Sessions::new(Some(&key), Duration::from_secs(3600), false);
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    PEOPLE
        .iter()
        .map(|(name, identity, groups)| {
            let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
            let grants = state.auth().roles_of(identity, identity, &groups);
            let (session, set_cookie) = signer.start(identity, &groups, grants, now);
            let cookie = set_cookie.to_str().unwrap().split(';').next().unwrap().to_owned();
            ((*name).to_owned(), (cookie, session.csrf))
        })
        .collect()
}

/// What the loopback receivers got: (path, headers, body).
type Received = Arc<Mutex<Vec<(String, HeaderMap, String)>>>;

/// A loopback server: `/healthz` answers the status in `health`; any POST is recorded.
async fn loopback(health: Arc<AtomicU16>, received: Received) -> SocketAddr {
    use axum::routing::{get, post};
    let app = axum::Router::new()
        .route(
            "/healthz",
            get(move || {
                let health = health.clone();
                async move { axum::http::StatusCode::from_u16(health.load(Ordering::SeqCst)).unwrap() }
            }),
        )
        .route(
            "/hooks/{name}",
            post(
                move |axum::extract::Path(name): axum::extract::Path<String>,
                      headers: HeaderMap,
                      body: String| {
                    let received = received.clone();
                    async move {
                        received.lock().unwrap().push((name, headers, body));
                        "ok"
                    }
                },
            ),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

struct Repos {
    control_plane: PathBuf,
    gitops: PathBuf,
    dev_commit: String,
    cache: PathBuf,
}

fn environment(name: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: Environment\nmetadata:\n  name: {name}\nspec:\n  controlPlane:\n    repo: https://github.com/contoso/control-plane\n    branch: {name}\n    path: .\n"
    )
}

fn gitops_repo(name: &str, gitops: &Path) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: GitOpsRepo\nmetadata:\n  name: {name}\nspec:\n  repo: file://{}\n  branch: {name}\n  path: .\n",
        gitops.display()
    )
}

fn policy(smoke: &str, windows: &str) -> String {
    format!(
        "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: PromotionPolicy\nmetadata:\n  name: into-stage\nspec:\n  from: dev\n  soak: 1h\n  approvals:\n    required: 2\n    approvers: [\"group:platform-leads\", \"user:ana@contoso.com\"]\n{windows}  verification:\n  - name: smoke\n    http: {{url: \"{smoke}\", expectStatus: 200}}\n    timeout: 5s\n"
    )
}

fn repos(dir: &Path, smoke: &str) -> Repos {
    let cp = dir.join("control-plane.git");
    let gitops = dir.join("gitops.git");
    init_bare(&cp);
    init_bare(&gitops);
    let (dev_env, stage_env) = (environment("dev"), environment("stage"));
    write_files(
        &cp,
        "main",
        &[
            (".environments/dev.yaml", Some(dev_env.as_str())),
            (".environments/stage.yaml", Some(stage_env.as_str())),
        ],
        "environments",
    );
    let dev_repo = gitops_repo("dev", &gitops);
    write_files(
        &cp,
        "dev",
        &[("gitops-repo.yaml", Some(dev_repo.as_str()))],
        "dev",
    );
    let stage_repo = gitops_repo("stage", &gitops);
    let stage_policy = policy(smoke, "");
    write_files(
        &cp,
        "stage",
        &[
            ("gitops-repo.yaml", Some(stage_repo.as_str())),
            ("promotion-policy.yaml", Some(stage_policy.as_str())),
        ],
        "stage",
    );
    let dev_commit = write_files(
        &gitops,
        "dev",
        &[
            (".github/tracking/Promoted_Commit_Id", Some(P1)),
            ("drone/README.md", Some("# drone\n")),
        ],
        "promote P1",
    );
    write_files(
        &gitops,
        "stage",
        &[
            (".github/tracking/Promoted_Commit_Id", Some(P2)),
            ("drone/README.md", Some("# drone\n")),
        ],
        "stage runs P2",
    );
    Repos {
        control_plane: cp,
        gitops,
        dev_commit,
        cache: dir.join("cache"),
    }
}

struct Hub {
    addr: SocketAddr,
    state: HubState,
    /// Each signed-in person's cookie and CSRF token.
    people: HashMap<String, (String, String)>,
}

async fn start(config: HubConfig) -> Hub {
    let state = kalypso_hub::start(&config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::app(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let people = sessions(&state);
    Hub { addr, state, people }
}

/// Calls the hub as `who`: a signed-in person of [`PEOPLE`] (with the session's CSRF token),
/// else a bearer token.
async fn call(hub: &Hub, method: &str, path: &str, who: &str, body: Option<Value>) -> Response {
    let mut c = Client::new(hub.addr);
    let bearer = format!("Bearer {who}");
    let headers: Vec<(&str, &str)> = match hub.people.get(who) {
        Some((cookie, csrf)) => vec![
            ("cookie", cookie.as_str()),
            ("x-csrf-token", csrf.as_str()),
            ("content-type", "application/json"),
        ],
        None => vec![
            ("authorization", bearer.as_str()),
            ("content-type", "application/json"),
        ],
    };
    match (method, body) {
        ("GET", _) => c.get(path, &headers).await.unwrap(),
        (_, body) => c
            .post(
                path,
                &headers,
                &serde_json::to_vec(&body.unwrap_or_default()).unwrap(),
            )
            .await
            .unwrap(),
    }
}

async fn ok(hub: &Hub, method: &str, path: &str, token: &str, body: Option<Value>) -> Value {
    let r = call(hub, method, path, token, body).await;
    assert_eq!(
        r.status,
        200,
        "{method} {path}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()
}

/// The compliance report of drone-1 in dev for `commit` at `time`.
fn report(commit: &str, time: &str) -> Value {
    json!({"cluster": "drone-1", "clusterType": "drone", "environment": "dev", "commit": commit,
           "state": "compliant", "message": format!("applied at {time}"), "time": time})
}

fn time_ago(d: Duration) -> String {
    let t = std::time::SystemTime::now() - d;
    let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    chrono::DateTime::from_timestamp(i64::try_from(secs).unwrap(), 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The promotion part of the gate of dev for the dev commit into stage.
async fn promotion(hub: &Hub, repos: &Repos) -> Value {
    let gate = ok(
        hub,
        "GET",
        &format!(
            "/api/v1/environments/dev/gate?commit={}&into=stage",
            repos.dev_commit
        ),
        "ana",
        None,
    )
    .await;
    gate["promotion"].clone()
}

fn summaries(p: &Value) -> Vec<(String, String)> {
    p["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["state"].as_str().unwrap().to_owned(),
                r["summary"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn find<'a>(p: &'a Value, kind: &str) -> &'a Value {
    p["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} requirement in {p:#}"))
}

async fn flow_scenario(url: &str, dir: &Path) {
    let health = Arc::new(AtomicU16::new(503));
    let received: Received = Arc::default();
    let server = loopback(health.clone(), received.clone()).await;
    let smoke = format!("http://{server}/healthz");
    let repos = repos(dir, &smoke);

    // Notifications: Slack, Teams and a signed generic receiver on loopback, and one that is
    // down (nothing listens on its port); only stage's events go to Teams.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(dir.join("hmac"), "s3cret\n").unwrap();
    let notifications: NotificationsConfig = serde_yaml_ng::from_str(&format!(
        "backoff: 50ms\nattempts: 3\nreceivers:\n\
         - {{name: slack, type: slack, url: 'http://{server}/hooks/slack'}}\n\
         - {{name: teams, type: teams, url: 'http://{server}/hooks/teams', environments: [stage], events: [freeze, unfreeze]}}\n\
         - {{name: generic, type: generic, url: 'http://{server}/hooks/generic', secretFile: '{}'}}\n\
         - {{name: down, type: generic, url: 'http://{down}/hooks/down'}}\n",
        dir.join("hmac").display()
    ))
    .unwrap();
    let mut config = HubConfig::new(url);
    config.refresh = Duration::from_secs(3600);
    config.git = Some(GitSettings {
        control_plane: repos.control_plane.display().to_string(),
        cache_dir: repos.cache.clone(),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    });
    config.notifications = notifications;
    config.auth = roles();
    config.session_secret = Some(Secret::new(SESSION_KEY));
    let hub = start(config).await;
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;

    // dev's cluster has just applied the commit: compliant, but the soak has not passed, no
    // one approved and the smoke check fails. Every requirement not met is named.
    ok(
        &hub,
        "POST",
        "/api/v1/compliance",
        "x",
        Some(report(&repos.dev_commit, &time_ago(Duration::from_secs(60)))),
    )
    .await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(p["into"], "stage");
    assert_eq!(p["policy"], "into-stage");
    assert_eq!(p["mayPromote"], false);
    let s = summaries(&p);
    assert_eq!(
        s[0],
        ("met".to_owned(), "compliant 1/1 in dev".to_owned()),
        "{s:#?}"
    );
    assert_eq!(s[1].0, "not-yet");
    assert!(
        s[1].1
            .starts_with("soak 1m of 1h (every cluster of dev compliant since "),
        "{s:#?}"
    );
    assert_eq!(s[2], ("not-yet".to_owned(), "approvals 0 of 2".to_owned()));
    assert_eq!(s[3], ("met".to_owned(), "stage is not frozen".to_owned()));
    assert_eq!(s[4].0, "failed");
    assert_eq!(
        s[4].1,
        format!("verification smoke: failed: http://{server}/healthz answered 503, expected 200")
    );
    assert_eq!(s.len(), 5);

    // The soak: the cluster has been compliant for two hours.
    ok(
        &hub,
        "POST",
        "/api/v1/compliance",
        "x",
        Some(report(&repos.dev_commit, &time_ago(Duration::from_secs(7200)))),
    )
    .await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(find(&p, "soak")["state"], "met");
    assert!(
        find(&p, "soak")["summary"]
            .as_str()
            .unwrap()
            .starts_with("soak 2h"),
        "{p:#}"
    );

    // Approvals: ana twice counts once; eve is no approver; bo is, by his group.
    let short = &P1[..10];
    let a = ok(
        &hub,
        "POST",
        "/api/v1/approvals",
        "ana",
        Some(json!({"environment": "stage", "commit": short, "comment": "looks good"})),
    )
    .await;
    assert_eq!(a["commit"], P1);
    assert_eq!(a["counted"], true);
    let a = ok(
        &hub,
        "POST",
        "/api/v1/approvals",
        "ana",
        Some(json!({"environment": "stage", "commit": short})),
    )
    .await;
    assert_eq!(a["counted"], false);
    let p = promotion(&hub, &repos).await;
    assert_eq!(
        find(&p, "approvals")["summary"],
        "approvals 1 of 2 (ana@contoso.com)"
    );
    assert_eq!(find(&p, "approvals")["state"], "not-yet");
    let refused = call(
        &hub,
        "POST",
        "/api/v1/approvals",
        "eve",
        Some(json!({"environment": "stage", "commit": short})),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", String::from_utf8_lossy(&refused.body));
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("eve@contoso.com may not approve promotions into stage")
    );
    ok(
        &hub,
        "POST",
        "/api/v1/approvals",
        "bo",
        Some(json!({"environment": "stage", "commit": P1})),
    )
    .await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(find(&p, "approvals")["state"], "met");
    assert_eq!(
        find(&p, "approvals")["approvedBy"],
        json!(["ana@contoso.com", "bo@contoso.com"])
    );

    // The smoke check passes once the endpoint is healthy (a failure is tried again after a
    // while; here the stored failure is made old).
    health.store(200, Ordering::SeqCst);
    let p = promotion(&hub, &repos).await;
    assert_eq!(
        find(&p, "verification")["state"],
        "failed",
        "a fresh failure stands"
    );
    sqlx::query("UPDATE verifications SET checked_at = 0")
        .execute(hub.state.db().pool())
        .await
        .unwrap();
    let p = promotion(&hub, &repos).await;
    assert_eq!(find(&p, "verification")["state"], "met", "{p:#}");
    assert_eq!(p["mayPromote"], true, "{p:#}");

    // A freeze stops the line, naming who and why; unfreezing lifts it.
    let f = ok(
        &hub,
        "POST",
        "/api/v1/freezes",
        "bo",
        Some(json!({"environment": "stage", "reason": "incident 42"})),
    )
    .await;
    assert_eq!(f["actor"], "bo@contoso.com");
    let p = promotion(&hub, &repos).await;
    assert_eq!(p["mayPromote"], false);
    let freeze = find(&p, "freeze");
    assert_eq!(freeze["state"], "not-yet");
    assert!(
        freeze["summary"]
            .as_str()
            .unwrap()
            .starts_with("frozen by bo@contoso.com since ")
    );
    assert!(freeze["summary"].as_str().unwrap().ends_with(": incident 42"));
    let u = ok(
        &hub,
        "POST",
        "/api/v1/unfreezes",
        "ana",
        Some(json!({"environment": "stage", "reason": "resolved"})),
    )
    .await;
    assert_eq!(u["lifted"][0]["reason"], "incident 42");
    assert_eq!(promotion(&hub, &repos).await["mayPromote"], true);

    // Bad input is refused before anything is stored.
    for (path, body, field) in [
        (
            "/api/v1/freezes",
            json!({"environment": "stage", "reason": " "}),
            "reason",
        ),
        (
            "/api/v1/freezes",
            json!({"environment": "stage", "reason": "x", "until": "tomorrow"}),
            "until",
        ),
        (
            "/api/v1/freezes",
            json!({"environment": "stage", "reason": "x", "until": "2001-01-01T00:00:00Z"}),
            "until",
        ),
        (
            "/api/v1/approvals",
            json!({"environment": "stage", "commit": "xyz"}),
            "commit",
        ),
        (
            "/api/v1/approvals",
            json!({"environment": "stage", "commit": "3333333"}),
            "commit",
        ),
        (
            "/api/v1/approvals",
            json!({"environment": "stage", "commit": P1, "extra": 1}),
            "extra",
        ),
    ] {
        let r = call(&hub, "POST", path, "ana", Some(body.clone())).await;
        assert_eq!(r.status, 400, "{body}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["field"], field, "{body}");
    }
    let r = call(
        &hub,
        "POST",
        "/api/v1/freezes",
        "ana",
        Some(json!({"environment": "prod", "reason": "x"})),
    )
    .await;
    assert_eq!(r.status, 404);

    // A deny window that is always open (every minute, for two minutes) refuses, naming it.
    let windowed = policy(
        &smoke,
        "  windows:\n  - kind: Deny\n    schedule: \"* * * * *\"\n    duration: 2m\n    timeZone: Europe/Berlin\n",
    );
    write_files(
        &repos.control_plane,
        "stage",
        &[("promotion-policy.yaml", Some(windowed.as_str()))],
        "deny window",
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(p["mayPromote"], false);
    let window = find(&p, "window");
    assert_eq!(window["state"], "not-yet");
    assert_eq!(window["name"], "* * * * *");
    let text = window["summary"].as_str().unwrap();
    assert!(
        text.starts_with("window: denied until ") && text.ends_with(" Europe/Berlin (Deny \"* * * * *\")"),
        "{text}"
    );

    // An invalid policy refuses, and says why.
    write_files(
        &repos.control_plane,
        "stage",
        &[(
            "promotion-policy.yaml",
            Some(
                "apiVersion: scheduler.kalypso.io/v1alpha1\nkind: PromotionPolicy\nmetadata:\n  name: into-stage\nspec:\n  from: dev\n  soak: soon\n",
            ),
        )],
        "broken policy",
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(find(&p, "policy")["state"], "failed");
    assert!(
        find(&p, "policy")["summary"]
            .as_str()
            .unwrap()
            .contains("spec.soak: \"soon\" is not a positive duration"),
        "{p:#}"
    );

    // Without a policy only compliance and freezes apply.
    write_files(
        &repos.control_plane,
        "stage",
        &[("promotion-policy.yaml", None)],
        "no policy",
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    let p = promotion(&hub, &repos).await;
    assert_eq!(p["policy"], Value::Null);
    assert_eq!(p["mayPromote"], true);
    assert_eq!(summaries(&p).len(), 2);
    // The gate without `into` answers as before.
    let plain = ok(
        &hub,
        "GET",
        &format!("/api/v1/environments/dev/gate?commit={}", repos.dev_commit),
        "ana",
        None,
    )
    .await;
    assert!(plain.get("promotion").is_none());

    // Promotions: one reported by `kalypso promote`, one the hub sees on the GitOps branch.
    ok(
        &hub,
        "POST",
        "/api/v1/promotions",
        "ana",
        Some(json!({"environment": "stage", "from": "dev", "commit": P1})),
    )
    .await;
    write_files(
        &repos.gitops,
        "stage",
        &[(".github/tracking/Promoted_Commit_Id", Some(P1))],
        "stage runs P1",
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    write_files(
        &repos.gitops,
        "stage",
        &[(".github/tracking/Promoted_Commit_Id", Some(P2))],
        "stage back to P2",
    );
    hub.state.refresher().refresh_now(Duration::from_secs(30)).await;
    ok(
        &hub,
        "POST",
        "/api/v1/promotions",
        "bo",
        Some(json!({"environment": "stage", "commit": P1, "overrideReason": "hotfix", "unmet": ["approvals 0 of 2"]})),
    )
    .await;

    // The audit log holds every action, newest first, filterable; nothing edits it.
    let log = ok(&hub, "GET", "/api/v1/audit", "ana", None).await;
    let entries: Vec<(String, String, String)> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
                e["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expect = |k: &str, a: &str, r: &str| (k.to_owned(), a.to_owned(), r.to_owned());
    assert_eq!(
        entries,
        [
            expect("override", "bo@contoso.com", "hotfix"),
            expect("promotion", "hub", ""),
            expect("promotion", "ana@contoso.com", ""),
            expect("unfreeze", "ana@contoso.com", "resolved"),
            expect("freeze", "bo@contoso.com", "incident 42"),
            expect("approval", "bo@contoso.com", ""),
            expect("approval", "ana@contoso.com", ""),
            expect("approval", "ana@contoso.com", "looks good"),
        ]
    );
    assert_eq!(log["total"], 8);
    assert_eq!(log["entries"][1]["commit"], P2);
    assert_eq!(log["entries"][0]["detail"], "not met: approvals 0 of 2");
    let anas = ok(
        &hub,
        "GET",
        "/api/v1/audit?kind=approval&actor=ana@contoso.com&limit=1",
        "ana",
        None,
    )
    .await;
    assert_eq!(anas["total"], 2);
    assert_eq!(anas["entries"].as_array().unwrap().len(), 1);
    assert_eq!(
        anas["entries"][0]["detail"],
        "already approved by this identity: counted once"
    );
    let r = call(&hub, "GET", "/api/v1/audit?kind=deletion", "ana", None).await;
    assert_eq!(r.status, 400);
    for method in ["PUT", "DELETE", "PATCH"] {
        let r = Client::new(hub.addr)
            .request(method, "/api/v1/audit", &[], b"")
            .await
            .unwrap();
        assert_eq!(r.status, 405, "{method} /api/v1/audit");
    }

    // Notifications reached the receivers that are up (the one that is down delayed none of
    // the answers above); the generic ones are signed.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = received.lock().unwrap().clone();
        let slack: Vec<&String> = got
            .iter()
            .filter(|(n, _, _)| n == "slack")
            .map(|(_, _, b)| b)
            .collect();
        let teams: Vec<&String> = got
            .iter()
            .filter(|(n, _, _)| n == "teams")
            .map(|(_, _, b)| b)
            .collect();
        let generic: Vec<&(String, HeaderMap, String)> =
            got.iter().filter(|(n, _, _)| n == "generic").collect();
        let kinds = |bodies: &[&String]| -> Vec<String> {
            bodies
                .iter()
                .map(|b| b.split(']').next().unwrap_or_default().to_owned())
                .collect()
        };
        if slack.iter().any(|b| b.contains("[override]")) && generic.len() >= slack.len() {
            let slack_kinds = kinds(&slack);
            for kind in [
                "{\"text\":\"[gate-blocked",
                "{\"text\":\"[approval",
                "{\"text\":\"[freeze",
                "{\"text\":\"[unfreeze",
                "{\"text\":\"[promotion",
                "{\"text\":\"[override",
            ] {
                assert!(
                    slack_kinds.iter().any(|k| k == kind),
                    "{kind} in {slack_kinds:#?}"
                );
            }
            assert_eq!(teams.len(), 2, "teams gets stage's freezes only: {teams:#?}");
            assert!(teams[0].contains("MessageCard"));
            for (_, headers, body) in &generic {
                let signature = headers.get("x-signature").unwrap().to_str().unwrap();
                assert!(kalypso_git::signature::verify(
                    b"s3cret",
                    body.as_bytes(),
                    signature
                ));
            }
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "notifications did not arrive: {got:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_promotion_flow_gates_approves_freezes_verifies_audits_and_notifies() {
    let dir = tempfile::tempdir().unwrap();
    for (i, url) in databases(dir.path(), "flow").await.into_iter().enumerate() {
        let sub = dir.path().join(format!("run-{i}"));
        std::fs::create_dir_all(&sub).unwrap();
        flow_scenario(&url, &sub).await;
    }
}

/// Waits until the page at the browser's current address shows `text` in `css` (a form's
/// post and redirect finish in their own time).
async fn wait_for(b: &kalypso_testkit::browser::Browser, css: &str, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let now = b.texts(css).await.join("\n");
        if now.contains(text) {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} does not say {text:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The dashboard's release pages, with people signed in (session cookies signed with the hub's
/// session key): over HTTP, the forms' refusals (no session, a role without the environment, a
/// wrong CSRF token) store nothing; in Chromium, an approver sees the promotion's requirements,
/// approves, freezes and unfreezes with the page's buttons, and the audit page lists each under
/// their name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvers_act_on_the_release_pages() {
    let dir = tempfile::tempdir().unwrap();
    let health = Arc::new(AtomicU16::new(200));
    let server = loopback(health, Received::default()).await;
    let repos = repos(dir.path(), &format!("http://{server}/healthz"));
    let mut config = HubConfig::new(format!("sqlite://{}", dir.path().join("hub.db").display()));
    config.refresh = Duration::from_secs(3600);
    config.git = Some(GitSettings {
        control_plane: repos.control_plane.display().to_string(),
        cache_dir: repos.cache.clone(),
        auth: AuthSettings::default(),
        retry: RetryPolicy::default(),
        main_branch: "main".to_owned(),
        registry: Default::default(),
    });
    config.auth = roles();
    config.session_secret = Some(Secret::new(SESSION_KEY));
    let state = kalypso_hub::start(&config).await.unwrap();
    state.refresher().refresh_now(Duration::from_secs(30)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::dashboard::app(
        state.clone(),
        kalypso_hub::DashboardMode::Protected,
        kalypso_dashboard::Options::default(),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let people = sessions(&state);
    let hub = Hub {
        addr,
        state,
        people: people.clone(),
    };
    ok(
        &hub,
        "POST",
        "/api/v1/compliance",
        "x",
        Some(report(&repos.dev_commit, &time_ago(Duration::from_secs(7200)))),
    )
    .await;

    // Over HTTP: the forms' refusals.
    let (bo_cookie, bo_csrf) = people["bo"].clone();
    let form = ("content-type", "application/x-www-form-urlencoded");
    let mut c = Client::new(addr);
    let r = c.get("/environments/stage/promotion", &[]).await.unwrap();
    assert_eq!(r.status, 401, "no session, no page");
    let r = c
        .post("/environments/stage/freeze", &[form], b"reason=x")
        .await
        .unwrap();
    assert_eq!(r.status, 401, "no session, no action");
    let body = format!("csrf={bo_csrf}&reason=x");
    let r = c
        .post(
            "/environments/dev/freeze",
            &[form, ("cookie", &bo_cookie)],
            body.as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403, "bo approves in stage only");
    assert!(String::from_utf8_lossy(&r.body).contains("may not freeze or unfreeze dev"));
    let r = c
        .post(
            "/environments/stage/freeze",
            &[form, ("cookie", &bo_cookie)],
            b"csrf=wrong&reason=x",
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403, "a wrong CSRF token");
    assert!(String::from_utf8_lossy(&r.body).contains("CSRF"));
    let log = ok(&hub, "GET", "/api/v1/audit", "ana", None).await;
    assert_eq!(log["total"], 0, "nothing stored: {log:#}");
    // Without the right in the environment, no forms on its page.
    let page = c
        .get("/environments/dev/promotion", &[("cookie", &bo_cookie)])
        .await
        .unwrap();
    assert_eq!(page.status, 200);
    assert!(!String::from_utf8_lossy(&page.body).contains("<form class=\"freeze\""));

    // In Chromium, as bo.
    let base = format!("http://{addr}");
    let Some(b) = kalypso_testkit::browser::Browser::start(&base, "the release pages' browser test").await
    else {
        return;
    };
    b.goto("/healthz").await;
    // The session cookie as the hub sets it at sign-in (set by script here: the sign-in itself,
    // at a real OpenID Provider, is tests/sign_in.rs).
    b.js(&format!("document.cookie = '{bo_cookie}; path=/'; return true;"))
        .await;
    b.goto("/environments/stage/promotion").await;
    assert_eq!(b.title().await, "Promotion into stage · Kalypso fleet");
    let requirements = wait_for(&b, "ul.requirements li", "approvals 0 of 2").await;
    assert!(requirements.contains("compliant 1/1 in dev"), "{requirements}");
    assert!(requirements.contains("soak 2h"), "{requirements}");
    assert!(requirements.contains("stage is not frozen"), "{requirements}");
    b.client
        .find(fantoccini::Locator::Css("#approve-comment"))
        .await
        .unwrap()
        .send_keys("looks good")
        .await
        .unwrap();
    b.client
        .find(fantoccini::Locator::Css("form.approve button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&b, "ul.requirements li", "approvals 1 of 2 (bo@contoso.com)").await;
    b.screenshot("release-environment").await;
    b.client
        .find(fantoccini::Locator::Css("#freeze-reason"))
        .await
        .unwrap()
        .send_keys("incident 9")
        .await
        .unwrap();
    b.client
        .find(fantoccini::Locator::Css("form.freeze button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&b, "ul.freezes li", "by bo@contoso.com").await;
    wait_for(&b, "ul.requirements li", "frozen by bo@contoso.com").await;
    b.client
        .find(fantoccini::Locator::Css("form.unfreeze button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&b, "p.not-frozen", "Not frozen.").await;

    // The releases page shows stage's requirements; the audit page lists what bo did.
    b.goto("/releases").await;
    wait_for(
        &b,
        "#release-stage ul.requirements li",
        "approvals 1 of 2 (bo@contoso.com)",
    )
    .await;
    b.goto("/audit").await;
    let rows = wait_for(&b, "table.audit tbody tr", "unfreeze").await;
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(lines.len(), 3, "{rows}");
    assert!(
        lines[0].contains("bo@contoso.com") && lines[0].contains("unfreeze"),
        "{rows}"
    );
    assert!(
        lines[1].contains("freeze") && lines[1].contains("incident 9"),
        "{rows}"
    );
    assert!(
        lines[2].contains("approval") && lines[2].contains("looks good"),
        "{rows}"
    );
    b.screenshot("release-audit").await;
    b.close().await;
}
