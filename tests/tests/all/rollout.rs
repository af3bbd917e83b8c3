//! Rollouts: a candidate version shadowing the live one (dry-run writes, compared), promoted or
//! rolled back by its policy; a canary's share of the keys; record and replay.

use std::time::Duration;

use krec::manifest::{Manifest, PromotePolicy, RolloutMode, RolloutSpec};
use krec::rollout::recording::{self, Sink};
use krec::vocab::PatchType;
use krec_tests::{
    Live, annotation, built_module, cm_gvk, configmap, deployment_gvk, foo_gvk, owned_pod as pod,
    replicaset, rs_gvk, sample_manifest, sample_objects,
};
use serde_json::{Value, json};

fn module(name: &str) -> std::path::PathBuf {
    built_module(&format!("{name}.wasm"))
}

fn rollout(candidate: &str, promote: Option<u32>) -> RolloutSpec {
    RolloutSpec {
        candidate: module(candidate),
        mode: RolloutMode::Shadow,
        share: 10,
        config: None,
        shadow_cpu: 100,
        promote: promote.map(|after_reconciles| PromotePolicy {
            after_reconciles,
            max_divergence_percent: 0.0,
        }),
        critical: Vec::new(),
        min_reconciles: 3,
    }
}

fn foo_controller_trying(spec: RolloutSpec) -> Manifest {
    let mut manifest = sample_manifest("foo-controller");
    manifest.spec.rollout = Some(spec);
    manifest
}

async fn scale_foo(live: &Live, replicas: i64) {
    live.api
        .patch(
            &foo_gvk(),
            Some("default"),
            "example-foo",
            PatchType::Merge,
            &json!({"spec": {"replicas": replicas}}),
            false,
            "test",
        )
        .await
        .expect("patch foo");
}

async fn replicas(live: &Live) -> Option<Value> {
    let d = live
        .get(&deployment_gvk(), Some("default"), "example-foo")
        .await?;
    Some(d["spec"]["replicas"].clone())
}

/// The rollout's report once `ready` holds of it.
async fn report_when(live: &Live, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let controller = live.controller("foo-controller");
    live.eventually(what, || async {
        controller.rollout_report().filter(|r| ready(r))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_candidate_should_never_write_and_its_divergence_should_name_the_field() {
    let live = Live::start(
        vec![foo_controller_trying(rollout("foo_plus", None))],
        sample_objects("foo-controller"),
    )
    .await;
    live.eventually("the Deployment", || replicas(&live)).await;
    for n in [3, 5, 2] {
        scale_foo(&live, n).await;
        live.eventually(&format!("replicas {n}"), || async {
            (replicas(&live).await? == json!(n)).then_some(())
        })
        .await;
    }
    let report = report_when(&live, "divergences", |r| {
        r["candidateCounts"]["diverged"].as_u64() >= Some(3)
    })
    .await;
    // The candidate (replicas + 1) never changed the Deployment: its writes were dry runs.
    assert_eq!(replicas(&live).await, Some(json!(2)));
    let diff = report["divergences"].to_string();
    assert!(diff.contains("spec.replicas: 3 → 4"), "{report:#}");
    assert_eq!(report["phase"], "Shadowing", "no policy: it stays a shadow");
    let metrics = live.manager.scrape();
    assert!(
        metrics.contains(
            "krec_shadow_reconciles_total{guest=\"foo-controller\",outcome=\"diverged\"}"
        ),
        "{metrics}"
    );
    let deployment = live
        .get(&deployment_gvk(), Some("default"), "example-foo")
        .await
        .expect("deployment");
    let managers: Vec<&str> = deployment["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.iter().all(|m| *m != "unknown"), "{managers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_candidate_should_agree_and_be_promoted() {
    let live = Live::start(
        vec![foo_controller_trying(rollout("foo_controller", Some(3)))],
        sample_objects("foo-controller"),
    )
    .await;
    live.eventually("the Deployment", || replicas(&live)).await;
    let version = live.controller("foo-controller").version().number;
    for n in [3, 4, 5, 6] {
        scale_foo(&live, n).await;
        live.eventually(&format!("replicas {n}"), || async {
            (replicas(&live).await? == json!(n)).then_some(())
        })
        .await;
    }
    let report = report_when(&live, "promotion", |r| r["phase"] == "Promoted").await;
    assert_eq!(report["candidateCounts"]["diverged"], 0, "{report:#}");
    assert_eq!(report["candidateCounts"]["traps"], 0, "{report:#}");
    let controller = live.controller("foo-controller");
    assert_eq!(controller.version().number, version + 1, "swapped in");
    assert!(controller.rollout().is_none());
    // The promoted version reconciles.
    scale_foo(&live, 7).await;
    live.eventually("replicas 7 after promotion", || async {
        (replicas(&live).await? == json!(7)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_candidate_should_be_rolled_back_and_lose_no_key() {
    let live = Live::start(
        vec![foo_controller_trying(rollout("foo_trap", Some(1000)))],
        sample_objects("foo-controller"),
    )
    .await;
    live.eventually("the Deployment", || replicas(&live)).await;
    scale_foo(&live, 3).await;
    let report = report_when(&live, "rollback", |r| r["phase"] == "RolledBack").await;
    assert!(
        report["reason"]
            .as_str()
            .is_some_and(|r| r.contains("trapped")),
        "{report:#}"
    );
    let controller = live.controller("foo-controller");
    assert!(
        controller.rollout().is_none(),
        "no candidate after a rollback"
    );
    // Every key still reconciled by the live version: none lost.
    live.eventually("replicas 3", || async {
        (replicas(&live).await? == json!(3)).then_some(())
    })
    .await;
    scale_foo(&live, 4).await;
    live.eventually("replicas 4 after the rollback", || async {
        (replicas(&live).await? == json!(4)).then_some(())
    })
    .await;
    assert_eq!(
        controller.stats().traps(),
        0,
        "the live version never trapped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_should_reconcile_its_share_of_the_keys_for_real_by_a_stable_hash() {
    const OBJECTS: usize = 200;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stamper.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: stamper}}
spec:
  module: {}
  for: {{apiVersion: v1, kind: ConfigMap}}
  maxConcurrentReconciles: 2
  permissions:
    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, patch]}}
  rollout: {{candidate: {}, mode: canary, share: 25}}
",
            module("stamper_a").display(),
            module("stamper_b").display()
        ),
    )
    .expect("manifest");
    let manifest = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let live = Live::start(vec![manifest], (0..OBJECTS).map(configmap).collect()).await;
    let stamps = live
        .eventually("every ConfigMap stamped", || async {
            let cms = live.api.list(&cm_gvk(), &Default::default()).await.ok()?;
            let stamps: Vec<(String, String)> = cms
                .iter()
                .filter_map(|cm| {
                    let name = cm["metadata"]["name"].as_str()?.to_owned();
                    name.starts_with("cm-").then(|| {
                        annotation(cm, "krec.dev/stamped-by").map(|b| (name, b.to_owned()))
                    })?
                })
                .collect();
            (stamps.len() == OBJECTS).then_some(stamps)
        })
        .await;
    let by_candidate: Vec<&String> = stamps
        .iter()
        .filter(|(_, by)| by == "b")
        .map(|(name, _)| name)
        .collect();
    // Exactly the keys whose hash falls in the share, written for real by the candidate.
    for (name, by) in &stamps {
        let expected = if krec::rollout::key_percentile(Some("default"), name) < 25 {
            "b"
        } else {
            "a"
        };
        assert_eq!(by, expected, "{name}");
    }
    let share = by_candidate.len() as f64 / OBJECTS as f64;
    assert!((0.15..0.35).contains(&share), "{share}");
    let report = live
        .controller("stamper")
        .rollout_report()
        .expect("a rollout");
    assert_eq!(report["mode"], "canary");
    assert!(report["candidateCounts"]["reconciles"].as_u64() >= Some(by_candidate.len() as u64));
}

#[test]
fn the_canary_hash_should_split_keys_evenly() {
    let taken = (0..4000)
        .filter(|i| krec::rollout::key_percentile(Some("default"), &format!("object-{i}")) < 25)
        .count();
    assert!((900..1100).contains(&taken), "{taken}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_of_pod_counter_should_replay_the_same_on_its_module_and_differ_on_another() {
    let manifest = sample_manifest("pod-counter");
    let live = Live::start(vec![manifest.clone()], vec![replicaset()]).await;
    let controller = live.controller("pod-counter");
    let (sink, mut lines) = Sink::new(false);
    assert!(controller.recording().start(sink));
    let rs = live
        .get(&rs_gvk(), Some("default"), "web")
        .await
        .expect("rs");
    let uid = rs["metadata"]["uid"].as_str().expect("uid").to_owned();
    for i in 0..4 {
        live.api
            .create(&pod(&format!("web-{i}"), &uid), "test")
            .await
            .expect("pod");
    }
    live.eventually("pod-count 4", || async {
        let rs = live.get(&rs_gvk(), Some("default"), "web").await?;
        (rs.pointer("/metadata/labels/pod-count")? == "4").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    controller.recording().stop();
    let header = recording::Header::of(&manifest, "recorded", false);
    let mut text = serde_json::to_string(&recording::Line::Header(header)).expect("header") + "\n";
    while let Ok(line) = lines.try_recv() {
        text.push_str(&line);
        text.push('\n');
    }
    drop(live);

    // No cluster from here on: the recording is replayed on a module (what `krec replay` runs).
    let (_, reconciles) = recording::parse(&text).expect("parse");
    assert!(reconciles.len() >= 2, "{text}");
    assert!(
        reconciles.iter().any(|r| !r.tape.writes.is_empty()),
        "{text}"
    );
    let replay = |module: std::path::PathBuf| {
        let mut manifest = manifest.clone();
        manifest.spec.module = module;
        let reconciles = reconciles.clone();
        async move {
            let engine = krec::engine::new_engine().expect("engine");
            let linker = krec::guest::new_linker(&engine).expect("linker");
            let module =
                krec::guest::GuestModule::load(&engine, &linker, manifest.into()).expect("load");
            let mut diffs = Vec::new();
            let summary =
                krec::cli::replay::replay(std::sync::Arc::new(module), &reconciles, |r, lines| {
                    diffs.push(format!("{}: {}", r.key(), lines.join("; ")));
                })
                .await
                .expect("replay");
            (summary, diffs)
        }
    };
    let (same, diffs) = replay(manifest.spec.module.clone()).await;
    assert_eq!(same.diverged, 0, "{diffs:?}");
    assert_eq!(same.missing, 0, "{diffs:?}");
    assert_eq!(same.reconciles, reconciles.len());
    let (changed, diffs) = replay(module("pod_counter_plus")).await;
    assert!(changed.diverged > 0, "{changed:?}");
    assert!(
        diffs
            .iter()
            .any(|d| d.contains("metadata.labels.pod-count")),
        "{diffs:?}"
    );
}
