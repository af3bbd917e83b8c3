//! `krec run --leader-elect` as separate processes against one embedded API server: exactly one
//! host reconciles, a killed leader is replaced within the lease duration, and SIGTERM during a
//! slow reconcile lets it finish, releases the Lease and exits 0.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Host, module, wait_until};
use krec_apiserver::{Server, Store};
use serde_json::{Value, json};

/// A manifest dir with the misbehave guest driven by one ticker firing `request` every `every`.
fn manifest_dir(dir: &Path, request: &str, every: &str) -> PathBuf {
    let module = module("misbehave.wasm");
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests).expect("dir");
    std::fs::write(
        manifests.join("slow.yaml"),
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: slow}}\nspec:\n  module: {}\n  tickers: [{{every: {every}, request: {{name: {request}}}}}]\n  limits: {{timeout: 10s}}\n",
            module.display()
        ),
    )
    .expect("manifest");
    manifests
}

/// Start `krec run --leader-elect` with short lease timings; returns once its admin server is up.
fn start_host(manifests: &Path, kubeconfig: &Path, cache: &Path) -> Host {
    Host::start(
        manifests,
        kubeconfig,
        cache,
        &[
            "--leader-elect",
            "--leader-elect-lease-name",
            "krec-test",
            "--leader-elect-lease-duration",
            "2s",
            "--leader-elect-renew-deadline",
            "1500ms",
            "--leader-elect-retry-period",
            "200ms",
        ],
    )
}

fn leading(host: &Host) -> bool {
    host.metric(r#"leader_election_master_status{name="krec-test"}"#) == Some(1.0)
}

fn reconciles(host: &Host) -> f64 {
    host.metric(r#"controller_runtime_reconcile_total{controller="slow",result="success"}"#)
        .unwrap_or(0.0)
}

fn lease(store: &Store) -> Value {
    let leases = store
        .registry()
        .by_plural("coordination.k8s.io", "v1", "leases")
        .expect("leases");
    store
        .get(&leases, Some("default"), "krec-test")
        .map(|lease| (*lease).clone())
        .unwrap_or(json!({}))
}

async fn cluster(dir: &Path) -> (Server, PathBuf) {
    let cluster = Server::builder().start().await.expect("server");
    let kubeconfig = dir.join("kc.yaml");
    cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    (cluster, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_hosts_exactly_one_should_reconcile_and_a_killed_leader_be_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cluster, kubeconfig) = cluster(dir.path()).await;
    let manifests = manifest_dir(dir.path(), "ok", "100ms");
    let cache = dir.path().join("cache");
    let first = start_host(&manifests, &kubeconfig, &cache);
    let second = start_host(&manifests, &kubeconfig, &cache);
    let hosts = [&first, &second];
    wait_until("a leader", Duration::from_secs(30), || {
        hosts.iter().any(|h| leading(h))
    });
    // Let the ticker run until the leader has reconciled twice: only the leader reconciles.
    wait_until("two reconciles", Duration::from_secs(30), || {
        hosts.iter().any(|h| reconciles(h) >= 2.0)
    });
    let leaders: Vec<usize> = (0..2).filter(|&i| leading(hosts[i])).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    let (leader, standby) = (hosts[leaders[0]], hosts[1 - leaders[0]]);
    assert!(reconciles(leader) >= 2.0, "the leader reconciles");
    assert_eq!(
        standby.metric(r#"controller_runtime_reconcile_total{controller="slow",result="success"}"#),
        Some(0.0),
        "the standby serves its metrics and does not reconcile"
    );

    // The leader dies without releasing the Lease: the standby takes over once it expires.
    leader.signal("-KILL");
    let started = Instant::now();
    while !leading(standby) {
        if started.elapsed() > Duration::from_secs(30) {
            let log: Vec<String> = standby.stderr.try_iter().collect();
            panic!("the standby never took over:\n{}", log.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let handover = started.elapsed();
    println!("handover after the leader was killed: {handover:?} (lease duration 2s)");
    assert!(
        handover < Duration::from_secs(2) + Duration::from_secs(2),
        "the standby took over within the lease duration plus a renewal round: {handover:?}"
    );
    wait_until(
        "the new leader to reconcile",
        Duration::from_secs(30),
        || reconciles(standby) >= 1.0,
    );
    let holder = lease(cluster.store())["spec"]["holderIdentity"].clone();
    assert!(holder.is_string(), "{holder}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_slow_reconcile_should_finish_it_release_the_lease_and_exit_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cluster, kubeconfig) = cluster(dir.path()).await;
    let manifests = manifest_dir(dir.path(), "slow", "1h");
    let host = start_host(&manifests, &kubeconfig, &dir.path().join("cache"));
    // The slow reconcile (1.5 s) is running.
    wait_until(
        "the slow reconcile to start",
        Duration::from_secs(30),
        || host.metric(r#"controller_runtime_active_workers{controller="slow"}"#) == Some(1.0),
    );
    host.signal("-TERM");
    let mut host = host;
    let status = host.child.wait().expect("wait");
    assert!(status.success(), "exit status {status:?}");
    let log: Vec<String> = host.stderr.iter().collect();
    let log = log.join("\n");
    assert!(log.contains("slow reconcile finished"), "{log}");
    assert!(
        log.contains("reconciled guest=slow key=slow result=done"),
        "{log}"
    );
    assert!(
        log.contains("released the Lease default/krec-test"),
        "{log}"
    );
    let lease = lease(cluster.store());
    assert!(
        lease
            .pointer("/spec/holderIdentity")
            .is_none_or(Value::is_null),
        "{lease}"
    );
}
