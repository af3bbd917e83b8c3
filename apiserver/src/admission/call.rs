//! Calling one webhook: the `admission.k8s.io/v1` `AdmissionReview` kube-apiserver posts, over
//! HTTPS trusting the webhook's `caBundle`, and its answer read and checked as kube-apiserver's
//! `webhook/request` package checks it.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::admissionregistration::{Hook, HookKind};
pub use crate::webhook::CallError;
use crate::webhook::{post, review_response};

/// The review of one request, as sent: everything but the `uid`, which is per call.
#[derive(Clone, Debug)]
pub struct Review {
    /// The `request` object (without `uid`).
    pub request: Value,
}

/// What a webhook answered.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// `response.allowed`.
    pub allowed: bool,
    /// `response.status`, if any.
    pub status: Option<Value>,
    /// The decoded `response.patch` (a JSON patch), if any.
    pub patch: Option<Value>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
}

/// Post `review` to `hook` and read its verdict, within the hook's timeout.
pub async fn call(hook: &Hook, review: &Review) -> Result<Verdict, CallError> {
    let uid = uuid::Uuid::new_v4().to_string();
    let mut request = review.request.clone();
    request["uid"] = json!(uid);
    let body =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let url = hook.client.url(hook.timeout)?;
    // As client-go's `Request.Timeout` sends it: the webhook can stop when the caller has
    // given up.
    let separator = if url.contains('?') { '&' } else { '?' };
    let timed = format!("{url}{separator}timeout={}s", hook.timeout.as_secs());
    let answer = tokio::time::timeout(hook.timeout, post(&timed, &hook.client.ca_bundle, &body))
        .await
        .map_err(|_| {
            CallError(format!(
                "Post \"{url}\": context deadline exceeded (timeout {}s)",
                hook.timeout.as_secs()
            ))
        })??;
    verdict(hook, &uid, &answer)
}

/// Read and check an `AdmissionReview` answer.
fn verdict(hook: &Hook, uid: &str, answer: &[u8]) -> Result<Verdict, CallError> {
    let response = review_response(
        answer,
        "admission.k8s.io",
        "AdmissionReview",
        uid,
        "webhook response was absent",
    )
    .map_err(CallError)?;
    let patch = match (response.get("patch"), response.get("patchType")) {
        (None | Some(Value::Null), _) => None,
        (Some(_), _) if hook.kind == HookKind::Validating => {
            return Err(CallError(
                "validating webhook may not return response.patch".into(),
            ));
        }
        (Some(patch), Some(kind)) if kind == "JSONPatch" => {
            let bytes = patch
                .as_str()
                .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
                .ok_or_else(|| CallError("response.patch is not base64".into()))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| CallError(format!("response.patch is not a JSON patch: {e}")))?,
            )
        }
        (Some(_), None | Some(Value::Null)) => {
            return Err(CallError(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        (Some(_), Some(other)) => {
            return Err(CallError(format!(
                "webhook returned invalid response.patchType of {other}"
            )));
        }
    };
    Ok(Verdict {
        allowed: response["allowed"].as_bool().unwrap_or(false),
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        warnings: krec_core::json::strings(response.get("warnings")),
    })
}
