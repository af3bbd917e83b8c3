//! Simulated nodes, KWOK-style: Node objects with capacity and a `Ready` condition, a scheduler
//! that binds Pods to them, and kubelets that move bound Pods through their phases without
//! running anything.
//!
//! - The **scheduler** binds every unbound Pod (`schedulerName` unset or `default-scheduler`) to
//!   the least-loaded node that passes the filters kube-scheduler's defaults apply: not
//!   cordoned, `nodeSelector`, required node affinity (`matchExpressions` on labels,
//!   `matchFields` on `metadata.name`), `NoSchedule`/`NoExecute` taints tolerated, and CPU,
//!   memory and Pod count requests within allocatable. A Pod that fits nowhere stays `Pending`
//!   with `PodScheduled=False`, `Unschedulable`, and kube-scheduler's message
//!   (`0/3 nodes are available: 3 Insufficient cpu.`), and is retried when a Pod goes or a node
//!   changes.
//! - The **kubelet** of each node starts a bound Pod after [`Config::pod_start`]: `Running`,
//!   containers running and ready, the kubelet's conditions, `podIP` from the node's
//!   `podCIDR`, `startTime`. A Job's Pod succeeds after [`Config::job_duration`]. The
//!   annotation `krec.dev/simulate` (on the Pod or its template) scripts other lives, see
//!   [`Simulate`].
//!
//! - With the kubelets running, deleting a running Pod marks it for graceful deletion (the
//!   store's part, [`Store::set_graceful_pod_deletion`]); its kubelet stops it within
//!   `min(grace period, pod start delay)` and deletes it for good.
//!
//! Simplified: no `preStop` hooks; node leases and heartbeats are not kept (nodes stay `Ready`).

use std::collections::BTreeMap;

use super::*;

/// The annotation that scripts a Pod's simulated life.
pub const SIMULATE_ANNOTATION: &str = "krec.dev/simulate";

/// How a simulated Pod lives, from its `krec.dev/simulate` annotation: comma-separated
/// `start-after=<duration>` (Pending that long once bound), `run-for=<duration>` (then
/// `Succeeded`), `fail-after=<duration>` (then its containers exit 1: `Failed` with
/// `restartPolicy: Never`, else restarted with kubelet's back-off, `CrashLoopBackOff` while
/// waiting), `crashloop` (`fail-after=0s`), `never-ready` (running, never ready). Durations as
/// Go writes them: `500ms`, `5s`, `2m`, `1h`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Simulate {
    /// Pending this long once bound (default: the cluster's pod start delay).
    pub start_after: Option<Duration>,
    /// Succeed after running this long.
    pub run_for: Option<Duration>,
    /// Fail after running this long.
    pub fail_after: Option<Duration>,
    /// Never become ready.
    pub never_ready: bool,
}

impl FromStr for Simulate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut simulate = Simulate::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let duration = || {
                krec_core::duration::parse(value).map_err(|_| {
                    format!(
                        "{SIMULATE_ANNOTATION}: {key} needs a duration such as 5s, not {value:?}"
                    )
                })
            };
            match key {
                "start-after" => simulate.start_after = Some(duration()?),
                "run-for" => simulate.run_for = Some(duration()?),
                "fail-after" => simulate.fail_after = Some(duration()?),
                "crashloop" => simulate.fail_after = Some(Duration::ZERO),
                "never-ready" => simulate.never_ready = true,
                other => {
                    return Err(format!(
                        "{SIMULATE_ANNOTATION}: unknown behaviour {other:?} (expected start-after, run-for, fail-after, crashloop or never-ready)"
                    ));
                }
            }
        }
        Ok(simulate)
    }
}

/// The kubelets' memory: when each Pod (by UID) was first seen bound, and the IPs handed out.
#[derive(Default)]
pub(super) struct Kubelets {
    bound_at: HashMap<String, Instant>,
    terminating: HashMap<String, Instant>,
    next_ip: HashMap<String, u32>,
    ips: HashMap<String, String>,
}

impl Kubelets {
    pub(super) fn forget(&mut self, pod: &Value) {
        let uid = uid(pod);
        self.bound_at.remove(uid);
        self.terminating.remove(uid);
        self.ips.remove(uid);
    }
}

const NODE_PREFIX: &str = "krec-node-";

/// The most simulated nodes: each gets `10.0.0.<i+2>` and the Pod range `10.244.<i>.0/24`.
pub const MAX_NODES: usize = 250;

/// Create nodes `krec-node-0 … krec-node-(count-1)` that do not exist yet.
pub(super) fn ensure_nodes(store: &Store, rt: &ResourceType, count: usize) -> Result<(), ApiError> {
    let version = crate::resources::version_string();
    if count > MAX_NODES {
        tracing::warn!(
            "{count} simulated nodes asked for; creating {MAX_NODES}, the most the address plan holds"
        );
    }
    for i in 0..count.min(MAX_NODES) {
        let name = format!("{NODE_PREFIX}{i}");
        if store.contains(rt, None, &name) {
            continue;
        }
        let now = now();
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    "node.kubernetes.io/instance-type": "krec-simulated",
                    "type": "krec",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {
                "podCIDR": format!("10.244.{i}.0/24"),
                "podCIDRs": [format!("10.244.{i}.0/24")],
            },
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "conditions": [
                    condition_json("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available", &now),
                    condition_json("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", &now),
                    condition_json("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", &now),
                    condition_json("Ready", "True", "KubeletReady", "kubelet is posting ready status", &now),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": format!("10.0.0.{}", i + 2)},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "krec simulated node",
                    "kernelVersion": "simulated",
                    "containerRuntimeVersion": "krec://simulated",
                    "kubeletVersion": version,
                    "kubeProxyVersion": "",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
            },
        });
        // Create, then write the status the create dropped (Node has a status subresource).
        let created = store.create(rt, None, node.clone(), options("kubelet"))?;
        let mut with_status = (*created).clone();
        with_status["status"] = node["status"].clone();
        store.update(rt, None, &name, with_status, true, options("kubelet"))?;
    }
    Ok(())
}

fn condition_json(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": status, "lastHeartbeatTime": now, "lastTransitionTime": now,
        "reason": reason, "message": message})
}

/// A resource quantity in base units (`100m` → 0.1, `1Gi` → 2³⁰), as `resource.Quantity` reads.
fn quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// The requests of a Pod (its containers' sum, or an init container's if larger), per resource.
fn requests(pod: &Value) -> HashMap<&'static str, f64> {
    let mut total = HashMap::new();
    let sum = |list: &str, resource: &str| -> (f64, f64) {
        let mut sum = 0.0;
        let mut max: f64 = 0.0;
        for c in pod
            .at("/spec")
            .and_then(|s| s.get(list))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let value = c
                .at("/resources/requests")
                .and_then(|r| r.get(resource))
                .and_then(Value::as_str)
                .and_then(quantity)
                .unwrap_or(0.0);
            sum += value;
            max = max.max(value);
        }
        (sum, max)
    };
    for resource in ["cpu", "memory"] {
        let (containers, _) = sum("containers", resource);
        let (_, init) = sum("initContainers", resource);
        total.insert(resource, containers.max(init));
    }
    total.insert("pods", 1.0);
    total
}

/// A node's free capacity, per resource.
struct Free {
    name: String,
    node: Arc<Value>,
    free: HashMap<&'static str, f64>,
    pods: usize,
}

/// Bind every unbound Pod to a node, or mark it unschedulable.
pub(super) fn schedule(engine: &mut Engine) -> Result<Next, ApiError> {
    let pods = engine.store.objects(&engine.types.pods, None);
    let pending: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| node_name(p).is_empty() && is_active(p))
        .filter(|p| {
            p.at("/spec/schedulerName")
                .and_then(Value::as_str)
                .is_none_or(|s| s == "default-scheduler")
        })
        .collect();
    if pending.is_empty() {
        return Ok(Next::Done);
    }
    let mut nodes: Vec<Free> = engine
        .store
        .objects(&engine.types.nodes, None)
        .into_iter()
        .map(|node| {
            let allocatable = |r: &str| {
                node.at("/status/allocatable")
                    .and_then(|a| a.get(r))
                    .and_then(Value::as_str)
                    .and_then(quantity)
                    .unwrap_or(0.0)
            };
            Free {
                name: namespace_and_name(&node).1.to_owned(),
                free: [
                    ("cpu", allocatable("cpu")),
                    ("memory", allocatable("memory")),
                    ("pods", allocatable("pods")),
                ]
                .into_iter()
                .collect(),
                node,
                pods: 0,
            }
        })
        .collect();
    for pod in pods
        .iter()
        .filter(|p| !node_name(p).is_empty() && !is_terminal(p))
    {
        if let Some(node) = nodes.iter_mut().find(|n| n.name == node_name(pod)) {
            for (resource, amount) in requests(pod) {
                *node.free.entry(resource).or_insert(0.0) -= amount;
            }
            node.pods += 1;
        }
    }
    let mut first_error = None;
    for pod in pending {
        let wanted = requests(pod);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<usize> = None;
        for (i, node) in nodes.iter().enumerate() {
            match fits(pod, node, &wanted) {
                Ok(()) => {
                    if best.is_none_or(|b| nodes[b].pods > node.pods) {
                        best = Some(i);
                    }
                }
                Err(reason) => *reasons.entry(reason).or_insert(0) += 1,
            }
        }
        let result = match best {
            Some(i) => {
                let node = &mut nodes[i];
                for (resource, amount) in &wanted {
                    *node.free.entry(resource).or_insert(0.0) -= amount;
                }
                node.pods += 1;
                bind(engine, pod, &node.name)
            }
            None => {
                let mut message = format!("0/{} nodes are available:", nodes.len());
                let mut parts: Vec<String> = reasons
                    .iter()
                    .map(|(reason, count)| format!(" {count} {reason}"))
                    .collect();
                parts.sort();
                message.push_str(&parts.join(","));
                message.push('.');
                if nodes.is_empty() {
                    message = "no nodes available to schedule pods".into();
                }
                unschedulable(engine, pod, &message)
            }
        };
        if let Err(err) = result
            && first_error.is_none()
        {
            first_error = Some(err);
        }
    }
    first_error.map_or(Ok(Next::Done), Err)
}

/// Whether `pod` fits `node`, else the reason kube-scheduler gives.
fn fits(pod: &Value, node: &Free, wanted: &HashMap<&'static str, f64>) -> Result<(), String> {
    let n = &node.node;
    // A cordoned node takes only Pods tolerating its `unschedulable` taint (DaemonSet Pods).
    let tolerates_cordon = pod
        .at("/spec/tolerations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|t| {
            (t["key"] == "node.kubernetes.io/unschedulable"
                || (t["operator"] == "Exists" && t["key"].as_str().is_none_or(str::is_empty)))
                && t["effect"]
                    .as_str()
                    .is_none_or(|e| e.is_empty() || e == "NoSchedule")
        });
    if n.at("/spec/unschedulable") == Some(&Value::Bool(true)) && !tolerates_cordon {
        return Err("node(s) were unschedulable".into());
    }
    let labels = n.at("/metadata/labels");
    if let Some(selector) = pod.at("/spec/nodeSelector").and_then(Value::as_object)
        && !selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    {
        return Err("node(s) didn't match Pod's node affinity/selector".into());
    }
    if let Some(terms) = pod
        .at("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
        && !terms.iter().any(|term| node_term_matches(term, n))
    {
        return Err("node(s) didn't match Pod's node affinity/selector".into());
    }
    let tolerations = pod.at("/spec/tolerations").and_then(Value::as_array);
    for taint in n
        .at("/spec/taints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if taint["effect"] == "PreferNoSchedule" {
            continue;
        }
        let tolerated = tolerations.into_iter().flatten().any(|t| {
            let key_ok = t["key"]
                .as_str()
                .is_none_or(|k| k.is_empty() || t["key"] == taint["key"]);
            let value_ok = t["operator"] == "Exists" || t["value"] == taint["value"];
            let effect_ok = t["effect"]
                .as_str()
                .is_none_or(|e| e.is_empty() || t["effect"] == taint["effect"]);
            key_ok && value_ok && effect_ok
        });
        if !tolerated {
            return Err(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint["key"].as_str().unwrap_or_default(),
                taint["value"].as_str().unwrap_or_default()
            ));
        }
    }
    for (resource, label) in [
        ("pods", "Too many pods"),
        ("cpu", "Insufficient cpu"),
        ("memory", "Insufficient memory"),
    ] {
        let need = wanted.get(resource).copied().unwrap_or(0.0);
        if need > 0.0 && need > node.free.get(resource).copied().unwrap_or(0.0) + 1e-9 {
            return Err(label.into());
        }
    }
    Ok(())
}

/// A `nodeSelectorTerm`: every expression on labels and every field expression holds (the
/// one field a node selector may name is `metadata.name`).
fn node_term_matches(term: &Value, node: &Value) -> bool {
    let labels = krec_core::selector::object_labels(node);
    let fields = BTreeMap::from([(
        "metadata.name".to_owned(),
        namespace_and_name(node).1.to_owned(),
    )]);
    let holds = |list: &str, against: &BTreeMap<String, String>| {
        term[list].as_array().into_iter().flatten().all(|e| {
            krec_core::selector::Requirement::from_json(e).is_some_and(|r| r.matches(against))
        })
    };
    holds("matchExpressions", &labels) && holds("matchFields", &fields)
}

/// Bind `pod` to `node` (what `pods/binding` does: `spec.nodeName` and `PodScheduled=True`).
fn bind(engine: &Engine, pod: &Value, node: &str) -> Result<(), ApiError> {
    let mut bound = pod.clone();
    set_at(&mut bound, &["spec", "nodeName"], json!(node));
    let (ns, name) = namespace_and_name(pod);
    let (ns, name) = (ns.to_owned(), name.to_owned());
    let stored = engine.store.update(
        &engine.types.pods,
        Some(&ns),
        &name,
        bound,
        false,
        options("kube-scheduler"),
    )?;
    let mut status = status_of(&stored);
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(
        json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
        "lastTransitionTime": now()}),
    );
    status["conditions"] = json!(conditions);
    engine.update_status(&engine.types.pods, &stored, status, "kube-scheduler")?;
    let (ns, name) = namespace_and_name(&stored);
    let message = format!("Successfully assigned {ns}/{name} to {node}");
    engine.event(&stored, false, "Scheduled", &message, "default-scheduler");
    Ok(())
}

fn unschedulable(engine: &Engine, pod: &Value, message: &str) -> Result<(), ApiError> {
    let mut status = status_of(pod);
    let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let same = conditions
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "False" && c["message"] == message);
    if same {
        return Ok(());
    }
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(
        json!({"type": "PodScheduled", "status": "False", "lastProbeTime": null,
        "lastTransitionTime": now(), "reason": "Unschedulable", "message": message}),
    );
    status["conditions"] = json!(conditions);
    engine.update_status(&engine.types.pods, pod, status, "kube-scheduler")?;
    engine.event(pod, true, "FailedScheduling", message, "default-scheduler");
    Ok(())
}

/// What a simulated Pod's containers are doing at a moment.
#[derive(Clone, Debug, PartialEq)]
enum Life {
    Pending,
    Running {
        ready: bool,
        restarts: i64,
        waiting: bool,
    },
    Succeeded,
    Failed,
}

/// Kubelet's restart back-off: 10 s doubling to 5 min.
fn backoff(restarts: i64) -> Duration {
    Duration::from_secs(
        10u64
            .saturating_mul(1 << restarts.clamp(0, 5) as u64)
            .min(300),
    )
}

/// The Pod's life at `elapsed` since it was bound, and how long until it next changes.
fn life_at(
    sim: &Simulate,
    restart_never: bool,
    elapsed: Duration,
    start: Duration,
    run_for: Option<Duration>,
) -> (Life, Option<Duration>) {
    if elapsed < start {
        return (Life::Pending, Some(start - elapsed));
    }
    let running = elapsed - start;
    let up = Life::Running {
        ready: !sim.never_ready,
        restarts: 0,
        waiting: false,
    };
    if let Some(run_for) = run_for
        && sim.fail_after.is_none_or(|f| f > run_for)
    {
        return if running >= run_for {
            (Life::Succeeded, None)
        } else {
            (up.clone(), Some(run_for - running))
        };
    }
    let Some(fail_after) = sim.fail_after else {
        return (up.clone(), None);
    };
    if restart_never {
        return if running >= fail_after {
            (Life::Failed, None)
        } else {
            (up.clone(), Some(fail_after - running))
        };
    }
    // Run for fail_after, crash, wait the back-off, run again, … up to now.
    let mut t = Duration::ZERO;
    let mut restarts = 0;
    loop {
        let crash = t.saturating_add(fail_after);
        if running < crash {
            let next = crash - running;
            return (
                Life::Running {
                    ready: !sim.never_ready,
                    restarts,
                    waiting: false,
                },
                Some(next.max(Duration::from_millis(1))),
            );
        }
        let restart = crash.saturating_add(backoff(restarts));
        if running < restart {
            return (
                Life::Running {
                    ready: false,
                    restarts: restarts + 1,
                    waiting: true,
                },
                Some(restart - running),
            );
        }
        restarts += 1;
        t = restart;
    }
}

/// The life a Pod's status shows.
fn observed_life(pod: &Value) -> Life {
    match phase(pod) {
        "Succeeded" => Life::Succeeded,
        "Failed" => Life::Failed,
        "Running" => {
            let statuses = pod
                .at("/status/containerStatuses")
                .and_then(Value::as_array);
            let restarts = statuses
                .into_iter()
                .flatten()
                .filter_map(|c| c["restartCount"].as_i64())
                .max()
                .unwrap_or(0);
            let waiting = statuses
                .into_iter()
                .flatten()
                .any(|c| c.at("/state/waiting").is_some());
            Life::Running {
                ready: is_ready(pod),
                restarts,
                waiting,
            }
        }
        _ => Life::Pending,
    }
}

/// One bound Pod's kubelet: bring its status to its simulated life.
pub(super) fn kubelet(engine: &mut Engine, ns: &str, name: &str) -> Result<Next, ApiError> {
    let Some(pod) = engine.get(&engine.types.pods, ns, name) else {
        return Ok(Next::Done);
    };
    let node = node_name(&pod).to_owned();
    if node.is_empty() {
        return Ok(Next::Done);
    }
    // The store marks Pods on any existing node for graceful deletion: this kubelet finishes
    // them all, as a node's kubelet would.
    if is_deleting(&pod) {
        return terminate(engine, &pod);
    }
    if !node.starts_with(NODE_PREFIX) {
        return Ok(Next::Done);
    }
    if is_terminal(&pod) {
        return Ok(Next::Done);
    }
    let annotation = pod
        .at("/metadata/annotations")
        .and_then(|a| a.get(SIMULATE_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let sim = match annotation.parse::<Simulate>() {
        Ok(sim) => sim,
        Err(problem) => {
            tracing::warn!("pod {ns}/{name}: {problem}; simulating the default life");
            Simulate::default()
        }
    };
    let now = Instant::now();
    let observed = observed_life(&pod);
    let start = sim.start_after.unwrap_or(engine.config.pod_start);
    let bound_at = *engine
        .kubelet
        .bound_at
        .entry(uid(&pod).to_owned())
        .or_insert_with(|| {
            // A Pod already running (a restart with --data-dir) keeps running.
            if observed == Life::Pending {
                now
            } else {
                now.checked_sub(start).unwrap_or(now)
            }
        });
    let owned_by_job =
        controller_of(&pod).is_some_and(|o| o.kind == "Job" && o.api_version == "batch/v1");
    let run_for = sim
        .run_for
        .or(owned_by_job.then_some(engine.config.job_duration));
    let restart_never = pod.at("/spec/restartPolicy").and_then(Value::as_str) == Some("Never");
    let (life, next) = life_at(&sim, restart_never, now - bound_at, start, run_for);
    if life != observed {
        let status = pod_status(engine, &pod, &node, &life);
        engine.update_status(&engine.types.pods, &pod, status, "kubelet")?;
        container_events(engine, &pod, &observed, &life);
    }
    if matches!(life, Life::Succeeded | Life::Failed) {
        engine.kubelet.bound_at.remove(uid(&pod));
    }
    Ok(next.map_or(Next::Done, Next::After))
}

/// A Pod marked for graceful deletion: its containers stop (within the grace period, after at
/// most the pod start delay) and the kubelet deletes it for good, as `killPod` then the status
/// manager's final delete with grace 0.
fn terminate(engine: &mut Engine, pod: &Value) -> Result<Next, ApiError> {
    let now = Instant::now();
    let grace = int_at(pod, "/metadata/deletionGracePeriodSeconds")
        .unwrap_or(0)
        .max(0);
    let stop = Duration::from_secs(grace as u64).min(engine.config.pod_start);
    let since = match engine.kubelet.terminating.get(uid(pod)) {
        Some(since) => *since,
        None => {
            engine.kubelet.terminating.insert(uid(pod).to_owned(), now);
            let message = format!("Stopping container {}", first_container(pod));
            engine.event(pod, false, "Killing", &message, "kubelet");
            now
        }
    };
    if now < since + stop {
        return Ok(Next::After(since + stop - now));
    }
    let (ns, name) = namespace_and_name(pod);
    let options = DeleteOptions {
        uid: Some(uid(pod).to_owned()),
        grace_period: Some(0),
        ..DeleteOptions::default()
    };
    match engine
        .store
        .delete(&engine.types.pods, Some(ns), name, &options)
    {
        Ok(_) => {}
        Err(err) if matches!(err.code, 404 | 409) => {}
        Err(err) => return Err(err),
    }
    engine.kubelet.terminating.remove(uid(pod));
    Ok(Next::Done)
}

fn first_container(pod: &Value) -> &str {
    pod.at("/spec/containers/0/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The kubelet's events for a change of life: image present, container created and started;
/// back-off restarting a crashed one.
fn container_events(engine: &Engine, pod: &Value, before: &Life, after: &Life) {
    let containers = pod
        .at("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in &containers {
        let name = c["name"].as_str().unwrap_or_default();
        let image = c["image"].as_str().unwrap_or_default();
        match (before, after) {
            (Life::Pending, Life::Running { .. } | Life::Succeeded | Life::Failed) => {
                let pulled = format!("Container image \"{image}\" already present on machine");
                engine.event(pod, false, "Pulled", &pulled, "kubelet");
                engine.event(
                    pod,
                    false,
                    "Created",
                    &format!("Created container: {name}"),
                    "kubelet",
                );
                engine.event(
                    pod,
                    false,
                    "Started",
                    &format!("Started container {name}"),
                    "kubelet",
                );
            }
            (_, Life::Running { waiting: true, .. }) => {
                let message = format!(
                    "Back-off restarting failed container {name} in pod {}",
                    namespace_and_name(pod).1
                );
                engine.event(pod, true, "BackOff", &message, "kubelet");
            }
            _ => {}
        }
    }
}

/// The status a kubelet writes for `life`.
fn pod_status(engine: &mut Engine, pod: &Value, node: &str, life: &Life) -> Value {
    let now = now();
    let mut status = status_of(pod);
    let old_conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let transition = |kind: &str, value: &str| {
        old_conditions
            .iter()
            .find(|c| c["type"] == kind && c["status"] == value)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now))
    };
    let (phase, ready, started) = match life {
        Life::Pending => ("Pending", false, false),
        Life::Running { ready, .. } => ("Running", *ready, true),
        Life::Succeeded => ("Succeeded", false, false),
        Life::Failed => ("Failed", false, false),
    };
    let initialized = !matches!(life, Life::Pending);
    let bool_text = |b: bool| if b { "True" } else { "False" };
    let mut conditions = vec![
        json!({"type": "PodReadyToStartContainers", "status": bool_text(!matches!(life, Life::Succeeded | Life::Failed)), "lastProbeTime": null, "lastTransitionTime": transition("PodReadyToStartContainers", bool_text(!matches!(life, Life::Succeeded | Life::Failed)))}),
        json!({"type": "Initialized", "status": bool_text(initialized), "lastProbeTime": null, "lastTransitionTime": transition("Initialized", bool_text(initialized))}),
        json!({"type": "Ready", "status": bool_text(ready), "lastProbeTime": null, "lastTransitionTime": transition("Ready", bool_text(ready))}),
        json!({"type": "ContainersReady", "status": bool_text(ready), "lastProbeTime": null, "lastTransitionTime": transition("ContainersReady", bool_text(ready))}),
    ];
    if let Some(scheduled) = old_conditions.iter().find(|c| c["type"] == "PodScheduled") {
        conditions.push(scheduled.clone());
    }
    for c in conditions
        .iter_mut()
        .filter(|c| c["status"] == "False" && c["type"] != "PodScheduled")
    {
        c["reason"] = json!(match c["type"].as_str() {
            Some("Ready") | Some("ContainersReady") if matches!(life, Life::Succeeded) =>
                "PodCompleted",
            Some("Ready") | Some("ContainersReady") => "ContainersNotReady",
            _ => "PodCompleted",
        });
    }
    let node_ip = engine
        .store
        .get(&engine.types.nodes, None, node)
        .ok()
        .and_then(|n| {
            n.at("/status/addresses")?
                .as_array()?
                .iter()
                .find(|a| a["type"] == "InternalIP")?
                .get("address")?
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let pod_ip = engine.kubelet.ip_for(pod, node);
    let containers = pod
        .at("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let old_statuses = status["containerStatuses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let statuses: Vec<Value> = containers
        .iter()
        .map(|c| {
            let name = c["name"].clone();
            let started_at = old_statuses
                .iter()
                .find(|s| s["name"] == name)
                .and_then(|s| s.at("/state/running/startedAt").cloned())
                .unwrap_or_else(|| json!(now));
            let (state, last, restarts) = match life {
                Life::Pending => (json!({"waiting": {"reason": "ContainerCreating"}}), json!({}), 0),
                Life::Running { waiting: true, restarts, .. } => (
                    json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off {}s restarting failed container={} pod={}", backoff(restarts - 1).as_secs(), name.as_str().unwrap_or_default(), namespace_and_name(pod).1)}}),
                    json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started_at, "finishedAt": now}}),
                    *restarts,
                ),
                Life::Running { restarts, .. } => (json!({"running": {"startedAt": started_at}}), json!({}), *restarts),
                Life::Succeeded => (json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started_at, "finishedAt": now}}), json!({}), 0),
                Life::Failed => (json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": started_at, "finishedAt": now}}), json!({}), 0),
            };
            let image = c["image"].clone();
            let mut s = json!({
                "name": name,
                "state": state,
                "lastState": last,
                "ready": ready,
                "restartCount": restarts,
                "image": image,
                "imageID": image,
                "started": started && !matches!(life, Life::Running { waiting: true, .. }),
            });
            if !matches!(life, Life::Pending) {
                s["containerID"] = json!(format!("krec://{}-{}", uid(pod), name.as_str().unwrap_or_default()));
            }
            s
        })
        .collect();
    status["phase"] = json!(phase);
    status["conditions"] = json!(conditions);
    status["hostIP"] = json!(node_ip);
    status["hostIPs"] = json!([{"ip": node_ip}]);
    if !pod_ip.is_empty() {
        status["podIP"] = json!(pod_ip);
        status["podIPs"] = json!([{"ip": pod_ip}]);
    }
    if status.get("startTime").is_none() {
        status["startTime"] = json!(now);
    }
    status["containerStatuses"] = json!(statuses);
    status
}

impl Kubelets {
    /// The Pod's IP in its node's `10.244.<n>.0/24`, handed out once.
    fn ip_for(&mut self, pod: &Value, node: &str) -> String {
        if let Some(ip) = pod.at("/status/podIP").and_then(Value::as_str) {
            return ip.to_owned();
        }
        let uid = uid(pod).to_owned();
        if let Some(ip) = self.ips.get(&uid) {
            return ip.clone();
        }
        let index: u32 = node
            .strip_prefix(NODE_PREFIX)
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let prefix = format!("10.244.{index}.");
        let next = self.next_ip.entry(node.to_owned()).or_insert(1);
        // Hosts .2 to .254, the next free one after the last handed out (a node runs at most
        // 110 Pods, so one is free).
        let mut ip = String::new();
        for _ in 0..253 {
            *next = *next % 253 + 1;
            let candidate = format!("{prefix}{}", *next + 1);
            if !self.ips.values().any(|used| *used == candidate) {
                ip = candidate;
                break;
            }
        }
        self.ips.insert(uid, ip.clone());
        ip
    }
}
