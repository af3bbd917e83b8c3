//! Event handlers and predicates: which reconcile requests a watch event on some kind causes, as
//! controller-runtime's `For`, `Owns`, `Watches` and predicates decide.
//!
//! - `for`: the object itself, after the manifest's predicates.
//! - `owns`: the object's controller owner (`ownerReferences[].controller: true`), if it is of
//!   the `for` kind; in the object's namespace.
//! - `watches`: a fixed request (`mapTo`), the request named by a label or annotation
//!   (`mapByLabel`, `mapByAnnotation`: `name` or `namespace/name`), the object's namespace
//!   (`mapToNamespace`), its owners of a kind (`mapToOwner`), or what the guest's `map` export
//!   returns (`mapByGuest`, run by the controller, not here).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::queue::Trigger;
use crate::cluster::cache::Event;
use crate::manifest::{Manifest, Predicate};
use krec_core::selector::LabelSelector;
use krec_core::{EventKind, Gvk};

/// The labels of an object without any.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    meta.labels.as_ref().unwrap_or(&NO_LABELS)
}

/// The key of an object to reconcile: the workspace's one object key.
pub type Request = krec_core::ObjectKey;

/// A metadata field a change predicate compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Generation,
    Labels,
    Annotations,
    ResourceVersion,
}

impl Field {
    /// Whether `field` differs between `old` and `new`.
    fn changed(self, old: &ObjectMeta, new: &ObjectMeta) -> bool {
        match self {
            Field::Generation => old.generation != new.generation,
            Field::Labels => old.labels != new.labels,
            Field::Annotations => old.annotations != new.annotations,
            Field::ResourceVersion => old.resource_version != new.resource_version,
        }
    }
}

/// How a watched kind maps to requests.
#[derive(Clone, Debug, PartialEq)]
enum Mapping {
    Fixed(Request),
    Label {
        key: String,
        namespace: Option<String>,
        namespace_key: Option<String>,
    },
    Annotation {
        key: String,
        namespace: Option<String>,
        namespace_key: Option<String>,
    },
    Namespace,
    /// Owners of this kind; cluster-scoped owners are requested without a namespace.
    Owner {
        kind: Gvk,
        cluster_scoped: bool,
    },
    /// The guest's `map` export (run by the controller).
    Guest,
}

/// The request a label or annotation value names: `name`, or `namespace/name`; in `fixed`
/// (the mapping's namespace), else the object's.
fn named_request(value: &str, fixed: Option<&str>, namespace: Option<&str>) -> Option<Request> {
    let (ns, name) = match value.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (fixed.or(namespace), value),
    };
    (!name.is_empty()).then(|| Request::new(ns.filter(|ns| !ns.is_empty()), name))
}

/// A guest's event handlers, built from its manifest.
#[derive(Clone, Debug)]
pub struct Handlers {
    for_kind: Option<Gvk>,
    owns: Vec<Gvk>,
    watches: Vec<(Gvk, Mapping)>,
    predicates: Vec<CompiledPredicate>,
    /// A tenant's namespace: requests elsewhere are dropped.
    confined: Option<String>,
}

#[derive(Clone, Debug)]
enum CompiledPredicate {
    Changed(Field),
    Labels(LabelSelector),
    Events(Vec<EventKind>),
}

impl CompiledPredicate {
    fn allows(&self, event: &Event<'_>) -> bool {
        match self {
            // Change predicates filter updates only, as controller-runtime's do.
            CompiledPredicate::Changed(field) => match (event.kind, event.old) {
                (EventKind::Update, Some(old)) => field.changed(old, event.object),
                _ => true,
            },
            CompiledPredicate::Labels(selector) => selector.matches(labels(event.object)),
            CompiledPredicate::Events(kinds) => kinds.contains(&event.kind),
        }
    }
}

impl Handlers {
    /// The handlers a manifest declares. Its label selectors were validated with the manifest.
    pub fn from_manifest(manifest: &Manifest) -> Self {
        let spec = &manifest.spec;
        let predicates = spec
            .predicates
            .iter()
            .map(|p| match p {
                Predicate::GenerationChanged => CompiledPredicate::Changed(Field::Generation),
                Predicate::LabelsChanged => CompiledPredicate::Changed(Field::Labels),
                Predicate::AnnotationsChanged => CompiledPredicate::Changed(Field::Annotations),
                Predicate::ResourceVersionChanged => {
                    CompiledPredicate::Changed(Field::ResourceVersion)
                }
                Predicate::LabelSelector(text) => {
                    CompiledPredicate::Labels(LabelSelector::parse(text).unwrap_or_default())
                }
                Predicate::EventTypes(kinds) => {
                    CompiledPredicate::Events(kinds.iter().copied().collect())
                }
            })
            .collect();
        let watches = spec
            .watches
            .iter()
            .filter_map(|w| {
                let mapping = if let Some(r) = &w.map_to {
                    Mapping::Fixed(Request::new(r.namespace.as_deref(), &r.name))
                } else if let Some(l) = &w.map_by_label {
                    Mapping::Label {
                        key: l.key.clone(),
                        namespace: l.namespace.clone(),
                        namespace_key: l.namespace_key.clone(),
                    }
                } else if let Some(a) = &w.map_by_annotation {
                    Mapping::Annotation {
                        key: a.key.clone(),
                        namespace: a.namespace.clone(),
                        namespace_key: a.namespace_key.clone(),
                    }
                } else if w.map_to_namespace {
                    Mapping::Namespace
                } else if let Some(owner) = &w.map_to_owner {
                    let kind = owner.gvk();
                    // Kubernetes' own cluster-scoped kinds are known here; a custom resource
                    // owner is taken to be namespaced, as a namespaced object's owner usually is.
                    let cluster_scoped =
                        krec_core::kinds::is_builtin_cluster_scoped(&kind.group, &kind.kind);
                    Mapping::Owner {
                        kind,
                        cluster_scoped,
                    }
                } else if w.map_by_guest {
                    Mapping::Guest
                } else {
                    return None;
                };
                Some((w.kind_ref().gvk(), mapping))
            })
            .collect();
        Handlers {
            for_kind: spec.for_kind.as_ref().map(|k| k.gvk()),
            owns: spec.owns.iter().map(|k| k.gvk()).collect(),
            watches,
            predicates,
            confined: manifest.tenant.clone(),
        }
    }

    /// Whether `request` may be reconciled: anything, but for a guest confined to a namespace
    /// (see [`crate::manifest::tenancy`]), only requests in it.
    pub fn admits(&self, request: &Request) -> bool {
        self.confined
            .as_deref()
            .is_none_or(|ns| request.namespace.as_deref() == Some(ns))
    }

    /// Every kind these handlers need watched.
    pub fn watched_kinds(&self) -> Vec<Gvk> {
        let mut kinds: Vec<Gvk> = self.for_kind.iter().cloned().collect();
        kinds.extend(self.owns.iter().cloned());
        kinds.extend(self.watches.iter().map(|(g, _)| g.clone()));
        kinds.sort();
        kinds.dedup();
        kinds
    }

    /// Whether events of `gvk` go to the guest's `map` export (a watch with `mapByGuest`).
    pub fn maps_by_guest(&self, gvk: &Gvk) -> bool {
        self.watches
            .iter()
            .any(|(watched, mapping)| watched == gvk && *mapping == Mapping::Guest)
    }

    /// The requests an event on an object of kind `gvk` causes (deduplicated, sorted), but
    /// for those of the guest's `map` export (see [`maps_by_guest`](Self::maps_by_guest)):
    /// [`triggered`](Self::triggered) without the triggers, for the tests.
    #[cfg(test)]
    pub fn requests(&self, gvk: &Gvk, event: &Event<'_>) -> Vec<Request> {
        self.triggered(gvk, event)
            .into_iter()
            .map(|(request, _)| request)
            .collect()
    }

    /// The requests an event on an object of kind `gvk` causes (deduplicated, sorted), but
    /// for those of the guest's `map` export (see [`maps_by_guest`](Self::maps_by_guest)),
    /// each with the handler that asked for it: the event on a `for` object itself, its owner,
    /// or a mapping (the first, when several name one request).
    pub fn triggered(&self, gvk: &Gvk, event: &Event<'_>) -> Vec<(Request, Trigger)> {
        let mut out = BTreeMap::new();
        let namespace = event.object.namespace.as_deref();
        if self.for_kind.as_ref() == Some(gvk)
            && self.predicates.iter().all(|p| p.allows(event))
            && let Some(name) = event.object.name.as_deref()
        {
            out.insert(Request::new(namespace, name), Trigger::Event);
        }
        // An update maps its old state too, as controller-runtime's owner and map handlers do:
        // an owner or target the object left must hear of it.
        self.mapped(gvk, event.object, &mut out);
        if let (EventKind::Update, Some(old)) = (event.kind, event.old) {
            self.mapped(gvk, old, &mut out);
        }
        out.into_iter().filter(|(r, _)| self.admits(r)).collect()
    }

    /// The requests `owns` and `watches` map `object` (of kind `gvk`) to, into `out` (a request
    /// there already keeps its trigger).
    fn mapped(&self, gvk: &Gvk, object: &ObjectMeta, out: &mut BTreeMap<Request, Trigger>) {
        let namespace = object.namespace.as_deref();
        let mut add = |request: Request, trigger: Trigger| {
            out.entry(request).or_insert(trigger);
        };
        if self.owns.contains(gvk)
            && let Some(owner) = self.controller_owner(object)
        {
            add(Request::new(namespace, &owner), Trigger::Owner);
        }
        for (watched, mapping) in &self.watches {
            if watched != gvk {
                continue;
            }
            match mapping {
                Mapping::Fixed(request) => add(request.clone(), Trigger::Map),
                Mapping::Label {
                    key,
                    namespace: fixed,
                    namespace_key,
                } => {
                    let labels = labels(object);
                    let fixed = namespace_key
                        .as_ref()
                        .and_then(|k| labels.get(k))
                        .or(fixed.as_ref());
                    if let Some(request) = labels.get(key).and_then(|value| {
                        named_request(value, fixed.map(String::as_str), namespace)
                    }) {
                        add(request, Trigger::Map);
                    }
                }
                Mapping::Annotation {
                    key,
                    namespace: fixed,
                    namespace_key,
                } => {
                    let annotations = object.annotations.as_ref();
                    let fixed = namespace_key
                        .as_ref()
                        .and_then(|k| annotations.and_then(|a| a.get(k)))
                        .or(fixed.as_ref());
                    if let Some(request) = annotations.and_then(|a| a.get(key)).and_then(|value| {
                        named_request(value, fixed.map(String::as_str), namespace)
                    }) {
                        add(request, Trigger::Map);
                    }
                }
                Mapping::Namespace => {
                    if let Some(ns) = namespace {
                        add(Request::new(None, ns), Trigger::Map);
                    }
                }
                Mapping::Owner {
                    kind: owner,
                    cluster_scoped,
                } => {
                    let namespace = if *cluster_scoped { None } else { namespace };
                    for reference in object.owner_references.iter().flatten() {
                        // Any version of the owner kind's group counts, as for `owns`.
                        if reference.kind == owner.kind
                            && Gvk::from_api_version(&reference.api_version, &reference.kind).group
                                == owner.group
                        {
                            add(Request::new(namespace, &reference.name), Trigger::Owner);
                        }
                    }
                }
                Mapping::Guest => {}
            }
        }
    }

    /// The name of the object's controller owner, if it is of the `for` kind.
    fn controller_owner(&self, object: &ObjectMeta) -> Option<String> {
        let for_kind = self.for_kind.as_ref()?;
        object
            .owner_references
            .as_ref()?
            .iter()
            .filter(|r| r.controller == Some(true))
            .find(|r| {
                // Any version of the `for` kind's group counts, as controller-runtime does.
                Gvk::from_api_version(&r.api_version, &r.kind).group == for_kind.group
                    && r.kind == for_kind.kind
            })
            .map(|r| r.name.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use serde_json::Value;

    use super::*;

    fn handlers(spec: &str) -> Handlers {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: x.wasm\n{spec}"
        );
        Handlers::from_manifest(&Manifest::parse(Path::new("t.yaml"), &text).expect("manifest"))
    }

    fn rs(generation: i64, labels: Value) -> ObjectMeta {
        meta(&json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "generation": generation, "labels": labels, "resourceVersion": "1"}}))
    }

    /// The metadata of an object written as JSON.
    fn meta(object: &Value) -> ObjectMeta {
        serde_json::from_value(object["metadata"].clone()).expect("metadata")
    }

    fn ev<'a>(kind: EventKind, object: &'a ObjectMeta, old: Option<&'a ObjectMeta>) -> Event<'a> {
        Event {
            kind,
            object,
            old,
            cached: None,
            old_cached: None,
            received: std::time::Instant::now(),
        }
    }

    /// A label's value cannot say `namespace/name`: a second label names the namespace.
    #[test]
    fn a_namespace_key_should_map_labels_across_namespaces() {
        let h = handlers(
            "  for: {apiVersion: apps/v1, kind: Deployment}\n  watches:\n    - {apiVersion: v1, kind: Secret, mapByLabel: {key: app, namespaceKey: team, namespace: shared}}\n    - {apiVersion: v1, kind: ConfigMap, mapByAnnotation: {key: example.com/app, namespaceKey: example.com/team}}\n",
        );
        let secret = |labels: Value| {
            meta(&json!({"metadata": {"name": "s", "namespace": "vault", "labels": labels}}))
        };
        let secret_gvk = Gvk::new("", "v1", "Secret");
        assert_eq!(
            h.requests(
                &secret_gvk,
                &ev(
                    EventKind::Create,
                    &secret(json!({"app": "web", "team": "team-a"})),
                    None
                )
            ),
            [Request::new(Some("team-a"), "web")]
        );
        // Without the namespace label: the mapping's namespace.
        assert_eq!(
            h.requests(
                &secret_gvk,
                &ev(EventKind::Create, &secret(json!({"app": "web"})), None)
            ),
            [Request::new(Some("shared"), "web")]
        );
        let cm = meta(&json!({"metadata": {"name": "c", "namespace": "ns1",
            "annotations": {"example.com/app": "web", "example.com/team": "team-b"}}}));
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "ConfigMap"),
                &ev(EventKind::Create, &cm, None)
            ),
            [Request::new(Some("team-b"), "web")]
        );
    }

    #[test]
    fn declarative_mappings_should_name_namespaces_owners_and_annotated_targets() {
        let h = handlers(
            "  for: {apiVersion: v1, kind: Namespace}\n  watches:\n    - {apiVersion: apps/v1, kind: Deployment, mapToNamespace: true}\n    - {apiVersion: v1, kind: Pod, mapToOwner: {apiVersion: apps/v1, kind: ReplicaSet}}\n    - {apiVersion: v1, kind: ConfigMap, mapByAnnotation: {key: example.com/target}}\n    - {apiVersion: v1, kind: Secret, mapByLabel: {key: target, namespace: fixed}}\n    - {apiVersion: v1, kind: Service, mapByGuest: true}\n",
        );
        let deployment = meta(&json!({"metadata": {"name": "web", "namespace": "team-a"}}));
        assert_eq!(
            h.requests(
                &Gvk::new("apps", "v1", "Deployment"),
                &ev(EventKind::Create, &deployment, None)
            ),
            [Request::new(None, "team-a")]
        );
        // A cluster-scoped object has no namespace to map to.
        let cluster_scoped = meta(&json!({"metadata": {"name": "web"}}));
        assert!(
            h.requests(
                &Gvk::new("apps", "v1", "Deployment"),
                &ev(EventKind::Create, &cluster_scoped, None)
            )
            .is_empty()
        );
        // Every owner of the kind, controller or not; other kinds are ignored.
        let pod = meta(
            &json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "3"}]}}),
        );
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "Pod"),
                &ev(EventKind::Update, &pod, None)
            ),
            [
                Request::new(Some("default"), "a"),
                Request::new(Some("default"), "b")
            ]
        );
        // A value names `name` (in the object's namespace) or `namespace/name`.
        let cm = |value: &str| {
            meta(&json!({"metadata": {"name": "c", "namespace": "ns1",
                "annotations": {"example.com/target": value}}}))
        };
        let cm_gvk = Gvk::new("", "v1", "ConfigMap");
        assert_eq!(
            h.requests(&cm_gvk, &ev(EventKind::Create, &cm("web"), None)),
            [Request::new(Some("ns1"), "web")]
        );
        assert_eq!(
            h.requests(&cm_gvk, &ev(EventKind::Create, &cm("other/web"), None)),
            [Request::new(Some("other"), "web")]
        );
        assert_eq!(
            h.requests(&cm_gvk, &ev(EventKind::Create, &cm("/node-1"), None)),
            [Request::new(None, "node-1")]
        );
        assert!(
            h.requests(&cm_gvk, &ev(EventKind::Create, &cm("ns/"), None))
                .is_empty()
        );
        let secret = meta(
            &json!({"metadata": {"name": "s", "namespace": "ns1", "labels": {"target": "db"}}}),
        );
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "Secret"),
                &ev(EventKind::Create, &secret, None)
            ),
            [Request::new(Some("fixed"), "db")]
        );
        // An update maps the state the object left too: the owner and the target it named.
        let moved = meta(
            &json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2"}]}}),
        );
        let before = meta(
            &json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1"}]}}),
        );
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "Pod"),
                &ev(EventKind::Update, &moved, Some(&before))
            ),
            [
                Request::new(Some("default"), "a"),
                Request::new(Some("default"), "b")
            ]
        );
        assert_eq!(
            h.requests(
                &cm_gvk,
                &ev(EventKind::Update, &cm("new"), Some(&cm("old")))
            ),
            [
                Request::new(Some("ns1"), "new"),
                Request::new(Some("ns1"), "old")
            ]
        );
        // Owners of a cluster-scoped kind are requested without a namespace.
        let h2 = handlers(
            "  for: {apiVersion: v1, kind: Namespace}\n  watches:\n    - {apiVersion: v1, kind: ConfigMap, mapToOwner: {apiVersion: v1, kind: Namespace}}\n",
        );
        let owned_by_ns = meta(
            &json!({"metadata": {"name": "c", "namespace": "team", "ownerReferences": [
            {"apiVersion": "v1", "kind": "Namespace", "name": "team", "uid": "3"}]}}),
        );
        assert_eq!(
            h2.requests(&cm_gvk, &ev(EventKind::Create, &owned_by_ns, None)),
            [Request::new(None, "team")]
        );
        // The guest's map function runs in the controller, not here.
        let service = Gvk::new("", "v1", "Service");
        assert!(h.maps_by_guest(&service));
        assert!(!h.maps_by_guest(&cm_gvk));
        assert!(
            h.requests(&service, &ev(EventKind::Create, &secret, None))
                .is_empty()
        );
    }

    /// Each request names the handler that asked for it: the `for` object itself, its owner,
    /// a mapping; the first when several name one request.
    #[test]
    fn each_request_should_name_what_triggered_it() {
        let h = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  owns: [{apiVersion: v1, kind: Pod}]\n  watches:\n    - {apiVersion: v1, kind: Pod, mapByLabel: {key: app}}\n    - {apiVersion: v1, kind: ConfigMap, mapToOwner: {apiVersion: apps/v1, kind: ReplicaSet}}\n    - {apiVersion: apps/v1, kind: ReplicaSet, mapTo: {namespace: default, name: web}}\n",
        );
        let (rs_gvk, pod, cm) = (
            Gvk::new("apps", "v1", "ReplicaSet"),
            Gvk::new("", "v1", "Pod"),
            Gvk::new("", "v1", "ConfigMap"),
        );
        let web = |name: &str| Request::new(Some("default"), name);
        // The `for` object, and its own mapping to itself: the event first.
        assert_eq!(
            h.triggered(&rs_gvk, &ev(EventKind::Create, &rs(1, json!({})), None)),
            [(web("web"), Trigger::Event)]
        );
        // A Pod owned by `web` and labeled for `api`: its owner, and a mapped request.
        let owned = meta(
            &json!({"metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "api"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(
            h.triggered(&pod, &ev(EventKind::Create, &owned, None)),
            [(web("api"), Trigger::Map), (web("web"), Trigger::Owner)]
        );
        // Labeled for its owner too: one request, as its owner's (`owns` comes first).
        let labeled = meta(
            &json!({"metadata": {"name": "web-2", "namespace": "default", "labels": {"app": "web"}, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(
            h.triggered(&pod, &ev(EventKind::Create, &labeled, None)),
            [(web("web"), Trigger::Owner)]
        );
        // `mapToOwner` is an owner's trigger, whether or not the reference is a controller's.
        let config = meta(
            &json!({"metadata": {"name": "c", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]}}),
        );
        assert_eq!(
            h.triggered(&cm, &ev(EventKind::Create, &config, None)),
            [(web("web"), Trigger::Owner)]
        );
        assert_eq!(
            h.requests(&pod, &ev(EventKind::Create, &owned, None)),
            [web("api"), web("web")]
        );
    }

    #[test]
    fn for_owns_and_watches_should_map_to_requests() {
        let h = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  owns: [{apiVersion: v1, kind: Pod}]\n  watches:\n    - {apiVersion: v1, kind: ConfigMap, mapTo: {namespace: bbb, name: abc}}\n    - {apiVersion: v1, kind: Secret, mapByLabel: {key: app}}\n",
        );
        let rs_gvk = Gvk::new("apps", "v1", "ReplicaSet");
        let obj = rs(1, json!({}));
        assert_eq!(
            h.requests(&rs_gvk, &ev(EventKind::Create, &obj, None)),
            [Request::new(Some("default"), "web")]
        );

        let owned = meta(
            &json!({"metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}}),
        );
        let pod = Gvk::new("", "v1", "Pod");
        assert_eq!(
            h.requests(&pod, &ev(EventKind::Delete, &owned, None)),
            [Request::new(Some("default"), "web")]
        );
        let not_controller = meta(
            &json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]}}),
        );
        assert!(
            h.requests(&pod, &ev(EventKind::Create, &not_controller, None))
                .is_empty()
        );
        let other_kind = meta(
            &json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}]}}),
        );
        assert!(
            h.requests(&pod, &ev(EventKind::Create, &other_kind, None))
                .is_empty()
        );

        let cm = meta(&json!({"metadata": {"name": "any", "namespace": "x"}}));
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "ConfigMap"),
                &ev(EventKind::Update, &cm, Some(&cm))
            ),
            [Request::new(Some("bbb"), "abc")]
        );
        let secret =
            meta(&json!({"metadata": {"name": "s", "namespace": "x", "labels": {"app": "shop"}}}));
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "Secret"),
                &ev(EventKind::Create, &secret, None)
            ),
            [Request::new(Some("x"), "shop")]
        );
        assert_eq!(h.watched_kinds().len(), 4);
    }

    #[test]
    fn predicates_should_filter_for_events() {
        let h = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [GenerationChanged]\n",
        );
        let gvk = Gvk::new("apps", "v1", "ReplicaSet");
        let old = rs(1, json!({}));
        let status_only = rs(1, json!({"x": "y"}));
        let spec_change = rs(2, json!({}));
        assert!(
            h.requests(&gvk, &ev(EventKind::Update, &status_only, Some(&old)))
                .is_empty()
        );
        assert_eq!(
            h.requests(&gvk, &ev(EventKind::Update, &spec_change, Some(&old)))
                .len(),
            1
        );
        assert_eq!(
            h.requests(&gvk, &ev(EventKind::Create, &old, None)).len(),
            1,
            "creates always pass"
        );

        let labels = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [LabelsChanged, {labelSelector: \"team=a\"}]\n",
        );
        let a = rs(1, json!({"team": "a"}));
        let a2 = rs(2, json!({"team": "a"}));
        let b = rs(1, json!({"team": "b"}));
        assert!(
            labels
                .requests(&gvk, &ev(EventKind::Update, &a2, Some(&a)))
                .is_empty(),
            "labels unchanged"
        );
        assert_eq!(
            labels
                .requests(&gvk, &ev(EventKind::Update, &a, Some(&b)))
                .len(),
            1
        );
        assert!(
            labels
                .requests(&gvk, &ev(EventKind::Create, &b, None))
                .is_empty(),
            "selector"
        );

        let only_generic = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [{eventTypes: [generic]}]\n",
        );
        assert!(
            only_generic
                .requests(&gvk, &ev(EventKind::Create, &a, None))
                .is_empty()
        );
        assert_eq!(
            only_generic
                .requests(&gvk, &ev(EventKind::Generic, &a, None))
                .len(),
            1
        );
    }
    #[test]
    fn annotation_and_resource_version_predicates_should_filter_updates() {
        let gvk = Gvk::new("apps", "v1", "ReplicaSet");
        let with = |annotations: &[(&str, &str)], rv: &str| {
            let mut object = rs(1, json!({}));
            object.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            object.resource_version = Some(rv.to_owned());
            object
        };
        let annotations = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [AnnotationsChanged]\n",
        );
        let old = with(&[("a", "1")], "1");
        let same = with(&[("a", "1")], "2");
        let changed = with(&[("a", "2")], "3");
        assert!(
            annotations
                .requests(&gvk, &ev(EventKind::Update, &same, Some(&old)))
                .is_empty(),
            "annotations unchanged"
        );
        assert_eq!(
            annotations
                .requests(&gvk, &ev(EventKind::Update, &changed, Some(&old)))
                .len(),
            1
        );
        let versions = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [ResourceVersionChanged]\n",
        );
        assert!(
            versions
                .requests(&gvk, &ev(EventKind::Update, &old, Some(&old)))
                .is_empty(),
            "a resync of an unchanged object"
        );
        assert_eq!(
            versions
                .requests(&gvk, &ev(EventKind::Update, &same, Some(&old)))
                .len(),
            1
        );
    }
}
