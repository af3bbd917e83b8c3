//! Traces of reconciles: the spans the host makes of every guest's reconcile — the root, the
//! guest's call, each host call beneath it — alike in Rust, Python, TypeScript and Go, with no
//! line in any guest.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use krec::manifest::Manifest;
use krec::telemetry::{Sampler, Telemetry};
use krec_core::ListOptions;
use krec_tests::{Live, built_script_module, pod_gvk, rs_gvk, sample_manifest};
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanProcessor};
use serde_json::{Value, json};

/// The prefix of the guests whose traces the processor keeps: the process's telemetry is one,
/// and every other test's reconciles are traced too once it is installed.
const TRACED: &str = "traced-";

/// Keeps the traces whose root is a reconcile of a guest named [`TRACED`]`…`, by trace.
#[derive(Debug, Default, Clone)]
struct Kept {
    /// Spans of traces whose root has not come yet.
    pending: Arc<Mutex<HashMap<[u8; 16], Vec<SpanData>>>>,
    /// The traces kept, by controller.
    kept: Arc<Mutex<BTreeMap<String, Vec<Vec<SpanData>>>>>,
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

impl SpanProcessor for Kept {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        let id = span.span_context.trace_id().to_bytes();
        let mut pending = self.pending.lock().expect("pending");
        if span.parent_span_id != SpanId::INVALID {
            pending.entry(id).or_default().push(span);
            return;
        }
        let mut trace = pending.remove(&id).unwrap_or_default();
        let Some(controller) = attribute(&span, "controller").filter(|c| c.starts_with(TRACED))
        else {
            return;
        };
        trace.push(span);
        self.kept
            .lock()
            .expect("kept")
            .entry(controller)
            .or_default()
            .push(trace);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The process's telemetry, keeping every trace, while it is held: the other tests of this
/// binary run at the same time, and must not pay for traces longer than this one needs them.
struct Installed(Kept);

impl Installed {
    fn new() -> Self {
        let kept = Kept::default();
        let replaced = krec::telemetry::replace(Some(Telemetry::new(
            Box::new(kept.clone()),
            Sampler::Always,
        )));
        assert!(replaced.is_none(), "another test installed telemetry");
        Installed(kept)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        krec::telemetry::replace(None);
    }
}

/// `manifest` as the guest `traced-<language>`, reconciling in the namespace `language` only.
fn traced(mut manifest: Manifest, language: &str) -> Manifest {
    manifest.name = format!("{TRACED}{language}");
    manifest.spec.namespaces = vec![language.to_owned()];
    manifest
}

/// A trace's spans as `parent > name [kind of object]` lines, sorted: its shape.
fn shape(trace: &[SpanData]) -> BTreeSet<String> {
    let names: HashMap<SpanId, String> = trace
        .iter()
        .map(|s| (s.span_context.span_id(), s.name.to_string()))
        .collect();
    trace
        .iter()
        .map(|span| {
            let parent = names
                .get(&span.parent_span_id)
                .cloned()
                .unwrap_or_else(|| "-".into());
            let kind = attribute(span, "k8s.resource.kind").unwrap_or_default();
            format!("{parent} > {} {kind}", span.name)
        })
        .collect()
}

/// The Rust, Python, TypeScript and Go pod-counters, each on its own ReplicaSet, are traced
/// alike: a `reconcile` root naming the controller and the object, a `guest` span beneath it
/// with the guest's CPU, and beneath that the host calls — the ReplicaSet's `get`, the Pods'
/// `list`, the ReplicaSet's `update` — each naming its kind and object; every span within its
/// parent's time.
#[tokio::test]
async fn every_languages_reconcile_should_be_traced_with_the_same_spans() {
    const LANGUAGES: [&str; 4] = ["rust", "python", "typescript", "go"];
    let installed = Installed::new();
    let kept = installed.0.clone();
    let mut typescript = sample_manifest("pod-counter-py");
    typescript.spec.module = built_script_module("js-guests", "pod_counter_ts.wasm");
    let manifests = vec![
        traced(sample_manifest("pod-counter"), "rust"),
        traced(sample_manifest("pod-counter-py"), "python"),
        traced(typescript, "typescript"),
        traced(sample_manifest("pod-counter-go"), "go"),
    ];
    let mut objects: Vec<Value> = Vec::new();
    for ns in LANGUAGES {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        objects.push(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}));
    }
    let live = Live::start_alive(manifests, objects).await;
    for ns in LANGUAGES {
        live.eventually(&format!("the pod count in {ns}"), || async {
            let rs = live.get(&rs_gvk(), Some(ns), "web").await?;
            (rs.pointer("/metadata/labels/pod-count")? == "2").then_some(())
        })
        .await;
    }

    let mut shapes = BTreeMap::new();
    for language in LANGUAGES {
        let controller = format!("{TRACED}{language}");
        // The reconcile that wrote the count of two Pods.
        let trace = live
            .eventually(&format!("{controller}'s traced update"), || async {
                let kept = kept.kept.lock().expect("kept");
                kept.get(&controller)?
                    .iter()
                    .find(|trace| {
                        trace
                            .iter()
                            .any(|s| s.name == "update" && matches!(s.status, Status::Unset))
                    })
                    .cloned()
            })
            .await;
        let root = trace
            .iter()
            .find(|s| s.parent_span_id == SpanId::INVALID)
            .expect("a root");
        assert_eq!(root.name, "reconcile");
        assert_eq!(attribute(root, "controller").as_deref(), Some(&*controller));
        assert_eq!(
            attribute(root, "controllerKind").as_deref(),
            Some("ReplicaSet")
        );
        assert_eq!(attribute(root, "controllerGroup").as_deref(), Some("apps"));
        assert_eq!(attribute(root, "namespace").as_deref(), Some(language));
        assert_eq!(attribute(root, "name").as_deref(), Some("web"));
        assert_eq!(attribute(root, "krec.result").as_deref(), Some("done"));
        let guest = trace
            .iter()
            .find(|s| s.name == "guest")
            .expect("the guest's call");
        assert_eq!(guest.parent_span_id, root.span_context.span_id());
        assert!(attribute(guest, "krec.cpu_seconds").is_some(), "{guest:?}");
        for span in &trace {
            assert_eq!(span.span_context.trace_id(), root.span_context.trace_id());
            assert!(span.start_time <= span.end_time, "{span:?}");
            assert!(
                root.start_time <= span.start_time && span.end_time <= root.end_time,
                "{} outside its trace's root",
                span.name
            );
        }
        let update = trace.iter().find(|s| s.name == "update").expect("update");
        assert_eq!(update.parent_span_id, guest.span_context.span_id());
        assert_eq!(attribute(update, "k8s.object.name").as_deref(), Some("web"));
        assert_eq!(
            attribute(update, "k8s.namespace.name").as_deref(),
            Some(language)
        );
        // The queue's span, when a watch event caused the reconcile, is the root's too.
        shapes.insert(
            language,
            shape(&trace)
                .into_iter()
                .filter(|line| !line.starts_with("reconcile > queue"))
                .collect::<BTreeSet<_>>(),
        );
    }
    let rust = shapes["rust"].clone();
    assert!(
        rust.contains("reconcile > guest ")
            && rust.contains("guest > list Pod")
            && rust.contains("guest > update ReplicaSet"),
        "{rust:#?}"
    );
    for language in &LANGUAGES[1..] {
        assert_eq!(
            shapes[language], rust,
            "{language}'s spans differ from Rust's"
        );
    }

    // Each reconcile names what queued it: the ReplicaSet's own watch event; one of its Pods'
    // (deleted here, for its owner); then the manual trigger (a key queued already keeps the
    // trigger that queued it).
    let controller = format!("{TRACED}rust");
    let triggers = || {
        let kept = kept.kept.lock().expect("kept");
        kept.get(&controller)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|span| span.name == "reconcile")
            .filter_map(|span| attribute(span, "krec.trigger"))
            .collect::<BTreeSet<String>>()
    };
    let pods = live
        .api
        .list(&pod_gvk(), &ListOptions::default().namespace("rust"))
        .await
        .expect("pods");
    let pod = pods[0]["metadata"]["name"].as_str().expect("a pod's name");
    live.api
        .delete(&pod_gvk(), Some("rust"), pod, None)
        .await
        .expect("delete a pod");
    live.eventually("a reconcile for a Pod's event", || async {
        let triggers = triggers();
        (triggers.contains("event") && triggers.contains("owner")).then_some(())
    })
    .await;
    let manual = live.controller(&controller);
    live.eventually("a reconcile for the manual trigger", || async {
        manual.trigger(krec_core::ObjectKey::new(Some("rust"), "web"));
        triggers().contains("manual").then_some(())
    })
    .await;
    let triggers = triggers();
    assert!(
        triggers
            .iter()
            .all(|t| ["event", "owner", "manual"].contains(&t.as_str())),
        "{triggers:?}"
    );
}
