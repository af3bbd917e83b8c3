//! Misbehaving guests in the live host: each failure ends only its reconcile, is counted by
//! cause and retried with backoff, while a well-behaved guest in the same host keeps working.

use std::time::Instant;

use krec::manifest::Manifest;
use krec_tests::{Live, built_module, rs_gvk, sample_manifest};
use serde_json::{Value, json};

/// The misbehave guest, driven by one ticker per misbehaviour.
fn misbehave(dir: &std::path::Path) -> Manifest {
    let tickers: String = [
        "loop",
        "oom",
        "panic",
        "recurse",
        "forbidden",
        "bad-json",
        "sleep",
        "print",
    ]
    .iter()
    .map(|name| format!("    - {{every: 100ms, request: {{name: {name}}}}}\n"))
    .collect();
    let path = dir.join("misbehave.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: misbehave}}\nspec:\n  module: {}\n  maxConcurrentReconciles: 4\n  limits: {{timeout: 300ms, memory: 16Mi}}\n  tickers:\n{tickers}",
            built_module("misbehave.wasm").display()
        ),
    )
    .expect("write");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn replicaset() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

/// Create 10 pods one at a time, waiting each time for pod-counter's label; the waits.
async fn follow_pods(live: &Live) -> Vec<std::time::Duration> {
    let rs = live
        .get(&rs_gvk(), Some("default"), "web")
        .await
        .expect("rs");
    let uid = rs["metadata"]["uid"].clone();
    let mut waits = Vec::new();
    for i in 1..=10 {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{i}"), "namespace": "default", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                    "uid": uid, "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let started = Instant::now();
        live.api.create(&pod, "test").await.expect("pod");
        let expected = i.to_string();
        live.eventually(&format!("pod-count {i}"), || async {
            let rs = live.get(&rs_gvk(), Some("default"), "web").await?;
            (rs.pointer("/metadata/labels/pod-count")?.as_str()? == expected).then_some(())
        })
        .await;
        waits.push(started.elapsed());
    }
    waits.sort();
    waits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_guests_should_be_contained_while_a_good_guest_keeps_reconciling() {
    // Baseline: the good guest alone.
    let alone = Live::start(vec![sample_manifest("pod-counter")], vec![replicaset()]).await;
    let baseline = follow_pods(&alone).await;
    drop(alone);

    let dir = tempfile::tempdir().expect("tempdir");
    let live = Live::start(
        vec![misbehave(dir.path()), sample_manifest("pod-counter")],
        vec![replicaset()],
    )
    .await;
    let bad = live.controller("misbehave");
    // The good guest follows 10 pod creations, one at a time, while the bad one traps.
    let waits = follow_pods(&live).await;

    // Every misbehaviour was caught and counted by cause.
    let causes = live
        .eventually("every kind of trap", || async {
            let causes = bad.stats().traps_by_cause();
            ["timeout", "out_of_memory", "panic", "stack_overflow"]
                .iter()
                .all(|c| causes.get(c).is_some_and(|n| *n > 0))
                .then_some(causes)
        })
        .await;
    // Forbidden calls, invalid JSON and oversized objects are errors the guest sees, not traps.
    assert!(bad.stats().errors() > 0);
    // Retried with backoff: the failing keys' requeue counts grow.
    let looping = krec::controller::Request::new(None, "loop");
    assert!(bad.queue().num_requeues(&looping) > 0);
    println!(
        "pod-counter, create -> label: alone median {:?} max {:?}; beside a misbehaving guest \
         median {:?} max {:?}; traps {causes:?}",
        baseline[baseline.len() / 2],
        baseline[baseline.len() - 1],
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    // The good guest never failed for its neighbour's sake.
    let good = live.controller("pod-counter");
    assert_eq!(good.stats().traps(), 0);
}
