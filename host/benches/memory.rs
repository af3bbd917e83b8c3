//! What the host holds in memory:
//!
//! - `memory_per_idle_guest_kib`: this process's RSS and PSS with 1, 10, 100 and 1000 loaded,
//!   idle guests (each has reconciled once, so each holds its worker's instance), and the slope
//!   between 100 and 1000 guests — the cost of one more guest; `memory_per_released_guest_kib`:
//!   the same once they have been idle past the instance idle time (their instances given back);
//! - `startup_{1,1000}_guests_s`: a new host with 1 and 1 000 guests of one module, from an
//!   empty module cache (cold) and from the filled one (warm);
//! - `cache_bytes_per_object_ratio`: the heap the shared cache holds for 10 000 Pods of ~3 KB,
//!   divided by the size of those Pods' JSON (live bytes counted by this binary's allocator);
//!   and `cache_bytes_per_object_metadata_only`: the same Pods watched for their metadata alone
//!   (`metadataOnly`), beside the whole objects' bytes per Pod.
//!
//! `KREC_MEMORY_SECTIONS=guests,startup,cache` runs only the sections named;
//! `KREC_MEMORY_EXIT_WITH_GUESTS=1` exits while the idle guests are loaded, so that a heap
//! profiler run on this binary (`heaptrack`) reports what they hold as left at exit.
//!
//! The embedded API server runs in a child process (`krec cluster`), so neither figure includes
//! it. Needs `make guests` (for `cleanup_ticker.wasm`).

mod common;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use krec::cluster::client::ApiClient;
use krec::guest::ModuleCache;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_core::Gvk;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: common::Counting = common::Counting;

use common::live_bytes;

/// Guest `g{n}`: the cleanup ticker, driven by its own ticker only, so it reconciles once at
/// start and then idles.
fn manifest(dir: &Path, n: usize, module: &Path) -> Manifest {
    let path = dir.join(format!("g{n}.yaml"));
    let text = format!(
        "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: g{n}}}
spec:
  module: {}
  tickers: [{{every: 1h, request: {{name: tick}}}}]
  permissions:
    - {{apiVersion: v1, kind: ConfigMap, verbs: [list, delete]}}
",
        module.display()
    );
    std::fs::write(&path, text).expect("write manifest");
    Manifest::load(&path).expect("manifest")
}

/// How long the idle guests' workers keep their instances here.
const INSTANCE_IDLE: Duration = Duration::from_secs(1);

async fn idle_guests(
    api: &std::sync::Arc<ApiClient>,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let module = common::module("cleanup_ticker.wasm");
    let options = ManagerOptions {
        module_cache: ModuleCache::new(&dir.path().join("modules")).expect("cache"),
        // Shorter than the default minute, so that a guest idle this long is measured too.
        instance_idle: Some(INSTANCE_IDLE),
        ..Default::default()
    };
    let manager = Manager::start_with(api.clone(), Vec::new(), options)
        .await
        .expect("manager");
    let (rss0, pss0) = common::rss_pss_kib();
    let heap0 = live_bytes();
    let counts = if common::quick() {
        vec![1usize, 10, 100]
    } else {
        vec![1usize, 10, 100, 1000]
    };
    let mut manifests = Vec::new();
    let mut points = Vec::new();
    let mut idle_points = Vec::new();
    for &count in &counts {
        while manifests.len() < count {
            manifests.push(manifest(dir.path(), manifests.len(), &module));
        }
        let report = manager
            .apply(manifests.iter().cloned().map(Ok).collect())
            .await;
        assert_eq!(manager.controllers().len(), count, "{report:?}");
        // Every guest has reconciled once (its ticker fires at start) and holds its instance.
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        every_guest(&manager, deadline, "guests did not reconcile", |s| {
            s.total() > 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (rss, pss) = common::rss_pss_kib();
        let kept_heap = (live_bytes() - heap0) / 1024.0;
        // Then idle past `INSTANCE_IDLE`: every worker has given its instance back.
        every_guest(
            &manager,
            deadline,
            "idle workers kept their instances",
            |s| s.instances_released() > 0,
        )
        .await;
        krec::process::memory::release_soon();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (idle_rss, idle_pss) = common::rss_pss_kib();
        idle_points.push((count, idle_rss, idle_pss, (live_bytes() - heap0) / 1024.0));
        let (per_rss, per_pss) = ((rss - rss0) / count as f64, (pss - pss0) / count as f64);
        rows.push(format!(
            "| memory_{count}_idle_guests_kib | RSS {rss:.0} / PSS {pss:.0} | | process with {count} loaded idle guests; {per_rss:.0} / {per_pss:.0} KiB per guest over the host alone ({rss0:.0} / {pss0:.0}) |"
        ));
        results.insert(format!("memory_{count}_idle_guests_rss_kib"), json!(rss));
        results.insert(format!("memory_{count}_idle_guests_pss_kib"), json!(pss));
        points.push((count, rss, pss, kept_heap));
    }
    let (n1, n2, slope_rss, slope_pss, slope_heap) = last_slopes(&points);
    rows.push(format!(
        "| memory_per_idle_guest_kib | {slope_pss:.0} | | PSS slope from {n1} to {n2} guests (RSS slope {slope_rss:.0}; of it the host's heap {slope_heap:.1}, the rest the instances' memory and stacks); target ≤ 64 |"
    ));
    results.insert("memory_per_idle_guest_kib".into(), json!(slope_pss));
    results.insert("memory_per_idle_guest_rss_kib".into(), json!(slope_rss));
    results.insert("memory_per_idle_guest_heap_kib".into(), json!(slope_heap));
    // The same guests idle past `INSTANCE_IDLE`, their instances given back.
    let (n1, n2, slope_rss, slope_pss, slope_heap) = last_slopes(&idle_points);
    rows.push(format!(
        "| memory_per_released_guest_kib | {slope_pss:.0} | | PSS slope from {n1} to {n2} guests idle past `instanceIdle` ({INSTANCE_IDLE:?} here), their instances given back (RSS slope {slope_rss:.0}; host heap {slope_heap:.1}); target ≤ 64 |"
    ));
    results.insert("memory_per_released_guest_kib".into(), json!(slope_pss));
    results.insert(
        "memory_per_released_guest_heap_kib".into(),
        json!(slope_heap),
    );
    if std::env::var_os("KREC_MEMORY_EXIT_WITH_GUESTS").is_some() {
        // For a heap profiler (`heaptrack`): what the guests hold is what is left at exit.
        common::print_table(rows);
        std::process::exit(0);
    }
    manager.shutdown(Duration::from_secs(10)).await;
}

/// Wait until `done` holds for the stats of every guest `manager` runs, failing with `what`
/// after `deadline`.
async fn every_guest(
    manager: &Manager,
    deadline: std::time::Instant,
    what: &str,
    done: impl Fn(&krec::controller::Stats) -> bool,
) {
    while !manager.controllers().values().all(|c| done(c.stats())) {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Between the last two `(guests, RSS, PSS, heap)` points: the guest counts and the RSS, PSS
/// and heap per guest more.
fn last_slopes(points: &[(usize, f64, f64, f64)]) -> (usize, usize, f64, f64, f64) {
    let (n1, rss1, pss1, heap1) = points[points.len() - 2];
    let (n2, rss2, pss2, heap2) = points[points.len() - 1];
    let per = |a: f64, b: f64| (b - a) / (n2 - n1) as f64;
    (n1, n2, per(rss1, rss2), per(pss1, pss2), per(heap1, heap2))
}

/// Start-up of a host with `count` guests of one module (a new manager, its guests loaded,
/// informers synced, workers started): seconds, from an empty module cache (`cold`: the module
/// compiled once, then shared) and from the cache that run filled (`warm`).
async fn startup(
    api: &std::sync::Arc<ApiClient>,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let module = common::module("cleanup_ticker.wasm");
    let counts: &[usize] = if common::quick() {
        &[1, 100]
    } else {
        &[1, 1000]
    };
    for &count in counts {
        let manifests: Vec<Manifest> = (0..count)
            .map(|n| manifest(dir.path(), n, &module))
            .collect();
        let cache_dir = dir.path().join(format!("modules-{count}"));
        let mut seconds = Vec::new();
        for _ in ["cold", "warm"] {
            let options = ManagerOptions {
                // A new cache each time: nothing shared in memory, only what is on disk.
                module_cache: ModuleCache::new(&cache_dir).expect("cache"),
                ..Default::default()
            };
            let started = std::time::Instant::now();
            let manager = Manager::start_with(api.clone(), manifests.clone(), options)
                .await
                .expect("manager");
            seconds.push(started.elapsed().as_secs_f64());
            assert_eq!(
                manager.controllers().len(),
                count,
                "{:?}",
                manager.skipped()
            );
            manager.shutdown(Duration::from_secs(30)).await;
        }
        let (cold, warm) = (seconds[0], seconds[1]);
        rows.push(format!(
            "| startup_{count}_guests_s | cold {cold:.3} / warm {warm:.3} | | a new host with {count} guests of one module, from an empty module cache / from the cache that filled; warm / cold {:.2}× |",
            warm / cold
        ));
        results.insert(format!("startup_{count}_guests_cold_s"), json!(cold));
        results.insert(format!("startup_{count}_guests_warm_s"), json!(warm));
    }
}

async fn cache_ratio(
    client: &kube::Client,
    api: &std::sync::Arc<ApiClient>,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
) {
    let pods_total = if common::quick() { 2_000 } else { 10_000 };
    let ns = "bench-cache";
    common::create_pods(client, ns, pods_total, |i| {
        common::pod(ns, &format!("pod-{i:05}"))
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // The size of the Pods as the API server serves them (with uid, timestamps, ...).
    let json_bytes: usize = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|p| serde_json::to_vec(p).expect("json").len())
        .sum();
    // Whole objects, then their metadata alone (`metadataOnly`), each arm a fresh cache.
    let mut held_by = Vec::new();
    for content in [
        krec::cluster::cache::Content::Objects,
        krec::cluster::cache::Content::Metadata,
    ] {
        let cache = krec::cluster::cache::Cache::new(api.clone());
        let before = live_bytes();
        let informer = cache
            .informer(&Gvk::new("", "v1", "Pod"), Some(ns), content, "bench")
            .await
            .expect("informer");
        informer
            .wait_synced(Duration::from_secs(120))
            .await
            .expect("synced");
        assert_eq!(informer.len(), pods_total);
        // Let the initial list's buffers go.
        tokio::time::sleep(Duration::from_millis(500)).await;
        held_by.push(live_bytes() - before);
        drop(informer);
        drop(cache);
        // The watch task lets the store go once it has stopped: wait for that before the next.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (held, metadata) = (held_by[0], held_by[1]);
    let ratio = held / json_bytes as f64;
    rows.push(format!(
        "| cache_bytes_per_object_ratio | {ratio:.2}× | | heap held by the cache for {pods_total} Pods ({:.1} MB) / their JSON ({:.1} MB); target ≤ 1.5 |",
        held / 1e6,
        json_bytes as f64 / 1e6
    ));
    let per_pod = held / pods_total as f64;
    let per_pod_metadata = metadata / pods_total as f64;
    rows.push(format!(
        "| cache_bytes_per_object | {per_pod:.0} B | | per Pod, whole objects (`owns: Pod`) |"
    ));
    rows.push(format!(
        "| cache_bytes_per_object_metadata_only | {per_pod_metadata:.0} B | | per Pod, `metadataOnly: true` (PartialObjectMetadata); {:.3}× the whole objects' (target ≤ 0.25) |",
        per_pod_metadata / per_pod
    ));
    results.insert("cache_bytes_per_object_ratio".into(), json!(ratio));
    results.insert("cache_bytes_per_object".into(), json!(per_pod));
    results.insert(
        "cache_bytes_per_object_metadata_only".into(),
        json!(per_pod_metadata),
    );
    results.insert(
        "cache_metadata_only_vs_full_ratio".into(),
        json!(per_pod_metadata / per_pod),
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    runtime.block_on(async {
        let cluster = common::ClusterProcess::start();
        let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
        let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client");
        let api = ApiClient::new(client.clone());
        // Guests first: the cache's 10 000 Pods, once freed, would leave heap that later
        // guests reuse without growing the RSS.
        let sections = std::env::var("KREC_MEMORY_SECTIONS").unwrap_or_default();
        let run = |name: &str| sections.is_empty() || sections.split(',').any(|s| s == name);
        if run("guests") {
            idle_guests(&api, &mut rows, &mut results).await;
        }
        if run("startup") {
            startup(&api, &mut rows, &mut results).await;
        }
        if run("cache") {
            cache_ratio(&client, &api, &mut rows, &mut results).await;
        }
    });
    common::print_table(&rows);
    common::write_results(results);
}
