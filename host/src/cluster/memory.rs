//! [`MemoryCluster`]: an in-memory object set implementing [`ClusterAccess`].
//!
//! It is what the guest tests and `krec dev`'s in-memory mode run against: no watches, no
//! discovery, but the object semantics a reconciler relies on — `uid`, `resourceVersion` from one
//! increasing counter, `generation` bumped on spec changes only, 409 conflicts on a stale
//! `resourceVersion`, `generateName`, the status subresource, finalizers holding deletion, and
//! garbage collection of dependents through owner references. Strategic merge and apply patches
//! are applied as JSON merge patches.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::{AccessError, ClusterAccess, EventRecord, Gvk, ListOptions, PatchType, Preconditions};
use crate::selector::{FieldSelector, LabelSelector, is_dns_subdomain};

type Key = (Gvk, Option<String>, String);

/// An Event recorded through [`ClusterAccess::record_event`].
pub type RecordedEvent = EventRecord;

/// An in-memory object set with Kubernetes write semantics. See the [module docs](self).
#[derive(Debug, Default)]
pub struct MemoryCluster {
    objects: Mutex<BTreeMap<Key, Value>>,
    events: Mutex<Vec<RecordedEvent>>,
    resource_version: AtomicU64,
}

/// Most Events kept; older ones are dropped first, so a guest recording in a loop cannot grow
/// the host's memory without bound.
pub const MAX_EVENTS: usize = 10_000;

/// Kinds stored without a status subresource: `update` writes their `status` like any field.
const KINDS_WITHOUT_STATUS_SUBRESOURCE: &[&str] = &[
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Event",
    "Lease",
    "Endpoints",
];

fn has_status_subresource(gvk: &Gvk) -> bool {
    !KINDS_WITHOUT_STATUS_SUBRESOURCE.contains(&gvk.kind.as_str())
}

fn describe(gvk: &Gvk, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{} {ns}/{name}", gvk.kind),
        None => format!("{} {name}", gvk.kind),
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn metadata_mut(object: &mut Value) -> Result<&mut Map<String, Value>, AccessError> {
    let map = object
        .as_object_mut()
        .ok_or_else(|| AccessError::Invalid("object is not a JSON object".into()))?;
    map.entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| AccessError::Invalid("metadata is not an object".into()))
}

/// Everything but `metadata` and `status`: what `generation` tracks.
fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("status");
    }
    copy
}

fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl MemoryCluster {
    /// An empty object set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every Event recorded so far, oldest first.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.lock_events().clone()
    }

    /// Every stored object of a kind, ordered by namespace and name.
    pub fn objects(&self, gvk: &Gvk) -> Vec<Value> {
        self.lock()
            .iter()
            .filter(|((g, _, _), _)| g == gvk)
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Value>> {
        // A poisoned lock only means another test thread panicked; the map itself is consistent
        // because every mutation is a single insert or remove.
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_events(&self) -> std::sync::MutexGuard<'_, Vec<RecordedEvent>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_resource_version(&self) -> String {
        (self.resource_version.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    fn key_of(object: &Value) -> Result<Key, AccessError> {
        let gvk = Gvk::of_object(object)?;
        let name = meta_str(object, "name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| AccessError::Invalid(format!("{gvk}: metadata.name is required")))?;
        Ok((
            gvk,
            meta_str(object, "namespace").map(str::to_owned),
            name.to_owned(),
        ))
    }

    /// Store `new` over `old` with update semantics; `status` selects the status subresource.
    fn write_over(
        &self,
        objects: &mut BTreeMap<Key, Value>,
        key: Key,
        mut new: Value,
        status: bool,
    ) -> Result<Value, AccessError> {
        let what = describe(&key.0, key.1.as_deref(), &key.2);
        let old = objects
            .get(&key)
            .ok_or_else(|| AccessError::NotFound(what.clone()))?;
        if let Some(rv) = meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(rv) != meta_str(old, "resourceVersion")
        {
            return Err(AccessError::Conflict(format!(
                "Operation cannot be fulfilled on {what}: the object has been modified; please apply your changes to the latest version and try again"
            )));
        }
        if status && !has_status_subresource(&key.0) {
            // The API server serves no `/status` for these kinds.
            return Err(AccessError::NotFound(format!(
                "{what}: the kind has no status subresource"
            )));
        }
        if has_status_subresource(&key.0) {
            if status {
                let new_status = new.get("status").cloned();
                new = old.clone();
                match new_status {
                    Some(s) => new["status"] = s,
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            } else {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
        }
        let mut generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        if spec_part(old) != spec_part(&new) {
            generation += 1;
        }
        let old_meta = old.get("metadata").cloned().unwrap_or_default();
        let meta = metadata_mut(&mut new)?;
        for field in ["uid", "creationTimestamp", "deletionTimestamp"] {
            match old_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        meta.insert("generation".into(), json!(generation));
        meta.insert(
            "resourceVersion".into(),
            json!(self.next_resource_version()),
        );
        if meta.contains_key("deletionTimestamp") && !has_finalizers(&new) {
            objects.remove(&key);
            self.collect_garbage(objects);
            return Ok(new);
        }
        objects.insert(key, new.clone());
        Ok(new)
    }

    /// Delete objects whose owners are all gone (background cascading deletion).
    fn collect_garbage(&self, objects: &mut BTreeMap<Key, Value>) {
        loop {
            let uids: std::collections::HashSet<String> = objects
                .values()
                .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
                .collect();
            let orphans: Vec<Key> = objects
                .iter()
                .filter(|(_, o)| {
                    o.pointer("/metadata/ownerReferences")
                        .and_then(Value::as_array)
                        .is_some_and(|refs| {
                            !refs.is_empty()
                                && refs.iter().all(|r| {
                                    r.get("uid")
                                        .and_then(Value::as_str)
                                        .is_none_or(|uid| !uids.contains(uid))
                                })
                        })
                })
                .map(|(k, _)| k.clone())
                .collect();
            if orphans.is_empty() {
                return;
            }
            for key in orphans {
                if let Some(obj) = objects.get_mut(&key) {
                    if has_finalizers(obj) {
                        if obj.pointer("/metadata/deletionTimestamp").is_none() {
                            let rv = self.next_resource_version();
                            if let Ok(meta) = metadata_mut(obj) {
                                meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                                meta.insert("resourceVersion".into(), json!(rv));
                            }
                        }
                        // Still present: stop it from being found as an orphan again.
                        if let Ok(meta) = metadata_mut(obj) {
                            meta.remove("ownerReferences");
                        }
                    } else {
                        objects.remove(&key);
                    }
                }
            }
        }
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
        let key = (gvk.clone(), namespace.map(str::to_owned), name.to_owned());
        self.lock()
            .get(&key)
            .cloned()
            .ok_or_else(|| AccessError::NotFound(describe(gvk, namespace, name)))
    }

    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, AccessError> {
        let labels = LabelSelector::parse(options.label_selector.as_deref().unwrap_or(""))
            .map_err(|e| AccessError::Invalid(e.to_string()))?;
        let fields = FieldSelector::parse(options.field_selector.as_deref().unwrap_or(""))
            .map_err(|e| AccessError::Invalid(e.to_string()))?;
        Ok(self
            .lock()
            .iter()
            .filter(|((g, ns, _), o)| {
                g == gvk
                    && (options.namespace.is_none() || ns == &options.namespace)
                    && labels.matches_object(o)
                    && fields.matches_object(o)
            })
            .map(|(_, o)| o.clone())
            .collect())
    }

    async fn create(&self, mut object: Value) -> Result<Value, AccessError> {
        let gvk = Gvk::of_object(&object)?;
        let mut objects = self.lock();
        // Taken under the lock, so resourceVersions are stored in increasing order.
        let rv = self.next_resource_version();
        if has_status_subresource(&gvk)
            && let Some(map) = object.as_object_mut()
        {
            // Status is written through the status subresource only, as the API server does.
            map.remove("status");
        }
        let meta = metadata_mut(&mut object)?;
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(AccessError::Invalid(format!(
                "{gvk}: resourceVersion should not be set on objects to be created"
            )));
        }
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_owned(),
            None => {
                let prefix = meta
                    .get("generateName")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| {
                        AccessError::Invalid(format!(
                            "{gvk}: metadata.name or metadata.generateName is required"
                        ))
                    })?;
                format!(
                    "{prefix}{}",
                    &format!("{:05x}", rv.parse::<u64>().unwrap_or(0) * 7919 % 0xfffff)
                )
            }
        };
        if !is_dns_subdomain(&name) {
            return Err(AccessError::Invalid(format!(
                "{gvk} {name:?}: metadata.name must be a lowercase RFC 1123 subdomain"
            )));
        }
        let namespace = meta
            .get("namespace")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let key = (gvk.clone(), namespace.clone(), name.clone());
        if objects.contains_key(&key) {
            return Err(AccessError::AlreadyExists(describe(
                &gvk,
                namespace.as_deref(),
                &name,
            )));
        }
        meta.insert("name".into(), json!(name));
        meta.insert(
            "uid".into(),
            json!(format!(
                "00000000-0000-4000-8000-{:012x}",
                rv.parse::<u64>().unwrap_or(0)
            )),
        );
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        meta.insert("resourceVersion".into(), json!(rv));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        objects.insert(key, object.clone());
        Ok(object)
    }

    async fn update(&self, object: Value, status: bool) -> Result<Value, AccessError> {
        let key = Self::key_of(&object)?;
        let mut objects = self.lock();
        self.write_over(&mut objects, key, object, status)
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
        let key = (gvk.clone(), namespace.map(str::to_owned), name.to_owned());
        let mut objects = self.lock();
        let mut patched = objects
            .get(&key)
            .cloned()
            .ok_or_else(|| AccessError::NotFound(describe(gvk, namespace, name)))?;
        match patch_type {
            PatchType::Json => {
                let ops: json_patch::Patch = serde_json::from_value(body)
                    .map_err(|e| AccessError::Invalid(format!("json patch: {e}")))?;
                json_patch::patch(&mut patched, &ops)
                    .map_err(|e| AccessError::Invalid(format!("json patch: {e}")))?;
            }
            PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
                if !body.is_object() {
                    return Err(AccessError::Invalid(
                        "patch body must be a JSON object".into(),
                    ));
                }
                json_patch::merge(&mut patched, &body);
            }
        }
        if Self::key_of(&patched)? != key {
            return Err(AccessError::Invalid(format!(
                "{}: a patch cannot change apiVersion, kind, namespace or name",
                describe(gvk, namespace, name)
            )));
        }
        self.write_over(&mut objects, key, patched, status)
    }

    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), AccessError> {
        let what = describe(gvk, namespace, name);
        let key = (gvk.clone(), namespace.map(str::to_owned), name.to_owned());
        let mut objects = self.lock();
        let object = objects
            .get_mut(&key)
            .ok_or_else(|| AccessError::NotFound(what.clone()))?;
        if let Some(pre) = preconditions {
            for (field, wanted) in [
                ("uid", &pre.uid),
                ("resourceVersion", &pre.resource_version),
            ] {
                if let Some(wanted) = wanted
                    && meta_str(object, field) != Some(wanted.as_str())
                {
                    return Err(AccessError::Conflict(format!(
                        "Precondition failed on {what}: {field} is {:?}, expected {wanted:?}",
                        meta_str(object, field).unwrap_or_default()
                    )));
                }
            }
        }
        if has_finalizers(object) {
            if object.pointer("/metadata/deletionTimestamp").is_none() {
                let rv = self.next_resource_version();
                let meta = metadata_mut(object)?;
                meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
                meta.insert("resourceVersion".into(), json!(rv));
            }
            return Ok(());
        }
        objects.remove(&key);
        self.collect_garbage(&mut objects);
        Ok(())
    }

    async fn record_event(&self, event: EventRecord) -> Result<(), AccessError> {
        let mut events = self.lock_events();
        if events.len() >= MAX_EVENTS {
            events.remove(0);
        }
        events.push(event);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
            "metadata": {"name": "d", "namespace": "default"}, "spec": {"replicas": 1}});
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
    }
}
