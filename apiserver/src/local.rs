//! [`LocalClient`]: a client's calls — by kind, with selectors as text and patches by type —
//! made directly on a [`Store`] in this process, with no HTTP in between. The host's in-memory
//! cluster and the SDK's fake cluster are both this, behind their own error types.

use std::sync::Arc;

use serde_json::Value;

use crate::patch::{PatchMeta, PatchType, patched};
use crate::store::{DeleteOptions, WriteOptions};
use crate::{ResourceType, Store};
use krec_core::ApiError;
use krec_core::selector::{FieldSelector, LabelSelector};

/// Calls on `store`, writes recorded under one field manager.
#[derive(Clone)]
pub struct LocalClient {
    store: Arc<Store>,
    manager: String,
}

impl std::fmt::Debug for LocalClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalClient")
            .field("manager", &self.manager)
            .finish_non_exhaustive()
    }
}

/// A stored object as an HTTP client reads it: its `managedFields`' `fieldsV1` as JSON (the
/// store keeps them as text).
fn as_clients_see(object: Arc<Value>) -> Arc<Value> {
    match crate::managed::expanded(&object) {
        std::borrow::Cow::Borrowed(_) => object,
        std::borrow::Cow::Owned(expanded) => Arc::new(expanded),
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

impl LocalClient {
    /// A client of `store` whose writes are recorded under the field manager `manager`.
    pub fn new(store: Arc<Store>, manager: impl Into<String>) -> Self {
        LocalClient {
            store,
            manager: manager.into(),
        }
    }

    /// The store the calls go to.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The kind `group`/`version` `kind` as the store serves it.
    ///
    /// # Errors
    ///
    /// 404 when no such kind is served.
    pub fn resolve(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Result<ResourceType, ApiError> {
        self.store
            .registry()
            .by_kind(group, version, kind)
            .ok_or_else(|| {
                let api_version = if group.is_empty() {
                    version.to_owned()
                } else {
                    format!("{group}/{version}")
                };
                let mut err = ApiError::not_found(group, kind, "");
                // The host's words for a kind its API server does not serve.
                err.message = format!("the API server does not serve {api_version} {kind}");
                err
            })
    }

    /// The kind of `object`, from its `apiVersion` and `kind`.
    ///
    /// # Errors
    ///
    /// 400 when either is missing; 404 when the kind is not served.
    pub fn resolve_object(&self, object: &Value) -> Result<ResourceType, ApiError> {
        let field = |name: &str| {
            object
                .get(name)
                .and_then(Value::as_str)
                .filter(|text| !text.is_empty())
                .ok_or_else(|| ApiError::bad_request(format!("the object has no {name}")))
        };
        let (api_version, kind) = (field("apiVersion")?, field("kind")?);
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.resolve(group, version, kind)
    }

    /// Whether the kind is namespaced.
    ///
    /// # Errors
    ///
    /// 404 when the kind is not served.
    pub fn namespaced(&self, group: &str, version: &str, kind: &str) -> Result<bool, ApiError> {
        match self.store.registry().namespaced(group, version, kind) {
            Some(namespaced) => Ok(namespaced),
            None => self.resolve(group, version, kind).map(|rt| rt.namespaced),
        }
    }

    /// One object.
    ///
    /// # Errors
    ///
    /// 404 when it does not exist.
    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        self.store.get(rt, namespace, name).map(as_clients_see)
    }

    /// The objects (in `namespace`, when given) matching the selectors, by namespace and name.
    ///
    /// # Errors
    ///
    /// 400 naming the selector that does not parse.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Arc<Value>>, ApiError> {
        let labels = LabelSelector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("label selector: {e}")))?;
        let fields = FieldSelector::parse(field_selector.unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("field selector: {e}")))?;
        Ok(self
            .store
            .list(rt, namespace, &labels, &fields, None, None)?
            .items
            .into_iter()
            .map(as_clients_see)
            .collect())
    }

    fn options(&self) -> WriteOptions {
        WriteOptions {
            manager: self.manager.clone(),
            ..Default::default()
        }
    }

    /// Create `object` (in its `metadata.namespace`).
    ///
    /// # Errors
    ///
    /// The API server's refusal.
    pub fn create(&self, object: Value) -> Result<Arc<Value>, ApiError> {
        let rt = self.resolve_object(&object)?;
        let namespace = meta_str(&object, "namespace").map(str::to_owned);
        self.store
            .create(&rt, namespace.as_deref(), object, self.options())
            .map(as_clients_see)
    }

    /// Replace `object` (its `status` only, with `status`).
    ///
    /// # Errors
    ///
    /// 422 without `metadata.name`; the API server's refusal (409 on a stale
    /// `resourceVersion`).
    pub fn update(&self, object: Value, status: bool) -> Result<Arc<Value>, ApiError> {
        let rt = self.resolve_object(&object)?;
        let namespace = meta_str(&object, "namespace").map(str::to_owned);
        let name = meta_str(&object, "name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    "",
                    vec![(
                        "metadata.name".into(),
                        "Required value: name is required".into(),
                    )],
                )
            })?
            .to_owned();
        self.store
            .update(
                &rt,
                namespace.as_deref(),
                &name,
                object,
                status,
                self.options(),
            )
            .map(as_clients_see)
    }

    /// Patch one object with `body` (its `status` only, with `status`).
    ///
    /// # Errors
    ///
    /// The API server's refusal: 404, a patch that does not apply, an invalid result.
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        kind: PatchType,
        body: &Value,
        status: bool,
    ) -> Result<Arc<Value>, ApiError> {
        let meta = PatchMeta::of(rt);
        self.store
            .patch(rt, namespace, name, status, self.options(), |current| {
                patched(kind, body, meta, current)
            })
            .map(as_clients_see)
    }

    /// Delete one object, if its `uid` and `resourceVersion` are still those given.
    ///
    /// # Errors
    ///
    /// 404, or 409 when a precondition does not hold.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        uid: Option<String>,
        resource_version: Option<String>,
    ) -> Result<(), ApiError> {
        let options = DeleteOptions {
            uid,
            resource_version,
            ..Default::default()
        };
        self.store.delete(rt, namespace, name, &options)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::ResourceTypes;

    /// What the store keeps as text, a client of the store reads as JSON, as over HTTP.
    #[test]
    fn objects_should_read_with_field_ownership_as_json() {
        let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
        crate::store::ensure_namespaces(&store).expect("namespaces");
        let client = LocalClient::new(store, "tests");
        let created = client
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "v"}}))
            .expect("create");
        let expected = json!({"f:data": {"f:k": {}}});
        let fields = |o: &Value| o["metadata"]["managedFields"][0]["fieldsV1"].clone();
        assert_eq!(fields(&created), expected);
        let rt = client.resolve("", "v1", "ConfigMap").expect("kind");
        let read = client.get(&rt, Some("default"), "a").expect("get");
        assert_eq!(fields(&read), expected);
        let listed = client.list(&rt, Some("default"), None, None).expect("list");
        assert_eq!(fields(&listed[0]), expected);
        let patched = client
            .patch(
                &rt,
                Some("default"),
                "a",
                PatchType::Merge,
                &json!({"data": {"j": "w"}}),
                false,
            )
            .expect("patch");
        assert_eq!(fields(&patched), json!({"f:data": {"f:j": {}, "f:k": {}}}));
    }
}
