//! PATCH: JSON patch, merge patch, strategic merge patch and server-side apply, admitted as an
//! update (or a create, for an apply of an object that does not exist).

use super::*;

pub(super) async fn patch(
    server: &ApiServer,
    user: &UserInfo,
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
    let before = target.crd_before(server);
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
                user,
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
                user,
                |current| patched(kind, &patch, PatchMeta::of(&target.rt), current),
            )
            .await?
    };
    let formats = target.crd_warnings(&stored.object, before.as_deref());
    let warnings = [warnings, stored.warnings, formats].concat();
    let object = conversion::one_to_version(&target.rt, stored.object).await?;
    Ok(with_annotations(
        with_warnings(respond(if existed { 200 } else { 201 }, &object), &warnings),
        stored.annotations,
    ))
}
