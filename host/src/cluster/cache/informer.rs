//! An [`Informer`]: one watch of a kind in a scope, its store and indexes, and the subscribers
//! it passes each change to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use krec_core::ObjectKey;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::cluster::client::{ApiClient, Resolved};
use krec_core::EventKind;
use krec_core::selector::{FieldSelector, LabelSelector};
use krec_core::{CallError, Gvk};

use super::{CachedObject, Content, Event, EventSink, SYNC_PATIENCE};

#[derive(Default)]
struct Indexes {
    by_namespace: HashMap<String, BTreeSet<String>>,
    by_owner: HashMap<String, BTreeSet<ObjectKey>>,
}

fn key_of(object: &CachedObject) -> ObjectKey {
    ObjectKey {
        namespace: object.namespace().map(str::to_owned),
        name: object.name().unwrap_or_default().to_owned(),
    }
}

impl Indexes {
    fn insert(&mut self, object: &CachedObject) {
        let key = key_of(object);
        if let Some(ns) = &key.namespace {
            self.by_namespace
                .entry(ns.clone())
                .or_default()
                .insert(key.name.clone());
        }
        if let Some(uid) = object.controller_uid() {
            self.by_owner.entry(uid.to_owned()).or_default().insert(key);
        }
    }

    fn remove(&mut self, object: &CachedObject) {
        let key = key_of(object);
        if let Some(ns) = &key.namespace
            && let Some(names) = self.by_namespace.get_mut(ns)
        {
            names.remove(&key.name);
            if names.is_empty() {
                self.by_namespace.remove(ns);
            }
        }
        if let Some(uid) = object.controller_uid()
            && let Some(keys) = self.by_owner.get_mut(uid)
        {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_owner.remove(uid);
            }
        }
    }
}

/// An informer's objects by namespace and name, and the list being received during a (re)list.
/// The indexes live under the same lock as the objects, so a read never sees them disagree.
#[derive(Default)]
struct ObjectStore {
    objects: HashMap<ObjectKey, Arc<CachedObject>>,
    indexes: Indexes,
    relist: Option<HashMap<ObjectKey, Arc<CachedObject>>>,
}

/// One watch of one kind in one scope, its store, indexes and subscribers.
pub struct Informer {
    pub(super) gvk: Gvk,
    pub(super) namespace: Option<String>,
    pub(super) content: Content,
    resolved: Resolved,
    store: RwLock<ObjectStore>,
    sinks: RwLock<Vec<Arc<dyn EventSink>>>,
    synced: tokio::sync::watch::Sender<bool>,
    /// The highest `resourceVersion` the store reflects: every write the API server answered
    /// with that version or an older one is in (see [`wait_for_version`](Self::wait_for_version)).
    seen: tokio::sync::watch::Sender<u64>,
    pub(super) task: Mutex<Option<JoinHandle<()>>>,
    /// The guests holding an [`InformerUse`](super::InformerUse) of it (for their subscriptions or their reads),
    /// with how many each holds: it runs while any remain.
    users: Mutex<BTreeMap<String, usize>>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("gvk", &self.gvk)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Informer {
    /// A new informer of `gvk` in `namespace` (`None`: all), its watch started.
    pub(super) fn start(
        api: Arc<ApiClient>,
        gvk: Gvk,
        namespace: Option<String>,
        content: Content,
        resolved: Resolved,
    ) -> Arc<Self> {
        let informer = Arc::new(Informer {
            gvk,
            namespace,
            content,
            resolved,
            store: RwLock::default(),
            sinks: RwLock::new(Vec::new()),
            synced: tokio::sync::watch::channel(false).0,
            seen: tokio::sync::watch::channel(0).0,
            task: Mutex::new(None),
            users: Mutex::new(BTreeMap::new()),
        });
        // Shared by every guest that reads the kind: never on one guest's threads.
        let task = crate::process::threads::spawn_home(run(api, informer.clone()));
        *informer.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        informer
    }

    /// The kind watched.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The namespace watched; `None` for all namespaces (or a cluster-scoped kind).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// What it holds of each object.
    pub fn content(&self) -> Content {
        self.content
    }

    /// Whether the initial list has been stored.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait until the initial list has been stored, at most `timeout`.
    ///
    /// # Errors
    ///
    /// `unavailable` when the informer has not synced in time (the API server is unreachable,
    /// or the guest lacks list/watch permission in a real cluster).
    /// A wait longer than [`SYNC_PATIENCE`] is logged as a warning, then again each time as
    /// long, so a start-up held up by a slow or silent API server says so.
    pub async fn wait_synced(&self, timeout: Duration) -> Result<(), CallError> {
        let mut synced = self.synced.subscribe();
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let wait = synced.wait_for(|s| *s);
        tokio::pin!(wait);
        loop {
            let next = (tokio::time::Instant::now() + SYNC_PATIENCE).min(deadline);
            match tokio::time::timeout_at(next, &mut wait).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(_)) => break,
                Err(_) if next >= deadline => break,
                Err(_) => tracing::warn!(
                    "the cache of {} has not synced after {:?}: still waiting for the API server's list (its errors are logged)",
                    self.describe(),
                    started.elapsed()
                ),
            }
        }
        Err(CallError::Unavailable(format!(
            "the cache of {} has not synced within {timeout:?}",
            self.describe()
        )))
    }

    /// The highest `resourceVersion` the store reflects (0 before any object).
    pub fn seen_version(&self) -> u64 {
        *self.seen.borrow()
    }

    /// Wait until the store reflects `resource_version` — the watch has delivered the event of
    /// that version or a later one — at most `timeout`; whether it does. Versions are compared
    /// as numbers, as kube-apiserver's are (KEP-5504).
    pub async fn wait_for_version(&self, resource_version: u64, timeout: Duration) -> bool {
        let mut seen = self.seen.subscribe();
        matches!(
            tokio::time::timeout(timeout, seen.wait_for(|v| *v >= resource_version)).await,
            Ok(Ok(_))
        )
    }

    /// A synced informer of `gvk` in `namespace` that runs nothing, reflecting version `seen`:
    /// for tests of what reads through informers.
    #[cfg(test)]
    pub(crate) fn standing(gvk: Gvk, namespace: Option<&str>, seen: u64) -> Arc<Self> {
        let resource = kube::core::ApiResource {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            api_version: gvk.api_version(),
            kind: gvk.kind.clone(),
            plural: format!("{}s", gvk.kind.to_lowercase()),
        };
        Arc::new(Informer {
            gvk,
            namespace: namespace.map(str::to_owned),
            content: Content::Objects,
            resolved: Resolved {
                resource,
                namespaced: true,
            },
            store: RwLock::default(),
            sinks: RwLock::new(Vec::new()),
            synced: tokio::sync::watch::channel(true).0,
            seen: tokio::sync::watch::channel(seen).0,
            task: Mutex::new(None),
            users: Mutex::new(BTreeMap::new()),
        })
    }

    /// Raise the version the store reflects to `object`'s, if higher.
    fn saw(&self, object: &CachedObject) {
        if let Some(version) = object
            .resource_version()
            .and_then(|v| v.parse::<u64>().ok())
        {
            self.seen.send_if_modified(|seen| {
                let higher = version > *seen;
                if higher {
                    *seen = version;
                }
                higher
            });
        }
    }

    /// `v1 Pod in default` / `v1 Pod in all namespaces` (`, metadata only`).
    pub fn describe(&self) -> String {
        let content = match self.content {
            Content::Objects => "",
            Content::Metadata => " (metadata only)",
        };
        match &self.namespace {
            Some(ns) => format!("{} in {ns}{content}", self.gvk),
            None if self.resolved.namespaced => {
                format!("{} in all namespaces{content}", self.gvk)
            }
            None => format!("{}{content}", self.gvk),
        }
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.read_store().objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.read_store().objects.is_empty()
    }

    /// One object from the store, parsed.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.cached(namespace, name).map(|o| o.to_value())
    }

    /// One object from the store as the JSON text guests receive (shared, not copied).
    pub fn get_json(&self, namespace: Option<&str>, name: &str) -> Option<Arc<str>> {
        self.cached(namespace, name).map(|o| o.json())
    }

    /// One object from the store as cached.
    pub fn cached(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.read_store()
            .objects
            .get(&self.key(namespace, name))
            .cloned()
    }

    /// Objects in `namespace` (all when `None`) matching the selectors, parsed, sorted by
    /// namespace and name.
    pub fn list(
        &self,
        namespace: Option<&str>,
        labels: Option<&LabelSelector>,
        fields: Option<&FieldSelector>,
    ) -> Vec<Value> {
        self.select(namespace, labels, fields)
            .iter()
            .map(|o| o.to_value())
            .collect()
    }

    /// Objects in `namespace` (all when `None`) matching the selectors, as cached, sorted by
    /// namespace and name. A namespace is looked up in the namespace index.
    pub fn select(
        &self,
        namespace: Option<&str>,
        labels: Option<&LabelSelector>,
        fields: Option<&FieldSelector>,
    ) -> Vec<Arc<CachedObject>> {
        let objects: Vec<Arc<CachedObject>> = match namespace.filter(|_| self.resolved.namespaced) {
            Some(ns) => {
                let store = self.read_store();
                store
                    .indexes
                    .by_namespace
                    .get(ns)
                    .into_iter()
                    .flatten()
                    .filter_map(|name| store.objects.get(&ObjectKey::new(Some(ns), name)))
                    .cloned()
                    .collect()
            }
            None => self.state(),
        };
        let mut out: Vec<(ObjectKey, Arc<CachedObject>)> = objects
            .into_iter()
            .filter(|o| {
                labels.is_none_or(|s| s.matches_with(|key| o.label(key)))
                    && fields.is_none_or(|s| s.matches_meta(o.name(), o.namespace()))
            })
            .map(|o| (key_of(&o), o))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.into_iter().map(|(_, o)| o).collect()
    }

    /// The namespace and name of every cached object, sorted.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut keys: Vec<ObjectKey> = self.read_store().objects.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Objects whose controller owner reference has `uid`, from the owner index.
    pub fn controlled_by(&self, uid: &str) -> Vec<Value> {
        let store = self.read_store();
        store
            .indexes
            .by_owner
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|key| store.objects.get(key))
            .map(|o| o.to_value())
            .collect()
    }

    /// Add a subscriber; if the informer has synced, it first gets every cached object as a
    /// create.
    pub fn subscribe(&self, sink: Arc<dyn EventSink>) {
        let mut sinks = self.sinks.write().unwrap_or_else(|e| e.into_inner());
        if self.is_synced() {
            self.replay(sink.as_ref());
        }
        sinks.push(sink);
    }

    /// Deliver every cached object to `sink` as a create, as a new subscriber gets them: how a
    /// swapped-in guest version sees the whole state, as a restarted controller would.
    pub fn replay(&self, sink: &dyn EventSink) {
        for object in self.state_sorted() {
            sink.on_event(
                &self.gvk,
                &Event {
                    kind: EventKind::Create,
                    object: &object.metadata(),
                    old: None,
                    cached: Some(&object),
                    old_cached: None,
                    received: std::time::Instant::now(),
                },
            );
        }
    }

    /// Remove a subscriber (compared by identity).
    pub fn unsubscribe(&self, sink: &Arc<dyn EventSink>) {
        self.sinks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| !Arc::ptr_eq(s, sink));
    }

    /// One more use by `user`; the caller holds the cache's lock.
    pub(super) fn add_user(&self, user: &str) {
        *self
            .users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(user.to_owned())
            .or_insert(0) += 1;
    }

    /// One use by `user` fewer; whether any use is left. The caller holds the cache's lock.
    pub(super) fn remove_user(&self, user: &str) -> bool {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = users.get_mut(user) {
            *count -= 1;
            if *count == 0 {
                users.remove(user);
            }
        }
        !users.is_empty()
    }

    /// The guests using this informer.
    pub fn users(&self) -> Vec<String> {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        users.keys().cloned().collect()
    }

    pub(super) fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    /// Number of subscribers.
    pub fn subscribers(&self) -> usize {
        self.sinks.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn dispatch(
        &self,
        kind: EventKind,
        object: &CachedObject,
        old: Option<&CachedObject>,
        received: std::time::Instant,
    ) {
        let sinks = self.sinks.read().unwrap_or_else(|e| e.into_inner());
        self.dispatch_to(&sinks, kind, object, old, received);
    }

    /// Tell `sinks` of one change.
    fn dispatch_to(
        &self,
        sinks: &[Arc<dyn EventSink>],
        kind: EventKind,
        object: &CachedObject,
        old: Option<&CachedObject>,
        received: std::time::Instant,
    ) {
        if sinks.is_empty() {
            return;
        }
        let metadata = object.metadata();
        let old_metadata = old.map(CachedObject::metadata);
        let event = Event {
            kind,
            object: &metadata,
            old: old_metadata.as_deref(),
            cached: Some(object),
            old_cached: old,
            received,
        };
        for sink in sinks.iter() {
            sink.on_event(&self.gvk, &event);
        }
    }

    /// Apply one watcher event to the store and indexes and tell the subscribers.
    fn apply(&self, event: watcher::Event<CachedObject>) {
        let received = std::time::Instant::now();
        let cache = |o: CachedObject| Arc::new(o.with_kind(&self.gvk));
        match event {
            watcher::Event::Apply(object) => {
                let object = cache(object);
                let old = {
                    let mut store = self.write_store();
                    let old = store.objects.insert(key_of(&object), object.clone());
                    if let Some(old) = &old {
                        store.indexes.remove(old);
                    }
                    store.indexes.insert(&object);
                    old
                };
                self.saw(&object);
                match old {
                    // A relisted object that did not change is no event.
                    Some(old) if old.resource_version() == object.resource_version() => {}
                    Some(old) => self.dispatch(EventKind::Update, &object, Some(&old), received),
                    None => self.dispatch(EventKind::Create, &object, None, received),
                }
            }
            watcher::Event::Delete(object) => {
                let object = cache(object);
                {
                    let mut store = self.write_store();
                    let stored = store.objects.remove(&key_of(&object));
                    store.indexes.remove(stored.as_deref().unwrap_or(&object));
                }
                self.saw(&object);
                self.dispatch(EventKind::Delete, &object, None, received);
            }
            watcher::Event::Init => self.write_store().relist = Some(HashMap::new()),
            watcher::Event::InitApply(object) => {
                let object = cache(object);
                self.write_store()
                    .relist
                    .get_or_insert_default()
                    .insert(key_of(&object), object);
            }
            watcher::Event::InitDone => {
                // A (re)list: the new list replaces the store at once; what changed since the
                // old store is delivered as events.
                // Subscribers are held still from the swap until `synced` is set: one that
                // subscribes meanwhile waits, then sees the informer synced and gets every
                // object replayed, rather than falling between the two.
                let sinks = self.sinks.read().unwrap_or_else(|e| e.into_inner());
                let mut before = {
                    let mut store = self.write_store();
                    let listed = store.relist.take().unwrap_or_default();
                    let mut indexes = Indexes::default();
                    for object in listed.values() {
                        indexes.insert(object);
                    }
                    store.indexes = indexes;
                    std::mem::replace(&mut store.objects, listed)
                };
                for object in self.read_store().objects.values() {
                    self.saw(object);
                }
                // Deliver in namespace/name order: the store's order is arbitrary.
                let after = self.state_sorted();
                for object in &after {
                    match before.remove(&key_of(object)) {
                        None => self.dispatch_to(&sinks, EventKind::Create, object, None, received),
                        Some(old) if old.resource_version() != object.resource_version() => {
                            self.dispatch_to(
                                &sinks,
                                EventKind::Update,
                                object,
                                Some(&old),
                                received,
                            );
                        }
                        Some(_) => {}
                    }
                }
                let mut gone: Vec<_> = before.into_values().collect();
                gone.sort_by_key(|o| key_of(o));
                for object in &gone {
                    self.dispatch_to(&sinks, EventKind::Delete, object, None, received);
                }
                self.synced.send_replace(true);
                drop(sinks);
                // The list's pages and the store it replaced are freed: give that memory back
                // (an idle host allocates too little to have its allocator do so by itself).
                crate::process::memory::release_soon();
            }
        }
    }

    fn read_store(&self) -> std::sync::RwLockReadGuard<'_, ObjectStore> {
        self.store.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_store(&self) -> std::sync::RwLockWriteGuard<'_, ObjectStore> {
        self.store.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every cached object.
    fn state(&self) -> Vec<Arc<CachedObject>> {
        self.read_store().objects.values().cloned().collect()
    }

    /// Every cached object, in namespace/name order.
    fn state_sorted(&self) -> Vec<Arc<CachedObject>> {
        let mut objects = self.state();
        objects.sort_by_key(|o| key_of(o));
        objects
    }

    /// The store key of `namespace`/`name`: no namespace for a cluster-scoped kind.
    fn key(&self, namespace: Option<&str>, name: &str) -> ObjectKey {
        ObjectKey::new(namespace.filter(|_| self.resolved.namespaced), name)
    }
}

/// An `Api` of `resource` in `namespace` (`None`: all namespaces).
fn scoped<K>(
    client: kube::Client,
    namespace: Option<&str>,
    resource: &kube::core::ApiResource,
) -> Api<K>
where
    K: kube::Resource<
            DynamicType = kube::core::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, resource),
        None => Api::all_with(client, resource),
    }
}

/// The informer's task: watch, store, index, dispatch; errors are logged and the watch is
/// retried with the watcher's default backoff.
async fn run(api: Arc<ApiClient>, informer: Arc<Informer>) {
    let resource = &informer.resolved.resource;
    let client = api.client().clone();
    let namespace = informer.namespace.as_deref();
    let mut stream = match informer.content {
        Content::Objects => watcher(
            scoped::<CachedObject>(client, namespace, resource),
            watcher::Config::default(),
        )
        .default_backoff()
        .boxed(),
        Content::Metadata => {
            // `PartialObjectMetadata`: what guests reading the kind get.
            let partial = scoped::<PartialObjectMeta<CachedObject>>(client, namespace, resource);
            watcher(partial, watcher::Config::default())
                .default_backoff()
                .map(move |event| {
                    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
                    let cached = |partial: PartialObjectMeta<CachedObject>| {
                        CachedObject::of_metadata(partial.metadata)
                    };
                    event.map(|event| match event {
                        Apply(o) => Apply(cached(o)),
                        Delete(o) => Delete(cached(o)),
                        InitApply(o) => InitApply(cached(o)),
                        Init => Init,
                        InitDone => InitDone,
                    })
                })
                .boxed()
        }
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => informer.apply(event),
            Err(err) => tracing::warn!("watch of {} failed, retrying: {err}", informer.describe()),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;

    /// Records what the informer delivers as `kind name rv (old rv)`.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl EventSink for Recorder {
        fn on_event(&self, _gvk: &Gvk, event: &Event<'_>) {
            let rv = |o: &ObjectMeta| o.resource_version.clone().unwrap_or_default();
            let line = format!(
                "{:?} {} {}{}",
                event.kind,
                event.object.name.as_deref().unwrap_or(""),
                rv(event.object),
                event
                    .old
                    .map(|o| format!(" (was {})", rv(o)))
                    .unwrap_or_default()
            );
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
        }
    }

    fn informer() -> Arc<Informer> {
        let informer = Informer::standing(Gvk::new("", "v1", "Pod"), None, 0);
        informer.synced.send_replace(false);
        informer
    }

    fn pod(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> CachedObject {
        let mut value = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv,
                "labels": {"app": name}}});
        if let Some(uid) = owner {
            value["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}]);
        }
        serde_json::from_value(value).expect("pod")
    }

    #[tokio::test(start_paused = true)]
    async fn the_store_should_say_which_version_it_reflects() {
        let informer = informer();
        assert_eq!(informer.seen_version(), 0);
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "p1", "5", None)),
            watcher::Event::InitApply(pod("a", "p2", "3", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        assert_eq!(informer.seen_version(), 5, "the listed objects' highest");
        // A write answered with version 7 is not in yet: a read waits, at most its bound.
        let waiting = {
            let informer = informer.clone();
            tokio::spawn(async move { informer.wait_for_version(7, Duration::from_secs(1)).await })
        };
        tokio::task::yield_now().await;
        informer.apply(watcher::Event::Apply(pod("a", "p1", "6", None)));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "6 is not 7");
        informer.apply(watcher::Event::Delete(pod("a", "p2", "7", None)));
        assert!(
            waiting.await.expect("task"),
            "a deletion's version counts too"
        );
        assert!(
            !informer
                .wait_for_version(9, Duration::from_millis(50))
                .await,
            "bounded"
        );
        // Older events (a relist's unchanged objects) never lower it.
        informer.apply(watcher::Event::Apply(pod("a", "p3", "2", None)));
        assert_eq!(informer.seen_version(), 7);
    }

    fn names(values: &[Value]) -> Vec<&str> {
        values
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap_or(""))
            .collect()
    }

    #[test]
    fn changes_and_relists_should_reach_subscribers_as_creates_updates_and_deletes() {
        let informer = informer();
        let recorder = Arc::new(Recorder::default());
        informer.subscribe(recorder.clone());
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "p1", "1", Some("u1"))),
            watcher::Event::InitApply(pod("b", "p2", "2", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        assert!(informer.is_synced());
        assert_eq!(recorder.take(), ["Create p1 1", "Create p2 2"]);

        informer.apply(watcher::Event::Apply(pod("a", "p1", "3", None)));
        informer.apply(watcher::Event::Apply(pod("a", "p3", "4", Some("u1"))));
        informer.apply(watcher::Event::Delete(pod("b", "p2", "5", None)));
        assert_eq!(
            recorder.take(),
            ["Update p1 3 (was 1)", "Create p3 4", "Delete p2 5"]
        );
        // The indexes follow: p1 lost its owner, p3 gained it; namespace b is empty.
        assert_eq!(names(&informer.controlled_by("u1")), ["p3"]);
        assert_eq!(names(&informer.list(Some("a"), None, None)), ["p1", "p3"]);
        assert!(informer.list(Some("b"), None, None).is_empty());

        // A relist after a broken watch: p1 unchanged, p3 changed, p4 new, and p2... gone
        // already; p1 disappears instead. Only the differences are delivered.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "p3", "7", Some("u1"))),
            watcher::Event::InitApply(pod("b", "p4", "8", Some("u1"))),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        assert_eq!(
            recorder.take(),
            ["Update p3 7 (was 4)", "Create p4 8", "Delete p1 3"]
        );
        let owned_objects = informer.controlled_by("u1");
        let mut owned = names(&owned_objects);
        owned.sort();
        assert_eq!(owned, ["p3", "p4"]);
        assert_eq!(informer.len(), 2);
    }

    #[test]
    fn reads_should_filter_by_namespace_labels_and_fields() {
        let informer = informer();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "x", "1", None)),
            watcher::Event::InitApply(pod("a", "y", "2", None)),
            watcher::Event::InitApply(pod("b", "x", "3", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        let x = LabelSelector::parse("app=x").expect("selector");
        let in_b = FieldSelector::parse("metadata.namespace=b").expect("selector");
        assert_eq!(names(&informer.list(None, Some(&x), None)), ["x", "x"]);
        assert_eq!(names(&informer.list(Some("a"), Some(&x), None)), ["x"]);
        assert_eq!(
            informer.list(None, None, Some(&in_b))[0]["metadata"]["namespace"],
            "b"
        );
        let got = informer.get(Some("a"), "y").expect("cached");
        assert_eq!(got["kind"], "Pod");
        assert_eq!(got["apiVersion"], "v1");
        assert!(informer.get(Some("b"), "y").is_none());
    }

    #[test]
    fn a_late_subscriber_should_first_get_every_cached_object() {
        let informer = informer();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "x", "1", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        let late = Arc::new(Recorder::default());
        informer.subscribe(late.clone());
        assert_eq!(late.take(), ["Create x 1"]);
        assert_eq!(informer.subscribers(), 1);
        let sink: Arc<dyn EventSink> = late.clone();
        informer.unsubscribe(&sink);
        assert_eq!(informer.subscribers(), 0);
    }
}
