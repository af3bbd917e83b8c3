//! [`LiveCluster`]: one guest's view of a real API server — reads from the shared [`Cache`],
//! writes to the API server under the guest's field manager.
//!
//! Like controller-runtime's delegating client: `get` and `list` are served from the informer
//! of the kind (started on first use if no controller watches it), except for kinds the
//! manifest lists as `uncached`, `list` calls with `uncached: true`, and namespaces outside the
//! guest's `namespaces`, which go to the API server. Writes always go to the API server, so a
//! stale `resourceVersion` comes back as `conflict`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::api::ApiClient;
use super::{
    AccessError, ClusterAccess, EventRecord, Gvk, ListOptions, ObjectHead, PatchType,
    Preconditions, WriteKind, json_text,
};
use crate::cache::{Cache, Informer, SYNC_TIMEOUT};
use crate::manifest::Manifest;
use krec_apiserver::selector::{FieldSelector, LabelSelector};

/// The field manager a guest's writes are attributed to: `krec-<guest>`.
pub fn field_manager(guest: &str) -> String {
    format!("krec-{guest}")
}

/// The cache user a guest's reads are attributed to: distinct from its subscriptions, so that
/// swapping its watches does not stop the informers it reads through.
pub fn reader_id(guest: &str) -> String {
    format!("{guest}#reads")
}

/// A guest's cluster access over the shared cache and the API server.
pub struct LiveCluster {
    guest: String,
    /// The cache user its reads are attributed to (see [`reader_id`]).
    reader: String,
    cache: Arc<Cache>,
    api: Arc<ApiClient>,
    field_manager: String,
    uncached: Vec<Gvk>,
    namespaces: Vec<String>,
}

impl std::fmt::Debug for LiveCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCluster")
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

impl LiveCluster {
    /// The access of the guest `manifest` describes.
    pub fn new(cache: Arc<Cache>, manifest: &Manifest) -> Self {
        LiveCluster {
            reader: reader_id(&manifest.name),
            guest: manifest.name.clone(),
            api: cache.api().clone(),
            cache,
            field_manager: field_manager(&manifest.name),
            uncached: manifest.spec.uncached.iter().map(|k| k.gvk()).collect(),
            namespaces: manifest.spec.namespaces.clone(),
        }
    }

    /// The informers that answer a read of `gvk` in `namespace` (`None`: every namespace the
    /// guest sees), or `None` when the read must go to the API server.
    async fn readers(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
    ) -> Result<Option<Vec<Arc<Informer>>>, AccessError> {
        if self.uncached.contains(gvk) {
            return Ok(None);
        }
        // Reads come from the informers of the guest's own scope, the ones its events come
        // from: another guest's store of the same kind (all namespaces, say) applies events at
        // its own pace, so a reconcile triggered by an event could read an object older than
        // that event there, return `done`, and the change would never be reconciled.
        let informers = if self.namespaces.is_empty() {
            vec![self.cache.informer(gvk, None, &self.reader).await?]
        } else {
            let wanted: Vec<&str> = match namespace {
                Some(ns) if self.namespaces.iter().any(|n| n == ns) => vec![ns],
                // Outside the guest's cache scope: ask the API server.
                Some(_) => return Ok(None),
                None => self.namespaces.iter().map(String::as_str).collect(),
            };
            let mut informers = Vec::new();
            for ns in wanted {
                let informer = self.cache.informer(gvk, Some(ns), &self.reader).await?;
                // A cluster-scoped kind has one informer whatever the namespace asked.
                if !informers.iter().any(|i| Arc::ptr_eq(i, &informer)) {
                    informers.push(informer);
                }
            }
            informers
        };
        for informer in &informers {
            informer.wait_synced(SYNC_TIMEOUT).await?;
        }
        Ok(Some(informers))
    }
}

/// `Kind ns/name` of an object, for log lines.
fn describe(gvk: &Gvk, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{} {ns}/{name}", gvk.kind),
        None => format!("{} {name}", gvk.kind),
    }
}

impl LiveCluster {
    /// Log a write the guest made (target `krec::client`, debug): what `krec dev` shows.
    fn logged<T>(
        &self,
        verb: &str,
        what: String,
        result: Result<T, AccessError>,
    ) -> Result<T, AccessError> {
        match &result {
            Ok(_) => tracing::debug!(target: "krec::client", "{}: {verb} {what}", self.guest),
            // A failure reaches the guest, and the reconcile's own error line says it when the
            // guest passes it on: at debug level it would be said twice per retry.
            Err(err) => {
                tracing::trace!(target: "krec::client", "{}: {verb} {what} failed: {err}", self.guest)
            }
        }
        result
    }
}

/// A cached object's text, parsed.
fn parse(json: &str) -> Result<Value, AccessError> {
    serde_json::from_str(json).map_err(|e| AccessError::Other(format!("decoding an object: {e}")))
}

fn parse_selectors(
    options: &ListOptions,
) -> Result<(Option<LabelSelector>, Option<FieldSelector>), AccessError> {
    let labels = options
        .label_selector
        .as_deref()
        .map(LabelSelector::parse)
        .transpose()
        .map_err(|e| AccessError::Invalid(format!("label selector: {e}")))?;
    let fields = options
        .field_selector
        .as_deref()
        .map(FieldSelector::parse)
        .transpose()
        .map_err(|e| AccessError::Invalid(format!("field selector: {e}")))?;
    Ok((labels, fields))
}

#[async_trait]
impl ClusterAccess for LiveCluster {
    async fn get(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, AccessError> {
        parse(&self.get_json(gvk, namespace, name).await?)
    }

    async fn get_json(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<str>, AccessError> {
        let Some(informers) = self.readers(gvk, namespace).await? else {
            return json_text(&self.api.get(gvk, namespace, name).await?);
        };
        if let Some(found) = informers.iter().find_map(|i| i.get_json(namespace, name)) {
            return Ok(found);
        }
        // kube-apiserver's message: `deployments.apps "web" not found`.
        Err(match self.api.resolve(gvk).await {
            Ok(resolved) => {
                let resource = &resolved.resource;
                krec_apiserver::ApiError::not_found(&resource.group, &resource.plural, name).into()
            }
            Err(_) => {
                AccessError::NotFound(format!("{} {name:?} not found", gvk.kind.to_lowercase()))
            }
        })
    }

    async fn namespaced(&self, gvk: &Gvk) -> Result<bool, AccessError> {
        self.api.namespaced(gvk).await
    }

    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Value>, AccessError> {
        self.list_json(gvk, options)
            .await?
            .iter()
            .map(|json| parse(json))
            .collect()
    }

    async fn list_json(
        &self,
        gvk: &Gvk,
        options: &ListOptions,
    ) -> Result<Vec<Arc<str>>, AccessError> {
        let (labels, fields) = parse_selectors(options)?;
        let namespace = options.namespace.as_deref();
        let readers = if options.uncached {
            None
        } else {
            self.readers(gvk, namespace).await?
        };
        let Some(informers) = readers else {
            return self
                .api
                .list(gvk, options)
                .await?
                .iter()
                .map(json_text)
                .collect();
        };
        let mut out = Vec::new();
        for informer in informers {
            for object in informer.select(namespace, labels.as_ref(), fields.as_ref()) {
                // A guest limited to some namespaces sees only those, even through a
                // cluster-wide informer another guest started.
                let visible = namespace.is_some()
                    || self.namespaces.is_empty()
                    || object
                        .metadata()
                        .namespace
                        .as_deref()
                        .is_none_or(|ns| self.namespaces.iter().any(|n| n == ns));
                if visible {
                    out.push(object.json().clone());
                }
            }
        }
        Ok(out)
    }

    async fn create(&self, object: Value) -> Result<Value, AccessError> {
        let result = self.api.create(&object, &self.field_manager).await;
        self.logged("created", super::describe(&object), result)
    }

    async fn update(&self, object: Value, status: bool) -> Result<Value, AccessError> {
        let result = self.api.update(&object, status, &self.field_manager).await;
        let verb = if status {
            "updated the status of"
        } else {
            "updated"
        };
        self.logged(verb, super::describe(&object), result)
    }

    async fn patch(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        body: Value,
        status: bool,
    ) -> Result<Value, AccessError> {
        let result = self
            .api
            .patch(
                gvk,
                namespace,
                name,
                patch_type,
                &body,
                status,
                &self.field_manager,
            )
            .await;
        let verb = if status {
            "patched the status of"
        } else {
            "patched"
        };
        self.logged(verb, describe(gvk, namespace, name), result)
    }

    async fn delete(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: &str,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), AccessError> {
        let result = self.api.delete(gvk, namespace, name, preconditions).await;
        self.logged("deleted", describe(gvk, namespace, name), result)
    }

    async fn write_json(
        &self,
        kind: WriteKind,
        head: &ObjectHead,
        json: &str,
    ) -> Result<String, AccessError> {
        let result = self
            .api
            .write_text(kind, head, json, &self.field_manager)
            .await;
        let verb = match kind {
            WriteKind::Create => "created",
            WriteKind::Update => "updated",
            WriteKind::UpdateStatus => "updated the status of",
        };
        let name = head.name.as_deref().unwrap_or("(generated name)");
        let what = describe(&head.gvk, head.namespace.as_deref(), name);
        self.logged(verb, what, result)
    }

    async fn record_event(&self, event: EventRecord) -> Result<(), AccessError> {
        let result = self.api.record_event(&event).await;
        let r = &event.regarding;
        let what = format!(
            "{} Event {} on {}: {}",
            event.event_type.as_str(),
            event.reason,
            describe(&r.gvk, r.namespace.as_deref(), &r.name),
            event.message
        );
        self.logged("recorded", what, result)
    }
}
