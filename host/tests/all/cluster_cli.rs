//! `krec cluster`: prints where the kubeconfig is and how to use it, binds loopback by default,
//! and stops cleanly on Ctrl-C.

use crate::common;

#[test]
fn cluster_should_print_the_kubeconfig_and_stop_on_ctrl_c() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc.yaml");
    let (mut child, printed, lines) = common::spawn_until(
        [
            "cluster".as_ref(),
            "--kubeconfig-out".as_ref(),
            kubeconfig.as_os_str(),
        ],
        |line| line.starts_with("try: kubectl"),
    );
    let text = printed.join("\n");
    assert!(
        text.contains("serving the Kubernetes API at https://127.0.0.1:"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "kubeconfig: {}",
            kubeconfig.canonicalize().expect("written").display()
        )),
        "{text}"
    );
    assert!(text.contains("try: kubectl --kubeconfig "), "{text}");
    let written = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
    assert!(
        written.contains("server: https://127.0.0.1:")
            && written.contains("certificate-authority-data:")
    );

    // Ctrl-C: SIGINT to the process.
    let exit = common::stop(&mut child, "-INT");
    assert!(exit.success(), "exit status {exit:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopping")), "{rest:?}");
}

/// Every file under `sample-guests/*/crd/` and `sample-guests/*/examples/`, applied with plain
/// kubectl to `krec cluster` exactly as a user would apply them to a real cluster (CRDs first, so
/// their kinds are served), is accepted: the embedded server refuses what kube-apiserver refuses
/// (protected-group CRDs without API approval, owner references without a uid), so a file
/// accepted here is not one only `krec dev` forgives.
#[test]
fn every_sample_crd_and_example_should_apply_with_kubectl() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository")
        .to_owned();
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    let mut guests: Vec<_> = std::fs::read_dir(repo.join("sample-guests"))
        .expect("sample-guests")
        .map(|e| e.expect("entry"))
        .collect();
    // Sorted, so that foo-converter's Foo CRD (foo-controller's with v1beta1 added) comes
    // second and is applied over the first, as `krec dev` applies it.
    guests.sort_by_key(|e| e.path());
    for folder in ["crd", "examples"] {
        for guest in &guests {
            let dir = guest.path().join(folder);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let mut found: Vec<_> = entries
                    .map(|e| e.expect("entry").path())
                    .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
                    .collect();
                // CRDs before the objects of their kinds.
                found.sort_by_key(|p| (!p.to_string_lossy().contains("crd.yaml"), p.clone()));
                files.extend(found);
            }
        }
    }
    assert!(files.len() >= 5, "sample files found: {files:?}");
    // And each guest's manifest: a Reconciler (or, cluster-wide, ClusterReconciler) object,
    // whose CRDs `krec cluster` serves.
    files.extend(
        guests
            .iter()
            .map(|g| g.path().join("manifest.yaml"))
            .filter(|p| p.exists()),
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let (child, kubectl, _) = common::cluster(dir.path());
    let mut refused = Vec::new();
    // What earlier files created: a later file may extend it (`configured`).
    let mut applied: Vec<String> = Vec::new();
    for file in &files {
        let (ok, stdout, stderr) = kubectl.run(["apply".as_ref(), "-f".as_ref(), file.as_os_str()]);
        let accepted = |line: &str| {
            line.ends_with(" created")
                || line
                    .strip_suffix(" configured")
                    .is_some_and(|what| applied.iter().any(|a| a == what))
        };
        if !ok || !stdout.lines().all(accepted) {
            refused.push(format!("{}:\n{stdout}{stderr}", file.display()));
            continue;
        }
        applied.extend(
            stdout
                .lines()
                .filter_map(|l| l.strip_suffix(" created"))
                .map(str::to_owned),
        );
        // The CRD's kinds are served once it is established.
        if file.to_string_lossy().contains("crd.yaml") {
            let (ok, out, err) = kubectl.run([
                "wait".as_ref(),
                "--for=condition=Established".as_ref(),
                "--timeout=30s".as_ref(),
                "-f".as_ref(),
                file.as_os_str(),
            ]);
            assert!(ok, "{out}{err}");
        }
    }
    let (_, listed, _) = kubectl.run(["get", "reconcilers,clusterreconcilers", "-o", "name"]);
    let reconcilers = listed.lines().count();
    drop(child);
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
    assert!(
        reconcilers >= 9,
        "{reconcilers} reconcilers listed: {listed:?}"
    );
}

/// `krec install | kubectl apply -f -` on `krec cluster`: every object is created (krec's own API,
/// served already, is unchanged), and the Deployment's replicas come up.
#[test]
fn krec_install_should_apply_with_kubectl_on_krec_cluster() {
    let (ok, yaml, stderr) = common::krec(["install"]);
    assert!(ok, "{stderr}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("install.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let (child, kubectl, _) = common::cluster(dir.path());
    let (ok, out, err) = kubectl.run(["apply", "-f", &file.display().to_string()]);
    assert!(ok, "{out}{err}");
    assert!(err.is_empty(), "warnings: {err}");
    for expected in [
        "customresourcedefinition.apiextensions.k8s.io/reconcilers.krec.dev unchanged",
        "validatingadmissionpolicy.admissionregistration.k8s.io/krec-reconciler-tenancy unchanged",
        "namespace/krec-system created",
        "serviceaccount/krec created",
        "clusterrole.rbac.authorization.k8s.io/krec created",
        "clusterrolebinding.rbac.authorization.k8s.io/krec created",
        "deployment.apps/krec created",
        "service/krec-admin created",
        "service/krec-webhooks created",
    ] {
        assert!(out.lines().any(|l| l == expected), "{expected}:\n{out}");
    }
    let (ok, out, err) = kubectl.run([
        "-n",
        "krec-system",
        "get",
        "deployment",
        "krec",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("--from-cluster") && out.contains("--shard"),
        "{out}"
    );
    // Applying again changes nothing.
    let (ok, out, err) = kubectl.run(["apply", "-f", &file.display().to_string()]);
    assert!(ok, "{err}");
    assert!(out.lines().all(|l| l.ends_with(" unchanged")), "{out}");
    drop(child);
}
