//! Raw HTTP/1.1 over TLS to an embedded API server, for what a client library hides: status
//! lines of early answers, every header, connections that say nothing.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use krec_apiserver::Server;
use rustls::pki_types::pem::PemObject as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A kube client for `cluster`, from its kubeconfig.
pub async fn client_for(cluster: &Server) -> kube::Client {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kube config");
    kube::Client::try_from(config).expect("client")
}

/// A TLS connection to `cluster`, trusting its CA, speaking HTTP/1.1.
pub async fn tls_connection(
    cluster: &Server,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    tls_connection_speaking(cluster, b"http/1.1").await
}

/// A TLS connection to `cluster`, trusting its CA, offering `alpn` (`h2`, `http/1.1`).
pub async fn tls_connection_speaking(
    cluster: &Server,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(cluster.kubeconfig()).expect("kubeconfig parses");
    let ca = kubeconfig.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .expect("the kubeconfig carries its CA");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .expect("base64 CA");
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(cluster.addr())
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("server name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("TLS handshake")
}

/// `request` with the admin's `Authorization` header after its request line.
pub fn authorized(cluster: &Server, request: &[u8]) -> Vec<u8> {
    let line_end = request
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(request.len(), |at| at + 2);
    let mut out = request[..line_end].to_vec();
    out.extend_from_slice(format!("Authorization: Bearer {}\r\n", cluster.token()).as_bytes());
    out.extend_from_slice(&request[line_end..]);
    out
}

/// Send `request` (its head and body as bytes), as the admin, over a fresh TLS connection; the
/// answer's status line and header lines, or what went wrong reading them.
pub async fn raw_exchange(
    cluster: &Server,
    request: &[u8],
) -> Result<(String, Vec<String>), std::io::Error> {
    let request = authorized(cluster, request);
    let request = request.as_slice();
    let mut tls = tls_connection(cluster).await;
    // Written while the server may already answer: a reset here is the bug being tested for.
    let _ = tls.write_all(request).await;
    let _ = tls.flush().await;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Ok(Err(err)) if answer.is_empty() => return Err(err),
            Ok(Err(_)) => break,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let mut lines = text.lines().map(str::to_owned);
    let status = lines.next().unwrap_or_default();
    Ok((status, lines.take_while(|l| !l.is_empty()).collect()))
}

/// One HTTP/1.1 request over a fresh TLS connection (its head written as given); the status
/// code and the body.
pub async fn exchange(cluster: &Server, head: &str) -> (u16, String) {
    let mut tls = tls_connection(cluster).await;
    tls.write_all(head.as_bytes()).await.expect("request");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_owned())
}
