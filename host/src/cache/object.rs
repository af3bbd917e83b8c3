//! [`CachedObject`]: how the cache holds one object version — its metadata parsed, the whole
//! object as JSON text.
//!
//! Guests receive objects as JSON text; event handlers, indexes and selectors look only at
//! metadata. So the cache keeps each object version as JSON text, with its `apiVersion` and
//! `kind`, shares those bytes with every read by every guest, and keeps the parsed `ObjectMeta`
//! beside them. That is about the size of the object's JSON — a fraction of a parsed object
//! tree — and a read costs a reference count, not a serialization.
//!
//! A [`CachedObject`] deserializes straight from the watch stream: the object is transcoded
//! token by token into compact JSON text (no intermediate JSON tree), then its metadata is read
//! from that text.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, Resource};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::cluster::Gvk;

/// One cached object version. Cheap to clone (the JSON text is shared).
#[derive(Clone, Debug)]
pub struct CachedObject {
    metadata: ObjectMeta,
    json: Arc<str>,
    /// Whether the text carries `apiVersion` and `kind` (list items from the API server do
    /// not; [`with_kind`](Self::with_kind) adds them).
    typed: bool,
}

/// What the cache reads of an object's text besides keeping it.
#[derive(Deserialize)]
struct Head {
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
            metadata, mut data, ..
        } = object;
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
            metadata,
            json: json.into(),
            typed: true,
        }
    }

    /// An object from its JSON text (one JSON object).
    ///
    /// # Errors
    ///
    /// When the text is not a JSON object or its metadata is malformed.
    pub fn from_text(text: String) -> Result<Self, serde_json::Error> {
        let head: Head = serde_json::from_str(&text)?;
        Ok(CachedObject {
            metadata: head.metadata.unwrap_or_default(),
            typed: head.api_version.is_some() && head.kind.is_some(),
            json: text.into(),
        })
    }

    /// This object with `apiVersion` and `kind` of `gvk` in its text, if it had neither.
    pub fn with_kind(self, gvk: &Gvk) -> Self {
        if self.typed {
            return self;
        }
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""));
        let rest = self
            .json
            .strip_prefix('{')
            .unwrap_or(&self.json)
            .trim_start();
        let separator = if rest.starts_with('}') { "" } else { "," };
        let text = format!(
            "{{\"apiVersion\":{},\"kind\":{}{separator}{rest}",
            quote(&gvk.api_version()),
            quote(&gvk.kind)
        );
        match CachedObject::from_text(text) {
            // Neither key was there, so the new text names each once.
            Ok(typed) if typed.typed => typed,
            // One of the two was there: rebuild the object the slow, exact way.
            _ => match serde_json::from_str::<DynamicObject>(&self.json) {
                Ok(object) => CachedObject::new(gvk, object),
                Err(err) => {
                    tracing::debug!("a cached {gvk} keeps its text without a kind: {err}");
                    self
                }
            },
        }
    }

    /// Its metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    /// The whole object as JSON text, with `apiVersion` and `kind`.
    pub fn json(&self) -> &Arc<str> {
        &self.json
    }

    /// The whole object, parsed.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// The UID of its controller owner reference, if any.
    pub fn controller_uid(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.as_str())
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
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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
        let value: Value = serde_json::from_str(typed.json()).expect("valid JSON");
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
        let value: Value = serde_json::from_str(half.json()).expect("valid JSON");
        assert_eq!(value["apiVersion"], "v1");
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
        let value: Value = serde_json::from_str(cached.json()).expect("valid JSON");
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
