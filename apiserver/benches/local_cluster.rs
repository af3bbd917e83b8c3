//! Benchmarks of the embedded API server, through `kube` over HTTPS as a controller uses it:
//!
//! - `list_10k_configmaps`: one full list of 10 000 ConfigMaps (~0.5 KB each), against the
//!   baseline of serializing the same objects with serde_json in this process;
//! - `watch_fanout`: 1 000 updates/s for 5 s, each fanned out to 10 watches; per-event delivery
//!   latency (update sent → event received), and events delivered / expected;
//! - `crd_creates`: creates of a custom resource whose CRD has five CEL validation rules,
//!   against the same CRD without them, in alternating slices (what the rules cost a write).
//!
//! Prints a Markdown table; `make bench` runs it. Figures are medians with min–max over runs.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use krec_apiserver::Server;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Config};
use serde_json::json;
use support::{median_min_max, percentile};

const OBJECTS: usize = 10_000;
const RUNS: usize = 7;
const WATCHERS: usize = 10;
const EVENTS_PER_SECOND: u64 = 1_000;
const SECONDS: u64 = 5;

async fn client(cluster: &Server) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn configmap(i: usize) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:05}"), "labels": {"app": "bench", "shard": format!("{}", i % 16)}},
        "data": {"payload": "x".repeat(300), "index": i.to_string()}}))
    .expect("configmap")
}

async fn list_benchmark(cms: &Api<ConfigMap>) -> Vec<String> {
    for i in 0..OBJECTS {
        cms.create(&PostParams::default(), &configmap(i))
            .await
            .expect("create");
    }
    let mut over_https = Vec::new();
    let mut baseline = Vec::new();
    let mut bytes = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        let list = cms.list(&ListParams::default()).await.expect("list");
        over_https.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(list.items.len(), OBJECTS);
        let started = Instant::now();
        let encoded = serde_json::to_vec(&list.items).expect("encode");
        baseline.push(started.elapsed().as_secs_f64() * 1e3);
        bytes = encoded.len();
    }
    let (m, lo, hi) = median_min_max(over_https.clone());
    let (bm, blo, bhi) = median_min_max(baseline.clone());
    vec![
        format!(
            "| list_10k_configmaps_ms | {m:.1} | {lo:.1}–{hi:.1} | full list over HTTPS with kube, {OBJECTS} objects, {:.1} MB JSON |",
            bytes as f64 / 1e6
        ),
        format!(
            "| list_10k_baseline_serialize_ms | {bm:.1} | {blo:.1}–{bhi:.1} | serde_json encode of the same objects, in process |"
        ),
        format!(
            "| list_10k_ratio_vs_serialize | {:.1}× | | list over HTTPS / in-process encode |",
            m / bm
        ),
    ]
}

async fn watch_benchmark(cms: &Api<ConfigMap>) -> Vec<String> {
    let target = cms
        .create(&PostParams::default(), &configmap(99_999))
        .await
        .expect("target");
    let from = target.metadata.resource_version.expect("rv");
    let total = (EVENTS_PER_SECOND * SECONDS) as usize;
    let interval = Duration::from_micros(1_000_000 / EVENTS_PER_SECOND);
    let support::FanOut {
        latencies: mut all,
        write_rate,
    } = support::watch_fanout(cms, "cm-99999", &from, total, interval, WATCHERS).await;
    let delivered = all.len();
    vec![
        format!(
            "| watch_fanout_write_rate_per_s | {write_rate:.0} | | target {EVENTS_PER_SECOND}/s, merge patches over HTTPS |"
        ),
        format!(
            "| watch_fanout_delivered_ratio | {:.3} | | events received / ({total} × {WATCHERS} watchers) |",
            delivered as f64 / (total * WATCHERS) as f64
        ),
        format!(
            "| watch_fanout_latency_p50_us | {:.0} | | update sent → event received, all watchers |",
            percentile(&mut all, 50.0)
        ),
        format!(
            "| watch_fanout_latency_p99_us | {:.0} | | |",
            percentile(&mut all, 99.0)
        ),
    ]
}

/// A CRD version's schema; `rules` adds five CEL rules (across fields, a transition rule, a
/// `messageExpression`, a list rule with a `reason`, one on the resource).
fn crd(plural: &str, kind: &str, rules: bool) -> serde_json::Value {
    let mut schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "replicas": {"type": "integer"}, "minReplicas": {"type": "integer"},
            "mode": {"type": "string", "maxLength": 16},
            "name": {"type": "string", "maxLength": 63},
            "tags": {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 20}}}}}});
    if rules {
        schema["x-kubernetes-validations"] =
            json!([{"rule": "self.metadata.name.startsWith('obj-')"}]);
        let spec = &mut schema["properties"]["spec"];
        spec["x-kubernetes-validations"] = json!([{"rule": "self.minReplicas <= self.replicas",
            "message": "replicas must be at least minReplicas", "fieldPath": ".replicas"}]);
        spec["properties"]["mode"]["x-kubernetes-validations"] =
            json!([{"rule": "self == oldSelf", "message": "mode is immutable"}]);
        spec["properties"]["name"]["x-kubernetes-validations"] = json!([{"rule": "self.matches('^[a-z]+$')",
            "messageExpression": "'name ' + self + ' must be lowercase letters'"}]);
        spec["properties"]["tags"]["x-kubernetes-validations"] = json!([{"rule": "self.all(t, t != 'forbidden')",
            "reason": "FieldValueForbidden"}]);
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.bench.example.com")},
        "spec": {"group": "bench.example.com", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": schema}}]}})
}

async fn crd_rules_benchmark(client: &Client) -> Vec<String> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let mut apis = Vec::new();
    for (plural, kind, rules) in [("plains", "Plain", false), ("ruleds", "Ruled", true)] {
        let definition = serde_json::from_value(crd(plural, kind, rules)).expect("crd");
        crds.create(&PostParams::default(), &definition)
            .await
            .expect("create crd");
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bench.example.com", "v1", kind),
            plural,
        );
        apis.push((
            kind,
            Api::<DynamicObject>::namespaced_with(client.clone(), "default", &resource),
        ));
    }
    const SLICE: usize = 200;
    let mut per_create: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for run in 0..RUNS * 2 {
        for (which, (kind, api)) in apis.iter().enumerate() {
            let started = Instant::now();
            for i in 0..SLICE {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "bench.example.com/v1", "kind": kind,
                    "metadata": {"name": format!("obj-{run}-{i}")},
                    "spec": {"replicas": 3, "minReplicas": 1, "mode": "fast", "name": "web",
                        "tags": ["a", "b", "c"]}}))
                .expect("object");
                api.create(&PostParams::default(), &object)
                    .await
                    .expect("create");
            }
            per_create[which].push(started.elapsed().as_secs_f64() * 1e6 / SLICE as f64);
        }
    }
    let (pm, plo, phi) = median_min_max(per_create[0].clone());
    let (rm, rlo, rhi) = median_min_max(per_create[1].clone());
    let ratios: Vec<f64> = per_create[1]
        .iter()
        .zip(&per_create[0])
        .map(|(r, p)| r / p)
        .collect();
    let (qm, qlo, qhi) = median_min_max(ratios);
    vec![
        format!(
            "| crd_create_without_rules_us | {pm:.0} | {plo:.0}–{phi:.0} | create of a custom resource over HTTPS, {SLICE} a slice |"
        ),
        format!(
            "| crd_create_with_5_rules_us | {rm:.0} | {rlo:.0}–{rhi:.0} | the same with five CEL rules on its CRD (compiled once) |"
        ),
        format!(
            "| crd_create_rules_ratio | {qm:.2}× | {qlo:.2}–{qhi:.2} | with rules / without, slice-paired |"
        ),
    ]
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let rows = runtime.block_on(async {
        let cluster = Arc::new(Server::builder().start().await.expect("start"));
        let cms: Api<ConfigMap> = Api::namespaced(client(&cluster).await, "default");
        let mut rows = list_benchmark(&cms).await;
        rows.extend(watch_benchmark(&cms).await);
        rows.extend(crd_rules_benchmark(&client(&cluster).await).await);
        rows
    });
    println!("| figure | median | min–max | what |");
    println!("|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
}
