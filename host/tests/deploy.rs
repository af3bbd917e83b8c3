//! `deploy/` stays true to the code: the committed RBAC is what `krec rbac` generates, the guest
//! bundle script makes manifests `krec check` accepts, and the Deployment uses flags that exist
//! and probes the admin endpoints.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn krec(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(args)
        .env("RUST_LOG", "off")
        .output()
        .expect("run krec");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_committed_rbac_should_be_what_krec_rbac_generates() {
    let samples = repo().join("sample-guests");
    let (ok, generated, stderr) = krec(&["rbac", "--manifests", &samples.display().to_string()]);
    assert!(ok, "{stderr}");
    let committed = std::fs::read_to_string(repo().join("deploy/rbac.yaml")).expect("rbac.yaml");
    assert_eq!(
        committed, generated,
        "deploy/rbac.yaml is stale: regenerate it with `krec rbac --manifests sample-guests > deploy/rbac.yaml`"
    );
}

#[test]
fn the_bundle_script_should_make_a_directory_krec_accepts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new("bash")
        .arg(repo().join("deploy/bundle-guests.sh"))
        .arg(repo().join("sample-guests"))
        .arg(dir.path())
        .output()
        .expect("bundle");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, stdout, stderr) = krec(&["check", &dir.path().display().to_string()]);
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout.lines().count(), 7, "{stdout}");
}

#[test]
fn the_deployment_should_use_real_flags_and_probe_the_admin_endpoints() {
    let text = std::fs::read_to_string(repo().join("deploy/krec.yaml")).expect("krec.yaml");
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect();
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let (_, help, _) = krec(&["run", "--help"]);
    let args = container["args"].as_array().expect("args");
    assert_eq!(args[0], "run");
    for arg in &args[1..] {
        let flag = arg.as_str().expect("flag").split('=').next().expect("name");
        assert!(help.contains(flag), "`krec run` has no {flag}:\n{help}");
    }
}
