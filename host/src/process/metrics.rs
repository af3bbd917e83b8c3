//! Prometheus metrics, with controller-runtime's and client-go's names and labels so existing
//! dashboards and alerts work, plus krec's own per-guest series.
//!
//! | series | labels | from |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) | each reconcile |
//! | `controller_runtime_reconcile_errors_total` | `controller` | errors and traps |
//! | `controller_runtime_reconcile_time_seconds` | `controller` | histogram |
//! | `controller_runtime_max_concurrent_reconciles` | `controller` | the manifest |
//! | `controller_runtime_active_workers` | `controller` | workers reconciling now |
//! | `workqueue_depth`, `workqueue_adds_total`, `workqueue_retries_total` | `name` | the guest's queue |
//! | `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds` | `name` | histograms |
//! | `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds` | `name` | at scrape |
//! | `leader_election_master_status` | `name` | 1 while leading |
//! | `krec_shard_guest_owned` | `guest` | 1 while this replica holds the guest's Lease (`--shard`) |
//! | `krec_shard_replicas` | | replicas this one sees alive (`--shard`) |
//! | `krec_guest_traps_total` | `guest`, `cause` | traps |
//! | `krec_guest_cpu_seconds_total` | `guest` | time running guest code (reconcile time less time waiting in host calls) |
//! | `krec_guest_used_cpu_seconds_total` | `guest`, `part` (`wasm`, `host`) | CPU time charged to the guest, in its code and in host work done for it (at scrape) |
//! | `krec_guest_bytes_total` | `guest`, `direction` (`to_guest`, `from_guest`) | objects' text copied into and out of the guest (at scrape) |
//! | `krec_guest_memory_bytes` | `guest` | its instances' linear memory now (at scrape) |
//! | `krec_guest_instances_started_total` | `guest` | instances started: cold starts (at scrape) |
//! | `krec_guest_memory_peak_bytes` | `guest` | largest linear memory of an instance |
//! | `krec_guest_module_info` | `guest`, `version`, `digest` | 1 for the loaded version |
//! | `krec_host_calls_total` | `guest`, `verb`, `result` | host calls that reached the cluster |
//! | `krec_read_your_writes_waits_total` | `guest`, `outcome` (`caught_up`, `read_through`) | cached reads that waited for the guest's own write |
//! | `krec_read_your_writes_wait_seconds` | `guest` | histogram of those waits |
//! | `krec_guest_ready` | `guest` | 1 while the guest runs here, 0 while it is refused or loading (at scrape) |
//! | `krec_webhook_verdicts_total` | `webhook`, `verdict` (`allowed`, `denied`, `patched`) | the guests' admission verdicts |
//! | `krec_rollout_decisions_total` | `guest`, `decision` (`promoted`, `rolled_back`) | rollouts decided |
//! | `krec_webhook_certificate_expiry_timestamp_seconds` | `address` | when the admission server's certificate expires (at scrape) |
//! | `krec_shard_leases_lost_total` | `guest` | a guest's Lease lost by this replica: not renewed in time, or taken (`--shard`) |

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `controller` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// The guest's name.
    pub controller: String,
}

/// `controller`, `result` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// The guest's name.
    pub controller: String,
    /// `success`, `error`, `requeue` or `requeue_after`.
    pub result: String,
}

/// `guest`, `part` labels of `krec_guest_used_cpu_seconds_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CpuLabels {
    /// The guest's name.
    pub guest: String,
    /// `wasm` (its own code) or `host` (host work done for it).
    pub part: &'static str,
}

/// `guest`, `direction` labels of `krec_guest_bytes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    /// The guest's name.
    pub guest: String,
    /// `to_guest` or `from_guest`.
    pub direction: &'static str,
}

/// `controller`, `stage` labels of `krec_event_stage_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// The guest's name.
    pub controller: String,
    /// One of [`STAGES`].
    pub stage: &'static str,
}

/// The stages of `krec_event_stage_seconds`, in the order an event passes them:
///
/// | stage | from | to |
/// |---|---|---|
/// | `handler` | the informer receives a watch event | its requests are in the workqueue |
/// | `queue` | a key enters the workqueue | a worker takes it |
/// | `start` | a worker takes a key | the guest's reconcile is entered (instance ready) |
/// | `first_call` | the guest is entered | its first host call starts (reconciles without one are not observed) |
/// | `guest` | the guest is entered | its reconcile returns |
/// | `event_to_guest` | the informer receives a watch event | the guest is entered for it |
///
/// `event_to_guest` spans `handler`, `queue` and `start` for one event (their sum, which
/// percentiles of the separate stages cannot give). A key several events were deduplicated into
/// counts from the first; an event for a key being reconciled waits for that reconcile, and
/// counts it. Retries, delayed requeues, resyncs, tickers and the requests a guest's `map`
/// export returns (computed later, off the event) are not observed.
pub const STAGES: [&str; 6] = [
    "handler",
    "queue",
    "start",
    "first_call",
    "guest",
    "event_to_guest",
];

/// One controller's `krec_event_stage_seconds` series, one per stage (see [`STAGES`]), each
/// bound the first time it is observed: an idle guest carries none of their buckets, and an
/// observation after the first looks nothing up and allocates nothing.
#[derive(Debug)]
pub struct StageSeries {
    family: HistogramFamily<StageLabels>,
    controller: String,
    /// In [`STAGES`]' order.
    series: [std::sync::OnceLock<Histogram>; 6],
}

impl StageSeries {
    /// The series of `stage` (an index into [`STAGES`]).
    fn stage(&self, stage: usize) -> &Histogram {
        self.series[stage].get_or_init(|| {
            self.family
                .get_or_create(&StageLabels {
                    controller: self.controller.clone(),
                    stage: STAGES[stage],
                })
                .clone()
        })
    }

    /// `handler`: watch event received → requests enqueued.
    pub fn handler(&self) -> &Histogram {
        self.stage(0)
    }

    /// `queue`: enqueued → taken by a worker.
    pub fn queue(&self) -> &Histogram {
        self.stage(1)
    }

    /// `start`: taken → guest entered.
    pub fn start(&self) -> &Histogram {
        self.stage(2)
    }

    /// `first_call`: guest entered → first host call.
    pub fn first_call(&self) -> &Histogram {
        self.stage(3)
    }

    /// `guest`: guest entered → returned.
    pub fn guest(&self) -> &Histogram {
        self.stage(4)
    }

    /// `event_to_guest`: watch event received → guest entered for it.
    pub fn event_to_guest(&self) -> &Histogram {
        self.stage(5)
    }
}

/// `name` label (workqueues and leader election).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// The queue's (guest's) or lease's name.
    pub name: String,
}

/// `guest` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuestLabel {
    /// The guest's name.
    pub guest: String,
}

/// `guest`, `outcome` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// The guest's name.
    pub guest: String,
    /// `caught_up` or `read_through`; for `krec_shadow_reconciles_total`, `same`,
    /// `diverged`, `error`, `trap` or `skipped`.
    pub outcome: &'static str,
}

/// `guest`, `cause` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrapLabels {
    /// The guest's name.
    pub guest: String,
    /// The trap's cause.
    pub cause: String,
}

/// `guest`, `version`, `digest` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModuleLabels {
    /// The guest's name.
    pub guest: String,
    /// The version number (1, then counting swaps).
    pub version: String,
    /// `sha256:...` of the module.
    pub digest: String,
}

/// `guest`, `verb`, `result` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The guest's name.
    pub guest: String,
    /// `get`, `list`, `create`, `update`, `patch`, `delete`, `event`.
    pub verb: String,
    /// `ok` or the error kind (`not_found`, `conflict`, ...).
    pub result: String,
}

/// Labels of `krec_manifest_reloads_total`: what a reload did.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `changed` (a guest started, swapped or stopped, nothing refused), `unchanged`, or
    /// `refused` (something was refused, or the directory could not be read).
    pub result: String,
}

/// Labels of the webhook series: which webhook.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    /// The webhook's path, e.g. `/validate/foo-validator` (controller-runtime's label).
    pub webhook: String,
}

/// Labels of `controller_runtime_webhook_requests_total`: webhook and code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookCodeLabels {
    /// The webhook's path.
    pub webhook: String,
    /// The HTTP status code answered.
    pub code: String,
}

/// Labels of `krec_webhook_verdicts_total`: webhook and verdict.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    /// The webhook's path.
    pub webhook: String,
    /// `allowed`, `denied`, or `patched` (allowed with changes).
    pub verdict: &'static str,
}

/// Labels of `krec_rollout_decisions_total`: guest and decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// The guest's name.
    pub guest: String,
    /// `promoted` or `rolled_back`.
    pub decision: &'static str,
}

/// `address` label: a server's listening address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabel {
    /// `host:port`.
    pub address: String,
}

/// The verdicts of `krec_webhook_verdicts_total`.
const VERDICTS: [&str; 3] = ["allowed", "denied", "patched"];

/// The decisions of `krec_rollout_decisions_total`.
const DECISIONS: [&str; 2] = ["promoted", "rolled_back"];

/// A family declared (`# HELP`, `# TYPE`) even while it has no series, so that a scrape
/// shows every family the host exports — those that count only what has not happened yet too.
#[derive(Debug)]
struct Declared<M>(M);

impl<M: EncodeMetric> EncodeMetric for Declared<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        false
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn reconcile_buckets() -> Histogram {
    // controller-runtime's buckets, 5 ms to 60 s.
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

fn webhook_buckets() -> Histogram {
    // Prometheus' default buckets, which controller-runtime's webhook latency uses; with
    // finer ones below, where a Wasm webhook answers.
    Histogram::new([
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
        5.0, 10.0,
    ])
}

fn stage_buckets() -> Histogram {
    // 1 µs to about 4 s by factors of 2: the stages inside the host are micro- to milliseconds,
    // and a percentile read from the buckets is within a factor of 2 (interpolated, closer).
    Histogram::new(exponential_buckets(1e-6, 2.0, 23))
}

fn queue_buckets() -> Histogram {
    // client-go's workqueue buckets: 1 ns to 10^3 s by factors of 10... from 10 ns.
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// The label values a guest's series were made with beyond its name (trap causes, host calls,
/// webhook answers), so that [`Metrics::forget_guest`] removes every one of them.
#[derive(Debug, Default)]
struct Made {
    traps: std::collections::BTreeSet<&'static str>,
    calls: std::collections::BTreeSet<(&'static str, &'static str)>,
    webhook_codes: std::collections::BTreeSet<(String, u16)>,
}

/// Every series the host exports. Shared (`Arc`) by the controllers and the admin server.
pub struct Metrics {
    registry: Registry,
    /// Per guest, the label values of its series with more labels than its name.
    made: std::sync::Mutex<std::collections::HashMap<String, Made>>,
    /// `controller_runtime_reconcile_total`.
    pub reconcile_total: Family<ResultLabels, Counter>,
    /// `controller_runtime_reconcile_errors_total`.
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    /// `controller_runtime_reconcile_time_seconds`.
    pub reconcile_time: HistogramFamily<ControllerLabel>,
    /// `controller_runtime_max_concurrent_reconciles`.
    pub max_concurrent: Family<ControllerLabel, Gauge>,
    /// `controller_runtime_active_workers`.
    pub active_workers: Family<ControllerLabel, Gauge>,
    /// `workqueue_depth`.
    pub queue_depth: Family<NameLabel, Gauge>,
    /// `workqueue_adds_total`.
    pub queue_adds: Family<NameLabel, Counter>,
    /// `workqueue_queue_duration_seconds`.
    pub queue_duration: HistogramFamily<NameLabel>,
    /// `workqueue_work_duration_seconds`.
    pub work_duration: HistogramFamily<NameLabel>,
    /// `workqueue_unfinished_work_seconds`.
    pub unfinished_work: Family<NameLabel, FloatGauge>,
    /// `workqueue_longest_running_processor_seconds`.
    pub longest_running: Family<NameLabel, FloatGauge>,
    /// `workqueue_retries_total`.
    pub queue_retries: Family<NameLabel, Counter>,
    /// `leader_election_master_status`.
    pub leader: Family<NameLabel, Gauge>,
    /// `krec_shard_guest_owned`.
    pub shard_owned: Family<GuestLabel, Gauge>,
    /// `krec_shard_replicas`.
    pub shard_replicas: Gauge,
    /// `krec_guest_traps_total`.
    pub traps: Family<TrapLabels, Counter>,
    /// `krec_guest_cpu_seconds_total`.
    pub guest_cpu: Family<GuestLabel, Counter<f64, AtomicU64>>,
    /// `krec_guest_memory_peak_bytes`.
    pub guest_memory_peak: Family<GuestLabel, Gauge>,
    /// `krec_guest_used_cpu_seconds_total`.
    pub guest_used_cpu: Family<CpuLabels, Counter<f64, AtomicU64>>,
    /// `krec_guest_bytes_total`.
    pub guest_bytes: Family<DirectionLabels, Counter>,
    /// `krec_guest_memory_bytes`.
    pub guest_memory: Family<GuestLabel, Gauge>,
    /// `krec_guest_instances_started_total`.
    pub guest_instances: Family<GuestLabel, Counter>,
    /// `krec_guest_module_info`.
    pub module_info: Family<ModuleLabels, Gauge>,
    /// `krec_host_calls_total`.
    pub host_calls: Family<CallLabels, Counter>,
    /// `krec_guest_log_dropped_lines_total`.
    pub log_dropped: Family<GuestLabel, Counter>,
    /// `krec_guest_cpu_throttled_seconds_total`.
    pub cpu_throttled: Family<GuestLabel, Counter<f64, AtomicU64>>,
    /// `krec_guest_write_throttled_seconds_total`.
    pub write_throttled: Family<GuestLabel, Counter<f64, AtomicU64>>,
    /// `krec_guest_quarantined_keys_total`.
    pub quarantined: Family<GuestLabel, Counter>,
    /// `krec_guest_map_calls_total`: calls of guests' `map` exports, by result (`ok`, `error`,
    /// `trap`).
    pub map_calls: Family<ResultLabels, Counter>,
    /// `krec_read_your_writes_waits_total`: cached reads that waited for the cache to reflect
    /// the guest's own write, by outcome (`caught_up`, `read_through` after the bound).
    pub ryw_waits: Family<OutcomeLabels, Counter>,
    /// `krec_read_your_writes_wait_seconds`: how long those reads waited.
    pub ryw_wait: HistogramFamily<GuestLabel>,
    /// `krec_event_stage_seconds`: time an event spends in each stage inside the host
    /// ([`STAGES`]).
    pub event_stage: HistogramFamily<StageLabels>,
    /// `controller_runtime_webhook_requests_total`.
    pub webhook_requests: Family<WebhookCodeLabels, Counter>,
    /// `controller_runtime_webhook_latency_seconds`.
    pub webhook_latency: HistogramFamily<WebhookLabel>,
    /// `controller_runtime_webhook_requests_in_flight`.
    pub webhook_in_flight: Family<WebhookLabel, Gauge>,
    /// `krec_manifest_reloads_total`: reloads of the manifest directory, by result.
    pub reloads: Family<ReloadLabels, Counter>,
    /// `krec_shadow_reconciles_total`: a candidate's shadow reconciles compared with the
    /// live version's, by outcome (`same`, `diverged`, `error`, `trap`, `skipped`).
    pub shadow_reconciles: Family<OutcomeLabels, Counter>,
    /// `krec_guest_ready`: 1 while the guest runs, 0 while it is refused or loading (set at
    /// scrape by the guests' manager).
    pub guest_ready: Family<GuestLabel, Gauge>,
    /// `krec_webhook_verdicts_total`: the guests' admission verdicts.
    pub webhook_verdicts: Family<VerdictLabels, Counter>,
    /// `krec_rollout_decisions_total`: rollouts promoted or rolled back.
    pub rollout_decisions: Family<DecisionLabels, Counter>,
    /// `krec_webhook_certificate_expiry_timestamp_seconds`: set at each scrape from the
    /// certificates [`Self::watch_certificate`] was given.
    pub certificate_expiry: Family<AddressLabel, Gauge>,
    /// `krec_shard_leases_lost_total`.
    pub leases_lost: Family<GuestLabel, Counter>,
    /// The admission servers' certificates, by address, while they serve.
    certificates: std::sync::Mutex<Vec<(String, std::sync::Weak<krec_net::tls::ServingCert>)>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Note a label value of `guest`'s series, unless its series exists already.
    /// Count one in `family`'s series of `labels`, a series of `guest`'s: an existing one with
    /// a single lookup (a host call's path); a new one noted by `add` first, for
    /// [`forget_guest`](Self::forget_guest).
    fn count<L>(
        &self,
        family: &Family<L, Counter>,
        labels: &L,
        guest: &str,
        add: impl FnOnce(&mut Made),
    ) where
        L: Clone
            + std::hash::Hash
            + Eq
            + prometheus_client::encoding::EncodeLabelSet
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        if let Some(counter) = family.get(labels) {
            counter.inc();
            return;
        }
        add(self
            .made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(guest.to_owned())
            .or_default());
        family.get_or_create(labels).inc();
    }

    /// Count a trap of `guest`'s (`krec_guest_traps_total`), by its cause.
    pub fn count_trap(&self, guest: &str, cause: &'static str) {
        let labels = TrapLabels {
            guest: guest.to_owned(),
            cause: cause.to_owned(),
        };
        self.count(&self.traps, &labels, guest, |made| {
            made.traps.insert(cause);
        });
    }

    /// Count a host call of `guest`'s (`krec_host_calls_total`), by verb and result.
    pub fn count_call(&self, guest: &str, verb: &'static str, result: &'static str) {
        let labels = CallLabels {
            guest: guest.to_owned(),
            verb: verb.to_owned(),
            result: result.to_owned(),
        };
        self.count(&self.host_calls, &labels, guest, |made| {
            made.calls.insert((verb, result));
        });
    }

    /// Count an admission request answered by `guest`'s webhook at `path`
    /// (`controller_runtime_webhook_requests_total`), by status code.
    pub fn count_webhook_request(&self, guest: &str, path: &str, code: u16) {
        let labels = WebhookCodeLabels {
            webhook: path.to_owned(),
            code: code.to_string(),
        };
        self.count(&self.webhook_requests, &labels, guest, |made| {
            made.webhook_codes.insert((path.to_owned(), code));
        });
    }

    /// Remove every series of `guest` (its manifest is gone): a deleted guest leaves no series
    /// behind, and one of the same name starts from zero.
    pub fn forget_guest(&self, guest: &str) {
        let made = self
            .made
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(guest)
            .unwrap_or_default();
        let controller = ControllerLabel {
            controller: guest.to_owned(),
        };
        let name = NameLabel {
            name: guest.to_owned(),
        };
        let label = GuestLabel {
            guest: guest.to_owned(),
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            self.reconcile_total.remove(&ResultLabels {
                controller: guest.to_owned(),
                result: result.to_owned(),
            });
        }
        for result in ["ok", "error", "trap"] {
            self.map_calls.remove(&ResultLabels {
                controller: guest.to_owned(),
                result: result.to_owned(),
            });
        }
        self.reconcile_errors.remove(&controller);
        self.reconcile_time.remove(&controller);
        self.max_concurrent.remove(&controller);
        self.active_workers.remove(&controller);
        self.queue_depth.remove(&name);
        self.queue_adds.remove(&name);
        self.queue_duration.remove(&name);
        self.work_duration.remove(&name);
        self.unfinished_work.remove(&name);
        self.longest_running.remove(&name);
        self.queue_retries.remove(&name);
        self.shard_owned.remove(&label);
        self.guest_cpu.remove(&label);
        self.guest_memory_peak.remove(&label);
        for part in ["wasm", "host"] {
            self.guest_used_cpu.remove(&CpuLabels {
                guest: guest.to_owned(),
                part,
            });
        }
        for direction in ["to_guest", "from_guest"] {
            self.guest_bytes.remove(&DirectionLabels {
                guest: guest.to_owned(),
                direction,
            });
        }
        self.guest_memory.remove(&label);
        self.guest_instances.remove(&label);
        self.log_dropped.remove(&label);
        self.cpu_throttled.remove(&label);
        self.write_throttled.remove(&label);
        self.quarantined.remove(&label);
        self.ryw_wait.remove(&label);
        for outcome in ["caught_up", "read_through"] {
            self.ryw_waits.remove(&OutcomeLabels {
                guest: guest.to_owned(),
                outcome,
            });
        }
        for outcome in ["same", "diverged", "error", "trap", "skipped"] {
            self.shadow_reconciles.remove(&OutcomeLabels {
                guest: guest.to_owned(),
                outcome,
            });
        }
        for stage in STAGES {
            self.event_stage.remove(&StageLabels {
                controller: guest.to_owned(),
                stage,
            });
        }
        for which in ["validate", "mutate"] {
            let webhook = WebhookLabel {
                webhook: format!("/{which}/{guest}"),
            };
            self.webhook_latency.remove(&webhook);
            self.webhook_in_flight.remove(&webhook);
            for verdict in VERDICTS {
                self.webhook_verdicts.remove(&VerdictLabels {
                    webhook: webhook.webhook.clone(),
                    verdict,
                });
            }
        }
        for decision in DECISIONS {
            self.rollout_decisions.remove(&DecisionLabels {
                guest: guest.to_owned(),
                decision,
            });
        }
        self.guest_ready.remove(&label);
        self.leases_lost.remove(&label);
        for cause in made.traps {
            self.traps.remove(&TrapLabels {
                guest: guest.to_owned(),
                cause: cause.to_owned(),
            });
        }
        for (verb, result) in made.calls {
            self.host_calls.remove(&CallLabels {
                guest: guest.to_owned(),
                verb: verb.to_owned(),
                result: result.to_owned(),
            });
        }
        for (webhook, code) in made.webhook_codes {
            self.webhook_requests.remove(&WebhookCodeLabels {
                webhook,
                code: code.to_string(),
            });
        }
    }

    /// Every series registered, all empty.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_buckets),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_buckets),
            work_duration: Family::new_with_constructor(queue_buckets),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            queue_retries: Family::default(),
            leader: Family::default(),
            shard_owned: Family::default(),
            shard_replicas: Gauge::default(),
            traps: Family::default(),
            guest_cpu: Family::default(),
            guest_memory_peak: Family::default(),
            guest_used_cpu: Family::default(),
            guest_bytes: Family::default(),
            guest_memory: Family::default(),
            guest_instances: Family::default(),
            module_info: Family::default(),
            host_calls: Family::default(),
            log_dropped: Family::default(),
            cpu_throttled: Family::default(),
            write_throttled: Family::default(),
            quarantined: Family::default(),
            map_calls: Family::default(),
            ryw_waits: Family::default(),
            shadow_reconciles: Family::default(),
            ryw_wait: Family::new_with_constructor(stage_buckets),
            event_stage: Family::new_with_constructor(stage_buckets),
            webhook_requests: Family::default(),
            webhook_latency: Family::new_with_constructor(webhook_buckets),
            webhook_in_flight: Family::default(),
            reloads: Family::default(),
            guest_ready: Family::default(),
            webhook_verdicts: Family::default(),
            rollout_decisions: Family::default(),
            certificate_expiry: Family::default(),
            leases_lost: Family::default(),
            certificates: std::sync::Mutex::default(),
            registry: Registry::default(),
            made: std::sync::Mutex::default(),
        };
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            Declared(m.reconcile_total.clone()),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            Declared(m.reconcile_errors.clone()),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            Declared(m.reconcile_time.clone()),
        );
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code",
            Declared(m.webhook_requests.clone()),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            Declared(m.webhook_latency.clone()),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served",
            Declared(m.webhook_in_flight.clone()),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            Declared(m.max_concurrent.clone()),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            Declared(m.active_workers.clone()),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            Declared(m.queue_depth.clone()),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            Declared(m.queue_adds.clone()),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            Declared(m.queue_duration.clone()),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            Declared(m.work_duration.clone()),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            Declared(m.unfinished_work.clone()),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            Declared(m.longest_running.clone()),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            Declared(m.queue_retries.clone()),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            Declared(m.leader.clone()),
        );
        registry.register(
            "krec_shard_guest_owned",
            "1 while this replica holds the guest's Lease and runs it (sharded hosts)",
            Declared(m.shard_owned.clone()),
        );
        registry.register(
            "krec_shard_replicas",
            "Replicas of the shard group this one sees alive, itself included",
            Declared(m.shard_replicas.clone()),
        );
        registry.register(
            "krec_guest_traps",
            "Reconciles that trapped, per guest and cause",
            Declared(m.traps.clone()),
        );
        registry.register(
            "krec_guest_cpu_seconds",
            "Time spent running guest code: reconcile time less time waiting in host calls",
            Declared(m.guest_cpu.clone()),
        );
        registry.register(
            "krec_guest_memory_peak_bytes",
            "Largest linear memory of any instance of the guest",
            Declared(m.guest_memory_peak.clone()),
        );
        registry.register(
            "krec_guest_used_cpu_seconds",
            "CPU time charged to the guest, in its own code (part=wasm) and in host work done for it (part=host)",
            Declared(m.guest_used_cpu.clone()),
        );
        registry.register(
            "krec_guest_bytes",
            "Objects' text copied into (to_guest) and out of (from_guest) the guest by its host calls",
            Declared(m.guest_bytes.clone()),
        );
        registry.register(
            "krec_guest_memory_bytes",
            "Linear memory of the guest's instances now",
            Declared(m.guest_memory.clone()),
        );
        registry.register(
            "krec_guest_instances_started",
            "Instances of the guest started (cold starts)",
            Declared(m.guest_instances.clone()),
        );
        registry.register(
            "krec_guest_module_info",
            "The module version a guest runs (value 1)",
            Declared(m.module_info.clone()),
        );
        registry.register(
            "krec_host_calls",
            "Host calls that reached the cluster, per guest, verb and result",
            Declared(m.host_calls.clone()),
        );
        registry.register(
            "krec_guest_log_dropped_lines",
            "Guest log lines dropped for being over the guest's log budget",
            Declared(m.log_dropped.clone()),
        );
        registry.register(
            "krec_guest_cpu_throttled_seconds",
            "Time guest code was held back for being over the guest's CPU budget",
            Declared(m.cpu_throttled.clone()),
        );
        registry.register(
            "krec_guest_write_throttled_seconds",
            "Time guest writes waited for the guest's write rate limit",
            Declared(m.write_throttled.clone()),
        );
        registry.register(
            "krec_shadow_reconciles",
            "A candidate version's shadow reconciles, by outcome against the live version's: same, diverged, error, trap, or skipped (over its CPU share)",
            Declared(m.shadow_reconciles.clone()),
        );
        registry.register(
            "krec_guest_quarantined_keys",
            "Times a key was quarantined after trapping again and again",
            Declared(m.quarantined.clone()),
        );
        registry.register(
            "krec_manifest_reloads",
            "Reloads of the manifest directory (a file changed, SIGHUP, or a retry of what was refused), by result: changed, unchanged or refused",
            Declared(m.reloads.clone()),
        );
        registry.register(
            "krec_guest_map_calls",
            "Calls of a guest's map function (watches with mapByGuest), by result: ok, error or trap",
            Declared(m.map_calls.clone()),
        );
        registry.register(
            "krec_read_your_writes_waits",
            "Cached reads that waited for the cache to reflect the guest's own earlier write, by outcome: caught_up, or read_through (the API server answered after the wait's bound)",
            Declared(m.ryw_waits.clone()),
        );
        registry.register(
            "krec_read_your_writes_wait_seconds",
            "How long cached reads waited for the cache to reflect the guest's own write",
            Declared(m.ryw_wait.clone()),
        );
        registry.register(
            "krec_event_stage_seconds",
            "Time a watch event spends in each stage inside the host: handler (received to enqueued), queue (enqueued to taken by a worker), start (taken to guest entered), first_call (entered to first host call), guest (entered to returned)",
            Declared(m.event_stage.clone()),
        );
        registry.register(
            "krec_guest_ready",
            "1 while the guest runs on this host, 0 while it is refused or loading",
            Declared(m.guest_ready.clone()),
        );
        registry.register(
            "krec_webhook_verdicts",
            "The guests' admission verdicts: allowed, denied, or patched (allowed with changes)",
            Declared(m.webhook_verdicts.clone()),
        );
        registry.register(
            "krec_rollout_decisions",
            "Rollouts decided, by decision: promoted or rolled_back",
            Declared(m.rollout_decisions.clone()),
        );
        registry.register(
            "krec_webhook_certificate_expiry_timestamp_seconds",
            "When the admission server's serving certificate expires (Unix time)",
            Declared(m.certificate_expiry.clone()),
        );
        registry.register(
            "krec_shard_leases_lost",
            "Times this replica lost a guest's Lease: not renewed within the deadline, or taken by another replica",
            Declared(m.leases_lost.clone()),
        );
        Metrics { registry, ..m }
    }

    /// Export when `cert` (the admission server's on `address`) expires, while it lives.
    pub fn watch_certificate(&self, address: String, cert: &Arc<krec_net::tls::ServingCert>) {
        self.certificates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((address, Arc::downgrade(cert)));
    }

    /// Create `guest`'s series that count what goes wrong at zero — a trap of each of
    /// `causes`, a quarantine, a rollout decided, and for each of its webhooks (paths in
    /// `webhooks`) the answers 200 and 500 and each verdict — as controller-runtime creates its
    /// error counters: a `rate` or `increase` over a series sees its first event only if the
    /// series existed before it.
    pub fn init_guest(&self, guest: &str, causes: &[&'static str], webhooks: &[String]) {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let made = made.entry(guest.to_owned()).or_default();
        for &cause in causes {
            made.traps.insert(cause);
            let _ = self.traps.get_or_create(&TrapLabels {
                guest: guest.to_owned(),
                cause: cause.to_owned(),
            });
        }
        let label = GuestLabel {
            guest: guest.to_owned(),
        };
        let _ = self.quarantined.get_or_create(&label);
        for decision in DECISIONS {
            let _ = self.rollout_decisions.get_or_create(&DecisionLabels {
                guest: guest.to_owned(),
                decision,
            });
        }
        for path in webhooks {
            for code in [200, 500] {
                made.webhook_codes.insert((path.clone(), code));
                let _ = self.webhook_requests.get_or_create(&WebhookCodeLabels {
                    webhook: path.clone(),
                    code: code.to_string(),
                });
            }
            for verdict in VERDICTS {
                let _ = self.webhook_verdicts.get_or_create(&VerdictLabels {
                    webhook: path.clone(),
                    verdict,
                });
            }
        }
    }

    /// Count an admission verdict of the webhook at `path` (`krec_webhook_verdicts_total`).
    pub fn count_verdict(&self, path: &str, verdict: &'static str) {
        let labels = VerdictLabels {
            webhook: path.to_owned(),
            verdict,
        };
        self.webhook_verdicts.get_or_create(&labels).inc();
    }

    /// Count a rollout of `guest` decided (`krec_rollout_decisions_total`).
    pub fn count_decision(&self, guest: &str, promoted: bool) {
        let labels = DecisionLabels {
            guest: guest.to_owned(),
            decision: if promoted { "promoted" } else { "rolled_back" },
        };
        self.rollout_decisions.get_or_create(&labels).inc();
    }

    /// Count `guest`'s Lease lost by this replica (`krec_shard_leases_lost_total`).
    pub fn count_lease_lost(&self, guest: &str) {
        let label = GuestLabel {
            guest: guest.to_owned(),
        };
        self.leases_lost.get_or_create(&label).inc();
    }

    /// Set the certificates' expiry from those still served; forget the others.
    fn refresh_certificates(&self) {
        let mut certificates = self.certificates.lock().unwrap_or_else(|e| e.into_inner());
        certificates.retain(|(address, cert)| {
            let label = AddressLabel {
                address: address.clone(),
            };
            match cert.upgrade().and_then(|c| c.not_after()) {
                Some(expiry) => {
                    self.certificate_expiry.get_or_create(&label).set(expiry);
                    true
                }
                None => {
                    self.certificate_expiry.remove(&label);
                    cert.strong_count() > 0
                }
            }
        });
    }

    /// `controller`'s series of `krec_event_stage_seconds`, each created when first observed.
    pub fn stages(&self, controller: &str) -> StageSeries {
        StageSeries {
            family: self.event_stage.clone(),
            controller: controller.to_owned(),
            series: Default::default(),
        }
    }

    /// The text exposition (OpenMetrics, which Prometheus scrapes).
    pub fn encode(&self) -> String {
        self.refresh_certificates();
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!("encoding metrics: {err}");
        }
        out
    }

    /// The queue observer of guest `name`.
    pub fn queue_observer(self: &Arc<Self>, name: &str) -> Arc<dyn QueueObserver> {
        Arc::new(QueueMetrics {
            metrics: self.clone(),
            stages: self.stages(name),
            label: NameLabel {
                name: name.to_owned(),
            },
        })
    }
}

struct QueueMetrics {
    metrics: Arc<Metrics>,
    /// Its controller's `krec_event_stage_seconds` (this observes `queue`).
    stages: StageSeries,
    label: NameLabel,
}

impl QueueObserver for QueueMetrics {
    fn added(&self) {
        self.metrics.queue_adds.get_or_create(&self.label).inc();
    }

    fn taken(&self, waited: Duration) {
        self.metrics
            .queue_duration
            .get_or_create(&self.label)
            .observe(waited.as_secs_f64());
        self.stages.queue().observe(waited.as_secs_f64());
    }

    fn finished(&self, worked: Duration) {
        self.metrics
            .work_duration
            .get_or_create(&self.label)
            .observe(worked.as_secs_f64());
    }

    fn retried(&self) {
        self.metrics.queue_retries.get_or_create(&self.label).inc();
    }
}
/// Told what a queue does, for metrics (client-go's `MetricsProvider`). Called outside the
/// queue's lock.
pub trait QueueObserver: Send + Sync {
    /// A key entered the queue (not counted when it was already waiting).
    fn added(&self);
    /// A key was handed out after waiting `waited` in the queue.
    fn taken(&self, waited: Duration);
    /// A key's processing ended after `worked`.
    fn finished(&self, worked: Duration);
    /// A key was re-added through the rate limiter.
    fn retried(&self);
}
