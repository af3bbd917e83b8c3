//! Status and Events of the guest objects (`Reconciler`, `ClusterReconciler`): whether each
//! one's guest runs, which module digest and version, on which replica, its recent counts and
//! last error, as conditions `kubectl wait` and `kubectl describe` read.
//!
//! # Who writes
//!
//! A guest running here is written about only by the replica that holds it (its Lease under
//! `--shard`, the leader under `--leader-elect`), through the guest's write fence; a guest that
//! runs nowhere (refused everywhere alike) by every active replica, with content that depends
//! only on the object. Nothing is sent when the status would not change, and each condition
//! keeps its `lastTransitionTime` while its `status` stays, as apimachinery's
//! `SetStatusCondition` does — so replicas never fight, and a status write (which does not
//! change the object's generation) never reloads the guest. Counts alone are written at most
//! every [`COUNTS_EVERY`].
//!
//! # Events
//!
//! Derived from the transitions of the status the writer replaces, so each is recorded once:
//! Normal `Started`, `Swapped` (a new version), `Moved` (another replica holds it); Warning with
//! the refusal's reason (`Invalid`, `LoadFailed`, `Duplicate`, …) when a version is refused or
//! the guest stops being ready, and `KeysQuarantined`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::cluster::client::ApiClient;
use crate::guests::from_cluster::ObjectRef;
use crate::guests::{Manager, Skipped};
use krec_core::{EventRecord, EventType, ObjectReference, PatchType};

/// How often the writer looks again when nothing woke it (a tenure granted, counts grown).
pub const TICK: Duration = Duration::from_secs(2);

/// Counts alone (reconciles, errors, traps) are written at most this often.
pub const COUNTS_EVERY: Duration = Duration::from_secs(30);

/// The field manager of the host's status writes.
pub const FIELD_MANAGER: &str = "krec";

/// What this replica knows of one object's guest.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The generation the running set was last brought in line with.
    pub observed_generation: Option<i64>,
    /// The object's version of the guest, if it runs here.
    pub running: Option<Running>,
    /// Why the object's (new) version was refused at the last reload, if it was.
    pub refused: Option<Skipped>,
    /// The guest declares webhooks (or a conversion) that the host registers only while the
    /// guest runs.
    pub unregistered_webhooks: bool,
}

/// What a guest that does not run says of its webhooks, when the host registers them: they
/// are not registered, so the API server admits what they match unreviewed — rather than
/// refusing every matching request with `failurePolicy: Fail`.
pub const WEBHOOKS_NOT_REGISTERED: &str = "its webhooks are not registered until it runs: the requests they match are admitted unreviewed";

/// The object's version of a guest, running.
#[derive(Clone, Debug, PartialEq)]
pub struct Running {
    /// The replica whose workers run it.
    pub replica: String,
    /// The module as the spec names it, resolved.
    pub module: String,
    /// The module's digest: its registry artifact's when pulled (what a rollback names), else
    /// its file's.
    pub digest: String,
    /// The digest of the component file itself (`status.moduleDigest`), when it differs.
    pub module_digest: Option<String>,
    /// 1, then counting swaps.
    pub version: u64,
    /// Reconciles ended so far on this replica.
    pub reconciles: u64,
    /// Of those, errors.
    pub errors: u64,
    /// Of those, traps.
    pub traps: u64,
    /// Keys in quarantine (trapping in a row).
    pub quarantined: usize,
    /// The last error or trap, and when.
    pub last_error: Option<(String, SystemTime)>,
    /// The rollout of `spec.rollout`, running or decided ([`crate::rollout::Rollout::report`]).
    pub rollout: Option<Value>,
    /// What the guest has used on this replica since its module was loaded.
    pub usage: crate::guest::Totals,
}

/// `status.usage`: what `usage` says, in whole units (no floats in an API object).
fn usage_status(usage: &crate::guest::Totals) -> Value {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let calls: serde_json::Map<String, Value> = usage
        .calls
        .iter()
        .map(|(kind, n)| ((*kind).to_owned(), json!(n)))
        .collect();
    json!({
        "cpuMilliseconds": {"wasm": millis(usage.wasm_cpu), "host": millis(usage.host_cpu)},
        "hostCalls": calls,
        "bytesToGuest": usage.bytes_to_guest,
        "bytesFromGuest": usage.bytes_from_guest,
        "memoryBytes": usage.memory_bytes,
        "instancesStarted": usage.instances,
    })
}

fn rfc3339(time: SystemTime) -> String {
    jiff::Timestamp::try_from(time)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// One condition: `(type, status, reason, message)`.
type Condition = (&'static str, &'static str, String, String);

/// The conditions `observed` calls for: `Ready`, `ModuleResolved`, `Degraded`, and
/// `RolloutProgressing` while or once a candidate is tried.
fn conditions(observed: &Observed) -> Vec<Condition> {
    let refused = observed.refused.as_ref();
    match &observed.running {
        Some(running) => {
            let ready = (
                "Ready",
                "True",
                "Running".to_owned(),
                format!(
                    "version {} ({}) running on {}",
                    running.version, running.digest, running.replica
                ),
            );
            let resolved = (
                "ModuleResolved",
                "True",
                "Loaded".to_owned(),
                format!("{} ({})", running.module, running.digest),
            );
            let degraded = match refused {
                Some(refused) => (
                    "Degraded",
                    "True",
                    // The registry's failure named as such: the module was never looked at.
                    if refused.code == "PullFailed" {
                        "PullFailed"
                    } else {
                        "NewVersionRefused"
                    }
                    .to_owned(),
                    format!(
                        "{}; version {} keeps running",
                        refused.reason, running.version
                    ),
                ),
                None if running.quarantined > 0 => (
                    "Degraded",
                    "True",
                    "KeysQuarantined".to_owned(),
                    format!(
                        "{} key(s) trapped {} times in a row or more: retried at most every {:?}",
                        running.quarantined,
                        crate::controller::QUARANTINE_AFTER,
                        crate::controller::QUARANTINE_DELAY
                    ),
                ),
                None => ("Degraded", "False", "AsExpected".to_owned(), String::new()),
            };
            let mut conditions = vec![ready, resolved, degraded];
            if let Some(rollout) = &running.rollout {
                conditions.push(rollout_condition(rollout));
            }
            conditions
        }
        None => match refused {
            Some(refused) => {
                let code = refused.code.to_owned();
                let reason = if observed.unregistered_webhooks {
                    format!("{}; {WEBHOOKS_NOT_REGISTERED}", refused.reason)
                } else {
                    refused.reason.clone()
                };
                let resolved = if matches!(refused.code, "LoadFailed" | "PullFailed") {
                    (
                        "ModuleResolved",
                        "False",
                        code.clone(),
                        refused.reason.clone(),
                    )
                } else {
                    (
                        "ModuleResolved",
                        "Unknown",
                        "NotLoaded".to_owned(),
                        String::new(),
                    )
                };
                vec![
                    ("Ready", "False", code.clone(), reason.clone()),
                    resolved,
                    ("Degraded", "True", code, reason),
                ]
            }
            None => {
                let waiting = "waiting for the host to load it".to_owned();
                vec![
                    ("Ready", "False", "Loading".to_owned(), waiting),
                    (
                        "ModuleResolved",
                        "Unknown",
                        "Loading".to_owned(),
                        String::new(),
                    ),
                    ("Degraded", "False", "Loading".to_owned(), String::new()),
                ]
            }
        },
    }
}

/// `RolloutProgressing`: `True` while the candidate is tried (reason `Shadowing` or `Canary`),
/// `False` once decided (`Promoted`, `RolledBack`), as a Deployment's `Progressing`.
fn rollout_condition(report: &Value) -> Condition {
    let phase = report["phase"].as_str().unwrap_or_default().to_owned();
    let message = match report["reason"].as_str().filter(|r| !r.is_empty()) {
        Some(reason) => format!(
            "candidate {}: {reason}",
            report["digest"].as_str().unwrap_or_default()
        ),
        None => format!(
            "candidate {} in {} mode",
            report["digest"].as_str().unwrap_or_default(),
            report["mode"].as_str().unwrap_or_default(),
        ),
    };
    let status = if matches!(phase.as_str(), "Shadowing" | "Canary") {
        "True"
    } else {
        "False"
    };
    ("RolloutProgressing", status, phase, message)
}

/// `status.rollout`: the candidate, its phase and counts, the last divergence kept.
fn rollout_status(report: &Value) -> Value {
    let mut status = json!({
        "candidate": report["candidate"],
        "digest": report["digest"],
        "mode": report["mode"],
        "phase": report["phase"],
        "counts": {
            "live": report["live"],
            "candidate": report["candidateCounts"],
        },
    });
    if let Some(reason) = report["reason"].as_str().filter(|r| !r.is_empty()) {
        status["reason"] = json!(reason);
    }
    if let Some(last) = report["divergences"].as_array().and_then(|d| d.last()) {
        status["lastDivergence"] = json!({
            "key": last["key"],
            "diff": last["diff"],
        });
    }
    status
}

/// The status `observed` calls for, given the one the object has (`old`): conditions keep
/// their `lastTransitionTime` unless their status changes.
pub fn desired(observed: &Observed, old: &Value, now: SystemTime) -> Value {
    let old_conditions = old.get("conditions").and_then(Value::as_array);
    let conditions: Vec<Value> = conditions(observed)
        .into_iter()
        .map(|(kind, status, reason, message)| {
            let previous = old_conditions
                .and_then(|c| c.iter().find(|c| c["type"] == kind))
                .filter(|c| c["status"] == status)
                .and_then(|c| c.get("lastTransitionTime").cloned());
            let mut condition = json!({
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": previous.unwrap_or_else(|| json!(rfc3339(now))),
            });
            if let Some(generation) = observed.observed_generation {
                condition["observedGeneration"] = json!(generation);
            }
            condition
        })
        .collect();
    let mut status = json!({ "conditions": conditions });
    if let Some(generation) = observed.observed_generation {
        status["observedGeneration"] = json!(generation);
    }
    if let Some(running) = &observed.running {
        status["replica"] = json!(running.replica);
        status["module"] = json!(running.module);
        status["digest"] = json!(running.digest);
        if let Some(file) = &running.module_digest {
            status["moduleDigest"] = json!(file);
        }
        status["version"] = json!(running.version);
        status["reconciles"] = json!({
            "total": running.reconciles,
            "errors": running.errors,
            "traps": running.traps,
            "quarantinedKeys": running.quarantined,
        });
        status["usage"] = usage_status(&running.usage);
        if let Some(rollout) = &running.rollout {
            status["rollout"] = rollout_status(rollout);
        }
    }
    let last_error = match (&observed.refused, &observed.running) {
        (Some(refused), _) => Some(json!({"message": refused.reason, "time": rfc3339(now)})),
        (
            None,
            Some(Running {
                last_error: Some((message, at)),
                ..
            }),
        ) => Some(json!({"message": message, "time": rfc3339(*at)})),
        _ => None,
    };
    if let Some(mut last_error) = last_error {
        // A refusal seen again keeps its first time.
        if old["lastError"]["message"] == last_error["message"] {
            last_error["time"] = old["lastError"]["time"].clone();
        }
        status["lastError"] = last_error;
    }
    status
}

/// Whether `new` differs from `old` in more than its counts.
fn differs_beyond_counts(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("reconciles");
            map.remove("usage");
            map.remove("lastError");
            if let Some(rollout) = map.get_mut("rollout").and_then(Value::as_object_mut) {
                rollout.remove("counts");
            }
        }
        v
    };
    strip(old) != strip(new) || old.get("lastError").is_some() != new.get("lastError").is_some()
}

fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The Events the change from `old` to `new` status calls for: `(type, reason, message)`.
pub fn transitions(old: &Value, new: &Value) -> Vec<(EventType, String, String)> {
    let mut events = Vec::new();
    let status_of = |s: &Value, kind: &str| {
        condition(s, kind).map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (ready_old, ready_new) = (status_of(old, "Ready"), status_of(new, "Ready"));
    let new_ready = condition(new, "Ready");
    let message = |c: Option<&Value>| c.map(|c| text(&c["message"])).unwrap_or_default();
    if ready_new != ready_old {
        match new_ready {
            Some(c) if c["status"] == "True" => {
                events.push((EventType::Normal, "Started".into(), message(Some(c))));
            }
            Some(c) if c["status"] == "False" && c["reason"] != "Loading" => {
                events.push((EventType::Warning, text(&c["reason"]), message(Some(c))));
            }
            _ => {}
        }
    } else if new["version"] != old["version"] && old.get("version").is_some() {
        events.push((EventType::Normal, "Swapped".into(), message(new_ready)));
    } else if new["replica"] != old["replica"] && old.get("replica").is_some() {
        events.push((EventType::Normal, "Moved".into(), message(new_ready)));
    }
    if status_of(new, "RolloutProgressing") != status_of(old, "RolloutProgressing")
        && let Some(c) = condition(new, "RolloutProgressing")
    {
        let (event_type, reason) = match c["reason"].as_str().unwrap_or_default() {
            "Promoted" => (EventType::Normal, "CandidatePromoted"),
            "RolledBack" => (EventType::Warning, "CandidateRolledBack"),
            _ => (EventType::Normal, "CandidateTried"),
        };
        events.push((event_type, reason.into(), message(Some(c))));
    }
    if new["rollout"]["lastDivergence"] != old["rollout"]["lastDivergence"]
        && let Some(last) = new["rollout"]["lastDivergence"].as_object()
    {
        let diff: Vec<&str> = last
            .get("diff")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        events.push((
            EventType::Warning,
            "CandidateDiverged".into(),
            format!(
                "{}: {}",
                last.get("key").and_then(Value::as_str).unwrap_or_default(),
                diff.join("; ")
            ),
        ));
    }
    let degraded = condition(new, "Degraded");
    if status_of(new, "Degraded") != status_of(old, "Degraded")
        && let Some(c) = degraded
        && c["status"] == "True"
        && ready_new.as_ref().is_some_and(|(s, _)| s == "True")
    {
        events.push((EventType::Warning, text(&c["reason"]), message(Some(c))));
    }
    events
}

/// What this replica knows of `reference`'s guest, and whether it should write about it.
fn observe(
    manager: &Manager,
    reference: &ObjectRef,
    identity: &str,
    registers_webhooks: bool,
) -> Option<Observed> {
    let guest = reference.guest();
    let path = reference.path().display().to_string();
    let skipped = manager.skipped();
    let refused = skipped
        .iter()
        .find(|s| s.guest == path)
        .or_else(|| skipped.iter().find(|s| s.guest == guest))
        .cloned();
    let controller = manager
        .controller(&guest)
        .filter(|c| c.module().manifest().path == reference.path());
    let running = match controller {
        Some(controller) => {
            if !manager.holds(&guest) {
                return None;
            }
            let module = controller.module();
            let stats = controller.stats();
            Some(Running {
                replica: identity.to_owned(),
                module: module.manifest().spec.module.display().to_string(),
                digest: module.manifest().shown_digest(module.digest()).to_owned(),
                module_digest: module
                    .manifest()
                    .pulled_module()
                    .is_some_and(|p| p.artifact_digest.is_some())
                    .then(|| module.digest().to_owned()),
                version: controller.version().number,
                reconciles: stats.total(),
                errors: stats.errors(),
                traps: stats.traps(),
                quarantined: controller.quarantined(),
                last_error: stats.last_error(),
                rollout: controller.rollout_report(),
                usage: module.budgets().totals(),
            })
        }
        // Running nowhere: every active replica sees the same.
        None if manager.is_active() => None,
        None => return None,
    };
    let unregistered_webhooks = registers_webhooks
        && running.is_none()
        && manager
            .objects()
            .and_then(|o| o.object(reference))
            .is_some_and(|object| {
                let spec = &object.to_value()["spec"];
                spec["webhooks"].as_array().is_some_and(|w| !w.is_empty())
                    || spec["conversion"].is_object()
            });
    Some(Observed {
        observed_generation: manager.observed_generation(reference),
        running,
        refused,
        unregistered_webhooks,
    })
}

/// Writes the guest objects' status and Events until stopped.
pub struct StatusWriter {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StatusWriter {
    /// Start writing, as replica `identity`, the status of `manager`'s guest objects (none
    /// without `--from-cluster`) through `api`.
    pub fn start(manager: Manager, api: Arc<ApiClient>, identity: String) -> Self {
        Self::start_with(manager, api, identity, false)
    }

    /// [`start`](Self::start), for a host that registers its guests' webhooks
    /// (`registers_webhooks`): a guest with webhooks that does not run says they are not
    /// registered.
    pub fn start_with(
        manager: Manager,
        api: Arc<ApiClient>,
        identity: String,
        registers_webhooks: bool,
    ) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut changes = manager.changes();
            let mut objects = manager
                .objects()
                .map(crate::guests::from_cluster::ObjectSource::changes);
            let mut counts_written: std::collections::HashMap<ObjectRef, tokio::time::Instant> =
                Default::default();
            loop {
                write_all(
                    &manager,
                    &api,
                    &identity,
                    registers_webhooks,
                    &mut counts_written,
                )
                .await;
                let object_changed = async {
                    let closed = match objects.as_mut() {
                        Some(o) => o.changed().await.is_err(),
                        None => true,
                    };
                    if closed {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => break,
                    _ = changes.changed() => {}
                    () = object_changed => {}
                    () = tokio::time::sleep(TICK) => {}
                }
            }
            mark_stopped(&manager, &api, &identity).await;
        });
        StatusWriter { stop, task }
    }

    /// Stop writing, letting a write in progress finish.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

async fn write_all(
    manager: &Manager,
    api: &Arc<ApiClient>,
    identity: &str,
    registers_webhooks: bool,
    counts_written: &mut std::collections::HashMap<ObjectRef, tokio::time::Instant>,
) {
    let Some(source) = manager.objects() else {
        return;
    };
    let objects = source.objects();
    counts_written.retain(|r, _| objects.iter().any(|(o, _)| o == r));
    for (reference, object) in objects {
        let Some(observed) = observe(manager, &reference, identity, registers_webhooks) else {
            continue;
        };
        let value = object.to_value();
        let old = value.get("status").cloned().unwrap_or(Value::Null);
        let new = desired(&observed, &old, SystemTime::now());
        if new == old {
            continue;
        }
        let now = tokio::time::Instant::now();
        let due = counts_written
            .get(&reference)
            .is_none_or(|at| now.duration_since(*at) >= COUNTS_EVERY);
        if !differs_beyond_counts(&old, &new) && !due {
            continue;
        }
        let write = write(api, &reference, &value, &old, &new);
        let result = match manager
            .fence(&reference.guest())
            .filter(|_| observed.running.is_some())
        {
            Some(fence) => fence.write(write).await,
            None => write.await,
        };
        match result {
            Ok(written) => {
                // The next look must see this write, or it would write (and tell) it again.
                if let Some(version) = written {
                    source
                        .wait_for_version(&reference, version, Duration::from_secs(5))
                        .await;
                }
                counts_written.insert(reference, now);
            }
            Err(err) => tracing::warn!("{reference}: writing its status: {err}"),
        }
    }
}

/// The reason of `Ready=Unknown` on a guest whose replica stopped.
pub const HOST_STOPPED: &str = "HostStopped";

/// As replica `identity` stops: every guest object whose status says it runs here says now that
/// its replica stopped (`Ready=Unknown`, reason [`HOST_STOPPED`]) — unless another replica has
/// written it meanwhile (the write is conditional on the object's `resourceVersion`), which
/// then runs it. A replica taking the guest over writes `Ready=True` again.
async fn mark_stopped(manager: &Manager, api: &ApiClient, identity: &str) {
    let Some(source) = manager.objects() else {
        return;
    };
    for (reference, object) in source.objects() {
        let value = object.to_value();
        let status = &value["status"];
        let ready = condition(status, "Ready");
        if status["replica"] != identity || !ready.is_some_and(|c| c["status"] == "True") {
            continue;
        }
        let now = rfc3339(SystemTime::now());
        let conditions: Vec<Value> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                if c["type"] == "Ready" {
                    json!({"type": "Ready", "status": "Unknown", "reason": HOST_STOPPED,
                        "message": format!("replica {identity} stopped: the guest runs nowhere until a replica takes it over"),
                        "lastTransitionTime": now})
                } else {
                    c.clone()
                }
            })
            .collect();
        let patch = json!({
            "metadata": {"resourceVersion": value["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions},
        });
        if let Err(err) = api
            .patch(
                &reference.gvk(),
                reference.namespace.as_deref(),
                &reference.name,
                PatchType::Merge,
                &patch,
                true,
                FIELD_MANAGER,
            )
            .await
        {
            tracing::debug!("{reference}: marking its replica stopped: {err}");
        }
    }
}

/// Replace `reference`'s status `old` by `new` and record the Events of the change; the
/// `resourceVersion` written.
async fn write(
    api: &ApiClient,
    reference: &ObjectRef,
    object: &Value,
    old: &Value,
    new: &Value,
) -> Result<Option<u64>, krec_core::CallError> {
    // Replaces the whole status: a merge patch of `{"status": null}` first would lose it
    // between the two writes, so the stale keys are nulled in the same patch.
    let mut body = new.clone();
    if let (Some(old), Some(map)) = (old.as_object(), body.as_object_mut()) {
        for key in old.keys() {
            map.entry(key.clone()).or_insert(Value::Null);
        }
    }
    let written = api
        .patch(
            &reference.gvk(),
            reference.namespace.as_deref(),
            &reference.name,
            PatchType::Merge,
            &json!({ "status": body }),
            true,
            FIELD_MANAGER,
        )
        .await?;
    let uid = object["metadata"]["uid"].as_str().map(str::to_owned);
    for (event_type, reason, message) in transitions(old, new) {
        let event = EventRecord {
            regarding: ObjectReference {
                gvk: reference.gvk(),
                namespace: reference.namespace.clone(),
                name: reference.name.clone(),
                uid: uid.clone(),
            },
            event_type,
            reason,
            message,
            reporter: FIELD_MANAGER.to_owned(),
        };
        if let Err(err) = api.record_event(&event).await {
            tracing::warn!("{reference}: recording an Event: {err}");
        }
    }
    Ok(written["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> Running {
        Running {
            replica: "r1".into(),
            module: "/guests/a.wasm".into(),
            digest: "sha256:aa".into(),
            module_digest: None,
            version: 1,
            reconciles: 3,
            errors: 0,
            traps: 0,
            quarantined: 0,
            last_error: None,
            rollout: None,
            usage: crate::guest::Totals::default(),
        }
    }

    fn refused(code: &'static str) -> Skipped {
        Skipped {
            guest: "Reconciler default/a".into(),
            reason: "Reconciler default/a: spec.limits.timeout: invalid duration \"5 parsecs\""
                .into(),
            code,
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn of(status: &Value, kind: &str) -> (String, String) {
        let c = condition(status, kind).expect(kind);
        (
            c["status"].as_str().unwrap_or_default().into(),
            c["reason"].as_str().unwrap_or_default().into(),
        )
    }

    #[test]
    fn a_running_guest_should_be_ready_with_its_digest_version_and_replica() {
        let observed = Observed {
            observed_generation: Some(2),
            running: Some(running()),
            refused: None,
            unregistered_webhooks: false,
        };
        let status = desired(&observed, &Value::Null, at(0));
        assert_eq!(of(&status, "Ready"), ("True".into(), "Running".into()));
        assert_eq!(
            of(&status, "ModuleResolved"),
            ("True".into(), "Loaded".into())
        );
        assert_eq!(
            of(&status, "Degraded"),
            ("False".into(), "AsExpected".into())
        );
        assert_eq!(status["observedGeneration"], 2);
        assert_eq!(status["digest"], "sha256:aa");
        assert_eq!(status["replica"], "r1");
        assert_eq!(status["reconciles"]["total"], 3);
        assert_eq!(
            condition(&status, "Ready").expect("ready")["observedGeneration"],
            2
        );
        // Unchanged: identical, times kept even later.
        assert_eq!(desired(&observed, &status, at(60)), status);
        assert_eq!(
            transitions(&Value::Null, &status),
            [(
                EventType::Normal,
                "Started".into(),
                "version 1 (sha256:aa) running on r1".into()
            )]
        );
    }

    #[test]
    fn a_rollout_should_show_its_phase_divergence_and_decision() {
        let report = |phase: &str, reason: &str, diverged: bool| {
            json!({
                "candidate": "/m/v2.wasm", "digest": "sha256:bb", "mode": "shadow",
                "phase": phase, "reason": reason,
                "live": {"reconciles": 4}, "candidateCounts": {"reconciles": 4},
                "divergences": if diverged {
                    json!([{"key": "default/x", "diff": ["write 1 (update apps/v1 Deployment default/x): spec.replicas: 3 → 4"]}])
                } else {
                    json!([])
                },
            })
        };
        let observed = |rollout: Value| Observed {
            observed_generation: Some(1),
            running: Some(Running {
                rollout: Some(rollout),
                ..running()
            }),
            refused: None,
            unregistered_webhooks: false,
        };
        let before = desired(
            &observed(report("Shadowing", "", false)),
            &Value::Null,
            at(0),
        );
        assert_eq!(
            of(&before, "RolloutProgressing"),
            ("True".into(), "Shadowing".into())
        );
        assert_eq!(before["rollout"]["digest"], "sha256:bb");
        let diverged = desired(&observed(report("Shadowing", "", true)), &before, at(1));
        let events = transitions(&before, &diverged);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].1, "CandidateDiverged");
        assert!(events[0].2.contains("spec.replicas: 3 → 4"), "{events:?}");
        let rolled_back = desired(
            &observed(report("RolledBack", "the candidate trapped", true)),
            &diverged,
            at(2),
        );
        assert_eq!(
            of(&rolled_back, "RolloutProgressing"),
            ("False".into(), "RolledBack".into())
        );
        let events = transitions(&diverged, &rolled_back);
        assert_eq!(events[0].0, EventType::Warning);
        assert_eq!(events[0].1, "CandidateRolledBack");
        assert!(events[0].2.contains("trapped"), "{events:?}");
    }

    #[test]
    fn a_guest_whose_webhooks_are_not_registered_should_say_so() {
        let observed = |unregistered_webhooks| Observed {
            observed_generation: Some(1),
            running: None,
            refused: Some(refused("LoadFailed")),
            unregistered_webhooks,
        };
        let status = desired(&observed(true), &Value::Null, at(0));
        assert_eq!(of(&status, "Ready"), ("False".into(), "LoadFailed".into()));
        let message = condition(&status, "Ready").expect("ready")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.ends_with(WEBHOOKS_NOT_REGISTERED), "{message}");
        let events = transitions(&Value::Null, &status);
        assert!(
            events[0].2.ends_with(WEBHOOKS_NOT_REGISTERED),
            "the Warning says it too: {events:?}"
        );
        let status = desired(&observed(false), &Value::Null, at(0));
        let message = condition(&status, "Ready").expect("ready")["message"].clone();
        assert!(!message.to_string().contains("webhooks"), "{message}");
    }

    #[test]
    fn a_refused_new_version_should_degrade_a_running_guest_and_say_why() {
        let before = desired(
            &Observed {
                observed_generation: Some(1),
                running: Some(running()),
                refused: None,
                unregistered_webhooks: false,
            },
            &Value::Null,
            at(0),
        );
        let after = desired(
            &Observed {
                observed_generation: Some(2),
                running: Some(running()),
                refused: Some(refused("Invalid")),
                unregistered_webhooks: false,
            },
            &before,
            at(10),
        );
        assert_eq!(of(&after, "Ready"), ("True".into(), "Running".into()));
        assert_eq!(
            of(&after, "Degraded"),
            ("True".into(), "NewVersionRefused".into())
        );
        let message = condition(&after, "Degraded").expect("degraded")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("spec.limits.timeout: invalid duration")
                && message.ends_with("version 1 keeps running"),
            "{message}"
        );
        // Ready did not change: its transition time stays.
        assert_eq!(
            condition(&after, "Ready").expect("r")["lastTransitionTime"],
            condition(&before, "Ready").expect("r")["lastTransitionTime"]
        );
        assert_ne!(
            condition(&after, "Degraded").expect("d")["lastTransitionTime"],
            condition(&before, "Degraded").expect("d")["lastTransitionTime"]
        );
        let events = transitions(&before, &after);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].0, EventType::Warning);
        assert_eq!(events[0].1, "NewVersionRefused");
        // Fixed and swapped.
        let mut swapped = running();
        swapped.version = 2;
        let fixed = desired(
            &Observed {
                observed_generation: Some(3),
                running: Some(swapped),
                refused: None,
                unregistered_webhooks: false,
            },
            &after,
            at(20),
        );
        assert_eq!(
            of(&fixed, "Degraded"),
            ("False".into(), "AsExpected".into())
        );
        assert_eq!(
            transitions(&after, &fixed)
                .into_iter()
                .map(|e| e.1)
                .collect::<Vec<_>>(),
            ["Swapped"]
        );
    }

    #[test]
    fn a_guest_refused_everywhere_should_not_be_ready_with_the_refusals_reason() {
        let status = desired(
            &Observed {
                observed_generation: Some(1),
                running: None,
                refused: Some(refused("LoadFailed")),
                unregistered_webhooks: false,
            },
            &Value::Null,
            at(0),
        );
        assert_eq!(of(&status, "Ready"), ("False".into(), "LoadFailed".into()));
        assert_eq!(
            of(&status, "ModuleResolved"),
            ("False".into(), "LoadFailed".into())
        );
        assert!(status.get("replica").is_none(), "no replica runs it");
        let events = transitions(&Value::Null, &status);
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].0, events[0].1.as_str()),
            (EventType::Warning, "LoadFailed")
        );
        // The same refusal later: nothing changes, not even the error's time.
        assert_eq!(
            desired(
                &Observed {
                    observed_generation: Some(1),
                    running: None,
                    refused: Some(refused("LoadFailed")),
                    unregistered_webhooks: false,
                },
                &status,
                at(99)
            ),
            status
        );
    }

    #[test]
    fn counts_alone_should_not_count_as_a_change() {
        let observed = Observed {
            observed_generation: Some(1),
            running: Some(running()),
            refused: None,
            unregistered_webhooks: false,
        };
        let old = desired(&observed, &Value::Null, at(0));
        let mut more = running();
        more.reconciles = 100;
        more.usage = crate::guest::Totals {
            wasm_cpu: Duration::from_micros(12_345),
            host_cpu: Duration::from_micros(2_500),
            calls: vec![("get", 7), ("patch", 3)],
            bytes_to_guest: 44_800,
            bytes_from_guest: 900,
            memory_bytes: 1 << 20,
            instances: 2,
        };
        let new = desired(
            &Observed {
                running: Some(more),
                ..observed
            },
            &old,
            at(5),
        );
        assert_ne!(old, new);
        assert!(!differs_beyond_counts(&old, &new));
        assert!(transitions(&old, &new).is_empty());
        assert_eq!(
            new["usage"],
            json!({"cpuMilliseconds": {"wasm": 12, "host": 2}, "hostCalls": {"get": 7, "patch": 3},
                "bytesToGuest": 44_800, "bytesFromGuest": 900, "memoryBytes": 1 << 20,
                "instancesStarted": 2})
        );
    }
}
