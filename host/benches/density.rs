//! Many controllers over the same objects — the case krec is built for. K controllers (K = 1,
//! 10, 50), each reconciling every Pod of the same set (`bench/pod-stamper`: get the Pod, decide
//! on its spec, write its own annotation when the generation label changes), run three ways:
//!
//! - **krec**: K guests in one `krec run` process (one shared cache, one watch per kind);
//! - **kube_rs_procs**: K processes, each one kube-rs `Controller` (how operators are deployed
//!   today: each its own watch and its own copy of every Pod);
//! - **kube_rs_shared**: one process with K kube-rs `Controller`s sharing one `Client` (each
//!   still its own watch and reflector);
//! - **kube_rs_procs_stripped**: as kube_rs_procs, each reflector dropping `managedFields` (a
//!   `modify` on its watcher stream), as krec's cache does: like for like.
//!
//! Every arm runs in its own processes (this binary re-run for kube-rs), against one embedded
//! API server (`krec cluster`) in another, so memory and CPU are the arm's alone. The Pods:
//! [`READ_PODS`] read-only Pods of ~3 KB (decided on, never written) and [`WRITE_PODS`] Pods
//! each controller writes its own annotation on (only for K ≤ [`WRITE_K_MAX`]: at K = 50 the
//! K² events of the write variant would take this 2-core machine minutes per round; the written
//! Pods are deleted before K = 50 runs).
//!
//! A controller writes only its own annotation, as a merge patch: K writers of one Pod never
//! conflict, so the write figures measure the runtimes rather than their retry policies.
//!
//! Per arm and K: memory (RSS and PSS, summed over the arm's processes) after the initial sync
//! and the peak under load; CPU-seconds per 1 000 reconciles during a bulk update of every
//! read-only Pod (and, for the write variant, of every written Pod); the time from the bulk
//! update's start until every controller has reconciled every Pod (converged); the watches the
//! API server holds open for the arm (its `/metrics`); the bytes the API server wrote over the
//! arm's life (`/proc/<pid>/io` `wchar`, TLS included). Ratios are krec over each peer.
//!
//! K = 50 runs on [`READ_PODS_K50`] Pods (fifty kube-rs processes caching 10 000 Pods each would
//! not fit this machine's memory), once. `KREC_BENCH_QUICK=1`: 2 000 read-only Pods, K = 1 and
//! 10, one round. `KREC_DENSITY_ARMS=krec,kube_rs_procs` runs only the arms named, and
//! `KREC_DENSITY_PODS=10000` sets the read-only Pods of a quick run (for looking into one
//! figure; a full run runs all). The module cache is filled before the first measured arm, so
//! no krec arm compiles.
//!
//! Beside them, `krec_metadata`: the bytes a host holds per Pod one guest owns, watched whole
//! and `metadataOnly` (the PSS of a host whose guest owns every Pod, less that of one whose
//! guest owns none), and their ratio.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{cpu_seconds_of, free_port, http_get, median_min_max, quick, rss_pss_kib_of};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller;
use pod_stamper::{Decision, GENERATION, READ_ONLY};
use serde_json::{Value, json};

/// Read-only Pods (full run, K ≤ [`WRITE_K_MAX`]).
const READ_PODS: usize = 10_000;
/// Read-only Pods at K = 50: fifty kube-rs processes each caching 10 000 Pods would need
/// 30 GB, more than this machine has; the other Pods are deleted before K = 50 runs.
const READ_PODS_K50: usize = 2_000;
/// Pods each controller writes (only arms with K ≤ [`WRITE_K_MAX`] see them).
const WRITE_PODS: usize = 500;
/// The largest K that runs the write variant.
const WRITE_K_MAX: usize = 10;
/// The namespace of every Pod: read-only ones `r-NNNNN`, written ones `w-NNNNN`.
const NS: &str = "density";
/// Workers per controller (`maxConcurrentReconciles`, kube-rs `concurrency`).
const WORKERS: u16 = 1;
/// Environment entries of [`common::pod`] (part of the stamp's value).
const SETTINGS: usize = 30;

/// Controller `k`'s annotation.
fn annotation(k: usize) -> String {
    format!("bench.krec.dev/stamp-{k}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Arm {
    Krec,
    KubeRsProcs,
    KubeRsShared,
    KubeRsProcsStripped,
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Krec => "krec",
            Arm::KubeRsProcs => "kube_rs_procs",
            Arm::KubeRsShared => "kube_rs_shared",
            Arm::KubeRsProcsStripped => "kube_rs_procs_stripped",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The kube-rs arms' child processes.

/// A child process of this binary running kube-rs controllers; asked for its reconcile count
/// line by line.
struct KubeRsChild {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl KubeRsChild {
    fn start(kubeconfig: &Path, first: usize, count: usize, strip: bool) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .env("KREC_DENSITY_CHILD", kubeconfig)
            .env(
                "KREC_DENSITY_CONTROLLERS",
                format!("{first},{count},{strip}"),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a kube-rs child");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        KubeRsChild {
            child,
            stdin,
            stdout,
        }
    }

    fn reconciles(&mut self) -> u64 {
        writeln!(self.stdin, "count").expect("to child");
        self.stdin.flush().expect("to child");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("from child");
        line.trim().parse().expect("a count")
    }
}

impl Drop for KubeRsChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kube-rs child: `count` controllers (annotations `first..first + count`) over the Pods of
/// the benchmark's namespace, answering `count` on stdin with the reconciles so far.
fn child_main(kubeconfig: &str, spec: &str) {
    let parts: Vec<&str> = spec.split(',').collect();
    let first: usize = parts[0].parse().expect("first");
    let count: usize = parts[1].parse().expect("count");
    let strip = parts.get(2) == Some(&"true");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let reconciles = Arc::new(AtomicU64::new(0));
    runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(&text)
            .await
            .expect("client");
        for k in first..first + count {
            let api: Api<Pod> = Api::namespaced(client.clone(), NS);
            let ctx = Arc::new((client.clone(), reconciles.clone(), annotation(k)));
            let controller = common::kube_rs_controller(api, strip)
                .with_config(controller::Config::default().concurrency(WORKERS));
            tokio::spawn(
                controller
                    .run(
                        reconcile,
                        |_, _, _| controller::Action::requeue(Duration::from_secs(1)),
                        ctx,
                    )
                    .for_each(|_| async {}),
            );
        }
        let counter = reconciles.clone();
        tokio::task::spawn_blocking(move || {
            for line in std::io::stdin().lock().lines() {
                if line.is_err() {
                    break;
                }
                println!("{}", counter.load(Ordering::Relaxed));
                let _ = std::io::stdout().flush();
            }
        })
        .await
        .expect("stdin loop");
    });
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct KubeRsError(String);

/// The kube-rs controllers' reconcile: the stamper's decision with this controller's
/// annotation, then a merge patch of that annotation when it says so (as the guests do).
async fn reconcile(
    pod: Arc<Pod>,
    ctx: Arc<(kube::Client, Arc<AtomicU64>, String)>,
) -> Result<controller::Action, KubeRsError> {
    let (client, count, annotation) = &*ctx;
    let mut pod = (*pod).clone();
    if pod_stamper::stamp_as(&mut pod, annotation) == Decision::Write {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let patch = pod_stamper::annotation_patch(&pod, annotation);
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| KubeRsError(e.to_string()))?;
    }
    count.fetch_add(1, Ordering::Relaxed);
    Ok(controller::Action::await_change())
}

// ---------------------------------------------------------------------------------------------
// The arms, running.

/// A running arm: its processes and how to count its reconciles.
enum Running {
    Krec {
        child: Child,
        admin: String,
        _dir: tempfile::TempDir,
    },
    KubeRs(Vec<KubeRsChild>),
}

impl Running {
    fn pids(&self) -> Vec<u32> {
        match self {
            Running::Krec { child, .. } => vec![child.id()],
            Running::KubeRs(children) => children.iter().map(|c| c.child.id()).collect(),
        }
    }

    fn reconciles(&mut self) -> u64 {
        match self {
            Running::Krec { admin, .. } => http_get(admin, "/metrics")
                .map(|text| sum_metric(&text, "controller_runtime_reconcile_total"))
                .unwrap_or(0.0) as u64,
            Running::KubeRs(children) => tokio::task::block_in_place(|| {
                children.iter_mut().map(KubeRsChild::reconciles).sum()
            }),
        }
    }

    /// RSS and PSS summed over the arm's processes, in MiB.
    fn memory_mib(&self) -> (f64, f64) {
        self.pids().iter().fold((0.0, 0.0), |(rss, pss), pid| {
            let (r, p) = rss_pss_kib_of(&pid.to_string());
            (rss + r / 1024.0, pss + p / 1024.0)
        })
    }

    fn cpu_seconds(&self) -> f64 {
        self.pids().iter().map(|pid| cpu_seconds_of(*pid)).sum()
    }

    /// Wait until at least `at_least` reconciles have run and none for `quiet`; returns the
    /// count and the peak memory (RSS, PSS in MiB) sampled meanwhile.
    async fn settle(&mut self, at_least: u64, quiet: Duration) -> (u64, (f64, f64)) {
        let deadline = Instant::now() + Duration::from_secs(900);
        let mut peak = self.memory_mib();
        let mut last = (self.reconciles(), Instant::now());
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let now = self.reconciles();
            let memory = self.memory_mib();
            peak = (peak.0.max(memory.0), peak.1.max(memory.1));
            if now != last.0 {
                last = (now, Instant::now());
            } else if now >= at_least && last.1.elapsed() >= quiet {
                return (now, peak);
            }
            assert!(
                Instant::now() < deadline,
                "reconciles stuck at {now}, expected at least {at_least}"
            );
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Running::Krec { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The sum of every sample of the metric `name` in a Prometheus exposition.
fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn write_manifests(dir: &Path, k: usize) {
    let module = common::module("pod_stamper.wasm");
    for i in 0..k {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: stamper-{i}}}
spec:
  module: {module}
  for: {{apiVersion: v1, kind: Pod}}
  namespaces: [{NS}]
  maxConcurrentReconciles: {WORKERS}
  config: {{annotation: {annotation}, patch: true}}
  # kube-rs's client has no rate limit: neither has this arm, to compare like with like.
  limits: {{writeQps: 100000, writeBurst: 100000}}
  permissions:
    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch, patch]}}
",
            module = module.display(),
            annotation = annotation(i),
        );
        std::fs::write(dir.join(format!("stamper-{i}.yaml")), text).expect("write manifest");
    }
}

/// `krec run` of the manifests in `manifests` against `kubeconfig`'s cluster, quiet, with its
/// admin server on a free port: the child and that address.
fn krec_run(manifests: &Path, kubeconfig: &Path, module_cache: &Path) -> (Child, String) {
    let admin = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_krec"))
        .arg("run")
        .arg("--manifests")
        .arg(manifests)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--module-cache")
        .arg(module_cache)
        .args(["--admin-addr", &admin])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start krec run");
    (child, admin)
}

fn start(arm: Arm, k: usize, kubeconfig: &Path, module_cache: &Path) -> Running {
    match arm {
        Arm::Krec => {
            let dir = tempfile::tempdir().expect("tempdir");
            write_manifests(dir.path(), k);
            let (child, admin) = krec_run(dir.path(), kubeconfig, module_cache);
            Running::Krec {
                child,
                admin,
                _dir: dir,
            }
        }
        Arm::KubeRsProcs => Running::KubeRs(
            (0..k)
                .map(|i| KubeRsChild::start(kubeconfig, i, 1, false))
                .collect(),
        ),
        Arm::KubeRsShared => Running::KubeRs(vec![KubeRsChild::start(kubeconfig, 0, k, false)]),
        Arm::KubeRsProcsStripped => Running::KubeRs(
            (0..k)
                .map(|i| KubeRsChild::start(kubeconfig, i, 1, true))
                .collect(),
        ),
    }
}

/// Set the generation label to `value` on the `count` Pods `{prefix}-NNNNN`.
async fn bulk_update(client: &kube::Client, prefix: &str, count: usize, value: &str) {
    let patch = json!({"metadata": {"labels": {GENERATION: value}}});
    patch_pods(client, prefix, count, &patch).await;
}

/// Merge-patch `patch` onto the `count` Pods `{prefix}-NNNNN`, 32 requests in flight.
async fn patch_pods(client: &kube::Client, prefix: &str, count: usize, patch: &Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    common::for_each_pod(&pods, 0..count, "patch pod", |pods, i| {
        let patch = Patch::Merge(patch.clone());
        async move {
            pods.patch(&format!("{prefix}-{i:05}"), &PatchParams::default(), &patch)
                .await
        }
    })
    .await;
}

/// Bytes the process `pid` has written (`wchar`: every write and send, sockets included).
fn written_bytes(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// One arm's figures for one K.
type Figures = BTreeMap<&'static str, f64>;

#[allow(clippy::too_many_arguments)]
async fn run_arm(
    arm: Arm,
    k: usize,
    read_pods: usize,
    cluster: &common::ClusterProcess,
    client: &kube::Client,
    module_cache: &Path,
    round: &mut u64,
) -> Figures {
    let write = k <= WRITE_K_MAX;
    let metrics = || async {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("request");
        client.request_text(request).await.unwrap_or_default()
    };
    let mut figures = Figures::new();
    let sent = written_bytes(cluster.pid());
    let started = Instant::now();
    let mut running = start(arm, k, &cluster.kubeconfig_path, module_cache);
    let pods = read_pods + if write { WRITE_PODS } else { 0 };
    let (synced, _) = running
        .settle((k * pods) as u64, Duration::from_millis(500))
        .await;
    figures.insert("sync_s", started.elapsed().as_secs_f64());
    let (rss, pss) = running.memory_mib();
    figures.insert("rss_mib_synced", rss);
    figures.insert("pss_mib_synced", pss);
    let watches = sum_metric(&metrics().await, "apiserver_longrunning_requests");
    figures.insert("watches", watches);

    // Read-only: every controller reads every Pod once more, writes nothing.
    *round += 1;
    let cpu = running.cpu_seconds();
    let started = Instant::now();
    bulk_update(client, "r", read_pods, &round.to_string()).await;
    let (after, peak) = running
        .settle(synced + (k * read_pods) as u64, Duration::from_millis(300))
        .await;
    figures.insert("converge_read_s", started.elapsed().as_secs_f64());
    let reconciles = (after - synced) as f64;
    figures.insert(
        "cpu_s_per_1000_read",
        (running.cpu_seconds() - cpu) * 1000.0 / reconciles,
    );
    figures.insert("rss_mib_load", peak.0);
    figures.insert("pss_mib_load", peak.1);

    if write {
        // Each controller writes its own annotation on every Pod; every write is an event for
        // every controller.
        let cpu = running.cpu_seconds();
        let started = Instant::now();
        bulk_update(client, "w", WRITE_PODS, &round.to_string()).await;
        // At least one reconcile per controller and Pod; the writes' own events (coalesced
        // while a key waits) until none comes for half a second.
        let (done, _) = running
            .settle(after + (k * WRITE_PODS) as u64, Duration::from_millis(500))
            .await;
        figures.insert("converge_write_s", started.elapsed().as_secs_f64());
        figures.insert(
            "cpu_s_per_1000_write",
            (running.cpu_seconds() - cpu) * 1000.0 / (done - after) as f64,
        );
    }
    figures.insert(
        "server_sent_mib",
        (written_bytes(cluster.pid()) - sent) / (1024.0 * 1024.0),
    );
    drop(running);
    // Let the server notice the closed watches before the next arm counts its own.
    tokio::time::sleep(Duration::from_secs(1)).await;
    figures
}

fn write_pod(i: usize) -> Value {
    let mut pod = common::pod(NS, &format!("w-{i:05}"));
    pod["metadata"]["labels"][GENERATION] = json!("0");
    // Already stamped by every writing controller: the initial sync writes nothing.
    pod["metadata"]["annotations"] = generation_zero_stamps();
    pod
}

/// Every writing controller's annotation as [`pod_stamper::stamp_as`] writes it for
/// generation 0.
fn generation_zero_stamps() -> Value {
    (0..WRITE_K_MAX)
        .map(|k| (annotation(k), json!(format!("0/{SETTINGS}"))))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Create `count` more Pods `pod(i)` in the benchmark's (existing) namespace.
async fn create_more_pods(client: &kube::Client, count: usize, pod: impl Fn(usize) -> Value) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    common::for_each_pod(&pods, 0..count, "create pod", |pods, i| {
        let object: Pod = serde_json::from_value(pod(i)).expect("pod");
        async move { pods.create(&PostParams::default(), &object).await }
    })
    .await;
}

/// Bring every written Pod back to generation 0, stamped by every controller: a new K's
/// controllers then start with nothing to write (a K = 10 arm after K = 1 would otherwise find
/// nine stale stamps per Pod).
async fn reset_written_pods(client: &kube::Client) {
    let patch = json!({"metadata": {"labels": {GENERATION: "0"},
        "annotations": generation_zero_stamps()}});
    patch_pods(client, "w", WRITE_PODS, &patch).await;
}

/// Delete the Pods `{prefix}-NNNNN` numbered `range`.
async fn delete_pods(client: &kube::Client, prefix: &str, range: std::ops::Range<usize>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    common::for_each_pod(&pods, range, "delete pod", |pods, i| async move {
        pods.delete(&format!("{prefix}-{i:05}"), &Default::default())
            .await
    })
    .await;
}

fn read_pod(i: usize) -> Value {
    let mut pod = common::pod(NS, &format!("r-{i:05}"));
    pod["metadata"]["labels"][GENERATION] = json!("0");
    pod["metadata"]["labels"][READ_ONLY] = json!("true");
    pod
}

async fn bench(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let (read_pods, ks, rounds): (usize, &[usize], usize) = if quick() {
        (2_000, &[1, 10], 1)
    } else {
        (READ_PODS, &[1, 10, 50], 3)
    };
    let read_pods = match std::env::var("KREC_DENSITY_PODS") {
        Ok(pods) if quick() => pods.parse().expect("KREC_DENSITY_PODS: a number of Pods"),
        _ => read_pods,
    };
    let cluster = common::ClusterProcess::start();
    let text = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
    let client = krec::cluster::connect::client_from_kubeconfig(&text)
        .await
        .expect("client");
    common::create_pods(&client, NS, read_pods, read_pod).await;
    create_more_pods(&client, WRITE_PODS, write_pod).await;
    let cache = tempfile::tempdir().expect("module cache");
    let named = std::env::var("KREC_DENSITY_ARMS").unwrap_or_default();
    let arms: Vec<Arm> = [
        Arm::Krec,
        Arm::KubeRsProcs,
        Arm::KubeRsShared,
        Arm::KubeRsProcsStripped,
    ]
    .into_iter()
    .filter(|arm| named.is_empty() || named.split(',').any(|n| n == arm.name()))
    .collect();
    let mut generation = 0u64;
    // Compile the guest into the module cache (and warm the machine); not measured.
    run_arm(
        Arm::Krec,
        1,
        read_pods,
        &cluster,
        &client,
        cache.path(),
        &mut generation,
    )
    .await;
    if named.is_empty() || named.split(',').any(|n| n == "krec_metadata") {
        let pods = read_pods + WRITE_PODS;
        metadata_only_cache(pods, &cluster, cache.path(), rounds, rows, results).await;
    }
    if arms.is_empty() {
        return;
    }
    let mut read_pods = read_pods;
    for &k in ks {
        // K = 50 runs once: each of its rounds is minutes of 50 processes on two cores.
        let rounds = if k >= 50 { 1 } else { rounds };
        if k > WRITE_K_MAX {
            delete_pods(&client, "w", 0..WRITE_PODS).await;
            if read_pods > READ_PODS_K50 {
                delete_pods(&client, "r", READ_PODS_K50..read_pods).await;
                read_pods = READ_PODS_K50;
            }
        } else {
            reset_written_pods(&client).await;
        }
        let mut by_arm: BTreeMap<Arm, Vec<Figures>> = BTreeMap::new();
        for round in 0..rounds {
            for &arm in &arms {
                let figures = run_arm(
                    arm,
                    k,
                    read_pods,
                    &cluster,
                    &client,
                    cache.path(),
                    &mut generation,
                )
                .await;
                eprintln!("K={k} round {round} {}: {figures:?}", arm.name());
                by_arm.entry(arm).or_default().push(figures);
            }
        }
        report(k, read_pods, rounds, &by_arm, rows, results);
    }
}

/// What a host holds per Pod that one guest owns: watched whole (`owns: Pod`) and for its
/// metadata alone (`metadataOnly: true`), each the PSS of a `krec run` with that guest over
/// `pods` Pods, less that of the same host whose guest owns no Pods; `rounds` rounds, the
/// three arms interleaved.
async fn metadata_only_cache(
    pods: usize,
    cluster: &common::ClusterProcess,
    module_cache: &Path,
    rounds: usize,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
) {
    let arms = [("none", ""), ("full", "false"), ("metadata", "true")];
    let mut pss: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for _ in 0..rounds {
        for (arm, metadata_only) in arms {
            let dir = tempfile::tempdir().expect("tempdir");
            let owns = if metadata_only.is_empty() {
                String::new()
            } else {
                format!("  owns: [{{apiVersion: v1, kind: Pod, metadataOnly: {metadata_only}}}]\n")
            };
            // The guest reconciles ConfigMaps (there are none): it only holds the Pods it owns.
            let text = format!(
                "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: owner}}
spec:
  module: {module}
  for: {{apiVersion: v1, kind: ConfigMap}}
{owns}  namespaces: [{NS}]
  config: {{annotation: example.com/owner}}
  permissions:
    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch]}}
    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch]}}
",
                module = common::module("pod_stamper.wasm").display(),
            );
            std::fs::write(dir.path().join("owner.yaml"), text).expect("write manifest");
            let (mut child, admin) = krec_run(dir.path(), &cluster.kubeconfig_path, module_cache);
            // Ready once the guest's caches have synced.
            let deadline = Instant::now() + Duration::from_secs(300);
            while http_get(&admin, "/readyz").is_none() {
                assert!(Instant::now() < deadline, "krec run never became ready");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // The initial list's buffers go; then the median of five samples.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let mut samples = Vec::new();
            for _ in 0..5 {
                samples.push(rss_pss_kib_of(&child.id().to_string()).1);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = child.kill();
            let _ = child.wait();
            pss.entry(arm).or_default().push(median_min_max(samples).0);
            eprintln!("metadata-only cache, {arm}: {:?}", pss[arm].last());
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let none = median_min_max(pss["none"].clone()).0;
    let per_pod = |arm: &str| {
        let bytes: Vec<f64> = pss[arm]
            .iter()
            .map(|kib| (kib - none) * 1024.0 / pods as f64)
            .collect();
        median_min_max(bytes)
    };
    let (full, full_min, full_max) = per_pod("full");
    let (metadata, metadata_min, metadata_max) = per_pod("metadata");
    rows.push(format!(
        "| 1 ({pods} Pods) | cache bytes per owned Pod (PSS over a host owning none) | whole: {full:.0} ({full_min:.0}–{full_max:.0}) | metadataOnly: {metadata:.0} ({metadata_min:.0}–{metadata_max:.0}) | {:.3}× (target ≤ 0.25) | | | |",
        metadata / full
    ));
    results.insert("density_owned_pod_bytes_full".into(), json!(full));
    results.insert(
        "density_owned_pod_bytes_metadata_only".into(),
        json!(metadata),
    );
    results.insert(
        "density_owned_pod_metadata_only_vs_full_ratio".into(),
        json!(metadata / full),
    );
}

fn report(
    k: usize,
    pods: usize,
    rounds: usize,
    by_arm: &BTreeMap<Arm, Vec<Figures>>,
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
) {
    let names: Vec<&'static str> = by_arm[&Arm::Krec][0].keys().copied().collect();
    for name in names {
        let mut cells = Vec::new();
        let mut medians = BTreeMap::new();
        for (arm, runs) in by_arm {
            let samples: Vec<f64> = runs.iter().filter_map(|f| f.get(name).copied()).collect();
            if samples.is_empty() {
                continue;
            }
            let (median, min, max) = median_min_max(samples);
            medians.insert(*arm, median);
            cells.push(if rounds > 1 {
                format!("{median:.2} ({min:.2}–{max:.2})")
            } else {
                format!("{median:.2}")
            });
            results.insert(format!("density_k{k}_{}_{name}", arm.name()), json!(median));
        }
        let krec = medians.get(&Arm::Krec).copied().unwrap_or(f64::NAN);
        let ratio = |peer: Arm| {
            medians
                .get(&peer)
                .map_or("–".to_owned(), |p| format!("{:.3}×", krec / p))
        };
        rows.push(format!(
            "| {k} ({pods} Pods) | {name} | {} | {} | {} | {} |",
            cells.join(" | "),
            ratio(Arm::KubeRsProcs),
            ratio(Arm::KubeRsShared),
            ratio(Arm::KubeRsProcsStripped)
        ));
        for peer in [
            Arm::KubeRsProcs,
            Arm::KubeRsShared,
            Arm::KubeRsProcsStripped,
        ] {
            let label = peer.name();
            if let Some(p) = medians.get(&peer) {
                results.insert(
                    format!("density_k{k}_{name}_ratio_krec_vs_{label}"),
                    json!(krec / p),
                );
            }
        }
    }
}

fn main() {
    if let (Ok(kubeconfig), Ok(spec)) = (
        std::env::var("KREC_DENSITY_CHILD"),
        std::env::var("KREC_DENSITY_CONTROLLERS"),
    ) {
        child_main(&kubeconfig, &spec);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut rows = vec![
        "| K | figure | krec | kube_rs_procs | kube_rs_shared | kube_rs_procs_stripped | krec / procs | krec / shared | krec / procs stripped |"
            .to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    let mut results = serde_json::Map::new();
    runtime.block_on(bench(&mut rows, &mut results));
    for row in &rows {
        println!("{row}");
    }
    common::write_results(results);
}
