//! `krec install`: krec's API and the host, as `kubectl apply -f -` input, or applied.

use std::path::PathBuf;

use crate::install::Install;
use crate::manifest::Manifest;
use crate::process::progress::say;

/// The arguments of `krec install`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// The host's namespace.
    #[arg(long, default_value = "krec-system")]
    namespace: String,
    /// The host's image (built with deploy/Containerfile).
    #[arg(long, default_value = "krec:dev")]
    image: String,
    /// Replicas sharing the guests.
    #[arg(long, default_value_t = 3)]
    replicas: u32,
    /// An image of guest manifests and modules (deploy/Containerfile's `guests` target), copied
    /// into /guests by an init container; without it, guests come from Reconciler objects only.
    #[arg(long)]
    guests_image: Option<String>,
    /// Guests whose permissions the host's ClusterRole grants (as `krec rbac` does).
    #[arg(long)]
    manifests: Option<PathBuf>,
    /// A ClusterRole to bind to the host besides its own (repeatable), e.g. `view`: what guests
    /// registered as objects may be allowed.
    #[arg(long = "grant")]
    grants: Vec<String>,
    /// What each namespace's guests may use together, e.g. `guests=5,memory=1Gi,cpu=2`.
    #[arg(long)]
    tenant_quota: Option<crate::manifest::tenancy::TenantQuota>,
    /// Apply the objects (server-side, field manager `krec-install`) instead of printing them.
    #[arg(long)]
    apply: bool,
    /// With --apply: the kubeconfig to use (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, requires = "apply")]
    kubeconfig: Option<PathBuf>,
}

/// Print or apply.
pub(super) async fn execute(args: Args) -> anyhow::Result<()> {
    let manifests = match &args.manifests {
        Some(dir) => Manifest::load_valid(dir)?,
        None => Vec::new(),
    };
    let install = Install {
        namespace: args.namespace,
        image: args.image,
        replicas: args.replicas,
        guests_image: args.guests_image,
        manifests,
        manifests_dir: args.manifests,
        grants: args.grants,
        tenant_quota: args.tenant_quota,
    };
    if !args.apply {
        print!("{}", install.yaml()?);
        return Ok(());
    }
    let config = crate::cluster::connect::load_config(args.kubeconfig.as_deref()).await?;
    let client = crate::cluster::connect::client_from_config(config, None)?;
    let api = crate::cluster::client::ApiClient::new(client);
    let objects = install.objects()?;
    let total = objects.len();
    let mut failed = Vec::new();
    for object in objects {
        let gvk = krec_core::Gvk::from_api_version(
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        let namespace = object["metadata"]["namespace"].as_str();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let applied = api
            .patch(
                &gvk,
                namespace,
                name,
                krec_core::PatchType::Apply,
                &object,
                false,
                "krec-install",
            )
            .await;
        match applied {
            Ok(_) => say(format_args!("{} {name} applied", gvk.kind)),
            Err(err) => failed.push(format!("{} {name}: {err}", gvk.kind)),
        }
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {total} objects not applied:\n  {}",
            failed.len(),
            failed.join("\n  ")
        );
    }
    Ok(())
}
