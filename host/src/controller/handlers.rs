//! Event handlers and predicates: which reconcile requests a watch event on some kind causes, as
//! controller-runtime's `For`, `Owns`, `Watches` and predicates decide.
//!
//! - `for`: the object itself, after the manifest's predicates.
//! - `owns`: the object's controller owner (`ownerReferences[].controller: true`), if it is of
//!   the `for` kind; in the object's namespace.
//! - `watches`: a fixed request (`mapTo`), or the request named by a label (`mapByLabel`).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::cluster::Gvk;
use crate::manifest::{EventKind, Manifest, Predicate};
use crate::selector::{LabelSelector, object_labels};

/// The key of an object to reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// Namespace; `None` for cluster-scoped objects and namespace-less requests.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl Request {
    /// A request for `name` in `namespace`.
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Request {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

/// One watch event as the handlers see it.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    /// What happened.
    pub kind: EventKind,
    /// The object (for a delete: its last state).
    pub object: &'a Value,
    /// For an update: the previous state.
    pub old: Option<&'a Value>,
}

/// How a watched kind maps to requests.
#[derive(Clone, Debug, PartialEq)]
enum Mapping {
    Fixed(Request),
    Label {
        key: String,
        namespace: Option<String>,
    },
}

/// A guest's event handlers, built from its manifest.
#[derive(Clone, Debug)]
pub struct Handlers {
    for_kind: Option<Gvk>,
    owns: Vec<Gvk>,
    watches: Vec<(Gvk, Mapping)>,
    predicates: Vec<CompiledPredicate>,
}

#[derive(Clone, Debug)]
enum CompiledPredicate {
    Changed(&'static str),
    Labels(LabelSelector),
    Events(Vec<EventKind>),
}

fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a Value> {
    object.get("metadata")?.get(field)
}

fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    meta(object, field)?.as_str()
}

impl CompiledPredicate {
    fn allows(&self, event: &Event<'_>) -> bool {
        match self {
            // Change predicates filter updates only, as controller-runtime's do.
            CompiledPredicate::Changed(field) => match (event.kind, event.old) {
                (EventKind::Update, Some(old)) => meta(old, field) != meta(event.object, field),
                _ => true,
            },
            CompiledPredicate::Labels(selector) => selector.matches_object(event.object),
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
                Predicate::GenerationChanged => CompiledPredicate::Changed("generation"),
                Predicate::LabelsChanged => CompiledPredicate::Changed("labels"),
                Predicate::AnnotationsChanged => CompiledPredicate::Changed("annotations"),
                Predicate::ResourceVersionChanged => CompiledPredicate::Changed("resourceVersion"),
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
                let mapping = match (&w.map_to, &w.map_by_label) {
                    (Some(r), _) => Mapping::Fixed(Request::new(r.namespace.as_deref(), &r.name)),
                    (None, Some(l)) => Mapping::Label {
                        key: l.key.clone(),
                        namespace: l.namespace.clone(),
                    },
                    (None, None) => return None,
                };
                Some((w.kind_ref().gvk(), mapping))
            })
            .collect();
        Handlers {
            for_kind: spec.for_kind.as_ref().map(|k| k.gvk()),
            owns: spec.owns.iter().map(|k| k.gvk()).collect(),
            watches,
            predicates,
        }
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

    /// The requests an event on an object of kind `gvk` causes (deduplicated, sorted).
    pub fn requests(&self, gvk: &Gvk, event: &Event<'_>) -> Vec<Request> {
        let mut out = BTreeMap::new();
        let namespace = meta_str(event.object, "namespace");
        if self.for_kind.as_ref() == Some(gvk)
            && self.predicates.iter().all(|p| p.allows(event))
            && let Some(name) = meta_str(event.object, "name")
        {
            out.insert(Request::new(namespace, name), ());
        }
        if self.owns.contains(gvk)
            && let Some(owner) = self.controller_owner(event.object)
        {
            out.insert(Request::new(namespace, &owner), ());
        }
        for (watched, mapping) in &self.watches {
            if watched != gvk {
                continue;
            }
            match mapping {
                Mapping::Fixed(request) => {
                    out.insert(request.clone(), ());
                }
                Mapping::Label {
                    key,
                    namespace: fixed,
                } => {
                    if let Some(name) = object_labels(event.object).get(key) {
                        let ns = fixed.as_deref().or(namespace);
                        out.insert(Request::new(ns, name), ());
                    }
                }
            }
        }
        out.into_keys().collect()
    }

    /// The name of the object's controller owner, if it is of the `for` kind.
    fn controller_owner(&self, object: &Value) -> Option<String> {
        let for_kind = self.for_kind.as_ref()?;
        meta(object, "ownerReferences")?
            .as_array()?
            .iter()
            .filter(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
            .find(|r| {
                let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or("");
                let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                // Any version of the `for` kind's group counts, as controller-runtime does.
                Gvk::from_api_version(api_version, kind).group == for_kind.group
                    && kind == for_kind.kind
            })
            .and_then(|r| r.get("name")?.as_str().map(str::to_owned))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;

    fn handlers(spec: &str) -> Handlers {
        let text = format!(
            "apiVersion: krec.dev/v1alpha1\nkind: Reconciler\nmetadata: {{name: t}}\nspec:\n  module: x.wasm\n{spec}"
        );
        Handlers::from_manifest(&Manifest::parse(Path::new("t.yaml"), &text).expect("manifest"))
    }

    fn rs(generation: i64, labels: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web", "namespace": "default", "generation": generation, "labels": labels, "resourceVersion": "1"}})
    }

    fn ev<'a>(kind: EventKind, object: &'a Value, old: Option<&'a Value>) -> Event<'a> {
        Event { kind, object, old }
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

        let owned = json!({"metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}});
        let pod = Gvk::new("", "v1", "Pod");
        assert_eq!(
            h.requests(&pod, &ev(EventKind::Delete, &owned, None)),
            [Request::new(Some("default"), "web")]
        );
        let not_controller = json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]}});
        assert!(
            h.requests(&pod, &ev(EventKind::Create, &not_controller, None))
                .is_empty()
        );
        let other_kind = json!({"metadata": {"name": "p", "namespace": "default", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "u", "controller": true}]}});
        assert!(
            h.requests(&pod, &ev(EventKind::Create, &other_kind, None))
                .is_empty()
        );

        let cm = json!({"metadata": {"name": "any", "namespace": "x"}});
        assert_eq!(
            h.requests(
                &Gvk::new("", "v1", "ConfigMap"),
                &ev(EventKind::Update, &cm, Some(&cm))
            ),
            [Request::new(Some("bbb"), "abc")]
        );
        let secret =
            json!({"metadata": {"name": "s", "namespace": "x", "labels": {"app": "shop"}}});
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
        let with = |annotations: Value, rv: &str| {
            let mut object = rs(1, json!({}));
            object["metadata"]["annotations"] = annotations;
            object["metadata"]["resourceVersion"] = json!(rv);
            object
        };
        let annotations = handlers(
            "  for: {apiVersion: apps/v1, kind: ReplicaSet}\n  predicates: [AnnotationsChanged]\n",
        );
        let old = with(json!({"a": "1"}), "1");
        let same = with(json!({"a": "1"}), "2");
        let changed = with(json!({"a": "2"}), "3");
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
