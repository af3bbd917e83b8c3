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

/// The cluster's objects as the admin writes them (a kube client from the server's kubeconfig).
async fn admin_client(cluster: &Server) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Create `object` (JSON) with `client`, at the path its kind is served at.
async fn create(client: &kube::Client, object: serde_json::Value) {
    let object: kube::api::DynamicObject = serde_json::from_value(object).expect("object");
    let types = object.types.clone().expect("typed");
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", &types.api_version));
    let discovered = kube::discovery::pinned_kind(
        client,
        &kube::api::GroupVersionKind::gvk(group, version, &types.kind),
    )
    .await
    .expect("served");
    let api: kube::Api<kube::api::DynamicObject> = match object.metadata.namespace.as_deref() {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &discovered.0),
        None => kube::Api::all_with(client.clone(), &discovered.0),
    };
    api.create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {}: {e}", types.kind));
}

/// What a reviewer checks first: `krec run` with a ServiceAccount's token, bound to exactly
/// the ClusterRole `krec rbac` prints for the sample guests, runs every sample reconciler
/// without one Forbidden; take one verb out of that role and the guest needing it fails with
/// the Forbidden naming the verb (and is retried), the others carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_a_service_account_bound_to_krec_rbacs_role_should_run_every_sample_guest() {
    let cluster = Server::builder().start().await.expect("server");
    let admin = admin_client(&cluster).await;
    let samples = common::repo().join("sample-guests");
    let crd: serde_json::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(samples.join("foo-controller/crd/foo-crd.yaml")).expect("crd"),
    )
    .expect("yaml");
    create(&admin, crd).await;

    // The role and binding as `krec rbac` prints them, applied by the admin.
    let rbac = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["rbac", "--manifests"])
        .arg(&samples)
        .output()
        .expect("krec rbac");
    assert!(
        rbac.status.success(),
        "{}",
        String::from_utf8_lossy(&rbac.stderr)
    );
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "krec-system"}}),
    )
    .await;
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "krec", "namespace": "krec-system"}}),
    )
    .await;
    let mut role = None;
    for document in serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&rbac.stdout)) {
        let object: serde_json::Value = serde::Deserialize::deserialize(document).expect("yaml");
        if object["kind"] == "ClusterRole" {
            role = Some(object.clone());
        }
        create(&admin, object).await;
    }
    let role = role.expect("krec rbac prints a ClusterRole");

    // `kubectl create token krec -n krec-system`, and a kubeconfig carrying it.
    let request = http::Request::post("/api/v1/namespaces/krec-system/serviceaccounts/krec/token")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}))
            .expect("json"),
        )
        .expect("request");
    let answer: serde_json::Value = admin.request(request).await.expect("a token");
    let token = answer["status"]["token"].as_str().expect("token");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("sa.yaml");
    std::fs::write(
        &kubeconfig,
        cluster.kubeconfig().replace(cluster.token(), token),
    )
    .expect("kubeconfig");

    let host = common::Host::start(&samples, &kubeconfig, &common::shared_module_cache(), &[]);
    // Something for each reconciler to do.
    create(
        &admin,
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    )
    .await;
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"}, "data": {"a": "1"}}),
    )
    .await;
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
    )
    .await;
    create(
        &admin,
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": "example", "namespace": "default"},
        "spec": {"deploymentName": "example", "replicas": 1}}),
    )
    .await;

    let reconcilers = [
        "pod-counter",
        "configmap-watcher",
        "greeter",
        "namespace-labeller",
        "foo-controller",
        "cleanup-ticker",
    ];
    let succeeded = |metrics: &str, guest: &str| {
        metrics.lines().any(|l| {
            l.starts_with("controller_runtime_reconcile_total{")
                && l.contains(&format!("controller=\"{guest}\""))
                && l.contains("result=\"success\"")
                && !l.ends_with(" 0")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut log = String::new();
    loop {
        let metrics = host.metrics().unwrap_or_default();
        let waiting: Vec<_> = reconcilers
            .iter()
            .filter(|guest| !succeeded(&metrics, guest))
            .collect();
        log.push_str(&host.log());
        if waiting.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting:?} never reconciled:\n{log}\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !log.contains("forbidden"),
        "a Forbidden with krec rbac's role:\n{log}"
    );

    // Take `update` on ReplicaSets out of the role: the pod counter can no longer label them.
    let mut narrowed = role.clone();
    for rule in narrowed["rules"].as_array_mut().expect("rules") {
        if rule["resources"] == json!(["replicasets"]) {
            rule["verbs"] = json!(["get", "list", "watch"]);
        }
    }
    let roles: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        admin.clone(),
        &kube::api::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()),
    );
    roles
        .patch(
            "krec",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"rules": narrowed["rules"]})),
        )
        .await
        .expect("narrow the role");
    create(
        &admin,
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "api", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
            "template": {"metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
    )
    .await;
    let refusal = r#"replicasets.apps \"api\" is forbidden: User \"system:serviceaccount:krec-system:krec\" cannot update resource \"replicasets\" in API group \"apps\" in the namespace \"default\""#;
    let mut log = String::new();
    common::wait_until(
        "the pod counter's Forbidden",
        Duration::from_secs(60),
        || {
            log.push_str(&host.log());
            log.lines().any(|l| {
                l.contains("pod-counter")
                    && l.replace("\\\"", "\"")
                        .contains(&refusal.replace("\\\"", "\""))
            })
        },
    );
    common::wait_until(
        "the pod counter to count the error",
        Duration::from_secs(30),
        || {
            host.metric("controller_runtime_reconcile_errors_total{controller=\"pod-counter\"}")
                .is_some_and(|n| n >= 1.0)
        },
    );
    drop(host);
    cluster.shutdown().await;
}
