//! The host assembled: one place that starts, in order, the admin server, leader election or
//! sharding, the [`Manager`] (cluster access, shared cache, guests), the admission server and
//! the manifest watcher — and stops them in reverse. `krec dev` and `krec run` (and the tests)
//! build a [`Runtime`] and differ only in where the client and the manifests come from.
//!
//! ```text
//! Runtime::builder(client, manifests_dir, manifests).options(..).start()
//!   admin (probes answer during start-up)
//!   leader election  | sharding tenures
//!   Manager::start_with (cache, guests, their controllers)
//!   sharder (Leases per guest)
//!   admission server (+ registrations, krec dev)
//!   manifest (and guest object) watcher, status writer (--from-cluster)
//! Runtime::shutdown: not ready → watcher → webhooks → hand guests over → drain → Leases
//! ```

pub mod admin;
mod admission;
pub mod leader;
pub mod shard;
mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::cluster::client::ApiClient;
use crate::guest::ModuleCache;
use crate::guests::status::StatusWriter;
use crate::guests::{Manager, ManagerOptions, SHUTDOWN_TIMEOUT, Watcher};
use crate::manifest::Manifest;
use crate::process::metrics::{Metrics, NameLabel};
use crate::runtime::admin::Admin;
use crate::runtime::leader::{LeaderConfig, LeaderElector};
use crate::runtime::shard::{ShardConfig, Sharder};

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
    /// Guests sharded across replicas by Leases (see [`crate::runtime::shard`]); excludes `leader`.
    pub shard: Option<ShardConfig>,
    /// How long running reconciles get to finish at shutdown.
    pub shutdown_timeout: std::time::Duration,
    /// Address of the admission server, for guests that declare `webhooks`; `None`: only
    /// when the host registers webhooks ([`webhook_registration`](Self::webhook_registration): on loopback).
    pub webhook_addr: Option<std::net::SocketAddr>,
    /// The admission server's certificate files; `None`: a certificate is generated.
    pub webhook_tls: Option<crate::admission::TlsFiles>,
    /// How long the serving certificates the host issues itself are valid (renewed at two
    /// thirds of it).
    pub webhook_cert_validity: std::time::Duration,
    /// The cert-manager Certificate (`namespace/name`) whose CA cert-manager's injector puts in
    /// the registrations' `caBundle`s (`--webhook-inject-ca-from`), instead of the host.
    pub webhook_inject_ca_from: Option<String>,
    /// Whether and how the host registers its guests' webhooks with the cluster.
    pub webhook_registration: WebhookRegistration,
    /// The namespace the host runs in (`--namespace`): its guests' webhooks leave it out.
    pub namespace: Option<String>,
    /// Most linear memory all guests' instances hold together, in bytes; `None`: half of the
    /// machine's ([`crate::process::memory::default_guest_memory`]).
    pub guest_memory: Option<u64>,
    /// Also run the guests of the cluster's `Reconciler` and `ClusterReconciler` objects
    /// (`--from-cluster`; see [`crate::guests::from_cluster`]).
    pub from_cluster: Option<crate::guests::from_cluster::FromCluster>,
    /// Registries spoken to over plain HTTP (`--insecure-registry host:port`).
    pub insecure_registries: Vec<String>,
    /// Hosts a registry may redirect a pull to (`--registry-redirect-host`).
    pub registry_redirect_hosts: Vec<String>,
    /// The compiler guests are compiled with (`--compiler`; `krec dev`: Winch).
    pub compiler: crate::guest::engine::Compiler,
    /// Look at the manifest files this often instead of waiting for events (`--poll-files`;
    /// [`ManagerOptions::poll_files`]).
    pub poll_files: Option<std::time::Duration>,
}

/// Whether and how the host keeps the cluster's webhook registrations (the
/// `Validating`/`MutatingWebhookConfiguration`s and CRD conversions) those of its running
/// guests, by server-side apply as [`crate::admission::FIELD_MANAGER`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WebhookRegistration {
    /// It does not (`krec webhooks` prints them for someone else to apply).
    #[default]
    Off,
    /// At the admission server's own address (`krec dev`, `krec run --register-webhooks`: the
    /// API server reaches the host directly); removed when the host stops.
    Own,
    /// Through `Reach` (`--webhook-service`: the host's Service in the cluster); kept when a
    /// replica stops — the other replicas, or the next Pod, serve them — and removed with the
    /// guest.
    At(crate::admission::Reach),
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
            webhook_cert_validity: crate::admission::tls::DEFAULT_VALIDITY,
            webhook_inject_ca_from: None,
            webhook_registration: WebhookRegistration::Off,
            namespace: None,
            guest_memory: None,
            from_cluster: None,
            insecure_registries: Vec::new(),
            registry_redirect_hosts: Vec::new(),
            compiler: crate::guest::engine::Compiler::Cranelift,
            poll_files: None,
        }
    }
}

impl HostOptions {
    /// Where modules from registries are kept — beside the compiled modules, or in a directory
    /// of this process's own — and which registries are insecure.
    pub fn registries(&self) -> crate::guests::oci::Registries {
        let registries = match self.module_cache.dir() {
            Some(dir) => crate::guests::oci::Registries::new(
                dir.join("oci"),
                self.insecure_registries.clone(),
            ),
            None => crate::guests::oci::Registries::new(
                crate::guests::oci::Registries::private_dir(),
                self.insecure_registries.clone(),
            ),
        };
        registries.with_redirect_hosts(self.registry_redirect_hosts.clone())
    }

    /// The identity this host's requests carry in their `User-Agent` (see
    /// [`crate::cluster::connect::user_agent`]): its replica identity under sharding or leader election.
    pub fn identity(&self) -> Option<&str> {
        match (&self.shard, &self.leader) {
            (Some(shard), _) => Some(shard.identity.as_str()),
            (None, Some(leader)) => Some(leader.identity.as_str()),
            (None, None) => None,
        }
    }
}

/// What a [`Runtime`] is started from: the client, the manifests and the options.
#[must_use = "a builder does nothing until started"]
pub struct RuntimeBuilder {
    client: kube::Client,
    manifests_dir: Option<PathBuf>,
    manifests: Vec<Manifest>,
    options: HostOptions,
}

impl RuntimeBuilder {
    /// How the host runs (default: [`HostOptions::default`]).
    pub fn options(mut self, options: HostOptions) -> Self {
        self.options = options;
        self
    }

    /// Start everything, in the [module docs](self)' order. Returns once the guests run and,
    /// with an admin server, once it reports ready (caches synced, leadership or shard
    /// assignment decided).
    ///
    /// # Errors
    ///
    /// When the admin server or the admission server cannot start, or no guest can be started
    /// (unless guests come from the cluster, where none may be registered yet); whatever had
    /// started is stopped again.
    pub async fn start(self) -> anyhow::Result<Runtime> {
        let RuntimeBuilder {
            client,
            manifests_dir,
            manifests,
            options,
        } = self;
        let admin = match options.admin_addr {
            Some(addr) => Some(Admin::start(addr, options.admin_token.clone()).await?),
            None => None,
        };
        let metrics = Arc::new(Metrics::new());
        let election = options
            .leader
            .clone()
            .map(|config| Election::start(client.clone(), config, metrics.clone()));
        let tenures = options
            .shard
            .as_ref()
            .map(|_| crate::guests::tenure::Tenures::new());
        let api = ApiClient::new(client.clone());
        let started = Manager::start_with(
            api.clone(),
            manifests,
            ManagerOptions {
                module_cache: options.module_cache.clone(),
                // Without an election the manager's gate is always open.
                gate: election.as_ref().map(|e| e.gate.clone()),
                tenures: tenures.clone(),
                metrics: Some(metrics.clone()),
                guest_memory: options.guest_memory,
                from_cluster: options.from_cluster.clone(),
                registries: Some(Arc::new(options.registries())),
                compiler: options.compiler,
                poll_files: options.poll_files,
                ..Default::default()
            },
        )
        .await;
        let manager = match started {
            Ok(manager) if !manager.controllers().is_empty() || options.from_cluster.is_some() => {
                manager
            }
            other => {
                if let Some(election) = election {
                    election.stop().await;
                }
                return Err(match other {
                    Ok(_) => anyhow::anyhow!("no guest could be started"),
                    Err(err) => err,
                });
            }
        };
        let sharding = match (options.shard.clone(), tenures) {
            (Some(config), Some(tenures)) => Some(Sharding::start(Sharder::new(
                client,
                config,
                tenures,
                manager.clone(),
                metrics,
            ))),
            _ => None,
        };
        let webhooks = match admission::start(&manager, &api, &options).await {
            Ok(webhooks) => webhooks,
            Err(err) => {
                let runtime = Runtime {
                    manager,
                    admin,
                    election,
                    sharding,
                    webhooks: None,
                    watcher: None,
                    status: None,
                    shutdown_timeout: options.shutdown_timeout,
                };
                runtime.shutdown().await;
                return Err(err);
            }
        };
        let watcher = manager.watch_sources(manifests_dir);
        let status = options.from_cluster.as_ref().map(|_| {
            let identity = options
                .identity()
                .map_or_else(crate::runtime::leader::default_identity, str::to_owned);
            StatusWriter::start_with(
                manager.clone(),
                api.clone(),
                identity,
                options.webhook_registration != WebhookRegistration::Off,
            )
        });
        if let Some(admin) = &admin {
            admin.set_manager(manager.clone());
            // Ready once the caches have synced (they have: `start_with` waited) and the
            // election or the shard assignment has an answer.
            if let Some(election) = &election {
                let _ = election.decided.clone().wait_for(|d| *d).await;
            }
            if let Some(sharding) = &sharding {
                let _ = sharding.decided.clone().wait_for(|d| *d).await;
            }
            admin.set_ready(true);
        }
        Ok(Runtime {
            manager,
            admin,
            election,
            sharding,
            webhooks,
            watcher: Some(watcher),
            status,
            shutdown_timeout: options.shutdown_timeout,
        })
    }
}

/// The host running: its guests, admin server, election or sharding, admission server and
/// manifest watcher. Stop it with [`shutdown`](Self::shutdown). Dropped without it, the admin
/// server stops and the Leases and webhook registrations are released as their tasks see their
/// stop signals gone, but running reconciles are not waited for and the guests' workers live
/// until the async runtime ends.
pub struct Runtime {
    manager: Manager,
    admin: Option<Admin>,
    election: Option<Election>,
    sharding: Option<Sharding>,
    webhooks: Option<admission::Webhooks>,
    watcher: Option<Watcher>,
    status: Option<StatusWriter>,
    shutdown_timeout: std::time::Duration,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("guests", &self.manager.controllers().len())
            .field("admin", &self.admin_addr())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime for the guests of `manifests` (read from `manifests_dir`, which is watched
    /// for changes), against the cluster of `client`.
    pub fn builder(
        client: kube::Client,
        manifests_dir: &Path,
        manifests: Vec<Manifest>,
    ) -> RuntimeBuilder {
        RuntimeBuilder {
            client,
            manifests_dir: Some(manifests_dir.to_owned()),
            manifests,
            options: HostOptions::default(),
        }
    }

    /// A runtime for the guests registered as objects in the cluster of `client` only (set
    /// [`HostOptions::from_cluster`]), with no manifest directory.
    pub fn builder_cluster(client: kube::Client) -> RuntimeBuilder {
        RuntimeBuilder {
            client,
            manifests_dir: None,
            manifests: Vec::new(),
            options: HostOptions::default(),
        }
    }

    /// The guests.
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// Where the admin server listens, if there is one.
    pub fn admin_addr(&self) -> Option<std::net::SocketAddr> {
        self.admin.as_ref().map(Admin::addr)
    }

    /// Stop gracefully: not ready any more, no manifest reloads, the webhook registrations
    /// removed, no new work; sharded guests handed over as their reconciles finish, running
    /// reconciles given the shutdown timeout, then the Leases released.
    pub async fn shutdown(self) {
        tracing::info!(target: "krec::host", "stopping: no new work, waiting for running reconciles");
        if let Some(admin) = &self.admin {
            admin.set_ready(false);
        }
        if let Some(watcher) = self.watcher {
            watcher.stop().await;
        }
        if let Some(status) = self.status {
            status.stop().await;
        }
        if let Some(webhooks) = self.webhooks {
            // A configuration left behind would send the cluster's requests to a server that
            // is gone (failing them under `failurePolicy: Fail`).
            webhooks.stop().await;
        }
        if let Some(sharding) = &self.sharding {
            // Each guest goes to another replica as soon as its running reconciles finish.
            sharding.leaving.send_replace(true);
        }
        self.manager.shutdown(self.shutdown_timeout).await;
        if let Some(sharding) = self.sharding {
            // The workers have stopped: the guests' Leases can go to the other replicas.
            sharding.stop().await;
        }
        if let Some(election) = self.election {
            election.stop().await;
        }
    }
}

/// A task that runs until told to stop: leader election's, the sharder's.
struct Background {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Background {
    /// Spawn `run`, given the future that resolves when [`stop`](Self::stop) is called (or
    /// this is dropped).
    fn spawn<F>(run: impl FnOnce(futures::future::BoxFuture<'static, ()>) -> F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(Box::pin(async move {
            let _ = stopped.await;
        })));
        Background { stop, task }
    }

    /// Tell the task to stop and wait until it has.
    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// Leader election on a Lease: the gate it opens for the workers and whether it has decided.
struct Election {
    gate: watch::Receiver<bool>,
    decided: watch::Receiver<bool>,
    elector: Background,
    follower: JoinHandle<()>,
}

impl Election {
    /// Campaign for `config`'s Lease; `leader_election_master_status` follows the outcome.
    fn start(client: kube::Client, config: LeaderConfig, metrics: Arc<Metrics>) -> Self {
        let (gate_tx, gate) = watch::channel(false);
        let (decided_tx, decided) = watch::channel(false);
        let lease = NameLabel {
            name: config.lease_name.clone(),
        };
        let elector = LeaderElector::new(client, config);
        let mut state = elector.subscribe();
        let follower = tokio::spawn(async move {
            while state.changed().await.is_ok() {
                if let Some(leading) = *state.borrow_and_update() {
                    gate_tx.send_replace(leading);
                    decided_tx.send_replace(true);
                    metrics.leader.get_or_create(&lease).set(i64::from(leading));
                }
            }
        });
        Election {
            gate,
            decided,
            elector: Background::spawn(|stopped| elector.run(stopped)),
            follower,
        }
    }

    /// Step down and release the Lease.
    async fn stop(self) {
        self.elector.stop().await;
        let _ = self.follower.await;
    }
}

/// The sharder's task and the signals the runtime reads and sends.
struct Sharding {
    decided: watch::Receiver<bool>,
    leaving: watch::Sender<bool>,
    sharder: Background,
}

impl Sharding {
    fn start(sharder: Sharder) -> Self {
        Sharding {
            decided: sharder.decided(),
            leaving: sharder.leaving(),
            sharder: Background::spawn(|stopped| sharder.run(stopped)),
        }
    }

    /// Release every guest's Lease and the membership Lease.
    async fn stop(self) {
        self.sharder.stop().await;
    }
}
