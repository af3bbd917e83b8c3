//! Test harness for krec's integration tests: load a guest's real `.wasm` into the host against an
//! in-memory object set. The tests themselves are in `tests/tests/all/`, one module per topic, in one binary.

use std::path::Path;
use std::sync::Arc;

use krec::cluster::{ClusterCalls, MemoryCluster};
use krec::guest::{Action, GuestModule, GuestWorker, ReconcileError};
use krec::manifest::Manifest;
use krec_core::Gvk;
use serde_json::Value;

mod failure;

pub use krec_testkit::{
    OciRegistry, built_module, built_script_module, free_port, repo_root, wait_until,
};

/// The module cache the tests share: a directory under the workspace's `target/tmp` (the host
/// crate's tests use the same one when the target directory is the default), so that
/// each large Go, Python or TypeScript guest is compiled once per engine setting, not once
/// per test that runs it (entries are keyed by the module's digest and the engine's settings,
/// and written atomically). A test of the cache itself brings its own.
pub fn module_cache() -> krec::guest::ModuleCache {
    static CACHE: std::sync::OnceLock<krec::guest::ModuleCache> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(|| {
            let dir = repo_root().join("target/tmp/krec-tests-module-cache");
            krec::guest::ModuleCache::new(&dir)
                .unwrap_or_else(|err| panic!("the tests' module cache {}: {err}", dir.display()))
        })
        .clone()
}

/// What a host needs to pull from a test [`OciRegistry`].
pub trait HostRegistries {
    /// The registries a host uses to reach this one (over plain HTTP), keeping pulled modules
    /// in `store`.
    fn registries(&self, store: &Path) -> Arc<krec::guests::oci::Registries>;
}

impl HostRegistries for OciRegistry {
    fn registries(&self, store: &Path) -> Arc<krec::guests::oci::Registries> {
        Arc::new(krec::guests::oci::Registries::new(
            store.to_owned(),
            vec![self.addr.clone()],
        ))
    }
}

/// The manifest of a sample guest, with a clear failure if its module was not built.
pub fn sample_manifest(guest_dir: &str) -> Manifest {
    built_manifest(
        &repo_root()
            .join("sample-guests")
            .join(guest_dir)
            .join("manifest.yaml"),
    )
}

/// The manifest at `path`, with a clear failure if its module was not built.
pub fn built_manifest(path: &Path) -> Manifest {
    let manifest = Manifest::load(path).unwrap_or_else(|e| panic!("{e}"));
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
                krec::manifest::objects::read_objects(&crd_dir).unwrap_or_else(|e| panic!("{e}"));
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
        // The engine `krec run` gives the guest's isolation (pooled for per-reconcile).
        let engines = krec::guest::Engines::new().expect("engines");
        let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
        let module =
            GuestModule::load(engine, linker, Arc::new(manifest)).unwrap_or_else(|e| panic!("{e}"));
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

/// The host running live against the embedded API server over HTTPS, as `krec dev` does.
pub struct Live {
    /// The embedded API server.
    pub cluster: krec_apiserver::Server,
    /// A kube client for it (the test's own, not the host's).
    pub client: kube::Client,
    /// The host's API client.
    pub api: Arc<krec::cluster::client::ApiClient>,
    /// The running guests.
    pub manager: krec::guests::Manager,
}

impl Live {
    /// Start the embedded API server, apply `objects` (CRDs first), then start `manifests`
    /// (compiled modules kept in the tests' shared [`module_cache`]).
    pub async fn start(manifests: Vec<Manifest>, objects: Vec<Value>) -> Self {
        Self::start_with(manifests, objects, module_cache()).await
    }

    /// Like [`start`](Self::start), in a living cluster: the built-in controllers and simulated
    /// nodes run (as in `krec dev`), with Pods starting in 100 ms.
    pub async fn start_alive(manifests: Vec<Manifest>, objects: Vec<Value>) -> Self {
        Self::start_alive_with_faults(manifests, objects, Default::default()).await
    }

    /// [`start_alive`](Self::start_alive) with `faults` injected from the first request on
    /// (watch faults reach only watches started after their rule is added).
    pub async fn start_alive_with_faults(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        faults: Arc<krec_apiserver::faults::Faults>,
    ) -> Self {
        let simulation = krec_apiserver::controllers::Config {
            controllers: krec_apiserver::controllers::Selection::all(),
            pod_start: std::time::Duration::from_millis(100),
            ..Default::default()
        };
        let builder = krec_apiserver::Server::builder()
            .simulation(simulation)
            .faults(faults);
        Self::start_on(builder, manifests, objects, module_cache()).await
    }

    /// Like [`start`](Self::start), keeping compiled modules in `module_cache`.
    pub async fn start_with(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        module_cache: krec::guest::ModuleCache,
    ) -> Self {
        Self::start_on(
            krec_apiserver::Server::builder(),
            manifests,
            objects,
            module_cache,
        )
        .await
    }

    /// Like [`start`](Self::start), the manager started with `options` (their module cache
    /// this crate's shared one, unless they name another).
    pub async fn start_with_manager_options(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        options: krec::guests::ManagerOptions,
    ) -> Self {
        Self::start_with_options(
            krec_apiserver::Server::builder(),
            manifests,
            objects,
            options,
        )
        .await
    }

    /// Like [`start`](Self::start), the guests named in `native` running the reconciler
    /// compiled into the test in place of their modules.
    pub async fn start_native(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        native: std::collections::BTreeMap<String, krec::guest::native::NativeReconcile>,
    ) -> Self {
        let runners = native
            .into_iter()
            .map(|(guest, reconcile)| (guest, krec::guest::native::runner(reconcile)))
            .collect();
        let options = krec::guests::ManagerOptions {
            runners,
            ..Default::default()
        };
        Self::start_with_options(
            krec_apiserver::Server::builder(),
            manifests,
            objects,
            options,
        )
        .await
    }

    /// Like [`start`](Self::start), the krec CRDs served first and the manager also running
    /// the guests of `Reconciler` and `ClusterReconciler` objects, their modules under
    /// `module_dir`; guests that do not start are in `manager.skipped()`. Nothing watches for
    /// changes yet: see
    /// [`Manager::watch_sources`](krec::guests::Manager::watch_sources).
    pub async fn start_from_cluster(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        module_dir: &Path,
    ) -> Self {
        let from = krec::guests::from_cluster::FromCluster {
            module_dir: module_dir.to_owned(),
            ..Default::default()
        };
        Self::start_from(manifests, objects, from).await
    }

    /// Like [`start_from_cluster`](Self::start_from_cluster), as `from` says.
    pub async fn start_from(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        from: krec::guests::from_cluster::FromCluster,
    ) -> Self {
        Self::start_from_with(
            manifests,
            objects,
            from,
            Arc::new(krec::guests::oci::Registries::private()),
        )
        .await
    }

    /// Like [`start_from`](Self::start_from), modules from registries pulled through
    /// `registries`.
    pub async fn start_from_with(
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        from: krec::guests::from_cluster::FromCluster,
        registries: Arc<krec::guests::oci::Registries>,
    ) -> Self {
        let options = krec::guests::ManagerOptions {
            from_cluster: Some(from),
            registries: Some(registries),
            ..Default::default()
        };
        let objects = krec::install::crds::api_objects()
            .into_iter()
            .chain(objects)
            .collect();
        Self::start_unchecked(
            krec_apiserver::Server::builder(),
            manifests,
            objects,
            options,
        )
        .await
    }

    async fn start_on(
        builder: krec_apiserver::Builder,
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        module_cache: krec::guest::ModuleCache,
    ) -> Self {
        let options = krec::guests::ManagerOptions {
            module_cache,
            ..Default::default()
        };
        Self::start_with_options(builder, manifests, objects, options).await
    }

    /// Start, asserting that every guest started.
    async fn start_with_options(
        builder: krec_apiserver::Builder,
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        options: krec::guests::ManagerOptions,
    ) -> Self {
        let live = Self::start_unchecked(builder, manifests, objects, options).await;
        assert!(
            live.manager.skipped().is_empty(),
            "guests not started: {:?}",
            live.manager.skipped()
        );
        live
    }

    /// Start; guests that do not start are in `manager.skipped()`.
    async fn start_unchecked(
        builder: krec_apiserver::Builder,
        manifests: Vec<Manifest>,
        objects: Vec<Value>,
        options: krec::guests::ManagerOptions,
    ) -> Self {
        // What the host did is printed with a failing test's output (its reloads, swaps,
        // refusals; `RUST_LOG=krec=debug cargo test` for more): a failure on CI explains itself.
        // The objects a test applies are not logged one by one: CI shows a failure's output
        // cut to its head and tail, and these would fill the head.
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("warn,krec=info,krec::install=warn")
        });
        let _ = tracing_subscriber::fmt()
            .with_writer(|| failure::TestLog)
            .with_env_filter(filter)
            .try_init();
        failure::remember_panics();
        let (cluster, client, api) = local_cluster_on(builder).await;
        let problems = krec::install::apply_objects(&api, objects).await;
        assert!(problems.is_empty(), "applying objects: {problems:?}");
        let manager = krec::guests::Manager::start_with(api.clone(), manifests, options)
            .await
            .expect("manager starts");
        Live {
            cluster,
            client,
            api,
            manager,
        }
    }

    /// A worker running `manifest`'s guest against this cluster through the host's cache and
    /// API client, as a controller's worker does; the manifest is used as given (not
    /// validated again), so a test can hand it permissions validation would refuse.
    pub fn worker(&self, manifest: Manifest) -> GuestWorker {
        let engines = krec::guest::Engines::new().expect("engines");
        let (engine, linker) = engines.for_isolation(manifest.spec.isolation);
        let manifest = Arc::new(manifest);
        let module =
            GuestModule::load(engine, linker, manifest.clone()).unwrap_or_else(|e| panic!("{e}"));
        let live = Arc::new(krec::cluster::live::LiveCluster::new(
            self.manager.cache().clone(),
            &manifest,
        ));
        let cluster = Arc::new(krec::cluster::Logged::new(live, &manifest.name));
        GuestWorker::new(Arc::new(module), cluster)
    }

    /// The running guest `name`.
    pub fn controller(&self, name: &str) -> Arc<krec::controller::Controller> {
        self.manager
            .controller(name)
            .unwrap_or_else(|| panic!("guest {name} is not running"))
    }

    /// Read an object straight from the API server.
    pub async fn get(&self, gvk: &Gvk, namespace: Option<&str>, name: &str) -> Option<Value> {
        self.api.get(gvk, namespace, name).await.ok()
    }

    /// Wait (at most [`EVENTUALLY`]) until `check` returns `Some`, polling the API server;
    /// panics with `what` otherwise.
    pub async fn eventually<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        self.eventually_within(what, EVENTUALLY, check).await
    }

    /// [`eventually`](Self::eventually) with a bound of its own: for what takes several slow
    /// instantiations (a Python guest's traps, each followed by a fresh CPython instance) on a
    /// machine busy with the other tests.
    pub async fn eventually_within<T, F, Fut>(
        &self,
        what: &str,
        within: std::time::Duration,
        mut check: F,
    ) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(found) = check().await {
                return found;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Live {
    /// Set ConfigMap `cm-0`'s value to `value` and wait until the `count` ConfigMaps carry the
    /// stamper `version`'s stamp of their current values: that version reconciles still.
    pub async fn change_and_wait_stamped(&self, value: &str, version: &str, count: usize) {
        self.api
            .patch(
                &cm_gvk(),
                Some("default"),
                "cm-0",
                krec_core::PatchType::Merge,
                &serde_json::json!({"data": {"value": value}}),
                false,
                "test",
            )
            .await
            .expect("update cm-0");
        self.eventually(&format!("version {version} reconciling still"), || async {
            self.all_stamped(version, count).await.then_some(())
        })
        .await;
    }

    /// `(status, reason, message)` of the condition `kind` of guest object `reference`, once
    /// its status is written for the object's current generation.
    pub async fn condition(
        &self,
        reference: &krec::guests::from_cluster::ObjectRef,
        kind: &str,
    ) -> Option<(String, String, String)> {
        let object = self
            .get(
                &reference.gvk(),
                reference.namespace.as_deref(),
                &reference.name,
            )
            .await?;
        if object["status"]["observedGeneration"] != object["metadata"]["generation"] {
            return None;
        }
        let c = object["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)?
            .clone();
        let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
        Some((text("status"), text("reason"), text("message")))
    }

    /// Wait until the condition `kind` of guest object `reference` has `status` and `reason`:
    /// its message.
    pub async fn wait_condition(
        &self,
        reference: &krec::guests::from_cluster::ObjectRef,
        kind: &str,
        status: &str,
        reason: &str,
    ) -> String {
        self.eventually(
            &format!("{reference}: {kind}={status} ({reason})"),
            || async {
                self.condition(reference, kind)
                    .await
                    .filter(|(s, r, _)| s == status && r == reason)
                    .map(|(_, _, message)| message)
            },
        )
        .await
    }
}

impl Live {
    /// Whether the `count` ConfigMaps `cm-*` of [`configmap`] all carry the stamper guest
    /// `version`'s stamp of their current value.
    pub async fn all_stamped(&self, version: &str, count: usize) -> bool {
        let Ok(cms) = self.api.list(&cm_gvk(), &Default::default()).await else {
            return false;
        };
        let ours: Vec<&Value> = cms
            .iter()
            .filter(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .collect();
        ours.len() == count
            && ours.iter().all(|cm| {
                annotation(cm, "krec.dev/stamped-by") == Some(version)
                    && annotation(cm, "krec.dev/stamped-value") == cm["data"]["value"].as_str()
            })
    }
}

/// A Pod `name` in `default` labelled `app: web`, controlled by the ReplicaSet `web` of UID
/// `owner_uid`.
pub fn owned_pod(name: &str, owner_uid: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                "uid": owner_uid, "controller": true}]},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}})
}

/// The ReplicaSet `web` in `default` (3 replicas of `app: web`).
pub fn replicaset() -> Value {
    serde_json::json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
}

/// ConfigMap `cm-<i>` in `default`, for the stamper test guests.
pub fn configmap(i: usize) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": "default"},
        "data": {"value": "0"}})
}

/// The annotation `key` of `object`.
pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))?
        .as_str()
}

impl Drop for Live {
    fn drop(&mut self) {
        if std::thread::panicking() {
            failure::summarize(&self.manager);
        }
        // Stop the watches before the server goes, so nothing retries against a closed port.
        self.manager.cache().stop();
    }
}

/// How long [`Live::eventually`] waits for the host to converge: generous, as CI machines are
/// slow; a passing run takes milliseconds.
pub const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(20);

/// The embedded API server, a kube client for it and the host's API client over that client.
pub async fn local_cluster() -> (
    krec_apiserver::Server,
    kube::Client,
    Arc<krec::cluster::client::ApiClient>,
) {
    local_cluster_on(krec_apiserver::Server::builder()).await
}

/// [`local_cluster`] of the server `builder` makes.
pub async fn local_cluster_on(
    builder: krec_apiserver::Builder,
) -> (
    krec_apiserver::Server,
    kube::Client,
    Arc<krec::cluster::client::ApiClient>,
) {
    let cluster = builder.start().await.expect("embedded API server starts");
    let client = krec::cluster::connect::client_from_kubeconfig(cluster.kubeconfig())
        .await
        .expect("client");
    let api = krec::cluster::client::ApiClient::new(client.clone());
    (cluster, client, api)
}

/// An API client of `cluster` authenticated as the ServiceAccount `krec-system/krec`, bound
/// (by a ClusterRole and binding the admin `api` creates) to exactly `rules`.
pub async fn service_account_api(
    cluster: &krec_apiserver::Server,
    api: &krec::cluster::client::ApiClient,
    rules: Value,
) -> Arc<krec::cluster::client::ApiClient> {
    use serde_json::json;
    let objects = [
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "krec-system"}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "krec", "namespace": "krec-system"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "krec"}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "krec"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "krec"},
            "subjects": [{"kind": "ServiceAccount", "name": "krec", "namespace": "krec-system"}]}),
    ];
    for object in objects {
        api.create(&object, "test")
            .await
            .unwrap_or_else(|e| panic!("creating {}: {e}", object["kind"]));
    }
    // `kubectl create token krec -n krec-system`.
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}});
    let request = http::Request::post("/api/v1/namespaces/krec-system/serviceaccounts/krec/token")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    let answer: Value = api
        .client()
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("a token: {e}"));
    let token = answer["status"]["token"].as_str().expect("token");
    let kubeconfig = cluster.kubeconfig().replace(cluster.token(), token);
    let client = krec::cluster::connect::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("client");
    krec::cluster::client::ApiClient::new(client)
}

/// The misbehave test guest's manifest (`tests/guests/misbehave/manifest.yaml`).
pub fn misbehave_manifest() -> Manifest {
    built_manifest(&repo_root().join("tests/guests/misbehave/manifest.yaml"))
}

/// The sample CRDs and example objects under `sample-guests/<guest_dir>`.
pub fn sample_objects(guest_dir: &str) -> Vec<Value> {
    krec::manifest::objects::read_objects(&repo_root().join("sample-guests").join(guest_dir))
        .unwrap_or_else(|e| panic!("{e}"))
}
