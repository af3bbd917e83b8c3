//! Controllers: one per guest, turning watch events into reconcile requests and running the
//! guest on them.
//!
//! [`handlers`] maps events on the `for`, `owns` and `watches` kinds of a manifest to requests
//! and applies its predicates. A [`Controller`] puts those requests in its
//! [`WorkQueue`], runs `maxConcurrentReconciles` workers that take them out and reconcile them
//! in the guest, and acts on each result as controller-runtime does:
//!
//! | result | queue |
//! |---|---|
//! | done | `forget` (backoff reset) |
//! | requeue | `add_rate_limited` |
//! | requeue-after(d) | `forget`, then `add_after(d)` |
//! | error or trap | `add_rate_limited`, logged and counted |
//!
//! Generic sources feed the same queue: each manifest ticker, the resync period (every cached
//! object of the `for` kind), and [`Controller::trigger`], the manual trigger.
//!
//! # Hot-swap
//!
//! What a guest runs — module, manifest, handlers, cluster access — is one [`Version`],
//! replaced atomically by [`Controller::swap`]. The queue, its backoff state and the counters
//! belong to the controller and survive swaps. A worker picks up the current version when it
//! takes its next key, so reconciles already running finish on the old version and no key is
//! ever reconciled by two versions at once (the queue hands a key to one worker at a time).

pub mod handlers;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

pub use handlers::{Event, Handlers, Request};

use crate::cache::{EventSink, Informer};
use crate::cluster::{ClusterAccess, Gvk};
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError, TrapCause};
use crate::queue::{RateLimit, WorkQueue};

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Counters of one controller's reconciles.
#[derive(Debug, Default)]
pub struct Stats {
    /// Reconciles that returned `done`.
    pub done: AtomicU64,
    /// Reconciles that returned `requeue` or `requeue-after`.
    pub requeued: AtomicU64,
    /// Reconciles that returned an error.
    pub errors: AtomicU64,
    /// Reconciles that trapped.
    pub traps: AtomicU64,
    /// Times a key was handed to a worker while another worker was reconciling it. The
    /// workqueue guarantees this stays zero; it is counted, not assumed.
    pub overlaps: AtomicU64,
    active: Mutex<HashSet<Request>>,
    traps_by_cause: Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl Stats {
    /// All reconciles so far, whatever their result.
    pub fn total(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
            + self.requeued.load(Ordering::Relaxed)
            + self.errors.load(Ordering::Relaxed)
            + self.traps.load(Ordering::Relaxed)
    }

    /// Keys being reconciled right now.
    pub fn active(&self) -> usize {
        self.active.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Traps so far, by cause (`timeout`, `out_of_memory`, `panic`, ...).
    pub fn traps_by_cause(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.traps_by_cause
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn count_trap(&self, cause: TrapCause) {
        *self
            .traps_by_cause
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(cause.as_str())
            .or_insert(0) += 1;
    }

    fn begin(&self, request: &Request) {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if !active.insert(request.clone()) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn end(&self, request: &Request) {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(request);
    }
}

/// What a guest runs: one module and manifest, and what follows from them.
pub struct Version {
    /// The compiled module (its manifest inside).
    pub module: Arc<GuestModule>,
    /// Where its host calls go.
    pub cluster: Arc<dyn ClusterAccess>,
    /// Its event handlers.
    pub handlers: Handlers,
    /// 1 for the first version of a guest, then counting swaps.
    pub number: u64,
    /// When it was installed.
    pub installed: Instant,
    first_reconcile: OnceLock<Instant>,
}

impl Version {
    /// A version of `module` whose host calls go to `cluster`.
    pub fn new(module: Arc<GuestModule>, cluster: Arc<dyn ClusterAccess>) -> Self {
        Version {
            handlers: Handlers::from_manifest(module.manifest()),
            module,
            cluster,
            number: 1,
            installed: Instant::now(),
            first_reconcile: OnceLock::new(),
        }
    }

    /// When its first reconcile started, if one has.
    pub fn first_reconcile(&self) -> Option<Instant> {
        self.first_reconcile.get().copied()
    }

    /// How long after it was installed its first reconcile started, if one has.
    pub fn time_to_first_reconcile(&self) -> Option<Duration> {
        self.first_reconcile
            .get()
            .map(|t| t.saturating_duration_since(self.installed))
    }
}

fn rate_limit_of(module: &GuestModule) -> RateLimit {
    let rate = &module.manifest().spec.rate_limiter;
    RateLimit {
        base_delay: rate.base_delay,
        max_delay: rate.max_delay,
        qps: rate.qps,
        burst: rate.burst,
    }
}

/// A guest's controller: handlers, workqueue, workers and generic sources.
pub struct Controller {
    name: String,
    version: ArcSwap<Version>,
    queue: Arc<WorkQueue<Request>>,
    stats: Arc<Stats>,
    /// Workers wanted (`maxConcurrentReconciles`); workers with a higher index stop.
    workers_wanted: AtomicUsize,
    workers: Mutex<Vec<JoinHandle<()>>>,
    sources: Mutex<Vec<JoinHandle<()>>>,
    for_informers: Mutex<Vec<Arc<Informer>>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("guest", &self.name)
            .finish_non_exhaustive()
    }
}

impl EventSink for Controller {
    fn on_event(&self, gvk: &Gvk, event: &Event<'_>) {
        for request in self.version.load().handlers.requests(gvk, event) {
            self.queue.add(request);
        }
    }
}

impl Controller {
    /// A controller for `module`, whose host calls go to `cluster`. Nothing runs until
    /// [`start`](Self::start).
    pub fn new(module: Arc<GuestModule>, cluster: Arc<dyn ClusterAccess>) -> Arc<Self> {
        let queue = WorkQueue::new(rate_limit_of(&module));
        Arc::new(Controller {
            name: module.name().to_owned(),
            version: ArcSwap::from_pointee(Version::new(module, cluster)),
            queue: Arc::new(queue),
            stats: Arc::new(Stats::default()),
            workers_wanted: AtomicUsize::new(0),
            workers: Mutex::new(Vec::new()),
            sources: Mutex::new(Vec::new()),
            for_informers: Mutex::new(Vec::new()),
        })
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version running now.
    pub fn version(&self) -> Arc<Version> {
        self.version.load_full()
    }

    /// The guest's module (of the current version).
    pub fn module(&self) -> Arc<GuestModule> {
        self.version.load().module.clone()
    }

    /// The event handlers (of the current version).
    pub fn handlers(&self) -> Handlers {
        self.version.load().handlers.clone()
    }

    /// The workqueue.
    pub fn queue(&self) -> &Arc<WorkQueue<Request>> {
        &self.queue
    }

    /// Reconcile counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The manual trigger: enqueue `request` as a generic event.
    pub fn trigger(&self, request: Request) {
        self.queue.add(request);
    }

    /// Start the workers and the generic sources (tickers, and resync over `for_informers`,
    /// the informers of the `for` kind). Call once the caches have synced.
    pub fn start(self: &Arc<Self>, for_informers: Vec<Arc<Informer>>) {
        *self.for_informers.lock().unwrap_or_else(|e| e.into_inner()) = for_informers;
        self.scale_workers();
        self.restart_sources();
    }

    /// Install `module` (with `cluster`) as the new version. Running reconciles finish on the
    /// old one; every later reconcile runs the new one. The queue and its backoff state stay;
    /// worker count, rate limits, tickers and resync follow the new manifest.
    pub fn swap(
        self: &Arc<Self>,
        module: Arc<GuestModule>,
        cluster: Arc<dyn ClusterAccess>,
        for_informers: Vec<Arc<Informer>>,
    ) -> Arc<Version> {
        self.queue.set_rate_limit(rate_limit_of(&module));
        let mut version = Version::new(module, cluster);
        version.number = self.version.load().number + 1;
        let version = Arc::new(version);
        self.version.store(version.clone());
        *self.for_informers.lock().unwrap_or_else(|e| e.into_inner()) = for_informers;
        self.scale_workers();
        self.restart_sources();
        version
    }

    /// Spawn or retire workers to match the current manifest's `maxConcurrentReconciles`.
    fn scale_workers(self: &Arc<Self>) {
        let concurrency = self
            .version
            .load()
            .module
            .manifest()
            .spec
            .max_concurrent_reconciles;
        let wanted = usize::try_from(concurrency.max(1)).unwrap_or(1);
        self.workers_wanted.store(wanted, Ordering::SeqCst);
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        workers.retain(|w| !w.is_finished());
        for index in workers.len()..wanted {
            workers.push(tokio::spawn(self.clone().work(index)));
        }
    }

    /// (Re)start the tickers and the resync of the current manifest.
    fn restart_sources(&self) {
        let spec = self.version.load().module.manifest().spec.clone();
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        for task in sources.drain(..) {
            task.abort();
        }
        for ticker in &spec.tickers {
            let request = Request::new(ticker.request.namespace.as_deref(), &ticker.request.name);
            let queue = self.queue.clone();
            let every = ticker.every;
            // A ticker fires when the guest starts, then every period.
            sources.push(tokio::spawn(async move {
                let mut interval = tokio::time::interval(every);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    queue.add(request.clone());
                }
            }));
        }
        if let Some(period) = spec.resync_period {
            let queue = self.queue.clone();
            let for_informers = self
                .for_informers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            sources.push(tokio::spawn(async move {
                let start = tokio::time::Instant::now() + period;
                let mut interval = tokio::time::interval_at(start, period);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    interval.tick().await;
                    for informer in &for_informers {
                        for object in informer.list(None, None, None) {
                            let meta = |f: &str| {
                                object
                                    .get("metadata")
                                    .and_then(|m| m.get(f))
                                    .and_then(|v| v.as_str())
                            };
                            if let Some(name) = meta("name") {
                                queue.add(Request::new(meta("namespace"), name));
                            }
                        }
                    }
                }
            }));
        }
    }

    /// Worker `index`: take a key, reconcile it on the current version, act on the result;
    /// until shutdown, or until fewer workers are wanted.
    async fn work(self: Arc<Self>, index: usize) {
        let mut worker: Option<GuestWorker> = None;
        while index < self.workers_wanted.load(Ordering::SeqCst) {
            let Some(request) = self.queue.get().await else {
                break;
            };
            let version = self.version.load_full();
            let current = worker
                .as_ref()
                .is_some_and(|w| Arc::ptr_eq(w.module(), &version.module));
            if !current {
                // A new version: the old instance is dropped with the old worker.
                worker = Some(GuestWorker::new(
                    version.module.clone(),
                    version.cluster.clone(),
                ));
            }
            let Some(guest) = worker.as_mut() else {
                break;
            };
            self.stats.begin(&request);
            let started = Instant::now();
            let _ = version.first_reconcile.set(started);
            let result = guest
                .reconcile(request.namespace.as_deref(), &request.name)
                .await;
            self.stats.end(&request);
            self.finish(&request, result, started.elapsed());
            self.queue.done(&request);
        }
    }

    fn finish(&self, request: &Request, result: Result<Action, ReconcileError>, took: Duration) {
        let guest = self.name();
        let ms = took.as_secs_f64() * 1000.0;
        match result {
            Ok(Action::Done) => {
                self.stats.done.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(request);
                tracing::debug!(target: "krec::reconcile", "{guest}: reconciled {request}: done ({ms:.1} ms)");
            }
            Ok(Action::Requeue) => {
                self.stats.requeued.fetch_add(1, Ordering::Relaxed);
                self.queue.add_rate_limited(request.clone());
                tracing::debug!(target: "krec::reconcile", "{guest}: reconciled {request}: requeue ({ms:.1} ms)");
            }
            Ok(Action::RequeueAfter(after)) => {
                self.stats.requeued.fetch_add(1, Ordering::Relaxed);
                self.queue.forget(request);
                self.queue.add_after(request.clone(), after);
                tracing::debug!(target: "krec::reconcile", "{guest}: reconciled {request}: requeue after {after:?} ({ms:.1} ms)");
            }
            Err(err) => {
                match &err {
                    ReconcileError::Trap { cause, .. } => {
                        self.stats.traps.fetch_add(1, Ordering::Relaxed);
                        self.stats.count_trap(*cause);
                    }
                    ReconcileError::Guest { .. } => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                self.queue.add_rate_limited(request.clone());
                let retries = self.queue.num_requeues(request);
                tracing::warn!(target: "krec::reconcile", "{err} ({ms:.1} ms); retry {retries} with backoff");
            }
        }
    }

    /// Stop: no new keys, wait (at most `timeout`) for running reconciles to finish, stop the
    /// workers and sources.
    pub async fn shutdown(&self, timeout: Duration) {
        self.queue.shutdown();
        for task in self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
        if tokio::time::timeout(timeout, self.queue.drained())
            .await
            .is_err()
        {
            tracing::warn!(
                "{}: reconciles still running after {timeout:?}; abandoning them",
                self.name()
            );
        }
        for task in self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}
