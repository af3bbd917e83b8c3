//! Storage under the generic store, as `k8s.io/apiserver/pkg/storage` is under kube-apiserver's
//! generic registry: the objects by key, the single increasing resourceVersion counter, the
//! bounded history of changes (for watches resuming from a resourceVersion) and the live
//! broadcast to watches, and where writes are saved (`--data-dir`). It knows nothing of kinds,
//! strategies or Kubernetes semantics: those are the store's (`crate::store`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use krec_core::error::ApiError;

#[cfg(feature = "server")]
pub mod persist;

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
    pub(crate) fn new(
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
            .get_or_init(|| krec_core::json::object_to_vec(&self.object))
    }
}

/// Where a store saves each write before acknowledging it (`--data-dir`'s database).
pub(crate) trait Durable: Send {
    /// Save `object` at `key`, written at resourceVersion `rv`.
    fn put(&self, key: &Key, object: &Value, rv: u64) -> Result<(), ApiError>;

    /// Forget the object at `key`, removed at resourceVersion `rv`.
    fn remove(&self, key: &Key, rv: u64) -> Result<(), ApiError>;
}

/// What `write` should do with an object.
pub(crate) enum Write {
    /// Store this object.
    Put(Value),
    /// Remove the object.
    Remove,
}

/// The objects, the resourceVersion counter, the history and the feed (see the
/// [module docs](self)). Kept behind the store's lock: each commit is atomic.
pub(crate) struct Storage {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    history_limit: usize,
    /// Changes at or below this resourceVersion are no longer in `history`.
    compacted: u64,
    feed: broadcast::Sender<Arc<Change>>,
    /// Where writes are saved, if anywhere. Behind the store's lock, so closing the store
    /// releases the database even while requests still hold the store.
    persistence: Option<Box<dyn Durable>>,
    /// Set by [`close`](Self::close): commits fail from then on.
    closed: bool,
}

impl Storage {
    /// Empty storage keeping `history_limit` changes, broadcasting to `feed`'s receivers.
    pub(crate) fn new(history_limit: usize, feed: broadcast::Sender<Arc<Change>>) -> Self {
        Storage {
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted: 0,
            feed,
            persistence: None,
            closed: false,
        }
    }

    /// Save every commit to `persistence` from now on, which already holds everything up to
    /// resourceVersion `rv`: no watch can resume from before it.
    #[cfg(feature = "server")]
    pub(crate) fn persist_to(&mut self, persistence: Box<dyn Durable>, rv: u64) {
        self.persistence = Some(persistence);
        self.rv = rv;
        self.compacted = rv;
    }

    /// Put a loaded object in place, with no change recorded.
    #[cfg(feature = "server")]
    pub(crate) fn load(&mut self, key: Key, object: Value) {
        self.objects.insert(key, Arc::new(object));
    }

    /// Refuse further commits and release the database.
    pub(crate) fn close(&mut self) {
        self.closed = true;
        self.persistence = None;
    }

    /// The current resourceVersion.
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// The resourceVersion at and below which changes are no longer in the history.
    pub(crate) fn compacted(&self) -> u64 {
        self.compacted
    }

    /// Every object, in key order.
    pub(crate) fn objects(&self) -> &BTreeMap<Key, Arc<Value>> {
        &self.objects
    }

    /// The object at `key`.
    pub(crate) fn get(&self, key: &Key) -> Option<&Arc<Value>> {
        self.objects.get(key)
    }

    /// The changes kept, oldest first.
    pub(crate) fn history(&self) -> &VecDeque<Arc<Change>> {
        &self.history
    }

    /// Apply one write: the next resourceVersion, saved (if persisted), stored, recorded in
    /// the history and broadcast. Returns the change.
    pub(crate) fn commit(&mut self, key: Key, write: Write) -> Result<Arc<Change>, ApiError> {
        if self.closed {
            return Err(ApiError::unavailable("the API server is shutting down"));
        }
        let rv = self.rv + 1;
        let old = self.objects.get(&key).cloned();
        let (change, object) = match write {
            Write::Put(mut object) => {
                if krec_core::json::encoded_len(&object) > MAX_OBJECT_BYTES {
                    return Err(ApiError::too_large_message(
                        "etcdserver: request is too large",
                    ));
                }
                set_resource_version(&mut object, rv);
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
                set_resource_version(&mut last, rv);
                (ChangeType::Deleted, last)
            }
        };
        if let Some(persistence) = &self.persistence {
            match change {
                ChangeType::Deleted => persistence.remove(&key, rv)?,
                _ => persistence.put(&key, &object, rv)?,
            }
        }
        let object = Arc::new(object);
        self.rv = rv;
        match change {
            ChangeType::Deleted => self.objects.remove(&key),
            _ => self.objects.insert(key.clone(), object.clone()),
        };
        let change = Arc::new(Change::new(rv, change, key, object, old));
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.feed.send(change.clone());
        Ok(change)
    }

    /// Replace the object at `key` with `object` in place: saved at the current
    /// resourceVersion, no change recorded (the object is the same, written differently).
    pub(crate) fn rewrite(&mut self, key: Key, object: Value) -> Result<(), ApiError> {
        if let Some(persistence) = &self.persistence {
            persistence.put(&key, &object, self.rv)?;
        }
        self.objects.insert(key, Arc::new(object));
        Ok(())
    }
}

/// Set `metadata.resourceVersion`.
fn set_resource_version(object: &mut Value, rv: u64) {
    metadata_mut(object).insert("resourceVersion".into(), json!(rv.to_string()));
}

/// An object's `metadata` (making `object` and its metadata objects if need be).
pub(crate) fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Key {
        Key {
            resource: "/configmaps".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn each_commit_should_take_the_next_resource_version_and_be_broadcast() {
        let (feed, mut watch) = broadcast::channel(8);
        let mut storage = Storage::new(2, feed);
        let added = storage
            .commit(key("a"), Write::Put(json!({"metadata": {"name": "a"}})))
            .expect("added");
        assert_eq!((added.rv, added.change), (1, ChangeType::Added));
        assert_eq!(added.object["metadata"]["resourceVersion"], "1");
        let modified = storage
            .commit(
                key("a"),
                Write::Put(json!({"metadata": {"name": "a"}, "data": {}})),
            )
            .expect("modified");
        assert_eq!(modified.change, ChangeType::Modified);
        assert!(modified.old.is_some());
        let deleted = storage.commit(key("a"), Write::Remove).expect("deleted");
        assert_eq!((deleted.rv, deleted.change), (3, ChangeType::Deleted));
        assert_eq!(deleted.object["metadata"]["resourceVersion"], "3");
        assert!(storage.get(&key("a")).is_none());
        assert_eq!(watch.try_recv().map(|c| c.rv).ok(), Some(1));
        // Two changes kept: the first is compacted away.
        assert_eq!(storage.history().len(), 2);
        assert_eq!((storage.rv(), storage.compacted()), (3, 1));
        assert!(storage.commit(key("b"), Write::Remove).is_err());
    }

    #[test]
    fn a_rewrite_should_record_no_change_and_a_closed_storage_should_refuse_commits() {
        let (feed, _) = broadcast::channel(8);
        let mut storage = Storage::new(10, feed);
        storage
            .commit(key("a"), Write::Put(json!({"apiVersion": "x/v1"})))
            .expect("added");
        storage
            .rewrite(key("a"), json!({"apiVersion": "x/v2"}))
            .expect("rewritten");
        assert_eq!((storage.rv(), storage.history().len()), (1, 1));
        assert_eq!(
            storage.get(&key("a")).map(|o| o["apiVersion"].clone()),
            Some(json!("x/v2"))
        );
        storage.close();
        assert!(storage.commit(key("b"), Write::Put(json!({}))).is_err());
        let big = json!({"data": "x".repeat(MAX_OBJECT_BYTES)});
        let (feed, _) = broadcast::channel(8);
        assert!(
            Storage::new(1, feed)
                .commit(key("c"), Write::Put(big))
                .is_err()
        );
    }
}
