//! JSON values as CEL sees them, typed by their schema as kube's `SchemaDeclType` types them:
//! `integer` an int, `number` a double (whatever the JSON wrote), `format: date-time`/`date` a
//! timestamp, `format: duration` a duration, objects maps with kube's escaped property names,
//! and at the root of a resource only `apiVersion`, `kind` and `metadata.name`/`generateName`.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use serde_json::Value as Json;

/// `value` typed by `schema`; `root` when it is a resource (the custom resource, or an embedded
/// one), whose metadata CEL sees only the name of.
pub fn to_cel(schema: Option<&Json>, value: &Json, root: bool) -> cel::Value {
    let ty = schema
        .and_then(|s| s.get("type"))
        .and_then(Json::as_str)
        .unwrap_or_default();
    let format = schema
        .and_then(|s| s.get("format"))
        .and_then(Json::as_str)
        .unwrap_or_default();
    match value {
        Json::Null => cel::Value::Null,
        Json::Bool(b) => cel::Value::Bool(*b),
        Json::Number(n) if ty == "number" => cel::Value::Float(n.as_f64().unwrap_or_default()),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Json::String(s) => string(s, format),
        Json::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items"));
            cel::Value::List(Arc::new(
                items
                    .iter()
                    .map(|item| to_cel(item_schema, item, false))
                    .collect(),
            ))
        }
        Json::Object(fields) => {
            let embedded = root
                || schema.is_some_and(|s| {
                    s.get("x-kubernetes-embedded-resource") == Some(&Json::Bool(true))
                });
            let properties = schema.and_then(|s| s.get("properties"));
            let additional = schema
                .and_then(|s| s.get("additionalProperties"))
                .filter(|a| a.is_object());
            let mut map: HashMap<Key, cel::Value> = HashMap::with_capacity(fields.len());
            for (name, field) in fields {
                let field_schema = properties.and_then(|p| p.get(name)).or(additional);
                let converted = if embedded && name == "metadata" {
                    metadata(field)
                } else {
                    to_cel(field_schema, field, false)
                };
                // An object's properties are fields, named as kube escapes them; a map's keys
                // are its keys.
                let key = if properties.is_some() {
                    escape(name)
                } else {
                    name.clone()
                };
                map.insert(Key::String(Arc::new(key)), converted);
            }
            cel::Value::Map(Map { map: Arc::new(map) })
        }
    }
}

fn string(s: &str, format: &str) -> cel::Value {
    match format {
        "date-time" | "datetime" => chrono::DateTime::parse_from_rfc3339(s)
            .map(cel::Value::Timestamp)
            .unwrap_or_else(|_| cel::Value::String(Arc::new(s.to_owned()))),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|t| cel::Value::Timestamp(t.and_utc().fixed_offset()))
            .unwrap_or_else(|| cel::Value::String(Arc::new(s.to_owned()))),
        "duration" => krec_core::duration::parse(s)
            .ok()
            .and_then(|d| chrono::Duration::from_std(d).ok())
            .map(cel::Value::Duration)
            .unwrap_or_else(|| cel::Value::String(Arc::new(s.to_owned()))),
        _ => cel::Value::String(Arc::new(s.to_owned())),
    }
}

/// A resource's metadata as CEL sees it: its `name` and `generateName`.
fn metadata(value: &Json) -> cel::Value {
    let mut map: HashMap<Key, cel::Value> = HashMap::new();
    for key in ["name", "generateName"] {
        if let Some(s) = value.get(key).and_then(Json::as_str) {
            map.insert(
                Key::String(Arc::new(key.to_owned())),
                cel::Value::String(Arc::new(s.to_owned())),
            );
        }
    }
    cel::Value::Map(Map { map: Arc::new(map) })
}

/// CEL's reserved words, which a property named so is reached by as `__<word>__`.
const RESERVED: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// A property's name as a CEL field (kube's `Escape`): `__` → `__underscores__`, `.` →
/// `__dot__`, `-` → `__dash__`, `/` → `__slash__`, a reserved word `__word__`.
pub fn escape(name: &str) -> String {
    if RESERVED.contains(&name) {
        return format!("__{name}__");
    }
    name.replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn values_should_take_their_schemas_types() {
        let schema = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"}, "ratio": {"type": "number"},
            "x-y": {"type": "string"}, "in": {"type": "string"},
            "metadata": {"type": "object"}}});
        let value = to_cel(
            Some(&schema),
            &json!({"replicas": 3, "ratio": 2, "x-y": "a", "in": "b",
                "metadata": {"name": "n", "labels": {"a": "b"}}}),
            true,
        );
        let cel::Value::Map(map) = value else {
            panic!("a map")
        };
        let get = |k: &str| map.map.get(&Key::String(Arc::new(k.to_owned()))).cloned();
        assert_eq!(get("replicas"), Some(cel::Value::Int(3)));
        assert_eq!(get("ratio"), Some(cel::Value::Float(2.0)));
        assert!(get("x__dash__y").is_some() && get("__in__").is_some());
        let Some(cel::Value::Map(meta)) = get("metadata") else {
            panic!("metadata")
        };
        assert_eq!(meta.map.len(), 1, "only the name of a resource's metadata");
    }
}
