//! Map functions and configuration, end to end: the namespace labeller (for Namespaces,
//! watching Deployments mapped to their namespace) by its `map` export and by the declarative
//! `mapToNamespace`, configured through `spec.config`.

use krec::manifest::Manifest;
use krec_core::Gvk;
use krec_tests::{Live, deployment_gvk, repo_root, sample_manifest};
use serde_json::{Value, json};

const ANNOTATION: &str = "example.com/deployments";

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn deployment(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
}

fn namespace_gvk() -> Gvk {
    Gvk::from_api_version("v1", "Namespace")
}

/// The labeller's manifest with its `mapByGuest` watch replaced by `replacement` (text).
fn labeller_with(replacement: &str) -> Manifest {
    let path = repo_root().join("sample-guests/namespace-labeller/manifest.yaml");
    let text = std::fs::read_to_string(&path).expect("manifest");
    assert!(text.contains("mapByGuest: true"));
    Manifest::parse(&path, &text.replace("mapByGuest: true", replacement))
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn annotation(live: &Live, ns: &str, key: &str) -> Option<String> {
    let object = live.get(&namespace_gvk(), None, ns).await?;
    object["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_owned)
}

async fn wait_count(live: &Live, ns: &str, key: &str, expected: &str) {
    live.eventually(&format!("{ns}'s {key} = {expected}"), || async {
        (annotation(live, ns, key).await.as_deref() == Some(expected)).then_some(())
    })
    .await;
}

/// Adding a Deployment reconciles its namespace and nothing else: one reconcile of one key,
/// no recount of the other namespaces.
async fn one_deployment_should_reconcile_only_its_namespace(manifest: Manifest) {
    let live = Live::start(
        vec![manifest],
        vec![
            namespace("team-a"),
            namespace("team-b"),
            deployment("team-b", "api"),
        ],
    )
    .await;
    wait_count(&live, "team-a", ANNOTATION, "0").await;
    wait_count(&live, "team-b", ANNOTATION, "1").await;
    wait_count(&live, "default", ANNOTATION, "0").await;
    let controller = live.controller("namespace-labeller");
    live.eventually("the queue to drain", || async {
        controller.is_idle().then_some(())
    })
    .await;
    let before = controller.stats().total();
    let team_b = live
        .get(&namespace_gvk(), None, "team-b")
        .await
        .expect("team-b");

    live.api
        .create(&deployment("team-a", "web"), "test")
        .await
        .expect("deployment");
    wait_count(&live, "team-a", ANNOTATION, "1").await;
    live.eventually("the queue to drain", || async {
        controller.is_idle().then_some(())
    })
    .await;
    assert_eq!(
        controller.stats().total() - before,
        1,
        "one Deployment event should cause exactly one reconcile (of team-a)"
    );
    let team_b_after = live
        .get(&namespace_gvk(), None, "team-b")
        .await
        .expect("team-b");
    assert_eq!(
        team_b["metadata"]["resourceVersion"], team_b_after["metadata"]["resourceVersion"],
        "another namespace was not touched"
    );
    assert_eq!(controller.stats().traps(), 0);

    // Deleting it maps to the namespace too.
    live.api
        .delete(&deployment_gvk(), Some("team-a"), "web", None)
        .await
        .expect("delete");
    wait_count(&live, "team-a", ANNOTATION, "0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guests_map_function_should_reconcile_only_the_deployments_namespace() {
    let live_manifest = sample_manifest("namespace-labeller");
    one_deployment_should_reconcile_only_its_namespace(live_manifest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_to_namespace_should_reconcile_only_the_deployments_namespace() {
    one_deployment_should_reconcile_only_its_namespace(labeller_with("mapToNamespace: true")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_calls_should_be_counted() {
    let live = Live::start(
        vec![sample_manifest("namespace-labeller")],
        vec![namespace("team-a"), deployment("team-a", "web")],
    )
    .await;
    wait_count(&live, "team-a", ANNOTATION, "1").await;
    let text = live.manager.metrics().encode();
    assert!(
        text.lines().any(|l| l.starts_with(
            "krec_guest_map_calls_total{controller=\"namespace-labeller\",result=\"ok\"}"
        ) && !l.ends_with(" 0")),
        "{text}"
    );
}

/// A directory holding the labeller's module and a manifest of it with `config` (YAML text).
fn labeller_dir(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let built = sample_manifest("namespace-labeller");
    std::fs::copy(&built.spec.module, dir.path().join("labeller.wasm")).expect("copy module");
    write_labeller(dir.path(), config);
    dir
}

/// The sample manifest, its module `labeller.wasm` beside it and its config replaced.
fn write_labeller(dir: &std::path::Path, config: &str) {
    let text =
        std::fs::read_to_string(repo_root().join("sample-guests/namespace-labeller/manifest.yaml"))
            .expect("manifest");
    let module = text
        .lines()
        .find(|l| l.trim_start().starts_with("module:"))
        .expect("module line");
    let text = text.replace(module, "  module: labeller.wasm").replace(
        "  config:\n    annotation: example.com/deployments\n",
        config,
    );
    std::fs::write(dir.join("labeller.yaml"), text).expect("write manifest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_only_swap_should_change_behaviour_and_a_bad_config_keep_the_old_version() {
    let dir = labeller_dir("  config:\n    annotation: example.com/deployments\n");
    let manifest = Manifest::load(&dir.path().join("labeller.yaml")).expect("manifest");
    let live = Live::start(
        vec![manifest],
        vec![namespace("team-a"), deployment("team-a", "web")],
    )
    .await;
    wait_count(&live, "team-a", ANNOTATION, "1").await;
    let controller = live.controller("namespace-labeller");

    // Only the config changes: the guest is swapped and writes the new annotation.
    write_labeller(dir.path(), "  config:\n    annotation: example.com/count\n");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(
        report.swapped,
        vec!["namespace-labeller".to_owned()],
        "{report:?}"
    );
    wait_count(&live, "team-a", "example.com/count", "1").await;
    let running = controller.version();

    // Bad configs are refused with the file, the field and the rule; the version running
    // goes on.
    let cases = [
        (
            "  config:\n    annotation: no-prefix\n",
            "spec.config.annotation",
            "should match",
        ),
        (
            "  config:\n    annotation: example.com/x\n    colour: red\n",
            "spec.config.colour",
            "unknown field",
        ),
        (
            "  config:\n    annotation: example.com/x\n    frozenLabel: 3\n",
            "spec.config.frozenLabel",
            "must be of type string",
        ),
    ];
    for (config, field, rule) in cases {
        write_labeller(dir.path(), config);
        let report = live.manager.reload(dir.path()).await.expect("reload");
        assert!(report.swapped.is_empty(), "{config}: {report:?}");
        assert_eq!(report.rejected.len(), 1, "{config}: {report:?}");
        let reason = &report.rejected[0].reason;
        assert!(
            reason.contains("labeller.yaml") && reason.contains(field) && reason.contains(rule),
            "{config}: {reason}"
        );
        assert!(
            std::sync::Arc::ptr_eq(&controller.version(), &running),
            "{config}: the old version keeps running"
        );
    }

    // A config the schema allows but the guest's own type refuses (its `from_config`), with
    // no schema to catch it first.
    let text = std::fs::read_to_string(dir.path().join("labeller.yaml")).expect("manifest");
    let start = text.find("  configSchema:").expect("schema");
    let end = text.find("  limits:").expect("limits");
    let text = format!(
        "{}{}",
        &text[..start].replace("annotation: example.com/x", "annotation: plain"),
        &text[end..]
    );
    let text = text.replace(
        "    frozenLabel: 3\n",
        "    frozenLabel: example.com/frozen\n",
    );
    std::fs::write(dir.path().join("labeller.yaml"), text).expect("write");
    let report = live.manager.reload(dir.path()).await.expect("reload");
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    let reason = &report.rejected[0].reason;
    assert!(
        reason.contains("labeller.yaml")
            && reason.contains("refused its configuration")
            && reason.contains("needs a prefix"),
        "{reason}"
    );
    assert!(std::sync::Arc::ptr_eq(&controller.version(), &running));

    // The old version still reconciles with its config.
    live.api
        .create(&deployment("team-a", "api"), "test")
        .await
        .expect("deployment");
    wait_count(&live, "team-a", "example.com/count", "2").await;
}
