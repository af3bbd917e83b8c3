//! The `AdmissionReview` codec: the request a guest is asked about, read from the review's
//! body with its objects left as slices of it, and the response its verdict becomes.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::guest::Review;
use crate::guest::bindings::WitGvk;
use crate::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo, WitVerdict};

/// An `AdmissionReview` the guest cannot be asked about, or a verdict that cannot be answered.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct BadReview(String);

impl From<&str> for BadReview {
    fn from(problem: &str) -> Self {
        BadReview(problem.to_owned())
    }
}

/// An `AdmissionReview` as received: the fields the guest is asked about, its objects left as
/// slices of the body's text.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReviewIn<'a> {
    /// The review's `apiVersion`, which the response repeats.
    pub(super) api_version: Option<String>,
    kind: Option<Value>,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

/// An `AdmissionReview`'s `request`.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RequestIn<'a> {
    uid: Option<String>,
    kind: GroupVersionKindIn,
    resource: ResourceIn,
    sub_resource: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    operation: Option<String>,
    user_info: UserInfoIn,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
    dry_run: Option<bool>,
}

/// A request's `kind`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct GroupVersionKindIn {
    group: String,
    version: String,
    kind: String,
}

/// A request's `resource` (only its name is asked for).
#[derive(Deserialize, Default)]
#[serde(default)]
struct ResourceIn {
    resource: String,
}

/// A request's `userInfo`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct UserInfoIn {
    username: String,
    groups: Vec<String>,
}

/// The WIT request of an `AdmissionReview`, and for a mutation the request's object (the
/// guest's patched object is diffed against it).
pub(super) fn admission_request<'a>(
    review: ReviewIn<'a>,
    which: Review,
) -> Result<(WitAdmissionRequest, Option<&'a str>), BadReview> {
    if review.kind.as_ref().and_then(Value::as_str) != Some("AdmissionReview") {
        return Err(BadReview(format!(
            "expected kind AdmissionReview, got {}",
            review.kind.unwrap_or(Value::Null)
        )));
    }
    let request = review.request.ok_or("the review has no request")?;
    let operation = match request.operation.as_deref() {
        Some("CREATE") => WitOperation::Create,
        Some("UPDATE") => WitOperation::Update,
        Some("DELETE") => WitOperation::Delete,
        Some("CONNECT") => WitOperation::Connect,
        other => return Err(BadReview(format!("unknown operation {other:?}"))),
    };
    // An object is a JSON object; `null` (or anything else) is none.
    let object = |raw: Option<&'a RawValue>| raw.map(RawValue::get).filter(|o| o.starts_with('{'));
    let (object, old_object) = (object(request.object), object(request.old_object));
    let wit = WitAdmissionRequest {
        uid: request.uid.ok_or("the request has no uid")?,
        kind: WitGvk {
            group: request.kind.group,
            version: request.kind.version,
            kind: request.kind.kind,
        },
        resource: request.resource.resource,
        sub_resource: request.sub_resource,
        name: request.name.filter(|n| !n.is_empty()),
        namespace: request.namespace.filter(|n| !n.is_empty()),
        operation,
        user_info: WitUserInfo {
            username: request.user_info.username,
            groups: request.user_info.groups,
        },
        object: object.map(str::to_owned),
        old_object: old_object.map(str::to_owned),
        dry_run: request.dry_run.unwrap_or(false),
    };
    Ok((wit, object.filter(|_| which == Review::Mutate)))
}

/// The review's `response` for a verdict: status, warnings, audit annotations, and for a
/// mutation the JSON patch from the request's object to the guest's.
pub(super) fn response(
    uid: &str,
    which: Review,
    object: Option<&str>,
    verdict: WitVerdict,
) -> Result<Value, BadReview> {
    let mut response = json!({"uid": uid, "allowed": verdict.allowed});
    if !verdict.allowed || verdict.message.is_some() || verdict.code.is_some() {
        // Without a code, the API server answers 400 (kube-apiserver's `ToStatusErr`).
        let mut status = json!({});
        if let Some(code) = verdict.code {
            status["code"] = json!(code);
        }
        if let Some(message) = &verdict.message {
            status["message"] = json!(message);
        }
        if let Some(reason) = &verdict.reason {
            status["reason"] = json!(reason);
        }
        response["status"] = status;
    }
    if !verdict.warnings.is_empty() {
        response["warnings"] = json!(verdict.warnings);
    }
    if !verdict.audit_annotations.is_empty() {
        let annotations: BTreeMap<String, String> = verdict.audit_annotations.into_iter().collect();
        response["auditAnnotations"] = json!(annotations);
    }
    if let Some(patched) = verdict.patched.filter(|_| verdict.allowed) {
        if which == Review::Validate {
            return Err(BadReview(
                "validate returned a patched object: only mutate may".into(),
            ));
        }
        let original: Value = object
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| BadReview(format!("the request's object: {e}")))?
            .ok_or("a patched object, but the request has no object (a delete)")?;
        let patched: Value = serde_json::from_str(&patched)
            .map_err(|e| BadReview(format!("the patched object is not JSON: {e}")))?;
        let patch = json_patch::diff(&original, &patched);
        if !patch.0.is_empty() {
            let text = serde_json::to_string(&patch).map_err(|e| BadReview(e.to_string()))?;
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    Ok(response)
}
