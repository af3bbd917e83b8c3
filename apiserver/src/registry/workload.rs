//! What the workload kinds (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, CronJobs,
//! ReplicationControllers) share: their pod template's defaults, and a selector that matches the
//! template's labels and does not change.

use serde_json::Value;

use serde_json::json;

use crate::printers::{Column, Row};
use crate::registry::core::pod;
use krec_core::error::Cause;
use krec_core::json::Pointer;

/// The wide column of a workload's template's container names.
pub(crate) const CONTAINERS: Column = Column::text("Containers").wide();
/// The wide column of a workload's template's images.
pub(crate) const IMAGES: Column = Column::text("Images").wide();
/// The wide column of a workload's selector.
pub(crate) const SELECTOR: Column = Column::text("Selector").wide();

/// The cells of [`CONTAINERS`], [`IMAGES`] and (`with_selector`) [`SELECTOR`].
pub(crate) fn template_cells(row: &Row<'_>, with_selector: bool) -> Vec<Value> {
    let (names, images) = row.containers();
    let mut cells = vec![json!(names), json!(images)];
    if with_selector {
        cells.push(json!(row.selector()));
    }
    cells
}

/// The pod template of a workload's spec.
pub(crate) fn default_template(spec: &mut Value) {
    if let Some(pod) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        pod::default_spec(pod);
    }
}

/// A workload's selector, template and the fields it may not change.
pub(crate) fn validate(group: &str, kind: &str, object: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(replicas) = object.at("/spec/replicas").and_then(Value::as_i64)
        && replicas < 0
    {
        causes.push((
            "spec.replicas".into(),
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    let selector = object.at("/spec/selector");
    let labels = object.at("/spec/template/metadata/labels");
    // A Job without `manualSelector` gets its selector from the server (defaults).
    match selector {
        None | Some(Value::Null) => causes.push(("spec.selector".into(), "Required value".into())),
        Some(selector) => {
            let empty = selector
                .get("matchLabels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty())
                && selector
                    .get("matchExpressions")
                    .and_then(Value::as_array)
                    .is_none_or(|m| m.is_empty());
            if empty {
                causes.push((
                    "spec.selector".into(),
                    format!(
                        "Invalid value: {selector}: empty selector is invalid for {}",
                        kind.to_lowercase()
                    ),
                ));
            } else if !selector_matches(selector, labels) {
                causes.push((
                    "spec.template.metadata.labels".into(),
                    format!(
                        "Invalid value: {}: `selector` does not match template `labels`",
                        go_map(labels)
                    ),
                ));
            }
        }
    }
    match object.at("/spec/template/spec") {
        Some(spec) => pod::validate_spec(spec, "spec.template.spec", &mut causes),
        None => causes.push((
            "spec.template.spec.containers".into(),
            "Required value".into(),
        )),
    }
    // A replicated pod restarts Always (the default): kube's
    // `ValidatePodTemplateSpecForReplicaSet` and its kin.
    let policy = object
        .at("/spec/template/spec/restartPolicy")
        .and_then(Value::as_str);
    if group != "batch" && policy.is_some_and(|p| p != "Always") {
        causes.push((
            "spec.template.spec.restartPolicy".into(),
            format!(
                "Unsupported value: {:?}: supported values: \"Always\"",
                policy.unwrap_or("")
            ),
        ));
    }
    if group == "batch" {
        let policy = object
            .at("/spec/template/spec/restartPolicy")
            .and_then(Value::as_str);
        if !matches!(policy, Some("Never" | "OnFailure")) {
            causes.push((
                "spec.template.spec.restartPolicy".into(),
                format!(
                    "Unsupported value: {:?}: supported values: \"OnFailure\", \"Never\"",
                    policy.unwrap_or("")
                ),
            ));
        }
    }
    if let Some(old) = old {
        let immutable: &[&str] = if group == "batch" {
            &["/spec/selector", "/spec/template"]
        } else {
            &["/spec/selector"]
        };
        for pointer in immutable {
            let (was, is) = (old.at(pointer), object.at(pointer));
            if was != is {
                causes.push((
                    pointer.trim_start_matches('/').replace('/', "."),
                    format!(
                        "Invalid value: {}: field is immutable",
                        is.cloned().unwrap_or(Value::Null)
                    ),
                ));
            }
        }
    }
    causes
}

/// Whether a `LabelSelector` selects objects with `labels`.
fn selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    let labels = labels.and_then(Value::as_object);
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let by_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match e["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    by_labels && by_expressions
}

/// Go's `%#v` of a `map[string]string`, as kube-apiserver prints label maps in messages.
fn go_map(map: Option<&Value>) -> String {
    let entries: Vec<String> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default()))
        .collect();
    format!("map[string]string{{{}}}", entries.join(", "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_workload_selector_should_match_its_template_and_stay() {
        let deployment = |app: &str| {
            json!({"spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
        };
        assert!(validate("apps", "Deployment", &deployment("web"), None).is_empty());
        assert_eq!(
            validate("apps", "Deployment", &deployment("other"), None),
            vec![("spec.template.metadata.labels".to_owned(),
                "Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`".to_owned())]
        );
        let mut moved = deployment("x");
        moved["spec"]["selector"] = json!({"matchLabels": {"app": "x"}});
        let causes = validate("apps", "Deployment", &moved, Some(&deployment("web")));
        assert!(causes[0].1.ends_with("field is immutable"), "{causes:?}");
    }
}
