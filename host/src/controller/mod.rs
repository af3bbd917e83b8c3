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
pub mod queue;
mod series;
mod sources;
mod stats;
mod worker;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;

pub use handlers::{Handlers, Request};
use stats::Outcome;
pub use stats::{DURATION_BUCKETS, RECENT, Reconciled, Stats};

use crate::cluster::ClusterAccess;
use crate::cluster::cache::CachedObject;
use crate::cluster::cache::{Event, EventSink, Informer};
use crate::controller::queue::{RateLimit, WorkQueue};
use crate::guest::{Action, GuestModule};
use crate::process::metrics::{ControllerLabel, Metrics, ModuleLabels, NameLabel, StageSeries};
use crate::process::threads::GuestThreads;
use crate::rollout::{Decision, GuestRollouts, Rollout, recording};
use krec_core::Gvk;
use map_backlog::MapBacklog;

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
/// it gives the instance back (see [`GuestWorker::release_grown_instance`](crate::guest::GuestWorker::release_grown_instance)).
pub const GROWN_INSTANCE_IDLE: Duration = Duration::from_secs(5);
/// How long a worker keeps its guest's instance with no key to reconcile before it gives it
/// back (the next reconcile instantiates the module again, tens of microseconds): a guest idle
/// this long holds no instance, its linear memory or its stack, so a host of many mostly idle
/// guests holds little for each. The manager's default ([`ManagerOptions::instance_idle`](crate::guests::ManagerOptions::instance_idle)).
pub const IDLE_INSTANCE: Duration = Duration::from_secs(60);

/// What the queue does with a reconcile's result (errors aside): the [module docs](self)' table.
fn action_after(action: Action) -> Action {
    match action {
        Action::RequeueAfter(after) if after.is_zero() => Action::Done,
        Action::RequeueAfter(after) => Action::RequeueAfter(after.max(MIN_REQUEUE_AFTER)),
        other => other,
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
    /// The candidate tried beside it (`spec.rollout`), until promoted or rolled back.
    pub rollout: Option<Arc<Rollout>>,
    /// The guest's rollouts beyond that one and its recording: handed from each version to
    /// the next, so a recording or a decided rollout's report outlives a swap.
    rollouts: Arc<GuestRollouts>,
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
            rollout: None,
            rollouts: Arc::default(),
            first_reconcile: OnceLock::new(),
        }
    }

    /// This version with `module` in place of its own (a promoted candidate) and `rollout`.
    fn derived(
        &self,
        module: Arc<GuestModule>,
        number: u64,
        rollout: Option<Arc<Rollout>>,
    ) -> Self {
        Version {
            handlers: Handlers::from_manifest(module.manifest()),
            module,
            cluster: self.cluster.clone(),
            number,
            installed: self.installed,
            rollout,
            rollouts: self.rollouts.clone(),
            first_reconcile: self.first_reconcile.clone(),
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

/// [`Metrics::init_guest`] for the guest of `module`: its trap causes and webhooks.
fn init_failure_series(metrics: &Metrics, module: &GuestModule) {
    let manifest = module.manifest();
    let webhooks: Vec<String> = manifest
        .spec
        .webhooks
        .iter()
        .map(|w| format!("/{}/{}", w.kind.export(), manifest.name))
        .collect();
    let causes = crate::guest::TrapCause::ALL.map(crate::guest::TrapCause::as_str);
    metrics.init_guest(&manifest.name, &causes, &webhooks);
}

/// Set the series that describe a version: module info (replacing `old`'s) and concurrency.
fn publish_version(metrics: &Metrics, guest: &str, old: Option<&Version>, new: &Version) {
    let info = |v: &Version| ModuleLabels {
        guest: guest.to_owned(),
        version: v.number.to_string(),
        digest: v
            .module
            .manifest()
            .shown_digest(v.module.digest())
            .to_owned(),
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

/// Why a rolled-back candidate cannot be tried again.
#[derive(Debug, thiserror::Error)]
pub enum RetryRefused {
    /// A candidate is being tried now.
    #[error("a candidate is being tried already")]
    Trying,
    /// None was rolled back (why: the last candidate's fate, or no `spec.rollout`).
    #[error("no candidate to try again: {0}")]
    NoCandidate(String),
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
    /// How long an idle worker keeps its instance, in milliseconds ([`IDLE_INSTANCE`] unless
    /// [set](Self::set_instance_idle)).
    instance_idle_ms: std::sync::atomic::AtomicU64,
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
    /// Its other series, bound once.
    series: series::GuestSeries,
    /// Objects waiting for the guest's `map` export (watches with `mapByGuest`), each once.
    map_backlog: Arc<MapBacklog>,
    mapper: Mutex<Option<JoinHandle<()>>>,
    /// Queues every key each time the gate opens (see [`Controller::new`]).
    opener: Mutex<Option<JoinHandle<()>>>,
    /// The threads the guest's code runs on (its workers and its `map` calls); `None` on a
    /// test's single-threaded runtime, where they run on it.
    threads: Option<GuestThreads>,
    /// Failed reconciles in a row, and when the guest's threads were last demoted for failing
    /// (see [`Controller::note_outcome`]).
    failing: Mutex<Failing>,
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
        for (request, trigger) in version.handlers.triggered(gvk, event) {
            self.queue
                .add_caused(request, queue::Cause::event(trigger, event.received));
            enqueued = true;
        }
        if enqueued {
            let took = event.received.elapsed();
            self.stages.handler().observe(took.as_secs_f64());
        }
        if version.handlers.maps_by_guest(gvk) {
            // An update maps the old state too (controller-runtime's map handler does), so a
            // target the object stopped naming is reconciled as well.
            let old = match event.kind {
                krec_core::EventKind::Update => event.old_cached.map(CachedObject::json),
                _ => None,
            };
            if let Some(object) = event.cached {
                self.map_backlog.push(
                    gvk,
                    event.object.namespace.as_deref(),
                    event.object.name.as_deref().unwrap_or_default(),
                    &object.json(),
                    old.as_ref(),
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
        init_failure_series(&metrics, &version.module);
        let stats = Arc::new(Stats::new(&metrics, &name));
        let threads = GuestThreads::start(&name, thread_count(version.module.manifest()));
        Arc::new(Controller {
            threads,
            failing: Mutex::new(Failing::default()),
            stages: metrics.stages(&name),
            series: series::GuestSeries::new(metrics.clone(), &name),
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
            instance_idle_ms: std::sync::atomic::AtomicU64::new(
                u64::try_from(IDLE_INSTANCE.as_millis()).unwrap_or(u64::MAX),
            ),
            workers: Mutex::new(Vec::new()),
            sources: Mutex::new(Vec::new()),
            for_informers: Mutex::new(Vec::new()),
            informers: Mutex::new(Vec::new()),
            trap_streaks: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Where `krec record` starts and stops a recording of this guest's reconciles.
    pub fn recording(&self) -> Arc<recording::Slot> {
        self.version.load().rollouts.recording().clone()
    }

    /// The guest's rollouts beyond the running one (held by its versions, one after another).
    fn rollouts(&self) -> Arc<GuestRollouts> {
        self.version.load().rollouts.clone()
    }

    /// The candidate being tried beside the running version, if one is.
    pub fn rollout(&self) -> Option<Arc<Rollout>> {
        self.version.load().rollout.clone()
    }

    /// The rollout's report: the one running, else the last decided.
    pub fn rollout_report(&self) -> Option<serde_json::Value> {
        match self.rollout() {
            Some(rollout) => Some(rollout.report()),
            None => self.rollouts().concluded(),
        }
    }

    /// Try `rollout`'s candidate beside the running version; its decision is acted on as soon
    /// as it is made (a promotion swaps the candidate in: the queue stays, 0 keys lost).
    pub fn try_candidate(self: &Arc<Self>, rollout: Arc<Rollout>) {
        let current = self.version.load_full();
        let next = Arc::new(current.derived(
            current.module.clone(),
            current.number,
            Some(rollout.clone()),
        ));
        // Only over the version it was made for: a swap in between wins.
        let previous = self.version.compare_and_swap(&current, next);
        if !Arc::ptr_eq(&*previous, &current) {
            rollout.stop();
            return;
        }
        let controller = Arc::downgrade(self);
        let mut decided = rollout.decided();
        let task = tokio::spawn(async move {
            if decided.wait_for(Option::is_some).await.is_err() {
                return;
            }
            let decision = decided.borrow().clone();
            if let (Some(controller), Some(decision)) = (controller.upgrade(), decision) {
                controller.conclude(&rollout, &decision);
            }
        });
        self.rollouts().conclude_with(task);
    }

    /// Record that `spec`'s candidate could not be loaded (`problem`): the rollout's report
    /// says so, rolled back before it started.
    pub fn candidate_refused(&self, spec: &crate::manifest::RolloutSpec, problem: &str) {
        self.rollouts().refused(&self.name, spec, problem);
    }

    /// Decide the running rollout by hand; `false` when none runs or it is decided already.
    pub fn decide(&self, decision: Decision) -> bool {
        self.rollout().is_some_and(|r| r.decide(decision))
    }

    /// Forget the last rollout's report: its manifest no longer has `spec.rollout`, so its
    /// status and condition go.
    pub fn forget_rollout(&self) {
        self.rollouts().forget();
    }

    /// Why no candidate is being tried, and how to try one: for a refused promote or abort.
    pub fn no_rollout_reason(&self) -> String {
        match self.rollout_report() {
            Some(report) => {
                let phase = report["phase"].as_str().unwrap_or_default();
                let reason = report["reason"].as_str().unwrap_or_default();
                let how = if phase == "Promoted" {
                    "it is the running version now; to try another, name it in spec.rollout.candidate"
                } else if report["digest"] != "" {
                    "`krec diff --retry` tries it again from zero"
                } else {
                    "fix the candidate and apply spec.rollout again"
                };
                format!("the last candidate was decided: {phase} ({reason}); {how}")
            }
            None => "its manifest has no spec.rollout".into(),
        }
    }

    /// Try the candidate last rolled back again, from zero; the reason when there is none to
    /// try or one is being tried.
    pub fn retry_candidate(self: &Arc<Self>) -> Result<(), RetryRefused> {
        if self
            .rollout()
            .is_some_and(|r| r.decided().borrow().is_none())
        {
            return Err(RetryRefused::Trying);
        }
        match self.rollouts().take_rolled_back() {
            Some(last) => {
                self.try_candidate(last.again());
                Ok(())
            }
            None => Err(RetryRefused::NoCandidate(self.no_rollout_reason())),
        }
    }

    /// Act on `rollout`'s `decision`, if it is still the running version's.
    fn conclude(self: &Arc<Self>, rollout: &Arc<Rollout>, decision: &Decision) {
        let current = self.version.load_full();
        if !current
            .rollout
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, rollout))
        {
            return;
        }
        rollout.stop();
        let promoted = matches!(decision, Decision::Promote(_));
        current.rollouts.decided(rollout, promoted);
        self.metrics.count_decision(&self.name, promoted);
        let next = if promoted {
            // Versions of the module: the same module promoted keeps its number.
            let number = if rollout.candidate().digest() == current.module.digest() {
                current.number
            } else {
                current.number + 1
            };
            current.derived(rollout.candidate().clone(), number, None)
        } else {
            current.derived(current.module.clone(), current.number, None)
        };
        let next = Arc::new(next);
        // Only over the version the rollout ran beside: a swap in between wins.
        let previous = self.version.compare_and_swap(&current, next.clone());
        if promoted && Arc::ptr_eq(&*previous, &current) {
            publish_version(&self.metrics, &self.name, Some(&current), &next);
            tracing::info!(guest = %self.name, "candidate promoted: version {} runs {}", next.number, next.module.digest());
        }
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

    /// How long a worker keeps its guest's instance with no key to reconcile (default
    /// [`IDLE_INSTANCE`]); workers read it each time they wait for a key.
    pub fn set_instance_idle(&self, idle: Duration) {
        self.instance_idle_ms.store(
            u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// How long a worker keeps its guest's instance with no key to reconcile.
    pub fn instance_idle(&self) -> Duration {
        Duration::from_millis(self.instance_idle_ms.load(Ordering::SeqCst))
    }

    /// Whether the controller has nothing to do: no key queued or being reconciled, and no
    /// object waiting for (or in) the guest's `map` export, whose requests would be queued.
    /// Keys waiting out a delay (backoff, `requeueAfter`) are not counted. Meaningless after
    /// shutdown (a map call cut short stays counted).
    pub fn is_idle(&self) -> bool {
        self.map_backlog.is_idle() && self.queue.is_empty() && self.queue.processing() == 0
    }

    /// Keys whose reconciles trapped [`QUARANTINE_AFTER`] times in a row or more: retried at
    /// most every [`QUARANTINE_DELAY`].
    pub fn quarantined(&self) -> usize {
        self.trap_streaks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|streak| **streak >= QUARANTINE_AFTER)
            .count()
    }

    /// Reconcile counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The manual trigger: enqueue `request` as a generic event ([`queue::Trigger::Manual`]).
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
        let old = self.version.load_full();
        // A rollout of the old version ends with it (the new one starts its own).
        old.rollouts.stop_concluding();
        let mut version = Version::new(module, cluster);
        version.rollouts = old.rollouts.clone();
        // Versions of the module: a spec change that keeps the module keeps its number.
        version.number = if old.module.digest() == version.module.digest() {
            old.number
        } else {
            old.number + 1
        };
        publish_version(&self.metrics, &self.name, Some(&old), &version);
        let version = Arc::new(version);
        self.version.store(version.clone());
        *self.informers.lock().unwrap_or_else(|e| e.into_inner()) = informers;
        *self.for_informers.lock().unwrap_or_else(|e| e.into_inner()) = for_informers;
        self.scale_workers();
        self.restart_sources();
        version
    }

    /// Note a reconcile's outcome for the guest's thread priority: demoted at a trap or at
    /// [`FAILING_IN_A_ROW`] failed reconciles in a row (an occasional conflict is not failing),
    /// given back once a reconcile succeeds [`FAILING_FOR`] after the last demoting failure.
    fn note_outcome(&self, outcome: Outcome) {
        let Some(threads) = &self.threads else {
            return;
        };
        let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Outcome::Done | Outcome::Requeue | Outcome::RequeueAfter => {
                failing.in_a_row = 0;
                if failing.since.is_some_and(|at| at.elapsed() >= FAILING_FOR) {
                    failing.since = None;
                    threads.demote(false);
                }
            }
            Outcome::Error | Outcome::Trap(_) => {
                failing.in_a_row = failing.in_a_row.saturating_add(1);
                if matches!(outcome, Outcome::Trap(_)) || failing.in_a_row >= FAILING_IN_A_ROW {
                    failing.since = Some(Instant::now());
                    threads.demote(true);
                }
            }
        }
    }

    /// Spawn `future` (guest work: a worker, the `map` caller) on the guest's threads.
    pub(super) fn spawn_guest<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.threads {
            Some(threads) => threads.spawn(future),
            None => tokio::spawn(future),
        }
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
                *slot = Some(self.spawn_guest(self.clone().work(index)));
            }
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
        self.series.export(self.module().budgets());
    }

    /// Drop this guest's series that describe what it runs (its module info), when it is
    /// removed.
    pub fn forget_metrics(&self) {
        let version = self.version.load();
        self.metrics.module_info.remove(&ModuleLabels {
            guest: self.name.clone(),
            version: version.number.to_string(),
            digest: version
                .module
                .manifest()
                .shown_digest(version.module.digest())
                .to_owned(),
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

/// How many threads a guest's code runs on: one per worker (`maxConcurrentReconciles`), at most
/// the cores its `limits.cpu` allows (rounded up) and the machine has. More workers than
/// threads share them, as goroutines share a Go program's threads; the CPU governor holds the
/// guest to its `limits.cpu` whatever its threads.
fn thread_count(manifest: &crate::manifest::Manifest) -> usize {
    let workers = manifest.spec.max_concurrent_reconciles.workers();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    // A finite, positive `limits.cpu` (the manifest checks it); at least one thread.
    let allowed = manifest.spec.limits.cpu.ceil().clamp(1.0, 1024.0) as usize;
    workers.min(allowed).min(cores).max(1)
}

/// How long after its last demoting failure a guest's threads stay demoted.
pub const FAILING_FOR: Duration = Duration::from_secs(10);

/// Failed reconciles in a row (errors; a trap counts at once) that demote a guest's threads.
pub const FAILING_IN_A_ROW: u32 = 3;

/// A guest's failures, for its threads' priority.
#[derive(Debug, Default)]
struct Failing {
    in_a_row: u32,
    /// When its threads were last demoted for failing, while they are.
    since: Option<Instant>,
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use tokio::time::Instant as Clock;

    use super::stats::Outcome;
    use super::*;
    use crate::cluster::MemoryCluster;
    use crate::guest::Runner;
    use crate::guest::TrapCause;
    use crate::guest::script::Script;
    use crate::manifest::Manifest;
    use crate::process::metrics::{ResultLabels, TrapLabels};

    /// A started controller running `script`, its gate `gate`, with `extra` manifest spec lines.
    fn controller(
        script: &Arc<Script>,
        gate: tokio::sync::watch::Receiver<bool>,
        extra: &str,
    ) -> Arc<Controller> {
        controller_named("t", script, gate, extra)
    }

    /// The guest `name` reconciling ConfigMaps by `runner`, with `extra` lines of spec.
    fn module(name: &str, runner: Arc<dyn Runner>, extra: &str) -> Arc<GuestModule> {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {name}.wasm\n  for: {{apiVersion: v1, kind: ConfigMap}}\n  rateLimiter: {{baseDelay: 1s, maxDelay: 60s}}\n{extra}"
        );
        let manifest = Manifest::parse(Path::new("t.yaml"), &text).expect("manifest");
        Arc::new(GuestModule::with_runner(Arc::new(manifest), runner))
    }

    /// A started controller of the guest `name` running `script`.
    fn controller_named(
        name: &str,
        script: &Arc<Script>,
        gate: tokio::sync::watch::Receiver<bool>,
        extra: &str,
    ) -> Arc<Controller> {
        let module = module(name, script.clone(), extra);
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
        let metrics = Arc::new(Metrics::new());
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
        metrics.count_trap("g", TrapCause::Timeout.as_str());
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

    /// Keeps the `krec.trigger` of each reconcile of the guest `traced-triggers`, by key.
    #[derive(Clone, Debug, Default)]
    struct Triggers(Arc<Mutex<BTreeMap<String, Vec<String>>>>);

    impl opentelemetry_sdk::trace::SpanProcessor for Triggers {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

        fn on_end(&self, span: opentelemetry_sdk::trace::SpanData) {
            let attribute = |key: &str| {
                span.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == key)
                    .map(|kv| kv.value.to_string())
            };
            if span.name != "reconcile"
                || attribute("controller").as_deref() != Some("traced-triggers")
            {
                return;
            }
            if let (Some(name), Some(trigger)) = (attribute("name"), attribute("krec.trigger")) {
                let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
                kept.entry(name).or_default().push(trigger);
            }
        }

        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }

        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }

    /// A reconcile's trace names what queued it: the manual trigger, a ticker, the retry of
    /// an error, a requeue, a requeue after a delay. (The watch events' handlers — the event,
    /// an owner, a mapping — are named by `Handlers::triggered`, tested there.) The only test
    /// of this crate that installs telemetry: its processor keeps its own guest's traces.
    #[tokio::test(start_paused = true)]
    async fn each_reconciles_trace_should_name_its_trigger() {
        let kept = Triggers::default();
        let replaced = crate::telemetry::replace(Some(crate::telemetry::Telemetry::new(
            Box::new(kept.clone()),
            crate::telemetry::Sampler::Always,
        )));
        assert!(replaced.is_none(), "another test installed telemetry");
        let script = Script::new(vec![
            Err(()),
            Ok(Action::Requeue),
            Ok(Action::RequeueAfter(Duration::from_secs(30))),
        ]);
        let controller = controller_named("traced-triggers", &script, open(), "");
        controller.trigger(Request::new(None, "a"));
        tokio::time::sleep(Duration::from_secs(60)).await;
        // A ticker's request, on a version with a ticker (its first tick is at once).
        let ticking = "  tickers: [{every: 1h, request: {name: tick}}]\n";
        controller.swap(
            module("traced-triggers", Script::new(Vec::new()), ticking),
            Arc::new(MemoryCluster::new()),
            Vec::new(),
            Vec::new(),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        crate::telemetry::replace(None);
        let kept = kept.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(
            kept,
            BTreeMap::from([
                (
                    "a".to_owned(),
                    ["manual", "retry", "requeue", "requeue_after"]
                        .map(str::to_owned)
                        .to_vec()
                ),
                ("tick".to_owned(), vec!["ticker".to_owned()]),
            ])
        );
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
