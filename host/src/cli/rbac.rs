//! `krec rbac`: the least-privilege ClusterRole and binding for the guests in a directory.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::manifest::Manifest;

/// The arguments of `krec rbac`.
#[derive(clap::Args)]
pub(super) struct Args {
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
}

/// Print the YAML, or say why not.
pub(super) fn execute(args: Args) -> ExitCode {
    let subject = crate::install::rbac::Subject {
        name: args.name,
        namespace: args.namespace,
        service_account: args.service_account,
    };
    let generated = Manifest::load_valid(&args.manifests)
        .map_err(anyhow::Error::from)
        .and_then(|m| {
            Ok(crate::install::rbac::generate(
                &m,
                Some(&args.manifests),
                &subject,
            )?)
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
