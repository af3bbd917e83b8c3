//! `krec run` keeping the cluster's webhook registrations those of its guests: registered by
//! server-side apply, the control plane's namespaces left out, removed with the guest (or, when
//! registered at the host's own address, when it stops); through a Service, they outlive a
//! stopping replica and still never lock kube-system out.

use crate::common::{self, Host, Kubectl, repo};

/// `krec cluster` with the Foo CRD established, and a directory holding the manifests of the
/// sample webhook guests foo-validator and pod-defaulter: (cluster process, kubectl, guests'
/// directory, kubeconfig, scratch directory).
fn cluster_with_webhook_guests() -> (
    common::Stopped,
    Kubectl,
    std::path::PathBuf,
    std::path::PathBuf,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (child, kubectl, kubeconfig) = common::cluster(dir.path());
    let crd = repo().join("sample-guests/foo-controller/crd/foo-crd.yaml");
    let (ok, out, err) = kubectl.run(["apply".as_ref(), "-f".as_ref(), crd.as_os_str()]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run([
        "wait".as_ref(),
        "--for=condition=Established".as_ref(),
        "-f".as_ref(),
        crd.as_os_str(),
    ]);
    assert!(ok, "{out}{err}");
    let guests = dir.path().join("guests");
    std::fs::create_dir(&guests).expect("mkdir");
    common::place_manifest(&guests, "foo-validator");
    common::place_manifest(&guests, "pod-defaulter");
    (child, kubectl, guests, kubeconfig, dir)
}

/// Create Pod `name` in `namespace` as `kubectl run` does: whether it was admitted, and what
/// kubectl said.
fn run_pod(kubectl: &Kubectl, namespace: &str, name: &str) -> (bool, String) {
    let (ok, out, err) = kubectl.run([
        "-n",
        namespace,
        "run",
        name,
        "--image=registry.k8s.io/pause:3.10",
    ]);
    (ok, format!("{out}{err}"))
}

fn defaulted(kubectl: &Kubectl, namespace: &str, name: &str) -> String {
    let (_, out, _) = kubectl.run([
        "-n",
        namespace,
        "get",
        "pod",
        name,
        "-o",
        r"jsonpath={.metadata.labels.krec\.dev/defaulted}",
    ]);
    out
}

#[test]
fn run_should_register_its_guests_webhooks_leave_the_control_plane_out_and_remove_them_on_stop() {
    let (_cluster, kubectl, guests, kubeconfig, dir) = cluster_with_webhook_guests();
    let mut host = Host::start(
        &guests,
        &kubeconfig,
        &dir.path().join("cache"),
        &["--register-webhooks"],
    );
    kubectl.until(
        &[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            "-l",
            "app.kubernetes.io/managed-by=krec",
            "-o",
            "name",
        ],
        |out| {
            out.contains(
                "validatingwebhookconfiguration.admissionregistration.k8s.io/krec-foo-validator",
            ) && out.contains(
                "mutatingwebhookconfiguration.admissionregistration.k8s.io/krec-pod-defaulter",
            )
        },
    );
    // Applied server-side under the host's own field manager.
    let (_, managers, _) = kubectl.run([
        "get",
        "mutatingwebhookconfiguration",
        "krec-pod-defaulter",
        "--show-managed-fields",
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}",
    ]);
    assert_eq!(managers, "krec/Apply");
    let (_, excluded, _) = kubectl.run([
        "get",
        "mutatingwebhookconfiguration",
        "krec-pod-defaulter",
        "-o",
        "jsonpath={.webhooks[0].namespaceSelector.matchExpressions[0].values}",
    ]);
    assert_eq!(excluded, r#"["kube-system","kube-node-lease"]"#);

    // The guests answer: a bad Foo denied, a Pod defaulted — but not in kube-system.
    let bad = repo().join("sample-guests/foo-validator/rejected/bad-foo.yaml");
    let (denied, _, stderr) = kubectl.run([
        "apply".as_ref(),
        "-f".as_ref(),
        bad.as_os_str(),
        "--dry-run=server".as_ref(),
    ]);
    assert!(!denied);
    assert!(
        stderr.contains("denied the request: spec.deploymentName: Invalid value"),
        "{stderr}"
    );
    let (ok, said) = run_pod(&kubectl, "default", "web");
    assert!(ok, "{said}");
    assert_eq!(defaulted(&kubectl, "default", "web"), "true");
    let (ok, said) = run_pod(&kubectl, "kube-system", "web");
    assert!(ok, "{said}");
    assert_eq!(defaulted(&kubectl, "kube-system", "web"), "");

    // A guest gone: its registration with it.
    std::fs::remove_file(guests.join("foo-validator.yaml")).expect("remove");
    kubectl.until(
        &["get", "validatingwebhookconfigurations", "-o", "name"],
        |out| out.trim().is_empty(),
    );
    // The host stopped: registered at its own address, nothing is left behind.
    assert!(common::stop(&mut host.child, "-TERM").success());
    let (_, left, _) = kubectl.run(["get", "mutatingwebhookconfigurations", "-o", "name"]);
    assert_eq!(left.trim(), "", "registrations left behind");
    let (ok, said) = run_pod(&kubectl, "default", "after");
    assert!(ok, "{said}");
}

#[test]
fn registrations_through_a_service_should_outlive_the_host_and_never_lock_out_kube_system() {
    let (_cluster, kubectl, guests, kubeconfig, dir) = cluster_with_webhook_guests();
    let (ok, out, err) = kubectl.run(["create", "namespace", "krec-system"]);
    assert!(ok, "{out}{err}");
    let mut host = Host::start(
        &guests,
        &kubeconfig,
        &dir.path().join("cache"),
        &[
            "--webhook-service",
            "krec-system/krec-webhooks:443",
            "--namespace",
            "krec-system",
        ],
    );
    let client_config = kubectl.until(
        &[
            "get",
            "mutatingwebhookconfiguration",
            "krec-pod-defaulter",
            "-o",
            "jsonpath={.webhooks[0].clientConfig.service}",
        ],
        |out| !out.is_empty(),
    );
    assert_eq!(
        client_config,
        r#"{"name":"krec-webhooks","namespace":"krec-system","path":"/mutate/pod-defaulter","port":443}"#
    );
    let (_, excluded, _) = kubectl.run([
        "get",
        "mutatingwebhookconfiguration",
        "krec-pod-defaulter",
        "-o",
        "jsonpath={.webhooks[0].namespaceSelector.matchExpressions[0].values}",
    ]);
    assert_eq!(
        excluded,
        r#"["kube-system","kube-node-lease","krec-system"]"#
    );
    // Its certificate's CA is kept in the host's namespace, and is what the webhooks trust.
    let (ok, kept, err) = kubectl.run([
        "-n",
        "krec-system",
        "get",
        "secret",
        "krec-webhook-ca",
        "-o",
        r"jsonpath={.data.ca\.crt}",
    ]);
    assert!(ok && !kept.is_empty(), "{err}");
    let (_, trusted, _) = kubectl.run([
        "get",
        "mutatingwebhookconfiguration",
        "krec-pod-defaulter",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.caBundle}",
    ]);
    assert_eq!(trusted, kept);

    // The only replica stops: the registrations stay (the next Pod serves them), so a Pod in
    // an ordinary namespace waits for it, refused as kube-apiserver refuses it…
    assert!(common::stop(&mut host.child, "-TERM").success());
    let (_, left, _) = kubectl.run(["get", "mutatingwebhookconfigurations", "-o", "name"]);
    assert_eq!(
        left.trim(),
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/krec-pod-defaulter"
    );
    let (ok, said) = run_pod(&kubectl, "default", "web");
    assert!(!ok, "{said}");
    let post = "Internal error occurred: failed calling webhook \"mutating.pod-defaulter.krec.dev\": \
                failed to call webhook: Post \"https://krec-webhooks.krec-system.svc:443/mutate/pod-defaulter?timeout=5s\"";
    assert!(
        said.contains(&format!("{post}: service \"krec-webhooks\" not found")),
        "{said}"
    );
    // With the Service there and no replica behind it: refused as kube-proxy refuses it.
    let (ok, out, err) = kubectl.run([
        "-n",
        "krec-system",
        "create",
        "service",
        "clusterip",
        "krec-webhooks",
        "--tcp=443:9443",
    ]);
    assert!(ok, "{out}{err}");
    let (_, ip, _) = kubectl.run([
        "-n",
        "krec-system",
        "get",
        "service",
        "krec-webhooks",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let (ok, said) = run_pod(&kubectl, "default", "web");
    assert!(!ok, "{said}");
    assert!(
        said.contains(&format!(
            "{post}: dial tcp {ip}:443: connect: connection refused"
        )),
        "{said}"
    );
    // …and the control plane's namespaces are never locked out.
    let (ok, said) = run_pod(&kubectl, "kube-system", "web");
    assert!(ok, "{said}");
    let (ok, said) = run_pod(&kubectl, "kube-node-lease", "web");
    assert!(ok, "{said}");
}

#[test]
fn krec_webhooks_output_should_apply_server_side_again_and_again_on_a_crd_kubectl_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cluster, kubectl, _) = common::cluster(dir.path());
    // The Foo CRD with its second version, created as users create it: client-side apply.
    let crd = repo().join("sample-guests/foo-converter/crd/foo-crd.yaml");
    let (ok, out, err) = kubectl.run(["apply".as_ref(), "-f".as_ref(), crd.as_os_str()]);
    assert!(ok, "{out}{err}");
    let print = || {
        let args = vec![
            "webhooks".to_owned(),
            "--manifests".to_owned(),
            repo().join("sample-guests").display().to_string(),
            "--generate-certs".to_owned(),
            dir.path().join("certs").display().to_string(),
        ];
        let (ok, yaml, err) = common::krec(&args);
        assert!(ok, "{err}");
        let file = dir.path().join("webhooks.yaml");
        std::fs::write(&file, &yaml).expect("write");
        (file, yaml)
    };
    // As printed: the configurations, and the conversion as a comment.
    let (file, yaml) = print();
    assert!(
        yaml.contains("# The CRD foos.samplecontroller.k8s.io is converted by guest foo-converter"),
        "{yaml}"
    );
    for round in 1..=2 {
        let (ok, out, err) = kubectl.run([
            "apply".as_ref(),
            "--server-side".as_ref(),
            "-f".as_ref(),
            file.as_os_str(),
        ]);
        assert!(ok && err.is_empty(), "apply {round}: {out}{err}");
        assert!(
            out.contains("krec-pod-defaulter serverside-applied"),
            "{out}"
        );
    }
    // The conversion, patched in as the comment says: the CRD keeps its own fields.
    let patch = yaml
        .lines()
        .find_map(|l| {
            l.strip_prefix("#   kubectl patch crd foos.samplecontroller.k8s.io --type=merge -p '")
        })
        .and_then(|l| l.strip_suffix('\''))
        .expect("a kubectl patch for the converted CRD");
    let (ok, out, err) = kubectl.run([
        "patch",
        "crd",
        "foos.samplecontroller.k8s.io",
        "--type=merge",
        "-p",
        patch,
    ]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = kubectl.run([
        "apply".as_ref(),
        "--server-side".as_ref(),
        "-f".as_ref(),
        file.as_os_str(),
    ]);
    assert!(ok, "{out}{err}");
    let (_, crd, _) = kubectl.run([
        "get",
        "crd",
        "foos.samplecontroller.k8s.io",
        "-o",
        "jsonpath={.spec.conversion.strategy} {.spec.group} {.spec.versions[*].name}",
    ]);
    assert_eq!(crd, "Webhook samplecontroller.k8s.io v1alpha1 v1beta1");
}

#[test]
fn a_webhook_guest_that_cannot_load_should_not_lock_out_say_so_and_go_with_its_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_cluster, kubectl, kubeconfig) = common::cluster(dir.path());
    // pod-defaulter as a ClusterReconciler whose module is broken.
    let modules = dir.path().join("modules");
    std::fs::create_dir(&modules).expect("mkdir");
    std::fs::write(modules.join("pod_defaulter.wasm"), b"not a component").expect("write");
    let sample = std::fs::read_to_string(repo().join("sample-guests/pod-defaulter/manifest.yaml"))
        .expect("manifest");
    let object: String = sample
        .lines()
        .map(|line| match line {
            "kind: Reconciler" => "kind: ClusterReconciler\n".to_owned(),
            _ if line.starts_with("  module: ") => "  module: pod_defaulter.wasm\n".to_owned(),
            _ => format!("{line}\n"),
        })
        .collect();
    let file = dir.path().join("pod-defaulter.yaml");
    std::fs::write(&file, object).expect("write");
    let empty = dir.path().join("no-manifests");
    std::fs::create_dir(&empty).expect("mkdir");
    let _host = Host::start(
        &empty,
        &kubeconfig,
        &dir.path().join("cache"),
        &[
            "--from-cluster",
            "--module-dir",
            &modules.display().to_string(),
            "--register-webhooks",
        ],
    );
    let (ok, out, err) = kubectl.run(["apply".as_ref(), "-f".as_ref(), file.as_os_str()]);
    assert!(ok, "{out}{err}");
    let message = kubectl.until(
        &[
            "get",
            "crec",
            "pod-defaulter",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].message}"#,
        ],
        |out| out.contains("not a WebAssembly component"),
    );
    assert!(
        message.ends_with(krec::guests::status::WEBHOOKS_NOT_REGISTERED),
        "{message}"
    );
    let events = kubectl.until(
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=pod-defaulter",
            "-o",
            "jsonpath={.items[*].message}",
        ],
        |out| out.contains("its webhooks are not registered"),
    );
    assert!(
        events.contains("LoadFailed") || events.contains("not a WebAssembly"),
        "{events}"
    );
    // Nothing registered: Pods anywhere are admitted (unreviewed).
    let (_, registered, _) = kubectl.run(["get", "mutatingwebhookconfigurations", "-o", "name"]);
    assert_eq!(registered.trim(), "");
    for namespace in ["default", "kube-system"] {
        let (ok, said) = run_pod(&kubectl, namespace, "web");
        assert!(ok, "{said}");
        assert_eq!(defaulted(&kubectl, namespace, "web"), "");
    }
    // The module fixed: registered, and Pods outside the control plane are defaulted.
    std::fs::copy(
        common::module("pod_defaulter.wasm"),
        modules.join("pod_defaulter.wasm"),
    )
    .expect("copy the module");
    kubectl.until(
        &["get", "mutatingwebhookconfigurations", "-o", "name"],
        |out| out.contains("krec-pod-defaulter"),
    );
    let (ok, said) = run_pod(&kubectl, "default", "after");
    assert!(ok, "{said}");
    assert_eq!(defaulted(&kubectl, "default", "after"), "true");
    // The object deleted: its guest stops and its registration goes with it.
    let (ok, out, err) = kubectl.run(["delete", "crec", "pod-defaulter"]);
    assert!(ok, "{out}{err}");
    kubectl.until(
        &["get", "mutatingwebhookconfigurations", "-o", "name"],
        |out| out.trim().is_empty(),
    );
}

#[test]
fn registrations_left_to_cert_manager_should_keep_the_ca_its_injector_puts() {
    let (_cluster, kubectl, guests, kubeconfig, dir) = cluster_with_webhook_guests();
    let certs = dir.path().join("certs");
    let (ok, _, err) = common::krec([
        "webhooks".as_ref(),
        "--manifests".as_ref(),
        guests.as_os_str(),
        "--generate-certs".as_ref(),
        certs.as_os_str(),
    ]);
    assert!(ok, "{err}");
    let args = [
        "--webhook-service".to_owned(),
        "krec-system/krec-webhooks:443".to_owned(),
        "--webhook-cert-file".to_owned(),
        certs.join("tls.crt").display().to_string(),
        "--webhook-key-file".to_owned(),
        certs.join("tls.key").display().to_string(),
        "--webhook-inject-ca-from".to_owned(),
        "krec-system/krec-webhooks".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut host = Host::start(&guests, &kubeconfig, &dir.path().join("cache"), &args);
    let annotation = kubectl.until(
        &[
            "get",
            "mutatingwebhookconfiguration",
            "krec-pod-defaulter",
            "-o",
            r"jsonpath={.metadata.annotations.cert-manager\.io/inject-ca-from}",
        ],
        |out| !out.is_empty(),
    );
    assert_eq!(annotation, "krec-system/krec-webhooks");
    let bundle = |kubectl: &Kubectl| {
        kubectl
            .run([
                "get",
                "mutatingwebhookconfiguration",
                "krec-pod-defaulter",
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ])
            .1
    };
    assert_eq!(bundle(&kubectl), "", "the host sets no caBundle of its own");
    // cert-manager's injector fills it in…
    let (ok, out, err) = kubectl.run([
        "patch",
        "mutatingwebhookconfiguration",
        "krec-pod-defaulter",
        "--type=json",
        "--field-manager=cert-manager-cainjector",
        "-p",
        r#"[{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "aW5qZWN0ZWQ="}]"#,
    ]);
    assert!(ok, "{out}{err}");
    // …and a host applying its registrations again (here: the next one to start) keeps it.
    assert!(common::stop(&mut host.child, "-TERM").success());
    let again = Host::start(&guests, &kubeconfig, &dir.path().join("cache"), &args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let line = again
            .stderr
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .expect("the second host registers its webhooks");
        if line.contains("registered the MutatingWebhookConfiguration krec-pod-defaulter") {
            break;
        }
    }
    assert_eq!(bundle(&kubectl), "aW5qZWN0ZWQ=");
}
