//! The testing kit's fake cluster answers as the host does: the same calls, run against
//! `krec_guest::testing::FakeCluster` and against the real host on the embedded API server,
//! give the same outcomes — the same errors with the same messages.

use std::collections::BTreeMap;
use std::sync::Mutex;

use krec::manifest::Manifest;
use krec_guest::prelude::*;
use krec_guest::testing::{FakeCluster, conformance};
use krec_tests::Live;

/// What the suite's last run answered.
static OUTCOMES: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());

/// Runs the conformance calls in a reconcile.
#[derive(Default)]
struct Suite;

impl Reconciler for Suite {
    fn reconcile(&self, _: Request, ctx: &Context) -> Result<Action> {
        let outcomes = conformance(ctx);
        *OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()) = outcomes;
        Ok(Action::done())
    }
}

fn manifest() -> Manifest {
    Manifest::parse(
        std::path::Path::new("conformance.yaml"),
        "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {name: conformance}\nspec:\n  module: unused.wasm\n  tickers: [{every: 1h, request: {name: suite}}]\n  uncached: [{apiVersion: v1, kind: ConfigMap}]\n  permissions:\n    - {apiVersion: v1, kind: ConfigMap, verbs: [get, list, create, update, patch, delete]}\n    - {apiVersion: apps/v1, kind: Deployment, verbs: [get, list, watch]}\n",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_cluster_should_answer_as_the_host_does() {
    // In the host: a native guest whose calls go through the host's permission checks, cache
    // and API client to the embedded API server.
    let native = BTreeMap::from([(
        "conformance".to_owned(),
        krec_guest::native::reconcile::<Suite> as krec::guest::native::NativeReconcile,
    )]);
    let live = Live::start_native(vec![manifest()], vec![], native).await;
    live.controller("conformance")
        .trigger(krec::controller::Request::new(None, "suite"));
    let in_host = live
        .eventually("the suite to run in the host", || async {
            let outcomes = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clone();
            (!outcomes.is_empty()).then_some(outcomes)
        })
        .await;
    drop(live);

    // On the fake cluster.
    let cluster = FakeCluster::new();
    cluster
        .reconcile(&Suite, Request::cluster("suite"))
        .expect("the suite runs");
    let on_fake = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clone();

    for (host, fake) in in_host.iter().zip(&on_fake) {
        println!("{:40} host: {}", host.0, host.1);
        assert_eq!(host, fake, "the fake answers as the host");
    }
    assert_eq!(in_host.len(), on_fake.len());
    // The suite exercised what it is for.
    for expected in ["NotFound", "AlreadyExists", "Conflict", "Invalid"] {
        assert!(
            in_host.iter().any(|(_, o)| o.starts_with(expected)),
            "{expected} in {in_host:?}"
        );
    }
}

/// Takes a finalizer on ConfigMaps, recording what it was asked to do.
#[derive(Default)]
struct Finalizing;

static FINALIZER_EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl Reconciler for Finalizing {
    fn reconcile(&self, req: Request, ctx: &Context) -> Result<Action> {
        use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
        let Some(cm) = ctx.get_opt::<ConfigMap>(req.namespace(), &req.name)? else {
            return Ok(Action::done());
        };
        ctx.finalizer(cm, "example.com/cleanup", |event| {
            let what = match event {
                FinalizerEvent::Apply(_) => "apply",
                FinalizerEvent::Cleanup(_) => "cleanup",
            };
            FINALIZER_EVENTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(what.into());
            Ok(Action::done())
        })
    }
}

#[test]
fn the_helpers_should_work_on_the_fake_cluster() {
    use krec_guest::k8s_openapi::api::apps::v1::Deployment;
    use krec_guest::k8s_openapi::api::core::v1::ConfigMap;

    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    cm.metadata.namespace = Some("default".into());
    let cluster = FakeCluster::new().with(&cm);
    let request = || Request::new("default", "a");

    // The finalizer is added first, then the object is reconciled, then cleaned up on delete.
    cluster.reconcile(&Finalizing, request()).expect("adds");
    let held: ConfigMap = cluster.get(Some("default"), "a").expect("there");
    assert_eq!(
        held.metadata.finalizers,
        Some(vec!["example.com/cleanup".to_owned()])
    );
    cluster.reconcile(&Finalizing, request()).expect("applies");
    cluster
        .store()
        .delete(
            &cluster
                .store()
                .registry()
                .by_kind("", "v1", "ConfigMap")
                .expect("served"),
            Some("default"),
            "a",
            &Default::default(),
        )
        .expect("marked for deletion");
    assert!(
        cluster.get::<ConfigMap>(Some("default"), "a").is_some(),
        "held by its finalizer"
    );
    cluster
        .reconcile(&Finalizing, request())
        .expect("cleans up");
    assert!(
        cluster.get::<ConfigMap>(Some("default"), "a").is_none(),
        "gone once released"
    );
    assert_eq!(
        *FINALIZER_EVENTS.lock().unwrap_or_else(|e| e.into_inner()),
        ["apply", "cleanup"]
    );

    // create_or_update and create_or_patch say what they did; set_controller_reference makes
    // the garbage collector delete the owned object with its owner.
    #[derive(Default)]
    struct Sync;
    static RESULTS: Mutex<Vec<OperationResult>> = Mutex::new(Vec::new());
    impl Reconciler for Sync {
        fn reconcile(&self, _: Request, ctx: &Context) -> Result<Action> {
            let owner = ctx.get::<ConfigMap>(Some("default"), "owner")?;
            let mut wanted = Deployment::default();
            wanted.metadata.name = Some("web".into());
            wanted.metadata.namespace = Some("default".into());
            let api = ctx.api::<Deployment>(Some("default"));
            let (_, first) = api.create_or_update(wanted.clone(), |d| {
                set_controller_reference(&owner, d)?;
                d.spec = Some(krec_guest::serde_json::from_value(
                    krec_guest::serde_json::json!({
                        "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
                    }),
                )?);
                Ok(())
            })?;
            let (_, second) = ctx.create_or_patch(wanted, |d| {
                set_controller_reference(&owner, d)?;
                d.metadata.labels = Some([("tier".to_owned(), "web".to_owned())].into());
                Ok(())
            })?;
            let (_, third) = ctx.create_or_patch(api.get("web")?, |_| Ok(()))?;
            RESULTS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend([first, second, third]);
            Ok(Action::done())
        }
    }
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    owner.metadata.namespace = Some("default".into());
    let cluster = cluster.with(&owner);
    cluster.reconcile(&Sync, request()).expect("syncs");
    assert_eq!(
        *RESULTS.lock().unwrap_or_else(|e| e.into_inner()),
        [
            OperationResult::Created,
            OperationResult::Updated,
            OperationResult::Unchanged
        ]
    );
    let web: Deployment = cluster.get(Some("default"), "web").expect("created");
    assert_eq!(web.labels().get("tier").map(String::as_str), Some("web"));
    let owner: ConfigMap = cluster.get(Some("default"), "owner").expect("owner");
    assert!(is_controlled_by(&web, &owner));
}
