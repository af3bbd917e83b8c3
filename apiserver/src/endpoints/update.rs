//! PUT: replacing an object or its status.

use super::*;

/// PUT: decode, check the fields, admit and store the whole object (or its status).
pub(super) async fn update(
    server: &ApiServer,
    user: &UserInfo,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (mut object, duplicates) = decode_body(body, headers).await?;
    let warnings = check_fields(&target.rt, &mut object, duplicates, params)?;
    let name = target.name.as_deref().unwrap_or_default();
    let before = target.crd_before(server);
    let updated = server
        .admission
        .update(
            &target.rt,
            target.namespace.as_deref(),
            name,
            object,
            target.status,
            params.write_options(headers),
            user,
        )
        .await?;
    let formats = target.crd_warnings(&updated.object, before.as_deref());
    let warnings = [warnings, updated.warnings, formats].concat();
    let object = conversion::one_to_version(&target.rt, updated.object).await?;
    Ok(with_annotations(
        with_warnings(respond(200, &object), &warnings),
        updated.annotations,
    ))
}
