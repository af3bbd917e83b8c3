//! Guests whose modules come from a real OCI registry (the CNCF distribution registry, as a
//! process on loopback): pushed in the Wasm artifact layout, pulled by tag, swapped when the tag
//! moves — in every replica —, refused with a clear status when broken or unreachable, the old
//! version reconciling meanwhile, and back when the registry is.

use std::path::Path;

use krec::guests::from_cluster::{FromCluster, ObjectRef};
use krec::guests::oci::RegistryAuth;
use krec::guests::status::StatusWriter;
use krec::guests::{Manager, ManagerOptions};
use krec_tests::{HostRegistries, Live, OciRegistry, built_module, configmap};
use serde_json::{Value, json};

const OBJECTS: usize = 5;

fn stamper(module: &str) -> Value {
    json!({"apiVersion": "krec.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": "stamper"},
        "spec": {"module": module,
            "pull": {"every": "1s"},
            "for": {"apiVersion": "v1", "kind": "ConfigMap"},
            "namespaces": ["default"],
            "permissions": [{"apiVersion": "v1", "kind": "ConfigMap",
                "verbs": ["get", "list", "watch", "patch"]}]}})
}

fn cluster_stamper() -> ObjectRef {
    ObjectRef {
        namespace: None,
        name: "stamper".into(),
    }
}

async fn push(registry: &OciRegistry, file: &str, to: &str) -> String {
    let reference = krec::guests::oci::reference(Path::new(&registry.reference(to)))
        .expect("oci")
        .expect("reference");
    registry
        .registries(&std::env::temp_dir())
        .push(&built_module(file), &reference, &RegistryAuth::Anonymous)
        .await
        .unwrap_or_else(|e| panic!("push {file}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_pulled_by_tag_should_run_swap_when_the_tag_moves_and_survive_a_broken_registry() {
    let mut registry = OciRegistry::start();
    let store = tempfile::tempdir().expect("store");
    let digest_a = push(&registry, "stamper_a.wasm", "guests/stamper:v1").await;
    assert!(digest_a.starts_with("sha256:"), "{digest_a}");
    let tagged = registry.reference("guests/stamper:v1");
    let from = FromCluster {
        module_dir: store.path().to_owned(),
        ..Default::default()
    };
    let mut objects: Vec<Value> = (0..OBJECTS).map(configmap).collect();
    objects.push(stamper(&tagged));
    let live = Live::start_from_with(
        Vec::new(),
        objects,
        from.clone(),
        registry.registries(&store.path().join("replica-1")),
    )
    .await;
    // A second replica over the same cluster: every replica loads every guest.
    let second = Manager::start_with(
        live.api.clone(),
        Vec::new(),
        ManagerOptions {
            from_cluster: Some(from),
            registries: Some(registry.registries(&store.path().join("replica-2"))),
            ..Default::default()
        },
    )
    .await
    .expect("second replica");
    let watchers = [live.manager.watch_sources(None), second.watch_sources(None)];
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());

    live.eventually("version a stamped everything", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    let ready = live
        .wait_condition(&cluster_stamper(), "Ready", "True", "Running")
        .await;
    assert!(ready.starts_with("version 1 "), "{ready}");
    let found = live
        .get(&cluster_stamper().gvk(), None, "stamper")
        .await
        .expect("object");
    assert_eq!(found["status"]["module"], tagged.as_str());
    let digest_of_a = found["status"]["digest"].clone();

    // The tag moves: both replicas swap to the new version.
    push(&registry, "stamper_b.wasm", "guests/stamper:v1").await;
    live.eventually("both replicas on version 2", || async {
        let one = live.manager.controller("stamper")?.version().number;
        let two = second.controller("stamper")?.version().number;
        (one == 2 && two == 2).then_some(())
    })
    .await;
    live.eventually("version b stamped everything", || async {
        live.all_stamped("b", OBJECTS).await.then_some(())
    })
    .await;
    live.eventually("the new digest in status", || async {
        let object = live.get(&cluster_stamper().gvk(), None, "stamper").await?;
        (object["status"]["digest"] != digest_of_a && object["status"]["version"] == 2)
            .then_some(())
    })
    .await;

    // A broken artifact under the tag: refused, the running version kept.
    let reference = krec::guests::oci::reference(Path::new(&tagged))
        .expect("oci")
        .expect("reference");
    registry
        .registries(&std::env::temp_dir())
        .push_bytes(
            b"not a component".to_vec(),
            "junk.wasm",
            &reference,
            &RegistryAuth::Anonymous,
        )
        .await
        .expect("push junk");
    let refused = live
        .wait_condition(&cluster_stamper(), "Degraded", "True", "NewVersionRefused")
        .await;
    assert!(
        refused.contains(&format!("{tagged}: is not a WebAssembly component")),
        "{refused}"
    );
    assert_eq!(
        live.manager
            .controller("stamper")
            .expect("running")
            .version()
            .number,
        2
    );

    // The registry gone: the running version carries on, the status says why.
    push(&registry, "stamper_b.wasm", "guests/stamper:v1").await;
    live.wait_condition(&cluster_stamper(), "Degraded", "False", "AsExpected")
        .await;
    registry.stop();
    let unreachable = live
        .wait_condition(&cluster_stamper(), "Degraded", "True", "PullFailed")
        .await;
    assert!(
        unreachable.contains(&format!("spec.module: {tagged}")),
        "{unreachable}"
    );
    live.change_and_wait_stamped("9", "b", OBJECTS).await;
    // Back: degraded no more, nothing swapped.
    registry.restart();
    live.wait_condition(&cluster_stamper(), "Degraded", "False", "AsExpected")
        .await;
    assert_eq!(
        live.manager
            .controller("stamper")
            .expect("running")
            .version()
            .number,
        2
    );

    // The DIGEST kubectl shows is the artifact's, what `krec push` printed: naming it rolls
    // back. The component file's own (status.moduleDigest) is refused, saying which to use.
    assert_eq!(
        digest_of_a,
        json!(digest_a),
        "status.digest is the artifact's"
    );
    let file_digest = found["status"]["moduleDigest"]
        .as_str()
        .expect("moduleDigest")
        .to_owned();
    assert_ne!(file_digest, digest_a);
    let pin = |digest: &str| {
        let api = live.api.clone();
        let module = registry.reference(&format!("guests/stamper@{digest}"));
        async move {
            api.patch(
                &cluster_stamper().gvk(),
                None,
                "stamper",
                krec_core::PatchType::Merge,
                &json!({"spec": {"module": module}}),
                false,
                "test",
            )
            .await
            .expect("patch");
        }
    };
    pin(&file_digest).await;
    let refused = live
        .wait_condition(&cluster_stamper(), "Degraded", "True", "PullFailed")
        .await;
    assert!(
        refused.contains("is the digest of the component file")
            && refused.contains("status.digest"),
        "{refused}"
    );
    // Refused, it is retried with backoff, not at once again and again: a pull's end woke the
    // watch loop even when the reload had waited for it, and the next reload pulled again (a
    // loop logging its refusal hundreds of times a second).
    let reloads = || {
        let metrics = live.manager.metrics();
        ["changed", "unchanged", "refused"]
            .into_iter()
            .map(|result| {
                metrics
                    .reloads
                    .get_or_create(&krec::process::metrics::ReloadLabels {
                        result: result.to_owned(),
                    })
                    .get()
            })
            .sum::<u64>()
    };
    let before = reloads();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let during = reloads() - before;
    assert!(during <= 5, "{during} reloads in 2 s of a refused pin");
    pin(&digest_a).await;
    live.eventually("rolled back to version a", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;

    status.stop().await;
    for watcher in watchers {
        watcher.stop().await;
    }
    second.cache().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_tag_should_be_swapped_on_time_while_the_guest_objects_keep_changing() {
    // A busy cluster: the Reconciler object written every 300 ms (status writes, label edits:
    // nothing to reload). The tag's lookup must still come every `pull.every`.
    let registry = OciRegistry::start();
    let store = tempfile::tempdir().expect("store");
    push(&registry, "stamper_a.wasm", "guests/stamper:v1").await;
    let tagged = registry.reference("guests/stamper:v1");
    let from = FromCluster {
        module_dir: store.path().to_owned(),
        ..Default::default()
    };
    let mut object = stamper(&tagged);
    object["spec"]["pull"]["every"] = json!("3s");
    let live = Live::start_from_with(
        Vec::new(),
        vec![configmap(0), object],
        from,
        registry.registries(store.path()),
    )
    .await;
    let watcher = live.manager.watch_sources(None);
    live.eventually("version a stamped", || async {
        live.all_stamped("a", 1).await.then_some(())
    })
    .await;
    let busy = {
        let api = live.api.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                let _ = api
                    .patch(
                        &cluster_stamper().gvk(),
                        None,
                        "stamper",
                        krec_core::PatchType::Merge,
                        &json!({"metadata": {"annotations": {"busy": i.to_string()}}}),
                        false,
                        "test",
                    )
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        })
    };
    push(&registry, "stamper_b.wasm", "guests/stamper:v1").await;
    // Before the fix the lookup never came while the writes went on.
    live.eventually("the moved tag swapped in", || async {
        (live.manager.controller("stamper")?.version().number == 2).then_some(())
    })
    .await;
    busy.abort();
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_the_registry_does_not_have_should_not_be_ready_and_say_why() {
    let registry = OciRegistry::start();
    let store = tempfile::tempdir().expect("store");
    push(&registry, "stamper_a.wasm", "guests/stamper:v1").await;
    let missing = registry.reference(&format!("guests/stamper@sha256:{}", "0".repeat(64)));
    let from = FromCluster {
        module_dir: store.path().to_owned(),
        ..Default::default()
    };
    let live = Live::start_from_with(
        Vec::new(),
        vec![configmap(0), stamper(&missing)],
        from,
        registry.registries(store.path()),
    )
    .await;
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    let message = live
        .wait_condition(&cluster_stamper(), "Ready", "False", "PullFailed")
        .await;
    assert!(
        message.starts_with(&format!(
            "ClusterReconciler stamper: spec.module: {missing}: "
        )),
        "{message}"
    );
    live.wait_condition(&cluster_stamper(), "ModuleResolved", "False", "PullFailed")
        .await;
    assert!(live.manager.controllers().is_empty());
    status.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_pull_secret_should_give_the_registrys_credentials() {
    use krec_testkit::{PASSWORD, USER};
    let registry = OciRegistry::with_auth();
    let store = tempfile::tempdir().expect("store");
    let tagged = registry.reference("team-a/stamper:v1");
    let reference = krec::guests::oci::reference(Path::new(&tagged))
        .expect("oci")
        .expect("reference");
    let basic = RegistryAuth::Basic(USER.into(), PASSWORD.into());
    registry
        .registries(&std::env::temp_dir())
        .push(&built_module("stamper_a.wasm"), &reference, &basic)
        .await
        .expect("push with credentials");
    let config =
        json!({"auths": {registry.addr.clone(): {"username": USER, "password": PASSWORD}}});
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry", "namespace": "team-a"},
        "stringData": {".dockerconfigjson": config.to_string()}});
    let rec = |name: &str, secret: Option<&str>| {
        let mut object = stamper(&tagged);
        object["kind"] = json!("Reconciler");
        object["metadata"] = json!({"name": name, "namespace": "team-a"});
        object["spec"]["namespaces"] = json!(["team-a"]);
        if let Some(secret) = secret {
            object["spec"]["pullSecret"] = json!({"name": secret});
        }
        object
    };
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
        secret,
        rec("with-secret", Some("registry")),
        rec("without", None),
    ];
    let from = FromCluster {
        module_dir: store.path().to_owned(),
        ..Default::default()
    };
    let live =
        Live::start_from_with(Vec::new(), objects, from, registry.registries(store.path())).await;
    let names: Vec<String> = live.manager.controllers().into_keys().collect();
    assert_eq!(
        names,
        ["team-a.with-secret"],
        "{:?}",
        live.manager.skipped()
    );
    let refused = live.manager.skipped();
    assert!(
        refused.iter().any(|s| s.code == "PullFailed"
            && s.reason.starts_with(&format!(
                "Reconciler team-a/without: spec.module: {tagged}: "
            ))),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_pulled_from_a_registry_should_be_tried_and_shown_in_status() {
    let registry = OciRegistry::start();
    let store = tempfile::tempdir().expect("store");
    push(&registry, "stamper_a.wasm", "guests/stamper:v1").await;
    push(&registry, "stamper_b.wasm", "guests/stamper:v2").await;
    let mut object = stamper(&registry.reference("guests/stamper:v1"));
    // Every key to the candidate, for real.
    object["spec"]["rollout"] = json!({"candidate": registry.reference("guests/stamper:v2"),
        "mode": "canary", "share": 100});
    let from = FromCluster {
        module_dir: store.path().to_owned(),
        ..Default::default()
    };
    let mut objects: Vec<Value> = (0..OBJECTS).map(configmap).collect();
    objects.push(object);
    let live =
        Live::start_from_with(Vec::new(), objects, from, registry.registries(store.path())).await;
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    live.eventually("the candidate stamped everything", || async {
        live.all_stamped("b", OBJECTS).await.then_some(())
    })
    .await;
    let message = live
        .wait_condition(&cluster_stamper(), "RolloutProgressing", "True", "Canary")
        .await;
    let candidate = live
        .manager
        .controller("stamper")
        .and_then(|c| c.rollout())
        .expect("a rollout");
    let digest = candidate.candidate().digest().to_owned();
    assert!(message.contains(&digest), "{message}");
    let found = live
        .get(&cluster_stamper().gvk(), None, "stamper")
        .await
        .expect("object");
    let rollout = &found["status"]["rollout"];
    assert_eq!(rollout["mode"], "canary", "{found:#}");
    assert_eq!(rollout["digest"], digest.as_str());
    assert_eq!(
        rollout["candidate"],
        registry.reference("guests/stamper:v2").as_str()
    );
    assert_ne!(
        found["status"]["digest"], rollout["digest"],
        "the live version's own"
    );
    status.stop().await;
}
