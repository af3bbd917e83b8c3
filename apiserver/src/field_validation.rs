//! `fieldValidation=Strict|Warn|Ignore`: what happens to fields a body sets that its kind does
//! not have, and to fields set twice, as kube-apiserver decides (kubectl sends `Strict`; a
//! request without the parameter gets `Warn`).
//!
//! Built-in kinds are checked against kube-apiserver's definitions of them (a field a definition
//! does not declare is unknown, as its Go type would not keep it); custom resources against their
//! CRD's structural schema (where unknown fields are pruned unless
//! `x-kubernetes-preserve-unknown-fields`).

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::ApiError;
use crate::openapi;
use crate::resources::ResourceType;

/// The `fieldValidation` of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Unknown or duplicate fields fail the request (400).
    Strict,
    /// They are reported in `Warning` headers, and dropped.
    Warn,
    /// They are dropped silently.
    Ignore,
}

impl Mode {
    /// The mode a request asks for (`Warn` when it names none), or a 400 for an unknown one.
    pub fn parse(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("Warn") => Ok(Mode::Warn),
            Some("Strict") => Ok(Mode::Strict),
            Some("Ignore") => Ok(Mode::Ignore),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            ))),
        }
    }
}

/// The problems of a body: `unknown field "spec.x"` and `duplicate field "y"`, in kube-apiserver's
/// words. `raw` is the JSON text when the body was JSON (for duplicates). Unknown fields of a
/// built-in object are removed from it (its Go type would not keep them; custom resources are
/// pruned by their schema when stored).
pub fn problems(rt: &ResourceType, object: &mut Value, raw: Option<&[u8]>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(raw) = raw {
        let mut duplicates = Vec::new();
        let mut scan = serde_json::Deserializer::from_slice(raw);
        if Duplicates::scan(&mut scan, &mut duplicates).is_ok() {
            found.extend(
                duplicates
                    .into_iter()
                    .map(|f| format!("duplicate field {f:?}")),
            );
        }
    }
    let unknown = match &rt.schema {
        Some(schema) => {
            let mut out = Vec::new();
            unknown_in_schema(object, schema, "", &mut out);
            out
        }
        None => unknown_in_builtin(rt, object),
    };
    found.extend(unknown.into_iter().map(|f| format!("unknown field {f:?}")));
    found
}

/// Act on `problems` as `mode` says: `Err` (400) when strict, else the warnings to send.
pub fn enforce(
    mode: Mode,
    rt: &ResourceType,
    problems: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    if problems.is_empty() {
        return Ok(Vec::new());
    }
    match mode {
        Mode::Strict => Err(ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
            problems.join(", "),
            kind = rt.kind,
            version = rt.version,
        ))),
        Mode::Warn => Ok(problems),
        Mode::Ignore => Ok(Vec::new()),
    }
}

/// Fields of a custom resource its schema does not declare (under objects that do not preserve
/// unknown fields).
fn unknown_in_schema(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("properties").is_none()
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve =
                schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            for (key, child) in map {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) | (None, Some(s)) => unknown_in_schema(child, s, &child_path, out),
                    (None, None) if preserve || properties.is_none() => {}
                    (None, None) => out.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    unknown_in_schema(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Fields of a built-in object kube-apiserver's definition of its kind does not declare
/// (removed from it: its Go type would not keep them).
fn unknown_in_builtin(rt: &ResourceType, object: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(definition) = openapi::builtin_kind(&rt.group, &rt.version, &rt.kind) {
        undeclared(object, definition, "", &mut out);
    }
    out
}

/// Paths of `value` its `schema` (a built-in definition, `$ref`s followed) does not declare;
/// those fields are removed. Free-form objects (`RawExtension`, `FieldsV1`, a CRD's `JSON`)
/// declare nothing and take anything; `null`s are never unknown.
fn undeclared(value: &mut Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    let schema = openapi::resolve(schema);
    match value {
        Value::Object(given) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let values = schema.get("additionalProperties").filter(|a| a.is_object());
            if properties.is_none() && values.is_none() {
                return;
            }
            let mut unknown = Vec::new();
            for (key, child) in given.iter_mut() {
                if child.is_null() {
                    continue;
                }
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match properties.and_then(|p| p.get(key)).or(values) {
                    Some(child_schema) => undeclared(child, child_schema, &child_path, out),
                    None => {
                        out.push(child_path);
                        unknown.push(key.clone());
                    }
                }
            }
            for key in unknown {
                given.remove(&key);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    undeclared(item, item_schema, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// A pass over JSON text recording the keys an object has twice (as `path.key`).
struct Duplicates<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl Duplicates<'_> {
    fn scan<'de, D: Deserializer<'de>>(
        deserializer: D,
        out: &mut Vec<String>,
    ) -> Result<(), D::Error> {
        Duplicates {
            path: String::new(),
            out,
        }
        .deserialize_any(deserializer)
    }

    fn deserialize_any<'de, D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Duplicates<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if !seen.insert(key) {
                self.out.push(path.clone());
            }
            map.next_value_seed(Seed {
                path,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Seed {
                path: format!("{}[{i}]", self.path),
                out: &mut *self.out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The seed scanning one nested value.
struct Seed<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> de::DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        Duplicates {
            path: self.path,
            out: self.out,
        }
        .deserialize_any(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployments() -> ResourceType {
        crate::resources::builtins()
            .into_iter()
            .find(|t| t.kind == "Deployment")
            .expect("deployments")
    }

    #[test]
    fn unknown_and_duplicate_fields_of_a_builtin_should_be_found() {
        let body = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},
            "spec":{"replicas":1,"replicsa":2,"replicas":3,"template":{"spec":{"containers":[{"name":"c","imagee":"x"}]}}}}"#;
        let mut object: Value = serde_json::from_slice(body).expect("json");
        let found = problems(&deployments(), &mut object, Some(body));
        assert_eq!(
            found,
            [
                "duplicate field \"spec.replicas\"",
                "unknown field \"spec.replicsa\"",
                "unknown field \"spec.template.spec.containers[0].imagee\""
            ]
        );
        let err = enforce(Mode::Strict, &deployments(), found.clone()).expect_err("strict");
        assert!(err.message.starts_with(
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: duplicate field"
        ));
        assert_eq!(
            enforce(Mode::Warn, &deployments(), found.clone()).expect("warn"),
            found
        );
        assert!(
            enforce(Mode::Ignore, &deployments(), found)
                .expect("ignore")
                .is_empty()
        );
        assert!(
            object.pointer("/spec/replicsa").is_none(),
            "unknown fields are dropped"
        );
    }

    #[test]
    fn a_valid_object_should_have_no_problems() {
        let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"a": "b"}, "annotations": null},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
                "strategy": {"rollingUpdate": {"maxSurge": "25%"}},
                "template": {"metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x", "resources": {},
                        "ports": [{"containerPort": 80}], "args": []}]}}}});
        assert!(problems(&deployments(), &mut object, None).is_empty());
    }

    #[test]
    fn custom_resources_should_be_checked_against_their_schema() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"n": {"type": "integer"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}});
        let mut rt = deployments();
        rt.schema = Some(std::sync::Arc::new(schema));
        let mut object = json!({"apiVersion": "x/v1", "kind": "Foo", "metadata": {"name": "f"},
            "spec": {"n": 1, "typo": 2, "free": {"anything": true}}, "extra": 1});
        assert_eq!(
            problems(&rt, &mut object, None),
            ["unknown field \"extra\"", "unknown field \"spec.typo\""]
        );
    }
}
