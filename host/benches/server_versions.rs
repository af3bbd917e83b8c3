//! The embedded API server before and after issue 11 (its own crate, protobuf, defaulting,
//! validation, field ownership with `managedFields`, field validation, OpenAPI): the same load,
//! through `kube` over HTTPS, against `krec cluster` of the baseline commit and of this build,
//! each in its own process, in one run. Writes are interleaved slice by slice (50 writes to one
//! server, then 50 to the other, the order alternating), so the two rates of each pair meet the
//! same machine; a figure is the median of the pairs' ratios. Figures are this build's over the
//! baseline's.
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

/// The operations measured, each the `i`-th of its kind in a round's namespace.
#[derive(Clone, Copy)]
enum Op {
    CreateConfigMap,
    CreateDeployment,
    MergePatchDeployment,
    ApplyDeployment,
}

impl Op {
    const ALL: [Op; 4] = [
        Op::CreateConfigMap,
        Op::CreateDeployment,
        Op::MergePatchDeployment,
        Op::ApplyDeployment,
    ];

    /// The operation's part of its figures' names.
    fn name(self) -> &'static str {
        match self {
            Op::CreateConfigMap => "create_configmap",
            Op::CreateDeployment => "create_deployment",
            Op::MergePatchDeployment => "merge_patch_deployment",
            Op::ApplyDeployment => "apply_deployment",
        }
    }
}

/// One kind of write: an operation sent typed (through kube's `Api`, the answer decoded, as a
/// controller does) or raw (the answer read as text: the server and the transport alone).
#[derive(Clone, Copy)]
struct Write {
    op: Op,
    raw: bool,
}

/// Every kind of write: the operations typed, then raw.
fn writes() -> impl Iterator<Item = Write> {
    [false, true]
        .into_iter()
        .flat_map(|raw| Op::ALL.map(|op| Write { op, raw }))
}

/// The merge patch both ways send.
fn merge_patch() -> Value {
    json!({"metadata": {"labels": {"round": "x"}}, "spec": {"replicas": 3}})
}

/// The applied configuration of Deployment `i` (its replicas changed).
fn applied(i: usize) -> Value {
    let mut config = deployment(i);
    config["spec"]["replicas"] = json!(4);
    config
}

impl Write {
    fn prefix(self) -> &'static str {
        if self.raw { "raw_" } else { "" }
    }

    /// Its rate's figure: `create_deployment_per_s`, `raw_create_deployment_per_s`.
    fn figure(self) -> String {
        format!("{}{}_per_s", self.prefix(), self.op.name())
    }

    /// The server's CPU per write of this kind: `server_cpu_us_per_raw_create_deployment`.
    fn server_cpu_figure(self) -> String {
        format!("server_cpu_us_per_{}{}", self.prefix(), self.op.name())
    }

    /// Send write `i` of this kind to the server behind `client`, in namespace `ns`.
    async fn send(self, client: &Client, ns: &str, i: usize) {
        if self.raw {
            let (method, uri, content_type, body) = self.op.raw_request(ns, i);
            raw(client, method, uri, content_type, &body).await;
        } else {
            self.op.send_typed(client, ns, i).await;
        }
    }
}

impl Op {
    /// Write `i` through kube's typed `Api`.
    async fn send_typed(self, client: &Client, ns: &str, i: usize) {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let name = format!("web-{i:04}");
        match self {
            Op::CreateConfigMap => {
                let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                cms.create(&PostParams::default(), &configmap(i))
                    .await
                    .expect("create configmap");
            }
            Op::CreateDeployment => {
                let object: Deployment = serde_json::from_value(deployment(i)).expect("deployment");
                deployments
                    .create(&PostParams::default(), &object)
                    .await
                    .expect("create deployment");
            }
            Op::MergePatchDeployment => {
                let patch = Patch::Merge(merge_patch());
                deployments
                    .patch(&name, &PatchParams::default(), &patch)
                    .await
                    .expect("patch deployment");
            }
            Op::ApplyDeployment => {
                let patch = Patch::Apply(applied(i));
                deployments
                    .patch(&name, &PatchParams::apply("bench").force(), &patch)
                    .await
                    .expect("apply deployment");
            }
        }
    }

    /// Write `i` as a raw request (method, URI, content type, body), on objects named `raw-…`
    /// beside the typed writes' ones.
    fn raw_request(self, ns: &str, i: usize) -> (http::Method, String, &'static str, Value) {
        let deployments = format!("/apis/apps/v1/namespaces/{ns}/deployments");
        let renamed = |mut object: Value| {
            object["metadata"]["name"] = json!(format!("raw-{i:04}"));
            object
        };
        match self {
            Op::CreateConfigMap => {
                let mut object = serde_json::to_value(configmap(i)).expect("configmap");
                object["metadata"]["name"] = json!(format!("raw-{i:05}"));
                let uri = format!("/api/v1/namespaces/{ns}/configmaps");
                (http::Method::POST, uri, "application/json", object)
            }
            Op::CreateDeployment => (
                http::Method::POST,
                deployments,
                "application/json",
                renamed(deployment(i)),
            ),
            Op::MergePatchDeployment => (
                http::Method::PATCH,
                format!("{deployments}/raw-{i:04}"),
                "application/merge-patch+json",
                merge_patch(),
            ),
            Op::ApplyDeployment => (
                http::Method::PATCH,
                format!("{deployments}/raw-{i:04}?fieldManager=bench&force=true"),
                "application/apply-patch+yaml",
                renamed(applied(i)),
            ),
        }
    }
}

/// Writes per slice: each server sends this many of a kind, then the other does, so the two
/// rates of a pair are measured tens of milliseconds apart, on the same machine (this VM's
/// speed drifts by a third within minutes, far more than the differences measured).
const SLICE: usize = 50;

/// What one round's writes measured: per figure, each slice's rate on both servers.
#[derive(Default)]
struct Rates {
    /// (figure, baseline rate, current rate) per slice.
    slices: Vec<(String, f64, f64)>,
    /// CPU seconds each server spent from the round's first write to its last (including
    /// while the other server's slices ran: idle, watch and timer work), per server.
    server_cpu: [f64; 2],
    /// CPU seconds each server spent on each kind of write (summed over its slices).
    server_cpu_by_kind: Vec<(String, [f64; 2])>,
    /// CPU seconds this process spent on the typed writes to each server.
    client_cpu: [f64; 2],
}

/// Every write kind of a round, sent to both servers slice by slice, the order alternating.
async fn paired_writes(clients: &[Client; 2], pids: [u32; 2], ns: &str, load: &Load) -> Rates {
    let mut rates = Rates::default();
    let server_cpu = pids.map(cpu_seconds_of);
    for write in writes() {
        let mut by_kind = [0.0; 2];
        for slice in 0..load.writes.div_ceil(SLICE) {
            let order = if slice % 2 == 0 { [0, 1] } else { [1, 0] };
            let mut rate = [0.0; 2];
            for s in order {
                let client_cpu = common::process_cpu_seconds();
                let server_before = cpu_seconds_of(pids[s]);
                let started = Instant::now();
                let from = slice * SLICE;
                let to = (from + SLICE).min(load.writes);
                for i in from..to {
                    write.send(&clients[s], ns, i).await;
                }
                rate[s] = (to - from) as f64 / started.elapsed().as_secs_f64();
                by_kind[s] += cpu_seconds_of(pids[s]) - server_before;
                if !write.raw {
                    rates.client_cpu[s] += common::process_cpu_seconds() - client_cpu;
                }
            }
            rates.slices.push((write.figure(), rate[0], rate[1]));
        }
        rates
            .server_cpu_by_kind
            .push((write.server_cpu_figure(), by_kind));
    }
    for s in 0..2 {
        rates.server_cpu[s] = cpu_seconds_of(pids[s]) - server_cpu[s];
    }
    rates
}

/// A server's list and watch figures for a round.
async fn reads(client: &Client, ns: &str, load: &Load) -> Vec<(&'static str, f64)> {
    let mut figures = Vec::new();
    let all: Api<ConfigMap> = Api::namespaced(client.clone(), "listed");
    let mut lists = Vec::new();
    for _ in 0..load.lists {
        let started = Instant::now();
        let listed = all.list(&ListParams::default()).await.expect("list");
        lists.push(started.elapsed().as_secs_f64() * 1e3);
        assert_eq!(listed.items.len(), LIST_OBJECTS);
    }
    figures.push(("list_5k_configmaps_ms", median_min_max(lists).0));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let (p50, p99, delivered) = watch_fanout(&cms).await;
    figures.push(("watch_latency_p50_us", p50));
    figures.push(("watch_latency_p99_us", p99));
    figures.push(("watch_delivered_ratio", delivered));
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
type Figure = (String, Vec<f64>, Vec<f64>, Vec<f64>);

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
        let clients: [Client; 2] = [clients[0].clone(), clients[1].clone()];
        let pids = [servers[0].1.pid(), servers[1].1.pid()];
        let mut record = |name: &str, before: f64, after: f64| {
            let slot = match results.iter_mut().position(|(n, ..)| n == name) {
                Some(i) => &mut results[i],
                None => {
                    results.push((name.to_owned(), Vec::new(), Vec::new(), Vec::new()));
                    results.last_mut().expect("just pushed")
                }
            };
            slot.1.push(before);
            slot.2.push(after);
            slot.3.push(after / before);
        };
        for r in 0..load.rounds {
            let ns = format!("round-{r}");
            for client in &clients {
                namespace(client, &ns).await;
            }
            let rates = paired_writes(&clients, pids, &ns, &load).await;
            for (name, before, after) in rates.slices {
                record(&name, before, after);
            }
            let per_write = |cpu: f64, writes: usize| cpu * 1e6 / writes as f64;
            let all_writes = writes().count() * load.writes;
            let typed_writes = writes().filter(|w| !w.raw).count() * load.writes;
            record(
                "server_cpu_us_per_write",
                per_write(rates.server_cpu[0], all_writes),
                per_write(rates.server_cpu[1], all_writes),
            );
            for (name, cpu) in rates.server_cpu_by_kind {
                record(
                    &name,
                    per_write(cpu[0], load.writes),
                    per_write(cpu[1], load.writes),
                );
            }
            record(
                "client_cpu_us_per_write",
                per_write(rates.client_cpu[0], typed_writes),
                per_write(rates.client_cpu[1], typed_writes),
            );
            // Reads, one server after the other (the order alternating).
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            let mut by_server: [Vec<(&'static str, f64)>; 2] = [Vec::new(), Vec::new()];
            for s in order {
                by_server[s] = reads(&clients[s], &ns, &load).await;
            }
            for ((name, before), (_, after)) in by_server[0].iter().zip(&by_server[1]) {
                record(name, *before, *after);
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
        "({} rounds of {} writes of each kind per server, sent in slices of {SLICE} to one \
         server then the other; per-second figures and their ratios are per slice pair, the \
         others per round; per-second figures: higher is better; ms and µs: lower)",
        load.rounds, load.writes
    );
    common::write_results(json);
}
