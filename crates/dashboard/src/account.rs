//! Who is signed in, as the hub tells the dashboard: an [`Account`] put into the request's
//! extensions by whatever authenticates requests (the hub's sign-in), shown in every page's
//! header by [`fill`] — the identity, the roles, the actions the person may take (each a form
//! that posts the session's CSRF token) and sign-out, or a sign-in link. The dashboard itself
//! knows nothing of sessions or providers.

use axum::body::Body;
use axum::extract::Request;
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use maud::{Markup, html};

/// What the header shows about the person looking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Account {
    /// The person signed in, if any.
    pub signed_in: Option<SignedIn>,
    /// Where to sign in (shown when nobody is).
    pub sign_in_url: Option<String>,
    /// More pages the header links to: (label, path), e.g. the hub's release pages.
    pub links: Vec<(String, String)>,
}

/// A signed-in person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedIn {
    /// Their identity (e-mail or subject).
    pub identity: String,
    /// Their roles, in words.
    pub roles: String,
    /// The session's CSRF token, posted with every form.
    pub csrf: String,
    /// Where the sign-out form posts.
    pub sign_out_url: String,
    /// Buttons for what they may do.
    pub actions: Vec<AccountAction>,
}

/// A button of the header: a form posting the CSRF token to `url`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountAction {
    /// The button's label.
    pub label: String,
    /// Where it posts.
    pub url: String,
}

/// Middleware: fills the header's account slot of an HTML answer with the request's
/// [`Account`], when it has one.
pub async fn fill(request: Request, next: Next) -> Response {
    let account = request.extensions().get::<Account>().cloned();
    let response = next.run(request).await;
    let Some(account) = account else {
        return response;
    };
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if !is_html {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let text = String::from_utf8_lossy(&bytes);
    let filled = text.replacen(ACCOUNT_SLOT, &markup(&account).into_string(), 1);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(filled))
}

/// Where the header shows who is signed in: filled by the router with the request's
/// [`Account`], if any (a comment no escaped text can produce).
pub const ACCOUNT_SLOT: &str = "<!--kalypso:account-->";

/// Who is signed in, and how to sign in or out: shown in every page's header.
pub fn markup(account: &Account) -> Markup {
    html! {
        div.account {
            @for (label, url) in &account.links {
                a.header-link href=(url) { (label) }
            }
            @match &account.signed_in {
                Some(person) => {
                    span.who { "Signed in as " strong.identity { (person.identity) } " · " span.roles { (person.roles) } }
                    @for action in &person.actions {
                        form.account-action method="post" action=(action.url) {
                            input type="hidden" name="csrf" value=(person.csrf);
                            button type="submit" { (action.label) }
                        }
                    }
                    form.sign-out method="post" action=(person.sign_out_url) {
                        input type="hidden" name="csrf" value=(person.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                None => {
                    @if let Some(url) = &account.sign_in_url {
                        a.sign-in href=(url) { "Sign in" }
                    }
                }
            }
        }
    }
}
