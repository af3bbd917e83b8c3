//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`), as kube-apiserver's
//! `webhookConverter` calls them: the objects a request reads in a version other than the one
//! they are stored in go to the webhook in one `apiextensions.k8s.io/v1` `ConversionReview`, and
//! its answer is checked (same count, the desired `apiVersion`, the same kind, name, namespace
//! and uid) and trusted only for the object's body, labels and annotations — the rest of
//! `metadata` is the stored object's.
//!
//! The store keeps each object in the version it was last written in, not in the CRD's storage
//! version: only a read in another version — or a write in another version, which first
//! re-encodes the stored object in the version written (`Store::reencode`) —
//! calls the webhook. A CRD whose strategy is `None` changes only `apiVersion`
//! (`Store::served`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;
use crate::webhook::{post, review_response};
use krec_core::error::ApiError;
use krec_core::json::Pointer;
use krec_core::schema;

/// How long a conversion may take (kube-apiserver's webhook client's default timeout).
const TIMEOUT: Duration = Duration::from_secs(30);

/// `objects` of `rt`'s resource as answered in `rt`'s version: those already in it pass
/// through; the others are converted by `rt`'s conversion webhook in one review and given the
/// version's schema defaults. Without a conversion webhook, `objects` unchanged.
pub async fn to_version(
    rt: &ResourceType,
    mut objects: Vec<Arc<Value>>,
) -> Result<Vec<Arc<Value>>, ApiError> {
    let Some(webhook) = &rt.conversion else {
        return Ok(objects);
    };
    let pending: Vec<usize> = (0..objects.len())
        .filter(|&i| {
            objects[i]
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_none_or(|v| !rt.is_api_version(v))
        })
        .collect();
    let Some(&first) = pending.first() else {
        return Ok(objects);
    };
    let from = |key: &str| {
        objects[first]
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    // As Go prints the converted object's GroupVersionKind.
    let gvk = format!("{}, Kind={}", from("apiVersion"), from("kind"));
    let desired = rt.api_version();
    let failed = |message: String| {
        ApiError::internal(format!("conversion webhook for {gvk} failed: {message}"))
    };
    let uid = uuid::Uuid::new_v4().to_string();
    // Objects as clients see them (`fieldsV1` as JSON, not the stored text).
    let sent: Vec<_> = pending
        .iter()
        .map(|&i| crate::managed::expanded(&objects[i]))
        .collect();
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent}});
    let url = webhook.client.url(TIMEOUT).map_err(|e| failed(e.0))?;
    let answer = tokio::time::timeout(TIMEOUT, post(url, &webhook.client.ca_bundle, &review))
        .await
        .map_err(|_| failed(format!("Post \"{url}\": context deadline exceeded")))?
        .map_err(|e| failed(e.0))?;
    let converted = converted_objects(&uid, &answer).map_err(failed)?;
    if converted.len() != pending.len() {
        return Err(ApiError::internal(format!(
            "conversion webhook for {gvk} returned {} objects, expected {}",
            converted.len(),
            pending.len()
        )));
    }
    for (index, (i, mut object)) in pending.into_iter().zip(converted).enumerate() {
        accept(&objects[i], &mut object, &desired).map_err(|e| {
            ApiError::internal(format!(
                "conversion webhook for {gvk} returned invalid converted object at index {index}: {e}"
            ))
        })?;
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, &mut object);
        }
        objects[i] = Arc::new(object);
    }
    Ok(objects)
}

/// One object in `rt`'s version (see [`to_version`]).
pub async fn one_to_version(rt: &ResourceType, object: Arc<Value>) -> Result<Arc<Value>, ApiError> {
    if rt.conversion.is_none() {
        return Ok(object);
    }
    let mut converted = to_version(rt, vec![object]).await?;
    converted
        .pop()
        .ok_or_else(|| ApiError::internal("the conversion returned no object"))
}

/// The `convertedObjects` of a `ConversionReview` answer, checked as kube-apiserver checks it.
fn converted_objects(uid: &str, answer: &[u8]) -> Result<Vec<Value>, String> {
    let response = review_response(
        answer,
        "apiextensions.k8s.io",
        "ConversionReview",
        uid,
        "no response provided",
    )?;
    let status = response.at("/result/status").and_then(Value::as_str);
    if status != Some("Success") {
        return Err(
            match response.at("/result/message").and_then(Value::as_str) {
                Some(message) if !message.is_empty() => message.to_owned(),
                _ => format!(
                    "response.result.status was '{}', not 'Success'",
                    status.unwrap_or_default()
                ),
            },
        );
    }
    Ok(response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Check a converted object against its original and give it the original's metadata, keeping
/// only the webhook's labels and annotations (`validateConvertedObject`, `restoreObjectMeta`).
fn accept(original: &Value, converted: &mut Value, desired: &str) -> Result<(), String> {
    let text = |object: &Value, pointer: &str| {
        object
            .at(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let got = text(converted, "/apiVersion");
    if got != desired {
        return Err(format!(
            "invalid groupVersion (expected {desired}, received {got})"
        ));
    }
    for (what, pointer) in [
        ("kind", "/kind"),
        ("name", "/metadata/name"),
        ("namespace", "/metadata/namespace"),
        ("UID", "/metadata/uid"),
    ] {
        let (expected, got) = (text(original, pointer), text(converted, pointer));
        if expected != got {
            return Err(format!("must have the same {what}: {expected} != {got}"));
        }
    }
    let returned = converted
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .ok_or("missing metadata in converted object")?;
    let mut metadata: Map<String, Value> = original
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations"] {
        match returned.get(field).filter(|v| !v.is_null()) {
            None => {
                metadata.remove(field);
            }
            Some(Value::Object(map)) => {
                if let Some((key, _)) = map.iter().find(|(_, v)| !v.is_string()) {
                    return Err(format!(
                        "metadata.{field}[{key}] must be a string in the converted object"
                    ));
                }
                metadata.insert(field.to_owned(), Value::Object(map.clone()));
            }
            Some(_) => {
                return Err(format!(
                    "invalid metadata.{field} in the converted object: not a map"
                ));
            }
        }
    }
    converted["metadata"] = Value::Object(metadata);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn foo(version: &str) -> Value {
        json!({"apiVersion": format!("samplecontroller.k8s.io/{version}"), "kind": "Foo",
            "metadata": {"name": "a", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"x": "1"}},
            "spec": {"replicas": 1}})
    }

    #[test]
    fn accept_should_keep_the_stored_metadata_but_the_webhooks_labels() {
        let mut converted = foo("v1beta1");
        converted["metadata"]["resourceVersion"] = json!("999");
        converted["metadata"]["labels"] = json!({"y": "2"});
        accept(
            &foo("v1alpha1"),
            &mut converted,
            "samplecontroller.k8s.io/v1beta1",
        )
        .expect("valid");
        assert_eq!(converted["metadata"]["resourceVersion"], "7");
        assert_eq!(converted["metadata"]["labels"], json!({"y": "2"}));
        let mut renamed = foo("v1beta1");
        renamed["metadata"]["name"] = json!("b");
        assert_eq!(
            accept(
                &foo("v1alpha1"),
                &mut renamed,
                "samplecontroller.k8s.io/v1beta1"
            ),
            Err("must have the same name: a != b".into())
        );
        let mut wrong = foo("v1alpha1");
        assert!(
            accept(
                &foo("v1alpha1"),
                &mut wrong,
                "samplecontroller.k8s.io/v1beta1"
            )
            .is_err_and(|e| e.contains("invalid groupVersion"))
        );
    }

    #[test]
    fn answers_should_be_checked_as_kube_apiserver_checks_them() {
        let answer = |response: Value| {
            serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1",
                "kind": "ConversionReview", "response": response}))
            .expect("json")
        };
        assert_eq!(
            converted_objects(
                "u",
                &answer(json!({"uid": "u", "result": {"status": "Success"},
                "convertedObjects": [{"a": 1}]}))
            ),
            Ok(vec![json!({"a": 1})])
        );
        assert_eq!(
            converted_objects(
                "u",
                &answer(json!({"uid": "v", "result": {"status": "Success"}}))
            ),
            Err("expected response.uid=\"u\", got \"v\"".into())
        );
        assert_eq!(
            converted_objects(
                "u",
                &answer(json!({"uid": "u", "result": {"status": "Failure", "message": "no"}}))
            ),
            Err("no".into())
        );
    }
}
