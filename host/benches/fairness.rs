//! Fairness under attack: one healthy guest (`bench/pod-stamper`, the throughput benchmark's
//! reconciler) alone, and beside every misbehaving guest of the test suite at once — one guest
//! per attack of `tests/guests/misbehave` (busy loops, memory bombs, panics, deep recursion,
//! sleeping in host calls, stdout and log floods, huge errors, `requeue_after(0)` and 1 ms hot
//! loops, write floods, JSON-patch copy bombs, forbidden and malformed calls, memory bursts,
//! forged log lines, an `init` that sleeps; a busy loop and a memory bomb from a Python and from
//! a TypeScript guest), each ticking every 100 ms, while a process of its
//! own attacks the API server's port (1 000 silent connections, nested YAML, objects over
//! 1.5 MiB, protobuf bodies of 300 000 numbers, each every 100 ms). Rounds alternate the two
//! arms in one run.
//!
//! Figures (ratios attacked / alone, medians and min–max over rounds):
//!
//! - `fairness_throughput_ratio`: the healthy guest's reconciles per second while the driver
//!   changes every one of its Pods at once (time from the first change to the last stamp);
//! - `fairness_p50_ratio`, `fairness_p99_ratio`: its reconcile latency, one change at a time,
//!   from the driver's change to the driver seeing the guest's stamp on its watch;
//! - `fairness_host_peak_rss_mib`, `fairness_cluster_peak_rss_mib`: peak resident memory of the
//!   host (this process) and of the embedded API server (child process) over the whole run.
//!
//! The API server and the load driver run in child processes, as in `throughput.rs`.
//! `KREC_BENCH_QUICK=1` runs one round of each arm; `KREC_FAIRNESS_ATTACKS=loop,flood` only the
//! attacks named. Needs `make guests`.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{median_min_max, percentile, quick};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use pod_stamper::{GENERATION, STAMP};
use serde_json::{Value, json};

/// The healthy guest's namespace and Pods.
const NS: &str = "bench-healthy";
const PODS: usize = 200;
/// Changes of every Pod per throughput measurement.
const BURSTS: usize = 5;
/// One-at-a-time changes per latency measurement.
const LATENCY_SAMPLES: usize = 60;
/// The healthy guest.
const GUEST: &str = "pod-stamper";

/// Every attack of the misbehave test guest, one attacking guest each.
const ATTACKS: &[&str] = &[
    "loop",
    "oom",
    "panic",
    "recurse",
    "sleep",
    "flood",
    "log-flood",
    "huge-error",
    "requeue-zero",
    "requeue-1ms",
    "write-flood",
    "copy-bomb",
    "forbidden",
    "bad-json",
    "huge",
    "delete-victim",
    // Issue 35's: a memory burst across instances, forged log lines, an `init` that sleeps.
    "grow",
    "forge",
    "init-sleep",
    // Issue 40's: the same busy loop and memory bomb from a Python and a TypeScript guest
    // (`tests/guests/misbehave-py`, `misbehave-ts`).
    "py-loop",
    "py-oom",
    "ts-loop",
    "ts-oom",
];

// ---------------------------------------------------------------------------------------------
// The driver: a child process that changes the healthy guest's Pods and watches its answers.

fn driver_main(kubeconfig_path: &str) {
    common::serve_driver(kubeconfig_path, |client, words| async move {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["setup"] => setup(&client).await,
            ["burst", generation] => burst(&client, generation).await,
            ["latency", first] => latency(&client, first.parse().expect("first")).await,
            ["attack", "start", addr] => network_attacks(&client, addr.parse().expect("address")),
            ["attack", "stop"] => {
                for task in ATTACKING.lock().expect("tasks").drain(..) {
                    task.abort();
                }
                "ok".into()
            }
            other => format!("error unknown command {other:?}"),
        }
    });
}

/// The network attacks running in this (attacker) process.
static ATTACKING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Silent connections held open to the API server (reopened as it closes them).
const SILENT_CONNECTIONS: usize = 1000;

/// Attacks on the API server from anyone who reaches its port (issue 35), each repeated every
/// 100 ms until `attack stop`: silent connections, nested YAML, an object over 1.5 MiB, a
/// protobuf body of 300 000 numbers.
fn network_attacks(client: &kube::Client, addr: std::net::SocketAddr) -> String {
    // `KREC_FAIRNESS_NETWORK=silent,yaml,big,protobuf` (or `none`) runs only those named.
    let only = std::env::var("KREC_FAIRNESS_NETWORK").ok();
    let chosen = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == name))
    };
    let mut tasks = ATTACKING.lock().expect("tasks");
    if chosen("silent") {
        tasks.push(tokio::spawn(async move {
        let mut held: Vec<tokio::net::TcpStream> = Vec::new();
        loop {
            // Keep those the server has not closed (nothing to read yet), open new ones.
            held.retain(|s| {
                let mut probe = [0u8; 1];
                matches!(s.try_read(&mut probe), Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
            });
            while held.len() < SILENT_CONNECTIONS {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => held.push(stream),
                    Err(_) => break,
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }));
    }
    let bodies: Vec<(&'static str, &'static str, &'static str, Vec<u8>)> = vec![
        (
            "yaml",
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}{}\n",
                "[".repeat(80_000),
                "]".repeat(80_000)
            )
            .into_bytes(),
        ),
        (
            "big",
            "/apis/apps/v1/namespaces/default/controllerrevisions",
            "application/json",
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": "big"}, "revision": 1,
                "data": {"blob": "x".repeat(2_000_000)}})
            .to_string()
            .into_bytes(),
        ),
        (
            "protobuf",
            "/api/v1/namespaces/default/pods",
            krec_apiserver::protobuf::MEDIA_TYPE,
            krec_apiserver::protobuf::encode(&json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "groups"},
                "spec": {"containers": [{"name": "c", "image": "i"}],
                    "securityContext": {"supplementalGroups": vec![1; 300_000]}}}))
            .expect("a Pod")
            .expect("encodes"),
        ),
    ];
    for (name, path, media_type, body) in bodies {
        if !chosen(name) {
            continue;
        }
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let request = http::Request::post(path)
                    .header("content-type", media_type)
                    .body(body.clone())
                    .expect("request");
                let _ = client.request_text(request).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    "ok".into()
}

async fn setup(client: &kube::Client) -> String {
    common::create_pods(client, NS, PODS, |i| {
        let mut pod = common::pod(NS, &format!("web-{i:04}"));
        pod["metadata"]["labels"][GENERATION] = json!("0");
        pod
    })
    .await;
    // What the attackers need: a ConfigMap to patch, namespaces to aim at.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    let bomb = serde_json::from_value(json!({"metadata": {"name": "bomb"}})).expect("cm");
    let _ = cms.create(&Default::default(), &bomb).await;
    "ok".into()
}

fn generation_patch(generation: &str) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"labels": {GENERATION: generation}}}))
}

/// Whether `pod`'s stamp records `generation`.
fn stamped(pod: &Pod, generation: &str) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(STAMP))
        .and_then(|s| s.split('/').next())
        == Some(generation)
}

/// A watch of the healthy namespace, yielding every Pod it sees.
fn pod_watch(client: &kube::Client) -> impl futures::Stream<Item = Pod> + use<> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    watcher(pods, watcher::Config::default()).filter_map(|event| async move {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => Some(pod),
            _ => None,
        }
    })
}

/// Change every Pod to `generation` at once; answer `burst <seconds>` once all are stamped.
async fn burst(client: &kube::Client, generation: &str) -> String {
    let mut watch = Box::pin(pod_watch(client));
    // Let the watch's initial list pass.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let started = Instant::now();
    let patch = generation_patch(generation);
    let patching = futures::stream::iter(0..PODS)
        .map(|i| {
            let (pods, patch) = (pods.clone(), &patch);
            async move {
                pods.patch(&format!("web-{i:04}"), &PatchParams::default(), patch)
                    .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>();
    let mut done: HashSet<String> = HashSet::new();
    let watching = async {
        while done.len() < PODS {
            match tokio::time::timeout(Duration::from_secs(120), watch.next()).await {
                Ok(Some(pod)) if stamped(&pod, generation) => {
                    done.insert(pod.metadata.name.unwrap_or_default());
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    };
    let (patched, ()) = tokio::join!(patching, watching);
    patched.expect("patch pods");
    format!(
        "burst {:.4} {}",
        started.elapsed().as_secs_f64(),
        done.len()
    )
}

/// Change one Pod at a time, waiting for each stamp; answer `latency <p50_us> <p99_us>
/// <answered>`.
async fn latency(client: &kube::Client, first: u64) -> String {
    let mut watch = Box::pin(pod_watch(client));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut samples = Vec::new();
    for n in 0..LATENCY_SAMPLES {
        let name = format!("web-{:04}", n % PODS);
        let generation = (first + n as u64).to_string();
        let started = Instant::now();
        pods.patch(
            &name,
            &PatchParams::default(),
            &generation_patch(&generation),
        )
        .await
        .expect("patch");
        let deadline = started + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, watch.next()).await {
                Ok(Some(pod))
                    if pod.metadata.name.as_deref() == Some(&name)
                        && stamped(&pod, &generation) =>
                {
                    samples.push(started.elapsed().as_secs_f64() * 1e6);
                    break;
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
    }
    let answered = samples.len();
    if samples.is_empty() {
        return "latency 0 0 0".into();
    }
    let p50 = percentile(&mut samples, 50.0);
    let p99 = percentile(&mut samples, 99.0);
    format!("latency {p50:.0} {p99:.0} {answered}")
}

// ---------------------------------------------------------------------------------------------
// The host under test.

fn write_manifest(dir: &Path, name: &str, text: &str) -> Manifest {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).expect("write manifest");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// The healthy guest. Its write rate is not limited here, so that its throughput measures
/// contention rather than its own budget.
fn healthy(dir: &Path) -> Manifest {
    write_manifest(
        dir,
        GUEST,
        &format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {GUEST}}}\nspec:\n  module: {}\n  for: {{apiVersion: v1, kind: Pod}}\n  namespaces: [{NS}]\n  maxConcurrentReconciles: 2\n  limits: {{writeQps: 100000, writeBurst: 100000}}\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get, update], namespaces: [{NS}]}}\n",
            common::module("pod_stamper.wasm").display()
        ),
    )
}

/// One attacking guest per attack, each ticking every 100 ms, with the defaults a guest author
/// gets (timeout 5 s, memory 64Mi, one core, 50 writes/s) and what its attack needs.
fn attackers(dir: &Path) -> Vec<Manifest> {
    let rust = common::module("misbehave.wasm");
    let script = |folder: &str, file: &str| {
        let path = common::repo().join("target").join(folder).join(file);
        assert!(
            path.exists(),
            "{} is missing: run `make guests`",
            path.display()
        );
        path
    };
    chosen_attacks()
        .iter()
        .map(|attack| {
            let name = format!("attack-{attack}");
            // A Python or TypeScript guest's attack, with the memory its interpreter needs.
            let (module, attack, limits) = match attack.split_once('-') {
                Some(("py", what)) => (
                    script("python-guests", "misbehave_py.wasm"),
                    what,
                    "  limits: {memory: 96Mi}\n",
                ),
                Some(("ts", what)) => (
                    script("js-guests", "misbehave_ts.wasm"),
                    what,
                    "  limits: {memory: 96Mi}\n",
                ),
                _ => (rust.clone(), *attack, ""),
            };
            // `init-sleep` sleeps in its `init`: refused at its timeout, beside the others.
            let config = match attack {
                "init-sleep" => "  config: {init: sleep}\n",
                _ => "",
            };
            write_manifest(
                dir,
                &name,
                &format!(
                    "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {}\n  tickers: [{{every: 100ms, request: {{name: {attack}}}}}]\n{config}{limits}  permissions:\n    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, create, update, patch]}}\n    - {{apiVersion: v1, kind: Namespace, verbs: [get]}}\n",
                    module.display()
                ),
            )
        })
        .collect()
}

/// The attacks run: all, or those `KREC_FAIRNESS_ATTACKS=loop,flood` names, to see what each
/// costs.
fn chosen_attacks() -> Vec<&'static str> {
    let only = std::env::var("KREC_FAIRNESS_ATTACKS").ok();
    ATTACKS
        .iter()
        .copied()
        .filter(|a| {
            only.as_deref()
                .is_none_or(|o| o.split(',').any(|x| x == *a))
        })
        .collect()
}

/// Peak resident memory of process `pid` (`VmHWM`), in MiB.
fn peak_rss_mib(pid: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

struct Round {
    throughput: f64,
    p50_us: f64,
    p99_us: f64,
    /// Cores the host and the API server used over the round.
    host_cores: f64,
    cluster_cores: f64,
}

/// CPU seconds process `pid` has used (user + system, `/proc/<pid>/stat`).
fn cpu_seconds(pid: &str) -> f64 {
    stat_cpu_seconds(Path::new(&format!("/proc/{pid}/stat")))
}

/// User and system CPU seconds in the `/proc` stat file `path` (a process's or a thread's).
fn stat_cpu_seconds(path: &Path) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    #[allow(unsafe_code)] // sysconf: the clock tick rate /proc reports in
    // SAFETY: sysconf with a constant name has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

async fn round(
    driver: &mut common::Driver,
    client: &kube::Client,
    module_cache: &krec::guest::ModuleCache,
    manifests: Vec<Manifest>,
    generation: &mut u64,
    cluster_pid: &str,
) -> Round {
    let started = Instant::now();
    let (host_cpu, cluster_cpu) = (cpu_seconds("self"), cpu_seconds(cluster_pid));
    let api = krec::cluster::client::ApiClient::new(client.clone());
    let options = ManagerOptions {
        module_cache: module_cache.clone(),
        ..ManagerOptions::default()
    };
    let manager = Manager::start_with(api, manifests, options)
        .await
        .expect("manager");
    // Let the attackers get going (and the healthy guest stamp what it finds).
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!("bursts start");
    let (threads_before, charged_before) = (thread_cpu_by_name(), charged_by_guest(&manager));
    let mut seconds = 0.0;
    for _ in 0..BURSTS {
        *generation += 1;
        let answer = driver.ask(format!("burst {generation}")).await;
        let words: Vec<&str> = answer.split_whitespace().collect();
        seconds += words
            .get(1)
            .and_then(|s| s.parse::<f64>().ok())
            .expect("burst");
        let stamped: usize = words.get(2).and_then(|s| s.parse().ok()).expect("burst");
        assert_eq!(stamped, PODS, "every Pod is stamped: {answer}");
    }
    if std::env::var_os("KREC_FAIRNESS_BY_GUEST").is_some() {
        print_by_guest(&threads_before, &charged_before, &manager);
    }
    *generation += 1000;
    let answer = driver.ask(format!("latency {generation}")).await;
    *generation += LATENCY_SAMPLES as u64;
    let words: Vec<&str> = answer.split_whitespace().collect();
    let p50_us: f64 = words.get(1).and_then(|s| s.parse().ok()).expect("latency");
    let p99_us: f64 = words.get(2).and_then(|s| s.parse().ok()).expect("latency");
    let wall = started.elapsed().as_secs_f64();
    let host_cores = (cpu_seconds("self") - host_cpu) / wall;
    let cluster_cores = (cpu_seconds(cluster_pid) - cluster_cpu) / wall;
    manager.shutdown(Duration::from_secs(10)).await;
    eprintln!(
        "round: {seconds:.2} s for {BURSTS}×{PODS} Pods, latency p50 {p50_us:.0} µs p99 {p99_us:.0} µs, \
         host {host_cores:.2} cores, API server {cluster_cores:.2} cores"
    );
    Round {
        throughput: (BURSTS * PODS) as f64 / seconds,
        p50_us,
        p99_us,
        host_cores,
        cluster_cores,
    }
}

/// CPU seconds of this process's threads, summed by thread name (a guest's threads are named
/// `krec:<guest>`, cut to 15 bytes; the host's runtime's `tokio-rt-worker`).
fn thread_cpu_by_name() -> std::collections::BTreeMap<String, f64> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
            continue;
        };
        *by_name.entry(name.trim_end().to_owned()).or_insert(0.0) +=
            stat_cpu_seconds(&task.path().join("stat"));
    }
    by_name
}

/// CPU seconds each guest's account was charged so far.
fn charged_by_guest(manager: &Manager) -> std::collections::BTreeMap<String, f64> {
    manager
        .controllers()
        .into_iter()
        .map(|(name, c)| (name, c.module().budgets().cpu.charged().as_secs_f64()))
        .collect()
}

/// Over the bursts: each guest's threads' CPU, beside what its account was charged.
fn print_by_guest(
    threads_before: &std::collections::BTreeMap<String, f64>,
    charged_before: &std::collections::BTreeMap<String, f64>,
    manager: &Manager,
) {
    let threads = thread_cpu_by_name();
    for (name, charged) in charged_by_guest(manager) {
        let mut thread = format!("krec:{name}");
        thread.truncate(15);
        let used = threads.get(&thread).copied().unwrap_or(0.0)
            - threads_before.get(&thread).copied().unwrap_or(0.0);
        let charged = charged - charged_before.get(&name).copied().unwrap_or(0.0);
        eprintln!("  {name:<24} threads {used:6.2} s  charged {charged:6.2} s");
    }
    for (name, cpu) in &threads {
        if !name.starts_with("krec:") {
            let used = cpu - threads_before.get(name).copied().unwrap_or(0.0);
            if used > 0.01 {
                eprintln!("  [{name}] {used:6.2} s");
            }
        }
    }
}

/// Compile every guest's module into `module_cache` (a manager started and stopped).
async fn warm(client: &kube::Client, module_cache: &krec::guest::ModuleCache, dir: &Path) {
    let mut all = attackers(dir);
    all.push(healthy(dir));
    let options = ManagerOptions {
        module_cache: module_cache.clone(),
        ..ManagerOptions::default()
    };
    let api = krec::cluster::client::ApiClient::new(client.clone());
    let manager = Manager::start_with(api, all, options)
        .await
        .expect("manager");
    manager.shutdown(Duration::from_secs(10)).await;
}

async fn bench() -> (Vec<String>, serde_json::Map<String, Value>) {
    let cluster = common::ClusterProcess::start();
    let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
    let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("client");
    let mut driver = common::Driver::start(&cluster.kubeconfig_path);
    assert_eq!(driver.ask("setup".into()).await, "ok");
    // The network attacks come from a process of their own, as a client on the network would.
    let mut attacker = common::Driver::start(&cluster.kubeconfig_path);
    let api_addr = kube::config::Kubeconfig::from_yaml(&kubeconfig)
        .ok()
        .and_then(|k| k.clusters.into_iter().next())
        .and_then(|c| c.cluster)
        .and_then(|c| c.server)
        .and_then(|url| url.strip_prefix("https://").map(str::to_owned))
        .expect("the API server's address");
    let dir = tempfile::tempdir().expect("tempdir");
    let rounds = if quick() { 1 } else { 3 };
    let mut generation = 0u64;
    let cluster_pid = cluster.pid().to_string();
    let (mut alone, mut attacked) = (Vec::new(), Vec::new());
    // Compiled modules are kept between rounds, as a host keeps them on disk: each round
    // measures the guests running, not the first compile of four 12–18 MB Python and
    // TypeScript components (which took most of an attacked round's CPU before).
    let module_cache = krec::guest::ModuleCache::new(&dir.path().join("modules")).expect("cache");
    warm(&client, &module_cache, dir.path()).await;
    for _ in 0..rounds {
        alone.push(
            round(
                &mut driver,
                &client,
                &module_cache,
                vec![healthy(dir.path())],
                &mut generation,
                &cluster_pid,
            )
            .await,
        );
        let mut all = attackers(dir.path());
        all.push(healthy(dir.path()));
        assert_eq!(attacker.ask(format!("attack start {api_addr}")).await, "ok");
        attacked.push(
            round(
                &mut driver,
                &client,
                &module_cache,
                all,
                &mut generation,
                &cluster_pid,
            )
            .await,
        );
        assert_eq!(attacker.ask("attack stop".into()).await, "ok");
    }
    let ratios = |f: fn(&Round) -> f64| -> Vec<f64> {
        alone
            .iter()
            .zip(&attacked)
            .map(|(a, b)| f(b) / f(a))
            .collect()
    };
    let throughput = median_min_max(ratios(|r| r.throughput));
    let p50 = median_min_max(ratios(|r| r.p50_us));
    let p99 = median_min_max(ratios(|r| r.p99_us));
    let alone_p50 = median_min_max(alone.iter().map(|r| r.p50_us / 1000.0).collect());
    let alone_tp = median_min_max(alone.iter().map(|r| r.throughput).collect());
    let cores =
        |rounds: &[Round], f: fn(&Round) -> f64| median_min_max(rounds.iter().map(f).collect());
    let host_alone = cores(&alone, |r| r.host_cores);
    let host_attacked = cores(&attacked, |r| r.host_cores);
    let cluster_alone = cores(&alone, |r| r.cluster_cores);
    let cluster_attacked = cores(&attacked, |r| r.cluster_cores);
    let host_rss = peak_rss_mib("self");
    let cluster_rss = peak_rss_mib(&cluster.pid().to_string());
    let row = |name: &str, (m, lo, hi): (f64, f64, f64), what: &str| {
        format!("| {name} | {m:.2} | {lo:.2}–{hi:.2} | {what} |")
    };
    let rows = vec![
        row(
            "fairness_throughput_ratio",
            throughput,
            &format!(
                "healthy guest's reconciles/s beside {} attackers ÷ alone (alone {:.0}/s)",
                chosen_attacks().len(),
                alone_tp.0
            ),
        ),
        row(
            "fairness_p50_ratio",
            p50,
            &format!(
                "healthy p50 latency attacked ÷ alone (alone {:.1} ms)",
                alone_p50.0
            ),
        ),
        row(
            "fairness_p99_ratio",
            p99,
            "healthy p99 latency attacked ÷ alone",
        ),
        row(
            "fairness_host_cores_attacked",
            host_attacked,
            &format!(
                "cores the host used over an attacked round (alone {:.2})",
                host_alone.0
            ),
        ),
        row(
            "fairness_cluster_cores_attacked",
            cluster_attacked,
            &format!(
                "cores the embedded API server used over an attacked round (alone {:.2})",
                cluster_alone.0
            ),
        ),
        format!(
            "| fairness_host_peak_rss_mib | {host_rss:.0} | – | host process peak RSS over the run |"
        ),
        format!(
            "| fairness_cluster_peak_rss_mib | {cluster_rss:.0} | – | embedded API server peak RSS (copy bombs land here) |"
        ),
    ];
    let figure = |(m, lo, hi): (f64, f64, f64)| json!({"median": m, "min": lo, "max": hi});
    let mut results = serde_json::Map::new();
    results.insert("fairness_throughput_ratio".into(), figure(throughput));
    results.insert("fairness_p50_ratio".into(), figure(p50));
    results.insert("fairness_p99_ratio".into(), figure(p99));
    results.insert("fairness_host_cores_attacked".into(), figure(host_attacked));
    results.insert("fairness_host_cores_alone".into(), figure(host_alone));
    results.insert(
        "fairness_cluster_cores_attacked".into(),
        figure(cluster_attacked),
    );
    results.insert("fairness_cluster_cores_alone".into(), figure(cluster_alone));
    results.insert("fairness_host_peak_rss_mib".into(), json!(host_rss));
    results.insert("fairness_cluster_peak_rss_mib".into(), json!(cluster_rss));
    (rows, results)
}

fn main() {
    if let Ok(kubeconfig_path) = std::env::var("KREC_BENCH_DRIVER") {
        return driver_main(&kubeconfig_path);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (rows, results) = runtime.block_on(bench());
    common::print_table(&rows);
    common::write_results(results);
}
