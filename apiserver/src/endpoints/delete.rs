//! DELETE of an object and of a collection, with their `DeleteOptions`.

use super::*;

/// DELETE of one object, admitted, with the request's `DeleteOptions`.
pub(super) async fn delete(
    server: &ApiServer,
    user: &UserInfo,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let options = delete_options(params, headers, body)?;
    let name = target.name.as_deref().unwrap_or_default();
    let deleted = server
        .admission
        .delete(
            &target.rt,
            target.namespace.as_deref(),
            name,
            &options,
            user,
        )
        .await?;
    let object = conversion::one_to_version(&target.rt, deleted.object).await?;
    Ok(with_annotations(
        with_warnings(respond(200, &object), &deleted.warnings),
        deleted.annotations,
    ))
}

/// DELETE of a collection: each selected object admitted and deleted as kube-apiserver's
/// `DeleteCollection` does; the deleted objects answered as a list.
pub(super) async fn delete_collection(
    server: &ApiServer,
    user: &UserInfo,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (labels, fields) = params.selectors(&target.rt)?;
    let options = delete_options(params, headers, body)?;
    let (items, warnings) = server
        .admission
        .delete_collection(
            &target.rt,
            target.namespace.as_deref(),
            (&labels, &fields),
            &options,
            user,
        )
        .await?;
    let items = conversion::to_version(&target.rt, items).await?;
    let list = json!({"kind": target.rt.list_kind, "apiVersion": target.rt.api_version(),
        "metadata": {"resourceVersion": server.store.resource_version().to_string()}, "items": items});
    Ok(with_warnings(respond(200, &list), &warnings))
}

pub(super) fn delete_options(
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
