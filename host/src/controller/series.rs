//! [`GuestSeries`]: one guest's Prometheus series, each bound the first time it is used and kept
//! — so that a reconcile builds no label and looks up no family, and a series appears in
//! `/metrics` when it first has something to say, as before.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::guest::Totals;
use crate::process::metrics::{
    ControllerLabel, CpuLabels, DirectionLabels, GuestLabel, Metrics, ResultLabels,
};

/// A float counter (seconds).
type Seconds = Counter<f64, AtomicU64>;

/// One guest's series outside its outcome tallies (see `Stats`) and event stages.
#[derive(Debug)]
pub(super) struct GuestSeries {
    metrics: Arc<Metrics>,
    guest: String,
    active_workers: OnceLock<Gauge>,
    reconcile_time: OnceLock<Histogram>,
    cpu: OnceLock<Seconds>,
    memory_peak: OnceLock<Gauge>,
    log_dropped: OnceLock<Counter>,
    cpu_throttled: OnceLock<Seconds>,
    write_throttled: OnceLock<Seconds>,
    quarantined: OnceLock<Counter>,
    /// `krec_guest_map_calls_total` by result: `ok`, `trap`, `error`.
    map_calls: [OnceLock<Counter>; 3],
    /// The guest's ledger as last exported (the counters move by what it gained since).
    exported: std::sync::Mutex<Totals>,
}

/// The results a `map` call is counted under, in [`GuestSeries::map_call`]'s order.
const MAP_RESULTS: [&str; 3] = ["ok", "trap", "error"];

impl GuestSeries {
    /// The series of guest `guest` in `metrics`, none bound yet.
    pub(super) fn new(metrics: Arc<Metrics>, guest: &str) -> Self {
        GuestSeries {
            metrics,
            guest: guest.to_owned(),
            active_workers: OnceLock::new(),
            reconcile_time: OnceLock::new(),
            cpu: OnceLock::new(),
            memory_peak: OnceLock::new(),
            log_dropped: OnceLock::new(),
            cpu_throttled: OnceLock::new(),
            write_throttled: OnceLock::new(),
            quarantined: OnceLock::new(),
            map_calls: Default::default(),
            exported: std::sync::Mutex::default(),
        }
    }

    /// Move the series read from the guest's ledger (`krec_guest_used_cpu_seconds_total`,
    /// `krec_guest_bytes_total`, `krec_guest_memory_bytes`,
    /// `krec_guest_instances_started_total`) to `totals`. A ledger that started again (a new
    /// module's) adds all it has.
    pub(super) fn export(&self, totals: Totals) {
        fn gained<T: PartialOrd + std::ops::Sub<Output = T> + Copy>(now: T, before: T) -> T {
            if now >= before { now - before } else { now }
        }
        let mut exported = self.exported.lock().unwrap_or_else(|e| e.into_inner());
        let m = &self.metrics;
        for (part, now, before) in [
            ("wasm", totals.wasm_cpu, exported.wasm_cpu),
            ("host", totals.host_cpu, exported.host_cpu),
        ] {
            let labels = CpuLabels {
                guest: self.guest.clone(),
                part,
            };
            m.guest_used_cpu
                .get_or_create(&labels)
                .inc_by(gained(now, before).as_secs_f64());
        }
        for (direction, now, before) in [
            ("to_guest", totals.bytes_to_guest, exported.bytes_to_guest),
            (
                "from_guest",
                totals.bytes_from_guest,
                exported.bytes_from_guest,
            ),
        ] {
            let labels = DirectionLabels {
                guest: self.guest.clone(),
                direction,
            };
            m.guest_bytes
                .get_or_create(&labels)
                .inc_by(gained(now, before));
        }
        let label = self.guest();
        m.guest_memory
            .get_or_create(&label)
            .set(i64::try_from(totals.memory_bytes).unwrap_or(i64::MAX));
        m.guest_instances
            .get_or_create(&label)
            .inc_by(gained(totals.instances, exported.instances));
        *exported = totals;
    }

    fn controller(&self) -> ControllerLabel {
        ControllerLabel {
            controller: self.guest.clone(),
        }
    }

    fn guest(&self) -> GuestLabel {
        GuestLabel {
            guest: self.guest.clone(),
        }
    }

    /// `controller_runtime_active_workers`.
    pub(super) fn active_workers(&self) -> &Gauge {
        bound(&self.active_workers, &self.metrics.active_workers, || {
            self.controller()
        })
    }

    /// `controller_runtime_reconcile_time_seconds`.
    pub(super) fn reconcile_time(&self) -> &Histogram {
        bound(&self.reconcile_time, &self.metrics.reconcile_time, || {
            self.controller()
        })
    }

    /// `krec_guest_cpu_seconds_total`.
    pub(super) fn cpu(&self) -> &Seconds {
        bound(&self.cpu, &self.metrics.guest_cpu, || self.guest())
    }

    /// `krec_guest_memory_peak_bytes`.
    pub(super) fn memory_peak(&self) -> &Gauge {
        bound(&self.memory_peak, &self.metrics.guest_memory_peak, || {
            self.guest()
        })
    }

    /// `krec_guest_log_dropped_lines_total`.
    pub(super) fn log_dropped(&self) -> &Counter {
        bound(&self.log_dropped, &self.metrics.log_dropped, || {
            self.guest()
        })
    }

    /// `krec_guest_cpu_throttled_seconds_total`.
    pub(super) fn cpu_throttled(&self) -> &Seconds {
        bound(&self.cpu_throttled, &self.metrics.cpu_throttled, || {
            self.guest()
        })
    }

    /// `krec_guest_write_throttled_seconds_total`.
    pub(super) fn write_throttled(&self) -> &Seconds {
        bound(&self.write_throttled, &self.metrics.write_throttled, || {
            self.guest()
        })
    }

    /// `krec_guest_quarantined_keys_total`.
    pub(super) fn quarantined(&self) -> &Counter {
        bound(&self.quarantined, &self.metrics.quarantined, || {
            self.guest()
        })
    }

    /// `krec_guest_map_calls_total{result}` of a `map` call that returned (`trapped`: trapped;
    /// `failed`: returned an error).
    pub(super) fn map_call(&self, trapped: bool, failed: bool) -> &Counter {
        let index = match (trapped, failed) {
            (true, _) => 1,
            (false, true) => 2,
            (false, false) => 0,
        };
        bound(&self.map_calls[index], &self.metrics.map_calls, || {
            ResultLabels {
                controller: self.guest.clone(),
                result: MAP_RESULTS[index].to_owned(),
            }
        })
    }
}

/// The handle in `cell`, bound to `family`'s series of the labels `labels` builds the first
/// time it is asked for.
fn bound<'a, L, M, C>(
    cell: &'a OnceLock<M>,
    family: &Family<L, M, C>,
    labels: impl FnOnce() -> L,
) -> &'a M
where
    L: Clone + std::hash::Hash + Eq,
    M: Clone,
    C: MetricConstructor<M>,
{
    cell.get_or_init(|| family.get_or_create(&labels()).clone())
}
