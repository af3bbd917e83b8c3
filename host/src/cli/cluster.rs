//! `krec cluster`: serve the embedded Kubernetes API server until Ctrl-C or SIGTERM.

use std::path::PathBuf;

use anyhow::Context as _;

use super::args::SimulationArgs;
use crate::process::progress::say;

/// The arguments of `krec cluster`.
#[derive(clap::Args)]
pub(super) struct Args {
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
    /// Take requests without a token as `system:anonymous`, which RBAC then judges (kube's
    /// default policy lets it read health and version only) — kube-apiserver's flag of the same
    /// name. Without it they get 401.
    #[arg(long)]
    anonymous_auth: bool,
    /// The longest lifetime a TokenRequest (`kubectl create token`) gets: a longer
    /// `expirationSeconds` is shortened to it, with a warning — kube-apiserver's flag of the
    /// same name (e.g. `24h`; between 1h and 2^32 s). By default there is none, as in kube.
    #[arg(long, value_parser = super::args::duration)]
    service_account_max_token_expiration: Option<std::time::Duration>,
    /// Take client certificates issued by the CAs in this PEM file: the certificate's CN is the
    /// user, each O a group (`O=system:masters` is cluster admin) — kube-apiserver's flag of the
    /// same name. Without it no client certificate is asked for, as in kube.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Serve this PEM certificate (chain) instead of one of the cluster's own CA —
    /// kube-apiserver's flag of the same name; with --tls-private-key-file. The kubeconfig
    /// written then trusts the chain as given: end it with its CA's certificate for clients
    /// (kube-rs, rustls) that trust only CAs.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM).
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    #[command(flatten)]
    simulation: SimulationArgs,
}

/// Serve until Ctrl-C or SIGTERM.
pub(super) async fn execute(args: Args) -> anyhow::Result<()> {
    let Args {
        addr,
        kubeconfig_out,
        data_dir,
        audit_log_path,
        anonymous_auth,
        service_account_max_token_expiration,
        client_ca_file,
        tls_cert_file,
        tls_private_key_file,
        simulation,
    } = args;
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read_to_string(path)
            .with_context(|| format!("--{flag}: reading {}", path.display()))
    };
    if service_account_max_token_expiration.is_some_and(|longest| {
        longest < std::time::Duration::from_secs(3600)
            || longest > std::time::Duration::from_secs(1 << 32)
    }) {
        anyhow::bail!(
            "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
        );
    }
    // Handlers first: a Ctrl-C right after the kubeconfig is announced must stop cleanly.
    let stop = super::shutdown_signal();
    let mut server = krec_apiserver::Server::builder()
        .addr(addr)
        .anonymous_auth(anonymous_auth)
        .max_token_expiration(service_account_max_token_expiration)
        .simulation(simulation.config())
        .faults(simulation.faults()?);
    if let Some(dir) = &data_dir {
        server = server.data_dir(dir);
    }
    if let Some(path) = &client_ca_file {
        server = server.client_ca(read("client-ca-file", path)?);
    }
    if let (Some(cert), Some(key)) = (&tls_cert_file, &tls_private_key_file) {
        server = server.serving_certificate(
            read("tls-cert-file", cert)?,
            read("tls-private-key-file", key)?,
        );
    }
    if let Some(path) = &audit_log_path {
        let log = krec_apiserver::audit::AuditLog::to_file(path)
            .with_context(|| format!("opening the audit log {}", path.display()))?;
        server = server.audit(std::sync::Arc::new(log));
    }
    let cluster = server.start().await?;
    super::serve_reconciler_crds(&cluster)?;
    cluster
        .write_kubeconfig(&kubeconfig_out)
        .with_context(|| format!("writing the kubeconfig to {}", kubeconfig_out.display()))?;
    let shown = std::fs::canonicalize(&kubeconfig_out).unwrap_or(kubeconfig_out);
    say(format_args!(
        "krec cluster: serving the Kubernetes API at https://{}",
        cluster.addr()
    ));
    match &data_dir {
        Some(dir) => say(format_args!("objects persist in {}", dir.display())),
        None => say("objects are kept in memory (use --data-dir to keep them)"),
    }
    say(format_args!("kubeconfig: {}", shown.display()));
    say(format_args!(
        "try: kubectl --kubeconfig {} get namespaces",
        shown.display()
    ));
    stop.await;
    say("krec cluster: stopping");
    cluster.shutdown().await;
    Ok(())
}
