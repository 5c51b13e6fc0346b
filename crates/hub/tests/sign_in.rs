//! Who may do what on the hub, with real parts: named and scoped API tokens (hashed in the
//! configuration file), the legacy `--api-token-file` token, and people signing in to the
//! dashboard through a real OpenID Provider (npm's `oidc-provider` on Node.js, on loopback;
//! see `kalypso_testkit::oidc`) in headless Chromium — roles from the provider's groups claim,
//! a viewer refused an admin action, CSRF tokens, sign-out. No token appears in an answer or in
//! the hub's logs.
//!
//! The browser and the provider are skipped when missing (said once), unless
//! `KALYPSO_TEST_REQUIRE_SERVICES=1` makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_lines)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use kalypso_git::redact::Secret;
use kalypso_hub::auth::hash_token;
use kalypso_hub::client::Client;
use kalypso_hub::config::HubFile;
use kalypso_hub::{DashboardMode, HubConfig};
use kalypso_testkit::browser::Browser;
use kalypso_testkit::oidc::{CLIENT_ID, CLIENT_SECRET, OidcProvider};

// ---------------------------------------------------------------------------------------
// The hub's logs, kept to check that no token is in them.

#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || writer.clone())
            .try_init();
        logs
    })
}

fn logged() -> String {
    String::from_utf8_lossy(&logs().0.lock().unwrap()).into_owned()
}

// ---------------------------------------------------------------------------------------
// The hub

async fn serve(config: HubConfig, listener: tokio::net::TcpListener) -> SocketAddr {
    let state = kalypso_hub::start(&config).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = kalypso_hub::dashboard::app(
        state,
        config.dashboard,
        kalypso_dashboard::Options {
            poll_interval: Duration::from_millis(200),
        },
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

const READ_TOKEN: &str = "read-t0ken-5f0c1e";
const REPORT_TOKEN: &str = "report-t0ken-9a7b2d";
const APPROVE_TOKEN: &str = "approve-t0ken-33e1c0";
const LEGACY_TOKEN: &str = "legacy-t0ken-77d0aa";
const WEBHOOK_SECRET: &str = "hmac-s3cret-0b9e";

fn tokens_yaml() -> String {
    format!(
        "tokens:\n- name: dashboards\n  hash: {}\n  scopes: [read]\n- name: argocd\n  hash: {}\n  scopes: [report]\n- name: release-bot\n  hash: {}\n  scopes: ['approve:stage']\n",
        hash_token(READ_TOKEN),
        hash_token(REPORT_TOKEN),
        hash_token(APPROVE_TOKEN),
    )
}

fn compliance(cluster: &str) -> Vec<u8> {
    format!(
        r#"{{"cluster":"{cluster}","environment":"dev","clusterType":"drone","commit":"{}","state":"compliant"}}"#,
        "a".repeat(40)
    )
    .into_bytes()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

// ---------------------------------------------------------------------------------------
// Tokens, without a browser

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_token_does_what_its_scopes_allow_and_is_never_shown() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", tmp.path().join("hub.db").display()));
    config.webhook_secret = Some(Secret::new(WEBHOOK_SECRET));
    config.api_token = Some(Secret::new(LEGACY_TOKEN));
    config.auth = HubFile::parse(&tokens_yaml(), "hub.yaml").unwrap().1;
    let addr = serve(config, listener().await).await;
    let mut c = Client::new(addr);
    let read = bearer(READ_TOKEN);
    let report = bearer(REPORT_TOKEN);
    let approve = bearer(APPROVE_TOKEN);
    let legacy = bearer(LEGACY_TOKEN);

    // Argo CD's webhook service sends a header but cannot sign: its report token is enough.
    let r = c
        .post(
            "/api/v1/compliance",
            &[("authorization", &report)],
            &compliance("argo-1"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Flux signs; a signature still works without a token.
    let body = compliance("flux-1");
    let signature = kalypso_git::signature::sign(WEBHOOK_SECRET.as_bytes(), &body);
    let r = c
        .post("/api/v1/compliance", &[("x-signature", &signature)], &body)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // The legacy token may do everything, reports included.
    let r = c
        .post(
            "/api/v1/compliance",
            &[("authorization", &legacy)],
            &compliance("legacy-1"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200);

    // A read token cannot report; an approve token cannot either; nothing is stored.
    for token in [&read, &approve] {
        let r = c
            .post(
                "/api/v1/compliance",
                &[("authorization", token)],
                &compliance("nope"),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    }
    let r = c
        .post(
            "/api/v1/compliance",
            &[("authorization", "Bearer wrong")],
            &compliance("nope"),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (401, "Authorization".into())
    );
    let r = c
        .post("/api/v1/compliance", &[], &compliance("nope"))
        .await
        .unwrap();
    assert_eq!((r.status, r.json()["field"].clone()), (401, "X-Signature".into()));

    // A report token cannot read; the read token and the legacy one can.
    let r = c
        .get("/api/v1/clusters", &[("authorization", &report)])
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    let message = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("\"argocd\"") && message.contains("report"),
        "{message}"
    );
    let r = c
        .get("/api/v1/clusters", &[("authorization", &read)])
        .await
        .unwrap();
    assert_eq!((r.status, r.json()["total"].clone()), (200, 3.into()));
    let r = c
        .get("/api/v1/clusters", &[("authorization", &legacy)])
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/api/v1/clusters", &[]).await.unwrap().status, 401);

    // The dashboard: a bearer token that reads, as through a proxy; no sign-in without OIDC.
    let r = c.get("/", &[("authorization", &read)]).await.unwrap();
    assert_eq!(r.status, 200);
    let r = c.get("/", &[("authorization", &report)]).await.unwrap();
    assert_eq!(r.status, 403);
    assert_eq!(c.get("/", &[]).await.unwrap().status, 401);
    assert_eq!(c.get("/auth/sign-in", &[]).await.unwrap().status, 404);

    // The admin action: the legacy token may, the approve-scoped one may not.
    let r = c
        .post("/actions/refresh", &[("authorization", &approve)], b"")
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    let r = c
        .post("/actions/refresh", &[("authorization", &legacy)], b"")
        .await
        .unwrap();
    assert_eq!((r.status, r.header("location")), (303, Some("/")));

    // No token in any answer above, nor in the logs.
    let logs = logged();
    for secret in [
        READ_TOKEN,
        REPORT_TOKEN,
        APPROVE_TOKEN,
        LEGACY_TOKEN,
        WEBHOOK_SECRET,
    ] {
        assert!(!logs.contains(secret), "{secret} logged");
    }
}

/// The identity an action's audit entry names.
async fn audit_actors(c: &mut Client, token: &str) -> Vec<(String, String)> {
    let r = c
        .get("/api/v1/audit", &[("authorization", &bearer(token))])
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_allowed_by_scope_and_recorded_under_the_callers_name() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", tmp.path().join("hub.db").display()));
    config.api_token = Some(Secret::new(LEGACY_TOKEN));
    config.auth = HubFile::parse(&tokens_yaml(), "hub.yaml").unwrap().1;
    let addr = serve(config, listener().await).await;
    let mut c = Client::new(addr);
    let json = ("content-type", "application/json");
    let freeze = |env: &str| format!(r#"{{"environment":"{env}","reason":"incident 7"}}"#).into_bytes();

    // The release bot (approve:stage) freezes and unfreezes stage; the audit log names it.
    let approve = bearer(APPROVE_TOKEN);
    let r = c
        .post(
            "/api/v1/freezes",
            &[("authorization", &approve), json],
            &freeze("stage"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["actor"], "release-bot");
    let r = c
        .post(
            "/api/v1/unfreezes",
            &[("authorization", &approve), json],
            br#"{"environment":"stage"}"#,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // A name in the body is no way to act as someone else: the body is refused.
    let r = c
        .post(
            "/api/v1/freezes",
            &[("authorization", &approve), json],
            br#"{"environment":"stage","reason":"x","actor":"ana@contoso.com"}"#,
        )
        .await
        .unwrap();
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `actor`"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // Not in prod (403, naming what it may do), not with a read or report token (403), not
    // without a token or with a wrong one (401); nothing is stored.
    let r = c
        .post(
            "/api/v1/freezes",
            &[("authorization", &approve), json],
            &freeze("prod"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    let message = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("release-bot")
            && message.contains("freeze or unfreeze prod")
            && message.contains("approve:stage"),
        "{message}"
    );
    for token in [READ_TOKEN, REPORT_TOKEN] {
        let r = c
            .post(
                "/api/v1/freezes",
                &[("authorization", &bearer(token)), json],
                &freeze("stage"),
            )
            .await
            .unwrap();
        assert_eq!(r.status, 403, "{token}");
    }
    let r = c
        .post("/api/v1/freezes", &[json], &freeze("stage"))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.json()["field"].clone()),
        (401, "Authorization".into())
    );
    let r = c
        .post(
            "/api/v1/freezes",
            &[("authorization", "Bearer wrong"), json],
            b"not json",
        )
        .await
        .unwrap();
    assert_eq!(r.status, 401, "credentials are checked before the body");
    // A promotion report needs the approver's scope for the environment too.
    let r = c
        .post(
            "/api/v1/promotions",
            &[("authorization", &bearer(READ_TOKEN)), json],
            format!(r#"{{"environment":"stage","commit":"{}"}}"#, "1".repeat(40)).as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    // The legacy token may do everything, under its own name.
    let r = c
        .post(
            "/api/v1/freezes",
            &[("authorization", &bearer(LEGACY_TOKEN)), json],
            &freeze("prod"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // The log, read with the read token: newest first, each under the caller's name.
    assert_eq!(
        audit_actors(&mut c, READ_TOKEN).await,
        [
            ("freeze".to_owned(), "api-token".to_owned()),
            ("unfreeze".to_owned(), "release-bot".to_owned()),
            ("freeze".to_owned(), "release-bot".to_owned()),
        ]
    );
    let r = c
        .get("/api/v1/audit", &[("authorization", &bearer(REPORT_TOKEN))])
        .await
        .unwrap();
    assert_eq!(r.status, 403);
    for secret in [APPROVE_TOKEN, READ_TOKEN, LEGACY_TOKEN] {
        assert!(!logged().contains(secret), "{secret} logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_with_only_the_api_token_works_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", tmp.path().join("hub.db").display()));
    config.api_token = Some(Secret::new(LEGACY_TOKEN));
    let addr = serve(config, listener().await).await;
    let mut c = Client::new(addr);
    // Reports need nothing without a webhook secret, as before.
    let r = c
        .post("/api/v1/compliance", &[], &compliance("c-1"))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/api/v1/clusters", &[]).await.unwrap().status, 401);
    let legacy = bearer(LEGACY_TOKEN);
    assert_eq!(
        c.get("/api/v1/clusters", &[("authorization", &legacy)])
            .await
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        c.get("/", &[("authorization", &legacy)]).await.unwrap().status,
        200
    );
    // The page has no sign-in link (the hub has no OIDC) and no token.
    let page = String::from_utf8(c.get("/", &[("authorization", &legacy)]).await.unwrap().body).unwrap();
    assert!(
        !page.contains("Sign in") && !page.contains(LEGACY_TOKEN),
        "{page}"
    );
}

// ---------------------------------------------------------------------------------------
// People, with the provider and a browser

fn oidc_yaml(issuer: &str, redirect: &str) -> String {
    format!(
        "oidc:\n  issuer: {issuer}\n  clientId: {CLIENT_ID}\n  clientSecretFile: client-secret\n  redirectUrl: {redirect}\n  scopes: [openid, email, groups]\nroles:\n  viewer: [group:developers]\n  approver:\n    stage: [group:platform-leads]\n  admin: [group:platform-admins]\n{}",
        tokens_yaml()
    )
}

/// Waits until the page's title is `title` (a click's navigation finishes in its own time).
async fn wait_for_title(b: &Browser, title: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = b.title().await;
        if now == title {
            return;
        }
        assert!(Instant::now() < deadline, "the page is {now:?}, not {title:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Signs in at the provider's development login form as `login`, accepting the consent.
async fn sign_in_at_provider(b: &Browser, login: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let url = b.client.current_url().await.unwrap();
        let here = url.as_str().to_owned();
        if let Ok(field) = b.client.find(Locator::Css("input[name=login]")).await {
            field.send_keys(login).await.unwrap();
            b.client
                .find(Locator::Css("input[name=password]"))
                .await
                .unwrap()
                .send_keys("any")
                .await
                .unwrap();
            b.client
                .find(Locator::Css("button[type=submit]"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
        } else if let Ok(button) = b.client.find(Locator::Css("form button[type=submit]")).await
            && here.contains("/interaction/")
        {
            button.click().await.unwrap();
        } else if !here.contains("/interaction/") && !here.contains("/auth?") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the provider's pages did not lead back: {here}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_with_the_provider_and_get_their_roles() {
    logs();
    let tmp = tempfile::tempdir().unwrap();
    let hub_listener = listener().await;
    let base = format!("http://{}", hub_listener.local_addr().unwrap());
    let redirect = format!("{base}/auth/callback");
    let Some(provider) = OidcProvider::start(&redirect, "the hub's sign-in tests") else {
        return;
    };
    let config_file = tmp.path().join("hub.yaml");
    std::fs::write(&config_file, oidc_yaml(&provider.issuer, &redirect)).unwrap();
    std::fs::write(tmp.path().join("client-secret"), CLIENT_SECRET).unwrap();
    let (_, auth) = kalypso_hub::config::load(&config_file).unwrap();
    let mut config = HubConfig::new(format!("sqlite://{}", tmp.path().join("hub.db").display()));
    config.api_token = Some(Secret::new(LEGACY_TOKEN));
    let secret_file = auth.oidc.as_ref().unwrap().client_secret_file.clone().unwrap();
    config.oidc_client_secret = Some(Secret::new(std::fs::read_to_string(secret_file).unwrap()));
    config.auth = auth;
    config.dashboard = DashboardMode::Protected;
    let addr = serve(config, hub_listener).await;
    let mut c = Client::new(addr);
    let legacy = bearer(LEGACY_TOKEN);
    let r = c
        .post(
            "/api/v1/compliance",
            &[("authorization", &legacy)],
            &compliance("drone-1"),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200);

    // Without a session, pages redirect to the sign-in; the event stream and the API say 401.
    let r = c.get("/promotions?page=1", &[]).await.unwrap();
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/auth/sign-in?next=%2Fpromotions%3Fpage%3D1"))
    );
    assert_eq!(c.get("/events", &[]).await.unwrap().status, 401);
    assert_eq!(c.get("/api/v1/clusters", &[]).await.unwrap().status, 401);
    // The sign-in goes to the provider with PKCE, a state and a nonce, in a signed cookie.
    let r = c.get("/auth/sign-in?next=/promotions", &[]).await.unwrap();
    assert_eq!(r.status, 303);
    let location = r.header("location").unwrap();
    assert!(
        location.starts_with(&format!("{}/auth?", provider.issuer)),
        "{location}"
    );
    for part in [
        "code_challenge_method=S256",
        "code_challenge=",
        "state=",
        "nonce=",
        "scope=openid+email+groups",
    ] {
        assert!(location.contains(part), "{part}: {location}");
    }
    let cookie = r.header("set-cookie").unwrap();
    assert!(
        cookie.starts_with("kalypso_sign_in=")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    // A callback without that cookie, or with another state, is refused.
    assert_eq!(
        c.get("/auth/callback?code=x&state=y", &[]).await.unwrap().status,
        400
    );

    let Some(b) = Browser::start(&base, "the hub's sign-in tests").await else {
        return;
    };

    // Ana (platform-admins) signs in, lands on the page she asked for, sees who she is.
    b.goto("/promotions").await;
    sign_in_at_provider(&b, "ana").await;
    wait_for_title(&b, "Promotions · Kalypso fleet").await;
    let account = b.text("header .account").await;
    assert!(
        account.contains("Signed in as ana@contoso.com") && account.contains("admin"),
        "{account}"
    );
    b.screenshot("hub-signed-in-admin").await;
    // The session cookie is HttpOnly: the page's script cannot read it.
    assert_eq!(
        b.js("return document.cookie.indexOf('kalypso_session')").await,
        -1
    );
    // The API answers her session too.
    let status = b
        .js("return fetch('/api/v1/clusters').then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 200);
    // Her admin action works through its form (with the CSRF token)...
    b.client
        .find(Locator::Css("header .account form.account-action button"))
        .await
        .expect("the admin's Refresh now button")
        .click()
        .await
        .unwrap();
    wait_for_title(&b, "Fleet map · Kalypso fleet").await;
    // ...and not without the token, nor with another one.
    for body in ["", "csrf=forged"] {
        let script = format!(
            "return fetch('/actions/refresh', {{method: 'POST', headers: {{'content-type': 'application/x-www-form-urlencoded'}}, body: '{body}', redirect: 'manual'}}).then(function (r) {{ return r.status; }})"
        );
        assert_eq!(b.js(&script).await, 403, "{body:?}");
    }
    // She signs out: the page says so, and her old session no longer reads anything.
    b.client
        .find(Locator::Css("header .account form.sign-out button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_title(&b, "Signed out · Kalypso fleet").await;
    let status = b
        .js("return fetch('/api/v1/clusters').then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 401);
    b.screenshot("hub-signed-out").await;

    // Vic (developers) is a viewer: the pages, but no admin button, and the admin action refused.
    b.client.delete_all_cookies().await.unwrap();
    b.goto("/").await;
    sign_in_at_provider(&b, "vic").await;
    wait_for_title(&b, "Fleet map · Kalypso fleet").await;
    let account = b.text("header .account").await;
    assert!(
        account.contains("Signed in as vic@contoso.com") && account.contains("viewer"),
        "{account}"
    );
    assert_eq!(
        b.js("return document.querySelectorAll('header .account form.account-action').length")
            .await,
        0
    );
    let script = "var csrf = document.querySelector('form.sign-out input[name=csrf]').value; \
                  return fetch('/actions/refresh', {method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'}, \
                  body: 'csrf=' + encodeURIComponent(csrf), redirect: 'manual'}).then(function (r) { return r.status; })";
    assert_eq!(b.js(script).await, 403, "a viewer refused the admin action");
    b.goto("/environments/dev/clusters/drone-1").await;
    assert_eq!(b.title().await, "Cluster drone-1 · Kalypso fleet");
    b.screenshot("hub-signed-in-viewer").await;

    // Someone in no role is told so, and gets no session.
    b.client.delete_all_cookies().await.unwrap();
    b.goto("/").await;
    sign_in_at_provider(&b, "mallory").await;
    wait_for_title(&b, "No access · Kalypso fleet").await;
    let status = b
        .js("return fetch('/api/v1/clusters').then(function (r) { return r.status; })")
        .await;
    assert_eq!(status, 401);
    b.close().await;

    let logs = logged();
    assert!(
        logs.contains("signed in") && logs.contains("ana@contoso.com"),
        "sign-ins are logged"
    );
    for secret in [CLIENT_SECRET, LEGACY_TOKEN, READ_TOKEN] {
        assert!(!logs.contains(secret), "{secret} logged");
    }
    drop(provider);
}
