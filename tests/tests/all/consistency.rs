//! Read-your-own-writes: a guest's next reconcile sees what its last one wrote, even when the
//! watch has not delivered it yet.

use std::sync::Arc;
use std::time::Duration;

use krec::controller::Request;
use krec_apiserver::faults::{Fault, Faults, Rule};
use krec_tests::{Live, deployment_gvk, sample_manifest, sample_objects};
use serde_json::json;

/// How late every event of the lagging kind reaches the host.
const WATCH_LAG: Duration = Duration::from_secs(2);

/// Faults that hold back every watch event of `resource` by [`WATCH_LAG`], and the index of a
/// rule that changes nothing but counts the `verb` requests on it.
fn lagging(resource: &str, verb: &str) -> (Arc<Faults>, usize) {
    let faults = Arc::new(Faults::with_seed(3));
    faults.add(
        Rule::new(Fault::SlowWatch(WATCH_LAG))
            .verbs(&["watch"])
            .resources(&[resource]),
    );
    let counted = faults.add(
        Rule::new(Fault::Latency(Duration::ZERO))
            .verbs(&[verb])
            .resources(&[resource]),
    );
    (faults, counted)
}

/// Once the counted write has happened, trigger `guest`'s `request` at once — before the
/// write's watch event can arrive — then let the lag pass; how many counted writes were sent.
async fn trigger_right_after_the_write(
    live: &Live,
    (faults, counted): &(Arc<Faults>, usize),
    guest: &str,
    request: Request,
) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while faults.fired(*counted) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{guest} wrote nothing"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    live.controller(guest).trigger(request);
    // Past the lag: the write's event is in, whatever the reconciles did meanwhile.
    tokio::time::sleep(WATCH_LAG + Duration::from_millis(500)).await;
    faults.fired(*counted)
}

/// The sample-controller's guest creates a Foo's Deployment; its next reconcile is triggered at
/// once, while the Deployment's watch event is held back for 2 s. Returns how many creates of
/// the Deployment the guest sent.
async fn creates_after_an_immediate_second_reconcile(read_your_writes: bool) -> u64 {
    let lagging = lagging("deployments", "create");
    let mut manifest = sample_manifest("foo-controller");
    manifest.spec.read_your_writes = read_your_writes;
    // The CRD only: the test makes its own Foo once the guest runs.
    let crd: Vec<_> = sample_objects("foo-controller")
        .into_iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    let live = Live::start_alive_with_faults(vec![manifest], crd, lagging.0.clone()).await;
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
    let creates = trigger_right_after_the_write(
        &live,
        &lagging,
        "foo-controller",
        Request::new(Some("default"), "ryw"),
    )
    .await;
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
    creates
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
    let lagging = lagging("configmaps", "delete");
    let mut manifest = sample_manifest("cleanup-ticker");
    manifest.spec.read_your_writes = read_your_writes;
    let expired = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "expired", "namespace": "default",
            "annotations": {"krec.dev/expires-at": "2020-01-01T00:00:00Z"}}});
    // Its ticker fires when the guest starts: the first reconcile deletes the ConfigMap.
    let live =
        Live::start_alive_with_faults(vec![manifest], vec![expired], lagging.0.clone()).await;
    trigger_right_after_the_write(
        &live,
        &lagging,
        "cleanup-ticker",
        Request::new(None, "expired-configmaps"),
    )
    .await
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
