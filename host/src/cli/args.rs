//! The argument groups several commands share: the local cluster's simulation, how the host
//! runs, the module cache.

use std::path::PathBuf;

use crate::runtime::HostOptions;

/// Durations on the command line: `15s`, `500ms`, `2m`.
pub(super) fn duration(text: &str) -> Result<std::time::Duration, crate::manifest::UnitError> {
    crate::manifest::parse_duration(text)
}

/// Byte quantities on the command line: `4Gi`, `512Mi`.
pub(super) fn quantity(text: &str) -> Result<u64, crate::manifest::UnitError> {
    crate::manifest::parse_quantity(text)
}

/// A Service on the command line: `NAMESPACE/NAME[:PORT]`.
pub(super) fn webhook_service(
    text: &str,
) -> Result<crate::admission::Reach, crate::admission::BadService> {
    crate::admission::Reach::service(text)
}

/// The local cluster's built-in controllers and simulated nodes.
#[cfg(feature = "embedded-apiserver")]
#[derive(clap::Args)]
pub(super) struct SimulationArgs {
    /// Built-in controllers to run: all, none, or a comma-separated list of deployment,
    /// replicaset, statefulset, daemonset, job, scheduler, kubelet, endpoints, serviceaccount.
    #[arg(long, default_value = "all")]
    controllers: krec_apiserver::controllers::Selection,
    /// Simulated nodes (krec-node-0, …) the scheduler binds Pods to (at most 250).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(0..=250))]
    nodes: u16,
    /// How long a bound Pod stays Pending before it runs (e.g. 500ms, 2s).
    #[arg(long, default_value = "500ms", value_parser = duration)]
    pod_start_delay: std::time::Duration,
    /// How long a Job's Pod runs before it succeeds.
    #[arg(long, default_value = "2s", value_parser = duration)]
    job_duration: std::time::Duration,
    /// Inject faults from this YAML file (conflicts, throttling, errors, latency, cut watches;
    /// see docs/apiserver.md, "Fault injection").
    #[arg(long)]
    faults: Option<PathBuf>,
}

#[cfg(feature = "embedded-apiserver")]
impl SimulationArgs {
    pub(super) fn config(&self) -> krec_apiserver::controllers::Config {
        krec_apiserver::controllers::Config {
            controllers: self.controllers.clone(),
            nodes: self.nodes.into(),
            pod_start: self.pod_start_delay,
            job_duration: self.job_duration,
            root_ca: None,
        }
    }

    /// The fault rules of `--faults`, or none.
    pub(super) fn faults(&self) -> anyhow::Result<std::sync::Arc<krec_apiserver::faults::Faults>> {
        let faults = match &self.faults {
            Some(path) => krec_apiserver::faults::Faults::load(path).map_err(anyhow::Error::msg)?,
            None => Default::default(),
        };
        Ok(std::sync::Arc::new(faults))
    }
}

/// The shortest `--poll-files`: each look reads every manifest's and module's metadata.
const MIN_POLL_FILES: std::time::Duration = std::time::Duration::from_millis(100);

/// How the host runs: module cache, admin server, leader election, shutdown.
#[derive(clap::Args)]
pub(super) struct HostArgs {
    #[command(flatten)]
    cache: CacheArgs,
    /// Admin server address (metrics, probes, manual trigger); port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    admin_addr: std::net::SocketAddr,
    /// Bearer token required by the manual trigger; needed when --admin-addr is not loopback.
    #[arg(long, env = "KREC_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// File holding the bearer token (e.g. a mounted Secret).
    #[arg(long, conflicts_with = "admin_token")]
    admin_token_file: Option<PathBuf>,
    /// Run workers only while holding a coordination.k8s.io/v1 Lease.
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = "krec")]
    leader_elect_lease_name: String,
    /// The Lease's namespace.
    #[arg(long, default_value = "default")]
    leader_elect_namespace: String,
    /// How long a Lease is valid after its last renewal.
    #[arg(long, default_value = "15s", value_parser = duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew before it steps down.
    #[arg(long, default_value = "10s", value_parser = duration)]
    leader_elect_renew_deadline: std::time::Duration,
    /// How often candidates try to acquire the Lease and the leader renews it.
    #[arg(long, default_value = "2s", value_parser = duration)]
    leader_elect_retry_period: std::time::Duration,
    /// Share the guests with the other replicas of the same --shard-group: each guest runs in
    /// exactly one replica, through a Lease of its own (`<group>-<guest>`); replicas find each
    /// other through membership Leases and rebalance when one joins or leaves. Uses the
    /// --leader-elect-namespace and timings.
    #[arg(long, conflicts_with = "leader_elect")]
    shard: bool,
    /// The shard group: the prefix of its Leases' names.
    #[arg(long, default_value = "krec")]
    shard_group: String,
    /// How long running reconciles get to finish on SIGTERM or Ctrl-C.
    #[arg(long, default_value = "30s", value_parser = duration)]
    shutdown_timeout: std::time::Duration,
    /// Address of the HTTPS admission server for guests with `webhooks` (a certificate for
    /// localhost and this address is generated). `krec dev` serves them on loopback anyway.
    #[arg(long)]
    webhook_addr: Option<std::net::SocketAddr>,
    /// The admission server's certificate chain (PEM, e.g. a mounted `kubernetes.io/tls`
    /// Secret's tls.crt) instead of a generated one; needs --webhook-key-file.
    #[arg(long, requires = "webhook_key_file")]
    webhook_cert_file: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "webhook_cert_file")]
    webhook_key_file: Option<PathBuf>,
    /// The CA that signed --webhook-cert-file (e.g. the Secret's ca.crt), which the webhooks
    /// the host registers trust; default: the certificate chain itself. The files are read
    /// again when they change (a renewed Secret).
    #[arg(long, requires = "webhook_cert_file")]
    webhook_ca_file: Option<PathBuf>,
    /// How long the serving certificates the host issues itself (no --webhook-cert-file) are
    /// valid; each is renewed at two thirds of it.
    #[arg(long, default_value = "2160h", value_parser = duration)]
    webhook_cert_validity: std::time::Duration,
    /// Leave the registrations' `caBundle`s to cert-manager: annotate them
    /// `cert-manager.io/inject-ca-from: NAMESPACE/CERTIFICATE` (the Certificate whose Secret
    /// --webhook-cert-file and --webhook-key-file mount).
    #[arg(long, requires = "webhook_cert_file")]
    webhook_inject_ca_from: Option<String>,
    /// Register the guests' webhooks (and CRD conversions) with the cluster, reached through
    /// this Service, `NAMESPACE/NAME[:PORT]` (the host's own, as `krec install` makes it); the
    /// registrations follow the guests and outlive a stopping replica.
    #[arg(long, value_parser = webhook_service, conflicts_with = "register_webhooks")]
    webhook_service: Option<crate::admission::Reach>,
    /// Register the guests' webhooks with the cluster at the admission server's own address
    /// (an API server that reaches this host directly, as in tests); removed when it stops.
    #[arg(long)]
    register_webhooks: bool,
    /// The namespace this host runs in (its Pods): its guests' webhooks leave it out, as they
    /// leave out kube-system and kube-node-lease.
    #[arg(long, env = "KREC_NAMESPACE")]
    namespace: Option<String>,
    /// Most linear memory all guests' instances may hold together, a Kubernetes quantity
    /// (`4Gi`); a guest growing past it traps out-of-memory (default: half of the machine's
    /// memory or cgroup limit).
    #[arg(long, value_parser = quantity)]
    guest_memory: Option<u64>,
    /// Also run the guests registered in the cluster as `Reconciler` and `ClusterReconciler`
    /// objects (the CRDs of `krec install` must be installed): creating, changing or deleting
    /// one starts, swaps or stops its guest.
    #[arg(long)]
    from_cluster: bool,
    /// The directory objects' relative `spec.module` paths are resolved against (default: the
    /// current directory); paths leaving it are refused.
    #[arg(long, requires = "from_cluster")]
    module_dir: Option<PathBuf>,
    /// What the guests of each namespace's `Reconciler` objects may use together, e.g.
    /// `guests=5,memory=1Gi,cpu=2` (any of the three); a guest that would exceed it does not
    /// start and its status says why.
    #[arg(long, requires = "from_cluster")]
    tenant_quota: Option<crate::manifest::tenancy::TenantQuota>,
    /// A registry (`host:port`, as `oci://` references name it) spoken to over plain HTTP
    /// rather than HTTPS; repeatable. Only for registries on a trusted network.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// A host (`host` or `host:port`) a registry may redirect a pull to, or name as its token
    /// service, beside its own (a CDN serving its blobs); repeatable. Other redirects and
    /// realms are refused: a registry cannot make the host fetch other addresses.
    #[arg(long = "registry-redirect-host")]
    registry_redirect_hosts: Vec<String>,
    /// Look at the manifests and modules this often (`1s`) instead of waiting for the file
    /// system's events, for file systems that send none (NFS, WSL's Windows drives, some
    /// container mounts). Where the events cannot be had (the user's inotify instances used
    /// up), the host looks every second anyway.
    #[arg(long, value_parser = duration)]
    poll_files: Option<std::time::Duration>,
}

impl HostArgs {
    pub(super) fn options(self) -> anyhow::Result<HostOptions> {
        use anyhow::Context as _;
        let admin_token = match &self.admin_token_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading --admin-token-file {}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            None => self.admin_token.clone(),
        };
        let leader = self.leader_elect.then(|| {
            let mut config = crate::runtime::leader::LeaderConfig::new(
                &self.leader_elect_lease_name,
                &self.leader_elect_namespace,
            );
            config.lease_duration = self.leader_elect_lease_duration;
            config.renew_deadline = self.leader_elect_renew_deadline;
            config.retry_period = self.leader_elect_retry_period;
            config
        });
        let shard = if self.shard {
            let mut config = crate::runtime::shard::ShardConfig::new(
                &self.shard_group,
                &self.leader_elect_namespace,
            );
            config.lease_duration = self.leader_elect_lease_duration;
            config.renew_deadline = self.leader_elect_renew_deadline;
            config.retry_period = self.leader_elect_retry_period;
            config
                .validate()
                .map_err(|e| anyhow::anyhow!("--shard: {e}"))?;
            Some(config)
        } else {
            None
        };
        if let Some(poll) = self.poll_files
            && poll < MIN_POLL_FILES
        {
            anyhow::bail!("--poll-files {poll:?}: at least {MIN_POLL_FILES:?}");
        }
        Ok(HostOptions {
            module_cache: self.cache.open(),
            admin_addr: Some(self.admin_addr),
            admin_token,
            leader,
            shard,
            shutdown_timeout: self.shutdown_timeout,
            webhook_addr: self.webhook_addr,
            webhook_tls: self
                .webhook_cert_file
                .zip(self.webhook_key_file)
                .map(|(cert, key)| crate::admission::TlsFiles {
                    cert,
                    key,
                    ca: self.webhook_ca_file,
                }),
            webhook_cert_validity: self.webhook_cert_validity,
            webhook_inject_ca_from: self.webhook_inject_ca_from,
            webhook_registration: match (self.webhook_service, self.register_webhooks) {
                (Some(reach), _) => crate::runtime::WebhookRegistration::At(reach),
                (None, true) => crate::runtime::WebhookRegistration::Own,
                (None, false) => crate::runtime::WebhookRegistration::Off,
            },
            namespace: self.namespace,
            guest_memory: self.guest_memory,
            from_cluster: self
                .from_cluster
                .then(|| crate::guests::from_cluster::FromCluster {
                    module_dir: self
                        .module_dir
                        .or_else(|| std::env::current_dir().ok())
                        .unwrap_or_else(|| PathBuf::from(".")),
                    quota: self.tenant_quota.unwrap_or_default(),
                }),
            insecure_registries: self.insecure_registries,
            registry_redirect_hosts: self.registry_redirect_hosts,
            compiler: crate::guest::engine::Compiler::Cranelift,
            poll_files: self.poll_files,
        })
    }
}

/// The compiler an author's command (`krec dev`, `check`, `replay`) compiles guests with.
#[derive(clap::Args)]
pub(super) struct CompilerArgs {
    /// The compiler: Winch compiles a large (Go, Python, TypeScript) guest several times faster
    /// than Cranelift and runs it slower — an edit, a check or a replay starts sooner. The
    /// module cache keeps each compiler's code apart; `krec run` always uses Cranelift.
    #[arg(long, value_enum, default_value_t = crate::guest::engine::Compiler::Winch)]
    pub(super) compiler: crate::guest::engine::Compiler,
}

/// Where compiled guest modules are kept between runs.
#[derive(clap::Args)]
pub(super) struct CacheArgs {
    /// Directory of compiled modules (default: $XDG_CACHE_HOME/krec/modules or
    /// ~/.cache/krec/modules). Must be writable only by this user.
    #[arg(long)]
    module_cache: Option<PathBuf>,
    /// Compile every module at every load.
    #[arg(long, conflicts_with = "module_cache")]
    no_module_cache: bool,
}

impl CacheArgs {
    /// The module cache these arguments name (disabled, with a warning, if unusable).
    pub(super) fn open(&self) -> crate::guest::ModuleCache {
        use crate::guest::ModuleCache;
        if self.no_module_cache {
            return ModuleCache::disabled();
        }
        let Some(dir) = self.module_cache.clone().or_else(ModuleCache::default_dir) else {
            tracing::warn!("no HOME or XDG_CACHE_HOME: compiled modules are not cached");
            return ModuleCache::disabled();
        };
        match ModuleCache::new(&dir) {
            Ok(cache) => cache,
            Err(err) => {
                tracing::warn!(
                    "module cache {} unusable, compiling every load: {err}",
                    dir.display()
                );
                ModuleCache::disabled()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HostArgs;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Host {
        #[command(flatten)]
        host: HostArgs,
    }

    fn options(args: &[&str]) -> anyhow::Result<crate::runtime::HostOptions> {
        let parsed = Host::try_parse_from(std::iter::once("krec").chain(args.iter().copied()))?;
        parsed.host.options()
    }

    #[test]
    fn poll_files_should_be_taken_and_a_period_too_short_refused() {
        let taken = options(&["--poll-files", "2s"]).expect("2s");
        assert_eq!(taken.poll_files, Some(std::time::Duration::from_secs(2)));
        assert_eq!(options(&[]).expect("none").poll_files, None);
        let Err(refused) = options(&["--poll-files", "0s"]) else {
            panic!("--poll-files 0s taken");
        };
        assert_eq!(refused.to_string(), "--poll-files 0ns: at least 100ms");
    }
}
