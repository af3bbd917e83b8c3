//! The Kubernetes REST API over HTTP: discovery, the verbs on every served resource, watches,
//! and `Status` errors, routed by path as kube-apiserver does.

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
use crate::conversion;
use crate::endpoints::router::{ResourcePath, Route, Subresource};
use crate::error::ApiError;
use crate::field_validation;
use crate::json::Pointer;
use crate::managed;
use crate::openapi;
use crate::patch::{PatchMeta, PatchType, patched};
use crate::printers;
use crate::protobuf;
use crate::resources::ResourceType;
use crate::scale;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{ChangeType, DeleteOptions, Propagation, Store, WatchFrom, WriteOptions};

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
}

fn respond(code: u16, body: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // An object's `fieldsV1` texts are written as their JSON.
    let bytes = crate::json::object_to_vec(body);
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

/// How long a watch from a resourceVersion the store has not reached waits for it (as
/// kube-apiserver's watch cache, 3 s) before failing.
const FRESHNESS_WAIT: Duration = Duration::from_secs(3);

/// The request body, at most [`MAX_BODY_BYTES`]; a larger one is refused as soon as it is
/// known to be (its `Content-Length`, or the byte past the limit), the rest left to drain.
async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, Unread> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut stream = body.into_data_stream();
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        let rest = drainable(headers, stream);
        return Err(Unread(ApiError::too_large(MAX_BODY_BYTES), rest));
    }
    let mut kept: Vec<u8> = Vec::new();
    let read = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?;
            if kept.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(ApiError::too_large(MAX_BODY_BYTES));
            }
            kept.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(())) => Ok(Bytes::from(kept)),
        Ok(Err(err)) if err.code == 413 => Err(Unread(err, drainable(headers, stream))),
        Ok(Err(err)) => Err(Unread(err, None)),
        Err(_) => Err(Unread(ApiError::timeout(), None)),
    }
}

/// How long a request body may take to arrive: kube-apiserver's timeout for requests that are
/// not watches (`--request-timeout`, 60 s). A client trickling its body cannot hold a
/// connection (and its place under the cap) longer.
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// The unread rest of a body, to drain — unless the client waits for `100 Continue` before it
/// sends: draining would ask it for the body nobody wants.
fn drainable(
    headers: &HeaderMap,
    rest: axum::body::BodyDataStream,
) -> Option<axum::body::BodyDataStream> {
    let waits = headers
        .get(header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    (!waits).then_some(rest)
}

/// A body that could not be read, and what is left of it.
struct Unread(ApiError, Option<axum::body::BodyDataStream>);

/// How much of the unread rest of an over-size body is read and discarded after the 413 is
/// sent, and for how long at most: a client that sends its whole body before it reads (curl
/// over HTTP/2, most HTTP/1.1 clients) then reads the `Status` rather than a reset stream. A
/// body larger still, or slower, is cut.
const MAX_DRAINED_BYTES: usize = 256 << 20;
/// See [`MAX_DRAINED_BYTES`].
const MAX_DRAIN_TIME: Duration = Duration::from_secs(30);

impl IntoResponse for Unread {
    /// The error's answer, sent at once; the unread rest of the request is drained meanwhile
    /// (see [`MAX_DRAINED_BYTES`]).
    fn into_response(self) -> Response {
        let Unread(err, rest) = self;
        if let Some(mut rest) = rest {
            tokio::spawn(async move {
                let drain = async {
                    let mut drained = 0usize;
                    while let Some(Ok(chunk)) = rest.next().await {
                        drained += chunk.len();
                        if drained > MAX_DRAINED_BYTES {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(MAX_DRAIN_TIME, drain).await;
            });
        }
        err.into_response()
    }
}

/// Entry point: every request.
pub async fn handle(
    State(server): State<Arc<ApiServer>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = match read_body(body, &headers).await {
        Ok(body) => body,
        Err(err) => return err.into_response(),
    };
    let received = jiff::Timestamp::now();
    let response = match route(&server, &method, &uri, &headers, body).await {
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
            received,
            code: response.status().as_u16(),
        });
    }
    if protobuf_only(&headers) {
        return as_protobuf(response).await;
    }
    response
}

/// Whether the client accepts Kubernetes' protobuf and not JSON (kube-apiserver answers JSON
/// whenever it is acceptable, as every client that can send protobuf also reads JSON).
fn protobuf_only(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut protobuf_accepted = false;
    for entry in accept.split(',') {
        let media_type = entry.split(';').next().unwrap_or("").trim();
        match media_type {
            protobuf::MEDIA_TYPE => protobuf_accepted = true,
            "" => {}
            _ => return false,
        }
    }
    protobuf_accepted
}

/// A complete JSON response re-encoded as protobuf; a kind without a protobuf message (custom
/// resources, tables) is 406 Not Acceptable, as from kube-apiserver. Streams (watches) stay JSON.
async fn as_protobuf(response: Response) -> Response {
    use http_body::Body as _;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !is_json || response.body().size_hint().exact().is_none() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal("reading the response").into_response();
    };
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|value| protobuf::encode(&value));
    match encoded {
        Some(Ok(encoded)) => {
            let mut response = Response::from_parts(parts, Body::from(encoded));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static(protobuf::MEDIA_TYPE),
            );
            response.headers_mut().remove(header::CONTENT_LENGTH);
            response
        }
        Some(Err(err)) => err.into_response(),
        None => ApiError::not_acceptable(
            "only the following media types are accepted: application/json, application/yaml",
        )
        .into_response(),
    }
}

async fn route(
    server: &Arc<ApiServer>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let path = uri.path();
    let registry = server.store.registry();
    let get_only = |value: Value| -> Result<Response, ApiError> {
        if method == Method::GET {
            Ok(respond(200, &value))
        } else {
            Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on {path}"
            )))
        }
    };
    let resource = match Route::of(path).ok_or_else(|| ApiError::no_route(path))? {
        Route::Version => {
            let (major, minor) = KUBERNETES_VERSION;
            return get_only(
                json!({"major": major, "minor": minor, "gitVersion": version_string(),
                    "gitCommit": "krec", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                    "goVersion": "n/a", "compiler": "rustc", "platform": "linux/amd64"}),
            );
        }
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
        Route::CoreVersions => {
            return get_only(json!({"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server.address}]}));
        }
        Route::Groups => return get_only(registry.group_list()),
        Route::OpenApiV2 => {
            if method != Method::GET {
                return get_only(Value::Null);
            }
            let (json, proto) = server.openapi.v2(registry);
            return openapi_v2_response(headers, json, proto);
        }
        Route::OpenApiV3Root => return get_only(server.openapi.v3_root(registry)),
        Route::OpenApiV3 { group, version } => {
            let doc = server.openapi.v3(registry, group, version);
            let doc = doc.ok_or_else(|| ApiError::no_route(path))?;
            return get_v3_document(method, uri, headers, doc);
        }
        Route::Group(group) => {
            let list = registry.group_list();
            let found = list["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|g| g["name"] == *group)
                .cloned();
            return match found {
                Some(mut g) => {
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    get_only(g)
                }
                None => Err(ApiError::no_route(path)),
            };
        }
        Route::Resources { group, version } => {
            if !registry.serves_group_version(group, version) {
                return Err(ApiError::no_route(path));
            }
            return get_only(registry.resource_list(group, version));
        }
        Route::Resource(resource) => resource,
    };
    let ResourcePath {
        group,
        version,
        namespace,
        plural,
        name,
        subresource,
    } = resource;
    if !registry.serves_group_version(group, version) {
        return Err(ApiError::no_route(path));
    }
    let (status, scale) = (
        subresource == Subresource::Status,
        subresource == Subresource::Scale,
    );
    let rt = registry
        .by_plural(group, version, plural)
        .ok_or_else(|| ApiError::no_route(path))?;
    if (namespace.is_some() && !rt.namespaced) || (scale && rt.scale.is_none()) {
        return Err(ApiError::no_route(path));
    }
    let target = Target {
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        status,
        rt,
    };
    let params = Params::parse(uri);
    let fault = match inject(server, &target, method, &params, headers, scale).await {
        Ok(fault) => fault,
        Err(refused) => return Ok(refused),
    };
    let table = wants_table(headers);
    let server = server.clone();
    if target.name.is_some() && (scale || matches!(*method, Method::PUT | Method::PATCH)) {
        in_written_version(&server, &target).await?;
    }
    if scale {
        return scale_subresource(&server, &target, method, &params, headers, &body).await;
    }
    match (method.clone(), target.name.is_some()) {
        (Method::GET, true) => {
            let object = server.store.get(
                &target.rt,
                target.namespace.as_deref(),
                target.name.as_deref().unwrap_or_default(),
            )?;
            let object = conversion::one_to_version(&target.rt, object).await?;
            Ok(respond(
                200,
                &maybe_table(&target.rt, vec![object], None, table, &params),
            ))
        }
        (Method::GET, false) if params.flag("watch") => {
            watch(server, target, &params, table, fault).await
        }
        (Method::GET, false) => list(&server, &target, &params, table).await,
        (Method::POST, false) => {
            let (mut object, duplicates) = decode_body(&body, headers).await?;
            let warnings = check_fields(&target.rt, &mut object, duplicates, &params)?;
            let created = server
                .admission
                .create(
                    &target.rt,
                    target.namespace.as_deref(),
                    object,
                    params.write_options(headers),
                    &UserInfo::admin(),
                )
                .await?;
            let warnings = [warnings, created.warnings].concat();
            let object = conversion::one_to_version(&target.rt, created.object).await?;
            Ok(with_warnings(respond(201, &object), &warnings))
        }
        (Method::PUT, true) => {
            let (mut object, duplicates) = decode_body(&body, headers).await?;
            let warnings = check_fields(&target.rt, &mut object, duplicates, &params)?;
            let name = target.name.as_deref().unwrap_or_default();
            let updated = server
                .admission
                .update(
                    &target.rt,
                    target.namespace.as_deref(),
                    name,
                    object,
                    target.status,
                    params.write_options(headers),
                    &UserInfo::admin(),
                )
                .await?;
            let warnings = [warnings, updated.warnings].concat();
            let object = conversion::one_to_version(&target.rt, updated.object).await?;
            Ok(with_warnings(respond(200, &object), &warnings))
        }
        (Method::PATCH, true) => patch(&server, &target, &params, headers, &body).await,
        (Method::DELETE, true) => {
            let options = delete_options(&params, headers, &body)?;
            let name = target.name.as_deref().unwrap_or_default();
            let deleted = server
                .admission
                .delete(
                    &target.rt,
                    target.namespace.as_deref(),
                    name,
                    &options,
                    &UserInfo::admin(),
                )
                .await?;
            let object = conversion::one_to_version(&target.rt, deleted.object).await?;
            Ok(with_warnings(respond(200, &object), &deleted.warnings))
        }
        (Method::DELETE, false) => {
            let (labels, fields) = params.selectors(&target.rt)?;
            let options = delete_options(&params, headers, &body)?;
            let (items, warnings) = server
                .admission
                .delete_collection(
                    &target.rt,
                    target.namespace.as_deref(),
                    (&labels, &fields),
                    &options,
                    &UserInfo::admin(),
                )
                .await?;
            let items = conversion::to_version(&target.rt, items).await?;
            let list = json!({"kind": target.rt.list_kind, "apiVersion": target.rt.api_version(),
                "metadata": {"resourceVersion": server.store.resource_version().to_string()}, "items": items});
            Ok(with_warnings(respond(200, &list), &warnings))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {path}"
        ))),
    }
}

/// A group-version's OpenAPI v3 document, as kube-openapi's handler serves it: a URL with the
/// document's current `hash` may be cached forever, one with an old hash is redirected to the
/// current one; 304 when the client holds the document (`If-None-Match`).
fn get_v3_document(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    doc: openapi::Document,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on OpenAPI documents"
        )));
    }
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty())
        .unwrap_or("*/*");
    let json = accept.split(',').any(|clause| {
        matches!(
            clause.split(';').next().unwrap_or("").trim(),
            "application/json" | "application/*" | "*/*"
        )
    });
    if !json {
        return Err(ApiError::not_acceptable(format!(
            "none of the media types in {accept:?} is served: application/json"
        )));
    }
    let hash = Params::parse(uri).get("hash").map(str::to_owned);
    match hash {
        Some(hash) if hash != doc.hash => Ok((
            StatusCode::MOVED_PERMANENTLY,
            [(
                header::LOCATION,
                format!("{}?hash={}", uri.path(), doc.hash),
            )],
        )
            .into_response()),
        Some(_) => {
            let mut response = document_response(headers, doc, "application/json");
            let forever = [
                (header::CACHE_CONTROL, "public, immutable".to_owned()),
                (header::EXPIRES, expires_in_a_year()),
            ];
            for (name, value) in forever {
                if let Ok(value) = value.parse() {
                    response.headers_mut().insert(name, value);
                }
            }
            Ok(response)
        }
        None => Ok(document_response(headers, doc, "application/json")),
    }
}

/// A year from now, as an HTTP date.
fn expires_in_a_year() -> String {
    let at = std::time::SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
    httpdate::fmt_http_date(at)
}

fn document_response(headers: &HeaderMap, doc: openapi::Document, media_type: &str) -> Response {
    let etag = format!("\"{}\"", doc.hash);
    let held = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let head = [
        (header::CONTENT_TYPE, media_type.to_owned()),
        (header::ETAG, etag),
        (header::VARY, "Accept".to_owned()),
    ];
    if held {
        (StatusCode::NOT_MODIFIED, head).into_response()
    } else {
        (StatusCode::OK, head, doc.body).into_response()
    }
}

/// `/openapi/v2` in the first acceptable of JSON and gnostic's protobuf, as kube-openapi's
/// handler negotiates it; 406 when neither is.
fn openapi_v2_response(
    headers: &HeaderMap,
    json: openapi::Document,
    proto: openapi::Document,
) -> Result<Response, ApiError> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.trim().is_empty())
        .unwrap_or("*/*");
    for clause in accept.split(',') {
        let media_type = clause.split(';').next().unwrap_or("").trim();
        let (kind, subtype) = media_type.split_once('/').unwrap_or((media_type, ""));
        if kind != "application" && kind != "*" {
            continue;
        }
        if matches!(subtype, "json" | "*") {
            return Ok(document_response(headers, json, "application/json"));
        }
        if [openapi::V2_PROTOBUF, openapi::V2_PROTOBUF_DEPRECATED]
            .iter()
            .any(|t| t.strip_prefix("application/") == Some(subtype))
        {
            return Ok(document_response(headers, proto, openapi::V2_PROTOBUF));
        }
    }
    Err(ApiError::not_acceptable(format!(
        "none of the media types in {accept:?} is served: application/json, {}",
        openapi::V2_PROTOBUF
    )))
}

/// A request body as a value, with the fields its JSON text set twice (none for YAML or
/// protobuf, which cannot be scanned for them).
async fn decode_body(body: &Bytes, headers: &HeaderMap) -> Result<(Value, Vec<String>), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    if !matches!(
        media_type,
        "application/json" | "application/yaml" | protobuf::MEDIA_TYPE | ""
    ) {
        // CBOR is not spoken here; clients fall back to JSON on a 415.
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {media_type:?})"
        )));
    }
    let (value, duplicates) = if media_type == protobuf::MEDIA_TYPE {
        (protobuf::decode(body)?, Vec::new())
    } else if media_type == "application/yaml" {
        yaml_or_json(body)
            .await
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?
    } else {
        field_validation::decode_json(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    Ok((value, duplicates))
}

/// A YAML body, read as JSON when it is JSON (what kube and client-go send for server-side
/// apply, under the YAML media type): JSON is YAML, and the JSON parser is many times faster —
/// and finds the fields set twice as it parses.
///
/// YAML is first checked for its nesting ([`crate::yaml::check_depth`]); a body larger than
/// [`INLINE_YAML_BYTES`] is decoded on a blocking thread, at most [`YAML_DECODERS`] at once, so
/// that a few large bodies cannot hold the threads every other request is served on.
async fn yaml_or_json(body: &Bytes) -> Result<(Value, Vec<String>), crate::yaml::YamlError> {
    if looks_like_json_object(body)
        && let Ok(decoded) = field_validation::decode_json(body)
    {
        return Ok(decoded);
    }
    if body.len() <= INLINE_YAML_BYTES {
        return Ok((crate::yaml::from_slice(body)?, Vec::new()));
    }
    static DECODERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(YAML_DECODERS);
    let permit = DECODERS.acquire().await;
    let body = body.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        crate::yaml::from_slice(&body)
    })
    .await;
    match decoded {
        Ok(decoded) => Ok((decoded?, Vec::new())),
        // The decoder panicked: report it as unreadable rather than take the server down.
        Err(err) => Err(crate::yaml::YamlError::Syntax(serde::de::Error::custom(
            format!("decoding failed: {err}"),
        ))),
    }
}

/// Largest YAML body decoded on the request's own task (a few milliseconds of parsing at most).
const INLINE_YAML_BYTES: usize = 64 << 10;

/// Larger YAML bodies decoded at once, each on a blocking thread.
const YAML_DECODERS: usize = 2;

/// Whether a body's first non-blank character opens a JSON object.
fn looks_like_json_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

fn delete_options(
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<DeleteOptions, ApiError> {
    let protobuf_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(protobuf::is_protobuf);
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else if protobuf_body {
        protobuf::decode(body)?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let propagation =
        field("propagationPolicy").or_else(|| params.get("propagationPolicy").map(str::to_owned));
    let propagation = match propagation.as_deref() {
        None | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown propagationPolicy {other:?}"
            )));
        }
    };
    let orphan = body.get("orphanDependents").and_then(Value::as_bool) == Some(true);
    let dry_run = params.dry_run()
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        uid: body
            .at("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned),
        resource_version: body
            .at("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        propagation: if orphan {
            Propagation::Orphan
        } else {
            propagation
        },
        dry_run,
        grace_period: match body.get("gracePeriodSeconds").and_then(Value::as_i64) {
            Some(grace) => Some(grace),
            None => match params.get("gracePeriodSeconds") {
                Some(text) => Some(text.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds {text:?}"))
                })?),
                None => None,
            },
        },
    })
}

async fn list(
    server: &ApiServer,
    target: &Target,
    params: &Params,
    table: bool,
) -> Result<Response, ApiError> {
    let (labels, fields) = params.selectors(&target.rt)?;
    let limit = match params.get("limit") {
        Some(l) => Some(
            l.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        ),
        None => None,
    };
    let page = server.store.list(
        &target.rt,
        target.namespace.as_deref(),
        &labels,
        &fields,
        limit,
        params.get("continue"),
    )?;
    let items = conversion::to_version(&target.rt, page.items).await?;
    let mut metadata = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    if table {
        return Ok(respond(
            200,
            &maybe_table(&target.rt, items, Some(metadata), true, params),
        ));
    }
    // Written from the stored objects without copying them into one tree (and each object's
    // `fieldsV1` texts as their JSON).
    let mut bytes = Vec::with_capacity(256 + 2048 * items.len());
    bytes.extend_from_slice(b"{\"kind\":");
    crate::json::write(&mut bytes, &Value::from(target.rt.list_kind.as_str()));
    bytes.extend_from_slice(b",\"apiVersion\":");
    crate::json::write(&mut bytes, &Value::from(target.rt.api_version()));
    bytes.extend_from_slice(b",\"metadata\":");
    crate::json::write(&mut bytes, &metadata);
    bytes.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        crate::json::write_object(&mut bytes, item);
    }
    bytes.extend_from_slice(b"]}");
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}

/// Before a write in a version other than the one the object is stored in (a resource with a
/// conversion webhook): convert the stored object and keep it in the version written, so the
/// write compares, patches and records fields in one version. A write that slips in between
/// makes the write a conflict.
async fn in_written_version(server: &ApiServer, target: &Target) -> Result<(), ApiError> {
    let (rt, namespace) = (&target.rt, target.namespace.as_deref());
    let name = target.name.as_deref().unwrap_or_default();
    if let Some(stored) = server.store.needs_reencoding(rt, namespace, name) {
        let converted = conversion::one_to_version(rt, stored).await?;
        server
            .store
            .reencode(rt, namespace, Arc::unwrap_or_clone(converted))?;
    }
    Ok(())
}

/// How a scale write changes the object it scales.
type ScaleChange<'a> = dyn Fn(&Value) -> Result<Value, ApiError> + 'a;

/// `GET`, `PUT` and `PATCH` of `…/{name}/scale`: the object's `Scale`, and writes of its replicas.
async fn scale_subresource(
    server: &ApiServer,
    target: &Target,
    method: &Method,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let rt = &target.rt;
    let Some(paths) = rt.scale.as_ref() else {
        return Err(ApiError::no_route(&format!("{}/scale", rt.plural)));
    };
    let namespace = target.namespace.as_deref();
    let name = target.name.as_deref().unwrap_or_default();
    let change: Box<ScaleChange> = match *method {
        Method::GET => {
            let object = server.store.get(rt, namespace, name)?;
            return Ok(respond(200, &scale::scale_of(paths, &object)));
        }
        Method::PUT => {
            let (asked, _) = decode_body(body, headers).await?;
            if asked.get("kind").and_then(Value::as_str) != Some("Scale") {
                return Err(ApiError::bad_request(format!(
                    "{} cannot be handled as a Scale",
                    asked
                        .get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("object")
                )));
            }
            Box::new(move |current| {
                scale::apply_scale((&rt.group, &rt.plural), paths, current, &asked)
            })
        }
        Method::PATCH => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchType::from_content_type(content_type)
                .filter(|k| *k != PatchType::Apply)
                .ok_or_else(|| {
                    ApiError::unsupported_media_type(format!(
                        "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
                    ))
                })?;
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
            Box::new(move |current| {
                let scale = scale::scale_of(paths, current);
                let meta = PatchMeta::of_kind("autoscaling", "v1", "Scale");
                let asked = patched(kind, &patch, Some(meta), Some(&scale))?.unwrap_or(scale);
                scale::apply_scale((&rt.group, &rt.plural), paths, current, &asked)
            })
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on {}/scale",
                rt.plural
            )));
        }
    };
    let stored = server.store.patch(
        rt,
        namespace,
        name,
        false,
        params.write_options(headers),
        |current| match current {
            Some(current) => change(current).map(Some),
            None => Err(ApiError::not_found(&rt.group, &rt.plural, name)),
        },
    )?;
    Ok(respond(200, &scale::scale_of(paths, &stored)))
}

async fn patch(
    server: &ApiServer,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = PatchType::from_content_type(content_type).ok_or_else(|| {
        ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format ({content_type:?}) - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        ))
    })?;
    let (patch, duplicates) = if kind == PatchType::Apply {
        yaml_or_json(body).await.map_err(|e| {
            ApiError::bad_request(format!("the apply body is not valid YAML or JSON: {e}"))
        })?
    } else {
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the patch is not valid JSON: {e}")))?;
        (patch, Vec::new())
    };
    if kind == PatchType::Apply && params.get("fieldManager").is_none() {
        return Err(ApiError::bad_request(
            "PATCH with apply requires a fieldManager",
        ));
    }
    let name = target.name.as_deref().unwrap_or_default();
    let existed = server
        .store
        .contains(&target.rt, target.namespace.as_deref(), name);
    let mut options = params.write_options(headers);
    let mut warnings = Vec::new();
    let stored = if kind == PatchType::Apply {
        options.applied = true;
        let rt = &target.rt;
        let schema = managed::Schema::of(rt);
        let force = params.flag("force");
        let time = crate::store::now_rfc3339();
        let api_version = rt.api_version();
        let write = managed::Write {
            manager: &options.manager.clone(),
            api_version: &api_version,
            subresource: target.status.then_some("status"),
            time: &time,
        };
        if !patch.is_object() {
            return Err(ApiError::bad_request("the apply body must be an object"));
        }
        let mut patch = patch;
        warnings = check_fields(rt, &mut patch, duplicates, params)?;
        server
            .admission
            .patch(
                rt,
                target.namespace.as_deref(),
                name,
                target.status,
                options.clone(),
                &UserInfo::admin(),
                |current| {
                    managed::apply(
                        current,
                        &patch,
                        schema,
                        rt.status_subresource && !target.status,
                        force,
                        &write,
                        (&rt.kind, &rt.group, name),
                    )
                    .map(Some)
                },
            )
            .await?
    } else {
        server
            .admission
            .patch(
                &target.rt,
                target.namespace.as_deref(),
                name,
                target.status,
                options,
                &UserInfo::admin(),
                |current| patched(kind, &patch, PatchMeta::of(&target.rt), current),
            )
            .await?
    };
    let warnings = [warnings, stored.warnings].concat();
    let object = conversion::one_to_version(&target.rt, stored.object).await?;
    Ok(with_warnings(
        respond(if existed { 200 } else { 201 }, &object),
        &warnings,
    ))
}

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

/// A response with a `Warning: 299 - "…"` header per warning, as kube-apiserver sends them.
/// `response` with `warnings` as `Warning` headers, deduplicated and truncated as
/// kube-apiserver sends them ([`crate::warnings`]).
fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for value in crate::warnings::headers(warnings) {
        response.headers_mut().append(header::WARNING, value);
    }
    response
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| {
            accept
                .split(',')
                .next()
                .is_some_and(|first| first.contains("as=Table"))
        })
}

/// The objects as a `meta.k8s.io/v1` Table when the client asked for one (kubectl get), else
/// the single object unchanged.
fn maybe_table(
    rt: &ResourceType,
    mut objects: Vec<Arc<Value>>,
    list_meta: Option<Value>,
    table: bool,
    params: &Params,
) -> Arc<Value> {
    if !table {
        return objects.pop().unwrap_or_default();
    }
    Arc::new(printers::table(
        rt,
        objects,
        list_meta.unwrap_or_else(|| json!({})),
        params.get("includeObject").unwrap_or("Metadata"),
    ))
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

async fn watch(
    server: Arc<ApiServer>,
    target: Target,
    params: &Params,
    table: bool,
    fault: Option<crate::faults::Fault>,
) -> Result<Response, ApiError> {
    use crate::faults::Fault;
    if fault == Some(Fault::ExpireWatch) {
        let err = ApiError::gone("too old resource version (injected fault)");
        let line = watch_line("ERROR", &err.status());
        return Ok(stream_response(futures::stream::iter([line])));
    }
    let (labels, fields) = params.selectors(&target.rt)?;
    let from = match params.get("resourceVersion") {
        None | Some("0") => WatchFrom::Now,
        Some(rv) => WatchFrom::After(
            rv.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let bookmarks = params.flag("allowWatchBookmarks");
    let timeout = match params.get("timeoutSeconds") {
        Some(t) => match t
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?
        {
            0 => DEFAULT_WATCH_TIMEOUT,
            seconds => Duration::from_secs(seconds),
        },
        None => DEFAULT_WATCH_TIMEOUT,
    };
    let timeout = match fault {
        Some(Fault::EndWatch(after)) => timeout.min(after),
        _ => timeout,
    };
    // Streaming lists (WatchList): the current objects as ADDED events, then a BOOKMARK marking
    // their end.
    let initial_events = params.flag("sendInitialEvents");
    if initial_events && from != WatchFrom::Now {
        return Err(ApiError::invalid(
            "",
            "",
            "",
            vec![(
                "sendInitialEvents".into(),
                "Forbidden: sendInitialEvents is supported with resourceVersion \"\" or \"0\" only"
                    .into(),
            )],
        ));
    }
    let include = params.get("includeObject").map(str::to_owned);
    // A resourceVersion the store has not reached yet: wait for it a while, as kube-apiserver's
    // watch cache does, then answer 504 "Too large resource version".
    let waiting = tokio::time::Instant::now() + FRESHNESS_WAIT;
    let mut started = server.store.watch(&target.rt, from);
    while matches!(&started, Err(err) if err.code == 504) && tokio::time::Instant::now() < waiting {
        tokio::time::sleep(Duration::from_millis(50)).await;
        started = server.store.watch(&target.rt, from);
    }
    let start = match started {
        Ok(start) => start,
        // kube-apiserver reports an expired watch as an ERROR event in a 200 stream.
        Err(err) if err.code == 410 => {
            let line = watch_line("ERROR", &err.status());
            return Ok(stream_response(futures::stream::iter([line])));
        }
        Err(err) => return Err(err),
    };
    // Each line with when it was made, for a `slow-watch` fault to hold it back by.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Bytes)>(64);
    let lag = match fault {
        Some(Fault::SlowWatch(delay)) => Some(delay),
        _ => None,
    };
    let rt = target.rt.clone();
    let namespace = target.namespace.clone();
    let open = server
        .metrics
        .watch_opened(&rt.group, &rt.version, &rt.plural, namespace.is_some());
    tokio::spawn(async move {
        // Counted as open until the stream ends.
        let _open = open;
        let params = Params(
            include
                .map(|i| HashMap::from([("includeObject".to_owned(), i)]))
                .unwrap_or_default(),
        );
        let tx = tx;
        let send = async |line: Bytes| tx.send((tokio::time::Instant::now(), line)).await;
        let mut feed = start.feed;
        let mut last_rv = start.resource_version;
        let render = async |kind: &str, change: &crate::store::Change| -> Result<Bytes, Bytes> {
            let served = Store::served(&rt, &change.object);
            let served = conversion::one_to_version(&rt, served)
                .await
                .map_err(|err| watch_line("ERROR", &err.status()))?;
            Ok(if table {
                watch_line(kind, &maybe_table(&rt, vec![served], None, true, &params))
            } else if Arc::ptr_eq(&served, &change.object) {
                // Served as stored: every watch shares one encoding of the object.
                watch_line_encoded(kind, change.object_json())
            } else {
                watch_line(kind, &served)
            })
        };
        // A CRD change that changes this type (its schema, its conversion) ends the watch, as
        // kube-apiserver ends the watches of the storage it replaces: clients watch again.
        let registry = server.store.registry();
        let mut generation = registry.generation();
        let mut type_changed = || {
            let now = registry.generation();
            if now == generation {
                return false;
            }
            generation = now;
            registry
                .by_plural(&rt.group, &rt.version, &rt.plural)
                .as_ref()
                != Some(&rt)
        };
        let matches = |o: &Value| labels.matches_object(o) && fields.matches_object(o);
        let in_scope = |ns: &str| namespace.as_deref().is_none_or(|n| n == ns);
        for change in start.backlog {
            if in_scope(&change.key.namespace)
                && let Some(kind) = event_kind(&change, &matches)
            {
                let (line, failed) = match render(kind, &change).await {
                    Ok(line) => (line, false),
                    Err(error) => (error, true),
                };
                if send(line).await.is_err() || failed {
                    return;
                }
            }
        }
        if initial_events {
            let end = json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": {
                "resourceVersion": last_rv.to_string(),
                "annotations": {"k8s.io/initial-events-end": "true"}}});
            if send(watch_line("BOOKMARK", &end)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut stopped = server.stopped.clone();
        let mut bookmark = tokio::time::interval(server.bookmark_interval);
        bookmark.tick().await;
        // Only a CRD's change changes a served type: built-in kinds need no timer.
        let custom = rt.schema.is_some();
        let mut registry_check = tokio::time::interval(REGISTRY_CHECK);
        registry_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let line = tokio::select! {
                _ = &mut deadline => return,
                _ = stopped.changed() => return,
                // The client went away: stop now rather than at the next event.
                _ = tx.closed() => return,
                _ = bookmark.tick(), if bookmarks => {
                    // Only what this watch has already passed on: a bookmark must never run
                    // ahead of events still queued for it.
                    watch_line("BOOKMARK", &json!({"kind": rt.kind, "apiVersion": rt.api_version(),
                        "metadata": {"resourceVersion": last_rv.to_string()}}))
                }
                // The registry changes just after the CRD's own event: look again a moment later.
                _ = registry_check.tick(), if custom => {
                    if type_changed() {
                        return;
                    }
                    continue;
                }
                received = feed.recv() => match received {
                    Ok(change) => {
                        last_rv = change.rv;
                        if type_changed() {
                            return;
                        }
                        if change.key.resource != rt.storage_key() || !in_scope(&change.key.namespace) {
                            continue;
                        }
                        match event_kind(&change, &matches) {
                            Some(kind) => match render(kind, &change).await {
                                Ok(line) => line,
                                Err(error) => {
                                    let _ = send(error).await;
                                    return;
                                }
                            },
                            None => continue,
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let err = ApiError::gone("the watch fell too far behind; relist");
                        let _ = send(watch_line("ERROR", &err.status())).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
            };
            if send(line).await.is_err() {
                return; // the client went away
            }
        }
    });
    let lines =
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).then(move |(made, line)| async move {
            if let Some(lag) = lag {
                tokio::time::sleep_until(made + lag).await;
            }
            line
        });
    Ok(stream_response(lines))
}

/// How often a watch of a custom resource checks whether its CRD changed (beyond the check at
/// every change the store makes).
const REGISTRY_CHECK: Duration = Duration::from_secs(1);

/// ADDED/MODIFIED/DELETED for a change as a selector-filtered watch sees it: an object that
/// starts matching is ADDED, one that stops matching is DELETED.
fn event_kind(
    change: &crate::store::Change,
    matches: &impl Fn(&Value) -> bool,
) -> Option<&'static str> {
    let now = matches(&change.object);
    match change.change {
        ChangeType::Added => now.then_some("ADDED"),
        ChangeType::Deleted => now.then_some("DELETED"),
        ChangeType::Modified => {
            let before = change.old.as_deref().is_some_and(matches);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

fn watch_line(kind: &str, object: &Value) -> Bytes {
    watch_line_encoded(kind, &crate::json::object_to_vec(object))
}

/// A watch event line around an object already encoded as JSON.
fn watch_line_encoded(kind: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + kind.len() + 24);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn stream_response(stream: impl futures::Stream<Item = Bytes> + Send + 'static) -> Response {
    let body = Body::from_stream(stream.map(Ok::<_, Infallible>));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;
    use crate::{Registry, ensure_namespaces};

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_ends_should_time_out_rather_than_hold_its_connection() {
        let body = Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>());
        let request = Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(body)
            .expect("request");
        let response = app().oneshot(request).await.expect("answered");
        assert_eq!(response.status(), 504);
    }

    fn app() -> axum::Router {
        let store = Arc::new(Store::new(Arc::new(Registry::new())));
        ensure_namespaces(&store).expect("namespaces");
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        let server = Arc::new(ApiServer {
            admission: Arc::new(crate::admission::Admission::new(store.clone())),
            metrics: Default::default(),
            store,
            address: "127.0.0.1:0".into(),
            stopped,
            bookmark_interval: BOOKMARK_INTERVAL,
            openapi: Default::default(),
            faults: Default::default(),
            audit: None,
        });
        axum::Router::new().fallback(handle).with_state(server)
    }

    const SEGMENTS: &[&str] = &[
        "api",
        "apis",
        "v1",
        "apps",
        "namespaces",
        "default",
        "configmaps",
        "pods",
        "status",
        "x",
        "deployments",
        "%00",
        "..",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Whatever the path, method, content type and body, the server answers with a 2xx or a
        /// 4xx `Status` and never fails internally or panics.
        #[test]
        fn requests_should_never_fail_internally(
            path in proptest::collection::vec(proptest::sample::select(SEGMENTS), 0..7),
            method in proptest::sample::select(&["GET", "POST", "PUT", "PATCH", "DELETE"][..]),
            content_type in proptest::sample::select(&["application/json", "application/vnd.kubernetes.protobuf", "application/merge-patch+json",
                "application/json-patch+json", "application/strategic-merge-patch+json", "application/apply-patch+yaml", "text/plain"][..]),
            body in proptest::prop_oneof![
                proptest::collection::vec(proptest::num::u8::ANY, 0..64),
                proptest::strategy::Just(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#.to_vec()),
                proptest::strategy::Just(br#"[{"op":"add","path":"/x","value":1}]"#.to_vec()),
                proptest::strategy::Just(br#"{"metadata":{"labels":{"a":"b"}}}"#.to_vec()),
            ],
            query in proptest::sample::select(&["", "?labelSelector=a%3Db", "?watch=1&timeoutSeconds=1&resourceVersion=1", "?limit=1", "?fieldSelector=x"][..]),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let uri = format!("/{}{query}", path.join("/"));
            let Ok(request) = Request::builder().method(method).uri(&uri).header("content-type", content_type).body(Body::from(body)) else {
                return Ok(());
            };
            let response = runtime.block_on(app().oneshot(request)).expect("infallible");
            let code = response.status().as_u16();
            proptest::prop_assert!(code < 500, "{method} {uri} -> {code}");
        }

        /// Arbitrary query parameters a client controls, on reads and writes of a real
        /// collection: never a failure of the server, never a panic.
        #[test]
        fn arbitrary_query_parameters_should_never_fail_internally(
            params in proptest::collection::vec((proptest::sample::select(QUERY_KEYS), ".{0,16}"), 0..5),
            method in proptest::sample::select(&["GET", "POST", "DELETE"][..]),
            collection in proptest::sample::select(&["/api/v1/namespaces/default/configmaps", "/api/v1/namespaces", "/apis/apps/v1/deployments"][..]),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let query: String = form_urlencoded::Serializer::new(String::new())
                .extend_pairs(params.iter().map(|(k, v)| (*k, v.as_str())))
                .finish();
            let uri = format!("{collection}?{query}");
            let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#.to_vec();
            let Ok(request) = Request::builder().method(method).uri(&uri).header("content-type", "application/json").body(Body::from(body)) else {
                return Ok(());
            };
            let response = runtime.block_on(app().oneshot(request)).expect("infallible");
            let code = response.status().as_u16();
            proptest::prop_assert!(code < 500, "{method} {uri} -> {code}");
        }

        /// Arbitrary JSON patches (any operation, pointer and value) on a stored object: a
        /// 2xx or a 4xx, never a panic, and never larger than the copy budget allows.
        #[test]
        fn arbitrary_json_patches_should_be_applied_or_refused(ops in proptest::collection::vec(json_patch_op(), 0..24)) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let app = app();
            let create = Request::builder().method("POST").uri("/api/v1/namespaces/default/configmaps")
                .header("content-type", "application/json")
                .body(Body::from(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"},"data":{"a":"0123456789"}}"#.to_vec()))
                .expect("request");
            let created = runtime.block_on(app.clone().oneshot(create)).expect("infallible");
            proptest::prop_assert_eq!(created.status().as_u16(), 201);
            let body = serde_json::to_vec(&ops).expect("encode");
            let patch = Request::builder().method("PATCH").uri("/api/v1/namespaces/default/configmaps/p")
                .header("content-type", "application/json-patch+json")
                .body(Body::from(body)).expect("request");
            let response = runtime.block_on(app.oneshot(patch)).expect("infallible");
            let code = response.status().as_u16();
            proptest::prop_assert!(code < 500, "{ops:?} -> {code}");
        }
    }

    const QUERY_KEYS: &[&str] = &[
        "labelSelector",
        "fieldSelector",
        "resourceVersion",
        "resourceVersionMatch",
        "limit",
        "continue",
        "timeoutSeconds",
        "dryRun",
        "fieldManager",
        "fieldValidation",
        "propagationPolicy",
        "gracePeriodSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
        "force",
        "pretty",
    ];

    /// Any JSON value, a few levels deep.
    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z/~]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// One RFC 6902 operation over pointers into a ConfigMap, or something almost like one.
    fn json_patch_op() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let pointer = proptest::sample::select(
            &[
                "",
                "/",
                "/data",
                "/data/a",
                "/data/b",
                "/data/-",
                "/metadata",
                "/metadata/name",
                "/metadata/labels",
                "/x/0",
                "/x/-",
                "/a~1b",
                "/~2",
                "/data/a/0",
                "/kind",
            ][..],
        );
        let op = proptest::sample::select(
            &["add", "remove", "replace", "move", "copy", "test", "nope"][..],
        );
        (op, pointer.clone(), pointer, json_value()).prop_map(
            |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
        )
    }
}
