//! kube-apiserver's validation of every object's metadata (apimachinery's `ValidateObjectMeta`
//! rules the store applies to each kind): each returns the causes of a 422 Invalid as
//! `(field, message)`, with the field paths and messages kube-apiserver gives. A kind's own rules
//! are in its strategy (`Strategy::validate`).

use serde_json::Value;

use krec_core::json::Pointer;

pub use krec_core::error::Cause;

/// Most bytes of annotations (keys and values) an object may have.
pub const MAX_ANNOTATION_BYTES: usize = 256 << 10;

/// `metadata.annotations`, as apimachinery's `ValidateAnnotations`: each key a label key (case
/// aside), and at most [`MAX_ANNOTATION_BYTES`] of keys and values together.
pub fn annotations(object: &Value) -> Vec<Cause> {
    let annotations = object
        .at("/metadata/annotations")
        .and_then(Value::as_object);
    let mut causes = Vec::new();
    for key in annotations.into_iter().flat_map(|a| a.keys()) {
        for problem in label_key_problems(&key.to_lowercase()) {
            causes.push((
                "metadata.annotations".into(),
                format!("Invalid value: {key:?}: {problem}"),
            ));
        }
    }
    let size: usize = annotations
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_ANNOTATION_BYTES {
        causes.push((
            "metadata.annotations".into(),
            format!("Too long: must have at most {MAX_ANNOTATION_BYTES} bytes"),
        ));
    }
    causes
}

/// `metadata.labels`, as apimachinery's `ValidateLabels`: each key a label key, each value a
/// label value (a value that is not a string is refused when the object is decoded).
pub fn labels(object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let labels = object.at("/metadata/labels").and_then(Value::as_object);
    for (key, value) in labels.into_iter().flatten() {
        for problem in label_key_problems(key) {
            causes.push((
                "metadata.labels".into(),
                format!("Invalid value: {key:?}: {problem}"),
            ));
        }
        let value = value.as_str().unwrap_or_default();
        for problem in label_value_problems(value) {
            causes.push((
                "metadata.labels".into(),
                format!("Invalid value: {value:?}: {problem}"),
            ));
        }
    }
    causes
}

/// kube's explanation of a value that does not match `regex`, with examples of values that do
/// (apimachinery's `RegexError`, its spacing included).
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{message} (regex used for validation is '{regex}')");
    }
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{regex}')",
        examples.join(" or ")
    )
}

fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} bytes")
}

const LABEL_KEY_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// A label key's name part: 1–63 alphanumerics, '-', '_' or '.', alphanumeric at both ends.
fn is_label_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What is wrong with a label key (a "qualified name": an optional DNS subdomain prefix and
/// `/`, then a name), in apimachinery's words (`IsLabelKey`); empty when nothing is.
pub fn label_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_owned());
            } else {
                problems.extend(
                    dns1123_subdomain_problems(prefix)
                        .into_iter()
                        .map(|p| format!("prefix part {p}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    LABEL_KEY_MESSAGE,
                    LABEL_KEY_REGEX,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        problems.push(format!("name part {}", max_len_error(63)));
    }
    if !is_label_name(name) {
        problems.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MESSAGE,
                LABEL_KEY_REGEX,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    problems
}

/// What is wrong with a label value (empty, or up to 63 of a label key's name characters), in
/// apimachinery's words (`IsLabelValue`).
pub fn label_value_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push(max_len_error(63));
    }
    if !value.is_empty() && !is_label_name(value) {
        problems.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    problems
}

/// What is wrong with a ConfigMap's or Secret's data key, in apimachinery's words
/// (`IsConfigMapKey`).
pub fn config_map_key_problems(key: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if key.len() > 253 {
        problems.push(max_len_error(253));
    }
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    if key.is_empty() || !key.as_bytes().iter().all(allowed) {
        problems.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match key {
        "." => problems.push("must not be '.'".to_owned()),
        ".." => problems.push("must not be '..'".to_owned()),
        _ if key.starts_with("..") => problems.push("must not start with '..'".to_owned()),
        _ => {}
    }
    problems
}

const DNS1123_LABEL_REGEX: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";

/// Whether `s` matches [`DNS1123_LABEL_REGEX`] (no length limit, as the regex has none).
fn matches_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    edge(bytes.first())
        && edge(bytes.last())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// What is wrong with a DNS (RFC 1123) subdomain, in apimachinery's words
/// (`IsDNS1123Subdomain`).
pub fn dns1123_subdomain_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 253 {
        problems.push(max_len_error(253));
    }
    if !value.split('.').all(matches_dns1123_label) {
        problems.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    problems
}

/// What is wrong with a DNS (RFC 1123) label, in apimachinery's words (`IsDNS1123Label`).
pub fn dns1123_label_problems(value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > 63 {
        problems.push(max_len_error(63));
    }
    if !matches_dns1123_label(value) {
        if value.split('.').all(matches_dns1123_label) {
            // A subdomain, and the length was checked: it has dots.
            problems.push("must not contain dots".to_owned());
        } else {
            problems.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_REGEX,
                &["my-name", "123-abc"],
            ));
        }
    }
    problems
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
