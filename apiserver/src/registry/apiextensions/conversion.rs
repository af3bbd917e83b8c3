//! A CRD's `spec.conversion`, validated as `apiextensions` validation does (the webhook it names
//! is called by `crate::conversion`).

use serde_json::{Value, json};

use crate::webhook::{validate_client_config, validate_review_versions};
use krec_core::error::Cause;
use krec_core::json::Pointer;

/// Validate a CRD's `spec.conversion` as `apiextensions` validation does.
pub fn validate(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(conversion) = crd.at("/spec/conversion").filter(|c| !c.is_null()) else {
        return causes;
    };
    let webhook = conversion.get("webhook").filter(|w| !w.is_null());
    match conversion.get("strategy").and_then(Value::as_str) {
        Some("None") => {
            if webhook.is_some() {
                causes.push((
                    "spec.conversion.webhook".into(),
                    "Forbidden: should be empty if strategy is not set to Webhook".into(),
                ));
            }
        }
        Some("Webhook") => match webhook {
            None => causes.push((
                "spec.conversion.webhook".into(),
                "Required value: required when strategy is set to Webhook".into(),
            )),
            Some(webhook) => {
                let path = "spec.conversion.webhook";
                validate_client_config(webhook.get("clientConfig"), path, &mut causes);
                validate_review_versions(
                    webhook.get("conversionReviewVersions"),
                    &format!("{path}.conversionReviewVersions"),
                    "apiextensions.k8s.io",
                    &mut causes,
                );
                if crd.at("/spec/preserveUnknownFields") == Some(&json!(true)) {
                    causes.push((
                        "spec.conversion.strategy".into(),
                        "Invalid value: \"Webhook\": must be None if spec.preserveUnknownFields is true".into(),
                    ));
                }
            }
        },
        Some(other) => causes.push((
            "spec.conversion.strategy".into(),
            format!("Unsupported value: {other:?}: supported values: \"None\", \"Webhook\""),
        )),
        None => causes.push(("spec.conversion.strategy".into(), "Required value".into())),
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_conversion_should_be_validated() {
        let crd = |conversion: Value| json!({"spec": {"conversion": conversion}});
        assert!(validate(&crd(json!({"strategy": "None"}))).is_empty());
        assert!(
            validate(&crd(json!({"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": "https://127.0.0.1:9443/convert"},
                "conversionReviewVersions": ["v1"]}})))
            .is_empty()
        );
        let fields = |conversion: Value| -> Vec<String> {
            validate(&crd(conversion))
                .into_iter()
                .map(|(f, _)| f)
                .collect()
        };
        assert_eq!(
            fields(json!({"strategy": "Webhook"})),
            ["spec.conversion.webhook"]
        );
        assert_eq!(
            fields(
                json!({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "http://x/"},
                "conversionReviewVersions": ["v1beta1"]}})
            ),
            [
                "spec.conversion.webhook.clientConfig.url",
                "spec.conversion.webhook.conversionReviewVersions"
            ]
        );
        assert_eq!(
            fields(json!({"strategy": "Other"})),
            ["spec.conversion.strategy"]
        );
    }
}
