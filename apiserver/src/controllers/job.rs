//! The Job controller (`pkg/controller/job`): Pods from the template up to `parallelism` while
//! fewer than `completions` have succeeded; `Complete` (after `SuccessCriteriaMet`) once they
//! have, `Failed` with `BackoffLimitExceeded` once more than `backoffLimit` Pods failed (its
//! active Pods deleted); `status` counts active, ready, succeeded and failed Pods.
//!
//! Simplified: non-indexed completion only; no backoff delay between failed Pods; no
//! `activeDeadlineSeconds`, pod failure policy or tracking finalizers.

use super::*;

pub(super) fn sync(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let rt = &engine.types.jobs;
    let Some(job) = engine.get(rt, ns, name) else {
        return Ok(Next::Done);
    };
    let finished = ["Complete", "Failed"]
        .iter()
        .any(|c| condition(&job, c).is_some_and(|c| c["status"] == "True"));
    if !finished && !is_deleting(&job) {
        adopt_and_release(engine, &engine.types.pods, ns, &job)?;
    }
    let pods = engine.pods_of(ns, uid(&job));
    let count = |p: &str| pods.iter().filter(|pod| phase(pod) == p).count() as i64;
    let (succeeded, failed) = (count("Succeeded"), count("Failed"));
    let active: Vec<&Arc<Value>> = pods.iter().filter(|p| is_active(p)).collect();
    let parallelism = int_at(&job, "/spec/parallelism").unwrap_or(1).max(0);
    let completions = int_at(&job, "/spec/completions");
    let backoff_limit = int_at(&job, "/spec/backoffLimit").unwrap_or(6);
    let suspended = job.at("/spec/suspend") == Some(&Value::Bool(true));
    let mut status = status_of(&job);
    let mut conditions: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let mut active_count = active.len() as i64;
    if !finished {
        if status.get("startTime").is_none() && !suspended {
            status["startTime"] = json!(now());
        }
        let done = match completions {
            Some(c) => succeeded >= c,
            // Without completions, the first success ends the Job once nothing else runs.
            None => succeeded > 0 && active.is_empty(),
        };
        if failed > backoff_limit {
            for pod in &active {
                engine.delete(&engine.types.pods, pod)?;
            }
            active_count = 0;
            for kind in ["FailureTarget", "Failed"] {
                set_condition(
                    &mut conditions,
                    kind,
                    "True",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                    false,
                );
            }
            engine.event(
                &job,
                true,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                "job-controller",
            );
        } else if done {
            for kind in ["SuccessCriteriaMet", "Complete"] {
                set_condition(
                    &mut conditions,
                    kind,
                    "True",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                    false,
                );
            }
            status["completionTime"] = json!(now());
            engine.event(&job, false, "Completed", "Job completed", "job-controller");
        } else if !suspended && !is_deleting(&job) {
            // Without completions, once one Pod succeeded no more start, and those running
            // finish on their own (kube's `wantActive = active`).
            let wanted = match completions {
                Some(c) => (c - succeeded).min(parallelism),
                None if succeeded > 0 => active_count,
                None => parallelism,
            };
            let template = job.at("/spec/template").cloned().unwrap_or_default();
            let prefix = format!("{name}-");
            let missing = (wanted - active_count).max(0);
            for _ in 0..missing {
                let pod = pod_from_template(&template, &job, &prefix, true, &[]);
                let created = engine.create(&engine.types.pods, ns, pod)?;
                let message = format!("Created pod: {}", namespace_and_name(&created).1);
                engine.event(&job, false, "SuccessfulCreate", &message, "job-controller");
                active_count += 1;
            }
            for pod in active.iter().skip(wanted.max(0) as usize) {
                engine.delete(&engine.types.pods, pod)?;
                active_count -= 1;
            }
        }
    }
    let ready = active.iter().filter(|p| is_ready(p)).count();
    for (field, value) in [
        ("active", active_count),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        match status.as_object_mut() {
            Some(map) if value > 0 => {
                map.insert(field.into(), json!(value));
            }
            Some(map) => {
                map.remove(field);
            }
            None => {}
        }
    }
    status["ready"] = json!(ready);
    status["terminating"] = json!(0);
    status["uncountedTerminatedPods"] = json!({});
    if conditions.is_empty() {
        if let Some(map) = status.as_object_mut() {
            map.remove("conditions");
        }
    } else {
        status["conditions"] = json!(conditions);
    }
    engine.update_status(rt, &job, status, CONTROLLER_MANAGER)?;
    Ok(Next::Done)
}
