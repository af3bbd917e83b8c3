//! `krec dev`: the dev loop. Starts the embedded API server on loopback, writes a kubeconfig for
//! it, applies the CRDs and example objects found under a directory (by default the sample
//! guests'), runs the guests of a manifest directory, reloading them as they change, and logs
//! every reconcile until Ctrl-C.

use std::path::PathBuf;

use anyhow::Context as _;

use super::args::{CompilerArgs, HostArgs, SimulationArgs};
use crate::cluster::client::ApiClient;
use crate::manifest::Manifest;
use crate::process::progress::say;
use crate::runtime::{HostOptions, Runtime};

/// The arguments of `krec dev`.
#[derive(clap::Args)]
pub(super) struct Args {
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
    compiler: CompilerArgs,
    #[command(flatten)]
    simulation: SimulationArgs,
    #[command(flatten)]
    host: HostArgs,
}

/// Run the dev loop until Ctrl-C or SIGTERM.
pub(super) async fn execute(args: Args) -> anyhow::Result<()> {
    // Dev builds (`--dev`) run here, their sources mounted and watched.
    crate::guest::dev_source::mount_in_this_process();
    let options = DevOptions {
        manifests: args.manifests,
        apply: args.apply,
        addr: args.addr,
        kubeconfig_out: args.kubeconfig_out,
        simulation: args.simulation.config(),
        faults: args.simulation.faults()?,
        host: HostOptions {
            // The embedded cluster calls the guests' webhooks.
            webhook_registration: crate::runtime::WebhookRegistration::Own,
            compiler: args.compiler.compiler,
            ..args.host.options()?
        },
    };
    dev(options, super::shutdown_signal()).await
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

/// `krec dev`: run until `stop` resolves, then shut down gracefully. Manifest and module
/// changes are picked up live (see [`crate::guests::Manager::watch`]).
///
/// # Errors
///
/// When the manifests cannot be read at all, the server cannot start or the kubeconfig cannot
/// be written. Bad objects and bad guests are reported and skipped.
pub async fn dev(
    options: DevOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let manifests = match options.host.from_cluster {
        Some(_) => Manifest::load_valid_or_none(&options.manifests)?,
        None => Manifest::load_valid(&options.manifests)?,
    };
    let apply_dir = options.apply.as_deref().unwrap_or(&options.manifests);
    let objects = crate::manifest::objects::read_objects(apply_dir)?;

    let cluster = krec_apiserver::Server::builder()
        .addr(options.addr)
        .simulation(options.simulation.clone())
        .faults(options.faults.clone())
        .start()
        .await?;
    super::serve_reconciler_crds(&cluster)?;
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
    let client = crate::cluster::connect::client_from_kubeconfig(cluster.kubeconfig()).await?;
    for problem in crate::install::apply_objects(&ApiClient::new(client.clone()), objects).await {
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
    let served = async {
        let runtime = Runtime::builder(client, &options.manifests, manifests)
            .options(options.host)
            .start()
            .await?;
        super::announce_admin("dev", runtime.admin_addr());
        let (reconciling, serving): (Vec<_>, Vec<_>) = runtime
            .manager()
            .controllers()
            .into_iter()
            .partition(|(_, c)| crate::guests::reconciles(c.module().manifest()));
        let names = |guests: Vec<(String, _)>| {
            guests
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let serving = match serving.len() {
            0 => String::new(),
            n => format!(", {n} serving webhooks ({})", names(serving)),
        };
        say(format_args!(
            "krec dev: {} guest(s) reconciling ({}){serving}; Ctrl-C stops",
            reconciling.len(),
            names(reconciling),
        ));
        stop.await;
        runtime.shutdown().await;
        anyhow::Ok(())
    }
    .await;
    say("krec dev: stopping");
    cluster.shutdown().await;
    served
}
