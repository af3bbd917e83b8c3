//! One validator, two ways: pod-stamper's `GenerationValidator` as a Wasm guest and compiled
//! into the host (`GuestModule::native_with_validator`) gives the same verdicts through
//! `GuestModule::admit`, reads the cache through the same checks, and reused instances keep
//! answering after a review that traps.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krec::cluster::{ClusterAccess, ClusterCalls, MemoryCluster};
use krec::guest::bindings::WitGvk;
use krec::guest::bindings::guest::{WitAdmissionRequest, WitOperation, WitUserInfo};
use krec::guest::{GuestModule, ReconcileError, Review};
use krec::manifest::Manifest;
use serde_json::{Value, json};

fn module_path() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/pod_stamper.wasm");
    assert!(
        path.exists(),
        "{} is missing: run `make guests`",
        path.display()
    );
    path
}

fn manifest(dir: &Path, permissions: &str) -> Arc<Manifest> {
    let path = dir.join("pod-stamper.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: pod-stamper}}\nspec:\n  module: {}\n  webhooks:\n    - type: validating\n      rules: [{{apiGroups: [\"\"], apiVersions: [v1], resources: [pods], operations: [UPDATE]}}]\n  permissions: {permissions}\n",
            module_path().display()
        ),
    )
    .expect("write manifest");
    Arc::new(Manifest::load(&path).expect("manifest"))
}

fn pod(generation: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default",
            "labels": {pod_stamper::GENERATION: generation}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
}

fn update_to(generation: &str) -> WitAdmissionRequest {
    WitAdmissionRequest {
        uid: "uid-1".into(),
        kind: WitGvk {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        },
        resource: "pods".into(),
        sub_resource: None,
        name: Some("web-0".into()),
        namespace: Some("default".into()),
        operation: WitOperation::Update,
        user_info: WitUserInfo {
            username: "admin".into(),
            groups: Vec::new(),
        },
        object: Some(pod(generation).to_string()),
        old_object: Some(pod("3").to_string()),
        dry_run: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_should_judge_alike_as_wasm_and_native() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = krec::guest::engine::new_engine().expect("engine");
    let linker = krec::guest::new_linker(&engine).expect("linker");
    let memory = Arc::new(MemoryCluster::new());
    memory.create(pod("3")).await.expect("pod");
    let cluster: Arc<dyn ClusterAccess> = memory;
    for permissions in ["[{apiVersion: v1, kind: Pod, verbs: [get]}]", "[]"] {
        let manifest = manifest(dir.path(), permissions);
        let wasm = GuestModule::load(&engine, &linker, manifest.clone()).expect("module");
        let native = krec::guest::native::module_with_validator(
            manifest,
            krec_guest::native::reconcile::<pod_stamper::PodStamper>,
            krec_guest::native::validate::<pod_stamper::GenerationValidator>,
        );
        assert!(wasm.has_admission() && native.has_admission());
        for module in [&wasm, &native] {
            let admit = |generation: &'static str| {
                module.admit(&cluster, None, Review::Validate, update_to(generation))
            };
            if permissions == "[]" {
                // Reading the stored Pod is forbidden: the validator panics, a trap either way
                // (the API server then applies failurePolicy), and the next review still runs.
                let err = admit("4").await.expect_err("forbidden read");
                assert!(matches!(err, ReconcileError::Trap { .. }), "{err}");
                assert!(matches!(admit("4").await, Err(ReconcileError::Trap { .. })));
                continue;
            }
            let allowed = admit("4").await.expect("review");
            assert!(allowed.allowed, "{:?}", allowed.message);
            let denied = admit("2").await.expect("review");
            assert!(!denied.allowed);
            assert_eq!(denied.code, Some(422));
            assert_eq!(
                denied.message.as_deref(),
                Some(
                    "metadata.labels[bench.krec.dev/generation]: Invalid value: 2: the Pod is at generation 3"
                )
            );
            let unparsable = admit("two").await.expect("review");
            assert!(!unparsable.allowed);
            // A mutate the guest does not export traps.
            assert!(
                module
                    .admit(&cluster, None, Review::Mutate, update_to("4"))
                    .await
                    .is_err()
            );
        }
    }
}
