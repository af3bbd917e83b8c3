//! `krec rbac` and `deploy/` applied with a real kubectl to the embedded API server.

use crate::kubectl as support;
use support::{repo_root, start};

/// `krec rbac`'s output and the deployment manifests in `deploy/` apply cleanly, as they would to
/// a real cluster, and the generated ClusterRole is stored as generated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krec_rbac_and_the_deploy_manifests_should_apply_cleanly() {
    let (_cluster, dir, kubectl) = start().await;
    let samples = repo_root().join("sample-guests");
    let manifests = krec::manifest::Manifest::load_valid(&samples).expect("sample manifests");
    let subject = krec::install::rbac::Subject {
        name: "krec".into(),
        namespace: "krec-system".into(),
        service_account: "krec".into(),
    };
    let generated =
        krec::install::rbac::generate(&manifests, Some(&samples), &subject).expect("rbac");
    let rbac = dir.path().join("rbac.yaml");
    std::fs::write(&rbac, &generated).expect("write rbac");
    let deploy = repo_root().join("deploy/krec.yaml").display().to_string();
    // The namespace the binding names comes from deploy/krec.yaml.
    let out = kubectl.ok(&["apply", "-f", &deploy, "-f", &rbac.display().to_string()]);
    for created in [
        "namespace/krec-system created",
        "serviceaccount/krec created",
        "deployment.apps/krec created",
        "clusterrole.rbac.authorization.k8s.io/krec created",
        "clusterrolebinding.rbac.authorization.k8s.io/krec created",
    ] {
        assert!(out.contains(created), "{created:?} missing from:\n{out}");
    }
    // Applying again changes nothing.
    let again = kubectl.ok(&["apply", "-f", &deploy, "-f", &rbac.display().to_string()]);
    assert!(
        again.lines().all(|l| l.ends_with("unchanged")),
        "a second apply changed something:\n{again}"
    );
    // The stored ClusterRole carries the generated rules.
    let stored: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "clusterrole", "krec", "-o", "json"]))
            .expect("json");
    let wanted: serde_json::Value = serde_yaml_ng::Deserializer::from_str(&generated)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .find(|d: &serde_json::Value| d["kind"] == "ClusterRole")
        .expect("a ClusterRole");
    assert_eq!(stored["rules"], wanted["rules"]);
    let binding: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "clusterrolebinding", "krec", "-o", "json"]))
            .expect("json");
    assert_eq!(binding["subjects"][0]["name"], "krec");
    assert_eq!(binding["roleRef"]["name"], "krec");
}
