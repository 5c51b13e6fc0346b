//! The sign-in pages: `GET /auth/sign-in` (to the provider, with PKCE, state and nonce in a
//! signed cookie), `GET /auth/callback` (the code exchanged, the ID token validated, roles
//! looked up, the session cookie set), `POST /auth/sign-out` (with the CSRF token) and
//! `GET /auth/signed-out`; and the dashboard's one admin action of its own, `POST
//! /actions/refresh` (read the GitOps history now).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kalypso_dashboard::render;

use super::session::{SIGN_IN_COOKIE, SignIn, random_token};
use super::{Action, CALLBACK_PATH, SIGN_IN_PATH, SIGN_OUT_PATH, SIGNED_OUT_PATH, authorize_form, digest_eq};
use crate::http::HubState;

/// The dashboard's admin action: read the GitOps history now.
pub const REFRESH_PATH: &str = "/actions/refresh";

/// The routes.
pub fn router(state: HubState) -> Router {
    Router::new()
        .route(SIGN_IN_PATH, get(sign_in))
        .route(CALLBACK_PATH, get(callback))
        .route(SIGN_OUT_PATH, post(sign_out))
        .route(SIGNED_OUT_PATH, get(signed_out))
        .route(REFRESH_PATH, post(refresh))
        .with_state(state)
}

fn now_s() -> i64 {
    crate::http::now_ms() / 1000
}

fn query(raw: Option<&str>) -> BTreeMap<String, String> {
    raw.map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

/// `next` if it is a path of this hub (not `//host`, not a URL), else `/`.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.starts_with("/\\")
                && !path.contains(['\r', '\n']) =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

pub(crate) fn message(status: StatusCode, title: &str, text: &str, link: (&str, &str)) -> Response {
    kalypso_dashboard::page(status, render::message_page(title, text, link))
}

pub(crate) fn see_other(location: &str, cookies: &[HeaderValue]) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    for cookie in cookies {
        response.headers_mut().append(header::SET_COOKIE, cookie.clone());
    }
    response
}

async fn sign_in(State(state): State<HubState>, RawQuery(raw): RawQuery) -> Response {
    let auth = state.auth();
    let Some(oidc) = auth.oidc() else {
        return message(
            StatusCode::NOT_FOUND,
            "Sign-in is not set up",
            "This hub has no OpenID Connect provider configured (the oidc section of its configuration file).",
            ("/", "Go to the fleet map"),
        );
    };
    let next = safe_next(query(raw.as_deref()).get("next").map(String::as_str));
    let sign_in = SignIn {
        state: random_token(24),
        nonce: random_token(24),
        verifier: random_token(48),
        next,
        exp: now_s() + i64::try_from(super::session::SIGN_IN_TTL.as_secs()).unwrap_or(600),
    };
    match oidc
        .authorization_url(&sign_in.state, &sign_in.nonce, &sign_in.verifier)
        .await
    {
        Ok(url) => see_other(&url, &[auth.sessions().sign_in_cookie(&sign_in)]),
        Err(e) => {
            tracing::warn!(error = %e, "sign-in: the provider cannot be reached");
            message(
                StatusCode::BAD_GATEWAY,
                "Sign-in is unavailable",
                &format!("The sign-in provider cannot be used right now: {e}"),
                (SIGN_IN_PATH, "Try again"),
            )
        }
    }
}

async fn callback(State(state): State<HubState>, headers: HeaderMap, RawQuery(raw): RawQuery) -> Response {
    let auth = state.auth();
    let Some(oidc) = auth.oidc() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let params = query(raw.as_deref());
    let clear = auth.sessions().clear(SIGN_IN_COOKIE, "/auth");
    let retry = (SIGN_IN_PATH, "Sign in again");
    let refuse = |text: &str| {
        let mut r = message(StatusCode::BAD_REQUEST, "Sign-in failed", text, retry);
        r.headers_mut().append(header::SET_COOKIE, clear.clone());
        r
    };
    let Some(sign_in) = auth.sessions().sign_in(&headers, now_s()) else {
        return refuse(
            "This sign-in is unknown or took too long (it must be finished within ten minutes, in the browser that started it).",
        );
    };
    let given_state = params.get("state").map(String::as_str).unwrap_or_default();
    if !digest_eq(given_state.as_bytes(), sign_in.state.as_bytes()) {
        tracing::warn!("sign-in refused: the state does not match");
        return refuse("The answer of the provider does not belong to this sign-in (state).");
    }
    if let Some(iss) = params.get("iss")
        && iss.trim_end_matches('/') != oidc.issuer().trim_end_matches('/')
    {
        tracing::warn!(iss, "sign-in refused: the answer names another issuer");
        return refuse("The answer comes from another provider (iss).");
    }
    if let Some(error) = params.get("error") {
        let description = params.get("error_description").cloned().unwrap_or_default();
        tracing::info!(error, description, "sign-in refused by the provider");
        return refuse(&format!("The provider said: {error} {description}"));
    }
    let Some(code) = params.get("code") else {
        return refuse("The provider's answer has no code.");
    };
    let person = match oidc
        .finish(code, &sign_in.verifier, &sign_in.nonce, now_s())
        .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "sign-in failed");
            return refuse(&format!("Sign-in failed: {e}"));
        }
    };
    let grants = auth.roles_of(&person.identity, &person.subject, &person.groups);
    if !grants.allow(Action::Read) {
        tracing::info!(identity = %person.identity, "signed in without a role: refused");
        let mut r = message(
            StatusCode::FORBIDDEN,
            "No access",
            &format!(
                "You signed in as {}, but no role of this hub includes you. Ask its administrators to add you (or a group of yours) to a role.",
                person.identity
            ),
            retry,
        );
        r.headers_mut().append(header::SET_COOKIE, clear);
        return r;
    }
    let (session, cookie) = auth
        .sessions()
        .start(&person.identity, &person.groups, grants, now_s());
    tracing::info!(identity = %session.identity, roles = %session.grants.describe(true), "signed in");
    see_other(&sign_in.next, &[cookie, clear])
}

pub(crate) fn form(body: &[u8]) -> BTreeMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

async fn sign_out(State(state): State<HubState>, headers: HeaderMap, body: Bytes) -> Response {
    let auth = state.auth();
    let fields = form(&body);
    let Some(session) = auth.sessions().read(&headers, now_s()) else {
        return see_other(
            SIGNED_OUT_PATH,
            &[auth.sessions().clear(super::session::SESSION_COOKIE, "/")],
        );
    };
    let given = fields.get("csrf").map(String::as_str).unwrap_or_default();
    if !digest_eq(given.as_bytes(), session.csrf.as_bytes()) {
        return message(
            StatusCode::FORBIDDEN,
            "Not signed out",
            "The sign-out form is missing its CSRF token: reload the page and try again.",
            ("/", "Go to the fleet map"),
        );
    }
    tracing::info!(identity = %session.identity, "signed out");
    see_other(SIGNED_OUT_PATH, &[auth.sessions().end(&session)])
}

async fn signed_out() -> Response {
    message(
        StatusCode::OK,
        "Signed out",
        "You are signed out of the hub.",
        (SIGN_IN_PATH, "Sign in again"),
    )
}

async fn refresh(State(state): State<HubState>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = form(&body);
    let principal = match authorize_form(
        &state,
        &headers,
        Action::Admin,
        fields.get("csrf").map(String::as_str),
    ) {
        Ok(p) => p,
        Err(e) => {
            let status = e.status();
            return message(status, "Not allowed", e.message(), ("/", "Go to the fleet map"));
        }
    };
    tracing::info!(identity = %principal.identity, "GitOps history refresh asked for");
    state.refresher().refresh_now(Duration::from_secs(20)).await;
    see_other(&safe_next(fields.get("next").map(String::as_str)), &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_of_the_hub_are_followed_after_sign_in() {
        assert_eq!(safe_next(Some("/promotions?page=2")), "/promotions?page=2");
        for bad in ["https://evil", "//evil", "/\\evil", "evil", "/a\r\nSet-Cookie: x"] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
