//! A testing kit for reconcilers: run one natively, with `cargo test`, against an in-memory
//! cluster that behaves as krec's API server does (feature `testing`; not for `wasm32`).
//!
//! [`FakeCluster`] is the embedded API server's own object store, in the test's process: the
//! built-in kinds with kube-apiserver's defaults and validation, `resourceVersion` conflicts,
//! `not found` and `already exists` with kube-apiserver's messages, `generateName`, the status
//! subresource, finalizers and garbage collection, label and field selectors. What the
//! reconciler wrote, the Events it recorded and what it logged are kept for assertions, and the
//! next write can be made to fail.
//!
//! [`TestCluster`] (feature `envtest`) is krec's envtest: the embedded API server in the test's
//! process (with the built-in controllers and simulated nodes of `krec dev`) and the real krec
//! host running the guest's built `.wasm` from its manifest — nothing to download, no Docker.
//! `testing` alone builds the fake cluster from the server's object store, without its HTTP,
//! TLS, webhook or persistence stack.
//!
//! ```
//! use krec_guest::prelude::*;
//! use krec_guest::testing::FakeCluster;
//! use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
//!
//! #[derive(Default)]
//! struct Labeler;
//!
//! impl Reconciler for Labeler {
//!     fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
//!         let Some(mut cm) = ctx.get_opt::<ConfigMap>(req.namespace(), &req.name)? else {
//!             return Ok(Action::done());
//!         };
//!         cm.labels_mut().insert("seen".into(), "yes".into());
//!         ctx.update(&cm)?;
//!         Ok(Action::done())
//!     }
//! }
//!
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("a".into());
//! cm.metadata.namespace = Some("default".into());
//! let cluster = FakeCluster::new().with(&cm);
//!
//! assert_eq!(cluster.reconcile(&Labeler, Request::new("default", "a")), Ok(Action::done()));
//! let cm: ConfigMap = cluster.get(Some("default"), "a").expect("still there");
//! assert_eq!(cm.labels().get("seen").map(String::as_str), Some("yes"));
//! assert_eq!(cluster.writes().len(), 1);
//!
//! // A write that meets a newer version fails as on a real cluster.
//! cluster.fail_next_write(Error::Conflict("the object has been modified".into()));
//! assert!(matches!(cluster.reconcile(&Labeler, Request::new("default", "a")), Err(Error::Conflict(_))));
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use kube_core::{GroupVersionKind, Resource};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use krec_apiserver::local::LocalClient;
use krec_apiserver::{ResourceType, ResourceTypes, Store, ensure_namespaces};

mod admission;
pub use admission::Mutated;

#[cfg(feature = "envtest")]
mod envtest;
#[cfg(feature = "envtest")]
pub use envtest::{EVENTUALLY, TestCluster};

use crate::native::{self, Host, Level, ObjectReference, PatchType};
use crate::{
    Action, Error, EventType, FromConfig, ListParams, Preconditions, Reconciler, Request, Result,
};

/// The field manager the fake cluster records the reconciler's writes under, as the host
/// records a guest's under `krec-<guest>`.
pub const FIELD_MANAGER: &str = "krec-test";

/// A write the reconciler made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// `create`, `update`, `update-status`, `patch`, `patch-status` or `delete`.
    pub verb: &'static str,
    /// The object's kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// An Event the reconciler recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The object it is about.
    pub regarding: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

#[derive(Default)]
struct Log {
    writes: Vec<Write>,
    events: Vec<RecordedEvent>,
    lines: Vec<(Level, String)>,
    failures: VecDeque<Error>,
}

struct Inner {
    client: LocalClient,
    log: Mutex<Log>,
}

/// An in-memory cluster with the embedded API server's semantics; see the [module](self).
/// Cheap to clone: clones share the objects.
#[derive(Clone)]
pub struct FakeCluster {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster").finish_non_exhaustive()
    }
}

impl Default for FakeCluster {
    fn default() -> Self {
        Self::new()
    }
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

impl FakeCluster {
    /// A cluster with the built-in kinds and the namespaces every cluster has (`default`,
    /// `kube-system`, `kube-public`, `kube-node-lease`).
    pub fn new() -> Self {
        let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
        // The initial namespaces of an empty store cannot fail to be created.
        let _ = ensure_namespaces(&store);
        Self::on(store)
    }

    /// The objects of `store` (a running server's), through this cluster's methods.
    pub(crate) fn on(store: Arc<Store>) -> Self {
        FakeCluster {
            inner: Arc::new(Inner {
                client: LocalClient::new(store, FIELD_MANAGER),
                log: Mutex::new(Log::default()),
            }),
        }
    }

    /// The cluster with `object` added (a fixture: not counted as a write). A custom resource
    /// needs its CustomResourceDefinition added first.
    ///
    /// # Panics
    ///
    /// When the object is refused (invalid, or its namespace or kind does not exist): a
    /// fixture must be valid.
    #[must_use]
    pub fn with<K: Resource<DynamicType = ()> + Serialize>(self, object: &K) -> Self {
        if let Err(err) = self.add(object) {
            panic!("fixture {} refused: {err}", K::kind(&()));
        }
        self
    }

    /// The cluster with the object written as JSON added; see [`with`](Self::with).
    ///
    /// # Panics
    ///
    /// When the object is refused.
    #[must_use]
    pub fn with_json(self, object: Value) -> Self {
        if let Err(err) = self.inner.create_value(object) {
            panic!("fixture refused: {err}");
        }
        self
    }

    /// Add `object` now (not counted as a write); returns it as stored.
    ///
    /// # Errors
    ///
    /// The API server's refusal.
    pub fn add<K: Resource<DynamicType = ()> + Serialize>(&self, object: &K) -> Result<Value> {
        let mut value = serde_json::to_value(object)?;
        value["apiVersion"] = Value::String(K::api_version(&()).into_owned());
        value["kind"] = Value::String(K::kind(&()).into_owned());
        self.inner.create_value(value)
    }

    /// The host the reconciler's `Context` calls go to.
    pub fn host(&self) -> Arc<dyn Host> {
        self.inner.clone()
    }

    /// Run `reconciler`'s reconcile of `request` against this cluster.
    ///
    /// # Errors
    ///
    /// Whatever the reconciler returns.
    pub fn reconcile<R: Reconciler>(&self, reconciler: &R, request: Request) -> Result<Action> {
        native::reconcile_with(reconciler, self.host(), request)
    }

    /// Build `R` from a configuration given as JSON text, as the host does from the manifest's
    /// `spec.config`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the field that does not deserialize, or `from_config`'s
    /// refusal.
    pub fn configure<R: FromConfig>(config: &str) -> Result<R> {
        native::configure(config)
    }

    /// The object `namespace/name` of kind `K`, if it exists.
    pub fn get<K: Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        let gvk = GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()));
        let text = self.inner.get(&gvk, namespace, name).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Every object of kind `K` (in `namespace`, when given), by namespace and name.
    pub fn list<K: Resource<DynamicType = ()> + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Vec<K> {
        let gvk = GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()));
        let params = ListParams::default().namespace(namespace);
        self.inner
            .list(&gvk, &params)
            .unwrap_or_default()
            .iter()
            .filter_map(|text| serde_json::from_str(text).ok())
            .collect()
    }

    /// The writes the reconciler made, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.inner.log().writes.clone()
    }

    /// The Events the reconciler recorded, in order.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.inner.log().events.clone()
    }

    /// What the reconciler logged, in order.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.inner.log().lines.clone()
    }

    /// Forget the writes, Events and log lines recorded so far.
    pub fn clear_log(&self) {
        let mut log = self.inner.log();
        log.writes.clear();
        log.events.clear();
        log.lines.clear();
    }

    /// Make the reconciler's next write fail with `error` (a conflict, the API server being
    /// unavailable, …), without changing anything. Failures queue up: each write takes one.
    pub fn fail_next_write(&self, error: Error) {
        self.inner.log().failures.push_back(error);
    }

    /// The embedded API server's store behind this cluster, for what the methods above do not
    /// cover.
    pub fn store(&self) -> &Arc<Store> {
        self.inner.client.store()
    }
}

impl Inner {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        // The log is appended whole: usable after a panicking test thread.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve(&self, gvk: &GroupVersionKind) -> Result<ResourceType> {
        self.client
            .resolve(&gvk.group, &gvk.version, &gvk.kind)
            .map_err(Error::from)
    }

    fn create_value(&self, object: Value) -> Result<Value> {
        let created = self.client.create(object).map_err(Error::from)?;
        Ok(Arc::unwrap_or_clone(created))
    }

    /// Count a write, or fail it as [`FakeCluster::fail_next_write`] asked.
    fn write(
        &self,
        verb: &'static str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<()> {
        let mut log = self.log();
        if let Some(failure) = log.failures.pop_front() {
            return Err(failure);
        }
        log.writes.push(Write {
            verb,
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        });
        Ok(())
    }
}

fn text(value: &Value) -> Result<String> {
    Ok(serde_json::to_string(value)?)
}

impl Host for Inner {
    fn get(&self, gvk: &GroupVersionKind, namespace: Option<&str>, name: &str) -> Result<String> {
        let rt = self.resolve(gvk)?;
        text(
            self.client
                .get(&rt, namespace, name)
                .map_err(Error::from)?
                .as_ref(),
        )
    }

    fn list(&self, gvk: &GroupVersionKind, params: &ListParams) -> Result<Vec<String>> {
        let rt = self.resolve(gvk)?;
        let items = self
            .client
            .list(
                &rt,
                params.namespace.as_deref(),
                params.label_selector.as_deref(),
                params.field_selector.as_deref(),
            )
            .map_err(Error::from)?;
        items.iter().map(|o| text(o)).collect()
    }

    fn create(&self, object: &str) -> Result<String> {
        let value: Value = serde_json::from_str(object)?;
        // An unserved kind is refused before the write is counted, as for every write.
        let rt = self.client.resolve_object(&value).map_err(Error::from)?;
        let name = meta_str(&value, "name")
            .or_else(|| meta_str(&value, "generateName"))
            .unwrap_or_default()
            .to_owned();
        self.write("create", &rt.kind, meta_str(&value, "namespace"), &name)?;
        text(&self.create_value(value)?)
    }

    fn update(&self, object: &str, status: bool) -> Result<String> {
        let value: Value = serde_json::from_str(object)?;
        let rt = self.client.resolve_object(&value).map_err(Error::from)?;
        let name = meta_str(&value, "name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::Invalid(format!("{}: metadata.name is required", rt.kind)))?;
        let verb = if status { "update-status" } else { "update" };
        self.write(verb, &rt.kind, meta_str(&value, "namespace"), name)?;
        text(
            self.client
                .update(value, status)
                .map_err(Error::from)?
                .as_ref(),
        )
    }

    fn patch(
        &self,
        gvk: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: &str,
        status: bool,
    ) -> Result<String> {
        let rt = self.resolve(gvk)?;
        let body: Value = serde_json::from_str(body)?;
        let verb = if status { "patch-status" } else { "patch" };
        self.write(verb, &gvk.kind, namespace, name)?;
        let patched = self
            .client
            .patch(&rt, namespace, name, patch_type, &body, status)
            .map_err(Error::from)?;
        text(&patched)
    }

    fn delete(
        &self,
        gvk: &GroupVersionKind,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<()> {
        let rt = self.resolve(gvk)?;
        self.write("delete", &gvk.kind, namespace, name)?;
        self.client
            .delete(
                &rt,
                namespace,
                name,
                preconditions.and_then(|p| p.uid.clone()),
                preconditions.and_then(|p| p.resource_version.clone()),
            )
            .map_err(Error::from)
    }

    fn record_event(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        self.log().events.push(RecordedEvent {
            regarding: regarding.clone(),
            event_type,
            reason: reason.to_owned(),
            message: message.to_owned(),
        });
        Ok(())
    }

    fn log(&self, level: Level, message: &str) {
        self.log().lines.push((level, message.to_owned()));
    }
}

/// The calls every host answers alike: krec's own tests run them against [`FakeCluster`] and
/// against the real host on the embedded API server, and compare the outcomes, so that a test
/// passing on the fake behaves the same in the host. Each entry is the step and its outcome,
/// `ok` or the error's kind and message (UIDs written `<uid>`).
///
/// It uses ConfigMaps named `conformance-*` in `default`, and expects reads that see the
/// writes before them (in the host: ConfigMaps `uncached`); it reads Deployments too (in the
/// host: from the cache).
pub fn conformance(ctx: &crate::Context) -> Vec<(&'static str, String)> {
    use k8s_openapi::api::core::v1::ConfigMap;

    fn outcome<T>(result: Result<T>, uid: &str) -> String {
        match result {
            Ok(_) => "ok".into(),
            Err(err) => {
                let kind = err.reason();
                let message = err.to_string();
                let message = if uid.is_empty() {
                    message
                } else {
                    message.replace(uid, "<uid>")
                };
                format!("{kind}: {message}")
            }
        }
    }
    fn configmap(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm.metadata.labels = Some([("suite".to_owned(), "conformance".to_owned())].into());
        cm.data = Some([("k".to_owned(), "v".to_owned())].into());
        cm
    }

    let ns = Some("default");
    let mut out = Vec::new();
    let mut step = |name: &'static str, result: String| out.push((name, result));
    step(
        "get a missing object",
        outcome(ctx.get::<ConfigMap>(ns, "conformance-missing"), ""),
    );
    step(
        "get a missing object of a group",
        outcome(
            ctx.get::<k8s_openapi::api::apps::v1::Deployment>(ns, "conformance-missing"),
            "",
        ),
    );
    let created = ctx.create(&configmap("conformance-a"));
    let uid = created
        .as_ref()
        .ok()
        .and_then(|cm| cm.metadata.uid.clone())
        .unwrap_or_default();
    step(
        "create",
        outcome(created.as_ref().map_err(Clone::clone), &uid),
    );
    step(
        "create a name taken",
        outcome(ctx.create(&configmap("conformance-a")), &uid),
    );
    step(
        "create an invalid name",
        outcome(ctx.create(&configmap("Conformance_Bad")), &uid),
    );
    let current = ctx.get::<ConfigMap>(ns, "conformance-a");
    step("get", outcome(current.as_ref().map_err(Clone::clone), &uid));
    if let Ok(current) = current {
        let mut stale = current.clone();
        stale.metadata.resource_version = Some("1".into());
        stale.data = Some([("k".to_owned(), "stale".to_owned())].into());
        step(
            "update from a stale resourceVersion",
            outcome(ctx.update(&stale), &uid),
        );
        let mut fresh = current;
        fresh.data = Some([("k".to_owned(), "fresh".to_owned())].into());
        step("update", outcome(ctx.update(&fresh), &uid));
    }
    let mut missing = configmap("conformance-missing");
    missing.metadata.resource_version = Some("1".into());
    step(
        "update a missing object",
        outcome(ctx.update(&missing), &uid),
    );
    step(
        "merge patch a missing object",
        outcome(
            ctx.patch::<ConfigMap>(
                ns,
                "conformance-missing",
                &crate::Patch::Merge(serde_json::json!({"data": {"k": "x"}})),
            ),
            &uid,
        ),
    );
    step(
        "merge patch",
        outcome(
            ctx.patch::<ConfigMap>(
                ns,
                "conformance-a",
                &crate::Patch::Merge(serde_json::json!({"data": {"k": "patched"}})),
            ),
            &uid,
        ),
    );
    step(
        "list by label",
        match ctx.list::<ConfigMap>(
            &ListParams::default()
                .namespace(ns)
                .labels("suite=conformance"),
        ) {
            Ok(items) => format!("{} item(s)", items.len()),
            Err(err) => outcome::<()>(Err(err), &uid),
        },
    );
    step(
        "list with a bad selector",
        outcome(
            ctx.list::<ConfigMap>(&ListParams::default().namespace(ns).labels("a in (")),
            &uid,
        ),
    );
    step(
        "delete with a wrong UID",
        outcome(
            ctx.delete_with::<ConfigMap>(
                ns,
                "conformance-a",
                &Preconditions {
                    uid: Some("not-the-uid".into()),
                    resource_version: None,
                },
            ),
            &uid,
        ),
    );
    step(
        "delete",
        outcome(ctx.delete::<ConfigMap>(ns, "conformance-a"), &uid),
    );
    step(
        "delete a missing object",
        outcome(ctx.delete::<ConfigMap>(ns, "conformance-a"), &uid),
    );
    out
}
