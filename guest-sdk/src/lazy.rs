//! [`Lazy`]: an object read without decoding it — only the fields a guest touches are found
//! and decoded.
//!
//! A reconciler that reads a Pod's labels and one status field pays, with `get::<Pod>`, for
//! decoding the whole Pod: its spec, every container's environment, and `managedFields`, which
//! on a stored object is often half of it. `get::<Lazy<Pod>>` instead keeps the object's JSON
//! text as the host sent it and walks it when asked: `pod.at(&["status", "phase"])` skips every
//! value before `status` without decoding it, then decodes the one string. [`Lazy::decode`]
//! gives the full typed object whenever it is wanted.
//!
//! ```
//! use krec_guest::k8s_openapi::api::core::v1::Pod;
//! use krec_guest::prelude::*;
//!
//! fn phase_and_restarts(ctx: &Context, namespace: &str, name: &str) -> Result<(String, u64)> {
//!     let pod = ctx.get::<Lazy<Pod>>(namespace, name)?;
//!     let phase = pod.at(&["status", "phase"]).and_then(|f| f.as_str()).unwrap_or_default();
//!     let restarts = pod
//!         .at(&["status", "containerStatuses"])
//!         .map(|statuses| {
//!             statuses
//!                 .elements()
//!                 .filter_map(|s| s.get("restartCount")?.as_u64())
//!                 .sum()
//!         })
//!         .unwrap_or(0);
//!     Ok((phase.into_owned(), restarts))
//! }
//! ```
//!
//! A `Lazy<K>` is a [`Resource`] of `K`'s kind, so it goes wherever `K` goes: `get`, `get_opt`,
//! `list`, `update`, `create`, a [`Validator`](crate::Validator)'s `Object`. Its metadata
//! ([`Resource::meta`], and through it [`ResourceExt`](crate::ResourceExt)'s `labels()`,
//! `name_any()`, …) is decoded on first use, without `managedFields`; changes made through
//! `meta_mut()` (`labels_mut()`, `annotations_mut()`, …) are written into the text when the
//! object is sent back (`ctx.update(&pod)`), with `managedFields` and every other field exactly
//! as received.
//!
//! The text is not validated when it arrives (it is the API server's, through the host): a
//! malformed object reads as missing fields, and [`Lazy::decode`] reports the error.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_core::Resource;
use serde::de::{Deserialize, DeserializeOwned};
use serde::ser::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::error::{Error, Result};

/// One JSON value inside an object's text: found without decoding anything around it (nor
/// even finding where it ends, until that is needed), decoded only when asked
/// ([`as_str`](Self::as_str), [`decode`](Self::decode), …).
#[derive(Clone, Copy)]
pub struct Field<'a> {
    /// The text from the value's first byte to the end of the whole object's text.
    rest: &'a str,
}

impl fmt::Debug for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

impl PartialEq for Field<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl<'a> Field<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.rest.as_bytes()
    }

    /// The value's JSON text (through the end of the object's text when it is malformed).
    pub fn json(&self) -> &'a str {
        let end = krec_core::json::scan::value(self.bytes(), 0).unwrap_or(self.rest.len());
        self.rest.get(..end).unwrap_or(self.rest)
    }

    /// The member `key` of this object (`None` when absent or when this is not an object).
    pub fn get(&self, key: &str) -> Option<Field<'a>> {
        self.members()
            .find(|(name, _)| *name == *key)
            .map(|(_, value)| value)
    }

    /// The value at `path`, a member name per level: `&["status", "phase"]`. The text is read
    /// up to the value and no further: every member before it on the way is skipped undecoded,
    /// nothing after it is looked at.
    pub fn at(&self, path: &[&str]) -> Option<Field<'a>> {
        path.iter().try_fold(*self, |field, key| field.get(key))
    }

    /// The members of this object, in order (none when this is not an object).
    pub fn members(&self) -> Members<'a> {
        Members {
            text: self.rest,
            next: (self.bytes().first() == Some(&b'{')).then_some(Next::First(1)),
        }
    }

    /// The elements of this array, in order (none when this is not an array).
    pub fn elements(&self) -> Elements<'a> {
        Elements {
            text: self.rest,
            next: (self.bytes().first() == Some(&b'[')).then_some(Next::First(1)),
        }
    }

    /// Whether this is `null` (read without looking past it).
    pub fn is_null(&self) -> bool {
        self.bytes().starts_with(b"null")
            && !matches!(self.bytes().get(4), Some(b) if b.is_ascii_alphanumeric())
    }

    /// This string, borrowed from the text unless it has escapes (`None` when not a string).
    pub fn as_str(&self) -> Option<Cow<'a, str>> {
        let end = krec_core::json::scan::string(self.bytes(), 0)
            .filter(|_| self.rest.starts_with('"'))?;
        let quoted = self.rest.get(..end)?;
        let inner = quoted.get(1..end - 1)?;
        if inner.contains('\\') {
            serde_json::from_str::<String>(quoted).ok().map(Cow::Owned)
        } else {
            Some(Cow::Borrowed(inner))
        }
    }

    /// This number as an `i64` (`None` when not an integer that fits).
    pub fn as_i64(&self) -> Option<i64> {
        self.json().parse().ok()
    }

    /// This number as a `u64` (`None` when not a non-negative integer that fits).
    pub fn as_u64(&self) -> Option<u64> {
        self.json().parse().ok()
    }

    /// This number as an `f64` (`None` when not a number).
    pub fn as_f64(&self) -> Option<f64> {
        match self.bytes().first() {
            Some(b'-' | b'0'..=b'9') => self.json().parse().ok(),
            _ => None,
        }
    }

    /// This boolean (`None` when not `true` or `false`).
    pub fn as_bool(&self) -> Option<bool> {
        match self.json() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// Decode this value as `T` (any `serde` type: a `k8s-openapi` struct, a map, a number, or
    /// a struct of only the fields wanted, which `serde` reads skipping the others).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming what did not decode.
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T> {
        serde_json::from_str(self.json())
            .map_err(|err| Error::Invalid(format!("decoding a field: {err}")))
    }
}

/// Where an iteration over an object's members or an array's elements goes on.
#[derive(Clone, Copy, Debug)]
enum Next {
    /// At this index, nothing read yet.
    First(usize),
    /// After the value that starts at this index, which the caller may have walked into but
    /// the iteration has not skipped yet.
    After(usize),
}

impl Next {
    /// The index just after the previous item (skipping it now), before the separator.
    fn position(self, bytes: &[u8]) -> Option<usize> {
        match self {
            Next::First(at) => Some(at),
            Next::After(start) => krec_core::json::scan::value(bytes, start),
        }
    }
}

/// The members of a JSON object: `(name, value)` pairs, from [`Field::members`].
#[derive(Clone, Debug)]
pub struct Members<'a> {
    text: &'a str,
    /// `None` at the end (or on malformed text).
    next: Option<Next>,
}

impl<'a> Iterator for Members<'a> {
    type Item = (Key<'a>, Field<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text.as_bytes();
        let next = self.next.take()?;
        let mut i = krec_core::json::scan::whitespace(bytes, next.position(bytes)?);
        if let Next::After(_) = next {
            if bytes.get(i) != Some(&b',') {
                return None; // `}`, or malformed
            }
            i = krec_core::json::scan::whitespace(bytes, i + 1);
        }
        if bytes.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = krec_core::json::scan::string(bytes, i)?;
        let key = Key {
            quoted: self.text.get(i..key_end)?,
        };
        i = krec_core::json::scan::whitespace(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        let start = krec_core::json::scan::whitespace(bytes, i + 1);
        if matches!(bytes.get(start), None | Some(b'}' | b']' | b',' | b':')) {
            return None;
        }
        self.next = Some(Next::After(start));
        Some((
            key,
            Field {
                rest: self.text.get(start..)?,
            },
        ))
    }
}

/// The elements of a JSON array, from [`Field::elements`].
#[derive(Clone, Debug)]
pub struct Elements<'a> {
    text: &'a str,
    next: Option<Next>,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Field<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        let bytes = self.text.as_bytes();
        let next = self.next.take()?;
        let mut start = krec_core::json::scan::whitespace(bytes, next.position(bytes)?);
        if let Next::After(_) = next {
            if bytes.get(start) != Some(&b',') {
                return None; // `]`, or malformed
            }
            start = krec_core::json::scan::whitespace(bytes, start + 1);
        }
        if matches!(bytes.get(start), None | Some(b']' | b'}' | b',')) {
            return None;
        }
        self.next = Some(Next::After(start));
        Some(Field {
            rest: self.text.get(start..)?,
        })
    }
}

/// A member's name as it is written in the text; compares equal to the name it stands for.
#[derive(Clone, Copy, Debug)]
pub struct Key<'a> {
    /// The name with its quotes, as written.
    quoted: &'a str,
}

impl<'a> Key<'a> {
    /// The name as written, without its quotes (escapes not resolved).
    fn raw(&self) -> &'a str {
        self.quoted
            .get(1..self.quoted.len() - 1)
            .unwrap_or_default()
    }

    /// The name, unescaped.
    pub fn as_str(&self) -> Cow<'a, str> {
        Field { rest: self.quoted }
            .as_str()
            .unwrap_or(Cow::Borrowed(self.raw()))
    }
}

impl PartialEq<str> for Key<'_> {
    fn eq(&self, other: &str) -> bool {
        let raw = self.raw();
        if raw.contains('\\') {
            self.as_str() == other
        } else {
            raw == other
        }
    }
}

/// A Kubernetes object as JSON text, read lazily: see the [module](self) documentation.
pub struct Lazy<K> {
    json: Box<str>,
    meta: OnceCell<ObjectMeta>,
    meta_changed: bool,
    kind: PhantomData<fn() -> K>,
}

impl<K> Lazy<K> {
    /// The object whose JSON text is `json` (not validated: see the [module](self) docs).
    pub fn from_json(json: impl Into<Box<str>>) -> Self {
        Lazy {
            json: json.into(),
            meta: OnceCell::new(),
            meta_changed: false,
            kind: PhantomData,
        }
    }

    /// The whole object as a [`Field`], to walk.
    pub fn root(&self) -> Field<'_> {
        Field {
            rest: self.json.trim_ascii(),
        }
    }

    /// The top-level member `key` (`"spec"`, `"status"`, …).
    pub fn get(&self, key: &str) -> Option<Field<'_>> {
        self.root().get(key)
    }

    /// The value at `path`: `&["status", "phase"]`.
    pub fn at(&self, path: &[&str]) -> Option<Field<'_>> {
        self.root().at(path)
    }

    /// The label `key`, read from the text (nothing else decoded).
    pub fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        self.string_in("labels", key)
    }

    /// The annotation `key`, read from the text (nothing else decoded).
    pub fn annotation(&self, key: &str) -> Option<Cow<'_, str>> {
        self.string_in("annotations", key)
    }

    /// `metadata.<map>.<key>`, from `meta_mut`'s changes when there are any.
    fn string_in(&self, map: &str, key: &str) -> Option<Cow<'_, str>> {
        if self.meta_changed {
            let meta = self.meta.get()?;
            let map = if map == "labels" {
                &meta.labels
            } else {
                &meta.annotations
            };
            return map.as_ref()?.get(key).map(|v| Cow::Borrowed(v.as_str()));
        }
        self.at(&["metadata", map, key])?.as_str()
    }

    /// The object's JSON text as received (changes made through `meta_mut` are in
    /// [`to_json`](Self::to_json), not here).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// The object's JSON text with the changes made through `meta_mut`.
    pub fn to_json(&self) -> Cow<'_, str> {
        match self.meta.get() {
            Some(meta) if self.meta_changed => Cow::Owned(splice_metadata(&self.json, meta)),
            _ => Cow::Borrowed(&self.json),
        }
    }

    /// Decode the whole object as `K`, with the changes made through `meta_mut`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the field that did not decode.
    pub fn decode(&self) -> Result<K>
    where
        K: DeserializeOwned,
    {
        let text = self.to_json();
        let mut decoder = serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(&mut decoder).map_err(|err| {
            Error::Invalid(format!(
                "decoding the object: {}: {}",
                err.path(),
                err.inner()
            ))
        })
    }

    fn decoded_meta(&self) -> &ObjectMeta {
        self.meta
            .get_or_init(|| self.get("metadata").map(read_meta).unwrap_or_default())
    }
}

/// The object's metadata, every field but `managedFields` (skipped, never decoded); a member
/// that does not decode is left unset.
fn read_meta(metadata: Field<'_>) -> ObjectMeta {
    let mut meta = ObjectMeta::default();
    for (key, value) in metadata.members() {
        let value = Some(value).filter(|v| !v.is_null());
        match &*key.as_str() {
            "name" => meta.name = value.and_then(|v| v.decode().ok()),
            "generateName" => meta.generate_name = value.and_then(|v| v.decode().ok()),
            "namespace" => meta.namespace = value.and_then(|v| v.decode().ok()),
            "uid" => meta.uid = value.and_then(|v| v.decode().ok()),
            "resourceVersion" => meta.resource_version = value.and_then(|v| v.decode().ok()),
            "generation" => meta.generation = value.and_then(|v| v.as_i64()),
            "creationTimestamp" => meta.creation_timestamp = value.and_then(|v| v.decode().ok()),
            "deletionTimestamp" => meta.deletion_timestamp = value.and_then(|v| v.decode().ok()),
            "deletionGracePeriodSeconds" => {
                meta.deletion_grace_period_seconds = value.and_then(|v| v.as_i64());
            }
            "labels" => meta.labels = value.and_then(|v| v.decode().ok()),
            "annotations" => meta.annotations = value.and_then(|v| v.decode().ok()),
            "ownerReferences" => meta.owner_references = value.and_then(|v| v.decode().ok()),
            "finalizers" => meta.finalizers = value.and_then(|v| v.decode().ok()),
            "selfLink" => meta.self_link = value.and_then(|v| v.decode().ok()),
            _ => {} // managedFields, and any field this version does not know
        }
    }
    meta
}

/// `json` with its `metadata` replaced by `meta`, the original `managedFields` kept when `meta`
/// has none.
fn splice_metadata(json: &str, meta: &ObjectMeta) -> String {
    let root = Field {
        rest: json.trim_ascii(),
    };
    let old = root.get("metadata");
    let mut new_meta = serde_json::to_string(meta).unwrap_or_else(|_| "{}".to_owned());
    if meta.managed_fields.is_none()
        && let Some(managed) = old.and_then(|m| m.get("managedFields"))
    {
        // `new_meta` is an object: `{…}` or `{}`.
        new_meta.pop();
        if new_meta.len() > 1 {
            new_meta.push(',');
        }
        new_meta.push_str("\"managedFields\":");
        new_meta.push_str(managed.json());
        new_meta.push('}');
    }
    match old {
        Some(old) => {
            // `old.rest` is a slice of `json`: its offset is where it starts.
            let start = old.rest.as_ptr() as usize - json.as_ptr() as usize;
            let end = start + old.json().len();
            let mut out = String::with_capacity(json.len() + new_meta.len());
            out.push_str(&json[..start]);
            out.push_str(&new_meta);
            out.push_str(&json[end..]);
            out
        }
        None => {
            let body = root
                .rest
                .strip_prefix('{')
                .unwrap_or(root.rest)
                .trim_start();
            let separator = if body.starts_with('}') { "" } else { "," };
            format!("{{\"metadata\":{new_meta}{separator}{body}")
        }
    }
}

impl<K> Clone for Lazy<K> {
    fn clone(&self) -> Self {
        Lazy {
            json: self.json.clone(),
            meta: self.meta.clone(),
            meta_changed: self.meta_changed,
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Lazy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lazy")
            .field("json", &self.to_json())
            .finish()
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lazy<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        K::api_version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }

    /// The metadata, decoded on first use without `managedFields`.
    fn meta(&self) -> &ObjectMeta {
        self.decoded_meta()
    }

    /// The metadata to change: the changes go into the text sent back.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.decoded_meta();
        self.meta_changed = true;
        self.meta
            .get_mut()
            .unwrap_or_else(|| unreachable!("the metadata was decoded just above"))
    }
}

impl<K> Serialize for Lazy<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let text = self.to_json();
        let raw: &RawValue = serde_json::from_str(&text).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// How the SDK makes the type a guest asked for from an object's JSON text, as the host sends
/// it: `serde` for every [`DeserializeOwned`] type (`Pod`, your `CustomResource`s,
/// `DynamicObject`, `PartialObjectMeta<K>`), the text itself, unread, for a [`Lazy`] object.
/// `Context`'s reads and writes and a webhook's `Object` take any `FromJson` type.
pub trait FromJson: Sized {
    /// Whether a read may answer this type with an object the host's cache holds only the
    /// metadata of (a `metadataOnly` kind): `Lazy` reads whatever text it gets; a typed object
    /// would lack its spec, so such reads are refused for it (`PartialObjectMeta<K>` says so
    /// through `Resource::metadata_api`).
    const TAKES_METADATA: bool = false;

    /// The value `text` holds.
    ///
    /// # Errors
    ///
    /// When `text` does not decode as `Self` (a `Lazy` object never fails here: see
    /// [`Lazy::decode`]).
    fn from_json_text(text: String) -> std::result::Result<Self, serde_json::Error>;
}

impl<T: DeserializeOwned> FromJson for T {
    fn from_json_text(text: String) -> std::result::Result<Self, serde_json::Error> {
        serde_json::from_str(&text)
    }
}

impl<K> FromJson for Lazy<K> {
    const TAKES_METADATA: bool = true;

    fn from_json_text(text: String) -> std::result::Result<Self, serde_json::Error> {
        Ok(Lazy::from_json(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube_core::ResourceExt;

    const POD: &str = r#"{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default", "uid": "u1",
            "resourceVersion": "7", "generation": 2,
            "labels": {"app": "web", "tier": "front \"end\""},
            "annotations": {"a.example/x": "1"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                "fieldsV1": {"f:metadata": {"f:labels": {"k:{\"name\":\"x\"}": {}}}}}]},
        "spec": {"containers": [
            {"name": "a", "image": "nginx", "env": [{"name": "X", "value": "]}"}, {"name": "Y"}]},
            {"name": "b", "image": "busybox"}]},
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 3}, {"restartCount": 4}]}
    }"#;

    fn pod() -> Lazy<Pod> {
        Lazy::from_json(POD)
    }

    #[test]
    fn fields_should_be_found_without_decoding_the_rest() {
        let pod = pod();
        assert_eq!(
            pod.at(&["status", "phase"])
                .and_then(|f| f.as_str())
                .as_deref(),
            Some("Running")
        );
        assert_eq!(pod.label("app").as_deref(), Some("web"));
        assert_eq!(pod.label("tier").as_deref(), Some("front \"end\""));
        assert_eq!(pod.label("none"), None);
        assert_eq!(pod.annotation("a.example/x").as_deref(), Some("1"));
        assert_eq!(
            pod.at(&["metadata", "generation"]).and_then(|f| f.as_i64()),
            Some(2)
        );
        let env: Vec<usize> = pod
            .at(&["spec", "containers"])
            .map(|c| {
                c.elements()
                    .map(|c| c.get("env").map_or(0, |e| e.elements().count()))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(env, [2, 0]);
        let restarts: u64 = pod
            .at(&["status", "containerStatuses"])
            .map(|s| {
                s.elements()
                    .filter_map(|s| s.get("restartCount")?.as_u64())
                    .sum()
            })
            .unwrap_or(0);
        assert_eq!(restarts, 7);
        let keys: Vec<String> = pod
            .root()
            .members()
            .map(|(k, _)| k.as_str().into_owned())
            .collect();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"]);
    }

    #[test]
    fn metadata_should_decode_without_managed_fields_and_changes_go_back_into_the_text() {
        let mut pod = pod();
        assert_eq!(pod.name_any(), "web-0");
        assert_eq!(pod.labels().get("app").map(String::as_str), Some("web"));
        assert!(pod.meta().managed_fields.is_none());
        pod.annotations_mut().insert("stamp".into(), "2".into());
        assert_eq!(pod.annotation("stamp").as_deref(), Some("2"));
        let sent: serde_json::Value = serde_json::to_value(&pod).expect("serialize");
        assert_eq!(sent["metadata"]["annotations"]["stamp"], "2");
        assert_eq!(sent["metadata"]["managedFields"][0]["manager"], "kubectl");
        assert_eq!(sent["spec"]["containers"][0]["env"][0]["value"], "]}");
        let whole: Pod = pod.decode().expect("decode");
        assert_eq!(
            whole.annotations().get("stamp").map(String::as_str),
            Some("2")
        );
        assert_eq!(whole.metadata.managed_fields.map(|m| m.len()), Some(1));
    }

    #[test]
    fn an_object_without_metadata_should_get_it_when_changed() {
        let mut object: Lazy<Pod> = Lazy::from_json(r#"{"kind":"Pod"}"#);
        object.labels_mut().insert("a".into(), "b".into());
        let sent: serde_json::Value = serde_json::from_str(&object.to_json()).expect("json");
        assert_eq!(
            sent,
            serde_json::json!({"kind": "Pod", "metadata": {"labels": {"a": "b"}}})
        );
        let mut empty: Lazy<Pod> = Lazy::from_json("{}");
        empty.labels_mut().insert("a".into(), "b".into());
        assert_eq!(empty.to_json(), r#"{"metadata":{"labels":{"a":"b"}}}"#);
    }

    #[test]
    fn malformed_text_should_read_as_missing_and_fail_to_decode() {
        for text in [
            "",
            "{",
            r#"{"a""#,
            r#"{"a":}"#,
            r#"{"metadata": {"labels": {"x": "#,
            "[1,",
            "\"abc",
            "nul",
        ] {
            let object: Lazy<Pod> = Lazy::from_json(text);
            assert_eq!(object.label("x"), None, "{text}");
            assert!(object.decode().is_err(), "{text}");
            assert_eq!(object.name_any(), "", "{text}");
        }
        // Iterations stop where the text stops making sense.
        for text in ["", "{", r#"{"a""#, r#"{"a":}"#, "[1,", "\"abc", "nul"] {
            let object: Lazy<Pod> = Lazy::from_json(text);
            assert_eq!(object.root().members().count(), 0, "{text}");
        }
        let object: Lazy<Pod> = Lazy::from_json("[1, 2,");
        assert_eq!(object.root().elements().count(), 2);
        let object: Lazy<Pod> = Lazy::from_json(r#"{"a": 1, "b" 2}"#);
        assert_eq!(object.root().members().count(), 1);
    }

    #[test]
    fn lazy_objects_should_be_made_and_sent_as_their_text() {
        let pod = <Lazy<Pod> as FromJson>::from_json_text(POD.to_owned()).expect("lazy");
        assert_eq!(pod.label("app").as_deref(), Some("web"));
        let back = serde_json::to_string(&pod).expect("serialize");
        let a: serde_json::Value = serde_json::from_str(&back).expect("json");
        let b: serde_json::Value = serde_json::from_str(POD).expect("json");
        assert_eq!(a, b);
        // Every other type goes through serde.
        let typed = <Pod as FromJson>::from_json_text(POD.to_owned()).expect("typed");
        assert_eq!(typed.metadata.name.as_deref(), Some("web-0"));
        assert!(<Pod as FromJson>::from_json_text("{".into()).is_err());
    }

    #[test]
    fn changed_metadata_should_splice_into_text_with_surrounding_whitespace() {
        // kube-apiserver's answers end in a newline; a text may start with blanks too.
        let mut pod: Lazy<Pod> = Lazy::from_json(format!("  {POD}\n"));
        pod.labels_mut().insert("é".into(), "ü".into());
        let sent: serde_json::Value = serde_json::from_str(&pod.to_json()).expect("valid JSON");
        assert_eq!(sent["metadata"]["labels"]["é"], "ü");
        assert_eq!(sent["spec"]["containers"][1]["name"], "b");
        assert_eq!(sent["metadata"]["managedFields"][0]["manager"], "kubectl");
    }

    #[test]
    fn keys_with_escapes_should_compare_as_their_names() {
        let object: Lazy<Pod> = Lazy::from_json(r#"{"a\u0062": 1, "c": {"d\"": true}}"#);
        assert_eq!(object.get("ab").and_then(|f| f.as_i64()), Some(1));
        assert_eq!(
            object.get("a\\u0062"),
            None,
            "the name is ab, not its spelling"
        );
        assert_eq!(
            object.at(&["c", "d\""]).and_then(|f| f.as_bool()),
            Some(true)
        );
    }
}
