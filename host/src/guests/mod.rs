//! The guest set — [`Manager`]: the running guests over one shared cache — started from a manifest
//! set, and changed live by [`reload`](Manager::reload) when manifests or modules change.
//!
//! Each guest is a [`Controller`] wired to the informers of the kinds it watches; its workers
//! start once those caches have synced. One bad guest (a module that does not load, a kind the
//! server does not serve) is reported with its name and skipped; the others run.
//!
//! # Reload and hot-swap
//!
//! [`reload`](Manager::reload) compares a manifest directory with what runs:
//!
//! - a new manifest starts its guest without disturbing the others;
//! - a changed manifest or module is compiled and validated off the hot path (a blocking
//!   thread; the module cache makes a swap back to a known version cheap) and instantiated
//!   once, then swapped in atomically ([`Controller::swap`]): running reconciles finish on the
//!   old version, queued keys and backoff state carry over, changed `for` / `owns` / `watches`
//!   take effect (new watches start, unneeded ones stop), and every watched object is
//!   enqueued again so the new version reconciles the whole state, as a restart would;
//! - a module that fails to load, does not implement the world or traps on instantiation is
//!   rejected with a clear error and the old version keeps running; so does a guest whose
//!   manifest became invalid;
//! - a removed manifest stops its guest (running reconciles finish) and releases the watches no
//!   other guest needs.
//!
//! [`watch`](Manager::watch) runs `reload` when files in the manifest directory or the module
//! files change (debounced), and on SIGHUP.
//!
//! The wing's rooms: `running` holds the set's records; `load` loads a version; `lifecycle`
//! starts, swaps and removes guests; `reload` compares what is wanted with what runs (the
//! host's start is the first reload); `pull` fetches modules from registries; `triggers` says
//! when to reload; `report` says what became of each guest.

mod fingerprint;
pub mod from_cluster;
mod lifecycle;
mod load;
pub mod oci;
pub mod overview;
mod pull;
mod reload;
mod report;
mod running;
pub mod status;
pub mod tenure;
mod triggers;

pub use lifecycle::reconciles;
pub use load::{LOADS_AT_ONCE, TENANT_LOADS_AT_ONCE};
pub use pull::{PULL_DEADLINE, START_PULL_WAIT};
pub use reload::{FULL_WAIT, LOOP_WAIT};
pub use report::{ReloadReport, Skipped, StartError};
pub use triggers::{
    FIRST_RELOAD_RETRY, MAX_RELOAD_RETRY, PERMISSION_RECHECK, POLL_WITHOUT_EVENTS, RELOAD_DEBOUNCE,
    Watcher,
};

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::cluster::cache::Cache;
use crate::controller::Controller;
use crate::guest::{CpuGovernor, Engines, MemoryPool, ModuleCache, Runner};
use crate::guests::from_cluster::{FromCluster, Generations, ObjectSource};
use crate::manifest::Manifest;
use crate::process::metrics::{GuestLabel, Metrics};
use running::{Guest, Loading, PullTask};

/// A guest's current version as the admission server runs it ([`Manager::reviewer`]).
#[derive(Clone)]
pub struct Reviewer {
    /// The compiled module, its manifest inside.
    pub module: Arc<crate::guest::GuestModule>,
    /// Where its reads during a review go.
    pub cluster: Arc<dyn crate::cluster::ClusterAccess>,
}

/// How long [`Manager::shutdown`] waits for running reconciles by default.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Running guests over one shared cache. Cheap to clone; clones share the guests.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

/// How a [`Manager`] runs.
#[derive(Clone, Debug, Default)]
pub struct ManagerOptions {
    /// Where compiled modules are kept.
    pub module_cache: ModuleCache,
    /// Workers reconcile only while this is `true` (leader election); `None`: always.
    pub gate: Option<tokio::sync::watch::Receiver<bool>>,
    /// Guests sharded across replicas: each guest runs only while its tenure is granted (its
    /// own gate, and a fence on its writes); overrides `gate`.
    pub tenures: Option<Arc<crate::guests::tenure::Tenures>>,
    /// Where to record metrics; `None`: a registry of the manager's own.
    pub metrics: Option<Arc<Metrics>>,
    /// Code compiled into the host, by guest name: a guest named here runs its [`Runner`]
    /// reconciler in place of the module its manifest names, with the same cache, queue, client
    /// and permission checks. No sandbox (see [`Runner`]): for benchmarks and tests.
    pub runners: BTreeMap<String, Arc<dyn Runner>>,
    /// Most linear memory all guests' instances hold together, in bytes; `None`:
    /// [`crate::process::memory::default_guest_memory`].
    pub guest_memory: Option<u64>,
    /// Also run the guests of the cluster's `Reconciler` and `ClusterReconciler` objects
    /// (see [`crate::guests::from_cluster`]); `None`: only those of the manifests given.
    pub from_cluster: Option<FromCluster>,
    /// Where modules named `oci://…` are pulled from and kept; `None`: a store of this
    /// process's own, every registry over HTTPS.
    pub registries: Option<Arc<crate::guests::oci::Registries>>,
    /// How long a worker keeps its guest's instance with no key to reconcile before it gives it
    /// back; `None`: [`crate::controller::IDLE_INSTANCE`].
    pub instance_idle: Option<Duration>,
    /// The compiler guests are compiled with (`krec dev`: Winch).
    pub compiler: crate::guest::engine::Compiler,
    /// Look at the watched manifest and module files this often instead of waiting for the
    /// file system's events (`--poll-files`: file systems that send none, such as NFS or WSL's
    /// Windows drives); `None`: events, or every [`POLL_WITHOUT_EVENTS`] where the platform's
    /// watcher cannot start.
    pub poll_files: Option<Duration>,
}

struct Inner {
    metrics: Arc<Metrics>,
    /// [`ManagerOptions::poll_files`].
    poll_files: Option<Duration>,
    /// How long an idle worker keeps its instance.
    instance_idle: Duration,
    gate: tokio::sync::watch::Receiver<bool>,
    /// Keeps the always-open gate's channel alive when there is no leader election.
    _open: Option<tokio::sync::watch::Sender<bool>>,
    tenures: Option<Arc<crate::guests::tenure::Tenures>>,
    engines: Engines,
    module_cache: ModuleCache,
    runners: BTreeMap<String, Arc<dyn Runner>>,
    /// Shares the host's CPU between its guests.
    governor: Arc<CpuGovernor>,
    /// Bounds the linear memory of all guests' instances together.
    host_memory: Arc<MemoryPool>,
    cache: Arc<Cache>,
    /// The guests; the lock also serialises reloads.
    guests: tokio::sync::Mutex<BTreeMap<String, Guest>>,
    /// The controllers, readable without waiting for a reload to finish.
    controllers: RwLock<BTreeMap<String, Arc<Controller>>>,
    /// Counts changes of [`controllers`](Self::controllers) (guests started, swapped, removed).
    changes: tokio::sync::watch::Sender<u64>,
    skipped: RwLock<Vec<Skipped>>,
    /// The manifests refused because the host may not do what they ask: checked again every
    /// [`PERMISSION_RECHECK`], so that the RBAC that allows one starts it within seconds.
    permission_refused: RwLock<Vec<Arc<Manifest>>>,
    /// The cluster's guest objects, with `--from-cluster`.
    objects: Option<ObjectSource>,
    /// What the guest objects were when the running set was last brought in line with them:
    /// each one's `observedGeneration`.
    applied: RwLock<Generations>,
    /// The manifest and module files the guests were last loaded from, as they were just
    /// before they were read: a watch starting later takes up what changed since.
    loaded_files: std::sync::Mutex<fingerprint::Fingerprint>,
    /// Modules from registries.
    registries: Arc<crate::guests::oci::Registries>,
    /// Pulls from slow registries going on in the background, by guest and reference
    /// ([`LOOP_WAIT`]).
    pulling: std::sync::Mutex<HashMap<String, PullTask>>,
    /// Versions loading in the background, by guest name ([`LOOP_WAIT`]).
    loading: std::sync::Mutex<HashMap<String, Loading>>,
    /// Counts the background loads that ended: the watch loop reloads to take them up.
    loads_done: tokio::sync::watch::Sender<u64>,
    /// Each tenant's bound on its loads at once ([`TENANT_LOADS_AT_ONCE`]).
    tenant_loads: std::sync::Mutex<HashMap<Option<String>, Arc<tokio::sync::Semaphore>>>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("guests", &self.controllers().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Manager {
    fn publish(&self, guests: &BTreeMap<String, Guest>) {
        *self
            .inner
            .controllers
            .write()
            .unwrap_or_else(|e| e.into_inner()) = guests
            .iter()
            .map(|(name, g)| (name.clone(), g.controller.clone()))
            .collect();
        self.inner.changes.send_modify(|n| *n += 1);
    }

    /// Wakes when the running guests may have changed (a guest started, stopped or swapped to a
    /// new version: after every reload), e.g. to register the webhooks of the guests running now.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// The generation of guest object `reference` the running set was last brought in line
    /// with (its status's `observedGeneration`), if it was.
    pub fn observed_generation(
        &self,
        reference: &crate::guests::from_cluster::ObjectRef,
    ) -> Option<i64> {
        let applied = self.inner.applied.read().unwrap_or_else(|e| e.into_inner());
        applied.get(reference).map(|(_, generation)| *generation)
    }

    /// Whether this replica runs `guest`'s workers now: it holds the guest's Lease (sharding),
    /// leads (leader election), or always (neither).
    pub fn holds(&self, guest: &str) -> bool {
        match &self.inner.tenures {
            Some(tenures) => tenures.is_running(guest),
            None => *self.inner.gate.borrow(),
        }
    }

    /// Whether this replica takes part in reconciling at all now: with leader election, only
    /// the leader does; sharded or not, every replica does.
    pub fn is_active(&self) -> bool {
        self.inner.tenures.is_some() || *self.inner.gate.borrow()
    }

    /// The fence of `guest`'s writes under sharding (`None`: writes are not fenced).
    pub fn fence(&self, guest: &str) -> Option<Arc<crate::cluster::fence::Fence>> {
        self.inner.tenures.as_ref().map(|t| t.fence(guest))
    }

    /// What the guest objects were at the last scan (empty without
    /// [`from_cluster`](ManagerOptions::from_cluster)).
    fn generations(&self) -> Generations {
        self.inner
            .objects
            .as_ref()
            .map(ObjectSource::generations)
            .unwrap_or_default()
    }

    /// The cluster's guest objects, with [`from_cluster`](ManagerOptions::from_cluster).
    pub fn objects(&self) -> Option<&ObjectSource> {
        self.inner.objects.as_ref()
    }

    /// What an admission review of guest `name` runs: its current version's module and cluster
    /// access (`None`: no guest of that name runs here). A swap changes the next review's.
    pub fn reviewer(&self, name: &str) -> Option<Reviewer> {
        let version = self.controller(name)?.version();
        Some(Reviewer {
            module: version.module.clone(),
            cluster: version.cluster.clone(),
        })
    }

    /// The running guest named `name`.
    pub fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        self.inner
            .controllers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Every running guest, by name.
    pub fn controllers(&self) -> BTreeMap<String, Arc<Controller>> {
        self.inner
            .controllers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the last start or reload refused (guests not running, or still running an older
    /// version), and why.
    pub fn skipped(&self) -> Vec<Skipped> {
        self.inner
            .skipped
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The versions left loading in the background by a reload that stopped waiting for them,
    /// by guest name, each with whether its load has ended (and waits to be taken up by the
    /// reload its end starts).
    pub fn background_loads(&self) -> BTreeMap<String, bool> {
        self.inner
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, loading)| (name.clone(), loading.task.is_finished()))
            .collect()
    }

    /// The metrics of every guest.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// The metrics text, with the scrape-time series brought up to date.
    pub fn scrape(&self) -> String {
        let controllers = self.controllers();
        for controller in controllers.values() {
            controller.refresh_metrics();
        }
        self.refresh_ready(&controllers);
        self.inner.metrics.encode()
    }

    /// The guests whose versions are loading in the background.
    fn loading_names(&self) -> Vec<String> {
        self.inner
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// `krec_guest_ready`: 1 for each guest running, 0 for each refused or still loading (a
    /// refused new version of a running guest leaves it running: 1).
    fn refresh_ready(&self, running: &BTreeMap<String, Arc<Controller>>) {
        let ready = &self.inner.metrics.guest_ready;
        let loading = self.loading_names();
        let waiting = self
            .skipped()
            .into_iter()
            .map(|s| s.guest)
            .chain(loading)
            .filter(|name| !running.contains_key(name));
        let mut values: BTreeMap<String, i64> = waiting.map(|name| (name, 0)).collect();
        values.extend(running.keys().map(|name| (name.clone(), 1)));
        ready.clear();
        for (guest, value) in values {
            ready.get_or_create(&GuestLabel { guest }).set(value);
        }
    }

    /// The shared cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.inner.cache
    }

    /// Stop every guest (running reconciles get up to `timeout` to finish), then the watches.
    pub async fn shutdown(self, timeout: Duration) {
        for (_, loading) in self
            .inner
            .loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            loading.task.abort();
        }
        let mut guests = self.inner.guests.lock().await;
        let stops = guests.values().map(|g| g.controller.shutdown(timeout));
        futures::future::join_all(stops).await;
        guests.clear();
        self.inner.cache.stop();
    }
}
