//! `krec run`: the guests against the cluster of a kubeconfig, until SIGTERM.

mod common;

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

    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests/pod-counter");
    let mut child = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["run", "--manifests"])
        .arg(&manifests)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--admin-addr", "127.0.0.1:0", "--no-module-cache"])
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start krec run");
    // Nobody reads its stdout: a long-running host must not die of a broken pipe.
    drop(child.stdout.take());

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
