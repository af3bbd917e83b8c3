//! [`GuestSeries`]: one guest's Prometheus series, each bound the first time it is used and kept
//! — so that a reconcile builds no label and looks up no family, and a series appears in
//! `/metrics` when it first has something to say, as before.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::guest::{GuestBudgets, Totals};
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
    exported: std::sync::Mutex<Exported>,
}

/// What [`GuestSeries::export`] last moved the counters to, and whose ledger it was.
#[derive(Debug, Default)]
struct Exported {
    /// The budgets (and ledger) of the module version exported last; another one is a ledger
    /// that started from zero.
    from: std::sync::Weak<GuestBudgets>,
    /// The highest figures exported from it.
    totals: Totals,
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
    /// `krec_guest_instances_started_total`) to what `budgets`' ledger says now. The ledger of
    /// another module version started from zero: it adds all it has. Within one ledger a
    /// counter only rises: a figure read lower than before (the Wasm part between a host
    /// call's lap and the charge that includes it) adds nothing until it passes what was
    /// exported. Read under the lock, so two scrapes at once export in order.
    pub(super) fn export(&self, budgets: &Arc<GuestBudgets>) {
        fn gained<T: PartialOrd + std::ops::Sub<Output = T> + Copy + Default>(
            now: T,
            before: T,
        ) -> T {
            if now > before {
                now - before
            } else {
                T::default()
            }
        }
        fn highest<T: PartialOrd + Copy>(now: T, before: T) -> T {
            if now > before { now } else { before }
        }
        let mut exported = self.exported.lock().unwrap_or_else(|e| e.into_inner());
        let totals = budgets.totals();
        let same = exported
            .from
            .upgrade()
            .is_some_and(|from| Arc::ptr_eq(&from, budgets));
        if !same {
            *exported = Exported {
                from: Arc::downgrade(budgets),
                totals: Totals::default(),
            };
        }
        let exported = &mut *exported;
        let m = &self.metrics;
        for (part, now, before) in [
            ("wasm", totals.wasm_cpu, exported.totals.wasm_cpu),
            ("host", totals.host_cpu, exported.totals.host_cpu),
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
            (
                "to_guest",
                totals.bytes_to_guest,
                exported.totals.bytes_to_guest,
            ),
            (
                "from_guest",
                totals.bytes_from_guest,
                exported.totals.bytes_from_guest,
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
            .inc_by(gained(totals.instances, exported.totals.instances));
        let before = &mut exported.totals;
        before.wasm_cpu = highest(totals.wasm_cpu, before.wasm_cpu);
        before.host_cpu = highest(totals.host_cpu, before.host_cpu);
        before.bytes_to_guest = highest(totals.bytes_to_guest, before.bytes_to_guest);
        before.bytes_from_guest = highest(totals.bytes_from_guest, before.bytes_from_guest);
        before.instances = highest(totals.instances, before.instances);
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::guest::{CpuGovernor, MemoryPool};
    use crate::manifest::Manifest;

    fn budgets() -> Arc<GuestBudgets> {
        let text = "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: g}\nspec:\n  module: g.wasm\n  for: {apiVersion: v1, kind: ConfigMap}\n";
        let manifest = Manifest::parse(Path::new("g.yaml"), text).expect("manifest");
        let governor = Arc::new(CpuGovernor::new());
        let host = Arc::new(MemoryPool::new("host", 1 << 30));
        Arc::new(GuestBudgets::new(&manifest, &governor, &host))
    }

    fn wasm_seconds(metrics: &Metrics) -> f64 {
        let text = metrics.encode();
        text.lines()
            .find(|l| {
                l.starts_with("krec_guest_used_cpu_seconds_total{") && l.contains("part=\"wasm\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    }

    #[test]
    fn counters_should_only_rise_and_a_new_ledger_should_add_all_it_has() {
        let metrics = Arc::new(Metrics::new());
        let series = GuestSeries::new(metrics.clone(), "g");
        let first = budgets();
        let _ = first.cpu.charge(Duration::from_millis(10));
        series.export(&first);
        assert!((wasm_seconds(&metrics) - 0.010).abs() < 1e-9);
        // Host work counted before the charge that includes it: the Wasm part reads lower for
        // a moment. The counter stays, and does not jump by the whole again.
        first.ledger.host_work(Duration::from_millis(5));
        series.export(&first);
        assert!((wasm_seconds(&metrics) - 0.010).abs() < 1e-9);
        let _ = first.cpu.charge(Duration::from_millis(10));
        series.export(&first);
        assert!((wasm_seconds(&metrics) - 0.015).abs() < 1e-9);
        // Another module version's ledger, from zero: all it has is added.
        let second = budgets();
        let _ = second.cpu.charge(Duration::from_millis(3));
        series.export(&second);
        assert!((wasm_seconds(&metrics) - 0.018).abs() < 1e-9);
    }
}
