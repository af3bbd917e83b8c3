//! One reconciler through the whole host path, three ways, interleaved in one run:
//!
//! - **wasm**: `bench/pod-stamper` as a Wasm guest in krec;
//! - **wasm_lazy**: the same guest reading the Pod as a `Lazy<Pod>` view (`config: {lazy:
//!   true}`: the fields it decides on are found in the text, nothing else is decoded);
//! - **native**: the same crate compiled natively and run by krec's host in place of the guest
//!   (same cache, queue, workers, client and permission checks);
//! - **kube-rs**: kube-rs's `Controller` running the same decision ([`pod_stamper::stamp`]) on
//!   the objects of its own reflector, as `Controller::new` sets it up;
//! - **kube-rs stripped**: the same, its reflector dropping `metadata.managedFields` (a
//!   `modify` on the watcher stream), as krec's cache does: like for like.
//!
//! The embedded API server runs in a child process (`krec cluster`) and the load comes from
//! another (this binary re-run as the driver), so the CPU time this process uses is the host's
//! alone. Figures:
//!
//! - `throughput_*_per_cpu_s`: reconciles per CPU-second of this process while the driver bumps
//!   a label on every Pod of a namespace: the write variant (each bump: watch event → queue →
//!   worker → reconciler → cached get → update to the API server, then the reconcile of the
//!   update's own event) and the read-only variant (no write: host and sandbox overhead alone);
//! - `latency_p50_us`, `latency_p99_us`: under a constant 1 000 label changes per second, the
//!   time from the driver sending a change to the driver seeing the reconciler's update of that
//!   change on its watch (both ends in the driver's clock).
//!
//! Then the rollout figures: the wasm arm's live throughput (reconciles per wall-clock second
//! of a bump) and latency with and without a shadow of the same module beside it
//! (`spec.rollout`, default `shadowCpu`), and replay speed from a recording of a bump.
//!
//! Then the cost of traces: the wasm arm with traces off, on at 1 % and on at 100 %, exported
//! over OTLP/HTTP to a loopback collector (`KREC_THROUGHPUT=tracing` runs these alone).
//!
//! Rounds alternate the arms, so machine noise hits them alike. `KREC_BENCH_QUICK=1` runs fewer
//! rounds. Needs `make guests` (for `pod_stamper.wasm`).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{median_min_max, percentile, process_cpu_seconds, quick};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use krec::guest::ModuleCache;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{controller, watcher};
use pod_stamper::{Decision, GENERATION, READ_ONLY, STAMP};
use serde_json::{Value, json};

/// Pods in each of the two namespaces.
const PODS: usize = 400;
/// The namespace whose Pods the reconciler updates.
const WRITE_NS: &str = "bench-write";
/// The namespace of read-only Pods.
const READ_NS: &str = "bench-read";
/// Label changes per second in the latency run.
const LOAD_RATE: u32 = 1000;
/// Workers per arm (`maxConcurrentReconciles`, kube-rs `concurrency`).
const WORKERS: u16 = 2;
/// The guest's name.
const GUEST: &str = "pod-stamper";

/// A Pod of about 3 KB of JSON, labelled for the stamper.
fn pod(namespace: &str, i: usize) -> Value {
    let mut pod = common::pod(namespace, &format!("web-{i:04}"));
    pod["metadata"]["labels"][GENERATION] = json!("0");
    if namespace == READ_NS {
        pod["metadata"]["labels"][READ_ONLY] = json!("true");
    }
    pod
}

async fn client(kubeconfig: &str) -> kube::Client {
    krec::cluster::connect::client_from_kubeconfig(kubeconfig)
        .await
        .expect("client from kubeconfig")
}

// ---------------------------------------------------------------------------------------------
// The driver: a child process that changes Pods and watches for the reconciler's answers.

/// Run as the driver: read commands on stdin, answer each with one line on stdout.
fn driver_main(kubeconfig_path: &str) {
    common::serve_driver(kubeconfig_path, |client, words| async move {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["setup"] => setup(&client).await,
            ["bump", ns, generation] => bump(&client, ns, generation).await,
            ["load", seconds, generation] => {
                load(
                    &client,
                    seconds.parse().expect("seconds"),
                    generation.parse().expect("generation"),
                )
                .await
            }
            other => format!("error unknown command {other:?}"),
        }
    });
}

async fn setup(client: &kube::Client) -> String {
    for ns in [WRITE_NS, READ_NS] {
        common::create_pods(client, ns, PODS, |i| pod(ns, i)).await;
    }
    "ok".into()
}

fn generation_patch(generation: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"labels": {GENERATION: generation}}}))
}

/// Set the generation label of every Pod in `ns`, 32 requests in flight.
async fn bump(client: &kube::Client, ns: &str, generation: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let patch = generation_patch(generation);
    futures::stream::iter(0..PODS)
        .map(|i| {
            let (pods, patch) = (pods.clone(), &patch);
            async move {
                pods.patch(&format!("web-{i:04}"), &PatchParams::default(), patch)
                    .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("bump pods");
    "ok".into()
}

/// For `seconds`, change one write Pod's generation every 1/[`LOAD_RATE`] s (round robin, each
/// change a new generation from `first`), and time each change until the watch shows the
/// reconciler's stamp for it. Answers `latency <p50_us> <p99_us> <answered> <sent>`.
async fn load(client: &kube::Client, seconds: u64, first: u64) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), WRITE_NS);
    let sent: Arc<std::sync::Mutex<HashMap<String, Instant>>> = Arc::default();
    let latencies: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
    // Watch first, so that no answer is missed.
    let watch = {
        let (sent, latencies) = (sent.clone(), latencies.clone());
        let stream = watcher(pods.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let Ok(watcher::Event::Apply(pod)) = event else {
                    continue;
                };
                let Some(stamp) = pod.metadata.annotations.as_ref().and_then(|a| a.get(STAMP))
                else {
                    continue;
                };
                let generation = stamp.split('/').next().unwrap_or_default();
                let key = format!("{}@{generation}", pod.metadata.name.unwrap_or_default());
                if let Some(at) = sent.lock().expect("sent").remove(&key) {
                    latencies
                        .lock()
                        .expect("latencies")
                        .push(at.elapsed().as_secs_f64() * 1e6);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let total = seconds * u64::from(LOAD_RATE);
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / LOAD_RATE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut in_flight = Vec::new();
    for n in 0..total {
        ticker.tick().await;
        let name = format!("web-{:04}", n as usize % PODS);
        let generation = (first + n).to_string();
        sent.lock()
            .expect("sent")
            .insert(format!("{name}@{generation}"), Instant::now());
        let pods = pods.clone();
        in_flight.push(tokio::spawn(async move {
            pods.patch(
                &name,
                &PatchParams::default(),
                &generation_patch(&generation),
            )
            .await
            .map(|_| ())
        }));
    }
    for task in in_flight {
        task.await.expect("patch task").expect("patch");
    }
    // Let the last answers arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sent.lock().expect("sent").is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watch.abort();
    let mut samples = latencies.lock().expect("latencies").clone();
    if samples.is_empty() {
        return format!("latency 0 0 0 {total}");
    }
    let answered = samples.len();
    let p50 = percentile(&mut samples, 50.0);
    let p99 = percentile(&mut samples, 99.0);
    format!("latency {p50:.0} {p99:.0} {answered} {total}")
}

// ---------------------------------------------------------------------------------------------
// The arms.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Arm {
    Wasm,
    WasmLazy,
    Native,
    KubeRs,
    KubeRsStripped,
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Wasm => "wasm",
            Arm::WasmLazy => "wasm_lazy",
            Arm::Native => "native",
            Arm::KubeRs => "kube_rs",
            Arm::KubeRsStripped => "kube_rs_stripped",
        }
    }
}

/// A running arm: something that reconciles Pods and counts its reconciles.
enum Running {
    Krec(Manager),
    KubeRs {
        task: tokio::task::JoinHandle<()>,
        count: Arc<AtomicU64>,
    },
}

impl Running {
    fn reconciles(&self) -> u64 {
        match self {
            Running::Krec(manager) => common::guest_reconciles(manager, GUEST),
            Running::KubeRs { count, .. } => count.load(Ordering::Relaxed),
        }
    }

    /// Whether anything is queued or running.
    fn busy(&self) -> bool {
        match self {
            Running::Krec(manager) => common::guest_busy(manager, GUEST),
            Running::KubeRs { .. } => false,
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

    /// Wait until at least `at_least` reconciles have run and nothing has happened for 100 ms.
    async fn settle(&self, at_least: u64) {
        common::settle(
            || self.reconciles(),
            || self.busy(),
            at_least,
            Duration::from_millis(100),
        )
        .await;
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct KubeRsError(String);

/// The kube-rs arm's reconcile: the stamper's decision on the reflector's object, then
/// `replace` when it says so.
async fn kube_rs_reconcile(
    pod: Arc<Pod>,
    ctx: Arc<(kube::Client, Arc<AtomicU64>)>,
) -> Result<controller::Action, KubeRsError> {
    let (client, count) = &*ctx;
    let mut pod = (*pod).clone();
    if pod_stamper::stamp(&mut pod) == Decision::Write {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        api.replace(&name, &PostParams::default(), &pod)
            .await
            .map_err(|e| KubeRsError(e.to_string()))?;
    }
    count.fetch_add(1, Ordering::Relaxed);
    Ok(controller::Action::await_change())
}

fn manifest(dir: &Path) -> Manifest {
    manifest_with(dir, "")
}

/// The stamper's manifest with `extra` spec lines.
fn manifest_with(dir: &Path, extra: &str) -> Manifest {
    let spec = format!(
        "  for: {{apiVersion: v1, kind: Pod}}
  maxConcurrentReconciles: {WORKERS}
  # kube-rs's client has no rate limit: neither has this arm, to compare like with like.
  limits: {{writeQps: 100000, writeBurst: 100000}}
  permissions:
    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch, update]}}
{extra}"
    );
    common::manifest(dir, GUEST, "pod_stamper.wasm", &spec)
}

async fn start(
    arm: Arm,
    client: &kube::Client,
    manifest: &Manifest,
    module_cache: &ModuleCache,
) -> Running {
    let running = match arm {
        Arm::Wasm | Arm::WasmLazy | Arm::Native => {
            let mut options = ManagerOptions {
                module_cache: module_cache.clone(),
                ..Default::default()
            };
            if arm == Arm::Native {
                options.runners.insert(
                    GUEST.to_owned(),
                    krec::guest::native::runner(
                        krec_guest::native::reconcile::<pod_stamper::PodStamper>,
                    ),
                );
            }
            Running::Krec(common::start_manager(client, manifest, options).await)
        }
        Arm::KubeRs | Arm::KubeRsStripped => {
            let count = Arc::new(AtomicU64::new(0));
            let ctx = Arc::new((client.clone(), count.clone()));
            let pods = Api::<Pod>::all(client.clone());
            let controller = common::kube_rs_controller(pods, arm == Arm::KubeRsStripped)
                .with_config(controller::Config::default().concurrency(WORKERS));
            let task = tokio::spawn(
                controller
                    .run(
                        kube_rs_reconcile,
                        |_, _, _| controller::Action::requeue(Duration::from_secs(1)),
                        ctx,
                    )
                    .for_each(|_| async {}),
            );
            Running::KubeRs { task, count }
        }
    };
    // Every Pod is reconciled once at start-up; wait for that to finish.
    running.settle(2 * PODS as u64).await;
    running
}

/// Reconciles per CPU-second while the driver bumps every Pod of `ns`; `per_pod` reconciles are
/// expected per Pod.
async fn measure(
    running: &Running,
    driver: &mut common::Driver,
    ns: &str,
    generation: u64,
    per_pod: u64,
) -> f64 {
    let before = running.reconciles();
    let cpu = process_cpu_seconds();
    let answer = driver.ask(format!("bump {ns} {generation}")).await;
    assert_eq!(answer, "ok");
    running.settle(before + per_pod * PODS as u64).await;
    let cpu = process_cpu_seconds() - cpu;
    (running.reconciles() - before) as f64 / cpu
}

fn now_generation() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What each part of the benchmark stands on: the API server process with the driver's Pods,
/// a client of it, the driver, and a module cache in a directory of its own.
struct Stage {
    /// Held: the API server stops when it drops.
    _cluster: common::ClusterProcess,
    client: kube::Client,
    driver: common::Driver,
    dir: tempfile::TempDir,
    module_cache: ModuleCache,
}

impl Stage {
    async fn set() -> Self {
        let cluster = common::ClusterProcess::start();
        let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
        let client = client(&kubeconfig).await;
        let mut driver = common::Driver::start(&cluster.kubeconfig_path);
        assert_eq!(driver.ask("setup".into()).await, "ok");
        let dir = tempfile::tempdir().expect("tempdir");
        let module_cache = ModuleCache::new(&dir.path().join("modules")).expect("module cache");
        Stage {
            _cluster: cluster,
            client,
            driver,
            dir,
            module_cache,
        }
    }
}

async fn bench(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let Stage {
        _cluster,
        client,
        mut driver,
        dir,
        module_cache,
    } = Stage::set().await;
    let manifest = manifest(dir.path());
    let lazy_dir = dir.path().join("lazy");
    std::fs::create_dir_all(&lazy_dir).expect("mkdir");
    let lazy = manifest_with(
        &lazy_dir,
        &format!(
            "  config: {{annotation: {}, lazy: true}}\n",
            pod_stamper::STAMP
        ),
    );
    let manifest_of = |arm: Arm| {
        if arm == Arm::WasmLazy {
            &lazy
        } else {
            &manifest
        }
    };
    let arms = [
        Arm::Wasm,
        Arm::WasmLazy,
        Arm::Native,
        Arm::KubeRs,
        Arm::KubeRsStripped,
    ];
    let (rounds, load_seconds) = if quick() { (3, 3) } else { (7, 10) };
    let mut write: HashMap<Arm, Vec<f64>> = HashMap::new();
    let mut read: HashMap<Arm, Vec<f64>> = HashMap::new();
    // Generations only grow, so every bump is a change.
    let mut generation = now_generation() * 1000;
    for round in 0..rounds {
        for &arm in &arms {
            let running = start(arm, &client, manifest_of(arm), &module_cache).await;
            generation += 1;
            let w = measure(&running, &mut driver, WRITE_NS, generation, 2).await;
            let r = measure(&running, &mut driver, READ_NS, generation, 1).await;
            eprintln!(
                "round {round} {}: write {w:.0}/cpu-s, read {r:.0}/cpu-s",
                arm.name()
            );
            write.entry(arm).or_default().push(w);
            read.entry(arm).or_default().push(r);
            running.stop().await;
        }
    }
    let mut medians = HashMap::new();
    for (variant, samples, what) in [
        (
            "write",
            &write,
            "bump → event → queue → reconcile → cached get → update, and the update's own reconcile",
        ),
        (
            "read",
            &read,
            "bump → event → queue → reconcile → cached get, no write",
        ),
    ] {
        for &arm in &arms {
            let name = format!("throughput_{variant}_{}_per_cpu_s", arm.name());
            let (median, min, max) = median_min_max(samples[&arm].clone());
            rows.push(format!(
                "| {name} | {median:.0} | {min:.0}–{max:.0} | reconciles per CPU-second, {}: {what} |",
                arm.name()
            ));
            results.insert(name, json!(median));
            medians.insert((variant, arm), median);
        }
    }
    for variant in ["write", "read"] {
        for (krec, prefix) in [(Arm::Wasm, "wasm"), (Arm::WasmLazy, "wasm_lazy")] {
            let wasm = medians[&(variant, krec)];
            for (other, label) in [
                (Arm::Native, "native"),
                (Arm::KubeRs, "kube_rs"),
                (Arm::KubeRsStripped, "kube_rs_stripped"),
            ] {
                let suffix = if variant == "write" { "" } else { "_read" };
                let name = format!("throughput_ratio_{prefix}_vs_{label}{suffix}");
                let ratio = wasm / medians[&(variant, other)];
                let target = match (other, variant) {
                    (Arm::Native, _) => "≥ 0.7",
                    (Arm::KubeRsStripped, "write") => "≥ 1.1 (issue 42)",
                    _ => "≥ 1.0",
                };
                rows.push(format!(
                    "| {name} | {ratio:.2}× | | {prefix} / {label}, {variant} variant (target {target}) |"
                ));
                results.insert(name, json!(ratio));
            }
        }
    }
    // Latency under constant load, one run per arm.
    for &arm in &arms {
        let running = start(arm, &client, manifest_of(arm), &module_cache).await;
        generation += 1_000_000;
        let answer = driver
            .ask(format!("load {load_seconds} {generation}"))
            .await;
        running.stop().await;
        let words: Vec<&str> = answer.split_whitespace().collect();
        let [_, p50, p99, answered, sent] = words.as_slice() else {
            panic!("driver answered {answer:?}");
        };
        let (p50, p99): (f64, f64) = (p50.parse().expect("p50"), p99.parse().expect("p99"));
        rows.push(format!(
            "| latency_{}_us | p50 {p50:.0} / p99 {p99:.0} | | change sent → the reconciler's update seen on a watch, {LOAD_RATE} changes/s for {load_seconds} s; {answered} of {sent} answered |",
            arm.name()
        ));
        results.insert(format!("latency_p50_{}_us", arm.name()), json!(p50));
        results.insert(format!("latency_p99_{}_us", arm.name()), json!(p99));
        if arm == Arm::Wasm {
            results.insert("latency_p50_us".into(), json!(p50));
            results.insert("latency_p99_us".into(), json!(p99));
        }
    }
}

/// Live reconciles per wall-clock second while the driver bumps every write Pod (2 per Pod).
async fn wall_throughput(running: &Running, driver: &mut common::Driver, generation: u64) -> f64 {
    let before = running.reconciles();
    let target = before + 2 * PODS as u64;
    let started = Instant::now();
    let answer = driver.ask(format!("bump {WRITE_NS} {generation}")).await;
    assert_eq!(answer, "ok");
    while running.reconciles() < target {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = started.elapsed().as_secs_f64();
    running.settle(target).await;
    (target - before) as f64 / took
}

/// The live version's throughput and latency with and without a shadow of the same module
/// beside it (`spec.rollout`, default `shadowCpu`), and replay speed from a recording.
async fn rollout_bench(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let Stage {
        _cluster,
        client,
        mut driver,
        dir,
        module_cache,
    } = Stage::set().await;
    let plain = manifest(dir.path());
    let candidate = common::module("pod_stamper.wasm");
    let shadowed = manifest_with(
        dir.path(),
        &format!("  rollout: {{candidate: {}}}\n", candidate.display()),
    );
    let (rounds, load_seconds) = if quick() { (3, 3) } else { (7, 10) };
    let mut generation = now_generation() * 1000 + 500_000_000;
    let mut wall: HashMap<bool, Vec<f64>> = HashMap::new();
    let mut shadow_counts = Value::Null;
    let mut recorded = Vec::new();
    for round in 0..rounds {
        for shadow in [false, true] {
            let manifest = if shadow { &shadowed } else { &plain };
            let running = start(Arm::Wasm, &client, manifest, &module_cache).await;
            let Running::Krec(manager) = &running else {
                unreachable!("a krec arm")
            };
            let controller = manager.controller(GUEST).expect("the guest");
            let sink = (round == 0 && !shadow).then(|| {
                let (sink, lines) = krec::rollout::recording::Sink::new(false);
                assert!(controller.recording().start(sink.clone()));
                (sink, lines)
            });
            generation += 1;
            let t = wall_throughput(&running, &mut driver, generation).await;
            if let Some((_, mut lines)) = sink {
                controller.recording().stop();
                while let Ok(line) = lines.try_recv() {
                    if let Ok(krec::rollout::recording::Line::Reconcile(r)) =
                        serde_json::from_str(&line)
                    {
                        recorded.push(*r);
                    }
                }
            }
            if shadow {
                // Let the shadow finish what it took, then read its counts.
                tokio::time::sleep(Duration::from_secs(2)).await;
                shadow_counts =
                    controller.rollout_report().expect("a rollout")["candidateCounts"].clone();
            }
            eprintln!(
                "round {round} shadow={shadow}: {t:.0} live reconciles/s{}",
                if shadow {
                    format!("; shadow {shadow_counts}")
                } else {
                    String::new()
                }
            );
            wall.entry(shadow).or_default().push(t);
            running.stop().await;
        }
    }
    let (without, wmin, wmax) = median_min_max(wall[&false].clone());
    let (with, smin, smax) = median_min_max(wall[&true].clone());
    rows.push(format!(
        "| rollout_live_throughput_without_shadow | {without:.0} | {wmin:.0}–{wmax:.0} | live reconciles per second, write variant (2 per Pod bump), no candidate |"
    ));
    rows.push(format!(
        "| rollout_live_throughput_with_shadow | {with:.0} | {smin:.0}–{smax:.0} | the same with a shadow of the same module beside it (default shadowCpu, 25 % of a core); last round's shadow: {shadow_counts} |"
    ));
    let ratio = with / without;
    rows.push(format!(
        "| rollout_throughput_ratio_with_vs_without_shadow | {ratio:.2}× | | target ≥ 0.9 |"
    ));
    results.insert("rollout_throughput_ratio".into(), json!(ratio));
    for (shadow, manifest) in [(false, &plain), (true, &shadowed)] {
        let running = start(Arm::Wasm, &client, manifest, &module_cache).await;
        generation += 1_000_000;
        let answer = driver
            .ask(format!("load {load_seconds} {generation}"))
            .await;
        let coverage = match &running {
            Running::Krec(manager) if shadow => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let report = manager
                    .controller(GUEST)
                    .and_then(|c| c.rollout_report())
                    .expect("a rollout");
                let c = &report["candidateCounts"];
                format!(
                    "; the shadow compared {} ({} same), skipped {}",
                    c["reconciles"], c["same"], c["skipped"]
                )
            }
            _ => String::new(),
        };
        running.stop().await;
        let words: Vec<&str> = answer.split_whitespace().collect();
        let [_, p50, p99, answered, sent] = words.as_slice() else {
            panic!("driver answered {answer:?}");
        };
        let name = if shadow { "with" } else { "without" };
        rows.push(format!(
            "| rollout_latency_{name}_shadow_us | p50 {p50} / p99 {p99} | | change → the live version's update seen, {LOAD_RATE}/s for {load_seconds} s; {answered} of {sent} answered{coverage} |"
        ));
        results.insert(
            format!("rollout_latency_p50_{name}_shadow_us"),
            json!(p50.parse::<f64>().unwrap_or(0.0)),
        );
    }
    // Replay: the recorded reconciles on the same module, no cluster.
    let engine = krec::guest::engine::new_engine().expect("engine");
    let linker = krec::guest::new_linker(&engine).expect("linker");
    let module = Arc::new(
        krec::guest::GuestModule::load(&engine, &linker, plain.clone().into()).expect("module"),
    );
    let mut speeds = Vec::new();
    for _ in 0..rounds {
        let copy = recorded.clone();
        let started = Instant::now();
        let summary = krec::cli::replay::replay(module.clone(), copy, |_, lines| {
            panic!("the same module diverged: {lines:?}")
        })
        .await
        .expect("replay");
        speeds.push(summary.reconciles as f64 / started.elapsed().as_secs_f64());
    }
    let (speed, min, max) = median_min_max(speeds);
    rows.push(format!(
        "| replay_reconciles_per_s | {speed:.0} | {min:.0}–{max:.0} | {} recorded reconciles of the stamper replayed on its module, one worker, no cluster ({:.2}× the live version's wall throughput on 2 workers) |",
        recorded.len(),
        speed / without
    ));
    results.insert("replay_reconciles_per_s".into(), json!(speed));
}

/// The wasm arm with traces off, on at 1 % and on at 100 % (exported over OTLP/HTTP to a
/// loopback collector that drops them), interleaved round by round in one process.
async fn tracing_bench(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    use krec::telemetry::{Sampler, Telemetry};
    let Stage {
        _cluster,
        client,
        mut driver,
        dir,
        module_cache,
    } = Stage::set().await;
    let manifest = manifest(dir.path());
    // A collector on loopback that reads and drops what it is sent: the exporter's work is
    // real, the collector's none.
    let sink = format!(
        "http://{}/v1/traces",
        krec_testkit::receive_posts(|_, _| {})
    );
    let arms: [(&str, Option<Sampler>); 3] = [
        ("off", None),
        ("1pct", Some(Sampler::Ratio(0.01))),
        ("100pct", Some(Sampler::Always)),
    ];
    let rounds = if quick() { 3 } else { 7 };
    let mut generation = now_generation() * 1000 + 700_000_000;
    let mut write: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut read: HashMap<&str, Vec<f64>> = HashMap::new();
    for round in 0..rounds {
        // Each round starts with the next arm: a machine slowing within a round (it does, by
        // 10–20 % here) weighs on every arm alike over the rounds, not on the last one.
        for k in 0..arms.len() {
            let (name, sampler) = arms[(round + k) % arms.len()];
            let telemetry = sampler
                .map(|sampler| Telemetry::otlp_http(&sink, sampler).expect("the OTLP exporter"));
            krec::telemetry::replace(telemetry);
            let running = start(Arm::Wasm, &client, &manifest, &module_cache).await;
            generation += 1;
            let w = measure(&running, &mut driver, WRITE_NS, generation, 2).await;
            let r = measure(&running, &mut driver, READ_NS, generation, 1).await;
            eprintln!("round {round} traces {name}: write {w:.0}/cpu-s, read {r:.0}/cpu-s");
            write.entry(name).or_default().push(w);
            read.entry(name).or_default().push(r);
            running.stop().await;
            if let Some(telemetry) = krec::telemetry::replace(None) {
                // Its last spans exported inside this arm's round, not the next's.
                let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
            }
        }
    }
    for (variant, samples) in [("write", &write), ("read", &read)] {
        common::arms_vs_baseline(
            rows,
            results,
            (&format!("throughput_{variant}_traces"), "_per_cpu_s", 0),
            &arms.map(|(name, _)| name),
            samples,
            |name, ratio, paired| {
                format!("wasm arm, traces {name}: {ratio:.3}× of off; by round {paired:.3}×")
            },
        );
    }
}

fn main() {
    if let Some(kubeconfig) = std::env::var_os("KREC_BENCH_DRIVER") {
        driver_main(&kubeconfig.to_string_lossy());
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    // `KREC_THROUGHPUT=rollout` runs the rollout figures alone, `=tracing` the traces' cost
    // alone.
    let only = std::env::var("KREC_THROUGHPUT").unwrap_or_default();
    if only.is_empty() {
        runtime.block_on(bench(&mut rows, &mut results));
    }
    if only.is_empty() || only == "rollout" {
        runtime.block_on(rollout_bench(&mut rows, &mut results));
    }
    if only.is_empty() || only == "tracing" {
        runtime.block_on(tracing_bench(&mut rows, &mut results));
    }
    common::print_table(&rows);
    common::write_results(results);
}
