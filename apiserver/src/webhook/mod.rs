//! Reaching a webhook as kube-apiserver does: its `clientConfig` (a URL, or a Service, with the
//! `caBundle` that signs its certificate), validated as `admissionregistration` and
//! `apiextensions` validate it, and a JSON POST over HTTPS trusting only that bundle. Shared by
//! admission webhooks (`crate::admission`) and CRD conversion webhooks (`crate::conversion`).

#[cfg(feature = "server")]
mod client;

use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;

use krec_core::error::Cause;
use krec_core::json::Pointer;

/// Where a webhook is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `clientConfig.url` (with the path kube-apiserver posts to).
    Url(String),
    /// `clientConfig.service`: a Service in the cluster.
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// Its port (default 443).
        port: u16,
        /// The path to post to.
        path: String,
    },
}

/// A webhook's `clientConfig`: where it is and what signs its serving certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// Where it is reached.
    pub endpoint: Endpoint,
    /// `caBundle`, PEM (decoded from base64; empty when none was given).
    pub ca_bundle: Vec<u8>,
    /// For a Service endpoint: the Service as the store holds it, looked up when the webhook is
    /// about to be called.
    pub service: ServiceAddress,
}

/// What the store says of a webhook's Service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServiceAddress {
    /// Not looked up.
    #[default]
    Unresolved,
    /// No such Service.
    Missing,
    /// The Service's cluster IP.
    ClusterIp(String),
}

impl ClientConfig {
    /// Read a `clientConfig` object (one that passed [`validate_client_config`]); `None` when it
    /// names neither a URL nor a Service.
    pub fn from_json(config: &Value) -> Option<ClientConfig> {
        let text = |key: &str| config.get(key).and_then(Value::as_str);
        let endpoint = match (text("url"), config.get("service")) {
            (Some(url), _) => Endpoint::Url(url.to_owned()),
            (None, Some(service)) => Endpoint::Service {
                namespace: service["namespace"].as_str()?.to_owned(),
                name: service["name"].as_str()?.to_owned(),
                port: u16::try_from(service["port"].as_u64().unwrap_or(443)).ok()?,
                path: service["path"].as_str().unwrap_or("/").to_owned(),
            },
            (None, None) => return None,
        };
        let ca_bundle = text("caBundle")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        Some(ClientConfig {
            endpoint,
            ca_bundle,
            service: ServiceAddress::Unresolved,
        })
    }

    /// The URL to post to, or why it cannot be posted to. A Service cannot be reached: the
    /// embedded API server's Services have no network behind them, so it fails as
    /// kube-apiserver's call fails when the Service has no ready endpoint (kube-proxy refuses
    /// the connection) or does not exist — with `timeout` in the URL as kube-apiserver sends it.
    pub fn url(&self, timeout: std::time::Duration) -> Result<&str, CallError> {
        match &self.endpoint {
            Endpoint::Url(url) => Ok(url),
            Endpoint::Service {
                namespace,
                name,
                port,
                path,
            } => {
                let url = format!(
                    "https://{name}.{namespace}.svc:{port}{path}?timeout={}s",
                    timeout.as_secs()
                );
                let why = match &self.service {
                    ServiceAddress::ClusterIp(ip) => {
                        format!("dial tcp {ip}:{port}: connect: connection refused")
                    }
                    ServiceAddress::Missing => format!("service \"{name}\" not found"),
                    ServiceAddress::Unresolved => "the embedded API server's Services have no network: register the webhook with clientConfig.url".to_owned(),
                };
                Err(CallError(format!(
                    "failed to call webhook: Post \"{url}\": {why}"
                )))
            }
        }
    }
}

/// A CRD's conversion webhook (`spec.conversion.webhook` with `strategy: Webhook`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversionWebhook {
    /// Where it is reached.
    pub client: ClientConfig,
}

impl ConversionWebhook {
    /// The conversion webhook of a CRD's `spec`, if its strategy is `Webhook`.
    pub fn from_crd_spec(spec: &Value) -> Option<Arc<ConversionWebhook>> {
        let conversion = spec.get("conversion")?;
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            return None;
        }
        let client = ClientConfig::from_json(conversion.at("/webhook/clientConfig")?)?;
        Some(Arc::new(ConversionWebhook { client }))
    }
}

/// Validate a `clientConfig` at `path` (e.g. `webhooks[0]`): exactly one of an `https` URL
/// without query or fragment and a Service with namespace, name and a valid port; a base64
/// `caBundle`.
pub fn validate_client_config(config: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let path = format!("{path}.clientConfig");
    let url = config.and_then(|c| c.get("url")).and_then(Value::as_str);
    let service = config.and_then(|c| c.get("service"));
    match (url, service) {
        (Some(_), Some(_)) => causes.push((
            path.clone(),
            "Required value: exactly one of url or service is required".into(),
        )),
        (None, None) => causes.push((
            path.clone(),
            "Required value: exactly one of url or service is required".into(),
        )),
        (Some(url), None) => {
            let rest = url.strip_prefix("https://");
            let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
            if rest.is_none() {
                causes.push((
                    format!("{path}.url"),
                    format!("Invalid value: {url:?}: 'https' is the only allowed URL scheme"),
                ));
            } else if host.is_none_or(str::is_empty) {
                causes.push((
                    format!("{path}.url"),
                    format!("Invalid value: {url:?}: host must be specified"),
                ));
            } else if url.contains('#') || url.contains('?') {
                causes.push((
                    format!("{path}.url"),
                    format!(
                        "Invalid value: {url:?}: fragments and query parameters are not permitted"
                    ),
                ));
            }
        }
        (None, Some(service)) => {
            for key in ["namespace", "name"] {
                if service
                    .get(key)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push((
                        format!("{path}.service.{key}"),
                        "Required value: service namespace and name are required".into(),
                    ));
                }
            }
            if let Some(port) = service.get("port").and_then(Value::as_i64)
                && !(1..=65535).contains(&port)
            {
                causes.push((
                    format!("{path}.service.port"),
                    format!("Invalid value: {port}: port is not valid: must be between 1 and 65535, inclusive"),
                ));
            }
        }
    }
    let bundle = config
        .and_then(|c| c.get("caBundle"))
        .and_then(Value::as_str);
    if let Some(bundle) = bundle {
        use base64::Engine as _;
        if base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .is_err()
        {
            causes.push((
                format!("{path}.caBundle"),
                "Invalid value: \"<bytes>\": not base64-encoded".into(),
            ));
        }
    }
}

/// Validate the review versions a webhook accepts (`admissionReviewVersions`,
/// `conversionReviewVersions`) at `path`: the embedded API server sends `{group}/v1` reviews
/// only, so `v1` must be among them.
pub fn validate_review_versions(
    versions: Option<&Value>,
    path: &str,
    group: &str,
    causes: &mut Vec<Cause>,
) {
    let versions = krec_core::json::strings(versions);
    if versions.is_empty() {
        causes.push((
            path.to_owned(),
            "Required value: must specify one of v1, v1beta1".into(),
        ));
    } else if !versions.iter().any(|v| v == "v1") {
        causes.push((
            path.to_owned(),
            format!(
                "Invalid value: {versions:?}: the embedded API server sends {group}/v1 reviews only: include \"v1\""
            ),
        ));
    }
}

/// The `response` of a review a webhook answered (`answer`), checked as kube-apiserver's
/// webhook clients check it: JSON, the review's `{group}/v1` and `kind`, a response object
/// (`absent`: kube-apiserver's words when there is none), and the request's `uid`.
pub fn review_response(
    answer: &[u8],
    group: &str,
    kind: &str,
    uid: &str,
    absent: &str,
) -> Result<Value, String> {
    let mut review: Value =
        serde_json::from_slice(answer).map_err(|e| format!("the response is not a {kind}: {e}"))?;
    let api_version = format!("{group}/v1");
    if review["apiVersion"] != api_version.as_str() || review["kind"] != kind {
        return Err(format!(
            "expected webhook response of {api_version}, Kind={kind}, got {}, Kind={}",
            review["apiVersion"].as_str().unwrap_or_default(),
            review["kind"].as_str().unwrap_or_default()
        ));
    }
    let response = review
        .get_mut("response")
        .filter(|r| r.is_object())
        .map(Value::take)
        .ok_or(absent)?;
    let got = response["uid"].as_str().unwrap_or_default();
    if got != uid {
        return Err(format!("expected response.uid=\"{uid}\", got \"{got}\""));
    }
    Ok(response)
}

/// Why a webhook could not be consulted (its `failurePolicy` decides what follows).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CallError(pub String);

#[cfg(feature = "server")]
pub use client::post;
