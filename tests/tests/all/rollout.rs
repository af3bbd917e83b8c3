//! Rollouts: a candidate version shadowing the live one (dry-run writes, compared), promoted or
//! rolled back by its policy; a canary's share of the keys; record and replay.

use std::time::Duration;

use krec::manifest::{Manifest, PromotePolicy, RolloutMode, RolloutSpec};
use krec::rollout::recording::{self, Sink};
use krec_core::PatchType;
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
    assert_eq!(
        controller.version().number,
        version,
        "the same module promoted: the same version of the module"
    );
    // The report says the decision as soon as it is made; the candidate goes just after.
    live.eventually("no candidate after the promotion", || async {
        controller.rollout().is_none().then_some(())
    })
    .await;
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
    // The report says the decision as soon as it is made; the candidate goes just after.
    let controller = live.controller("foo-controller");
    live.eventually("no candidate after a rollback", || async {
        controller.rollout().is_none().then_some(())
    })
    .await;
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
            let engine = krec::guest::engine::new_engine().expect("engine");
            let linker = krec::guest::new_linker(&engine).expect("linker");
            let module =
                krec::guest::GuestModule::load(&engine, &linker, manifest.into()).expect("load");
            let mut diffs = Vec::new();
            let summary =
                krec::cli::replay::replay(std::sync::Arc::new(module), reconciles, |r, lines| {
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

/// The mirror test guest (`tests/guests/mirror.rs`): version `live` running, `candidate`
/// shadowing it under `rollout` (YAML, beside `candidate`).
fn mirror_trying(live: &str, candidate: &str, rollout: &str) -> Manifest {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mirror.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1
kind: Reconciler
metadata: {{name: mirror}}
spec:
  module: {}
  for: {{apiVersion: v1, kind: ConfigMap}}
  permissions:
    - {{apiVersion: v1, kind: ConfigMap, verbs: [get, list, watch, create, update, delete]}}
  rollout: {{candidate: {}, mode: shadow, shadowCpu: 100, {rollout}}}
",
            module(live).display(),
            module(candidate).display()
        ),
    )
    .expect("manifest");
    Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// A source ConfigMap for the mirror guest: `data.value` copied into `to`.
fn mirror_source(value: u32, to: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default",
            "annotations": {"mirror.krec.dev/to": to}},
        "data": {"value": value.to_string()}})
}

/// Runs the mirror's live version beside `candidate` through 24 edits of its source (data
/// changed, a namespace dropped, one added) and answers the rollout's last report.
async fn mirror_shadowed(candidate: &str, rollout: &str) -> Value {
    let namespaces: Vec<Value> = ["team-a", "team-b", "team-c", "team-d"]
        .iter()
        .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
        .collect();
    let live = Live::start(
        vec![mirror_trying("mirror_a", candidate, rollout)],
        namespaces,
    )
    .await;
    let copy = |ns: &'static str| {
        let live = &live;
        async move { live.get(&cm_gvk(), Some(ns), "settings").await }
    };
    live.api
        .create(&mirror_source(0, "team-a,team-b,team-c"), "test")
        .await
        .expect("source");
    for i in 1..=24u32 {
        // Every fourth edit moves the copies: team-c dropped, team-d added, and back.
        let to = if i % 8 == 4 {
            "team-a,team-b,team-d"
        } else {
            "team-a,team-b,team-c"
        };
        let source = live
            .get(&cm_gvk(), Some("default"), "settings")
            .await
            .expect("source");
        let mut edited = mirror_source(i, to);
        edited["metadata"]["resourceVersion"] = source["metadata"]["resourceVersion"].clone();
        live.api.update(&edited, false, "test").await.expect("edit");
        let (kept, gone) = if i % 8 == 4 {
            ("team-d", "team-c")
        } else {
            ("team-c", "team-d")
        };
        let copy_kept = live
            .eventually(&format!("edit {i} mirrored"), || async {
                let copy_kept = copy(kept).await?;
                let value = copy_kept.pointer("/data/value")?.as_str()? == i.to_string();
                (value && copy(gone).await.is_none()).then_some(copy_kept)
            })
            .await;
        // While it is tried, the candidate never writes for real: the copies carry no
        // version label (read before the phase: a promotion after it is no matter).
        let phase = live
            .controller("mirror")
            .rollout_report()
            .map(|r| r["phase"].clone());
        if phase.as_ref().is_some_and(|p| p == "Shadowing") {
            assert!(
                copy_kept
                    .pointer("/metadata/labels/mirror.krec.dev~1by")
                    .is_none(),
                "{copy_kept:#}"
            );
        }
    }
    let controller = live.controller("mirror");
    live.eventually("the rollout decided", || async {
        let report = controller.rollout_report()?;
        (report["phase"] != "Shadowing").then_some(report)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_that_creates_updates_and_deletes_should_be_judged_on_its_own_writes() {
    // Version b labels its copies: every write differs from the live version's, never fails.
    let report = mirror_shadowed(
        "mirror_b",
        "minReconciles: 20, critical: [data], promote: {afterReconciles: 20, maxDivergencePercent: 100}",
    )
    .await;
    assert_eq!(report["phase"], "Promoted", "{report:#}");
    let counts = &report["candidateCounts"];
    assert_eq!(counts["errors"], 0, "{report:#}");
    assert_eq!(counts["traps"], 0, "{report:#}");
    assert!(counts["reconciles"].as_u64() >= Some(20), "{report:#}");
    assert!(counts["diverged"].as_u64() > Some(0), "{report:#}");
    // Writes paired by object: the label differs, the copy's data never does.
    let lines: Vec<&str> = report["divergences"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["diff"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("metadata.labels.mirror.krec.dev/by")),
        "{report:#}"
    );
    for line in &lines {
        assert!(!line.contains("data.value"), "{line}");
        // Never one object's write against another's ("live create team-c, candidate update
        // team-b"): writes are paired by object.
        assert!(!line.contains("), candidate "), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_shadow_that_creates_should_agree_and_be_promoted() {
    let report = mirror_shadowed(
        "mirror_a",
        "minReconciles: 20, critical: [data], promote: {afterReconciles: 20, maxDivergencePercent: 0}",
    )
    .await;
    assert_eq!(report["phase"], "Promoted", "{report:#}");
    assert_eq!(report["candidateCounts"]["errors"], 0, "{report:#}");
    assert_eq!(report["candidateCounts"]["diverged"], 0, "{report:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_rollout_should_be_retried_and_forgotten_with_its_spec() {
    let manifest = foo_controller_trying(rollout("foo_plus", None));
    let live = Live::start(vec![manifest.clone()], sample_objects("foo-controller")).await;
    live.eventually("the Deployment", || replicas(&live)).await;
    let controller = live.controller("foo-controller");
    assert!(controller.decide(krec::rollout::Decision::RollBack("aborted by hand".into())));
    let report = report_when(&live, "the rollback", |r| r["phase"] == "RolledBack").await;
    assert_eq!(report["reason"], "aborted by hand");
    live.eventually("the rollback acted on", || async {
        controller.rollout().is_none().then_some(())
    })
    .await;
    // Decided: nothing to promote, and the reason says how to try again.
    assert!(!controller.decide(krec::rollout::Decision::Promote("by hand".into())));
    assert!(
        controller
            .no_rollout_reason()
            .contains("`krec diff --retry` tries it again"),
        "{}",
        controller.no_rollout_reason()
    );
    controller.retry_candidate().expect("retried");
    report_when(&live, "the candidate tried again", |r| {
        r["phase"] == "Shadowing"
    })
    .await;
    assert!(controller.retry_candidate().is_err(), "one is being tried");
    // The candidate's log lines say `version="candidate"`, the live version's `"live"`.
    let tried = controller.rollout().expect("a rollout");
    assert_eq!(tried.candidate().manifest().version_role(), "candidate");
    assert_eq!(controller.module().manifest().version_role(), "live");
    // `spec.rollout` removed: the module is the same, so is its version; no rollout is left
    // to report (its condition goes from the status).
    let version = controller.version().number;
    let mut without = manifest;
    without.spec.rollout = None;
    let report = live.manager.apply(vec![Ok(without)]).await;
    assert_eq!(report.swapped, ["foo-controller"], "{report:?}");
    assert!(controller.rollout_report().is_none());
    assert_eq!(controller.version().number, version, "the same module");
}
