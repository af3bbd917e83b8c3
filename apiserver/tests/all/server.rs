//! The embedded API server driven by `kube` over HTTPS, as a controller would use it.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use krec_apiserver::Server;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind, Status};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Config};
use serde_json::json;

/// The repository's top directory.
fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("apiserver/ has a parent")
        .to_owned()
}

async fn client_for(cluster: &Server) -> Client {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    Client::try_from(config).expect("client")
}

async fn start() -> (Server, Client) {
    let cluster = Server::builder().start().await.expect("start");
    let client = client_for(&cluster).await;
    (cluster, client)
}

fn status_of(err: kube::Error) -> Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))
    .expect("configmap")
}

#[tokio::test]
async fn typed_crud_should_follow_kubernetes_semantics() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let pp = PostParams::default();
    let a = cms
        .create(&pp, &cm("a", json!({"app": "web", "tier": "fe"})))
        .await
        .expect("create");
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    let err = status_of(
        cms.create(&pp, &cm("a", json!({})))
            .await
            .expect_err("duplicate"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));

    // Optimistic concurrency.
    let mut first = a.clone();
    first.data = Some([("k".to_owned(), "first".to_owned())].into());
    let updated = cms.replace("a", &pp, &first).await.expect("update");
    assert_ne!(
        updated.metadata.resource_version,
        a.metadata.resource_version
    );
    let mut stale = a.clone();
    stale.data = Some([("k".to_owned(), "stale".to_owned())].into());
    let err = status_of(cms.replace("a", &pp, &stale).await.expect_err("stale"));
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // generateName, invalid names, a missing namespace.
    let mut generated = cm("", json!({}));
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let generated = cms.create(&pp, &generated).await.expect("generateName");
    assert!(
        generated
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("gen-") && n.len() == 9)
    );
    let err = status_of(
        cms.create(&pp, &cm("Bad_Name", json!({})))
            .await
            .expect_err("bad name"),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let err = status_of(
        nowhere
            .create(&pp, &cm("x", json!({})))
            .await
            .expect_err("no namespace"),
    );
    assert_eq!(err.code, 404);

    // Selectors.
    cms.create(&pp, &cm("b", json!({"app": "web", "tier": "be"})))
        .await
        .expect("b");
    cms.create(&pp, &cm("c", json!({"app": "db"})))
        .await
        .expect("c");
    let names = |list: kube::core::ObjectList<ConfigMap>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect()
    };
    for (selector, expected) in [
        ("app=web", vec!["a", "b"]),
        ("app==web,tier!=fe", vec!["b"]),
        ("tier in (fe,be)", vec!["a", "b"]),
        (
            "tier notin (fe)",
            vec![
                "b",
                "c",
                &generated.metadata.name.clone().unwrap_or_default(),
            ],
        ),
        ("tier", vec!["a", "b"]),
        ("!tier,app", vec!["c"]),
    ] {
        let mut expected: Vec<String> = expected.into_iter().map(str::to_owned).collect();
        expected.sort();
        let got = names(
            cms.list(&ListParams::default().labels(selector))
                .await
                .expect(selector),
        );
        assert_eq!(got, expected, "selector {selector}");
    }
    let got = names(
        cms.list(&ListParams::default().fields("metadata.name=c"))
            .await
            .expect("field"),
    );
    assert_eq!(got, ["c"]);
    let err = status_of(
        cms.list(&ListParams::default().labels("app in (web"))
            .await
            .expect_err("bad selector"),
    );
    assert_eq!(err.code, 400);

    // Paging.
    let page = cms
        .list(&ListParams::default().limit(2))
        .await
        .expect("page 1");
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().expect("continue token");
    let rest = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .expect("page 2");
    assert_eq!(page.items.len() + rest.items.len(), 4);
    assert!(rest.metadata.continue_.is_none());

    // deletecollection.
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("app=web"),
    )
    .await
    .expect("deletecollection");
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("app"))
                .await
                .expect("list")
        ),
        ["c"]
    );
}

#[tokio::test]
async fn status_subresource_and_generation_should_behave_as_the_api_server() {
    let (_cluster, client) = start().await;
    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 7}})).expect("deployment");
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert_eq!(d.metadata.generation, Some(1));
    assert!(d.status.is_none(), "status is dropped on create");
    let labelled = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}, "status": {"replicas": 3}})),
        )
        .await
        .expect("patch");
    assert_eq!(
        labelled.metadata.generation,
        Some(1),
        "metadata changes do not bump generation"
    );
    assert!(
        labelled.status.is_none(),
        "status changes are ignored on the main resource"
    );
    let status = deployments
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"availableReplicas": 1}, "spec": {"replicas": 9}})),
        )
        .await
        .expect("status");
    assert_eq!(status.status.and_then(|s| s.available_replicas), Some(1));
    assert_eq!(
        status.spec.and_then(|s| s.replicas),
        Some(1),
        "spec changes are ignored on the status subresource"
    );
    let scaled = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scale");
    assert_eq!(scaled.metadata.generation, Some(2));
}

#[tokio::test]
async fn finalizers_garbage_collection_and_namespace_deletion() {
    let (_cluster, client) = start().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).expect("ns");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let mut owner = cm("owner", json!({}));
    owner.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let owner = cms
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner");
    let mut dependent = cm("dependent", json!({}));
    dependent.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({"apiVersion": "v1",
        "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid, "controller": true}))
        .expect("ref"),
    ]);
    cms.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");

    // A finalizer holds deletion: the object stays, marked.
    cms.delete("owner", &DeleteParams::default())
        .await
        .expect("delete");
    let held = cms.get("owner").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(cms.get("dependent").await.is_ok(), "the owner still exists");
    // Removing the finalizer lets it go, and its dependent is garbage-collected.
    cms.patch(
        "owner",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert_eq!(
        status_of(cms.get("owner").await.expect_err("gone")).code,
        404
    );
    assert_eq!(
        status_of(cms.get("dependent").await.expect_err("collected")).code,
        404
    );

    // Deleting a namespace removes its contents, then the namespace.
    cms.create(&PostParams::default(), &cm("content", json!({})))
        .await
        .expect("content");
    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .expect("delete namespace");
    assert_eq!(
        status_of(cms.get("content").await.expect_err("content gone")).code,
        404
    );
    assert_eq!(
        status_of(namespaces.get("team").await.expect_err("namespace gone")).code,
        404
    );
}

async fn apply_foo_crd(client: &Client) -> ApiResource {
    let text =
        std::fs::read_to_string(repo_root().join("sample-guests/foo-controller/crd/foo-crd.yaml"))
            .expect("crd yaml");
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_yaml_ng::from_str(&text).expect("crd");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let gvk = GroupVersionKind::gvk("samplecontroller.k8s.io", "v1alpha1", "Foo");
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .expect("the CRD's kind is discoverable");
    assert!(caps.scope == kube::discovery::Scope::Namespaced);
    assert_eq!(resource.plural, "foos");
    resource
}

#[tokio::test]
async fn a_crd_should_serve_validate_and_vanish() {
    let (_cluster, client) = start().await;
    let resource = apply_foo_crd(&client).await;
    let foos: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let foo = |name: &str, replicas: i64| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
            "metadata": {"name": name}, "spec": {"deploymentName": name, "replicas": replicas, "unknown": true}})).expect("foo")
    };
    let created = foos
        .create(&PostParams::default(), &foo("ok", 3))
        .await
        .expect("valid foo");
    assert!(
        created.data["spec"].get("unknown").is_none(),
        "unknown fields are pruned"
    );
    assert_eq!(created.metadata.generation, Some(1));
    let err = status_of(
        foos.create(&PostParams::default(), &foo("big", 11))
            .await
            .expect_err("replicas > 10"),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(err.message.contains("spec.replicas"), "{}", err.message);
    let err = status_of(
        foos.create(&PostParams::default(), &foo("small", 0))
            .await
            .expect_err("replicas < 1"),
    );
    assert!(
        err.message.contains("greater than or equal to 1"),
        "{}",
        err.message
    );

    let status = foos
        .patch_status(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"availableReplicas": 2}})),
        )
        .await
        .expect("status");
    assert_eq!(status.data["status"]["availableReplicas"], 2);

    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.delete("foos.samplecontroller.k8s.io", &DeleteParams::default())
        .await
        .expect("delete crd");
    let gvk = GroupVersionKind::gvk("samplecontroller.k8s.io", "v1alpha1", "Foo");
    assert!(
        kube::discovery::pinned_kind(&client, &gvk).await.is_err(),
        "gone from discovery"
    );
    assert_eq!(
        status_of(
            foos.list(&ListParams::default())
                .await
                .expect_err("not served")
        )
        .code,
        404
    );
}

#[tokio::test]
async fn a_watch_should_resume_from_a_resource_version() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PostParams::default();
    let a = cms.create(&pp, &cm("a", json!({}))).await.expect("a");
    let from = a.metadata.resource_version.clone().expect("rv");
    cms.create(&pp, &cm("b", json!({}))).await.expect("b");
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .expect("patch a");
    cms.delete("b", &DeleteParams::default())
        .await
        .expect("delete b");

    let mut stream = cms
        .watch(&WatchParams::default().timeout(2), &from)
        .await
        .expect("watch")
        .boxed();
    let mut seen = Vec::new();
    while let Some(event) = stream.try_next().await.expect("event") {
        match event {
            WatchEvent::Added(o) => {
                seen.push(format!("ADDED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Modified(o) => {
                seen.push(format!("MODIFIED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Deleted(o) => {
                seen.push(format!("DELETED {}", o.metadata.name.unwrap_or_default()))
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
        }
    }
    assert_eq!(
        seen,
        ["ADDED b", "MODIFIED a", "DELETED b"],
        "exactly the changes after {from}"
    );
}

#[tokio::test]
async fn a_compacted_watch_should_get_gone_and_a_relist_should_recover() {
    let cluster = Server::builder()
        .watch_history(3)
        .start()
        .await
        .expect("start");
    let client = client_for(&cluster).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms
        .create(&PostParams::default(), &cm("first", json!({})))
        .await
        .expect("first");
    for i in 0..5 {
        cms.create(&PostParams::default(), &cm(&format!("n{i}"), json!({})))
            .await
            .expect("more");
    }
    let from = first.metadata.resource_version.expect("rv");
    let mut stream = cms
        .watch(&WatchParams::default().timeout(2), &from)
        .await
        .expect("watch")
        .boxed();
    match stream.try_next().await.expect("event") {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    // kube's watcher handles the 410 by relisting; its store ends up complete.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let watch =
        reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let driver = tokio::spawn(watch.for_each(|_| async {}));
    reader.wait_until_ready().await.expect("synced");
    assert_eq!(reader.len(), 6);
    driver.abort();
}

#[tokio::test]
async fn a_reflector_should_stay_correct_across_a_restart_with_a_data_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = Server::builder().data_dir(dir.path());
    let cluster = config.clone().start().await.expect("start");
    let addr = cluster.addr();
    let client = client_for(&cluster).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(name, json!({})))
            .await
            .expect("create");
    }
    // One reflector, kept running across the restart.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default()).default_backoff(),
    );
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    reader.wait_until_ready().await.expect("synced");
    assert_eq!(reader.len(), 2);

    // Restart on the same port and directory: objects, resourceVersions and the CA survive, so
    // the same client reconnects.
    cluster.shutdown().await;
    let restarted = config.addr(addr).start().await.expect("restart");
    assert_eq!(
        cms.list(&ListParams::default())
            .await
            .expect("same client after restart")
            .items
            .len(),
        2
    );
    // Field ownership survives as it was written: b's entry reads as JSON, and an update by
    // another manager after the restart is recorded beside it.
    let b = cms.get("b").await.expect("b after restart");
    let entries = b.metadata.managed_fields.clone().unwrap_or_default();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0].fields_v1.as_ref().map(|f| f.0.clone()),
        Some(json!({"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {}}}))
    );
    let relabel = Patch::Merge(json!({"metadata": {"labels": {"after": "restart"}}}));
    let patched = cms
        .patch(
            "b",
            &PatchParams {
                field_manager: Some("other".into()),
                ..Default::default()
            },
            &relabel,
        )
        .await
        .expect("patch after restart");
    let managers: Vec<_> = patched
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert_eq!(managers.len(), 2, "{managers:?}");
    cms.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .expect("after restart");
    cms.delete("a", &DeleteParams::default())
        .await
        .expect("delete after restart");

    let names = || {
        let mut names: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        names.sort();
        names
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while names() != ["b", "c"] && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        names(),
        ["b", "c"],
        "the reflector's store follows the restarted server"
    );
    driver.abort();
    drop(restarted);
}

#[tokio::test]
async fn a_streaming_list_should_end_its_initial_events_with_a_bookmark() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for name in ["a", "b", "c"] {
        cms.create(&PostParams::default(), &cm(name, json!({})))
            .await
            .expect("create");
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let config = watcher::Config::default().streaming_lists();
    let driver = tokio::spawn(
        reflector(writer, watcher(cms, config))
            .applied_objects()
            .for_each(|_| async {}),
    );
    tokio::time::timeout(Duration::from_secs(20), reader.wait_until_ready())
        .await
        .expect("the initial-events-end bookmark arrives")
        .expect("ready");
    assert_eq!(reader.len(), 3);
    driver.abort();
}

/// Send `body` as a PATCH of `content_type` to `path`; returns the object or the error.
async fn raw_patch(
    client: &Client,
    path: &str,
    content_type: &str,
    body: serde_json::Value,
) -> Result<serde_json::Value, kube::Error> {
    let request = http::Request::patch(path)
        .header("content-type", content_type)
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    client.request::<serde_json::Value>(request).await
}

#[tokio::test]
async fn every_patch_type_should_apply_as_the_api_server_applies_it() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("p", json!({"app": "web"})))
        .await
        .expect("create");
    let path = "/api/v1/namespaces/default/configmaps/p";

    // JSON patch (RFC 6902): add, replace, remove, and a failing test op.
    let patched = raw_patch(
        &client,
        path,
        "application/json-patch+json",
        json!([
            {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
            {"op": "replace", "path": "/data/k", "value": "v2"},
            {"op": "remove", "path": "/metadata/labels/app"},
        ]),
    )
    .await
    .expect("json patch");
    assert_eq!(patched["metadata"]["labels"], json!({"tier": "fe"}));
    assert_eq!(patched["data"]["k"], "v2");
    let failed = raw_patch(
        &client,
        path,
        "application/json-patch+json",
        json!([{"op": "test", "path": "/data/k", "value": "other"}]),
    )
    .await
    .expect_err("a failing test op");
    let status = status_of(failed);
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");

    // Merge patch: null deletes a key.
    let merged = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": null, "n": "1"}})),
        )
        .await
        .expect("merge patch");
    assert_eq!(
        merged.data.expect("data"),
        [("n".to_owned(), "1".to_owned())].into()
    );

    // Server-side apply creates a missing object and updates an existing one.
    let apply = PatchParams::apply("krec-test");
    let created = cms
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied"}, "data": {"a": "1"}})),
        )
        .await
        .expect("apply creates");
    assert_eq!(created.data.expect("data")["a"], "1");
    let updated = cms
        .patch(
            "applied",
            &apply,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "applied"}, "data": {"a": "2"}})),
        )
        .await
        .expect("apply updates");
    assert_eq!(updated.data.expect("data")["a"], "2");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );

    // Strategic merge patch: a keyed list (containers by name) is merged, not replaced.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "web", "image": "web:1", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "sidecar:1"}]}}}}))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create deployment");
    let patched = deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "web:2"}]}}}})),
        )
        .await
        .expect("strategic patch");
    let containers = patched
        .spec
        .expect("spec")
        .template
        .spec
        .expect("pod spec")
        .containers;
    assert_eq!(containers.len(), 2, "{containers:?}");
    let web = containers.iter().find(|c| c.name == "web").expect("web");
    assert_eq!(web.image.as_deref(), Some("web:2"));
    assert_eq!(web.ports.as_ref().map(Vec::len), Some(1), "ports kept");
}

#[tokio::test]
async fn discovery_should_serve_every_built_in_kind() {
    let (_cluster, client) = start().await;
    let version = client.apiserver_version().await.expect("/version");
    assert!(!version.git_version.is_empty());
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .expect("discovery");
    let served: Vec<(String, String, String)> = discovery
        .groups()
        .flat_map(|group| {
            group
                .recommended_resources()
                .into_iter()
                .map(|(resource, _)| (resource.group, resource.version, resource.plural))
        })
        .collect();
    for (group, version, plural) in [
        ("", "v1", "namespaces"),
        ("", "v1", "pods"),
        ("", "v1", "configmaps"),
        ("", "v1", "secrets"),
        ("", "v1", "services"),
        ("", "v1", "serviceaccounts"),
        ("", "v1", "events"),
        ("events.k8s.io", "v1", "events"),
        ("apps", "v1", "deployments"),
        ("apps", "v1", "replicasets"),
        ("apps", "v1", "statefulsets"),
        ("apps", "v1", "daemonsets"),
        ("batch", "v1", "jobs"),
        ("coordination.k8s.io", "v1", "leases"),
        ("rbac.authorization.k8s.io", "v1", "clusterroles"),
        ("rbac.authorization.k8s.io", "v1", "rolebindings"),
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
    ] {
        assert!(
            served.contains(&(group.into(), version.into(), plural.into())),
            "{group}/{version} {plural} is not served: {served:?}"
        );
    }
}

/// What kube-apiserver refuses and a real cluster's users hit first: a CRD of a protected group
/// (`*.k8s.io`) without API approval, and an owner reference without a uid. The approval is
/// recorded in the CRD's `KubernetesAPIApprovalPolicyConformant` condition.
#[tokio::test]
async fn protected_crds_and_owner_references_without_uid_should_be_refused() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (_cluster, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let text =
        std::fs::read_to_string(repo_root().join("sample-guests/foo-controller/crd/foo-crd.yaml"))
            .expect("crd file");
    let mut crd: CustomResourceDefinition = serde_yaml_ng::from_str(&text).expect("crd");
    let approval = crd.metadata.annotations.take();
    let err = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect_err("no approval annotation");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"foos.samplecontroller.k8s.io\" is invalid: metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
    );
    crd.metadata.annotations = approval;
    let created = crds
        .create(&PostParams::default(), &crd)
        .await
        .expect("approved");
    let condition = created
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "KubernetesAPIApprovalPolicyConformant")
        .expect("approval condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_deref()),
        ("False", Some("UnapprovedAnnotation"))
    );

    let pods: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": true}]},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}))
    .expect("pod");
    let err = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect_err("no uid");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "Pod \"web-0\" is invalid: metadata.ownerReferences.uid: Invalid value: \"\": must not be empty"
    );
}

/// A protobuf create as a client-go clientset sends it (the `k8s\0` envelope around the
/// message) round-trips: the object is stored as its JSON, read back with kube's JSON client,
/// and a client accepting protobuf only gets protobuf back.
#[tokio::test]
async fn a_protobuf_create_should_round_trip() {
    use krec_apiserver::protobuf;
    let (_cluster, client) = start().await;
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "from-protobuf", "labels": {"via": "protobuf"}},
        "data": {"key": "value"}, "binaryData": {"bin": "AAEC"}});
    let body = protobuf::encode(&configmap)
        .expect("a built-in kind")
        .expect("encodes");
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", protobuf::MEDIA_TYPE)
        .header("accept", protobuf::MEDIA_TYPE)
        .body(kube::client::Body::from(body))
        .expect("request");
    let response = client.send(request).await.expect("send");
    assert_eq!(response.status(), 201);
    assert_eq!(
        response.headers()["content-type"],
        protobuf::MEDIA_TYPE,
        "protobuf was the only acceptable answer"
    );
    let answered = protobuf::decode(&response.into_body().collect_bytes().await.expect("body"))
        .expect("decodes");
    assert_eq!(answered["metadata"]["name"], "from-protobuf");
    assert!(answered["metadata"]["uid"].is_string());

    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let stored = cms.get("from-protobuf").await.expect("stored");
    assert_eq!(
        stored
            .data
            .unwrap_or_default()
            .get("key")
            .map(String::as_str),
        Some("value")
    );
    assert_eq!(
        stored
            .binary_data
            .unwrap_or_default()
            .get("bin")
            .map(|b| b.0.clone()),
        Some(vec![0, 1, 2])
    );
    assert_eq!(
        stored
            .metadata
            .labels
            .unwrap_or_default()
            .get("via")
            .map(String::as_str),
        Some("protobuf")
    );
}

/// Built-in objects come back with kube-apiserver's defaults, custom resources with their
/// schema's `default`s, also those added to the CRD after the object was stored.
#[tokio::test]
async fn objects_should_be_read_back_with_kube_apiservers_defaults() {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    let (_cluster, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}))
    .expect("pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert_eq!(
        spec.containers[0].image_pull_policy.as_deref(),
        Some("Always")
    );
    let status = pod.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}))
    .expect("deployment");
    let deployment = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("deployment");
    let spec = deployment.spec.expect("spec");
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.progress_deadline_seconds, Some(600));
    assert_eq!(
        spec.strategy.and_then(|s| s.type_).as_deref(),
        Some("RollingUpdate")
    );
    let template = spec.template.spec.expect("template");
    assert_eq!(template.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        template.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
            .expect("secret");
    let secret = secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert!(secret.string_data.is_none());
    assert_eq!(
        secret
            .data
            .unwrap_or_default()
            .get("k")
            .map(|b| b.0.clone()),
        Some(b"v".to_vec())
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "demo"}})).expect("ns"),
        )
        .await
        .expect("namespace");
    assert_eq!(
        ns.metadata
            .labels
            .unwrap_or_default()
            .get("kubernetes.io/metadata.name")
            .map(String::as_str),
        Some("demo")
    );
    assert_eq!(
        ns.spec.and_then(|s| s.finalizers),
        Some(vec!["kubernetes".to_owned()])
    );

    // A default added to the CRD after a Foo was stored shows on reads of that Foo.
    let resource = apply_foo_crd(&client).await;
    let foos: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let foo: DynamicObject = serde_json::from_value(json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1",
        "kind": "Foo", "metadata": {"name": "old"}, "spec": {"deploymentName": "old", "replicas": 1}}))
    .expect("foo");
    foos.create(&PostParams::default(), &foo)
        .await
        .expect("foo");
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.patch(
        "foos.samplecontroller.k8s.io",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "add",
                "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/mode",
                "value": {"type": "string", "default": "fast"}}]))
            .expect("patch"),
        ),
    )
    .await
    .expect("add a default");
    let read = foos.get("old").await.expect("foo");
    assert_eq!(read.data["spec"]["mode"], "fast");
}

/// Foreground deletion holds the owner (with `foregroundDeletion` and a `deletionTimestamp`)
/// until its dependents are gone; orphaning keeps the dependents without the owner reference.
#[tokio::test]
async fn deletion_should_propagate_in_the_foreground_and_orphan() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .expect("owner");
    let owned = |name: &str, finalizers: serde_json::Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "finalizers": finalizers,
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": owner.metadata.uid, "blockOwnerDeletion": true}]}}))
        .expect("dependent")
    };
    cms.create(&PostParams::default(), &owned("held", json!(["test/hold"])))
        .await
        .expect("held");
    cms.create(&PostParams::default(), &owned("free", json!([])))
        .await
        .expect("free");

    cms.delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete");
    let waiting = cms.get("owner").await.expect("the owner waits");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_owned()])
    );
    assert!(cms.get("free").await.is_err(), "a free dependent is gone");
    let held = cms.get("held").await.expect("held by its finalizer");
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    assert!(cms.get("held").await.is_err());
    assert!(
        cms.get("owner").await.is_err(),
        "the owner follows its dependents"
    );

    // Orphan: the dependent stays, without the reference.
    let owner = cms
        .create(&PostParams::default(), &cm("owner", json!({})))
        .await
        .expect("owner again");
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "kept",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid}]}}))
    .expect("dependent");
    cms.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    cms.delete("owner", &DeleteParams::orphan())
        .await
        .expect("delete");
    let kept = cms.get("kept").await.expect("orphaned, not deleted");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

/// `dryRun=All` creates, updates, patches and deletes nothing: the answer is what would have
/// been stored (defaulted, validated), no watch event is sent and no resourceVersion is used.
#[tokio::test]
async fn dry_run_should_store_nothing_and_send_no_event() {
    let (cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let existing = cms
        .create(&PostParams::default(), &cm("existing", json!({})))
        .await
        .expect("existing");
    let rv_before = cluster.store().resource_version();
    let mut watch = cms
        .watch(
            &WatchParams::default().timeout(1),
            existing.metadata.resource_version.as_deref().unwrap_or("0"),
        )
        .await
        .expect("watch")
        .boxed();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let answered = cms
        .create(&dry, &cm("dry", json!({"a": "b"})))
        .await
        .expect("dry-run create");
    assert_eq!(answered.metadata.name.as_deref(), Some("dry"));
    assert!(answered.metadata.uid.is_some() && answered.metadata.creation_timestamp.is_some());
    let err = status_of(
        cms.create(&dry, &cm("Bad_Name", json!({})))
            .await
            .expect_err("still validated"),
    );
    assert_eq!(err.code, 422);
    let mut changed = existing.clone();
    changed.data = Some([("changed".to_owned(), "yes".to_owned())].into());
    cms.replace("existing", &dry, &changed)
        .await
        .expect("dry-run update");
    cms.patch(
        "existing",
        &PatchParams::default().dry_run(),
        &Patch::Merge(json!({"data": {"p": "q"}})),
    )
    .await
    .expect("dry-run patch");
    cms.delete(
        "existing",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .expect("dry-run delete");

    assert!(cms.get("dry").await.is_err(), "nothing created");
    let stored = cms.get("existing").await.expect("still there");
    assert_eq!(stored.data, existing.data, "nothing updated or patched");
    assert_eq!(
        cluster.store().resource_version(),
        rv_before,
        "no resourceVersion used"
    );
    let mut events = Vec::new();
    while let Some(event) = watch.try_next().await.expect("event") {
        if !matches!(event, WatchEvent::Bookmark(_)) {
            events.push(format!("{event:?}"));
        }
    }
    assert!(events.is_empty(), "no watch event: {events:?}");
}

/// Server-side apply with field ownership through kube: two managers applying different values
/// conflict (409 naming field and manager), `force` takes the field over, and an apply that
/// drops a field removes it. Every write records its manager in `managedFields`.
#[tokio::test]
async fn server_side_apply_should_track_field_ownership() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let config = |data: serde_json::Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": data});
    let first = cms
        .patch(
            "owned",
            &PatchParams::apply("alice"),
            &Patch::Apply(config(json!({"color": "red", "size": "big"}))),
        )
        .await
        .expect("alice creates");
    let managers: Vec<String> = first
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            format!(
                "{}/{}",
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(managers, ["alice/Apply"]);

    let err = status_of(
        cms.patch(
            "owned",
            &PatchParams::apply("bob"),
            &Patch::Apply(config(json!({"color": "blue"}))),
        )
        .await
        .expect_err("bob conflicts with alice"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using v1: .data.color"
    );
    let forced = cms
        .patch(
            "owned",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(config(json!({"color": "blue"}))),
        )
        .await
        .expect("force takes over");
    assert_eq!(
        forced
            .data
            .clone()
            .unwrap_or_default()
            .get("color")
            .map(String::as_str),
        Some("blue")
    );

    // Alice stops applying `size` (and `color`, now Bob's): `size` goes, `color` stays.
    let dropped = cms
        .patch(
            "owned",
            &PatchParams::apply("alice"),
            &Patch::Apply(config(json!({}))),
        )
        .await
        .expect("alice drops fields");
    let data = dropped.data.clone().unwrap_or_default();
    assert!(!data.contains_key("size"), "{data:?}");
    assert_eq!(data.get("color").map(String::as_str), Some("blue"));

    // A plain update is recorded as an Update by its manager.
    let mut updated = dropped.clone();
    updated.data = Some([("color".to_owned(), "green".to_owned())].into());
    let pp = PostParams {
        field_manager: Some("carol".into()),
        ..Default::default()
    };
    let updated = cms.replace("owned", &pp, &updated).await.expect("update");
    let entries = updated.metadata.managed_fields.unwrap_or_default();
    assert!(
        entries
            .iter()
            .any(|m| m.manager.as_deref() == Some("carol")
                && m.operation.as_deref() == Some("Update")),
        "{entries:?}"
    );
    assert!(
        !entries.iter().any(|m| m.manager.as_deref() == Some("bob")),
        "bob's only field was taken by carol: {entries:?}"
    );
}

/// `/openapi/v2` and `/openapi/v3` negotiate and cache as kube-openapi's handlers do.
#[tokio::test]
async fn openapi_documents_should_negotiate_and_cache_as_kube_apiserver() {
    let (_cluster, client) = start().await;
    let get = |path: &str, accept: &str| {
        http::Request::get(path)
            .header("accept", accept)
            .body(Vec::new())
            .expect("request")
    };
    let send = |request: http::Request<Vec<u8>>| client.send(request.map(kube::client::Body::from));
    let content_type = |response: &http::Response<kube::client::Body>| {
        response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .to_owned()
    };
    // client-go asks for the deprecated protobuf spelling and gets the one Go can parse.
    let v2 = send(get(
        "/openapi/v2",
        "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    ))
    .await
    .expect("v2");
    assert_eq!(v2.status(), 200);
    assert_eq!(
        content_type(&v2),
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let v2 = send(get("/openapi/v2", "application/json"))
        .await
        .expect("v2");
    assert_eq!(content_type(&v2), "application/json");
    let etag = v2.headers()["etag"].clone();
    let v2 = send(get("/openapi/v2", "text/html")).await.expect("v2");
    assert_eq!(v2.status(), 406);
    let mut again = get("/openapi/v2", "application/json");
    again.headers_mut().insert("if-none-match", etag);
    assert_eq!(send(again).await.expect("v2").status(), 304);

    // v3: the root's URLs carry a hash; the current one may be cached forever, an old one
    // is redirected to the current one.
    let root: serde_json::Value = client
        .request(get("/openapi/v3", "application/json"))
        .await
        .expect("root");
    let url = root["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("apps/v1")
        .to_owned();
    let doc = send(get(&url, "application/json")).await.expect("doc");
    assert_eq!(doc.status(), 200);
    assert_eq!(doc.headers()["cache-control"], "public, immutable");
    let stale = send(get("/openapi/v3/apis/apps/v1?hash=0", "application/json"))
        .await
        .expect("doc");
    assert_eq!(stale.status(), 301);
    assert_eq!(stale.headers()["location"], url.as_str());
    let unversioned = send(get("/openapi/v3/apis/apps/v1", "application/json"))
        .await
        .expect("doc");
    assert!(unversioned.headers().get("cache-control").is_none());
    let missing = send(get("/openapi/v3/apis/apps/v9", "application/json"))
        .await
        .expect("doc");
    assert_eq!(missing.status(), 404);
}

/// Stored objects keep each `managedFields` entry's `fieldsV1` as text; every way a client
/// reads an object shows it as the JSON object kube-apiserver shows: get, list, watch, a
/// table's objects, protobuf, and a JSON patch that tests it.
#[tokio::test]
async fn managed_fields_should_read_as_json_everywhere() {
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut object = cm("fields", json!({"app": "x"}));
    object.data = Some([("a".to_owned(), "1".to_owned())].into());
    let created = cms
        .create(&PostParams::default(), &object)
        .await
        .expect("create");
    let fields_of =
        |object: &serde_json::Value| object["metadata"]["managedFields"][0]["fieldsV1"].clone();
    let path = "/api/v1/namespaces/default/configmaps";
    let get = |uri: String, accept: &'static str| {
        http::Request::get(uri)
            .header("accept", accept)
            .body(Vec::new())
            .expect("request")
    };

    let read: serde_json::Value = client
        .request(get(format!("{path}/fields"), "application/json"))
        .await
        .expect("get");
    let fields = fields_of(&read);
    assert!(fields.is_object(), "{fields}");
    assert_eq!(fields["f:data"]["f:a"], json!({}), "{fields}");
    assert_eq!(
        fields["f:metadata"]["f:labels"]["f:app"],
        json!({}),
        "{fields}"
    );
    let typed = created.metadata.managed_fields.unwrap_or_default();
    assert_eq!(
        typed[0].fields_v1.as_ref().map(|f| f.0.clone()),
        Some(fields.clone())
    );

    let list: serde_json::Value = client
        .request(get(path.to_owned(), "application/json"))
        .await
        .expect("list");
    let listed = list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == "fields"))
        .expect("listed");
    assert_eq!(fields_of(listed), fields);

    let table: serde_json::Value = client
        .request(get(
            format!("{path}?includeObject=Object"),
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        ))
        .await
        .expect("table");
    let row = table["rows"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["object"]["metadata"]["name"] == "fields")
        })
        .expect("row");
    assert_eq!(fields_of(&row["object"]), fields);

    let proto = client
        .send(
            get(
                format!("{path}/fields"),
                "application/vnd.kubernetes.protobuf",
            )
            .map(Into::into),
        )
        .await
        .expect("protobuf get")
        .into_body()
        .collect_bytes()
        .await
        .expect("protobuf body");
    // FieldsV1 travels as its raw JSON bytes inside the protobuf: unescaped.
    let raw = serde_json::to_vec(&fields).expect("json");
    assert!(
        proto.windows(raw.len()).any(|w| w == raw.as_slice()),
        "{proto:?} lacks {}",
        String::from_utf8_lossy(&raw)
    );

    let rv = created.metadata.resource_version.expect("rv");
    let mut events = cms
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    let patched = raw_patch(
        &client,
        &format!("{path}/fields"),
        "application/json-patch+json",
        json!([{"op": "test", "path": "/metadata/managedFields/0/fieldsV1/f:data/f:a", "value": {}},
            {"op": "replace", "path": "/data/a", "value": "2"}]),
    )
    .await
    .expect("a JSON patch tests fieldsV1 as JSON");
    assert_eq!(patched["data"]["a"], "2");
    assert!(fields_of(&patched).is_object(), "{patched}");
    let event = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event")
        .expect("an event")
        .expect("an event");
    match event {
        WatchEvent::Modified(cm) => {
            let entries = cm.metadata.managed_fields.unwrap_or_default();
            assert!(
                entries
                    .iter()
                    .all(|e| e.fields_v1.as_ref().is_some_and(|f| f.0.is_object())),
                "{entries:?}"
            );
        }
        other => panic!("expected Modified, got {other:?}"),
    }
}

/// Metadata-only reads (`as=PartialObjectMetadata`, `as=PartialObjectMetadataList`): what
/// client-go's metadata informers and kube-rs's `Api<PartialObjectMeta<K>>` ask for.
#[tokio::test]
async fn metadata_only_reads_should_answer_partial_object_metadata() {
    use kube::core::PartialObjectMeta;
    let (_cluster, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["meta-a", "meta-b"] {
        cms.create(&PostParams::default(), &cm(name, json!({"app": name})))
            .await
            .expect("create");
    }
    // kube-rs: an `Api` of `PartialObjectMeta` sends the metadata media types.
    let partial: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), "default");
    let one = partial.get("meta-a").await.expect("get metadata");
    assert_eq!(one.metadata.labels.unwrap_or_default()["app"], "meta-a");
    let types = one.types.expect("typed");
    assert_eq!(
        (types.api_version.as_str(), types.kind.as_str()),
        ("meta.k8s.io/v1", "PartialObjectMetadata")
    );
    let listed = partial
        .list(&ListParams::default().labels("app=meta-b"))
        .await
        .expect("list metadata");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("meta-b"));
    let rv = listed.metadata.resource_version.expect("list rv");
    let mut events = partial
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch metadata")
        .boxed();
    cms.create(
        &PostParams::default(),
        &cm("meta-c", json!({"app": "meta-c"})),
    )
    .await
    .expect("create");
    match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
        Ok(Some(Ok(WatchEvent::Added(added)))) => {
            assert_eq!(added.metadata.name.as_deref(), Some("meta-c"));
            assert_eq!(
                added.types.map(|t| t.kind).as_deref(),
                Some("PartialObjectMetadata")
            );
        }
        other => panic!("expected the metadata of meta-c, got {other:?}"),
    }
    // The raw answers: only metadata, as kube-apiserver sends them; client-go's Accept header
    // (protobuf first) is answered in JSON.
    let get = |path: &str, accept: &str| {
        http::Request::get(path)
            .header("accept", accept)
            .body(Vec::new())
            .expect("request")
    };
    let path = "/api/v1/namespaces/default/configmaps";
    let object: serde_json::Value = client
        .request(get(
            &format!("{path}/meta-a"),
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ))
        .await
        .expect("raw get");
    assert_eq!(object["kind"], "PartialObjectMetadata");
    assert_eq!(object["metadata"]["name"], "meta-a");
    assert!(object.get("data").is_none(), "{object}");
    let list: serde_json::Value = client
        .request(get(
            path,
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
        ))
        .await
        .expect("raw list");
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["apiVersion"], "meta.k8s.io/v1");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 3);
    assert!(
        items
            .iter()
            .all(|i| i["kind"] == "PartialObjectMetadata" && i.get("data").is_none())
    );
    assert!(list["metadata"]["resourceVersion"].is_string());
}
