//! `krec run`: the guests against a Kubernetes cluster until Ctrl-C or SIGTERM.

use std::path::{Path, PathBuf};

use super::args::HostArgs;
use crate::manifest::Manifest;
use crate::progress::say;
use crate::runtime::{HostOptions, Runtime};

/// The arguments of `krec run`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// Directory of guest manifests.
    #[arg(long)]
    manifests: PathBuf,
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
        &args.manifests,
        args.kubeconfig.as_deref(),
        options,
        super::shutdown_signal(),
    )
    .await
}

/// `krec run`: the guests in `manifests_dir` against the cluster of `kubeconfig` (or the
/// inferred one: `KUBECONFIG`, `~/.kube/config`, in-cluster), until `stop` resolves. Manifest
/// and module changes are picked up live (see [`crate::manager::Manager::watch`]).
///
/// # Errors
///
/// When the manifests or the cluster configuration cannot be loaded, or no guest starts.
pub async fn run(
    manifests_dir: &Path,
    kubeconfig: Option<&Path>,
    options: HostOptions,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let manifests = Manifest::load_valid(manifests_dir)?;
    let config = crate::connect::load_config(kubeconfig).await?;
    let client = crate::connect::client_from_config(config, options.identity())?;
    let runtime = Runtime::builder(client, manifests_dir, manifests)
        .options(options)
        .start()
        .await?;
    super::announce_admin("run", runtime.admin_addr());
    say(format_args!(
        "krec run: {} guest(s) running",
        runtime.manager().controllers().len()
    ));
    stop.await;
    runtime.shutdown().await;
    Ok(())
}
