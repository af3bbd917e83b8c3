//! The admin HTTP server: `/metrics`, `/healthz`, `/readyz` and the manual trigger.
//!
//! - `GET /metrics`: Prometheus (OpenMetrics) text, see [`crate::process::metrics`].
//! - `GET /healthz`: 200 while the process serves.
//! - `GET /readyz`: 503 until the guests' caches have synced and the leader election state is
//!   known, 200 after.
//! - `POST /reconcile/{guest}/{namespace}/{name}`: enqueue a request for `guest` (the seeds'
//!   manual trigger); `_` as the namespace means a cluster-scoped object (no namespace). 202 when
//!   enqueued, 404 for an unknown guest.
//! - `GET /guests`: every guest at a glance, as JSON ([`Manager::overview`]).
//! - `GET /diff/{guest}`: the guest's rollout (`spec.rollout`) as JSON: its phase, counts and
//!   first divergences, each with its diff (`krec diff`).
//! - `POST /rollout/{guest}/promote` and `…/abort`: decide the rollout by hand.
//! - `GET /status` (and `/`): the status page (plain HTML and a script, built in), reading
//!   `/guests`.
//! - `GET /record/{guest}?reconciles=N&seconds=S&secrets=include`: record the guest's
//!   reconciles as they happen, streamed as a recording's JSON lines until `N` reconciles (default
//!   1000) or `S` seconds (default 60) (`krec record`; see [`crate::rollout::recording`]).
//!
//! Bound to loopback (the default, `127.0.0.1:8080`) it needs no credentials. Bound beyond
//! loopback it refuses to start without a bearer token, and the trigger then requires
//! `Authorization: Bearer <token>`, as do everything that shows what guests read or wrote
//! (`/guests`, `/diff`, `/record`) and the rollout decisions. `/metrics`, `/healthz`, `/readyz`
//! and the status page's own files (which hold no data) stay open for probes and scrapers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use krec_net::connections::{self, Limits, Transport};

use crate::controller::Request;
use crate::guests::Manager;
use crate::rollout::Decision;
use krec_core::BadObjectName;

/// What the admin endpoints read.
#[derive(Default)]
pub struct AdminState {
    manager: RwLock<Option<Manager>>,
    ready: AtomicBool,
    token: Option<String>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("ready", &self.ready.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A running admin server.
#[derive(Debug)]
pub struct Admin {
    addr: SocketAddr,
    state: Arc<AdminState>,
    task: tokio::task::JoinHandle<()>,
    /// Dropped with the server: the accept loop stops.
    _stop: tokio::sync::watch::Sender<bool>,
}

/// Why the admin server could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Beyond loopback without a token.
    #[error(
        "--admin-addr {0} is reachable beyond loopback: give a bearer token with --admin-token or --admin-token-file"
    )]
    TokenRequired(SocketAddr),
    /// The address could not be bound.
    #[error("binding the admin server to {addr}: {source} (choose another with --admin-addr)")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Admin {
    /// Serve on `addr`; `token` guards the trigger (and is required beyond loopback).
    ///
    /// # Errors
    ///
    /// [`AdminError`].
    pub async fn start(addr: SocketAddr, token: Option<String>) -> Result<Self, AdminError> {
        let token = token.filter(|t| !t.is_empty());
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(AdminError::TokenRequired(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| AdminError::Bind { addr, source })?;
        let state = Arc::new(AdminState {
            token,
            ..Default::default()
        });
        let app = super::status::routes(axum::Router::new())
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .route("/reconcile/{guest}/{namespace}/{name}", post(trigger))
            .route("/guests", get(guests))
            .route("/diff/{guest}", get(diff))
            .route("/rollout/{guest}/{action}", post(rollout))
            .route("/record/{guest}", get(record))
            .with_state(state.clone());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(connections::serve(
            "admin server",
            listener,
            Transport::Plain,
            app,
            Limits::small(),
            stopped,
        ));
        Ok(Admin {
            addr,
            state,
            task,
            _stop: stop,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve `manager`'s metrics and trigger its guests.
    pub fn set_manager(&self, manager: Manager) {
        *self
            .state
            .manager
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(manager);
    }

    /// Whether `/readyz` answers 200.
    pub fn set_ready(&self, ready: bool) {
        self.state.ready.store(ready, Ordering::SeqCst);
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn manager(state: &AdminState) -> Option<Manager> {
    state
        .manager
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

async fn metrics(State(state): State<Arc<AdminState>>) -> Response {
    let body = match manager(&state) {
        Some(manager) => manager.scrape(),
        None => "# EOF\n".to_owned(),
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn readyz(State(state): State<Arc<AdminState>>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: caches syncing or leader election undecided",
        )
            .into_response()
    }
}

/// Compare without leaking where the first difference is through timing.
fn same_token(given: &str, expected: &str) -> bool {
    given.len() == expected.len()
        && given
            .bytes()
            .zip(expected.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is matched without
/// regard to case (RFC 7235).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
}

/// The refusal of a request without the bearer token the server requires, if it does.
fn unauthorized(state: &AdminState, headers: &HeaderMap) -> Option<Response> {
    let expected = state.token.as_ref()?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    (!given.is_some_and(|g| same_token(g, expected))).then(|| {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token is required\n",
        )
            .into_response()
    })
}

/// `guest`'s controller, or the 404 naming it.
fn controller_of(
    state: &AdminState,
    guest: &str,
) -> Result<Arc<crate::controller::Controller>, (StatusCode, String)> {
    manager(state)
        .and_then(|m| m.controller(guest))
        .ok_or_else(|| (StatusCode::NOT_FOUND, format!("no guest named {guest:?}\n")))
}

/// Every guest at a glance ([`Manager::overview`]) as JSON: what `krec top` and the status
/// page read.
async fn guests(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    // The last errors and rollout divergences name objects and what the guests wrote: as
    // guarded as the trigger.
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let Some(manager) = manager(&state) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "the guests are starting\n").into_response();
    };
    match serde_json::to_string(&manager.overview()) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response(),
    }
}

async fn diff(
    State(state): State<Arc<AdminState>>,
    Path(guest): Path<String>,
    headers: HeaderMap,
) -> Response {
    // Divergences show what the guest wrote: as guarded as the trigger.
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let controller = match controller_of(&state, &guest) {
        Ok(c) => c,
        Err(response) => return response.into_response(),
    };
    match controller.rollout_report() {
        Some(report) => (
            [(header::CONTENT_TYPE, "application/json")],
            format!("{report:#}\n"),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("guest {guest} has no rollout: its manifest has no spec.rollout\n"),
        )
            .into_response(),
    }
}

async fn rollout(
    State(state): State<Arc<AdminState>>,
    Path((guest, action)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let controller = match controller_of(&state, &guest) {
        Ok(c) => c,
        Err(response) => return response.into_response(),
    };
    let (decision, done) = match action.as_str() {
        "promote" => (Decision::Promote("promoted by hand".into()), "promoted"),
        "abort" => (Decision::RollBack("aborted by hand".into()), "aborted"),
        "retry" => {
            return match controller.retry_candidate() {
                Ok(()) => (StatusCode::OK, format!("{guest}: candidate tried again\n")),
                Err(why) => (StatusCode::CONFLICT, format!("{guest}: {why}\n")),
            }
            .into_response();
        }
        _ => {
            return (
                StatusCode::NOT_FOUND,
                format!("no rollout action {action:?}: promote, abort or retry\n"),
            )
                .into_response();
        }
    };
    if controller.decide(decision) {
        (StatusCode::OK, format!("{guest}: candidate {done}\n")).into_response()
    } else {
        (
            StatusCode::CONFLICT,
            format!(
                "{guest}: no candidate is being tried: {}\n",
                controller.no_rollout_reason()
            ),
        )
            .into_response()
    }
}

/// A `GET /record/{guest}` query refused.
#[derive(Debug, thiserror::Error)]
enum QueryError {
    /// `key=value` whose value is not a whole number.
    #[error("{0}: not a whole number")]
    NotANumber(String),
    /// A parameter that is none of the three.
    #[error("unknown parameter {0:?}: reconciles, seconds or secrets")]
    Unknown(String),
}

/// `GET /record/{guest}`'s query: `reconciles`, `seconds`, `secrets=include`.
#[derive(Default)]
struct RecordQuery {
    reconciles: Option<u64>,
    seconds: Option<u64>,
    secrets: Option<String>,
}

impl RecordQuery {
    fn parse(query: Option<&str>) -> Result<Self, QueryError> {
        let mut parsed = RecordQuery::default();
        for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let number = || {
                value
                    .parse::<u64>()
                    .map_err(|_| QueryError::NotANumber(format!("{key}={value}")))
            };
            match &*key {
                "reconciles" => parsed.reconciles = Some(number()?),
                "seconds" => parsed.seconds = Some(number()?),
                "secrets" => parsed.secrets = Some(value.into_owned()),
                other => return Err(QueryError::Unknown(other.to_owned())),
            }
        }
        Ok(parsed)
    }
}

async fn record(
    State(state): State<Arc<AdminState>>,
    Path(guest): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    use crate::rollout::recording::{Header, Line, Sink, Trailer};
    // A recording holds what the guest read: as guarded as the trigger.
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let controller = match controller_of(&state, &guest) {
        Ok(c) => c,
        Err(response) => return response.into_response(),
    };
    let query = match RecordQuery::parse(query.as_deref()) {
        Ok(query) => query,
        Err(problem) => return (StatusCode::BAD_REQUEST, format!("{problem}\n")).into_response(),
    };
    let include = query.secrets.as_deref() == Some("include");
    let limit = query.reconciles.unwrap_or(1000).max(1);
    let until = tokio::time::Instant::now()
        + std::time::Duration::from_secs(query.seconds.unwrap_or(60).clamp(1, 24 * 3600));
    let (sink, mut lines) = Sink::new(include);
    if !controller.recording().start(sink.clone()) {
        return (
            StatusCode::CONFLICT,
            format!("{guest}: a recording of it runs already\n"),
        )
            .into_response();
    }
    let version = controller.version();
    let header = serde_json::to_string(&Line::Header(Header::of(
        version.module.manifest(),
        version.module.digest(),
        include,
    )))
    .unwrap_or_default();
    tracing::info!(guest = %guest, "recording up to {limit} reconciles");
    let (tx, rx) = tokio::sync::mpsc::channel::<String>(64);
    // Held weakly: a guest removed meanwhile is not kept alive by its recording.
    let controller = Arc::downgrade(&controller);
    tokio::spawn(async move {
        let mut written = 0;
        let send = |line: String| {
            let tx = tx.clone();
            async move { tx.send(format!("{line}\n")).await.is_ok() }
        };
        let ended = if send(header).await {
            loop {
                if written >= limit {
                    break format!("{limit} reconciles recorded");
                }
                if controller.strong_count() == 0 {
                    break "the guest stopped".to_owned();
                }
                let next = tokio::select! {
                    next = tokio::time::timeout(
                        std::time::Duration::from_secs(1).min(until.saturating_duration_since(tokio::time::Instant::now())),
                        lines.recv(),
                    ) => next,
                    () = tx.closed() => break "the reader went away".to_owned(),
                };
                match next {
                    Ok(Some(line)) => {
                        if !send(line).await {
                            break "the reader went away".to_owned();
                        }
                        written += 1;
                    }
                    Ok(None) => break "the guest stopped".to_owned(),
                    Err(_) if tokio::time::Instant::now() >= until => {
                        break "time is up".to_owned();
                    }
                    Err(_) => {}
                }
            }
        } else {
            "the reader went away".to_owned()
        };
        if let Some(controller) = controller.upgrade() {
            controller.recording().stop();
        }
        let trailer = Line::End(Trailer {
            reconciles: written,
            dropped: sink.dropped(),
            ended,
        });
        if let Ok(line) = serde_json::to_string(&trailer) {
            let _ = send(line).await;
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|line| (Ok::<_, std::convert::Infallible>(line), rx))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

async fn trigger(
    State(state): State<Arc<AdminState>>,
    Path((guest, namespace, name)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = unauthorized(&state, &headers) {
        return refused;
    }
    let controller = match controller_of(&state, &guest) {
        Ok(c) => c,
        Err(response) => return response.into_response(),
    };
    let namespace = (namespace != "_").then_some(namespace);
    let request = match Request::checked(namespace.as_deref(), &name) {
        Ok(request) => request,
        Err(problem) => {
            let hint = if matches!(problem, BadObjectName::Namespace(_)) {
                " (use `_` for a cluster-scoped object)"
            } else {
                ""
            };
            return (StatusCode::BAD_REQUEST, format!("{problem}{hint}\n")).into_response();
        }
    };
    tracing::info!(guest = %guest, request = %request, "manual trigger");
    controller.trigger(request.clone());
    (
        StatusCode::ACCEPTED,
        format!("enqueued {request} for {guest}\n"),
    )
        .into_response()
}
