//! POST: creating an object.

use super::*;

/// POST: decode, check the fields, admit and store a new object.
pub(super) async fn create(
    server: &ApiServer,
    user: &UserInfo,
    target: &Target,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (mut object, duplicates) = decode_body(body, headers).await?;
    let warnings = check_fields(&target.rt, &mut object, duplicates, params)?;
    let created = server
        .admission
        .create(
            &target.rt,
            target.namespace.as_deref(),
            object,
            params.write_options(headers),
            user,
        )
        .await?;
    let formats = target.crd_warnings(&created.object, None);
    let warnings = [warnings, created.warnings, formats].concat();
    let object = conversion::one_to_version(&target.rt, created.object).await?;
    Ok(with_annotations(
        with_warnings(respond(201, &object), &warnings),
        created.annotations,
    ))
}
