//! Guests in three languages side by side, in one run: pod-counter (a reconciler: get the
//! ReplicaSet, list its Pods by selector, label it when the count changed) and foo-validator (a
//! validating webhook: list the Foos of the namespace) written in Rust (`sample-guests`), Python
//! (componentize-py: `sample-guests/pod-counter-py`, `tests/guests/foo-validator-py`) and
//! TypeScript (componentize-js: `tests/guests/pod-counter-ts`, `sample-guests/foo-validator-ts`).
//!
//! Per language: the component's size; its cold compile (no module cache) and its load from the
//! module cache on disk (a new host's start, a second replica, a swap back); the memory of the
//! compiled module, and of one instance idle (instantiated and configured) and active (after
//! reconciling); one reconcile over an in-memory cluster (a ReplicaSet and 10 Pods, the label
//! already right: two reads, no write) with the worker's instance reused and with a fresh
//! instance per reconcile, and one of a ReplicaSet that is gone (one read, not found: the
//! guest's own cost with least of the cluster's); one admission review (a Foo create, three Foos listed) p50. Ratios
//! are against the Rust guest of the same run, arms interleaved round by round.
//!
//! Then ten Python guests against ten kopf operators over the same Pods (10 000; 2 000 quick):
//! `tests/guests/pod-reader-py` ten times in one `krec run`, and `bench/kopf/pod_reader.py` in
//! ten `kopf run` processes (kopf as `make bench` installs it into the tools venv), each reading
//! every Pod and deciding on it, writing nothing; against one `krec cluster` in another process.
//! Memory (PSS summed over the arm's processes) once every controller has seen every Pod, and
//! the time until then.
//!
//! Printed as a Markdown table and merged into `bench/results.json`. `KREC_BENCH_QUICK=1` runs
//! fewer rounds; `KREC_LANGUAGES=kopf` only the kopf comparison, `KREC_LANGUAGES=controller-runtime`
//! only the controller-runtime one, and a list of languages (`KREC_LANGUAGES=rust,go`) only their
//! side-by-side figures (Rust first, as the ratios' base).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use common::{
    free_port, http_get, median_min_max, percentile, quick, repo, rss_pss_kib, rss_pss_kib_of,
};
use krec::cluster::{ClusterAccess, ClusterCalls, MemoryCluster};
use krec::guest::{Engines, GuestModule, GuestWorker, ModuleCache};
use krec::manifest::Manifest;
use serde_json::json;

/// One language's guests.
struct Lang {
    name: &'static str,
    counter: PathBuf,
    validator: PathBuf,
}

fn built(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: run `make guests`",
        path.display()
    );
    path
}

fn langs() -> Vec<Lang> {
    let target = repo().join("target");
    let chosen = std::env::var("KREC_LANGUAGES").unwrap_or_default();
    let chosen: Vec<&str> = chosen.split(',').filter(|name| !name.is_empty()).collect();
    let all = vec![
        Lang {
            name: "rust",
            counter: common::module("pod_counter.wasm"),
            validator: common::module("foo_validator.wasm"),
        },
        Lang {
            name: "python",
            counter: built(target.join("python-guests/pod_counter_py.wasm")),
            validator: built(target.join("python-guests/foo_validator_py.wasm")),
        },
        Lang {
            name: "typescript",
            counter: built(target.join("js-guests/pod_counter_ts.wasm")),
            validator: built(target.join("js-guests/foo_validator_ts.wasm")),
        },
        Lang {
            name: "go",
            counter: built(target.join("go-guests/pod_counter_go.wasm")),
            validator: built(target.join("go-guests/foo_validator_go.wasm")),
        },
    ];
    all.into_iter()
        .filter(|lang| chosen.is_empty() || lang.name == "rust" || chosen.contains(&lang.name))
        .collect()
}

/// A manifest for `module`: the same limits for every language (what a Python guest needs).
fn manifest(dir: &Path, name: &str, module: &Path, isolation: &str, spec: &str) -> Arc<Manifest> {
    let path = dir.join(format!("{name}-{isolation}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {}\n  isolation: {isolation}\n  limits: {{timeout: 5s, memory: 128Mi}}\n{spec}",
            module.display()
        ),
    )
    .expect("write manifest");
    Arc::new(Manifest::load(&path).expect("manifest"))
}

const COUNTER_SPEC: &str = "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  permissions:\n    - {apiVersion: apps/v1, kind: ReplicaSet, verbs: [get, list, watch, update]}\n    - {apiVersion: v1, kind: Pod, verbs: [get, list, watch]}\n";
const VALIDATOR_SPEC: &str = "  webhooks:\n    - type: validating\n      rules: [{apiGroups: [samplecontroller.k8s.io], apiVersions: [v1alpha1], resources: [foos], operations: [CREATE]}]\n  permissions:\n    - {apiVersion: samplecontroller.k8s.io/v1alpha1, kind: Foo, verbs: [get, list, watch]}\n";

/// The in-memory cluster: the Foo CRD, three Foos, a ReplicaSet labelled with the count of its
/// 10 Pods.
async fn cluster() -> Arc<MemoryCluster> {
    let cluster = Arc::new(MemoryCluster::new());
    for crd in
        krec::manifest::objects::read_objects(&repo().join("sample-guests/foo-controller/crd"))
            .expect("the Foo CRD")
            .into_iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let rt = cluster
            .store()
            .registry()
            .by_plural("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            .expect("CRDs are served");
        cluster.store().create(&rt, None, crd, false).expect("CRD");
    }
    for i in 0..3 {
        cluster
            .create(
                json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
                "metadata": {"name": format!("foo-{i}"), "namespace": "default"},
                "spec": {"deploymentName": format!("web-{i}"), "replicas": 1}}),
            )
            .await
            .expect("foo");
    }
    cluster
        .create(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "labels": {"pod-count": "10"}},
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
        .await
        .expect("replicaset");
    for i in 0..10 {
        let mut pod = common::pod("default", &format!("web-{i}"));
        pod["metadata"]["labels"] = json!({"app": "web"});
        cluster.create(pod).await.expect("pod");
    }
    cluster
}

/// A Foo create, as kube-apiserver sends it.
fn foo_review() -> krec::guest::bindings::guest::WitAdmissionRequest {
    use krec::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo};
    WitAdmissionRequest {
        uid: "705ab4f5-6393-11e8-b7cc-42010a800002".into(),
        kind: krec::guest::bindings::WitGvk {
            group: "samplecontroller.k8s.io".into(),
            version: "v1alpha1".into(),
            kind: "Foo".into(),
        },
        resource: "foos".into(),
        sub_resource: None,
        name: Some("new".into()),
        namespace: Some("default".into()),
        operation: WitOperation::Create,
        user_info: WitUserInfo {
            username: "admin".into(),
            groups: vec!["system:authenticated".into()],
        },
        object: Some(
            json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
                "metadata": {"name": "new", "namespace": "default"},
                "spec": {"deploymentName": "web-new", "replicas": 1}})
            .to_string(),
        ),
        old_object: None,
        dry_run: false,
    }
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

/// Everything measured of one language.
#[derive(Default)]
struct Figures {
    size_mb: f64,
    compile_ms: Vec<f64>,
    cached_load_ms: Vec<f64>,
    module_kib: f64,
    idle_kib: f64,
    active_kib: f64,
    reused_us: Vec<f64>,
    gone_us: Vec<f64>,
    fresh_us: Vec<f64>,
    admission_us: Vec<f64>,
}

#[tokio::main]
async fn main() {
    // `KREC_LANGUAGES=kopf` runs only the comparison with kopf.
    if std::env::var("KREC_LANGUAGES").as_deref() == Ok("kopf") {
        kopf_arms().await;
        return;
    }
    // `KREC_LANGUAGES=controller-runtime` runs only the comparison with controller-runtime.
    if std::env::var("KREC_LANGUAGES").as_deref() == Ok("controller-runtime") {
        controller_runtime_arms().await;
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let engines = Engines::new().expect("engines");
    let (engine, linker) = engines.for_isolation(krec::manifest::Isolation::Reuse);
    let (fresh_engine, fresh_linker) =
        engines.for_isolation(krec::manifest::Isolation::PerReconcile);
    let langs = langs();
    let mut figures: Vec<Figures> = langs.iter().map(|_| Figures::default()).collect();
    let compiles = if quick() { 1 } else { 3 };

    // Compile cold, and load from the module cache on disk.
    for (lang, fig) in langs.iter().zip(&mut figures) {
        fig.size_mb = std::fs::metadata(&lang.counter).expect("module").len() as f64 / 1e6;
        let m = manifest(dir.path(), lang.name, &lang.counter, "reuse", COUNTER_SPEC);
        for _ in 0..compiles {
            let started = Instant::now();
            GuestModule::load(engine, linker, m.clone()).expect("compile");
            fig.compile_ms.push(ms(started));
        }
        let cache_dir = dir.path().join(format!("cache-{}", lang.name));
        GuestModule::load_cached(
            engine,
            linker,
            m.clone(),
            &ModuleCache::new(&cache_dir).expect("cache"),
        )
        .expect("fill the cache");
        for _ in 0..if quick() { 3 } else { 10 } {
            // A new cache each time: no in-process sharing, the compiled form read from disk.
            let cache = ModuleCache::new(&cache_dir).expect("cache");
            let started = Instant::now();
            GuestModule::load_cached(engine, linker, m.clone(), &cache).expect("cached load");
            fig.cached_load_ms.push(ms(started));
        }
    }

    // Memory: the module, then 8 instances idle and after reconciling.
    let cluster = cluster().await;
    let access: Arc<dyn ClusterAccess> = cluster.clone();
    const INSTANCES: usize = 8;
    for (lang, fig) in langs.iter().zip(&mut figures) {
        let m = manifest(dir.path(), lang.name, &lang.counter, "reuse", COUNTER_SPEC);
        let before = rss_pss_kib().1;
        let module = Arc::new(GuestModule::load(engine, linker, m).expect("module"));
        let loaded = rss_pss_kib().1;
        let mut workers: Vec<GuestWorker> = (0..INSTANCES)
            .map(|_| GuestWorker::new(module.clone(), access.clone()))
            .collect();
        for worker in &mut workers {
            worker.warm_up().await.expect("instantiate");
        }
        let idle = rss_pss_kib().1;
        for worker in &mut workers {
            for _ in 0..20 {
                worker
                    .reconcile(Some("default"), "web")
                    .await
                    .expect("reconcile");
            }
        }
        let active = rss_pss_kib().1;
        fig.module_kib = loaded - before;
        fig.idle_kib = (idle - loaded) / INSTANCES as f64;
        fig.active_kib = (active - loaded) / INSTANCES as f64;
        drop(workers);
    }

    // Reconcile (reused and fresh instance) and admission, interleaved round by round.
    let mut reused = Vec::new();
    let mut fresh = Vec::new();
    let mut validators = Vec::new();
    for lang in &langs {
        let m = manifest(dir.path(), lang.name, &lang.counter, "reuse", COUNTER_SPEC);
        let module = GuestModule::load(engine, linker, m).expect("module");
        reused.push(GuestWorker::new(Arc::new(module), access.clone()));
        let m = manifest(
            dir.path(),
            lang.name,
            &lang.counter,
            "per-reconcile",
            COUNTER_SPEC,
        );
        let module = GuestModule::load(fresh_engine, fresh_linker, m).expect("module");
        fresh.push(GuestWorker::new(Arc::new(module), access.clone()));
        let name = format!("{}-validator", lang.name);
        let m = manifest(dir.path(), &name, &lang.validator, "reuse", VALIDATOR_SPEC);
        validators.push(GuestModule::load(engine, linker, m).expect("validator"));
    }
    let review = foo_review();
    let (rounds, per_round) = if quick() { (3, 100) } else { (10, 400) };
    for worker in reused.iter_mut().chain(fresh.iter_mut()) {
        for _ in 0..20 {
            worker
                .reconcile(Some("default"), "web")
                .await
                .expect("warm up");
        }
    }
    for _ in 0..rounds {
        for (i, fig) in figures.iter_mut().enumerate() {
            let started = Instant::now();
            for _ in 0..per_round {
                reused[i]
                    .reconcile(Some("default"), "web")
                    .await
                    .expect("reconcile");
            }
            fig.reused_us
                .push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
            // The ReplicaSet gone: one `get` answered not-found, the guest's own cost laid bare.
            let started = Instant::now();
            for _ in 0..per_round {
                reused[i]
                    .reconcile(Some("default"), "gone")
                    .await
                    .expect("reconcile");
            }
            fig.gone_us
                .push(started.elapsed().as_secs_f64() * 1e6 / per_round as f64);
            let started = Instant::now();
            for _ in 0..per_round / 10 {
                fresh[i]
                    .reconcile(Some("default"), "web")
                    .await
                    .expect("reconcile");
            }
            fig.fresh_us
                .push(started.elapsed().as_secs_f64() * 1e6 / (per_round / 10) as f64);
            let mut round = Vec::with_capacity(per_round / 4);
            for _ in 0..per_round / 4 {
                let started = Instant::now();
                let verdict = validators[i]
                    .admit(&access, None, krec::guest::Review::Validate, review.clone())
                    .await
                    .expect("review");
                assert!(verdict.allowed, "{}: {:?}", langs[i].name, verdict.message);
                round.push(started.elapsed().as_secs_f64() * 1e6);
            }
            fig.admission_us.push(percentile(&mut round, 50.0));
        }
    }

    report(&langs, figures);
    drop((reused, fresh, validators));
    if std::env::var("KREC_LANGUAGES").is_ok_and(|chosen| !chosen.is_empty()) {
        return;
    }
    kopf_arms().await;
    controller_runtime_arms().await;
}

/// Controllers in each arm: ten, as in the issue.
const CONTROLLERS: usize = 10;

/// PSS of `pids`, summed, in MiB.
fn pss_mib(pids: &[u32]) -> f64 {
    pids.iter()
        .map(|pid| rss_pss_kib_of(&pid.to_string()).1 / 1024.0)
        .sum()
}

/// Wait until `seen()` reaches `expected` and stays put for 2 s — or stays put for 10 s within
/// 0.1 % of it (a kopf operator has been seen to miss one Pod's event of 10 000) — the time it
/// took, the PSS of `pids` then and the count seen. Panics after ten minutes.
async fn settle(pids: &[u32], expected: u64, seen: impl Fn() -> u64) -> (f64, f64, u64) {
    let started = Instant::now();
    let mut last = (seen(), Instant::now());
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let now = seen();
        let quiet = last.1.elapsed().as_secs_f64();
        if now != last.0 {
            last = (now, Instant::now());
        } else if (now >= expected && quiet >= 2.0)
            || (now * 1000 >= expected * 999 && quiet >= 10.0)
        {
            return (
                last.1.duration_since(started).as_secs_f64(),
                pss_mib(pids),
                now,
            );
        }
        assert!(
            started.elapsed().as_secs() < 600,
            "stuck at {now} of {expected} Pods seen"
        );
    }
}

async fn kopf_arms() {
    let kopf = repo().join(".tools/venv/bin/kopf");
    assert!(
        kopf.exists(),
        "{} is missing: `make bench` installs kopf",
        kopf.display()
    );
    let pods = if quick() { 2_000 } else { 10_000 };
    let cluster = common::ClusterProcess::start();
    let text = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
    let client = krec::cluster::connect::client_from_kubeconfig(&text)
        .await
        .expect("client");
    common::create_pods(&client, "bench", pods, |i| {
        common::pod("bench", &format!("p-{i:05}"))
    })
    .await;
    let expected = (pods * CONTROLLERS) as u64;
    let dir = tempfile::tempdir().expect("tempdir");
    let module = built(repo().join("target/python-guests/pod_reader_py.wasm"));

    // Ten Python guests in one krec host, the module compiled into the cache beforehand.
    let Arm {
        secs: krec_secs,
        mib: krec_mib,
        seen: krec_seen,
        ..
    } = guests_arm(
        dir.path(),
        &cluster.kubeconfig_path,
        &module,
        "96Mi",
        CONTROLLERS,
        expected,
    )
    .await;

    // Ten kopf operators, one process each.
    let operator = repo().join("bench/kopf/pod_reader.py");
    let counts: Vec<_> = (0..CONTROLLERS)
        .map(|i| dir.path().join(format!("kopf-{i}.count")))
        .collect();
    let mut operators: Vec<_> = counts
        .iter()
        .map(|count| {
            std::process::Command::new(&kopf)
                .args(["run", "--standalone", "--all-namespaces", "--quiet"])
                .arg(&operator)
                .env("KUBECONFIG", &cluster.kubeconfig_path)
                .env("POD_READER_COUNT", count)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start kopf")
        })
        .collect();
    let pids: Vec<u32> = operators.iter().map(std::process::Child::id).collect();
    let (kopf_secs, kopf_mib, kopf_seen) = settle(&pids, expected, || {
        counts
            .iter()
            .filter_map(|c| std::fs::read_to_string(c).ok()?.trim().parse::<u64>().ok())
            .sum()
    })
    .await;
    for operator in &mut operators {
        let _ = operator.kill();
        let _ = operator.wait();
    }

    let rows = vec![
        format!(
            "| ten_python_guests_pss_mib | {krec_mib:.0} | | ten pod-reader-py guests in one krec host over {pods} Pods, once each has reconciled every Pod ({krec_seen} reconciles, {krec_secs:.1} s) |"
        ),
        format!(
            "| ten_kopf_operators_pss_mib | {kopf_mib:.0} | | ten kopf operators (one process each) over the same Pods, once each has seen every Pod ({kopf_seen} events, {kopf_secs:.1} s) |"
        ),
        format!(
            "| ten_python_guests_vs_kopf_memory | {:.2}× | | krec's PSS / kopf's (target < 1) |",
            krec_mib / kopf_mib
        ),
    ];
    common::print_table(&rows);
    let mut results = serde_json::Map::new();
    results.insert(
        "ten_python_guests_vs_kopf".into(),
        json!({"pods": pods, "krec_pss_mib": krec_mib, "krec_seconds": krec_secs,
            "krec_reconciles": krec_seen, "kopf_events": kopf_seen,
            "kopf_pss_mib": kopf_mib, "kopf_seconds": kopf_secs,
            "ratio": krec_mib / kopf_mib}),
    );
    common::write_results(results);
}

fn report(langs: &[Lang], figures: Vec<Figures>) {
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    let rust_reused = median_min_max(figures[0].reused_us.clone()).0;
    let rust_fresh = median_min_max(figures[0].fresh_us.clone()).0;
    let rust_gone = median_min_max(figures[0].gone_us.clone()).0;
    let rust_admission = median_min_max(figures[0].admission_us.clone()).0;
    for (lang, fig) in langs.iter().zip(figures) {
        let name = lang.name;
        let (c, c_min, c_max) = median_min_max(fig.compile_ms);
        let (l, l_min, l_max) = median_min_max(fig.cached_load_ms);
        let (r, r_min, r_max) = median_min_max(fig.reused_us);
        let (f, f_min, f_max) = median_min_max(fig.fresh_us);
        let (g, g_min, g_max) = median_min_max(fig.gone_us);
        let (a, a_min, a_max) = median_min_max(fig.admission_us);
        rows.push(format!(
            "| lang_{name}_size_mb | {:.1} | | pod-counter's component |",
            fig.size_mb
        ));
        rows.push(format!(
            "| lang_{name}_compile_ms | {c:.0} | {c_min:.0}–{c_max:.0} | compiled cold (no module cache) |"
        ));
        // The targets: issue 40's for the interpreters, issue 53's for Go.
        let target = if name == "go" { 100 } else { 50 };
        rows.push(format!(
            "| lang_{name}_cached_load_ms | {l:.1} | {l_min:.1}–{l_max:.1} | loaded from the module cache on disk (target ≤ {target} ms) |"
        ));
        rows.push(format!(
            "| lang_{name}_memory_kib | module {:.0}, idle {:.0}, active {:.0} | | PSS: the compiled module; per instance instantiated and configured; per instance after 20 reconciles |",
            fig.module_kib, fig.idle_kib, fig.active_kib
        ));
        rows.push(format!(
            "| lang_{name}_reconcile_reused_us | {r:.1} | {r_min:.1}–{r_max:.1} | {:.2}× Rust (target ≤ 3×) |",
            r / rust_reused
        ));
        rows.push(format!(
            "| lang_{name}_reconcile_gone_us | {g:.1} | {g_min:.1}–{g_max:.1} | reused, the ReplicaSet gone (one `get`, not found); {:.2}× Rust |",
            g / rust_gone
        ));
        rows.push(format!(
            "| lang_{name}_reconcile_fresh_us | {f:.0} | {f_min:.0}–{f_max:.0} | a fresh instance per reconcile; {:.2}× Rust |",
            f / rust_fresh
        ));
        rows.push(format!(
            "| lang_{name}_admission_p50_us | {a:.1} | {a_min:.1}–{a_max:.1} | foo-validator, one review inside the host; {:.2}× Rust |",
            a / rust_admission
        ));
        let figures = json!({
            "size_mb": fig.size_mb, "compile_ms": c, "cached_load_ms": l,
            "module_kib": fig.module_kib, "idle_instance_kib": fig.idle_kib,
            "active_instance_kib": fig.active_kib, "reconcile_reused_us": r,
            "reconcile_fresh_us": f, "reconcile_gone_us": g, "admission_p50_us": a,
            "reconcile_reused_vs_rust": r / rust_reused,
        });
        results.insert(format!("lang_{name}"), figures);
    }
    common::print_table(&rows);
    common::write_results(results);
}

/// CPU seconds (user and system) `pids` have used.
fn cpu_secs(pids: &[u32]) -> f64 {
    let ticks = 100.0; // _SC_CLK_TCK on Linux
    pids.iter()
        .map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            (field(11) + field(12)) / ticks
        })
        .sum()
}

/// The host's reconciles so far, from its /metrics.
fn host_reconciles(admin: &str) -> u64 {
    http_get(admin, "/metrics").map_or(0, |text| {
        text.lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    })
}

/// One arm's figures: seconds to converge, PSS, reconciles seen, CPU seconds.
struct Arm {
    secs: f64,
    mib: f64,
    seen: u64,
    cpu: f64,
    /// A krec host's PSS in compiled modules and in anonymous memory, MiB (see [`pss_parts`]).
    parts: Option<(f64, f64)>,
}

/// `count` pod-reader guests of `module` (each limited to `memory`) in one `krec run`, the
/// module compiled into the cache beforehand, until each has reconciled every Pod.
async fn guests_arm(
    dir: &Path,
    kubeconfig: &Path,
    module: &Path,
    memory: &str,
    count: usize,
    expected: u64,
) -> Arm {
    let cache = dir.join("module-cache");
    let guests = dir.join(format!("guests-{count}"));
    std::fs::create_dir_all(&guests).expect("mkdir");
    for i in 0..count {
        std::fs::write(
            guests.join(format!("reader-{i}.yaml")),
            format!(
                "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: reader-{i}}}\nspec:\n  module: {}\n  for: {{apiVersion: v1, kind: Pod}}\n  limits: {{timeout: 5s, memory: {memory}}}\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch]}}\n",
                module.display()
            ),
        )
        .expect("manifest");
    }
    let engines = Engines::new().expect("engines");
    let (engine, linker) = engines.for_isolation(Default::default());
    let first = Arc::new(Manifest::load(&guests.join("reader-0.yaml")).expect("manifest"));
    GuestModule::load_cached(
        engine,
        linker,
        first,
        &ModuleCache::new(&cache).expect("cache"),
    )
    .expect("fill the module cache");
    let admin = format!("127.0.0.1:{}", free_port());
    let mut krec = std::process::Command::new(env!("CARGO_BIN_EXE_krec"))
        .arg("run")
        .arg("--manifests")
        .arg(&guests)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--module-cache")
        .arg(&cache)
        .args(["--admin-addr", &admin])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start krec run");
    let pids = [krec.id()];
    let (secs, mib, seen) = settle(&pids, expected, || host_reconciles(&admin)).await;
    let cpu = cpu_secs(&pids);
    let (module_mib, anon_mib) = pss_parts(krec.id());
    let _ = krec.kill();
    let _ = krec.wait();
    Arm {
        secs,
        mib,
        seen,
        cpu,
        parts: Some((module_mib, anon_mib)),
    }
}

/// The PSS of process `pid` in MiB, in two of its parts: the mappings of compiled modules (the
/// module cache's files: code and memory images, shared by every instance) and anonymous memory
/// (the host's cache and structures, the guests' linear memories).
fn pss_parts(pid: u32) -> (f64, f64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let (mut module, mut anon) = (0.0, 0.0);
    let mut mapping = "";
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if first == "Pss:" {
            let kib = fields
                .next()
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or(0.0);
            if mapping.ends_with(".cwasm") {
                module += kib / 1024.0;
            } else if mapping.is_empty() {
                anon += kib / 1024.0;
            }
        } else if !first.ends_with(':') && first.contains('-') {
            // A mapping's header: address range, perms, offset, device, inode, [path].
            mapping = line.split_whitespace().nth(5).unwrap_or_default();
        }
    }
    (module, anon)
}

/// `count` controller-runtime operator processes (`operator`), each with its own cache, until
/// each has reconciled every Pod.
async fn operators_arm(
    dir: &Path,
    kubeconfig: &Path,
    operator: &Path,
    count: usize,
    expected: u64,
) -> Arm {
    let counts: Vec<_> = (0..count)
        .map(|i| dir.join(format!("operator-{count}-{i}.count")))
        .collect();
    let mut operators: Vec<_> = counts
        .iter()
        .map(|path| {
            std::process::Command::new(operator)
                .env("KUBECONFIG", kubeconfig)
                .env("POD_READER_COUNT", path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start the operator")
        })
        .collect();
    let pids: Vec<u32> = operators.iter().map(std::process::Child::id).collect();
    let (secs, mib, seen) = settle(&pids, expected, || {
        counts
            .iter()
            .filter_map(|c| std::fs::read_to_string(c).ok()?.trim().parse::<u64>().ok())
            .sum()
    })
    .await;
    let cpu = cpu_secs(&pids);
    for operator in &mut operators {
        let _ = operator.kill();
        let _ = operator.wait();
    }
    Arm {
        secs,
        mib,
        seen,
        cpu,
        parts: None,
    }
}

/// The same reconciler (`bench/controller-runtime/podreader`) as Go guests in one krec host and
/// as controller-runtime operator processes, over the same `krec cluster` and Pods: ten against
/// ten (memory, CPU per reconcile, time to converge), then one against one (throughput).
async fn controller_runtime_arms() {
    let operator = built(repo().join("target/go-bench/pod-reader-operator"));
    let module = built(repo().join("target/go-bench/pod_reader_go.wasm"));
    let pods = if quick() { 2_000 } else { 10_000 };
    let cluster = common::ClusterProcess::start();
    let text = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
    let client = krec::cluster::connect::client_from_kubeconfig(&text)
        .await
        .expect("client");
    common::create_pods(&client, "bench", pods, |i| {
        common::pod("bench", &format!("p-{i:05}"))
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = cluster.kubeconfig_path.clone();
    let mut rows = Vec::new();
    let mut results = serde_json::Map::new();
    for count in [CONTROLLERS, 1] {
        let expected = (pods * count) as u64;
        let guests = guests_arm(dir.path(), &kubeconfig, &module, "192Mi", count, expected).await;
        let operators = operators_arm(dir.path(), &kubeconfig, &operator, count, expected).await;
        let per = |arm: &Arm| arm.cpu * 1e6 / arm.seen.max(1) as f64;
        let rate = |arm: &Arm| arm.seen as f64 / arm.secs.max(1e-3);
        let (module_mib, anon_mib) = guests.parts.unwrap_or_default();
        rows.push(format!(
            "| go_guests_{count}_pss_mib | {:.0} | | {count} Go pod-reader guest(s) in one krec host over {pods} Pods: {} reconciles in {:.1} s, {:.0} µs CPU each; compiled module {module_mib:.0} MiB, anonymous {anon_mib:.0} MiB |",
            guests.mib, guests.seen, guests.secs, per(&guests)
        ));
        rows.push(format!(
            "| controller_runtime_{count}_pss_mib | {:.0} | | {count} controller-runtime operator process(es), the same reconciler: {} reconciles in {:.1} s, {:.0} µs CPU each |",
            operators.mib, operators.seen, operators.secs, per(&operators)
        ));
        rows.push(format!(
            "| go_guests_vs_controller_runtime_{count} | memory {:.2}×, throughput {:.2}×, CPU per reconcile {:.2}× | | krec's / the operators' (targets: memory ≤ 0.1× for ten, throughput ≥ 1.0× for one) |",
            guests.mib / operators.mib,
            rate(&guests) / rate(&operators),
            per(&guests) / per(&operators)
        ));
        results.insert(
            format!("go_guests_vs_controller_runtime_{count}"),
            json!({"pods": pods, "controllers": count,
                "krec_pss_mib": guests.mib, "krec_seconds": guests.secs,
                "krec_module_pss_mib": module_mib, "krec_anon_pss_mib": anon_mib,
                "krec_reconciles": guests.seen, "krec_cpu_us_per_reconcile": per(&guests),
                "operators_pss_mib": operators.mib, "operators_seconds": operators.secs,
                "operators_reconciles": operators.seen,
                "operators_cpu_us_per_reconcile": per(&operators),
                "memory_ratio": guests.mib / operators.mib,
                "throughput_ratio": rate(&guests) / rate(&operators)}),
        );
    }
    common::print_table(&rows);
    common::write_results(results);
}
