//! Structural-schema handling of custom resources: pruning unknown fields and validating against
//! a CRD version's `openAPIV3Schema`, with kube-apiserver's messages.
//!
//! Supported: `type` (object, array, string, integer, number, boolean), `properties`,
//! `required`, `enum`, `minimum`/`maximum` (and their `exclusive*` flags), `minLength`/
//! `maxLength`, `minItems`/`maxItems`, `pattern`, `items`, `additionalProperties`, `nullable`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`. `format`, CEL rules and
//! the rest of OpenAPI are not checked.

use serde_json::Value;

/// Drop fields the schema does not declare, as kube-apiserver prunes them; `apiVersion`, `kind`
/// and `metadata` at the root are kept.
pub fn prune(schema: &Value, object: &mut Value) {
    prune_at(schema, object, true);
}

fn prune_at(schema: &Value, value: &mut Value, root: bool) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            map.retain(|key, _| {
                (root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                    || properties.is_some_and(|p| p.contains_key(key))
                    || additional.is_some_and(|a| a.is_object() || a.as_bool() == Some(true))
            });
            for (key, child) in map.iter_mut() {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                if let Some(child_schema) = child_schema {
                    prune_at(child_schema, child, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune_at(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

/// Fill in the schema's `default`s for absent properties, as kube-apiserver does when decoding
/// a custom resource.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            for (key, child_schema) in properties {
                if !map.contains_key(key)
                    && let Some(default) = child_schema.get("default")
                {
                    map.insert(key.clone(), default.clone());
                }
                if let Some(child) = map.get_mut(key) {
                    apply_defaults(child_schema, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Validate `object` against `schema`; returns `(field, message)` causes, empty when valid.
pub fn validate(schema: &Value, object: &Value) -> Vec<(String, String)> {
    let mut causes = Vec::new();
    validate_at(schema, object, "", &mut causes, true);
    causes
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn validate_at(
    schema: &Value,
    value: &Value,
    path: &str,
    causes: &mut Vec<(String, String)>,
    root: bool,
) {
    let shown = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true) && !root {
            causes.push((
                shown.to_owned(),
                format!(
                    "Invalid value: \"null\": {shown} in body must be of type {}: \"null\"",
                    schema
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == expected
            || (expected == "number" && actual == "integer")
            || (int_or_string && matches!(actual, "integer" | "string"));
        if !ok {
            causes.push((shown.to_owned(), format!("Invalid value: \"{actual}\": {shown} in body must be of type {expected}: \"{actual}\"")));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let supported = options
            .iter()
            .map(|o| o.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        causes.push((
            shown.to_owned(),
            format!("Unsupported value: {value}: supported values: {supported}"),
        ));
    }
    match value {
        Value::Number(n) => {
            let Some(x) = n.as_f64() else { return };
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let exclusive =
                    schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
                if x < min || (exclusive && x == min) {
                    let rel = if exclusive {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    causes.push((
                        shown.to_owned(),
                        format!(
                            "Invalid value: {value}: {shown} in body should be {rel} {}",
                            schema["minimum"]
                        ),
                    ));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let exclusive =
                    schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
                if x > max || (exclusive && x == max) {
                    let rel = if exclusive {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    causes.push((
                        shown.to_owned(),
                        format!(
                            "Invalid value: {value}: {shown} in body should be {rel} {}",
                            schema["maximum"]
                        ),
                    ));
                }
            }
        }
        Value::String(text) => {
            let len = text.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                causes.push((shown.to_owned(), format!("Invalid value: {value}: {shown} in body should be at least {min} chars long")));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                causes.push((
                    shown.to_owned(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(text) => causes.push((
                        shown.to_owned(),
                        format!("Invalid value: {value}: {shown} in body should match '{pattern}'"),
                    )),
                    Ok(_) => {}
                    Err(_) => causes.push((
                        shown.to_owned(),
                        format!(
                            "the schema's pattern {pattern:?} is not a valid regular expression"
                        ),
                    )),
                }
            }
        }
        Value::Array(items) => {
            let len = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && len < min
            {
                causes.push((
                    shown.to_owned(),
                    format!(
                        "Invalid value: {len}: {shown} in body should have at least {min} items"
                    ),
                ));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && len > max
            {
                causes.push((
                    shown.to_owned(),
                    format!("Too many: {len}: must have at most {max} items"),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_at(item_schema, item, &format!("{path}[{i}]"), causes, false);
                }
            }
        }
        Value::Object(map) => {
            for required in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(required) {
                    causes.push((child_path(path, required), "Required value".to_owned()));
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    validate_at(child_schema, child, &child_path(path, key), causes, false);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn foo_schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["deploymentName"], "properties": {
                "deploymentName": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                "mode": {"type": "string", "enum": ["a", "b"]}}},
            "status": {"type": "object", "properties": {"availableReplicas": {"type": "integer"}}}}})
    }

    #[test]
    fn validate_should_report_each_broken_rule_with_its_field() {
        let schema = foo_schema();
        let ok = json!({"spec": {"deploymentName": "d", "replicas": 10}});
        assert!(validate(&schema, &ok).is_empty());
        let bad = json!({"spec": {"replicas": 11, "mode": "c"}});
        let causes = validate(&schema, &bad);
        let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["spec.deploymentName", "spec.mode", "spec.replicas"],
            "{causes:?}"
        );
        assert!(
            causes[2].1.contains("should be less than or equal to 10"),
            "{causes:?}"
        );
        let wrong_type = json!({"spec": {"deploymentName": "d", "replicas": "three"}});
        assert!(
            validate(&schema, &wrong_type)[0]
                .1
                .contains("must be of type integer")
        );
        let zero = json!({"spec": {"deploymentName": "d", "replicas": 0}});
        assert!(
            validate(&schema, &zero)[0]
                .1
                .contains("greater than or equal to 1")
        );
    }

    #[test]
    fn defaults_should_fill_absent_fields_only() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "default": {},
            "properties": {"replicas": {"type": "integer", "default": 1}, "mode": {"type": "string"}}}}});
        let mut empty = json!({});
        apply_defaults(&schema, &mut empty);
        assert_eq!(empty, json!({"spec": {"replicas": 1}}));
        let mut set = json!({"spec": {"replicas": 3}});
        apply_defaults(&schema, &mut set);
        assert_eq!(set, json!({"spec": {"replicas": 3}}));
    }

    #[test]
    fn prune_should_drop_undeclared_fields_but_keep_the_envelope() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "Foo", "metadata": {"name": "a"},
            "spec": {"deploymentName": "d", "bogus": 1}, "extra": true});
        prune(&foo_schema(), &mut object);
        assert_eq!(
            object,
            json!({"apiVersion": "x/v1", "kind": "Foo", "metadata": {"name": "a"},
            "spec": {"deploymentName": "d"}})
        );
    }
}
