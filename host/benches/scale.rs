//! The shared cache at 100 000 objects: memory per object, time to sync, and a guest's list
//! latency, at 1 000 objects (the baseline, same run) and at 100 000; beside kube-rs's
//! reflector over the same objects (as `Controller::new` sets it up, and dropping
//! `managedFields` as krec's cache does).
//!
//! The embedded API server runs in this process on a runtime of its own, its Pods created
//! straight in its store: 100 namespaces of 1 000 Pods of ~3 KB (quick: 10), each Pod labelled
//! `app=web-{i % 10}`, and in each namespace a ReplicaSet selecting `app=web-0` (100 Pods). No
//! built-in controller runs, so nothing changes while measuring. Figures:
//!
//! - `scale_{n}_cache_bytes_per_object`: heap held once synced (live bytes counted by this
//!   binary's allocator, the API server's own store excluded: it exists before), per object —
//!   for krec the manager's own memory included (engine, the guest's instance), which
//!   `scale_cache_bytes_per_added_object` (between 1 000 and N objects) leaves out;
//! - `scale_{n}_sync_s`: krec: `Manager::start_with` (module from the warm cache, informers
//!   listed and synced, workers started); kube-rs: its reflector's store ready;
//! - `scale_{n}_list_reconcile_us`: the sample `pod-counter` guest's reconcile of one
//!   ReplicaSet (a cached get, a list of the 100 Pods its selector matches among the
//!   namespace's 1 000, no write), mean of 300 manual triggers: what a list costs a guest as
//!   the cache grows.
//!
//! `KREC_BENCH_QUICK=1`: 10 000 objects instead of 100 000. Needs `make guests`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use krec::cluster::client::ApiClient;
use krec::controller::Request;
use krec::guest::ModuleCache;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_apiserver::Store;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: common::Counting = common::Counting;

use common::live_bytes;

/// Pods per namespace.
const PER_NAMESPACE: usize = 1_000;
/// Manual reconciles timed per measurement.
const RECONCILES: u64 = 300;
const GUEST: &str = "pod-counter";

fn namespace(n: usize) -> String {
    format!("scale-{n:03}")
}

/// Namespace `n` with its Pods and ReplicaSet, straight in the store.
fn fill_namespace(store: &Store, n: usize) {
    let registry = store.registry();
    let (pods, replica_sets) = (
        registry.by_plural("", "v1", "pods").expect("pods"),
        registry
            .by_plural("apps", "v1", "replicasets")
            .expect("replicasets"),
    );
    let ns = namespace(n);
    common::store_namespace(store, &ns);
    for i in 0..PER_NAMESPACE {
        let mut pod = common::pod(&ns, &format!("p-{i:04}"));
        pod["metadata"]["labels"]["app"] = json!(format!("web-{}", i % 10));
        store
            .create(&pods, Some(&ns), pod, false)
            .expect("create pod");
    }
    let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web-0"}},
            "template": {"metadata": {"labels": {"app": "web-0"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}});
    store
        .create(&replica_sets, Some(&ns), rs, false)
        .expect("create replicaset");
}

fn manifest(dir: &Path) -> Manifest {
    let spec = "  for: {apiVersion: apps/v1, kind: ReplicaSet}
  owns: [{apiVersion: v1, kind: Pod}]
  limits: {timeout: 5s, memory: 64Mi}
  permissions:
    - {apiVersion: apps/v1, kind: ReplicaSet, verbs: [get, list, watch, update]}
    - {apiVersion: v1, kind: Pod, verbs: [get, list, watch]}
";
    common::manifest(dir, GUEST, "pod_counter.wasm", spec)
}

/// Let freed buffers go and tasks finish, then read the live heap.
async fn settled_live_bytes() -> f64 {
    tokio::time::sleep(Duration::from_millis(500)).await;
    live_bytes()
}

/// krec at the store's current size: (bytes per object, sync s, reconcile µs).
async fn krec_figures(
    api: &Arc<ApiClient>,
    manifest: &Manifest,
    cache: &ModuleCache,
    objects: usize,
) -> (f64, f64, f64) {
    let before = settled_live_bytes().await;
    let started = Instant::now();
    let manager = Manager::start_with(
        api.clone(),
        vec![manifest.clone()],
        ManagerOptions {
            module_cache: cache.clone(),
            ..Default::default()
        },
    )
    .await
    .expect("manager");
    let sync = started.elapsed().as_secs_f64();
    assert!(manager.skipped().is_empty(), "{:?}", manager.skipped());
    let controller = manager.controller(GUEST).expect("pod-counter");
    // The start-up reconciles (one per ReplicaSet, and those owned Pods cause) first.
    let mut last = (controller.stats().total(), Instant::now());
    while last.1.elapsed() < Duration::from_millis(300) || !controller.queue().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let total = controller.stats().total();
        if total != last.0 {
            last = (total, Instant::now());
        }
    }
    let held = settled_live_bytes().await - before;
    // Manual triggers of one ReplicaSet, one at a time.
    let request = Request::new(Some(&namespace(0)), "web");
    let started = Instant::now();
    for _ in 0..RECONCILES {
        let total = controller.stats().total();
        controller.trigger(request.clone());
        while controller.stats().total() == total {
            tokio::task::yield_now().await;
        }
    }
    let reconcile = started.elapsed().as_secs_f64() * 1e6 / RECONCILES as f64;
    manager.shutdown(Duration::from_secs(10)).await;
    (held / objects as f64, sync, reconcile)
}

/// kube-rs's reflector over every Pod: (bytes per object, sync s).
async fn kube_rs_figures(client: &kube::Client, strip: bool, objects: usize) -> (f64, f64) {
    let before = settled_live_bytes().await;
    let started = Instant::now();
    let (reader, writer) = reflector::store::<Pod>();
    let stream = watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(move |pod: &mut Pod| {
            if strip {
                pod.metadata.managed_fields = None;
            }
        })
        .reflect(writer)
        .touched_objects();
    let task = tokio::spawn(async move {
        use futures::StreamExt;
        stream.for_each(|_| async {}).await;
    });
    reader.wait_until_ready().await.expect("reflector ready");
    let sync = started.elapsed().as_secs_f64();
    assert_eq!(reader.len(), objects);
    let held = settled_live_bytes().await - before;
    task.abort();
    let _ = task.await;
    drop(reader);
    (held / objects as f64, sync)
}

fn main() {
    let namespaces = if common::quick() { 10 } else { 100 };
    let server = common::InProcessServer::start();
    let store = server.store().clone();
    let kubeconfig = server.kubeconfig().to_owned();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = manifest(dir.path());
    let cache = ModuleCache::new(&dir.path().join("modules")).expect("module cache");
    let mut rows = vec![
        "| figure | at 1 000 objects | at N objects | N / 1 000 | kube-rs at N (default; stripped) | krec / kube-rs stripped |".to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    let mut results = serde_json::Map::new();
    runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client");
        let api = ApiClient::new(client.clone());
        fill_namespace(&store, 0);
        // Compile the guest into the module cache and warm up; not measured.
        krec_figures(&api, &manifest, &cache, PER_NAMESPACE).await;
        let small = krec_figures(&api, &manifest, &cache, PER_NAMESPACE).await;
        for n in 1..namespaces {
            fill_namespace(&store, n);
        }
        let objects = namespaces * PER_NAMESPACE;
        let large = krec_figures(&api, &manifest, &cache, objects).await;
        let kube_rs = kube_rs_figures(&client, false, objects).await;
        let stripped = kube_rs_figures(&client, true, objects).await;
        // What one more object costs, the manager's own memory (engine, instance) set aside.
        let marginal = (large.0 * objects as f64 - small.0 * PER_NAMESPACE as f64)
            / (objects - PER_NAMESPACE) as f64;
        rows.push(format!(
            "| scale_cache_bytes_per_added_object | | {marginal:.0} | | | |"
        ));
        results.insert("scale_cache_bytes_per_added_object".into(), json!(marginal));
        let figures = [
            ("cache_bytes_per_object", small.0, large.0, Some((kube_rs.0, stripped.0))),
            ("sync_s", small.1, large.1, Some((kube_rs.1, stripped.1))),
            ("list_reconcile_us", small.2, large.2, None),
        ];
        for (name, at_small, at_large, peers) in figures {
            let (peer_cell, ratio_cell) = match peers {
                Some((default, stripped)) => (
                    format!("{default:.3}; {stripped:.3}"),
                    format!("{:.2}×", at_large / stripped),
                ),
                None => ("—".to_owned(), "—".to_owned()),
            };
            rows.push(format!(
                "| scale_{name} | {at_small:.3} | {at_large:.3} | {:.2}× | {peer_cell} | {ratio_cell} |",
                at_large / at_small
            ));
            results.insert(format!("scale_1000_{name}"), json!(at_small));
            results.insert(format!("scale_{objects}_{name}"), json!(at_large));
            if let Some((default, stripped)) = peers {
                results.insert(format!("scale_{objects}_{name}_kube_rs"), json!(default));
                results.insert(
                    format!("scale_{objects}_{name}_kube_rs_stripped"),
                    json!(stripped),
                );
            }
        }
        rows.insert(0, format!("N = {objects}"));
    });
    for row in &rows {
        println!("{row}");
    }
    common::write_results(results);
    drop(runtime);
    server.shutdown();
}
