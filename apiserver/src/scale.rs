//! The `scale` subresource: an `autoscaling/v1` `Scale` view of a workload's replicas
//! (Deployments, ReplicaSets, StatefulSets, ReplicationControllers, and custom resources whose
//! CRD declares `subresources.scale`), read and written as `kubectl scale` and autoscalers do.

use serde_json::{Value, json};

use krec_core::error::ApiError;
use krec_core::json::Pointer;

/// Where a kind keeps what its `Scale` shows, as JSON pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    /// The desired replicas (`/spec/replicas`).
    pub spec_replicas: String,
    /// The observed replicas (`/status/replicas`).
    pub status_replicas: String,
    /// The label selector: a `LabelSelector` object for built-in kinds, the selector string for
    /// custom resources (their CRD's `labelSelectorPath`).
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// The paths of the built-in workloads.
    pub fn workload() -> Self {
        ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: Some("/spec/selector".into()),
        }
    }

    /// The paths a CRD version's `subresources.scale` declares (`.spec.replicas` style), if any.
    pub fn from_crd(scale: &Value) -> Option<Self> {
        let pointer = |key: &str| -> Option<String> {
            let path = scale.get(key)?.as_str()?;
            Some(path.trim_start_matches('.').replace('.', "/")).map(|p| format!("/{p}"))
        };
        Some(ScalePaths {
            spec_replicas: pointer("specReplicasPath")?,
            status_replicas: pointer("statusReplicasPath")?,
            label_selector: pointer("labelSelectorPath"),
        })
    }
}

/// The `Scale` of `object`.
pub fn scale_of(paths: &ScalePaths, object: &Value) -> Value {
    let int = |pointer: &str| object.at(pointer).and_then(Value::as_i64).unwrap_or(0);
    let meta = |field: &str| object.at(&format!("/metadata/{field}")).cloned();
    let mut metadata = serde_json::Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = meta(field) {
            metadata.insert(field.into(), value);
        }
    }
    let mut status = json!({"replicas": int(&paths.status_replicas)});
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|p| object.at(p))
        .map(|s| match s {
            Value::String(text) => text.clone(),
            selector => selector_string(selector),
        })
        .filter(|s| !s.is_empty());
    if let Some(selector) = selector {
        status["selector"] = json!(selector);
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata,
        "spec": {"replicas": int(&paths.spec_replicas)}, "status": status})
}

/// `object` with the replicas `scale` asks for. A `resourceVersion` in the Scale must be the
/// object's (optimistic concurrency, as on the object itself).
pub fn apply_scale(
    (group, plural): (&str, &str),
    paths: &ScalePaths,
    object: &Value,
    scale: &Value,
) -> Result<Value, ApiError> {
    let name = object
        .at("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Some(asked) = scale
        .at("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
        && object
            .at("/metadata/resourceVersion")
            .and_then(Value::as_str)
            != Some(asked)
    {
        return Err(ApiError::conflict(group, plural, name));
    }
    // `ScaleSpec.replicas` is a Go value field: absent means 0.
    let replicas = match scale.at("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(n) => n.as_i64().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                vec![(
                    "spec.replicas".into(),
                    format!("Invalid value: {n}: must be greater than or equal to 0"),
                )],
            )
        })?,
    };
    let mut updated = object.clone();
    set_pointer(&mut updated, &paths.spec_replicas, json!(replicas));
    Ok(updated)
}

/// Set the value at a JSON pointer, creating the objects on the way.
fn set_pointer(object: &mut Value, pointer: &str, value: Value) {
    let mut at = object;
    let mut parts = pointer.trim_start_matches('/').split('/').peekable();
    while let Some(part) = parts.next() {
        if !at.is_object() {
            *at = json!({});
        }
        if parts.peek().is_none() {
            at[part] = value;
            return;
        }
        at = &mut at[part];
    }
}

/// A `LabelSelector` object as selector text (`metav1.FormatLabelSelector`), requirements sorted
/// by key: `app=web,tier in (a,b),!legacy`.
pub fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            requirements.push((key.clone(), format!("{key}={value}")));
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let text = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        };
        requirements.push((key.to_owned(), text));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_should_format_as_kubernetes_does() {
        let selector = json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"}]});
        assert_eq!(selector_string(&selector), "app=web,!legacy,tier in (a,b)");
    }

    #[test]
    fn crd_paths_should_become_pointers() {
        let paths = ScalePaths::from_crd(&json!({"specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}))
        .expect("paths");
        assert_eq!(paths.spec_replicas, "/spec/replicas");
        assert_eq!(paths.label_selector.as_deref(), Some("/status/selector"));
    }
}
