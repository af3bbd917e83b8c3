//! Event received → reconciler entered, inside the controller runtime, at a steady rate of watch
//! events: krec (`bench/pod-stamper` as a Wasm guest) against kube-rs's `Controller` (the same
//! decision, [`pod_stamper::stamp`], on the objects of its own reflector, which drops
//! `managedFields` as krec's cache does), interleaved in one run.
//!
//! The embedded API server runs in this process on a runtime of its own; a driver thread
//! changes a label on its Pods (read-only ones: the reconciler reads and decides, never writes)
//! straight in its store, at 1 000 and 10 000 changes per second, round robin over 10 000 Pods,
//! so the load costs no HTTP and every change reaches the controller as one watch event.
//!
//! - krec: `krec_event_stage_seconds{stage="event_to_guest"}` — from the informer applying
//!   the event to the cache to the guest's reconcile entered — and, for where the time goes,
//!   the `handler`, `queue` and `start` stages;
//! - kube-rs: the same two instants, taken around its controller: when the reflector's stream
//!   yields the object (after the store applied it) and when the reconcile function is entered.
//!
//! Both are read from the same buckets (factors of 2 from 1 µs) and interpolated as
//! Prometheus' `histogram_quantile` does; kube-rs's exact percentiles are reported beside, as
//! a check on the interpolation. A key changed again before its reconcile counts from its
//! first change, in both. Figures: `event_latency_{rate}_{p50,p99}_us` per arm and their ratios
//! krec / kube-rs, with the events per second the driver reached.
//!
//! `KREC_BENCH_QUICK=1` runs one round of shorter phases. Needs `make guests`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{median_min_max, percentile, quick};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use krec::guest::ModuleCache;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_apiserver::Store;
use krec_apiserver::store::WriteOptions;
use kube::api::Api;
use kube::runtime::controller;
use pod_stamper::{GENERATION, READ_ONLY};
use serde_json::{Value, json};

const NS: &str = "latency";
/// Pods the driver changes, round robin.
const PODS: usize = 10_000;
/// Changes per second, one phase each.
const RATES: [u32; 2] = [1_000, 10_000];
/// Workers per arm (`maxConcurrentReconciles`, kube-rs `concurrency`).
const WORKERS: u16 = 2;
const GUEST: &str = "pod-stamper";
/// Upper bounds of the buckets, seconds: krec's stage buckets (1 µs · 2^i).
const BUCKETS: usize = 23;

fn bucket_bounds() -> Vec<f64> {
    (0..BUCKETS).map(|i| 1e-6 * 2f64.powi(i as i32)).collect()
}

/// The `q` quantile of cumulative bucket counts (`counts[i]`: observations ≤ `bounds[i]`;
/// `total` with the +Inf bucket), interpolated linearly inside the bucket, as Prometheus'
/// `histogram_quantile`. Seconds; `NaN` without observations.
fn histogram_quantile(q: f64, bounds: &[f64], counts: &[f64], total: f64) -> f64 {
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = q * total;
    let mut below = 0.0;
    for (i, (&bound, &count)) in bounds.iter().zip(counts).enumerate() {
        if count >= rank {
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            let inside = count - below;
            return if inside <= 0.0 {
                bound
            } else {
                lower + (bound - lower) * (rank - below) / inside
            };
        }
        below = count;
    }
    // Past the last finite bucket: Prometheus answers its bound.
    bounds.last().copied().unwrap_or(f64::NAN)
}

/// One series' cumulative bucket counts and total count.
#[derive(Clone, Debug, Default)]
struct Buckets {
    counts: Vec<f64>,
    total: f64,
}

impl Buckets {
    /// What was observed between `earlier` and `self`.
    fn since(&self, earlier: &Buckets) -> Buckets {
        Buckets {
            counts: self
                .counts
                .iter()
                .zip(earlier.counts.iter().chain(std::iter::repeat(&0.0)))
                .map(|(a, b)| a - b)
                .collect(),
            total: self.total - earlier.total,
        }
    }

    fn quantile_us(&self, q: f64) -> f64 {
        histogram_quantile(q, &bucket_bounds(), &self.counts, self.total) * 1e6
    }

    /// Buckets of exact samples (seconds).
    fn of_samples(samples: &[f64]) -> Buckets {
        let counts = bucket_bounds()
            .iter()
            .map(|bound| samples.iter().filter(|s| **s <= *bound).count() as f64)
            .collect();
        Buckets {
            counts,
            total: samples.len() as f64,
        }
    }
}

/// `krec_event_stage_seconds{controller="pod-stamper",stage}` from the manager's exposition.
fn stage_buckets(exposition: &str, stage: &str) -> Buckets {
    let series = format!("controller=\"{GUEST}\",stage=\"{stage}\"");
    let mut buckets = Buckets::default();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("krec_event_stage_seconds_") else {
            continue;
        };
        if !rest.contains(&series) {
            continue;
        }
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if rest.starts_with("bucket{") {
            if !rest.contains("le=\"+Inf\"") {
                buckets.counts.push(value());
            }
        } else if rest.starts_with("count{") {
            buckets.total = value();
        }
    }
    buckets
}

fn pod(i: usize) -> Value {
    let mut pod = common::pod(NS, &format!("p-{i:05}"));
    pod["metadata"]["labels"][GENERATION] = json!("0");
    pod["metadata"]["labels"][READ_ONLY] = json!("true");
    pod
}

fn setup(store: &Store) {
    common::store_namespace(store, NS);
    let pods = store.registry().by_plural("", "v1", "pods").expect("pods");
    for i in 0..PODS {
        store
            .create(&pods, Some(NS), pod(i), false)
            .expect("create pod");
    }
}

/// Change a label on Pods round robin at `rate` per second for `seconds`, straight in the
/// store; the rate reached.
fn drive(store: &Store, rate: u32, seconds: f64, round: &str) -> f64 {
    let pods = store.registry().by_plural("", "v1", "pods").expect("pods");
    let total = (f64::from(rate) * seconds) as usize;
    let start = Instant::now();
    for n in 0..total {
        let due = start + Duration::from_secs_f64(n as f64 / f64::from(rate));
        let now = Instant::now();
        if due > now + Duration::from_micros(500) {
            std::thread::sleep(due - now);
        }
        let name = format!("p-{:05}", n % PODS);
        let value = format!("{round}-{n}");
        store
            .patch(
                &pods,
                Some(NS),
                &name,
                false,
                WriteOptions::default(),
                |current| {
                    let mut pod = current.cloned().unwrap_or_default();
                    pod["metadata"]["labels"][GENERATION] = json!(value);
                    Ok(Some(pod))
                },
            )
            .expect("patch pod");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn manifest(dir: &Path) -> Manifest {
    let spec = format!(
        "  for: {{apiVersion: v1, kind: Pod}}
  namespaces: [{NS}]
  maxConcurrentReconciles: {WORKERS}
  permissions:
    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch]}}
"
    );
    common::manifest(dir, GUEST, "pod_stamper.wasm", &spec)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Arm {
    Krec,
    KubeRs,
}

/// What kube-rs's arm records: when each key's first unreconciled event arrived, the
/// latencies, and the reconciles.
#[derive(Default)]
struct KubeRsProbe {
    received: Mutex<HashMap<String, Instant>>,
    samples: Mutex<Vec<f64>>,
    reconciles: AtomicU64,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct KubeRsError(String);

async fn kube_rs_reconcile(
    pod: Arc<Pod>,
    probe: Arc<KubeRsProbe>,
) -> Result<controller::Action, KubeRsError> {
    let entered = Instant::now();
    let key = pod.metadata.name.clone().unwrap_or_default();
    if let Some(received) = probe
        .received
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key)
    {
        probe
            .samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entered.duration_since(received).as_secs_f64());
    }
    let mut pod = (*pod).clone();
    let _ = pod_stamper::stamp(&mut pod);
    probe.reconciles.fetch_add(1, Ordering::Relaxed);
    Ok(controller::Action::await_change())
}

enum Running {
    Krec(Manager),
    KubeRs {
        task: tokio::task::JoinHandle<()>,
        probe: Arc<KubeRsProbe>,
    },
}

impl Running {
    async fn start(
        arm: Arm,
        client: &kube::Client,
        manifest: &Manifest,
        cache: &ModuleCache,
    ) -> Self {
        let running = match arm {
            Arm::Krec => {
                let options = ManagerOptions {
                    module_cache: cache.clone(),
                    ..Default::default()
                };
                Running::Krec(common::start_manager(client, manifest, options).await)
            }
            Arm::KubeRs => {
                let probe = Arc::new(KubeRsProbe::default());
                let recorder = probe.clone();
                let controller = common::kube_rs_stripped_controller(
                    Api::namespaced(client.clone(), NS),
                    move |pod| {
                        let now = Instant::now();
                        recorder
                            .received
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(pod.metadata.name.clone().unwrap_or_default())
                            .or_insert(now);
                    },
                );
                let task = tokio::spawn(
                    controller
                        .with_config(controller::Config::default().concurrency(WORKERS))
                        .run(
                            kube_rs_reconcile,
                            |_, _, _| controller::Action::requeue(Duration::from_secs(1)),
                            probe.clone(),
                        )
                        .for_each(|_| async {}),
                );
                Running::KubeRs { task, probe }
            }
        };
        running.settle(PODS as u64).await;
        running
    }

    fn reconciles(&self) -> u64 {
        match self {
            Running::Krec(manager) => common::guest_reconciles(manager, GUEST),
            Running::KubeRs { probe, .. } => probe.reconciles.load(Ordering::Relaxed),
        }
    }

    fn busy(&self) -> bool {
        match self {
            Running::Krec(manager) => common::guest_busy(manager, GUEST),
            Running::KubeRs { .. } => false,
        }
    }

    /// Wait until at least `at_least` reconciles have run and nothing moved for 200 ms.
    async fn settle(&self, at_least: u64) {
        common::settle(
            || self.reconciles(),
            || self.busy(),
            at_least,
            Duration::from_millis(200),
        )
        .await;
    }

    /// The event-to-reconcile observations so far (`stage` for krec's other stages).
    fn buckets(&self, stage: &str) -> Buckets {
        match self {
            Running::Krec(manager) => stage_buckets(&manager.scrape(), stage),
            Running::KubeRs { probe, .. } => {
                Buckets::of_samples(&probe.samples.lock().unwrap_or_else(|e| e.into_inner()))
            }
        }
    }

    /// kube-rs's exact samples from index `from` on.
    fn samples_since(&self, from: usize) -> Vec<f64> {
        match self {
            Running::Krec(_) => Vec::new(),
            Running::KubeRs { probe, .. } => probe
                .samples
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(from..)
                .unwrap_or_default()
                .to_vec(),
        }
    }

    async fn stop(self) {
        match self {
            Running::Krec(manager) => manager.shutdown(Duration::from_secs(10)).await,
            Running::KubeRs { task, .. } => {
                task.abort();
                let _ = task.await;
            }
        }
    }
}

/// Figures of one phase of one arm, by name.
type Figures = Vec<(String, f64)>;

async fn phase(
    running: &Running,
    store: &Arc<Store>,
    rate: u32,
    seconds: f64,
    round: &str,
) -> Figures {
    let stages = ["event_to_guest", "handler", "queue", "start"];
    let before: Vec<Buckets> = stages.iter().map(|s| running.buckets(s)).collect();
    let exact_from = running.buckets("event_to_guest").total as usize;
    let reconciles = running.reconciles();
    let driver = {
        let (store, round) = (store.clone(), round.to_owned());
        std::thread::spawn(move || drive(&store, rate, seconds, &round))
    };
    let reached = tokio::task::spawn_blocking(move || driver.join().expect("driver"))
        .await
        .expect("driver thread");
    running.settle(reconciles + 1).await;
    let mut figures = vec![(format!("events_per_s_{rate}"), reached)];
    let observed = running.buckets("event_to_guest").since(&before[0]);
    figures.push((format!("observed_{rate}"), observed.total));
    figures.push((format!("p50_us_{rate}"), observed.quantile_us(0.5)));
    figures.push((format!("p99_us_{rate}"), observed.quantile_us(0.99)));
    let mut exact = running.samples_since(exact_from);
    if !exact.is_empty() {
        figures.push((
            format!("exact_p50_us_{rate}"),
            percentile(&mut exact, 50.0) * 1e6,
        ));
        figures.push((
            format!("exact_p99_us_{rate}"),
            percentile(&mut exact, 99.0) * 1e6,
        ));
    }
    if matches!(running, Running::Krec(_)) {
        for (stage, before) in stages.iter().zip(&before).skip(1) {
            let observed = running.buckets(stage).since(before);
            figures.push((format!("{stage}_p50_us_{rate}"), observed.quantile_us(0.5)));
            figures.push((format!("{stage}_p99_us_{rate}"), observed.quantile_us(0.99)));
        }
    }
    figures
}

fn main() {
    let rounds = if quick() { 1 } else { 3 };
    let seconds = if quick() { 2.0 } else { 5.0 };
    let server = common::InProcessServer::start();
    let store = server.store().clone();
    setup(&store);
    let kubeconfig = server.kubeconfig().to_owned();

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path());
    let cache = ModuleCache::new(&dir.path().join("modules")).expect("module cache");
    // name → (krec samples, kube-rs samples)
    let mut results: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client");
        for r in 0..rounds {
            let order = if r % 2 == 0 {
                [Arm::Krec, Arm::KubeRs]
            } else {
                [Arm::KubeRs, Arm::Krec]
            };
            for arm in order {
                let running = Running::start(arm, &client, &manifest, &cache).await;
                for rate in RATES {
                    let round = format!("{r}{arm:?}{rate}");
                    for (name, value) in phase(&running, &store, rate, seconds, &round).await {
                        let slot = match results.iter().position(|(n, ..)| *n == name) {
                            Some(i) => &mut results[i],
                            None => {
                                results.push((name, Vec::new(), Vec::new()));
                                results.last_mut().expect("just pushed")
                            }
                        };
                        match arm {
                            Arm::Krec => slot.1.push(value),
                            Arm::KubeRs => slot.2.push(value),
                        }
                    }
                }
                running.stop().await;
                eprintln!("round {r}: {arm:?} done");
            }
        }
    });

    let mut rows = vec![
        "| figure | krec median (min–max) | kube-rs median (min–max) | krec / kube-rs |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ];
    let mut json = serde_json::Map::new();
    let cell = |samples: &[f64]| {
        if samples.is_empty() {
            return "—".to_owned();
        }
        let (median, min, max) = median_min_max(samples.to_vec());
        format!("{median:.1} ({min:.1}–{max:.1})")
    };
    for (name, krec, kube_rs) in &results {
        let ratio = if krec.is_empty() || kube_rs.is_empty() {
            "—".to_owned()
        } else {
            let k = median_min_max(krec.clone()).0;
            let o = median_min_max(kube_rs.clone()).0;
            format!("{:.2}×", k / o)
        };
        rows.push(format!(
            "| event_latency_{name} | {} | {} | {ratio} |",
            cell(krec),
            cell(kube_rs)
        ));
        for (arm, samples) in [("krec", krec), ("kube_rs", kube_rs)] {
            if !samples.is_empty() {
                let (median, min, max) = median_min_max(samples.clone());
                json.insert(
                    format!("event_latency_{arm}_{name}"),
                    json!({"median": median, "min": min, "max": max}),
                );
            }
        }
    }
    for row in &rows {
        println!("{row}");
    }
    common::write_results(json);
    drop(runtime);
    server.shutdown();
}
