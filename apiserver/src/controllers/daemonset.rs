//! The DaemonSet controller (`pkg/controller/daemon`): one Pod per node the template's
//! `nodeSelector` admits, pinned by required node affinity on `metadata.name` (the scheduler
//! binds it), labelled with `pod-template-generation`; extra Pods on a node deleted; a
//! `RollingUpdate` replaces Pods of an older generation one `maxUnavailable` at a time; `status`
//! counts desired, current, ready, available and updated Pods.
//!
//! Simplified: no ControllerRevisions (`controller-revision-hash` is the template's hash).

use super::*;

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let rt = &engine.types.daemon_sets;
    let Some(ds) = engine.get(rt, ns, name) else {
        return Ok(Next::Done);
    };
    let generation = int_at(&ds, "/metadata/generation").unwrap_or(1).to_string();
    let template = ds.at("/spec/template").cloned().unwrap_or_default();
    let hash = template_hash(&template, 0);
    let node_selector = template.at("/spec/nodeSelector").and_then(Value::as_object);
    let nodes: Vec<String> = engine
        .store
        .objects(&engine.types.nodes, None)
        .iter()
        .filter(|n| {
            node_selector
                .into_iter()
                .flatten()
                .all(|(k, v)| n.at("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
        })
        .map(|n| namespace_and_name(n).1.to_owned())
        .collect();
    if !is_deleting(&ds) {
        adopt_and_release(engine, &engine.types.pods, ns, &ds)?;
    }
    let pods = engine.pods_of(ns, uid(&ds));
    let active: Vec<&Arc<Value>> = pods.iter().filter(|p| is_active(p)).collect();
    let target = |pod: &Value| -> String {
        let bound = node_name(pod);
        if !bound.is_empty() {
            return bound.to_owned();
        }
        pod.at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchFields/0/values/0")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let now = wall_now();
    let min_ready = int_at(&ds, "/spec/minReadySeconds").unwrap_or(0);
    let updated = |pod: &Value| {
        pod.at("/metadata/labels")
            .and_then(|l| l.get("pod-template-generation"))
            .and_then(Value::as_str)
            == Some(generation.as_str())
    };
    let unavailable_now = active
        .iter()
        .filter(|p| availability(p, min_ready, now).is_err())
        .count() as i64;
    let max_unavailable = scaled(
        ds.at("/spec/updateStrategy/rollingUpdate/maxUnavailable"),
        nodes.len() as i64,
        false,
        1,
    )
    .max(1);
    let rolling = ds.at("/spec/updateStrategy/type").and_then(Value::as_str) != Some("OnDelete");
    let mut budget = max_unavailable - unavailable_now;
    if !is_deleting(&ds) {
        for node in &nodes {
            let on_node: Vec<&&Arc<Value>> = active.iter().filter(|p| &target(p) == node).collect();
            match on_node.as_slice() {
                [] => {
                    let mut pod = pod_from_template(
                        &template,
                        &ds,
                        &format!("{name}-"),
                        true,
                        &[
                            ("pod-template-generation", generation.clone()),
                            ("controller-revision-hash", hash.clone()),
                        ],
                    );
                    set_at(
                        &mut pod,
                        &[
                            "spec",
                            "affinity",
                            "nodeAffinity",
                            "requiredDuringSchedulingIgnoredDuringExecution",
                        ],
                        json!({"nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}),
                    );
                    add_daemon_tolerations(&mut pod);
                    engine.create(&engine.types.pods, ns, pod)?;
                }
                [pod] => {
                    if rolling && !updated(pod) && budget > 0 {
                        engine.delete(&engine.types.pods, pod)?;
                        budget -= 1;
                    }
                }
                [_, extra @ ..] => {
                    for pod in extra {
                        engine.delete(&engine.types.pods, pod)?;
                    }
                }
            }
        }
        // Pods on nodes that are gone or no longer admitted.
        for pod in active.iter().filter(|p| !nodes.contains(&target(p))) {
            engine.delete(&engine.types.pods, pod)?;
        }
    }
    let pods = engine.pods_of(ns, uid(&ds));
    let placed: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| is_active(p) && nodes.contains(&target(p)))
        .collect();
    let mut status = json!({
        "desiredNumberScheduled": nodes.len(),
        "currentNumberScheduled": placed.len(),
        "numberMisscheduled": 0,
        "numberReady": placed.iter().filter(|p| is_ready(p)).count(),
        "observedGeneration": int_at(&ds, "/metadata/generation").unwrap_or(1),
        "updatedNumberScheduled": placed.iter().filter(|p| updated(p)).count(),
    });
    let available = placed
        .iter()
        .filter(|p| availability(p, min_ready, now).is_ok())
        .count();
    status["numberAvailable"] = json!(available);
    let unavailable = nodes.len().saturating_sub(available);
    if unavailable > 0 {
        status["numberUnavailable"] = json!(unavailable);
    }
    if let Some(map) = status.as_object_mut() {
        map.retain(|k, v| {
            v != &json!(0)
                || k == "desiredNumberScheduled"
                || k == "currentNumberScheduled"
                || k == "numberMisscheduled"
                || k == "numberReady"
        });
    }
    engine.update_status(rt, &ds, status, CONTROLLER_MANAGER)?;
    Ok(Next::Done)
}

/// The tolerations the DaemonSet controller gives its Pods (`AddOrUpdateDaemonPodTolerations`):
/// they run on nodes that are not ready, unreachable, under pressure or cordoned.
fn add_daemon_tolerations(pod: &mut Value) {
    let mut tolerations = pod
        .at("/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (key, effect) in [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        if !tolerations
            .iter()
            .any(|t| t["key"] == key && t["effect"] == effect)
        {
            tolerations.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    set_at(pod, &["spec", "tolerations"], json!(tolerations));
}
