//! The admission server of a running host and, for `krec dev`, the task that keeps the
//! cluster's webhook registrations those of the guests running.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{HostOptions, WebhookRegistration};
use crate::cluster::client::ApiClient;
use crate::guests::Manager;
use crate::process::progress::say;
use krec_core::CallError;

/// The admission server and, when it registers webhooks, the task keeping the cluster's webhook
/// registrations in line with the guests running.
pub(super) struct Webhooks {
    server: crate::admission::WebhookServer,
    sync: Option<(
        tokio::sync::watch::Sender<bool>,
        tokio::task::JoinHandle<()>,
    )>,
}

impl Webhooks {
    /// Stop registering, remove every registration made, stop serving.
    pub(super) async fn stop(self) {
        if let Some((stop, task)) = self.sync {
            let _ = stop.send(true);
            let _ = task.await;
        }
        self.server.stop().await;
    }
}

/// How often the registrations are applied again even when no guest changed: someone may
/// have edited or deleted one, or an earlier write failed.
pub const RESYNC: std::time::Duration = std::time::Duration::from_secs(60);

/// The admission server, when a running guest declares webhooks or a conversion, an address
/// is given, or the host registers webhooks (a guest with webhooks may come later), and, when it
/// registers them, the task that keeps the registrations those of the running guests.
pub(super) async fn start(
    manager: &Manager,
    api: &Arc<ApiClient>,
    options: &HostOptions,
) -> anyhow::Result<Option<Webhooks>> {
    let serving: Vec<String> = manager
        .controllers()
        .values()
        .map(|c| c.module().manifest().clone())
        .filter(|m| !m.spec.webhooks.is_empty() || m.spec.conversion.is_some())
        .map(|m| m.name.clone())
        .collect();
    let registering = options.webhook_registration != WebhookRegistration::Off;
    let addr = match options.webhook_addr {
        Some(addr) => addr,
        None if registering || !serving.is_empty() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], 0))
        }
        None => return Ok(None),
    };
    let server = crate::admission::WebhookServer::start_with(
        manager.clone(),
        addr,
        &tls(options),
        Some(api),
    )
    .await?;
    say(format_args!(
        "admission webhooks served at {} for {}",
        server.url(),
        if serving.is_empty() {
            "no guest yet".to_owned()
        } else {
            serving.join(", ")
        }
    ));
    let (reach, clear_on_stop) = match &options.webhook_registration {
        WebhookRegistration::Off => return Ok(Some(Webhooks { server, sync: None })),
        WebhookRegistration::Own => (crate::admission::Reach::Url(server.url()), true),
        WebhookRegistration::At(reach) => (reach.clone(), false),
    };
    let host_namespace = options.namespace.as_deref().or(reach.namespace());
    let mut registrar = Registrar {
        api: api.clone(),
        protected: crate::admission::protected_namespaces(host_namespace),
        reach,
        ca_pem: server.ca_pem().to_owned(),
        inject_ca_from: options.webhook_inject_ca_from.clone(),
        configurations: BTreeMap::new(),
        conversions: BTreeMap::new(),
    };
    // Registered before the guests are announced; later reloads are followed.
    let mut changes = manager.changes();
    changes.mark_unchanged();
    registrar.sync(manager).await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let manager = manager.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                () = tokio::time::sleep(RESYNC) => registrar.forget(),
                _ = stopped.changed() => break,
            }
            changes.mark_unchanged();
            registrar.sync(&manager).await;
        }
        if clear_on_stop {
            registrar.clear().await;
        }
    });
    Ok(Some(Webhooks {
        server,
        sync: Some((stop, task)),
    }))
}

/// Where the admission server's certificate comes from: the files given; else, for a host
/// that knows its namespace (`--namespace`, or its `--webhook-service`'s), a CA kept in a
/// Secret there, shared by its replicas; else a CA of its own.
fn tls(options: &HostOptions) -> crate::admission::TlsOptions {
    use crate::admission::{CertSource, Reach};
    let service = match &options.webhook_registration {
        WebhookRegistration::At(Reach::Service {
            namespace, name, ..
        }) => Some((namespace.clone(), name.clone())),
        _ => None,
    };
    let namespace = options
        .namespace
        .clone()
        .or_else(|| service.as_ref().map(|(ns, _)| ns.clone()));
    let source = match (&options.webhook_tls, namespace) {
        (Some(files), _) => CertSource::Files(files.clone()),
        (None, Some(namespace)) => CertSource::Secret { namespace },
        (None, None) => CertSource::Own,
    };
    crate::admission::TlsOptions {
        source,
        validity: options.webhook_cert_validity,
        service,
    }
}

/// Keeps the cluster's webhook registrations those of the guests running: each guest's
/// webhook configurations, and the conversion of each CRD a guest converts.
struct Registrar {
    api: Arc<ApiClient>,
    reach: crate::admission::Reach,
    /// The namespaces the webhooks leave out.
    protected: Vec<String>,
    ca_pem: String,
    /// The cert-manager Certificate (`namespace/name`) whose CA cert-manager injects, instead
    /// of `ca_pem`.
    inject_ca_from: Option<String>,
    /// Registered configurations: (kind, name) → as registered.
    configurations: BTreeMap<(String, String), Value>,
    /// CRDs pointed at a guest: name → their `spec.conversion`.
    conversions: BTreeMap<String, Value>,
}

impl Registrar {
    /// Register what the running guests declare and is not registered yet (or differs), and
    /// remove what no running guest declares any more.
    async fn sync(&mut self, manager: &Manager) {
        let manifests: Vec<_> = manager
            .controllers()
            .values()
            .map(|c| c.module().manifest().clone())
            .collect();
        let mut configurations = BTreeMap::new();
        let mut conversions = BTreeMap::new();
        for manifest in &manifests {
            for configuration in crate::admission::configurations(
                manifest,
                &self.reach,
                &self.ca_pem,
                &self.protected,
            ) {
                let mut configuration = configuration;
                if let Some(certificate) = &self.inject_ca_from {
                    crate::admission::inject_ca_from(&mut configuration, certificate);
                }
                let text = |key: &str| configuration.pointer(key).and_then(Value::as_str);
                let id = (
                    text("/kind").unwrap_or_default().to_owned(),
                    text("/metadata/name").unwrap_or_default().to_owned(),
                );
                configurations.insert(id, (manifest.name.clone(), configuration));
            }
            if let Some((crd, conversion)) =
                crate::admission::conversion(manifest, &self.reach, &self.ca_pem)
            {
                let mut conversion = conversion;
                if let Some(certificate) = &self.inject_ca_from {
                    crate::admission::inject_ca_from(&mut conversion, certificate);
                }
                conversions.insert(crd, (manifest.name.clone(), conversion));
            }
        }
        self.apply(configurations, conversions).await;
    }

    /// Forget what was registered, so that the next sync applies everything again (what it
    /// removes it still knows).
    fn forget(&mut self) {
        self.configurations
            .values_mut()
            .for_each(|c| *c = Value::Null);
        self.conversions.values_mut().for_each(|c| *c = Value::Null);
    }

    /// Remove every registration.
    async fn clear(&mut self) {
        self.apply(BTreeMap::new(), BTreeMap::new()).await;
    }

    async fn apply(
        &mut self,
        configurations: BTreeMap<(String, String), (String, Value)>,
        conversions: BTreeMap<String, (String, Value)>,
    ) {
        let gone: Vec<_> = self
            .configurations
            .keys()
            .filter(|id| !configurations.contains_key(*id))
            .cloned()
            .collect();
        for (kind, name) in gone {
            let gvk = krec_core::Gvk::from_api_version("admissionregistration.k8s.io/v1", &kind);
            match self.api.delete(&gvk, None, &name, None).await {
                Ok(_) | Err(CallError::NotFound(_)) => {
                    self.configurations.remove(&(kind, name));
                }
                Err(err) => tracing::warn!("removing the {kind} {name}: {err}"),
            }
        }
        for (id, (guest, configuration)) in configurations {
            if self.configurations.get(&id) == Some(&configuration) {
                continue;
            }
            match crate::admission::register(&self.api, &configuration).await {
                Ok(()) => {
                    tracing::info!(%guest, "registered the {} {}", id.0, id.1);
                    self.configurations.insert(id, configuration);
                }
                Err(err) => tracing::error!(%guest, "registering its webhooks: {err}"),
            }
        }
        let gone: Vec<_> = self
            .conversions
            .keys()
            .filter(|crd| !conversions.contains_key(*crd))
            .cloned()
            .collect();
        for crd in gone {
            match crate::admission::set_conversion(&self.api, &crd, None).await {
                Ok(()) | Err(CallError::NotFound(_)) => {
                    self.conversions.remove(&crd);
                }
                Err(err) => {
                    tracing::warn!("removing the conversion webhook of the CRD {crd}: {err}");
                }
            }
        }
        for (crd, (guest, conversion)) in conversions {
            if self.conversions.get(&crd) == Some(&conversion) {
                continue;
            }
            match crate::admission::set_conversion_with(
                &self.api,
                &crd,
                Some(conversion.clone()),
                self.inject_ca_from.as_deref(),
            )
            .await
            {
                Ok(()) => {
                    tracing::info!(%guest, "pointed the CRD {crd} at its conversion webhook");
                    self.conversions.insert(crd, conversion);
                }
                Err(err) => tracing::error!(
                    %guest,
                    "pointing the CRD {crd} at its conversion webhook: {err}"
                ),
            }
        }
    }
}
