//! Guests registered as `Reconciler` and `ClusterReconciler` objects: creating, changing and
//! deleting an object starts, swaps and stops its guest with a manifest file's guarantees (a
//! bad version refused, the old one running, no key lost), and its status and Events say what
//! the host did.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use krec::guests::from_cluster::ObjectRef;
use krec::guests::status::StatusWriter;
use krec::manifest::Manifest;
use krec_core::{Gvk, ListOptions, PatchType};
use krec_tests::{Live, built_module, cm_gvk, configmap};
use serde_json::{Value, json};

const OBJECTS: usize = 20;

/// A module directory holding both stamper versions and a file that is no component.
fn module_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["stamper_a.wasm", "stamper_b.wasm", "misbehave.wasm"] {
        std::fs::copy(built_module(file), dir.path().join(file)).expect("copy module");
    }
    std::fs::write(dir.path().join("junk.wasm"), b"not a component").expect("junk");
    dir
}

fn stamper_spec(module: &str) -> Value {
    json!({
        "module": module,
        "for": {"apiVersion": "v1", "kind": "ConfigMap"},
        "maxConcurrentReconciles": 4,
        "permissions": [{"apiVersion": "v1", "kind": "ConfigMap",
            "verbs": ["get", "list", "watch", "patch"]}],
    })
}

fn reconciler(reference: &ObjectRef, module: &str) -> Value {
    let mut metadata = json!({"name": reference.name});
    if let Some(ns) = &reference.namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({"apiVersion": "krec.dev/v1alpha1", "kind": reference.kind(),
        "metadata": metadata, "spec": stamper_spec(module)})
}

fn default_stamper() -> ObjectRef {
    ObjectRef {
        namespace: Some("default".into()),
        name: "stamper".into(),
    }
}

async fn object(live: &Live, reference: &ObjectRef) -> Option<Value> {
    live.get(
        &reference.gvk(),
        reference.namespace.as_deref(),
        &reference.name,
    )
    .await
}

/// The reasons of the Events about `reference`, oldest first.
async fn event_reasons(live: &Live, reference: &ObjectRef) -> Vec<String> {
    let options = ListOptions {
        namespace: Some(
            reference
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
        ),
        ..Default::default()
    };
    let events = live
        .api
        .list(&Gvk::new("", "v1", "Event"), &options)
        .await
        .unwrap_or_default();
    events
        .iter()
        .filter(|e| {
            e["involvedObject"]["name"] == reference.name.as_str()
                && e["involvedObject"]["kind"] == reference.kind()
        })
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

async fn wait_event(live: &Live, reference: &ObjectRef, reason: &str) {
    live.eventually(&format!("a {reason} Event about {reference}"), || async {
        event_reasons(live, reference)
            .await
            .iter()
            .any(|r| r == reason)
            .then_some(())
    })
    .await;
}

async fn patch_spec(live: &Live, reference: &ObjectRef, spec: Value) {
    live.api
        .patch(
            &reference.gvk(),
            reference.namespace.as_deref(),
            &reference.name,
            PatchType::Merge,
            &json!({"spec": spec}),
            false,
            "test",
        )
        .await
        .unwrap_or_else(|e| panic!("patching {reference}: {e}"));
}

fn reloads(live: &Live) -> String {
    live.manager
        .scrape()
        .lines()
        .filter(|l| l.starts_with("krec_reloads_total"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_object_should_start_swap_refuse_and_stop_its_guest_with_status_and_events() {
    let modules = module_dir();
    let objects = (0..OBJECTS).map(configmap).collect();
    let live = Live::start_from_cluster(Vec::new(), objects, modules.path()).await;
    let watcher = live.manager.watch_sources(None);
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    let stamper = default_stamper();

    // Created: the guest `default.stamper` starts and reconciles, its status says so.
    live.api
        .create(&reconciler(&stamper, "stamper_a.wasm"), "test")
        .await
        .expect("create the Reconciler");
    live.eventually("version a stamped everything", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    let ready = live
        .wait_condition(&stamper, "Ready", "True", "Running")
        .await;
    assert!(
        ready.starts_with("version 1 (sha256:") && ready.ends_with("running on replica-1"),
        "{ready}"
    );
    let found = object(&live, &stamper).await.expect("object");
    assert_eq!(found["status"]["replica"], "replica-1");
    assert_eq!(found["status"]["version"], 1);
    assert_eq!(
        found["status"]["digest"].as_str(),
        Some(live.controller("default.stamper").module().digest())
    );
    live.wait_condition(&stamper, "ModuleResolved", "True", "Loaded")
        .await;
    live.wait_condition(&stamper, "Degraded", "False", "AsExpected")
        .await;
    wait_event(&live, &stamper, "Started").await;

    // Status writes neither reload nor fight: quiet for a few of the writer's ticks.
    let before = reloads(&live);
    let rv = found["metadata"]["resourceVersion"].clone();
    tokio::time::sleep(krec::guests::status::TICK * 2).await;
    assert_eq!(reloads(&live), before, "a status write reloaded");
    let again = object(&live, &stamper).await.expect("object");
    assert_eq!(
        again["metadata"]["resourceVersion"], rv,
        "status rewritten while nothing changed"
    );

    // A new module: swapped in.
    patch_spec(&live, &stamper, json!({"module": "stamper_b.wasm"})).await;
    live.eventually("version b stamped everything", || async {
        live.all_stamped("b", OBJECTS).await.then_some(())
    })
    .await;
    assert_eq!(live.controller("default.stamper").version().number, 2);
    let ready = live
        .wait_condition(&stamper, "Ready", "True", "Running")
        .await;
    assert!(ready.starts_with("version 2 "), "{ready}");
    wait_event(&live, &stamper, "Swapped").await;

    // A spec the schema takes but the host refuses: the old version keeps running.
    patch_spec(&live, &stamper, json!({"limits": {"timeout": "5 parsecs"}})).await;
    let refused = live
        .wait_condition(&stamper, "Degraded", "True", "NewVersionRefused")
        .await;
    assert!(
        refused.contains(
            "Reconciler default/stamper: spec.limits.timeout: invalid duration \"5 parsecs\""
        ) && refused.ends_with("version 2 keeps running"),
        "{refused}"
    );
    live.wait_condition(&stamper, "Ready", "True", "Running")
        .await;
    wait_event(&live, &stamper, "NewVersionRefused").await;
    live.change_and_wait_stamped("7", "b", OBJECTS).await;

    // A module that is no component: refused the same way, naming the module.
    patch_spec(
        &live,
        &stamper,
        json!({"limits": null, "module": "junk.wasm"}),
    )
    .await;
    let refused = live
        .wait_condition(&stamper, "Degraded", "True", "NewVersionRefused")
        .await;
    assert!(refused.contains("junk.wasm"), "{refused}");
    assert_eq!(live.controller("default.stamper").version().number, 2);

    // Fixed: swapped, no longer degraded.
    patch_spec(&live, &stamper, json!({"module": "stamper_a.wasm"})).await;
    live.wait_condition(&stamper, "Degraded", "False", "AsExpected")
        .await;
    live.eventually("version a stamped everything again", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;

    // Deleted: the guest stops and its watches with it.
    live.api
        .delete(&stamper.gvk(), Some("default"), "stamper", None)
        .await
        .expect("delete");
    live.eventually("the guest stopped", || async {
        live.manager
            .controller("default.stamper")
            .is_none()
            .then_some(())
    })
    .await;
    let informers: Vec<String> = live
        .manager
        .cache()
        .inspect()
        .into_iter()
        .map(|i| i.gvk.kind)
        .collect();
    assert_eq!(
        informers,
        ["ClusterReconciler", "Reconciler"],
        "only the host's own watches are left"
    );
    status.stop().await;
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_or_outside_module_should_not_start_and_say_why_in_its_status() {
    let modules = module_dir();
    let live = Live::start_from_cluster(Vec::new(), vec![configmap(0)], modules.path()).await;
    let watcher = live.manager.watch_sources(None);
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    let outside = ObjectRef {
        namespace: None,
        name: "outside".into(),
    };
    live.api
        .create(&reconciler(&outside, "../stamper_a.wasm"), "test")
        .await
        .expect("create");
    let message = live
        .wait_condition(&outside, "Ready", "False", "Invalid")
        .await;
    assert!(
        message.starts_with("ClusterReconciler outside: spec.module: \"../stamper_a.wasm\" must be a path inside the host's --module-dir"),
        "{message}"
    );
    wait_event(&live, &outside, "Invalid").await;
    // A candidate is a module too: confined alike.
    let candidate = ObjectRef {
        namespace: None,
        name: "candidate".into(),
    };
    let mut object = reconciler(&candidate, "stamper_a.wasm");
    object["spec"]["rollout"] = serde_json::json!({"candidate": "/etc/stamper_b.wasm"});
    live.api.create(&object, "test").await.expect("create");
    let message = live
        .wait_condition(&candidate, "Ready", "False", "Invalid")
        .await;
    assert!(
        message.starts_with("ClusterReconciler candidate: spec.rollout.candidate: \"/etc/stamper_b.wasm\" must be a path inside the host's --module-dir"),
        "{message}"
    );
    let junk = ObjectRef {
        namespace: None,
        name: "junk".into(),
    };
    live.api
        .create(&reconciler(&junk, "junk.wasm"), "test")
        .await
        .expect("create");
    let message = live
        .wait_condition(&junk, "Ready", "False", "LoadFailed")
        .await;
    assert!(message.contains("junk.wasm"), "{message}");
    live.wait_condition(&junk, "ModuleResolved", "False", "LoadFailed")
        .await;
    assert!(live.manager.controllers().is_empty());
    status.stop().await;
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_objects_should_run_side_by_side_and_a_file_should_win_its_name() {
    let modules = module_dir();
    let files = tempfile::tempdir().expect("tempdir");
    let file = files.path().join("stamper.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: stamper}}\nspec: {}\n",
            stamper_spec(&modules.path().join("stamper_a.wasm").display().to_string())
        ),
    )
    .expect("write manifest");
    let manifest = Manifest::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let team_a = ObjectRef {
        namespace: Some("team-a".into()),
        name: "stamper".into(),
    };
    let cluster = ObjectRef {
        namespace: None,
        name: "stamper".into(),
    };
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    let objects = vec![
        namespace,
        configmap(0),
        reconciler(&team_a, "stamper_b.wasm"),
        reconciler(&cluster, "stamper_b.wasm"),
    ];
    let live = Live::start_from_cluster(vec![manifest], objects, modules.path()).await;
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    let names: Vec<String> = live.manager.controllers().into_keys().collect();
    assert_eq!(names, ["stamper", "team-a.stamper"]);
    let message = live
        .wait_condition(&cluster, "Ready", "False", "Duplicate")
        .await;
    assert_eq!(
        message,
        format!(
            "ClusterReconciler stamper: guest \"stamper\" is already defined by {}",
            file.display()
        )
    );
    live.wait_condition(&team_a, "Ready", "True", "Running")
        .await;
    // A reload of the files keeps the objects' guests.
    let report = live
        .manager
        .reload(files.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.removed.is_empty(), "{report:?}");
    // The file gone, its guest passes to the ClusterReconciler by an ordinary swap.
    std::fs::remove_file(&file).expect("remove");
    let report = live
        .manager
        .reload(files.path())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.swapped, ["stamper"], "{report:?}");
    assert_eq!(
        live.controller("stamper").module().manifest().path,
        Path::new("ClusterReconciler stamper")
    );
    live.wait_condition(&cluster, "Ready", "True", "Running")
        .await;
    // The only replica stops: its guests' objects no longer say they run.
    status.stop().await;
    for reference in [&cluster, &team_a] {
        let message = live
            .wait_condition(reference, "Ready", "Unknown", "HostStopped")
            .await;
        assert!(message.contains("replica-1 stopped"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_by_object_under_load_should_lose_no_key() {
    let modules = module_dir();
    let objects = (0..OBJECTS).map(configmap).collect();
    let stamper = default_stamper();
    let mut all = vec![reconciler(&stamper, "stamper_a.wasm")];
    all.extend::<Vec<Value>>(objects);
    let live = Live::start_from_cluster(Vec::new(), all, modules.path()).await;
    let watcher = live.manager.watch_sources(None);
    live.eventually("version a stamped everything", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let api = live.api.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let patch = json!({"data": {"value": n.to_string()}});
                let name = format!("cm-{}", n % OBJECTS);
                api.patch(
                    &cm_gvk(),
                    Some("default"),
                    &name,
                    PatchType::Merge,
                    &patch,
                    false,
                    "load",
                )
                .await
                .expect("update under load");
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let controller = live.controller("default.stamper");
    for swap in 1..=6u64 {
        let module = if swap % 2 == 1 {
            "stamper_b.wasm"
        } else {
            "stamper_a.wasm"
        };
        patch_spec(&live, &stamper, json!({"module": module})).await;
        live.eventually(&format!("swap {swap}"), || async {
            (controller.version().number == swap + 1).then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    live.eventually("the last version stamped every last value", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    assert_eq!(controller.stats().overlaps.load(Ordering::Relaxed), 0);
    assert_eq!(controller.stats().traps(), 0);
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_created_as_another_is_deleted_should_reconcile_the_same_objects() {
    let modules = module_dir();
    let objects = (0..OBJECTS).map(configmap).collect();
    let live = Live::start_from_cluster(Vec::new(), objects, modules.path()).await;
    let watcher = live.manager.watch_sources(None);
    let first = default_stamper();
    live.api
        .create(&reconciler(&first, "stamper_a.wasm"), "test")
        .await
        .expect("create the first Reconciler");
    live.eventually("version a stamped everything", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    // Deleted and, at once, another (cluster-wide) one for the same kind: the watch the first
    // guest held goes and comes back, and the second guest must see every object.
    let second = ObjectRef {
        namespace: None,
        name: "stamper-2".into(),
    };
    live.api
        .delete(&first.gvk(), Some("default"), "stamper", None)
        .await
        .expect("delete");
    live.api
        .create(&reconciler(&second, "stamper_b.wasm"), "test")
        .await
        .expect("create the second Reconciler");
    live.eventually("version b stamped everything", || async {
        live.all_stamped("b", OBJECTS).await.then_some(())
    })
    .await;
    assert!(live.manager.controller("default.stamper").is_none());
    // And once more after the first is fully gone.
    live.api
        .delete(&second.gvk(), None, "stamper-2", None)
        .await
        .expect("delete");
    live.eventually("the guest stopped", || async {
        live.manager.controllers().is_empty().then_some(())
    })
    .await;
    live.api
        .create(&reconciler(&first, "stamper_a.wasm"), "test")
        .await
        .expect("create the first Reconciler again");
    live.eventually("version a stamped everything again", || async {
        live.all_stamped("a", OBJECTS).await.then_some(())
    })
    .await;
    watcher.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_deleted_while_its_module_file_is_read_should_still_stop_its_guest() {
    // Reading a module (as a reload, a backup or `krec check` does) is a file event that
    // changes nothing; it must not swallow an object's change arriving at the same time.
    let modules = module_dir();
    let live = Live::start_from_cluster(Vec::new(), vec![configmap(0)], modules.path()).await;
    let watcher = live.manager.watch_sources(None);
    let stamper = default_stamper();
    for round in 0..4 {
        live.api
            .create(&reconciler(&stamper, "stamper_a.wasm"), "test")
            .await
            .expect("create the Reconciler");
        live.eventually(&format!("round {round}: the guest started"), || async {
            live.manager
                .controller("default.stamper")
                .is_some()
                .then_some(())
        })
        .await;
        std::fs::read(modules.path().join("stamper_a.wasm")).expect("read the module");
        tokio::time::sleep(krec::guests::RELOAD_DEBOUNCE / 3).await;
        live.api
            .delete(&stamper.gvk(), Some("default"), "stamper", None)
            .await
            .expect("delete");
        live.eventually(&format!("round {round}: the guest stopped"), || async {
            live.manager
                .controller("default.stamper")
                .is_none()
                .then_some(())
        })
        .await;
    }
    watcher.stop().await;
}

#[tokio::test]
async fn from_cluster_without_the_crds_should_fail_naming_them() {
    let (_cluster, _client, api) = krec_tests::local_cluster().await;
    let options = krec::guests::ManagerOptions {
        from_cluster: Some(krec::guests::from_cluster::FromCluster::default()),
        ..Default::default()
    };
    let err = krec::guests::Manager::start_with(api, Vec::new(), options)
        .await
        .expect_err("no CRDs");
    let text = format!("{err:#}");
    assert!(
        text.contains("does not serve krec.dev/v1alpha1")
            && text.contains("install krec's CRDs first"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_asking_for_more_than_the_host_may_do_should_be_refused_before_it_runs() {
    let (cluster, _client, admin) = krec_tests::local_cluster().await;
    let mut objects = krec::install::crds::crds();
    objects.push(configmap(0));
    let problems = krec::install::apply_objects(&admin, objects).await;
    assert!(problems.is_empty(), "{problems:?}");
    // The host may read ConfigMaps but not patch them.
    let rules = json!([
        {"apiGroups": ["krec.dev"], "resources": ["reconcilers", "clusterreconcilers"],
            "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["krec.dev"], "resources": ["reconcilers/status", "clusterreconcilers/status"],
            "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
    ]);
    let api = krec_tests::service_account_api(&cluster, &admin, rules).await;
    let modules = module_dir();
    let options = krec::guests::ManagerOptions {
        from_cluster: Some(krec::guests::from_cluster::FromCluster {
            module_dir: modules.path().to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let manager = krec::guests::Manager::start_with(api.clone(), Vec::new(), options)
        .await
        .expect("manager");
    let watcher = manager.watch_sources(None);
    let status = StatusWriter::start(manager.clone(), api.clone(), "replica-1".into());
    let stamper = default_stamper();
    admin
        .create(&reconciler(&stamper, "stamper_a.wasm"), "test")
        .await
        .expect("create");
    let deadline = std::time::Instant::now() + krec_tests::EVENTUALLY;
    let message = loop {
        let found = admin
            .get(&stamper.gvk(), Some("default"), "stamper")
            .await
            .expect("object");
        let ready = found["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned());
        if let Some(ready) = ready.filter(|c| c["reason"] == "PermissionRefused") {
            assert_eq!(ready["status"], "False");
            break ready["message"].as_str().unwrap_or_default().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never refused: {found}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        message.starts_with(
            "Reconciler default/stamper: spec.permissions[0]: the host may not patch configmaps in the namespace \"default\""
        ),
        "{message}"
    );
    assert!(manager.controller("default.stamper").is_none());
    let cm = admin
        .get(&cm_gvk(), Some("default"), "cm-0")
        .await
        .expect("cm-0");
    assert!(
        krec_tests::annotation(&cm, "krec.dev/stamped-by").is_none(),
        "never reconciled"
    );
    // Refused for a while: the reload's retries have backed off past 8 s by now.
    tokio::time::sleep(Duration::from_secs(9)).await;
    // The Role the README's flow applies (`krec rbac`): the guest starts within seconds of
    // it, not at the next backed-off retry.
    admin
        .create(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "stamper", "namespace": "default"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}]}),
            "test",
        )
        .await
        .expect("role");
    let granted = std::time::Instant::now();
    admin
        .create(
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "stamper", "namespace": "default"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "stamper"},
                "subjects": [{"kind": "ServiceAccount", "name": "krec", "namespace": "krec-system"}]}),
            "test",
        )
        .await
        .expect("binding");
    let deadline = granted + Duration::from_secs(5);
    while manager.controller("default.stamper").is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "not started within 5 s of the RBAC that allows it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    status.stop().await;
    watcher.stop().await;
    manager.cache().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_guest_reaching_into_another_namespace_should_get_a_permission_error() {
    let modules = module_dir();
    let team = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    let other = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b"}});
    let secret = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "b"}, "data": {"k": "v"}});
    // The misbehave guest's `read-cm` reads ConfigMap b/x; its permission names no namespace.
    let misbehave = json!({"apiVersion": "krec.dev/v1alpha1", "kind": "Reconciler",
        "metadata": {"name": "misbehave", "namespace": "team-a"},
        "spec": {"module": "misbehave.wasm",
            "tickers": [{"every": "1m", "request": {"name": "read-cm"}}],
            "permissions": [{"apiVersion": "v1", "kind": "ConfigMap", "verbs": ["get", "list", "watch"]}]}});
    let live = Live::start_from_cluster(
        Vec::new(),
        vec![team, other, secret, misbehave],
        modules.path(),
    )
    .await;
    let controller = live.controller("team-a.misbehave");
    let error = live
        .eventually("the cross-namespace read refused", || async {
            controller.stats().last_error().map(|(message, _)| message)
        })
        .await;
    assert!(
        error.starts_with("team-a/read-cm: ")
            && error.contains("ConfigMap")
            && error.contains("\"b\""),
        "{error}"
    );
    assert!(
        error.contains("not permitted") || error.contains("permission"),
        "{error}"
    );
    assert_eq!(controller.stats().done(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_quota_should_be_refused_while_other_tenants_run() {
    let modules = module_dir();
    let namespace =
        |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    let cm = |ns: &str| {
        let mut cm = configmap(0);
        cm["metadata"]["namespace"] = json!(ns);
        cm
    };
    let rec = |ns: &str, name: &str| {
        reconciler(
            &ObjectRef {
                namespace: Some(ns.into()),
                name: name.into(),
            },
            "stamper_a.wasm",
        )
    };
    let objects = vec![
        namespace("team-a"),
        namespace("team-b"),
        cm("team-a"),
        cm("team-b"),
        rec("team-a", "first"),
        rec("team-a", "second"),
        rec("team-b", "first"),
    ];
    let from = krec::guests::from_cluster::FromCluster {
        module_dir: modules.path().to_owned(),
        quota: "guests=1".parse().expect("quota"),
    };
    let live = Live::start_from(Vec::new(), objects, from).await;
    let status = StatusWriter::start(live.manager.clone(), live.api.clone(), "replica-1".into());
    let names: Vec<String> = live.manager.controllers().into_keys().collect();
    assert_eq!(names, ["team-a.first", "team-b.first"]);
    let second = ObjectRef {
        namespace: Some("team-a".into()),
        name: "second".into(),
    };
    let message = live
        .wait_condition(&second, "Ready", "False", "QuotaExceeded")
        .await;
    assert!(
        message.starts_with("Reconciler team-a/second: namespace \"team-a\" would exceed its quota (--tenant-quota guests=1): with this guest its guests would be 2"),
        "{message}"
    );
    wait_event(&live, &second, "QuotaExceeded").await;
    // The other tenant's guest reconciles its namespace.
    live.eventually("team-b's ConfigMap stamped", || async {
        let cm = live.get(&cm_gvk(), Some("team-b"), "cm-0").await?;
        (krec_tests::annotation(&cm, "krec.dev/stamped-by") == Some("a")).then_some(())
    })
    .await;
    status.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconciler_asking_for_more_than_its_namespace_should_be_refused_at_admission() {
    let modules = module_dir();
    let team = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    let live = Live::start_from_cluster(Vec::new(), vec![team], modules.path()).await;
    let with = |spec: Value| {
        let mut object = reconciler(
            &ObjectRef {
                namespace: Some("team-a".into()),
                name: "x".into(),
            },
            "stamper_a.wasm",
        );
        for (k, v) in spec.as_object().expect("object") {
            object["spec"][k] = v.clone();
        }
        object
    };
    let cases = [
        (
            json!({"namespaces": ["team-b"]}),
            "spec.namespaces: a Reconciler in team-a may only use its own namespace",
        ),
        (
            json!({"permissions": [
                {"apiVersion": "v1", "kind": "ConfigMap", "verbs": ["get"], "namespaces": ["team-a"]},
                {"apiVersion": "v1", "kind": "Secret", "verbs": ["get"], "namespaces": ["kube-system"]},
            ]}),
            "spec.permissions[1].namespaces: a Reconciler in team-a may only use its own namespace",
        ),
        (
            json!({"for": {"apiVersion": "v1", "kind": "Namespace"}}),
            "spec.for: a cluster-scoped kind",
        ),
        (
            json!({"permissions": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "verbs": ["get"]}]}),
            "spec.permissions[0]: a cluster-scoped kind",
        ),
        (
            json!({"watches": [{"apiVersion": "v1", "kind": "ConfigMap", "mapTo": {"namespace": "default", "name": "x"}}]}),
            "spec.watches[0].mapTo.namespace: a Reconciler in team-a may only use its own namespace",
        ),
        (
            json!({"watches": [
                {"apiVersion": "v1", "kind": "ConfigMap", "mapByLabel": {"key": "app"}},
                {"apiVersion": "v1", "kind": "Secret", "mapByLabel": {"key": "app", "namespace": "kube-system"}},
            ]}),
            "spec.watches[1].mapByLabel.namespace: a Reconciler in team-a may only use its own namespace",
        ),
        (
            json!({"conversion": {"crd": "foos.example.com"}}),
            "spec.conversion:",
        ),
    ];
    for (spec, expected) in cases {
        let err = live
            .api
            .create(&with(spec.clone()), "test")
            .await
            .expect_err(&format!("{spec} admitted"));
        let text = err.to_string();
        assert!(
            text.contains("ValidatingAdmissionPolicy 'krec-reconciler-tenancy'")
                && text.contains(expected),
            "{spec}: {text}"
        );
    }
    // Within the namespace: admitted; a ClusterReconciler may name any namespace.
    live.api
        .create(&with(json!({"namespaces": ["team-a"]})), "test")
        .await
        .expect("own namespace admitted");
    let mut cluster = reconciler(
        &ObjectRef {
            namespace: None,
            name: "wide".into(),
        },
        "stamper_a.wasm",
    );
    cluster["spec"]["namespaces"] = json!(["team-a", "default"]);
    live.api
        .create(&cluster, "test")
        .await
        .expect("a ClusterReconciler admitted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_editor_should_manage_reconcilers_there_and_no_cluster_reconcilers() {
    let modules = module_dir();
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-edits", "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}),
    ];
    let live = Live::start_from_cluster(Vec::new(), objects, modules.path()).await;
    let may = |verb: &'static str, resource: &'static str, namespace: Option<&'static str>| {
        let api = live.api.clone();
        async move {
            let mut attributes = json!({"verb": verb, "group": "krec.dev", "resource": resource});
            if let Some(ns) = namespace {
                attributes["namespace"] = json!(ns);
            }
            let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": "alice", "resourceAttributes": attributes}});
            let answer = api.create(&review, "test").await.expect("review");
            answer["status"]["allowed"].as_bool().unwrap_or(false)
        }
    };
    live.eventually("edit aggregating the Reconciler rights", || async {
        may("create", "reconcilers", Some("team-a"))
            .await
            .then_some(())
    })
    .await;
    assert!(may("delete", "reconcilers", Some("team-a")).await);
    assert!(
        !may("create", "reconcilers", Some("default")).await,
        "only where alice edits"
    );
    assert!(
        !may("create", "clusterreconcilers", None).await,
        "cluster administrators only"
    );
    assert!(
        !may("patch", "reconcilers/status", Some("team-a")).await,
        "the host's to write"
    );
}
