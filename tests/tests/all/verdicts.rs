//! One set of verdicts: the invalid objects (and stale or clashing writes) of
//! `tests/verdicts/cases.json`, written through a guest's `Context` in the host on the embedded
//! API server (as under `krec dev`) and on the Rust SDK's fake cluster, get the verdicts of
//! `tests/verdicts/expected.json`, word for word. The Python, TypeScript and Go SDKs' tests hold
//! their fakes to the same file (`KREC_WRITE_VERDICTS=1` rewrites it from the host's answers).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use krec::manifest::Manifest;
use krec_guest::DynamicObject;
use krec_guest::prelude::*;
use krec_guest::testing::FakeCluster;
use krec_tests::Live;
use serde_json::Value;

fn verdicts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("verdicts")
}

/// `tests/verdicts/cases.json`.
fn cases() -> &'static Value {
    static CASES: OnceLock<Value> = OnceLock::new();
    CASES.get_or_init(|| {
        let path = verdicts_dir().join("cases.json");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// The CRDs the cases need, as objects.
fn crds() -> Vec<Value> {
    let root = verdicts_dir().join("../..");
    cases()["crds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|path| {
            let text =
                std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect()
}

/// The verdict on one call: `ok`, or the error's WIT case and its message.
fn verdict<T>(result: Result<T>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(err) => format!("{}: {}", err.label().replace('_', "-"), {
            let mut err = err;
            std::mem::take(err.message_mut())
        }),
    }
}

fn object(value: &Value) -> DynamicObject {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"))
}

/// Each case's name and verdict, in order.
fn run_cases(ctx: &Context) -> Vec<(String, String)> {
    let mut verdicts = Vec::new();
    for case in cases()["cases"].as_array().into_iter().flatten() {
        let name = case["name"].as_str().unwrap_or_default().to_owned();
        for before in case["before"].as_array().into_iter().flatten() {
            let made = verdict(ctx.create(&object(before)));
            assert_eq!(made, "ok", "{name}: creating what comes before");
        }
        let target = object(&case["object"]);
        let outcome = match case["call"].as_str() {
            Some("update") => verdict(ctx.update(&target)),
            _ => verdict(ctx.create(&target)),
        };
        verdicts.push((name, outcome));
    }
    verdicts
}

static OUTCOMES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Runs the cases in a reconcile.
#[derive(Default)]
struct Cases;

impl Reconciler for Cases {
    fn reconcile(&self, _: Request, ctx: &Context) -> Result<Action> {
        let verdicts = run_cases(ctx);
        *OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()) = verdicts;
        Ok(Action::done())
    }
}

fn manifest() -> Manifest {
    let all = "verbs: [get, list, watch, create, update]";
    let kinds = [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Namespace"),
        ("v1", "Pod"),
        ("v1", "Service"),
        ("apps/v1", "Deployment"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("samplecontroller.k8s.io/v1alpha1", "Foo"),
        ("example.com/v1", "Widget"),
    ];
    let permissions: String = kinds
        .iter()
        .map(|(api_version, kind)| {
            format!("    - {{apiVersion: {api_version}, kind: {kind}, {all}}}\n")
        })
        .collect();
    let uncached: String = kinds
        .iter()
        .map(|(api_version, kind)| format!("    - {{apiVersion: {api_version}, kind: {kind}}}\n"))
        .collect();
    Manifest::parse(
        std::path::Path::new("verdicts.yaml"),
        &format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: verdicts}}\nspec:\n  module: unused.wasm\n  tickers: [{{every: 1h, request: {{name: cases}}}}]\n  uncached:\n{uncached}  permissions:\n{permissions}"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fake_cluster_and_the_host_should_give_the_same_verdicts() {
    // In the host, as under `krec dev`: the guest's calls go through the host's permission
    // checks and API client to the embedded API server.
    let native = BTreeMap::from([(
        "verdicts".to_owned(),
        krec_guest::native::reconcile::<Cases> as krec::guest::native::NativeReconcile,
    )]);
    let live = Live::start_native(vec![manifest()], crds(), native).await;
    live.controller("verdicts")
        .trigger(krec::controller::Request::new(None, "cases"));
    let in_host = live
        .eventually("the cases to run in the host", || async {
            let outcomes = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clone();
            (!outcomes.is_empty()).then_some(outcomes)
        })
        .await;
    drop(live);

    // On the Rust SDK's fake cluster.
    let cluster = crds()
        .into_iter()
        .fold(FakeCluster::new(), FakeCluster::with_json);
    cluster
        .reconcile(&Cases, Request::cluster("cases"))
        .expect("the cases run on the fake");
    let on_fake = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).clone();

    assert!(in_host.len() >= 20, "{in_host:?}");
    for ((name, host), (_, fake)) in in_host.iter().zip(&on_fake) {
        println!("{name:60} {host}");
        assert_ne!(host, "ok", "{name}: the case is refused");
        assert_eq!(host, fake, "{name}: the Rust fake answers as the host");
    }
    assert_eq!(in_host.len(), on_fake.len());

    // The file the other languages' fakes are held to.
    let expected_path = verdicts_dir().join("expected.json");
    let expected: Value = serde_json::json!({
        "about": "The verdicts on tests/verdicts/cases.json, from the host on the embedded API server (tests/tests/all/verdicts.rs; KREC_WRITE_VERDICTS=1 rewrites this file).",
        "verdicts": in_host
            .iter()
            .map(|(name, verdict)| serde_json::json!({"name": name, "verdict": verdict}))
            .collect::<Vec<_>>(),
    });
    let text = format!(
        "{}\n",
        serde_json::to_string_pretty(&expected).unwrap_or_default()
    );
    if std::env::var_os("KREC_WRITE_VERDICTS").is_some() {
        std::fs::write(&expected_path, &text).expect("write expected.json");
    }
    let kept = std::fs::read_to_string(&expected_path).unwrap_or_default();
    assert_eq!(
        kept,
        text,
        "{} is out of date: run with KREC_WRITE_VERDICTS=1",
        expected_path.display()
    );
}
