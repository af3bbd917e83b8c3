//! What one reconcile costs in the sandbox, and what the workqueue costs alone:
//!
//! - `guest_call_overhead_us`: one reconcile of `bench/pod-stamper` on a read-only ~3 KB Pod —
//!   a `get` through the host, the text parsed into `k8s-openapi`'s `Pod`, the decision — as a
//!   Wasm guest (reused instance, and a fresh instance per reconcile) against the same crate
//!   compiled natively and run by the same `GuestWorker` (`krec_guest::native`), over an
//!   in-memory cluster; the difference and the ratio. The arms are interleaved round by round,
//!   so machine noise hits all of them alike.
//! - `admission_*_us`: one admission review inside the host (`GuestModule::admit`, what the
//!   HTTPS server calls per `AdmissionReview`) by pod-stamper's `GenerationValidator` — the
//!   ~3 KB Pod decoded into `Pod`, the stored Pod read from the cache — as a Wasm guest (a fresh
//!   instance per review, as webhooks always run) against the same validator compiled natively;
//!   p50 and p99 of single reviews, interleaved in rounds.
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
use krec::guest::{Engines, GuestModule, GuestWorker};
use krec::manifest::Manifest;
use krec::queue::{RateLimit, WorkQueue};
use serde_json::{Value, json};

/// The admission request kube-apiserver would send for an update of `pod` (to generation 2).
fn pod_review(pod: &Value) -> krec::bindings::guest::WitAdmissionRequest {
    use krec::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo};
    let mut updated = pod.clone();
    updated["metadata"]["labels"][pod_stamper::GENERATION] = json!("2");
    WitAdmissionRequest {
        uid: "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
        kind: krec::bindings::WitGvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        },
        resource: "pods".into(),
        sub_resource: None,
        name: pod["metadata"]["name"].as_str().map(str::to_owned),
        namespace: pod["metadata"]["namespace"].as_str().map(str::to_owned),
        operation: WitOperation::Update,
        user_info: WitUserInfo {
            username: "admin".into(),
            groups: vec!["system:authenticated".into()],
        },
        object: Some(updated.to_string()),
        old_object: Some(pod.to_string()),
        dry_run: false,
    }
}

/// `manifest`'s guest on the engine `krec run` gives its isolation (pooled instances for
/// `per-reconcile`).
fn load(engines: &Engines, manifest: Arc<krec::manifest::Manifest>) -> GuestModule {
    let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
    GuestModule::load(engine, linker, manifest).expect("module")
}

async fn admission(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let engines = Engines::new().expect("engines");
    let cluster = Arc::new(MemoryCluster::new());
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::GENERATION] = json!("1");
    cluster.create(pod.clone()).await.expect("pod");
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    let manifest = Arc::new(webhook_manifest(dir.path(), "reuse"));
    let wasm = load(&engines, manifest.clone());
    let fresh = load(
        &engines,
        Arc::new(webhook_manifest(dir.path(), "per-reconcile")),
    );
    let native = krec::native::module_with_validator(
        manifest,
        krec_guest::native::reconcile::<pod_stamper::PodStamper>,
        krec_guest::native::validate::<pod_stamper::GenerationValidator>,
    );
    let request = pod_review(&pod);
    async fn review(
        module: &GuestModule,
        access: &Arc<dyn ClusterAccess>,
        request: &krec::bindings::guest::WitAdmissionRequest,
    ) -> f64 {
        let started = Instant::now();
        let verdict = module
            .admit(access, None, krec::guest::Review::Validate, request.clone())
            .await
            .expect("review");
        assert!(verdict.allowed, "{:?}", verdict.message);
        started.elapsed().as_secs_f64() * 1e6
    }
    let (rounds, per_round) = if quick() { (5, 200) } else { (15, 1000) };
    for _ in 0..50 {
        review(&wasm, &access, &request).await;
        review(&fresh, &access, &request).await;
        review(&native, &access, &request).await;
    }
    let (mut native_all, mut wasm_all, mut fresh_all) = (Vec::new(), Vec::new(), Vec::new());
    let (mut native_p50, mut wasm_p50, mut fresh_p50) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (module, all, p50s) in [
            (&native, &mut native_all, &mut native_p50),
            (&wasm, &mut wasm_all, &mut wasm_p50),
            (&fresh, &mut fresh_all, &mut fresh_p50),
        ] {
            let mut round = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                round.push(review(module, &access, &request).await);
            }
            p50s.push(common::percentile(&mut round, 50.0));
            all.extend(round);
        }
    }
    let (np50, np50_min, np50_max) = median_min_max(native_p50);
    let (wp50, wp50_min, wp50_max) = median_min_max(wasm_p50);
    let np99 = common::percentile(&mut native_all, 99.0);
    let wp99 = common::percentile(&mut wasm_all, 99.0);
    let (fp50, fp50_min, fp50_max) = median_min_max(fresh_p50);
    let fp99 = common::percentile(&mut fresh_all, 99.0);
    rows.push(format!(
        "| admission_native_p50_us | {np50:.2} | {np50_min:.2}–{np50_max:.2} | pod-stamper's `GenerationValidator` compiled natively: one review of a Pod update inside the host (baseline); p99 {np99:.2} µs |"
    ));
    rows.push(format!(
        "| admission_wasm_p50_us | {wp50:.2} | {wp50_min:.2}–{wp50_max:.2} | the same validator as a Wasm guest, its instance kept between reviews (`isolation: reuse`, the default); p99 {wp99:.2} µs |"
    ));
    rows.push(format!(
        "| admission_wasm_fresh_p50_us | {fp50:.2} | {fp50_min:.2}–{fp50_max:.2} | the same with a fresh instance per review (`isolation: per-reconcile`); p99 {fp99:.2} µs |"
    ));
    rows.push(format!(
        "| admission_ratio_wasm_vs_native | {:.2}× | | p50 Wasm / p50 native |",
        wp50 / np50
    ));
    results.insert("admission_native_p50_us".into(), json!(np50));
    results.insert("admission_native_p99_us".into(), json!(np99));
    results.insert("admission_wasm_p50_us".into(), json!(wp50));
    results.insert("admission_wasm_p99_us".into(), json!(wp99));
    results.insert("admission_wasm_fresh_p50_us".into(), json!(fp50));
    results.insert("admission_wasm_fresh_p99_us".into(), json!(fp99));
    results.insert("admission_ratio_wasm_vs_native".into(), json!(wp50 / np50));
}

/// pod-stamper as a validating webhook for Pod updates.
fn webhook_manifest(dir: &Path, isolation: &str) -> Manifest {
    let module = common::module("pod_stamper.wasm");
    let path = dir.join(format!("pod-stamper-webhook-{isolation}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: pod-stamper}}\nspec:\n  module: {}\n  isolation: {isolation}\n  webhooks:\n    - type: validating\n      rules: [{{apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: [UPDATE]}}]\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get]}}\n",
            module.display()
        ),
    )
    .expect("write manifest");
    Manifest::load(&path).expect("manifest")
}

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
    let engines = Engines::new().expect("engines");
    let cluster = Arc::new(MemoryCluster::new());
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::READ_ONLY] = json!("true");
    // The Pod as stored and read: with the API server's defaults and its managedFields.
    let stored = cluster.create(pod).await.expect("pod");
    let bytes = serde_json::to_vec(&stored).expect("json").len();
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    let load =
        |isolation: &str| Arc::new(load(&engines, Arc::new(manifest(dir.path(), isolation))));
    let mut native = GuestWorker::new(
        Arc::new(krec::native::module(
            Arc::new(manifest(dir.path(), "reuse")),
            krec_guest::native::reconcile::<pod_stamper::PodStamper>,
        )),
        access.clone(),
    );
    let mut reused = GuestWorker::new(load("reuse"), access.clone());
    let mut fresh = GuestWorker::new(load("per-reconcile"), access.clone());
    let (rounds, per_round) = if quick() { (5, 200) } else { (15, 1000) };
    let (mut native_us, mut wasm_reused, mut wasm_fresh) = (Vec::new(), Vec::new(), Vec::new());
    // Instantiation alone: a per-reconcile worker's `warm_up` creates an instance, configures
    // it (`init`) and drops it, with no reconcile.
    let mut instantiate_only = Vec::new();
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
        let started = Instant::now();
        for _ in 0..per_round / 4 {
            fresh.warm_up().await.expect("instantiate");
        }
        instantiate_only.push(started.elapsed().as_secs_f64() * 1e6 / (per_round / 4) as f64);
    }
    let (n, n_min, n_max) = median_min_max(native_us);
    let (r, r_min, r_max) = median_min_max(wasm_reused);
    let (f, f_min, f_max) = median_min_max(wasm_fresh);
    let (i, i_min, i_max) = median_min_max(instantiate_only);
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
        "| guest_call_instantiate_only_us | {i:.2} | {i_min:.2}–{i_max:.2} | a fresh instance created, configured and dropped, no reconcile |"
    ));
    rows.push(format!(
        "| guest_call_ratio_fresh_vs_reused | {:.2}× | | fresh / reused (target ≤ 2) |",
        f / r
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
    results.insert("guest_call_instantiate_only_us".into(), json!(i));
    results.insert("guest_call_ratio_fresh_vs_reused".into(), json!(f / r));
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
    runtime.block_on(admission(&mut rows, &mut results));
    drop(runtime);
    queue_ops(&mut rows, &mut results);
    common::print_table(&rows);
    common::write_results(results);
}
