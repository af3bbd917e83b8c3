//! The JSON POST over HTTPS to a webhook, trusting only its `caBundle`.

use std::sync::Arc;

use axum::body::Body;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use super::CallError;

/// Largest answer read from a webhook (kube-apiserver's limit on a response body).
const MAX_RESPONSE_BYTES: usize = 3 << 20;

/// What verifies a webhook's certificate: the certificates of PEM bundle `ca_bundle`, trusted
/// as kube-apiserver's Go client trusts them ([`krec_net::tls::bundle_verifier`]).
fn verifier(
    ca_bundle: &[u8],
) -> Result<Arc<dyn rustls::client::danger::ServerCertVerifier>, CallError> {
    // PEM blocks that do not parse are skipped, as Go's AppendCertsFromPEM skips them.
    let certs: Vec<_> = CertificateDer::pem_slice_iter(ca_bundle)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(CallError(
            "no caBundle: the embedded API server trusts a webhook's certificate only through clientConfig.caBundle"
                .into(),
        ));
    }
    krec_net::tls::bundle_verifier(certs).map_err(|e| CallError(format!("caBundle: {e}")))
}

/// `path` as kube-apiserver's webhook client sends it: joined onto `/` as Go's `path.Join`
/// joins (client-go's request path), so `//mutate` is `/mutate`, `.` and `..` are resolved and
/// a trailing slash is dropped.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// POST `body` as JSON to an `https://` URL, trusting `ca_bundle`.
pub async fn post(url: &str, ca_bundle: &[u8], body: &Value) -> Result<Vec<u8>, CallError> {
    let failed = |what: &str, err: &dyn std::fmt::Display| {
        CallError(format!(
            "failed to call webhook: Post \"{url}\": {what}{err}"
        ))
    };
    let uri: axum::http::Uri = url.parse().map_err(|e| failed("", &e))?;
    let host = uri
        .host()
        .ok_or_else(|| failed("", &"no host"))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| failed("tls: ", &e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier(ca_bundle)?)
        .with_no_client_auth();
    let server_name = ServerName::try_from(host.clone()).map_err(|e| failed("", &e))?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| failed("dial tcp: ", &e))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| failed("tls: ", &e))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| failed("", &e))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let path = match uri.query() {
        Some(query) => format!("{}?{query}", clean_path(uri.path())),
        None => clean_path(uri.path()),
    };
    let request = axum::http::Request::post(path)
        .header(
            axum::http::header::HOST,
            uri.authority().map_or("", |a| a.as_str()),
        )
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .header(axum::http::header::ACCEPT, "application/json, */*")
        .body(Body::from(body.to_string()))
        .map_err(|e| failed("", &e))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| failed("", &e))?;
    let status = response.status();
    let bytes = axum::body::to_bytes(Body::new(response.into_body()), MAX_RESPONSE_BYTES)
        .await
        .map_err(|e| failed("reading the response: ", &e))?;
    if !status.is_success() {
        return Err(CallError(format!(
            "failed to call webhook: the server responded with the status code {} ({}): {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        )));
    }
    Ok(bytes.to_vec())
}

#[cfg(test)]
mod tests {
    use super::clean_path;

    #[test]
    fn a_webhooks_path_should_be_joined_as_client_go_joins_it() {
        assert_eq!(clean_path("//mutate-v1-widget"), "/mutate-v1-widget");
        assert_eq!(clean_path("/a/./b/../c/"), "/a/c");
        assert_eq!(clean_path(""), "/");
        assert_eq!(clean_path("/validate"), "/validate");
    }
}
