//! What the host calls take besides objects: list parameters, patches, delete preconditions,
//! Event types, and label selectors as text.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::error::{Error, Result};

/// Kind of a Kubernetes Event, as client-go's `EventRecorder` takes it.
pub use krec_core::EventType;

/// Which objects a list call returns. Built with chained calls:
/// `ListParams::default().namespace("default").labels("app=web")`.
pub use krec_core::ListOptions as ListParams;

/// A patch body and its format.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386): `null` deletes a field.
    Merge(serde_json::Value),
    /// JSON patch (RFC 6902): an array of operations.
    Json(serde_json::Value),
    /// Strategic merge patch, for built-in kinds.
    Strategic(serde_json::Value),
    /// Server-side apply of the intended object, owned by the guest's field manager.
    Apply(serde_json::Value),
}

/// Conditions checked by `Context::delete_with` before deleting.
pub use krec_core::Preconditions;

/// Render a [`LabelSelector`] (`matchLabels` and `matchExpressions`) as selector text for
/// [`ListParams::labels`], e.g. `app=web,tier in (be,fe),!legacy`.
///
/// Returns `None` for an empty selector, which in Kubernetes matches everything (callers
/// usually want to treat that as "select nothing"), and [`Error::Invalid`] for an unknown
/// operator.
pub fn selector_string(selector: &LabelSelector) -> Result<Option<String>> {
    let mut parts = Vec::new();
    if let Some(labels) = &selector.match_labels {
        parts.extend(labels.iter().map(|(k, v)| format!("{k}={v}")));
    }
    for expr in selector.match_expressions.iter().flatten() {
        let mut values = expr.values.clone().unwrap_or_default();
        values.sort();
        let key = &expr.key;
        parts.push(match expr.operator.as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => {
                return Err(Error::Invalid(format!(
                    "unknown label selector operator {other:?} for key {key:?}"
                )));
            }
        });
    }
    Ok((!parts.is_empty()).then(|| parts.join(",")))
}

/// Render `matchLabels`-style labels as a label selector string (`a=1,b=2`).
pub fn labels_to_selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    #[test]
    fn selector_string_should_render_labels_and_expressions() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["fe".into(), "be".into()]),
                },
                LabelSelectorRequirement {
                    key: "legacy".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(
            selector_string(&selector),
            Ok(Some("app=web,tier in (be,fe),!legacy".to_owned()))
        );
        assert_eq!(selector_string(&LabelSelector::default()), Ok(None));
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "x".into(),
                operator: "Near".into(),
                values: None,
            }]),
            ..Default::default()
        };
        assert!(selector_string(&bad).is_err());
    }
}
