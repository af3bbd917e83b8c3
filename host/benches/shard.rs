//! Guests sharded across replicas (`krec run --shard`): the scaling curve and the failover time.
//!
//! Six guests (the stamper: read a ConfigMap, patch an annotation with its value), each over its
//! own namespace of [`OBJECTS`] ConfigMaps (write rate limits lifted, so that the guests'
//! work rather than their client-side throttling is measured), run on 1, 2 and 3 replicas — `krec run --shard`
//! processes against one embedded API server in another process (`krec cluster`, bare), so each
//! process's CPU is its own. Per replica count: the time from a bulk update of every ConfigMap
//! until every one is stamped with its new value (converged), as reconciles per second, and the
//! CPU-seconds the replicas spent per 1 000 reconciles. Ratios are against one replica, in the
//! same run. The machine's cores bound the curve: the replicas share them.
//!
//! Failover: three replicas; one is SIGKILLed ([`KILLS`] times, a fresh replica started after
//! each and the guests back to 2/2/2), and the time from the kill until every guest runs again
//! (the survivors' `krec_shard_guest_owned`) is measured, with Lease timings of 2 s / 1.5 s /
//! 200 ms (duration, renew deadline, retry period). Expected: about the lease duration plus one
//! or two retry periods.
//!
//! `KREC_BENCH_QUICK=1`: one round per replica count, three kills.

mod common;
// The host tests' harness: this benchmark uses part of it.
#[path = "../tests/all/common.rs"]
#[allow(dead_code)]
mod process;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{ClusterProcess, cpu_seconds_of, median_min_max, quick};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams, PostParams};
use process::Host;
use serde_json::{Value, json};

const GUESTS: usize = 6;
const OBJECTS: usize = 300;
const KILLS: usize = 10;
const LEASE: Duration = Duration::from_secs(2);

fn manifest_dir(dir: &Path) -> PathBuf {
    process::stamper_manifests(
        dir,
        GUESTS,
        "  maxConcurrentReconciles: 2\n  limits: {writeQps: 100000, writeBurst: 100000}\n",
    )
}

fn replica(manifests: &Path, kubeconfig: &Path, cache: &Path) -> Host {
    Host::start(manifests, kubeconfig, cache, process::SHARD_ARGS)
}

fn owned(host: &Host) -> BTreeSet<String> {
    host.owned().unwrap_or_default()
}

/// Every guest runs in exactly one of `hosts`, the counts differing by at most one.
fn balanced(hosts: &[Host]) -> bool {
    let sets: Vec<BTreeSet<String>> = hosts.iter().map(owned).collect();
    let total: usize = sets.iter().map(BTreeSet::len).sum();
    let union: BTreeSet<&String> = sets.iter().flatten().collect();
    let (min, max) = (
        sets.iter().map(BTreeSet::len).min().unwrap_or(0),
        sets.iter().map(BTreeSet::len).max().unwrap_or(0),
    );
    total == GUESTS && union.len() == GUESTS && max - min <= 1
}

fn wait(what: &str, limit: Duration, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    started.elapsed()
}

/// Set every ConfigMap's value to `value`; wait until every one is stamped with it.
async fn bulk_round(client: &kube::Client, value: &str) -> Duration {
    let started = Instant::now();
    let mut writes = Vec::new();
    for i in 0..GUESTS {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("shard-{i}"));
        for j in 0..OBJECTS {
            let maps = maps.clone();
            let patch = json!({"data": {"value": value}});
            writes.push(async move {
                maps.patch(
                    &format!("cm-{j}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
                .expect("update");
            });
        }
    }
    futures::stream::iter(writes)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    loop {
        let mut behind = 0;
        for i in 0..GUESTS {
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("shard-{i}"));
            for cm in maps.list(&Default::default()).await.expect("list") {
                let stamped = cm
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("krec.dev/stamped-value"));
                if stamped.map(String::as_str) != Some(value) {
                    behind += 1;
                }
            }
        }
        if behind == 0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{behind} not stamped"
        );
        // Listing 1 800 objects is work for the API server too: not too often.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn main() {
    let rounds = if quick() { 1 } else { 3 };
    let kills = if quick() { 3 } else { KILLS };
    let cluster = ClusterProcess::start();
    let kubeconfig = cluster.kubeconfig_path.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = manifest_dir(dir.path());
    let cache = dir.path().join("cache");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let client = runtime.block_on(async {
        let client = krec::cluster::connect::client_from_kubeconfig(
            &std::fs::read_to_string(&kubeconfig).expect("kc"),
        )
        .await
        .expect("client");
        for i in 0..GUESTS {
            let ns = serde_json::from_value(json!({"metadata": {"name": format!("shard-{i}")}}))
                .expect("ns");
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace");
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("shard-{i}"));
            for j in 0..OBJECTS {
                let cm = serde_json::from_value(
                    json!({"metadata": {"name": format!("cm-{j}")}, "data": {"value": "0"}}),
                )
                .expect("cm");
                maps.create(&PostParams::default(), &cm).await.expect("cm");
            }
        }
        client
    });
    // Compile the module once, outside the measured runs.
    drop(replica(&manifests, &kubeconfig, &cache));

    let mut figures = serde_json::Map::new();
    let mut rows = Vec::new();
    let mut baseline: Option<(f64, f64)> = None;
    let reconciles = (GUESTS * OBJECTS) as f64;
    let mut value = 0u64;
    for replicas in 1..=3 {
        let hosts: Vec<Host> = (0..replicas)
            .map(|_| replica(&manifests, &kubeconfig, &cache))
            .collect();
        wait("the guests to spread", Duration::from_secs(60), || {
            balanced(&hosts)
        });
        // Let the initial sync's reconciles finish.
        value += 1;
        runtime.block_on(bulk_round(&client, &value.to_string()));
        let mut rates = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..rounds {
            value += 1;
            let before: f64 = hosts.iter().map(|h| cpu_seconds_of(h.child.id())).sum();
            let took = runtime.block_on(bulk_round(&client, &value.to_string()));
            let after: f64 = hosts.iter().map(|h| cpu_seconds_of(h.child.id())).sum();
            rates.push(reconciles / took.as_secs_f64());
            cpu.push((after - before) / reconciles * 1000.0);
        }
        let (rate, rate_min, rate_max) = median_min_max(rates);
        let (cpu_k, cpu_min, cpu_max) = median_min_max(cpu);
        let (base_rate, base_cpu) = *baseline.get_or_insert((rate, cpu_k));
        rows.push(format!(
            "| {replicas} replica(s): converged | {rate:.0} reconciles/s ({:.2}×) | {rate_min:.0}–{rate_max:.0} | {GUESTS} guests, {} objects, bulk update |",
            rate / base_rate,
            GUESTS * OBJECTS
        ));
        rows.push(format!(
            "| {replicas} replica(s): CPU | {cpu_k:.3} s / 1 000 reconciles ({:.2}×) | {cpu_min:.3}–{cpu_max:.3} | summed over the replicas |",
            cpu_k / base_cpu
        ));
        figures.insert(
            format!("shard_{replicas}_reconciles_per_second"),
            json!(rate),
        );
        figures.insert(format!("shard_{replicas}_vs_1"), json!(rate / base_rate));
        figures.insert(
            format!("shard_{replicas}_cpu_seconds_per_1000"),
            json!(cpu_k),
        );
    }

    // Failover: kill one of three, time until every guest runs again.
    let mut hosts: Vec<Host> = (0..3)
        .map(|_| replica(&manifests, &kubeconfig, &cache))
        .collect();
    let mut failovers = Vec::new();
    for kill in 0..kills {
        wait("2/2/2", Duration::from_secs(60), || balanced(&hosts));
        // Kill a different position each time; rounds of the renewals are not aligned to it.
        std::thread::sleep(Duration::from_millis(137 * (kill as u64 % 7)));
        let victim = hosts.remove(kill % 3);
        victim.signal("-KILL");
        let killed = Instant::now();
        wait("the guests to move", Duration::from_secs(60), || {
            let union: BTreeSet<String> = hosts.iter().flat_map(owned).collect();
            union.len() == GUESTS
        });
        failovers.push(killed.elapsed().as_secs_f64());
        drop(victim);
        hosts.push(replica(&manifests, &kubeconfig, &cache));
    }
    let (median, min, max) = median_min_max(failovers.clone());
    rows.push(format!(
        "| failover | {median:.2} s ({:.2}× the lease) | {min:.2}–{max:.2} | {kills} SIGKILLs of 1 of 3 replicas, lease {:.0} s, retry 200 ms |",
        median / LEASE.as_secs_f64(),
        LEASE.as_secs_f64()
    ));
    figures.insert("shard_failover_seconds_median".into(), json!(median));
    figures.insert("shard_failover_seconds_max".into(), json!(max));
    figures.insert(
        "shard_failover_seconds".into(),
        Value::Array(failovers.into_iter().map(|f| json!(f)).collect()),
    );
    common::print_table(&rows);
    common::write_results(figures);
    drop(hosts);
}
