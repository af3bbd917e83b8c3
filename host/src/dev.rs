//! `krec dev` and `krec run`: the host reconciling live, against the embedded API server or a
//! real cluster.
//!
//! `krec dev` starts the embedded API server on loopback, writes a kubeconfig for it, applies
//! the CRDs and example objects found under a directory (by default the sample guests'), starts
//! the guests of a manifest directory and logs every reconcile until Ctrl-C.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

use crate::admin::Admin;
use crate::client::ApiClient;
use crate::guest::ModuleCache;
use crate::leader::{LeaderConfig, LeaderElector};
use crate::manager::{Manager, ManagerOptions, SHUTDOWN_TIMEOUT};
use crate::manifest::Manifest;
use crate::vocab::{AccessError, describe};

/// Print a line on stdout. A long-running host must not die because nobody reads its stdout
/// any more (a closed pipe, a detached terminal), so write errors are ignored.
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Load every manifest in `dir`; a bad one is reported and skipped.
///
/// # Errors
///
/// When `dir` cannot be read or holds no manifest at all.
pub fn load_manifests(dir: &Path) -> anyhow::Result<Vec<Manifest>> {
    let scanned = Manifest::scan_dir(dir)?;
    anyhow::ensure!(
        !scanned.is_empty(),
        "{}: no Reconciler manifests found",
        dir.display()
    );
    let mut manifests = Vec::new();
    for result in scanned {
        match result {
            Ok(manifest) => manifests.push(manifest),
            Err(err) => tracing::error!("skipping a manifest: {err}"),
        }
    }
    Ok(manifests)
}

/// A kube client for the kubeconfig text `yaml`.
///
/// # Errors
///
/// When the kubeconfig is invalid.
pub async fn client_from_kubeconfig(yaml: &str) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).context("parsing the kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("loading the kubeconfig")?;
    client_from_config(config, None)
}

/// The `User-Agent` krec's requests carry: `krec/<version>`, and with an `identity` (a replica
/// in leader election or sharding) `krec/<version> (<identity>)`, so that the API server's
/// audit log tells replicas apart.
pub fn user_agent(identity: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match identity {
        Some(identity) => format!("krec/{version} ({identity})"),
        None => format!("krec/{version}"),
    }
}

/// A kube client for `config`, its requests carrying [`user_agent`]`(identity)`.
///
/// # Errors
///
/// When the client cannot be created (TLS set-up) or the identity is not a valid header value.
pub fn client_from_config(
    mut config: kube::Config,
    identity: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let agent = http::HeaderValue::from_str(&user_agent(identity))
        .with_context(|| format!("the identity {identity:?} cannot be sent as a User-Agent"))?;
    config.headers.push((http::header::USER_AGENT, agent));
    kube::Client::try_from(config).context("creating the Kubernetes client")
}

/// Create `objects` through the API: CRDs first (so their kinds are served), then namespaces,
/// then the rest in order. An object given more than once (a sample extending another's CRD) is
/// created from its last definition. Objects that exist already are left as they are. Returns
/// one line per object that could not be applied.
pub async fn apply_objects(api: &ApiClient, objects: Vec<Value>) -> Vec<String> {
    let rank = |o: &Value| match o.get("kind").and_then(Value::as_str) {
        Some("CustomResourceDefinition") => 0,
        Some("Namespace") => 1,
        _ => 2,
    };
    let identity = |o: &Value| {
        let text = |pointer: &str| {
            o.pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let group = text("/apiVersion").map(|v| {
            v.rsplit_once('/')
                .map_or(String::new(), |(g, _)| g.to_owned())
        });
        Some((
            group?,
            text("/kind")?,
            text("/metadata/namespace"),
            text("/metadata/name")?,
        ))
    };
    let mut last = std::collections::HashMap::new();
    for (i, object) in objects.iter().enumerate() {
        if let Some(id) = identity(object) {
            last.insert(id, i);
        }
    }
    let mut objects: Vec<Value> = objects
        .into_iter()
        .enumerate()
        .filter(|(i, o)| identity(o).is_none_or(|id| last.get(&id) == Some(i)))
        .map(|(_, o)| o)
        .collect();
    objects.sort_by_key(rank);
    let mut problems = Vec::new();
    for object in objects {
        let what = describe(&object);
        match api.create(&object, "krec-dev").await.map(drop) {
            Ok(()) | Err(AccessError::AlreadyExists(_)) => tracing::info!("applied {what}"),
            Err(err) => problems.push(format!("{what}: {err}")),
        }
    }
    problems
}

/// How the host runs, for `krec dev` and `krec run`.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Where compiled modules are kept.
    pub module_cache: ModuleCache,
    /// Address of the admin server (metrics, probes, trigger); `None`: no admin server.
    pub admin_addr: Option<std::net::SocketAddr>,
    /// Bearer token for the trigger (required beyond loopback).
    pub admin_token: Option<String>,
    /// Leader election on a Lease; `None`: this host always reconciles.
    pub leader: Option<LeaderConfig>,
    /// Guests sharded across replicas by Leases (see [`crate::shard`]); excludes `leader`.
    pub shard: Option<crate::shard::ShardConfig>,
    /// How long running reconciles get to finish at shutdown.
    pub shutdown_timeout: std::time::Duration,
    /// Address of the admission server, for guests that declare `webhooks`; `None`: only
    /// when [`register_webhooks`](Self::register_webhooks) asks for one (on loopback).
    pub webhook_addr: Option<std::net::SocketAddr>,
    /// The admission server's certificate files; `None`: a certificate is generated.
    pub webhook_tls: Option<crate::webhooks::TlsFiles>,
    /// Create (or replace) the webhook configurations of the guests that declare webhooks in
    /// the cluster, pointing at the admission server (`krec dev`).
    pub register_webhooks: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            module_cache: ModuleCache::disabled(),
            admin_addr: None,
            admin_token: None,
            leader: None,
            shard: None,
            shutdown_timeout: SHUTDOWN_TIMEOUT,
            webhook_addr: None,
            webhook_tls: None,
            register_webhooks: false,
        }
    }
}

/// Run the guests of `manifests_dir` against `client` until `stop` resolves: the admin server
/// first (probes answer during start-up), then leader election, the guests, and the manifest
/// watcher. On `stop`: no new work, running reconciles finish (up to the shutdown timeout),
/// the Lease is released, the admin server stops. `started` is called once the guests run.
///
/// # Errors
///
/// When the admin server cannot start or no guest can be started.
pub async fn serve(
    client: kube::Client,
    manifests_dir: &Path,
    manifests: Vec<Manifest>,
    options: HostOptions,
    started: impl FnOnce(&Manager, Option<std::net::SocketAddr>),
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let admin = match options.admin_addr {
        Some(addr) => Some(Admin::start(addr, options.admin_token.clone()).await?),
        None => None,
    };
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    // Leader election decides whether workers run; `decided` tells readiness.
    let (gate_tx, gate) = tokio::sync::watch::channel(options.leader.is_none());
    let (decided_tx, mut decided) = tokio::sync::watch::channel(options.leader.is_none());
    let (stop_election, election_stopped) = tokio::sync::oneshot::channel::<()>();
    let election = options.leader.clone().map(|config| {
        let lease = config.lease_name.clone();
        let elector = LeaderElector::new(client.clone(), config);
        let mut state = elector.subscribe();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            while state.changed().await.is_ok() {
                let leading = *state.borrow_and_update();
                if let Some(leading) = leading {
                    gate_tx.send_replace(leading);
                    decided_tx.send_replace(true);
                    metrics
                        .leader
                        .get_or_create(&crate::metrics::NameLabel {
                            name: lease.clone(),
                        })
                        .set(i64::from(leading));
                }
            }
        });
        tokio::spawn(elector.run(async move {
            let _ = election_stopped.await;
        }))
    });
    let tenures = options
        .shard
        .as_ref()
        .map(|_| crate::tenure::Tenures::new());
    let api = ApiClient::new(client.clone());
    let manager = Manager::start_with(
        api.clone(),
        manifests,
        ManagerOptions {
            module_cache: options.module_cache.clone(),
            // Without an election the manager's gate is always open.
            gate: options.leader.is_some().then_some(gate),
            tenures: tenures.clone(),
            metrics: Some(metrics.clone()),
            ..Default::default()
        },
    )
    .await?;
    if manager.controllers().is_empty() {
        anyhow::bail!("no guest could be started");
    }
    let sharding = match (options.shard.clone(), tenures) {
        (Some(config), Some(tenures)) => {
            let sharder =
                crate::shard::Sharder::new(client, config, tenures, manager.clone(), metrics);
            let decided = sharder.decided();
            let leaving = sharder.leaving();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(sharder.run(async move {
                let _ = stopped.await;
            }));
            Some((stop, task, decided, leaving))
        }
        _ => None,
    };
    let webhooks = start_webhooks(&manager, &api, &options).await?;
    let watcher = manager.watch(manifests_dir.to_owned());
    if let Some(admin) = &admin {
        admin.set_manager(manager.clone());
        // Ready once the caches have synced (they have: `start` waited) and the election
        // has an answer.
        let _ = decided.wait_for(|d| *d).await;
        if let Some((_, _, decided, _)) = &sharding {
            let _ = decided.clone().wait_for(|d| *d).await;
        }
        admin.set_ready(true);
    }
    started(&manager, admin.as_ref().map(Admin::addr));
    stop.await;
    // Shared by `krec run` and `krec dev`: logged as the host's, not as `krec::dev`'s.
    tracing::info!(target: "krec::host", "stopping: no new work, waiting for running reconciles");
    if let Some(admin) = &admin {
        admin.set_ready(false);
    }
    watcher.stop().await;
    if let Some(webhooks) = webhooks {
        // A configuration left behind would send the cluster's requests to a server that is
        // gone (failing them under `failurePolicy: Fail`).
        webhooks.stop().await;
    }
    if let Some((_, _, _, leaving)) = &sharding {
        // Each guest goes to another replica as soon as its running reconciles finish.
        leaving.send_replace(true);
    }
    manager.shutdown(options.shutdown_timeout).await;
    if let Some((stop, task, _, _)) = sharding {
        // The workers have stopped: the guests' Leases can go to the other replicas.
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(election) = election {
        let _ = stop_election.send(());
        let _ = election.await;
    }
    Ok(())
}

/// The admission server and, with `register_webhooks`, the task keeping the cluster's webhook
/// registrations in line with the guests running.
struct Webhooks {
    server: crate::webhooks::WebhookServer,
    sync: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl Webhooks {
    /// Stop registering, remove every registration made, stop serving.
    async fn stop(self) {
        if let Some((stop, task)) = self.sync {
            let _ = stop.send(true);
            let _ = task.await;
        }
        self.server.stop().await;
    }
}

/// The admission server, when a running guest declares webhooks or a conversion, an address
/// is given, or `register_webhooks` asks (krec dev: a guest with webhooks may come later), and
/// with `register_webhooks` the task that registers the running guests' webhooks.
async fn start_webhooks(
    manager: &Manager,
    api: &std::sync::Arc<ApiClient>,
    options: &HostOptions,
) -> anyhow::Result<Option<Webhooks>> {
    let serving: Vec<String> = manager
        .controllers()
        .values()
        .map(|c| c.module().manifest().clone())
        .filter(|m| !m.spec.webhooks.is_empty() || m.spec.conversion.is_some())
        .map(|m| m.name.clone())
        .collect();
    let addr = match options.webhook_addr {
        Some(addr) => addr,
        None if options.register_webhooks || !serving.is_empty() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], 0))
        }
        None => return Ok(None),
    };
    let server = crate::webhooks::WebhookServer::start_with(
        manager.clone(),
        addr,
        options.webhook_tls.as_ref(),
    )
    .await?;
    say(format_args!(
        "admission webhooks served at {} for {}",
        server.url(),
        if serving.is_empty() {
            "no guest yet".to_owned()
        } else {
            serving.join(", ")
        }
    ));
    let mut sync = None;
    if options.register_webhooks {
        let mut registrar = Registrar {
            api: api.clone(),
            reach: crate::webhooks::Reach::Url(server.url()),
            ca_pem: server.ca_pem().to_owned(),
            configurations: BTreeMap::new(),
            conversions: BTreeMap::new(),
        };
        // Registered before the guests are announced; later reloads are followed.
        let mut changes = manager.changes();
        changes.mark_unchanged();
        registrar.sync(manager).await;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let manager = manager.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = changes.changed() => if changed.is_err() { break },
                    _ = stopped.changed() => break,
                }
                changes.mark_unchanged();
                registrar.sync(&manager).await;
            }
            registrar.clear().await;
        });
        sync = Some((stop, task));
    }
    Ok(Some(Webhooks { server, sync }))
}

/// Keeps the cluster's webhook registrations those of the guests running: each guest's
/// webhook configurations, and the conversion of each CRD a guest converts.
struct Registrar {
    api: std::sync::Arc<ApiClient>,
    reach: crate::webhooks::Reach,
    ca_pem: String,
    /// Registered configurations: (kind, name) → as registered.
    configurations: BTreeMap<(String, String), Value>,
    /// CRDs pointed at a guest: name → their `spec.conversion`.
    conversions: BTreeMap<String, Value>,
}

impl Registrar {
    /// Register what the running guests declare and is not registered yet (or differs), and
    /// remove what no running guest declares any more.
    async fn sync(&mut self, manager: &Manager) {
        let manifests: Vec<_> = manager
            .controllers()
            .values()
            .map(|c| c.module().manifest().clone())
            .collect();
        let mut configurations = BTreeMap::new();
        let mut conversions = BTreeMap::new();
        for manifest in &manifests {
            for configuration in
                crate::webhooks::configurations(manifest, &self.reach, &self.ca_pem)
            {
                let text = |key: &str| configuration.pointer(key).and_then(Value::as_str);
                let id = (
                    text("/kind").unwrap_or_default().to_owned(),
                    text("/metadata/name").unwrap_or_default().to_owned(),
                );
                configurations.insert(id, (manifest.name.clone(), configuration));
            }
            if let Some((crd, conversion)) =
                crate::webhooks::conversion(manifest, &self.reach, &self.ca_pem)
            {
                conversions.insert(crd, (manifest.name.clone(), conversion));
            }
        }
        self.apply(configurations, conversions).await;
    }

    /// Remove every registration.
    async fn clear(&mut self) {
        self.apply(BTreeMap::new(), BTreeMap::new()).await;
    }

    async fn apply(
        &mut self,
        configurations: BTreeMap<(String, String), (String, Value)>,
        conversions: BTreeMap<String, (String, Value)>,
    ) {
        let gone: Vec<_> = self
            .configurations
            .keys()
            .filter(|id| !configurations.contains_key(*id))
            .cloned()
            .collect();
        for (kind, name) in gone {
            let gvk = crate::vocab::Gvk::from_api_version("admissionregistration.k8s.io/v1", &kind);
            match self.api.delete(&gvk, None, &name, None).await {
                Ok(_) | Err(AccessError::NotFound(_)) => {
                    self.configurations.remove(&(kind, name));
                }
                Err(err) => tracing::warn!("removing the {kind} {name}: {err}"),
            }
        }
        for (id, (guest, configuration)) in configurations {
            if self.configurations.get(&id) == Some(&configuration) {
                continue;
            }
            match crate::webhooks::register(&self.api, configuration.clone()).await {
                Ok(()) => {
                    tracing::info!(%guest, "registered the {} {}", id.0, id.1);
                    self.configurations.insert(id, configuration);
                }
                Err(err) => tracing::error!(%guest, "registering its webhooks: {err}"),
            }
        }
        let gone: Vec<_> = self
            .conversions
            .keys()
            .filter(|crd| !conversions.contains_key(*crd))
            .cloned()
            .collect();
        for crd in gone {
            match crate::webhooks::set_conversion(&self.api, &crd, None).await {
                Ok(()) | Err(AccessError::NotFound(_)) => {
                    self.conversions.remove(&crd);
                }
                Err(err) => {
                    tracing::warn!("removing the conversion webhook of the CRD {crd}: {err}");
                }
            }
        }
        for (crd, (guest, conversion)) in conversions {
            if self.conversions.get(&crd) == Some(&conversion) {
                continue;
            }
            match crate::webhooks::set_conversion(&self.api, &crd, Some(conversion.clone())).await {
                Ok(()) => {
                    tracing::info!(%guest, "pointed the CRD {crd} at its conversion webhook");
                    self.conversions.insert(crd, conversion);
                }
                Err(err) => tracing::error!(
                    %guest,
                    "pointing the CRD {crd} at its conversion webhook: {err}"
                ),
            }
        }
    }
}

/// Where and how `krec dev` runs.
#[derive(Clone, Debug)]
pub struct DevOptions {
    /// Directory of guest manifests.
    pub manifests: PathBuf,
    /// Directory of CRDs and objects to apply; `None` applies those under `manifests`.
    pub apply: Option<PathBuf>,
    /// Address of the embedded API server.
    pub addr: std::net::SocketAddr,
    /// Where to write its kubeconfig.
    pub kubeconfig_out: PathBuf,
    /// The cluster's built-in controllers and simulated nodes.
    pub simulation: krec_apiserver::controllers::Config,
    /// Faults the cluster injects (none by default).
    pub faults: std::sync::Arc<krec_apiserver::faults::Faults>,
    /// How the host runs.
    pub host: HostOptions,
}

/// Print where the admin server is.
fn announce_admin(command: &str, admin: Option<std::net::SocketAddr>) {
    if let Some(addr) = admin {
        say(format_args!(
            "krec {command}: admin server at http://{addr} (/metrics, /healthz, /readyz, POST /reconcile/GUEST/NAMESPACE/NAME)"
        ));
    }
}

/// `krec dev`: run until `stop` resolves, then shut down gracefully. Manifest and module
/// changes are picked up live (see [`Manager::watch`]).
///
/// # Errors
///
/// When the manifests cannot be read at all, the server cannot start or the kubeconfig cannot
/// be written. Bad objects and bad guests are reported and skipped.
pub async fn dev(
    options: DevOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let manifests = load_manifests(&options.manifests)?;
    let apply_dir = options.apply.as_deref().unwrap_or(&options.manifests);
    let objects = crate::objects::read_objects(apply_dir).map_err(anyhow::Error::msg)?;

    let cluster = krec_apiserver::Server::builder()
        .addr(options.addr)
        .simulation(options.simulation.clone())
        .faults(options.faults.clone())
        .start()
        .await?;
    cluster
        .write_kubeconfig(&options.kubeconfig_out)
        .with_context(|| {
            format!(
                "writing the kubeconfig to {}",
                options.kubeconfig_out.display()
            )
        })?;
    let shown = std::fs::canonicalize(&options.kubeconfig_out)
        .unwrap_or_else(|_| options.kubeconfig_out.clone());
    say(format_args!(
        "krec dev: the embedded Kubernetes API server is at https://{}",
        cluster.addr()
    ));
    say(format_args!("kubeconfig: {}", shown.display()));
    let client = client_from_kubeconfig(cluster.kubeconfig()).await?;
    for problem in apply_objects(&ApiClient::new(client.clone()), objects).await {
        tracing::error!("not applied: {problem}");
    }
    // What the guests reconcile and watch, as kubectl names them (CRDs were applied above).
    let registry = cluster.store().registry();
    let mut resources: Vec<String> = Vec::new();
    for manifest in &manifests {
        for gvk in crate::controller::Handlers::from_manifest(manifest).watched_kinds() {
            let resource = registry
                .by_kind(&gvk.group, &gvk.version, &gvk.kind)
                .map(|rt| rt.plural.clone())
                .unwrap_or_else(|| format!("{}s", gvk.kind.to_lowercase()));
            if !resources.contains(&resource) {
                resources.push(resource);
            }
        }
    }
    if !resources.is_empty() {
        say(format_args!(
            "try: kubectl --kubeconfig {} get {} --show-labels",
            shown.display(),
            resources.join(",")
        ));
    }
    let served = serve(
        client,
        &options.manifests,
        manifests,
        options.host,
        |manager, admin| {
            announce_admin("dev", admin);
            let names: Vec<String> = manager.controllers().keys().cloned().collect();
            say(format_args!(
                "krec dev: {} guest(s) reconciling ({}); Ctrl-C stops",
                names.len(),
                names.join(", ")
            ));
        },
        stop,
    )
    .await;
    say(format_args!("krec dev: stopping"));
    cluster.shutdown().await;
    served
}

/// `krec run`: the guests in `manifests` against the cluster of `kubeconfig` (or the inferred
/// one: `KUBECONFIG`, `~/.kube/config`, in-cluster), until `stop` resolves. Manifest and module
/// changes are picked up live (see [`Manager::watch`]).
///
/// # Errors
///
/// When the manifests or the cluster configuration cannot be loaded.
pub async fn run(
    manifests_dir: &Path,
    kubeconfig: Option<&Path>,
    options: HostOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let manifests = load_manifests(manifests_dir)?;
    let config = match kubeconfig {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            let parsed = kube::config::Kubeconfig::from_yaml(&text)
                .with_context(|| format!("parsing the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(parsed, &Default::default())
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration (KUBECONFIG, ~/.kube/config or in-cluster)")?,
    };
    let identity = match (&options.shard, &options.leader) {
        (Some(shard), _) => Some(shard.identity.as_str()),
        (None, Some(leader)) => Some(leader.identity.as_str()),
        (None, None) => None,
    };
    let client = client_from_config(config, identity)?;
    serve(
        client,
        manifests_dir,
        manifests,
        options,
        |manager, admin| {
            announce_admin("run", admin);
            say(format_args!(
                "krec run: {} guest(s) running",
                manager.controllers().len()
            ));
        },
        stop,
    )
    .await
}
