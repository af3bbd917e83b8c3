//! The ReplicaSet controller (`pkg/controller/replicaset`): Pods to `spec.replicas`, created from
//! the template with `generateName` and a controller owner reference, deleted in kube's order of
//! preference (unscheduled before scheduled, pending before running, not ready before ready,
//! newest first); `status` counts replicas, fully labelled, ready and available Pods.
//!
//! Like kube's `PodControllerRefManager`, it adopts orphaned active Pods its selector matches
//! and releases Pods it controls whose labels no longer match ([`adopt_and_release`]).

use super::*;

/// How many Pods one sync creates or deletes at most (kube's `BurstReplicas`).
const BURST: usize = 500;

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let rt = &engine.types.replica_sets;
    let Some(rs) = engine.get(rt, ns, name) else {
        return Ok(Next::Done);
    };
    if !is_deleting(&rs) {
        adopt_and_release(engine, &engine.types.pods, ns, &rs)?;
    }
    let pods: Vec<Arc<Value>> = engine
        .pods_of(ns, uid(&rs))
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let wanted = int_at(&rs, "/spec/replicas").unwrap_or(1).max(0) as usize;
    if !is_deleting(&rs) {
        if pods.len() < wanted {
            let template = rs.at("/spec/template").cloned().unwrap_or_default();
            let prefix = format!("{name}-");
            for _ in 0..(wanted - pods.len()).min(BURST) {
                let pod = pod_from_template(&template, &rs, &prefix, true, &[]);
                let created = engine.create(&engine.types.pods, ns, pod)?;
                let message = format!("Created pod: {}", namespace_and_name(&created).1);
                engine.event(
                    &rs,
                    false,
                    "SuccessfulCreate",
                    &message,
                    "replicaset-controller",
                );
            }
        } else if pods.len() > wanted {
            let mut doomed = pods.clone();
            doomed.sort_by_key(|p| deletion_rank(p));
            for pod in doomed.iter().take((pods.len() - wanted).min(BURST)) {
                engine.delete(&engine.types.pods, pod)?;
                let message = format!("Deleted pod: {}", namespace_and_name(pod).1);
                engine.event(
                    &rs,
                    false,
                    "SuccessfulDelete",
                    &message,
                    "replicaset-controller",
                );
            }
        }
    }
    // Status from what exists after the writes above.
    let pods: Vec<Arc<Value>> = engine
        .pods_of(ns, uid(&rs))
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let min_ready = int_at(&rs, "/spec/minReadySeconds").unwrap_or(0);
    let (status, recheck) = replica_status(&rs, &pods, min_ready);
    engine.update_status(rt, &rs, status, CONTROLLER_MANAGER)?;
    Ok(recheck.map_or(Next::Done, Next::After))
}

/// The status of a ReplicaSet over its active Pods, and when to look again for a Pod that will
/// become available once `minReadySeconds` pass.
fn replica_status(rs: &Value, pods: &[Arc<Value>], min_ready: i64) -> (Value, Option<Duration>) {
    let now = wall_now();
    let template_labels = rs.at("/spec/template/metadata/labels");
    let fully_labelled = pods
        .iter()
        .filter(|p| {
            template_labels
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .all(|(k, v)| p.at("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
        })
        .count();
    let ready = pods.iter().filter(|p| is_ready(p)).count();
    let mut available = 0;
    let mut recheck: Option<Duration> = None;
    for pod in pods {
        match availability(pod, min_ready, now) {
            Ok(()) => available += 1,
            Err(Some(wait)) => recheck = Some(recheck.map_or(wait, |r| r.min(wait))),
            Err(None) => {}
        }
    }
    let mut status = json!({
        "replicas": pods.len(),
        "fullyLabeledReplicas": fully_labelled,
        "observedGeneration": int_at(rs, "/metadata/generation").unwrap_or(1),
    });
    // Zero counts are omitted, as the Go structs' `omitempty` does.
    if ready > 0 {
        status["readyReplicas"] = json!(ready);
    }
    if available > 0 {
        status["availableReplicas"] = json!(available);
    }
    if let Some(conditions) = rs.at("/status/conditions") {
        status["conditions"] = conditions.clone();
    }
    (status, recheck)
}

/// The order Pods are deleted in when scaling down (`controller.ActivePods` sorted): unassigned,
/// then pending, unknown, running; not ready before ready; more restarts first; newer first.
fn deletion_rank(pod: &Value) -> (u8, u8, u8, Reverse<i64>, Reverse<String>) {
    let assigned = u8::from(!node_name(pod).is_empty());
    let phase_rank = match phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    };
    let ready = u8::from(is_ready(pod));
    let restarts: i64 = pod
        .at("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    let created = pod
        .at("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    (
        assigned,
        phase_rank,
        ready,
        Reverse(restarts),
        Reverse(created),
    )
}
