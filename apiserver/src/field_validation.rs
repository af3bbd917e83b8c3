//! `fieldValidation=Strict|Warn|Ignore`: what happens to fields a body sets that its kind does
//! not have, and to fields set twice, as kube-apiserver decides (kubectl sends `Strict`; a
//! request without the parameter gets `Warn`).
//!
//! Built-in kinds are checked against kube-apiserver's definitions of them (a field a definition
//! does not declare is unknown, as its Go type would not keep it); custom resources against their
//! CRD's structural schema (where unknown fields are pruned unless
//! `x-kubernetes-preserve-unknown-fields`).

use std::borrow::Cow;
use std::collections::HashSet;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::error::ApiError;
use crate::openapi;
use crate::resources::ResourceType;

/// One step of a field path.
#[derive(Clone, Debug)]
enum Step<'a> {
    Field(Cow<'a, str>),
    Item(usize),
}

/// Where a check is in the object, written out (`spec.containers[0].image`) only when a problem
/// is found there: most bodies have none, and the walk should not pay for every field's path.
#[derive(Default)]
struct FieldPath<'a>(Vec<Step<'a>>);

impl<'a> FieldPath<'a> {
    /// The path as kube-apiserver writes it, with `last` appended when given.
    fn render(&self, last: Option<&str>) -> String {
        let mut text = String::new();
        let fields = self
            .0
            .iter()
            .cloned()
            .chain(last.map(|l| Step::Field(l.into())));
        for step in fields {
            match step {
                Step::Field(name) => {
                    if !text.is_empty() {
                        text.push('.');
                    }
                    text.push_str(&name);
                }
                Step::Item(i) => {
                    text.push('[');
                    text.push_str(&i.to_string());
                    text.push(']');
                }
            }
        }
        text
    }

    /// The path to field `last`, owning its steps.
    fn owned_with(&self, last: &str) -> Vec<Step<'static>> {
        self.0
            .iter()
            .map(|step| match step {
                Step::Field(name) => Step::Field(Cow::Owned(name.to_string())),
                Step::Item(i) => Step::Item(*i),
            })
            .chain([Step::Field(Cow::Owned(last.to_owned()))])
            .collect()
    }

    fn is_top(&self) -> bool {
        self.0.is_empty()
    }

    /// `f` with `step` appended to the path.
    fn under<T>(&mut self, step: Step<'a>, f: impl FnOnce(&mut Self) -> T) -> T {
        self.0.push(step);
        let out = f(self);
        self.0.pop();
        out
    }
}

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
        let mut path = FieldPath::default();
        let scanner = Duplicates {
            path: &mut path,
            out: &mut duplicates,
        };
        if scan.deserialize_any(scanner).is_ok() {
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
            unknown_in_schema(object, schema, &mut FieldPath::default(), &mut out);
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
fn unknown_in_schema<'a>(
    value: &'a Value,
    schema: &Value,
    path: &mut FieldPath<'a>,
    out: &mut Vec<String>,
) {
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
                if path.is_top() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) | (None, Some(s)) => {
                        path.under(Step::Field(key.into()), |path| {
                            unknown_in_schema(child, s, path, out);
                        });
                    }
                    (None, None) if preserve || properties.is_none() => {}
                    (None, None) => out.push(path.render(Some(key))),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    path.under(Step::Item(i), |path| {
                        unknown_in_schema(item, item_schema, path, out);
                    });
                }
            }
        }
        _ => {}
    }
}

/// Fields of a built-in object kube-apiserver's definition of its kind does not declare
/// (removed from it: its Go type would not keep them).
fn unknown_in_builtin(rt: &ResourceType, object: &mut Value) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(definition) = openapi::builtin_kind(&rt.group, &rt.version, &rt.kind) {
        undeclared(object, definition, &mut FieldPath::default(), &mut found);
    }
    found
        .iter()
        .map(|path| {
            remove_field(object, path);
            FieldPath(path.clone()).render(None)
        })
        .collect()
}

/// Paths of `value` its `schema` (a built-in definition, `$ref`s followed) does not declare;
/// those fields are removed. Free-form objects (`RawExtension`, `FieldsV1`, a CRD's `JSON`)
/// declare nothing and take anything; `null`s are never unknown.
fn undeclared<'a>(
    value: &'a Value,
    schema: &Value,
    path: &mut FieldPath<'a>,
    out: &mut Vec<Vec<Step<'static>>>,
) {
    let schema = openapi::resolve(schema);
    match value {
        Value::Object(given) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let values = schema.get("additionalProperties").filter(|a| a.is_object());
            if properties.is_none() && values.is_none() {
                return;
            }
            for (key, child) in given {
                if child.is_null() {
                    continue;
                }
                match properties.and_then(|p| p.get(key)).or(values) {
                    Some(child_schema) => path.under(Step::Field(key.into()), |path| {
                        undeclared(child, child_schema, path, out);
                    }),
                    None => out.push(path.owned_with(key)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    path.under(Step::Item(i), |path| {
                        undeclared(item, item_schema, path, out);
                    });
                }
            }
        }
        _ => {}
    }
}

/// Remove the field at `path` (its last step a field) from `value`.
fn remove_field(value: &mut Value, path: &[Step<'_>]) {
    let Some((Step::Field(last), parents)) = path.split_last() else {
        return;
    };
    let mut at = value;
    for step in parents {
        let next = match step {
            Step::Field(name) => at.get_mut(name.as_ref()),
            Step::Item(i) => at.get_mut(*i),
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(map) = at.as_object_mut() {
        map.remove(last.as_ref());
    }
}

/// A pass over JSON text recording the keys an object has twice (as `path.key`). Keys are
/// borrowed from the text where it has no escapes, and paths written only for duplicates.
struct Duplicates<'p, 'de> {
    path: &'p mut FieldPath<'de>,
    out: &'p mut Vec<String>,
}

/// Maps with more keys than this look duplicates up in a hash set rather than by scanning.
const SMALL_MAP: usize = 16;

impl<'de> Visitor<'de> for Duplicates<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<Cow<'de, str>> = Vec::new();
        let mut many: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let duplicate = if seen.len() < SMALL_MAP {
                let found = seen.contains(&key);
                seen.push(key.clone());
                found
            } else {
                if many.is_empty() {
                    many.extend(seen.iter().cloned());
                }
                !many.insert(key.clone())
            };
            if duplicate {
                self.out.push(self.path.render(Some(&key)));
            }
            self.path.0.push(Step::Field(key));
            let scanned = map.next_value_seed(Seed {
                path: &mut *self.path,
                out: &mut *self.out,
            });
            self.path.0.pop();
            scanned?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            self.path.0.push(Step::Item(i));
            let scanned = seq.next_element_seed(Seed {
                path: &mut *self.path,
                out: &mut *self.out,
            });
            self.path.0.pop();
            if scanned?.is_none() {
                return Ok(());
            }
            i += 1;
        }
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

/// An object key, borrowed from the text when it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// The seed scanning one nested value.
struct Seed<'p, 'de> {
    path: &'p mut FieldPath<'de>,
    out: &'p mut Vec<String>,
}

impl<'de> de::DeserializeSeed<'de> for Seed<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(Duplicates {
            path: self.path,
            out: self.out,
        })
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

    /// Duplicates are found in big maps (set lookup), under list items, and between a key
    /// written with escapes and the same key without.
    #[test]
    fn duplicates_should_be_found_in_big_maps_items_and_escaped_keys() {
        let data: Vec<String> = (0..40).map(|i| format!("\"k{i}\":\"v\"")).collect();
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c"}},"data":{{{},"k7":"again"}},
            "binaryData":{{"a\u0062":"eA==","ab":"eA=="}}}}"#,
            data.join(",")
        );
        let mut object: Value = serde_json::from_str(&body).expect("json");
        let configmaps = crate::resources::builtins()
            .into_iter()
            .find(|t| t.kind == "ConfigMap")
            .expect("configmaps");
        assert_eq!(
            problems(&configmaps, &mut object, Some(body.as_bytes())),
            [
                "duplicate field \"data.k7\"",
                "duplicate field \"binaryData.ab\""
            ]
        );
        let body = br#"{"spec":{"template":{"spec":{"containers":[{"name":"a"},{"name":"b","name":"c"}]}}}}"#;
        let mut object: Value = serde_json::from_slice(body).expect("json");
        assert_eq!(
            problems(&deployments(), &mut object, Some(body)),
            ["duplicate field \"spec.template.spec.containers[1].name\""]
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
