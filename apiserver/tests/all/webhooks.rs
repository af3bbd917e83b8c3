//! Admission webhooks as kube-apiserver calls them: a test webhook server over HTTPS (trusted
//! through the configuration's `caBundle`) mutates Pods and judges ConfigMaps; the embedded
//! server calls it for client writes, for Pods the ReplicaSet controller creates, for dry runs
//! and deletes, and follows `failurePolicy` when it cannot be reached in time.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use krec_apiserver::Server;
use krec_apiserver::controllers::Selection;
use krec_net::tls;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::{Value, json};

use crate::support::raw;

/// Reviews the test webhook received: (path, request).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// Answer a review: `/mutate` labels Pods and sets requests; `/validate` denies ConfigMaps
/// with `data.bad`; `/validate-delete` denies deleting those with `data.keep`; `/slow` never
/// answers in time.
async fn answer(path: &str, review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let response = match path {
        "/mutate" => {
            let patch = if request["object"]["metadata"]["labels"].is_object() {
                json!([{"op": "add", "path": "/metadata/labels/krec.dev~1defaulted", "value": "true"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"krec.dev/defaulted": "true"}}])
            };
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string()),
                "warnings": ["labelled by the test webhook"]})
        }
        "/validate" => {
            let bad = request["object"]["data"]["bad"].as_str();
            match bad {
                Some(why) => json!({"uid": uid, "allowed": false,
                    "status": {"code": 422, "reason": "Invalid", "message": format!("data.bad is set: {why}")}}),
                None => json!({"uid": uid, "allowed": true}),
            }
        }
        "/validate-delete" => match request["oldObject"]["data"]["keep"].as_str() {
            Some(why) => json!({"uid": uid, "allowed": false,
                "status": {"code": 403, "message": format!("data.keep is set: {why}")}}),
            None => json!({"uid": uid, "allowed": true}),
        },
        "/copy-bomb" => {
            // 25 operations, each doubling what the last copied: 64 bytes × 2^24.
            let mut ops = vec![json!({"op": "add", "path": "/data",
                "value": {"seed": "0123456789012345678901234567890123456789012345678901234567890123"}})];
            for k in 0..24 {
                ops.push(json!({"op": "copy", "from": "/data", "path": format!("/data/k{k}")}));
            }
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string())})
        }
        "/warn" => {
            let warnings: Vec<String> = (0..2000).map(|i| format!("warning number {i}")).collect();
            json!({"uid": uid, "allowed": true, "warnings": warnings})
        }
        "/convert" | "/convert-renaming" => {
            return json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "response": {"uid": uid, "result": {"status": "Success"},
                    "convertedObjects": request["objects"].as_array().into_iter().flatten()
                        .map(|o| convert_widget(o, &request["desiredAPIVersion"], path == "/convert-renaming"))
                        .collect::<Vec<_>>()}});
        }
        _ => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            json!({"uid": uid, "allowed": false})
        }
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// A Widget in `desired` (`test.krec.dev/v1` calls its size `spec.size`, `v2` `spec.count`);
/// `rename` breaks the rules (a converted object must keep its name).
fn convert_widget(object: &Value, desired: &Value, rename: bool) -> Value {
    let mut out = object.clone();
    let (from, to) = if desired == "test.krec.dev/v2" {
        ("size", "count")
    } else {
        ("count", "size")
    };
    if let Some(value) = out["spec"]
        .as_object_mut()
        .and_then(|spec| spec.remove(from))
    {
        out["spec"][to] = value;
    }
    out["apiVersion"] = desired.clone();
    // A webhook may not change metadata but labels and annotations: this is dropped.
    out["metadata"]["resourceVersion"] = json!("1");
    if rename {
        out["metadata"]["name"] = json!("renamed");
    }
    out
}

/// The test webhook over HTTPS; returns its address, CA (PEM) and what it saw.
async fn webhook_server() -> (SocketAddr, String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let certs = tls::generate(&addr, None).expect("certificates");
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri, body: axum::body::Bytes| {
        let log = log.clone();
        async move {
            let review: Value = serde_json::from_slice(&body).expect("a review");
            log.lock()
                .expect("log")
                .push((uri.path().to_owned(), review["request"].clone()));
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                answer(uri.path(), &review).await.to_string(),
            )
        }
    });
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _stop = _stop;
        krec_net::connections::serve(
            "test webhook",
            listener,
            krec_net::connections::Transport::Tls(
                tls::server_config(&certs.cert_pem, &certs.key_pem).expect("TLS"),
            ),
            app,
            krec_net::connections::Limits::default(),
            stopped,
        )
        .await;
    });
    (addr, certs.ca_pem, seen)
}

async fn client(cluster: &Server) -> Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn webhook(name: &str, url: String, ca: &str, resources: &str, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": {"url": url,
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": [resources]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        hook[k] = v.clone();
    }
    hook
}

fn status_of(err: kube::Error) -> (u16, String, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason.clone(), status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_should_mutate_and_validate_writes_as_kube_apiserver_calls_them() {
    let (addr, ca, seen) = webhook_server().await;
    let cluster = Server::builder()
        .controllers("replicaset".parse::<Selection>().expect("selection"))
        .start()
        .await
        .expect("start");
    let client = client(&cluster).await;
    let base = format!("https://{addr}");
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let object = |kind: &str, hooks: Vec<Value>| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": "test"}, "webhooks": hooks})
    };
    let stored = mutating
        .create(
            &PostParams::default(),
            &serde_json::from_value(object(
                "MutatingWebhookConfiguration",
                vec![webhook(
                    "pods.test.krec.dev",
                    format!("{base}/mutate"),
                    &ca,
                    "pods",
                    json!({}),
                )],
            ))
            .expect("configuration"),
        )
        .await
        .expect("mutating configuration");
    let defaulted = &stored.webhooks.expect("webhooks")[0];
    assert_eq!(defaulted.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(defaulted.timeout_seconds, Some(10));
    validating
        .create(
            &PostParams::default(),
            &serde_json::from_value(object(
                "ValidatingWebhookConfiguration",
                vec![
                    webhook(
                        "configmaps.test.krec.dev",
                        format!("{base}/validate"),
                        &ca,
                        "configmaps",
                        json!({}),
                    ),
                    webhook(
                        "slow.test.krec.dev",
                        format!("{base}/slow"),
                        &ca,
                        "configmaps",
                        json!({"timeoutSeconds": 1, "failurePolicy": "Ignore"}),
                    ),
                ],
            ))
            .expect("configuration"),
        )
        .await
        .expect("validating configuration");

    // A configuration that breaks the rules is refused with kube-apiserver's causes.
    let mut bad = object(
        "ValidatingWebhookConfiguration",
        vec![json!({"name": "short", "clientConfig": {"url": "http://x"}})],
    );
    bad["metadata"]["name"] = json!("bad");
    let (code, reason, message) = status_of(
        validating
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).expect("bad"),
            )
            .await
            .expect_err("invalid configuration"),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(message.contains("webhooks[0].sideEffects"), "{message}");

    // A client's Pod is mutated; the webhook's warning is passed on.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}}))
    .expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("krec.dev/defaulted").map(String::as_str),
        Some("true")
    );
    let (path, review) = seen
        .lock()
        .expect("seen")
        .last()
        .cloned()
        .expect("a review");
    assert_eq!(path, "/mutate");
    assert_eq!(review["operation"], "CREATE");
    assert_eq!(
        review["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(review["resource"]["resource"], "pods");
    assert_eq!(review["namespace"], "default");
    assert_eq!(review["dryRun"], false);
    assert_eq!(
        review["object"]["spec"]["restartPolicy"], "Always",
        "defaulted before mutation"
    );

    // A dry-run create is admitted and stores nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut second = pod.clone();
    second.metadata.name = Some("dry".into());
    let answered = pods.create(&dry, &second).await.expect("dry run");
    assert!(
        answered
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("krec.dev/defaulted")
    );
    assert!(pods.get_opt("dry").await.expect("get").is_none());
    assert_eq!(
        seen.lock().expect("seen").last().expect("review").1["dryRun"],
        true
    );

    // A Pod the ReplicaSet controller creates is mutated too (generateName: no name yet).
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "rs"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "rs"}},
            "template": {"metadata": {"labels": {"app": "rs"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
    .expect("replica set");
    sets.create(&PostParams::default(), &rs)
        .await
        .expect("replica set");
    let mut controlled = Vec::new();
    for _ in 0..200 {
        controlled = pods
            .list(&ListParams::default().labels("krec.dev/defaulted=true"))
            .await
            .expect("list")
            .items
            .into_iter()
            .filter(|p| p.metadata.generate_name.as_deref() == Some("rs-"))
            .collect();
        if !controlled.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(controlled.len(), 1, "the controller's Pod was mutated");
    let controller_review = seen
        .lock()
        .expect("seen")
        .iter()
        .rev()
        .find(|(_, r)| r["object"]["metadata"]["generateName"] == "rs-")
        .cloned()
        .expect("the controller's Pod was reviewed");
    assert!(
        controller_review.1.get("name").is_none(),
        "no name before generation"
    );
    assert_eq!(
        controller_review.1["userInfo"]["username"],
        "system:kube-controller-manager"
    );

    // A ConfigMap is judged: denied with the webhook's code, reason and message; the slow
    // webhook (failurePolicy Ignore) is cut at its timeout and the request goes on.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let good: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "good"}, "data": {"a": "1"}}))
            .expect("configmap");
    let started = std::time::Instant::now();
    maps.create(&PostParams::default(), &good)
        .await
        .expect("allowed");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "the slow webhook was waited for"
    );
    let bad: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "data": {"bad": "yes"}}))
            .expect("configmap");
    let (code, reason, message) = status_of(
        maps.create(&PostParams::default(), &bad)
            .await
            .expect_err("denied"),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "admission webhook \"configmaps.test.krec.dev\" denied the request: data.bad is set: yes"
    );
    assert!(maps.get_opt("bad").await.expect("get").is_none());
    // An update is judged with the old object; a patch too.
    let patch = json!({"data": {"bad": "patched"}});
    let (code, _, message) = status_of(
        maps.patch("good", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("denied patch"),
    );
    assert_eq!(code, 422, "{message}");
    let (_, review) = seen
        .lock()
        .expect("seen")
        .iter()
        .rev()
        .find(|(p, _)| p == "/validate")
        .cloned()
        .expect("review");
    assert_eq!(review["operation"], "UPDATE");
    assert_eq!(review["oldObject"]["data"]["a"], "1");
    // Both objects' field ownership as clients read it: `fieldsV1` a JSON object.
    for object in ["object", "oldObject"] {
        let fields = &review[object]["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(fields["f:data"].is_object(), "{object}: {fields}");
    }
    assert_eq!(
        maps.get("good")
            .await
            .expect("get")
            .data
            .expect("data")
            .len(),
        1
    );
    maps.delete("good", &DeleteParams::default())
        .await
        .expect("delete");

    // failurePolicy Fail: a webhook that cannot answer in time fails the request.
    let mut configuration = validating.get("test").await.expect("get");
    if let Some(hooks) = configuration.webhooks.as_mut() {
        hooks[1].failure_policy = Some("Fail".into());
    }
    validating
        .replace("test", &PostParams::default(), &configuration)
        .await
        .expect("replace");
    let (code, _, message) = status_of(
        maps.create(&PostParams::default(), &good)
            .await
            .expect_err("failed closed"),
    );
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("failed calling webhook \"slow.test.krec.dev\""),
        "{message}"
    );
    cluster.shutdown().await;
}

use crate::support::kubectl as support;

/// What a user types: `kubectl apply` of a configuration, then commands the webhook judges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_should_show_a_webhooks_denial_and_its_configuration() {
    let (addr, ca, _seen) = webhook_server().await;
    let (_cluster, dir, kubectl) = support::start().await;
    let bundle = base64::engine::general_purpose::STANDARD.encode(&ca);
    let manifest = format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: configmap-policy
webhooks:
- name: configmaps.test.krec.dev
  clientConfig:
    url: https://{addr}/validate
    caBundle: {bundle}
  rules:
  - operations: [CREATE, UPDATE]
    apiGroups: ['']
    apiVersions: [v1]
    resources: [configmaps]
  sideEffects: None
  admissionReviewVersions: [v1]
"
    );
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, manifest).expect("write");
    let path = path.display().to_string();
    let (applied, listed, denied, allowed) = tokio::task::spawn_blocking(move || {
        (
            kubectl.ok(&["apply", "-f", &path]),
            kubectl.ok(&["get", "validatingwebhookconfigurations"]),
            kubectl.run(&["create", "configmap", "bad", "--from-literal=bad=yes"]),
            kubectl.ok(&["create", "configmap", "good", "--from-literal=a=1"]),
        )
    })
    .await
    .expect("kubectl");
    assert!(applied.contains("configmap-policy created"), "{applied}");
    assert!(listed.starts_with("NAME"), "{listed}");
    assert!(
        listed.contains("configmap-policy") && listed.contains(" 1 "),
        "{listed}"
    );
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(!denied.status.success());
    assert!(
        stderr.contains(
            "admission webhook \"configmaps.test.krec.dev\" denied the request: data.bad is set: yes"
        ),
        "{stderr}"
    );
    assert!(allowed.contains("configmap/good created"), "{allowed}");
}

fn widget_crd(url: &str, ca: &str) -> Value {
    let version = |name: &str, field: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": {
                field: {"type": "integer"}, "color": {"type": "string", "default": "blue"}}}}}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.krec.dev"},
        "spec": {"group": "test.krec.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [version("v1", "size", true), version("v2", "count", false)],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"url": url,
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)}}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_webhooks_should_convert_reads_writes_and_watches() {
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DynamicObject, WatchEvent, WatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let (addr, ca, seen) = webhook_server().await;
    let cluster = Server::builder()
        .controllers(Selection::none())
        .start()
        .await
        .expect("start");
    let client = client(&cluster).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // A Webhook strategy needs its webhook, named as kube-apiserver names it.
    let mut incomplete = widget_crd("", &ca);
    incomplete["spec"]["conversion"] = json!({"strategy": "Webhook"});
    let err = crds
        .create(
            &PostParams::default(),
            &serde_json::from_value(incomplete).expect("crd"),
        )
        .await
        .expect_err("no webhook");
    assert!(
        status_of(err)
            .2
            .contains("spec.conversion.webhook: Required value"),
        "the missing webhook named"
    );
    let crd = widget_crd(&format!("https://{addr}/convert"), &ca);
    crds.create(
        &PostParams::default(),
        &serde_json::from_value(crd).expect("crd"),
    )
    .await
    .expect("create the CRD");
    let widgets = |version: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("test.krec.dev", version, "Widget");
        Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
    };
    let (v1, v2) = (widgets("v1"), widgets("v2"));
    let mut watch = v2
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch v2")
        .boxed();
    let widget: DynamicObject = serde_json::from_value(json!({"apiVersion": "test.krec.dev/v1",
        "kind": "Widget", "metadata": {"name": "a"}, "spec": {"size": 2, "color": "red"}}))
    .expect("widget");
    let created = v1
        .create(&PostParams::default(), &widget)
        .await
        .expect("create in v1");
    let read = v2.get("a").await.expect("get in v2");
    let reviews: Vec<Value> = seen
        .lock()
        .expect("seen")
        .iter()
        .filter(|(path, _)| path == "/convert")
        .map(|(_, request)| request.clone())
        .collect();
    assert!(
        reviews
            .iter()
            .any(|r| r["desiredAPIVersion"] == "test.krec.dev/v2"
                && r["objects"][0]["spec"]["size"] == 2),
        "the webhook was asked for v2: {reviews:?}"
    );
    assert_eq!(read.data["spec"], json!({"count": 2, "color": "red"}));
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(
        read.metadata.resource_version, created.metadata.resource_version,
        "metadata is the stored object's"
    );
    let listed = v2.list(&ListParams::default()).await.expect("list in v2");
    assert_eq!(listed.items[0].data["spec"]["count"], json!(2));
    match watch.try_next().await.expect("watch").expect("an event") {
        WatchEvent::Added(added) => assert_eq!(added.data["spec"]["count"], json!(2)),
        other => panic!("expected ADDED, got {other:?}"),
    }
    // A write in v2 of the object stored in v1 is made in v2; v1 reads it back converted.
    let patched = v2
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"count": 5}})),
        )
        .await
        .expect("patch in v2");
    assert_eq!(patched.data["spec"], json!({"count": 5, "color": "red"}));
    assert_eq!(
        v1.get("a").await.expect("get in v1").data["spec"]["size"],
        json!(5)
    );
    // A webhook that breaks the rules fails the read with kube-apiserver's message, and the
    // change of the CRD ends the watches of its resource.
    crds.patch(
        "widgets.test.krec.dev",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"conversion": {"webhook": {"clientConfig": {
            "url": format!("https://{addr}/convert-renaming")}}}}})),
    )
    .await
    .expect("point the CRD at the renaming webhook");
    let (code, _, message) = status_of(v1.get("a").await.expect_err("renamed"));
    assert_eq!(code, 500);
    assert_eq!(
        message,
        "conversion webhook for test.krec.dev/v2, Kind=Widget returned invalid converted object at index 0: must have the same name: a != renamed"
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = watch.next().await {
            if event.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch from before the CRD change ended");
    cluster.shutdown().await;
}

/// Peak resident memory of this process so far, in bytes (Linux).
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhooks_copy_bomb_should_be_refused_and_its_warnings_bounded() {
    let (addr, ca, _seen) = webhook_server().await;
    let cluster = Server::builder().start().await.expect("start");
    let client = client(&cluster).await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let base = format!("https://{addr}");
    let configuration = |name: &str, path: &str, policy: &str| {
        serde_json::from_value::<MutatingWebhookConfiguration>(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [webhook(&format!("{name}.test.krec.dev"), format!("{base}{path}"), &ca,
                "configmaps", json!({"failurePolicy": policy,
                    "objectSelector": {"matchLabels": {"hook": name}}}))],
        }))
        .expect("configuration")
    };
    for (name, path) in [("bomb", "/copy-bomb"), ("warn", "/warn")] {
        mutating
            .create(&PostParams::default(), &configuration(name, path, "Ignore"))
            .await
            .expect("configuration");
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let labelled = |name: &str, hook: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"hook": hook}}}))
            .expect("configmap")
    };
    let before = peak_rss();
    // failurePolicy Ignore does not apply: the webhook answered, its patch is what fails.
    let err = cms
        .create(&PostParams::default(), &labelled("bombed", "bomb"))
        .await
        .expect_err("a patch copying 1 GB is refused");
    let (code, _, message) = status_of(err);
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("Unable to complete the copy"),
        "kube's message: {message}"
    );
    let grown = peak_rss().saturating_sub(before);
    assert!(
        grown < 256 << 20,
        "the bomb grew the process by {} MiB",
        grown >> 20
    );
    assert!(cms.get_opt("bombed").await.expect("read").is_none());

    // 2 000 warnings: deduplicated and truncated as kube-apiserver does, the write made.
    let body = serde_json::to_vec(&labelled("warned", "warn")).expect("body");
    let mut request = format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    let (status, headers) = raw::raw_exchange(&cluster, &request)
        .await
        .expect("the write is answered");
    assert!(status.starts_with("HTTP/1.1 201"), "{status}");
    let warnings: Vec<&String> = headers
        .iter()
        .filter(|h| h.to_ascii_lowercase().starts_with("warning:"))
        .collect();
    let bytes: usize = warnings.iter().map(|w| w.len()).sum();
    assert!(
        warnings.len() < 300 && bytes < 16 << 10,
        "{} warnings, {bytes} bytes",
        warnings.len()
    );
    assert!(cms.get_opt("warned").await.expect("read").is_some());
}

/// `DELETE` of a collection is admitted item by item, as kube-apiserver's `DeleteCollection`
/// admits each item it deletes (the item as `oldObject`, the request's namespace, no name): a
/// validating webhook's refusal of one item ends the request with its error, and the items it
/// kept stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_delete_should_be_admitted_item_by_item() {
    let (addr, ca, seen) = webhook_server().await;
    let cluster = Server::builder().start().await.expect("server");
    let client = client(&cluster).await;
    let hooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let hook = webhook(
        "keep.test.krec.dev",
        format!("https://{addr}/validate-delete"),
        &ca,
        "configmaps",
        // A namespace selector: a request across all namespaces still matches (kube-apiserver's
        // `MatchNamespaceSelector` exempts nothing without a namespace).
        json!({"rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}),
    );
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "keep"}, "webhooks": [hook]}))
    .expect("configuration");
    hooks
        .create(&PostParams::default(), &configuration)
        .await
        .expect("webhook configuration");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, data) in [
        ("a", json!({})),
        ("b", json!({"keep": "audit"})),
        ("c", json!({})),
    ] {
        let cm = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"app": "x"}}, "data": data}))
        .expect("configmap");
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }

    let err = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .expect_err("the webhook keeps b");
    let (code, _, message) = status_of(err);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("keep.test.krec.dev") && message.contains("data.keep is set: audit"),
        "{message}"
    );
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    assert_eq!(left, ["b", "c"], "a went before the refusal; b and c stay");
    let reviews: Vec<Value> = seen
        .lock()
        .expect("seen")
        .iter()
        .filter(|(path, _)| path == "/validate-delete")
        .map(|(_, request)| request.clone())
        .collect();
    assert_eq!(reviews.len(), 2, "{reviews:#?}");
    // Across all namespaces: the namespace-selecting webhook is asked too.
    let everywhere: Api<ConfigMap> = Api::all(client.clone());
    let err = everywhere
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=x"),
        )
        .await
        .expect_err("the webhook keeps b, asked across all namespaces");
    assert_eq!(status_of(err).0, 403);
    assert_eq!(
        cms.list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );
    for (review, name) in reviews.iter().zip(["a", "b"]) {
        assert_eq!(review["operation"], "DELETE");
        assert_eq!(review["namespace"], "default");
        // `name` is `omitempty` in an AdmissionRequest: absent, as kube-apiserver sends it.
        assert_eq!(
            review.get("name"),
            None,
            "a collection's items are admitted without a name"
        );
        assert_eq!(review["oldObject"]["metadata"]["name"], name);
    }
}
