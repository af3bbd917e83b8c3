//! `deploy/` stays true to the code: the committed RBAC is what `krec rbac` generates, the
//! Deployment what `krec install` prints, the guest
//! bundle script makes manifests `krec check` accepts, and the Deployment uses flags that exist
//! and probes the admin endpoints.

use crate::common;

use std::process::Command;

use crate::common::repo;

fn krec(args: &[&str]) -> (bool, String, String) {
    common::krec(args)
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
fn the_committed_deployment_should_be_what_krec_install_prints() {
    let samples = repo().join("sample-guests").display().to_string();
    let (ok, generated, stderr) = krec(&[
        "install",
        "--manifests",
        &samples,
        "--guests-image",
        "krec-guests:dev",
    ]);
    assert!(ok, "{stderr}");
    let committed = std::fs::read_to_string(repo().join("deploy/krec.yaml")).expect("krec.yaml");
    assert_eq!(
        committed, generated,
        "deploy/krec.yaml is stale: regenerate it with `krec install --manifests sample-guests --guests-image krec-guests:dev > deploy/krec.yaml`"
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
    // One line per sample guest (each directory with a manifest.yaml).
    let guests = std::fs::read_dir(repo().join("sample-guests"))
        .expect("sample-guests")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("manifest.yaml").exists())
        .count();
    assert!(guests >= 9, "the samples are there");
    assert_eq!(stdout.lines().count(), guests, "{stdout}");
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

#[tokio::test]
async fn krec_webhooks_should_register_the_guests_behind_the_deployments_service() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    let samples = repo().join("sample-guests").display().to_string();
    let (ok, yaml, stderr) = krec(&[
        "webhooks",
        "--manifests",
        &samples,
        "--generate-certs",
        &certs.display().to_string(),
    ]);
    assert!(ok, "{stderr}");
    let mut docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .filter(|d: &serde_json::Value| !d.is_null())
        .collect();
    // The CRD's conversion, as the comment's `kubectl patch` would set it.
    let patch = yaml
        .lines()
        .find_map(|l| {
            l.strip_prefix("#   kubectl patch crd foos.samplecontroller.k8s.io --type=merge -p '")
        })
        .and_then(|l| l.strip_suffix('\''))
        .expect("a kubectl patch for the converted CRD");
    let patch: serde_json::Value = serde_json::from_str(patch).expect("JSON");
    docs.insert(
        0,
        serde_json::json!({"apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition", "metadata": {"name": "foos.samplecontroller.k8s.io"},
            "spec": patch["spec"]}),
    );
    let read = |file: &str| std::fs::read_to_string(certs.join(file)).expect("generated file");
    let bundle = base64::engine::general_purpose::STANDARD.encode(read("ca.crt"));
    krec_net::tls::server_config(&read("tls.crt"), &read("tls.key"))
        .expect("the generated certificate serves");
    let client_configs: Vec<(&str, &serde_json::Value)> = docs
        .iter()
        .flat_map(|doc| {
            let kind = doc["kind"].as_str().expect("kind");
            match doc["webhooks"].as_array() {
                Some(hooks) => hooks.iter().map(|h| (kind, &h["clientConfig"])).collect(),
                None => vec![(kind, &doc["spec"]["conversion"]["webhook"]["clientConfig"])],
            }
        })
        .collect();
    let paths: Vec<(&str, &str)> = client_configs
        .iter()
        .map(|(kind, config)| {
            assert_eq!(config["caBundle"], bundle.as_str(), "{kind}");
            assert_eq!(config["service"]["namespace"], "krec-system", "{kind}");
            assert_eq!(config["service"]["name"], "krec-webhooks", "{kind}");
            assert_eq!(config["service"]["port"], 443, "{kind}");
            (*kind, config["service"]["path"].as_str().expect("path"))
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("CustomResourceDefinition", "/convert/foo-converter"),
            ("ValidatingWebhookConfiguration", "/validate/foo-validator"),
            (
                "ValidatingWebhookConfiguration",
                "/validate/foo-validator-go"
            ),
            (
                "ValidatingWebhookConfiguration",
                "/validate/foo-validator-ts"
            ),
            ("MutatingWebhookConfiguration", "/mutate/pod-defaulter"),
        ]
    );
    // deploy/ has that Service, in front of the port the host serves webhooks on.
    let text = std::fs::read_to_string(repo().join("deploy/krec.yaml")).expect("krec.yaml");
    let deploy: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml"))
        .collect();
    let service = deploy
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "krec-webhooks")
        .expect("the krec-webhooks Service");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    let container = &deploy
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == service["spec"]["ports"][0]["targetPort"]
                && p["containerPort"] == 9443)
    );
    // And an API server takes them: the configurations as they are, the conversion merged
    // into the CRD by a server-side apply.
    let cluster = krec_apiserver::Server::builder()
        .start()
        .await
        .expect("cluster");
    let client = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig"),
            &Default::default(),
        )
        .await
        .expect("config"),
    )
    .expect("client");
    let crd_text =
        std::fs::read_to_string(repo().join("sample-guests/foo-converter/crd/foo-crd.yaml"))
            .expect("foo-crd.yaml");
    let crd: serde_json::Value = serde_yaml_ng::from_str(&crd_text).expect("crd");
    // The CRD as a user creates it (kubectl apply), then what `krec webhooks` printed, applied
    // by another manager (kubectl apply --server-side --force-conflicts: the CRD's defaulted
    // conversion strategy is its creator's, as in kube-apiserver).
    let crd_gvk =
        kube::core::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let created: kube::core::DynamicObject = serde_json::from_value(crd).expect("crd object");
    kube::Api::<kube::core::DynamicObject>::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk(&crd_gvk),
    )
    .create(&Default::default(), &created)
    .await
    .expect("create the CRD");
    for doc in docs {
        let (group, version) = doc["apiVersion"]
            .as_str()
            .and_then(|v| v.split_once('/'))
            .expect("apiVersion");
        let gvk =
            kube::core::GroupVersionKind::gvk(group, version, doc["kind"].as_str().expect("kind"));
        let api: kube::Api<kube::core::DynamicObject> =
            kube::Api::all_with(client.clone(), &kube::core::ApiResource::from_gvk(&gvk));
        let name = doc["metadata"]["name"].as_str().expect("name").to_owned();
        api.patch(
            &name,
            &kube::api::PatchParams::apply("kubectl").force(),
            &kube::api::Patch::Apply(&doc),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {gvk:?} {name}: {e}"));
    }
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client);
    let crd = crds.get("foos.samplecontroller.k8s.io").await.expect("crd");
    let conversion = crd.spec.conversion.expect("conversion");
    assert_eq!(conversion.strategy, "Webhook");
    assert_eq!(crd.spec.versions.len(), 2, "the rest of the CRD is kept");
    cluster.shutdown().await;
}
