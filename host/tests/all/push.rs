//! `krec push` and a guest registered by tag, the way a team ships one: push the built module to
//! a registry (the CNCF distribution registry, a process on loopback), `kubectl apply` a
//! `ClusterReconciler` naming it, `kubectl wait` until it is ready, see it reconcile.

use crate::common;
use krec_testkit::OciRegistry;

#[test]
fn a_pushed_guest_should_run_from_a_cluster_reconciler_naming_its_tag() {
    let registry = OciRegistry::start();
    let module = common::module("pod_counter.wasm");
    let tagged = registry.reference("team/pod-counter:v1");
    // Plain HTTP only when asked.
    let (ok, _, err) = common::krec(["push".as_ref(), module.as_os_str(), tagged.as_ref()]);
    assert!(!ok, "pushed over HTTPS to an HTTP registry?");
    assert!(err.contains(&tagged), "{err}");
    let (ok, out, err) = common::krec([
        "push".as_ref(),
        module.as_os_str(),
        tagged.as_ref(),
        "--insecure".as_ref(),
    ]);
    assert!(ok, "{err}");
    let pinned = out.trim();
    assert!(
        pinned.starts_with(&registry.reference("team/pod-counter@sha256:")),
        "{out}"
    );
    // Not a component: refused before anything is sent.
    let junk = tempfile::NamedTempFile::new().expect("temp");
    std::fs::write(junk.path(), b"junk").expect("write");
    let (ok, _, err) = common::krec([
        "push".as_ref(),
        junk.path().as_os_str(),
        tagged.as_ref(),
        "--insecure".as_ref(),
    ]);
    assert!(!ok && err.contains("not a WebAssembly component"), "{err}");

    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("no-manifests");
    std::fs::create_dir(&empty).expect("mkdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let (mut child, _, _lines) = common::spawn_until(
        [
            "dev".as_ref(),
            "--manifests".as_ref(),
            empty.as_os_str(),
            "--apply".as_ref(),
            common::repo()
                .join("sample-guests/pod-counter/examples")
                .as_os_str(),
            "--from-cluster".as_ref(),
            "--insecure-registry".as_ref(),
            registry.addr.as_ref(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
            "--admin-addr".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--no-module-cache".as_ref(),
        ],
        |line| line.contains("reconciling"),
    );
    let sample =
        std::fs::read_to_string(common::repo().join("sample-guests/pod-counter/manifest.yaml"))
            .expect("manifest");
    let object: String = sample
        .lines()
        .map(|line| match line.strip_prefix("  module: ") {
            Some(_) => format!("  module: {tagged}\n"),
            None if line == "kind: Reconciler" => "kind: ClusterReconciler\n".to_owned(),
            None => format!("{line}\n"),
        })
        .collect();
    let file = dir.path().join("pod-counter.yaml");
    std::fs::write(&file, object).expect("write");
    let kubectl = common::Kubectl::new(&kubeconfig, &dir.path().join("cache"));
    let (ok, out, err) = kubectl.run(["apply", "-f", &file.display().to_string()]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run([
        "wait",
        "--for=condition=Ready",
        "clusterreconciler/pod-counter",
        "--timeout=60s",
    ]);
    assert!(ok, "{out}{err}");
    let (ok, out, _) = kubectl.run([
        "get",
        "crec",
        "pod-counter",
        "-o",
        "jsonpath={.status.module}",
    ]);
    assert!(ok && out == tagged, "{out}");
    common::wait_until(
        "the pod counter's label",
        std::time::Duration::from_secs(60),
        || {
            let (_, out, _) = kubectl.run([
                "get",
                "replicaset",
                "web",
                "-o",
                "jsonpath={.metadata.labels.pod-count}",
            ]);
            out == "3"
        },
    );
    assert!(common::stop(&mut child, "-INT").success());
}
