//! The `format`s of a CRD's schemas kube-apiserver does not recognise, and the warnings it
//! answers a write of the CRD with (apiextensions-apiserver's `GetUnrecognizedFormats` and the
//! CRD strategy's `WarningsOnCreate`/`WarningsOnUpdate`, 1.36).
//!
//! A string's format is recognised when, dashes removed, it is one kube validates; an
//! integer's only as `int32` or `int64`, a number's as `float` or `double`; any other type's
//! never. A create warns `unrecognized format "F"` once per occurrence; an update only for the
//! formats the stored CRD did not have anywhere (ratcheting).

use serde_json::Value;

/// The string formats kube validates (at its default compatibility version), dashes removed.
const STRING_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8sshortname",
    "k8slongname",
];

/// Whether `format` on a schema of `schema_type` is one kube recognises.
pub fn recognized(schema_type: &str, format: &str) -> bool {
    match schema_type {
        "" | "string" => STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        "integer" => matches!(format, "int32" | "int64"),
        "number" => matches!(format, "float" | "double"),
        _ => false,
    }
}

/// Every unrecognised format of `schema` and the schemas within it, in document order.
fn walk(schema: &Value, out: &mut Vec<String>) {
    let Some(fields) = schema.as_object() else {
        return;
    };
    if let Some(format) = fields.get("format").and_then(Value::as_str)
        && !format.is_empty()
    {
        let schema_type = fields.get("type").and_then(Value::as_str).unwrap_or("");
        if !recognized(schema_type, format) {
            out.push(format.to_owned());
        }
    }
    for key in [
        "properties",
        "patternProperties",
        "definitions",
        "dependencies",
    ] {
        if let Some(Value::Object(children)) = fields.get(key) {
            children.values().for_each(|child| walk(child, out));
        }
    }
    for key in ["items", "additionalProperties", "additionalItems", "not"] {
        match fields.get(key) {
            Some(Value::Array(children)) => children.iter().for_each(|child| walk(child, out)),
            Some(child) => walk(child, out),
            None => {}
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = fields.get(key) {
            children.iter().for_each(|child| walk(child, out));
        }
    }
}

/// The unrecognised formats of every schema of the CRD `crd` (each version's, and the
/// top-level `spec.validation` of an old one), one per occurrence.
pub fn unrecognized(crd: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &crd["spec"];
    walk(&spec["validation"]["openAPIV3Schema"], &mut out);
    for version in spec["versions"].as_array().into_iter().flatten() {
        walk(&version["schema"]["openAPIV3Schema"], &mut out);
    }
    out
}

/// The warnings a write of `crd` gets: its unrecognised formats, on an update only those the
/// stored `old` did not have.
pub fn warnings(crd: &Value, old: Option<&Value>) -> Vec<String> {
    let had = old.map(unrecognized).unwrap_or_default();
    unrecognized(crd)
        .into_iter()
        .filter(|format| !had.contains(format))
        .map(|format| format!("unrecognized format {format:?}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(properties: Value) -> Value {
        json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema":
            {"type": "object", "properties": properties}}}]}})
    }

    #[test]
    fn formats_should_be_judged_by_type_as_kube_does() {
        let properties = json!({
            "a": {"type": "integer", "format": "uint8"},
            "b": {"type": "integer", "format": "int64"},
            "c": {"type": "number", "format": "double"},
            "d": {"type": "string", "format": "date-time"},
            "e": {"type": "string", "format": "int64"},
            "f": {"type": "array", "items": {"type": "integer", "format": "uint32"}},
            "g": {"type": "string", "format": "k8s-short-name"},
            "h": {"type": "boolean", "format": "byte"},
            "i": {"type": "object", "additionalProperties": {"type": "integer", "format": "uint8"}},
        });
        assert_eq!(
            unrecognized(&crd(properties.clone())),
            ["uint8", "int64", "uint32", "byte", "uint8"]
        );
        assert_eq!(
            warnings(&crd(properties.clone()), None)[0],
            "unrecognized format \"uint8\""
        );
        // An update warns only for formats the stored CRD did not have.
        let old = crd(json!({"a": {"type": "integer", "format": "uint8"}}));
        assert_eq!(
            warnings(&crd(properties), Some(&old)),
            [
                "unrecognized format \"int64\"",
                "unrecognized format \"uint32\"",
                "unrecognized format \"byte\""
            ]
        );
    }
}
