//! The HTTP of a pull (manifest digest, manifest, blob) from an OCI registry, held to the
//! registry's own host: a redirect is followed, and a token `realm` asked, only on that host or
//! one the host was told to trust (`--registry-redirect-host`, for registries that serve blobs
//! from a CDN), so a registry cannot make the host fetch other addresses on its network. What a
//! registry answers reaches a guest's status as its status code alone — never its body, which
//! a tenant reads.

use std::sync::Mutex;
use std::time::Duration;

use oci_client::Reference;
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use reqwest::header::{ACCEPT, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode};

use super::artifact::{OCI_MANIFEST, install_crypto};
use super::error::OciError;

/// The media types a manifest is asked for in.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json";

/// Largest manifest read (a Wasm artifact's is a few hundred bytes).
const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// Largest token answer read.
const MAX_TOKEN_BYTES: usize = 64 << 10;

/// One pull's client: the registry of one reference, with one set of credentials.
pub(crate) struct Pull {
    http: reqwest::Client,
    base: String,
    reference: Reference,
    auth: RegistryAuth,
    /// The registry's `host:port`.
    own: String,
    trusted: Vec<String>,
    token: Mutex<Option<String>>,
}

/// `host:port` of `url` (the scheme's default port when it names none).
fn authority(url: &reqwest::Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(0)
    )
}

/// `host:port` of a registry as a reference names it (`host` alone: the scheme's default).
fn registry_authority(registry: &str, insecure: bool) -> String {
    if registry
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
    {
        registry.to_owned()
    } else {
        format!("{registry}:{}", if insecure { 80 } else { 443 })
    }
}

/// Whether `authority` (`host:port`) is the registry's own (`registry`, `host:port`) or a
/// trusted one (`host` or `host:port`). Another port of the same host is another server.
fn allowed(authority: &str, registry: &str, trusted: &[String]) -> bool {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    authority == registry || trusted.iter().any(|t| t == authority || t == host)
}

impl Pull {
    /// A client for `reference`'s registry (over plain HTTP when `insecure`), with `auth`,
    /// following redirects only to the registry's host or `trusted` ones.
    pub(crate) fn new(
        reference: &Reference,
        auth: &RegistryAuth,
        insecure: bool,
        trusted: &[String],
    ) -> Result<Self, OciError> {
        install_crypto();
        let registry = reference.resolve_registry().to_owned();
        let own = registry_authority(&registry, insecure);
        let (registry_for_policy, trusted_for_policy) = (own.clone(), trusted.to_vec());
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            let to = authority(attempt.url());
            if attempt.previous().len() >= 5 {
                attempt.error("more than 5 redirects")
            } else if allowed(&to, &registry_for_policy, &trusted_for_policy) {
                attempt.follow()
            } else {
                attempt.error(format!(
                    "the registry redirected to {to}, not its own host (trust it with --registry-redirect-host {to})"
                ))
            }
        });
        let http = reqwest::Client::builder()
            .redirect(policy)
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(30))
            .build()
            .map_err(|err| OciError::Client(err.to_string()))?;
        let scheme = if insecure { "http" } else { "https" };
        Ok(Pull {
            http,
            base: format!("{scheme}://{registry}/v2/{}", reference.repository()),
            reference: reference.clone(),
            auth: auth.clone(),
            own,
            trusted: trusted.to_vec(),
            token: Mutex::new(None),
        })
    }

    /// `problem`, naming the reference.
    fn error(&self, problem: impl ToString) -> OciError {
        OciError::registry(&self.reference, problem)
    }

    /// A request error in words: what failed, with a hint for a registry that speaks HTTP.
    fn request_error(&self, what: &str, err: &reqwest::Error) -> OciError {
        let mut text = format!("{what}: {err}");
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        if self.base.starts_with("https:")
            && (err.is_connect() || text.contains("InvalidContentType"))
        {
            text.push_str(" (if the registry speaks plain HTTP, name it with --insecure-registry)");
        }
        self.error(text)
    }

    /// Send `method` to `path` (under `/v2/<repository>/`), authenticating as the registry
    /// asks (basic, or a bearer token from its realm); the answer, or what went wrong.
    async fn send(
        &self,
        method: Method,
        path: &str,
        accept: Option<&str>,
        what: &str,
    ) -> Result<reqwest::Response, OciError> {
        let url = format!("{}/{path}", self.base);
        for attempt in 0..2 {
            let mut request = self.http.request(method.clone(), &url);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            let token = self.token.lock().unwrap_or_else(|e| e.into_inner()).clone();
            request = match (&token, &self.auth) {
                (Some(token), _) => request.bearer_auth(token),
                (None, RegistryAuth::Basic(user, password)) => {
                    request.basic_auth(user, Some(password))
                }
                (None, RegistryAuth::Bearer(token)) => request.bearer_auth(token),
                (None, RegistryAuth::Anonymous) => request,
            };
            let response = request
                .send()
                .await
                .map_err(|err| self.request_error(what, &err))?;
            if response.status() == StatusCode::UNAUTHORIZED && attempt == 0 {
                let challenge = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                if let Some(challenge) =
                    challenge.filter(|c| c.to_ascii_lowercase().starts_with("bearer"))
                {
                    let token = self.token_for(&challenge).await?;
                    *self.token.lock().unwrap_or_else(|e| e.into_inner()) = Some(token);
                    continue;
                }
            }
            if !response.status().is_success() {
                let status = response.status();
                return Err(self.error(format!(
                    "the registry answered {} {} for the {what}",
                    status.as_u16(),
                    status.canonical_reason().unwrap_or("")
                )));
            }
            return Ok(response);
        }
        Err(self.error(format!(
            "the registry refused the credentials for the {what}"
        )))
    }

    /// A token from the realm of a `Bearer` challenge — only on the registry's host or a
    /// trusted one.
    async fn token_for(&self, challenge: &str) -> Result<String, OciError> {
        let mut params = std::collections::BTreeMap::new();
        for part in challenge["Bearer".len().min(challenge.len())..].split(',') {
            if let Some((key, value)) = part.trim().split_once('=') {
                params.insert(
                    key.trim().to_ascii_lowercase(),
                    value.trim().trim_matches('"').to_owned(),
                );
            }
        }
        let realm = params
            .get("realm")
            .ok_or_else(|| self.error("the registry's token challenge names no realm"))?;
        let mut url = reqwest::Url::parse(realm)
            .map_err(|_| self.error("the registry's token realm is not a URL"))?;
        let host = authority(&url);
        if !allowed(&host, &self.own, &self.trusted) {
            return Err(self.error(format!(
                "the registry's token realm is on {host}, not its own host (trust it with --registry-redirect-host {host})"
            )));
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = params.get("service") {
                query.append_pair("service", service);
            }
            query.append_pair(
                "scope",
                &format!("repository:{}:pull", self.reference.repository()),
            );
        }
        let mut request = self.http.get(url);
        if let RegistryAuth::Basic(user, password) = &self.auth {
            request = request.basic_auth(user, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|err| self.request_error("the token", &err))?;
        let status = response.status();
        if !status.is_success() {
            return Err(self.error(format!(
                "the registry's token service answered {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            )));
        }
        let body = self
            .read_limited(response, MAX_TOKEN_BYTES, "the token")
            .await?;
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|_| self.error("the registry's token answer is not JSON"))?;
        answer["token"]
            .as_str()
            .or_else(|| answer["access_token"].as_str())
            .map(str::to_owned)
            .ok_or_else(|| self.error("the registry's token answer holds no token"))
    }

    /// The digest of the manifest the reference names (its tag's, resolved).
    pub(crate) async fn manifest_digest(&self) -> Result<String, OciError> {
        let tag = self
            .reference
            .digest()
            .or_else(|| self.reference.tag())
            .unwrap_or("latest")
            .to_owned();
        let response = self
            .send(
                Method::HEAD,
                &format!("manifests/{tag}"),
                Some(MANIFEST_TYPES),
                "manifest",
            )
            .await?;
        if let Some(digest) = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:"))
        {
            return Ok(digest.to_owned());
        }
        // No digest header: the manifest's own.
        let (_, digest) = self.manifest(&tag).await?;
        Ok(digest)
    }

    /// The manifest `reference` (a digest or tag) names, and its digest; a digest named is
    /// checked against the manifest's content.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
    ) -> Result<(OciImageManifest, String), OciError> {
        let response = self
            .send(
                Method::GET,
                &format!("manifests/{reference}"),
                Some(MANIFEST_TYPES),
                "manifest",
            )
            .await?;
        let media_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static(OCI_MANIFEST));
        let bytes = self
            .read_limited(response, MAX_MANIFEST_BYTES, "the manifest")
            .await?;
        let digest = crate::guest::module_cache::digest(&bytes);
        if reference.starts_with("sha256:") && digest != reference {
            return Err(self.error(format!(
                "the registry's manifest has digest {digest}, not {reference}"
            )));
        }
        if media_type
            .to_str()
            .is_ok_and(|t| t.contains("image.index") || t.contains("manifest.list"))
        {
            return Err(self.error(
                "is an image index: a Wasm artifact is one manifest with one application/wasm layer",
            ));
        }
        let manifest: OciImageManifest = serde_json::from_slice(&bytes).map_err(|err| {
            self.error(format!("the manifest is not an OCI image manifest: {err}"))
        })?;
        Ok((manifest, digest))
    }

    /// The blob `digest`, at most `max` bytes.
    pub(crate) async fn blob(&self, digest: &str, max: usize) -> Result<Vec<u8>, OciError> {
        let response = self
            .send(Method::GET, &format!("blobs/{digest}"), None, "layer")
            .await?;
        self.read_limited(response, max, "the layer").await
    }

    /// The body of `response` (`what` it is), at most `max` bytes.
    async fn read_limited(
        &self,
        mut response: reqwest::Response,
        max: usize,
        what: &str,
    ) -> Result<Vec<u8>, OciError> {
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| self.error(format!("{what}: reading the answer: {err}")))?
        {
            if body.len() + chunk.len() > max {
                return Err(self.error(format!("{what}: the answer is larger than {max} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_registrys_host_and_trusted_ones_should_be_allowed() {
        let trusted = vec!["cdn.example.com".to_owned()];
        let own = registry_authority("registry.example.com", false);
        assert_eq!(own, "registry.example.com:443");
        assert!(allowed("registry.example.com:443", &own, &[]));
        assert!(allowed("cdn.example.com:443", &own, &trusted));
        assert!(!allowed("10.0.0.1:80", &own, &trusted));
        // Another server on the registry's own host is not the registry.
        let own = registry_authority("127.0.0.1:5000", true);
        assert!(allowed("127.0.0.1:5000", &own, &[]));
        assert!(!allowed("127.0.0.1:9999", &own, &[]));
    }

    /// A plain-HTTP server answering every request with `answer` (the status line and headers;
    /// `{other}` replaced by `other`'s address); counts what it was asked.
    async fn server(answer: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 8192];
                    let _ = socket.read(&mut request).await;
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        (addr, hits)
    }

    #[tokio::test]
    async fn a_registry_should_not_send_the_host_elsewhere_nor_reach_status_with_its_body() {
        let secret = "INTERNAL-SECRET-1234";
        let (inside, inside_hits) = server(format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{secret}",
            secret.len()
        ))
        .await;
        let pull = |registry: String| {
            let reference: Reference = format!("{registry}/team/m:v1").parse().expect("reference");
            Pull::new(&reference, &RegistryAuth::Anonymous, true, &[]).expect("client")
        };
        // A redirect to another server on loopback: not followed.
        let (redirecting, _) = server(format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{inside}/internal/manifest\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await;
        let err = pull(redirecting)
            .manifest_digest()
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains(&format!("redirected to {inside}, not its own host")),
            "{err}"
        );
        // A token realm on another server: not asked.
        let (challenging, _) = server(format!(
            "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://{inside}/realm-ssrf\",service=\"x\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await;
        let err = pull(challenging)
            .manifest_digest()
            .await
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains(&format!("token realm is on {inside}")),
            "{err}"
        );
        assert_eq!(
            inside_hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing left the registry's host"
        );
        // The registry's own 500: its status, never its body.
        let err = pull(inside.clone())
            .manifest_digest()
            .await
            .expect_err("500")
            .to_string();
        assert!(err.contains("answered 500 Internal Server Error"), "{err}");
        assert!(!err.contains(secret), "{err}");
    }
}
