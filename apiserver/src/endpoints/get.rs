//! GET of one object and of a collection (list: selectors, pages, `resourceVersion` semantics).

use super::*;

/// GET of one object, in the requested version (as a `Table` or its metadata when asked).
pub(super) async fn get(
    server: &ApiServer,
    target: &Target,
    params: &Params,
    rendering: Rendering,
) -> Result<Response, ApiError> {
    let object = server.store.get(
        &target.rt,
        target.namespace.as_deref(),
        target.name.as_deref().unwrap_or_default(),
    )?;
    let object = conversion::one_to_version(&target.rt, object).await?;
    Ok(respond(
        200,
        &render_one(&target.rt, object, rendering, params),
    ))
}

pub(super) async fn list(
    server: &ApiServer,
    target: &Target,
    params: &Params,
    rendering: Rendering,
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
    let (kind, api_version) = match rendering {
        Rendering::Table => {
            return Ok(respond(
                200,
                &crate::registry::table(
                    &target.rt,
                    items,
                    metadata,
                    params.get("includeObject").unwrap_or("Metadata"),
                ),
            ));
        }
        Rendering::Metadata => ("PartialObjectMetadataList", "meta.k8s.io/v1".to_owned()),
        Rendering::Objects => (target.rt.list_kind.as_str(), target.rt.api_version()),
    };
    // Written from the stored objects without copying them into one tree (and each object's
    // `fieldsV1` texts as their JSON).
    let mut bytes = Vec::with_capacity(256 + 2048 * items.len());
    bytes.extend_from_slice(b"{\"kind\":");
    krec_core::json::write(&mut bytes, &Value::from(kind));
    bytes.extend_from_slice(b",\"apiVersion\":");
    krec_core::json::write(&mut bytes, &Value::from(api_version));
    bytes.extend_from_slice(b",\"metadata\":");
    krec_core::json::write(&mut bytes, &metadata);
    bytes.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        if rendering == Rendering::Metadata {
            krec_core::json::write_object(&mut bytes, &partial_metadata(item));
        } else {
            krec_core::json::write_object(&mut bytes, item);
        }
    }
    bytes.extend_from_slice(b"]}");
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}
