//! The shared informer cache: one kube [`watcher`](mod@kube::runtime::watcher) and one store per (kind, namespace scope),
//! shared by every guest that needs that kind.
//!
//! An [`Informer`] keeps the store (each object as a [`CachedObject`]: its JSON text and parsed
//! metadata), indexes by namespace and by controller owner UID, and passes
//! each change to its subscribers ([`EventSink`]s, the guests' controllers) as a create, update
//! or delete with the previous state, the way client-go's shared informers feed event handlers.
//! A watch that breaks is resumed by the watcher; when it has to relist, the new list is compared
//! with the old store and the differences are delivered as events, so no change is lost.
//!
//! # Guarantees
//!
//! - Two guests watching one kind in one scope share one watch: [`Cache::informer`] returns
//!   the running informer.
//! - A subscriber added after the informer synced first gets every cached object as a create
//!   (like `AddEventHandler` on a running informer).
//! - Reads see the store after every event delivered so far; writes never go through the cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod informer;
mod object;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::client::ApiClient;
use krec_core::EventKind;
use krec_core::{CallError, Gvk};

pub use informer::Informer;
pub use object::CachedObject;

/// Longest a read waits for a lazily started informer to sync before giving up.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`Informer::wait_synced`] waits before it warns that a cache is still syncing.
pub const SYNC_PATIENCE: Duration = Duration::from_secs(10);

/// One watch event as an informer tells its subscribers, and as the handlers see it: handlers and predicates look at an object's
/// metadata only; a guest's map function gets the whole object's JSON.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The object's metadata (for a delete: its last state).
    pub object: &'a ObjectMeta,
    /// For an update: the previous state's metadata.
    pub old: Option<&'a ObjectMeta>,
    /// The object as the cache holds it (its JSON text, written only when asked for), when
    /// the source has it.
    pub cached: Option<&'a CachedObject>,
    /// For an update: the previous state as the cache held it, when the source has it.
    pub old_cached: Option<&'a CachedObject>,
    /// When the informer received the change (for `krec_event_stage_seconds{stage="handler"}`).
    pub received: std::time::Instant,
}

/// Receives an informer's changes. Called on the informer's task: keep it quick (enqueue).
pub trait EventSink: Send + Sync {
    /// An object of kind `gvk` changed.
    fn on_event(&self, gvk: &Gvk, event: &Event<'_>);
}

/// What an informer holds of each object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Content {
    /// The whole object (without `managedFields`).
    #[default]
    Objects,
    /// `apiVersion`, `kind` and `metadata` alone, watched as `PartialObjectMetadata` (as
    /// client-go's metadata informers and kube-rs's `metadata_watcher` watch): for kinds a guest
    /// only owns or maps, a fraction of the memory and of the watch's traffic.
    Metadata,
}

/// Key of an informer: the kind, the namespace scope (`None`: all namespaces) and what it
/// holds of each object.
type Scope = (Gvk, Option<String>, Content);

/// A guest's use of a shared informer: the informer watches while any use of it is held, and
/// dropping the last one stops its watch and removes it from the cache. Events reach a guest
/// only through its [subscription](Informer::subscribe), which is separate.
pub struct InformerUse {
    informer: Arc<Informer>,
    cache: std::sync::Weak<Cache>,
    user: String,
}

impl InformerUse {
    /// A new use of `informer` by `user`; called with the cache's lock held.
    fn new(cache: &Arc<Cache>, informer: Arc<Informer>, user: &str) -> Self {
        informer.add_user(user);
        InformerUse {
            informer,
            cache: Arc::downgrade(cache),
            user: user.to_owned(),
        }
    }

    /// The informer.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl std::ops::Deref for InformerUse {
    type Target = Arc<Informer>;

    fn deref(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl std::fmt::Debug for InformerUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerUse")
            .field("informer", &self.informer.describe())
            .field("user", &self.user)
            .finish()
    }
}

impl Drop for InformerUse {
    fn drop(&mut self) {
        let Some(cache) = self.cache.upgrade() else {
            // The cache is gone and has stopped every watch.
            self.informer.remove_user(&self.user);
            return;
        };
        // Under the cache's lock, so that no new use of this informer can be handed out
        // between the count reaching zero and the informer's removal.
        let mut informers = cache.informers.lock().unwrap_or_else(|e| e.into_inner());
        if self.informer.remove_user(&self.user) {
            return;
        }
        let key = (
            self.informer.gvk.clone(),
            self.informer.namespace.clone(),
            self.informer.content,
        );
        if informers
            .get(&key)
            .is_some_and(|i| Arc::ptr_eq(i, &self.informer))
        {
            informers.remove(&key);
        }
        drop(informers);
        tracing::debug!(
            "no guest needs {} any more: watch stopped",
            self.informer.describe()
        );
        self.informer.stop();
    }
}

/// The informers of one host, keyed by kind and namespace scope.
pub struct Cache {
    api: Arc<ApiClient>,
    informers: Mutex<HashMap<Scope, Arc<Informer>>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").finish_non_exhaustive()
    }
}

/// What one informer holds, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InformerInfo {
    /// The kind.
    pub gvk: Gvk,
    /// The namespace scope; `None` is all namespaces.
    pub namespace: Option<String>,
    /// Cached objects.
    pub objects: usize,
    /// Whether the initial list is in.
    pub synced: bool,
    /// Subscribed controllers.
    pub subscribers: usize,
    /// Guests using it (subscribed or reading through it).
    pub users: Vec<String>,
    /// What it holds of each object.
    pub content: Content,
}

impl Cache {
    /// An empty cache reading through `api`.
    pub fn new(api: Arc<ApiClient>) -> Arc<Self> {
        Arc::new(Cache {
            api,
            informers: Mutex::new(HashMap::new()),
        })
    }

    /// The API client the informers watch through.
    pub fn api(&self) -> &Arc<ApiClient> {
        &self.api
    }

    /// A use of the informer of `gvk` in `namespace` (`None`: all namespaces) holding
    /// `content` of each object, on behalf of the guest `user`, started if none runs yet. A
    /// cluster-scoped kind is always watched cluster-wide. The informer runs while any
    /// [`InformerUse`] of it is held: dropping the last one stops its watch. An informer of
    /// whole objects and one of metadata for the same kind and scope are two watches, as in
    /// controller-runtime.
    ///
    /// # Errors
    ///
    /// `not-found` when the server does not serve the kind; other discovery failures.
    pub async fn informer(
        self: &Arc<Self>,
        gvk: &Gvk,
        namespace: Option<&str>,
        content: Content,
        user: &str,
    ) -> Result<InformerUse, CallError> {
        let resolved = self.api.resolve(gvk).await?;
        let namespace = namespace.filter(|_| resolved.namespaced).map(str::to_owned);
        let key = (gvk.clone(), namespace.clone(), content);
        let mut informers = self.informers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = informers.get(&key) {
            return Ok(InformerUse::new(self, found.clone(), user));
        }
        let informer = Informer::start(self.api.clone(), gvk.clone(), namespace, content, resolved);
        tracing::debug!("watching {}", informer.describe());
        informers.insert(key, informer.clone());
        Ok(InformerUse::new(self, informer, user))
    }

    /// An informer of whole objects already running for `gvk` in exactly this scope.
    pub fn running(&self, gvk: &Gvk, namespace: Option<&str>) -> Option<Arc<Informer>> {
        self.informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(gvk.clone(), namespace.map(str::to_owned), Content::Objects))
            .cloned()
    }

    /// Every informer: kind, scope, size and sync state, sorted.
    pub fn inspect(&self) -> Vec<InformerInfo> {
        let informers = self.informers.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<InformerInfo> = informers
            .values()
            .map(|i| InformerInfo {
                gvk: i.gvk.clone(),
                namespace: i.namespace.clone(),
                objects: i.len(),
                synced: i.is_synced(),
                subscribers: i.subscribers(),
                users: i.users(),
                content: i.content,
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.gvk, &a.namespace, a.content).cmp(&(&b.gvk, &b.namespace, b.content))
        });
        out
    }

    /// Stop every watch.
    pub fn stop(&self) {
        let informers = self.informers.lock().unwrap_or_else(|e| e.into_inner());
        for informer in informers.values() {
            if let Some(task) = informer
                .task
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                task.abort();
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.stop();
    }
}
