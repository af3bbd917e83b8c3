//! The cluster platform (issue 38): how long a guest registered as an object takes to run.
//!
//! - **Create → first reconcile**: a `ClusterReconciler` (the stamper over one ConfigMap) is
//!   created and the time until its first reconcile ends is measured, its module named four ways:
//!   a file on the host's disk it has not compiled before (the baseline) or has, and an `oci://`
//!   tag of a registry (the CNCF distribution registry, a process on loopback) it has not pulled
//!   before (pull + compile) or has (one `HEAD`, the compiled module kept). Each "new" module is
//!   the stamper with a custom section of its own, so nothing is cached.
//! - **Tag move → every replica swapped**: two replicas (managers with stores of their own) run a
//!   guest by tag with `pull.every: 1s`; a new version is pushed to the tag and the time until both
//!   run it is measured, against the baseline of the same guest named by a file that is replaced
//!   (both replicas watch it).
//!
//! Ratios are against the baselines, in the same run. `KREC_BENCH_QUICK=1`: three rounds.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{median_min_max, module, print_table, quick, write_results};
use krec::cluster::client::ApiClient;
use krec::guests::from_cluster::{FromCluster, cluster_reconciler_gvk};
use krec::guests::oci::{Registries, RegistryAuth};
use krec::guests::{Manager, ManagerOptions};
use krec_testkit::OciRegistry;
use serde_json::{Value, json};

/// The stamper with a custom section naming `tag`: a module no cache has seen.
fn unique_module(tag: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(module("stamper_a.wasm")).expect("stamper");
    let name = b"krec-bench";
    let mut payload = vec![u8::try_from(name.len()).expect("short")];
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    bytes.push(0); // a custom section
    bytes.push(u8::try_from(payload.len()).expect("short"));
    bytes.extend(payload);
    bytes
}

fn object(name: &str, module: &str) -> Value {
    json!({"apiVersion": "krec.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": name},
        "spec": {"module": module, "pull": {"every": "1s"},
            "for": {"apiVersion": "v1", "kind": "ConfigMap"},
            "namespaces": ["default"],
            "permissions": [{"apiVersion": "v1", "kind": "ConfigMap",
                "verbs": ["get", "list", "watch", "patch"]}]}})
}

struct Platform {
    api: Arc<ApiClient>,
    registry: OciRegistry,
    pusher: Registries,
    modules: PathBuf,
}

impl Platform {
    async fn push(&self, bytes: Vec<u8>, path: &str) -> String {
        let tagged = self.registry.reference(path);
        let reference = krec::guests::oci::reference(Path::new(&tagged))
            .expect("oci")
            .expect("reference");
        self.pusher
            .push_bytes(bytes, "stamper.wasm", &reference, &RegistryAuth::Anonymous)
            .await
            .expect("push");
        tagged
    }

    async fn manager(&self, store: &Path, cache: &Path) -> Manager {
        Manager::start_with(
            self.api.clone(),
            Vec::new(),
            ManagerOptions {
                from_cluster: Some(FromCluster {
                    module_dir: self.modules.clone(),
                    ..Default::default()
                }),
                registries: Some(Arc::new(Registries::new(
                    store.to_owned(),
                    vec![self.registry.addr.clone()],
                ))),
                module_cache: krec::guest::ModuleCache::new(cache).expect("module cache"),
                ..Default::default()
            },
        )
        .await
        .expect("manager")
    }

    /// Seconds from creating `name` (naming `module`) until its first reconcile ended; the
    /// object is deleted again and its guest gone before returning.
    async fn first_reconcile(&self, manager: &Manager, name: &str, module: &str) -> f64 {
        let started = Instant::now();
        self.api
            .create(&object(name, module), "bench")
            .await
            .expect("create");
        let took = loop {
            if manager
                .controller(name)
                .is_some_and(|c| c.stats().total() >= 1)
            {
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{name} never reconciled: {:?}",
                manager.skipped()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        self.api
            .delete(&cluster_reconciler_gvk(), None, name, None)
            .await
            .expect("delete");
        let deleted = Instant::now();
        while manager.controller(name).is_some() {
            assert!(
                deleted.elapsed() < Duration::from_secs(120),
                "{name} deleted but still running"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        took.as_secs_f64()
    }
}

/// Wait until every manager runs `name` with the module of digest `digest`; seconds since
/// `since`.
async fn swapped(managers: &[&Manager], name: &str, digest: &str, since: Instant) -> f64 {
    loop {
        if managers.iter().all(|m| {
            m.controller(name)
                .is_some_and(|c| c.module().digest() == digest)
        }) {
            return since.elapsed().as_secs_f64();
        }
        assert!(
            since.elapsed() < Duration::from_secs(120),
            "never swapped to {digest}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn row(name: &str, samples: Vec<f64>, baseline: Option<f64>, what: &str) -> (String, Value) {
    let (median, min, max) = median_min_max(samples);
    let ratio = baseline.map(|b| median / b);
    let shown = match ratio {
        Some(r) => format!("{:.0} ms ({r:.2}×)", median * 1000.0),
        None => format!("{:.0} ms", median * 1000.0),
    };
    (
        format!(
            "| {name} | {shown} | {:.0}–{:.0} ms | {what} |",
            min * 1000.0,
            max * 1000.0
        ),
        json!({"median_ms": median * 1000.0, "min_ms": min * 1000.0, "max_ms": max * 1000.0,
            "ratio_to_baseline": ratio}),
    )
}

fn main() {
    krec::guests::oci::install_crypto();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .try_init();
    let rounds = if quick() { 3 } else { 10 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // With its built-in controllers: CRDs become established.
        let server = krec_apiserver::Server::builder()
            .start()
            .await
            .expect("API server");
        let client = krec::cluster::connect::client_from_kubeconfig(server.kubeconfig())
            .await
            .expect("client");
        let api = ApiClient::new(client);
        let mut objects = krec::install::crds::api_objects();
        objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm-0", "namespace": "default"}, "data": {"value": "0"}}));
        let problems = krec::install::apply_objects(&api, objects).await;
        assert!(problems.is_empty(), "{problems:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        let registry = OciRegistry::start();
        let pusher = Registries::new(dir.path().join("pusher"), vec![registry.addr.clone()]);
        let modules = dir.path().join("modules");
        std::fs::create_dir_all(&modules).expect("modules");
        let platform = Platform {
            api: api.clone(),
            registry,
            pusher,
            modules: modules.clone(),
        };
        let manager = platform
            .manager(&dir.path().join("store"), &dir.path().join("cache"))
            .await;
        let watcher = manager.watch_sources(None);

        let (mut file_new, mut file_kept, mut oci_new, mut oci_kept) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..rounds {
            let file = format!("new-{i}.wasm");
            std::fs::write(modules.join(&file), unique_module(&format!("file-{i}")))
                .expect("module");
            file_new.push(
                platform
                    .first_reconcile(&manager, &format!("f{i}"), &file)
                    .await,
            );
            file_kept.push(
                platform
                    .first_reconcile(&manager, &format!("fk{i}"), &file)
                    .await,
            );
            let tagged = platform
                .push(
                    unique_module(&format!("oci-{i}")),
                    &format!("bench/stamper:r{i}"),
                )
                .await;
            oci_new.push(
                platform
                    .first_reconcile(&manager, &format!("o{i}"), &tagged)
                    .await,
            );
            oci_kept.push(
                platform
                    .first_reconcile(&manager, &format!("ok{i}"), &tagged)
                    .await,
            );
        }
        watcher.stop().await;

        // Two replicas, each its own store and compiled-module cache.
        let second = platform
            .manager(&dir.path().join("store-2"), &dir.path().join("cache-2"))
            .await;
        let watchers = [manager.watch_sources(None), second.watch_sources(None)];
        let moving = platform
            .push(unique_module("move-0"), "bench/stamper:moving")
            .await;
        api.create(&object("mover", &moving), "bench")
            .await
            .expect("create");
        std::fs::write(modules.join("replaced.wasm"), unique_module("file-move-0"))
            .expect("module");
        api.create(&object("replaced", "replaced.wasm"), "bench")
            .await
            .expect("create");
        let (mut tag_moves, mut file_swaps) = (Vec::new(), Vec::new());
        for i in 1..=rounds {
            let bytes = unique_module(&format!("move-{i}"));
            let digest = krec::guest::module_cache::digest(&bytes);
            platform.push(bytes, "bench/stamper:moving").await;
            let pushed = Instant::now();
            tag_moves.push(swapped(&[&manager, &second], "mover", &digest, pushed).await);
            let bytes = unique_module(&format!("file-move-{i}"));
            let digest = krec::guest::module_cache::digest(&bytes);
            let tmp = modules.join("replaced.wasm.new");
            std::fs::write(&tmp, bytes).expect("module");
            std::fs::rename(&tmp, modules.join("replaced.wasm")).expect("rename");
            let replaced = Instant::now();
            file_swaps.push(swapped(&[&manager, &second], "replaced", &digest, replaced).await);
        }
        for watcher in watchers {
            watcher.stop().await;
        }

        let base_new = median_min_max(file_new.clone()).0;
        let base_kept = median_min_max(file_kept.clone()).0;
        let base_swap = median_min_max(file_swaps.clone()).0;
        let rows = [
            (
                "apply_file_new_module",
                row(
                    "create → first reconcile, file, new module (baseline)",
                    file_new,
                    None,
                    "compile + watches synced",
                ),
            ),
            (
                "apply_oci_pulled",
                row(
                    "create → first reconcile, oci:// tag, pulled",
                    oci_new,
                    Some(base_new),
                    "HEAD + manifest + layer pulled + compile",
                ),
            ),
            (
                "apply_file_kept",
                row(
                    "create → first reconcile, file, compiled before (baseline)",
                    file_kept,
                    None,
                    "module cache hit",
                ),
            ),
            (
                "apply_oci_kept",
                row(
                    "create → first reconcile, oci:// tag, pulled before",
                    oci_kept,
                    Some(base_kept),
                    "HEAD (credentials checked) + module cache hit",
                ),
            ),
            (
                "swap_file_replaced",
                row(
                    "file replaced → both replicas swapped (baseline)",
                    file_swaps,
                    None,
                    "file watcher (100 ms debounce) + compile",
                ),
            ),
            (
                "swap_tag_moved",
                row(
                    "tag moved → both replicas swapped",
                    tag_moves,
                    Some(base_swap),
                    "re-resolve every 1 s + pull + compile",
                ),
            ),
        ];
        print_table(&rows.iter().map(|(_, (r, _))| r.clone()).collect::<Vec<_>>());
        let mut figures = serde_json::Map::new();
        let mut platform_figures = serde_json::Map::new();
        for (key, (_, value)) in rows {
            platform_figures.insert(key.to_owned(), value);
        }
        figures.insert("platform".to_owned(), Value::Object(platform_figures));
        write_results(figures);
        second.cache().stop();
        manager.cache().stop();
        server.shutdown().await;
    });
}
