//! Per-guest accounting: a guest's CPU (in its code and in host work done for it), host calls
//! and bytes move when, and only when, that guest works — in its ledger and in `/metrics`.

use std::path::Path;

use krec::guest::Totals;
use krec::manifest::Manifest;
use krec_tests::{Live, built_module, cm_gvk};
use serde_json::{Value, json};

const BUSY_OBJECTS: usize = 20;

/// A stamper guest named `name` for the ConfigMaps of namespace `name`.
fn manifest(dir: &Path, name: &str) -> Manifest {
    std::fs::copy(
        built_module("stamper_a.wasm"),
        dir.join(format!("{name}.wasm")),
    )
    .expect("copy module");
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        [
            "apiVersion: krec.dev/v1alpha1".to_owned(),
            "kind: Reconciler".to_owned(),
            format!("metadata: {{name: {name}}}"),
            "spec:".to_owned(),
            format!("  module: {name}.wasm"),
            "  for: {apiVersion: v1, kind: ConfigMap}".to_owned(),
            format!("  namespaces: [{name}]"),
            "  permissions:".to_owned(),
            "    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, patch]}".to_owned(),
        ]
        .join("\n"),
    )
    .expect("write manifest");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn objects() -> Vec<Value> {
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let configmap = |ns: &str, i: usize| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": ns}, "data": {"value": "0"}})
    };
    let mut objects = vec![namespace("busy"), namespace("idle"), configmap("idle", 0)];
    objects.extend((0..BUSY_OBJECTS).map(|i| configmap("busy", i)));
    objects
}

/// Whether ConfigMap `cm-<i>` in `namespace` carries a stamp.
async fn stamped(live: &Live, namespace: &str, i: usize) -> bool {
    live.get(&cm_gvk(), Some(namespace), &format!("cm-{i}"))
        .await
        .is_some_and(|cm| cm["metadata"]["annotations"].is_object())
}

fn totals(live: &Live, guest: &str) -> Totals {
    live.controller(guest).module().budgets().totals()
}

/// The value of the series `name{labels…}` in `exposition` (0 when absent).
fn series(exposition: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The ledger's series of `guest` in `exposition`: CPU in Wasm and in host work, bytes each
/// way, instances started.
fn ledger_series(exposition: &str, guest: &str) -> [f64; 5] {
    let cpu = "krec_guest_used_cpu_seconds_total";
    let bytes = "krec_guest_bytes_total";
    [
        series(exposition, cpu, &[("guest", guest), ("part", "wasm")]),
        series(exposition, cpu, &[("guest", guest), ("part", "host")]),
        series(
            exposition,
            bytes,
            &[("guest", guest), ("direction", "to_guest")],
        ),
        series(
            exposition,
            bytes,
            &[("guest", guest), ("direction", "from_guest")],
        ),
        series(
            exposition,
            "krec_guest_instances_started_total",
            &[("guest", guest)],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_guests_figures_should_rise_while_an_idle_guests_stay_flat() {
    let dir = tempfile::tempdir().expect("tempdir");
    let live = Live::start(
        vec![manifest(dir.path(), "busy"), manifest(dir.path(), "idle")],
        objects(),
    )
    .await;
    // Both stamp what they own; then the idle guest has nothing more to do.
    live.eventually("every ConfigMap stamped", || async {
        let mut all = stamped(&live, "idle", 0).await;
        for i in 0..BUSY_OBJECTS {
            all &= stamped(&live, "busy", i).await;
        }
        all.then_some(())
    })
    .await;
    // Settled: nothing queued or running, and at least `reconciles` done.
    let settled = |guest: &'static str, reconciles: u64| {
        let controller = live.controller(guest);
        move || {
            let stats = controller.stats();
            let idle = stats.active() == 0 && controller.queue().is_empty();
            std::future::ready((idle && stats.total() >= reconciles).then_some(()))
        }
    };
    // The idle guest's two reconciles: its stamp, then the watch event of its own write.
    live.eventually("the idle guest settled", settled("idle", 2))
        .await;
    let idle_before = totals(&live, "idle");
    let busy_before = totals(&live, "busy");
    let scraped_before = live.manager.scrape();
    assert!(
        idle_before.calls.iter().any(|(kind, _)| *kind == "patch"),
        "the idle guest stamped its ConfigMap: {idle_before:?}"
    );
    // The busy guest works: every one of its ConfigMaps changes, three times.
    for round in 1..=3 {
        for i in 0..BUSY_OBJECTS {
            live.api
                .patch(
                    &cm_gvk(),
                    Some("busy"),
                    &format!("cm-{i}"),
                    krec_core::PatchType::Merge,
                    &json!({"data": {"value": round.to_string()}}),
                    false,
                    "test",
                )
                .await
                .expect("patch");
        }
    }
    live.eventually("the busy guest reconciled the changes", || async {
        let busy = totals(&live, "busy");
        let patches = |t: &Totals| {
            t.calls
                .iter()
                .find(|(k, _)| *k == "patch")
                .map_or(0, |c| c.1)
        };
        (patches(&busy) >= patches(&busy_before) + BUSY_OBJECTS as u64).then_some(())
    })
    .await;
    live.eventually("the busy guest settled", settled("busy", 0))
        .await;
    let busy = totals(&live, "busy");
    let idle = totals(&live, "idle");
    assert!(
        busy.wasm_cpu > busy_before.wasm_cpu,
        "{busy_before:?} → {busy:?}"
    );
    assert!(
        busy.host_cpu > busy_before.host_cpu,
        "{busy_before:?} → {busy:?}"
    );
    assert!(busy.bytes_to_guest > busy_before.bytes_to_guest);
    assert!(busy.bytes_from_guest > busy_before.bytes_from_guest);
    assert_eq!(
        (
            idle.wasm_cpu,
            idle.host_cpu,
            &idle.calls,
            idle.bytes_to_guest,
            idle.bytes_from_guest,
            idle.instances
        ),
        (
            idle_before.wasm_cpu,
            idle_before.host_cpu,
            &idle_before.calls,
            idle_before.bytes_to_guest,
            idle_before.bytes_from_guest,
            idle_before.instances
        ),
        "the idle guest's figures moved"
    );
    assert!(idle.memory_bytes > 0, "its instance is kept: {idle:?}");
    // `/metrics` carries the same: the busy guest's series rose, the idle guest's did not.
    let scraped = live.manager.scrape();
    let (busy_then, busy_now) = (
        ledger_series(&scraped_before, "busy"),
        ledger_series(&scraped, "busy"),
    );
    for i in 0..4 {
        assert!(
            busy_now[i] > busy_then[i],
            "series {i}: {busy_then:?} → {busy_now:?}"
        );
    }
    assert_eq!(
        ledger_series(&scraped, "idle"),
        ledger_series(&scraped_before, "idle")
    );
    assert!(
        ledger_series(&scraped, "idle")[2] > 0.0,
        "the idle guest's reads are exported"
    );
    assert!(
        series(&scraped, "krec_guest_memory_bytes", &[("guest", "idle")]) > 0.0,
        "{scraped}"
    );
}
