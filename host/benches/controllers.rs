//! The cost of the local cluster's built-in controllers and simulated nodes (issue 12): a
//! 1 000-Pod Deployment rolled out on 10 simulated nodes (110 Pods each, as a kubelet's default),
//! then rolled to a new image, with Pods starting at once (`pod_start` 0: the figure is the
//! controllers' own time, not simulated waiting).
//!
//! - `rollout_1000_pods_s`: Deployment created → `availableReplicas` 1 000;
//! - `rolling_update_1000_pods_s`: image changed → every Pod replaced and available;
//! - `simulation_cpu_s_per_1000_pods`: the process's CPU over the rollout;
//! - the baseline, in the same process: the writes a Pod needs at least (create, bind, status
//!   `Running`) made straight to a store by one caller, 1 000 times — what the controllers add
//!   is the ratio.
//!
//! Prints a Markdown table; `make bench` runs it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{median_min_max, process_cpu_seconds, quick, write_results};
use krec_apiserver::controllers::{Config, Selection};
use krec_apiserver::store::WriteOptions;
use krec_apiserver::{ResourceTypes, Server, Store};
use serde_json::{Value, json};

const PODS: i64 = 1_000;
const NODES: usize = 10;

fn deployment(image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"replicas": PODS, "selector": {"matchLabels": {"app": "big"}},
            "template": {"metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}})
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

async fn wait_until(store: &Store, done: impl Fn(&Value) -> bool) {
    let rt = store
        .registry()
        .by_plural("apps", "v1", "deployments")
        .expect("deployments");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Ok(d) = store.get(&rt, Some("default"), "big")
            && done(&d)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the rollout did not finish");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One rollout and rolling update: (rollout s, update s, CPU s over the rollout).
async fn rollout() -> (f64, f64, f64) {
    let cluster = Server::builder()
        .simulation(Config {
            controllers: Selection::all(),
            nodes: NODES,
            pod_start: Duration::ZERO,
            job_duration: Duration::from_secs(1),
            ..Config::default()
        })
        .start()
        .await
        .expect("server");
    let store = cluster.store().clone();
    let rt = store
        .registry()
        .by_plural("apps", "v1", "deployments")
        .expect("deployments");
    let cpu = process_cpu_seconds();
    let start = Instant::now();
    store
        .create(&rt, Some("default"), deployment("app:1"), false)
        .expect("create");
    wait_until(&store, |d| int(d, "/status/availableReplicas") == PODS).await;
    let rolled_out = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu;

    let mut d = (*store.get(&rt, Some("default"), "big").expect("get")).clone();
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("app:2");
    let start = Instant::now();
    let generation = store
        .update(
            &rt,
            Some("default"),
            "big",
            d,
            false,
            WriteOptions::default(),
        )
        .expect("update")["metadata"]["generation"]
        .as_i64()
        .unwrap_or(0);
    wait_until(&store, |d| {
        int(d, "/status/observedGeneration") == generation
            && int(d, "/status/updatedReplicas") == PODS
            && int(d, "/status/availableReplicas") == PODS
            && int(d, "/status/replicas") == PODS
    })
    .await;
    let updated = start.elapsed().as_secs_f64();
    cluster.shutdown().await;
    (rolled_out, updated, cpu)
}

/// The baseline: create, bind and mark running 1 000 Pods straight in a store.
fn baseline() -> f64 {
    let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
    krec_apiserver::ensure_namespaces(&store).expect("namespaces");
    let pods = store.registry().by_plural("", "v1", "pods").expect("pods");
    let start = Instant::now();
    for i in 0..PODS {
        let name = format!("big-{i}");
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "big"}},
            "spec": {"containers": [{"name": "app", "image": "app:1"}]}});
        let created = store
            .create(&pods, Some("default"), pod, false)
            .expect("create");
        let mut bound = (*created).clone();
        bound["spec"]["nodeName"] = json!(format!("node-{}", i % 10));
        let bound = store
            .update(
                &pods,
                Some("default"),
                &name,
                bound,
                false,
                WriteOptions::default(),
            )
            .expect("bind");
        let mut running = (*bound).clone();
        running["status"] = json!({"phase": "Running", "podIP": "10.244.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]});
        store
            .update(
                &pods,
                Some("default"),
                &name,
                running,
                true,
                WriteOptions::default(),
            )
            .expect("status");
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let runs = if quick() { 2 } else { 5 };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let (mut rollouts, mut updates, mut cpus, mut baselines) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        baselines.push(baseline());
        let (rolled, updated, cpu) = runtime.block_on(rollout());
        rollouts.push(rolled);
        updates.push(updated);
        cpus.push(cpu);
    }
    let ratio =
        |xs: &[f64]| -> Vec<f64> { xs.iter().zip(&baselines).map(|(x, b)| x / b).collect() };
    let show = |(m, lo, hi): (f64, f64, f64)| format!("{m:.2} ({lo:.2}–{hi:.2})");
    println!("| figure | median (min–max) | over the baseline, median (min–max) |");
    println!("|---|---|---|");
    println!(
        "| baseline_1000_pods_3_writes_s | {} | 1 |",
        show(median_min_max(baselines.clone()))
    );
    println!(
        "| rollout_1000_pods_s | {} | {}× |",
        show(median_min_max(rollouts.clone())),
        show(median_min_max(ratio(&rollouts)))
    );
    println!(
        "| rolling_update_1000_pods_s | {} | {}× |",
        show(median_min_max(updates.clone())),
        show(median_min_max(ratio(&updates)))
    );
    println!(
        "| simulation_cpu_s_per_1000_pods | {} | {}× |",
        show(median_min_max(cpus.clone())),
        show(median_min_max(ratio(&cpus)))
    );
    println!("({runs} runs; {NODES} nodes; Pods start at once)");
    let mut figures = serde_json::Map::new();
    for (name, samples) in [
        ("baseline_1000_pods_3_writes_s", &baselines),
        ("rollout_1000_pods_s", &rollouts),
        ("rolling_update_1000_pods_s", &updates),
        ("simulation_cpu_s_per_1000_pods", &cpus),
    ] {
        let (median, min, max) = median_min_max(samples.clone());
        figures.insert(
            name.into(),
            json!({"median": median, "min": min, "max": max}),
        );
    }
    write_results(figures);
}
