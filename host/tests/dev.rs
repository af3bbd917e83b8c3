//! `krec dev` (in-memory for now) runs every sample guest and prints what each did.

use std::process::Command;

#[test]
fn dev_should_print_each_guests_actions() {
    let samples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-guests");
    let out = Command::new(env!("CARGO_BIN_EXE_krec"))
        .args(["dev", "--manifests"])
        .arg(&samples)
        .env("RUST_LOG", "off")
        .output()
        .expect("run krec dev");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "cleanup-ticker     deleted ConfigMap default/old-cache",
        "configmap-watcher  created ConfigMap default/configmap-summary",
        "foo-controller     created Deployment default/example-foo",
        "foo-controller     event Normal Synced on Foo example-foo",
        "pod-counter        updated ReplicaSet default/web: metadata.labels = {\"app\":\"web\",\"pod-count\":\"3\"}",
        "pod-counter        updated ReplicaSet default/web: metadata.labels = {\"app\":\"web\",\"pod-count\":\"2\"}",
        "foo-controller     updated Foo default/example-foo status: status = {\"availableReplicas\":1}",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    let final_state = stdout
        .split("== final state ==")
        .nth(1)
        .expect("final state section");
    assert!(
        final_state.contains("ConfigMap default/session-cache"),
        "unexpired ConfigMap kept"
    );
    assert!(!final_state.contains("old-cache"), "expired ConfigMap gone");
}
