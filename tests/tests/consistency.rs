//! Read-your-own-writes: a guest's next reconcile sees what its last one wrote, even when the
//! watch has not delivered it yet.

use std::time::Duration;

use krec::controller::Request;
use krec_apiserver::faults::{Fault, Faults, Rule};
use krec_tests::{Live, deployment_gvk, sample_manifest, sample_objects};
use serde_json::json;

/// How late every Deployment event reaches the host.
const WATCH_LAG: Duration = Duration::from_secs(2);

/// The sample-controller's guest creates a Foo's Deployment; its next reconcile is triggered at
/// once, while the Deployment's watch event is held back for 2 s. Returns how many creates of
/// the Deployment the guest sent.
async fn creates_after_an_immediate_second_reconcile(read_your_writes: bool) -> u64 {
    let faults = std::sync::Arc::new(Faults::with_seed(3));
    faults.add(
        Rule::new(Fault::SlowWatch(WATCH_LAG))
            .verbs(&["watch"])
            .resources(&["deployments"]),
    );
    // A rule that changes nothing, counting the guest's creates of Deployments.
    let creates = faults.add(
        Rule::new(Fault::Latency(Duration::ZERO))
            .verbs(&["create"])
            .resources(&["deployments"])
            .field_managers(&["krec-foo-controller"]),
    );
    let mut manifest = sample_manifest("foo-controller");
    manifest.spec.read_your_writes = read_your_writes;
    // The CRD only: the test makes its own Foo once the guest runs.
    let crd: Vec<_> = sample_objects("foo-controller")
        .into_iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    let live = Live::start_alive_with_faults(vec![manifest], crd, faults.clone()).await;
    live.api
        .create(
            &json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
                "metadata": {"name": "ryw", "namespace": "default"},
                "spec": {"deploymentName": "ryw-web", "replicas": 1}}),
            "test",
        )
        .await
        .expect("create foo");
    // The first reconcile creates the Deployment; the next is triggered the moment it has.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while faults.fired(creates) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no Deployment created"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let controller = live.controller("foo-controller");
    controller.trigger(Request::new(Some("default"), "ryw"));
    // Past the lag: the Deployment's event is in, whatever the reconciles did meanwhile.
    tokio::time::sleep(WATCH_LAG + Duration::from_millis(500)).await;
    live.eventually("the Deployment exists", || async {
        live.get(&deployment_gvk(), Some("default"), "ryw-web")
            .await
    })
    .await;
    let text = live.manager.scrape();
    if read_your_writes {
        assert!(
            text.lines()
                .any(|l| l.starts_with("krec_read_your_writes_waits_total")
                    && l.contains("foo-controller")
                    && !l.ends_with(" 0")),
            "the second reconcile's read waited for the guest's write:\n{text}"
        );
    }
    faults.fired(creates)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_right_after_a_create_should_not_create_again() {
    assert_eq!(
        creates_after_an_immediate_second_reconcile(true).await,
        1,
        "read-your-own-writes: the second reconcile saw the Deployment"
    );
}

/// The same with `readYourWrites: false`: the cache has not seen the Deployment, the guest
/// creates it again (and gets `AlreadyExists`) — what the test above would miss if it could
/// not fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_read_your_writes_the_stale_cache_should_cause_a_second_create() {
    assert!(
        creates_after_an_immediate_second_reconcile(false).await >= 2,
        "the stale read should have led to a second create"
    );
}

/// The cleanup ticker deletes an expired ConfigMap at start; its next reconcile is triggered
/// at once, while the ConfigMap's DELETED event is held back for 2 s. Returns how many deletes
/// of it the guest sent.
async fn deletes_after_an_immediate_second_reconcile(read_your_writes: bool) -> u64 {
    let faults = std::sync::Arc::new(Faults::with_seed(4));
    faults.add(
        Rule::new(Fault::SlowWatch(WATCH_LAG))
            .verbs(&["watch"])
            .resources(&["configmaps"]),
    );
    let deletes = faults.add(
        Rule::new(Fault::Latency(Duration::ZERO))
            .verbs(&["delete"])
            .resources(&["configmaps"]),
    );
    let mut manifest = sample_manifest("cleanup-ticker");
    manifest.spec.read_your_writes = read_your_writes;
    let expired = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "expired", "namespace": "default",
            "annotations": {"krec.dev/expires-at": "2020-01-01T00:00:00Z"}}});
    // Its ticker fires when the guest starts: the first reconcile deletes the ConfigMap.
    let live = Live::start_alive_with_faults(vec![manifest], vec![expired], faults.clone()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while faults.fired(deletes) == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing deleted");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    live.controller("cleanup-ticker")
        .trigger(Request::new(None, "expired-configmaps"));
    tokio::time::sleep(WATCH_LAG + Duration::from_millis(500)).await;
    faults.fired(deletes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_right_after_a_delete_should_not_find_the_object() {
    assert_eq!(
        deletes_after_an_immediate_second_reconcile(true).await,
        1,
        "read-your-own-writes: the second reconcile's list no longer had the ConfigMap"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_read_your_writes_a_deleted_object_should_be_listed_again() {
    assert!(
        deletes_after_an_immediate_second_reconcile(false).await >= 2,
        "the stale list should have led to a second delete"
    );
}
