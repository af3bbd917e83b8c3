//! Live hot-swap: a guest's module replaced under steady load loses no key, never runs one key
//! on two versions at once, and a module that cannot run is refused while the old one goes on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use krec::guest::ModuleCache;
use krec::manifest::Manifest;
use krec_core::PatchType;
use krec_tests::{Live, annotation, built_module, cm_gvk, configmap};
use serde_json::json;

const OBJECTS: usize = 100;
const SWAPS: u64 = 20;

/// A manifest for the stamper guest in `dir`, its module at `dir/stamper.wasm`.
fn write_manifest(dir: &Path, extra: &str) -> Manifest {
    let path = dir.join("stamper.yaml");
    std::fs::write(
        &path,
        [
            "apiVersion: krec.dev/v1alpha1",
            "kind: Reconciler",
            "metadata: {name: stamper}",
            "spec:",
            "  module: stamper.wasm",
            "  for: {apiVersion: v1, kind: ConfigMap}",
            "  maxConcurrentReconciles: 4",
            "  permissions:",
            "    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, patch]}",
            extra,
        ]
        .join("\n"),
    )
    .expect("write manifest");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Replace `dir/stamper.wasm` the way a deploy does: write beside it, rename over it.
fn install(dir: &Path, module: &Path) {
    let tmp = dir.join("stamper.wasm.new");
    std::fs::copy(module, &tmp).expect("copy module");
    std::fs::rename(&tmp, dir.join("stamper.wasm")).expect("rename module");
}

/// Change the stamper's manifest in `dir` to reconcile Secrets rather than ConfigMaps.
fn reconcile_secrets(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("stamper.yaml")).expect("read");
    std::fs::write(
        dir.join("stamper.yaml"),
        text.replace("kind: ConfigMap}", "kind: Secret}"),
    )
    .expect("write");
}

/// Wait until the host took up [`reconcile_secrets`]: the stamper uses a Secret informer.
async fn secrets_reconciled(live: &Live) {
    live.eventually("the changed manifest taken up", || async {
        let informers = live.manager.cache().inspect();
        informers
            .iter()
            .any(|i| i.gvk.kind == "Secret" && i.users == ["stamper"])
            .then_some(())
    })
    .await;
}

fn versions() -> [PathBuf; 2] {
    [
        built_module("stamper_a.wasm"),
        built_module("stamper_b.wasm"),
    ]
}

/// Whether every ConfigMap carries `version`'s stamp of its current value.
async fn all_stamped(live: &Live, version: &str) -> bool {
    live.all_stamped(version, OBJECTS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_module_under_load_should_lose_no_key_and_never_overlap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let [a, b] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let objects = (0..OBJECTS).map(configmap).collect();
    let module_cache = ModuleCache::new(cache_dir.path()).expect("cache");
    let live = Live::start_with(vec![manifest], objects, module_cache).await;
    let watcher = live.manager.watch(dir.path().to_owned());
    live.eventually("version a stamped everything", || async {
        all_stamped(&live, "a").await.then_some(())
    })
    .await;

    // Steady load: a stream of updates to the 100 objects, until the swaps are done.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let api = live.api.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let patch = json!({"data": {"value": n.to_string()}});
                api.patch(
                    &cm_gvk(),
                    Some("default"),
                    &format!("cm-{}", n % OBJECTS),
                    PatchType::Merge,
                    &patch,
                    false,
                    "load",
                )
                .await
                .expect("update under load");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            n
        })
    };

    let controller = live.controller("stamper");
    let mut latencies = Vec::new();
    for swap in 1..=SWAPS {
        let next = if swap % 2 == 1 { &b } else { &a };
        let changed = Instant::now();
        install(dir.path(), next);
        // The first swap to `b` compiles it (later ones find it in the module cache): on a
        // machine busy with the other tests' large guests that may outlast a reload's wait,
        // and the version is taken up when its load ends — which must never be lost — but it
        // never waits for their compiles (it did, 17–27 s: see `guest::compile_gate`).
        let version = live
            .eventually(&format!("swap {swap} to take effect"), || async {
                let v = controller.version();
                (v.number == swap + 1 && v.first_reconcile().is_some()).then_some(v)
            })
            .await;
        let first = version.first_reconcile().expect("reconciled");
        latencies.push(first.saturating_duration_since(changed));
    }
    stop.store(true, Ordering::Relaxed);
    let updates = load.await.expect("load task");

    // The last swap installed `a` (20 is even): every object ends stamped by it, with its
    // latest value.
    live.eventually("every object reconciled by the newest version", || async {
        all_stamped(&live, "a").await.then_some(())
    })
    .await;
    assert_eq!(controller.stats().overlaps.load(Ordering::Relaxed), 0);
    assert_eq!(controller.stats().traps(), 0);
    latencies.sort();
    println!(
        "{SWAPS} swaps under {updates} updates: file change -> first reconcile on the new version: \
         median {:?}, max {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_that_cannot_run_should_be_refused_and_the_old_version_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [a, _] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let live = Live::start(vec![manifest], vec![configmap(0)]).await;
    let controller = live.controller("stamper");
    let before = controller.version();

    let cases: [(&str, &[u8], &str); 3] = [
        (
            "truncated",
            &std::fs::read(&a).expect("module")[..1000],
            "invalid component",
        ),
        (
            "a core module",
            b"\0asm\x01\0\0\0",
            "core WebAssembly module",
        ),
        ("not wasm", b"hello", "not a WebAssembly component"),
    ];
    for (what, bytes, expected) in cases {
        std::fs::write(dir.path().join("stamper.wasm"), bytes).expect("write");
        let report = live.manager.reload(dir.path()).await.expect("reload");
        assert!(report.swapped.is_empty(), "{what}: {report:?}");
        assert_eq!(report.rejected.len(), 1, "{what}: {report:?}");
        let reason = &report.rejected[0].reason;
        assert!(
            reason.contains(expected) && reason.contains("stamper.wasm"),
            "{what}: {reason}"
        );
        assert!(
            Arc::ptr_eq(&controller.version(), &before),
            "{what}: old version kept"
        );
    }
    // The old version still reconciles.
    live.api
        .patch(
            &cm_gvk(),
            Some("default"),
            "cm-0",
            PatchType::Merge,
            &json!({"data": {"value": "7"}}),
            false,
            "test",
        )
        .await
        .expect("patch");
    live.eventually("the old version to keep reconciling", || async {
        let cm = live.get(&cm_gvk(), Some("default"), "cm-0").await?;
        (annotation(&cm, "krec.dev/stamped-value") == Some("7")).then_some(())
    })
    .await;

    // An invalid manifest keeps the running version too.
    std::fs::write(dir.path().join("stamper.yaml"), "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: stamper}\nspec: {module: stamper.wasm, bogus: 1}\n").expect("write");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(report.rejected[0].reason.contains("bogus"), "{report:?}");
    assert!(live.manager.controller("stamper").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_added_changed_and_removed_should_start_rewire_and_stop_guests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [a, _] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let live = Live::start(vec![manifest], vec![configmap(0)]).await;
    let store = live.cluster.store().clone();

    // A new manifest starts its guest without disturbing the other.
    let counter = krec_tests::sample_manifest("pod-counter");
    let text = std::fs::read_to_string(&counter.path).expect("manifest");
    let text = text.replace(
        "../../target/wasm32-wasip2/release/pod_counter.wasm",
        &built_module("pod_counter.wasm").display().to_string(),
    );
    std::fs::write(dir.path().join("pod-counter.yaml"), text).expect("write");
    let stamper = live.controller("stamper");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.started, ["pod-counter"], "{report:?}");
    assert!(Arc::ptr_eq(&live.controller("stamper"), &stamper));
    assert_eq!(stamper.version().number, 1, "the other guest is untouched");
    // Synced after its initial list: the watch request follows it.
    live.eventually("pod-counter's Pod watch", || async {
        (store.watches_started("", "pods") == 1).then_some(())
    })
    .await;

    // A changed `for`: the stamper now reconciles Secrets; its ConfigMap watch is released.
    reconcile_secrets(dir.path());
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.swapped, ["stamper"], "{report:?}");
    let informers = live.manager.cache().inspect();
    assert!(
        informers
            .iter()
            .any(|i| i.gvk.kind == "Secret" && i.users == ["stamper"]),
        "{informers:?}"
    );
    // The ConfigMap watch is no longer the guest's subscription; it stays only as the cache of
    // what the guest read (the cache survives swaps).
    assert!(
        informers
            .iter()
            .filter(|i| i.gvk.kind == "ConfigMap")
            .all(|i| i.subscribers == 0 && i.users == ["stamper"]),
        "{informers:?}"
    );

    // A removed manifest stops its guest and the watches nobody else needs.
    std::fs::remove_file(dir.path().join("pod-counter.yaml")).expect("remove");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.removed, ["pod-counter"], "{report:?}");
    assert!(live.manager.controller("pod-counter").is_none());
    let informers = live.manager.cache().inspect();
    assert!(
        !informers
            .iter()
            .any(|i| i.gvk.kind == "Pod" || i.gvk.kind == "ReplicaSet"),
        "{informers:?}"
    );
    assert!(
        informers.iter().any(|i| i.gvk.kind == "Secret"),
        "{informers:?}"
    );

    // The last guest gone: every watch is released, its read-through ones too.
    std::fs::remove_file(dir.path().join("stamper.yaml")).expect("remove");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.removed, ["stamper"], "{report:?}");
    let informers = live.manager.cache().inspect();
    assert!(informers.is_empty(), "{informers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_deleted_then_rebuilt_should_swap_without_a_refusal() {
    // What `cargo build` does to its output: delete it, then write the new one.
    let dir = tempfile::tempdir().expect("tempdir");
    let [a, b] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let live = Live::start(vec![manifest], vec![configmap(0)]).await;
    let watcher = live.manager.watch(dir.path().to_owned());
    let controller = live.controller("stamper");
    std::fs::remove_file(dir.path().join("stamper.wasm")).expect("delete");
    // A reload while it is missing (the file event's, or anyone's): nothing refused.
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert!(report.is_empty(), "{report:?}");
    assert!(
        live.manager.skipped().is_empty(),
        "{:?}",
        live.manager.skipped()
    );
    tokio::time::sleep(krec::guests::RELOAD_DEBOUNCE * 3).await;
    assert_eq!(controller.version().number, 1);
    // Written: swapped in by its own event.
    std::fs::copy(&b, dir.path().join("stamper.wasm")).expect("write");
    live.eventually("version b swapped in", || async {
        (controller.version().number == 2).then_some(())
    })
    .await;
    let scraped = live.manager.scrape();
    assert!(
        !scraped.contains("krec_reloads_total{result=\"refused\"}"),
        "{scraped}"
    );
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_replaced_before_the_watch_starts_should_still_be_swapped_in() {
    // `krec run` loads the guests, then starts watching: a build that lands in between (or a
    // watch task slow to be scheduled on a busy machine) must not be missed.
    let dir = tempfile::tempdir().expect("tempdir");
    let [a, b] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let live = Live::start(vec![manifest], vec![configmap(0)]).await;
    let controller = live.controller("stamper");
    install(dir.path(), &b);
    let watcher = live.manager.watch(dir.path().to_owned());
    live.eventually("version b swapped in", || async {
        (controller.version().number == 2).then_some(())
    })
    .await;
    // And a manifest changed between a reload and the next watch's start, likewise.
    watcher.stop().await;
    reconcile_secrets(dir.path());
    let watcher = live.manager.watch(dir.path().to_owned());
    secrets_reconciled(&live).await;
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_looking_at_its_files_without_events_should_still_swap_modules_in() {
    // `--poll-files`, or a host whose file watcher cannot start (its user's inotify instances
    // used up by other programs): no event ever comes, the files are looked at instead.
    let dir = tempfile::tempdir().expect("tempdir");
    let [a, b] = versions();
    install(dir.path(), &a);
    let manifest = write_manifest(dir.path(), "");
    let options = krec::guests::ManagerOptions {
        module_cache: krec_tests::module_cache(),
        poll_files: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let live = Live::start_with_manager_options(vec![manifest], vec![configmap(0)], options).await;
    let controller = live.controller("stamper");
    let watcher = live.manager.watch(dir.path().to_owned());
    // The first swap may be taken up as the watch starts; the second comes while it waits, and
    // only a look at the files can find it.
    for (swap, module) in [(2, &b), (3, &a)] {
        install(dir.path(), module);
        live.eventually(&format!("version {swap} swapped in"), || async {
            (controller.version().number == swap).then_some(())
        })
        .await;
    }
    // A manifest changed likewise.
    reconcile_secrets(dir.path());
    secrets_reconciled(&live).await;
    watcher.stop().await;
}
