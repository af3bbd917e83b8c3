//! `krec run --shard` as three processes against one embedded API server, six guests: each
//! guest runs in exactly one process, 2/2/2; a SIGKILLed process's guests move to the others
//! within the lease duration and a renewal round; a process added back takes its share; and the
//! API server's audit log shows no guest ever written for by two replicas at once.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{Host, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const GUESTS: usize = 6;
const OBJECTS_PER_GUEST: usize = 4;
const LEASE: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(200);

/// Six manifests of the stamper guest, guest `g<i>` reconciling the ConfigMaps of `shard-<i>`.
fn manifest_dir(dir: &Path) -> PathBuf {
    common::stamper_manifests(dir, GUESTS, "")
}

fn start(manifests: &Path, kubeconfig: &Path, cache: &Path) -> Host {
    Host::start(manifests, kubeconfig, cache, common::SHARD_ARGS)
}

/// The guests `host` says it runs now; `None` when it does not answer.
fn owned(host: &Host) -> Option<BTreeSet<String>> {
    host.owned()
}

/// Owners of each guest in one pass over `hosts`.
fn owners(hosts: &[&Host]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for host in hosts {
        for guest in owned(host).unwrap_or_default() {
            *count.entry(guest).or_insert(0) += 1;
        }
    }
    count
}

fn all(hosts: &[Host]) -> Vec<&Host> {
    hosts.iter().collect()
}

fn spread(hosts: &[&Host]) -> Vec<usize> {
    hosts
        .iter()
        .map(|h| owned(h).map_or(0, |o| o.len()))
        .collect()
}

/// A run of writes for one guest by one replica: its identity, how many writes, when the first
/// arrived and when the last was answered (the audit log's timestamps).
#[derive(Debug)]
struct Run {
    identity: String,
    writes: usize,
    first: String,
    last: String,
}

/// Per guest (field manager `krec-g<i>`), the replicas that wrote for it in server order, as
/// runs of one writer.
fn writer_runs(events: &[Value]) -> BTreeMap<String, Vec<Run>> {
    let mut runs: BTreeMap<String, Vec<Run>> = BTreeMap::new();
    for event in events {
        let uri = event["requestURI"].as_str().unwrap_or_default();
        let Some(manager) = uri
            .split(['?', '&'])
            .find_map(|p| p.strip_prefix("fieldManager="))
        else {
            continue;
        };
        let Some(guest) = manager.strip_prefix("krec-") else {
            continue;
        };
        if event["responseStatus"]["code"].as_u64() != Some(200) {
            continue;
        }
        let agent = event["userAgent"].as_str().unwrap_or_default();
        let identity = agent
            .split_once(" (")
            .map_or(agent, |(_, rest)| rest.trim_end_matches(')'))
            .to_owned();
        let received = event["requestReceivedTimestamp"]
            .as_str()
            .unwrap_or_default();
        let answered = event["stageTimestamp"].as_str().unwrap_or_default();
        let guest_runs = runs.entry(guest.to_owned()).or_default();
        match guest_runs.last_mut() {
            Some(run) if run.identity == identity => {
                run.writes += 1;
                answered.clone_into(&mut run.last);
            }
            _ => guest_runs.push(Run {
                identity,
                writes: 1,
                first: received.to_owned(),
                last: answered.to_owned(),
            }),
        }
    }
    runs
}

/// How many times the replica writing `guest`'s Lease changed, in the audit log: every
/// successful write of a Lease (take, renewal, release) is by its holder, so this counts the
/// handovers (a release and a retake by one replica count none).
fn lease_handovers(events: &[Value], guest: &str) -> usize {
    let lease = format!("krec-{guest}");
    let writers: Vec<&str> = events
        .iter()
        .filter(|e| {
            e["objectRef"]["resource"] == "leases"
                && e["objectRef"]["name"] == lease.as_str()
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| c < 300)
        })
        .filter_map(|e| e["userAgent"].as_str())
        .collect();
    writers.windows(2).filter(|w| w[0] != w[1]).count()
}

/// The embedded API server with an audit log, six namespaces of ConfigMaps, the guests'
/// manifests and a module cache.
struct Setup {
    dir: tempfile::TempDir,
    cluster: krec_apiserver::Server,
    audit: Arc<krec_apiserver::audit::AuditLog>,
    client: kube::Client,
    kubeconfig: PathBuf,
    manifests: PathBuf,
}

impl Setup {
    async fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let audit = Arc::new(krec_apiserver::audit::AuditLog::in_memory());
        let cluster = krec_apiserver::Server::builder()
            .audit(audit.clone())
            .start()
            .await
            .expect("server");
        let kubeconfig = dir.path().join("kc.yaml");
        cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let client = krec::cluster::connect::client_from_kubeconfig(cluster.kubeconfig())
            .await
            .expect("client");
        for i in 0..GUESTS {
            let namespaces: Api<Namespace> = Api::all(client.clone());
            let ns = serde_json::from_value(json!({"metadata": {"name": format!("shard-{i}")}}))
                .expect("namespace");
            namespaces
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace");
            let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("shard-{i}"));
            for j in 0..OBJECTS_PER_GUEST {
                let cm = serde_json::from_value(
                    json!({"metadata": {"name": format!("cm-{j}")}, "data": {"value": "0"}}),
                )
                .expect("cm");
                maps.create(&PostParams::default(), &cm).await.expect("cm");
            }
        }
        let manifests = manifest_dir(dir.path());
        Setup {
            dir,
            cluster,
            audit,
            client,
            kubeconfig,
            manifests,
        }
    }

    fn host(&self) -> Host {
        start(
            &self.manifests,
            &self.kubeconfig,
            &self.dir.path().join("cache"),
        )
    }

    /// Keep changing every ConfigMap's value (so that every guest writes all along) until the
    /// returned flag is set; the task returns how many changes it made.
    fn drive(&self) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, flag) = (self.client.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let (mut value, mut written) = (0u64, 0u64);
            while !flag.load(Ordering::Relaxed) {
                value += 1;
                let i = value as usize % GUESTS;
                let j = (value as usize / GUESTS) % OBJECTS_PER_GUEST;
                let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("shard-{i}"));
                let patch = json!({"data": {"value": value.to_string()}});
                if maps
                    .patch(
                        &format!("cm-{j}"),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .is_ok()
                {
                    written += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            written
        });
        (stop, task)
    }

    /// Wait until every ConfigMap carries the stamp of its current value.
    async fn all_reconciled(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut behind = Vec::new();
            for i in 0..GUESTS {
                let maps: Api<ConfigMap> =
                    Api::namespaced(self.client.clone(), &format!("shard-{i}"));
                for cm in maps.list(&Default::default()).await.expect("list") {
                    let value = cm.data.as_ref().and_then(|d| d.get("value")).cloned();
                    let stamped = cm
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("krec.dev/stamped-value"))
                        .cloned();
                    if value != stamped {
                        behind.push(format!(
                            "shard-{i}/{}",
                            cm.metadata.name.unwrap_or_default()
                        ));
                    }
                }
            }
            if behind.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "not reconciled: {behind:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The audit log's check: per guest, every change of writer is a Lease transition (a second
    /// writer while the first still wrote would interleave them). Returns the writers' runs.
    fn no_double_writer(&self) -> BTreeMap<String, Vec<Run>> {
        let events = self.audit.events();
        let runs = writer_runs(&events);
        assert_eq!(runs.len(), GUESTS, "every guest wrote: {runs:?}");
        for (guest, guest_runs) in &runs {
            let switches = guest_runs.len() - 1;
            let handovers = lease_handovers(&events, guest);
            assert!(
                switches <= handovers,
                "{guest}: {switches} changes of writer but {handovers} handovers of its Lease: {guest_runs:?}"
            );
            // One writer's last write answered before the next one's first arrived.
            for pair in guest_runs.windows(2) {
                assert!(
                    pair[0].last < pair[1].first,
                    "{guest}: {} still wrote at {} when {} wrote at {}",
                    pair[0].identity,
                    pair[0].last,
                    pair[1].identity,
                    pair[1].first
                );
            }
        }
        runs
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sharded_hosts_should_run_each_guest_once_and_survive_a_kill() {
    let setup = Setup::new().await;
    let mut hosts: Vec<Host> = (0..3).map(|_| setup.host()).collect();
    wait_until("the guests spread 2/2/2", Duration::from_secs(60), || {
        spread(&all(&hosts)) == [2, 2, 2]
    });
    let (stop, driver) = setup.drive();

    let mut doubled_before = BTreeSet::new();
    let sample = |hosts: &[&Host], doubled_before: &mut BTreeSet<String>| {
        let counts = owners(hosts);
        let doubled: BTreeSet<String> = counts
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(g, _)| g.clone())
            .collect();
        let twice: Vec<&String> = doubled.intersection(doubled_before).collect();
        assert!(twice.is_empty(), "guests run in two processes: {twice:?}");
        *doubled_before = doubled;
        counts
    };
    for _ in 0..20 {
        let counts = sample(&all(&hosts), &mut doubled_before);
        assert_eq!(counts.len(), GUESTS, "every guest runs: {counts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // SIGKILL one: its guests move to the other two.
    let victim = hosts.remove(0);
    let orphaned = owned(&victim).expect("victim's guests");
    victim.signal("-KILL");
    let killed = Instant::now();
    loop {
        let counts = sample(&all(&hosts), &mut doubled_before);
        if counts.len() == GUESTS {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the guests {orphaned:?} never moved: {counts:?}\n{}",
            hosts.iter().map(Host::log).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failover = killed.elapsed();
    println!("guests {orphaned:?} moved {failover:?} after the kill (lease 2 s, retry 200 ms)");
    // The takers' clocks start when they see the last renewal (≤ one retry period late) and
    // they act at their next round (≤ one more): lease + 2 × retry, plus the rounds' own time
    // and scheduling slack on a busy 2-core machine (the benchmark measures it quietly:
    // BENCHMARKS.md, 2.07 s median, 2.13 s max).
    assert!(
        failover < LEASE + RETRY * 2 + Duration::from_millis(1500),
        "failover took {failover:?}"
    );
    wait_until("3/3 over the survivors", Duration::from_secs(10), || {
        spread(&all(&hosts)) == [3, 3]
    });

    // One process added back: the others hand it its share, 2/2/2 again.
    hosts.push(setup.host());
    let joined = Instant::now();
    loop {
        sample(&all(&hosts), &mut doubled_before);
        if spread(&all(&hosts)) == [2, 2, 2] {
            break;
        }
        assert!(joined.elapsed() < Duration::from_secs(30), "no rebalance");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "rebalanced 2/2/2 {:?} after a host joined",
        joined.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    assert!(driver.await.expect("driver") > 100, "the driver wrote");
    setup.all_reconciled().await;
    let runs = setup.no_double_writer();
    let identities: BTreeSet<&str> = runs
        .values()
        .flatten()
        .map(|r| r.identity.as_str())
        .collect();
    assert!(
        identities.len() >= 3,
        "writes carry the replicas' identities: {identities:?}"
    );
    println!("writers per guest: {runs:?}");
}

/// A replica cut off from the Leases (every Lease request it sends fails) while it can still
/// reach everything else stops writing for its guests before another replica takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_renew_should_stop_writing_before_its_guests_move() {
    let setup = Setup::new().await;
    let hosts = [setup.host(), setup.host()];
    wait_until("the guests spread 3/3", Duration::from_secs(60), || {
        spread(&all(&hosts)) == [3, 3]
    });
    let (stop, driver) = setup.drive();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cut = owned(&hosts[0]).expect("the first host's guests");
    let leases = setup
        .cluster
        .store()
        .registry()
        .by_plural("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    let any = cut.iter().next().expect("a guest");
    let lease = setup
        .cluster
        .store()
        .get(&leases, Some("default"), &format!("krec-{any}"))
        .expect("its Lease");
    let identity = lease["spec"]["holderIdentity"]
        .as_str()
        .expect("holder")
        .to_owned();
    setup.cluster.faults().add(
        krec_apiserver::faults::Rule::new(krec_apiserver::faults::Fault::Error { status: 503 })
            .resources(&["leases.coordination.k8s.io"])
            .user_agent(&format!("({identity})")),
    );
    let partitioned = Instant::now();
    // The audit log's timestamp format, to tell the writes before the cut from those after.
    let cut_at = format!("{:.6}", k8s_openapi::jiff::Timestamp::now());
    wait_until(
        "the other host to run every guest",
        Duration::from_secs(30),
        || owned(&hosts[1]).is_some_and(|o| o.len() == GUESTS),
    );
    println!(
        "guests {cut:?} moved {:?} after their replica was cut off",
        partitioned.elapsed()
    );
    assert_eq!(
        owned(&hosts[0]),
        Some(BTreeSet::new()),
        "the cut-off replica stopped them"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    assert!(driver.await.expect("driver") > 100, "the driver wrote");
    // The writes up to here: once the faults are gone the cut-off replica rejoins and may take
    // guests back.
    let until_healed = setup.audit.events();
    setup.cluster.faults().clear();
    setup.all_reconciled().await;
    setup.no_double_writer();
    let runs = writer_runs(&until_healed);
    for guest in &cut {
        let guest_runs = &runs[guest.as_str()];
        // The cut-off replica's writes for the guest form one run, the taker's come after it,
        // and the cut-off replica wrote nothing more before it was healed.
        let at_cut = guest_runs
            .iter()
            .rposition(|r| r.identity == identity && r.first < cut_at)
            .unwrap_or_else(|| {
                panic!("{guest}: the cut-off replica wrote before the cut: {guest_runs:?}")
            });
        let Some(next) = guest_runs.get(at_cut + 1) else {
            panic!("{guest}: no other replica wrote after the cut: {guest_runs:?}");
        };
        assert!(
            guest_runs[at_cut + 1..]
                .iter()
                .all(|r| r.identity != identity),
            "{guest}: the cut-off replica wrote again after the taker began: {guest_runs:?}"
        );
        let last = &guest_runs[at_cut];
        assert!(
            last.last < next.first,
            "{guest}: the cut-off replica's last write ({}) answered after the taker's first ({})",
            last.last,
            next.first
        );
        println!(
            "{guest}: last write of the cut-off replica {} · first of the taker {}",
            last.last, next.first
        );
    }
}

/// The status of Reconciler `shard-<i>/g`, read as the admin.
async fn reconciler_status(client: &kube::Client, i: usize) -> Value {
    let api = krec::cluster::client::ApiClient::new(client.clone());
    let gvk = krec::guests::from_cluster::reconciler_gvk();
    api.get(&gvk, Some(&format!("shard-{i}")), "g")
        .await
        .map(|o| o["status"].clone())
        .unwrap_or(Value::Null)
}

/// The holder of the Lease of guest `guest`.
async fn lease_holder(client: &kube::Client, guest: &str) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "default");
    leases
        .get_opt(&format!("krec-{guest}"))
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_hosts_should_run_reconciler_objects_once_with_status_from_the_holder() {
    let setup = Setup::new().await;
    let api = krec::cluster::client::ApiClient::new(setup.client.clone());
    let problems = krec::install::apply_objects(&api, krec::install::crds::api_objects()).await;
    assert!(problems.is_empty(), "{problems:?}");
    const OBJECTS: usize = 4;
    for i in 0..OBJECTS {
        let object = json!({"apiVersion": "krec.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "g", "namespace": format!("shard-{i}")},
            "spec": {"module": "stamper_a.wasm", "for": {"apiVersion": "v1", "kind": "ConfigMap"},
                "permissions": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "verbs": ["get", "list", "watch", "patch"]}]}});
        api.create(&object, "test").await.expect("create");
    }
    let empty = setup.dir.path().join("no-manifests");
    std::fs::create_dir(&empty).expect("mkdir");
    let modules = common::module("stamper_a.wasm");
    let module_dir = modules.parent().expect("dir").display().to_string();
    let mut args: Vec<&str> = common::SHARD_ARGS.to_vec();
    args.extend(["--from-cluster", "--module-dir", &module_dir]);
    let start = || {
        Host::start(
            &empty,
            &setup.kubeconfig,
            &setup.dir.path().join("cache"),
            &args,
        )
    };
    let mut hosts = vec![start(), start()];
    let guests: BTreeSet<String> = (0..OBJECTS).map(|i| format!("shard-{i}.g")).collect();
    wait_until("every guest held once", Duration::from_secs(60), || {
        let counts = owners(&all(&hosts));
        counts.keys().cloned().collect::<BTreeSet<_>>() == guests
            && counts.values().all(|n| *n == 1)
    });
    // Each object's status names the replica holding its guest's Lease.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut wrong = Vec::new();
        for i in 0..OBJECTS {
            let status = reconciler_status(&setup.client, i).await;
            let holder = lease_holder(&setup.client, &format!("shard-{i}.g")).await;
            if status["replica"].as_str() != holder.as_deref() {
                wrong.push(format!("shard-{i}: {} vs {holder:?}", status["replica"]));
            }
        }
        if wrong.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status not from the holder: {wrong:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Status writes for a guest came only from its holder.
    let events = setup.audit.events();
    for i in 0..OBJECTS {
        let path = format!("/namespaces/shard-{i}/reconcilers/g/status");
        let writers: BTreeSet<String> = events
            .iter()
            .filter(|e| {
                e["requestURI"].as_str().is_some_and(|u| u.contains(&path)) && e["verb"] == "patch"
            })
            .filter_map(|e| e["userAgent"].as_str())
            .filter_map(|a| {
                a.split_once(" (")
                    .map(|(_, r)| r.trim_end_matches(')').to_owned())
            })
            .collect();
        let holder = lease_holder(&setup.client, &format!("shard-{i}.g")).await;
        assert_eq!(
            writers.into_iter().collect::<Vec<_>>(),
            holder.into_iter().collect::<Vec<_>>(),
            "shard-{i}"
        );
    }

    // The holder of shard-0's guest killed: the guest moves, and so does its status.
    let before = reconciler_status(&setup.client, 0).await["replica"].clone();
    let victim = hosts
        .iter()
        .position(|h| owned(h).is_some_and(|o| o.contains("shard-0.g")))
        .expect("an owner");
    hosts.remove(victim).signal("-KILL");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = reconciler_status(&setup.client, 0).await;
        if status["replica"] != before && status["replica"].is_string() {
            break;
        }
        assert!(Instant::now() < deadline, "status never moved: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Deleted: the guest stops and its Lease is released.
    api.delete(
        &krec::guests::from_cluster::reconciler_gvk(),
        Some("shard-1"),
        "g",
        None,
    )
    .await
    .expect("delete");
    wait_until("the guest stopped", Duration::from_secs(30), || {
        owners(&all(&hosts)).keys().all(|g| g != "shard-1.g")
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while lease_holder(&setup.client, "shard-1.g").await.is_some() {
        assert!(
            Instant::now() < deadline,
            "the Lease of shard-1.g is still held"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A guest whose manifest is deleted leaves nothing behind (issue 52): its Lease is removed
/// once no replica runs it, and no replica exports a series of it any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_guest_should_leave_no_lease_and_no_series_behind() {
    let setup = Setup::new().await;
    let hosts: Vec<Host> = (0..2).map(|_| setup.host()).collect();
    wait_until("the guests spread 3/3", Duration::from_secs(60), || {
        spread(&all(&hosts)) == [3, 3]
    });
    setup.all_reconciled().await;
    assert!(lease_holder(&setup.client, "g5").await.is_some());
    let series = |host: &Host| {
        host.metrics()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("\"g5\""))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(
        hosts.iter().any(|host| !series(host).is_empty()),
        "g5 has series while it runs"
    );
    std::fs::remove_file(setup.manifests.join("g5.yaml")).expect("delete the manifest");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(setup.client.clone(), "default");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lease = leases.get_opt("krec-g5").await.expect("read the Lease");
        let left: Vec<String> = hosts.iter().flat_map(series).collect();
        if lease.is_none() && left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "30 s after g5's manifest was deleted: Lease {:?}, series {left:#?}",
            lease.map(|l| l.spec)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The other guests' Leases stay, held.
    for i in 0..5 {
        assert!(
            lease_holder(&setup.client, &format!("g{i}"))
                .await
                .is_some(),
            "g{i}"
        );
    }
}

/// The guests of a replica that joined a few seconds before move as fast as an old one's
/// when it is killed (issue 52 saw 5.0 s where old replicas took 2.1–2.2 s, with 2 s leases,
/// on a real kube-apiserver; not reproduced here: 2.16 s, and 2.19–2.36 s when an old replica
/// dies beside a young one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_replicas_guests_should_fail_over_within_the_lease() {
    let setup = Setup::new().await;
    let mut hosts: Vec<Host> = (0..2).map(|_| setup.host()).collect();
    wait_until("the guests spread 3/3", Duration::from_secs(60), || {
        spread(&all(&hosts)) == [3, 3]
    });
    hosts.push(setup.host());
    wait_until("2/2/2 with the young one", Duration::from_secs(30), || {
        spread(&all(&hosts)) == [2, 2, 2]
    });
    let (stop, driver) = setup.drive();
    // Young: seconds old when killed, as in the report.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let young = hosts.pop().expect("the young one");
    let orphaned = owned(&young).expect("its guests");
    young.signal("-KILL");
    let killed = Instant::now();
    loop {
        if owners(&all(&hosts)).len() == GUESTS {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "never moved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failover = killed.elapsed();
    println!("the young replica's guests {orphaned:?} moved {failover:?} after the kill");
    stop.store(true, Ordering::Relaxed);
    let _ = driver.await;
    assert!(
        failover < LEASE + RETRY * 2 + Duration::from_millis(1500),
        "failover took {failover:?}\n{}",
        hosts.iter().map(Host::log).collect::<Vec<_>>().join("\n")
    );
}
