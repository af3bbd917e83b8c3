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
//! - `guest_call_traces_{off,1pct,100pct}_us`: the reused Wasm arm's reconcile with traces off,
//!   on at 1 % and on at 100 % — each reconcile in a trace as the controller's worker makes it
//!   (started, the guest's call and host calls noted, the root span and guest span built when
//!   kept), exported over OTLP/HTTP to a loopback collector that drops them; interleaved.
//! - `queue_ops_per_s`: workqueue add + get + done cycles per second, one thread and two.
//!
//! The figures are printed as a Markdown table and merged into `bench/results.json`.
//! `KREC_BENCH_QUICK=1` (`make bench-quick`) runs fewer rounds.

mod common;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use common::{median_min_max, quick};
use krec::cluster::{ClusterAccess, ClusterCalls, MemoryCluster};
use krec::controller::queue::{RateLimit, WorkQueue};
use krec::guest::{Engines, GuestModule, GuestWorker};
use krec::manifest::Manifest;
use serde_json::{Value, json};

/// The admission request kube-apiserver would send for an update of `pod` (to generation 2).
fn pod_review(pod: &Value) -> krec::guest::bindings::guest::WitAdmissionRequest {
    use krec::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo};
    let mut updated = pod.clone();
    updated["metadata"]["labels"][pod_stamper::GENERATION] = json!("2");
    WitAdmissionRequest {
        uid: "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
        kind: krec::guest::bindings::WitGvk {
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

/// pod-stamper's validator built with [`LAZY_CONFIG`], natively: what the Wasm guest's lazy
/// arm runs, compiled into the host.
fn native_lazy_validate(
    host: Arc<dyn krec_guest::native::Host>,
    review: krec_guest::native::Review,
) -> krec_guest::native::ReviewVerdict {
    static VALIDATOR: OnceLock<pod_stamper::GenerationValidator> = OnceLock::new();
    let validator = VALIDATOR.get_or_init(|| {
        krec_guest::native::configure(LAZY_CONFIG).expect("the lazy validator's config")
    });
    krec_guest::native::validate_with(validator, host, review)
}

/// pod-stamper's reconciler built with [`LAZY_CONFIG`], natively.
fn native_lazy_reconcile(
    host: Arc<dyn krec_guest::native::Host>,
    request: krec_guest::Request,
) -> krec_guest::Result<krec_guest::Action> {
    static STAMPER: OnceLock<pod_stamper::PodStamper> = OnceLock::new();
    let stamper = STAMPER.get_or_init(|| {
        krec_guest::native::configure(LAZY_CONFIG).expect("the lazy stamper's config")
    });
    krec_guest::native::reconcile_with(stamper, host, request)
}

/// One arm of a benchmark: its figure's name, what it is, and its samples.
struct Arm<T> {
    name: &'static str,
    what: &'static str,
    subject: T,
    samples: Vec<f64>,
    all: Vec<f64>,
}

impl<T> Arm<T> {
    fn new(name: &'static str, what: &'static str, subject: T) -> Self {
        Arm {
            name,
            what,
            subject,
            samples: Vec::new(),
            all: Vec::new(),
        }
    }
}

async fn admission(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let engines = Engines::new().expect("engines");
    let cluster = Arc::new(MemoryCluster::new());
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::GENERATION] = json!("1");
    let stored = cluster.create(pod).await.expect("pod");
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    let typed = Arc::new(webhook_manifest(dir.path(), "reuse", false));
    let lazy = Arc::new(webhook_manifest(dir.path(), "reuse", true));
    let native = |manifest: &Arc<Manifest>, validate: krec::guest::native::NativeValidate| {
        krec::guest::native::module_with_validator(
            manifest.clone(),
            krec_guest::native::reconcile::<pod_stamper::PodStamper>,
            validate,
        )
    };
    let mut arms = [
        Arm::new(
            "admission_native_p50_us",
            "pod-stamper's `GenerationValidator` compiled natively, decoding both Pods whole (as `type Object = Pod`): one review of a Pod update inside the host (baseline)",
            native(
                &typed,
                krec_guest::native::validate::<pod_stamper::GenerationValidator>,
            ),
        ),
        Arm::new(
            "admission_wasm_p50_us",
            "the same validator as a Wasm guest, its instance kept between reviews (`isolation: reuse`, the default)",
            load(&engines, typed),
        ),
        Arm::new(
            "admission_wasm_fresh_p50_us",
            "the same with a fresh instance per review (`isolation: per-reconcile`)",
            load(
                &engines,
                Arc::new(webhook_manifest(dir.path(), "per-reconcile", false)),
            ),
        ),
        Arm::new(
            "admission_native_lazy_p50_us",
            "the validator reading its one label from each Pod as a `Lazy<Pod>` (`spec.config.lazy`), compiled natively (baseline of the lazy arms)",
            native(&lazy, native_lazy_validate),
        ),
        Arm::new(
            "admission_wasm_lazy_p50_us",
            "the lazy validator as a Wasm guest, instance reused",
            load(&engines, lazy),
        ),
    ];
    let request = pod_review(&stored);
    async fn review(
        module: &GuestModule,
        access: &Arc<dyn ClusterAccess>,
        request: &krec::guest::bindings::guest::WitAdmissionRequest,
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
        for arm in &arms {
            review(&arm.subject, &access, &request).await;
        }
    }
    for _ in 0..rounds {
        for arm in &mut arms {
            let mut round = Vec::with_capacity(per_round);
            for _ in 0..per_round {
                round.push(review(&arm.subject, &access, &request).await);
            }
            arm.samples.push(common::percentile(&mut round, 50.0));
            arm.all.extend(round);
        }
    }
    let mut p50 = std::collections::HashMap::new();
    for arm in &mut arms {
        let (median, min, max) = median_min_max(std::mem::take(&mut arm.samples));
        let p99 = common::percentile(&mut arm.all, 99.0);
        rows.push(format!(
            "| {} | {median:.2} | {min:.2}–{max:.2} | {}; p99 {p99:.2} µs |",
            arm.name, arm.what
        ));
        results.insert(arm.name.into(), json!(median));
        results.insert(arm.name.replace("p50", "p99"), json!(p99));
        p50.insert(arm.name, median);
    }
    for (name, wasm, native) in [
        (
            "admission_ratio_wasm_vs_native",
            "admission_wasm_p50_us",
            "admission_native_p50_us",
        ),
        (
            "admission_ratio_wasm_vs_native_lazy",
            "admission_wasm_lazy_p50_us",
            "admission_native_lazy_p50_us",
        ),
        (
            "admission_ratio_lazy_vs_typed_wasm",
            "admission_wasm_lazy_p50_us",
            "admission_wasm_p50_us",
        ),
    ] {
        let ratio = p50[wasm] / p50[native];
        rows.push(format!(
            "| {name} | {ratio:.2}× | | p50 {wasm} / p50 {native} |"
        ));
        results.insert(name.into(), json!(ratio));
    }
}

/// `spec.config` of the pod-stamper arms that read Pods as `Lazy` views.
const LAZY_CONFIG: &str = r#"{"annotation": "bench.krec.dev/stamp", "lazy": true}"#;

/// The manifest line giving pod-stamper [`LAZY_CONFIG`] when `lazy`.
fn config_line(lazy: bool) -> String {
    if lazy {
        format!("  config: {LAZY_CONFIG}\n")
    } else {
        String::new()
    }
}

/// pod-stamper as a validating webhook for Pod updates (reading Pods lazily when `lazy`).
fn webhook_manifest(dir: &Path, isolation: &str, lazy: bool) -> Manifest {
    let module = common::module("pod_stamper.wasm");
    let path = dir.join(format!("pod-stamper-webhook-{isolation}-{lazy}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: pod-stamper}}\nspec:\n  module: {}\n  isolation: {isolation}\n{}  webhooks:\n    - type: validating\n      rules: [{{apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: [UPDATE]}}]\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get]}}\n",
            module.display(),
            config_line(lazy)
        ),
    )
    .expect("write manifest");
    Manifest::load(&path).expect("manifest")
}

/// pod-stamper as a reconciler of Pods (reading them lazily when `lazy`).
fn manifest(dir: &Path, isolation: &str, lazy: bool) -> Manifest {
    let module = common::module("pod_stamper.wasm");
    let path = dir.join(format!("pod-stamper-{isolation}-{lazy}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: pod-stamper}}\nspec:\n  module: {}\n  isolation: {isolation}\n{}  tickers: [{{every: 1h, request: {{name: x}}}}]\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get]}}\n",
            module.display(),
            config_line(lazy)
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
    let wasm = |isolation: &str, lazy: bool| {
        GuestWorker::new(
            Arc::new(load(
                &engines,
                Arc::new(manifest(dir.path(), isolation, lazy)),
            )),
            access.clone(),
        )
    };
    let native = |lazy: bool, reconcile: krec::guest::native::NativeReconcile| {
        GuestWorker::new(
            Arc::new(krec::guest::native::module(
                Arc::new(manifest(dir.path(), "reuse", lazy)),
                reconcile,
            )),
            access.clone(),
        )
    };
    // Each arm: a worker, and how many of a round's reconciles it runs (a fresh instance per
    // reconcile is slow: a quarter). The last arm only instantiates: a per-reconcile worker's
    // `warm_up` creates an instance, configures it (`init`) and drops it, with no reconcile.
    let mut arms = vec![
        Arm::new(
            "guest_call_native_us",
            "pod-stamper compiled natively, run by a `GuestWorker`: get of the Pod from the in-memory cluster as text, parsed into `Pod` (baseline)",
            (
                native(
                    false,
                    krec_guest::native::reconcile::<pod_stamper::PodStamper>,
                ),
                1,
            ),
        ),
        Arm::new(
            "guest_call_wasm_reused_us",
            "the same crate as a Wasm guest, the worker's instance reused",
            (wasm("reuse", false), 1),
        ),
        Arm::new(
            "guest_call_wasm_fresh_us",
            "the same with a fresh instance per reconcile (`isolation: per-reconcile`)",
            (wasm("per-reconcile", false), 4),
        ),
        Arm::new(
            "guest_call_instantiate_only_us",
            "a fresh instance created, configured and dropped, no reconcile",
            (wasm("per-reconcile", false), 4),
        ),
        Arm::new(
            "guest_call_native_lazy_us",
            "pod-stamper reading the Pod as a `Lazy<Pod>` (`stamp_lazy`: labels, annotation, the containers' env lists counted), compiled natively (baseline of the lazy arms)",
            (native(true, native_lazy_reconcile), 1),
        ),
        Arm::new(
            "guest_call_wasm_lazy_us",
            "the lazy reconcile as a Wasm guest, instance reused",
            (wasm("reuse", true), 1),
        ),
    ];
    let (rounds, per_round) = if quick() { (5, 200) } else { (15, 1000) };
    // `KREC_GUEST_CALL_ARM=<name>` runs that arm alone, many more rounds and no table (to
    // profile one: `perf record` sees only its reconciles).
    let only = std::env::var("KREC_GUEST_CALL_ARM").ok();
    if let Some(name) = &only {
        arms.retain(|arm| arm.name == name.as_str());
        assert!(!arms.is_empty(), "KREC_GUEST_CALL_ARM: no arm {name}");
    }
    let rounds = if only.is_some() { rounds * 10 } else { rounds };
    for _ in 0..50 {
        for arm in &mut arms {
            arm.subject
                .0
                .reconcile(Some("default"), "web-0")
                .await
                .expect("reconcile");
        }
    }
    for _ in 0..rounds {
        for arm in &mut arms {
            let (worker, share) = &mut arm.subject;
            let count = per_round / *share;
            let started = Instant::now();
            for _ in 0..count {
                if arm.name == "guest_call_instantiate_only_us" {
                    worker.warm_up().await.expect("instantiate");
                } else {
                    worker
                        .reconcile(Some("default"), "web-0")
                        .await
                        .expect("reconcile");
                }
            }
            arm.samples
                .push(started.elapsed().as_secs_f64() * 1e6 / count as f64);
        }
    }
    if only.is_some() {
        for arm in &mut arms {
            let (median, min, max) = median_min_max(std::mem::take(&mut arm.samples));
            println!("{}: {median:.2} µs ({min:.2}–{max:.2})", arm.name);
        }
        return;
    }
    // The crossing, paired: each round's lazy Wasm figure less the lazy native one measured
    // just before it, so that the machine's drift between rounds (its speed varies by half
    // from one minute to the next here) cancels out of the difference.
    let round_figures = |name: &str| {
        arms.iter()
            .find(|arm| arm.name == name)
            .map(|arm| arm.samples.clone())
            .unwrap_or_default()
    };
    let paired: Vec<f64> = round_figures("guest_call_wasm_lazy_us")
        .iter()
        .zip(round_figures("guest_call_native_lazy_us"))
        .map(|(wasm, native)| wasm - native)
        .collect();
    let (paired_median, paired_min, paired_max) = median_min_max(paired);
    let mut figures = std::collections::HashMap::new();
    for arm in &mut arms {
        let (median, min, max) = median_min_max(std::mem::take(&mut arm.samples));
        rows.push(format!(
            "| {} | {median:.2} | {min:.2}–{max:.2} | {} |",
            arm.name, arm.what
        ));
        results.insert(arm.name.into(), json!(median));
        figures.insert(arm.name, median);
    }
    let figure = |name: &str| figures[name];
    rows.push(format!(
        "| pod bytes | {bytes} | | the Pod as stored: defaults and managedFields |"
    ));
    rows.push(format!(
        "| guest_call_overhead_lazy_paired_us | {paired_median:.2} | {paired_min:.2}–{paired_max:.2} | lazy Wasm − lazy native, round by round (the crossing; target ≤ 10 µs) |"
    ));
    results.insert(
        "guest_call_overhead_lazy_paired_us".into(),
        json!(paired_median),
    );
    for (name, value, unit, what) in [
        (
            "guest_call_ratio_fresh_vs_reused",
            figure("guest_call_wasm_fresh_us") / figure("guest_call_wasm_reused_us"),
            "×",
            "fresh / reused (target ≤ 2)",
        ),
        (
            "guest_call_overhead_us",
            figure("guest_call_wasm_reused_us") - figure("guest_call_native_us"),
            "",
            "reused − native, the Pod decoded whole",
        ),
        (
            "guest_call_ratio_wasm_vs_native",
            figure("guest_call_wasm_reused_us") / figure("guest_call_native_us"),
            "×",
            "reused / native",
        ),
        (
            "guest_call_instantiate_us",
            figure("guest_call_wasm_fresh_us") - figure("guest_call_wasm_reused_us"),
            "",
            "fresh − reused: instantiation per reconcile",
        ),
        (
            "guest_call_overhead_lazy_us",
            figure("guest_call_wasm_lazy_us") - figure("guest_call_native_lazy_us"),
            "",
            "lazy Wasm − lazy native: the sandbox's overhead per reconcile (target ≤ 10 µs)",
        ),
        (
            "guest_call_ratio_lazy_vs_typed_wasm",
            figure("guest_call_wasm_lazy_us") / figure("guest_call_wasm_reused_us"),
            "×",
            "a Wasm reconcile reading the Pod lazily / decoding it whole",
        ),
    ] {
        rows.push(format!("| {name} | {value:.2}{unit} | | {what} |"));
        results.insert(name.into(), json!(value));
    }
}

/// One reconcile of `worker` as the controller's worker runs it with traces as installed: in a
/// trace when they are on, its guest and root spans built when the trace is kept.
async fn traced_reconcile(worker: &mut GuestWorker) {
    use opentelemetry::trace::{SpanKind, Status};
    let started = Instant::now();
    let trace = krec::telemetry::installed().map(krec::telemetry::Trace::start);
    let reconcile = worker.reconcile(Some("default"), "web-0");
    krec::telemetry::in_trace(trace.clone(), reconcile)
        .await
        .expect("reconcile");
    if let Some(trace) = trace
        && trace.keeps(false)
    {
        let now = Instant::now();
        let guest = vec![opentelemetry::KeyValue::new("krec.guest", "pod-stamper")];
        trace.guest(started, now, guest, Status::Unset);
        let attributes = vec![
            opentelemetry::KeyValue::new("controller", "pod-stamper"),
            opentelemetry::KeyValue::new("controllerKind", "Pod"),
            opentelemetry::KeyValue::new("namespace", "default"),
            opentelemetry::KeyValue::new("name", "web-0"),
        ];
        trace.finish(
            "reconcile",
            SpanKind::Consumer,
            started,
            attributes,
            Status::Unset,
        );
    }
}

/// The reused Wasm arm with traces off, on at 1 % and on at 100 %, round by round.
async fn traces(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    use krec::telemetry::{Sampler, Telemetry};
    let dir = tempfile::tempdir().expect("tempdir");
    let engines = Engines::new().expect("engines");
    let cluster = Arc::new(MemoryCluster::new());
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::READ_ONLY] = json!("true");
    cluster.create(pod).await.expect("pod");
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    let module = Arc::new(load(
        &engines,
        Arc::new(manifest(dir.path(), "reuse", false)),
    ));
    let mut worker = GuestWorker::new(module, access);
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
    let (rounds, per_round) = if quick() { (5, 500) } else { (15, 2000) };
    for _ in 0..200 {
        traced_reconcile(&mut worker).await;
    }
    let mut samples: std::collections::HashMap<&str, Vec<f64>> = Default::default();
    for round in 0..rounds {
        // Each round starts with the next arm (see the throughput bench's traces section).
        for k in 0..arms.len() {
            let (name, sampler) = arms[(round + k) % arms.len()];
            let telemetry = sampler
                .map(|sampler| Telemetry::otlp_http(&sink, sampler).expect("the OTLP exporter"));
            krec::telemetry::replace(telemetry);
            let started = Instant::now();
            for _ in 0..per_round {
                traced_reconcile(&mut worker).await;
            }
            samples
                .entry(name)
                .or_default()
                .push(started.elapsed().as_secs_f64() * 1e6 / f64::from(per_round));
            if let Some(telemetry) = krec::telemetry::replace(None) {
                // Its last spans exported inside this arm's round, not the next's.
                let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
            }
        }
    }
    common::arms_vs_baseline(
        rows,
        results,
        ("guest_call_traces", "_us", 2),
        &arms.map(|(name, _)| name),
        &samples,
        |name, ratio, paired| {
            format!(
                "the reused Wasm reconcile, traces {name}: {ratio:.3}× of off's time; by round {paired:.3}×"
            )
        },
    );
}

/// Which JSON parser reads the stored Pod fastest, in Wasm and natively (`bench/json-seam`):
/// the same candidates, the same text, one run.
async fn parsers(rows: &mut Vec<String>, results: &mut serde_json::Map<String, Value>) {
    let cluster = MemoryCluster::new();
    let mut pod = common::pod("default", "web-0");
    pod["metadata"]["labels"][pod_stamper::GENERATION] = json!("1");
    let stored = cluster.create(pod).await.expect("pod");
    let text = serde_json::to_string(&stored).expect("json");
    let (rounds, per_round) = if quick() { (5, 500) } else { (15, 2000) };
    let native = json_seam::measure(&text, rounds, per_round);
    // As guests run (epoch interruption: a check at every loop and call), and without it.
    let wasm = run_json_seam(&text, rounds, per_round, true).await;
    let plain = run_json_seam(&text, rounds, per_round, false).await;
    let mut parsers = serde_json::Map::new();
    for ((native, (name, median, min, max)), (_, plain, _, _)) in
        native.iter().zip(&wasm).zip(&plain)
    {
        assert_eq!(
            native.name, name,
            "the Wasm arm's candidates in the same order"
        );
        rows.push(format!(
            "| parser: {name} | {median:.2} ({min:.2}–{max:.2}) | native {:.2} ({:.2}–{:.2}); Wasm without epochs {plain:.2} | Wasm/native {:.2}× |",
            native.median_us,
            native.min_us,
            native.max_us,
            median / native.median_us
        ));
        parsers.insert(
            name.clone(),
            json!({"wasm_us": median, "wasm_without_epochs_us": plain, "native_us": native.median_us}),
        );
    }
    results.insert("json_parsers_stored_pod".into(), Value::Object(parsers));
}

/// `bench/json-seam` as a `wasm32-wasip2` command under wasmtime, the Pod on stdin, with epoch
/// interruption as the host runs guests (`epochs`) or without: each candidate's name, median,
/// min and max µs.
async fn run_json_seam(
    text: &str,
    rounds: usize,
    per_round: usize,
    epochs: bool,
) -> Vec<(String, f64, f64, f64)> {
    use wasmtime::component::{Component, Linker, ResourceTable};
    use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
    use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    struct State {
        wasi: WasiCtx,
        table: ResourceTable,
    }
    impl WasiView for State {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView {
                ctx: &mut self.wasi,
                table: &mut self.table,
            }
        }
    }
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(epochs);
    let engine = wasmtime::Engine::new(&config).expect("engine");
    let component =
        Component::from_file(&engine, common::module("json-seam.wasm")).expect("json-seam.wasm");
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("wasi");
    let stdout = MemoryOutputPipe::new(1 << 20);
    let wasi = WasiCtxBuilder::new()
        .args(&[
            "json-seam".to_owned(),
            rounds.to_string(),
            per_round.to_string(),
        ])
        .stdin(MemoryInputPipe::new(text.to_owned()))
        .stdout(stdout.clone())
        .inherit_stderr()
        .build();
    let mut store = wasmtime::Store::new(
        &engine,
        State {
            wasi,
            table: ResourceTable::new(),
        },
    );
    // Checked, never reached (no ticker advances this engine's epoch).
    store.set_epoch_deadline(u64::MAX / 2);
    let command =
        wasmtime_wasi::p2::bindings::Command::instantiate_async(&mut store, &component, &linker)
            .await
            .expect("instantiate json-seam");
    command
        .wasi_cli_run()
        .call_run(&mut store)
        .await
        .expect("run json-seam")
        .expect("json-seam's exit");
    String::from_utf8_lossy(&stdout.contents())
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let number = |i: usize| fields[i].parse::<f64>().expect("a figure");
            (fields[0].to_owned(), number(1), number(2), number(3))
        })
        .collect()
}

/// A queue key as cheap as a tuple, in a namespace (fairness flow) of its task's own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Key {
    namespace: &'static str,
    index: usize,
}

impl krec::controller::queue::Flow for Key {
    fn flow(&self) -> Option<&str> {
        Some(self.namespace)
    }
}

/// add + get + done cycles per second over `threads` tasks, each on its own keys.
async fn queue_rate(threads: usize, ops: usize) -> f64 {
    let queue = Arc::new(WorkQueue::new(RateLimit::default()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..threads)
        .map(|t| {
            let queue = queue.clone();
            let namespace = ["tenant-0", "tenant-1"][t % 2];
            tokio::spawn(async move {
                for i in 0..ops {
                    let key = Key {
                        namespace,
                        index: i % 1024,
                    };
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
    // `KREC_GUEST_CALL_SECTIONS=reconcile,traces,admission,parsers,queue` runs only those (to profile
    // one); by default, every section.
    let sections = std::env::var("KREC_GUEST_CALL_SECTIONS").ok();
    let wanted = |section: &str| {
        sections
            .as_deref()
            .is_none_or(|list| list.split(',').any(|s| s.trim() == section))
    };
    if wanted("reconcile") {
        runtime.block_on(guest_call(&mut rows, &mut results));
    }
    if wanted("traces") {
        runtime.block_on(traces(&mut rows, &mut results));
    }
    if wanted("admission") {
        runtime.block_on(admission(&mut rows, &mut results));
    }
    if wanted("parsers") {
        runtime.block_on(parsers(&mut rows, &mut results));
    }
    drop(runtime);
    if wanted("queue") {
        queue_ops(&mut rows, &mut results);
    }
    common::print_table(&rows);
    common::write_results(results);
}
