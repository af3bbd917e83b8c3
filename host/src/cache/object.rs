//! [`CachedObject`]: how the cache holds one object version — its metadata parsed, the whole
//! object as JSON text.
//!
//! Guests receive objects as JSON text; event handlers, indexes and selectors look only at
//! metadata. So the cache serializes each object version once, when it arrives, with its
//! `apiVersion` and `kind`, shares those bytes with every read by every guest, and keeps the
//! parsed `ObjectMeta` beside them. That is about the size of the object's JSON — a fraction of a
//! parsed object tree — and a read costs a reference count, not a serialization.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicObject, DynamicResourceScope, Resource};
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::Gvk;

/// One cached object version. Cheap to clone (the JSON text is shared).
#[derive(Clone, Debug)]
pub struct CachedObject {
    metadata: ObjectMeta,
    json: Arc<str>,
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

    /// `apiVersion`, `kind` and `metadata`: the object as event handlers see it.
    pub fn head(&self, gvk: &Gvk) -> Value {
        json!({
            "apiVersion": gvk.api_version(),
            "kind": gvk.kind,
            "metadata": serde_json::to_value(&self.metadata).unwrap_or(Value::Null),
        })
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

    /// The size of its JSON text, in bytes.
    pub fn json_len(&self) -> usize {
        self.json.len()
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
    use super::*;

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
        let head = cached.head(&Gvk::new("", "v1", "Pod"));
        assert_eq!(head["metadata"]["namespace"], "a");
        assert!(head.get("spec").is_none());
    }
}
