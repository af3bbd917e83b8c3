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

pub mod handlers;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

pub use handlers::{Event, Handlers, Request};

use crate::cache::{EventSink, Informer};
use crate::cluster::{ClusterAccess, Gvk};
use crate::guest::{Action, GuestModule, GuestWorker, ReconcileError};
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

/// A guest's controller: handlers, workqueue, workers and generic sources.
pub struct Controller {
    module: Arc<GuestModule>,
    cluster: Arc<dyn ClusterAccess>,
    handlers: Handlers,
    queue: Arc<WorkQueue<Request>>,
    stats: Arc<Stats>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("guest", &self.name())
            .finish_non_exhaustive()
    }
}

impl EventSink for Controller {
    fn on_event(&self, gvk: &Gvk, event: &Event<'_>) {
        for request in self.handlers.requests(gvk, event) {
            self.queue.add(request);
        }
    }
}

impl Controller {
    /// A controller for `module`, whose host calls go to `cluster`. Nothing runs until
    /// [`start`](Self::start).
    pub fn new(module: Arc<GuestModule>, cluster: Arc<dyn ClusterAccess>) -> Arc<Self> {
        let spec = &module.manifest().spec;
        let rate = &spec.rate_limiter;
        let queue = WorkQueue::new(RateLimit {
            base_delay: rate.base_delay,
            max_delay: rate.max_delay,
            qps: rate.qps,
            burst: rate.burst,
        });
        Arc::new(Controller {
            handlers: Handlers::from_manifest(module.manifest()),
            module,
            cluster,
            queue: Arc::new(queue),
            stats: Arc::new(Stats::default()),
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        self.module.name()
    }

    /// The guest's module.
    pub fn module(&self) -> &Arc<GuestModule> {
        &self.module
    }

    /// The event handlers.
    pub fn handlers(&self) -> &Handlers {
        &self.handlers
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
        let spec = &self.module.manifest().spec;
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..spec.max_concurrent_reconciles.max(1) {
            tasks.push(tokio::spawn(self.clone().work()));
        }
        for ticker in &spec.tickers {
            let request = Request::new(ticker.request.namespace.as_deref(), &ticker.request.name);
            let queue = self.queue.clone();
            let every = ticker.every;
            // A ticker fires when the guest starts, then every period.
            tasks.push(tokio::spawn(async move {
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
            tasks.push(tokio::spawn(async move {
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

    /// One worker: take a key, reconcile it, act on the result, repeat until shutdown.
    async fn work(self: Arc<Self>) {
        let mut worker = GuestWorker::new(self.module.clone(), self.cluster.clone());
        while let Some(request) = self.queue.get().await {
            self.stats.begin(&request);
            let started = Instant::now();
            let result = worker
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
                    ReconcileError::Trap { .. } => &self.stats.traps,
                    ReconcileError::Guest { .. } => &self.stats.errors,
                }
                .fetch_add(1, Ordering::Relaxed);
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
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}
