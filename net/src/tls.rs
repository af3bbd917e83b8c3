//! TLS for krec's servers: a self-signed CA generated at start-up, a serving certificate for
//! `localhost` and the bound address signed by it, the kubeconfig that trusts the CA (the
//! embedded API server), and serving configurations from files (the admission server).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::client_certs::ClientCas;

/// The generated CA and serving certificate.
pub struct Certificates {
    /// PEM of the CA certificate, written into the kubeconfig.
    pub ca_pem: String,
    /// PEM of the serving certificate.
    pub cert_pem: String,
    /// PEM of the serving certificate's private key.
    pub key_pem: String,
}

/// File in the data directory holding the CA's private key, so that a restarted server keeps its
/// identity and existing kubeconfigs (and running clients) still trust it.
pub const CA_KEY_FILE: &str = "ca-key.pem";

pub use crate::error::TlsError;

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
    let issued = issue_with("krec-cluster", local_names(addr), ca_key(data_dir)?)?;
    Ok(Certificates {
        ca_pem: issued.ca_pem,
        cert_pem: issued.cert_pem,
        key_pem: issued.key_pem,
    })
}

/// The names a server listening on `addr` answers to on this machine: `localhost`, the
/// loopback addresses and the bound address (unless it is the unspecified one).
pub fn local_names(addr: &SocketAddr) -> Vec<String> {
    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    let ip = addr.ip().to_string();
    if !names.contains(&ip) && !addr.ip().is_unspecified() {
        names.push(ip);
    }
    names
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
    let authority = Authority::with_key(name, ca_key)?;
    authority.sign(names, None)
}

/// The parameters of CA `{name}-ca`: the same for the same name, so a CA certificate made again
/// from the same key is the same issuer (name, key identifier) as the first.
fn ca_params(name: &str) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{name}-ca"));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A certificate authority whose certificate and key someone keeps (a Secret shared by a
/// host's replicas), issuing serving certificates on demand.
pub struct Authority {
    /// The authority's name; its certificate is `{name}-ca`.
    name: String,
    /// Its certificate, PEM: what clients trust (a webhook's `caBundle`).
    cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    key_pem: String,
}

impl Authority {
    /// A new authority `{name}-ca` with a fresh key.
    pub fn generate(name: &str) -> Result<Authority, TlsError> {
        Authority::with_key(name, KeyPair::generate()?)
    }

    fn with_key(name: &str, key: KeyPair) -> Result<Authority, TlsError> {
        let cert = ca_params(name)?.self_signed(&key)?;
        Ok(Authority {
            name: name.to_owned(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The authority `name` kept as `cert_pem` and `key_pem` (from [`Authority::cert_pem`] and
    /// [`Authority::key_pem`]).
    ///
    /// # Errors
    ///
    /// A key that is no PEM private key, or a certificate that is no PEM certificate.
    pub fn from_pem(name: &str, cert_pem: &str, key_pem: &str) -> Result<Authority, TlsError> {
        use rustls::pki_types::pem::PemObject;
        KeyPair::from_pem(key_pem)?;
        CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .map_err(|e| TlsError::Pem(format!("the CA certificate: {e}")))?;
        Ok(Authority {
            name: name.to_owned(),
            cert_pem: cert_pem.to_owned(),
            key_pem: key_pem.to_owned(),
        })
    }

    /// Its certificate (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Its private key (PEM).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A serving certificate for the DNS names and IP addresses `names`, valid from an hour ago
    /// (clocks differ) for `validity`.
    ///
    /// # Errors
    ///
    /// A name rcgen refuses.
    pub fn issue(&self, names: Vec<String>, validity: Duration) -> Result<Issued, TlsError> {
        self.sign(names, Some(validity))
    }

    fn sign(&self, names: Vec<String>, validity: Option<Duration>) -> Result<Issued, TlsError> {
        let issuer = Issuer::new(ca_params(&self.name)?, KeyPair::from_pem(&self.key_pem)?);
        let server_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, &self.name);
        if let Some(validity) = validity {
            let now = time::OffsetDateTime::now_utc();
            params.not_before = now - time::Duration::hours(1);
            params.not_after =
                now + time::Duration::try_from(validity).unwrap_or(time::Duration::days(365 * 100));
        }
        // For serving only: never taken as a client's certificate.
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = params.signed_by(&server_key, &issuer)?;
        Ok(Issued {
            ca_pem: self.cert_pem.clone(),
            cert_pem: server_cert.pem(),
            key_pem: server_key.serialize_pem(),
        })
    }
}

/// The certificate a server presents, replaceable while it serves: each new connection gets the
/// current one, so a rotation fails no handshake.
#[derive(Debug)]
pub struct ServingCert {
    current: std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>,
}

impl ServingCert {
    /// Serve the PEM certificate chain `cert_pem` with the PEM private key `key_pem`.
    ///
    /// # Errors
    ///
    /// PEM that does not hold a certificate and a key rustls can use.
    pub fn new(cert_pem: &str, key_pem: &str) -> Result<Arc<ServingCert>, TlsError> {
        Ok(Arc::new(ServingCert {
            current: std::sync::RwLock::new(certified_key(cert_pem, key_pem)?),
        }))
    }

    /// Serve `cert_pem` with `key_pem` from now on.
    ///
    /// # Errors
    ///
    /// As [`ServingCert::new`]; the certificate served so far stays.
    pub fn replace(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let key = certified_key(cert_pem, key_pem)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
        Ok(())
    }

    /// When the certificate served now expires (Unix seconds); `None` if it cannot be read.
    pub fn not_after(&self) -> Option<i64> {
        let der = self.current();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
        Some(cert.validity().not_after.timestamp())
    }

    /// The certificate served now (DER, the chain's first).
    pub fn current(&self) -> Vec<u8> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current
            .cert
            .first()
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default()
    }
}

impl rustls::server::ResolvesServerCert for ServingCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// The chain and signing key of PEM `cert_pem` and `key_pem`.
fn certified_key(
    cert_pem: &str,
    key_pem: &str,
) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let (chain, key) = parse_pem(cert_pem, key_pem)?;
    let key = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| TlsError::Pem(format!("the private key: {e}")))?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(chain, key)))
}

/// A TLS server configuration (HTTP/2 and HTTP/1.1) presenting whatever `cert` holds at each
/// handshake.
pub fn server_config_serving(
    cert: Arc<ServingCert>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificate chain and private key of PEM `cert_pem` and `key_pem`.
fn parse_pem(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
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
    Ok((chain, key))
}

/// A TLS server configuration (HTTP/2 and HTTP/1.1) serving the PEM certificate chain
/// `cert_pem` with the PEM private key `key_pem` (PKCS#8, PKCS#1 or SEC1).
pub fn server_config(cert_pem: &str, key_pem: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    server_config_for(cert_pem, key_pem, None)
}

/// [`server_config`] asking clients for a certificate, for `client_cas` to judge afterwards
/// (see [`crate::client_certs`]); none asked for without.
pub fn server_config_for(
    cert_pem: &str,
    key_pem: &str,
    client_cas: Option<&ClientCas>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (chain, key) = parse_pem(cert_pem, key_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?;
    let builder = match client_cas {
        Some(cas) => builder.with_client_cert_verifier(cas.requester()),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A verifier of servers' certificates that trusts `certs` as Go's crypto/x509 trusts a root
/// pool — what kube-apiserver does with a webhook's `caBundle`: a chain to one of them, or a
/// certificate that is itself one of them (envtest puts its webhook's serving certificate in
/// the `caBundle`), valid now and for the name dialled.
///
/// # Errors
///
/// When none of `certs` is a certificate rustls can take as a root.
pub fn bundle_verifier(
    certs: Vec<CertificateDer<'static>>,
) -> Result<Arc<dyn rustls::client::danger::ServerCertVerifier>, TlsError> {
    // As Go's AppendCertsFromPEM: a certificate that does not parse is skipped.
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chains =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Pem(format!("the CA certificates: {e}")))?;
    Ok(Arc::new(BundleVerifier { chains, certs }))
}

#[derive(Debug)]
struct BundleVerifier {
    chains: Arc<rustls::client::WebPkiServerVerifier>,
    certs: Vec<CertificateDer<'static>>,
}

impl rustls::client::danger::ServerCertVerifier for BundleVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use rustls::CertificateError;
        if !self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return self.chains.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            );
        }
        // Trusted as it is: still valid now and for the name.
        use x509_parser::prelude::FromDer as _;
        let bad = |e: CertificateError| rustls::Error::InvalidCertificate(e);
        let (_, parsed) = x509_parser::certificate::X509Certificate::from_der(end_entity.as_ref())
            .map_err(|_| bad(CertificateError::BadEncoding))?;
        let at = x509_parser::time::ASN1Time::from_timestamp(
            i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
        )
        .map_err(|_| bad(CertificateError::BadEncoding))?;
        if !parsed.validity().is_valid_at(at) {
            return Err(bad(CertificateError::Expired));
        }
        // Go still asks it to be for serving (no extended key usage is any usage).
        if let Ok(Some(usage)) = parsed.extended_key_usage()
            && !usage.value.server_auth
            && !usage.value.any
        {
            return Err(bad(CertificateError::InvalidPurpose));
        }
        webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| bad(CertificateError::BadEncoding))?
            .verify_is_valid_for_subject_name(server_name)
            .map_err(|_| bad(CertificateError::NotValidForName))?;
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.chains.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.chains.supported_verify_schemes()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The certificate a client trusting `ca_pem` is served by `config` (a TLS handshake over
    /// an in-memory pipe), or the handshake's error.
    async fn served(config: Arc<rustls::ServerConfig>, ca_pem: &str) -> Result<Vec<u8>, String> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots
                .add(cert.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (near, far) = tokio::io::duplex(64 << 10);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let server = tokio::spawn(async move { acceptor.accept(far).await.map(drop) });
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("krec-webhooks.krec-system.svc")
            .map_err(|e| e.to_string())?;
        let stream = connector
            .connect(name, near)
            .await
            .map_err(|e| e.to_string())?;
        let _ = server.await;
        let (_, connection) = stream.get_ref();
        connection
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .ok_or_else(|| "no certificate".to_owned())
    }

    #[tokio::test]
    async fn a_kept_authority_should_issue_certificates_its_certificate_verifies_and_rotate_them() {
        let names = vec!["krec-webhooks.krec-system.svc".to_owned()];
        let authority = Authority::generate("krec-webhooks").expect("authority");
        // Kept (a Secret) and read back, by another replica: the same issuer.
        let kept = Authority::from_pem("krec-webhooks", authority.cert_pem(), authority.key_pem())
            .expect("kept");
        let first = authority
            .issue(names.clone(), Duration::from_secs(3600))
            .expect("issue");
        let cert = ServingCert::new(&first.cert_pem, &first.key_pem).expect("cert");
        let config = server_config_serving(cert.clone()).expect("config");
        let before = served(config.clone(), authority.cert_pem())
            .await
            .expect("trusted");
        assert_eq!(before, cert.current());
        // Rotated to one the other replica issued: trusted by the same CA, served at once.
        let second = kept.issue(names, Duration::from_secs(3600)).expect("issue");
        cert.replace(&second.cert_pem, &second.key_pem)
            .expect("replace");
        let after = served(config.clone(), authority.cert_pem())
            .await
            .expect("trusted after the rotation");
        assert_ne!(after, before);
        // Another CA's clients do not trust it; a bad key is refused and the old one stays.
        let other = Authority::generate("krec-webhooks").expect("authority");
        assert!(served(config, other.cert_pem()).await.is_err());
        assert!(cert.replace(&second.cert_pem, "not a key").is_err());
        assert_eq!(cert.current(), after);
        assert!(Authority::from_pem("x", "not a cert", authority.key_pem()).is_err());
    }
}
