//! The `scale` subresource (`autoscaling/v1` `Scale`) of the kinds that have one.

use super::*;

/// How a scale write changes the object it scales.
type ScaleChange<'a> = dyn Fn(&Value) -> Result<Value, ApiError> + 'a;

/// `GET`, `PUT` and `PATCH` of `…/{name}/scale`: the object's `Scale`, and writes of its replicas.
pub(super) async fn scale_subresource(
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
