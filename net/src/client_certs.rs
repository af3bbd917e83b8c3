//! Client certificates, as kube-apiserver takes them: a server with a client CA asks every
//! client for a certificate during the TLS handshake without requiring one and without judging
//! it there (Go's `tls.RequestClientCert`); the handshake only proves the client holds the
//! certificate's key. The API server's authenticator judges the chain afterwards, against the
//! client CA, for client authentication ([`ClientCas::verify`]) — so an untrusted or expired
//! certificate is a 401 from the API (another credential, a token, may still authenticate the
//! request), never a failed handshake.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use crate::error::TlsError;

/// The certificates a client presented in its TLS handshake, leaf first: in the extensions of
/// every request of the connection (absent when it presented none).
#[derive(Clone, Debug)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// The CAs whose client certificates a server takes (`--client-ca-file`).
#[derive(Clone, Debug)]
pub struct ClientCas {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

/// Who a verified client certificate names: its subject's common name and organizations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// The subject's CN (kube-apiserver's user name).
    pub common_name: String,
    /// The subject's O values, in order (kube-apiserver's groups).
    pub organizations: Vec<String>,
    /// The certificate's SHA-256 fingerprint, hex (kube-apiserver's credential id).
    pub fingerprint: String,
}

impl ClientCas {
    /// The CAs of PEM bundle `pem` (one or more certificates).
    ///
    /// # Errors
    ///
    /// PEM that holds no certificate, or a certificate that is no CA rustls can use.
    pub fn from_pem(pem: &str) -> Result<ClientCas, TlsError> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| TlsError::Pem(format!("a client CA certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| TlsError::Pem(format!("a client CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(TlsError::Pem(
                "the client CA file holds no certificate".into(),
            ));
        }
        Ok(ClientCas {
            roots: Arc::new(roots),
            algorithms: rustls::crypto::ring::default_provider().signature_verification_algorithms,
        })
    }

    /// The verifier a TLS server configuration asks clients for certificates with.
    pub(crate) fn requester(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::new(RequestClientCert {
            hints: self.roots.subjects(),
            algorithms: self.algorithms,
        })
    }

    /// Whom `chain` (leaf first) names, if one of these CAs issued it for client
    /// authentication and it is valid now; the reason otherwise, worded as Go's x509 words it.
    ///
    /// # Errors
    ///
    /// An empty chain, a certificate that does not parse, one not issued by these CAs (or not
    /// for client authentication), an expired or not yet valid one.
    pub fn verify(&self, chain: &[CertificateDer<'_>]) -> Result<Subject, String> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Err("no client certificate".into());
        };
        let cert = webpki::EndEntityCert::try_from(leaf)
            .map_err(|e| format!("x509: malformed certificate: {e}"))?;
        cert.verify_for_usage(
            self.algorithms.all,
            &self.roots.roots,
            intermediates,
            UnixTime::now(),
            webpki::KeyUsage::client_auth(),
            None,
            None,
        )
        .map_err(|e| match e {
            webpki::Error::CertExpired { .. } | webpki::Error::CertNotValidYet { .. } => {
                "x509: certificate has expired or is not yet valid".to_owned()
            }
            webpki::Error::UnknownIssuer => {
                "x509: certificate signed by unknown authority".to_owned()
            }
            webpki::Error::RequiredEkuNotFoundContext(_) => {
                "x509: certificate specifies an incompatible key usage".to_owned()
            }
            other => format!("x509: {other}"),
        })?;
        subject(leaf)
    }
}

/// The subject of certificate `der`.
fn subject(der: &CertificateDer<'_>) -> Result<Subject, String> {
    use x509_parser::prelude::FromDer as _;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der.as_ref())
        .map_err(|e| format!("x509: malformed certificate: {e}"))?;
    let name = cert.subject();
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str().map(str::to_owned).unwrap_or_default()
    };
    // As Go's pkix.Name reads a subject: the last CN wins; each O is a group.
    let common_name = name.iter_common_name().last().map(text).unwrap_or_default();
    let organizations = name
        .iter_organization()
        .map(text)
        .filter(|o| !o.is_empty())
        .collect();
    Ok(Subject {
        common_name,
        organizations,
        fingerprint: sha256_hex(der.as_ref()),
    })
}

/// SHA-256 of `bytes`, lowercase hex.
fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Asks for a client certificate, takes any (or none) at the handshake, and checks only that
/// the client holds its key.
#[derive(Debug)]
struct RequestClientCert {
    hints: Vec<DistinguishedName>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Judged by the API server's authenticator, per request (see the module's doc).
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
