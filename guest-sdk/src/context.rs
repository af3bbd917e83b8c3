//! [`Context`]: the reconciler's only way to read and write cluster state, through the host.

use kube_core::{DynamicObject, GroupVersionKind, Resource};
use serde::Serialize;

use crate::bindings::krec::reconciler::types as wit;
use crate::error::{Error, Result};
use crate::imports::{client, events};
use crate::lazy::FromJson;
use crate::params::{EventType, ListParams, Patch, Preconditions};

/// Handle to the host for one reconcile: typed and untyped get/list/create/update/patch/delete,
/// and Kubernetes Events.
///
/// Reads are served from the host's shared cache unless [`ListParams::uncached`] asks for the API
/// server; writes always go to the API server. Every call is checked against the permissions in
/// the guest's manifest and fails with [`Error::Forbidden`] when not permitted.
///
/// Typed calls work with any type implementing kube's [`Resource`] with a static type: all
/// `k8s-openapi` types and structs made with the `CustomResource`
/// derive. The `*_dynamic` calls take a [`GroupVersionKind`] and return [`DynamicObject`]s.
#[derive(Debug)]
pub struct Context {
    _private: (),
}

fn gvk_of<K: Resource<DynamicType = ()>>() -> wit::Gvk {
    wit::Gvk {
        group: K::group(&()).into_owned(),
        version: K::version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    }
}

fn wit_gvk(gvk: &GroupVersionKind) -> wit::Gvk {
    wit::Gvk {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
    }
}

fn decode<K: FromJson>(json: String, what: &str) -> Result<K> {
    K::from_json_text(json).map_err(|err| Error::Invalid(format!("decoding {what}: {err}")))
}

/// [`decode`] a read of kind `K`: an object the host's cache holds only the metadata of
/// (`metadataOnly`) is refused unless `K` reads metadata (`PartialObjectMeta<K>`, `Lazy<K>`),
/// rather than decoded into a `K` without its spec that an update would write back.
fn decode_read<K: Resource<DynamicType = ()> + FromJson>(json: String) -> Result<K> {
    let kind = K::kind(&());
    // The host's cache writes a metadata-only object's kind first (a prefix test, not a scan).
    if json.starts_with(METADATA_ONLY) && !(K::metadata_api() || K::TAKES_METADATA) {
        return Err(Error::Invalid(format!(
            "decoding {kind}: the guest's manifest watches {kind} for its metadata only \
             (metadataOnly): read it as PartialObjectMeta<{kind}> or Lazy<{kind}>"
        )));
    }
    decode(json, &kind)
}

/// A list's options as the WIT `client` interface takes them.
fn list_options(params: &ListParams) -> wit::ListOptions {
    wit::ListOptions {
        namespace: params.namespace.clone(),
        label_selector: params.label_selector.clone(),
        field_selector: params.field_selector.clone(),
        uncached: params.uncached,
    }
}

fn encode<K: Serialize>(object: &K) -> Result<String> {
    Ok(serde_json::to_string(object)?)
}

/// How the host's cache writes an object it holds only the metadata of (`metadataOnly`).
const METADATA_ONLY: &str = r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata""#;

/// `object` as the whole object a create or update sends: one read for its metadata only is
/// refused (sending it would name the wrong kind, or replace the object without its spec).
fn encode_whole<K: Serialize>(object: &K) -> Result<String> {
    let text = encode(object)?;
    if text.starts_with(METADATA_ONLY) {
        return Err(Error::Invalid(
            "this object was read for its metadata only (metadataOnly in the guest's manifest): \
             change it with patch, not create or update"
                .into(),
        ));
    }
    Ok(text)
}

impl Context {
    pub(crate) fn new() -> Self {
        Context { _private: () }
    }

    /// Get one object. Fails with [`Error::NotFound`] if it does not exist.
    pub fn get<'a, K>(&self, namespace: impl Into<Option<&'a str>>, name: &str) -> Result<K>
    where
        K: Resource<DynamicType = ()> + FromJson,
    {
        let json = client::get(&gvk_of::<K>(), namespace.into(), name)?;
        decode_read(json)
    }

    /// Get one object, or `None` if it does not exist.
    pub fn get_opt<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<Option<K>>
    where
        K: Resource<DynamicType = ()> + FromJson,
    {
        match self.get(namespace, name) {
            Ok(object) => Ok(Some(object)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// List objects of a kind.
    pub fn list<K>(&self, params: &ListParams) -> Result<Vec<K>>
    where
        K: Resource<DynamicType = ()> + FromJson,
    {
        let options = list_options(params);
        client::list(&gvk_of::<K>(), &options)?
            .into_iter()
            .map(decode_read)
            .collect()
    }

    /// Create an object (which must have `apiVersion` and `kind`); returns it as stored.
    pub fn create<K: Serialize + FromJson>(&self, object: &K) -> Result<K> {
        decode(client::create(&encode_whole(object)?)?, "created object")
    }

    /// Replace an object. Its `metadata.resourceVersion` must be current, or the call fails with
    /// [`Error::Conflict`]. Status changes are ignored for kinds with a status subresource.
    pub fn update<K: Serialize + FromJson>(&self, object: &K) -> Result<K> {
        decode(client::update(&encode_whole(object)?)?, "updated object")
    }

    /// Replace an object's status through the status subresource.
    pub fn update_status<K: Serialize + FromJson>(&self, object: &K) -> Result<K> {
        decode(
            client::update_status(&encode_whole(object)?)?,
            "updated object",
        )
    }

    /// Patch an object.
    pub fn patch<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K>
    where
        K: Resource<DynamicType = ()> + FromJson,
    {
        let json = self.patch_json(&gvk_of::<K>(), namespace.into(), name, patch, false)?;
        decode(json, "patched object")
    }

    /// Patch an object's status subresource.
    pub fn patch_status<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K>
    where
        K: Resource<DynamicType = ()> + FromJson,
    {
        let json = self.patch_json(&gvk_of::<K>(), namespace.into(), name, patch, true)?;
        decode(json, "patched object")
    }

    /// Delete an object. Objects with finalizers are only marked for deletion.
    pub fn delete<'a, K>(&self, namespace: impl Into<Option<&'a str>>, name: &str) -> Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        Ok(client::delete(
            &gvk_of::<K>(),
            namespace.into(),
            name,
            None,
        )?)
    }

    /// Delete an object only if it still matches `preconditions` (else [`Error::Conflict`]).
    pub fn delete_with<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        let pre = wit::Preconditions {
            uid: preconditions.uid.clone(),
            resource_version: preconditions.resource_version.clone(),
        };
        Ok(client::delete(
            &gvk_of::<K>(),
            namespace.into(),
            name,
            Some(&pre),
        )?)
    }

    /// Record a Kubernetes Event about `object`. `reason` is a short CamelCase word.
    pub fn record_event<K>(
        &self,
        object: &K,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()>
    where
        K: Resource<DynamicType = ()>,
    {
        self.record(gvk_of::<K>(), object.meta(), event_type, reason, message)
    }

    /// Get one object of any kind, untyped.
    pub fn get_dynamic<'a>(
        &self,
        gvk: &GroupVersionKind,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<DynamicObject> {
        let json = client::get(&wit_gvk(gvk), namespace.into(), name)?;
        decode(json, &gvk.kind)
    }

    /// List objects of any kind, untyped.
    pub fn list_dynamic(
        &self,
        gvk: &GroupVersionKind,
        params: &ListParams,
    ) -> Result<Vec<DynamicObject>> {
        self.list_json(&wit_gvk(gvk), params)
    }

    /// Patch an object of any kind (or its status when `status` is true), untyped.
    pub fn patch_dynamic<'a>(
        &self,
        gvk: &GroupVersionKind,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<DynamicObject> {
        let json = self.patch_json(&wit_gvk(gvk), namespace.into(), name, patch, status)?;
        decode(json, "patched object")
    }

    /// Delete an object of any kind.
    pub fn delete_dynamic<'a>(
        &self,
        gvk: &GroupVersionKind,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<()> {
        Ok(client::delete(&wit_gvk(gvk), namespace.into(), name, None)?)
    }

    /// Record a Kubernetes Event about an untyped object (its `apiVersion`/`kind` must be set).
    pub fn record_event_dynamic(
        &self,
        object: &DynamicObject,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        let types = object.types.as_ref().ok_or_else(|| {
            Error::Invalid("event about an object without apiVersion/kind".into())
        })?;
        let (group, version) = match types.api_version.split_once('/') {
            Some((group, version)) => (group.to_owned(), version.to_owned()),
            None => (String::new(), types.api_version.clone()),
        };
        let gvk = wit::Gvk {
            group,
            version,
            kind: types.kind.clone(),
        };
        self.record(gvk, &object.metadata, event_type, reason, message)
    }

    fn record(
        &self,
        kind: wit::Gvk,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        let regarding = events::ObjectReference {
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        };
        let event_type = match event_type {
            EventType::Normal => events::EventType::Normal,
            EventType::Warning => events::EventType::Warning,
        };
        Ok(events::record(&regarding, event_type, reason, message)?)
    }

    fn list_json<K: FromJson>(&self, gvk: &wit::Gvk, params: &ListParams) -> Result<Vec<K>> {
        client::list(gvk, &list_options(params))?
            .into_iter()
            .map(|json| decode(json, &gvk.kind))
            .collect()
    }

    fn patch_json(
        &self,
        gvk: &wit::Gvk,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        status: bool,
    ) -> Result<String> {
        let (how, body) = match patch {
            Patch::Merge(body) => (wit::PatchType::Merge, body),
            Patch::Json(body) => (wit::PatchType::Json, body),
            Patch::Strategic(body) => (wit::PatchType::Strategic, body),
            Patch::Apply(body) => (wit::PatchType::Apply, body),
        };
        Ok(client::patch(
            gvk,
            namespace,
            name,
            how,
            &serde_json::to_string(body)?,
            status,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Lazy;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn an_object_read_for_its_metadata_only_should_not_be_written_whole() {
        let partial: Lazy<Pod> = Lazy::from_json(
            r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"p"}}"#,
        );
        let err = encode_whole(&partial).expect_err("refused");
        assert!(
            err.to_string().contains("use patch") || err.to_string().contains("with patch"),
            "{err}"
        );
        let whole: Lazy<Pod> =
            Lazy::from_json(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#);
        assert!(encode_whole(&whole).is_ok());
    }

    #[test]
    fn a_metadata_only_read_should_decode_only_as_a_type_that_reads_metadata() {
        let text = || {
            r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"p"}}"#
                .to_owned()
        };
        let err = decode_read::<Pod>(text()).expect_err("a Pod without its spec");
        assert!(err.to_string().contains("PartialObjectMeta<Pod>"), "{err}");
        let partial = decode_read::<kube_core::PartialObjectMeta<Pod>>(text()).expect("metadata");
        assert_eq!(partial.metadata.name.as_deref(), Some("p"));
        let lazy = decode_read::<Lazy<Pod>>(text()).expect("lazy");
        assert_eq!(
            lazy.at(&["metadata", "name"])
                .and_then(|f| f.as_str())
                .as_deref(),
            Some("p")
        );
        let whole = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#.to_owned();
        assert!(decode_read::<Pod>(whole).is_ok());
    }
}
