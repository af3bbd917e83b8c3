//! kube-apiserver's validation of every object's metadata (apimachinery's `ValidateObjectMeta`
//! rules the store applies to each kind): each returns the causes of a 422 Invalid as
//! `(field, message)`, with the field paths and messages kube-apiserver gives. A kind's own rules
//! are in its strategy (`Strategy::validate`).

use serde_json::Value;

use krec_core::json::Pointer;

pub use krec_core::error::Cause;

/// Most bytes of annotations (keys and values) an object may have.
pub const MAX_ANNOTATION_BYTES: usize = 256 << 10;

/// `metadata.annotations`: at most [`MAX_ANNOTATION_BYTES`] of keys and values together.
pub fn annotations(object: &Value) -> Vec<Cause> {
    let size: usize = object
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATION_BYTES {
        return vec![(
            "metadata.annotations".into(),
            format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"),
        )];
    }
    Vec::new()
}

/// `metadata.ownerReferences`, as apimachinery's `ValidateOwnerReferences`: each reference names
/// an apiVersion with a version, a kind, a name and a uid; an Event cannot own; at most one
/// reference is the controller (each further one is a cause).
pub fn owner_references(object: &Value) -> Vec<Cause> {
    let Some(references) = object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let path = "metadata.ownerReferences";
    let mut causes = Vec::new();
    let mut first_controller: Option<String> = None;
    for reference in references {
        let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or("");
        let api_version = field("apiVersion");
        let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
        let required = [
            (
                "apiVersion",
                version,
                api_version,
                "version must not be empty",
            ),
            ("kind", field("kind"), field("kind"), "must not be empty"),
            ("name", field("name"), field("name"), "must not be empty"),
            ("uid", field("uid"), field("uid"), "must not be empty"),
        ];
        for (child, checked, shown, message) in required {
            if checked.is_empty() {
                causes.push((
                    format!("{path}.{child}"),
                    format!("Invalid value: {shown:?}: {message}"),
                ));
            }
        }
        if api_version == "v1" && field("kind") == "Event" {
            causes.push((
                path.to_owned(),
                format!(
                    "Invalid value: {reference}: /v1, Kind=Event is disallowed from being an owner"
                ),
            ));
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{}/{}", field("kind"), field("name"));
            match &first_controller {
                Some(first) => causes.push((
                    path.to_owned(),
                    format!(
                        "Invalid value: {}: Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}",
                        Value::Array(references.clone()),
                    ),
                )),
                None => first_controller = Some(this),
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn annotations_should_be_limited_in_size() {
        let big = json!({"metadata": {"annotations": {"a": "x".repeat(MAX_ANNOTATION_BYTES)}}});
        assert_eq!(annotations(&big)[0].0, "metadata.annotations");
        assert!(annotations(&json!({"metadata": {"annotations": {"a": "b"}}})).is_empty());
    }

    #[test]
    fn owner_references_should_need_every_identifying_field_and_one_controller() {
        let object = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": true},
        ]}});
        assert_eq!(
            owner_references(&object),
            vec![(
                "metadata.ownerReferences.uid".to_owned(),
                "Invalid value: \"\": must not be empty".to_owned()
            )]
        );
        let two = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
        ]}});
        let causes = owner_references(&two);
        assert_eq!(causes.len(), 1);
        assert!(causes[0].1.contains("Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"), "{causes:?}");
        let event = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"},
        ]}});
        assert!(
            owner_references(&event)[0]
                .1
                .ends_with("/v1, Kind=Event is disallowed from being an owner")
        );
    }
}
