//! TLS for krec's servers: a self-signed CA generated at start-up, a serving certificate for
//! `localhost` and the bound address signed by it, the kubeconfig that trusts the CA (the
//! embedded API server), and serving configurations from files (the admission server).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The generated CA and serving certificate.
pub struct Certificates {
    /// PEM of the CA certificate, written into the kubeconfig.
    pub ca_pem: String,
    /// The server's rustls configuration.
    pub server_config: Arc<rustls::ServerConfig>,
}

/// File in the data directory holding the CA's private key, so that a restarted server keeps its
/// identity and existing kubeconfigs (and running clients) still trust it.
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// TLS set-up failures.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The CA key in the data directory could not be read or written.
    #[error("{path}: {source}")]
    KeyFile {
        /// The key file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// A PEM certificate or key could not be read.
    #[error("reading PEM: {0}")]
    Pem(String),
    /// rustls refused the configuration.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The CA key: read from `data_dir` if it holds one, else generated (and saved there, mode 0600).
fn ca_key(data_dir: Option<&Path>) -> Result<KeyPair, TlsError> {
    let Some(dir) = data_dir else {
        return Ok(KeyPair::generate()?);
    };
    let path = dir.join(CA_KEY_FILE);
    let file_error = |source| TlsError::KeyFile {
        path: path.display().to_string(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(pem) => Ok(KeyPair::from_pem(&pem)?),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let key = KeyPair::generate()?;
            std::fs::write(&path, key.serialize_pem()).map_err(file_error)?;
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(file_error)?;
            }
            Ok(key)
        }
        Err(err) => Err(file_error(err)),
    }
}

/// Generate a CA and a serving certificate for `localhost`, `127.0.0.1`, `::1` and `addr`'s IP.
///
/// With a `data_dir`, the CA key is kept there: the CA certificate is re-issued from the same key
/// and name on every start, so clients that trusted the previous one keep working.
pub fn generate(addr: &SocketAddr, data_dir: Option<&Path>) -> Result<Certificates, TlsError> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let ip = addr.ip().to_string();
    if !names.contains(&ip) && !addr.ip().is_unspecified() {
        names.push(ip);
    }
    let issued = issue_with("krec-cluster", names, ca_key(data_dir)?)?;
    Ok(Certificates {
        server_config: server_config(&issued.cert_pem, &issued.key_pem)?,
        ca_pem: issued.ca_pem,
    })
}

/// A CA and a serving certificate it signed, in PEM.
pub struct Issued {
    /// The CA certificate (what clients trust: a kubeconfig's CA, a webhook's `caBundle`).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8).
    pub key_pem: String,
}

/// A fresh CA (`{name}-ca`) and a serving certificate (`name`) for the DNS names and IP
/// addresses `names`.
pub fn issue(name: &str, names: Vec<String>) -> Result<Issued, TlsError> {
    issue_with(name, names, KeyPair::generate()?)
}

/// [`issue`] with the CA keyed by `ca_key`.
fn issue_with(name: &str, names: Vec<String>, ca_key: KeyPair) -> Result<Issued, TlsError> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{name}-ca"));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name.push(DnType::CommonName, name);
    let server_cert = params.signed_by(&server_key, &issuer)?;
    Ok(Issued {
        ca_pem: ca_cert.pem(),
        cert_pem: server_cert.pem(),
        key_pem: server_key.serialize_pem(),
    })
}

/// A TLS server configuration (HTTP/2 and HTTP/1.1) serving the PEM certificate chain
/// `cert_pem` with the PEM private key `key_pem` (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem(format!("the certificate: {e}")))?;
    if chain.is_empty() {
        return Err(TlsError::Pem(
            "the certificate file holds no certificate".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| TlsError::Pem(format!("the private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A kubeconfig for `server` (an `https://` URL) trusting `ca_pem`, with context `krec`, whose
/// user presents `token`.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &str) -> String {
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
    token: {token}
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
