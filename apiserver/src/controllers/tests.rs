use super::*;
use crate::resources::ResourceTypes;

#[test]
fn selections_should_parse_all_none_and_lists() {
    assert_eq!("all".parse::<Selection>(), Ok(Selection::all()));
    assert_eq!("none".parse::<Selection>(), Ok(Selection::none()));
    let some: Selection = "deployment, replicaset".parse().expect("valid");
    assert!(some.runs(Controller::Deployment) && some.runs(Controller::ReplicaSet));
    assert!(!some.runs(Controller::Kubelet));
    let err = "deployments".parse::<Selection>().expect_err("unknown");
    assert!(err.contains("unknown controller \"deployments\""), "{err}");
}

#[test]
fn simulate_annotations_should_parse_and_name_their_mistakes() {
    let sim: Simulate = "start-after=2s, fail-after=500ms".parse().expect("valid");
    assert_eq!(sim.start_after, Some(Duration::from_secs(2)));
    assert_eq!(sim.fail_after, Some(Duration::from_millis(500)));
    let sim: Simulate = "crashloop,never-ready".parse().expect("valid");
    assert_eq!(sim.fail_after, Some(Duration::ZERO));
    assert!(sim.never_ready);
    let err = "fail-after=soon"
        .parse::<Simulate>()
        .expect_err("bad duration");
    assert!(err.contains("fail-after needs a duration"), "{err}");
    let err = "explode".parse::<Simulate>().expect_err("unknown");
    assert!(err.contains("unknown behaviour \"explode\""), "{err}");
}

#[test]
fn percentages_should_round_as_kube_does() {
    // maxSurge rounds up, maxUnavailable down (intstr.GetScaledValueFromIntOrPercent).
    assert_eq!(scaled(Some(&json!("25%")), 10, true, 1), 3);
    assert_eq!(scaled(Some(&json!("25%")), 10, false, 1), 2);
    assert_eq!(scaled(Some(&json!(4)), 10, false, 1), 4);
    assert_eq!(scaled(None, 10, false, 1), 1);
}

#[test]
fn template_hashes_should_be_stable_and_safe_encoded() {
    let a = template_hash(&json!({"spec": {"containers": [{"image": "a"}]}}), 0);
    let b = template_hash(&json!({"spec": {"containers": [{"image": "b"}]}}), 0);
    assert_eq!(
        a,
        template_hash(&json!({"spec": {"containers": [{"image": "a"}]}}), 0)
    );
    assert_ne!(a, b);
    assert_ne!(
        a,
        template_hash(&json!({"spec": {"containers": [{"image": "a"}]}}), 1)
    );
    assert!(
        a.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{a}"
    );
}

fn store() -> Arc<Store> {
    let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
    crate::ensure_namespaces(&store).expect("namespaces");
    store
}

fn config() -> Config {
    Config {
        controllers: Selection::all(),
        nodes: 2,
        pod_start: Duration::from_secs(1),
        job_duration: Duration::from_secs(3),
        root_ca: None,
    }
}

fn rt(store: &Store, group: &str, plural: &str) -> ResourceType {
    let version = "v1";
    store
        .registry()
        .by_plural(group, version, plural)
        .expect("registered")
}

fn deployment(name: &str, replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": image}]}}}})
}

/// A store with the controllers running on it (until the returned sender drops).
fn running(config: Config) -> (Arc<Store>, tokio::sync::watch::Sender<bool>) {
    let store = store();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    spawn(
        Arc::new(crate::admission::Admission::new(store.clone())),
        config,
        stopped,
    )
    .expect("controllers run");
    (store, stop)
}

/// Let the controllers run for `seconds` of paused time.
async fn run_for(seconds: u64) {
    for _ in 0..seconds * 10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pods(store: &Store) -> Vec<Arc<Value>> {
    store.objects(&rt(store, "", "pods"), Some("default"))
}

#[tokio::test(start_paused = true)]
async fn a_deployment_should_roll_out_to_running_pods_on_the_simulated_nodes() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    store
        .create(
            &deployments,
            Some("default"),
            deployment("web", 3, "nginx:1.27"),
            false,
        )
        .expect("create");
    run_for(5).await;

    let d = store
        .get(&deployments, Some("default"), "web")
        .expect("deployment");
    assert_eq!(d.at("/status/availableReplicas"), Some(&json!(3)), "{d:#}");
    assert_eq!(d.at("/status/updatedReplicas"), Some(&json!(3)));
    assert_eq!(d.at("/status/observedGeneration"), Some(&json!(1)));
    assert_eq!(
        condition(&d, "Available").map(|c| &c["status"]),
        Some(&json!("True"))
    );
    assert_eq!(
        condition(&d, "Progressing").map(|c| &c["reason"]),
        Some(&json!("NewReplicaSetAvailable"))
    );
    let replica_sets = store.objects(&rt(&store, "apps", "replicasets"), Some("default"));
    assert_eq!(replica_sets.len(), 1);
    let rs_name = namespace_and_name(&replica_sets[0]).1.to_owned();
    let hash = replica_sets[0]
        .at("/metadata/labels/pod-template-hash")
        .and_then(Value::as_str)
        .expect("hash label");
    assert_eq!(rs_name, format!("web-{hash}"));
    let pods = pods(&store);
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        assert!(
            namespace_and_name(pod)
                .1
                .starts_with(&format!("{rs_name}-"))
        );
        assert_eq!(phase(pod), "Running", "{pod:#}");
        assert!(is_ready(pod));
        assert!(node_name(pod).starts_with("krec-node-"));
        assert!(
            pod.at("/status/podIP")
                .and_then(Value::as_str)
                .is_some_and(|ip| ip.starts_with("10.244."))
        );
    }
}

/// As `copyDeploymentAnnotationsToReplicaSet`: the Deployment's annotations reach its new
/// ReplicaSet — a trace context too (`tracing.k8s.io/traceparent`) — but not kubectl's last
/// applied configuration, and later changes follow.
#[tokio::test(start_paused = true)]
async fn a_deployments_annotations_should_be_copied_to_its_replica_set() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    let mut web = deployment("web", 1, "nginx:1.27");
    web["metadata"]["annotations"] = json!({
        "team": "a",
        "tracing.k8s.io/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    });
    store
        .create(&deployments, Some("default"), web, false)
        .expect("create");
    run_for(2).await;
    let replica_sets = rt(&store, "apps", "replicasets");
    let annotations = |store: &Store| {
        let sets = store.objects(&replica_sets, Some("default"));
        assert_eq!(sets.len(), 1);
        sets[0]
            .at("/metadata/annotations")
            .cloned()
            .unwrap_or_default()
    };
    let copied = annotations(&store);
    assert_eq!(copied["team"], "a", "{copied:#}");
    assert_eq!(
        copied["tracing.k8s.io/traceparent"],
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    );
    assert_eq!(copied["deployment.kubernetes.io/revision"], "1");
    assert!(
        copied
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none()
    );

    let current = store
        .get(&deployments, Some("default"), "web")
        .expect("web");
    let mut changed = (*current).clone();
    changed["metadata"]["annotations"]["team"] = json!("b");
    store
        .update(&deployments, Some("default"), "web", changed, false, false)
        .expect("update");
    run_for(2).await;
    assert_eq!(annotations(&store)["team"], "b");
}

#[tokio::test(start_paused = true)]
async fn a_rolling_update_should_never_drop_below_max_unavailable() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    store
        .create(
            &deployments,
            Some("default"),
            deployment("web", 4, "nginx:1.27"),
            false,
        )
        .expect("create");
    run_for(5).await;
    let mut d = (*store
        .get(&deployments, Some("default"), "web")
        .expect("get"))
    .clone();
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    store
        .update(
            &deployments,
            Some("default"),
            "web",
            d,
            false,
            WriteOptions::default(),
        )
        .expect("update");
    // maxUnavailable 25% of 4 = 1: at least 3 ready Pods at every moment of the rollout.
    let mut least_ready = usize::MAX;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ready = pods(&store)
            .iter()
            .filter(|p| is_ready(p) && is_active(p))
            .count();
        least_ready = least_ready.min(ready);
    }
    assert!(least_ready >= 3, "ready Pods fell to {least_ready}");
    let pods = pods(&store);
    assert_eq!(pods.len(), 4);
    assert!(
        pods.iter()
            .all(|p| p.at("/spec/containers/0/image") == Some(&json!("nginx:1.28")))
    );
    let d = store
        .get(&deployments, Some("default"), "web")
        .expect("get");
    assert_eq!(
        d.at("/metadata/annotations")
            .and_then(|a| a.get("deployment.kubernetes.io/revision")),
        Some(&json!("2"))
    );
    assert_eq!(
        store
            .objects(&rt(&store, "apps", "replicasets"), Some("default"))
            .len(),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_should_complete_and_a_failing_pod_should_fail_it() {
    let (store, _running) = running(config());
    let jobs = rt(&store, "batch", "jobs");
    let job = |name: &str, annotation: Option<&str>| {
        let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"completions": 2, "parallelism": 1, "backoffLimit": 1,
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "work", "image": "busybox"}]}}}});
        if let Some(a) = annotation {
            job["spec"]["template"]["metadata"]["annotations"][SIMULATE_ANNOTATION] = json!(a);
        }
        job
    };
    store
        .create(&jobs, Some("default"), job("ok", None), false)
        .expect("create");
    store
        .create(
            &jobs,
            Some("default"),
            job("bad", Some("fail-after=1s")),
            false,
        )
        .expect("create");
    run_for(15).await;
    let ok = store.get(&jobs, Some("default"), "ok").expect("job");
    assert_eq!(ok.at("/status/succeeded"), Some(&json!(2)), "{ok:#}");
    assert_eq!(
        condition(&ok, "Complete").map(|c| &c["status"]),
        Some(&json!("True"))
    );
    let bad = store.get(&jobs, Some("default"), "bad").expect("job");
    assert_eq!(bad.at("/status/failed"), Some(&json!(2)), "{bad:#}");
    assert_eq!(
        condition(&bad, "Failed").map(|c| &c["reason"]),
        Some(&json!("BackoffLimitExceeded"))
    );
}

#[tokio::test(start_paused = true)]
async fn daemon_sets_stateful_sets_and_unschedulable_pods_should_behave_as_in_kube() {
    let (store, _running) = running(config());
    let template = json!({"metadata": {"labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    store
        .create(
            &rt(&store, "apps", "daemonsets"),
            Some("default"),
            json!({"apiVersion": "apps/v1",
            "kind": "DaemonSet", "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template}}),
            false,
        )
        .expect("daemonset");
    store
        .create(
            &rt(&store, "apps", "statefulsets"),
            Some("default"),
            json!({"apiVersion": "apps/v1",
            "kind": "StatefulSet", "metadata": {"name": "db"},
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "y"}},
                "template": {"metadata": {"labels": {"app": "y"}},
                    "spec": {"containers": [{"name": "c", "image": "postgres"}]}}}}),
            false,
        )
        .expect("statefulset");
    store
        .create(
            &rt(&store, "", "pods"),
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "huge"},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "64"}}}]}}),
            false,
        )
        .expect("pod");
    run_for(10).await;

    let all = pods(&store);
    let agents: Vec<_> = all
        .iter()
        .filter(|p| namespace_and_name(p).1.starts_with("agent-"))
        .collect();
    let mut nodes: Vec<&str> = agents.iter().map(|p| node_name(p)).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, ["krec-node-0", "krec-node-1"], "one agent per node");
    let db: BTreeSet<&str> = all
        .iter()
        .map(|p| namespace_and_name(p).1)
        .filter(|n| n.starts_with("db-"))
        .collect();
    assert_eq!(db, BTreeSet::from(["db-0", "db-1", "db-2"]));
    let sts = store
        .get(&rt(&store, "apps", "statefulsets"), Some("default"), "db")
        .expect("sts");
    assert_eq!(sts.at("/status/readyReplicas"), Some(&json!(3)), "{sts:#}");
    let huge = store
        .get(&rt(&store, "", "pods"), Some("default"), "huge")
        .expect("pod");
    let scheduled = condition(&huge, "PodScheduled").expect("condition");
    assert_eq!(scheduled["reason"], "Unschedulable");
    assert_eq!(
        scheduled["message"],
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    assert_eq!(phase(&huge), "Pending");
}

#[tokio::test(start_paused = true)]
async fn a_crashing_pod_should_make_its_deployment_unavailable() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    let mut d = deployment("crash", 2, "app:1");
    d["spec"]["template"]["metadata"]["annotations"] = json!({SIMULATE_ANNOTATION: "crashloop"});
    store
        .create(&deployments, Some("default"), d, false)
        .expect("create");
    run_for(30).await;
    let d = store
        .get(&deployments, Some("default"), "crash")
        .expect("get");
    assert_eq!(
        condition(&d, "Available").map(|c| &c["status"]),
        Some(&json!("False")),
        "{d:#}"
    );
    assert_eq!(d.at("/status/unavailableReplicas"), Some(&json!(2)));
    let pod = pods(&store).into_iter().next().expect("a pod");
    assert_eq!(
        pod.at("/status/containerStatuses/0/state/waiting/reason"),
        Some(&json!("CrashLoopBackOff")),
        "{pod:#}"
    );
    assert!(
        pod.at("/status/containerStatuses/0/restartCount")
            .and_then(Value::as_i64)
            >= Some(1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_replica_set_should_adopt_matching_orphans_rather_than_add_pods() {
    let store = store();
    let pods_rt = rt(&store, "", "pods");
    for i in 0..2 {
        store
            .create(
                &pods_rt,
                Some("default"),
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("hand-{i}"), "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
                false,
            )
            .expect("pod");
    }
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let _task = spawn(
        Arc::new(crate::admission::Admission::new(store.clone())),
        config(),
        stopped,
    )
    .expect("controllers run");
    store
        .create(
            &rt(&store, "apps", "replicasets"),
            Some("default"),
            json!({"apiVersion": "apps/v1",
            "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}),
            false,
        )
        .expect("replicaset");
    run_for(3).await;
    let all = pods(&store);
    assert_eq!(all.len(), 3, "two adopted, one created");
    assert!(
        all.iter()
            .all(|p| controller_of(p).is_some_and(|o| o.kind == "ReplicaSet" && o.name == "web"))
    );
}

#[tokio::test(start_paused = true)]
async fn running_pods_should_terminate_gracefully_through_their_kubelet() {
    let (store, _running) = running(config());
    let pods_rt = rt(&store, "", "pods");
    for name in ["a", "b"] {
        store
            .create(
                &pods_rt,
                Some("default"),
                json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
                false,
            )
            .expect("pod");
    }
    run_for(3).await;
    let deleted = store
        .delete(&pods_rt, Some("default"), "a", &DeleteOptions::default())
        .expect("delete");
    assert!(
        is_deleting(&deleted),
        "a running Pod is marked, not removed: {deleted:#}"
    );
    assert_eq!(
        deleted.at("/metadata/deletionGracePeriodSeconds"),
        Some(&json!(30))
    );
    let forced = DeleteOptions {
        grace_period: Some(0),
        ..DeleteOptions::default()
    };
    store
        .delete(&pods_rt, Some("default"), "b", &forced)
        .expect("delete");
    assert!(
        store.get(&pods_rt, Some("default"), "b").is_err(),
        "grace 0 removes at once"
    );
    run_for(2).await;
    assert!(
        store.get(&pods_rt, Some("default"), "a").is_err(),
        "the kubelet removed it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_terminating_pod_should_survive_updates_until_its_kubelet_removes_it() {
    let store = store();
    let mut slow = config();
    slow.pod_start = Duration::from_secs(5);
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let _task = spawn(
        Arc::new(crate::admission::Admission::new(store.clone())),
        slow,
        stopped,
    )
    .expect("controllers run");
    let pods_rt = rt(&store, "", "pods");
    store
        .create(
            &pods_rt,
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            false,
        )
        .expect("pod");
    run_for(7).await;
    store
        .delete(&pods_rt, Some("default"), "p", &DeleteOptions::default())
        .expect("delete");
    let mut labelled = (*store.get(&pods_rt, Some("default"), "p").expect("marked")).clone();
    labelled["metadata"]["labels"] = json!({"touched": "yes"});
    store
        .update(
            &pods_rt,
            Some("default"),
            "p",
            labelled,
            false,
            WriteOptions::default(),
        )
        .expect("update");
    let still = store
        .get(&pods_rt, Some("default"), "p")
        .expect("an update does not remove it");
    assert!(is_deleting(&still));
    run_for(6).await;
    assert!(
        store.get(&pods_rt, Some("default"), "p").is_err(),
        "its kubelet removed it"
    );
    let events = store.objects(&rt(&store, "", "events"), Some("default"));
    let killing = events.iter().filter(|e| e["reason"] == "Killing").count();
    assert_eq!(killing, 1, "one Killing event");
}

#[tokio::test(start_paused = true)]
async fn odd_objects_should_not_stop_the_controllers() {
    let (store, _running) = running(config());
    let pods_rt = rt(&store, "", "pods");
    store
        .create(
            &pods_rt,
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "odd",
                "annotations": {SIMULATE_ANNOTATION: "start-after=99999999999999999999h"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            false,
        )
        .expect("pod");
    let mut odd = (*store.get(&pods_rt, Some("default"), "odd").expect("get")).clone();
    odd["status"] = json!("not a status");
    store
        .update(
            &pods_rt,
            Some("default"),
            "odd",
            odd,
            true,
            WriteOptions::default(),
        )
        .expect("status");
    let deployments = rt(&store, "apps", "deployments");
    store
        .create(
            &deployments,
            Some("default"),
            deployment("web", 2, "nginx"),
            false,
        )
        .expect("create");
    run_for(5).await;
    let d = store
        .get(&deployments, Some("default"), "web")
        .expect("get");
    assert_eq!(d.at("/status/availableReplicas"), Some(&json!(2)), "{d:#}");
}

#[tokio::test(start_paused = true)]
async fn a_deployment_applied_again_after_an_orphan_delete_should_take_its_replica_set_back() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    let replica_sets = rt(&store, "apps", "replicasets");
    store
        .create(
            &deployments,
            Some("default"),
            deployment("web", 2, "nginx"),
            false,
        )
        .expect("create");
    run_for(3).await;
    let orphan = DeleteOptions {
        propagation: crate::store::Propagation::Orphan,
        ..DeleteOptions::default()
    };
    store
        .delete(&deployments, Some("default"), "web", &orphan)
        .expect("delete");
    run_for(1).await;
    let created = store
        .create(
            &deployments,
            Some("default"),
            deployment("web", 2, "nginx"),
            false,
        )
        .expect("create again");
    run_for(3).await;
    let owned = store.objects(&replica_sets, Some("default"));
    assert_eq!(owned.len(), 1, "adopted, not created again");
    assert_eq!(
        controller_of(&owned[0]).map(|o| o.uid.to_owned()),
        Some(uid(&created).to_owned())
    );
    let d = store
        .get(&deployments, Some("default"), "web")
        .expect("get");
    assert_eq!(d.at("/status/availableReplicas"), Some(&json!(2)), "{d:#}");
    assert_eq!(pods(&store).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn repeated_events_should_be_counted_not_repeated() {
    let (store, _running) = running(config());
    store
        .create(
            &rt(&store, "", "pods"),
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "crashy", "annotations": {SIMULATE_ANNOTATION: "crashloop"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}),
            false,
        )
        .expect("pod");
    run_for(120).await;
    let events = store.objects(&rt(&store, "", "events"), Some("default"));
    let back_off: Vec<_> = events.iter().filter(|e| e["reason"] == "BackOff").collect();
    assert_eq!(back_off.len(), 1, "one Event");
    assert!(back_off[0]["count"].as_i64() > Some(1), "{:#}", back_off[0]);
}

#[tokio::test(start_paused = true)]
async fn a_rollout_without_progress_should_exceed_its_deadline() {
    let (store, _running) = running(config());
    let deployments = rt(&store, "apps", "deployments");
    let mut d = deployment("stuck", 2, "app:1");
    d["spec"]["progressDeadlineSeconds"] = json!(30);
    d["spec"]["template"]["metadata"]["annotations"] = json!({SIMULATE_ANNOTATION: "never-ready"});
    store
        .create(&deployments, Some("default"), d, false)
        .expect("create");
    run_for(10).await;
    let d = store
        .get(&deployments, Some("default"), "stuck")
        .expect("get");
    assert_eq!(
        condition(&d, "Progressing").map(|c| &c["status"]),
        Some(&json!("True")),
        "{d:#}"
    );
    run_for(30).await;
    let d = store
        .get(&deployments, Some("default"), "stuck")
        .expect("get");
    let progressing = condition(&d, "Progressing").expect("condition");
    assert_eq!(progressing["status"], "False", "{d:#}");
    assert_eq!(progressing["reason"], "ProgressDeadlineExceeded");
    assert!(
        progressing["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("has timed out progressing."))
    );
}

#[tokio::test(start_paused = true)]
async fn services_should_get_endpoints_and_namespaces_their_defaults() {
    let mut with_ca = config();
    with_ca.root_ca = Some("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n".into());
    let (store, _running) = running(with_ca);
    store
        .create(
            &rt(&store, "", "namespaces"),
            None,
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team"}}),
            false,
        )
        .expect("namespace");
    store
        .create(
            &rt(&store, "", "services"),
            Some("default"),
            json!({"apiVersion": "v1",
            "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
            false,
        )
        .expect("service");
    let mut d = deployment("web", 2, "nginx");
    d["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"name": "http", "containerPort": 8080}]);
    store
        .create(
            &rt(&store, "apps", "deployments"),
            Some("default"),
            d,
            false,
        )
        .expect("deployment");
    run_for(5).await;

    let endpoints = store
        .get(&rt(&store, "", "endpoints"), Some("default"), "web")
        .expect("endpoints");
    let subset = &endpoints["subsets"][0];
    assert_eq!(
        subset["addresses"].as_array().map(Vec::len),
        Some(2),
        "{endpoints:#}"
    );
    assert_eq!(
        subset["ports"],
        json!([{"name": "http", "port": 8080, "protocol": "TCP"}])
    );
    assert!(
        subset["addresses"][0]["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.244."))
    );
    let slices = store.objects(
        &rt(&store, "discovery.k8s.io", "endpointslices"),
        Some("default"),
    );
    assert_eq!(slices.len(), 1);
    assert_eq!(
        slices[0]["endpoints"].as_array().map(Vec::len),
        Some(2),
        "{:#}",
        slices[0]
    );
    assert_eq!(
        slices[0]
            .at("/metadata/labels")
            .and_then(|l| l.get("kubernetes.io/service-name")),
        Some(&json!("web"))
    );

    for ns in ["default", "team"] {
        assert!(
            store.contains(&rt(&store, "", "serviceaccounts"), Some(ns), "default"),
            "{ns}"
        );
        let ca = store
            .get(&rt(&store, "", "configmaps"), Some(ns), "kube-root-ca.crt")
            .expect("root CA");
        assert!(
            ca["data"]["ca.crt"]
                .as_str()
                .is_some_and(|c| c.contains("BEGIN CERTIFICATE"))
        );
    }
    // Scaled down to 0: the Endpoints have no subsets, the slice no endpoints.
    let deployments = rt(&store, "apps", "deployments");
    let mut d = (*store
        .get(&deployments, Some("default"), "web")
        .expect("get"))
    .clone();
    d["spec"]["replicas"] = json!(0);
    store
        .update(
            &deployments,
            Some("default"),
            "web",
            d,
            false,
            WriteOptions::default(),
        )
        .expect("scale");
    run_for(5).await;
    let endpoints = store
        .get(&rt(&store, "", "endpoints"), Some("default"), "web")
        .expect("endpoints");
    assert_eq!(endpoints.get("subsets"), None, "{endpoints:#}");
}
