//! [`TestCluster`]: krec's envtest (feature `envtest`).

use std::sync::Mutex;

use super::FakeCluster;
use crate::{Error, Result};

/// How long [`TestCluster::eventually`] waits.
pub const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(30);

/// krec's envtest: the embedded API server in this process and the krec host running guests
/// from their manifests — the built `.wasm`, in the real sandbox, against a cluster whose
/// Deployments roll out and whose Pods run on simulated nodes.
///
/// The host is the `krec` binary: `$KREC` (which `krec new` sets in the crate's
/// `.cargo/config.toml`), else `krec` on `PATH`. Its log goes to the test's standard error.
///
/// ```no_run
/// use krec_guest::testing::TestCluster;
/// use krec_guest::k8s_openapi::api::core::v1::ConfigMap;
///
/// let cluster = TestCluster::start().expect("cluster");
/// cluster.run_guests("manifest.yaml").expect("host");
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("a".into());
/// cm.metadata.namespace = Some("default".into());
/// cluster.objects().add(&cm).expect("created");
/// cluster.eventually("the guest to label it", || {
///     let cm: ConfigMap = cluster.objects().get(Some("default"), "a")?;
///     cm.metadata.labels?.get("seen").cloned()
/// });
/// ```
pub struct TestCluster {
    runtime: tokio::runtime::Runtime,
    server: Option<krec_apiserver::Server>,
    kubeconfig: std::path::PathBuf,
    hosts: Mutex<Vec<std::process::Child>>,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl TestCluster {
    /// Start the embedded API server on a free loopback port, with `krec dev`'s built-in
    /// controllers and three simulated nodes (Pods start after 100 ms).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the server cannot start or its kubeconfig cannot be written.
    pub fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::Unavailable(format!("starting a runtime: {e}")))?;
        let simulation = krec_apiserver::controllers::Config {
            controllers: krec_apiserver::controllers::Selection::all(),
            pod_start: std::time::Duration::from_millis(100),
            ..Default::default()
        };
        let server = runtime
            .block_on(
                krec_apiserver::Server::builder()
                    .simulation(simulation)
                    .start(),
            )
            .map_err(|e| Error::Unavailable(format!("starting the API server: {e}")))?;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let kubeconfig = std::env::temp_dir().join(format!(
            "krec-test-{}-{}.kubeconfig",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        server
            .write_kubeconfig(&kubeconfig)
            .map_err(|e| Error::Unavailable(format!("writing {}: {e}", kubeconfig.display())))?;
        Ok(TestCluster {
            runtime,
            server: Some(server),
            kubeconfig,
            hosts: Mutex::new(Vec::new()),
        })
    }

    /// Create `object` through the API server, as a client's request goes — admission
    /// included, so the guests' webhooks judge it once the host has registered them (see
    /// [`run_guests`](Self::run_guests)) — and return it as stored (a mutating webhook's
    /// changes in it).
    ///
    /// # Errors
    ///
    /// The API server's refusal, as the error its status names: a webhook's denial is
    /// [`Error::Forbidden`] or [`Error::Invalid`] with kube-apiserver's message (`admission
    /// webhook "…" denied the request: …`).
    pub fn create<K>(&self, object: &K) -> Result<K>
    where
        K: kube_core::Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned,
    {
        let Some(server) = &self.server else {
            return Err(Error::Unavailable("the API server has stopped".into()));
        };
        let mut value = serde_json::to_value(object)?;
        value["apiVersion"] = K::api_version(&()).into_owned().into();
        value["kind"] = K::kind(&()).into_owned().into();
        let path = K::url_path(&(), object.meta().namespace.as_deref());
        let (status, body) = self.runtime.block_on(server.send(
            "POST",
            &path,
            "application/json",
            serde_json::to_vec(&value)?,
        ));
        if status < 300 {
            return Ok(serde_json::from_slice(&body)?);
        }
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|s| s["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        Err(match status {
            400 | 422 => Error::Invalid(message),
            403 => Error::Forbidden(message),
            404 => Error::NotFound(message),
            409 if message.contains("already exists") => Error::AlreadyExists(message),
            409 => Error::Conflict(message),
            503 => Error::Unavailable(message),
            504 => Error::Timeout(message),
            _ => Error::Other(format!("HTTP {status}: {message}")),
        })
    }

    /// The kubeconfig of the cluster (for kubectl or a kube client).
    pub fn kubeconfig(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// Read and write the cluster's objects (not counted as the guest's writes).
    pub fn objects(&self) -> FakeCluster {
        match &self.server {
            Some(server) => FakeCluster::on(server.store().clone()),
            None => FakeCluster::new(),
        }
    }

    /// Run the guests of `manifests` (a manifest file, or a directory of them) in a krec host
    /// against this cluster, until the cluster is dropped. Their modules must be built. The
    /// host registers the guests' webhooks with this cluster (as envtest installs webhook
    /// configurations), so the cluster asks them about the objects they match: an object a
    /// validator refuses is refused — once the host has started, so wait for it with
    /// [`eventually`](Self::eventually).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the `krec` binary cannot be started.
    pub fn run_guests(&self, manifests: impl AsRef<std::path::Path>) -> Result<()> {
        let manifests = manifests.as_ref();
        let krec = std::env::var_os("KREC").unwrap_or_else(|| "krec".into());
        let child = std::process::Command::new(&krec)
            .arg("run")
            .arg("--manifests")
            .arg(manifests)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--admin-addr", "127.0.0.1:0", "--register-webhooks"])
            .stdin(std::process::Stdio::null())
            .spawn()
            .map_err(|e| {
                Error::Unavailable(format!(
                    "starting {} (set KREC to the krec binary, or put krec on PATH): {e}",
                    std::path::Path::new(&krec).display()
                ))
            })?;
        self.hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child);
        Ok(())
    }

    /// Wait until `check` returns something (polling every 50 ms), and return it.
    ///
    /// # Panics
    ///
    /// After [`EVENTUALLY`], naming `what`; or when a host started by
    /// [`run_guests`](Self::run_guests) exited.
    pub fn eventually<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + EVENTUALLY;
        loop {
            if let Some(found) = check() {
                return found;
            }
            for host in self
                .hosts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter_mut()
            {
                if let Ok(Some(status)) = host.try_wait() {
                    panic!(
                        "the krec host exited ({status}) while waiting for {what}: see its log above"
                    );
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out after {EVENTUALLY:?} waiting for {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for host in self
            .hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            let _ = host.kill();
            let _ = host.wait();
        }
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}
