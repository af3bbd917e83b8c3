//! [`LiveCluster`]: one guest's view of a real API server — reads from the shared [`Cache`],
//! writes to the API server under the guest's field manager.
//!
//! Like controller-runtime's delegating client: `get` and `list` are served from the informer
//! of the kind (started on first use if no controller watches it), except for kinds the
//! manifest lists as `uncached`, `list` calls with `uncached: true`, and namespaces outside the
//! guest's `namespaces`, which go to the API server. Writes always go to the API server, so a
//! stale `resourceVersion` comes back as `conflict`.
//!
//! # Read-your-own-writes
//!
//! After one of the guest's writes returns `resourceVersion` R for an object, a later cached get
//! of that object, or list of its kind in its namespace, by the guest sees a version ≥ R (a get
//! of another object does not wait for it): the read waits until the informer's store reflects
//! R (its watch has delivered that event or a later one), at most a
//! quarter of the guest's reconcile timeout and never more than a second, then, if the cache is
//! still behind, reads the API server instead. So a reconcile that follows the guest's own
//! create, before the watch has delivered it, finds the object rather than creating it again.
//! Deletes likewise: after the guest's delete returns, a cached read no longer finds the object
//! (or finds it marked for deletion, when finalizers hold it). `readYourWrites: false` in the
//! manifest turns this off.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{ClusterAccess, Reply, Request, Target};
use crate::cluster::cache::{Cache, Content, Informer, InformerUse, SYNC_TIMEOUT};
use crate::cluster::client::ApiClient;
use crate::manifest::Manifest;
use krec_core::ObjectKey;
use krec_core::selector::{FieldSelector, LabelSelector};
use krec_core::{
    CallError, Gvk, ListOptions, ObjectHead, PatchType, Preconditions, WriteKind, json_text,
};

/// The field manager a guest's writes are attributed to: `krec-<guest>`.
pub fn field_manager(guest: &str) -> String {
    format!("krec-{guest}")
}

/// The informers a guest's cached reads go through, by kind and namespace asked: a use of each
/// is taken on the first read and held, apart from the uses its subscriptions hold, so that
/// swapping its watches does not stop what it reads through. Shared by the versions of one
/// guest ([`LiveCluster::with_reads`]); [cleared](Self::clear) when the guest goes.
#[derive(Debug, Default)]
pub struct Reads(Mutex<Vec<ReadThrough>>);

/// One informer a guest reads through: what was asked, and the use held.
#[derive(Debug)]
struct ReadThrough {
    gvk: Gvk,
    namespace: Option<String>,
    informer: InformerUse,
}

impl ReadThrough {
    fn answers(&self, gvk: &Gvk, namespace: Option<&str>, content: Content) -> bool {
        self.gvk == *gvk
            && self.namespace.as_deref() == namespace
            && self.informer.content() == content
    }
}

impl Reads {
    /// The informer held for reads of `gvk` in `namespace`: a scan of the few a guest reads,
    /// without building a key (this runs for every cached read).
    fn held(&self, gvk: &Gvk, namespace: Option<&str>, content: Content) -> Option<Arc<Informer>> {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.iter()
            .find(|r| r.answers(gvk, namespace, content))
            .map(|r| r.informer.informer().clone())
    }

    /// Keep `taken` for reads of `gvk` in `namespace` (two first reads at once: the first kept,
    /// the other dropped).
    fn keep(&self, gvk: &Gvk, namespace: Option<&str>, taken: InformerUse) -> Arc<Informer> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let content = taken.content();
        if let Some(kept) = held.iter().find(|r| r.answers(gvk, namespace, content)) {
            return kept.informer.informer().clone();
        }
        let informer = taken.informer().clone();
        held.push(ReadThrough {
            gvk: gvk.clone(),
            namespace: namespace.map(str::to_owned),
            informer: taken,
        });
        informer
    }

    /// Let every informer go: those no other guest uses stop watching.
    pub fn clear(&self) {
        let released = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        drop(released);
    }
}

/// A guest's cluster access over the shared cache and the API server.
pub struct LiveCluster {
    guest: String,
    /// The informers its cached reads go through (see [`Reads`]).
    reads: Arc<Reads>,
    cache: Arc<Cache>,
    api: Arc<ApiClient>,
    field_manager: String,
    uncached: Vec<Gvk>,
    /// Kinds the manifest watches for their metadata alone: cached reads of them get metadata.
    metadata_only: Vec<Gvk>,
    namespaces: Vec<String>,
    /// Read-your-own-writes: whether reads wait for the guest's writes, and how long at most.
    read_your_writes: Option<Duration>,
    /// The `resourceVersion`s the guest's writes got back, by kind.
    written: Mutex<HashMap<Gvk, Writes>>,
    /// The informers the guest's cached reads of each kind went through: what tells which
    /// writes the cache already reflects, so their entries can go. Weak: the cache decides how
    /// long an informer (and its objects) lives.
    read_from: Mutex<HashMap<Gvk, Vec<std::sync::Weak<Informer>>>>,
    /// Where `krec_read_your_writes_*` are counted (series made on a guest's first wait: most
    /// guests never wait, and an idle guest should cost little).
    metrics: Option<Arc<crate::process::metrics::Metrics>>,
}

/// The longest a read waits for the cache to reflect the guest's own write.
const MAX_RYW_WAIT: Duration = Duration::from_secs(1);

/// Object entries of one kind past which those the cache reflects are dropped.
const PRUNE_AT: usize = 1024;

/// The guest's writes of one kind: a list waits for the highest in its namespace, a get only
/// for its object's.
#[derive(Default)]
struct Writes {
    /// The highest version written, by namespace (`None`: cluster-scoped).
    by_namespace: HashMap<Option<String>, u64>,
    /// The version written, by object, until the cache reflects it.
    by_object: HashMap<ObjectKey, u64>,
    /// By namespace, the highest version of object entries dropped before the cache was seen to
    /// reflect them (no informer known to ask): every get there waits for it.
    floor: HashMap<Option<String>, u64>,
}

impl Writes {
    /// What a read through `informer` must see: of `object` (namespace, name) for a get, of
    /// every object the informer holds for a list; 0 when nothing is pending.
    fn needed(&self, informer: &Informer, object: Option<(Option<&str>, &str)>) -> u64 {
        let in_scope = |ns: &Option<String>| {
            informer.namespace().is_none() || ns.as_deref() == informer.namespace()
        };
        match object {
            Some((namespace, name)) => {
                let key = ObjectKey::new(namespace, name);
                let floor = self.floor.get(&key.namespace).copied().unwrap_or(0);
                self.by_object.get(&key).copied().unwrap_or(0).max(floor)
            }
            None => self
                .by_namespace
                .iter()
                .filter(|(ns, _)| in_scope(ns))
                .map(|(_, v)| *v)
                .max()
                .unwrap_or(0),
        }
    }

    /// Drop the object entries the cache reflects (asked of `informers`); those no informer
    /// answers for raise their namespace's floor instead.
    fn prune(&mut self, informers: &[Arc<Informer>]) {
        let floor = &mut self.floor;
        self.by_object
            .retain(|ObjectKey { namespace, .. }, version| {
                let seen = informers
                    .iter()
                    .filter(|i| i.namespace().is_none() || i.namespace() == namespace.as_deref())
                    .map(|i| i.seen_version())
                    .max();
                match seen {
                    Some(seen) => seen < *version,
                    None => {
                        let f = floor.entry(namespace.clone()).or_insert(0);
                        *f = (*f).max(*version);
                        false
                    }
                }
            });
    }
}

/// What a write's answer says of the object: its namespace and version.
#[derive(serde::Deserialize)]
struct Written {
    metadata: WrittenMeta,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct WrittenMeta {
    namespace: Option<String>,
    name: Option<String>,
    resource_version: Option<String>,
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
            reads: Arc::default(),
            guest: manifest.name.clone(),
            api: cache.api().clone(),
            cache,
            field_manager: field_manager(&manifest.name),
            uncached: manifest.spec.uncached.iter().map(|k| k.gvk()).collect(),
            metadata_only: manifest.metadata_only_kinds(),
            namespaces: manifest.spec.namespaces.clone(),
            read_your_writes: manifest
                .spec
                .read_your_writes
                .then(|| (manifest.spec.limits.timeout / 4).min(MAX_RYW_WAIT)),
            written: Mutex::default(),
            read_from: Mutex::default(),
            metrics: None,
        }
    }

    /// Read through `reads`, shared with the guest's other versions, instead of a set of its own.
    pub fn with_reads(mut self, reads: Arc<Reads>) -> Self {
        self.reads = reads;
        self
    }

    /// Count read-your-own-writes waits in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::process::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Count one wait of `waited` that caught up or not.
    fn count_wait(&self, waited: Duration, caught_up: bool) {
        use crate::process::metrics::{GuestLabel, OutcomeLabels};
        let Some(metrics) = &self.metrics else {
            return;
        };
        let outcome = if caught_up {
            "caught_up"
        } else {
            "read_through"
        };
        metrics
            .ryw_waits
            .get_or_create(&OutcomeLabels {
                guest: self.guest.clone(),
                outcome,
            })
            .inc();
        metrics
            .ryw_wait
            .get_or_create(&GuestLabel {
                guest: self.guest.clone(),
            })
            .observe(waited.as_secs_f64());
    }

    /// Note a write of the guest answered with `resource_version` for the object `name` of
    /// `gvk` in `namespace`.
    fn wrote(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
        name: Option<&str>,
        resource_version: Option<&str>,
    ) {
        if self.read_your_writes.is_none() {
            return;
        }
        let Some(version) = resource_version.and_then(|v| v.parse::<u64>().ok()) else {
            return;
        };
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let writes = written.entry(gvk.clone()).or_default();
        let highest = writes
            .by_namespace
            .entry(namespace.map(str::to_owned))
            .or_insert(0);
        *highest = (*highest).max(version);
        if let Some(name) = name {
            let entry = writes
                .by_object
                .entry(ObjectKey::new(namespace, name))
                .or_insert(0);
            *entry = (*entry).max(version);
        }
        if writes.by_object.len() > PRUNE_AT {
            let informers = self
                .read_from
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(gvk)
                .map(|known| {
                    known
                        .iter()
                        .filter_map(std::sync::Weak::upgrade)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            writes.prune(&informers);
        }
    }

    /// Whether `informers` reflect the guest's writes a read of `object` (namespace, name; a
    /// list: `None`) of `gvk` depends on, after waiting for them within the bound (see the
    /// [module docs](self)); `false`: read the API server.
    async fn caught_up(
        &self,
        gvk: &Gvk,
        informers: &[Arc<Informer>],
        object: Option<(Option<&str>, &str)>,
    ) -> bool {
        let Some(bound) = self.read_your_writes else {
            return true;
        };
        if !self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(gvk)
        {
            // Nothing written of this kind: nothing to wait for, nothing to prune later.
            return true;
        }
        {
            let mut read_from = self.read_from.lock().unwrap_or_else(|e| e.into_inner());
            let known = read_from.entry(gvk.clone()).or_default();
            known.retain(|k| k.strong_count() > 0);
            for informer in informers {
                if !known
                    .iter()
                    .any(|k| std::ptr::eq(k.as_ptr(), Arc::as_ptr(informer)))
                {
                    known.push(Arc::downgrade(informer));
                }
            }
        }
        let behind: Vec<(&Arc<Informer>, u64)> = {
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            let Some(writes) = written.get(gvk) else {
                return true;
            };
            informers
                .iter()
                .map(|informer| (informer, writes.needed(informer, object)))
                .filter(|(informer, needed)| informer.seen_version() < *needed)
                .collect()
        };
        if behind.is_empty() {
            return true;
        }
        let started = tokio::time::Instant::now();
        let deadline = started + bound;
        let mut caught_up = true;
        for (informer, needed) in behind {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !informer.wait_for_version(needed, left).await {
                caught_up = false;
                break;
            }
        }
        self.count_wait(started.elapsed(), caught_up);
        if !caught_up {
            tracing::debug!(
                target: "krec::client",
                "{}: the cache of {gvk} is behind the guest's own write after {bound:?}: reading the API server",
                self.guest
            );
        }
        caught_up
    }

    /// The informer of `gvk` in `namespace` for the guest's reads, its use taken on the first.
    async fn read_through(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
    ) -> Result<Arc<Informer>, CallError> {
        let content = if self.metadata_only.contains(gvk) {
            Content::Metadata
        } else {
            Content::Objects
        };
        if let Some(held) = self.reads.held(gvk, namespace, content) {
            return Ok(held);
        }
        let taken = self
            .cache
            .informer(gvk, namespace, content, &self.guest)
            .await?;
        Ok(self.reads.keep(gvk, namespace, taken))
    }

    /// The informers that answer a read of `gvk` in `namespace` (`None`: every namespace the
    /// guest sees), or `None` when the read must go to the API server.
    async fn readers(
        &self,
        gvk: &Gvk,
        namespace: Option<&str>,
    ) -> Result<Option<Vec<Arc<Informer>>>, CallError> {
        if self.uncached.contains(gvk) {
            return Ok(None);
        }
        // Reads come from the informers of the guest's own scope, the ones its events come
        // from: another guest's store of the same kind (all namespaces, say) applies events at
        // its own pace, so a reconcile triggered by an event could read an object older than
        // that event there, return `done`, and the change would never be reconciled.
        let informers = if self.namespaces.is_empty() {
            vec![self.read_through(gvk, None).await?]
        } else {
            let wanted: Vec<&str> = match namespace {
                Some(ns) if self.namespaces.iter().any(|n| n == ns) => vec![ns],
                // Outside the guest's cache scope: ask the API server.
                Some(_) => return Ok(None),
                None => self.namespaces.iter().map(String::as_str).collect(),
            };
            let mut informers = Vec::new();
            for ns in wanted {
                let informer = self.read_through(gvk, Some(ns)).await?;
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

fn parse_selectors(
    options: &ListOptions,
) -> Result<(Option<LabelSelector>, Option<FieldSelector>), CallError> {
    let labels = options
        .label_selector
        .as_deref()
        .map(LabelSelector::parse)
        .transpose()
        .map_err(|e| CallError::Invalid(format!("label selector: {e}")))?;
    let fields = options
        .field_selector
        .as_deref()
        .map(FieldSelector::parse)
        .transpose()
        .map_err(|e| CallError::Invalid(format!("field selector: {e}")))?;
    Ok((labels, fields))
}

impl LiveCluster {
    /// A get: from the guest's informer when it has caught up with the guest's writes,
    /// otherwise from the API server.
    async fn get(&self, target: Target<'_>) -> Result<Arc<str>, CallError> {
        let Target {
            gvk,
            namespace,
            name,
        } = target;
        let informers = match self.readers(gvk, namespace).await? {
            Some(informers)
                if self
                    .caught_up(gvk, &informers, Some((namespace, name)))
                    .await =>
            {
                informers
            }
            _ => return json_text(&self.api.get(gvk, namespace, name).await?),
        };
        if let Some(found) = informers.iter().find_map(|i| i.get_json(namespace, name)) {
            return Ok(found);
        }
        // kube-apiserver's message: `deployments.apps "web" not found`.
        Err(match self.api.resolve(gvk).await {
            Ok(resolved) => {
                let resource = &resolved.resource;
                krec_core::ApiError::not_found(&resource.group, &resource.plural, name).into()
            }
            Err(_) => {
                CallError::NotFound(format!("{} {name:?} not found", gvk.kind.to_lowercase()))
            }
        })
    }

    /// A list: from the guest's informers as a get, or from the API server.
    async fn list(&self, gvk: &Gvk, options: &ListOptions) -> Result<Vec<Arc<str>>, CallError> {
        let (labels, fields) = parse_selectors(options)?;
        let namespace = options.namespace.as_deref();
        let readers = if options.uncached {
            None
        } else {
            match self.readers(gvk, namespace).await? {
                Some(informers) if self.caught_up(gvk, &informers, None).await => Some(informers),
                _ => None,
            }
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
                        .namespace()
                        .is_none_or(|ns| self.namespaces.iter().any(|n| n == ns));
                if visible {
                    out.push(object.json());
                }
            }
        }
        Ok(out)
    }

    /// A whole-object write, sent as the guest wrote it; its answer noted for the read set.
    async fn write(
        &self,
        kind: WriteKind,
        head: &ObjectHead,
        json: &str,
    ) -> Result<String, CallError> {
        let text = self
            .api
            .write_text(kind, head, json, &self.field_manager)
            .await?;
        if self.read_your_writes.is_some()
            && let Ok(written) = serde_json::from_str::<Written>(&text)
        {
            let meta = written.metadata;
            self.wrote(
                &head.gvk,
                meta.namespace.as_deref(),
                meta.name.as_deref(),
                meta.resource_version.as_deref(),
            );
        }
        Ok(text)
    }

    /// A patch; its answer noted for the read set.
    async fn patch(
        &self,
        target: Target<'_>,
        patch_type: PatchType,
        body: &Value,
        status: bool,
    ) -> Result<String, CallError> {
        let Target {
            gvk,
            namespace,
            name,
        } = target;
        let patched = self
            .api
            .patch(
                gvk,
                namespace,
                name,
                patch_type,
                body,
                status,
                &self.field_manager,
            )
            .await?;
        let version = patched
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        self.wrote(gvk, namespace, Some(name), version);
        serde_json::to_string(&patched)
            .map_err(|e| CallError::Other(format!("encoding object: {e}")))
    }

    /// A delete; the version it left noted for the read set.
    async fn delete(
        &self,
        target: Target<'_>,
        preconditions: Option<&Preconditions>,
    ) -> Result<(), CallError> {
        let Target {
            gvk,
            namespace,
            name,
        } = target;
        let version = self.api.delete(gvk, namespace, name, preconditions).await?;
        self.wrote(gvk, namespace, Some(name), version.as_deref());
        Ok(())
    }
}

#[async_trait]
impl ClusterAccess for LiveCluster {
    async fn call(&self, request: Request<'_>) -> Result<Reply, CallError> {
        Ok(match request {
            Request::Get(target) => Reply::Object(self.get(target).await?),
            Request::List { gvk, options } => Reply::Objects(self.list(gvk, options).await?),
            Request::Namespaced(gvk) => Reply::Namespaced(self.api.namespaced(gvk).await?),
            Request::Write { kind, head, json } => {
                Reply::Stored(self.write(kind, head, json).await?)
            }
            Request::Patch {
                target,
                patch_type,
                body,
                status,
            } => Reply::Stored(self.patch(target, patch_type, &body, status).await?),
            Request::Delete {
                target,
                preconditions,
            } => {
                self.delete(target, preconditions).await?;
                Reply::Done
            }
            Request::Event(event) => {
                self.api.record_event(&event).await?;
                Reply::Done
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey::new(Some(ns), name)
    }

    #[test]
    fn a_get_should_wait_for_its_object_and_a_list_for_its_namespace() {
        let gvk = Gvk::new("", "v1", "ConfigMap");
        let mut writes = Writes::default();
        writes.by_namespace.insert(Some("a".into()), 7);
        writes.by_namespace.insert(Some("b".into()), 4);
        writes.by_object.insert(key("a", "x"), 3);
        writes.by_object.insert(key("a", "z"), 7);
        writes.by_object.insert(key("b", "w"), 4);
        let in_a = Informer::standing(gvk.clone(), Some("a"), 5);
        let everywhere = Informer::standing(gvk.clone(), None, 5);
        assert_eq!(writes.needed(&in_a, Some((Some("a"), "x"))), 3);
        assert_eq!(
            writes.needed(&in_a, Some((Some("a"), "y"))),
            0,
            "not written"
        );
        assert_eq!(writes.needed(&in_a, None), 7, "a list of a");
        assert_eq!(writes.needed(&everywhere, None), 7, "a list of all");
        // Only informer `a` is known: what it reflects goes, `b`'s entry raises b's floor.
        writes.prune(&[in_a]);
        assert_eq!(
            writes.by_object.keys().collect::<Vec<_>>(),
            vec![&key("a", "z")]
        );
        assert_eq!(
            writes.needed(&everywhere, Some((Some("b"), "other"))),
            4,
            "an entry dropped unseen keeps every get in its namespace waiting for it"
        );
        assert_eq!(writes.needed(&everywhere, Some((Some("a"), "y"))), 0);
    }
}
