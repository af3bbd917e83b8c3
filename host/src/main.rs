//! The `krec` command line: `krec check`, `krec cluster`, `krec dev`, `krec run`, `krec rbac`
//! and `krec webhooks`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use krec::guest::{self, GuestModule};
use krec::manifest::Manifest;

/// krec runs Kubernetes reconcilers compiled to WebAssembly components.
#[derive(Parser)]
#[command(name = "krec", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a guest crate: a reconciler with a configuration, its manifest, an example object,
    /// a unit test on the fake cluster and an integration test in the real host.
    ///
    /// Then, in the new folder: `cargo build-guest` (the wasm32-wasip2 build), `cargo test`,
    /// `krec dev --manifests .`.
    New {
        /// The guest's name (a DNS label); the folder, unless --dir says otherwise.
        name: String,
        /// The kind it reconciles: group/version/Kind or version/Kind.
        #[arg(long, default_value = "apps/v1/Deployment")]
        kind: String,
        /// Serve a validating webhook too.
        #[arg(long)]
        webhook: bool,
        /// Where to create the crate (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The krec-guest SDK's folder (default: this krec's own sources, when present; else
        /// the SDK from crates.io).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Validate manifests (and the modules they name) or bare `.wasm` modules.
    ///
    /// Prints one line per file: `ok` with the module digest, or what is wrong. Exits non-zero if
    /// any file is invalid.
    Check {
        /// Manifest files, directories of manifests, or `.wasm` component files.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// Serve the embedded Kubernetes API server, for kubectl and kube clients.
    ///
    /// HTTPS with a generated CA; the kubeconfig trusting it is written to --kubeconfig-out.
    /// There is no authentication: it binds loopback unless told otherwise. Ctrl-C stops it.
    Cluster {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: std::net::SocketAddr,
        /// Where to write the kubeconfig.
        #[arg(long, default_value = "krec-kubeconfig.yaml")]
        kubeconfig_out: PathBuf,
        /// Keep objects in this directory across restarts (default: in memory only).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Append one audit.k8s.io/v1 Event per write request (create, update, patch, delete)
        /// to this file, as JSON lines — kube-apiserver's flag of the same name.
        #[arg(long)]
        audit_log_path: Option<PathBuf>,
        #[command(flatten)]
        simulation: SimulationArgs,
    },
    /// Start the embedded API server, apply example objects and reconcile them with the guests.
    ///
    /// Writes a kubeconfig so kubectl can watch the guests work, and logs every reconcile until
    /// Ctrl-C.
    Dev {
        /// Directory of guest manifests.
        #[arg(long, default_value = "sample-guests")]
        manifests: PathBuf,
        /// Directory of CRDs and objects to apply (YAML, recursively); default: --manifests.
        #[arg(long)]
        apply: Option<PathBuf>,
        /// Address of the embedded API server; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: std::net::SocketAddr,
        /// Where to write the kubeconfig.
        #[arg(long, default_value = "krec-kubeconfig.yaml")]
        kubeconfig_out: PathBuf,
        #[command(flatten)]
        simulation: SimulationArgs,
        #[command(flatten)]
        host: HostArgs,
    },
    /// Print the least-privilege ClusterRole and binding for the guests in a directory: their
    /// permissions plus what the host needs (watches, leases, events).
    Rbac {
        /// Directory of guest manifests (CRDs found there name their kinds' resources).
        #[arg(long)]
        manifests: PathBuf,
        /// Name of the ClusterRole and ClusterRoleBinding.
        #[arg(long, default_value = "krec")]
        name: String,
        /// Namespace of the host's ServiceAccount.
        #[arg(long, default_value = "krec-system")]
        namespace: String,
        /// The host's ServiceAccount.
        #[arg(long, default_value = "krec")]
        service_account: String,
    },
    /// Print what registers the guests' webhooks in a cluster: a Mutating- and a
    /// ValidatingWebhookConfiguration per guest with `webhooks`, and the `spec.conversion` of
    /// each CRD a guest converts (apply with `kubectl apply --server-side --force-conflicts`).
    ///
    /// The API server reaches the host through --service (the default, as deploy/ creates it)
    /// or at --url; it trusts the CA of --ca-file, or of the certificates --generate-certs
    /// writes (ca.crt, and tls.crt/tls.key for `kubectl create secret tls`).
    Webhooks {
        /// Directory of guest manifests.
        #[arg(long)]
        manifests: PathBuf,
        /// The host's Service: NAMESPACE/NAME[:PORT].
        #[arg(
            long,
            default_value = "krec-system/krec-webhooks:443",
            conflicts_with = "url"
        )]
        service: String,
        /// The host's base URL instead of a Service (https://HOST:PORT).
        #[arg(long)]
        url: Option<String>,
        /// The CA certificate (PEM) that signed the host's serving certificate.
        #[arg(
            long,
            required_unless_present = "generate_certs",
            conflicts_with = "generate_certs"
        )]
        ca_file: Option<PathBuf>,
        /// Generate a CA and a serving certificate for the Service (or the URL's host) into
        /// this directory: ca.crt, tls.crt, tls.key.
        #[arg(long)]
        generate_certs: Option<PathBuf>,
    },
    /// Run the guests against a Kubernetes cluster until Ctrl-C or SIGTERM.
    Run {
        /// Directory of guest manifests.
        #[arg(long)]
        manifests: PathBuf,
        /// Kubeconfig to use (default: KUBECONFIG, ~/.kube/config, or the in-cluster config).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        #[command(flatten)]
        host: HostArgs,
    },
}

/// Durations on the command line: `15s`, `500ms`, `2m`.
fn duration(text: &str) -> Result<std::time::Duration, krec::manifest::UnitError> {
    krec::manifest::parse_duration(text)
}

/// The local cluster's built-in controllers and simulated nodes.
#[derive(clap::Args)]
struct SimulationArgs {
    /// Built-in controllers to run: all, none, or a comma-separated list of deployment,
    /// replicaset, statefulset, daemonset, job, scheduler, kubelet, endpoints, serviceaccount.
    #[arg(long, default_value = "all", value_parser = parse_selection)]
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
    /// see the README's "Fault injection").
    #[arg(long)]
    faults: Option<PathBuf>,
}

impl SimulationArgs {
    fn config(&self) -> krec_apiserver::controllers::Config {
        krec_apiserver::controllers::Config {
            controllers: self.controllers.clone(),
            nodes: self.nodes.into(),
            pod_start: self.pod_start_delay,
            job_duration: self.job_duration,
            root_ca: None,
        }
    }

    /// The fault rules of `--faults`, or none.
    fn faults(&self) -> anyhow::Result<std::sync::Arc<krec_apiserver::faults::Faults>> {
        let faults = match &self.faults {
            Some(path) => krec_apiserver::faults::Faults::load(path).map_err(anyhow::Error::msg)?,
            None => Default::default(),
        };
        Ok(std::sync::Arc::new(faults))
    }
}

fn parse_selection(text: &str) -> Result<krec_apiserver::controllers::Selection, String> {
    text.parse()
}

/// How the host runs: module cache, admin server, leader election, shutdown.
#[derive(clap::Args)]
struct HostArgs {
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
}

impl HostArgs {
    fn options(self) -> anyhow::Result<krec::dev::HostOptions> {
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
            let mut config = krec::leader::LeaderConfig::new(
                &self.leader_elect_lease_name,
                &self.leader_elect_namespace,
            );
            config.lease_duration = self.leader_elect_lease_duration;
            config.renew_deadline = self.leader_elect_renew_deadline;
            config.retry_period = self.leader_elect_retry_period;
            config
        });
        let shard = if self.shard {
            let mut config =
                krec::shard::ShardConfig::new(&self.shard_group, &self.leader_elect_namespace);
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
        Ok(krec::dev::HostOptions {
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
                .map(|(cert, key)| krec::webhooks::TlsFiles { cert, key }),
            register_webhooks: false,
        })
    }
}

/// Where compiled guest modules are kept between runs.
#[derive(clap::Args)]
struct CacheArgs {
    /// Directory of compiled modules (default: $XDG_CACHE_HOME/krec/modules or
    /// ~/.cache/krec/modules). Must be writable only by this user.
    #[arg(long)]
    module_cache: Option<PathBuf>,
    /// Compile every module at every load.
    #[arg(long, conflicts_with = "module_cache")]
    no_module_cache: bool,
}

impl CacheArgs {
    fn open(&self) -> krec::guest::ModuleCache {
        use krec::guest::ModuleCache;
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

/// `krec new`: scaffold the crate and say what to do next.
fn new_guest(
    name: String,
    kind: String,
    webhook: bool,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> ExitCode {
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    // This krec's own SDK, when its sources are on this machine (a build from a checkout).
    let sdk_path = sdk.or_else(|| {
        let own = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
        own.join("Cargo.toml")
            .exists()
            .then(|| own.canonicalize().unwrap_or(own))
    });
    let krec = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("krec"));
    let new = krec::scaffold::NewGuest {
        name,
        kind,
        webhook,
        sdk_path,
        krec,
    };
    match krec::scaffold::scaffold(&dir, &new) {
        Ok(files) => {
            for file in &files {
                println!("created {}", file.display());
            }
            println!(
                "\nnext:\n  cd {}\n  rustup target add wasm32-wasip2   # once\n  cargo build-guest                   # the .wasm\n  cargo test                        # unit and integration tests\n  krec dev --manifests .            # a local cluster, reconciling live",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("krec new: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs to stderr; `RUST_LOG` overrides `default` (e.g. `RUST_LOG=debug`).
fn init_logging(default: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // kube's client logs every failed request as an ERROR of its own, without saying whose;
    // krec reports each failure where it matters (the guest's call, the watch), so by default
    // that line is off — when the API server goes away first it was the only thing printed.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},kube_client::client::builder=off")));
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// What `krec dev` and `krec run` log by default: every reconcile and every write a guest makes.
const LIVE_LOG: &str = "info,krec::reconcile=debug,krec::client=debug";

/// Tunes glibc's allocator for a server that keeps many small objects and grows steadily:
/// each arena's heap is made writable in one step and kept when memory is freed, instead of
/// being extended by one `mprotect` per allocation that crosses its end and trimmed again (a
/// fifth of the embedded API server's CPU on writes went to growing and trimming heaps).
/// Untouched pages stay virtual, so resident memory does not change. A `GLIBC_TUNABLES`
/// setting in the environment wins: nothing is changed then.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        const MIB: libc::c_int = 1 << 20;
        // SAFETY: mallopt only sets allocator parameters; it is called before any thread starts.
        #[allow(unsafe_code)] // mallopt(3) has no safe wrapper
        unsafe {
            libc::mallopt(libc::M_TOP_PAD, 64 * MIB);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 * MIB);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 4 * MIB);
        }
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Command::New {
            name,
            kind,
            webhook,
            dir,
            sdk,
        } => {
            init_logging("info", cli.log_format);
            new_guest(name, kind, webhook, dir, sdk)
        }
        Command::Check { paths } => {
            // Warnings only: a guest's own log lines from `init` would break "one line per file".
            init_logging("warn", cli.log_format);
            check(&paths)
        }
        Command::Dev {
            manifests,
            apply,
            addr,
            kubeconfig_out,
            simulation,
            host,
        } => {
            init_logging(LIVE_LOG, cli.log_format);
            block_on("dev", async move {
                let options = krec::dev::DevOptions {
                    manifests,
                    apply,
                    addr,
                    kubeconfig_out,
                    simulation: simulation.config(),
                    faults: simulation.faults()?,
                    host: krec::dev::HostOptions {
                        // The embedded cluster calls the guests' webhooks.
                        register_webhooks: true,
                        ..host.options()?
                    },
                };
                krec::dev::dev(options, shutdown_signal()).await
            })
        }
        Command::Run {
            manifests,
            kubeconfig,
            host,
        } => {
            init_logging(LIVE_LOG, cli.log_format);
            block_on("run", async move {
                let options = host.options()?;
                krec::dev::run(
                    &manifests,
                    kubeconfig.as_deref(),
                    options,
                    shutdown_signal(),
                )
                .await
            })
        }
        Command::Rbac {
            manifests,
            name,
            namespace,
            service_account,
        } => {
            init_logging("warn", cli.log_format);
            let subject = krec::rbac::Subject {
                name,
                namespace,
                service_account,
            };
            let generated = krec::dev::load_manifests(&manifests)
                .map_err(|e| format!("{e:#}"))
                .and_then(|m| {
                    krec::rbac::generate(&m, Some(&manifests), &subject).map_err(|e| e.to_string())
                });
            match generated {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("krec rbac: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Webhooks {
            manifests,
            service,
            url,
            ca_file,
            generate_certs,
        } => {
            init_logging("warn", cli.log_format);
            let printed = webhooks(&manifests, &service, url, ca_file, generate_certs);
            match printed {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("krec webhooks: {err:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Cluster {
            addr,
            kubeconfig_out,
            data_dir,
            audit_log_path,
            simulation,
        } => {
            init_logging("info", cli.log_format);
            block_on("cluster", async move {
                let faults = simulation.faults()?;
                let served = Served {
                    addr,
                    kubeconfig_out,
                    data_dir,
                    audit_log_path,
                };
                cluster(served, simulation.config(), faults).await
            })
        }
    }
}

/// Run `future` on a new multi-threaded runtime; report its error as `krec <command>: ...`.
fn block_on(
    command: &str,
    future: impl std::future::Future<Output = anyhow::Result<()>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("krec: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(future) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("krec {command}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// `krec webhooks`: the YAML registering the guests' webhooks (see [`Command::Webhooks`]).
fn webhooks(
    manifests: &std::path::Path,
    service: &str,
    url: Option<String>,
    ca_file: Option<PathBuf>,
    generate_certs: Option<PathBuf>,
) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use krec::webhooks::Reach;
    let reach = match url {
        Some(url) => {
            anyhow::ensure!(
                url_host(&url).is_some(),
                "--url {url:?}: not https://HOST[:PORT]"
            );
            Reach::Url(url.trim_end_matches('/').to_owned())
        }
        None => {
            let (namespace, rest) = service
                .split_once('/')
                .with_context(|| format!("--service {service:?}: not NAMESPACE/NAME[:PORT]"))?;
            let (name, port) = match rest.split_once(':') {
                Some((name, port)) => (
                    name,
                    port.parse()
                        .with_context(|| format!("--service {service:?}: bad port"))?,
                ),
                None => (rest, 443),
            };
            Reach::Service {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                port,
            }
        }
    };
    let ca_pem = match (ca_file, generate_certs) {
        (Some(path), _) => std::fs::read_to_string(&path)
            .with_context(|| format!("reading --ca-file {}", path.display()))?,
        (None, Some(dir)) => {
            let names = match &reach {
                Reach::Service {
                    namespace, name, ..
                } => vec![
                    format!("{name}.{namespace}.svc"),
                    format!("{name}.{namespace}.svc.cluster.local"),
                ],
                Reach::Url(url) => url_host(url).map(str::to_owned).into_iter().collect(),
            };
            let issued = krec_apiserver::tls::issue("krec-webhooks", names)?;
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, text) in [
                ("ca.crt", &issued.ca_pem),
                ("tls.crt", &issued.cert_pem),
                ("tls.key", &issued.key_pem),
            ] {
                let path = dir.join(file);
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            issued.ca_pem
        }
        (None, None) => anyhow::bail!("--ca-file or --generate-certs is required"),
    };
    let manifests = krec::dev::load_manifests(manifests)?;
    krec::webhooks::registration_yaml(&manifests, &reach, &ca_pem)
}

/// The host of an `https://HOST[:PORT][/...]` URL (an IPv6 address without its brackets).
fn url_host(url: &str) -> Option<&str> {
    let authority = url.strip_prefix("https://")?.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then_some(host)
}

/// Where `krec cluster` serves and what it writes.
struct Served {
    addr: std::net::SocketAddr,
    kubeconfig_out: PathBuf,
    data_dir: Option<PathBuf>,
    audit_log_path: Option<PathBuf>,
}

/// `krec cluster`: serve until Ctrl-C or SIGTERM.
async fn cluster(
    served: Served,
    simulation: krec_apiserver::controllers::Config,
    faults: std::sync::Arc<krec_apiserver::faults::Faults>,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let Served {
        addr,
        kubeconfig_out,
        data_dir,
        audit_log_path,
    } = served;
    // Handlers first: a Ctrl-C right after the kubeconfig is announced must stop cleanly.
    let stop = shutdown_signal();
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "binding {addr}: the embedded API server has no authentication; anyone who can reach it is cluster admin"
        );
    }
    let mut server = krec_apiserver::Server::builder()
        .addr(addr)
        .simulation(simulation)
        .faults(faults);
    if let Some(dir) = &data_dir {
        server = server.data_dir(dir);
    }
    if let Some(path) = &audit_log_path {
        let log = krec_apiserver::audit::AuditLog::to_file(path)
            .with_context(|| format!("opening the audit log {}", path.display()))?;
        server = server.audit(std::sync::Arc::new(log));
    }
    let cluster = server.start().await?;
    cluster
        .write_kubeconfig(&kubeconfig_out)
        .with_context(|| format!("writing the kubeconfig to {}", kubeconfig_out.display()))?;
    let shown = std::fs::canonicalize(&kubeconfig_out).unwrap_or(kubeconfig_out);
    krec::dev::say(format_args!(
        "krec cluster: serving the Kubernetes API at https://{}",
        cluster.addr()
    ));
    match &data_dir {
        Some(dir) => krec::dev::say(format_args!("objects persist in {}", dir.display())),
        None => krec::dev::say(format_args!(
            "objects are kept in memory (use --data-dir to keep them)"
        )),
    }
    krec::dev::say(format_args!("kubeconfig: {}", shown.display()));
    krec::dev::say(format_args!(
        "try: kubectl --kubeconfig {} get namespaces",
        shown.display()
    ));
    stop.await;
    krec::dev::say(format_args!("krec cluster: stopping"));
    cluster.shutdown().await;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
///
/// The handlers are installed when this is called, not when the future is first polled: a host
/// polls it only once its guests run, and a SIGTERM before that must not kill it outright.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Check one parsed manifest and the module it names, and start the guest as the host would:
/// instantiated, its `init` given `spec.config` (against an empty in-memory cluster, so a
/// guest that reads the cluster in `init` sees nothing).
fn check_manifest(
    engine: &wasmtime::Engine,
    linker: &wasmtime::component::Linker<guest::HostState>,
    runtime: &tokio::runtime::Runtime,
    manifest: Result<Manifest, krec::manifest::ManifestError>,
) -> Result<String, String> {
    let manifest = manifest.map_err(|e| e.to_string())?;
    let shown = manifest.path.display().to_string();
    let name = manifest.name.clone();
    let module = GuestModule::load(engine, linker, manifest.into())
        .map_err(|e| format!("{shown}: guest {name}: {e}"))?;
    let module = std::sync::Arc::new(module);
    let cluster: std::sync::Arc<dyn krec::cluster::ClusterAccess> =
        std::sync::Arc::new(krec::cluster::MemoryCluster::new());
    runtime
        .block_on(guest::GuestWorker::new(module.clone(), cluster).warm_up())
        .map_err(|err| match err {
            // Names the file already.
            guest::ReconcileError::Config { .. } => err.to_string(),
            err => format!("{shown}: {err}"),
        })?;
    Ok(format!("{shown}: ok, guest {name} ({})", module.digest()))
}

/// `krec check`: one line per file, non-zero exit if any is bad.
fn check(paths: &[PathBuf]) -> ExitCode {
    let engine = match krec::engine::new_engine() {
        Ok(engine) => engine,
        Err(err) => {
            eprintln!("krec: cannot create the Wasm engine: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let linker = match guest::new_linker(&engine) {
        Ok(linker) => linker,
        Err(err) => {
            eprintln!("krec: cannot link the host interfaces: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("krec: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = false;
    for path in paths {
        let is_module = path.extension().is_some_and(|e| e == "wasm");
        let outcome = if is_module {
            guest::check_module(&engine, &linker, path)
                .map(|(digest, admission)| {
                    format!(
                        "{}: ok, a krec:reconciler@0.1 component: {} ({digest})",
                        path.display(),
                        if admission {
                            "reconciler and admission webhooks"
                        } else {
                            "reconciler (WIT 0.1.0: no admission exports)"
                        }
                    )
                })
                .map_err(|e| e.to_string())
        } else {
            let results = if path.is_dir() {
                match Manifest::scan_dir(path) {
                    Ok(results) if results.is_empty() => {
                        Err(format!("{}: no Reconciler manifests found", path.display()))
                    }
                    Ok(results) => Ok(results),
                    Err(err) => Err(err.to_string()),
                }
            } else {
                Ok(vec![Manifest::load(path)])
            };
            match results {
                Err(line) => Err(line),
                Ok(results) => {
                    // One line per manifest file, good or bad.
                    for result in results {
                        match check_manifest(&engine, &linker, &runtime, result) {
                            Ok(line) => println!("{line}"),
                            Err(line) => {
                                eprintln!("{line}");
                                failed = true;
                            }
                        }
                    }
                    continue;
                }
            }
        };
        match outcome {
            Ok(line) => println!("{line}"),
            Err(line) => {
                eprintln!("{line}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
