//! The built-in controllers and simulated nodes, driven by a real kubectl the way a user drives
//! a cluster: rollouts, scaling, image updates, Jobs, DaemonSets, garbage collection and a Pod
//! scripted to crash.

use std::time::{Duration, Instant};

use krec_apiserver::Server;
use krec_apiserver::controllers::{Config, Selection};

use crate::support::kubectl::{Kubectl, start_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_should_see_workloads_come_alive() {
    let builder = Server::builder().simulation(Config {
        controllers: Selection::all(),
        nodes: 3,
        pod_start: Duration::from_millis(100),
        job_duration: Duration::from_millis(500),
        ..Config::default()
    });
    let (_cluster, dir, kubectl) = start_with(builder).await;
    tokio::task::spawn_blocking(move || scenario(&kubectl, dir.path()))
        .await
        .expect("scenario");
}

/// Poll `check` until it holds (a living cluster converges; it does not answer at once).
fn eventually(what: &str, mut check: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    while Instant::now() < deadline {
        match check() {
            None => return,
            Some(state) => last = Some(state),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{what}: still {}", last.unwrap_or_default());
}

fn jsonpath(k: &Kubectl, object: &str, path: &str) -> String {
    k.ok(&["get", object, "-o", &format!("jsonpath={path}")])
}

fn pods(k: &Kubectl, selector: &str) -> Vec<String> {
    k.ok(&["get", "pods", "-l", selector, "--no-headers", "-o", "wide"])
        .lines()
        .map(str::to_owned)
        .collect()
}

fn scenario(k: &Kubectl, dir: &std::path::Path) {
    let nodes = k.ok(&["get", "nodes", "--no-headers"]);
    assert_eq!(
        nodes.lines().filter(|l| l.contains(" Ready ")).count(),
        3,
        "{nodes}"
    );

    // A Deployment rolls out; `rollout status` returns 0.
    k.ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:1.27",
        "--replicas=3",
    ]);
    let status = k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert!(status.contains("successfully rolled out"), "{status}");
    assert_eq!(
        jsonpath(k, "deployment/web", "{.status.availableReplicas}"),
        "3"
    );
    let running = pods(k, "app=web");
    assert_eq!(running.len(), 3, "{running:?}");
    for line in &running {
        assert!(
            line.contains(" Running ") && line.contains("krec-node-") && line.contains("10.244."),
            "{line}"
        );
    }

    // A Service gets Endpoints and an EndpointSlice (`kubectl describe` reads the slices);
    // a new namespace gets its default ServiceAccount and root CA.
    k.ok(&[
        "expose",
        "deployment/web",
        "--port=8000",
        "--target-port=80",
    ]);
    eventually("the Service's endpoints", || {
        let described = k.ok(&["describe", "service", "web"]);
        let line = described
            .lines()
            .find(|l| l.starts_with("Endpoints:"))
            .unwrap_or_default();
        (line.matches("10.244.").count() != 3).then(|| described.clone())
    });
    k.ok(&["create", "namespace", "team"]);
    eventually("the namespace's defaults", || {
        let out = k.run(&[
            "get",
            "serviceaccount/default",
            "configmap/kube-root-ca.crt",
            "-n",
            "team",
        ]);
        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
    });

    // Scaling up and down converges.
    k.ok(&["scale", "deployment/web", "--replicas=5"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    assert_eq!(pods(k, "app=web").len(), 5);
    k.ok(&["scale", "deployment/web", "--replicas=2"]);
    eventually("scaling down to 2", || {
        let n = pods(k, "app=web").len();
        (n != 2).then(|| format!("{n} pods"))
    });

    // Deleting a running Pod: it terminates through its kubelet (kubectl waits for it to go),
    // and the ReplicaSet replaces it.
    let victim = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    let deleted = k.ok(&["delete", "pod", &victim]);
    assert!(deleted.contains("deleted"), "{deleted}");
    eventually("the deleted Pod replaced", || {
        let now = pods(k, "app=web");
        let replaced = now.len() == 2 && !now.iter().any(|l| l.starts_with(&victim));
        (!replaced).then(|| format!("{now:?}"))
    });

    // A rolling update replaces every Pod, one revision up.
    k.ok(&["set", "image", "deployment/web", "nginx=nginx:1.28"]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    // The old Pods terminate through their kubelets after the rollout reports success, as in
    // a real cluster.
    eventually("only new Pods left", || {
        let images = k.ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ]);
        (images != "nginx:1.28 nginx:1.28").then_some(images)
    });
    let history = k.ok(&["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );
    let events = k.ok(&["describe", "deployment", "web"]);
    assert!(events.contains("ScalingReplicaSet"), "{events}");

    // A Job runs to completion.
    k.ok(&[
        "create",
        "job",
        "pi",
        "--image=perl",
        "--",
        "perl",
        "-e",
        "1",
    ]);
    k.ok(&[
        "wait",
        "--for=condition=complete",
        "job/pi",
        "--timeout=60s",
    ]);
    assert_eq!(jsonpath(k, "job/pi", "{.status.succeeded}"), "1");

    // A DaemonSet has one Pod per node; a ReplicaSet's Pods go with it.
    let manifest = dir.join("workloads.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: busybox}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  serviceName: db
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: postgres:16}]}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: plain}
spec:
  replicas: 2
  selector: {matchLabels: {app: plain}}
  template:
    metadata: {labels: {app: plain}}
    spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: crashy}
spec:
  replicas: 2
  selector: {matchLabels: {app: crashy}}
  template:
    metadata:
      labels: {app: crashy}
      annotations: {krec.dev/simulate: crashloop}
    spec: {containers: [{name: c, image: busybox}]}
",
    )
    .expect("write manifest");
    k.ok(&["apply", "-f", &manifest.display().to_string()]);
    eventually("one agent per node", || {
        let agents = pods(k, "app=agent");
        let mut nodes: Vec<&str> = agents
            .iter()
            .filter(|l| l.contains(" Running "))
            .filter_map(|l| l.split_whitespace().nth(6))
            .collect();
        nodes.sort_unstable();
        (nodes != ["krec-node-0", "krec-node-1", "krec-node-2"]).then(|| format!("{agents:?}"))
    });
    for workload in ["daemonset/agent", "statefulset/db"] {
        let status = k.ok(&["rollout", "status", workload, "--timeout=60s"]);
        assert!(
            status.contains("rolled out") || status.contains("roll out complete"),
            "{status}"
        );
    }
    let db = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=db",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert_eq!(db, "db-0 db-1");

    // Draining a node: everything but the DaemonSet's Pod moves elsewhere.
    k.ok(&[
        "drain",
        "krec-node-0",
        "--ignore-daemonsets",
        "--timeout=60s",
    ]);
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let on_drained = k.ok(&[
        "get",
        "pods",
        "--field-selector",
        "spec.nodeName=krec-node-0",
        "--no-headers",
    ]);
    assert!(
        on_drained.lines().all(|l| l.starts_with("agent-")),
        "{on_drained}"
    );
    k.ok(&["uncordon", "krec-node-0"]);

    eventually("the ReplicaSet's Pods", || {
        let n = pods(k, "app=plain").len();
        (n != 2).then(|| format!("{n} pods"))
    });
    k.ok(&["delete", "replicaset", "plain"]);
    eventually("the ReplicaSet's Pods deleted with it", || {
        let left = pods(k, "app=plain");
        (!left.is_empty()).then(|| format!("{left:?}"))
    });

    // A Pod scripted to crash makes its Deployment report unavailability.
    eventually("crashy unavailable", || {
        let available = jsonpath(
            k,
            "deployment/crashy",
            "{.status.conditions[?(@.type==\"Available\")].status}",
        );
        let waiting = k.ok(&["get", "pods", "-l", "app=crashy", "--no-headers"]);
        (available != "False" || !waiting.contains("CrashLoopBackOff"))
            .then(|| format!("Available={available:?}, pods: {waiting}"))
    });
}
