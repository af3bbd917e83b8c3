//! The embedded API server before and after issue 11 (its own crate, protobuf, defaulting,
//! validation, field ownership with `managedFields`, field validation, OpenAPI): the same load,
//! through `kube` over HTTPS, against `krec cluster` of the baseline commit and of this build,
//! each in its own process, interleaved round by round in one run (the order alternating), so
//! both meet the same machine. Figures are this build's over the baseline's.
//!
//! The baseline binary is `KREC_BASELINE_BIN`, else `.tools/krec-baseline` (`make
//! bench-baseline` builds it from commit 98e0e9c, the last before issue 11).
//!
//! Loads, each in a fresh namespace per round and server:
//! - writes: sequential creates of ConfigMaps and of Deployments (a pod template: defaults,
//!   validation, managedFields), merge patches and server-side applies of those Deployments,
//!   each twice: through kube's typed `Api` (the answer decoded into `k8s-openapi` types, as a
//!   controller does) and as raw requests whose answers are read but not decoded (`raw_*`: the
//!   server's own write path and the transport, without the client's decoding of the larger
//!   objects kube-apiserver answers with);
//! - list: full lists of 5 000 ConfigMaps (created once per server, not timed);
//! - watch: merge patches at 1 000/s for 2 s fanned out to 10 watches, delivery latency.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{ClusterProcess, cpu_seconds_of, median_min_max, percentile, quick};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};

const LIST_OBJECTS: usize = 5_000;
const WATCHERS: usize = 10;
const WATCH_EVENTS: usize = 2_000;

struct Load {
    writes: usize,
    rounds: usize,
    lists: usize,
}

fn load() -> Load {
    if quick() {
        Load {
            writes: 100,
            rounds: 2,
            lists: 3,
        }
    } else {
        Load {
            writes: 500,
            rounds: 5,
            lists: 5,
        }
    }
}

fn baseline_binary() -> PathBuf {
    let path = std::env::var_os("KREC_BASELINE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo().join(".tools/krec-baseline"));
    assert!(
        path.exists(),
        "{} is missing: run `make bench-baseline` (builds krec at the commit before issue 11)",
        path.display()
    );
    path
}

async fn client(cluster: &ClusterProcess) -> Client {
    let text = std::fs::read_to_string(&cluster.kubeconfig_path).expect("kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

async fn namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let object = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &object)
        .await
        .expect("create namespace");
}

fn configmap(i: usize) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": format!("cm-{i:05}"),
        "labels": {"app": "bench", "shard": format!("{}", i % 16)}},
        "data": {"payload": "x".repeat(300), "index": i.to_string()}}))
    .expect("configmap")
}

fn deployment(i: usize) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("web-{i:04}"), "labels": {"app": "web"}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "i": i.to_string()}},
            "template": {"metadata": {"labels": {"app": "web", "i": i.to_string()}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1.2.3",
                    "ports": [{"containerPort": 8080}],
                    "env": [{"name": "MODE", "value": "fast"}, {"name": "LEVEL", "value": "3"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}})
}

/// Send one write and read its answer as text, not decoded (a failure status panics).
async fn raw(client: &Client, method: http::Method, uri: String, content_type: &str, body: &Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .header(http::header::ACCEPT, "application/json")
        .body(serde_json::to_vec(body).expect("body"))
        .expect("request");
    client.request_text(request).await.expect("raw write");
}

/// Operations per second of `n` sequential calls of `op`.
async fn rate<F, Fut>(n: usize, op: F) -> f64
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    for i in 0..n {
        op(i).await;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn round(
    client: &Client,
    server_pid: u32,
    round: usize,
    load: &Load,
) -> Vec<(&'static str, f64)> {
    let ns = format!("round-{round}");
    namespace(client, &ns).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let mut figures = Vec::new();

    let (server_cpu, client_cpu) = (cpu_seconds_of(server_pid), common::process_cpu_seconds());
    let create_cm = rate(load.writes, |i| {
        let cms = cms.clone();
        async move {
            cms.create(&PostParams::default(), &configmap(i))
                .await
                .expect("create configmap");
        }
    })
    .await;
    figures.push(("create_configmap_per_s", create_cm));

    let create_deploy = rate(load.writes, |i| {
        let deployments = deployments.clone();
        async move {
            let object: Deployment = serde_json::from_value(deployment(i)).expect("deployment");
            deployments
                .create(&PostParams::default(), &object)
                .await
                .expect("create deployment");
        }
    })
    .await;
    figures.push(("create_deployment_per_s", create_deploy));

    let patch_deploy = rate(load.writes, |i| {
        let deployments = deployments.clone();
        async move {
            let patch = json!({"metadata": {"labels": {"round": "x"}}, "spec": {"replicas": 3}});
            deployments
                .patch(
                    &format!("web-{i:04}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .expect("patch deployment");
        }
    })
    .await;
    figures.push(("merge_patch_deployment_per_s", patch_deploy));

    let apply_deploy = rate(load.writes, |i| {
        let deployments = deployments.clone();
        async move {
            let mut config = deployment(i);
            config["spec"]["replicas"] = json!(4);
            deployments
                .patch(
                    &format!("web-{i:04}"),
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(config),
                )
                .await
                .expect("apply deployment");
        }
    })
    .await;
    figures.push(("apply_deployment_per_s", apply_deploy));
    let client_us = (common::process_cpu_seconds() - client_cpu) * 1e6 / (4 * load.writes) as f64;
    figures.extend(raw_writes(client, &ns, load).await);
    let writes = (8 * load.writes) as f64;
    let server_us = (cpu_seconds_of(server_pid) - server_cpu) * 1e6 / writes;
    figures.push(("server_cpu_us_per_write", server_us));
    figures.push(("client_cpu_us_per_write", client_us));

    let all: Api<ConfigMap> = Api::namespaced(client.clone(), "listed");
    let mut lists = Vec::new();
    for _ in 0..load.lists {
        let started = Instant::now();
        let listed = all.list(&ListParams::default()).await.expect("list");
        lists.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(listed.items.len(), LIST_OBJECTS);
    }
    figures.push(("list_5k_configmaps_ms", median_min_max(lists).0));

    let (p50, p99, delivered) = watch_fanout(&cms).await;
    figures.push(("watch_latency_p50_us", p50));
    figures.push(("watch_latency_p99_us", p99));
    figures.push(("watch_delivered_ratio", delivered));
    figures
}

/// The four writes of [`round`] again, under other names, as raw requests whose answers are
/// not decoded: rates per second.
async fn raw_writes(client: &Client, ns: &str, load: &Load) -> Vec<(&'static str, f64)> {
    let cms = format!("/api/v1/namespaces/{ns}/configmaps");
    let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
    let renamed = |i: usize| {
        let mut object = deployment(i);
        object["metadata"]["name"] = json!(format!("raw-{i:04}"));
        object
    };
    let mut figures = Vec::new();
    let create_cm = rate(load.writes, |i| {
        let mut object = serde_json::to_value(configmap(i)).expect("configmap");
        object["metadata"]["name"] = json!(format!("raw-{i:05}"));
        let uri = cms.clone();
        async move { raw(client, http::Method::POST, uri, "application/json", &object).await }
    })
    .await;
    figures.push(("raw_create_configmap_per_s", create_cm));
    let create = rate(load.writes, |i| {
        let (uri, object) = (deployments.clone(), renamed(i));
        async move { raw(client, http::Method::POST, uri, "application/json", &object).await }
    })
    .await;
    figures.push(("raw_create_deployment_per_s", create));
    let patch = rate(load.writes, |i| {
        let uri = format!("{deployments}/raw-{i:04}");
        let patch = json!({"metadata": {"labels": {"round": "x"}}, "spec": {"replicas": 3}});
        async move {
            raw(
                client,
                http::Method::PATCH,
                uri,
                "application/merge-patch+json",
                &patch,
            )
            .await
        }
    })
    .await;
    figures.push(("raw_merge_patch_deployment_per_s", patch));
    let apply = rate(load.writes, |i| {
        let uri = format!("{deployments}/raw-{i:04}?fieldManager=bench&force=true");
        let mut config = renamed(i);
        config["spec"]["replicas"] = json!(4);
        async move {
            raw(
                client,
                http::Method::PATCH,
                uri,
                "application/apply-patch+yaml",
                &config,
            )
            .await
        }
    })
    .await;
    figures.push(("raw_apply_deployment_per_s", apply));
    figures
}

/// Patches at 1 000/s to one ConfigMap, watched by [`WATCHERS`] watches: p50 and p99 of sent →
/// received, and the share of events delivered.
async fn watch_fanout(cms: &Api<ConfigMap>) -> (f64, f64, f64) {
    let target = cms
        .create(&PostParams::default(), &configmap(99_999))
        .await
        .expect("target");
    let from = target.metadata.resource_version.expect("rv");
    let interval = Duration::from_millis(1);
    let mut fanout =
        common::watch_fanout(cms, "cm-99999", &from, WATCH_EVENTS, interval, WATCHERS).await;
    let delivered = fanout.latencies.len() as f64 / (WATCH_EVENTS * WATCHERS) as f64;
    (
        percentile(&mut fanout.latencies, 50.0),
        percentile(&mut fanout.latencies, 99.0),
        delivered,
    )
}

async fn fill_list_namespace(client: &Client) {
    namespace(client, "listed").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "listed");
    futures::stream::iter(0..LIST_OBJECTS)
        .map(|i| {
            let cms = cms.clone();
            async move { cms.create(&PostParams::default(), &configmap(i)).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("create configmaps");
}

/// One figure over the rounds: its name, the baseline's values, this build's, and their ratios.
type Figure = (&'static str, Vec<f64>, Vec<f64>, Vec<f64>);

fn main() {
    let load = load();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let servers = [
        (
            "baseline",
            ClusterProcess::start_binary(&baseline_binary(), &[]),
        ),
        ("current", ClusterProcess::start()),
    ];
    let mut results: Vec<Figure> = Vec::new();
    runtime.block_on(async {
        let mut clients = Vec::new();
        for (_, server) in &servers {
            let client = client(server).await;
            fill_list_namespace(&client).await;
            clients.push(client);
        }
        for r in 0..load.rounds {
            // Alternate which server goes first, so neither always meets a warmer machine.
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            let mut by_server: [Vec<(&'static str, f64)>; 2] = [Vec::new(), Vec::new()];
            for s in order {
                by_server[s] = round(&clients[s], servers[s].1.pid(), r, &load).await;
            }
            for ((name, before), (_, after)) in by_server[0].iter().zip(&by_server[1]) {
                let slot = match results.iter_mut().position(|(n, ..)| n == name) {
                    Some(i) => &mut results[i],
                    None => {
                        results.push((name, Vec::new(), Vec::new(), Vec::new()));
                        results.last_mut().expect("just pushed")
                    }
                };
                slot.1.push(*before);
                slot.2.push(*after);
                slot.3.push(after / before);
            }
        }
    });
    println!(
        "| figure | baseline median (min–max) | current median (min–max) | current / baseline median (min–max) |"
    );
    println!("|---|---|---|---|");
    let mut json = serde_json::Map::new();
    for (name, before, after, ratios) in results {
        let (bm, blo, bhi) = median_min_max(before);
        let (am, alo, ahi) = median_min_max(after);
        let (rm, rlo, rhi) = median_min_max(ratios);
        println!(
            "| {name} | {bm:.1} ({blo:.1}–{bhi:.1}) | {am:.1} ({alo:.1}–{ahi:.1}) | {rm:.2}× ({rlo:.2}–{rhi:.2}) |"
        );
        json.insert(format!("server_versions_{name}_ratio"), json!(rm));
    }
    println!(
        "({} rounds of {} writes each; per-second figures: higher is better; ms and µs: lower)",
        load.rounds, load.writes
    );
    common::write_results(json);
}
