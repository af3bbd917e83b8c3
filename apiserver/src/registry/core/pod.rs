//! Pods: kube-apiserver's defaults (`SetDefaults_PodSpec` and what the Pod strategy and
//! admission add on create), its validation of containers, graceful deletion (a Pod on a node
//! goes when its kubelet says so), `printPod`'s row and the Pod's field labels.

use serde_json::{Map, Value, json};

use crate::defaults::{child, child_list, each, set};
use crate::printers::{AGE, Column, NAME, Row};
use crate::registry::{Deletion, Strategy};
use krec_core::error::Cause;
use krec_core::json::Pointer;
use krec_core::selector::FieldLabel;

/// The Pod strategy.
pub struct PodStrategy;

/// The Pod strategy.
pub static STRATEGY: PodStrategy = PodStrategy;

impl Strategy for PodStrategy {
    fn default(&self, object: &mut Value) {
        if let Some(spec) = object.get_mut("spec") {
            default_spec(spec);
        }
    }

    fn default_on_create(&self, object: &mut Value) {
        on_create(object);
    }

    fn validate(&self, object: &Value, _old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        if let Some(spec) = object.get("spec") {
            validate_spec(spec, "spec", &mut causes);
        }
        causes
    }

    fn deletion(&self) -> Deletion {
        Deletion::Graceful
    }

    fn columns(&self) -> &'static [Column] {
        const COLUMNS: &[Column] = &[
            NAME,
            Column::text("Ready"),
            Column::text("Status"),
            Column::int("Restarts"),
            AGE,
            Column::text("IP").wide(),
            Column::text("Node").wide(),
            Column::text("Nominated Node").wide(),
            Column::text("Readiness Gates").wide(),
        ];
        COLUMNS
    }

    fn cells(&self, row: &Row<'_>) -> Vec<Value> {
        cells(row)
    }

    fn field_labels(&self) -> &'static [FieldLabel] {
        &[
            ("spec.nodeName", "/spec/nodeName", ""),
            ("spec.restartPolicy", "/spec/restartPolicy", ""),
            ("spec.schedulerName", "/spec/schedulerName", ""),
            ("spec.serviceAccountName", "/spec/serviceAccountName", ""),
            ("spec.hostNetwork", "/spec/hostNetwork", "false"),
            ("status.phase", "/status/phase", ""),
            ("status.podIP", "/status/podIP", ""),
            ("status.nominatedNodeName", "/status/nominatedNodeName", ""),
        ]
    }
}

/// `SetDefaults_PodSpec` and the defaults of what a pod spec holds (containers, volumes, probes).
pub(crate) fn default_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set(spec, "dnsPolicy", json!("ClusterFirst"));
    set(spec, "restartPolicy", json!("Always"));
    set(spec, "terminationGracePeriodSeconds", json!(30));
    set(spec, "securityContext", json!({}));
    set(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in each(spec, list) {
            container(c);
        }
    }
    for volume in each(spec, "volumes") {
        volume_defaults(volume);
    }
}

/// `SetDefaults_Container` and friends.
fn container(c: &mut Value) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    // The image's tag: after the last `:` that follows the last `/`, unless pinned by digest.
    let name = image.rsplit('/').next().unwrap_or(image);
    let tag = if image.contains('@') {
        Some("digest")
    } else {
        name.rsplit_once(':').map(|(_, tag)| tag)
    };
    let policy = if matches!(tag, None | Some("latest")) {
        "Always"
    } else {
        "IfNotPresent"
    };
    set(c, "imagePullPolicy", json!(policy));
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    set(c, "resources", json!({}));
    // Requests default to limits.
    if let Some(limits) = c
        .at("/resources/limits")
        .and_then(Value::as_object)
        .cloned()
    {
        let requests = child(child(c, "resources"), "requests");
        for (resource, quantity) in limits {
            set(requests, &resource, quantity);
        }
    }
    for port in each(c, "ports") {
        set(port, "protocol", json!("TCP"));
    }
    for env in each(c, "env") {
        if let Some(field) = env.at_mut("/valueFrom/fieldRef") {
            set(field, "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            set(p, "timeoutSeconds", json!(1));
            set(p, "periodSeconds", json!(10));
            set(p, "successThreshold", json!(1));
            set(p, "failureThreshold", json!(3));
            handler(p);
        }
    }
    if let Some(lifecycle) = c.get_mut("lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = lifecycle.get_mut(hook) {
                handler(h);
            }
        }
    }
}

/// An HTTP probe or hook is `HTTP` unless told otherwise.
fn handler(h: &mut Value) {
    if let Some(get) = h.get_mut("httpGet").filter(|g| g.is_object()) {
        set(get, "scheme", json!("HTTP"));
    }
}

/// Volume sources' `defaultMode` (0644) and their defaults.
fn volume_defaults(volume: &mut Value) {
    for source in ["configMap", "secret", "downwardAPI", "projected"] {
        if let Some(s) = volume.get_mut(source).filter(|s| s.is_object()) {
            set(s, "defaultMode", json!(420));
        }
    }
    if let Some(empty_dir) = volume.get_mut("emptyDir").filter(|e| e.is_null()) {
        *empty_dir = json!({});
    }
}

/// What the Pod strategy and admission fill in when a Pod is created (not for templates): the
/// `default` service account, priority 0 with its preemption policy, the default tolerations for
/// unready and unreachable nodes, and `Pending` with the Pod's QoS class.
fn on_create(object: &mut Value) {
    let spec = child(object, "spec");
    set(spec, "serviceAccountName", json!("default"));
    if let Some(account) = spec.get("serviceAccountName").cloned() {
        set(spec, "serviceAccount", account);
    }
    set(spec, "priority", json!(0));
    set(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    set(spec, "enableServiceLinks", json!(true));
    let tolerations = child_list(spec, "tolerations");
    for taint in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations
            .iter()
            .any(|t| t["key"] == taint && t["effect"] == "NoExecute");
        if !tolerated {
            tolerations.push(json!({"key": taint, "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    let qos = qos_class(spec);
    let status = child(object, "status");
    set(status, "phase", json!("Pending"));
    set(status, "qosClass", json!(qos));
}

/// The QoS class of a pod spec, as `qos.GetPodQOS`: `Guaranteed` when every container has equal
/// CPU and memory requests and limits, `BestEffort` when none has any, `Burstable` otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .filter_map(|list| spec.get(*list).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        let requests = c.at("/resources/requests").and_then(Value::as_object);
        let limits = c.at("/resources/limits").and_then(Value::as_object);
        let named = |m: Option<&Map<String, Value>>, r: &str| m.and_then(|m| m.get(r)).cloned();
        for resource in ["cpu", "memory"] {
            let (request, limit) = (named(requests, resource), named(limits, resource));
            any |= request.is_some() || limit.is_some();
            if limit.is_none() || request.is_some_and(|r| Some(r) != named(limits, resource)) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// A pod spec's containers: at least one, each named and with an image.
pub(crate) fn validate_spec(spec: &Value, path: &str, causes: &mut Vec<Cause>) {
    let containers = spec.get("containers").and_then(Value::as_array);
    if containers.is_none_or(|c| c.is_empty()) {
        causes.push((format!("{path}.containers"), "Required value".into()));
    }
    for list in ["initContainers", "containers"] {
        for (i, c) in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            // The item's path, written only for a problem found.
            let at = || format!("{path}.{list}[{i}]");
            match c.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push((format!("{}.name", at()), "Required value".into())),
                Some(name) if !krec_core::selector::is_dns_label(name) => causes.push((
                    format!("{}.name", at()),
                    format!("Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
                )),
                Some(_) => {}
            }
            if list == "containers"
                && c.get("image")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                causes.push((format!("{}.image", at()), "Required value".into()));
            }
        }
    }
    // Defaulted to Always when absent; anything else is refused as kube's
    // `validateRestartPolicy` does.
    match spec.get("restartPolicy").and_then(Value::as_str) {
        None | Some("Always" | "OnFailure" | "Never") => {}
        Some("") => causes.push((format!("{path}.restartPolicy"), "Required value".into())),
        Some(other) => causes.push((
            format!("{path}.restartPolicy"),
            format!("Unsupported value: {other:?}: supported values: \"Always\", \"OnFailure\", \"Never\""),
        )),
    }
}

/// READY, STATUS and RESTARTS of a pod as `printPod` computes them.
fn cells(row: &Row<'_>) -> Vec<Value> {
    let o = row.object;
    let statuses: Vec<&Value> = o
        .at("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let total = o
        .at("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s["restartCount"].as_i64())
        .sum();
    let mut reason = o
        .at("/status/reason")
        .or_else(|| o.at("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .to_owned();
    for status in statuses.iter().rev() {
        if let Some(waiting) = status.at("/state/waiting/reason").and_then(Value::as_str) {
            reason = waiting.to_owned();
        } else if let Some(terminated) = status.at("/state/terminated") {
            reason = terminated["reason"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("ExitCode:{}", terminated["exitCode"]));
        }
    }
    if o.at("/metadata/deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    let or_none = |p: &str| {
        o.at(p)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .unwrap_or("<none>")
            .to_owned()
    };
    vec![
        row.name(),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        row.age(),
        json!(or_none("/status/podIP")),
        json!(or_none("/spec/nodeName")),
        json!(or_none("/status/nominatedNodeName")),
        json!("<none>"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_should_get_kube_apiservers_defaults() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "v", "configMap": {"name": "cm"}}]}});
        STRATEGY.default(&mut pod);
        STRATEGY.default_on_create(&mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["tolerations"].as_array().map(Vec::len), Some(2));
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(c["livenessProbe"]["periodSeconds"], 10);
        assert_eq!(c["livenessProbe"]["httpGet"]["scheme"], "HTTP");
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"})
        );
        assert_eq!(spec["volumes"][0]["configMap"]["defaultMode"], 420);
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Guaranteed"})
        );
    }

    #[test]
    fn image_pull_policy_should_follow_the_tag() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/nginx", "Always"),
            ("localhost:5000/nginx:1", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
        ] {
            let mut c = json!({"name": "c", "image": image});
            container(&mut c);
            assert_eq!(c["imagePullPolicy"], policy, "{image}");
        }
    }

    #[test]
    fn a_pod_should_need_named_containers_with_images() {
        let pod = json!({"spec": {"containers": []}});
        assert_eq!(
            STRATEGY.validate(&pod, None),
            vec![("spec.containers".to_owned(), "Required value".to_owned())]
        );
        let pod = json!({"spec": {"containers": [{"name": "Web"}]}});
        let causes = STRATEGY.validate(&pod, None);
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert_eq!(
            causes[1],
            (
                "spec.containers[0].image".to_owned(),
                "Required value".to_owned()
            )
        );
    }

    #[test]
    fn a_pod_row_should_show_ready_status_and_restarts() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{}, {}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"ready": true, "restartCount": 2, "state": {"running": {}}},
                {"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let cells = STRATEGY.cells(&Row {
            object: &pod,
            now: jiff::Timestamp::now(),
        });
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], 3);
    }
}
