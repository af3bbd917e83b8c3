//! [`MemoryCluster`]: the embedded API server's object store used in-process, without HTTP.
//!
//! It is what the guest tests and the in-memory `krec dev` run against, and it has exactly the
//! embedded API server's semantics (see [`krec_apiserver::store`]): the same built-in
//! kinds, CRDs that must be created before their objects, namespaces that must exist,
//! resourceVersion conflicts, the status subresource, finalizers and garbage collection.
//! Events are kept in a bounded in-memory log for inspection rather than stored as objects.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use super::{AccessError, ClusterAccess, EventRecord, Gvk, ListOptions, PatchType, Preconditions};
use krec_apiserver::patch::{PatchKind, PatchMeta, patched};
use krec_apiserver::selector::{FieldSelector, LabelSelector};
use krec_apiserver::store::DeleteOptions;
use krec_apiserver::{Registry, ResourceType, Store, ensure_namespaces};

/// An Event recorded through [`ClusterAccess::record_event`].
pub type RecordedEvent = EventRecord;

/// Most Events kept; older ones are dropped first, so a guest recording in a loop cannot grow
/// the host's memory without bound.
pub const MAX_EVENTS: usize = 10_000;

/// The embedded API server's store behind [`ClusterAccess`]. See the [module docs](self).
pub struct MemoryCluster {
    store: Arc<Store>,
    events: Mutex<VecDeque<RecordedEvent>>,
}

impl std::fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryCluster").finish_non_exhaustive()
    }
}

impl Default for MemoryCluster {
    fn default() -> Self {
        Self::new()
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

impl MemoryCluster {
    /// A fresh cluster with the built-in kinds and the initial namespaces.
    pub fn new() -> Self {
        let store = Arc::new(Store::new(Arc::new(Registry::new())));
        if let Err(err) = ensure_namespaces(&store) {
            tracing::error!("creating the initial namespaces: {err}");
        }
        MemoryCluster {
            store,
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Every Event recorded so far (up to [`MAX_EVENTS`]), oldest first.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Every stored object of a kind, ordered by namespace and name.
    pub fn objects(&self, gvk: &Gvk) -> Vec<Value> {
        let Ok(rt) = self.resolve(gvk) else {
            return Vec::new();
        };
        self.store
            .list(
                &rt,
                None,
                &LabelSelector::default(),
                &FieldSelector::default(),
                None,
                None,
            )
            .map(|page| page.items.into_iter().map(Arc::unwrap_or_clone).collect())
            .unwrap_or_default()
    }

    fn resolve(&self, gvk: &Gvk) -> Result<ResourceType, AccessError> {
        self.store
            .registry()
            .by_kind(&gvk.group, &gvk.version, &gvk.kind)
            .ok_or_else(|| {
                AccessError::NotFound(format!(
                    "the server could not find the requested resource: {gvk} is not served"
                ))
            })
    }
}

#[async_trait]
impl ClusterAccess for MemoryCluster {
    async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, AccessError> {
        let rt = self.resolve(gvk)?;
        Ok(Arc::unwrap_or_clone(self.store.get(&rt, namespace, name)?))
    }

    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, AccessError> {
        match self
            .store
            .registry()
            .namespaced(&gvk.group, &gvk.version, &gvk.kind)
        {
            Some(namespaced) => Ok(namespaced),
            None => self.resolve(gvk).map(|rt| rt.namespaced),
        }
    }

    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, AccessError> {
        let rt = self.resolve(gvk)?;
        let labels = LabelSelector::parse(options.label_selector.as_deref().unwrap_or(""))
            .map_err(|e| AccessError::Invalid(e.to_string()))?;
        let fields = FieldSelector::parse(options.field_selector.as_deref().unwrap_or(""))
            .map_err(|e| AccessError::Invalid(e.to_string()))?;
        let page = self.store.list(
            &rt,
            options.namespace.as_deref(),
            &labels,
            &fields,
            None,
            None,
        )?;
        Ok(page.items.into_iter().map(Arc::unwrap_or_clone).collect())
    }

    async fn create(&self, object: Value) -> Result<Value, AccessError> {
        let rt = self.resolve(&Gvk::of_object(&object)?)?;
        let namespace = meta_str(&object, "namespace").map(str::to_owned);
        Ok(Arc::unwrap_or_clone(self.store.create(
            &rt,
            namespace.as_deref(),
            object,
            false,
        )?))
    }

    async fn update(&self, object: Value, status: bool) -> Result<Value, AccessError> {
        let rt = self.resolve(&Gvk::of_object(&object)?)?;
        let namespace = meta_str(&object, "namespace").map(str::to_owned);
        let name = meta_str(&object, "name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| AccessError::Invalid(format!("{}: metadata.name is required", rt.kind)))?
            .to_owned();
        Ok(Arc::unwrap_or_clone(self.store.update(
            &rt,
            namespace.as_deref(),
            &name,
            object,
            status,
            false,
        )?))
    }

    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, AccessError> {
        let rt = self.resolve(gvk)?;
        let kind = match patch_type {
            PatchType::Merge => PatchKind::Merge,
            PatchType::Json => PatchKind::Json,
            PatchType::Strategic => PatchKind::Strategic,
            PatchType::Apply => PatchKind::Apply,
        };
        let meta = PatchMeta::of(&rt);
        let patched = self
            .store
            .patch(&rt, namespace, name, status, false, |current| {
                patched(kind, &body, meta, current)
            })?;
        Ok(Arc::unwrap_or_clone(patched))
    }

    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), AccessError> {
        let rt = self.resolve(gvk)?;
        let options = DeleteOptions {
            uid: preconditions.and_then(|p| p.uid.clone()),
            resource_version: preconditions.and_then(|p| p.resource_version.clone()),
            ..Default::default()
        };
        self.store.delete(&rt, namespace, name, &options)?;
        Ok(())
    }

    async fn record_event(&self, event: EventRecord) -> Result<(), AccessError> {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cm(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default"}, "data": {"k": data}})
    }

    #[tokio::test]
    async fn update_should_conflict_on_stale_resource_version() {
        let c = MemoryCluster::new();
        let created = c.create(cm("a", "1")).await.expect("create");
        let mut first = created.clone();
        first["data"]["k"] = json!("2");
        c.update(first, false).await.expect("first update");
        let mut stale = created;
        stale["data"]["k"] = json!("3");
        let err = c.update(stale, false).await.expect_err("stale update");
        assert!(matches!(err, AccessError::Conflict(_)), "{err}");
        let gvk = Gvk::new("", "v1", "ConfigMap");
        let stored = c.get(&gvk, Some("default"), "a").await.expect("get");
        assert_eq!(stored["data"]["k"], "2");
    }

    #[tokio::test]
    async fn status_subresource_should_separate_spec_and_status() {
        let c = MemoryCluster::new();
        let dep = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {"metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}});
        let mut d = c.create(dep).await.expect("create");
        assert_eq!(d["metadata"]["generation"], 1);
        d["status"] = json!({"availableReplicas": 5});
        let d = c.update(d, false).await.expect("update");
        assert!(
            d.get("status").is_none(),
            "status ignored on the main resource"
        );
        assert_eq!(
            d["metadata"]["generation"], 1,
            "no spec change, no generation bump"
        );
        let mut s = d.clone();
        s["status"] = json!({"availableReplicas": 5});
        s["spec"]["replicas"] = json!(9);
        let s = c.update(s, true).await.expect("update status");
        assert_eq!(s["status"]["availableReplicas"], 5);
        assert_eq!(
            s["spec"]["replicas"], 1,
            "spec ignored on the status subresource"
        );
        let mut g = s.clone();
        g["spec"]["replicas"] = json!(3);
        let g = c.update(g, false).await.expect("scale");
        assert_eq!(g["metadata"]["generation"], 2);
    }

    #[tokio::test]
    async fn delete_should_wait_for_finalizers_and_collect_dependents() {
        let c = MemoryCluster::new();
        let mut owner = cm("owner", "x");
        owner["metadata"]["finalizers"] = json!(["test/hold"]);
        let owner = c.create(owner).await.expect("owner");
        let mut dep = cm("dep", "y");
        dep["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "owner", "uid": owner["metadata"]["uid"], "controller": true}]);
        c.create(dep).await.expect("dependent");
        let gvk = Gvk::new("", "v1", "ConfigMap");
        c.delete(&gvk, Some("default"), "owner", None)
            .await
            .expect("delete");
        let held = c
            .get(&gvk, Some("default"), "owner")
            .await
            .expect("held by finalizer");
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        let mut released = held;
        released["metadata"]["finalizers"] = json!([]);
        c.update(released, false).await.expect("remove finalizer");
        assert!(c.get(&gvk, Some("default"), "owner").await.is_err());
        assert!(
            c.get(&gvk, Some("default"), "dep").await.is_err(),
            "dependent collected"
        );
    }

    #[tokio::test]
    async fn delete_should_check_preconditions() {
        let c = MemoryCluster::new();
        let a = c.create(cm("a", "1")).await.expect("create");
        let gvk = Gvk::new("", "v1", "ConfigMap");
        let stale = Preconditions {
            uid: None,
            resource_version: Some("999".into()),
        };
        let err = c
            .delete(&gvk, Some("default"), "a", Some(&stale))
            .await
            .expect_err("stale");
        assert!(matches!(err, AccessError::Conflict(_)));
        let fresh = Preconditions {
            uid: a["metadata"]["uid"].as_str().map(str::to_owned),
            resource_version: a["metadata"]["resourceVersion"].as_str().map(str::to_owned),
        };
        c.delete(&gvk, Some("default"), "a", Some(&fresh))
            .await
            .expect("delete");
    }

    #[tokio::test]
    async fn create_should_honour_generate_name_and_reject_duplicates() {
        let c = MemoryCluster::new();
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "gen-", "namespace": "default"}});
        let made = c.create(obj).await.expect("create");
        assert!(
            made["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("gen-"))
        );
        c.create(cm("x", "1")).await.expect("create x");
        let err = c.create(cm("x", "1")).await.expect_err("duplicate");
        assert!(matches!(err, AccessError::AlreadyExists(_)));
        let err = c.create(cm("Bad_Name", "1")).await.expect_err("bad name");
        assert!(matches!(err, AccessError::Invalid(_)));
        let mut elsewhere = cm("y", "1");
        elsewhere["metadata"]["namespace"] = json!("nowhere");
        let err = c.create(elsewhere).await.expect_err("missing namespace");
        assert!(matches!(err, AccessError::NotFound(_)), "{err}");
        let foo = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "f", "namespace": "default"}});
        let err = c.create(foo).await.expect_err("kind not served");
        assert!(matches!(err, AccessError::NotFound(_)), "{err}");
    }
}
