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
    let options = params.write_options(headers);
    let mut warnings = Vec::new();
    let before = target.crd_before(server);
    // A write in another version than the stored one meets a controller's write in between
    // as a conflict (the object is stored in the other version again): converted again and
    // patched again, as kube-apiserver's GuaranteedUpdate tries again.
    let mut attempt = 0;
    let stored = loop {
        attempt += 1;
        let result = if kind == PatchType::Apply {
            let mut options = options.clone();
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
            let mut patch = patch.clone();
            warnings = check_fields(rt, &mut patch, duplicates.clone(), params)?;
            server
                .admission
                .patch(
                    rt,
                    target.namespace.as_deref(),
                    name,
                    target.status,
                    options,
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
                .await
        } else {
            server
                .admission
                .patch(
                    &target.rt,
                    target.namespace.as_deref(),
                    name,
                    target.status,
                    options.clone(),
                    user,
                    |current| patched(kind, &patch, PatchMeta::of(&target.rt), current),
                )
                .await
        };
        match result {
            Err(err)
                if err.code == 409
                    && attempt < REENCODE_ATTEMPTS
                    && server
                        .store
                        .needs_reencoding(&target.rt, target.namespace.as_deref(), name)
                        .is_some() =>
            {
                in_written_version(server, target).await?;
            }
            result => break result?,
        }
    };
    let formats = target.crd_warnings(&stored.object, before.as_deref());
    let warnings = [warnings, stored.warnings, formats].concat();
    let object = conversion::one_to_version(&target.rt, stored.object).await?;
    Ok(with_annotations(
        with_warnings(respond(if existed { 200 } else { 201 }, &object), &warnings),
        stored.annotations,
    ))
}
