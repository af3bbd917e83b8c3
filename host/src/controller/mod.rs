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
//! | requeue-after(0) | as done: controller-runtime ignores `RequeueAfter: 0` |
//! | requeue-after(d) | `forget`, then `add_after(max(d, MIN_REQUEUE_AFTER))` |
//! | error or trap | `add_rate_limited`, logged and counted |
//! | the [`QUARANTINE_AFTER`]th trap in a row and later ones | `add_rate_limited`, waiting at least [`QUARANTINE_DELAY`]; logged once, counted |
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
mod map_backlog;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

pub use handlers::{Handlers, Request};

use crate::cache::{Event, EventSink, Informer};
use crate::cluster::ClusterAccess;
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError, TrapCause};
use crate::metrics::{
    ControllerLabel, GuestLabel, Metrics, ModuleLabels, NameLabel, ResultLabels, StageSeries,
    TrapLabels,
};
use crate::queue::{RateLimit, WorkQueue};
use crate::vocab::Gvk;
use map_backlog::MapBacklog;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

/// Shortest delay a `requeue-after` is honoured with; shorter ones wait this long. Without a
/// floor, `requeue_after(1ms)` would reconcile one key a thousand times a second, outside both
/// the per-key backoff and the token bucket.
pub const MIN_REQUEUE_AFTER: Duration = Duration::from_millis(100);

/// Traps in a row after which a key is quarantined: its retries wait at least
/// [`QUARANTINE_DELAY`], however short its backoff, until a reconcile of it does not trap.
pub const QUARANTINE_AFTER: u32 = 5;
/// Shortest wait between retries of a quarantined key.
pub const QUARANTINE_DELAY: Duration = Duration::from_secs(30);
/// How long a worker whose kept instance has grown past
/// [`IDLE_GROWTH_ALLOWANCE`](crate::guest::IDLE_GROWTH_ALLOWANCE) waits for its next key before
/// it gives the instance back (see [`GuestWorker::release_grown_instance`]).
pub const GROWN_INSTANCE_IDLE: Duration = Duration::from_secs(5);

/// What the queue does with a reconcile's result (errors aside): the [module docs](self)' table.
fn action_after(action: Action) -> Action {
    match action {
        Action::RequeueAfter(after) if after.is_zero() => Action::Done,
        Action::RequeueAfter(after) => Action::RequeueAfter(after.max(MIN_REQUEUE_AFTER)),
        other => other,
    }
}

/// How one reconcile ended, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// `done` (and `requeue-after(0)`).
    Done,
    /// `requeue`.
    Requeue,
    /// `requeue-after(d)`.
    RequeueAfter,
    /// The guest returned an error (or its configuration was refused).
    Error,
    /// The guest trapped.
    Trap(TrapCause),
}

/// One controller's reconciles: what is running now, and how those that ended ended.
///
/// Outcomes are counted in one place, `record`, into two sinks: this
/// controller's own tallies (what the accessors read: this controller's reconciles only, from
/// zero, whatever else the guest's name was counted for) and the guest's Prometheus series
/// (`controller_runtime_reconcile_total{result}`, `controller_runtime_reconcile_errors_total`,
/// `krec_guest_traps_total{cause}`, which also count admission traps and span re-adds).
#[derive(Debug)]
pub struct Stats {
    done: AtomicU64,
    requeue: AtomicU64,
    requeue_after: AtomicU64,
    /// Errors the guest returned (traps aside).
    errors: AtomicU64,
    /// Reconcile traps by cause.
    traps: Mutex<std::collections::BTreeMap<&'static str, u64>>,
    series: OutcomeSeries,
    /// Times a key was handed to a worker while another worker was reconciling it. The
    /// workqueue guarantees this stays zero; it is counted, not assumed.
    pub overlaps: AtomicU64,
    active: Mutex<HashSet<Request>>,
}

/// The Prometheus series a guest's outcomes are counted in.
#[derive(Debug)]
struct OutcomeSeries {
    success: Counter,
    requeue: Counter,
    requeue_after: Counter,
    error: Counter,
    /// `reconcile_errors_total`: errors and traps.
    errors_total: Counter,
    traps: prometheus_client::metrics::family::Family<TrapLabels, Counter>,
    guest: String,
}

impl Stats {
    /// Tallies from zero, counted also in guest `name`'s series in `metrics`.
    fn new(metrics: &Metrics, name: &str) -> Self {
        let result = |result: &str| {
            metrics
                .reconcile_total
                .get_or_create(&ResultLabels {
                    controller: name.to_owned(),
                    result: result.to_owned(),
                })
                .clone()
        };
        Stats {
            done: AtomicU64::new(0),
            requeue: AtomicU64::new(0),
            requeue_after: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            traps: Mutex::default(),
            series: OutcomeSeries {
                success: result("success"),
                requeue: result("requeue"),
                requeue_after: result("requeue_after"),
                error: result("error"),
                errors_total: metrics
                    .reconcile_errors
                    .get_or_create(&ControllerLabel {
                        controller: name.to_owned(),
                    })
                    .clone(),
                traps: metrics.traps.clone(),
                guest: name.to_owned(),
            },
            overlaps: AtomicU64::new(0),
            active: Mutex::default(),
        }
    }

    /// Count one reconcile's `outcome`: the one place outcomes are counted.
    fn record(&self, outcome: Outcome) {
        let series = &self.series;
        let count = |tally: &AtomicU64, counter: &Counter| {
            tally.fetch_add(1, Ordering::Relaxed);
            counter.inc();
        };
        match outcome {
            Outcome::Done => count(&self.done, &series.success),
            Outcome::Requeue => count(&self.requeue, &series.requeue),
            Outcome::RequeueAfter => count(&self.requeue_after, &series.requeue_after),
            Outcome::Error => {
                count(&self.errors, &series.error);
                series.errors_total.inc();
            }
            Outcome::Trap(cause) => {
                // A trap is an error in controller-runtime's series, not in the tallies.
                *self
                    .traps
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(cause.as_str())
                    .or_insert(0) += 1;
                series
                    .traps
                    .get_or_create(&TrapLabels {
                        guest: series.guest.clone(),
                        cause: cause.as_str().to_owned(),
                    })
                    .inc();
                series.error.inc();
                series.errors_total.inc();
            }
        }
    }

    /// Reconciles that returned `done`.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Reconciles that returned `requeue` or `requeue-after`.
    pub fn requeued(&self) -> u64 {
        self.requeue.load(Ordering::Relaxed) + self.requeue_after.load(Ordering::Relaxed)
    }

    /// Reconciles that trapped.
    pub fn traps(&self) -> u64 {
        self.traps_by_cause().values().sum()
    }

    /// Reconciles that returned an error (traps aside).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// All reconciles so far, whatever their result.
    pub fn total(&self) -> u64 {
        self.done() + self.requeued() + self.errors() + self.traps()
    }

    /// Keys being reconciled right now.
    pub fn active(&self) -> usize {
        self.active.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Traps so far, by cause (`timeout`, `out_of_memory`, `panic`, ...).
    pub fn traps_by_cause(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.traps.lock().unwrap_or_else(|e| e.into_inner()).clone()
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

/// Create a guest's series at zero, as controller-runtime does, so dashboards and alerts see
/// them before the first event of each kind.
fn init_series(metrics: &Metrics, guest: &str) {
    let controller = ControllerLabel {
        controller: guest.to_owned(),
    };
    // The outcome series (`reconcile_total`, `reconcile_errors`) are made by `Stats::new`.
    let _ = metrics.active_workers.get_or_create(&controller);
    let name = NameLabel {
        name: guest.to_owned(),
    };
    let _ = metrics.queue_adds.get_or_create(&name);
    let _ = metrics.queue_retries.get_or_create(&name);
    let _ = metrics.queue_depth.get_or_create(&name);
}

/// Set the series that describe a version: module info (replacing `old`'s) and concurrency.
fn publish_version(metrics: &Metrics, guest: &str, old: Option<&Version>, new: &Version) {
    let info = |v: &Version| ModuleLabels {
        guest: guest.to_owned(),
        version: v.number.to_string(),
        digest: v.module.digest().to_owned(),
    };
    if let Some(old) = old {
        metrics.module_info.remove(&info(old));
    }
    metrics.module_info.get_or_create(&info(new)).set(1);
    let concurrency = new.module.manifest().spec.max_concurrent_reconciles.get();
    metrics
        .max_concurrent
        .get_or_create(&ControllerLabel {
            controller: guest.to_owned(),
        })
        .set(i64::from(concurrency));
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
    metrics: Arc<Metrics>,
    /// Open while this host may reconcile (always, without leader election).
    gate: tokio::sync::watch::Receiver<bool>,
    version: ArcSwap<Version>,
    queue: Arc<WorkQueue<Request>>,
    stats: Arc<Stats>,
    /// Workers wanted (`maxConcurrentReconciles`); workers with a higher index stop.
    workers_wanted: AtomicUsize,
    workers: Mutex<Vec<Option<JoinHandle<()>>>>,
    sources: Mutex<Vec<JoinHandle<()>>>,
    for_informers: Mutex<Vec<Arc<Informer>>>,
    /// Every informer the guest watches (its `for` kind's among them): what
    /// [`resync_all`](Self::resync_all) replays.
    informers: Mutex<Vec<Arc<Informer>>>,
    /// Traps in a row, by key (keys whose last reconcile trapped).
    trap_streaks: Mutex<std::collections::HashMap<Request, u32>>,
    /// This controller's `krec_event_stage_seconds` series.
    stages: StageSeries,
    /// Objects waiting for the guest's `map` export (watches with `mapByGuest`), each once.
    map_backlog: Arc<MapBacklog>,
    mapper: Mutex<Option<JoinHandle<()>>>,
    /// Queues every key each time the gate opens (see [`Controller::new`]).
    opener: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("guest", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for Controller {
    /// The map task waits on the backlog, not on the controller: end it with the controller
    /// even without [`shutdown`](Controller::shutdown).
    fn drop(&mut self) {
        for task in [&mut self.mapper, &mut self.opener] {
            if let Some(task) = task.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
                task.abort();
            }
        }
    }
}

impl EventSink for Controller {
    fn on_event(&self, gvk: &Gvk, event: &Event<'_>) {
        // While another replica runs the guest, its events are its concern: this replica's
        // queue is rebuilt from the cache when the gate opens.
        if !*self.gate.borrow() {
            return;
        }
        let version = self.version.load();
        let mut enqueued = false;
        for request in version.handlers.requests(gvk, event) {
            self.queue.add_caused(request, event.received);
            enqueued = true;
        }
        if enqueued {
            let took = event.received.elapsed();
            self.stages.handler.observe(took.as_secs_f64());
        }
        if version.handlers.maps_by_guest(gvk) {
            // An update maps the old state too (controller-runtime's map handler does), so a
            // target the object stopped naming is reconciled as well.
            let old = match event.kind {
                crate::vocab::EventKind::Update => event.old_json,
                _ => None,
            };
            if let Some(object) = event.json {
                self.map_backlog.push(
                    gvk,
                    event.object.namespace.as_deref(),
                    event.object.name.as_deref().unwrap_or_default(),
                    object,
                    old,
                );
            }
        }
    }
}

impl Controller {
    /// A controller for `module`, whose host calls go to `cluster`. Nothing runs until
    /// [`start`](Self::start).
    /// Workers take keys only while `gate` is open (leader election, sharding); while it is
    /// closed events are dropped, and each time it opens every key is queued
    /// ([`resync_all`](Self::resync_all)) — what another replica owned is now this one's, and
    /// nothing it may have left undone is lost.
    pub fn new(
        module: Arc<GuestModule>,
        cluster: Arc<dyn ClusterAccess>,
        metrics: Arc<Metrics>,
        gate: tokio::sync::watch::Receiver<bool>,
    ) -> Arc<Self> {
        let queue = WorkQueue::new(rate_limit_of(&module));
        let name = module.name().to_owned();
        queue.set_observer(metrics.queue_observer(&name));
        let version = Version::new(module, cluster);
        publish_version(&metrics, &name, None, &version);
        init_series(&metrics, &name);
        let stats = Arc::new(Stats::new(&metrics, &name));
        Arc::new(Controller {
            stages: metrics.stages(&name),
            map_backlog: Arc::default(),
            mapper: Mutex::new(None),
            opener: Mutex::new(None),
            name,
            metrics,
            gate,
            version: ArcSwap::from_pointee(version),
            queue: Arc::new(queue),
            stats,
            workers_wanted: AtomicUsize::new(0),
            workers: Mutex::new(Vec::new()),
            sources: Mutex::new(Vec::new()),
            for_informers: Mutex::new(Vec::new()),
            informers: Mutex::new(Vec::new()),
            trap_streaks: Mutex::new(std::collections::HashMap::new()),
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
    pub fn start(
        self: &Arc<Self>,
        informers: Vec<Arc<Informer>>,
        for_informers: Vec<Arc<Informer>>,
    ) {
        *self.informers.lock().unwrap_or_else(|e| e.into_inner()) = informers;
        *self.for_informers.lock().unwrap_or_else(|e| e.into_inner()) = for_informers;
        self.scale_workers();
        self.restart_sources();
        self.start_mapper();
        self.start_opener();
    }

    /// Start the task that queues every key each time the gate opens after being closed.
    fn start_opener(self: &Arc<Self>) {
        let mut opener = self.opener.lock().unwrap_or_else(|e| e.into_inner());
        if opener.is_some() {
            return;
        }
        let this = Arc::downgrade(self);
        let mut gate = self.gate.clone();
        // Open now: the informers' initial events have queued every key already. Closed now:
        // they were dropped, and the first opening resyncs (read here, not at the task's first
        // poll, so that an opening in between is not missed).
        let mut closed = !*gate.borrow_and_update();
        *opener = Some(tokio::spawn(async move {
            loop {
                if !closed && gate.wait_for(|open| !*open).await.is_err() {
                    return;
                }
                closed = false;
                if gate.wait_for(|open| *open).await.is_err() {
                    return;
                }
                match this.upgrade() {
                    Some(controller) => controller.resync_all(),
                    None => return,
                }
            }
        }));
    }

    /// Start the task that runs the guest's `map` export for the objects of `mapByGuest`
    /// watches, one call per state in the [backlog](MapBacklog) (which coalesces a burst of
    /// events on one object), and enqueues what it returns. Its failures are logged and
    /// counted (`krec_guest_map_calls_total{result="error"|"trap"}`); that state's requests are
    /// lost, as when a controller-runtime map function returns none.
    fn start_mapper(self: &Arc<Self>) {
        let mut mapper = self.mapper.lock().unwrap_or_else(|e| e.into_inner());
        if mapper.is_some() {
            return;
        }
        let this = Arc::downgrade(self);
        let backlog = self.map_backlog.clone();
        *mapper = Some(tokio::spawn(async move {
            loop {
                let job = backlog.next().await;
                let Some(controller) = this.upgrade() else {
                    return;
                };
                for object in job.objects {
                    controller.map(&job.gvk, object).await;
                }
            }
        }));
    }

    async fn map(&self, gvk: &Gvk, object: Arc<str>) {
        let version = self.version.load_full();
        // A version swapped in meanwhile may not map this kind any more.
        if !version.handlers.maps_by_guest(gvk) {
            return;
        }
        let kind = crate::bindings::WitGvk {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
        };
        let result = version
            .module
            .map(&version.cluster, Some(self.metrics.clone()), kind, object)
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(ReconcileError::Trap { .. }) => "trap",
            Err(_) => "error",
        };
        self.metrics
            .map_calls
            .get_or_create(&ResultLabels {
                controller: self.name.clone(),
                result: outcome.to_owned(),
            })
            .inc();
        match result {
            Ok(requests) => {
                for request in requests {
                    match Request::checked(request.namespace.as_deref(), &request.name) {
                        Ok(request) => self.queue.add(request),
                        Err(problem) => tracing::warn!(
                            target: "krec::reconcile",
                            guest = %self.name,
                            kind = %gvk,
                            "map returned an unusable request, dropped: {problem}"
                        ),
                    }
                }
            }
            Err(err) => {
                tracing::warn!(target: "krec::reconcile", guest = %self.name, kind = %gvk, "{err}; the event's requests are dropped");
            }
        }
    }

    /// Install `module` (with `cluster`) as the new version. Running reconciles finish on the
    /// old one; every later reconcile runs the new one. The queue and its backoff state stay;
    /// worker count, rate limits, tickers and resync follow the new manifest.
    pub fn swap(
        self: &Arc<Self>,
        module: Arc<GuestModule>,
        cluster: Arc<dyn ClusterAccess>,
        informers: Vec<Arc<Informer>>,
        for_informers: Vec<Arc<Informer>>,
    ) -> Arc<Version> {
        self.queue.set_rate_limit(rate_limit_of(&module));
        let mut version = Version::new(module, cluster);
        let old = self.version.load_full();
        version.number = old.number + 1;
        publish_version(&self.metrics, &self.name, Some(&old), &version);
        let version = Arc::new(version);
        self.version.store(version.clone());
        *self.informers.lock().unwrap_or_else(|e| e.into_inner()) = informers;
        *self.for_informers.lock().unwrap_or_else(|e| e.into_inner()) = for_informers;
        self.scale_workers();
        self.restart_sources();
        version
    }

    /// Spawn or retire workers to match the current manifest's `maxConcurrentReconciles`.
    fn scale_workers(self: &Arc<Self>) {
        let wanted = self
            .version
            .load()
            .module
            .manifest()
            .spec
            .max_concurrent_reconciles
            .workers();
        self.workers_wanted.store(wanted, Ordering::SeqCst);
        // One slot per worker index: a retired worker's slot is refilled when more are wanted.
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if workers.len() < wanted {
            workers.resize_with(wanted, || None);
        }
        for (index, slot) in workers.iter_mut().enumerate().take(wanted) {
            if slot.as_ref().is_none_or(JoinHandle::is_finished) {
                *slot = Some(tokio::spawn(self.clone().work(index)));
            }
        }
    }

    /// Queue every key the guest would see: every cached object of every kind it watches goes
    /// through its handlers again (as a create, as to a new subscriber: `for` objects, owners,
    /// mapped targets, `mapByGuest` calls alike), and each ticker's request is queued. What a
    /// replica that takes a guest over does first (sharded hosts, a new leader), so that no
    /// change the previous owner had queued is lost.
    pub fn resync_all(&self) {
        let informers = self
            .informers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for informer in &informers {
            informer.replay(self);
        }
        for ticker in &self.version.load().module.manifest().spec.tickers {
            let request = &ticker.request;
            self.queue
                .add(Request::new(request.namespace.as_deref(), &request.name));
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
                        for key in informer.keys() {
                            queue.add(key);
                        }
                    }
                }
            }));
        }
    }

    /// Worker `index`: take a key, reconcile it on the current version, act on the result;
    /// give back an instance a burst grew once idle for [`GROWN_INSTANCE_IDLE`];
    /// until shutdown, or until fewer workers are wanted.
    async fn work(self: Arc<Self>, index: usize) {
        let mut worker: Option<GuestWorker> = None;
        let mut gate = self.gate.clone();
        while index < self.workers_wanted.load(Ordering::SeqCst) {
            // Only the leader (the guest's owner) reconciles.
            if gate.wait_for(|open| *open).await.is_err() {
                break;
            }
            let closing = async {
                // A gate whose sender is gone never closes (and must not spin).
                if gate.wait_for(|open| !*open).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            // An instance a burst grew is given back once the worker has been idle a while.
            let grown = worker
                .as_ref()
                .is_some_and(GuestWorker::holds_grown_instance);
            let idle = async {
                if grown {
                    tokio::time::sleep(GROWN_INSTANCE_IDLE).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            let request = tokio::select! {
                request = self.queue.get_caused() => match request {
                    Some(request) => request,
                    None => break,
                },
                // `get` is cancel-safe: a key is only taken in the poll that returns it.
                () = closing => continue,
                () = idle => {
                    if let Some(guest) = worker.as_mut() {
                        guest.release_grown_instance();
                    }
                    continue;
                }
            };
            let (request, origin) = request;
            let taken = std::time::Instant::now();
            let version = self.version.load_full();
            let current = worker
                .as_ref()
                .is_some_and(|w| Arc::ptr_eq(w.module(), &version.module));
            if !current {
                // A new version: the old instance is dropped with the old worker.
                worker = Some(
                    GuestWorker::new(version.module.clone(), version.cluster.clone())
                        .with_metrics(self.metrics.clone()),
                );
            }
            let Some(guest) = worker.as_mut() else {
                break;
            };
            self.stats.begin(&request);
            let label = self.controller_label();
            self.metrics.active_workers.get_or_create(&label).inc();
            let started = Instant::now();
            let _ = version.first_reconcile.set(started);
            let result = guest
                .reconcile(request.namespace.as_deref(), &request.name)
                .await;
            self.metrics.active_workers.get_or_create(&label).dec();
            self.stats.end(&request);
            let guest_label = GuestLabel {
                guest: self.name.clone(),
            };
            self.count_budgets(&version.module, &guest_label);
            if let Some(usage) = guest.last_usage() {
                self.observe_stages(origin, taken, &usage);
                self.metrics
                    .guest_cpu
                    .get_or_create(&guest_label)
                    .inc_by(usage.guest_time.as_secs_f64());
                let peak = i64::try_from(usage.memory_peak).unwrap_or(i64::MAX);
                let gauge = self.metrics.guest_memory_peak.get_or_create(&guest_label);
                if gauge.get() < peak {
                    gauge.set(peak);
                }
            }
            self.finish(&request, result, started.elapsed());
            self.queue.done(&request);
        }
    }

    /// The stages of one reconcile in `krec_event_stage_seconds`: from `taken` (a worker took
    /// the key) to the guest entered, to its first host call, to its return (now); and from
    /// `origin` (the watch event that caused it was received, if one did) to the guest entered.
    fn observe_stages(
        &self,
        origin: crate::queue::Origin,
        taken: std::time::Instant,
        usage: &crate::guest::Usage,
    ) {
        let observe = |series: &Histogram, took: Duration| series.observe(took.as_secs_f64());
        let stages = &self.stages;
        if let Some(origin) = origin {
            observe(
                &stages.event_to_guest,
                usage.entered.saturating_duration_since(origin),
            );
        }
        observe(
            &stages.start,
            usage.entered.saturating_duration_since(taken),
        );
        if let Some(first_call) = usage.first_call {
            observe(
                &stages.first_call,
                first_call.saturating_duration_since(usage.entered),
            );
        }
        observe(&stages.guest, usage.entered.elapsed());
    }

    /// Add what the guest's budgets held back since the last reconcile to the metrics.
    fn count_budgets(&self, module: &GuestModule, label: &GuestLabel) {
        let budgets = module.budgets();
        let dropped = budgets.log.take_dropped();
        if dropped > 0 {
            self.metrics
                .log_dropped
                .get_or_create(label)
                .inc_by(dropped);
        }
        for (held, series) in [
            (budgets.cpu.take_throttled(), &self.metrics.cpu_throttled),
            (budgets.writes.take_waited(), &self.metrics.write_throttled),
        ] {
            if !held.is_zero() {
                series.get_or_create(label).inc_by(held.as_secs_f64());
            }
        }
    }

    /// Track `request`'s traps in a row; whether it is (now) quarantined. Entering quarantine
    /// is logged once and counted; leaving it is logged.
    fn trap_streak(&self, request: &Request, trapped: bool) -> bool {
        let mut streaks = self.trap_streaks.lock().unwrap_or_else(|e| e.into_inner());
        if !trapped {
            if streaks.remove(request).unwrap_or(0) >= QUARANTINE_AFTER {
                tracing::info!(guest = %self.name, key = %request, "key released from quarantine: its reconcile no longer traps");
            }
            return false;
        }
        let streak = streaks.entry(request.clone()).or_insert(0);
        *streak = streak.saturating_add(1);
        if *streak == QUARANTINE_AFTER {
            tracing::warn!(
                guest = %self.name,
                key = %request,
                "key quarantined after {QUARANTINE_AFTER} traps in a row: retried at most every {QUARANTINE_DELAY:?} until a reconcile of it does not trap"
            );
            self.metrics
                .quarantined
                .get_or_create(&GuestLabel {
                    guest: self.name.clone(),
                })
                .inc();
        }
        *streak >= QUARANTINE_AFTER
    }

    fn controller_label(&self) -> ControllerLabel {
        ControllerLabel {
            controller: self.name.clone(),
        }
    }

    /// Update the series read at scrape time: queue depth, unfinished work, longest processor.
    pub fn refresh_metrics(&self) {
        let name = NameLabel {
            name: self.name.clone(),
        };
        let depth = i64::try_from(self.queue.len()).unwrap_or(i64::MAX);
        self.metrics.queue_depth.get_or_create(&name).set(depth);
        let running = self.queue.in_progress();
        let unfinished: f64 = running.iter().map(Duration::as_secs_f64).sum();
        let longest = running.first().map_or(0.0, Duration::as_secs_f64);
        self.metrics
            .unfinished_work
            .get_or_create(&name)
            .set(unfinished);
        self.metrics
            .longest_running
            .get_or_create(&name)
            .set(longest);
    }

    fn finish(&self, request: &Request, result: Result<Action, ReconcileError>, took: Duration) {
        let guest = self.name();
        let ms = took.as_secs_f64() * 1000.0;
        self.metrics
            .reconcile_time
            .get_or_create(&self.controller_label())
            .observe(took.as_secs_f64());
        let trapped = matches!(result, Err(ReconcileError::Trap { .. }));
        let quarantined = self.trap_streak(request, trapped);
        match result.map(action_after) {
            Ok(Action::Done) => {
                self.stats.record(Outcome::Done);
                self.queue.forget(request);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"done", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::Requeue) => {
                self.stats.record(Outcome::Requeue);
                self.queue.add_rate_limited(request.clone());
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %"requeue", duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Ok(Action::RequeueAfter(after)) => {
                self.stats.record(Outcome::RequeueAfter);
                self.queue.forget(request);
                self.queue.add_after(request.clone(), after);
                tracing::debug!(target: "krec::reconcile", guest = %guest, key = %request, result = %format_args!("requeue_after({after:?})"), duration_ms = %format_args!("{ms:.1}"), "reconciled");
            }
            Err(err) => {
                self.stats.record(match &err {
                    ReconcileError::Trap { cause, .. } => Outcome::Trap(*cause),
                    ReconcileError::Guest { .. } | ReconcileError::Config { .. } => Outcome::Error,
                });
                if quarantined {
                    self.queue
                        .add_rate_limited_at_least(request.clone(), QUARANTINE_DELAY);
                } else {
                    self.queue.add_rate_limited(request.clone());
                }
                let retries = self.queue.num_requeues(request);
                tracing::warn!(target: "krec::reconcile", guest = %guest, key = %request, result = %"error", duration_ms = %format_args!("{ms:.1}"), retries, "{err}; retrying with backoff");
            }
        }
    }

    /// Drop this guest's series that describe what it runs (its module info), when it is
    /// removed.
    pub fn forget_metrics(&self) {
        let version = self.version.load();
        self.metrics.module_info.remove(&ModuleLabels {
            guest: self.name.clone(),
            version: version.number.to_string(),
            digest: version.module.digest().to_owned(),
        });
    }

    /// Stop: no new keys, wait (at most `timeout`) for running reconciles to finish, stop the
    /// workers and sources.
    pub async fn shutdown(&self, timeout: Duration) {
        self.queue.shutdown();
        for task in [&self.mapper, &self.opener] {
            if let Some(task) = task.lock().unwrap_or_else(|e| e.into_inner()).take() {
                task.abort();
            }
        }
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
            .flatten()
        {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    use tokio::time::Instant as Clock;

    use super::*;
    use crate::cluster::MemoryCluster;
    use crate::guest::Runner;
    use crate::guest::script::Script;
    use crate::manifest::Manifest;

    /// A started controller running `script`, its gate `gate`, with `extra` manifest spec lines.
    fn controller(
        script: &Arc<Script>,
        gate: tokio::sync::watch::Receiver<bool>,
        extra: &str,
    ) -> Arc<Controller> {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: t.wasm\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  rateLimiter: {{baseDelay: 1s, maxDelay: 60s}}\n{extra}"
        );
        let manifest = Manifest::parse(Path::new("t.yaml"), &text).expect("manifest");
        let runner: Arc<dyn Runner> = script.clone();
        let module = Arc::new(GuestModule::with_runner(Arc::new(manifest), runner));
        let cluster: Arc<dyn ClusterAccess> = Arc::new(MemoryCluster::new());
        let controller = Controller::new(module, cluster, Arc::new(Metrics::new()), gate);
        controller.start(Vec::new(), Vec::new());
        controller
    }

    /// Let every task run that can, without moving the clock.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    fn open() -> tokio::sync::watch::Receiver<bool> {
        let (tx, rx) = tokio::sync::watch::channel(true);
        std::mem::forget(tx);
        rx
    }

    #[test]
    fn outcomes_should_be_counted_once_per_controller_and_in_the_guests_series() {
        let metrics = Metrics::new();
        let series = |result: &str| {
            metrics
                .reconcile_total
                .get_or_create(&ResultLabels {
                    controller: "g".into(),
                    result: result.into(),
                })
                .get()
        };
        let timeouts = || {
            metrics
                .traps
                .get_or_create(&TrapLabels {
                    guest: "g".into(),
                    cause: TrapCause::Timeout.as_str().into(),
                })
                .get()
        };
        let stats = Stats::new(&metrics, "g");
        stats.record(Outcome::Done);
        stats.record(Outcome::RequeueAfter);
        stats.record(Outcome::Error);
        stats.record(Outcome::Trap(TrapCause::Timeout));
        // An admission review of the same guest trapped: its series count it, its reconciles
        // do not.
        metrics
            .traps
            .get_or_create(&TrapLabels {
                guest: "g".into(),
                cause: TrapCause::Timeout.as_str().into(),
            })
            .inc();
        assert_eq!(
            (
                stats.done(),
                stats.requeued(),
                stats.errors(),
                stats.traps()
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(stats.total(), 4);
        assert_eq!(stats.traps_by_cause(), [("timeout", 1)].into());
        assert_eq!(
            (series("success"), series("requeue_after"), series("error")),
            (1, 1, 2),
            "a trap is an error in controller-runtime's series"
        );
        assert_eq!(
            metrics
                .reconcile_errors
                .get_or_create(&ControllerLabel {
                    controller: "g".into()
                })
                .get(),
            2
        );
        assert_eq!(timeouts(), 2);

        // The guest removed and added again: the new controller counts from zero, the
        // guest's series go on.
        let again = Stats::new(&metrics, "g");
        assert_eq!(again.total(), 0);
        again.record(Outcome::Done);
        assert_eq!((again.done(), series("success")), (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_after_should_reconcile_again_after_the_delay() {
        let script = Script::new(vec![Ok(Action::RequeueAfter(Duration::from_secs(30)))]);
        let controller = controller(&script, open(), "");
        let started = Clock::now();
        controller.trigger(Request::new(None, "a"));
        settle().await;
        assert_eq!(script.calls().len(), 1);
        tokio::time::sleep(Duration::from_secs(29)).await;
        settle().await;
        assert_eq!(script.calls().len(), 1, "not before the delay");
        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        let calls = script.calls();
        assert_eq!(calls.len(), 2, "again after it");
        assert!(calls[1].1 - started >= Duration::from_secs(30));
        assert_eq!(controller.stats().done(), 1);
        assert_eq!(controller.stats().requeued(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_should_be_retried_with_doubling_backoff() {
        let script = Script::new(vec![Err(()), Err(()), Err(())]);
        let controller = controller(&script, open(), "");
        controller.trigger(Request::new(None, "a"));
        tokio::time::sleep(Duration::from_secs(30)).await;
        let calls = script.calls();
        assert_eq!(calls.len(), 4, "three failures, then done: {calls:?}");
        let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1].1 - w[0].1).collect();
        assert_eq!(
            gaps,
            [1, 2, 4].map(Duration::from_secs),
            "base delay 1 s, doubling"
        );
        assert_eq!(controller.stats().errors(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_gate_should_hold_work_and_opening_it_should_resync() {
        let (gate, closed) = tokio::sync::watch::channel(false);
        let script = Script::new(Vec::new());
        let controller = controller(
            &script,
            closed,
            "  tickers: [{every: 1h, request: {name: tick}}]\n",
        );
        controller.trigger(Request::new(None, "a"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(script.calls().is_empty(), "no reconcile while closed");
        gate.send_replace(true);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let keys: BTreeSet<String> = script.calls().into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["a".to_owned(), "tick".to_owned()]),
            "queued work, and the tickers' requests"
        );
        let ticks = |script: &Script| script.calls().iter().filter(|(k, _)| k == "tick").count();
        let before = ticks(&script);
        gate.send_replace(false);
        settle().await;
        gate.send_replace(true);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            ticks(&script),
            before + 1,
            "each opening queues the tickers again"
        );
    }
}
