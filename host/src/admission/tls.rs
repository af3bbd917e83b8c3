//! The admission server's certificate: where it comes from, and how it is renewed while the
//! server answers reviews.
//!
//! - **Files** (`--webhook-cert-file`/`--webhook-key-file`, e.g. a Secret cert-manager keeps
//!   renewed, mounted in the Pod): read again when they change. Registrations trust
//!   `--webhook-ca-file`, else the chain itself.
//! - **A CA in a Secret** (a host in a cluster, no files): the first replica makes a CA and
//!   creates the Secret `krec-webhook-ca` in the host's namespace (a create, so two replicas
//!   racing end with one CA: the loser reads the winner's); every replica issues its own serving
//!   certificate from it for the Service's names and renews it at two thirds of its validity.
//!   Registrations trust the CA, so a renewal changes nothing registered.
//! - **A CA of its own** (`krec dev`, a host with no namespace): the same, kept in memory.
//!
//! The server presents whatever certificate is current at each handshake
//! ([`krec_net::tls::ServingCert`]), so a renewal fails no review.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use base64::Engine as _;
use krec_net::tls::{Authority, ServingCert};
use serde_json::json;

use crate::cluster::client::ApiClient;
use krec_core::{CallError, Gvk};

/// The Secret keeping the host's webhook CA, in its namespace.
pub const CA_SECRET: &str = "krec-webhook-ca";

/// The field manager of the Secret the host creates (the host's, as for its registrations).
const FIELD_MANAGER: &str = "krec";

/// The name of the CA (`krec-webhooks-ca`) and of the certificates it issues.
const AUTHORITY: &str = "krec-webhooks";

/// How long the serving certificates the host issues are valid by default; renewed at two
/// thirds of it.
pub const DEFAULT_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);

/// The shortest time between two renewals, whatever the validity.
const MIN_RENEWAL: Duration = Duration::from_secs(1);

/// How often certificate files are looked at for a change.
const FILES_CHECKED_EVERY: Duration = Duration::from_secs(10);

/// The admission server's serving certificate and key, PEM files (`tls.crt` and `tls.key` of a
/// `kubernetes.io/tls` Secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The CA that signed it (`ca.crt`), which registrations trust; `None`: the chain itself.
    pub ca: Option<PathBuf>,
}

/// Where the admission server's certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertSource {
    /// Files, read again when they change.
    Files(TlsFiles),
    /// A CA kept in the Secret [`CA_SECRET`] of `namespace`, shared by the host's replicas.
    Secret {
        /// The host's namespace.
        namespace: String,
    },
    /// A CA of this process's own.
    Own,
}

/// How the admission server gets its certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// Where it comes from.
    pub source: CertSource,
    /// How long the certificates the host issues are valid (renewed at two thirds of it).
    pub validity: Duration,
    /// The Service (namespace, name) the API server reaches the host through, whose names the
    /// certificates the host issues are for.
    pub service: Option<(String, String)>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            source: CertSource::Own,
            validity: DEFAULT_VALIDITY,
            service: None,
        }
    }
}

/// What the admission server presents, and what registrations trust.
pub struct WebhookTls {
    /// The certificate presented now, replaced when renewed.
    pub cert: Arc<ServingCert>,
    /// The CA certificate (PEM) registrations trust (`caBundle`).
    pub ca_pem: String,
    /// Renews [`cert`](Self::cert) until dropped.
    renewal: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookTls {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

impl WebhookTls {
    /// The certificate of `source` for the DNS names and addresses `names`, issued for
    /// `validity` (files: as they are), and the task renewing it.
    ///
    /// # Errors
    ///
    /// Files that cannot be read or used; a Secret that cannot be read or created (`api` is
    /// needed for [`CertSource::Secret`]), or holds no usable CA.
    pub async fn start(
        source: &CertSource,
        names: Vec<String>,
        validity: Duration,
        api: Option<&Arc<ApiClient>>,
    ) -> anyhow::Result<WebhookTls> {
        match source {
            CertSource::Files(files) => {
                let (cert_pem, key_pem, stamp) = read_files(files)?;
                let ca_pem = match &files.ca {
                    Some(ca) => std::fs::read_to_string(ca)
                        .with_context(|| format!("reading {}", ca.display()))?,
                    None => cert_pem.clone(),
                };
                let cert = ServingCert::new(&cert_pem, &key_pem).with_context(|| {
                    format!("{} and {}", files.cert.display(), files.key.display())
                })?;
                let renewal = tokio::spawn(watch_files(files.clone(), cert.clone(), stamp));
                Ok(WebhookTls {
                    cert,
                    ca_pem,
                    renewal,
                })
            }
            CertSource::Secret { namespace } => {
                let api = api.context("a CA kept in a Secret needs the cluster")?;
                let authority = kept_authority(api, namespace).await?;
                Self::issued(authority, names, validity)
            }
            CertSource::Own => Self::issued(Authority::generate(AUTHORITY)?, names, validity),
        }
    }

    /// A certificate `authority` issues for `names`, renewed at two thirds of `validity`.
    fn issued(
        authority: Authority,
        names: Vec<String>,
        validity: Duration,
    ) -> anyhow::Result<WebhookTls> {
        let issued = authority.issue(names.clone(), validity)?;
        let cert = ServingCert::new(&issued.cert_pem, &issued.key_pem)?;
        let ca_pem = issued.ca_pem;
        let renewed = cert.clone();
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep((validity * 2 / 3).max(MIN_RENEWAL)).await;
                match authority
                    .issue(names.clone(), validity)
                    .map_err(anyhow::Error::from)
                    .and_then(|i| Ok(renewed.replace(&i.cert_pem, &i.key_pem)?))
                {
                    Ok(()) => tracing::info!(
                        "renewed the admission server's certificate (valid {validity:?})"
                    ),
                    Err(err) => tracing::error!(
                        "renewing the admission server's certificate: {err:#}; the current one \
                         is served until it expires"
                    ),
                }
            }
        });
        Ok(WebhookTls {
            cert,
            ca_pem,
            renewal,
        })
    }
}

/// The names a serving certificate of a host listening on `addr` is for: `localhost` and the
/// loopback and bound addresses, and, when it is reached through a Service, the Service's DNS
/// names.
pub fn names(addr: &std::net::SocketAddr, service: Option<(&str, &str)>) -> Vec<String> {
    let mut names = krec_net::tls::local_names(addr);
    if let Some((namespace, name)) = service {
        names.extend([
            name.to_owned(),
            format!("{name}.{namespace}"),
            format!("{name}.{namespace}.svc"),
            format!("{name}.{namespace}.svc.cluster.local"),
        ]);
    }
    names
}

/// The CA in Secret [`CA_SECRET`] of `namespace`, made and kept there if there is none yet.
async fn kept_authority(api: &ApiClient, namespace: &str) -> anyhow::Result<Authority> {
    let gvk = Gvk::new("", "v1", "Secret");
    let read = |secret: serde_json::Value| -> anyhow::Result<Authority> {
        let field = |key: &str| -> anyhow::Result<String> {
            let data = secret["data"][key]
                .as_str()
                .with_context(|| format!("no {key}"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(data)
                .with_context(|| format!("{key} is not base64"))?;
            String::from_utf8(bytes).with_context(|| format!("{key} is not PEM"))
        };
        Ok(Authority::from_pem(
            AUTHORITY,
            &field("ca.crt")?,
            &field("ca.key")?,
        )?)
    };
    let named = || format!("the Secret {namespace}/{CA_SECRET}");
    match api.get(&gvk, Some(namespace), CA_SECRET).await {
        Ok(secret) => return read(secret).with_context(named),
        Err(CallError::NotFound(_)) => {}
        Err(err) => return Err(anyhow::Error::from(err).context(format!("reading {}", named()))),
    }
    let authority = Authority::generate(AUTHORITY)?;
    let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CA_SECRET, "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "krec"}},
        "type": "Opaque",
        "data": {"ca.crt": encode(authority.cert_pem()), "ca.key": encode(authority.key_pem())}});
    match api.create(&secret, FIELD_MANAGER).await {
        Ok(_) => {
            tracing::info!("made the webhook CA, kept in {}", named());
            Ok(authority)
        }
        // Another replica made it first: its CA is the one.
        Err(CallError::AlreadyExists(_)) => {
            let secret = api
                .get(&gvk, Some(namespace), CA_SECRET)
                .await
                .with_context(|| format!("reading {}", named()))?;
            read(secret).with_context(named)
        }
        Err(err) => Err(anyhow::Error::from(err).context(format!("creating {}", named()))),
    }
}

/// What identifies a version of the files: their modification times and sizes.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    [&files.cert, &files.key]
        .into_iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

/// The certificate and key of `files`, and their stamp.
fn read_files(files: &TlsFiles) -> anyhow::Result<(String, String, Stamp)> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let stamp = stamp(files);
    Ok((read(&files.cert)?, read(&files.key)?, stamp))
}

/// Serve the files' new certificate whenever they change (cert-manager renewing the Secret the
/// kubelet mounts); a pair that does not match yet (one file written, not the other) is tried
/// again at the next look.
async fn watch_files(files: TlsFiles, cert: Arc<ServingCert>, mut seen: Stamp) {
    loop {
        tokio::time::sleep(FILES_CHECKED_EVERY).await;
        if stamp(&files) == seen {
            continue;
        }
        match read_files(&files).and_then(|(c, k, stamp)| Ok((cert.replace(&c, &k)?, stamp))) {
            Ok(((), stamp)) => {
                seen = stamp;
                tracing::info!("serving the new certificate of {}", files.cert.display());
            }
            Err(err) => tracing::warn!(
                "{} changed but cannot be served yet: {err:#}",
                files.cert.display()
            ),
        }
    }
}
