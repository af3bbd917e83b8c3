//! `krec run`: the guests against the cluster of a kubeconfig, until SIGTERM.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use krec_apiserver::Server;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_should_reconcile_against_the_kubeconfigs_cluster_and_stop_on_sigterm() {
    let cluster = Server::builder().start().await.expect("server");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc.yaml");
    cluster.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let store = cluster.store();
    let rs = store
        .registry()
        .by_plural("apps", "v1", "replicasets")
        .expect("rs");
    store
        .create(
            &rs,
            Some("default"),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            false,
        )
        .expect("create rs");

    let mut child = run_pod_counter(Path::new(env!("CARGO_BIN_EXE_krec")), &kubeconfig);

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let labelled = store
            .get(&rs, Some("default"), "web")
            .ok()
            .and_then(|o| o.pointer("/metadata/labels/pod-count").cloned());
        if labelled == Some(json!("0")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "krec run never labelled the ReplicaSet"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let exit = common::stop(&mut child, "-TERM");
    assert!(exit.success(), "exit status {exit:?}");
}

/// `binary run` with the pod-counter sample against the cluster of `kubeconfig`.
fn run_pod_counter(binary: &Path, kubeconfig: &Path) -> std::process::Child {
    let mut child = Command::new(binary)
        .args(["run", "--manifests"])
        .arg(common::repo().join("sample-guests/pod-counter"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--admin-addr", "127.0.0.1:0", "--no-module-cache"])
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start krec run");
    // Nobody reads its stdout: a long-running host must not die of a broken pipe.
    drop(child.stdout.take());
    child
}

#[test]
fn run_without_a_usable_kubeconfig_should_say_so_and_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.yaml");
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests/pod-counter");
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["run", "--manifests"])
        .arg(&manifests)
        .arg("--kubeconfig")
        .arg(&missing)
        .args(["--admin-addr", "127.0.0.1:0", "--no-module-cache"])
        .env("RUST_LOG", "off")
        .output()
        .expect("run krec");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("krec run: reading the kubeconfig") && stderr.contains("nope.yaml"),
        "{stderr}"
    );
}

/// The host built without the embedded API server (`cargo build -p krec --no-default-features`,
/// which `make test` builds first and keeps beside `krec` as `krec-no-server`): it has no
/// `cluster` or `dev` command, and its `krec run` reconciles a sample guest against
/// `krec cluster`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_without_the_embedded_api_server_should_run_the_sample_guests() {
    let binary = Path::new(env!("CARGO_BIN_EXE_krec")).with_file_name("krec-no-server");
    assert!(
        binary.exists(),
        "{} is missing: `make test` builds it (cargo build -p krec --no-default-features, then \
         copies target/debug/krec there)",
        binary.display()
    );
    let help = Command::new(&binary).arg("--help").output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("  run ") && !help.contains("  cluster ") && !help.contains("  dev "));

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let (cluster, _, _lines) = common::spawn_until(
        [
            "cluster".as_ref(),
            // No ReplicaSet controller: the guest counts the Pods the test made (none).
            "--controllers".as_ref(),
            "none".as_ref(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
        ],
        |line| line.starts_with("try: kubectl"),
    );
    let mut cluster = common::Stopped(cluster);
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let client = kube::Client::try_from(config).expect("client");
    let replicasets: kube::Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        kube::Api::namespaced(client, "default");
    let rs = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))
    .expect("rs");
    replicasets
        .create(&Default::default(), &rs)
        .await
        .expect("create rs");

    let mut host = common::Stopped(run_pod_counter(&binary, &kubeconfig));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rs = replicasets.get("web").await.expect("get rs");
        if rs.metadata.labels.unwrap_or_default().get("pod-count") == Some(&"0".to_owned()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "krec-no-server run never labelled the ReplicaSet"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exit = common::stop(&mut host.0, "-TERM");
    assert!(exit.success(), "exit status {exit:?}");
    common::stop(&mut cluster.0, "-TERM");
}
