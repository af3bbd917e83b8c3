//! Server-side printing: the `Table` kube-apiserver answers to `Accept:
//! application/json;as=Table;v=v1;g=meta.k8s.io` (what `kubectl get` asks for), with the columns
//! its printers give each built-in kind (`pkg/printers/internalversion`) and a CRD's
//! `additionalPrinterColumns`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::json::Pointer;
use crate::resources::ResourceType;
use crate::scale::selector_string;

/// How a row's cells are computed from an object.
type Cells = dyn Fn(&Value) -> Vec<Value>;

/// One column: its name, type, format, description and priority (1 shows with `-o wide`).
type Column = (&'static str, &'static str, &'static str, &'static str, u8);

const NAME: Column = (
    "Name",
    "string",
    "name",
    "Name must be unique within a namespace.",
    0,
);
const AGE: Column = (
    "Age",
    "string",
    "",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
    0,
);

/// The Table of `objects` of `rt`. `include` is the request's `includeObject` (`None`,
/// `Metadata` — the default — or `Object`).
pub fn table(
    rt: &ResourceType,
    objects: Vec<Arc<Value>>,
    list_meta: Value,
    include: &str,
) -> Value {
    let now = jiff::Timestamp::now();
    let (columns, cells): (Vec<Value>, Box<Cells>) = if rt.printer_columns.is_empty() {
        let columns = builtin_columns(rt);
        let kind = (rt.group.clone(), rt.kind.clone());
        (
            columns.iter().map(column_definition).collect(),
            Box::new(move |o| builtin_cells(&kind.0, &kind.1, o, now)),
        )
    } else {
        custom_columns(rt, now)
    };
    let rows: Vec<Value> = objects
        .into_iter()
        .map(|o| {
            let cells = cells(&o);
            let mut object = match include {
                "None" => Value::Null,
                "Object" => Arc::unwrap_or_clone(o),
                _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": o.get("metadata").cloned().unwrap_or_default()}),
            };
            // As clients see it: `fieldsV1` as JSON, not the stored text.
            crate::managed::expand(&mut object);
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": columns, "rows": rows})
}

fn column_definition(c: &Column) -> Value {
    json!({"name": c.0, "type": c.1, "format": c.2, "description": c.3, "priority": c.4})
}

fn col(name: &'static str, priority: u8) -> Column {
    (name, "string", "", "", priority)
}

fn int_col(name: &'static str) -> Column {
    (name, "integer", "", "", 0)
}

fn builtin_columns(rt: &ResourceType) -> Vec<Column> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Pod") => vec![
            NAME,
            col("Ready", 0),
            col("Status", 0),
            int_col("Restarts"),
            AGE,
            col("IP", 1),
            col("Node", 1),
            col("Nominated Node", 1),
            col("Readiness Gates", 1),
        ],
        ("apps", "Deployment") => vec![
            NAME,
            col("Ready", 0),
            int_col("Up-to-date"),
            int_col("Available"),
            AGE,
            col("Containers", 1),
            col("Images", 1),
            col("Selector", 1),
        ],
        ("apps", "ReplicaSet") => vec![
            NAME,
            int_col("Desired"),
            int_col("Current"),
            int_col("Ready"),
            AGE,
            col("Containers", 1),
            col("Images", 1),
            col("Selector", 1),
        ],
        ("apps", "StatefulSet") => vec![
            NAME,
            col("Ready", 0),
            AGE,
            col("Containers", 1),
            col("Images", 1),
        ],
        ("apps", "DaemonSet") => vec![
            NAME,
            int_col("Desired"),
            int_col("Current"),
            int_col("Ready"),
            int_col("Up-to-date"),
            int_col("Available"),
            col("Node Selector", 0),
            AGE,
            col("Containers", 1),
            col("Images", 1),
            col("Selector", 1),
        ],
        ("batch", "Job") => vec![
            NAME,
            col("Status", 0),
            col("Completions", 0),
            col("Duration", 0),
            AGE,
            col("Containers", 1),
            col("Images", 1),
            col("Selector", 1),
        ],
        ("", "Service") => vec![
            NAME,
            col("Type", 0),
            col("Cluster-IP", 0),
            col("External-IP", 0),
            col("Port(s)", 0),
            AGE,
            col("Selector", 1),
        ],
        ("", "ConfigMap") => vec![NAME, int_col("Data"), AGE],
        ("", "Secret") => vec![NAME, col("Type", 0), int_col("Data"), AGE],
        ("", "Namespace") => vec![NAME, col("Status", 0), AGE],
        ("", "Endpoints") => vec![NAME, col("Endpoints", 0), AGE],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            NAME,
            col("AddressType", 0),
            col("Ports", 0),
            col("Endpoints", 0),
            AGE,
        ],
        ("", "Node") => vec![
            NAME,
            col("Status", 0),
            col("Roles", 0),
            AGE,
            col("Version", 0),
            col("Internal-IP", 1),
            col("External-IP", 1),
            col("OS-Image", 1),
            col("Kernel-Version", 1),
            col("Container-Runtime", 1),
        ],
        ("", "ServiceAccount") => vec![NAME, AGE],
        ("", "Event") | ("events.k8s.io", "Event") => vec![
            col("Last Seen", 0),
            col("Type", 0),
            col("Reason", 0),
            col("Object", 0),
            col("Subobject", 1),
            col("Source", 1),
            col("Message", 0),
            col("First Seen", 1),
            ("Count", "integer", "", "", 1),
            (NAME.0, NAME.1, NAME.2, NAME.3, 1),
        ],
        ("coordination.k8s.io", "Lease") => vec![NAME, col("Holder", 0), AGE],
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => vec![NAME, ("Webhooks", "integer", "", "", 0), AGE],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
        | ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            vec![NAME, col("Created At", 0)]
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => vec![
            NAME,
            col("Role", 0),
            AGE,
            col("Users", 1),
            col("Groups", 1),
            col("ServiceAccounts", 1),
        ],
        _ => vec![NAME, AGE],
    }
}

fn builtin_cells(group: &str, kind: &str, o: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let s = |p: &str| o.at(p).and_then(Value::as_str).unwrap_or_default();
    let n = |p: &str| o.at(p).and_then(Value::as_i64).unwrap_or(0);
    let name = json!(s("/metadata/name"));
    let age = json!(age_since(o.at("/metadata/creationTimestamp"), now));
    let containers = || pod_template_containers(o);
    let selector = || {
        o.at("/spec/selector")
            .map(selector_string)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "<none>".into())
    };
    match (group, kind) {
        ("", "Pod") => pod_cells(o, name, age),
        ("apps", "Deployment") => {
            let (names, images) = containers();
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    n("/status/readyReplicas"),
                    n("/spec/replicas")
                )),
                json!(n("/status/updatedReplicas")),
                json!(n("/status/availableReplicas")),
                age,
                json!(names),
                json!(images),
                json!(selector()),
            ]
        }
        ("apps", "ReplicaSet") => {
            let (names, images) = containers();
            vec![
                name,
                json!(n("/spec/replicas")),
                json!(n("/status/replicas")),
                json!(n("/status/readyReplicas")),
                age,
                json!(names),
                json!(images),
                json!(selector()),
            ]
        }
        ("apps", "StatefulSet") => {
            let (names, images) = containers();
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    n("/status/readyReplicas"),
                    n("/spec/replicas")
                )),
                age,
                json!(names),
                json!(images),
            ]
        }
        ("apps", "DaemonSet") => {
            let (names, images) = containers();
            let node_selector = map_text(o.at("/spec/template/spec/nodeSelector"));
            vec![
                name,
                json!(n("/status/desiredNumberScheduled")),
                json!(n("/status/currentNumberScheduled")),
                json!(n("/status/numberReady")),
                json!(n("/status/updatedNumberScheduled")),
                json!(n("/status/numberAvailable")),
                json!(node_selector),
                age,
                json!(names),
                json!(images),
                json!(selector()),
            ]
        }
        ("batch", "Job") => {
            let (names, images) = containers();
            let completions = match o.at("/spec/completions").and_then(Value::as_i64) {
                Some(c) => format!("{}/{c}", n("/status/succeeded")),
                None => format!(
                    "{}/1 of {}",
                    n("/status/succeeded"),
                    n("/spec/parallelism").max(1)
                ),
            };
            vec![
                name,
                json!(job_status(o)),
                json!(completions),
                json!(job_duration(o, now)),
                age,
                json!(names),
                json!(images),
                json!(selector()),
            ]
        }
        ("", "Service") => service_cells(o, name, age),
        ("", "ConfigMap") => {
            let count = |p: &str| o.get(p).and_then(Value::as_object).map_or(0, Map::len);
            vec![name, json!(count("data") + count("binaryData")), age]
        }
        ("", "Secret") => {
            let data = o.get("data").and_then(Value::as_object).map_or(0, Map::len);
            vec![name, json!(s("/type")), json!(data), age]
        }
        ("", "Namespace") => vec![name, json!(s("/status/phase")), age],
        ("", "Node") => node_cells(o, name, age),
        ("", "Endpoints") => {
            let mut list = Vec::new();
            for subset in o["subsets"].as_array().into_iter().flatten() {
                let ports: Vec<String> = subset["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| p["port"].to_string())
                    .collect();
                for address in subset["addresses"].as_array().into_iter().flatten() {
                    let ip = address["ip"].as_str().unwrap_or_default();
                    if ports.is_empty() {
                        list.push(ip.to_owned());
                    }
                    list.extend(ports.iter().map(|p| format!("{ip}:{p}")));
                }
            }
            vec![name, json!(first_three(&list)), age]
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            let ports: Vec<String> = o["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| match p["port"].as_i64() {
                    Some(port) => port.to_string(),
                    None => "<unset>".to_owned(),
                })
                .collect();
            let addresses: Vec<String> = o["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            let ports = if ports.is_empty() {
                "<unset>".to_owned()
            } else {
                ports.join(",")
            };
            vec![
                name,
                json!(s("/addressType")),
                json!(ports),
                json!(first_three(&addresses)),
                age,
            ]
        }
        ("", "Event") | ("events.k8s.io", "Event") => event_cells(o, name, now),
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration",
        ) => vec![
            name,
            json!(
                o.get("webhooks")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            age,
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name,
            json!(
                o.at("/spec/holderIdentity")
                    .and_then(Value::as_str)
                    .unwrap_or("<unknown>")
            ),
            age,
        ],
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole")
        | ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            vec![name, json!(s("/metadata/creationTimestamp"))]
        }
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            let subjects = |kind: &str| {
                o.get("subjects")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|s| s["kind"] == kind)
                    .map(|s| match (kind, s["namespace"].as_str()) {
                        ("ServiceAccount", Some(ns)) => {
                            format!("{ns}/{}", s["name"].as_str().unwrap_or_default())
                        }
                        _ => s["name"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            vec![
                name,
                json!(format!("{}/{}", s("/roleRef/kind"), s("/roleRef/name"))),
                age,
                json!(subjects("User")),
                json!(subjects("Group")),
                json!(subjects("ServiceAccount")),
            ]
        }
        _ => vec![name, age],
    }
}

/// A string map as `k=v,k2=v2` (a service's or node selector), or `<none>`.
fn map_text(map: Option<&Value>) -> String {
    map.and_then(Value::as_object)
        .filter(|m| !m.is_empty())
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|| "<none>".into())
}

/// The container names and images of a workload's pod template, comma-separated.
fn pod_template_containers(o: &Value) -> (String, String) {
    let containers = o
        .at("/spec/template/spec/containers")
        .or_else(|| o.at("/spec/jobTemplate/spec/template/spec/containers"))
        .and_then(Value::as_array);
    let field = |f: &str| {
        containers
            .into_iter()
            .flatten()
            .filter_map(|c| c.get(f).and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// READY, STATUS and RESTARTS of a pod as `printPod` computes them.
fn pod_cells(o: &Value, name: Value, age: Value) -> Vec<Value> {
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
        name,
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts),
        age,
        json!(or_none("/status/podIP")),
        json!(or_none("/spec/nodeName")),
        json!(or_none("/status/nominatedNodeName")),
        json!("<none>"),
    ]
}

/// At most three items and how many more, as kubectl's printers list endpoints
/// (`a,b,c + 2 more...`); `<none>` for none.
fn first_three(items: &[String]) -> String {
    match items.len() {
        0 => "<none>".to_owned(),
        n if n <= 3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

/// A node's row, as `printNode`: `Ready`/`NotReady`/`Unknown` (`,SchedulingDisabled` when
/// cordoned), roles from the `node-role.kubernetes.io/*` labels, the kubelet version, and with
/// `-o wide` its addresses and `nodeInfo`.
fn node_cells(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let conditions = o.at("/status/conditions").and_then(Value::as_array);
    let mut status = match conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| &c["status"])
    {
        Some(s) if s == "True" => "Ready".to_owned(),
        Some(s) if s == "False" => "NotReady".to_owned(),
        _ => "Unknown".to_owned(),
    };
    if o.at("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<&str> = o
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort_unstable();
    let roles = if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    };
    let address = |kind: &str| {
        o.at("/status/addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_owned()
    };
    let info = |field: &str| {
        o.at("/status/nodeInfo")
            .and_then(|i| i.get(field))
            .and_then(Value::as_str)
            .unwrap_or("<unknown>")
            .to_owned()
    };
    vec![
        name,
        json!(status),
        json!(roles),
        age,
        json!(info("kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// TYPE, CLUSTER-IP, EXTERNAL-IP and PORT(S) of a service, as `printService`.
fn service_cells(o: &Value, name: Value, age: Value) -> Vec<Value> {
    let kind = o
        .at("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let cluster_ip = o
        .at("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .unwrap_or("<none>");
    let external = match kind {
        "ExternalName" => o
            .at("/spec/externalName")
            .and_then(Value::as_str)
            .unwrap_or("<none>")
            .to_owned(),
        _ => o
            .at("/spec/externalIPs")
            .and_then(Value::as_array)
            .filter(|ips| !ips.is_empty())
            .map(|ips| {
                ips.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_else(|| {
                if kind == "LoadBalancer" {
                    "<pending>".into()
                } else {
                    "<none>".into()
                }
            }),
    };
    let ports: Vec<String> = o
        .at("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64().filter(|n| *n > 0) {
                Some(node) => format!("{}:{node}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    let selector = map_text(o.at("/spec/selector"));
    vec![
        name,
        json!(kind),
        json!(cluster_ip),
        json!(external),
        json!(if ports.is_empty() {
            "<none>".into()
        } else {
            ports.join(",")
        }),
        age,
        json!(selector),
    ]
}

/// A Job's STATUS column: `Complete`, `Failed`, `Suspended`, `Running`, …
fn job_status(o: &Value) -> &'static str {
    let conditions: Vec<&Value> = o
        .at("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "True")
        .collect();
    let has = |t: &str| conditions.iter().any(|c| c["type"] == t);
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if o.at("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    }
}

/// A Job's DURATION: from start to completion, or to now while it runs.
fn job_duration(o: &Value, now: jiff::Timestamp) -> String {
    let time = |p: &str| {
        o.at(p)
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    };
    match time("/status/startTime") {
        None => String::new(),
        Some(start) => {
            let end = time("/status/completionTime").unwrap_or(now);
            human_duration((end.as_second() - start.as_second()).max(0))
        }
    }
}

fn event_cells(o: &Value, name: Value, now: jiff::Timestamp) -> Vec<Value> {
    let s = |p: &str| o.at(p).and_then(Value::as_str).unwrap_or_default();
    let regarding = if o.get("regarding").is_some() {
        "/regarding"
    } else {
        "/involvedObject"
    };
    let object = format!(
        "{}/{}",
        s(&format!("{regarding}/kind")).to_lowercase(),
        s(&format!("{regarding}/name"))
    );
    let last = o
        .at("/lastTimestamp")
        .or_else(|| o.at("/series/lastObservedTime"))
        .or_else(|| o.at("/eventTime"))
        .or_else(|| o.at("/deprecatedLastTimestamp"))
        .or_else(|| o.at("/metadata/creationTimestamp"));
    let first = o
        .at("/firstTimestamp")
        .or_else(|| o.at("/eventTime"))
        .or_else(|| o.at("/metadata/creationTimestamp"));
    let source = match (
        s("/source/component"),
        s("/reportingComponent"),
        s("/reportingController"),
    ) {
        (c, _, _) if !c.is_empty() => c,
        (_, c, _) if !c.is_empty() => c,
        (_, _, c) => c,
    };
    let count = o
        .get("count")
        .and_then(Value::as_i64)
        .or_else(|| o.at("/series/count").and_then(Value::as_i64))
        .unwrap_or(1);
    let message = o
        .get("message")
        .or_else(|| o.get("note"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_owned();
    vec![
        json!(age_since(last, now)),
        json!(s("/type")),
        json!(s("/reason")),
        json!(object),
        json!(s(&format!("{regarding}/fieldPath"))),
        json!(source),
        json!(message),
        json!(age_since(first, now)),
        json!(count),
        name,
    ]
}

/// A CRD version's `additionalPrinterColumns` (with NAME first; AGE by default).
fn custom_columns(rt: &ResourceType, now: jiff::Timestamp) -> (Vec<Value>, Box<Cells>) {
    let mut columns = vec![column_definition(&NAME)];
    let specs = rt.printer_columns.clone();
    for c in &specs {
        columns.push(json!({"name": c["name"], "type": c["type"],
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": c.get("description").cloned().unwrap_or(json!("")),
            "priority": c.get("priority").cloned().unwrap_or(json!(0))}));
    }
    let cells = move |o: &Value| -> Vec<Value> {
        let mut cells = vec![json!(
            o.at("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )];
        for c in &specs {
            let path = c["jsonPath"].as_str().unwrap_or_default();
            let value = json_path(o, path);
            cells.push(match (c["type"].as_str(), value) {
                (_, None) => Value::Null,
                (Some("date"), Some(v)) => json!(age_since(Some(v), now)),
                (_, Some(v)) => v.clone(),
            });
        }
        cells
    };
    (columns, Box::new(cells))
}

/// The value at a simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`).
fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut at = object;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, index) = match part.split_once('[') {
            Some((field, rest)) => (field, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            at = at.get(field)?;
        }
        if let Some(i) = index {
            at = at.get(i)?;
        }
    }
    Some(at)
}

/// How long ago an RFC 3339 time was, as kubectl shows ages (`translateTimestampSince`).
fn age_since(time: Option<&Value>, now: jiff::Timestamp) -> String {
    let Some(then) = time
        .and_then(Value::as_str)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return "<unknown>".into();
    };
    human_duration((now.as_second() - then.as_second()).max(0))
}

/// apimachinery's `duration.HumanDuration`: `45s`, `5m12s`, `47m`, `3h20m`, `30h`, `5d3h`,
/// `300d`, `2y15d`, `9y`.
pub fn human_duration(seconds: i64) -> String {
    let minutes = seconds / 60;
    let hours = seconds / 3600;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 60 * 2 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 60 * 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if years < 8 {
        match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        }
    } else {
        format!("{years}y")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_should_read_as_kubectl_shows_them() {
        for (seconds, text) in [
            (45, "45s"),
            (119, "119s"),
            (312, "5m12s"),
            (300, "5m"),
            (47 * 60, "47m"),
            (3 * 3600 + 20 * 60, "3h20m"),
            (30 * 3600, "30h"),
            (5 * 86400 + 3 * 3600, "5d3h"),
            (300 * 86400, "300d"),
            (2 * 365 * 86400 + 15 * 86400, "2y15d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(seconds), text, "{seconds}");
        }
    }

    #[test]
    fn a_pod_row_should_show_ready_status_and_restarts() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{}, {}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"ready": true, "restartCount": 2, "state": {"running": {}}},
                {"ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        let cells = pod_cells(&pod, json!("p"), json!("1s"));
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], 3);
    }

    #[test]
    fn a_service_row_should_show_its_ports() {
        let svc = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}});
        let cells = service_cells(&svc, json!("s"), json!("1s"));
        assert_eq!(cells[1], "NodePort");
        assert_eq!(cells[2], "10.96.0.10");
        assert_eq!(cells[4], "80:30080/TCP,53/UDP");
    }
}
