//! The embedded API server's object store: every object, the resourceVersion counter, the watch
//! history, and the Kubernetes semantics of writes.
//!
//! One lock guards the state, so each write is atomic and gets the next resourceVersion from a
//! single increasing counter; the change is appended to a bounded history (for watches resuming
//! from a resourceVersion) and broadcast to live watches while the lock is held, so a watch
//! started under the lock sees exactly the changes after its starting point. Semantics follow
//! kube-apiserver: `uid`, `creationTimestamp`, `generation` bumped on spec changes only,
//! optimistic concurrency, `generateName`, the status subresource, namespaces that must exist and
//! whose deletion removes their contents, finalizers holding deletion, background garbage
//! collection through owner references, and CRDs that add and remove served types.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::json::Pointer;
use crate::managed::{self, Schema};
use crate::registry::{self, Deletion};
use crate::resources::{Registry, ResourceType};
use crate::selector::{FieldSelector, LabelSelector, is_dns_label, is_dns_subdomain};
pub(crate) use crate::timestamp::now_rfc3339;
use crate::{schema, validation};

mod delete;
mod namespaces;
mod owners;
#[cfg(feature = "server")]
pub mod persist;
mod read;
mod update;
mod validate;
mod write;

pub use namespaces::{INITIAL_NAMESPACES, ensure_namespaces};
#[cfg(feature = "server")]
pub use persist::Persistence;

/// Watch events kept for watches that resume from a resourceVersion; older ones are compacted
/// and such a watch gets 410 Gone, as from an etcd compaction.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Capacity of the live broadcast to watches; a watch that falls further behind is closed with
/// 410 Gone and its client relists.
pub const WATCH_BUFFER: usize = 4_096;

/// Largest object stored, as its JSON text: etcd's default `--max-request-bytes` (1.5 MiB),
/// which kube-apiserver's writes meet after decoding, defaulting, patching and admission. A
/// larger object is refused as kube-apiserver refuses what etcd does not take, so no watcher or
/// informer ever carries one.
pub const MAX_OBJECT_BYTES: usize = 3 << 19;

/// Where an object lives: its resource (`group/plural`, shared by all versions), namespace
/// (`""` for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `group/plural`.
    pub resource: String,
    /// Namespace, `""` when cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
}

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

    /// The persisted form: `resource\0namespace\0name`.
    pub fn encode(&self) -> String {
        format!("{}\0{}\0{}", self.resource, self.namespace, self.name)
    }

    /// Parse [`encode`](Self::encode)'s output.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '\0');
        Some(Key {
            resource: parts.next()?.to_owned(),
            namespace: parts.next()?.to_owned(),
            name: parts.next()?.to_owned(),
        })
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One write, as watches see it.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion the write produced.
    pub rv: u64,
    /// Kind of change.
    pub change: ChangeType,
    /// Where the object lives.
    pub key: Key,
    /// The object after the change (for a deletion: the last state, with the new resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, if any (to turn selector transitions into ADDED/DELETED).
    pub old: Option<Arc<Value>>,
    /// `object`'s JSON, encoded once for every watch that sends it.
    encoded: OnceLock<Vec<u8>>,
}

impl Change {
    fn new(
        rv: u64,
        change: ChangeType,
        key: Key,
        object: Arc<Value>,
        old: Option<Arc<Value>>,
    ) -> Self {
        Change {
            rv,
            change,
            key,
            object,
            old,
            encoded: OnceLock::new(),
        }
    }

    /// The object as JSON, encoded on first use and shared by every watch after that.
    pub fn object_json(&self) -> &[u8] {
        self.encoded
            .get_or_init(|| crate::json::object_to_vec(&self.object))
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
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    /// Who owns what, for garbage collection.
    owners: owners::Owners,
    history: VecDeque<Arc<Change>>,
    /// Changes at or below this resourceVersion are no longer in `history`.
    compacted: u64,
    /// Where writes are saved, if anywhere. Inside the lock, so closing the store releases the
    /// database even while requests still hold the store.
    persistence: Option<Box<dyn Durable>>,
    /// Set by [`Store::close`]: writes fail from then on.
    closed: bool,
}

/// Where a store saves each write before acknowledging it (`--data-dir`'s database).
pub(crate) trait Durable: Send {
    /// Save `object` at `key`, written at resourceVersion `rv`.
    fn put(&self, key: &Key, object: &Value, rv: u64) -> Result<(), ApiError>;

    /// Forget the object at `key`, removed at resourceVersion `rv`.
    fn remove(&self, key: &Key, rv: u64) -> Result<(), ApiError>;
}

/// The object store. See the [module docs](self).
pub struct Store {
    registry: Arc<Registry>,
    state: Mutex<State>,
    feed: broadcast::Sender<Arc<Change>>,
    history_limit: usize,
    /// Watches started per resource (`group/plural`), for tests and diagnostics.
    watches_started: Mutex<BTreeMap<String, u64>>,
    /// Whether running Pods on existing nodes terminate gracefully (a kubelet removes them).
    graceful_pods: std::sync::atomic::AtomicBool,
}

/// What `write` should do with an object.
enum Write {
    Put(Value),
    Remove,
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    let map = object.as_object_mut().expect("just made an object");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("just made an object")
}

fn has_finalizers(object: &Value) -> bool {
    object
        .at("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

impl Store {
    /// An empty in-memory store serving the types in `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self::with_history(registry, DEFAULT_HISTORY)
    }

    /// Like [`new`](Self::new), keeping `history_limit` changes for resuming watches.
    pub fn with_history(registry: Arc<Registry>, history_limit: usize) -> Self {
        let (feed, _) = broadcast::channel(WATCH_BUFFER);
        Store {
            registry,
            state: Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                owners: Default::default(),
                history: VecDeque::new(),
                compacted: 0,
                persistence: None,
                closed: false,
            }),
            feed,
            history_limit: history_limit.max(1),
            watches_started: Mutex::new(BTreeMap::new()),
            graceful_pods: Default::default(),
        }
    }

    /// A store backed by `persistence`: its objects are loaded (CRDs first, so their types are
    /// served) and every write is saved before it is acknowledged. Watches cannot resume from
    /// before the restart; they get 410 Gone and relist.
    #[cfg(feature = "server")]
    pub fn open(registry: Arc<Registry>, persistence: Persistence) -> Result<Self, ApiError> {
        let (rv, objects) = persistence.load()?;
        let persistence: Box<dyn Durable> = Box::new(persistence);
        let mut store = Self::new(registry);
        {
            let state = store.state.get_mut().unwrap_or_else(|e| e.into_inner());
            state.persistence = Some(persistence);
            state.rv = rv;
            state.compacted = rv;
            for (key, object) in objects {
                if key.resource == "apiextensions.k8s.io/customresourcedefinitions"
                    && let Err(err) = store.registry.put_crd(&object)
                {
                    tracing::warn!("stored CRD {} is not servable: {err}", key.name);
                }
                state.owners.link(&key, &object);
                state.objects.insert(key, Arc::new(object));
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
        let mut state = self.lock();
        state.closed = true;
        state.persistence = None;
    }

    /// The served types.
    pub fn registry(&self) -> &Arc<Registry> {
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

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// An object as it is answered in `rt`'s version: its `apiVersion`, and for custom resources
    /// the schema's `default`s (applied on reads as well as writes, as kube-apiserver does, so
    /// objects stored before a default was added get it). The stored object itself when nothing
    /// changes (a built-in kind read in its stored version): no copy. An object of a resource
    /// converted by a webhook that is stored in another version is returned as stored, for
    /// [`crate::conversion::to_version`] to convert outside the store's lock.
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

    /// Apply one write under the lock: persist, store, record and broadcast. Returns the stored
    /// object (for a removal, the final state with its new resourceVersion).
    fn write(&self, state: &mut State, key: Key, write: Write) -> Result<Arc<Value>, ApiError> {
        if state.closed {
            return Err(ApiError::unavailable("the API server is shutting down"));
        }
        let rv = state.rv + 1;
        let old = state.objects.get(&key).cloned();
        let (change, object) = match write {
            Write::Put(mut object) => {
                if crate::json::encoded_len(&object) > MAX_OBJECT_BYTES {
                    return Err(ApiError::too_large_message(
                        "etcdserver: request is too large",
                    ));
                }
                metadata_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
                let change = if old.is_some() {
                    ChangeType::Modified
                } else {
                    ChangeType::Added
                };
                (change, object)
            }
            Write::Remove => {
                let Some(old) = &old else {
                    return Err(ApiError::internal(format!(
                        "removing a missing object {key:?}"
                    )));
                };
                let mut last = (**old).clone();
                metadata_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
                (ChangeType::Deleted, last)
            }
        };
        if let Some(persistence) = &state.persistence {
            match change {
                ChangeType::Deleted => persistence.remove(&key, rv)?,
                _ => persistence.put(&key, &object, rv)?,
            }
        }
        let object = Arc::new(object);
        state.rv = rv;
        if let Some(old) = &old {
            state
                .owners
                .unlink(&key, old, change == ChangeType::Deleted);
        }
        if change != ChangeType::Deleted {
            state.owners.link(&key, &object);
        }
        match change {
            ChangeType::Deleted => state.objects.remove(&key),
            _ => state.objects.insert(key.clone(), object.clone()),
        };
        let change = Arc::new(Change::new(rv, change, key, object.clone(), old));
        state.history.push_back(change.clone());
        while state.history.len() > self.history_limit {
            if let Some(dropped) = state.history.pop_front() {
                state.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.feed.send(change);
        Ok(object)
    }
}
