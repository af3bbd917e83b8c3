//! [`Registries`]: one host's registry clients and its local store of pulled modules —
//! resolving tags, pulling and verifying artifacts, keeping them by digest, and pushing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use oci_client::Client;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde_json::json;

use super::artifact::{
    OCI_MANIFEST, SCHEME, WASM_CONFIG, WASM_LAYER, component_names, install_crypto,
};
use super::error::OciError;
use super::pull::Pull;
use crate::manifest::{PullPolicy, PullSpec};

/// The OCI clients and the local store of pulled modules of one host.
#[derive(Debug)]
pub struct Registries {
    /// Registries spoken to over plain HTTP (`host:port`, as references name them).
    insecure: Vec<String>,
    /// Hosts (`host` or `host:port`) a registry may redirect a pull to, or name as its token
    /// realm, beside its own (`--registry-redirect-host`).
    trusted: Vec<String>,
    /// Where pulled modules are kept: `blobs/sha256/<hex>.wasm`, and `manifests/<hex>` naming
    /// the layer digest of a manifest digest.
    dir: PathBuf,
    /// Tags resolved so far, per credentials: the reference → its manifest digest, and when.
    tags: Mutex<HashMap<(String, u64), (String, tokio::time::Instant)>>,
    /// Pinned references the registry let each credentials read: a module kept here is only
    /// handed to a guest whose credentials the registry has accepted for it (as Kubernetes'
    /// "ensure secret pulled images" does), so no tenant runs another's private module by
    /// naming it.
    verified: Mutex<std::collections::HashSet<(String, u64)>>,
}

/// A fingerprint of `auth`: which credentials, without keeping them.
fn fingerprint(auth: &RegistryAuth) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    match auth {
        RegistryAuth::Anonymous => 0u8.hash(&mut hasher),
        RegistryAuth::Basic(user, password) => (1u8, user, password).hash(&mut hasher),
        RegistryAuth::Bearer(token) => (2u8, token).hash(&mut hasher),
    }
    hasher.finish()
}

impl Registries {
    /// Registries whose pulled modules are kept under `dir`, `insecure` ones over plain HTTP.
    pub fn new(dir: PathBuf, insecure: Vec<String>) -> Self {
        Registries {
            insecure,
            trusted: Vec::new(),
            dir,
            tags: Mutex::default(),
            verified: Mutex::default(),
        }
    }

    /// These registries, letting a pull follow a registry to `hosts` too (a CDN its blobs are
    /// served from; `host` or `host:port`).
    #[must_use]
    pub fn with_redirect_hosts(mut self, hosts: Vec<String>) -> Self {
        self.trusted = hosts;
        self
    }

    /// The HTTP of a pull of `reference` with `auth` (see `pull`).
    fn puller(&self, reference: &Reference, auth: &RegistryAuth) -> Result<Pull, OciError> {
        let insecure = self
            .insecure
            .iter()
            .any(|i| i == reference.registry() || i == reference.resolve_registry());
        Pull::new(reference, auth, insecure, &self.trusted)
    }

    /// Registries keeping pulled modules in a directory of this process's own, none insecure.
    pub fn private() -> Self {
        Registries::new(Self::private_dir(), Vec::new())
    }

    /// A directory of this process's own for pulled modules.
    pub fn private_dir() -> PathBuf {
        std::env::temp_dir().join(format!("krec-oci-{}", std::process::id()))
    }

    fn client(&self) -> Result<Client, OciError> {
        install_crypto();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.insecure.clone()),
            // A Wasm artifact is no multi-platform image: an index is refused, not resolved to
            // linux/amd64.
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        Client::try_from(config).map_err(|err| OciError::Client(err.to_string()))
    }

    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir
            .join("blobs")
            .join("sha256")
            .join(format!("{hex}.wasm"))
    }

    /// Where the layer digest of `manifest_digest`, as pulled from `reference`'s registry and
    /// repository, is kept: a digest pulled from one repository is never the answer for
    /// another (whose registry could claim any digest without having its content).
    fn link(&self, reference: &Reference, manifest_digest: &str) -> PathBuf {
        let hex = manifest_digest
            .strip_prefix("sha256:")
            .unwrap_or(manifest_digest);
        let source = crate::guest::module_cache::digest(
            format!(
                "{}/{}",
                reference.resolve_registry(),
                reference.repository()
            )
            .as_bytes(),
        );
        let source = source.strip_prefix("sha256:").unwrap_or(&source);
        self.dir
            .join("manifests")
            .join(&source[..16.min(source.len())])
            .join(hex)
    }

    /// The manifest digest `reference` names: its own, or its tag's as `pull` says to resolve
    /// it.
    async fn digest_of(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        pull: &PullSpec,
    ) -> Result<String, OciError> {
        if let Some(digest) = reference.digest() {
            return Ok(digest.to_owned());
        }
        let key = (reference.whole(), fingerprint(auth));
        let known = self
            .tags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        match (pull.policy, known) {
            (PullPolicy::Never | PullPolicy::IfNotPresent, Some((digest, _))) => return Ok(digest),
            (PullPolicy::Always, Some((digest, at))) if at.elapsed() < pull.every => {
                return Ok(digest);
            }
            (PullPolicy::Never, None) => {
                return Err(OciError::policy(
                    reference,
                    "was never resolved here and spec.pull.policy is Never",
                ));
            }
            _ => {}
        }
        let digest = self.puller(reference, auth)?.manifest_digest().await?;
        self.tags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (digest.clone(), tokio::time::Instant::now()));
        Ok(digest)
    }

    /// The local file of the module `reference` names (and its manifest digest), pulled unless
    /// kept already.
    ///
    /// # Errors
    ///
    /// What went wrong, naming the reference: the registry unreachable or refusing, the artifact
    /// not a Wasm component in the CNCF layout, a digest that does not match.
    pub async fn fetch(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        pull: &PullSpec,
    ) -> Result<(PathBuf, String), OciError> {
        // A component file's digest (status.moduleDigest) where an artifact's belongs.
        if let Some(named) = reference.digest()
            && self.blob(named).is_file()
            && !self.link(reference, named).is_file()
        {
            return Err(OciError::registry(
                reference,
                format!(
                    "{named} is the digest of the component file (status.moduleDigest), not of its artifact: name the artifact's digest (status.digest, what `krec push` prints)"
                ),
            ));
        }
        self.fetch_pinned(reference, auth, pull)
            .await
            .map_err(|err| match &err {
                OciError::Registry { problem, .. }
                    if reference.digest().is_some() && problem.contains("answered") =>
                {
                    err.with_hint(
                        " (a reference's @sha256: digest names the artifact — status.digest, what `krec push` prints — not the component file's sha256)",
                    )
                }
                _ => err,
            })
    }

    /// [`fetch`](Self::fetch) past its check of the digest named.
    async fn fetch_pinned(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
        pull: &PullSpec,
    ) -> Result<(PathBuf, String), OciError> {
        let digest = self.digest_of(reference, auth, pull).await?;
        let pinned = reference.clone_with_digest(digest.clone());
        let access = (pinned.whole(), fingerprint(auth));
        if let Ok(layer) = std::fs::read_to_string(self.link(reference, &digest)) {
            let file = self.blob(layer.trim());
            if file.is_file() {
                let verified = self
                    .verified
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&access);
                if !verified && pull.policy == PullPolicy::Never {
                    return Err(OciError::policy(
                        reference,
                        "is kept here but was never read with these credentials, and spec.pull.policy is Never",
                    ));
                }
                if !verified {
                    // Kept, but not yet known to be readable with these credentials.
                    self.puller(&pinned, auth)?.manifest_digest().await?;
                    self.verified
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(access);
                }
                return Ok((file, digest));
            }
        }
        if pull.policy == PullPolicy::Never {
            return Err(OciError::policy(
                reference,
                "is not kept here and spec.pull.policy is Never",
            ));
        }
        let puller = self.puller(&pinned, auth)?;
        let (manifest, _) = puller.manifest(&digest).await?;
        let layer = wasm_layer(reference, &manifest)?;
        let max = usize::try_from(crate::manifest::files::MAX_MODULE_BYTES).unwrap_or(usize::MAX);
        let bytes = puller.blob(&layer.digest, max).await?;
        let actual = crate::guest::module_cache::digest(&bytes);
        if actual != layer.digest {
            return Err(OciError::registry(
                reference,
                format!(
                    "the layer's content has digest {actual}, not {}",
                    layer.digest
                ),
            ));
        }
        let file = self.blob(&layer.digest);
        write_atomically(&file, &bytes)?;
        write_atomically(&self.link(reference, &digest), layer.digest.as_bytes())?;
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(access);
        tracing::info!(
            "pulled {SCHEME}{} ({digest}): {} bytes",
            reference.whole(),
            bytes.len()
        );
        Ok((file, digest))
    }

    /// Publish the component `file` as `reference` in the CNCF Wasm layout; its manifest digest.
    ///
    /// # Errors
    ///
    /// When the file is not a component, or the registry refuses it.
    pub async fn push(
        &self,
        file: &Path,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<String, OciError> {
        let refused = |problem: String| OciError::Module {
            path: file.to_owned(),
            problem,
        };
        let bytes = crate::guest::read_module(file).map_err(|err| refused(err.to_string()))?;
        match component_names(&bytes) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(refused(
                    "not a WebAssembly component: it is a core module or something else".into(),
                ));
            }
            Err(err) => return Err(refused(format!("not a WebAssembly component: {err}"))),
        }
        let title = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.push_bytes(bytes, &title, reference, auth).await
    }

    /// Publish `bytes` as `reference`'s one `application/wasm` layer, named `title`, without
    /// checking that they are a component (for tools, and tests of what a host does with a
    /// broken artifact); its manifest digest.
    ///
    /// # Errors
    ///
    /// When the registry refuses it.
    pub async fn push_bytes(
        &self,
        bytes: Vec<u8>,
        title: &str,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<String, OciError> {
        let names = component_names(&bytes).ok().flatten().unwrap_or_default();
        let layer_digest = crate::guest::module_cache::digest(&bytes);
        let title = title.to_owned();
        let layer = ImageLayer::new(
            bytes,
            WASM_LAYER.to_owned(),
            Some(BTreeMap::from([(
                "org.opencontainers.image.title".to_owned(),
                title,
            )])),
        );
        let created = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let config = json!({
            "created": created,
            "author": null,
            "architecture": "wasm",
            "os": "wasip2",
            "layerDigests": [layer_digest],
            "component": {"exports": names.exports, "imports": names.imports, "target": null},
        });
        let config = Config::new(
            serde_json::to_vec(&config).unwrap_or_default(),
            WASM_CONFIG.to_owned(),
            None,
        );
        let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
        manifest.media_type = Some(OCI_MANIFEST.to_owned());
        let pushed = self
            .client()?
            .push(reference, &[layer], config, auth, Some(manifest))
            .await
            .map_err(|err| describe(reference, &err))?;
        pushed
            .manifest_url
            .rsplit('/')
            .next()
            .filter(|d| d.starts_with("sha256:"))
            .map(str::to_owned)
            .ok_or_else(|| {
                OciError::registry(
                    reference,
                    format!("the registry answered {:?}", pushed.manifest_url),
                )
            })
    }
}

/// The one `application/wasm` layer of a CNCF Wasm artifact's `manifest`.
fn wasm_layer<'a>(
    reference: &Reference,
    manifest: &'a OciImageManifest,
) -> Result<&'a OciDescriptor, OciError> {
    if manifest.config.media_type != WASM_CONFIG {
        return Err(OciError::registry(
            reference,
            format!(
                "is no Wasm component artifact: its config is {:?}, not {WASM_CONFIG:?} (push it with `krec push` or `wkg oci push`)",
                manifest.config.media_type
            ),
        ));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(OciError::registry(
            reference,
            format!(
                "has {} layers: a Wasm component artifact has exactly one",
                manifest.layers.len()
            ),
        ));
    };
    if layer.media_type != WASM_LAYER {
        return Err(OciError::registry(
            reference,
            format!("its layer is {:?}, not {WASM_LAYER:?}", layer.media_type),
        ));
    }
    if u64::try_from(layer.size).unwrap_or(u64::MAX) > crate::manifest::files::MAX_MODULE_BYTES {
        return Err(OciError::registry(
            reference,
            format!(
                "its layer is {} bytes, more than a module may be ({})",
                layer.size,
                crate::manifest::files::MAX_MODULE_BYTES
            ),
        ));
    }
    Ok(layer)
}

/// A registry error as a sentence naming the reference.
/// What went wrong talking to a registry (a push's), naming the reference — its status code and
/// error codes, never the body it answered with.
fn describe(reference: &Reference, err: &oci_client::errors::OciDistributionError) -> OciError {
    use oci_client::errors::OciDistributionError as E;
    let problem = match err {
        E::ServerError { code, .. } => format!("the registry answered {code}"),
        E::RegistryError { envelope, .. } => format!(
            "the registry answered {}",
            envelope
                .errors
                .iter()
                .map(|e| format!("{:?}", e.code))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => {
            "the registry refused the credentials".to_owned()
        }
        E::GenericError(_) => "the registry's answer could not be used".to_owned(),
        E::RequestError(request) => {
            let mut text = request.to_string();
            let mut source = std::error::Error::source(request);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            if request.is_connect() || request.is_request() {
                text.push_str(
                    " (a registry that speaks plain HTTP needs --insecure: krec push --insecure)",
                );
            }
            text
        }
        other => other.to_string(),
    };
    OciError::registry(reference, problem)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|error| OciError::Store {
        path: path.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_module_kept_from_one_repository_should_not_answer_for_another() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Team a's private module, kept here as pulled from its registry's repository.
        let store = tempfile::tempdir().expect("store");
        let registries = Registries::new(store.path().to_owned(), vec!["127.0.0.1:1".into()]);
        let digest = format!("sha256:{}", "a".repeat(64));
        let layer = format!("sha256:{}", "b".repeat(64));
        let private: Reference = format!("127.0.0.1:1/private/p@{digest}")
            .parse()
            .expect("ref");
        write_atomically(&registries.blob(&layer), b"the private module").expect("blob");
        write_atomically(&registries.link(&private, &digest), layer.as_bytes()).expect("link");
        // Team b names the same digest in a registry of its own that claims to have anything.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let echo = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = vec![0u8; 8192];
                    let n = socket.read(&mut request).await.unwrap_or(0);
                    let text = String::from_utf8_lossy(&request[..n]).to_string();
                    let named = text
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or("")
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    let answer = if text.starts_with("HEAD") {
                        format!(
                            "HTTP/1.1 200 OK\r\ndocker-content-digest: {named}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        )
                    } else {
                        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            .to_owned()
                    };
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        let registries = Registries::new(store.path().to_owned(), vec![echo.clone()]);
        let claimed: Reference = format!("{echo}/echo/anything@{digest}")
            .parse()
            .expect("ref");
        let pull = PullSpec::default();
        let err = registries
            .fetch(&claimed, &RegistryAuth::Anonymous, &pull)
            .await
            .expect_err("another repository's claim is pulled, and fails");
        assert!(err.to_string().contains("answered 404"), "{err}");
    }
}
