//! What every benchmark binary shares: paths, the quick switch, statistics, process CPU time,
//! heap counting, the embedded API server in or out of process, manifests, waiting for
//! reconciles to settle, and `bench/results.json`.

#![allow(dead_code)] // each bench uses its own subset

#[path = "../../../apiserver/benches/support/mod.rs"]
mod support;
pub use support::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

#[allow(unused_imports)] // each bench uses its own subset
pub use krec_testkit::{built_module as module, free_port, repo_root as repo};

/// CPU time this process has used so far (all threads), in seconds.
#[allow(unsafe_code)] // clock_gettime: the one way to read the process CPU clock precisely
pub fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Resident and proportional set size of this process, in KiB (`/proc/self/smaps_rollup`).
pub fn rss_pss_kib() -> (f64, f64) {
    rss_pss_kib_of("self")
}

/// Resident and proportional set size of process `pid` (a number, or `self`), in KiB; zeros
/// once it has gone.
pub fn rss_pss_kib_of(pid: &str) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("Rss:"), field("Pss:"))
}

/// CPU time of the process `pid` so far (all threads), in seconds: its CPU-time clock
/// (`clock_getcpuclockid`, nanoseconds), else `/proc/{pid}/stat` (clock ticks of 10 ms); zero
/// once it has gone.
#[allow(unsafe_code)] // clock_getcpuclockid and clock_gettime have no safe wrappers
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let Ok(pid_t) = libc::pid_t::try_from(pid) else {
        return 0.0;
    };
    // SAFETY: both out-parameters are valid and writable; a pid that has gone is an error.
    let read = unsafe {
        libc::clock_getcpuclockid(pid_t, &mut clock) == 0
            && libc::clock_gettime(clock, &mut ts) == 0
    };
    if read {
        return ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9;
    }
    stat_cpu_seconds_of(pid)
}

fn stat_cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) close with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Merge `figures` into `bench/results.json`, keeping the other benchmarks' keys.
pub fn write_results(figures: serde_json::Map<String, Value>) {
    let path = repo().join("bench/results.json");
    let mut all: serde_json::Map<String, Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    all.extend(figures);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let text = serde_json::to_string_pretty(&Value::Object(all)).expect("json");
    std::fs::write(&path, text + "\n").expect("write bench/results.json");
}

/// One row per arm of `samples` (one sample per round, the arms interleaved in each round)
/// against the first of `arms` (the baseline): the figure `<prefix>_<arm><unit>`, its median and
/// min–max with `decimals` digits, and `what(arm, ratio, paired)` — its median over the
/// baseline's, and the median of its round-by-round ratios to the baseline (a machine whose
/// speed changes between rounds moves both arms of a round alike). The medians and the paired
/// ratios (`<prefix>_<arm>_vs_<baseline>`) into `results`.
pub fn arms_vs_baseline(
    rows: &mut Vec<String>,
    results: &mut serde_json::Map<String, Value>,
    (prefix, unit, decimals): (&str, &str, usize),
    arms: &[&str],
    samples: &std::collections::HashMap<&str, Vec<f64>>,
    what: impl Fn(&str, f64, f64) -> String,
) {
    let baseline = arms[0];
    let (base, _, _) = median_min_max(samples[baseline].clone());
    for arm in arms {
        let figure = format!("{prefix}_{arm}{unit}");
        let (median, min, max) = median_min_max(samples[arm].clone());
        let by_round = samples[arm]
            .iter()
            .zip(&samples[baseline])
            .map(|(a, b)| a / b)
            .collect();
        let (paired, _, _) = median_min_max(by_round);
        rows.push(format!(
            "| {figure} | {median:.decimals$} | {min:.decimals$}–{max:.decimals$} | {} |",
            what(arm, median / base, paired)
        ));
        results.insert(figure, json!(median));
        results.insert(format!("{prefix}_{arm}_vs_{baseline}"), json!(paired));
    }
}

/// Print a Markdown table of `rows` (`| name | median | min–max | what |`).
pub fn print_table(rows: &[String]) {
    println!("| figure | median | min–max | what |");
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}

/// A Pod of about 3 KB of JSON: one container with 30 environment settings.
pub fn pod(namespace: &str, name: &str) -> Value {
    let env: Vec<Value> = (0..30)
        .map(|e| json!({"name": format!("SETTING_{e:02}"), "value": format!("value-{e:02}-{}", "x".repeat(40))}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1.2.3",
            "ports": [{"containerPort": 8080, "protocol": "TCP"}], "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}})
}

/// Create Namespace `name` straight in `store` (no HTTP, no admission).
pub fn store_namespace(store: &krec_apiserver::Store, name: &str) {
    let namespaces = store
        .registry()
        .by_plural("", "v1", "namespaces")
        .expect("namespaces");
    store
        .create(
            &namespaces,
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
            false,
        )
        .expect("namespace");
}

/// The embedded API server (`krec cluster`) in a child process, so that its CPU time and memory
/// are not the benchmark's. Killed when dropped.
pub struct ClusterProcess {
    child: Child,
    /// The kubeconfig it wrote.
    pub kubeconfig_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ClusterProcess {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Start this build's, as a bare API server (`--controllers none`: no Pods appear from a
    /// Deployment, so the benchmark measures the server and the host, not the simulated
    /// cluster), and wait for its kubeconfig.
    pub fn start() -> Self {
        Self::start_binary(
            Path::new(env!("CARGO_BIN_EXE_krec")),
            &["--controllers", "none"],
        )
    }

    /// Start `krec cluster` of the `krec` binary at `binary` with `extra` arguments and wait
    /// for its kubeconfig.
    pub fn start_binary(binary: &Path, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig_path = dir.path().join("kubeconfig");
        let child = Command::new(binary)
            .args(["cluster", "--addr", "127.0.0.1:0"])
            .args(extra)
            .arg("--kubeconfig-out")
            .arg(&kubeconfig_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start krec cluster");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kubeconfig_path.exists() {
            assert!(
                Instant::now() < deadline,
                "krec cluster wrote no kubeconfig"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The file appears before it is complete on a slow disk: wait for a parseable one.
        while std::fs::read_to_string(&kubeconfig_path).map_or(true, |t| {
            !t.contains("client-key-data") && !t.contains("token")
        }) {
            assert!(
                Instant::now() < deadline,
                "krec cluster wrote no kubeconfig"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ClusterProcess {
            child,
            kubeconfig_path,
            _dir: dir,
        }
    }
}

impl Drop for ClusterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Create the namespace `ns` and `count` Pods in it, `pod(i)` each, 32 requests in flight.
pub async fn create_pods(
    client: &kube::Client,
    ns: &str,
    count: usize,
    pod: impl Fn(usize) -> Value,
) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .expect("create namespace");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for_each_pod(&pods, 0..count, "create pod", |pods, i| {
        let object: Pod = serde_json::from_value(pod(i)).expect("pod");
        async move { pods.create(&PostParams::default(), &object).await }
    })
    .await;
}

/// Run `op` for each number of `range` on `pods`, 32 requests in flight; panics with `what`
/// on the first failure.
pub async fn for_each_pod<F, Fut, T>(
    pods: &Api<Pod>,
    range: std::ops::Range<usize>,
    what: &str,
    op: F,
) where
    F: Fn(Api<Pod>, usize) -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    futures::stream::iter(range)
        .map(|i| op(pods.clone(), i))
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_or_else(|err| panic!("{what}: {err}"));
}

/// kube-rs's `Controller` over `pods`: as `Controller::new` sets it up, or (`strip`) over a
/// reflector that drops `managedFields` as krec's cache does — the like-for-like arm.
pub fn kube_rs_controller(pods: Api<Pod>, strip: bool) -> kube::runtime::Controller<Pod> {
    if !strip {
        return kube::runtime::Controller::new(pods, kube::runtime::watcher::Config::default());
    }
    kube_rs_stripped_controller(pods, |_| {})
}

/// kube-rs's `Controller` over a reflector that drops `managedFields`, calling `seen` with each
/// object as the reflector's stream yields it (its store has applied it).
pub fn kube_rs_stripped_controller(
    pods: Api<Pod>,
    seen: impl FnMut(&Pod) + Send + 'static,
) -> kube::runtime::Controller<Pod> {
    use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
    let mut seen = seen;
    let (reader, writer) = reflector::store();
    let stream = watcher(pods, watcher::Config::default())
        .default_backoff()
        .modify(|pod: &mut Pod| pod.metadata.managed_fields = None)
        .reflect(writer)
        .applied_objects()
        .inspect(move |pod| {
            if let Ok(pod) = pod {
                seen(pod);
            }
        });
    Controller::for_stream(stream, reader)
}

/// This benchmark binary re-run as a load driver (`KREC_BENCH_DRIVER` names the kubeconfig),
/// spoken to line by line: one command on its stdin, one answer on its stdout. Killed when
/// dropped.
pub struct Driver {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Driver {
    /// Start the driver against the cluster of `kubeconfig_path`.
    pub fn start(kubeconfig_path: &Path) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .env("KREC_BENCH_DRIVER", kubeconfig_path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the driver");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        Driver {
            child,
            stdin,
            stdout,
        }
    }

    /// Send `command` and wait (on a blocking thread) for its answer.
    pub async fn ask(&mut self, command: String) -> String {
        use std::io::{BufRead as _, Write as _};
        writeln!(self.stdin, "{command}").expect("to driver");
        self.stdin.flush().expect("to driver");
        let mut line = String::new();
        tokio::task::block_in_place(|| self.stdout.read_line(&mut line)).expect("from driver");
        assert!(!line.is_empty(), "the driver exited");
        line.trim().to_owned()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run as a [`Driver`]: connect to the cluster of `kubeconfig_path`, then answer each command
/// line on stdin with `handle(client, words)`'s one line on stdout, until stdin closes.
pub fn serve_driver<F, Fut>(kubeconfig_path: &str, handle: F)
where
    F: Fn(kube::Client, Vec<String>) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    use std::io::{BufRead as _, Write as _};
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let kubeconfig = std::fs::read_to_string(kubeconfig_path).expect("kubeconfig");
    runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
            .await
            .expect("client");
        for line in std::io::stdin().lock().lines() {
            let line = line.expect("command");
            let words = line.split_whitespace().map(str::to_owned).collect();
            let answer = handle(client.clone(), words).await;
            println!("{answer}");
            std::io::stdout().flush().expect("stdout");
        }
    });
}

/// The system allocator, counting the bytes live at any moment. A benchmark that reads
/// [`live_bytes`] installs it: `#[global_allocator] static A: common::Counting = common::Counting;`.
pub struct Counting;

static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

fn count(bytes: isize) {
    LIVE.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
}

#[allow(unsafe_code)] // a GlobalAlloc is unsafe by definition; this one only forwards and counts
// SAFETY: every call forwards to `System` with the caller's arguments unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        count(-(layout.size() as isize));
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: forwarded as received.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

/// Heap bytes live now (with [`Counting`] installed; 0 otherwise).
pub fn live_bytes() -> f64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed) as f64
}

/// The embedded API server in this process, on a one-thread runtime of its own (so its work
/// does not queue behind the benchmark's), without built-in controllers: its store is written
/// straight, without HTTP.
pub struct InProcessServer {
    runtime: tokio::runtime::Runtime,
    server: krec_apiserver::Server,
}

impl InProcessServer {
    /// Start it.
    pub fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("server runtime");
        let server = runtime
            .block_on(
                krec_apiserver::Server::builder()
                    .controllers(krec_apiserver::controllers::Selection::none())
                    .start(),
            )
            .expect("API server");
        InProcessServer { runtime, server }
    }

    /// Its store.
    pub fn store(&self) -> &std::sync::Arc<krec_apiserver::Store> {
        self.server.store()
    }

    /// A kubeconfig for it.
    pub fn kubeconfig(&self) -> &str {
        self.server.kubeconfig()
    }

    /// Stop it.
    pub fn shutdown(self) {
        self.runtime.block_on(self.server.shutdown());
    }
}

/// The manifest of reconciler `name` running the built guest `module` (under
/// `target/wasm32-wasip2/release/`), its other `spec` fields given as YAML lines indented by
/// two spaces; written to `dir/<name>.yaml` and loaded.
pub fn manifest(dir: &Path, name: &str, module_file: &str, spec: &str) -> krec::manifest::Manifest {
    let text = format!(
        "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {}\n{spec}",
        module(module_file).display()
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).expect("write manifest");
    krec::manifest::Manifest::load(&path).expect("manifest")
}

/// Start a manager running `manifest`'s guest (module cache: `options`), asserting it started.
pub async fn start_manager(
    client: &kube::Client,
    manifest: &krec::manifest::Manifest,
    options: krec::guests::ManagerOptions,
) -> krec::guests::Manager {
    let manager = krec::guests::Manager::start_with(
        krec::cluster::client::ApiClient::new(client.clone()),
        vec![manifest.clone()],
        options,
    )
    .await
    .expect("manager");
    assert!(manager.skipped().is_empty(), "{:?}", manager.skipped());
    manager
}

/// Wait until `reconciles()` is at least `at_least` and neither it nor `busy()` has moved for
/// `quiet`; panics after five minutes.
pub async fn settle(
    reconciles: impl Fn() -> u64,
    busy: impl Fn() -> bool,
    at_least: u64,
    quiet: Duration,
) {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last = (reconciles(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = reconciles();
        if now != last.0 || busy() {
            last = (now, Instant::now());
        } else if now >= at_least && last.1.elapsed() >= quiet {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "reconciles stuck at {now}, expected at least {at_least}"
        );
    }
}

/// Reconciles the manager's guest `guest` has run.
pub fn guest_reconciles(manager: &krec::guests::Manager, guest: &str) -> u64 {
    manager.controller(guest).map_or(0, |c| c.stats().total())
}

/// Whether the manager's guest `guest` has keys queued or reconciling.
pub fn guest_busy(manager: &krec::guests::Manager, guest: &str) -> bool {
    manager
        .controller(guest)
        .is_some_and(|c| !c.queue().is_empty() || c.stats().active() > 0)
}

/// The body of `GET http://{addr}{path}` (krec's admin server, plain HTTP on loopback), or
/// `None` when it does not answer 200.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_owned())
}
