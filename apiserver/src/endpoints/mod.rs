//! The Kubernetes REST API over HTTP, laid out as kube-apiserver's `pkg/endpoints`: what a path
//! names ([`router`]), discovery and the OpenAPI documents, one handler per verb (`get` and
//! `list`, `create`, `update`, `patch`, `delete`, `watch`, and the scale subresource), content
//! negotiation (JSON, YAML, protobuf, Table), and `Status` errors. Every write handler passes
//! through one admission step ([`crate::admission::Admission`]), a collection delete included.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::admission::UserInfo;
use crate::authorization;
use crate::conversion;
use crate::field_validation;
use crate::managed;
use crate::openapi;
use crate::patch::{PatchMeta, PatchType, patched};
use crate::protobuf;
use crate::resources::ResourceType;
use crate::scale;
use crate::store::{ChangeType, DeleteOptions, Propagation, Store, WatchFrom, WriteOptions};
use krec_core::error::ApiError;
use krec_core::json::Pointer;
use krec_core::selector::{FieldSelector, LabelSelector};
use router::{ResourcePath, Route, Subresource};

mod create;
mod delete;
mod discovery;
mod documents;
mod get;
mod impersonation;
mod negotiation;
mod patch;
mod reviews;
pub mod router;
mod scale_subresource;
mod token;
mod update;
mod watch;
pub mod watchers;

use negotiation::{
    Rendering, as_protobuf, decode_body, partial_metadata, protobuf_only, read_body, render_one,
    rendering, with_annotations, with_warnings, yaml_or_json,
};
use scale_subresource::scale_subresource;

/// Largest request body accepted, as kube-apiserver's default (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 << 20;

/// How often a watch with `allowWatchBookmarks` gets a BOOKMARK, by default.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);

/// Longest watch when the client sets no `timeoutSeconds` (kube-apiserver picks 30–60 min).
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

pub use crate::resources::{KUBERNETES_VERSION, version_string};

/// Shared state of the HTTP handlers.
pub struct ApiServer {
    /// The objects.
    pub store: Arc<Store>,
    /// The address clients reach the server at, for `/api` discovery.
    pub address: String,
    /// Flips to `true` when the server stops; open watches end.
    pub stopped: tokio::sync::watch::Receiver<bool>,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// The OpenAPI documents, built when first asked for.
    pub openapi: openapi::Documents,
    /// Faults to inject (none unless rules are added).
    pub faults: Arc<crate::faults::Faults>,
    /// Where write requests are recorded; `None`: nowhere.
    pub audit: Option<Arc<crate::audit::AuditLog>>,
    /// The admission webhooks writes go through.
    pub admission: Arc<crate::admission::Admission>,
    /// `/metrics`: the watches open now.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Who a request is from.
    pub authenticator: crate::authentication::Authenticator,
    /// The longest lifetime of a requested token, in seconds (`None`: 2^32, kube's default).
    pub max_token_seconds: Option<i64>,
    /// The watches each user holds open, capped.
    pub watchers: Arc<watchers::Watchers>,
}

fn respond(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // An object's `fieldsV1` texts are written as their JSON.
    let bytes = krec_core::json::object_to_vec(body);
    (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// An [`ApiError`] as the response kube-apiserver gives: its code and its `Status` (axum's
/// `IntoResponse` cannot be implemented here for the vocabulary's type).
pub(crate) trait ErrorResponse {
    /// The response.
    fn into_response(self) -> Response;
}

impl ErrorResponse for ApiError {
    fn into_response(self) -> Response {
        respond(self.code, &self.status())
    }
}

/// Which resource a path names.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    status: bool,
}

impl Target {
    /// Whether this is a write of a CRD's spec, which kube answers with warnings for the
    /// schemas' unrecognised formats.
    fn is_crd(&self) -> bool {
        !self.status
            && self.rt.group == "apiextensions.k8s.io"
            && self.rt.plural == "customresourcedefinitions"
    }

    /// The stored CRD an update or patch replaces (for its warnings' ratcheting).
    fn crd_before(&self, server: &ApiServer) -> Option<Arc<Value>> {
        let name = self.name.as_deref()?;
        self.is_crd()
            .then(|| server.store.get(&self.rt, None, name).ok())
            .flatten()
    }

    /// The warnings a write of the CRD `stored` (over `old`) gets for its unrecognised
    /// formats; none for other kinds.
    fn crd_warnings(&self, stored: &Value, old: Option<&Value>) -> Vec<String> {
        if self.is_crd() {
            crate::registry::apiextensions::formats::warnings(stored, old)
        } else {
            Vec::new()
        }
    }

    /// The served resource `resource` (of a served group-version) names, or 404 as
    /// kube-apiserver answers a path it does not serve (an unknown resource, a namespace on a
    /// cluster-scoped kind, `scale` of a kind without it).
    fn of(server: &ApiServer, path: &str, resource: &ResourcePath<'_>) -> Result<Self, ApiError> {
        let rt = server
            .store
            .registry()
            .by_plural(resource.group, resource.version, resource.plural)
            .ok_or_else(|| ApiError::no_route(path))?;
        let has_subresource = match resource.subresource {
            Subresource::None | Subresource::Status => true,
            Subresource::Scale => rt.scale.is_some(),
            Subresource::Token => rt.group.is_empty() && rt.plural == "serviceaccounts",
        };
        if (resource.namespace.is_some() && !rt.namespaced) || !has_subresource {
            return Err(ApiError::no_route(path));
        }
        Ok(Target {
            namespace: resource.namespace.map(str::to_owned),
            name: resource.name.map(str::to_owned),
            status: resource.subresource == Subresource::Status,
            rt,
        })
    }
}

/// Query parameters.
struct Params(HashMap<String, String>);

impl Params {
    fn parse(uri: &Uri) -> Self {
        Params(
            form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }

    fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    /// The options of a write: dry-run, and the field manager (`fieldManager`, else the product
    /// of the client's User-Agent, as kube-apiserver names unnamed managers).
    fn write_options(&self, headers: &HeaderMap) -> WriteOptions {
        let manager = self
            .get("fieldManager")
            .map(str::to_owned)
            .or_else(|| {
                headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|ua| ua.split('/').next())
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(|m| m.chars().take(128).collect())
            })
            .unwrap_or_else(|| "unknown".into());
        WriteOptions {
            dry_run: self.dry_run(),
            manager,
            ..WriteOptions::default()
        }
    }

    /// The label and field selectors, the field labels being those `rt` supports.
    fn selectors(&self, rt: &ResourceType) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse_for(
            self.get("fieldSelector").unwrap_or(""),
            crate::registry::strategy(rt).field_labels(),
        )
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok((labels, fields))
    }
}

/// Entry point: every request.
pub async fn handle(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    peer: Option<axum::Extension<krec_net::client_certs::PeerCertificates>>,
    body: Body,
) -> Response {
    let received = jiff::Timestamp::now();
    let peer = peer.map(|axum::Extension(certs)| certs);
    let user = server
        .authenticator
        .authenticate(&headers, peer.as_ref(), &server.store);
    let mut impersonated = None;
    let response = match &user {
        Some(user) => match impersonation::impersonated(&server, user, &headers) {
            Ok(as_user) => match read_body(body, &headers).await {
                Ok(body) => {
                    impersonated = as_user;
                    let acting = impersonated.as_ref().unwrap_or(user);
                    route(&server, acting, &method, &uri, &headers, body).await
                }
                Err(err) => return err.into_response(),
            },
            Err(err) => Err(err),
        },
        // Health checks and the version answer everyone without credentials (wrong ones are a
        // 401 anywhere); the rest only a known user.
        None if !headers.contains_key(header::AUTHORIZATION)
            && !server.authenticator.refuses_certificate(peer.as_ref())
            && matches!(Route::of(uri.path()), Some(Route::Health | Route::Version)) =>
        {
            route(
                &server,
                &UserInfo::anonymous(),
                &method,
                &uri,
                &headers,
                Bytes::new(),
            )
            .await
        }
        None => Err(ApiError::unauthorized()),
    };
    let response = match response {
        Ok(response) => response,
        Err(err) => {
            tracing::debug!(%method, %uri, code = err.code, "{}", err.message);
            err.into_response()
        }
    };
    if let Some(audit) = &server.audit {
        audit.record(&crate::audit::Request {
            method: method.as_str(),
            uri: uri.path_and_query().map_or(uri.path(), |p| p.as_str()),
            user_agent: headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default(),
            user: user.as_ref(),
            impersonated: impersonated.as_ref(),
            received,
            code: response.status().as_u16(),
            annotations: response
                .extensions()
                .get::<crate::audit::Annotations>()
                .map_or(&[][..], |a| a.0.as_slice()),
        });
    }
    if protobuf_only(&headers) {
        return as_protobuf(response).await;
    }
    response
}

/// Whether `group`/`version` is served.
fn served(server: &ApiServer, group: &str, version: &str) -> bool {
    server.store.registry().serves_group_version(group, version)
}

/// What kube-apiserver answers for a path nothing serves (an unknown path, group or
/// group-version — a deleted CRD's, say): its `NotFoundHandler`'s plain text, which client-go
/// turns into `the server could not find the requested resource (get foos.example.com x)`.
fn page_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        "404 page not found\n",
    )
        .into_response()
}

async fn route(
    server: &Arc<ApiServer>,
    user: &UserInfo,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = uri.path();
    let params = Params::parse(uri);
    let route = Route::of(path);
    // Authorized before anything is looked up, as kube-apiserver's filter does: a path
    // nothing serves is refused to whoever may not ask for it.
    if !authorization::unrestricted(user) {
        let verb = method.as_str().to_ascii_lowercase();
        let attributes = match &route {
            Some(Route::Resource(resource)) => request_attributes(resource, method, &params),
            _ => authorization::Attributes::non_resource(&verb, path),
        };
        authorization::authorize(&server.store, user, &attributes)?;
    }
    let Some(route) = route else {
        return Ok(page_not_found());
    };
    let resource = match route {
        Route::Resource(resource) if !served(server, resource.group, resource.version) => {
            return Ok(page_not_found());
        }
        Route::Resource(resource) => resource,
        Route::Metrics if method == Method::GET => {
            return Ok((
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                server.metrics.render(),
            )
                .into_response());
        }
        Route::Metrics => return Err(ApiError::no_route(path)),
        Route::Health => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            );
        }
        Route::OpenApiV2 => return documents::v2(server, method, path, headers),
        Route::OpenApiV3Root => {
            return discovery::get_only(method, path, || {
                server.openapi.v3_root(server.store.registry())
            });
        }
        Route::OpenApiV3 { group, version } => {
            return documents::v3(server, method, uri, headers, group, version);
        }
        other => return discovery::serve(server, method, path, other),
    };
    let target = Target::of(server, path, &resource)?;
    let scale = resource.subresource == Subresource::Scale;
    // A server-side apply of an object that does not exist creates it: `create` too, as
    // kube-apiserver asks (of a restricted user: the admin's writes look nothing up).
    let namespace = target.namespace.as_deref();
    if !authorization::unrestricted(user)
        && *method == Method::PATCH
        && headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/apply-patch"))
        && !server.store.contains(
            &target.rt,
            namespace,
            target.name.as_deref().unwrap_or_default(),
        )
    {
        let creating = authorization::Attributes {
            verb: "create",
            ..request_attributes(&resource, method, &params)
        };
        authorization::authorize(&server.store, user, &creating)?;
    }
    let fault = match inject(server, &target, method, &params, headers, scale).await {
        Ok(fault) => fault,
        Err(refused) => return Ok(refused),
    };
    let rendering = rendering(headers);
    if target.name.is_some() && (scale || matches!(*method, Method::PUT | Method::PATCH)) {
        in_written_version(server, &target).await?;
    }
    if scale {
        return scale_subresource(server, &target, method, &params, headers, &body).await;
    }
    if resource.subresource == Subresource::Token {
        return token::request(server, &target, method, headers, &body).await;
    }
    if target.rt.create_only {
        return match (method, &target.name) {
            (&Method::POST, None) => reviews::create(server, user, &target, headers, &body).await,
            _ => Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            )),
        };
    }
    match (method.clone(), target.name.is_some()) {
        (Method::GET, true) => get::get(server, &target, &params, rendering).await,
        (Method::GET, false) if params.flag("watch") => {
            let held = match server.watchers.admit(user) {
                Ok(held) => held,
                Err(shed) => return Ok(shed.into_response()),
            };
            watch::watch(server.clone(), target, &params, rendering, fault, held).await
        }
        (Method::GET, false) => get::list(server, &target, &params, rendering).await,
        (Method::POST, false) => {
            create::create(server, user, &target, &params, headers, &body).await
        }
        (Method::PUT, true) => update::update(server, user, &target, &params, headers, &body).await,
        (Method::PATCH, true) => patch::patch(server, user, &target, &params, headers, &body).await,
        (Method::DELETE, true) => {
            delete::delete(server, user, &target, &params, headers, &body).await
        }
        (Method::DELETE, false) => {
            delete::delete_collection(server, user, &target, &params, headers, &body).await
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {path}"
        ))),
    }
}

/// What a request on `resource` asks, in RBAC's terms.
fn request_attributes<'a>(
    resource: &ResourcePath<'a>,
    method: &Method,
    params: &'a Params,
) -> authorization::Attributes<'a> {
    let verb = authorization::verb(
        method.as_str(),
        resource.name.is_some(),
        params.flag("watch"),
    );
    let name = resource.name.or_else(|| {
        matches!(verb, "list" | "watch")
            .then(|| authorization::selected_name(params.get("fieldSelector")))
            .flatten()
    });
    authorization::attributes(
        verb,
        (resource.group, resource.plural),
        resource.subresource.name(),
        resource.namespace,
        name,
    )
}

/// Before a write in a version other than the one the object is stored in (a resource with a
/// conversion webhook): convert the stored object and keep it in the version written, so the
/// write compares, patches and records fields in one version. A write that slips in between
/// (a controller's status update while the webhook converts) is converted again, as
/// kube-apiserver's GuaranteedUpdate converts the object it read on each of its tries; after
/// [`REENCODE_ATTEMPTS`] the write goes on and meets the change as a conflict.
async fn in_written_version(server: &ApiServer, target: &Target) -> Result<(), ApiError> {
    let (rt, namespace) = (&target.rt, target.namespace.as_deref());
    let name = target.name.as_deref().unwrap_or_default();
    for _ in 0..REENCODE_ATTEMPTS {
        let Some(stored) = server.store.needs_reencoding(rt, namespace, name) else {
            break;
        };
        let converted = conversion::one_to_version(rt, stored).await?;
        if server
            .store
            .reencode(rt, namespace, Arc::unwrap_or_clone(converted))?
        {
            break;
        }
    }
    Ok(())
}

/// Times [`in_written_version`] converts an object that keeps changing under it.
const REENCODE_ATTEMPTS: u32 = 5;

/// Unknown and duplicate fields of a body, as its `fieldValidation` says: a 400 when strict,
/// else the warnings to answer with (unknown fields of built-in kinds are dropped).
fn check_fields(
    rt: &ResourceType,
    object: &mut Value,
    duplicates: Vec<String>,
    params: &Params,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation::Mode::parse(params.get("fieldValidation"))?;
    let problems = field_validation::problems(rt, object, duplicates);
    field_validation::enforce(mode, rt, problems)
}

/// The fault rules' verdict on a request: a refusal is answered here (a 429 with its
/// `Retry-After`), latency is waited out; watch faults are returned for [`watch`] to apply.
async fn inject(
    server: &ApiServer,
    target: &Target,
    method: &Method,
    params: &Params,
    headers: &HeaderMap,
    scale: bool,
) -> Result<Option<crate::faults::Fault>, Response> {
    use crate::faults::{self, Fault};
    if server.faults.is_empty() {
        return Ok(None);
    }
    let verb = match (method.as_str(), target.name.is_some()) {
        ("GET", true) => "get",
        ("GET", false) if params.flag("watch") => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return Ok(None),
    };
    let request = faults::Request {
        verb,
        plural: &target.rt.plural,
        group: &target.rt.group,
        subresource: if target.status {
            Some("status")
        } else if scale {
            Some("scale")
        } else {
            None
        },
        namespace: target.namespace.as_deref(),
        name: target.name.as_deref(),
        user_agent: headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default(),
        field_manager: params.get("fieldManager"),
    };
    let Some(fault) = server.faults.decide(&request) else {
        return Ok(None);
    };
    if let Fault::Latency(delay) = fault {
        tokio::time::sleep(delay).await;
        return Ok(None);
    }
    match faults::refusal(&fault, &request) {
        Some(err) => {
            let mut response = err.into_response();
            if let Fault::Throttle { retry_after } = fault
                && let Ok(value) =
                    header::HeaderValue::from_str(&retry_after.as_secs().max(1).to_string())
            {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            Err(response)
        }
        None => Ok(Some(fault)),
    }
}

#[cfg(test)]
mod tests;
