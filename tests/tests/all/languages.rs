//! Guests written in Python and TypeScript beside the Rust ones, in one host: the same
//! behaviour from the same manifest semantics.

use std::collections::BTreeMap;

use krec::manifest::Manifest;
use krec_tests::{Live, rs_gvk, sample_manifest};
use serde_json::{Value, json};

/// `manifest` confined to `namespace` (so two implementations of one reconciler can run side by
/// side, each on its own copy of the same objects).
fn in_namespace(mut manifest: Manifest, namespace: &str) -> Manifest {
    manifest.spec.namespaces = vec![namespace.to_owned()];
    manifest
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// The same ReplicaSets in `namespace`: by matchLabels with 0, 1 and 3 replicas, and one
/// selecting by matchExpressions.
fn replica_sets(namespace: &str) -> Vec<Value> {
    let rs = |name: &str, replicas: u32, selector: Value, labels: Value| {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": selector,
                "template": {"metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    };
    vec![
        rs("none", 0, json!({"matchLabels": {"app": "none"}}), json!({"app": "none"})),
        rs("one", 1, json!({"matchLabels": {"app": "one"}}), json!({"app": "one"})),
        rs("three", 3, json!({"matchLabels": {"app": "three"}}), json!({"app": "three"})),
        rs(
            "expr",
            2,
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]}),
            json!({"tier": "fe"}),
        ),
    ]
}

/// Each ReplicaSet's `pod-count` label in `namespace`, by name.
async fn counts(live: &Live, namespace: &str) -> BTreeMap<String, Option<String>> {
    let mut counts = BTreeMap::new();
    for name in ["none", "one", "three", "expr"] {
        let rs = live.get(&rs_gvk(), Some(namespace), name).await;
        let count = rs
            .as_ref()
            .and_then(|rs| rs.pointer("/metadata/labels/pod-count"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        counts.insert(name.to_owned(), count);
    }
    counts
}

fn expected(pairs: &[(&str, &str)]) -> BTreeMap<String, Option<String>> {
    pairs
        .iter()
        .map(|(name, count)| ((*name).to_owned(), Some((*count).to_owned())))
        .collect()
}

#[tokio::test]
async fn python_and_rust_pod_counters_should_label_the_same_replica_sets_alike() {
    let mut objects = vec![namespace("rust"), namespace("python")];
    objects.extend(replica_sets("rust"));
    objects.extend(replica_sets("python"));
    let live = Live::start_alive(
        vec![
            in_namespace(sample_manifest("pod-counter"), "rust"),
            in_namespace(sample_manifest("pod-counter-py"), "python"),
        ],
        objects,
    )
    .await;

    let want = expected(&[("none", "0"), ("one", "1"), ("three", "3"), ("expr", "2")]);
    for ns in ["rust", "python"] {
        live.eventually(&format!("the pod counts in {ns}"), || async {
            (counts(&live, ns).await == want).then_some(())
        })
        .await;
    }

    // Scaled the same way, both follow.
    for ns in ["rust", "python"] {
        live.api
            .patch(
                &rs_gvk(),
                Some(ns),
                "three",
                krec::vocab::PatchType::Merge,
                &json!({"spec": {"replicas": 1}}),
                false,
                "test",
            )
            .await
            .expect("scale down");
    }
    let want = expected(&[("none", "0"), ("one", "1"), ("three", "1"), ("expr", "2")]);
    for ns in ["rust", "python"] {
        live.eventually(&format!("the pod counts in {ns} after scaling"), || async {
            (counts(&live, ns).await == want).then_some(())
        })
        .await;
    }
    assert_eq!(counts(&live, "rust").await, counts(&live, "python").await);
}
