//! `fieldValidation=Strict|Warn|Ignore`: what happens to fields a body sets that its kind does
//! not have, and to fields set twice, as kube-apiserver decides (kubectl sends `Strict`; a
//! request without the parameter gets `Warn`).
//!
//! Built-in kinds are checked against kube-apiserver's definitions of them (a field a definition
//! does not declare is unknown, as its Go type would not keep it); custom resources against their
//! CRD's structural schema (where unknown fields are pruned unless
//! `x-kubernetes-preserve-unknown-fields`).

use std::borrow::Cow;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::openapi;
use crate::resources::ResourceType;
use krec_core::error::ApiError;

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
/// words. `duplicates` are the paths [`decode_json`] found set twice (none for a body that was
/// not JSON). Unknown fields of a built-in object are removed from it (its Go type would not
/// keep them; custom resources are pruned by their schema when stored).
pub fn problems(rt: &ResourceType, object: &mut Value, duplicates: Vec<String>) -> Vec<String> {
    let mut found: Vec<String> = duplicates
        .into_iter()
        .map(|f| format!("duplicate field {f:?}"))
        .collect();
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

/// A JSON body as a value, and the paths of the fields it sets twice (`spec.replicas`,
/// `data.k7`), found in the same pass — kube-apiserver's strict decoding, which also keeps the
/// last of the values. One parse: a second scan of the text for duplicates cost a create a
/// tenth of its decoding.
///
/// # Errors
///
/// The text is not JSON.
pub fn decode_json(text: &[u8]) -> Result<(Value, Vec<String>), serde_json::Error> {
    // Text checked as UTF-8 once, in one pass, spares the reader checking every string it
    // borrows; text that is not UTF-8 is read as bytes, for the reader's error and its position.
    match std::str::from_utf8(text) {
        Ok(text) => decode_from(serde_json::Deserializer::from_str(text)),
        Err(_) => decode_from(serde_json::Deserializer::from_slice(text)),
    }
}

fn decode_from<'de, R: serde_json::de::Read<'de>>(
    mut reader: serde_json::Deserializer<R>,
) -> Result<(Value, Vec<String>), serde_json::Error> {
    let mut duplicates = Vec::new();
    let mut path = FieldPath::default();
    let value = de::DeserializeSeed::deserialize(
        Seed {
            path: &mut path,
            out: &mut duplicates,
        },
        &mut reader,
    )?;
    reader.end()?;
    Ok((value, duplicates))
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
    match value {
        Value::Object(given) => {
            // A built-in definition's members are indexed once; an inline schema is read as it
            // is. (Scalars, most of the values, need no schema: looked up only here.)
            let members = openapi::referenced_members(schema);
            let (properties, values) = match members {
                Some(_) => (None, None),
                None => (
                    schema.get("properties").and_then(Value::as_object),
                    schema.get("additionalProperties").filter(|a| a.is_object()),
                ),
            };
            let declares_nothing = match members {
                Some(members) => members.declares_nothing(),
                None => properties.is_none() && values.is_none(),
            };
            if declares_nothing {
                return;
            }
            for (key, child) in given {
                if child.is_null() {
                    continue;
                }
                let declared = match members {
                    Some(members) => members.get(key),
                    None => properties.and_then(|p| p.get(key)).or(values),
                };
                match declared {
                    Some(child_schema) => path.under(Step::Field(key.into()), |path| {
                        undeclared(child, child_schema, path, out);
                    }),
                    None => out.push(path.owned_with(key)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = openapi::resolve(schema).get("items") {
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

/// The visitor of [`decode_json`]: builds the value as `serde_json`'s own does, and records the
/// path of every key a map already had (written out only for those; keys are borrowed from the
/// text where they have no escapes).
struct Decoder<'p, 'de> {
    path: &'p mut FieldPath<'de>,
    out: &'p mut Vec<String>,
}

impl<'de> Visitor<'de> for Decoder<'_, 'de> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            // One lookup per key: the entry is found before the value is decoded, and a
            // repeated key is reported there, before its value's own duplicates, as
            // kube-apiserver's strict decoder reports them.
            let entry = object.entry(key.as_ref());
            if matches!(entry, serde_json::map::Entry::Occupied(_)) {
                self.out.push(self.path.render(Some(&key)));
            }
            self.path.0.push(Step::Field(key));
            let value = map.next_value_seed(Seed {
                path: &mut *self.path,
                out: &mut *self.out,
            });
            self.path.0.pop();
            let value = value?;
            match entry {
                serde_json::map::Entry::Occupied(mut slot) => {
                    slot.insert(value);
                }
                serde_json::map::Entry::Vacant(slot) => {
                    slot.insert(value);
                }
            }
        }
        Ok(Value::Object(object))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            self.path.0.push(Step::Item(items.len()));
            let item = seq.next_element_seed(Seed {
                path: &mut *self.path,
                out: &mut *self.out,
            });
            self.path.0.pop();
            match item? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
        // As serde_json's own value: a number that is not finite is null.
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
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

/// The seed decoding one nested value.
struct Seed<'p, 'de> {
    path: &'p mut FieldPath<'de>,
    out: &'p mut Vec<String>,
}

impl<'de> de::DeserializeSeed<'de> for Seed<'_, 'de> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(Decoder {
            path: self.path,
            out: self.out,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

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
        let (mut object, duplicates) = decode_json(body).expect("json");
        let found = problems(&deployments(), &mut object, duplicates);
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
        let (mut object, duplicates) = decode_json(body.as_bytes()).expect("json");
        let configmaps = crate::resources::builtins()
            .into_iter()
            .find(|t| t.kind == "ConfigMap")
            .expect("configmaps");
        assert_eq!(
            problems(&configmaps, &mut object, duplicates),
            [
                "duplicate field \"data.k7\"",
                "duplicate field \"binaryData.ab\""
            ]
        );
        let body = br#"{"spec":{"template":{"spec":{"containers":[{"name":"a"},{"name":"b","name":"c"}]}}}}"#;
        let (mut object, duplicates) = decode_json(body).expect("json");
        assert_eq!(
            problems(&deployments(), &mut object, duplicates),
            ["duplicate field \"spec.template.spec.containers[1].name\""]
        );
        // A repeated key is named at the key, before what its value repeats.
        let (_, duplicates) =
            decode_json(br#"{"a":{"x":1,"x":2},"a":{"y":1,"y":2}}"#).expect("json");
        assert_eq!(duplicates, ["a.x", "a", "a.y"]);
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
        assert!(problems(&deployments(), &mut object, Vec::new()).is_empty());
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
            problems(&rt, &mut object, Vec::new()),
            ["unknown field \"extra\"", "unknown field \"spec.typo\""]
        );
    }

    /// JSON text with keys repeated at any depth, and the paths repeated: objects are written
    /// by hand so that a key can appear twice.
    fn text_with_duplicates() -> impl proptest::strategy::Strategy<Value = (String, Vec<String>)> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(("null".to_owned(), Vec::<String>::new())),
            any::<i32>().prop_map(|n| (n.to_string(), Vec::<String>::new())),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| (format!("{f:e}"), Vec::<String>::new())),
            "[a-z \\\\\"]{0,6}".prop_map(|s| (Value::from(s).to_string(), Vec::<String>::new())),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(|items| {
                    let mut dups: Vec<String> = Vec::new();
                    let texts: Vec<String> = items
                        .into_iter()
                        .enumerate()
                        .map(|(i, (text, inner))| {
                            dups.extend(inner.into_iter().map(|d| join(&format!("[{i}]"), &d)));
                            text
                        })
                        .collect();
                    (format!("[{}]", texts.join(",")), dups)
                }),
                proptest::collection::vec(("[ab]", inner), 0..4).prop_map(|fields| {
                    let mut seen = HashSet::new();
                    let mut dups: Vec<String> = Vec::new();
                    let mut texts = Vec::new();
                    for (key, (text, inner)) in fields {
                        // A repeated key is named before the duplicates inside its value.
                        if !seen.insert(key.clone()) {
                            dups.push(key.clone());
                        }
                        dups.extend(inner.into_iter().map(|d| join(&key, &d)));
                        texts.push(format!("{}:{text}", Value::from(key)));
                    }
                    (format!("{{{}}}", texts.join(",")), dups)
                }),
            ]
        })
    }

    /// `inner` (a path under `step`) written under `step`, as [`FieldPath::render`] writes it.
    fn join(step: &str, inner: &str) -> String {
        match (step.starts_with('['), inner.starts_with('[')) {
            (_, true) => format!("{step}{inner}"),
            _ => format!("{step}.{inner}"),
        }
    }

    proptest::proptest! {
        /// One pass decodes exactly what `serde_json` decodes (the last of repeated keys) and
        /// names every repeated key's path, in the order of the text; anything that is not JSON
        /// is refused by both.
        #[test]
        fn decoding_should_match_serde_json_and_name_every_duplicate(
            (text, duplicates) in text_with_duplicates(),
            noise in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
        ) {
            let (value, found) = decode_json(text.as_bytes()).expect("valid JSON");
            let expected: Value = serde_json::from_str(&text).expect("valid JSON");
            proptest::prop_assert_eq!(value, expected);
            proptest::prop_assert_eq!(found, duplicates);
            proptest::prop_assert_eq!(
                decode_json(&noise).ok().map(|(v, _)| v),
                serde_json::from_slice::<Value>(&noise).ok()
            );
        }
    }
}
