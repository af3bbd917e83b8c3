//! [`Stats`]: how one controller's reconciles ended, counted once into its own tallies and the
//! guest's outcome series.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;

use super::Request;
use crate::guest::TrapCause;
use crate::process::metrics::{ControllerLabel, Metrics, ResultLabels};

/// How one reconcile ended, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
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

impl Outcome {
    /// Its name in a trace's `krec.result`: `done`, `requeue`, `requeue_after`, `error`,
    /// `trap`.
    pub(super) fn label(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Requeue => "requeue",
            Outcome::RequeueAfter => "requeue_after",
            Outcome::Error => "error",
            Outcome::Trap(_) => "trap",
        }
    }
}

/// How many of a controller's last reconciles [`Stats::recent`] keeps.
pub const RECENT: usize = 50;

/// How much of a failed reconcile's message [`Stats::recent`] keeps (bytes; cut at a
/// character's end): a guest's 20 MB error is not kept 50 times.
pub const RECENT_MESSAGE: usize = 1024;

/// Upper bounds (seconds) of [`Stats::durations`]' buckets: controller-runtime's reconcile
/// time buckets, 5 ms to 60 s (and the `+Inf` bucket after them).
pub const DURATION_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0,
];

/// A reconcile that ended, as `krec top` and the status page list them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconciled {
    /// `namespace/name`, or `name` for a cluster-scoped key.
    pub key: String,
    /// `done`, `requeue`, `requeue_after`, `error` or `trap`.
    pub result: &'static str,
    /// When it ended (Unix milliseconds).
    pub ended_unix_ms: u64,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// The error or trap, for those that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
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
    /// The last error or trap, and when.
    last_error: Mutex<Option<(String, std::time::SystemTime)>>,
    /// Instances idle workers gave back.
    instances_released: AtomicU64,
    /// The last [`RECENT`] reconciles, oldest first.
    recent: Mutex<std::collections::VecDeque<Reconciled>>,
    /// Reconciles by how long they took: one count per [`DURATION_BUCKETS`] bound (not
    /// cumulative), then those over the last.
    durations: [AtomicU64; DURATION_BUCKETS.len() + 1],
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
    /// For the trap series (`krec_guest_traps_total`, by cause).
    metrics: std::sync::Arc<Metrics>,
    guest: String,
}

impl Stats {
    /// Tallies from zero, counted also in guest `name`'s series in `metrics`.
    pub(super) fn new(metrics: &std::sync::Arc<Metrics>, name: &str) -> Self {
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
            instances_released: AtomicU64::new(0),
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
                metrics: metrics.clone(),
                guest: name.to_owned(),
            },
            overlaps: AtomicU64::new(0),
            active: Mutex::default(),
            last_error: Mutex::default(),
            recent: Mutex::default(),
            durations: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Keep the reconcile of `request` that ended with `outcome` after `took` (`message`: its
    /// error) among the [`RECENT`] ones, and count its duration.
    pub(super) fn remember(
        &self,
        request: &Request,
        outcome: Outcome,
        took: std::time::Duration,
        message: Option<String>,
    ) {
        let seconds = took.as_secs_f64();
        let bucket = DURATION_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(DURATION_BUCKETS.len());
        self.durations[bucket].fetch_add(1, Ordering::Relaxed);
        let ended_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let message = message.map(|mut text| {
            if krec_core::cut(&mut text, RECENT_MESSAGE) {
                text.push('…');
            }
            text
        });
        let reconciled = Reconciled {
            key: request.to_string(),
            result: outcome.label(),
            ended_unix_ms,
            seconds,
            message,
        };
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(reconciled);
    }

    /// The last [`RECENT`] reconciles, newest first.
    pub fn recent(&self) -> Vec<Reconciled> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent.iter().rev().cloned().collect()
    }

    /// Reconciles so far by how long they took: a count per [`DURATION_BUCKETS`] bound (those
    /// over the one before it, up to it), then those over the last bound.
    pub fn durations(&self) -> Vec<u64> {
        self.durations
            .iter()
            .map(|count| count.load(Ordering::Relaxed))
            .collect()
    }

    /// Count one reconcile's `outcome`: the one place outcomes are counted.
    pub(super) fn record(&self, outcome: Outcome) {
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
                series.metrics.count_trap(&series.guest, cause.as_str());
                series.error.inc();
                series.errors_total.inc();
            }
        }
    }

    /// Remember `message` as the last error (a reconcile that failed or trapped).
    pub(super) fn failed(&self, message: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((message, std::time::SystemTime::now()));
    }

    /// The last reconcile error or trap, and when it happened.
    pub fn last_error(&self) -> Option<(String, std::time::SystemTime)> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reconciles that returned `done`.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Reconciles that returned `requeue` or `requeue-after`.
    pub fn requeued(&self) -> u64 {
        self.requeue.load(Ordering::Relaxed) + self.requeue_after.load(Ordering::Relaxed)
    }

    /// Instances workers gave back after [`IDLE_INSTANCE`](super::IDLE_INSTANCE) with no key.
    pub fn instances_released(&self) -> u64 {
        self.instances_released.load(Ordering::Relaxed)
    }

    /// Count an instance an idle worker gave back.
    pub(super) fn instance_released(&self) {
        self.instances_released.fetch_add(1, Ordering::Relaxed);
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

    pub(super) fn begin(&self, request: &Request) {
        let mut active = self.active.lock().unwrap_or_else(|e| e.into_inner());
        if !active.insert(request.clone()) {
            self.overlaps.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn end(&self, request: &Request) {
        self.active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(request);
    }
}
