//! The host against a misbehaving cluster (the embedded API server's fault injection): guest
//! writes refused with 409 and 503, watches cut and expired. Every sample must still converge,
//! no update may be lost, and the host's metrics must show the retries.

use std::time::Duration;

use krec_apiserver::faults::{Fault, Rule};
use krec_core::PatchType;
use krec_tests::{Live, cm_gvk, foo_gvk, rs_gvk, sample_manifest, sample_objects};
use serde_json::{Value, json};

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"}})
}

fn metric(text: &str, name: &str, guest: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(&format!("\"{guest}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Whether configmap-watcher's summary counts exactly the ConfigMaps in `default` (at least the
/// test's 20): no update it should have seen was lost.
async fn summary_counts_every_configmap(live: &Live) -> Option<()> {
    let summary = live
        .get(&cm_gvk(), Some("default"), "configmap-summary")
        .await?;
    let listed = live.api.list(&cm_gvk(), &Default::default()).await.ok()?;
    let in_default = listed
        .iter()
        .filter(|c| {
            c["metadata"]["namespace"] == "default" && c["metadata"]["name"] != "configmap-summary"
        })
        .count();
    (summary["data"]["default"] == json!(in_default.to_string()) && in_default >= 20).then_some(())
}

/// The field managers of the samples' guests (not `krec-dev`, which applies the examples).
const GUEST_MANAGERS: [&str; 3] = [
    "krec-foo-controller",
    "krec-pod-counter",
    "krec-configmap-watcher",
];

/// Every sample's guest beside the cluster's controllers, its writes refused 30 % of the time
/// with a conflict and another 10 % with 503.
async fn start_with_refused_writes() -> Live {
    let mut objects = sample_objects("foo-controller");
    objects.extend(sample_objects("pod-counter"));
    let faults = std::sync::Arc::new(krec_apiserver::faults::Faults::with_seed(5));
    // Deletes carry no field manager: the rules below reach creates, updates and patches.
    let writes = ["create", "update", "patch"];
    faults.add(
        Rule::new(Fault::Conflict)
            .verbs(&writes)
            .field_managers(&GUEST_MANAGERS)
            .probability(0.3),
    );
    // Of the 70 % that pass the first rule, 1/7 is 10 % of all.
    faults.add(
        Rule::new(Fault::Error { status: 503 })
            .verbs(&writes)
            .field_managers(&GUEST_MANAGERS)
            .probability(1.0 / 7.0),
    );
    Live::start_alive_with_faults(
        vec![
            sample_manifest("foo-controller"),
            sample_manifest("pod-counter"),
            sample_manifest("configmap-watcher"),
        ],
        objects,
        faults,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_should_converge_when_writes_are_refused() {
    let live = start_with_refused_writes().await;
    for i in 0..20 {
        live.api
            .create(&configmap(&format!("cm-{i}")), "test")
            .await
            .expect("create configmap");
    }
    for replicas in [3, 2] {
        live.api
            .patch(
                &foo_gvk(),
                Some("default"),
                "example-foo",
                PatchType::Merge,
                &json!({"spec": {"replicas": replicas}}),
                false,
                "test",
            )
            .await
            .expect("scale foo");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    live.api
        .patch(
            &rs_gvk(),
            Some("default"),
            "web",
            PatchType::Merge,
            &json!({"spec": {"replicas": 5}}),
            false,
            "test",
        )
        .await
        .expect("scale rs");

    // No update lost: every count is the cluster's.
    live.eventually("configmap-watcher counts every ConfigMap", || {
        summary_counts_every_configmap(&live)
    })
    .await;
    live.eventually("foo-controller reports 2 available", || async {
        let foo = live.get(&foo_gvk(), Some("default"), "example-foo").await?;
        (foo.pointer("/status/availableReplicas") == Some(&json!(2))).then_some(())
    })
    .await;
    live.eventually("pod-counter labels 5 pods", || async {
        let rs = live.get(&rs_gvk(), Some("default"), "web").await?;
        (rs.pointer("/metadata/labels/pod-count") == Some(&json!("5"))).then_some(())
    })
    .await;

    let faults = live.cluster.faults();
    assert!(
        faults.fired(0) > 0 && faults.fired(1) > 0,
        "conflicts {} and 503s {}",
        faults.fired(0),
        faults.fired(1)
    );
    let text = live.manager.metrics().encode();
    let retries: f64 = ["foo-controller", "pod-counter", "configmap-watcher"]
        .iter()
        .map(|g| metric(&text, "workqueue_retries_total", g))
        .sum();
    let errors: f64 = ["foo-controller", "pod-counter", "configmap-watcher"]
        .iter()
        .map(|g| metric(&text, "controller_runtime_reconcile_errors_total", g))
        .sum();
    assert!(
        retries > 0.0 && errors > 0.0,
        "retries {retries}, errors {errors}\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_should_miss_nothing_when_watches_are_cut() {
    let mut objects = sample_objects("pod-counter");
    objects.extend(sample_objects("foo-controller"));
    // From the start, some watches expire at once (the informer must relist), the rest end
    // after a second (it must watch again from where it was).
    let faults = std::sync::Arc::new(krec_apiserver::faults::Faults::with_seed(11));
    let expired = faults.add(
        Rule::new(Fault::ExpireWatch)
            .verbs(&["watch"])
            .probability(0.3),
    );
    let ended = faults.add(Rule::new(Fault::EndWatch(Duration::from_secs(1))).verbs(&["watch"]));
    let live = Live::start_alive_with_faults(
        vec![
            sample_manifest("pod-counter"),
            sample_manifest("configmap-watcher"),
        ],
        objects,
        faults.clone(),
    )
    .await;
    for (round, replicas) in [6, 2, 4, 3].into_iter().enumerate() {
        live.api
            .patch(
                &rs_gvk(),
                Some("default"),
                "web",
                PatchType::Merge,
                &json!({"spec": {"replicas": replicas}}),
                false,
                "test",
            )
            .await
            .expect("scale rs");
        for i in 0..5 {
            live.api
                .create(&configmap(&format!("cut-{round}-{i}")), "test")
                .await
                .expect("create configmap");
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    live.eventually("pod-counter sees the final 3 pods", || async {
        let rs = live.get(&rs_gvk(), Some("default"), "web").await?;
        (rs.pointer("/metadata/labels/pod-count") == Some(&json!("3"))).then_some(())
    })
    .await;
    live.eventually("configmap-watcher counts all 20 (+ the samples')", || {
        summary_counts_every_configmap(&live)
    })
    .await;
    assert!(
        faults.fired(expired) > 0,
        "no watch expired ({} ended, {} in all)",
        faults.fired(ended),
        faults.total()
    );
    assert!(
        faults.fired(ended) > 2,
        "watches were cut {} times",
        faults.fired(ended)
    );
}

/// A `slow-watch` fault holds every event of the watches it fires on back by its delay — what
/// a controller's cache looks like just after its own write — while reads answer at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watch_should_deliver_its_events_late_and_in_order() {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;

    const LAG: Duration = Duration::from_millis(800);
    let faults = std::sync::Arc::new(krec_apiserver::faults::Faults::with_seed(1));
    faults.add(
        Rule::new(Fault::SlowWatch(LAG))
            .verbs(&["watch"])
            .resources(&["configmaps"]),
    );
    let server = krec_apiserver::Server::builder()
        .controllers(krec_apiserver::controllers::Selection::none())
        .faults(faults)
        .start()
        .await
        .expect("server");
    let client = krec::cluster::connect::client_from_kubeconfig(server.kubeconfig())
        .await
        .expect("client");
    let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    // The initial (empty) list is no watch event: wait for it to be done.
    while let Some(event) = events.next().await {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    let mut created = Vec::new();
    for name in ["slow-a", "slow-b"] {
        let cm: ConfigMap = serde_json::from_value(configmap(name)).expect("configmap");
        api.create(&Default::default(), &cm).await.expect("create");
        created.push((name, std::time::Instant::now()));
        // Read back at once: reads are not held back.
        api.get(name).await.expect("read at once");
    }
    for (name, at) in created {
        let event = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match events.next().await {
                    Some(Ok(watcher::Event::Apply(cm))) => return cm,
                    Some(_) => continue,
                    None => panic!("the watch ended"),
                }
            }
        })
        .await
        .expect("the event arrives");
        assert_eq!(event.metadata.name.as_deref(), Some(name), "in order");
        assert!(
            at.elapsed() >= LAG - Duration::from_millis(50),
            "{name} arrived {:?} after its create, before the lag",
            at.elapsed()
        );
    }
    server.shutdown().await;
}
