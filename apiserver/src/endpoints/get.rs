//! GET of one object and of a collection (list: selectors, pages, `resourceVersion` semantics).

use super::*;

/// GET of one object, in the requested version (and as a `Table` when asked).
pub(super) async fn get(
    server: &ApiServer,
    target: &Target,
    params: &Params,
    table: bool,
) -> Result<Response, ApiError> {
    let object = server.store.get(
        &target.rt,
        target.namespace.as_deref(),
        target.name.as_deref().unwrap_or_default(),
    )?;
    let object = conversion::one_to_version(&target.rt, object).await?;
    Ok(respond(
        200,
        &maybe_table(&target.rt, vec![object], None, table, params),
    ))
}

pub(super) async fn list(
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
    krec_core::json::write(&mut bytes, &Value::from(target.rt.list_kind.as_str()));
    bytes.extend_from_slice(b",\"apiVersion\":");
    krec_core::json::write(&mut bytes, &Value::from(target.rt.api_version()));
    bytes.extend_from_slice(b",\"metadata\":");
    krec_core::json::write(&mut bytes, &metadata);
    bytes.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            bytes.push(b',');
        }
        krec_core::json::write_object(&mut bytes, item);
    }
    bytes.extend_from_slice(b"]}");
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response())
}
