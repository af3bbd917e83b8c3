//! Guests written in Python, TypeScript and Go beside the Rust ones, in one host: the same
//! behaviour from the same manifest semantics.

use std::collections::BTreeMap;

use krec::admission::WebhookServer;
use krec::manifest::Manifest;
use krec_tests::{
    Live, built_manifest, built_script_module, deployment_gvk, foo_gvk, repo_root, rs_gvk,
    sample_manifest, sample_objects,
};
use serde_json::{Value, json};

use crate::webhooks::{documented_review, https_post, trusting};

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
        rs(
            "none",
            0,
            json!({"matchLabels": {"app": "none"}}),
            json!({"app": "none"}),
        ),
        rs(
            "one",
            1,
            json!({"matchLabels": {"app": "one"}}),
            json!({"app": "one"}),
        ),
        rs(
            "three",
            3,
            json!({"matchLabels": {"app": "three"}}),
            json!({"app": "three"}),
        ),
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

/// The Rust, Python and Go pod-counters (seed 000's reconciler), and seed 000's own
/// controller-runtime ReplicaSetReconciler compiled unchanged, each on its own copy of the same
/// ReplicaSets, label them alike, and follow a scale alike.
#[tokio::test]
async fn rust_python_go_and_controller_runtime_pod_counters_should_label_the_same_replica_sets_alike()
 {
    const LANGUAGES: [&str; 4] = ["rust", "python", "go", "controller-runtime"];
    let mut objects: Vec<Value> = LANGUAGES.iter().map(|ns| namespace(ns)).collect();
    for ns in LANGUAGES {
        let mut sets = replica_sets(ns);
        if ns == "controller-runtime" {
            // The post's Reconcile writes into the ReplicaSet's labels as they are: it needs some.
            for rs in &mut sets {
                rs["metadata"]["labels"] = json!({"owner": "test"});
            }
        }
        objects.extend(sets);
    }
    let live = Live::start_alive(
        vec![
            in_namespace(sample_manifest("pod-counter"), "rust"),
            in_namespace(sample_manifest("pod-counter-py"), "python"),
            in_namespace(sample_manifest("pod-counter-go"), "go"),
            in_namespace(
                sample_manifest("replicaset-reconciler-go"),
                "controller-runtime",
            ),
        ],
        objects,
    )
    .await;

    let want = expected(&[("none", "0"), ("one", "1"), ("three", "3"), ("expr", "2")]);
    for ns in LANGUAGES {
        live.eventually(&format!("the pod counts in {ns}"), || async {
            (counts(&live, ns).await == want).then_some(())
        })
        .await;
    }

    // Scaled the same way, all follow.
    for ns in LANGUAGES {
        live.api
            .patch(
                &rs_gvk(),
                Some(ns),
                "three",
                krec_core::PatchType::Merge,
                &json!({"spec": {"replicas": 1}}),
                false,
                "test",
            )
            .await
            .expect("scale down");
    }
    let want = expected(&[("none", "0"), ("one", "1"), ("three", "1"), ("expr", "2")]);
    for ns in LANGUAGES {
        live.eventually(&format!("the pod counts in {ns} after scaling"), || async {
            (counts(&live, ns).await == want).then_some(())
        })
        .await;
    }
    assert_eq!(counts(&live, "rust").await, counts(&live, "python").await);
    assert_eq!(counts(&live, "rust").await, counts(&live, "go").await);
    assert_eq!(
        counts(&live, "rust").await,
        counts(&live, "controller-runtime").await
    );
    // The controller-runtime guest never trapped. (Its Update may meet a conflict — the
    // ReplicaSet controller writes status meanwhile — an error retried, as in any controller.)
    let seed = live.controller("replicaset-reconciler-go");
    assert!(
        seed.stats().traps_by_cause().is_empty(),
        "{:?}",
        seed.stats().traps_by_cause()
    );
}

/// The reviews both foo-validators answer: creates of good and bad names (empty, too long,
/// uppercase, quotes, a tab, non-ASCII), a name another Foo uses, that Foo's own update, a
/// delete, and a Foo in another namespace.
fn foo_reviews() -> Vec<Value> {
    let mut reviews: Vec<Value> = [
        "web",
        "web-1.example",
        "Not_A_Name",
        "",
        "-web",
        "web.",
        "a\"b\\c",
        "tab\there",
        "wéb",
        &"a".repeat(254),
        "taken",
    ]
    .iter()
    .map(|name| documented_review(name))
    .collect();
    // The Foo that holds "taken" may keep it.
    let mut own = documented_review("taken");
    own["request"]["operation"] = json!("UPDATE");
    own["request"]["name"] = json!("holder");
    own["request"]["object"]["metadata"]["name"] = json!("holder");
    own["request"]["oldObject"] = own["request"]["object"].clone();
    reviews.push(own);
    // A delete has no object.
    let mut delete = documented_review("taken");
    delete["request"]["operation"] = json!("DELETE");
    delete["request"]["oldObject"] = delete["request"]["object"].take();
    reviews.push(delete);
    // Another namespace has no holder.
    let mut elsewhere = documented_review("taken");
    elsewhere["request"]["namespace"] = json!("other");
    elsewhere["request"]["object"]["metadata"]["namespace"] = json!("other");
    reviews.push(elsewhere);
    reviews
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_typescript_python_and_go_foo_validators_should_give_the_same_verdicts_and_messages() {
    let mut objects = sample_objects("foo-controller");
    objects.push(namespace("other"));
    objects.push(
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": "holder", "namespace": "default"},
        "spec": {"deploymentName": "taken", "replicas": 1}}),
    );
    let live = Live::start(
        vec![
            sample_manifest("foo-validator"),
            sample_manifest("foo-validator-ts"),
            built_manifest(&repo_root().join("tests/guests/foo-validator-py/manifest.yaml")),
            sample_manifest("foo-validator-go"),
        ],
        objects,
    )
    .await;
    let server = WebhookServer::start(live.manager.clone(), "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("webhook server");
    let ca = trusting(server.ca_pem());
    let mut denied = 0;
    for review in foo_reviews() {
        let mut answers = Vec::new();
        let guests = [
            "foo-validator",
            "foo-validator-ts",
            "foo-validator-py",
            "foo-validator-go",
        ];
        for guest in guests {
            let url = format!("{}/validate/{guest}", server.url());
            let (status, answer) = https_post(&ca, &url, &review).await;
            assert_eq!(status, 200, "{guest}: {answer}");
            answers.push(answer["response"].clone());
        }
        for (i, other) in answers.iter().enumerate().skip(1) {
            assert_eq!(
                &answers[0], other,
                "Rust and {} differ on {}",
                guests[i], review["request"]
            );
        }
        denied += usize::from(answers[0]["allowed"] == false);
    }
    // Both deny the bad names and the taken one, and allow the rest.
    assert_eq!(denied, 9);
}

/// The hostile guest in `language` (`py`, `ts` or `go`), one ticker per misbehaviour.
fn misbehave(dir: &std::path::Path, language: &str) -> Manifest {
    let (folder, raise, memory) = match language {
        "py" => ("python-guests", "raise", "96Mi"),
        "go" => ("go-guests", "panic", "128Mi"),
        _ => ("js-guests", "throw", "96Mi"),
    };
    let module = built_script_module(folder, &format!("misbehave_{language}.wasm"));
    let tickers: String = ["loop", "oom", raise, "forbidden"]
        .iter()
        .map(|name| format!("    - {{every: 100ms, request: {{name: {name}}}}}\n"))
        .collect();
    let path = dir.join(format!("misbehave-{language}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: misbehave-{language}}}\nspec:\n  module: {}\n  maxConcurrentReconciles: 2\n  limits: {{timeout: 1s, memory: {memory}}}\n  tickers:\n{tickers}",
            module.display()
        ),
    )
    .expect("write");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_python_and_typescript_guests_should_be_contained_beside_a_healthy_guest() {
    hostile_guests_contained(&["py", "ts"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_go_guest_should_be_contained_beside_a_healthy_guest() {
    hostile_guests_contained(&["go"]).await;
}

/// The hostile guests in `languages` loop, allocate without bound, fail (an exception, a
/// panic) and call what they may not, beside the healthy Rust pod-counter: each is cut,
/// counted and retried with backoff, and the healthy guest keeps its pace.
async fn hostile_guests_contained(languages: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut objects = vec![namespace("rust")];
    objects.extend(replica_sets("rust"));
    let mut manifests: Vec<Manifest> = languages
        .iter()
        .map(|language| misbehave(dir.path(), language))
        .collect();
    manifests.push(in_namespace(sample_manifest("pod-counter"), "rust"));
    let live = Live::start_alive(manifests, objects).await;
    // The healthy guest does its work while the others trap.
    let want = expected(&[("none", "0"), ("one", "1"), ("three", "3"), ("expr", "2")]);
    live.eventually("pod-counter's counts beside the hostile guests", || async {
        (counts(&live, "rust").await == want).then_some(())
    })
    .await;
    for language in languages {
        let guest = format!("misbehave-{language}");
        let guest = guest.as_str();
        let bad = live.controller(guest);
        // The loop is cut at its deadline, the memory bomb at its limit; both are counted.
        // Each trap costs a new CPython (or SpiderMonkey) instance: slow in a debug host beside
        // the other tests (the Go pod-counter's 43 MB component compiling meanwhile).
        let causes = live
            .eventually_within(
                &format!("{guest}'s timeouts and out-of-memory traps"),
                std::time::Duration::from_secs(90),
                || async {
                    let causes = bad.stats().traps_by_cause();
                    ["timeout", "out_of_memory"]
                        .iter()
                        .all(|c| causes.get(c).is_some_and(|n| *n > 0))
                        .then_some(causes)
                },
            )
            .await;
        // An exception and a forbidden call are errors the guest sees, not traps.
        live.eventually(&format!("{guest}'s errors"), || async {
            (bad.stats().errors() >= 2).then_some(())
        })
        .await;
        // Retried with backoff.
        let looping = krec::controller::Request::new(None, "loop");
        live.eventually(&format!("{guest}'s loop requeued"), || async {
            (bad.queue().num_requeues(&looping) > 0).then_some(())
        })
        .await;
        println!("{guest}: traps {causes:?}, errors {}", bad.stats().errors());
    }
    // The host and the healthy guest never failed for their neighbours' sake: no trap, and
    // no error but the conflicts any controller meets (its ReplicaSet updated by the
    // ReplicaSet controller between its read and its write; retried, as the counts show).
    let healthy = live.controller("pod-counter");
    assert_eq!(healthy.stats().traps(), 0);
    let errors: Vec<String> = healthy
        .stats()
        .recent()
        .into_iter()
        .filter(|r| r.result == "error")
        .filter_map(|r| r.message)
        .filter(|m| !m.contains("conflict: Operation cannot be fulfilled"))
        .collect();
    assert!(errors.is_empty(), "pod-counter's errors: {errors:?}");
}

/// sample-controller's Foo reconciler as controller-runtime code (Go, through
/// krec.dev/guest/controllerruntime) beside the Rust foo-controller, each on its own Foo: the
/// same Deployment, owned alike, and the Foo's status following what the cluster's controllers
/// make available, through a scale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_controller_runtime_foo_controller_should_do_what_the_rust_one_does() {
    let mut objects = sample_objects("foo-controller");
    objects.extend(sample_objects("foo-controller-go"));
    let live = Live::start_alive(
        vec![
            in_namespace(sample_manifest("foo-controller"), "default"),
            in_namespace(sample_manifest("foo-controller-go"), "foo-go"),
        ],
        objects,
    )
    .await;
    let (foo_gvk, deployment_gvk) = (foo_gvk(), deployment_gvk());
    let available = |namespace: &'static str, n: i64| {
        let (live, foo_gvk) = (&live, &foo_gvk);
        move || async move {
            let foo = live.get(foo_gvk, Some(namespace), "example-foo").await?;
            (foo.pointer("/status/availableReplicas") == Some(&json!(n))).then_some(())
        }
    };
    for (namespace, replicas) in [("default", 1), ("foo-go", 1)] {
        live.eventually(
            &format!("the Foo in {namespace}: {replicas} available"),
            available(namespace, replicas),
        )
        .await;
    }
    for namespace in ["default", "foo-go"] {
        live.api
            .patch(
                &foo_gvk,
                Some(namespace),
                "example-foo",
                krec_core::PatchType::Merge,
                &json!({"spec": {"replicas": 3}}),
                false,
                "test",
            )
            .await
            .expect("scale the Foo");
    }
    for namespace in ["default", "foo-go"] {
        live.eventually(
            &format!("the Foo in {namespace}: 3 available"),
            available(namespace, 3),
        )
        .await;
    }
    // The same Deployment: spec, and a controller reference to its Foo.
    let made = |namespace: &'static str| {
        let (live, deployment_gvk) = (&live, &deployment_gvk);
        async move {
            let d = live
                .get(deployment_gvk, Some(namespace), "example-foo")
                .await
                .expect("the Deployment");
            let owner = &d["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&owner["kind"], &owner["controller"]),
                (&json!("Foo"), &json!(true)),
                "{d:#}"
            );
            d["spec"].clone()
        }
    };
    assert_eq!(made("default").await, made("foo-go").await);
    let go = live.controller("foo-controller-go");
    assert!(
        go.stats().traps_by_cause().is_empty(),
        "{:?}",
        go.stats().traps_by_cause()
    );
}

/// `krec replay` of a Go guest is deterministic: Go seeds its map iteration order and
/// math/rand from WASI's random bytes, which a replay fixes — two replays of one recording
/// give the same outcomes, though each live reconcile differed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_of_a_go_guest_should_see_the_same_randomness() {
    use krec::rollout::recording::{self, Sink};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("random.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: misbehave-go}}\nspec:\n  module: {}\n  limits: {{timeout: 5s, memory: 128Mi}}\n  tickers:\n    - {{every: 100ms, request: {{name: random}}}}\n",
            built_script_module("go-guests", "misbehave_go.wasm").display()
        ),
    )
    .expect("write");
    let manifest = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let live = Live::start(vec![manifest.clone()], vec![]).await;
    let controller = live.controller("misbehave-go");
    let (sink, mut lines) = Sink::new(false);
    assert!(controller.recording().start(sink));
    live.eventually("four reconciles recorded", || async {
        (controller.stats().errors() >= 4).then_some(())
    })
    .await;
    controller.recording().stop();
    let header = recording::Header::of(&manifest, "recorded", false);
    let mut text = serde_json::to_string(&recording::Line::Header(header)).expect("header") + "\n";
    while let Ok(line) = lines.try_recv() {
        text.push_str(&line);
        text.push('\n');
    }
    drop(live);
    let (_, reconciles) = recording::parse(&text).expect("parse");
    assert!(reconciles.len() >= 2, "{text}");

    // One compiled module, two replays (each instantiates it anew, as `krec replay` does).
    let engine = krec::guest::engine::new_engine().expect("engine");
    let linker = krec::guest::new_linker(&engine).expect("linker");
    let module = std::sync::Arc::new(
        krec::guest::GuestModule::load_cached(
            &engine,
            &linker,
            manifest.clone().into(),
            &krec_tests::module_cache(),
        )
        .expect("load"),
    );
    let replay = || {
        let (module, reconciles) = (module.clone(), reconciles.clone());
        async move {
            let mut diffs = Vec::new();
            krec::cli::replay::replay(module, reconciles, |r, lines| {
                diffs.push(format!("{}: {}", r.key(), lines.join("; ")));
            })
            .await
            .expect("replay");
            diffs
        }
    };
    let (first, second) = (replay().await, replay().await);
    // Live, each reconcile saw other randomness than a replay's: the replays diverge from it,
    // and alike.
    assert!(!first.is_empty(), "{text}");
    assert_eq!(first, second);
}

/// A Go guest that makes garbage between host calls whose answers are long lists: Go's
/// collector must never run inside the allocator the host writes an answer through (it reads
/// the clock there, a call out of the guest the component model forbids: "cannot leave
/// component instance"). The benchmark found it; here each reconcile lists 100 Pods 200 times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_guest_collecting_garbage_between_host_calls_should_never_trap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("churn.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: churn-go}}\nspec:\n  module: {}\n  limits: {{timeout: 20s, memory: 128Mi}}\n  tickers:\n    - {{every: 100ms, request: {{name: churn}}}}\n  permissions:\n    - {{apiVersion: v1, kind: Pod, verbs: [get, list, watch]}}\n",
            built_script_module("go-guests", "misbehave_go.wasm").display()
        ),
    )
    .expect("write");
    let manifest = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut objects = vec![namespace("churn")];
    objects.extend((0..100).map(|i| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p-{i}"), "namespace": "churn",
                "labels": {"app": "churn", "index": i.to_string()}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    }));
    let live = Live::start(vec![manifest], objects).await;
    let churn = live.controller("churn-go");
    live.eventually_within(
        "five churning reconciles",
        std::time::Duration::from_secs(90),
        || async { (churn.stats().done() >= 5).then_some(()) },
    )
    .await;
    assert!(
        churn.stats().traps_by_cause().is_empty(),
        "{:?}",
        churn.stats().traps_by_cause()
    );
    assert_eq!(churn.stats().errors(), 0);
}
