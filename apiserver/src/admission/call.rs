//! Calling one webhook: the `admission.k8s.io/v1` `AdmissionReview` kube-apiserver posts, over
//! HTTPS trusting the webhook's `caBundle`, and its answer read and checked as kube-apiserver's
//! `webhook/request` package checks it.

use std::sync::Arc;

use axum::body::Body;
use base64::Engine as _;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use super::config::{Endpoint, Hook, HookKind};

/// Largest answer read from a webhook (kube-apiserver's limit on a response body).
const MAX_RESPONSE_BYTES: usize = 3 << 20;

/// The review of one request, as sent: everything but the `uid`, which is per call.
#[derive(Clone, Debug)]
pub struct Review {
    /// The `request` object (without `uid`).
    pub request: Value,
}

/// What a webhook answered.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// `response.allowed`.
    pub allowed: bool,
    /// `response.status`, if any.
    pub status: Option<Value>,
    /// The decoded `response.patch` (a JSON patch), if any.
    pub patch: Option<Value>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
}

/// Why a webhook could not be consulted (its `failurePolicy` decides what follows).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CallError(pub String);

/// Post `review` to `hook` and read its verdict, within the hook's timeout.
pub async fn call(hook: &Hook, review: &Review) -> Result<Verdict, CallError> {
    let uid = uuid::Uuid::new_v4().to_string();
    let mut request = review.request.clone();
    request["uid"] = json!(uid);
    let body =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let url = match &hook.endpoint {
        Endpoint::Url(url) => url.clone(),
        Endpoint::Service {
            namespace, name, ..
        } => {
            return Err(CallError(format!(
                "service {namespace}/{name} cannot be reached from the embedded API server (its Services have no network): register the webhook with clientConfig.url"
            )));
        }
    };
    let answer = tokio::time::timeout(hook.timeout, post(&url, &hook.ca_bundle, &body))
        .await
        .map_err(|_| {
            CallError(format!(
                "Post \"{url}\": context deadline exceeded (timeout {}s)",
                hook.timeout.as_secs()
            ))
        })??;
    verdict(hook, &uid, &answer)
}

/// Read and check an `AdmissionReview` answer.
fn verdict(hook: &Hook, uid: &str, answer: &[u8]) -> Result<Verdict, CallError> {
    let review: Value = serde_json::from_slice(answer)
        .map_err(|e| CallError(format!("the response is not an AdmissionReview: {e}")))?;
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(CallError(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            review["apiVersion"].as_str().unwrap_or_default(),
            review["kind"].as_str().unwrap_or_default()
        )));
    }
    let response = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or_else(|| CallError("webhook response was absent".into()))?;
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(CallError(format!(
            "expected response.uid=\"{uid}\", got \"{got}\""
        )));
    }
    let patch = match (response.get("patch"), response.get("patchType")) {
        (None | Some(Value::Null), _) => None,
        (Some(_), _) if hook.kind == HookKind::Validating => {
            return Err(CallError(
                "validating webhook may not return response.patch".into(),
            ));
        }
        (Some(patch), Some(kind)) if kind == "JSONPatch" => {
            let bytes = patch
                .as_str()
                .and_then(|p| base64::engine::general_purpose::STANDARD.decode(p).ok())
                .ok_or_else(|| CallError("response.patch is not base64".into()))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| CallError(format!("response.patch is not a JSON patch: {e}")))?,
            )
        }
        (Some(_), None | Some(Value::Null)) => {
            return Err(CallError(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        (Some(_), Some(other)) => {
            return Err(CallError(format!(
                "webhook returned invalid response.patchType of {other}"
            )));
        }
    };
    Ok(Verdict {
        allowed: response["allowed"].as_bool().unwrap_or(false),
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        warnings: crate::json::strings(response.get("warnings")),
    })
}

/// The certificates of a PEM bundle.
fn roots(ca_bundle: &[u8]) -> Result<rustls::RootCertStore, CallError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle) {
        let cert = cert.map_err(|e| CallError(format!("caBundle: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| CallError(format!("caBundle: {e}")))?;
    }
    if roots.is_empty() {
        return Err(CallError(
            "no caBundle: the embedded API server trusts a webhook's certificate only through clientConfig.caBundle"
                .into(),
        ));
    }
    Ok(roots)
}

/// POST `body` as JSON to an `https://` URL, trusting `ca_bundle`.
async fn post(url: &str, ca_bundle: &[u8], body: &Value) -> Result<Vec<u8>, CallError> {
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
        .with_root_certificates(roots(ca_bundle)?)
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
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
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
