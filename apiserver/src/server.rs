//! The server process: binding, TLS, the kubeconfig, the accept loop and shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::audit::AuditLog;
use crate::authentication::{Authenticator, Signer, admin_token};
use crate::faults::Faults;
use crate::resources::ResourceTypes;
use crate::storage::persist;
use crate::store::{self, Store, ensure_namespaces};
use crate::{controllers, endpoints};
use krec_core::error::ApiError;
use krec_net::connections::{self, Limits, Transport};
use krec_net::tls;

/// How to start a [`Server`]: `Server::builder().addr(…).data_dir(…).start().await`.
#[derive(Clone, Debug)]
pub struct Builder {
    addr: SocketAddr,
    data_dir: Option<PathBuf>,
    watch_history: usize,
    bookmark_interval: Duration,
    simulation: controllers::Config,
    faults: Arc<Faults>,
    audit: Option<Arc<AuditLog>>,
    limits: Option<Limits>,
    anonymous: bool,
    max_token_expiration: Option<Duration>,
    max_watches_per_user: usize,
    serving: Option<(String, String)>,
    client_ca: Option<String>,
    always_allow: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            watch_history: store::DEFAULT_HISTORY,
            bookmark_interval: endpoints::BOOKMARK_INTERVAL,
            simulation: controllers::Config::default(),
            faults: Arc::new(Faults::default()),
            audit: None,
            limits: None,
            anonymous: false,
            max_token_expiration: None,
            max_watches_per_user: endpoints::watchers::DEFAULT_MAX_PER_USER,
            serving: None,
            client_ca: None,
            always_allow: false,
        }
    }
}

impl Builder {
    /// Address to bind (default `127.0.0.1:0`; port 0 picks a free one).
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Persist objects (and the CA) in `dir`; by default they are kept in memory.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// How many changes are kept for watches resuming from a resourceVersion.
    pub fn watch_history(mut self, changes: usize) -> Self {
        self.watch_history = changes;
        self
    }

    /// How often watches that allow bookmarks get one.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Which built-in controllers run (default: none, so a test of a user's own controller sees
    /// the cluster stay still; `krec cluster` and `krec dev` run them all).
    pub fn controllers(mut self, controllers: controllers::Selection) -> Self {
        self.simulation.controllers = controllers;
        self
    }

    /// How many simulated nodes the scheduler and kubelets use (default 3).
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.simulation.nodes = nodes;
        self
    }

    /// The whole simulation set-up: controllers, nodes and the simulated Pods' timings.
    pub fn simulation(mut self, simulation: controllers::Config) -> Self {
        self.simulation = simulation;
        self
    }

    /// Fault rules to inject (see [`crate::faults`]); more can be added once running, through
    /// [`Server::faults`].
    pub fn faults(mut self, faults: Arc<Faults>) -> Self {
        self.faults = faults;
        self
    }

    /// Record every write request in `log` (see [`crate::audit`]).
    pub fn audit(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    /// Take a request without credentials as `system:anonymous` (group
    /// `system:unauthenticated`), which RBAC then judges — kube-apiserver's
    /// `--anonymous-auth=true`. By default such a request is a 401 (but for health checks and
    /// `/version`).
    pub fn anonymous_auth(mut self, allowed: bool) -> Self {
        self.anonymous = allowed;
        self
    }

    /// The longest lifetime a TokenRequest gets: a longer `expirationSeconds` is shortened to
    /// it, with a warning — kube-apiserver's `--service-account-max-token-expiration`. By
    /// default, as in kube, there is none (2^32 seconds at most).
    pub fn max_token_expiration(mut self, longest: Option<Duration>) -> Self {
        self.max_token_expiration = longest;
        self
    }

    /// The most watches one user (not a member of `system:masters`) holds open at once; past
    /// it a watch is answered 429 with `Retry-After`, as kube's priority and fairness sheds a
    /// request (default 1000).
    pub fn max_watches_per_user(mut self, most: usize) -> Self {
        self.max_watches_per_user = most;
        self
    }

    /// Serve PEM certificate chain `cert_pem` with PEM private key `key_pem` (kube-apiserver's
    /// `--tls-cert-file` and `--tls-private-key-file`) instead of a certificate of the
    /// server's own CA; the kubeconfig then trusts the chain as given.
    pub fn serving_certificate(mut self, cert_pem: String, key_pem: String) -> Self {
        self.serving = Some((cert_pem, key_pem));
        self
    }

    /// Take client certificates issued by the CAs of PEM bundle `pem` (kube-apiserver's
    /// `--client-ca-file`): CN the user, each O a group. By default none are asked for.
    pub fn client_ca(mut self, pem: String) -> Self {
        self.client_ca = Some(pem);
        self
    }

    /// Authorize every authenticated request (kube-apiserver's
    /// `--authorization-mode=AlwaysAllow`); by default RBAC decides.
    pub fn always_allow(mut self, on: bool) -> Self {
        self.always_allow = on;
        self
    }

    /// How connections are bounded (default: kube-apiserver's timeouts, and a cap that leaves
    /// this process's file descriptors room: [`Limits::for_this_process`]).
    pub fn connection_limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Start serving. Returns once the port is bound.
    ///
    /// # Errors
    ///
    /// When the address cannot be bound, TLS cannot be set up or the data directory cannot be
    /// opened or read.
    pub async fn start(self) -> Result<Server, StartError> {
        Server::start(self).await
    }
}

/// Why the embedded API server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TLS set-up failed.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The data directory could not be opened or read.
    #[error("data directory: {0}")]
    Storage(ApiError),
    /// The admin's token or the ServiceAccount signing key could not be read from or written
    /// to the data directory.
    #[error("the credentials in the data directory: {0}")]
    Token(std::io::Error),
}

/// A running embedded API server. Stops when [`shutdown`](Self::shutdown) is called or it is
/// dropped.
pub struct Server {
    addr: SocketAddr,
    kubeconfig: String,
    token: String,
    store: Arc<Store>,
    stop: tokio::sync::watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    controllers: Option<JoinHandle<()>>,
    faults: Arc<Faults>,
    /// What answers requests, for [`send`](Server::send).
    api: Arc<endpoints::ApiServer>,
}

impl Server {
    /// A builder for a server on `127.0.0.1` with a free port, objects in memory.
    pub fn builder() -> Builder {
        Builder::default()
    }

    async fn start(config: Builder) -> Result<Self, StartError> {
        let registry = Arc::new(ResourceTypes::new());
        let store = match &config.data_dir {
            Some(dir) => {
                let persistence = persist::Persistence::open(dir).map_err(StartError::Storage)?;
                Store::open(registry, persistence).map_err(StartError::Storage)?
            }
            None => Store::with_history(registry, config.watch_history),
        };
        let store = Arc::new(store);
        store.set_always_allow(config.always_allow);
        ensure_namespaces(&store).map_err(StartError::Storage)?;
        crate::authorization::bootstrap::ensure_policy(&store).map_err(StartError::Storage)?;
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| StartError::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: config.addr,
            source,
        })?;
        if !addr.ip().is_loopback() {
            // `krec cluster` and `krec dev` alike: said where every user of the address sees it.
            tracing::warn!(
                "binding {addr}: the embedded API server is reachable beyond this machine; whoever holds its kubeconfig's token is cluster admin"
            );
        }
        let token = admin_token(config.data_dir.as_deref()).map_err(StartError::Token)?;
        let signer = Signer::in_data_dir(config.data_dir.as_deref()).map_err(StartError::Token)?;
        let certs = tls::generate(&addr, config.data_dir.as_deref())?;
        // Client certificates only with a client CA, as kube-apiserver asks for none without
        // `--client-ca-file`.
        let client_cas = match &config.client_ca {
            Some(pem) => Some(krec_net::client_certs::ClientCas::from_pem(pem)?),
            None => None,
        };
        // What clients trust: the server's own CA, or the chain it was given to serve.
        let (server_config, trusted_pem) = match &config.serving {
            Some((cert_pem, key_pem)) => (
                tls::server_config_for(cert_pem, key_pem, client_cas.as_ref())?,
                cert_pem.clone(),
            ),
            None => (
                tls::server_config_for(&certs.cert_pem, &certs.key_pem, client_cas.as_ref())?,
                certs.ca_pem.clone(),
            ),
        };
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_owned()
        } else {
            addr.ip().to_string()
        };
        let url = if addr.is_ipv6() {
            format!("https://[{host}]:{}", addr.port())
        } else {
            format!("https://{host}:{}", addr.port())
        };
        let kubeconfig = tls::kubeconfig(&url, &trusted_pem, &token);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let admission = Arc::new(crate::admission::Admission::new(store.clone()));
        let server = Arc::new(endpoints::ApiServer {
            store: store.clone(),
            address: addr.to_string(),
            stopped: stopped.clone(),
            bookmark_interval: config.bookmark_interval,
            openapi: Default::default(),
            faults: config.faults.clone(),
            audit: config.audit.clone(),
            admission: admission.clone(),
            metrics: Default::default(),
            authenticator: Authenticator::new(&token, signer)
                .anonymous(config.anonymous)
                .client_cas(client_cas),
            max_token_seconds: config
                .max_token_expiration
                .map(|longest| i64::try_from(longest.as_secs()).unwrap_or(i64::MAX)),
            watchers: Arc::new(endpoints::watchers::Watchers::new(
                config.max_watches_per_user,
            )),
        });
        let mut simulation = config.simulation;
        simulation.root_ca = Some(trusted_pem.clone());
        let controllers = controllers::spawn(admission.clone(), simulation, stopped.clone());
        let limits = config.limits.unwrap_or_else(Limits::for_this_process);
        let task = tokio::spawn(serve(
            listener,
            server_config,
            server.clone(),
            limits,
            stopped,
        ));
        Ok(Server {
            addr,
            kubeconfig,
            token,
            store,
            stop,
            task: Some(task),
            controllers,
            faults: config.faults,
            api: server,
        })
    }

    /// Send one request to the API as its admin — through authentication, admission (webhooks
    /// and policies), validation and storage, as a client's request over the network goes —
    /// without the network: its status code and body. For a test in the same process (the
    /// SDK's envtest creating an object its guest's webhooks judge).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (u16, Vec<u8>) {
        use tower::ServiceExt as _;
        let app = axum::Router::new()
            .fallback(endpoints::handle)
            .with_state(self.api.clone());
        let request = axum::http::Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", content_type)
            .body(axum::body::Body::from(body));
        let request = match request {
            Ok(request) => request,
            Err(err) => return (400, format!("a bad request: {err}").into_bytes()),
        };
        let Ok(response) = app.oneshot(request).await;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default();
        (status, body)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig (YAML) for this server: its CA and the admin's token.
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// The admin's bearer token (in the kubeconfig too), for clients that send their own
    /// `Authorization` header.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Write the kubeconfig to `path` (mode 0600).
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // It holds the admin's token: written to a new file only its owner can read, then
        // renamed over the path (never readable by others, never through a symlink there).
        crate::authentication::write_private(path, self.kubeconfig.as_bytes())
    }

    /// The fault rules: add some to make the server misbehave (see [`crate::faults`]).
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// The object store, for in-process access (tests, `krec dev`).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Stop accepting, end open watches and connections, and wait for the server task.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(controllers) = self.controllers.take() {
            controllers.abort();
            let _ = controllers.await;
        }
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.store.close();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(controllers) = self.controllers.take() {
            controllers.abort();
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.store.close();
    }
}

/// The API served in this process without a socket: a fresh in-memory store (with the initial
/// namespaces) and a tower service answering HTTP requests to it, as the server does (requests
/// without credentials are the admin's), for a client in the same process (e.g. `kube::Client::new(service, "default")`) — what tests on
/// a paused clock use, where no socket may wait. No controllers run; watches end when the
/// returned sender is dropped or set.
///
/// # Errors
///
/// When the initial namespaces cannot be created.
pub fn in_process(
    faults: Arc<Faults>,
) -> Result<(Arc<Store>, axum::Router, tokio::sync::watch::Sender<bool>), ApiError> {
    let store = Arc::new(Store::new(Arc::new(ResourceTypes::new())));
    ensure_namespaces(&store)?;
    crate::authorization::bootstrap::ensure_policy(&store)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let server = Arc::new(endpoints::ApiServer {
        admission: Arc::new(crate::admission::Admission::new(store.clone())),
        metrics: Default::default(),
        store: store.clone(),
        address: "127.0.0.1:0".into(),
        stopped,
        bookmark_interval: endpoints::BOOKMARK_INTERVAL,
        openapi: Default::default(),
        faults,
        audit: None,
        authenticator: Authenticator::trusting(
            Signer::generate().map_err(|err| ApiError::internal(err.to_string()))?,
        ),
        max_token_seconds: None,
        watchers: Default::default(),
    });
    let app = axum::Router::new()
        .fallback(endpoints::handle)
        .with_state(server);
    Ok((store, app, stop))
}

/// Serve the API over TLS until stopped, under the connection [`Limits`] kube-apiserver has.
async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    server: Arc<endpoints::ApiServer>,
    limits: Limits,
    stopped: tokio::sync::watch::Receiver<bool>,
) {
    let app = axum::Router::new()
        .fallback(endpoints::handle)
        .with_state(server);
    connections::serve(
        "API server",
        listener,
        Transport::Tls(tls),
        app,
        limits,
        stopped,
    )
    .await;
}
