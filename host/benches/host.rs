//! Benchmarks of the host's module handling, against the embedded API server:
//!
//! - `startup_10_guests`: `Manager::start` with 10 guests on a cold module cache (every module
//!   compiled) and on a warm one (every module loaded from disk);
//! - `swap`: a guest's module replaced, from the file write to the first reconcile on the new
//!   version, for a module never seen (compiled from scratch) and for one in the module cache;
//! - `compile_beside`: a small (Rust) guest compiled alone, then while a large (TypeScript)
//!   one compiles, as the host compiles (each compile on a thread pool of its own), and as
//!   wasmtime does by itself (both on rayon's one global pool) — what a small guest's start or
//!   swap waited for before the host gave each compile its own threads.
//!
//! The guests must be built (`make guests`). Prints a Markdown table; `make bench` runs it.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{median_min_max, module};
use krec::cluster::client::ApiClient;
use krec::guest::{GuestModule, ModuleCache};
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_apiserver::Server;
use serde_json::json;

const RUNS: usize = 5;
const GUESTS: usize = 10;

fn options(module_cache: ModuleCache) -> ManagerOptions {
    ManagerOptions {
        module_cache,
        ..Default::default()
    }
}

fn row(name: &str, samples: Vec<f64>, what: &str) -> (String, f64) {
    let (median, min, max) = median_min_max(samples);
    (
        format!("| {name} | {median:.1} | {min:.1}–{max:.1} | {what} |"),
        median,
    )
}

/// A manifest for guest `name` running `module`, reconciling ConfigMaps, written into `dir`.
fn manifest(dir: &Path, name: &str, module: &Path) -> Manifest {
    let path = dir.join(format!("{name}.yaml"));
    let text = [
        "apiVersion: krec.dev/v1alpha1".to_owned(),
        "kind: Reconciler".to_owned(),
        format!("metadata: {{name: {name}}}"),
        "spec:".to_owned(),
        format!("  module: {}", module.display()),
        "  for: {apiVersion: v1, kind: ConfigMap}".to_owned(),
        // Load, not the guest's own write budget, is what is measured.
        "  limits: {writeQps: 100000, writeBurst: 100000}".to_owned(),
        "  permissions:".to_owned(),
        "    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, patch]}".to_owned(),
    ]
    .join("\n");
    std::fs::write(&path, text).expect("write manifest");
    Manifest::load(&path).expect("manifest")
}

/// `bytes` with a custom section appended: the same component, with a digest never seen.
fn unique_variant(bytes: &[u8], n: usize) -> Vec<u8> {
    let name = format!("krec-bench-{n}");
    let mut payload = vec![u8::try_from(name.len()).expect("short name")];
    payload.extend_from_slice(name.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(u8::try_from(payload.len()).expect("short section")); // LEB128, < 128
    out.extend_from_slice(&payload);
    out
}

async fn startup(api: &std::sync::Arc<ApiClient>, rows: &mut Vec<String>) {
    let stamper = module("stamper_a.wasm");
    let manifests_dir = tempfile::tempdir().expect("tempdir");
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for run in 0..RUNS {
        let cache_dir = tempfile::tempdir().expect("tempdir");
        // Distinct modules, as 10 different guests would be: a custom section per guest.
        let bytes = std::fs::read(&stamper).expect("module");
        let manifests: Vec<Manifest> = (0..GUESTS)
            .map(|g| {
                let path = manifests_dir.path().join(format!("g{g}.wasm"));
                std::fs::write(&path, unique_variant(&bytes, run * GUESTS + g)).expect("write");
                manifest(manifests_dir.path(), &format!("g{g}"), &path)
            })
            .collect();
        for samples in [&mut cold, &mut warm] {
            let cache = ModuleCache::new(cache_dir.path()).expect("cache");
            let started = Instant::now();
            let manager = Manager::start_with(api.clone(), manifests.clone(), options(cache))
                .await
                .expect("manager");
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(manager.controllers().len(), GUESTS);
            manager.shutdown(Duration::from_secs(5)).await;
        }
    }
    let (cold_row, cold_median) = row(
        "startup_10_guests_cold_cache_ms",
        cold,
        "Manager::start with 10 distinct modules, every one compiled (baseline)",
    );
    let (warm_row, warm_median) = row(
        "startup_10_guests_warm_cache_ms",
        warm,
        "the same 10 guests, every module loaded from the module cache",
    );
    rows.push(cold_row);
    rows.push(warm_row);
    rows.push(format!(
        "| startup_warm_vs_cold | {:.3}× | | warm / cold |",
        warm_median / cold_median
    ));
}

/// Write `bytes` as the guest's module, reload, and time until the new version's first
/// reconcile.
async fn swap_once(manager: &Manager, dir: &Path, bytes: &[u8], expected: u64) -> f64 {
    let tmp = dir.join("swap.wasm.new");
    std::fs::write(&tmp, bytes).expect("write");
    let started = Instant::now();
    std::fs::rename(&tmp, dir.join("swap.wasm")).expect("rename");
    let report = manager.reload(dir).await.expect("reload");
    assert_eq!(report.swapped, ["swap"], "{report:?}");
    let controller = manager.controller("swap").expect("guest");
    loop {
        let version = controller.version();
        if version.number == expected
            && let Some(first) = version.first_reconcile()
        {
            return first.saturating_duration_since(started).as_secs_f64() * 1000.0;
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// Objects updated in a stream while the guest is swapped.
const LOAD_OBJECTS: usize = 100;
/// Swaps under load.
const LOAD_SWAPS: usize = 20;

/// Swap the guest [`LOAD_SWAPS`] times (alternating two versions) while every one of
/// [`LOAD_OBJECTS`] ConfigMaps keeps changing, then count the keys whose final state the newest
/// version did not reconcile: `swap_lost_keys` (target 0), and how long each swap took to its
/// first reconcile on the new version under that load: `swap_latency_ms`.
async fn swaps_under_load(
    api: &std::sync::Arc<ApiClient>,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, serde_json::Value>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let a = std::fs::read(module("stamper_a.wasm")).expect("a");
    let b = std::fs::read(module("stamper_b.wasm")).expect("b");
    for i in 0..LOAD_OBJECTS {
        api.create(
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("load-{i:03}"), "namespace": "swap-load"},
                "data": {"value": "0"}}),
            "bench",
        )
        .await
        .expect("configmap");
    }
    std::fs::write(dir.path().join("swap.wasm"), &a).expect("write");
    let m = manifest(dir.path(), "swap", &dir.path().join("swap.wasm"));
    let cache = ModuleCache::new(cache_dir.path()).expect("cache");
    let manager = Manager::start_with(api.clone(), vec![m], options(cache))
        .await
        .expect("manager");
    // The load: every object's value changes, round after round, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (api, stop) = (api.clone(), stop.clone());
        tokio::spawn(async move {
            let gvk = krec_core::Gvk::new("", "v1", "ConfigMap");
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                for i in 0..LOAD_OBJECTS {
                    let body = json!({"data": {"value": round.to_string()}});
                    let name = format!("load-{i:03}");
                    api.patch(
                        &gvk,
                        Some("swap-load"),
                        &name,
                        krec_core::PatchType::Merge,
                        &body,
                        false,
                        "bench-load",
                    )
                    .await
                    .expect("patch");
                }
            }
        })
    };
    let mut latencies = Vec::new();
    for n in 0..LOAD_SWAPS {
        let bytes = if n % 2 == 0 { &b } else { &a };
        latencies.push(swap_once(&manager, dir.path(), bytes, n as u64 + 2).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.await.expect("load task");
    let controller = manager.controller("swap").expect("guest");
    // Let the queue drain.
    let deadline = Instant::now() + Duration::from_secs(60);
    while (!controller.queue().is_empty() || controller.stats().active() > 0)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let newest = if LOAD_SWAPS.is_multiple_of(2) {
        "a"
    } else {
        "b"
    };
    let objects = api
        .list(
            &krec_core::Gvk::new("", "v1", "ConfigMap"),
            &krec_core::ListOptions {
                namespace: Some("swap-load".into()),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    let lost = objects
        .iter()
        .filter(|o| {
            let annotations = &o["metadata"]["annotations"];
            annotations["krec.dev/stamped-by"] != newest
                || annotations["krec.dev/stamped-value"] != o["data"]["value"]
        })
        .count();
    let overlaps = controller
        .stats()
        .overlaps
        .load(std::sync::atomic::Ordering::Relaxed);
    manager.shutdown(Duration::from_secs(5)).await;
    let (latency_row, latency_median) = row(
        "swap_latency_ms",
        latencies,
        "module file replaced → first reconcile on the new version, under load, 20 swaps of cached versions",
    );
    rows.push(latency_row);
    rows.push(format!(
        "| swap_lost_keys | {lost} | | of {LOAD_OBJECTS} objects changing throughout {LOAD_SWAPS} swaps, final state not reconciled by the newest version (target 0); {overlaps} overlapping reconciles |"
    ));
    results.insert("swap_latency_ms".into(), json!(latency_median));
    results.insert("swap_lost_keys".into(), json!(lost));
    results.insert("swap_overlapping_reconciles".into(), json!(overlaps));
}

async fn swaps(api: &std::sync::Arc<ApiClient>, rows: &mut Vec<String>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let a = std::fs::read(module("stamper_a.wasm")).expect("a");
    let b = std::fs::read(module("stamper_b.wasm")).expect("b");
    std::fs::write(dir.path().join("swap.wasm"), &a).expect("write");
    let m = manifest(dir.path(), "swap", &dir.path().join("swap.wasm"));
    let cache = ModuleCache::new(cache_dir.path()).expect("cache");
    let manager = Manager::start_with(api.clone(), vec![m], options(cache))
        .await
        .expect("manager");
    let mut version = 1;
    let mut scratch = Vec::new();
    for n in 0..RUNS {
        version += 1;
        scratch.push(swap_once(&manager, dir.path(), &unique_variant(&b, 1000 + n), version).await);
    }
    // Put b in the cache, then alternate between two cached versions.
    version += 1;
    swap_once(&manager, dir.path(), &b, version).await;
    let mut cached = Vec::new();
    for n in 0..RUNS {
        version += 1;
        let bytes = if n % 2 == 0 { &a } else { &b };
        cached.push(swap_once(&manager, dir.path(), bytes, version).await);
    }
    manager.shutdown(Duration::from_secs(5)).await;
    let (scratch_row, scratch_median) = row(
        "swap_from_scratch_ms",
        scratch,
        "module file replaced → first reconcile on the new version, module compiled (baseline)",
    );
    let (cached_row, cached_median) = row(
        "swap_cached_ms",
        cached,
        "the same, module loaded from the module cache",
    );
    rows.push(scratch_row);
    rows.push(cached_row);
    rows.push(format!(
        "| swap_cached_vs_scratch | {:.3}× | | cached / from scratch |",
        cached_median / scratch_median
    ));
}

/// Seconds `compile` takes.
fn timed(compile: impl FnOnce()) -> f64 {
    let started = Instant::now();
    compile();
    started.elapsed().as_secs_f64()
}

/// A small guest's compile alone and beside a large guest's: as the host compiles (each on
/// threads of its own) and on rayon's global pool (wasmtime's own way, the host's before).
fn compile_beside(rows: &mut Vec<String>) {
    let engines = krec::guest::Engines::new().expect("engines");
    let small = std::fs::read(module("stamper_b.wasm")).expect("small");
    let large_path = common::repo().join("target/js-guests/pod_counter_ts.wasm");
    let large = std::fs::read(&large_path)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make guests`", large_path.display()));
    let dir = tempfile::tempdir().expect("tempdir");
    // Through the host: a manifest naming each (never seen) module, loaded without a cache.
    let host_compile = |bytes: &[u8], name: &str| {
        let file = dir.path().join(format!("{name}.wasm"));
        std::fs::write(&file, bytes).expect("write");
        let m = manifest(dir.path(), name, &file);
        let (engine, linker) = engines.for_isolation(m.spec.isolation);
        GuestModule::load(engine, linker, std::sync::Arc::new(m)).expect("compiled");
    };
    let engine = engines.for_isolation(krec::manifest::Isolation::Reuse).0;
    let global_compile = |bytes: &[u8]| {
        wasmtime::component::Component::new(engine, bytes).expect("compiled");
    };
    let mut n = 0;
    let mut next = |bytes: &[u8]| {
        n += 1;
        unique_variant(bytes, 5000 + n)
    };
    let (mut alone, mut alone_global) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let small = next(&small);
        alone.push(timed(|| host_compile(&small, "small")));
        let small = next(&small);
        alone_global.push(timed(|| global_compile(&small)));
    }
    // The large compile starts, and the small one a second into it (past its parse, into its
    // functions' compiles).
    let mut beside = |own_threads: bool| {
        let mut took = Vec::new();
        for _ in 0..RUNS {
            let (large, small) = (next(&large), next(&small));
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    if own_threads {
                        host_compile(&large, "large");
                    } else {
                        global_compile(&large);
                    }
                });
                std::thread::sleep(Duration::from_secs(1));
                took.push(timed(|| {
                    if own_threads {
                        host_compile(&small, "small");
                    } else {
                        global_compile(&small);
                    }
                }));
            });
        }
        took
    };
    let host = beside(true);
    let global = beside(false);
    let (alone_row, alone_median) = row(
        "compile_small_alone_s",
        alone,
        "a 645 kB Rust guest compiled alone (baseline)",
    );
    let (alone_global_row, alone_global_median) = row(
        "compile_small_alone_global_pool_s",
        alone_global,
        "the same compiled by wasmtime on rayon's global pool",
    );
    let (host_row, host_median) = row(
        "compile_small_beside_large_s",
        host,
        "the same while a 12 MB TypeScript guest compiles, each on threads of its own (the host)",
    );
    let (global_row, global_median) = row(
        "compile_small_beside_large_global_pool_s",
        global,
        "the same, both on rayon's global pool (wasmtime alone; the host before)",
    );
    rows.extend([alone_row, alone_global_row, host_row, global_row]);
    rows.push(format!(
        "| compile_own_threads_vs_global_alone | {:.2}× | | alone: own threads / global pool |",
        alone_median / alone_global_median
    ));
    rows.push(format!(
        "| compile_beside_vs_alone | {:.2}× | | own threads: beside / alone |",
        host_median / alone_median
    ));
    rows.push(format!(
        "| compile_beside_global_vs_alone | {:.2}× | | global pool: beside / alone |",
        global_median / alone_median
    ));
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cluster = Server::builder().start().await.expect("server");
    let client = krec::cluster::connect::client_from_kubeconfig(cluster.kubeconfig())
        .await
        .expect("client");
    let api = ApiClient::new(client);
    api.create(
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bench", "namespace": "default"}, "data": {"value": "1"}}),
        "bench",
    )
    .await
    .expect("configmap");
    api.create(
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "swap-load"}}),
        "bench",
    )
    .await
    .expect("namespace");
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    startup(&api, &mut rows).await;
    swaps(&api, &mut rows).await;
    swaps_under_load(&api, &mut rows, &mut results).await;
    compile_beside(&mut rows);
    common::print_table(&rows);
    common::write_results(results);
}
