//! kube-apiserver's defaulting of built-in kinds: the values its defaulters (`SetDefaults_*` of
//! `pkg/apis/{core,apps,batch,rbac}/v1`) and its create strategies fill in, so an object read
//! back here looks as it would from a real cluster (a Pod has its `restartPolicy`, a Deployment
//! its `strategy`), and a controller comparing desired and actual state sees what it would see in
//! production.
//!
//! Defaults apply to every write's body (create, update, and the result of a patch), as
//! kube-apiserver applies them when it decodes a request. A field counts as unset when it is
//! absent, `null`, or the Go zero value of a value field (`""`); pointers set to zero are kept.

use serde_json::{Map, Value, json};

use crate::json::Pointer;

/// Fill in the defaults of a built-in object of `group`/`kind` (other kinds are left alone).
pub fn apply(group: &str, kind: &str, object: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object.get_mut("spec") {
                pod_spec(spec);
            }
        }
        ("", "Namespace") => namespace(object),
        ("", "Secret") => secret(object),
        ("", "Service") => {
            if let Some(spec) = object.get_mut("spec") {
                service_spec(spec);
            }
        }
        ("", "ReplicationController") | ("apps", "ReplicaSet") => {
            let spec = child(object, "spec");
            set(spec, "replicas", json!(1));
            template(spec);
        }
        ("apps", "Deployment") => deployment(object),
        ("apps", "StatefulSet") => stateful_set(object),
        ("apps", "DaemonSet") => daemon_set(object),
        ("batch", "Job") => job(object),
        ("batch", "CronJob") => cron_job(object),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            role_binding(object);
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            crate::admissionregistration::apply_defaults(
                crate::admissionregistration::HookKind::Validating,
                object,
            );
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            crate::admissionregistration::apply_defaults(
                crate::admissionregistration::HookKind::Mutating,
                object,
            );
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => custom_resource_definition(object),
        _ => {}
    }
}

/// The object at `key` of `parent`, created (as `{}`) when unset.
fn child<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    if !parent.get(key).is_some_and(Value::is_object) {
        parent[key] = json!({});
    }
    // Not `&mut parent[key]`, which allocates the key to look it up.
    match parent.get_mut(key) {
        Some(found) => found,
        None => unreachable!("`{key}` was just set"),
    }
}

/// Whether `parent.key` is unset: absent, `null` or `""`.
fn unset(parent: &Value, key: &str) -> bool {
    parent.get(key).is_none_or(is_unset)
}

/// Whether a present value counts as unset: `null` or `""`.
fn is_unset(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

/// Set `parent.key` to `value` when it is unset.
fn set(parent: &mut Value, key: &str, value: Value) {
    let Some(map) = parent.as_object_mut() else {
        return;
    };
    // One lookup for a field that is there; the key is allocated only when it is not.
    match map.get_mut(key) {
        Some(slot) if is_unset(slot) => *slot = value,
        Some(_) => {}
        None => {
            map.insert(key.to_owned(), value);
        }
    }
}

/// Each object of the list at `parent.key`.
fn each<'a>(parent: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    parent
        .get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter(|item| item.is_object())
}

/// `SetDefaults_CustomResourceDefinitionSpec`'s conversion: `strategy: None`, and port 443 for a
/// conversion webhook reached through a Service.
fn custom_resource_definition(crd: &mut Value) {
    let conversion = child(child(crd, "spec"), "conversion");
    set(conversion, "strategy", json!("None"));
    if let Some(service) = conversion.pointer_mut("/webhook/clientConfig/service")
        && service.is_object()
    {
        set(service, "port", json!(443));
    }
}

/// `SetDefaults_Namespace` and the namespace strategy: the `kubernetes.io/metadata.name` label,
/// the `kubernetes` finalizer, and `Active`.
fn namespace(object: &mut Value) {
    let name = object
        .at("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(name) = name {
        let labels = child(child(object, "metadata"), "labels");
        labels["kubernetes.io/metadata.name"] = json!(name);
    }
    let spec = child(object, "spec");
    set(spec, "finalizers", json!(["kubernetes"]));
    set(child(object, "status"), "phase", json!("Active"));
}

/// `SetDefaults_Secret` and the secret strategy: `type: Opaque`, and `stringData` folded into
/// `data` (base64), winning over the same key in `data`.
fn secret(object: &mut Value) {
    use base64::Engine as _;
    set(object, "type", json!("Opaque"));
    // Non-string values are left for validation to refuse, as kube-apiserver's decoder does.
    let all_strings = object
        .get("stringData")
        .and_then(Value::as_object)
        .is_some_and(|m| m.values().all(Value::is_string));
    if !all_strings {
        return;
    }
    let Some(Value::Object(strings)) = object.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    let data = child(object, "data");
    for (key, value) in strings {
        if let Value::String(text) = value {
            data[key] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
}

/// The pod template of a workload's spec.
fn template(spec: &mut Value) {
    if let Some(pod) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        pod_spec(pod);
    }
}

/// `SetDefaults_PodSpec` and the defaults of what a pod spec holds (containers, volumes, probes).
pub fn pod_spec(spec: &mut Value) {
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

/// `SetDefaults_Service` (ports' protocol and target port, session affinity, type, traffic
/// policies, IP families).
fn service_spec(spec: &mut Value) {
    if !spec.is_object() {
        return;
    }
    set(spec, "type", json!("ClusterIP"));
    set(spec, "sessionAffinity", json!("None"));
    let kind = spec["type"].as_str().unwrap_or("ClusterIP").to_owned();
    for port in each(spec, "ports") {
        set(port, "protocol", json!("TCP"));
        if let Some(number) = port.get("port").cloned() {
            set(port, "targetPort", number);
        }
    }
    if kind != "ExternalName" {
        set(spec, "internalTrafficPolicy", json!("Cluster"));
        set(spec, "ipFamilyPolicy", json!("SingleStack"));
        set(spec, "ipFamilies", json!(["IPv4"]));
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        set(spec, "externalTrafficPolicy", json!("Cluster"));
    }
}

/// `SetDefaults_Deployment`: one replica, a 25 %/25 % rolling update, ten old ReplicaSets kept,
/// a ten-minute progress deadline.
fn deployment(object: &mut Value) {
    let spec = child(object, "spec");
    set(spec, "replicas", json!(1));
    let strategy = child(spec, "strategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        set(rolling, "maxUnavailable", json!("25%"));
        set(rolling, "maxSurge", json!("25%"));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    set(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

/// `SetDefaults_StatefulSet`.
fn stateful_set(object: &mut Value) {
    let spec = child(object, "spec");
    set(spec, "replicas", json!(1));
    set(spec, "podManagementPolicy", json!("OrderedReady"));
    let strategy = child(spec, "updateStrategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        set(child(strategy, "rollingUpdate"), "partition", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    let retention = child(spec, "persistentVolumeClaimRetentionPolicy");
    set(retention, "whenDeleted", json!("Retain"));
    set(retention, "whenScaled", json!("Retain"));
    template(spec);
}

/// `SetDefaults_DaemonSet`.
fn daemon_set(object: &mut Value) {
    let spec = child(object, "spec");
    let strategy = child(spec, "updateStrategy");
    set(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let rolling = child(strategy, "rollingUpdate");
        set(rolling, "maxUnavailable", json!(1));
        set(rolling, "maxSurge", json!(0));
    }
    set(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}

/// `SetDefaults_Job`, and the job strategy's generated selector: unless `manualSelector`, the
/// pods are selected by the Job's uid, and the template carries the labels that select them.
fn job(object: &mut Value) {
    let uid = object
        .at("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let name = object
        .at("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let spec = child(object, "spec");
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set(spec, "parallelism", json!(1));
    set(spec, "backoffLimit", json!(6));
    set(spec, "completionMode", json!("NonIndexed"));
    set(spec, "suspend", json!(false));
    set(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if let (false, Some(uid), Some(name)) = (manual, uid, name) {
        let mut labels = Map::new();
        labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
        labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
        labels.insert("controller-uid".into(), json!(uid));
        labels.insert("job-name".into(), json!(name));
        if unset(spec, "selector") {
            spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
        }
        let template_labels = child(child(child(spec, "template"), "metadata"), "labels");
        for (key, value) in labels {
            set(template_labels, &key, value);
        }
    }
    template(spec);
}

/// `SetDefaults_CronJob`.
fn cron_job(object: &mut Value) {
    let spec = child(object, "spec");
    set(spec, "concurrencyPolicy", json!("Allow"));
    set(spec, "suspend", json!(false));
    set(spec, "successfulJobsHistoryLimit", json!(3));
    set(spec, "failedJobsHistoryLimit", json!(1));
    if let Some(pod) = spec.at_mut("/jobTemplate/spec/template/spec") {
        pod_spec(pod);
    }
}

/// `SetDefaults_Subject`: users and groups are in RBAC's group (a ServiceAccount's is the core
/// group, `""`, which Go's JSON omits).
fn role_binding(object: &mut Value) {
    for subject in each(object, "subjects") {
        if matches!(subject["kind"].as_str(), Some("User" | "Group")) {
            set(subject, "apiGroup", json!("rbac.authorization.k8s.io"));
        }
    }
}

/// What the Pod strategy and admission fill in when a Pod is created (not for templates): the
/// `default` service account, priority 0 with its preemption policy, the default tolerations for
/// unready and unreachable nodes, and `Pending` with the Pod's QoS class.
pub fn pod_on_create(object: &mut Value) {
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

/// The list at `parent.key`, created when unset.
fn child_list<'a>(parent: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !parent.get(key).is_some_and(Value::is_array) {
        parent[key] = json!([]);
    }
    match parent.get_mut(key) {
        Some(Value::Array(items)) => items,
        _ => unreachable!("set to an array above"),
    }
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
        apply("", "Pod", &mut pod);
        pod_on_create(&mut pod);
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
    fn workloads_should_get_their_strategies_and_set_values_should_stay() {
        let mut d = json!({"spec": {"replicas": 0, "template": {"spec": {"containers": []}}}});
        apply("apps", "Deployment", &mut d);
        assert_eq!(d["spec"]["replicas"], 0, "a set zero is kept");
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut recreate = json!({"spec": {"strategy": {"type": "Recreate"}}});
        apply("apps", "Deployment", &mut recreate);
        assert!(recreate["spec"]["strategy"].get("rollingUpdate").is_none());

        let mut job = json!({"metadata": {"name": "j", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}}});
        apply("batch", "Job", &mut job);
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["job-name"],
            "j"
        );
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn secrets_namespaces_and_services_should_be_defaulted() {
        let mut s = json!({"data": {"a": "eA=="}, "stringData": {"a": "y", "b": "z"}});
        apply("", "Secret", &mut s);
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eQ==", "b": "eg=="}})
        );
        let mut ns = json!({"metadata": {"name": "demo"}});
        apply("", "Namespace", &mut ns);
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "demo"
        );
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        let mut svc = json!({"spec": {"ports": [{"port": 80}]}});
        apply("", "Service", &mut svc);
        assert_eq!(
            svc["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
    }
}
