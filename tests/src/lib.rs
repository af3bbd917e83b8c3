//! Test harness for krec's integration tests: load a guest's real `.wasm` into the host against an
//! in-memory object set. The tests themselves are in `tests/tests/`, one file per topic.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use krec::cluster::{ClusterAccess, Gvk, MemoryCluster};
use krec::guest::{Action, GuestModule, GuestWorker, ReconcileError};
use krec::manifest::Manifest;
use serde_json::Value;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// The manifest of a sample guest, with a clear failure if its module was not built.
pub fn sample_manifest(guest_dir: &str) -> Manifest {
    let path = repo_root()
        .join("sample-guests")
        .join(guest_dir)
        .join("manifest.yaml");
    let manifest = Manifest::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        manifest.spec.module.exists(),
        "{} is missing: run `make guests` first",
        manifest.spec.module.display()
    );
    manifest
}

/// A guest running against an in-memory cluster.
pub struct Harness {
    /// The objects the guest reads and writes.
    pub cluster: Arc<MemoryCluster>,
    /// The worker running the guest.
    pub worker: GuestWorker,
}

impl Harness {
    /// Load the sample guest in `sample-guests/<guest_dir>`, with the CRDs in its `crd/`.
    pub fn sample(guest_dir: &str) -> Self {
        let harness = Self::with_manifest(sample_manifest(guest_dir));
        let crd_dir = repo_root()
            .join("sample-guests")
            .join(guest_dir)
            .join("crd");
        if crd_dir.is_dir() {
            let objects =
                krec::local_cluster::read_objects(&crd_dir).unwrap_or_else(|e| panic!("{e}"));
            for crd in objects
                .into_iter()
                .filter(|o| o["kind"] == "CustomResourceDefinition")
            {
                let rt = harness
                    .cluster
                    .store()
                    .registry()
                    .by_plural("apiextensions.k8s.io", "v1", "customresourcedefinitions")
                    .expect("CRDs are served");
                harness
                    .cluster
                    .store()
                    .create(&rt, None, crd, false)
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        harness
    }

    /// Load the guest a manifest names.
    pub fn with_manifest(manifest: Manifest) -> Self {
        let engine = krec::engine::new_engine().expect("engine");
        let linker = krec::guest::new_linker(&engine).expect("linker");
        let module = GuestModule::load(&engine, &linker, Arc::new(manifest))
            .unwrap_or_else(|e| panic!("{e}"));
        let cluster = Arc::new(MemoryCluster::new());
        let worker = GuestWorker::new(Arc::new(module), cluster.clone());
        Harness { cluster, worker }
    }

    /// Run one reconcile.
    pub async fn reconcile(
        &mut self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Action, ReconcileError> {
        self.worker.reconcile(namespace, name).await
    }

    /// Create an object directly in the cluster.
    pub async fn create(&self, object: Value) -> Value {
        self.cluster.create(object).await.expect("create")
    }

    /// Create namespaces (objects need theirs to exist).
    pub async fn namespaces(&self, names: &[&str]) {
        for name in names {
            self.create(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})).await;
        }
    }

    /// Read an object directly from the cluster.
    pub async fn get(&self, gvk: &Gvk, namespace: &str, name: &str) -> Option<Value> {
        self.cluster.get(gvk, Some(namespace), name).await.ok()
    }
}

/// v1 Pod.
pub fn pod_gvk() -> Gvk {
    Gvk::new("", "v1", "Pod")
}
/// apps/v1 ReplicaSet.
pub fn rs_gvk() -> Gvk {
    Gvk::new("apps", "v1", "ReplicaSet")
}
/// v1 ConfigMap.
pub fn cm_gvk() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}
/// apps/v1 Deployment.
pub fn deployment_gvk() -> Gvk {
    Gvk::new("apps", "v1", "Deployment")
}
/// samplecontroller.k8s.io/v1alpha1 Foo.
pub fn foo_gvk() -> Gvk {
    Gvk::new("samplecontroller.k8s.io", "v1alpha1", "Foo")
}
