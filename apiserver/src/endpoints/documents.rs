//! `/openapi/v2` and `/openapi/v3`: the documents as kube-openapi's handlers serve them (hashed
//! URLs cached forever, `ETag`s, JSON or gnostic protobuf).

use super::*;

/// A group-version's OpenAPI v3 document, as kube-openapi's handler serves it: a URL with the
/// document's current `hash` may be cached forever, one with an old hash is redirected to the
/// current one; 304 when the client holds the document (`If-None-Match`).
pub(super) fn get_v3_document(
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
pub(super) fn expires_in_a_year() -> String {
    let at = std::time::SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
    httpdate::fmt_http_date(at)
}

pub(super) fn document_response(
    headers: &HeaderMap,
    doc: openapi::Document,
    media_type: &str,
) -> Response {
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
pub(super) fn openapi_v2_response(
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

/// `/openapi/v2`, to GET only.
pub(super) fn v2(
    server: &ApiServer,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return discovery::get_only(method, path, || Value::Null);
    }
    let (json, proto) = server.openapi.v2(server.store.registry());
    openapi_v2_response(headers, json, proto)
}

/// A group-version's `/openapi/v3` document.
pub(super) fn v3(
    server: &ApiServer,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    group: &str,
    version: &str,
) -> Result<Response, ApiError> {
    let doc = server
        .openapi
        .v3(server.store.registry(), group, version)
        .ok_or_else(|| ApiError::no_route(uri.path()))?;
    get_v3_document(method, uri, headers, doc)
}
