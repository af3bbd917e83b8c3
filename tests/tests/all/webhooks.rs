//! Admission webhooks as Wasm guests, end to end: the host serves the sample guests'
//! `validate` and `mutate` over HTTPS, the embedded API server calls them for kube clients and
//! for its controllers; misbehaving webhooks are cut at their time limit and the request is
//! denied or allowed as `failurePolicy` says; a hot swap changes verdicts without a restart;
//! a plain HTTPS client gets answers to the `AdmissionReview` kube-apiserver sends; a conversion
//! guest serves the Foo CRD's two versions to kube clients, kubectl and a reconciler.

use crate::kubectl;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use krec::admission::{Reach, WebhookServer, configurations, conversion, register, set_conversion};
use krec::manifest::Manifest;
use krec_tests::{Live, misbehave_manifest, sample_manifest, sample_objects};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

/// Start the samples' webhooks (and `extra` guests) on a living cluster and register them.
async fn start(extra: Vec<Manifest>) -> (Live, WebhookServer) {
    start_with(extra, Vec::new()).await
}

/// [`start`], applying the objects of the sample guests `samples` after foo-controller's.
async fn start_with(extra: Vec<Manifest>, samples: Vec<&str>) -> (Live, WebhookServer) {
    let mut manifests = vec![
        sample_manifest("foo-validator"),
        sample_manifest("pod-defaulter"),
    ];
    manifests.extend(extra);
    let mut objects = sample_objects("foo-controller");
    for sample in samples {
        objects.extend(sample_objects(sample));
    }
    let live = Live::start_alive(manifests, objects).await;
    let server = WebhookServer::start(live.manager.clone(), "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("webhook server");
    register_all(&live, &server).await;
    (live, server)
}

async fn register_all(live: &Live, server: &WebhookServer) {
    for controller in live.manager.controllers().values() {
        let manifest = controller.module().manifest().clone();
        let reach = Reach::Url(server.url());
        if let Some((crd, conversion)) = conversion(&manifest, &reach, server.ca_pem()) {
            set_conversion(&live.api, &crd, Some(conversion))
                .await
                .expect("point the CRD at its conversion webhook");
        }
        for configuration in configurations(&manifest, &reach, server.ca_pem(), &[]) {
            register(&live.api, &configuration)
                .await
                .expect("register the webhooks");
        }
    }
}

fn foos(live: &Live) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("samplecontroller.k8s.io", "v1alpha1", "Foo");
    Api::namespaced_with(live.client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn foo(name: &str, deployment: &str) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
        "metadata": {"name": name}, "spec": {"deploymentName": deployment, "replicas": 1}}),
    )
    .expect("foo")
}

fn denial(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sample_webhooks_should_judge_and_default_what_kube_clients_and_controllers_create() {
    let (live, _server) = start(Vec::new()).await;
    let foos = foos(&live);
    let (code, message) = denial(
        foos.create(&PostParams::default(), &foo("bad", "Not_A_Name"))
            .await
            .expect_err("an invalid deploymentName is denied"),
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("admission webhook \"validating.foo-validator.krec.dev\" denied the request: spec.deploymentName: Invalid value: \"Not_A_Name\""),
        "{message}"
    );
    let (code, message) = denial(
        foos.create(&PostParams::default(), &foo("twin", "example-foo"))
            .await
            .expect_err("a duplicated deploymentName is denied"),
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("already used by Foo \"example-foo\" in namespace \"default\""),
        "{message}"
    );
    // A dry run is admitted and stores nothing.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    foos.create(&dry, &foo("fresh", "fresh"))
        .await
        .expect("a dry-run create is admitted");
    assert!(foos.get_opt("fresh").await.expect("get").is_none());
    foos.create(&PostParams::default(), &foo("fresh", "fresh"))
        .await
        .expect("a good Foo is admitted");

    // A kube client's Pod is labelled and gets default requests.
    let pods: Api<Pod> = Api::namespaced(live.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "app", "image": "nginx"},
            {"name": "sized", "image": "nginx", "resources": {"requests": {"cpu": "1"}}}]}}))
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
    let spec = created.spec.expect("spec");
    let requests = |i: usize| {
        spec.containers[i]
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .unwrap_or_default()
    };
    assert_eq!(requests(0).get("cpu").map(|q| q.0.as_str()), Some("100m"));
    assert_eq!(
        requests(0).get("memory").map(|q| q.0.as_str()),
        Some("64Mi")
    );
    assert_eq!(
        requests(1).get("cpu").map(|q| q.0.as_str()),
        Some("1"),
        "kept"
    );
    assert!(
        !requests(1).contains_key("memory"),
        "a container with requests is left alone"
    );

    // A Pod the ReplicaSet controller creates is mutated too.
    let sets: Api<ReplicaSet> = Api::namespaced(live.client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "rs"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}},
            "template": {"metadata": {"labels": {"app": "rs"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
    .expect("replica set");
    sets.create(&PostParams::default(), &rs)
        .await
        .expect("replica set");
    live.eventually("the controller's Pods are mutated", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=rs,krec.dev/defaulted=true"))
                .await
                .ok()?;
            (list.items.len() == 2).then_some(())
        }
    })
    .await;
    let all = pods
        .list(&ListParams::default().labels("app=rs"))
        .await
        .expect("list");
    assert_eq!(all.items.len(), 2, "no Pod escaped the webhook");

    // Webhook metrics with controller-runtime's names.
    let scrape = live.manager.scrape();
    assert!(
        scrape.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/validate/foo-validator\",code=\"200\"}"
        ),
        "{scrape}"
    );
    assert!(scrape.contains("controller_runtime_webhook_latency_seconds_bucket{"));
    assert!(scrape.contains("controller_runtime_webhook_requests_in_flight{"));
}

/// The misbehave guest as a validating webhook for ConfigMaps with `policy`.
fn misbehaving_webhook(policy: &str) -> Manifest {
    let mut manifest = misbehave_manifest();
    manifest.spec.webhooks = vec![
        serde_json::from_value::<krec::manifest::WebhookSpec>(json!({
            "type": "validating",
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                "operations": ["CREATE"]}],
            "failurePolicy": policy,
            "timeoutSeconds": 5,
        }))
        .expect("webhook"),
    ];
    manifest
}

fn config_map(name: &str, misbehave: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"misbehave": misbehave}}))
        .expect("configmap")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_webhook_should_be_cut_off_and_its_failure_policy_followed() {
    let (live, server) = start(vec![misbehaving_webhook("Fail")]).await;
    let maps: Api<ConfigMap> = Api::namespaced(live.client.clone(), "default");
    // Loops past its 300 ms limit: the review traps, the API server fails the request.
    let started = std::time::Instant::now();
    let (code, message) = denial(
        maps.create(&PostParams::default(), &config_map("looping", "loop"))
            .await
            .expect_err("failurePolicy Fail"),
    );
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("failed calling webhook \"validating.misbehave.krec.dev\""),
        "{message}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "cut at the guest's limit"
    );
    let (code, message) = denial(
        maps.create(&PostParams::default(), &config_map("panicking", "panic"))
            .await
            .expect_err("a panic fails the request"),
    );
    assert_eq!(code, 500, "{message}");
    // Writes are refused while reviewing.
    let (_, message) = denial(
        maps.create(&PostParams::default(), &config_map("writing", "write"))
            .await
            .expect_err("denied"),
    );
    assert!(
        message.contains("may not write while answering an admission review"),
        "{message}"
    );
    assert!(
        maps.get_opt("written-by-a-webhook")
            .await
            .expect("get")
            .is_none()
    );
    // The host is alive and the webhook answers the next request.
    maps.create(&PostParams::default(), &config_map("fine", "no"))
        .await
        .expect("a good ConfigMap is allowed");
    let traps = live.controller("misbehave").stats().traps_by_cause();
    let counted = live.manager.scrape();
    assert!(
        counted.contains("krec_guest_traps_total{guest=\"misbehave\",cause=\"timeout\"}"),
        "{traps:?} {counted}"
    );

    // failurePolicy Ignore: the same loop lets the request through.
    let manifest = misbehaving_webhook("Ignore");
    for configuration in configurations(&manifest, &Reach::Url(server.url()), server.ca_pem(), &[])
    {
        register(&live.api, &configuration).await.expect("register");
    }
    maps.create(&PostParams::default(), &config_map("looping", "loop"))
        .await
        .expect("failurePolicy Ignore");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_validator_should_change_its_verdicts_without_a_restart() {
    let (live, _server) = start(Vec::new()).await;
    let foos = foos(&live);
    denial(
        foos.create(&PostParams::default(), &foo("bad", "Not_A_Name"))
            .await
            .expect_err("denied by the first version"),
    );
    // The new version: the same guest name and webhooks, another module (one that allows
    // every Foo).
    let mut swapped = sample_manifest("foo-validator");
    swapped.spec.module = krec_tests::built_module("misbehave.wasm");
    let report = live
        .manager
        .apply(vec![Ok(swapped), Ok(sample_manifest("pod-defaulter"))])
        .await;
    assert_eq!(
        report.swapped,
        vec!["foo-validator".to_owned()],
        "{report:?}"
    );
    foos.create(&PostParams::default(), &foo("bad", "Not_A_Name"))
        .await
        .expect("allowed by the new version");
}

/// The `AdmissionReview` kube-apiserver sends (the example of the Kubernetes documentation's
/// "Dynamic Admission Control" page, trimmed to a Foo).
pub(crate) fn documented_review(deployment: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "samplecontroller.k8s.io", "version": "v1alpha1", "kind": "Foo"},
            "resource": {"group": "samplecontroller.k8s.io", "version": "v1alpha1", "resource": "foos"},
            "requestKind": {"group": "samplecontroller.k8s.io", "version": "v1alpha1", "kind": "Foo"},
            "requestResource": {"group": "samplecontroller.k8s.io", "version": "v1alpha1", "resource": "foos"},
            "name": "my-foo",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "admin", "uid": "014fbff9a07c", "groups": ["system:authenticated", "my-admin-group"],
                "extra": {"some-key": ["some-value1", "some-value2"]}},
            "object": {"apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
                "metadata": {"name": "my-foo", "namespace": "default"},
                "spec": {"deploymentName": deployment, "replicas": 1}},
            "oldObject": null,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            "dryRun": false
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_https_client_should_get_answers_to_kube_apiservers_reviews() {
    let (_live, server) = start(Vec::new()).await;
    let ca = trusting(server.ca_pem());
    let post = |path: &str, body: Value| {
        let url = format!("{}{path}", server.url());
        let ca = ca.clone();
        async move { https_post(&ca, &url, &body).await }
    };
    let (status, answer) = post("/validate/foo-validator", documented_review("Bad Name")).await;
    assert_eq!(status, 200);
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(
        answer["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 422);
    assert_eq!(answer["response"]["status"]["reason"], "Invalid");
    let (_, answer) = post("/validate/foo-validator", documented_review("good-name")).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    // A mutation is answered as a base64 JSON patch.
    let mut review = documented_review("x");
    review["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    review["request"]["resource"] = json!({"group": "", "version": "v1", "resource": "pods"});
    review["request"]["object"] = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "my-foo", "namespace": "default", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
    let (_, answer) = post("/mutate/pod-defaulter", review).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    use base64::Engine as _;
    let patch: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(answer["response"]["patch"].as_str().expect("patch"))
            .expect("base64"),
    )
    .expect("json");
    let ops = patch.as_array().expect("ops");
    assert!(
        ops.iter()
            .any(|op| op["path"] == "/metadata/labels/krec.dev~1defaulted"),
        "{patch}"
    );
    assert!(
        ops.iter().all(|op| op["path"] != "/metadata/labels/app"),
        "{patch}"
    );
    // Unknown guests and bad bodies get clear HTTP errors.
    let (status, _) = post("/validate/nobody", documented_review("x")).await;
    assert_eq!(status, 404);
    let (status, _) = post("/validate/foo-validator", json!({"kind": "Nonsense"})).await;
    assert_eq!(status, 400);
}

/// A rustls client configuration trusting `ca_pem`.
pub(crate) fn trusting(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("pem")).expect("root");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("tls")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// POST JSON over HTTPS/1.1 with a hand-written request, as the most plain client would.
pub(crate) async fn https_post(
    config: &Arc<rustls::ClientConfig>,
    url: &str,
    body: &Value,
) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("https://").expect("https");
    let (authority, path) = rest.split_at(rest.find('/').expect("path"));
    let tcp = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, tcp)
        .await
        .expect("tls");
    let text = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    tls.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status: u16 = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn foos_in(live: &Live, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("samplecontroller.k8s.io", version, "Foo");
    Api::namespaced_with(live.client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_guest_should_serve_both_versions_of_a_crd() {
    // foo-converter's CRD adds v1beta1 to foo-controller's.
    let (live, _server) = start_with(
        vec![
            sample_manifest("foo-converter"),
            sample_manifest("foo-controller"),
        ],
        vec!["foo-converter"],
    )
    .await;
    let (alpha, beta) = (foos_in(&live, "v1alpha1"), foos_in(&live, "v1beta1"));
    // Written in v1beta1 (spec.instances), read in v1alpha1 (spec.replicas) and the other way.
    let written: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "samplecontroller.k8s.io/v1beta1", "kind": "Foo",
        "metadata": {"name": "beta-foo", "labels": {"made": "beta"}},
        "spec": {"deploymentName": "beta-foo", "instances": 3}}))
    .expect("foo");
    let created = beta
        .create(&PostParams::default(), &written)
        .await
        .expect("create in v1beta1");
    assert_eq!(
        created.data["spec"],
        json!({"deploymentName": "beta-foo", "instances": 3})
    );
    let read = alpha.get("beta-foo").await.expect("get in v1alpha1");
    assert_eq!(
        read.types.as_ref().map(|t| t.api_version.as_str()),
        Some("samplecontroller.k8s.io/v1alpha1")
    );
    assert_eq!(
        read.data["spec"],
        json!({"deploymentName": "beta-foo", "replicas": 3})
    );
    assert_eq!(read.metadata.uid, created.metadata.uid);
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    let listed = beta
        .list(&ListParams::default())
        .await
        .expect("list in v1beta1");
    let example = listed
        .items
        .iter()
        .find(|f| f.metadata.name.as_deref() == Some("example-foo"))
        .expect("the example Foo, stored in v1alpha1");
    assert_eq!(example.data["spec"]["instances"], json!(1));
    assert!(example.data["spec"].get("replicas").is_none());
    // The reconciler (v1alpha1, watching) sees the v1beta1 Foo's size.
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(live.client.clone(), "default");
    live.eventually("beta-foo's Deployment with 3 replicas", || async {
        deployments
            .get_opt("beta-foo")
            .await
            .ok()
            .flatten()
            .and_then(|d| d.spec.and_then(|s| s.replicas))
            .filter(|replicas| *replicas == 3)
    })
    .await;
    // A merge patch in v1beta1 of a Foo stored in v1alpha1: the write happens in v1beta1.
    let patched = beta
        .patch(
            "example-foo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"instances": 2}})),
        )
        .await
        .expect("patch in v1beta1");
    assert_eq!(patched.data["spec"]["instances"], json!(2));
    let read = alpha.get("example-foo").await.expect("get in v1alpha1");
    assert_eq!(read.data["spec"]["replicas"], json!(2));
    // kubectl reads both versions by their full names.
    let dir = tempfile::tempdir().expect("tempdir");
    let kubectl = kubectl::for_cluster(&live.cluster, dir.path());
    let (beta_json, alpha_table) = tokio::task::spawn_blocking(move || {
        (
            kubectl.ok(&[
                "get",
                "foos.v1beta1.samplecontroller.k8s.io",
                "beta-foo",
                "-o",
                "json",
            ]),
            kubectl.ok(&["get", "foos.v1alpha1.samplecontroller.k8s.io"]),
        )
    })
    .await
    .expect("kubectl");
    let beta_json: Value = serde_json::from_str(&beta_json).expect("json");
    assert_eq!(beta_json["spec"]["instances"], json!(3), "{beta_json}");
    assert!(
        alpha_table.contains("beta-foo") && alpha_table.contains("example-foo"),
        "{alpha_table}"
    );
    // Unregistered (the guest gone): the CRD is back to `strategy: None`, no webhook left.
    set_conversion(&live.api, "foos.samplecontroller.k8s.io", None)
        .await
        .expect("unregister the conversion");
    let crd = live
        .get(
            &krec_core::Gvk::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            None,
            "foos.samplecontroller.k8s.io",
        )
        .await
        .expect("the CRD");
    assert_eq!(
        crd["spec"]["conversion"],
        json!({"strategy": "None"}),
        "{crd}"
    );
}

/// An `AdmissionReview` of a ConfigMap create whose `data.misbehave` is `misbehave`.
fn config_map_review(misbehave: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b1c2d3e-0000-4000-8000-000000000000",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "x",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "x", "namespace": "default"},
                "data": {"misbehave": misbehave}},
            "oldObject": null,
            "dryRun": false
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_guests_slow_reviews_should_not_delay_another_guests() {
    let (_live, server) = start(vec![misbehaving_webhook("Ignore")]).await;
    let ca = trusting(server.ca_pem());
    let post = |path: String, body: Value| {
        let url = format!("{}{path}", server.url());
        let ca = ca.clone();
        async move { https_post(&ca, &url, &body).await }
    };
    // 40 reviews that sleep until cut (300 ms limit + 1 s for time blocked in host calls):
    // eight at a time, the guest's share, about 6.5 s in all.
    let slow_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let (done, review) = (
            slow_done.clone(),
            post("/validate/misbehave".into(), config_map_review("sleep")),
        );
        slow.spawn(async move {
            let answered = review.await;
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            answered
        });
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Another guest's review is answered at once, long before the slow ones are through.
    let (status, answer) = post(
        "/validate/foo-validator".into(),
        documented_review("good-name"),
    )
    .await;
    let finished = slow_done.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        (status, &answer["response"]["allowed"]),
        (200, &json!(true)),
        "{answer}"
    );
    assert_eq!(
        finished, 0,
        "another guest's review waited for {finished} of the slow guest's to finish"
    );
    while let Some(answered) = slow.join_next().await {
        let (status, _) = answered.expect("a slow review");
        assert_eq!(status, 500, "cut at the guest's limit");
    }

    // A review the API server gave up on is abandoned, not run: with kube-apiserver's
    // `?timeout=1s`, the reviews still queued after a second are answered 504 at once.
    let mut timed = tokio::task::JoinSet::new();
    for _ in 0..24 {
        timed.spawn(post(
            "/validate/misbehave?timeout=1s".into(),
            config_map_review("sleep"),
        ));
    }
    let mut codes = Vec::new();
    while let Some(answered) = timed.join_next().await {
        codes.push(answered.expect("a review").0);
    }
    codes.sort_unstable();
    assert!(
        codes.iter().all(|c| *c == 504),
        "each passes its 1 s timeout, running or waiting: {codes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewing_the_serving_certificate_while_reviews_run_should_fail_none() {
    let live = Live::start_alive(
        vec![sample_manifest("pod-defaulter")],
        sample_objects("foo-controller"),
    )
    .await;
    // Valid for 3 s: renewed every 2 s.
    let tls = krec::admission::TlsOptions {
        validity: std::time::Duration::from_secs(3),
        ..Default::default()
    };
    let server = WebhookServer::start_with(
        live.manager.clone(),
        "127.0.0.1:0".parse().expect("addr"),
        &tls,
        None,
    )
    .await
    .expect("webhook server");
    register_all(&live, &server).await;
    let pods: Api<Pod> = Api::namespaced(live.client.clone(), "default");
    let mut served = std::collections::BTreeSet::new();
    let (mut admitted, mut failed) = (0, Vec::new());
    let until = std::time::Instant::now() + std::time::Duration::from_secs(7);
    while std::time::Instant::now() < until {
        served.insert(server.serving_cert().current());
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": format!("p-{admitted}-{}", failed.len())},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}),
        )
        .expect("pod");
        match pods.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                assert_eq!(
                    created.metadata.labels.unwrap_or_default()["krec.dev/defaulted"],
                    "true"
                );
                admitted += 1;
            }
            Err(err) => failed.push(err.to_string()),
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed reviews: {failed:?}",
        failed.len()
    );
    assert!(admitted > 20, "only {admitted} reviews");
    assert!(
        served.len() >= 3,
        "the certificate was renewed {} times in 7 s",
        served.len() - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_should_share_one_ca_kept_in_a_secret() {
    let live = Live::start_alive(
        vec![sample_manifest("pod-defaulter")],
        sample_objects("foo-controller"),
    )
    .await;
    live.api
        .create(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "krec-system"}}),
            "test",
        )
        .await
        .expect("namespace");
    let tls = krec::admission::TlsOptions {
        source: krec::admission::CertSource::Secret {
            namespace: "krec-system".into(),
        },
        service: Some(("krec-system".into(), "krec-webhooks".into())),
        ..Default::default()
    };
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    // Two replicas starting at once: one makes the CA, the other reads it.
    let (first, second) = tokio::join!(
        WebhookServer::start_with(live.manager.clone(), addr, &tls, Some(&live.api)),
        WebhookServer::start_with(live.manager.clone(), addr, &tls, Some(&live.api)),
    );
    let (first, second) = (first.expect("first"), second.expect("second"));
    assert_eq!(first.ca_pem(), second.ca_pem());
    assert_ne!(
        first.serving_cert().current(),
        second.serving_cert().current()
    );
    let secret = live
        .get(
            &krec_core::Gvk::new("", "v1", "Secret"),
            Some("krec-system"),
            krec::admission::tls::CA_SECRET,
        )
        .await
        .expect("the CA's Secret");
    assert!(secret["data"]["ca.key"].is_string());
    // Registered at either, with the one CA: both answer.
    let pods: Api<Pod> = Api::namespaced(live.client.clone(), "default");
    for (i, server) in [&first, &second].into_iter().enumerate() {
        register_all(&live, server).await;
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("via-{i}")},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
        .expect("pod");
        let created = pods
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("through replica {i}: {e}"));
        assert_eq!(
            created.metadata.labels.unwrap_or_default()["krec.dev/defaulted"],
            "true"
        );
    }
    // A third, later: the same CA.
    let third = WebhookServer::start_with(live.manager.clone(), addr, &tls, Some(&live.api))
        .await
        .expect("third");
    assert_eq!(third.ca_pem(), first.ca_pem());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_should_use_its_spec_config() {
    let path = krec_tests::repo_root().join("sample-guests/pod-defaulter/manifest.yaml");
    let text = std::fs::read_to_string(&path).expect("manifest");
    let configured = |config: &str| {
        Manifest::parse(&path, &format!("{text}  config: {config}\n"))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let live = Live::start_alive(
        vec![configured("{cpu: 250m, memory: 128Mi}")],
        sample_objects("foo-controller"),
    )
    .await;
    let server = WebhookServer::start(live.manager.clone(), "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("webhook server");
    register_all(&live, &server).await;
    let pods: Api<Pod> = Api::namespaced(live.client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "configured"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
    .expect("pod");
    let created = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let requests = created.spec.expect("spec").containers[0]
        .resources
        .clone()
        .and_then(|r| r.requests)
        .expect("requests");
    assert_eq!(requests["cpu"].0, "250m");
    assert_eq!(requests["memory"].0, "128Mi");
    // A setting the webhook refuses: the new version is refused naming the field, the
    // running one goes on.
    let report = live.manager.apply(vec![Ok(configured("{cpu: ''}"))]).await;
    assert!(report.swapped.is_empty(), "{report:?}");
    let reason = &report.rejected[0].reason;
    assert!(
        reason.contains("refused its configuration: spec.config: invalid: cpu: must not be empty"),
        "{reason}"
    );
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "still"},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}))
            .expect("pod"),
        )
        .await
        .expect("create");
    let requests = created.spec.expect("spec").containers[0]
        .resources
        .clone()
        .and_then(|r| r.requests)
        .expect("requests");
    assert_eq!(requests["cpu"].0, "250m");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_storm_of_slow_reviews_should_not_time_out_another_tenants() {
    // Team a: twelve webhook guests, each within its own share — together three times the
    // host's places — and a storm of slow reviews for each.
    let team_a: Vec<Manifest> = (1..=12)
        .map(|i| {
            let mut manifest = misbehaving_webhook("Ignore");
            manifest.name = format!("misbehave-{i}");
            manifest.tenant = Some("team-a".into());
            manifest
        })
        .collect();
    let mut bob = sample_manifest("foo-validator");
    bob.name = "bob-validator".into();
    bob.tenant = Some("team-b".into());
    let mut extra = team_a;
    extra.push(bob);
    let (_live, server) = start(extra).await;
    let ca = trusting(server.ca_pem());
    let post = |path: String, body: Value| {
        let url = format!("{}{path}", server.url());
        let ca = ca.clone();
        async move { https_post(&ca, &url, &body).await }
    };
    let mut slow = tokio::task::JoinSet::new();
    for i in 1..=12 {
        for _ in 0..10 {
            slow.spawn(post(
                format!("/validate/misbehave-{i}?timeout=10s"),
                config_map_review("sleep"),
            ));
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Team b's quick webhook, with the 2 s kube-apiserver gives it: answered in time.
    let (status, answer) = post(
        "/validate/bob-validator?timeout=2s".into(),
        documented_review("good-name"),
    )
    .await;
    assert_eq!(
        (status, &answer["response"]["allowed"]),
        (200, &json!(true)),
        "{answer}"
    );
    while slow.join_next().await.is_some() {}
}
