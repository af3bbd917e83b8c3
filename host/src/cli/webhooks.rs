//! `krec webhooks`: the YAML that registers the guests' webhooks in a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::admission::Reach;
use crate::manifest::Manifest;

/// The arguments of `krec webhooks`.
#[derive(clap::Args)]
pub(super) struct Args {
    /// Directory of guest manifests.
    #[arg(long)]
    manifests: PathBuf,
    /// The host's Service: `NAMESPACE/NAME[:PORT]`.
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
}

/// Print the registrations, or say why not.
pub(super) fn execute(args: Args) -> ExitCode {
    match registrations(args) {
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

/// `krec webhooks`: the YAML registering the guests' webhooks (see `krec webhooks --help`).
fn registrations(args: Args) -> anyhow::Result<String> {
    let Args {
        manifests,
        service,
        url,
        ca_file,
        generate_certs,
    } = args;
    let reach = match url {
        Some(url) => {
            anyhow::ensure!(
                url_host(&url).is_some(),
                "--url {url:?}: not https://HOST[:PORT]"
            );
            Reach::Url(url.trim_end_matches('/').to_owned())
        }
        None => Reach::service(&service).map_err(|e| anyhow::anyhow!("--service {e}"))?,
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
            let issued = krec_net::tls::issue("krec-webhooks", names)?;
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
    let manifests = Manifest::load_valid(&manifests)?;
    crate::admission::registration_yaml(&manifests, &reach, &ca_pem)
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
