//! The admission server: its routes, the bounds on the reviews it runs at once, and the
//! HTTPS server that serves them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use krec_net::connections::{self, Limits, Transport};
use serde_json::{Value, json};

use super::review::{ReviewIn, admission_request, response};
use super::tls::TlsOptions;
use super::{
    MAX_CONCURRENT_REVIEWS, MAX_CONCURRENT_REVIEWS_PER_GUEST, MAX_CONCURRENT_REVIEWS_PER_TENANT,
    MAX_REVIEW_BYTES,
};
use crate::guest::{ReconcileError, Review};
use crate::guests::Manager;
use crate::process::metrics::{Metrics, WebhookLabel};

/// What the admission server needs: the running guests, where to count, and the bounds on
/// concurrent reviews.
#[derive(Clone)]
struct Served {
    manager: Manager,
    metrics: Arc<Metrics>,
    permits: Arc<tokio::sync::Semaphore>,
    /// Each guest's share, made when the guest is first asked for.
    shares: Arc<std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Semaphore>>>>,
    /// Each tenant's share, made when one of its guests is first asked for.
    tenant_shares: Arc<std::sync::Mutex<BTreeMap<Option<String>, Arc<tokio::sync::Semaphore>>>>,
}

/// A review's places: one of its guest's share, one of its tenant's, one of the host's.
type Slot = (
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
);

impl Served {
    /// Wait for a place in `guest`'s share, then in its tenant's, then in the host's, until
    /// `deadline`: `None` when it passes first (or the server stops).
    async fn slot(&self, guest: &str, deadline: tokio::time::Instant) -> Option<Slot> {
        let tenant = self
            .manager
            .reviewer(guest)
            .and_then(|r| r.module.manifest().tenant.clone());
        let tenant_share = self
            .tenant_shares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(tenant)
            .or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    MAX_CONCURRENT_REVIEWS_PER_TENANT,
                ))
            })
            .clone();
        let share = self
            .shares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(guest.to_owned())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Semaphore::new(
                    MAX_CONCURRENT_REVIEWS_PER_GUEST,
                ))
            })
            .clone();
        let all = async {
            let own = share.acquire_owned().await.ok()?;
            let tenant = tenant_share.acquire_owned().await.ok()?;
            let host = self.permits.clone().acquire_owned().await.ok()?;
            Some((own, tenant, host))
        };
        tokio::time::timeout_at(deadline, all).await.ok().flatten()
    }
}

/// Longest a review may take, body included: kube-apiserver's bound on a webhook's
/// `timeoutSeconds`, and what a review is given when its caller names no timeout.
pub const MAX_REVIEW_TIME: std::time::Duration = std::time::Duration::from_secs(30);

/// When the caller stops waiting for a review: the `timeout` kube-apiserver sends
/// (`?timeout=10s`, as client-go's `Request.Timeout` does for a webhook's `timeoutSeconds`),
/// at most [`MAX_REVIEW_TIME`] (also without one), from `received`.
fn deadline_of(query: Option<&str>, received: Instant) -> tokio::time::Instant {
    let asked = query.and_then(|query| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == "timeout")
            .and_then(|(_, value)| krec_core::duration::parse(&value).ok())
    });
    let timeout = asked.map_or(MAX_REVIEW_TIME, |t| t.min(MAX_REVIEW_TIME));
    tokio::time::Instant::from_std(received) + timeout
}

/// The request body, at most [`MAX_REVIEW_BYTES`], read by `deadline`; else the answer.
async fn read_review(
    body: axum::body::Body,
    deadline: tokio::time::Instant,
) -> Result<Bytes, Box<Response>> {
    match tokio::time::timeout_at(deadline, axum::body::to_bytes(body, MAX_REVIEW_BYTES)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(err)) => Err(Box::new(failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("reading the review: {err}"),
        ))),
        Err(_) => Err(Box::new(abandoned())),
    }
}

/// The answer to a review the API server has stopped waiting for (its timeout passed while
/// the review waited or ran): nobody reads it, but it is counted.
fn abandoned() -> Response {
    failure(
        StatusCode::GATEWAY_TIMEOUT,
        "the API server's timeout for this review passed: abandoned".into(),
    )
}

/// Decrements the in-flight gauge when the request ends, answered or abandoned.
struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The route of one kind of review: each request [`review`]ed as `kind`.
fn reviews(kind: Review) -> axum::routing::MethodRouter<Served> {
    axum::routing::post(
        move |state: State<Served>,
              guest: Path<String>,
              query: RawQuery,
              headers: axum::http::HeaderMap,
              body: Body| review(state, guest, query, kind, headers, body),
    )
}

/// The admission server's routes, answering for the guests `manager` runs.
pub fn router(manager: Manager) -> axum::Router {
    let metrics = manager.metrics().clone();
    axum::Router::new()
        .route("/validate/{guest}", reviews(Review::Validate))
        .route("/mutate/{guest}", reviews(Review::Mutate))
        .route("/convert/{guest}", axum::routing::post(convert))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(Served {
            manager,
            metrics,
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_REVIEWS)),
            shares: Arc::default(),
            tenant_shares: Arc::default(),
        })
}

/// A running admission server.
pub struct WebhookServer {
    addr: SocketAddr,
    tls: crate::admission::tls::WebhookTls,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookServer {
    /// Serve the guests of `manager` on `addr` (port 0: any free port) over TLS with a
    /// certificate for `localhost` and the address, signed by a CA of its own.
    ///
    /// # Errors
    ///
    /// When the address cannot be bound or the certificates cannot be made.
    pub async fn start(manager: Manager, addr: SocketAddr) -> anyhow::Result<Self> {
        Self::start_with(manager, addr, &TlsOptions::default(), None).await
    }

    /// [`start`](Self::start), the certificate as `tls` says (files, or a CA kept in a Secret
    /// through `api`), renewed while serving.
    ///
    /// # Errors
    ///
    /// When the address cannot be bound or the certificate cannot be had.
    pub async fn start_with(
        manager: Manager,
        addr: SocketAddr,
        tls: &TlsOptions,
        api: Option<&Arc<crate::cluster::client::ApiClient>>,
    ) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("binding the webhook server to {addr}: {e}"))?;
        let addr = listener.local_addr()?;
        let service = tls
            .service
            .as_ref()
            .map(|(ns, name)| (ns.as_str(), name.as_str()));
        let names = crate::admission::tls::names(&addr, service);
        let tls =
            crate::admission::tls::WebhookTls::start(&tls.source, names, tls.validity, api).await?;
        manager
            .metrics()
            .watch_certificate(addr.to_string(), &tls.cert);
        let server_config = krec_net::tls::server_config_serving(tls.cert.clone())?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let app = router(manager);
        let task = tokio::spawn(connections::serve(
            "admission server",
            listener,
            Transport::Tls(server_config),
            app,
            Limits::for_this_process(),
            stopped,
        ));
        Ok(WebhookServer {
            addr,
            tls,
            stop,
            task,
        })
    }

    /// The certificate it presents now (renewed while it serves).
    pub fn serving_cert(&self) -> &Arc<krec_net::tls::ServingCert> {
        &self.tls.cert
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The CA certificate (PEM) its serving certificate is signed by: a configuration's
    /// `caBundle` (with certificate files and no CA file: the certificate chain they hold).
    pub fn ca_pem(&self) -> &str {
        &self.tls.ca_pem
    }

    /// `https://ADDR`: the base of the webhooks' URLs.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Stop serving.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// A plain-text HTTP error (the API server reports it and applies `failurePolicy`).
fn failure(code: StatusCode, message: String) -> Response {
    (code, [(header::CONTENT_TYPE, "text/plain")], message).into_response()
}

fn json_response(body: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// One `AdmissionReview`, counted and timed as controller-runtime counts its webhooks.
async fn review(
    State(served): State<Served>,
    Path(guest): Path<String>,
    RawQuery(query): RawQuery,
    which: Review,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    // Series only for guests that run: a request for any other name must not grow the
    // metrics without bound.
    if served.manager.reviewer(&guest).is_none() {
        return failure(
            StatusCode::NOT_FOUND,
            format!("no guest {guest:?} runs on this host"),
        );
    }
    let label = WebhookLabel {
        webhook: format!("/{}/{guest}", which.as_str()),
    };
    let gauge = served
        .metrics
        .webhook_in_flight
        .get_or_create(&label)
        .clone();
    gauge.inc();
    let _in_flight = InFlight(gauge);
    let started = Instant::now();
    let deadline = deadline_of(query.as_deref(), started);
    let answered = async {
        let body = match read_review(body, deadline).await {
            Ok(body) => body,
            Err(refused) => return *refused,
        };
        match served.slot(&guest, deadline).await {
            Some(_slot) => answer(&served, &guest, which, &body).await,
            None => abandoned(),
        }
    };
    // Traces on: one trace per review, a child of the API server's span when its request
    // names one (`traceparent`).
    let trace = crate::telemetry::installed().map(|telemetry| {
        let parent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .and_then(crate::telemetry::parse_traceparent);
        crate::telemetry::Trace::start_in(telemetry, parent)
    });
    let traced_from = std::time::Instant::now();
    let answered = crate::telemetry::in_trace(trace.clone(), answered);
    let response = tokio::time::timeout_at(deadline, answered)
        .await
        .unwrap_or_else(|_| abandoned());
    if let Some(trace) = trace {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::{SpanKind, Status};
        let code = response.status().as_u16();
        let status = if code >= 500 {
            Status::error(format!("answered {code}"))
        } else {
            Status::Unset
        };
        let attributes = vec![
            KeyValue::new("krec.guest", guest.clone()),
            KeyValue::new("webhook", label.webhook.clone()),
            KeyValue::new("http.response.status_code", i64::from(code)),
        ];
        let name = format!("admission {}", which.as_str());
        trace.finish(name, SpanKind::Server, traced_from, attributes, status);
    }
    served
        .metrics
        .webhook_latency
        .get_or_create(&label)
        .observe(started.elapsed().as_secs_f64());
    served
        .metrics
        .count_webhook_request(&guest, &label.webhook, response.status().as_u16());
    response
}

async fn answer(served: &Served, guest: &str, which: Review, body: &[u8]) -> Response {
    let Some(version) = served.manager.reviewer(guest) else {
        return failure(
            StatusCode::NOT_FOUND,
            format!("no guest {guest:?} runs on this host"),
        );
    };
    // One pass over the body: the objects stay slices of it, handed to the guest as text.
    let review: ReviewIn<'_> = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(err) => {
            return failure(
                StatusCode::BAD_REQUEST,
                format!("the body is not an AdmissionReview: {err}"),
            );
        }
    };
    let api_version = review
        .api_version
        .as_deref()
        .unwrap_or("admission.k8s.io/v1")
        .to_owned();
    let (request, object) = match admission_request(review, which) {
        Ok(request) => request,
        Err(problem) => return failure(StatusCode::BAD_REQUEST, problem.to_string()),
    };
    let uid = request.uid.clone();
    let trace = crate::telemetry::current();
    if let Some(trace) = &trace {
        trace.root_attribute("k8s.resource.kind", request.kind.kind.clone());
        trace.root_attribute("k8s.resource.group", request.kind.group.clone());
        use crate::guest::bindings::guest::WitOperation as Operation;
        let operation = match request.operation {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        };
        trace.root_attribute("k8s.operation", operation);
        if let Some(namespace) = &request.namespace {
            trace.root_attribute("namespace", namespace.clone());
        }
        if let Some(name) = &request.name {
            trace.root_attribute("name", name.clone());
        }
    }
    let entered = std::time::Instant::now();
    let verdict = version
        .module
        .admit(
            &version.cluster,
            Some(served.metrics.clone()),
            which,
            request,
        )
        .await;
    if let Some(trace) = &trace {
        use opentelemetry::trace::Status;
        let status = match &verdict {
            Ok(verdict) => {
                trace.root_attribute("krec.allowed", verdict.allowed);
                Status::Unset
            }
            Err(err) => Status::error(err.to_string()),
        };
        let attributes = vec![opentelemetry::KeyValue::new("krec.guest", guest.to_owned())];
        trace.guest(entered, std::time::Instant::now(), attributes, status);
    }
    match verdict {
        Ok(verdict) => match response(&uid, which, object, verdict) {
            Ok(response) => {
                let verdict = match (response["allowed"].as_bool(), response.get("patch")) {
                    (Some(true), Some(_)) => "patched",
                    (Some(true), None) => "allowed",
                    _ => "denied",
                };
                served
                    .metrics
                    .count_verdict(&format!("/{}/{guest}", which.as_str()), verdict);
                json_response(&json!({
                    "apiVersion": api_version,
                    "kind": "AdmissionReview",
                    "response": response,
                }))
            }
            Err(problem) => {
                tracing::warn!(%guest, "{} answered an unusable verdict: {problem}", which.as_str());
                failure(StatusCode::INTERNAL_SERVER_ERROR, problem.to_string())
            }
        },
        Err(err) => trapped(served, guest, &err),
    }
}

/// A trap or timeout: logged, counted with the guest's other traps, answered as a 500.
fn trapped(served: &Served, guest: &str, err: &ReconcileError) -> Response {
    tracing::warn!(%guest, "admission review failed: {err}");
    if let ReconcileError::Trap { cause, .. } = err {
        served.metrics.count_trap(guest, cause.as_str());
    }
    failure(StatusCode::INTERNAL_SERVER_ERROR, err.to_string())
}

/// One `ConversionReview` (a CRD's `conversion.strategy: Webhook`).
async fn convert(
    State(served): State<Served>,
    Path(guest): Path<String>,
    RawQuery(query): RawQuery,
    body: Body,
) -> Response {
    let deadline = deadline_of(query.as_deref(), Instant::now());
    let converted = async {
        let body = match read_review(body, deadline).await {
            Ok(body) => body,
            Err(refused) => return *refused,
        };
        convert_review(&served, &guest, deadline, &body).await
    };
    tokio::time::timeout_at(deadline, converted)
        .await
        .unwrap_or_else(|_| abandoned())
}

/// [`convert`]'s answer.
async fn convert_review(
    served: &Served,
    guest: &str,
    deadline: tokio::time::Instant,
    body: &[u8],
) -> Response {
    let Some(version) = served.manager.reviewer(guest) else {
        return failure(
            StatusCode::NOT_FOUND,
            format!("no guest {guest:?} runs on this host"),
        );
    };
    let review: Value = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(err) => {
            return failure(
                StatusCode::BAD_REQUEST,
                format!("the body is not a ConversionReview: {err}"),
            );
        }
    };
    let request = &review["request"];
    let uid = request["uid"].clone();
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let objects: Vec<String> = request["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(Value::to_string)
        .collect();
    let Some(_slot) = served.slot(guest, deadline).await else {
        return abandoned();
    };
    let converted = version
        .module
        .convert(
            &version.cluster,
            Some(served.metrics.clone()),
            objects,
            desired,
        )
        .await;
    let result = match converted {
        Ok(Ok(objects)) => {
            let parsed: Result<Vec<Value>, _> =
                objects.iter().map(|o| serde_json::from_str(o)).collect();
            match parsed {
                Ok(objects) => json!({"uid": uid, "convertedObjects": objects,
                    "result": {"status": "Success"}}),
                Err(err) => json!({"uid": uid, "convertedObjects": [],
                    "result": {"status": "Failure", "message": format!("a converted object is not JSON: {err}")}}),
            }
        }
        Ok(Err(refused)) => json!({"uid": uid, "convertedObjects": [],
            "result": {"status": "Failure", "message": refused.0}}),
        Err(err) => return trapped(served, guest, &err),
    };
    json_response(
        &json!({"apiVersion": review["apiVersion"].as_str().unwrap_or("apiextensions.k8s.io/v1"),
        "kind": "ConversionReview", "response": result}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reviews_deadline_should_be_the_callers_timeout_at_most_thirty_seconds() {
        let now = Instant::now();
        let at =
            |query: Option<&str>| deadline_of(query, now) - tokio::time::Instant::from_std(now);
        assert_eq!(at(Some("timeout=10s")), std::time::Duration::from_secs(10));
        assert_eq!(at(None), MAX_REVIEW_TIME);
        assert_eq!(at(Some("timeout=nonsense")), MAX_REVIEW_TIME);
        // Far past any clock: capped, not an overflow.
        assert_eq!(at(Some("timeout=2562047788015216h")), MAX_REVIEW_TIME);
    }
}
