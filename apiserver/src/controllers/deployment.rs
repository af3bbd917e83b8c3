//! The Deployment controller (`pkg/controller/deployment`): one ReplicaSet per pod template,
//! named `<deployment>-<pod-template-hash>`; `RollingUpdate` scales the new one up within
//! `maxSurge` and the old ones down within `maxUnavailable` (`Recreate`: old to zero first);
//! revisions in `deployment.kubernetes.io/revision`; old ReplicaSets beyond
//! `revisionHistoryLimit` deleted; `status` summed over the ReplicaSets with the `Available` and
//! `Progressing` conditions `kubectl rollout status` reads.
//!
//! A rollout that makes no progress for `progressDeadlineSeconds` turns `Progressing` to
//! `False` with `ProgressDeadlineExceeded` (`kubectl rollout status` then fails).
//!
//! Simplified: scaling in the middle of a rollout is not proportional across the ReplicaSets
//! (the rollout converges on the new one all the same).

use super::*;

const REVISION: &str = "deployment.kubernetes.io/revision";

/// The Deployment's annotations not copied to its ReplicaSets (`annotationsToSkip` of
/// kube-controller-manager's deployment util): kubectl's last applied configuration and the
/// controller's own.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "deprecated.deployment.rollback.to",
];

/// The Deployment's annotations its new ReplicaSet carries (`copyDeploymentAnnotationsToReplicaSet`).
fn copied_annotations(deployment: &Value) -> impl Iterator<Item = (&str, &str)> {
    deployment
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
}
const HASH_LABEL: &str = "pod-template-hash";

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let Some(deployment) = engine.get(&engine.types.deployments, ns, name) else {
        return Ok(Next::Done);
    };
    if is_deleting(&deployment) {
        return Ok(Next::Done);
    }
    adopt_and_release(engine, &engine.types.replica_sets, ns, &deployment)?;
    let owned = owned_replica_sets(engine, ns, &deployment);
    let template = deployment.at("/spec/template").cloned().unwrap_or_default();
    let (mut new_rs, mut old) = split_new(&owned, &template);
    let paused = deployment.at("/spec/paused") == Some(&Value::Bool(true));
    let mut created_new = false;
    if new_rs.is_none() && !paused {
        new_rs = Some(create_new(engine, ns, &deployment, &template, &owned)?);
        created_new = true;
    }
    let replicas = int_at(&deployment, "/spec/replicas").unwrap_or(1).max(0);
    let recreate = deployment.at("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate");
    // `MaxUnavailable` is 0 for Recreate: Available means every replica is.
    let (surge, unavailable) = if recreate {
        (0, 0)
    } else {
        surge_and_unavailable(&deployment, replicas)
    };
    if let (Some(new), false) = (&new_rs, paused) {
        if recreate {
            rollout_recreate(engine, &deployment, new, &old, replicas)?;
        } else {
            rollout_rolling(engine, new, &old, replicas, surge, unavailable)?;
        }
        keep_annotations(engine, &deployment, new, &old, replicas, surge)?;
    }
    // Re-read what the rollout changed, then report.
    let owned = owned_replica_sets(engine, ns, &deployment);
    (new_rs, old) = split_new(&owned, &template);
    cleanup_history(engine, &deployment, &old)?;
    let (status, recheck) = deployment_status(
        &deployment,
        new_rs.as_deref(),
        &owned,
        replicas,
        unavailable,
        created_new,
    );
    engine.update_status(
        &engine.types.deployments,
        &deployment,
        status,
        CONTROLLER_MANAGER,
    )?;
    if let Some(revision) = new_rs
        .as_ref()
        .and_then(|rs| rs.at("/metadata/annotations"))
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
    {
        let current = engine.get(&engine.types.deployments, ns, name);
        if let Some(current) = current
            && current
                .at("/metadata/annotations")
                .and_then(|a| a.get(REVISION))
                != Some(&json!(revision))
        {
            let mut updated = (*current).clone();
            set_at(
                &mut updated,
                &["metadata", "annotations", REVISION],
                json!(revision),
            );
            engine.update(&engine.types.deployments, updated)?;
        }
    }
    Ok(recheck.map_or(Next::Done, Next::After))
}

/// The ReplicaSets the Deployment controls, oldest first.
fn owned_replica_sets(engine: &Engine, ns: &str, deployment: &Value) -> Vec<Arc<Value>> {
    let mut owned: Vec<Arc<Value>> = engine
        .store
        .objects(&engine.types.replica_sets, Some(ns))
        .into_iter()
        .filter(|rs| controller_of(rs).is_some_and(|o| o.uid == uid(deployment)))
        .collect();
    owned.sort_by_key(|rs| {
        rs.at("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    });
    owned
}

/// The ReplicaSet whose template is the Deployment's (ignoring the hash label), and the others.
fn split_new(owned: &[Arc<Value>], template: &Value) -> (Option<Arc<Value>>, Vec<Arc<Value>>) {
    let mut new = None;
    let mut old = Vec::new();
    for rs in owned {
        let mut rs_template = rs.at("/spec/template").cloned().unwrap_or_default();
        if let Some(labels) = rs_template
            .get_mut("metadata")
            .and_then(|m| m.get_mut("labels"))
            .and_then(Value::as_object_mut)
        {
            labels.remove(HASH_LABEL);
            if labels.is_empty() {
                rs_template["metadata"]
                    .as_object_mut()
                    .map(|m| m.remove("labels"));
            }
        }
        if new.is_none() && &rs_template == template {
            new = Some(rs.clone());
        } else {
            old.push(rs.clone());
        }
    }
    (new, old)
}

fn revision_of(rs: &Value) -> i64 {
    rs.at("/metadata/annotations")
        .and_then(|a| a.get(REVISION))
        .and_then(Value::as_str)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Create the ReplicaSet of the current template, at zero replicas (the rollout scales it).
fn create_new(
    engine: &Engine,
    ns: &str,
    deployment: &Value,
    template: &Value,
    owned: &[Arc<Value>],
) -> Result<Arc<Value>, ApiError> {
    let collisions = int_at(deployment, "/status/collisionCount").unwrap_or(0);
    let hash = template_hash(template, collisions);
    let name = format!(
        "{}-{hash}",
        deployment
            .at("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    let mut template = template.clone();
    set_at(
        &mut template,
        &["metadata", "labels", HASH_LABEL],
        json!(hash),
    );
    let mut selector = deployment.at("/spec/selector").cloned().unwrap_or_default();
    set_at(&mut selector, &["matchLabels", HASH_LABEL], json!(hash));
    let mut labels = template["metadata"]["labels"].clone();
    labels[HASH_LABEL] = json!(hash);
    let revision = owned.iter().map(|rs| revision_of(rs)).max().unwrap_or(0) + 1;
    let mut annotations: serde_json::Map<String, Value> = copied_annotations(deployment)
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    annotations.insert(REVISION.to_owned(), json!(revision.to_string()));
    let rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {
            "replicas": 0,
            "minReadySeconds": int_at(deployment, "/spec/minReadySeconds").unwrap_or(0),
            "selector": selector,
            "template": template,
        },
    });
    match engine.create(&engine.types.replica_sets, ns, rs) {
        // The name is another object's (kube's hash collision): the next collision count
        // gives another hash.
        Err(err) if err.reason == "AlreadyExists" => {
            let mut status = status_of(deployment);
            status["collisionCount"] = json!(collisions + 1);
            engine.update_status(
                &engine.types.deployments,
                deployment,
                status,
                CONTROLLER_MANAGER,
            )?;
            Err(err)
        }
        other => other,
    }
}

/// `maxSurge` and `maxUnavailable` resolved against `replicas` (both zero means one unavailable).
fn surge_and_unavailable(deployment: &Value, replicas: i64) -> (i64, i64) {
    let rolling = deployment.at("/spec/strategy/rollingUpdate");
    let surge = scaled(rolling.and_then(|r| r.get("maxSurge")), replicas, true, 1);
    let unavailable = scaled(
        rolling.and_then(|r| r.get("maxUnavailable")),
        replicas,
        false,
        1,
    );
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable.min(replicas))
    }
}

fn spec_replicas(rs: &Value) -> i64 {
    int_at(rs, "/spec/replicas").unwrap_or(0)
}

fn available(rs: &Value) -> i64 {
    int_at(rs, "/status/availableReplicas").unwrap_or(0)
}

/// Scale `rs` and record it on its Deployment, as `scaleReplicaSetAndRecordEvent`.
fn scale(engine: &Engine, rs: &Value, replicas: i64) -> Result<(), ApiError> {
    let before = spec_replicas(rs);
    if before == replicas {
        return Ok(());
    }
    let mut scaled = rs.clone();
    set_at(&mut scaled, &["spec", "replicas"], json!(replicas));
    engine.update(&engine.types.replica_sets, scaled)?;
    let ns = namespace_and_name(rs).0;
    if let Some(owner) = controller_of(rs)
        && let Some(deployment) = engine.get(&engine.types.deployments, ns, owner.name)
    {
        let direction = if replicas > before { "up" } else { "down" };
        let message = format!(
            "Scaled {direction} replica set {} from {before} to {replicas}",
            namespace_and_name(rs).1
        );
        engine.event(
            &deployment,
            false,
            "ScalingReplicaSet",
            &message,
            "deployment-controller",
        );
    }
    Ok(())
}

/// One step of a rolling update (`rolloutRolling`): scale the new ReplicaSet up as far as
/// `maxSurge` allows, else the old ones down as far as `maxUnavailable` allows.
fn rollout_rolling(
    engine: &Engine,
    new: &Value,
    old: &[Arc<Value>],
    replicas: i64,
    surge: i64,
    unavailable: i64,
) -> Result<(), ApiError> {
    let all_pods: i64 = spec_replicas(new) + old.iter().map(|rs| spec_replicas(rs)).sum::<i64>();
    // reconcileNewReplicaSet
    let new_replicas = spec_replicas(new);
    if new_replicas > replicas {
        return scale(engine, new, replicas);
    }
    if new_replicas < replicas {
        let max_total = replicas + surge;
        if all_pods < max_total {
            let up = (max_total - all_pods).min(replicas - new_replicas);
            return scale(engine, new, new_replicas + up);
        }
    }
    // reconcileOldReplicaSets
    let old_pods: i64 = old.iter().map(|rs| spec_replicas(rs)).sum();
    if old_pods == 0 {
        return Ok(());
    }
    let min_available = replicas - unavailable;
    let new_unavailable = spec_replicas(new) - available(new);
    let mut budget = all_pods - min_available - new_unavailable;
    if budget <= 0 {
        return Ok(());
    }
    // Unhealthy old replicas go first, whatever availability says.
    let mut after: Vec<(Arc<Value>, i64)> = old
        .iter()
        .map(|rs| (rs.clone(), spec_replicas(rs)))
        .collect();
    for (rs, count) in after.iter_mut() {
        if budget <= 0 {
            break;
        }
        let unhealthy = (*count - available(rs)).max(0).min(budget);
        if unhealthy > 0 {
            *count -= unhealthy;
            budget -= unhealthy;
        }
    }
    // Then as many available ones as keep minAvailable.
    let available_now: i64 =
        available(new) + after.iter().map(|(rs, _)| available(rs)).sum::<i64>();
    let mut down = (available_now - min_available).max(0);
    for (_, count) in after.iter_mut() {
        if down <= 0 {
            break;
        }
        let step = (*count).min(down);
        *count -= step;
        down -= step;
    }
    for (rs, count) in after {
        scale(engine, &rs, count)?;
    }
    Ok(())
}

/// `Recreate`: every old Pod gone before the new ReplicaSet scales up.
fn rollout_recreate(
    engine: &Engine,
    deployment: &Value,
    new: &Value,
    old: &[Arc<Value>],
    replicas: i64,
) -> Result<(), ApiError> {
    for rs in old {
        scale(engine, rs, 0)?;
    }
    let ns = namespace_and_name(deployment).0;
    let old_pods_left = old
        .iter()
        .any(|rs| engine.pods_of(ns, uid(rs)).iter().any(|p| !is_terminal(p)));
    if !old_pods_left {
        scale(engine, new, replicas)?;
    }
    Ok(())
}

/// The revision, `desired-replicas` and `max-replicas` on the new ReplicaSet, as
/// `SetNewReplicaSetAnnotations` and `SetReplicasAnnotations` keep them.
fn keep_annotations(
    engine: &Engine,
    deployment: &Value,
    new: &Value,
    old: &[Arc<Value>],
    replicas: i64,
    surge: i64,
) -> Result<(), ApiError> {
    let Some(current) = engine.get(
        &engine.types.replica_sets,
        namespace_and_name(deployment).0,
        namespace_and_name(new).1,
    ) else {
        return Ok(());
    };
    let annotations = current.at("/metadata/annotations");
    // A template rolled back to becomes the newest revision again.
    let newest_old = old.iter().map(|rs| revision_of(rs)).max().unwrap_or(0);
    let revision = revision_of(&current).max(newest_old + 1).to_string();
    let mut want = vec![
        (REVISION, revision),
        (
            "deployment.kubernetes.io/desired-replicas",
            replicas.to_string(),
        ),
        (
            "deployment.kubernetes.io/max-replicas",
            (replicas + surge).to_string(),
        ),
    ];
    want.extend(copied_annotations(deployment).map(|(k, v)| (k, v.to_owned())));
    if want
        .iter()
        .all(|(k, v)| annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some(v))
    {
        return Ok(());
    }
    let mut updated = (*current).clone();
    for (k, v) in want {
        set_at(&mut updated, &["metadata", "annotations", k], json!(v));
    }
    engine.update(&engine.types.replica_sets, updated)?;
    Ok(())
}

/// Delete old ReplicaSets with no replicas beyond `revisionHistoryLimit`, oldest first.
fn cleanup_history(
    engine: &Engine,
    deployment: &Value,
    old: &[Arc<Value>],
) -> Result<(), ApiError> {
    let limit = int_at(deployment, "/spec/revisionHistoryLimit")
        .unwrap_or(10)
        .max(0) as usize;
    let idle: Vec<&Arc<Value>> = old
        .iter()
        .filter(|rs| spec_replicas(rs) == 0 && int_at(rs, "/status/replicas").unwrap_or(0) == 0)
        .collect();
    for rs in idle.iter().take(idle.len().saturating_sub(limit)) {
        engine.delete(&engine.types.replica_sets, rs)?;
    }
    Ok(())
}

/// The Deployment's status over its ReplicaSets (`calculateStatus`, `syncRolloutStatus`), and
/// when to look again for its progress deadline.
fn deployment_status(
    deployment: &Value,
    new: Option<&Value>,
    owned: &[Arc<Value>],
    replicas: i64,
    max_unavailable: i64,
    created_new: bool,
) -> (Value, Option<Duration>) {
    let sum = |p: &str| {
        owned
            .iter()
            .map(|rs| int_at(rs, p).unwrap_or(0))
            .sum::<i64>()
    };
    let actual = sum("/status/replicas");
    let ready = sum("/status/readyReplicas");
    let available = sum("/status/availableReplicas");
    let updated = new
        .and_then(|rs| int_at(rs, "/status/replicas"))
        .unwrap_or(0);
    let generation = int_at(deployment, "/metadata/generation").unwrap_or(1);
    let mut conditions: Vec<Value> = deployment
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if available >= replicas - max_unavailable {
        set_condition(
            &mut conditions,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            true,
        );
    } else {
        set_condition(
            &mut conditions,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            true,
        );
    }
    let mut recheck = None;
    if let Some(new) = new {
        let rs_name = namespace_and_name(new).1;
        let complete = updated == replicas && actual == replicas && available == replicas;
        // `DeploymentProgressing`: more updated, ready or available replicas, or fewer old.
        let before = |p: &str| int_at(deployment, p).unwrap_or(0);
        let progressed = updated > before("/status/updatedReplicas")
            || actual - updated < before("/status/replicas") - before("/status/updatedReplicas")
            || ready > before("/status/readyReplicas")
            || available > before("/status/availableReplicas");
        let deadline = int_at(deployment, "/spec/progressDeadlineSeconds");
        if complete {
            let message = format!("ReplicaSet \"{rs_name}\" has successfully progressed.");
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &message,
                true,
            );
        } else if created_new {
            let message = format!("Created new replica set \"{rs_name}\"");
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                &message,
                true,
            );
        } else if progressed || condition_in(&conditions, "Progressing").is_none() {
            let message = format!("ReplicaSet \"{rs_name}\" is progressing.");
            set_condition(
                &mut conditions,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &message,
                true,
            );
            // Progress restarts the deadline even when the condition reads the same.
            if let Some(c) = conditions.iter_mut().find(|c| c["type"] == "Progressing") {
                c["lastUpdateTime"] = json!(now());
            }
        }
        // `DeploymentTimedOut`: no progress for progressDeadlineSeconds.
        if !complete
            && let Some(deadline) = deadline
            && let Some(c) = condition_in(&conditions, "Progressing")
            && c["reason"] != "ProgressDeadlineExceeded"
        {
            let since = c["lastUpdateTime"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let elapsed = since.map_or(0, |s| wall_now().duration_since(s).as_secs());
            if elapsed >= deadline {
                let message = format!("ReplicaSet \"{rs_name}\" has timed out progressing.");
                set_condition(
                    &mut conditions,
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    &message,
                    true,
                );
            } else {
                recheck = Some(Duration::from_secs(
                    deadline.saturating_sub(elapsed).max(1) as u64
                ));
            }
        }
    }
    // Available first, Progressing second, as kube lists them.
    conditions.sort_by_key(|c| c["type"] != "Available");
    let mut status = json!({"observedGeneration": generation});
    for (field, value) in [
        ("replicas", actual),
        ("updatedReplicas", updated),
        ("readyReplicas", ready),
        ("availableReplicas", available),
        ("unavailableReplicas", (replicas - available).max(0)),
        (
            "collisionCount",
            int_at(deployment, "/status/collisionCount").unwrap_or(0),
        ),
    ] {
        if value > 0 {
            status[field] = json!(value);
        }
    }
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    (status, recheck)
}
