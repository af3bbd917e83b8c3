//! The StatefulSet controller (`pkg/controller/statefulset`): Pods `name-0 … name-(n-1)` with
//! stable names, `hostname` and `subdomain`; with `OrderedReady` (the default) each is created
//! only once those before it run and are ready, and scale-down removes the highest ordinal first,
//! one at a time; `Parallel` creates and deletes at once. A `RollingUpdate` replaces Pods of an
//! older revision from the highest ordinal down, one ready Pod at a time. `status` counts
//! replicas, ready, available, current and updated Pods with the revisions.
//!
//! Simplified: no ControllerRevisions (revisions are `<name>-<template hash>`), no
//! `volumeClaimTemplates` PVCs, no `partition`.

use super::*;

const REVISION_LABEL: &str = "controller-revision-hash";

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let rt = &engine.types.stateful_sets;
    let Some(sts) = engine.get(rt, ns, name) else {
        return Ok(Next::Done);
    };
    let replicas = int_at(&sts, "/spec/replicas").unwrap_or(1).max(0);
    let template = sts.at("/spec/template").cloned().unwrap_or_default();
    let revision = format!("{name}-{}", template_hash(&template, 0));
    let parallel = sts.at("/spec/podManagementPolicy").and_then(Value::as_str) == Some("Parallel");
    let rolling = sts.at("/spec/updateStrategy/type").and_then(Value::as_str) != Some("OnDelete");
    let service = sts
        .at("/spec/serviceName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !is_deleting(&sts) {
        adopt_and_release(engine, &engine.types.pods, ns, &sts)?;
    }
    let pods = engine.pods_of(ns, uid(&sts));
    let ordinal_of = |pod: &Value| -> Option<i64> {
        namespace_and_name(pod)
            .1
            .strip_prefix(name)?
            .strip_prefix('-')?
            .parse()
            .ok()
    };
    let by_ordinal = |i: i64| pods.iter().find(|p| ordinal_of(p) == Some(i));
    let healthy = |p: &Value| phase(p) == "Running" && is_ready(p) && !is_deleting(p);
    let revision_of = |p: &Value| {
        p.at("/metadata/labels")
            .and_then(|l| l.get(REVISION_LABEL))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    if !is_deleting(&sts) {
        // Failed Pods are replaced (deleted here, recreated on the next pass).
        for pod in pods.iter().filter(|p| is_terminal(p)) {
            engine.delete(&engine.types.pods, pod)?;
        }
        let mut blocked = false;
        for i in 0..replicas {
            match by_ordinal(i) {
                Some(pod) if is_terminal(pod) => blocked = true,
                Some(pod) => {
                    if !healthy(pod) && !parallel {
                        blocked = true;
                        break;
                    }
                }
                None => {
                    let pod_name = format!("{name}-{i}");
                    let mut pod = pod_from_template(
                        &template,
                        &sts,
                        &pod_name,
                        false,
                        &[
                            (REVISION_LABEL, revision.clone()),
                            ("statefulset.kubernetes.io/pod-name", pod_name.clone()),
                            ("apps.kubernetes.io/pod-index", i.to_string()),
                        ],
                    );
                    set_at(&mut pod, &["spec", "hostname"], json!(pod_name));
                    if !service.is_empty() {
                        set_at(&mut pod, &["spec", "subdomain"], json!(service));
                    }
                    engine.create(&engine.types.pods, ns, pod)?;
                    if !parallel {
                        blocked = true;
                        break;
                    }
                }
            }
        }
        // Scale down from the highest ordinal, one at a time unless Parallel.
        let mut extra: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| ordinal_of(p).is_none_or(|i| i >= replicas) && !is_deleting(p))
            .collect();
        extra.sort_by_key(|p| Reverse(ordinal_of(p)));
        let all_healthy = pods
            .iter()
            .filter(|p| ordinal_of(p).is_some_and(|i| i < replicas))
            .all(|p| healthy(p));
        // OrderedReady: one Pod at a time, the previous one gone first.
        let terminating = pods.iter().any(|p| is_deleting(p));
        for pod in extra.iter().take(if parallel { usize::MAX } else { 1 }) {
            if parallel || (all_healthy && !terminating) {
                engine.delete(&engine.types.pods, pod)?;
            }
        }
        // Rolling update, highest ordinal first, once everything is ready.
        if rolling && !blocked && extra.is_empty() && all_healthy && !terminating {
            let stale = (0..replicas)
                .rev()
                .filter_map(by_ordinal)
                .find(|p| revision_of(p).as_deref() != Some(revision.as_str()));
            if let Some(pod) = stale {
                engine.delete(&engine.types.pods, pod)?;
            }
        }
    }
    let pods: Vec<Arc<Value>> = engine
        .pods_of(ns, uid(&sts))
        .into_iter()
        .filter(|p| is_active(p))
        .collect();
    let updated = pods
        .iter()
        .filter(|p| revision_of(p).as_deref() == Some(revision.as_str()))
        .count();
    let ready = pods.iter().filter(|p| is_ready(p)).count();
    let now = wall_now();
    let min_ready = int_at(&sts, "/spec/minReadySeconds").unwrap_or(0);
    let available = pods
        .iter()
        .filter(|p| availability(p, min_ready, now).is_ok())
        .count();
    let current_revision = if updated == pods.len() {
        revision.clone()
    } else {
        sts.at("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or(&revision)
            .to_owned()
    };
    let current = pods
        .iter()
        .filter(|p| revision_of(p).as_deref() == Some(current_revision.as_str()))
        .count();
    let mut status = json!({
        "replicas": pods.len(),
        "observedGeneration": int_at(&sts, "/metadata/generation").unwrap_or(1),
        "currentRevision": current_revision,
        "updateRevision": revision,
        "collisionCount": 0,
        "availableReplicas": available,
    });
    for (field, value) in [
        ("readyReplicas", ready),
        ("currentReplicas", current),
        ("updatedReplicas", updated),
    ] {
        if value > 0 {
            status[field] = json!(value);
        }
    }
    engine.update_status(rt, &sts, status, CONTROLLER_MANAGER)?;
    Ok(Next::Done)
}
