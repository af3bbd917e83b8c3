//! The generic store (kube-apiserver's `registry/generic`): the Kubernetes semantics of writes
//! on top of the storage (`crate::storage`), for every kind, asking each kind's strategy
//! (`crate::registry`) for what is its own.
//!
//! One lock guards the storage and the owners' index, so each write is atomic and gets the
//! next resourceVersion from a single increasing counter, and a watch started under the lock
//! sees exactly the changes after its starting point. Semantics follow kube-apiserver: `uid`,
//! `creationTimestamp`, `generation` bumped on spec changes only, optimistic concurrency,
//! `generateName`, the status subresource, namespaces that must exist and whose deletion removes
//! their contents, finalizers holding deletion, background garbage collection through owner
//! references, and CRDs that add and remove served types.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::managed::{self, Schema};
use crate::registry::{self, Deletion};
use crate::resources::{ResourceType, ResourceTypes};
pub(crate) use crate::timestamp::now_rfc3339;
use crate::validation;
use krec_core::error::ApiError;
use krec_core::json::Pointer;
use krec_core::schema;
use krec_core::selector::{FieldSelector, LabelSelector};

mod delete;
mod namespaces;
mod owners;
mod read;
mod update;
mod validate;
mod write;
use validate::RulesVerdict;

#[cfg(feature = "server")]
pub use crate::storage::Persistence;
pub use crate::storage::{
    Change, ChangeType, DEFAULT_HISTORY, Key, MAX_OBJECT_BYTES, WATCH_BUFFER,
};
use crate::storage::{Storage, Write, metadata_mut};
pub use namespaces::{INITIAL_NAMESPACES, ensure_namespaces};

impl Key {
    fn new(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Key {
            resource: rt.storage_key(),
            namespace: if rt.namespaced {
                namespace.unwrap_or("").to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    fn namespace_key(namespace: &str) -> Self {
        Key {
            resource: "/namespaces".into(),
            namespace: String::new(),
            name: namespace.to_owned(),
        }
    }
}

/// How a delete treats dependents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The owner goes at once; its dependents are garbage-collected after it.
    #[default]
    Background,
    /// The owner gets the `foregroundDeletion` finalizer and a `deletionTimestamp`, and goes
    /// once its dependents (deleted the same way) are gone.
    Foreground,
    /// Dependents lose their owner reference and stay.
    Orphan,
}

/// Options of a create, update or patch.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// The field manager the write is recorded under in `managedFields`.
    pub manager: String,
    /// The object already carries the `managedFields` a server-side apply computed.
    pub applied: bool,
    /// The object is what a dry run of this same create answered (admission ran on it in
    /// between): its `uid` and `creationTimestamp` are kept, so webhooks saw what is stored.
    pub prepared: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            dry_run: false,
            manager: "kube-apiserver".into(),
            applied: false,
            prepared: false,
        }
    }
}

impl From<bool> for WriteOptions {
    /// A write by the server itself, dry-run or not.
    fn from(dry_run: bool) -> Self {
        WriteOptions {
            dry_run,
            ..Default::default()
        }
    }
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Required UID.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
    /// Dependents policy.
    pub propagation: Propagation,
    /// Validate only; change nothing.
    pub dry_run: bool,
    /// `gracePeriodSeconds`: how long a running Pod gets to terminate (`None`: its
    /// `terminationGracePeriodSeconds`; 0: at once).
    pub grace_period: Option<i64>,
}

/// A page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The objects, in key order.
    pub items: Vec<Arc<Value>>,
    /// The store's resourceVersion when listed.
    pub resource_version: u64,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// How many objects the following pages hold.
    pub remaining: Option<usize>,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFrom {
    /// Synthetic ADDED events for every current object, then changes.
    Now,
    /// Changes after this resourceVersion.
    After(u64),
}

/// A started watch: the backlog to send first, then the live feed.
pub struct WatchStart {
    /// Changes (or synthetic ADDED events) to send first, oldest first.
    pub backlog: Vec<Arc<Change>>,
    /// Subsequent changes.
    pub feed: broadcast::Receiver<Arc<Change>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}

struct State {
    /// The objects, the resourceVersion counter, the history and the feed of watches.
    storage: Storage,
    /// Who owns what, for garbage collection.
    owners: owners::Owners,
}

/// The object store. See the [module docs](self).
pub struct Store {
    registry: Arc<ResourceTypes>,
    state: Mutex<State>,
    /// The live feed of changes (the storage sends; watches subscribe without the lock).
    feed: broadcast::Sender<Arc<Change>>,
    /// Watches started per resource (`group/plural`), for tests and diagnostics.
    watches_started: Mutex<BTreeMap<String, u64>>,
    /// Whether running Pods on existing nodes terminate gracefully (a kubelet removes them).
    graceful_pods: std::sync::atomic::AtomicBool,
    /// Whether every authenticated request is authorized (`--authorization-mode=AlwaysAllow`).
    always_allow: std::sync::atomic::AtomicBool,
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn has_finalizers(object: &Value) -> bool {
    object
        .at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

impl Store {
    /// An empty in-memory store serving the types in `registry`.
    pub fn new(registry: Arc<ResourceTypes>) -> Self {
        Self::with_history(registry, DEFAULT_HISTORY)
    }

    /// Like [`new`](Self::new), keeping `history_limit` changes for resuming watches.
    pub fn with_history(registry: Arc<ResourceTypes>, history_limit: usize) -> Self {
        let (feed, _) = broadcast::channel(WATCH_BUFFER);
        Store {
            registry,
            state: Mutex::new(State {
                storage: Storage::new(history_limit, feed.clone()),
                owners: Default::default(),
            }),
            feed,
            watches_started: Mutex::new(BTreeMap::new()),
            graceful_pods: Default::default(),
            always_allow: Default::default(),
        }
    }

    /// A store backed by `persistence`: its objects are loaded (CRDs first, so their types are
    /// served) and every write is saved before it is acknowledged. Watches cannot resume from
    /// before the restart; they get 410 Gone and relist.
    #[cfg(feature = "server")]
    pub fn open(registry: Arc<ResourceTypes>, persistence: Persistence) -> Result<Self, ApiError> {
        let (rv, objects) = persistence.load()?;
        let mut store = Self::new(registry);
        {
            let state = store.state.get_mut().unwrap_or_else(|e| e.into_inner());
            state.storage.persist_to(Box::new(persistence), rv);
            for (key, object) in objects {
                if key.resource == "apiextensions.k8s.io/customresourcedefinitions"
                    && let Err(err) = store.registry.put_crd(&object)
                {
                    tracing::warn!("stored CRD {} is not servable: {err}", key.name);
                }
                state.owners.link(&key, &object);
                state.storage.load(key, object);
            }
        }
        Ok(store)
    }

    /// How many watches of `group`'s `plural` resource were started (`""` is the core group):
    /// how a test sees that clients share one watch per kind.
    pub fn watches_started(&self, group: &str, plural: &str) -> u64 {
        let key = format!("{group}/{plural}");
        self.watches_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// Refuse further writes and release the database, so the data directory can be reopened
    /// (a restart) even while requests or watches still hold the store.
    pub fn close(&self) {
        self.lock().storage.close();
    }

    /// The served types.
    pub fn registry(&self) -> &Arc<ResourceTypes> {
        &self.registry
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation completes under the lock before it can panic, so a poisoned lock still
        // guards consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Let running Pods on existing nodes terminate gracefully, as kube-apiserver does: a
    /// delete marks them (`deletionTimestamp`, `deletionGracePeriodSeconds`) and the node's
    /// kubelet removes them. Off by default: without kubelets, nothing would remove them.
    pub fn set_graceful_pod_deletion(&self, on: bool) {
        self.graceful_pods
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Authorize every authenticated request, as kube-apiserver's `AlwaysAllow` authorizer
    /// does (RBAC's objects are still served, and still checked for escalation by their
    /// writers' permissions — which are all of them). Off by default: RBAC decides.
    pub fn set_always_allow(&self, on: bool) {
        self.always_allow
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether every authenticated request is authorized ([`Store::set_always_allow`]).
    pub fn always_allows(&self) -> bool {
        self.always_allow.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().storage.rv()
    }

    /// An object as it is answered in `rt`'s version: its `apiVersion`, and for custom resources
    /// the schema's `default`s (applied on reads as well as writes, as kube-apiserver does, so
    /// objects stored before a default was added get it). The stored object itself when nothing
    /// changes (a built-in kind read in its stored version): no copy. An object of a resource
    /// converted by a webhook that is stored in another version is returned as stored, for
    /// `crate::conversion::to_version` to convert outside the store's lock.
    pub fn served(rt: &ResourceType, object: &Arc<Value>) -> Arc<Value> {
        let same_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| rt.is_api_version(v));
        // Another version of a resource converted by a webhook: left as stored, for
        // `conversion::to_version` to convert.
        if same_version && rt.schema.is_none() || !same_version && rt.conversion.is_some() {
            return object.clone();
        }
        let mut out = (**object).clone();
        if !same_version {
            out["apiVersion"] = json!(rt.api_version());
        }
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, &mut out);
        }
        Arc::new(out)
    }

    /// Apply one write under the lock: [commit](Storage::commit) it, and keep the owners'
    /// index up to date. Returns the stored object (for a removal, the final state with its
    /// new resourceVersion).
    fn write(&self, state: &mut State, key: Key, write: Write) -> Result<Arc<Value>, ApiError> {
        let change = state.storage.commit(key, write)?;
        if let Some(old) = &change.old {
            state
                .owners
                .unlink(&change.key, old, change.change == ChangeType::Deleted);
        }
        if change.change != ChangeType::Deleted {
            state.owners.link(&change.key, &change.object);
        }
        Ok(change.object.clone())
    }
}
