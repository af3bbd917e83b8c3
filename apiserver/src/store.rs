//! The embedded API server's object store: every object, the resourceVersion counter, the watch
//! history, and the Kubernetes semantics of writes.
//!
//! One lock guards the state, so each write is atomic and gets the next resourceVersion from a
//! single increasing counter; the change is appended to a bounded history (for watches resuming
//! from a resourceVersion) and broadcast to live watches while the lock is held, so a watch
//! started under the lock sees exactly the changes after its starting point. Semantics follow
//! kube-apiserver: `uid`, `creationTimestamp`, `generation` bumped on spec changes only,
//! optimistic concurrency, `generateName`, the status subresource, namespaces that must exist and
//! whose deletion removes their contents, finalizers holding deletion, background garbage
//! collection through owner references, and CRDs that add and remove served types.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::persist::Persistence;
use crate::resources::{Registry, ResourceType};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector, is_dns_label, is_dns_subdomain};

/// Watch events kept for watches that resume from a resourceVersion; older ones are compacted
/// and such a watch gets 410 Gone, as from an etcd compaction.
pub const DEFAULT_HISTORY: usize = 10_000;
/// Capacity of the live broadcast to watches; a watch that falls further behind is closed with
/// 410 Gone and its client relists.
pub const WATCH_BUFFER: usize = 4_096;

/// Where an object lives: its resource (`group/plural`, shared by all versions), namespace
/// (`""` for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `group/plural`.
    pub resource: String,
    /// Namespace, `""` when cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl Key {
    fn new(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Self {
        Key {
            resource: rt.storage_key(),
            namespace: if rt.namespaced {
                namespace.unwrap_or("").to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    fn namespace_key(namespace: &str) -> Self {
        Key {
            resource: "/namespaces".into(),
            namespace: String::new(),
            name: namespace.to_owned(),
        }
    }

    /// The persisted form: `resource\0namespace\0name`.
    pub fn encode(&self) -> String {
        format!("{}\0{}\0{}", self.resource, self.namespace, self.name)
    }

    /// Parse [`encode`](Self::encode)'s output.
    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.splitn(3, '\0');
        Some(Key {
            resource: parts.next()?.to_owned(),
            namespace: parts.next()?.to_owned(),
            name: parts.next()?.to_owned(),
        })
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One write, as watches see it.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion the write produced.
    pub rv: u64,
    /// Kind of change.
    pub change: ChangeType,
    /// Where the object lives.
    pub key: Key,
    /// The object after the change (for a deletion: the last state, with the new resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change, if any (to turn selector transitions into ADDED/DELETED).
    pub old: Option<Arc<Value>>,
}

/// How a delete treats dependents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are garbage-collected after the owner is gone (also used for `Foreground`).
    #[default]
    Background,
    /// Dependents lose their owner reference and stay.
    Orphan,
}

/// Options of a delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Required UID.
    pub uid: Option<String>,
    /// Required resourceVersion.
    pub resource_version: Option<String>,
    /// Dependents policy.
    pub propagation: Propagation,
    /// Validate only; change nothing.
    pub dry_run: bool,
}

/// A page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The objects, in key order.
    pub items: Vec<Value>,
    /// The store's resourceVersion when listed.
    pub resource_version: u64,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// How many objects the following pages hold.
    pub remaining: Option<usize>,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFrom {
    /// Synthetic ADDED events for every current object, then changes.
    Now,
    /// Changes after this resourceVersion.
    After(u64),
}

/// A started watch: the backlog to send first, then the live feed.
pub struct WatchStart {
    /// Changes (or synthetic ADDED events) to send first, oldest first.
    pub backlog: Vec<Arc<Change>>,
    /// Subsequent changes.
    pub feed: broadcast::Receiver<Arc<Change>>,
    /// The store's resourceVersion when the watch started.
    pub resource_version: u64,
}

struct State {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Change>>,
    /// Changes at or below this resourceVersion are no longer in `history`.
    compacted: u64,
    /// Where writes are saved, if anywhere. Inside the lock, so closing the store releases the
    /// database even while requests still hold the store.
    persistence: Option<Persistence>,
    /// Set by [`Store::close`]: writes fail from then on.
    closed: bool,
}

/// The object store. See the [module docs](self).
pub struct Store {
    registry: Arc<Registry>,
    state: Mutex<State>,
    feed: broadcast::Sender<Arc<Change>>,
    history_limit: usize,
    /// Watches started per resource (`group/plural`), for tests and diagnostics.
    watches_started: Mutex<BTreeMap<String, u64>>,
}

/// What `write` should do with an object.
enum Write {
    Put(Value),
    Remove,
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = json!({});
    }
    let map = object.as_object_mut().expect("just made an object");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("just made an object")
}

fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Times a patch is applied again when the object changed while it was being computed
/// (kube-apiserver's `maxRetryWhenPatchConflicts`).
const MAX_PATCH_ATTEMPTS: u32 = 5;

/// The fields of built-in kinds that are maps of strings (Go `map[string]string` or
/// `map[string][]byte`, which is base64 text in JSON), by group and kind.
const STRING_MAPS: &[(&str, &str, &[&str])] = &[
    ("", "ConfigMap", &["data", "binaryData"]),
    ("", "Secret", &["data", "stringData"]),
];

/// Refuse a non-string value in a field that is a map of strings, as kube-apiserver's decoder
/// does (400, "cannot be handled as a ConfigMap").
fn check_string_maps(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
    let mut fields: Vec<(&str, &str)> = vec![("metadata", "annotations"), ("metadata", "labels")];
    if let Some((_, _, own)) = STRING_MAPS
        .iter()
        .find(|(group, kind, _)| rt.group == *group && rt.kind == *kind)
    {
        fields.extend(own.iter().map(|f| ("", *f)));
    }
    for (parent, field) in fields {
        let holder = if parent.is_empty() {
            Some(object)
        } else {
            object.get(parent)
        };
        let Some(value) = holder.and_then(|h| h.get(field)) else {
            continue;
        };
        let go_type = |v: &Value| match v {
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            _ => "string",
        };
        let path = if parent.is_empty() {
            format!("{}.{field}", rt.kind)
        } else {
            format!("{}.{parent}.{field}", rt.kind)
        };
        let problem = match value {
            Value::Null => None,
            Value::Object(map) => map
                .values()
                .find(|v| !v.is_string() && !v.is_null())
                .map(|v| {
                    format!(
                        "cannot unmarshal {} into Go struct field {path} of type string",
                        go_type(v)
                    )
                }),
            other => Some(format!(
                "cannot unmarshal {} into Go struct field {path} of type map[string]string",
                go_type(other)
            )),
        };
        if let Some(problem) = problem {
            return Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: json: {problem}",
                kind = rt.kind,
                version = rt.version
            )));
        }
    }
    Ok(())
}

/// What `generation` tracks: everything but `metadata`, and but `status` when the kind has a
/// status subresource.
fn spec_part(rt: &ResourceType, object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        if rt.status_subresource {
            map.remove("status");
        }
    }
    copy
}

/// Kinds whose objects carry `metadata.generation`: those with a spec and a status subresource,
/// and every custom resource.
fn tracks_generation(rt: &ResourceType) -> bool {
    rt.status_subresource || rt.schema.is_some()
}

/// Random suffix for `generateName`, from the alphabet kube-apiserver uses.
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect()
}

impl Store {
    /// An empty in-memory store serving the types in `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self::with_history(registry, DEFAULT_HISTORY)
    }

    /// Like [`new`](Self::new), keeping `history_limit` changes for resuming watches.
    pub fn with_history(registry: Arc<Registry>, history_limit: usize) -> Self {
        let (feed, _) = broadcast::channel(WATCH_BUFFER);
        Store {
            registry,
            state: Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 0,
                persistence: None,
                closed: false,
            }),
            feed,
            history_limit: history_limit.max(1),
            watches_started: Mutex::new(BTreeMap::new()),
        }
    }

    /// A store backed by `persistence`: its objects are loaded (CRDs first, so their types are
    /// served) and every write is saved before it is acknowledged. Watches cannot resume from
    /// before the restart; they get 410 Gone and relist.
    pub fn open(registry: Arc<Registry>, persistence: Persistence) -> Result<Self, ApiError> {
        let (rv, objects) = persistence.load()?;
        let mut store = Self::new(registry);
        {
            let state = store.state.get_mut().unwrap_or_else(|e| e.into_inner());
            state.persistence = Some(persistence);
            state.rv = rv;
            state.compacted = rv;
            for (key, object) in objects {
                if key.resource == "apiextensions.k8s.io/customresourcedefinitions"
                    && let Err(err) = store.registry.put_crd(&object)
                {
                    tracing::warn!("stored CRD {} is not servable: {err}", key.name);
                }
                state.objects.insert(key, Arc::new(object));
            }
        }
        Ok(store)
    }

    /// How many watches of `group`'s `plural` resource were started (`""` is the core group):
    /// how a test sees that clients share one watch per kind.
    pub fn watches_started(&self, group: &str, plural: &str) -> u64 {
        let key = format!("{group}/{plural}");
        self.watches_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// Refuse further writes and release the database, so the data directory can be reopened
    /// (a restart) even while requests or watches still hold the store.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.persistence = None;
    }

    /// The served types.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every mutation completes under the lock before it can panic, so a poisoned lock still
        // guards consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The object as served at `rt`'s version.
    fn served(rt: &ResourceType, object: &Value) -> Value {
        let mut out = object.clone();
        let api_version = rt.api_version();
        if out.get("apiVersion").and_then(Value::as_str) != Some(api_version.as_str()) {
            out["apiVersion"] = json!(api_version);
        }
        out
    }

    /// Apply one write under the lock: persist, store, record and broadcast. Returns the stored
    /// object (for a removal, the final state with its new resourceVersion).
    fn write(&self, state: &mut State, key: Key, write: Write) -> Result<Arc<Value>, ApiError> {
        if state.closed {
            return Err(ApiError::unavailable("the API server is shutting down"));
        }
        let rv = state.rv + 1;
        let old = state.objects.get(&key).cloned();
        let (change, object) = match write {
            Write::Put(mut object) => {
                metadata_mut(&mut object).insert("resourceVersion".into(), json!(rv.to_string()));
                let change = if old.is_some() {
                    ChangeType::Modified
                } else {
                    ChangeType::Added
                };
                (change, object)
            }
            Write::Remove => {
                let Some(old) = &old else {
                    return Err(ApiError::internal(format!(
                        "removing a missing object {key:?}"
                    )));
                };
                let mut last = (**old).clone();
                metadata_mut(&mut last).insert("resourceVersion".into(), json!(rv.to_string()));
                (ChangeType::Deleted, last)
            }
        };
        if let Some(persistence) = &state.persistence {
            match change {
                ChangeType::Deleted => persistence.remove(&key, rv)?,
                _ => persistence.put(&key, &object, rv)?,
            }
        }
        let object = Arc::new(object);
        state.rv = rv;
        match change {
            ChangeType::Deleted => state.objects.remove(&key),
            _ => state.objects.insert(key.clone(), object.clone()),
        };
        let change = Arc::new(Change {
            rv,
            change,
            key,
            object: object.clone(),
            old,
        });
        state.history.push_back(change.clone());
        while state.history.len() > self.history_limit {
            if let Some(dropped) = state.history.pop_front() {
                state.compacted = dropped.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.feed.send(change);
        Ok(object)
    }

    /// Get one object.
    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let key = Key::new(rt, namespace, name);
        self.lock()
            .objects
            .get(&key)
            .map(|o| Self::served(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// List objects, optionally one page of `limit` after `continue_token`.
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let state = self.lock();
        let resource = rt.storage_key();
        // Every page reports the first page's resourceVersion, so a watch from it replays what
        // changed while the pages were read; once that version is compacted the list must restart.
        let (start, list_rv) = match continue_token {
            Some(token) => {
                let (key, rv) = decode_continue(token)?;
                if rv < state.compacted {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                    ));
                }
                (Some(key), rv)
            }
            None => (None, state.rv),
        };
        let mut matching = state
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource)
            .filter(|(k, _)| namespace.is_none_or(|ns| k.namespace == ns))
            .filter(|(k, _)| start.as_ref().is_none_or(|s| *k > s))
            .filter(|(_, o)| labels.matches_object(o) && fields.matches_object(o));
        let mut items = Vec::new();
        let mut last = None;
        for (key, object) in matching.by_ref() {
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                // One more exists: there is a next page.
                let remaining = 1 + matching.count();
                let token = last.map(|k: &Key| encode_continue(k, list_rv));
                return Ok(ListPage {
                    items,
                    resource_version: list_rv,
                    continue_token: token,
                    remaining: Some(remaining),
                });
            }
            items.push(Self::served(rt, object));
            last = Some(key);
        }
        Ok(ListPage {
            items,
            resource_version: list_rv,
            continue_token: None,
            remaining: None,
        })
    }

    /// Start a watch of `rt`'s objects (filtering by namespace and selectors is the caller's).
    pub fn watch(&self, rt: &ResourceType, from: WatchFrom) -> Result<WatchStart, ApiError> {
        let resource = rt.storage_key();
        let state = self.lock();
        let backlog = match from {
            WatchFrom::Now => state
                .objects
                .iter()
                .filter(|(k, _)| k.resource == resource)
                .map(|(k, o)| {
                    Arc::new(Change {
                        rv: meta_str(o, "resourceVersion")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(state.rv),
                        change: ChangeType::Added,
                        key: k.clone(),
                        object: o.clone(),
                        old: None,
                    })
                })
                .collect(),
            WatchFrom::After(rv) => {
                if rv > state.rv {
                    return Err(ApiError::too_large_resource_version(rv, state.rv));
                }
                if rv < state.compacted {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        state.compacted + 1
                    )));
                }
                state
                    .history
                    .iter()
                    .filter(|c| c.rv > rv && c.key.resource == resource)
                    .cloned()
                    .collect()
            }
        };
        *self
            .watches_started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource)
            .or_insert(0) += 1;
        Ok(WatchStart {
            backlog,
            feed: self.feed.subscribe(),
            resource_version: state.rv,
        })
    }

    /// Check the namespace of a namespaced write exists (and, for creates, is not terminating).
    fn check_namespace(
        state: &State,
        rt: &ResourceType,
        namespace: &str,
        creating: bool,
    ) -> Result<(), ApiError> {
        if !rt.namespaced {
            return Ok(());
        }
        match state.objects.get(&Key::namespace_key(namespace)) {
            None => Err(ApiError::not_found("", "namespaces", namespace)),
            Some(ns) if creating && ns.pointer("/metadata/deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(format!(
                    "{} is forbidden: unable to create new content in namespace {namespace} because it is being terminated",
                    rt.plural
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// A body of another kind (or API group) than the URL names is a 400, as kube-apiserver's
    /// "X cannot be handled as a Y".
    fn check_type(rt: &ResourceType, object: &Value) -> Result<(), ApiError> {
        let kind = object.get("kind").and_then(Value::as_str);
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        let group = api_version.map(|v| v.rsplit_once('/').map_or("", |(g, _)| g));
        if kind.is_some_and(|k| k != rt.kind) || group.is_some_and(|g| g != rt.group) {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}",
                kind.unwrap_or("object"),
                api_version.unwrap_or(""),
                rt.kind
            )));
        }
        Ok(())
    }

    /// Validate the parts of an object every write checks: kind, names, schema.
    fn validate(&self, rt: &ResourceType, object: &Value, name: &str) -> Result<(), ApiError> {
        let invalid = |field: &str, message: String| {
            ApiError::invalid(&rt.kind, &rt.group, name, vec![(field.to_owned(), message)])
        };
        if let Some(kind) = object.get("kind").and_then(Value::as_str)
            && kind != rt.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the object does not match the resource {} ({})",
                rt.plural, rt.kind
            )));
        }
        let name_ok = if rt.kind == "Namespace" {
            is_dns_label(name)
        } else {
            is_dns_subdomain(name)
        };
        if !name_ok {
            return Err(invalid(
                "metadata.name",
                format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 {} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                    if rt.kind == "Namespace" {
                        "label"
                    } else {
                        "subdomain"
                    }
                ),
            ));
        }
        check_string_maps(rt, object)?;
        if let Some(labels) = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
        {
            for (k, v) in labels {
                let text = format!("{k}={}", v.as_str().unwrap_or("\u{0}"));
                if LabelSelector::parse(&text).is_err() || !v.is_string() {
                    return Err(invalid(
                        &format!("metadata.labels[{k}]"),
                        format!("Invalid value: {v}: not a valid label"),
                    ));
                }
            }
        }
        if let Some(schema) = &rt.schema {
            let causes = schema::validate(schema, object);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&rt.kind, &rt.group, name, causes));
            }
        }
        if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
            crate::resources::types_from_crd(object).map_err(|e| invalid("spec", e.0))?;
        }
        Ok(())
    }

    /// Create an object in `namespace` (from the URL; `None` for cluster-scoped).
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        mut object: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !object.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        Self::check_type(rt, &object)?;
        let body_ns = meta_str(&object, "namespace").map(str::to_owned);
        let namespace = if rt.namespaced {
            match (namespace, body_ns.as_deref()) {
                (Some(url), Some(body)) if url != body => {
                    return Err(ApiError::bad_request(format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({url})"
                    )));
                }
                (Some(ns), _) | (None, Some(ns)) => Some(ns.to_owned()),
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "a namespace is required to create a namespaced object",
                    ));
                }
            }
        } else {
            None
        };
        let mut state = self.lock();
        let name = match meta_str(&object, "name").filter(|n| !n.is_empty()) {
            Some(name) => name.to_owned(),
            None => match meta_str(&object, "generateName").filter(|p| !p.is_empty()) {
                Some(prefix) => format!("{prefix}{}", name_suffix()),
                None => {
                    return Err(ApiError::invalid(
                        &rt.kind,
                        &rt.group,
                        "",
                        vec![(
                            "metadata.name".into(),
                            "Required value: name or generateName is required".into(),
                        )],
                    ));
                }
            },
        };
        if let Some(ns) = &namespace {
            Self::check_namespace(&state, rt, ns, true)?;
        }
        let key = Key::new(rt, namespace.as_deref(), &name);
        if state.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
        }
        {
            let map = object.as_object_mut().expect("checked above");
            map.insert("apiVersion".into(), json!(rt.api_version()));
            map.insert("kind".into(), json!(rt.kind));
            if rt.status_subresource && rt.kind != "CustomResourceDefinition" {
                map.remove("status");
            }
        }
        let meta = metadata_mut(&mut object);
        meta.insert("name".into(), json!(name));
        match &namespace {
            Some(ns) => meta.insert("namespace".into(), json!(ns)),
            None => meta.remove("namespace"),
        };
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now_rfc3339()));
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(field);
        }
        if tracks_generation(rt) {
            meta.insert("generation".into(), json!(1));
        }
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, &mut object);
            schema::prune(schema, &mut object);
        }
        self.validate(rt, &object, &name)?;
        self.prepare_special(rt, &mut object)?;
        if dry_run {
            return Ok(object);
        }
        let stored = self.write(&mut state, key, Write::Put(object))?;
        self.after_write(rt, &stored);
        Ok(Self::served(rt, &stored))
    }

    /// Kind-specific preparation: namespaces get `status.phase`, CRDs their accepted status.
    fn prepare_special(&self, rt: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
        if rt.group.is_empty()
            && rt.kind == "Namespace"
            && object.pointer("/status/phase").is_none()
        {
            object["status"] = json!({"phase": "Active"});
        }
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            let names = object.pointer("/spec/names").cloned().unwrap_or_default();
            let stored: Vec<Value> = object
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect();
            let now = now_rfc3339();
            let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
            object["status"] = json!({
                "acceptedNames": names,
                "storedVersions": stored,
                "conditions": [
                    condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                    condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                ],
            });
        }
        Ok(())
    }

    /// Side effects of a stored object: CRDs serve their types.
    fn after_write(&self, rt: &ResourceType, stored: &Value) {
        if rt.group == "apiextensions.k8s.io"
            && rt.kind == "CustomResourceDefinition"
            && let Err(err) = self.registry.put_crd(stored)
        {
            tracing::warn!(
                "CRD {} is not servable: {err}",
                meta_str(stored, "name").unwrap_or("?")
            );
        }
    }

    /// Replace an object (`status`: through the status subresource).
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        status: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        self.update_locked(&mut state, rt, namespace, name, object, status, dry_run)
    }

    #[allow(clippy::too_many_arguments)]
    fn update_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut new: Value,
        status: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        if status && !rt.status_subresource {
            return Err(ApiError::no_route(&format!("{}/{name}/status", rt.plural)));
        }
        Self::check_type(rt, &new)?;
        if let Some(body_name) = meta_str(&new, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if rt.namespaced
            && let (Some(url), Some(body)) = (namespace, meta_str(&new, "namespace"))
            && url != body
        {
            return Err(ApiError::bad_request(format!(
                "the namespace of the provided object ({body}) does not match the namespace sent on the request ({url})"
            )));
        }
        let key = Key::new(rt, namespace, name);
        let old = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        match meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(rv) if Some(rv) != meta_str(&old, "resourceVersion") => {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name));
            }
            None if rt.schema.is_some() => {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    name,
                    vec![(
                        "metadata.resourceVersion".into(),
                        "Invalid value: 0x0: must be specified for an update".into(),
                    )],
                ));
            }
            _ => {}
        }
        if rt.status_subresource {
            if status {
                // Like kube-apiserver's status strategies: only status changes; spec and
                // metadata stay as stored (bar the resourceVersion checked above).
                let new_status = new.get("status").cloned();
                new = (*old).clone();
                match new_status {
                    Some(s) => new["status"] = s,
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            } else {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
        }
        {
            let map = new.as_object_mut().expect("checked above");
            map.insert("apiVersion".into(), json!(rt.api_version()));
            map.insert("kind".into(), json!(rt.kind));
        }
        // The client never sets generation: it is carried over and bumped here.
        let generation = old.pointer("/metadata/generation").and_then(Value::as_i64);
        let spec_changed = spec_part(rt, &old) != spec_part(rt, &new);
        let old_meta = old.get("metadata").cloned().unwrap_or_default();
        let meta = metadata_mut(&mut new);
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "name",
        ] {
            match old_meta.get(field) {
                Some(v) => meta.insert(field.into(), v.clone()),
                None => meta.remove(field),
            };
        }
        meta.remove("managedFields");
        match generation {
            Some(generation) => {
                let next = if spec_changed {
                    generation.saturating_add(1)
                } else {
                    generation
                };
                meta.insert("generation".into(), json!(next));
            }
            None => {
                meta.remove("generation");
            }
        }
        // A terminating object cannot gain finalizers.
        if old_meta.get("deletionTimestamp").is_some() {
            let old_finalizers: HashSet<String> = old
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect();
            let added = new
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|f| !old_finalizers.contains(f));
            if added {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    name,
                    vec![(
                        "metadata.finalizers".into(),
                        "Forbidden: no new finalizers can be added if the object is being deleted"
                            .into(),
                    )],
                ));
            }
        }
        if let Some(schema) = &rt.schema {
            schema::apply_defaults(schema, &mut new);
            schema::prune(schema, &mut new);
        }
        self.validate(rt, &new, name)?;
        if is_crd_type(rt) && !status {
            let old_scope = old.pointer("/spec/scope");
            if old_scope.is_some() && old_scope != new.pointer("/spec/scope") {
                return Err(ApiError::invalid(
                    &rt.kind,
                    &rt.group,
                    name,
                    vec![(
                        "spec.scope".into(),
                        format!(
                            "Invalid value: {}: field is immutable",
                            new.pointer("/spec/scope").unwrap_or(&Value::Null)
                        ),
                    )],
                ));
            }
            if old.pointer("/metadata/deletionTimestamp").is_none() {
                self.prepare_special(rt, &mut new)?;
                // storedVersions only grows: objects may still be stored in an older version.
                let mut stored: Vec<Value> = old
                    .pointer("/status/storedVersions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for v in new
                    .pointer("/status/storedVersions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    if !stored.contains(&v) {
                        stored.push(v);
                    }
                }
                new["status"]["storedVersions"] = json!(stored);
            }
        }
        if *old == new {
            // Nothing changed: no new resourceVersion, no watch event (as kube-apiserver).
            return Ok(Self::served(rt, &old));
        }
        if dry_run {
            return Ok(new);
        }
        let is_namespace = rt.group.is_empty() && rt.kind == "Namespace";
        if new.pointer("/metadata/deletionTimestamp").is_some()
            && !has_finalizers(&new)
            && !is_namespace
        {
            let stored = self.write(state, key.clone(), Write::Put(new))?;
            self.remove_locked(state, rt, &key)?;
            return Ok(Self::served(rt, &stored));
        }
        let stored = self.write(state, key, Write::Put(new))?;
        self.after_write(rt, &stored);
        Ok(Self::served(rt, &stored))
    }

    /// Patch an object: `apply` computes the patched object from the current one (or `None` when
    /// the object does not exist, for server-side apply's create).
    pub fn patch<F>(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        status: bool,
        dry_run: bool,
        mut apply: F,
    ) -> Result<Value, ApiError>
    where
        F: FnMut(Option<&Value>) -> Result<Option<Value>, ApiError>,
    {
        let key = Key::new(rt, namespace, name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.lock().objects.get(&key).map(|o| Self::served(rt, o));
            let Some(current) = current else {
                return match apply(None)? {
                    Some(mut created) if !status => {
                        match meta_str(&created, "name") {
                            Some(body_name) if body_name != name => {
                                return Err(ApiError::bad_request(format!(
                                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                                )));
                            }
                            Some(_) => {}
                            None => {
                                metadata_mut(&mut created).insert("name".into(), json!(name));
                            }
                        }
                        self.create(rt, namespace, created, dry_run)
                    }
                    _ => Err(ApiError::not_found(&rt.group, &rt.plural, name)),
                };
            };
            // The patch is computed without the store's lock (it can be expensive: a JSON patch
            // may copy megabytes), then written only if the object did not change meanwhile —
            // kube-apiserver's GuaranteedUpdate.
            let current_rv = meta_str(&current, "resourceVersion").map(str::to_owned);
            let mut patched = apply(Some(&current))?
                .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
            // A patch cannot change identity; a stale resourceVersion in the patch is a conflict,
            // a missing one means "whatever is current".
            let patched_rv = meta_str(&patched, "resourceVersion").map(str::to_owned);
            if patched_rv.is_none()
                && let Some(rv) = &current_rv
            {
                metadata_mut(&mut patched).insert("resourceVersion".into(), json!(rv));
            }
            // A patch that names no other version than the one it was applied to is retried on
            // a concurrent change, as kube-apiserver does (up to 5 times).
            let retriable = patched_rv.is_none() || patched_rv == current_rv;
            let mut state = self.lock();
            match self.update_locked(&mut state, rt, namespace, name, patched, status, dry_run) {
                Err(err) if err.code == 409 && retriable && attempt < MAX_PATCH_ATTEMPTS => {
                    continue;
                }
                result => return result,
            }
        }
    }

    /// Delete an object. Returns the object: gone, or marked for deletion when finalizers hold it.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let key = Key::new(rt, namespace, name);
        let current = state
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        for (field, wanted) in [
            ("uid", &options.uid),
            ("resourceVersion", &options.resource_version),
        ] {
            if let Some(wanted) = wanted
                && meta_str(&current, field) != Some(wanted.as_str())
            {
                let problem = format!(
                    "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                    meta_str(&current, field).unwrap_or_default()
                );
                return Err(ApiError::precondition(&rt.group, &rt.plural, name, problem));
            }
        }
        if options.dry_run {
            return Ok(Self::served(rt, &current));
        }
        if options.propagation == Propagation::Orphan
            && let Some(uid) = meta_str(&current, "uid")
        {
            self.orphan_dependents(&mut state, uid)?;
        }
        let result = self.delete_locked(&mut state, rt, &key)?;
        Ok(Self::served(rt, &result))
    }

    /// Delete every object of `rt` in `namespace` matching the selectors.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        dry_run: bool,
    ) -> Result<Vec<Value>, ApiError> {
        let page = self.list(rt, namespace, labels, fields, None, None)?;
        if dry_run {
            return Ok(page.items);
        }
        let mut state = self.lock();
        let mut deleted = Vec::new();
        for item in page.items {
            let key = Key::new(
                rt,
                meta_str(&item, "namespace"),
                meta_str(&item, "name").unwrap_or_default(),
            );
            if state.objects.contains_key(&key) {
                let removed = self.delete_locked(&mut state, rt, &key)?;
                deleted.push(Self::served(rt, &removed));
            }
        }
        Ok(deleted)
    }

    /// Delete under the lock: mark if finalizers hold the object, else remove it.
    fn delete_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
    ) -> Result<Arc<Value>, ApiError> {
        let current = state
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, &key.name))?;
        let is_namespace = rt.group.is_empty() && rt.kind == "Namespace";
        let is_crd = is_crd_type(rt);
        if !(has_finalizers(&current) || is_namespace || is_crd) {
            return self.remove_locked(state, rt, key);
        }
        // Held: a namespace until its contents are gone, a CRD until its custom resources are,
        // anything else until its finalizers are removed.
        let marked = if current.pointer("/metadata/deletionTimestamp").is_none() {
            let mut marked = mark_deleting(&current);
            if is_namespace {
                marked["status"] = json!({"phase": "Terminating"});
            }
            if is_crd
                && let Some(conditions) = marked
                    .pointer_mut("/status/conditions")
                    .and_then(Value::as_array_mut)
            {
                conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now_rfc3339(),
                    "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
            }
            self.write(state, key.clone(), Write::Put(marked))?
        } else {
            current
        };
        if is_namespace {
            self.finalize_namespace(state, &key.name)?;
        } else if is_crd {
            self.finalize_crd(state, &key.name)?;
        }
        Ok(state.objects.get(key).cloned().unwrap_or(marked))
    }

    /// Delete a terminating CRD's custom resources (finalizers respected); remove the CRD and
    /// stop serving its types once none are left.
    fn finalize_crd(&self, state: &mut State, crd_name: &str) -> Result<(), ApiError> {
        let crd_key = Key {
            resource: CRD_RESOURCE.into(),
            namespace: String::new(),
            name: crd_name.to_owned(),
        };
        let Some(crd) = state.objects.get(&crd_key).cloned() else {
            return Ok(());
        };
        let Some(resource) = crd_resource(&crd) else {
            return Ok(());
        };
        let instances: Vec<Key> = state
            .objects
            .keys()
            .filter(|k| k.resource == resource)
            .cloned()
            .collect();
        for key in instances {
            self.remove_or_mark(state, key)?;
        }
        self.collect_garbage(state)?;
        if !state.objects.keys().any(|k| k.resource == resource) {
            self.write(state, crd_key, Write::Remove)?;
            self.registry.remove_crd(crd_name);
        }
        Ok(())
    }

    /// Remove an object for good, then run the consequences: CRD types go away with their
    /// objects, dependents are garbage-collected, a terminating namespace may finish.
    fn remove_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &Key,
    ) -> Result<Arc<Value>, ApiError> {
        let removed = self.write(state, key.clone(), Write::Remove)?;
        if is_crd_type(rt) {
            // Removed outright (not through finalize_crd): stop serving its types.
            self.registry.remove_crd(&key.name);
        } else if rt.schema.is_some() {
            // The last custom resource of a terminating CRD lets the CRD go.
            let crd_name = format!("{}.{}", rt.plural, rt.group);
            let crd_key = Key {
                resource: CRD_RESOURCE.into(),
                namespace: String::new(),
                name: crd_name.clone(),
            };
            if state
                .objects
                .get(&crd_key)
                .is_some_and(|c| c.pointer("/metadata/deletionTimestamp").is_some())
            {
                self.finalize_crd(state, &crd_name)?;
            }
        }
        self.collect_garbage(state)?;
        if !key.namespace.is_empty() {
            let ns_key = Key::namespace_key(&key.namespace);
            if state
                .objects
                .get(&ns_key)
                .is_some_and(|ns| ns.pointer("/metadata/deletionTimestamp").is_some())
            {
                self.finalize_namespace(state, &key.namespace)?;
            }
        }
        Ok(removed)
    }

    /// Delete a terminating namespace's contents; remove it once they are all gone.
    fn finalize_namespace(&self, state: &mut State, namespace: &str) -> Result<(), ApiError> {
        let contents: Vec<Key> = state
            .objects
            .keys()
            .filter(|k| k.namespace == namespace)
            .cloned()
            .collect();
        for key in contents {
            self.remove_or_mark(state, key)?;
        }
        let remaining = state.objects.keys().any(|k| k.namespace == namespace);
        let ns_key = Key::namespace_key(namespace);
        if !remaining && state.objects.contains_key(&ns_key) {
            self.write(state, ns_key, Write::Remove)?;
        }
        Ok(())
    }

    /// Remove an object, or, when finalizers hold it, mark it for deletion (once).
    fn remove_or_mark(&self, state: &mut State, key: Key) -> Result<(), ApiError> {
        let Some(object) = state.objects.get(&key).cloned() else {
            return Ok(());
        };
        if !has_finalizers(&object) {
            self.write(state, key, Write::Remove)?;
        } else if object.pointer("/metadata/deletionTimestamp").is_none() {
            self.write(state, key, Write::Put(mark_deleting(&object)))?;
        }
        Ok(())
    }

    /// Remove owner references to `uid` from its dependents.
    fn orphan_dependents(&self, state: &mut State, uid: &str) -> Result<(), ApiError> {
        let dependents: Vec<(Key, Arc<Value>)> = state
            .objects
            .iter()
            .filter(|(_, o)| owner_uids(o).any(|u| u == uid))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        for (key, object) in dependents {
            let mut orphan = (*object).clone();
            if let Some(refs) = orphan
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            }
            self.write(state, key, Write::Put(orphan))?;
        }
        Ok(())
    }

    /// Background garbage collection: delete objects all of whose owners are gone.
    fn collect_garbage(&self, state: &mut State) -> Result<(), ApiError> {
        loop {
            let uids: HashSet<&str> = state
                .objects
                .values()
                .filter_map(|o| meta_str(o, "uid"))
                .collect();
            let garbage: Vec<Key> = state
                .objects
                .iter()
                .filter(|(_, o)| {
                    let mut owners = owner_uids(o).peekable();
                    owners.peek().is_some() && owners.all(|u| !uids.contains(u))
                })
                .filter(|(_, o)| o.pointer("/metadata/deletionTimestamp").is_none())
                .map(|(k, _)| k.clone())
                .collect();
            if garbage.is_empty() {
                return Ok(());
            }
            for key in garbage {
                self.remove_or_mark(state, key)?;
            }
        }
    }
}

/// Storage key prefix of CRD objects.
const CRD_RESOURCE: &str = "apiextensions.k8s.io/customresourcedefinitions";

fn is_crd_type(rt: &ResourceType) -> bool {
    rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition"
}

/// The storage key prefix (`group/plural`) of a CRD's custom resources.
fn crd_resource(crd: &Value) -> Option<String> {
    let group = crd.pointer("/spec/group").and_then(Value::as_str)?;
    let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str)?;
    Some(format!("{group}/{plural}"))
}

/// An object marked for deletion, as kube-apiserver's `markAsDeleting`: `deletionTimestamp`
/// set, grace period 0, and `generation` bumped where the kind tracks it.
fn mark_deleting(object: &Value) -> Value {
    let mut marked = object.clone();
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let meta = metadata_mut(&mut marked);
    meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if let Some(generation) = generation.filter(|g| *g > 0) {
        meta.insert("generation".into(), json!(generation.saturating_add(1)));
    }
    marked
}

fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
}

/// A continue token: the list's resourceVersion and the last key returned.
fn encode_continue(key: &Key, rv: u64) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{rv}\0{}", key.encode()))
}

fn decode_continue(token: &str) -> Result<(Key, u64), ApiError> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| {
            let (rv, key) = text.split_once('\0')?;
            Some((Key::decode(key)?, rv.parse().ok()?))
        })
        .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))
}
