//! The second round of attacks on the host by a hostile guest author (issue 35) and what stops
//! each: an `init` that blocks in a host call, a memory burst across a guest's instances, a
//! manifest left invalid in a watched directory, `map` results no object could have. Each test
//! failed (or hung) before its fix.

use std::sync::Arc;
use std::time::Duration;

use krec::guest::{GuestModule, GuestWorker, ReconcileError, TrapCause};
use krec::guests::{Manager, ManagerOptions};
use krec::manifest::Manifest;
use krec_tests::{built_module, local_cluster};

/// The misbehave guest named `name`, its `init` misbehaving as `init` says (`sleep`, `loop`)
/// or not at all, with a 300 ms time limit.
fn misbehave(dir: &std::path::Path, name: &str, init: Option<&str>) -> Manifest {
    let config = init.map_or(String::new(), |init| {
        format!("  config: {{init: {init}}}\n")
    });
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: {name}}}\nspec:\n  module: {}\n  limits: {{timeout: 300ms, memory: 64Mi}}\n  tickers: [{{every: 1h, request: {{name: ok}}}}]\n{config}",
            built_module("misbehave.wasm").display()
        ),
    )
    .expect("write manifest");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Bounds a step that used to hang forever: generous (a passing run takes about a second),
/// so only a hang fails it.
async fn bounded<T>(what: &str, step: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), step)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 60 s"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_blocked_in_a_host_call_should_be_refused_and_hold_up_no_other_guest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cluster, _client, api) = local_cluster().await;
    let manifests = vec![
        misbehave(dir.path(), "sleeper", Some("sleep")),
        misbehave(dir.path(), "looper", Some("loop")),
        misbehave(dir.path(), "healthy", None),
    ];
    let manager = bounded(
        "starting beside an init that sleeps",
        Manager::start_with(api, manifests, ManagerOptions::default()),
    )
    .await
    .expect("manager");
    assert!(
        manager.controller("healthy").is_some(),
        "the healthy guest runs"
    );
    let skipped = manager.skipped();
    for guest in ["sleeper", "looper"] {
        let reason = skipped
            .iter()
            .find(|s| s.guest == guest)
            .map(|s| s.reason.clone())
            .unwrap_or_else(|| panic!("{guest} was not refused: {skipped:?}"));
        assert!(reason.contains("timeout"), "{guest}: {reason}");
    }

    // A reload with a sleeper among its new guests finishes, and starts the others.
    misbehave(dir.path(), "sleeper-2", Some("sleep"));
    misbehave(dir.path(), "healthy-2", None);
    let report = bounded(
        "a reload beside an init that sleeps",
        manager.reload(dir.path()),
    )
    .await
    .expect("reload");
    assert!(
        report.started.contains(&"healthy-2".to_owned()),
        "{report:?}"
    );
    assert!(
        report.rejected.iter().any(|r| r.guest == "sleeper-2"),
        "{report:?}"
    );
    manager.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn krec_checks_trial_of_init_should_end_at_its_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = misbehave(dir.path(), "sleeper", Some("sleep"));
    let engines = krec::guest::Engines::new().expect("engines");
    let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
    let module = GuestModule::load(engine, linker, Arc::new(manifest)).expect("module");
    let cluster: Arc<dyn krec::cluster::ClusterAccess> =
        Arc::new(krec::cluster::MemoryCluster::new());
    let err = bounded(
        "warming up a guest whose init sleeps",
        GuestWorker::new(Arc::new(module), cluster).warm_up(),
    )
    .await
    .expect_err("refused");
    assert!(
        matches!(
            err,
            ReconcileError::Trap {
                cause: TrapCause::Timeout,
                ..
            }
        ),
        "{err}"
    );
}

/// Resident memory of this process, in bytes (Linux).
fn resident() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_burst_should_stay_within_the_guests_budget_and_be_given_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut manifest = misbehave(dir.path(), "grower", None);
    // Each instance may reach 64 MiB; all of them together 100 MiB.
    manifest.spec.limits.total_memory = Some(100 << 20);
    let engines = krec::guest::Engines::new().expect("engines");
    let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
    let module = Arc::new(GuestModule::load(engine, linker, Arc::new(manifest)).expect("module"));
    let cluster: Arc<dyn krec::cluster::ClusterAccess> =
        Arc::new(krec::cluster::MemoryCluster::new());
    let pool = module.budgets().memory[0].clone();
    let before = resident();
    // Eight workers, each growing its instance by 40 MiB at once: 320 MiB wanted.
    let mut workers: Vec<GuestWorker> = (0..8)
        .map(|_| GuestWorker::new(module.clone(), cluster.clone()))
        .collect();
    let results =
        futures::future::join_all(workers.iter_mut().map(|w| w.reconcile(None, "grow"))).await;
    let grown = results.iter().filter(|r| r.is_ok()).count();
    let refused = results
        .iter()
        .filter(|r| {
            matches!(
                r,
                Err(ReconcileError::Trap {
                    cause: TrapCause::OutOfMemory,
                    ..
                })
            )
        })
        .count();
    // At most two fit at once (2 × 42 MiB of 100): the rest trap out-of-memory, unless an
    // earlier one was done and gave its memory back.
    assert!(grown >= 1 && refused >= 1, "{results:?}");
    assert_eq!(grown + refused, 8, "{results:?}");
    assert!(pool.peak() <= 100 << 20, "peak {} MiB", pool.peak() >> 20);
    // Busy workers keep what grew (growing it again each time would cost page faults); idle,
    // they give it back (the controller does after `GROWN_INSTANCE_IDLE`).
    assert!(workers.iter().any(GuestWorker::holds_grown_instance));
    for worker in &mut workers {
        worker.release_grown_instance();
    }
    assert!(workers.iter().all(|w| !w.has_instance()));
    assert_eq!(pool.used(), 0, "all memory given back");
    let after = resident();
    assert!(
        after < before + (64 << 20),
        "resident memory grew from {} to {} MiB",
        before >> 20,
        after >> 20
    );
    // A reconcile that stays small keeps its instance (and its share of the pool).
    assert!(workers[0].reconcile(None, "ok").await.is_ok());
    assert!(workers[0].has_instance());
    assert!(pool.used() > 0 && pool.used() < 16 << 20, "{}", pool.used());
}

/// The value of `krec_manifest_reloads_total{result}` in `manager`'s metrics.
fn reloads(manager: &Manager, result: &str) -> u64 {
    manager
        .metrics()
        .reloads
        .get_or_create(&krec::process::metrics::ReloadLabels {
            result: result.into(),
        })
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_manifest_should_be_retried_on_change_not_in_a_loop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cluster, _client, api) = local_cluster().await;
    let healthy = misbehave(dir.path(), "healthy", None);
    let manager = Manager::start_with(api, vec![healthy], ManagerOptions::default())
        .await
        .expect("manager");
    let broken = dir.path().join("broken.yaml");
    let text = |memory: &str| {
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: broken}}\nspec:\n  module: {}\n  limits: {{memory: {memory}}}\n  tickers: [{{every: 1h, request: {{name: ok}}}}]\n",
            built_module("misbehave.wasm").display()
        )
    };
    std::fs::write(&broken, text("1Ki")).expect("write");
    let watcher = manager.watch(dir.path().to_owned());
    // Left alone, an invalid file is not reloaded again and again (each reload reads the files,
    // which the watcher saw as a change: every 100 ms, two ERROR lines each).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = reloads(&manager, "refused") + reloads(&manager, "unchanged");
    assert_eq!(idle, 0, "reloads with no file changed");
    // Changed but still invalid: refused once, then retried with backoff (1 s, 2 s, …).
    std::fs::write(&broken, text("2Ki")).expect("write");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let refused = reloads(&manager, "refused");
    assert!(
        (1..=3).contains(&refused),
        "{refused} refused reloads in 2.5 s after one change"
    );
    // Fixed: started at once.
    std::fs::write(&broken, text("32Mi")).expect("write");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while manager.controller("broken").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the fixed manifest was not loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.stop().await;
    manager.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_write_answered_with_many_warnings_should_be_reported_as_the_success_it_was() {
    let (_cluster, _client, api) = local_cluster().await;
    // Field validation warns once per unknown field: 2 000 of them, each a Warning header
    // (truncated by the server as kube-apiserver truncates them: still over a hundred).
    let mut object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "warned", "namespace": "default"}});
    for i in 0..2000 {
        object[format!("unknownField{i}")] = serde_json::json!(i);
    }
    let created = api.create(&object, "attacker").await;
    assert!(created.is_ok(), "the write was made: {created:?}");
    let cm = krec_core::Gvk::new("", "v1", "ConfigMap");
    assert!(api.get(&cm, Some("default"), "warned").await.is_ok());
}

#[test]
fn map_results_no_object_could_have_should_be_refused() {
    use krec::controller::Request;
    for (namespace, name) in [
        (None, ".."),
        (None, ""),
        (
            Some("default"),
            "ok\n2026-01-01T00:00:00Z ERROR krec: forged",
        ),
        (Some("no/slash"), "x"),
        (None, &*"n".repeat(100_000)),
    ] {
        assert!(
            Request::checked(namespace, name).is_err(),
            "{namespace:?}/{name:.20}"
        );
    }
    assert!(Request::checked(Some("default"), "web-0").is_ok());
}

/// A registry that answers every request a byte at a time, and never finishes (slowloris).
async fn slowloris_registry() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    .iter()
                    .cycle()
                {
                    if socket.write_all(&[*byte]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_blocking_inits_and_slow_pulls_should_not_hold_another_tenants_guest() {
    let modules = tempfile::tempdir().expect("modules");
    for file in ["stamper_a.wasm", "misbehave.wasm"] {
        std::fs::copy(built_module(file), modules.path().join(file)).expect("copy");
    }
    let slow = slowloris_registry().await;
    let store = tempfile::tempdir().expect("store");
    let registries = Arc::new(krec::guests::oci::Registries::new(
        store.path().to_owned(),
        vec![slow.to_string()],
    ));
    let namespace = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let live = krec_tests::Live::start_from_with(
        Vec::new(),
        vec![
            namespace("team-a"),
            namespace("team-b"),
            krec_tests::configmap(0),
        ],
        krec::guests::from_cluster::FromCluster {
            module_dir: modules.path().to_owned(),
            ..Default::default()
        },
        registries,
    )
    .await;
    let watcher = live.manager.watch_sources(None);
    let team_a = |name: String, module: String, config: serde_json::Value| {
        serde_json::json!({"apiVersion": "krec.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"module": module, "config": config,
                "limits": {"timeout": "60s"},
                "tickers": [{"every": "1h", "request": {"name": "ok"}}]}})
    };
    // Team a: six guests whose `init` blocks for their whole 60 s, five pulls from a registry
    // that answers a byte at a time.
    for i in 0..6 {
        let object = team_a(
            format!("sleeper-{i}"),
            "misbehave.wasm".into(),
            serde_json::json!({"init": "sleep"}),
        );
        live.api.create(&object, "test").await.expect("sleeper");
    }
    for i in 0..5 {
        let object = team_a(
            format!("slow-{i}"),
            format!("oci://{slow}/team-a/slow-{i}:v1"),
            serde_json::json!({}),
        );
        live.api.create(&object, "test").await.expect("slow pull");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Team b's healthy guest, a file module: running within seconds all the same.
    let bob = serde_json::json!({"apiVersion": "krec.dev/v1alpha1", "kind": "Reconciler",
        "metadata": {"name": "stamper", "namespace": "team-b"},
        "spec": {"module": "stamper_a.wasm", "for": {"apiVersion": "v1", "kind": "ConfigMap"},
            "permissions": [{"apiVersion": "v1", "kind": "ConfigMap",
                "verbs": ["get", "list", "watch", "patch"]}]}});
    let created = std::time::Instant::now();
    live.api.create(&bob, "test").await.expect("bob's guest");
    // Held behind team a's inits, it would start after their 60 s at the earliest; 45 s leaves
    // a loaded machine (compiling other tests' guests) room without letting a hold pass.
    while live.manager.controller("team-b.stamper").is_none() {
        assert!(
            created.elapsed() < Duration::from_secs(45),
            "team b's guest waited on team a's inits and pulls"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    watcher.stop().await;
}
