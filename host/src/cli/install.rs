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
    /// A `krec run` flag for the host, after the ones the install sets (repeatable), e.g.
    /// `--host-arg=--insecure-registry=registry.local:5000`; checked as `krec run` would.
    #[arg(long = "host-arg", allow_hyphen_values = true)]
    host_args: Vec<String>,
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
    check_host_args(&args.host_args)?;
    let install = Install {
        namespace: args.namespace,
        image: args.image,
        replicas: args.replicas,
        guests_image: args.guests_image,
        manifests,
        manifests_dir: args.manifests,
        grants: args.grants,
        tenant_quota: args.tenant_quota,
        host_args: args.host_args,
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

/// `host_args` as `krec run` parses them: refused now rather than by every replica's crash
/// loop.
fn check_host_args(host_args: &[String]) -> anyhow::Result<()> {
    use clap::Parser as _;
    if host_args.is_empty() {
        return Ok(());
    }
    let run = ["krec", "run"]
        .into_iter()
        .map(str::to_owned)
        .chain(host_args.iter().cloned());
    match super::Cli::try_parse_from(run) {
        Ok(_) => Ok(()),
        Err(err) => {
            let text = err.to_string();
            let first = text.lines().next().unwrap_or_default();
            anyhow::bail!(
                "--host-arg {}: krec run would refuse it: {}",
                host_args.join(" "),
                first.trim_start_matches("error: ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_host_args;

    #[test]
    fn host_args_should_be_checked_as_krec_run_parses_them() {
        let ok = [
            "--insecure-registry=registry.local:5000".to_owned(),
            "--leader-elect".to_owned(),
        ];
        check_host_args(&ok).expect("krec run takes them");
        let err = check_host_args(&["--insecure-registr=x".to_owned()]).expect_err("a typo");
        assert!(
            err.to_string().starts_with("--host-arg --insecure-registr=x: krec run would refuse it: unexpected argument '--insecure-registr' found"),
            "{err}"
        );
    }
}
