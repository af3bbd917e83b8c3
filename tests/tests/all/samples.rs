//! Each sample guest's real `.wasm` in the host, against an in-memory object set: the guests'
//! effects, not just their return values.

use krec::cluster::ClusterCalls;
use krec::guest::{Action, ReconcileError};
use krec_core::{CallError, EventType, PatchType};
use krec_tests::*;
use serde_json::{Value, json};

fn pod(name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
}

fn replica_set(name: &str, app: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": app}},
                 "template": {"metadata": {"labels": {"app": app}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
}

fn label(object: &Value, key: &str) -> Option<String> {
    object
        .pointer(&format!("/metadata/labels/{key}"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[tokio::test]
async fn pod_counter_should_track_the_number_of_selected_pods() {
    let mut h = Harness::sample("pod-counter");
    h.create(replica_set("web", "web")).await;
    h.create(pod("web-a", "web")).await;
    h.create(pod("web-b", "web")).await;
    h.create(pod("db-a", "db")).await;

    assert_eq!(h.reconcile(Some("default"), "web").await, Ok(Action::Done));
    let rs = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(
        label(&rs, "pod-count").as_deref(),
        Some("2"),
        "only pods matching the selector"
    );

    h.create(pod("web-c", "web")).await;
    h.reconcile(Some("default"), "web")
        .await
        .expect("reconcile");
    let rs = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(label(&rs, "pod-count").as_deref(), Some("3"));

    for name in ["web-a", "web-b"] {
        h.cluster
            .delete(&pod_gvk(), Some("default"), name, None)
            .await
            .expect("delete pod");
    }
    h.reconcile(Some("default"), "web")
        .await
        .expect("reconcile");
    let rs = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(label(&rs, "pod-count").as_deref(), Some("1"));

    // Nothing changed: no write, so the resourceVersion stays put.
    let rv = rs["metadata"]["resourceVersion"].clone();
    h.reconcile(Some("default"), "web")
        .await
        .expect("reconcile");
    let rs = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(
        rs["metadata"]["resourceVersion"], rv,
        "an unchanged count is not written"
    );
}

#[tokio::test]
async fn pod_counter_should_treat_a_deleted_replica_set_as_done() {
    let mut h = Harness::sample("pod-counter");
    assert_eq!(h.reconcile(Some("default"), "gone").await, Ok(Action::Done));
}

#[tokio::test]
async fn a_worker_should_reuse_its_instance_across_reconciles() {
    let mut h = Harness::sample("pod-counter");
    assert!(!h.worker.has_instance());
    h.reconcile(Some("default"), "gone")
        .await
        .expect("reconcile");
    assert!(
        h.worker.has_instance(),
        "instance kept for the next reconcile"
    );
}

#[tokio::test]
async fn per_reconcile_isolation_should_not_keep_an_instance() {
    let mut manifest = sample_manifest("pod-counter");
    manifest.spec.isolation = krec::manifest::Isolation::PerReconcile;
    let mut h = Harness::with_manifest(manifest);
    h.create(replica_set("web", "web")).await;
    h.reconcile(Some("default"), "web")
        .await
        .expect("reconcile");
    assert!(!h.worker.has_instance());
    h.reconcile(Some("default"), "web")
        .await
        .expect("second reconcile on a fresh instance");
    let rs = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(label(&rs, "pod-count").as_deref(), Some("0"));
}

#[tokio::test]
async fn a_call_outside_the_manifest_should_be_forbidden_and_change_nothing() {
    let mut manifest = sample_manifest("pod-counter");
    for p in &mut manifest.spec.permissions {
        p.verbs.retain(|v| *v != krec::manifest::Verb::Update);
    }
    let mut h = Harness::with_manifest(manifest);
    let before = h.create(replica_set("web", "web")).await;
    h.create(pod("web-a", "web")).await;
    let err = h
        .reconcile(Some("default"), "web")
        .await
        .expect_err("update is not permitted");
    match err {
        ReconcileError::Guest {
            error: CallError::Forbidden(msg),
            ..
        } => {
            assert!(msg.contains("may not update apps/v1 ReplicaSet"), "{msg}");
        }
        other => panic!("expected forbidden, got {other:?}"),
    }
    let after = h.get(&rs_gvk(), "default", "web").await.expect("rs");
    assert_eq!(after, before, "object untouched");
}

async fn create_foo(h: &Harness, name: &str, deployment: &str, replicas: i64) -> Value {
    h.create(
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"deploymentName": deployment, "replicas": replicas}}),
    )
    .await
}

#[tokio::test]
async fn foo_controller_should_create_scale_and_report_its_deployment() {
    let mut h = Harness::sample("foo-controller");
    let foo = create_foo(&h, "example-foo", "example-foo", 1).await;

    assert_eq!(
        h.reconcile(Some("default"), "example-foo").await,
        Ok(Action::Done)
    );
    let d = h
        .get(&deployment_gvk(), "default", "example-foo")
        .await
        .expect("deployment created");
    assert_eq!(d["spec"]["replicas"], 1);
    let owner = &d["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Foo");
    assert_eq!(owner["apiVersion"], "samplecontroller.k8s.io/v1alpha1");
    assert_eq!(owner["uid"], foo["metadata"]["uid"]);
    assert_eq!(owner["controller"], true);
    let events = h.cluster.events();
    assert!(events.iter().any(|e| e.reason == "Synced"
        && e.event_type == EventType::Normal
        && e.regarding.name == "example-foo"
        && e.reporter == "foo-controller"));

    // The Foo is scaled: the Deployment follows.
    h.cluster
        .patch(
            &foo_gvk(),
            Some("default"),
            "example-foo",
            PatchType::Merge,
            json!({"spec": {"replicas": 3}}),
            false,
        )
        .await
        .expect("scale foo");
    h.reconcile(Some("default"), "example-foo")
        .await
        .expect("reconcile");
    let d = h
        .get(&deployment_gvk(), "default", "example-foo")
        .await
        .expect("deployment");
    assert_eq!(d["spec"]["replicas"], 3);

    // The Deployment becomes available: the Foo's status follows, through the status subresource.
    h.cluster
        .patch(
            &deployment_gvk(),
            Some("default"),
            "example-foo",
            PatchType::Merge,
            json!({"status": {"availableReplicas": 2}}),
            true,
        )
        .await
        .expect("deployment status");
    h.reconcile(Some("default"), "example-foo")
        .await
        .expect("reconcile");
    let foo = h
        .get(&foo_gvk(), "default", "example-foo")
        .await
        .expect("foo");
    assert_eq!(foo["status"]["availableReplicas"], 2);
    assert_eq!(foo["spec"]["replicas"], 3, "status write leaves spec alone");

    // The Deployment is deleted: it is recreated.
    h.cluster
        .delete(&deployment_gvk(), Some("default"), "example-foo", None)
        .await
        .expect("delete");
    h.reconcile(Some("default"), "example-foo")
        .await
        .expect("reconcile");
    let d = h
        .get(&deployment_gvk(), "default", "example-foo")
        .await
        .expect("deployment recreated");
    assert_eq!(d["spec"]["replicas"], 3);
}

#[tokio::test]
async fn foo_controller_should_refuse_a_deployment_it_does_not_control() {
    let mut h = Harness::sample("foo-controller");
    let taken = h
        .create(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "taken", "namespace": "default"},
        "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))
        .await;
    create_foo(&h, "intruder", "taken", 1).await;

    let err = h
        .reconcile(Some("default"), "intruder")
        .await
        .expect_err("must fail so the host retries");
    match &err {
        ReconcileError::Guest {
            error: CallError::Other(msg),
            ..
        } => {
            assert!(
                msg.contains("already exists and is not managed by Foo"),
                "{msg}"
            )
        }
        other => panic!("expected a guest error, got {other:?}"),
    }
    let events = h.cluster.events();
    assert!(
        events.iter().any(|e| e.reason == "ErrResourceExists"
            && e.event_type == EventType::Warning
            && e.regarding.name == "intruder"),
        "{events:?}"
    );
    let after = h
        .get(&deployment_gvk(), "default", "taken")
        .await
        .expect("deployment");
    assert_eq!(after, taken, "the unowned Deployment is untouched");
}

#[tokio::test]
async fn configmap_watcher_should_keep_per_namespace_counts() {
    let mut h = Harness::sample("configmap-watcher");
    h.namespaces(&["a", "b", "c"]).await;
    for (ns, name) in [
        ("a", "one"),
        ("a", "two"),
        ("b", "three"),
        ("default", "four"),
    ] {
        h.create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}}))
            .await;
    }
    h.reconcile(Some("default"), "configmap-summary")
        .await
        .expect("reconcile");
    let summary = h
        .get(&cm_gvk(), "default", "configmap-summary")
        .await
        .expect("summary created");
    assert_eq!(
        summary["data"],
        json!({"a": "2", "b": "1", "default": "1"}),
        "the summary does not count itself"
    );

    h.cluster
        .delete(&cm_gvk(), Some("a"), "one", None)
        .await
        .expect("delete");
    h.create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "five", "namespace": "c"}})).await;
    h.reconcile(Some("default"), "configmap-summary")
        .await
        .expect("reconcile");
    let summary = h
        .get(&cm_gvk(), "default", "configmap-summary")
        .await
        .expect("summary");
    assert_eq!(
        summary["data"],
        json!({"a": "1", "b": "1", "c": "1", "default": "1"})
    );
}

#[tokio::test]
async fn cleanup_ticker_should_delete_only_expired_configmaps() {
    let mut h = Harness::sample("cleanup-ticker");
    let cases = [
        ("expired", Some("2020-01-01T00:00:00Z")),
        ("expired-offset", Some("2021-06-01T12:00:00+02:00")),
        ("fresh", Some("2999-01-01T00:00:00Z")),
        ("garbled", Some("tomorrow")),
        ("plain", None),
    ];
    for (name, expires) in cases {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}});
        if let Some(at) = expires {
            cm["metadata"]["annotations"] = json!({"krec.dev/expires-at": at});
        }
        h.create(cm).await;
    }
    assert_eq!(
        h.reconcile(None, "expired-configmaps").await,
        Ok(Action::Done)
    );
    let left: Vec<String> = h
        .cluster
        .objects(&cm_gvk())
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        left,
        ["fresh", "garbled", "plain"],
        "expired ones deleted, the rest kept"
    );
}
