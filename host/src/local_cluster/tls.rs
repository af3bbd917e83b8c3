//! The embedded API server's TLS: a self-signed CA generated at start-up, a serving certificate
//! for `localhost` and the bound address signed by it, and the kubeconfig that trusts the CA.

use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The generated CA and serving certificate.
pub struct Certificates {
    /// PEM of the CA certificate, written into the kubeconfig.
    pub ca_pem: String,
    /// The server's rustls configuration.
    pub server_config: Arc<rustls::ServerConfig>,
}

/// TLS set-up failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Certificate generation failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// Generate a CA and a serving certificate for `localhost`, `127.0.0.1`, `::1` and `addr`'s IP.
pub fn generate(addr: &SocketAddr) -> Result<Certificates, TlsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "krec-cluster-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let ip = addr.ip().to_string();
    if !names.contains(&ip) && !addr.ip().is_unspecified() {
        names.push(ip);
    }
    let server_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "krec-cluster");
    let server_cert = params.signed_by(&server_key, &issuer)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(server_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Certificates {
        ca_pem: ca_cert.pem(),
        server_config: Arc::new(config),
    })
}

/// A kubeconfig for `server` (an `https://` URL) trusting `ca_pem`, with context `krec`.
pub fn kubeconfig(server: &str, ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: krec
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: krec
  user:
    token: krec-local-cluster
contexts:
- name: krec
  context:
    cluster: krec
    user: krec
    namespace: default
current-context: krec
"
    )
}
