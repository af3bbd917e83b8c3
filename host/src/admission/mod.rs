//! The admission server: guests' `validate`, `mutate` and `convert` exports served over HTTPS as
//! controller-runtime's webhook server serves Go handlers — `POST /validate/{guest}` and
//! `POST /mutate/{guest}` answer `admission.k8s.io/v1` `AdmissionReview`s, `POST
//! /convert/{guest}` answers `apiextensions.k8s.io/v1` `ConversionReview`s — and the webhook
//! configurations that register them with an API server.
//!
//! Each review runs the guest's current version (a hot swap changes verdicts at once) in a fresh
//! instance under its manifest's limits; a trap or a timeout is answered as an HTTP 500, so the
//! API server applies the webhook's `failurePolicy`, and is logged and counted. A mutating
//! guest returns the object as it should be; the host answers the JSON patch to it.

pub mod tls;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use krec_net::connections::{self, Limits, Transport};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::guest::bindings::WitGvk;
use crate::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo, WitVerdict};
use crate::guest::{ReconcileError, Review};
use crate::guests::Manager;
use crate::manifest::{Manifest, WebhookType};
use crate::process::metrics::{Metrics, WebhookLabel};

/// Largest review body accepted (kube-apiserver's request limit).
const MAX_REVIEW_BYTES: usize = 3 << 20;

/// Reviews run at once, at most (each in an instance of its own, with its guest's memory
/// limit): more wait, so a flood of requests cannot make the host allocate without bound.
pub const MAX_CONCURRENT_REVIEWS: usize = 32;

/// Reviews of one guest run at once, at most: its share of [`MAX_CONCURRENT_REVIEWS`]. A guest
/// whose reviews are slow (or a flood of requests for one guest) waits within its share, and
/// the other guests' reviews go on.
pub const MAX_CONCURRENT_REVIEWS_PER_GUEST: usize = crate::manifest::KEPT_REVIEW_INSTANCES as usize;

/// Reviews of one tenant's guests (a namespace's `Reconciler`s; the files and
/// `ClusterReconciler`s are one more tenant) run at once, at most: more than one guest's share,
/// well under the host's, so neither one guest nor one tenant's storm of slow reviews leaves
/// another tenant's guests without a place before their callers' timeouts.
pub const MAX_CONCURRENT_REVIEWS_PER_TENANT: usize = 12;

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
            .controller(guest)
            .and_then(|c| c.module().manifest().tenant.clone());
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

/// The admission server's routes, answering for the guests `manager` runs.
pub fn router(manager: Manager) -> axum::Router {
    let metrics = manager.metrics().clone();
    axum::Router::new()
        .route(
            "/validate/{guest}",
            axum::routing::post(
                |state: State<Served>, guest: Path<String>, query: RawQuery, body: Body| async move {
                    review(state, guest, query, Review::Validate, body).await
                },
            ),
        )
        .route(
            "/mutate/{guest}",
            axum::routing::post(
                |state: State<Served>, guest: Path<String>, query: RawQuery, body: Body| async move {
                    review(state, guest, query, Review::Mutate, body).await
                },
            ),
        )
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

pub use crate::admission::tls::{CertSource, TlsFiles, TlsOptions};

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

/// How the API server reaches the admission server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// At a URL, `https://host:port` (`krec dev`, or a host outside the cluster).
    Url(String),
    /// Through a Service in the cluster (the host deployed with `deploy/`).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service's port.
        port: u16,
    },
}

/// A Service reference that is not `NAMESPACE/NAME[:PORT]`.
#[derive(Debug, thiserror::Error)]
#[error("{text:?}: {problem}")]
pub struct BadService {
    /// The text given.
    pub text: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Reach {
    /// The Service `NAMESPACE/NAME[:PORT]` (port 443 unless given).
    ///
    /// # Errors
    ///
    /// Text that is not of that form, naming it.
    pub fn service(text: &str) -> Result<Reach, BadService> {
        let bad = |problem: String| BadService {
            text: text.to_owned(),
            problem,
        };
        let (namespace, rest) = text
            .split_once('/')
            .ok_or_else(|| bad("not NAMESPACE/NAME[:PORT]".into()))?;
        let (name, port) = match rest.split_once(':') {
            Some((name, port)) => (
                name,
                port.parse()
                    .map_err(|_| bad(format!("bad port {port:?}")))?,
            ),
            None => (rest, 443),
        };
        if namespace.is_empty() || name.is_empty() {
            return Err(bad("not NAMESPACE/NAME[:PORT]".into()));
        }
        Ok(Reach::Service {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            port,
        })
    }

    /// The namespace of the Service the API server sends reviews through, if it does.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Reach::Url(_) => None,
            Reach::Service { namespace, .. } => Some(namespace),
        }
    }

    /// The `clientConfig` of a webhook at `path` (e.g. `/validate/foo-validator`), trusting
    /// the PEM `ca_pem`.
    pub fn client_config(&self, path: &str, ca_pem: &str) -> Value {
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
        match self {
            Reach::Url(base) => json!({"url": format!("{base}{path}"), "caBundle": bundle}),
            Reach::Service {
                namespace,
                name,
                port,
            } => json!({"service": {"namespace": namespace, "name": name, "port": port,
                "path": path}, "caBundle": bundle}),
        }
    }
}

/// The `spec.conversion` of the CRD `manifest`'s guest converts (named by
/// `spec.conversion.crd`), sending its reviews to the guest's `convert` export: `(CRD name,
/// conversion)`.
pub fn conversion(manifest: &Manifest, reach: &Reach, ca_pem: &str) -> Option<(String, Value)> {
    let spec = manifest.spec.conversion.as_ref()?;
    let client_config = reach.client_config(&format!("/convert/{}", manifest.name), ca_pem);
    Some((
        spec.crd.clone(),
        json!({"strategy": "Webhook", "webhook": {"clientConfig": client_config,
            "conversionReviewVersions": ["v1"]}}),
    ))
}

/// The field manager of the registrations the host makes: server-side apply under it takes
/// the fields it sets and leaves everyone else's (a CRD's own `spec` stays `kubectl apply`'s).
pub const FIELD_MANAGER: &str = "krec";

/// Point the CRD `crd` at a conversion webhook (`conversion`, from [`conversion`]), or back to
/// `strategy: None` when `conversion` is `None`: a server-side apply of `spec.conversion` alone
/// as [`FIELD_MANAGER`], forced (the defaulted `strategy: None` belongs to whoever created the
/// CRD).
///
/// # Errors
///
/// The API server's refusal; `NotFound` when there is no such CRD (nothing is created).
pub async fn set_conversion(
    api: &crate::cluster::client::ApiClient,
    crd: &str,
    conversion: Option<Value>,
) -> Result<(), krec_core::CallError> {
    set_conversion_with(api, crd, conversion, None).await
}

/// [`set_conversion`], the CRD annotated `cert-manager.io/inject-ca-from: inject_ca_from` when
/// given (cert-manager's CA injector fills the conversion's `caBundle`).
///
/// # Errors
///
/// As [`set_conversion`].
pub async fn set_conversion_with(
    api: &crate::cluster::client::ApiClient,
    crd: &str,
    conversion: Option<Value>,
    inject_ca_from: Option<&str>,
) -> Result<(), krec_core::CallError> {
    let gvk =
        krec_core::Gvk::from_api_version("apiextensions.k8s.io/v1", "CustomResourceDefinition");
    // An apply would create a CRD that is not there (and fail on its missing spec).
    api.get(&gvk, None, crd).await?;
    let Some(conversion) = conversion else {
        // Back to no conversion: the webhook removed outright (a merge patch), whoever else
        // has ever touched it — a `webhook` left beside `strategy: None` is invalid.
        return api
            .patch(
                &gvk,
                None,
                crd,
                krec_core::PatchType::Merge,
                &json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}}),
                false,
                FIELD_MANAGER,
            )
            .await
            .map(drop);
    };
    let annotated = inject_ca_from.is_some();
    let mut body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd}, "spec": {"conversion": conversion}});
    if let (true, Some(from)) = (annotated, inject_ca_from) {
        body["metadata"]["annotations"] = json!({INJECT_CA_FROM: from});
    }
    api.patch(
        &gvk,
        None,
        crd,
        krec_core::PatchType::Apply,
        &body,
        false,
        FIELD_MANAGER,
    )
    .await
    .map(drop)
}

/// cert-manager's annotation asking its CA injector to fill an object's `caBundle`s with the CA
/// of the named Certificate (`namespace/name`).
pub const INJECT_CA_FROM: &str = "cert-manager.io/inject-ca-from";

/// `registration` (a webhook configuration, or a CRD conversion) left to cert-manager: no
/// `caBundle` of its own (the injector's stays), and for a configuration the annotation naming
/// the Certificate.
pub fn inject_ca_from(registration: &mut Value, certificate: &str) {
    if let Some(webhooks) = registration["webhooks"].as_array_mut() {
        for webhook in webhooks {
            if let Some(config) = webhook["clientConfig"].as_object_mut() {
                config.remove("caBundle");
            }
        }
        registration["metadata"]["annotations"] = json!({INJECT_CA_FROM: certificate});
    }
    if let Some(config) = registration
        .pointer_mut("/webhook/clientConfig")
        .and_then(Value::as_object_mut)
    {
        config.remove("caBundle");
    }
}

/// The namespaces every webhook registered by krec leaves out unless its manifest's
/// `namespaceSelector` names them: the control plane's, so that a webhook that cannot answer
/// (its host stopped, its module broken) with `failurePolicy: Fail` never stops the cluster
/// from running its own Pods and Leases — Kubernetes' own advice for webhooks.
pub const CONTROL_PLANE_NAMESPACES: [&str; 2] = ["kube-system", "kube-node-lease"];

/// The label every namespace carries with its own name (kube-apiserver sets it).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespaces krec's webhooks leave out: the control plane's and the host's own
/// (`host_namespace`, where its Pods run: a webhook must not stop its own host from starting).
pub fn protected_namespaces(host_namespace: Option<&str>) -> Vec<String> {
    let mut protected: Vec<String> = CONTROL_PLANE_NAMESPACES
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    if let Some(ns) = host_namespace
        && !protected.iter().any(|p| p == ns)
    {
        protected.push(ns.to_owned());
    }
    protected
}

/// The `namespaceSelector` of a webhook whose manifest gives `given` (or none): `given`, with
/// the `protected` namespaces it does not name explicitly (by their
/// `kubernetes.io/metadata.name` label, in `matchLabels` or an `In` expression) left out.
fn namespace_selector(given: Option<&Value>, protected: &[String]) -> Option<Value> {
    let mut named: Vec<&str> = Vec::new();
    if let Some(given) = given {
        if let Some(name) = given["matchLabels"][NAMESPACE_NAME_LABEL].as_str() {
            named.push(name);
        }
        for expression in given["matchExpressions"].as_array().into_iter().flatten() {
            if expression["key"] == NAMESPACE_NAME_LABEL && expression["operator"] == "In" {
                named.extend(
                    expression["values"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str),
                );
            }
        }
    }
    let excluded: Vec<&String> = protected
        .iter()
        .filter(|p| !named.contains(&p.as_str()))
        .collect();
    if excluded.is_empty() {
        return given.cloned();
    }
    let mut selector = given.cloned().unwrap_or_else(|| json!({}));
    let exclusion = json!({"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": excluded});
    match selector["matchExpressions"].as_array_mut() {
        Some(expressions) => expressions.push(exclusion),
        None => selector["matchExpressions"] = json!([exclusion]),
    }
    Some(selector)
}

/// The `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration` (`krec-{guest}`) that
/// register `manifest`'s webhooks where `reach` says, trusting `ca_pem`, leaving the
/// `protected` namespaces out (see [`protected_namespaces`]).
pub fn configurations(
    manifest: &Manifest,
    reach: &Reach,
    ca_pem: &str,
    protected: &[String],
) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, config_kind) in [
        (WebhookType::Mutating, "MutatingWebhookConfiguration"),
        (WebhookType::Validating, "ValidatingWebhookConfiguration"),
    ] {
        let hooks: Vec<Value> = manifest
            .spec
            .webhooks
            .iter()
            .filter(|h| h.kind == kind)
            .map(|hook| {
                let mut webhook = json!({
                    "name": hook.name_for(&manifest.name),
                    "clientConfig": reach.client_config(
                        &format!("/{}/{}", kind.export(), manifest.name),
                        ca_pem,
                    ),
                    "rules": hook.rules,
                    "failurePolicy": hook.failure_policy.as_deref().unwrap_or("Fail"),
                    "sideEffects": hook.side_effects.as_deref().unwrap_or("None"),
                    "timeoutSeconds": hook.timeout_seconds.unwrap_or(10),
                    "admissionReviewVersions": ["v1"],
                    "matchPolicy": hook.match_policy.as_deref().unwrap_or("Equivalent"),
                });
                if let Some(selector) =
                    namespace_selector(hook.namespace_selector.as_ref(), protected)
                {
                    webhook["namespaceSelector"] = selector;
                }
                if let Some(selector) = &hook.object_selector {
                    webhook["objectSelector"] = selector.clone();
                }
                if kind == WebhookType::Mutating {
                    webhook["reinvocationPolicy"] =
                        json!(hook.reinvocation_policy.as_deref().unwrap_or("Never"));
                }
                webhook
            })
            .collect();
        if !hooks.is_empty() {
            out.push(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": config_kind,
                "metadata": {"name": format!("krec-{}", manifest.name),
                    "labels": {"app.kubernetes.io/managed-by": "krec"}},
                "webhooks": hooks,
            }));
        }
    }
    out
}

/// The YAML documents registering `manifests`' webhooks where `reach` says, trusting `ca_pem`
/// (`krec webhooks`): each guest's webhook configurations, whole objects to apply with
/// `kubectl apply --server-side -f -` again and again.
///
/// A CRD a guest converts belongs to whoever applies it: a document holding its
/// `spec.conversion` alone, server-side applied, would either conflict with the CRD's creator
/// (who owns the defaulted `strategy: None`) or, forced, have kubectl hand the applier every
/// field of a CRD made by client-side apply, which the next apply would then prune. So a comment
/// shows the conversion instead: as a block for the CRD's manifest, and as a `kubectl patch` to
/// run once (a host run with `--webhook-service` registers it itself).
///
/// # Errors
///
/// When a document cannot be written as YAML.
pub fn registration_yaml(
    manifests: &[Manifest],
    reach: &Reach,
    ca_pem: &str,
) -> anyhow::Result<String> {
    let protected = protected_namespaces(reach.namespace());
    let mut out = String::new();
    for manifest in manifests {
        for document in configurations(manifest, reach, ca_pem, &protected) {
            out.push_str(&format!(
                "---\n# {} of guest {} (kubectl apply --server-side -f -)\n",
                document["kind"].as_str().unwrap_or_default(),
                manifest.name
            ));
            out.push_str(&serde_yaml_ng::to_string(&document)?);
        }
        let Some((crd, conversion)) = conversion(manifest, reach, ca_pem) else {
            continue;
        };
        out.push_str(&format!(
            "---\n# The CRD {crd} is converted by guest {}. A host run with --webhook-service\n\
             # registers its conversion itself; else put this in the CRD's manifest:\n#   spec:\n",
            manifest.name
        ));
        let block = serde_yaml_ng::to_string(&json!({"conversion": conversion}))?;
        for line in block.lines() {
            out.push_str(&format!("#     {line}\n"));
        }
        out.push_str(&format!(
            "# or patch the CRD once:\n#   kubectl patch crd {crd} --type=merge -p '{}'\n",
            json!({"spec": {"conversion": conversion}})
        ));
    }
    Ok(out)
}

/// Create or update a webhook configuration in the cluster: a server-side apply as
/// [`FIELD_MANAGER`], forced (the host owns its registrations).
///
/// # Errors
///
/// The API server's refusal.
pub async fn register(
    api: &crate::cluster::client::ApiClient,
    configuration: &Value,
) -> Result<(), krec_core::CallError> {
    let gvk = krec_core::Gvk::from_api_version(
        "admissionregistration.k8s.io/v1",
        configuration["kind"].as_str().unwrap_or_default(),
    );
    let name = configuration["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    api.patch(
        &gvk,
        None,
        name,
        krec_core::PatchType::Apply,
        configuration,
        false,
        FIELD_MANAGER,
    )
    .await
    .map(drop)
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
    body: Body,
) -> Response {
    // Series only for guests that run: a request for any other name must not grow the
    // metrics without bound.
    if served.manager.controller(&guest).is_none() {
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
    let response = tokio::time::timeout_at(deadline, answered)
        .await
        .unwrap_or_else(|_| abandoned());
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
    let Some(controller) = served.manager.controller(guest) else {
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
    let version = controller.version();
    let verdict = version
        .module
        .admit(
            &version.cluster,
            Some(served.metrics.clone()),
            which,
            request,
        )
        .await;
    match verdict {
        Ok(verdict) => match response(&uid, which, object, verdict) {
            Ok(response) => json_response(&json!({
                "apiVersion": api_version,
                "kind": "AdmissionReview",
                "response": response,
            })),
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

/// An `AdmissionReview` the guest cannot be asked about, or a verdict that cannot be answered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadReview(String);

impl From<&str> for BadReview {
    fn from(problem: &str) -> Self {
        BadReview(problem.to_owned())
    }
}

/// An `AdmissionReview` as received: the fields the guest is asked about, its objects left as
/// slices of the body's text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    api_version: Option<String>,
    kind: Option<Value>,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

/// An `AdmissionReview`'s `request`.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RequestIn<'a> {
    uid: Option<String>,
    kind: GroupVersionKindIn,
    resource: ResourceIn,
    sub_resource: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    operation: Option<String>,
    user_info: UserInfoIn,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
    dry_run: Option<bool>,
}

/// A request's `kind`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct GroupVersionKindIn {
    group: String,
    version: String,
    kind: String,
}

/// A request's `resource` (only its name is asked for).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResourceIn {
    resource: String,
}

/// A request's `userInfo`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct UserInfoIn {
    username: String,
    groups: Vec<String>,
}

/// The WIT request of an `AdmissionReview`, and for a mutation the request's object (the
/// guest's patched object is diffed against it).
fn admission_request<'a>(
    review: ReviewIn<'a>,
    which: Review,
) -> Result<(WitAdmissionRequest, Option<&'a str>), BadReview> {
    if review.kind.as_ref().and_then(Value::as_str) != Some("AdmissionReview") {
        return Err(BadReview(format!(
            "expected kind AdmissionReview, got {}",
            review.kind.unwrap_or(Value::Null)
        )));
    }
    let request = review.request.ok_or("the review has no request")?;
    let operation = match request.operation.as_deref() {
        Some("CREATE") => WitOperation::Create,
        Some("UPDATE") => WitOperation::Update,
        Some("DELETE") => WitOperation::Delete,
        Some("CONNECT") => WitOperation::Connect,
        other => return Err(BadReview(format!("unknown operation {other:?}"))),
    };
    // An object is a JSON object; `null` (or anything else) is none.
    let object = |raw: Option<&'a RawValue>| raw.map(RawValue::get).filter(|o| o.starts_with('{'));
    let (object, old_object) = (object(request.object), object(request.old_object));
    let wit = WitAdmissionRequest {
        uid: request.uid.ok_or("the request has no uid")?,
        kind: WitGvk {
            group: request.kind.group,
            version: request.kind.version,
            kind: request.kind.kind,
        },
        resource: request.resource.resource,
        sub_resource: request.sub_resource,
        name: request.name.filter(|n| !n.is_empty()),
        namespace: request.namespace.filter(|n| !n.is_empty()),
        operation,
        user_info: WitUserInfo {
            username: request.user_info.username,
            groups: request.user_info.groups,
        },
        object: object.map(str::to_owned),
        old_object: old_object.map(str::to_owned),
        dry_run: request.dry_run.unwrap_or(false),
    };
    Ok((wit, object.filter(|_| which == Review::Mutate)))
}

/// The review's `response` for a verdict: status, warnings, audit annotations, and for a
/// mutation the JSON patch from the request's object to the guest's.
fn response(
    uid: &str,
    which: Review,
    object: Option<&str>,
    verdict: WitVerdict,
) -> Result<Value, BadReview> {
    let mut response = json!({"uid": uid, "allowed": verdict.allowed});
    if !verdict.allowed || verdict.message.is_some() || verdict.code.is_some() {
        // Without a code, the API server answers 400 (kube-apiserver's `ToStatusErr`).
        let mut status = json!({});
        if let Some(code) = verdict.code {
            status["code"] = json!(code);
        }
        if let Some(message) = &verdict.message {
            status["message"] = json!(message);
        }
        if let Some(reason) = &verdict.reason {
            status["reason"] = json!(reason);
        }
        response["status"] = status;
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    if !verdict.audit_annotations.is_empty() {
        let annotations: BTreeMap<String, String> = verdict.audit_annotations.into_iter().collect();
        response["auditAnnotations"] = json!(annotations);
    }
    if let Some(patched) = verdict.patched.filter(|_| verdict.allowed) {
        if which == Review::Validate {
            return Err(BadReview(
                "validate returned a patched object: only mutate may".into(),
            ));
        }
        let original: Value = object
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| BadReview(format!("the request's object: {e}")))?
            .ok_or("a patched object, but the request has no object (a delete)")?;
        let patched: Value = serde_json::from_str(&patched)
            .map_err(|e| BadReview(format!("the patched object is not JSON: {e}")))?;
        let patch = json_patch::diff(&original, &patched);
        if !patch.0.is_empty() {
            let text = serde_json::to_string(&patch).map_err(|e| BadReview(e.to_string()))?;
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    Ok(response)
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
    let Some(controller) = served.manager.controller(guest) else {
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
    let version = controller.version();
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
    fn webhooks_should_leave_the_control_plane_and_the_hosts_namespace_out_unless_named() {
        let protected = protected_namespaces(Some("krec-system"));
        assert_eq!(protected, ["kube-system", "kube-node-lease", "krec-system"]);
        assert_eq!(protected_namespaces(Some("kube-system")).len(), 2);
        let not_in = |values: &[&str]| json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": values});
        // None given: all three left out.
        assert_eq!(
            namespace_selector(None, &protected),
            Some(
                json!({"matchExpressions": [not_in(&["kube-system", "kube-node-lease", "krec-system"])]})
            )
        );
        // A selector of the manifest's own is kept, the exclusion added to it.
        let given = json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "env", "operator": "Exists"}]});
        assert_eq!(
            namespace_selector(Some(&given), &protected),
            Some(json!({"matchLabels": {"team": "a"}, "matchExpressions": [
                {"key": "env", "operator": "Exists"},
                not_in(&["kube-system", "kube-node-lease", "krec-system"])]}))
        );
        // Named explicitly, by label or by an `In` expression: asked for, so not left out.
        let named = json!({"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}});
        assert_eq!(
            namespace_selector(Some(&named), &protected),
            Some(
                json!({"matchLabels": {"kubernetes.io/metadata.name": "kube-system"},
                "matchExpressions": [not_in(&["kube-node-lease", "krec-system"])]})
            )
        );
        let all = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "In", "values": ["kube-system", "kube-node-lease", "krec-system"]}]});
        assert_eq!(
            namespace_selector(Some(&all), &protected),
            Some(all.clone())
        );
        // `NotIn` names nothing it asks for.
        let not = json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
            "operator": "NotIn", "values": ["kube-system"]}]});
        let selector = namespace_selector(Some(&not), &protected).expect("selector");
        assert_eq!(
            selector["matchExpressions"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(namespace_selector(None, &[]), None);
    }

    #[test]
    fn a_service_should_parse_as_namespace_name_and_port() {
        assert_eq!(
            Reach::service("krec-system/krec-webhooks").ok(),
            Some(Reach::Service {
                namespace: "krec-system".into(),
                name: "krec-webhooks".into(),
                port: 443
            })
        );
        assert_eq!(
            Reach::service("ns/svc:9443")
                .ok()
                .map(|r| r.namespace().map(str::to_owned)),
            Some(Some("ns".to_owned()))
        );
        for bad in ["svc", "/svc", "ns/", "ns/svc:http"] {
            assert!(Reach::service(bad).is_err(), "{bad}");
        }
    }

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
