//! `krec run`: the guests against a Kubernetes cluster until Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};

use super::args::HostArgs;
use crate::manifest::Manifest;
use crate::process::progress::say;
use crate::runtime::{HostOptions, Runtime};

/// The arguments of `krec run`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// Directory of guest manifests (with --from-cluster, optional).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// Kubeconfig to use (default: KUBECONFIG, ~/.kube/config, or the in-cluster config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    host: HostArgs,
}

/// Run until Ctrl-C or SIGTERM.
pub(super) async fn execute(args: Args) -> anyhow::Result<()> {
    let options = args.host.options()?;
    run(
        args.manifests.as_deref(),
        args.kubeconfig.as_deref(),
        options,
        super::shutdown_signal(),
    )
    .await
}

/// `krec run`: the guests in `manifests_dir` (and, with [`HostOptions::from_cluster`], those
/// registered as objects) against the cluster of `kubeconfig` (or the inferred one:
/// `KUBECONFIG`, `~/.kube/config`, in-cluster), until `stop` resolves. Manifest, object and
/// module changes are picked up live (see [`crate::guests::Manager::watch_sources`]).
///
/// # Errors
///
/// When neither manifests nor `--from-cluster` are given, the manifests or the cluster
/// configuration cannot be loaded, or no guest starts (with manifests only).
pub async fn run(
    manifests_dir: Option<&Path>,
    kubeconfig: Option<&Path>,
    options: HostOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let manifests = match (manifests_dir, &options.from_cluster) {
        (None, None) => anyhow::bail!("krec run needs --manifests DIR, --from-cluster, or both"),
        (Some(dir), None) => Manifest::load_valid(dir)?,
        // Guests may all come from the cluster: an empty directory is fine.
        (Some(dir), Some(_)) => Manifest::load_valid_or_none(dir)?,
        (None, Some(_)) => Vec::new(),
    };
    let config = crate::cluster::connect::load_config(kubeconfig).await?;
    let client = crate::cluster::connect::client_from_config(config, options.identity())?;
    let builder = match manifests_dir {
        Some(dir) => Runtime::builder(client, dir, manifests),
        None => Runtime::builder_cluster(client),
    };
    let runtime = builder.options(options).start().await?;
    super::announce_admin("run", runtime.admin_addr());
    say(format_args!(
        "krec run: {} guest(s) running",
        runtime.manager().controllers().len()
    ));
    stop.await;
    runtime.shutdown().await;
    Ok(())
}
