//! Benchmarks of the host's module handling, against the embedded API server:
//!
//! - `startup_10_guests`: `Manager::start` with 10 guests on a cold module cache (every module
//!   compiled) and on a warm one (every module loaded from disk);
//! - `swap`: a guest's module replaced, from the file write to the first reconcile on the new
//!   version, for a module never seen (compiled from scratch) and for one in the module cache.
//!
//! The guests must be built (`make guests`). Prints a Markdown table; `make bench` runs it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use krec::cluster::api::ApiClient;
use krec::guest::ModuleCache;
use krec::local_cluster::LocalCluster;
use krec::manager::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use serde_json::json;

const RUNS: usize = 5;
const GUESTS: usize = 10;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn module(file: &str) -> PathBuf {
    let path = repo().join("target/wasm32-wasip2/release").join(file);
    assert!(
        path.exists(),
        "{} is missing: run `make guests`",
        path.display()
    );
    path
}

fn options(module_cache: ModuleCache) -> ManagerOptions {
    ManagerOptions {
        module_cache,
        ..Default::default()
    }
}

fn median_min_max(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1],
    )
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cluster = LocalCluster::start(Default::default())
        .await
        .expect("server");
    let client = krec::dev::client_from_kubeconfig(cluster.kubeconfig())
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
    let mut rows = Vec::new();
    startup(&api, &mut rows).await;
    swaps(&api, &mut rows).await;
    println!("| figure | median | min–max | what |");
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
