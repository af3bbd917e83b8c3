//! The status page on the admin port: `GET /status` (and `/`), plain HTML with a little script
//! that reads `GET /guests` every two seconds — the guests, their state, figures and recent
//! errors, and rollouts with their divergences drawn as a diff.
//!
//! The page and its script hold no data, so they are served without the token; what they read
//! (`/guests`) is as guarded as the admin endpoints: when the server has a token, the page asks
//! for it (or takes it from the address' fragment, `/status#token=…`, which never reaches the
//! server) and sends it as `Authorization: Bearer`. The policy lets the page load only its own
//! script and style and talk only to this server; what guests wrote is set as text, never HTML.

use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

const PAGE: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("status.js");
const STYLE: &str = include_str!("status.css");

/// What the browser may do with the page: its own script and style, requests to this server.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                      img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The page's routes, for the admin server's router.
pub(super) fn routes<S: Clone + Send + Sync + 'static>(router: axum::Router<S>) -> axum::Router<S> {
    router
        .route("/", get(|| async { Redirect::to("/status") }))
        .route(
            "/status",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/status.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/status.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
}
