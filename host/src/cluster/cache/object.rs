//! [`CachedObject`]: how the cache holds one object version — its metadata parsed, the whole
//! object as JSON text.
//!
//! Guests receive objects as JSON text; event handlers, indexes and selectors look only at
//! metadata. So the cache keeps each object version as JSON text, with its `apiVersion` and
//! `kind`, shares those bytes with every read by every guest, and keeps the parsed `ObjectMeta`
//! beside them. That is about the size of the object's JSON — a fraction of a parsed object
//! tree — and a read costs a reference count, not a serialization.
//!
//! An object of a metadata-only watch is held as the text of its `PartialObjectMetadata` alone,
//! with the few fields the cache reads itself (name, namespace, resourceVersion, labels, the
//! controller's UID) beside it; the rest of its metadata is parsed from the text when an event
//! handler asks. Reads share that text as they share a whole object's.
//!
//! A [`CachedObject`] deserializes straight from the watch stream: the object is transcoded
//! token by token into compact JSON text (no intermediate JSON tree), then its metadata is read
//! from that text.
//!
//! The cache drops `metadata.managedFields`, as controller-runtime's
//! `TransformStripManagedFields` does: field ownership is the API server's bookkeeping, often
//! larger than the rest of the metadata (a Pod with 30 environment variables carries 3 KB of
//! it), and no reconciler needs it to decide anything. Every guest would parse it on every
//! read and the cache would hold it for every object. A write never loses it: an update that
//! leaves `managedFields` out keeps the stored entries. Uncached reads (`uncached` kinds and
//! lists) come from the API server with it.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, Resource};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use krec_core::Gvk;
use krec_core::json::scan;

/// One cached object version. Cheap to clone (the JSON text is shared).
#[derive(Clone, Debug)]
pub struct CachedObject {
    held: Held,
}

/// What the cache holds of one object.
#[derive(Clone, Debug)]
enum Held {
    /// The whole object: its text, and its metadata parsed beside it.
    Object {
        metadata: Box<ObjectMeta>,
        json: Arc<str>,
        /// Whether the text carries `apiVersion` and `kind` (list items from the API server
        /// do not; [`with_kind`](CachedObject::with_kind) adds them).
        typed: bool,
    },
    /// An object known only by its metadata (a metadata-only watch's): the text of its
    /// `PartialObjectMetadata`, and the few fields the cache itself reads, so a
    /// metadata-only cache holds each object as little more than its metadata's JSON.
    /// The rest of the metadata is parsed from the text when asked for.
    Metadata { json: Arc<str>, head: Box<Head> },
}

/// What the cache reads of a metadata-only object without parsing its text.
#[derive(Clone, Debug, Default)]
struct Head {
    name: Option<Box<str>>,
    namespace: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    controller_uid: Option<Box<str>>,
    /// Sorted by key.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The parsed metadata, kept once [`Resource::meta`] was asked for it (nothing in the
    /// host asks: it reads [`CachedObject::metadata`], which parses without keeping).
    parsed: std::sync::OnceLock<Box<ObjectMeta>>,
}

impl Head {
    fn of(metadata: &ObjectMeta) -> Self {
        let boxed = |s: &Option<String>| s.as_deref().map(Box::from);
        Head {
            name: boxed(&metadata.name),
            namespace: boxed(&metadata.namespace),
            resource_version: boxed(&metadata.resource_version),
            controller_uid: controller_uid(metadata).map(Box::from),
            labels: metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (Box::from(k.as_str()), Box::from(v.as_str())))
                .collect(),
            parsed: std::sync::OnceLock::new(),
        }
    }
}

/// The UID of `metadata`'s controller owner reference, if any.
fn controller_uid(metadata: &ObjectMeta) -> Option<&str> {
    metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// The metadata of a JSON object's text.
#[derive(Deserialize)]
struct MetadataOf {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// What the cache reads of an object's text besides keeping it.
#[derive(Deserialize)]
struct Outline {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<ObjectMeta>,
}

impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut text = Vec::with_capacity(4096);
        serde_transcode::transcode(deserializer, &mut serde_json::Serializer::new(&mut text))
            .map_err(D::Error::custom)?;
        let text = String::from_utf8(text).map_err(D::Error::custom)?;
        CachedObject::from_text(text).map_err(D::Error::custom)
    }
}

/// An object as guests see it: `apiVersion`, `kind`, `metadata`, then the rest.
#[derive(Serialize)]
struct Typed<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    metadata: &'a ObjectMeta,
    #[serde(flatten)]
    rest: &'a Value,
}

impl CachedObject {
    /// The object `object` of kind `gvk`, serialized once. List items from the API server carry
    /// no `apiVersion` and `kind`; the cached text always does.
    pub fn new(gvk: &Gvk, object: DynamicObject) -> Self {
        let DynamicObject {
            mut metadata,
            mut data,
            ..
        } = object;
        metadata.managed_fields = None;
        if let Some(map) = data.as_object_mut() {
            // Written from `gvk` below; never twice.
            for key in ["apiVersion", "kind", "metadata"] {
                map.remove(key);
            }
        } else {
            data = Value::Object(serde_json::Map::new());
        }
        let api_version = gvk.api_version();
        let typed = Typed {
            api_version: &api_version,
            kind: &gvk.kind,
            metadata: &metadata,
            rest: &data,
        };
        // Serializing a map of string keys cannot fail; stay total all the same.
        let json = serde_json::to_string(&typed).unwrap_or_else(|err| {
            tracing::error!("cannot serialize a cached {gvk}: {err}");
            String::from("{}")
        });
        CachedObject {
            held: Held::Object {
                metadata: Box::new(metadata),
                json: json.into(),
                typed: true,
            },
        }
    }

    /// An object known only by its metadata (a metadata-only watch's): read as a
    /// `meta.k8s.io/v1` `PartialObjectMetadata` with its `metadata` (without `managedFields`),
    /// as client-go's metadata informers hold it. A guest decodes it as `PartialObjectMeta<K>`
    /// (or reads it as `Lazy<K>`); decoding it as `K` fails on its kind rather than yield an
    /// object without its spec that an update would write back.
    pub fn of_metadata(mut metadata: ObjectMeta) -> Self {
        metadata.managed_fields = None;
        let partial = Typed {
            api_version: "meta.k8s.io/v1",
            kind: "PartialObjectMetadata",
            metadata: &metadata,
            rest: &Value::Object(serde_json::Map::new()),
        };
        // Serializing a map of string keys cannot fail; stay total all the same.
        let json = serde_json::to_string(&partial).unwrap_or_else(|err| {
            tracing::error!("cannot serialize an object's metadata: {err}");
            String::from("{}")
        });
        CachedObject {
            held: Held::Metadata {
                json: json.into(),
                head: Box::new(Head::of(&metadata)),
            },
        }
    }

    /// An object from its JSON text (one JSON object).
    ///
    /// # Errors
    ///
    /// When the text is not a JSON object or its metadata is malformed.
    pub fn from_text(mut text: String) -> Result<Self, serde_json::Error> {
        if let Some(span) = managed_fields_span(&text) {
            text.replace_range(span, "");
        }
        let head: Outline = serde_json::from_str(&text)?;
        Ok(CachedObject {
            held: Held::Object {
                metadata: Box::new(head.metadata.unwrap_or_default()),
                typed: head.api_version.is_some() && head.kind.is_some(),
                json: text.into(),
            },
        })
    }

    /// This object with `apiVersion` and `kind` of `gvk` in its text, if it had neither.
    pub fn with_kind(self, gvk: &Gvk) -> Self {
        let json = match &self.held {
            Held::Object {
                json, typed: false, ..
            } => json.clone(),
            _ => return self,
        };
        let json = json.as_ref();
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
        let rest = json.strip_prefix('{').unwrap_or(json).trim_start();
        let separator = if rest.starts_with('}') { "" } else { "," };
        let text = format!(
            "{{\"apiVersion\":{},\"kind\":{}{separator}{rest}",
            quote(&gvk.api_version()),
            quote(&gvk.kind)
        );
        match CachedObject::from_text(text) {
            // Neither key was there, so the new text names each once.
            Ok(typed) if typed.is_typed() => typed,
            // One of the two was there: rebuild the object the slow, exact way.
            _ => match serde_json::from_str::<DynamicObject>(json) {
                Ok(object) => CachedObject::new(gvk, object),
                Err(err) => {
                    tracing::debug!("a cached {gvk} keeps its text without a kind: {err}");
                    self
                }
            },
        }
    }

    /// Whether its text carries `apiVersion` and `kind`.
    fn is_typed(&self) -> bool {
        match &self.held {
            Held::Object { typed, .. } => *typed,
            Held::Metadata { .. } => true,
        }
    }

    /// Its metadata: borrowed for a whole object, parsed from the text for one known only by
    /// its metadata (not kept: read [`name`](Self::name), [`namespace`](Self::namespace),
    /// [`resource_version`](Self::resource_version), [`label`](Self::label) and
    /// [`controller_uid`](Self::controller_uid) where they suffice).
    pub fn metadata(&self) -> Cow<'_, ObjectMeta> {
        match &self.held {
            Held::Object { metadata, .. } => Cow::Borrowed(metadata),
            Held::Metadata { json, head } => match head.parsed.get() {
                Some(metadata) => Cow::Borrowed(metadata),
                None => Cow::Owned(parse_metadata(json)),
            },
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<&str> {
        match &self.held {
            Held::Object { metadata, .. } => metadata.name.as_deref(),
            Held::Metadata { head, .. } => head.name.as_deref(),
        }
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<&str> {
        match &self.held {
            Held::Object { metadata, .. } => metadata.namespace.as_deref(),
            Held::Metadata { head, .. } => head.namespace.as_deref(),
        }
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        match &self.held {
            Held::Object { metadata, .. } => metadata.resource_version.as_deref(),
            Held::Metadata { head, .. } => head.resource_version.as_deref(),
        }
    }

    /// The value of the label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        match &self.held {
            Held::Object { metadata, .. } => metadata.labels.as_ref()?.get(key).map(String::as_str),
            Held::Metadata { head, .. } => head
                .labels
                .binary_search_by(|(k, _)| k.as_ref().cmp(key))
                .ok()
                .map(|i| head.labels[i].1.as_ref()),
        }
    }

    /// The whole object as JSON text, with `apiVersion` and `kind` (shared, not copied; an
    /// object known only by its metadata is a `meta.k8s.io/v1` `PartialObjectMetadata`).
    pub fn json(&self) -> Arc<str> {
        match &self.held {
            Held::Object { json, .. } | Held::Metadata { json, .. } => json.clone(),
        }
    }

    /// The whole object, parsed.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.json()).unwrap_or(Value::Null)
    }

    /// The UID of its controller owner reference, if any.
    pub fn controller_uid(&self) -> Option<&str> {
        match &self.held {
            Held::Object { metadata, .. } => controller_uid(metadata),
            Held::Metadata { head, .. } => head.controller_uid.as_deref(),
        }
    }
}

/// The metadata in `json`, a metadata-only object's text (written by the cache, so valid).
fn parse_metadata(json: &str) -> ObjectMeta {
    serde_json::from_str::<MetadataOf>(json)
        .map(|of| of.metadata)
        .unwrap_or_else(|err| {
            tracing::error!("a cached object's metadata does not parse: {err}");
            ObjectMeta::default()
        })
}

/// The bytes to cut to remove `managedFields` from the top-level `metadata` of the JSON object
/// `text` (the member and one comma beside it), if it has them. Reads only up to the end of
/// `metadata`; `None` for text that is not a JSON object (left for the parser to refuse).
fn managed_fields_span(text: &str) -> Option<std::ops::Range<usize>> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        at: 0,
    };
    scan.expect(b'{')?;
    loop {
        let key = scan.key()?;
        if key != b"\"metadata\"" {
            scan.skip_value()?;
            scan.next_member()?;
            continue;
        }
        scan.expect(b'{')?;
        // Where the previous member ended (after its value), for the comma before this one.
        let mut previous_end: Option<usize> = None;
        loop {
            scan.whitespace();
            let start = scan.at;
            let key = scan.key()?;
            scan.skip_value()?;
            let end = scan.at;
            let more = scan.next_member()?;
            if key == b"\"managedFields\"" {
                return Some(match previous_end {
                    // `,"managedFields":…`: the comma before it goes.
                    Some(previous) => previous..end,
                    // The first member: the comma after it goes, if another follows.
                    None if more => start..scan.at,
                    None => start..end,
                });
            }
            if !more {
                return None;
            }
            previous_end = Some(end);
        }
    }
}

/// A forward reader of JSON text for [`managed_fields_span`], over the workspace's scanner
/// ([`krec_core::json::scan`]): each step either moves past what it reads or answers `None`
/// (not the JSON it expected).
struct Scan<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn whitespace(&mut self) {
        self.at = scan::whitespace(self.bytes, self.at);
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.bytes.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// A member's key, with its quotes, and the `:` after it.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.whitespace();
        let start = self.at;
        self.string()?;
        let bytes = self.bytes;
        let key = &bytes[start..self.at];
        self.expect(b':')?;
        Some(key)
    }

    /// Past the string at the cursor.
    fn string(&mut self) -> Option<()> {
        if self.bytes.get(self.at) != Some(&b'"') {
            return None;
        }
        self.at = scan::string(self.bytes, self.at)?;
        Some(())
    }

    /// Past the value at the cursor: a string, an object or array (by depth, strings skipped
    /// whole), or a scalar (up to what ends it).
    fn skip_value(&mut self) -> Option<()> {
        self.whitespace();
        self.at = scan::value(self.bytes, self.at)?;
        Some(())
    }

    /// After a member's value: `true` past a `,` (another member follows), `false` past the
    /// object's closing `}`.
    fn next_member(&mut self) -> Option<bool> {
        self.whitespace();
        match self.bytes.get(self.at)? {
            b',' => {
                self.at += 1;
                Some(true)
            }
            b'}' => {
                self.at += 1;
                Some(false)
            }
            _ => None,
        }
    }
}

impl Resource for CachedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        match &self.held {
            Held::Object { metadata, .. } => metadata,
            Held::Metadata { json, head } => {
                head.parsed.get_or_init(|| Box::new(parse_metadata(json)))
            }
        }
    }

    /// A metadata-only object's changed metadata is not written back into its text, nor into
    /// the fields [`name`](CachedObject::name) and the like read: nothing in the host changes
    /// a cached object's metadata. Its [`meta`](Resource::meta) keeps the parse for the
    /// object's life (read [`CachedObject::metadata`] instead, which does not).
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.held {
            Held::Object { metadata, .. } => metadata,
            Held::Metadata { json, head } => {
                if head.parsed.get().is_none() {
                    let _ = head.parsed.set(Box::new(parse_metadata(json)));
                }
                head.parsed
                    .get_mut()
                    .map(Box::as_mut)
                    .unwrap_or_else(|| unreachable!("set above"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_list_item_should_be_transcoded_and_given_its_kind() {
        let text = r#"{"metadata":{"name":"p","namespace":"a","resourceVersion":"7"},"spec":{"x":[1,2,{"y":"z\n"}]}}"#;
        let item: CachedObject = serde_json::from_str(text).expect("item");
        assert_eq!(item.metadata().resource_version.as_deref(), Some("7"));
        let typed = item.with_kind(&Gvk::new("apps", "v1", "Deployment"));
        let value: Value = serde_json::from_str(&typed.json()).expect("valid JSON");
        assert_eq!(value["apiVersion"], "apps/v1");
        assert_eq!(value["kind"], "Deployment");
        assert_eq!(value["spec"]["x"][2]["y"], "z\n");
        assert_eq!(typed.metadata().name.as_deref(), Some("p"));
        // Already typed: kept as it is.
        let watched: CachedObject =
            serde_json::from_str(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"q"}}"#)
                .expect("watched");
        let kept = watched.clone().with_kind(&Gvk::new("", "v1", "Pod"));
        assert_eq!(kept.json(), watched.json());
        // Empty, and half-typed objects.
        let empty: CachedObject = serde_json::from_str("{}").expect("empty");
        let empty = empty.with_kind(&Gvk::new("", "v1", "Pod"));
        assert_eq!(empty.json().as_ref(), r#"{"apiVersion":"v1","kind":"Pod"}"#);
        let half: CachedObject =
            serde_json::from_str(r#"{"kind":"Pod","metadata":{"name":"h"}}"#).expect("half");
        let half = half.with_kind(&Gvk::new("", "v1", "Pod"));
        assert_eq!(half.json().matches("\"kind\"").count(), 1);
        let value: Value = serde_json::from_str(&half.json()).expect("valid JSON");
        assert_eq!(value["apiVersion"], "v1");
    }

    /// Any JSON value, keys from a small set (so that `managedFields` and `metadata` turn up at
    /// every depth), strings with quotes and escapes.
    fn json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let keys = prop::sample::select(vec!["a", "metadata", "managedFields", "name", "\"}{"]);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\{}\\[\\],: ]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(keys.clone(), inner, 0..5).prop_map(|m| Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever an object holds, the cached text is the object less its metadata's
        /// `managedFields`, compact or pretty-printed.
        #[test]
        fn the_cached_text_should_be_the_object_less_its_managed_fields(
            mut object in json(),
            metadata in json(),
            pretty in proptest::prelude::any::<bool>(),
        ) {
            if !object.is_object() {
                object = serde_json::json!({"spec": object});
            }
            object["metadata"] = metadata;
            let text = if pretty {
                serde_json::to_string_pretty(&object)
            } else {
                serde_json::to_string(&object)
            }
            .expect("JSON");
            let mut expected = object.clone();
            if let Some(meta) = expected["metadata"].as_object_mut() {
                meta.remove("managedFields");
            }
            let mut cut = text.clone();
            if let Some(span) = managed_fields_span(&text) {
                cut.replace_range(span, "");
            }
            let value: Value = serde_json::from_str(&cut).expect("still valid JSON");
            proptest::prop_assert_eq!(value, expected);
        }
    }

    #[test]
    fn managed_fields_should_be_dropped_from_the_cached_text_wherever_they_stand() {
        let entry = r#"[{"manager":"kubectl","fieldsV1":{"f:data":{"f:a\"}":{}}},"time":null}]"#;
        for text in [
            format!(r#"{{"metadata":{{"managedFields":{entry}}},"data":{{"a":"1"}}}}"#),
            format!(r#"{{"metadata":{{"managedFields":{entry},"name":"m"}},"data":{{"a":"1"}}}}"#),
            format!(r#"{{"metadata":{{"name":"m","managedFields":{entry}}},"data":{{"a":"1"}}}}"#),
            format!(
                r#"{{"kind":"ConfigMap","metadata":{{"name":"m","managedFields":{entry},"uid":"u"}},"data":{{"a":"1"}}}}"#
            ),
            format!(
                r#" {{ "data" : {{"managedFields":"kept"}} , "metadata" : {{ "labels" : {{"x":"y"}} , "managedFields" : {entry} , "generation" : 3 }} }}"#
            ),
        ] {
            let cached = CachedObject::from_text(text.clone()).expect("object");
            let value: Value = serde_json::from_str(&cached.json()).expect("still valid JSON");
            let mut expected: Value = serde_json::from_str(&text).expect("test JSON");
            expected["metadata"]
                .as_object_mut()
                .expect("metadata")
                .remove("managedFields");
            assert_eq!(value, expected, "{text}");
            assert!(cached.metadata().managed_fields.is_none());
        }
        // Nothing to drop, or not an object: unchanged (the parser judges).
        for text in [
            r#"{"metadata":{"name":"m"},"spec":{"managedFields":[1]}}"#,
            r#"{"spec":{"x":"\"metadata\":{\"managedFields\""}}"#,
            "[1,2]",
            "{",
        ] {
            assert_eq!(managed_fields_span(text), None, "{text}");
        }
    }

    #[test]
    fn an_object_known_by_its_metadata_should_read_as_partial_object_metadata() {
        let metadata: ObjectMeta = serde_json::from_value(json!({
            "name": "p", "namespace": "a", "resourceVersion": "9", "uid": "u",
            "labels": {"b": "2", "a": "1"},
            "annotations": {"note": "kept"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "other"},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}],
            "managedFields": [{"manager": "kubectl"}]}))
        .expect("metadata");
        let cached = CachedObject::of_metadata(metadata.clone());
        assert_eq!(cached.name(), Some("p"));
        assert_eq!(cached.namespace(), Some("a"));
        assert_eq!(cached.resource_version(), Some("9"));
        assert_eq!(cached.controller_uid(), Some("rs-uid"));
        assert_eq!(
            (cached.label("a"), cached.label("b")),
            (Some("1"), Some("2"))
        );
        assert_eq!(cached.label("c"), None);
        let value: Value = serde_json::from_str(&cached.json()).expect("valid JSON");
        assert_eq!(value["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(value["kind"], "PartialObjectMetadata");
        assert_eq!(value["metadata"]["annotations"]["note"], "kept");
        assert!(value["metadata"].get("managedFields").is_none());
        // Every field of the metadata but `managedFields`, parsed back from the text.
        let expected = ObjectMeta {
            managed_fields: None,
            ..metadata
        };
        assert_eq!(*cached.metadata(), expected);
        assert_eq!(*cached.meta(), expected);
        // The text is shared, not written again.
        assert!(Arc::ptr_eq(&cached.json(), &cached.json()));
    }

    #[test]
    fn a_cached_object_should_carry_its_kind_and_every_field_once() {
        // As a list item arrives: no apiVersion or kind.
        let object: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}}))
        .expect("object");
        let cached = CachedObject::new(&Gvk::new("", "v1", "Pod"), object);
        let value: Value = serde_json::from_str(&cached.json()).expect("valid JSON");
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["kind"], "Pod");
        assert_eq!(value["metadata"]["labels"]["app"], "web");
        assert_eq!(value["spec"]["containers"][0]["image"], "i");
        assert_eq!(value["status"]["phase"], "Running");
        assert_eq!(cached.json().matches("\"kind\"").count(), 1);
        assert_eq!(cached.metadata().name.as_deref(), Some("p"));
        assert_eq!(cached.metadata().namespace.as_deref(), Some("a"));
    }
}
