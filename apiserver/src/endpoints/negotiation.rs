//! Content negotiation: reading a request body (bounded, timed, drained when refused), decoding
//! JSON, YAML and protobuf bodies, answering in protobuf or as a `Table` when asked, and
//! warnings as headers.

use super::*;

/// The request body, at most [`MAX_BODY_BYTES`]; a larger one is refused as soon as it is
/// known to be (its `Content-Length`, or the byte past the limit), the rest left to drain.
pub(super) async fn read_body(body: Body, headers: &HeaderMap) -> Result<Bytes, Unread> {
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
pub(super) const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// The unread rest of a body, to drain — unless the client waits for `100 Continue` before it
/// sends: draining would ask it for the body nobody wants.
pub(super) fn drainable(
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
pub(super) struct Unread(ApiError, Option<axum::body::BodyDataStream>);

/// How much of the unread rest of an over-size body is read and discarded after the 413 is
/// sent, and for how long at most: a client that sends its whole body before it reads (curl
/// over HTTP/2, most HTTP/1.1 clients) then reads the `Status` rather than a reset stream. A
/// body larger still, or slower, is cut.
pub(super) const MAX_DRAINED_BYTES: usize = 256 << 20;

/// See [`MAX_DRAINED_BYTES`].
pub(super) const MAX_DRAIN_TIME: Duration = Duration::from_secs(30);

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

/// Whether the client accepts Kubernetes' protobuf and not JSON (kube-apiserver answers JSON
/// whenever it is acceptable, as every client that can send protobuf also reads JSON).
pub(super) fn protobuf_only(headers: &HeaderMap) -> bool {
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
pub(super) async fn as_protobuf(response: Response) -> Response {
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

/// A request body as a value, with the fields its JSON text set twice (none for YAML or
/// protobuf, which cannot be scanned for them).
pub(super) async fn decode_body(
    body: &Bytes,
    headers: &HeaderMap,
) -> Result<(Value, Vec<String>), ApiError> {
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
/// YAML is first checked for its nesting ([`krec_core::yaml::check_depth`]); a body larger than
/// [`INLINE_YAML_BYTES`] is decoded on a blocking thread, at most [`YAML_DECODERS`] at once, so
/// that a few large bodies cannot hold the threads every other request is served on.
pub(super) async fn yaml_or_json(
    body: &Bytes,
) -> Result<(Value, Vec<String>), krec_core::yaml::YamlError> {
    if looks_like_json_object(body)
        && let Ok(decoded) = field_validation::decode_json(body)
    {
        return Ok(decoded);
    }
    if body.len() <= INLINE_YAML_BYTES {
        return Ok((krec_core::yaml::from_slice(body)?, Vec::new()));
    }
    static DECODERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(YAML_DECODERS);
    let permit = DECODERS.acquire().await;
    let body = body.clone();
    let decoded = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        krec_core::yaml::from_slice(&body)
    })
    .await;
    match decoded {
        Ok(decoded) => Ok((decoded?, Vec::new())),
        // The decoder panicked: report it as unreadable rather than take the server down.
        Err(err) => Err(krec_core::yaml::YamlError::Syntax(
            serde::de::Error::custom(format!("decoding failed: {err}")),
        )),
    }
}

/// Largest YAML body decoded on the request's own task (a few milliseconds of parsing at most).
pub(super) const INLINE_YAML_BYTES: usize = 64 << 10;

/// Larger YAML bodies decoded at once, each on a blocking thread.
pub(super) const YAML_DECODERS: usize = 2;

/// Whether a body's first non-blank character opens a JSON object.
pub(super) fn looks_like_json_object(body: &[u8]) -> bool {
    body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// A response with a `Warning: 299 - "…"` header per warning, as kube-apiserver sends them.
/// `response` with `warnings` as `Warning` headers, deduplicated and truncated as
/// kube-apiserver sends them ([`crate::warnings`]).
pub(super) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for value in crate::warnings::headers(warnings) {
        response.headers_mut().append(header::WARNING, value);
    }
    response
}

/// `response` carrying `annotations` for its request's audit event.
pub(super) fn with_annotations(
    mut response: Response,
    annotations: Vec<(String, String)>,
) -> Response {
    if !annotations.is_empty() {
        response
            .extensions_mut()
            .insert(crate::audit::Annotations(annotations));
    }
    response
}

/// How a read answers, as its `Accept` header asks: the objects, a `Table` (`as=Table`, what
/// `kubectl get` asks for), or the objects' metadata alone (`as=PartialObjectMetadata` and
/// `as=PartialObjectMetadataList`, what client-go's metadata informers and kube-rs's
/// `metadata_watcher` ask for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rendering {
    /// The objects themselves.
    Objects,
    /// A `meta.k8s.io/v1` `Table`.
    Table,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (lists: `PartialObjectMetadataList`).
    Metadata,
}

/// The [`Rendering`] the first JSON entry of the `Accept` header asks for (protobuf entries
/// before it are passed over: this server answers JSON whenever the client takes it).
pub(super) fn rendering(headers: &HeaderMap) -> Rendering {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Rendering::Objects;
    };
    let Some(entry) = accept
        .split(',')
        .find(|entry| entry.split(';').next().unwrap_or("").trim() != protobuf::MEDIA_TYPE)
    else {
        return Rendering::Objects;
    };
    let asked = |name: &str| {
        entry.split(';').skip(1).any(|param| {
            param
                .split_once('=')
                .is_some_and(|(key, value)| key.trim() == "as" && value.trim() == name)
        })
    };
    if asked("Table") {
        Rendering::Table
    } else if asked("PartialObjectMetadata") || asked("PartialObjectMetadataList") {
        Rendering::Metadata
    } else {
        Rendering::Objects
    }
}

/// `object` as a `PartialObjectMetadata`: its kind's name for it and its metadata.
pub(super) fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// One object as `rendering` asks: itself, a one-row Table, or its metadata.
pub(super) fn render_one(
    rt: &ResourceType,
    object: Arc<Value>,
    rendering: Rendering,
    params: &Params,
) -> Arc<Value> {
    match rendering {
        Rendering::Objects => object,
        Rendering::Metadata => Arc::new(partial_metadata(&object)),
        Rendering::Table => Arc::new(crate::registry::table(
            rt,
            vec![object],
            json!({}),
            params.get("includeObject").unwrap_or("Metadata"),
        )),
    }
}
