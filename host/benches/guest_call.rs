//! What one reconcile costs in the sandbox, and what the workqueue costs alone:
//!
//! - `guest_call_overhead_us`: one reconcile of `bench/pod-stamper` on a read-only ~3 KB Pod —
//!   a `get` through the host, the text parsed into `k8s-openapi`'s `Pod`, the decision — as a
//!   Wasm guest (reused instance, and a fresh instance per reconcile) against the same crate
//!   compiled natively and run by the same `GuestWorker` (`krec_guest::native`), over an
//!   in-memory cluster; the difference and the ratio. The arms are interleaved round by round,
//!   so machine noise hits all of them alike.
//! - `queue_ops_per_s`: workqueue add + get + done cycles per second, one thread and two.
//!
//! The figures are printed as a Markdown table and merged into `bench/results.json`.
//! `KREC_BENCH_QUICK=1` (`make bench-quick`) runs fewer rounds.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::{median_min_max, quick};
use krec::cluster::{ClusterAccess, MemoryCluster};
use krec::guest::{GuestModule, GuestWorker};
use krec::manifest::Manifest;
use krec::queue::{RateLimit, WorkQueue};
use serde_json::{Value, json};

fn manifest(dir: &Path, isolation: &str) -> Manifest {
    let module = common::module("pod_stamper.wasm");
    let path = dir.join(format!("pod-stamper-{isolation}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: pod-stamper}}\nspec:\n  module: {}\n  isolation: {isolation}\n  tickers: [{{every: 1h, request: {{name: x}}}}]\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get]}}\n",
            module.display()
        ),
    )
    .expect("write manifest");
    Manifest::load(&path).expect("manifest")
}

async fn guest_call(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = krec::engine::new_engine().expect("engine");
    let linker = krec::guest::new_linker(&engine).expect("linker");
    let cluster = Arc::new(MemoryCluster::new());
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::READ_ONLY] = json!("true");
    let bytes = serde_json::to_vec(&pod).expect("json").len();
    cluster.create(pod).await.expect("pod");
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    let load = |isolation: &str| {
        Arc::new(
            GuestModule::load(&engine, &linker, Arc::new(manifest(dir.path(), isolation)))
                .expect("module"),
        )
    };
    let mut native = GuestWorker::new(
        Arc::new(GuestModule::native(
            Arc::new(manifest(dir.path(), "reuse")),
            krec_guest::native::reconcile::<pod_stamper::PodStamper>,
        )),
        access.clone(),
    );
    let mut reused = GuestWorker::new(load("reuse"), access.clone());
    let mut fresh = GuestWorker::new(load("per-reconcile"), access.clone());
    let (rounds, per_round) = if quick() { (5, 200) } else { (15, 1000) };
    let (mut native_us, mut wasm_reused, mut wasm_fresh) = (Vec::new(), Vec::new(), Vec::new());
    // Warm up every arm.
    for _ in 0..50 {
        reused
            .reconcile(Some("default"), "web-0")
            .await
            .expect("reconcile");
        fresh
            .reconcile(Some("default"), "web-0")
            .await
            .expect("reconcile");
        native
            .reconcile(Some("default"), "web-0")
            .await
            .expect("reconcile");
    }
    for _ in 0..rounds {
        let started = Instant::now();
        for _ in 0..per_round {
            native
                .reconcile(Some("default"), "web-0")
                .await
                .expect("reconcile");
        }
        native_us.push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
        let started = Instant::now();
        for _ in 0..per_round {
            reused
                .reconcile(Some("default"), "web-0")
                .await
                .expect("reconcile");
        }
        wasm_reused.push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
        let started = Instant::now();
        for _ in 0..per_round / 4 {
            fresh
                .reconcile(Some("default"), "web-0")
                .await
                .expect("reconcile");
        }
        wasm_fresh.push(started.elapsed().as_secs_f64() * 1e6 / (per_round / 4) as f64);
    }
    let (n, n_min, n_max) = median_min_max(native_us);
    let (r, r_min, r_max) = median_min_max(wasm_reused);
    let (f, f_min, f_max) = median_min_max(wasm_fresh);
    rows.push(format!(
        "| guest_call_native_us | {n:.2} | {n_min:.2}–{n_max:.2} | pod-stamper compiled natively, run by a `GuestWorker`: get of a {bytes}-byte Pod from the in-memory cluster as text, parsed into `Pod` (baseline) |"
    ));
    rows.push(format!(
        "| guest_call_wasm_reused_us | {r:.2} | {r_min:.2}–{r_max:.2} | the same crate as a Wasm guest, the worker's instance reused |"
    ));
    rows.push(format!(
        "| guest_call_wasm_fresh_us | {f:.2} | {f_min:.2}–{f_max:.2} | the same with a fresh instance per reconcile (`isolation: per-reconcile`) |"
    ));
    rows.push(format!(
        "| guest_call_overhead_us | {:.2} | | reused − native |",
        r - n
    ));
    rows.push(format!(
        "| guest_call_ratio_wasm_vs_native | {:.2}× | | reused / native |",
        r / n
    ));
    rows.push(format!(
        "| guest_call_instantiate_us | {:.2} | | fresh − reused: instantiation per reconcile |",
        f - r
    ));
    results.insert("guest_call_native_us".into(), json!(n));
    results.insert("guest_call_wasm_reused_us".into(), json!(r));
    results.insert("guest_call_wasm_fresh_us".into(), json!(f));
    results.insert("guest_call_overhead_us".into(), json!(r - n));
    results.insert("guest_call_ratio_wasm_vs_native".into(), json!(r / n));
}

/// add + get + done cycles per second over `threads` tasks, each on its own keys.
async fn queue_rate(threads: usize, ops: usize) -> f64 {
    let queue = Arc::new(WorkQueue::new(RateLimit::default()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..threads)
        .map(|t| {
            let queue = queue.clone();
            tokio::spawn(async move {
                for i in 0..ops {
                    let key = (t, i % 1024);
                    queue.add(key);
                    let got = queue.get().await.expect("key");
                    queue.done(&got);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    (threads * ops) as f64 / started.elapsed().as_secs_f64()
}

fn queue_ops(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let ops = if quick() { 200_000 } else { 1_000_000 };
    for threads in [1usize, 2] {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .build()
            .expect("runtime");
        let samples: Vec<f64> = (0..5)
            .map(|_| runtime.block_on(queue_rate(threads, ops / threads)))
            .collect();
        let (median, min, max) = median_min_max(samples);
        let name = format!(
            "queue_ops_per_s_{threads}_thread{}",
            if threads > 1 { "s" } else { "" }
        );
        rows.push(format!(
            "| {name} | {:.2} M | {:.2}–{:.2} M | workqueue add + get + done cycles per second, {threads} worker thread(s) |",
            median / 1e6,
            min / 1e6,
            max / 1e6
        ));
        results.insert(name, json!(median));
        if threads == 1 {
            results.insert("queue_ops_per_s".into(), json!(median));
        }
    }
}

fn main() {
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(guest_call(&mut rows, &mut results));
    drop(runtime);
    queue_ops(&mut rows, &mut results);
    common::print_table(&rows);
    common::write_results(results);
}
