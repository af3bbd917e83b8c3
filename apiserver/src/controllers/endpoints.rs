//! Endpoints and EndpointSlices for Services with a selector, as kube-controller-manager's
//! `endpoint` and `endpointslice` controllers keep them: the IPs of the selected Pods that have
//! one (ready ones as `addresses`, the others as `notReadyAddresses`; in the slice, with
//! `ready`/`serving`/`terminating` conditions), each Service port's `targetPort` resolved
//! against the Pod's named container ports, `nodeName` and a `targetRef` to the Pod.
//!
//! Simplified: one EndpointSlice per Service (kube splits at 100 endpoints); IPv4 only;
//! `publishNotReadyAddresses` is honoured in Endpoints only as kube does (all addresses ready).

use std::collections::BTreeMap;

use super::*;

const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
const SLICE_CONTROLLER: &str = "endpointslice-controller.k8s.io";

/// One Endpoints subset being built: ready addresses, not-ready addresses, ports.
type Subset = (Vec<Value>, Vec<Value>, Vec<Value>);

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let (services, endpoints, slices) = (
        engine.types.services.clone(),
        engine.types.endpoints.clone(),
        engine.types.endpoint_slices.clone(),
    );
    let service = engine.get(&services, ns, name);
    let owned_slices: Vec<Arc<Value>> = engine
        .store
        .objects(&slices, Some(ns))
        .into_iter()
        .filter(|s| {
            let labels = s.at("/metadata/labels");
            labels
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .and_then(Value::as_str)
                == Some(name)
                && labels
                    .and_then(|l| l.get(MANAGED_BY))
                    .and_then(Value::as_str)
                    == Some(SLICE_CONTROLLER)
        })
        .collect();
    let Some(service) = service.filter(|s| {
        s.at("/spec/selector")
            .and_then(Value::as_object)
            .is_some_and(|selector| !selector.is_empty())
    }) else {
        // No Service, or one without a selector: its endpoints are not this controller's.
        for slice in &owned_slices {
            engine.delete(&slices, slice)?;
        }
        if let Some(existing) = engine.get(&endpoints, ns, name)
            && existing
                .at("/metadata/labels")
                .and_then(|l| l.get("endpoints.kubernetes.io/managed-by"))
                .is_some()
        {
            engine.delete(&endpoints, &existing)?;
        }
        return Ok(Next::Done);
    };
    let publish_not_ready =
        service.at("/spec/publishNotReadyAddresses") == Some(&Value::Bool(true));
    let selected: Vec<Arc<Value>> = engine
        .store
        .objects(&engine.types.pods, Some(ns))
        .into_iter()
        .filter(|p| selects(&service, p))
        .filter(|p| !is_terminal(p) && p.at("/status/podIP").and_then(Value::as_str).is_some())
        .collect();
    let service_ports: Vec<Value> = service
        .at("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();

    // Endpoints: Pods grouped by the ports they resolve to.
    let mut subsets: BTreeMap<String, Subset> = BTreeMap::new();
    let mut slice_endpoints = Vec::new();
    let mut slice_ports: Option<Vec<Value>> = None;
    for pod in &selected {
        let ip = pod
            .at("/status/podIP")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (pod_ns, pod_name) = namespace_and_name(pod);
        let target = json!({"kind": "Pod", "namespace": pod_ns, "name": pod_name, "uid": uid(pod)});
        let terminating = is_deleting(pod);
        let ready = is_ready(pod) && !terminating;
        let mut address = json!({"ip": ip, "targetRef": target});
        if !node_name(pod).is_empty() {
            address["nodeName"] = json!(node_name(pod));
        }
        let ports: Vec<Value> = service_ports
            .iter()
            .filter_map(|p| resolve_port(p, pod))
            .collect();
        // A slice's port always has a name (`""` when the Service port has none): clients
        // dereference it (kubectl describe does).
        slice_ports.get_or_insert_with(|| {
            ports
                .iter()
                .map(|p| {
                    let mut p = p.clone();
                    if p.get("name").is_none() {
                        p["name"] = json!("");
                    }
                    p
                })
                .collect()
        });
        if !terminating || publish_not_ready {
            let key = serde_json::to_string(&ports).unwrap_or_default();
            let entry = subsets
                .entry(key)
                .or_insert_with(|| (Vec::new(), Vec::new(), ports));
            if ready || publish_not_ready {
                entry.0.push(address);
            } else {
                entry.1.push(address);
            }
        }
        let mut endpoint = json!({"addresses": [ip],
            "conditions": {"ready": ready || publish_not_ready, "serving": is_ready(pod), "terminating": terminating},
            "targetRef": target});
        if !node_name(pod).is_empty() {
            endpoint["nodeName"] = json!(node_name(pod));
        }
        slice_endpoints.push(endpoint);
    }
    let subsets: Vec<Value> = subsets
        .into_values()
        .map(|(ready, not_ready, ports)| {
            let mut subset = json!({});
            if !ready.is_empty() {
                subset["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            if !ports.is_empty() {
                subset["ports"] = json!(ports);
            }
            subset
        })
        .filter(|s| s.get("addresses").is_some() || s.get("notReadyAddresses").is_some())
        .collect();
    let mut labels = service
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(
        "endpoints.kubernetes.io/managed-by".into(),
        json!("endpoint-controller"),
    );
    match engine.get(&endpoints, ns, name) {
        None => {
            let mut object = json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": name, "namespace": ns, "labels": labels}});
            if !subsets.is_empty() {
                object["subsets"] = json!(subsets);
            }
            engine.create(&endpoints, ns, object)?;
        }
        Some(existing) => {
            let mut updated = (*existing).clone();
            if subsets.is_empty() {
                if let Some(map) = updated.as_object_mut() {
                    map.remove("subsets");
                }
            } else {
                updated["subsets"] = json!(subsets);
            }
            set_at(&mut updated, &["metadata", "labels"], Value::Object(labels));
            if updated != *existing {
                engine.update(&endpoints, updated)?;
            }
        }
    }

    // The EndpointSlice.
    let ports: Vec<Value> = slice_ports.unwrap_or_else(|| {
        service_ports
            .iter()
            .map(|p| json!({"name": p.get("name").cloned().unwrap_or(json!("")), "port": p.get("port"), "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP"))}))
            .collect()
    });
    let mut slice_labels = service
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    slice_labels.insert(SERVICE_NAME_LABEL.into(), json!(name));
    slice_labels.insert(MANAGED_BY.into(), json!(SLICE_CONTROLLER));
    let mut owned = owned_slices.into_iter();
    match owned.next() {
        None => {
            let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"generateName": format!("{name}-"), "namespace": ns,
                    "labels": slice_labels, "ownerReferences": [owner_reference(&service)]},
                "addressType": "IPv4", "endpoints": slice_endpoints, "ports": ports});
            engine.create(&slices, ns, slice)?;
        }
        Some(existing) => {
            let mut updated = (*existing).clone();
            updated["endpoints"] = json!(slice_endpoints);
            updated["ports"] = json!(ports);
            set_at(
                &mut updated,
                &["metadata", "labels"],
                Value::Object(slice_labels),
            );
            if updated != *existing {
                engine.update(&slices, updated)?;
            }
        }
    }
    for extra in owned {
        engine.delete(&slices, &extra)?;
    }
    Ok(Next::Done)
}

/// A Service port as the Pod serves it: `targetPort` (a number, or a container port's name;
/// absent: `port`), with the Service port's name and protocol. `None` when the Pod has no
/// container port of that name.
fn resolve_port(service_port: &Value, pod: &Value) -> Option<Value> {
    let protocol = service_port
        .get("protocol")
        .cloned()
        .unwrap_or(json!("TCP"));
    let port = match service_port.get("targetPort") {
        Some(Value::String(named)) => pod
            .at("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().into_iter().flatten())
            .find(|p| {
                p["name"] == named.as_str()
                    && p.get("protocol").cloned().unwrap_or(json!("TCP")) == protocol
            })
            .and_then(|p| p["containerPort"].as_i64())?,
        Some(Value::Number(n)) => n.as_i64()?,
        _ => service_port.get("port").and_then(Value::as_i64)?,
    };
    let mut resolved = json!({"port": port, "protocol": protocol});
    if let Some(name) = service_port
        .get("name")
        .filter(|n| n.as_str().is_some_and(|n| !n.is_empty()))
    {
        resolved["name"] = name.clone();
    }
    Some(resolved)
}
