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

use super::{ClusterAccess, Reply, Request, Target};
use krec_apiserver::local::LocalClient;
use krec_apiserver::{ResourceType, ResourceTypes, Store, ensure_namespaces};
use krec_core::{CallError, EventRecord, Gvk, WriteKind, json_text};

/// An Event recorded through [`Request::Event`].
pub type RecordedEvent = EventRecord;

/// Most Events kept; older ones are dropped first, so a guest recording in a loop cannot grow
/// the host's memory without bound.
pub const MAX_EVENTS: usize = 10_000;

/// The field manager writes are recorded under.
const FIELD_MANAGER: &str = "krec";

/// The embedded API server's store behind [`ClusterAccess`]. See the module's docs.
pub struct MemoryCluster {
    client: LocalClient,
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

impl MemoryCluster {
    /// A fresh cluster with the built-in kinds and the initial namespaces.
    pub fn new() -> Self {
        let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
        if let Err(err) = ensure_namespaces(&store) {
            tracing::error!("creating the initial namespaces: {err}");
        }
        MemoryCluster {
            client: LocalClient::new(store, FIELD_MANAGER),
            events: Mutex::new(VecDeque::new()),
        }
    }

    /// The underlying store.
    pub fn store(&self) -> &Arc<Store> {
        self.client.store()
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
        self.resolve(gvk)
            .and_then(|rt| Ok(self.client.list(&rt, None, None, None)?))
            .map(|items| items.into_iter().map(Arc::unwrap_or_clone).collect())
            .unwrap_or_default()
    }

    fn resolve(&self, gvk: &Gvk) -> Result<ResourceType, CallError> {
        Ok(self.client.resolve(&gvk.group, &gvk.version, &gvk.kind)?)
    }
}

impl MemoryCluster {
    /// A whole-object write given as text.
    fn write(&self, kind: WriteKind, json: &str) -> Result<Arc<Value>, CallError> {
        let object: Value = serde_json::from_str(json)
            .map_err(|e| CallError::Invalid(format!("object is not valid JSON: {e}")))?;
        Ok(match kind {
            WriteKind::Create => self.client.create(object)?,
            WriteKind::Update => self.client.update(object, false)?,
            WriteKind::UpdateStatus => self.client.update(object, true)?,
        })
    }

    fn record(&self, event: EventRecord) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.len() >= MAX_EVENTS {
            events.pop_front();
        }
        events.push_back(event);
    }
}

#[async_trait]
impl ClusterAccess for MemoryCluster {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        Ok(match request {
            Request::Get(Target {
                gvk,
                namespace,
                name,
            }) => {
                let rt = self.resolve(gvk)?;
                Reply::Object(json_text(&*self.client.get(&rt, namespace, name)?)?)
            }
            Request::List { gvk, options } => {
                let rt = self.resolve(gvk)?;
                let items = self.client.list(
                    &rt,
                    options.namespace.as_deref(),
                    options.label_selector.as_deref(),
                    options.field_selector.as_deref(),
                )?;
                Reply::Objects(
                    items
                        .iter()
                        .map(|o| json_text(o))
                        .collect::<Result<_, _>>()?,
                )
            }
            Request::Namespaced(gvk) => Reply::Namespaced(self.client.namespaced(
                &gvk.group,
                &gvk.version,
                &gvk.kind,
            )?),
            Request::Write { kind, json, .. } => Reply::Stored(text(&*self.write(kind, json)?)?),
            Request::Patch {
                target,
                patch_type,
                body,
                status,
            } => {
                let rt = self.resolve(target.gvk)?;
                let patched = self.client.patch(
                    &rt,
                    target.namespace,
                    target.name,
                    patch_type,
                    &body,
                    status,
                )?;
                Reply::Stored(text(&patched)?)
            }
            Request::Delete {
                target,
                preconditions,
            } => {
                let rt = self.resolve(target.gvk)?;
                self.client.delete(
                    &rt,
                    target.namespace,
                    target.name,
                    preconditions.and_then(|p| p.uid.clone()),
                    preconditions.and_then(|p| p.resource_version.clone()),
                )?;
                Reply::Done
            }
            Request::Event(event) => {
                self.record(event);
                Reply::Done
            }
        })
    }
}

fn text(object: &Value) -> Result<String, CallError> {
    serde_json::to_string(object).map_err(|e| CallError::Other(format!("encoding object: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::cluster::ClusterCalls;
    use krec_core::Preconditions;

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
        assert!(matches!(err, CallError::Conflict(_)), "{err}");
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
        assert!(matches!(err, CallError::Conflict(_)));
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
        assert!(matches!(err, CallError::AlreadyExists(_)));
        let err = c.create(cm("Bad_Name", "1")).await.expect_err("bad name");
        assert!(matches!(err, CallError::Invalid(_)));
        let mut elsewhere = cm("y", "1");
        elsewhere["metadata"]["namespace"] = json!("nowhere");
        let err = c.create(elsewhere).await.expect_err("missing namespace");
        assert!(matches!(err, CallError::NotFound(_)), "{err}");
        let foo = json!({"apiVersion": "example.com/v1", "kind": "Foo", "metadata": {"name": "f", "namespace": "default"}});
        let err = c.create(foo).await.expect_err("kind not served");
        assert!(matches!(err, CallError::NotFound(_)), "{err}");
    }
}
