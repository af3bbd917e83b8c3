//! Fairness between the tenants of one guest: how long a quiet namespace's change waits for
//! its reconcile, alone and while another namespace floods the same guest's queue.
//!
//! One Wasm guest (`bench/pod-stamper`, writing its stamp on each Pod it reconciles, two
//! workers, its write limit lifted: `limits.writeQps` is the guest's own quota over all its
//! tenants, and at the default 50 per second a flood that spends it makes every write wait for
//! a token, whatever the queue does) watches the Pods of two namespaces: `flood`, with [`FLOOD_PODS`] Pods, and `quiet`,
//! with one. A sample: the quiet Pod's label is changed straight in the store, and the time
//! until the guest's stamp for that change is in the store is the latency — watch event,
//! handler, queue, reconcile, the guest's update through the API server. Phases alternate:
//!
//! - **alone**: nothing else changes;
//! - **flooded**: a driver thread changes every flood Pod at once (a backlog of
//!   [`FLOOD_PODS`] keys in the guest's queue), then keeps changing them at one of
//!   [`FLOOD_RATES`] per second, more than the guest reconciles; the quiet Pod is sampled
//!   meanwhile, and the guest's queue length at each sample shows the backlog it had to pass.
//!
//! With one FIFO for all keys, a flooded sample waits for the backlog ahead of it; with the
//! workqueue's per-namespace turns it waits for at most one key per worker. Figures:
//! `tenants_{alone,flooded_<rate>}_{p50,p99}_ms`, `tenants_flooded_<rate>_backlog` (median
//! queue length at the flooded samples) and `tenants_flooded_<rate>_over_alone_p50` (goal:
//! ≤ 2).
//!
//! `KREC_BENCH_QUICK=1` runs one round with fewer samples. Needs `make guests`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{median_min_max, percentile, quick};
use krec::guest::ModuleCache;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_apiserver::ResourceType;
use krec_apiserver::Store;
use krec_apiserver::store::WriteOptions;
use pod_stamper::{GENERATION, STAMP};
use serde_json::{Value, json};

const FLOOD: &str = "flood";
const QUIET: &str = "quiet";
const QUIET_POD: &str = "q";
/// Pods in the flooding namespace.
const FLOOD_PODS: usize = 2_000;
/// Changes per second to the flood's Pods after its first burst, one phase each: both more
/// than the guest drains (its own writes bring every key back too), the second also loading
/// the machine's two cores with the API server's work.
const FLOOD_RATES: [u32; 2] = [500, 2_000];
const WORKERS: u16 = 2;
const GUEST: &str = "pod-stamper";

fn pods(store: &Store) -> ResourceType {
    store.registry().by_plural("", "v1", "pods").expect("pods")
}

fn setup(store: &Store) {
    for ns in [FLOOD, QUIET] {
        common::store_namespace(store, ns);
    }
    let pods = pods(store);
    let pod = |ns: &str, name: &str| {
        let mut pod = common::pod(ns, name);
        pod["metadata"]["labels"][GENERATION] = json!("0");
        store.create(&pods, Some(ns), pod, false).expect("pod");
    };
    for i in 0..FLOOD_PODS {
        pod(FLOOD, &format!("p-{i:05}"));
    }
    pod(QUIET, QUIET_POD);
}

/// Set the generation label of Pod `ns/name` straight in the store.
fn set_generation(store: &Store, pods: &ResourceType, ns: &str, name: &str, value: &str) {
    store
        .patch(
            pods,
            Some(ns),
            name,
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

/// Whether the quiet Pod carries the guest's stamp for generation `value`.
fn stamped(store: &Store, pods: &ResourceType, value: &str) -> bool {
    store
        .get(pods, Some(QUIET), QUIET_POD)
        .ok()
        .and_then(|pod| {
            pod.pointer("/metadata/annotations")
                .and_then(|a| a.get(STAMP))
                .and_then(Value::as_str)
                .map(|stamp| stamp.split('/').next() == Some(value))
        })
        .unwrap_or(false)
}

/// Change the quiet Pod to `value` and wait for its stamp; the latency, seconds.
async fn sample(store: &Store, pods: &ResourceType, value: &str) -> f64 {
    let started = Instant::now();
    set_generation(store, pods, QUIET, QUIET_POD, value);
    let deadline = started + Duration::from_secs(120);
    while !stamped(store, pods, value) {
        assert!(Instant::now() < deadline, "the quiet Pod was never stamped");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    started.elapsed().as_secs_f64()
}

/// The flood: every flood Pod changed at once, then round robin at `rate` per second until
/// `stop`.
fn flood(store: &Store, rate: u32, round: &str, stop: &AtomicBool) {
    let pods = pods(store);
    for i in 0..FLOOD_PODS {
        set_generation(
            store,
            &pods,
            FLOOD,
            &format!("p-{i:05}"),
            &format!("{round}-b"),
        );
    }
    let start = Instant::now();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let due = start + Duration::from_secs_f64(n as f64 / f64::from(rate));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let name = format!("p-{:05}", n % FLOOD_PODS);
        set_generation(store, &pods, FLOOD, &name, &format!("{round}-{n}"));
        n += 1;
    }
}

fn manifest(dir: &Path) -> Manifest {
    let spec = format!(
        "  for: {{apiVersion: v1, kind: Pod}}
  namespaces: [{FLOOD}, {QUIET}]
  maxConcurrentReconciles: {WORKERS}
  limits: {{writeQps: 100000, writeBurst: 100000}}
  permissions:
    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch, update, patch]}}
"
    );
    common::manifest(dir, GUEST, "pod_stamper.wasm", &spec)
}

fn queued(manager: &Manager) -> f64 {
    manager
        .controller(GUEST)
        .map_or(0.0, |c| c.queue().len() as f64)
}

/// One phase: `samples` latencies of the quiet Pod (seconds), flooded at `flood_rate` or not,
/// the queue lengths seen at the samples, and the guest's reconciles per second.
async fn phase(
    manager: &Manager,
    store: &Arc<Store>,
    flood_rate: Option<u32>,
    samples: usize,
    round: &str,
) -> (Vec<f64>, Vec<f64>, f64) {
    let pods = pods(store);
    let stop = Arc::new(AtomicBool::new(false));
    let driver = flood_rate.map(|rate| {
        let (store, stop, round) = (store.clone(), stop.clone(), round.to_owned());
        std::thread::spawn(move || flood(&store, rate, &round, &stop))
    });
    if driver.is_some() {
        // Let the burst reach the guest's queue.
        let deadline = Instant::now() + Duration::from_secs(30);
        while queued(manager) < (FLOOD_PODS / 2) as f64 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let reconciles = (common::guest_reconciles(manager, GUEST), Instant::now());
    let mut latencies = Vec::with_capacity(samples);
    let mut backlog = Vec::with_capacity(samples);
    for i in 0..samples {
        backlog.push(queued(manager));
        latencies.push(sample(store, &pods, &format!("{round}-{i}")).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rate = (common::guest_reconciles(manager, GUEST) - reconciles.0) as f64
        / reconciles.1.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    if let Some(driver) = driver {
        tokio::task::spawn_blocking(move || driver.join().expect("driver"))
            .await
            .expect("driver thread");
    }
    // Let the flood drain before the next phase.
    common::settle(
        || common::guest_reconciles(manager, GUEST),
        || common::guest_busy(manager, GUEST),
        0,
        Duration::from_millis(300),
    )
    .await;
    (latencies, backlog, rate)
}

fn main() {
    let rounds = if quick() { 1 } else { 3 };
    let samples = if quick() { 15 } else { 40 };
    let server = common::InProcessServer::start();
    let store = server.store().clone();
    setup(&store);
    let kubeconfig = server.kubeconfig().to_owned();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path());
    let cache = ModuleCache::new(&dir.path().join("modules")).expect("module cache");
    // Figures by name, one value per round.
    let mut figures: Vec<(String, Vec<f64>)> = Vec::new();
    let mut push = |name: String, value: f64| match figures.iter_mut().find(|(n, _)| *n == name) {
        Some((_, values)) => values.push(value),
        None => figures.push((name, vec![value])),
    };
    runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client");
        let options = ManagerOptions {
            module_cache: cache.clone(),
            ..Default::default()
        };
        let manager = common::start_manager(&client, &manifest, options).await;
        common::settle(
            || common::guest_reconciles(&manager, GUEST),
            || common::guest_busy(&manager, GUEST),
            (FLOOD_PODS + 1) as u64,
            Duration::from_millis(300),
        )
        .await;
        // Alone, then each flood rate; the order turns each round.
        let mut phases: Vec<Option<u32>> = std::iter::once(None)
            .chain(FLOOD_RATES.into_iter().map(Some))
            .collect();
        for r in 0..rounds {
            let mut p50 = Vec::new();
            for &flood_rate in &phases {
                let name = flood_rate.map_or("alone".to_owned(), |rate| format!("flooded_{rate}"));
                let (mut latencies, mut backlog, rate) = phase(
                    &manager,
                    &store,
                    flood_rate,
                    samples,
                    &format!("r{r}{name}"),
                )
                .await;
                let (median, p99) = (
                    percentile(&mut latencies, 50.0) * 1e3,
                    percentile(&mut latencies, 99.0) * 1e3,
                );
                push(format!("{name}_p50_ms"), median);
                push(format!("{name}_p99_ms"), p99);
                if flood_rate.is_some() {
                    push(format!("{name}_backlog"), percentile(&mut backlog, 50.0));
                }
                p50.push((flood_rate, median));
                eprintln!(
                    "round {r} {name}: p50 {median:.2} ms, p99 {p99:.2} ms, {rate:.0} reconciles/s"
                );
            }
            let alone = p50
                .iter()
                .find(|(f, _)| f.is_none())
                .map_or(f64::NAN, |p| p.1);
            for (flood_rate, median) in p50 {
                if let Some(rate) = flood_rate {
                    push(format!("flooded_{rate}_over_alone_p50"), median / alone);
                }
            }
            phases.rotate_left(1);
        }
        manager.shutdown(Duration::from_secs(10)).await;
    });

    let what = |name: &str| {
        if name.ends_with("backlog") {
            "keys queued at a flooded sample"
        } else if name.ends_with("over_alone_p50") {
            "goal ≤ 2"
        } else {
            "quiet Pod change → its stamp stored"
        }
    };
    let mut rows = Vec::new();
    let mut json = serde_json::Map::new();
    for (name, samples) in &figures {
        let (median, min, max) = median_min_max(samples.clone());
        rows.push(format!(
            "| tenants_{name} | {median:.2} | {min:.2}–{max:.2} | {} |",
            what(name)
        ));
        json.insert(
            format!("tenants_{name}"),
            json!({"median": median, "min": min, "max": max}),
        );
    }
    common::print_table(&rows);
    common::write_results(json);
    drop(runtime);
    server.shutdown();
}
